//! `cargo xtask bench flood`: P5, the flood shield (docs/bench.md, "Flood shield").
//!
//! With pgw1's Gx traffic running, a flood of SYNs and junk segments to port 3868 from
//! sources that are no peer, plus a reconnect storm of SYNs from pgw2 beyond its
//! connection guard, meets the DRA with XDP (`unknown_peer = "drop"`, connection guard)
//! and without (the agent alone: the kernel's TCP stack answers). Per repetition (3 by
//! default) eight runs, each a fresh `dra run` in the bench's own topology (`net`,
//! namespaces `fl-*`), XDP config `dra-flood-xdp.toml`, no-XDP `dra-flood-noxdp.toml`:
//!
//! | run (`xdp-…`, `noxdp-…`) | flood during `measure` | for |
//! |---|---|---|
//! | `calm` | — | p99 denominator |
//! | `flood` | full rate (`--pps`, 0: unpaced) | p99 at full rate; CPU cross-check |
//! | `toggle` | full rate, on and off in 1 s slots | CPU per flood packet |
//! | `flood-paced` | `--paced-pps` (30,000/s) | p99 at a rate the host keeps up with |
//!
//! Per mode, the host CPU a flood packet costs = (softirq of the whole machine + the XDP
//! NAPI threads + the agent's CPU) in a flood-on slot of the toggle run − the same in the
//! next flood-off slot, ÷ the flood packets of the slot that reached the DRA (generator
//! frames sent − frames the veth dropped); the median over the pairs and repetitions.
//! `sender` is the generator, `run` one run, `shield` the P5 numbers.

mod net;
mod run;
mod sender;
mod shield;

use std::{fmt::Write as _, path::Path, time::Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;

use self::run::{RUNS, RunResult, run_one, start_server};
use crate::{
    agent_run,
    bench::{
        config::{LOW_LATENCY, MEASURE, measure_phase, read_toml, scenario_secs},
        window::INTERIOR,
    },
    lab::Bins,
    procs,
    results::{self, FLOOD_LATEST, TableRow},
};

/// With the fast path: `unknown_peer = "drop"`, connection guard on the gateways.
pub const XDP_CONFIG: &str = "config/bench/dra-flood-xdp.toml";
/// The same without `[fast_path] interface`: the agent alone.
pub const NOXDP_CONFIG: &str = "config/bench/dra-flood-noxdp.toml";
/// pgw1's Gx traffic (CCR-U only in `measure`).
pub const SCENARIO: &str = "config/bench/flood-gx.toml";
/// The simulated PCRF's service time: low and fixed, as P4's primary row, so that
/// what the flood adds to CCR-U latency is not hidden in the server's.
pub const SERVER_LATENCY: &str = LOW_LATENCY;
/// The flood starts this long before `measure`, so all of it is flooded.
const FLOOD_LEAD_S: f64 = 0.5;
/// Frames per second offered by default: 0, unpaced (the highest rate the generator
/// reaches; each mode gets what its host lets through).
pub const DEFAULT_PPS: f64 = 0.0;
/// Frames per second of the paced flood runs by default: well below what the unpaced
/// generator reaches here, a rate at which the DRA's CPU keeps up in both modes (on
/// this 2-core machine the generator shares the other CPU with the client and the PCRF).
pub const DEFAULT_PACED_PPS: f64 = 30_000.0;

/// Command-line options of `bench flood`.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Target frames/s of the flood and toggle runs (0: unpaced, as fast as the
    /// generator goes).
    pub pps: f64,
    /// Target frames/s of the paced flood runs (0: no paced runs).
    pub paced_pps: f64,
    pub threads: usize,
    pub reps: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            pps: DEFAULT_PPS,
            paced_pps: DEFAULT_PACED_PPS,
            threads: 1,
            reps: 3,
        }
    }
}

/// `--pps N`, `--paced-pps N`, `--threads N`, `--reps N`.
pub fn parse_opts(args: &[String]) -> Result<Opts> {
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| -> Result<f64> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse::<f64>()
                .with_context(|| format!("{name}: not a number"))
        };
        match a.as_str() {
            "--pps" => o.pps = val("--pps")?,
            "--paced-pps" => o.paced_pps = val("--paced-pps")?,
            "--threads" => o.threads = val("--threads")? as usize,
            "--reps" => o.reps = val("--reps")? as usize,
            other => {
                bail!(
                    "bench flood: unknown argument {other:?} (--pps N, --paced-pps N, \
                     --threads N, --reps N)"
                )
            }
        }
    }
    ensure!(o.pps >= 0.0, "--pps must be ≥ 0 (0: unpaced)");
    ensure!(
        o.paced_pps >= 0.0,
        "--paced-pps must be ≥ 0 (0: no paced runs)"
    );
    ensure!((1..=2).contains(&o.threads), "--threads must be 1 or 2");
    ensure!(o.reps >= 1, "--reps must be ≥ 1");
    Ok(o)
}

/// Where `measure` is in the scenario.
pub(super) struct Plan {
    measure_start_s: f64,
    measure_s: f64,
    total_s: f64,
}

/// The two configs differ only in `[fast_path] interface` and the peers' connection
/// guard (`connection_rate`, `connection_burst`: XDP enforces it, so `dra run` refuses
/// it without); the scenario has a `measure` phase with steady CCR-U long enough for the
/// interior.
fn plan(root: &Path) -> Result<Plan> {
    let strip = |v: &toml::Value| {
        let mut v = v.clone();
        if let Some(fp) = v.get_mut("fast_path").and_then(toml::Value::as_table_mut) {
            fp.remove("interface");
        }
        if let Some(peers) = v.get_mut("peer").and_then(toml::Value::as_array_mut) {
            for p in peers.iter_mut().filter_map(toml::Value::as_table_mut) {
                p.remove("connection_rate");
                p.remove("connection_burst");
            }
        }
        v
    };
    let guarded = |v: &toml::Value| {
        v.get("peer")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("connection_rate").is_some())
            .count()
    };
    let x = read_toml(root, XDP_CONFIG)?;
    let n = read_toml(root, NOXDP_CONFIG)?;
    ensure!(
        x.get("fast_path")
            .and_then(|f| f.get("interface"))
            .is_some(),
        "{XDP_CONFIG}: [fast_path] interface missing"
    );
    ensure!(
        n.get("fast_path")
            .and_then(|f| f.get("interface"))
            .is_none(),
        "{NOXDP_CONFIG}: must have no [fast_path] interface"
    );
    ensure!(
        guarded(&x) > 0 && guarded(&n) == 0,
        "{XDP_CONFIG} must set a connection guard, {NOXDP_CONFIG} none"
    );
    ensure!(
        strip(&x) == strip(&n),
        "{NOXDP_CONFIG} differs from {XDP_CONFIG} beyond [fast_path] interface and the \
         connection guard"
    );
    ensure!(
        x.get("global")
            .and_then(|g| g.get("unknown_peer"))
            .and_then(toml::Value::as_str)
            == Some("drop"),
        "{XDP_CONFIG}: unknown_peer must be \"drop\""
    );
    let scn = read_toml(root, SCENARIO)?;
    let (start, len, rates) = measure_phase(&scn).context(SCENARIO)?;
    ensure!(
        INTERIOR.leaves(len, 5) && start >= FLOOD_LEAD_S,
        "{SCENARIO}: {MEASURE} too short or too early"
    );
    ensure!(
        // Not named: 0/s, which fails the check.
        rates.get("gx_ccr_u").copied().unwrap_or(0.0) > 0.0,
        "{SCENARIO}: {MEASURE} needs steady CCR-U"
    );
    Ok(Plan {
        measure_start_s: start,
        measure_s: len,
        total_s: scenario_secs(&scn),
    })
}

/// Refuses to start when this bench's namespaces or pins exist.
pub fn preflight(root: &Path) -> Result<()> {
    let ns = net::namespaces();
    if !ns.is_empty() || Path::new(net::PIN_DIR).exists() {
        bail!(
            "flood bench leftovers: namespaces {ns:?}, pins {} present: {}; remove them \
             (ip netns del …, rm -r {}) and run again",
            net::PIN_DIR,
            Path::new(net::PIN_DIR).exists(),
            net::PIN_DIR
        );
    }
    plan(root).map(|_| ())
}

/// `cargo xtask bench flood` (after the release build): runs everything, writes
/// [`FLOOD_LATEST`] and the run files under `results/bench-flood-<timestamp>/`.
pub fn run(root: &Path, opts: &Opts) -> Result<()> {
    preflight(root)?;
    let plan = plan(root)?;
    procs::install_signal_handlers();
    let bins = Bins::release(root);
    agent_run::check_configs(root, &bins, &[XDP_CONFIG, NOXDP_CONFIG])?;
    let out = agent_run::run_dir(root, "flood")?;
    let started = Instant::now();
    let runs: Result<Vec<RunResult>> = (|| {
        let _net = net::TOPOLOGY.guard();
        eprintln!(
            "xtask: flood topology up (namespaces fl-gw, fl-dra, fl-srv; pcrf1 latency \
             {SERVER_LATENCY}); flood {} frames/s (paced runs {:.0}), {} thread(s), {} \
             repetition(s)",
            if opts.pps > 0.0 {
                format!("{:.0}", opts.pps)
            } else {
                "unpaced".into()
            },
            opts.paced_pps,
            opts.threads,
            opts.reps
        );
        net::up()?;
        let _server = start_server(&bins, SERVER_LATENCY, &out.join("pcrf1.log"))?;
        let mut runs = Vec::new();
        for rep in 0..opts.reps {
            for spec in RUNS.iter().filter(|s| !s.paced || opts.paced_pps > 0.0) {
                runs.push(
                    run_one(root, &bins, *spec, rep, &plan, opts, &out)
                        .with_context(|| format!("run {} (rep {})", spec.name, rep + 1))?,
                );
            }
        }
        Ok(runs)
    })();
    let runs = runs?;
    net::TOPOLOGY.ensure_removed()?;
    let (p5, rows) = shield::p5(&runs, opts);
    let doc = json!({
        "machine": results::machine(root),
        "duration_s": started.elapsed().as_secs_f64(),
        "configs": {
            "xdp": XDP_CONFIG,
            "noxdp": NOXDP_CONFIG,
            "scenario": SCENARIO,
            "server_latency": SERVER_LATENCY,
        },
        "generator": {
            "target_pps": opts.pps,
            "paced_runs_target_pps": opts.paced_pps,
            "threads": opts.threads,
            "design": "prebuilt Ethernet/IPv4/TCP frames, sendmmsg (64 per call) on an \
                       AF_PACKET socket (protocol 0, PACKET_QDISC_BYPASS) bound to fl-gw0, \
                       the sender side of the DRA's client veth (4 queues each way, frames \
                       spread over them by flow hash); each frame's source port moves on \
                       by one per send (checksum updated incrementally)",
            "mix_per_20_frames": "9 SYN from 198.18.128.0/17 (no peer), 9 ACK|PSH with \
                                  32-300 random payload bytes from the same range, 2 SYN \
                                  from pgw2 198.18.1.3 (a configured peer, guard 5/s)",
        },
        "p5": p5,
        "table": rows.iter().map(TableRow::to_json).collect::<Vec<_>>(),
        "runs": runs.iter().map(|r| r.json.clone()).collect::<Vec<_>>(),
        "run_files": out.strip_prefix(root).unwrap_or(&out).display().to_string(),
    });
    let latest = results::write_doc(root, &out, "flood.json", Some(FLOOD_LATEST), &doc)?;
    let mut s = String::new();
    let _ = writeln!(s, "\n{}", results::render_markdown(&rows));
    if let Some(n) = doc.pointer("/p5/note").and_then(serde_json::Value::as_str) {
        let _ = writeln!(s, "P5: {n}\n");
    }
    print!("{s}");
    println!(
        "written {} (runs in {}; {:.0} s)",
        latest.display(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
