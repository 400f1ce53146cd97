//! TC egress (TCX) on the interface facing the servers (PCRF/OCS): count the requests
//! the agent sends per destination peer and per class, and police them with the
//! destination's egress buckets — a safety net behind the agent's own limiter (or in
//! front of a DRA that is not ours).
//!
//! Design:
//! * Parse L2–L4 as XDP does (`parse.rs`: Ethernet with up to two VLAN tags in the
//!   data, IPv4 or IPv6, fragments passed), TCP with a Diameter port
//!   (`GlobalConfig.ports`) on either side: the agent's connections to servers and
//!   servers' connections to the agent. SCTP is passed uncounted (no SCTP sockets
//!   here).
//! * Destination address → [`EgressPeer`] through `EGRESS_PEERS_V4/V6` (LPM). Other
//!   destinations pass untouched.
//! * Framing with flow state (`EGRESS_FLOWS`, LRU, 5-tuple as sent), like ingress:
//!   `processed_end` (bytes before it were looked at once) and `next_hdr` (where
//!   the next header starts). Bytes before `processed_end` are retransmissions and
//!   are never counted again. Every message whose class becomes known in this skb
//!   is counted here: the same [`ScanCursor`] as on ingress classifies it across
//!   skbs (its state kept in the flow when an skb ends first), and the request is
//!   counted and judged in the skb that completes its class (its continuation is
//!   what gets dropped when it is over the limit — the server only sees a message
//!   once all of it arrived). The class never depends on where the skbs were cut.
//! * skb data may be non-linear (GSO super-packets of up to 64 KiB, page frags):
//!   every read goes through `bpf_skb_load_bytes`, which reads frags too, so no
//!   `bpf_skb_pull_data` (it would linearise 64 KiB per packet) is needed.
//! * Messages per skb: walked with `bpf_loop` (one scan item or one decision per
//!   callback, up to [`MAX_STEPS_PER_SKB`]); the verifier checks the body once, not
//!   per iteration.
//!   More headers than that: the flow's state is dropped and it resynchronises.
//! * Policing: each request is charged on every slot of its destination that has a
//!   bucket (destination, group, class). Over a `drop` bucket: the skb is shot
//!   (TC_ACT_SHOT). The local TCP stack then keeps the bytes unsent and sends them
//!   again (tcp_write_xmit stops at the failed skb, so nothing later is sent
//!   before them: no hole is created). Requests before the over-limit one in the
//!   same skb stay charged and are committed (`processed_end` moves to the dropped
//!   request), so the resend charges each request exactly once and a GSO
//!   super-packet with more requests than the burst still makes progress.
//!   Over a `reject` bucket: not policed here (the agent's limiter answers those);
//!   the request passes and is counted `marked` (= over the limit, passed).
//! * Holes (bytes after `processed_end` missing: state lost or LRU-evicted): the
//!   flow resynchronises on an skb that starts with a valid header; others pass
//!   uncounted (`EgressUnframed`).
//! * Verdicts: TC_ACT_UNSPEC (TCX "next": later TCX programs still run) or
//!   TC_ACT_SHOT.

use aya_ebpf::{
    bindings::{__sk_buff, TC_ACT_SHOT, TC_ACT_UNSPEC},
    helpers::{bpf_ktime_get_ns, bpf_skb_load_bytes},
    maps::lpm_trie::Key,
    programs::TcContext,
};
use dra_common::{
    maps::{Action, BucketKey, ClassCounters, EgressFlow, EgressPeer, FlowKey, NO_SLOT},
    stats::Counter,
    wire::{self, PART_BUF, Progress, ScanCursor, Source},
};

use crate::{
    bucket::{self, Charge},
    bytes::copy_bounds,
    maps::{
        EGRESS_CLASS_SLOTS, EGRESS_FLOWS, EGRESS_PEERS_V4, EGRESS_PEERS_V6, EGRESS_SCRATCH,
        GLOBAL_CONFIG, SLOT_COUNTERS, TC_WALK, count,
    },
    parse::{self, IPPROTO_TCP, Packet, TCP_RST, TCP_SYN, Tcp, is_diameter_port, seq_le, seq_lt},
    walk::{self, Steps},
};

/// Verdict that lets the packet go on (TCX: next program, then the stack).
pub const PASS: i32 = TC_ACT_UNSPEC;
/// Verdict that drops the packet.
pub const SHOT: i32 = TC_ACT_SHOT;

/// `bpf_loop` iterations per skb: one per scan item read or message decided (a 64 KiB
/// GSO super-packet of small messages may need several thousand).
pub const MAX_STEPS_PER_SKB: u32 = 16384;

/// Largest packet offset ever read (a GSO packet is at most 64 KiB + headers).
const MAX_SKB_OFF: usize = 0x1_ffff;

impl Packet for TcContext {
    /// Through `bpf_skb_load_bytes`, which reads page frags too.
    #[inline(always)]
    fn load<T: Copy>(&self, off: usize) -> Option<T> {
        if off > MAX_SKB_OFF {
            return None;
        }
        TcContext::load::<T>(self, off).ok()
    }
}

/// What the walk over one skb shares with its `bpf_loop` callback: in a per-CPU map
/// value ([`TC_WALK`]), not on the stack (verifier workaround, as ingress/tcp.rs `Walk`); the
/// skb pointer goes on the stack.
#[repr(C)]
pub struct Walk {
    peer: EgressPeer,
    now: u64,
    /// Sequence number of the skb's first payload byte, and one past its last.
    seq: u32,
    seg_end: u32,
    /// skb offset of the payload.
    payload: u32,
    /// First byte not looked at before (`processed_end` when the skb arrived).
    fresh: u32,
    /// Where the message being looked at starts.
    pos: u32,
    /// 1: the walk stopped with a message in progress.
    carry_set: u32,
    /// 1: the flow's state was dropped (invalid bytes).
    lost: u32,
    /// 1: a request was over a drop limit.
    shot: u32,
    /// Classification of the message at `pos`.
    cur: ScanCursor,
}

/// The `bpf_loop` callback's context (on the stack): pointers only.
#[repr(C)]
struct WalkRef {
    skb: *mut __sk_buff,
    w: *mut Walk,
}

/// The program: every exit passes except a policed request's skb.
#[inline(always)]
pub fn egress(ctx: &TcContext) -> i32 {
    count(Counter::EgressPackets);
    match try_egress(ctx) {
        Some(v) => v,
        None => PASS,
    }
}

#[inline(always)]
fn try_egress(ctx: &TcContext) -> Option<i32> {
    let cfg = GLOBAL_CONFIG.get(0)?;
    if cfg.enabled == 0 {
        return Some(PASS);
    }
    let Ok(l4) = parse::parse(ctx) else {
        return Some(PASS);
    };
    if l4.proto != IPPROTO_TCP {
        return Some(PASS);
    }
    let tcp = Tcp::read(ctx, l4.off)?;
    // Either port is a Diameter port: the agent's connection to a server (destination
    // port), or a server's connection to the agent (source port).
    if !is_diameter_port(cfg, tcp.dport) && !is_diameter_port(cfg, tcp.sport) {
        return Some(PASS);
    }
    // The destination address is read again from the packet, as the LPM key (as XDP
    // does with the source: see ingress/mod.rs `lookup_peer`).
    let peer = if l4.v6 {
        let da = Packet::load::<[u8; 16]>(ctx, l4.ip_off + 24)?;
        *EGRESS_PEERS_V6.get(Key::new(128, da))?
    } else {
        let da = Packet::load::<[u8; 4]>(ctx, l4.ip_off + 16)?;
        *EGRESS_PEERS_V4.get(Key::new(32, da))?
    };
    let mut key = l4.key;
    key.sport = tcp.sport;
    key.dport = tcp.dport;
    if tcp.flags & TCP_RST != 0 {
        let _ = EGRESS_FLOWS.remove(key);
        return Some(PASS);
    }
    if tcp.flags & TCP_SYN != 0 {
        new_flow(&key, tcp.seq.wrapping_add(1));
        return Some(PASS);
    }
    let payload = l4.off + tcp.doff;
    let total = ctx.len() as usize;
    if payload >= total || payload > MAX_SKB_OFF {
        return Some(PASS);
    }
    let len = (total - payload) as u32;
    Some(segment(ctx, &key, &peer, payload as u32, tcp.seq, len))
}

/// A data segment (or GSO super-packet) of a flow to a known destination.
#[inline(always)]
fn segment(
    ctx: &TcContext,
    key: &FlowKey,
    peer: &EgressPeer,
    payload: u32,
    seq: u32,
    len: u32,
) -> i32 {
    let seg_end = seq.wrapping_add(len);
    let skb = ctx.skb.skb;
    let flow = match EGRESS_FLOWS.get_ptr_mut(key) {
        Some(f) => f,
        None => {
            if !starts_with_header(skb, payload, len) {
                count(Counter::EgressUnframed);
                return PASS;
            }
            count(Counter::EgressResync);
            crate::events::flow(ctx, crate::events::Event::EgressResync, key);
            match new_flow(key, seq) {
                Some(f) => f,
                None => return PASS,
            }
        }
    };
    // SAFETY: the LRU value stays valid for this program run.
    let fl = unsafe { &mut *flow };
    let mut pe = fl.processed_end;
    if seq_le(seg_end, pe) {
        count(Counter::EgressRetransmit);
        return PASS;
    }
    // A hole (state lost): start again from this skb if it begins a message.
    if seq_lt(pe, seq) {
        if !starts_with_header(skb, payload, len) {
            let _ = EGRESS_FLOWS.remove(key);
            count(Counter::EgressUnframed);
            return PASS;
        }
        count(Counter::EgressResync);
        crate::events::flow(ctx, crate::events::Event::EgressResync, key);
        fl.next_hdr = seq;
        fl.processed_end = seq;
        pe = seq;
    }
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(wp) = TC_WALK.get_ptr_mut(0) else {
        return PASS;
    };
    // SAFETY: this CPU's scratch value; the program runs to completion.
    let w = unsafe { &mut *wp };
    w.peer = *peer;
    w.now = now;
    w.seq = seq;
    w.seg_end = seg_end;
    w.payload = payload;
    w.fresh = pe;
    w.pos = fl.next_hdr;
    w.carry_set = 0;
    w.lost = 0;
    w.shot = 0;
    let in_progress = seq_lt(fl.next_hdr, pe);
    if in_progress {
        w.cur.copy_from(&fl.cursor);
    } else {
        w.cur.reset();
    }
    let mut r = WalkRef { skb, w: wp };
    walk::run(MAX_STEPS_PER_SKB, &mut r);
    // The callback wrote through `r.w`: read the walk afresh.
    // SAFETY: this CPU's scratch value, as above.
    let w = unsafe { &*wp };
    if w.lost != 0 {
        let _ = EGRESS_FLOWS.remove(key);
        return PASS;
    }
    if w.shot != 0 {
        // Commit the requests before the dropped one; the resend judges the rest. If
        // the dropped one is the message that was in progress, its state stays as it
        // was.
        if !(in_progress && w.pos == fl.next_hdr) {
            fl.next_hdr = w.pos;
            fl.processed_end = w.pos;
        }
        count(Counter::EgressDropped);
        return SHOT;
    }
    if w.carry_set != 0 {
        fl.next_hdr = w.pos;
        fl.processed_end = seg_end;
        fl.cursor.copy_from(&w.cur);
        return PASS;
    }
    if seq_lt(w.pos, seg_end) {
        // More headers than one walk may take: give up framing; the flow resyncs.
        let _ = EGRESS_FLOWS.remove(key);
        count(Counter::EgressResync);
        return PASS;
    }
    fl.next_hdr = w.pos;
    fl.processed_end = seg_end;
    PASS
}

#[inline(always)]
fn starts_with_header(skb: *mut __sk_buff, payload: u32, len: u32) -> bool {
    if len < 12 {
        return false;
    }
    let mut b = [0u8; 12];
    // SAFETY: 12 bytes into a stack array; the helper checks the skb bounds.
    let r = unsafe { bpf_skb_load_bytes(skb as *const _, payload, b.as_mut_ptr() as *mut _, 12) };
    r == 0 && wire::parse_header(&&b[..], 0).is_ok()
}

impl Steps for WalkRef {
    #[inline(always)]
    fn step(&mut self) -> bool {
        // SAFETY: the walk is this CPU's scratch value, valid for this program run.
        step(self.skb, unsafe { &mut *self.w })
    }
}

/// An skb as a [`Source`] for the scan cursor (`bpf_skb_load_bytes` reads frags too).
struct SkbSource(*mut __sk_buff);

impl Source for SkbSource {
    #[inline(always)]
    fn copy(&self, off: usize, dst: &mut [u8; PART_BUF], at: usize, n: usize) -> bool {
        let Some((off, at, n)) = copy_bounds(off, at, n, MAX_SKB_OFF) else {
            return false;
        };
        // SAFETY: dst + at .. + n is inside the PART_BUF-byte buffer (copy_bounds);
        // the helper checks the skb's bounds.
        let r = unsafe {
            bpf_skb_load_bytes(
                self.0 as *const _,
                off,
                dst.as_mut_ptr().add(at) as *mut _,
                n,
            )
        };
        r == 0
    }
}

/// Reads one scan item of the message at `w.pos` or, once its class is known, counts
/// and charges it. Returns true to go on.
#[inline(always)]
fn step(skb: *mut __sk_buff, w: &mut Walk) -> bool {
    if !seq_lt(w.pos, w.seg_end) {
        return false;
    }
    let (start, off) = walk::piece(w.pos, w.fresh, w.seq, w.payload);
    let c = match w
        .cur
        .step(&SkbSource(skb), off, start, w.seg_end.wrapping_sub(w.pos))
    {
        Progress::Done(c) => c,
        Progress::Read => return true,
        Progress::More => {
            w.carry_set = 1;
            return false;
        }
        Progress::Invalid(_) => {
            count(Counter::EgressResync);
            w.lost = 1;
            return false;
        }
    };
    let mlen = c.header.length;
    if !c.header.is_request() {
        count(Counter::EgressAnswers);
    } else {
        let slot = class_slot(&w.peer, c.class);
        if !admit(&w.peer, slot, mlen, w.now) {
            w.shot = 1;
            return false;
        }
        count(Counter::EgressRequests);
    }
    w.pos = w.pos.wrapping_add(mlen);
    w.cur.reset();
    true
}

/// Counting slot of a request class sent to this destination.
#[inline(always)]
fn class_slot(peer: &EgressPeer, class: wire::MsgClass) -> u32 {
    let key = BucketKey::new(peer.peer_id, class);
    // SAFETY: read-only copy of a u32 value.
    match unsafe { EGRESS_CLASS_SLOTS.get(key) } {
        Some(s) => *s,
        None => peer.other_slot,
    }
}

/// Charges the request on the destination, group and class slots. False: over a
/// `drop` bucket (charges of this request given back, counted dropped).
#[inline(never)]
fn admit(peer: &EgressPeer, class: u32, len: u32, now: u64) -> bool {
    let slots = [peer.dest_slot, peer.group_slot, class];
    // Bit i: slot i was charged (a bit set, not a `[bool; 3]`: zeroing an array is a
    // `memset` call on the BPF target, see `dra_common::words`).
    let mut charged = 0u32;
    let mut over = false;
    let mut i = 0;
    while i < 3 {
        match bucket::charge(slots[i], now) {
            Charge::Charged => charged |= 1 << i,
            Charge::Over {
                action: Action::Drop,
            } => {
                let mut j = 0;
                while j < 3 {
                    if charged & (1 << j) != 0 {
                        bucket::refund(slots[j]);
                    }
                    add(slots[j], 0, len);
                    j += 1;
                }
                return false;
            }
            Charge::Over {
                action: Action::Reject,
            } => over = true,
            Charge::Unlimited => {}
        }
        i += 1;
    }
    let v = if over { 2 } else { 1 };
    add(slots[0], v, len);
    add(slots[1], v, len);
    add(slots[2], v, len);
    true
}

/// Counts one request on a slot: `v` 0 dropped, 1 admitted, 2 over a reject limit.
#[inline(always)]
fn add(slot: u32, v: u8, len: u32) {
    if slot == NO_SLOT {
        return;
    }
    let Some(c) = SLOT_COUNTERS.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: this CPU's value of a per-CPU array.
    let c: &mut ClassCounters = unsafe { &mut *c };
    if v == 0 {
        c.dropped += 1;
        return;
    }
    c.seen += 1;
    if v == 1 {
        c.admitted += 1;
    } else {
        c.marked += 1;
    }
    c.bytes += len as u64;
}

/// Fresh state for `key` whose next header starts at `seq` (built in a per-CPU
/// scratch slot: too large for the BPF stack).
#[inline(always)]
fn new_flow(key: &FlowKey, seq: u32) -> Option<*mut EgressFlow> {
    let p = EGRESS_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's scratch value; carry bytes need no initialisation.
    let st = unsafe { &mut *p };
    st.next_hdr = seq;
    st.processed_end = seq;
    st.cursor.reset();
    #[allow(clippy::needless_borrows_for_generic_args)]
    EGRESS_FLOWS.insert(key, &*st, 0).ok()?;
    EGRESS_FLOWS.get_ptr_mut(key)
}
