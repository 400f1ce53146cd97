//! P3, P4 and P5 from the runs: the JSON stored for each and its row of the table.

use std::collections::BTreeMap;

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
/// P5 goal: agent CPU userspace / XDP at least this.
pub const GOAL_P5_MIN_RATIO: f64 = 5.0;
/// A run "limited" when its admitted CCR-I rate stayed at most this × L (P5 validity).
const LIMITED_MAX_FACTOR: f64 = 1.2;

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

/// P4 from the no-storm and reject storm runs.
pub(super) fn p4(calm: &RunResult, storm: &RunResult) -> (Value, TableRow) {
    let (a, b) = (storm.ccr_u_p99(), calm.ccr_u_p99());
    let q = a.zip(b).and_then(|(a, b)| ratio(a, b));
    let met = q.map(|q| q <= GOAL_P4_MAX_RATIO);
    let v = json!({
        "action": "reject",
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
        metric: "P4 CCR-U p99 during 10× CCR-I storm ÷ without (reject)".into(),
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

/// Whether a run is seen to limit CCR-I: the agent's own counters (any family with
/// labels peer, class, outcome) show over-limit requests dropped or marked, and it
/// admitted at most [`LIMITED_MAX_FACTOR`] × L. A run without such counters cannot be
/// verified and does not count as limited.
pub fn limited(
    admitted_per_s: Option<f64>,
    limit: f64,
    by_outcome: &BTreeMap<String, f64>,
) -> bool {
    let refused: f64 = by_outcome
        .iter()
        .filter(|(k, _)| k.ends_with("/dropped") || k.ends_with("/marked"))
        .map(|(_, v)| v)
        .sum();
    refused > 0.0 && admitted_per_s.is_some_and(|a| a <= LIMITED_MAX_FACTOR * limit)
}

/// P5 from the two drop runs.
pub(super) fn p5(plan: &Plan, xdp: &RunResult, us: &RunResult) -> (Value, TableRow) {
    let l = plan.drop_limit.rate;
    let q = ratio(us.cpu_s, xdp.cpu_s);
    let (ax, sx) = xdp.admitted_at_agent();
    let (au, su) = us.admitted_at_agent();
    let (lx, lu) = (
        limited(ax, l, &xdp.metrics_measure),
        limited(au, l, &us.metrics_measure),
    );
    let valid = lx && lu && xdp.fast_path && !us.fast_path;
    let met = q.map(|q| valid && q >= GOAL_P5_MIN_RATIO);
    let note = if valid {
        format!(
            "both runs limited CCR-I (the agent's counters show refused requests, \
             admitted ≤ {LIMITED_MAX_FACTOR} L): XDP run {}/s ({sx}), userspace \
             run {}/s ({su}); the agent read {:.0} requests/s from pgw1 in the XDP \
             run and {:.0}/s in the userspace run. With drop, the sender's TCP \
             slows down under the policer, so an XDP run can admit less than L.",
            fmt_opt(ax, 0),
            fmt_opt(au, 0),
            xdp.requests_in_per_s,
            us.requests_in_per_s
        )
    } else {
        format!(
            "NOT A VALID COMPARISON: CCR-I limited in the XDP run: {lx} ({}/s, {sx}), in the \
             userspace run: {lu} ({}/s, {su}); limited = the agent's counters (labels peer, \
             class, outcome) show dropped/marked CCR-I and admitted ≤ {LIMITED_MAX_FACTOR} L \
             = {:.0}/s; XDP attached in run 1 and not in run 2. Without a userspace limiter \
             in `dra run` the fast-path-less run forwards the whole storm.",
            fmt_opt(ax, 0),
            fmt_opt(au, 0),
            LIMITED_MAX_FACTOR * l
        )
    };
    let side = |r: &RunResult, admitted: Option<f64>, source: &str| {
        json!({
            "run": r.name,
            "fast_path_attached": r.fast_path,
            "agent_cpu_s": r.cpu_s,
            "window_s": r.window_s,
            "agent_requests_in_per_s": r.requests_in_per_s,
            "ccr_i_offered_per_s_client": r.offered_per_s,
            "ccr_i_answered_2001_per_s_client": r.admitted_per_s,
            "ccr_i_admitted_per_s": admitted,
            "ccr_i_admitted_source": source,
            "ccr_i_by_outcome_measure": r.metrics_measure,
            "ccr_i_admitted_fraction_of_limit": admitted.map(|a| a / l),
            "limited": limited(admitted, l, &r.metrics_measure),
        })
    };
    let v = json!({
        "action": "drop",
        "limit_per_s": l, "burst": plan.drop_limit.burst,
        "xdp": side(xdp, ax, sx),
        "userspace": side(us, au, su),
        "ratio_userspace_to_xdp": q,
        "goal_min_ratio": GOAL_P5_MIN_RATIO,
        "valid": valid,
        "met": met,
        "note": note,
        "source": "utime+stime of `dra run` over the measure \
                   phase (/proc/<pid>/stat, sysconf(_SC_CLK_TCK))",
    });
    let measured = format!(
        "{}× ({:.2} s vs {:.2} s CPU; CCR-I admitted {} vs {} /s){}",
        fmt_opt(q, 2),
        us.cpu_s,
        xdp.cpu_s,
        fmt_opt(au, 0),
        fmt_opt(ax, 0),
        if valid { "" } else { " — INVALID: see note" }
    );
    let row = TableRow {
        metric: "P5 agent CPU in 10× storm: userspace limiting ÷ XDP drop".into(),
        measured,
        goal: format!("≥ {GOAL_P5_MIN_RATIO}×"),
        met,
    };
    (v, row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_limited_when_it_admitted_at_most_1_2_l() {
        let refused = BTreeMap::from([("dra_fastpath_requests_total/dropped".to_owned(), 900.0)]);
        let none = BTreeMap::from([("dra_fastpath_requests_total/dropped".to_owned(), 0.0)]);
        assert!(limited(Some(500.0), 500.0, &refused));
        assert!(
            limited(Some(190.0), 500.0, &refused),
            "TCP back-pressure below L still limited"
        );
        assert!(
            !limited(Some(4800.0), 500.0, &refused),
            "a run that forwarded the storm did not limit"
        );
        assert!(
            !limited(Some(231.0), 500.0, &BTreeMap::new()),
            "no counters of the agent: not verified"
        );
        assert!(
            !limited(Some(231.0), 500.0, &none),
            "nothing refused: low throughput is not limiting"
        );
        assert!(!limited(None, 500.0, &refused));
    }
}
