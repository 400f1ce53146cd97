//! `dra` commands whose output goes to a pipe nobody reads any more (`dra check-config F |
//! head -0`) end quietly, killed by SIGPIPE like `cat`, instead of panicking with a
//! backtrace. The pipe's read end is closed before the command starts, so the first
//! write always meets a closed pipe.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

fn run_into_closed_pipe(args: &[&str]) -> (std::process::ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_dra"))
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run dra");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_quiet_sigpipe(args: &[&str]) {
    let (status, stderr) = run_into_closed_pipe(args);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "dra {args:?} complained about the closed pipe: {stderr}"
    );
    assert_eq!(
        status.signal(),
        Some(libc::SIGPIPE),
        "dra {args:?} should end by SIGPIPE, got {status:?}; stderr: {stderr}"
    );
}

#[test]
fn check_config_into_a_closed_pipe_ends_quietly() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/examples/minimal.toml"
    );
    assert_quiet_sigpipe(&["check-config", file]);
}

#[test]
fn detach_into_a_closed_pipe_ends_quietly() {
    let dir = std::env::temp_dir().join(format!("dra-cli-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pin = dir.to_str().unwrap().to_owned();
    // Nothing pinned there: the command prints one line and succeeds when it can.
    assert_quiet_sigpipe(&["detach", "--pin-dir", &pin]);
    // detach removes an empty pin directory itself.
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
