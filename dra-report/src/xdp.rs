//! The XDP bench's results (`xdp-bench`, `cargo xtask bench xdp`):
//! `bench/results/xdp-latest.json`, read back by the aggregate report.

use serde::{Deserialize, Serialize};

/// One run of `xdp-bench`: every case's ns per packet and the P1 goal as judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpReport {
    /// BPF_PROG_TEST_RUN runs per case over all rounds.
    pub runs: u64,
    pub rounds: u64,
    pub goal: XdpGoal,
    /// Whether every case's verdict and output bytes were as expected.
    pub verdicts_ok: bool,
    /// The verifier's instruction counts of the programs, as `dra verify` gives them.
    pub verifier_insns: String,
    /// The case every `net_ns` and `ratio_to_pass` is taken against (a program that
    /// only returns `XDP_PASS`), by its name in `cases`.
    pub reference: String,
    pub cases: Vec<XdpCase>,
}

/// P1: the goal case's ns per packet net of the bare `XDP_PASS` of the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpGoal {
    pub case: String,
    pub max_net_ns: f64,
    pub net_ns: f64,
    pub met: bool,
    /// The goal case's lookups and charges without the framing, net.
    pub floor_net_ns: f64,
}

/// One case: the median over rounds of its mean ns per packet, and the spread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpCase {
    pub case: String,
    pub ns_per_packet: f64,
    pub ns_min: f64,
    pub ns_max: f64,
    /// Net of the bare `XDP_PASS` case.
    pub net_ns: f64,
    /// ÷ the bare `XDP_PASS` case (1 for that case itself).
    pub ratio_to_pass: f64,
}
