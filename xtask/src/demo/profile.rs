//! What the demo reads from the lab config (`config/lab/dra-lab.toml`): the DRL profile
//! shown on screen and checked, which gateways are DRL-enabled, and the static ingress
//! rates of their Gx CCR classes.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// The agent's `reversal_step` when the profile sets none (docs/config.md).
const DEFAULT_REVERSAL_STEP: f64 = 20.0;

/// The `[dynamic_throttling_db_cpu_profile]` and the limits the checks compare with.
#[derive(Clone, Debug)]
pub(crate) struct Profile {
    /// (CPU threshold %, throttle %), in increasing CPU order.
    pub(crate) thresholds: Vec<(f64, f64)>,
    /// `reversal_hold_time` as written (shown on screen).
    pub(crate) hold: String,
    pub(crate) hold_s: f64,
    /// `reversal_step` (percentage points).
    pub(crate) step: f64,
    /// `sample_period`, in seconds (the agent samples the CPU and runs the controller
    /// once per period).
    pub(crate) period_s: f64,
    /// Peers named by a `[[dynamic_peer_rate_limit_profile]]`.
    pub(crate) drl_peers: Vec<String>,
    /// Static ingress Gx CCR rates: (peer, class label `gx_ccr_i`/`gx_ccr_t`, msgs/s).
    pub(crate) static_rates: Vec<(String, String, f64)>,
}

fn num(x: &toml::Value) -> Option<f64> {
    x.as_float().or_else(|| x.as_integer().map(|i| i as f64))
}

/// Seconds of a config duration (`"10s"`, `"500ms"`, `"2m"`, `"1m30s"`, `"1.5s"`).
pub(crate) fn parse_secs(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = rest[n..].trim_start();
        let u = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        total += value
            * match &rest[..u] {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
        rest = rest[u..].trim_start();
    }
    Some(total)
}

pub(crate) fn read_profile(path: &Path) -> Result<Profile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let v: toml::Value =
        toml::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    let p = v
        .get("dynamic_throttling_db_cpu_profile")
        .context("no [dynamic_throttling_db_cpu_profile]")?;
    let mut thresholds: Vec<(f64, f64)> = p
        .get("thresholds")
        .and_then(|t| t.as_array())
        .context("no thresholds")?
        .iter()
        .filter_map(|r| Some((num(r.get("cpu")?)?, num(r.get("throttle")?)?)))
        .collect();
    thresholds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let hold = p
        .get("reversal_hold_time")
        .and_then(|h| h.as_str())
        .context("no reversal_hold_time")?
        .to_owned();
    let Some(hold_s) = parse_secs(&hold) else {
        bail!("reversal_hold_time {hold:?} is not a duration");
    };
    // The agent's default sample period is 1 s (docs/config.md).
    let period = p
        .get("sample_period")
        .and_then(|h| h.as_str())
        .unwrap_or("1s");
    let period_s = parse_secs(period).with_context(|| format!("sample_period {period:?}"))?;
    let tables = |name: &str| {
        v.get(name)
            .and_then(|t| t.as_array())
            .cloned()
            .unwrap_or_default()
    };
    let s = |t: &toml::Value, k: &str| t.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let drl_peers = tables("dynamic_peer_rate_limit_profile")
        .iter()
        .filter_map(|t| s(t, "peer"))
        .collect();
    let static_rates = tables("message_rate_limit_profile")
        .iter()
        .filter(|t| {
            s(t, "direction").as_deref() == Some("ingress")
                && s(t, "application").as_deref() == Some("gx")
                && s(t, "command").as_deref() == Some("ccr")
        })
        .filter_map(|t| {
            let class = match s(t, "request_type")?.as_str() {
                "initial" => "gx_ccr_i",
                "termination" => "gx_ccr_t",
                _ => return None,
            };
            Some((s(t, "peer")?, class.to_owned(), num(t.get("rate")?)?))
        })
        .collect();
    Ok(Profile {
        thresholds,
        hold,
        hold_s,
        step: p
            .get("reversal_step")
            .and_then(num)
            .unwrap_or(DEFAULT_REVERSAL_STEP),
        period_s,
        drl_peers,
        static_rates,
    })
}

impl Profile {
    pub(crate) fn describe(&self) -> String {
        let rows: Vec<String> = self
            .thresholds
            .iter()
            .map(|(c, t)| format!("{c}%→{t}%"))
            .collect();
        format!("{} (seed: 50%→20% 55%→30% 60%→40% 65%→50%)", rows.join(" "))
    }

    pub(crate) fn lowest(&self) -> f64 {
        self.thresholds.first().map_or(f64::INFINITY, |r| r.0)
    }

    /// The row that applies at `cpu` (docs/architecture.md §5: the highest threshold not
    /// above it).
    pub(crate) fn row_for(&self, cpu: f64) -> Option<usize> {
        self.thresholds.iter().rposition(|r| r.0 <= cpu)
    }

    pub(crate) fn static_rate(&self, peer: &str, class: &str) -> Option<f64> {
        self.static_rates
            .iter()
            .find(|(p, c, _)| p == peer && c == class)
            .map(|r| r.2)
    }

    pub(crate) fn is_drl(&self, peer: &str) -> bool {
        self.drl_peers.iter().any(|p| p == peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_the_lab_profile_are_read() {
        assert_eq!(parse_secs("10s"), Some(10.0));
        assert_eq!(parse_secs("500ms"), Some(0.5));
        assert_eq!(parse_secs("1m30s"), Some(90.0));
        assert_eq!(parse_secs("ten"), None);
        let root = crate::workspace_root();
        let p = read_profile(&root.join(super::super::LAB_CONFIG)).unwrap();
        assert_eq!(p.hold_s, 10.0);
        assert_eq!(p.period_s, 1.0);
        assert_eq!(p.drl_peers, ["pgw1"]);
        assert_eq!(p.static_rate("pgw1", "gx_ccr_i"), Some(1000.0));
        assert_eq!(p.static_rate("pgw2", "gx_ccr_i"), Some(200.0));
        assert_eq!(p.static_rate("pgw2", "gx_ccr_t"), Some(200.0));
        assert_eq!(p.row_for(5.99), None);
        assert_eq!(p.row_for(6.0), Some(0));
        assert_eq!(p.row_for(8.5), Some(2));
        assert_eq!(p.row_for(40.0), Some(3));
    }
}
