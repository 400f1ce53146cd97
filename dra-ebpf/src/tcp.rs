//! TCP framing with flow state (DESIGN.md §3): XDP sees segments, not messages.
//!
//! Per flow (LRU, 5-tuple) we keep `processed_end` (every byte before it has been
//! looked at and charged exactly once) and `next_hdr` (where the next Diameter header
//! starts). A segment is handled as:
//!
//! * SYN: connection guard (per-peer bucket, drop when over), fresh flow state.
//! * all bytes before `processed_end`: a retransmission — nothing is charged again;
//!   headers we had marked are marked again (ring of recent marks).
//! * starts past `processed_end`: a hole (lost or dropped segment). The segment is
//!   dropped so that nothing is charged around the hole; the sender retransmits. A
//!   hole that persists (MAX_HOLE_AGE_NS) or is absurdly far (MAX_HOLE) means our
//!   state is wrong: the flow resynchronises instead, so a flow never stalls.
//! * otherwise the new bytes are walked: every header up to MAX_MSGS_PER_SEGMENT is
//!   classified and charged. Headers beyond that bound are still framed (lengths
//!   only, up to MAX_SKIP_PER_SEGMENT) so the flow stays in sync, counted
//!   `over_bound`, and pass uncharged.
//! * a message whose class cannot be known in this segment (header or
//!   CC-Request-Type cut off) is carried: its bytes so far are kept in the flow
//!   state and classification finishes in the next segment. If its flags byte
//!   passed before the class was known, the decision was made on the overall
//!   bucket then, and the class bucket is charged (forced, possibly into debt) once
//!   the class is known, so long-run admitted counts stay exact.
//! * no state (flow began before we attached, LRU eviction, or an invalid header):
//!   resynchronise on the first segment that starts with a valid header.
//!
//! Actions: `reject` sets the reserved header bit 0x01 on each over-limit request
//! and fixes the TCP checksum incrementally (RFC 1624); `drop` drops the whole packet
//! if any request in it does not fit (all-or-nothing: charges already made for the
//! packet are refunded) and leaves the flow state untouched, so the retransmission
//! is judged afresh.

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_xdp_load_bytes},
    programs::XdpContext,
};
use dra_common::{
    maps::{
        carry_state, FlowKey, PeerInfo, TcpFlow, CARRY_MAX, MARK_RING, MAX_HOLE_AGE_NS,
    },
    stats::Counter,
    wire::{self, flags, Bytes, Classified, ReqTypeScan, WireError},
};

use crate::{
    admit::{class_slot, decide, decide_overall, force_both, late_charge, Ledger, Verdict, CARRY_ENTRY},
    bucket::{self, Charge},
    bytes::PacketBytes,
    maps::{count, FLOW_SCRATCH, JUMP, JUMP_TCP, PKT_META, TCP_FLOWS},
    xdp::{load, DROP, PASS},
};

/// Messages classified and charged per segment.
pub const MAX_MSGS_PER_SEGMENT: usize = 4;
/// Further headers framed (lengths only, uncharged, counted) per segment.
const MAX_SKIP_PER_SEGMENT: usize = 16;
/// A hole larger than this is not a lost segment but lost state: resynchronise.
const MAX_HOLE: u32 = 1 << 20;

const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

#[inline(always)]
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline(always)]
fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// Incremental TCP checksum update for one payload byte going from `old` to `new`
/// (RFC 1624 eqn. 3). `high` when the byte is the high byte of its 16-bit word.
#[inline(always)]
fn csum_fix(ctx: &XdpContext, tcp_off: usize, old: u8, new: u8, high: bool) {
    let Some(c) = load::<[u8; 2]>(ctx, tcp_off + 16) else { return };
    let hc = u16::from_be_bytes(c) as u32;
    let (m, m1) = if high { ((old as u32) << 8, (new as u32) << 8) } else { (old as u32, new as u32) };
    // HC' = ~(~HC + ~m + m')
    let mut sum = (!hc & 0xffff) + (!m & 0xffff) + m1;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    let out = (!sum & 0xffff) as u16;
    let p = ctx.data() + tcp_off + 16;
    if p + 2 > ctx.data_end() {
        return;
    }
    // SAFETY: p..p+2 is inside the packet (checked above).
    unsafe { core::ptr::write_unaligned(p as *mut [u8; 2], out.to_be_bytes()) };
}

/// Sets the rate-limit mark on the header whose flags byte is at payload offset
/// `flag_off`, fixing the checksum.
#[inline(always)]
fn mark(ctx: &XdpContext, pkt: &PacketBytes, tcp_off: usize, flag_off: usize) -> bool {
    match pkt.or_u8(flag_off, flags::RATE_LIMIT_MARK) {
        Some(old) if old & flags::RATE_LIMIT_MARK == 0 => {
            // The payload starts at an even offset from the TCP header (data offset
            // is a multiple of 4), so the byte's parity in the payload decides.
            csum_fix(ctx, tcp_off, old, old | flags::RATE_LIMIT_MARK, flag_off & 1 == 0);
            true
        }
        Some(_) => true,
        None => false,
    }
}

#[inline(always)]
fn remember_mark(flow: &mut TcpFlow, hdr_seq: u32) {
    let i = (flow.mark_idx as usize) % MARK_RING;
    flow.marked[i] = hdr_seq;
    flow.mark_idx = flow.mark_idx.wrapping_add(1);
}

/// Re-marks, in bytes being retransmitted (`seg_seq..upto`), the headers we marked
/// before: if the first copy was lost after us, the retransmission must not pass
/// unmarked.
#[inline(always)]
fn remark(ctx: &XdpContext, pkt: &PacketBytes, tcp_off: usize, flow: &TcpFlow, seg_seq: u32, upto: u32) {
    let mut i = 0;
    while i < MARK_RING {
        let h = flow.marked[i];
        i += 1;
        if h == 0 && flow.mark_idx == 0 {
            continue;
        }
        let f = h.wrapping_add(4);
        if !seq_lt(f, seg_seq) && seq_lt(f, upto) {
            let off = f.wrapping_sub(seg_seq) as usize;
            mark(ctx, pkt, tcp_off, off);
        }
    }
}

/// What the walk over one message's available bytes found.
enum Scan {
    /// Class known (or never knowable: class byte 0).
    Done(Classified),
    /// Header parsed, request, CC-Request-Type still to come.
    NeedMore(Classified),
    /// Fewer than 12 header bytes available.
    ShortHeader,
    Bad,
}

#[inline(always)]
fn scan<B: Bytes>(b: &B, off: usize) -> Scan {
    match wire::classify(b, off) {
        Ok(c) => match c.req_type {
            Some(ReqTypeScan::Truncated) => Scan::NeedMore(c),
            _ => Scan::Done(c),
        },
        Err(WireError::Truncated) => Scan::ShortHeader,
        Err(_) => Scan::Bad,
    }
}

/// Processes one TCP segment from a known peer.
#[inline(always)]
pub fn process(ctx: &XdpContext, tcp_off: usize, key: &FlowKey, peer: &PeerInfo) -> u32 {
    let Some(h) = load::<[u8; 14]>(ctx, tcp_off) else {
        count(Counter::MalformedL3);
        return PASS;
    };
    let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let doff = ((h[12] >> 4) as usize) * 4;
    let tflags = h[13];
    if doff < 20 {
        count(Counter::MalformedL3);
        return PASS;
    }
    if tflags & TCP_RST != 0 {
        let _ = TCP_FLOWS.remove(key);
        count(Counter::NoPayload);
        return PASS;
    }
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if tflags & TCP_SYN != 0 {
        if tflags & TCP_ACK == 0
            && let Charge::Over { .. } = bucket::charge(peer.conn_slot, now, 1, false)
        {
            count(Counter::SynDropped);
            return DROP;
        }
        let _ = new_flow(key, seq.wrapping_add(1));
        count(Counter::NoPayload);
        return PASS;
    }
    let payload = tcp_off + doff;
    let data = ctx.data();
    let end = ctx.data_end();
    if data + payload >= end {
        count(Counter::NoPayload);
        return PASS;
    }
    let pkt = PacketBytes::new(data + payload, end);
    let len = (end - (data + payload)) as u32;
    let seg_end = seq.wrapping_add(len);

    let flow = match TCP_FLOWS.get_ptr_mut(key) {
        // SAFETY: the LRU value stays valid for this program run.
        Some(f) => unsafe { &mut *f },
        None => match resync(key, &pkt, seq) {
            Some(f) => f,
            None => return PASS,
        },
    };

    // Invariant: a header before processed_end is only possible with its bytes held
    // in the carry. Anything else is a state we cannot frame from: resynchronise on
    // this segment rather than pass the flow's traffic unframed.
    if flow.carry_len == 0 && seq_lt(flow.next_hdr, flow.processed_end) {
        count(Counter::Resync);
        if wire::parse_header(&pkt, 0).is_err() {
            let _ = TCP_FLOWS.remove(key);
            count(Counter::Unframed);
            return PASS;
        }
        flow.next_hdr = seq;
        flow.processed_end = seq;
    }
    let pe = flow.processed_end;
    if seq_le(seg_end, pe) {
        remark(ctx, &pkt, tcp_off, flow, seq, seg_end);
        count(Counter::Retransmit);
        return PASS;
    }
    if seq_lt(pe, seq) {
        if flow.hole_since_ns == 0 {
            flow.hole_since_ns = now;
        }
        if seq.wrapping_sub(pe) > MAX_HOLE || now.wrapping_sub(flow.hole_since_ns) > MAX_HOLE_AGE_NS {
            let _ = TCP_FLOWS.remove(key);
            count(Counter::Resync);
            return PASS;
        }
        flow.ofo_drops += 1;
        count(Counter::OutOfOrder);
        return DROP;
    }
    flow.ofo_drops = 0;
    flow.hole_since_ns = 0;
    if seq_lt(seq, pe) {
        // Coalesced retransmission: old bytes first, then new ones.
        remark(ctx, &pkt, tcp_off, flow, seq, pe);
    }
    // Offset in the payload of the first byte not yet processed.
    let fresh = pe.wrapping_sub(seq) as usize;
    let Some(led) = Ledger::get() else { return PASS };
    let mut drop = false;
    let mut pos = flow.next_hdr;

    // 1. A message carried over from earlier segments: append this segment's fresh
    // bytes to the carry and classify the carry alone (a plain buffer: cheap for
    // the verifier).
    let carried = flow.carry_len as usize;
    let carried_state = flow.carry_state;
    if carried > 0 {
        let state = flow.carry_state;
        // Is the flags byte (header offset 4) in this packet, and where?
        let flag_here = carried <= 4;
        let flag_off = (fresh + 4).wrapping_sub(carried);
        let fresh_len = len as usize - fresh;
        let total = carried + fresh_len;
        append_carry(ctx, flow, payload + fresh, fresh_len);
        let mut nl = flow.carry_len as usize;
        if nl > CARRY_MAX {
            nl = CARRY_MAX;
        }
        let Some(view) = flow.carry.get(..nl) else { return PASS };
        let s = scan(&view, 0);
        let c = match s {
            Scan::Bad => {
                count(Counter::MalformedDiameter);
                let _ = TCP_FLOWS.remove(key);
                return PASS;
            }
            Scan::ShortHeader => {
                flow.processed_end = seg_end;
                return PASS;
            }
            Scan::NeedMore(c) if total <= CARRY_MAX => {
                if state == carry_state::UNDECIDED {
                    let st = if !c.header.is_request() {
                        carry_state::DONE
                    } else if !flag_here {
                        // The flags byte passed before the header was complete: not
                        // markable any more. Admit; overall charged now, class later.
                        decide_overall(led, CARRY_ENTRY, peer, c.header.length, now, true);
                        carry_state::ADMITTED
                    } else {
                        match decide_overall(led, CARRY_ENTRY, peer, c.header.length, now, false) {
                            Verdict::Drop => {
                                flow.carry_len = carried as u16;
                                led.refund_all(peer);
                                led.publish(peer, true);
                                count(Counter::Dropped);
                                return DROP;
                            }
                            Verdict::Mark => {
                                if mark(ctx, &pkt, tcp_off, flag_off) {
                                    remember_mark(flow, pos);
                                }
                                carry_state::DONE
                            }
                            Verdict::Admit => carry_state::ADMITTED,
                        }
                    };
                    flow.carry_state = st;
                }
                flow.processed_end = seg_end;
                led.publish(peer, false);
                return PASS;
            }
            // Complete, or CC-Request-Type beyond the carry window (class byte 0).
            Scan::Done(c) | Scan::NeedMore(c) => c,
        };
        let mlen = c.header.length;
        if c.header.is_request() {
            let slot = class_slot(peer, c.class);
            if state == carry_state::ADMITTED {
                late_charge(led, CARRY_ENTRY, slot, mlen, now);
            } else if state == carry_state::UNDECIDED {
                if flag_here {
                    match decide(led, CARRY_ENTRY, peer, slot, mlen, now) {
                        Verdict::Drop => drop = true,
                        Verdict::Mark => {
                            if mark(ctx, &pkt, tcp_off, flag_off) {
                                remember_mark(flow, pos);
                            }
                        }
                        Verdict::Admit => {}
                    }
                } else {
                    // The flags byte passed before we knew this was a request.
                    force_both(led, CARRY_ENTRY, peer, slot, mlen, now);
                }
            }
        } else {
            count(Counter::Answers);
        }
        pos = pos.wrapping_add(mlen);
        if drop {
            flow.carry_len = carried as u16;
        } else {
            flow.carry_len = 0;
            flow.carry_state = carry_state::UNDECIDED;
        }
    }

    // 2. Messages that start in this segment.
    let mut i = 0;
    while !drop && i < MAX_MSGS_PER_SEGMENT && seq_lt(pos, seg_end) {
        let idx = i;
        i += 1;
        let off = pos.wrapping_sub(seq) as usize;
        let avail = len as usize - off;
        match scan(&pkt, off) {
            Scan::Done(c) | Scan::NeedMore(c) if !c.header.is_request() => {
                count(Counter::Answers);
                pos = pos.wrapping_add(c.header.length);
            }
            // Complete, or CC-Request-Type not within the carry window (class byte 0).
            Scan::Done(c) | Scan::NeedMore(c) if scan_done(&c) || avail > CARRY_MAX => {
                let mlen = c.header.length;
                let slot = class_slot(peer, c.class);
                match decide(led, idx, peer, slot, mlen, now) {
                    Verdict::Drop => drop = true,
                    Verdict::Mark => {
                        if mark(ctx, &pkt, tcp_off, off + 4) {
                            remember_mark(flow, pos);
                        }
                    }
                    Verdict::Admit => {}
                }
                pos = pos.wrapping_add(mlen);
            }
            Scan::Done(c) | Scan::NeedMore(c) => {
                // A request whose class is still to come: decide on the overall
                // bucket now, while its flags byte is here to be marked.
                let st = match decide_overall(led, idx, peer, c.header.length, now, false) {
                    Verdict::Drop => {
                        drop = true;
                        carry_state::UNDECIDED
                    }
                    Verdict::Mark => {
                        if mark(ctx, &pkt, tcp_off, off + 4) {
                            remember_mark(flow, pos);
                        }
                        carry_state::DONE
                    }
                    Verdict::Admit => carry_state::ADMITTED,
                };
                if !drop {
                    flow.carry_len = 0;
                    append_carry(ctx, flow, payload + off, avail);
                    flow.carry_state = st;
                    flow.next_hdr = pos;
                    flow.processed_end = seg_end;
                    led.publish(peer, false);
                    return PASS;
                }
            }
            Scan::ShortHeader => {
                flow.carry_len = 0;
                append_carry(ctx, flow, payload + off, avail);
                flow.carry_state = carry_state::UNDECIDED;
                flow.next_hdr = pos;
                flow.processed_end = seg_end;
                led.publish(peer, false);
                return PASS;
            }
            Scan::Bad => {
                count(Counter::MalformedDiameter);
                let _ = TCP_FLOWS.remove(key);
                led.publish(peer, false);
                return PASS;
            }
        }
    }
    if drop {
        // Nothing of this packet is committed: the carried message (if any) is
        // carried again, as it was, for the retransmission.
        if carried > 0 {
            flow.carry_len = carried as u16;
            flow.carry_state = carried_state;
        }
        led.refund_all(peer);
        led.publish(peer, true);
        count(Counter::Dropped);
        return DROP;
    }
    // 2b. More messages than one pass may charge: commit what was done (flow state
    // up to the next header, counters) and run the TCP program again on the same
    // packet through the jump table. The re-run sees the committed bytes as already
    // processed and carries on from the next header. Each message is still charged
    // exactly once; if a later pass drops the packet, the retransmission skips the
    // committed part (already charged) and re-judges the rest.
    if seq_lt(pos, seg_end) && continue_packet(ctx, flow, led, peer, pos) {
        // Only reached if the tail call failed (depth limit): fall through.
    }
    // 3. Beyond the bound: frame by length only, uncharged.
    let mut k = 0;
    while k < MAX_SKIP_PER_SEGMENT && seq_lt(pos, seg_end) {
        k += 1;
        let off = pos.wrapping_sub(seq) as usize;
        match wire::parse_header(&pkt, off) {
            Ok(hd) => {
                count(Counter::OverBound);
                pos = pos.wrapping_add(hd.length);
            }
            Err(WireError::Truncated) => break,
            Err(_) => {
                count(Counter::MalformedDiameter);
                let _ = TCP_FLOWS.remove(key);
                led.publish(peer, false);
                return PASS;
            }
        }
    }
    if seq_lt(pos, seg_end) && k == MAX_SKIP_PER_SEGMENT {
        // Still more headers: give up framing this flow; it resynchronises.
        let _ = TCP_FLOWS.remove(key);
        count(Counter::Resync);
    } else {
        flow.next_hdr = pos;
        flow.processed_end = seg_end;
    }
    led.publish(peer, false);
    PASS
}

/// Tail calls beyond this many continue passes are not attempted (the kernel's
/// limit is 33 tail calls per packet).
const MAX_PASSES: u32 = 30;

/// Commits progress up to the header at `pos` and re-runs the TCP program on this
/// packet. Returns only if the tail call could not be made.
#[inline(always)]
fn continue_packet(ctx: &XdpContext, flow: &mut TcpFlow, led: &mut Ledger, peer: &PeerInfo, pos: u32) -> bool {
    let Some(m) = PKT_META.get_ptr_mut(0) else { return false };
    // SAFETY: this CPU's slot of a per-CPU array.
    let depth = unsafe { (*m).depth };
    if depth >= MAX_PASSES {
        return false;
    }
    // SAFETY: as above.
    unsafe { (*m).depth = depth + 1 };
    flow.next_hdr = pos;
    flow.processed_end = pos;
    led.publish(peer, false);
    // SAFETY: a tail call does not return on success.
    unsafe { JUMP.tail_call(ctx, JUMP_TCP) };
    // The tail call failed: undo nothing (the state is consistent), let the caller
    // frame the rest uncharged.
    led.clear();
    true
}

#[inline(always)]
fn scan_done(c: &Classified) -> bool {
    !matches!(c.req_type, Some(ReqTypeScan::Truncated))
}

/// Appends `n` packet bytes at `pkt_off` to the flow's carry (clamped to CARRY_MAX).
#[inline(always)]
fn append_carry(ctx: &XdpContext, flow: &mut TcpFlow, pkt_off: usize, n: usize) {
    let cl = flow.carry_len as usize;
    if cl >= CARRY_MAX {
        return;
    }
    let room = CARRY_MAX - cl;
    let n = if n > room { room } else { n };
    // Verifier workaround: re-check both values after an optimisation barrier so the
    // checks sit on the registers passed to the helper (size must be provably ≥ 1
    // and dst + size inside the 2·CARRY_MAX buffer).
    let n = crate::bytes::opaque(n);
    let cl = crate::bytes::opaque(cl);
    if n == 0 || n > CARRY_MAX || cl > CARRY_MAX {
        return;
    }
    // SAFETY: dst = carry + cl with cl ≤ CARRY_MAX and n ≤ CARRY_MAX: inside the
    // 2·CARRY_MAX-byte buffer.
    let r = unsafe {
        bpf_xdp_load_bytes(ctx.ctx, pkt_off as u32, flow.carry.as_mut_ptr().add(cl) as *mut _, n as u32)
    };
    if r == 0 {
        flow.carry_len = (cl + n) as u16;
    }
}

/// Creates flow state for a flow we have no state for, if this segment starts with a
/// valid Diameter header.
#[inline(always)]
fn resync(key: &FlowKey, pkt: &PacketBytes, seq: u32) -> Option<&'static mut TcpFlow> {
    if wire::parse_header(pkt, 0).is_err() {
        count(Counter::Unframed);
        return None;
    }
    count(Counter::Resync);
    new_flow(key, seq)
}

/// Inserts fresh state for `key` whose next header starts at `seq`. The value is
/// built in a per-CPU scratch slot: it is too large for the 512-byte BPF stack.
#[inline(always)]
fn new_flow(key: &FlowKey, seq: u32) -> Option<&'static mut TcpFlow> {
    let p = FLOW_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's scratch value; the carry bytes need no initialisation
    // (carry_len = 0).
    let st = unsafe { &mut *p };
    st.next_hdr = seq;
    st.processed_end = seq;
    st.marked = [0; MARK_RING];
    st.mark_idx = 0;
    st.ofo_drops = 0;
    st.hole_since_ns = 0;
    st.carry_len = 0;
    st.carry_state = carry_state::UNDECIDED;
    // By reference: passing the value would copy ~450 bytes onto the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    TCP_FLOWS.insert(key, &*st, 0).ok()?;
    // SAFETY: just inserted; the LRU value stays valid for this program run.
    TCP_FLOWS.get_ptr_mut(key).map(|p| unsafe { &mut *p })
}
