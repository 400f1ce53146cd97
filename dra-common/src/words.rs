//! Copying and zeroing map values four bytes at a time.
//!
//! On the BPF target LLVM turns a struct copy, or a run of zero stores, into a call of
//! `memmove`/`memset`, which the target provides as a BPF function that moves one byte
//! per iteration (a 40-byte flow key: ~240 instructions and a call, where ten loads and
//! ten stores do). These helpers move whole `u32` words through volatile accesses, which
//! LLVM neither merges into such a call nor drops; in userspace they are plain copies.
//! Only for `#[repr(C)]` plain-data types whose size is a multiple of 4 and whose
//! alignment is at least 4 (checked at compile time).

use core::ptr::{read_volatile, write_volatile};

struct Words<T>(core::marker::PhantomData<T>);

impl<T> Words<T> {
    const N: usize = {
        assert!(core::mem::size_of::<T>().is_multiple_of(4) && core::mem::align_of::<T>() >= 4);
        core::mem::size_of::<T>() / 4
    };
}

/// `*dst = *src`, word by word.
#[inline(always)]
pub fn copy<T: Copy>(dst: &mut T, src: &T) {
    let d = (dst as *mut T).cast::<u32>();
    let s = (src as *const T).cast::<u32>();
    let mut i = 0;
    while i < Words::<T>::N {
        // SAFETY: `T` is N whole, aligned u32 words (checked in `Words::N`); i < N.
        unsafe { write_volatile(d.add(i), read_volatile(s.add(i))) };
        i += 1;
    }
}

/// Every byte of `*dst` zero, word by word.
#[inline(always)]
pub fn zero<T: Copy>(dst: &mut T) {
    let d = (dst as *mut T).cast::<u32>();
    let mut i = 0;
    while i < Words::<T>::N {
        // SAFETY: as in `copy`.
        unsafe { write_volatile(d.add(i), 0) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::FlowKey;
    use crate::wire::{MsgScan, ScanCursor};

    #[test]
    fn copy_and_zero_move_every_byte() {
        let src = FlowKey {
            saddr: [1, 2, 3, 4],
            daddr: [5, 6, 7, 0xffff_ffff],
            sport: 40000,
            dport: 3868,
            proto: 6,
            _pad: [0; 3],
        };
        let mut dst = FlowKey::default();
        copy(&mut dst, &src);
        assert_eq!(dst, src);
        zero(&mut dst);
        assert_eq!(dst, FlowKey::default());
    }

    #[test]
    fn a_reset_cursor_is_a_new_one_but_for_the_part_bytes() {
        let mut c = ScanCursor::new();
        c.scan = MsgScan {
            length: 300,
            command_code: 272,
            application_id: 16_777_238,
            hop_by_hop: 7,
            end_to_end: 8,
            at: 120,
            req_value: 1,
            flags: 0x80,
            phase: 3,
            avps: 5,
            outcome: 1,
            drmp: 3,
            _pad: 0,
            _pad2: 0,
        };
        c.part_len = 5;
        c.part = [0xaa; crate::wire::PART_BUF];
        let mut copied = ScanCursor::new();
        copied.copy_from(&c);
        assert_eq!(copied, c);
        c.reset();
        assert_eq!(c.scan, MsgScan::new());
        assert_eq!(c.part_len, 0);
    }
}
