//! Scripted peers: `dra-loadgen` driven one message at a time, for tests and tools that
//! need exact control (a given request, crafted bytes, a DWR now, a crash) rather than a
//! rate scenario. The same [`PeerConnection`] state machine as the scenario modes does
//! CER/CEA, DWR/DWA and DPR/DPA.
//!
//! - [`ScriptedPeer`]: one driven connection. [`ScriptedPeer::request`] sends an
//!   application request (fresh Hop-by-Hop id) and waits for its answer;
//!   [`ScriptedPeer::send_raw`] sends a message as given; [`ScriptedPeer::send_bytes`]
//!   writes bytes as given, in one write (several messages coalesced into one segment,
//!   or a message cut across writes).
//! - [`ScriptedServer`]: accepts connections and answers every application request with
//!   a [`Handler`] (default: 2001 with its own Origin-Host, so a test sees who served
//!   what).
//! - [`Tap`]: every message a scripted peer wrote or read, for pcap/tshark checks.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::diameter::peer::{
    ConnectionOptions, DisconnectCause, Handled, PeerConfig, PeerConnection, PeerEvent,
    StaticPeerDirectory,
};
use crate::diameter::{Avp, Framer, Message, answer_for, avp_code, decode, result_code};
use crate::routing::PeerId;
use dra_common::wire::app;

/// Messages seen by a scripted peer: (written by it?, bytes).
pub type Tap = Arc<Mutex<Vec<(bool, Vec<u8>)>>>;

/// Answers an application request (or not).
pub type Handler = Arc<dyn Fn(&Message) -> Option<Message> + Send + Sync>;

/// A peer identity advertising `apps` as Auth-Application-Ids, at `address`.
pub fn scripted_config(host: &str, realm: &str, apps: &[u32], address: IpAddr) -> PeerConfig {
    let mut c = PeerConfig::new(host, realm, vec![address]);
    c.product_name = "dra-loadgen".to_owned();
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
    Bytes(Vec<u8>, oneshot::Sender<()>),
    Disconnect,
}

/// One scripted peer connection (cheap to clone: a handle to its task).
#[derive(Clone)]
pub struct ScriptedPeer {
    cmd: mpsc::Sender<Cmd>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

static E2E: AtomicU32 = AtomicU32::new(1);

/// A fresh End-to-End id for requests built by hand.
pub fn next_e2e() -> u32 {
    E2E.fetch_add(1, Ordering::Relaxed)
}

impl ScriptedPeer {
    /// Connects to `addr` as an initiator and waits for the CEA. `Err(result_code)` if
    /// the CER was refused (0 if the connection died first).
    pub async fn connect(
        addr: SocketAddr,
        cfg: PeerConfig,
        remote_host: &str,
        tap: Option<Tap>,
    ) -> Result<ScriptedPeer, u32> {
        Self::connect_from(None, addr, cfg, remote_host, tap).await
    }

    /// As [`ScriptedPeer::connect`], from local address `bind` (port chosen by the
    /// system) when given.
    pub async fn connect_from(
        bind: Option<IpAddr>,
        addr: SocketAddr,
        cfg: PeerConfig,
        remote_host: &str,
        tap: Option<Tap>,
    ) -> Result<ScriptedPeer, u32> {
        let stream = connect_stream(bind, addr).await.map_err(|_| 0u32)?;
        let pc = PeerConnection::initiator(
            Arc::new(cfg),
            directory(remote_host),
            addr.ip(),
            ConnectionOptions::new(u64::from(next_e2e()), 1_700_000_000),
        )
        .map_err(|_| 0u32)?;
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

    /// Writes `bytes` exactly as given, in one write, and returns once they were handed
    /// to the socket (false if the connection is gone). Answers to requests sent this way
    /// are read and dropped.
    pub async fn send_bytes(&self, bytes: Vec<u8>) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.cmd.send(Cmd::Bytes(bytes, tx)).await.is_err() {
            return false;
        }
        rx.await.is_ok()
    }

    /// Graceful close: DPR.
    pub async fn disconnect(&self) {
        let _ = self.cmd.send(Cmd::Disconnect).await;
    }

    /// Ends the connection at once, without DPR (a crash as the other side sees it).
    pub fn abort(&self) {
        self.task.abort();
    }
}

async fn connect_stream(bind: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let Some(ip) = bind else {
        return TcpStream::connect(addr).await;
    };
    let sock = if ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    sock.bind(SocketAddr::new(ip, 0))?;
    sock.connect(addr).await
}

fn spawn_driver(
    stream: TcpStream,
    pc: PeerConnection,
    handler: Option<Handler>,
    tap: Option<Tap>,
    opened: Option<oneshot::Sender<Result<(), u32>>>,
) -> ScriptedPeer {
    let (tx, rx) = mpsc::channel(1024);
    let task = tokio::spawn(drive(stream, pc, handler, tap, opened, rx));
    ScriptedPeer {
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
                Some(Cmd::Bytes(b, done)) => {
                    // What is queued goes first; then these bytes in one write.
                    if !out.is_empty() {
                        if wr.write_all(&out).await.is_err() {
                            break;
                        }
                        out.clear();
                    }
                    record(true, &b);
                    if wr.write_all(&b).await.is_err() {
                        break;
                    }
                    let _ = done.send(());
                }
                Some(Cmd::Disconnect) => pc.start_disconnect(start.elapsed(), DisconnectCause::Rebooting),
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
}

/// Counters of a [`ScriptedServer`].
#[derive(Default)]
pub struct ScriptStats {
    /// Application requests answered.
    pub requests: AtomicU64,
    /// Arrival time of every application request.
    pub arrivals: Mutex<Vec<Instant>>,
    /// Requests seen with the T flag.
    pub retransmits: AtomicU64,
}

/// A simulated PCRF/OCS.
pub struct ScriptedServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its Origin-Host.
    pub host: String,
    /// Counters.
    pub stats: Arc<ScriptStats>,
    conns: Arc<Mutex<Vec<ScriptedPeer>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedServer {
    /// Listens on `listen` (port 0: a free port), accepts the peer `dra_host` and
    /// answers every application request 2001 as `cfg.origin_host`.
    pub async fn start(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
    ) -> std::io::Result<ScriptedServer> {
        let host = cfg.origin_host.clone();
        let realm = cfg.origin_realm.clone();
        let stats = Arc::new(ScriptStats::default());
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
        Self::with_handler(listen, cfg, dra_host, tap, handler, stats).await
    }

    /// As [`ScriptedServer::start`] with a custom handler (which does its own counting).
    pub async fn with_handler(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
        handler: Handler,
        stats: Arc<ScriptStats>,
    ) -> std::io::Result<ScriptedServer> {
        let lst = TcpListener::bind(listen).await?;
        let addr = lst.local_addr()?;
        let host = cfg.origin_host.clone();
        let cfg = Arc::new(cfg);
        let dir = directory(dra_host);
        let conns: Arc<Mutex<Vec<ScriptedPeer>>> = Arc::default();
        let c2 = conns.clone();
        let task = tokio::spawn(async move {
            let mut seed = 1u64;
            while let Ok((s, remote)) = lst.accept().await {
                seed += 1;
                let Ok(pc) = PeerConnection::responder(
                    cfg.clone(),
                    dir.clone(),
                    remote.ip(),
                    ConnectionOptions::new(seed, 1_700_000_000),
                ) else {
                    continue;
                };
                let p = spawn_driver(s, pc, Some(handler.clone()), tap.clone(), None);
                c2.lock().expect("conns").push(p);
            }
        });
        Ok(ScriptedServer {
            addr,
            host,
            stats,
            conns,
            task,
        })
    }

    /// The most recent connection (e.g. to send a DWR to the DRA).
    pub fn last_conn(&self) -> Option<ScriptedPeer> {
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

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// CC-Request-Type values (RFC 4006 §8.3).
pub mod cc {
    /// INITIAL_REQUEST.
    pub const INITIAL: u32 = 1;
    /// UPDATE_REQUEST.
    pub const UPDATE: u32 = 2;
    /// TERMINATION_REQUEST.
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
    if app_id == app::GY {
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

