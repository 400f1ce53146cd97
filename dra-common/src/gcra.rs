//! The one token bucket of the project: GCRA, the virtual-scheduling form of a token
//! bucket (ITU-T I.371), on integer nanoseconds. The kernel's buckets
//! (`dra-ebpf/src/bucket.rs`, with a compare-and-swap around it), the agent's userspace
//! limiter and the egress RLF all decide with [`conforms`].
//!
//! State: the theoretical arrival time `tat` of the next conforming message. A message
//! at `now` conforms if `max(tat, now) − now ≤ tolerance`; it then moves `tat` to
//! `max(tat, now) + interval`. `interval` = 1 / rate, `tolerance` = (burst − 1) ×
//! interval: up to `burst` messages may go back to back, and the long-run rate is the
//! rate (the interval is rounded to a whole nanosecond: at most 0.5 ns of drift per
//! message).

/// A rate as GCRA parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Rate {
    /// 1e9 / rate, rounded; 0 = unlimited.
    pub interval_ns: u64,
    /// (burst − 1) × interval.
    pub tolerance_ns: u64,
}

impl Rate {
    /// No limit.
    pub const UNLIMITED: Rate = Rate {
        interval_ns: 0,
        tolerance_ns: 0,
    };

    /// `rate` messages per second (a rate ≤ 0 admits nothing after the burst: the
    /// interval is then `u64::MAX`) with a burst of `burst` messages (0 is taken as 1).
    pub fn new(rate: f64, burst: u32) -> Rate {
        let interval_ns = if rate > 0.0 {
            let v = 1e9 / rate + 0.5;
            if v >= u64::MAX as f64 {
                u64::MAX
            } else {
                v as u64
            }
        } else {
            u64::MAX
        };
        let b = if burst == 0 { 1 } else { burst } as u64;
        Rate {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(b - 1),
        }
    }
}

/// The new TAT if one message at `now` conforms to a bucket with this `tat`, else
/// `None`. An interval of 0 is unlimited (the TAT is returned unchanged).
#[inline(always)]
pub fn conforms(tat: u64, now: u64, interval_ns: u64, tolerance_ns: u64) -> Option<u64> {
    if interval_ns == 0 {
        return Some(tat);
    }
    let base = if tat > now { tat } else { now };
    if base - now > tolerance_ns {
        return None;
    }
    Some(base.saturating_add(interval_ns))
}

/// The earliest time one message conforms to a bucket with this `tat`.
#[inline(always)]
pub fn ready_at(tat: u64, tolerance_ns: u64) -> u64 {
    tat.saturating_sub(tolerance_ns)
}

/// The TAT after giving back one message's charge (a message charged and then not
/// sent).
#[inline(always)]
pub fn refund(tat: u64, interval_ns: u64) -> u64 {
    tat.saturating_sub(interval_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn burst_then_rate() {
        let r = Rate::new(10.0, 3);
        assert_eq!(
            r,
            Rate {
                interval_ns: S / 10,
                tolerance_ns: 2 * S / 10
            }
        );
        // At 100/s for 10 s: the burst, then one per interval.
        let mut tat = 0;
        let mut admitted = 0;
        for i in 0..1000u64 {
            if let Some(t) = conforms(tat, i * S / 100, r.interval_ns, r.tolerance_ns) {
                tat = t;
                admitted += 1;
            }
        }
        assert_eq!(admitted, 3 + 99);
        assert_eq!(ready_at(tat, r.tolerance_ns), tat - 2 * S / 10);
        assert_eq!(refund(tat, r.interval_ns), tat - S / 10);
    }

    #[test]
    fn unlimited_and_extremes() {
        assert_eq!(conforms(5, 0, 0, 0), Some(5));
        assert_eq!(Rate::new(0.0, 1).interval_ns, u64::MAX);
        assert_eq!(Rate::new(-1.0, 5).tolerance_ns, u64::MAX);
        assert_eq!(
            Rate::new(1e9, 0),
            Rate {
                interval_ns: 1,
                tolerance_ns: 0
            }
        );
        // A stopped bucket after its burst: nothing more.
        let r = Rate::new(0.0, 1);
        let t = conforms(0, 10, r.interval_ns, r.tolerance_ns).unwrap();
        assert_eq!(t, u64::MAX);
        assert_eq!(conforms(t, 20, r.interval_ns, r.tolerance_ns), None);
    }
}
