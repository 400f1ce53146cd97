//! The agent past its own capacity (docs/architecture.md §13): `dra run` with its CPU
//! capped by a cgroup-v1 quota (25 % of one CPU), a gateway offering far more new
//! sessions (CCR-I) than it can relay beside a few hundred updates and terminations per
//! second on sessions opened before, a zero-latency PCRF. With XDP on the gateway-facing
//! veth (the fast path sheds) and without (the reader sheds before decoding):
//!
//! - new sessions are shed, terminations and updates never (level 1 at most);
//! - every shed request the agent answers is 3004 with its own Origin-Host; every other
//!   request is shed unanswered (discarded) — the gateway's timeouts are exactly the
//!   discards the agent counted, per class, and its 3004 answers exactly the answers
//!   it counted; no answer comes late or twice;
//! - the level rises with one log line (WARN) and falls back to 0 with one (INFO), not
//!   sooner than `hold` after the load ended (hysteresis), seen in `dra status`.
//!
//! Goals on goodput, latency and memory are the bench's (`cargo xtask bench overload`).
//! Not in the kernel matrix: the quota is the host's cgroup-v1 `cpu` controller.
//!
//! Topology: gw (198.18.1.2) — veth — dra (198.18.1.1) — veth — srv (198.18.2.2).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use dra_tests::support::{Pins, TempDir, gw_dra_srv_config, skip};
use dra_tests::{agent::Agent, netns::GwDraSrv, traffic};
use dra_tools::loadgen::{
    client::{self, ClientConfig},
    scenario::Scenario,
};

/// The agent's CPU: 2.5 ms per 10 ms.
const PERIOD_US: u64 = 10_000;
const QUOTA_US: u64 = 2_500;
/// The load: CCR-I far past what the capped agent relays, CCR-U and CCR-T well within.
const CCR_I_PER_S: u32 = 6_000;
const CCR_U_PER_S: u32 = 200;
const CCR_T_PER_S: u32 = 200;
const LOAD_S: u64 = 6;
const TIMEOUT_MS: u64 = 3_000;
const HOLD: Duration = Duration::from_secs(2);

fn config(control: &std::path::Path) -> String {
    gw_dra_srv_config("")
        .with(&format!("[overload]\nhold = \"{}s\"\n", HOLD.as_secs()))
        .control(control)
        .to_string()
}

fn scenario() -> Scenario {
    // Sessions for every update and termination of the run, opened before it.
    let open = u64::from(CCR_U_PER_S + CCR_T_PER_S) * LOAD_S * 2;
    Scenario::from_toml(&format!(
        "destination_realm = \"pcrf.lab.example\"\nrequest_timeout_ms = {TIMEOUT_MS}\n\
         open_sessions = {open}\n\n\
         [[phase]]\nname = \"load\"\nduration_s = {LOAD_S}\n\
         rates = {{ gx_ccr_i = {CCR_I_PER_S}, gx_ccr_u = {CCR_U_PER_S}, \
         gx_ccr_t = {CCR_T_PER_S} }}\n"
    ))
    .expect("the scenario parses")
}

/// Per class: (3004 answered, discarded), from `dra status`'s "overload shed" line.
fn shed_counts(status: &str) -> BTreeMap<String, (u64, u64)> {
    let Some(line) = status
        .lines()
        .find_map(|l| l.strip_prefix("overload shed (answered 3004/discarded): "))
    else {
        return BTreeMap::new();
    };
    line.split_whitespace()
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|kv| {
            let (a, d) = kv[1]
                .split_once('/')
                .unwrap_or_else(|| panic!("shed counts {:?} in {line:?}", kv[1]));
            (kv[0].to_owned(), (a.parse().unwrap(), d.parse().unwrap()))
        })
        .collect()
}

/// The level in `dra status`'s "overload: level N (...)" line.
fn level(status: &str) -> Option<u8> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("overload: level "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The log's level changes: (from, to, log level, when).
fn level_changes(log: &str) -> Vec<(u64, u64, String, SystemTime)> {
    log.lines()
        .filter(|l| l.ends_with('}'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("overload level "))
        })
        .map(|v| {
            let when = v["timestamp"]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
                .unwrap_or_else(|| panic!("no timestamp: {v}"));
            (
                v["from"].as_u64().unwrap_or_else(|| panic!("no from: {v}")),
                v["overload_level"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no overload_level: {v}")),
                v["level"].as_str().unwrap_or_default().to_owned(),
                when,
            )
        })
        .collect()
}

fn overload(prefix: &str, xdp: bool) {
    if !netlab::CpuCap::available() {
        skip(
            "no cgroup-v1 cpu controller",
            &format!("the agent's CPU is capped under {}", netlab::CPU_CGROUPS),
        );
        return;
    }
    let net = GwDraSrv::new(prefix, 1, 2);
    let tmp = TempDir::new("dra-ovl-");
    let pins = Pins::new("dra-ovl-");
    let mut pcrf_cfg = traffic::pcrf_config("198.18.2.2:3868".parse().unwrap());
    // The sessions opened before the run are bound when their first update arrives.
    pcrf_cfg.strict_sessions = false;
    let pcrf = traffic::Server::start(&net.srv, pcrf_cfg);
    let control = tmp.0.join("dra.sock");
    let cfg = tmp.0.join("dra.toml");
    std::fs::write(&cfg, config(&control)).unwrap();
    let mut args = vec![
        "--log-format",
        "json",
        "--config",
        cfg.to_str().unwrap(),
        "--pin-dir",
        pins.0.to_str().unwrap(),
        "--detach-on-exit",
    ];
    if xdp {
        args.extend(["--iface", net.client.b_if.as_str()]);
    }
    let mut agent = Agent::start(&net.dra, &args, &tmp.0.join("dra.log"));
    agent.wait_ready(Duration::from_secs(20));
    let cap = netlab::CpuCap::new(&netlab::unique("dra-ovl-"), PERIOD_US, QUOTA_US).unwrap();
    cap.add(agent.pid().expect("running")).unwrap();

    let mut c = ClientConfig::new("198.18.1.1:3868".parse::<SocketAddr>().unwrap(), 1);
    c.bind = Some("198.18.1.2".parse().unwrap());
    c.origin_host_pattern = "pgw1.lab.example".into();
    let scenario = scenario();
    // The schedule starts once the client runs: the load ends no sooner than this.
    let load_end = SystemTime::now() + Duration::from_secs(LOAD_S);
    let report = traffic::in_ns(&net.gw, async move {
        client::run(c, scenario).await.expect("the gateway runs")
    });

    let status = agent.status().expect("dra status");
    let shed = shed_counts(&status);
    let mut fell = String::new();
    let back = agent.wait_until(Duration::from_secs(30), || {
        agent_level(&control, &mut fell) == Some(0)
    });
    let log = agent.log_text();
    agent.stop();
    drop(cap);
    drop(pcrf);
    println!(
        "{}: gateway: {}\nagent: {status}",
        if xdp { "XDP" } else { "no XDP" },
        report.to_text()
    );

    let mut failures = Vec::new();
    let class = |n: &str| report.class(n);
    let (i, u, t) = (class("gx_ccr_i"), class("gx_ccr_u"), class("gx_ccr_t"));
    let i_shed = shed.get("gx_ccr_i").copied().unwrap_or((0, 0));
    if i_shed.0 == 0 || i.answered_with(2001) == 0 {
        failures.push(format!(
            "new sessions: not both shed and relayed (shed {i_shed:?}, answered {:?})",
            i.answered
        ));
    }
    for (name, cs) in [("gx_ccr_u", &u), ("gx_ccr_t", &t)] {
        if shed.contains_key(name) || cs.answered_with(2001) != cs.sent || cs.sent == 0 {
            failures.push(format!(
                "{name}: shed {:?}; sent {}, answered {:?}, timed out {}",
                shed.get(name),
                cs.sent,
                cs.answered,
                cs.timeouts
            ));
        }
    }
    // Every shed request answered 3004 by the agent itself, or discarded: the gateway's
    // counts are the agent's.
    let own_3004 = report.own_answers.get("3004").copied().unwrap_or(0);
    let all_3004: u64 = report.classes.values().map(|c| c.answered_with(3004)).sum();
    if own_3004 != all_3004 {
        failures.push(format!(
            "3004 answers: {all_3004}, of which the agent's own {own_3004}"
        ));
    }
    for (name, cs) in &report.classes {
        let (answered, discarded) = shed.get(name).copied().unwrap_or((0, 0));
        if cs.answered_with(3004) != answered || cs.timeouts != discarded {
            failures.push(format!(
                "{name}: the gateway got {} 3004 and {} timeouts, the agent answered {answered} \
                 and discarded {discarded}",
                cs.answered_with(3004),
                cs.timeouts
            ));
        }
        let other: u64 = cs.answered_total() - cs.answered_with(2001) - cs.answered_with(3004);
        if other != 0 || cs.unanswered != 0 {
            failures.push(format!(
                "{name}: answered {:?}, unanswered {}",
                cs.answered, cs.unanswered
            ));
        }
    }
    if report.peers.late_answers != 0 {
        failures.push(format!("{} answers came late", report.peers.late_answers));
    }
    // One log line per change: 0 → 1 (WARN), back to 0 (INFO) no sooner than `hold`
    // after the load ended.
    let changes = level_changes(&log);
    let shape: Vec<(u64, u64, &str)> = changes
        .iter()
        .map(|(f, t, l, _)| (*f, *t, l.as_str()))
        .collect();
    if shape != [(0, 1, "WARN"), (1, 0, "INFO")] {
        failures.push(format!("level changes {shape:?}, not 0 → 1 → 0"));
    }
    if !back {
        failures.push(format!("the level did not fall back to 0: {fell}"));
    }
    if let Some((_, 0, _, when)) = changes.last()
        && *when < load_end + HOLD
    {
        failures.push(format!(
            "the level fell {:?} before the load's end + hold",
            (load_end + HOLD).duration_since(*when).unwrap_or_default()
        ));
    }
    assert!(failures.is_empty(), "{}\nlog:\n{log}", failures.join("\n"));
}

/// The level in `dra status` now (the last status, or why none, into `last`).
fn agent_level(control: &std::path::Path, last: &mut String) -> Option<u8> {
    match dra_tests::agent::control_request(control, "status") {
        Ok(s) => {
            let l = level(&s);
            *last = s;
            l
        }
        Err(e) => {
            *last = format!("no status: {e}");
            None
        }
    }
}

#[test]
fn with_xdp_new_sessions_are_shed_before_terminations_and_every_request_is_counted() {
    overload("ox", true);
}

#[test]
fn without_xdp_the_reader_sheds_new_sessions_before_terminations_and_counts_each() {
    overload("on", false);
}
