//! TCP framing with flow state (docs/architecture.md §3): XDP sees segments, not messages.
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
//!   state is wrong: the flow resynchronises instead, so a flow never stalls. The one
//!   exception is the flow's *island* (below).
//! * otherwise the new bytes are walked, one message per `bpf_loop` iteration (the
//!   verifier checks the body once): each message is classified by
//!   [`MsgScan`](dra_common::wire::MsgScan), which reads only the items it needs
//!   (header, ids, AVP headers up to CC-Request-Type) and keeps its state in the flow
//!   when a segment ends first. A request is decided exactly once, in the segment
//!   where its class becomes known, whatever the cuts before it.
//! * no state (flow began before we attached, LRU eviction, or an invalid header):
//!   resynchronise on the first segment that starts with a valid header.
//!
//! # Verdicts, and requests that straddle segments
//!
//! * `reject`: the over-limit request is marked. If its header's flags byte is in
//!   this packet (and new to the receiver), the reserved bit 0x01 is set there and the
//!   TCP checksum fixed (RFC 1624 eqn. 3). If the flags byte passed in an earlier
//!   segment — the request straddles, and its class only became known now — an
//!   [`OobMark`] (flow, Hop-by-Hop, End-to-End) goes into the `OOB_MARKS` ring before
//!   this segment passes: the agent reads the ring before the request reaches it and
//!   answers it exactly as a header-marked one. If the ring is full the segment is
//!   dropped instead (counted `oob_full`) and its retransmission judged again.
//! * `drop`: the packet in which the class became known is dropped. The requests
//!   decided before it in the same packet stay charged: the flow's state is committed
//!   up to the dropped request, so the retransmission passes them as already charged
//!   (marks are re-applied) and judges the dropped one again. Nothing is charged
//!   twice and nothing is admitted without a charge.
//!
//! So a verdict never depends on where the segments were cut (docs/architecture.md §3).
//!
//! # Islands: the hole a `drop` leaves
//!
//! When a request is dropped, the walk goes on over the rest of the segment without
//! charging, and the flow keeps a second line of framing, the island
//! ([`Island`](dra_common::maps::Island)), at its end. Segments that continue the island
//! while the hole is open are framed and dropped, charging nothing (*shadow*): their
//! requests are charged when the main line gets them again. Once the main line has
//! moved (the dropped request's retransmission was admitted), new bytes at the island's
//! end are framed, charged and passed by the island: that is the new data a Linux
//! sender sends after a retransmission timeout to test whether it was spurious (F-RTO,
//! RFC 5682). Its selective acknowledgement makes the sender retransmit the rest of the
//! hole at once; without the island the probe was dropped too, drew no acknowledgement,
//! and every drop cost a second timeout (docs/fast-path.md, "Islands"). The main line
//! stops at the island's `start`, where it takes the island's state over: a request is
//! charged by the main line if its class became known before `start`, by the island if
//! after, never by both.

use aya_ebpf::{bindings::xdp_md, helpers::bpf_ktime_get_ns, programs::XdpContext};
use dra_common::{
    maps::{
        FlowKey, ISLAND_CHARGING, ISLAND_NONE, ISLAND_SHADOW, MARK_RING, MAX_HOLE_AGE_NS, OobMark,
        PeerInfo, TcpFlow,
    },
    stats::Counter,
    wire::{self, MsgClass, flags},
};

use crate::{
    admit::{Verdict, class_slot, decide, publish},
    bucket::{self, Charge},
    bytes::{PacketBytes, XdpSource, bounded, opaque},
    events::{self, Event},
    ingress::xdp::{DROP, PASS},
    line::{self, Judge, LineWalk, Outcome},
    maps::{CLASS_SLOTS, FLOW_SCRATCH, OOB_MARKS, TCP_FLOWS, TCP_WALK as WALK_SCRATCH, count},
    overload,
    parse::{TCP_ACK, TCP_RST, TCP_SYN, Tcp, seq_le, seq_lt},
};

/// `bpf_loop` iterations per segment: one per message. A 1,500-byte segment holds at
/// most 73 messages (20-byte headers), a 9,000-byte jumbo frame 450.
pub const MAX_STEPS_PER_SEGMENT: u32 = 4096;
/// A hole larger than this is not a lost segment but lost state: resynchronise.
const MAX_HOLE: u32 = 1 << 20;

/// RFC 1624 eqn. 3: the checksum `hc` after one 16-bit word of the covered data
/// changes from `m` to `m1`: HC' = ~(~HC + ~m + m'), in one's complement arithmetic.
#[inline(always)]
fn csum_update(hc: u16, m: u16, m1: u16) -> u16 {
    let mut sum = (!hc as u32) + (!m as u32) + (m1 as u32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Sets the mark `bit` (a rate-limit or overload mark) on the flags byte at packet
/// offset `at` and fixes the TCP checksum at `csum_at`, in place. Returns false if
/// either is outside the packet. A byte that already carries the mark is left alone
/// (nothing changes, so neither does the checksum).
#[inline(always)]
fn mark_at(ctx: *mut xdp_md, at: u32, csum_at: u32, high: bool, bit: u8) -> bool {
    // SAFETY: the program's own xdp_md context, valid for this run.
    let (data, end) = unsafe { ((*ctx).data as usize, (*ctx).data_end as usize) };
    let (Some(at), Some(csum_at)) = (bounded(at as usize), bounded(csum_at as usize)) else {
        return false;
    };
    let p = data + at;
    let c = data + csum_at;
    // Verifier workaround (as bytes.rs u8_at): keep the `+ 1` / `+ 2` in the checks.
    if opaque(p + 1) > end || opaque(c + 2) > end {
        return false;
    }
    // SAFETY: p..p+1 and c..c+2 are inside the packet (checked against data_end).
    unsafe {
        let old = *(p as *const u8);
        if old & bit == bit {
            return true;
        }
        let new = old | bit;
        // The flags byte is the high or the low byte of its 16-bit word; the other
        // byte is the same in m and m', so it may be taken as 0 in both.
        let (m, m1) = if high {
            ((old as u16) << 8, (new as u16) << 8)
        } else {
            (old as u16, new as u16)
        };
        let hc = u16::from_be_bytes(core::ptr::read_unaligned(c as *const [u8; 2]));
        *(p as *mut u8) = new;
        core::ptr::write_unaligned(c as *mut [u8; 2], csum_update(hc, m, m1).to_be_bytes());
    }
    true
}

#[inline(always)]
fn remember_mark(flow: &mut TcpFlow, hdr_seq: u32, bit: u8) {
    let i = (flow.mark_idx as usize) % MARK_RING;
    flow.marked[i] = hdr_seq;
    let shift = 4 * i as u32;
    flow.marked_bits = (flow.marked_bits & !(0xf << shift)) | ((bit as u32 & 0xf) << shift);
    flow.mark_idx = flow.mark_idx.wrapping_add(1);
}

/// Re-marks, in bytes being retransmitted (`seg.seq..upto`), the headers we marked
/// before: if the first copy was lost after us, the retransmission must not pass
/// unmarked.
#[inline(always)]
fn remark(ctx: &XdpContext, seg: &Segment, flow: &TcpFlow, upto: u32) {
    let n = if (flow.mark_idx as usize) < MARK_RING {
        flow.mark_idx as usize
    } else {
        MARK_RING
    };
    let mut i = 0;
    while i < MARK_RING {
        if i >= n {
            break;
        }
        let f = flow.marked[i].wrapping_add(4);
        let bit = ((flow.marked_bits >> (4 * i as u32)) & 0xf) as u8;
        i += 1;
        if !seq_lt(f, seg.seq) && seq_lt(f, upto) {
            let off = f.wrapping_sub(seg.seq);
            mark_at(
                ctx.ctx,
                seg.payload as u32 + off,
                seg.tcp_off as u32 + 16,
                off & 1 == 0,
                if bit == 0 {
                    flags::RATE_LIMIT_MARK
                } else {
                    bit
                },
            );
        }
    }
}

/// What the walk over one segment shares with its `bpf_loop` callback: the line's walk
/// and what ingress adds to it, in a per-CPU map value ([`WALK_SCRATCH`], see
/// [`LineWalk`]). Only pointers are passed on the stack ([`WalkRef`]).
#[repr(C)]
pub struct Walk {
    peer: PeerInfo,
    line: LineWalk,
    /// Packet offset of the TCP header (its checksum is fixed when a header is marked).
    tcp_off: u32,
    /// 1: requests are decided and charged; 0: only framed (an island's shadow).
    charge: u32,
    /// 1: a drop does not stop the walk: it goes on, not charging, to frame an island.
    may_island: u32,
    /// 1: the walk is on the flow's island line, 0: on its main line.
    island: u32,
}

/// The `bpf_loop` callback's context (on the stack): pointers only.
#[repr(C)]
struct WalkRef {
    ctx: *mut xdp_md,
    flow: *mut TcpFlow,
    key: *const FlowKey,
    w: *mut Walk,
}

/// Processes one TCP segment from a known peer.
#[inline(always)]
pub fn process(ctx: &XdpContext, tcp_off: usize, key: &FlowKey, peer: &PeerInfo) -> u32 {
    let Some(Tcp {
        seq,
        doff,
        flags: tflags,
        ..
    }) = Tcp::read(ctx, tcp_off)
    else {
        count(Counter::MalformedL3);
        return PASS;
    };
    if tflags & TCP_RST != 0 {
        let _ = TCP_FLOWS.remove(key);
        count(Counter::NoPayload);
        return PASS;
    }
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if tflags & TCP_SYN != 0 {
        if tflags & TCP_ACK == 0
            && let Charge::Over { .. } = bucket::charge(peer.conn_slot, now)
        {
            count(Counter::SynDropped);
            return DROP;
        }
        let _ = line::new_flow(&TCP_FLOWS, &FLOW_SCRATCH, key, seq.wrapping_add(1));
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
            Some(f) => {
                events::flow(ctx, Event::Resync, key);
                f
            }
            None => return PASS,
        },
    };
    let seg = Segment {
        seq,
        end: seg_end,
        payload,
        tcp_off,
    };
    let on_island = match route(ctx, key, flow, &seg, now) {
        Route::Verdict(v) => return v,
        Route::Main => false,
        Route::Island => true,
    };
    walk_segment(ctx, key, flow, peer, &seg, now, on_island)
}

/// A data segment: its sequence numbers and where its headers and payload are.
struct Segment {
    /// Sequence number of the first payload byte, and one past the last.
    seq: u32,
    end: u32,
    /// Packet offsets of the payload and of the TCP header.
    payload: usize,
    tcp_off: usize,
}

/// Which line of framing a segment continues.
enum Route {
    Main,
    Island,
    /// Neither: this verdict, nothing to walk.
    Verdict(u32),
}

/// Routes a data segment: a retransmission passes (marks re-applied); one that starts
/// at or before the main line's end continues it; one past it (a hole) continues the
/// island or is dropped, and a hole that is too old or too wide drops the flow's state.
#[inline(always)]
fn route(ctx: &XdpContext, key: &FlowKey, flow: &mut TcpFlow, seg: &Segment, now: u64) -> Route {
    let pe = flow.line.processed_end;
    if seq_le(seg.end, pe) {
        remark(ctx, seg, flow, seg.end);
        count(Counter::Retransmit);
        return Route::Verdict(PASS);
    }
    if !seq_lt(pe, seg.seq) {
        flow.ofo_drops = 0;
        flow.hole_since_ns = 0;
        return Route::Main;
    }
    if flow.hole_since_ns == 0 {
        flow.hole_since_ns = now;
    }
    if seg.seq.wrapping_sub(pe) > MAX_HOLE || now.wrapping_sub(flow.hole_since_ns) > MAX_HOLE_AGE_NS
    {
        let _ = TCP_FLOWS.remove(key);
        count(Counter::Resync);
        events::flow(ctx, Event::HoleTimeout, key);
        return Route::Verdict(PASS);
    }
    match island_segment(flow, seg.seq, seg.end) {
        IslandSegment::Walk => Route::Island,
        IslandSegment::Charged => {
            remark(ctx, seg, flow, seg.end);
            count(Counter::Retransmit);
            Route::Verdict(PASS)
        }
        IslandSegment::No => Route::Verdict(out_of_order(flow)),
    }
}

/// Walks the bytes of `seg` new to its line (the main line, or the island if
/// `on_island`), deciding every request whose class becomes known in them, then
/// commits the walk to the line.
#[inline(always)]
fn walk_segment(
    ctx: &XdpContext,
    key: &FlowKey,
    flow: &mut TcpFlow,
    peer: &PeerInfo,
    seg: &Segment,
    now: u64,
    on_island: bool,
) -> u32 {
    let line = if on_island {
        &flow.island.line
    } else {
        &flow.line
    };
    if seq_lt(seg.seq, line.processed_end) {
        // Coalesced retransmission: old bytes first, then new ones.
        remark(ctx, seg, flow, line.processed_end);
    }
    let island_state = flow.island.state;
    // The main line stops at a charging island's start: the island charged what
    // follows.
    let walk_end =
        if !on_island && island_state == ISLAND_CHARGING && seq_lt(flow.island.start, seg.end) {
            flow.island.start
        } else {
            seg.end
        };

    let Some(wp) = WALK_SCRATCH.get_ptr_mut(0) else {
        return PASS;
    };
    // SAFETY: this CPU's scratch value; XDP runs to completion.
    let w = unsafe { &mut *wp };
    w.peer = *peer;
    w.tcp_off = seg.tcp_off as u32;
    w.charge = (!on_island || island_state == ISLAND_CHARGING) as u32;
    w.may_island = (!on_island && island_state == ISLAND_NONE) as u32;
    w.island = on_island as u32;
    let in_progress = w
        .line
        .begin(line, seg.seq, walk_end, seg.payload as u32, now);
    let mut r = WalkRef {
        ctx: ctx.ctx,
        flow: flow as *mut TcpFlow,
        key: key as *const FlowKey,
        w: wp,
    };
    line::walk(MAX_STEPS_PER_SEGMENT, &mut r);
    // The callback wrote through `r.w`: read the walk afresh.
    // SAFETY: this CPU's scratch value, as above.
    let w = unsafe { &*wp };
    if w.island != 0 {
        island_done(flow, w, in_progress)
    } else {
        main_done(ctx, key, flow, w, in_progress, seg.end)
    }
}

/// How a segment past the main line's hole relates to the flow's island.
enum IslandSegment {
    /// It continues the island: walk its new bytes on the island line.
    Walk,
    /// Every byte of it was charged by the island already (a retransmission).
    Charged,
    /// Neither: dropped out of order.
    No,
}

/// Where a segment past the main line's hole (`seq..seg_end`) stands against the
/// island. Once the main line has moved since the drop, the island starts charging
/// at its current end.
#[inline(always)]
fn island_segment(flow: &mut TcpFlow, seq: u32, seg_end: u32) -> IslandSegment {
    let il = &mut flow.island;
    if il.state == ISLAND_NONE {
        return IslandSegment::No;
    }
    let ie = il.line.processed_end;
    if il.state == ISLAND_SHADOW && seq_lt(il.main_mark, flow.line.processed_end) {
        il.state = ISLAND_CHARGING;
        il.start = ie;
    }
    if seq_lt(ie, seq) {
        return IslandSegment::No;
    }
    // Bytes before the island's start were not charged by it: they must come through
    // the main line.
    let charged = il.state == ISLAND_CHARGING && !seq_lt(seq, il.start);
    if seq_le(seg_end, ie) {
        return if charged {
            IslandSegment::Charged
        } else {
            IslandSegment::No
        };
    }
    if charged || (il.state == ISLAND_SHADOW && seq == ie) {
        IslandSegment::Walk
    } else {
        IslandSegment::No
    }
}

/// Drops a segment past the main line's hole that no line can take.
#[inline(always)]
fn out_of_order(flow: &mut TcpFlow) -> u32 {
    flow.ofo_drops += 1;
    count(Counter::OutOfOrder);
    DROP
}

/// After a walk on the main line: commit it, start an island after a drop, take a
/// charging island's state over once the main line reached its start.
#[inline(always)]
fn main_done(
    ctx: &XdpContext,
    key: &FlowKey,
    flow: &mut TcpFlow,
    w: &Walk,
    in_progress: bool,
    seg_end: u32,
) -> u32 {
    match line::commit(&mut flow.line, &w.line, in_progress) {
        Outcome::Lost => {
            count(Counter::MalformedDiameter);
            events::flow(ctx, Event::Malformed, key);
            let _ = TCP_FLOWS.remove(key);
            PASS
        }
        Outcome::Bound => {
            // Give up framing this flow; it resynchronises.
            let _ = TCP_FLOWS.remove(key);
            count(Counter::Resync);
            events::flow(ctx, Event::WalkBound, key);
            PASS
        }
        Outcome::Dropped => {
            // The walk went on past the dropped request without charging (it was free
            // to start an island): the island is where it stopped, if it stopped at the
            // segment's end with its framing intact.
            if w.may_island != 0 && line::framed(&w.line) {
                let il = &mut flow.island;
                line::follow(&mut il.line, &w.line);
                il.main_mark = flow.line.processed_end;
                il.start = w.line.seg_end;
                il.state = ISLAND_SHADOW;
            }
            count(Counter::Dropped);
            DROP
        }
        Outcome::Moved => {
            let state = flow.island.state;
            let pe = flow.line.processed_end;
            if state == ISLAND_CHARGING && pe == flow.island.start {
                // Everything from here to the island's end was charged by the island.
                flow.line = flow.island.line;
                flow.island.state = ISLAND_NONE;
                if seq_lt(flow.line.processed_end, seg_end) {
                    // The segment goes on past the island's end, unwalked: its
                    // retransmission brings those bytes again.
                    return out_of_order(flow);
                }
            } else if state == ISLAND_SHADOW && !seq_lt(pe, flow.island.line.processed_end) {
                // The main line caught up with the island before it charged anything.
                flow.island.state = ISLAND_NONE;
            }
            PASS
        }
    }
}

/// After a walk on the island line: a shadow walk's segment is dropped (its requests
/// are charged when the main line gets them); a charging walk's segment passes unless
/// a request in it was dropped.
#[inline(always)]
fn island_done(flow: &mut TcpFlow, w: &Walk, in_progress: bool) -> u32 {
    match line::commit(&mut flow.island.line, &w.line, in_progress) {
        Outcome::Moved if w.charge != 0 => PASS,
        Outcome::Moved => out_of_order(flow),
        Outcome::Dropped => {
            count(Counter::Dropped);
            DROP
        }
        Outcome::Lost | Outcome::Bound => {
            // The island's framing cannot go on; the main line meets these bytes when
            // they are retransmitted.
            flow.island.state = ISLAND_NONE;
            out_of_order(flow)
        }
    }
}

impl Judge for WalkRef {
    const ONE_ITEM_PER_STEP: bool = false;
    type Bytes = XdpSource;

    #[inline(always)]
    fn bytes(&self) -> XdpSource {
        XdpSource(self.ctx)
    }

    #[inline(always)]
    fn walk(&mut self) -> &mut LineWalk {
        // SAFETY: the walk is this CPU's scratch value, valid for this program run.
        unsafe { &mut (*self.w).line }
    }

    /// Decides the request, marks it if over a `reject` limit; over a `drop` limit it
    /// stops the walk, or the walk goes on, not charging, to frame an island.
    #[inline(always)]
    fn request(&mut self, class: MsgClass, len: u32) -> bool {
        // SAFETY: as in `walk`.
        let w = unsafe { &mut *self.w };
        if w.charge == 0 {
            // An island's shadow: framed, not charged.
            return true;
        }
        let p = &w.peer;
        let slot = class_slot(&CLASS_SLOTS, p.peer_id, p.other_slot, class);
        // The agent's overload control first: a shed request charges no bucket.
        let mut v = overload::judge(class, w.line.cur.scan.drmp, w.line.now);
        if v == Verdict::Admit {
            v = decide(p, slot, w.line.now);
        }
        let bit = v.mark_bit();
        if bit != 0 && !mark(self, w, bit) {
            // The out-of-band mark could not be handed over: drop instead, so the
            // retransmission is judged again (nothing was charged for it).
            count(Counter::OobFull);
            v = Verdict::Drop;
        }
        publish(&w.peer, slot, len, v);
        if v == Verdict::Drop {
            if w.may_island == 0 {
                w.line.drop_here(true);
                return false;
            }
            // Go on framing the rest of the segment without charging: the island.
            w.line.drop_here(false);
            w.charge = 0;
        }
        true
    }

    #[inline(always)]
    fn answer(&mut self) {
        // SAFETY: as in `walk`.
        if unsafe { (*self.w).charge } != 0 {
            count(Counter::Answers);
        }
    }
}

/// Marks the request at the walk's `pos` with `bit`: in its header if its flags byte is
/// in this packet and new to the receiver, else out of band. False if neither could be
/// done.
#[inline(always)]
fn mark(r: &WalkRef, w: &Walk, bit: u8) -> bool {
    let l = &w.line;
    let flag = l.pos.wrapping_add(4);
    // SAFETY: the flow value stays valid for this program run.
    let flow = unsafe { &mut *r.flow };
    if !seq_lt(flag, l.fresh) {
        // Decided in this packet after at least 20 header bytes: the flags byte is
        // in it. The payload starts at an even offset from the TCP header (data
        // offset is a multiple of 4), so its parity in the payload decides its half
        // of the 16-bit word.
        let off = flag.wrapping_sub(l.seq);
        if mark_at(r.ctx, l.payload + off, w.tcp_off + 16, off & 1 == 0, bit) {
            remember_mark(flow, l.pos, bit);
        }
        return true;
    }
    let scan = l.scan();
    let rec = OobMark {
        // SAFETY: points at this CPU's packet metadata, valid for this program run.
        key: unsafe { *r.key },
        hop_by_hop: scan.hop_by_hop,
        end_to_end: scan.end_to_end,
        header_seq: l.pos,
        bits: bit as u32,
    };
    if OOB_MARKS.output::<OobMark>(&rec, 0).is_err() {
        return false;
    }
    count(Counter::MarkedOutOfBand);
    true
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
    line::new_flow(&TCP_FLOWS, &FLOW_SCRATCH, key, seq)
}
