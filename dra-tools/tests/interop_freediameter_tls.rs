//! Interop over TLS with freeDiameter 1.2.1 (GnuTLS; `TLS_Cred`, `TLS_CA`), through
//! `dra run`: CER/CEA, DWR/DWA and Gx CCRs both ways, with freeDiameter as the gateway
//! side and as the server side of the agent, every freeDiameter ↔ agent connection TLS
//! from the first byte with mutual authentication; and freeDiameter peers whose
//! certificate the agent must refuse, each refused before CER and counted.
//!
//! ```text
//!   ns "sim" 198.18.0.2                                  ns "dra" 198.18.0.1
//!   gwa (loadgen) → fdr1 (freeDiameter) ══TLS══▶ dra run :5868 → srv1 (loadgen, :3881)
//!   pgw1 (loadgen) ═══════════════════TLS══▶ dra run ══TLS══▶ fdr2 (freeDiameter,
//!                                                    SecPort 5872) → srv2 (loadgen, :3882)
//!   fdbad (certificate of another CA), fdx (a host the agent does not know)
//!                                     ══TLS══▶ refused
//! ```
//!
//! Needs root (namespaces) and freeDiameter (`cargo xtask setup`). docs/interop.md.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use dra::diameter::result_code;
use dra_tools::loadgen::dial;
use dra_tools::loadgen::script::{ScriptedPeer, ScriptedServer, cc, ccr, scripted_config};
use dra_tools::pki::{TestCa, TlsFiles, Validity};
use support::agent::GX;
use support::freediameter::FreeDiameter;
use support::poll_until;
use support::tls_lab::{
    DRA_HOST, DRA_IP, Lab, METRICS, SIM_IP, connector, metric, scrape, until, with_lab,
};

const TLS_PORT: u16 = dra::transport::tls::DIAMETERS_PORT;
const FDR1_HOST: &str = "fdr1.test.example";
const FDR2_HOST: &str = "fdr2.relay.test.example";
const FDR1_PORT: u16 = 3871;
const FDR2_TLS_PORT: u16 = 5872;
const FDSRV_TLS_PORT: u16 = 5874;
const SRV1_PORT: u16 = 3881;
const SRV2_PORT: u16 = 3882;
/// Gx sessions per direction (CCR-I, CCR-U, CCR-T each).
const SESSIONS: usize = 20;

/// A freeDiameterd with `conf` in the simulators' namespace (output next to it).
fn start_fd(lab: &Lab, conf: &Path) -> FreeDiameter {
    FreeDiameter::start(&lab.sim_ns, conf, conf.with_extension("log"))
}

/// One freeDiameter: identity, realm, plain port, TLS port (0: none), Tw, its
/// certificate files, and `extra` lines (extensions, peers).
struct Fd<'a> {
    host: &'a str,
    realm: &'a str,
    port: u16,
    sec_port: u16,
    tw: u32,
    tls: &'a TlsFiles,
    extra: String,
}

fn fd_conf(dir: &Path, f: &Fd<'_>) -> PathBuf {
    let text = format!(
        "Identity = \"{}\";\nRealm = \"{}\";\nPort = {};\nSecPort = {};\nNo_SCTP;\nNo_IPv6;\n\
         ListenOn = \"{SIM_IP}\";\nTwTimer = {};\nTcTimer = 1;\n\
         TLS_Cred = \"{}\", \"{}\";\nTLS_CA = \"{}\";\n\
         LoadExtension = \"dict_nasreq.fdx\";\nLoadExtension = \"dict_dcca.fdx\";\n\
         LoadExtension = \"dict_dcca_3gpp.fdx\";\n\
         LoadExtension = \"dbg_msg_dumps.fdx\" : \"0x0080\";\n{}",
        f.host,
        f.realm,
        f.port,
        f.sec_port,
        f.tw,
        f.tls.cert.display(),
        f.tls.key.display(),
        f.tls.ca.display(),
        f.extra
    );
    let p = dir.join(format!("{}.conf", f.host));
    std::fs::write(&p, text).expect("conf");
    p
}

/// `acl_wl` admitting `lines` (each `[FLAG] host`; no flag: over TLS only) and
/// `rt_default` sending realm `realm` to `next_hop`.
fn fd_extensions(dir: &Path, host: &str, acl: &str, realm: &str, next_hop: &str) -> String {
    let a = dir.join(format!("{host}.acl"));
    std::fs::write(&a, acl).expect("acl");
    let r = dir.join(format!("{host}.rt"));
    std::fs::write(&r, format!("dr=\"{realm}\" : \"{next_hop}\" += 100 ;\n")).expect("rt");
    format!(
        "LoadExtension = \"acl_wl.fdx\" : \"{}\";\nLoadExtension = \"rt_default.fdx\" : \"{}\";\n",
        a.display(),
        r.display()
    )
}

/// freeDiameter dialling the agent over TLS (no `No_TLS`: TLS from the first byte).
fn dial_agent() -> String {
    format!("ConnectPeer = \"{DRA_HOST}\" {{ ConnectTo = \"{DRA_IP}\"; Port = {TLS_PORT}; }};\n")
}

/// The agent's config; `expired`: its own, expired, certificate towards fdsrv.
fn agent_config(lab: &Lab, agent: &TlsFiles, expired: &TlsFiles) -> String {
    let tls = agent.toml();
    let client = |name: &str| {
        format!(
            "[[peer]]\nname = \"{name}\"\norigin_host = \"{name}.test.example\"\n\
             realm = \"test.example\"\nrole = \"client\"\ntls = {{}}\n\n"
        )
    };
    format!(
        r#"[global]
origin_host = "{DRA_HOST}"
origin_realm = "test.example"
diameter_ports = [{TLS_PORT}]
watchdog = "6s"

[metrics]
address = "{METRICS}"

[control]
socket = "{control}"

[[listener]]
address = "{DRA_IP}:{TLS_PORT}"
tls = {tls}

{fdr1}{pgw1}{fdbad}[[peer]]
name = "srv1"
origin_host = "srv1.pcrf.test.example"
realm = "pcrf.test.example"
role = "server"
group = "pcrf"
connect = "{SIM_IP}:{SRV1_PORT}"

[[peer]]
name = "fdr2"
origin_host = "{FDR2_HOST}"
realm = "relay.test.example"
role = "server"
group = "far"
connect = "{SIM_IP}:{FDR2_TLS_PORT}"
tls = {tls}

[[peer]]
name = "fdsrv"
origin_host = "fdsrv.test.example"
realm = "test.example"
role = "server"
group = "spare"
connect = "{SIM_IP}:{FDSRV_TLS_PORT}"
tls = {expired}

[[peer_group]]
name = "spare"

[[peer_group]]
name = "pcrf"
answer_timeout = "3s"

[[peer_group]]
name = "far"
answer_timeout = "3s"

[[route]]
realm = "pcrf.test.example"
application = "gx"
group = "pcrf"

[[route]]
realm = "far.test.example"
application = "gx"
group = "far"
"#,
        control = lab.control().display(),
        fdr1 = client("fdr1"),
        pgw1 = client("pgw1"),
        fdbad = client("fdbad"),
        expired = expired.toml(),
    )
}

/// `SESSIONS` Gx sessions (CCR-I, -U, -T in order, sessions concurrently) from `origin`
/// to `dest_realm` over `peer`: the answers' (Result-Code, Origin-Host).
async fn sessions(peer: &ScriptedPeer, origin: &str, dest_realm: &str) -> Vec<(u32, String)> {
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let (p, origin, dest) = (peer.clone(), origin.to_owned(), dest_realm.to_owned());
        tasks.push(tokio::spawn(async move {
            let sid = format!("{origin};tls;{s}");
            let mut out = Vec::new();
            for (n, t) in [cc::INITIAL, cc::UPDATE, cc::TERMINATION]
                .into_iter()
                .enumerate()
            {
                let req = ccr(&sid, GX, &origin, "test.example", &dest, t, n as u32);
                let a = tokio::time::timeout(Duration::from_secs(10), p.request(req))
                    .await
                    .unwrap_or_else(|_| panic!("{sid} request {n}: no answer in 10 s"))
                    .unwrap_or_else(|| panic!("{sid} request {n}: connection closed"));
                assert_eq!(a.session_id(), Some(sid.as_str()));
                out.push((
                    a.result_code().unwrap_or(0),
                    a.origin_host().unwrap_or("").to_owned(),
                ));
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("session task"));
    }
    all
}

/// Watchdog messages in a freeDiameter message dump exchanged with the agent:
/// (DWRs received from it, DWAs sent to it, DWRs sent to it, DWAs received from it).
fn watchdogs(log: &str) -> (usize, usize, usize, usize) {
    let mut c = (0, 0, 0, 0);
    let mut dir: Option<bool> = None; // Some(true): received from the agent
    for l in log.lines() {
        if l.contains("RECEIVED from") || l.contains("RCV from") {
            dir = l.contains(DRA_HOST).then_some(true);
        } else if l.contains("SND to") || l.contains("SENT to") {
            dir = l.contains(DRA_HOST).then_some(false);
        }
        let (dwr, dwa) = (
            l.contains("Device-Watchdog-Request"),
            l.contains("Device-Watchdog-Answer"),
        );
        if let (Some(d), true) = (dir, dwr || dwa) {
            match (d, dwr) {
                (true, true) => c.0 += 1,
                (false, false) => c.1 += 1,
                (false, true) => c.2 += 1,
                (true, false) => c.3 += 1,
            }
            dir = None;
        }
    }
    c
}

fn issue(ca: &TestCa, host: &str) -> TlsFiles {
    ca.issue(host, &[host]).expect("certificate")
}

#[test]
fn cer_dwr_and_gx_ccrs_over_tls_with_freediameter_both_ways_and_bad_certificates_refused() {
    with_lab("f", |lab| {
        let dir = lab.dir.0.clone();
        let agent = issue(&lab.ca, DRA_HOST);
        let other_ca = TestCa::in_dir("other", &dir).expect("other CA");
        // fdr1: the gateway side. gwa reaches it over plain TCP; it dials the agent
        // over TLS and sends it pcrf.test.example; Tw 6 s (it sends the DWRs).
        let fdr1_tls = issue(&lab.ca, FDR1_HOST);
        let fdr1 = start_fd(
            lab,
            &fd_conf(
                &dir,
                &Fd {
                    host: FDR1_HOST,
                    realm: "test.example",
                    port: FDR1_PORT,
                    sec_port: 0,
                    tw: 6,
                    tls: &fdr1_tls,
                    extra: fd_extensions(
                        &dir,
                        FDR1_HOST,
                        "ALLOW_IPSEC gwa.test.example\n",
                        "pcrf.test.example",
                        DRA_HOST,
                    ) + &dial_agent(),
                },
            ),
        );
        // fdr2: the server side, accepting the agent over TLS only (acl_wl without a
        // flag), relaying far.test.example to srv2; Tw 60 s (the agent sends the DWRs).
        let fdr2_tls = issue(&lab.ca, FDR2_HOST);
        let fdr2 = start_fd(
            lab,
            &fd_conf(
                &dir,
                &Fd {
                    host: FDR2_HOST,
                    realm: "relay.test.example",
                    port: 3872,
                    sec_port: FDR2_TLS_PORT,
                    tw: 60,
                    tls: &fdr2_tls,
                    extra: fd_extensions(
                        &dir,
                        FDR2_HOST,
                        &format!("{DRA_HOST}\n"),
                        "far.test.example",
                        "srv2.far.test.example",
                    ) + &format!(
                        "ConnectPeer = \"srv2.far.test.example\" {{ ConnectTo = \"{SIM_IP}\"; \
                         Port = {SRV2_PORT}; No_TLS; }};\n"
                    ),
                },
            ),
        );
        // Two that must be refused: fdbad (a configured TLS peer, its certificate from
        // another CA; it trusts the agent's), fdx (a certificate of a host the agent
        // does not know).
        // freeDiameter checks its own certificate against TLS_CA at start: fdbad trusts
        // both CAs (its own, and the agent's: a second TLS_CA line).
        let fdbad_tls = issue(&other_ca, "fdbad.test.example").trusting(&lab.ca.ca_path());
        let also_other_ca = format!("TLS_CA = \"{}\";\n", other_ca.ca_path().display());
        let fdx_tls = issue(&lab.ca, "fdx.test.example");
        let mut bad = Vec::new();
        for (host, tls, port, extra) in [
            (
                "fdbad.test.example",
                &fdbad_tls,
                3873,
                also_other_ca.as_str(),
            ),
            ("fdx.test.example", &fdx_tls, 3874, ""),
        ] {
            bad.push(start_fd(
                lab,
                &fd_conf(
                    &dir,
                    &Fd {
                        host,
                        realm: "test.example",
                        port,
                        sec_port: 0,
                        tw: 30,
                        tls,
                        extra: format!("{extra}{}", dial_agent()),
                    },
                ),
            ));
        }
        // fdsrv: a server that the agent dials with an expired certificate of its own
        // (freeDiameter will not start with an expired certificate, so it cannot be the
        // one presenting it): freeDiameter refuses it, the agent counts the refusal. It
        // comes up 5 s after the agent (below), which dialled it before it listened.
        let fdsrv_tls = issue(&lab.ca, "fdsrv.test.example");
        let fdsrv_conf = fd_conf(
            &dir,
            &Fd {
                host: "fdsrv.test.example",
                realm: "test.example",
                port: 3876,
                sec_port: FDSRV_TLS_PORT,
                tw: 30,
                tls: &fdsrv_tls,
                extra: fd_extensions(
                    &dir,
                    "fdsrv.test.example",
                    &format!("{DRA_HOST}\n"),
                    "none.test.example",
                    DRA_HOST,
                ),
            },
        );
        let expired = lab
            .ca
            .issue_with("dra-expired", &[DRA_HOST], Validity::Expired)
            .expect("certificate");
        let config = agent_config(lab, &agent, &expired);
        let (srv1, srv2) = lab.in_sim(async {
            let server = |port, host: &str, realm: &str, peer: &str| {
                let (host, realm, peer) = (host.to_owned(), realm.to_owned(), peer.to_owned());
                async move {
                    ScriptedServer::start(
                        format!("{SIM_IP}:{port}").parse().unwrap(),
                        scripted_config(&host, &realm, &[GX], SIM_IP.parse().unwrap()),
                        &peer,
                        None,
                    )
                    .await
                    .expect("server")
                }
            };
            (
                server(
                    SRV1_PORT,
                    "srv1.pcrf.test.example",
                    "pcrf.test.example",
                    DRA_HOST,
                )
                .await,
                server(
                    SRV2_PORT,
                    "srv2.far.test.example",
                    "far.test.example",
                    FDR2_HOST,
                )
                .await,
            )
        });
        lab.start_dra(&config, &[]);
        // The scenario: fdsrv starts 5 s after the agent (the simulators serve
        // meanwhile).
        lab.in_sim(async { tokio::time::sleep(Duration::from_secs(5)).await });
        let fdsrv = start_fd(lab, &fdsrv_conf);
        lab.in_sim(async {
            let fds = [&fdr1, &fdr2];
            let logs = || {
                fds.iter()
                    .map(|f| f.log_text())
                    .collect::<Vec<_>>()
                    .join("\n----\n")
            };
            let open = |p: &str| format!("dra_peer_state{{peer=\"{p}\",state=\"open\"}}");
            // Ready: srv1 and fdr2, its routed servers, open; then fdr1 (a client) too.
            lab.wait_ready(Duration::from_secs(40)).await;
            until(
                lab,
                "fdr1, fdr2 and srv1 open over TLS",
                Duration::from_secs(40),
                || {
                    let page = scrape();
                    ["fdr1", "fdr2", "srv1"]
                        .iter()
                        .all(|p| metric(&page, &open(p)) == 1.0)
                },
            )
            .await;
            let status = dra::agent::query_status(&lab.control())
                .await
                .expect("status");
            for p in ["fdr1", "fdr2"] {
                let row = status
                    .lines()
                    .find(|l| l.split_whitespace().next() == Some(p));
                let w: Vec<&str> = row.expect("peer row").split_whitespace().collect();
                assert_eq!((w[2], w[3]), ("open", "tls"), "{status}\n{}", logs());
            }

            // Gateway side: gwa → fdr1 ══TLS══▶ agent → srv1.
            let gwa = ScriptedPeer::connect(
                format!("{SIM_IP}:{FDR1_PORT}").parse().unwrap(),
                scripted_config(
                    "gwa.test.example",
                    "test.example",
                    &[GX],
                    SIM_IP.parse().unwrap(),
                ),
                FDR1_HOST,
                None,
            )
            .await
            .expect("gwa: CEA from fdr1");
            let a = sessions(&gwa, "gwa.test.example", "pcrf.test.example").await;
            assert_eq!(a.len(), 3 * SESSIONS);
            for (rc, host) in &a {
                assert_eq!(
                    (*rc, host.as_str()),
                    (result_code::SUCCESS, "srv1.pcrf.test.example")
                );
            }
            // Server side: pgw1 ══TLS══▶ agent ══TLS══▶ fdr2 → srv2.
            let pgw1_tls = issue(&lab.ca, "pgw1.test.example");
            let conn = dial(
                None,
                format!("{DRA_IP}:{TLS_PORT}").parse().unwrap(),
                None,
                Some(&connector(&pgw1_tls)),
                None,
            )
            .await
            .expect("pgw1: TLS to the agent");
            let pgw1 = ScriptedPeer::open(
                conn,
                scripted_config(
                    "pgw1.test.example",
                    "test.example",
                    &[GX],
                    SIM_IP.parse().unwrap(),
                ),
                DRA_HOST,
                None,
            )
            .await
            .expect("pgw1: CEA over TLS");
            let a = sessions(&pgw1, "pgw1.test.example", "far.test.example").await;
            for (rc, host) in &a {
                assert_eq!(
                    (*rc, host.as_str()),
                    (result_code::SUCCESS, "srv2.far.test.example")
                );
            }
            assert_eq!(
                srv1.stats.requests.load(Ordering::Relaxed),
                3 * SESSIONS as u64
            );
            assert_eq!(
                srv2.stats.requests.load(Ordering::Relaxed),
                3 * SESSIONS as u64
            );
            let page = scrape();
            let n = (3 * SESSIONS) as f64;
            for series in [
                "dra_requests_total{peer=\"fdr1\",direction=\"in\"}",
                "dra_requests_total{peer=\"srv1\",direction=\"out\"}",
                "dra_requests_total{peer=\"pgw1\",direction=\"in\"}",
                "dra_requests_total{peer=\"fdr2\",direction=\"out\"}",
                "dra_answers_total{peer=\"fdr1\",result_code=\"2001\"}",
                "dra_answers_total{peer=\"pgw1\",result_code=\"2001\"}",
            ] {
                assert_eq!(metric(&page, series), n, "{series}");
            }

            // Watchdogs both ways over TLS: fdr1 (Tw 6 s) sends DWRs to the agent; the
            // agent (`watchdog = "6s"`, ±1.5 s) sends its DWR to fdr2 (Tw 60 s) after 6 s
            // idle. Waited for 20 s: sooner than the default Tw (30 s ± 2) could send it,
            // so the agent's DWR shows the configured watchdog is the one it runs.
            until(lab, "DWR/DWA both ways", Duration::from_secs(20), || {
                let (_, _, s1, a1) = watchdogs(&fdr1.log_text());
                let (r2, s2, _, _) = watchdogs(&fdr2.log_text());
                s1 >= 1 && a1 >= 1 && r2 >= 1 && s2 >= 1
            })
            .await;

            // The refused ones: counted (fdbad and fdx dial every second; the agent
            // redialled fdsrv once it listened), and never open.
            let refused = |reason: &str, side: &str| {
                format!("dra_tls_refused_total{{side=\"{side}\",reason=\"{reason}\"}}")
            };
            let mut page = String::new();
            poll_until(Duration::from_secs(40), async || {
                page = scrape();
                [
                    ("no_certificate", "accepted"),
                    ("not_for_peer", "accepted"),
                    ("peer_refused", "dialled"),
                ]
                .iter()
                .all(|(reason, side)| metric(&page, &refused(reason, side)) >= 1.0)
            })
            .await;
            for (series, what) in [
                // GnuTLS sends no certificate that is not issued by a CA the agent's
                // certificate request names: the wrong CA shows as no certificate.
                ("no_certificate", "fdbad"),
                ("not_for_peer", "fdx"),
            ] {
                let series = refused(series, "accepted");
                let tls: Vec<&str> = page.lines().filter(|l| l.starts_with("dra_tls")).collect();
                let fd_logs: Vec<String> = bad.iter().map(|b| b.log_text()).collect();
                assert!(
                    metric(&page, &series) >= 1.0,
                    "{what} not refused: {series}\n{tls:?}\n{}\n{}",
                    fd_logs.join("\n----\n"),
                    lab.log()
                );
            }
            assert_eq!(metric(&page, &open("fdbad")), 0.0);
            let series = refused("peer_refused", "dialled");
            assert!(metric(&page, &series) >= 1.0, "not counted: {}", lab.log());
            assert!(
                fdsrv.log_text().to_ascii_lowercase().contains("expired"),
                "fdsrv did not say why: {}",
                fdsrv.log_text()
            );
            assert_eq!(metric(&page, &open("fdsrv")), 0.0);
        });
        let log = lab.log();
        for reason in ["no_certificate", "not_for_peer", "peer_refused"] {
            assert!(
                log.lines()
                    .any(|l| l.contains("TLS connection refused") && l.contains(reason)),
                "no log line for {reason}:\n{log}"
            );
        }
        for b in &bad {
            assert!(!b.log_text().contains("STATE_OPEN"), "{}", b.log_text());
        }
        assert!(
            fdr1.log_text().contains("STATE_OPEN"),
            "{}",
            fdr1.log_text()
        );
    });
}
