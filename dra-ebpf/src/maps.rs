//! The programs' maps. Names are `dra_common::maps::names`; sizes are the
//! `dra_common::maps::MAX_*` constants.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf, lpm_trie::LpmTrie},
};
use dra_common::{
    maps::{
        BucketConfig, BucketKey, BucketState, ClassCounters, ClassOverload, FlowKey, GlobalConfig,
        Ipv4Key, Ipv6Key, MAX_CLASS_PRIORITIES, MAX_CLASS_SLOTS, MAX_FLOWS, MAX_PEER_PREFIXES,
        MAX_SLOTS, OOB_RING_BYTES, OverloadConfig, OverloadCpu, PeerInfo, SctpAssoc, ShedCounts,
        TcpFlow,
    },
    stats::Counter,
};

#[map(name = "PEERS_V4")]
pub static PEERS_V4: LpmTrie<Ipv4Key, PeerInfo> = LpmTrie::with_max_entries(MAX_PEER_PREFIXES, 0);

#[map(name = "PEERS_V6")]
pub static PEERS_V6: LpmTrie<Ipv6Key, PeerInfo> = LpmTrie::with_max_entries(MAX_PEER_PREFIXES, 0);

#[map(name = "CLASS_SLOTS")]
pub static CLASS_SLOTS: HashMap<BucketKey, u32> = HashMap::with_max_entries(MAX_CLASS_SLOTS, 0);

#[map(name = "BUCKET_CONFIG")]
pub static BUCKET_CONFIG: Array<BucketConfig> = Array::with_max_entries(MAX_SLOTS, 0);

#[map(name = "BUCKET_STATE")]
pub static BUCKET_STATE: Array<BucketState> = Array::with_max_entries(MAX_SLOTS, 0);

#[map(name = "SLOT_COUNTERS")]
pub static SLOT_COUNTERS: PerCpuArray<ClassCounters> = PerCpuArray::with_max_entries(MAX_SLOTS, 0);

#[map(name = "STATS")]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

#[map(name = "GLOBAL_CONFIG")]
pub static GLOBAL_CONFIG: Array<GlobalConfig> = Array::with_max_entries(1, 0);

#[map(name = "TCP_FLOWS")]
pub static TCP_FLOWS: LruHashMap<FlowKey, TcpFlow> = LruHashMap::with_max_entries(MAX_FLOWS, 0);

/// Scratch space to build a new [`TcpFlow`] (too large for the BPF stack).
#[map(name = "FLOW_SCRATCH")]
pub static FLOW_SCRATCH: PerCpuArray<TcpFlow> = PerCpuArray::with_max_entries(1, 0);

/// What the dispatcher found, for the protocol program it tail-calls.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PktMeta {
    pub l4_off: u32,
    pub _pad: u32,
    pub peer: PeerInfo,
    pub key: FlowKey,
}

#[map(name = "PKT_META")]
pub static PKT_META: PerCpuArray<PktMeta> = PerCpuArray::with_max_entries(1, 0);

/// Tail-call targets of the dispatcher: [`JUMP_TCP`], [`JUMP_SCTP`].
#[map(name = "JUMP")]
pub static JUMP: ProgramArray = ProgramArray::with_max_entries(2, 0);
pub const JUMP_TCP: u32 = 0;
pub const JUMP_SCTP: u32 = 1;

/// The TCP program's walk over one segment (see ingress/tcp.rs `Walk`).
#[map(name = "TCP_WALK")]
pub static TCP_WALK: PerCpuArray<crate::ingress::tcp::Walk> = PerCpuArray::with_max_entries(1, 0);

/// The SCTP program's walk over one packet (see ingress/sctp.rs `Walk`).
#[map(name = "SCTP_WALK")]
pub static SCTP_WALK: PerCpuArray<crate::ingress::sctp::Walk> = PerCpuArray::with_max_entries(1, 0);

/// Requests marked out of band, for the agent (see ingress/tcp.rs).
#[map(name = "OOB_MARKS")]
pub static OOB_MARKS: RingBuf = RingBuf::with_byte_size(OOB_RING_BYTES, 0);

/// The agent's overload shedding (see overload.rs).
#[map(name = "OVERLOAD")]
pub static OVERLOAD: Array<OverloadConfig> = Array::with_max_entries(1, 0);

/// Class → its overload priority and counter index (see overload.rs).
#[map(name = "CLASS_PRIORITY")]
pub static CLASS_PRIORITY: HashMap<dra_common::wire::MsgClass, ClassOverload> =
    HashMap::with_max_entries(MAX_CLASS_PRIORITIES, 0);

/// Per-CPU shed credit and requests judged, per priority (see overload.rs).
#[map(name = "OVERLOAD_CPU")]
pub static OVERLOAD_CPU: PerCpuArray<OverloadCpu> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU shed counters by class index (see overload.rs).
#[map(name = "SHED_COUNTS")]
pub static SHED_COUNTS: PerCpuArray<ShedCounts> =
    PerCpuArray::with_max_entries(MAX_CLASS_PRIORITIES, 0);

#[map(name = "SCTP_ASSOCS")]
pub static SCTP_ASSOCS: LruHashMap<FlowKey, SctpAssoc> = LruHashMap::with_max_entries(MAX_FLOWS, 0);

/// Adds one to a global counter.
#[inline(always)]
pub fn count(c: Counter) {
    count_n(c, 1);
}

/// Adds 1 to a global counter and returns this CPU's count.
#[inline(always)]
pub fn count_get(c: Counter) -> u64 {
    match STATS.get_ptr_mut(c as u32) {
        // SAFETY: this CPU's slot of a per-CPU array; no other writer.
        Some(p) => unsafe {
            *p += 1;
            *p
        },
        None => 0,
    }
}

/// Adds `n` to a global counter.
#[inline(always)]
pub fn count_n(c: Counter, n: u64) {
    if let Some(p) = STATS.get_ptr_mut(c as u32) {
        // SAFETY: this CPU's slot of a per-CPU array; no other writer.
        unsafe { *p += n };
    }
}

// ---- TC egress (see egress.rs) ----

/// Destination prefix → what the egress program counts and charges for it.
#[map(name = "EGRESS_PEERS_V4")]
pub static EGRESS_PEERS_V4: LpmTrie<Ipv4Key, dra_common::maps::EgressPeer> =
    LpmTrie::with_max_entries(MAX_PEER_PREFIXES, 0);

#[map(name = "EGRESS_PEERS_V6")]
pub static EGRESS_PEERS_V6: LpmTrie<Ipv6Key, dra_common::maps::EgressPeer> =
    LpmTrie::with_max_entries(MAX_PEER_PREFIXES, 0);

/// (destination peer id, class) → egress slot.
#[map(name = "EGRESS_CLASS_SLOTS")]
pub static EGRESS_CLASS_SLOTS: HashMap<BucketKey, u32> =
    HashMap::with_max_entries(MAX_CLASS_SLOTS, 0);

/// Framing state of the flows the agent sends on.
#[map(name = "EGRESS_FLOWS")]
pub static EGRESS_FLOWS: LruHashMap<FlowKey, dra_common::maps::EgressFlow> =
    LruHashMap::with_max_entries(MAX_FLOWS, 0);

/// Scratch space to build a new egress flow (too large for the BPF stack).
#[map(name = "EGRESS_SCRATCH")]
pub static EGRESS_SCRATCH: PerCpuArray<dra_common::maps::EgressFlow> =
    PerCpuArray::with_max_entries(1, 0);

/// The TC program's walk over one skb (see egress.rs `Walk`).
#[map(name = "TC_WALK")]
pub static TC_WALK: PerCpuArray<crate::egress::Walk> = PerCpuArray::with_max_entries(1, 0);
