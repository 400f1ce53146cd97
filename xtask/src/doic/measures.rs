//! The numbers of `cargo xtask bench doic` from its runs: the client's per-second rows
//! and summary, the agent's metrics (docs/bench.md, "DOIC").

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use dra_report::client::{Report, Row};
use serde::Serialize;
use serde_json::{Value, json};

use super::run::RunOutput;
use crate::{
    bench::{config::MEASURE, rows::ratio, window::INTERIOR},
    metrics::Snap,
    results::TableRow,
};

/// Part a: `rejected_3002_with` at most this share of `rejected_3002_without`.
pub const GOAL_REJECT_SHARE: f64 = 0.20;
/// Part a: the admitted CCR-I rates within this relative difference.
pub const GOAL_ADMITTED_DIFF: f64 = 0.05;
/// Part b: `sent_to_reporter_ratio` within this of the reduction asked for.
pub const GOAL_RATIO_TOLERANCE: f64 = 0.05;

/// One second of one class in the client's rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Second {
    pub sent: u64,
    pub shed: u64,
    pub answered: BTreeMap<String, u64>,
}

impl Second {
    fn code(&self, c: &str) -> u64 {
        // A code the second did not answer with: 0 answers of it.
        self.answered.get(c).copied().unwrap_or(0)
    }
}

/// Per second of `measure`: `class` in the client's rows (a second without it: zeros,
/// since the client leaves a class without activity out of its row).
pub fn seconds(rows: &[Row], class: &str) -> Vec<Second> {
    rows.iter()
        .filter(|r| r.phase == MEASURE)
        .map(|r| {
            r.classes
                .get(class)
                .map_or_else(Second::default, |c| Second {
                    sent: c.sent,
                    shed: c.doic_shed,
                    answered: c.answered.clone(),
                })
        })
        .collect()
}

/// Mean per second over the interior of `measure` of `f`.
fn interior(secs: &[Second], f: impl Fn(&Second) -> u64) -> Option<f64> {
    let v: Vec<f64> = secs.iter().map(|s| f(s) as f64).collect();
    INTERIOR.mean(&v)
}

/// Every request of the run answered exactly once, from the client's summary: per class
/// answered = sent, no timeout, no request lost, no late answer. Offered = sent + shed
/// at the gateway.
pub fn accounting(summary: &Report) -> (bool, Value) {
    let mut classes = serde_json::Map::new();
    let mut ok = !summary.classes.is_empty();
    for (name, c) in &summary.classes {
        let answered = c.answered_total();
        let good = answered == c.sent && c.timeouts == 0 && c.unanswered == 0;
        ok &= good;
        classes.insert(
            name.clone(),
            json!({
                "offered": c.sent + c.doic_shed,
                "sent": c.sent,
                "shed_at_gateway": c.doic_shed,
                "answered": answered,
                "timeouts": c.timeouts,
                "unanswered": c.unanswered,
                "not_sent_no_session": c.not_sent,
                "answered_exactly_once": good,
            }),
        );
    }
    let late = summary.peers.late_answers;
    ok &= late == 0;
    (
        ok,
        json!({ "ok": ok, "late_answers": late, "classes": classes }),
    )
}

/// Answers of `class` with `code` over the run (none of that class or code: 0 of it).
fn answered_code(summary: &Report, class: &str, code: u32) -> u64 {
    summary.class(class).answered_with(code)
}

fn fmt(v: Option<f64>, d: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.d$}"))
}

/// Part a's side of one run: CCR-I per second over the interior (`None`: no interior
/// second to average).
#[derive(Serialize)]
struct StormSide {
    run: &'static str,
    offered_per_s: Option<f64>,
    sent_per_s: Option<f64>,
    shed_at_gateway_per_s: Option<f64>,
    admitted_2001_per_s: Option<f64>,
    rejected_3002_per_s: Option<f64>,
    rejected_3002_whole_run: u64,
    ccr_u_p99_ms: Option<f64>,
    answered_exactly_once: bool,
    accounting: Value,
    files: String,
}

fn storm_side(r: &RunOutput) -> StormSide {
    let s = seconds(&r.rows, "gx_ccr_i");
    let (ok, acc) = accounting(&r.summary);
    StormSide {
        run: r.name,
        offered_per_s: interior(&s, |x| x.sent + x.shed),
        sent_per_s: interior(&s, |x| x.sent),
        shed_at_gateway_per_s: interior(&s, |x| x.shed),
        admitted_2001_per_s: interior(&s, |x| x.code("2001")),
        rejected_3002_per_s: interior(&s, |x| x.code("3002")),
        rejected_3002_whole_run: answered_code(&r.summary, "gx_ccr_i", 3002),
        ccr_u_p99_ms: r.summary.classes.get("gx_ccr_u").map(|c| c.latency.p99_ms),
        answered_exactly_once: ok,
        accounting: acc,
        files: r.files.clone(),
    }
}

/// Part a from its two runs (without, with DOIC gateways): JSON and table row.
pub fn storm(without: &RunOutput, with: &RunOutput, limit: f64) -> (Value, TableRow) {
    let (a, b) = (storm_side(without), storm_side(with));
    let (rej_wo, rej_w) = (a.rejected_3002_per_s, b.rejected_3002_per_s);
    let (adm_wo, adm_w) = (a.admitted_2001_per_s, b.admitted_2001_per_s);
    let share = rej_w.zip(rej_wo).and_then(|(w, wo)| ratio(w, wo));
    let diff = adm_w
        .zip(adm_wo)
        .and_then(|(w, wo)| ratio((w - wo).abs(), wo));
    let once = a.answered_exactly_once && b.answered_exactly_once;
    let met = share
        .zip(diff)
        .map(|(s, d)| s <= GOAL_REJECT_SHARE && d <= GOAL_ADMITTED_DIFF && once);
    let p99 = b
        .ccr_u_p99_ms
        .zip(a.ccr_u_p99_ms)
        .and_then(|(w, wo)| ratio(w, wo));
    let shed_w = b.shed_at_gateway_per_s;
    let v = json!({
        "limit_per_s": limit,
        "rejected_3002_without": rej_wo,
        "rejected_3002_with": rej_w,
        "rejected_share": share,
        "admitted_rate_without": adm_wo,
        "admitted_rate_with": adm_w,
        "admitted_rate_difference": diff,
        "ccr_u_p99_ratio": p99,
        "answered_exactly_once": once,
        "goal": format!(
            "rejected_3002_with <= {} % of rejected_3002_without, admitted rates within {} %, \
             every request answered exactly once (answered + shed at the gateway = offered)",
            100.0 * GOAL_REJECT_SHARE, 100.0 * GOAL_ADMITTED_DIFF
        ),
        "met": met,
        "unit": format!("CCR-I per second, mean over the interior of {MEASURE} (client rows)"),
        "without": a,
        "with": b,
    });
    let row = TableRow {
        metric: "DOIC storm at the source: CCR-I 3002/s with DOIC gateways ÷ without \
                 (10× storm, reject)"
            .into(),
        measured: format!(
            "{} % ({} vs {} /s; admitted {} vs {} /s, Δ {} %; shed at the gateway {} /s; \
             answered once: {}; CCR-U p99 ratio {})",
            fmt(share.map(|s| 100.0 * s), 2),
            fmt(rej_w, 1),
            fmt(rej_wo, 1),
            fmt(adm_w, 1),
            fmt(adm_wo, 1),
            fmt(diff.map(|d| 100.0 * d), 2),
            fmt(shed_w, 1),
            if once { "yes" } else { "no" },
            fmt(p99, 2)
        ),
        goal: format!(
            "≤ {} % at admitted rates within {} %, every request answered once",
            100.0 * GOAL_REJECT_SHARE,
            100.0 * GOAL_ADMITTED_DIFF
        ),
        met,
    };
    (v, row)
}

/// Requests the agent sent to `peer` per second over the interior. Both servers are
/// sent requests (round robin) from the start of the run: a scrape without the series
/// is an error.
fn sent_to(r: &RunOutput, peer: &str) -> Result<f64> {
    let get = |s: &Snap, at: &str| {
        s.sum(
            "dra_requests_total",
            &[("peer", peer), ("direction", "out")],
        )
        .with_context(|| {
            format!(
                "run {}: the agent's metrics at the {at} of the interior",
                r.name
            )
        })
    };
    Ok((get(&r.interior.1, "end")? - get(&r.interior.0, "start")?) / r.interior_s)
}

/// Requests to `peer` abated with `outcome`. The agent creates the series at the first
/// such request: absent, none (the baseline agent, without DOIC towards the servers,
/// never has them).
fn abated(s: &Snap, peer: &str, outcome: &str) -> f64 {
    s.sum_or_zero_if_absent(
        "dra_doic_requests_abated_total",
        &[("peer", peer), ("outcome", outcome)],
    )
}

/// Part b's side of one run: per second over the interior (agent metrics), and the
/// run's answers (client summary).
#[derive(Serialize)]
struct ServersSide {
    run: &'static str,
    sent_to_pcrf1_per_s: f64,
    sent_to_pcrf2_per_s: f64,
    abated_diverted_per_s: f64,
    abated_rejected_per_s: f64,
    diverted_whole_run: f64,
    rejected_3004_whole_run: f64,
    reduction_percent_at_interior_end: f64,
    olrs_applied: f64,
    ccr_i_3004: u64,
    ccr_t_shed: u64,
    answered_by_server: BTreeMap<String, u64>,
    answered_exactly_once: bool,
    accounting: Value,
    files: String,
}

fn servers_side(r: &RunOutput, reporter: &str) -> Result<ServersSide> {
    let (ok, acc) = accounting(&r.summary);
    let (s0, s1) = &r.interior;
    let per_s = |o: &str| (abated(s1, reporter, o) - abated(s0, reporter, o)) / r.interior_s;
    Ok(ServersSide {
        run: r.name,
        sent_to_pcrf1_per_s: sent_to(r, "pcrf1")?,
        sent_to_pcrf2_per_s: sent_to(r, "pcrf2")?,
        abated_diverted_per_s: per_s("diverted"),
        abated_rejected_per_s: per_s("rejected"),
        diverted_whole_run: abated(&r.end, reporter, "diverted"),
        rejected_3004_whole_run: abated(&r.end, reporter, "rejected"),
        // Set for a server with DOIC only, and the OC-OLR series created at the first
        // report: the baseline agent (no DOIC towards the servers) has neither, and has
        // no reduction in force and no report applied.
        reduction_percent_at_interior_end: s1
            .sum_or_zero_if_absent("dra_doic_server_reduction_percent", &[("peer", reporter)]),
        olrs_applied: r.end.sum_or_zero_if_absent(
            "dra_doic_olrs_received_total",
            &[("peer", reporter), ("result", "applied")],
        ),
        ccr_i_3004: answered_code(&r.summary, "gx_ccr_i", 3004),
        // A shed CCR-T of a bound session is answered 5012 (RFC 7683 §8), else 3004.
        ccr_t_shed: answered_code(&r.summary, "gx_ccr_t", 3004)
            + answered_code(&r.summary, "gx_ccr_t", 5012),
        answered_by_server: r.summary.servers.clone(),
        answered_exactly_once: ok,
        accounting: acc,
        files: r.files.clone(),
    })
}

/// Part b from its runs (baseline, report): JSON and table row. `reporter`: the
/// reporting PCRF; `reduction`: what it asks for, percent. An error when a run's
/// metrics lack a figure.
pub fn servers(
    baseline: &RunOutput,
    report: &RunOutput,
    reporter: &str,
    reduction: u32,
) -> Result<(Value, TableRow)> {
    let (a, b) = (
        servers_side(baseline, reporter)?,
        servers_side(report, reporter)?,
    );
    let q = ratio(b.sent_to_pcrf1_per_s, a.sent_to_pcrf1_per_s);
    let sent = b.sent_to_pcrf1_per_s;
    let would = sent + b.abated_diverted_per_s + b.abated_rejected_per_s;
    let share = ratio(sent, would);
    let ccr_t_shed = b.ccr_t_shed;
    let ccr_i_diverted = b.abated_diverted_per_s;
    let once = a.answered_exactly_once && b.answered_exactly_once;
    let target = 1.0 - f64::from(reduction) / 100.0;
    let met = q.map(|q| {
        (q - target).abs() <= GOAL_RATIO_TOLERANCE
            && ccr_t_shed == 0
            && ccr_i_diverted > 0.0
            && once
    });
    let (sent_w, sent_wo, diverted_run) = (
        b.sent_to_pcrf1_per_s,
        a.sent_to_pcrf1_per_s,
        b.diverted_whole_run,
    );
    let v = json!({
        "reporter": reporter,
        "reduction_asked_percent": reduction,
        "sent_to_reporter_ratio": q,
        "sent_to_reporter_ratio_of": "requests the agent sent pcrf1 per second over the \
            interior of measure, report run ÷ baseline run (agent metrics \
            dra_requests_total{peer=\"pcrf1\",direction=\"out\"})",
        "routing_share_cross_check": share,
        "routing_share_of": "report run: sent to pcrf1 ÷ (sent + abated), same interior",
        "ccr_t_shed": ccr_t_shed,
        "ccr_i_diverted_per_s": ccr_i_diverted,
        "diverted_whole_run": diverted_run,
        "answered_exactly_once": once,
        "goal": format!(
            "sent_to_reporter_ratio {target:.2} ± {GOAL_RATIO_TOLERANCE}, 0 CCR-T shed while \
             CCR-I are, every request answered exactly once"
        ),
        "met": met,
        "baseline": a,
        "report": b,
    });
    let row = TableRow {
        metric: format!(
            "DOIC server overload: requests to {reporter} during its {reduction} % loss \
             report ÷ without"
        ),
        measured: format!(
            "{} ({:.1} vs {:.1} /s; routing share {}; CCR-I diverted {:.1} /s, CCR-T shed \
             {ccr_t_shed}; answered once: {})",
            fmt(q, 3),
            sent_w,
            sent_wo,
            fmt(share, 3),
            ccr_i_diverted,
            if once { "yes" } else { "no" }
        ),
        goal: format!(
            "{target:.2} ± {GOAL_RATIO_TOLERANCE}, 0 CCR-T shed while CCR-I are, every \
             request answered once"
        ),
        met,
    };
    Ok((v, row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_the_shed_and_the_answers_of_the_measure_phase() {
        use crate::bench::rows::tests::row;
        let mut shed = row(6, "measure", "gx_ccr_i", 500, &[("2001", 498), ("3002", 2)]);
        shed.classes.get_mut("gx_ccr_i").unwrap().doic_shed = 4500;
        let rows = [
            row(5, "open", "gx_ccr_i", 9, &[]),
            shed,
            row(7, "measure", "gx_ccr_u", 1, &[]),
        ];
        let s = seconds(&rows, "gx_ccr_i");
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].sent, s[0].shed, s[0].code("3002")), (500, 4500, 2));
        assert_eq!(s[1], Second::default());
    }

    #[test]
    fn accounting_fails_on_a_timeout_a_lost_request_or_a_missing_answer() {
        use dra_report::client::ClassSummary;
        let mut good = Report::default();
        good.classes.insert(
            "gx_ccr_i".into(),
            ClassSummary {
                sent: 10,
                doic_shed: 90,
                answered: [("2001".to_owned(), 8), ("3002".to_owned(), 2)].into(),
                ..ClassSummary::default()
            },
        );
        let (ok, v) = accounting(&good);
        assert!(ok);
        assert_eq!(v["classes"]["gx_ccr_i"]["offered"], 100);
        let mut t = good.clone();
        t.classes.get_mut("gx_ccr_i").unwrap().timeouts = 1;
        assert!(!accounting(&t).0);
        let mut m = good.clone();
        m.classes
            .get_mut("gx_ccr_i")
            .unwrap()
            .answered
            .insert("2001".into(), 7);
        assert!(!accounting(&m).0);
        let mut l = good;
        l.peers.late_answers = 1;
        assert!(!accounting(&l).0);
        assert!(!accounting(&Report::default()).0);
    }
}
