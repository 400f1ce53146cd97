//! The fast path from userspace: load the embedded eBPF object, attach XDP, pin
//! everything under `/sys/fs/bpf/dra/` so a restarted agent reuses it (program stays
//! attached, bucket state survives), write the plan into the maps, read the stats.

pub mod events;
pub mod kernel;
pub mod overload;
pub mod plan;
pub mod remap;
pub mod verify;

use std::path::{Path, PathBuf};

use aya::{
    Ebpf,
    maps::{Array, HashMap, LpmTrie, Map, MapData, PerCpuArray, lpm_trie::Key},
    programs::{
        Link as _, LinkOrder, SchedClassifier, Xdp, XdpMode,
        links::FdLink,
        tc::{NlOptions, SchedClassifierLink, TcAttachOptions, TcAttachType, TcHandle},
    },
};
use dra_common::{
    maps::{
        BucketConfig, BucketKey, BucketState, ClassCounters, EgressFlow, EgressPeer, FlowKey,
        GlobalConfig, Ipv4Key, Ipv6Key, PeerInfo, SctpAssoc, TcpFlow, names,
    },
    stats::Counter,
};
use ipnet::IpNet;

pub use plan::{Plan, PlanError, PlannedEgress, Slot};

/// How [`Dataplane::attach_egress`] left the TC egress program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EgressAttach {
    /// Through TCX (else a clsact qdisc's netlink filter).
    pub tcx: bool,
    /// An earlier run's attachment, reused.
    pub reused: bool,
}

/// The eBPF object built by build.rs from dra-ebpf.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dra"));

/// Name of the XDP ingress program (the one attached) in the object.
pub const XDP_PROGRAM: &str = "dra_xdp";
/// Protocol programs the ingress program tail-calls, by jump-table index.
pub const XDP_TAIL_PROGRAMS: [(u32, &str); 2] = [(0, "dra_xdp_tcp"), (1, "dra_xdp_sctp")];
/// The jump table map.
pub const JUMP_MAP: &str = "JUMP";
/// Default pin directory.
pub const PIN_DIR: &str = dra_common::maps::PIN_DIR;

/// Name of the TC egress program in the object.
pub const TC_PROGRAM: &str = "dra_tc_egress";

/// Maps the agent writes or reads (all pinned).
const PINNED_MAPS: [&str; 24] = [
    names::PEERS_V4,
    names::PEERS_V6,
    names::CLASS_SLOTS,
    names::BUCKET_CONFIG,
    names::BUCKET_STATE,
    names::SLOT_COUNTERS,
    names::STATS,
    names::GLOBAL_CONFIG,
    names::TCP_FLOWS,
    names::SCTP_ASSOCS,
    JUMP_MAP,
    "PKT_META",
    names::OOB_MARKS,
    names::OVERLOAD,
    names::CLASS_PRIORITY,
    names::OVERLOAD_CPU,
    names::SHED_COUNTS,
    "FLOW_SCRATCH",
    names::EGRESS_PEERS_V4,
    names::EGRESS_PEERS_V6,
    names::EGRESS_CLASS_SLOTS,
    names::EGRESS_FLOWS,
    "EGRESS_SCRATCH",
    // The programs' rare-event log (aya-log): XDP and TC egress write into one ring,
    // which `events::spawn` reads.
    events::LOG_MAP,
];

#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    #[error(
        "the eBPF object is empty: this binary was built with AYA_BUILD_SKIP=1; \
         rebuild without it (cargo xtask build)"
    )]
    NoObject,
    #[error("loading the eBPF object failed")]
    Load(#[source] aya::EbpfError),
    #[error("program {name} not found in the eBPF object")]
    MissingProgram { name: &'static str },
    #[error("map {name} not found in the eBPF object")]
    MissingMap { name: &'static str },
    #[error("map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("program {name}")]
    Program {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("attaching XDP to {iface} ({mode})")]
    Attach {
        iface: String,
        mode: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("attaching TC egress to {iface} ({how})")]
    AttachEgress {
        iface: String,
        how: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error("XDP on {iface} is not a bpf_link (kernel too old for pinning)")]
    Link {
        iface: String,
        #[source]
        source: aya::programs::links::LinkError,
    },
    #[error("pinning {path}")]
    Pin {
        path: PathBuf,
        #[source]
        source: aya::pin::PinError,
    },
    #[error("opening pinned {path}")]
    OpenPinned {
        path: PathBuf,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DataplaneError {
    /// `map_err` of a call on map `name`.
    fn map(name: &'static str) -> impl FnOnce(aya::maps::MapError) -> Self {
        move |source| DataplaneError::Map { name, source }
    }

    /// `map_err` of a call on program `name`.
    fn program(name: &'static str) -> impl FnOnce(aya::programs::ProgramError) -> Self {
        move |source| DataplaneError::Program { name, source }
    }
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) mode, falling back to generic (skb) mode.
    Auto,
    Native,
    Skb,
}

/// Parses the embedded object and creates its maps (programs are not yet loaded).
pub fn open() -> Result<Ebpf, DataplaneError> {
    if EBPF_OBJECT.is_empty() {
        return Err(DataplaneError::NoObject);
    }
    Ebpf::load(EBPF_OBJECT).map_err(DataplaneError::Load)
}

/// Program `name` of `ebpf`, as its type `P`.
fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P, DataplaneError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(DataplaneError::MissingProgram { name })?
        .try_into()
        .map_err(DataplaneError::program(name))
}

fn load_one(ebpf: &mut Ebpf, name: &'static str) -> Result<(), DataplaneError> {
    let prog: &mut Xdp = program_mut(ebpf, name)?;
    prog.load().map_err(DataplaneError::program(name))
}

/// Loads (verifies) the XDP programs into the kernel and fills the jump table the
/// ingress program tail-calls through.
pub fn load_xdp(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    load_one(ebpf, XDP_PROGRAM)?;
    for (_, name) in XDP_TAIL_PROGRAMS {
        load_one(ebpf, name)?;
    }
    let mut fds = Vec::new();
    for (idx, name) in XDP_TAIL_PROGRAMS {
        let prog: &Xdp = ebpf
            .program(name)
            .ok_or(DataplaneError::MissingProgram { name })?
            .try_into()
            .map_err(DataplaneError::program(name))?;
        let fd = prog
            .fd()
            .and_then(|fd| fd.try_clone().map_err(aya::programs::ProgramError::from))
            .map_err(DataplaneError::program(name))?;
        fds.push((idx, fd));
    }
    let mut jump: aya::maps::ProgramArray<_> = ebpf
        .map_mut(JUMP_MAP)
        .ok_or(DataplaneError::MissingMap { name: JUMP_MAP })?
        .try_into()
        .map_err(DataplaneError::map(JUMP_MAP))?;
    for (idx, fd) in &fds {
        jump.set(*idx, fd, 0)
            .map_err(DataplaneError::map(JUMP_MAP))?;
    }
    Ok(())
}

/// Loads (verifies) the TC egress classifier.
pub fn load_tc(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    let prog: &mut SchedClassifier = program_mut(ebpf, TC_PROGRAM)?;
    prog.load().map_err(DataplaneError::program(TC_PROGRAM))
}

/// Pins `link`, of a program attached to `iface`, at `path`: it then outlives this process.
fn pin_link<L>(link: L, iface: &str, path: &Path) -> Result<(), DataplaneError>
where
    FdLink: TryFrom<L, Error = aya::programs::links::LinkError>,
{
    let fd_link = FdLink::try_from(link).map_err(|source| DataplaneError::Link {
        iface: iface.into(),
        source,
    })?;
    fd_link.pin(path).map_err(|source| DataplaneError::Pin {
        path: path.into(),
        source,
    })?;
    Ok(())
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

fn is_bpffs(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs on a NUL-terminated path into a zeroed struct.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC
    }
}

/// Mounts bpffs on /sys/fs/bpf if the pin directory is under it and it is not
/// mounted (some hosts boot without it).
fn ensure_bpffs(pin_dir: &Path) -> Result<(), DataplaneError> {
    let root = Path::new("/sys/fs/bpf");
    if !pin_dir.starts_with(root) || is_bpffs(root) {
        return Ok(());
    }
    let io = |source| DataplaneError::Io {
        path: root.into(),
        source,
    };
    std::fs::create_dir_all(root).map_err(io)?;
    // SAFETY: mount(2) with static NUL-terminated strings.
    let r = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            c"/sys/fs/bpf".as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    Ok(())
}

fn link_pin(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("link_{iface}"))
}

fn egress_link_pin(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("link_egress_{iface}"))
}

/// On a kernel without TCX the TC egress program is attached by a netlink filter on the
/// interface's clsact qdisc, which holds the program after the agent exits: the
/// program is pinned here to say so (a later run reuses it, `dra detach` removes the
/// filter by its priority and handle).
fn egress_prog_pin(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("prog_egress_{iface}"))
}

/// The netlink filter's priority and handle (fixed: a later run or `dra detach` finds
/// the filter by them).
const TC_FILTER_PRIORITY: u16 = 0xd7a;
const TC_FILTER_HANDLE: TcHandle = TcHandle::new(0, 0xd7a);

/// Removes the netlink filter of [`egress_prog_pin`] from `iface`, which must be in this
/// process's network namespace. A filter or an interface that is gone already is fine
/// (an interface's filters go with it).
fn detach_egress_filter(iface: &str) -> Result<(), DataplaneError> {
    let err = |source: std::io::Error| DataplaneError::Io {
        path: PathBuf::from(format!("tc filter on {iface}")),
        source,
    };
    let Ok(link) = SchedClassifierLink::attached(
        iface,
        TcAttachType::Egress,
        TC_FILTER_PRIORITY,
        TC_FILTER_HANDLE,
        None,
    ) else {
        // The interface is gone, and its qdisc and filter with it.
        return Ok(());
    };
    match link.detach() {
        Ok(()) => Ok(()),
        Err(aya::programs::ProgramError::NetlinkError(e))
            if e.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(())
        }
        Err(e) => Err(err(std::io::Error::other(crate::error_chain(&e)))),
    }
}

/// The fast path's maps, from a fresh load or from the pins of an earlier run.
pub struct Maps {
    /// The peers the XDP program knows by source address, and their class slots.
    ingress: PeerMaps<PeerInfo>,
    bucket_config: Array<MapData, BucketConfig>,
    bucket_state: Array<MapData, BucketState>,
    slot_counters: PerCpuArray<MapData, ClassCounters>,
    stats: PerCpuArray<MapData, u64>,
    global: Array<MapData, GlobalConfig>,
    tcp_flows: HashMap<MapData, FlowKey, TcpFlow>,
    sctp_assocs: HashMap<MapData, FlowKey, SctpAssoc>,
    /// The destinations the TC program knows, and their class slots.
    egress: PeerMaps<EgressPeer>,
    egress_flows: HashMap<MapData, FlowKey, EgressFlow>,
}

/// One direction's peers: their prefixes by family and their class slots.
struct PeerMaps<V> {
    v4: LpmTrie<MapData, Ipv4Key, V>,
    v6: LpmTrie<MapData, Ipv6Key, V>,
    class_slots: HashMap<MapData, BucketKey, u32>,
    /// The maps' names: v4, v6, class slots.
    names: [&'static str; 3],
}

impl<V: aya::Pod> PeerMaps<V> {
    fn open(
        get: &mut impl FnMut(&'static str) -> Result<Map, DataplaneError>,
        names: [&'static str; 3],
    ) -> Result<Self, DataplaneError> {
        Ok(PeerMaps {
            v4: typed(get, names[0])?,
            v6: typed(get, names[1])?,
            class_slots: typed(get, names[2])?,
            names,
        })
    }

    /// Writes `prefixes` and `classes`: the new entries first, then the stale ones
    /// removed, so a restart never leaves a window in which a configured peer looks
    /// unknown.
    fn sync(
        &mut self,
        (v4, v6): Prefixes<V>,
        classes: impl Iterator<Item = (BucketKey, u32)>,
    ) -> Result<(), DataplaneError> {
        let [v4_name, v6_name, classes_name] = self.names;
        sync_trie(&mut self.v4, &v4, v4_name)?;
        sync_trie(&mut self.v6, &v6, v6_name)?;
        sync_hash(&mut self.class_slots, classes, classes_name)
    }
}

/// Map `name` from `get`, as the map type `T`.
fn typed<T: TryFrom<Map, Error = aya::maps::MapError>>(
    get: &mut impl FnMut(&'static str) -> Result<Map, DataplaneError>,
    name: &'static str,
) -> Result<T, DataplaneError> {
    get(name)?.try_into().map_err(DataplaneError::map(name))
}

impl Maps {
    fn from_maps(
        mut get: impl FnMut(&'static str) -> Result<Map, DataplaneError>,
    ) -> Result<Maps, DataplaneError> {
        Ok(Maps {
            ingress: PeerMaps::open(
                &mut get,
                [names::PEERS_V4, names::PEERS_V6, names::CLASS_SLOTS],
            )?,
            bucket_config: typed(&mut get, names::BUCKET_CONFIG)?,
            bucket_state: typed(&mut get, names::BUCKET_STATE)?,
            slot_counters: typed(&mut get, names::SLOT_COUNTERS)?,
            stats: typed(&mut get, names::STATS)?,
            global: typed(&mut get, names::GLOBAL_CONFIG)?,
            tcp_flows: typed(&mut get, names::TCP_FLOWS)?,
            sctp_assocs: typed(&mut get, names::SCTP_ASSOCS)?,
            egress: PeerMaps::open(
                &mut get,
                [
                    names::EGRESS_PEERS_V4,
                    names::EGRESS_PEERS_V6,
                    names::EGRESS_CLASS_SLOTS,
                ],
            )?,
            egress_flows: typed(&mut get, names::EGRESS_FLOWS)?,
        })
    }

    /// Takes the maps out of a loaded object (the object keeps the programs).
    pub fn take(ebpf: &mut Ebpf) -> Result<Maps, DataplaneError> {
        Maps::from_maps(|name| {
            ebpf.take_map(name)
                .ok_or(DataplaneError::MissingMap { name })
        })
    }

    /// Opens the maps pinned under `dir`.
    pub fn open_pinned(dir: &Path) -> Result<Maps, DataplaneError> {
        Maps::from_maps(|name| {
            let path = dir.join(name);
            let data = MapData::from_pin(&path).map_err(|source| DataplaneError::OpenPinned {
                path: path.clone(),
                source,
            })?;
            Map::from_map_data(data).map_err(|source| DataplaneError::OpenPinned { path, source })
        })
    }

    /// Writes one bucket slot's config (the kernel keeps its state).
    pub fn write_bucket(&mut self, slot: u32, cfg: BucketConfig) -> Result<(), DataplaneError> {
        self.bucket_config
            .set(slot, cfg, 0)
            .map_err(DataplaneError::map(names::BUCKET_CONFIG))
    }

    /// Writes the whole plan. Bucket *state* is not touched: rates change without
    /// resetting tokens. Entries of peers or classes no longer in the plan are removed.
    pub fn write_plan(&mut self, plan: &Plan) -> Result<(), DataplaneError> {
        for s in &plan.slots {
            self.bucket_config
                .set(s.index, s.bucket_at(None), 0)
                .map_err(DataplaneError::map(names::BUCKET_CONFIG))?;
        }
        // A TLS peer's limits are the agent's limiter's: XDP keeps its guard only.
        let peers = by_family(plan.xdp_peers());
        self.ingress.sync(peers, plan.xdp_class_entries())?;
        self.write_egress(plan)?;
        self.global
            .set(0, plan.global, 0)
            .map_err(DataplaneError::map(names::GLOBAL_CONFIG))?;
        Ok(())
    }

    /// Writes the egress destinations and class slots of the plan (new entries
    /// first, then stale ones removed). Part of [`Maps::write_plan`].
    pub fn write_egress(&mut self, plan: &Plan) -> Result<(), DataplaneError> {
        let peers = by_family(plan.egress_peers.iter().map(|p| (&p.prefixes[..], p.info)));
        self.egress.sync(peers, plan.egress_class_entries())
    }

    /// The egress flows the TC program tracks and their framing state.
    pub fn egress_flows(&self) -> Vec<(FlowKey, EgressFlow)> {
        self.egress_flows.iter().filter_map(Result::ok).collect()
    }

    /// Forgets all egress flow state (flows resynchronise).
    pub fn clear_egress_flows(&mut self) {
        let keys: Vec<FlowKey> = self.egress_flows.keys().filter_map(Result::ok).collect();
        for k in keys {
            let _ = self.egress_flows.remove(&k);
        }
    }

    /// Rewrites one slot's rate (the dynamic controller), keeping its tokens.
    pub fn set_rate(&mut self, slot: &Slot, rate: f64) -> Result<(), DataplaneError> {
        self.bucket_config
            .set(slot.index, slot.bucket_at(Some(rate)), 0)
            .map_err(DataplaneError::map(names::BUCKET_CONFIG))
    }

    /// The bucket config currently in the map for a slot.
    pub fn bucket_config(&self, slot: u32) -> Result<BucketConfig, DataplaneError> {
        self.bucket_config
            .get(&slot, 0)
            .map_err(DataplaneError::map(names::BUCKET_CONFIG))
    }

    /// The kernel's GCRA state of a slot.
    pub fn bucket_state(&self, slot: u32) -> Result<BucketState, DataplaneError> {
        self.bucket_state
            .get(&slot, 0)
            .map_err(DataplaneError::map(names::BUCKET_STATE))
    }

    /// A slot's counters, summed over CPUs.
    pub fn slot_counters(&self, slot: u32) -> Result<ClassCounters, DataplaneError> {
        let v = self
            .slot_counters
            .get(&slot, 0)
            .map_err(DataplaneError::map(names::SLOT_COUNTERS))?;
        let mut sum = ClassCounters::default();
        for c in v.iter() {
            sum.accumulate(c);
        }
        Ok(sum)
    }

    /// Global counters, summed over CPUs.
    pub fn stats(&self) -> Result<Vec<(Counter, u64)>, DataplaneError> {
        let mut out = Vec::with_capacity(Counter::ALL.len());
        for c in Counter::ALL {
            let v = self
                .stats
                .get(&(c as u32), 0)
                .map_err(DataplaneError::map(names::STATS))?;
            out.push((c, v.iter().sum()));
        }
        Ok(out)
    }

    /// Fills one bucket (forgets its history).
    pub fn reset_bucket(&mut self, slot: u32) -> Result<(), DataplaneError> {
        self.bucket_state
            .set(slot, BucketState::default(), 0)
            .map_err(DataplaneError::map(names::BUCKET_STATE))
    }

    /// Fills every bucket (forgets its history): the state an agent starts from.
    pub fn reset_buckets(&mut self) -> Result<(), DataplaneError> {
        for slot in 0..dra_common::maps::MAX_SLOTS {
            self.bucket_state
                .set(slot, BucketState::default(), 0)
                .map_err(DataplaneError::map(names::BUCKET_STATE))?;
        }
        Ok(())
    }

    /// Forgets all TCP flow and SCTP association state (flows resynchronise).
    pub fn clear_flows(&mut self) {
        let keys: Vec<FlowKey> = self.tcp_flows.keys().filter_map(Result::ok).collect();
        for k in keys {
            let _ = self.tcp_flows.remove(&k);
        }
        let keys: Vec<FlowKey> = self.sctp_assocs.keys().filter_map(Result::ok).collect();
        for k in keys {
            let _ = self.sctp_assocs.remove(&k);
        }
    }

    /// The tracked TCP flows and their framing state.
    pub fn tcp_flows(&self) -> Vec<(FlowKey, TcpFlow)> {
        self.tcp_flows.iter().filter_map(Result::ok).collect()
    }

    /// Number of tracked TCP flows.
    pub fn tcp_flow_count(&self) -> usize {
        self.tcp_flows.keys().filter(Result::is_ok).count()
    }

    /// Writes only the global settings (e.g. the unknown-peer policy).
    pub fn write_global(&mut self, g: GlobalConfig) -> Result<(), DataplaneError> {
        self.global
            .set(0, g, 0)
            .map_err(DataplaneError::map(names::GLOBAL_CONFIG))
    }

    /// One global counter.
    pub fn stat(&self, c: Counter) -> Result<u64, DataplaneError> {
        let v = self
            .stats
            .get(&(c as u32), 0)
            .map_err(DataplaneError::map(names::STATS))?;
        Ok(v.iter().sum())
    }
}

/// An attached (or reused) fast path.
pub struct Dataplane {
    pub maps: Maps,
    pub iface: String,
    pub pin_dir: PathBuf,
    /// True when an earlier run's pinned program and state were reused.
    pub reused: bool,
    _ebpf: Option<Ebpf>,
}

impl Dataplane {
    /// Attaches to `iface`, or reuses what an earlier run pinned in `pin_dir` for it.
    pub fn attach(
        iface: &str,
        mode: AttachMode,
        pin_dir: &Path,
    ) -> Result<Dataplane, DataplaneError> {
        let link = link_pin(pin_dir, iface);
        if link.exists() {
            if let Ok(maps) = Maps::open_pinned(pin_dir) {
                return Ok(Dataplane {
                    maps,
                    iface: iface.into(),
                    pin_dir: pin_dir.into(),
                    reused: true,
                    _ebpf: None,
                });
            }
            // A link without its maps: start over.
            let _ = std::fs::remove_file(&link);
        }
        let mut ebpf = open()?;
        load_xdp(&mut ebpf)?;
        ensure_bpffs(pin_dir)?;
        std::fs::create_dir_all(pin_dir).map_err(|source| DataplaneError::Io {
            path: pin_dir.into(),
            source,
        })?;
        // Stale map pins from an earlier, detached run would shadow the new maps.
        for name in PINNED_MAPS {
            let _ = std::fs::remove_file(pin_dir.join(name));
        }
        // A TC egress attachment of that run uses its maps, not these: remove it, so
        // that `attach_egress` (called after this) attaches afresh on the new maps.
        if let Ok(rd) = std::fs::read_dir(pin_dir) {
            for entry in rd.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(i) = name.strip_prefix("prog_egress_") {
                    detach_egress_filter(i)?;
                }
                if name.starts_with("link_egress_") || name.starts_with("prog_egress_") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        for name in PINNED_MAPS {
            let map = ebpf.map(name).ok_or(DataplaneError::MissingMap { name })?;
            let path = pin_dir.join(name);
            map.pin(&path)
                .map_err(|source| DataplaneError::Pin { path, source })?;
        }
        let prog: &mut Xdp = program_mut(&mut ebpf, XDP_PROGRAM)?;
        let try_attach = |prog: &mut Xdp, m: XdpMode, label: &'static str| {
            prog.attach(iface, m)
                .map_err(|source| DataplaneError::Attach {
                    iface: iface.into(),
                    mode: label,
                    source,
                })
        };
        let id = match mode {
            AttachMode::Native => try_attach(prog, XdpMode::Driver, "native")?,
            AttachMode::Skb => try_attach(prog, XdpMode::Skb, "skb")?,
            AttachMode::Auto => match try_attach(prog, XdpMode::Driver, "native") {
                Ok(id) => id,
                Err(_) => try_attach(prog, XdpMode::Skb, "skb")?,
            },
        };
        let xdp_link = prog
            .take_link(id)
            .map_err(DataplaneError::program(XDP_PROGRAM))?;
        pin_link(xdp_link, iface, &link)?;
        let maps = Maps::take(&mut ebpf)?;
        Ok(Dataplane {
            maps,
            iface: iface.into(),
            pin_dir: pin_dir.into(),
            reused: false,
            _ebpf: Some(ebpf),
        })
    }

    /// Removes everything pinned for `iface` in `pin_dir` (the XDP and TC egress
    /// links — which detaches the programs — and the maps). Returns what was
    /// removed. The kernel releases an unpinned link after an RCU grace period, so
    /// the programs may see a few more packets after this returns.
    pub fn detach(iface: Option<&str>, pin_dir: &Path) -> Result<Vec<PathBuf>, DataplaneError> {
        let mut removed = Vec::new();
        let Ok(rd) = std::fs::read_dir(pin_dir) else {
            return Ok(removed);
        };
        for entry in rd.flatten() {
            let p = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_link = name.starts_with("link_") || name.starts_with("prog_egress_");
            if is_link
                && iface.is_some_and(|i| {
                    name != format!("link_{i}")
                        && name != format!("link_egress_{i}")
                        && name != format!("prog_egress_{i}")
                })
            {
                continue;
            }
            if let Some(i) = name.strip_prefix("prog_egress_") {
                detach_egress_filter(i)?;
            }
            std::fs::remove_file(&p).map_err(|source| DataplaneError::Io {
                path: p.clone(),
                source,
            })?;
            removed.push(p);
        }
        let _ = std::fs::remove_dir(pin_dir);
        Ok(removed)
    }

    /// Attaches the TC egress program to `iface` — through TCX (egress, last in the
    /// TCX chain) where the kernel has it (6.6+), its link pinned as
    /// `link_egress_<iface>` in `pin_dir`; else through the interface's clsact qdisc
    /// (added if missing) and a netlink filter, the program pinned as
    /// `prog_egress_<iface>` — or reuses what an earlier run attached. The program uses
    /// the maps pinned in `pin_dir` (those of [`Dataplane::attach`], which must come
    /// first when both are used; missing pins are created), so one [`Maps`] reads and
    /// writes both directions. Returns how it is attached and whether an earlier run's
    /// attachment was reused. [`Dataplane::detach`] removes it.
    pub fn attach_egress(iface: &str, pin_dir: &Path) -> Result<EgressAttach, DataplaneError> {
        let link = egress_link_pin(pin_dir, iface);
        if link.exists() {
            return Ok(EgressAttach {
                tcx: true,
                reused: true,
            });
        }
        let prog_pin = egress_prog_pin(pin_dir, iface);
        if prog_pin.exists() {
            return Ok(EgressAttach {
                tcx: false,
                reused: true,
            });
        }
        if EBPF_OBJECT.is_empty() {
            return Err(DataplaneError::NoObject);
        }
        ensure_bpffs(pin_dir)?;
        std::fs::create_dir_all(pin_dir).map_err(|source| DataplaneError::Io {
            path: pin_dir.into(),
            source,
        })?;
        let paths: Vec<(&'static str, PathBuf)> =
            PINNED_MAPS.iter().map(|n| (*n, pin_dir.join(n))).collect();
        let mut loader = aya::EbpfLoader::new();
        for (name, path) in &paths {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(DataplaneError::Load)?;
        load_tc(&mut ebpf)?;
        let prog: &mut SchedClassifier = program_mut(&mut ebpf, TC_PROGRAM)?;
        let attach_err = |how: &'static str| {
            move |source| DataplaneError::AttachEgress {
                iface: iface.into(),
                how,
                source: Box::new(source),
            }
        };
        let tcx = kernel::KernelFeatures::probe_tcx();
        if tcx {
            let id = prog
                .attach_with_options(
                    iface,
                    TcAttachType::Egress,
                    TcAttachOptions::TcxOrder(LinkOrder::default()),
                )
                .map_err(attach_err("TCX"))?;
            let tc_link = prog
                .take_link(id)
                .map_err(DataplaneError::program(TC_PROGRAM))?;
            pin_link(tc_link, iface, &link)?;
        } else {
            // An interface that has a clsact qdisc already keeps it (EEXIST).
            if let Err(e) = aya::programs::tc::qdisc_add_clsact(iface) {
                let exists = matches!(&e, aya::programs::tc::TcError::NetlinkError(n)
                    if n.raw_os_error() == Some(libc::EEXIST));
                if !exists {
                    return Err(attach_err("clsact qdisc")(e.into()));
                }
            }
            let opts = NlOptions {
                priority: TC_FILTER_PRIORITY,
                handle: TC_FILTER_HANDLE,
                classid: None,
            };
            let id = prog
                .attach_with_options(iface, TcAttachType::Egress, TcAttachOptions::Netlink(opts))
                .map_err(attach_err("netlink filter"))?;
            prog.pin(&prog_pin).map_err(|source| DataplaneError::Pin {
                path: prog_pin.clone(),
                source,
            })?;
            let filter = prog
                .take_link(id)
                .map_err(DataplaneError::program(TC_PROGRAM))?;
            // The filter stays when this process exits (a link dropped here would
            // remove it): `dra detach` removes it by its priority and handle.
            std::mem::forget(filter);
        }
        Ok(EgressAttach { tcx, reused: false })
    }

    /// Whether a pinned TC egress attachment (TCX link or netlink filter's program)
    /// for `iface` exists.
    pub fn is_egress_pinned(iface: &str, pin_dir: &Path) -> bool {
        egress_link_pin(pin_dir, iface).exists() || egress_prog_pin(pin_dir, iface).exists()
    }

    /// The interfaces whose XDP link is pinned in `pin_dir` (an earlier run's, still
    /// attached).
    pub fn pinned_xdp_links(pin_dir: &Path) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(pin_dir) else {
            return Vec::new();
        };
        let mut out: Vec<String> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let iface = name.strip_prefix("link_")?;
                (!iface.starts_with("egress_")).then(|| iface.to_string())
            })
            .collect();
        out.sort();
        out
    }

    /// The maps (the programs stay attached through their pinned link).
    pub fn into_maps(self) -> Maps {
        self.maps
    }

    /// Whether a pinned link for `iface` exists (the program is attached).
    pub fn is_pinned(iface: &str, pin_dir: &Path) -> bool {
        link_pin(pin_dir, iface).exists()
    }
}

/// Prefixes of a peer table split by family: (prefix length, address, value).
type Prefixes<V> = (Vec<(u32, Ipv4Key, V)>, Vec<(u32, Ipv6Key, V)>);

/// Every prefix of every entry, IPv4 and IPv6 apart, each with its entry's value.
fn by_family<'a, V: Copy + 'a>(entries: impl Iterator<Item = (&'a [IpNet], V)>) -> Prefixes<V> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (prefixes, value) in entries {
        for net in prefixes {
            match net {
                IpNet::V4(n) => v4.push((n.prefix_len() as u32, n.network().octets(), value)),
                IpNet::V6(n) => v6.push((n.prefix_len() as u32, n.network().octets(), value)),
            }
        }
    }
    (v4, v6)
}

/// Makes `trie` hold exactly `entries`: the new ones written first, then the stale ones
/// removed, so a rewrite never leaves a window in which a configured prefix is missing.
fn sync_trie<K, V>(
    trie: &mut LpmTrie<MapData, K, V>,
    entries: &[(u32, K, V)],
    name: &'static str,
) -> Result<(), DataplaneError>
where
    K: aya::Pod + Eq + std::hash::Hash,
    V: aya::Pod,
{
    for (len, data, value) in entries {
        trie.insert(&Key::new(*len, *data), *value, 0)
            .map_err(DataplaneError::map(name))?;
    }
    let wanted: std::collections::HashSet<(u32, K)> =
        entries.iter().map(|(len, data, _)| (*len, *data)).collect();
    let stale: Vec<Key<K>> = trie
        .keys()
        .filter_map(Result::ok)
        .filter(|k| !wanted.contains(&(k.prefix_len(), k.data())))
        .collect();
    for k in stale {
        let _ = trie.remove(&k);
    }
    Ok(())
}

/// Makes `map` hold exactly `entries`, new ones first, then stale ones removed.
fn sync_hash<K, V>(
    map: &mut HashMap<MapData, K, V>,
    entries: impl Iterator<Item = (K, V)>,
    name: &'static str,
) -> Result<(), DataplaneError>
where
    K: aya::Pod + Eq + std::hash::Hash,
    V: aya::Pod,
{
    let mut wanted = std::collections::HashSet::new();
    for (k, v) in entries {
        map.insert(k, v, 0).map_err(DataplaneError::map(name))?;
        wanted.insert(k);
    }
    let stale: Vec<K> = map
        .keys()
        .filter_map(Result::ok)
        .filter(|k| !wanted.contains(k))
        .collect();
    for k in stale {
        let _ = map.remove(&k);
    }
    Ok(())
}
