//! `cargo xtask lab up|down|status`: the seed topology in network namespaces (`up
//! --monitoring`: with a real Prometheus scraping the agent, [`crate::monitoring`]).
//!
//! ```text
//!  dralab-gw                     dralab-dra                          dralab-pcrf1 198.18.2.2
//!  198.18.1.2 (pgw1)  dralab-gw0 ══ dralab-cli  198.18.1.1:3868      dralab-pcrf2 198.18.2.3
//!  198.18.1.3 (pgw2)  (veth)        XDP here     dralab-br 198.18.2.1 ══ dralab-ocs1  198.18.2.4
//!                                                redis 127.0.0.1:6379, 198.18.2.1:6379
//! ```
//!
//! Both gateways live in one namespace (`dralab-gw`) with two addresses on one veth:
//! the agent tells them apart by source address (`dra-loadgen client --bind`), and the
//! fast path sees both on the one client-facing interface it is attached to. Every name
//! starts with [`PREFIX`], so `lab down` finds everything again after a crash; the pids
//! of the processes `lab up` starts are kept in [`STATE_DIR`].
//!
//! Processes are started in a namespace by entering only its *network* namespace
//! (setns in pre_exec), never with `ip netns exec`: that also gives the process a
//! private /sys, so the pins of `dra run` would vanish with it.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use netlab::addr_up;

/// Prefix of every namespace and interface the lab creates.
pub const PREFIX: &str = "dralab-";
/// Pid files and logs of the lab's processes.
pub const STATE_DIR: &str = "/run/dra-lab";
/// Where `dra run` pins the fast path in the lab.
pub const PIN_DIR: &str = "/sys/fs/bpf/dra-lab";
/// The gateways' namespace (pgw1 198.18.1.2, pgw2 198.18.1.3).
pub const NS_GW: &str = "dralab-gw";
/// The agent's namespace (listener 198.18.1.1:3868, Redis, metrics 127.0.0.1:9100).
pub const NS_DRA: &str = "dralab-dra";
/// The client-facing interface in [`NS_DRA`], where XDP is attached.
pub const DRA_CLIENT_IF: &str = "dralab-cli";
/// The simulated servers' CCR service time in the lab (demo, `lab up`, storm's P4 second
/// row): exponential, mean 2 ms.
pub const SERVER_LATENCY: &str = "exp:2ms";
/// Redis as seen from the server namespaces (it also listens on 127.0.0.1 in NS_DRA).
pub const REDIS_FOR_SERVERS: &str = "198.18.2.1:6379";

/// A simulated upstream server: namespace suffix, address, Origin-Host, realm.
pub struct Server {
    pub name: &'static str,
    pub v4: &'static str,
    pub v6: &'static str,
    pub origin_host: &'static str,
    pub realm: &'static str,
}

/// The upstream servers of config/dra.toml.
pub const SERVERS: [Server; 3] = [
    Server {
        name: "pcrf1",
        v4: "198.18.2.2",
        v6: "2001:db8:2::2",
        origin_host: "pcrf1.pcrf.lab.example",
        realm: "pcrf.lab.example",
    },
    Server {
        name: "pcrf2",
        v4: "198.18.2.3",
        v6: "2001:db8:2::3",
        origin_host: "pcrf2.pcrf.lab.example",
        realm: "pcrf.lab.example",
    },
    Server {
        name: "ocs1",
        v4: "198.18.2.4",
        v6: "2001:db8:2::4",
        origin_host: "ocs1.ocs.lab.example",
        realm: "ocs.lab.example",
    },
];

/// The names of [`SERVERS`]: the upstream peers `dra run` connects to in the lab.
pub const UPSTREAMS: [&str; 3] = [SERVERS[0].name, SERVERS[1].name, SERVERS[2].name];

/// The network-namespace primitives every lab (and the privileged tests) use.
pub use netlab::{in_netns, ipn, namespaces_with, sh};

/// The lab's namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    namespaces_with(PREFIX)
}

/// A command whose process runs inside network namespace `ns`, in its own session
/// (so a Ctrl-C at the terminal reaches only xtask, which stops it in order).
pub fn command_in(ns: &str, program: &Path) -> Result<Command> {
    let mut cmd = Command::new(program);
    cmd.stdin(Stdio::null());
    netlab::command_in(ns, &mut cmd)?;
    // SAFETY: setsid(2) only, between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    Ok(cmd)
}

fn pid_file(name: &str) -> PathBuf {
    pid_file_in(STATE_DIR, name)
}

/// The pid file of process `name` in the state dir `dir`.
pub fn pid_file_in(dir: &str, name: &str) -> PathBuf {
    Path::new(dir).join(format!("{name}.pid"))
}

/// Where a lab process writes its stdout/stderr.
pub fn log_file(name: &str) -> PathBuf {
    log_file_in(STATE_DIR, name)
}

/// Where process `name` of the lab with state dir `dir` writes its stdout/stderr.
pub fn log_file_in(dir: &str, name: &str) -> PathBuf {
    Path::new(dir).join(format!("{name}.log"))
}

/// Starts `cmd` with output to the lab log `name` and records its pid.
pub fn spawn_logged(name: &str, cmd: &mut Command) -> Result<Child> {
    spawn_logged_in(STATE_DIR, name, cmd)
}

/// Starts `cmd` with output to the log `name` in the state dir `dir` and records its pid
/// there.
pub fn spawn_logged_in(dir: &str, name: &str, cmd: &mut Command) -> Result<Child> {
    let log = std::fs::File::create(log_file_in(dir, name))
        .with_context(|| format!("create {}", log_file_in(dir, name).display()))?;
    let child = cmd
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {name} ({:?})", cmd.get_program()))?;
    std::fs::write(pid_file_in(dir, name), format!("{}\n", child.id()))?;
    Ok(child)
}

/// The executable of a running process, if it is still alive.
fn exe_of(pid: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string())
}

/// Sends `sig` to `pid`, then waits up to `grace` for it to exit; SIGKILL after that.
pub fn stop_pid(pid: i32, sig: i32, grace: Duration) {
    // SAFETY: kill(2) on a pid we started (checked by the caller).
    unsafe { libc::kill(pid, sig) };
    let end = Instant::now() + grace;
    while Instant::now() < end {
        // A child of ours stays a zombie until reaped: reap without blocking.
        // SAFETY: waitpid on a specific pid with WNOHANG; ECHILD if it is not our child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        if !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // Gone before we return: a process that still holds its listening socket would make
    // a successor's bind fail (EADDRINUSE).
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        // SAFETY: as above.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        if !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The pid files of the state dir: (name, pid).
fn recorded_pids() -> Vec<(String, i32)> {
    recorded_pids_in(STATE_DIR)
}

/// The pid files of the state dir `dir`: (name, pid), sorted.
pub fn recorded_pids_in(dir: &str) -> Vec<(String, i32)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, i32)> = rd
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let name = p.file_stem()?.to_str()?.to_owned();
            (p.extension()? == "pid").then_some(())?;
            let pid = std::fs::read_to_string(&p).ok()?.trim().parse().ok()?;
            Some((name, pid))
        })
        .collect();
    v.sort();
    v
}

/// The binaries the lab runs.
pub struct Bins {
    pub dra: PathBuf,
    pub loadgen: PathBuf,
}

impl Bins {
    /// The release binaries of this workspace.
    pub fn release(root: &Path) -> Bins {
        Bins {
            dra: root.join("target/release/dra"),
            loadgen: root.join("target/release/dra-loadgen"),
        }
    }

    /// The debug binaries (`cargo xtask test` builds them, not the release ones).
    pub fn debug(root: &Path) -> Bins {
        Bins {
            dra: root.join("target/debug/dra"),
            loadgen: root.join("target/debug/dra-loadgen"),
        }
    }
}

/// Builds the topology and starts Redis and the simulated servers. On error the
/// caller runs [`down`].
pub fn up(bins: &Bins) -> Result<()> {
    if !namespaces().is_empty() {
        bail!(
            "a lab already exists (cargo xtask lab status); remove it with `cargo xtask lab down`"
        );
    }
    if !bins.loadgen.exists() {
        bail!(
            "{} not found: run `cargo xtask build` first",
            bins.loadgen.display()
        );
    }
    std::fs::create_dir_all(STATE_DIR).with_context(|| format!("create {STATE_DIR}"))?;
    let all: Vec<String> = [NS_GW, NS_DRA]
        .into_iter()
        .map(str::to_owned)
        .chain(SERVERS.iter().map(|s| format!("{PREFIX}{}", s.name)))
        .collect();
    for ns in &all {
        netlab::add_netns(ns)?;
    }
    // Gateways ⇄ DRA: one veth, XDP on the DRA side.
    netlab::add_veth("dralab-gw0", NS_GW, DRA_CLIENT_IF, NS_DRA)?;
    let gws = [
        "198.18.1.2/24",
        "198.18.1.3/24",
        "2001:db8:1::2/64",
        "2001:db8:1::3/64",
    ];
    addr_up(NS_GW, "dralab-gw0", &gws)?;
    addr_up(
        NS_DRA,
        DRA_CLIENT_IF,
        &["198.18.1.1/24", "2001:db8:1::1/64"],
    )?;
    // DRA ⇄ servers: a bridge in the DRA namespace, one veth per server.
    netlab::add_bridge(NS_DRA, "dralab-br")?;
    addr_up(NS_DRA, "dralab-br", &["198.18.2.1/24", "2001:db8:2::1/64"])?;
    for s in &SERVERS {
        let ns = format!("{PREFIX}{}", s.name);
        let dra_side = format!("dralab-s-{}", s.name);
        netlab::add_bridge_port(NS_DRA, "dralab-br", &dra_side, &ns, &ns)?;
        addr_up(&ns, &ns, &[format!("{}/24", s.v4), format!("{}/64", s.v6)])?;
    }
    // Redis: the session-binding DB and the DRL CPU source, inside the DRA namespace.
    let mut redis = command_in(NS_DRA, Path::new("redis-server"))?;
    redis.args([
        "--port",
        "6379",
        "--bind",
        "127.0.0.1",
        "198.18.2.1",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
    ]);
    redis.args(["--dir", STATE_DIR]);
    spawn_logged("redis", &mut redis)?;
    wait_redis()?;
    start_servers(bins, SERVER_LATENCY, &|_| Vec::new())
}

/// Starts the simulated PCRFs and OCS (CCR service time `latency`, a `dra-loadgen
/// server` latency such as `exp:2ms` or `fixed:100us`), each writing a Redis key per
/// session; `extra(server)`: more `dra-loadgen server` arguments for that server.
fn start_servers(bins: &Bins, latency: &str, extra: &dyn Fn(&Server) -> Vec<String>) -> Result<()> {
    for s in &SERVERS {
        let ns = format!("{PREFIX}{}", s.name);
        let mut c = command_in(&ns, &bins.loadgen)?;
        c.args([
            "server",
            "--listen",
            &format!("{}:3868", s.v4),
            "--origin-host",
            s.origin_host,
            "--origin-realm",
            s.realm,
        ]);
        c.args([
            "--latency",
            latency,
            "--redis",
            REDIS_FOR_SERVERS,
            "--tw",
            "6",
        ]);
        // Several Redis commands per CCR, as a session DB with several records per
        // session: enough work that the storm visibly loads Redis on a small VM.
        c.args(["--redis-extra-ops", "8"]);
        c.args(extra(s));
        spawn_logged(s.name, &mut c)?;
    }
    for s in &SERVERS {
        wait_listening(s)?;
    }
    Ok(())
}

/// Waits until `s` accepts TCP connections (seen from the DRA's namespace), so that no run
/// starts against a server that is still starting or failed to start.
fn wait_listening(s: &Server) -> Result<()> {
    let addr: std::net::SocketAddr = format!("{}:3868", s.v4).parse()?;
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let ok = in_netns(NS_DRA, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })?;
        if ok {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "simulated server {} does not listen on {addr} after 10 s; log: {}",
        s.name,
        log_file(s.name).display()
    )
}

/// Stops the simulated servers of a lab that is up and starts them again with CCR
/// service time `latency` (no agent may be connected to them: run it between runs).
pub fn restart_servers(bins: &Bins, latency: &str) -> Result<()> {
    restart_servers_with(bins, latency, &|_| Vec::new())
}

/// [`restart_servers`], with more `dra-loadgen server` arguments per server (`extra`,
/// e.g. the DOIC bench's `--doic-capacity` for one of them).
pub fn restart_servers_with(
    bins: &Bins,
    latency: &str,
    extra: &dyn Fn(&Server) -> Vec<String>,
) -> Result<()> {
    for s in &SERVERS {
        if let Ok(pid) = std::fs::read_to_string(pid_file(s.name))
            && let Ok(pid) = pid.trim().parse::<i32>()
            && exe_of(pid).is_some()
        {
            stop_pid(pid, libc::SIGTERM, Duration::from_secs(3));
        }
    }
    start_servers(bins, latency, extra)
}

fn wait_redis() -> Result<()> {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 6379));
        let ok = in_netns(NS_DRA, || redis_pings(addr, Duration::from_secs(1)))?;
        if ok {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "redis-server did not answer in {NS_DRA}; log: {}",
        log_file("redis").display()
    )
}

/// Removes everything of the lab: processes (recorded pids, then anything still
/// running in a lab namespace), namespaces (their veths and XDP go with them), the
/// pinned fast path, the state dir. Idempotent; returns what it removed.
pub fn down() -> Vec<String> {
    let mut removed = Vec::new();
    for (name, pid) in recorded_pids() {
        if exe_of(pid).is_some() {
            stop_pid(pid, libc::SIGTERM, Duration::from_secs(3));
            removed.push(format!("process {name} (pid {pid})"));
        }
    }
    // Anything left in a lab namespace was started for the lab (e.g. after a crash lost
    // the pid files).
    remove_namespaces(namespaces(), "lab down", &mut removed);
    // Links are created inside the namespaces; a half-built `up` may still leave one here.
    remove_links(PREFIX, &mut removed);
    remove_dir(PIN_DIR, "pinned objects", Some("lab down"), &mut removed);
    remove_dir(STATE_DIR, "state dir", None, &mut removed);
    removed
}

/// Stops every process left in each namespace of `nss`, then deletes the namespace (its
/// veths and XDP go with it); says what it removed in `removed`, `who` in errors.
pub fn remove_namespaces(nss: Vec<String>, who: &str, removed: &mut Vec<String>) {
    for ns in nss {
        if let Ok(pids) = sh(&["ip", "netns", "pids", &ns]) {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                stop_pid(pid, libc::SIGTERM, Duration::from_secs(3));
                removed.push(format!("process {pid} in {ns}"));
            }
        }
        match sh(&["ip", "netns", "del", &ns]) {
            Ok(_) => removed.push(format!("namespace {ns}")),
            Err(e) => eprintln!("{who}: {e:#}"),
        }
    }
}

/// Deletes the links of this namespace whose names start with `prefix`.
pub fn remove_links(prefix: &str, removed: &mut Vec<String>) {
    if let Ok(links) = sh(&["ip", "-o", "link", "show"]) {
        for l in links.lines() {
            if let Some(name) = l
                .split(':')
                .nth(1)
                .map(|n| n.trim().split('@').next().unwrap_or("").to_owned())
                && name.starts_with(prefix)
                && sh(&["ip", "link", "del", &name]).is_ok()
            {
                removed.push(format!("link {name}"));
            }
        }
    }
}

/// Removes the directory `dir` (pinned objects or a state dir: `what`) if it exists; a
/// failure is reported as `who`'s, unless `who` is `None`.
pub fn remove_dir(dir: &str, what: &str, who: Option<&str>, removed: &mut Vec<String>) {
    if Path::new(dir).exists() {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => removed.push(format!("{what} {dir}")),
            Err(e) => {
                if let Some(who) = who {
                    eprintln!("{who}: remove {dir}: {e}");
                }
            }
        }
    }
}

/// The addresses and XDP programs of namespace `ns`, as printable lines.
pub fn namespace_status(ns: &str) -> Vec<String> {
    let mut out = vec![format!("namespace {ns}")];
    if let Ok(a) = ipn(ns, &["-br", "addr", "show"]) {
        for l in a.lines().filter(|l| !l.starts_with("lo ")) {
            out.push(format!(
                "    {}",
                l.split_whitespace().collect::<Vec<_>>().join("  ")
            ));
        }
    }
    if let Ok(l) = ipn(ns, &["link", "show"]) {
        for line in l.lines().filter(|l| l.contains("xdp")) {
            out.push(format!("    XDP: {}", line.trim()));
        }
    }
    out
}

/// Prints what `lab down` (or `lab down --ha`) removed.
pub fn print_removed(removed: Vec<String>) {
    if removed.is_empty() {
        println!("nothing to remove");
    }
    for r in removed {
        println!("removed {r}");
    }
}

/// Whether a Redis server answers PING at `addr` (connection timeout `timeout`).
pub fn redis_pings(addr: std::net::SocketAddr, timeout: Duration) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 16];
    s.write_all(b"PING\r\n").is_ok()
        && s.read(&mut buf)
            .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
}

/// What of the lab exists now, as printable lines.
pub fn status() -> Vec<String> {
    let mut out = Vec::new();
    let nss = namespaces();
    if nss.is_empty() {
        out.push("no lab namespaces".to_owned());
    }
    for ns in &nss {
        out.extend(namespace_status(ns));
        if let Ok(p) = sh(&["ip", "netns", "pids", ns]) {
            for pid in p.split_whitespace() {
                let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .unwrap_or_default()
                    .replace('\0', " ");
                out.push(format!("    pid {pid}: {}", cmd.trim()));
            }
        }
    }
    for (name, pid) in recorded_pids() {
        let state = if exe_of(pid).is_some() {
            "running"
        } else {
            "gone"
        };
        let log = log_file(&name);
        let log = if log.exists() {
            format!(" (log {})", log.display())
        } else {
            String::new()
        };
        out.push(format!("recorded {name}: pid {pid} {state}{log}"));
    }
    if Path::new(PIN_DIR).exists() {
        // Status text only: an unreadable pin directory lists as holding no pins.
        let n = std::fs::read_dir(PIN_DIR).map(|r| r.count()).unwrap_or(0);
        out.push(format!("pinned: {PIN_DIR} ({n} objects)"));
    } else {
        out.push(format!("pinned: none ({PIN_DIR} absent)"));
    }
    out
}

/// Says on stderr that `what` was removed, with how many items.
pub fn report_removed(what: &str, removed: &[String]) {
    eprintln!("xtask: {what} removed ({} items)", removed.len());
}

/// A topology of network namespaces that xtask builds and must leave nothing of: the lab,
/// the HA lab (`crate::ha`), the flood bench's (`crate::flood`). Its name in messages, how
/// to remove all of it, and what must be gone afterwards.
pub struct Topology {
    pub name: &'static str,
    /// Removes everything of it (processes, namespaces, links, pins, state); idempotent;
    /// returns what it removed.
    pub down: fn() -> Vec<String>,
    /// Its namespaces that exist now.
    pub namespaces: fn() -> Vec<String>,
    /// Where its agents pin the fast path.
    pub pin_dirs: &'static [&'static str],
}

impl Topology {
    /// Removes the topology when the guard is dropped (also on error, panic or Ctrl-C,
    /// which only raises a flag the runs poll).
    pub fn guard(&'static self) -> Teardown {
        Teardown(self)
    }

    /// Fails when any of its namespaces or pin directories is still there.
    pub fn ensure_removed(&self) -> Result<()> {
        let left_ns = (self.namespaces)();
        let left_pins = self.pin_dirs.iter().any(|d| Path::new(d).exists());
        if !left_ns.is_empty() || left_pins {
            bail!(
                "{} not fully removed: namespaces {left_ns:?}, pins left: {left_pins}",
                self.name
            );
        }
        Ok(())
    }
}

/// Removes its [`Topology`] when dropped ([`Topology::guard`]).
pub struct Teardown(&'static Topology);

impl Drop for Teardown {
    fn drop(&mut self) {
        report_removed(self.0.name, &(self.0.down)());
    }
}

/// The lab of [`up`] (demo, storm, coalesced, DOIC).
pub static TOPOLOGY: Topology = Topology {
    name: "lab",
    down,
    namespaces,
    pin_dirs: &[PIN_DIR],
};

/// Brings the lab up, runs `f` on it, copies the servers' logs into `out` and removes
/// the lab (also on error, panic or Ctrl-C); fails when anything of it is left.
pub fn run_on_lab<T>(bins: &Bins, out: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let result = {
        let _lab = TOPOLOGY.guard();
        eprintln!("xtask: lab up (namespaces dralab-*, Redis, pcrf1/pcrf2/ocs1 simulators)");
        up(bins)?;
        let result = f();
        for s in UPSTREAMS {
            let _ = std::fs::copy(log_file(s), out.join(format!("{s}.log")));
        }
        result
    };
    let result = result?;
    TOPOLOGY.ensure_removed()?;
    Ok(result)
}

/// `cargo xtask lab up [--monitoring]|down|status`.
pub fn cmd(args: &[String], bins: &Bins) -> Result<()> {
    let monitoring = args.iter().any(|a| a == "--monitoring");
    match args.first().map(String::as_str) {
        Some("up") => {
            if !namespaces().is_empty() {
                bail!(
                    "a lab already exists (cargo xtask lab status); remove it with \
                     `cargo xtask lab down`"
                );
            }
            if let Err(e) = up(bins) {
                down();
                return Err(e);
            }
            if monitoring {
                match crate::monitoring::prometheus::Prometheus::start(&crate::workspace_root()) {
                    Ok(p) => {
                        println!(
                            "prometheus: {listen} in {NS_DRA}, scraping the agent's metrics \
                             ({metrics}) every second with packaging/monitoring/'s rules (each \
                             alert's for: in seconds instead of minutes); files in {dir}\n  \
                             e.g. nsenter --net=/run/netns/{NS_DRA} curl -s \
                             http://{listen}/api/v1/alerts",
                            listen = crate::monitoring::prometheus::LISTEN,
                            metrics = crate::metrics::METRICS_ADDR,
                            dir = p.dir.display()
                        );
                        p.leave_running();
                    }
                    Err(e) => {
                        down();
                        return Err(e);
                    }
                }
            }
            for l in status() {
                println!("{l}");
            }
            println!(
                "\nlab up. Start the agent in {NS_DRA} (network namespace only, e.g. \
                 `nsenter --net=/run/netns/{NS_DRA} \\\n  \
                 target/release/dra run --config config/lab/dra-lab.toml \
                 --iface {DRA_CLIENT_IF} --pin-dir {PIN_DIR}`),\n\
                 gateways from {NS_GW} (`dra-loadgen client --bind 198.18.1.2 \
                 --connect 198.18.1.1:3868 …`)."
            );
            Ok(())
        }
        Some("down") => {
            print_removed(down());
            Ok(())
        }
        Some("status") => {
            for l in status() {
                println!("{l}");
            }
            Ok(())
        }
        _ => bail!("usage: cargo xtask lab <up [--monitoring]|down|status>"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DOWNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn fake_down() -> Vec<String> {
        DOWNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        vec!["namespace fake-a".to_owned()]
    }

    fn fake_namespaces() -> Vec<String> {
        vec!["fake-a".to_owned()]
    }

    fn no_namespaces() -> Vec<String> {
        Vec::new()
    }

    static LEFT: Topology = Topology {
        name: "fake topology",
        down: fake_down,
        namespaces: fake_namespaces,
        pin_dirs: &["/nonexistent/xtask-pins"],
    };

    static GONE: Topology = Topology {
        name: "fake topology",
        down: fake_down,
        namespaces: no_namespaces,
        pin_dirs: &["/nonexistent/xtask-pins"],
    };

    /// A topology's guard removes it once, when dropped; what is left afterwards fails
    /// naming the topology and its namespaces.
    #[test]
    fn a_topology_is_removed_when_its_guard_drops_and_leftovers_fail() {
        {
            let _g = LEFT.guard();
            assert_eq!(DOWNS.load(std::sync::atomic::Ordering::SeqCst), 0);
        }
        assert_eq!(DOWNS.load(std::sync::atomic::Ordering::SeqCst), 1);
        let e = format!("{:#}", LEFT.ensure_removed().unwrap_err());
        assert!(e.contains("fake topology") && e.contains("fake-a"), "{e}");
        GONE.ensure_removed().unwrap();
    }

    /// The state-dir helpers every lab shares: a process started with its log and pid
    /// file, found again by its pid file, then the directory removed and reported.
    #[test]
    fn pid_and_log_files_are_found_again_and_removed() {
        let dir = std::env::temp_dir().join(format!("xtask-lab-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hello"]);
        let mut child = spawn_logged_in(d, "greeter", &mut cmd).unwrap();
        assert!(child.wait().unwrap().success());
        let pid = i32::try_from(child.id()).unwrap();
        assert_eq!(recorded_pids_in(d), vec![("greeter".to_owned(), pid)]);
        let log = std::fs::read_to_string(log_file_in(d, "greeter")).unwrap();
        assert_eq!(log, "hello\n");
        let mut removed = Vec::new();
        remove_dir(d, "state dir", Some("test"), &mut removed);
        assert_eq!(removed, vec![format!("state dir {d}")]);
        assert!(!dir.exists());
        // Gone already: nothing to say.
        remove_dir(d, "state dir", Some("test"), &mut removed);
        assert_eq!(removed.len(), 1);
        assert!(recorded_pids_in(d).is_empty());
    }
}
