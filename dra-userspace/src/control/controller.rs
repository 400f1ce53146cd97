//! The pure dynamic rate-limit controller: CPU samples in, throttle changes out.
//!
//! No clock and no I/O: every input carries `now`, a monotonic [`Duration`] since an
//! arbitrary epoch chosen by the caller (the agent uses the time since it started; tests
//! use a virtual clock). See the [module documentation](super) for the operator-facing
//! description of the semantics; the doc comments here restate the exact rules next to
//! the code that implements them.

use std::fmt;
use std::time::Duration;

/// One row of the "Dynamic Throttling DB CPU Profile": at or above `cpu_pct` DB CPU,
/// throttle by `throttle_pct` percent (unless a higher row applies).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdRow {
    /// CPU threshold in percent, `0.0..=100.0`.
    pub cpu_pct: f64,
    /// Throttle applied at or above this threshold, in percent `0..=100` of the static rate.
    pub throttle_pct: u8,
}

/// A validated DB CPU profile: threshold rows, reversal hold time and reversal step.
///
/// Invariants (checked by [`DbCpuProfile::new`]): every CPU threshold is a finite
/// percentage in `0..=100`, every throttle is in `0..=100`, CPU thresholds are strictly
/// increasing, the hold time is non-zero and the step is in `1..=100`. An empty row list
/// is valid and means "never throttle".
///
/// Throttle values are *not* required to increase with CPU: the table is applied as
/// written.
#[derive(Debug, Clone, PartialEq)]
pub struct DbCpuProfile {
    rows: Vec<ThresholdRow>,
    reversal_hold: Duration,
    reversal_step_pct: u8,
}

/// Why a [`DbCpuProfile`] was rejected. Row indexes are 0-based positions in the row list
/// given to [`DbCpuProfile::new`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    /// A CPU threshold is NaN, infinite or outside `0..=100`.
    #[error("rows[{index}]: CPU threshold {cpu_pct}% is not a percentage in 0..=100")]
    CpuOutOfRange {
        /// Position of the row.
        index: usize,
        /// The rejected threshold.
        cpu_pct: f64,
    },
    /// A throttle percentage is above 100.
    #[error("rows[{index}]: throttle {throttle_pct}% is not a percentage in 0..=100")]
    ThrottleOutOfRange {
        /// Position of the row.
        index: usize,
        /// The rejected throttle.
        throttle_pct: u8,
    },
    /// Two consecutive rows are not in strictly increasing CPU order.
    #[error(
        "rows[{prev_index}] (CPU {prev_cpu_pct}%) and rows[{index}] (CPU {cpu_pct}%): \
         CPU thresholds must be strictly increasing"
    )]
    NotIncreasing {
        /// Position of the earlier row.
        prev_index: usize,
        /// CPU threshold of the earlier row.
        prev_cpu_pct: f64,
        /// Position of the later row.
        index: usize,
        /// CPU threshold of the later row.
        cpu_pct: f64,
    },
    /// The reversal hold time is zero (reversal would be instantaneous and unbounded).
    #[error("reversal hold time must be greater than zero")]
    ZeroHold,
    /// The reversal step is 0 (throttle would never be released) or above 100.
    #[error("reversal step {step_pct}% must be in 1..=100")]
    StepOutOfRange {
        /// The rejected step.
        step_pct: u8,
    },
}

impl DbCpuProfile {
    /// Validates and builds a profile. `rows` must be sorted by strictly increasing
    /// `cpu_pct`; the error names the first offending row(s).
    pub fn new(
        rows: Vec<ThresholdRow>,
        reversal_hold: Duration,
        reversal_step_pct: u8,
    ) -> Result<Self, ProfileError> {
        for (index, row) in rows.iter().enumerate() {
            if !row.cpu_pct.is_finite() || !(0.0..=100.0).contains(&row.cpu_pct) {
                return Err(ProfileError::CpuOutOfRange {
                    index,
                    cpu_pct: row.cpu_pct,
                });
            }
            if row.throttle_pct > 100 {
                return Err(ProfileError::ThrottleOutOfRange {
                    index,
                    throttle_pct: row.throttle_pct,
                });
            }
        }
        for (index, pair) in rows.windows(2).enumerate() {
            // NaN was rejected above, so `<=` is a total comparison here.
            if pair[1].cpu_pct <= pair[0].cpu_pct {
                return Err(ProfileError::NotIncreasing {
                    prev_index: index,
                    prev_cpu_pct: pair[0].cpu_pct,
                    index: index + 1,
                    cpu_pct: pair[1].cpu_pct,
                });
            }
        }
        if reversal_hold.is_zero() {
            return Err(ProfileError::ZeroHold);
        }
        if !(1..=100).contains(&reversal_step_pct) {
            return Err(ProfileError::StepOutOfRange {
                step_pct: reversal_step_pct,
            });
        }
        Ok(Self {
            rows,
            reversal_hold,
            reversal_step_pct,
        })
    }

    /// The threshold rows, in increasing CPU order.
    pub fn rows(&self) -> &[ThresholdRow] {
        &self.rows
    }

    /// Time the CPU must stay continuously below the lowest threshold for one step.
    pub fn reversal_hold(&self) -> Duration {
        self.reversal_hold
    }

    /// Percentage points removed from the throttle per reversal step.
    pub fn reversal_step_pct(&self) -> u8 {
        self.reversal_step_pct
    }

    /// The lowest CPU threshold, or `None` for an empty profile.
    pub fn lowest_threshold(&self) -> Option<f64> {
        self.rows.first().map(|r| r.cpu_pct)
    }

    /// The row that applies at `cpu_pct`: the highest row whose threshold is not above it
    /// (a sample exactly at a threshold applies that row). `None` below the lowest
    /// threshold or for an empty profile.
    pub fn row_for(&self, cpu_pct: f64) -> Option<ThresholdRow> {
        self.rows
            .iter()
            .rev()
            .find(|r| r.cpu_pct <= cpu_pct)
            .copied()
    }
}

/// What to do when the CPU source has produced no valid sample for `missing_after`
/// sample periods (see [`super::SampleLoop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissing {
    /// Keep the current throttle; no reversal steps until samples return.
    Hold,
    /// Treat the silence as "CPU below the lowest threshold": step the throttle down by
    /// the reversal step once per full hold time, like a reversal.
    Release,
}

impl fmt::Display for OnMissing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnMissing::Hold => "hold",
            OnMissing::Release => "release",
        })
    }
}

/// A CPU sample the controller refuses to use. The controller state is left untouched.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum InvalidSample {
    /// NaN or ±infinity: no meaningful CPU value.
    #[error("CPU sample {value} is not a finite number")]
    NotFinite {
        /// The rejected value.
        value: f64,
    },
    /// A negative CPU percentage (a broken source, e.g. a counter reset).
    #[error("CPU sample {value}% is negative")]
    Negative {
        /// The rejected value.
        value: f64,
    },
}

/// Checks a raw CPU sample: NaN, infinities and negative values are rejected; values
/// above 100 (a multi-threaded process measured in percent of one core) are clamped to
/// 100. Returns the value the controller will use.
pub fn validate_sample(cpu_pct: f64) -> Result<f64, InvalidSample> {
    if !cpu_pct.is_finite() {
        return Err(InvalidSample::NotFinite { value: cpu_pct });
    }
    if cpu_pct < 0.0 {
        return Err(InvalidSample::Negative { value: cpu_pct });
    }
    Ok(cpu_pct.min(100.0))
}

/// Why the throttle changed (or, for source events, what happened to the source).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// A sample at or above the lowest threshold selected the row with threshold
    /// `row_cpu` (the highest one not above `cpu`).
    Threshold {
        /// The CPU value used (after clamping/smoothing).
        cpu: f64,
        /// Threshold of the row that applied.
        row_cpu: f64,
    },
    /// The CPU stayed below the lowest threshold for full hold time(s).
    ReversalStep {
        /// Time since the start of the continuous below-threshold stretch.
        held_for: Duration,
        /// Number of steps applied by this event (more than 1 only when the caller
        /// missed due step times).
        steps: u32,
    },
    /// The source has been silent for `missing_after` periods; `action` now applies.
    /// The throttle itself does not change with this event (`from == to`).
    SourceMissing {
        /// Time since the last valid sample (or since start if there was none).
        silent_for: Duration,
        /// The configured action.
        action: OnMissing,
    },
    /// A step applied because the source is missing and the action is
    /// [`OnMissing::Release`].
    ReleaseStep {
        /// Time since the release started (the missing declaration, or the start of
        /// the below-threshold stretch that was already running).
        held_for: Duration,
        /// Number of steps applied by this event.
        steps: u32,
    },
    /// A valid sample arrived after the source had been declared missing
    /// (`from == to`; a threshold change, if any, follows as its own event).
    SourceRecovered {
        /// How long the source was declared missing.
        missing_for: Duration,
    },
}

/// A throttle change or source event, for logs, metrics and the fast-path writer.
///
/// `to` is the throttle in force after the event; write
/// [`effective_rate`]`(static_rate, to)` into the fast path when `from != to`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleEvent {
    /// The `now` of the call that produced the event.
    pub at: Duration,
    /// Throttle percent before.
    pub from: u8,
    /// Throttle percent after.
    pub to: u8,
    /// Why.
    pub reason: Reason,
}

impl ThrottleEvent {
    /// Whether the throttle value changed (source events do not change it).
    pub fn changed(&self) -> bool {
        self.from != self.to
    }
}

/// Formats a duration as seconds with millisecond precision, e.g. `30s` or `1.250s`.
struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.subsec_millis() == 0 {
            write!(f, "{}s", self.0.as_secs())
        } else {
            write!(f, "{:.3}s", self.0.as_secs_f64())
        }
    }
}

/// Formats a step count with its noun, e.g. `1 step` or `3 steps`.
struct Steps(u32);

impl fmt::Display for Steps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.0 == 1 { "" } else { "s" };
        write!(f, "{} step{s}", self.0)
    }
}

impl fmt::Display for ThrottleEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ", Secs(self.at))?;
        let (from, to) = (self.from, self.to);
        match self.reason {
            Reason::Threshold { cpu, row_cpu } => write!(
                f,
                "DB CPU {cpu:.1}% >= threshold {row_cpu}%: throttle {from}% -> {to}%"
            ),
            Reason::ReversalStep { held_for, steps } => write!(
                f,
                "DB CPU below lowest threshold for {}: reversal {from}% -> {to}% ({})",
                Secs(held_for),
                Steps(steps)
            ),
            Reason::SourceMissing { silent_for, action } => write!(
                f,
                "no valid DB CPU sample for {}: on_missing = {action}, throttle {to}%",
                Secs(silent_for)
            ),
            Reason::ReleaseStep { held_for, steps } => write!(
                f,
                "DB CPU source missing, releasing for {}: throttle {from}% -> {to}% ({})",
                Secs(held_for),
                Steps(steps)
            ),
            Reason::SourceRecovered { missing_for } => write!(
                f,
                "DB CPU source recovered after {} missing, throttle {to}%",
                Secs(missing_for)
            ),
        }
    }
}

/// The rate written into the fast path: `static_rate × (100 − throttle) / 100`.
/// A throttle above 100 is treated as 100 (rate 0).
pub fn effective_rate(static_rate: f64, throttle_pct: u8) -> f64 {
    static_rate * f64::from(100 - throttle_pct.min(100)) / 100.0
}

/// Reversal bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hold {
    /// No reversal running: no sample yet, the last sample was at/above the lowest
    /// threshold, or the source went missing with [`OnMissing::Hold`].
    Idle,
    /// CPU continuously below the lowest threshold since `below_since`; the current hold
    /// window started at `window_start` and a step is due at `window_start + hold`.
    Running {
        below_since: Duration,
        window_start: Duration,
    },
}

/// The dynamic rate-limit controller for one profile (one DB).
///
/// Rules (docs/architecture.md §5):
///
/// * **Threshold rule.** A sample at or above the lowest threshold sets the throttle to the
///   `throttle_pct` of the highest row whose threshold is not above the sample
///   (a sample exactly at a threshold applies that row), immediately, up or down, and
///   stops any running reversal.
/// * **Reversal.** "Continuously below" starts at the *first* below-threshold sample
///   after an at/above sample (or the first sample ever). Each full hold time after that
///   instant lowers the throttle by the step (floor 0). After a step, the next hold window
///   starts at the instant the step became due (`start + k × hold`), so late calls do not
///   stretch the schedule. A step is applied by whichever call comes first at or after its
///   due time: [`Controller::sample`] with a below sample, or [`Controller::tick`].
///   If several hold windows elapsed since the last call, every due step is applied at
///   once and reported as one event with `steps > 1`.
/// * **Interruption.** One at/above sample, even one sample before the hold completes,
///   applies the threshold rule and cancels the hold; the next below sample starts a new
///   full hold window.
#[derive(Debug, Clone)]
pub struct Controller {
    profile: DbCpuProfile,
    throttle: u8,
    hold: Hold,
    /// The source is missing with [`OnMissing::Release`]: steps are reported as
    /// [`Reason::ReleaseStep`]. Cleared by the next valid sample.
    releasing: bool,
    last_cpu: Option<f64>,
}

impl Controller {
    /// A controller starting at throttle 0 with no reversal running.
    pub fn new(profile: DbCpuProfile) -> Self {
        Self {
            profile,
            throttle: 0,
            hold: Hold::Idle,
            releasing: false,
            last_cpu: None,
        }
    }

    /// A controller taking over at `throttle_pct` (a profile changed by a live reload):
    /// no reversal running — the next sample at or above the lowest threshold applies the
    /// new profile's row, the next one below starts a full hold window from there.
    pub fn resume(profile: DbCpuProfile, throttle_pct: u8) -> Self {
        Self {
            throttle: throttle_pct.min(100),
            ..Self::new(profile)
        }
    }

    /// The profile in use.
    pub fn profile(&self) -> &DbCpuProfile {
        &self.profile
    }

    /// The throttle currently in force, percent of the static rate.
    pub fn throttle_pct(&self) -> u8 {
        self.throttle
    }

    /// The last CPU value used (after validation/clamping), if any.
    pub fn last_cpu(&self) -> Option<f64> {
        self.last_cpu
    }

    /// Whether a reversal (or release) is counting down.
    pub fn reversal_running(&self) -> bool {
        matches!(self.hold, Hold::Running { .. }) && self.throttle > 0
    }

    /// When the next reversal/release step is due, if one is pending: call
    /// [`Controller::tick`] at (or after) this instant. `None` when the throttle is 0 or
    /// no reversal is running.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match self.hold {
            Hold::Running { window_start, .. } if self.throttle > 0 => {
                Some(window_start.saturating_add(self.profile.reversal_hold))
            }
            _ => None,
        }
    }

    /// Feeds one CPU sample taken at `now`.
    ///
    /// Invalid samples (NaN, infinite, negative) are rejected with an error and change
    /// nothing (not even due steps: call [`Controller::tick`]); values above 100 are
    /// clamped to 100 (see [`validate_sample`]). Returns the throttle change, if any.
    pub fn sample(
        &mut self,
        now: Duration,
        cpu_pct: f64,
    ) -> Result<Option<ThrottleEvent>, InvalidSample> {
        let cpu = validate_sample(cpu_pct)?;
        self.last_cpu = Some(cpu);
        self.releasing = false;
        if let Some(row) = self.profile.row_for(cpu) {
            // At or above the lowest threshold: threshold rule, hold cancelled.
            self.hold = Hold::Idle;
            return Ok(self.set(
                now,
                row.throttle_pct,
                Reason::Threshold {
                    cpu,
                    row_cpu: row.cpu_pct,
                },
            ));
        }
        // Below the lowest threshold (or empty profile): reversal.
        if self.hold == Hold::Idle {
            self.hold = Hold::Running {
                below_since: now,
                window_start: now,
            };
        }
        Ok(self.apply_due_steps(now))
    }

    /// Applies reversal/release steps that are due at `now` without a new sample.
    pub fn tick(&mut self, now: Duration) -> Option<ThrottleEvent> {
        self.apply_due_steps(now)
    }

    /// The source has been declared missing (by [`super::SampleLoop`]) at `now` after
    /// `silent_for` without a valid sample. [`OnMissing::Hold`] cancels any running
    /// reversal and keeps the throttle; [`OnMissing::Release`] keeps a running reversal
    /// going or starts one at `now`, reporting its steps as [`Reason::ReleaseStep`].
    /// The next valid sample ends either mode. Returns the (non-changing) source event.
    pub fn source_missing(
        &mut self,
        now: Duration,
        silent_for: Duration,
        action: OnMissing,
    ) -> ThrottleEvent {
        match action {
            OnMissing::Hold => {
                self.hold = Hold::Idle;
                self.releasing = false;
            }
            OnMissing::Release => {
                self.releasing = true;
                if self.hold == Hold::Idle {
                    self.hold = Hold::Running {
                        below_since: now,
                        window_start: now,
                    };
                }
            }
        }
        ThrottleEvent {
            at: now,
            from: self.throttle,
            to: self.throttle,
            reason: Reason::SourceMissing { silent_for, action },
        }
    }

    fn set(&mut self, now: Duration, to: u8, reason: Reason) -> Option<ThrottleEvent> {
        let from = self.throttle;
        self.throttle = to;
        (from != to).then_some(ThrottleEvent {
            at: now,
            from,
            to,
            reason,
        })
    }

    fn apply_due_steps(&mut self, now: Duration) -> Option<ThrottleEvent> {
        let Hold::Running {
            below_since,
            window_start,
        } = self.hold
        else {
            return None;
        };
        if self.throttle == 0 {
            return None;
        }
        let hold = self.profile.reversal_hold;
        let elapsed = now.saturating_sub(window_start);
        let due = elapsed.as_nanos() / hold.as_nanos();
        if due == 0 {
            return None;
        }
        let step = u32::from(self.profile.reversal_step_pct);
        // Steps needed to reach 0 (step >= 1 by construction), at most 100.
        let needed = u32::from(self.throttle).div_ceil(step);
        let steps = u32::try_from(due).unwrap_or(u32::MAX).min(needed);
        let to = u32::from(self.throttle).saturating_sub(steps * step);
        // The next window starts where the last applied step became due.
        self.hold = Hold::Running {
            below_since,
            window_start: window_start.saturating_add(hold.saturating_mul(steps)),
        };
        let held_for = now.saturating_sub(below_since);
        let reason = if self.releasing {
            Reason::ReleaseStep { held_for, steps }
        } else {
            Reason::ReversalStep { held_for, steps }
        };
        // `to <= throttle <= 100`.
        self.set(now, u8::try_from(to).unwrap_or(0), reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn row(cpu_pct: f64, throttle_pct: u8) -> ThresholdRow {
        ThresholdRow {
            cpu_pct,
            throttle_pct,
        }
    }

    fn threshold(cpu: f64, row_cpu: f64) -> Reason {
        Reason::Threshold { cpu, row_cpu }
    }

    fn reversal(held_s: u64, steps: u32) -> Reason {
        Reason::ReversalStep {
            held_for: s(held_s),
            steps,
        }
    }

    fn seed_profile() -> DbCpuProfile {
        DbCpuProfile::new(
            vec![row(50.0, 20), row(55.0, 30), row(60.0, 40), row(65.0, 50)],
            s(30),
            20,
        )
        .unwrap()
    }

    #[test]
    fn sample_exactly_at_threshold_applies_that_row() {
        let mut c = Controller::new(seed_profile());
        let ev = c.sample(s(0), 55.0).unwrap().unwrap();
        assert_eq!((ev.from, ev.to, ev.reason), (0, 30, threshold(55.0, 55.0)));
        // Just below 55 falls back to the 50 row.
        c.sample(s(1), 54.999).unwrap();
        assert_eq!(c.throttle_pct(), 20);
        // Exactly the lowest threshold is "at or above": no reversal.
        c.sample(s(2), 50.0).unwrap();
        assert_eq!(c.throttle_pct(), 20);
        assert_eq!(c.poll_timeout(), None);
    }

    /// A live reload that changes the profile takes over at the throttle in force: no
    /// step down to 0 and back; the new profile acts from its first sample.
    #[test]
    fn a_resumed_controller_keeps_the_throttle_until_its_profile_acts() {
        let mut c = Controller::resume(seed_profile(), 40);
        assert_eq!((c.throttle_pct(), c.poll_timeout()), (40, None));
        // Below the lowest threshold: a full hold window from this sample, throttle kept.
        for t in 0..30 {
            assert_eq!(c.sample(s(t), 10.0).unwrap(), None, "t={t}");
            assert_eq!(c.throttle_pct(), 40);
        }
        let ev = c.tick(s(30)).unwrap();
        assert_eq!(
            (ev.from, ev.to),
            (40, 40 - seed_profile().reversal_step_pct())
        );
        // At or above a threshold: that row of the new profile at once.
        let mut c = Controller::resume(seed_profile(), 40);
        let ev = c.sample(s(0), 70.0).unwrap().unwrap();
        assert_eq!((ev.from, ev.to), (40, 50));
        assert_eq!(Controller::resume(seed_profile(), 250).throttle_pct(), 100);
    }

    #[test]
    fn threshold_rule_moves_down_immediately() {
        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 70.0).unwrap();
        assert_eq!(c.throttle_pct(), 50);
        let ev = c.sample(s(1), 51.0).unwrap().unwrap();
        assert_eq!((ev.from, ev.to, ev.at), (50, 20, s(1)));
    }

    #[test]
    fn hold_interrupted_one_sample_before_completion_restarts() {
        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 62.0).unwrap();
        for t in 1..30 {
            assert_eq!(c.sample(s(t), 40.0).unwrap(), None, "t={t}");
        }
        // Hold started at t=1; a step would be due at t=31. Interrupt at t=30.
        assert_eq!(c.poll_timeout(), Some(s(31)));
        assert_eq!(c.sample(s(30), 61.0).unwrap(), None);
        assert_eq!(c.throttle_pct(), 40);
        assert_eq!(c.poll_timeout(), None);
        // Below again from t=31: the hold is a full 30 s again, due at t=61.
        for t in 31..61 {
            assert_eq!(c.sample(s(t), 40.0).unwrap(), None, "t={t}");
        }
        assert_eq!(c.tick(s(60) + Duration::from_millis(999)), None);
        let ev = c.sample(s(61), 40.0).unwrap().unwrap();
        assert_eq!((ev.from, ev.to, ev.reason), (40, 20, reversal(30, 1)));
    }

    #[test]
    fn step_larger_than_throttle_floors_at_zero() {
        let p = DbCpuProfile::new(vec![row(50.0, 10)], s(30), 25).unwrap();
        let mut c = Controller::new(p);
        c.sample(s(0), 50.0).unwrap();
        assert_eq!(c.throttle_pct(), 10);
        c.sample(s(1), 10.0).unwrap();
        let ev = c.tick(s(31)).unwrap();
        assert_eq!((ev.from, ev.to), (10, 0));
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.tick(s(1000)), None);
    }

    #[test]
    fn empty_profile_never_throttles() {
        let p = DbCpuProfile::new(vec![], s(30), 20).unwrap();
        let mut c = Controller::new(p);
        for (t, cpu) in [(0, 0.0), (1, 50.0), (2, 99.0), (3, 100.0), (4, 250.0)] {
            assert_eq!(c.sample(s(t), cpu).unwrap(), None);
            assert_eq!(c.throttle_pct(), 0);
        }
        assert_eq!(c.tick(s(1000)), None);
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn constructor_rejects_rows_out_of_order_naming_them() {
        let err = DbCpuProfile::new(vec![row(50.0, 20), row(60.0, 40), row(55.0, 30)], s(30), 20)
            .unwrap_err();
        assert_eq!(
            err,
            ProfileError::NotIncreasing {
                prev_index: 1,
                prev_cpu_pct: 60.0,
                index: 2,
                cpu_pct: 55.0
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("rows[1]") && msg.contains("rows[2]"), "{msg}");
        // Equal thresholds are not strictly increasing either.
        assert!(matches!(
            DbCpuProfile::new(vec![row(50.0, 20), row(50.0, 30)], s(30), 20),
            Err(ProfileError::NotIncreasing {
                prev_index: 0,
                index: 1,
                ..
            })
        ));
    }

    #[test]
    fn constructor_rejects_bad_percentages_and_zero_hold_or_step() {
        assert_eq!(
            DbCpuProfile::new(vec![row(50.0, 20), row(101.0, 30)], s(30), 20),
            Err(ProfileError::CpuOutOfRange {
                index: 1,
                cpu_pct: 101.0
            })
        );
        assert!(matches!(
            DbCpuProfile::new(vec![row(f64::NAN, 20)], s(30), 20),
            Err(ProfileError::CpuOutOfRange { index: 0, .. })
        ));
        assert_eq!(
            DbCpuProfile::new(vec![row(50.0, 101)], s(30), 20),
            Err(ProfileError::ThrottleOutOfRange {
                index: 0,
                throttle_pct: 101
            })
        );
        assert_eq!(
            DbCpuProfile::new(vec![], Duration::ZERO, 20),
            Err(ProfileError::ZeroHold)
        );
        assert_eq!(
            DbCpuProfile::new(vec![], s(1), 0),
            Err(ProfileError::StepOutOfRange { step_pct: 0 })
        );
        assert_eq!(
            DbCpuProfile::new(vec![], s(1), 101),
            Err(ProfileError::StepOutOfRange { step_pct: 101 })
        );
        // Boundaries are valid.
        assert!(DbCpuProfile::new(vec![row(0.0, 0), row(100.0, 100)], s(1), 100).is_ok());
    }

    #[test]
    fn invalid_samples_are_rejected_and_change_nothing() {
        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 62.0).unwrap();
        c.sample(s(1), 10.0).unwrap();
        let due = c.poll_timeout();
        assert!(matches!(
            c.sample(s(2), f64::NAN),
            Err(InvalidSample::NotFinite { .. })
        ));
        assert!(matches!(
            c.sample(s(3), f64::INFINITY),
            Err(InvalidSample::NotFinite { .. })
        ));
        assert_eq!(
            c.sample(s(4), -1.0),
            Err(InvalidSample::Negative { value: -1.0 })
        );
        assert_eq!(c.throttle_pct(), 40);
        assert_eq!(
            c.poll_timeout(),
            due,
            "an invalid sample must not restart the hold"
        );
        assert_eq!(c.last_cpu(), Some(10.0));
    }

    #[test]
    fn samples_above_100_are_clamped_to_100() {
        let p = DbCpuProfile::new(vec![row(50.0, 20), row(100.0, 90)], s(30), 20).unwrap();
        let mut c = Controller::new(p);
        let ev = c.sample(s(0), 340.0).unwrap().unwrap();
        assert_eq!((ev.to, ev.reason), (90, threshold(100.0, 100.0)));
    }

    #[test]
    fn missed_ticks_apply_every_due_step_at_once() {
        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 67.0).unwrap(); // 50 %
        c.sample(s(1), 10.0).unwrap(); // hold from t=1
        // No call for 65 s: two full windows (due at 31 and 61).
        let ev = c.tick(s(66)).unwrap();
        assert_eq!((ev.from, ev.to, ev.reason), (50, 10, reversal(65, 2)));
        // The schedule did not drift: the next step is due at 91, not 96.
        assert_eq!(c.poll_timeout(), Some(s(91)));
        let ev = c.tick(s(91)).unwrap();
        assert_eq!((ev.from, ev.to), (10, 0));
        // Catching up far more windows than needed stops at 0.
        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 67.0).unwrap();
        c.sample(s(1), 10.0).unwrap();
        let ev = c.tick(s(100_000)).unwrap();
        assert_eq!((ev.to, ev.reason), (0, reversal(99_999, 3)));
    }

    #[test]
    fn tick_without_running_reversal_does_nothing() {
        let mut c = Controller::new(seed_profile());
        assert_eq!(c.tick(s(100)), None);
        c.sample(s(100), 60.0).unwrap();
        assert_eq!(c.tick(s(1000)), None, "CPU is above: the throttle stays");
        assert_eq!(c.throttle_pct(), 40);
    }

    #[test]
    fn source_missing_hold_freezes_and_release_steps_down() {
        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 62.0).unwrap();
        c.sample(s(1), 10.0).unwrap();
        let ev = c.source_missing(s(5), s(4), OnMissing::Hold);
        assert_eq!((ev.from, ev.to), (40, 40));
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.tick(s(10_000)), None);
        assert_eq!(c.throttle_pct(), 40);

        let mut c = Controller::new(seed_profile());
        c.sample(s(0), 62.0).unwrap();
        c.source_missing(s(4), s(4), OnMissing::Release);
        assert_eq!(c.poll_timeout(), Some(s(34)));
        let ev = c.tick(s(34)).unwrap();
        let release = Reason::ReleaseStep {
            held_for: s(30),
            steps: 1,
        };
        assert_eq!((ev.from, ev.to, ev.reason), (40, 20, release));
        // A valid sample ends the release: a below sample keeps the running window
        // (still continuously below), and steps are reversals again.
        c.sample(s(40), 10.0).unwrap();
        let ev = c.tick(s(64)).unwrap();
        assert!(matches!(ev.reason, Reason::ReversalStep { .. }));
        assert_eq!(ev.to, 0);
    }

    #[test]
    fn effective_rate_scales_static_rate() {
        assert_eq!(effective_rate(1000.0, 0), 1000.0);
        assert_eq!(effective_rate(1000.0, 40), 600.0);
        assert_eq!(effective_rate(1000.0, 100), 0.0);
        assert_eq!(effective_rate(1000.0, 250), 0.0);
        assert_eq!(effective_rate(333.0, 10), 299.7);
    }

    #[test]
    fn events_display_for_logs() {
        let mut c = Controller::new(seed_profile());
        let ev = c.sample(s(12), 62.0).unwrap().unwrap();
        assert_eq!(
            ev.to_string(),
            "[12s] DB CPU 62.0% >= threshold 60%: throttle 0% -> 40%"
        );
        c.sample(s(13), 49.0).unwrap();
        let ev = c.tick(s(43)).unwrap();
        assert_eq!(
            ev.to_string(),
            "[43s] DB CPU below lowest threshold for 30s: reversal 40% -> 20% (1 step)"
        );
        let ev = c.source_missing(Duration::from_millis(45_500), s(3), OnMissing::Hold);
        assert_eq!(
            ev.to_string(),
            "[45.500s] no valid DB CPU sample for 3s: on_missing = hold, throttle 20%"
        );
    }
}
