//! The walks over one packet's messages, chunks or segments (TCP and SCTP ingress, TC
//! egress) run their steps through `bpf_loop`: the verifier checks a callback once,
//! whatever the number of iterations, where a loop in the program would be checked per
//! iteration. Each walk keeps its state in a per-CPU map value (contents the verifier
//! does not track, so its exploration of the callback converges) and passes `bpf_loop`
//! a small context of pointers on the stack: a [`Steps`].

use aya_ebpf::helpers::bpf_loop;

use crate::parse::seq_lt;

/// A walk's `bpf_loop` context: one step per iteration.
pub trait Steps {
    /// Takes one step; false stops the loop.
    fn step(&mut self) -> bool;
}

/// Steps `walk` until a step returns false, at most `max` times.
#[inline(always)]
pub fn run<W: Steps>(max: u32, walk: &mut W) {
    // SAFETY: `callback::<W>` has the signature bpf_loop expects and gets back the
    // `walk` given here, which outlives the call.
    unsafe {
        bpf_loop(max, callback::<W> as *mut _, walk as *mut W as *mut _, 0);
    }
}

/// The callback: one step of the walk `bpf_loop` passes back. Returns 0 to go on, 1 to
/// stop.
#[inline(never)]
extern "C" fn callback<W: Steps>(_i: u64, walk: *mut core::ffi::c_void) -> i64 {
    // SAFETY: the `&mut W` that `run` gave bpf_loop, live for the whole loop.
    let walk = unsafe { &mut *(walk as *mut W) };
    if walk.step() { 0 } else { 1 }
}

/// Where a packet's part of the TCP message at `pos` begins, as (offset in the message,
/// offset in the packet): all of the message when it begins in this packet, else its
/// bytes from `fresh` on (the first byte new to the framing line; those before were
/// given to the scan already). `seq` is the packet's first payload byte, at packet
/// offset `payload`.
#[inline(always)]
pub fn piece(pos: u32, fresh: u32, seq: u32, payload: u32) -> (u32, usize) {
    let (start, first) = if seq_lt(pos, fresh) {
        (fresh.wrapping_sub(pos), fresh)
    } else {
        (0, pos)
    };
    (
        start,
        payload.wrapping_add(first.wrapping_sub(seq)) as usize,
    )
}
