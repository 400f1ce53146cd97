//! Entry points only. The programs: `ingress` (XDP: the dispatcher, then its tail calls
//! `ingress::tcp` and `ingress::sctp`), `egress` (TC); `parse` is the L2–L4 parse both use.
#![no_std]
#![no_main]
// 64-bit compare-and-swap for the shared buckets (see bucket.rs).
#![feature(core_intrinsics)]
// Empty inline asm as an optimisation barrier for the verifier (see bytes.rs).
#![feature(asm_experimental_arch)]
#![allow(internal_features)]

mod admit;
mod bucket;
mod bytes;
mod egress;
mod events;
mod floor;
mod ingress;
mod line;
mod maps;
mod overload;
mod parse;
mod walk;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};

/// XDP ingress on the DRA's client-facing interface: parse, peer lookup, dispatch.
#[xdp]
pub fn dra_xdp(ctx: XdpContext) -> u32 {
    match ingress::try_ingress(&ctx) {
        Ok(v) => v,
        Err(()) => xdp_action::XDP_PASS,
    }
}

/// TCP framing and limiting (tail call from `dra_xdp`).
#[xdp]
pub fn dra_xdp_tcp(ctx: XdpContext) -> u32 {
    ingress::tcp_entry(&ctx)
}

/// SCTP chunk walking and limiting (tail call from `dra_xdp`).
#[xdp]
pub fn dra_xdp_sctp(ctx: XdpContext) -> u32 {
    ingress::sctp_entry(&ctx)
}

/// TC egress (TCX) on the interface facing the servers: per-destination counting and
/// policing of the requests the agent sends.
#[classifier]
pub fn dra_tc_egress(ctx: TcContext) -> i32 {
    egress::egress(&ctx)
}

/// The benchmarks' baseline: a program that only passes (`cargo xtask bench xdp`).
#[xdp]
pub fn dra_xdp_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// The benchmark's floor: the lookups and charges of a request without the framing
/// (`floor.rs`; `cargo xtask bench xdp`, never attached).
#[xdp]
pub fn dra_xdp_floor(ctx: XdpContext) -> u32 {
    floor::floor(&ctx)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
