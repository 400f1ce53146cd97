//! Gx/Gy session bindings for the agent: a bounded local cache in front of the store
//! that several DRA hosts share (DESIGN §9, `[session_store]` in docs/config.md).
//!
//! [`Sessions`] is sans-IO like the rest of the core: it answers from the cache at once
//! and otherwise hands out a token for a store call made by [`remote`]'s task; the
//! core parks the request under that token and resumes it when [`Sessions::on_event`]
//! returns the token's result. The store is never waited for on the core's thread.
//!
//! What reaches the store, per request (the router says which update applies):
//! - CCR-U/T (and a CCR-I carrying the T flag, a retransmission) whose session is not
//!   in the cache: one GET; a CCR-I (no T flag) never looks up: it starts a session;
//! - a new or changed binding (CCR-I, a session routed as new, a failover rebind):
//!   SET with the TTL, awaited before forwarding with `write = "before_forward"`;
//! - the same binding again (CCR-U): SET in the background (refreshes the TTL);
//! - the answer to a CCR-T: DEL in the background.
//!
//! The store is "down" from the first failed call (or failed connect) until a call
//! succeeds again; each change is logged once. While down, no request waits for it:
//! a lookup or a new binding follows `on_error` at once (`local`: route with what this
//! host knows and remember the binding, written to the store when it is back;
//! `reject`: the caller answers `result_code`), and a probe GET once per tick finds
//! out when it is back.

pub mod remote;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::{SessionStore as StoreConfig, StoreKind, StoreOnError, StoreWrite};
use crate::metrics::Metrics;
use crate::routing::{BindingStore, MemoryBindingStore};
pub use remote::{Call, Event, Op, StoreError};

/// Token value of background calls nobody waits for.
const BACKGROUND: u64 = 0;

/// A lookup's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Bound to this peer (cache).
    Hit(String),
    /// Not bound as far as this host needs to know.
    Miss,
    /// Asked the store: wait for this token.
    Wait(u64),
    /// The store is down: follow [`Sessions::on_error`].
    Failed,
}

/// A binding write's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Nothing to wait for (cached; written in the background if shared).
    Done,
    /// Written before forwarding: wait for this token.
    Wait(u64),
    /// The store is down and the binding is new: follow [`Sessions::on_error`].
    Failed,
}

/// What a waited-for call delivered.
pub type Resolved = (u64, Result<Option<String>, StoreError>);

struct Waiting {
    op: Op,
    session: String,
    peer: String,
}

/// The agent's view of the session bindings (module docs).
pub struct Sessions {
    cfg: StoreConfig,
    cache: MemoryBindingStore,
    remote: Option<mpsc::UnboundedSender<Call>>,
    up: bool,
    waiting: HashMap<u64, Waiting>,
    /// Bindings made while the store was down (`on_error = "local"`), written when it
    /// is back. At most the cache's capacity.
    dirty: HashMap<String, String>,
    next_token: u64,
    metrics: Metrics,
}

impl Sessions {
    /// Bindings per `cfg`. A shared store's client starts with [`Self::start`].
    pub fn new(cfg: &StoreConfig, metrics: Metrics) -> Self {
        metrics.set_store_up(true);
        Sessions {
            cache: MemoryBindingStore::new(
                NonZeroUsize::new(cfg.cache_capacity.max(1)).expect("nonzero"),
            ),
            cfg: cfg.clone(),
            remote: None,
            up: true,
            waiting: HashMap::new(),
            dirty: HashMap::new(),
            next_token: BACKGROUND + 1,
            metrics,
        }
    }

    /// Starts a shared store's client task on the current runtime, reporting on
    /// `events`; nothing for `kind = "memory"`.
    pub fn start(&mut self, events: mpsc::UnboundedSender<Event>) {
        if self.cfg.kind == StoreKind::Memory || self.remote.is_some() {
            return;
        }
        info!(
            kind = crate::config::ConfigName::name(self.cfg.kind),
            addresses = %self.cfg.addresses.join(", "),
            "session store: connecting"
        );
        self.remote = Some(remote::spawn(&self.cfg, events));
    }

    /// True when bindings are shared with other hosts (a Redis store).
    pub fn is_shared(&self) -> bool {
        self.remote.is_some()
    }

    /// Whether the store answered its last call.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The `on_error` policy, counted as one fallback.
    pub fn fallback(&self) -> StoreOnError {
        let p = self.cfg.on_error;
        self.metrics.inc_store_fallback(match p {
            StoreOnError::Local => "local",
            StoreOnError::Reject => "reject",
        });
        p
    }

    /// Result-Code and Error-Message for `on_error = "reject"`.
    pub fn reject_answer(&self) -> (u32, &str) {
        (self.cfg.result_code, &self.cfg.error_message)
    }

    /// Requests the caller parks on tokens.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The peer `session` is bound to: from the cache, else (`ask_store` and shared)
    /// from the store.
    pub fn lookup(&mut self, session: &str, ask_store: bool, now: Duration) -> Lookup {
        if let Ok(Some(peer)) = self.cache.get(session, now) {
            self.metrics.inc_session_cache(true);
            return Lookup::Hit(peer);
        }
        self.metrics.inc_session_cache(false);
        if !ask_store || self.remote.is_none() {
            return Lookup::Miss;
        }
        if !self.up {
            return Lookup::Failed;
        }
        Lookup::Wait(self.call(Op::Get, session, "", true))
    }

    /// Binds `session` to `peer` (new, changed or refreshed) in the cache and, if
    /// shared, in the store.
    pub fn bind(&mut self, session: &str, peer: &str, now: Duration) -> Write {
        let changed = !matches!(self.cache.get(session, now), Ok(Some(p)) if p == peer);
        let _ = self.cache.bind(session, peer, self.cfg.ttl, now);
        if self.remote.is_none() {
            return Write::Done;
        }
        if !self.up {
            self.remember(session, peer);
            return if changed { Write::Failed } else { Write::Done };
        }
        let wait = changed && self.cfg.write == StoreWrite::BeforeForward;
        let token = self.call(Op::Set, session, peer, wait);
        if wait {
            Write::Wait(token)
        } else {
            Write::Done
        }
    }

    /// The session ended (its CCR-T was answered): forget the binding everywhere.
    pub fn unbind(&mut self, session: &str, now: Duration) {
        let _ = self.cache.unbind(session, now);
        self.dirty.remove(session);
        if self.remote.is_some() && self.up {
            self.call(Op::Del, session, "", false);
        }
    }

    /// Housekeeping: expired cache entries; while the store is down, one probe.
    pub fn tick(&mut self, now: Duration) {
        self.cache.purge_expired(now);
        if self.remote.is_some() && !self.up {
            let probe = format!("{}probe", self.cfg.key_prefix);
            self.send(BACKGROUND, Op::Get, probe, String::new());
        }
        self.metrics.set_store_waiting(self.waiting.len() as u64);
    }

    /// An event from the client task; the waited-for call it resolves, if any.
    pub fn on_event(&mut self, ev: Event, now: Duration) -> Option<Resolved> {
        match ev {
            Event::Connected => {
                self.set_up();
                None
            }
            Event::ConnectFailed(e) => {
                self.set_down(&e);
                None
            }
            Event::Reply {
                token,
                op,
                result,
                took,
            } => {
                self.metrics.observe_store_call(op.name(), took);
                match &result {
                    Ok(_) => {
                        if op == Op::Set {
                            self.metrics.inc_session_binding("written");
                        } else if op == Op::Del {
                            self.metrics.inc_session_binding("deleted");
                        }
                        self.set_up();
                    }
                    Err(e) => {
                        self.metrics.inc_store_error(op.name(), e.kind());
                        self.set_down(&e.to_string());
                    }
                }
                let w = self.waiting.remove(&token)?;
                match (&result, w.op) {
                    (Ok(Some(peer)), Op::Get) => {
                        let _ = self.cache.bind(&w.session, peer, self.cfg.ttl, now);
                    }
                    (Err(_), Op::Set) => self.remember(&w.session, &w.peer),
                    _ => {}
                }
                Some((token, result))
            }
        }
    }

    fn remember(&mut self, session: &str, peer: &str) {
        if self.cfg.on_error == StoreOnError::Local
            && (self.dirty.len() < self.cfg.cache_capacity || self.dirty.contains_key(session))
        {
            self.dirty.insert(session.to_owned(), peer.to_owned());
        }
    }

    fn set_up(&mut self) {
        if self.up {
            return;
        }
        self.up = true;
        self.metrics.set_store_up(true);
        info!(
            reconciling = self.dirty.len(),
            "session store reachable again; writing the bindings made meanwhile"
        );
        for (session, peer) in std::mem::take(&mut self.dirty) {
            self.call(Op::Set, &session, &peer, false);
        }
    }

    fn set_down(&mut self, reason: &str) {
        if !self.up {
            return;
        }
        self.up = false;
        self.metrics.set_store_up(false);
        warn!(
            reason,
            on_error = crate::config::ConfigName::name(self.cfg.on_error),
            "session store unreachable; requests that need it follow on_error until it answers"
        );
    }

    fn call(&mut self, op: Op, session: &str, peer: &str, wait: bool) -> u64 {
        let token = if wait {
            let t = self.next_token;
            self.next_token += 1;
            self.waiting.insert(
                t,
                Waiting {
                    op,
                    session: session.to_owned(),
                    peer: peer.to_owned(),
                },
            );
            t
        } else {
            BACKGROUND
        };
        let key = format!("{}{session}", self.cfg.key_prefix);
        self.send(token, op, key, peer.to_owned());
        token
    }

    fn send(&mut self, token: u64, op: Op, key: String, value: String) {
        let Some(tx) = &self.remote else { return };
        let call = Call {
            token,
            op,
            key,
            value,
            ttl: self.cfg.ttl,
        };
        // The client task only ends when this sender is dropped; should it have died
        // anyway, the caller's deadline on the parked request still answers it.
        let _ = tx.send(call);
    }

    /// The caller gave up waiting for `token` (its deadline passed).
    pub fn abandon(&mut self, token: u64) {
        if let Some(w) = self.waiting.remove(&token)
            && w.op == Op::Set
        {
            self.remember(&w.session, &w.peer);
        }
    }

    /// How long a parked request may wait for its call before the caller treats it as
    /// failed: the store's timeout plus slack for the reply to travel.
    pub fn deadline_after(&self) -> Duration {
        self.cfg.timeout + Duration::from_millis(500)
    }
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("kind", &self.cfg.kind)
            .field("up", &self.up)
            .field("cached", &self.cache.len())
            .field("waiting", &self.waiting.len())
            .field("dirty", &self.dirty.len())
            .finish()
    }
}
