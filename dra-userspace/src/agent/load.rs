//! The agent's own RFC 8583 load, reported to its downstream peers in DWAs.
//!
//! ```text
//! Load-Value = ⌊65535 × (1 − max(pending / capacity, cpu / 100))⌋   clamped to 0..=65535
//! ```
//!
//! - `pending`: requests the relay holds for an upstream answer (including those waiting
//!   in an egress limiter queue); `capacity`: [`AgentOptions::pending_capacity`], where
//!   the relay starts answering 3004 DIAMETER_TOO_BUSY. A full table reports 0.
//! - `cpu`: the agent process's CPU over the last housekeeping period, in percent of the
//!   cores it may use (all threads' `utime + stime` ÷ wall time ÷ cores), so 100 means
//!   every core busy. Unknown CPU (first period, no `/proc`) counts as 0.
//!
//! The larger of the two fractions wins: the agent is as loaded as its scarcest
//! resource. Higher = less loaded (RFC 8583 §7.3).
//!
//! [`AgentOptions::pending_capacity`]: super::AgentOptions::pending_capacity

use crate::routing::LOAD_VALUE_IDLE;

/// The Load-Value the agent reports about itself (module docs): `pending` requests out of
/// `capacity`, and `cpu_percent` (0..=100 = share of the usable cores; `None` or a value
/// that is not a number counts as 0).
pub fn own_load_value(pending: usize, capacity: usize, cpu_percent: Option<f64>) -> u16 {
    let table = if capacity == 0 {
        1.0
    } else {
        pending as f64 / capacity as f64
    };
    let cpu = cpu_percent.filter(|c| c.is_finite()).unwrap_or(0.0) / 100.0;
    let busy = table.max(cpu).clamp(0.0, 1.0);
    // RFC 8583 §7.3: 0..=65535, higher = less loaded.
    (f64::from(LOAD_VALUE_IDLE) * (1.0 - busy)).floor() as u16
}

/// CPU of the agent process in percent of its usable cores, sampled once per
/// housekeeping period. `None` where `/proc` is not readable.
pub(super) struct OwnCpu {
    source: crate::control::sources::ProcessCpu,
    cores: f64,
    failed: bool,
}

impl OwnCpu {
    pub(super) fn new() -> Self {
        OwnCpu {
            source: crate::control::sources::ProcessCpu::new(
                crate::control::sources::ProcessSelector::Pid(std::process::id()),
            ),
            cores: std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
            failed: false,
        }
    }

    /// Percent of the usable cores since the previous call (`None` on the first call or
    /// after a read error; a failing source is not read again).
    pub(super) fn sample(&mut self) -> Option<f64> {
        use crate::control::CpuSource;
        if self.failed {
            return None;
        }
        match self.source.sample() {
            Ok(v) => v.map(|pct| pct / self.cores),
            Err(e) => {
                tracing::debug!(
                    error = %crate::error_chain(&e),
                    "own CPU unavailable; load from pending requests only"
                );
                self.failed = true;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_agent_reports_full_capacity() {
        assert_eq!(own_load_value(0, 100_000, None), 65_535);
        assert_eq!(own_load_value(0, 100_000, Some(0.0)), 65_535);
    }

    #[test]
    fn the_scarcer_resource_decides() {
        // A quarter of the pending table, 10 % CPU: the table decides.
        assert_eq!(own_load_value(250, 1000, Some(10.0)), 49_151);
        // Same table, 60 % CPU: CPU decides.
        assert_eq!(own_load_value(250, 1000, Some(60.0)), 26_214);
        // Half of each: 65535 / 2, rounded down.
        assert_eq!(own_load_value(500, 1000, Some(50.0)), 32_767);
    }

    #[test]
    fn saturation_reports_zero_and_never_wraps() {
        assert_eq!(own_load_value(1000, 1000, None), 0);
        assert_eq!(own_load_value(5000, 1000, None), 0);
        assert_eq!(own_load_value(0, 1000, Some(100.0)), 0);
        assert_eq!(own_load_value(0, 1000, Some(250.0)), 0);
        assert_eq!(own_load_value(0, 0, None), 0);
    }

    #[test]
    fn unknown_or_bogus_cpu_counts_as_idle() {
        assert_eq!(own_load_value(0, 10, Some(f64::NAN)), 65_535);
        assert_eq!(own_load_value(0, 10, Some(-5.0)), 65_535);
        assert_eq!(own_load_value(1, 10, Some(f64::INFINITY)), 58_981);
    }

    #[test]
    fn more_load_never_reports_a_higher_value() {
        let mut last = u16::MAX;
        for pending in (0..=1000).step_by(7) {
            let v = own_load_value(pending, 1000, Some(20.0));
            assert!(v <= last, "{pending}: {v} > {last}");
            last = v;
        }
    }
}
