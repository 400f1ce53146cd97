//! The programs' maps. Names are `dra_common::maps::names`.

use aya_ebpf::{
    macros::map,
    maps::{PerCpuArray, PerCpuHashMap},
};
use dra_common::{
    maps::{BucketKey, ClassCounters},
    stats::Counter,
};

#[map(name = "STATS")]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

#[map(name = "CLASS_COUNTERS")]
pub static CLASS_COUNTERS: PerCpuHashMap<BucketKey, ClassCounters> =
    PerCpuHashMap::with_max_entries(4096, 0);

/// Adds one to a global counter.
#[inline(always)]
pub fn count(c: Counter) {
    if let Some(p) = STATS.get_ptr_mut(c as u32) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}
