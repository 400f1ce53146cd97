//! A real Prometheus (Debian's `prometheus`) in the lab: our own process with its own
//! config, rule files and storage under the lab's state dir, in the agent's network
//! namespace (entered alone, as every lab process), scraping the agent's metrics every
//! second and evaluating the shipped rules every second. Whatever system Prometheus the
//! package may have started is neither used nor touched. Its HTTP API is read from
//! inside the namespace ([`Prometheus::get`]).

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;

use crate::{lab, metrics::METRICS_ADDR, procs::Proc};

use super::rules;

/// Where the lab's Prometheus listens, inside [`lab::NS_DRA`].
pub(crate) const LISTEN: &str = "127.0.0.1:9090";
/// Its scrape job for the agent (the name the shipped DRAAgentDown alert expects).
pub(crate) const JOB: &str = "dra";
/// Its files: config, rules and storage (removed with the lab's state dir).
const DIR: &str = "prometheus";

/// The lab's Prometheus process and how to reach it.
pub(crate) struct Prometheus {
    proc: Proc,
    /// Its config, rules and TSDB.
    pub(crate) dir: PathBuf,
    /// Unix time (s) when it was started: the start of every range this run asks for.
    pub(crate) started: f64,
}

/// Seconds since the Unix epoch now.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The config of the lab's Prometheus: one job scraping the agent at `target` every
/// second, the rules of `rule_files` evaluated every second.
fn config(target: &str, rule_files: &[PathBuf]) -> String {
    let files: String = rule_files
        .iter()
        .map(|f| format!("  - {}\n", f.display()))
        .collect();
    format!(
        "# Written by cargo xtask for the lab; not the system's Prometheus.\n\
         global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n{files}\
         scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      \
         - targets: [\"{target}\"]\n"
    )
}

impl Prometheus {
    /// Starts Prometheus in the lab's agent namespace with the shipped rules of `root`
    /// (the alerts' `for:` divided by [`rules::LAB_FOR_DIVISOR`]) and waits until it is
    /// ready. It scrapes the agent's metrics address whether or not the agent runs yet.
    pub(crate) fn start(root: &Path) -> Result<Prometheus> {
        let dir = Path::new(lab::STATE_DIR).join(DIR);
        std::fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("create {}", dir.display()))?;
        let shipped = root.join(super::MONITORING_DIR);
        let recording = dir.join(super::RULES);
        std::fs::copy(shipped.join(super::RULES), &recording)
            .with_context(|| format!("copy {} into {}", super::RULES, dir.display()))?;
        let alerts_text = std::fs::read_to_string(shipped.join(super::ALERTS))?;
        let alerts = dir.join(super::ALERTS);
        std::fs::write(
            &alerts,
            rules::with_shorter_for(&alerts_text, rules::LAB_FOR_DIVISOR)?,
        )?;
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config(METRICS_ADDR, &[recording, alerts]))?;
        let mut cmd = lab::command_in(lab::NS_DRA, Path::new("prometheus"))?;
        cmd.arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={LISTEN}"))
            .arg("--storage.tsdb.retention.time=1d");
        let started = unix_now();
        let child = lab::spawn_logged("prometheus", &mut cmd)
            .context("start prometheus (the Debian package `prometheus`: cargo xtask setup)")?;
        let mut p = Prometheus {
            proc: Proc::new("prometheus", child),
            dir,
            started,
        };
        p.wait_ready()?;
        Ok(p)
    }

    /// Its log (in the lab's state dir).
    pub(crate) fn log(&self) -> PathBuf {
        lab::log_file("prometheus")
    }

    /// Waits up to 30 s for `/-/ready`; fails at once when it exits.
    fn wait_ready(&mut self) -> Result<()> {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            crate::procs::interrupted()?;
            if let Some(st) = self.proc.exited() {
                bail!(
                    "prometheus exited ({st}); log:\n{}",
                    std::fs::read_to_string(self.log()).unwrap_or_default()
                );
            }
            let last = match self.get("/-/ready") {
                Ok(_) => return Ok(()),
                Err(e) => format!("{e:#}"),
            };
            ensure!(
                Instant::now() < end,
                "prometheus not ready in 30 s (last: {last}); log {}",
                self.log().display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits up to `within` until `expr` returns a sample (e.g. the agent scraped).
    pub(crate) fn wait_for(&mut self, expr: &str, within: Duration) -> Result<()> {
        let end = Instant::now() + within;
        loop {
            crate::procs::interrupted()?;
            if let Some(st) = self.proc.exited() {
                bail!("prometheus exited ({st}); log {}", self.log().display());
            }
            let last = match self.query(expr) {
                Ok(v) if !v.is_empty() => return Ok(()),
                Ok(_) => "no sample".to_owned(),
                Err(e) => format!("{e:#}"),
            };
            ensure!(
                Instant::now() < end,
                "prometheus: {expr} returned nothing in {within:?} (last: {last}); log {}",
                self.log().display()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Lets it run on after this is dropped (`lab up --monitoring`; `lab down` stops it).
    pub(crate) fn leave_running(self) {
        self.proc.leave_running();
    }

    /// `GET path` of its HTTP API from inside the lab namespace; the body of a 200.
    pub(crate) fn get(&self, path: &str) -> Result<String> {
        let text = lab::in_netns(lab::NS_DRA, || http_get(LISTEN, path))
            .with_context(|| format!("enter {} to ask prometheus", lab::NS_DRA))??;
        Ok(text)
    }

    /// The `data` of an API answer, or its error.
    fn api<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T> {
        let body = self.get(path)?;
        let a: Answer<T> =
            serde_json::from_str(&body).with_context(|| format!("GET {path}: {body}"))?;
        match (a.status.as_str(), a.data) {
            ("success", Some(d)) => Ok(d),
            _ => bail!(
                "GET {path}: {} ({})",
                a.error.unwrap_or_default(),
                a.error_type.unwrap_or_default()
            ),
        }
    }

    /// An instant query now.
    pub(crate) fn query(&self, expr: &str) -> Result<Vec<InstantSeries>> {
        let d: Data<InstantSeries> = self.api(&format!("/api/v1/query?query={}", encode(expr)))?;
        Ok(d.result)
    }

    /// A range query from `start` to `end` (Unix seconds), one point per `step` seconds.
    pub(crate) fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Vec<RangeSeries>> {
        let d: Data<RangeSeries> = self.api(&format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            encode(expr)
        ))?;
        Ok(d.result)
    }

    /// The values of `label` on the series matching `selector`.
    pub(crate) fn label_values(&self, label: &str, selector: &str) -> Result<Vec<String>> {
        self.api(&format!(
            "/api/v1/label/{label}/values?match[]={}&start={:.3}",
            encode(selector),
            self.started
        ))
    }

    /// Every loaded rule with its health.
    pub(crate) fn rules(&self) -> Result<Vec<RuleState>> {
        let d: RuleGroups = self.api("/api/v1/rules")?;
        Ok(d.groups.into_iter().flat_map(|g| g.rules).collect())
    }

    /// When each alert fired and resolved between `start` and `end` (Unix seconds), from
    /// the `ALERTS` series Prometheus writes for its rules, point by point (`step`).
    pub(crate) fn alert_spans(&self, start: f64, end: f64, step: f64) -> Result<Vec<AlertSpan>> {
        let series = self.query_range(r#"ALERTS{alertstate="firing"}"#, start, end, step)?;
        Ok(spans(&series, end, step))
    }
}

/// An API answer.
#[derive(Deserialize)]
struct Answer<T> {
    status: String,
    data: Option<T>,
    error: Option<String>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
}

/// The `data` of a query answer.
#[derive(Deserialize)]
struct Data<T> {
    result: Vec<T>,
}

/// A series of an instant query: its labels and `[time, "value"]`.
#[derive(Debug, Deserialize)]
pub(crate) struct InstantSeries {
    pub(crate) metric: BTreeMap<String, String>,
    pub(crate) value: (f64, String),
}

/// A series of a range query: its labels and `[[time, "value"], ...]`.
#[derive(Debug, Deserialize)]
pub(crate) struct RangeSeries {
    pub(crate) metric: BTreeMap<String, String>,
    pub(crate) values: Vec<(f64, String)>,
}

impl RangeSeries {
    /// Whether any of its points is a number (not NaN: e.g. a quantile of no requests).
    pub(crate) fn has_number(&self) -> bool {
        self.values
            .iter()
            .any(|(_, v)| v.parse::<f64>().is_ok_and(|x| !x.is_nan()))
    }
}

#[derive(Deserialize)]
struct RuleGroups {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
struct RuleGroup {
    rules: Vec<RuleState>,
}

/// A loaded rule as `/api/v1/rules` shows it.
#[derive(Debug, Deserialize)]
pub(crate) struct RuleState {
    pub(crate) name: String,
    pub(crate) health: String,
    #[serde(default, rename = "lastError")]
    pub(crate) last_error: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
}

/// One stretch of time an alert (one label set) was firing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AlertSpan {
    pub(crate) alert: String,
    /// Its labels but the name, `alertname`, `alertstate`, `job` and `instance`:
    /// `{peer="pgw1",severity="warning"}`.
    pub(crate) labels: String,
    pub(crate) fired: f64,
    /// `None`: still firing at the end of the range.
    pub(crate) resolved: Option<f64>,
}

/// The firing stretches of `ALERTS` range series (points `step` apart up to `end`): a
/// gap of more than one step ends a stretch, resolved at the first point after it.
fn spans(series: &[RangeSeries], end: f64, step: f64) -> Vec<AlertSpan> {
    let mut out = Vec::new();
    for s in series {
        let alert = s.metric.get("alertname").cloned().unwrap_or_default();
        let labels: Vec<String> = s
            .metric
            .iter()
            .filter(|(k, _)| {
                !["__name__", "alertname", "alertstate", "job", "instance"].contains(&k.as_str())
            })
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        let labels = format!("{{{}}}", labels.join(","));
        let mut from: Option<(f64, f64)> = None;
        for &(t, _) in &s.values {
            from = match from {
                Some((f, last)) if t - last <= step * 1.5 => Some((f, t)),
                Some((f, last)) => {
                    out.push(AlertSpan {
                        alert: alert.clone(),
                        labels: labels.clone(),
                        fired: f,
                        resolved: Some(last + step),
                    });
                    Some((t, t))
                }
                None => Some((t, t)),
            };
        }
        if let Some((f, last)) = from {
            out.push(AlertSpan {
                alert: alert.clone(),
                labels: labels.clone(),
                fired: f,
                resolved: (end - last > step * 1.5).then_some(last + step),
            });
        }
    }
    out.sort_by(|a, b| a.fired.total_cmp(&b.fired).then(a.alert.cmp(&b.alert)));
    out
}

/// Percent-encodes a query parameter (everything but RFC 3986's unreserved bytes).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET path` over HTTP/1.0 (no chunked answer to decode) at `addr`; the body of a 200,
/// else an error with the status line and the body.
fn http_get(addr: &str, path: &str) -> Result<String> {
    let addr: std::net::SocketAddr = addr.parse().with_context(|| format!("address {addr:?}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connect to prometheus at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    let status = head.lines().next().unwrap_or("");
    ensure!(
        status.split_whitespace().nth(1) == Some("200"),
        "GET {path}: {status}: {}",
        body.trim()
    );
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], times: &[f64]) -> RangeSeries {
        RangeSeries {
            metric: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            values: times.iter().map(|t| (*t, "1".to_owned())).collect(),
        }
    }

    #[test]
    fn alert_spans_end_at_a_gap_and_stay_open_at_the_end() {
        let a = series(
            &[
                ("__name__", "ALERTS"),
                ("alertname", "A"),
                ("peer", "pgw1"),
                ("instance", "x"),
            ],
            &[10.0, 11.0, 12.0, 20.0, 21.0],
        );
        let b = series(&[("alertname", "B")], &[30.0, 31.0]);
        let got = spans(&[a, b], 31.0, 1.0);
        let want = |alert: &str, labels: &str, fired, resolved| AlertSpan {
            alert: alert.into(),
            labels: labels.into(),
            fired,
            resolved,
        };
        assert_eq!(
            got,
            [
                want("A", "{peer=\"pgw1\"}", 10.0, Some(13.0)),
                want("A", "{peer=\"pgw1\"}", 20.0, Some(22.0)),
                want("B", "{}", 30.0, None),
            ]
        );
    }

    #[test]
    fn queries_are_percent_encoded_and_the_config_scrapes_the_agent() {
        assert_eq!(
            encode(r#"up{job="dra"} > 0"#),
            "up%7Bjob%3D%22dra%22%7D%20%3E%200"
        );
        let c = config("127.0.0.1:9100", &[PathBuf::from("/r/a.yml")]);
        assert!(c.contains("scrape_interval: 1s") && c.contains("evaluation_interval: 1s"));
        assert!(c.contains("  - /r/a.yml\n") && c.contains("[\"127.0.0.1:9100\"]"));
        assert!(c.contains("job_name: dra"));
    }
}
