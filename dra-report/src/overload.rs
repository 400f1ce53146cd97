//! The overload bench's results (`cargo xtask bench overload`):
//! `bench/results/overload-latest.json`. The goals are judged from the typed levels
//! ([`judge`]), never from the JSON the bench wrote.

use serde::{Deserialize, Serialize};

/// One run of the bench: the CPU cap, the capacity, every level of every arm, the goals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverloadReport {
    /// The agent's CPU cap (cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`).
    pub cpu_quota_us: u64,
    pub cpu_period_us: u64,
    /// Seconds of each level's measured load (after its warm-up).
    pub load_s: f64,
    /// The gateways' request timeout.
    pub request_timeout_ms: u64,
    /// Capacity C per arm: closed loop, without the overload control.
    pub capacity: Vec<Capacity>,
    /// What one answer from a request's bytes costs the agent, per arm.
    pub answer_cost: Vec<AnswerCost>,
    pub levels: Vec<Level>,
    pub goals: Vec<Goal>,
}

/// Capacity C of one arm: relayed requests/s of a closed loop (4 gateways × 25 in
/// flight), the agent capped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// XDP attached (else the agent alone).
    pub xdp: bool,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The agent's CPU time (every thread) per relayed request, µs.
    pub cpu_us_per_request: f64,
}

/// The same closed loop with every request over a `reject` limit of its gateway: each
/// one marked (by XDP, or by the reader's limiter) and answered from its bytes, never
/// decoded — as a shed request is answered 3004.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerCost {
    pub xdp: bool,
    /// Answers per second (the agent capped as for C).
    pub answers_per_s: f64,
    /// Of the answers, the share answered by the agent itself (the rest: within the
    /// limits' bursts, relayed).
    pub rejected_fraction: f64,
    /// The agent's CPU time per answer, µs.
    pub cpu_us_per_answer: f64,
    /// ÷ the arm's CPU time per relayed request.
    pub of_relayed: f64,
}

/// One level of one arm: open-loop gateways at `factor` × C.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub xdp: bool,
    /// The overload control on.
    pub protection: bool,
    pub factor: f64,
    /// What the gateways were asked to send, requests/s.
    pub target_per_s: f64,
    /// What they sent (the generator may not reach the target), requests/s.
    pub sent_per_s: f64,
    /// Answered 2001 within the request timeout, per second.
    pub goodput_per_s: f64,
    /// ÷ C of the arm.
    pub goodput_of_c: f64,
    /// Answered 3004 (shed, answered), per second.
    pub too_busy_per_s: f64,
    /// Shed and discarded by the agent (its counters), per second.
    pub discarded_per_s: f64,
    /// Timed out at the gateways, per second.
    pub timeouts_per_s: f64,
    /// CCR-T sent and answered 2001 (`None` fraction when none was sent).
    pub ccr_t_sent: u64,
    pub ccr_t_2001: u64,
    pub ccr_t_2001_fraction: Option<f64>,
    /// Latency of the answered requests, the worst class's p50 and p99.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The agent's resident memory at the end of the level.
    pub rss_kb: u64,
    /// The highest overload level the agent reported during the load.
    pub max_level: u8,
    /// The agent's CPU time over the load's interior ÷ what its quota allowed: below
    /// ~0.9 under overload, the machine (the gateways, the kernel's networking), not
    /// the cap, held the agent back.
    pub cpu_of_quota: f64,
}

/// A goal as judged: what was measured against what was wanted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    pub name: String,
    pub wanted: String,
    pub measured: String,
    pub met: bool,
}

/// The factors from which the goodput goal applies (1× to 8×).
pub const GOODPUT_FROM: f64 = 1.0;
/// Goodput at least this share of C.
pub const GOODPUT_MIN: f64 = 0.9;
/// CCR-T answered 2001 at least this share of those sent, up to [`CCR_T_UP_TO`] × C.
pub const CCR_T_MIN: f64 = 0.99;
pub const CCR_T_UP_TO: f64 = 4.0;
/// p99 and RSS at most this times the 0.5 × C level's.
pub const AT_MOST_TIMES_HALF: f64 = 2.0;
/// Without protection, the collapse: goodput below this share of C at 1.5 × C or more.
pub const COLLAPSE_BELOW: f64 = 0.5;
/// An answer from bytes at most this share of a relayed request's CPU time.
pub const ANSWER_COST_MAX: f64 = 0.25;

/// The goals, from the levels of the XDP arm (protection on, and off for the collapse)
/// and its answer cost.
pub fn judge(levels: &[Level], answer_cost: &[AnswerCost]) -> Vec<Goal> {
    let on: Vec<&Level> = levels.iter().filter(|l| l.xdp && l.protection).collect();
    let off: Vec<&Level> = levels.iter().filter(|l| l.xdp && !l.protection).collect();
    let fmt = |v: &[String]| v.join(", ");
    let mut goals = Vec::new();
    let mut push = |name: &str, wanted: String, measured: Vec<String>, met: bool| {
        goals.push(Goal {
            name: name.to_owned(),
            wanted,
            measured: fmt(&measured),
            met,
        });
    };
    let over: Vec<&&Level> = on.iter().filter(|l| l.factor >= GOODPUT_FROM).collect();
    push(
        "goodput, protection on, XDP",
        format!("≥ {GOODPUT_MIN} C at every level from {GOODPUT_FROM}×"),
        over.iter()
            .map(|l| format!("{}×: {:.2} C", l.factor, l.goodput_of_c))
            .collect(),
        !over.is_empty() && over.iter().all(|l| l.goodput_of_c >= GOODPUT_MIN),
    );
    let upto: Vec<&&Level> = on.iter().filter(|l| l.factor <= CCR_T_UP_TO).collect();
    push(
        "CCR-T answered 2001, protection on, XDP",
        format!(
            "≥ {:.0} % of those sent up to {CCR_T_UP_TO}×",
            CCR_T_MIN * 100.0
        ),
        upto.iter()
            .map(|l| match l.ccr_t_2001_fraction {
                Some(f) => format!("{}×: {:.2} %", l.factor, f * 100.0),
                None => format!("{}×: none sent", l.factor),
            })
            .collect(),
        !upto.is_empty()
            && upto
                .iter()
                .all(|l| l.ccr_t_2001_fraction.is_some_and(|f| f >= CCR_T_MIN)),
    );
    let half = on.iter().find(|l| l.factor == 0.5);
    match half {
        Some(h) => {
            push(
                "p99 of answered, protection on, XDP",
                format!("≤ {AT_MOST_TIMES_HALF} × {:.1} ms (0.5×)", h.p99_ms),
                on.iter()
                    .map(|l| format!("{}×: {:.1} ms", l.factor, l.p99_ms))
                    .collect(),
                on.iter().all(|l| l.p99_ms <= AT_MOST_TIMES_HALF * h.p99_ms),
            );
            push(
                "agent RSS, protection on, XDP",
                format!("≤ {AT_MOST_TIMES_HALF} × {} kB (0.5×)", h.rss_kb),
                on.iter()
                    .map(|l| format!("{}×: {} kB", l.factor, l.rss_kb))
                    .collect(),
                on.iter()
                    .all(|l| l.rss_kb as f64 <= AT_MOST_TIMES_HALF * h.rss_kb as f64),
            );
        }
        None => {
            for name in [
                "p99 of answered, protection on, XDP",
                "agent RSS, protection on, XDP",
            ] {
                push(
                    name,
                    "the 0.5× level to compare".into(),
                    vec!["none".into()],
                    false,
                );
            }
        }
    }
    let heavy: Vec<&&Level> = off.iter().filter(|l| l.factor >= 1.5).collect();
    push(
        "protection off collapses (the reference)",
        format!("goodput < {COLLAPSE_BELOW} C from 1.5×"),
        heavy
            .iter()
            .map(|l| format!("{}×: {:.2} C", l.factor, l.goodput_of_c))
            .collect(),
        !heavy.is_empty() && heavy.iter().all(|l| l.goodput_of_c < COLLAPSE_BELOW),
    );
    let cost = answer_cost.iter().find(|a| a.xdp);
    push(
        "an answer from bytes, XDP",
        format!("≤ {ANSWER_COST_MAX} × a relayed request's CPU time"),
        cost.map_or(vec!["not measured".into()], |a| {
            vec![format!(
                "{:.2} µs per answer, {:.3} × relayed",
                a.cpu_us_per_answer, a.of_relayed
            )]
        }),
        cost.is_some_and(|a| a.of_relayed <= ANSWER_COST_MAX),
    );
    goals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(xdp: bool, protection: bool, factor: f64, goodput_of_c: f64) -> Level {
        Level {
            xdp,
            protection,
            factor,
            target_per_s: factor * 1000.0,
            sent_per_s: factor * 1000.0,
            goodput_per_s: goodput_of_c * 1000.0,
            goodput_of_c,
            too_busy_per_s: 0.0,
            discarded_per_s: 0.0,
            timeouts_per_s: 0.0,
            ccr_t_sent: 100,
            ccr_t_2001: 100,
            ccr_t_2001_fraction: Some(1.0),
            p50_ms: 1.0,
            p99_ms: 10.0,
            rss_kb: 20_000,
            max_level: 0,
            cpu_of_quota: 1.0,
        }
    }

    #[test]
    fn the_goals_are_judged_from_the_levels() {
        let mut levels = vec![
            level(true, true, 0.5, 0.5),
            level(true, true, 1.0, 0.95),
            level(true, true, 2.0, 0.91),
            level(true, false, 2.0, 0.2),
        ];
        let mut cost = vec![AnswerCost {
            xdp: true,
            answers_per_s: 5000.0,
            rejected_fraction: 1.0,
            cpu_us_per_answer: 2.0,
            of_relayed: 0.2,
        }];
        let g = judge(&levels, &cost);
        assert!(g.iter().all(|g| g.met), "{g:#?}");
        levels[2].goodput_of_c = 0.85;
        levels[1].ccr_t_2001_fraction = Some(0.98);
        cost[0].of_relayed = 0.3;
        let g = judge(&levels, &cost);
        let missed: Vec<&str> = g
            .iter()
            .filter(|g| !g.met)
            .map(|g| g.name.as_str())
            .collect();
        assert_eq!(
            missed,
            [
                "goodput, protection on, XDP",
                "CCR-T answered 2001, protection on, XDP",
                "an answer from bytes, XDP"
            ]
        );
        // Not measured: missed, never met.
        assert!(!judge(&levels, &[]).last().unwrap().met);
    }

    #[test]
    fn a_report_round_trips_and_a_renamed_field_fails() {
        let r = OverloadReport {
            cpu_quota_us: 2500,
            cpu_period_us: 10_000,
            load_s: 10.0,
            request_timeout_ms: 2000,
            capacity: vec![Capacity {
                xdp: true,
                requests_per_s: 1000.0,
                p50_ms: 1.0,
                p99_ms: 9.0,
                cpu_us_per_request: 250.0,
            }],
            answer_cost: Vec::new(),
            levels: vec![level(true, true, 1.0, 0.9)],
            goals: Vec::new(),
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(crate::parse::<OverloadReport>(&text, "t").unwrap(), r);
        let renamed = text.replace("goodput_of_c", "goodput_ratio");
        let e = crate::parse::<OverloadReport>(&renamed, "t").unwrap_err();
        assert!(e.to_string().contains("goodput"), "{e}");
    }
}
