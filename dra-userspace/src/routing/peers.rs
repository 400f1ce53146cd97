//! What routing needs to know about peers: identity, good state, reported load.
//!
//! Routing never owns peer connections. The agent (or the simulator) keeps the peer
//! state machines and exposes a read-only view through [`PeerStates`]; [`PeerTable`] is
//! a ready-made implementation for tests and simulations.

use std::{collections::HashMap, time::Duration};

/// Index of a peer in the caller's peer list (config order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub usize);

/// Highest RFC 8583 Load-Value: the sender reports zero load.
pub const LOAD_VALUE_IDLE: u16 = u16::MAX;

/// A load report received from a peer (RFC 8583 Load AVP, usually piggybacked on DWA).
///
/// Direction: RFC 8583 §7.3 — the Load-Value range is 0..=65535 and "a higher value
/// indicates a lower load"; 65535 = no load, 0 = 100 % loaded. It is specified like the
/// weight of a DNS SRV record (RFC 2782), i.e. it is available capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadInfo {
    /// Load-Value as received: higher = less loaded (RFC 8583 §7.3).
    pub value: u16,
    /// When it was received, on the caller's monotonic clock (time since an arbitrary start).
    pub received_at: Duration,
}

impl LoadInfo {
    /// Load as a fraction 0.0 (idle) ..= 1.0 (fully loaded), for reports and metrics.
    pub fn load_fraction(&self) -> f64 {
        f64::from(LOAD_VALUE_IDLE - self.value) / f64::from(LOAD_VALUE_IDLE)
    }

    /// The report's age at `now` (zero if `now` is before `received_at`).
    pub fn age(&self, now: Duration) -> Duration {
        now.saturating_sub(self.received_at)
    }
}

/// The routing-relevant state of one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerView {
    /// Peer state Open and watchdog OK (RFC 6733 §5.6, RFC 3539 §3.4): eligible for
    /// new requests.
    pub good: bool,
    /// Latest load report, if the peer sends RFC 8583 Load AVPs.
    pub load: Option<LoadInfo>,
    /// Requests this agent has sent to the peer and not yet seen answered.
    pub pending: u32,
}

/// Read-only access to peer states, provided by the agent or the simulator.
pub trait PeerStates {
    /// State of a peer; `None` for an unknown id (treated as not good).
    fn view(&self, id: PeerId) -> Option<PeerView>;
    /// The peer's DiameterIdentity (Origin-Host), used in session bindings.
    fn name(&self, id: PeerId) -> Option<&str>;
    /// Find a peer by DiameterIdentity. Case-insensitive: DiameterIdentity is an FQDN
    /// (RFC 6733 §4.3.1) and DNS names compare case-insensitively (RFC 4343).
    fn find(&self, name: &str) -> Option<PeerId>;

    /// True if the peer exists and is in good state.
    fn is_good(&self, id: PeerId) -> bool {
        self.view(id).is_some_and(|v| v.good)
    }
}

impl<T: PeerStates + ?Sized> PeerStates for &T {
    fn view(&self, id: PeerId) -> Option<PeerView> {
        (**self).view(id)
    }
    fn name(&self, id: PeerId) -> Option<&str> {
        (**self).name(id)
    }
    fn find(&self, name: &str) -> Option<PeerId> {
        (**self).find(name)
    }
}

/// A simple [`PeerStates`] implementation: a list of named peers, id = position.
#[derive(Debug, Clone, Default)]
pub struct PeerTable {
    names: Vec<String>,
    views: Vec<PeerView>,
    by_name: HashMap<String, PeerId>,
}

impl PeerTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a peer (initially not good, no load, nothing pending) and return its id.
    /// Adding a name that is already present (case-insensitively) returns the existing id.
    pub fn add(&mut self, name: &str) -> PeerId {
        let key = name.to_ascii_lowercase();
        if let Some(id) = self.by_name.get(&key) {
            return *id;
        }
        let id = PeerId(self.names.len());
        self.names.push(name.to_owned());
        self.views.push(PeerView::default());
        self.by_name.insert(key, id);
        id
    }

    /// Number of peers.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True if there are no peers.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Mutable access to a peer's state; `None` for an unknown id.
    pub fn view_mut(&mut self, id: PeerId) -> Option<&mut PeerView> {
        self.views.get_mut(id.0)
    }

    /// Set the good flag (no-op for an unknown id).
    pub fn set_good(&mut self, id: PeerId, good: bool) {
        if let Some(v) = self.view_mut(id) {
            v.good = good;
        }
    }

    /// Set the latest load report (no-op for an unknown id).
    pub fn set_load(&mut self, id: PeerId, load: Option<LoadInfo>) {
        if let Some(v) = self.view_mut(id) {
            v.load = load;
        }
    }

    /// Set the pending-request count (no-op for an unknown id).
    pub fn set_pending(&mut self, id: PeerId, pending: u32) {
        if let Some(v) = self.view_mut(id) {
            v.pending = pending;
        }
    }
}

impl PeerStates for PeerTable {
    fn view(&self, id: PeerId) -> Option<PeerView> {
        self.views.get(id.0).copied()
    }

    fn name(&self, id: PeerId) -> Option<&str> {
        self.names.get(id.0).map(String::as_str)
    }

    fn find(&self, name: &str) -> Option<PeerId> {
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            self.by_name.get(&name.to_ascii_lowercase()).copied()
        } else {
            self.by_name.get(name).copied()
        }
    }
}
