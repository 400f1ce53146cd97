//! dra-loadgen client ↔ server over real TCP on 127.0.0.1.

mod support;

use std::time::Duration;

use dra::diameter::peer::peer_load_value;
use dra::diameter::{Avp, Message, avp_code};
use dra_common::wire::{app, cmd};
use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::loadgen_peer_config;
use dra_tools::loadgen::scenario::{Class, Scenario};
use dra_tools::loadgen::script::ScriptedPeer;
use dra_tools::loadgen::server::{self, LatencyDist, Overload, ServerConfig, ServerStats};
use dra_tools::loadgen::stats::Report;
use support::pcrf_scenario;

fn server_cfg(host: &str) -> ServerConfig {
    ServerConfig::new("127.0.0.1:0".parse().unwrap(), host, "pcrf.lab.example")
}

/// Runs `scenario` with `peers` gateways straight against a server configured as
/// `cfg`: the client's report and the server's counts.
async fn run_against(cfg: ServerConfig, peers: usize, scenario: Scenario) -> (Report, ServerStats) {
    let srv = server::run(cfg).await.unwrap();
    let report = client::run(ClientConfig::new(srv.local_addr(), peers), scenario)
        .await
        .unwrap();
    (report, srv.shutdown().await)
}

fn within(actual: u64, expected: f64, tol: f64) -> bool {
    (actual as f64 - expected).abs() <= expected * tol
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cer_cea_and_dwa_carries_the_servers_load() {
    let srv = server::run(server_cfg("pcrf1.lab.example")).await.unwrap();
    let addr = srv.local_addr();
    let cfg = loadgen_peer_config(
        "probe.lab.example",
        "lab.example",
        addr.ip(),
        Duration::from_secs(30),
    );
    // The CEA must come from pcrf1.lab.example: the probe accepts no other host.
    let probe = ScriptedPeer::connect(addr, cfg, "pcrf1.lab.example", None)
        .await
        .expect("CER accepted by pcrf1.lab.example");
    // RFC 6733 §5.5.1: a DWR from us; the server answers DWA + RFC 8583 Load.
    let dwr = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 0, 78)
        .with(Avp::utf8(avp_code::ORIGIN_HOST, "probe.lab.example").mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_REALM, "lab.example").mandatory());
    let dwa = tokio::time::timeout(Duration::from_secs(5), probe.request(dwr))
        .await
        .unwrap();
    let dwa = dwa.expect("a DWA");
    assert_eq!(dwa.result_code(), Some(2001));
    // Idle server: full Load-Value.
    assert_eq!(peer_load_value(&dwa, "pcrf1.lab.example"), Some(65535));
    assert_eq!(srv.shutdown().await.dwr_received, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_scenario_is_answered_at_the_scenarios_rates_with_consistent_sessions() {
    let scenario = Scenario::from_toml(
        r#"
name = "steady"
destination_realm = "pcrf.lab.example"
[[phase]]
name = "steady"
duration_s = 5
[phase.rates]
gx_ccr_i = 200
gx_ccr_u = 100
gx_ccr_t = 100
gy_ccr_i = 100
gy_ccr_u = 50
gy_ccr_t = 50
"#,
    )
    .unwrap();
    let (report, stats) = run_against(server_cfg("pcrf1.lab.example"), 4, scenario).await;
    let expect = [
        (Class::GxCcrI, 1000.0),
        (Class::GxCcrU, 500.0),
        (Class::GxCcrT, 500.0),
        (Class::GyCcrI, 500.0),
        (Class::GyCcrU, 250.0),
        (Class::GyCcrT, 250.0),
    ];
    for (class, n) in expect {
        let c = report.class(class.name());
        assert!(
            within(c.sent, n, 0.03),
            "{class:?}: sent {} expected {n}",
            c.sent
        );
        assert_eq!(c.answered_with(2001), c.sent, "{class:?}: {c:?}");
        assert_eq!((c.timeouts, c.unanswered), (0, 0));
    }
    // Every CCR-U/T referred to a session the server had opened with a CCR-I.
    assert_eq!(stats.unknown_session, 0);
    assert_eq!(stats.duplicate_session, 0);
    assert_eq!(report.peers.opened, 4);
    // Connected straight to the server: its answers are the connected peer's own (what a
    // DRA's 3002/3004 would be), counted by Result-Code, and there is no server to count.
    assert_eq!(
        report.own_answers.get("2001").copied(),
        Some(report.classes.values().map(|c| c.sent).sum())
    );
    assert!(report.servers.is_empty(), "{:?}", report.servers);
    let open = report.open_sessions_at_end["gx"] + report.open_sessions_at_end["gy"];
    assert_eq!(stats.sessions_open, open);
    assert_eq!(report.sessions.opened - report.sessions.closed, open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_flush_sends_one_ccr_t_per_open_session() {
    let scenario = pcrf_scenario(&[
        r#"name = "open", duration_s = 1.5, rates = { gx_ccr_i = 200, gy_ccr_i = 50 }"#,
        r#"name = "quiet", duration_s = 0.5"#,
        r#"name = "flush", duration_s = 1, flush = "gx""#,
    ]);
    let (report, stats) = run_against(server_cfg("pcrf1.lab.example"), 3, scenario).await;
    let gx_opened = report.class(Class::GxCcrI.name()).answered_with(2001);
    assert_eq!(gx_opened, 300, "{report:#?}");
    assert_eq!(report.class(Class::GxCcrT.name()).sent, gx_opened);
    assert_eq!(report.sessions.flush_ccr_t, gx_opened);
    assert_eq!(
        report.class(Class::GxCcrT.name()).answered_with(2001),
        gx_opened
    );
    assert_eq!(report.open_sessions_at_end["gx"], 0);
    // Gy untouched.
    assert_eq!(report.open_sessions_at_end["gy"], 75);
    assert_eq!(stats.sessions_open, 75);
    assert_eq!(stats.unknown_session, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_capacity_the_server_answers_3004_or_queues() {
    // 10 slots × 50 ms = 200/s capacity; offered 400/s for 2 s.
    let scenario = Scenario {
        request_timeout_ms: 5000,
        ..pcrf_scenario(&["duration_s = 2, rates = { gx_ccr_i = 400 }"])
    };
    let mut cfg = server_cfg("pcrf1.lab.example");
    cfg.max_concurrent = 10;
    cfg.latency = LatencyDist::Fixed(Duration::from_millis(50));
    cfg.overload = Overload::Reject;
    let (report, stats) = run_against(cfg.clone(), 2, scenario.clone()).await;
    let c = report.class(Class::GxCcrI.name());
    assert_eq!(c.sent, 800);
    assert_eq!(c.answered_total(), 800);
    let ok = c.answered_with(2001);
    let busy = c.answered_with(3004);
    assert_eq!(ok + busy, 800);
    // At most 10 in service per 50 ms over ~2 s (+ the last batch).
    assert!(ok <= 420 + 10, "2001: {ok}");
    assert!(busy >= 300, "3004: {busy}");
    assert!(stats.max_busy <= 10);
    // Every 3004 is immediate; the 2001s took at least the service time.
    assert!(c.latency.max_ms >= 50.0);

    cfg.overload = Overload::Queue;
    let (report, stats) = run_against(cfg, 2, scenario).await;
    let c = report.class(Class::GxCcrI.name());
    assert_eq!(c.answered_with(2001), 800);
    // Queueing: 800 requests through 200/s take ~4 s, so the tail waits ~2 s.
    assert!(c.latency.p99_ms > 1000.0, "{:?}", c.latency);
    assert!(stats.max_busy > 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_follows_the_configured_distribution() {
    let scenario = pcrf_scenario(&["duration_s = 2, rates = { gy_ccr_i = 200 }"]);
    for (dist, lo, hi) in [
        ("fixed:20ms", 20.0, 40.0),
        ("uniform:10ms:30ms", 17.0, 35.0),
        ("exp:10ms", 6.0, 18.0),
    ] {
        let mut cfg = server_cfg("ocs1.lab.example");
        cfg.latency = dist.parse().unwrap();
        let (report, _) = run_against(cfg, 1, scenario.clone()).await;
        let l = report.class(Class::GyCcrI.name()).latency;
        assert!(l.p50_ms >= lo && l.p50_ms <= hi, "{dist}: {l:?}");
        if dist.starts_with("fixed") || dist.starts_with("uniform") {
            assert!(report.class(Class::GyCcrI.name()).latency.p50_ms >= 10.0);
        }
    }
}
