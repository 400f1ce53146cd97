//! Admission of one request: the overall and class buckets of its peer, and the
//! counters. Each request is decided once, when its class is known, and counted then.

use dra_common::maps::{Action, BucketKey, ClassCounters, PeerInfo};
use dra_common::stats::Counter;
use dra_common::wire::MsgClass;

use crate::{
    bucket::{self, Charge},
    maps::{CLASS_SLOTS, SLOT_COUNTERS, count},
};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    Mark,
    Drop,
}

/// Class slot used for counting (and charging) a message of `class`.
#[inline(always)]
pub fn class_slot(peer: &PeerInfo, class: MsgClass) -> u32 {
    let key = BucketKey::new(peer.peer_id, class);
    // SAFETY: read-only copy of a u32 value.
    match unsafe { CLASS_SLOTS.get(key) } {
        Some(s) => *s,
        None => peer.other_slot,
    }
}

#[inline(always)]
fn verdict_of(action: Action) -> Verdict {
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
    add(slot, len, v);
    add(peer.overall_slot, len, v);
    match v {
        Verdict::Admit => count(Counter::Requests),
        Verdict::Mark => {
            count(Counter::Requests);
            count(Counter::Marked);
        }
        Verdict::Drop => {}
    }
}

#[inline(always)]
fn add(slot: u32, len: u32, v: Verdict) {
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
