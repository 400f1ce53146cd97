//! Admission of requests: the overall and class buckets of a peer, and the per-packet
//! ledger that makes `drop` all-or-nothing (refunds) and publishes counters once the
//! packet's fate is known.
//!
//! The ledger is indexed by the message's position in the packet (a constant in
//! each unrolled iteration), never searched: a search loop returning different
//! pointers multiplies the verifier's paths.

use dra_common::maps::{Action, BucketKey, ClassCounters, PeerInfo};
use dra_common::stats::Counter;
use dra_common::wire::MsgClass;

use crate::{
    bucket::{self, Charge},
    maps::{count, CLASS_SLOTS, LEDGER_SCRATCH, SLOT_COUNTERS},
};

/// Entries per packet: the messages a segment may charge plus one carried message.
pub const LEDGER: usize = crate::tcp::MAX_MSGS_PER_SEGMENT + 1;
/// Entry index of the message carried over from earlier segments.
pub const CARRY_ENTRY: usize = LEDGER - 1;

/// What became of one request of the packet.
#[derive(Clone, Copy)]
pub struct Entry {
    /// Counting/charging slot of the request's class ([`NO_SLOT`]: unused entry).
    pub class_slot: u32,
    pub len: u32,
    /// Bucket charges to give back if the packet is dropped.
    pub overall_charged: u8,
    pub class_charged: u8,
    /// 1 admitted, 2 marked (or over a drop limit).
    pub verdict: u8,
    /// Class charged after its header had passed.
    pub late: u8,
    /// Count on the overall slot too (false for the late class charge of a carried
    /// message, whose overall part was counted when its header passed).
    pub count_overall: u8,
    pub _pad: [u8; 3],
}


#[derive(Clone, Copy)]
pub struct Ledger {
    /// Bit i set: entry i is in use for this packet (cheaper than clearing entries).
    pub used: u32,
    pub e: [Entry; LEDGER],
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    Mark,
    Drop,
}

impl Ledger {
    /// This CPU's ledger, emptied. It lives in a per-CPU map: the BPF stack is too
    /// small for it next to the parsers' state.
    #[inline(always)]
    pub fn get() -> Option<&'static mut Ledger> {
        let p = LEDGER_SCRATCH.get_ptr_mut(0)?;
        // SAFETY: this CPU's value of a per-CPU array; XDP runs to completion.
        let l = unsafe { &mut *p };
        l.used = 0;
        Some(l)
    }

    /// Forgets the entries (they have been published).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.used = 0;
    }

    /// The packet is dropped: give back what it was charged.
    #[inline(always)]
    pub fn refund_all(&self, peer: &PeerInfo) {
        let mut i = 0;
        while i < LEDGER {
            let e = self.e[i];
            let live = self.used & (1 << i) != 0;
            i += 1;
            if !live {
                continue;
            }
            if e.overall_charged != 0 {
                bucket::refund(peer.overall_slot, 1);
            }
            if e.class_charged != 0 {
                bucket::refund(e.class_slot, 1);
            }
        }
    }

    /// Publishes the packet's counters: requests seen/admitted/marked if it passes,
    /// dropped if not.
    #[inline(always)]
    pub fn publish(&self, peer: &PeerInfo, dropped: bool) {
        let mut i = 0;
        while i < LEDGER {
            let e = self.e[i];
            let live = self.used & (1 << i) != 0;
            i += 1;
            if !live {
                continue;
            }
            add(e.class_slot, &e, dropped);
            if e.late != 0 && !dropped {
                count(Counter::LateCharged);
            }
            if e.count_overall != 0 {
                add(peer.overall_slot, &e, dropped);
            }
        }
    }
}

#[inline(always)]
fn add(slot: u32, e: &Entry, dropped: bool) {
    let Some(c) = SLOT_COUNTERS.get_ptr_mut(slot) else { return };
    // SAFETY: this CPU's value of a per-CPU array.
    let c: &mut ClassCounters = unsafe { &mut *c };
    if dropped {
        c.dropped += 1;
        return;
    }
    c.seen += 1;
    if e.verdict == 1 {
        c.admitted += 1;
    } else {
        c.marked += 1;
    }
    c.bytes += e.len as u64;
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

#[inline(always)]
fn record(led: &mut Ledger, idx: usize, e: Entry) {
    if idx < LEDGER {
        led.e[idx] = e;
        led.used |= 1 << idx;
    }
}

/// A ledger entry.
#[inline(always)]
fn entry(slot: u32, len: u32, charged: (bool, bool), v: Verdict, late: bool, count_overall: bool) -> Entry {
    Entry {
        class_slot: slot,
        len,
        overall_charged: charged.0 as u8,
        class_charged: charged.1 as u8,
        verdict: if v == Verdict::Admit { 1 } else { 2 },
        late: late as u8,
        count_overall: count_overall as u8,
        _pad: [0; 3],
    }
}

/// Admission of one request whose class is known: it must fit the peer's overall
/// bucket and its class bucket. Recorded as ledger entry `idx`.
#[inline(always)]
pub fn decide(led: &mut Ledger, idx: usize, peer: &PeerInfo, slot: u32, len: u32, now: u64) -> Verdict {
    let o = bucket::charge(peer.overall_slot, now, 1, false);
    let oc = matches!(o, Charge::Charged { .. });
    let (v, cc) = match o {
        Charge::Over { action } => (verdict_of(action), false),
        _ => match bucket::charge(slot, now, 1, false) {
            Charge::Over { action } => {
                if oc {
                    bucket::refund(peer.overall_slot, 1);
                }
                (verdict_of(action), false)
            }
            c => (Verdict::Admit, matches!(c, Charge::Charged { .. })),
        },
    };
    let admitted = v == Verdict::Admit;
    record(led, idx, entry(slot, len, (oc && admitted, cc), v, false, true));
    v
}

/// Admission decided when the flags byte passes but the class is not yet known: the
/// overall bucket decides; the class bucket is charged later ([`late_charge`]). The
/// entry counts on the overall slot only (class slot [`NO_SLOT`]).
#[inline(always)]
pub fn decide_overall(led: &mut Ledger, idx: usize, peer: &PeerInfo, len: u32, now: u64, force: bool) -> Verdict {
    let o = bucket::charge(peer.overall_slot, now, 1, force);
    let v = match o {
        Charge::Over { action } => verdict_of(action),
        _ => Verdict::Admit,
    };
    let oc = matches!(o, Charge::Charged { .. });
    record(led, idx, entry(peer.overall_slot, len, (oc, false), v, force, false));
    v
}

/// The class of a message admitted on its overall bucket is now known: charge the
/// class bucket, forced (the header has passed; debt is paid back by later ones).
#[inline(always)]
pub fn late_charge(led: &mut Ledger, idx: usize, slot: u32, len: u32, now: u64) {
    let c = bucket::charge(slot, now, 1, true);
    record(led, idx, entry(slot, len, (false, matches!(c, Charge::Charged { .. })), Verdict::Admit, true, false));
}

/// A request whose flags byte passed before it could be classified or marked: both
/// buckets are charged, forced, and it counts as admitted (late).
#[inline(always)]
pub fn force_both(led: &mut Ledger, idx: usize, peer: &PeerInfo, slot: u32, len: u32, now: u64) {
    let o = bucket::charge(peer.overall_slot, now, 1, true);
    let c = bucket::charge(slot, now, 1, true);
    let charged = (matches!(o, Charge::Charged { .. }), matches!(c, Charge::Charged { .. }));
    record(led, idx, entry(slot, len, charged, Verdict::Admit, true, true));
}
