//! The wire scanner on arbitrary bytes at arbitrary offsets: never panics, and what it
//! reports is consistent with the bytes.
#![no_main]

use dra_common::wire::{self, Bytes, ReqTypeScan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&off, rest)) = data.split_first() else {
        return;
    };
    let off = off as usize % 32;
    let b = rest;
    if let Ok(c) = wire::classify(&b, off) {
        // A classified header was really there.
        assert_eq!(b.u8_at(off), Some(1));
        assert!(c.header.length >= 20 && c.header.length % 4 == 0);
        assert_eq!(c.class.app_id, c.header.application_id);
        if let Some(ReqTypeScan::Found(v)) = c.req_type {
            if (1..=4).contains(&v) {
                assert_eq!(c.class.req_type as u32, v);
            }
        }
    }
});
