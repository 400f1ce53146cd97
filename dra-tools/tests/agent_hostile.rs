//! Hostile peers against the agent over real TCP: Grouped AVPs
//! nested far beyond the depth limit, byte streams that cannot be framed (bad version,
//! bad length, over the size limit), connections that never send their CER, and
//! undecodable messages before Open. The agent runs in this process (its real core,
//! readers and writers); its log goes to a buffer the tests read.

mod support;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dra::diameter::{Message, answer_for, avp_code, encode, result_code};
use support::agent::*;
use support::{LogBuf, poll_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ------------------------------------------------------------------ the agent's log

/// Everything the agent logged (at INFO and above, with the connection's span), from
/// every test of this binary, so far (a subscriber for the whole test binary, set once).
fn log_text() -> String {
    static LOG: OnceLock<LogBuf> = OnceLock::new();
    let buf = LOG.get_or_init(|| {
        let buf = LogBuf::default();
        let w = buf.clone();
        tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .init();
        buf
    });
    buf.text()
}

// ------------------------------------------------------------------ the lab

/// The agent with one PCRF that never answers by itself (the test answers for it, when
/// it wants, from what the server's tap received).
struct HeldLab {
    agent: dra::agent::AgentHandle,
    metrics: dra::metrics::Metrics,
    pcrf: SimServer,
    pcrf_tap: Tap,
}

impl HeldLab {
    async fn start() -> HeldLab {
        log_text();
        let pcrf_tap = Tap::default();
        let pcrf = SimServer::sink(
            any_port(),
            sim_config(&format!("pcrf1.{PCRF_REALM}"), PCRF_REALM, &[GX]),
            DRA_HOST,
            Some(pcrf_tap.clone()),
        )
        .await
        .expect("pcrf");
        let cfg = parse_config(&agent_toml(&[pcrf.addr], &[], None, ""));
        let metrics = dra::metrics::Metrics::new();
        let agent = start_agent(cfg, tc_200ms(), metrics.clone()).await;
        let lab = HeldLab {
            agent,
            metrics,
            pcrf,
            pcrf_tap,
        };
        wait_peer_open(&lab.agent, "pcrf1", Duration::from_secs(10)).await;
        lab
    }

    fn addr(&self) -> SocketAddr {
        self.agent.listen_addrs()[0]
    }

    async fn pgw(&self, tap: Option<Tap>) -> SimPeer {
        connect_pgw(self.addr(), "pgw1", tap).await
    }

    /// The application requests the PCRF received so far.
    fn pcrf_requests(&self) -> Vec<Message> {
        received(&self.pcrf_tap)
            .into_iter()
            .filter(|m| m.is_request() && m.application_id != 0)
            .collect()
    }

    /// The PCRF answers the requests it received from the `from`th on: 2001 with its
    /// own Origin-Host; returns how many.
    async fn pcrf_answers(&self, from: usize) -> usize {
        let conn = self.pcrf.last_conn().expect("pcrf connection");
        let reqs = self.pcrf_requests().split_off(from);
        for r in &reqs {
            let host = format!("pcrf1.{PCRF_REALM}");
            let a = answer_for(r, result_code::SUCCESS, &host, PCRF_REALM, None, None);
            conn.send_raw(a).await;
        }
        reqs.len()
    }

    /// Waits until the PCRF holds `n` requests.
    async fn pcrf_holds(&self, n: usize) {
        let got = || self.pcrf_requests().len();
        support::wait_count(n, "requests at the PCRF", Duration::from_secs(10), got).await;
    }
}

/// The value of the exposition line that starts with `series` (0 if absent).
fn metric(exported: &str, series: &str) -> f64 {
    exported
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn gx_ccr(session: &str, n: u32) -> Message {
    pgw1_gx_ccr(session, cc::UPDATE, n)
}

/// A 20-byte CCR header (R and P flags, Gx) as written, whatever its fields say.
fn ccr_header(version: u8, length: u32, hop_by_hop: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(20);
    h.extend_from_slice(&((u32::from(version) << 24) | (length & 0xff_ffff)).to_be_bytes());
    h.extend_from_slice(&((0xc0u32 << 24) | 272).to_be_bytes());
    h.extend_from_slice(&GX.to_be_bytes());
    h.extend_from_slice(&hop_by_hop.to_be_bytes());
    h.extend_from_slice(&0x0bad_0bad_u32.to_be_bytes());
    h
}

/// Waits until the connection behind `pgw` is closed by the agent (a request sent on it
/// gets no answer because the driver saw the end of the stream).
async fn closed(pgw: &SimPeer) -> bool {
    let probe = gx_ccr("probe", 99);
    matches!(
        tokio::time::timeout(Duration::from_secs(10), pgw.request(probe)).await,
        Ok(None)
    )
}

// ------------------------------------------------------------------ item 2: framing

/// One unframable header after `in_flight` relayed requests the PCRF holds: the bad
/// message is answered `code` by the agent, each relayed request still gets the PCRF's
/// answer, and only then does the agent close the connection.
async fn unframable_is_answered_then_closed(bad: Vec<u8>, code: u32, in_flight: usize) {
    let lab = HeldLab::start().await;
    let tap = Tap::default();
    let pgw = lab.pgw(Some(tap.clone())).await;
    let mut waiting = Vec::new();
    for i in 0..in_flight {
        let p = pgw.clone();
        waiting.push(tokio::spawn(async move {
            p.request(gx_ccr(&format!("held-{i}"), i as u32)).await
        }));
    }
    lab.pcrf_holds(in_flight).await;
    let bad_hbh = u32::from_be_bytes([bad[12], bad[13], bad[14], bad[15]]);
    assert!(
        pgw.send_bytes(bad).await,
        "connection gone before the bad frame"
    );
    // The agent answers the unframable request at once ...
    let mut local = None;
    poll_until(Duration::from_secs(10), async || {
        local = received(&tap).into_iter().find(|m| m.hop_by_hop == bad_hbh);
        local.is_some()
    })
    .await;
    let local = local.expect("no answer to the unframable message");
    assert!(!local.is_request());
    assert_eq!(local.command_code, 272);
    assert_eq!(local.result_code(), Some(code), "{local:?}");
    // 5xxx are permanent failures, not protocol errors (3xxx): no E bit (RFC 6733 §3).
    assert!(!local.is_error(), "{local:?}");
    assert_eq!(local.origin_host(), Some(DRA_HOST));
    // ... and keeps the connection while the relayed requests are pending.
    if in_flight > 0 {
        // The scenario: the PCRF holds the relayed requests 200 ms past that answer.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            peer_state(&lab.agent.status().await.expect("status"), "pgw1"),
            Some("open"),
            "closed with {in_flight} relayed requests unanswered"
        );
        assert_eq!(lab.pcrf_answers(0).await, in_flight);
    }
    let mut answered = 0;
    for w in waiting {
        let a = w
            .await
            .expect("task")
            .expect("a relayed request lost at the close");
        assert_eq!(a.result_code(), Some(result_code::SUCCESS));
        assert_eq!(a.origin_host(), Some("pcrf1.pcrf.test.example"));
        answered += 1;
    }
    assert_eq!(answered, in_flight);
    // Then the connection closes.
    assert!(closed(&pgw).await, "the connection stayed open");
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.requests_in, in_flight as u64 + 1, "{s:?}");
    assert_eq!(s.local_answers, 1, "{s:?}");
    assert!(s.invariant_ok(), "{s:?}");
    // The agent keeps serving: a new connection relays.
    let again = lab.pgw(None).await;
    let r = tokio::spawn(async move { again.request(gx_ccr("after", 1)).await });
    lab.pcrf_holds(in_flight + 1).await;
    assert_eq!(lab.pcrf_answers(in_flight).await, 1);
    let a = r
        .await
        .expect("task")
        .expect("answer after the hostile peer");
    assert_eq!(a.result_code(), Some(result_code::SUCCESS));
    lab.agent.shutdown().await;
}

/// Each unframable header with nothing in flight, on a fresh agent: a bad version is
/// answered 5011, a length not a multiple of 4 or below 20 5015, a length over the size
/// limit 5012; then the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unframable_headers_are_answered_then_closed() {
    let over = dra::diameter::DEFAULT_MAX_MESSAGE_SIZE as u32 + 4;
    // (version, length, Hop-by-Hop, Result-Code)
    for (version, length, hop_by_hop, code) in [
        (2, 20, 0xbad1, result_code::UNSUPPORTED_VERSION),
        (1, 102, 0xbad2, result_code::INVALID_MESSAGE_LENGTH),
        (1, 16, 0xbad3, result_code::INVALID_MESSAGE_LENGTH),
        (1, over, 0xbad4, result_code::UNABLE_TO_COMPLY),
    ] {
        let header = ccr_header(version, length, hop_by_hop);
        unframable_is_answered_then_closed(header, code, 0).await;
    }
}

/// Requests relayed before the bad frame each get their (PCRF's) answer before the
/// close: 25 held at the PCRF, then a bad version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_relayed_before_a_bad_frame_are_answered_before_the_close() {
    unframable_is_answered_then_closed(
        ccr_header(7, 20, 0xbad5),
        result_code::UNSUPPORTED_VERSION,
        25,
    )
    .await;
}

// ------------------------------------------------------------------ item 1: nesting

/// A CCR whose Subscription-Id nests `levels` Subscription-Ids (each Grouped), built as
/// bytes (8-byte AVP headers, M bit, lengths from the inside out).
fn nested_ccr(levels: usize) -> Message {
    let leaf = b"001010123456789\0";
    let leaf_len = 8 + leaf.len();
    let mut data = Vec::with_capacity(levels * 8 + leaf_len);
    for i in 1..levels {
        let len = (levels - i) * 8 + leaf_len;
        data.extend_from_slice(&443u32.to_be_bytes());
        data.push(0x40);
        data.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    }
    data.extend_from_slice(&444u32.to_be_bytes());
    data.push(0x40);
    data.extend_from_slice(&(leaf_len as u32).to_be_bytes()[1..]);
    data.extend_from_slice(leaf);
    let mut m = gx_ccr("nested", 0);
    m.avps
        .push(dra::diameter::Avp::octets(443, data).mandatory());
    m
}

/// ~64 KiB of Grouped AVPs nested 8,000 deep over TCP: answered 5004 with a compact
/// Failed-AVP, nothing relayed, and the agent keeps serving the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_grouped_ccr_is_answered_5004_and_the_agent_keeps_serving() {
    let lab = HeldLab::start().await;
    let pgw = lab.pgw(None).await;
    let hostile = nested_ccr(8000);
    assert!(encode(&hostile).len() > 64_000);
    for _ in 0..5 {
        let a = tokio::time::timeout(Duration::from_secs(10), pgw.request(hostile.clone()))
            .await
            .expect("answered")
            .expect("connection kept");
        assert_eq!(a.result_code(), Some(result_code::INVALID_AVP_VALUE));
        assert_eq!(a.origin_host(), Some(DRA_HOST));
        let failed = a.find(avp_code::FAILED_AVP).expect("Failed-AVP");
        assert!(
            failed.data.len() < 512,
            "Failed-AVP of {} bytes",
            failed.data.len()
        );
    }
    assert!(
        lab.pcrf_requests().is_empty(),
        "a hostile request was relayed"
    );
    // Same connection, a normal request: relayed and answered.
    let p = pgw.clone();
    let r = tokio::spawn(async move { p.request(gx_ccr("normal", 1)).await });
    lab.pcrf_holds(1).await;
    lab.pcrf_answers(0).await;
    let a = r.await.expect("task").expect("answer");
    assert_eq!(a.result_code(), Some(result_code::SUCCESS));
    assert_eq!(a.origin_host(), Some("pcrf1.pcrf.test.example"));
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!((s.requests_in, s.local_answers), (6, 5), "{s:?}");
    lab.agent.shutdown().await;
}

// ------------------------------------------------------------------ item 3: before Open

/// Whether the agent closed `s` (end of stream or reset) within `wait`.
async fn closed_by_agent(s: &mut TcpStream, wait: Duration) -> bool {
    let mut b = [0u8; 64];
    match tokio::time::timeout(wait, s.read(&mut b)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => false,
        Err(_) => false,
    }
}

/// 500 connections from one address within about a second, none sending a CER: 32 wait
/// for their CER, the rest are refused at once and counted; a peer from another address
/// still opens; the refusals are logged at most once a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_awaiting_cer_are_capped_per_source_address() {
    const N: usize = 500;
    const PER_SOURCE: usize = 32;
    let lab = HeldLab::start().await;
    let t0 = Instant::now();
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        conns.push(
            dra_tools::loadgen::connect_from(Some(ip("127.0.0.1")), lab.addr())
                .await
                .expect("connect"),
        );
    }
    println!("{N} connections opened in {:?}", t0.elapsed());
    // Every refused connection is closed by the agent at accept, as it is counted; the
    // others wait (for the CER timeout, 10 s: the whole check takes well under that).
    let per_source = "dra_connections_refused_total{reason=\"cer_backlog_per_source\"}";
    let counted = poll_until(Duration::from_secs(5), async || {
        metric(&lab.metrics.encode(), per_source) >= (N - PER_SOURCE) as f64
    })
    .await;
    assert!(counted, "refusals not counted:\n{}", lab.metrics.encode());
    let mut refused = 0;
    let mut still = Vec::new();
    for mut c in conns {
        if closed_by_agent(&mut c, Duration::from_millis(5)).await {
            refused += 1;
        } else {
            still.push(c);
        }
    }
    assert_eq!(
        still.len(),
        PER_SOURCE,
        "waiting for a CER from one address\n{}\n{}",
        lab.metrics.encode(),
        log_text()
    );
    assert_eq!(refused, N - PER_SOURCE);
    // The metrics: the gauge is sampled once a second (until it shows the waiting).
    let awaiting_cer = "dra_connections_awaiting_cer ";
    poll_until(Duration::from_secs(5), async || {
        metric(&lab.metrics.encode(), awaiting_cer) == PER_SOURCE as f64
    })
    .await;
    let m = lab.metrics.encode();
    assert_eq!(metric(&m, per_source), (N - PER_SOURCE) as f64, "{m}");
    assert_eq!(
        metric(&m, "dra_connections_refused_total{reason=\"cer_backlog\"}"),
        0.0
    );
    let awaiting = metric(&m, awaiting_cer);
    assert_eq!(awaiting, PER_SOURCE as f64, "{m}");
    // A legitimate peer from another address reaches Open meanwhile.
    let pgw = SimPeer::connect_from(
        Some(ip("127.0.0.2")),
        lab.addr(),
        sim_config(&format!("pgw1.{REALM}"), REALM, &[GX, GY]),
        DRA_HOST,
        None,
    )
    .await
    .expect("a peer from another address opens");
    let p = pgw.clone();
    let r = tokio::spawn(async move { p.request(gx_ccr("legit", 1)).await });
    lab.pcrf_holds(1).await;
    lab.pcrf_answers(0).await;
    assert_eq!(
        r.await.expect("task").expect("answer").result_code(),
        Some(result_code::SUCCESS)
    );
    // Refusals are logged at most once a second (plus one count per second).
    let elapsed = t0.elapsed().as_secs() as usize + 1;
    let log = log_text();
    let first = log
        .lines()
        .filter(|l| l.contains("connection refused: too many connections waiting"))
        .count();
    assert!(
        (1..=2 * elapsed).contains(&first),
        "{first} refusal log lines for {} refusals",
        N - PER_SOURCE
    );
    drop(still);
    lab.agent.shutdown().await;
}

/// A framable message that does not decode: an AVP whose length (5) is below its header.
fn undecodable() -> Vec<u8> {
    let mut b = ccr_header(1, 32, 0x0dd);
    b.extend_from_slice(&263u32.to_be_bytes());
    b.extend_from_slice(&[0x40, 0, 0, 5]);
    b.extend_from_slice(&[0; 4]);
    b
}

/// Undecodable messages before Open are ignored and logged once per connection: three
/// connections, ten such messages each, three log lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_before_open_is_logged_once_per_connection() {
    const CONNS: usize = 3;
    const EACH: usize = 10;
    let lab = HeldLab::start().await;
    let mut ports = Vec::new();
    for _ in 0..CONNS {
        let mut s = TcpStream::connect(lab.addr()).await.expect("connect");
        ports.push(s.local_addr().expect("local").port());
        for _ in 0..EACH {
            s.write_all(&undecodable()).await.expect("write");
        }
        // The end of our stream comes after the messages: once the agent closed its
        // side, it has handled them all.
        s.shutdown().await.expect("shutdown");
        assert!(
            closed_by_agent(&mut s, Duration::from_secs(10)).await,
            "the agent did not close after our end of stream"
        );
    }
    let log = log_text();
    for port in ports {
        let remote = format!("remote=127.0.0.1:{port}");
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&remote) && l.contains("undecodable message ignored"))
            .collect();
        assert_eq!(lines.len(), 1, "connection from port {port}:\n{log}");
    }
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.requests_in, 0, "nothing before Open is a request");
    lab.agent.shutdown().await;
}
