//! The tokio shell of the Diameter agent (docs/architecture.md §2, §6): TCP listeners
//! for the gateways, outbound connections to the servers, one [`PeerConnection`] per
//! transport connection, routing, relaying, marked-request answers and egress RLF.
//!
//! # Structure
//!
//! - Per connection two I/O tasks ([`io`]): a reader (TCP → [`Framer`] with the
//!   configured maximum message size → decode → core) and a writer (bounded queue →
//!   TCP). Both run inside a `tracing` span `peer{conn, remote, origin_host}`.
//! - One core task owns every piece of protocol state — the peer state machines,
//!   [`Router`] + [`Sessions`], [`Relay`], one [`Rlf`] per upstream group,
//!   [`MarkedHandler`] — and drives them with `Duration`s since the agent started. One
//!   owner means no locks and one order of events; the cores are sans-IO and cheap.
//!
//! # A request from a gateway
//!
//! 1. Marked by the fast path (`is_marked()`) → [`MarkedHandler`] answers at once (the
//!    config's ingress profiles pick Result-Code and Error-Message); nothing else runs.
//! 2. [`validate_request`] → a protocol error is answered with its Result-Code.
//! 3. Gx/Gy session binding from [`Sessions`] (local cache; on a miss the shared
//!    store, the request parked until its answer or `timeout`), then [`Router::decide`]
//!    (realm routes, the group's selection strategy) → unroutable is answered
//!    3003/3002; a new or changed binding is written (before forwarding by default).
//!    A store that fails follows `on_error` (see "Session store" below).
//! 4. [`Relay::forward`] (loop 3005, full pending table 3004), then the upstream group's
//!    [`Rlf::offer`]: send, queue (released by `poll_ready`), or apply the egress
//!    action (answer or drop) — also to requests that waited past the delay tolerance.
//! 5. Answer from upstream → [`Relay::on_answer`] → the downstream connection. An
//!    answer for a downstream connection that is gone is discarded and counted.
//! 6. No answer in time, or the upstream failed (closed, or watchdog SUSPECT): one
//!    retry on an alternate peer with the T flag, else 3002 (RFC 6733 §5.5.4).
//!
//! Every request gets exactly one answer: [`AgentStats::invariant_ok`] checks the
//! counters, and `dra_unanswered_invariant_violations_total` counts violations.
//!
//! # Slow peers (bounded memory)
//!
//! Each connection's write queue holds at most [`AgentOptions::write_queue`] encoded
//! messages. When it is full the peer is not reading: the connection is aborted (no
//! DPR — it could not be written either). Its pending upstream requests fail over; its
//! pending downstream answers are discarded and counted. The reader side is bounded
//! too: a full core channel stops reading, and TCP flow control slows the sender.
//!
//! # Load (RFC 8583)
//!
//! - Upstream: a Load AVP about a server (PEER report with its SourceID, or HOST report
//!   in a message it originated) in any message it sends — DWA or answer — becomes a
//!   `PeerEvent::LoadReport`; the core stores it with its arrival time in the routing
//!   `PeerTable` (`set_load`), where the group's selector reads it. Next to it the core
//!   keeps, per server, the requests written upstream and not yet answered
//!   (`PeerView::pending`, used by `p2c` to break ties), updated on every send and
//!   answer and recounted once per second.
//! - Downstream: the agent reports its own load in every DWA it sends to a client
//!   (PEER report, SourceID = our Origin-Host), recomputed once per second and set on
//!   every non-server connection ([`load::own_load_value`]):
//!   `Load-Value = ⌊65535 × (1 − max(pending / pending_capacity, cpu / 100))⌋`, clamped
//!   to 0..=65535, with `pending` the relay's pending table and `cpu` the process's CPU
//!   in percent of its usable cores.
//! - Freshness: DWRs go out only after Tw without traffic (RFC 3539 §3.4.1), so under
//!   steady traffic no DWA arrives and a DWA-only server's load is never refreshed; only
//!   servers that put Load in their answers give the selectors a live signal
//!   (`docs/load-balancing.md`, "Live").
//!
//! # Session store (docs/architecture.md §9)
//!
//! With `[session_store] kind = "redis" | "redis_cluster"` several DRA hosts share the
//! bindings. The core never waits on the store: [`Sessions`] answers from its cache at
//! once or hands out a token; the request is parked under it and resumed when the
//! store client task (on the same runtime, the `redis` crate) reports the call's result
//! — each call bounded by `timeout`, and a parked request treated as failed shortly
//! after it in any case. A failed call marks the store down (logged once, metric
//! `dra_session_store_up`); until a call succeeds again nothing waits for it and
//! requests follow `on_error`: route locally and keep the binding (written when the
//! store is back), or answer `result_code`. Parked requests count as pending in the
//! exactly-one-answer check.
//!
//! # Reconnecting
//!
//! Servers with `connect` are dialled at start. After a failure the agent dials again
//! after Tc ([`AgentOptions::tc`], default RFC 6733's 30 s), doubling per consecutive
//! failure up to [`AgentOptions::max_backoff`]; later connections are created with
//! `reopen` (RFC 3539 §3.4.1: three DWAs before the peer is back in service).
//!
//! [`PeerConnection`]: crate::diameter::peer::PeerConnection
//! [`Framer`]: crate::diameter::Framer
//! [`Router`]: crate::routing::Router
//! [`Router::decide`]: crate::routing::Router::decide
//! [`Sessions`]: crate::session::Sessions
//! [`Relay`]: crate::relay::Relay
//! [`Relay::forward`]: crate::relay::Relay::forward
//! [`Relay::on_answer`]: crate::relay::Relay::on_answer
//! [`Rlf`]: crate::relay::Rlf
//! [`Rlf::offer`]: crate::relay::Rlf::offer
//! [`MarkedHandler`]: crate::relay::MarkedHandler
//! [`validate_request`]: crate::diameter::validate_request

mod core;
pub mod doic;
pub mod io;
pub mod load;
mod reload;
pub mod setup;
mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::relay::{RelayStats, RlfStats};

pub use setup::SetupError;

/// Settings of the shell that are not in the config file (timers for tests, bounds).
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Reconnect timer Tc (RFC 6733 §2.1); `None` = the default 30 s.
    pub tc: Option<Duration>,
    /// Upper bound of the reconnect back-off.
    pub max_backoff: Duration,
    /// Watchdog interval Tw (RFC 3539 §3.4.1, at least 6 s); `None` = the config's
    /// `[global] watchdog`.
    pub tw: Option<Duration>,
    /// TCP connect timeout towards servers.
    pub connect_timeout: Duration,
    /// Encoded messages queued for writing per connection (see the module docs).
    pub write_queue: usize,
    /// Largest Diameter message accepted; a larger one closes the connection.
    pub max_message_size: usize,
    /// Most requests awaiting an upstream answer at once (3004 beyond).
    pub pending_capacity: usize,
    /// Answer timeout for peers outside any group (e.g. answers to server-initiated
    /// requests relayed to a gateway).
    pub default_answer_timeout: Duration,
    /// Seed for the selectors and the peer state machines.
    pub seed: u64,
    /// Wait for DPAs this long at shutdown.
    pub shutdown_grace: Duration,
    /// Most accepted connections waiting for their CER at once; more are refused
    /// (closed at once, `dra_connections_refused_total{reason="cer_backlog"}`).
    pub max_awaiting_cer: usize,
    /// Most of those from one source address
    /// (`reason="cer_backlog_per_source"`).
    pub max_awaiting_cer_per_source: usize,
    /// Who enforces the ingress limits on accepted connections: the agent's own
    /// limiter when the XDP fast path is not attached ([`crate::limiter`], applied to
    /// every message before decoding), or the fast path, whose out-of-band marks the
    /// readers apply ([`crate::oob`]).
    pub ingress: io::Ingress,
    /// Who that is, and why, in words (`dra status`): "XDP on eth0", "the agent (no
    /// fast path interface)", or the agent with the reason this kernel cannot load XDP.
    pub ingress_by: String,
    /// The agent's limiter for the connections the fast path cannot read (TLS): their
    /// ingress limits are enforced here even when XDP is attached. `None`: the limiter
    /// of [`AgentOptions::ingress`] when it is one, else nobody.
    pub limiter: Option<std::sync::Arc<crate::limiter::Limiter>>,
    /// Where `dra reload` requests arriving on the control socket go (`dra run`'s
    /// reload loop in [`crate::run`]); `None`: refused.
    pub reload: Option<mpsc::Sender<ReloadRequest>>,
    /// The running config's hash, load time and last reload (`dra status`).
    pub config_info: Option<Arc<Mutex<ConfigInfo>>>,
    /// Where the overload control writes its shed plan and reads what was judged: the
    /// fast path's maps and the readers' table ([`crate::overload::ShedPort`]).
    pub shed_ports: Vec<Arc<dyn crate::overload::ShedPort>>,
}

/// A `dra reload` from the control socket.
#[derive(Debug)]
pub struct ReloadRequest {
    /// Print the difference only.
    pub dry_run: bool,
    /// (applied or printed, text for the operator).
    pub reply: oneshot::Sender<(bool, String)>,
}

/// What `dra status` shows about the running config.
#[derive(Clone, Debug, Default)]
pub struct ConfigInfo {
    /// The file the agent reads at a reload.
    pub path: Option<PathBuf>,
    /// SHA-256 of the file's bytes, hex.
    pub sha256: String,
    /// When it was loaded (seconds since the Unix epoch).
    pub loaded_at: u64,
    /// The last reload: (when, outcome and summary).
    pub last_reload: Option<(u64, String)>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            tc: None,
            max_backoff: Duration::from_secs(300),
            tw: None,
            connect_timeout: Duration::from_secs(5),
            write_queue: 8192,
            max_message_size: crate::diameter::DEFAULT_MAX_MESSAGE_SIZE,
            pending_capacity: 100_000,
            default_answer_timeout: Duration::from_secs(2),
            seed: 0x5eed_d1a0,
            shutdown_grace: Duration::from_secs(2),
            max_awaiting_cer: 1024,
            max_awaiting_cer_per_source: 32,
            ingress: io::Ingress::None,
            ingress_by: "nobody (no ingress limits)".to_owned(),
            limiter: None,
            reload: None,
            config_info: None,
            shed_ports: Vec::new(),
        }
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The config does not map onto the routing/relay cores.
    #[error("agent setup")]
    Setup(#[source] SetupError),
    /// Our own identity is not a valid peer configuration.
    #[error("agent identity")]
    Identity(#[source] crate::diameter::peer::PeerConfigError),
    /// A listener could not be bound.
    #[error("listening on {address}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The control socket could not be bound.
    #[error("control socket {}", path.display())]
    Control {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Counters of the whole agent, for tests and `dra status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentStats {
    /// Requests received from any peer (application requests, not CER/DWR/DPR).
    pub requests_in: u64,
    /// Requests answered by the agent before the relay: marked, protocol errors,
    /// unroutable.
    pub local_answers: u64,
    /// Of those, marked requests answered.
    pub marked_answered: u64,
    /// Marked requests discarded (ingress action `drop`): no answer on purpose.
    pub marked_discarded: u64,
    /// Requests handed to the relay and their outcomes.
    pub relay: RelayStats,
    /// Egress limiter counters per group that has one.
    pub egress: Vec<(String, RlfStats)>,
    /// Connections aborted because their write queue was full.
    pub write_queue_overflows: u64,
    /// Answers written to downstream connections (relayed and generated).
    pub answers_out: u64,
}

impl AgentStats {
    /// Every request received has exactly one outcome (answered, discarded by
    /// policy, counted as discarded because its connection is gone) or is pending.
    pub fn invariant_ok(&self) -> bool {
        self.requests_in == self.local_answers + self.marked_discarded + self.relay.requests_in
            && self.relay.invariant_ok()
    }
}

enum Ctl {
    /// A connection accepted by the listener configured at `listener`.
    Accepted {
        stream: tokio::net::TcpStream,
        listener: SocketAddr,
    },
    /// An SCTP association accepted by an SCTP listener.
    AcceptedSctp {
        conn: crate::transport::Connection,
    },
    /// The TLS handshake of an accepted connection ended.
    Handshaken {
        remote: SocketAddr,
        result: Result<crate::transport::Connection, crate::transport::tls::Refusal>,
    },
    Connected {
        peer: usize,
        result: Result<crate::transport::Connection, core::DialError>,
    },
    Status(oneshot::Sender<String>),
    Stats(oneshot::Sender<AgentStats>),
    Shutdown(oneshot::Sender<()>),
    /// Apply a validated config that can be applied live (`crate::reload`).
    Reload {
        cfg: Box<Config>,
        diff: Box<crate::config::diff::ConfigDiff>,
        done: oneshot::Sender<Result<(), String>>,
    },
    /// The DRL throttle of a peer changed (its DOIC reports follow it).
    Throttle {
        peer: String,
        throttle: u8,
    },
}

/// Tells a running agent the DRL throttle of a peer, from any thread (the controller
/// runs on its own): a DOIC gateway's reports describe the limits as throttled.
#[derive(Clone, Debug)]
pub struct ThrottleSink(mpsc::Sender<Ctl>);

impl ThrottleSink {
    /// `peer`'s throttle is now `throttle` percent. Dropped when the agent is busy
    /// (the controller repeats it on its next change) or gone.
    pub fn set(&self, peer: &str, throttle: u8) {
        let _ = self.0.try_send(Ctl::Throttle {
            peer: peer.to_owned(),
            throttle,
        });
    }
}

/// A running agent. Dropping it stops the tasks abruptly; [`AgentHandle::shutdown`]
/// sends DPRs first.
#[derive(Debug)]
pub struct AgentHandle {
    /// (configured, bound address, accept task) per listener.
    listeners: Vec<(SocketAddr, SocketAddr, tokio::task::JoinHandle<()>)>,
    ctl: mpsc::Sender<Ctl>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    control_path: Option<PathBuf>,
    ready: tokio::sync::watch::Receiver<bool>,
}

impl AgentHandle {
    /// The bound listener addresses (port 0 in the config is resolved here).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(_, b, _)| *b).collect()
    }

    /// Waits until the agent is ready: listeners bound and an open connection in every
    /// routed group, or its startup wait over (docs/architecture.md, "Readiness").
    /// Returns at once if the agent is gone.
    pub async fn ready(&self) {
        let mut rx = self.ready.clone();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// The one-screen status text (what `dra status` prints).
    pub async fn status(&self) -> Option<String> {
        let (tx, rx) = oneshot::channel();
        self.ctl.send(Ctl::Status(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Where the DRL controller reports throttle changes (DOIC, docs/doic.md).
    pub fn throttle_sink(&self) -> ThrottleSink {
        ThrottleSink(self.ctl.clone())
    }

    /// The counters.
    pub async fn stats(&self) -> Option<AgentStats> {
        let (tx, rx) = oneshot::channel();
        self.ctl.send(Ctl::Stats(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Sends DPR on every open connection, waits for the DPAs (bounded by
    /// [`AgentOptions::shutdown_grace`]) and stops; returns once every task has ended,
    /// so its sockets are closed (an agent started next in the same process can bind
    /// the same addresses).
    pub async fn shutdown(mut self) {
        let (tx, rx) = oneshot::channel();
        if self.ctl.send(Ctl::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
        let tasks = self.tasks.drain(..);
        let listeners = self.listeners.drain(..).map(|(_, _, t)| t);
        for t in tasks.chain(listeners).collect::<Vec<_>>() {
            t.abort();
            // A cancelled task's future (and the sockets it owns) is dropped by the
            // runtime later; its handle resolves once that happened.
            let _ = t.await;
        }
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for (_, _, t) in &self.listeners {
            t.abort();
        }
        if let Some(p) = &self.control_path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Starts the agent on the current tokio runtime: binds the listeners and the control
/// socket, dials the servers, and returns at once.
pub async fn start(
    cfg: Config,
    opts: AgentOptions,
    metrics: Metrics,
) -> Result<AgentHandle, AgentError> {
    let mut tasks = Vec::new();
    let (ctl_tx, ctl_rx) = mpsc::channel(1024);
    let mut listeners = Vec::new();
    for l in &cfg.listeners {
        let (bound, task) = bind_listener(l, ctl_tx.clone()).await?;
        listeners.push((l.address, bound, task));
    }
    let mut control_path = None;
    if let Some(path) = &cfg.control.socket {
        let _ = std::fs::remove_file(path);
        let lst = tokio::net::UnixListener::bind(path).map_err(|source| AgentError::Control {
            path: path.clone(),
            source,
        })?;
        control_path = Some(path.clone());
        tasks.push(tokio::spawn(status::serve(
            lst,
            ctl_tx.clone(),
            opts.reload.clone(),
        )));
    }
    let (ready_tx, ready) = tokio::sync::watch::channel(false);
    let core = core::Core::new(cfg, opts, metrics, ctl_tx.clone(), ready_tx)?;
    tasks.push(tokio::spawn(core.run(ctl_rx)));
    Ok(AgentHandle {
        listeners,
        ctl: ctl_tx,
        tasks,
        control_path,
        ready,
    })
}

/// Binds a listener and spawns its accept loop (accepted connections go to the core).
async fn bind_listener(
    l: &crate::config::Listener,
    tx: mpsc::Sender<Ctl>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), AgentError> {
    let address = l.address;
    let listen = |source| AgentError::Listen { address, source };
    if l.transport == crate::config::Transport::Sctp {
        let mut addrs = vec![address];
        addrs.extend(
            l.multihome
                .iter()
                .map(|ip| SocketAddr::new(*ip, address.port())),
        );
        let lst = crate::transport::sctp::SctpListener::bind(&addrs).map_err(listen)?;
        let bound = lst.local_addrs().first().copied().unwrap_or(address);
        let lst = std::sync::Arc::new(lst);
        let task = tokio::spawn(accept_loop(move || {
            let (lst, tx) = (lst.clone(), tx.clone());
            async move {
                let assoc = lst.accept().await?;
                // An association that aborted at once fails here: that one is lost,
                // the listener is fine.
                let conn = match crate::transport::Connection::sctp(assoc) {
                    Ok(c) => c,
                    Err(e) => return Ok(Accepted::Lost(e)),
                };
                Ok(Accepted::handed(
                    tx.send(Ctl::AcceptedSctp { conn }).await.is_ok(),
                ))
            }
        }));
        return Ok((bound, task));
    }
    let lst = tokio::net::TcpListener::bind(address)
        .await
        .map_err(listen)?;
    let bound = lst.local_addr().map_err(listen)?;
    let lst = std::sync::Arc::new(lst);
    let task = tokio::spawn(accept_loop(move || {
        let (lst, tx) = (lst.clone(), tx.clone());
        async move {
            let (stream, _) = lst.accept().await?;
            let sent = tx.send(Ctl::Accepted {
                stream,
                listener: address,
            });
            Ok(Accepted::handed(sent.await.is_ok()))
        }
    }));
    Ok((bound, task))
}

/// What one accept gave.
#[derive(Debug)]
enum Accepted {
    /// A connection, handed to the core.
    Handed,
    /// The core is gone: the listener stops.
    CoreGone,
    /// The accepted connection failed before it could be used (an SCTP association
    /// that aborted at once): that connection is lost, the listener goes on at once.
    Lost(std::io::Error),
}

impl Accepted {
    /// Handed to the core, or the core is gone.
    fn handed(sent: bool) -> Accepted {
        if sent {
            Accepted::Handed
        } else {
            Accepted::CoreGone
        }
    }
}

/// Accepts until the core is gone: `accept` takes one connection and hands it over. A
/// failed accept of the listener itself is retried every 100 ms (e.g. out of file
/// descriptors), logged once, then once a minute while it lasts; a connection lost
/// right after its accept costs the listener nothing.
async fn accept_loop<F, Fut>(mut accept: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<Accepted>>,
{
    let (mut failed, mut logged) = (0u64, None);
    loop {
        match accept().await {
            Ok(Accepted::Handed) => {}
            Ok(Accepted::CoreGone) => return,
            Ok(Accepted::Lost(e)) => {
                tracing::debug!(error = %e, "connection lost right after its accept");
            }
            Err(e) => {
                failed += 1;
                if logged
                    .is_none_or(|t: tokio::time::Instant| t.elapsed() >= Duration::from_secs(60))
                {
                    tracing::warn!(error = %e, failed, "accept failed");
                    logged = Some(tokio::time::Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Connects to a control socket and returns the status text (`dra status`).
pub async fn query_status(path: &std::path::Path) -> std::io::Result<String> {
    control_request(path, "status").await.map(|(_, text)| text)
}

/// Sends one request line over a control socket (`status`, `reload`,
/// `reload --dry-run`) and returns (success, text). A reply whose first line is
/// `ERR` failed; `OK` succeeded (neither line is part of the text); anything else is
/// the status text.
pub async fn control_request(
    path: &std::path::Path,
    request: &str,
) -> std::io::Result<(bool, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(path).await?;
    s.write_all(format!("{request}\n").as_bytes()).await?;
    s.shutdown().await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    if let Some(rest) = out.strip_prefix("ERR\n") {
        return Ok((false, rest.to_owned()));
    }
    if let Some(rest) = out.strip_prefix("OK\n") {
        return Ok((true, rest.to_owned()));
    }
    Ok((true, out))
}

#[cfg(test)]
mod tests {
    use super::{Accepted, accept_loop};
    use std::time::Duration;

    /// Runs the accept loop over `script` (one outcome per accept, then the core is
    /// gone) and returns the time it took on the paused clock.
    async fn accept_through(script: Vec<std::io::Result<Accepted>>) -> Duration {
        let mut script = script.into_iter();
        let t0 = tokio::time::Instant::now();
        accept_loop(|| {
            let next = script.next().unwrap_or(Ok(Accepted::CoreGone));
            async move { next }
        })
        .await;
        t0.elapsed()
    }

    /// An association that aborts right after its accept does not pause the listener;
    /// a failure of the listener's own accept does (100 ms, not a busy loop).
    #[tokio::test(start_paused = true)]
    async fn a_connection_lost_at_accept_does_not_pause_the_listener() {
        let lost = || Ok(Accepted::Lost(std::io::Error::other("association aborted")));
        let took = accept_through(vec![lost(), lost(), Ok(Accepted::Handed)]).await;
        assert_eq!(took, Duration::ZERO);
        let failed = Err(std::io::Error::other("too many open files"));
        let took = accept_through(vec![failed, Ok(Accepted::Handed)]).await;
        assert_eq!(took, Duration::from_millis(100));
    }
}
