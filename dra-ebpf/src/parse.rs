//! The L2–L4 parse both hooks share (XDP ingress and TC egress): Ethernet with up to two
//! VLAN tags in the data (a tag the driver holds out of band is not in the data and
//! needs no skipping), IPv4 (IHL honoured) or IPv6 (up to four extension headers), IP
//! fragments refused (the stack reassembles), then where the transport header starts.
//! Also the TCP header fields and sequence-number arithmetic both framers use.

use dra_common::maps::{FlowKey, GlobalConfig};

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_SCTP: u8 = 132;
/// VLAN tags looked through (802.1Q and 802.1ad, e.g. QinQ).
const MAX_VLAN_TAGS: usize = 2;
/// IPv6 extension headers skipped before giving up.
const MAX_IPV6_EXT: usize = 4;

pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;

/// Packet bytes as either hook reads them: `T` at offset `off` from the start of the
/// frame, `None` past its end.
pub trait Packet {
    fn load<T: Copy>(&self, off: usize) -> Option<T>;
}

/// Why [`parse`] found no transport header to look at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Cut short or inconsistent headers.
    Malformed,
    /// An IP fragment.
    Fragment,
    /// Neither IPv4 nor IPv6.
    NotIp,
}

/// Where the transport header is and whose packet it is.
pub struct L4 {
    /// Offset of the transport header.
    pub off: usize,
    /// The transport protocol (IPv4 protocol, or the IPv6 header chain's last next
    /// header).
    pub proto: u8,
    /// Addresses and protocol (bit 0x80 set for IPv6); ports are the caller's.
    pub key: FlowKey,
    /// Offset of the IP header.
    pub ip_off: usize,
    pub v6: bool,
}

/// L2 and L3 up to the transport header.
#[inline(always)]
pub fn parse<P: Packet>(p: &P) -> Result<L4, Skip> {
    let mut off = ETH_HLEN;
    let mut proto = u16::from_be(p.load::<u16>(12).ok_or(Skip::Malformed)?);
    let mut i = 0;
    while i < MAX_VLAN_TAGS {
        i += 1;
        if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
            proto = u16::from_be(p.load::<u16>(off + 2).ok_or(Skip::Malformed)?);
            off += 4;
        }
    }
    let mut key = FlowKey::default();
    let ip_off = off;
    let v6 = proto == ETH_P_IPV6;
    let l4proto;
    if proto == ETH_P_IP {
        let h = p.load::<[u8; 20]>(off).ok_or(Skip::Malformed)?;
        let ihl = ((h[0] & 0x0f) as usize) * 4;
        if h[0] >> 4 != 4 || ihl < 20 {
            return Err(Skip::Malformed);
        }
        // More-fragments flag or a fragment offset.
        if (h[6] & 0x3f) != 0 || h[7] != 0 {
            return Err(Skip::Fragment);
        }
        l4proto = h[9];
        key.saddr[0] = u32::from_ne_bytes([h[12], h[13], h[14], h[15]]);
        key.daddr[0] = u32::from_ne_bytes([h[16], h[17], h[18], h[19]]);
        off += ihl;
    } else if v6 {
        let (Some(nh0), Some(sa), Some(da)) = (
            p.load::<u8>(off + 6),
            p.load::<[u32; 4]>(off + 8),
            p.load::<[u32; 4]>(off + 24),
        ) else {
            return Err(Skip::Malformed);
        };
        let mut nh = nh0;
        key.saddr = sa;
        key.daddr = da;
        off += 40;
        let mut k = 0;
        while k < MAX_IPV6_EXT {
            k += 1;
            match nh {
                // Hop-by-Hop, Routing, Destination Options: (next, len in 8-octet units − 1).
                0 | 43 | 60 => {
                    let e = p.load::<[u8; 2]>(off).ok_or(Skip::Malformed)?;
                    nh = e[0];
                    off += (e[1] as usize + 1) * 8;
                }
                44 => return Err(Skip::Fragment),
                _ => break,
            }
        }
        l4proto = nh;
        key.proto = 0x80;
    } else {
        return Err(Skip::NotIp);
    }
    key.proto |= l4proto & 0x7f;
    Ok(L4 {
        off,
        proto: l4proto,
        key,
        ip_off,
        v6,
    })
}

/// One of the configured Diameter ports (0 = unused entry).
#[inline(always)]
pub fn is_diameter_port(cfg: &GlobalConfig, port: u16) -> bool {
    port != 0
        && (cfg.ports[0] == port
            || cfg.ports[1] == port
            || cfg.ports[2] == port
            || cfg.ports[3] == port)
}

/// The TCP header fields the framers use.
pub struct Tcp {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    /// Header length in bytes (data offset × 4).
    pub doff: usize,
    pub flags: u8,
}

impl Tcp {
    /// The TCP header at `off`; `None` if it is cut short or its data offset is below 5.
    #[inline(always)]
    pub fn read<P: Packet>(p: &P, off: usize) -> Option<Tcp> {
        let h = p.load::<[u8; 14]>(off)?;
        let doff = ((h[12] >> 4) as usize) * 4;
        if doff < 20 {
            return None;
        }
        Some(Tcp {
            sport: u16::from_be_bytes([h[0], h[1]]),
            dport: u16::from_be_bytes([h[2], h[3]]),
            seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            doff,
            flags: h[13],
        })
    }
}

/// `a` before `b` in sequence-number space (RFC 793 §3.3, modulo 2^32).
#[inline(always)]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` before or at `b` in sequence-number space.
#[inline(always)]
pub fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}
