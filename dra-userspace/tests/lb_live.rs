//! Load-aware peer selection, live: the agent (in process, real TCP on 127.0.0.1) in
//! front of three `dra-loadgen` PCRF servers with capacities 1 : 1 : 2, loaded by the
//! `dra-loadgen` client at ~70 % of the total capacity, once per selection strategy.
//! The simulator's ranking (docs/load-balancing.md, "Live") is checked on measurements
//! taken in the same test run; the table is printed (`--nocapture`).
//!
//! Servers: `max_concurrent` 4, 4, 8 with an exponential service time of mean 40 ms
//! and [`Overload::Queue`], i.e. 100, 100 and 200 CCR/s. Offered load: 280 CCR-I/s (70 %)
//! for 8 s. The five strategies run at the same time, each on its own agent, servers and
//! client. Only CCR-Is are sent, so every request is one selection (no session binding
//! pins it), as in the simulator.
//!
//! Load information: the servers report `65535 × C / (C + n)` in their DWAs only, and a
//! DWR goes out only after Tw (≥ 6 s) *without traffic* on the connection (RFC 3539
//! §3.4.1), so under steady load the agent gets no load report at all; the loadgen
//! server does not put a Load AVP in its CCAs (RFC 8583 allows it in any answer). What
//! the agent knows fresh is its own requests in flight per server, which `p2c` uses to
//! break ties. The assertions below follow from that (see each one).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dra::diameter::peer::{ConnectionOptions, Handled, PeerConnection, PeerEvent, peer_load_value};
use dra::diameter::{Avp, Framer, Message, avp_code};
use dra::loadgen::client::{self, ClientConfig};
use dra::loadgen::scenario::{Class, Scenario};
use dra::loadgen::server::{self, LatencyDist, Overload, ServerConfig};
use dra::loadgen::{AllowList, loadgen_peer_config};
use dra_common::wire::{app, cmd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
/// Selection strategies, in the simulator's table order.
const STRATEGIES: [&str; 5] = [
    "priority",
    "round_robin",
    "least_loaded",
    "weighted_load",
    "p2c",
];
/// Round robin's utilisation CV with capacities 1:1:2: shares 1/3 each give utilisations
/// 1/12, 1/12, 1/24: population stddev / mean = √2 / 5.
const ROUND_ROBIN_CV: f64 = std::f64::consts::SQRT_2 / 5.0;

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn agent_toml(port: u16, servers: &[SocketAddr], selection: &str) -> String {
    let mut t = format!(
        "[global]\norigin_host = \"{DRA_HOST}\"\norigin_realm = \"{REALM}\"\ndiameter_ports = [{port}]\n\n\
         [[listener]]\naddress = \"127.0.0.1:{port}\"\ntransport = \"tcp\"\n\n"
    );
    for c in ["pgw1", "pgw2"] {
        t.push_str(&format!(
            "[[peer]]\nname = \"{c}\"\norigin_host = \"{c}.{REALM}\"\nrealm = \"{REALM}\"\naddresses = []\nrole = \"client\"\n\n"
        ));
    }
    for (i, a) in servers.iter().enumerate() {
        let n = i + 1;
        t.push_str(&format!(
            "[[peer]]\nname = \"pcrf{n}\"\norigin_host = \"pcrf{n}.{PCRF_REALM}\"\nrealm = \"{PCRF_REALM}\"\naddresses = []\nrole = \"server\"\ngroup = \"pcrf\"\nconnect = \"{a}\"\n\n"
        ));
    }
    t.push_str(&format!(
        "[[peer_group]]\nname = \"pcrf\"\nanswer_timeout = \"3s\"\ndelay_tolerance = \"200ms\"\nqueue_limit = 100000\nselection = \"{selection}\"\n\n\
         [[route]]\nrealm = \"{PCRF_REALM}\"\napplication = \"gx\"\ngroup = \"pcrf\"\n"
    ));
    t
}

async fn start_agent(servers: &[SocketAddr], selection: &str) -> dra::agent::AgentHandle {
    let text = agent_toml(free_port(), servers, selection);
    let cfg = match dra::config::parse(&text, "lb_live.toml") {
        Ok(c) => c,
        Err(e) => panic!("config: {e}\n{text}"),
    };
    let opts = dra::agent::AgentOptions {
        tc: Some(Duration::from_millis(200)),
        tw: Some(TW),
        ..Default::default()
    };
    let agent = dra::agent::start(cfg, opts, dra::metrics::Metrics::new())
        .await
        .expect("agent");
    for _ in 0..400 {
        let s = agent.status().await.expect("status");
        let open = s
            .lines()
            .filter(|l| l.contains(" server ") && l.contains(" open "))
            .count();
        if open == servers.len() {
            return agent;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "servers never opened:\n{}",
        agent.status().await.unwrap_or_default()
    );
}

async fn start_servers(seed: u64) -> Vec<server::ServerHandle> {
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
        out.push(server::run(cfg).await.expect("server"));
    }
    out
}

/// One strategy's measurements.
#[derive(Debug)]
struct Run {
    strategy: &'static str,
    /// CCR-Is each server received.
    received: Vec<u64>,
    /// CV (population stddev / mean) of received / capacity over the servers.
    util_cv: f64,
    p50_ms: f64,
    mean_ms: f64,
    p99_ms: f64,
    sent: u64,
    answered: u64,
    /// The agent's status table at the end (load column: reports received).
    status: String,
}

fn cv(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

async fn run_strategy(strategy: &'static str, seed: u64) -> Run {
    let servers = start_servers(seed).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
    let agent = start_agent(&addrs, strategy).await;
    let scenario = Scenario::from_toml(&format!(
        "name = \"lb-{strategy}\"\ndestination_realm = \"{PCRF_REALM}\"\nrequest_timeout_ms = 10000\n\n\
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
    let c = report.class(Class::GxCcrI);
    Run {
        strategy,
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
        "| strategy | utilisation CV | p50 ms | mean ms | p99 ms | CCR-I per server (cap 1:1:2) | sent / answered |\n|---|---:|---:|---:|---:|---|---|\n",
    );
    for r in runs {
        let per: Vec<String> = r.received.iter().map(u64::to_string).collect();
        t.push_str(&format!(
            "| {} | {:.4} | {:.1} | {:.1} | {:.1} | {} | {} / {} |\n",
            r.strategy,
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
    // All five at once, each with its own agent, servers and client: a stall of this
    // process (a shared, busy machine) hits every strategy alike, so comparisons within
    // the run stay fair. Same seed everywhere: the servers draw the same service times
    // (common random numbers, as in the simulator).
    let mut set = tokio::task::JoinSet::new();
    for s in STRATEGIES {
        set.spawn(run_strategy(s, 7));
    }
    let mut runs = Vec::new();
    while let Some(r) = set.join_next().await {
        let r = r.expect("run");
        eprintln!("{}: agent status at the end\n{}", r.strategy, r.status);
        runs.push(r);
    }
    runs.sort_by_key(|r| STRATEGIES.iter().position(|s| *s == r.strategy));
    let t = table(&runs);
    println!("{t}");
    let by = |s: &str| runs.iter().find(|r| r.strategy == s).expect("run");
    let (pri, rr, ll, wl, p2c) = (
        by("priority"),
        by("round_robin"),
        by("least_loaded"),
        by("weighted_load"),
        by("p2c"),
    );
    for r in &runs {
        // The load was offered in full (the client paces at RATE): otherwise the
        // comparison would be between different loads.
        let want = u64::from(RATE * SECONDS);
        assert!(
            r.sent + r.sent / 20 >= want,
            "{}: sent {} of {want}\n{t}",
            r.strategy,
            r.sent
        );
    }
    // Priority is worst (simulator: CV 0.53, p99 orders of magnitude above the rest):
    // everything goes to pcrf1 at 175 % of its capacity, so its queue grows for the whole
    // run and waits reach the 3 s answer timeout (then one retry elsewhere). Margins of
    // 2× on both metrics; the others stay far from that.
    for other in [rr, ll, wl, p2c] {
        assert!(
            pri.util_cv > 2.0 * other.util_cv,
            "priority vs {}: CV\n{t}",
            other.strategy
        );
        assert!(
            pri.p99_ms > 2.0 * other.p99_ms,
            "priority vs {}: p99\n{t}",
            other.strategy
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
    // p2c ranks the two drawn servers by Load-Value (all equal here: no fresh report),
    // then by the agent's own requests in flight to each — a fresh signal: a server whose
    // queue grows collects pending requests and is avoided. It equalises queues, not
    // utilisation, so it uses the capacity only partly (measured: the big server gets
    // 36–38 %, not 50 %), but enough to keep the small servers' queues short:
    // - the big server gets clearly more than either small one (≥ 5 %; measured 14–23 %),
    //   where round robin gives exactly a third each;
    // - utilisation CV below round robin's by more than 0.02 (measured 0.20–0.24 vs
    //   0.283);
    // - mean latency below 2/3 of round robin's (measured 0.36–0.48×) and p99 below 4/5
    //   of it (measured 0.42–0.59×; the simulator at H = 0: 18.8 vs 90 IAT). The mean
    //   gets the wider margin because it is the steadier statistic.
    let small = p2c.received[0].max(p2c.received[1]) as f64;
    assert!(
        p2c.received[2] as f64 > 1.05 * small,
        "p2c: big server not preferred\n{t}"
    );
    assert!(
        p2c.util_cv < rr.util_cv - 0.02,
        "p2c CV vs round robin\n{t}"
    );
    assert!(
        p2c.mean_ms * 1.5 < rr.mean_ms,
        "p2c mean latency vs round robin\n{t}"
    );
    assert!(p2c.p99_ms * 1.25 < rr.p99_ms, "p2c p99 vs round robin\n{t}");
    // least_loaded sees no fresh Load-Value under traffic (module docs): all servers look
    // alike and ties rotate, so it splits exactly like round robin (the simulator's
    // H → ∞ with equal stale reports). Asserted, so that the day load reaches the
    // selector under traffic (Load in answers) this test is revisited. weighted_load is
    // then a uniform random draw; only "better than priority" is asserted for it above.
    assert!(
        (ll.util_cv - ROUND_ROBIN_CV).abs() < 0.01,
        "least_loaded CV {} — did a fresh load report arrive?\n{t}",
        ll.util_cv
    );
}

/// The agent's own RFC 8583 Load in a DWA to a downstream peer: type PEER, SourceID the
/// agent, a value derived from its pending table and CPU (idle agent: high).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_reports_its_own_load_in_downstream_dwas() {
    let servers = start_servers(1).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
    let agent = start_agent(&addrs[..1], "round_robin").await;
    let addr = agent.listen_addrs()[0];
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let host = format!("pgw1.{REALM}");
    let cfg = Arc::new(loadgen_peer_config(&host, REALM, addr.ip(), TW));
    let mut pc = PeerConnection::initiator(
        cfg,
        Arc::new(AllowList::default()),
        addr.ip(),
        ConnectionOptions::new(1, 0),
    )
    .expect("peer");
    let t0 = tokio::time::Instant::now();
    pc.handle_connected(t0.elapsed());
    let mut framer = Framer::new();
    let mut buf = vec![0u8; 4096];
    let (mut open, mut dwr_sent, mut dwa) = (false, false, None);
    while dwa.is_none() {
        while let Some(m) = pc.poll_transmit() {
            sock.write_all(&m.encode()).await.expect("write");
        }
        while let Some(e) = pc.poll_event() {
            if let PeerEvent::Opened { .. } = e {
                open = true;
            }
        }
        if open && !dwr_sent {
            // RFC 6733 §5.5.1: our DWR; the agent answers DWA + its RFC 8583 Load.
            let dwr = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 91, 92)
                .with(Avp::utf8(avp_code::ORIGIN_HOST, &host).mandatory())
                .with(Avp::utf8(avp_code::ORIGIN_REALM, REALM).mandatory());
            sock.write_all(&dwr.encode()).await.expect("write");
            dwr_sent = true;
        }
        let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
            .await
            .expect("agent answers")
            .expect("read");
        assert!(n > 0, "agent closed the connection");
        framer.push(&buf[..n]);
        while let Some(f) = framer.next_message().expect("frame") {
            let m = Message::decode(&f).expect("decode");
            if m.command_code == cmd::DEVICE_WATCHDOG && !m.is_request() && m.hop_by_hop == 91 {
                dwa = Some(m.clone());
            }
            let _ = matches!(pc.handle_message(t0.elapsed(), m), Handled::Consumed);
        }
    }
    let dwa = dwa.expect("dwa");
    assert_eq!(dwa.result_code(), Some(2001));
    let value = peer_load_value(&dwa, DRA_HOST).expect("Load AVP about the agent");
    // Nothing pending; the CPU share of this idle test process is far below half.
    assert!(value > 32_767, "idle agent reports Load-Value {value}");
    agent.shutdown().await;
    for s in servers {
        s.shutdown().await;
    }
}
