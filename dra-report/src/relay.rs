//! The relay bench's results (`dra-bench`, `cargo xtask bench relay`):
//! `bench/results/relay-latest.json`, read back by the aggregate report. Its two goals
//! are here, for the bench that judges them and the report that shows them.
//!
//! A figure that can be absent (a relay that did not run, a CPU time no round could
//! read) is an `Option` that must still be present in the file, as `null`: a field
//! missing from the file is an error naming it, never a figure read as absent.

use serde::{Deserialize, Serialize};

/// P2: `dra run` relays at least this many times freeDiameter's requests/s (medians).
pub const GOAL_MIN_RATIO: f64 = 3.0;
/// TLS: over TLS `dra run` relays at least this share of its plain TCP requests/s.
pub const GOAL_MIN_RATIO_TLS_TO_PLAIN: f64 = 0.5;

/// The name of the agent's plain TCP relay in [`RelayReport::summary`].
pub const AGENT: &str = "dra run";
/// The agent over TLS.
pub const AGENT_TLS: &str = "dra run (TLS)";
/// A second `dra` build run beside the first (`dra-bench --dra-b`), for an A/B.
pub const AGENT_B: &str = "dra run (B)";
/// freeDiameter, the P2 reference.
pub const FREEDIAMETER: &str = "freeDiameter 1.2.1";
/// The relay on Erlang/OTP's diameter application (reported beside it).
pub const OTP: &str = "Erlang/OTP diameter";

/// One run of `dra-bench`: every round of every relay, their medians and the goals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayReport {
    pub in_flight: u64,
    pub clients: u64,
    pub window: u64,
    pub servers: u64,
    pub seconds: u64,
    pub warmup_seconds: u64,
    pub rounds: u64,
    /// How the agent ran.
    pub agent: String,
    /// The `dra` binary, and a second build's for an A/B.
    pub dra: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub dra_b: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio_agent_to_agent_b: Option<f64>,
    pub cpus: u64,
    pub results: Vec<RoundResult>,
    pub summary: Vec<RelaySummary>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio_agent_to_freediameter: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio_agent_to_otp: Option<f64>,
    pub goal_min_ratio: f64,
    /// P2 as judged; `None` when freeDiameter or the agent did not run.
    #[serde(deserialize_with = "Option::deserialize")]
    pub met: Option<bool>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio_tls_to_plain: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio_tls_to_plain_cpu_per_request: Option<f64>,
    pub goal_min_ratio_tls_to_plain: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub met_tls: Option<bool>,
}

/// One relay's round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundResult {
    pub relay: String,
    pub round: u64,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub answered: u64,
    pub non_2001: u64,
    /// The relay's process tree CPU time over the load (warm-up included), s.
    pub cpu_s: f64,
    /// CCRs the servers answered over the load (warm-up included).
    pub server_answered: u64,
    /// `cpu_s` ÷ `server_answered`, µs; `None` when the servers answered nothing.
    #[serde(deserialize_with = "Option::deserialize")]
    pub cpu_us_per_request: Option<f64>,
}

/// A relay's figures over its rounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySummary {
    pub relay: String,
    pub requests_per_s: Spread,
    pub p99_ms: Spread,
    /// `None` when a round had no CPU figure.
    #[serde(deserialize_with = "Option::deserialize")]
    pub cpu_us_per_request: Option<Spread>,
}

/// Median, min and max over the rounds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl RelayReport {
    /// The summary of the relay named `name` (e.g. [`AGENT`]), if it ran.
    pub fn relay(&self, name: &str) -> Option<&RelaySummary> {
        self.summary.iter().find(|s| s.relay == name)
    }
}
