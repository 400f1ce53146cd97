//! The flood bench's own small topology (namespaces `fl-*`, so it never meets the
//! `dralab-*` lab of the demo or the storm bench):
//!
//! ```text
//!  fl-gw                          fl-dra                              fl-srv
//!  198.18.1.2 (pgw1)   fl-gw0 ══ fl-cli 198.18.1.1:3868   fl-dsrv ══ fl-srv0 198.18.2.2
//!  198.18.1.3 (pgw2)   (veth)    XDP here  198.18.2.1      (veth)     pcrf1 (dra-loadgen)
//!  flood sender (AF_PACKET on fl-gw0)
//! ```
//!
//! The flood's spoofed sources (198.18.128.0/17) are routed in `fl-dra` through a next
//! hop with a permanent neighbour entry on `fl-cli` whose MAC nobody owns: whatever the
//! DRA's kernel answers them (SYN-ACK, RST) leaves on the wire as it would towards a
//! router, and `fl-gw` discards it at once (not its MAC).
//!
//! The CPUs are split ([`cpus`]): the last one is the DRA host's — the agent, and the
//! receive processing of `fl-cli` (RPS for the stack, the threaded NAPI of the XDP
//! program) — the others are the network's: the flood generator, pgw1's client and the
//! PCRF simulator. On a veth the receive work would otherwise run inline in the
//! sender's thread, on whatever CPU the generator happens to use.

use std::{net::Ipv4Addr, path::Path, time::Duration};

use anyhow::{Context, Result, bail};

use netlab::addr_up;

use crate::{
    agent_run::Site,
    lab::{self, ipn, sh},
};

/// Prefix of every namespace and interface of this bench.
pub const PREFIX: &str = "fl-";
pub const NS_GW: &str = "fl-gw";
pub const NS_DRA: &str = "fl-dra";
pub const NS_SRV: &str = "fl-srv";
/// Sender side of the client veth (in [`NS_GW`]).
pub const GW_IF: &str = "fl-gw0";
/// The DRA's client-facing interface (in [`NS_DRA`]), where XDP attaches.
pub const DRA_IF: &str = "fl-cli";
const DRA_SRV_IF: &str = "fl-dsrv";
const SRV_IF: &str = "fl-srv0";
pub const GW_MAC: [u8; 6] = [0x02, 0, 0, 0xf1, 0, 0x01];
pub const DRA_MAC: [u8; 6] = [0x02, 0, 0, 0xf1, 0, 0x02];
/// Queues of the client veth, each way. With XDP attached, each receive queue of
/// [`DRA_IF`] is a ring of 256 frames drained by its own NAPI; the frames spread over
/// the queues by flow hash, as RSS spreads them over a NIC's rings. Four queues buffer
/// about what the stack's backlog does without XDP (`net.core.netdev_max_backlog`,
/// 1,000), so neither mode has the smaller buffer when a CPU stalls.
pub const QUEUES: usize = 4;
/// The MAC of the next hop towards the spoofed sources: nobody's.
const NOWHERE_MAC: &str = "02:00:00:f1:00:fe";
const NOWHERE_IP: &str = "198.18.1.254";
/// The DRA's listener.
pub const DRA_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
pub const PGW1_IP: &str = "198.18.1.2";
/// pgw2: configured peer with a connection guard, source of the reconnect storm.
pub const PGW2_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 3);
/// The flood's spoofed sources: 198.18.128.0/17, no configured peer.
pub const SPOOF_NET: &str = "198.18.128.0/17";
pub const SPOOF_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 128, 0);
pub const SPOOF_COUNT: u32 = 1 << 15;
/// Where `dra run` pins the fast path in this bench.
pub const PIN_DIR: &str = "/sys/fs/bpf/dra-flood";
/// Logs and the agent's control socket (`[control] socket` of the flood configs).
pub const STATE_DIR: &str = "/run/dra-flood";
/// The simulated PCRF.
pub const PCRF_LISTEN: &str = "198.18.2.2:3868";

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// This bench's namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    lab::namespaces_with(PREFIX)
}

/// Builds the namespaces, veths, addresses and routes (no processes).
pub fn up() -> Result<()> {
    if !namespaces().is_empty() {
        bail!("namespaces {:?} exist already", namespaces());
    }
    std::fs::create_dir_all(STATE_DIR).with_context(|| format!("create {STATE_DIR}"))?;
    for ns in [NS_GW, NS_DRA, NS_SRV] {
        netlab::add_netns(ns)?;
    }
    let q = QUEUES.to_string();
    sh(&[
        "ip",
        "link",
        "add",
        GW_IF,
        "netns",
        NS_GW,
        "address",
        &mac(GW_MAC),
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        DRA_IF,
        "netns",
        NS_DRA,
        "address",
        &mac(DRA_MAC),
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
    ])?;
    addr_up(
        NS_GW,
        GW_IF,
        &[format!("{PGW1_IP}/24"), format!("{PGW2_IP}/24")],
    )?;
    addr_up(NS_DRA, DRA_IF, &["198.18.1.1/24"])?;
    netlab::add_veth(DRA_SRV_IF, NS_DRA, SRV_IF, NS_SRV)?;
    addr_up(NS_DRA, DRA_SRV_IF, &["198.18.2.1/24"])?;
    addr_up(NS_SRV, SRV_IF, &["198.18.2.2/24"])?;
    ipn(
        NS_DRA,
        &[
            "neigh",
            "replace",
            NOWHERE_IP,
            "lladdr",
            NOWHERE_MAC,
            "dev",
            DRA_IF,
            "nud",
            "permanent",
        ],
    )?;
    ipn(
        NS_DRA,
        &["route", "add", SPOOF_NET, "via", NOWHERE_IP, "dev", DRA_IF],
    )?;
    if let Some((_, host)) = cpus() {
        steer_rps(host)?;
    }
    Ok(())
}

/// The CPU split: (the network's CPUs as a mask, the DRA host's CPU), or None on a
/// single-CPU machine (nothing pinned).
pub fn cpus() -> Option<(u64, usize)> {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let n = usize::try_from(n).ok().filter(|&n| (2..=64).contains(&n))?;
    Some(((1u64 << (n - 1)) - 1, n - 1))
}

/// Pins process or thread `pid` (0: the calling thread) to the CPUs of `mask`.
pub fn pin(pid: i32, mask: u64) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in (0..64).filter(|c| mask & (1u64 << c) != 0) {
        // SAFETY: cpu < 64 ≤ CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: a valid cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(pid, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        bail!(
            "sched_setaffinity({pid}, {mask:#x}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// A command whose process runs in `ns`, pinned to the CPUs of `mask` (if any).
pub fn command_pinned(
    ns: &str,
    program: &Path,
    mask: Option<u64>,
) -> Result<std::process::Command> {
    use std::os::unix::process::CommandExt;
    let mut cmd = lab::command_in(ns, program)?;
    if let Some(mask) = mask {
        // SAFETY: sched_setaffinity only, between fork and exec.
        unsafe {
            cmd.pre_exec(move || pin(0, mask).map_err(|e| std::io::Error::other(e.to_string())));
        }
    }
    Ok(cmd)
}

/// Writes `value` to a sysfs file of `ns`'s devices (`ip netns exec` mounts that
/// namespace's sysfs for the one `sh`; nothing else runs there).
fn sysfs_write(ns: &str, path: &str, value: &str) -> Result<()> {
    sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "sh",
        "-c",
        &format!("echo {value} > {path}"),
    ])
    .map(|_| ())
}

/// Receive processing of [`DRA_IF`] by the stack on the DRA host's CPU (RPS, every
/// receive queue).
pub fn steer_rps(host_cpu: usize) -> Result<()> {
    for q in 0..QUEUES {
        sysfs_write(
            NS_DRA,
            &format!("/sys/class/net/{DRA_IF}/queues/rx-{q}/rps_cpus"),
            &format!("{:x}", 1u64 << host_cpu),
        )?;
    }
    Ok(())
}

/// With XDP attached (veth NAPI exists): NAPI of [`DRA_IF`] in kernel threads (one per
/// receive queue), pinned to the DRA host's CPU at SCHED_FIFO 50, so that they preempt
/// the agent as NAPI in softirq context does on a NIC. Returns the threads' pids (their
/// CPU time is the XDP program's receive work, counted with the softirq time).
pub fn threaded_napi(host_cpu: usize) -> Result<Vec<i32>> {
    sysfs_write(NS_DRA, &format!("/sys/class/net/{DRA_IF}/threaded"), "1")?;
    let prefix = format!("napi/{DRA_IF}-");
    let end = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let found: Vec<i32> = std::fs::read_dir("/proc")?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim_end().starts_with(&prefix))
            })
            .collect();
        if found.len() >= QUEUES {
            for &pid in &found {
                pin(pid, 1u64 << host_cpu)?;
                let param = libc::sched_param { sched_priority: 50 };
                // SAFETY: sched_setscheduler with a valid sched_param.
                if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &param) } != 0 {
                    bail!(
                        "SCHED_FIFO for {prefix}* ({pid}): {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
            return Ok(found);
        }
        if std::time::Instant::now() > end {
            bail!(
                "{} NAPI threads {prefix}* after enabling threaded NAPI on {DRA_IF}, \
                 expected {QUEUES}",
                found.len()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Removes everything of this bench: processes left in its namespaces (all started by
/// it), the namespaces, the pins, the state dir. Returns what it removed.
pub fn down() -> Vec<String> {
    let mut removed = Vec::new();
    lab::remove_namespaces(namespaces(), "flood down", &mut removed);
    lab::remove_dir(PIN_DIR, "pinned objects", Some("flood down"), &mut removed);
    lab::remove_dir(STATE_DIR, "state dir", None, &mut removed);
    removed
}

/// This bench's topology as a [`lab::Topology`].
pub static TOPOLOGY: lab::Topology = lab::Topology {
    name: "flood topology",
    down,
    namespaces,
    pin_dirs: &[PIN_DIR],
};

/// Where the agent runs in this topology: its one upstream is the PCRF in [`NS_SRV`].
pub const SITE: Site = Site {
    ns: NS_DRA,
    iface: DRA_IF,
    pin_dir: PIN_DIR,
    upstreams: &["pcrf1"],
    pid_files: None,
};

/// Packet counters of an interface in a namespace: (rx_packets, tx_packets, tx_dropped).
pub fn link_counters(ns: &str, ifname: &str) -> Result<(u64, u64, u64)> {
    let out = ipn(ns, &["-s", "-j", "link", "show", "dev", ifname])?;
    let v: serde_json::Value = serde_json::from_str(&out).context("ip -s -j link")?;
    let s = v
        .get(0)
        .and_then(|l| l.get("stats64"))
        .context("no stats64")?;
    let g = |p: &str| {
        s.pointer(p)
            .and_then(serde_json::Value::as_u64)
            .with_context(|| format!("ip -s -j link show dev {ifname}: no stats64{p}"))
    };
    Ok((g("/rx/packets")?, g("/tx/packets")?, g("/tx/dropped")?))
}
