//! The runs of `cargo xtask bench doic` and the configs they use, read and cross-checked
//! before anything starts (`plan`).

use std::path::Path;

use anyhow::{Context, Result, ensure};

use crate::bench::{
    config::{
        REJECT_CONFIG, STORM_SCENARIO, config_limit, measure_phase, peer_doic, read_toml,
        without_doic,
    },
    window::INTERIOR,
};

/// Part a: the storm config with `doic = true` on pgw1 (both runs).
pub const STORM_CONFIG: &str = "config/bench/dra-doic-storm.toml";
/// Part b: no limit, `doic = true` on the PCRFs (the report run).
pub const SERVERS_CONFIG: &str = "config/bench/dra-doic-servers.toml";
/// Part b baseline: [`SERVERS_CONFIG`] with `doic = false` on the PCRFs.
pub const SERVERS_OFF_CONFIG: &str = "config/bench/dra-doic-servers-off.toml";
/// Part b's scenario (CCR-I and CCR-T, pgw1 without DOIC).
pub const SERVERS_SCENARIO: &str = "config/bench/doic-servers.toml";

/// The reporting PCRF of part b and what it is started with.
pub const REPORTER: &str = "pcrf1";
/// Its capacity, requests/s (`dra-loadgen server --doic-capacity`).
pub const REPORTER_CAPACITY: f64 = 100.0;
/// The reduction it asks for (`--doic-reduction`), percent.
pub const REPORTER_REDUCTION: u32 = 50;

/// One run: a fresh `dra run` with `config`, one `dra-loadgen client` as pgw1 playing
/// `scenario`, as a DOIC reacting node when `gateway_doic`.
pub struct RunSpec {
    pub name: &'static str,
    pub config: &'static str,
    pub scenario: &'static str,
    pub gateway_doic: bool,
    pub purpose: &'static str,
}

/// Part a, in order: the storm from a gateway without DOIC, then from one with DOIC.
pub const STORM_RUNS: [RunSpec; 2] = [
    RunSpec {
        name: "storm-without-doic",
        config: STORM_CONFIG,
        scenario: STORM_SCENARIO,
        gateway_doic: false,
        purpose: "10x CCR-I storm, gateway without DOIC: the excess is answered 3002",
    },
    RunSpec {
        name: "storm-with-doic",
        config: STORM_CONFIG,
        scenario: STORM_SCENARIO,
        gateway_doic: true,
        purpose: "the same storm, gateway with DOIC: it sheds at the source",
    },
];

/// Part b, in order (servers restarted with pcrf1 reporting before the first).
pub const SERVER_RUNS: [RunSpec; 2] = [
    RunSpec {
        name: "servers-baseline",
        config: SERVERS_OFF_CONFIG,
        scenario: SERVERS_SCENARIO,
        gateway_doic: false,
        purpose: "agent without DOIC towards the PCRFs: what pcrf1 gets without a report",
    },
    RunSpec {
        name: "servers-report",
        config: SERVERS_CONFIG,
        scenario: SERVERS_SCENARIO,
        gateway_doic: false,
        purpose: "agent with DOIC towards the PCRFs, pcrf1 reports 50 % loss",
    },
];

/// What the runs share, checked before anything starts.
pub struct Plan {
    /// pgw1's CCR-I limit of part a, requests/s.
    pub limit: f64,
    /// Part a's `measure` phase: start offset, length (s).
    pub storm_measure: (f64, f64),
    /// Part b's `measure` phase: start offset, length (s).
    pub servers_measure: (f64, f64),
}

/// Reads and cross-checks the configs and scenarios.
pub fn plan(root: &Path) -> Result<Plan> {
    let reject = read_toml(root, REJECT_CONFIG)?;
    let storm = read_toml(root, STORM_CONFIG)?;
    let (limit, fp) = config_limit(&storm).context(STORM_CONFIG)?;
    ensure!(
        fp && limit.action == "reject",
        "{STORM_CONFIG}: expected action reject with XDP attached"
    );
    ensure!(
        peer_doic(&storm, "pgw1") == Some(true),
        "{STORM_CONFIG}: pgw1 needs doic = true"
    );
    ensure!(
        without_doic(&storm, &["pgw1"]) == reject,
        "{STORM_CONFIG} must be {REJECT_CONFIG} plus doic keys on pgw1"
    );
    let on = read_toml(root, SERVERS_CONFIG)?;
    let off = read_toml(root, SERVERS_OFF_CONFIG)?;
    for p in ["pcrf1", "pcrf2"] {
        ensure!(
            peer_doic(&on, p) == Some(true),
            "{SERVERS_CONFIG}: {p} needs doic = true"
        );
        ensure!(
            peer_doic(&off, p) != Some(true),
            "{SERVERS_OFF_CONFIG}: {p} must not have doic = true"
        );
    }
    ensure!(
        without_doic(&on, &["pcrf1", "pcrf2"]) == without_doic(&off, &["pcrf1", "pcrf2"]),
        "{SERVERS_CONFIG} and {SERVERS_OFF_CONFIG} may differ only in the PCRFs' doic"
    );
    ensure!(
        on.get("message_rate_limit_profile").is_none()
            && on.get("peer_rate_limit_profile").is_none(),
        "{SERVERS_CONFIG}: no rate limit expected (only pcrf1's report may abate)"
    );
    let (s_start, s_len, s_rates) =
        measure_phase(&read_toml(root, STORM_SCENARIO)?).context(STORM_SCENARIO)?;
    ensure!(
        s_rates.get("gx_ccr_i") == Some(&(10.0 * limit.rate)),
        "{STORM_SCENARIO}: measure CCR-I must be 10 × the limit"
    );
    let (b_start, b_len, b_rates) =
        measure_phase(&read_toml(root, SERVERS_SCENARIO)?).context(SERVERS_SCENARIO)?;
    // A class the phase does not name is offered at 0/s.
    let i = b_rates.get("gx_ccr_i").copied().unwrap_or(0.0);
    let t = b_rates.get("gx_ccr_t").copied().unwrap_or(0.0);
    // Round robin gives pcrf1 half of each; over its capacity, and CCR-I more than
    // half of its traffic, so that the loss can be taken from CCR-I alone.
    ensure!(
        i / 2.0 > REPORTER_CAPACITY && t > 0.0 && i > t,
        "{SERVERS_SCENARIO}: measure needs CCR-I over 2 × {REPORTER_CAPACITY}/s, \
         some CCR-T, and more CCR-I than CCR-T"
    );
    for (what, start, len) in [
        (STORM_SCENARIO, s_start, s_len),
        (SERVERS_SCENARIO, b_start, b_len),
    ] {
        ensure!(
            start.fract() == 0.0 && len.fract() == 0.0 && INTERIOR.leaves(len, 3),
            "{what}: measure must start on a whole second and last ≥ 6 whole seconds"
        );
    }
    Ok(Plan {
        limit: limit.rate,
        storm_measure: (s_start, s_len),
        servers_measure: (b_start, b_len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doic_configs_differ_from_their_references_only_in_doic() {
        let root = crate::workspace_root();
        let p = plan(&root).unwrap();
        assert_eq!(p.limit, 500.0);
        let storm = read_toml(&root, STORM_CONFIG).unwrap();
        let mut other = storm.clone();
        other["global"]["dynamic_rate_limiting"] = toml::Value::Boolean(true);
        assert_ne!(
            without_doic(&other, &["pgw1"]),
            read_toml(&root, REJECT_CONFIG).unwrap()
        );
        let on = read_toml(&root, SERVERS_CONFIG).unwrap();
        assert_eq!(peer_doic(&on, "pcrf1"), Some(true));
        assert_eq!(peer_doic(&on, "pgw1"), None);
    }
}
