//! One run of `cargo xtask bench doic`: a fresh `dra run` in the lab and one
//! `dra-loadgen client` as pgw1 (with `--doic` or without), the agent's metrics at the
//! start and end of the interior of `measure`, the client's rows and summary.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Result;
use dra_report::client::{Report, Row};

use super::plan::RunSpec;
use crate::{
    agent_run::{ClientFiles, LAB, gateway_client, run_files},
    bench::{
        config::{read_toml, scenario_secs},
        window::INTERIOR,
    },
    lab::{self, Bins, NS_DRA, NS_GW},
    metrics::Snap,
};

/// What one run produced.
pub struct RunOutput {
    pub name: &'static str,
    /// The client's per-second rows.
    pub rows: Vec<Row>,
    /// The client's summary.
    pub summary: Report,
    /// The agent's metrics at the start and end of the interior of `measure`.
    pub interior: (Snap, Snap),
    /// Seconds between the two scrapes.
    pub interior_s: f64,
    /// The agent's metrics after the client finished.
    pub end: Snap,
    pub files: String,
}

/// Runs `spec` on the lab that is up (`measure` = (start, length) in seconds); its
/// files go to `out/<run name>/`.
pub fn run_one(
    root: &Path,
    bins: &Bins,
    spec: &RunSpec,
    measure: (f64, f64),
    out: &Path,
) -> Result<RunOutput> {
    let dir = run_files(out, spec.name)?;
    LAB.ensure_detached(spec.name)?;
    let cmd = lab::command_in(NS_DRA, &bins.dra)?;
    let dra = LAB.start_agent_ready(cmd, &root.join(spec.config), dir.join("dra.log"))?;
    let scn = read_toml(root, spec.scenario)?;
    let total_s = scenario_secs(&scn);
    let files = ClientFiles::new(&dir, "pgw1");
    let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
    gateway_client(
        &mut c,
        "pgw1",
        "198.18.1.2",
        &root.join(spec.scenario),
        &files,
    );
    if spec.gateway_doic {
        c.arg("--doic");
    }
    let mut run = dra.start_client(&mut c, "dra-loadgen client", "pgw1", &files.log)?;
    let t0 = Instant::now();
    eprintln!("xtask: run {} ({}): {total_s} s", spec.name, spec.purpose);
    let m_start = t0 + Duration::from_secs_f64(measure.0);
    let (i_start, i_end) = INTERIOR.instants(m_start, measure.1);
    run.wait_until(i_start)?;
    let (snap0, at0) = (LAB.scrape()?, Instant::now());
    run.wait_until(i_end)?;
    let (snap1, at1) = (LAB.scrape()?, Instant::now());
    run.client_finished(t0 + Duration::from_secs_f64(total_s + 40.0))?;
    let summary = files.summary()?;
    let end = LAB.scrape()?;
    run.stop_agent()?;
    LAB.detach_left(bins, spec.name)?;
    Ok(RunOutput {
        name: spec.name,
        rows: files.rows()?,
        summary,
        interior: (snap0, snap1),
        interior_s: (at1 - at0).as_secs_f64(),
        end,
        files: dir.strip_prefix(root).unwrap_or(&dir).display().to_string(),
    })
}
