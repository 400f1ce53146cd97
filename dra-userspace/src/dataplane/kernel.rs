//! What the running kernel offers the fast path, probed before anything is loaded: a
//! kernel without a feature the programs need gets a refusal that names it (or, with
//! `[fast_path] fallback = "userspace"`, the agent's own limiter), never a program the
//! verifier refuses with a message about instructions.
//!
//! Helpers are probed as libbpf does (a minimal program calling the helper, the
//! verifier's "unknown func" diagnostic), map types by creating one; TCX is known by
//! the kernel version (6.6), as aya decides it — older kernels get the TC program
//! through a clsact qdisc and a netlink filter instead, which works everywhere.
//! The 64-bit compare-and-swap the buckets use (5.12) and the BPF link that pins XDP
//! (5.9) come before `bpf_loop` (5.17) in every kernel, so `bpf_loop` stands for them.

use std::fmt;

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported, is_map_supported},
    util::KernelVersion,
};

/// Which program needs a feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// The XDP ingress programs (the dispatcher and its TCP/SCTP tail calls).
    Xdp,
    /// The TC egress classifier.
    Tc,
}

/// A kernel feature the programs need.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Feature {
    /// As the kernel's documentation names it.
    pub name: &'static str,
    /// The first mainline release that has it.
    pub since: &'static str,
    /// What the programs use it for.
    pub used_for: &'static str,
    /// The programs that need it.
    pub hooks: &'static [Hook],
    probe: Probe,
}

/// How a feature is probed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Probe {
    /// Creating a map of this type.
    Map(MapType),
    /// Loading a program that calls this helper, for each hook that needs it.
    Helper(BpfHelper),
}

impl Hook {
    fn program_type(self) -> ProgramType {
        match self {
            Hook::Xdp => ProgramType::Xdp,
            Hook::Tc => ProgramType::SchedClassifier,
        }
    }
}

impl Feature {
    /// Whether the running kernel has it, or why the probe could not tell (e.g. no
    /// CAP_BPF: then loading fails too, with that reason, not a missing feature's).
    fn probe(&self) -> Presence {
        let found = match self.probe {
            Probe::Map(t) => is_map_supported(t).map_err(|e| e.to_string()),
            Probe::Helper(h) => self.hooks.iter().try_fold(true, |all, k| {
                is_helper_supported(k.program_type(), h)
                    .map(|ok| all && ok)
                    .map_err(|e| crate::error_chain(&e))
            }),
        };
        match found {
            Ok(true) => Presence::Yes,
            Ok(false) => Presence::No,
            Err(e) => Presence::Unknown(e),
        }
    }
}

/// A probe's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Presence {
    Yes,
    No,
    /// The probe failed for another reason.
    Unknown(String),
}

impl fmt::Display for Presence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Presence::Yes => f.write_str("yes"),
            Presence::No => f.write_str("no"),
            Presence::Unknown(e) => write!(f, "unknown (the probe failed: {e})"),
        }
    }
}

/// The BPF ring buffer map (out-of-band marks, the programs' event log).
pub const RING_BUFFER: Feature = Feature {
    name: "BPF ring buffer",
    since: "5.8",
    used_for: "out-of-band marks and the programs' event log",
    hooks: &[Hook::Xdp, Hook::Tc],
    probe: Probe::Map(MapType::RingBuf),
};
/// `bpf_loop`: the walk over a segment's messages (one callback verified once).
pub const BPF_LOOP: Feature = Feature {
    name: "bpf_loop",
    since: "5.17",
    used_for: "the walk over a segment's messages",
    hooks: &[Hook::Xdp, Hook::Tc],
    probe: Probe::Helper(BpfHelper::BPF_FUNC_loop),
};
/// `bpf_xdp_load_bytes`: scan items copied from the packet inside that walk.
pub const XDP_LOAD_BYTES: Feature = Feature {
    name: "bpf_xdp_load_bytes",
    since: "5.18",
    used_for: "reading a message's bytes inside that walk",
    hooks: &[Hook::Xdp],
    probe: Probe::Helper(BpfHelper::BPF_FUNC_xdp_load_bytes),
};

/// Every feature probed, in the order they are reported.
pub const FEATURES: [Feature; 3] = [RING_BUFFER, BPF_LOOP, XDP_LOAD_BYTES];

/// The running kernel's release and features.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelFeatures {
    /// `uname -r`.
    pub release: String,
    /// Each of [`FEATURES`] and whether this kernel has it.
    pub present: Vec<(Feature, Presence)>,
    /// TC programs attach through TCX (6.6+); else through clsact and netlink.
    pub tcx: bool,
}

impl KernelFeatures {
    /// Probes the running kernel (needs CAP_BPF).
    pub fn probe() -> KernelFeatures {
        KernelFeatures {
            release: release(),
            present: FEATURES.iter().map(|f| (*f, f.probe())).collect(),
            tcx: KernelFeatures::probe_tcx(),
        }
    }

    /// Whether TC programs attach through TCX here (6.6+, as aya decides it).
    pub fn probe_tcx() -> bool {
        KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
    }

    /// The features `hook`'s programs need that this kernel lacks (a probe that could
    /// not tell is not counted: loading then says why).
    pub fn missing(&self, hook: Hook) -> Vec<Feature> {
        self.present
            .iter()
            .filter(|(f, p)| *p == Presence::No && f.hooks.contains(&hook))
            .map(|(f, _)| *f)
            .collect()
    }

    /// Why `hook`'s programs cannot load here, or `None` if they can.
    pub fn unsupported(&self, hook: Hook) -> Option<Unsupported> {
        let missing = self.missing(hook);
        (!missing.is_empty()).then(|| Unsupported {
            release: self.release.clone(),
            hook,
            missing,
        })
    }
}

/// The programs of a hook cannot load on this kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Unsupported {
    pub release: String,
    pub hook: Hook,
    pub missing: Vec<Feature>,
}

impl fmt::Display for Unsupported {
    /// "kernel 5.10.0-46-amd64 lacks bpf_loop (5.17+, the walk over …), …: the XDP
    /// programs cannot load".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self
            .missing
            .iter()
            .map(|m| format!("{} ({}+, {})", m.name, m.since, m.used_for))
            .collect();
        let what = match self.hook {
            Hook::Xdp => "the XDP fast path",
            Hook::Tc => "the TC egress program",
        };
        write!(
            f,
            "kernel {} lacks {}: {what} cannot load",
            self.release,
            list.join(", ")
        )
    }
}

/// The running kernel's release (`uname -r`).
pub fn release() -> String {
    // SAFETY: uname(2) fills a zeroed utsname; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "(unknown)".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without(missing: &[Feature]) -> KernelFeatures {
        KernelFeatures {
            release: "5.10.0-46-amd64".into(),
            present: FEATURES
                .iter()
                .map(|f| {
                    let p = if missing.contains(f) {
                        Presence::No
                    } else {
                        Presence::Yes
                    };
                    (*f, p)
                })
                .collect(),
            tcx: false,
        }
    }

    #[test]
    fn a_missing_helper_is_named_with_its_release_for_the_hooks_that_need_it() {
        let k = without(&[BPF_LOOP, XDP_LOAD_BYTES]);
        let xdp = k.unsupported(Hook::Xdp).expect("XDP cannot load");
        assert_eq!(xdp.missing, vec![BPF_LOOP, XDP_LOAD_BYTES]);
        let text = xdp.to_string();
        assert!(
            text.starts_with("kernel 5.10.0-46-amd64 lacks bpf_loop (5.17+"),
            "{text}"
        );
        assert!(text.contains("bpf_xdp_load_bytes (5.18+"), "{text}");
        assert!(text.ends_with("the XDP fast path cannot load"), "{text}");
        assert_eq!(k.missing(Hook::Tc), vec![BPF_LOOP]);
    }

    #[test]
    fn a_probe_that_cannot_tell_is_not_a_missing_feature() {
        let mut k = without(&[]);
        k.present[1].1 = Presence::Unknown("Operation not permitted".into());
        assert_eq!(k.unsupported(Hook::Xdp), None);
    }

    #[test]
    fn a_kernel_with_everything_refuses_nothing() {
        let k = without(&[]);
        assert_eq!(k.unsupported(Hook::Xdp), None);
        assert_eq!(k.unsupported(Hook::Tc), None);
        // bpf_xdp_load_bytes is XDP's only.
        let k = without(&[XDP_LOAD_BYTES]);
        assert!(k.unsupported(Hook::Xdp).is_some());
        assert_eq!(k.unsupported(Hook::Tc), None);
    }
}
