//! The shipped config files are valid and say what the seed scenario says; every
//! broken fixture is rejected with the expected `line:column` and reason; the `dra
//! check-config` command reports both the way a user sees them.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dra::config::{
    self, Config, CpuSource, Direction, MessageClass, RequestType, Role, RouteRealm, Target,
    Threshold,
};
use dra::control::sources::PrometheusCpu;
use dra_common::maps::Action;
use dra_common::wire::{MsgClass, app, cc_request_type, cmd};
use support::{expectations, is_scenario, repo_root, toml_files_under};

fn seed() -> Config {
    let path = repo_root().join("config/dra.toml");
    config::load(&path).unwrap_or_else(|e| panic!("config/dra.toml is invalid:\n{e}"))
}

#[test]
fn every_shipped_config_file_is_valid() {
    let files = toml_files_under(&repo_root().join("config"));
    let names: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(repo_root()).unwrap().display().to_string())
        .collect();
    for expected in [
        "config/dra.toml",
        "config/examples/minimal.toml",
        "config/examples/ipv6.toml",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    // dra-loadgen scenarios (files with [[phase]]) live beside the agent configs;
    // dra-tools/tests/scenario_files.rs checks them with their own parser.
    let mut failures = String::new();
    for f in files.iter().filter(|f| !is_scenario(f)) {
        if let Err(e) = config::load(f) {
            failures.push_str(&e.to_string());
        }
    }
    assert!(failures.is_empty(), "invalid shipped configs:\n{failures}");
}

#[test]
fn seed_config_pgw2_has_static_limits_only() {
    let cfg = seed();
    let pgw2 = Target::Peer("pgw2".into());
    let overall: Vec<_> = cfg
        .peer_rate_limits
        .iter()
        .filter(|p| p.target == pgw2 && p.direction == Direction::Ingress)
        .collect();
    assert_eq!(overall.len(), 1);
    let l = &overall[0].limit;
    assert_eq!(l.rate, 1000.0);
    assert_eq!(l.action, Action::Reject);
    assert_eq!(l.result_code, 3002);
    assert!(
        l.error_message.contains("pgw2") && l.error_message.contains("1000"),
        "error message should name the limit: {:?}",
        l.error_message
    );

    let by_class = |rt: u8| {
        cfg.message_rate_limits
            .iter()
            .find(|m| {
                m.target == pgw2
                    && m.direction == Direction::Ingress
                    && m.msg_class() == MsgClass::gx_ccr(rt)
            })
            .unwrap_or_else(|| panic!("no pgw2 Gx CCR profile for request type {rt}"))
    };
    for rt in [cc_request_type::INITIAL, cc_request_type::TERMINATION] {
        let m = by_class(rt);
        assert_eq!(m.limit.rate, 200.0);
        assert_eq!(m.limit.result_code, 3002);
        assert_eq!(m.limit.action, Action::Reject);
        assert!(
            m.limit.error_message.contains("200"),
            "{:?}",
            m.limit.error_message
        );
    }
    // CCR-U and Gy from pgw2 are not class-limited (only the overall bucket applies).
    assert!(
        !cfg.message_rate_limits
            .iter()
            .any(|m| m.target == pgw2 && m.class.request_type == RequestType::Update)
    );
    // "PGW-2 has no DRL configuration": never throttled dynamically.
    assert!(cfg.dynamic_profile_for_peer("pgw2").is_none());
}

#[test]
fn seed_config_pgw1_is_drl_enabled_for_gx_ccr_i_and_t_at_1000() {
    let cfg = seed();
    assert!(cfg.global.dynamic_rate_limiting);
    let drl = cfg
        .dynamic_profile_for_peer("pgw1")
        .expect("pgw1 is DRL-enabled");
    assert_eq!(
        drl.classes,
        vec![MessageClass::GX_CCR_I, MessageClass::GX_CCR_T]
    );
    assert_eq!(
        drl.classes
            .iter()
            .map(MessageClass::msg_class)
            .collect::<Vec<_>>(),
        vec![
            MsgClass::new(app::GX, cmd::CREDIT_CONTROL, cc_request_type::INITIAL),
            MsgClass::new(app::GX, cmd::CREDIT_CONTROL, cc_request_type::TERMINATION),
        ]
    );
    // Each DRL class has the static rate of the seed table (1000 → 600 at 62 % CPU).
    for class in &drl.classes {
        let m = cfg
            .message_rate_limits
            .iter()
            .find(|m| {
                m.target == drl.target && m.class == *class && m.direction == Direction::Ingress
            })
            .unwrap_or_else(|| panic!("no static rate for pgw1 {class}"));
        assert_eq!(m.limit.rate, 1000.0);
    }
}

#[test]
fn seed_config_db_cpu_profile_is_the_seed_table() {
    let cfg = seed();
    let p = cfg.db_cpu_profile.as_ref().expect("DB CPU profile");
    let rows: Vec<(u8, u8)> = p
        .thresholds
        .iter()
        .map(|Threshold { cpu, throttle }| (*cpu, *throttle))
        .collect();
    assert_eq!(rows, vec![(50, 20), (55, 30), (60, 40), (65, 50)]);
    assert_eq!(p.reversal_hold_time, Duration::from_secs(30));
    assert_eq!(p.reversal_step, 20);
    assert!(matches!(p.source, CpuSource::Redis { address } if address.ip().is_loopback()));
}

#[test]
fn seed_config_groups_routes_and_lab_addresses() {
    let cfg = seed();
    let members = |g: &str| {
        cfg.group_members(g)
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(members("pcrf"), ["pcrf1", "pcrf2"]);
    assert_eq!(members("ocs"), ["ocs1"]);
    for p in cfg.group_members("pcrf").chain(cfg.group_members("ocs")) {
        assert_eq!(p.role, Role::Server);
        assert!(p.connect.is_some(), "{} has no connect address", p.name);
    }
    // Egress limits protect both upstream groups.
    for g in ["pcrf", "ocs"] {
        assert!(
            cfg.peer_rate_limits
                .iter()
                .any(|p| p.target == Target::Group(g.into()) && p.direction == Direction::Egress),
            "no egress limit for group {g}"
        );
    }
    let route = |realm: &str| {
        cfg.routes
            .iter()
            .find(|r| r.realm == RouteRealm::Exact(realm.into()))
            .unwrap_or_else(|| panic!("no route for {realm}"))
    };
    assert_eq!(route("pcrf.lab.example").application, Some(app::GX));
    assert_eq!(
        route("pcrf.lab.example").target,
        Target::Group("pcrf".into())
    );
    assert_eq!(route("ocs.lab.example").application, Some(app::GY));
    assert_eq!(route("ocs.lab.example").target, Target::Group("ocs".into()));

    // Only RFC 2544 / RFC 3849 lab ranges on the wire.
    let lab4: ipnet::IpNet = "198.18.0.0/15".parse().unwrap();
    let lab6: ipnet::IpNet = "2001:db8::/32".parse().unwrap();
    let in_lab = |n: &ipnet::IpNet| lab4.contains(n) || lab6.contains(n);
    for p in &cfg.peers {
        assert!(!p.addresses.is_empty(), "{} has no address", p.name);
        for a in &p.addresses {
            assert!(in_lab(a), "{} address {a} outside the lab ranges", p.name);
        }
        if let Some(c) = p.connect {
            assert!(in_lab(&c.ip().into()), "{} connects to {c}", p.name);
        }
    }
    for l in &cfg.listeners {
        assert!(in_lab(&l.address.ip().into()), "listener {}", l.address);
    }
}

#[test]
fn examples_in_the_config_reference_are_valid() {
    let doc = std::fs::read_to_string(repo_root().join("docs/config.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert!(!blocks.is_empty(), "docs/config.md has no toml example");
    // A block without `[global]` is one section of a config: it is checked as part of
    // the first complete example (which must not have that section already).
    let base = blocks
        .iter()
        .find(|b| b.contains("[global]") && !b.contains("/etc/dra/tls/"))
        .expect("docs/config.md has a complete toml example");
    for (i, block) in blocks.iter().enumerate() {
        // TLS examples name certificate files: dra-tools/tests/config_tls.rs checks them
        // with certificates it makes at those names.
        if block.contains("/etc/dra/tls/") {
            continue;
        }
        let name = format!("docs/config.md example {}", i + 1);
        let text = if block.contains("[global]") {
            block.to_string()
        } else {
            format!("{base}\n{block}")
        };
        let cfg = config::parse(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        assert!(!cfg.peers.is_empty());
    }
}

/// `dra check-config` used to accept `https://` Prometheus URLs (and user info, queries)
/// that `dra run` then refused at start: the config check now applies the source's rule.
#[test]
fn check_config_accepts_exactly_the_prometheus_urls_dra_run_opens() {
    let seed = std::fs::read_to_string(repo_root().join("config/dra.toml")).unwrap();
    let redis = r#"source = { kind = "redis", address = "127.0.0.1:6379" }"#;
    assert!(seed.contains(redis), "the seed's source line changed");
    for url in [
        "http://127.0.0.1:9090",
        "http://prom.lab.example/prom/",
        "http://[::1]:9090",
        "https://prom.lab.example:9090",
        "http://user@prom:9090",
        "http://prom:9090/?x=1",
        "http://prom:9090/prom#f",
        "http://",
        "prom:9090",
    ] {
        let line = format!(r#"source = {{ kind = "prometheus", url = "{url}", query = "db" }}"#);
        let text = seed.replace(redis, &line);
        let run_opens = PrometheusCpu::new(url, "db").is_ok();
        match config::parse(&text, "dra.toml") {
            Ok(cfg) => {
                assert!(run_opens, "check-config accepts {url}, dra run refuses it");
                let source = &cfg.db_cpu_profile.unwrap().source;
                assert!(dra::drl::source(source, Duration::from_secs(1)).is_ok());
            }
            Err(e) => {
                assert!(
                    !run_opens,
                    "check-config refuses {url}, dra run opens it:\n{e}"
                );
                let at = text.find(&format!("\"{url}\"")).unwrap();
                let line_no = text[..at].lines().count();
                let column = at - text[..at].rfind('\n').unwrap();
                assert_eq!(e.errors.len(), 1, "{e}");
                let err = &e.errors[0];
                assert_eq!((err.line, err.column), (line_no, column), "{e}");
                assert!(
                    err.message.starts_with(&format!("bad url \"{url}\": ")),
                    "{e}"
                );
            }
        }
    }
}

/// `dra check-config FILE`.
fn check_config(file: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dra"))
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap()
}

fn fixtures() -> Vec<PathBuf> {
    toml_files_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad-configs"))
}

#[test]
fn every_bad_config_is_rejected_at_the_expected_position() {
    let files = fixtures();
    assert!(
        files.len() >= 14,
        "only {} bad-config fixtures",
        files.len()
    );
    let mut problems = String::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let expected = expectations(&text);
        assert!(
            !expected.is_empty(),
            "{} has no `# expect:` line",
            f.display()
        );
        let name = f.display().to_string();
        let errors = match config::load(f) {
            Ok(_) => {
                problems.push_str(&format!("{name}: accepted\n"));
                continue;
            }
            Err(e) => e,
        };
        for (line, column, fragment) in &expected {
            let hit = errors.errors.iter().any(|e| {
                e.line == *line && e.column == *column && e.message.contains(fragment.as_str())
            });
            if !hit {
                problems.push_str(&format!(
                    "{name}: expected {line}:{column} {fragment:?}, got:\n{errors}"
                ));
            }
        }
        // No follow-on noise: exactly the expected errors.
        if errors.errors.len() != expected.len() {
            problems.push_str(&format!(
                "{name}: expected {} errors, got {}:\n{errors}",
                expected.len(),
                errors.errors.len()
            ));
        }
        for e in &errors.errors {
            assert_eq!(e.file, name);
        }
    }
    assert!(problems.is_empty(), "{problems}");
}

#[test]
fn all_errors_of_a_file_are_reported_in_file_order_one_line_each() {
    let f =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad-configs/many_errors.toml");
    let errors = config::load(&f).unwrap_err();
    assert!(errors.errors.len() >= 5, "{errors}");
    let positions: Vec<(usize, usize)> = errors.errors.iter().map(|e| (e.line, e.column)).collect();
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted);
    let shown = errors.to_string();
    assert!(shown.ends_with('\n'));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), errors.errors.len());
    for (line, e) in lines.iter().zip(&errors.errors) {
        assert_eq!(
            *line,
            format!("{}:{}:{}: {}", f.display(), e.line, e.column, e.message)
        );
    }
}

#[test]
fn unreadable_file_is_one_error_naming_the_file() {
    let missing = repo_root().join("config/does-not-exist.toml");
    let errors = config::load(&missing).unwrap_err();
    assert_eq!(errors.errors.len(), 1);
    let shown = errors.to_string();
    assert!(
        shown.starts_with(&format!("{}: cannot read config", missing.display())),
        "{shown}"
    );
}

#[test]
fn check_config_command_prints_ok_and_summary_for_the_seed() {
    let out = check_config(repo_root().join("config/dra.toml"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("ok\n"), "{stdout}");
    for needle in [
        "pgw1",
        "pgw2",
        "pcrf1",
        "ocs1",
        "Gx CCR-I",
        "200/s",
        "50%→20%",
        "65%→50%",
        "hold 30s",
        "198.18.1.1:3868",
    ] {
        assert!(
            stdout.contains(needle),
            "summary lacks {needle:?}:\n{stdout}"
        );
    }
    assert!(out.stderr.is_empty());
}

#[test]
fn check_config_command_refuses_an_https_prometheus_url() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/bad-configs/prometheus_https.toml");
    let out = check_config(&f);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "no \"ok\" for a config dra run cannot run"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        format!(
            "{}:52:39: bad url \"https://prom.lab.example:9090\": https is not supported: \
             this source speaks plain HTTP (no TLS); use http:// to a Prometheus on a trusted \
             network or to a local TLS-terminating proxy\n",
            f.display()
        )
    );
}

#[test]
fn check_config_command_exits_2_with_file_line_column_errors() {
    let f =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad-configs/many_errors.toml");
    let out = check_config(&f);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing on stdout for a bad file");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = expectations(&std::fs::read_to_string(&f).unwrap());
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{stderr}");
    for (line, (l, c, fragment)) in lines.iter().zip(&expected) {
        let prefix = format!("{}:{l}:{c}: ", f.display());
        assert!(
            line.starts_with(&prefix) && line.contains(fragment.as_str()),
            "{line:?} vs {prefix}{fragment}"
        );
    }
}
