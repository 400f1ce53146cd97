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
//! - [`ScriptedServer::sink`]: the same, but it never answers application requests (a
//!   peer that is stuck, or a counting sink for the fast-path tests).
//! - [`ArrivalLog`]: every application request a server received: when, its class as
//!   the kernel fast path classifies it ([`dra_common::wire::classify`]), whether the
//!   fast path marked it, its Hop-by-Hop id and on which accepted connection.
//! - [`paced`]: sends streams of requests at fixed intervals over a scripted peer,
//!   `batch` messages per write, and logs when each was sent.
//! - [`Tap`]: every message a scripted peer wrote or read, for pcap/tshark checks.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dra::transport::Connection;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::conn::{Flow, Link, Mode, drive};
use dra::diameter::peer::{
    ConnectionOptions, DisconnectCause, PeerConfig, PeerConnection, PeerEvent, Role,
    StaticPeerDirectory,
};
use dra::diameter::{Avp, FramingError, Message, answer_for, avp_code, result_code};
use dra::routing::PeerId;
use dra_common::wire::{self, MsgClass, app};

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

/// One application request as it arrived at a [`ScriptedServer`].
#[derive(Clone, Debug)]
pub struct Arrival {
    /// When the read that completed it returned.
    pub at: Instant,
    /// Its class, by the fast path's own scanner.
    pub class: MsgClass,
    /// The fast path's rate-limit mark was set.
    pub marked: bool,
    /// Its Hop-by-Hop id.
    pub hop_by_hop: u32,
    /// Index of the connection it came on, in the order the server accepted them.
    pub conn: usize,
}

/// Every application request (Application-Id not 0, so no CER, DWR or DPR: RFC 6733
/// §2.4) a [`ScriptedServer`] received, in arrival order. Requests are logged from the
/// raw bytes, before decoding, so also one the server could not decode.
///
/// A log made with [`ArrivalLog::fast_path`] stands where the agent would: it applies
/// the XDP program's out-of-band marks ([`dra::oob`]) the way the agent's readers do,
/// so `marked` is the fast path's verdict whatever the segment cuts were.
#[derive(Clone, Default)]
pub struct ArrivalLog(Arc<Mutex<Vec<Arrival>>>, Option<Arc<dra::oob::OobInbox>>);

impl ArrivalLog {
    /// A log that also applies the fast path's out-of-band marks from `inbox`.
    pub fn fast_path(inbox: Arc<dra::oob::OobInbox>) -> ArrivalLog {
        ArrivalLog(Arc::default(), Some(inbox))
    }

    /// A copy of the log so far.
    pub fn snapshot(&self) -> Vec<Arrival> {
        self.0.lock().expect("arrivals").clone()
    }

    /// Requests logged so far.
    pub fn len(&self) -> usize {
        self.0.lock().expect("arrivals").len()
    }

    /// Nothing logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until `n` requests arrived or `timeout` passed; returns the count.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> usize {
        let end = Instant::now() + timeout;
        loop {
            let c = self.len();
            if c >= n || Instant::now() >= end {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// As [`ArrivalLog::wait_for`], blocking this thread (for callers outside the
    /// runtime that drives the server; never call it on that runtime).
    pub fn wait_for_blocking(&self, n: usize, timeout: Duration) -> usize {
        let end = Instant::now() + timeout;
        loop {
            let c = self.len();
            if c >= n || Instant::now() >= end {
                return c;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Logs `frame` (one whole message of flow `key`) if it is an application request.
    fn record(&self, frame: &[u8], at: Instant, conn: usize, key: &dra_common::maps::FlowKey) {
        if frame.len() < 16 {
            return;
        }
        let mut frame = frame.to_vec();
        if let Some(o) = &self.1 {
            o.drain();
            o.apply(key, &mut frame);
        }
        let Ok(c) = wire::classify(&frame.as_slice(), 0) else {
            return;
        };
        // RFC 6733 §2.4: Application-Id 0 is the base protocol (CER, DWR, DPR).
        if !c.header.is_request() || c.header.application_id == app::COMMON {
            return;
        }
        self.0.lock().expect("arrivals").push(Arrival {
            at,
            class: c.class,
            marked: c.header.is_marked(),
            hop_by_hop: u32::from_be_bytes([frame[12], frame[13], frame[14], frame[15]]),
            conn,
        });
    }
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
        Self::connect_with(bind, addr, cfg, remote_host, tap, None).await
    }

    /// As [`ScriptedPeer::connect_from`], over a socket with the TCP congestion control
    /// `congestion` ([`super::connect_with`]); 0 also if it cannot be set.
    pub async fn connect_with(
        bind: Option<IpAddr>,
        addr: SocketAddr,
        cfg: PeerConfig,
        remote_host: &str,
        tap: Option<Tap>,
        congestion: Option<&str>,
    ) -> Result<ScriptedPeer, u32> {
        let stream = super::connect_with(bind, addr, congestion)
            .await
            .and_then(Connection::tcp)
            .map_err(|_| 0u32)?;
        Self::open(stream, cfg, remote_host, tap).await
    }

    /// As [`ScriptedPeer::connect`], over a connection already made (TLS, e.g.
    /// [`super::dial`]): CER/CEA on it.
    pub async fn open(
        stream: Connection,
        cfg: PeerConfig,
        remote_host: &str,
        tap: Option<Tap>,
    ) -> Result<ScriptedPeer, u32> {
        let pc = PeerConnection::new(
            Role::Initiator,
            Arc::new(cfg),
            directory(remote_host),
            stream.remote.ip(),
            ConnectionOptions::new(u64::from(next_e2e()), 1_700_000_000),
        )
        .map_err(|_| 0u32)?;
        let (tx, rx) = oneshot::channel();
        let peer = spawn_driver(stream, pc, None, tap, Some(tx), None);
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

fn spawn_driver(
    stream: Connection,
    pc: PeerConnection,
    handler: Option<Handler>,
    tap: Option<Tap>,
    opened: Option<oneshot::Sender<Result<(), u32>>>,
    arrivals: Option<(ArrivalLog, usize)>,
) -> ScriptedPeer {
    let (tx, rx) = mpsc::channel(1024);
    let key = dra::oob::flow_key(stream.remote, stream.local);
    let mut link = Link::direct(stream, pc, Instant::now(), 64 * 1024);
    let mut conn = Conn {
        rx: Some(rx),
        handler,
        tap,
        opened,
        arrivals,
        key,
        pending: HashMap::new(),
    };
    let task = tokio::spawn(async move {
        drive(&mut link, &mut conn).await;
    });
    ScriptedPeer {
        cmd: tx,
        task: Arc::new(task),
    }
}

/// One scripted connection: commands from its [`ScriptedPeer`] handles, answers to
/// their requests back, application requests to the handler, everything to the tap.
struct Conn {
    /// Commands; `None` once every handle is gone.
    rx: Option<mpsc::Receiver<Cmd>>,
    handler: Option<Handler>,
    tap: Option<Tap>,
    /// Told once whether the capabilities exchange succeeded.
    opened: Option<oneshot::Sender<Result<(), u32>>>,
    /// Where application requests are logged, and this connection's index there.
    arrivals: Option<(ArrivalLog, usize)>,
    /// The flow, for the fast path's out-of-band marks.
    key: dra_common::maps::FlowKey,
    /// Hop-by-Hop → who waits for the answer.
    pending: HashMap<u32, oneshot::Sender<Message>>,
}

impl Conn {
    fn record(&self, sent: bool, bytes: &[u8]) {
        if let Some(t) = &self.tap {
            t.lock().expect("tap").push((sent, bytes.to_vec()));
        }
    }

    /// Queues `m` for writing, in the tap too.
    fn send(&self, m: &Message, out: &mut Vec<u8>) {
        let b = m.encode();
        self.record(true, &b);
        out.extend_from_slice(&b);
    }
}

impl Mode for Conn {
    type Input = Option<Cmd>;

    async fn input(&mut self) -> Option<Cmd> {
        match &mut self.rx {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }

    async fn on_input(&mut self, cmd: Option<Cmd>, link: &mut Link) -> Flow {
        match cmd {
            Some(Cmd::Request(mut m, tx)) => {
                m.hop_by_hop = link.pc.next_hop_by_hop();
                self.pending.insert(m.hop_by_hop, tx);
                self.send(&m, &mut link.out);
            }
            Some(Cmd::Raw(m)) => self.send(&m, &mut link.out),
            Some(Cmd::Bytes(b, done)) => {
                // What is queued goes first; then these bytes in one write.
                self.record(true, &b);
                if link.write_now(b).await.is_err() {
                    return Flow::End;
                }
                let _ = done.send(());
            }
            Some(Cmd::Disconnect) => {
                let now = link.now();
                link.pc.start_disconnect(now, DisconnectCause::Rebooting);
            }
            None => self.rx = None,
        }
        Flow::Continue
    }

    fn transmit(&mut self, msg: &Message, out: &mut Vec<u8>) {
        self.send(msg, out);
    }

    fn on_event(&mut self, event: PeerEvent, _link: &mut Link) {
        let result = match event {
            PeerEvent::Opened { .. } => Ok(()),
            PeerEvent::Rejected { result_code, .. } => Err(result_code),
            _ => return,
        };
        if let Some(o) = self.opened.take() {
            let _ = o.send(result);
        }
    }

    fn on_frame(&mut self, frame: &[u8], at: Instant, _link: &mut Link) -> bool {
        self.record(false, frame);
        if let Some((log, conn)) = &self.arrivals {
            log.record(frame, at, *conn, &self.key);
        }
        false
    }

    fn on_message(&mut self, msg: Message, link: &mut Link) -> Option<Message> {
        if !msg.is_request()
            && let Some(tx) = self.pending.remove(&msg.hop_by_hop)
        {
            let now = link.now();
            link.pc.handle_traffic(now);
            let _ = tx.send(msg);
            return None;
        }
        Some(msg)
    }

    fn on_application(&mut self, m: Message, link: &mut Link) {
        if m.is_request()
            && let Some(h) = &self.handler
            && let Some(a) = h(&m)
        {
            self.send(&a, &mut link.out);
        }
    }

    fn on_framing_error(&mut self, _error: FramingError, _link: &mut Link) -> Flow {
        // Not Diameter: the rest is not read, the connection stays as it is.
        Flow::Continue
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
    /// Every application request received, on every connection.
    pub arrivals: ArrivalLog,
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
        Self::answering(listen, cfg, dra_host, tap, Duration::ZERO).await
    }

    /// As [`ScriptedServer::start`], but slow to open: each accepted connection is
    /// read only `delay` after its accept, so its CER is answered that late (a server
    /// still starting, or busy).
    pub async fn start_slow(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        delay: Duration,
    ) -> std::io::Result<ScriptedServer> {
        Self::answering(listen, cfg, dra_host, None, delay).await
    }

    /// [`ScriptedServer::start`], each connection read `open_delay` after its accept.
    async fn answering(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
        open_delay: Duration,
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
        let log = ArrivalLog::default();
        Self::serve(listen, cfg, dra_host, tap, handler, stats, log, open_delay).await
    }

    /// As [`ScriptedServer::start`], but application requests are never answered (only
    /// logged in [`ScriptedServer::arrivals`]); CER, DWR and DPR still are.
    pub async fn sink(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
    ) -> std::io::Result<ScriptedServer> {
        let silent: Handler = Arc::new(|_: &Message| None);
        let (stats, arrivals) = (Arc::default(), ArrivalLog::default());
        Self::with_handler(listen, cfg, dra_host, tap, silent, stats, arrivals).await
    }

    /// As [`ScriptedServer::sink`], logging into `arrivals` (e.g. an
    /// [`ArrivalLog::fast_path`] log).
    pub async fn sink_into(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
        arrivals: ArrivalLog,
    ) -> std::io::Result<ScriptedServer> {
        let silent: Handler = Arc::new(|_: &Message| None);
        Self::with_handler(listen, cfg, dra_host, tap, silent, Arc::default(), arrivals).await
    }

    /// As [`ScriptedServer::start`] with a custom handler (which does its own counting),
    /// logging application requests into `arrivals`.
    pub async fn with_handler(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
        handler: Handler,
        stats: Arc<ScriptStats>,
        arrivals: ArrivalLog,
    ) -> std::io::Result<ScriptedServer> {
        let none = Duration::ZERO;
        Self::serve(listen, cfg, dra_host, tap, handler, stats, arrivals, none).await
    }

    /// Listens and drives every accepted connection, each read `open_delay` after its
    /// accept.
    #[allow(clippy::too_many_arguments)]
    async fn serve(
        listen: SocketAddr,
        cfg: PeerConfig,
        dra_host: &str,
        tap: Option<Tap>,
        handler: Handler,
        stats: Arc<ScriptStats>,
        arrivals: ArrivalLog,
        open_delay: Duration,
    ) -> std::io::Result<ScriptedServer> {
        let lst = TcpListener::bind(listen).await?;
        let addr = lst.local_addr()?;
        let host = cfg.origin_host.clone();
        let cfg = Arc::new(cfg);
        let dir = directory(dra_host);
        let conns: Arc<Mutex<Vec<ScriptedPeer>>> = Arc::default();
        let c2 = conns.clone();
        let log = arrivals.clone();
        let task = tokio::spawn(async move {
            let mut index = 0usize;
            let mut seed = 1u64;
            while let Ok((s, _)) = lst.accept().await {
                if !open_delay.is_zero() {
                    tokio::time::sleep(open_delay).await;
                }
                let Ok(s) = Connection::tcp(s) else { continue };
                let remote = s.remote;
                seed += 1;
                let Ok(pc) = PeerConnection::new(
                    Role::Responder,
                    cfg.clone(),
                    dir.clone(),
                    remote.ip(),
                    ConnectionOptions::new(seed, 1_700_000_000),
                ) else {
                    continue;
                };
                let p = spawn_driver(
                    s,
                    pc,
                    Some(handler.clone()),
                    tap.clone(),
                    None,
                    Some((log.clone(), index)),
                );
                index += 1;
                c2.lock().expect("conns").push(p);
            }
        });
        Ok(ScriptedServer {
            addr,
            host,
            stats,
            arrivals,
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

/// A paced stream: every `every`, one message built by `make(n)`, where `n` counts the
/// messages of one [`paced`] run across all its streams, from 1.
pub struct Stream {
    /// Interval between two messages of this stream.
    pub every: Duration,
    /// Builds message `n` (its Hop-by-Hop id is replaced by `n`).
    pub make: Box<dyn Fn(u32) -> Message + Send + Sync>,
}

/// What a [`paced`] run sent.
#[derive(Clone, Debug)]
pub struct Sent {
    /// When the first message was built (the run's start if none was).
    pub first: Instant,
    /// When the last message was built (the run's start if none was).
    pub last: Instant,
    /// (when it was built, just before its write; its Hop-by-Hop id) per message, in
    /// sending order.
    pub log: Vec<(Instant, u32)>,
}

/// The connection of a [`paced`] run closed before everything was written.
#[derive(Debug, thiserror::Error)]
#[error("the connection closed after {sent} paced messages had been built")]
pub struct PacedClosed {
    /// Messages built (and logged) before the failed write.
    pub sent: usize,
}

/// Sends `streams` over `peer` for `duration`, `batch` messages per write (1: one
/// write per message). Each stream is due at the start and every `every` after;
/// when the sender wakes late it catches up at once, so the number of messages
/// depends only on `duration` and the intervals, and `first`/`last` are the build
/// times of the first and last message. Message `n` gets Hop-by-Hop id `n`. The
/// answers, if any, are read and dropped. A partial batch is written at the end.
pub async fn paced(
    peer: &ScriptedPeer,
    streams: Vec<Stream>,
    duration: Duration,
    batch: usize,
) -> Result<Sent, PacedClosed> {
    let batch = batch.max(1);
    let start = Instant::now();
    let mut next: Vec<Instant> = streams.iter().map(|_| start).collect();
    let mut n = 0u32;
    let mut log = Vec::new();
    let mut pending = Vec::new();
    let mut pending_n = 0;
    while start.elapsed() < duration {
        let now = Instant::now();
        for (i, st) in streams.iter().enumerate() {
            while next[i] <= now {
                n += 1;
                let mut m = (st.make)(n);
                m.hop_by_hop = n;
                let b = m.encode();
                log.push((Instant::now(), n));
                pending.extend_from_slice(&b);
                pending_n += 1;
                next[i] += st.every;
                if pending_n >= batch {
                    if !peer.send_bytes(std::mem::take(&mut pending)).await {
                        return Err(PacedClosed { sent: log.len() });
                    }
                    pending_n = 0;
                }
            }
        }
        let Some(wake) = next.iter().min() else { break };
        let d = wake.saturating_duration_since(Instant::now());
        if !d.is_zero() {
            tokio::time::sleep(d.min(Duration::from_millis(1))).await;
        }
    }
    if !pending.is_empty() && !peer.send_bytes(pending).await {
        return Err(PacedClosed { sent: log.len() });
    }
    let first = log.first().map_or(start, |l| l.0);
    let last = log.last().map_or(start, |l| l.0);
    Ok(Sent { first, last, log })
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
