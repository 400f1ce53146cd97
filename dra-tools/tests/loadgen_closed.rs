//! dra-loadgen closed-loop client ↔ dra-loadgen server over real TCP on 127.0.0.1, on a
//! current-thread runtime (as the relay benchmark runs them).

use std::collections::BTreeMap;
use std::time::Duration;

use dra_tools::loadgen::closed::{self, ClosedConfig, ClosedReport};
use dra_tools::loadgen::server::{self, LatencyDist, ServerConfig, ServerStats};

fn server_cfg(latency: LatencyDist) -> ServerConfig {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().expect("addr"),
        "pcrf1.lab.example",
        "pcrf.lab.example",
    );
    cfg.latency = latency;
    cfg
}

fn closed_cfg(srv: &server::ServerHandle, peers: usize, window: usize) -> ClosedConfig {
    let mut cfg = ClosedConfig::new(srv.local_addr(), peers, window);
    cfg.warmup = Duration::from_millis(200);
    cfg.measure = Duration::from_millis(800);
    cfg.drain = Duration::from_secs(5);
    cfg
}

/// `peers` closed-loop peers with `window` slots each against a server answering with
/// `latency`: their report and the server's counts.
async fn run_closed(
    latency: LatencyDist,
    peers: usize,
    window: usize,
) -> (ClosedReport, ServerStats) {
    let srv = server::run(server_cfg(latency)).await.expect("server");
    let r = closed::run(closed_cfg(&srv, peers, window))
        .await
        .expect("closed-loop run");
    (r, srv.shutdown().await)
}

#[tokio::test]
async fn every_closed_loop_request_is_answered_2001_by_an_inline_server() {
    // Zero latency: the server answers in the connection task. Strict sessions: a CCR-T
    // for a session whose CCR-I was not answered first would get 5002.
    let (peers, window) = (3, 8);
    let (r, stats) = run_closed(LatencyDist::Fixed(Duration::ZERO), peers, window).await;

    assert!(r.total_sent > 0);
    assert_eq!(r.total_answered, BTreeMap::from([(2001, r.total_sent)]));
    assert_eq!(r.unanswered, 0);
    assert!(r.answered_with(2001) > 0, "nothing measured in the window");
    assert_eq!(r.answered_with(2001), r.answered_total());
    assert!(r.sent >= r.answered_total());
    // Every slot was busy at once, never more.
    assert_eq!(r.max_in_flight, window);

    // The server saw the same traffic: CCR-I and CCR-T alternate per slot, every session
    // known when its CCR-T came.
    assert_eq!(stats.cer_accepted, peers as u64);
    assert_eq!(stats.answered, BTreeMap::from([(2001, r.total_sent)]));
    let (i, t) = (
        stats.ccr_received[&1],
        stats.ccr_received.get(&3).copied().unwrap_or(0),
    );
    assert_eq!(i + t, r.total_sent);
    assert_eq!(stats.unknown_session, 0);
    assert_eq!(stats.duplicate_session, 0);
    // Sessions still open are the slots whose last request was a CCR-I.
    assert_eq!(stats.sessions_open, i - t);
    assert!(stats.sessions_open <= (peers * window) as u64);
}

#[tokio::test]
async fn the_window_bounds_what_the_server_has_in_service() {
    // 20 ms service time: the server sees every request in flight at once, so its
    // high-water mark of CCRs in service is the clients' total window.
    let (peers, window) = (2, 5);
    let (r, stats) = run_closed(LatencyDist::Fixed(Duration::from_millis(20)), peers, window).await;

    assert_eq!(r.total_answered, BTreeMap::from([(2001, r.total_sent)]));
    assert_eq!(r.unanswered, 0);
    assert_eq!(r.max_in_flight, window);
    assert!(
        stats.max_busy <= (peers * window) as u64,
        "server had {} CCRs at once, the clients allow {}",
        stats.max_busy,
        peers * window
    );
    assert!(
        stats.max_busy >= window as u64,
        "one peer's full window was never in service at once: {}",
        stats.max_busy
    );
    assert_eq!(stats.answered, BTreeMap::from([(2001, r.total_sent)]));
}

#[tokio::test]
async fn a_refused_cer_fails_the_run() {
    let mut cfg = server_cfg(LatencyDist::Fixed(Duration::ZERO));
    cfg.allowed_hosts = vec!["someone-else.lab.example".to_owned()];
    let srv = server::run(cfg).await.expect("server");
    let err = closed::run(closed_cfg(&srv, 1, 1))
        .await
        .expect_err("the server refuses pgw1");
    srv.shutdown().await;
    // RFC 6733 §5.3: 3010 DIAMETER_UNKNOWN_PEER.
    assert!(
        matches!(
            err,
            closed::ClosedError::Refused {
                result_code: 3010,
                ..
            }
        ),
        "{err:?}"
    );
}
