//! `dra run --log-format json|text` (docs/operations.md "Logs"): the real binary with a
//! config that needs no network and no privileges (no listener, no peer, no fast path),
//! stopped with SIGTERM as systemd stops it.

use std::{
    process::Command,
    time::{Duration, Instant},
};

mod support;
use support::{TempDir, spawn_dra_run};

const CONFIG: &str = r#"
[global]
origin_host = "dra.lab.example"
origin_realm = "lab.example"
"#;

/// Runs `dra run` with `args` until `ready` is in its stderr (or 20 s), then SIGTERM;
/// returns (exit success, stderr).
fn run_until(args: &[&str], ready: &str) -> (bool, String) {
    let dir = TempDir::new("dra-logfmt-");
    let cfg = dir.0.join("dra.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let log = dir.0.join("stderr");
    let mut child = spawn_dra_run(env!("CARGO_BIN_EXE_dra"), args, &cfg, &log);
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end
        && !std::fs::read_to_string(&log).unwrap().contains(ready)
        && child.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    (status.success(), std::fs::read_to_string(&log).unwrap())
}

#[test]
fn json_logs_are_one_object_per_line_with_level_and_message() {
    let (ok, text) = run_until(&["--log-format", "json"], "diameter agent running");
    assert!(ok, "dra run failed:\n{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for v in &lines {
        assert!(v.is_object(), "{v}");
        for key in ["timestamp", "level", "message", "target"] {
            assert!(v[key].is_string(), "no string {key:?} in {v}");
        }
    }
    let messages: Vec<&str> = lines
        .iter()
        .map(|v| v["message"].as_str().unwrap())
        .collect();
    for m in ["diameter agent running", "SIGTERM"] {
        assert!(messages.contains(&m), "no {m:?} line in {messages:?}");
    }
    // The event's fields sit at the top level.
    let running = lines
        .iter()
        .find(|v| v["message"] == "diameter agent running")
        .unwrap();
    assert_eq!(running["level"], "INFO");
    assert_eq!(running["listeners"], "[]", "{running}");
}

#[test]
fn text_is_the_default_format() {
    let (ok, text) = run_until(&[], "diameter agent running");
    assert!(ok, "dra run failed:\n{text}");
    let line = text
        .lines()
        .find(|l| l.contains("diameter agent running"))
        .unwrap_or_else(|| panic!("no line:\n{text}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        serde_json::from_str::<serde_json::Value>(line).is_err(),
        "{line}"
    );
}

#[test]
fn an_unknown_log_format_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_dra"))
        .args(["run", "--log-format", "xml", "--config", "x.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'xml'"), "{err}");
}
