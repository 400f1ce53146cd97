//! `#[repr(C)]` keys and values of the BPF maps, shared by the kernel programs and the
//! agent, and the map names both sides use.

use crate::wire::{MsgClass, ScanCursor};

/// Pin directory under bpffs for the programs, links and maps.
pub const PIN_DIR: &str = "/sys/fs/bpf/dra";

/// Map names (the ELF symbol names in dra-ebpf).
pub mod names {
    /// LPM trie: IPv4 source prefix → [`super::PeerInfo`].
    pub const PEERS_V4: &str = "PEERS_V4";
    /// LPM trie: IPv6 source prefix → [`super::PeerInfo`].
    pub const PEERS_V6: &str = "PEERS_V6";
    /// Hash: [`super::BucketKey`] → slot (u32) of that peer × class.
    pub const CLASS_SLOTS: &str = "CLASS_SLOTS";
    /// Array of [`super::BucketConfig`] by slot, written by the agent.
    pub const BUCKET_CONFIG: &str = "BUCKET_CONFIG";
    /// Array of [`super::BucketState`] by slot, written by the kernel.
    pub const BUCKET_STATE: &str = "BUCKET_STATE";
    /// Per-CPU array of [`super::ClassCounters`] by slot.
    pub const SLOT_COUNTERS: &str = "SLOT_COUNTERS";
    /// Per-CPU array indexed by [`crate::stats::Counter`].
    pub const STATS: &str = "STATS";
    /// Array with one [`super::GlobalConfig`].
    pub const GLOBAL_CONFIG: &str = "GLOBAL_CONFIG";
    /// LRU hash: [`super::FlowKey`] → [`super::TcpFlow`].
    pub const TCP_FLOWS: &str = "TCP_FLOWS";
    /// LRU hash: [`super::FlowKey`] → [`super::SctpAssoc`].
    pub const SCTP_ASSOCS: &str = "SCTP_ASSOCS";
    /// LPM trie: IPv4 destination prefix → [`super::EgressPeer`] (TC egress).
    pub const EGRESS_PEERS_V4: &str = "EGRESS_PEERS_V4";
    /// LPM trie: IPv6 destination prefix → [`super::EgressPeer`] (TC egress).
    pub const EGRESS_PEERS_V6: &str = "EGRESS_PEERS_V6";
    /// Hash: [`super::BucketKey`] (destination peer id × class) → egress slot (u32).
    pub const EGRESS_CLASS_SLOTS: &str = "EGRESS_CLASS_SLOTS";
    /// LRU hash: [`super::FlowKey`] (as sent) → [`super::EgressFlow`].
    pub const EGRESS_FLOWS: &str = "EGRESS_FLOWS";
    /// Ring buffer of [`super::OobMark`]: requests marked out of band (XDP → agent).
    pub const OOB_MARKS: &str = "OOB_MARKS";
    /// Array with one [`super::OverloadConfig`]: the agent's overload shedding.
    pub const OVERLOAD: &str = "OVERLOAD";
    /// Hash: [`crate::wire::MsgClass`] → [`super::ClassOverload`] (its overload
    /// priority and counter index), written by the agent.
    pub const CLASS_PRIORITY: &str = "CLASS_PRIORITY";
    /// Per-CPU array with one [`super::OverloadCpu`]: shed credit and requests judged,
    /// per priority.
    pub const OVERLOAD_CPU: &str = "OVERLOAD_CPU";
    /// Per-CPU array of [`super::ShedCounts`] by class index
    /// ([`super::ClassOverload::index`]; 0: every class without one).
    pub const SHED_COUNTS: &str = "SHED_COUNTS";
}

/// Number of bucket slots (config, state and counters arrays).
pub const MAX_SLOTS: u32 = 4096;
/// The bucket slot of the overload answer budget ([`OverloadConfig::answer_slot`]):
/// the last one, which the agent's plan never gives a peer or class.
pub const OVERLOAD_ANSWER_SLOT: u32 = MAX_SLOTS - 1;
/// Classes with their own overload priority.
pub const MAX_CLASS_PRIORITIES: u32 = 256;
/// Overload priorities: RFC 7944's DRMP scale, 0 the highest … 15 the lowest.
pub const PRIORITIES: usize = 16;
/// A shed share of 1 (every request of the priority) in [`OverloadConfig::shed`].
pub const SHARE_ONE: u32 = 1 << 16;
/// "No slot": the bucket does not exist (no limit, not counted).
pub const NO_SLOT: u32 = u32::MAX;
/// Peers in each LPM trie.
pub const MAX_PEER_PREFIXES: u32 = 1024;
/// Peer × class entries in the class-slot map.
pub const MAX_CLASS_SLOTS: u32 = 4096;
/// TCP flows / SCTP associations tracked (LRU).
pub const MAX_FLOWS: u32 = 16384;

/// What the fast path knows of a peer (value of the peer LPM tries). Slots index the
/// bucket arrays; [`NO_SLOT`] means none.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PeerInfo {
    pub peer_id: u32,
    /// Overall bucket of the peer's requests (ingress).
    pub overall_slot: u32,
    /// Counters (and no bucket) for classes without their own slot.
    pub other_slot: u32,
    /// Connection guard: TCP SYN / SCTP INIT bucket.
    pub conn_slot: u32,
}

/// A peer as the fast path knows it: index into the agent's peer table.
/// 0 is never a configured peer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PeerId(pub u32);

/// Data part of an IPv4 LPM trie key (network byte order).
pub type Ipv4Key = [u8; 4];
/// Data part of an IPv6 LPM trie key (network byte order).
pub type Ipv6Key = [u8; 16];

/// Bucket of one peer for one message class; [`MsgClass::ALL`] is the peer's overall
/// bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BucketKey {
    pub peer: u32,
    pub class: MsgClass,
}

impl BucketKey {
    pub const fn new(peer: u32, class: MsgClass) -> BucketKey {
        BucketKey { peer, class }
    }
    pub const fn overall(peer: u32) -> BucketKey {
        BucketKey::new(peer, MsgClass::ALL)
    }
}

/// What happens to a request that does not fit its bucket.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Action {
    /// Set [`crate::wire::flags::RATE_LIMIT_MARK`] and pass; the agent answers.
    #[default]
    Reject = 0,
    /// XDP_DROP the packet; the sender's transport retransmits.
    Drop = 1,
}

impl Action {
    pub const fn from_u32(v: u32) -> Action {
        if v == Action::Drop as u32 {
            Action::Drop
        } else {
            Action::Reject
        }
    }
}

/// Rate of a bucket, as the GCRA (virtual scheduling) form of a token bucket:
/// one message costs `interval_ns`; up to `tolerance_ns` of credit may be spent
/// ahead (burst − 1 messages). Rewritten live by the agent; the kernel's state
/// ([`BucketState`]) is kept, so no tokens are reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BucketConfig {
    /// 1e9 / rate (msgs/s), rounded.
    pub interval_ns: u64,
    /// (burst − 1) × interval_ns.
    pub tolerance_ns: u64,
    /// [`Action`] as u32.
    pub action: u32,
    pub _pad: u32,
}

impl BucketConfig {
    /// A slot that only counts: no limit.
    pub const UNLIMITED: BucketConfig = BucketConfig {
        interval_ns: 0,
        tolerance_ns: 0,
        action: 0,
        _pad: 0,
    };

    /// Bucket for `rate` msgs/s with a burst of `burst` messages (≥ 1), see
    /// [`crate::gcra::Rate::new`].
    pub fn new(rate: f64, burst: u32, action: Action) -> BucketConfig {
        let r = crate::gcra::Rate::new(rate, burst);
        BucketConfig {
            interval_ns: r.interval_ns,
            tolerance_ns: r.tolerance_ns,
            action: action as u32,
            _pad: 0,
        }
    }
}

/// Kernel-owned state of one bucket: the theoretical arrival time of the next
/// conforming message (GCRA), in `bpf_ktime_get_ns` time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BucketState {
    pub tat_ns: u64,
}

/// Per-CPU counters of one peer × class.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClassCounters {
    /// Requests seen (each counted once, retransmissions excluded).
    pub seen: u64,
    /// Requests that fit their buckets.
    pub admitted: u64,
    /// Requests marked for rejection by the agent.
    pub marked: u64,
    /// Requests in packets dropped.
    pub dropped: u64,
    /// Diameter bytes of the requests seen.
    pub bytes: u64,
    /// Requests within their limits that the overload control shed, marked to be
    /// answered 3004 by the agent ([`crate::wire::flags::OVERLOAD_SHED`]).
    pub shed_answered: u64,
    /// Requests shed beyond the agent's answer budget, marked to be discarded
    /// ([`crate::wire::flags::OVERLOAD_DISCARD`]).
    pub shed_discarded: u64,
}

impl ClassCounters {
    /// Adds another CPU's counters.
    pub fn accumulate(&mut self, o: &ClassCounters) {
        self.seen += o.seen;
        self.admitted += o.admitted;
        self.marked += o.marked;
        self.dropped += o.dropped;
        self.bytes += o.bytes;
        self.shed_answered += o.shed_answered;
        self.shed_discarded += o.shed_discarded;
    }
}

/// The agent's overload shedding, as the fast path applies it (docs/architecture.md
/// §13): of the requests within their limits, each priority's `shed` share is marked
/// [`crate::wire::flags::OVERLOAD_SHED`] (answered 3004) while the answer budget's
/// bucket has room, else [`crate::wire::flags::OVERLOAD_DISCARD`]. A request's priority
/// is its DRMP AVP's (RFC 7944), else its class's (`CLASS_PRIORITY`), else
/// `default_priority`. Base-protocol messages (application 0) are never shed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OverloadConfig {
    /// Shed share of each priority, in units of 1/[`SHARE_ONE`].
    pub shed: [u32; PRIORITIES],
    /// 1: the overload control is on: requests are counted per priority
    /// ([`OverloadCpu::judged`]); 0: not looked at.
    pub enabled: u32,
    /// 1 while any share is not zero.
    pub active: u32,
    /// Priority of a request without DRMP whose class has none of its own.
    pub default_priority: u32,
    /// Bucket slot of the answer budget (3004s per second; [`OVERLOAD_ANSWER_SLOT`]).
    pub answer_slot: u32,
}

/// A class's overload priority (0 highest … 15 lowest) and the index of its shed
/// counters ([`names::SHED_COUNTS`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClassOverload {
    pub priority: u32,
    pub index: u32,
}

/// One CPU's overload state: the shed credit of each priority (a request is shed
/// whenever it reaches [`SHARE_ONE`]) and the requests judged, per priority.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OverloadCpu {
    pub credit: [u32; PRIORITIES],
    pub judged: [u64; PRIORITIES],
}

/// Requests of one class the overload control shed, by action.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ShedCounts {
    /// Marked to be answered 3004.
    pub answered: u64,
    /// Marked to be discarded (beyond the answer budget).
    pub discarded: u64,
}

/// What to do with a packet on a Diameter port from a source that is no peer.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum UnknownPeerPolicy {
    #[default]
    Pass = 0,
    Drop = 1,
}

/// Fast-path settings written by the agent into [`names::GLOBAL_CONFIG`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GlobalConfig {
    /// Diameter ports (host byte order); 0 = unused slot.
    pub ports: [u16; 4],
    /// [`UnknownPeerPolicy`] as u32.
    pub unknown_peer: u32,
    /// 1 once the agent has written the config; until then everything passes.
    pub enabled: u32,
}

/// A transport flow as seen on ingress (addresses in network byte order; IPv4 in the
/// first word).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub _pad: [u8; 3],
}

/// Seqs of recently marked headers remembered per flow, so that a retransmission of a
/// marked request is marked again.
pub const MARK_RING: usize = 8;
/// How long a hole may persist before the flow's state is presumed wrong and the
/// flow resynchronises. Longer than a few TCP RTO back-offs (0.2 + 0.4 + 0.8 + 1.6 s)
/// so a real loss is always retransmitted into the hole first.
pub const MAX_HOLE_AGE_NS: u64 = 5_000_000_000;
/// Where one line of framing stands in a TCP byte stream (docs/architecture.md §3).
/// Sequence numbers are absolute TCP sequence numbers (compared modulo 2^32).
///
/// The message at `next_hdr` is *in progress* when `next_hdr` is before
/// `processed_end`: some of its bytes have passed, its class is not known yet, and
/// `cursor` holds what they said (and the first bytes of a scan item that the last
/// segment cut off). Nothing of a message is kept but that: its class does not
/// depend on where segments are cut (see [`crate::wire::MsgScan`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Where the next Diameter header starts (the message in progress, or the next one).
    pub next_hdr: u32,
    /// Every byte before this has been looked at (and, on a charging line, every
    /// request decided in it charged exactly once).
    pub processed_end: u32,
    /// Classification of the message in progress.
    pub cursor: ScanCursor,
}

/// No island.
pub const ISLAND_NONE: u32 = 0;
/// The island follows the bytes after a dropped request without charging them: the
/// segments are dropped (out of order), their requests are charged by the main line
/// when they are retransmitted.
pub const ISLAND_SHADOW: u32 = 1;
/// The main line has moved since the drop: bytes new at the island's end (the data a
/// sender sends after its retransmission timeout, RFC 5682 F-RTO) are framed, charged
/// and passed by the island from `start` on.
pub const ISLAND_CHARGING: u32 = 2;

/// A second line of framing after a request dropped over a `drop` limit
/// (docs/architecture.md §3, docs/fast-path.md "Islands"). Without it every byte after
/// the hole is dropped until the hole is filled, so a sender's F-RTO probe (new data
/// after the timeout's retransmission) is dropped too, draws no acknowledgement and
/// costs a second retransmission timeout. With it, the probe is charged and passed: the
/// receiver acknowledges it selectively and the sender retransmits the hole at once.
/// Each request is still charged once: by the main line before `start`, by the island
/// from `start` on; the main line takes the island's state over when it reaches `start`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Island {
    /// One of [`ISLAND_NONE`], [`ISLAND_SHADOW`], [`ISLAND_CHARGING`].
    pub state: u32,
    /// The main line's `processed_end` right after the drop: it has moved when its
    /// `processed_end` is past this.
    pub main_mark: u32,
    /// Where the island began charging (its `processed_end` then).
    pub start: u32,
    pub line: Line,
}

/// TCP framing state of one flow (docs/architecture.md §3): the main line of framing,
/// what was marked, the current hole, and the island after a drop.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFlow {
    /// The main line: every request before its `processed_end` was charged once.
    pub line: Line,
    /// Ring of recently marked header seqs (see [`MARK_RING`]).
    pub marked: [u32; MARK_RING],
    pub mark_idx: u32,
    /// Segments dropped past the current hole.
    pub ofo_drops: u32,
    /// The mark bits of each `marked` entry, four bits each (entry i at bit 4 i).
    pub marked_bits: u32,
    pub _pad: u32,
    /// When the current hole was first seen (bpf_ktime_get_ns; 0 = no hole). A hole
    /// older than [`MAX_HOLE_AGE_NS`] means our state is wrong: the flow resyncs.
    pub hole_since_ns: u64,
    pub island: Island,
    pub _pad2: u32,
}

// The flow value has no implicit padding (it is `aya::Pod`, read whole by the agent).
const _: () = assert!(core::mem::size_of::<TcpFlow>() == 216);

/// A request marked out of band: over a `reject` limit (or shed), but its header's flags byte
/// had already passed (in an earlier segment) when its class became known, so the
/// header bit could not be set. The XDP program writes one into the `OOB_MARKS` ring
/// before it passes the segment that completes the class; the agent reads the ring
/// before it handles what that segment delivered, and treats the request of that
/// connection with these ids exactly as a header-marked one.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OobMark {
    /// The connection as XDP saw it: source = the peer.
    pub key: FlowKey,
    pub hop_by_hop: u32,
    pub end_to_end: u32,
    /// TCP sequence number of the request's first byte.
    pub header_seq: u32,
    /// The mark: [`crate::wire::flags::RATE_LIMIT_MARK`], `OVERLOAD_SHED` or
    /// `OVERLOAD_DISCARD` (as u32).
    pub bits: u32,
}

/// Size of the `OOB_MARKS` ring buffer in bytes (a power of two, a multiple of the
/// page size): 4,096 records of 56 bytes + 8 bytes of ring header.
pub const OOB_RING_BYTES: u32 = 256 * 1024;

/// SCTP association state (docs/architecture.md §3): the next TSN to charge, and the
/// Diameter message in progress — one whose first fragment (B flag) arrived but whose
/// class was not known by the end of that fragment: its later fragments continue the
/// scan.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SctpAssoc {
    pub next_tsn: u32,
    pub ofo_drops: u32,
    /// 1 while a message is in progress.
    pub in_progress: u32,
    /// Bytes of the message in progress seen so far.
    pub msg_off: u32,
    /// I-DATA (RFC 8260): stream and Message Identifier of the message in progress,
    /// whose fragments may be interleaved with other messages' chunks. (DATA fragments
    /// of one message have consecutive TSNs, RFC 9260 §6.9.)
    pub stream: u32,
    pub mid: u32,
    pub cursor: ScanCursor,
}

/// What the TC egress program knows of a destination (value of the egress LPM tries,
/// keyed by destination address). Every request sent to the destination is counted
/// on `dest_slot`, on `group_slot` (its peer group's shared egress slot, if any) and
/// on its class slot (`EGRESS_CLASS_SLOTS`, else `other_slot`); each of these slots
/// that has a bucket is charged. [`NO_SLOT`] means none.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct EgressPeer {
    /// The destination's peer id (same numbering as [`PeerInfo::peer_id`]).
    pub peer_id: u32,
    /// Per-destination slot: the peer's own egress limit, or counting only.
    pub dest_slot: u32,
    /// The peer group's egress slot, shared by its members ([`NO_SLOT`]: none).
    pub group_slot: u32,
    /// Per-destination counting slot of classes without a slot of their own.
    pub other_slot: u32,
}

/// TC egress framing state of one flow (sequence numbers of the sent stream). The
/// message at `next_hdr` is in progress when `next_hdr` is before `processed_end`
/// (as [`TcpFlow`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EgressFlow {
    /// The flow's line of framing: every request before its `processed_end` was counted
    /// once.
    pub line: Line,
}

#[cfg(feature = "user")]
mod pod_egress {
    // SAFETY: #[repr(C)] plain data with explicit padding fields, no invalid bit
    // patterns.
    unsafe impl aya::Pod for super::EgressPeer {}
    unsafe impl aya::Pod for super::EgressFlow {}
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all are #[repr(C)] plain data with explicit padding fields and no
    // invalid bit patterns.
    unsafe impl aya::Pod for super::PeerId {}
    unsafe impl aya::Pod for super::BucketKey {}
    unsafe impl aya::Pod for super::BucketConfig {}
    unsafe impl aya::Pod for super::BucketState {}
    unsafe impl aya::Pod for super::ClassCounters {}
    unsafe impl aya::Pod for super::GlobalConfig {}
    unsafe impl aya::Pod for super::PeerInfo {}
    unsafe impl aya::Pod for super::FlowKey {}
    unsafe impl aya::Pod for super::TcpFlow {}
    unsafe impl aya::Pod for super::SctpAssoc {}
    unsafe impl aya::Pod for super::OobMark {}
    unsafe impl aya::Pod for super::OverloadConfig {}
    unsafe impl aya::Pod for super::ClassOverload {}
    unsafe impl aya::Pod for super::OverloadCpu {}
    unsafe impl aya::Pod for super::ShedCounts {}
    unsafe impl aya::Pod for crate::wire::MsgClass {}
}
