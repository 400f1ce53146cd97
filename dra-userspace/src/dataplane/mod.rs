//! Loading the embedded eBPF object, attaching, pinning, map writers and stats readers.

use aya::Ebpf;

/// The eBPF object built by build.rs from dra-ebpf.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dra"));

/// Name of the XDP ingress program (the one attached) in the object.
pub const XDP_PROGRAM: &str = "dra_xdp";
/// Protocol programs the ingress program tail-calls, by jump-table index.
pub const XDP_TAIL_PROGRAMS: [(u32, &str); 2] = [(0, "dra_xdp_tcp"), (1, "dra_xdp_sctp")];
/// The jump table map.
pub const JUMP_MAP: &str = "JUMP";

#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    #[error("the eBPF object is empty: this binary was built with AYA_BUILD_SKIP=1; rebuild without it (cargo xtask build)")]
    NoObject,
    #[error("loading the eBPF object failed")]
    Load(#[source] aya::EbpfError),
    #[error("program {name} not found in the eBPF object")]
    MissingProgram { name: &'static str },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("map {name} not found in the eBPF object")]
    MissingMap { name: &'static str },
    #[error("program {name}: {source}")]
    Program {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
}

/// Parses the embedded object and creates its maps (programs are not yet loaded).
pub fn open() -> Result<Ebpf, DataplaneError> {
    if EBPF_OBJECT.is_empty() {
        return Err(DataplaneError::NoObject);
    }
    Ebpf::load(EBPF_OBJECT).map_err(DataplaneError::Load)
}

fn load_one(ebpf: &mut Ebpf, name: &'static str) -> Result<(), DataplaneError> {
    let prog: &mut aya::programs::Xdp = ebpf
        .program_mut(name)
        .ok_or(DataplaneError::MissingProgram { name })?
        .try_into()
        .map_err(|source| DataplaneError::Program { name, source })?;
    prog.load().map_err(|source| DataplaneError::Program { name, source })
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
        let prog: &aya::programs::Xdp = ebpf
            .program(name)
            .ok_or(DataplaneError::MissingProgram { name })?
            .try_into()
            .map_err(|source| DataplaneError::Program { name, source })?;
        let fd = prog
            .fd()
            .and_then(|fd| fd.try_clone().map_err(aya::programs::ProgramError::from))
            .map_err(|source| DataplaneError::Program { name, source })?;
        fds.push((idx, fd));
    }
    let mut jump: aya::maps::ProgramArray<_> = ebpf
        .map_mut(JUMP_MAP)
        .ok_or(DataplaneError::MissingMap { name: JUMP_MAP })?
        .try_into()
        .map_err(|source| DataplaneError::Map { name: JUMP_MAP, source })?;
    for (idx, fd) in &fds {
        jump.set(*idx, fd, 0).map_err(|source| DataplaneError::Map { name: JUMP_MAP, source })?;
    }
    Ok(())
}
