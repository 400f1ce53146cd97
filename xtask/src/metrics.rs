//! The agent's Prometheus metrics as the demo and every bench read them: one scrape of
//! /metrics from inside the agent's namespace ([`scrape`], the one way any of them
//! fetches the metrics), its parsed samples, and deltas between two scrapes.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read, Write},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use crate::lab;

/// The agent's metrics listener in its namespace, in every lab (`[metrics]` of the lab
/// and bench configs, and of the HA lab's generated configs).
pub(crate) const METRICS_ADDR: &str = "127.0.0.1:9100";

/// One sample of a Prometheus text exposition.
#[derive(Clone, Debug)]
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

/// The samples of a Prometheus text exposition (comments and unparsable lines skipped).
pub(crate) fn parse_metrics(text: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (head, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => {
                let body = rest.trim_end_matches('}');
                let mut labels = Vec::new();
                for kv in body.split("\",").filter(|s| !s.is_empty()) {
                    if let Some((k, v)) = kv.split_once('=') {
                        labels.push((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()));
                    }
                }
                (n.to_owned(), labels)
            }
            None => (head.to_owned(), Vec::new()),
        };
        out.push(Series {
            name,
            labels,
            value,
        });
    }
    out
}

/// One scrape of the agent's /metrics.
#[derive(Clone, Debug)]
pub(crate) struct Snap {
    pub(crate) series: Vec<Series>,
}

impl Snap {
    /// The series `name` whose labels include all of `want`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        want: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Series> + 'a {
        self.series.iter().filter(move |s| {
            s.name == name
                && want
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
        })
    }

    /// Sum of the series `name` whose labels include all of `want`. A scrape without
    /// any such series is an error naming `name` and `want` (a missing figure is never
    /// read as 0); a series at 0 sums to 0.
    pub(crate) fn sum(&self, name: &str, want: &[(&str, &str)]) -> Result<f64> {
        let mut found = false;
        let mut total = 0.0;
        for s in self.matching(name, want) {
            found = true;
            total += s.value;
        }
        if found {
            return Ok(total);
        }
        let asked = asked(name, want);
        match self.series.iter().filter(|s| s.name == name).count() {
            0 => bail!("no {asked} in the agent's metrics: no sample named {name} at all"),
            n => bail!(
                "no {asked} in the agent's metrics: {name} has {n} series, none with those \
                 labels"
            ),
        }
    }

    /// [`Snap::sum`], but 0 without any such series: for a series the agent creates at
    /// its first event. A family with labels has no series until one of its label sets
    /// is first counted or set (the agent's metrics module: "Families with labels appear
    /// once their first series is set"), so for such a series absence means none
    /// counted. Each caller says why absence means zero there; a figure that must be
    /// present reads [`Snap::sum`].
    pub(crate) fn sum_or_zero_if_absent(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.matching(name, want)
            .map(|s| s.value)
            // From +0.0: `sum()` of no series is -0.0, printed "-0" in results.
            .fold(0.0, |a, v| a + v)
    }

    /// The values of `label` on the series `name` whose labels include all of `want`.
    pub(crate) fn label_values(
        &self,
        name: &str,
        want: &[(&str, &str)],
        label: &str,
    ) -> BTreeSet<String> {
        self.matching(name, want)
            .filter_map(|s| {
                s.labels
                    .iter()
                    .find(|(k, _)| k == label)
                    .map(|(_, v)| v.clone())
            })
            .collect()
    }
}

/// `name{k="v",...}` of what a caller asked for (`name` alone without labels).
fn asked(name: &str, want: &[(&str, &str)]) -> String {
    if want.is_empty() {
        return name.to_owned();
    }
    let l: Vec<String> = want.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", l.join(","))
}

fn http_get_metrics(addr: &str) -> Result<String> {
    let addr: std::net::SocketAddr = addr
        .parse()
        .with_context(|| format!("metrics address {addr:?}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: dra\r\nConnection: close\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "metrics endpoint answered {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_owned())
}

/// Attempts of one scrape: a flood without XDP (bench flood) can starve even the loopback
/// connection inside the DRA's namespace of softirq time for a few seconds.
const SCRAPE_ATTEMPTS: u32 = 5;

/// Fetches the metrics of the agent listening on `addr` in network namespace `ns`: up to
/// [`SCRAPE_ATTEMPTS`] attempts, 500 ms apart; the error names the address, the namespace
/// and the attempts.
pub(crate) fn scrape(ns: &str, addr: &str) -> Result<Snap> {
    let mut attempt = 1;
    loop {
        match probe(ns, addr)? {
            Ok(snap) => return Ok(snap),
            Err(e) if attempt < SCRAPE_ATTEMPTS => {
                eprintln!(
                    "xtask: metrics scrape of {addr} in {ns} failed (attempt {attempt} of \
                     {SCRAPE_ATTEMPTS}: {e:#}); trying again"
                );
                attempt += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => {
                return Err(e.context(format!(
                    "metrics scrape of {addr} in {ns}: {SCRAPE_ATTEMPTS} attempts failed"
                )));
            }
        }
    }
}

/// One attempt at [`scrape`], silent: the outer error if namespace `ns` cannot be
/// entered, the inner one if the agent did not answer (an agent still starting, for a
/// caller that polls).
pub(crate) fn probe(ns: &str, addr: &str) -> Result<Result<Snap>> {
    let text = lab::in_netns(ns, || http_get_metrics(addr))
        .with_context(|| format!("enter namespace {ns} to scrape the metrics"))?;
    Ok(text.map(|t| Snap {
        series: parse_metrics(&t),
    }))
}

fn series_key(name: &str, labels: &[(String, String)]) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", l.join(","))
}

/// Deltas (after − before) of every counter sample (`*_total`) that has label
/// `peer = peer`, keyed `name{labels}`; zero deltas are left out.
pub(crate) fn counter_deltas(before: &Snap, after: &Snap, peer: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in after.series.iter().filter(|s| {
        s.name.ends_with("_total") && s.labels.iter().any(|(k, v)| k == "peer" && v == peer)
    }) {
        let b = before
            .series
            .iter()
            .find(|x| x.name == s.name && x.labels == s.labels)
            .map_or(0.0, |x| x.value);
        let d = s.value - b;
        if d != 0.0 {
            out.insert(series_key(&s.name, &s.labels), d);
        }
    }
    out
}

/// Per `family/outcome`: deltas of every counter with labels peer, class and outcome
/// (`dra_fastpath_requests_total` for the fast path, or whatever family a userspace
/// limiter exports with the same labels).
pub(crate) fn outcome_deltas(
    before: &Snap,
    after: &Snap,
    peer: &str,
    class: &str,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in &after.series {
        let has = |k: &str, v: &str| s.labels.iter().any(|(a, b)| a == k && b == v);
        if !(s.name.ends_with("_total") && has("peer", peer) && has("class", class)) {
            continue;
        }
        let Some((_, outcome)) = s.labels.iter().find(|(k, _)| k == "outcome") else {
            continue;
        };
        let b = before
            .series
            .iter()
            .find(|x| x.name == s.name && x.labels == s.labels)
            .map_or(0.0, |x| x.value);
        *out.entry(format!("{}/{outcome}", s.name)).or_insert(0.0) += s.value - b;
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small exposition (also used by demo's tests).
    pub(crate) const EXPOSITION: &str = "\
# HELP dra_fastpath_requests_total requests
# TYPE dra_fastpath_requests_total counter
dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"seen\"} 900
dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"marked\"} 300
dra_fastpath_requests_total{peer=\"pgw2\",class=\"gx_ccr_i\",outcome=\"seen\"} 400
dra_throttle_percent{peer=\"pgw1\"} 40
dra_db_cpu_percent 4.5
dra_db_cpu_source_up 1
dra_unanswered_invariant_violations_total 0
";

    /// A listener on a free loopback port answering one connection with `answer`.
    fn one_answer(answer: &'static str) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = [0u8; 512];
            let _ = c.read(&mut req);
            c.write_all(answer.as_bytes()).unwrap();
        });
        addr
    }

    #[test]
    fn a_scrape_reads_the_body_of_a_200_and_refuses_anything_else() {
        let ok = one_answer("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nup 1\n");
        assert_eq!(http_get_metrics(&ok).unwrap(), "up 1\n");
        let err = one_answer("HTTP/1.1 503 Service Unavailable\r\n\r\n");
        let e = format!("{:#}", http_get_metrics(&err).unwrap_err());
        assert!(e.contains("503"), "{e}");
        let e = format!("{:#}", http_get_metrics("no-address").unwrap_err());
        assert!(e.contains("no-address"), "{e}");
    }

    #[test]
    fn metrics_are_read_by_name_and_labels() {
        let s = Snap {
            series: parse_metrics(EXPOSITION),
        };
        let sum = |name: &str, want: &[(&str, &str)]| s.sum(name, want).unwrap();
        assert_eq!(
            sum(
                "dra_fastpath_requests_total",
                &[("peer", "pgw1"), ("outcome", "seen")]
            ),
            900.0
        );
        assert_eq!(
            sum(
                "dra_fastpath_requests_total",
                &[("class", "gx_ccr_i"), ("outcome", "seen")]
            ),
            1300.0
        );
        assert_eq!(sum("dra_throttle_percent", &[("peer", "pgw1")]), 40.0);
        assert_eq!(sum("dra_db_cpu_percent", &[]), 4.5);
        assert_eq!(sum("dra_unanswered_invariant_violations_total", &[]), 0.0);
        let peers = s.label_values("dra_fastpath_requests_total", &[], "peer");
        assert_eq!(peers.into_iter().collect::<Vec<_>>(), ["pgw1", "pgw2"]);
    }

    #[test]
    fn a_series_missing_from_the_scrape_is_an_error_naming_it_not_a_zero() {
        let s = Snap {
            series: parse_metrics(EXPOSITION),
        };
        let e = format!(
            "{:#}",
            s.sum("dra_session_store_errors_total", &[]).unwrap_err()
        );
        assert!(
            e.contains("dra_session_store_errors_total") && e.contains("no sample named"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            s.sum("dra_throttle_percent", &[("peer", "pgw2")])
                .unwrap_err()
        );
        assert!(
            e.contains("dra_throttle_percent{peer=\"pgw2\"}") && e.contains("has 1 series"),
            "{e}"
        );
        // Where absence means none counted: +0.0, not -0.0 (printed "-0").
        let z = s.sum_or_zero_if_absent("dra_no_such_metric", &[]);
        assert!(z == 0.0 && z.is_sign_positive());
        assert_eq!(
            s.sum_or_zero_if_absent("dra_throttle_percent", &[("peer", "pgw1")]),
            40.0
        );
    }

    #[test]
    fn metric_deltas_pick_the_peer_class_and_every_outcome_family() {
        const BEFORE: &str = "\
dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"admitted\"} 100
dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"dropped\"} 0
";
        const AFTER: &str = "\
dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"admitted\"} 600
dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"dropped\"} 4500
dra_fastpath_requests_total{peer=\"pgw2\",class=\"gx_ccr_i\",outcome=\"dropped\"} 7
dra_userspace_limit_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"dropped\"} 3
dra_answers_total{peer=\"pgw1\",result_code=\"2001\"} 900
dra_effective_rate{peer=\"pgw1\",class=\"gx_ccr_i\"} 500
";
        let before = Snap {
            series: parse_metrics(BEFORE),
        };
        let after = Snap {
            series: parse_metrics(AFTER),
        };
        let o = outcome_deltas(&before, &after, "pgw1", "gx_ccr_i");
        assert_eq!(o.len(), 3);
        assert_eq!(o["dra_fastpath_requests_total/admitted"], 500.0);
        assert_eq!(o["dra_fastpath_requests_total/dropped"], 4500.0);
        assert_eq!(o["dra_userspace_limit_total/dropped"], 3.0);
        let d = counter_deltas(&before, &after, "pgw1");
        assert_eq!(
            d["dra_answers_total{peer=\"pgw1\",result_code=\"2001\"}"],
            900.0
        );
        assert!(
            !d.keys()
                .any(|k| k.contains("pgw2") || k.contains("effective_rate"))
        );
    }
}
