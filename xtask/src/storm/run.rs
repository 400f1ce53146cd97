//! One run: a fresh `dra run` in the lab and one `dra-loadgen client` as pgw1, what the
//! agent, the client and the machine did over the `measure` phase.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use dra_report::client::{ClassSummary, Report};
use serde_json::{Value, json};

use super::{
    CLASS, PEER, PEER_SRC,
    plan::{Plan, RunSpec},
};
use crate::{
    agent_run::{ClientFiles, LAB, gateway_client, run_files},
    bench::{
        config::{MEASURE, config_limit, read_toml, scenario_secs},
        cpu::{cpu_seconds, lab_processes_cpu_s, loadavg, machine_busy_s},
        rows::{median, rows_p99, rows_per_second},
        window::INTERIOR,
    },
    lab::{self, Bins, NS_DRA, NS_GW},
    metrics::{Snap, counter_deltas, outcome_deltas},
};

/// What one run measured.
pub(super) struct RunResult {
    pub(super) name: &'static str,
    /// Which repetition of its pair this run is (1-based, see `PAIRS`).
    pub(super) round: usize,
    /// CCR-I 2001 per second over the interior of `measure` (client rows).
    pub(super) admitted_per_s: Option<f64>,
    /// CCR-I sent per second over the interior (what the client really offered).
    pub(super) offered_per_s: Option<f64>,
    /// Per family/outcome over the interior, from the agent's metrics (per second).
    pub(super) metrics_interior_per_s: BTreeMap<String, f64>,
    /// The client's summary, when it finished by itself.
    summary: Report,
    pub(super) json: Value,
}

impl RunResult {
    /// The client's CCR-U totals; `None` when it sent none.
    pub(super) fn ccr_u(&self) -> Option<&ClassSummary> {
        self.summary.classes.get("gx_ccr_u")
    }
    /// The p99 latency of the CCR-U answers; `None` without any.
    pub(super) fn ccr_u_p99(&self) -> Option<f64> {
        self.ccr_u()
            .filter(|c| c.answered_total() > 0)
            .map(|c| c.latency.p99_ms)
    }
}

/// Runs `spec` (repetition `round`) on the lab that is up; its files go to
/// `out/<run name>-<round>/`.
pub(super) fn run_one(
    root: &Path,
    bins: &Bins,
    spec: &RunSpec,
    round: usize,
    plan: &Plan,
    out: &Path,
) -> Result<RunResult> {
    let dir = run_files(out, &format!("{}-{round}", spec.name))?;
    LAB.ensure_detached(spec.name)?;
    let cmd = lab::command_in(NS_DRA, &bins.dra)?;
    let dra = LAB.start_agent_ready(cmd, &root.join(spec.config), dir.join("dra.log"))?;
    let dra_pid = dra.pid()?;
    let attached = LAB.ensure_attached(spec.name, spec.fast_path)?;
    let scn = read_toml(root, spec.scenario)?;
    let total_s = scenario_secs(&scn);
    let files = ClientFiles::new(&dir, PEER);
    let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
    gateway_client(&mut c, PEER, PEER_SRC, &root.join(spec.scenario), &files);
    let mut run = dra.start_client(&mut c, "dra-loadgen client", PEER, &files.log)?;
    let t0 = Instant::now();
    eprintln!(
        "xtask: run {} #{round} ({}): {} s",
        spec.name, spec.purpose, total_s
    );
    let m_start = t0 + Duration::from_secs_f64(plan.measure_start_s);
    let m_end = m_start + Duration::from_secs_f64(plan.measure_s);
    let (i_start, i_end) = INTERIOR.instants(m_start, plan.measure_s);
    run.wait_until(m_start)?;
    let (cpu0, at0) = (cpu_seconds(dra_pid)?, Instant::now());
    let (busy0, lab0, load0) = (machine_busy_s()?, lab_processes_cpu_s(), loadavg());
    let snap_m0 = LAB.scrape()?;
    run.wait_until(i_start)?;
    let snap_i0 = LAB.scrape()?;
    run.wait_until(i_end)?;
    let snap_i1 = LAB.scrape()?;
    run.wait_until(m_end)?;
    let (cpu1, at1) = (cpu_seconds(dra_pid)?, Instant::now());
    let (busy1, lab1, load1) = (machine_busy_s()?, lab_processes_cpu_s(), loadavg());
    let snap_m1 = LAB.scrape()?;
    // The client stops after its last phase plus a drain of one request timeout.
    run.client_finished(t0 + Duration::from_secs_f64(total_s + 40.0))?;
    let summary = files.summary()?;
    let snap_end = LAB.scrape()?;
    run.stop_agent()?;
    LAB.detach_left(bins, spec.name)?;

    let rows = files.rows()?;
    let per_second = rows_per_second(&rows, MEASURE, CLASS, "2001");
    let ok: Vec<f64> = per_second.iter().map(|r| r.2 as f64).collect();
    let sent: Vec<f64> = per_second.iter().map(|r| r.1 as f64).collect();
    let admitted_per_s = INTERIOR.mean(&ok);
    let offered_per_s = INTERIOR.mean(&sent);
    let interior_s = INTERIOR.secs(plan.measure_s);
    let metrics_interior_per_s: BTreeMap<String, f64> =
        outcome_deltas(&snap_i0, &snap_i1, PEER, CLASS)
            .into_iter()
            .map(|(k, v)| (k, v / interior_s))
            .collect();
    let metrics_measure = outcome_deltas(&snap_m0, &snap_m1, PEER, CLASS);
    let cpu_s = cpu1 - cpu0;
    let window_s = (at1 - at0).as_secs_f64();
    let req_in = |snap: &Snap, at: &str| {
        snap.sum("dra_requests_total", &[("peer", PEER), ("direction", "in")])
            .with_context(|| format!("the agent's metrics at the {at} of {MEASURE}"))
    };
    let requests_in_per_s =
        (req_in(&snap_m1, "end")? - req_in(&snap_m0, "start")?) / plan.measure_s;
    let u_p99: Vec<f64> = rows_p99(&rows, MEASURE, "gx_ccr_u");
    let cfg_limit = config_limit(&read_toml(root, spec.config)?)?.0;
    let json = json!({
        "run": spec.name,
        "round": round,
        "purpose": spec.purpose,
        "dra_config": spec.config,
        "scenario": spec.scenario,
        "limit": {
            "peer": PEER,
            "class": CLASS,
            "rate_per_s": cfg_limit.rate,
            "burst": cfg_limit.burst,
            "action": cfg_limit.action,
        },
        "fast_path_attached": attached,
        "server_latency": spec.server_latency,
        "measure_phase": {
            "start_s": plan.measure_start_s,
            "duration_s": plan.measure_s,
            "interior": format!(
                "seconds {}..{} of {MEASURE} (first {} and last {} left out)",
                INTERIOR.skip_first,
                plan.measure_s as u64 - INTERIOR.skip_last,
                INTERIOR.skip_first,
                INTERIOR.skip_last
            ),
        },
        "agent_cpu": {
            "seconds": cpu_s,
            "window_s": window_s,
            "percent_of_one_core": 100.0 * cpu_s / window_s,
            "source": "utime+stime of the `dra run` process, /proc/<pid>/stat, at the start \
                       and end of measure",
        },
        "client_ccr_i": {
            "offered_per_s": offered_per_s,
            "answered_2001_per_s": admitted_per_s,
            "per_second": per_second
                .iter()
                .map(|(t, s, a)| json!({"t": t, "sent": s, "answered_2001": a}))
                .collect::<Vec<_>>(),
        },
        "agent_metrics": {
            "ccr_i_by_outcome_measure": metrics_measure,
            "ccr_i_by_outcome_interior_per_s": metrics_interior_per_s,
            "pgw1_counter_deltas_measure": counter_deltas(&snap_m0, &snap_m1, PEER),
            "pgw1_counter_totals_at_end":
                counter_deltas(&Snap { series: Vec::new() }, &snap_end, PEER),
            "note": "fast-path counters are copied into the metrics once per second; \
                     the interior snapshots are a whole number of seconds apart",
        },
        "agent_requests_in_per_s": requests_in_per_s,
        "machine_during_measure": {
            "busy_cpu_s_all_cpus": busy1 - busy0,
            "lab_processes_cpu_s": lab1 - lab0,
            "other_cpu_s": (busy1 - busy0) - (lab1 - lab0),
            "load_average_start": load0, "load_average_end": load1,
            "note": "other = machine busy − the lab's processes: other jobs on the machine plus \
                     kernel time not charged to a process (softirq: the lab's packets, XDP)",
        },
        "client_ccr_u_per_second_p99_ms": {
            "median": median(&u_p99),
            "max": u_p99.iter().copied().fold(f64::NAN, f64::max),
            "values": u_p99,
        },
        "client_summary": summary,
        "files": dir.strip_prefix(root).unwrap_or(&dir).display().to_string(),
    });
    eprintln!(
        "xtask: run {} #{round}: agent CPU {:.2} s over {:.1} s; CCR-I \
         offered {:.0}/s, answered 2001 {:.0}/s; CCR-U p99 {} ms",
        spec.name,
        cpu_s,
        window_s,
        // A log line: no figure prints as NaN.
        offered_per_s.unwrap_or(f64::NAN),
        admitted_per_s.unwrap_or(f64::NAN),
        summary
            .classes
            .get("gx_ccr_u")
            .map_or("-".into(), |c| format!("{:.2}", c.latency.p99_ms))
    );
    Ok(RunResult {
        name: spec.name,
        round,
        admitted_per_s,
        offered_per_s,
        metrics_interior_per_s,
        summary,
        json,
    })
}
