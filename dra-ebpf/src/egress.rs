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
//! * Framing with flow state (`EGRESS_FLOWS`, LRU, 5-tuple as sent): the same line of
//!   framing as ingress ([`crate::line`]): bytes before `processed_end` are
//!   retransmissions and are never counted again; every message whose class becomes
//!   known in this skb is counted here, classified by the same [`ScanCursor`] across
//!   skbs (its state kept in the flow when an skb ends first); the request is counted
//!   and judged in the skb that completes its class (its continuation is what gets
//!   dropped when it is over the limit — the server only sees a message once all of
//!   it arrived). The class never depends on where the skbs were cut.
//!
//!   [`ScanCursor`]: dra_common::wire::ScanCursor
//! * skb data may be non-linear (GSO super-packets of up to 64 KiB, page frags):
//!   every read goes through `bpf_skb_load_bytes`, which reads frags too, so no
//!   `bpf_skb_pull_data` (it would linearise 64 KiB per packet) is needed.
//! * Messages per skb: walked with `bpf_loop` (one scan item or one decision per
//!   callback, up to [`MAX_STEPS_PER_SKB`]: see [`Judge::ONE_ITEM_PER_STEP`]); the
//!   verifier checks the body once, not per iteration.
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
    maps::{Action, EgressPeer, FlowKey},
    stats::Counter,
    wire::{self, MsgClass, PART_BUF, Source},
};

use crate::{
    admit::{Verdict, class_slot, count_on},
    bucket::{self, Charge},
    bytes::copy_bounds,
    line::{self, Flow, Judge, LineWalk, Outcome},
    maps::{
        EGRESS_CLASS_SLOTS, EGRESS_FLOWS, EGRESS_PEERS_V4, EGRESS_PEERS_V6, EGRESS_SCRATCH,
        GLOBAL_CONFIG, TC_WALK, count,
    },
    parse::{self, IPPROTO_TCP, Packet, TCP_RST, TCP_SYN, Tcp, is_diameter_port, seq_le, seq_lt},
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

/// What the walk over one skb shares with its `bpf_loop` callback: the line's walk and
/// the destination, in a per-CPU map value ([`TC_WALK`], see [`LineWalk`]); the skb
/// pointer goes on the stack.
#[repr(C)]
pub struct Walk {
    peer: EgressPeer,
    line: LineWalk,
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
        line::new_flow(
            &EGRESS_FLOWS,
            &EGRESS_SCRATCH,
            &key,
            tcp.seq.wrapping_add(1),
        );
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
    let fl = match EGRESS_FLOWS.get_ptr_mut(key) {
        // SAFETY: the LRU value stays valid for this program run.
        Some(f) => unsafe { &mut *f },
        None => {
            if !starts_with_header(skb, payload, len) {
                count(Counter::EgressUnframed);
                return PASS;
            }
            count(Counter::EgressResync);
            crate::events::flow(ctx, crate::events::Event::EgressResync, key);
            match line::new_flow(&EGRESS_FLOWS, &EGRESS_SCRATCH, key, seq) {
                Some(f) => f,
                None => return PASS,
            }
        }
    };
    let pe = fl.line.processed_end;
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
        fl.fresh(seq);
    }
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(wp) = TC_WALK.get_ptr_mut(0) else {
        return PASS;
    };
    // SAFETY: this CPU's scratch value; the program runs to completion.
    let w = unsafe { &mut *wp };
    w.peer = *peer;
    let in_progress = w.line.begin(&fl.line, seq, seg_end, payload, now);
    let mut r = WalkRef { skb, w: wp };
    line::walk(MAX_STEPS_PER_SKB, &mut r);
    // The callback wrote through `r.w`: read the walk afresh.
    // SAFETY: this CPU's scratch value, as above.
    let w = unsafe { &*wp };
    match line::commit(&mut fl.line, &w.line, in_progress) {
        Outcome::Moved => PASS,
        Outcome::Dropped => {
            // The requests before the dropped one stay committed; the resend judges
            // the rest.
            count(Counter::EgressDropped);
            SHOT
        }
        Outcome::Lost | Outcome::Bound => {
            // Invalid bytes, or more headers than one walk may take: give up framing;
            // the flow resyncs.
            let _ = EGRESS_FLOWS.remove(key);
            count(Counter::EgressResync);
            PASS
        }
    }
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

impl Judge for WalkRef {
    const ONE_ITEM_PER_STEP: bool = true;
    type Bytes = SkbSource;

    #[inline(always)]
    fn bytes(&self) -> SkbSource {
        SkbSource(self.skb)
    }

    #[inline(always)]
    fn walk(&mut self) -> &mut LineWalk {
        // SAFETY: the walk is this CPU's scratch value, valid for this program run.
        unsafe { &mut (*self.w).line }
    }

    /// Charges and counts the request; a request over a `drop` limit stops the walk:
    /// its skb is shot.
    #[inline(always)]
    fn request(&mut self, class: MsgClass, len: u32) -> bool {
        // SAFETY: as in `walk`.
        let w = unsafe { &mut *self.w };
        let p = &w.peer;
        let slot = class_slot(&EGRESS_CLASS_SLOTS, p.peer_id, p.other_slot, class);
        if admit(p, slot, len, w.line.now) == Verdict::Drop {
            w.line.drop_here(true);
            return false;
        }
        count(Counter::EgressRequests);
        true
    }

    #[inline(always)]
    fn answer(&mut self) {
        count(Counter::EgressAnswers);
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

/// Charges the request on the destination, group and class slots and counts it on
/// each: [`Verdict::Drop`] when over a `drop` bucket (the charges of this request given
/// back), [`Verdict::Mark`] when over a `reject` bucket (passed: the agent's limiter
/// answers those).
#[inline(never)]
fn admit(peer: &EgressPeer, class: u32, len: u32, now: u64) -> Verdict {
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
                    count_on(slots[j], len, Verdict::Drop);
                    j += 1;
                }
                return Verdict::Drop;
            }
            Charge::Over {
                action: Action::Reject,
            } => over = true,
            Charge::Unlimited => {}
        }
        i += 1;
    }
    let v = if over { Verdict::Mark } else { Verdict::Admit };
    count_on(slots[0], len, v);
    count_on(slots[1], len, v);
    count_on(slots[2], len, v);
    v
}
