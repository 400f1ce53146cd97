//! Gx/Gy session bindings for the agent: a bounded local cache in front of the store
//! that several DRA hosts share (docs/architecture.md §9, `[session_store]` in
//! docs/config.md).
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
//! - the same binding again (CCR-U): SET in the background (refreshes the TTL; should
//!   it fail, the binding is written again when the store is back);
//! - the answer to a CCR-T ([`Sessions::end`]): PEXPIRE [`ENDED_GRACE`] in the
//!   background — the binding outlives the session by the grace, so that a CCR-T resent
//!   with the T flag through another DRA host (the gateway lost the answer with this
//!   host) still finds its server. This host keeps it as long (at most twice as long)
//!   outside the cache: two generations of ended sessions, each entry a 64-bit keyed
//!   hash of the Session-Id and the index of its peer (no allocation per session), so
//!   that the cache holds only live sessions however fast sessions end.
//!
//! The store is "down" from the first failed call (or failed connect) until a call
//! succeeds again; each change is logged once. While down, no request waits for it:
//! a lookup or a new binding follows `on_error` at once (`local`: route with what this
//! host knows and remember the binding, written to the store when it is back;
//! `reject`: the caller answers `result_code`), and a probe GET once per tick finds
//! out when it is back.

pub mod remote;

/// How long an ended session's binding is still found after its CCR-T's answer: in the
/// store exactly, on this host between this and twice this.
pub const ENDED_GRACE: Duration = Duration::from_secs(10);

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::num::NonZeroUsize;
use std::sync::Arc;
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
    /// The store is down: follow `on_error` ([`StoreOnError`]).
    Failed,
}

/// A binding write's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Nothing to wait for (cached; written in the background if shared).
    Done,
    /// Written before forwarding: wait for this token.
    Wait(u64),
    /// The store is down and the binding is new: follow `on_error` ([`StoreOnError`]).
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
    /// Background SETs under way (session, peer), by token: one that fails is
    /// remembered like a binding made while the store was down.
    writing: HashMap<u64, (String, String)>,
    /// Ended sessions: keyed hash of the Session-Id → index in `ended_peers`; those ended
    /// since `ended_at`, and those of the grace before ([`Self::tick`] drops the older
    /// generation every [`ENDED_GRACE`]).
    ended: HashMap<u64, u32>,
    ended_before: HashMap<u64, u32>,
    ended_at: Duration,
    ended_hash: RandomState,
    /// The peers named by ended sessions (a handful: the servers).
    ended_peers: Vec<Arc<str>>,
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
            writing: HashMap::new(),
            ended: HashMap::new(),
            ended_before: HashMap::new(),
            ended_at: Duration::ZERO,
            ended_hash: RandomState::new(),
            ended_peers: Vec::new(),
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
        // A session that ended within the grace (a resent CCR-T, a late CCR-U; a new
        // CCR-I, which does not ask the store, starts a session instead).
        if let Some(peer) = ask_store.then(|| self.ended_peer(session)).flatten() {
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
        if changed && !self.up && self.remote.is_some() && self.cfg.on_error == StoreOnError::Reject
        {
            // The request will be answered `result_code`: it binds nothing.
            return Write::Failed;
        }
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

    /// The session ended (its CCR-T was answered): its binding leaves the cache and is
    /// kept [`ENDED_GRACE`] among the ended sessions here and, with PEXPIRE, in the store.
    pub fn end(&mut self, session: &str, now: Duration) {
        self.dirty.remove(session);
        let Some(peer) = self.cache.take(session, now) else {
            return;
        };
        if self.remote.is_some() && self.up {
            let key = format!("{}{session}", self.cfg.key_prefix);
            self.send_with_ttl(BACKGROUND, Op::Expire, key, String::new(), ENDED_GRACE);
        }
        let i = match self.ended_peers.iter().position(|p| *p == peer) {
            Some(i) => i,
            None => {
                self.ended_peers.push(peer);
                self.ended_peers.len() - 1
            }
        };
        let h = self.ended_hash.hash_one(session);
        self.ended.insert(h, i as u32);
    }

    /// The peer of `session` if it ended within the grace.
    fn ended_peer(&self, session: &str) -> Option<String> {
        if self.ended.is_empty() && self.ended_before.is_empty() {
            return None;
        }
        let h = self.ended_hash.hash_one(session);
        let i = self.ended.get(&h).or_else(|| self.ended_before.get(&h))?;
        self.ended_peers.get(*i as usize).map(|p| p.to_string())
    }

    /// Housekeeping: expired cache entries, the older generation of ended sessions;
    /// while the store is down, one probe.
    pub fn tick(&mut self, now: Duration) {
        self.cache.purge_expired(now);
        if now >= self.ended_at + ENDED_GRACE {
            self.ended_before = std::mem::take(&mut self.ended);
            self.ended_at = now;
        }
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
                        } else if matches!(op, Op::Del | Op::Expire) {
                            self.metrics.inc_session_binding("deleted");
                        }
                        self.set_up();
                    }
                    Err(e) => {
                        self.metrics.inc_store_error(op.name(), e.kind());
                        self.set_down(&e.to_string());
                    }
                }
                if let Some((session, peer)) = self.writing.remove(&token) {
                    // Unless the session ended (or moved) meanwhile.
                    let current = matches!(self.cache.get(&session, now), Ok(Some(p)) if p == peer);
                    if result.is_err() && current {
                        self.remember(&session, &peer);
                    }
                    return None;
                }
                let w = self.waiting.remove(&token)?;
                match (&result, w.op) {
                    (Ok(Some(peer)), Op::Get) => {
                        let _ = self.cache.bind(&w.session, peer, self.cfg.ttl, now);
                    }
                    (Err(_), Op::Set) => self.write_failed(&w.session, &w.peer, now),
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
        } else if op == Op::Set {
            let t = self.next_token;
            self.next_token += 1;
            self.writing
                .insert(t, (session.to_owned(), peer.to_owned()));
            t
        } else {
            BACKGROUND
        };
        let key = format!("{}{session}", self.cfg.key_prefix);
        self.send(token, op, key, peer.to_owned());
        token
    }

    fn send(&mut self, token: u64, op: Op, key: String, value: String) {
        self.send_with_ttl(token, op, key, value, self.cfg.ttl);
    }

    fn send_with_ttl(&mut self, token: u64, op: Op, key: String, value: String, ttl: Duration) {
        let Some(tx) = &self.remote else { return };
        let call = Call {
            token,
            op,
            key,
            value,
            ttl,
        };
        // The client task only ends when this sender is dropped; should it have died
        // anyway, the caller's deadline on the parked request still answers it.
        let _ = tx.send(call);
    }

    /// The caller gave up waiting for `token` (its deadline passed).
    pub fn abandon(&mut self, token: u64, now: Duration) {
        if let Some(w) = self.waiting.remove(&token)
            && w.op == Op::Set
        {
            self.write_failed(&w.session, &w.peer, now);
        }
    }

    /// A binding written before forwarding failed: with `local` the request goes on
    /// and the binding is written later; with `reject` the request is answered and
    /// binds nothing.
    fn write_failed(&mut self, session: &str, peer: &str, now: Duration) {
        match self.cfg.on_error {
            StoreOnError::Local => self.remember(session, peer),
            StoreOnError::Reject => {
                if matches!(self.cache.get(session, now), Ok(Some(p)) if p == peer) {
                    let _ = self.cache.unbind(session, now);
                }
            }
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
            .field("writing", &self.writing.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! The binding path against a fake client task: the calls `Sessions` hands it are
    //! read from its channel, its replies fed back as events (docs/architecture.md §9).

    use super::*;
    use tokio::sync::mpsc::error::TryRecvError;

    const TTL: Duration = Duration::from_secs(10);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn shared(
        write: StoreWrite,
        on_error: StoreOnError,
    ) -> (Sessions, mpsc::UnboundedReceiver<Call>, Metrics) {
        let cfg = StoreConfig {
            kind: StoreKind::Redis,
            addresses: vec!["127.0.0.1:6379".into()],
            ttl: TTL,
            write,
            on_error,
            ..StoreConfig::default()
        };
        let metrics = Metrics::new();
        let mut s = Sessions::new(&cfg, metrics.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        s.remote = Some(tx);
        (s, rx, metrics)
    }

    fn reply(token: u64, op: Op, result: Result<Option<String>, StoreError>) -> Event {
        Event::Reply {
            token,
            op,
            result,
            took: Duration::from_millis(1),
        }
    }

    fn call(rx: &mut mpsc::UnboundedReceiver<Call>) -> Call {
        rx.try_recv().expect("a store call was made")
    }

    fn no_call(rx: &mut mpsc::UnboundedReceiver<Call>) {
        match rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            other => panic!("expected no store call, got {other:?}"),
        }
    }

    /// Binds `sid` to `peer` before forwarding and lets the store confirm it.
    fn bound(s: &mut Sessions, rx: &mut mpsc::UnboundedReceiver<Call>, sid: &str, peer: &str) {
        let Write::Wait(t) = s.bind(sid, peer, secs(0)) else {
            panic!("a new binding is written before forwarding")
        };
        let c = call(rx);
        assert_eq!((c.op, c.token, c.value.as_str()), (Op::Set, t, peer));
        assert_eq!(
            s.on_event(reply(t, Op::Set, Ok(None)), secs(0)),
            Some((t, Ok(None)))
        );
    }

    /// A store written before forwarding, local on error, in which s1 is [`bound`] to
    /// pcrf1.
    fn s1_bound_to_pcrf1() -> (Sessions, mpsc::UnboundedReceiver<Call>, Metrics) {
        let (mut s, mut rx, metrics) = shared(StoreWrite::BeforeForward, StoreOnError::Local);
        bound(&mut s, &mut rx, "s1", "pcrf1");
        (s, rx, metrics)
    }

    #[test]
    fn a_cache_hit_costs_no_round_trip() {
        let (mut s, mut rx, _) = s1_bound_to_pcrf1();
        assert_eq!(s.lookup("s1", true, secs(1)), Lookup::Hit("pcrf1".into()));
        no_call(&mut rx);
        // Not cached: one GET, whose answer fills the cache.
        let Lookup::Wait(t) = s.lookup("s2", true, secs(1)) else {
            panic!("a miss asks the store")
        };
        let c = call(&mut rx);
        assert_eq!((c.op, c.key.as_str()), (Op::Get, "dra:sess:s2"));
        let got = s.on_event(reply(t, Op::Get, Ok(Some("pcrf2".into()))), secs(1));
        assert_eq!(got, Some((t, Ok(Some("pcrf2".into())))));
        assert_eq!(s.lookup("s2", true, secs(2)), Lookup::Hit("pcrf2".into()));
        no_call(&mut rx);
        // A CCR-I (no lookup in the store wanted) misses without a call.
        assert_eq!(s.lookup("s3", false, secs(2)), Lookup::Miss);
        no_call(&mut rx);
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn ccr_u_refreshes_the_ttl_in_the_store_without_waiting() {
        let (mut s, mut rx, _) = s1_bound_to_pcrf1();
        // The CCR-U's Bind of the same peer at 8 s: nothing to wait for, one SET PX ttl.
        assert_eq!(s.bind("s1", "pcrf1", secs(8)), Write::Done);
        let c = call(&mut rx);
        assert_eq!(
            (c.op, c.key.as_str(), c.value.as_str(), c.ttl),
            (Op::Set, "dra:sess:s1", "pcrf1", TTL)
        );
        assert_eq!(s.on_event(reply(c.token, Op::Set, Ok(None)), secs(8)), None);
        assert_eq!(s.waiting(), 0, "nobody waits for a refresh");
        // The cache's TTL moved too: still bound at 15 s (10 s after the CCR-U, 15 s
        // after the CCR-I).
        assert_eq!(s.lookup("s1", true, secs(15)), Lookup::Hit("pcrf1".into()));
        assert!(matches!(s.lookup("s1", true, secs(19)), Lookup::Wait(_)));
    }

    #[test]
    fn a_failover_rebinding_is_written_through() {
        let (mut s, mut rx, _) = s1_bound_to_pcrf1();
        // pcrf1 failed: the router rebinds to pcrf2; the other hosts must learn it
        // before the request goes out.
        let Write::Wait(t) = s.bind("s1", "pcrf2", secs(1)) else {
            panic!("a changed binding is written before forwarding")
        };
        let c = call(&mut rx);
        assert_eq!((c.op, c.token, c.value.as_str()), (Op::Set, t, "pcrf2"));
        assert_eq!(s.lookup("s1", true, secs(1)), Lookup::Hit("pcrf2".into()));

        // write = "async": the same write, nobody waits for it.
        let (mut s, mut rx, _) = shared(StoreWrite::Async, StoreOnError::Local);
        assert_eq!(s.bind("s1", "pcrf1", secs(0)), Write::Done);
        assert_eq!(s.bind("s1", "pcrf2", secs(1)), Write::Done);
        let values: Vec<String> = [call(&mut rx), call(&mut rx)]
            .into_iter()
            .map(|c| c.value)
            .collect();
        assert_eq!(values, ["pcrf1", "pcrf2"]);
    }

    #[test]
    fn the_answered_ccr_t_deletes_the_binding() {
        let (mut s, mut rx, metrics) = s1_bound_to_pcrf1();
        s.unbind("s1", secs(1));
        let c = call(&mut rx);
        assert_eq!((c.op, c.key.as_str()), (Op::Del, "dra:sess:s1"));
        assert_eq!(
            s.on_event(reply(BACKGROUND, Op::Del, Ok(None)), secs(1)),
            None
        );
        assert!(matches!(s.lookup("s1", true, secs(1)), Lookup::Wait(_)));
        let text = metrics.encode();
        assert!(
            text.contains("dra_session_bindings_total{op=\"deleted\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("dra_session_bindings_total{op=\"written\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn an_ended_session_is_found_for_the_grace_then_forgotten() {
        let (mut s, mut rx, metrics) = s1_bound_to_pcrf1();
        s.end("s1", secs(1));
        // In the store: PEXPIRE with the grace, not an immediate DEL.
        let c = call(&mut rx);
        assert_eq!(
            (c.op, c.key.as_str(), c.ttl),
            (Op::Expire, "dra:sess:s1", ENDED_GRACE)
        );
        s.on_event(reply(BACKGROUND, Op::Expire, Ok(None)), secs(1));
        assert!(
            metrics
                .encode()
                .contains("dra_session_bindings_total{op=\"deleted\"} 1")
        );
        // Here: out of the cache, still found (a CCR-T resent with the T flag).
        assert_eq!(s.cache.len(), 0, "the cache holds live sessions only");
        assert_eq!(s.lookup("s1", true, secs(2)), Lookup::Hit("pcrf1".into()));
        assert!(matches!(s.lookup("s2", true, secs(2)), Lookup::Wait(_)));
        let _ = call(&mut rx); // that GET
        // Found at least ENDED_GRACE after its end, whatever the tick phase ...
        for t in 2..=11 {
            s.tick(secs(t));
            let hit = s.lookup("s1", true, secs(t));
            assert_eq!(hit, Lookup::Hit("pcrf1".into()), "{t} s");
        }
        no_call(&mut rx);
        // ... and gone after twice that: the next lookup asks the store.
        for t in 12..=21 {
            s.tick(secs(t));
        }
        assert!(matches!(s.lookup("s1", true, secs(21)), Lookup::Wait(_)));
        let _ = call(&mut rx);
        // An unbound session ends without a store call.
        s.end("s9", secs(21));
        no_call(&mut rx);
    }

    #[test]
    fn while_down_nothing_waits_and_local_bindings_are_reconciled() {
        let (mut s, mut rx, metrics) = shared(StoreWrite::BeforeForward, StoreOnError::Local);
        assert_eq!(
            s.on_event(Event::ConnectFailed("refused".into()), secs(0)),
            None
        );
        assert!(!s.is_up());
        assert_eq!(s.lookup("s1", true, secs(0)), Lookup::Failed);
        assert_eq!(s.bind("s1", "pcrf1", secs(0)), Write::Failed);
        no_call(&mut rx);
        // One probe per tick finds out when it is back.
        s.tick(secs(1));
        assert_eq!(call(&mut rx).op, Op::Get);
        assert_eq!(s.on_event(Event::Connected, secs(2)), None);
        assert!(s.is_up());
        let c = call(&mut rx);
        assert_eq!(
            (c.op, c.key.as_str(), c.value.as_str()),
            (Op::Set, "dra:sess:s1", "pcrf1")
        );
        no_call(&mut rx);
        assert!(metrics.encode().contains("dra_session_store_up 1"));
    }

    /// Binds `sid` to pcrf1 before forwarding (the store call is made): the token of the
    /// write and the timeout it is to end with.
    fn timed_out_bind(
        s: &mut Sessions,
        rx: &mut mpsc::UnboundedReceiver<Call>,
        sid: &str,
    ) -> (u64, StoreError) {
        let Write::Wait(t) = s.bind(sid, "pcrf1", secs(0)) else {
            panic!("written before forwarding")
        };
        call(rx);
        (t, StoreError::Timeout(Duration::from_millis(200)))
    }

    #[test]
    fn a_timed_out_write_fails_its_request_and_is_written_later() {
        let (mut s, mut rx, metrics) = shared(StoreWrite::BeforeForward, StoreOnError::Local);
        let (t, e) = timed_out_bind(&mut s, &mut rx, "s1");
        assert_eq!(
            s.on_event(reply(t, Op::Set, Err(e.clone())), secs(0)),
            Some((t, Err(e)))
        );
        assert!(!s.is_up());
        let text = metrics.encode();
        assert!(
            text.contains("dra_session_store_errors_total{op=\"set\",kind=\"timeout\"} 1"),
            "{text}"
        );
        // The first answered call brings it back and writes the binding again.
        s.on_event(reply(BACKGROUND, Op::Get, Ok(None)), secs(1));
        let c = call(&mut rx);
        assert_eq!((c.op, c.value.as_str()), (Op::Set, "pcrf1"));
    }

    #[test]
    fn a_failed_refresh_is_written_when_the_store_is_back() {
        let (mut s, mut rx, _) = s1_bound_to_pcrf1();
        bound(&mut s, &mut rx, "s2", "pcrf2");
        assert_eq!(s.bind("s1", "pcrf1", secs(1)), Write::Done);
        assert_eq!(s.bind("s2", "pcrf2", secs(1)), Write::Done);
        let (c1, c2) = (call(&mut rx), call(&mut rx));
        // s2 ends before its refresh fails: nothing to bring back for it.
        s.unbind("s2", secs(1));
        assert_eq!(call(&mut rx).op, Op::Del);
        let reset = || Err(StoreError::Redis("connection reset".into()));
        assert_eq!(s.on_event(reply(c1.token, Op::Set, reset()), secs(1)), None);
        assert_eq!(s.on_event(reply(c2.token, Op::Set, reset()), secs(1)), None);
        assert!(!s.is_up());
        s.on_event(Event::Connected, secs(2));
        let c = call(&mut rx);
        assert_eq!(
            (c.op, c.key.as_str(), c.value.as_str()),
            (Op::Set, "dra:sess:s1", "pcrf1")
        );
        no_call(&mut rx);
    }

    #[test]
    fn with_on_error_reject_nothing_is_remembered() {
        let (mut s, mut rx, _) = shared(StoreWrite::BeforeForward, StoreOnError::Reject);
        // A write that times out: its request is answered, the session never started.
        let (t, e) = timed_out_bind(&mut s, &mut rx, "s0");
        s.on_event(reply(t, Op::Set, Err(e)), secs(0));
        assert_eq!(s.lookup("s0", false, secs(0)), Lookup::Miss);
        // While down: nothing cached either.
        assert_eq!(s.bind("s1", "pcrf1", secs(0)), Write::Failed);
        assert_eq!(s.lookup("s1", false, secs(0)), Lookup::Miss);
        assert_eq!(s.fallback(), StoreOnError::Reject);
        s.on_event(Event::Connected, secs(1));
        no_call(&mut rx);
    }
}
