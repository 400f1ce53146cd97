//! The kernel side of `dra_common::wire::Bytes`: reads from packet memory, every
//! access checked against `data_end` so the verifier can prove it. (Bytes carried
//! over from earlier segments are scanned as a plain `&[u8]` in the flow state.)

use aya_ebpf::{bindings::xdp_md, helpers::bpf_xdp_load_bytes};
use dra_common::wire::{Bytes, MAX_ITEM_LEN, MsgScan, PART_BUF, Source, WireError};

/// Largest offset we ever read at (16 KiB: beyond any single-buffer XDP frame, jumbo
/// frames included). Verifier workaround: a packet pointer plus a scalar only gains a
/// range after the `data_end` check if the pointer's maximum (start + MAX_OFF + 4)
/// stays below MAX_PACKET_OFF (0xffff); this comparison gives the scalar that bound.
pub const MAX_OFF: usize = 0x3fff;

/// `off` bounded for the verifier. The comparison gives the caller's semantics; the
/// mask, behind an optimisation barrier so LLVM cannot drop it as redundant, is what
/// the verifier sees on the very register that is added to the packet pointer
/// (verifier workaround: LLVM otherwise checks one copy of `off` and adds another).
#[inline(always)]
pub fn bounded(off: usize) -> Option<usize> {
    if off > MAX_OFF {
        return None;
    }
    Some(opaque(off) & MAX_OFF)
}

/// Hides a value from LLVM's optimiser at the cost of one register move (inline asm
/// that "modifies" it; an empty template would give two BTF line infos one offset,
/// which the kernel rejects). Unlike `black_box` it does not spill to the stack.
#[inline(always)]
pub fn opaque(mut v: usize) -> usize {
    // SAFETY: a register-to-itself move; it reads and writes only `v`'s register.
    unsafe { core::arch::asm!("{0} = {0}", inout(reg) v, options(pure, nomem, nostack)) };
    v
}

/// `start..end` of packet memory, of which only the first `limit` bytes are
/// readable (e.g. an SCTP chunk). `end` must be the packet's `data_end` itself: the
/// verifier only learns a range from comparisons against `data_end`.
#[derive(Clone, Copy)]
pub struct PacketBytes {
    pub start: usize,
    pub end: usize,
    pub limit: usize,
}

impl PacketBytes {
    /// The packet from `start` to `data_end`.
    #[inline(always)]
    pub fn new(start: usize, end: usize) -> PacketBytes {
        PacketBytes {
            start,
            end,
            limit: MAX_OFF + 1,
        }
    }
}

impl Bytes for PacketBytes {
    #[inline(always)]
    fn len(&self) -> usize {
        let n = self.end.saturating_sub(self.start);
        if n < self.limit { n } else { self.limit }
    }

    #[inline(always)]
    fn u8_at(&self, off: usize) -> Option<u8> {
        if off >= self.limit {
            return None;
        }
        let off = bounded(off)?;
        let p = self.start + off;
        // Verifier workaround: LLVM turns `p + 1 > end` into `p >= end`, from which
        // the verifier learns no range for a zero-offset pointer; the barrier keeps
        // the `+ 1`.
        if opaque(p + 1) > self.end {
            return None;
        }
        // SAFETY: p..p+1 is inside the packet (checked against data_end above).
        Some(unsafe { *(p as *const u8) })
    }

    #[inline(always)]
    fn u32_at(&self, off: usize) -> Option<u32> {
        if off + 4 > self.limit {
            return None;
        }
        let off = bounded(off)?;
        let p = self.start + off;
        if p + 4 > self.end {
            return None;
        }
        // SAFETY: p..p+4 is inside the packet (checked against data_end above).
        let b = unsafe { core::ptr::read_unaligned(p as *const [u8; 4]) };
        Some(u32::from_be_bytes(b))
    }
}

/// An XDP packet as a [`Source`] for the scan cursor: bytes copied with
/// `bpf_xdp_load_bytes` (usable from a `bpf_loop` callback, where packet pointers are
/// not; it also reads multi-buffer frames).
pub struct XdpSource(pub *mut xdp_md);

impl Source for XdpSource {
    /// Reads the item straight from packet memory (the linear part; an item in a
    /// fragment reads as truncated and is copied by the helper instead).
    #[inline(always)]
    fn feed_in_place(&self, scan: &mut MsgScan, off: usize) -> Option<Result<(), WireError>> {
        // SAFETY: the program's own xdp_md context, valid for this run.
        let (data, end) = unsafe { ((*self.0).data as usize, (*self.0).data_end as usize) };
        Some(scan.feed(&PacketBytes::new(data, end), off))
    }

    #[inline(always)]
    fn copy(&self, off: usize, dst: &mut [u8; PART_BUF], at: usize, n: usize) -> bool {
        let Some((off, at, n)) = copy_bounds(off, at, n, MAX_OFF) else {
            return false;
        };
        // SAFETY: dst + at .. + n is inside the PART_BUF-byte buffer (copy_bounds);
        // the helper checks the packet's bounds.
        let r = unsafe { bpf_xdp_load_bytes(self.0, off, dst.as_mut_ptr().add(at) as *mut _, n) };
        r == 0
    }
}

/// The arguments of a helper that copies `n` bytes at source offset `off` into a
/// [`PART_BUF`]-byte buffer at `at` (`bpf_xdp_load_bytes`, `bpf_skb_load_bytes`):
/// `None` unless 1 ≤ n ≤ [`MAX_ITEM_LEN`], `at` ≤ [`MAX_ITEM_LEN`] and `off` ≤ `max_off`.
///
/// Verifier workaround: the checks sit on the very registers passed to the helper
/// (after an optimisation barrier), and the size is bounded as `n - 1 < MAX_ITEM_LEN`
/// with 1 added after: verifiers before 6.8 learn no minimum from `n != 0`, and a
/// helper size whose minimum is 0 is refused there, but they do learn bounds from `<`.
#[inline(always)]
pub fn copy_bounds(off: usize, at: usize, n: usize, max_off: usize) -> Option<(u32, usize, u32)> {
    let at = opaque(at);
    let less = opaque(n.wrapping_sub(1));
    if less >= MAX_ITEM_LEN || at > MAX_ITEM_LEN || off > max_off {
        return None;
    }
    Some((off as u32, at, less as u32 + 1))
}
