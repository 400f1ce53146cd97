//! Network namespaces for tests. Every namespace a test creates is deleted when its
//! guard drops, also when the test panics.

use std::{
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context, Result, bail};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique short name: prefix + pid + sequence (interface names are ≤ 15 bytes).
pub fn unique(prefix: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id() % 100_000)
}

/// Runs a command, failing with its stderr.
pub fn sh(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("spawn {args:?}"))?;
    if !out.status.success() {
        bail!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
    owned: bool,
}

impl Netns {
    pub fn new(prefix: &str) -> Result<Netns> {
        let name = unique(prefix);
        sh(&["ip", "netns", "add", &name])?;
        let ns = Netns { name, owned: true };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on a namespace someone else owns (not deleted on drop).
    pub fn attach_existing(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
            owned: false,
        }
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// Runs `f` with this thread inside the namespace, then returns to the original.
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        use std::os::fd::AsRawFd;
        let orig = std::fs::File::open("/proc/thread-self/ns/net").context("open own netns")?;
        let target =
            std::fs::File::open(format!("/run/netns/{}", self.name)).context("open netns")?;
        // SAFETY: setns on valid fds of network namespaces; affects only this thread.
        if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!(
                "setns into {}: {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        let r = f();
        // SAFETY: as above, returning to the thread's original namespace.
        if unsafe { libc::setns(orig.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            panic!("setns back failed: {}", std::io::Error::last_os_error());
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

/// A veth pair between two namespaces with addresses from 198.18.0.0/15.
pub struct VethPair {
    pub a_if: String,
    pub b_if: String,
}

impl VethPair {
    /// Creates `a_if` in `a` (address `a_addr/cidr`) and `b_if` in `b` (`b_addr/cidr`).
    pub fn new(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str) -> Result<VethPair> {
        let a_if = unique("va");
        let b_if = unique("vb");
        sh(&[
            "ip", "link", "add", &a_if, "netns", &a.name, "type", "veth", "peer", "name", &b_if,
            "netns", &b.name,
        ])?;
        a.exec(&["ip", "addr", "add", a_addr, "dev", &a_if])?;
        b.exec(&["ip", "addr", "add", b_addr, "dev", &b_if])?;
        a.exec(&["ip", "link", "set", &a_if, "up"])?;
        b.exec(&["ip", "link", "set", &b_if, "up"])?;
        Ok(VethPair { a_if, b_if })
    }
}

/// A gateway, the agent and a server, each in a namespace of its own (named after
/// `prefix` with `g`, `d` and `s` appended): gw ⇄ dra on 198.18.`client_net`.0/24
/// (gw .2, dra .1) and dra ⇄ srv on 198.18.`server_net`.0/24 (dra .1, srv .2).
pub struct GwDraSrv {
    pub gw: Netns,
    pub dra: Netns,
    pub srv: Netns,
    /// gw (`a_if`) ⇄ dra (`b_if`: the interface the fast path attaches to).
    pub client: VethPair,
    /// dra (`a_if`: the servers' side) ⇄ srv (`b_if`).
    pub server: VethPair,
}

impl GwDraSrv {
    pub fn new(prefix: &str, client_net: u8, server_net: u8) -> GwDraSrv {
        let gw = Netns::new(&format!("{prefix}g")).unwrap();
        let dra = Netns::new(&format!("{prefix}d")).unwrap();
        let srv = Netns::new(&format!("{prefix}s")).unwrap();
        let net = |n: u8, host: u8| format!("198.18.{n}.{host}/24");
        let client = VethPair::new(&gw, &net(client_net, 2), &dra, &net(client_net, 1)).unwrap();
        let server = VethPair::new(&dra, &net(server_net, 1), &srv, &net(server_net, 2)).unwrap();
        GwDraSrv {
            gw,
            dra,
            srv,
            client,
            server,
        }
    }
}
