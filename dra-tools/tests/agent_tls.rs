//! TLS peers through `dra run` (RFC 6733 §13.1): real TLS over real TCP between two
//! network namespaces joined by a veth pair (198.18.0.0/30), certificates from CAs made
//! at run time (`dra_tools::pki`), the simulators of `dra-loadgen`.
//!
//! ```text
//!   ns "sim" 198.18.0.2                       ns "dra" 198.18.0.1
//!   pgw1 (TLS gateway) ─────────────────────▶ dra run :5868 (TLS), :3868 (plain)
//!   srv1 (TLS server :5869)  ◀──────────────  (dials srv1 over TLS)
//! ```
//!
//! `dra run` is the binary of this workspace (`$DRA_BIN`, else target/debug/dra); the
//! limit test attaches XDP to the agent's veth end, so that binary needs its eBPF
//! programs (a plain `cargo build`). Needs root (namespaces, XDP). Namespaces,
//! processes and files are removed on drop, also when a test fails.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dra::diameter::result_code;
use dra_tools::loadgen::closed::{self, ClosedConfig};
use dra_tools::loadgen::script::{ScriptedPeer, scripted_config};
use dra_tools::loadgen::server::{self, LatencyDist, ServerConfig, ServerHandle};
use dra_tools::loadgen::{client, dial};
use dra_tools::pki::{TestCa, TlsFiles, Validity};
use support::agent::{GX, GY, peer_state, pgw1_gx_ccr};
use support::poll_until;
use support::tls_lab::{
    DRA_HOST, DRA_IP, Lab, METRICS, SIM_IP, connector, creds, metric, scrape, with_lab,
};

const TLS_PORT: u16 = dra::transport::tls::DIAMETERS_PORT;
const PLAIN_PORT: u16 = 3868;
const SRV_PORT: u16 = 5869;
const SRV9_PORT: u16 = 5870;
/// srv9 itself, behind the relay on [`SRV9_PORT`].
const SRV9_BEHIND_PORT: u16 = 5871;
const PGW1: &str = "pgw1.test.example";
const SRV1: &str = "srv1.pcrf.test.example";

/// The agent's config: a TLS listener (:5868) and a plain one (:3868), the TLS gateway
/// pgw1 (from the sim address), the TLS server srv1 it dials, `extra` appended.
fn config(lab: &Lab, agent: &TlsFiles, extra: &str) -> String {
    format!(
        r#"[global]
origin_host = "{DRA_HOST}"
origin_realm = "test.example"
diameter_ports = [{PLAIN_PORT}, {TLS_PORT}]
unknown_peer = "drop"

[metrics]
address = "{METRICS}"

[control]
socket = "{control}"

[[listener]]
address = "{DRA_IP}:{TLS_PORT}"
tls = {tls}

[[listener]]
address = "{DRA_IP}:{PLAIN_PORT}"

[[peer]]
name = "pgw1"
origin_host = "{PGW1}"
realm = "test.example"
role = "client"
addresses = ["{SIM_IP}"]
tls = {{}}

[[peer]]
name = "srv1"
origin_host = "{SRV1}"
realm = "pcrf.test.example"
role = "server"
group = "pcrf"
connect = "{SIM_IP}:{SRV_PORT}"
tls = {tls}

[[peer_group]]
name = "pcrf"

[[route]]
realm = "pcrf.test.example"
group = "pcrf"
{extra}"#,
        control = lab.control().display(),
        tls = agent.toml(),
    )
}

/// srv1: a TLS server answering every CCR 2001 at once.
async fn srv1(ca: &TestCa) -> ServerHandle {
    let files = ca.issue("srv1", &[SRV1]).expect("srv1 certificate");
    let mut cfg = ServerConfig::new(
        format!("{SIM_IP}:{SRV_PORT}").parse().unwrap(),
        SRV1,
        "pcrf.test.example",
    );
    cfg.latency = LatencyDist::Fixed(Duration::ZERO);
    cfg.strict_sessions = false;
    cfg.tls = Some(creds(&files).acceptor());
    server::run(cfg).await.expect("srv1")
}

/// A TCP relay on `listen` to `to` (in the simulators' runtime): the connections it
/// accepted so far.
async fn counting_relay(listen: SocketAddr, to: SocketAddr) -> Arc<AtomicU64> {
    let l = tokio::net::TcpListener::bind(listen).await.expect("relay");
    let accepted = Arc::new(AtomicU64::new(0));
    let n = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut a, _)) = l.accept().await {
            n.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                if let Ok(mut b) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                }
            });
        }
    });
    accepted
}

fn tls_addr() -> SocketAddr {
    format!("{DRA_IP}:{TLS_PORT}").parse().unwrap()
}

/// pgw1's identity for a scripted connection.
fn pgw1_config() -> dra::diameter::peer::PeerConfig {
    scripted_config(PGW1, "test.example", &[GX, GY], SIM_IP.parse().unwrap())
}

/// Waits until the agent is ready: srv1, its routed server, open over TLS (its CER
/// accepted by srv1).
async fn wait_srv1(lab: &Lab, srv: &ServerHandle) {
    let status = lab.wait_ready(Duration::from_secs(20)).await;
    assert!(
        srv.stats().cer_accepted > 0 && peer_state(&status, "srv1") == Some("open"),
        "the agent did not open srv1 over TLS:\n{status}\n{}",
        lab.log()
    );
}

/// A TLS connection with `files` that must be refused: no CEA ever comes back (the
/// agent closes before reading a CER).
async fn refused_before_cer(files: &TlsFiles) {
    let c = connector(files);
    // TLS 1.3 completes the client's side of the handshake before the server has
    // checked the client's certificate: the refusal then arrives as an alert.
    let Ok(conn) = dial(None, tls_addr(), None, Some(&c), None).await else {
        return;
    };
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        ScriptedPeer::open(conn, pgw1_config(), DRA_HOST, None),
    )
    .await
    .expect("the agent neither refused nor answered");
    assert_eq!(r.err(), Some(0), "a CEA came back: the CER was read");
}

#[test]
fn mutual_tls_peers_up_and_bad_certificates_refused_before_cer() {
    with_lab("m", |lab| {
        let agent = lab.ca.issue("dra", &[DRA_HOST]).expect("dra certificate");
        let good = lab.ca.issue("pgw1", &[PGW1]).expect("pgw1 certificate");
        let other_ca = TestCa::in_dir("other", &lab.dir.0).expect("other CA");
        // Signed by another CA (the client itself trusts the agent's CA: only the
        // agent has a reason to refuse).
        let wrong_ca = other_ca
            .issue("pgw1-other-ca", &[PGW1])
            .expect("cert")
            .trusting(&lab.ca.ca_path());
        let expired = lab
            .ca
            .issue_with("pgw1-expired", &[PGW1], Validity::Expired)
            .expect("cert");
        let other_host = lab.ca.issue("pgw9", &["pgw9.test.example"]).expect("cert");
        // srv9, a server the agent dials, presents a certificate for another host.
        let srv9_extra = format!(
            "\n[[peer]]\nname = \"srv9\"\norigin_host = \"srv9.pcrf.test.example\"\n\
             realm = \"pcrf.test.example\"\nrole = \"server\"\ngroup = \"spare\"\n\
             connect = \"{SIM_IP}:{SRV9_PORT}\"\ntls = {}\n\n[[peer_group]]\nname = \"spare\"\n",
            agent.toml()
        );
        let text = config(lab, &agent, &srv9_extra);
        let srv = lab.in_sim(srv1(&lab.ca));
        // srv9 behind a relay that counts the agent's dials.
        let (_srv9, srv9_dials) = lab.in_sim(async {
            let files = lab
                .ca
                .issue("srv9", &["srv8.pcrf.test.example"])
                .expect("cert");
            let addr: SocketAddr = format!("{SIM_IP}:{SRV9_BEHIND_PORT}").parse().unwrap();
            let mut cfg = ServerConfig::new(addr, "srv9.pcrf.test.example", "pcrf.test.example");
            cfg.tls = Some(creds(&files).acceptor());
            let srv9 = server::run(cfg).await.expect("srv9");
            let relay = format!("{SIM_IP}:{SRV9_PORT}").parse().unwrap();
            (srv9, counting_relay(relay, addr).await)
        });
        lab.start_dra(&text, &[]);
        lab.in_sim(async {
            wait_srv1(lab, &srv).await;
            // Mutual TLS both ways: pgw1 → agent → srv1, every CCR answered by srv1.
            let conn = dial(None, tls_addr(), None, Some(&connector(&good)), None)
                .await
                .expect("TLS to the agent");
            let info = conn.tls.clone().expect("TLS");
            assert!(
                dra::transport::tls::names(info.peer_certificate.as_ref().unwrap(), [DRA_HOST])
                    == [0],
                "the agent presented its own certificate"
            );
            let pgw1 = ScriptedPeer::open(conn, pgw1_config(), DRA_HOST, None)
                .await
                .expect("CEA 2001 over TLS");
            for i in 0..20 {
                let a = pgw1
                    .request(pgw1_gx_ccr(&format!("pgw1;tls;{i}"), 1, 0))
                    .await
                    .expect("answer");
                assert_eq!(a.result_code(), Some(result_code::SUCCESS), "CCR {i}");
            }
            assert_eq!(srv.stats().answered.get(&result_code::SUCCESS), Some(&20));
            let status = dra::agent::query_status(&lab.control())
                .await
                .expect("status");
            for p in ["pgw1", "srv1"] {
                let row = status
                    .lines()
                    .find(|l| l.split_whitespace().next() == Some(p))
                    .unwrap_or_else(|| panic!("{p} in status:\n{status}"));
                let w: Vec<&str> = row.split_whitespace().collect();
                assert_eq!((w[2], w[3]), ("open", "tls"), "{row}");
            }

            // pgw1 over plain TCP: it is a TLS peer, so its CER is refused (5017).
            let plain = ScriptedPeer::connect(
                format!("{DRA_IP}:{PLAIN_PORT}").parse().unwrap(),
                pgw1_config(),
                DRA_HOST,
                None,
            )
            .await;
            assert_eq!(plain.err(), Some(result_code::NO_COMMON_SECURITY));

            // Each bad certificate (the refusal log is once a second for each side and
            // reason: one line each).
            for (files, reason) in [
                (&wrong_ca, "unknown_ca"),
                (&expired, "expired"),
                (&other_host, "not_for_peer"),
            ] {
                refused_before_cer(files).await;
                let series =
                    format!("dra_tls_refused_total{{side=\"accepted\",reason=\"{reason}\"}}");
                let mut page = String::new();
                let counted = poll_until(Duration::from_secs(5), async || {
                    page = scrape();
                    metric(&page, &series) == 1.0
                })
                .await;
                let tls: Vec<&str> = page.lines().filter(|l| l.starts_with("dra_tls")).collect();
                assert!(counted, "{series} not counted: {tls:?}\n{}", lab.log());
            }
            // The good gateway is still served on its first connection.
            let a = pgw1.request(pgw1_gx_ccr("pgw1;tls;after", 1, 0)).await;
            assert_eq!(a.and_then(|a| a.result_code()), Some(result_code::SUCCESS));
            let page = scrape();
            assert_eq!(
                metric(
                    &page,
                    "dra_tls_refused_total{side=\"accepted\",reason=\"plain_tcp\"}"
                ),
                1.0
            );
            assert_eq!(metric(&page, "dra_connections_awaiting_cer"), 0.0, "{page}");
            // The agent refused srv9's certificate (it names srv8) at each of its dials
            // (redialled on a short schedule while never open): once per connection
            // srv9 accepted, read when no dial is under way (the same count before
            // and after the agent's).
            let dialled = "dra_tls_refused_total{side=\"dialled\",reason=\"not_for_peer\"}";
            let (mut dials, mut refused) = (0, 0.0);
            let each = poll_until(Duration::from_secs(10), async || {
                let before = srv9_dials.load(Ordering::Relaxed);
                refused = metric(&scrape(), dialled);
                dials = srv9_dials.load(Ordering::Relaxed);
                before == dials && refused == dials as f64
            })
            .await;
            assert!(
                each && dials >= 1,
                "the agent dialled srv9 {dials} times and refused it {refused} times"
            );
            assert_eq!(
                metric(&page, "dra_peer_state{peer=\"srv9\",state=\"open\"}"),
                0.0
            );
        });
        let log = lab.log();
        for reason in ["unknown_ca", "expired", "not_for_peer", "plain_tcp"] {
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("TLS connection refused") && l.contains(reason))
                .filter(|l| l.contains("side=\"accepted\""))
                .collect();
            assert_eq!(lines.len(), 1, "one log line for {reason}:\n{log}");
        }
        assert!(
            log.lines().any(|l| l.contains("TLS connection refused")
                && l.contains("side=\"dialled\"")
                && l.contains("peer=\"srv9\"")),
            "{log}"
        );
        // None of the refused connections got as far as a CER being read.
        assert_eq!(
            log.matches("capabilities exchanged: open").count(),
            2,
            "{log}"
        );
    });
}

#[test]
fn a_reload_swaps_the_certificate_for_new_connections_and_keeps_the_old_ones() {
    with_lab("r", |lab| {
        let agent = lab.ca.issue("dra", &[DRA_HOST]).expect("dra certificate");
        let pgw1 = lab.ca.issue("pgw1", &[PGW1]).expect("pgw1 certificate");
        let text = config(lab, &agent, "");
        let srv = lab.in_sim(srv1(&lab.ca));
        lab.start_dra(&text, &[]);
        lab.in_sim(async {
            wait_srv1(lab, &srv).await;
            let open = |files: TlsFiles| async move {
                let conn = dial(None, tls_addr(), None, Some(&connector(&files)), None)
                    .await
                    .expect("TLS to the agent");
                let cert = conn.tls.as_ref().unwrap().peer_certificate.clone().unwrap();
                let peer = ScriptedPeer::open(conn, pgw1_config(), DRA_HOST, None).await;
                (cert, peer)
            };
            let (first_cert, first) = open(pgw1.clone()).await;
            let first = first.expect("CEA over TLS");
            // New certificate and key for the agent, written over the old files.
            let renewed = lab
                .ca
                .issue("dra", &[DRA_HOST])
                .expect("renewed certificate");
            assert_eq!(renewed, agent, "the same paths");
            let (ok, text) = dra::agent::control_request(&lab.control(), "reload")
                .await
                .expect("reload");
            assert!(ok, "reload refused: {text}");
            // The first connection stays (one connection per peer: it is closed before
            // the next one opens, after its CCR is answered).
            let a = first.request(pgw1_gx_ccr("pgw1;reload;1", 1, 0)).await;
            assert_eq!(a.and_then(|a| a.result_code()), Some(result_code::SUCCESS));
            first.disconnect().await;
            let mut status = String::new();
            let closed = poll_until(Duration::from_secs(10), async || {
                status = lab.status().await;
                peer_state(&status, "pgw1") != Some("open")
            })
            .await;
            assert!(closed, "pgw1's first connection still open:\n{status}");
            let (second_cert, second) = open(pgw1.clone()).await;
            assert_ne!(
                second_cert, first_cert,
                "a new connection got the renewed certificate"
            );
            let renewed_der =
                dra::transport::tls::chain_from_pem(&std::fs::read(&renewed.cert).expect("read"))
                    .expect("pem")
                    .remove(0);
            assert_eq!(second_cert, renewed_der);
            let second = second.expect("CEA over TLS after the reload");
            let a = second.request(pgw1_gx_ccr("pgw1;reload;2", 1, 0)).await;
            assert_eq!(a.and_then(|a| a.result_code()), Some(result_code::SUCCESS));
        });
        assert!(lab.log().contains("listeners tls~ 1"), "{}", lab.log());
    });
}

/// pgw1's Gx CCR-I limit (L/s, `reject`): over TLS, with XDP attached to the agent's
/// interface, the agent's limiter enforces it (XDP cannot read TLS).
const LIMIT: f64 = 200.0;

fn limited_config(lab: &Lab, agent: &TlsFiles) -> String {
    config(
        lab,
        agent,
        &format!(
            "\n[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
             rate = {LIMIT}\n"
        ),
    )
}

/// Counts at one edge of a measured window: when they were read, the CCR-I srv1
/// received (every one the agent admitted: it relays them at once to its only server),
/// and the requests pgw1 sent the agent (`dra status`, counted as they arrive).
struct Edge {
    at: Instant,
    admitted: u64,
    offered: u64,
}

async fn edge(lab: &Lab, srv: &ServerHandle) -> Edge {
    let status = lab.status().await;
    let offered = req_in(&status, "pgw1").unwrap_or_else(|| panic!("pgw1 in\n{status}"));
    Edge {
        admitted: srv.stats().ccr_received.get(&1).copied().unwrap_or(0),
        at: Instant::now(),
        offered,
    }
}

/// The `req_in` column of `peer`'s row in `dra status`.
fn req_in(status: &str, peer: &str) -> Option<u64> {
    let header: Vec<&str> = status
        .lines()
        .find(|l| l.starts_with("peer "))?
        .split_whitespace()
        .collect();
    let col = header.iter().position(|h| *h == "req_in")?;
    let row = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(peer))?;
    row.split_whitespace().nth(col)?.parse().ok()
}

/// pgw1's admitted CCR-I and offered requests per second over a window the test times:
/// from 1.5 s after the call (the traffic started with it; the bucket's burst is spent
/// by then) for `secs`.
async fn window_rates(lab: &Lab, srv: &ServerHandle, secs: u64) -> (f64, f64) {
    // The scenario's timeline: the window starts 1.5 s into the traffic ...
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let a = edge(lab, srv).await;
    // ... and lasts `secs` (the rates are taken over the time that elapsed).
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let b = edge(lab, srv).await;
    let elapsed = b.at.duration_since(a.at).as_secs_f64();
    (
        (b.admitted - a.admitted) as f64 / elapsed,
        (b.offered - a.offered) as f64 / elapsed,
    )
}

#[test]
fn a_tls_gateways_ccr_i_limit_is_exact_at_10x_offered_paced_and_100_in_flight() {
    with_lab("l", |lab| {
        let agent = lab.ca.issue("dra", &[DRA_HOST]).expect("dra certificate");
        let pgw1 = lab.ca.issue("pgw1", &[PGW1]).expect("pgw1 certificate");
        let text = limited_config(lab, &agent);
        let srv = lab.in_sim(srv1(&lab.ca));
        let iface = lab.dra_if.clone();
        lab.start_dra(
            &text,
            &[
                "--iface",
                &iface,
                "--pin-dir",
                "/sys/fs/bpf/dra-tls-test",
                "--detach-on-exit",
            ],
        );
        lab.in_sim(async {
            wait_srv1(lab, &srv).await;
            // Ready: XDP was attached before.
            assert!(lab.log().contains("fast path attached"), "{}", lab.log());
            assert!(
                lab.log()
                    .contains("TLS peers: the agent enforces their ingress limits in userspace"),
                "{}",
                lab.log()
            );
            let status = dra::agent::query_status(&lab.control())
                .await
                .expect("status");
            assert!(
                status.contains("limit ingress pgw1 Gx CCR-I: agent limiter (TLS"),
                "{status}"
            );

            // Paced: CCR-I at 10 × L for 8 s.
            let scenario = dra_tools::loadgen::scenario::Scenario::from_toml(&format!(
                "destination_realm = \"pcrf.test.example\"\n\
             phase = [{{ name = \"storm\", duration_s = 8, rates = {{ gx_ccr_i = {} }} }}]\n",
                LIMIT * 10.0
            ))
            .expect("scenario");
            let mut cfg = client::ClientConfig::new(tls_addr(), 1);
            cfg.origin_host_pattern = PGW1.to_owned();
            cfg.origin_realm = "test.example".to_owned();
            cfg.tls = Some(connector(&pgw1));
            let run = tokio::spawn(client::run(cfg, scenario));
            let (paced, offered) = window_rates(lab, &srv, 5).await;
            let report = run.await.expect("join").expect("client");
            let ccr_i = &report.classes["gx_ccr_i"];
            let (ok, rejected) = (
                ccr_i.answered_with(result_code::SUCCESS),
                ccr_i.answered_with(result_code::UNABLE_TO_DELIVER),
            );
            let mut rejected_total = rejected;
            eprintln!(
                "paced: sent {} offered {offered:.1}/s admitted {paced:.1}/s in the window \
                 (2001 {ok}, 3002 {rejected})",
                ccr_i.sent
            );
            // Offered 10x the limit (within 10 %), measured in the window.
            assert!(
                offered >= LIMIT * 10.0 * 0.9,
                "paced: offered {offered:.1}/s in the window, not 10x the limit of {LIMIT}/s"
            );
            assert_eq!(
                ok + rejected,
                ccr_i.sent,
                "every CCR-I answered 2001 or 3002"
            );
            assert!(
                (paced - LIMIT).abs() <= 0.02 * LIMIT,
                "paced: {paced}/s admitted"
            );

            // 100 in flight on one connection, back to back (CCR-I and CCR-T in turn).
            let mut cfg = ClosedConfig::new(tls_addr(), 1, 100);
            cfg.origin_host_pattern = PGW1.to_owned();
            cfg.origin_realm = "test.example".to_owned();
            cfg.destination_realm = "pcrf.test.example".to_owned();
            cfg.warmup = Duration::from_secs(1);
            cfg.measure = Duration::from_secs(8);
            cfg.tls = Some(connector(&pgw1));
            let run = tokio::spawn(closed::run(cfg));
            let (deep, offered) = window_rates(lab, &srv, 5).await;
            let r = run.await.expect("join").expect("closed loop");
            let (ok, rejected) = (
                r.answered_with(result_code::SUCCESS),
                r.answered_with(result_code::UNABLE_TO_DELIVER),
            );
            rejected_total += r
                .total_answered
                .get(&result_code::UNABLE_TO_DELIVER)
                .copied()
                .unwrap_or(0);
            eprintln!(
                "100 in flight: {:.0} req/s answered, offered {offered:.1}/s and admitted \
                 CCR-I {deep:.1}/s in the window (2001 {ok}, 3002 {rejected})",
                r.requests_per_s()
            );
            // CCR-T is not limited: the offered CCR-I rate is half of what was answered.
            assert!(
                r.requests_per_s() / 2.0 >= 10.0 * LIMIT,
                "100 in flight: offered {:.1} CCR-I/s, not 10x the limit of {LIMIT}/s",
                r.requests_per_s() / 2.0
            );
            assert_eq!(ok + rejected, r.answered_total(), "only 2001 and 3002");
            assert!(
                (deep - LIMIT).abs() <= 0.02 * LIMIT,
                "100 in flight: {deep}/s admitted"
            );
            // Every request marked over the limit was answered 3002 (the limiter's
            // counters reach the metrics once a second: until they show the 3002s the
            // gateways got).
            let marked_series =
                "dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"marked\"}";
            let answered_series = "dra_answers_total{peer=\"pgw1\",result_code=\"3002\"}";
            let mut page = String::new();
            poll_until(Duration::from_secs(10), async || {
                page = scrape();
                metric(&page, marked_series) >= rejected_total as f64
            })
            .await;
            let marked = metric(&page, marked_series);
            let answered_3002 = metric(&page, answered_series);
            // XDP saw the TLS records and marked or dropped none of them.
            for reason in ["marked", "marked_out_of_band", "dropped"] {
                let series = format!("dra_fastpath_packets_total{{reason=\"{reason}\"}}");
                assert_eq!(metric(&page, &series), 0.0, "{series}");
            }
            assert!(
                metric(&page, "dra_fastpath_packets_total{reason=\"packets\"}") > 0.0,
                "XDP saw the traffic"
            );
            assert!(
                marked > 0.0 && marked == answered_3002,
                "marked {marked}, 3002 {answered_3002}"
            );
        });
    });
}
