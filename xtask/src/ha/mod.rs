//! `cargo xtask lab up|down|status --ha`: two DRA hosts sharing a Redis Cluster as their
//! session store (docs/architecture.md §9), and `cargo xtask bench ha` on it
//! ([`mod@bench`]).
//!
//! ```text
//!  draha-gw (bridge draha-gbr)        draha-a  198.19.1.1:3868       draha-core (bridge)
//!   pgw1 198.19.1.2  ── draha-ga ═══ draha-a-cli (XDP)  draha-a-up 198.19.2.1 ══╗
//!   pgw2 198.19.1.3  ── draha-gb ═══ draha-b-cli (XDP)  draha-b-up 198.19.2.11 ═╣
//!                                    draha-b  198.19.1.11:3868                  ║
//!   draha-pcrf1 198.19.2.2 · draha-pcrf2 198.19.2.3 · draha-ocs1 198.19.2.4 ════╣
//!   draha-redis 198.19.2.5: six redis-server, ports 7001-7006 (3 masters + 3 replicas)
//! ```
//!
//! Each DRA host is its own namespace running `dra run` with XDP on its gateway-facing
//! veth and `[session_store] kind = "redis_cluster"`; both gateways (one namespace, one
//! source address each) connect to both DRAs (`dra-loadgen client --secondary`). The
//! PCRFs and the OCS are strict `dra-loadgen server`s: a CCR-U/T of a session they never
//! saw is answered 5002 and counted, so a misroute shows. Every name starts with
//! [`PREFIX`] (not the single-host lab's `dralab-`), addresses are in 198.19.0.0/16;
//! pids and logs are in [`STATE_DIR`], so `lab down --ha` finds everything after a crash.

pub mod bench;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use netlab::{add_bridge, add_bridge_port, add_netns, addr_up};

use crate::agent_run::{Agent, PidFiles, Site};
use crate::lab::{self, Bins, command_in, in_netns, stop_pid};
use crate::metrics::METRICS_ADDR;

/// Prefix of every namespace and interface of the HA lab.
pub const PREFIX: &str = "draha-";
/// Pid files, logs and generated configs.
pub const STATE_DIR: &str = "/run/dra-ha";
/// The gateways' namespace.
pub const NS_GW: &str = "draha-gw";
/// The hub: one bridge joining both DRAs, the servers and Redis.
pub const NS_CORE: &str = "draha-core";
/// The Redis Cluster's namespace.
pub const NS_REDIS: &str = "draha-redis";
/// The Redis Cluster's address and ports (3 masters + 3 replicas).
pub const REDIS_IP: &str = "198.19.2.5";
pub const REDIS_PORTS: [u16; 6] = [7001, 7002, 7003, 7004, 7005, 7006];
/// Redis Cluster node timeout: a master unreachable this long is failed over.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 2000;
/// Watchdog interval of every simulator (RFC 3539 minimum).
pub const TW_S: u64 = 6;

/// One DRA host.
pub struct Dra {
    /// "a" or "b".
    pub name: &'static str,
    /// Where its agent runs: namespace, gateway-facing interface (XDP), pin dir, the
    /// servers it must have open, its pid file.
    pub site: Site,
    pub origin_host: &'static str,
    /// The listener's address on the gateway-facing interface.
    pub client_ip: &'static str,
    /// Server-facing interface and address.
    pub up_if: &'static str,
    pub up_ip: &'static str,
    /// Its end of the gateway bridge / the core bridge.
    pub gw_side: &'static str,
    pub core_side: &'static str,
}

/// The servers every DRA host opens before it counts as ready.
const UPSTREAMS: [&str; 3] = [SERVERS[0].name, SERVERS[1].name, SERVERS[2].name];

pub static DRAS: [Dra; 2] = [
    Dra {
        name: "a",
        site: Site {
            ns: "draha-a",
            iface: "draha-a-cli",
            pin_dir: "/sys/fs/bpf/dra-ha-a",
            upstreams: &UPSTREAMS,
            pid_files: Some(PidFiles {
                dir: STATE_DIR,
                agent: "dra-a",
            }),
        },
        origin_host: "dra-a.lab.example",
        client_ip: "198.19.1.1",
        up_if: "draha-a-up",
        up_ip: "198.19.2.1",
        gw_side: "draha-ga",
        core_side: "draha-ca",
    },
    Dra {
        name: "b",
        site: Site {
            ns: "draha-b",
            iface: "draha-b-cli",
            pin_dir: "/sys/fs/bpf/dra-ha-b",
            upstreams: &UPSTREAMS,
            pid_files: Some(PidFiles {
                dir: STATE_DIR,
                agent: "dra-b",
            }),
        },
        origin_host: "dra-b.lab.example",
        client_ip: "198.19.1.11",
        up_if: "draha-b-up",
        up_ip: "198.19.2.11",
        gw_side: "draha-gb",
        core_side: "draha-cb",
    },
];

/// The DRA listeners' port.
pub const DIAMETER_PORT: u16 = 3868;

/// One gateway: its Origin-Host and source address.
pub struct Gw {
    pub name: &'static str,
    pub origin_host: &'static str,
    pub ip: &'static str,
}

pub const GWS: [Gw; 2] = [
    Gw {
        name: "pgw1",
        origin_host: "pgw1.lab.example",
        ip: "198.19.1.2",
    },
    Gw {
        name: "pgw2",
        origin_host: "pgw2.lab.example",
        ip: "198.19.1.3",
    },
];

/// A simulated PCRF/OCS.
pub struct Server {
    pub name: &'static str,
    pub ip: &'static str,
    pub origin_host: &'static str,
    pub realm: &'static str,
    pub group: &'static str,
}

pub const SERVERS: [Server; 3] = [
    Server {
        name: "pcrf1",
        ip: "198.19.2.2",
        origin_host: "pcrf1.pcrf.lab.example",
        realm: "pcrf.lab.example",
        group: "pcrf",
    },
    Server {
        name: "pcrf2",
        ip: "198.19.2.3",
        origin_host: "pcrf2.pcrf.lab.example",
        realm: "pcrf.lab.example",
        group: "pcrf",
    },
    Server {
        name: "ocs1",
        ip: "198.19.2.4",
        origin_host: "ocs1.ocs.lab.example",
        realm: "ocs.lab.example",
        group: "ocs",
    },
];

/// Where a DRA keeps its session bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Memory,
    RedisCluster,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::RedisCluster => "redis_cluster",
        }
    }
}

fn ns_of(server: &Server) -> String {
    format!("{PREFIX}{}", server.name)
}

/// The HA lab's namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    lab::namespaces_with(PREFIX)
}

fn pid_file(name: &str) -> PathBuf {
    lab::pid_file_in(STATE_DIR, name)
}

/// Where a process of the HA lab writes its output.
pub fn log_file(name: &str) -> PathBuf {
    lab::log_file_in(STATE_DIR, name)
}

/// Starts `cmd` with its output in the log `name`, its pid recorded.
pub fn spawn_logged(name: &str, cmd: &mut Command) -> Result<Child> {
    lab::spawn_logged_in(STATE_DIR, name, cmd)
}

/// Namespaces, bridges, veths and addresses.
fn topology() -> Result<()> {
    let mut all = vec![NS_GW, NS_CORE, NS_REDIS];
    all.extend(DRAS.iter().map(|d| d.site.ns));
    let server_ns: Vec<String> = SERVERS.iter().map(ns_of).collect();
    all.extend(server_ns.iter().map(String::as_str));
    for ns in &all {
        add_netns(ns)?;
    }
    // Gateways: one bridge, both gateway addresses on it; one veth to each DRA.
    add_bridge(NS_GW, "draha-gbr")?;
    let gw_addrs: Vec<String> = GWS.iter().map(|g| format!("{}/24", g.ip)).collect();
    addr_up(NS_GW, "draha-gbr", &gw_addrs)?;
    // The hub of the server side.
    add_bridge(NS_CORE, "draha-cbr")?;
    for d in &DRAS {
        let ns = d.site.ns;
        add_bridge_port(NS_GW, "draha-gbr", d.gw_side, ns, d.site.iface)?;
        addr_up(ns, d.site.iface, &[format!("{}/24", d.client_ip)])?;
        add_bridge_port(NS_CORE, "draha-cbr", d.core_side, ns, d.up_if)?;
        addr_up(ns, d.up_if, &[format!("{}/24", d.up_ip)])?;
    }
    let mut hosts: Vec<(String, &str)> = SERVERS.iter().map(|s| (ns_of(s), s.ip)).collect();
    hosts.push((NS_REDIS.to_owned(), REDIS_IP));
    for (ns, ip) in &hosts {
        let core_side = format!("draha-c-{}", &ns[PREFIX.len()..]);
        add_bridge_port(NS_CORE, "draha-cbr", &core_side, ns, ns)?;
        addr_up(ns, ns, &[format!("{ip}/24")])?;
    }
    Ok(())
}

/// `redis-cli ARGS…` in the Redis namespace; its stdout.
pub fn redis_cli(args: &[&str]) -> Result<String> {
    let mut cli = command_in(NS_REDIS, Path::new("redis-cli"))?;
    netlab::output(cli.args(args)).context("redis-cli (package redis-tools)")
}

/// `redis-cli -h REDIS_IP -p PORT ARGS…`.
pub fn redis_node(port: u16, args: &[&str]) -> Result<String> {
    let p = port.to_string();
    let mut v = vec!["-h", REDIS_IP, "-p", &p];
    v.extend_from_slice(args);
    redis_cli(&v)
}

fn redis_ping(port: u16) -> bool {
    let Ok(addr) = format!("{REDIS_IP}:{port}").parse() else {
        return false;
    };
    in_netns(NS_REDIS, || {
        lab::redis_pings(addr, Duration::from_millis(300))
    })
    .unwrap_or(false)
}

/// The name of the Redis node on `port` (pid file and log).
pub fn redis_name(port: u16) -> String {
    format!("redis-{port}")
}

/// Six redis-server processes in cluster mode, then `redis-cli --cluster create` with
/// one replica per master; waits until every node reports `cluster_state:ok`.
fn start_cluster() -> Result<()> {
    for port in REDIS_PORTS {
        let dir = Path::new(STATE_DIR).join(redis_name(port));
        std::fs::create_dir_all(&dir)?;
        let mut c = command_in(NS_REDIS, Path::new("redis-server"))?;
        c.args(["--port", &port.to_string(), "--bind", REDIS_IP])
            .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args([
                "--cluster-node-timeout",
                &CLUSTER_NODE_TIMEOUT_MS.to_string(),
            ])
            .arg("--dir")
            .arg(&dir);
        spawn_logged(&redis_name(port), &mut c)?;
    }
    let end = Instant::now() + Duration::from_secs(10);
    for port in REDIS_PORTS {
        while !redis_ping(port) {
            if Instant::now() > end {
                bail!(
                    "redis-server on port {port} did not answer; log {}",
                    log_file(&redis_name(port)).display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let nodes: Vec<String> = REDIS_PORTS
        .iter()
        .map(|p| format!("{REDIS_IP}:{p}"))
        .collect();
    let mut args = vec!["--cluster", "create"];
    args.extend(nodes.iter().map(String::as_str));
    args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
    let out = redis_cli(&args)?;
    std::fs::write(log_file("cluster-create"), &out)?;
    wait_cluster_ok(Duration::from_secs(20))
}

/// Waits until every node reports `cluster_state:ok`.
fn wait_cluster_ok(limit: Duration) -> Result<()> {
    let end = Instant::now() + limit;
    loop {
        let ok = REDIS_PORTS.iter().all(|p| {
            redis_node(*p, &["cluster", "info"]).is_ok_and(|s| s.contains("cluster_state:ok"))
        });
        if ok {
            return Ok(());
        }
        if Instant::now() > end {
            bail!("the Redis Cluster did not reach cluster_state:ok");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The session store's seed nodes, as the config lists them.
pub fn cluster_addresses() -> String {
    REDIS_PORTS
        .iter()
        .map(|p| format!("\"{REDIS_IP}:{p}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Strict `dra-loadgen server`s (5002 to an unknown session), exponential 1 ms service.
fn start_servers(bins: &Bins) -> Result<()> {
    for s in &SERVERS {
        let mut c = command_in(&ns_of(s), &bins.loadgen)?;
        c.args([
            "server",
            "--listen",
            &format!("{}:{DIAMETER_PORT}", s.ip),
            "--origin-host",
            s.origin_host,
            "--origin-realm",
            s.realm,
            "--latency",
            "exp:1ms",
            "--tw",
            &TW_S.to_string(),
            // Counters as JSON every second (the bench reads the last line).
            "--stats-every",
            "1",
        ]);
        spawn_logged(s.name, &mut c)?;
    }
    Ok(())
}

/// The config of DRA host `d` with session store `store` (docs/config.md).
pub fn dra_config(d: &Dra, store: Store) -> String {
    let mut t = format!(
        "# Generated by `cargo xtask lab up --ha` / `bench ha`: DRA host {name} of the HA pair.\n\
         [global]\norigin_host = \"{oh}\"\norigin_realm = \"lab.example\"\n\
         diameter_ports = [{DIAMETER_PORT}]\n\n\
         [fast_path]\ninterface = \"{cif}\"\nxdp_mode = \"auto\"\n\n\
         [metrics]\naddress = \"{METRICS_ADDR}\"\n\n\
         [control]\nsocket = \"{STATE_DIR}/dra-{name}.sock\"\n\n\
         [[listener]]\naddress = \"{ip}:{DIAMETER_PORT}\"\ntransport = \"tcp\"\n\n",
        name = d.name,
        oh = d.origin_host,
        cif = d.site.iface,
        ip = d.client_ip,
    );
    for g in &GWS {
        t.push_str(&format!(
            "[[peer]]\nname = \"{}\"\norigin_host = \"{}\"\nrealm = \"lab.example\"\n\
             addresses = [\"{}\"]\nrole = \"client\"\n\n",
            g.name, g.origin_host, g.ip
        ));
    }
    for s in &SERVERS {
        t.push_str(&format!(
            "[[peer]]\nname = \"{}\"\norigin_host = \"{}\"\nrealm = \"{}\"\n\
             addresses = [\"{}\"]\nrole = \"server\"\ngroup = \"{}\"\n\
             connect = \"{}:{DIAMETER_PORT}\"\n\n",
            s.name, s.origin_host, s.realm, s.ip, s.group, s.ip
        ));
    }
    for (group, realm, app) in [
        ("pcrf", "pcrf.lab.example", "gx"),
        ("ocs", "ocs.lab.example", "gy"),
    ] {
        t.push_str(&format!(
            "[[peer_group]]\nname = \"{group}\"\nanswer_timeout = \"2s\"\n\
             selection = \"round_robin\"\n\n\
             [[route]]\nrealm = \"{realm}\"\napplication = \"{app}\"\ngroup = \"{group}\"\n\n"
        ));
    }
    if store == Store::RedisCluster {
        t.push_str(&format!(
            "# Shared with the other DRA host: a session bound here is routed there to the\n\
             # same server (docs/architecture.md §9).\n\
             [session_store]\nkind = \"redis_cluster\"\naddresses = [{}]\n\
             timeout = \"200ms\"\nwrite = \"before_forward\"\non_error = \"local\"\n",
            cluster_addresses()
        ));
    }
    t
}

/// Starts `dra run` on DRA host `d` with session store `store` (network namespace only,
/// so its pins stay in the host's bpffs), its output in the log `log`, and waits until it
/// has opened every server.
pub fn start_dra(bins: &Bins, d: &'static Dra, store: Store, log: &str) -> Result<Agent<'static>> {
    let cfg = Path::new(STATE_DIR).join(format!("dra-{}-{}.toml", d.name, store.name()));
    std::fs::write(&cfg, dra_config(d, store))?;
    let cmd = command_in(d.site.ns, &bins.dra)?;
    d.site
        .start_agent_ready(cmd, &cfg, log_file(log))
        .with_context(|| format!("DRA host {}", d.name))
}

/// The low-rate scenario of the lab's idle gateways (`lab up --ha`).
const IDLE_SCENARIO: &str = "\
name = \"ha-lab-idle\"
destination_realm = \"pcrf.lab.example\"
gy_destination_realm = \"ocs.lab.example\"
request_timeout_ms = 3000
[[phase]]
name = \"idle\"
duration_s = 86400
rates = { gx_ccr_i = 5, gx_ccr_u = 5, gx_ccr_t = 5, gy_ccr_i = 2, gy_ccr_u = 2, gy_ccr_t = 2 }
";

/// `dra-loadgen client` as gateway `g`, connected to both DRAs (A primary).
pub fn gateway_command(bins: &Bins, g: &Gw, scenario: &Path, mode: &str) -> Result<Command> {
    let mut c = command_in(NS_GW, &bins.loadgen)?;
    c.args([
        "client",
        "--peers",
        "1",
        "--origin-host",
        g.origin_host,
        "--bind",
        g.ip,
        "--connect",
        &format!("{}:{DIAMETER_PORT}", DRAS[0].client_ip),
        "--secondary",
        &format!("{}:{DIAMETER_PORT}", DRAS[1].client_ip),
        "--dra-mode",
        mode,
        "--tw",
        &TW_S.to_string(),
        "--quiet",
    ])
    .arg("--scenario")
    .arg(scenario);
    Ok(c)
}

/// Builds the HA lab: topology, Redis Cluster, servers; with `dras` both DRA hosts
/// (Redis Cluster store), given back ready; with `gateways` also two low-rate gateways.
pub fn up(bins: &Bins, dras: bool, gateways: bool) -> Result<Vec<Agent<'static>>> {
    if !namespaces().is_empty() {
        bail!(
            "an HA lab already exists (cargo xtask lab status --ha); `cargo xtask lab down --ha`"
        );
    }
    for b in [&bins.dra, &bins.loadgen] {
        if !b.exists() {
            bail!("{} not found: run `cargo xtask build` first", b.display());
        }
    }
    std::fs::create_dir_all(STATE_DIR).with_context(|| format!("create {STATE_DIR}"))?;
    topology()?;
    start_cluster()?;
    start_servers(bins)?;
    let mut agents = Vec::new();
    if dras {
        for d in &DRAS {
            agents.push(start_dra(bins, d, Store::RedisCluster, d.site.agent_tag())?);
        }
    }
    if gateways {
        let sc = Path::new(STATE_DIR).join("idle.toml");
        std::fs::write(&sc, IDLE_SCENARIO)?;
        for g in &GWS {
            spawn_logged(g.name, &mut gateway_command(bins, g, &sc, "primary")?)?;
        }
    }
    Ok(agents)
}

fn recorded_pids() -> Vec<(String, i32)> {
    lab::recorded_pids_in(STATE_DIR)
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes everything of the HA lab (processes, namespaces, links, pins, state dir);
/// idempotent; returns what it removed.
pub fn down() -> Vec<String> {
    let mut removed = Vec::new();
    // Gateways first (their DPR), then the DRAs, servers and Redis.
    let mut pids = recorded_pids();
    pids.sort_by_key(|(n, _)| !n.starts_with("pgw"));
    for (name, pid) in pids {
        if alive(pid) {
            stop_pid(pid, libc::SIGTERM, Duration::from_secs(3));
            removed.push(format!("process {name} (pid {pid})"));
        }
    }
    lab::remove_namespaces(namespaces(), "lab down --ha", &mut removed);
    lab::remove_links(PREFIX, &mut removed);
    for d in &DRAS {
        lab::remove_dir(
            d.site.pin_dir,
            "pinned objects",
            Some("lab down --ha"),
            &mut removed,
        );
    }
    lab::remove_dir(STATE_DIR, "state dir", None, &mut removed);
    removed
}

/// What of the HA lab exists now.
pub fn status() -> Vec<String> {
    let mut out = Vec::new();
    let nss = namespaces();
    if nss.is_empty() {
        out.push("no HA lab namespaces".to_owned());
    }
    for ns in &nss {
        out.extend(lab::namespace_status(ns));
    }
    for (name, pid) in recorded_pids() {
        let state = if alive(pid) { "running" } else { "gone" };
        out.push(format!(
            "recorded {name}: pid {pid} {state} (log {})",
            log_file(&name).display()
        ));
    }
    if nss.iter().any(|n| n == NS_REDIS)
        && let Ok(nodes) = redis_node(REDIS_PORTS[0], &["cluster", "nodes"])
    {
        out.push("redis cluster nodes:".to_owned());
        for l in nodes.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 3 {
                out.push(format!("    {} {}", f[1], f[2]));
            }
        }
    }
    out
}

/// The HA lab as a [`lab::Topology`]: `bench ha` removes it through its guard.
pub static TOPOLOGY: lab::Topology = lab::Topology {
    name: "HA lab",
    down,
    namespaces,
    pin_dirs: &[DRAS[0].site.pin_dir, DRAS[1].site.pin_dir],
};

/// `cargo xtask lab up|down|status --ha`.
pub fn cmd(args: &[String], bins: &Bins) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("up") => {
            match up(bins, true, true) {
                Ok(agents) => agents.into_iter().for_each(Agent::leave_running),
                Err(e) => {
                    down();
                    return Err(e);
                }
            }
            for l in status() {
                println!("{l}");
            }
            println!(
                "\nHA lab up: dra run on {a} ({ai}:{DIAMETER_PORT}) and {b} \
                 ({bi}:{DIAMETER_PORT}), one Redis Cluster ({REDIS_IP}:7001-7006),\n\
                 pgw1/pgw2 connected to both (A primary). Logs and configs in {STATE_DIR};\n\
                 `cargo xtask lab down --ha` removes it.",
                a = DRAS[0].site.ns,
                ai = DRAS[0].client_ip,
                b = DRAS[1].site.ns,
                bi = DRAS[1].client_ip,
            );
            Ok(())
        }
        Some("down") => {
            lab::print_removed(down());
            Ok(())
        }
        Some("status") => {
            for l in status() {
                println!("{l}");
            }
            Ok(())
        }
        _ => bail!("usage: cargo xtask lab <up|down|status> --ha"),
    }
}

/// The pid of a recorded process of the HA lab.
pub fn recorded_pid(name: &str) -> Option<i32> {
    std::fs::read_to_string(pid_file(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether anything of the single-host lab's or this lab's is in the way.
pub fn preflight() -> Result<()> {
    let ns = namespaces();
    if !ns.is_empty() {
        bail!("an HA lab is up ({ns:?}): `cargo xtask lab down --ha` first");
    }
    Ok(())
}
