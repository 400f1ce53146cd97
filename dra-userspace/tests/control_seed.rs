//! The seed scenario of docs/architecture.md §5 (Cisco CPS vDRA dynamic rate limiting),
//! replayed second by second on a virtual clock.
//!
//! Static 1000/s, hold 30 s, step 20 %, rows 50→20, 55→30, 60→40, 65→50, one sample per
//! second. Timeline (virtual seconds):
//!
//! | t        | CPU               | throttle | effective |
//! |----------|-------------------|----------|-----------|
//! | 0–9      | 30–45             | 0 %      | 1000      |
//! | 10       | 62                | 40 %     | 600       |
//! | 11–29    | 60–64.9           | 40 %     | 600       |
//! | 30       | 49 (reversal)     | 40 %     | 600       |
//! | 31–59    | ≤ 49              | 40 %     | 600       |
//! | 60       | ≤ 49 (30 s full)  | 20 %     | 800       |
//! | 61–64    | ≤ 49              | 20 %     | 800       |
//! | 65–69    | 57                | 30 %     | 700       |
//! | 70–74    | 67                | 50 %     | 500       |
//! | 75–79    | 55                | 30 %     | 700       |
//! | 80–109   | ≤ 49              | 30 %     | 700       |
//! | 110–139  | ≤ 49              | 10 %     | 900       |
//! | 140–200  | ≤ 49              | 0 %      | 1000      |
//!
//! "CPU stays 60–65 %" in the seed means below the 65 % row (65.0 itself is the 50 % row),
//! so the samples use 60.0 ..= 64.9.

use std::time::Duration;

use dra::control::{
    Controller, DbCpuProfile, LoopSettings, OnMissing, Reason, SampleLoop, ThresholdRow,
    ThrottleEvent, effective_rate,
};

const STATIC_RATE: f64 = 1000.0;
const END: u64 = 200;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn seed_profile() -> DbCpuProfile {
    let rows = [(50.0, 20), (55.0, 30), (60.0, 40), (65.0, 50)].map(|(cpu_pct, throttle_pct)| {
        ThresholdRow {
            cpu_pct,
            throttle_pct,
        }
    });
    DbCpuProfile::new(rows.to_vec(), s(30), 20).unwrap()
}

/// The DB CPU sampled at second `t`.
fn cpu_at(t: u64) -> f64 {
    // A below-threshold value that wanders, always <= 49 as in the seed.
    let below = |t: u64| [49.0, 45.0, 38.5, 48.0, 20.0, 47.0][(t % 6) as usize];
    match t {
        0..=9 => 30.0 + (t as f64) * 1.5,
        10 => 62.0,
        11..=29 => [60.0, 61.5, 63.0, 64.9, 62.2][(t % 5) as usize],
        30 => 49.0,
        31..=64 => below(t),
        65..=69 => 57.0,
        70..=74 => 67.0,
        75..=79 => 55.0,
        _ => below(t),
    }
}

/// The throttle the seed table requires after the sample at second `t`.
fn expected_throttle(t: u64) -> u8 {
    match t {
        0..=9 => 0,
        10..=59 => 40,
        60..=64 => 20,
        65..=69 => 30,
        70..=74 => 50,
        75..=109 => 30,
        110..=139 => 10,
        _ => 0,
    }
}

/// The throttle changes the table implies, as (time, from, to, why): the threshold rule
/// for CPU changes, reversal steps after full 30 s holds.
const EXPECTED_CHANGES: [(u64, u8, u8, Reason); 7] = [
    (10, 0, 40, threshold(62.0, 60.0)),
    (60, 40, 20, reversal_step(30)),
    (65, 20, 30, threshold(57.0, 55.0)),
    (70, 30, 50, threshold(67.0, 65.0)),
    (75, 50, 30, threshold(55.0, 55.0)),
    (110, 30, 10, reversal_step(30)),
    (140, 10, 0, reversal_step(60)),
];

/// The threshold rule applied a sample of `cpu` through the row of `row_cpu`.
const fn threshold(cpu: f64, row_cpu: f64) -> Reason {
    Reason::Threshold { cpu, row_cpu }
}

/// One reversal step after `held_s` seconds below the lowest row.
const fn reversal_step(held_s: u64) -> Reason {
    Reason::ReversalStep {
        held_for: Duration::from_secs(held_s),
        steps: 1,
    }
}

/// An event as a row of [`expected_changes`].
fn change(e: &ThrottleEvent) -> (Duration, u8, u8, Reason) {
    (e.at, e.from, e.to, e.reason)
}

fn expected_changes() -> Vec<(Duration, u8, u8, Reason)> {
    EXPECTED_CHANGES
        .iter()
        .map(|&(t, from, to, why)| (s(t), from, to, why))
        .collect()
}

#[test]
fn seed_scenario_every_second_matches_the_table() {
    let mut c = Controller::new(seed_profile());
    let mut events: Vec<ThrottleEvent> = Vec::new();
    for t in 0..=END {
        if let Some(ev) = c.sample(s(t), cpu_at(t)).unwrap() {
            events.push(ev);
        }
        let want = expected_throttle(t);
        assert_eq!(
            c.throttle_pct(),
            want,
            "throttle at t={t}s (CPU {})",
            cpu_at(t)
        );
        assert_eq!(
            effective_rate(STATIC_RATE, c.throttle_pct()),
            STATIC_RATE * f64::from(100 - want) / 100.0,
            "effective rate at t={t}s"
        );
    }

    // The table's rows, spot-checked by value as the seed states them.
    for (t, throttle, rate) in [
        (5, 0, 1000.0),
        (10, 40, 600.0),
        (29, 40, 600.0),
        (30, 40, 600.0),
        (60, 20, 800.0),
        (65, 30, 700.0),
        (70, 50, 500.0),
        (75, 30, 700.0),
        (110, 10, 900.0),
        (140, 0, 1000.0),
    ] {
        assert_eq!(expected_throttle(t), throttle);
        assert_eq!(effective_rate(STATIC_RATE, throttle), rate, "t={t}");
    }

    let got: Vec<_> = events.iter().map(change).collect();
    assert_eq!(
        got,
        expected_changes(),
        "throttle changes, their exact times and their reasons"
    );
}

#[test]
fn no_step_one_sample_before_the_hold_is_full() {
    let mut c = Controller::new(seed_profile());
    for t in 0..=30 {
        c.sample(s(t), cpu_at(t)).unwrap();
    }
    // Reversal started with the CPU 49 sample at t=30: the step is due at t=60.
    assert_eq!(c.poll_timeout(), Some(s(60)));
    for t in 31..=59 {
        assert_eq!(
            c.sample(s(t), cpu_at(t)).unwrap(),
            None,
            "no step at t={t}s"
        );
    }
    // Not even a tick just before the 30 s are full.
    assert_eq!(c.tick(s(60) - Duration::from_millis(1)), None);
    assert_eq!(c.throttle_pct(), 40);
    let ev = c
        .sample(s(60), cpu_at(60))
        .unwrap()
        .expect("step at exactly 30 s");
    assert_eq!((ev.from, ev.to), (40, 20));
}

#[test]
fn reversal_steps_land_on_time_with_ticks_and_sparse_samples() {
    // Same profile; the CPU source only reports every 7 s, the agent ticks at
    // poll_timeout(). Steps must still come exactly 30 s apart from the first below
    // sample.
    let mut c = Controller::new(seed_profile());
    c.sample(s(0), 67.0).unwrap(); // 50 %
    c.sample(s(7), 30.0).unwrap(); // reversal starts at 7
    let mut steps = Vec::new();
    let mut next_sample = 14;
    loop {
        let due = c.poll_timeout();
        let next = match due {
            Some(d) if d < s(next_sample) => d,
            _ => s(next_sample),
        };
        if next > s(200) {
            break;
        }
        let ev = if next == s(next_sample) {
            next_sample += 7;
            c.sample(next, 30.0).unwrap()
        } else {
            c.tick(next)
        };
        steps.extend(ev.map(|e| (e.at, e.to)));
    }
    assert_eq!(steps, [(s(37), 30), (s(67), 10), (s(97), 0)]);
}

#[test]
fn seed_scenario_through_the_sample_loop() {
    // The wrapper with no smoothing and a healthy source behaves exactly like the bare
    // controller.
    let settings = LoopSettings {
        period: s(1),
        missing_after: 3,
        on_missing: OnMissing::Hold,
        ewma_alpha: None,
    };
    let mut l = SampleLoop::new(seed_profile(), settings, s(0)).unwrap();
    let mut changes = Vec::new();
    for t in 0..=END {
        l.sample(s(t), cpu_at(t)).unwrap();
        while let Some(ev) = l.poll_event() {
            changes.push(change(&ev));
        }
        assert_eq!(l.throttle_pct(), expected_throttle(t), "t={t}s");
    }
    assert_eq!(changes, expected_changes());
    assert_eq!(l.missing_events(), 0);
}
