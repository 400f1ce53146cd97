//! `dra-sim`: simulations that use the agent's own routing code.
//!
//! `dra-sim lb` sweeps load-aware peer selection (docs/architecture.md §7): every
//! strategy against the heartbeat period and the number of clients, in docomo's
//! cumulative-count model and in a queueing model. See docs/load-balancing.md.

use std::{fs, path::PathBuf, process::ExitCode};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use dra::routing::Strategy;
use dra_tools::sim::{
    HeartbeatPhase, LbConfig, Metric, Sweep, Variant, csv, markdown, plot_metric, run_sweep,
};

#[derive(Parser)]
#[command(
    name = "dra-sim",
    version,
    about = "Deterministic simulations over the dra agent's own routing code"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load-aware peer selection: clients pick among servers with the agent's Selector,
    /// seeing each server's RFC 8583 Load-Value only as of their last heartbeat.
    ///
    /// Runs every variant × client count × heartbeat period × strategy with one seed,
    /// prints markdown tables (a row per strategy, a column per H) and writes
    /// results.md, results.csv and PNG plots (seed002_cv.png, seed002_window_cv.png,
    /// queue_cv.png, queue_qlen_cv.png, queue_p99.png) into --out. Times are in mean
    /// inter-arrival times of the aggregate request stream. The same options and seed give
    /// the same output.
    Lb(LbArgs),
}

#[derive(Args)]
struct LbArgs {
    /// Server models to run: `seed002` (load = requests received so far, docomo's
    /// setting) and/or `queue` (FIFO servers with capacities, load = requests in server).
    #[arg(long, value_delimiter = ',', default_value = "seed002,queue")]
    variants: Vec<Variant>,

    /// Selection strategies to compare (routing::Strategy names).
    #[arg(long, value_delimiter = ',', default_values_t = Strategy::ALL)]
    strategies: Vec<Strategy>,

    /// Numbers of clients to sweep; each client has its own Selector and heartbeat phase.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    clients: Vec<usize>,

    /// Heartbeat periods H to sweep, in mean inter-arrival times; 0 = every decision sees
    /// the current load.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,1,2,5,10,20,50,100,200,500,1000"
    )]
    heartbeats: Vec<f64>,

    /// Requests (signals) per run.
    #[arg(long, default_value_t = 100_000)]
    signals: u64,

    /// Share of clients that are heavy (round(clients × share), drawn from the seed).
    #[arg(long, default_value_t = 0.1)]
    heavy_fraction: f64,

    /// Traffic of a heavy client relative to a normal one.
    #[arg(long, default_value_t = 10)]
    heavy_factor: u32,

    /// Heartbeat phases: `random` (each client uniform in [0, H)) or `aligned` (all at
    /// k·H, worst case for herding).
    #[arg(long, default_value = "random")]
    phases: HeartbeatPhase,

    /// seed002: number of servers.
    #[arg(long, default_value_t = 3)]
    servers: usize,

    /// seed002: window in requests for the short-term imbalance metric (window_cv);
    /// 0 turns it off.
    #[arg(long, default_value_t = 1000)]
    window: u64,

    /// queue: relative capacities (service rates) of the servers, one per server.
    #[arg(long, value_delimiter = ',', default_value = "1,1,2")]
    capacities: Vec<f64>,

    /// queue: offered load / total capacity (Poisson arrivals, exponential service).
    #[arg(long, default_value_t = 0.7)]
    utilisation: f64,

    /// queue: requests in a server per unit of capacity at which it reports Load-Value 0
    /// (Load-Value = 65535 × (1 − min(1, in_server / (capacity × this)))).
    #[arg(long, default_value_t = 8.0)]
    queue_full: f64,

    /// queue: share of requests at the start left out of the statistics.
    #[arg(long, default_value_t = 0.1)]
    warmup: f64,

    /// Seed of every random choice (arrivals, clients, job sizes, phases, selectors).
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Output directory for results.md, results.csv and the PNG plots.
    #[arg(long, default_value = "results/sim-lb")]
    out: PathBuf,

    /// Do not draw the PNG plots.
    #[arg(long)]
    no_plots: bool,

    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
}

/// The plots written for each variant.
const PLOTS: &[(Variant, Metric)] = &[
    (Variant::Seed002, Metric::Cv),
    (Variant::Seed002, Metric::WindowCv),
    (Variant::Queue, Metric::Cv),
    (Variant::Queue, Metric::QueueCv),
    (Variant::Queue, Metric::P99),
];

fn lb(a: LbArgs) -> Result<()> {
    let base = LbConfig {
        signals: a.signals,
        heavy_fraction: a.heavy_fraction,
        heavy_factor: a.heavy_factor,
        phases: a.phases,
        servers: a.servers,
        capacities: a.capacities,
        utilisation: a.utilisation,
        queue_full: a.queue_full,
        warmup: a.warmup,
        window: a.window,
        seed: a.seed,
        ..LbConfig::new(Variant::Seed002)
    };
    let sweep = Sweep {
        base,
        variants: a.variants,
        clients: a.clients,
        heartbeats: a.heartbeats,
        strategies: a.strategies,
    };
    // Check every run's parameters before spending time on the first.
    for c in sweep.configs() {
        c.validate()?;
    }
    let total = sweep.configs().len();
    let mut done = 0usize;
    let quiet = a.quiet;
    let rows = run_sweep(&sweep, |r| {
        done += 1;
        if !quiet {
            eprintln!(
                "[{done}/{total}] {} clients={} H={} {}: cv={:.3e}{}",
                r.config.variant,
                r.config.clients,
                r.config.heartbeat,
                r.config.strategy,
                r.result.cv,
                r.result
                    .p99
                    .map_or_else(String::new, |p| format!(" p99={p:.1}"))
            );
        }
    })?;

    let md = markdown(&rows);
    print!("{md}");
    fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let write = |name: &str, text: &str| -> Result<()> {
        let p = a.out.join(name);
        fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("results.md", &format!("# dra-sim lb results\n\n{md}"))?;
    write("results.csv", &csv(&rows))?;
    let mut written = vec!["results.md".to_owned(), "results.csv".to_owned()];
    if !a.no_plots {
        for &(variant, metric) in PLOTS {
            if !sweep.variants.contains(&variant) {
                continue;
            }
            let name = format!("{variant}_{}.png", metric.name());
            plot_metric(&rows, variant, metric, &a.out.join(&name))?;
            written.push(name);
        }
    }
    if !quiet {
        eprintln!("wrote {} in {}", written.join(", "), a.out.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = match Cli::parse().cmd {
        Cmd::Lb(a) => lb(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dra-sim: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
