//! Loading the embedded eBPF object, attaching, pinning, map writers and stats readers.

use aya::Ebpf;

/// The eBPF object built by build.rs from dra-ebpf.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dra"));

/// Name of the XDP ingress program in the object.
pub const XDP_PROGRAM: &str = "dra_xdp";

#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    #[error("the eBPF object is empty: this binary was built with AYA_BUILD_SKIP=1; rebuild without it (cargo xtask build)")]
    NoObject,
    #[error("loading the eBPF object failed")]
    Load(#[source] aya::EbpfError),
    #[error("program {name} not found in the eBPF object")]
    MissingProgram { name: &'static str },
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

/// Loads (verifies) the XDP ingress program into the kernel.
pub fn load_xdp(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    let prog: &mut aya::programs::Xdp = ebpf
        .program_mut(XDP_PROGRAM)
        .ok_or(DataplaneError::MissingProgram { name: XDP_PROGRAM })?
        .try_into()
        .map_err(|source| DataplaneError::Program { name: XDP_PROGRAM, source })?;
    prog.load()
        .map_err(|source| DataplaneError::Program { name: XDP_PROGRAM, source })
}
