//! P3 and P4 from the runs: the JSON stored for each and its row of the table.

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use super::{CLASS, STORM_FACTOR, plan::Plan, run::RunResult};
use crate::{
    bench::{
        config::MEASURE,
        rows::{median, ratio, relative_error},
    },
    results::TableRow,
};

/// P3 goal: |admitted − L| / L at most this.
pub const GOAL_P3_MAX_ERROR: f64 = 0.02;
/// P4 goal: CCR-U p99 storm / no storm at most this.
pub const GOAL_P4_MAX_RATIO: f64 = 1.5;

/// Every round of the run named `name`, in order.
pub(super) fn find<'a>(runs: &'a [RunResult], name: &str) -> Result<Vec<&'a RunResult>> {
    let found: Vec<&RunResult> = runs.iter().filter(|r| r.name == name).collect();
    ensure!(!found.is_empty(), "run {name} missing");
    Ok(found)
}

/// The (no storm, storm) pairs of the same round.
pub(super) fn pairs<'a>(
    runs: &'a [RunResult],
    calm: &str,
    storm: &str,
) -> Result<Vec<(&'a RunResult, &'a RunResult)>> {
    let (c, s) = (find(runs, calm)?, find(runs, storm)?);
    ensure!(
        c.len() == s.len(),
        "{calm}: {} rounds, {storm}: {}",
        c.len(),
        s.len()
    );
    Ok(c.into_iter().zip(s).collect())
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// P3 over the reject storm runs (every round): the worst round decides.
pub(super) fn p3(plan: &Plan, rounds: &[&RunResult]) -> (Value, TableRow) {
    let each: Vec<(Value, Option<f64>, Option<bool>)> =
        rounds.iter().map(|r| p3_one(plan, r)).collect();
    let worst = each
        .iter()
        .enumerate()
        .max_by(|a, b| {
            let e = |x: &(Value, Option<f64>, Option<bool>)| x.1.unwrap_or(f64::INFINITY);
            e(a.1).total_cmp(&e(b.1))
        })
        .map_or(0, |(i, _)| i);
    let met = each
        .iter()
        .map(|e| e.2)
        .try_fold(true, |acc, m| m.map(|m| acc && m));
    let r = rounds[worst];
    let err = each[worst].1;
    let l = plan.limit.rate;
    let v = json!({
        "worst_round": r.round,
        "met": met,
        "goal_max_error": GOAL_P3_MAX_ERROR,
        "errors": each.iter().map(|e| e.1).collect::<Vec<_>>(),
        "rounds": each.into_iter().map(|e| e.0).collect::<Vec<_>>(),
    });
    let row = TableRow {
        metric: format!(
            "P3 admitted CCR-I rate error, 10× offered (worst of {})",
            rounds.len()
        ),
        measured: format!(
            "{} % ({} /s admitted of {} /s offered, limit {l} /s)",
            fmt_opt(err.map(|e| 100.0 * e), 2),
            fmt_opt(r.admitted_per_s, 1),
            fmt_opt(r.offered_per_s, 0)
        ),
        goal: format!(
            "≤ {} % with ≥ {STORM_FACTOR}× the limit offered",
            100.0 * GOAL_P3_MAX_ERROR
        ),
        met,
    };
    (v, row)
}

/// P3 of one storm run: its JSON, error and whether it met the goal.
fn p3_one(plan: &Plan, r: &RunResult) -> (Value, Option<f64>, Option<bool>) {
    let l = plan.limit.rate;
    let err = r.admitted_per_s.map(|a| relative_error(a, l));
    // The goal is about 10× the limit offered: a run whose client could not offer that
    // (a stalled machine) does not meet it, whatever the error (2 % slack on the offer).
    let offered_ok = r
        .offered_per_s
        .is_some_and(|o| o >= 0.98 * STORM_FACTOR * l);
    let met = err.map(|e| e <= GOAL_P3_MAX_ERROR && offered_ok);
    let fp_admitted = r
        .metrics_interior_per_s
        .get("dra_fastpath_requests_total/admitted")
        .copied();
    let v = json!({
        "run": r.name,
        "round": r.round,
        "limit_per_s": l, "burst": plan.limit.burst, "action": plan.limit.action,
        "offered_target_per_s": STORM_FACTOR * l,
        "offered_per_s": r.offered_per_s,
        "offered_at_least_10x": offered_ok,
        "admitted_per_s": r.admitted_per_s,
        "error": err,
        "goal_max_error": GOAL_P3_MAX_ERROR,
        "met": met,
        "source": format!("client rows (--rows): {CLASS} answered 2001 per \
                           second, mean over the interior of {MEASURE}"),
        "cross_check": {
            "source": "agent metrics dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",\
                       outcome=\"admitted\"}, same interior",
            "admitted_per_s": fp_admitted,
            "error": fp_admitted.map(|a| relative_error(a, l)),
            "all_outcomes_per_s": r.metrics_interior_per_s,
        },
    });
    (v, err, met)
}

/// P4 from the (no storm, storm) pairs with the same servers: each pair's CCR-U p99
/// ratio, and their median against the goal (one stalled run moves one ratio, not the
/// verdict); `which` names the pair in the table ("servers fixed:100us", ...).
pub(super) fn p4(pairs: &[(&RunResult, &RunResult)], which: &str) -> (Value, TableRow) {
    let each: Vec<(Option<f64>, Option<f64>, Option<f64>)> = pairs
        .iter()
        .map(|(calm, storm)| {
            let (a, b) = (storm.ccr_u_p99(), calm.ccr_u_p99());
            (a, b, a.zip(b).and_then(|(a, b)| ratio(a, b)))
        })
        .collect();
    let ratios: Vec<f64> = each.iter().filter_map(|e| e.2).collect();
    // A pair without a ratio (no CCR-U answered) makes the whole measure unknown.
    let q = (ratios.len() == pairs.len())
        .then(|| median(&ratios))
        .flatten();
    let met = q.map(|q| q <= GOAL_P4_MAX_RATIO);
    let v = json!({
        "action": "reject",
        "servers": which,
        "ratio": q,
        "ratio_of": "median of the pairs' ratios",
        "goal_max_ratio": GOAL_P4_MAX_RATIO,
        "met": met,
        "source": "client summary (HdrHistogram) of gx_ccr_u; \
                   CCR-U is sent only in the measure phase",
        "pairs": pairs.iter().zip(&each).map(|((calm, storm), e)| json!({
            "round": calm.round,
            "runs": { "no_storm": calm.name, "storm": storm.name },
            "ccr_u_p99_no_storm_ms": e.1,
            "ccr_u_p99_storm_ms": e.0,
            "ratio": e.2,
            "ccr_u_no_storm": calm.ccr_u(),
            "ccr_u_storm": storm.ccr_u(),
        })).collect::<Vec<_>>(),
    });
    let detail: Vec<String> = each
        .iter()
        .map(|e| {
            format!(
                "{}× ({} vs {} ms)",
                fmt_opt(e.2, 2),
                fmt_opt(e.0, 2),
                fmt_opt(e.1, 2)
            )
        })
        .collect();
    let row = TableRow {
        metric: format!(
            "P4 CCR-U p99 during 10× CCR-I storm ÷ without (reject, {which}; median of {} \
             pairs)",
            pairs.len()
        ),
        measured: format!("{}× — {}", fmt_opt(q, 2), detail.join(", ")),
        goal: format!("≤ {GOAL_P4_MAX_RATIO}×"),
        met,
    };
    (v, row)
}
