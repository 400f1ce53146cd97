//! Realm routing, peer selection, session binding (docs/architecture.md §6, §7).
//!
//! Pure code: no sockets and no OS clock. Time is a `Duration` since an arbitrary
//! start, passed in by the caller. The agent and the load-balancing simulator call the
//! same code.
//!
//! - [`table`]: route entries (realm or `*`, optional application, peer, weight) and
//!   lookup (Destination-Host, exact realm, wildcard).
//! - [`select`]: weight tiers over good peers and the strategies `priority`,
//!   `round_robin`, `least_loaded`, `weighted_load`, `p2c` (RFC 8583 Load-Value:
//!   higher = less loaded).
//! - [`binding`]: Session-Id → peer-name store trait and the bounded in-memory store
//!   (the agent's shared Redis store is asynchronous: [`crate::session`]).
//! - [`router`]: one call per request combining all of the above with Gx/Gy stickiness.

pub mod binding;
pub mod peers;
pub mod rng;
pub mod router;
pub mod select;
pub mod table;

pub use binding::{BindingError, BindingStore, MemoryBindingStore, MemoryStoreStats};
pub use peers::{LOAD_VALUE_IDLE, LoadInfo, PeerId, PeerStates, PeerTable, PeerView};
pub use rng::SplitMix64;
pub use router::{
    APP_GX, APP_GY, BindingUpdate, CcRequestType, DEFAULT_BINDING_TTL, Decision, RouteOutcome,
    RouteRequest, Routed, Router, Unroutable, Via,
};
pub use select::{Selector, Strategy, UnknownStrategy};
pub use table::{
    Candidate, Lookup, RealmMatch, RouteEntry, RouteMatch, RouteTable, RouteTableError,
};
