//! Requests the fast path marked out of band (docs/architecture.md §3,
//! `dra-ebpf/src/ingress/tcp.rs`).
//!
//! A request over a `reject` limit is marked in its header (reserved bit 0x01) when the
//! XDP program sees the header's flags byte in the segment that completes the
//! request's class. When the request straddles segments — its flags byte passed in an
//! earlier segment, its CC-Request-Type arrives now — the program writes an
//! [`OobMark`] (connection, Hop-by-Hop, End-to-End) into the `OOB_MARKS` ring buffer
//! before it passes the segment that completes the class.
//!
//! Ordering: that segment reaches the socket only after the program returned, so by
//! the time a reader has read the request's last byte, its mark is in the ring. Each
//! reader therefore [`OobInbox::drain`]s the ring after every `read()`, then asks
//! [`OobInbox::take`] for each request it frames; a hit sets the header bit, and the
//! core answers the request exactly like a header-marked one.
//!
//! Marks wait in a table keyed by connection until their request is read (the ring is
//! shared by all connections and any reader may drain it). A connection's leftover
//! marks are forgotten when it closes; marks older than [`MAX_AGE`] (their connection
//! never reached the agent) are pruned.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use aya::maps::{Map, MapData, RingBuf};
use dra_common::maps::{FlowKey, OobMark};

/// Marks older than this are dropped (a request is read within milliseconds of its
/// last segment; one that is not read for a minute belongs to a dead connection).
pub const MAX_AGE: Duration = Duration::from_secs(60);
/// Most marks kept waiting at once (beyond it the oldest are dropped, counted).
pub const MAX_PENDING: usize = 65_536;

/// IP protocol numbers of the transports the fast path frames.
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_SCTP: u8 = 132;

/// The flow key XDP computes for TCP packets from `remote` to our `local` address
/// (`dra-ebpf/src/parse.rs`: addresses in network byte order, IPv6 flagged 0x80 in
/// `proto`). IPv4-mapped IPv6 socket addresses are the IPv4 packets they are.
pub fn flow_key(remote: SocketAddr, local: SocketAddr) -> FlowKey {
    flow_key_of(IPPROTO_TCP, remote, local)
}

/// As [`flow_key`], for transport `proto`. An SCTP association's key leaves our
/// address out (see [`sctp_key`]): one key per address of the peer.
pub fn flow_key_of(proto: u8, remote: SocketAddr, local: SocketAddr) -> FlowKey {
    let k = tcp_or_sctp_key(proto, remote, local);
    if proto == IPPROTO_SCTP {
        sctp_key(k)
    } else {
        k
    }
}

/// The header bits of a ring record's mark: a rate-limit or overload mark (a record
/// without one is a rate-limit mark).
fn mark_bits(bits: u32) -> u8 {
    match bits as u8 & dra_common::wire::flags::MARKS {
        0 => dra_common::wire::flags::RATE_LIMIT_MARK,
        b => b,
    }
}

/// The key a mark of an SCTP packet is kept under: its flow without the destination
/// address. A multihomed association's packets reach any of our addresses (the peer
/// picks the path; the kernel does not always list every local address of an
/// accepted association), while the peer's address and port, with our port, name the
/// association.
pub fn sctp_key(mut k: FlowKey) -> FlowKey {
    if k.proto & 0x7f == IPPROTO_SCTP & 0x7f {
        k.daddr = [0; 4];
    }
    k
}

fn tcp_or_sctp_key(proto: u8, remote: SocketAddr, local: SocketAddr) -> FlowKey {
    fn words(ip: IpAddr) -> ([u32; 4], bool) {
        match ip.to_canonical() {
            IpAddr::V4(a) => ([u32::from_ne_bytes(a.octets()), 0, 0, 0], false),
            IpAddr::V6(a) => {
                let o = a.octets();
                let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
                ([w(0), w(4), w(8), w(12)], true)
            }
        }
    }
    let (saddr, v6) = words(remote.ip());
    let (daddr, _) = words(local.ip());
    FlowKey {
        saddr,
        daddr,
        sport: remote.port(),
        dport: local.port(),
        // The protocol's low seven bits (SCTP's 132 is 4 here), the top bit for IPv6.
        proto: (proto & 0x7f) | if v6 { 0x80 } else { 0 },
        _pad: [0; 3],
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OobError {
    #[error("the OOB_MARKS map is not a ring buffer")]
    Map(#[source] aya::maps::MapError),
}

/// Counters of the inbox (published as metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OobStats {
    /// Marks read from the ring.
    pub received: u64,
    /// Marks applied to a request.
    pub applied: u64,
    /// Marks dropped unapplied (connection closed, too old, or the table full).
    pub expired: u64,
}

struct Pending {
    /// Per connection, its marks by (Hop-by-Hop, End-to-End): a lookup per framed
    /// request whatever the number waiting (under overload the fast path runs ahead of
    /// the readers by seconds, and thousands of marks wait for their requests).
    by_conn: HashMap<FlowKey, ConnMarks>,
    total: usize,
    last_prune: Instant,
}

/// The marks waiting for one connection's requests.
#[derive(Default)]
struct ConnMarks {
    by_ids: HashMap<(u32, u32), Waiting>,
    /// Marks waiting (a request marked again — a retransmission with the same ids —
    /// counts twice).
    len: usize,
}

/// A mark waiting for its request: when it was read from the ring (the first, if the
/// same ids were marked more than once), its bits (the latest), how many.
struct Waiting {
    since: Instant,
    bits: u8,
    count: usize,
}

impl ConnMarks {
    fn push(&mut self, ids: (u32, u32), at: Instant, bits: u8) {
        let w = self.by_ids.entry(ids).or_insert(Waiting {
            since: at,
            bits,
            count: 0,
        });
        w.bits = bits;
        w.count += 1;
        self.len += 1;
    }

    fn take(&mut self, ids: (u32, u32)) -> Option<u8> {
        let w = self.by_ids.get_mut(&ids)?;
        let bits = w.bits;
        w.count -= 1;
        if w.count == 0 {
            self.by_ids.remove(&ids);
        }
        self.len -= 1;
        Some(bits)
    }

    /// Drops the marks older than `max_age`; how many.
    fn prune(&mut self, now: Instant, max_age: Duration) -> usize {
        let before = self.len;
        self.by_ids
            .retain(|_, w| now.duration_since(w.since) <= max_age);
        self.len = self.by_ids.values().map(|w| w.count).sum();
        before - self.len
    }

    fn oldest(&self) -> Option<Instant> {
        self.by_ids.values().map(|w| w.since).min()
    }
}

/// The agent's side of the `OOB_MARKS` ring, shared by every connection's reader.
pub struct OobInbox {
    ring: Mutex<RingBuf<MapData>>,
    pending: Mutex<Pending>,
    /// Marks waiting (fast check for readers: 0 means nothing to look up).
    waiting: AtomicUsize,
    received: AtomicU64,
    applied: AtomicU64,
    expired: AtomicU64,
}

impl std::fmt::Debug for OobInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OobInbox")
            .field("stats", &self.stats())
            .finish()
    }
}

impl OobInbox {
    /// The inbox over the fast path's `OOB_MARKS` map. Marks already in the ring (an
    /// earlier agent's connections, all gone) are discarded.
    pub fn new(map: Map) -> Result<OobInbox, OobError> {
        let mut ring = RingBuf::try_from(map).map_err(OobError::Map)?;
        while ring.next().is_some() {}
        Ok(OobInbox {
            ring: Mutex::new(ring),
            pending: Mutex::new(Pending {
                by_conn: HashMap::new(),
                total: 0,
                last_prune: Instant::now(),
            }),
            waiting: AtomicUsize::new(0),
            received: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            expired: AtomicU64::new(0),
        })
    }

    /// Opens the pinned `OOB_MARKS` map of a fast path pinned in `pin_dir`.
    pub fn open_pinned(
        pin_dir: &std::path::Path,
    ) -> Result<OobInbox, crate::dataplane::DataplaneError> {
        let path = pin_dir.join(dra_common::maps::names::OOB_MARKS);
        let data = MapData::from_pin(&path).map_err(|source| {
            crate::dataplane::DataplaneError::OpenPinned {
                path: path.clone(),
                source,
            }
        })?;
        let map = Map::from_map_data(data).map_err(|source| {
            crate::dataplane::DataplaneError::OpenPinned {
                path: path.clone(),
                source,
            }
        })?;
        OobInbox::new(map).map_err(|OobError::Map(source)| {
            crate::dataplane::DataplaneError::OpenPinned { path, source }
        })
    }

    /// Moves every mark the kernel has written into the table. Cheap when the ring is
    /// empty (two loads of its positions).
    pub fn drain(&self) {
        let mut got: Vec<OobMark> = Vec::new();
        {
            let mut ring = self.ring.lock().expect("oob ring");
            while let Some(item) = ring.next() {
                if item.len() >= std::mem::size_of::<OobMark>() {
                    // SAFETY: the record is an OobMark written by the kernel
                    // (#[repr(C)] plain data); read unaligned from the ring's bytes.
                    got.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const OobMark) });
                }
            }
        }
        if got.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut p = self.pending.lock().expect("oob table");
        for m in &got {
            p.by_conn.entry(sctp_key(m.key)).or_default().push(
                (m.hop_by_hop, m.end_to_end),
                now,
                mark_bits(m.bits),
            );
            p.total += 1;
        }
        self.received.fetch_add(got.len() as u64, Ordering::Relaxed);
        if p.total > MAX_PENDING || now.duration_since(p.last_prune) > MAX_AGE {
            self.prune(&mut p, now);
        }
        self.waiting.store(p.total, Ordering::Relaxed);
    }

    fn prune(&self, p: &mut Pending, now: Instant) {
        p.last_prune = now;
        let mut dropped = 0usize;
        p.by_conn.retain(|_, v| {
            dropped += v.prune(now, MAX_AGE);
            v.len > 0
        });
        // Still too many: drop whole connections' marks, oldest first.
        while p.total - dropped > MAX_PENDING {
            let Some(k) = p
                .by_conn
                .iter()
                .min_by_key(|(_, v)| v.oldest())
                .map(|(k, _)| *k)
            else {
                break;
            };
            dropped += p.by_conn.remove(&k).map_or(0, |v| v.len);
        }
        p.total -= dropped;
        self.expired.fetch_add(dropped as u64, Ordering::Relaxed);
    }

    /// Whether the request (`hop_by_hop`, `end_to_end`) read from connection `key` was
    /// marked out of band; the mark is used up.
    pub fn take(&self, key: &FlowKey, hop_by_hop: u32, end_to_end: u32) -> bool {
        self.take_bits(key, hop_by_hop, end_to_end).is_some()
    }

    /// The mark bits of the request (`hop_by_hop`, `end_to_end`) read from connection
    /// `key`, if it was marked out of band; the mark is used up.
    pub fn take_bits(&self, key: &FlowKey, hop_by_hop: u32, end_to_end: u32) -> Option<u8> {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut p = self.pending.lock().expect("oob table");
        let v = p.by_conn.get_mut(key)?;
        let bits = v.take((hop_by_hop, end_to_end))?;
        if v.len == 0 {
            p.by_conn.remove(key);
        }
        p.total -= 1;
        self.waiting.store(p.total, Ordering::Relaxed);
        self.applied.fetch_add(1, Ordering::Relaxed);
        Some(bits)
    }

    /// Applies an out-of-band mark to a framed message of connection `key`: if it is a
    /// request the fast path marked out of band, sets its header mark — the rate-limit
    /// or overload bit XDP chose — and returns true.
    pub fn apply(&self, key: &FlowKey, frame: &mut [u8]) -> bool {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let Some(h) = frame.get(..20) else {
            return false;
        };
        if h[4] & dra_common::wire::flags::R == 0 {
            return false;
        }
        let w = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let Some(bits) = self.take_bits(key, w(12), w(16)) else {
            return false;
        };
        if let Some(f) = frame.get_mut(4) {
            *f |= bits;
        }
        true
    }

    /// Forgets the marks of a connection that closed.
    pub fn forget(&self, key: &FlowKey) {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut p = self.pending.lock().expect("oob table");
        if let Some(v) = p.by_conn.remove(key) {
            p.total -= v.len;
            self.expired.fetch_add(v.len as u64, Ordering::Relaxed);
        }
        self.waiting.store(p.total, Ordering::Relaxed);
    }

    /// The counters.
    pub fn stats(&self) -> OobStats {
        OobStats {
            received: self.received.load(Ordering::Relaxed),
            applied: self.applied.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_key_matches_what_xdp_builds() {
        let k = flow_key(
            "198.18.1.2:40000".parse().unwrap(),
            "198.18.1.1:3868".parse().unwrap(),
        );
        assert_eq!(k.saddr, [u32::from_ne_bytes([198, 18, 1, 2]), 0, 0, 0]);
        assert_eq!(k.daddr, [u32::from_ne_bytes([198, 18, 1, 1]), 0, 0, 0]);
        assert_eq!((k.sport, k.dport, k.proto), (40000, 3868, 6));
        // An IPv4 peer on a dual-stack listener is an IPv4 flow.
        let m = flow_key(
            "[::ffff:198.18.1.2]:40000".parse().unwrap(),
            "[::ffff:198.18.1.1]:3868".parse().unwrap(),
        );
        assert_eq!(m, k);
        let v6 = flow_key(
            "[2001:db8:1::2]:40000".parse().unwrap(),
            "[2001:db8:1::1]:3868".parse().unwrap(),
        );
        assert_eq!(v6.proto, 0x86);
        assert_eq!(v6.saddr[0], u32::from_ne_bytes([0x20, 0x01, 0x0d, 0xb8]));
        assert_eq!(v6.saddr[3], u32::from_ne_bytes([0, 0, 0, 2]));
    }

    #[test]
    fn a_connections_marks_are_taken_by_their_ids_once_each() {
        let t0 = Instant::now();
        let mut m = ConnMarks::default();
        for h in 0..10_000u32 {
            m.push((h, h + 1), t0, 0x01);
        }
        // The same request marked twice (a retransmission with the same ids).
        m.push((7, 8), t0, 0x04);
        assert_eq!(m.len, 10_001);
        assert_eq!(m.take((7, 8)), Some(0x04));
        assert_eq!(m.take((7, 8)), Some(0x04));
        assert_eq!(m.take((7, 8)), None);
        // Ids of a request that was never marked, or of another's End-to-End.
        assert_eq!(m.take((10_000, 10_001)), None);
        assert_eq!(m.take((9, 9)), None);
        assert_eq!(m.take((9_999, 10_000)), Some(0x01));
        assert_eq!(m.len, 9_998);
        // Pruning by age: the old marks go, the young stay.
        let later = t0 + MAX_AGE + Duration::from_secs(1);
        m.push((1, 1), later, 0x02);
        assert_eq!(m.prune(later, MAX_AGE), 9_998);
        assert_eq!((m.len, m.oldest()), (1, Some(later)));
        assert_eq!(m.take((1, 1)), Some(0x02));
        assert_eq!(m.len, 0);
    }
}
