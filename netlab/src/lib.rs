//! Network-namespace primitives for xtask's labs and the privileged tests (crate
//! `dra-tests`): run a command, `ip -n`, unique short names, namespaces and veth pairs,
//! running code and starting processes inside a namespace. Everything needs root.
//!
//! Entering a namespace means entering its network namespace only (`setns(2)`:
//! [`enter`], [`command_in`]), never `ip netns exec`, which also gives the process a
//! private /sys — and with it a private bpffs, whose pins vanish with the process.
//!
//! The labs keep their namespaces by name (they outlive the xtask process that made
//! them: `lab up`, then `lab down`); a test holds a [`Netns`] guard, which deletes its
//! namespace on drop, also when the test panics.

use std::{
    fs::File,
    os::fd::{AsRawFd, OwnedFd},
    os::unix::process::CommandExt,
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context, Result, bail};

/// Runs `cmd`, failing with its exit status and stderr; its stdout.
pub fn output(cmd: &mut Command) -> Result<String> {
    let line = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd
        .output()
        .with_context(|| format!("could not start {line}"))?;
    if !out.status.success() {
        bail!(
            "{line} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the command `args` ([`output`]).
pub fn sh(args: &[&str]) -> Result<String> {
    output(Command::new(args[0]).args(&args[1..]))
}

/// `ip -n NS ARGS…` (a netlink operation inside NS, no private /sys involved).
pub fn ipn(ns: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["ip", "-n", ns];
    v.extend_from_slice(args);
    sh(&v)
}

/// A unique short name: prefix + pid + sequence (interface names are ≤ 15 bytes).
pub fn unique(prefix: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id() % 100_000)
}

/// Creates namespace `ns` with its loopback up.
pub fn add_netns(ns: &str) -> Result<()> {
    sh(&["ip", "netns", "add", ns])?;
    ipn(ns, &["link", "set", "lo", "up"])?;
    Ok(())
}

/// The namespaces that exist now whose names start with `prefix` (one lab's: the
/// single-host lab's, the HA lab's, the flood bench's).
pub fn namespaces_with(prefix: &str) -> Vec<String> {
    sh(&["ip", "netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// A veth pair: interface `a_if` in namespace `a_ns`, its peer `b_if` in `b_ns` (both
/// down, without addresses).
pub fn add_veth(a_if: &str, a_ns: &str, b_if: &str, b_ns: &str) -> Result<()> {
    sh(&[
        "ip", "link", "add", a_if, "netns", a_ns, "type", "veth", "peer", "name", b_if, "netns",
        b_ns,
    ])?;
    Ok(())
}

/// A bridge `name` in namespace `ns`, up.
pub fn add_bridge(ns: &str, name: &str) -> Result<()> {
    ipn(ns, &["link", "add", name, "type", "bridge"])?;
    ipn(ns, &["link", "set", name, "up"])?;
    Ok(())
}

/// A veth from interface `dev` of namespace `ns` (down, without addresses) to the bridge
/// `bridge` of namespace `bridge_ns`: its end `port` there is a port of the bridge, up.
pub fn add_bridge_port(
    bridge_ns: &str,
    bridge: &str,
    port: &str,
    ns: &str,
    dev: &str,
) -> Result<()> {
    add_veth(port, bridge_ns, dev, ns)?;
    ipn(bridge_ns, &["link", "set", port, "master", bridge, "up"])?;
    Ok(())
}

/// Puts `addrs` (with their prefix length, e.g. `198.18.1.1/24`) on interface `dev` of
/// namespace `ns`, then sets it up. IPv6 addresses are added `nodad`: usable at once.
pub fn addr_up(ns: &str, dev: &str, addrs: &[impl AsRef<str>]) -> Result<()> {
    for a in addrs {
        let a = a.as_ref();
        let mut args = vec!["addr", "add", a, "dev", dev];
        if a.contains(':') {
            args.push("nodad");
        }
        ipn(ns, &args)?;
    }
    ipn(ns, &["link", "set", dev, "up"])?;
    Ok(())
}

/// Opens network namespace `ns` (made with `ip netns add`: `/run/netns/<ns>`).
pub fn open(ns: &str) -> Result<File> {
    File::open(format!("/run/netns/{ns}")).with_context(|| format!("open netns {ns}"))
}

/// Moves the calling thread into the network namespace of `ns` ([`open`]); the threads
/// it creates afterwards start there too.
pub fn enter(ns: &File) -> std::io::Result<()> {
    // SAFETY: setns(2) on an open namespace fd; it affects only the calling thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd` start in network namespace `ns`: the child enters it between fork and
/// exec, and nothing else of it changes (its /sys and bpffs are the machine's).
pub fn command_in<'a>(ns: &str, cmd: &'a mut Command) -> Result<&'a mut Command> {
    let fd: OwnedFd = open(ns)?.into();
    // SAFETY: only setns(2) between fork and exec (async-signal-safe); `fd` moves into
    // the closure, so it stays open until the child has used it.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(cmd)
}

fn setns(ns: &str) -> Result<()> {
    enter(&open(ns)?).with_context(|| format!("setns into {ns}"))
}

/// Runs `f` on a thread that has entered network namespace `ns`.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            setns(ns)?;
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("thread in {ns} panicked"))?
    })
}

/// A network namespace with its loopback up, deleted on drop.
pub struct Netns {
    pub name: String,
    owned: bool,
}

impl Netns {
    /// A new namespace named `prefix` + pid + sequence ([`unique`]).
    pub fn new(prefix: &str) -> Result<Netns> {
        let name = unique(prefix);
        sh(&["ip", "netns", "add", &name])?;
        let ns = Netns { name, owned: true };
        ipn(&ns.name, &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on a namespace someone else owns (not deleted on drop).
    pub fn attach_existing(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
            owned: false,
        }
    }

    /// Runs the command `args` inside the namespace ([`command_in`]); its stdout.
    pub fn exec(&self, args: &[&str]) -> Result<String> {
        output(command_in(
            &self.name,
            Command::new(args[0]).args(&args[1..]),
        )?)
    }

    /// Runs `f` with this thread inside the namespace, then returns to the original.
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let orig = File::open("/proc/thread-self/ns/net").context("open own netns")?;
        setns(&self.name)?;
        let r = f();
        if let Err(e) = enter(&orig) {
            panic!("setns back failed: {e}");
        }
        Ok(r)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A veth pair between two [`Netns`], with uniquely named ends.
pub struct VethPair {
    pub a_if: String,
    pub b_if: String,
}

impl VethPair {
    /// Creates `a_if` in `a` (address `a_addr/cidr`) and `b_if` in `b` (`b_addr/cidr`),
    /// both up.
    pub fn new(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str) -> Result<VethPair> {
        let a_if = unique("va");
        let b_if = unique("vb");
        add_veth(&a_if, &a.name, &b_if, &b.name)?;
        addr_up(&a.name, &a_if, &[a_addr])?;
        addr_up(&b.name, &b_if, &[b_addr])?;
        Ok(VethPair { a_if, b_if })
    }
}

/// The cgroup-v1 `cpu` controller's hierarchy.
pub const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";

/// A cgroup-v1 `cpu` group with a CFS quota: the processes moved into it get at most
/// `quota_us` of CPU time per `period_us` (how the labs overload a process on a small
/// machine). Removed on drop, its processes moved back to the root group first.
pub struct CpuCap {
    dir: std::path::PathBuf,
}

impl CpuCap {
    /// Whether this machine has the controller ([`CPU_CGROUPS`]).
    pub fn available() -> bool {
        std::path::Path::new(CPU_CGROUPS)
            .join("cgroup.procs")
            .exists()
    }

    /// Creates (or takes over) the group `name` under [`CPU_CGROUPS`] with this quota
    /// (the kernel takes 1 ms – 1 s periods, quotas of at least 1 ms).
    pub fn new(name: &str, period_us: u64, quota_us: u64) -> Result<CpuCap> {
        if !CpuCap::available() {
            bail!("no cgroup-v1 cpu controller at {CPU_CGROUPS}");
        }
        let dir = std::path::Path::new(CPU_CGROUPS).join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let cap = CpuCap { dir };
        cap.write("cpu.cfs_period_us", period_us)?;
        cap.write("cpu.cfs_quota_us", quota_us)?;
        Ok(cap)
    }

    /// Moves process `pid`, every thread, into the group.
    pub fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", pid)
    }

    fn write(&self, file: &str, v: impl std::fmt::Display) -> Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, v.to_string())
            .with_context(|| format!("write {v} to {}", path.display()))
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let root = std::path::Path::new(CPU_CGROUPS).join("cgroup.procs");
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(&root, pid);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("netlab: cgroup {} not removed: {e}", self.dir.display());
        }
    }
}
