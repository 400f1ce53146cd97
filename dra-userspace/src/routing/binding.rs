//! Session bindings: which peer serves a Gx/Gy session (Session-Id → peer name).
//!
//! The peer is stored by name (its DiameterIdentity), not by local index, so several
//! DRA hosts sharing one store (Redis, `crate::session`) agree on it.

use std::{
    collections::{BTreeMap, HashMap},
    num::NonZeroUsize,
    sync::Arc,
    time::Duration,
};

/// Errors from a synchronous binding store. The in-memory store never fails; the
/// agent's shared store (Redis) is asynchronous and lives in `crate::session`, so
/// this is what other [`BindingStore`] implementations (tests, simulators) report.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// The store could not be reached or failed during the call (includes timeouts).
    #[error("binding store I/O failed during {command}")]
    Io {
        /// Command in flight (GET, SET, DEL).
        command: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Session-Id → peer-name bindings with a time-to-live.
///
/// `now` is the caller's monotonic clock; a store that keeps its own clock may ignore
/// it. A binding whose TTL has passed is gone: `get` returns `None`.
pub trait BindingStore {
    /// The peer bound to `session_id`, if any (and not expired).
    fn get(&mut self, session_id: &str, now: Duration) -> Result<Option<String>, BindingError>;
    /// Bind (or rebind, or refresh) `session_id` to `peer` for `ttl` from `now`.
    fn bind(
        &mut self,
        session_id: &str,
        peer: &str,
        ttl: Duration,
        now: Duration,
    ) -> Result<(), BindingError>;
    /// Remove the binding, if any.
    fn unbind(&mut self, session_id: &str, now: Duration) -> Result<(), BindingError>;
}

impl<T: BindingStore + ?Sized> BindingStore for &mut T {
    fn get(&mut self, session_id: &str, now: Duration) -> Result<Option<String>, BindingError> {
        (**self).get(session_id, now)
    }
    fn bind(
        &mut self,
        session_id: &str,
        peer: &str,
        ttl: Duration,
        now: Duration,
    ) -> Result<(), BindingError> {
        (**self).bind(session_id, peer, ttl, now)
    }
    fn unbind(&mut self, session_id: &str, now: Duration) -> Result<(), BindingError> {
        (**self).unbind(session_id, now)
    }
}

/// Counters of the in-memory store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStoreStats {
    /// Live bindings dropped because the store was full.
    pub evictions: u64,
    /// Bindings dropped because their TTL had passed.
    pub expirations: u64,
}

#[derive(Debug, Clone)]
struct MemEntry {
    peer: Arc<str>,
    expires_at: Duration,
    seq: u64,
}

/// Bounded in-memory [`BindingStore`] for a single DRA host.
///
/// When full, binding a new session drops the binding closest to expiry (with one TTL
/// for all sessions: the one bound or refreshed longest ago) and counts an eviction.
#[derive(Debug, Clone)]
pub struct MemoryBindingStore {
    capacity: NonZeroUsize,
    map: HashMap<Arc<str>, MemEntry>,
    by_expiry: BTreeMap<(Duration, u64), Arc<str>>,
    seq: u64,
    stats: MemoryStoreStats,
}

impl MemoryBindingStore {
    /// A store holding at most `capacity` bindings.
    pub fn new(capacity: NonZeroUsize) -> Self {
        Self {
            capacity,
            map: HashMap::new(),
            by_expiry: BTreeMap::new(),
            seq: 0,
            stats: MemoryStoreStats::default(),
        }
    }

    /// Bindings held (expired ones not yet purged included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if no bindings are held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Maximum number of bindings.
    pub fn capacity(&self) -> usize {
        self.capacity.get()
    }

    /// Eviction and expiry counters.
    pub fn stats(&self) -> MemoryStoreStats {
        self.stats
    }

    /// Drop every binding whose TTL has passed at `now`; returns how many. Call it
    /// periodically to return memory; correctness does not depend on it.
    pub fn purge_expired(&mut self, now: Duration) -> usize {
        let mut n = 0;
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.map.remove(&key);
            n += 1;
        }
        self.stats.expirations += n as u64;
        n
    }

    fn remove(&mut self, session_id: &str) -> Option<MemEntry> {
        let e = self.map.remove(session_id)?;
        self.by_expiry.remove(&(e.expires_at, e.seq));
        Some(e)
    }
}

impl MemoryBindingStore {
    /// Removes `session_id`'s binding and returns its peer, if bound and not expired.
    pub fn take(&mut self, session_id: &str, now: Duration) -> Option<Arc<str>> {
        let e = self.remove(session_id)?;
        (e.expires_at > now).then_some(e.peer)
    }
}

impl BindingStore for MemoryBindingStore {
    fn get(&mut self, session_id: &str, now: Duration) -> Result<Option<String>, BindingError> {
        let Some(e) = self.map.get(session_id) else {
            return Ok(None);
        };
        if e.expires_at <= now {
            self.remove(session_id);
            self.stats.expirations += 1;
            return Ok(None);
        }
        Ok(Some(e.peer.to_string()))
    }

    fn bind(
        &mut self,
        session_id: &str,
        peer: &str,
        ttl: Duration,
        now: Duration,
    ) -> Result<(), BindingError> {
        if self.remove(session_id).is_none() {
            while self.map.len() >= self.capacity.get() {
                let Some(((expires_at, _), oldest)) = self.by_expiry.pop_first() else {
                    break;
                };
                self.map.remove(&oldest);
                if expires_at <= now {
                    self.stats.expirations += 1;
                } else {
                    self.stats.evictions += 1;
                }
            }
        }
        let key: Arc<str> = Arc::from(session_id);
        self.seq += 1;
        let expires_at = now.saturating_add(ttl);
        self.by_expiry
            .insert((expires_at, self.seq), Arc::clone(&key));
        self.map.insert(
            key,
            MemEntry {
                peer: Arc::from(peer),
                expires_at,
                seq: self.seq,
            },
        );
        Ok(())
    }

    fn unbind(&mut self, session_id: &str, _now: Duration) -> Result<(), BindingError> {
        self.remove(session_id);
        Ok(())
    }
}
