//! The bench configs and scenarios more than one bench uses (config/bench/), and how a
//! bench reads them: a TOML file of the workspace, a scenario's `measure` phase and
//! length, the one limit of a storm config, the peers' `doic` keys (the one difference
//! allowed between a DOIC config and the config it is built on).

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, Result, bail, ensure};

use crate::lab::DRA_CLIENT_IF;

/// The storm config: pgw1's CCR-I limited, action reject, XDP attached (storm's P3 and
/// P4; DOIC's storm config is it plus DOIC on pgw1).
pub const REJECT_CONFIG: &str = "config/bench/dra-storm-reject.toml";
/// CCR-I at 10 × the limit (storm's P3 and P4, DOIC's part a).
pub const STORM_SCENARIO: &str = "config/bench/storm-10x.toml";
/// The servers' service time for P4's primary pair of runs and the flood bench: low and
/// fixed, so a storm's or a flood's effect on CCR-U is not hidden in the servers'
/// latency.
pub const LOW_LATENCY: &str = "fixed:100us";
/// The scenario phase every bench number is taken from.
pub const MEASURE: &str = "measure";
/// The peer whose CCR-I the storm configs limit.
pub const LIMITED_PEER: &str = "pgw1";

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
        s("peer") == LIMITED_PEER
            && s("direction") == "ingress"
            && s("application") == "gx"
            && s("command") == "ccr"
            && s("request_type") == "initial",
        "the limit must be {LIMITED_PEER} ingress Gx CCR-I"
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

/// The peers' `doic` keys removed (the one difference allowed between two configs).
pub(crate) fn without_doic(v: &toml::Value, names: &[&str]) -> toml::Value {
    let mut v = v.clone();
    if let Some(peers) = v.get_mut("peer").and_then(toml::Value::as_array_mut) {
        for p in peers {
            let named = p
                .get("name")
                .and_then(toml::Value::as_str)
                .is_some_and(|n| names.contains(&n));
            if named && let Some(t) = p.as_table_mut() {
                t.retain(|k, _| !k.starts_with("doic"));
            }
        }
    }
    v
}

/// Peer `name`'s `doic` key, when it has one.
pub(crate) fn peer_doic(v: &toml::Value, name: &str) -> Option<bool> {
    v.get("peer")?
        .as_array()?
        .iter()
        .find(|p| p.get("name").and_then(toml::Value::as_str) == Some(name))?
        .get("doic")
        .and_then(toml::Value::as_bool)
}

#[cfg(test)]
mod tests {
    use super::*;

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
