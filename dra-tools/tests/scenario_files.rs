//! The shipped `dra-loadgen` scenarios (the files with `[[phase]]` under `config/`,
//! beside the agent configs that dra-userspace/tests/config_files.rs checks) are valid,
//! and those in config/scenarios run cleanly through the agent on the shipped lab
//! config (config/lab/dra-lab.toml).

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dra::diameter::result_code;
use dra::limiter::Limiter;
use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::scenario::Scenario;
use dra_tools::loadgen::server::{self, ServerConfig};
use dra_tools::loadgen::stats::Report;
use dra_tools::netns::Netns;
use support::agent::{start_agent, wait_servers_open, with_limiter};
use support::{TempDir, is_scenario, repo_root, toml_files_under};

#[test]
fn every_shipped_scenario_file_is_valid() {
    let mut failures = String::new();
    let mut scenarios = 0;
    for f in toml_files_under(&repo_root().join("config")) {
        if is_scenario(&f) {
            scenarios += 1;
            if let Err(e) = Scenario::load(&f) {
                failures.push_str(&format!("{}: {}\n", f.display(), dra::error_chain(&e)));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "invalid shipped scenarios:\n{failures}"
    );
    assert!(
        scenarios >= 3,
        "the shipped dra-loadgen scenarios were checked ({scenarios})"
    );
}

/// Time scale of the shipped scenarios in the lab run below: phases (and burst times)
/// shortened to a tenth, rates and burst sizes as shipped.
const TIME_SCALE: f64 = 0.1;

/// The lab's addresses (config/lab/dra-lab.toml, `cargo xtask lab up`): the agent's
/// listener, pgw1, and the PCRFs and the OCS it connects to.
const LAB_ADDRS: [&str; 5] = [
    "198.18.1.1",
    "198.18.1.2",
    "198.18.2.2",
    "198.18.2.3",
    "198.18.2.4",
];

/// The lab config as shipped, but for its control socket (a temporary one); the agent
/// enforces its ingress limits itself, as `dra run` does without an XDP interface.
fn lab_config(control: &Path) -> String {
    let text = std::fs::read_to_string(repo_root().join("config/lab/dra-lab.toml"))
        .expect("config/lab/dra-lab.toml");
    let shipped = "socket = \"/run/dra-lab/dra.sock\"";
    assert!(text.contains(shipped), "the lab config changed shape");
    // The agent's overload control off: here the agent shares one process and its
    // runtime with the gateway and the servers (a debug build, beside other tests), so
    // a stall of the process past the target delay would shed requests the scenarios
    // expect answered; what the control does is netns_overload's and the bench's.
    text.replace(shipped, &format!("socket = \"{}\"", control.display()))
        + "\n[overload]\nenabled = false\n"
}

/// A shipped scenario with every phase and burst time scaled by [`TIME_SCALE`].
fn shortened(path: &Path) -> Scenario {
    let mut s = Scenario::load(path).expect("scenario");
    for p in &mut s.phase {
        p.duration_s *= TIME_SCALE;
        for b in &mut p.burst {
            b.at_s *= TIME_SCALE;
        }
    }
    s.validate().expect("shortened scenario");
    s
}

/// Every shipped scenario, run as a new user would (`dra-loadgen client --scenario …
/// --peers 1`, i.e. pgw1) through the agent with the shipped lab config, its servers at
/// the lab's addresses (in a network namespace of the test's own): every request is
/// answered (none times out; only a reconnect storm loses the requests in flight on
/// the connections it drops), by a server (2001) or by the DRA's own limits (3002 for
/// pgw1's ingress limits, 3004 for the groups' egress limits) — never 3003 (a realm the
/// lab does not route, as Gy without `gy_destination_realm`) or anything else. Gx goes
/// to the PCRFs, Gy to the OCS; the DRA's own answers are not server switches.
#[test]
fn every_shipped_scenario_runs_cleanly_on_the_lab_config() {
    support::require_root("a network namespace");
    let ns = Netns::new("hsc").expect("namespace");
    for a in LAB_ADDRS {
        let out = std::process::Command::new("ip")
            .args([
                "-n",
                ns.name(),
                "addr",
                "add",
                &format!("{a}/32"),
                "dev",
                "lo",
            ])
            .output()
            .expect("ip");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let files: Vec<PathBuf> = toml_files_under(&repo_root().join("config/scenarios"))
        .into_iter()
        .filter(|f| is_scenario(f))
        .collect();
    assert!(files.len() >= 3, "{files:?}");
    let tmp = TempDir::new("dra-scenarios-");
    let control = tmp.0.join("dra.sock");
    let text = lab_config(&control);
    let reports = support::run_in_netns(&ns, move || run_all(text, files));
    let mut failures = String::new();
    for (name, r, servers, storms) in &reports {
        println!("{name}:\n{}", r.to_text());
        if let Err(e) = check(r, servers, *storms) {
            failures.push_str(&format!("{name}: {e}\n{}\n", r.to_text()));
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

/// Servers' CCR counts after a run: (Origin-Host, CCRs received).
type ServerCounts = Vec<(String, u64)>;

/// Per scenario: its file name, the client's report, the servers' counts, and whether it
/// has reconnect storms (which lose the requests in flight on purpose).
type Outcome = (String, Report, ServerCounts, bool);

async fn run_all(text: String, files: Vec<PathBuf>) -> Vec<Outcome> {
    let mut out = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let scenario = shortened(&f);
        let storms = scenario.phase.iter().any(|p| p.reconnect);
        // Fresh servers and agent per scenario: one's sessions do not leak into the next.
        let mut servers = Vec::new();
        for (ip, host, realm) in [
            ("198.18.2.2", "pcrf1.pcrf.lab.example", "pcrf.lab.example"),
            ("198.18.2.3", "pcrf2.pcrf.lab.example", "pcrf.lab.example"),
            ("198.18.2.4", "ocs1.ocs.lab.example", "ocs.lab.example"),
        ] {
            let addr: SocketAddr = format!("{ip}:3868").parse().unwrap();
            servers.push(
                server::run(ServerConfig::new(addr, host, realm))
                    .await
                    .expect("server"),
            );
        }
        let cfg = dra::config::parse(&text, "dra-lab.toml").expect("lab config");
        let plan = dra::dataplane::Plan::new(&cfg).expect("plan");
        let opts = with_limiter(Arc::new(Limiter::new(&plan)));
        let agent = start_agent(cfg, opts, dra::metrics::Metrics::new()).await;
        wait_servers_open(&agent, 3, Duration::from_secs(20)).await;
        let mut ccfg = ClientConfig::new("198.18.1.1:3868".parse().unwrap(), 1);
        ccfg.bind = Some("198.18.1.2".parse().unwrap());
        let report = client::run(ccfg, scenario).await.expect("client");
        agent.shutdown().await;
        let mut counts = Vec::new();
        for s in servers {
            let host = s.origin_host().to_owned();
            let st = s.shutdown().await;
            counts.push((host, st.ccr_received.values().sum()));
        }
        out.push((name, report, counts, storms));
    }
    out
}

/// What "runs cleanly" means for one report (see the test).
fn check(r: &Report, servers: &ServerCounts, storms: bool) -> Result<(), String> {
    let allowed = [
        result_code::SUCCESS,
        result_code::UNABLE_TO_DELIVER,
        result_code::TOO_BUSY,
    ];
    let mut sent_total = 0;
    for (name, c) in &r.classes {
        sent_total += c.sent;
        if c.timeouts > 0 {
            return Err(format!("{name}: {} requests timed out", c.timeouts));
        }
        if c.answered_total() + c.unanswered != c.sent {
            return Err(format!(
                "{name}: {} sent, {} answered, {} lost",
                c.sent,
                c.answered_total(),
                c.unanswered
            ));
        }
        if c.unanswered > 0 && !storms {
            return Err(format!(
                "{name}: {} lost without a reconnect storm",
                c.unanswered
            ));
        }
        for code in c.answered.keys() {
            let code: u32 = code.parse().unwrap();
            if !allowed.contains(&code) {
                return Err(format!("{name}: answers {code}: {:?}", c.answered));
            }
        }
        if c.answered_with(result_code::SUCCESS) == 0 {
            return Err(format!("{name}: no request served"));
        }
    }
    if sent_total == 0 {
        return Err("nothing sent".into());
    }
    // Gx went to the PCRFs and Gy to the OCS, and what the servers answered is what
    // they received.
    let from_servers: u64 = r.servers.values().sum();
    let received: u64 = servers.iter().map(|(_, n)| n).sum();
    if from_servers > received {
        return Err(format!(
            "{from_servers} server answers for {received} CCRs received"
        ));
    }
    for (host, n) in servers {
        if *n == 0 {
            return Err(format!("{host} received nothing"));
        }
    }
    if r.servers.keys().any(|h| h.starts_with("dra.")) {
        return Err(format!(
            "the DRA's own answers counted as a server's: {:?}",
            r.servers
        ));
    }
    let own: u64 = r.own_answers.values().sum();
    let limited: u64 = r
        .classes
        .values()
        .map(|c| {
            c.answered_with(result_code::UNABLE_TO_DELIVER) + c.answered_with(result_code::TOO_BUSY)
        })
        .sum();
    if own != limited {
        return Err(format!(
            "{own} answers from the DRA itself ({:?}), {limited} answered 3002/3004",
            r.own_answers
        ));
    }
    if r.sessions.server_switches > 0 {
        return Err(format!("{} server switches", r.sessions.server_switches));
    }
    Ok(())
}
