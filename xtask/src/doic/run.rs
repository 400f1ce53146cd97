//! One run of `cargo xtask bench doic`: a fresh `dra run` in the lab and one
//! `dra-loadgen client` as pgw1 (with `--doic` or without), the agent's metrics at the
//! start and end of the interior of `measure`, the client's rows and summary.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::plan::RunSpec;
use crate::{
    lab::{self, Bins, DRA_CLIENT_IF, NS_DRA, NS_GW, PIN_DIR, UPSTREAMS},
    metrics::{self, Snap},
    procs::{self, Proc, remove_pid_file},
    storm::plan::{read_toml, scenario_secs},
};

/// Seconds of `measure` left out at its start and end (as the storm bench).
pub const SKIP_FIRST: u64 = 2;
pub const SKIP_LAST: u64 = 1;

/// What one run produced.
pub struct RunOutput {
    pub name: &'static str,
    /// The client's per-second rows (JSON lines).
    pub rows: String,
    /// The client's summary.
    pub summary: Value,
    /// The agent's metrics at the start and end of the interior of `measure`.
    pub interior: (Snap, Snap),
    /// Seconds between the two scrapes.
    pub interior_s: f64,
    /// The agent's metrics after the client finished.
    pub end: Snap,
    pub files: String,
}

fn xdp_attached() -> bool {
    lab::sh(&["ip", "-n", NS_DRA, "link", "show", DRA_CLIENT_IF]).is_ok_and(|o| o.contains("xdp"))
}

fn wait_until(t: Instant, dra: &mut Proc, client: &mut Proc, log: &Path) -> Result<()> {
    loop {
        procs::interrupted()?;
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited during the run ({st}); log {}",
                log.display()
            );
        }
        if let Some(st) = client.exited() {
            bail!("the load generator exited before the end of measure ({st})");
        }
        let now = Instant::now();
        if now >= t {
            return Ok(());
        }
        std::thread::sleep((t - now).min(Duration::from_millis(20)));
    }
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
    let dir = out.join(spec.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    if xdp_attached() || Path::new(PIN_DIR).exists() {
        bail!(
            "XDP still attached or {PIN_DIR} present before run {}",
            spec.name
        );
    }
    let mut cmd = lab::command_in(NS_DRA, &bins.dra)?;
    cmd.args(["run", "--config"])
        .arg(root.join(spec.config))
        .args(["--pin-dir", PIN_DIR, "--detach-on-exit"])
        .env("RUST_LOG", "warn");
    let dra_log = dir.join("dra.log");
    let mut dra = Proc::new("dra run", procs::spawn_to(&dra_log, "dra", &mut cmd)?);
    let ready_by = Instant::now() + Duration::from_secs(40);
    loop {
        procs::interrupted()?;
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited ({st}); log:\n{}",
                std::fs::read_to_string(&dra_log).unwrap_or_default()
            );
        }
        if let Ok(s) = metrics::scrape()
            && UPSTREAMS
                .iter()
                .all(|p| s.sum("dra_peer_state", &[("peer", p), ("state", "open")]) == 1.0)
        {
            break;
        }
        if Instant::now() > ready_by {
            bail!(
                "the agent did not become ready in 40 s; log {}",
                dra_log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let scn = read_toml(root, spec.scenario)?;
    let total_s = scenario_secs(&scn);
    let rows_path = dir.join("pgw1-rows.jsonl");
    let summary_path = dir.join("pgw1-summary.json");
    let client_log = dir.join("pgw1.log");
    let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
    c.args([
        "client",
        "--connect",
        "198.18.1.1:3868",
        "--bind",
        "198.18.1.2",
    ])
    .args([
        "--peers",
        "1",
        "--origin-host",
        "pgw1.lab.example",
        "--tw",
        "6",
    ])
    .args(["--quiet", "--scenario"])
    .arg(root.join(spec.scenario))
    .arg("--rows")
    .arg(&rows_path)
    .arg("--summary-json")
    .arg(&summary_path);
    if spec.gateway_doic {
        c.arg("--doic");
    }
    let mut client = Proc::new(
        "dra-loadgen client",
        procs::spawn_to(&client_log, "pgw1", &mut c)?,
    );
    let t0 = Instant::now();
    eprintln!("xtask: run {} ({}): {total_s} s", spec.name, spec.purpose);
    let m_start = t0 + Duration::from_secs_f64(measure.0);
    let i_start = m_start + Duration::from_secs(SKIP_FIRST);
    let i_end = m_start + Duration::from_secs_f64(measure.1) - Duration::from_secs(SKIP_LAST);
    wait_until(i_start, &mut dra, &mut client, &dra_log)?;
    let (snap0, at0) = (metrics::scrape()?, Instant::now());
    wait_until(i_end, &mut dra, &mut client, &dra_log)?;
    let (snap1, at1) = (metrics::scrape()?, Instant::now());
    let deadline = t0 + Duration::from_secs_f64(total_s + 40.0);
    while client.exited().is_none() {
        procs::interrupted()?;
        if Instant::now() > deadline {
            bail!(
                "the load generator did not finish in time; log {}",
                client_log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    remove_pid_file("pgw1");
    let summary: Value = std::fs::read_to_string(&summary_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .with_context(|| format!("no client summary; log {}", client_log.display()))?;
    let end = metrics::scrape()?;
    let st = dra.stop(Duration::from_secs(10));
    remove_pid_file("dra");
    if !st.is_some_and(|s| s.success()) {
        bail!(
            "dra run did not exit cleanly on SIGINT ({st:?}); log {}",
            dra_log.display()
        );
    }
    if xdp_attached() || Path::new(PIN_DIR).exists() {
        let mut d = lab::command_in(NS_DRA, &bins.dra)?;
        d.args(["detach", "--iface", DRA_CLIENT_IF, "--pin-dir", PIN_DIR]);
        crate::step("dra detach", &mut d)?;
    }
    Ok(RunOutput {
        name: spec.name,
        rows: std::fs::read_to_string(&rows_path).unwrap_or_default(),
        summary,
        interior: (snap0, snap1),
        interior_s: (at1 - at0).as_secs_f64(),
        end,
        files: dir.strip_prefix(root).unwrap_or(&dir).display().to_string(),
    })
}
