//! Load-aware peer selection, live: the agent (in process, real TCP on 127.0.0.1) in
//! front of three `dra-loadgen` PCRF servers with capacities 1 : 1 : 2, loaded by the
//! `dra-loadgen` client at ~70 % of the total capacity, once per selection strategy.
//! The simulator's ranking (docs/load-balancing.md, "Live") is checked on measurements
//! taken in the same test run; the table is printed (`--nocapture`).
//!
//! Servers: `max_concurrent` 4, 4, 8 with an exponential service time of mean 40 ms
//! and [`Overload::Queue`], i.e. 100, 100 and 200 CCR/s. Offered load: 280 CCR-I/s (70 %)
//! for 8 s. The six runs (five strategies and the stale control below) run at the same
//! time, each on its own agent, servers and client. Only CCR-Is are sent, so every
//! request is one selection (no session binding pins it), as in the simulator.
//!
//! Load information: the servers report `65535 × C / (C + n)` (RFC 8583 Load, type PEER)
//! in their DWAs and, with `ServerConfig::load_in_answers` (the default), in every CCA,
//! computed when the CCA is sent (RFC 8583 §5 allows Load in any answer). The agent takes
//! it from any message, so with load in answers its selector sees each server's queue as
//! of that server's last answer: fresh load, the simulator's small-H regime. A sixth run,
//! least_loaded with load in answers *off*, is the stale control: a DWR goes out only
//! after Tw (≥ 6 s) *without traffic* on the connection (RFC 3539 §3.4.1), so under steady
//! load the agent gets no load report at all and least_loaded is round robin. The
//! assertions below follow from that (see each one).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use dra::diameter::peer::peer_load_value;
use dra::diameter::{Avp, Message, avp_code};
use dra_common::wire::{app, cmd};
use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::loadgen_peer_config;
use dra_tools::loadgen::scenario::{Class, Scenario};
use dra_tools::loadgen::script::ScriptedPeer;
use dra_tools::loadgen::server::{self, LatencyDist, Overload, ServerConfig};
use support::agent::{agent_config, parse_config, tc_200ms, wait_servers_open};
use support::free_port;

const DRA_HOST: &str = "dra.test.example";
const REALM: &str = "test.example";
const PCRF_REALM: &str = "pcrf.test.example";
const TW: Duration = Duration::from_secs(6);
/// CCRs in service at once per server: capacities 1 : 1 : 2.
const CONCURRENCY: [usize; 3] = [4, 4, 8];
const SERVICE_MEAN: Duration = Duration::from_millis(40);
/// 70 % of 4/40ms + 4/40ms + 8/40ms = 400 CCR/s.
const RATE: u32 = 280;
const SECONDS: u32 = 8;
/// The runs, in the simulator's table order: (table label, selection strategy, Load in
/// CCAs). The last one is the stale control.
const RUNS: [(&str, &str, bool); 6] = [
    ("priority", "priority", true),
    ("round_robin", "round_robin", true),
    ("least_loaded", "least_loaded", true),
    ("weighted_load", "weighted_load", true),
    ("p2c", "p2c", true),
    (STALE, "least_loaded", false),
];
/// Label of the stale control: least_loaded with Load in DWAs only.
const STALE: &str = "least_loaded, DWA-only load (stale)";
/// Round robin's utilisation CV with capacities 1:1:2: shares 1/3 each give utilisations
/// 1/12, 1/12, 1/24: population stddev / mean = √2 / 5.
const ROUND_ROBIN_CV: f64 = std::f64::consts::SQRT_2 / 5.0;

fn agent_toml(port: u16, servers: &[SocketAddr], selection: &str) -> String {
    let mut t = agent_config(&["127.0.0.1"], port)
        .client("pgw1", REALM, &[], "")
        .client("pgw2", REALM, &[], "");
    for (i, a) in servers.iter().enumerate() {
        let name = format!("pcrf{}", i + 1);
        t = t.server(&name, PCRF_REALM, &a.to_string(), "group = \"pcrf\"");
    }
    t.group(
        "pcrf",
        &format!(
            "answer_timeout = \"3s\"\ndelay_tolerance = \"200ms\"\nqueue_limit = 100000\n\
             selection = \"{selection}\""
        ),
    )
    .route(PCRF_REALM, "application = \"gx\"\ngroup = \"pcrf\"")
    .to_string()
}

async fn start_agent(servers: &[SocketAddr], selection: &str) -> dra::agent::AgentHandle {
    let cfg = parse_config(&agent_toml(free_port(), servers, selection));
    let opts = dra::agent::AgentOptions {
        tw: Some(TW),
        ..tc_200ms()
    };
    let agent = support::agent::start_agent(cfg, opts, dra::metrics::Metrics::new()).await;
    wait_servers_open(&agent, servers.len(), Duration::from_secs(10)).await;
    agent
}

async fn start_servers(seed: u64, load_in_answers: bool) -> Vec<server::ServerHandle> {
    let mut out = Vec::new();
    for (i, c) in CONCURRENCY.iter().enumerate() {
        let mut cfg = ServerConfig::new(
            "127.0.0.1:0".parse().expect("addr"),
            &format!("pcrf{}.{PCRF_REALM}", i + 1),
            PCRF_REALM,
        );
        cfg.latency = LatencyDist::Exponential { mean: SERVICE_MEAN };
        cfg.max_concurrent = *c;
        cfg.overload = Overload::Queue;
        cfg.strict_sessions = false;
        cfg.tw = TW;
        cfg.seed = seed.wrapping_add(i as u64);
        cfg.load_in_answers = load_in_answers;
        out.push(server::run(cfg).await.expect("server"));
    }
    out
}

/// One strategy's measurements.
#[derive(Debug)]
struct Run {
    label: &'static str,
    /// CCR-Is each server received.
    received: Vec<u64>,
    /// CV (population stddev / mean) of received / capacity over the servers.
    util_cv: f64,
    p50_ms: f64,
    mean_ms: f64,
    p99_ms: f64,
    sent: u64,
    answered: u64,
    /// The agent's status table at the end (load column: last report, "-" if none).
    status: String,
}

/// The load column of the agent's status for each server peer ("-": no report).
fn server_loads(status: &str) -> Vec<String> {
    status
        .lines()
        .filter(|l| l.contains(" server "))
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect()
}

fn cv(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

async fn run_strategy(
    label: &'static str,
    strategy: &'static str,
    load_in_answers: bool,
    seed: u64,
) -> Run {
    let servers = start_servers(seed, load_in_answers).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
    let agent = start_agent(&addrs, strategy).await;
    let scenario = Scenario::from_toml(&format!(
        "name = \"lb-{strategy}\"\ndestination_realm = \"{PCRF_REALM}\"\n\
         request_timeout_ms = 10000\n\n\
         [[phase]]\nname = \"steady\"\nduration_s = {SECONDS}\nrates = {{ gx_ccr_i = {RATE} }}\n"
    ))
    .expect("scenario");
    let mut ccfg = ClientConfig::new(agent.listen_addrs()[0], 2);
    ccfg.origin_host_pattern = format!("pgw{{n}}.{REALM}");
    ccfg.origin_realm = REALM.to_owned();
    ccfg.tw = TW;
    ccfg.seed = seed;
    let report = client::run(ccfg, scenario).await.expect("client");
    let status = agent.status().await.unwrap_or_default();
    agent.shutdown().await;
    let mut received = Vec::new();
    for s in servers {
        let st = s.shutdown().await;
        received.push(st.ccr_received.get(&1).copied().unwrap_or(0));
    }
    let util: Vec<f64> = received
        .iter()
        .zip(CONCURRENCY)
        .map(|(r, c)| *r as f64 / c as f64)
        .collect();
    let c = report.class(Class::GxCcrI.name());
    Run {
        label,
        util_cv: cv(&util),
        received,
        p50_ms: c.latency.p50_ms,
        mean_ms: c.latency.mean_ms,
        p99_ms: c.latency.p99_ms,
        sent: c.sent,
        answered: c.answered_total(),
        status,
    }
}

fn table(runs: &[Run]) -> String {
    let mut t = String::from(
        "| strategy | utilisation CV | p50 ms | mean ms | p99 ms | \
         CCR-I per server (cap 1:1:2) | sent / answered |\n\
         |---|---:|---:|---:|---:|---|---|\n",
    );
    for r in runs {
        let per: Vec<String> = r.received.iter().map(u64::to_string).collect();
        t.push_str(&format!(
            "| {} | {:.4} | {:.1} | {:.1} | {:.1} | {} | {} / {} |\n",
            r.label,
            r.util_cv,
            r.p50_ms,
            r.mean_ms,
            r.p99_ms,
            per.join(" / "),
            r.sent,
            r.answered
        ));
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_ranking_of_the_strategies_matches_the_simulator() {
    // All six at once, each with its own agent, servers and client: a stall of this
    // process (a shared, busy machine) hits every strategy alike, so comparisons within
    // the run stay fair. Same seed everywhere: the servers draw the same service times
    // (common random numbers, as in the simulator).
    let mut set = tokio::task::JoinSet::new();
    for (label, strategy, load_in_answers) in RUNS {
        set.spawn(run_strategy(label, strategy, load_in_answers, 7));
    }
    let mut runs = Vec::new();
    while let Some(r) = set.join_next().await {
        let r = r.expect("run");
        eprintln!("{}: agent status at the end\n{}", r.label, r.status);
        runs.push(r);
    }
    runs.sort_by_key(|r| RUNS.iter().position(|(l, _, _)| *l == r.label));
    let t = table(&runs);
    println!("{t}");
    let by = |s: &str| runs.iter().find(|r| r.label == s).expect("run");
    let (pri, rr, ll, wl, p2c, stale) = (
        by("priority"),
        by("round_robin"),
        by("least_loaded"),
        by("weighted_load"),
        by("p2c"),
        by(STALE),
    );
    for r in &runs {
        // The load was offered in full (the client paces at RATE): otherwise the
        // comparison would be between different loads.
        let want = u64::from(RATE * SECONDS);
        assert!(
            r.sent + r.sent / 20 >= want,
            "{}: sent {} of {want}\n{t}",
            r.label,
            r.sent
        );
    }
    // Priority is worst (simulator: CV 0.53, p99 orders of magnitude above the rest):
    // everything goes to pcrf1 at 175 % of its capacity, so its queue grows for the whole
    // run and waits reach the 3 s answer timeout (then one retry elsewhere). Margins of
    // 2× on both metrics; the others stay far from that.
    for other in [rr, ll, wl, p2c, stale] {
        assert!(
            pri.util_cv > 2.0 * other.util_cv,
            "priority vs {}: CV\n{t}",
            other.label
        );
        assert!(
            pri.p99_ms > 2.0 * other.p99_ms,
            "priority vs {}: p99\n{t}",
            other.label
        );
    }
    // Round robin ignores capacity: one selector, exact thirds (±1 request), hence the
    // utilisation CV √2/5 ≈ 0.283 whatever the timing (simulator: 0.2808 with 10
    // clients). The tolerance covers the ±1 request and the last requests in flight.
    assert!(
        (rr.util_cv - ROUND_ROBIN_CV).abs() < 0.01,
        "round robin CV {} vs {ROUND_ROBIN_CV}\n{t}",
        rr.util_cv
    );
    // Load in every CCA reached the agent: its status shows a load for every server
    // with least_loaded (fresh), none with the DWA-only control (stale).
    assert_eq!(server_loads(&ll.status).len(), 3, "status\n{}", ll.status);
    assert_eq!(
        server_loads(&stale.status).len(),
        3,
        "status\n{}",
        stale.status
    );
    assert!(
        server_loads(&ll.status).iter().all(|l| l != "-"),
        "least_loaded: no load report\n{}",
        ll.status
    );
    assert!(
        server_loads(&stale.status).iter().all(|l| l == "-"),
        "stale control: a load report arrived\n{}",
        stale.status
    );
    // With fresh load least_loaded and p2c see the servers' queues and use the big
    // server's capacity (simulator, 10 clients, H = 0: CV 0.05 / 0.06 against round
    // robin's 0.28; p99 16.7 / 18.8 and mean 3.6 / 4.1 against 90 and 17.3 IAT). Over
    // eight runs here (see docs/load-balancing.md, "Live"):
    // - the big server gets more than 1.3× (least_loaded) / 1.2× (p2c) the CCR-Is of
    //   either small one (measured ≥ 1.64× / ≥ 1.50×), where round robin gives a third
    //   each;
    // - utilisation CV more than 0.1 below round robin's (measured 0.072–0.087 / 0.097–0.125
    //   against 0.283);
    // - mean latency below 2/3 of round robin's (measured 0.40–0.47× / 0.39–0.47×) and
    //   p99 below 0.9× (measured 0.50–0.73× / 0.46–0.55×). p99 of ~2240 answers is the
    //   noisier statistic, hence its wider margin.
    for (r, big_share) in [(ll, 1.3), (p2c, 1.2)] {
        let small = r.received[0].max(r.received[1]) as f64;
        assert!(
            r.received[2] as f64 > big_share * small,
            "{}: big server not preferred\n{t}",
            r.label
        );
        assert!(
            r.util_cv < rr.util_cv - 0.1,
            "{} CV vs round robin\n{t}",
            r.label
        );
        assert!(
            r.mean_ms < 2.0 / 3.0 * rr.mean_ms,
            "{} mean latency vs round robin\n{t}",
            r.label
        );
        assert!(
            r.p99_ms < 0.9 * rr.p99_ms,
            "{} p99 vs round robin\n{t}",
            r.label
        );
    }
    // weighted_load with fresh load draws in proportion to the Load-Values: the big
    // server reports more headroom for the same queue, so it gets more than either small
    // one (simulator: 40952 vs 29572 of 100000; measured ≥ 1.32×, asserted > 1.15×), but
    // traffic still goes to a server in proportion to its headroom, not only to the best
    // one, so its split lies between least_loaded's and round robin's (simulator CV
    // 0.16 between 0.05 and 0.28; measured 0.148–0.173, least_loaded ≤ 0.087): asserted
    // with margins of 0.05 on both sides (measured gaps ≥ 0.076 and ≥ 0.110).
    let small = wl.received[0].max(wl.received[1]) as f64;
    assert!(
        wl.received[2] as f64 > 1.15 * small,
        "weighted_load: big server not preferred\n{t}"
    );
    assert!(
        ll.util_cv + 0.05 < wl.util_cv && wl.util_cv < rr.util_cv - 0.05,
        "weighted_load CV not between least_loaded's and round robin's\n{t}"
    );
    // The stale control: Load in DWAs only never reaches the selector under traffic
    // (module docs), all servers look alike and ties rotate, so least_loaded splits
    // exactly like round robin (the simulator's H → ∞ with equal stale reports).
    assert!(
        (stale.util_cv - ROUND_ROBIN_CV).abs() < 0.01,
        "stale least_loaded CV {} — did a fresh load report arrive?\n{t}",
        stale.util_cv
    );
}

/// The agent's own RFC 8583 Load in a DWA to a downstream peer: type PEER, SourceID the
/// agent, a value derived from its pending table and CPU (idle agent: high).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_reports_its_own_load_in_downstream_dwas() {
    let servers = start_servers(1, true).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
    let agent = start_agent(&addrs[..1], "round_robin").await;
    let addr = agent.listen_addrs()[0];
    let host = format!("pgw1.{REALM}");
    let cfg = loadgen_peer_config(&host, REALM, addr.ip(), TW);
    let pgw = ScriptedPeer::connect(addr, cfg, DRA_HOST, None)
        .await
        .expect("CER accepted");
    // RFC 6733 §5.5.1: our DWR; the agent answers DWA + its RFC 8583 Load.
    let dwr = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 0, 92)
        .with(Avp::utf8(avp_code::ORIGIN_HOST, &host).mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_REALM, REALM).mandatory());
    let dwa = tokio::time::timeout(Duration::from_secs(5), pgw.request(dwr))
        .await
        .expect("agent answers");
    let dwa = dwa.expect("a DWA");
    assert_eq!(dwa.result_code(), Some(2001));
    let value = peer_load_value(&dwa, DRA_HOST).expect("Load AVP about the agent");
    // Nothing pending; the CPU share of this idle test process is far below half.
    assert!(value > 32_767, "idle agent reports Load-Value {value}");
    agent.shutdown().await;
    for s in servers {
        s.shutdown().await;
    }
}
