//! Egress limits per upstream peer group: the StarOS Rate Limiting Function
//! (docs/architecture.md §4). A token bucket in messages per second with a burst, a
//! bounded FIFO with a delay tolerance, an optional cap on outstanding requests per
//! peer, and back-pressure: [`Offer::Queued`] tells the application to slow down,
//! [`Rlf::poll_ready`] tells it when it may send.
//!
//! Sans-IO and generic over the queued item `T` (the shell's request handle). Time is a
//! `Duration` since an arbitrary start. The requests outstanding per peer are not
//! counted here: the caller owns that count (the relay's pending table) and passes a
//! view of it (`outstanding`) wherever the cap matters.
//!
//! The bucket is the project's one GCRA ([`dra_common::gcra`], the virtual-scheduling
//! form of a token bucket, ITU-T I.371) on integer nanoseconds, as the fast path's.

use std::collections::VecDeque;
use std::time::Duration;

use super::{LimitAction, RejectProfile};
use crate::diameter::result_code;
use crate::routing::PeerId;

/// Default delay tolerance: how long a request may wait for a token.
pub const DEFAULT_DELAY_TOLERANCE: Duration = Duration::from_secs(2);
/// Default queue limit.
pub const DEFAULT_QUEUE_LIMIT: u32 = 1000;
/// Default Error-Message of an egress rejection.
pub const DEFAULT_EGRESS_MESSAGE: &str = "egress rate limit exceeded";

/// Settings of one limiter (one upstream peer group).
#[derive(Debug, Clone, PartialEq)]
pub struct RlfConfig {
    /// Messages per second (> 0, finite).
    pub rate: f64,
    /// Bucket size in messages (≥ 1): how many may go back to back.
    pub burst: u32,
    /// Most requests queued for a token; 0 = never queue.
    pub queue_limit: u32,
    /// Longest wait in the queue; zero = never queue.
    pub delay_tolerance: Duration,
    /// Most requests sent to one peer and not yet answered (StarOS `max-outstanding`).
    pub max_outstanding_per_peer: Option<u32>,
    /// Applied when the queue is full or a request waited too long.
    pub action: LimitAction,
}

impl RlfConfig {
    /// `rate`/`burst` with the defaults: queue 1000, delay tolerance 2 s, no
    /// outstanding cap, reject with 3002 "egress rate limit exceeded".
    pub fn new(rate: f64, burst: u32) -> RlfConfig {
        RlfConfig {
            rate,
            burst,
            queue_limit: DEFAULT_QUEUE_LIMIT,
            delay_tolerance: DEFAULT_DELAY_TOLERANCE,
            max_outstanding_per_peer: None,
            action: LimitAction::Reject(RejectProfile {
                result_code: result_code::UNABLE_TO_DELIVER,
                error_message: DEFAULT_EGRESS_MESSAGE.to_owned(),
            }),
        }
    }
}

/// A bad [`RlfConfig`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RlfConfigError {
    /// The rate is not a positive finite number.
    #[error("egress rate must be a positive number of messages per second, not {rate}")]
    InvalidRate {
        /// The rate given.
        rate: f64,
    },
    /// The burst is zero.
    #[error("egress burst must be at least 1")]
    ZeroBurst,
}

/// Result of [`Rlf::offer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer<T> {
    /// Send it now.
    Send(T),
    /// Slow down: it is queued; [`Rlf::poll_ready`] returns it when it may go.
    Queued,
    /// Queue full, action reject: answer it.
    Rejected {
        /// The item.
        item: T,
        /// Result-Code of the answer.
        result_code: u32,
        /// Error-Message of the answer.
        error_message: String,
    },
    /// Queue full, action drop: discard it.
    Dropped(T),
}

/// A queued item that waited longer than the delay tolerance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overdue<T> {
    /// The item.
    pub item: T,
    /// The peer it was for.
    pub peer: PeerId,
    /// How long it waited.
    pub waited: Duration,
    /// The configured action to apply.
    pub action: LimitAction,
}

/// Counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RlfStats {
    /// Items offered.
    pub offered: u64,
    /// Sent at once by [`Rlf::offer`].
    pub sent_direct: u64,
    /// Sent from the queue by [`Rlf::poll_ready`].
    pub sent_queued: u64,
    /// Queued by [`Rlf::offer`].
    pub queued: u64,
    /// Refused by [`Rlf::offer`] (queue full or no queueing).
    pub refused: u64,
    /// Expired in the queue ([`Rlf::poll_expired`]).
    pub expired: u64,
    /// Removed from the queue by [`Rlf::on_peer_failed`].
    pub flushed: u64,
}

/// The egress bucket: [`dra_common::gcra`] on nanoseconds since the caller's start.
#[derive(Debug, Clone)]
struct Gcra {
    rate: dra_common::gcra::Rate,
    /// Theoretical arrival time of the next conforming message (ns).
    tat: u64,
}

fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

impl Gcra {
    fn new(rate: f64, burst: u32) -> Gcra {
        Gcra {
            rate: dra_common::gcra::Rate::new(rate, burst),
            tat: 0,
        }
    }

    fn available(&self, now: Duration) -> bool {
        dra_common::gcra::ready_at(self.tat, self.rate.tolerance_ns) <= nanos(now)
    }

    fn take(&mut self, now: Duration) {
        let r = self.rate;
        // Called only when available (or to send regardless: then from max(tat, now)).
        self.tat = dra_common::gcra::conforms(self.tat, nanos(now), r.interval_ns, r.tolerance_ns)
            .unwrap_or_else(|| self.tat.max(nanos(now)).saturating_add(r.interval_ns));
    }

    /// When the next message conforms.
    fn ready_at_duration(&self) -> Duration {
        Duration::from_nanos(dra_common::gcra::ready_at(self.tat, self.rate.tolerance_ns))
    }
}

#[derive(Debug)]
struct Queued<T> {
    item: T,
    peer: PeerId,
    since: Duration,
}

/// One egress limiter. See the module docs.
#[derive(Debug)]
pub struct Rlf<T> {
    cfg: RlfConfig,
    bucket: Gcra,
    queue: VecDeque<Queued<T>>,
    stats: RlfStats,
}

impl<T> Rlf<T> {
    /// A limiter with a full bucket and an empty queue.
    pub fn new(cfg: RlfConfig) -> Result<Rlf<T>, RlfConfigError> {
        if !(cfg.rate.is_finite() && cfg.rate > 0.0) {
            return Err(RlfConfigError::InvalidRate { rate: cfg.rate });
        }
        if cfg.burst == 0 {
            return Err(RlfConfigError::ZeroBurst);
        }
        Ok(Rlf {
            bucket: Gcra::new(cfg.rate, cfg.burst),
            cfg,
            queue: VecDeque::new(),
            stats: RlfStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RlfConfig {
        &self.cfg
    }

    /// Offers `item` for `peer`: [`Offer::Send`] when a token is free, the peer is
    /// below its outstanding cap (`outstanding` gives each peer's count) and nothing
    /// queued is entitled to go first; [`Offer::Queued`] when it may wait; otherwise the
    /// configured action at once. A queued item whose token is already due goes first:
    /// after `Queued`, call [`Rlf::poll_ready`] (and keep calling it at
    /// [`Rlf::poll_timeout`]).
    pub fn offer(
        &mut self,
        now: Duration,
        item: T,
        peer: PeerId,
        outstanding: impl Fn(PeerId) -> u32,
    ) -> Offer<T> {
        self.stats.offered += 1;
        if self.bucket.available(now)
            && !self.peer_blocked(peer, &outstanding)
            && !self.any_eligible(now, &outstanding)
        {
            self.bucket.take(now);
            self.stats.sent_direct += 1;
            return Offer::Send(item);
        }
        let may_queue =
            !self.cfg.delay_tolerance.is_zero() && self.queue.len() < self.cfg.queue_limit as usize;
        if may_queue {
            self.queue.push_back(Queued {
                item,
                peer,
                since: now,
            });
            self.stats.queued += 1;
            return Offer::Queued;
        }
        self.stats.refused += 1;
        match &self.cfg.action {
            LimitAction::Reject(p) => Offer::Rejected {
                item,
                result_code: p.result_code,
                error_message: p.error_message.clone(),
            },
            LimitAction::Drop => Offer::Dropped(item),
        }
    }

    /// The next queued item that may be sent now (FIFO among items whose peer is below
    /// its outstanding cap and that are within the delay tolerance). Call until `None`
    /// (counting each item returned as outstanding in `outstanding` before the next
    /// call).
    pub fn poll_ready(
        &mut self,
        now: Duration,
        outstanding: impl Fn(PeerId) -> u32,
    ) -> Option<(T, PeerId)> {
        if !self.bucket.available(now) {
            return None;
        }
        let idx = self.first_eligible(now, &outstanding)?;
        let q = self.queue.remove(idx)?;
        self.bucket.take(now);
        self.stats.sent_queued += 1;
        Some((q.item, q.peer))
    }

    /// The next queued item that waited longer than the delay tolerance, with the
    /// action to apply. Call until `None`.
    pub fn poll_expired(&mut self, now: Duration) -> Option<Overdue<T>> {
        // Items are queued in time order and share one tolerance: the overdue ones are
        // a prefix of the queue.
        if !self
            .queue
            .front()
            .is_some_and(|q| self.overdue(now, q.since))
        {
            return None;
        }
        let q = self.queue.pop_front()?;
        self.stats.expired += 1;
        Some(Overdue {
            item: q.item,
            peer: q.peer,
            waited: now.saturating_sub(q.since),
            action: self.cfg.action.clone(),
        })
    }

    /// When something can next move: a token for a sendable queued item, or the first
    /// queued item passing its delay tolerance. `None` when the queue is empty; only
    /// the tolerance when answers must unblock it (poll again after an answer). May be
    /// in the past: poll now.
    pub fn poll_timeout(&self, outstanding: impl Fn(PeerId) -> u32) -> Option<Duration> {
        let front = self.queue.front()?;
        let expiry = front
            .since
            .saturating_add(self.cfg.delay_tolerance)
            .saturating_add(Duration::from_nanos(1));
        let token = self
            .queue
            .iter()
            .any(|q| !self.peer_blocked(q.peer, &outstanding))
            .then(|| self.bucket.ready_at_duration());
        Some(token.map_or(expiry, |t| t.min(expiry)))
    }

    /// The transport to `peer` failed: the items queued for it are returned (in order)
    /// for the caller to re-route or answer.
    pub fn on_peer_failed(&mut self, peer: PeerId) -> Vec<T> {
        let (gone, keep): (VecDeque<_>, VecDeque<_>) =
            self.queue.drain(..).partition(|q| q.peer == peer);
        self.queue = keep;
        self.stats.flushed += gone.len() as u64;
        gone.into_iter().map(|q| q.item).collect()
    }

    /// Queued items for which `f` holds.
    pub fn count(&self, f: impl Fn(&T) -> bool) -> usize {
        self.queue.iter().filter(|q| f(&q.item)).count()
    }

    /// Items queued.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// The counters.
    pub fn stats(&self) -> RlfStats {
        self.stats
    }

    fn peer_blocked(&self, peer: PeerId, outstanding: &impl Fn(PeerId) -> u32) -> bool {
        self.cfg
            .max_outstanding_per_peer
            .is_some_and(|max| outstanding(peer) >= max)
    }

    /// Waited strictly longer than the tolerance.
    fn overdue(&self, now: Duration, since: Duration) -> bool {
        now.saturating_sub(since) > self.cfg.delay_tolerance
    }

    fn first_eligible(&self, now: Duration, outstanding: &impl Fn(PeerId) -> u32) -> Option<usize> {
        self.queue
            .iter()
            .position(|q| !self.overdue(now, q.since) && !self.peer_blocked(q.peer, outstanding))
    }

    fn any_eligible(&self, now: Duration, outstanding: &impl Fn(PeerId) -> u32) -> bool {
        self.first_eligible(now, outstanding).is_some()
    }
}
