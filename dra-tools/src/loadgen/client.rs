//! Client mode (gateways): N peers, each its own TCP connection and Origin-Host, driven
//! by [`PeerConnection`] (CER/CEA, DWR/DWA, DPR/DPA); a driver task paces the scenario,
//! keeps the sessions and the measurements.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dra::transport::Connection;
use dra_common::wire::cmd;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conn::{Close, Flow, Link, Mode, drive};
use super::failover::{DraMode, Failover, FailoverCounts};
use super::scenario::{App, Class, Event, Kind, Scenario, Schedule};
use super::session::{Send, SessionKey, SessionPool, build_ccr};
use super::stats::{Report, Row, Stats};
use super::{AllowList, loadgen_peer_config};
use dra::diameter::Message;
use dra::diameter::peer::{ConnectionOptions, DisconnectCause, PeerConnection, PeerEvent, Role};

/// Client configuration (the scenario is separate).
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The DRA (or server) to connect to.
    pub connect: SocketAddr,
    /// Source address of every connection (None = chosen by the kernel). A DRA tells
    /// peers apart by source address, so several gateways on one host need their own.
    pub bind: Option<std::net::IpAddr>,
    /// Number of gateway peers (connections).
    pub peers: usize,
    /// Origin-Host pattern; `{n}` becomes 1..=peers (e.g. "pgw{n}.lab.example").
    pub origin_host_pattern: String,
    /// Origin-Realm of every peer.
    pub origin_realm: String,
    /// Watchdog interval Tw (≥ 6 s): a DWR goes out after Tw without traffic.
    pub tw: Duration,
    /// Seed for session choice and identifiers.
    pub seed: u64,
    /// Write one JSON object per second to this file.
    pub rows_path: Option<PathBuf>,
    /// Also hand every row to this channel (tests, embedding).
    pub rows_tx: Option<mpsc::UnboundedSender<Row>>,
    /// Print a progress line on stderr every second.
    pub progress: bool,
    /// After the last phase, wait this long at most for answers in flight (default: the
    /// scenario's request timeout).
    pub drain: Option<Duration>,
    /// Ends the scenario early when it turns `true` (e.g. on SIGINT): nothing more is
    /// scheduled, answers in flight are awaited as after the last phase, and the report
    /// covers what ran.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// DOIC reacting nodes (`super::doic::GatewayReactor`): every request announces
    /// loss, rate and peer reports; the gateways shed their new sessions per the
    /// reports they receive (counted in [`super::stats::ClassSummary::doic_shed`]).
    pub doic: bool,
    /// A second DRA: every gateway then also connects to it and fails over between the
    /// two (RFC 6733 §5.5.4, see [`super::failover`]).
    pub secondary: Option<SocketAddr>,
    /// How a gateway with a [`ClientConfig::secondary`] uses its two DRAs.
    pub dra_mode: DraMode,
    /// TLS towards the DRA (its certificate must carry the connector's name); `None`:
    /// plain TCP.
    pub tls: Option<dra::transport::tls::Connector>,
    /// SCTP towards the DRA instead of TCP.
    pub sctp: Option<super::Sctp>,
}

impl ClientConfig {
    /// Defaults: origin hosts pgw{n}.lab.example, realm lab.example, Tw 30 s, no rows,
    /// no progress.
    pub fn new(connect: SocketAddr, peers: usize) -> ClientConfig {
        ClientConfig {
            connect,
            bind: None,
            peers,
            origin_host_pattern: "pgw{n}.lab.example".to_owned(),
            origin_realm: "lab.example".to_owned(),
            tw: Duration::from_secs(30),
            seed: 1,
            rows_path: None,
            rows_tx: None,
            progress: false,
            drain: None,
            stop: None,
            doic: false,
            secondary: None,
            dra_mode: DraMode::Primary,
            tls: None,
            sctp: None,
        }
    }

    /// Origin-Host of peer `i` (0-based).
    pub fn origin_host(&self, i: usize) -> String {
        super::origin_host_of(&self.origin_host_pattern, i)
    }
}

/// The client could not run.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The rows file could not be written.
    #[error("cannot write rows to {path}")]
    Rows {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No peers configured.
    #[error("peers must be at least 1")]
    NoPeers,
    /// An Origin-Host or Tw the peer state machine refuses.
    #[error("peer configuration")]
    Peer {
        /// Why.
        #[source]
        source: dra::diameter::peer::PeerConfigError,
    },
}

/// How long a stopping peer may take to write what it has queued (its DPR last).
const STOP_FLUSH: Duration = Duration::from_secs(2);

/// What a connection task is told: its work, or to end.
enum Order<T> {
    /// The work: a request to send, bytes to write.
    Do(T),
    /// Close at once, without DPR, and reconnect (a reconnect storm).
    Drop,
    /// DPR, then end.
    Stop,
}

/// A gateway connection's order: [`Order::Do`] sends a scheduled request.
type Cmd = Order<Send>;

enum Ev {
    Up(usize),
    Down(usize),
    Answer {
        key: SessionKey,
        class: Class,
        rc: u32,
        latency: Duration,
        server: Option<String>,
        /// The connected peer's own answer (its Origin-Host is the one of the CEA: the
        /// DRA answered, e.g. 3002/3004), not one relayed from a server.
        own: bool,
    },
    Timeout {
        key: SessionKey,
        class: Class,
    },
    Lost {
        key: SessionKey,
        class: Class,
    },
    Load {
        server: String,
        value: u16,
    },
    Late,
    /// Shed by the gateway's DOIC reacting node (never sent).
    Shed {
        key: SessionKey,
        class: Class,
    },
    /// A failover gateway's counters, sent once when it ends.
    Failover(Box<FailoverCounts>),
}

#[derive(Clone)]
struct PeerCtx {
    idx: usize,
    origin_host: String,
    origin_realm: String,
    connect: SocketAddr,
    /// The second DRA, if any (failover).
    secondary: Option<SocketAddr>,
    dra_mode: DraMode,
    bind: Option<std::net::IpAddr>,
    tw: Duration,
    /// Destination-Realm of Gx and Gy requests.
    destination_realm: [String; 2],
    destination_host: Option<String>,
    service_context_id: String,
    timeout: Duration,
    reconnect_delay: Duration,
    start: Instant,
    start_secs: u64,
    seed: u64,
    /// The gateway's DOIC reacting node, kept across reconnections.
    doic: Option<Arc<std::sync::Mutex<super::doic::GatewayReactor>>>,
    /// TLS towards the DRA.
    tls: Option<dra::transport::tls::Connector>,
    /// SCTP towards the DRA.
    sctp: Option<super::Sctp>,
}

impl PeerCtx {
    /// The CCR of scheduled request `s` from this gateway, with the given Hop-by-Hop and
    /// End-to-End ids.
    fn ccr(&self, s: &Send, hop_by_hop: u32, end_to_end: u32) -> Message {
        build_ccr(
            s,
            &self.origin_host,
            &self.origin_realm,
            &self.destination_realm[usize::from(s.class.app() == App::Gy)],
            self.destination_host.as_deref(),
            &self.service_context_id,
            hop_by_hop,
            end_to_end,
        )
    }
}

/// Runs `scenario` against `cfg.connect` and returns the report (needs a tokio runtime).
pub async fn run(cfg: ClientConfig, scenario: Scenario) -> Result<Report, ClientError> {
    if cfg.peers == 0 {
        return Err(ClientError::NoPeers);
    }
    super::check_identity(
        &cfg.origin_host_pattern,
        &cfg.origin_realm,
        cfg.connect.ip(),
        cfg.tw,
    )
    .map_err(|source| ClientError::Peer { source })?;
    let mut rows_file = match &cfg.rows_path {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
            |source| ClientError::Rows {
                path: p.clone(),
                source,
            },
        )?)),
        None => None,
    };
    let start = Instant::now();
    let start_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let timeout = Duration::from_millis(scenario.request_timeout_ms);
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
    let mut peers: Vec<(mpsc::UnboundedSender<Cmd>, JoinHandle<()>)> = Vec::new();
    let hosts: Vec<String> = (0..cfg.peers).map(|i| cfg.origin_host(i)).collect();
    for (i, host) in hosts.iter().enumerate() {
        let (tx, rx) = mpsc::unbounded_channel();
        let ctx = PeerCtx {
            idx: i,
            origin_host: host.clone(),
            origin_realm: cfg.origin_realm.clone(),
            connect: cfg.connect,
            tls: cfg.tls.clone(),
            sctp: cfg.sctp.clone(),
            secondary: cfg.secondary,
            dra_mode: cfg.dra_mode,
            bind: cfg.bind,
            tw: cfg.tw,
            destination_realm: [App::Gx, App::Gy]
                .map(|a| scenario.destination_realm_of(a).to_owned()),
            destination_host: scenario.destination_host.clone(),
            service_context_id: scenario.service_context_id.clone(),
            timeout,
            reconnect_delay: Duration::from_millis(scenario.reconnect_delay_ms),
            start,
            start_secs,
            seed: cfg.seed.wrapping_mul(31).wrapping_add(i as u64),
            doic: cfg.doic.then(|| {
                Arc::new(std::sync::Mutex::new(super::doic::GatewayReactor::new(
                    host,
                )))
            }),
        };
        let h = if ctx.secondary.is_some() {
            tokio::spawn(gateway_task(ctx, rx, ev_tx.clone()))
        } else {
            tokio::spawn(peer_task(ctx, rx, ev_tx.clone()))
        };
        peers.push((tx, h));
    }
    drop(ev_tx);

    let mut end = scenario.duration();
    let drain = cfg.drain.unwrap_or(timeout);
    let mut stop = cfg.stop.clone();
    let mut stopped = false;
    let name = scenario.name.clone();
    let preopen = scenario.open_sessions;
    let mut sched = Schedule::new(scenario);
    let mut pool = SessionPool::new(start_secs as u32, cfg.seed);
    for (i, host) in hosts.iter().enumerate() {
        pool.preopen(i, host, preopen);
    }
    let mut stats = Stats::new();
    let mut up = vec![false; cfg.peers];
    let mut owed = [0u64; 6];
    let mut rr = 0usize;
    let mut next_row = 1u64;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

    let dispatch =
        |s: Send, stats: &mut Stats, peers: &[(mpsc::UnboundedSender<Cmd>, JoinHandle<()>)]| {
            stats.sent(s.class);
            let (key, class, peer) = (s.key, s.class, s.peer);
            if peers[peer].0.send(Cmd::Do(s)).is_err() {
                // The peer task is gone: counted as lost at once.
                stats.lost(class);
                return Some((key, class));
            }
            None
        };

    loop {
        tokio::select! {
            ev = ev_rx.recv() => {
                if let Some(ev) = ev {
                    apply(ev, &mut stats, &mut pool, &mut up);
                }
                while let Ok(ev) = ev_rx.try_recv() {
                    apply(ev, &mut stats, &mut pool, &mut up);
                }
            }
            _ = tick.tick() => {}
            r = stop_changed(&mut stop), if !stopped => {
                // A closed sender (Err) or `true`: stop. `false` changes nothing.
                if r.is_err() || stop.as_ref().is_some_and(|s| *s.borrow()) {
                    stopped = true;
                    end = end.min(start.elapsed());
                }
            }
        }
        let now = start.elapsed();
        let due = if stopped {
            Default::default()
        } else {
            sched.advance(now)
        };
        for e in due.events {
            match e {
                Event::Flush(f) => pool.flush(f),
                Event::ReconnectStorm => {
                    for (tx, _) in &peers {
                        let _ = tx.send(Cmd::Drop);
                    }
                    up.iter_mut().for_each(|u| *u = false);
                }
            }
        }
        for (o, d) in owed.iter_mut().zip(due.requests) {
            *o += d;
        }
        for class in Class::ALL {
            let i = class.index();
            while owed[i] > 0 {
                let send = match class.kind() {
                    Kind::Initial => {
                        let Some(p) = (0..up.len()).map(|k| (rr + k) % up.len()).find(|&p| up[p])
                        else {
                            break;
                        };
                        rr = p + 1;
                        pool.initial(class.app(), p, &hosts[p])
                    }
                    _ => match pool.pick(class, &up) {
                        Some(s) => s,
                        None => break,
                    },
                };
                owed[i] -= 1;
                if let Some((key, class)) = dispatch(send, &mut stats, &peers) {
                    pool.complete(key, class, None, None);
                }
            }
        }
        for send in pool.flush_sends(&up) {
            if let Some((key, class)) = dispatch(send, &mut stats, &peers) {
                pool.complete(key, class, None, None);
            }
        }
        while now >= Duration::from_secs(next_row) {
            let (_, phase) = sched
                .phase_at(Duration::from_secs(next_row).saturating_sub(Duration::from_millis(1)));
            let row = stats.row(
                next_row,
                phase,
                open_sessions(&pool),
                up.iter().filter(|u| **u).count() as u64,
            );
            if cfg.progress {
                eprintln!("{}", progress_line(&row));
            }
            if let Some(f) = rows_file.as_mut() {
                let line = serde_json::to_string(&row).unwrap_or_default();
                writeln!(f, "{line}")
                    .and_then(|()| f.flush())
                    .map_err(|source| ClientError::Rows {
                        path: cfg.rows_path.clone().unwrap_or_default(),
                        source,
                    })?;
            }
            if let Some(tx) = &cfg.rows_tx {
                let _ = tx.send(row);
            }
            next_row += 1;
        }
        if now >= end && (stats.in_flight() == 0 || now >= end + drain) {
            break;
        }
    }
    let elapsed = start.elapsed();
    for (tx, _) in &peers {
        let _ = tx.send(Cmd::Stop);
    }
    // Everything still in flight comes back as Lost; the channel closes when every peer
    // task has ended.
    while let Some(ev) = ev_rx.recv().await {
        apply(ev, &mut stats, &mut pool, &mut up);
    }
    for (_, h) in peers {
        let _ = h.await;
    }
    let up_now = up.iter().filter(|u| **u).count() as u64;
    stats.peers_mut().up_at_end = up_now;
    Ok(stats.report(&name, elapsed, pool.counts(), open_sessions(&pool), owed))
}

/// The next change of the stop signal (never, without one).
async fn stop_changed(
    stop: &mut Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<(), tokio::sync::watch::error::RecvError> {
    match stop.as_mut() {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

fn open_sessions(pool: &SessionPool) -> BTreeMap<String, u64> {
    [App::Gx, App::Gy]
        .iter()
        .map(|a| (a.name().to_owned(), pool.open_count(*a) as u64))
        .collect()
}

fn progress_line(row: &Row) -> String {
    let sent: u64 = row.classes.values().map(|c| c.sent).sum();
    let answered: u64 = row.classes.values().flat_map(|c| c.answered.values()).sum();
    let timeouts: u64 = row.classes.values().map(|c| c.timeouts).sum();
    let lost: u64 = row.classes.values().map(|c| c.unanswered).sum();
    let in_flight: u64 = row.classes.values().map(|c| c.in_flight).sum();
    let p99 = row.classes.values().map(|c| c.p99_ms).fold(0.0, f64::max);
    format!(
        "t={}s phase={} peers_up={} sent={sent}/s answered={answered}/s timeouts={timeouts} \
         lost={lost} in_flight={in_flight} p99_max={p99:.1}ms sessions={:?}",
        row.t, row.phase, row.peers_up, row.open_sessions
    )
}

fn apply(ev: Ev, stats: &mut Stats, pool: &mut SessionPool, up: &mut [bool]) {
    match ev {
        Ev::Up(p) => {
            up[p] = true;
            stats.peers_mut().opened += 1;
        }
        Ev::Down(p) => {
            up[p] = false;
            stats.peers_mut().dropped += 1;
        }
        Ev::Answer {
            key,
            class,
            rc,
            latency,
            server,
            own,
        } => {
            // Only servers' answers count per server and for stickiness.
            let server = if own {
                stats.own_answer(rc);
                None
            } else {
                server
            };
            stats.answered(class, rc, latency, server.as_deref());
            pool.complete(key, class, Some(rc), server.as_deref());
        }
        Ev::Timeout { key, class } => {
            stats.timeout(class);
            pool.complete(key, class, None, None);
        }
        Ev::Lost { key, class } => {
            stats.lost(class);
            pool.complete(key, class, None, None);
        }
        Ev::Load { server, value } => {
            stats.peers_mut().load_reports.insert(server, value);
        }
        Ev::Late => stats.peers_mut().late_answers += 1,
        Ev::Shed { key, class } => {
            stats.doic_shed(class);
            pool.complete(key, class, None, None);
        }
        Ev::Failover(c) => stats.peers_mut().failover.merge(&c),
    }
}

/// Why one connection ended.
enum End {
    /// Storm or failure: reconnect.
    Reconnect,
    /// Stop: the task ends.
    Stop,
}

async fn peer_task(
    ctx: PeerCtx,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    ev: mpsc::UnboundedSender<Ev>,
) {
    let mut n = 0u64;
    loop {
        let end = match connect(&ctx, ctx.connect).await {
            Some(s) => connection(&ctx, s, n, &mut rx, &ev).await,
            None => End::Reconnect,
        };
        n += 1;
        if let End::Stop = end {
            return;
        }
        // Hold-off; requests meant for this peer meanwhile are lost.
        let go_on = hold_off(&ctx, &mut rx, |c| match c {
            Cmd::Stop => false,
            Cmd::Do(s) => {
                let _ = ev.send(Ev::Lost {
                    key: s.key,
                    class: s.class,
                });
                true
            }
            Cmd::Drop => true,
        })
        .await;
        if !go_on {
            return;
        }
    }
}

/// A connection (TCP, TLS or SCTP) to `addr` from `ctx.bind`; `None` when it fails or
/// takes over 5 s.
async fn connect(ctx: &PeerCtx, addr: SocketAddr) -> Option<Connection> {
    tokio::select! {
        s = super::dial(ctx.bind, addr, None, ctx.tls.as_ref(), ctx.sctp.as_ref()) => s.ok(),
        _ = tokio::time::sleep(Duration::from_secs(5)) => None,
    }
}

/// Waits out the reconnect hold-off (`ctx.reconnect_delay`), handing every command that
/// arrives meanwhile to `on_cmd`; `false` when the task is to stop instead (its channel
/// closed, or `on_cmd` said so).
async fn hold_off<C>(
    ctx: &PeerCtx,
    rx: &mut mpsc::UnboundedReceiver<C>,
    mut on_cmd: impl FnMut(C) -> bool,
) -> bool {
    let until = Instant::now() + ctx.reconnect_delay;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return true,
            c = rx.recv() => {
                if !c.is_some_and(&mut on_cmd) {
                    return false;
                }
            }
        }
    }
}

/// The Origin-Host the peer of `link` gave in its CER/CEA (`None` before that).
fn peer_name(link: &Link) -> Option<&str> {
    link.pc.peer_identity().map(|p| p.origin_host.as_str())
}

/// [`peer_name`], "" before the CER/CEA.
fn peer_host(link: &Link) -> String {
    peer_name(link).unwrap_or_default().to_owned()
}

/// Acts on a connection task's order (`None`, its sender gone, counts as `Stop`, which
/// sets `*stopping`); returns the work for the caller.
fn obey<T>(order: Option<Order<T>>, link: &mut Link, stopping: &mut bool) -> Option<T> {
    let now = link.now();
    match order {
        None | Some(Order::Stop) => {
            *stopping = true;
            close(link, now);
            None
        }
        // Closed at once, without DPR: the connection then reconnects.
        Some(Order::Drop) => {
            link.pc.abort(now);
            None
        }
        Some(Order::Do(work)) => Some(work),
    }
}

/// Closes `link`'s connection: DPR (Rebooting) when it is open, else at once.
fn close(link: &mut Link, now: Duration) {
    if link.pc.is_open() {
        link.pc.start_disconnect(now, DisconnectCause::Rebooting);
    } else {
        link.pc.abort(now);
    }
}

async fn connection(
    ctx: &PeerCtx,
    stream: Connection,
    n: u64,
    rx: &mut mpsc::UnboundedReceiver<Cmd>,
    ev: &mpsc::UnboundedSender<Ev>,
) -> End {
    let local_ip = stream.local.ip();
    let cfg = Arc::new(loadgen_peer_config(
        &ctx.origin_host,
        &ctx.origin_realm,
        local_ip,
        ctx.tw,
    ));
    let opts = ConnectionOptions::new(ctx.seed.wrapping_add(n << 32), ctx.start_secs).reopen(n > 0);
    let Ok(pc) = PeerConnection::new(
        Role::Initiator,
        cfg,
        Arc::new(AllowList::default()),
        ctx.connect.ip(),
        opts,
    ) else {
        return End::Stop;
    };
    let (mut link, _) = Link::with_writer(stream, pc, ctx.start.into_std());
    let mut conn = Conn {
        ctx,
        rx,
        ev,
        pending: HashMap::new(),
        deadlines: VecDeque::new(),
        is_up: false,
        stopping: false,
    };
    drive(&mut link, &mut conn).await;
    for (_, (key, class, _)) in conn.pending.drain() {
        let _ = ev.send(Ev::Lost { key, class });
    }
    if conn.is_up {
        let _ = ev.send(Ev::Down(ctx.idx));
    }
    if conn.stopping {
        // A backlog the network does not take (e.g. a peer whose segments are
        // dropped) must not keep the client from ending: give the DPR a moment.
        link.close(Close::Flush(Some(STOP_FLUSH))).await;
        End::Stop
    } else {
        link.close(Close::Abort).await;
        End::Reconnect
    }
}

/// One gateway connection: the scheduler's requests out, their answers, timeouts and
/// the peer's state back as [`Ev`]s.
struct Conn<'a> {
    ctx: &'a PeerCtx,
    rx: &'a mut mpsc::UnboundedReceiver<Cmd>,
    ev: &'a mpsc::UnboundedSender<Ev>,
    /// Hop-by-Hop → (session, class, sent at).
    pending: HashMap<u32, (SessionKey, Class, Instant)>,
    /// Request deadlines in sending order.
    deadlines: VecDeque<(Instant, u32)>,
    is_up: bool,
    stopping: bool,
}

impl Mode for Conn<'_> {
    type Input = Option<Cmd>;

    async fn input(&mut self) -> Option<Cmd> {
        self.rx.recv().await
    }

    async fn on_input(&mut self, cmd: Option<Cmd>, link: &mut Link) -> Flow {
        if let Some(s) = obey(cmd, link, &mut self.stopping) {
            self.send(s, link);
        }
        Flow::Continue
    }

    fn deadline(&self) -> Option<std::time::Instant> {
        self.deadlines.front().map(|d| d.0.into_std())
    }

    fn on_deadline(&mut self, _link: &mut Link) {
        let t = Instant::now();
        while let Some(&(d, hbh)) = self.deadlines.front() {
            if d > t {
                break;
            }
            self.deadlines.pop_front();
            if let Some((key, class, _)) = self.pending.remove(&hbh) {
                let _ = self.ev.send(Ev::Timeout { key, class });
            }
        }
    }

    fn on_event(&mut self, event: PeerEvent, link: &mut Link) {
        match event {
            PeerEvent::Opened { .. } => {
                self.is_up = true;
                let _ = self.ev.send(Ev::Up(self.ctx.idx));
            }
            PeerEvent::LoadReport(info) => {
                let (server, value) = (peer_host(link), info.value);
                let _ = self.ev.send(Ev::Load { server, value });
            }
            _ => {}
        }
    }

    fn on_application(&mut self, m: Message, link: &mut Link) {
        let peer = peer_name(link);
        if let (Some(d), Some(p)) = (&self.ctx.doic, peer) {
            let now = self.ctx.start.elapsed();
            d.lock().expect("lock").on_answer(now, p, &m);
        }
        answer_in(m, peer, &mut self.pending, self.ev);
    }
}

impl Conn<'_> {
    /// Sends one scheduled request (lost at once when the connection is not open).
    fn send(&mut self, s: Send, link: &mut Link) {
        if !link.pc.is_open() {
            let _ = self.ev.send(Ev::Lost {
                key: s.key,
                class: s.class,
            });
            return;
        }
        let ctx = self.ctx;
        let mut announce = None;
        if let Some(d) = &ctx.doic {
            let mut d = d.lock().expect("lock");
            let initial = matches!(s.class.kind(), super::scenario::Kind::Initial);
            if !d.admit(ctx.start.elapsed(), initial) {
                let _ = self.ev.send(Ev::Shed {
                    key: s.key,
                    class: s.class,
                });
                return;
            }
            announce = Some(d.announce().to_avp());
        }
        let hbh = link.pc.next_hop_by_hop();
        let e2e = link.pc.next_end_to_end();
        let mut m = ctx.ccr(&s, hbh, e2e);
        if let Some(a) = announce {
            m.push(a);
        }
        let sent = Instant::now();
        self.pending.insert(hbh, (s.key, s.class, sent));
        self.deadlines.push_back((sent + ctx.timeout, hbh));
        link.out.extend_from_slice(&m.encode());
    }
}

/// What the load generator takes from an answer.
struct Cca {
    /// Result-Code, else Experimental-Result-Code, else 0.
    rc: u32,
    /// Origin-Host.
    server: Option<String>,
    /// Whether the DRA the answer came from (Origin-Host `dra`) answered it itself.
    own: bool,
}

impl Cca {
    /// `m` read as a CCA from the DRA `dra`; `None` when it is not a CCA.
    fn of(m: &Message, dra: Option<&str>) -> Option<Cca> {
        if m.is_request() || m.command_code != cmd::CREDIT_CONTROL {
            return None;
        }
        let rc = m
            .result_code()
            .or(m.experimental_result().map(|e| e.1))
            .unwrap_or(0);
        let server = m.origin_host().map(str::to_owned);
        let own = dra.is_some_and(|d| server.as_ref().is_some_and(|o| o.eq_ignore_ascii_case(d)));
        Some(Cca { rc, server, own })
    }
}

fn answer_in(
    m: Message,
    peer: Option<&str>,
    pending: &mut HashMap<u32, (SessionKey, Class, Instant)>,
    ev: &mpsc::UnboundedSender<Ev>,
) {
    let Some(Cca { rc, server, own }) = Cca::of(&m, peer) else {
        return;
    };
    match pending.remove(&m.hop_by_hop) {
        Some((key, class, sent)) => {
            let _ = ev.send(Ev::Answer {
                key,
                class,
                rc,
                latency: sent.elapsed(),
                server,
                own,
            });
        }
        None => {
            let _ = ev.send(Ev::Late);
        }
    }
}

// ---------------------------------------------------------------- failover gateways

/// What a gateway task tells one of its DRA connections: [`Order::Do`] writes these
/// bytes if the connection of generation `.0` is still the open one.
type LinkCmd = Order<(u64, Vec<u8>)>;

/// What a DRA connection tells its gateway task.
enum LinkEv {
    /// In service (open, watchdog OKAY); writes must carry this generation.
    InService {
        link: usize,
        generation: u64,
    },
    /// Out of service (transport lost, watchdog SUSPECT or DOWN, closed).
    OutOfService {
        link: usize,
    },
    /// A CCA.
    Answer {
        link: usize,
        hop_by_hop: u32,
        rc: u32,
        server: Option<String>,
        /// Answered by the DRA of this link itself (see [`Ev::Answer`]).
        own: bool,
    },
    Load {
        server: String,
        value: u16,
    },
}

/// One gateway connected to two DRAs: a task per DRA connection, the [`Failover`] core
/// here between them and the scheduler.
async fn gateway_task(
    ctx: PeerCtx,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    ev: mpsc::UnboundedSender<Ev>,
) {
    let addrs = [Some(ctx.connect), ctx.secondary];
    let (lev_tx, mut lev_rx) = mpsc::unbounded_channel();
    let mut links = Vec::new();
    for (k, addr) in addrs.iter().enumerate() {
        let Some(addr) = *addr else { continue };
        let (tx, lrx) = mpsc::unbounded_channel();
        let h = tokio::spawn(link_task(ctx.clone(), k, addr, lrx, lev_tx.clone()));
        links.push((tx, h));
    }
    drop(lev_tx);
    let mut rng = dra::routing::SplitMix64::new(ctx.seed ^ 0x9e37_79b9_7f4a_7c15);
    // RFC 6733 §3: End-to-End high 12 bits from the time, low 20 random.
    let e2e = ((ctx.start_secs as u32) << 20) | (rng.below(1 << 20) as u32);
    let mut core = Failover::new(
        ctx.dra_mode,
        links.len(),
        ctx.timeout,
        rng.below(1 << 32) as u32,
        e2e,
    );
    let mut generation = [0u64; 2];
    let mut was_up = false;
    let write = |links: &[(mpsc::UnboundedSender<LinkCmd>, JoinHandle<()>)],
                 generation: &[u64; 2],
                 w: super::failover::Write| {
        let _ = links[w.link]
            .0
            .send(LinkCmd::Do((generation[w.link], w.bytes)));
    };
    loop {
        let deadline = core.next_deadline();
        tokio::select! {
            c = rx.recv() => match c {
                Some(Cmd::Do(s)) => {
                    let at = Instant::now().into_std();
                    let w = core.send(at, s.key, s.class, |hbh, e2e| {
                        ctx.ccr(&s, hbh, e2e)
                        .encode()
                    });
                    match w {
                        Some(w) => write(&links, &generation, w),
                        None => {
                            let _ = ev.send(Ev::Lost { key: s.key, class: s.class });
                        }
                    }
                }
                Some(Cmd::Drop) => {
                    for (tx, _) in &links {
                        let _ = tx.send(LinkCmd::Drop);
                    }
                }
                None | Some(Cmd::Stop) => break,
            },
            e = lev_rx.recv() => {
                let Some(e) = e else { break };
                let at = Instant::now().into_std();
                match e {
                    LinkEv::InService { link, generation: g } => {
                        generation[link] = g;
                        core.link_up(link);
                    }
                    LinkEv::OutOfService { link } => {
                        let (writes, gone) = core.link_down(link, at);
                        for w in writes {
                            write(&links, &generation, w);
                        }
                        for g in gone {
                            let _ = ev.send(Ev::Lost { key: g.key, class: g.class });
                        }
                    }
                    LinkEv::Answer { link, hop_by_hop, rc, server, own } => {
                        match core.answer(link, hop_by_hop, at) {
                            Some(m) => {
                                let _ = ev.send(Ev::Answer {
                                    key: m.key,
                                    class: m.class,
                                    rc,
                                    latency: m.latency,
                                    server,
                                    own,
                                });
                            }
                            None => {
                                let _ = ev.send(Ev::Late);
                            }
                        }
                    }
                    LinkEv::Load { server, value } => {
                        let _ = ev.send(Ev::Load { server, value });
                    }
                }
            }
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            } => {
                for g in core.expire(Instant::now().into_std()) {
                    let _ = ev.send(Ev::Timeout { key: g.key, class: g.class });
                }
            }
        }
        if core.up() != was_up {
            was_up = core.up();
            let _ = ev.send(if was_up {
                Ev::Up(ctx.idx)
            } else {
                Ev::Down(ctx.idx)
            });
        }
    }
    for (tx, _) in &links {
        let _ = tx.send(LinkCmd::Stop);
    }
    for (_, h) in links {
        let _ = h.await;
    }
    for g in core.drain() {
        let _ = ev.send(Ev::Lost {
            key: g.key,
            class: g.class,
        });
    }
    if was_up {
        let _ = ev.send(Ev::Down(ctx.idx));
    }
    let _ = ev.send(Ev::Failover(Box::new(core.counts().clone())));
}

/// One DRA connection of a failover gateway: connects, reconnects after a loss (RFC
/// 3539 REOPEN: in service again after three DWAs), writes what the gateway hands it.
async fn link_task(
    ctx: PeerCtx,
    link: usize,
    addr: SocketAddr,
    mut rx: mpsc::UnboundedReceiver<LinkCmd>,
    ev: mpsc::UnboundedSender<LinkEv>,
) {
    let mut n = 0u64;
    loop {
        let stop = match connect(&ctx, addr).await {
            Some(s) => link_connection(&ctx, link, addr, s, n, &mut rx, &ev).await,
            None => false,
        };
        let _ = ev.send(LinkEv::OutOfService { link });
        n += 1;
        if stop {
            return;
        }
        // Hold-off; writes meanwhile belong to a gone connection (the gateway resends
        // them once it hears this one is out of service).
        if !hold_off(&ctx, &mut rx, |c| !matches!(c, LinkCmd::Stop)).await {
            return;
        }
    }
}

/// One connection to a DRA; `true` when the gateway is stopping.
async fn link_connection(
    ctx: &PeerCtx,
    link: usize,
    addr: SocketAddr,
    stream: Connection,
    n: u64,
    rx: &mut mpsc::UnboundedReceiver<LinkCmd>,
    ev: &mpsc::UnboundedSender<LinkEv>,
) -> bool {
    let local_ip = stream.local.ip();
    let cfg = Arc::new(loadgen_peer_config(
        &ctx.origin_host,
        &ctx.origin_realm,
        local_ip,
        ctx.tw,
    ));
    let seed = ctx
        .seed
        .wrapping_add(n << 32)
        .wrapping_add((link as u64) << 48);
    let opts = ConnectionOptions::new(seed, ctx.start_secs).reopen(n > 0);
    let Ok(pc) = PeerConnection::new(
        Role::Initiator,
        cfg,
        Arc::new(AllowList::default()),
        addr.ip(),
        opts,
    ) else {
        return true;
    };
    let (mut l, _) = Link::with_writer(stream, pc, ctx.start.into_std());
    let mut conn = LinkConn {
        link,
        // Generations are unique per link task: (connection number + 1).
        generation: n + 1,
        rx,
        ev,
        in_service: false,
        stopping: false,
    };
    drive(&mut l, &mut conn).await;
    if conn.stopping {
        l.close(Close::Flush(Some(STOP_FLUSH))).await;
    } else {
        l.close(Close::Abort).await;
    }
    conn.stopping
}

/// A DRA connection's [`Mode`]: the gateway's bytes out, CCAs and state changes back.
struct LinkConn<'a> {
    link: usize,
    generation: u64,
    rx: &'a mut mpsc::UnboundedReceiver<LinkCmd>,
    ev: &'a mpsc::UnboundedSender<LinkEv>,
    in_service: bool,
    stopping: bool,
}

impl LinkConn<'_> {
    fn set_service(&mut self, on: bool) {
        if on == self.in_service {
            return;
        }
        self.in_service = on;
        let _ = self.ev.send(if on {
            LinkEv::InService {
                link: self.link,
                generation: self.generation,
            }
        } else {
            LinkEv::OutOfService { link: self.link }
        });
    }
}

impl Mode for LinkConn<'_> {
    type Input = Option<LinkCmd>;

    async fn input(&mut self) -> Option<LinkCmd> {
        self.rx.recv().await
    }

    async fn on_input(&mut self, cmd: Option<LinkCmd>, link: &mut Link) -> Flow {
        match obey(cmd, link, &mut self.stopping) {
            Some((g, bytes)) if g == self.generation && link.pc.is_open() => {
                link.out.extend_from_slice(&bytes);
            }
            // Bytes meant for an earlier connection are dropped: the gateway resends
            // them when it learns that one is gone.
            Some(_) => {}
            // Stopping: out of service from now on.
            None if self.stopping => self.set_service(false),
            None => {}
        }
        Flow::Continue
    }

    fn on_event(&mut self, event: PeerEvent, link: &mut Link) {
        match event {
            PeerEvent::Opened { .. } => {
                let up = link.pc.in_service();
                self.set_service(up);
            }
            PeerEvent::WatchdogOkay => self.set_service(true),
            PeerEvent::WatchdogSuspect | PeerEvent::WatchdogDown | PeerEvent::Closed { .. } => {
                self.set_service(false);
            }
            PeerEvent::LoadReport(info) => {
                let (server, value) = (peer_host(link), info.value);
                let _ = self.ev.send(LinkEv::Load { server, value });
            }
            _ => {}
        }
    }

    fn on_application(&mut self, m: Message, link: &mut Link) {
        let Some(Cca { rc, server, own }) = Cca::of(&m, peer_name(link)) else {
            return;
        };
        let _ = self.ev.send(LinkEv::Answer {
            link: self.link,
            hop_by_hop: m.hop_by_hop,
            rc,
            server,
            own,
        });
    }
}
