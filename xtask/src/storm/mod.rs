//! `cargo xtask bench storm`: P3 and P4 on the lab with the real binaries
//! (docs/bench.md, "Storm benchmarks"). P5 is the flood shield (`crate::flood`).
//!
//! One lab (`lab::up`: namespaces, Redis, the pcrf1/pcrf2/ocs1 simulators), then two
//! pairs of runs, each pair repeated `PAIRS` times (alternating), each run a fresh
//! `dra run` in `dralab-dra` and one `dra-loadgen client` as pgw1 in `dralab-gw`, all
//! with the reject config (XDP attached):
//!
//! | run | scenario | servers | for |
//! |---|---|---|---|
//! | `no-storm-low-latency` | storm-baseline.toml (CCR-I at L) | fixed:100us | P4 denominator |
//! | `storm-reject-low-latency` | storm-10x.toml (CCR-I at 10·L) | fixed:100us | P4 numerator |
//! | `no-storm` | storm-baseline.toml | exp:2ms | P4 second row, denominator |
//! | `storm-reject-xdp` | storm-10x.toml | exp:2ms | P3; P4 second row, numerator |
//!
//! (configs and scenarios in config/bench/; the servers are restarted when their
//! latency changes.) Then P3's coalesced case on the same lab (`crate::coalesced`).
//!
//! Everything is measured over the scenario's `measure` phase, located on xtask's clock
//! from the instant the client was spawned (the client's phases are timed from its start,
//! a few ms later). The lab is always removed (guard + SIGINT/SIGTERM handling).
//!
//! `plan` holds the runs and checks the bench configs, `run` runs one of them (CPU time
//! from `bench::cpu`, the client's per-second rows through `bench::rows`), `measures`
//! turns the runs into P3 and P4; this file is the top level (`preflight`, `run`).

mod measures;
mod plan;
mod run;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;

use self::{
    measures::{find, p3, p4, pairs},
    plan::{Plan, RUNS, plan},
    run::run_one,
};
use crate::{
    agent_run,
    bench::config::{LIMITED_PEER, LOW_LATENCY, REJECT_CONFIG, STORM_SCENARIO},
    lab::{self, Bins, PIN_DIR},
    procs,
    results::{self, STORM_LATEST, TableRow},
};

/// CCR-I at the limit.
pub const BASELINE_SCENARIO: &str = "config/bench/storm-baseline.toml";

/// The limited peer and class.
const PEER: &str = LIMITED_PEER;
const PEER_SRC: &str = "198.18.1.2";
const CLASS: &str = "gx_ccr_i";
/// The storm's multiple of the limit.
const STORM_FACTOR: f64 = 10.0;
/// How many times each pair of runs (no storm, storm) is repeated: P4 is the median of
/// the pairs' ratios, P3 the worst of the storm runs.
const PAIRS: usize = 3;

/// The arguments of `bench storm`: none, or `--dra PATH` (another build's agent, A/B).
pub fn parse_args(args: &[String]) -> Result<Option<PathBuf>> {
    match args {
        [] => Ok(None),
        [flag, path] if flag == "--dra" => Ok(Some(PathBuf::from(path))),
        _ => bail!(
            "bench storm takes no arguments but `storm --dra PATH` (its configs are \
             config/bench/*.toml)"
        ),
    }
}

/// Refuses to start when a lab (namespaces or pins) exists: it may be someone's.
pub fn preflight(root: &Path) -> Result<Plan> {
    let ns = lab::namespaces();
    if !ns.is_empty() || Path::new(PIN_DIR).exists() {
        bail!(
            "a lab is up (namespaces {ns:?}, pins {PIN_DIR}: {}); the storm benchmark \
             builds its own. Remove it with `cargo xtask lab down` and run again",
            Path::new(PIN_DIR).exists()
        );
    }
    plan(root)
}

/// `cargo xtask bench storm` (after the release build): runs everything, writes
/// [`STORM_LATEST`] and the run files under `results/bench-storm-<timestamp>/`, prints the
/// table.
///
/// `dra`: another build's agent for an A/B comparison (`bench storm --dra PATH`): the same
/// P3/P4 runs with it, no coalesced case, and [`STORM_LATEST`] is left alone (the results
/// stay in the run directory).
pub fn run(root: &Path, dra: Option<&Path>) -> Result<()> {
    let plan = preflight(root)?;
    procs::install_signal_handlers();
    let mut bins = Bins::release(root);
    if let Some(d) = dra {
        ensure!(d.is_file(), "--dra {}: no such file", d.display());
        bins.dra = d.to_path_buf();
    }
    agent_run::check_configs(root, &bins, &[REJECT_CONFIG])?;
    let out = agent_run::run_dir(root, "storm")?;
    let started = Instant::now();
    let (runs, (coalesced, coalesced_rows)) = lab::run_on_lab(&bins, &out, || {
        let mut runs = Vec::new();
        let mut latency = lab::SERVER_LATENCY;
        // Each pair (no storm, storm) with the same servers is run PAIRS times, alternating,
        // so that a stall of the machine during one run shows as one outlying ratio.
        for pair in RUNS.chunks(2) {
            for round in 1..=PAIRS {
                for spec in pair {
                    if spec.server_latency != latency {
                        eprintln!(
                            "xtask: servers restarted with latency {}",
                            spec.server_latency
                        );
                        lab::restart_servers(&bins, spec.server_latency)?;
                        latency = spec.server_latency;
                    }
                    runs.push(
                        run_one(root, &bins, spec, round, &plan, &out)
                            .with_context(|| format!("run {} #{round}", spec.name))?,
                    );
                }
            }
        }
        // P3's coalesced case, on the same lab (not in an A/B run).
        let coalesced = match dra {
            None => crate::coalesced::runs(root, &bins, &out)?,
            Some(_) => (Vec::new(), Vec::new()),
        };
        Ok((runs, coalesced))
    })?;
    let (p3v, p3r) = p3(&plan, &find(&runs, "storm-reject-xdp")?);
    let (p4v, p4r) = p4(
        &pairs(&runs, "no-storm-low-latency", "storm-reject-low-latency")?,
        &format!("servers {LOW_LATENCY}"),
    );
    let (p4ev, p4er) = p4(
        &pairs(&runs, "no-storm", "storm-reject-xdp")?,
        &format!("servers {}", lab::SERVER_LATENCY),
    );
    let table = vec![p3r, p4r, p4er];
    let mut printed = table.clone();
    printed.extend(coalesced_rows.iter().cloned());
    let doc = json!({
        "machine": results::machine(root),
        "dra": bins.dra.display().to_string(),
        "duration_s": started.elapsed().as_secs_f64(),
        "configs": {
            "reject": REJECT_CONFIG,
            "server_latency_p4": LOW_LATENCY,
            "server_latency_lab": lab::SERVER_LATENCY,
            "baseline_scenario": BASELINE_SCENARIO,
            "storm_scenario": STORM_SCENARIO,
            "measure_rates_storm": plan.storm_rates,
            "measure_rates_no_storm": plan.baseline_rates,
        },
        "p3": p3v,
        "p4": p4v,
        "p4_exp": p4ev,
        "table": table.iter().map(TableRow::to_json).collect::<Vec<_>>(),
        "runs": runs.iter().map(|r| r.json.clone()).collect::<Vec<_>>(),
        "coalesced": coalesced,
        "coalesced_table": coalesced_rows.iter().map(TableRow::to_json).collect::<Vec<_>>(),
        "run_files": out.strip_prefix(root).unwrap_or(&out).display().to_string(),
    });
    let latest = results::write_doc(
        root,
        &out,
        "storm.json",
        dra.is_none().then_some(STORM_LATEST),
        &doc,
    )?;
    let mut s = String::new();
    let _ = writeln!(s, "\n{}", results::render_markdown(&printed));
    print!("{s}");
    println!("written {} (runs in {})", latest.display(), out.display());
    Ok(())
}
