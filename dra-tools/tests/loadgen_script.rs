//! The scripted simulator's arrival log and paced sender on loopback (127.0.0.1):
//! what a server logs per application request (class by the fast path's scanner, the
//! fast path's mark, Hop-by-Hop id, connection), coalesced writes, and a paced run's
//! log against what arrived.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use dra::diameter::Message;
use dra_common::wire::{MsgClass, app, cc_request_type as rt, flags};
use dra_tools::loadgen::script::{
    ArrivalLog, ScriptedPeer, ScriptedServer, Stream, cc, ccr, dwr, paced, scripted_config,
};

const LOCALHOST: &str = "127.0.0.1";
const CLIENT: &str = "pgw1.test.example";
const REALM: &str = "test.example";
const SERVER: &str = "pcrf1.pcrf.test.example";
const SERVER_REALM: &str = "pcrf.test.example";
const WAIT: Duration = Duration::from_secs(10);

fn ip() -> IpAddr {
    LOCALHOST.parse().expect("ip")
}

fn gx_ccr(req_type: u32, n: u32) -> Message {
    ccr(
        &format!("{CLIENT};1;{n}"),
        app::GX,
        CLIENT,
        REALM,
        SERVER_REALM,
        req_type,
        n,
    )
}

fn gy_ccr(req_type: u32, n: u32) -> Message {
    ccr(
        &format!("{CLIENT};2;{n}"),
        app::GY,
        CLIENT,
        REALM,
        SERVER_REALM,
        req_type,
        n,
    )
}

async fn server(answering: bool) -> ScriptedServer {
    let listen = SocketAddr::new(ip(), 0);
    let cfg = scripted_config(SERVER, SERVER_REALM, &[app::GX, app::GY], ip());
    let s = if answering {
        ScriptedServer::start(listen, cfg, CLIENT, None).await
    } else {
        ScriptedServer::sink(listen, cfg, CLIENT, None).await
    };
    s.expect("server listens")
}

async fn client(to: SocketAddr) -> ScriptedPeer {
    let cfg = scripted_config(CLIENT, REALM, &[app::GX, app::GY], ip());
    ScriptedPeer::connect_from(Some(ip()), to, cfg, SERVER, None)
        .await
        .expect("CER/CEA")
}

fn hop_by_hops(log: &ArrivalLog) -> Vec<u32> {
    log.snapshot().iter().map(|a| a.hop_by_hop).collect()
}

/// Answered requests, a request carrying the fast path's mark, and a DWR, on two
/// connections: the log holds the application requests only, each with its class,
/// mark, Hop-by-Hop id and connection; CER and DWR are not application requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrival_log_records_class_mark_hop_by_hop_and_connection() {
    let srv = server(true).await;
    let a = client(srv.addr).await;
    let b = client(srv.addr).await;
    assert_eq!(srv.connections(), 2);

    let ans = a.request(gx_ccr(cc::INITIAL, 0)).await.expect("CCA");
    let hbh_a = ans.hop_by_hop;
    let ans = b.request(gy_ccr(cc::UPDATE, 1)).await.expect("CCA");
    let hbh_b = ans.hop_by_hop;
    // A DWR is base protocol: answered, not logged.
    b.send_raw(dwr(CLIENT, REALM)).await;
    // A request the fast path marked (RATE_LIMIT_MARK in the flags byte).
    let mut marked = gx_ccr(cc::TERMINATION, 2);
    marked.hop_by_hop = 0xabcd_0001;
    let mut bytes = marked.encode();
    bytes[4] |= flags::RATE_LIMIT_MARK;
    assert!(b.send_bytes(bytes).await);
    assert_eq!(srv.arrivals.wait_for(3, WAIT).await, 3);

    let log = srv.arrivals.snapshot();
    let got: Vec<_> = log
        .iter()
        .map(|x| (x.class, x.marked, x.hop_by_hop, x.conn))
        .collect();
    assert_eq!(
        got,
        vec![
            (MsgClass::gx_ccr(rt::INITIAL), false, hbh_a, 0),
            (MsgClass::gy_ccr(rt::UPDATE), false, hbh_b, 1),
            (MsgClass::gx_ccr(rt::TERMINATION), true, 0xabcd_0001, 1),
        ]
    );
    assert!(
        log[0].at <= log[1].at && log[1].at <= log[2].at,
        "in arrival order"
    );
    assert_eq!(
        srv.arrivals.wait_for(4, Duration::from_millis(200)).await,
        3,
        "no DWR logged"
    );
}

/// Three CCRs in one write arrive as three requests, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_coalesced_ccrs_arrive_as_three_requests() {
    let srv = server(false).await;
    let p = client(srv.addr).await;
    let mut bytes = Vec::new();
    for (n, t) in [(7u32, cc::INITIAL), (8, cc::UPDATE), (9, cc::TERMINATION)] {
        let mut m = gx_ccr(t, n);
        m.hop_by_hop = n;
        bytes.extend_from_slice(&m.encode());
    }
    assert!(p.send_bytes(bytes).await, "one write");
    assert_eq!(srv.arrivals.wait_for(3, WAIT).await, 3);
    let log = srv.arrivals.snapshot();
    assert_eq!(hop_by_hops(&srv.arrivals), vec![7, 8, 9]);
    assert_eq!(
        log.iter().map(|a| a.class).collect::<Vec<_>>(),
        vec![
            MsgClass::gx_ccr(rt::INITIAL),
            MsgClass::gx_ccr(rt::UPDATE),
            MsgClass::gx_ccr(rt::TERMINATION)
        ]
    );
    assert!(log.iter().all(|a| !a.marked && a.conn == 0));
}

/// A paced run of two streams, four messages per write: its log has one entry per
/// message sent, Hop-by-Hop ids 1..=n in sending order, and exactly those arrive,
/// in that order, each built by its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_log_has_one_entry_per_message_that_arrived() {
    let srv = server(false).await;
    let p = client(srv.addr).await;
    let streams = vec![
        Stream {
            every: Duration::from_millis(10),
            make: Box::new(|n| gx_ccr(cc::INITIAL, n)),
        },
        Stream {
            every: Duration::from_millis(25),
            make: Box::new(|n| gx_ccr(cc::UPDATE, n)),
        },
    ];
    let sent = paced(&p, streams, Duration::from_millis(300), 4)
        .await
        .expect("paced");
    let n = sent.log.len();
    assert!(n >= 2, "both streams are due at the start");
    assert_eq!(
        sent.log.iter().map(|l| l.1).collect::<Vec<_>>(),
        (1..=n as u32).collect::<Vec<_>>()
    );
    assert_eq!(sent.first, sent.log[0].0);
    assert_eq!(sent.last, sent.log[n - 1].0);
    assert!(sent.log.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(srv.arrivals.wait_for(n, WAIT).await, n);
    assert_eq!(
        hop_by_hops(&srv.arrivals),
        (1..=n as u32).collect::<Vec<_>>()
    );
    // Each stream builds its own class; both are due at the start, in stream order.
    let log = srv.arrivals.snapshot();
    assert_eq!(log[0].class, MsgClass::gx_ccr(rt::INITIAL));
    assert_eq!(log[1].class, MsgClass::gx_ccr(rt::UPDATE));
    let i = log
        .iter()
        .filter(|a| a.class == MsgClass::gx_ccr(rt::INITIAL))
        .count();
    let u = log
        .iter()
        .filter(|a| a.class == MsgClass::gx_ccr(rt::UPDATE))
        .count();
    assert_eq!(i + u, n);
    assert!(
        i > u,
        "the 10 ms stream sends more than the 25 ms one ({i} vs {u})"
    );
    assert!(log.iter().all(|a| !a.marked && a.conn == 0));
}
