//! `cargo xtask bench doic`: DOIC (RFC 7683, 8581, 8582) on the lab with the real
//! binaries (docs/bench.md, "DOIC"; docs/doic.md). One lab (`lab::up`), four runs, each
//! a fresh `dra run` in `dralab-dra` and one `dra-loadgen client` as pgw1:
//!
//! | part | run | dra config | gateway | servers |
//! |---|---|---|---|---|
//! | a | `storm-without-doic` | dra-doic-storm.toml | storm-10x.toml | lab's |
//! | a | `storm-with-doic` | dra-doic-storm.toml | the same, `--doic` | lab's |
//! | b | `servers-baseline` | dra-doic-servers-off.toml | doic-servers.toml | pcrf1 reporting |
//! | b | `servers-report` | dra-doic-servers.toml | doic-servers.toml | pcrf1 reporting |
//!
//! Part a: the storm benchmark's 10× CCR-I storm against pgw1's static limit (reject,
//! XDP), from a gateway without DOIC and from one with DOIC (the agent reports its
//! limit to it, RFC 8581 peer report, rate algorithm of RFC 8582): the 3002 it still
//! gets, the CCR-I admitted. Part b: pcrf1 (`dra-loadgen server --doic-capacity 100
//! --doic-reduction 50`) asks for 50 % loss; the agent is the reacting node only with
//! `doic = true` on the PCRFs, so the baseline run (doic = false) gives what pcrf1 gets
//! without a report. Numbers are taken over the interior of each scenario's `measure`
//! phase (`bench::window::INTERIOR`). The lab is always removed.

mod measures;
mod plan;
mod run;

use std::{fmt::Write as _, path::Path, time::Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use self::plan::{
    Plan, REPORTER, REPORTER_CAPACITY, REPORTER_REDUCTION, SERVER_RUNS, STORM_RUNS, plan,
};
use crate::{
    agent_run,
    bench::window::INTERIOR,
    lab::{self, Bins, PIN_DIR, SERVER_LATENCY},
    procs,
    results::{self, TableRow},
};

/// Output of `cargo xtask bench doic`.
pub const DOIC_LATEST: &str = "bench/results/doic-latest.json";

/// Refuses to start when a lab (namespaces or pins) exists; checks the configs.
pub fn preflight(root: &Path) -> Result<Plan> {
    let ns = lab::namespaces();
    if !ns.is_empty() || Path::new(PIN_DIR).exists() {
        bail!(
            "a lab is up (namespaces {ns:?}, pins {PIN_DIR}); the DOIC benchmark builds its \
             own. Remove it with `cargo xtask lab down` and run again"
        );
    }
    plan(root)
}

/// `cargo xtask bench doic` (after the release build): runs both parts, writes
/// [`DOIC_LATEST`] and the run files under `results/bench-doic-<timestamp>/`, prints the
/// table.
pub fn run(root: &Path) -> Result<()> {
    let plan = preflight(root)?;
    procs::install_signal_handlers();
    let bins = Bins::release(root);
    agent_run::check_configs(
        root,
        &bins,
        &[
            plan::STORM_CONFIG,
            plan::SERVERS_CONFIG,
            plan::SERVERS_OFF_CONFIG,
        ],
    )?;
    let out = agent_run::run_dir(root, "doic")?;
    let started = Instant::now();
    let runs = lab::run_on_lab(&bins, &out, || {
        let mut runs = Vec::new();
        for spec in &STORM_RUNS {
            runs.push(
                run::run_one(root, &bins, spec, plan.storm_measure, &out)
                    .with_context(|| format!("run {}", spec.name))?,
            );
        }
        eprintln!(
            "xtask: servers restarted: {REPORTER} reports over {REPORTER_CAPACITY} \
             requests/s, {REPORTER_REDUCTION} % loss"
        );
        let extra = |s: &lab::Server| -> Vec<String> {
            if s.name == REPORTER {
                vec![
                    "--doic-capacity".into(),
                    REPORTER_CAPACITY.to_string(),
                    "--doic-reduction".into(),
                    REPORTER_REDUCTION.to_string(),
                ]
            } else {
                Vec::new()
            }
        };
        lab::restart_servers_with(&bins, SERVER_LATENCY, &extra)?;
        for spec in &SERVER_RUNS {
            runs.push(
                run::run_one(root, &bins, spec, plan.servers_measure, &out)
                    .with_context(|| format!("run {}", spec.name))?,
            );
        }
        Ok(runs)
    })?;
    let (a, a_row) = measures::storm(&runs[0], &runs[1], plan.limit);
    let (b, b_row) = measures::servers(&runs[2], &runs[3], REPORTER, REPORTER_REDUCTION)
        .context("DOIC part b")?;
    let table = vec![a_row, b_row];
    let doc = json!({
        "machine": results::machine(root),
        "duration_s": started.elapsed().as_secs_f64(),
        "configs": {
            "storm": plan::STORM_CONFIG,
            "storm_scenario": crate::bench::config::STORM_SCENARIO,
            "servers": plan::SERVERS_CONFIG,
            "servers_baseline": plan::SERVERS_OFF_CONFIG,
            "servers_scenario": plan::SERVERS_SCENARIO,
            "server_latency": SERVER_LATENCY,
            "reporter": {
                "server": REPORTER,
                "doic_capacity_per_s": REPORTER_CAPACITY,
                "doic_reduction_percent": REPORTER_REDUCTION,
            },
            "interior": format!(
                "seconds {}..(end − {}) of measure",
                INTERIOR.skip_first,
                INTERIOR.skip_last
            ),
        },
        "storm_at_the_source": a,
        "server_overload": b,
        "table": table.iter().map(TableRow::to_json).collect::<Vec<_>>(),
        "run_files": out.strip_prefix(root).unwrap_or(&out).display().to_string(),
    });
    let latest = results::write_doc(root, &out, "doic.json", Some(DOIC_LATEST), &doc)?;
    let mut s = String::new();
    for r in &table {
        let _ = writeln!(
            s,
            "{}: goal {} — {}",
            r.metric,
            r.goal,
            match r.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not measurable",
            }
        );
    }
    let _ = writeln!(s, "\n{}", results::render_markdown(&table));
    print!("{s}");
    println!("written {} (runs in {})", latest.display(), out.display());
    Ok(())
}
