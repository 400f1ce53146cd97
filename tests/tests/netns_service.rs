//! `dra run` as the systemd unit runs it (docs/operations.md): uid 0 with only
//! the unit's capabilities (`CapabilityBoundingSet=` of packaging/dra.service, applied
//! with `setpriv`), logs in JSON.
//!
//! * With exactly those capabilities the agent attaches XDP, pins, opens its peers and
//!   logs one JSON object per line (level, message), one line per state change (fast
//!   path attached, peer up, peer down) and nothing per message: 300 requests add no
//!   line.
//! * Without any one of them it does not start (each is needed).
//!
//! Topology: gw (198.18.62.2) — veth — dra (198.18.62.1 | 198.18.63.1, XDP on the
//! gateway side) — veth — srv (198.18.63.2, pcrf1, a sink). Namespaces `sv-*` and pins
//! are removed on drop, also on panic.

use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use dra_common::wire::cc_request_type as rt;
use dra_tests::{
    agent::dra_bin,
    netns::{GwDraSrv, Netns},
    sim::{PGW1, Sim, gx_ccrs},
    support::{ConfigToml, Pins, TempDir},
};

const DRA: (&str, &str) = ("dra.lab.example", "lab.example");
const PCRF1: (&str, &str) = ("pcrf1.pcrf.lab.example", "pcrf.lab.example");

/// The unit's capabilities, as `setpriv` names them (`CAP_NET_ADMIN` → `net_admin`).
fn unit_caps() -> Vec<String> {
    let unit = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/dra.service");
    let text = std::fs::read_to_string(unit).expect("packaging/dra.service");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet=");
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

fn config(xdp_if: &str) -> String {
    ConfigToml::new(DRA.1, &["198.18.62.1:3868"], "")
        .with(&format!(
            "[fast_path]\ninterface = \"{xdp_if}\"\nxdp_mode = \"skb\""
        ))
        .client("pgw1", DRA.1, &["198.18.62.2"], "")
        .server(
            "pcrf1",
            "pcrf.lab.example",
            "198.18.63.2:3868",
            "group = \"pcrf\"",
        )
        .group("pcrf", "answer_timeout = \"500ms\"")
        .route("pcrf.lab.example", "group = \"pcrf\"")
        .to_string()
}

/// `dra run --log-format json` in `ns` as uid 0 with only `caps` (bounding set; nothing
/// inheritable or ambient), stderr into `log`.
struct Run {
    child: std::process::Child,
}

impl Run {
    fn start(ns: &Netns, caps: &[String], cfg: &Path, pins: &Path, log: &Path) -> Run {
        let bset = std::iter::once("-all".to_owned())
            .chain(caps.iter().map(|c| format!("+{c}")))
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = Command::new("setpriv");
        cmd.args([
            &format!("--bounding-set={bset}"),
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--",
        ])
        .arg(dra_bin())
        .args([
            "run",
            "--log-format",
            "json",
            "--detach-on-exit",
            "--config",
        ])
        .arg(cfg)
        .arg("--pin-dir")
        .arg(pins)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"));
        let child = dra_tools::netns::spawn_in(&ns.name, &mut cmd).expect("spawn setpriv dra");
        Run { child }
    }

    /// Waits until a log line satisfies `cond` (true) or the process exits or 20 s pass
    /// (false).
    fn wait_for(&mut self, log: &Path, cond: impl Fn(&serde_json::Value) -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if lines(log).iter().any(&cond) {
                return true;
            }
            if self.child.try_wait().ok().flatten().is_some() {
                return lines(log).iter().any(&cond);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

/// Every line of the log as JSON; a line that is not a JSON object with a `level` and
/// a string `message` fails the test.
fn lines(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        // A line still being written is read next time.
        .filter(|l| l.ends_with('}'))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {l}\nlog:\n{text}"));
            assert!(v["level"].is_string(), "no level: {l}");
            assert!(v["message"].is_string(), "no message: {l}");
            assert!(v["timestamp"].is_string(), "no timestamp: {l}");
            v
        })
        .collect()
}

fn msg(v: &serde_json::Value, m: &str) -> bool {
    v["message"] == m
}

fn peer_msg(v: &serde_json::Value, m: &str, peer: &str) -> bool {
    v["message"] == m && v["peer"] == peer
}

struct Lab {
    net: GwDraSrv,
    tmp: TempDir,
}

fn lab() -> Lab {
    Lab {
        net: GwDraSrv::new("sv-", 62, 63),
        tmp: TempDir::new("dra-sv-"),
    }
}

#[test]
fn with_the_units_capabilities_it_runs_and_logs_json_state_changes_only() {
    let caps = unit_caps();
    let lab = lab();
    let pins = Pins::new("dra-sv-");
    let cfg = lab.tmp.0.join("dra.toml");
    std::fs::write(&cfg, config(&lab.net.client.b_if)).unwrap();
    let log = lab.tmp.0.join("dra.json");

    let sim = Sim::new();
    let _sink = sim.sink(
        &lab.net.srv,
        "198.18.63.2:3868".parse().unwrap(),
        PCRF1,
        DRA.0,
    );
    let mut run = Run::start(&lab.net.dra, &caps, &cfg, &pins.0, &log);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        run.wait_for(&log, |v| peer_msg(v, "peer up", "pcrf1")),
        "with {caps:?} pcrf1 never came up; log:\n{}",
        text()
    );
    assert!(
        lines(&log)
            .iter()
            .any(|v| msg(v, "fast path attached") && v["iface"] == lab.net.client.b_if.as_str()),
        "{}",
        text()
    );
    assert!(
        lines(&log).iter().any(|v| msg(v, "diameter agent running")),
        "{}",
        text()
    );

    let from: IpAddr = "198.18.62.2".parse().unwrap();
    let to: SocketAddr = "198.18.62.1:3868".parse().unwrap();
    let peer = sim.connect(&lab.net.gw, from, to, PGW1, DRA.0, None, None);
    assert!(
        run.wait_for(&log, |v| peer_msg(v, "peer up", "pgw1")),
        "{}",
        text()
    );
    let before = lines(&log).len();
    // 300 CCR-I (relayed to a sink that never answers: each times out, is answered by
    // the agent): no log line per message.
    let sent = sim.paced(
        &peer,
        vec![gx_ccrs(Duration::from_millis(5), rt::INITIAL)],
        Duration::from_millis(1500),
        1,
    );
    assert!(sent.log.len() >= 250, "sent only {}", sent.log.len());
    // Past the answer timeout of the last one.
    std::thread::sleep(Duration::from_secs(1));
    let during: Vec<_> = lines(&log).split_off(before);
    println!(
        "{} requests sent; {} log lines meanwhile: {during:?}",
        sent.log.len(),
        during.len()
    );
    assert!(
        during.len() <= 2,
        "{} lines logged while {} requests flowed:\n{during:#?}",
        during.len(),
        sent.log.len()
    );

    // The gateway's connection ends (its task aborted: the socket closes).
    peer.abort();
    assert!(
        run.wait_for(&log, |v| peer_msg(v, "peer down", "pgw1")),
        "{}",
        text()
    );
    let st = run.stop().expect("exit status");
    assert!(st.success(), "dra run ended {st}; log:\n{}", text());
    let all = lines(&log);
    assert!(
        all.iter().any(|v| msg(v, "fast path detached")),
        "{}",
        text()
    );
    // One line per change: pgw1 came up once and went down once.
    for m in ["peer up", "peer down"] {
        let n = all.iter().filter(|v| peer_msg(v, m, "pgw1")).count();
        assert_eq!(n, 1, "{m:?} pgw1 logged {n} times:\n{}", text());
    }
}

#[test]
fn without_any_one_of_the_units_capabilities_it_does_not_start() {
    let caps = unit_caps();
    assert!(!caps.is_empty());
    let lab = lab();
    let cfg = lab.tmp.0.join("dra.toml");
    std::fs::write(&cfg, config(&lab.net.client.b_if)).unwrap();
    for missing in &caps {
        let pins = Pins::new("dra-sv-");
        let fewer: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        let log = lab.tmp.0.join(format!("dra-no-{missing}.json"));
        let mut run = Run::start(&lab.net.dra, &fewer, &cfg, &pins.0, &log);
        let started = run.wait_for(&log, |v| msg(v, "diameter agent running"));
        let st = run.stop();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        println!("without {missing}: exit {st:?}; log:\n{text}");
        assert!(
            !started,
            "dra run started without {missing} (so the unit need not grant it):\n{text}"
        );
        assert!(
            st.is_some_and(|s| !s.success()),
            "without {missing}: {st:?}\n{text}"
        );
    }
}
