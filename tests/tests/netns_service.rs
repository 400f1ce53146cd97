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
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use dra_common::wire::cc_request_type as rt;
use dra_tests::{
    agent::{control_request, dra_bin, peer_state},
    netns::{GwDraSrv, Netns},
    sim::{PGW1, Sim, gx_ccrs},
    support::{ConfigToml, Pins, TempDir, poll_until},
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

/// The agent's config, its control socket `control`, `global`: more `[global]` keys.
fn config(xdp_if: &str, control: &Path, global: &str) -> String {
    ConfigToml::new(DRA.1, &["198.18.62.1:3868"], global)
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
        .control(control)
        .to_string()
}

/// `dra run --log-format json` in `ns` as uid 0 with only `caps` (bounding set; nothing
/// inheritable or ambient), stderr into `log`; `control`: its control socket.
struct Run {
    child: std::process::Child,
    control: PathBuf,
}

impl Run {
    fn start(
        ns: &Netns,
        caps: &[String],
        cfg: &Path,
        control: &Path,
        pins: &Path,
        log: &Path,
    ) -> Run {
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
        Run {
            child,
            control: control.to_path_buf(),
        }
    }

    /// `dra status` over the control socket (why there is none, when there is none).
    fn status(&self) -> String {
        control_request(&self.control, "status").unwrap_or_else(|e| format!("no status: {e}"))
    }

    /// Waits until `dra status` satisfies `cond` (true, and the text) or the process
    /// exits or 20 s pass (false).
    fn wait_status(&mut self, cond: impl Fn(&str) -> bool) -> (bool, String) {
        let mut last = String::new();
        let ok = poll_until(Duration::from_secs(20), || {
            last = self.status();
            cond(&last) || self.child.try_wait().ok().flatten().is_some()
        });
        (ok && cond(&last), last)
    }

    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut st = None;
        poll_until(Duration::from_secs(10), || {
            st = self.child.try_wait().ok().flatten();
            st.is_some()
        });
        if st.is_some() {
            return st;
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

fn ready(status: &str) -> bool {
    status.lines().any(|l| l.starts_with("ready: yes"))
}

/// A number in the status line of the agent's counters: the word after `name`.
fn counter(status: &str, name: &str) -> Option<u64> {
    let l = status.lines().find(|l| l.starts_with("requests in "))?;
    let mut w = l.split_whitespace();
    w.by_ref().find(|x| *x == name)?;
    w.next()?.parse().ok()
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
    let control = lab.tmp.0.join("dra.sock");
    std::fs::write(&cfg, config(&lab.net.client.b_if, &control, "")).unwrap();
    let log = lab.tmp.0.join("dra.json");

    let sim = Sim::new();
    let _sink = sim.sink(
        &lab.net.srv,
        "198.18.63.2:3868".parse().unwrap(),
        PCRF1,
        DRA.0,
    );
    let mut run = Run::start(&lab.net.dra, &caps, &cfg, &control, &pins.0, &log);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Ready: pcrf1 open (the fast path attached before that).
    let (up, status) = run.wait_status(ready);
    assert!(
        up,
        "with {caps:?} the agent never got ready:\n{status}\nlog:\n{}",
        text()
    );
    // What the log said meanwhile (each line written before the state it reports).
    assert!(
        lines(&log).iter().any(|v| peer_msg(v, "peer up", "pcrf1")),
        "{}",
        text()
    );
    assert!(
        lines(&log)
            .iter()
            .any(|v| msg(v, "fast path attached") && v["iface"] == lab.net.client.b_if.as_str()),
        "{}",
        text()
    );

    let from: IpAddr = "198.18.62.2".parse().unwrap();
    let to: SocketAddr = "198.18.62.1:3868".parse().unwrap();
    let peer = sim.connect(&lab.net.gw, from, to, PGW1, DRA.0, None, None);
    let (open, status) = run.wait_status(|s| peer_state(s, "pgw1") == Some("open"));
    assert!(open, "pgw1 not open:\n{status}\nlog:\n{}", text());
    assert!(
        lines(&log).iter().any(|v| peer_msg(v, "peer up", "pgw1")),
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
    // Until the agent has answered the last one (its answer timeout): all received,
    // none pending.
    let n = sent.log.len() as u64;
    let (done, status) = run.wait_status(|s| {
        counter(s, "in").is_some_and(|r| r >= n) && counter(s, "pending") == Some(0)
    });
    assert!(done, "{n} requests not all answered:\n{status}");
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
    let (down, status) = run.wait_status(|s| peer_state(s, "pgw1") != Some("open"));
    assert!(down, "pgw1 still open:\n{status}\nlog:\n{}", text());
    let st = run.stop().expect("exit status");
    assert!(st.success(), "dra run ended {st}; log:\n{}", text());
    let all = lines(&log);
    for m in ["diameter agent running", "fast path detached"] {
        assert!(all.iter().any(|v| msg(v, m)), "no {m:?}:\n{}", text());
    }
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
    let control = lab.tmp.0.join("dra.sock");
    // No PCRF runs here: ready (started) once the listeners are bound.
    let global = "startup_wait = \"0s\"";
    std::fs::write(&cfg, config(&lab.net.client.b_if, &control, global)).unwrap();
    for missing in &caps {
        let pins = Pins::new("dra-sv-");
        let fewer: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        let log = lab.tmp.0.join(format!("dra-no-{missing}.json"));
        let mut run = Run::start(&lab.net.dra, &fewer, &cfg, &control, &pins.0, &log);
        // Started: ready (its listeners bound, the fast path attached before that).
        let (started, status) = run.wait_status(ready);
        println!("without {missing}: {status}");
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
