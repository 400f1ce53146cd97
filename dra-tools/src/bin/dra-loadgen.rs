//! `dra-loadgen`: Diameter load generator (gateway client) and simulated PCRF/OCS
//! (server). See docs/loadgen.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::closed::{self, ClosedConfig};
use dra_tools::loadgen::failover::DraMode;
use dra_tools::loadgen::scenario::Scenario;
use dra_tools::loadgen::server::{self, LatencyDist, Overload, ServerConfig};

/// Diameter simulator: gateways sending Gx/Gy CCR-I/U/T from a scenario (client) or at a
/// fixed concurrency (closed), and PCRF/OCS servers answering them (server). Scenario
/// format: docs/loadgen.md.
#[derive(Parser, Debug)]
#[command(name = "dra-loadgen", version)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Act as N gateways (PGW): CER, watchdog, CCR traffic per the scenario; print a
    /// summary.
    Client(ClientArgs),
    /// Act as N gateways at a fixed concurrency (closed loop): each keeps --window Gx
    /// requests in flight, alternating CCR-I and CCR-T of a session per slot; measure
    /// requests/s and latency (warm-up, then a measured window). No scenario.
    Closed(ClosedArgs),
    /// Act as a PCRF/OCS: answer CER, DWR (with RFC 8583 Load), CCR (after a latency,
    /// within a capacity).
    Server(ServerArgs),
}

/// TLS from the first byte (RFC 6733 §13.1; IANA's port is 5868): all three files,
/// or none for plain TCP.
#[derive(clap::Args, Debug)]
struct TlsArgs {
    /// Certificate (PEM) naming every Origin-Host of these peers as a DNS name.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA certificate (PEM) the other side's certificate must chain to.
    #[arg(long, requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
    /// Gateways: the name the DRA's certificate must carry (required with --tls-cert).
    #[arg(long)]
    tls_name: Option<String>,
}

/// SCTP instead of TCP (RFC 6733 §2.1.1; the kernel's one-to-one sockets).
#[derive(clap::Args, Debug)]
struct SctpArgs {
    /// Speak Diameter over SCTP.
    #[arg(long, conflicts_with = "tls_cert")]
    sctp: bool,
    /// With --sctp: a further local address of the association (multihoming; repeat
    /// for more): a gateway binds it beside --bind, a server listens on it too.
    #[arg(long, requires = "sctp")]
    sctp_multihome: Vec<std::net::IpAddr>,
}

impl SctpArgs {
    fn sctp(&self) -> Option<dra_tools::loadgen::Sctp> {
        self.sctp.then(|| dra_tools::loadgen::Sctp {
            multihome: self.sctp_multihome.clone(),
        })
    }
}

impl TlsArgs {
    fn credentials(&self) -> anyhow::Result<Option<dra::transport::tls::Credentials>> {
        let (Some(c), Some(k), Some(a)) = (&self.tls_cert, &self.tls_key, &self.tls_ca) else {
            return Ok(None);
        };
        Ok(Some(
            dra_tools::loadgen::tls_credentials(c, k, a).context("loading the TLS files")?,
        ))
    }

    /// The connector of a gateway mode.
    fn connector(&self) -> anyhow::Result<Option<dra::transport::tls::Connector>> {
        let Some(c) = self.credentials()? else {
            return Ok(None);
        };
        let name = self
            .tls_name
            .as_deref()
            .context("--tls-name: the name the DRA's certificate must carry")?;
        Ok(Some(c.connector(name).with_context(|| {
            format!("--tls-name {name}: not a DNS name")
        })?))
    }
}

#[derive(clap::Args, Debug)]
struct ClientArgs {
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    sctp: SctpArgs,
    /// Address of the DRA (or a server) to connect to.
    #[arg(long, default_value = "127.0.0.1:3868")]
    connect: SocketAddr,
    /// A second DRA: every gateway also connects to it and fails over between the two
    /// (transport loss or watchdog SUSPECT): pending requests are sent again to the
    /// other with the T flag; traffic returns when the first is in service again.
    #[arg(long)]
    secondary: Option<SocketAddr>,
    /// With --secondary: `primary` (the second DRA only while the first is out of
    /// service) or `split` (both active, new requests alternate).
    #[arg(long, default_value = "primary", requires = "secondary")]
    dra_mode: DraMode,
    /// Source address of the connections (several gateways on one host each need
    /// their own: a DRA tells peers apart by source address).
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// Scenario TOML file (phases, rates, bursts, flush, reconnect storms).
    #[arg(long)]
    scenario: PathBuf,
    /// Number of gateway peers, each its own TCP connection and Origin-Host.
    #[arg(long, default_value_t = 4)]
    peers: usize,
    /// Origin-Host pattern: the n in braces (as in the default) becomes 1..=peers.
    #[arg(long, default_value = "pgw{n}.lab.example")]
    origin_host: String,
    /// Origin-Realm of the peers.
    #[arg(long, default_value = "lab.example")]
    origin_realm: String,
    /// Watchdog interval Tw in seconds (at least 6, RFC 3539): DWR after Tw idle.
    #[arg(long, default_value_t = 30)]
    tw: u64,
    /// Write one JSON object per second (t, per class sent/answered/p50/p99/timeouts/
    /// in-flight) to this file.
    #[arg(long)]
    rows: Option<PathBuf>,
    /// Write the final summary as JSON to this file ("-" = stdout instead of the table).
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// No progress line on stderr each second.
    #[arg(long)]
    quiet: bool,
    /// Seed for session choice and identifiers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds to wait for answers still in flight after the last phase (default: the
    /// scenario's request timeout).
    #[arg(long)]
    drain: Option<f64>,
    /// The gateways are DOIC reacting nodes: they announce loss, rate and peer reports
    /// (RFC 7683, 8582, 8581) and shed their new sessions per the reports received.
    #[arg(long)]
    doic: bool,
}

#[derive(clap::Args, Debug)]
struct ClosedArgs {
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    sctp: SctpArgs,
    /// Address of the DRA (or a server) to connect to.
    #[arg(long, default_value = "127.0.0.1:3868")]
    connect: SocketAddr,
    /// Source address of the connections (a DRA tells peers apart by source address).
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// Number of gateway peers, each its own TCP connection and Origin-Host.
    #[arg(long, default_value_t = 4)]
    peers: usize,
    /// Requests in flight per peer: a new one leaves as soon as an answer comes back
    /// (total in flight = peers × window).
    #[arg(long, default_value_t = 25)]
    window: usize,
    /// Measured seconds, after the warm-up (fractions allowed).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Warm-up seconds from the start (connect, CER/CEA, load running, nothing
    /// recorded).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds to wait for answers still in flight after the measured window; then DPR.
    #[arg(long, default_value_t = 3.0)]
    drain: f64,
    /// Origin-Host pattern: the n in braces (as in the default) becomes 1..=peers.
    #[arg(long, default_value = "pgw{n}.lab.example")]
    origin_host: String,
    /// Origin-Realm of the peers.
    #[arg(long, default_value = "lab.example")]
    origin_realm: String,
    /// Destination-Realm of every CCR.
    #[arg(long, default_value = "pcrf.lab.example")]
    destination_realm: String,
    /// Destination-Host of every CCR (none when absent).
    #[arg(long)]
    destination_host: Option<String>,
    /// Watchdog interval Tw in seconds (at least 6, RFC 3539): DWR after Tw idle.
    #[arg(long, default_value_t = 30)]
    tw: u64,
    /// Seed for Hop-by-Hop and End-to-End identifiers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the summary as JSON to this file ("-" = stdout instead of the text).
    #[arg(long)]
    summary_json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct ServerArgs {
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    sctp: SctpArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3869")]
    listen: SocketAddr,
    /// Our Origin-Host (in every answer, so stickiness can be checked).
    #[arg(long, default_value = "pcrf1.lab.example")]
    origin_host: String,
    /// Our Origin-Realm.
    #[arg(long, default_value = "lab.example")]
    origin_realm: String,
    /// Origin-Host allowed to connect (repeatable); none = any.
    #[arg(long = "allow-host")]
    allow_hosts: Vec<String>,
    /// CCR service time: `fixed:<d>`, `uniform:<min>:<max>` or `exp:<mean>`; durations like
    /// 5ms, 1.5s, 200us.
    #[arg(long, default_value = "fixed:1ms")]
    latency: LatencyDist,
    /// CCRs in service at once (also the C of the Load-Value 65535·C/(C+busy)).
    #[arg(long, default_value_t = 1000)]
    max_concurrent: usize,
    /// CCRs starting service per second (unlimited when absent).
    #[arg(long)]
    max_rate: Option<f64>,
    /// Beyond capacity: queue (latency grows) or reject (3004 DIAMETER_TOO_BUSY).
    #[arg(long, value_enum, default_value = "queue")]
    overload: Overload,
    /// Queue mode: answer 3004 when this many CCRs already wait.
    #[arg(long)]
    max_queue: Option<usize>,
    /// Redis address: `SET <prefix><Session-Id>` on CCR-I, DEL on CCR-T.
    #[arg(long)]
    redis: Option<SocketAddr>,
    /// Redis key prefix.
    #[arg(long, default_value = "loadgen:session:")]
    redis_prefix: String,
    /// Extra Redis commands per CCR (pipelined `HINCRBY` on `<key>:state`), to load the
    /// DB like a session store with several records per session. 0 = only SET/DEL.
    #[arg(long, default_value_t = 0)]
    redis_extra_ops: u32,
    /// Answer CCR-U/T for unknown sessions with 2001 instead of 5002.
    #[arg(long)]
    lenient_sessions: bool,
    /// Watchdog interval Tw in seconds (at least 6).
    #[arg(long, default_value_t = 30)]
    tw: u64,
    /// Seed for latency sampling.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Put the current RFC 8583 Load AVP (type PEER, SourceID = Origin-Host) in every
    /// CCA, not only in DWAs (RFC 8583 §5 allows it in any answer): `true` or `false`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    load_in_answers: bool,
    /// DOIC reporting node: requests per second the server takes before it sends
    /// OC-OLRs (host reports, loss) to requests that announce DOIC. Off when absent.
    #[arg(long)]
    doic_capacity: Option<f64>,
    /// With --doic-capacity: the OC-Reduction-Percentage asked for while over capacity
    /// (default: the share over capacity, rounded up, at most 99).
    #[arg(long, requires = "doic_capacity", value_parser = clap::value_parser!(u32).range(0..=100))]
    doic_reduction: Option<u32>,
    /// With --doic-capacity: OC-Validity-Duration of the reports, seconds (1–86400).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    doic_validity: u32,
    /// Print the server counters as JSON every N seconds on stderr (0 = never).
    #[arg(long, default_value_t = 0)]
    stats_every: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.mode {
            Mode::Client(a) => run_client(a).await,
            Mode::Closed(a) => run_closed(a).await,
            Mode::Server(a) => run_server(a).await,
        }
    })
}

async fn run_client(a: ClientArgs) -> anyhow::Result<()> {
    let scenario = Scenario::load(&a.scenario).context("loading the scenario")?;
    let mut cfg = ClientConfig::new(a.connect, a.peers);
    cfg.bind = a.bind;
    cfg.secondary = a.secondary;
    cfg.dra_mode = a.dra_mode;
    cfg.origin_host_pattern = a.origin_host;
    cfg.origin_realm = a.origin_realm;
    cfg.tw = Duration::from_secs(a.tw);
    cfg.rows_path = a.rows;
    cfg.progress = !a.quiet;
    cfg.seed = a.seed;
    cfg.drain = a.drain.map(Duration::from_secs_f64);
    cfg.doic = a.doic;
    cfg.tls = a.tls.connector()?;
    cfg.sctp = a.sctp.sctp();
    // SIGINT/SIGTERM end the scenario early; the summary still covers what ran.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    cfg.stop = Some(stop_rx);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("dra-loadgen: stopping early (signal); waiting for answers in flight");
        let _ = stop_tx.send(true);
    });
    let report = client::run(cfg, scenario).await?;
    match a.summary_json {
        Some(p) if p.as_os_str() == "-" => println!("{}", serde_json::to_string_pretty(&report)?),
        Some(p) => {
            std::fs::write(&p, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", p.display()))?;
            print!("{}", report.to_text());
        }
        None => print!("{}", report.to_text()),
    }
    Ok(())
}

fn seconds(what: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("--{what} {s}"))
}

async fn run_closed(a: ClosedArgs) -> anyhow::Result<()> {
    let mut cfg = ClosedConfig::new(a.connect, a.peers, a.window);
    cfg.bind = a.bind;
    cfg.origin_host_pattern = a.origin_host;
    cfg.origin_realm = a.origin_realm;
    cfg.destination_realm = a.destination_realm;
    cfg.destination_host = a.destination_host;
    cfg.measure = seconds("seconds", a.seconds)?;
    cfg.warmup = seconds("warmup", a.warmup)?;
    cfg.drain = seconds("drain", a.drain)?;
    cfg.tw = Duration::from_secs(a.tw);
    cfg.seed = a.seed;
    cfg.tls = a.tls.connector()?;
    cfg.sctp = a.sctp.sctp();
    let report = closed::run(cfg).await?;
    let json = serde_json::to_string_pretty(&report.summary())?;
    match a.summary_json {
        Some(p) if p.as_os_str() == "-" => println!("{json}"),
        Some(p) => {
            std::fs::write(&p, json).with_context(|| format!("writing {}", p.display()))?;
            print!("{}", report.to_text());
        }
        None => print!("{}", report.to_text()),
    }
    Ok(())
}

async fn run_server(a: ServerArgs) -> anyhow::Result<()> {
    let mut cfg = ServerConfig::new(a.listen, &a.origin_host, &a.origin_realm);
    cfg.tls = a.tls.credentials()?.map(|c| c.acceptor());
    cfg.sctp = a.sctp.sctp();
    cfg.allowed_hosts = a.allow_hosts;
    cfg.latency = a.latency;
    cfg.max_concurrent = a.max_concurrent;
    cfg.max_rate = a.max_rate;
    cfg.overload = a.overload;
    cfg.max_queue = a.max_queue;
    cfg.redis = a.redis;
    cfg.redis_prefix = a.redis_prefix;
    cfg.redis_extra_ops = a.redis_extra_ops;
    cfg.strict_sessions = !a.lenient_sessions;
    cfg.tw = Duration::from_secs(a.tw);
    cfg.seed = a.seed;
    cfg.load_in_answers = a.load_in_answers;
    cfg.doic = a.doic_capacity.map(|c| {
        std::sync::Arc::new(dra_tools::loadgen::doic::ServerReporter::new(
            &a.origin_host,
            Some(c),
            a.doic_reduction,
            a.doic_validity,
        ))
    });
    let h = server::run(cfg).await?;
    eprintln!(
        "dra-loadgen server {} listening on {}",
        h.origin_host(),
        h.local_addr()
    );
    let every = a.stats_every;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_secs(every.max(1))), if every > 0 => {
                eprintln!("{}", serde_json::to_string(&h.stats())?);
            }
        }
    }
    let stats = h.shutdown().await;
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}
