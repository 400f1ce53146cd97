//! The core task: owns every protocol object and turns I/O events into their inputs.
//!
//! One `Core`, its methods in one file per job:
//! - here: construction, the event loop, control messages, timers and housekeeping;
//! - [`peers`]: connections (accept, dial, reconnect), the peer state machines' inputs
//!   and outputs, capabilities exchange and election, writing to a connection;
//! - [`forward`]: requests from peers (marked, invalid, unroutable, relayed) through the
//!   routing and the forwarding pipeline ([`crate::relay::Pipeline`]), answers back;
//! - [`report`]: the counters snapshot and the `dra status` text.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dra_common::wire::app;
use tokio::sync::mpsc;
use tracing::{Span, debug, info, info_span, warn};

use super::io::{self, CloseCause, ConnId, ConnIo, IoEvent};
use super::{AgentError, AgentOptions, AgentStats, Ctl, setup};
use crate::config::{Config, Role as CfgRole};
use crate::diameter::peer::{
    ConnectionOptions, DisconnectCause, Handled, PeerConfig, PeerConnection, PeerDirectory,
    PeerEvent, PeerState, Reconnect, Role, WatchdogState, election_won,
};
use crate::diameter::{Dictionary, Message, answer_for, validate_request};
use crate::metrics::{self, Metrics};
use crate::relay::{
    DownstreamRef, GroupId, MarkedHandler, MarkedPolicy, MarkedResponse, Output, Pipeline, Relay,
    RelayConfig, RelayError, Retry, Rlf,
};
use crate::routing::{
    BindingUpdate, CcRequestType, Decision, PeerId, PeerStates, PeerTable, RouteRequest, Router,
    Selector, Strategy,
};
use crate::session::{self, Sessions};

mod forward;
mod overload;
mod peers;
mod react;
mod reload;
mod report;
mod startup;
mod tls;

pub(super) use tls::DialError;

/// Housekeeping period: metrics gauges, rates, invariant check, purges.
const TICK: Duration = Duration::from_secs(1);

struct Conn {
    pc: PeerConnection,
    io: ConnIo,
    peer: Option<PeerId>,
    span: Span,
    /// An accepted connection not open yet: its source address, counted in
    /// `Core::awaiting_cer` until it opens or closes.
    awaiting_from: Option<std::net::IpAddr>,
    /// Undecodable messages ignored on it (only the first is logged).
    ignored: u64,
    /// TLS: the configured peers its certificate named (the one we dialled, or those
    /// an accepted client's certificate names); `None` for plain TCP.
    tls_peers: Option<Vec<PeerId>>,
}

#[derive(Default)]
struct Slot {
    /// The connection in use (open, capabilities exchanged).
    conn: Option<ConnId>,
    /// Our outgoing connection (connecting or connected).
    initiator: Option<ConnId>,
    connecting: bool,
    reconnect_at: Option<Duration>,
    failures: u32,
    ever_connected: bool,
    /// Removed by a reload (`reload`): a tombstone, never dialled or accepted.
    retired: bool,
    /// Its `connect` changed in a reload: dial the new address as soon as the old
    /// connection is closed (not after Tc).
    redial_now: bool,
    good: bool,
    state: Option<metrics::PeerState>,
    requests_in: u64,
    requests_out: u64,
    rate_in: f64,
    rate_out: f64,
    last_in: u64,
    last_out: u64,
    /// Its per-message metric series (resolved on first use).
    series: Option<metrics::PeerSeries>,
}

/// Peer `p`'s per-message metric series.
fn series<'a>(
    slots: &'a mut [Slot],
    cfg: &Config,
    metrics: &Metrics,
    p: PeerId,
) -> &'a mut metrics::PeerSeries {
    slots[p.0]
        .series
        .get_or_insert_with(|| metrics.peer_series(&cfg.peers[p.0].name))
}

pub(super) struct Core {
    start: Instant,
    cfg: Config,
    opts: AgentOptions,
    metrics: Metrics,
    peer_cfg: Arc<PeerConfig>,
    dir: Arc<dyn PeerDirectory>,
    start_secs: u64,
    peers: PeerTable,
    slots: Vec<Slot>,
    groups: Vec<Option<GroupId>>,
    conns: HashMap<ConnId, Conn>,
    next_conn: ConnId,
    routers: HashMap<Strategy, Router>,
    group_strategy: Vec<Strategy>,
    scratch: Vec<crate::routing::Candidate>,
    /// Session bindings: local cache, shared store (`crate::session`).
    sessions: Sessions,
    /// Requests waiting for a session store call, by its token (`forward`).
    parked: HashMap<u64, forward::Parked>,
    /// (deadline, token) of the parked requests, in deadline order.
    parked_deadlines: std::collections::VecDeque<(Duration, u64)>,
    store_tx: mpsc::UnboundedSender<session::Event>,
    store_rx: Option<mpsc::UnboundedReceiver<session::Event>>,
    /// Relay core + egress limiters (the forwarding pipeline, sans-IO).
    pipeline: Pipeline,
    timeouts: Vec<Duration>,
    marked: MarkedHandler,
    /// Our RFC 8583 Load-Value for downstream DWAs (`super::load`).
    own_load: u16,
    /// The DOIC reporting node towards the gateways (`crate::doic`, `super::doic`).
    doic: crate::doic::Reporter,
    /// The DOIC reacting node towards servers with `doic = true` (`react`).
    reactor: crate::doic::Reactor,
    /// Per peer: its latest request carried OC-Supported-Features (`react`).
    announces: Vec<bool>,
    /// Per peer group: the egress queue depth last published.
    queue_depths: Vec<Option<u64>>,
    own_cpu: super::load::OwnCpu,
    stats: AgentStats,
    reported_violations: u64,
    to_abort: Vec<ConnId>,
    /// Accepted connections waiting for their CER, per source address (capped, see
    /// `AgentOptions::max_awaiting_cer`).
    awaiting_cer: HashMap<std::net::IpAddr, usize>,
    /// Connections refused since the last refusal was logged (logged once a second).
    refused_since_log: u64,
    /// The same for TLS refusals, per (side, reason): each kind is logged once a second.
    tls_refused_since_log: HashMap<(&'static str, &'static str), u64>,
    /// Acceptor and handshake bound of each TLS listener (`tls`), rebuilt by a reload.
    tls_listeners: HashMap<std::net::SocketAddr, (crate::transport::tls::Acceptor, Duration)>,
    /// Connections that can no longer be read (broken framing), closed once the requests
    /// relayed from them are answered, or at the deadline.
    draining: HashMap<ConnId, Duration>,
    io_tx: mpsc::Sender<IoEvent>,
    io_rx: Option<mpsc::Receiver<IoEvent>>,
    ctl_tx: mpsc::Sender<Ctl>,
    shutdown: Option<(tokio::sync::oneshot::Sender<()>, Duration)>,
    next_tick: Duration,
    /// Readiness and the requests held while the first connections open (`startup`).
    startup: startup::Startup,
    /// The agent's own overload control (`overload`).
    overload: overload::Overload,
}

impl Core {
    pub(super) fn new(
        cfg: Config,
        opts: AgentOptions,
        metrics: Metrics,
        ctl_tx: mpsc::Sender<Ctl>,
        ready: tokio::sync::watch::Sender<bool>,
    ) -> Result<Core, AgentError> {
        let addrs = cfg
            .listeners
            .iter()
            .map(|l| l.address.ip())
            .filter(|a| !a.is_unspecified())
            .collect::<Vec<_>>();
        let addrs = if addrs.is_empty() {
            vec![std::net::IpAddr::from([127, 0, 0, 1])]
        } else {
            addrs
        };
        let mut pc = PeerConfig::new(&cfg.global.origin_host, &cfg.global.origin_realm, addrs);
        pc.product_name = cfg.global.product_name.clone();
        if let Some(tc) = opts.tc {
            pc.tc = tc;
        }
        // The jitter (±2 s) is at most a quarter of Tw, so that a short Tw stays one.
        let tw = opts.tw.unwrap_or(cfg.global.watchdog);
        pc.tw = tw;
        pc.tw_jitter = pc.tw_jitter.min(tw / 4);
        let start_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        pc.origin_state_id = Some(start_secs as u32);
        pc.validate().map_err(AgentError::Identity)?;
        let table = setup::route_table(&cfg).map_err(AgentError::Setup)?;
        let groups = setup::memberships(&cfg);
        let group_strategy: Vec<Strategy> = cfg
            .peer_groups
            .iter()
            .map(|g| setup::strategy(g.selection))
            .collect();
        let mut routers = HashMap::new();
        for s in group_strategy.iter().copied().chain([Strategy::RoundRobin]) {
            routers.entry(s).or_insert_with(|| {
                Router::new(table.clone(), Selector::new(s, opts.seed ^ s as u64))
            });
        }
        let rlfs: Vec<Option<Rlf<crate::relay::Held>>> = setup::egress(&cfg)
            .map_err(AgentError::Setup)?
            .into_iter()
            .map(|c| c.map(|c| Rlf::new(c).expect("checked in setup")))
            .collect();
        let policy = MarkedPolicy::new(setup::marked_policy(&cfg))
            .map_err(|e| AgentError::Setup(setup::SetupError::Policy(e)))?;
        let marked = MarkedHandler::new(policy, &cfg.global.origin_host, &cfg.global.origin_realm);
        let relay = Relay::new(RelayConfig {
            own_host: cfg.global.origin_host.clone(),
            own_realm: cfg.global.origin_realm.clone(),
            capacity: opts.pending_capacity,
            hop_by_hop_seed: (opts.seed as u32) ^ (start_secs as u32),
        });
        let pipeline = Pipeline::new(relay, rlfs, groups.clone());
        let (io_tx, io_rx) = mpsc::channel(4096);
        let (store_tx, store_rx) = mpsc::unbounded_channel();
        let slots = cfg.peers.iter().map(|_| Slot::default()).collect();
        Ok(Core {
            start: Instant::now(),
            dir: Arc::new(setup::directory(&cfg)),
            peers: setup::peer_table(&cfg),
            slots,
            timeouts: setup::answer_timeouts(&cfg),
            groups,
            conns: HashMap::new(),
            next_conn: 1,
            routers,
            group_strategy,
            scratch: Vec::new(),
            sessions: Sessions::new(&cfg.session_store, metrics.clone()),
            parked: HashMap::new(),
            parked_deadlines: std::collections::VecDeque::new(),
            store_tx,
            store_rx: Some(store_rx),
            pipeline,
            marked,
            own_load: crate::routing::LOAD_VALUE_IDLE,
            // RFC 7683 §7.4: a restarted agent's reports must be newer than the old ones.
            doic: super::doic::reporter(&cfg, super::doic::sequence_base()),
            reactor: crate::doic::Reactor::new(),
            announces: vec![false; cfg.peers.len()],
            queue_depths: Vec::new(),
            own_cpu: super::load::OwnCpu::new(),
            stats: AgentStats::default(),
            reported_violations: 0,
            to_abort: Vec::new(),
            awaiting_cer: HashMap::new(),
            refused_since_log: 0,
            tls_refused_since_log: HashMap::new(),
            tls_listeners: tls::listeners(&cfg),
            draining: HashMap::new(),
            io_tx,
            io_rx: Some(io_rx),
            ctl_tx,
            shutdown: None,
            next_tick: TICK,
            startup: startup::Startup::new(cfg.global.startup_wait, ready),
            overload: overload::Overload::new(&cfg.overload, shed_ports(&opts)),
            peer_cfg: Arc::new(pc),
            start_secs,
            cfg,
            opts,
            metrics,
        })
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    pub(super) async fn run(mut self, mut ctl_rx: mpsc::Receiver<Ctl>) {
        let mut io_rx = self.io_rx.take().expect("receiver");
        let mut store_rx = self.store_rx.take().expect("receiver");
        self.sessions.start(self.store_tx.clone());
        for i in 0..self.cfg.peers.len() {
            let p = &self.cfg.peers[i];
            if p.role == CfgRole::Server && p.connect.is_some() {
                self.dial(i);
            }
            self.set_state_metric(PeerId(i), metrics::PeerState::Closed);
        }
        self.metrics.set_ready(false);
        self.check_ready(self.now());
        loop {
            let deadline = self.start + self.next_deadline();
            tokio::select! {
                biased;
                c = ctl_rx.recv() => match c {
                    Some(c) => self.on_ctl(c),
                    None => return,
                },
                e = io_rx.recv() => match e {
                    Some(e) => {
                        self.on_io(e);
                        // Drain what is ready without re-arming the timer each time.
                        for _ in 0..256 {
                            match io_rx.try_recv() {
                                Ok(e) => self.on_io(e),
                                Err(_) => break,
                            }
                        }
                    }
                    None => return,
                },
                Some(ev) = store_rx.recv() => {
                    let now = self.now();
                    self.on_store(now, ev);
                    while let Ok(ev) = store_rx.try_recv() {
                        self.on_store(now, ev);
                    }
                }
                _ = tokio::time::sleep_until(deadline.into()) => self.on_timer(),
            }
            self.abort_overflowed();
            self.release_held(self.now());
            self.finish_draining(self.now());
            if let Some((_, until)) = &self.shutdown
                && (self.conns.is_empty() || self.now() >= *until)
            {
                let (tx, _) = self.shutdown.take().expect("shutdown");
                let _ = tx.send(());
                return;
            }
        }
    }

    fn next_deadline(&self) -> Duration {
        let mut next = self.next_tick;
        let mut consider = |t: Option<Duration>| {
            if let Some(t) = t {
                next = next.min(t);
            }
        };
        for c in self.conns.values() {
            consider(c.pc.poll_timeout());
        }
        consider(self.pipeline.poll_timeout());
        for s in &self.slots {
            consider(s.reconnect_at);
        }
        for t in self.draining.values() {
            consider(Some(*t));
        }
        consider(self.parked_deadlines.front().map(|(t, _)| *t));
        consider(self.startup.poll_timeout());
        consider(self.overload.poll_timeout());
        next
    }

    // ----- control -----

    fn on_ctl(&mut self, c: Ctl) {
        match c {
            Ctl::Accepted { stream, listener } => self.accepted(stream, listener),
            Ctl::AcceptedSctp { conn } => self.accepted_sctp(conn),
            Ctl::Handshaken { remote, result } => self.handshaken(remote, result),
            Ctl::Connected { peer, result } => self.connected(peer, result),
            Ctl::Status(tx) => {
                let _ = tx.send(self.status());
            }
            Ctl::Stats(tx) => {
                let _ = tx.send(self.snapshot());
            }
            Ctl::Shutdown(tx) => {
                let now = self.now();
                let ids: Vec<ConnId> = self.conns.keys().copied().collect();
                for id in ids {
                    if let Some(c) = self.conns.get_mut(&id) {
                        if c.pc.is_open() {
                            c.pc.start_disconnect(now, DisconnectCause::Rebooting);
                        } else {
                            c.pc.abort(now);
                        }
                    }
                    self.drive(now, id);
                }
                for s in &mut self.slots {
                    s.reconnect_at = None;
                }
                self.shutdown = Some((tx, now + self.opts.shutdown_grace));
            }
            Ctl::Reload { cfg, diff, done } => {
                let r = self.reload(*cfg, &diff).map_err(|e| crate::error_chain(&e));
                let _ = done.send(r);
            }
            Ctl::Throttle { peer, throttle } => {
                if let Some(i) = self.cfg.peers.iter().position(|p| p.name == peer) {
                    self.doic.set_throttle(i, throttle);
                }
            }
        }
    }

    // ----- timers -----

    fn on_timer(&mut self) {
        let now = self.now();
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.pc.poll_timeout().is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(c) = self.conns.get_mut(&id) {
                c.pc.handle_timeout(now);
            }
            self.drive(now, id);
        }
        if self.pipeline.poll_timeout().is_some_and(|t| t <= now) {
            let retries = self.pipeline.handle_timeout(now);
            self.pump(now, retries);
        }
        self.expire_parked(now);
        self.startup_timer(now);
        self.overload_tick(now);
        for i in 0..self.slots.len() {
            if self.slots[i].reconnect_at.is_some_and(|t| t <= now) {
                self.slots[i].reconnect_at = None;
                self.dial(i);
            }
        }
        if now >= self.next_tick {
            self.next_tick = now + TICK;
            self.housekeeping(now);
        }
    }

    fn housekeeping(&mut self, now: Duration) {
        let secs = TICK.as_secs_f64();
        if self.refused_since_log > 1 {
            warn!(
                refused = self.refused_since_log - 1,
                "connections refused in the last second: too many waiting for a CER"
            );
        }
        self.refused_since_log = 0;
        for ((side, reason), n) in std::mem::take(&mut self.tls_refused_since_log) {
            if n > 1 {
                warn!(
                    refused = n - 1,
                    side,
                    reason,
                    "more TLS connections refused in the last second (dra_tls_refused_total)"
                );
            }
        }
        self.metrics
            .set_connections_awaiting_cer(self.awaiting_cer.values().sum::<usize>() as u64);
        for (i, s) in self.slots.iter_mut().enumerate() {
            s.rate_in = (s.requests_in - s.last_in) as f64 / secs;
            s.rate_out = (s.requests_out - s.last_out) as f64 / secs;
            s.last_in = s.requests_in;
            s.last_out = s.requests_out;
            if self.cfg.peers[i].role == CfgRole::Server {
                let n = u64::from(self.pipeline.outstanding(PeerId(i)));
                self.metrics
                    .set_pending_requests(&self.cfg.peers[i].name, n);
            }
        }
        self.sessions.tick(now);
        self.doic_tick(now);
        self.overload_metrics();
        let s = self.snapshot();
        self.update_own_load(s.relay.pending as usize);
        let lhs = s.requests_in;
        let rhs = s.local_answers
            + s.marked_discarded
            + s.relay.answers_relayed
            + s.relay.answers_generated
            + s.relay.answers_discarded
            + s.relay.requests_dropped
            + s.relay.pending
            + self.parked.len() as u64
            + self.startup.held() as u64;
        let violations = lhs.abs_diff(rhs);
        if violations > self.reported_violations {
            for _ in self.reported_violations..violations {
                self.metrics.inc_unanswered_invariant_violation();
            }
            warn!(violations, "requests without exactly one outcome");
            self.reported_violations = violations;
        }
    }

    /// Recomputes our Load-Value (`super::load`) and puts it in the next DWAs on every
    /// connection that is not to a server (RFC 8583: a PEER report to our clients).
    fn update_own_load(&mut self, pending: usize) {
        let cpu = self.own_cpu.sample();
        let value = super::load::own_load_value(pending, self.opts.pending_capacity, cpu);
        if value != self.own_load {
            debug!(value, pending, cpu, "own load");
        }
        self.own_load = value;
        for c in self.conns.values_mut() {
            let server = c
                .peer
                .is_some_and(|p| self.cfg.peers[p.0].role == CfgRole::Server);
            if !server && c.pc.own_load() != Some(value) {
                c.pc.set_own_load(value);
            }
        }
    }
}

/// Where the overload control writes its plan: the ports the caller gave (the fast
/// path's maps) and the shed table of every limiter the readers apply.
fn shed_ports(opts: &AgentOptions) -> Vec<Arc<dyn crate::overload::ShedPort>> {
    let mut ports = opts.shed_ports.clone();
    let limiters = [
        match &opts.ingress {
            io::Ingress::Limiter(l) => Some(l.clone()),
            _ => None,
        },
        opts.limiter.clone(),
    ];
    for l in limiters.into_iter().flatten() {
        let t = l.shed_table();
        let dyn_t: Arc<dyn crate::overload::ShedPort> = t;
        if !ports.iter().any(|p| Arc::ptr_eq(p, &dyn_t)) {
            ports.push(dyn_t);
        }
    }
    ports
}
