//! XDP ingress: parse L2/L3/L4 (honouring VLAN tags, IHL, IPv6 extension headers and
//! TCP data offset), find Diameter on the configured ports, look up the peer, then
//! hand TCP to the framer and SCTP to the chunk walker.

use aya_ebpf::{bindings::xdp_action, maps::lpm_trie::Key, programs::XdpContext};
use dra_common::{
    maps::{FlowKey, GlobalConfig, PeerInfo, UnknownPeerPolicy},
    stats::Counter,
};

use crate::{
    maps::{GLOBAL_CONFIG, JUMP, JUMP_SCTP, JUMP_TCP, PEERS_V4, PEERS_V6, PKT_META, count},
    sctp, tcp,
};

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_SCTP: u8 = 132;
/// VLAN tags looked through (802.1Q and 802.1ad, e.g. QinQ).
const MAX_VLAN_TAGS: usize = 2;
/// IPv6 extension headers skipped before giving up (passed, counted malformed).
const MAX_IPV6_EXT: usize = 4;

/// Verdicts the TCP/SCTP handlers return.
pub const PASS: u32 = xdp_action::XDP_PASS;
pub const DROP: u32 = xdp_action::XDP_DROP;

/// Reads a `T` at `off` from the start of the packet.
#[inline(always)]
pub fn load<T: Copy>(ctx: &XdpContext, off: usize) -> Option<T> {
    let start = ctx.data();
    let end = ctx.data_end();
    let off = crate::bytes::bounded(off)?;
    if start + off + core::mem::size_of::<T>() > end {
        return None;
    }
    // SAFETY: bounds checked against data_end above.
    Some(unsafe { core::ptr::read_unaligned((start + off) as *const T) })
}

/// Where the transport header is and whom the packet is from.
pub struct L4 {
    pub off: usize,
    pub proto: u8,
    pub key: FlowKey,
    /// Offset of the IP header.
    pub ip_off: usize,
    pub v6: bool,
}

#[inline(always)]
fn is_diameter_port(cfg: &GlobalConfig, port: u16) -> bool {
    port != 0
        && (cfg.ports[0] == port
            || cfg.ports[1] == port
            || cfg.ports[2] == port
            || cfg.ports[3] == port)
}

pub fn try_ingress(ctx: &XdpContext) -> Result<u32, ()> {
    count(Counter::Packets);
    let Some(cfg) = GLOBAL_CONFIG.get(0) else {
        return Ok(PASS);
    };
    if cfg.enabled == 0 {
        count(Counter::NotDiameter);
        return Ok(PASS);
    }
    let Some(l4) = parse(ctx) else {
        return Ok(PASS);
    };
    // Ports: both protocols start with source port, destination port.
    let Some(ports) = load::<[u8; 4]>(ctx, l4.off) else {
        count(Counter::MalformedL3);
        return Ok(PASS);
    };
    let dport = u16::from_be_bytes([ports[2], ports[3]]);
    if !is_diameter_port(cfg, dport) {
        count(Counter::NotDiameter);
        return Ok(PASS);
    }
    let mut key = l4.key;
    key.sport = u16::from_be_bytes([ports[0], ports[1]]);
    key.dport = dport;
    let Some(peer) = lookup_peer(ctx, &l4) else {
        if cfg.unknown_peer == UnknownPeerPolicy::Drop as u32 {
            count(Counter::UnknownPeerDrop);
            return Ok(DROP);
        }
        count(Counter::UnknownPeerPass);
        return Ok(PASS);
    };
    // Hand over to the protocol program. Separate programs are verified separately:
    // together, the parse paths (VLAN tags, IHL, IPv6 extension headers) times the
    // framers' paths exceed the verifier's budget.
    let Some(m) = PKT_META.get_ptr_mut(0) else {
        return Ok(PASS);
    };
    // SAFETY: this CPU's slot of a per-CPU array; the tail-called program runs next
    // on the same CPU.
    unsafe {
        (*m).l4_off = l4.off as u32;
        (*m).peer = *peer;
        (*m).key = key;
    }
    let idx = if l4.proto == IPPROTO_TCP {
        JUMP_TCP
    } else {
        JUMP_SCTP
    };
    // SAFETY: a tail call does not return on success.
    unsafe { JUMP.tail_call(ctx, idx) };
    // Only reached if the program array is not populated.
    count(Counter::NoProgram);
    Ok(PASS)
}

/// Entry of the TCP program (tail-called by the dispatcher).
pub fn tcp_entry(ctx: &XdpContext) -> u32 {
    let Some(m) = PKT_META.get(0) else {
        return PASS;
    };
    tcp::process(ctx, (m.l4_off & 0x1ff) as usize, &m.key, &m.peer)
}

/// Entry of the SCTP program (tail-called by the dispatcher).
pub fn sctp_entry(ctx: &XdpContext) -> u32 {
    let Some(m) = PKT_META.get(0) else {
        return PASS;
    };
    sctp::process(ctx, (m.l4_off & 0x1ff) as usize, &m.key, &m.peer)
}

/// The source address is read again from the packet here, as the LPM key.
/// Verifier workaround: building the key from the flow key's words let LLVM share
/// stack slots across the IPv4 and IPv6 paths in a way the verifier rejects.
#[inline(always)]
fn lookup_peer(ctx: &XdpContext, l4: &L4) -> Option<&'static PeerInfo> {
    if crate::bytes::opaque(l4.v6 as usize) != 0 {
        let a = load::<[u8; 16]>(ctx, l4.ip_off + 8)?;
        PEERS_V6.get(Key::new(128, a))
    } else {
        let a = load::<[u8; 4]>(ctx, l4.ip_off + 12)?;
        PEERS_V4.get(Key::new(32, a))
    }
}

/// L2/L3 parse. Returns None (after counting why) for anything that is not TCP/SCTP.
/// In the returned key, `proto` has bit 0x80 set for IPv6.
#[inline(always)]
fn parse(ctx: &XdpContext) -> Option<L4> {
    let mut off = ETH_HLEN;
    let Some(mut proto) = load::<u16>(ctx, 12).map(u16::from_be) else {
        count(Counter::MalformedL3);
        return None;
    };
    let mut i = 0;
    while i < MAX_VLAN_TAGS {
        i += 1;
        if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
            let Some(p) = load::<u16>(ctx, off + 2) else {
                count(Counter::MalformedL3);
                return None;
            };
            proto = u16::from_be(p);
            off += 4;
        }
    }
    let mut key = FlowKey::default();
    let ip_off = off;
    let v6 = proto == ETH_P_IPV6;
    let l4proto;
    if proto == ETH_P_IP {
        let Some(h) = load::<[u8; 20]>(ctx, off) else {
            count(Counter::MalformedL3);
            return None;
        };
        let ihl = ((h[0] & 0x0f) as usize) * 4;
        if h[0] >> 4 != 4 || ihl < 20 {
            count(Counter::MalformedL3);
            return None;
        }
        // More-fragments flag or a fragment offset: the stack reassembles.
        if (h[6] & 0x3f) != 0 || h[7] != 0 {
            count(Counter::Fragment);
            return None;
        }
        l4proto = h[9];
        key.saddr[0] = u32::from_ne_bytes([h[12], h[13], h[14], h[15]]);
        key.daddr[0] = u32::from_ne_bytes([h[16], h[17], h[18], h[19]]);
        off += ihl;
    } else if proto == ETH_P_IPV6 {
        let (Some(nh0), Some(sa), Some(da)) = (
            load::<u8>(ctx, off + 6),
            load::<[u32; 4]>(ctx, off + 8),
            load::<[u32; 4]>(ctx, off + 24),
        ) else {
            count(Counter::MalformedL3);
            return None;
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
                    let Some(e) = load::<[u8; 2]>(ctx, off) else {
                        count(Counter::MalformedL3);
                        return None;
                    };
                    nh = e[0];
                    off += (e[1] as usize + 1) * 8;
                }
                44 => {
                    count(Counter::Fragment);
                    return None;
                }
                _ => break,
            }
        }
        l4proto = nh;
        key.proto = 0x80;
    } else {
        count(Counter::NotDiameter);
        return None;
    }
    if l4proto != IPPROTO_TCP && l4proto != IPPROTO_SCTP {
        count(Counter::NotDiameter);
        return None;
    }
    key.proto |= l4proto & 0x7f;
    Some(L4 {
        off,
        proto: l4proto,
        key,
        ip_off,
        v6,
    })
}
