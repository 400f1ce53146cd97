//! Server mode (a PCRF/OCS): answers CER, DWR (with its RFC 8583 Load), DPR and CCR with
//! CCA after a configured latency, within a configured capacity; optional Redis side
//! effects per session. Reports its Origin-Host in every answer.
//!
//! # Capacity and load
//!
//! At most `max_concurrent` CCRs are in service at once, and (when `max_rate` is set) at
//! most `max_rate` start service per second. Beyond that, [`Overload::Queue`] makes them
//! wait (latency grows; optional `max_queue` answers 3004 beyond it) and
//! [`Overload::Reject`] answers 3004 DIAMETER_TOO_BUSY at once.
//!
//! The Load-Value in every DWA is `65535 × C / (C + n)`, where `C` = `max_concurrent`
//! and `n` = CCRs in service plus queued: 65535 when idle, 32767 when exactly at
//! capacity, and falling further as the queue grows (higher = less loaded, RFC 8583
//! §7.3).
//!
//! With [`ServerConfig::load_in_answers`] (default on) every answer to an application
//! request (every CCA) carries the same Load AVP, computed when the answer is sent, so a
//! DRA sees the queue per answer and not only once per Tw of silence (RFC 8583 §5: a
//! reporting node may put Load in any answer).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dra::transport::Connection;
use dra_common::wire::{app, cmd};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conn::{Close, Flow, Link, Mode, drive};
use super::failover::{DuplicateCache, Seen};
use super::resp::{RespClient, RespError};
use super::{AllowList, loadgen_peer_config};
use dra::diameter::peer::{
    ConnectionOptions, PeerConfigError, PeerConnection, PeerEvent, Role, peer_load_avp,
};
use dra::diameter::{FramingError, Message, answer_for, result_code};
use dra::routing::SplitMix64;
pub use dra_report::server::ServerStats;

/// Service-time distribution of a CCR.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LatencyDist {
    /// Always this long.
    Fixed(Duration),
    /// Uniform between `min` and `max`.
    Uniform {
        /// Lowest.
        min: Duration,
        /// Highest.
        max: Duration,
    },
    /// Exponential with this mean.
    Exponential {
        /// Mean.
        mean: Duration,
    },
}

/// A latency distribution that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "latency {text:?}: expected fixed:<d>, uniform:<min>:<max> or exp:<mean>, durations \
     like 5ms, 1.5s, 200us"
)]
pub struct LatencyParseError {
    /// The text given.
    pub text: String,
}

/// Parses "5ms", "1.5s", "200us", "0".
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1e-3)
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v * mul))
}

impl FromStr for LatencyDist {
    type Err = LatencyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || LatencyParseError { text: s.to_owned() };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["fixed", d] => Ok(LatencyDist::Fixed(parse_duration(d).ok_or_else(err)?)),
            ["uniform", a, b] => {
                let (min, max) = (
                    parse_duration(a).ok_or_else(err)?,
                    parse_duration(b).ok_or_else(err)?,
                );
                if min > max {
                    return Err(err());
                }
                Ok(LatencyDist::Uniform { min, max })
            }
            ["exp", m] => Ok(LatencyDist::Exponential {
                mean: parse_duration(m).ok_or_else(err)?,
            }),
            _ => Err(err()),
        }
    }
}

impl LatencyDist {
    /// Whether every sample is zero (no service time at all).
    pub fn is_zero(&self) -> bool {
        match *self {
            LatencyDist::Fixed(d) => d.is_zero(),
            LatencyDist::Uniform { max, .. } => max.is_zero(),
            LatencyDist::Exponential { mean } => mean.is_zero(),
        }
    }

    /// One service time.
    pub fn sample(&self, rng: &mut SplitMix64) -> Duration {
        // Uniform in [0, 1) with 53 bits.
        let mut unit = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        match *self {
            LatencyDist::Fixed(d) => d,
            LatencyDist::Uniform { min, max } => min + (max - min).mul_f64(unit()),
            LatencyDist::Exponential { mean } => mean.mul_f64(-(1.0 - unit()).ln()),
        }
    }
}

/// What happens beyond capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Overload {
    /// Requests wait for a free slot: latency grows.
    Queue,
    /// Requests beyond capacity are answered 3004 DIAMETER_TOO_BUSY at once.
    Reject,
}

/// Server configuration.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where to listen (loopback in tests; port 0 picks a free port).
    pub listen: SocketAddr,
    /// Our Origin-Host: in every CEA, DWA and CCA.
    pub origin_host: String,
    /// Our Origin-Realm.
    pub origin_realm: String,
    /// Origin-Hosts allowed to connect; empty = any.
    pub allowed_hosts: Vec<String>,
    /// CCR service time.
    pub latency: LatencyDist,
    /// CCRs in service at once.
    pub max_concurrent: usize,
    /// CCRs starting service per second, when limited.
    pub max_rate: Option<f64>,
    /// Beyond capacity: queue or 3004.
    pub overload: Overload,
    /// Queue mode: answer 3004 when this many already wait.
    pub max_queue: Option<usize>,
    /// Redis for per-session keys (CCR-I SET, CCR-T DEL).
    pub redis: Option<SocketAddr>,
    /// Key prefix; the key is prefix + Session-Id.
    pub redis_prefix: String,
    /// Extra Redis work per CCR, as a session DB with several records per session
    /// does: this many `HINCRBY <key>:state fN 1` commands, pipelined, on every CCR;
    /// the state key is deleted with the session on CCR-T. 0 = only SET/DEL.
    pub redis_extra_ops: u32,
    /// Answer 5002 DIAMETER_UNKNOWN_SESSION_ID to CCR-U/T of sessions this server did not
    /// open (a DRA that breaks stickiness shows up here). Also duplicate detection: a
    /// T-flagged CCR already answered (same Origin-Host and End-to-End) gets the same
    /// Result-Code again, so a gateway's failover resend is not taken for a misroute.
    pub strict_sessions: bool,
    /// Watchdog interval Tw (≥ 6 s).
    pub tw: Duration,
    /// Add the current Load AVP (type PEER, SourceID = `origin_host`) to every CCA, not
    /// only to DWAs (RFC 8583 §5 allows Load in any answer). Default on.
    pub load_in_answers: bool,
    /// Seed for latency sampling and identifiers.
    pub seed: u64,
    /// DOIC reporting node (`super::doic`): OLRs in answers to DOIC requests.
    pub doic: Option<Arc<super::doic::ServerReporter>>,
    /// TLS from the first byte (the client's certificate must chain to the acceptor's
    /// CA); `None`: plain TCP.
    pub tls: Option<dra::transport::tls::Acceptor>,
    /// SCTP instead of TCP (`listen` and these further addresses).
    pub sctp: Option<super::Sctp>,
}

impl ServerConfig {
    /// Defaults: any peer, fixed 1 ms, 1000 concurrent, no rate limit, queueing, no
    /// Redis, strict sessions, Tw 30 s, Load in every CCA.
    pub fn new(listen: SocketAddr, origin_host: &str, origin_realm: &str) -> ServerConfig {
        ServerConfig {
            listen,
            origin_host: origin_host.to_owned(),
            origin_realm: origin_realm.to_owned(),
            allowed_hosts: Vec::new(),
            latency: LatencyDist::Fixed(Duration::from_millis(1)),
            max_concurrent: 1000,
            max_rate: None,
            overload: Overload::Queue,
            max_queue: None,
            redis: None,
            redis_prefix: "loadgen:session:".to_owned(),
            redis_extra_ops: 0,
            strict_sessions: true,
            tw: Duration::from_secs(30),
            load_in_answers: true,
            seed: 1,
            doic: None,
            tls: None,
            sctp: None,
        }
    }
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Listening failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Redis unreachable.
    #[error("redis")]
    Redis {
        /// Why.
        #[source]
        source: RespError,
    },
    /// The Diameter identity is unusable.
    #[error("peer configuration")]
    Peer {
        /// Why.
        #[source]
        source: PeerConfigError,
    },
    /// `max_concurrent` is 0 or `max_rate` not positive.
    #[error("capacity: max_concurrent must be ≥ 1 and max_rate > 0")]
    Capacity,
}

struct Shared {
    cfg: ServerConfig,
    peer_cfg: Arc<dra::diameter::peer::PeerConfig>,
    directory: Arc<AllowList>,
    stats: Mutex<ServerStats>,
    sessions: Mutex<HashSet<String>>,
    /// Answers remembered for duplicate detection (strict sessions only).
    answered: Mutex<DuplicateCache>,
    slots: Arc<Semaphore>,
    in_service: AtomicU64,
    queued: AtomicU64,
    bucket: Mutex<(f64, Instant)>,
    next_slot: Mutex<Instant>,
    redis: Option<RespClient>,
    start: Instant,
    start_secs: u64,
}

struct Busy<'a>(&'a AtomicU64);
impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    fn load_value(&self) -> u16 {
        let c = self.cfg.max_concurrent as f64;
        let n =
            (self.in_service.load(Ordering::Relaxed) + self.queued.load(Ordering::Relaxed)) as f64;
        (65535.0 * c / (c + n)).round() as u16
    }

    fn note_busy(&self) {
        let n = self.in_service.load(Ordering::Relaxed) + self.queued.load(Ordering::Relaxed);
        let mut s = self.stats.lock().expect("stats lock");
        s.max_busy = s.max_busy.max(n);
    }

    /// Reject mode: one token from the 100 ms bucket.
    fn take_token(&self, rate: f64) -> bool {
        let mut b = self.bucket.lock().expect("bucket lock");
        let now = Instant::now();
        let cap = (rate * 0.1).max(1.0);
        b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * rate).min(cap);
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            false
        }
    }

    /// Queue mode: the instant this request may start (paced at `rate`).
    fn pace(&self, rate: f64) -> Instant {
        let mut next = self.next_slot.lock().expect("pace lock");
        let now = Instant::now();
        let slot = (*next).max(now);
        *next = slot + Duration::from_secs_f64(1.0 / rate);
        slot
    }

    async fn serve_ccr(&self, req: &Message, delay: Duration) -> u32 {
        let permit = match self.cfg.overload {
            Overload::Reject => {
                let Ok(p) = self.slots.clone().try_acquire_owned() else {
                    return result_code::TOO_BUSY;
                };
                if let Some(rate) = self.cfg.max_rate
                    && !self.take_token(rate)
                {
                    return result_code::TOO_BUSY;
                }
                p
            }
            Overload::Queue => {
                if self
                    .cfg
                    .max_queue
                    .is_some_and(|m| self.queued.load(Ordering::Relaxed) as usize >= m)
                {
                    return result_code::TOO_BUSY;
                }
                self.queued.fetch_add(1, Ordering::Relaxed);
                let _q = Busy(&self.queued);
                self.note_busy();
                if let Some(rate) = self.cfg.max_rate {
                    tokio::time::sleep_until(self.pace(rate)).await;
                }
                let Ok(p) = self.slots.clone().acquire_owned().await else {
                    return result_code::TOO_BUSY;
                };
                p
            }
        };
        self.in_service.fetch_add(1, Ordering::Relaxed);
        let in_service = Busy(&self.in_service);
        self.note_busy();
        tokio::time::sleep(delay).await;
        let rc = self.apply_session(req).await;
        // Out of service before the slot is free: the next holder of the slot must not
        // be counted beside this request (in service never exceeds the slots).
        drop(in_service);
        drop(permit);
        rc
    }

    /// The configured extra Redis commands for one CCR (see `redis_extra_ops`).
    async fn redis_extra(&self, sid: &str) -> bool {
        let (Some(r), n) = (&self.redis, self.cfg.redis_extra_ops) else {
            return true;
        };
        if n == 0 {
            return true;
        }
        let key = format!("{}{sid}:state", self.cfg.redis_prefix);
        let fields: Vec<String> = (0..n).map(|k| format!("f{k}")).collect();
        let cmds: Vec<Vec<&[u8]>> = fields
            .iter()
            .map(|f| vec![&b"HINCRBY"[..], key.as_bytes(), f.as_bytes(), &b"1"[..]])
            .collect();
        r.pipeline(&cmds).await.is_ok()
    }

    /// The session table's part of one CCR (no I/O): `Err(rc)` answers at once.
    fn track_session(&self, sid: &str, kind: u32) -> Result<(), u32> {
        match kind {
            1 => {
                if !self
                    .sessions
                    .lock()
                    .expect("sessions")
                    .insert(sid.to_owned())
                {
                    self.stats.lock().expect("stats").duplicate_session += 1;
                }
            }
            2 | 3 => {
                let known = if kind == 3 {
                    self.sessions.lock().expect("sessions").remove(sid)
                } else {
                    self.sessions.lock().expect("sessions").contains(sid)
                };
                if !known {
                    self.stats.lock().expect("stats").unknown_session += 1;
                    if self.cfg.strict_sessions {
                        // RFC 4006 §5.5 / RFC 6733 §7.1.5: 5002 for a session we do not have.
                        return Err(result_code::UNKNOWN_SESSION_ID);
                    }
                }
            }
            _ => return Err(result_code::INVALID_AVP_VALUE),
        }
        Ok(())
    }

    async fn apply_session(&self, req: &Message) -> u32 {
        let Some(sid) = req.session_id().map(str::to_owned) else {
            return result_code::MISSING_AVP;
        };
        let kind = req.cc_request_type().unwrap_or(0);
        if (1..=3).contains(&kind) && !self.redis_extra(&sid).await {
            return self.redis_done(false, false);
        }
        if let Err(rc) = self.track_session(&sid, kind) {
            return rc;
        }
        match (kind, &self.redis) {
            (1, Some(r)) => {
                let key = format!("{}{sid}", self.cfg.redis_prefix);
                let res = r
                    .command(&[b"SET", key.as_bytes(), self.cfg.origin_host.as_bytes()])
                    .await;
                self.redis_done(res.is_ok(), true)
            }
            (3, Some(r)) => {
                let key = format!("{}{sid}", self.cfg.redis_prefix);
                let state = format!("{key}:state");
                let res = r.command(&[b"DEL", key.as_bytes(), state.as_bytes()]).await;
                self.redis_done(res.is_ok(), false)
            }
            _ => result_code::SUCCESS,
        }
    }

    /// Whether CCRs are answered inline, in the connection's task: zero service time and
    /// nothing that can make a CCR wait (no Redis, no rate limit). At most one CCR is then
    /// in service at a time, so `max_concurrent` (≥ 1) never binds either.
    fn answers_inline(&self) -> bool {
        self.cfg.latency.is_zero() && self.redis.is_none() && self.cfg.max_rate.is_none()
    }

    /// Serves one CCR at once (see [`Shared::answers_inline`]); returns its Result-Code.
    fn serve_ccr_now(&self, req: &Message) -> u32 {
        self.in_service.fetch_add(1, Ordering::Relaxed);
        let rc = match req.session_id() {
            None => result_code::MISSING_AVP,
            Some(sid) => match self.track_session(sid, req.cc_request_type().unwrap_or(0)) {
                Ok(()) => result_code::SUCCESS,
                Err(rc) => rc,
            },
        };
        self.in_service.fetch_sub(1, Ordering::Relaxed);
        let mut s = self.stats.lock().expect("stats");
        s.max_busy = s.max_busy.max(1);
        *s.answered.entry(rc).or_default() += 1;
        rc
    }

    fn redis_done(&self, ok: bool, set: bool) -> u32 {
        let mut s = self.stats.lock().expect("stats");
        if !ok {
            s.redis_errors += 1;
            return result_code::UNABLE_TO_COMPLY;
        }
        if set {
            s.redis_set += 1;
        } else {
            s.redis_del += 1;
        }
        result_code::SUCCESS
    }

    /// An answer to an application request, with our Load when configured.
    fn answer(&self, req: &Message, rc: u32, msg: Option<&str>) -> Message {
        let host = &self.cfg.origin_host;
        let mut ans = answer_for(req, rc, host, &self.cfg.origin_realm, msg, None);
        if let Some(d) = &self.cfg.doic {
            d.decorate_now(req, &mut ans);
        }
        if self.cfg.load_in_answers {
            // RFC 8583 §5 / §7.1: Load (type PEER, SourceID = us) in any answer.
            ans.with(peer_load_avp(self.load_value(), host))
        } else {
            ans
        }
    }

    /// Duplicate detection (strict sessions only): whether this CCR was seen before.
    fn begin(&self, req: &Message) -> Seen {
        let (true, Some(host)) = (self.cfg.strict_sessions, req.origin_host()) else {
            return Seen::New;
        };
        let seen = self
            .answered
            .lock()
            .expect("answered")
            .begin(host, req.end_to_end);
        if seen != Seen::New {
            self.stats.lock().expect("stats").duplicates += 1;
        }
        seen
    }

    /// An answered CCR, for duplicate detection.
    fn remember(&self, req: &Message, rc: u32) {
        if let (true, Some(host)) = (self.cfg.strict_sessions, req.origin_host()) {
            self.answered
                .lock()
                .expect("answered")
                .finish(host, req.end_to_end, rc);
        }
    }

    /// The Result-Code of the original of a duplicate still in service, once answered.
    async fn original_answer(&self, req: &Message) -> u32 {
        let host = req.origin_host().unwrap_or_default();
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let rc = self
                .answered
                .lock()
                .expect("answered")
                .answered(host, req.end_to_end);
            if let Some(rc) = rc {
                return rc;
            }
            if Instant::now() >= give_up {
                return result_code::UNABLE_TO_COMPLY;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn snapshot(&self) -> ServerStats {
        let mut s = self.stats.lock().expect("stats").clone();
        s.sessions_open = self.sessions.lock().expect("sessions").len() as u64;
        s
    }
}

/// Answers a server remembers for duplicate detection.
const DUPLICATE_MEMORY: usize = 200_000;

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its Origin-Host.
    pub fn origin_host(&self) -> &str {
        &self.shared.cfg.origin_host
    }

    /// Counters so far.
    pub fn stats(&self) -> ServerStats {
        self.shared.snapshot()
    }

    /// The Load-Value it would report now.
    pub fn load_value(&self) -> u16 {
        self.shared.load_value()
    }

    /// Stops listening, closes every connection and returns the final counters.
    pub async fn shutdown(self) -> ServerStats {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        self.shared.snapshot()
    }
}

/// Starts a server (needs a tokio runtime); returns once it listens.
pub async fn run(cfg: ServerConfig) -> Result<ServerHandle, ServerError> {
    if cfg.max_concurrent == 0 || cfg.max_rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return Err(ServerError::Capacity);
    }
    let bind_err = |source| ServerError::Bind {
        addr: cfg.listen,
        source,
    };
    let (listener, addr) = match &cfg.sctp {
        None => {
            let l = TcpListener::bind(cfg.listen).await.map_err(bind_err)?;
            let addr = l.local_addr().map_err(bind_err)?;
            (Listener::Tcp(l), addr)
        }
        Some(s) => {
            let mut addrs = vec![cfg.listen];
            addrs.extend(
                s.multihome
                    .iter()
                    .map(|ip| SocketAddr::new(*ip, cfg.listen.port())),
            );
            let l = dra::transport::sctp::SctpListener::bind(&addrs).map_err(bind_err)?;
            let addr = l.local_addrs().first().copied().unwrap_or(cfg.listen);
            (Listener::Sctp(l), addr)
        }
    };
    let redis = match cfg.redis {
        Some(a) => Some(
            RespClient::connect(a)
                .await
                .map_err(|source| ServerError::Redis { source })?,
        ),
        None => None,
    };
    let peer_cfg = Arc::new(loadgen_peer_config(
        &cfg.origin_host,
        &cfg.origin_realm,
        addr.ip(),
        cfg.tw,
    ));
    peer_cfg
        .validate()
        .map_err(|source| ServerError::Peer { source })?;
    let shared = Arc::new(Shared {
        directory: Arc::new(AllowList::new(cfg.allowed_hosts.clone())),
        slots: Arc::new(Semaphore::new(cfg.max_concurrent)),
        peer_cfg,
        stats: Mutex::new(ServerStats::default()),
        sessions: Mutex::new(HashSet::new()),
        answered: Mutex::new(DuplicateCache::new(DUPLICATE_MEMORY)),
        in_service: AtomicU64::new(0),
        queued: AtomicU64::new(0),
        bucket: Mutex::new(((cfg.max_rate.unwrap_or(1.0) * 0.1).max(1.0), Instant::now())),
        next_slot: Mutex::new(Instant::now()),
        redis,
        start: Instant::now(),
        start_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        cfg,
    });
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(accept_loop(listener, shared.clone(), rx));
    Ok(ServerHandle {
        addr,
        shared,
        shutdown: tx,
        task,
    })
}

/// Where the server accepts.
enum Listener {
    Tcp(TcpListener),
    Sctp(dra::transport::sctp::SctpListener),
}

/// One accepted connection, before TLS.
enum Accepted {
    Tcp(tokio::net::TcpStream),
    Sctp(Connection),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Listener::Tcp(l) => Ok(Accepted::Tcp(l.accept().await?.0)),
            Listener::Sctp(l) => Ok(Accepted::Sctp(Connection::sctp(l.accept().await?)?)),
        }
    }
}

async fn accept_loop(listener: Listener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = Vec::new();
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            r = listener.accept() => {
                let Ok(accepted) = r else { continue };
                n += 1;
                let (shared, stop) = (shared.clone(), stop.clone());
                conns.push(tokio::spawn(async move {
                    let stream = match (accepted, &shared.cfg.tls) {
                        (Accepted::Sctp(c), _) => Some(c),
                        (Accepted::Tcp(tcp), None) => Connection::tcp(tcp).ok(),
                        (Accepted::Tcp(tcp), Some(a)) => a
                            .accept(tcp, dra::transport::tls::DEFAULT_HANDSHAKE_TIMEOUT)
                            .await
                            .ok(),
                    };
                    let Some(stream) = stream else { return };
                    shared.stats.lock().expect("stats").connections += 1;
                    let remote = stream.remote.ip();
                    serve_conn(stream, remote, shared, stop, n).await;
                }));
                conns.retain(|h: &JoinHandle<()>| !h.is_finished());
            }
        }
    }
    for c in conns {
        let _ = c.await;
    }
}

async fn serve_conn(
    stream: Connection,
    remote: IpAddr,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    n: u64,
) {
    let opts = ConnectionOptions::new(
        shared.cfg.seed ^ n.wrapping_mul(0x9E37_79B9),
        shared.start_secs,
    )
    .own_load(shared.load_value());
    let Ok(pc) = PeerConnection::new(
        Role::Responder,
        shared.peer_cfg.clone(),
        shared.directory.clone(),
        remote,
        opts,
    ) else {
        return;
    };
    let (mut link, tx) = Link::with_writer(stream, pc, shared.start.into_std());
    let mut conn = Conn {
        rng: SplitMix64::new(shared.cfg.seed.wrapping_add(n)),
        inline: shared.answers_inline(),
        shared,
        stop,
        tx,
    };
    drive(&mut link, &mut conn).await;
    // Answers still in service hold the writer's channel: they are written first.
    drop(conn);
    link.close(Close::Flush(None)).await;
}

/// One connection of the server: CER, DWR and DPR through the [`PeerConnection`]
/// (with the current Load in DWAs), application requests to [`handle_app`].
struct Conn {
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    /// The writer task's channel, for answers sent after their service time.
    tx: mpsc::UnboundedSender<Vec<u8>>,
    rng: SplitMix64,
    /// Answers are computed at once and written together per read (see
    /// [`Shared::answers_inline`]).
    inline: bool,
}

impl Mode for Conn {
    type Input = ();

    async fn input(&mut self) {
        let _ = self.stop.changed().await;
    }

    async fn on_input(&mut self, (): (), link: &mut Link) -> Flow {
        let now = link.now();
        link.pc.abort(now);
        Flow::Continue
    }

    fn on_event(&mut self, _event: PeerEvent, _link: &mut Link) {}

    fn on_message(&mut self, msg: Message, link: &mut Link) -> Option<Message> {
        if msg.command_code == cmd::DEVICE_WATCHDOG && msg.is_request() {
            self.shared.stats.lock().expect("stats").dwr_received += 1;
        }
        link.pc.set_own_load(self.shared.load_value());
        Some(msg)
    }

    fn on_cer(&mut self, link: &mut Link) {
        let now = link.now();
        link.pc.accept_cer(now);
        self.shared.stats.lock().expect("stats").cer_accepted += 1;
    }

    fn on_application(&mut self, req: Message, link: &mut Link) {
        let out = if self.inline {
            Some(&mut link.out)
        } else {
            None
        };
        handle_app(&self.shared, req, &self.tx, out, &mut self.rng);
    }

    fn on_framing_error(&mut self, _error: FramingError, link: &mut Link) -> Flow {
        // Aborted: the inline answers of this read are not written.
        link.out.clear();
        let now = link.now();
        link.pc.abort(now);
        Flow::Continue
    }
}

/// Answers an application request: at once into `inline` when given (see
/// [`Shared::answers_inline`]), otherwise from a task after the service time.
fn handle_app(
    shared: &Arc<Shared>,
    req: Message,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    inline: Option<&mut Vec<u8>>,
    rng: &mut SplitMix64,
) {
    if !req.is_request() {
        return;
    }
    // RFC 6733 §7.1.3: 3001 for a command we do not serve, 3007 for an application.
    let early = if req.command_code != cmd::CREDIT_CONTROL {
        Some(result_code::COMMAND_UNSUPPORTED)
    } else if req.application_id != app::GX && req.application_id != app::GY {
        Some(result_code::APPLICATION_UNSUPPORTED)
    } else {
        None
    };
    if let Some(rc) = early {
        let _ = tx.send(shared.answer(&req, rc, None).encode());
        return;
    }
    {
        let mut s = shared.stats.lock().expect("stats");
        *s.ccr_received
            .entry(req.cc_request_type().unwrap_or(0))
            .or_default() += 1;
        s.t_flagged += u64::from(req.is_retransmit());
    }
    let seen = shared.begin(&req);
    if let Seen::Answered(rc) = seen {
        let ans = shared.answer(&req, rc, None).encode();
        match inline {
            Some(out) => out.extend_from_slice(&ans),
            None => {
                let _ = tx.send(ans);
            }
        }
        return;
    }
    if let Some(out) = inline {
        // Answered inline: nothing of this server is ever in service here.
        let rc = shared.serve_ccr_now(&req);
        shared.remember(&req, rc);
        let _ = dra::diameter::encode_into(&shared.answer(&req, rc, None), out);
        return;
    }
    if seen == Seen::InService {
        // Answered like the original, once it is.
        let shared = shared.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let rc = shared.original_answer(&req).await;
            let _ = tx.send(shared.answer(&req, rc, None).encode());
        });
        return;
    }
    let delay = shared.cfg.latency.sample(rng);
    let shared = shared.clone();
    let tx = tx.clone();
    tokio::spawn(async move {
        let rc = shared.serve_ccr(&req, delay).await;
        shared.remember(&req, rc);
        *shared
            .stats
            .lock()
            .expect("stats")
            .answered
            .entry(rc)
            .or_default() += 1;
        let msg = (rc == result_code::TOO_BUSY).then_some("over capacity");
        // The Load is computed here, after this request left service: it reflects the
        // CCRs still in service or queued.
        let _ = tx.send(shared.answer(&req, rc, msg).encode());
    });
}

/// A stable [`dra::routing::PeerId`] for a name (lowercase, SipHash with fixed keys).
pub(crate) fn name_id(name: &str) -> usize {
    let mut h = std::hash::DefaultHasher::new();
    name.to_ascii_lowercase().hash(&mut h);
    h.finish() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::script::{ScriptedPeer, Tap};
    use dra::diameter::peer::peer_load_value;
    use dra::diameter::{Avp, avp_code as c};

    /// Connects as `pgw1.test.example`, completes CER/CEA, sends `n` CCR-Is at once and
    /// returns the CCAs in arrival order.
    async fn ccas_for_burst(srv: &ServerHandle, n: u32) -> Vec<Message> {
        let addr = srv.local_addr();
        let host = "pgw1.test.example";
        let tap = Tap::default();
        let cfg = loadgen_peer_config(host, "test.example", addr.ip(), Duration::from_secs(30));
        let pgw = ScriptedPeer::connect(addr, cfg, srv.origin_host(), Some(tap.clone()))
            .await
            .expect("CER accepted");
        let burst = (0..n)
            .flat_map(|i| {
                // RFC 4006 §3.1: a minimal Gx CCR-I.
                Message::request(cmd::CREDIT_CONTROL, app::GX, 100 + i, 200 + i)
                    .proxiable()
                    .with(Avp::utf8(c::SESSION_ID, &format!("{host};1;{i}")).mandatory())
                    .with(Avp::u32(c::AUTH_APPLICATION_ID, app::GX).mandatory())
                    .with(Avp::utf8(c::ORIGIN_HOST, host).mandatory())
                    .with(Avp::utf8(c::ORIGIN_REALM, "test.example").mandatory())
                    .with(Avp::utf8(c::DESTINATION_REALM, "pcrf.example").mandatory())
                    .with(Avp::enumerated(c::CC_REQUEST_TYPE, 1).mandatory())
                    .with(Avp::u32(c::CC_REQUEST_NUMBER, 0).mandatory())
                    .encode()
            })
            .collect();
        assert!(pgw.send_bytes(burst).await, "server closed the connection");
        let ccas = || -> Vec<Message> {
            let tap = tap.lock().expect("tap");
            let read = tap.iter().filter(|(sent, _)| !sent);
            read.filter_map(|(_, b)| Message::decode(b).ok())
                .filter(|m| m.command_code == cmd::CREDIT_CONTROL && !m.is_request())
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while ccas().len() < n as usize {
            assert!(Instant::now() < deadline, "server answers");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ccas()
    }

    fn one_slot_server(load_in_answers: bool) -> ServerConfig {
        let mut cfg = ServerConfig::new(
            "127.0.0.1:0".parse().expect("addr"),
            "pcrf1.example",
            "pcrf.example",
        );
        cfg.max_concurrent = 1;
        cfg.latency = LatencyDist::Fixed(Duration::from_millis(20));
        cfg.load_in_answers = load_in_answers;
        cfg
    }

    // Single-threaded runtime: a CCA's Load is computed before the next queued CCR
    // runs, so the values are exact.
    #[tokio::test]
    async fn every_cca_carries_the_load_of_the_queue_behind_it() {
        let srv = run(one_slot_server(true)).await.expect("server");
        let ccas = ccas_for_burst(&srv, 3).await;
        let values: Vec<u16> = ccas
            .iter()
            .map(|m| {
                assert_eq!(m.result_code(), Some(result_code::SUCCESS));
                peer_load_value(m, "pcrf1.example").expect("Load AVP about the server")
            })
            .collect();
        // C = 1; behind the first answer two CCRs still wait, behind the second one, and
        // the last leaves the server idle: 65535 × 1 / (1 + n).
        assert_eq!(values, vec![21845, 32768, 65535]);
        assert_eq!(srv.load_value(), 65535);
        srv.shutdown().await;
    }

    #[tokio::test]
    async fn load_in_answers_off_leaves_ccas_without_load() {
        let srv = run(one_slot_server(false)).await.expect("server");
        let ccas = ccas_for_burst(&srv, 2).await;
        for m in &ccas {
            assert_eq!(m.result_code(), Some(result_code::SUCCESS));
            assert!(m.find(c::LOAD).is_none(), "Load AVP in a CCA: {m:?}");
        }
        srv.shutdown().await;
    }

    #[test]
    fn latency_parses_and_samples_in_range() {
        assert_eq!(
            "fixed:5ms".parse::<LatencyDist>().unwrap(),
            LatencyDist::Fixed(Duration::from_millis(5))
        );
        let u: LatencyDist = "uniform:1ms:3ms".parse().unwrap();
        let mut rng = SplitMix64::new(3);
        for _ in 0..1000 {
            let d = u.sample(&mut rng);
            assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(3));
        }
        let e: LatencyDist = "exp:10ms".parse().unwrap();
        let mean: f64 = (0..20000)
            .map(|_| e.sample(&mut rng).as_secs_f64())
            .sum::<f64>()
            / 20000.0;
        assert!((mean - 0.010).abs() < 0.0005, "{mean}");
        assert!("uniform:3ms:1ms".parse::<LatencyDist>().is_err());
        assert!("gauss:1ms".parse::<LatencyDist>().is_err());
    }
}
