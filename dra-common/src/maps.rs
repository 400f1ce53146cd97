//! `#[repr(C)]` keys and values of the BPF maps, shared by the kernel programs and the
//! agent, and the map names both sides use.

use crate::wire::MsgClass;

/// Pin directory under bpffs for the programs, links and maps.
pub const PIN_DIR: &str = "/sys/fs/bpf/dra";

/// Map names (the ELF symbol names in dra-ebpf).
pub mod names {
    /// LPM trie: IPv4 source prefix → [`super::PeerId`].
    pub const PEERS_V4: &str = "PEERS_V4";
    /// LPM trie: IPv6 source prefix → [`super::PeerId`].
    pub const PEERS_V6: &str = "PEERS_V6";
    /// Hash: [`super::BucketKey`] → [`super::BucketConfig`], written by the agent.
    pub const BUCKET_CONFIG: &str = "BUCKET_CONFIG";
    /// Hash: [`super::BucketKey`] → [`super::BucketState`], written by the kernel.
    pub const BUCKET_STATE: &str = "BUCKET_STATE";
    /// Per-CPU hash: [`super::BucketKey`] → [`super::ClassCounters`].
    pub const CLASS_COUNTERS: &str = "CLASS_COUNTERS";
    /// Per-CPU array indexed by [`crate::stats::Counter`].
    pub const STATS: &str = "STATS";
    /// Array with one [`super::GlobalConfig`].
    pub const GLOBAL_CONFIG: &str = "GLOBAL_CONFIG";
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
    /// Bucket for `rate` msgs/s with a burst of `burst` messages (≥ 1).
    pub fn new(rate: f64, burst: u32, action: Action) -> BucketConfig {
        let interval_ns = if rate > 0.0 {
            let v = 1e9 / rate + 0.5;
            if v >= u64::MAX as f64 { u64::MAX } else { v as u64 }
        } else {
            u64::MAX
        };
        let b = if burst == 0 { 1 } else { burst } as u64;
        BucketConfig {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(b - 1),
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
}

impl ClassCounters {
    /// Adds another CPU's counters.
    pub fn accumulate(&mut self, o: &ClassCounters) {
        self.seen += o.seen;
        self.admitted += o.admitted;
        self.marked += o.marked;
        self.dropped += o.dropped;
        self.bytes += o.bytes;
    }
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
    pub _pad: u32,
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
}
