//! The shared session store's client: one task on the agent's runtime that owns the
//! `redis` crate's connection (a [`ConnectionManager`] for one Redis, a cluster
//! connection for Redis Cluster) and runs every call as its own future, so calls are
//! pipelined on the connection and none waits for another. Each call is bounded by the
//! store's timeout and answered exactly once on the reply channel — with the value, or
//! with why it failed. Nothing here blocks or sleeps on the caller's behalf.
//!
//! Connecting: the task connects at start and, while it has no connection, again every
//! [`RECONNECT_EVERY`]. Calls made during the first attempt wait for it; calls made
//! after it failed, until a connection is made, fail at once as
//! [`StoreError::Unavailable`]. Once connected, the crate reconnects by itself (the
//! connection manager after an I/O error; the cluster connection per node, refreshing
//! its slot map on MOVED/ASK or a failed node).

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use tokio::sync::mpsc;

use crate::config::{SessionStore as StoreConfig, StoreKind};

/// How often the task retries while it has no connection.
pub const RECONNECT_EVERY: Duration = Duration::from_secs(1);

/// A store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// GET the binding.
    Get,
    /// SET the binding with its TTL (PX).
    Set,
    /// DEL the binding.
    Del,
    /// PEXPIRE the binding: it goes when the call's TTL has passed (an ended session's
    /// binding, kept [`super::ENDED_GRACE`]).
    Expire,
}

impl Op {
    /// Metric label.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Set => "set",
            Op::Del => "del",
            Op::Expire => "expire",
        }
    }
}

/// One call to the store.
#[derive(Debug, Clone)]
pub struct Call {
    /// Returned in the reply.
    pub token: u64,
    /// What to do.
    pub op: Op,
    /// Full key (prefix included).
    pub key: String,
    /// Value for [`Op::Set`].
    pub value: String,
    /// TTL for [`Op::Set`].
    pub ttl: Duration,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Not connected (connecting failed, or not yet retried).
    #[error("not connected: {0}")]
    Unavailable(String),
    /// The store answered with an error, or the connection failed during the call.
    #[error("{0}")]
    Redis(String),
}

impl StoreError {
    /// Metric label (`kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Redis(_) => "error",
        }
    }
}

/// What the task reports.
#[derive(Debug, Clone)]
pub enum Event {
    /// A call's result: for [`Op::Get`] the stored value, otherwise `None`.
    Reply {
        /// The call's token.
        token: u64,
        /// The call's operation.
        op: Op,
        /// Value or failure.
        result: Result<Option<String>, StoreError>,
        /// From sending the call to its result.
        took: Duration,
    },
    /// Connecting failed (the task retries every [`RECONNECT_EVERY`]).
    ConnectFailed(String),
    /// A connection is established.
    Connected,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn query(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// Starts the client task on the current runtime; calls go in on the returned sender,
/// events come out on `events`. The task ends when the sender is dropped.
///
/// # Panics
/// If `cfg.kind` is [`StoreKind::Memory`] (there is nothing to connect to).
pub fn spawn(
    cfg: &StoreConfig,
    events: mpsc::UnboundedSender<Event>,
) -> mpsc::UnboundedSender<Call> {
    assert!(
        cfg.kind != StoreKind::Memory,
        "a memory store has no client"
    );
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(cfg.clone(), rx, events));
    tx
}

async fn connect(cfg: &StoreConfig) -> Result<Conn, String> {
    let urls: Vec<String> = cfg
        .addresses
        .iter()
        .map(|a| format!("redis://{a}/"))
        .collect();
    let connect = async {
        match cfg.kind {
            StoreKind::Redis => {
                let client = redis::Client::open(urls[0].as_str())?;
                let conf = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(cfg.timeout))
                    .set_response_timeout(Some(cfg.timeout))
                    .set_max_delay(RECONNECT_EVERY);
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(client, conf).await?,
                ))
            }
            StoreKind::RedisCluster => {
                let client = redis::cluster::ClusterClientBuilder::new(urls.clone())
                    .connection_timeout(cfg.timeout)
                    .response_timeout(cfg.timeout)
                    .build()?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
            StoreKind::Memory => unreachable!("checked in spawn"),
        }
    };
    match tokio::time::timeout(cfg.timeout.max(Duration::from_secs(1)), connect).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e_text(&e)),
        Err(_) => Err(format!(
            "connecting to {} took longer than {:?}",
            cfg.addresses.join(", "),
            cfg.timeout.max(Duration::from_secs(1))
        )),
    }
}

fn e_text(e: &redis::RedisError) -> String {
    e.to_string()
}

async fn run(
    cfg: StoreConfig,
    mut calls: mpsc::UnboundedReceiver<Call>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut conn: Option<Conn> = None;
    let mut last_error = String::from("connecting");
    // Calls made before the first connection attempt has finished wait for it (it is
    // bounded like a call): an agent that just started is not "down". Later, while
    // there is no connection, calls fail at once.
    let mut first_attempt = true;
    let mut held: Vec<Call> = Vec::new();
    // The connection attempt runs beside the calls: while there is no connection, a
    // call fails at once instead of waiting for the attempt.
    let (done_tx, mut done_rx) = mpsc::channel::<Result<Conn, String>>(1);
    let attempt = |done: mpsc::Sender<Result<Conn, String>>, cfg: StoreConfig, wait| {
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = done.send(connect(&cfg).await).await;
        });
    };
    attempt(done_tx.clone(), cfg.clone(), Duration::ZERO);
    loop {
        tokio::select! {
            r = done_rx.recv() => match r.expect("sender held here") {
                Ok(c) => {
                    first_attempt = false;
                    let _ = events.send(Event::Connected);
                    for call in held.drain(..) {
                        tokio::spawn(execute(c.clone(), call, cfg.timeout, events.clone()));
                    }
                    conn = Some(c);
                }
                Err(e) => {
                    first_attempt = false;
                    last_error.clone_from(&e);
                    if events.send(Event::ConnectFailed(e)).is_err() {
                        return;
                    }
                    for call in held.drain(..) {
                        unavailable(&events, call, &last_error);
                    }
                    attempt(done_tx.clone(), cfg.clone(), RECONNECT_EVERY);
                }
            },
            c = calls.recv() => {
                let Some(call) = c else { return };
                match &conn {
                    Some(c) => {
                        tokio::spawn(execute(c.clone(), call, cfg.timeout, events.clone()));
                    }
                    None if first_attempt => held.push(call),
                    None => unavailable(&events, call, &last_error),
                }
            }
        }
    }
}

fn unavailable(events: &mpsc::UnboundedSender<Event>, call: Call, why: &str) {
    let _ = events.send(Event::Reply {
        token: call.token,
        op: call.op,
        result: Err(StoreError::Unavailable(why.to_owned())),
        took: Duration::ZERO,
    });
}

async fn execute(
    mut conn: Conn,
    call: Call,
    timeout: Duration,
    events: mpsc::UnboundedSender<Event>,
) {
    let start = Instant::now();
    let mut cmd = redis::cmd(match call.op {
        Op::Get => "GET",
        Op::Set => "SET",
        Op::Del => "DEL",
        Op::Expire => "PEXPIRE",
    });
    cmd.arg(&call.key);
    let ms = u64::try_from(call.ttl.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    match call.op {
        Op::Set => {
            cmd.arg(&call.value).arg("PX").arg(ms);
        }
        Op::Expire => {
            cmd.arg(ms);
        }
        Op::Get | Op::Del => {}
    }
    let result = match tokio::time::timeout(timeout, conn.query(&cmd)).await {
        Err(_) => Err(StoreError::Timeout(timeout)),
        // The crate's own response timeout (set to the same bound) is a timeout too.
        Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout(timeout)),
        Ok(Err(e)) => Err(StoreError::Redis(e_text(&e))),
        Ok(Ok(v)) => match (call.op, v) {
            (Op::Get, redis::Value::Nil) => Ok(None),
            (Op::Get, redis::Value::BulkString(b)) => String::from_utf8(b)
                .map(Some)
                .map_err(|_| StoreError::Redis("stored peer name is not UTF-8".into())),
            (Op::Get, other) => Err(StoreError::Redis(format!(
                "unexpected reply to GET: {other:?}"
            ))),
            (Op::Set | Op::Del | Op::Expire, _) => Ok(None),
        },
    };
    let _ = events.send(Event::Reply {
        token: call.token,
        op: call.op,
        result,
        took: start.elapsed(),
    });
}
