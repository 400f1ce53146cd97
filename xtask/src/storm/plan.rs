//! The runs (two pairs, each repeated) and the bench configs they use, read and
//! cross-checked before anything starts (`plan`).

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, Result, bail, ensure};

use super::{
    BASELINE_SCENARIO, CLASS, LOW_LATENCY, MEASURE, PEER, REJECT_CONFIG, STORM_FACTOR,
    STORM_SCENARIO,
};
use crate::{
    bench::window::INTERIOR,
    lab::{DRA_CLIENT_IF, SERVER_LATENCY},
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

/// The one limit of the bench configs.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    pub rate: f64,
    pub burst: Option<i64>,
    pub action: String,
}

fn num(v: &toml::Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

pub(crate) fn read_toml(root: &Path, rel: &str) -> Result<toml::Value> {
    let p = root.join(rel);
    let text = std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))?;
    toml::from_str(&text).with_context(|| format!("parse {}", p.display()))
}

/// Checks a bench dra config: dynamic limiting off, exactly one limit (pgw1 ingress Gx
/// CCR-I), and returns it with whether a fast-path interface is set.
pub fn config_limit(v: &toml::Value) -> Result<(Limit, bool)> {
    let drl = v
        .get("global")
        .and_then(|g| g.get("dynamic_rate_limiting"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(false);
    ensure!(
        !drl,
        "dynamic_rate_limiting must be false (the DB CPU would move the limit being measured)"
    );
    ensure!(
        v.get("peer_rate_limit_profile").is_none(),
        "no [[peer_rate_limit_profile]] expected"
    );
    let profiles = v
        .get("message_rate_limit_profile")
        .and_then(toml::Value::as_array)
        .context("no [[message_rate_limit_profile]]")?;
    ensure!(
        profiles.len() == 1,
        "exactly one [[message_rate_limit_profile]] expected, found {}",
        profiles.len()
    );
    let p = &profiles[0];
    let s = |k: &str| p.get(k).and_then(toml::Value::as_str).unwrap_or("");
    ensure!(
        s("peer") == PEER
            && s("direction") == "ingress"
            && s("application") == "gx"
            && s("command") == "ccr"
            && s("request_type") == "initial",
        "the limit must be {PEER} ingress Gx CCR-I"
    );
    let limit = Limit {
        rate: p.get("rate").and_then(num).context("limit without rate")?,
        burst: p.get("burst").and_then(toml::Value::as_integer),
        action: if s("action").is_empty() {
            "reject".to_owned()
        } else {
            s("action").to_owned()
        },
    };
    let iface = v
        .get("fast_path")
        .and_then(|f| f.get("interface"))
        .and_then(toml::Value::as_str);
    if let Some(i) = iface {
        ensure!(
            i == DRA_CLIENT_IF,
            "fast_path.interface must be {DRA_CLIENT_IF}, got {i}"
        );
    }
    Ok((limit, iface.is_some()))
}

/// The `measure` phase: (start offset s, duration s, rates by class).
pub fn measure_phase(scn: &toml::Value) -> Result<(f64, f64, BTreeMap<String, f64>)> {
    let phases = scn
        .get("phase")
        .and_then(toml::Value::as_array)
        .context("no [[phase]]")?;
    let mut start = 0.0;
    for p in phases {
        let d = p
            .get("duration_s")
            .and_then(num)
            .context("phase without duration_s")?;
        if p.get("name").and_then(toml::Value::as_str) == Some(MEASURE) {
            let mut rates = BTreeMap::new();
            if let Some(r) = p.get("rates").and_then(toml::Value::as_table) {
                for (k, v) in r {
                    rates.insert(
                        k.clone(),
                        num(v).with_context(|| format!("{MEASURE} rate {k} must be a number"))?,
                    );
                }
            }
            return Ok((start, d, rates));
        }
        start += d;
    }
    bail!("no phase named {MEASURE:?}")
}

/// Total length of a scenario, seconds.
pub(crate) fn scenario_secs(scn: &toml::Value) -> f64 {
    scn.get("phase")
        .and_then(toml::Value::as_array)
        .map_or(0.0, |a| {
            a.iter()
                .filter_map(|p| p.get("duration_s").and_then(num))
                .sum()
        })
}

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

    #[test]
    fn a_config_with_dynamic_limiting_or_a_second_limit_is_refused() {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join(REJECT_CONFIG)).unwrap();
        let ok: toml::Value = toml::from_str(&text).unwrap();
        assert!(config_limit(&ok).is_ok());
        let drl: toml::Value = toml::from_str(&text.replace(
            "dynamic_rate_limiting = false",
            "dynamic_rate_limiting = true",
        ))
        .unwrap();
        assert!(config_limit(&drl).is_err());
        let two = format!(
            "{text}\n[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"update\"\nrate = 9\n"
        );
        assert!(config_limit(&toml::from_str(&two).unwrap()).is_err());
    }
}
