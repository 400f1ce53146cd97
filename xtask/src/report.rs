//! The benchmark results of one `cargo xtask bench`: machine context, P1–P5 in
//! `bench/results/<YYYY-MM-DD>.json` and a markdown table in `bench/results/<YYYY-MM-DD>.md`.
//!
//! P1 and P2 are read back from the files their binaries have just written
//! (`xdp-latest.json`, `relay-latest.json`), P3–P4 from `storm-latest.json`, P5 (the flood
//! shield) from `flood-latest.json`; a file older than the start of this `bench` is
//! refused (the table never mixes runs).

use std::{fmt::Write as _, path::Path, time::SystemTime};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::results::{
    FLOOD_LATEST, RELAY_LATEST, STORM_LATEST, TableRow, XDP_LATEST, first_line, machine,
    render_markdown,
};

/// P2 goal: dra agent req/s ÷ freeDiameter req/s at least this.
pub const GOAL_P2_MIN_RATIO: f64 = 3.0;

/// P1 rows from the xdp-bench JSON: one per case, ns/packet and ratio to bare XDP_PASS.
pub fn p1_rows(xdp: &Value) -> Result<Vec<TableRow>> {
    let cases = xdp
        .get("cases")
        .and_then(Value::as_array)
        .context("xdp results: no cases")?;
    let pass = cases
        .iter()
        .find(|c| c.get("ratio_to_pass").and_then(Value::as_f64) == Some(1.0))
        .and_then(|c| c.get("ns_per_packet").and_then(Value::as_f64));
    let runs = xdp
        .get("runs")
        .and_then(Value::as_u64)
        .context("xdp results: no runs")?;
    let mut rows = Vec::new();
    for c in cases {
        let name = c
            .get("case")
            .and_then(Value::as_str)
            .context("case without name")?;
        let ns = c
            .get("ns_per_packet")
            .and_then(Value::as_f64)
            .context("case without ns_per_packet")?;
        let r = c
            .get("ratio_to_pass")
            .and_then(Value::as_f64)
            .context("case without ratio_to_pass")?;
        if r == 1.0 {
            continue;
        }
        rows.push(TableRow {
            metric: format!("P1 XDP ns/pkt: {name}"),
            measured: format!(
                "{ns:.1} ns = {r:.2}× bare XDP_PASS ({} ns, {runs} runs)",
                pass.map_or("-".into(), |p| format!("{p:.1}"))
            ),
            goal: "— (reported)".into(),
            met: None,
        });
    }
    // P1's goal (ns per packet net of a bare XDP_PASS), as xdp-bench judged it.
    if let Some(g) = xdp.get("goal") {
        let net = g.get("net_ns").and_then(Value::as_f64);
        let max = g.get("max_net_ns").and_then(Value::as_f64);
        let case = g.get("case").and_then(Value::as_str).unwrap_or("?");
        rows.push(TableRow {
            metric: format!("P1 goal: {case}, ns/pkt net of bare XDP_PASS"),
            measured: net.map_or("-".into(), |n| format!("{n:.1} ns")),
            goal: max.map_or("-".into(), |m| format!("≤ {m:.0} ns")),
            met: g.get("met").and_then(Value::as_bool),
        });
        // What the goal case's lookups and charges cost without the framing.
        if let Some(floor) = g.get("floor_net_ns").and_then(Value::as_f64) {
            rows.push(TableRow {
                metric: format!("P1 floor: {case} without the framing, ns/pkt net"),
                measured: format!("{floor:.1} ns"),
                goal: "— (reported)".into(),
                met: None,
            });
        }
    }
    Ok(rows)
}

/// P2 row from the relay-bench JSON: the medians of its `summary` (rounds alternating,
/// `dra run` vs freeDiameter, the Erlang/OTP relay beside them), or for a file of the
/// older one-run format its `results`.
pub fn p2_row(relay: &Value) -> Result<(TableRow, Option<bool>, Option<f64>)> {
    let rps = |prefixes: &[&str]| {
        let name_is = |r: &&Value| {
            r.get("relay").and_then(Value::as_str).is_some_and(|n| {
                // "dra run (TLS)" and "dra run (B)" are rows of their own.
                !n.ends_with(')') && prefixes.iter().any(|p| n.starts_with(p))
            })
        };
        if let Some(summary) = relay.get("summary").and_then(Value::as_array) {
            summary
                .iter()
                .find(name_is)
                .and_then(|r| r.pointer("/requests_per_s/median").and_then(Value::as_f64))
        } else {
            relay
                .get("results")
                .and_then(Value::as_array)?
                .iter()
                .find(name_is)
                .and_then(|r| r.get("requests_per_s").and_then(Value::as_f64))
        }
    };
    if relay.get("summary").is_none() && relay.get("results").is_none() {
        anyhow::bail!("relay results: no summary and no results");
    }
    let agent = rps(&["dra run", "dra agent"]);
    let (fd, otp) = (rps(&["freeDiameter"]), rps(&["Erlang/OTP"]));
    let ratio = |r: Option<f64>| match (agent, r) {
        (Some(a), Some(f)) if f > 0.0 => Some(a / f),
        _ => None,
    };
    let q = ratio(fd);
    let met = q.map(|q| q >= GOAL_P2_MIN_RATIO);
    let n = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    let otp_text = match ratio(otp) {
        Some(x) => format!("; Erlang/OTP relay {} req/s, dra {x:.2}× it", n(otp)),
        None => String::new(),
    };
    let row = TableRow {
        metric: "P2 relayed req/s: dra ÷ freeDiameter".into(),
        measured: format!(
            "{}× ({} vs {} req/s{otp_text})",
            q.map_or("-".into(), |q| format!("{q:.2}")),
            n(agent),
            n(fd)
        ),
        goal: format!("≥ {GOAL_P2_MIN_RATIO}×"),
        met,
    };
    Ok((row, met, q))
}

/// The TLS goal: over TLS `dra run` relays at least this share of its plain TCP rate.
pub const GOAL_TLS_MIN_RATIO: f64 = 0.5;

/// The TLS row from the relay-bench JSON: `ratio_tls_to_plain` (requests/s, medians)
/// and `ratio_tls_to_plain_cpu_per_request`. A missing figure is an error.
pub fn tls_row(relay: &Value) -> Result<TableRow> {
    let ratio = |k: &str| {
        relay
            .get(k)
            .and_then(Value::as_f64)
            .with_context(|| format!("relay results: no {k} (did the TLS relay run?)"))
    };
    let (rps, cpu) = (
        ratio("ratio_tls_to_plain")?,
        ratio("ratio_tls_to_plain_cpu_per_request")?,
    );
    let median = |name: &str| {
        relay
            .get("summary")
            .and_then(Value::as_array)
            .and_then(|s| {
                s.iter()
                    .find(|r| r.get("relay").and_then(Value::as_str) == Some(name))
            })
            .and_then(|r| r.pointer("/requests_per_s/median").and_then(Value::as_f64))
            .with_context(|| format!("relay results: no median for {name}"))
    };
    let (tls, plain) = (median("dra run (TLS)")?, median("dra run")?);
    Ok(TableRow {
        metric: "TLS relayed req/s: dra over TLS ÷ plain TCP".into(),
        measured: format!(
            "{rps:.2}× ({tls:.0} vs {plain:.0} req/s); CPU per request {cpu:.2}× plain"
        ),
        goal: format!("≥ {GOAL_TLS_MIN_RATIO}×"),
        met: Some(rps >= GOAL_TLS_MIN_RATIO),
    })
}

fn read_fresh(root: &Path, rel: &str, since: SystemTime) -> Result<Value> {
    let p = root.join(rel);
    let modified = std::fs::metadata(&p)
        .and_then(|m| m.modified())
        .with_context(|| format!("{}", p.display()))?;
    if modified < since {
        bail!(
            "{} was not rewritten by this run (older than its start): refusing to aggregate",
            p.display()
        );
    }
    let text = std::fs::read_to_string(&p)?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", p.display()))
}

/// The table rows stored in a bench file, `n` of them (`what` names them).
fn stored_rows(
    v: &Value,
    key: &str,
    n: std::ops::RangeInclusive<usize>,
    what: &str,
) -> Result<Vec<TableRow>> {
    let rows: Vec<TableRow> = v
        .get(key)
        .and_then(Value::as_array)
        .with_context(|| format!("{what}: no {key}"))?
        .iter()
        .filter_map(TableRow::from_json)
        .collect();
    if !n.contains(&rows.len()) {
        bail!("{what}: expected {n:?} table rows, found {}", rows.len());
    }
    Ok(rows)
}

/// After `bench` ran xdp, relay, storm, flood, ha and doic: writes `bench/results/<date>.json` and
/// `.md` and prints the table.
pub fn aggregate(root: &Path, since: SystemTime) -> Result<()> {
    let xdp = read_fresh(root, XDP_LATEST, since)?;
    let relay = read_fresh(root, RELAY_LATEST, since)?;
    let storm = read_fresh(root, STORM_LATEST, since)?;
    let flood = read_fresh(root, FLOOD_LATEST, since)?;
    let mut table = p1_rows(&xdp)?;
    let (p2row, p2met, p2q) = p2_row(&relay)?;
    table.push(p2row);
    table.push(tls_row(&relay)?);
    table.extend(stored_rows(
        &storm,
        "table",
        3..=3,
        "storm results (P3, P4 fixed latency, P4 exp latency)",
    )?);
    table.extend(stored_rows(
        &flood,
        "table",
        2..=3,
        "flood results (P5 CPU, P5 p99 full rate, P5 p99 paced)",
    )?);
    // P3's coalesced case (one row per mode).
    let coalesced: Vec<TableRow> = storm
        .get("coalesced_table")
        .and_then(Value::as_array)
        .context("storm results: no coalesced_table (P3 coalesced)")?
        .iter()
        .filter_map(TableRow::from_json)
        .collect();
    table.extend(coalesced);
    let ha = read_fresh(root, crate::ha::bench::HA_LATEST, since)?;
    let ha_head = crate::ha::bench::HaHeadline::of(&ha, crate::ha::bench::HA_LATEST)?;
    table.extend(crate::ha::bench::table_rows(&ha_head));
    let doic = read_fresh(root, crate::doic::DOIC_LATEST, since)?;
    table.extend(stored_rows(
        &doic,
        "table",
        2..=2,
        "DOIC results (storm at the source, server overload)",
    )?);
    let machine = machine(root);
    let date = first_line(&["date", "-u", "+%Y-%m-%d"]);
    let doc = json!({
        "machine": machine,
        "p1": { "source": XDP_LATEST, "goal": "reported (no goal)", "results": xdp },
        "p2": {
            "source": RELAY_LATEST,
            "ratio": p2q,
            "goal_min_ratio": GOAL_P2_MIN_RATIO,
            "met": p2met,
            "results": relay,
        },
        "p3": storm.get("p3"),
        "p4": storm.get("p4"),
        "p4_exp_latency": storm.get("p4_exp"),
        "p5": flood.get("p5"),
        "p5_generator": flood.get("generator"),
        "storm_runs": storm.get("runs"),
        "flood_runs": flood.get("runs"),
        "coalesced": storm.get("coalesced"),
        "ha": ha,
        "doic": doic,
        "table": table.iter().map(TableRow::to_json).collect::<Vec<_>>(),
    });
    let json_path = root.join(format!("bench/results/{date}.json"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("write {}", json_path.display()))?;
    let md = render_report(
        &machine,
        &table,
        flood.pointer("/p5/note").and_then(Value::as_str),
    );
    let md_path = root.join(format!("bench/results/{date}.md"));
    std::fs::write(&md_path, &md).with_context(|| format!("write {}", md_path.display()))?;
    print!("\n{md}");
    println!("written {} and {}", json_path.display(), md_path.display());
    Ok(())
}

/// The markdown file: machine line, table, P5 note.
pub fn render_report(machine: &Value, table: &[TableRow], p5_note: Option<&str>) -> String {
    let g = |k: &str| {
        machine.get(k).map_or("?".to_owned(), |v| {
            v.as_str().map_or_else(|| v.to_string(), str::to_owned)
        })
    };
    let mut s = format!(
        "# cargo xtask bench — {}\n\n\
         Kernel {}, {} × {}, load average {} at the end, commit {}{}.\n\n",
        g("date"),
        g("kernel"),
        g("cpus"),
        g("cpu_model"),
        g("load_average"),
        g("git_commit"),
        if machine.get("git_dirty").and_then(Value::as_bool) == Some(true) {
            " (with uncommitted changes)"
        } else {
            ""
        }
    );
    s.push_str(&render_markdown(table));
    if let Some(n) = p5_note {
        let _ = writeln!(s, "\nP5: {n}");
    }
    s.push_str("\nHow each number is measured: docs/bench.md.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p1_and_p2_rows_come_from_the_bench_files_formats() {
        let xdp: Value = serde_json::from_str(
            r#"{"runs":1000,"cases":[
                {"case":"bare XDP_PASS","ns_per_packet":40.0,"ratio_to_pass":1.000},
                {"case":"CCR-U admitted","ns_per_packet":260.0,"ratio_to_pass":6.5}]}"#,
        )
        .unwrap();
        let rows = p1_rows(&xdp).unwrap();
        assert_eq!(rows.len(), 1, "the bare case is the reference, not a row");
        assert_eq!(rows[0].metric, "P1 XDP ns/pkt: CCR-U admitted");
        assert_eq!(
            rows[0].measured,
            "260.0 ns = 6.50× bare XDP_PASS (40.0 ns, 1000 runs)"
        );
        assert_eq!(rows[0].met, None);
        let xdp: Value = serde_json::from_str(
            r#"{"runs":1000,"goal":{"case":"CCR-I","max_net_ns":120,"net_ns":600.0,
                "met":false,"floor_net_ns":250.0},"cases":[]}"#,
        )
        .unwrap();
        let rows = p1_rows(&xdp).unwrap();
        let cells = |r: &TableRow| (r.measured.clone(), r.goal.clone(), r.met);
        assert_eq!(
            rows.iter().map(cells).collect::<Vec<_>>(),
            [
                ("600.0 ns".into(), "≤ 120 ns".into(), Some(false)),
                ("250.0 ns".into(), "— (reported)".into(), None)
            ],
            "the goal's row, then the floor's"
        );
        assert_eq!(
            rows[1].metric,
            "P1 floor: CCR-I without the framing, ns/pkt net"
        );
        let relay: Value = serde_json::from_str(
            r#"{"results":[{"relay":"dra agent","requests_per_s":50000.0},
                {"relay":"freeDiameter 1.2.1","requests_per_s":20000.0}]}"#,
        )
        .unwrap();
        let (row, met, q) = p2_row(&relay).unwrap();
        assert_eq!(q, Some(2.5));
        assert_eq!(met, Some(false), "2.5× misses the 3× goal and says so");
        assert_eq!(row.measured, "2.50× (50000 vs 20000 req/s)");
        let relay: Value = serde_json::from_str(
            r#"{"summary":[{"relay":"dra run","requests_per_s":{"median":60000.0}},
                {"relay":"freeDiameter 1.2.1","requests_per_s":{"median":20000.0}},
                {"relay":"Erlang/OTP diameter","requests_per_s":{"median":30000.0}}]}"#,
        )
        .unwrap();
        let (row, met, q) = p2_row(&relay).unwrap();
        assert_eq!((q, met), (Some(3.0), Some(true)));
        assert_eq!(
            row.measured,
            "3.00× (60000 vs 20000 req/s; Erlang/OTP relay 30000 req/s, dra 2.00× it)"
        );
    }

    #[test]
    fn the_committed_result_files_still_parse() {
        let root = crate::workspace_root();
        let xdp: Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(XDP_LATEST)).unwrap()).unwrap();
        assert!(!p1_rows(&xdp).unwrap().is_empty());
        let relay: Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(RELAY_LATEST)).unwrap())
                .unwrap();
        assert!(p2_row(&relay).unwrap().2.is_some());
        let read = |rel: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(root.join(rel)).unwrap()).unwrap()
        };
        let storm = stored_rows(&read(STORM_LATEST), "table", 3..=3, "storm").unwrap();
        assert!(storm[1].metric.starts_with("P4") && storm[2].metric.starts_with("P4"));
        let doic = stored_rows(&read(crate::doic::DOIC_LATEST), "table", 2..=2, "doic").unwrap();
        assert!(doic.iter().all(|r| r.met.is_some()));
        let flood = stored_rows(&read(FLOOD_LATEST), "table", 2..=3, "flood").unwrap();
        assert!(
            flood
                .iter()
                .all(|r| r.metric.starts_with("P5") && r.met.is_some())
        );
    }

    #[test]
    fn the_report_names_the_machine() {
        let m = json!({
            "date": "2026-11-30T20:00:00Z",
            "kernel": "6.1.0",
            "cpus": 2,
            "cpu_model": "Xeon",
            "load_average": "1 2 3",
            "git_commit": "abc",
            "git_dirty": false,
        });
        let md = render_report(&m, &[], Some("both runs limited"));
        assert!(md.starts_with(
            "# cargo xtask bench — 2026-11-30T20:00:00Z\n\n\
             Kernel 6.1.0, 2 × Xeon, load average 1 2 3 at the end, commit abc.\n"
        ));
        assert!(md.contains("\nP5: both runs limited\n"));
    }

    #[test]
    fn tls_row_reads_the_ratio_and_refuses_a_missing_one() {
        let relay: Value = serde_json::from_str(
            r#"{"summary":[{"relay":"dra run","requests_per_s":{"median":60000.0}},
                {"relay":"dra run (TLS)","requests_per_s":{"median":45000.0}}],
                "ratio_tls_to_plain":0.75,"ratio_tls_to_plain_cpu_per_request":1.3}"#,
        )
        .unwrap();
        let row = tls_row(&relay).unwrap();
        assert_eq!(row.met, Some(true));
        assert_eq!(
            row.measured,
            "0.75× (45000 vs 60000 req/s); CPU per request 1.30× plain"
        );
        let (p2, _, _) = p2_row(&relay).unwrap();
        assert!(p2.measured.contains("60000"), "{}", p2.measured);
        let missing: Value = serde_json::from_str(r#"{"summary":[]}"#).unwrap();
        assert!(tls_row(&missing).is_err());
    }
}
