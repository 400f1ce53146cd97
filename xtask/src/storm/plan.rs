//! The runs (two pairs, each repeated) and the bench configs they use, read and
//! cross-checked before anything starts (`plan`).

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, Result, ensure};

use super::{BASELINE_SCENARIO, CLASS, STORM_FACTOR};
use crate::{
    bench::{
        config::{
            LOW_LATENCY, Limit, MEASURE, REJECT_CONFIG, STORM_SCENARIO, config_limit,
            measure_phase, read_toml,
        },
        window::INTERIOR,
    },
    lab::SERVER_LATENCY,
};

/// One run of the benchmark: its dra config, client scenario and the servers' latency.
pub(super) struct RunSpec {
    pub(super) name: &'static str,
    pub(super) config: &'static str,
    pub(super) scenario: &'static str,
    pub(super) fast_path: bool,
    /// The simulated servers' CCR service time (`dra-loadgen server --latency`); the
    /// servers are restarted when it changes from one run to the next.
    pub(super) server_latency: &'static str,
    pub(super) purpose: &'static str,
}

/// The runs, in order: P4's primary pair with low fixed server latency first, then the
/// pair with the lab's exponential latency (P3 and P4's second row), which the coalesced
/// case that follows keeps.
pub(super) const RUNS: [RunSpec; 4] = [
    RunSpec {
        name: "no-storm-low-latency",
        config: REJECT_CONFIG,
        scenario: BASELINE_SCENARIO,
        fast_path: true,
        server_latency: LOW_LATENCY,
        purpose: "P4 without storm, servers at low fixed latency",
    },
    RunSpec {
        name: "storm-reject-low-latency",
        config: REJECT_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: true,
        server_latency: LOW_LATENCY,
        purpose: "P4 with storm (CCR-I at 10 L, reject), servers at low fixed latency",
    },
    RunSpec {
        name: "no-storm",
        config: REJECT_CONFIG,
        scenario: BASELINE_SCENARIO,
        fast_path: true,
        server_latency: SERVER_LATENCY,
        purpose: "P4 second row without storm: CCR-I at L, steady CCR-U",
    },
    RunSpec {
        name: "storm-reject-xdp",
        config: REJECT_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: true,
        server_latency: SERVER_LATENCY,
        purpose: "P3 and P4 second row with storm: CCR-I at 10 L, steady CCR-U, action reject",
    },
];

/// What the runs share, checked before anything starts.
pub struct Plan {
    pub limit: Limit,
    pub measure_start_s: f64,
    pub measure_s: f64,
    pub storm_rates: BTreeMap<String, f64>,
    pub baseline_rates: BTreeMap<String, f64>,
}

/// Reads and cross-checks the bench config and the scenarios: they differ only in the
/// `measure` CCR-I rate, which is L and 10·L of the config's one limit.
pub fn plan(root: &Path) -> Result<Plan> {
    let reject = read_toml(root, REJECT_CONFIG)?;
    let (limit, fp) = config_limit(&reject).context(REJECT_CONFIG)?;
    ensure!(
        fp && limit.action == "reject",
        "{REJECT_CONFIG}: expected action reject with XDP attached"
    );
    let b = read_toml(root, BASELINE_SCENARIO)?;
    let s = read_toml(root, STORM_SCENARIO)?;
    let (b_start, b_len, b_rates) = measure_phase(&b).context(BASELINE_SCENARIO)?;
    let (s_start, s_len, s_rates) = measure_phase(&s).context(STORM_SCENARIO)?;
    ensure!(
        b_start == s_start && b_len == s_len,
        "the two scenarios' {MEASURE} phases must be at the same time"
    );
    ensure!(
        s_len.fract() == 0.0 && INTERIOR.leaves(s_len, 3),
        "{MEASURE} must last a whole number of seconds ≥ 6"
    );
    ensure!(
        s_start.fract() == 0.0,
        "{MEASURE} must start on a whole second"
    );
    ensure!(
        b_rates.get(CLASS) == Some(&limit.rate),
        "{BASELINE_SCENARIO}: {MEASURE} {CLASS} must be L = {}",
        limit.rate
    );
    ensure!(
        s_rates.get(CLASS) == Some(&(STORM_FACTOR * limit.rate)),
        "{STORM_SCENARIO}: {MEASURE} {CLASS} must be {STORM_FACTOR} × L = {}",
        STORM_FACTOR * limit.rate
    );
    let strip = |v: &toml::Value| {
        let mut v = v.clone();
        if let Some(t) = v.as_table_mut() {
            t.remove("name");
        }
        if let Some(phases) = v.get_mut("phase").and_then(toml::Value::as_array_mut) {
            for p in phases {
                if p.get("name").and_then(toml::Value::as_str) == Some(MEASURE)
                    && let Some(r) = p.get_mut("rates").and_then(toml::Value::as_table_mut)
                {
                    r.remove(CLASS);
                }
            }
        }
        v
    };
    ensure!(
        strip(&b) == strip(&s),
        "the scenarios must differ only in the {MEASURE} {CLASS} rate"
    );
    ensure!(
        // Not named: 0/s, which fails the check.
        s_rates.get("gx_ccr_u").copied().unwrap_or(0.0) > 0.0,
        "{MEASURE} needs steady CCR-U (P4)"
    );
    Ok(Plan {
        limit,
        measure_start_s: s_start,
        measure_s: s_len,
        storm_rates: s_rates,
        baseline_rates: b_rates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_config_carries_one_limit_and_the_scenarios_offer_l_and_10_l() {
        let root = crate::workspace_root();
        let p = plan(&root).unwrap();
        assert_eq!(p.limit.action, "reject");
        assert_eq!(p.storm_rates[CLASS], 10.0 * p.limit.rate);
        assert_eq!(p.baseline_rates[CLASS], p.limit.rate);
        assert_eq!(p.storm_rates["gx_ccr_u"], p.baseline_rates["gx_ccr_u"]);
        // P4's two pairs: the same configs and scenarios, only the servers' latency differs.
        assert_eq!(RUNS[0].scenario, RUNS[2].scenario);
        assert_eq!(RUNS[1].scenario, RUNS[3].scenario);
        assert_ne!(RUNS[0].server_latency, RUNS[2].server_latency);
    }
}
