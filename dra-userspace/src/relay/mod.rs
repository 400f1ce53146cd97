//! The relay's sans-IO cores (docs/architecture.md §3, §4, §6): no sockets, no OS
//! clock — time is a `Duration` since an arbitrary start, passed in. The tokio shell
//! drives them.
//!
//! - [`pending`]: [`Relay`] forwards requests upstream (fresh Hop-by-Hop id,
//!   Route-Record, loop check, bounded pending table), maps answers back, retries once
//!   on an alternate peer with the T flag, and generates 3002/3004/3005 — every request
//!   gets exactly one outcome (RFC 6733 §6.1, §6.2, §5.5.4).
//! - [`reject`]: requests marked by the fast path are answered at once
//!   ([`reject_marked`]) with the most specific ingress profile ([`MarkedPolicy`]).
//! - [`rlf`]: [`Rlf`], the egress token bucket per upstream peer group with queue, delay
//!   tolerance, outstanding cap and back-pressure (StarOS RLF, docs/architecture.md §4).
//! - [`pipeline`]: [`Pipeline`] puts them together for the shell: relay core, then the
//!   group's egress limiter, then pending upstream; one count of outstanding requests
//!   per peer (the relay's), read by the limiter's cap and the selectors.
//! - [`forward`]: Route-Record helpers.
//!
//! One request's path through the shell:
//!
//! ```text
//! marked?  → MarkedHandler::handle → answer / discard
//! route    → Pipeline::forward: Relay::admit → Rlf::offer → Send (Relay::send: pending,
//!            encoded) | Queued (sent when poll_ready allows) | refused (Relay::refused /
//!            Relay::dropped: never pending)
//! answer   → Pipeline::on_answer → Delivery; the group's queue is serviced
//! timeout  → Pipeline::handle_timeout → Retry (route again, Pipeline::retry) | 3002
//! ```

pub mod forward;
pub mod pending;
pub mod pipeline;
pub mod reject;
pub mod rlf;

pub use forward::{append_route_record, is_loop, route_record_contains};
pub use pending::{
    Delivery, DownstreamRef, Expired, FailureCause, Held, Relay, RelayConfig, RelayError,
    RelayStats, Released, Retry, RetryOutcome, RetryTaken,
};
pub use pipeline::{Output, Pipeline};
pub use reject::{
    DEFAULT_REJECT_MESSAGE, GroupId, IngressRule, LimitAction, MarkedHandler, MarkedPolicy,
    MarkedPolicyConfig, MarkedResponse, MarkedStats, PolicyError, ProfileSource, RejectProfile,
    Scope, reject_marked, respond_marked,
};
pub use rlf::{
    DEFAULT_DELAY_TOLERANCE, DEFAULT_EGRESS_MESSAGE, DEFAULT_QUEUE_LIMIT, Offer, Overdue, Rlf,
    RlfConfig, RlfConfigError, RlfStats,
};
