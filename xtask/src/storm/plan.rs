//! The four runs and the bench configs they use, read and cross-checked before anything
//! starts (`plan`).

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, Result, bail, ensure};

use super::{
    BASELINE_SCENARIO, CLASS, DROP_USERSPACE_CONFIG, DROP_XDP_CONFIG, MEASURE, PEER, REJECT_CONFIG,
    SKIP_FIRST, SKIP_LAST, STORM_FACTOR, STORM_SCENARIO,
};
use crate::lab::DRA_CLIENT_IF;

/// One run of the benchmark: its dra config and client scenario.
pub(super) struct RunSpec {
    pub(super) name: &'static str,
    pub(super) config: &'static str,
    pub(super) scenario: &'static str,
    pub(super) fast_path: bool,
    /// P4 needs the client's summary (CCR-U HdrHistogram); the drop runs do not, and
    /// their client may not finish (see `run_one`).
    pub(super) needs_summary: bool,
    pub(super) purpose: &'static str,
}

/// The runs, in order.
pub(super) const RUNS: [RunSpec; 4] = [
    RunSpec {
        name: "no-storm",
        config: REJECT_CONFIG,
        scenario: BASELINE_SCENARIO,
        fast_path: true,
        needs_summary: true,
        purpose: "P4 without storm: CCR-I at L, steady CCR-U",
    },
    RunSpec {
        name: "storm-reject-xdp",
        config: REJECT_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: true,
        needs_summary: true,
        purpose: "P3 and P4 with storm: CCR-I at 10 L, steady CCR-U, action reject",
    },
    RunSpec {
        name: "storm-drop-xdp",
        config: DROP_XDP_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: true,
        needs_summary: false,
        purpose: "P5 run 1: action drop in XDP",
    },
    RunSpec {
        name: "storm-drop-userspace",
        config: DROP_USERSPACE_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: false,
        needs_summary: false,
        purpose: "P5 run 2: fast path detached, the agent limits in userspace",
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

pub(super) fn read_toml(root: &Path, rel: &str) -> Result<toml::Value> {
    let p = root.join(rel);
    let text = std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))?;
    toml::from_str(&text).with_context(|| format!("parse {}", p.display()))
}

/// The config without what the P5 runs may differ in: `[fast_path] interface` and the
/// limits' `action`.
fn without_action_and_interface(v: &toml::Value) -> toml::Value {
    let mut v = v.clone();
    if let Some(fp) = v.get_mut("fast_path").and_then(toml::Value::as_table_mut) {
        fp.remove("interface");
    }
    for t in ["message_rate_limit_profile", "peer_rate_limit_profile"] {
        if let Some(a) = v.get_mut(t).and_then(toml::Value::as_array_mut) {
            for p in a.iter_mut().filter_map(toml::Value::as_table_mut) {
                p.remove("action");
            }
        }
    }
    v
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
pub(super) fn scenario_secs(scn: &toml::Value) -> f64 {
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
    pub drop_limit: Limit,
    pub measure_start_s: f64,
    pub measure_s: f64,
    pub storm_rates: BTreeMap<String, f64>,
    pub baseline_rates: BTreeMap<String, f64>,
}

/// Reads and cross-checks the bench configs: the P5 configs carry the same limits (and
/// everything else) as the reject config apart from `action` and the interface; the
/// scenarios differ only in the `measure` CCR-I rate, which is L and 10·L.
pub fn plan(root: &Path) -> Result<Plan> {
    let reject = read_toml(root, REJECT_CONFIG)?;
    let drop_xdp = read_toml(root, DROP_XDP_CONFIG)?;
    let drop_us = read_toml(root, DROP_USERSPACE_CONFIG)?;
    let (limit, fp) = config_limit(&reject).context(REJECT_CONFIG)?;
    ensure!(
        fp && limit.action == "reject",
        "{REJECT_CONFIG}: expected action reject with XDP attached"
    );
    let (dx, fpx) = config_limit(&drop_xdp).context(DROP_XDP_CONFIG)?;
    ensure!(
        fpx && dx.action == "drop",
        "{DROP_XDP_CONFIG}: expected action drop with XDP attached"
    );
    let (du, fpu) = config_limit(&drop_us).context(DROP_USERSPACE_CONFIG)?;
    ensure!(
        !fpu && du.action == "drop",
        "{DROP_USERSPACE_CONFIG}: expected action drop without a fast-path interface"
    );
    let base = without_action_and_interface(&reject);
    ensure!(
        base == without_action_and_interface(&drop_xdp),
        "{DROP_XDP_CONFIG} differs from {REJECT_CONFIG} beyond action/interface"
    );
    ensure!(
        base == without_action_and_interface(&drop_us),
        "{DROP_USERSPACE_CONFIG} differs from {REJECT_CONFIG} beyond action/interface"
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
        s_len.fract() == 0.0 && s_len >= (SKIP_FIRST + SKIP_LAST + 3) as f64,
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
        s_rates.get("gx_ccr_u").copied().unwrap_or(0.0) > 0.0,
        "{MEASURE} needs steady CCR-U (P4)"
    );
    Ok(Plan {
        limit,
        drop_limit: dx,
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
    fn the_bench_configs_carry_the_same_limit_and_the_scenarios_offer_l_and_10_l() {
        let root = crate::workspace_root();
        let p = plan(&root).unwrap();
        assert_eq!(p.limit.action, "reject");
        assert_eq!(p.drop_limit.action, "drop");
        assert_eq!(
            (p.limit.rate, p.limit.burst),
            (p.drop_limit.rate, p.drop_limit.burst)
        );
        assert_eq!(p.storm_rates[CLASS], 10.0 * p.limit.rate);
        assert_eq!(p.baseline_rates[CLASS], p.limit.rate);
        assert_eq!(p.storm_rates["gx_ccr_u"], p.baseline_rates["gx_ccr_u"]);
    }

    #[test]
    fn a_config_that_changes_more_than_action_or_interface_is_refused() {
        let root = crate::workspace_root();
        let a = read_toml(&root, REJECT_CONFIG).unwrap();
        let text = std::fs::read_to_string(root.join(DROP_USERSPACE_CONFIG)).unwrap();
        let b: toml::Value = toml::from_str(&text.replace("rate = 500", "rate = 600")).unwrap();
        assert_ne!(
            without_action_and_interface(&a),
            without_action_and_interface(&b)
        );
        let c: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            without_action_and_interface(&a),
            without_action_and_interface(&c)
        );
        let drl: toml::Value = toml::from_str(&text.replace(
            "dynamic_rate_limiting = false",
            "dynamic_rate_limiting = true",
        ))
        .unwrap();
        assert!(config_limit(&drl).is_err());
    }
}
