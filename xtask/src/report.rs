//! The benchmark results of one `cargo xtask bench`: machine context, P1–P5 in
//! `bench/results/<YYYY-MM-DD>.json` and a markdown table in `bench/results/<YYYY-MM-DD>.md`.
//!
//! P1 and P2 are read back from the files their binaries have just written
//! (`xdp-latest.json`, `relay-latest.json`), P3–P4 from `storm-latest.json`, P5 (the flood
//! shield) from `flood-latest.json`; a file older than the start of this `bench` is
//! refused (the table never mixes runs).

use std::{fmt::Write as _, path::Path, time::SystemTime};

use anyhow::{Context, Result, bail, ensure};
use dra_report::{
    relay::{self, RelayReport},
    xdp::XdpReport,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::results::{
    FLOOD_LATEST, RELAY_LATEST, STORM_LATEST, TableRow, XDP_LATEST, first_line, machine,
    render_markdown,
};

/// P1 rows from xdp-bench's report: one per case, ns/packet and ratio to bare XDP_PASS,
/// then the goal's row and the floor's.
pub fn p1_rows(xdp: &XdpReport) -> Result<Vec<TableRow>> {
    let reference = &xdp.reference;
    let pass = xdp
        .cases
        .iter()
        .find(|c| &c.case == reference)
        .with_context(|| {
            format!("xdp results: the reference case {reference:?} is not among the cases")
        })?
        .ns_per_packet;
    let mut rows: Vec<TableRow> = xdp
        .cases
        .iter()
        .filter(|c| &c.case != reference)
        .map(|c| TableRow {
            metric: format!("P1 XDP ns/pkt: {}", c.case),
            measured: format!(
                "{:.1} ns = {:.2}× {reference} ({pass:.1} ns, {} runs)",
                c.ns_per_packet, c.ratio_to_pass, xdp.runs
            ),
            goal: "— (reported)".into(),
            met: None,
        })
        .collect();
    // P1's goal (ns per packet net of a bare XDP_PASS), as xdp-bench judged it.
    let g = &xdp.goal;
    rows.push(TableRow {
        metric: format!("P1 goal: {}, ns/pkt net of bare XDP_PASS", g.case),
        measured: format!("{:.1} ns", g.net_ns),
        goal: format!("≤ {:.0} ns", g.max_net_ns),
        met: Some(g.met),
    });
    // What the goal case's lookups and charges cost without the framing.
    rows.push(TableRow {
        metric: format!("P1 floor: {} without the framing, ns/pkt net", g.case),
        measured: format!("{:.1} ns", g.floor_net_ns),
        goal: "— (reported)".into(),
        met: None,
    });
    Ok(rows)
}

/// P2 row from the relay bench's report: the medians of its summary (rounds
/// alternating, `dra run` vs freeDiameter, the Erlang/OTP relay beside them) and the
/// ratio and verdict `dra-bench` judged. A report whose ratio does not follow from its
/// own medians is an error.
pub fn p2_row(relay: &RelayReport) -> Result<TableRow> {
    let rps = |name: &str| relay.relay(name).map(|s| s.requests_per_s.median);
    let agent = rps(relay::AGENT);
    let (fd, otp) = (rps(relay::FREEDIAMETER), rps(relay::OTP));
    let ratio = |r: Option<f64>| match (agent, r) {
        (Some(a), Some(f)) if f > 0.0 => Some(a / f),
        _ => None,
    };
    let q = ratio(fd);
    let met = q.map(|q| q >= relay.goal_min_ratio);
    ensure!(
        met == relay.met,
        "relay results: met is {:?} but the medians give {q:?} against ≥ {}×",
        relay.met,
        relay.goal_min_ratio
    );
    let n = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    let otp_text = match ratio(otp) {
        Some(x) => format!("; Erlang/OTP relay {} req/s, dra {x:.2}× it", n(otp)),
        None => String::new(),
    };
    Ok(TableRow {
        metric: "P2 relayed req/s: dra ÷ freeDiameter".into(),
        measured: format!(
            "{}× ({} vs {} req/s{otp_text})",
            q.map_or("-".into(), |q| format!("{q:.2}")),
            n(agent),
            n(fd)
        ),
        goal: format!("≥ {}×", relay.goal_min_ratio),
        met,
    })
}

/// The TLS row from the relay bench's report: `ratio_tls_to_plain` (requests/s,
/// medians) and `ratio_tls_to_plain_cpu_per_request`. A figure that is not there (the
/// TLS relay did not run) is an error.
pub fn tls_row(relay: &RelayReport) -> Result<TableRow> {
    let missing = |k: &str| format!("relay results: {k} is null (did the TLS relay run?)");
    let rps = relay
        .ratio_tls_to_plain
        .with_context(|| missing("ratio_tls_to_plain"))?;
    let cpu = relay
        .ratio_tls_to_plain_cpu_per_request
        .with_context(|| missing("ratio_tls_to_plain_cpu_per_request"))?;
    let median = |name: &str| {
        relay
            .relay(name)
            .map(|s| s.requests_per_s.median)
            .with_context(|| format!("relay results: no summary for {name}"))
    };
    let (tls, plain) = (median(relay::AGENT_TLS)?, median(relay::AGENT)?);
    let goal = relay.goal_min_ratio_tls_to_plain;
    Ok(TableRow {
        metric: "TLS relayed req/s: dra over TLS ÷ plain TCP".into(),
        measured: format!(
            "{rps:.2}× ({tls:.0} vs {plain:.0} req/s); CPU per request {cpu:.2}× plain"
        ),
        goal: format!("≥ {goal}×"),
        met: Some(rps >= goal),
    })
}

/// The text of `rel`, refused when this run did not rewrite it.
fn read_fresh_text(root: &Path, rel: &str, since: SystemTime) -> Result<String> {
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
    std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))
}

/// A typed report `rel` of this run; a field missing or renamed is an error naming it.
fn read_fresh_report<T: DeserializeOwned>(root: &Path, rel: &str, since: SystemTime) -> Result<T> {
    let text = read_fresh_text(root, rel, since)?;
    Ok(dra_report::parse(&text, rel)?)
}

fn read_fresh(root: &Path, rel: &str, since: SystemTime) -> Result<Value> {
    let text = read_fresh_text(root, rel, since)?;
    serde_json::from_str(&text).with_context(|| format!("parse {rel}"))
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
    let xdp: XdpReport = read_fresh_report(root, XDP_LATEST, since)?;
    let relay: RelayReport = read_fresh_report(root, RELAY_LATEST, since)?;
    let storm = read_fresh(root, STORM_LATEST, since)?;
    let flood = read_fresh(root, FLOOD_LATEST, since)?;
    let mut table = p1_rows(&xdp)?;
    table.push(p2_row(&relay)?);
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
        "p1": { "source": XDP_LATEST, "results": xdp },
        "p2": {
            "source": RELAY_LATEST,
            "ratio": relay.ratio_agent_to_freediameter,
            "goal_min_ratio": relay.goal_min_ratio,
            "met": relay.met,
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

    use dra_report::{
        relay::{RelaySummary, Spread},
        xdp::{XdpCase, XdpGoal},
    };

    fn xdp_report(cases: &[(&str, f64)], goal_net: f64) -> XdpReport {
        let base = cases[0].1;
        XdpReport {
            runs: 1000,
            rounds: 10,
            goal: XdpGoal {
                case: "CCR-I".into(),
                max_net_ns: 120.0,
                net_ns: goal_net,
                met: goal_net <= 120.0,
                floor_net_ns: 250.0,
            },
            verdicts_ok: true,
            verifier_insns: "dra_xdp 18546".into(),
            reference: cases[0].0.into(),
            cases: cases
                .iter()
                .map(|&(case, ns)| XdpCase {
                    case: case.into(),
                    ns_per_packet: ns,
                    ns_min: ns,
                    ns_max: ns,
                    net_ns: ns - base,
                    ratio_to_pass: ns / base,
                })
                .collect(),
        }
    }

    /// A relay report with these relays' median requests/s, judged as dra-bench does.
    fn relay_report(medians: &[(&str, f64)], tls: Option<(f64, f64)>) -> RelayReport {
        let spread = |m| Spread {
            median: m,
            min: m,
            max: m,
        };
        let mut r = RelayReport {
            in_flight: 100,
            clients: 4,
            window: 25,
            servers: 2,
            seconds: 10,
            warmup_seconds: 2,
            rounds: 3,
            agent: "dra run".into(),
            dra: "target/release/dra".into(),
            dra_b: None,
            ratio_agent_to_agent_b: None,
            cpus: 2,
            results: Vec::new(),
            summary: medians
                .iter()
                .map(|&(relay, m)| RelaySummary {
                    relay: relay.into(),
                    requests_per_s: spread(m),
                    p99_ms: spread(1.0),
                    cpu_us_per_request: Some(spread(5.0)),
                })
                .collect(),
            ratio_agent_to_freediameter: None,
            ratio_agent_to_otp: None,
            goal_min_ratio: relay::GOAL_MIN_RATIO,
            met: None,
            ratio_tls_to_plain: tls.map(|t| t.0),
            ratio_tls_to_plain_cpu_per_request: tls.map(|t| t.1),
            goal_min_ratio_tls_to_plain: relay::GOAL_MIN_RATIO_TLS_TO_PLAIN,
            met_tls: tls.map(|t| t.0 >= relay::GOAL_MIN_RATIO_TLS_TO_PLAIN),
        };
        let q = r
            .relay(relay::AGENT)
            .zip(r.relay(relay::FREEDIAMETER))
            .map(|(a, f)| a.requests_per_s.median / f.requests_per_s.median);
        r.ratio_agent_to_freediameter = q;
        r.met = q.map(|q| q >= r.goal_min_ratio);
        r
    }

    #[test]
    fn p1_rows_are_the_cases_then_the_goal_and_the_floor() {
        let xdp = xdp_report(&[("bare XDP_PASS", 40.0), ("CCR-U admitted", 260.0)], 600.0);
        let rows = p1_rows(&xdp).unwrap();
        let cells = |r: &TableRow| (r.measured.clone(), r.goal.clone(), r.met);
        assert_eq!(rows.len(), 3, "the bare case is the reference, not a row");
        assert_eq!(rows[0].metric, "P1 XDP ns/pkt: CCR-U admitted");
        assert_eq!(
            cells(&rows[0]),
            (
                "260.0 ns = 6.50× bare XDP_PASS (40.0 ns, 1000 runs)".into(),
                "— (reported)".into(),
                None
            )
        );
        assert_eq!(
            cells(&rows[1]),
            ("600.0 ns".into(), "≤ 120 ns".into(), Some(false)),
            "the goal's row says it is missed"
        );
        assert_eq!(
            rows[2].metric,
            "P1 floor: CCR-I without the framing, ns/pkt net"
        );
        assert_eq!(
            cells(&rows[2]),
            ("250.0 ns".into(), "— (reported)".into(), None)
        );
        let no_pass = XdpReport {
            cases: xdp.cases[1..].to_vec(),
            ..xdp.clone()
        };
        let e = format!("{:#}", p1_rows(&no_pass).unwrap_err());
        assert!(
            e.contains("the reference case \"bare XDP_PASS\" is not among the cases"),
            "{e}"
        );
    }

    #[test]
    fn p2_row_judges_the_medians_and_refuses_a_verdict_they_do_not_give() {
        let r = relay_report(
            &[
                (relay::AGENT, 60000.0),
                (relay::FREEDIAMETER, 20000.0),
                (relay::OTP, 30000.0),
            ],
            None,
        );
        let row = p2_row(&r).unwrap();
        assert_eq!(row.met, Some(true));
        assert_eq!(
            row.measured,
            "3.00× (60000 vs 20000 req/s; Erlang/OTP relay 30000 req/s, dra 2.00× it)"
        );
        let r = relay_report(
            &[(relay::AGENT, 50000.0), (relay::FREEDIAMETER, 20000.0)],
            None,
        );
        let row = p2_row(&r).unwrap();
        assert_eq!(row.met, Some(false), "2.5× misses the 3× goal and says so");
        assert_eq!(row.measured, "2.50× (50000 vs 20000 req/s)");
        let forged = RelayReport {
            met: Some(true),
            ..r
        };
        let e = format!("{:#}", p2_row(&forged).unwrap_err());
        assert!(e.contains("met is Some(true)"), "{e}");
        let no_fd = relay_report(&[(relay::AGENT, 50000.0)], None);
        let row = p2_row(&no_fd).unwrap();
        assert_eq!(
            (row.met, row.measured.as_str()),
            (None, "-× (50000 vs - req/s)")
        );
    }

    #[test]
    fn tls_row_reads_the_ratio_and_refuses_a_missing_one() {
        let medians = [(relay::AGENT, 60000.0), (relay::AGENT_TLS, 45000.0)];
        let row = tls_row(&relay_report(&medians, Some((0.75, 1.3)))).unwrap();
        assert_eq!(row.met, Some(true));
        assert_eq!(
            row.measured,
            "0.75× (45000 vs 60000 req/s); CPU per request 1.30× plain"
        );
        let e = format!("{:#}", tls_row(&relay_report(&medians, None)).unwrap_err());
        assert!(e.contains("ratio_tls_to_plain is null"), "{e}");
    }

    fn committed(rel: &str) -> String {
        std::fs::read_to_string(crate::workspace_root().join(rel)).unwrap()
    }

    #[test]
    fn the_committed_result_files_still_parse() {
        let xdp: XdpReport = dra_report::parse(&committed(XDP_LATEST), XDP_LATEST).unwrap();
        assert!(p1_rows(&xdp).unwrap().len() > 2);
        let relay: RelayReport = dra_report::parse(&committed(RELAY_LATEST), RELAY_LATEST).unwrap();
        assert!(p2_row(&relay).unwrap().met.is_some());
        assert!(tls_row(&relay).unwrap().met.is_some());
        let read = |rel: &str| -> Value { serde_json::from_str(&committed(rel)).unwrap() };
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
    fn a_renamed_field_in_the_relay_or_xdp_results_fails_the_report_naming_it() {
        let dir = std::env::temp_dir().join(format!("xtask-report-{}", std::process::id()));
        let results = dir.join("bench/results");
        std::fs::create_dir_all(&results).unwrap();
        let since = SystemTime::now() - std::time::Duration::from_secs(60);
        let cases = [
            (RELAY_LATEST, "\"requests_per_s\"", "\"requests_per_sec\""),
            (RELAY_LATEST, "\"met\"", "\"goal_met\""),
            (XDP_LATEST, "\"net_ns\"", "\"net\""),
            (XDP_LATEST, "\"floor_net_ns\"", "\"floor_ns\""),
        ];
        for (rel, from, to) in cases {
            let text = committed(rel);
            assert!(text.contains(from), "{rel} has {from}");
            std::fs::write(dir.join(rel), text.replace(from, to)).unwrap();
            let e = if rel == RELAY_LATEST {
                read_fresh_report::<RelayReport>(&dir, rel, since).map(|_| ())
            } else {
                read_fresh_report::<XdpReport>(&dir, rel, since).map(|_| ())
            };
            let e = format!("{:#}", e.expect_err(to));
            assert!(e.contains(rel) && e.contains(to.trim_matches('"')), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
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
}
