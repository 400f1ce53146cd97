//! The coalesced case of P3: back-to-back requests. A gateway keeping W Gx
//! requests in flight on one TCP connection (`dra-loadgen closed`, CCR-I and CCR-T in
//! turn per slot) writes them back to back, so segments are full and one request in
//! every few straddles a segment boundary — the traffic a gateway flush or any busy
//! gateway produces. pgw1's CCR-I and CCR-T are each limited to 100/s; W = 4, 16 and
//! 100; the limit is enforced by XDP (`reject`, `drop`) or by the agent itself (no fast
//! path: `reject`, `drop`). Twelve runs on the lab, each a fresh `dra run`.
//!
//! Admitted = the limiter's own `admitted` counters (`dra_fastpath_requests_total` or the
//! userspace family, same labels) for gx_ccr_i + gx_ccr_t over a whole number of seconds
//! inside the client's measured window (the agent refreshes those metrics once per
//! second). Also recorded: what the gateway saw (answers by the PCRF, 2001 and 5002 —
//! the CCR-T of a session whose CCR-I was rejected — and the DRA's own 3002).
//!
//! Goal: |admitted − limit| ≤ 2 % of the limit for `reject`; at most limit + 2 % for
//! `drop` (TCP back-pressure may admit less: the utilization is reported).

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use dra_report::closed::ClosedSummary;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    agent_run::LAB,
    bench::window::Window,
    lab::{self, Bins, NS_DRA, NS_GW},
    metrics::{Snap, outcome_deltas},
    procs,
    results::{self, STORM_LATEST, TableRow},
};

/// The XDP `reject` config; the others are derived from it (action, interface).
pub const CONFIG: &str = "config/bench/dra-coalesced.toml";
/// Requests in flight per run.
pub const DEPTHS: [usize; 3] = [4, 16, 100];
/// (mode, fast path attached, action).
pub const MODES: [(&str, bool, &str); 4] = [
    ("xdp_reject", true, "reject"),
    ("xdp_drop", true, "drop"),
    ("userspace_reject", false, "reject"),
    ("userspace_drop", false, "drop"),
];
/// The limit: CCR-I and CCR-T each.
pub const CLASS_RATE: f64 = 100.0;
const CLASSES: [&str; 2] = ["gx_ccr_i", "gx_ccr_t"];
const WARMUP_S: u64 = 3;
const MEASURE_S: u64 = 10;
/// Metrics read at seconds 1 and 9 of the measured window (8 s apart).
const WINDOW: Window = Window {
    skip_first: 1,
    skip_last: 1,
};
/// Goal: admitted within this of the limit (`drop`: at most this above).
pub const GOAL_MAX_ERROR: f64 = 0.02;

/// The config of one mode: the XDP reject config with its action set and, without a
/// fast path, its interface removed.
pub fn config_for(text: &str, fast_path: bool, action: &str) -> Result<String> {
    let mut v: toml::Value = toml::from_str(text).context("parse the coalesced config")?;
    if !fast_path {
        v.get_mut("fast_path")
            .and_then(toml::Value::as_table_mut)
            .context("no [fast_path]")?
            .remove("interface");
    }
    let limits = v
        .get_mut("message_rate_limit_profile")
        .and_then(toml::Value::as_array_mut)
        .context("no limits")?;
    ensure!(
        limits.len() == 2,
        "the coalesced config has two limits (pgw1 Gx CCR-I and CCR-T)"
    );
    for l in limits.iter_mut().filter_map(toml::Value::as_table_mut) {
        ensure!(
            l.get("rate").and_then(toml::Value::as_integer) == Some(CLASS_RATE as i64),
            "limits at {CLASS_RATE}/s"
        );
        l.insert("action".into(), toml::Value::String(action.into()));
    }
    Ok(toml::to_string(&v)?)
}

/// One run (mode × depth), as the `coalesced` entries of `storm-latest.json` hold it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub mode: String,
    pub depth: usize,
    pub action: String,
    pub fast_path: bool,
    pub admitted_per_s: f64,
    pub limit_per_s: f64,
    pub error_pct: f64,
    pub utilization_pct: f64,
    /// The goal of this run (`reject`: |error| ≤ 2 %; `drop`: error ≤ +2 %).
    pub met: bool,
    pub admitted_source: String,
    pub gateway: Gateway,
    pub files: String,
}

/// What the gateway of one run saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gateway {
    pub answered_by_pcrf_per_s: f64,
    pub answered_in_window: BTreeMap<u32, u64>,
    pub offered_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub total_sent: u64,
    pub total_answered: u64,
    pub unanswered: u64,
    pub every_request_answered_once: bool,
}

/// Whether `error_pct` meets the goal of `action`.
fn goal_met(action: &str, error_pct: f64) -> bool {
    if action == "reject" {
        error_pct.abs() <= 100.0 * GOAL_MAX_ERROR
    } else {
        error_pct <= 100.0 * GOAL_MAX_ERROR
    }
}

/// Requests pgw1's CCR-I and CCR-T limits admitted between the two scrapes; an error
/// when `after` has no `admitted` series of a class (the agent publishes every limited
/// class's four outcomes once a second from its start).
fn admitted(before: &Snap, after: &Snap) -> Result<f64> {
    let mut total = 0.0;
    for c in CLASSES {
        let mine: Vec<f64> = outcome_deltas(before, after, "pgw1", c)
            .into_iter()
            .filter(|(k, _)| k.ends_with("/admitted"))
            .map(|(_, v)| v)
            .collect();
        if mine.is_empty() {
            bail!(
                "no admitted counter of pgw1 {c} in the agent's metrics \
                 (dra_fastpath_requests_total{{peer=\"pgw1\",class=\"{c}\",outcome=\"admitted\"}} \
                 or the userspace limiter's family with those labels)"
            );
        }
        total += mine.iter().sum::<f64>();
    }
    Ok(total)
}

fn one(
    root: &Path,
    bins: &Bins,
    out: &Path,
    mode: &str,
    fast_path: bool,
    action: &str,
    depth: usize,
) -> Result<Entry> {
    let dir = crate::agent_run::run_files(out, &format!("{mode}-{depth}"))?;
    let cfg = dir.join("dra.toml");
    let text =
        std::fs::read_to_string(root.join(CONFIG)).with_context(|| format!("read {CONFIG}"))?;
    std::fs::write(&cfg, config_for(&text, fast_path, action)?)?;
    let dra = LAB.start_agent_ready(
        lab::command_in(NS_DRA, &bins.dra)?,
        &cfg,
        dir.join("dra.log"),
    )?;
    let report = dir.join("pgw1.json");
    let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
    c.args([
        "closed",
        "--connect",
        "198.18.1.1:3868",
        "--bind",
        "198.18.1.2",
        "--peers",
        "1",
    ])
    .args([
        "--window",
        &depth.to_string(),
        "--warmup",
        &WARMUP_S.to_string(),
        "--seconds",
        &MEASURE_S.to_string(),
    ])
    .args(["--drain", "15", "--summary-json"])
    .arg(&report);
    let client_log = dir.join("pgw1.log");
    let mut run = dra.start_client(&mut c, "dra-loadgen closed", "pgw1", &client_log)?;
    let t0 = Instant::now();
    let (from, to) = WINDOW.instants(t0 + Duration::from_secs(WARMUP_S), MEASURE_S as f64);
    run.wait_until(from)?;
    let a = LAB.scrape()?;
    run.wait_until(to)?;
    let b = LAB.scrape()?;
    run.client_finished(Instant::now() + Duration::from_secs(60))?;
    run.stop_agent()?;
    let client: ClosedSummary = dra_report::parse(
        &std::fs::read_to_string(&report).context("gateway report")?,
        &report.display().to_string(),
    )?;
    let limit = 2.0 * CLASS_RATE;
    let secs = WINDOW.secs(MEASURE_S as f64);
    let admitted_per_s = admitted(&a, &b)? / secs;
    let error_pct = 100.0 * (admitted_per_s - limit) / limit;
    let met = goal_met(action, error_pct);
    let by_pcrf_per_s =
        (client.answered_with(2001) + client.answered_with(5002)) as f64 / client.measured_s;
    let sent = client.total_sent;
    let answered: u64 = client.total_answered.values().sum();
    let unanswered = client.unanswered;
    eprintln!(
        "xtask: coalesced {mode}, {depth} in flight: admitted {admitted_per_s:.1}/s of \
         {limit:.0} ({error_pct:+.2} %), gateway saw {by_pcrf_per_s:.1}/s answered by the \
         PCRF, offered {:.0}/s; sent {sent}, answered {answered}, unanswered {unanswered}",
        client.requests_per_s,
    );
    Ok(Entry {
        mode: mode.into(),
        depth,
        action: action.into(),
        fast_path,
        admitted_per_s,
        limit_per_s: limit,
        error_pct,
        utilization_pct: 100.0 * admitted_per_s / limit,
        met,
        admitted_source: format!(
            "the limiter's admitted counters, gx_ccr_i + gx_ccr_t, seconds {}..{} of the \
             measured window",
            WINDOW.skip_first,
            MEASURE_S - WINDOW.skip_last
        ),
        gateway: Gateway {
            answered_by_pcrf_per_s: by_pcrf_per_s,
            answered_in_window: client.answered,
            offered_per_s: client.requests_per_s,
            p50_ms: client.p50_ms,
            p99_ms: client.p99_ms,
            total_sent: sent,
            total_answered: answered,
            unanswered,
            every_request_answered_once: unanswered == 0 && answered == sent,
        },
        files: dir.strip_prefix(root).unwrap_or(&dir).display().to_string(),
    })
}

/// Runs the twelve coalesced runs on a lab that is up; returns the `coalesced` entries
/// and the P3-coalesced table rows (one per mode).
pub fn runs(root: &Path, bins: &Bins, out: &Path) -> Result<(Vec<Entry>, Vec<TableRow>)> {
    let mut entries = Vec::new();
    for (mode, fast_path, action) in MODES {
        for depth in DEPTHS {
            entries.push(
                one(root, bins, out, mode, fast_path, action, depth)
                    .with_context(|| format!("coalesced {mode} {depth}"))?,
            );
        }
    }
    let rows = table_rows(&entries)?;
    Ok((entries, rows))
}

/// The P3-coalesced table rows of `entries`, one per mode: met when each of its runs
/// met its goal and every request was answered once. An error for a mode without its
/// [`DEPTHS`] runs.
pub fn table_rows(entries: &[Entry]) -> Result<Vec<TableRow>> {
    let mut rows = Vec::new();
    for (mode, _, action) in MODES {
        let mine: Vec<&Entry> = entries.iter().filter(|e| e.mode == mode).collect();
        let depths: Vec<usize> = mine.iter().map(|e| e.depth).collect();
        ensure!(
            depths == DEPTHS,
            "coalesced {mode}: runs at depths {depths:?}, not {DEPTHS:?}"
        );
        let errs: Vec<String> = mine
            .iter()
            .map(|e| format!("{}: {:+.2} %", e.depth, e.error_pct))
            .collect();
        let answered_once = mine.iter().all(|e| e.gateway.every_request_answered_once);
        let met = mine.iter().all(|e| e.met) && answered_once;
        let util = if action == "drop" {
            let u: Vec<String> = mine
                .iter()
                .map(|e| format!("{:.0} %", e.utilization_pct))
                .collect();
            format!("; utilization {}", u.join(", "))
        } else {
            String::new()
        };
        rows.push(TableRow {
            metric: format!("P3 coalesced, {mode}: admitted-rate error at 4/16/100 in flight"),
            measured: format!(
                "{}{util}; every request answered once: {answered_once}",
                errs.join(", ")
            ),
            goal: if action == "reject" {
                "≤ 2 % each".into()
            } else {
                "≤ +2 % each (below allowed)".into()
            },
            met: Some(met),
        });
    }
    Ok(rows)
}

/// `cargo xtask bench coalesced` alone: lab up, the runs, lab down; merges the result
/// into `storm-latest.json` (key `coalesced`).
pub fn run(root: &Path) -> Result<()> {
    procs::install_signal_handlers();
    let bins = Bins::release(root);
    let out = crate::agent_run::run_dir(root, "coalesced")?;
    let (entries, rows) = lab::run_on_lab(&bins, &out, || runs(root, &bins, &out))?;
    merge_into_latest(root, &entries, &rows)?;
    print!("\n{}", results::render_markdown(&rows));
    Ok(())
}

/// Writes the coalesced entries and rows into `storm-latest.json`, keeping the rest.
/// Without the file it starts from an empty document; a file that cannot be read or
/// is not a JSON object is an error naming it, and is left as it is.
pub fn merge_into_latest(root: &Path, entries: &[Entry], rows: &[TableRow]) -> Result<()> {
    let latest = root.join(STORM_LATEST);
    let mut doc: Value = match std::fs::read_to_string(&latest) {
        Ok(t) => serde_json::from_str(&t).with_context(|| {
            format!(
                "{} is not JSON; the coalesced results are not merged into it",
                latest.display()
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(e) => {
            return Err(e).with_context(|| format!("read {}", latest.display()));
        }
    };
    let obj = doc.as_object_mut().with_context(|| {
        format!(
            "{} is not a JSON object; the coalesced results are not merged into it",
            latest.display()
        )
    })?;
    obj.insert("coalesced".into(), serde_json::to_value(entries)?);
    obj.insert(
        "coalesced_table".into(),
        Value::Array(rows.iter().map(TableRow::to_json).collect()),
    );
    std::fs::write(&latest, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("write {}", latest.display()))?;
    eprintln!("xtask: coalesced results in {}", latest.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_modes_differ_only_in_action_and_interface() {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join(CONFIG)).unwrap();
        for (_, fast_path, action) in MODES {
            let c = config_for(&text, fast_path, action).unwrap();
            let v: toml::Value = toml::from_str(&c).unwrap();
            assert_eq!(v["fast_path"].get("interface").is_some(), fast_path);
            for l in v["message_rate_limit_profile"].as_array().unwrap() {
                assert_eq!(l["action"].as_str(), Some(action));
                assert_eq!(l["rate"].as_integer(), Some(100));
            }
        }
    }

    fn entry(mode: &str, action: &str, depth: usize, error_pct: f64) -> Entry {
        Entry {
            mode: mode.into(),
            depth,
            action: action.into(),
            fast_path: true,
            admitted_per_s: 200.0 * (1.0 + error_pct / 100.0),
            limit_per_s: 200.0,
            error_pct,
            utilization_pct: 100.0 + error_pct,
            met: goal_met(action, error_pct),
            admitted_source: "test".into(),
            gateway: Gateway {
                answered_by_pcrf_per_s: 200.0,
                answered_in_window: BTreeMap::from([(2001, 2000)]),
                offered_per_s: 900.0,
                p50_ms: 1.0,
                p99_ms: 2.0,
                total_sent: 9000,
                total_answered: 9000,
                unanswered: 0,
                every_request_answered_once: true,
            },
            files: "results/x".into(),
        }
    }

    fn all_entries() -> Vec<Entry> {
        let mut v = Vec::new();
        for (mode, _, action) in MODES {
            for d in DEPTHS {
                v.push(entry(mode, action, d, 1.0));
            }
        }
        v
    }

    #[test]
    fn a_mode_meets_its_goal_from_its_typed_runs_only_when_each_run_does() {
        assert!(goal_met("reject", -1.5) && !goal_met("reject", -2.5));
        assert!(goal_met("drop", -30.0) && !goal_met("drop", 2.5));
        let mut e = all_entries();
        let rows = table_rows(&e).unwrap();
        assert!(rows.iter().all(|r| r.met == Some(true)), "{rows:?}");
        assert!(
            rows[1].measured.contains("utilization 101 %"),
            "{}",
            rows[1].measured
        );
        e[0] = entry("xdp_reject", "reject", 4, -3.0);
        e[5].gateway.every_request_answered_once = false;
        let rows = table_rows(&e).unwrap();
        assert_eq!(rows[0].met, Some(false));
        assert!(
            rows[0].measured.contains("4: -3.00 %"),
            "{}",
            rows[0].measured
        );
        assert_eq!(
            rows[1].met,
            Some(false),
            "xdp_drop 100: a request not answered once"
        );
        // A mode without its runs is an error, never an empty "all met".
        e.retain(|x| x.mode != "userspace_drop");
        let err = format!("{:#}", table_rows(&e).unwrap_err());
        assert!(err.contains("userspace_drop"), "{err}");
    }

    #[test]
    fn the_admitted_count_is_an_error_when_a_class_has_no_admitted_series() {
        let snap = |t: &str| Snap {
            series: crate::metrics::parse_metrics(t),
        };
        let line = |class: &str, n: u32| {
            format!(
                "dra_fastpath_requests_total{{peer=\"pgw1\",class=\"{class}\",\
                 outcome=\"admitted\"}} {n}\n"
            )
        };
        let before = snap("");
        let after = snap(&(line("gx_ccr_i", 800) + &line("gx_ccr_t", 0)));
        assert_eq!(admitted(&before, &after).unwrap(), 800.0);
        let after = snap(&line("gx_ccr_i", 800));
        let e = format!("{:#}", admitted(&before, &after).unwrap_err());
        assert!(e.contains("gx_ccr_t"), "{e}");
    }

    /// A workspace root of its own under the temp dir, with `storm-latest.json` holding
    /// `text` (none for `None`).
    fn root_with_latest(tag: &str, text: Option<&str>) -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("xtask-coalesced-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let latest = root.join(STORM_LATEST);
        std::fs::create_dir_all(latest.parent().unwrap()).unwrap();
        if let Some(t) = text {
            std::fs::write(&latest, t).unwrap();
        }
        root
    }

    #[test]
    fn merging_keeps_the_document_refuses_an_unparsable_one_and_starts_one_when_missing() {
        let entries = all_entries();
        let rows = table_rows(&entries).unwrap();

        let root = root_with_latest("merge", Some(r#"{"p3": {"met": true}, "coalesced": []}"#));
        merge_into_latest(&root, &entries, &rows).unwrap();
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(STORM_LATEST)).unwrap())
                .unwrap();
        assert_eq!(doc["p3"]["met"], true, "the rest of the document is kept");
        let back: Vec<Entry> = serde_json::from_value(doc["coalesced"].clone()).unwrap();
        assert_eq!(back, entries);
        assert_eq!(
            doc["coalesced_table"].as_array().unwrap().len(),
            MODES.len()
        );

        for (tag, text) in [("garbled", "{\"p3\": {\"met\": tr"), ("array", "[1, 2]")] {
            let root = root_with_latest(tag, Some(text));
            let latest = root.join(STORM_LATEST);
            let e = format!(
                "{:#}",
                merge_into_latest(&root, &entries, &rows).unwrap_err()
            );
            assert!(e.contains(&latest.display().to_string()), "{tag}: {e}");
            assert_eq!(
                std::fs::read_to_string(&latest).unwrap(),
                text,
                "{tag}: the file is left as it is"
            );
            std::fs::remove_dir_all(&root).unwrap();
        }

        let missing = root_with_latest("missing", None);
        merge_into_latest(&missing, &entries, &rows).unwrap();
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(missing.join(STORM_LATEST)).unwrap())
                .unwrap();
        assert_eq!(
            doc.as_object().unwrap().len(),
            2,
            "coalesced and its table only"
        );
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&missing).unwrap();
    }
}
