//! The walks over one packet's messages, chunks or segments (TCP and SCTP ingress, TC
//! egress) run their steps through `bpf_loop`: the verifier checks a callback once,
//! whatever the number of iterations, where a loop in the program would be checked per
//! iteration. Each walk keeps its state in a per-CPU map value (contents the verifier
//! does not track, so its exploration of the callback converges) and passes `bpf_loop`
//! a small context of pointers on the stack: a [`Steps`].

use aya_ebpf::helpers::bpf_loop;

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
