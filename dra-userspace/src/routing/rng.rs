//! A small seedable PRNG for peer selection (SplitMix64, Steele/Lea/Flood 2014).
//!
//! Not cryptographic: it only spreads requests. Seeded explicitly so that tests and the
//! simulator are reproducible; the agent seeds it from the OS at start-up.

/// SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator with the given seed (every seed, including 0, is fine).
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` without modulo bias (Lemire's multiply-and-reject).
    /// Returns 0 for `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            // Low half below the threshold would bias the result: draw again.
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_below_stays_in_range() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            let v = a.below(3);
            assert!(v < 3);
            counts[v as usize] += 1;
        }
        // Each bucket should get about 1000; 800 leaves a wide margin.
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(a.below(0), 0);
    }
}
