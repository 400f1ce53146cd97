//! What the benchmarks share about their results: the `*-latest.json` files each part
//! writes, the results table (rows, markdown) and the machine context stored with them.
//! Used by `report` (the aggregate of one `cargo xtask bench`), `storm`, `coalesced` and
//! `flood`; `timestamp` also names the demo's run directory.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::lab;

/// P1 output of `tests/src/bin/xdp-bench.rs`.
pub const XDP_LATEST: &str = "bench/results/xdp-latest.json";
/// P2 output of `dra-tools/src/bin/dra-bench.rs`.
pub const RELAY_LATEST: &str = "bench/results/relay-latest.json";
/// P3–P4 (and P3 coalesced) output of `cargo xtask bench storm`; `bench coalesced` merges
/// its part into it.
pub const STORM_LATEST: &str = "bench/results/storm-latest.json";

/// P5 (flood shield) output of `cargo xtask bench flood`.
pub const FLOOD_LATEST: &str = "bench/results/flood-latest.json";

/// One line of the results table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRow {
    pub metric: String,
    pub measured: String,
    pub goal: String,
    /// None: no goal (reported only) or not measurable.
    pub met: Option<bool>,
}

impl TableRow {
    /// As stored in the JSON files.
    pub fn to_json(&self) -> Value {
        json!({
            "metric": self.metric,
            "measured": self.measured,
            "goal": self.goal,
            "met": self.met,
        })
    }

    /// Back from [`TableRow::to_json`].
    pub fn from_json(v: &Value) -> Option<TableRow> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(TableRow {
            metric: s("metric")?,
            measured: s("measured")?,
            goal: s("goal")?,
            met: v.get("met").and_then(Value::as_bool),
        })
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The markdown table: metric, measured, goal, met?
pub fn render_markdown(rows: &[TableRow]) -> String {
    let mut s = String::from("| metric | measured | goal | met? |\n|---|---|---|---|\n");
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {met} |",
            cell(&r.metric),
            cell(&r.measured),
            cell(&r.goal)
        );
    }
    s
}

/// The trimmed output of a command, or `unknown (why)`.
pub fn first_line(args: &[&str]) -> String {
    lab::sh(args)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("unknown ({e:#})"))
}

/// Date, kernel, CPU model and count, git commit.
pub fn machine(root: &Path) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown".to_owned(), |(_, m)| m.trim().to_owned());
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let root_s = root.display().to_string();
    let commit = first_line(&["git", "-C", &root_s, "rev-parse", "HEAD"]);
    // Results files are rewritten by the bench itself: they do not make the tree dirty.
    let dirty = lab::sh(&[
        "git",
        "-C",
        &root_s,
        "status",
        "--porcelain",
        "--",
        ".",
        ":!bench/results",
    ])
    .map(|s| !s.trim().is_empty())
    .ok();
    json!({
        "date": first_line(&["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        "kernel": first_line(&["uname", "-r"]),
        "cpu_model": model,
        "cpus": cpus,
        "load_average": std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        // The gateways' TCP reacts to `drop` (P3 coalesced) and to a flood's losses (P5)
        // with this congestion control.
        "tcp_congestion_control":
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .unwrap_or_default()
                .trim(),
        "git_commit": commit,
        "git_dirty": dirty,
    })
}

/// Writes a bench's result document (pretty JSON) as `name` into its run dir `out` and,
/// given `latest` (relative to `root`), there too; returns the path written last.
pub(crate) fn write_doc(
    root: &Path,
    out: &Path,
    name: &str,
    latest: Option<&str>,
    doc: &Value,
) -> Result<PathBuf> {
    let text = serde_json::to_string_pretty(doc)? + "\n";
    let mut path = out.join(name);
    std::fs::write(&path, &text).with_context(|| format!("write {}", path.display()))?;
    if let Some(latest) = latest {
        path = root.join(latest);
        std::fs::write(&path, &text).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(path)
}

/// UTC date and time for the name of a run directory (`results/<what>-<timestamp>/`).
pub(crate) fn timestamp() -> String {
    lab::sh(&["date", "-u", "+%Y%m%d-%H%M%S"])
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "now".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_marks_missed_goals_and_escapes_pipes() {
        let rows = [
            TableRow {
                metric: "P2 a|b".into(),
                measured: "5.43×".into(),
                goal: "≥ 3×".into(),
                met: Some(true),
            },
            TableRow {
                metric: "P4".into(),
                measured: "2.10×".into(),
                goal: "≤ 1.5×".into(),
                met: Some(false),
            },
            TableRow {
                metric: "P1".into(),
                measured: "38 ns".into(),
                goal: "— (reported)".into(),
                met: None,
            },
        ];
        let md = render_markdown(&rows);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "| metric | measured | goal | met? |");
        assert_eq!(lines[1], "|---|---|---|---|");
        assert_eq!(lines[2], "| P2 a\\|b | 5.43× | ≥ 3× | yes |");
        assert_eq!(lines[3], "| P4 | 2.10× | ≤ 1.5× | **no** |");
        assert_eq!(lines[4], "| P1 | 38 ns | — (reported) | — |");
        assert_eq!(lines.len(), 5);
        for r in &rows {
            assert_eq!(TableRow::from_json(&r.to_json()).as_ref(), Some(r));
        }
    }
}
