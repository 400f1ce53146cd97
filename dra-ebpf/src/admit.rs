//! Admission of one request: the overall and class buckets of its peer, and the
//! counters. Each request is decided once, when its class is known, and counted then.

use dra_common::maps::{Action, BucketKey, ClassCounters, PeerInfo};
use dra_common::stats::Counter;
use dra_common::wire::MsgClass;

use aya_ebpf::maps::HashMap;

use crate::{
    bucket::{self, Charge},
    maps::{SLOT_COUNTERS, count},
};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    Mark,
    Drop,
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
        Verdict::Admit | Verdict::Mark => {
            c.seen += 1;
            if v == Verdict::Admit {
                c.admitted += 1;
            } else {
                c.marked += 1;
            }
            c.bytes += len as u64;
        }
    }
}
