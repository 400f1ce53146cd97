//! The overload controller, sans-IO: from how late the agent is to the shed plan and
//! the level (see the module docs of [`crate::overload`]).
//!
//! # Driving table
//!
//! - [`Controller::observe`], for each message the core takes: its age (since its
//!   bytes were read); [`Controller::observe_queued`], what the kernel holds for the
//!   readers, as the time they take to read it.
//! - [`Controller::tick`], every [`INTERVAL`]: with the requests the core routed so far
//!   and the requests judged so far per priority; returns the plan to apply (when it
//!   changed), the level, the delay and the admitted rate.
//!
//! Time is an argument (`Duration` since an arbitrary start).

use std::time::Duration;

use super::{Counts, PRIORITIES, ShedPlan};

/// How often the controller looks.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// The first cut: the admitted rate becomes this share of the most the agent got done
/// per interval over the last [`RECENT`] intervals.
const CUT: f64 = 0.9;
/// Above the target delay (and not draining) the admitted rate is cut by `GAIN` ×
/// (delay − target) / target, at least by [`MIN_CUT`], at most by half.
const GAIN: f64 = 0.05;
const MIN_CUT: f64 = 0.05;
/// At or below the target it grows by this share of the most the agent routed while
/// shedding, per interval (additive increase: 10 s from nothing back to that).
const STEP: f64 = 0.01;
/// Above the target, never admit more than this times what the agent got done in the
/// interval (an admitted rate it cannot reach is no limit).
const HEADROOM: f64 = 1.2;
/// A delay at least this share of the previous interval's is not draining: cut again.
const DRAINING: f64 = 0.9;
/// Never admit less than this many requests per second.
const MIN_ADMIT: f64 = 10.0;
/// While only the kernel's queue before the readers is late (the core takes young
/// messages), never cut below this share of the most the agent routed while shedding:
/// the readers are then behind on the requests they shed, which admitting fewer
/// cannot make faster.
const READER_FLOOR: f64 = 0.5;
/// Shares below this are not shed (and do not count for the level).
const MIN_SHARE: f64 = 0.001;
/// The first cut starts from the most the agent routed per second over this many
/// intervals (one late interval — a stall — is not its capacity).
const RECENT: usize = 10;

/// The controller's settings (`[overload]`, docs/config.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The delay the agent holds itself to: the age of the youngest message the core
    /// takes in an interval (module docs).
    pub target: Duration,
    /// Shed requests answered per second, at most this times the admitted rate.
    pub answer_ratio: f64,
    /// A level falls only after this long at a lower one; shedding stops after this long
    /// with everything admitted.
    pub hold: Duration,
    /// Level 2 is reached only after the delay has stayed above the target this long,
    /// level 3 after twice this long: a stall sheds new sessions, never sessions in
    /// progress.
    pub escalate: Duration,
    /// Level 1 sheds only priorities at or below (numerically ≥) `levels[0]`, level 2
    /// down to `levels[1]`, level 3 anything higher.
    pub levels: [u8; 2],
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            target: Duration::from_millis(20),
            answer_ratio: 0.5,
            hold: Duration::from_secs(2),
            escalate: Duration::from_secs(1),
            levels: [10, 6],
        }
    }
}

/// What one [`Controller::tick`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tick {
    /// The plan to apply, when it changed.
    pub plan: Option<ShedPlan>,
    /// (old, new) when the level changed.
    pub level_change: Option<(u8, u8)>,
    /// The interval's delay: its youngest message's age (0 without messages), or the
    /// queue before the readers when that is longer.
    pub delay: Duration,
    /// The admitted rate while shedding, requests per second.
    pub admit: Option<f64>,
    /// Requests offered (judged) per second in the interval.
    pub offered: f64,
    /// Requests routed per second in the interval.
    pub routed: f64,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct Controller {
    s: Settings,
    admit: Option<f64>,
    /// The youngest message's age in the current interval.
    youngest: Option<Duration>,
    /// The longest queue before the readers seen in the current interval (as time).
    queued: Duration,
    prev_delay: Duration,
    last: Option<(Duration, u64, Counts)>,
    plan: ShedPlan,
    level: u8,
    /// Since when the computed level has been below `level`.
    lower_since: Option<Duration>,
    /// Since when everything offered has been admitted while shedding was on.
    calm_since: Option<Duration>,
    /// The most the agent routed per second while shedding (the increase's step).
    peak: f64,
    /// Routed per second in the last [`RECENT`] intervals.
    recent: std::collections::VecDeque<f64>,
    /// Since when the delay has been above the target (without a break).
    late_since: Option<Duration>,
}

impl Controller {
    pub fn new(s: Settings) -> Controller {
        Controller {
            s,
            admit: None,
            youngest: None,
            queued: Duration::ZERO,
            prev_delay: Duration::ZERO,
            last: None,
            plan: ShedPlan::NONE,
            level: 0,
            lower_since: None,
            calm_since: None,
            peak: 0.0,
            recent: std::collections::VecDeque::with_capacity(RECENT),
            late_since: None,
        }
    }

    /// New settings (a reload); the state is kept.
    pub fn set_settings(&mut self, s: Settings) {
        self.s = s;
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.s
    }

    /// The level now.
    pub fn level(&self) -> u8 {
        self.level
    }

    /// The plan in force.
    pub fn plan(&self) -> &ShedPlan {
        &self.plan
    }

    /// A message the core takes, `age` after its bytes were read.
    pub fn observe(&mut self, age: Duration) {
        self.youngest = Some(self.youngest.map_or(age, |y| y.min(age)));
    }

    /// How long the readers would take to read what the kernel holds for them now (the
    /// queue before the readers, which the ages do not see).
    pub fn observe_queued(&mut self, behind: Duration) {
        self.queued = self.queued.max(behind);
    }

    /// One interval: `routed` requests routed so far, `judged` requests judged so far
    /// per priority (both counters that only grow).
    pub fn tick(&mut self, now: Duration, routed: u64, judged: Counts) -> Tick {
        let core = self.youngest.take().unwrap_or(Duration::ZERO);
        let delay = core.max(std::mem::take(&mut self.queued));
        let Some((t0, r0, j0)) = self.last.replace((now, routed, judged)) else {
            return Tick {
                delay,
                ..Tick::default()
            };
        };
        let dt = now.saturating_sub(t0).as_secs_f64();
        if dt <= 0.0 {
            return Tick {
                delay,
                admit: self.admit,
                ..Tick::default()
            };
        }
        let offered: [f64; PRIORITIES] =
            std::array::from_fn(|p| judged[p].saturating_sub(j0[p]) as f64 / dt);
        let total: f64 = offered.iter().sum();
        let served = routed.saturating_sub(r0) as f64 / dt;
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(served);
        let target = self.s.target;
        let late_for = if delay > target {
            now.saturating_sub(*self.late_since.get_or_insert(now))
        } else {
            self.late_since = None;
            Duration::ZERO
        };
        // What the plan may not shed yet (levels not reached): cutting the admitted rate
        // below it would only wind the controller up.
        let allowed = self.allowed_level(late_for);
        let protected: f64 = (0..PRIORITIES)
            .filter(|&p| level_of_priority(p, self.s.levels) > allowed)
            .map(|p| offered[p])
            .sum();
        match self.admit {
            None if delay > target => {
                let recent = self.recent.iter().copied().fold(0.0, f64::max);
                self.admit = Some((recent * CUT).max(MIN_ADMIT).max(protected));
                self.peak = recent;
                self.calm_since = None;
            }
            None => {}
            Some(a) => {
                self.peak = self.peak.max(served);
                let next = if delay > target {
                    self.calm_since = None;
                    if delay < self.prev_delay.mul_f64(DRAINING) {
                        // The queue drains: wait for it rather than cut again.
                        a
                    } else {
                        let error =
                            (delay.as_secs_f64() - target.as_secs_f64()) / target.as_secs_f64();
                        let cut = (GAIN * error).clamp(MIN_CUT, 0.5);
                        let next = a.min(served * HEADROOM) * (1.0 - cut);
                        if core > target {
                            next
                        } else {
                            next.max(a.min(READER_FLOOR * self.peak))
                        }
                    }
                } else {
                    a + STEP * self.peak
                };
                let next = next.max(MIN_ADMIT).max(protected);
                if delay <= target && next >= total {
                    // Everything offered fits: after `hold` of that, stop shedding.
                    let since = *self.calm_since.get_or_insert(now);
                    self.admit = if now.saturating_sub(since) >= self.s.hold {
                        self.calm_since = None;
                        None
                    } else {
                        Some(next)
                    };
                } else {
                    if delay <= target {
                        self.calm_since = None;
                    }
                    self.admit = Some(next);
                }
            }
        }
        self.prev_delay = delay;
        let plan = match self.admit {
            None => ShedPlan::NONE,
            Some(a) => {
                let mut plan = plan_for(a, &offered, self.s.answer_ratio);
                for (p, share) in plan.shares.iter_mut().enumerate() {
                    if level_of_priority(p, self.s.levels) > allowed {
                        *share = 0.0;
                    }
                }
                if !plan.is_active() {
                    plan.answer_rate = 0.0;
                }
                plan
            }
        };
        let changed = plan != self.plan;
        self.plan = plan;
        let level_change = self.level_update(now);
        Tick {
            plan: changed.then(|| self.plan.clone()),
            level_change,
            delay,
            admit: self.admit,
            offered: total,
            routed: served,
        }
    }

    /// The highest level the plan may reach after `late_for` of sustained lateness
    /// ([`Settings::escalate`]).
    fn allowed_level(&self, late_for: Duration) -> u8 {
        if late_for >= self.s.escalate * 2 {
            3
        } else if late_for >= self.s.escalate {
            2
        } else {
            1
        }
    }

    /// The level of the plan in force (module docs), with hysteresis.
    fn level_update(&mut self, now: Duration) -> Option<(u8, u8)> {
        let computed = level_of(&self.plan, self.s.levels);
        let old = self.level;
        if computed > old {
            self.level = computed;
            self.lower_since = None;
        } else if computed < old {
            let since = *self.lower_since.get_or_insert(now);
            if now.saturating_sub(since) >= self.s.hold {
                self.level = computed;
                self.lower_since = None;
            }
        } else {
            self.lower_since = None;
        }
        (self.level != old).then_some((old, self.level))
    }
}

/// The shares that fit `admit` requests per second to `offered` (per priority), the
/// highest priority (0) served first.
pub fn plan_for(admit: f64, offered: &[f64; PRIORITIES], answer_ratio: f64) -> ShedPlan {
    let mut left = admit;
    let mut shares = [0.0; PRIORITIES];
    for p in 0..PRIORITIES {
        let o = offered[p];
        if o <= 0.0 {
            continue;
        }
        let give = o.min(left.max(0.0));
        left -= give;
        let s = 1.0 - give / o;
        shares[p] = if s < MIN_SHARE { 0.0 } else { s };
    }
    ShedPlan {
        shares,
        answer_rate: if shares.iter().any(|s| *s > 0.0) {
            (admit * answer_ratio).max(0.0)
        } else {
            0.0
        },
    }
}

/// The level a plan stands for: 0 nothing shed; else by the highest priority shed.
pub fn level_of(plan: &ShedPlan, levels: [u8; 2]) -> u8 {
    match plan.shares.iter().position(|s| *s >= MIN_SHARE) {
        None => 0,
        Some(top) => level_of_priority(top, levels),
    }
}

/// The level at which priority `p` is shed: 1 for `levels[0]` and lower priorities, 2
/// down to `levels[1]`, 3 above.
fn level_of_priority(p: usize, levels: [u8; 2]) -> u8 {
    if p >= usize::from(levels[0]) {
        1
    } else if p >= usize::from(levels[1]) {
        2
    } else {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The defaults, every level reachable at once (the control law alone).
    fn at_once() -> Settings {
        Settings {
            escalate: Duration::ZERO,
            ..Settings::default()
        }
    }

    /// Offered per priority per second: new sessions (12), updates (8), terminations (4).
    fn offered(i: f64, u: f64, t: f64) -> [f64; PRIORITIES] {
        let mut o = [0.0; PRIORITIES];
        o[12] = i;
        o[8] = u;
        o[4] = t;
        o
    }

    #[test]
    fn the_admitted_rate_goes_to_the_highest_priority_first() {
        // 300/s admitted of 100 + 100 + 100: nothing shed.
        let p = plan_for(300.0, &offered(100.0, 100.0, 100.0), 0.5);
        assert!(!p.is_active());
        // 150/s: every termination, half the updates, no new session.
        let p = plan_for(150.0, &offered(100.0, 100.0, 100.0), 0.5);
        assert_eq!((p.shares[4], p.shares[8], p.shares[12]), (0.0, 0.5, 1.0));
        assert_eq!(p.answer_rate, 75.0);
        assert_eq!(level_of(&p, [10, 6]), 2);
        // 250/s: only new sessions shed, half of them.
        let p = plan_for(250.0, &offered(100.0, 100.0, 100.0), 0.5);
        assert_eq!((p.shares[8], p.shares[12]), (0.0, 0.5));
        assert_eq!(level_of(&p, [10, 6]), 1);
        // 50/s: terminations shed too.
        let p = plan_for(50.0, &offered(100.0, 100.0, 100.0), 0.5);
        assert_eq!(p.shares[4], 0.5);
        assert_eq!(level_of(&p, [10, 6]), 3);
    }

    /// A steady overload: the agent gets 1,000 routed per second done while 3,000 are
    /// offered and its delay stays above the target; the admitted rate is cut to 900,
    /// held while the queue drains, cut in proportion to the excess while it does not;
    /// once the delay is low it grows back, never past what the agent gets done.
    #[test]
    fn a_standing_queue_cuts_the_admitted_rate_and_a_draining_one_holds_it() {
        let mut c = Controller::new(at_once());
        let mut judged = [0u64; PRIORITIES];
        let mut routed = 0u64;
        let mut now = Duration::ZERO;
        let mut step = |c: &mut Controller, age: Duration, got: u64| {
            now += INTERVAL;
            for (p, n) in [(4, 100), (8, 100), (12, 100)] {
                judged[p] += n;
            }
            routed += got;
            c.observe(age);
            c.tick(now, routed, judged)
        };
        let t = step(&mut c, 5 * MS, 100);
        assert!(t.admit.is_none());
        let t = step(&mut c, 80 * MS, 100);
        assert_eq!(t.admit, Some(900.0));
        // 900/s of 1,000 + 1,000 + 1,000: nine terminations in ten, nothing else.
        assert_eq!(t.level_change, Some((0, 3)));
        let p = t.plan.expect("a plan");
        assert!((p.shares[4] - 0.1).abs() < 1e-9, "{p:?}");
        assert_eq!((p.shares[8], p.shares[12]), (1.0, 1.0));
        // Draining (60 ms < 0.9 × 80 ms): held.
        assert_eq!(step(&mut c, 60 * MS, 90).admit, Some(900.0));
        // Not draining: cut in proportion to the excess, (58 − 20) / 20 × 5 % = 9.5 %.
        let a = step(&mut c, 58 * MS, 90).admit.unwrap();
        assert!((a - 814.5).abs() < 1e-9, "{a}");
        // At or below the target: grows by 1 % of the most routed per second (1,000).
        let a = step(&mut c, 2 * MS, 81).admit.unwrap();
        assert!((a - 824.5).abs() < 1e-9, "{a}");
        // Far above it while the agent got little done (10 routed: 100/s): at most 1.2 ×
        // that, less the cut ((200 − 20) / 20 × 5 % = 45 %).
        let a = step(&mut c, 200 * MS, 10).admit.unwrap();
        assert!((a - 66.0).abs() < 1e-9, "{a}");
    }

    /// Late only in the kernel's queue before the readers (the core takes young
    /// messages): the readers are behind on what they shed, and the admitted rate is
    /// cut no lower than half the most the agent routed.
    #[test]
    fn a_late_reader_alone_does_not_cut_the_admitted_rate_below_half_the_peak() {
        let mut c = Controller::new(at_once());
        let mut judged = [0u64; PRIORITIES];
        let (mut routed, mut now) = (0u64, Duration::ZERO);
        let mut step = |c: &mut Controller, age: Duration, behind: Duration, got: u64| {
            now += INTERVAL;
            judged[12] += 1_000;
            routed += got;
            c.observe(age);
            c.observe_queued(behind);
            c.tick(now, routed, judged)
        };
        step(&mut c, MS, Duration::ZERO, 100);
        assert_eq!(step(&mut c, MS, 300 * MS, 100).admit, Some(900.0));
        let mut a = 900.0;
        for k in 0..50 {
            // The agent routes what it admits; the readers stay 300 ms behind.
            let got = (a / 10.0) as u64;
            a = step(&mut c, MS, 300 * MS + k * MS, got).admit.unwrap();
        }
        assert!((a - 500.0).abs() < 1e-9, "{a}");
        // The core late as well: cut below it.
        let got = (a / 10.0) as u64;
        let a = step(&mut c, 100 * MS, 400 * MS, got).admit.unwrap();
        assert!(a < 450.0, "{a}");
    }

    /// When the load ends the admitted rate grows past what is offered, the plan sheds
    /// nothing, the level falls after `hold`, and shedding stops after `hold` more.
    #[test]
    fn levels_fall_back_with_hysteresis_when_the_load_ends() {
        let s = Settings {
            hold: Duration::from_millis(500),
            ..at_once()
        };
        let mut c = Controller::new(s);
        let mut judged = [0u64; PRIORITIES];
        let mut now = Duration::ZERO;
        let mut routed = 0;
        let mut step = |c: &mut Controller, per_prio: u64, age: Duration, got: u64| {
            now += INTERVAL;
            for p in [4, 8, 12] {
                judged[p] += per_prio;
            }
            routed += got;
            c.observe(age);
            c.tick(now, routed, judged)
        };
        step(&mut c, 100, MS, 100);
        assert_eq!(step(&mut c, 100, 90 * MS, 100).level_change, Some((0, 3)));
        // The storm ends: 10 per priority per interval (300/s), the agent keeps up.
        let mut changes = Vec::new();
        let mut active_at = Vec::new();
        for k in 0..40 {
            let t = step(&mut c, 10, MS, 30);
            if let Some(ch) = t.level_change {
                changes.push((k, ch));
            }
            active_at.push(t.admit.is_some());
        }
        // Nothing shed from the first calm interval on (900/s admitted > 300/s), the
        // level down to 0 only after 500 ms of that, shedding off 500 ms later still.
        assert_eq!(changes, [(5, (3, 0))]);
        let off = active_at.iter().position(|a| !a).expect("shedding stops");
        assert!((4..=6).contains(&off), "{active_at:?}");
    }

    /// Late for one interval (a stall), the plan sheds new sessions only, from the most
    /// the agent routed in the last second; updates only after `escalate` of sustained
    /// lateness, terminations after twice that; and never cuts the admitted rate below
    /// what it may not shed yet.
    #[test]
    fn levels_above_one_need_sustained_lateness() {
        let mut c = Controller::new(Settings::default());
        let mut judged = [0u64; PRIORITIES];
        let (mut routed, mut now) = (0u64, Duration::ZERO);
        let mut step = |c: &mut Controller, age: Duration, got: u64| {
            now += INTERVAL;
            for p in [4, 8, 12] {
                judged[p] += 100;
            }
            routed += got;
            c.observe(age);
            c.tick(now, routed, judged)
        };
        for _ in 0..5 {
            assert!(step(&mut c, MS, 300).admit.is_none());
        }
        // A stall: 10 routed in the interval, the youngest message 300 ms old.
        let t = step(&mut c, 300 * MS, 10);
        // 0.9 × 3,000/s (the last second's most), not 0.9 × 100/s: 30 % of the new
        // sessions shed, nothing else.
        assert_eq!(t.admit, Some(2_700.0));
        assert_eq!(t.level_change, Some((0, 1)));
        let p = t.plan.expect("a plan");
        assert!((p.shares[12] - 0.3).abs() < 1e-9, "{p:?}");
        assert_eq!((p.shares[4], p.shares[8]), (0.0, 0.0));
        // Still late, the agent getting little done: the cut stops at what it may not
        // shed yet (the updates and terminations, 2,000/s); every new session goes.
        let t = step(&mut c, 300 * MS, 10);
        assert_eq!(t.admit, Some(2_000.0));
        let p = t.plan.expect("a plan");
        assert_eq!((p.shares[4], p.shares[8], p.shares[12]), (0.0, 0.0, 1.0));
        let mut levels = vec![(1, 1)];
        for k in 3..=25 {
            let t = step(&mut c, 300 * MS, 10);
            if let Some((_, to)) = t.level_change {
                levels.push((k, to));
            }
        }
        // Late since the stall (step 1): level 2 one second on, 3 two seconds on.
        assert_eq!(levels, [(1, 1), (11, 2), (21, 3)]);
    }
}
