//! The overload bench's own topology (namespaces `ov-*`, apart from the lab and the other
//! benches):
//!
//! ```text
//!  ov-gw                           ov-dra                              ov-srv
//!  198.18.1.2-5 (pgw1-4) ov-gw0 ══ ov-cli 198.18.1.1:3868  ov-dsrv ══ ov-srv0 198.18.2.2 pcrf1
//!                        (veth)    XDP here 198.18.2.1      (veth)            198.18.2.3 pcrf2
//! ```
//!
//! The agent's CPU is capped by a cgroup-v1 quota ([`CpuCap`]), so that this 2-CPU machine
//! can offer it several times what it can relay.

use std::path::Path;

use anyhow::{Context, Result, bail};
use netlab::addr_up;

use crate::{agent_run::Site, lab};

pub const PREFIX: &str = "ov-";
pub const NS_GW: &str = "ov-gw";
pub const NS_DRA: &str = "ov-dra";
pub const NS_SRV: &str = "ov-srv";
const GW_IF: &str = "ov-gw0";
/// The DRA's client-facing interface, where XDP attaches.
pub const DRA_IF: &str = "ov-cli";
const DRA_SRV_IF: &str = "ov-dsrv";
const SRV_IF: &str = "ov-srv0";
/// The gateways' source addresses, pgw1 … pgw4.
pub const GATEWAYS: [&str; 4] = ["198.18.1.2", "198.18.1.3", "198.18.1.4", "198.18.1.5"];
/// The two PCRFs (group `pcrf`).
pub const SERVERS: [(&str, &str); 2] = [("pcrf1", "198.18.2.2"), ("pcrf2", "198.18.2.3")];
pub const PIN_DIR: &str = "/sys/fs/bpf/dra-overload";
pub const STATE_DIR: &str = "/run/dra-overload";
/// The cgroup (v1, `cpu` controller, under [`netlab::CPU_CGROUPS`]) the agent runs in.
pub const CGROUP: &str = "dra-bench-overload";

/// This bench's namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    lab::namespaces_with(PREFIX)
}

/// Builds the namespaces, veths and addresses (no processes).
pub fn up() -> Result<()> {
    if !namespaces().is_empty() {
        bail!("namespaces {:?} exist already", namespaces());
    }
    std::fs::create_dir_all(STATE_DIR).with_context(|| format!("create {STATE_DIR}"))?;
    for ns in [NS_GW, NS_DRA, NS_SRV] {
        netlab::add_netns(ns)?;
    }
    netlab::add_veth(GW_IF, NS_GW, DRA_IF, NS_DRA)?;
    let gw: Vec<String> = GATEWAYS.iter().map(|a| format!("{a}/24")).collect();
    addr_up(NS_GW, GW_IF, &gw)?;
    addr_up(NS_DRA, DRA_IF, &["198.18.1.1/24"])?;
    netlab::add_veth(DRA_SRV_IF, NS_DRA, SRV_IF, NS_SRV)?;
    addr_up(NS_DRA, DRA_SRV_IF, &["198.18.2.1/24"])?;
    let srv: Vec<String> = SERVERS.iter().map(|(_, a)| format!("{a}/24")).collect();
    addr_up(NS_SRV, SRV_IF, &srv)?;
    Ok(())
}

/// Removes everything of this bench: processes in its namespaces, the namespaces, the
/// pins, the state dir, the cgroup. Returns what it removed.
pub fn down() -> Vec<String> {
    let mut removed = Vec::new();
    lab::remove_namespaces(namespaces(), "overload down", &mut removed);
    lab::remove_dir(
        PIN_DIR,
        "pinned objects",
        Some("overload down"),
        &mut removed,
    );
    lab::remove_dir(STATE_DIR, "state dir", None, &mut removed);
    if Path::new(CGROUP).exists() && std::fs::remove_dir(CGROUP).is_ok() {
        removed.push(format!("cgroup {CGROUP}"));
    }
    removed
}

/// This bench's topology as a [`lab::Topology`].
pub static TOPOLOGY: lab::Topology = lab::Topology {
    name: "overload topology",
    down,
    namespaces,
    pin_dirs: &[PIN_DIR],
};

/// Where the agent runs: its upstreams are the two PCRFs in [`NS_SRV`].
pub const SITE: Site = Site {
    ns: NS_DRA,
    iface: DRA_IF,
    pin_dir: PIN_DIR,
    upstreams: &["pcrf1", "pcrf2"],
    pid_files: None,
};

/// The agent's CPU cap: a cgroup-v1 `cpu` group ([`CGROUP`]) with a CFS quota.
#[derive(Clone, Copy)]
pub struct CpuCap {
    pub period_us: u64,
    pub quota_us: u64,
}

impl CpuCap {
    /// The group, created with this quota (removed when the guard drops).
    pub fn create(&self) -> Result<netlab::CpuCap> {
        netlab::CpuCap::new(CGROUP, self.period_us, self.quota_us)
            .context("the bench caps the agent's CPU in a cgroup")
    }
}
