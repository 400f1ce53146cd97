//! Markdown tables and CSV for a sweep: one table per variant × client count × metric,
//! a row per strategy, a column per heartbeat period.

use std::fmt::Write as _;

use super::lb::{LbConfig, RunResult, SweepRow, Variant};
use dra::routing::Strategy;

/// A number reported per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// CV of per-server load ([`RunResult::cv`]).
    Cv,
    /// Max / mean of per-server load ([`RunResult::max_over_mean`]).
    MaxOverMean,
    /// `seed002`: mean per-window CV ([`RunResult::window_cv`]).
    WindowCv,
    /// `queue`: CV of time-averaged queue length per capacity ([`RunResult::queue_cv`]).
    QueueCv,
    /// `queue`: p99 latency ([`RunResult::p99`]).
    P99,
    /// `queue`: mean latency ([`RunResult::mean_latency`]).
    MeanLatency,
}

impl Metric {
    /// The metrics reported for a variant, in table order.
    pub fn for_variant(variant: Variant) -> &'static [Metric] {
        match variant {
            Variant::Seed002 => &[Self::Cv, Self::MaxOverMean, Self::WindowCv],
            Variant::Queue => &[
                Self::Cv,
                Self::MaxOverMean,
                Self::P99,
                Self::MeanLatency,
                Self::QueueCv,
            ],
        }
    }

    /// Short name, used in file names and CSV headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cv => "cv",
            Self::MaxOverMean => "max_over_mean",
            Self::WindowCv => "window_cv",
            Self::QueueCv => "qlen_cv",
            Self::P99 => "p99",
            Self::MeanLatency => "mean_latency",
        }
    }

    /// What the number means for `variant`, for table titles and plot axes.
    pub fn describe(self, variant: Variant) -> &'static str {
        match (self, variant) {
            (Self::Cv, Variant::Seed002) => "CV of per-server signals received (stddev/mean)",
            (Self::Cv, Variant::Queue) => "CV of per-server utilisation (stddev/mean)",
            (Self::MaxOverMean, Variant::Seed002) => "max/mean of per-server signals received",
            (Self::MaxOverMean, Variant::Queue) => "max/mean of per-server utilisation",
            (Self::WindowCv, _) => "mean CV of signals received per window",
            (Self::QueueCv, _) => "CV of time-averaged queue length per unit capacity",
            (Self::P99, _) => "p99 latency (waiting + service), mean inter-arrival times",
            (Self::MeanLatency, _) => "mean latency, mean inter-arrival times",
        }
    }

    /// The value of this metric in `r`, if the run's variant has it.
    pub fn of(self, r: &RunResult) -> Option<f64> {
        match self {
            Self::Cv => Some(r.cv),
            Self::MaxOverMean => Some(r.max_over_mean),
            Self::WindowCv => r.window_cv,
            Self::QueueCv => r.queue_cv,
            Self::P99 => r.p99,
            Self::MeanLatency => r.mean_latency,
        }
    }
}

/// Compact number: 4 decimals from 0.01 up, 3 significant digits in e-notation below.
pub fn fmt_num(x: f64) -> String {
    if x == 0.0 {
        "0".to_owned()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else if x.abs() >= 0.01 {
        format!("{x:.4}")
    } else {
        format!("{x:.2e}")
    }
}

/// Heartbeat period as written in headers (`0`, `2`, `0.5`).
pub fn fmt_h(h: f64) -> String {
    format!("{h}")
}

/// Values in first-seen order.
fn distinct<T: PartialEq + Copy>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in it {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// One line describing the parameters a variant's runs share.
pub fn describe_config(c: &LbConfig) -> String {
    let common = format!(
        "{} signals, {:.0} % of clients send {}× the traffic, heartbeat phases {}, seed {}",
        c.signals,
        c.heavy_fraction * 100.0,
        c.heavy_factor,
        c.phases.name(),
        c.seed
    );
    match c.variant {
        Variant::Seed002 => format!(
            "{} servers, load = signals received so far; {common}; window {} signals",
            c.servers, c.window
        ),
        Variant::Queue => format!(
            "capacities {:?}, utilisation {}, load = requests in server, Load-Value 0 at {} \
             per unit capacity, warm-up {:.0} %; {common}",
            c.capacities,
            c.utilisation,
            c.queue_full,
            c.warmup * 100.0
        ),
    }
}

/// Markdown: per variant a parameter line, then per client count and metric a table with
/// a row per strategy and a column per heartbeat period H.
pub fn markdown(rows: &[SweepRow]) -> String {
    let mut out = String::new();
    for variant in distinct(rows.iter().map(|r| r.config.variant)) {
        let of_variant: Vec<&SweepRow> = rows
            .iter()
            .filter(|r| r.config.variant == variant)
            .collect();
        let _ = writeln!(out, "## {variant}\n");
        let _ = writeln!(out, "{}.\n", describe_config(&of_variant[0].config));
        for n in distinct(of_variant.iter().map(|r| r.config.clients)) {
            let group: Vec<&SweepRow> = of_variant
                .iter()
                .copied()
                .filter(|r| r.config.clients == n)
                .collect();
            let hs = distinct(group.iter().map(|r| r.config.heartbeat));
            let strategies: Vec<Strategy> = distinct(group.iter().map(|r| r.config.strategy));
            for &metric in Metric::for_variant(variant) {
                let _ = writeln!(
                    out,
                    "### {variant}, {n} client{} — {}\n",
                    if n == 1 { "" } else { "s" },
                    metric.describe(variant)
                );
                out.push_str("| strategy \\ H |");
                for h in &hs {
                    let _ = write!(out, " {} |", fmt_h(*h));
                }
                out.push_str("\n|---|");
                out.push_str(&"---:|".repeat(hs.len()));
                out.push('\n');
                for s in &strategies {
                    let _ = write!(out, "| {s} |");
                    for h in &hs {
                        let cell = group
                            .iter()
                            .find(|r| r.config.strategy == *s && r.config.heartbeat == *h)
                            .and_then(|r| metric.of(&r.result))
                            .map_or_else(|| "–".to_owned(), fmt_num);
                        let _ = write!(out, " {cell} |");
                    }
                    out.push('\n');
                }
                out.push('\n');
            }
        }
    }
    out
}

/// CSV, one line per run: parameters, every metric (empty when not applicable) and the
/// per-server requests received (`;`-separated).
pub fn csv(rows: &[SweepRow]) -> String {
    let mut out = String::from(
        "variant,clients,heartbeat,strategy,seed,signals,cv,max_over_mean,window_cv,\
         qlen_cv,p99,mean_latency,received\n",
    );
    let opt = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v}"));
    for r in rows {
        let c = &r.config;
        let received: Vec<String> = r
            .result
            .servers
            .iter()
            .map(|s| s.received.to_string())
            .collect();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            c.variant,
            c.clients,
            c.heartbeat,
            c.strategy,
            c.seed,
            c.signals,
            r.result.cv,
            r.result.max_over_mean,
            opt(r.result.window_cv),
            opt(r.result.queue_cv),
            opt(r.result.p99),
            opt(r.result.mean_latency),
            received.join(";")
        );
    }
    out
}
