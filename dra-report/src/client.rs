//! `dra-loadgen client`: the run's summary ([`Report`], `--report`) and the rows of
//! each second ([`Row`], `--rows`, one JSON object per line).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One class in a per-second row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRow {
    /// Requests sent in this second.
    pub sent: u64,
    /// Answers received in this second, by Result-Code.
    pub answered: BTreeMap<String, u64>,
    /// Median latency of this second's answers, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Requests that timed out in this second.
    pub timeouts: u64,
    /// Requests lost in this second because their connection dropped.
    pub unanswered: u64,
    /// Requests in flight at the end of the second.
    pub in_flight: u64,
    /// New sessions the gateways shed in this second as DOIC reacting nodes (`--doic`).
    pub doic_shed: u64,
}

/// One JSON line per second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// Seconds since the start (the row covers `t-1..t`).
    pub t: u64,
    /// Phase running at the end of the second.
    pub phase: String,
    /// Classes with any activity.
    pub classes: BTreeMap<String, ClassRow>,
    /// Open sessions per application at the end of the second.
    pub open_sessions: BTreeMap<String, u64>,
    /// Peers with an open connection.
    pub peers_up: u64,
}

/// Latency summary, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySummary {
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

/// Totals of one class for the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSummary {
    /// Requests sent.
    pub sent: u64,
    /// Answers by Result-Code.
    pub answered: BTreeMap<String, u64>,
    /// Requests without an answer within the timeout.
    pub timeouts: u64,
    /// Requests lost when their connection dropped (reconnect storms, failures).
    pub unanswered: u64,
    /// Requests the scenario asked for that could not be sent (no open session, no peer
    /// up) by the end.
    pub not_sent: u64,
    /// New sessions (CCR-I) the gateways shed as DOIC reacting nodes (`--doic`): not
    /// sent, not in `sent`.
    pub doic_shed: u64,
    /// Latency of answered requests.
    pub latency: LatencySummary,
}

impl ClassSummary {
    /// Answers with `result_code`.
    pub fn answered_with(&self, result_code: u32) -> u64 {
        self.answered
            .get(&result_code.to_string())
            .copied()
            .unwrap_or(0)
    }

    /// Every answer.
    pub fn answered_total(&self) -> u64 {
        self.answered.values().sum()
    }
}

/// Peer (connection) counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSummary {
    /// Successful capabilities exchanges (first connects and reconnects).
    pub opened: u64,
    /// Connections that went down (storms, failures).
    pub dropped: u64,
    /// Peers up at the end.
    pub up_at_end: u64,
    /// DWAs answered to our DWRs... and other load reports: the last RFC 8583 Load-Value
    /// each server reported, by server Origin-Host.
    pub load_reports: BTreeMap<String, u16>,
    /// Answers that came after their request had timed out.
    pub late_answers: u64,
    /// Gateway failover between two DRAs (all zero with one DRA).
    pub failover: FailoverCounts,
}

/// The final summary of a client run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Wall time of the run, seconds.
    pub duration_s: f64,
    /// Per class, by name.
    pub classes: BTreeMap<String, ClassSummary>,
    /// Sessions.
    pub sessions: SessionCounts,
    /// Open sessions per application at the end.
    pub open_sessions_at_end: BTreeMap<String, u64>,
    /// Connections.
    pub peers: PeerSummary,
    /// Answers per server Origin-Host (relayed answers: not the connected peer's own).
    pub servers: BTreeMap<String, u64>,
    /// Answers the connected peer generated itself (Origin-Host of its CEA: the DRA's
    /// own answers, e.g. 3002 or 3004), by Result-Code. Not in [`Report::servers`] and
    /// not counted as server switches.
    pub own_answers: BTreeMap<String, u64>,
}

impl Report {
    /// The summary of the class named `class` (e.g. "gx_ccr_i"; all zero when it had
    /// no traffic).
    pub fn class(&self, class: &str) -> ClassSummary {
        self.classes.get(class).cloned().unwrap_or_default()
    }

    /// Human-readable table for stdout.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {:?}: {:.1} s, peers opened {} dropped {}, sessions opened {} closed {} \
             flush CCR-T {} server switches {}",
            self.scenario,
            self.duration_s,
            self.peers.opened,
            self.peers.dropped,
            self.sessions.opened,
            self.sessions.closed,
            self.sessions.flush_ccr_t,
            self.sessions.server_switches
        );
        let _ = writeln!(
            s,
            "{:<9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}  answers by Result-Code",
            "class", "sent", "answered", "timeout", "lost", "not_sent", "p50 ms", "p99 ms"
        );
        for (name, c) in &self.classes {
            let codes: Vec<String> = c.answered.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            let _ = writeln!(
                s,
                "{:<9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9.2} {:>9.2}  {}",
                name,
                c.sent,
                c.answered_total(),
                c.timeouts,
                c.unanswered,
                c.not_sent,
                c.latency.p50_ms,
                c.latency.p99_ms,
                codes.join(" ")
            );
        }
        let shed: Vec<String> = self
            .classes
            .iter()
            .filter(|(_, c)| c.doic_shed > 0)
            .map(|(k, c)| format!("{k}:{}", c.doic_shed))
            .collect();
        if !shed.is_empty() {
            let _ = writeln!(s, "shed by the gateways (DOIC): {}", shed.join(" "));
        }
        for (host, n) in &self.servers {
            let _ = writeln!(s, "server {host}: {n} answers");
        }
        if !self.own_answers.is_empty() {
            let codes: Vec<String> = self
                .own_answers
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            let _ = writeln!(
                s,
                "answered by the connected peer itself (not a server): {}",
                codes.join(" ")
            );
        }
        let f = &self.peers.failover;
        if f.answers_via[1] > 0 || f.failovers > 0 || f.lost_no_dra > 0 {
            let gap = f.failover_gaps_ms.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "failover: answers via DRA 1 {} / DRA 2 {}, failovers {} failbacks {} \
                 resent with T {} lost (no DRA) {} longest gap {gap:.1} ms",
                f.answers_via[0],
                f.answers_via[1],
                f.failovers,
                f.failbacks,
                f.resent_with_t,
                f.lost_no_dra
            );
        }
        s
    }
}

/// Counters about sessions, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionCounts {
    /// Sessions opened (CCA-I 2001).
    pub opened: u64,
    /// Sessions closed (CCR-T answered or timed out).
    pub closed: u64,
    /// CCR-I that did not open a session (error answer, timeout, lost).
    pub failed_initial: u64,
    /// CCR-T sent because of a gateway flush.
    pub flush_ccr_t: u64,
    /// Answers from a server other than the one that answered the session's CCR-I
    /// (answers the DRA generated itself are not server answers and do not count).
    pub server_switches: u64,
}

/// Failover counters (summed over the gateways in the client's report).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverCounts {
    /// A DRA carrying traffic left service while the other was in service: its traffic
    /// and pending requests moved to the other.
    pub failovers: u64,
    /// A DRA that had failed over came back into service and carries traffic again.
    pub failbacks: u64,
    /// Pending requests sent again to the other DRA with the T flag.
    pub resent_with_t: u64,
    /// Pending requests lost because no other DRA was in service.
    pub lost_no_dra: u64,
    /// Answers received through each DRA (index 0: `--connect`, 1: `--secondary`).
    pub answers_via: [u64; 2],
    /// For each failover: time from the last answer through the DRA that failed to the
    /// first answer through the other, ms.
    pub failover_gaps_ms: Vec<f64>,
}

impl FailoverCounts {
    /// Adds another gateway's counters.
    pub fn merge(&mut self, o: &FailoverCounts) {
        self.failovers += o.failovers;
        self.failbacks += o.failbacks;
        self.resent_with_t += o.resent_with_t;
        self.lost_no_dra += o.lost_no_dra;
        for k in 0..2 {
            self.answers_via[k] += o.answers_via[k];
        }
        self.failover_gaps_ms.extend_from_slice(&o.failover_gaps_ms);
    }
}
