//! The sampling loop around a [`Controller`]: missing-source detection, optional EWMA
//! smoothing, event queue. Pure (time is passed in), in the quinn-proto style:
//! inputs [`SampleLoop::sample`] / [`SampleLoop::tick`], outputs
//! [`SampleLoop::poll_event`] / [`SampleLoop::poll_timeout`].

use std::collections::VecDeque;
use std::time::Duration;

use super::controller::{
    Controller, DbCpuProfile, InvalidSample, OnMissing, Reason, ThrottleEvent, validate_sample,
};
use super::ewma::{Ewma, InvalidAlpha};

/// Settings of the sampling loop (mapped from the DRL config by the agent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoopSettings {
    /// How often the agent samples the CPU source.
    pub period: Duration,
    /// The source is declared missing after this many periods without a valid sample
    /// (at `last_valid_sample + missing_after × period`). Must be ≥ 1; use ≥ 2 to
    /// tolerate one late or failed sample.
    pub missing_after: u32,
    /// What to do while the source is missing.
    pub on_missing: OnMissing,
    /// EWMA smoothing factor in `(0, 1]`; `None` uses raw samples.
    pub ewma_alpha: Option<f64>,
}

/// Invalid [`LoopSettings`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum LoopSettingsError {
    /// A zero sample period.
    #[error("sample period must be greater than zero")]
    ZeroPeriod,
    /// `missing_after` of 0 periods.
    #[error("missing_after must be at least 1 sample period")]
    ZeroMissingAfter,
    /// Bad EWMA factor.
    #[error(transparent)]
    Alpha(#[from] InvalidAlpha),
}

/// A [`Controller`] plus missing-sample handling and smoothing.
///
/// * Every valid sample goes through the EWMA (if configured), then the controller.
/// * If no valid sample arrived for `missing_after × period` (counting from the last
///   valid sample, or from [`SampleLoop::new`] if none ever arrived), [`SampleLoop::tick`]
///   declares the source missing: one [`Reason::SourceMissing`] event, the missing
///   counter increments, the EWMA history is dropped, and `on_missing` applies
///   (see [`OnMissing`] and [`Controller::source_missing`]).
/// * The next valid sample ends the missing state with a [`Reason::SourceRecovered`]
///   event, then is applied normally (a reversal after a `hold` starts a fresh full
///   hold window at that sample).
/// * Invalid samples (NaN, infinite, negative) count as no sample: they are counted in
///   [`SampleLoop::rejected_samples`] and do not reset the missing timer.
#[derive(Debug, Clone)]
pub struct SampleLoop {
    ctl: Controller,
    settings: LoopSettings,
    ewma: Option<Ewma>,
    /// Last valid sample, or the start.
    last_valid_at: Duration,
    missing_since: Option<Duration>,
    missing_events: u64,
    rejected_samples: u64,
    events: VecDeque<ThrottleEvent>,
}

impl SampleLoop {
    /// A loop starting at `now` with throttle 0.
    pub fn new(
        profile: DbCpuProfile,
        settings: LoopSettings,
        now: Duration,
    ) -> Result<Self, LoopSettingsError> {
        if settings.period.is_zero() {
            return Err(LoopSettingsError::ZeroPeriod);
        }
        if settings.missing_after == 0 {
            return Err(LoopSettingsError::ZeroMissingAfter);
        }
        let ewma = settings.ewma_alpha.map(Ewma::new).transpose()?;
        Ok(Self {
            ctl: Controller::new(profile),
            settings,
            ewma,
            last_valid_at: now,
            missing_since: None,
            missing_events: 0,
            rejected_samples: 0,
            events: VecDeque::new(),
        })
    }

    /// A loop taking over at `throttle_pct` ([`Controller::resume`]): a live reload
    /// that changes the profile keeps the throttle in force until the new profile acts.
    pub fn resume(
        profile: DbCpuProfile,
        settings: LoopSettings,
        now: Duration,
        throttle_pct: u8,
    ) -> Result<Self, LoopSettingsError> {
        let mut lp = Self::new(profile.clone(), settings, now)?;
        lp.ctl = Controller::resume(profile, throttle_pct);
        Ok(lp)
    }

    /// Feeds a sample taken at `now`. Due reversal steps and the missing check run too.
    /// An invalid sample is counted, treated as no sample (as if only
    /// [`SampleLoop::tick`] had been called) and returned as an error for logging.
    pub fn sample(&mut self, now: Duration, cpu_pct: f64) -> Result<(), InvalidSample> {
        let cpu = match validate_sample(cpu_pct) {
            Ok(cpu) => cpu,
            Err(e) => {
                self.rejected_samples += 1;
                self.tick(now);
                return Err(e);
            }
        };
        let cpu = match &mut self.ewma {
            Some(e) => e.update(cpu),
            None => cpu,
        };
        self.last_valid_at = now;
        if let Some(since) = self.missing_since.take() {
            let t = self.ctl.throttle_pct();
            self.events.push_back(ThrottleEvent {
                at: now,
                from: t,
                to: t,
                reason: Reason::SourceRecovered {
                    missing_for: now.saturating_sub(since),
                },
            });
        }
        // Already validated and clamped: cannot fail.
        if let Ok(Some(ev)) = self.ctl.sample(now, cpu) {
            self.events.push_back(ev);
        }
        Ok(())
    }

    /// Advances time without a valid sample: applies due steps and declares the source
    /// missing when its deadline has passed.
    pub fn tick(&mut self, now: Duration) {
        if let Some(ev) = self.ctl.tick(now) {
            self.events.push_back(ev);
        }
        if self.missing_since.is_none() && now >= self.missing_deadline() {
            self.missing_since = Some(now);
            self.missing_events += 1;
            if let Some(e) = &mut self.ewma {
                e.reset();
            }
            let silent_for = now.saturating_sub(self.last_valid_at);
            self.events.push_back(self.ctl.source_missing(
                now,
                silent_for,
                self.settings.on_missing,
            ));
        }
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<ThrottleEvent> {
        self.events.pop_front()
    }

    /// The earliest instant at which [`SampleLoop::tick`] has something to do (a
    /// reversal/release step or the missing deadline), if any. The agent may simply
    /// tick on every sample period instead.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let missing = self
            .missing_since
            .is_none()
            .then(|| self.missing_deadline());
        match (self.ctl.poll_timeout(), missing) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The throttle currently in force.
    pub fn throttle_pct(&self) -> u8 {
        self.ctl.throttle_pct()
    }

    /// Whether the source is currently declared missing.
    pub fn source_missing(&self) -> bool {
        self.missing_since.is_some()
    }

    /// How many times the source has been declared missing.
    pub fn missing_events(&self) -> u64 {
        self.missing_events
    }

    /// How many invalid samples were rejected.
    pub fn rejected_samples(&self) -> u64 {
        self.rejected_samples
    }

    /// The current smoothed CPU (`None` without EWMA, or after a missing period).
    pub fn smoothed_cpu(&self) -> Option<f64> {
        self.ewma.as_ref().and_then(Ewma::value)
    }

    /// The wrapped controller.
    pub fn controller(&self) -> &Controller {
        &self.ctl
    }

    /// The settings in use.
    pub fn settings(&self) -> &LoopSettings {
        &self.settings
    }

    fn missing_deadline(&self) -> Duration {
        self.last_valid_at.saturating_add(
            self.settings
                .period
                .saturating_mul(self.settings.missing_after),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::controller::ThresholdRow;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn seed_profile() -> DbCpuProfile {
        let rows =
            [(50.0, 20), (55.0, 30), (60.0, 40), (65.0, 50)].map(|(cpu_pct, throttle_pct)| {
                ThresholdRow {
                    cpu_pct,
                    throttle_pct,
                }
            });
        DbCpuProfile::new(rows.to_vec(), s(30), 20).unwrap()
    }

    fn settings(on_missing: OnMissing) -> LoopSettings {
        LoopSettings {
            period: s(1),
            missing_after: 3,
            on_missing,
            ewma_alpha: None,
        }
    }

    fn drain(l: &mut SampleLoop) -> Vec<ThrottleEvent> {
        std::iter::from_fn(|| l.poll_event()).collect()
    }

    #[test]
    fn missing_declared_after_n_periods_hold_keeps_throttle() {
        let mut l = SampleLoop::new(seed_profile(), settings(OnMissing::Hold), s(0)).unwrap();
        l.sample(s(0), 62.0).unwrap();
        l.sample(s(1), 45.0).unwrap(); // reversal starts at t=1
        assert_eq!(drain(&mut l).len(), 1);
        assert_eq!(
            l.poll_timeout(),
            Some(s(4)),
            "missing deadline = 1 + 3 × 1 s"
        );
        l.tick(s(2));
        l.tick(s(3));
        assert!(drain(&mut l).is_empty());
        assert!(!l.source_missing());
        l.tick(s(4));
        let evs = drain(&mut l);
        assert_eq!(evs.len(), 1);
        assert_eq!((evs[0].from, evs[0].to), (40, 40));
        assert_eq!(
            evs[0].reason,
            Reason::SourceMissing {
                silent_for: s(3),
                action: OnMissing::Hold
            }
        );
        assert!(l.source_missing());
        assert_eq!(l.missing_events(), 1);
        // Hold: no reversal even long after the step would have been due (t=31).
        for t in 5..200 {
            l.tick(s(t));
        }
        assert!(drain(&mut l).is_empty(), "declared once, no steps");
        assert_eq!(l.throttle_pct(), 40);
        assert_eq!(l.poll_timeout(), None);
        // Recovery with a below sample: a fresh full hold window from t=200.
        l.sample(s(200), 45.0).unwrap();
        let evs = drain(&mut l);
        assert_eq!(evs.len(), 1);
        assert_eq!(
            evs[0].reason,
            Reason::SourceRecovered {
                missing_for: s(196)
            }
        );
        assert_eq!(
            l.poll_timeout(),
            Some(s(203)),
            "the missing deadline comes first again"
        );
        for t in 201..230 {
            l.sample(s(t), 45.0).unwrap();
        }
        assert_eq!(l.throttle_pct(), 40);
        l.sample(s(230), 45.0).unwrap();
        assert_eq!(l.throttle_pct(), 20);
        assert_eq!(l.missing_events(), 1);
    }

    #[test]
    fn missing_with_release_steps_down_once_per_hold() {
        let mut l = SampleLoop::new(seed_profile(), settings(OnMissing::Release), s(0)).unwrap();
        l.sample(s(0), 67.0).unwrap(); // 50 %, above: no reversal running
        drain(&mut l);
        for t in 1..=3 {
            l.tick(s(t));
        }
        let evs = drain(&mut l);
        assert_eq!(
            evs.iter().map(|e| e.reason).collect::<Vec<_>>(),
            [Reason::SourceMissing {
                silent_for: s(3),
                action: OnMissing::Release
            }]
        );
        // Release starts at the declaration (t=3): steps at 33, 63, 93.
        let mut changes = Vec::new();
        for t in 4..=120 {
            l.tick(s(t));
            changes.extend(drain(&mut l).into_iter().map(|e| (e.at, e.to, e.reason)));
        }
        assert_eq!(
            changes,
            [
                (
                    s(33),
                    30,
                    Reason::ReleaseStep {
                        held_for: s(30),
                        steps: 1
                    }
                ),
                (
                    s(63),
                    10,
                    Reason::ReleaseStep {
                        held_for: s(60),
                        steps: 1
                    }
                ),
                (
                    s(93),
                    0,
                    Reason::ReleaseStep {
                        held_for: s(90),
                        steps: 1
                    }
                ),
            ]
        );
        // A sample at/above the threshold re-applies the threshold rule at once.
        l.sample(s(121), 60.0).unwrap();
        let evs = drain(&mut l);
        assert_eq!(evs.len(), 2);
        assert!(matches!(evs[0].reason, Reason::SourceRecovered { .. }));
        assert_eq!((evs[1].from, evs[1].to), (0, 40));
    }

    #[test]
    fn source_that_never_answers_is_declared_missing_from_start() {
        let mut l = SampleLoop::new(seed_profile(), settings(OnMissing::Hold), s(100)).unwrap();
        l.tick(s(102));
        assert!(drain(&mut l).is_empty());
        l.tick(s(103));
        let evs = drain(&mut l);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].to, 0);
        assert_eq!(l.missing_events(), 1);
    }

    #[test]
    fn invalid_samples_count_as_missing() {
        let mut l = SampleLoop::new(seed_profile(), settings(OnMissing::Hold), s(0)).unwrap();
        l.sample(s(0), 62.0).unwrap();
        assert!(l.sample(s(1), f64::NAN).is_err());
        assert!(l.sample(s(2), -3.0).is_err());
        assert!(l.sample(s(3), f64::NAN).is_err());
        assert_eq!(l.rejected_samples(), 3);
        assert!(l.source_missing());
        assert_eq!(l.missing_events(), 1);
    }

    #[test]
    fn a_second_outage_is_counted_again() {
        let mut l = SampleLoop::new(seed_profile(), settings(OnMissing::Hold), s(0)).unwrap();
        l.tick(s(3));
        l.sample(s(4), 10.0).unwrap();
        l.tick(s(7));
        assert_eq!(l.missing_events(), 2);
        let missing = drain(&mut l)
            .iter()
            .filter(|e| matches!(e.reason, Reason::SourceMissing { .. }))
            .count();
        assert_eq!(missing, 2);
    }

    #[test]
    fn ewma_smooths_samples_and_resets_after_outage() {
        let cfg = LoopSettings {
            ewma_alpha: Some(0.5),
            ..settings(OnMissing::Hold)
        };
        let mut l = SampleLoop::new(seed_profile(), cfg, s(0)).unwrap();
        l.sample(s(0), 40.0).unwrap();
        // A single 80 % spike is smoothed to 60 %: the 60 row (40 %), not the 65 row.
        l.sample(s(1), 80.0).unwrap();
        assert_eq!(l.smoothed_cpu(), Some(60.0));
        assert_eq!(l.throttle_pct(), 40);
        l.sample(s(2), 30.0).unwrap(); // 45: below
        assert_eq!(l.throttle_pct(), 40);
        l.tick(s(5));
        assert!(l.source_missing());
        assert_eq!(l.smoothed_cpu(), None);
        l.sample(s(6), 70.0).unwrap();
        assert_eq!(
            l.smoothed_cpu(),
            Some(70.0),
            "stale history is not mixed in"
        );
        assert_eq!(l.throttle_pct(), 50);
    }

    #[test]
    fn settings_are_validated() {
        let p = seed_profile;
        let base = settings(OnMissing::Hold);
        assert_eq!(
            SampleLoop::new(
                p(),
                LoopSettings {
                    period: Duration::ZERO,
                    ..base
                },
                s(0)
            )
            .err(),
            Some(LoopSettingsError::ZeroPeriod)
        );
        assert_eq!(
            SampleLoop::new(
                p(),
                LoopSettings {
                    missing_after: 0,
                    ..base
                },
                s(0)
            )
            .err(),
            Some(LoopSettingsError::ZeroMissingAfter)
        );
        assert_eq!(
            SampleLoop::new(
                p(),
                LoopSettings {
                    ewma_alpha: Some(0.0),
                    ..base
                },
                s(0)
            )
            .err(),
            Some(LoopSettingsError::Alpha(InvalidAlpha { alpha: 0.0 }))
        );
    }
}
