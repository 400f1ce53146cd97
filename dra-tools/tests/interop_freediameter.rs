//! Interop with freeDiameter 1.2.1 (`freeDiameterd`, Debian package `freediameterd`,
//! installed by `cargo xtask setup`): the agent completes CER/CEA and DWR/DWA in both
//! directions.
//!
//! - freeDiameter as a client peer: `fdc.test.example` dials the agent.
//! - freeDiameter as a server peer: the agent dials `fds.pcrf.test.example`.
//!
//! freeDiameter refuses to run with only loopback addresses, so the test builds two
//! network namespaces joined by a veth pair (198.18.0.0/30, RFC 2544 benchmark
//! space): the agent runs in this process on a thread that entered namespace A
//! (setns), both freeDiameter daemons run in namespace B. Needs root (namespaces).
//! See docs/interop.md.

mod support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dra_tools::freediameter::self_signed_cert;
use dra_tools::netns::{self, Netns};
use support::agent::{GX, SimServer, agent_config, peer_state, sim_config};
use support::freediameter::FreeDiameter;
use support::{TempDir, poll_until};

const AGENT_IP: &str = "198.18.0.1";
const FD_IP: &str = "198.18.0.2";
const AGENT_PORT: u16 = 3869;
const FDC_PORT: u16 = 3868;
const FDS_PORT: u16 = 3870;
/// Watchdog intervals. Any message received restarts a side's watchdog timer (RFC 3539
/// §3.4.1), so on each connection only the side with the shorter Tw sends DWRs. Both
/// sides jitter by up to ±2 s. `fdc` (Tw 6 s: 4–8 s) sends before the agent (10 s:
/// 8–12 s); the agent sends before `fds` (15 s: 13–17 s). Each direction of DWR/DWA
/// is exercised on one connection.
const AGENT_TW: Duration = Duration::from_secs(10);
const FDC_TW: u32 = 6;
const FDS_TW: u32 = 15;
/// How long both connections must stay open: past the agent's longest Tw.
const OBSERVE: Duration = Duration::from_secs(13);
const DRA_HOST: &str = "dra.test.example";
const FDC_HOST: &str = "fdc.test.example";
const FDS_HOST: &str = "fds.pcrf.test.example";

/// A Gx simulator server `host` of `realm` on the agent's address at `port`, expecting
/// `peer` to connect.
async fn gx_server(port: u16, host: &str, realm: &str, peer: &str) -> SimServer {
    SimServer::start(
        format!("{AGENT_IP}:{port}").parse().unwrap(),
        sim_config(host, realm, &[GX]),
        peer,
        None,
    )
    .await
    .expect(host)
}

/// freeDiameter's config: plain TCP on [`FD_IP`], watchdog interval `tw` seconds,
/// message dumps on (`dbg_msg_dumps`, 0x0080 = every message sent or received) so the
/// test can read the exchange.
fn fd_conf(dir: &Path, host: &str, realm: &str, port: u16, tw: u32, extra: &str) -> PathBuf {
    let dumps = format!("LoadExtension = \"dbg_msg_dumps.fdx\" : \"0x0080\";\n{extra}");
    fd_conf_plain(dir, host, realm, port, tw, &dumps)
}

/// freeDiameter's config without message dumps: plain TCP on [`FD_IP`], watchdog
/// interval `tw` seconds, `extra` appended.
fn fd_conf_plain(dir: &Path, host: &str, realm: &str, port: u16, tw: u32, extra: &str) -> PathBuf {
    let (crt, key) = self_signed_cert(dir, host, host).expect("openssl");
    let text = format!(
        "Identity = \"{host}\";\nRealm = \"{realm}\";\nPort = {port};\nSecPort = 0;\n\
         No_SCTP;\nNo_IPv6;\nListenOn = \"{FD_IP}\";\nTwTimer = {tw};\nTcTimer = 1;\n\
         TLS_Cred = \"{}\", \"{}\";\nTLS_CA = \"{}\";\n{extra}",
        crt.display(),
        key.display(),
        crt.display()
    );
    let p = dir.join(format!("{host}.conf"));
    std::fs::write(&p, text).expect("write conf");
    p
}

/// The agent's and freeDiameter's namespaces (named `agent` and `fd`), joined by a veth
/// pair ([`AGENT_IP`], [`FD_IP`]). The test must run as root.
fn namespaces(agent: &str, fd: &str) -> (Netns, Netns) {
    support::require_root("network namespaces");
    let agent_ns = Netns::new(agent).expect("namespace");
    let fd_ns = Netns::new(fd).expect("namespace");
    netns::veth_pair(
        &agent_ns,
        &format!("{AGENT_IP}/30"),
        &fd_ns,
        &format!("{FD_IP}/30"),
    )
    .expect("veth pair");
    (agent_ns, fd_ns)
}

fn agent_toml() -> String {
    agent_config(&[AGENT_IP], AGENT_PORT)
        .client("fdc", "test.example", &[], "")
        .server(
            "fds",
            "pcrf.test.example",
            &format!("{FD_IP}:{FDS_PORT}"),
            "group = \"pcrf\"",
        )
        .group("pcrf", "answer_timeout = \"2s\"")
        .route(
            "pcrf.test.example",
            "application = \"gx\"\ngroup = \"pcrf\"",
        )
        .to_string()
}

/// Watchdog exchanges seen in a freeDiameter message dump involving `dra`: (DWRs
/// received from it, DWAs received from it, DWRs sent to it, DWAs sent to it).
fn dump_counts(log: &str) -> (usize, usize, usize, usize) {
    // dbg_msg_dumps prints one block per message: a header line naming the direction
    // and the peer, then the dump with the command name.
    let mut c = (0, 0, 0, 0);
    let mut dir: Option<bool> = None; // Some(true) = received from dra
    for l in log.lines() {
        if l.contains("RECEIVED from") || l.contains("RCV from") {
            dir = l.contains(DRA_HOST).then_some(true);
        } else if l.contains("SND to") {
            dir = l.contains(DRA_HOST).then_some(false);
        }
        if let Some(d) = dir {
            let dwr = l.contains("Device-Watchdog-Request");
            let dwa = l.contains("Device-Watchdog-Answer");
            if dwr || dwa {
                match (d, dwr) {
                    (true, true) => c.0 += 1,
                    (true, false) => c.1 += 1,
                    (false, true) => c.2 += 1,
                    (false, false) => c.3 += 1,
                }
                dir = None;
            }
        }
    }
    c
}

#[test]
fn cer_cea_and_dwr_dwa_with_freediameter_both_directions() {
    let (agent_ns, fd_ns) = namespaces("dia", "dif");
    let dir = TempDir::new("dra-interop-");
    // freeDiameter dialling the agent (the agent's client peer `fdc`).
    let fdc_conf = fd_conf(
        &dir.0,
        FDC_HOST,
        "test.example",
        FDC_PORT,
        FDC_TW,
        &format!(
            "ConnectPeer = \"{DRA_HOST}\" {{ ConnectTo = \"{AGENT_IP}\"; \
             Port = {AGENT_PORT}; No_TLS; }};\n"
        ),
    );
    // freeDiameter the agent dials (server peer `fds`): unknown incoming peers are
    // refused unless whitelisted; ALLOW_IPSEC = accepted without TLS.
    let acl = dir.0.join("acl_wl.conf");
    std::fs::write(&acl, format!("ALLOW_IPSEC {DRA_HOST}\n")).expect("acl");
    let fds_conf = fd_conf(
        &dir.0,
        FDS_HOST,
        "pcrf.test.example",
        FDS_PORT,
        FDS_TW,
        &format!("LoadExtension = \"acl_wl.fdx\" : \"{}\";\n", acl.display()),
    );
    let fds = FreeDiameter::start(&fd_ns, &fds_conf, dir.0.join("fds.log"));
    let fdc = FreeDiameter::start(&fd_ns, &fdc_conf, dir.0.join("fdc.log"));

    let cfg = dra::config::parse(&agent_toml(), "interop.toml").expect("config");
    let metrics = dra::metrics::Metrics::new();
    let nsfile = agent_ns.file().expect("namespace file");
    let m = metrics;
    // The agent's sockets must live in namespace A: a dedicated thread enters it and
    // runs its own runtime there.
    let agent_thread = std::thread::spawn(move || {
        // This thread only (and the runtime it creates below).
        netns::enter(&nsfile).expect("setns");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let opts = dra::agent::AgentOptions {
                tc: Some(Duration::from_millis(500)),
                tw: Some(AGENT_TW),
                ..Default::default()
            };
            let agent = support::agent::start_agent(cfg, opts, m.clone()).await;
            // Both connections open, then stay open past the watchdog exchanges (the
            // scenario: OBSERVE of watching `dra status`).
            let mut opened_at: Option<Instant> = None;
            let mut last = String::new();
            poll_until(Duration::from_secs(40), async || {
                last = agent.status().await.expect("status");
                let both = peer_state(&last, "fdc") == Some("open")
                    && peer_state(&last, "fds") == Some("open");
                match (both, opened_at) {
                    (true, None) => opened_at = Some(Instant::now()),
                    (false, Some(_)) => panic!("a connection left open:\n{last}"),
                    (true, Some(t)) => return t.elapsed() > OBSERVE,
                    _ => {}
                }
                false
            })
            .await;
            assert!(opened_at.is_some(), "never both open:\n{last}");
            let stats = agent.stats().await.expect("stats");
            let exported = m.encode();
            agent.shutdown().await;
            (last, stats, exported)
        })
    });
    let (status, stats, exported) = agent_thread
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
    let fdc_log = fdc.log_text();
    let fds_log = fds.log_text();
    // The agent: both peers still open after the watchdog exchanges, no application traffic.
    assert_eq!(peer_state(&status, "fdc"), Some("open"), "{status}");
    assert_eq!(peer_state(&status, "fds"), Some("open"), "{status}");
    assert_eq!(stats.requests_in, 0);
    for p in ["fdc", "fds"] {
        assert!(
            exported.lines().any(|l| l.starts_with("dra_peer_state")
                && l.contains(&format!("peer=\"{p}\""))
                && l.contains("state=\"open\"")
                && l.ends_with(" 1")),
            "{p} not open in metrics:\n{exported}"
        );
    }
    // freeDiameter: both reached the open state with the agent ...
    for (name, log) in [("fdc", &fdc_log), ("fds", &fds_log)] {
        assert!(
            log.lines()
                .any(|l| l.contains(DRA_HOST) && l.contains("STATE_OPEN")),
            "{name} never opened with the agent:\n{log}"
        );
    }
    // ... `fdc` sent DWRs that the agent answered ...
    let (dwr_in, dwa_in, dwr_out, dwa_out) = dump_counts(&fdc_log);
    assert!(
        dwr_out >= 1 && dwa_in >= 1,
        "fdc: no DWR to the agent answered (DWR out {dwr_out}, DWA in {dwa_in}, \
         DWR in {dwr_in}, DWA out {dwa_out}):\n{fdc_log}"
    );
    // ... and `fds` answered the agent's DWRs.
    let (dwr_in, dwa_in, dwr_out, dwa_out) = dump_counts(&fds_log);
    assert!(
        dwr_in >= 1 && dwa_out >= 1,
        "fds: no DWR from the agent answered (DWR in {dwr_in}, DWA out {dwa_out}, \
         DWR out {dwr_out}, DWA in {dwa_in}):\n{fds_log}"
    );
}

// ---------------------------------------------------------------- relaying both ways

/// CCRs per direction in the relay test: `RELAY_SESSIONS` sessions of CCR-I, CCR-U and
/// CCR-T each.
const RELAY_SESSIONS: u32 = 60;
const RELAY_CCRS: u64 = RELAY_SESSIONS as u64 * 3;
/// Relay freeDiameter on the gateways' side (loadgen → fdr1 → agent → loadgen server).
const FDR1_HOST: &str = "fdr1.test.example";
const FDR1_PORT: u16 = 3871;
/// Relay freeDiameter on the servers' side (loadgen → agent → fdr2 → loadgen server).
const FDR2_HOST: &str = "fdr2.relay.test.example";
const FDR2_PORT: u16 = 3872;
/// The loadgen gateway behind fdr1 and the one that dials the agent directly.
const GWA_HOST: &str = "gwa.test.example";
const PGW_HOST: &str = "pgw1.test.example";
/// The loadgen servers: srv1 behind the agent (realm pcrf.test.example), srv2 behind
/// fdr2 (realm far.test.example), both in the agent's namespace.
const SRV1_HOST: &str = "srv1.pcrf.test.example";
const SRV1_PORT: u16 = 3881;
const SRV2_HOST: &str = "srv2.far.test.example";
const SRV2_PORT: u16 = 3882;

/// A relaying freeDiameter: its Identity `host` in `own_realm`, listening on `port`.
#[derive(Clone, Copy)]
struct FdRelay<'a> {
    host: &'a str,
    own_realm: &'a str,
    port: u16,
    /// The one client it admits without TLS (`acl_wl`).
    admit: &'a str,
    /// `rt_default` sends Destination-Realm `realm` to `next_hop`, which it dials at
    /// `connect`.
    realm: &'a str,
    next_hop: &'a str,
    connect: (&'a str, u16),
}

/// The config of `r`: DCCA dictionaries, `acl_wl`, `rt_default`, its next hop.
fn fd_relay_conf(dir: &Path, r: &FdRelay) -> PathBuf {
    let FdRelay {
        host,
        own_realm,
        port,
        admit,
        realm,
        next_hop,
        connect: (connect_ip, connect_port),
    } = *r;
    let acl = dir.join(format!("{host}.acl"));
    std::fs::write(&acl, format!("ALLOW_IPSEC {admit}\n")).expect("acl");
    let rt = dir.join(format!("{host}.rt"));
    std::fs::write(&rt, format!("dr=\"{realm}\" : \"{next_hop}\" += 100 ;\n")).expect("rt");
    let extra = format!(
        "LoadExtension = \"dict_nasreq.fdx\";\nLoadExtension = \"dict_dcca.fdx\";\n\
         LoadExtension = \"dict_dcca_3gpp.fdx\";\n\
         LoadExtension = \"acl_wl.fdx\" : \"{}\";\n\
         LoadExtension = \"rt_default.fdx\" : \"{}\";\n\
         ConnectPeer = \"{next_hop}\" {{ ConnectTo = \"{connect_ip}\"; Port = {connect_port}; \
         No_TLS; }};\n",
        acl.display(),
        rt.display()
    );
    // Message dumps are not needed here (the capture shows the exchange): a plain
    // relay config, Tw 30 s.
    fd_conf_plain(dir, host, own_realm, port, 30, &extra)
}

/// The agent between the relays: client peers fdr1 (freeDiameter) and pgw1 (loadgen),
/// server peers srv1 (loadgen, group pcrf, realm pcrf.test.example) and fdr2
/// (freeDiameter, group far, which routes realm far.test.example).
fn relay_agent_toml() -> String {
    agent_config(&[AGENT_IP], AGENT_PORT)
        .client("fdr1", "test.example", &[], "")
        .client("pgw1", "test.example", &[], "")
        .server(
            "srv1",
            "pcrf.test.example",
            &format!("{AGENT_IP}:{SRV1_PORT}"),
            "group = \"pcrf\"",
        )
        .server(
            "fdr2",
            "relay.test.example",
            &format!("{FD_IP}:{FDR2_PORT}"),
            "group = \"far\"",
        )
        .group("pcrf", "answer_timeout = \"3s\"")
        .group("far", "answer_timeout = \"3s\"")
        .route(
            "pcrf.test.example",
            "application = \"gx\"\ngroup = \"pcrf\"",
        )
        .route("far.test.example", "application = \"gx\"\ngroup = \"far\"")
        .to_string()
}

/// tshark capturing every interface of a namespace into a file; stopped with SIGINT
/// (so the file is complete), killed on drop.
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    fn start(ns: &Netns, file: PathBuf) -> Capture {
        let log = File::create(file.with_extension("log")).expect("log");
        let mut cmd = Command::new("tshark");
        cmd.args(["-n", "-q", "-i", "any", "-f", "tcp", "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = ns
            .spawn(&mut cmd)
            .expect("spawn tshark (`cargo xtask setup` installs it)");
        let c = Capture { child, file };
        // tshark says "Capturing on 'any'" once it captures.
        let capturing = support::poll_until_blocking(Duration::from_secs(20), || {
            std::fs::read_to_string(c.file.with_extension("log"))
                .is_ok_and(|l| l.contains("Capturing on"))
        });
        assert!(capturing, "tshark did not start capturing");
        c
    }

    /// tshark's verbose decode of the Diameter frames in the capture file: every port
    /// the test uses decoded as Diameter; checksums not checked (locally sent segments
    /// carry partial checksums, offloaded).
    fn decode(&self) -> std::process::Output {
        let mut cmd = Command::new("tshark");
        cmd.args(["-n", "-r"])
            .arg(&self.file)
            .args(["-V", "-Y", "diameter"]);
        for p in [AGENT_PORT, FDR1_PORT, FDR2_PORT, SRV1_PORT, SRV2_PORT] {
            cmd.args(["-d", &format!("tcp.port=={p},diameter")]);
        }
        cmd.output().expect("tshark -r")
    }

    /// Waits until the frames captured so far (read while tshark still writes them)
    /// satisfy `cond`, at most `patience`.
    fn wait_for(&self, patience: Duration, cond: impl Fn(&str) -> bool) {
        // A frame still being written makes tshark complain: what it decoded counts.
        support::poll_until_blocking(patience, || {
            cond(&String::from_utf8_lossy(&self.decode().stdout))
        });
    }

    /// Stops the capture; [`Capture::decode`] of it.
    fn stop_and_decode(mut self) -> String {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        let out = self.decode();
        assert!(
            out.status.success(),
            "tshark -r: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the exposition line that starts with `series` (0 if absent).
fn metric(exported: &str, series: &str) -> u64 {
    exported
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Sends `RELAY_SESSIONS` Gx sessions (CCR-I, CCR-U, CCR-T, in order per session, the
/// sessions concurrently) from `origin` to `dest_realm` over `peer`; the answers'
/// (Result-Code, Origin-Host), one per request (a lost request panics).
async fn relay_sessions(
    peer: &support::agent::SimPeer,
    origin: &str,
    dest_realm: &str,
) -> Vec<(Option<u32>, String)> {
    use support::agent::{cc, ccr};
    let mut tasks = Vec::new();
    for s in 0..RELAY_SESSIONS {
        let p = peer.clone();
        let (origin, dest) = (origin.to_owned(), dest_realm.to_owned());
        tasks.push(tokio::spawn(async move {
            let sid = format!("{origin};{s}");
            let mut out = Vec::new();
            for (n, t) in [cc::INITIAL, cc::UPDATE, cc::TERMINATION]
                .into_iter()
                .enumerate()
            {
                let n = n as u32;
                let req = ccr(
                    &sid,
                    support::agent::GX,
                    &origin,
                    "test.example",
                    &dest,
                    t,
                    n,
                );
                let a = tokio::time::timeout(Duration::from_secs(10), p.request(req))
                    .await
                    .unwrap_or_else(|_| panic!("{sid} request {n}: no answer in 10 s"))
                    .unwrap_or_else(|| panic!("{sid} request {n}: connection closed"));
                assert_eq!(a.session_id(), Some(sid.as_str()));
                out.push((a.result_code(), a.origin_host().unwrap_or("").to_owned()));
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

/// Diameter PDUs of a decode: (command code, request?, Origin-Host).
fn pdu_summary(decoded: &str) -> Vec<(u32, bool, String)> {
    support::diameter_pdus(decoded)
        .into_iter()
        .filter_map(|p| {
            // "Credit-Control (272)"
            let code = support::pdu_field(p, "    Command Code: ")?
                .rsplit('(')
                .next()?
                .trim_end_matches(')')
                .parse()
                .ok()?;
            let request =
                support::pdu_field(p, "    Flags: ").is_some_and(|f| f.contains("Request"));
            let host = p
                .lines()
                .find_map(|l| l.trim().strip_prefix("Origin-Host: "))
                .unwrap_or("")
                .to_owned();
            Some((code, request, host))
        })
        .collect()
}

/// Gx CCRs relayed through freeDiameter both ways, with exact counts at every hop and a
/// capture tshark decodes cleanly, then DPR/DPA both ways:
///
/// ```text
///  gwa (loadgen) → fdr1 (freeDiameter) → agent → srv1 (loadgen server)
///  pgw1 (loadgen) → agent → fdr2 (freeDiameter) → srv2 (loadgen server)
/// ```
///
/// fdr2 stops gracefully first (its DPR to the agent, the agent's DPA), then the agent
/// shuts down (its DPR to fdr1, fdr1's DPA).
#[test]
fn gx_ccrs_relay_through_freediameter_both_ways() {
    use support::agent::{SimPeer, Tap};
    support::require_tshark();
    let (agent_ns, fd_ns) = namespaces("hra", "hrf");
    let dir = TempDir::new("dra-interop-relay-");
    let capture = Capture::start(&agent_ns, dir.0.join("relay.pcap"));
    let fdr1_conf = fd_relay_conf(
        &dir.0,
        &FdRelay {
            host: FDR1_HOST,
            own_realm: "test.example",
            port: FDR1_PORT,
            admit: GWA_HOST,
            realm: "pcrf.test.example",
            next_hop: DRA_HOST,
            connect: (AGENT_IP, AGENT_PORT),
        },
    );
    let fdr2_conf = fd_relay_conf(
        &dir.0,
        &FdRelay {
            host: FDR2_HOST,
            own_realm: "relay.test.example",
            port: FDR2_PORT,
            admit: DRA_HOST,
            realm: "far.test.example",
            next_hop: SRV2_HOST,
            connect: (AGENT_IP, SRV2_PORT),
        },
    );
    // freeDiameter first: the loadgen servers it dials (srv2) and the agent it dials
    // (fdr1) come up within its reconnect timer (Tc 1 s).
    let fdr2 = FreeDiameter::start(&fd_ns, &fdr2_conf, dir.0.join("fdr2.log"));
    let fdr1 = FreeDiameter::start(&fd_ns, &fdr1_conf, dir.0.join("fdr1.log"));
    let fdr2_pid = fdr2.child.id() as i32;
    let (fdr1_log, fdr2_log) = (fdr1.log.clone(), fdr2.log.clone());
    let logs = move || {
        format!(
            "fdr1:\n{}\nfdr2:\n{}",
            std::fs::read_to_string(&fdr1_log).unwrap_or_default(),
            std::fs::read_to_string(&fdr2_log).unwrap_or_default()
        )
    };
    let cfg = dra::config::parse(&relay_agent_toml(), "relay.toml").expect("config");
    let metrics = dra::metrics::Metrics::new();
    let m = metrics.clone();
    let thread_logs = logs.clone();
    let outcome = support::run_in_netns(&agent_ns, move || async move {
        let srv1 = gx_server(SRV1_PORT, SRV1_HOST, "pcrf.test.example", DRA_HOST).await;
        let srv2 = gx_server(SRV2_PORT, SRV2_HOST, "far.test.example", FDR2_HOST).await;
        let opts = dra::agent::AgentOptions {
            tc: Some(Duration::from_millis(500)),
            ..Default::default()
        };
        let agent = support::agent::start_agent(cfg, opts, m.clone()).await;
        // Every hop open: the agent with fdr1, fdr2 and srv1; fdr2 with srv2.
        let mut last = String::new();
        poll_until(Duration::from_secs(30), async || {
            last = agent.status().await.expect("status");
            let open = ["fdr1", "fdr2", "srv1"]
                .iter()
                .all(|p| peer_state(&last, p) == Some("open"));
            open && srv2.connections() > 0
        })
        .await;
        assert!(
            ["fdr1", "fdr2", "srv1"]
                .iter()
                .all(|p| peer_state(&last, p) == Some("open")),
            "not every peer open:\n{last}\n{}",
            thread_logs()
        );
        // gwa's CER is answered once fdr1 admits it (its dial retried until then).
        let mut gwa = None;
        poll_until(Duration::from_secs(10), async || {
            gwa = SimPeer::connect(
                format!("{FD_IP}:{FDR1_PORT}").parse().unwrap(),
                sim_config(GWA_HOST, "test.example", &[GX]),
                FDR1_HOST,
                Some(Tap::default()),
            )
            .await
            .ok();
            gwa.is_some()
        })
        .await;
        let gwa = gwa.unwrap_or_else(|| panic!("gwa never opened with fdr1:\n{}", thread_logs()));
        let pgw = SimPeer::connect(
            format!("{AGENT_IP}:{AGENT_PORT}").parse().unwrap(),
            sim_config(PGW_HOST, "test.example", &[GX]),
            DRA_HOST,
            None,
        )
        .await
        .expect("pgw1 opens with the agent");
        let (through_fd_first, through_fd_last) = tokio::join!(
            relay_sessions(&gwa, GWA_HOST, "pcrf.test.example"),
            relay_sessions(&pgw, PGW_HOST, "far.test.example"),
        );
        let served = (
            srv1.stats
                .requests
                .load(std::sync::atomic::Ordering::Relaxed),
            srv2.stats
                .requests
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let exported_traffic = m.encode();
        // DPR/DPA: freeDiameter → agent (fdr2 stops), then agent → freeDiameter.
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(fdr2_pid, libc::SIGTERM) };
        let gone = poll_until(Duration::from_secs(15), async || {
            last = agent.status().await.expect("status");
            peer_state(&last, "fdr2") != Some("open")
        })
        .await;
        assert!(gone, "fdr2 never disconnected:\n{last}");
        let stats = agent.stats().await.expect("stats");
        // The agent's DPR to fdr1, answered (the capture shows the DPA below).
        agent.shutdown().await;
        (
            through_fd_first,
            through_fd_last,
            served,
            exported_traffic,
            stats,
        )
    });
    let (first, last, (srv1_n, srv2_n), exported, stats) = outcome;
    // Until the capture holds the exchange's last message, fdr1's DPA to the agent
    // (asserted below).
    capture.wait_for(Duration::from_secs(20), |d| {
        pdu_summary(d)
            .iter()
            .any(|(c, r, h)| *c == 282 && !*r && h == FDR1_HOST)
    });
    let decoded = capture.stop_and_decode();
    let logs = logs();
    drop((fdr1, fdr2));

    // Every request answered 2001 by the server behind the relays.
    for (answers, host) in [(&first, SRV1_HOST), (&last, SRV2_HOST)] {
        assert_eq!(answers.len() as u64, RELAY_CCRS);
        let ok = answers
            .iter()
            .filter(|(rc, h)| *rc == Some(2001) && h == host)
            .count() as u64;
        assert_eq!(ok, RELAY_CCRS, "answers {answers:?}\n{logs}");
    }
    // Equal counts at each hop: what the gateways sent, the agent received from the
    // peer in front of it and sent to the one behind it, and the servers answered.
    assert_eq!((srv1_n, srv2_n), (RELAY_CCRS, RELAY_CCRS));
    for (series, want) in [
        (
            "dra_requests_total{peer=\"fdr1\",direction=\"in\"}",
            RELAY_CCRS,
        ),
        (
            "dra_requests_total{peer=\"srv1\",direction=\"out\"}",
            RELAY_CCRS,
        ),
        (
            "dra_requests_total{peer=\"pgw1\",direction=\"in\"}",
            RELAY_CCRS,
        ),
        (
            "dra_requests_total{peer=\"fdr2\",direction=\"out\"}",
            RELAY_CCRS,
        ),
        (
            "dra_answers_total{peer=\"fdr1\",result_code=\"2001\"}",
            RELAY_CCRS,
        ),
        (
            "dra_answers_total{peer=\"pgw1\",result_code=\"2001\"}",
            RELAY_CCRS,
        ),
    ] {
        assert_eq!(metric(&exported, series), want, "{series}\n{exported}");
    }
    assert_eq!(stats.requests_in, 2 * RELAY_CCRS, "{stats:?}");
    assert_eq!(stats.local_answers, 0, "{stats:?}");
    assert!(stats.invariant_ok(), "{stats:?}");

    // The capture: clean, and it shows the same counts on the wire.
    if let Some(problem) = dra_tools::pcap::tshark_problem(&decoded) {
        panic!("{problem}");
    }
    let pdus = pdu_summary(&decoded);
    let count = |code: u32, request: bool, host: &str| {
        pdus.iter()
            .filter(|(c, r, h)| *c == code && *r == request && h == host)
            .count() as u64
    };
    for (what, code, request, host) in [
        ("CCR gwa", 272, true, GWA_HOST),
        ("CCR pgw1", 272, true, PGW_HOST),
        ("CCA srv1", 272, false, SRV1_HOST),
        ("CCA srv2", 272, false, SRV2_HOST),
        ("DPR fdr2", 282, true, FDR2_HOST),
        ("DPA dra", 282, false, DRA_HOST),
        ("DPR dra", 282, true, DRA_HOST),
        ("DPA fdr1", 282, false, FDR1_HOST),
    ] {
        println!("on the wire: {what}: {}", count(code, request, host));
    }
    println!("Diameter PDUs captured: {}", pdus.len());
    // CCRs keep their Origin-Host through relays; each crosses two captured hops
    // (gateway → fdr1 → agent, and agent → fdr2 → srv2) plus one more: gwa's at the
    // agent → srv1 hop, pgw1's at the pgw1 → agent hop.
    for (request, host, what) in [
        (true, GWA_HOST, "gwa's CCRs"),
        (true, PGW_HOST, "pgw1's CCRs"),
        (false, SRV1_HOST, "srv1's CCAs"),
        (false, SRV2_HOST, "srv2's CCAs"),
    ] {
        assert_eq!(
            count(272, request, host),
            3 * RELAY_CCRS,
            "{what} on the wire"
        );
    }
    // DPR/DPA both ways.
    assert!(
        count(282, true, FDR2_HOST) >= 1,
        "no DPR from freeDiameter\n{logs}"
    );
    assert!(
        count(282, false, DRA_HOST) >= 1,
        "the agent did not answer a DPR"
    );
    assert!(count(282, true, DRA_HOST) >= 1, "no DPR from the agent");
    assert!(
        count(282, false, FDR1_HOST) >= 1,
        "freeDiameter did not answer the agent's DPR\n{logs}"
    );
}
