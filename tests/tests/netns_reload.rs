//! Live reload (`dra reload`, docs/operations.md "Reload") of a real `dra run`
//! with XDP attached, under traffic from real `dra-loadgen` gateways to real
//! `dra-loadgen` servers over TCP between network namespaces.
//!
//! Topology: gw (198.18.72.2 pgw1, 198.18.72.3 pgw2) — veth — dra (198.18.72.1 |
//! 198.18.73.1, XDP on the gateway side) — veth — srv (198.18.73.2: pcrf1 :3868, pcrf2
//! :3869, pcrf3 :3870). Namespaces `rl-*` / `rv-*` and pins are removed on drop.
//!
//! * `reload_under_traffic`: ~1,100 requests/s (pgw1 Gx CCR-I/T 300+300/s to the pcrf
//!   group; pgw2 Gx CCR-I 400/s over its 200/s limit, Gy CCR-I 100/s to
//!   ocs.lab.example, which has no route yet). The reload lowers pgw2's CCR-I limit to
//!   100/s, adds pcrf3 and a route for ocs.lab.example to it, and removes pcrf2.
//!   Where the tests run slower (`DRA_TEST_TIME_SCALE` > 1: an emulated guest), pgw1
//!   sends 40+40/s and pgw2's Gy 30/s; pgw2's CCR-I is the same.
//!   Asserted: no connection but pcrf2's went down (agent log, the gateways' and
//!   `dra status`'s counters), every request answered, pgw2's admitted CCR-I per second
//!   (the pinned fast path's counters of its bucket, sampled every 50 ms) at 200 in
//!   each of the 3 s before and at 100 in each of the 5 s from the reload's completion
//!   on (±15 %), pcrf3 open and answering the new route's requests.
//! * `invalid_reload_and_dry_run_change_nothing`: a file with two errors is refused
//!   with both positions, the running config (hash, bucket rate, admitted rate) stays;
//!   `--dry-run` prints the difference and changes nothing.
//! * `a_reload_keeps_the_drl_throttle_in_force`: under a 50 % DRL throttle (a `file` DB
//!   CPU source), a reload raising pgw2's static CCR-I rate to 300/s writes 150/s at
//!   once, and a reload of another key leaves it there.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use dra::dataplane::{Maps, Plan};
use dra_common::wire::MsgClass;
use dra_tests::{
    agent::{Agent, control_request, dra_bin},
    netns::{GwDraSrv, Netns},
    support::{Pins, TempDir, poll_until, time_scale},
};

fn loadgen_bin() -> PathBuf {
    let p = dra_bin().with_file_name("dra-loadgen");
    assert!(
        p.exists(),
        "{} not found: build it first (cargo build -p dra-tools --bins)",
        p.display()
    );
    p
}

const PGW2_LIMIT: &str = r#"
[[message_rate_limit_profile]]
peer = "pgw2"
direction = "ingress"
application = "gx"
command = "ccr"
request_type = "initial"
rate = RATE
result_code = 3002
error_message = "rate limit exceeded: pgw2 Gx CCR-I"
"#;

/// The config: `servers` are (name, port, realm); `ocs_route` adds the route for
/// ocs.lab.example to pcrf3.
fn config(
    xdp_if: &str,
    sock: &Path,
    pgw2_rate: u32,
    servers: &[(&str, u16, &str)],
    ocs_route: bool,
) -> String {
    let mut s = format!(
        r#"
[global]
origin_host = "dra.lab.example"
origin_realm = "lab.example"

[fast_path]
interface = "{xdp_if}"
xdp_mode = "skb"

[control]
socket = "{}"

[[listener]]
address = "198.18.72.1:3868"

[[peer]]
name = "pgw1"
origin_host = "pgw1.lab.example"
realm = "lab.example"
addresses = ["198.18.72.2"]
role = "client"

[[peer]]
name = "pgw2"
origin_host = "pgw2.lab.example"
realm = "lab.example"
addresses = ["198.18.72.3"]
role = "client"

[[peer_group]]
name = "pcrf"
answer_timeout = "2s"

[[route]]
realm = "pcrf.lab.example"
group = "pcrf"
"#,
        sock.display()
    );
    for (name, port, realm) in servers {
        let group = if *realm == "pcrf.lab.example" {
            "group = \"pcrf\"\n"
        } else {
            ""
        };
        s.push_str(&format!(
            "\n[[peer]]\nname = \"{name}\"\norigin_host = \"{name}.{realm}\"\n\
             realm = \"{realm}\"\nrole = \"server\"\n{group}connect = \"198.18.73.2:{port}\"\n"
        ));
    }
    if ocs_route {
        s.push_str("\n[[route]]\nrealm = \"ocs.lab.example\"\npeer = \"pcrf3\"\n");
    }
    s.push_str(&PGW2_LIMIT.replace("RATE", &pgw2_rate.to_string()));
    s
}

struct Lab {
    net: GwDraSrv,
    tmp: TempDir,
    pins: Pins,
}

fn lab(prefix: &str) -> Lab {
    let net = GwDraSrv::new(prefix, 72, 73);
    let gw_if = &net.client.a_if;
    net.gw
        .exec(&["ip", "addr", "add", "198.18.72.3/24", "dev", gw_if])
        .unwrap();
    Lab {
        net,
        tmp: TempDir::new("dra-rl-"),
        pins: Pins::new("dra-rl-"),
    }
}

/// A `dra-loadgen` process, SIGTERM'd and reaped on drop.
struct Loadgen(Option<Child>);

impl Loadgen {
    fn spawn(ns: &Netns, args: &[String], log: &Path) -> Loadgen {
        let mut cmd = Command::new(loadgen_bin());
        cmd.args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        Loadgen(Some(
            dra_tools::netns::spawn_in(&ns.name, &mut cmd).expect("spawn dra-loadgen"),
        ))
    }

    /// Waits for the process to end by itself (a client at the end of its scenario).
    fn wait(mut self, within: Duration) -> std::process::ExitStatus {
        let mut c = self.0.take().unwrap();
        let mut st = None;
        poll_until(within, || {
            st = c.try_wait().ok().flatten();
            st.is_some()
        });
        st.unwrap_or_else(|| {
            let _ = c.kill();
            panic!("dra-loadgen did not end within {within:?}");
        })
    }
}

impl Drop for Loadgen {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let ended = poll_until(Duration::from_secs(5), || {
                matches!(c.try_wait(), Ok(Some(_)))
            });
            if !ended {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn server(lab: &Lab, name: &str, port: u16, realm: &str) -> Loadgen {
    let args: Vec<String> = [
        "server",
        "--listen",
        &format!("198.18.73.2:{port}"),
        "--origin-host",
        &format!("{name}.{realm}"),
        "--origin-realm",
        realm,
        "--latency",
        "fixed:1ms",
        "--lenient-sessions",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Loadgen::spawn(&lab.net.srv, &args, &lab.tmp.0.join(format!("{name}.log")))
}

/// A gateway: `rates` is the scenario's `rates = { ... }` table body.
fn gateway(lab: &Lab, name: &str, bind: &str, rates: &str, seconds: u32) -> (Loadgen, PathBuf) {
    let scenario = lab.tmp.0.join(format!("{name}.toml"));
    std::fs::write(
        &scenario,
        format!(
            "name = \"{name}\"\ndestination_realm = \"pcrf.lab.example\"\n\
             gy_destination_realm = \"ocs.lab.example\"\nrequest_timeout_ms = 5000\n\n\
             [[phase]]\nname = \"run\"\nduration_s = {seconds}\nrates = {{ {rates} }}\n"
        ),
    )
    .unwrap();
    let summary = lab.tmp.0.join(format!("{name}.json"));
    let args: Vec<String> = [
        "client",
        "--connect",
        "198.18.72.1:3868",
        "--bind",
        bind,
        "--peers",
        "1",
        "--origin-host",
        &format!("{name}.lab.example"),
        "--scenario",
        &scenario.display().to_string(),
        "--summary-json",
        &summary.display().to_string(),
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    (
        Loadgen::spawn(&lab.net.gw, &args, &lab.tmp.0.join(format!("{name}.log"))),
        summary,
    )
}

fn dra(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(dra_bin()).args(args).output().expect("dra");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn status(sock: &Path) -> String {
    let (ok, out, err) = dra(&["status", "--socket", &sock.display().to_string()]);
    assert!(ok, "dra status failed: {err}");
    out
}

/// The status table's row of `peer`: (state, req_out) — None if not listed. The
/// columns are found by the table's header; a row without a number there panics.
fn peer_row(status: &str, peer: &str) -> Option<(String, u64)> {
    let header: Vec<&str> = status
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"peer") && f.contains(&"req_out"))?;
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (state, out) = (col("state"), col("req_out"));
    status.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == header.len() && f[0] == peer && (f[1] == "client" || f[1] == "server")).then(
            || {
                let n = f[out]
                    .parse()
                    .unwrap_or_else(|_| panic!("req_out of {peer} is {:?}: {l}", f[out]));
                (f[state].to_owned(), n)
            },
        )
    })
}

fn connections(status: &str) -> u64 {
    let l = status.lines().next().unwrap_or("");
    let i = l.find("connections ").expect("connections in status") + "connections ".len();
    l[i..].trim().parse().expect("connections count")
}

fn sha(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.split("sha256 ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .expect("sha256 in status")
        .to_owned()
}

/// Samples of a bucket's admitted counter (cumulative) with their time.
struct Admitted {
    samples: Vec<(Instant, u64)>,
}

impl Admitted {
    fn sample(&mut self, maps: &Maps, slot: u32) {
        let c = maps.slot_counters(slot).expect("slot counters");
        self.samples.push((Instant::now(), c.admitted));
    }

    /// Admitted per second over [from, from + 1 s), from the samples nearest the ends.
    fn per_second(&self, from: Instant) -> f64 {
        let at = |t: Instant| {
            self.samples
                .iter()
                .min_by_key(|(s, _)| if *s > t { *s - t } else { t - *s })
                .copied()
                .expect("samples")
        };
        let (t0, a0) = at(from);
        let (t1, a1) = at(from + Duration::from_secs(1));
        (a1 - a0) as f64 / (t1 - t0).as_secs_f64()
    }
}

/// Samples `maps` every 50 ms for `d` (the traffic runs meanwhile).
fn sample_for(adm: &mut Admitted, maps: &Maps, slot: u32, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        adm.sample(maps, slot);
        // The scenario: the measurement's sampling period, for `d` of traffic.
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json_lines(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.ends_with('}'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `dra run` on `cfg` (with a fresh fast path: detached on exit), once it is ready.
fn start_agent(lab: &Lab, cfg: &Path) -> Agent {
    let args = [
        "--log-format",
        "json",
        "--config",
        &cfg.display().to_string(),
        "--pin-dir",
        &lab.pins.0.display().to_string(),
        "--detach-on-exit",
    ];
    let mut agent = Agent::start(&lab.net.dra, &args, &lab.tmp.0.join("dra.json"));
    agent.wait_ready(Duration::from_secs(60));
    agent
}

/// Waits until `dra status` shows each of `peers` open.
fn wait_open(agent: &mut Agent, sock: &Path, peers: &[&str]) {
    let mut last = String::new();
    let ok = agent.wait_until(Duration::from_secs(60), || {
        last = control_request(sock, "status").unwrap_or_else(|e| format!("no status: {e}"));
        peers
            .iter()
            .all(|p| peer_row(&last, p).is_some_and(|(state, _)| state == "open"))
    });
    assert!(
        ok,
        "{peers:?} not all open:\n{last}\nlog:\n{}",
        agent.log_text()
    );
}

#[test]
fn reload_under_traffic() {
    let lab = lab("rl-");
    let sock = lab.tmp.0.join("dra.sock");
    let cfg = lab.tmp.0.join("dra.toml");
    let before = [
        ("pcrf1", 3868, "pcrf.lab.example"),
        ("pcrf2", 3869, "pcrf.lab.example"),
    ];
    let after = [
        ("pcrf1", 3868, "pcrf.lab.example"),
        ("pcrf3", 3870, "ocs.lab.example"),
    ];
    let text = config(&lab.net.client.b_if, &sock, 200, &before, false);
    std::fs::write(&cfg, &text).unwrap();
    let plan = Plan::new(&dra::config::parse(&text, "dra.toml").unwrap()).unwrap();
    let slot = plan.slot_of("pgw2", MsgClass::gx_ccr(1)).unwrap();

    let _pcrf1 = server(&lab, "pcrf1", 3868, "pcrf.lab.example");
    let _pcrf2 = server(&lab, "pcrf2", 3869, "pcrf.lab.example");
    let _pcrf3 = server(&lab, "pcrf3", 3870, "ocs.lab.example");
    let mut agent = start_agent(&lab, &cfg);
    wait_open(&mut agent, &sock, &["pcrf1", "pcrf2"]);
    let maps = Maps::open_pinned(&lab.pins.0).expect("pinned maps");

    // The traffic the limit is not about is lighter where the machine is slower (an
    // emulated guest relays a few hundred requests a second): pgw2's CCR-I stays at
    // twice its limit, then four times.
    let (pgw1_rates, pgw2_rates) = if time_scale() > 1 {
        (
            "gx_ccr_i = 40, gx_ccr_t = 40",
            "gx_ccr_i = 400, gy_ccr_i = 30",
        )
    } else {
        (
            "gx_ccr_i = 300, gx_ccr_t = 300",
            "gx_ccr_i = 400, gy_ccr_i = 100",
        )
    };
    let (g1, sum1) = gateway(&lab, "pgw1", "198.18.72.2", pgw1_rates, 14);
    let (g2, sum2) = gateway(&lab, "pgw2", "198.18.72.3", pgw2_rates, 14);
    wait_open(&mut agent, &sock, &["pgw1", "pgw2", "pcrf1", "pcrf2"]);
    let st0 = status(&sock);
    assert_eq!(connections(&st0), 4, "{st0}");
    let mut adm = Admitted {
        samples: Vec::new(),
    };
    // Traffic at its rates for 4 s, then the reload.
    sample_for(&mut adm, &maps, slot, Duration::from_secs(4));
    std::fs::write(&cfg, config(&lab.net.client.b_if, &sock, 100, &after, true)).unwrap();
    let t_req = Instant::now();
    let (ok, out, err) = dra(&["reload", "--config", &cfg.display().to_string()]);
    let t_done = Instant::now();
    println!(
        "reload took {:?}:\n{out}{err}",
        t_done.duration_since(t_req)
    );
    assert!(
        ok,
        "dra reload failed:\n{out}{err}\nlog:\n{}",
        agent.log_text()
    );
    assert!(out.starts_with("applied: "), "{out}");
    for want in [
        "+ peer pcrf3",
        "- peer pcrf2",
        "+ route realm ocs.lab.example",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }
    sample_for(&mut adm, &maps, slot, Duration::from_secs(5));
    wait_open(&mut agent, &sock, &["pgw1", "pgw2", "pcrf1", "pcrf3"]);
    let st1 = status(&sock);
    println!("{st1}");
    sample_for(&mut adm, &maps, slot, Duration::from_secs(1));
    // The agent's log while the gateways still run (they disconnect at their end).
    let log = lab.tmp.0.join("dra.json");
    let lines = json_lines(&log);

    let g1 = g1.wait(Duration::from_secs(60));
    let g2 = g2.wait(Duration::from_secs(60));
    assert!(g1.success() && g2.success(), "gateways: {g1} {g2}");
    let st2 = status(&sock);
    println!("{st2}");

    // The admitted CCR-I of pgw2, per second, before and after the reload.
    let mut rows = Vec::new();
    for k in 1..=3u64 {
        rows.push(("before", adm.per_second(t_req - Duration::from_secs(k))));
    }
    // From the reload's completion on: the first second already at the new limit.
    for k in 0..=4u64 {
        rows.push(("after", adm.per_second(t_done + Duration::from_secs(k))));
    }
    println!("pgw2 CCR-I admitted per second: {rows:?}");
    for (when, r) in &rows {
        let want = if *when == "before" { 200.0 } else { 100.0 };
        assert!(
            (r - want).abs() <= want * 0.15,
            "{when} the reload pgw2's CCR-I admitted {r:.0}/s, want {want}/s: {rows:?}"
        );
    }
    // Connections: only pcrf2's went down.
    let downs: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["message"] == "peer down")
        .collect();
    assert!(
        downs.iter().all(|v| v["peer"] == "pcrf2") && downs.len() == 1,
        "peer down lines: {downs:?}"
    );
    assert!(
        lines
            .iter()
            .any(|v| v["message"] == "peer up" && v["peer"] == "pcrf3"),
        "pcrf3 never up"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|v| v["message"] == "config reload" && v["outcome"] == "applied")
            .count(),
        1,
        "one log line per reload"
    );
    assert_eq!(connections(&st1), 4, "{st1}");
    assert!(peer_row(&st1, "pcrf2").is_none(), "{st1}");
    assert!(st1.contains("last reload: applied"), "{st1}");
    assert_ne!(sha(&st0), sha(&st1));
    // The new server took the new route's requests.
    let (state, out3) = peer_row(&st2, "pcrf3").expect("pcrf3 in status");
    assert_eq!(state, "open");
    assert!(out3 > 100, "pcrf3 got {out3} requests:\n{st2}");
    assert!(st2.contains("invariant ok"), "{st2}");
    // The gateways: no reconnect, every request answered.
    for (name, sum) in [("pgw1", &sum1), ("pgw2", &sum2)] {
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(sum).unwrap()).unwrap();
        // One connection for the whole run (a drop would reconnect); its end (DPR after
        // the scenario) is the one drop counted.
        assert_eq!(s["peers"]["opened"], 1, "{name}: {s}");
        assert_eq!(s["peers"]["dropped"], 1, "{name}: {s}");
        let classes = s["classes"].as_object().unwrap();
        for (c, v) in classes {
            let answered: u64 = v["answered"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum();
            assert_eq!(v["timeouts"], 0, "{name} {c}: {v}");
            assert_eq!(v["unanswered"], 0, "{name} {c}: {v}");
            assert_eq!(v["sent"].as_u64().unwrap(), answered, "{name} {c}: {v}");
        }
        if name == "pgw2" {
            let by_pcrf3 = s["servers"]["pcrf3.ocs.lab.example"].as_u64().unwrap_or(0);
            assert!(by_pcrf3 > 100, "pcrf3 answered {by_pcrf3} of pgw2's: {s}");
        }
        println!("{name}: {}", s["classes"]);
    }
    let st = agent.stop();
    assert!(st.is_some_and(|s| s.success()), "{}", agent.log_text());
}

#[test]
fn invalid_reload_and_dry_run_change_nothing() {
    let lab = lab("rv-");
    let sock = lab.tmp.0.join("dra.sock");
    let cfg = lab.tmp.0.join("dra.toml");
    let servers = [("pcrf1", 3868, "pcrf.lab.example")];
    let text = config(&lab.net.client.b_if, &sock, 200, &servers, false);
    std::fs::write(&cfg, &text).unwrap();
    let plan = Plan::new(&dra::config::parse(&text, "dra.toml").unwrap()).unwrap();
    let slot = plan.slot_of("pgw2", MsgClass::gx_ccr(1)).unwrap();
    let _pcrf1 = server(&lab, "pcrf1", 3868, "pcrf.lab.example");
    let mut agent = start_agent(&lab, &cfg);
    wait_open(&mut agent, &sock, &["pcrf1"]);
    let maps = Maps::open_pinned(&lab.pins.0).expect("pinned maps");
    let (g2, sum2) = gateway(&lab, "pgw2", "198.18.72.3", "gx_ccr_i = 300", 10);
    wait_open(&mut agent, &sock, &["pgw2", "pcrf1"]);
    let st0 = status(&sock);
    let mut adm = Admitted {
        samples: Vec::new(),
    };
    let t_start = Instant::now();
    sample_for(&mut adm, &maps, slot, Duration::from_secs(3));

    // Two errors: a rate that is not a number, a route to a peer that does not exist.
    let bad = text.replace("rate = 200", "rate = \"fast\"")
        + "\n[[route]]\nrealm = \"x.example\"\npeer = \"nobody\"\n";
    std::fs::write(&cfg, &bad).unwrap();
    let (ok, out, err) = dra(&["reload", "--config", &cfg.display().to_string()]);
    println!("invalid reload:\n{out}{err}");
    assert!(!ok, "an invalid file was accepted:\n{out}{err}");
    let file = cfg.display().to_string();
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with(&format!("{file}:")))
        .collect();
    assert_eq!(errors.len(), 2, "want two errors with position:\n{err}");
    let rate_line = bad.lines().position(|l| l == "rate = \"fast\"").unwrap() + 1;
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&format!("{file}:{rate_line}:"))),
        "no error at line {rate_line}:\n{err}"
    );
    for e in &errors {
        let pos: Vec<&str> = e[file.len() + 1..].splitn(3, ':').collect();
        assert!(
            pos[0].parse::<u32>().is_ok() && pos[1].parse::<u32>().is_ok(),
            "no line:column in {e}"
        );
    }
    let st1 = status(&sock);
    assert_eq!(sha(&st0), sha(&st1), "the running config changed");
    assert!(st1.contains("last reload: invalid"), "{st1}");
    let rate = |maps: &Maps| 1e9 / maps.bucket_config(slot).unwrap().interval_ns as f64;
    assert_eq!(rate(&maps).round(), 200.0);

    // --dry-run of a valid change: the difference printed, nothing applied.
    std::fs::write(&cfg, text.replace("rate = 200", "rate = 100")).unwrap();
    let (ok, out, err) = dra(&[
        "reload",
        "--dry-run",
        "--config",
        &cfg.display().to_string(),
    ]);
    println!("dry run:\n{out}{err}");
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("+ limit peer pgw2 ingress gx_ccr_i: 100/s"),
        "{out}"
    );
    assert!(
        out.contains("- limit peer pgw2 ingress gx_ccr_i: 200/s"),
        "{out}"
    );
    let t_dry = Instant::now();
    sample_for(&mut adm, &maps, slot, Duration::from_secs(3));
    let st2 = status(&sock);
    assert_eq!(sha(&st0), sha(&st2));
    assert_eq!(rate(&maps).round(), 200.0);
    // Past the start's full bucket: seconds 1-2 of the sampling, and 1-2 after the
    // invalid reload and the dry run.
    let rows = [
        adm.per_second(t_start + Duration::from_secs(1)),
        adm.per_second(t_dry + Duration::from_secs(1)),
    ];
    println!("pgw2 CCR-I admitted per second before and after: {rows:?}");
    for r in rows {
        assert!(
            (r - 200.0).abs() <= 30.0,
            "admitted {r:.0}/s, want 200/s: {rows:?}"
        );
    }

    let g2 = g2.wait(Duration::from_secs(60));
    assert!(g2.success());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sum2).unwrap()).unwrap();
    assert_eq!(s["peers"]["opened"], 1, "{s}");
    assert_eq!(s["peers"]["dropped"], 1, "{s}");
    let v = &s["classes"]["gx_ccr_i"];
    assert_eq!(v["unanswered"], 0, "{v}");
    assert_eq!(v["timeouts"], 0, "{v}");
    let st = agent.stop();
    assert!(st.is_some_and(|s| s.success()), "{}", agent.log_text());
}

/// The bucket rate in the pinned map (requests per second).
fn rate_of(maps: &Maps, slot: u32) -> f64 {
    let c = maps.bucket_config(slot).unwrap();
    (1e9 / c.interval_ns as f64).round()
}

/// A reload while dynamic rate limiting throttles: the new static rate of a DRL target
/// is written at the throttle in force, at once (never at its static value), a reload
/// that does not touch it leaves its effective rate alone, and one that changes the DB
/// CPU profile keeps the throttle until the new profile acts.
#[test]
fn a_reload_keeps_the_drl_throttle_in_force() {
    let lab = lab("rt-");
    let sock = lab.tmp.0.join("dra.sock");
    let cfg = lab.tmp.0.join("dra.toml");
    let cpu = lab.tmp.0.join("db_cpu");
    std::fs::write(&cpu, "30\n").unwrap();
    let servers = [("pcrf1", 3868, "pcrf.lab.example")];
    let drl = format!(
        r#"
[[dynamic_peer_rate_limit_profile]]
peer = "pgw2"
classes = [{{ application = "gx", command = "ccr", request_type = "initial" }}]

[dynamic_throttling_db_cpu_profile]
thresholds = [{{ cpu = 50, throttle = 50 }}]
reversal_hold_time = "60s"
reversal_step = 20
sample_period = "250ms"
missing_after = 3
on_missing = "hold"
source = {{ kind = "file", path = "{}" }}
"#,
        cpu.display()
    );
    let text = |rate: u32, msg: &str| {
        config(&lab.net.client.b_if, &sock, rate, &servers, false)
            // No PCRF runs: ready once the listeners are bound (XDP attached before).
            .replace(
                "origin_realm = \"lab.example\"\n",
                "origin_realm = \"lab.example\"\ndynamic_rate_limiting = true\n\
                 startup_wait = \"0s\"\n",
            )
            .replace("rate limit exceeded: pgw2 Gx CCR-I", msg)
            + &drl
    };
    std::fs::write(&cfg, text(200, "one")).unwrap();
    let t = text(200, "one");
    let plan = Plan::new(&dra::config::parse(&t, "dra.toml").unwrap()).unwrap();
    let slot = plan.slot_of("pgw2", MsgClass::gx_ccr(1)).unwrap();
    let mut agent = start_agent(&lab, &cfg);
    let maps = Maps::open_pinned(&lab.pins.0).expect("pinned maps");
    let ok = agent.wait_until(Duration::from_secs(60), || rate_of(&maps, slot) == 200.0);
    assert!(ok, "not attached at 200/s:\n{}", agent.log_text());
    std::fs::write(&cpu, "62\n").unwrap();
    assert!(
        agent.wait_until(Duration::from_secs(10), || rate_of(&maps, slot) == 100.0),
        "the throttle never applied:\n{}",
        agent.log_text()
    );
    // The static rate 200 → 300 under a 50 % throttle: 150 as soon as the reload is
    // done.
    std::fs::write(&cfg, text(300, "one")).unwrap();
    let (ok, out, err) = dra(&["reload", "--config", &cfg.display().to_string()]);
    assert!(ok, "{out}{err}");
    let r = rate_of(&maps, slot);
    assert_eq!(
        r, 150.0,
        "rate after the reload (static 300, throttle 50 %)"
    );
    // A reload that changes another key of the profile: the rate stays.
    std::fs::write(&cfg, text(300, "two")).unwrap();
    let (ok, out, err) = dra(&["reload", "--config", &cfg.display().to_string()]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("limits+ 1, limits- 1"), "{out}");
    assert_eq!(rate_of(&maps, slot), 150.0);
    // A changed DB CPU profile: the new controller takes over at the throttle in force
    // (never a step back to the static rate), then acts by its own rows.
    let one_row = "thresholds = [{ cpu = 50, throttle = 50 }]";
    assert!(text(300, "two").contains(one_row));
    let two_rows = "thresholds = [{ cpu = 50, throttle = 50 }, { cpu = 90, throttle = 80 }]";
    std::fs::write(&cfg, text(300, "two").replace(one_row, two_rows)).unwrap();
    let (ok, out, err) = dra(&["reload", "--config", &cfg.display().to_string()]);
    assert!(ok, "{out}{err}");
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        // CPU 62 %: the new profile's row is 50 % too, so 150 throughout.
        assert_eq!(rate_of(&maps, slot), 150.0, "after the profile changed");
        // The scenario: 1.5 s under the new profile, the rate read every 20 ms.
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&cpu, "95\n").unwrap();
    assert!(
        agent.wait_until(Duration::from_secs(10), || rate_of(&maps, slot) == 60.0),
        "the new profile's 80 % row never applied:\n{}",
        agent.log_text()
    );
    let st = agent.stop();
    assert!(st.is_some_and(|s| s.success()), "{}", agent.log_text());
}
