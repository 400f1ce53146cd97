//! `dra-bench`: relayed requests per second, latency and CPU per request of the `dra`
//! agent (the shipped `dra run` binary) and of two references, freeDiameter 1.2.1 and a
//! relay on Erlang/OTP's diameter application, with the same simulators, alternating
//! rounds in one run (`cargo xtask bench relay`; docs/bench.md).
//!
//! Topology (two network namespaces joined by a veth pair, 198.18.0.0/30):
//!
//! ```text
//!   ns "sim" 198.18.0.1                         ns "relay" 198.18.0.2
//!   clients (closed loop, W in flight each) ──▶ dra run :3869, freeDiameterd :3868
//!   servers (answer 2001 at once)           ◀── or the OTP relay :3870 (one at a time)
//!                                               or dra run over TLS :5868
//! ```
//!
//! "dra run (TLS)" is the same agent, clients and servers with every connection TLS
//! from the first byte (mutual authentication, certificates from a CA made at start,
//! [`dra_tools::pki`]); its ratio to plain `dra run` is reported as
//! `ratio_tls_to_plain` (requests/s) and `ratio_tls_to_plain_cpu_per_request`.
//!
//! The simulators are `dra-loadgen`'s: clients are [`dra_tools::loadgen::closed`] peers,
//! servers are [`dra_tools::loadgen::server`] servers with zero latency (answered inline).
//! They share one single-threaded runtime in the bench process (so the simulators use
//! at most one core, the same for every relay). Each relay is its own process in the
//! relay namespace, started afresh for each run: `dra run --config` (its own
//! current-thread runtime, as shipped), `freeDiameterd -c`, `erl -run dra_bench_relay`
//! (dra-tools/otp/dra_bench_relay.erl, compiled with erlc at start). CPU per request =
//! the relay's process tree CPU time over the load ÷ CCRs the servers answered. Needs
//! root (namespaces).

use std::fs::File;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use dra::diameter::result_code;
use dra_report::relay::{
    self, GOAL_MIN_RATIO, GOAL_MIN_RATIO_TLS_TO_PLAIN, RelayReport, RelaySummary, RoundResult,
    Spread,
};
use dra_tools::freediameter::self_signed_cert;
use dra_tools::loadgen::closed::{self, ClosedConfig};
use dra_tools::loadgen::server::{self, LatencyDist, ServerConfig, ServerHandle};
use dra_tools::netns::{self, Netns};

const SIM_IP: &str = "198.18.0.1";
const RELAY_IP: &str = "198.18.0.2";
const AGENT_PORT: u16 = 3869;
const AGENT_TLS_PORT: u16 = dra::transport::tls::DIAMETERS_PORT;
const FD_PORT: u16 = 3868;
const OTP_PORT: u16 = 3870;
const OTP_HOST: &str = "otp.test.example";
/// The OTP relay's source, compiled at start.
const OTP_RELAY_ERL: &str = include_str!("../../otp/dra_bench_relay.erl");
const SERVER_BASE_PORT: u16 = 4001;
const REALM: &str = "test.example";
const SERVER_REALM: &str = "pcrf.test.example";
const AGENT_HOST: &str = "dra.test.example";
const FD_HOST: &str = "fd.test.example";

#[derive(Parser, Debug)]
#[command(
    about = "Relay benchmark: dra run vs freeDiameter and an Erlang/OTP relay, same \
             simulators, alternating rounds"
)]
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
    /// Rounds: each relay runs once per round, in turn (median and spread reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Which relays, comma-separated: agent, freediameter, otp (or all).
    #[arg(long, default_value = "all")]
    only: String,
    /// The `dra` binary to bench (default: `dra` beside this binary).
    #[arg(long)]
    dra: Option<PathBuf>,
    /// A second `dra` binary (another build), run as "dra run (B)" in every round right
    /// after the first: an A/B comparison under the same conditions.
    #[arg(long)]
    dra_b: Option<PathBuf>,
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
async fn start_servers(args: &Args, tls: Option<&Pki>) -> Result<Vec<ServerHandle>> {
    let mut servers = Vec::new();
    for i in 1..=args.servers {
        let host = format!("srv{i}.{SERVER_REALM}");
        let addr: SocketAddr = format!("{SIM_IP}:{}", SERVER_BASE_PORT + i as u16).parse()?;
        let mut cfg = ServerConfig::new(addr, &host, SERVER_REALM);
        cfg.latency = LatencyDist::Fixed(Duration::ZERO);
        cfg.strict_sessions = false;
        cfg.load_in_answers = false;
        cfg.seed = i as u64;
        cfg.tls = tls.map(|p| p.servers.acceptor());
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

/// The relays compared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Relay {
    Agent,
    /// The same agent with every connection TLS.
    AgentTls,
    /// A second `dra` binary (`--dra-b`): another build, for an A/B comparison.
    AgentB,
    FreeDiameter,
    Otp,
}

impl Relay {
    const ALL: [Relay; 4] = [
        Relay::Agent,
        Relay::AgentTls,
        Relay::FreeDiameter,
        Relay::Otp,
    ];

    fn name(self) -> &'static str {
        match self {
            Relay::Agent => relay::AGENT,
            Relay::AgentTls => relay::AGENT_TLS,
            Relay::AgentB => relay::AGENT_B,
            Relay::FreeDiameter => relay::FREEDIAMETER,
            Relay::Otp => relay::OTP,
        }
    }

    fn port(self) -> u16 {
        match self {
            Relay::Agent | Relay::AgentB => AGENT_PORT,
            Relay::AgentTls => AGENT_TLS_PORT,
            Relay::FreeDiameter => FD_PORT,
            Relay::Otp => OTP_PORT,
        }
    }
}

impl FromStr for Relay {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Relay> {
        match s {
            "agent" => Ok(Relay::Agent),
            "agent-tls" => Ok(Relay::AgentTls),
            "freediameter" => Ok(Relay::FreeDiameter),
            "otp" => Ok(Relay::Otp),
            _ => bail!(
                "--only: agent, agent-tls, freediameter, otp or all (comma-separated), not {s:?}"
            ),
        }
    }
}

/// What one relay achieved in one round.
struct RelayResult {
    relay: Relay,
    round: usize,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    answered: u64,
    non_2001: u64,
    /// The relay's process-tree CPU seconds over the load (warm-up included).
    cpu_s: f64,
    /// CCRs the servers answered over the load (warm-up included).
    server_answered: u64,
}

impl RelayResult {
    fn cpu_us_per_request(&self) -> Option<f64> {
        (self.server_answered > 0).then(|| 1e6 * self.cpu_s / self.server_answered as f64)
    }
}

/// The closed-loop clients against `relay` (`client{n}.test.example`, `window` Gx
/// requests in flight each); the relay's CPU (process `pid` and its children) is read
/// around the load.
async fn load(
    addr: SocketAddr,
    args: &Args,
    relay: Relay,
    round: usize,
    pid: u32,
    tls: Option<&Pki>,
) -> Result<RelayResult> {
    let mut cfg = ClosedConfig::new(addr, args.clients, args.window);
    cfg.tls = tls.map(|p| p.clients.connector(AGENT_HOST).expect("a DNS name"));
    cfg.origin_host_pattern = format!("client{{n}}.{REALM}");
    cfg.origin_realm = REALM.to_owned();
    cfg.destination_realm = SERVER_REALM.to_owned();
    cfg.warmup = Duration::from_secs(args.warmup);
    cfg.measure = Duration::from_secs(args.seconds);
    let name = relay.name();
    let cpu0 = tree_cpu_s(pid).with_context(|| format!("{name}: CPU before the load"))?;
    let r = closed::run(cfg)
        .await
        .with_context(|| format!("{name}: clients"))?;
    let cpu_s = tree_cpu_s(pid).with_context(|| format!("{name}: CPU after the load"))? - cpu0;
    if r.answered_with(result_code::SUCCESS) == 0 {
        bail!("{name}: no request answered 2001");
    }
    Ok(RelayResult {
        relay,
        round,
        rps: r.requests_per_s(),
        p50_ms: r.latency_ms(0.50),
        p99_ms: r.latency_ms(0.99),
        answered: r.answered_total(),
        non_2001: r.answered_total() - r.answered_with(result_code::SUCCESS),
        cpu_s,
        server_answered: 0,
    })
}

/// CPU seconds (user + system) of process `pid` and all its descendants, from /proc.
/// The relay itself must be there and every stat read must parse: a CPU time that cannot
/// be read is an error, never a zero. A process that ends between the listing and the
/// read of its stat is passed over (it is no longer part of the tree).
fn tree_cpu_s(pid: u32) -> Result<f64> {
    // (pid, ppid, utime + stime in clock ticks) of every process.
    let mut procs = Vec::new();
    for e in std::fs::read_dir("/proc").context("list /proc")?.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        procs.push((
            p,
            stat_fields(&stat).with_context(|| format!("/proc/{p}/stat"))?,
        ));
    }
    if !procs.iter().any(|p| p.0 == pid) {
        bail!("the relay (pid {pid}) is gone: no CPU time to read");
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(procs.iter().filter(|p| p.1.0 == parent).map(|p| p.0));
        i += 1;
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks: u64 = procs
        .iter()
        .filter(|p| tree.contains(&p.0))
        .map(|p| p.1.1)
        .sum();
    Ok(ticks as f64 / hz)
}

/// (ppid, utime + stime in clock ticks) of a `/proc/PID/stat` line.
fn stat_fields(stat: &str) -> Result<(u32, u64)> {
    // Fields after the command name (which may hold spaces): state is field 3, ppid
    // field 4, utime field 14, stime field 15.
    let (_, rest) = stat.rsplit_once(')').context("no command name")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize, what: &str| -> Result<u64> {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {what}"))
    };
    Ok((
        u32::try_from(num(1, "ppid")?)?,
        num(11, "utime")? + num(12, "stime")?,
    ))
}

// ---------------------------------------------------------------- TLS

/// The TLS relay's certificates, one CA for all: the agent's, one naming every client,
/// one naming every server (made at start; no key is kept).
struct Pki {
    _ca: dra_tools::pki::TestCa,
    agent: dra_tools::pki::TlsFiles,
    clients: dra::transport::tls::Credentials,
    servers: dra::transport::tls::Credentials,
}

impl Pki {
    fn new(args: &Args) -> Result<Pki> {
        let ca = dra_tools::pki::TestCa::new("bench")?;
        let agent = ca.issue("agent", &[AGENT_HOST])?;
        let load = |f: &dra_tools::pki::TlsFiles| {
            dra_tools::loadgen::tls_credentials(&f.cert, &f.key, &f.ca)
        };
        let client_names: Vec<String> = (1..=args.clients)
            .map(|i| format!("client{i}.{REALM}"))
            .collect();
        let server_names: Vec<String> = (1..=args.servers)
            .map(|i| format!("srv{i}.{SERVER_REALM}"))
            .collect();
        let clients = load(&ca.issue("clients", &names(&client_names))?)?;
        let servers = load(&ca.issue("servers", &names(&server_names))?)?;
        Ok(Pki {
            _ca: ca,
            agent,
            clients,
            servers,
        })
    }
}

fn names(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------- the agent

/// The agent's config: plain TCP, or (`tls`) TLS on every connection.
fn agent_toml(args: &Args, servers: &[ServerHandle], tls: Option<&Pki>) -> String {
    let (port, listener_tls, peer_tls, server_tls) = match tls {
        None => (AGENT_PORT, String::new(), String::new(), String::new()),
        Some(p) => (
            AGENT_TLS_PORT,
            format!("tls = {}\n", p.agent.toml()),
            "tls = {}\n".to_owned(),
            format!("tls = {}\n", p.agent.toml()),
        ),
    };
    let mut t = format!(
        "[global]\norigin_host = \"{AGENT_HOST}\"\norigin_realm = \"{REALM}\"\n\
         diameter_ports = [{port}]\n\n\
         [[listener]]\naddress = \"{RELAY_IP}:{port}\"\ntransport = \"tcp\"\n{listener_tls}\n"
    );
    for i in 1..=args.clients {
        t.push_str(&format!(
            "[[peer]]\nname = \"client{i}\"\norigin_host = \"client{i}.{REALM}\"\n\
             realm = \"{REALM}\"\naddresses = []\nrole = \"client\"\n{peer_tls}\n"
        ));
    }
    for (i, s) in servers.iter().enumerate() {
        t.push_str(&format!(
            "[[peer]]\nname = \"srv{}\"\norigin_host = \"{}\"\nrealm = \"{SERVER_REALM}\"\n\
             addresses = []\nrole = \"server\"\ngroup = \"pcrf\"\nconnect = \"{}\"\n\
             {server_tls}\n",
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

/// A relay process in the relay namespace: SIGTERM then SIGKILL on drop.
struct RelayProc {
    child: Child,
}

impl RelayProc {
    fn spawn(ns: &Netns, cmd: &mut Command, log: &Path, what: &str) -> Result<RelayProc> {
        let out = File::create(log)?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = ns.spawn(cmd).with_context(|| format!("spawn {what}"))?;
        Ok(RelayProc { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dra run` with the bench config (no fast path: the userspace relay).
fn start_agent(ns: &Netns, dra: &Path, dir: &Path, text: &str) -> Result<RelayProc> {
    let conf = dir.join("dra-bench.toml");
    std::fs::write(&conf, text)?;
    let mut cmd = Command::new(dra);
    cmd.arg("run")
        .arg("--config")
        .arg(&conf)
        .env("RUST_LOG", "warn");
    RelayProc::spawn(ns, &mut cmd, &dir.join("dra.log"), "dra run")
}

// ---------------------------------------------------------------- Erlang/OTP

/// Compiles the OTP relay into `dir` (erlc from `cargo xtask setup`: erlang-base).
fn otp_compile(dir: &Path) -> Result<()> {
    let src = dir.join("dra_bench_relay.erl");
    std::fs::write(&src, OTP_RELAY_ERL)?;
    let out = Command::new("erlc")
        .arg("-o")
        .arg(dir)
        .arg(&src)
        .output()
        .context("spawn erlc (packages erlang-base, erlang-diameter; `cargo xtask setup`)")?;
    if !out.status.success() {
        bail!(
            "erlc: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn start_otp(ns: &Netns, dir: &Path, servers: &[ServerHandle]) -> Result<RelayProc> {
    let mut cmd = Command::new("erl");
    cmd.args(["-noshell", "-noinput", "-pa"])
        .arg(dir)
        .args(["-run", "dra_bench_relay", "start", RELAY_IP])
        .arg(OTP_PORT.to_string())
        .args([OTP_HOST, REALM])
        .args(servers.iter().map(|s| s.local_addr().to_string()));
    RelayProc::spawn(ns, &mut cmd, &dir.join("otp.log"), "erl")
}

// ---------------------------------------------------------------- freeDiameter

/// The freeDiameter relay config (docs/bench.md): plain TCP on [`RELAY_IP`], relay
/// enabled (default), `rt_default` sending realm `pcrf.test.example` to the servers,
/// the DCCA dictionaries, no accounting or debug extensions; clients admitted without
/// TLS by `acl_wl` (ALLOW_IPSEC).
fn fd_conf(dir: &Path, args: &Args, servers: &[ServerHandle]) -> Result<PathBuf> {
    let (crt, key) =
        self_signed_cert(dir, "fd", FD_HOST).context("openssl (freeDiameter certificate)")?;
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

fn start_fd(ns: &Netns, conf: &Path, log: &Path) -> Result<RelayProc> {
    let mut cmd = Command::new("freeDiameterd");
    cmd.arg("-c").arg(conf);
    RelayProc::spawn(
        ns,
        &mut cmd,
        log,
        "freeDiameterd (package freediameterd; `cargo xtask setup`)",
    )
}

// ---------------------------------------------------------------- main

fn main() -> Result<()> {
    let args = Args::parse();
    if args.clients == 0
        || args.window == 0
        || args.servers == 0
        || args.seconds == 0
        || args.rounds == 0
    {
        bail!("clients, window, servers, seconds and rounds must be positive");
    }
    let mut relays: Vec<Relay> = if args.only == "all" {
        Relay::ALL.to_vec()
    } else {
        args.only
            .split(',')
            .map(|r| r.trim().parse())
            .collect::<Result<_>>()?
    };
    if let Some(b) = &args.dra_b {
        if !b.is_file() {
            bail!("--dra-b {}: no such file", b.display());
        }
        let at = relays
            .iter()
            .position(|r| *r == Relay::Agent)
            .map_or(0, |i| i + 1);
        relays.insert(at, Relay::AgentB);
    }
    let dra = match &args.dra {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("dra-bench has no directory")?
            .join("dra"),
    };
    if relays
        .iter()
        .any(|r| matches!(r, Relay::Agent | Relay::AgentTls))
        && !dra.is_file()
    {
        bail!(
            "{}: no dra binary (build it: cargo build --release -p dra-userspace, or --dra)",
            dra.display()
        );
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
    if relays.contains(&Relay::Otp) {
        otp_compile(&dir.0)?;
    }
    // This (main) thread runs the simulators in the sim namespace.
    sim_ns.enter()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let pki = Pki::new(&args)?;
    let results = rt.block_on(async {
        let mut results = Vec::new();
        for round in 1..=args.rounds {
            for &relay in &relays {
                let bin = match (relay, &args.dra_b) {
                    (Relay::AgentB, Some(b)) => b.as_path(),
                    _ => dra.as_path(),
                };
                results.push(run_one(&args, relay, round, &relay_ns, &dir.0, bin, &pki).await?);
            }
        }
        anyhow::Ok(results)
    })?;
    report(&args, &dra, &relays, &results)
}

/// One relay, one round: fresh servers, the relay process, the load, then both stopped.
async fn run_one(
    args: &Args,
    relay: Relay,
    round: usize,
    ns: &Netns,
    dir: &Path,
    dra: &Path,
    pki: &Pki,
) -> Result<RelayResult> {
    let tls = (relay == Relay::AgentTls).then_some(pki);
    let servers = start_servers(args, tls).await?;
    let (proc, log) = match relay {
        Relay::Agent | Relay::AgentB | Relay::AgentTls => (
            start_agent(ns, dra, dir, &agent_toml(args, &servers, tls))?,
            dir.join("dra.log"),
        ),
        Relay::FreeDiameter => {
            let conf = fd_conf(dir, args, &servers)?;
            let log = dir.join("fd.log");
            (start_fd(ns, &conf, &log)?, log)
        }
        Relay::Otp => (start_otp(ns, dir, &servers)?, dir.join("otp.log")),
    };
    let name = relay.name();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    if let Err(e) = wait_servers(&servers, name).await {
        bail!("{e}\n{}", log_text());
    }
    let addr: SocketAddr = format!("{RELAY_IP}:{}", relay.port()).parse()?;
    eprintln!(
        "round {round}, {name}: {} clients × {} in flight …",
        args.clients, args.window
    );
    let r = load(addr, args, relay, round, proc.pid(), tls).await;
    drop(proc);
    let answered = stop_servers(servers).await;
    match r {
        Ok(mut r) => {
            r.server_answered = answered;
            eprintln!(
                "round {round}, {name}: {:.0} requests/s, p99 {:.3} ms, {} µs CPU per request",
                r.rps,
                r.p99_ms,
                r.cpu_us_per_request()
                    .map_or("-".into(), |c| format!("{c:.1}"))
            );
            Ok(r)
        }
        Err(e) => bail!("{e:#}\n{}", log_text()),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median, min and max of `f` over `relay`'s rounds; `None` when a round has no figure.
fn stats(
    results: &[RelayResult],
    relay: Relay,
    f: impl Fn(&RelayResult) -> Option<f64>,
) -> Option<Spread> {
    let mut v: Vec<f64> = results
        .iter()
        .filter(|r| r.relay == relay)
        .map(f)
        .collect::<Option<_>>()?;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Spread {
        median: median(&mut v),
        min,
        max,
    })
}

/// Median, min and max of a figure every round has.
fn spread(results: &[RelayResult], relay: Relay, f: impl Fn(&RelayResult) -> f64) -> Spread {
    stats(results, relay, |r| Some(f(r))).expect("a figure of every round")
}

/// The TLS row: (requests/s TLS ÷ plain, CPU per request TLS ÷ plain), medians of the
/// rounds; `None` when either relay did not run. A CPU figure that could not be read
/// is an error, not a zero.
fn tls_ratios(results: &[RelayResult], relays: &[Relay]) -> Result<Option<(f64, f64)>> {
    if !(relays.contains(&Relay::Agent) && relays.contains(&Relay::AgentTls)) {
        return Ok(None);
    }
    let rps = |r| spread(results, r, |x| x.rps).median;
    let cpu = |r: Relay| -> Result<f64> {
        let mut v = Vec::new();
        for x in results.iter().filter(|x| x.relay == r) {
            v.push(x.cpu_us_per_request().with_context(|| {
                format!(
                    "{} round {}: no CPU per request (no CCR answered)",
                    r.name(),
                    x.round
                )
            })?);
        }
        Ok(median(&mut v))
    };
    Ok(Some((
        rps(Relay::AgentTls) / rps(Relay::Agent),
        cpu(Relay::AgentTls)? / cpu(Relay::Agent)?,
    )))
}

fn report(args: &Args, dra: &Path, relays: &[Relay], results: &[RelayResult]) -> Result<()> {
    let in_flight = args.clients * args.window;
    println!(
        "relay benchmark: {} clients × {} in flight = {in_flight}, {} servers answering at \
         once, {} s measured after {} s warm-up, {} rounds (relays in turn)",
        args.clients, args.window, args.servers, args.seconds, args.warmup, args.rounds
    );
    println!(
        "{:<20} {:>5} {:>12} {:>9} {:>9} {:>12} {:>9} {:>10}",
        "relay", "round", "requests/s", "p50 ms", "p99 ms", "answered", "non-2001", "µs CPU/req"
    );
    for r in results {
        println!(
            "{:<20} {:>5} {:>12.0} {:>9.3} {:>9.3} {:>12} {:>9} {:>10}",
            r.relay.name(),
            r.round,
            r.rps,
            r.p50_ms,
            r.p99_ms,
            r.answered,
            r.non_2001,
            r.cpu_us_per_request()
                .map_or("-".into(), |c| format!("{c:.1}"))
        );
    }
    println!("median (min-max) over the rounds:");
    let mut summary = Vec::new();
    for &relay in relays {
        let rps = spread(results, relay, |r| r.rps);
        let p99 = spread(results, relay, |r| r.p99_ms);
        let cpu = stats(results, relay, RelayResult::cpu_us_per_request);
        println!(
            "{:<20} {:>9.0} req/s ({:.0}-{:.0}), p99 {:.3} ms ({:.3}-{:.3}), {} µs CPU/req",
            relay.name(),
            rps.median,
            rps.min,
            rps.max,
            p99.median,
            p99.min,
            p99.max,
            cpu.map_or("-".into(), |c| format!(
                "{:.1} ({:.1}-{:.1})",
                c.median, c.min, c.max
            )),
        );
        summary.push(RelaySummary {
            relay: relay.name().to_owned(),
            requests_per_s: rps,
            p99_ms: p99,
            cpu_us_per_request: cpu,
        });
    }
    let median_rps = |relay| {
        relays
            .contains(&relay)
            .then(|| spread(results, relay, |r| r.rps).median)
    };
    let ratio = |reference| {
        median_rps(Relay::Agent)
            .zip(median_rps(reference))
            .map(|(a, f)| a / f)
    };
    let ratio_fd = ratio(Relay::FreeDiameter);
    let ratio_otp = ratio(Relay::Otp);
    let ratio_b = ratio(Relay::AgentB);
    let met = ratio_fd.map(|x| x >= GOAL_MIN_RATIO);
    if let Some(x) = ratio_fd {
        println!(
            "P2 dra run / freeDiameter (medians): {x:.2}× (goal ≥ {GOAL_MIN_RATIO}×): {}",
            if x >= GOAL_MIN_RATIO { "met" } else { "MISSED" }
        );
    }
    if let Some(x) = ratio_otp {
        println!("dra run / Erlang/OTP diameter (medians): {x:.2}× (reference, no goal)");
    }
    if let Some(x) = ratio_b {
        println!("dra run / dra run (B) (medians): {x:.3}× (A/B, no goal)");
    }
    let tls = tls_ratios(results, relays)?;
    if let Some((rps, cpu)) = tls {
        println!(
            "TLS: dra run (TLS) / dra run (medians): {rps:.2}× requests/s (goal ≥ \
             {GOAL_MIN_RATIO_TLS_TO_PLAIN}×): {}; CPU per request {cpu:.2}×",
            if rps >= GOAL_MIN_RATIO_TLS_TO_PLAIN {
                "met"
            } else {
                "MISSED"
            }
        );
    }
    let round = |x: f64, to: f64| (x * to).round() / to;
    let doc = RelayReport {
        in_flight: in_flight as u64,
        clients: args.clients as u64,
        window: args.window as u64,
        servers: args.servers as u64,
        seconds: args.seconds,
        warmup_seconds: args.warmup,
        rounds: args.rounds as u64,
        agent: "dra run (its own process, current-thread runtime, no fast path)".into(),
        dra: dra.display().to_string(),
        dra_b: args.dra_b.as_ref().map(|b| b.display().to_string()),
        ratio_agent_to_agent_b: ratio_b.map(|x| round(x, 1000.0)),
        cpus: std::thread::available_parallelism()
            .context("the CPUs this bench may use")?
            .get() as u64,
        results: results
            .iter()
            .map(|r| RoundResult {
                relay: r.relay.name().to_owned(),
                round: r.round as u64,
                requests_per_s: round(r.rps, 10.0),
                p50_ms: r.p50_ms,
                p99_ms: r.p99_ms,
                answered: r.answered,
                non_2001: r.non_2001,
                cpu_s: r.cpu_s,
                server_answered: r.server_answered,
                cpu_us_per_request: r.cpu_us_per_request(),
            })
            .collect(),
        summary,
        ratio_agent_to_freediameter: ratio_fd.map(|x| round(x, 100.0)),
        ratio_agent_to_otp: ratio_otp.map(|x| round(x, 100.0)),
        goal_min_ratio: GOAL_MIN_RATIO,
        met,
        ratio_tls_to_plain: tls.map(|t| round(t.0, 1000.0)),
        ratio_tls_to_plain_cpu_per_request: tls.map(|t| round(t.1, 1000.0)),
        goal_min_ratio_tls_to_plain: GOAL_MIN_RATIO_TLS_TO_PLAIN,
        met_tls: tls.map(|t| t.0 >= GOAL_MIN_RATIO_TLS_TO_PLAIN),
    };
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
    writeln!(f, "{}", serde_json::to_string(&doc)?)?;
    println!("wrote {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_ppid_and_cpu_ticks_or_an_error_naming_what_is_missing() {
        let line = "4242 (erl beam (smp)) S 4200 4242 4200 0 -1 4194560 900 0 0 0 \
                    150 25 0 0 20 0 30 0 12345 1000000 500";
        assert_eq!(stat_fields(line).unwrap(), (4200, 175));
        let cut = "4242 (dra) S 4200 4242 4200 0 -1 4194560 900 0 0 0";
        let e = format!("{:#}", stat_fields(cut).unwrap_err());
        assert_eq!(e, "no utime");
        assert!(stat_fields("4242 dra S").is_err(), "no command name");
        let own = tree_cpu_s(std::process::id()).unwrap();
        assert!(own >= 0.0);
        let gone = format!("{:#}", tree_cpu_s(u32::MAX).unwrap_err());
        assert!(gone.contains("is gone"), "{gone}");
    }
}
