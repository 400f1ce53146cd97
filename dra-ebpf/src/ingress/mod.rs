//! XDP ingress: parse L2–L4 (`parse.rs`, shared with TC egress), find Diameter on the
//! configured ports, look up the peer, then hand TCP to the framer and SCTP to the
//! chunk walker (tail calls).

use aya_ebpf::{maps::lpm_trie::Key, programs::XdpContext};
use dra_common::{
    maps::{PeerInfo, UnknownPeerPolicy},
    stats::Counter,
    words,
};

use crate::{
    maps::{
        GLOBAL_CONFIG, JUMP, JUMP_SCTP, JUMP_TCP, PEERS_V4, PEERS_V6, PKT_META, count, count_get,
    },
    parse::{self, IPPROTO_SCTP, IPPROTO_TCP, L4, Skip, is_diameter_port},
};

pub mod sctp;
pub mod tcp;
mod xdp;

pub use xdp::{DROP, PASS, load};

/// One unknown-peer drop in this many (per CPU) is offered to the event log.
const UNKNOWN_DROP_SAMPLE: u64 = 64;

pub fn try_ingress(ctx: &XdpContext) -> Result<u32, ()> {
    count(Counter::Packets);
    let Some(cfg) = GLOBAL_CONFIG.get(0) else {
        return Ok(PASS);
    };
    if cfg.enabled == 0 {
        count(Counter::NotDiameter);
        return Ok(PASS);
    }
    let l4 = match parse::parse(ctx) {
        Ok(l4) if l4.proto == IPPROTO_TCP || l4.proto == IPPROTO_SCTP => l4,
        Ok(_) | Err(Skip::NotIp) => {
            count(Counter::NotDiameter);
            return Ok(PASS);
        }
        Err(Skip::Fragment) => {
            count(Counter::Fragment);
            return Ok(PASS);
        }
        Err(Skip::Malformed) => {
            count(Counter::MalformedL3);
            return Ok(PASS);
        }
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
            // Sampled: a flood of unknown sources comes this way packet after packet, so
            // only one drop in 64 per CPU reaches the logger (its clock read and gate).
            if count_get(Counter::UnknownPeerDrop) & (UNKNOWN_DROP_SAMPLE - 1) == 1 {
                crate::events::flow(ctx, crate::events::Event::UnknownPeerDrop, &key);
            }
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
        words::copy(&mut (*m).peer, peer);
        words::copy(&mut (*m).key, &key);
    }
    // One tail call per target, each with a constant index: the verifier then lets the
    // JIT patch it into a direct jump (a variable index is an indirect jump, i.e. a
    // retpoline on this kind of CPU). Verifier workaround: the paths after the calls
    // must differ (the optimisation barrier on one), or LLVM merges the two calls into
    // one whose index is a phi.
    if l4.proto == IPPROTO_TCP {
        // SAFETY: a tail call does not return on success.
        unsafe { JUMP.tail_call(ctx, JUMP_TCP) };
        // Only reached if the program array is not populated.
        count(Counter::NoProgram);
        return Ok(PASS);
    }
    // SAFETY: as above.
    unsafe { JUMP.tail_call(ctx, JUMP_SCTP) };
    crate::maps::count_n(Counter::NoProgram, crate::bytes::opaque(1) as u64);
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
pub fn lookup_peer(ctx: &XdpContext, l4: &L4) -> Option<&'static PeerInfo> {
    if crate::bytes::opaque(l4.v6 as usize) != 0 {
        let a = load::<[u8; 16]>(ctx, l4.ip_off + 8)?;
        PEERS_V6.get(Key::new(128, a))
    } else {
        let a = load::<[u8; 4]>(ctx, l4.ip_off + 12)?;
        PEERS_V4.get(Key::new(32, a))
    }
}
