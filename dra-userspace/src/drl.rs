//! Dynamic rate limiting wired to the config and the fast path: which slots the
//! controller rewrites, their static rates, the CPU source, and the loop settings.
//! The semantics live in [`crate::control`]; this is the mapping.

use std::time::Duration;

use crate::{
    config::{self, Config, CpuSource as CfgSource, OnMissing as CfgOnMissing, Target},
    control::{self, DbCpuProfile, LoopSettings, OnMissing, ThresholdRow, sources},
    dataplane::{Plan, Slot},
};

/// One bucket the controller scales: effective = static × (100 − throttle) / 100.
#[derive(Clone, Debug, PartialEq)]
pub struct DrlTarget {
    pub peer: String,
    pub class_label: String,
    pub slot: Slot,
    pub static_rate: f64,
}

/// Why dynamic rate limiting cannot be set up from a config.
#[derive(Debug, thiserror::Error)]
pub enum DrlError {
    #[error("dynamic throttling profile")]
    Profile(#[source] control::ProfileError),
    #[error("dynamic throttling loop settings")]
    Loop(#[source] control::LoopSettingsError),
    #[error("CPU sample source")]
    Source(#[source] control::SourceError),
    #[error("peer {peer}: class {class} has no static ingress limit to scale")]
    NoStaticLimit { peer: String, class: String },
}

/// The buckets dynamic throttling rewrites. Empty when the global switch is off:
/// then nothing is throttled.
pub fn targets(cfg: &Config, plan: &Plan) -> Result<Vec<DrlTarget>, DrlError> {
    if !cfg.global.dynamic_rate_limiting {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for d in &cfg.dynamic_peer_rate_limits {
        let peers: Vec<&str> = match &d.target {
            Target::Peer(p) => vec![p.as_str()],
            Target::Group(g) => cfg.group_members(g).map(|p| p.name.as_str()).collect(),
        };
        for peer in peers {
            for c in &d.classes {
                let mc = c.msg_class();
                let slot = plan
                    .slot_of(peer, mc)
                    .and_then(|s| plan.slots.get(s as usize))
                    .filter(|s| s.limit.is_some())
                    .ok_or_else(|| DrlError::NoStaticLimit {
                        peer: peer.into(),
                        class: c.to_string(),
                    })?;
                let static_rate = slot.limit.as_ref().map(|l| l.rate).unwrap_or_default();
                out.push(DrlTarget {
                    peer: peer.into(),
                    class_label: slot.class_label.clone(),
                    slot: slot.clone(),
                    static_rate,
                });
            }
        }
    }
    Ok(out)
}

/// The controller's profile and loop settings from the config table.
pub fn settings(p: &config::DbCpuProfile) -> Result<(DbCpuProfile, LoopSettings), DrlError> {
    let rows = p
        .thresholds
        .iter()
        .map(|t| ThresholdRow {
            cpu_pct: t.cpu as f64,
            throttle_pct: t.throttle,
        })
        .collect();
    let profile = DbCpuProfile::new(rows, p.reversal_hold_time, p.reversal_step)
        .map_err(DrlError::Profile)?;
    let settings = LoopSettings {
        period: p.sample_period,
        missing_after: p.missing_after,
        on_missing: match p.on_missing {
            CfgOnMissing::Hold => OnMissing::Hold,
            CfgOnMissing::Release => OnMissing::Release,
        },
        ewma_alpha: p.ewma_alpha,
    };
    Ok((profile, settings))
}

/// The configured CPU sample source (each kind is opened by [`CfgSource::open`], next to
/// its config checks).
pub fn source(src: &CfgSource, timeout: Duration) -> Result<Box<dyn sources::CpuSource>, DrlError> {
    src.open(timeout).map_err(DrlError::Source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> (Config, Plan) {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../config/dra.toml"))
                .unwrap();
        let cfg = crate::config::parse(&text, "dra.toml").unwrap();
        let plan = Plan::new(&cfg).unwrap();
        (cfg, plan)
    }

    #[test]
    fn seed_targets_are_pgw1_ccr_i_and_ccr_t_at_their_static_rates() {
        let (cfg, plan) = seed();
        let t = targets(&cfg, &plan).unwrap();
        let got: Vec<(&str, &str, f64)> = t
            .iter()
            .map(|t| (t.peer.as_str(), t.class_label.as_str(), t.static_rate))
            .collect();
        assert_eq!(
            got,
            vec![("pgw1", "gx_ccr_i", 1000.0), ("pgw1", "gx_ccr_t", 1000.0)]
        );
        // pgw2 (no DRL) is never a target.
        assert!(t.iter().all(|t| t.peer != "pgw2"));
    }

    #[test]
    fn global_switch_off_throttles_nothing() {
        let (mut cfg, plan) = seed();
        cfg.global.dynamic_rate_limiting = false;
        assert!(targets(&cfg, &plan).unwrap().is_empty());
    }

    #[test]
    fn seed_profile_maps_to_the_controller() {
        let (cfg, _) = seed();
        let (p, s) = settings(cfg.db_cpu_profile.as_ref().unwrap()).unwrap();
        assert_eq!(p.rows().len(), 4);
        assert_eq!(p.reversal_hold(), Duration::from_secs(30));
        assert_eq!(p.reversal_step_pct(), 20);
        assert_eq!(s.period, Duration::from_secs(1));
    }
}
