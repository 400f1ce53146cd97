//! The part of a measured phase a bench takes its numbers from: the phase without its
//! first seconds (the load starting up) and its last ones (the drain). One rule for every
//! bench that trims a phase, on both clocks: the instants xtask scrapes and samples at,
//! and the client's per-second rows.

use std::time::{Duration, Instant};

/// Whole seconds left out at the start and at the end of a measured phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) skip_first: u64,
    pub(crate) skip_last: u64,
}

/// The interior of `measure` in the storm, DOIC and flood benches: without its first
/// 2 s (the storm or flood ramping up, the agent's first refresh of its limits) and its
/// last 1 s (requests still in flight when the phase ends).
pub(crate) const INTERIOR: Window = Window {
    skip_first: 2,
    skip_last: 1,
};

impl Window {
    /// Start and end of the window in a phase that starts at `start` and lasts `len_s`.
    pub(crate) fn instants(&self, start: Instant, len_s: f64) -> (Instant, Instant) {
        let end = start + Duration::from_secs_f64(len_s);
        (
            start + Duration::from_secs(self.skip_first),
            end - Duration::from_secs(self.skip_last),
        )
    }

    /// Seconds of the window in a phase of `len_s`.
    pub(crate) fn secs(&self, len_s: f64) -> f64 {
        len_s - (self.skip_first + self.skip_last) as f64
    }

    /// Whether a phase of `len_s` leaves at least `min_s` seconds in the window.
    pub(crate) fn leaves(&self, len_s: f64, min_s: u64) -> bool {
        len_s >= (self.skip_first + self.skip_last + min_s) as f64
    }

    /// Mean of the phase's per-second values `v` over the window; `None` when the phase
    /// is too short to leave any.
    pub(crate) fn mean(&self, v: &[f64]) -> Option<f64> {
        let end = v.len().checked_sub(usize::try_from(self.skip_last).ok()?)?;
        let inner = v.get(usize::try_from(self.skip_first).ok()?..end)?;
        (!inner.is_empty()).then(|| inner.iter().sum::<f64>() / inner.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_leaves_out_the_same_seconds_on_both_clocks() {
        let w = INTERIOR;
        let t = Instant::now();
        let (a, b) = w.instants(t, 10.0);
        assert_eq!(a - t, Duration::from_secs(2));
        assert_eq!(b - t, Duration::from_secs(9));
        assert_eq!(w.secs(10.0), 7.0);
        assert!(w.leaves(6.0, 3) && !w.leaves(5.0, 3));
        // Per-second values of a 6 s phase: seconds 2, 3 and 4 are the window's.
        let v = [510.0, 502.0, 498.0, 504.0, 0.0, 300.0];
        assert_eq!(w.mean(&v), Some(334.0));
        assert_eq!(w.mean(&v[..4]), Some(498.0));
        assert_eq!(w.mean(&v[..3]), None);
        assert_eq!(w.mean(&[]), None);
    }
}
