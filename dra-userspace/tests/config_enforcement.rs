//! Limits that nothing would enforce (docs/config.md, "Which part enforces a limit"):
//! `dra check-config` refuses them with `file:line:column` and the reason, `dra run`
//! refuses to start, and a limit that depends on a command-line flag is a warning for
//! `check-config` and an error for a `dra run` without that flag. Each fixture under
//! `tests/fixtures/unenforced-configs/` is a valid file (`config::load` accepts it)
//! whose `# expect: LINE:COLUMN fragment` lines are exactly the enforcement errors.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dra::config::{self, Setup};
use support::{ConfigToml, TempDir, expectations, toml_files_under};

fn fixtures() -> Vec<PathBuf> {
    toml_files_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unenforced-configs"),
    )
}

fn dra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dra"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// The stderr lines that are config errors (`FILE:L:C: ...`), in order.
fn error_lines<'a>(stderr: &'a str, file: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{file}:")))
        .collect()
}

fn matches(line: &str, file: &str, (l, c, fragment): &(usize, usize, String)) -> bool {
    line.starts_with(&format!("{file}:{l}:{c}: ")) && line.contains(fragment.as_str())
}

#[test]
fn every_unenforced_limit_is_refused_at_its_position() {
    let files = fixtures();
    assert!(files.len() >= 4, "only {} fixtures", files.len());
    let mut problems = String::new();
    for f in &files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f).unwrap();
        let expected = expectations(&text);
        assert!(!expected.is_empty(), "{name} has no `# expect:` line");
        // A valid file: only the enforcement check refuses it.
        if let Err(e) = config::load(f) {
            problems.push_str(&format!("{name}: not a valid file:\n{e}"));
            continue;
        }
        for setup in [Setup::File, Setup::Run { iface: None }] {
            let errors = match config::load_for(f, &setup) {
                Ok(_) => {
                    problems.push_str(&format!("{name}: accepted with {setup:?}\n"));
                    continue;
                }
                Err(e) => e,
            };
            let lines: Vec<String> = errors.errors.iter().map(|e| e.to_string()).collect();
            if lines.len() != expected.len()
                || !lines
                    .iter()
                    .zip(&expected)
                    .all(|(l, x)| matches(l, &name, x))
            {
                problems.push_str(&format!(
                    "{name} ({setup:?}): expected {expected:?}, got:\n{errors}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{problems}");
}

#[test]
fn check_config_and_run_refuse_them_with_exit_code_2() {
    for f in fixtures() {
        let name = f.display().to_string();
        let expected = expectations(&std::fs::read_to_string(&f).unwrap());
        let out = dra(&["check-config", &name]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(out.stdout.is_empty(), "{name}: no \"ok\"");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let lines = error_lines(&stderr, &name);
        assert_eq!(lines.len(), expected.len(), "{name}:\n{stderr}");
        for (l, x) in lines.iter().zip(&expected) {
            assert!(matches(l, &name, x), "{l:?} vs {x:?}");
        }
        // `dra run` stops before touching anything (no root needed to see it).
        let pins = std::env::temp_dir().join(format!("dra-unenforced-{}", std::process::id()));
        let out = dra(&[
            "run",
            "--config",
            &name,
            "--pin-dir",
            pins.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let lines = error_lines(&stderr, &name);
        assert_eq!(lines.len(), expected.len(), "{name}:\n{stderr}");
        for (l, x) in lines.iter().zip(&expected) {
            assert!(matches(l, &name, x), "{l:?} vs {x:?}");
        }
        assert!(stderr.contains("dra run: not started"), "{name}:\n{stderr}");
        assert!(!pins.exists(), "nothing pinned");
    }
}

/// A connection guard is XDP's alone: without `[fast_path] interface`, `check-config`
/// accepts it with a positioned warning (dra run may be given `--iface`), and `dra run`
/// without `--iface` refuses to start.
#[test]
fn a_connection_guard_without_xdp_is_a_warning_then_a_refusal() {
    let tmp = TempDir::new("dra-conn-guard-");
    let dir = &tmp.0;
    let f = dir.join("guard.toml");
    let text = ConfigToml::new("lab.example", &["198.18.1.1:3868"], "").client(
        "pgw1",
        "lab.example",
        &["198.18.1.2"],
        "connection_rate = 10",
    );
    std::fs::write(&f, text.text()).unwrap();
    let name = f.display().to_string();
    let out = dra(&["check-config", &name]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8(out.stdout).unwrap().starts_with("ok\n"));
    assert_eq!(
        stderr,
        format!(
            "warning: {name}:14:19: connection_rate of peer \"pgw1\" is enforced only by XDP, \
             and [fast_path] interface is not set: it applies only if dra run is given --iface\n"
        )
    );
    let out = dra(&[
        "run",
        "--config",
        &name,
        "--pin-dir",
        dir.join("pins").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "{name}:14:19: connection_rate of peer \"pgw1\" is enforced only by XDP, and dra run \
             has no XDP interface (neither --iface nor [fast_path] interface)\n"
        )),
        "{stderr}"
    );
    assert!(!dir.join("pins").exists());
}
