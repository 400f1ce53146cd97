//! P3 and P4 from the runs: the JSON stored for each and its row of the table.

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::{
    CLASS, MEASURE, STORM_FACTOR,
    plan::Plan,
    rows::{ratio, relative_error},
    run::RunResult,
};
use crate::results::TableRow;

/// P3 goal: |admitted − L| / L at most this.
pub const GOAL_P3_MAX_ERROR: f64 = 0.02;
/// P4 goal: CCR-U p99 storm / no storm at most this.
pub const GOAL_P4_MAX_RATIO: f64 = 1.5;

/// The run named `name`.
pub(super) fn find<'a>(runs: &'a [RunResult], name: &str) -> Result<&'a RunResult> {
    runs.iter()
        .find(|r| r.name == name)
        .with_context(|| format!("run {name} missing"))
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// P3 from the reject storm run.
pub(super) fn p3(plan: &Plan, r: &RunResult) -> (Value, TableRow) {
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
    let row = TableRow {
        metric: "P3 admitted CCR-I rate error, 10× offered".into(),
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

/// P4 from a no-storm and a reject storm run with the same servers; `which` names the
/// pair in the table ("servers fixed:100us", "servers exp:2ms").
pub(super) fn p4(calm: &RunResult, storm: &RunResult, which: &str) -> (Value, TableRow) {
    let (a, b) = (storm.ccr_u_p99(), calm.ccr_u_p99());
    let q = a.zip(b).and_then(|(a, b)| ratio(a, b));
    let met = q.map(|q| q <= GOAL_P4_MAX_RATIO);
    let v = json!({
        "action": "reject",
        "servers": which,
        "runs": { "no_storm": calm.name, "storm": storm.name },
        "ccr_u_p99_no_storm_ms": b,
        "ccr_u_p99_storm_ms": a,
        "ratio": q,
        "goal_max_ratio": GOAL_P4_MAX_RATIO,
        "met": met,
        "source": "client summary (HdrHistogram) of gx_ccr_u; \
                   CCR-U is sent only in the measure phase",
        "ccr_u_no_storm": calm.ccr_u(),
        "ccr_u_storm": storm.ccr_u(),
    });
    let row = TableRow {
        metric: format!("P4 CCR-U p99 during 10× CCR-I storm ÷ without (reject, {which})"),
        measured: format!(
            "{}× ({} ms vs {} ms)",
            fmt_opt(q, 2),
            fmt_opt(a, 2),
            fmt_opt(b, 2)
        ),
        goal: format!("≤ {GOAL_P4_MAX_RATIO}×"),
        met,
    };
    (v, row)
}
