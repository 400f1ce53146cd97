//! `dra-bench`: relayed requests per second and latency of the dra agent and of
//! freeDiameter 1.2.1, with the same simulators, in the same run (`cargo xtask bench
//! relay`; docs/bench.md).
//!
//! Topology (two network namespaces joined by a veth pair, 198.18.0.0/30):
//!
//! ```text
//!   ns "sim" 198.18.0.1                         ns "relay" 198.18.0.2
//!   clients (closed loop, W in flight each) ──▶ dra agent :3869  or  freeDiameterd :3868
//!   servers (answer 2001 at once)           ◀── (the relay dials the servers)
//! ```
//!
//! The simulators are `dra-loadgen`'s: clients are [`dra_tools::loadgen::closed`] peers,
//! servers are [`dra_tools::loadgen::server`] servers with zero latency (answered inline).
//! They share one single-threaded runtime in the bench process (so the simulators use
//! at most one core, the same for both relays). The agent runs in this
//! process on its own multi-threaded runtime whose threads live in the relay namespace;
//! freeDiameter runs as a child process in that namespace. Needs root (namespaces).

use std::fs::File;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use dra::diameter::result_code;
use dra_tools::loadgen::closed::{self, ClosedConfig};
use dra_tools::loadgen::server::{self, LatencyDist, ServerConfig, ServerHandle};
use dra_tools::netns::{self, Netns};

const SIM_IP: &str = "198.18.0.1";
const RELAY_IP: &str = "198.18.0.2";
const AGENT_PORT: u16 = 3869;
const FD_PORT: u16 = 3868;
const SERVER_BASE_PORT: u16 = 4001;
const REALM: &str = "test.example";
const SERVER_REALM: &str = "pcrf.test.example";
const AGENT_HOST: &str = "dra.test.example";
const FD_HOST: &str = "fd.test.example";

#[derive(Parser, Debug)]
#[command(about = "Relay benchmark: dra agent vs freeDiameter, same simulators, same run")]
struct Args {
    /// Client connections (gateways).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Requests in flight per client connection (total in flight = clients × window).
    #[arg(long, default_value_t = 25)]
    window: usize,
    /// Server simulators.
    #[arg(long, default_value_t = 2)]
    servers: usize,
    /// Measured seconds per relay.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Warm-up seconds per relay (load runs, nothing recorded).
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Worker threads of the agent's runtime.
    #[arg(long, default_value_t = 2)]
    agent_threads: usize,
    /// Which relays: agent, freediameter or both.
    #[arg(long, default_value = "both")]
    only: String,
    /// Result file (JSON).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------- simulators

/// The server simulators for one relay run: `dra-loadgen` servers answering every CCR
/// 2001 at once (zero latency: answered inline, no per-request task or timer), no Load
/// AVP in CCAs (as a plain server), and lenient about sessions: freeDiameter's
/// `rt_default` spreads a session's CCR-I and CCR-T over both servers.
async fn start_servers(args: &Args) -> Result<Vec<ServerHandle>> {
    let mut servers = Vec::new();
    for i in 1..=args.servers {
        let host = format!("srv{i}.{SERVER_REALM}");
        let addr: SocketAddr = format!("{SIM_IP}:{}", SERVER_BASE_PORT + i as u16).parse()?;
        let mut cfg = ServerConfig::new(addr, &host, SERVER_REALM);
        cfg.latency = LatencyDist::Fixed(Duration::ZERO);
        cfg.strict_sessions = false;
        cfg.load_in_answers = false;
        cfg.seed = i as u64;
        servers.push(
            server::run(cfg)
                .await
                .with_context(|| format!("server {host} on {addr}"))?,
        );
    }
    Ok(servers)
}

/// Waits until the relay has opened a connection (CER accepted) to every server.
async fn wait_servers(servers: &[ServerHandle], what: &str) -> Result<()> {
    let t0 = Instant::now();
    while servers.iter().any(|s| s.stats().cer_accepted == 0) {
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("{what} did not connect to every server");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Stops the servers; returns the CCAs they sent.
async fn stop_servers(servers: Vec<ServerHandle>) -> u64 {
    let mut answered = 0;
    for s in servers {
        answered += s.shutdown().await.answered.values().sum::<u64>();
    }
    answered
}

/// What one relay achieved.
struct RelayResult {
    name: &'static str,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    answered: u64,
    non_2001: u64,
}

/// The closed-loop clients against `relay`: `client{n}.test.example`, `window` Gx
/// requests in flight each.
async fn load(relay: SocketAddr, args: &Args, name: &'static str) -> Result<RelayResult> {
    let mut cfg = ClosedConfig::new(relay, args.clients, args.window);
    cfg.origin_host_pattern = format!("client{{n}}.{REALM}");
    cfg.origin_realm = REALM.to_owned();
    cfg.destination_realm = SERVER_REALM.to_owned();
    cfg.warmup = Duration::from_secs(args.warmup);
    cfg.measure = Duration::from_secs(args.seconds);
    let r = closed::run(cfg)
        .await
        .with_context(|| format!("{name}: clients"))?;
    if r.answered_with(result_code::SUCCESS) == 0 {
        bail!("{name}: no request answered 2001");
    }
    Ok(RelayResult {
        name,
        rps: r.requests_per_s(),
        p50_ms: r.latency_ms(0.50),
        p99_ms: r.latency_ms(0.99),
        answered: r.answered_total(),
        non_2001: r.answered_total() - r.answered_with(result_code::SUCCESS),
    })
}

// ---------------------------------------------------------------- the agent

fn agent_toml(args: &Args, servers: &[ServerHandle]) -> String {
    let mut t = format!(
        "[global]\norigin_host = \"{AGENT_HOST}\"\norigin_realm = \"{REALM}\"\n\
         diameter_ports = [{AGENT_PORT}]\n\n\
         [[listener]]\naddress = \"{RELAY_IP}:{AGENT_PORT}\"\ntransport = \"tcp\"\n\n"
    );
    for i in 1..=args.clients {
        t.push_str(&format!(
            "[[peer]]\nname = \"client{i}\"\norigin_host = \"client{i}.{REALM}\"\n\
             realm = \"{REALM}\"\naddresses = []\nrole = \"client\"\n\n"
        ));
    }
    for (i, s) in servers.iter().enumerate() {
        t.push_str(&format!(
            "[[peer]]\nname = \"srv{}\"\norigin_host = \"{}\"\nrealm = \"{SERVER_REALM}\"\n\
             addresses = []\nrole = \"server\"\ngroup = \"pcrf\"\nconnect = \"{}\"\n\n",
            i + 1,
            s.origin_host(),
            s.local_addr()
        ));
    }
    t.push_str(&format!(
        "[[peer_group]]\nname = \"pcrf\"\nanswer_timeout = \"2s\"\nselection = \"round_robin\"\n\n\
         [[route]]\nrealm = \"{SERVER_REALM}\"\napplication = \"gx\"\ngroup = \"pcrf\"\n"
    ));
    t
}

/// The agent on its own runtime in the relay namespace; stops when dropped.
struct AgentRun {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AgentRun {
    fn start(ns: &Netns, text: String, threads: usize) -> Result<AgentRun> {
        let cfg = dra::config::parse(&text, "bench.toml")
            .map_err(|e| anyhow::anyhow!("agent config: {e}"))?;
        let nsfile = ns.file()?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            // This thread and the runtime threads it creates below.
            if let Err(e) = netns::enter(&nsfile) {
                let _ = ready_tx.send(Err(anyhow::anyhow!("setns: {e}")));
                return;
            }
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            rt.block_on(async move {
                let opts = dra::agent::AgentOptions {
                    tc: Some(Duration::from_millis(200)),
                    ..Default::default()
                };
                match dra::agent::start(cfg, opts, dra::metrics::Metrics::new()).await {
                    Ok(agent) => {
                        let _ = ready_tx.send(Ok(()));
                        let _ = stop_rx.await;
                        if let Some(s) = agent.status().await {
                            eprintln!("{s}");
                        }
                        drop(agent);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::anyhow!("agent start: {e:?}")));
                    }
                }
            });
        });
        ready_rx.recv().context("agent thread")??;
        Ok(AgentRun {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------- freeDiameter

/// freeDiameterd in the relay namespace, killed on drop.
struct FdRun {
    child: Child,
}

impl Drop for FdRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The freeDiameter relay config (docs/bench.md): plain TCP on [`RELAY_IP`], relay
/// enabled (default), `rt_default` sending realm `pcrf.test.example` to the servers,
/// the DCCA dictionaries, no accounting or debug extensions; clients admitted without
/// TLS by `acl_wl` (ALLOW_IPSEC).
fn fd_conf(dir: &Path, args: &Args, servers: &[ServerHandle]) -> Result<PathBuf> {
    let crt = dir.join("fd.crt");
    let key = dir.join("fd.key");
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={FD_HOST}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .context("spawn openssl")?;
    if !out.status.success() {
        bail!("openssl: {}", String::from_utf8_lossy(&out.stderr));
    }
    let acl = dir.join("acl_wl.conf");
    let mut a = String::new();
    for i in 1..=args.clients {
        a.push_str(&format!("ALLOW_IPSEC client{i}.{REALM}\n"));
    }
    std::fs::write(&acl, a)?;
    let rt = dir.join("rt_default.conf");
    let mut r = String::new();
    for s in servers {
        r.push_str(&format!(
            "dr=\"{SERVER_REALM}\" : \"{}\" += 100 ;\n",
            s.origin_host()
        ));
    }
    std::fs::write(&rt, r)?;
    let mut c = format!(
        "Identity = \"{FD_HOST}\";\nRealm = \"{REALM}\";\nPort = {FD_PORT};\nSecPort = 0;\n\
         No_SCTP;\nNo_IPv6;\nListenOn = \"{RELAY_IP}\";\nTwTimer = 30;\nTcTimer = 1;\n\
         TLS_Cred = \"{}\", \"{}\";\nTLS_CA = \"{}\";\n\
         LoadExtension = \"dict_nasreq.fdx\";\nLoadExtension = \"dict_dcca.fdx\";\n\
         LoadExtension = \"dict_dcca_3gpp.fdx\";\n\
         LoadExtension = \"acl_wl.fdx\" : \"{}\";\nLoadExtension = \"rt_default.fdx\" : \"{}\";\n",
        crt.display(),
        key.display(),
        crt.display(),
        acl.display(),
        rt.display()
    );
    for s in servers {
        c.push_str(&format!(
            "ConnectPeer = \"{}\" {{ ConnectTo = \"{}\"; Port = {}; No_TLS; }};\n",
            s.origin_host(),
            s.local_addr().ip(),
            s.local_addr().port()
        ));
    }
    let p = dir.join("fd.conf");
    std::fs::write(&p, c)?;
    Ok(p)
}

fn start_fd(ns: &Netns, conf: &Path, log: &Path) -> Result<FdRun> {
    let out = File::create(log)?;
    let mut cmd = Command::new("freeDiameterd");
    cmd.arg("-c")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    let child = ns
        .spawn(&mut cmd)
        .context("spawn freeDiameterd (package freediameterd; `cargo xtask setup`)")?;
    Ok(FdRun { child })
}

// ---------------------------------------------------------------- main

fn main() -> Result<()> {
    let args = Args::parse();
    if args.clients == 0 || args.window == 0 || args.servers == 0 || args.seconds == 0 {
        bail!("clients, window, servers and seconds must be positive");
    }
    let run_agent = matches!(args.only.as_str(), "both" | "agent");
    let run_fd = matches!(args.only.as_str(), "both" | "freediameter");
    if !run_agent && !run_fd {
        bail!("--only: agent, freediameter or both");
    }
    let sim_ns = Netns::new("bsim")?;
    let relay_ns = Netns::new("brel")?;
    netns::veth_pair(
        &sim_ns,
        &format!("{SIM_IP}/30"),
        &relay_ns,
        &format!("{RELAY_IP}/30"),
    )?;
    let dir = TempDir(std::env::temp_dir().join(format!("dra-bench-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    // This (main) thread runs the simulators in the sim namespace.
    sim_ns.enter()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = rt.block_on(async {
        let mut results = Vec::new();
        if run_agent {
            let servers = start_servers(&args).await?;
            let agent =
                AgentRun::start(&relay_ns, agent_toml(&args, &servers), args.agent_threads)?;
            wait_servers(&servers, "the agent").await?;
            let relay: SocketAddr = format!("{RELAY_IP}:{AGENT_PORT}").parse()?;
            eprintln!(
                "dra agent: {} clients × {} in flight …",
                args.clients, args.window
            );
            let r = load(relay, &args, "dra agent").await;
            drop(agent);
            let answered = stop_servers(servers).await;
            eprintln!("servers answered {answered} CCRs");
            results.push(r?);
        }
        if run_fd {
            let servers = start_servers(&args).await?;
            let conf = fd_conf(&dir.0, &args, &servers)?;
            let log = dir.0.join("fd.log");
            let fd = start_fd(&relay_ns, &conf, &log)?;
            if let Err(e) = wait_servers(&servers, "freeDiameter").await {
                bail!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            let relay: SocketAddr = format!("{RELAY_IP}:{FD_PORT}").parse()?;
            eprintln!(
                "freeDiameter: {} clients × {} in flight …",
                args.clients, args.window
            );
            let r = load(relay, &args, "freeDiameter 1.2.1").await;
            drop(fd);
            let answered = stop_servers(servers).await;
            eprintln!("servers answered {answered} CCRs");
            match r {
                Ok(r) => results.push(r),
                Err(e) => bail!(
                    "{e:#}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            }
        }
        anyhow::Ok(results)
    })?;
    report(&args, &results)
}

fn report(args: &Args, results: &[RelayResult]) -> Result<()> {
    let in_flight = args.clients * args.window;
    println!(
        "relay benchmark: {} clients × {} in flight = {in_flight}, {} servers answering at \
         once, {} s measured after {} s warm-up",
        args.clients, args.window, args.servers, args.seconds, args.warmup
    );
    println!(
        "{:<20} {:>12} {:>9} {:>9} {:>12} {:>9}",
        "relay", "requests/s", "p50 ms", "p99 ms", "answered", "non-2001"
    );
    for r in results {
        println!(
            "{:<20} {:>12.0} {:>9.3} {:>9.3} {:>12} {:>9}",
            r.name, r.rps, r.p50_ms, r.p99_ms, r.answered, r.non_2001
        );
    }
    let ratio = match results {
        [a, f] => Some(a.rps / f.rps),
        _ => None,
    };
    if let Some(x) = ratio {
        println!("dra agent / freeDiameter: {x:.2}× (goal ≥ 3×)");
    }
    let json = serde_json::json!({
        "in_flight": in_flight,
        "clients": args.clients,
        "window": args.window,
        "servers": args.servers,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "agent_threads": args.agent_threads,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "results": results.iter().map(|r| serde_json::json!({
            "relay": r.name,
            "requests_per_s": (r.rps * 10.0).round() / 10.0,
            "p50_ms": r.p50_ms,
            "p99_ms": r.p99_ms,
            "answered": r.answered,
            "non_2001": r.non_2001,
        })).collect::<Vec<_>>(),
        "ratio_agent_to_freediameter": ratio.map(|x| (x * 100.0).round() / 100.0),
    });
    let out = args.out.clone().unwrap_or_else(|| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        crate_dir
            .parent()
            .unwrap_or(crate_dir)
            .join("bench/results/relay-latest.json")
    });
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p)?;
    }
    let mut f = File::create(&out).with_context(|| format!("write {}", out.display()))?;
    writeln!(f, "{json}")?;
    println!("wrote {}", out.display());
    Ok(())
}
