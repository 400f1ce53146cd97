//! The core task: owns every protocol object and turns I/O events into their inputs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::num::NonZeroUsize;
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
    PeerEvent, PeerState, Reconnect, WatchdogState, election_won,
};
use crate::diameter::{Dictionary, Message, answer_for, validate_request};
use crate::metrics::{self, Metrics};
use crate::relay::{
    DownstreamRef, GroupId, MarkedHandler, MarkedPolicy, MarkedResponse, Output, Pipeline, Relay,
    RelayConfig, RelayError, Retry, Rlf,
};
use crate::routing::{
    CcRequestType, Decision, MemoryBindingStore, PeerId, PeerStates, PeerTable, RouteRequest,
    Router, Selector, Strategy,
};

/// Housekeeping period: metrics gauges, rates, invariant check, purges.
const TICK: Duration = Duration::from_secs(1);

struct Conn {
    pc: PeerConnection,
    io: ConnIo,
    peer: Option<PeerId>,
    span: Span,
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
    good: bool,
    state: Option<metrics::PeerState>,
    requests_in: u64,
    requests_out: u64,
    rate_in: f64,
    rate_out: f64,
    last_in: u64,
    last_out: u64,
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
    bindings: MemoryBindingStore,
    /// Relay core + egress limiters (the forwarding pipeline, sans-IO).
    pipeline: Pipeline,
    timeouts: Vec<Duration>,
    marked: MarkedHandler,
    /// Our RFC 8583 Load-Value for downstream DWAs (`super::load`).
    own_load: u16,
    own_cpu: super::load::OwnCpu,
    stats: AgentStats,
    reported_violations: u64,
    to_abort: Vec<ConnId>,
    io_tx: mpsc::Sender<IoEvent>,
    io_rx: Option<mpsc::Receiver<IoEvent>>,
    ctl_tx: mpsc::Sender<Ctl>,
    shutdown: Option<(tokio::sync::oneshot::Sender<()>, Duration)>,
    next_tick: Duration,
}

impl Core {
    pub(super) fn new(
        cfg: Config,
        opts: AgentOptions,
        metrics: Metrics,
        ctl_tx: mpsc::Sender<Ctl>,
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
        if let Some(tw) = opts.tw {
            pc.tw = tw;
            pc.tw_jitter = pc.tw_jitter.min(tw / 4);
        }
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
            bindings: MemoryBindingStore::new(
                NonZeroUsize::new(opts.binding_capacity.max(1)).expect("nonzero"),
            ),
            pipeline,
            marked,
            own_load: crate::routing::LOAD_VALUE_IDLE,
            own_cpu: super::load::OwnCpu::new(),
            stats: AgentStats::default(),
            reported_violations: 0,
            to_abort: Vec::new(),
            io_tx,
            io_rx: Some(io_rx),
            ctl_tx,
            shutdown: None,
            next_tick: TICK,
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
        for i in 0..self.cfg.peers.len() {
            let p = &self.cfg.peers[i];
            if p.role == CfgRole::Server && p.connect.is_some() {
                self.dial(i);
            }
            self.set_state_metric(PeerId(i), metrics::PeerState::Closed);
        }
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
                _ = tokio::time::sleep_until(deadline.into()) => self.on_timer(),
            }
            self.abort_overflowed();
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
        next
    }

    // ----- control -----

    fn on_ctl(&mut self, c: Ctl) {
        match c {
            Ctl::Accepted(stream) => self.accepted(stream),
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
        }
    }

    fn snapshot(&self) -> AgentStats {
        let mut s = self.stats.clone();
        s.relay = self.pipeline.stats();
        let m = self.marked.stats();
        s.marked_answered = m.answered;
        s.marked_discarded = m.discarded;
        s.egress = (0..self.cfg.peer_groups.len())
            .filter_map(|i| {
                self.pipeline
                    .rlf_stats(GroupId(i))
                    .map(|st| (self.cfg.peer_groups[i].name.clone(), st))
            })
            .collect();
        s
    }

    fn span(&self, id: ConnId, remote: std::net::SocketAddr, origin_host: Option<&str>) -> Span {
        let span = info_span!("peer", conn = id, %remote, origin_host = tracing::field::Empty);
        if let Some(h) = origin_host {
            span.record("origin_host", h);
        }
        span
    }

    fn options(&mut self, reopen: bool) -> ConnectionOptions {
        let seed = self
            .opts
            .seed
            .wrapping_add(self.next_conn.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        ConnectionOptions::new(seed, self.start_secs).reopen(reopen)
    }

    fn accepted(&mut self, stream: tokio::net::TcpStream) {
        if self.shutdown.is_some() {
            return;
        }
        let Ok(remote) = stream.peer_addr() else {
            return;
        };
        // Inbound connections are usually clients: they start with our current load.
        let opts = self.options(false).own_load(self.own_load);
        let span = self.span(self.next_conn, remote, None);
        // Accepted connections come to a Diameter port: the ingress limits apply when
        // the agent enforces them itself.
        let ingress = self.opts.ingress.clone();
        self.open_conn(stream, remote, None, opts, ingress, span);
    }

    /// Sets up a connection: its `PeerConnection` (responder for an accepted one,
    /// initiator when `peer` is the server we dialled), its I/O tasks, and starts it.
    /// `None` (logged) if either could not be created.
    fn open_conn(
        &mut self,
        stream: tokio::net::TcpStream,
        remote: std::net::SocketAddr,
        peer: Option<PeerId>,
        opts: ConnectionOptions,
        ingress: io::Ingress,
        span: Span,
    ) -> Option<ConnId> {
        let id = self.next_conn;
        self.next_conn += 1;
        let (cfg, dir) = (self.peer_cfg.clone(), self.dir.clone());
        let pc = match peer {
            None => PeerConnection::responder(cfg, dir, remote.ip(), opts),
            Some(_) => PeerConnection::initiator(cfg, dir, remote.ip(), opts),
        };
        let pc = match pc {
            Ok(pc) => pc,
            Err(e) => {
                span.in_scope(|| warn!(error = %e, "cannot create a peer connection"));
                return None;
            }
        };
        let io = match io::spawn(
            id,
            stream,
            self.io_tx.clone(),
            self.opts.max_message_size,
            self.opts.write_queue,
            ingress,
            span.clone(),
        ) {
            Ok(io) => io,
            Err(e) => {
                span.in_scope(|| warn!(error = %e, "connection unusable"));
                return None;
            }
        };
        span.in_scope(|| match peer {
            None => debug!("accepted"),
            Some(_) => info!("connected, sending CER"),
        });
        self.conns.insert(id, Conn { pc, io, peer, span });
        let now = self.now();
        if let Some(c) = self.conns.get_mut(&id) {
            c.pc.handle_connected(now);
        }
        self.drive(now, id);
        Some(id)
    }

    fn dial(&mut self, peer: usize) {
        let Some(addr) = self.cfg.peers[peer].connect else {
            return;
        };
        let slot = &mut self.slots[peer];
        if slot.connecting || slot.initiator.is_some() || self.shutdown.is_some() {
            return;
        }
        slot.connecting = true;
        slot.reconnect_at = None;
        let tx = self.ctl_tx.clone();
        let timeout = self.opts.connect_timeout;
        tokio::spawn(async move {
            let result =
                match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connect timed out",
                    )),
                };
            let _ = tx.send(Ctl::Connected { peer, result }).await;
        });
    }

    fn schedule_reconnect(&mut self, peer: usize, hold_off: Option<Duration>) {
        if self.shutdown.is_some() || self.cfg.peers[peer].connect.is_none() {
            return;
        }
        let now = self.now();
        let slot = &mut self.slots[peer];
        // RFC 6733 §2.1 Tc, doubled per consecutive failure (bounded).
        let backoff = self
            .peer_cfg
            .tc
            .saturating_mul(1u32 << slot.failures.min(10))
            .min(self.opts.max_backoff);
        let delay = hold_off.map_or(backoff, |h| h.max(backoff));
        slot.failures = slot.failures.saturating_add(1);
        slot.reconnect_at = Some(now + delay);
        debug!(peer = %self.cfg.peers[peer].name, ?delay, "reconnect scheduled");
    }

    fn connected(&mut self, peer: usize, result: std::io::Result<tokio::net::TcpStream>) {
        self.slots[peer].connecting = false;
        let stream = match result {
            Ok(s) if self.shutdown.is_none() => s,
            Ok(_) => return,
            Err(e) => {
                warn!(peer = %self.cfg.peers[peer].name, error = %e, "connect failed");
                self.schedule_reconnect(peer, None);
                return;
            }
        };
        let Ok(remote) = stream.peer_addr() else {
            self.schedule_reconnect(peer, None);
            return;
        };
        let reopen = self.slots[peer].ever_connected;
        let opts = self.options(reopen);
        let span = self.span(
            self.next_conn,
            remote,
            Some(&self.cfg.peers[peer].origin_host),
        );
        // Our own outbound connections: the fast path sees their traffic arrive on an
        // ephemeral port, never limited; so does the agent's limiter.
        match self.open_conn(
            stream,
            remote,
            Some(PeerId(peer)),
            opts,
            io::Ingress::None,
            span,
        ) {
            Some(id) => self.slots[peer].initiator = Some(id),
            None => self.schedule_reconnect(peer, None),
        }
    }

    // ----- I/O events -----

    fn on_io(&mut self, e: IoEvent) {
        let now = self.now();
        match e {
            IoEvent::Closed { conn, why } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.span.in_scope(|| match &why {
                    CloseCause::Eof => debug!("peer closed the connection"),
                    CloseCause::Io(e) => info!(error = %e, "transport error"),
                    CloseCause::Framing(e) => warn!(error = %e, "broken framing: closing"),
                });
                if matches!(why, CloseCause::Framing(_)) {
                    c.pc.abort(now);
                } else {
                    c.pc.handle_closed(now);
                }
                self.drive(now, conn);
            }
            IoEvent::Message { conn, msg, .. } => {
                let msg = match msg {
                    Ok(m) => m,
                    Err(e) => {
                        self.undecodable(now, conn, &e);
                        return;
                    }
                };
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let handled = c.pc.handle_message(now, msg);
                match handled {
                    Handled::Consumed => {}
                    Handled::Application(m) => {
                        if let Some(p) = c.peer {
                            if m.is_request() {
                                self.on_request(now, conn, p, m);
                            } else {
                                self.on_answer(now, p, m);
                            }
                        }
                    }
                    Handled::CerReceived { peer } => self.cer_received(now, conn, peer.id),
                }
                self.drive(now, conn);
            }
        }
    }

    fn undecodable(&mut self, now: Duration, conn: ConnId, e: &crate::diameter::DecodeError) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.pc.handle_traffic(now);
        let open = c.pc.is_open();
        if let (Some(req), Some(pe), true) = (
            e.partial(),
            e.to_protocol_error(Dictionary::standard()),
            open,
        ) && req.is_request()
        {
            // RFC 6733 §7.1.5: a malformed request is answered with the error.
            self.stats.requests_in += 1;
            self.stats.local_answers += 1;
            let ans = pe.answer(
                req,
                &self.cfg.global.origin_host,
                &self.cfg.global.origin_realm,
            );
            self.reply(conn, &ans);
        } else {
            c.span
                .in_scope(|| warn!(error = %e, "undecodable message ignored"));
        }
    }

    fn cer_received(&mut self, now: Duration, conn: ConnId, peer: PeerId) {
        let slot = &self.slots[peer.0];
        let other_open = slot
            .conn
            .filter(|o| *o != conn)
            .is_some_and(|o| self.conns.get(&o).is_some_and(|c| c.pc.is_open()));
        let mut accept = true;
        if other_open {
            // RFC 6733 §5.6.4 R-Reject: the peer already has an open connection.
            accept = false;
        } else if let Some(i) = slot.initiator.filter(|i| *i != conn)
            && self
                .conns
                .get(&i)
                .is_some_and(|c| c.pc.state() == PeerState::WaitCea)
        {
            // RFC 6733 §5.6.4 election. Simplification: when we lose, the responder
            // connection is refused at once instead of held until our CEA arrives.
            let won = election_won(
                &self.cfg.global.origin_host,
                &self.cfg.peers[peer.0].origin_host,
            );
            if let Some(c) = self.conns.get_mut(&i) {
                c.pc.handle_election(now, won);
            }
            self.drive(now, i);
            accept = won;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.peer = Some(peer);
        c.span
            .record("origin_host", self.cfg.peers[peer.0].origin_host.as_str());
        if accept {
            c.pc.accept_cer(now);
        } else {
            c.pc.abort(now);
        }
    }

    // ----- the peer state machine's outputs -----

    fn drive(&mut self, now: Duration, id: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            let mut out = Vec::new();
            while let Some(m) = c.pc.poll_transmit() {
                out.push(m);
            }
            let mut events = Vec::new();
            while let Some(e) = c.pc.poll_event() {
                events.push(e);
            }
            if out.is_empty() && events.is_empty() {
                break;
            }
            for m in &out {
                self.write(id, m);
            }
            for e in events {
                self.on_peer_event(now, id, e);
            }
        }
        self.refresh_peer(now, id);
    }

    fn refresh_peer(&mut self, now: Duration, id: ConnId) {
        let Some(p) = self.conns.get(&id).and_then(|c| c.peer) else {
            return;
        };
        self.refresh_slot(now, p);
    }

    fn refresh_slot(&mut self, now: Duration, p: PeerId) {
        let slot = &self.slots[p.0];
        let conn = slot
            .conn
            .or(slot.initiator)
            .and_then(|c| self.conns.get(&c));
        let good = slot
            .conn
            .and_then(|c| self.conns.get(&c))
            .is_some_and(|c| c.pc.in_service());
        let state = match conn {
            None => metrics::PeerState::Closed,
            Some(c) => match (c.pc.state(), c.pc.watchdog_state()) {
                (PeerState::Open, WatchdogState::Okay) => metrics::PeerState::Open,
                (PeerState::Open, WatchdogState::Suspect) => metrics::PeerState::Suspect,
                (PeerState::Open, WatchdogState::Reopen) => metrics::PeerState::Reopen,
                (PeerState::Open, _) => metrics::PeerState::Down,
                (PeerState::WaitCea, _) => metrics::PeerState::WaitCea,
                _ => metrics::PeerState::Closed,
            },
        };
        let was_good = self.slots[p.0].good;
        self.slots[p.0].good = good;
        self.peers.set_good(p, good);
        if self.slots[p.0].state != Some(state) {
            self.set_state_metric(p, state);
        }
        if was_good && !good {
            // RFC 6733 §5.5.4 / RFC 3539 §3.4: out of service → fail pending requests over.
            self.peer_failed(now, p);
        }
    }

    fn set_state_metric(&mut self, p: PeerId, state: metrics::PeerState) {
        self.slots[p.0].state = Some(state);
        self.metrics
            .set_peer_state(&self.cfg.peers[p.0].name, state);
    }

    fn on_peer_event(&mut self, now: Duration, id: ConnId, e: PeerEvent) {
        let Some(c) = self.conns.get(&id) else { return };
        let peer = c.peer;
        let span = c.span.clone();
        let _g = span.enter();
        match e {
            PeerEvent::Opened { peer: known, .. } => {
                info!("capabilities exchanged: open");
                let p = known.id;
                if let Some(c) = self.conns.get_mut(&id) {
                    c.peer = Some(p);
                }
                let slot = &mut self.slots[p.0];
                slot.conn = Some(id);
                slot.ever_connected = true;
                slot.failures = 0;
            }
            PeerEvent::Rejected {
                result_code,
                error_message,
            } => {
                warn!(
                    result_code,
                    error_message = error_message.as_deref().unwrap_or(""),
                    "CER refused by the peer"
                );
            }
            PeerEvent::WatchdogSuspect => warn!("watchdog: SUSPECT"),
            PeerEvent::WatchdogOkay => info!("watchdog: OKAY"),
            PeerEvent::WatchdogDown => warn!("watchdog: DOWN"),
            PeerEvent::LoadReport(load) => {
                if let Some(p) = peer {
                    self.peers.set_load(p, Some(load));
                }
            }
            PeerEvent::Closed { reason, reconnect } => {
                info!(?reason, "connection closed");
                let Some(c) = self.conns.remove(&id) else {
                    return;
                };
                c.io.reader.abort();
                // Dropping `c.io.tx` lets the writer flush what is queued and close.
                drop(c.io);
                self.pipeline.downstream_closed(id);
                if let Some(p) = peer {
                    let slot = &mut self.slots[p.0];
                    if slot.conn == Some(id) {
                        slot.conn = None;
                    }
                    let was_initiator = slot.initiator == Some(id);
                    if was_initiator {
                        slot.initiator = None;
                    }
                    self.refresh_slot(now, p);
                    if was_initiator && self.slots[p.0].conn.is_none() {
                        let hold = match reconnect {
                            Reconnect::After(d) => Some(d),
                            Reconnect::PeerAskedNot { hold_off, .. } => Some(hold_off),
                            Reconnect::No => None,
                        };
                        self.schedule_reconnect(p.0, hold);
                    }
                }
            }
        }
    }

    // ----- writing -----

    /// Queues `m` on connection `id`; a full queue aborts the connection (module docs).
    fn write(&mut self, id: ConnId, m: &Message) -> bool {
        let Some(c) = self.conns.get(&id) else {
            return false;
        };
        match m.try_encode() {
            Ok(b) => self.write_bytes(id, b),
            Err(e) => {
                c.span
                    .in_scope(|| warn!(error = %e, "cannot encode message"));
                false
            }
        }
    }

    /// Queues an encoded message on connection `id` (see [`Core::write`]).
    fn write_bytes(&mut self, id: ConnId, bytes: Vec<u8>) -> bool {
        let Some(c) = self.conns.get(&id) else {
            return false;
        };
        match c.io.tx.try_send(bytes) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                if !self.to_abort.contains(&id) {
                    c.span.in_scope(|| {
                        warn!(
                            limit = self.opts.write_queue,
                            "write queue full: peer too slow, closing"
                        )
                    });
                    self.stats.write_queue_overflows += 1;
                    self.to_abort.push(id);
                }
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    fn abort_overflowed(&mut self) {
        let now = self.now();
        for id in std::mem::take(&mut self.to_abort) {
            if let Some(c) = self.conns.get_mut(&id) {
                c.pc.abort(now);
            }
            self.drive(now, id);
        }
    }

    /// An answer generated here for a request received on `conn`.
    fn reply(&mut self, conn: ConnId, ans: &Message) {
        if self.write(conn, ans) {
            self.count_answer_out(conn, ans);
        }
    }

    fn count_answer_out(&mut self, conn: ConnId, ans: &Message) {
        self.stats.answers_out += 1;
        if let Some(p) = self.conns.get(&conn).and_then(|c| c.peer) {
            let rc = ans
                .result_code()
                .or_else(|| ans.experimental_result().map(|(_, c)| c))
                .unwrap_or(0);
            self.metrics.inc_answer(&self.cfg.peers[p.0].name, rc);
        }
    }

    // ----- requests and answers -----

    fn on_request(&mut self, now: Duration, conn: ConnId, from: PeerId, req: Message) {
        self.stats.requests_in += 1;
        self.slots[from.0].requests_in += 1;
        let from_name = &self.cfg.peers[from.0].name;
        self.metrics.inc_request(from_name, metrics::Direction::In);
        if req.is_marked() {
            // DESIGN §3: over an ingress limit in the fast path → answer at once.
            match self.marked.handle(from, &req) {
                MarkedResponse::Answer(a) => {
                    self.stats.local_answers += 1;
                    self.reply(conn, &a);
                }
                MarkedResponse::Discard => {}
            }
            return;
        }
        // RFC 6733 §7.1: protocol errors are answered here. A relay serves every
        // application (RFC 6733 §2.4).
        if let Err(pe) = validate_request(&req, Dictionary::standard(), &[app::RELAY]) {
            self.stats.local_answers += 1;
            let a = pe.answer(
                &req,
                &self.cfg.global.origin_host,
                &self.cfg.global.origin_realm,
            );
            self.reply(conn, &a);
            return;
        }
        let to = match self.route(now, &req, None) {
            Ok(p) => p,
            Err(code) => {
                self.stats.local_answers += 1;
                let g = &self.cfg.global;
                let a = answer_for(
                    &req,
                    code,
                    &g.origin_host,
                    &g.origin_realm,
                    Some("no route to the destination"),
                    None,
                );
                self.reply(conn, &a);
                return;
            }
        };
        let timeout = self.timeout_of(to);
        let down = DownstreamRef { conn_id: conn };
        let from_host = &self.cfg.peers[from.0].origin_host;
        match self
            .pipeline
            .forward(now, down, from_host, req, to, timeout)
        {
            Ok(()) => self.pump(now, Vec::new()),
            Err(e) => {
                if let RelayError::TooBusy { .. } | RelayError::LoopDetected { .. } = e
                    && let Some(a) = e.into_answer()
                {
                    self.reply(conn, &a);
                }
            }
        }
    }

    fn timeout_of(&self, p: PeerId) -> Duration {
        self.groups[p.0].map_or(self.opts.default_answer_timeout, |g| self.timeouts[g.0])
    }

    /// Routes `req`: `Some(Ok(peer))`, `Some(Err(result_code))` when unroutable. With
    /// `exclude` (a retry) no binding is touched: only the route table and selector.
    fn route(
        &mut self,
        now: Duration,
        req: &Message,
        exclude: Option<PeerId>,
    ) -> Result<PeerId, u32> {
        let realm = req.destination_realm().unwrap_or("");
        let cc = req.cc_request_type().and_then(CcRequestType::from_value);
        self.routers[&Strategy::RoundRobin].table().candidates_into(
            realm,
            req.application_id,
            &mut self.scratch,
        );
        let strategy = self
            .scratch
            .first()
            .and_then(|c| self.groups[c.peer.0])
            .map_or(Strategy::RoundRobin, |g| self.group_strategy[g.0]);
        let router = self
            .routers
            .get_mut(&strategy)
            .expect("router per strategy");
        if let Some(ex) = exclude {
            let cands = std::mem::take(&mut self.scratch);
            let pick = router
                .selector_mut()
                .select_excluding(&cands, &self.peers, now, &[ex]);
            self.scratch = cands;
            return pick.ok_or(crate::diameter::result_code::UNABLE_TO_DELIVER);
        }
        let rr = RouteRequest {
            destination_realm: realm,
            destination_host: req.destination_host(),
            application_id: req.application_id,
            session_id: req.session_id(),
            cc_request_type: cc,
        };
        let out = router.route_request(&rr, &self.peers, &mut self.bindings, now);
        if let Some(e) = out.binding_error {
            warn!(error = %crate::error_chain(&e), "session binding store");
        }
        match out.decision {
            Decision::Forward { peer, .. } => Ok(peer),
            Decision::Reject(u) => Err(u.result_code()),
        }
    }

    /// Carries out what the pipeline asks: requests upstream, answers downstream,
    /// latencies; routes the retries it hands back (and those in `retries`).
    fn pump(&mut self, now: Duration, mut retries: Vec<Retry>) {
        loop {
            for r in std::mem::take(&mut retries) {
                // RFC 6733 §5.5.4: one retry on an alternate peer, T flag set.
                let to = self.route(now, &r.request, Some(r.exclude)).ok();
                let timeout = to.map_or(self.opts.default_answer_timeout, |p| self.timeout_of(p));
                self.pipeline.retry(now, r, to, timeout);
            }
            let Some(o) = self.pipeline.poll_output() else {
                break;
            };
            match o {
                Output::Send { to, bytes } => self.send_upstream(to, bytes),
                Output::Deliver(d) => self.reply(d.to.conn_id, &d.answer),
                Output::Latency { peer, took } => {
                    self.metrics
                        .observe_answer_latency(&self.cfg.peers[peer.0].name, took);
                    self.peers
                        .set_pending(peer, self.pipeline.outstanding(peer));
                }
            }
        }
        for g in 0..self.cfg.peer_groups.len() {
            let depth = self.pipeline.queue_len(GroupId(g)) as u64;
            self.metrics
                .set_queue_depth(&self.cfg.peer_groups[g].name, depth);
        }
    }

    fn send_upstream(&mut self, to: PeerId, bytes: Vec<u8>) {
        self.peers.set_pending(to, self.pipeline.outstanding(to));
        let Some(conn) = self.slots[to.0].conn else {
            // The peer went away while the request waited; the relay's timer answers.
            return;
        };
        if self.write_bytes(conn, bytes) {
            self.slots[to.0].requests_out += 1;
            self.metrics
                .inc_request(&self.cfg.peers[to.0].name, metrics::Direction::Out);
        }
    }

    fn on_answer(&mut self, now: Duration, from: PeerId, ans: Message) {
        self.pipeline.on_answer(now, from, ans);
        self.peers
            .set_pending(from, self.pipeline.outstanding(from));
        self.pump(now, Vec::new());
    }

    fn peer_failed(&mut self, now: Duration, p: PeerId) {
        let retries = self.pipeline.peer_failed(now, p);
        self.peers.set_pending(p, self.pipeline.outstanding(p));
        self.pump(now, retries);
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
        self.bindings.purge_expired(now);
        let s = self.snapshot();
        self.update_own_load(s.relay.pending as usize);
        let lhs = s.requests_in;
        let rhs = s.local_answers
            + s.marked_discarded
            + s.relay.answers_relayed
            + s.relay.answers_generated
            + s.relay.answers_discarded
            + s.relay.requests_dropped
            + s.relay.pending;
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

    // ----- status -----

    fn status(&self) -> String {
        let now = self.now();
        let s = self.snapshot();
        let mut o = String::new();
        let _ = writeln!(
            o,
            "dra {} ({})  up {}s  connections {}",
            self.cfg.global.origin_host,
            self.cfg.global.origin_realm,
            now.as_secs(),
            self.conns.len()
        );
        let _ = writeln!(
            o,
            "requests in {}  answered locally {} (marked {})  relayed {}  generated {}  discarded {}  pending {}  retries {}  invariant {}",
            s.requests_in,
            s.local_answers,
            s.marked_answered,
            s.relay.answers_relayed,
            s.relay.answers_generated,
            s.relay.answers_discarded,
            s.relay.pending,
            s.relay.retries,
            if s.invariant_ok() { "ok" } else { "VIOLATED" }
        );
        let _ = writeln!(
            o,
            "{:<12} {:<6} {:<8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>6}",
            "peer", "role", "state", "req_in", "req_out", "in/s", "out/s", "pending", "load"
        );
        for (i, p) in self.cfg.peers.iter().enumerate() {
            let sl = &self.slots[i];
            let state = sl.state.map_or("closed", |st| st.name());
            let load = self
                .peers
                .view(PeerId(i))
                .and_then(|v| v.load)
                .map_or("-".to_owned(), |l| {
                    format!("{:.0}%", l.load_fraction() * 100.0)
                });
            let role = match p.role {
                CfgRole::Client => "client",
                CfgRole::Server => "server",
            };
            let pending = if p.role == CfgRole::Server {
                self.pipeline.outstanding(PeerId(i))
            } else {
                0
            };
            let _ = writeln!(
                o,
                "{:<12} {:<6} {:<8} {:>9} {:>9} {:>8.0} {:>8.0} {:>8} {:>6}",
                p.name,
                role,
                state,
                sl.requests_in,
                sl.requests_out,
                sl.rate_in,
                sl.rate_out,
                pending,
                load
            );
        }
        for (name, st) in &s.egress {
            let g = self
                .cfg
                .peer_groups
                .iter()
                .position(|g| &g.name == name)
                .expect("group");
            let q = self.pipeline.queue_len(GroupId(g));
            let _ = writeln!(
                o,
                "egress {name}: queued now {q}  offered {}  refused {}  expired {}",
                st.offered, st.refused, st.expired
            );
        }
        o
    }
}
