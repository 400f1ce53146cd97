//! Admission of one request: the overall and class buckets of its peer, and the
//! counters. Each request is decided once, when its class is known, and counted then.

use dra_common::maps::{Action, BucketKey, ClassCounters, PeerInfo};
use dra_common::stats::Counter;
use dra_common::wire::{MsgClass, flags};

use aya_ebpf::maps::HashMap;

use crate::{
    bucket::{self, Charge},
    maps::{SLOT_COUNTERS, count},
};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    /// Over a `reject` limit: marked, the agent answers with the profile's code.
    Mark,
    Drop,
    /// Within its limits, shed by the agent's overload control: marked, answered 3004.
    Shed,
    /// Shed beyond the agent's answer budget: marked, discarded by the agent.
    Discard,
}

impl Verdict {
    /// The header bit that carries a marking verdict to the agent (0: none).
    #[inline(always)]
    pub fn mark_bit(self) -> u8 {
        match self {
            Verdict::Mark => flags::RATE_LIMIT_MARK,
            Verdict::Shed => flags::OVERLOAD_SHED,
            Verdict::Discard => flags::OVERLOAD_DISCARD,
            Verdict::Admit | Verdict::Drop => 0,
        }
    }
}

/// Class slot on which a request of `class` from (or to) peer `peer_id` is counted and
/// charged: its own in `slots` (ingress `CLASS_SLOTS`, egress `EGRESS_CLASS_SLOTS`), else
/// the peer's `other_slot`.
#[inline(always)]
pub fn class_slot(
    slots: &HashMap<BucketKey, u32>,
    peer_id: u32,
    other_slot: u32,
    class: MsgClass,
) -> u32 {
    let key = BucketKey::new(peer_id, class);
    // SAFETY: read-only copy of a u32 value.
    match unsafe { slots.get(key) } {
        Some(s) => *s,
        None => other_slot,
    }
}

#[inline(always)]
pub fn verdict_of(action: Action) -> Verdict {
    match action {
        Action::Drop => Verdict::Drop,
        Action::Reject => Verdict::Mark,
    }
}

/// Admission of one request whose class is known: it must fit the peer's overall
/// bucket and its class bucket; if the class bucket is over, the overall charge is
/// given back. Nothing is charged for a request that does not fit.
#[inline(always)]
pub fn decide(peer: &PeerInfo, slot: u32, now: u64) -> Verdict {
    match bucket::charge(peer.overall_slot, now) {
        Charge::Over { action } => verdict_of(action),
        o => match bucket::charge(slot, now) {
            Charge::Over { action } => {
                if matches!(o, Charge::Charged) {
                    bucket::refund(peer.overall_slot);
                }
                verdict_of(action)
            }
            _ => Verdict::Admit,
        },
    }
}

/// Counts a decided request on its class slot and its peer's overall slot, and in
/// the global counters.
#[inline(always)]
pub fn publish(peer: &PeerInfo, slot: u32, len: u32, v: Verdict) {
    count_on(slot, len, v);
    count_on(peer.overall_slot, len, v);
    match v {
        Verdict::Admit => count(Counter::Requests),
        Verdict::Mark => {
            count(Counter::Requests);
            count(Counter::Marked);
        }
        Verdict::Shed => {
            count(Counter::Requests);
            count(Counter::ShedAnswered);
        }
        Verdict::Discard => {
            count(Counter::Requests);
            count(Counter::ShedDiscarded);
        }
        Verdict::Drop => {}
    }
}

/// Counts a decided request of `len` bytes on `slot` (none if `slot` is past the slots,
/// as `NO_SLOT` is).
#[inline(always)]
pub fn count_on(slot: u32, len: u32, v: Verdict) {
    let Some(c) = SLOT_COUNTERS.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: this CPU's value of a per-CPU array.
    let c: &mut ClassCounters = unsafe { &mut *c };
    match v {
        Verdict::Drop => c.dropped += 1,
        _ => {
            c.seen += 1;
            match v {
                Verdict::Admit => c.admitted += 1,
                Verdict::Mark => c.marked += 1,
                Verdict::Shed => c.shed_answered += 1,
                _ => c.shed_discarded += 1,
            }
            c.bytes += len as u64;
        }
    }
}
