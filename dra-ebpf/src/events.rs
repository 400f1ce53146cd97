//! Rare fast-path events, logged through aya-log (`AYA_LOGS`) at debug level: a flow
//! resynchronised, a hole that outlived its timeout, a message over a per-packet bound,
//! invalid Diameter, a packet from an unknown source dropped. Each also has its counter
//! (named in the line); the log says which flow. Never on the per-packet path: only the
//! branches that count one of these events call [`flow`], and at most one line per
//! event kind per CPU per second leaves the program ([`LOG_INTERVAL_NS`]); the counter
//! keeps the number. `dra run` prints them at debug level (`RUST_LOG=dra=debug`).

use aya_ebpf::{EbpfContext, helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};
use aya_log_ebpf::debug;
use dra_common::maps::FlowKey;

/// What happened. The text of each is in [`flow`].
#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Event {
    /// A TCP segment of a flow without state started with a valid header (counter
    /// `resync`).
    Resync = 0,
    /// A hole older than `MAX_HOLE_AGE_NS` or wider than `MAX_HOLE`: state dropped
    /// (counter `resync`).
    HoleTimeout,
    /// More scan steps in one TCP segment than the walk's bound: state dropped (counter
    /// `resync`).
    WalkBound,
    /// SCTP: a message fragmented while another is in progress, decided on its first
    /// fragment (counter `over_bound`).
    OverBound,
    /// Bytes that fail header or AVP validation: passed, state dropped (counter
    /// `malformed_diameter`).
    Malformed,
    /// A packet from a source that is not a configured peer, dropped (counter
    /// `unknown_peer_drop`).
    UnknownPeerDrop,
    /// TC egress: flow state missing or invalid, framing restarted (counter
    /// `egress_resync`).
    EgressResync,
}

/// Number of [`Event`] kinds.
const EVENTS: u32 = 7;

/// At most one line per event kind per CPU in this time.
pub const LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// When each event kind was last logged on this CPU (ns since boot; 0 = never).
#[map(name = "LOG_GATE")]
static LOG_GATE: PerCpuArray<u64> = PerCpuArray::with_max_entries(EVENTS, 0);

/// Whether an `ev` line may leave now (and if so, starts its interval).
#[inline(always)]
fn gate(ev: Event) -> bool {
    let Some(last) = LOG_GATE.get_ptr_mut(ev as u32) else {
        return false;
    };
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: this CPU's slot of a per-CPU array.
    let last = unsafe { &mut *last };
    if *last != 0 && now.wrapping_sub(*last) < LOG_INTERVAL_NS {
        return false;
    }
    *last = now;
    true
}

/// Logs `ev` for the flow `key` (addresses in network byte order; IPv4 in the first
/// word; bit 0x80 of `proto` set for IPv6), rate limited. A separate function (a
/// BPF-to-BPF call), so that its code is not repeated at each event's branch.
#[inline(never)]
pub fn flow<C: EbpfContext>(ctx: &C, ev: Event, key: &FlowKey) {
    if !gate(ev) {
        return;
    }
    let what = match ev {
        Event::Resync => "no framing state: resynchronised on a Diameter header (resync)",
        Event::HoleTimeout => "hole older than 5 s or wider than 1 MiB: state dropped (resync)",
        Event::WalkBound => "more scan steps in one segment than the bound: state dropped (resync)",
        Event::OverBound => "message fragmented while another was in progress (over_bound)",
        Event::Malformed => "invalid Diameter header or AVP: passed (malformed_diameter)",
        Event::UnknownPeerDrop => "source is not a configured peer: dropped (unknown_peer_drop)",
        Event::EgressResync => "egress: no or invalid framing state, restarted (egress_resync)",
    };
    let (s, d) = (key.saddr, key.daddr);
    let proto = key.proto & 0x7f;
    if key.proto & 0x80 == 0 {
        debug!(
            ctx,
            "{:i}:{} > {:i}:{} proto {}: {}",
            u32::from_be(s[0]),
            key.sport,
            u32::from_be(d[0]),
            key.dport,
            proto,
            what
        );
    } else {
        let (s6, d6) = (bytes(s), bytes(d));
        debug!(
            ctx,
            "[{:i}]:{} > [{:i}]:{} proto {}: {}", s6, key.sport, d6, key.dport, proto, what
        );
    }
}

/// An IPv6 address as it is in memory (the words hold network byte order).
#[inline(always)]
fn bytes(words: [u32; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    let mut i = 0;
    while i < 4 {
        b[i * 4..i * 4 + 4].copy_from_slice(&words[i].to_ne_bytes());
        i += 1;
    }
    b
}
