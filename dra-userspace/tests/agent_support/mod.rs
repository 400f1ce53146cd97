//! A small Diameter simulator over real TCP for the `agent_*` tests: PGW-like clients
//! and PCRF/OCS-like servers speaking through `dra::diameter::peer::PeerConnection`
//! (CER/CEA, DWR/DWA, DPR/DPA) — reusable as the core of a load generator.
//!
//! - [`SimPeer`]: one driven connection. `request()` sends an application request
//!   (fresh Hop-by-Hop id) and waits for its answer; `send_raw()` sends bytes as given.
//! - [`SimServer`]: accepts connections and answers every application request with a
//!   handler (default: 2001 with its own Origin-Host, so tests see who served what).
//! - [`Tap`]: every message a simulator wrote or read, for pcap/tshark checks.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dra::diameter::peer::{
    ConnectionOptions, Handled, PeerConfig, PeerConnection, PeerEvent, StaticPeerDirectory,
};
use dra::diameter::{Avp, Framer, Message, answer_for, avp_code, decode, result_code};
use dra::routing::PeerId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// Messages seen by a simulator: (written by the simulator?, bytes).
pub type Tap = Arc<Mutex<Vec<(bool, Vec<u8>)>>>;

/// Answers an application request (or not).
pub type Handler = Arc<dyn Fn(&Message) -> Option<Message> + Send + Sync>;

pub const LOCALHOST: &str = "127.0.0.1";

/// A simulator's own identity (advertises `apps` as Auth-Application-Ids).
pub fn sim_config(host: &str, realm: &str, apps: &[u32]) -> PeerConfig {
    let mut c = PeerConfig::new(host, realm, vec![LOCALHOST.parse().expect("ip")]);
    c.product_name = "dra-agent-sim".to_owned();
    c.auth_application_ids = apps.to_vec();
    c
}

/// A directory that accepts `host` from anywhere.
fn directory(host: &str) -> Arc<StaticPeerDirectory> {
    Arc::new(StaticPeerDirectory::new().with(
        PeerId(0),
        host,
        [
            "0.0.0.0/0".parse().expect("net"),
            "::/0".parse().expect("net"),
        ],
    ))
}

enum Cmd {
    Request(Message, oneshot::Sender<Message>),
    Raw(Message),
    Disconnect,
}

/// One simulated peer connection.
#[derive(Clone)]
pub struct SimPeer {
    cmd: mpsc::Sender<Cmd>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

static E2E: AtomicU32 = AtomicU32::new(1);

/// A fresh End-to-End id for requests built by tests.
pub fn next_e2e() -> u32 {
    E2E.fetch_add(1, Ordering::Relaxed)
}

impl SimPeer {
    /// Connects to `addr` as an initiator and waits for the CEA. `Err(result_code)` if
    /// the CER was refused (0 if the connection died first).
    pub async fn connect(
        addr: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
    ) -> Result<SimPeer, u32> {
        let stream = TcpStream::connect(addr).await.map_err(|_| 0u32)?;
        let pc = PeerConnection::initiator(
            Arc::new(cfg),
            directory(dra_host),
            addr.ip(),
            ConnectionOptions::new(u64::from(next_e2e()), 1_700_000_000),
        )
        .expect("config");
        let (tx, rx) = oneshot::channel();
        let peer = spawn_driver(stream, pc, None, tap, Some(tx));
        match rx.await {
            Ok(Ok(())) => Ok(peer),
            Ok(Err(rc)) => Err(rc),
            Err(_) => Err(0),
        }
    }

    /// Sends `req` (its Hop-by-Hop id is replaced) and waits for the answer; `None` if
    /// the connection closed first.
    pub async fn request(&self, req: Message) -> Option<Message> {
        let (tx, rx) = oneshot::channel();
        self.cmd.send(Cmd::Request(req, tx)).await.ok()?;
        rx.await.ok()
    }

    /// Sends a message exactly as given.
    pub async fn send_raw(&self, m: Message) {
        let _ = self.cmd.send(Cmd::Raw(m)).await;
    }

    /// Graceful close: DPR.
    pub async fn disconnect(&self) {
        let _ = self.cmd.send(Cmd::Disconnect).await;
    }
}

fn spawn_driver(
    stream: TcpStream,
    pc: PeerConnection,
    handler: Option<Handler>,
    tap: Option<Tap>,
    opened: Option<oneshot::Sender<Result<(), u32>>>,
) -> SimPeer {
    let (tx, rx) = mpsc::channel(1024);
    let task = tokio::spawn(drive(stream, pc, handler, tap, opened, rx));
    SimPeer {
        cmd: tx,
        task: Arc::new(task),
    }
}

async fn drive(
    stream: TcpStream,
    mut pc: PeerConnection,
    handler: Option<Handler>,
    tap: Option<Tap>,
    mut opened: Option<oneshot::Sender<Result<(), u32>>>,
    mut rx: mpsc::Receiver<Cmd>,
) {
    let _ = stream.set_nodelay(true);
    let start = Instant::now();
    let (mut rd, mut wr) = stream.into_split();
    let mut framer = Framer::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: HashMap<u32, oneshot::Sender<Message>> = HashMap::new();
    let mut out: Vec<u8> = Vec::new();
    let record = |sent: bool, bytes: &[u8]| {
        if let Some(t) = &tap {
            t.lock().expect("tap").push((sent, bytes.to_vec()));
        }
    };
    pc.handle_connected(start.elapsed());
    let mut closed = false;
    let mut rx_open = true;
    loop {
        // Outputs of the state machine.
        while let Some(m) = pc.poll_transmit() {
            let b = m.encode();
            record(true, &b);
            out.extend_from_slice(&b);
        }
        while let Some(e) = pc.poll_event() {
            match e {
                PeerEvent::Opened { .. } => {
                    if let Some(o) = opened.take() {
                        let _ = o.send(Ok(()));
                    }
                }
                PeerEvent::Rejected { result_code, .. } => {
                    if let Some(o) = opened.take() {
                        let _ = o.send(Err(result_code));
                    }
                }
                PeerEvent::Closed { .. } => closed = true,
                _ => {}
            }
        }
        if !out.is_empty() {
            if wr.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        if closed {
            break;
        }
        let deadline = pc
            .poll_timeout()
            .map_or(start + Duration::from_secs(3600), |t| start + t);
        tokio::select! {
            c = rx.recv(), if rx_open => match c {
                Some(Cmd::Request(mut m, tx)) => {
                    m.hop_by_hop = pc.next_hop_by_hop();
                    pending.insert(m.hop_by_hop, tx);
                    let b = m.encode();
                    record(true, &b);
                    out.extend_from_slice(&b);
                }
                Some(Cmd::Raw(m)) => {
                    let b = m.encode();
                    record(true, &b);
                    out.extend_from_slice(&b);
                }
                Some(Cmd::Disconnect) => pc.start_disconnect(start.elapsed(), dra::diameter::peer::DisconnectCause::Rebooting),
                None => rx_open = false,
            },
            r = rd.read(&mut buf) => {
                let n = match r { Ok(0) | Err(_) => { pc.handle_closed(start.elapsed()); continue; } Ok(n) => n };
                framer.push(&buf[..n]);
                while let Ok(Some(frame)) = framer.next_message() {
                    record(false, &frame);
                    let Ok(msg) = decode(&frame) else { continue };
                    let now = start.elapsed();
                    if !msg.is_request() && let Some(tx) = pending.remove(&msg.hop_by_hop) {
                        pc.handle_traffic(now);
                        let _ = tx.send(msg);
                        continue;
                    }
                    match pc.handle_message(now, msg) {
                        Handled::Consumed => {}
                        Handled::CerReceived { .. } => pc.accept_cer(now),
                        Handled::Application(m) => {
                            if m.is_request() && let Some(h) = &handler && let Some(a) = h(&m) {
                                let b = a.encode();
                                record(true, &b);
                                out.extend_from_slice(&b);
                            }
                        }
                    }
                }
            },
            _ = tokio::time::sleep_until(deadline.into()) => pc.handle_timeout(start.elapsed()),
        }
    }
    if opened.is_some() {
        // Closed before the CEA.
    }
}

/// Counters of a [`SimServer`].
#[derive(Default)]
pub struct ServerStats {
    /// Application requests answered.
    pub requests: AtomicU64,
    /// Arrival time of every application request.
    pub arrivals: Mutex<Vec<Instant>>,
    /// Requests seen with the T flag.
    pub retransmits: AtomicU64,
}

/// A simulated PCRF/OCS.
pub struct SimServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its Origin-Host.
    pub host: String,
    /// Counters.
    pub stats: Arc<ServerStats>,
    conns: Arc<Mutex<Vec<SimPeer>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SimServer {
    /// Listens on 127.0.0.1 (free port), accepts the DRA `dra_host` and answers every
    /// application request 2001 as `cfg.origin_host`.
    pub async fn start(cfg: PeerConfig, dra_host: &str, tap: Option<Tap>) -> SimServer {
        let host = cfg.origin_host.clone();
        let realm = cfg.origin_realm.clone();
        let stats = Arc::new(ServerStats::default());
        let st = stats.clone();
        let h2 = host.clone();
        let handler: Handler = Arc::new(move |req: &Message| {
            st.requests.fetch_add(1, Ordering::Relaxed);
            st.arrivals.lock().expect("arrivals").push(Instant::now());
            if req.is_retransmit() {
                st.retransmits.fetch_add(1, Ordering::Relaxed);
            }
            Some(answer_for(
                req,
                result_code::SUCCESS,
                &h2,
                &realm,
                None,
                None,
            ))
        });
        Self::with_handler(cfg, dra_host, tap, handler, stats).await
    }

    /// As [`SimServer::start`] with a custom handler (which does its own counting).
    pub async fn with_handler(
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
        handler: Handler,
        stats: Arc<ServerStats>,
    ) -> SimServer {
        let lst = TcpListener::bind((LOCALHOST, 0)).await.expect("bind");
        let addr = lst.local_addr().expect("addr");
        let host = cfg.origin_host.clone();
        let cfg = Arc::new(cfg);
        let dir = directory(dra_host);
        let conns: Arc<Mutex<Vec<SimPeer>>> = Arc::default();
        let c2 = conns.clone();
        let task = tokio::spawn(async move {
            let mut seed = 1u64;
            while let Ok((s, remote)) = lst.accept().await {
                seed += 1;
                let pc = PeerConnection::responder(
                    cfg.clone(),
                    dir.clone(),
                    remote.ip(),
                    ConnectionOptions::new(seed, 1_700_000_000),
                )
                .expect("config");
                let p = spawn_driver(s, pc, Some(handler.clone()), tap.clone(), None);
                c2.lock().expect("conns").push(p);
            }
        });
        SimServer {
            addr,
            host,
            stats,
            conns,
            task,
        }
    }

    /// The most recent connection (e.g. to send a DWR to the DRA).
    pub fn last_conn(&self) -> Option<SimPeer> {
        self.conns.lock().expect("conns").last().cloned()
    }

    /// Number of connections accepted so far.
    pub fn connections(&self) -> usize {
        self.conns.lock().expect("conns").len()
    }

    /// Kills the server: stops accepting and drops every connection without DPR (a
    /// crash as the DRA sees it: the transport closes).
    pub fn kill(&self) {
        self.task.abort();
        for c in self.conns.lock().expect("conns").drain(..) {
            c.task.abort();
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// CC-Request-Type values (RFC 4006 §8.3).
pub mod cc {
    pub const INITIAL: u32 = 1;
    pub const UPDATE: u32 = 2;
    pub const TERMINATION: u32 = 3;
    /// EVENT_REQUEST: one-shot, no session binding.
    pub const EVENT_LIKE: u32 = 4;
}

/// A CCR (RFC 4006 §3.1) from `origin_host` for `app` to `dest_realm`.
pub fn ccr(
    session: &str,
    app_id: u32,
    origin_host: &str,
    origin_realm: &str,
    dest_realm: &str,
    request_type: u32,
    number: u32,
) -> Message {
    let m = Message::request(272, app_id, 0, next_e2e())
        .proxiable()
        .with(Avp::utf8(avp_code::SESSION_ID, session).mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_HOST, origin_host).mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_REALM, origin_realm).mandatory())
        .with(Avp::utf8(avp_code::DESTINATION_REALM, dest_realm).mandatory())
        .with(Avp::u32(avp_code::AUTH_APPLICATION_ID, app_id).mandatory())
        .with(Avp::enumerated(avp_code::CC_REQUEST_TYPE, request_type as i32).mandatory())
        .with(Avp::u32(avp_code::CC_REQUEST_NUMBER, number).mandatory());
    if app_id == GY {
        // RFC 4006 §3.1: Service-Context-Id is required in a CCR (3GPP TS 32.299 Gy).
        m.with(Avp::utf8(461, "32251@3gpp.org").mandatory())
    } else {
        m
    }
}

/// A DWR (RFC 6733 §5.5.1).
pub fn dwr(origin_host: &str, origin_realm: &str) -> Message {
    Message::request(280, 0, 0, next_e2e())
        .with(Avp::utf8(avp_code::ORIGIN_HOST, origin_host).mandatory())
        .with(Avp::utf8(avp_code::ORIGIN_REALM, origin_realm).mandatory())
}

/// Kill-on-drop temp path.
pub struct TempPath(pub std::path::PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Just an address helper.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

pub const DRA_HOST: &str = "dra.test.example";
pub const REALM: &str = "test.example";
pub const PCRF_REALM: &str = "pcrf.test.example";
pub const OCS_REALM: &str = "ocs.test.example";
pub const GX: u32 = 16_777_238;
pub const GY: u32 = 4;

/// The agent's config for the tests: listener on 127.0.0.1 (free port), clients
/// `pgw1`, `pgw2`, servers of group `pcrf` (Gx, realm [`PCRF_REALM`]) and `ocs` (Gy,
/// realm [`OCS_REALM`]) at the given addresses; `extra` is appended verbatim.
pub fn agent_toml(
    pcrfs: &[SocketAddr],
    ocss: &[SocketAddr],
    control: Option<&std::path::Path>,
    extra: &str,
) -> String {
    // The config refuses port 0: take a free port (released just before the agent binds it).
    let port = std::net::TcpListener::bind((LOCALHOST, 0))
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let mut t = format!(
        "[global]\norigin_host = \"{DRA_HOST}\"\norigin_realm = \"{REALM}\"\ndiameter_ports = [{port}]\n\n\
         [[listener]]\naddress = \"127.0.0.1:{port}\"\ntransport = \"tcp\"\n\n"
    );
    if let Some(p) = control {
        t.push_str(&format!("[control]\nsocket = \"{}\"\n\n", p.display()));
    }
    for c in ["pgw1", "pgw2"] {
        t.push_str(&format!(
            "[[peer]]\nname = \"{c}\"\norigin_host = \"{c}.{REALM}\"\nrealm = \"{REALM}\"\naddresses = []\nrole = \"client\"\n\n"
        ));
    }
    for (group, realm, list) in [("pcrf", PCRF_REALM, pcrfs), ("ocs", OCS_REALM, ocss)] {
        for (i, a) in list.iter().enumerate() {
            let n = i + 1;
            t.push_str(&format!(
                "[[peer]]\nname = \"{group}{n}\"\norigin_host = \"{group}{n}.{realm}\"\nrealm = \"{realm}\"\naddresses = []\nrole = \"server\"\ngroup = \"{group}\"\nconnect = \"{a}\"\n\n"
            ));
        }
    }
    for (group, realm, app, list) in [
        ("pcrf", PCRF_REALM, "gx", pcrfs),
        ("ocs", OCS_REALM, "gy", ocss),
    ] {
        if list.is_empty() {
            continue;
        }
        t.push_str(&format!(
            "[[peer_group]]\nname = \"{group}\"\nanswer_timeout = \"2s\"\ndelay_tolerance = \"200ms\"\nqueue_limit = 1000\nselection = \"round_robin\"\n\n\
             [[route]]\nrealm = \"{realm}\"\napplication = \"{app}\"\ngroup = \"{group}\"\n\n"
        ));
    }
    t.push_str(extra);
    t
}

/// Starts PCRF and OCS simulators and the agent; waits until every server is open.
pub struct Lab {
    pub agent: dra::agent::AgentHandle,
    pub pcrfs: Vec<SimServer>,
    pub ocss: Vec<SimServer>,
    pub metrics: dra::metrics::Metrics,
}

impl Lab {
    pub async fn start(
        n_pcrf: usize,
        n_ocs: usize,
        control: Option<&std::path::Path>,
        extra: &str,
        tap: Option<Tap>,
    ) -> Lab {
        let mut pcrfs = Vec::new();
        for i in 1..=n_pcrf {
            pcrfs.push(
                SimServer::start(
                    sim_config(&format!("pcrf{i}.{PCRF_REALM}"), PCRF_REALM, &[GX]),
                    DRA_HOST,
                    tap.clone(),
                )
                .await,
            );
        }
        let mut ocss = Vec::new();
        for i in 1..=n_ocs {
            ocss.push(
                SimServer::start(
                    sim_config(&format!("ocs{i}.{OCS_REALM}"), OCS_REALM, &[GY]),
                    DRA_HOST,
                    tap.clone(),
                )
                .await,
            );
        }
        let p: Vec<SocketAddr> = pcrfs.iter().map(|s| s.addr).collect();
        let o: Vec<SocketAddr> = ocss.iter().map(|s| s.addr).collect();
        let text = agent_toml(&p, &o, control, extra);
        let cfg = match dra::config::parse(&text, "test.toml") {
            Ok(c) => c,
            Err(e) => panic!("config: {e}\n{text}"),
        };
        let metrics = dra::metrics::Metrics::new();
        let opts = dra::agent::AgentOptions {
            tc: Some(Duration::from_millis(200)),
            ..Default::default()
        };
        let agent = dra::agent::start(cfg, opts, metrics.clone())
            .await
            .expect("agent");
        let lab = Lab {
            agent,
            pcrfs,
            ocss,
            metrics,
        };
        // Wait until the agent reports every server open.
        for _ in 0..200 {
            let s = lab.agent.status().await.expect("status");
            let open = s
                .lines()
                .filter(|l| l.contains(" server ") && l.contains(" open "))
                .count();
            if open == n_pcrf + n_ocs {
                return lab;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "servers never opened:\n{}",
            lab.agent.status().await.unwrap_or_default()
        );
    }

    pub fn addr(&self) -> SocketAddr {
        self.agent.listen_addrs()[0]
    }

    /// A PGW client `pgwN.test.example` (Gx + Gy).
    pub async fn pgw(&self, name: &str, tap: Option<Tap>) -> SimPeer {
        SimPeer::connect(
            self.addr(),
            sim_config(&format!("{name}.{REALM}"), REALM, &[GX, GY]),
            DRA_HOST,
            tap,
        )
        .await
        .expect("CEA success")
    }
}
