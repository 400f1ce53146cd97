//! The benchmark's floor (`cargo xtask bench xdp`; never attached): the lookups and
//! charges this design makes for a Diameter request on TCP, and nothing else — the
//! L2–L4 parse, the peer's longest-prefix lookup, the flow key's copy into `PKT_META`,
//! the flow's LRU lookup, one clock read, the class-slot lookup and the two bucket
//! charges. No tail call, no framing or classification (the class is taken to be Gx
//! CCR-I), no counters. What the full path costs above the floor is the framing; the
//! floor itself bounds from below what any framing built on these lookups can cost on
//! the machine the bench runs on (docs/fast-path.md, "Cost").

use aya_ebpf::{helpers::bpf_ktime_get_ns, programs::XdpContext};
use dra_common::{
    wire::{MsgClass, app, cc_request_type, cmd},
    words,
};

use crate::{
    admit::{Verdict, class_slot, decide},
    bytes::opaque,
    ingress::{DROP, PASS, load, lookup_peer},
    maps::{CLASS_SLOTS, PKT_META, TCP_FLOWS},
    parse::{self, IPPROTO_TCP},
};

/// Gx CCR-I, the class of the bench's goal case.
const CLASS: MsgClass = MsgClass::new(app::GX, cmd::CREDIT_CONTROL, cc_request_type::INITIAL);

/// The floor's verdict: PASS when the request fits both buckets (and the flow has state),
/// DROP otherwise — so each lookup's result is used.
#[inline(always)]
pub fn floor(ctx: &XdpContext) -> u32 {
    let Ok(l4) = parse::parse(ctx) else {
        return PASS;
    };
    // IPv4 only (the bench's case): with both families, LLVM shares the key's stack
    // slots across their paths in a way the verifier refuses.
    if l4.proto != IPPROTO_TCP || opaque(l4.v6 as usize) != 0 {
        return PASS;
    }
    let Some(ports) = load::<[u8; 4]>(ctx, l4.off) else {
        return PASS;
    };
    let mut key = l4.key;
    key.sport = u16::from_be_bytes([ports[0], ports[1]]);
    key.dport = u16::from_be_bytes([ports[2], ports[3]]);
    let Some(peer) = lookup_peer(ctx, &l4) else {
        return DROP;
    };
    // The flow key goes through this CPU's PKT_META, as the dispatcher hands it to the TCP
    // program: the same copy the real path pays.
    let Some(m) = PKT_META.get_ptr_mut(0) else {
        return PASS;
    };
    // SAFETY: this CPU's slot of a per-CPU array, valid for this program run.
    let key = unsafe {
        words::copy(&mut (*m).key, &key);
        &(*m).key
    };
    // SAFETY: the LRU value stays valid for this program run; read only.
    let Some(flow) = TCP_FLOWS.get_ptr(key).map(|f| unsafe { &*f }) else {
        return DROP;
    };
    // The framing's first read of the flow (a SYN leaves `processed_end` past 0).
    if opaque(flow.line.processed_end as usize) == 0 {
        return DROP;
    }
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let slot = class_slot(&CLASS_SLOTS, peer.peer_id, peer.other_slot, CLASS);
    match decide(peer, slot, now) {
        Verdict::Admit => PASS,
        _ => DROP,
    }
}
