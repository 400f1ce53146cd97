//! Measurements of the client: per class and per second (rows) and for the whole run
//! (the [`Report`]); latency in hdrhistogram histograms (µs, 3 significant digits).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::failover::FailoverCounts;
use super::scenario::Class;
use super::session::SessionCounts;

/// Highest latency recorded (longer values are clamped): 1 hour in µs.
const MAX_LATENCY_US: u64 = 3_600_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static histogram bounds are valid")
}

#[derive(Clone, Debug)]
struct Counters {
    sent: u64,
    answered: BTreeMap<u32, u64>,
    timeouts: u64,
    unanswered: u64,
    doic_shed: u64,
    latency: Histogram<u64>,
}

impl Counters {
    fn new() -> Counters {
        Counters {
            sent: 0,
            answered: BTreeMap::new(),
            timeouts: 0,
            unanswered: 0,
            doic_shed: 0,
            latency: histogram(),
        }
    }
}

/// One class in a per-second row.
#[derive(Clone, Debug, PartialEq, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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
    /// The summary of `class` (all zero when it had no traffic).
    pub fn class(&self, class: Class) -> ClassSummary {
        self.classes.get(class.name()).cloned().unwrap_or_default()
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

/// Collects measurements during a run.
#[derive(Debug)]
pub struct Stats {
    total: Vec<Counters>,
    second: Vec<Counters>,
    in_flight: [u64; 6],
    servers: BTreeMap<String, u64>,
    own_answers: BTreeMap<u32, u64>,
    peers: PeerSummary,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Stats {
    /// Empty.
    pub fn new() -> Stats {
        Stats {
            total: (0..6).map(|_| Counters::new()).collect(),
            second: (0..6).map(|_| Counters::new()).collect(),
            in_flight: [0; 6],
            servers: BTreeMap::new(),
            own_answers: BTreeMap::new(),
            peers: PeerSummary::default(),
        }
    }

    /// A request went out.
    pub fn sent(&mut self, class: Class) {
        let i = class.index();
        self.total[i].sent += 1;
        self.second[i].sent += 1;
        self.in_flight[i] += 1;
    }

    /// An answer came back.
    pub fn answered(
        &mut self,
        class: Class,
        result_code: u32,
        latency: Duration,
        server: Option<&str>,
    ) {
        let i = class.index();
        let us = (latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        for c in [&mut self.total[i], &mut self.second[i]] {
            *c.answered.entry(result_code).or_default() += 1;
            c.latency.saturating_record(us);
        }
        self.in_flight[i] = self.in_flight[i].saturating_sub(1);
        if let Some(s) = server {
            *self.servers.entry(s.to_owned()).or_default() += 1;
        }
    }

    /// The answer just received was generated by the connected peer itself (see
    /// [`Report::own_answers`]); [`Stats::answered`] counts it as any answer.
    pub fn own_answer(&mut self, result_code: u32) {
        *self.own_answers.entry(result_code).or_default() += 1;
    }

    /// A request timed out.
    pub fn timeout(&mut self, class: Class) {
        let i = class.index();
        self.total[i].timeouts += 1;
        self.second[i].timeouts += 1;
        self.in_flight[i] = self.in_flight[i].saturating_sub(1);
    }

    /// A request was lost with its connection.
    pub fn lost(&mut self, class: Class) {
        let i = class.index();
        self.total[i].unanswered += 1;
        self.second[i].unanswered += 1;
        self.in_flight[i] = self.in_flight[i].saturating_sub(1);
    }

    /// A request counted by [`Stats::sent`] was shed by the gateway's DOIC reacting
    /// node instead (never sent).
    pub fn doic_shed(&mut self, class: Class) {
        let i = class.index();
        self.total[i].sent = self.total[i].sent.saturating_sub(1);
        self.second[i].sent = self.second[i].sent.saturating_sub(1);
        self.total[i].doic_shed += 1;
        self.second[i].doic_shed += 1;
        self.in_flight[i] = self.in_flight[i].saturating_sub(1);
    }

    /// Requests in flight, all classes.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.iter().sum()
    }

    /// Peer counters.
    pub fn peers_mut(&mut self) -> &mut PeerSummary {
        &mut self.peers
    }

    /// Closes the current second: its row; the per-second counters restart.
    pub fn row(
        &mut self,
        t: u64,
        phase: &str,
        open_sessions: BTreeMap<String, u64>,
        peers_up: u64,
    ) -> Row {
        let mut classes = BTreeMap::new();
        for c in Class::ALL {
            let i = c.index();
            let cur = std::mem::replace(&mut self.second[i], Counters::new());
            let active = cur.sent > 0
                || !cur.answered.is_empty()
                || cur.timeouts > 0
                || cur.unanswered > 0
                || cur.doic_shed > 0
                || self.in_flight[i] > 0;
            if !active {
                continue;
            }
            let has = !cur.latency.is_empty();
            classes.insert(
                c.name().to_owned(),
                ClassRow {
                    sent: cur.sent,
                    answered: cur
                        .answered
                        .iter()
                        .map(|(k, v)| (k.to_string(), *v))
                        .collect(),
                    p50_ms: if has {
                        ms(cur.latency.value_at_quantile(0.5))
                    } else {
                        0.0
                    },
                    p99_ms: if has {
                        ms(cur.latency.value_at_quantile(0.99))
                    } else {
                        0.0
                    },
                    timeouts: cur.timeouts,
                    unanswered: cur.unanswered,
                    in_flight: self.in_flight[i],
                    doic_shed: cur.doic_shed,
                },
            );
        }
        Row {
            t,
            phase: phase.to_owned(),
            classes,
            open_sessions,
            peers_up,
        }
    }

    /// The final report.
    pub fn report(
        &self,
        scenario: &str,
        duration: Duration,
        sessions: SessionCounts,
        open_sessions_at_end: BTreeMap<String, u64>,
        not_sent: [u64; 6],
    ) -> Report {
        let mut classes = BTreeMap::new();
        for c in Class::ALL {
            let i = c.index();
            let t = &self.total[i];
            if t.sent == 0 && not_sent[i] == 0 && t.doic_shed == 0 {
                continue;
            }
            let h = &t.latency;
            let latency = if h.is_empty() {
                LatencySummary::default()
            } else {
                LatencySummary {
                    p50_ms: ms(h.value_at_quantile(0.5)),
                    p90_ms: ms(h.value_at_quantile(0.9)),
                    p99_ms: ms(h.value_at_quantile(0.99)),
                    max_ms: ms(h.max()),
                    mean_ms: h.mean() / 1000.0,
                }
            };
            classes.insert(
                c.name().to_owned(),
                ClassSummary {
                    sent: t.sent,
                    answered: t
                        .answered
                        .iter()
                        .map(|(k, v)| (k.to_string(), *v))
                        .collect(),
                    timeouts: t.timeouts,
                    unanswered: t.unanswered,
                    not_sent: not_sent[i],
                    doic_shed: t.doic_shed,
                    latency,
                },
            );
        }
        Report {
            scenario: scenario.to_owned(),
            duration_s: duration.as_secs_f64(),
            classes,
            sessions,
            open_sessions_at_end,
            peers: self.peers.clone(),
            servers: self.servers.clone(),
            own_answers: self
                .own_answers
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_answers_are_reported_apart_from_servers() {
        let mut s = Stats::new();
        for _ in 0..3 {
            s.sent(Class::GxCcrT);
        }
        s.answered(Class::GxCcrT, 2001, Duration::from_millis(1), Some("pcrf1"));
        for rc in [3002, 3004] {
            s.own_answer(rc);
            s.answered(Class::GxCcrT, rc, Duration::from_millis(1), None);
        }
        let r = s.report(
            "t",
            Duration::from_secs(1),
            SessionCounts::default(),
            BTreeMap::new(),
            [0; 6],
        );
        assert_eq!(r.class(Class::GxCcrT).answered_total(), 3);
        assert_eq!(r.servers.get("pcrf1"), Some(&1));
        assert_eq!(r.servers.len(), 1);
        assert_eq!(r.own_answers.get("3002"), Some(&1));
        assert_eq!(r.own_answers.get("3004"), Some(&1));
        assert!(
            r.to_text()
                .contains("answered by the connected peer itself (not a server): 3002:1 3004:1"),
            "{}",
            r.to_text()
        );
    }
}
