//! XDP ingress: parse L2/L3/L4, find Diameter on the configured ports, classify.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use dra_common::{
    maps::{BucketKey, ClassCounters},
    stats::Counter,
    wire::{self, DIAMETER_PORT},
};

use crate::{
    bytes::PacketBytes,
    maps::{count, CLASS_COUNTERS},
};

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;
/// Bound on VLAN tags we look through.
const MAX_VLAN_TAGS: usize = 2;

#[inline(always)]
fn load<T: Copy>(ctx: &XdpContext, off: usize) -> Result<T, ()> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + off + core::mem::size_of::<T>() > end {
        return Err(());
    }
    // SAFETY: bounds checked against data_end above.
    Ok(unsafe { core::ptr::read_unaligned((start + off) as *const T) })
}

pub fn try_ingress(ctx: &XdpContext) -> Result<u32, ()> {
    count(Counter::Packets);
    let mut off = ETH_HLEN;
    let mut proto = u16::from_be(load::<u16>(ctx, 12)?);
    for _ in 0..MAX_VLAN_TAGS {
        if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
            proto = u16::from_be(load::<u16>(ctx, off + 2)?);
            off += 4;
        }
    }
    if proto != ETH_P_IP {
        let _ = ETH_P_IPV6;
        count(Counter::NotDiameter);
        return Ok(xdp_action::XDP_PASS);
    }
    let vihl: u8 = load(ctx, off)?;
    let ihl = ((vihl & 0x0f) as usize) * 4;
    let l4proto: u8 = load(ctx, off + 9)?;
    if l4proto != IPPROTO_TCP || ihl < 20 {
        count(Counter::NotDiameter);
        return Ok(xdp_action::XDP_PASS);
    }
    let tcp = off + ihl;
    let dport = u16::from_be(load::<u16>(ctx, tcp + 2)?);
    if dport != DIAMETER_PORT {
        count(Counter::NotDiameter);
        return Ok(xdp_action::XDP_PASS);
    }
    let doff_byte: u8 = load(ctx, tcp + 12)?;
    let doff = ((doff_byte >> 4) as usize) * 4;
    let payload = tcp + doff;
    let b = PacketBytes {
        start: ctx.data() + payload,
        end: ctx.data_end(),
    };
    match wire::classify(&b, 0) {
        Ok(c) => {
            if c.header.is_request() {
                count(Counter::Requests);
                let key = BucketKey::new(0, c.class);
                match CLASS_COUNTERS.get_ptr_mut(key) {
                    // SAFETY: per-CPU value of this CPU.
                    Some(v) => unsafe { (*v).seen += 1 },
                    None => {
                        let v = ClassCounters { seen: 1, ..ClassCounters::default() };
                        let _ = CLASS_COUNTERS.insert(key, v, 0);
                    }
                }
            } else {
                count(Counter::Answers);
            }
        }
        Err(_) => count(Counter::MalformedDiameter),
    }
    Ok(xdp_action::XDP_PASS)
}
