//! XDP packet access for the ingress programs: bounded reads of packet memory, and
//! their verdicts.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};

use crate::parse::Packet;

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

impl Packet for XdpContext {
    #[inline(always)]
    fn load<T: Copy>(&self, off: usize) -> Option<T> {
        load(self, off)
    }
}
