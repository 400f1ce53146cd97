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
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dra_tools::netns::{self, Netns};
use support::TempDir;
use support::agent::agent_config;

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

/// A self-signed certificate whose CN is `host`: freeDiameter loads TLS credentials
/// even when every peer is plain TCP, and checks that the CN matches its Identity.
fn cert(dir: &Path, host: &str) -> (PathBuf, PathBuf) {
    let crt = dir.join(format!("{host}.crt"));
    let key = dir.join(format!("{host}.key"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={host}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("spawn openssl");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (crt, key)
}

/// A freeDiameterd process in a namespace, killed on drop; its output goes to `log`.
struct FreeDiameter {
    child: Child,
    log: PathBuf,
}

impl FreeDiameter {
    fn start(ns: &Netns, conf: &Path, log: PathBuf) -> FreeDiameter {
        let out = File::create(&log).expect("log file");
        let mut cmd = Command::new("freeDiameterd");
        cmd.arg("-c")
            .arg(conf)
            .arg("-d")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        let child = ns
            .spawn(&mut cmd)
            .expect("spawn freeDiameterd (package freediameterd; `cargo xtask setup` installs it)");
        FreeDiameter { child, log }
    }

    fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for FreeDiameter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// freeDiameter's config: plain TCP on [`FD_IP`], watchdog interval `tw` seconds,
/// message dumps on (`dbg_msg_dumps`, 0x0080 = every message sent or received) so the
/// test can read the exchange.
fn fd_conf(dir: &Path, host: &str, realm: &str, port: u16, tw: u32, extra: &str) -> PathBuf {
    let (crt, key) = cert(dir, host);
    let text = format!(
        "Identity = \"{host}\";\nRealm = \"{realm}\";\nPort = {port};\nSecPort = 0;\n\
         No_SCTP;\nNo_IPv6;\nListenOn = \"{FD_IP}\";\nTwTimer = {tw};\nTcTimer = 1;\n\
         TLS_Cred = \"{}\", \"{}\";\nTLS_CA = \"{}\";\n\
         LoadExtension = \"dbg_msg_dumps.fdx\" : \"0x0080\";\n{extra}",
        crt.display(),
        key.display(),
        crt.display()
    );
    let p = dir.join(format!("{host}.conf"));
    std::fs::write(&p, text).expect("write conf");
    p
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

/// The state column of `peer`'s row in the agent's status text.
fn peer_state<'a>(status: &'a str, peer: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(peer)).then(|| w.nth(1)).flatten()
    })
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
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test creates network namespaces: run it as root (`sudo cargo xtask test`)"
    );
    let agent_ns = Netns::new("dia").expect("namespace");
    let fd_ns = Netns::new("dif").expect("namespace");
    netns::veth_pair(
        &agent_ns,
        &format!("{AGENT_IP}/30"),
        &fd_ns,
        &format!("{FD_IP}/30"),
    )
    .expect("veth pair");
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
            let agent = dra::agent::start(cfg, opts, m.clone())
                .await
                .expect("agent");
            // Both connections open, then stay open past the watchdog exchanges.
            let deadline = Instant::now() + Duration::from_secs(40);
            let mut opened_at = None;
            let mut last = String::new();
            while Instant::now() < deadline {
                last = agent.status().await.expect("status");
                let both = peer_state(&last, "fdc") == Some("open")
                    && peer_state(&last, "fds") == Some("open");
                match (both, opened_at) {
                    (true, None) => opened_at = Some(Instant::now()),
                    (false, Some(_)) => panic!("a connection left open:\n{last}"),
                    (true, Some(t)) if t.elapsed() > OBSERVE => break,
                    _ => {}
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
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
