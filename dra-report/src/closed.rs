//! `dra-loadgen closed`: the closed loop's summary (all peers together).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a closed-loop run measured. Counts by Result-Code (Experimental-Result-Code
/// when there is no Result-Code; 0 when neither).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClosedSummary {
    /// Peers (connections).
    pub peers: usize,
    /// Requests in flight per peer.
    pub window: usize,
    /// Requests in flight in all (peers × window).
    pub in_flight: usize,
    /// Length of the measured window, s.
    pub measured_s: f64,
    /// Answers in the window per second of it.
    pub requests_per_s: f64,
    /// Requests sent inside the window.
    pub sent: u64,
    /// Answers to requests sent inside the window, received inside it.
    pub answered: BTreeMap<u32, u64>,
    /// Answers to requests sent inside the window, whenever they arrived.
    pub answered_of_sent: BTreeMap<u32, u64>,
    /// Latency quantiles of the answers in `answered`, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
    /// Requests sent over the whole run.
    pub total_sent: u64,
    /// Answers over the whole run (the drain included).
    pub total_answered: BTreeMap<u32, u64>,
    /// Requests still unanswered when the drain ended.
    pub unanswered: u64,
    /// The most requests one peer had in flight.
    pub max_in_flight: usize,
    /// The longest pause in one peer's sending inside the window, ms.
    pub longest_send_gap_ms: f64,
}

impl ClosedSummary {
    /// Answers counted in the window with this Result-Code.
    pub fn answered_with(&self, rc: u32) -> u64 {
        self.answered.get(&rc).copied().unwrap_or(0)
    }

    /// Answers counted in the window, whatever their Result-Code.
    pub fn answered_total(&self) -> u64 {
        self.answered.values().sum()
    }
}
