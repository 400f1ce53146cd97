//! The story checks of docs/architecture.md §5 that need the whole run's time series:
//! each says what it expected and what it saw, and each fails when its behaviour is
//! broken (the unit tests below break each one).

use std::fmt::Write as _;

use super::{
    profile::Profile,
    series::{Row, Sample},
};

/// One story check: what it expected, what it saw, and the verdict.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    pub(crate) what: String,
    pub(crate) expected: String,
    pub(crate) saw: String,
    pub(crate) ok: bool,
}

impl Check {
    pub(crate) fn new(
        what: impl Into<String>,
        expected: impl Into<String>,
        saw: String,
        ok: bool,
    ) -> Check {
        Check {
            what: what.into(),
            expected: expected.into(),
            saw,
            ok,
        }
    }
}

/// How far a scrape's view of an event may be off its real time, either way: two scrape
/// periods (one for the scrape that sees the event, one for scrape-time jitter).
pub(crate) const MEASURE_SLACK: f64 = 0.5;
/// Relative tolerance of the admitted-rate checks.
pub(crate) const RATE_TOLERANCE: f64 = 0.05;
/// A row counts as limited when offered ≥ (1 + this) × the limit, as unlimited when
/// offered ≤ (1 − this) × the limit; rows in between are not judged (see [`windows`]).
const MARGIN: f64 = 0.1;
/// Judged rows a steady window needs (after its first and last rows are left out).
const MIN_WINDOW_ROWS: usize = 3;

fn pct(x: f64) -> String {
    format!("{x:.0}")
}

// ---- the throttle follows the profile -------------------------------------------------

/// Scrapes grouped by agent CPU sample: consecutive scrapes with the same CPU gauge
/// (and source state) saw the same sample.
fn cpu_groups(samples: &[Sample]) -> impl Iterator<Item = &[Sample]> {
    samples.chunk_by(|a, b| a.cpu == b.cpu && a.source_up == b.source_up)
}

/// For every CPU sample at or above the lowest threshold, `peer`'s throttle must be the
/// level of that sample's row by the last scrape that still shows the sample, i.e. within
/// one sample period (docs/architecture.md §5: "immediately, up or down").
pub(crate) fn follows_profile(samples: &[Sample], p: &Profile, peer: &str) -> Check {
    let mut per_row = vec![(0usize, 0usize); p.thresholds.len()];
    let mut misses = Vec::new();
    for g in cpu_groups(samples) {
        let (first, last) = (&g[0], &g[g.len() - 1]);
        let Some(i) = p.row_for(first.cpu).filter(|_| first.source_up) else {
            continue;
        };
        let want = p.thresholds[i].1;
        let got = last.throttle_of(peer);
        per_row[i].1 += 1;
        if got == Some(want) {
            per_row[i].0 += 1;
        } else {
            misses.push(format!(
                "t={:.1} CPU {:.2} %: throttle {} (want {})",
                first.t,
                first.cpu,
                got.map_or("none".into(), pct),
                pct(want)
            ));
        }
    }
    let n: usize = per_row.iter().map(|r| r.1).sum();
    let rows: Vec<String> = p
        .thresholds
        .iter()
        .zip(&per_row)
        .map(|((c, t), (ok, n))| format!("{c}%→{t}%: {ok}/{n}"))
        .collect();
    let mut saw = format!("{n} CPU samples ≥ {} %: {}", p.lowest(), rows.join(", "));
    if !misses.is_empty() {
        let _ = write!(
            saw,
            "; {} off, first: {}",
            misses.len(),
            misses[..misses.len().min(3)].join("; ")
        );
    }
    Check::new(
        format!("{peer}'s throttle follows the profile within one sample period"),
        format!(
            "at each DB CPU sample ≥ {} %, the throttle of its row, within {} s",
            p.lowest(),
            p.period_s
        ),
        saw,
        n > 0 && misses.is_empty(),
    )
}

// ---- reversal ---------------------------------------------------------------------

/// A stretch of CPU samples below the lowest threshold, as the scrapes saw it.
struct Stretch {
    start: f64,
    from: f64,
    /// (t, from, to) throttle changes seen inside the stretch.
    changes: Vec<(f64, f64, f64)>,
    /// The last scrape still below.
    end: f64,
}

fn stretches(samples: &[Sample], lowest: f64, peer: &str) -> Vec<Stretch> {
    let mut out = Vec::new();
    let mut cur: Option<Stretch> = None;
    for s in samples {
        let below = s.source_up && s.cpu < lowest;
        // No gauge: NaN, equal to no throttle value: a change no reversal step allows.
        let thr = s.throttle_of(peer).unwrap_or(f64::NAN);
        match (&mut cur, below) {
            (Some(_), false) => out.extend(cur.take()),
            (None, true) => {
                cur = Some(Stretch {
                    start: s.t,
                    from: thr,
                    changes: Vec::new(),
                    end: s.t,
                })
            }
            (Some(st), true) => {
                let last = st.changes.last().map_or(st.from, |c| c.2);
                if thr != last {
                    st.changes.push((s.t, last, thr));
                }
                st.end = s.t;
            }
            (None, false) => {}
        }
    }
    out.extend(cur);
    out
}

/// While the CPU stays below the lowest threshold, the throttle may only fall, by the
/// step (floor 0), the k-th time k holds after the stretch began (the controller keeps
/// that schedule: dra-userspace/src/control/controller.rs). The controller acts on its
/// samples only, so step k lands at the first sample at or after its due time: up to
/// one sample period late, never early. Scrapes see the stretch's start and each step
/// up to one scrape period late: [`MEASURE_SLACK`] either side. A step due before the
/// stretch ended must have happened.
pub(crate) fn reversal(samples: &[Sample], p: &Profile, peer: &str) -> Check {
    let (early, late) = (MEASURE_SLACK, p.period_s + MEASURE_SLACK);
    let mut steps_seen = 0;
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for st in stretches(samples, p.lowest(), peer) {
        let mut level = st.from;
        let mut text = format!("t={:.1} at {} %:", st.start, pct(st.from));
        for (k, &(t, a, b)) in st.changes.iter().enumerate() {
            let due = st.start + (k + 1) as f64 * p.hold_s;
            let want = (level - p.step).max(0.0);
            let _ = write!(text, " {}→{} after {:.1} s", pct(a), pct(b), t - st.start);
            if level <= 0.0 || b != want {
                problems.push(format!(
                    "t={t:.1}: {}→{} while CPU < {} % (expected {}→{} at most)",
                    pct(a),
                    pct(b),
                    p.lowest(),
                    pct(level),
                    pct(want)
                ));
                break;
            }
            if t < due - early || t > due + late {
                problems.push(format!(
                    "t={t:.1}: {}→{} {:.1} s after the CPU fell (due at {:.1}–{:.1} s)",
                    pct(a),
                    pct(b),
                    t - st.start,
                    due - st.start - early,
                    due - st.start + late
                ));
            }
            steps_seen += 1;
            level = b;
        }
        let next_due = st.start + (st.changes.len() + 1) as f64 * p.hold_s;
        if level > 0.0 && problems.is_empty() && next_due + late < st.end {
            problems.push(format!(
                "t={:.1}: no step from {} % by {:.1} s although the CPU stayed below until \
                 t={:.1}",
                st.start,
                pct(level),
                next_due - st.start + late,
                st.end
            ));
        }
        if st.from > 0.0 || !st.changes.is_empty() {
            seen.push(text);
        }
    }
    let mut saw = if seen.is_empty() {
        "no stretch below the lowest threshold with a throttle".to_owned()
    } else {
        seen.join("; ")
    };
    if !problems.is_empty() {
        let _ = write!(saw, " | {}", problems.join("; "));
    }
    Check::new(
        format!("{peer}'s reversal waits the hold and steps by the step"),
        format!(
            "while CPU < {} %: −{} points (floor 0) at k × {} s after it fell, by the next \
             sample (≤ {} s later; ± {} s measuring), never up",
            p.lowest(),
            p.step,
            p.hold_s,
            p.period_s,
            MEASURE_SLACK
        ),
        saw,
        steps_seen > 0 && problems.is_empty(),
    )
}

// ---- admitted rates -------------------------------------------------------------------

/// A steady window of rows: the same limit and the same side of it throughout.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    pub(crate) from: f64,
    pub(crate) to: f64,
    pub(crate) limit: f64,
    /// Offered above the limit (the limiter binds) rather than below it.
    pub(crate) bound: bool,
    pub(crate) offered: f64,
    pub(crate) admitted: f64,
}

impl Window {
    /// What the limiter should admit per second: the limit when bound, else everything.
    pub(crate) fn expected(&self) -> f64 {
        if self.bound { self.limit } else { self.offered }
    }

    pub(crate) fn deviation(&self) -> f64 {
        self.admitted / self.expected() - 1.0
    }

    fn describe(&self) -> String {
        format!(
            "t={:.0}–{:.0} limit {:.0}: offered {:.0}/s admitted {:.0}/s ({:+.1} %)",
            self.from,
            self.to,
            self.limit,
            self.offered,
            self.admitted,
            100.0 * self.deviation()
        )
    }
}

/// Steady windows of `peer`/`class`: maximal runs of rows with the same `limit` in which
/// the offered rate stays clearly above it (≥ 110 %) or clearly below (≤ 90 %). The first
/// and last rows of a run are left out (the limit or the offered rate changed during
/// them, and a full bucket's burst may still pass); windows need [`MIN_WINDOW_ROWS`]
/// rows left.
pub(crate) fn windows(
    rows: &[Row],
    peer: &str,
    class: &str,
    limit: impl Fn(&Row) -> Option<f64>,
) -> Vec<Window> {
    let regime = |r: &Row| {
        let l = limit(r)?;
        let o = r.rate(peer, class, 0);
        if o >= l * (1.0 + MARGIN) {
            Some((true, l))
        } else if o <= l * (1.0 - MARGIN) {
            Some((false, l))
        } else {
            None
        }
    };
    let mut out = Vec::new();
    let keyed: Vec<(Option<(bool, f64)>, &Row)> = rows.iter().map(|r| (regime(r), r)).collect();
    for run in keyed.chunk_by(|a, b| a.0 == b.0) {
        let Some((bound, limit)) = run[0].0 else {
            continue;
        };
        if run.len() < MIN_WINDOW_ROWS + 2 {
            continue;
        }
        let inner = &run[1..run.len() - 1];
        let secs: f64 = inner.iter().map(|(_, r)| r.secs).sum();
        let sum = |i| {
            inner
                .iter()
                .map(|(_, r)| r.rate(peer, class, i) * r.secs)
                .sum::<f64>()
        };
        out.push(Window {
            from: inner[0].1.t - inner[0].1.secs,
            to: inner[inner.len() - 1].1.t,
            limit,
            bound,
            offered: sum(0) / secs,
            admitted: sum(1) / secs,
        });
    }
    out
}

/// Whether every window is within [`RATE_TOLERANCE`], whether one where the limit bound
/// satisfies `need_bound` (so that a check cannot pass on free-flowing traffic alone),
/// and what was seen.
fn judge(ws: &[Window], need_bound: impl Fn(&Window) -> bool) -> (bool, bool, String) {
    let bad: Vec<&Window> = ws
        .iter()
        .filter(|w| w.deviation().abs() > RATE_TOLERANCE)
        .collect();
    let bound: Vec<&Window> = ws.iter().filter(|w| w.bound).collect();
    let free = ws.len() - bound.len();
    let worst_free = ws
        .iter()
        .filter(|w| !w.bound)
        .map(|w| w.deviation().abs())
        .fold(0.0, f64::max);
    let mut s = format!(
        "limited: {}; unlimited: {free} window(s), worst {:.1} %",
        if bound.is_empty() {
            "none".to_owned()
        } else {
            bound
                .iter()
                .map(|w| w.describe())
                .collect::<Vec<_>>()
                .join(", ")
        },
        100.0 * worst_free
    );
    if !bad.is_empty() {
        let _ = write!(
            s,
            " | off by more than {:.0} %: {}",
            100.0 * RATE_TOLERANCE,
            bad.iter()
                .map(|w| w.describe())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    (bad.is_empty(), bound.iter().any(|w| need_bound(w)), s)
}

/// pgw1's admitted CCR-I rate is its effective rate whenever the throttle binds, and its
/// effective-rate gauge is static × (100 − throttle) %.
pub(crate) fn admitted_is_effective(
    samples: &[Sample],
    rows: &[Row],
    p: &Profile,
    peer: &str,
) -> Check {
    let class = "gx_ccr_i";
    // No static rate: NaN, which fails the check.
    let stat = p.static_rate(peer, class).unwrap_or(f64::NAN);
    let key = (peer.to_owned(), class.to_owned());
    // The gauges are set one after the other: a scrape may fall between them, the next
    // one may not.
    let consistent = |s: &Sample| {
        let t = s.throttle_of(peer)?;
        Some(s.eff.get(&key).copied()? == stat * (100.0 - t) / 100.0)
    };
    let judged: Vec<bool> = samples
        .iter()
        .map(|s| consistent(s) == Some(true))
        .collect();
    let off = judged.windows(2).filter(|w| !w[0] && !w[1]).count();
    let ws = windows(rows, peer, class, |r| {
        r.steady_eff.get(&key).copied().flatten()
    });
    let (within, bound, s) = judge(&ws, |w| w.limit < stat);
    let saw = format!(
        "effective-rate gauge = {stat:.0} × (100 − throttle) % in {}/{} scrapes; {s}",
        judged.iter().filter(|x| **x).count(),
        judged.len()
    );
    Check::new(
        format!("{peer}'s admitted Gx CCR-I rate is its effective rate in steady windows"),
        format!(
            "admitted = effective rate ± {:.0} % while throttled (≥ 1 such window), = offered \
             below it",
            100.0 * RATE_TOLERANCE
        ),
        saw,
        within && bound && off == 0,
    )
}

/// A gateway without DRL admits min(offered, its static rate) throughout: a dynamic
/// throttle of it would lower what it admits while its static limit binds.
/// `need_limited`: CCR-I must have been limited in at least one window (not for a DOIC
/// gateway, which sheds at the source and may never offer more than its limit for a
/// whole window).
pub(crate) fn admitted_is_static(
    rows: &[Row],
    p: &Profile,
    peer: &str,
    need_limited: bool,
) -> Check {
    let mut ok = true;
    let mut saw = Vec::new();
    for class in ["gx_ccr_i", "gx_ccr_t"] {
        let Some(stat) = p.static_rate(peer, class) else {
            continue;
        };
        let ws = windows(rows, peer, class, |_| Some(stat));
        let (within, bound, s) = judge(&ws, |_| true);
        // CCR-T follows the admitted CCR-I: it need not exceed its limit.
        ok &= within && (bound || class == "gx_ccr_t" || !need_limited);
        saw.push(format!("{class} ({stat:.0}/s): {s}"));
    }
    Check::new(
        format!("{peer} was never throttled: it admits min(offered, static rate)"),
        format!(
            "admitted = min(offered, static) ± {:.0} % in steady windows{}",
            100.0 * RATE_TOLERANCE,
            if need_limited {
                ", CCR-I limited in ≥ 1"
            } else {
                " (DOIC gateway: need not be limited)"
            }
        ),
        saw.join("; "),
        ok && !saw.is_empty(),
    )
}

// ---- every peer's throttle gauge -----------------------------------------------------

/// Over every scrape: a DRL peer has its throttle series (the agent sets it at start);
/// a peer without DRL has none, or 0, and no effective rate other than its static one.
pub(crate) fn throttle_series(samples: &[Sample], p: &Profile, peers: &[&str]) -> Check {
    let mut ok = !samples.is_empty();
    let mut saw = Vec::new();
    for &peer in peers {
        let vals: Vec<f64> = samples.iter().filter_map(|s| s.throttle_of(peer)).collect();
        let max = vals.iter().copied().fold(0.0, f64::max);
        let effs: Vec<(String, f64)> = samples
            .iter()
            .flat_map(|s| s.eff.iter())
            .filter(|((p2, _), _)| p2 == peer)
            .map(|((_, c), v)| (c.clone(), *v))
            .collect();
        if p.is_drl(peer) {
            ok &= vals.len() == samples.len();
            saw.push(format!(
                "{peer} (DRL): series in {}/{} scrapes, max {}",
                vals.len(),
                samples.len(),
                pct(max)
            ));
        } else {
            let eff_bad = effs
                .iter()
                .filter(|(c, v)| p.static_rate(peer, c) != Some(*v))
                .count();
            ok &= max == 0.0 && eff_bad == 0;
            saw.push(format!(
                "{peer} (no DRL): throttle series in {}/{} scrapes, max {}; effective rate \
                 other than static in {eff_bad}",
                vals.len(),
                samples.len(),
                pct(max)
            ));
        }
    }
    Check::new(
        "every gateway's throttle gauge over the whole run",
        "DRL peers: dra_throttle_percent in every scrape; others: absent or 0 in every scrape",
        saw.join("; "),
        ok,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn profile() -> Profile {
        Profile {
            thresholds: vec![(6.0, 20.0), (7.0, 30.0), (8.0, 40.0), (9.0, 50.0)],
            hold: "10s".into(),
            hold_s: 10.0,
            step: 20.0,
            period_s: 1.0,
            drl_peers: vec!["pgw1".into()],
            static_rates: vec![
                ("pgw1".into(), "gx_ccr_i".into(), 1000.0),
                ("pgw2".into(), "gx_ccr_i".into(), 200.0),
            ],
        }
    }

    /// Scrapes every 0.25 s of an agent that samples `cpu(k)` at k s and applies
    /// `throttle(k)` right away.
    fn trace(secs: usize, cpu: impl Fn(usize) -> f64, thr: impl Fn(usize) -> f64) -> Vec<Sample> {
        (0..secs * 4)
            .map(|i| {
                let k = i / 4;
                let t = thr(k);
                let mut throttle = BTreeMap::new();
                throttle.insert("pgw1".to_owned(), t);
                let mut eff = BTreeMap::new();
                eff.insert(
                    ("pgw1".into(), "gx_ccr_i".into()),
                    1000.0 * (100.0 - t) / 100.0,
                );
                Sample {
                    t: i as f64 * 0.25 + 0.1,
                    // Distinct values, as INFO cpu gives.
                    cpu: cpu(k) + k as f64 * 1e-4,
                    source_up: true,
                    throttle,
                    eff,
                    ..Sample::default()
                }
            })
            .collect()
    }

    /// CPU 4 % until 10 s, 9.5 % until 30 s, then 2 %; reversal 50 → 30 → 10 → 0 at
    /// 40, 50, 60 s (each `hold` after the previous).
    fn story(hold: usize, step: f64) -> Vec<Sample> {
        let cpu = |k| {
            if (10..30).contains(&k) {
                9.5
            } else if k < 10 {
                4.0
            } else {
                2.0
            }
        };
        let thr = move |k: usize| {
            if k < 10 {
                0.0
            } else if k < 30 {
                50.0
            } else {
                (50.0 - step * ((k - 30) / hold) as f64).max(0.0)
            }
        };
        trace(80, cpu, thr)
    }

    #[test]
    fn a_correct_controller_passes_profile_and_reversal() {
        let s = story(10, 20.0);
        let c = follows_profile(&s, &profile(), "pgw1");
        assert!(c.ok, "{c:?}");
        assert!(c.saw.contains("9%→50%: 20/20"), "{}", c.saw);
        let c = reversal(&s, &profile(), "pgw1");
        assert!(c.ok, "{c:?}");
        assert!(c.saw.contains("50→30 after 10.0 s"), "{}", c.saw);
    }

    #[test]
    fn a_step_one_sample_after_its_due_time_passes_two_fail() {
        // CPU below from 30 s; steps at 40, 51 (the sample at 50 was a few ms early),
        // 61 s, as seen in a real run; then at 40, 52, 62 s.
        let cpu = |k| if (10..30).contains(&k) { 9.5 } else { 2.0 };
        let at = |steps: [usize; 3]| {
            move |k: usize| {
                let n = steps.iter().filter(|s| k >= **s).count() as f64;
                if k < 10 {
                    0.0
                } else {
                    (50.0 - 20.0 * n).max(0.0)
                }
            }
        };
        let c = reversal(&trace(80, cpu, at([40, 51, 61])), &profile(), "pgw1");
        assert!(c.ok, "{c:?}");
        let c = reversal(&trace(80, cpu, at([40, 52, 62])), &profile(), "pgw1");
        assert!(!c.ok, "{c:?}");
    }

    #[test]
    fn a_throttle_one_sample_late_fails_the_profile_check() {
        let s = trace(
            20,
            |k| if k >= 5 { 7.5 } else { 4.0 },
            |k| if k >= 6 { 30.0 } else { 0.0 },
        );
        let c = follows_profile(&s, &profile(), "pgw1");
        assert!(!c.ok);
        assert!(c.saw.contains("throttle 0 (want 30)"), "{}", c.saw);
        // No sample at or above the lowest threshold: nothing shown, not a pass.
        let s = trace(20, |_| 4.0, |_| 0.0);
        assert!(!follows_profile(&s, &profile(), "pgw1").ok);
    }

    #[test]
    fn a_skipped_hold_a_wrong_step_or_a_missing_step_fails_the_reversal_check() {
        let c = reversal(&story(2, 20.0), &profile(), "pgw1");
        assert!(!c.ok);
        assert!(
            c.saw
                .contains("2.0 s after the CPU fell (due at 9.5–11.5 s)"),
            "{}",
            c.saw
        );
        let c = reversal(&story(10, 10.0), &profile(), "pgw1");
        assert!(!c.ok);
        assert!(c.saw.contains("50→40 while CPU < 6 %"), "{}", c.saw);
        // Never reversed: the throttle stays 50 while the CPU is low for 50 s.
        let s = trace(
            80,
            |k| if (10..30).contains(&k) { 9.5 } else { 2.0 },
            |k| {
                if k >= 10 { 50.0 } else { 0.0 }
            },
        );
        let c = reversal(&s, &profile(), "pgw1");
        assert!(!c.ok);
        assert!(c.saw.contains("no step from 50 %"), "{}", c.saw);
        // A rise while the CPU is low.
        let s = trace(30, |_| 2.0, |k| if k >= 20 { 20.0 } else { 0.0 });
        assert!(!reversal(&s, &profile(), "pgw1").ok);
    }

    fn rows(offered: impl Fn(usize) -> f64, admitted: impl Fn(usize) -> f64, eff: f64) -> Vec<Row> {
        (0..20)
            .map(|k| {
                let mut r = Row {
                    t: k as f64 + 1.0,
                    secs: 1.0,
                    ..Row::default()
                };
                for p in ["pgw1", "pgw2"] {
                    r.peers.entry(p.into()).or_default().insert(
                        "gx_ccr_i".into(),
                        [offered(k), admitted(k), offered(k) - admitted(k)],
                    );
                }
                r.steady_eff
                    .insert(("pgw1".into(), "gx_ccr_i".into()), Some(eff));
                r
            })
            .collect()
    }

    #[test]
    fn admitted_rates_are_judged_in_steady_windows_only() {
        // Storm from row 5: the first row of each run is left out (mixed).
        let r = rows(
            |k| if k < 5 { 30.0 } else { 900.0 },
            |k| if k < 5 { 30.0 } else { 500.0 },
            500.0,
        );
        let ws = windows(&r, "pgw1", "gx_ccr_i", |r| {
            r.steady_eff[&("pgw1".into(), "gx_ccr_i".into())]
        });
        let bound: Vec<&Window> = ws.iter().filter(|w| w.bound).collect();
        assert_eq!(bound.len(), 1, "{ws:?}");
        assert!(bound[0].admitted == 500.0 && bound[0].from == 6.0, "{ws:?}");
        let (within, bound, _) = judge(&ws, |w| w.limit < 1000.0);
        assert!(within && bound);
        // Admitting 10 % more than the effective rate fails.
        let r = rows(|_| 900.0, |_| 550.0, 500.0);
        let ws = windows(&r, "pgw1", "gx_ccr_i", |_| Some(500.0));
        assert!(!judge(&ws, |_| true).0);
        // Unthrottled only (no window where the limit bound): not a pass.
        let r = rows(|_| 30.0, |_| 30.0, 1000.0);
        let ws = windows(&r, "pgw1", "gx_ccr_i", |_| Some(1000.0));
        let (within, bound, _) = judge(&ws, |w| w.limit < 1000.0);
        assert!(within && !bound);
    }

    #[test]
    fn a_throttled_gateway_without_drl_fails() {
        let p = profile();
        // pgw2 offered 400/s, static 200/s, admitted 200/s: not throttled.
        let ok = rows(|_| 400.0, |_| 200.0, 1000.0);
        assert!(admitted_is_static(&ok, &p, "pgw2", true).ok);
        // Throttled by 50 %: admitted 100/s.
        let bad = rows(|_| 400.0, |_| 100.0, 1000.0);
        let c = admitted_is_static(&bad, &p, "pgw2", true);
        assert!(!c.ok);
        assert!(c.saw.contains("admitted 100/s (-50.0 %)"), "{}", c.saw);
        // A DOIC gateway that never offers more than its limit: fine without a limited
        // window, but still not when throttled.
        let shed = rows(|_| 150.0, |_| 150.0, 1000.0);
        assert!(!admitted_is_static(&shed, &p, "pgw2", true).ok);
        assert!(admitted_is_static(&shed, &p, "pgw2", false).ok);
        assert!(!admitted_is_static(&bad, &p, "pgw2", false).ok);
        // A throttle series for pgw2 above 0.
        let mut s = story(10, 20.0);
        assert!(throttle_series(&s, &p, &["pgw1", "pgw2"]).ok);
        s[100].throttle.insert("pgw2".into(), 20.0);
        assert!(!throttle_series(&s, &p, &["pgw1", "pgw2"]).ok);
    }
}
