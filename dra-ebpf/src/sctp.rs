//! SCTP (RFC 9260): walk the bundled chunks of a packet (bounded). DATA (0) and
//! I-DATA (64, RFC 8260) chunks with the B flag and PPID 46 (or 0 on a Diameter
//! port) start a Diameter message, which is classified and charged. Every TSN is
//! charged at most once: per association we keep the next TSN expected; a chunk
//! below it is a retransmission; one above it is past a hole and the packet is
//! dropped (bounded, then the association resynchronises), as for TCP.
//!
//! Only `drop` is possible on SCTP: marking would need a CRC32c recomputation, so an
//! over-limit request on SCTP is dropped whatever the profile says (the config
//! refuses `reject` for SCTP peers).
//! INIT is the connection guard's SYN: over its limit it is dropped.

use aya_ebpf::{helpers::bpf_ktime_get_ns, programs::XdpContext};
use dra_common::{
    maps::{FlowKey, PeerInfo, SctpAssoc},
    stats::Counter,
    wire::{self, SCTP_PPID_DIAMETER},
};

use crate::{
    admit::{class_slot, decide, Ledger, Verdict},
    bucket::{self, Charge},
    bytes::PacketBytes,
    maps::{count, SCTP_ASSOCS},
    xdp::{load, DROP, PASS},
};

/// Chunks looked at per packet.
const MAX_CHUNKS: usize = 8;
/// Diameter messages classified and charged per packet (further ones are counted
/// `over_bound` and pass uncharged). Bounded by the verifier's budget: each one
/// costs a full AVP scan.
const MAX_MSGS: usize = 2;
const SCTP_COMMON_HLEN: usize = 12;
const CHUNK_DATA: u8 = 0;
const CHUNK_INIT: u8 = 1;
const CHUNK_IDATA: u8 = 64;
const FLAG_B: u8 = 0x02;
const MAX_OFO_DROPS: u32 = 64;

#[inline(always)]
fn tsn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

pub fn process(ctx: &XdpContext, sctp_off: usize, key: &FlowKey, peer: &PeerInfo) -> u32 {
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let mut off = sctp_off + SCTP_COMMON_HLEN;
    let assoc = SCTP_ASSOCS.get_ptr_mut(key);
    // Verifier workaround: plain (bool, u32) instead of Option<u32>, whose undefined
    // payload in None LLVM spills from an uninitialised register.
    let mut have_next = false;
    let mut next: u32 = 0;
    if let Some(a) = assoc {
        have_next = true;
        // SAFETY: the LRU value stays valid for this program run.
        next = unsafe { (*a).next_tsn };
    }
    let mut advanced = false;
    // Where the Diameter messages of this packet start (payload offset, bytes in
    // the chunk). Classification happens after the walk, at two fixed call sites:
    // one scan per position in the loop would exceed the verifier's budget.
    let mut starts = [(0usize, 0usize); MAX_MSGS];
    let mut found = 0usize;
    let mut i = 0;
    while i < MAX_CHUNKS {
        i += 1;
        let Some(ch) = load::<[u8; 4]>(ctx, off) else { break };
        let ctype = ch[0];
        let cflags = ch[1];
        let clen = u16::from_be_bytes([ch[2], ch[3]]) as usize;
        if clen < 4 {
            count(Counter::MalformedL3);
            return PASS;
        }
        if ctype == CHUNK_INIT {
            if let Charge::Over { .. } = bucket::charge(peer.conn_slot, now, 1, false) {
                count(Counter::SynDropped);
                return DROP;
            }
            let _ = SCTP_ASSOCS.remove(key);
            count(Counter::NoPayload);
            return PASS;
        }
        if ctype == CHUNK_DATA || ctype == CHUNK_IDATA {
            let Some(t) = load::<[u8; 4]>(ctx, off + 4) else {
                count(Counter::MalformedL3);
                return PASS;
            };
            let tsn = u32::from_be_bytes(t);
            let expected = if have_next { next } else { tsn };
            if tsn_lt(tsn, expected) {
                count(Counter::Retransmit);
            } else if tsn != expected {
                // Past a hole: drop, so nothing is charged around it (bounded).
                let ofo = match assoc {
                    // SAFETY: as above.
                    Some(a) => unsafe { (*a).ofo_drops },
                    None => 0,
                };
                if ofo >= MAX_OFO_DROPS {
                    let _ = SCTP_ASSOCS.remove(key);
                    count(Counter::Resync);
                    return PASS;
                }
                if let Some(a) = assoc {
                    // SAFETY: as above.
                    unsafe { (*a).ofo_drops += 1 };
                }
                count(Counter::OutOfOrder);
                return DROP;
            } else {
                next = tsn.wrapping_add(1);
                have_next = true;
                advanced = true;
                let (ppid_off, data_off) = if ctype == CHUNK_DATA { (12, 16) } else { (16, 20) };
                if cflags & FLAG_B != 0
                    && clen > data_off
                    && let Some(p) = load::<[u8; 4]>(ctx, off + ppid_off)
                {
                    let ppid = u32::from_be_bytes(p);
                    if ppid == SCTP_PPID_DIAMETER || ppid == 0 {
                        if found < MAX_MSGS {
                            starts[found] = (off + data_off, clen - data_off);
                            found += 1;
                        } else {
                            count(Counter::OverBound);
                        }
                    }
                }
            }
        }
        off += (clen + 3) & !3;
    }
    let Some(led) = Ledger::get() else { return PASS };
    let mut drop = false;
    if found > 0 {
        drop = judge(ctx, led, 0, starts[0], peer, now);
    }
    if !drop && found > 1 {
        drop = judge(ctx, led, 1, starts[1], peer, now);
    }
    if drop {
        led.refund_all(peer);
        led.publish(peer, true);
        count(Counter::Dropped);
        return DROP;
    }
    if advanced {
        match assoc {
            // SAFETY: as above.
            Some(a) => unsafe {
                (*a).next_tsn = next;
                (*a).ofo_drops = 0;
            },
            None => {
                let _ = SCTP_ASSOCS.insert(key, SctpAssoc { next_tsn: next, ofo_drops: 0 }, 0);
                count(Counter::Resync);
            }
        }
    }
    led.publish(peer, false);
    PASS
}

/// Classifies and charges the message at `start`; true if the packet must drop.
#[inline(always)]
fn judge(ctx: &XdpContext, led: &mut Ledger, idx: usize, start: (usize, usize), peer: &PeerInfo, now: u64) -> bool {
    let b = PacketBytes { start: ctx.data() + (start.0 & 0x3fff), end: ctx.data_end(), limit: start.1 };
    match wire::classify(&b, 0) {
        Ok(c) if c.header.is_request() => {
            let slot = class_slot(peer, c.class);
            // No marking on SCTP (it would need a CRC32c update): over-limit drops.
            decide(led, idx, peer, slot, c.header.length, now) != Verdict::Admit
        }
        Ok(_) => {
            count(Counter::Answers);
            false
        }
        Err(_) => {
            count(Counter::MalformedDiameter);
            false
        }
    }
}
