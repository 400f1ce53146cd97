//! The kernel side of `dra_common::wire::Bytes`: reads from packet memory, every
//! access checked against `data_end` so the verifier can prove it.

use dra_common::wire::Bytes;

/// Largest offset we ever read at (16 KiB: beyond any single-buffer XDP frame, jumbo
/// frames included). Verifier workaround: a packet pointer plus a scalar only gains a
/// range after the `data_end` check if the pointer's maximum (start + MAX_OFF + 4)
/// stays below MAX_PACKET_OFF (0xffff); this comparison gives the scalar that bound.
const MAX_OFF: usize = 0x3fff;

/// `start..end` of packet memory.
pub struct PacketBytes {
    pub start: usize,
    pub end: usize,
}

impl Bytes for PacketBytes {
    #[inline(always)]
    fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    #[inline(always)]
    fn u8_at(&self, off: usize) -> Option<u8> {
        if off > MAX_OFF {
            return None;
        }
        let p = self.start + off;
        if p + 1 > self.end {
            return None;
        }
        // SAFETY: p..p+1 is inside the packet (checked against data_end above).
        Some(unsafe { *(p as *const u8) })
    }

    #[inline(always)]
    fn u32_at(&self, off: usize) -> Option<u32> {
        if off > MAX_OFF {
            return None;
        }
        let p = self.start + off;
        if p + 4 > self.end {
            return None;
        }
        // SAFETY: p..p+4 is inside the packet (checked against data_end above).
        let b = unsafe { core::ptr::read_unaligned(p as *const [u8; 4]) };
        Some(u32::from_be_bytes(b))
    }
}
