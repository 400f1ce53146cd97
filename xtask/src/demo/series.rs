//! The demo's time series, from the agent's /metrics only.
//!
//! The demo scrapes every [`SCRAPE_PERIOD`] (a quarter of the agent's 1 s CPU sample
//! period), so the checks can tell what the controller did within one sample period.
//! Each scrape becomes a [`Sample`]: the DB CPU gauge, every peer's throttle and
//! effective-rate gauges, the fast-path counters and the upstream answer counts.
//!
//! The agent copies the fast-path counters into /metrics once per second
//! ([`PUBLISH_PERIOD_S`], `publish_fastpath` in dra-userspace/src/run.rs); rates taken
//! between two arbitrary scrapes would alias with that. A [`Row`] therefore spans two
//! consecutive publishes (seen as a change of the counters), so its rates are counts
//! over whole publish periods.

use std::{collections::BTreeMap, time::Duration};

use anyhow::Result;

use crate::{lab::UPSTREAMS, metrics::Snap};

pub(crate) const SCRAPE_PERIOD: Duration = Duration::from_millis(250);
/// How often the agent publishes the fast-path counters (dra-userspace/src/run.rs).
pub(crate) const PUBLISH_PERIOD_S: f64 = 1.0;

/// (peer, class)
pub(crate) type Key = (String, String);

/// One scrape of the agent's metrics.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// Seconds since the gateways were started.
    pub(crate) t: f64,
    /// `dra_db_cpu_percent`: the last valid CPU sample the controller used.
    pub(crate) cpu: f64,
    /// `dra_db_cpu_source_up`.
    pub(crate) source_up: bool,
    /// `dra_throttle_percent` of every peer that has the series.
    pub(crate) throttle: BTreeMap<String, f64>,
    /// `dra_effective_rate` per (peer, class).
    pub(crate) eff: BTreeMap<Key, f64>,
    /// `dra_fastpath_requests_total` per (peer, class): seen, admitted, marked + dropped.
    pub(crate) fastpath: BTreeMap<Key, [f64; 3]>,
    /// `dra_answer_latency_seconds` count and sum per upstream.
    pub(crate) upstream: BTreeMap<String, (f64, f64)>,
}

fn label<'a>(labels: &'a [(String, String)], k: &str) -> Option<&'a str> {
    labels.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
}

impl Sample {
    /// The sample of one scrape; an error when the scrape lacks the DB CPU gauges (the
    /// agent exports them from its start).
    pub(crate) fn from_snap(t: f64, snap: &Snap) -> Result<Sample> {
        let mut s = Sample {
            t,
            cpu: snap.sum("dra_db_cpu_percent", &[])?,
            source_up: snap.sum("dra_db_cpu_source_up", &[])? == 1.0,
            ..Sample::default()
        };
        for x in &snap.series {
            let peer = label(&x.labels, "peer");
            let class = label(&x.labels, "class");
            match (x.name.as_str(), peer, class) {
                ("dra_throttle_percent", Some(p), _) => {
                    s.throttle.insert(p.to_owned(), x.value);
                }
                ("dra_effective_rate", Some(p), Some(c)) => {
                    s.eff.insert((p.to_owned(), c.to_owned()), x.value);
                }
                ("dra_fastpath_requests_total", Some(p), Some(c)) if c != "conn" => {
                    let i = match label(&x.labels, "outcome") {
                        Some("seen") => 0,
                        Some("admitted") => 1,
                        Some("marked" | "dropped") => 2,
                        _ => continue,
                    };
                    s.fastpath.entry((p.to_owned(), c.to_owned())).or_default()[i] += x.value;
                }
                _ => {}
            }
        }
        for up in UPSTREAMS {
            // The agent creates an upstream's latency series at its first answer: before
            // it, none answered (0 answers, 0 s).
            let n = snap.sum_or_zero_if_absent("dra_answer_latency_seconds_count", &[("peer", up)]);
            let sum = snap.sum_or_zero_if_absent("dra_answer_latency_seconds_sum", &[("peer", up)]);
            s.upstream.insert(up.to_owned(), (n, sum));
        }
        Ok(s)
    }

    /// Sum of every fast-path counter: it changes when the agent publishes them.
    fn fastpath_total(&self) -> f64 {
        self.fastpath.values().flatten().sum()
    }

    pub(crate) fn throttle_of(&self, peer: &str) -> Option<f64> {
        self.throttle.get(peer).copied()
    }
}

/// Per peer and class: offered, admitted, rejected (fast path, per second).
pub(crate) type ClassRates = BTreeMap<String, [f64; 3]>;

/// The fast path's rates over whole publish periods, and what the gauges showed then.
#[derive(Clone, Debug, Default)]
pub(crate) struct Row {
    /// When the closing publish was seen (seconds since the gateways started).
    pub(crate) t: f64,
    /// Whole publish periods the row spans, in seconds.
    pub(crate) secs: f64,
    pub(crate) phase: String,
    pub(crate) peers: BTreeMap<String, ClassRates>,
    /// pgw1's throttle, the DB CPU and pgw1's CCR-I effective rate at `t`.
    pub(crate) throttle: f64,
    pub(crate) cpu: f64,
    pub(crate) eff_rate: f64,
    /// Per peer: its throttle if every scrape from just before the opening publish to
    /// the closing one showed the same value (`None`: changed or no series).
    pub(crate) steady_throttle: BTreeMap<String, Option<f64>>,
    /// Per (peer, class): the same for the effective rate.
    pub(crate) steady_eff: BTreeMap<Key, Option<f64>>,
    /// Per upstream: answers/s, mean answer latency in ms over the row.
    pub(crate) upstream: BTreeMap<String, (f64, f64)>,
}

impl Row {
    pub(crate) fn rate(&self, peer: &str, class: &str, i: usize) -> f64 {
        self.peers
            .get(peer)
            .and_then(|m| m.get(class))
            .map_or(0.0, |x| x[i])
    }
}

/// The same value in every sample, if any.
fn steady<T: PartialEq + Copy>(mut it: impl Iterator<Item = Option<T>>) -> Option<T> {
    let first = it.next()??;
    it.all(|v| v == Some(first)).then_some(first)
}

/// Splits the scrapes into rows at each publish.
pub(crate) struct Rows {
    /// Index of the sample that saw the last publish.
    last_publish: Option<usize>,
}

impl Rows {
    pub(crate) fn new() -> Rows {
        Rows { last_publish: None }
    }

    /// Called after each new sample; returns the row it closes, if it saw a publish
    /// (`phase` names the load phase then).
    pub(crate) fn push(
        &mut self,
        samples: &[Sample],
        phase: impl FnOnce() -> String,
    ) -> Option<Row> {
        let i = samples.len().checked_sub(1)?;
        let prev = samples.get(i.checked_sub(1)?)?;
        let cur = &samples[i];
        if cur.fastpath_total() == prev.fastpath_total() {
            return None;
        }
        // The first publish seen only opens the first row.
        let a = self.last_publish.replace(i)?;
        Some(row(
            &samples[a.saturating_sub(1)..=i],
            &samples[a],
            cur,
            &phase(),
        ))
    }
}

/// `window` = the scrape before the opening publish's, through the closing one's.
fn row(window: &[Sample], open: &Sample, close: &Sample, phase: &str) -> Row {
    let periods = ((close.t - open.t) / PUBLISH_PERIOD_S).round().max(1.0);
    let secs = periods * PUBLISH_PERIOD_S;
    let mut r = Row {
        t: close.t,
        secs,
        phase: phase.to_owned(),
        // Plot and CSV: a missing gauge draws as unthrottled; the check "every
        // gateway's throttle gauge" fails the demo when pgw1's is ever missing.
        throttle: close.throttle_of("pgw1").unwrap_or(0.0),
        cpu: close.cpu,
        // Plot and CSV, as above: the effective-rate check fails the demo without it.
        eff_rate: close
            .eff
            .get(&("pgw1".to_owned(), "gx_ccr_i".to_owned()))
            .copied()
            .unwrap_or(0.0),
        ..Row::default()
    };
    for ((peer, class), c) in &close.fastpath {
        let o = open
            .fastpath
            .get(&(peer.clone(), class.clone()))
            .copied()
            .unwrap_or_default();
        let d = |k: usize| ((c[k] - o[k]) / secs).max(0.0);
        r.peers
            .entry(peer.clone())
            .or_default()
            .insert(class.clone(), [d(0), d(1), d(2)]);
    }
    let peers: Vec<String> = window
        .iter()
        .flat_map(|s| s.throttle.keys().chain(s.fastpath.keys().map(|k| &k.0)))
        .cloned()
        .collect();
    for p in peers {
        let v = steady(window.iter().map(|s| s.throttle_of(&p)));
        r.steady_throttle.insert(p, v);
    }
    let keys: Vec<Key> = window.iter().flat_map(|s| s.eff.keys()).cloned().collect();
    for k in keys {
        let v = steady(window.iter().map(|s| s.eff.get(&k).copied()));
        r.steady_eff.insert(k, v);
    }
    let dt = (close.t - open.t).max(1e-3);
    for (up, (n1, s1)) in &close.upstream {
        let (n0, s0) = open.upstream.get(up).copied().unwrap_or_default();
        let (n, s) = (n1 - n0, s1 - s0);
        let ms = if n > 0.0 { 1000.0 * s / n } else { f64::NAN };
        r.upstream.insert(up.clone(), (n / dt, ms));
    }
    r
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::metrics::{parse_metrics, tests::EXPOSITION};

    pub(crate) fn snap(text: &str) -> Snap {
        Snap {
            series: parse_metrics(text),
        }
    }

    #[test]
    fn rows_are_counter_deltas_over_whole_publish_periods() {
        let a = Sample::from_snap(0.0, &snap(EXPOSITION)).unwrap();
        let b = Sample::from_snap(0.5, &snap(EXPOSITION)).unwrap();
        let next = EXPOSITION
            .replace("} 900", "} 1800")
            .replace("} 300", "} 500");
        let c = Sample::from_snap(1.0, &snap(&next)).unwrap();
        let d = Sample::from_snap(1.25, &snap(&next)).unwrap();
        let last = next.replace("} 1800", "} 2700").replace("} 500", "} 700");
        // The next publish is seen 2.1 s later: two publish periods.
        let e = Sample::from_snap(3.1, &snap(&last)).unwrap();
        let mut rows = Rows::new();
        let mut samples = Vec::new();
        let mut out = Vec::new();
        for s in [a, b, c, d, e] {
            samples.push(s);
            out.extend(rows.push(&samples, || "storm".into()));
        }
        assert_eq!(out.len(), 1, "the first publish only opens a row");
        let row = &out[0];
        assert_eq!(row.secs, 2.0);
        assert_eq!(row.peers["pgw1"]["gx_ccr_i"], [450.0, 0.0, 100.0]);
        assert_eq!(row.throttle, 40.0);
        assert_eq!(row.steady_throttle["pgw1"], Some(40.0));
        assert_eq!(
            row.steady_throttle["pgw2"], None,
            "pgw2 has no throttle series"
        );
    }
}
