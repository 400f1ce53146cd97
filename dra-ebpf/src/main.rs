//! Entry points only; the programs live in one file per hook.
#![no_std]
#![no_main]

mod bytes;
mod maps;
mod xdp;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};

/// XDP ingress on the DRA's client-facing interface.
#[xdp]
pub fn dra_xdp(ctx: XdpContext) -> u32 {
    match xdp::try_ingress(&ctx) {
        Ok(v) => v,
        Err(()) => xdp_action::XDP_PASS,
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
