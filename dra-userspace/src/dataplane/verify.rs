//! `dra verify`: every program of the object loaded into this kernel (the verifier's
//! verdict) without attaching anything, with what the kernel probe says beside it.

use std::fmt::Write as _;

use aya::programs::{SchedClassifier, Xdp};

use super::{
    DataplaneError, TC_PROGRAM, XDP_PROGRAM, XDP_TAIL_PROGRAMS,
    kernel::{Hook, KernelFeatures, RING_BUFFER, Unsupported},
    load_one, load_tc, open,
};

/// What became of one program.
#[derive(Debug)]
pub enum Verdict {
    /// The verifier accepted it, after processing this many instructions (kernels
    /// before 5.16 do not say).
    Loaded { instructions: Option<u32> },
    /// Not tried: the kernel lacks a feature it needs.
    Unsupported(Unsupported),
    /// The kernel refused it.
    Refused(DataplaneError),
}

/// The programs `dra run` loads, with their hook.
pub fn programs() -> Vec<(&'static str, Hook)> {
    std::iter::once(XDP_PROGRAM)
        .chain(XDP_TAIL_PROGRAMS.iter().map(|(_, n)| *n))
        .map(|n| (n, Hook::Xdp))
        .chain([(TC_PROGRAM, Hook::Tc)])
        .collect()
}

/// Loads each program on its own (an XDP program's tail calls are not needed for it
/// to be verified) and says what became of it.
pub fn verify(kernel: &KernelFeatures) -> Result<Vec<(&'static str, Verdict)>, DataplaneError> {
    // Without a ring buffer even the object's maps cannot be created.
    let mut ebpf = if kernel.missing(Hook::Xdp).contains(&RING_BUFFER) {
        None
    } else {
        Some(open()?)
    };
    let mut out = Vec::new();
    for (name, hook) in programs() {
        let verdict = match (kernel.unsupported(hook), ebpf.as_mut()) {
            (Some(u), _) => Verdict::Unsupported(u),
            (None, None) => unreachable!("the object opens unless the ring buffer is missing"),
            (None, Some(ebpf)) => {
                let loaded = match hook {
                    Hook::Xdp => load_one(ebpf, name),
                    Hook::Tc => load_tc(ebpf),
                };
                match loaded {
                    Ok(()) => Verdict::Loaded {
                        instructions: instructions(ebpf, name, hook),
                    },
                    Err(e) => Verdict::Refused(e),
                }
            }
        };
        out.push((name, verdict));
    }
    Ok(out)
}

fn instructions(ebpf: &aya::Ebpf, name: &str, hook: Hook) -> Option<u32> {
    let p = ebpf.program(name)?;
    let info = match hook {
        Hook::Xdp => <&Xdp>::try_from(p).ok()?.info().ok()?,
        Hook::Tc => <&SchedClassifier>::try_from(p).ok()?.info().ok()?,
    };
    info.verified_instruction_count()
}

/// The report `dra verify` prints: the kernel, its features, each program's verdict (a
/// refusal with the end of the verifier's log).
pub fn report(kernel: &KernelFeatures, verdicts: &[(&'static str, Verdict)]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "kernel {}", kernel.release);
    for (f, p) in &kernel.present {
        let _ = writeln!(o, "  {} ({}+): {p}", f.name, f.since);
    }
    let _ = writeln!(
        o,
        "  TC attach: {}",
        if kernel.tcx {
            "TCX (6.6+)"
        } else {
            "clsact qdisc + netlink filter (no TCX before 6.6)"
        }
    );
    let width = verdicts.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, v) in verdicts {
        let text = match v {
            Verdict::Loaded {
                instructions: Some(n),
            } => format!("loaded ({n} instructions processed by the verifier)"),
            Verdict::Loaded { instructions: None } => "loaded".to_owned(),
            Verdict::Unsupported(u) => format!("not loaded: {u}"),
            Verdict::Refused(e) => format!("REFUSED: {}", refusal(e)),
        };
        let _ = writeln!(o, "{name:<width$}  {text}");
    }
    o
}

/// A refusal in a few lines: the error chain, and the last lines of a verifier log
/// (where the verifier says what it refused; the whole log runs to thousands of lines).
fn refusal(e: &DataplaneError) -> String {
    let chain = crate::error_chain(e);
    let lines: Vec<&str> = chain.lines().collect();
    if lines.len() <= 30 {
        return chain;
    }
    format!(
        "{}\n  ... ({} lines of the verifier's log left out)\n{}",
        lines[0],
        lines.len() - 26,
        lines[lines.len() - 25..].join("\n")
    )
}
