//! The agent over real TCP: capabilities exchange, watchdog, unknown peers, marked
//! requests, the control socket.

mod support;

use dra::diameter::{avp_code, result_code};
use dra_common::wire::flags;
use support::agent::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cer_cea_and_dwr_dwa_both_directions() {
    let lab = Lab::start(1, 1, None, "", None).await;
    // The agent dialled both servers and completed CER/CEA (Lab::start waits for open).
    assert_eq!(lab.pcrfs[0].connections(), 1);
    let pgw = lab.pgw("pgw1", None).await;
    // Client → DRA watchdog.
    let dwa = pgw
        .request(dwr("pgw1.test.example", REALM))
        .await
        .expect("DWA");
    assert_eq!(dwa.command_code, 280);
    assert!(!dwa.is_request());
    assert_eq!(dwa.result_code(), Some(result_code::SUCCESS));
    assert_eq!(dwa.origin_host(), Some(DRA_HOST));
    // Server → DRA watchdog on the connection the DRA opened.
    let srv = lab.pcrfs[0].last_conn().expect("conn");
    let dwa = srv
        .request(dwr("pcrf1.pcrf.test.example", PCRF_REALM))
        .await
        .expect("DWA");
    assert_eq!(dwa.result_code(), Some(result_code::SUCCESS));
    assert_eq!(dwa.origin_host(), Some(DRA_HOST));
    // And a request relays end to end.
    let a = pgw
        .request(pgw1_gx_ccr("s1", cc::INITIAL, 0))
        .await
        .expect("CCA");
    assert_eq!(a.result_code(), Some(result_code::SUCCESS));
    assert_eq!(a.origin_host(), Some("pcrf1.pcrf.test.example"));
    assert_eq!(a.session_id(), Some("s1"));
    lab.agent.shutdown().await;
}

/// Once `shutdown` returns the agent's listening socket is closed: its address can be
/// bound at once, as an agent started next in the same process does. (On this
/// current-thread runtime nothing else runs between the return and the bind.)
#[tokio::test]
async fn shutdown_returns_with_the_listener_closed() {
    let lab = Lab::start(1, 0, None, "", None).await;
    let addr = lab.addr();
    lab.agent.shutdown().await;
    if let Err(e) = std::net::TcpListener::bind(addr) {
        panic!("{addr} still taken after shutdown: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_origin_host_gets_cea_3010() {
    let lab = Lab::start(1, 0, None, "", None).await;
    let r = SimPeer::connect(
        lab.addr(),
        sim_config("stranger.test.example", REALM, &[GX]),
        DRA_HOST,
        None,
    )
    .await;
    assert_eq!(r.err(), Some(result_code::UNKNOWN_PEER));
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.requests_in, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marked_request_is_answered_3002_without_upstream() {
    let lab = Lab::start(1, 0, None, "", None).await;
    let pgw = lab.pgw("pgw1", None).await;
    let mut req = pgw1_gx_ccr("sess-marked", cc::UPDATE, 7);
    req.flags |= flags::RATE_LIMIT_MARK;
    let a = pgw.request(req).await.expect("answer");
    assert_eq!(a.result_code(), Some(result_code::UNABLE_TO_DELIVER));
    assert!(a.is_error(), "3xxx answers carry the E bit");
    assert_eq!(a.origin_host(), Some(DRA_HOST));
    assert_eq!(a.session_id(), Some("sess-marked"));
    assert_eq!(
        a.find(avp_code::AUTH_APPLICATION_ID)
            .and_then(|x| x.as_u32().ok()),
        Some(GX)
    );
    assert_eq!(a.cc_request_type(), Some(cc::UPDATE));
    assert_eq!(
        a.find(avp_code::CC_REQUEST_NUMBER)
            .and_then(|x| x.as_u32().ok()),
        Some(7)
    );
    assert_eq!(a.flags & flags::RESERVED, 0, "mark cleared in the answer");
    assert_eq!(
        lab.pcrfs[0]
            .stats
            .requests
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "nothing went upstream"
    );
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.marked_answered, 1);
    assert!(s.invariant_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_and_invalid_requests_are_answered_locally() {
    let lab = Lab::start(1, 0, None, "", None).await;
    let pgw = lab.pgw("pgw1", None).await;
    let a = pgw
        .request(ccr(
            "s-nr",
            GX,
            "pgw1.test.example",
            REALM,
            "nowhere.example",
            cc::INITIAL,
            0,
        ))
        .await
        .expect("answer");
    assert_eq!(a.result_code(), Some(result_code::REALM_NOT_SERVED));
    // Missing Destination-Realm: 5005 DIAMETER_MISSING_AVP (RFC 6733 §7.1.5).
    let mut bad = pgw1_gx_ccr("s-bad", cc::INITIAL, 0);
    bad.avps.retain(|x| x.code != avp_code::DESTINATION_REALM);
    let a = pgw.request(bad).await.expect("answer");
    assert_eq!(a.result_code(), Some(result_code::MISSING_AVP));
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.local_answers, 2);
    assert!(s.invariant_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_socket_serves_status() {
    let tmp = support::TempDir::new("dra-agent-status-");
    let dir = tmp.0.join("dra.sock");
    let lab = Lab::start(1, 1, Some(&dir), "", None).await;
    let pgw = lab.pgw("pgw1", None).await;
    pgw.request(pgw1_gx_ccr("s1", cc::INITIAL, 0))
        .await
        .expect("CCA");
    let text = dra::agent::query_status(&dir).await.expect("status");
    assert!(text.starts_with(&format!("dra {DRA_HOST}")), "{text}");
    let pcrf = text
        .lines()
        .find(|l| l.starts_with("pcrf1 "))
        .expect("pcrf1 line");
    assert!(pcrf.contains(" open "), "{text}");
    let pgw_line = text
        .lines()
        .find(|l| l.starts_with("pgw1 "))
        .expect("pgw1 line");
    assert!(pgw_line.contains(" open "), "{text}");
    assert!(text.contains("invariant ok"), "{text}");
}

/// The PCRF of [`agent_toml`]'s group `pcrf`, slow to answer the agent's CER by `delay`.
async fn slow_pcrf(delay: std::time::Duration) -> SimServer {
    let cfg = sim_config(&format!("pcrf1.{PCRF_REALM}"), PCRF_REALM, &[GX]);
    SimServer::start_slow(any_port(), cfg, DRA_HOST, delay)
        .await
        .expect("PCRF simulator")
}

/// A (re)started agent whose server is slow to open (its CEA comes 1 s after the
/// connection) holds the requests a gateway sends at once, and forwards them when the
/// connection opens: every CCR-I is answered 2001 by the PCRF, none 3002.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_before_the_first_server_connection_opens_are_held_then_forwarded() {
    let pcrf = slow_pcrf(std::time::Duration::from_secs(1)).await;
    let cfg = parse_config(&agent_toml(&[pcrf.addr], &[], None, ""));
    let agent = start_agent(cfg, tc_200ms(), dra::metrics::Metrics::new()).await;
    let pgw = connect_pgw(agent.listen_addrs()[0], "pgw1", None).await;
    // The precondition: the gateway is open and the PCRF is not, yet.
    let before = agent.status().await.expect("status");
    assert!(
        before.contains("ready: no") && before.contains("group pcrf (pcrf1 "),
        "the PCRF opened before the gateway could send (its CEA is 1 s late):\n{before}"
    );
    let sent = (0..20).map(|i| {
        let pgw = pgw.clone();
        tokio::spawn(async move {
            pgw.request(pgw1_gx_ccr(&format!("s{i}"), cc::INITIAL, 0))
                .await
        })
    });
    let mut codes = Vec::new();
    for s in sent.collect::<Vec<_>>() {
        let a = s.await.expect("task").expect("an answer");
        codes.push((a.result_code(), a.origin_host().map(str::to_owned)));
    }
    let pcrf_host = format!("pcrf1.{PCRF_REALM}");
    for (code, host) in &codes {
        assert_eq!(
            (*code, host.as_deref()),
            (Some(result_code::SUCCESS), Some(pcrf_host.as_str())),
            "every CCR-I answered 2001 by the PCRF: {codes:?}"
        );
    }
    let after = agent.status().await.expect("status");
    assert!(after.contains("ready: yes ("), "{after}");
    assert!(!after.contains("no open connection in"), "{after}");
    let s = agent.stats().await.expect("stats");
    assert_eq!((s.requests_in, s.local_answers), (20, 0));
    assert!(s.invariant_ok());
    agent.shutdown().await;
}

/// A server that refuses the agent's first dial (not listening yet) is dialled again
/// on a short schedule, not after Tc: with RFC 6733's 30 s Tc, a PCRF that starts 1 s
/// after the agent is open within a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_first_dial_is_retried_on_a_short_schedule() {
    let port = support::free_port();
    let addr = std::net::SocketAddr::new(ip(LOCALHOST), port);
    let cfg = parse_config(&agent_toml(&[addr], &[], None, ""));
    // Tc is RFC 6733's default, 30 s.
    let agent = start_agent(cfg, Default::default(), dra::metrics::Metrics::new()).await;
    // The scenario: the PCRF comes up 1 s after the agent's first dial was refused.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let cfg = sim_config(&format!("pcrf1.{PCRF_REALM}"), PCRF_REALM, &[GX]);
    let _pcrf = SimServer::start(addr, cfg, DRA_HOST, None)
        .await
        .expect("PCRF simulator");
    wait_servers_open(&agent, 1, std::time::Duration::from_secs(10)).await;
    let status = agent.status().await.expect("status");
    assert!(status.contains("ready: yes ("), "{status}");
    assert!(!status.contains("no open connection in"), "{status}");
    agent.shutdown().await;
}

/// When the startup wait ends without an open connection in a routed group, the agent
/// is ready all the same and says which group it could not reach; a request for that
/// group is then answered 3002 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_wait_ends_ready_naming_the_group_without_a_connection() {
    let addr = std::net::SocketAddr::new(ip(LOCALHOST), support::free_port());
    let text = agent_toml(&[addr], &[], None, "")
        .replace("[global]\n", "[global]\nstartup_wait = \"1s\"\n");
    let agent = start_agent(
        parse_config(&text),
        tc_200ms(),
        dra::metrics::Metrics::new(),
    )
    .await;
    tokio::time::timeout(std::time::Duration::from_secs(10), agent.ready())
        .await
        .expect("ready when the startup wait of 1 s ends");
    let status = agent.status().await.expect("status");
    assert!(
        status.contains("the startup wait ended") && status.contains("group pcrf (pcrf1 "),
        "{status}"
    );
    let pgw = connect_pgw(agent.listen_addrs()[0], "pgw1", None).await;
    let a = pgw
        .request(pgw1_gx_ccr("s-late", cc::INITIAL, 0))
        .await
        .expect("answer");
    assert_eq!(a.result_code(), Some(result_code::UNABLE_TO_DELIVER));
    agent.shutdown().await;
}
