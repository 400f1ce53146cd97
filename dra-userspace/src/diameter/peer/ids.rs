//! Hop-by-Hop and End-to-End identifiers for requests a connection originates (RFC 6733
//! §3).

use crate::routing::SplitMix64;

/// Mask of the 20 low bits of an End-to-End identifier.
const E2E_LOW_MASK: u32 = 0x000f_ffff;

/// Identifier source for one connection.
///
/// - Hop-by-Hop: a counter starting at a random value, so answers on this connection are
///   matched to requests (RFC 6733 §3, §6.2). A relay sending requests over the same
///   connection must take its ids from here too, so they never collide with ours.
/// - End-to-End: "the high order 12 bits contain the low order 12 bits of current time,
///   and the low order 20 bits a random value" (RFC 6733 §3); here the time is the
///   caller's start time and the low bits count up from a random start, which keeps them
///   unique for 2^20 requests.
#[derive(Clone, Debug)]
pub struct IdGenerator {
    hop_by_hop: u32,
    e2e_high: u32,
    e2e_low: u32,
}

impl IdGenerator {
    /// `start_time_secs`: wall-clock seconds (any epoch) at which the agent started,
    /// read once by the caller; `rng` supplies the random starting points.
    pub fn new(start_time_secs: u64, rng: &mut SplitMix64) -> Self {
        IdGenerator {
            hop_by_hop: rng.next_u64() as u32,
            e2e_high: ((start_time_secs & 0xfff) as u32) << 20,
            e2e_low: (rng.next_u64() as u32) & E2E_LOW_MASK,
        }
    }

    /// The next Hop-by-Hop identifier.
    pub fn next_hop_by_hop(&mut self) -> u32 {
        let id = self.hop_by_hop;
        self.hop_by_hop = id.wrapping_add(1);
        id
    }

    /// The next End-to-End identifier.
    pub fn next_end_to_end(&mut self) -> u32 {
        let id = self.e2e_high | self.e2e_low;
        self.e2e_low = (self.e2e_low + 1) & E2E_LOW_MASK;
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_to_end_high_bits_are_the_start_time_and_ids_do_not_repeat() {
        let mut rng = SplitMix64::new(9);
        let mut ids = IdGenerator::new(0x1234_5abc, &mut rng);
        let first = ids.next_end_to_end();
        assert_eq!(first >> 20, 0xabc);
        let mut seen = std::collections::HashSet::new();
        seen.insert(first);
        for _ in 0..10_000 {
            let e = ids.next_end_to_end();
            assert_eq!(e >> 20, 0xabc);
            assert!(seen.insert(e), "End-to-End id repeated");
        }
        let h1 = ids.next_hop_by_hop();
        assert_eq!(ids.next_hop_by_hop(), h1.wrapping_add(1));
        // Another seed starts elsewhere.
        let mut other = IdGenerator::new(0x1234_5abc, &mut SplitMix64::new(10));
        assert_ne!(other.next_hop_by_hop(), h1);
    }
}
