//! The idempotent "ensure toolchain" step run before build, test, run and demo.
//!
//! On a fresh Debian 12 machine it installs what is missing and says why; when
//! everything is present it prints nothing and takes well under a second.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

/// bpf-linker release that links with the machine's LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// Debian packages and why each is needed.
const APT_PACKAGES: &[(&str, &str)] = &[
    (
        "llvm-22-dev",
        "bpf-linker 0.13.0 links eBPF objects against LLVM 22",
    ),
    (
        "iproute2",
        "tests and the lab build network namespaces and veth pairs with `ip`",
    ),
    (
        "ethtool",
        "tests turn off checksum offload on veth to verify in-kernel checksum fixes",
    ),
    (
        "redis-server",
        "the session-binding DB and the DB-CPU sample source in tests and the demo",
    ),
    (
        "redis-tools",
        "redis-cli: `--cluster create` builds the HA lab's 6-node Redis Cluster",
    ),
    (
        "tshark",
        "an independent check that what the agent sends is well-formed Diameter",
    ),
    (
        "freediameterd",
        "interop test and relay bench peer: freeDiameterd 1.2.1 (+ extensions below)",
    ),
    (
        "freediameter-extensions",
        "rt_default.fdx routing for freeDiameterd in the relay bench",
    ),
    (
        "erlang-base",
        "erl/erlc: the Erlang/OTP relay, the relay bench's second reference",
    ),
    (
        "erlang-diameter",
        "OTP's diameter application, which that relay is built on",
    ),
    (
        "prometheus",
        "promtool checks and unit-tests the shipped alert rules; the lab's own Prometheus \
         (lab up --monitoring, demo --monitoring, the monitoring test)",
    ),
];

fn quiet(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_root() -> bool {
    quiet(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

fn cargo_bin() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"));
    home.join("bin")
}

/// Debian packages the kernel matrix needs (`cargo xtask test`, xtask/src/vm/) and why.
const VM_APT_PACKAGES: &[(&str, &str)] = &[
    (
        "qemu-system-x86",
        "the kernel matrix boots Debian's kernels in qemu (KVM if usable, else TCG)",
    ),
    (
        "busybox-static",
        "the matrix guests' initramfs: mounts the host's filesystem over 9p",
    ),
    (
        "kmod",
        "depmod indexes the matrix kernels' modules; modprobe loads them in the guest",
    ),
];

fn missing_apt(
    packages: &'static [(&'static str, &'static str)],
) -> Vec<&'static (&'static str, &'static str)> {
    let names: Vec<&str> = packages.iter().map(|(n, _)| *n).collect();
    let out = quiet(
        Command::new("dpkg-query")
            .args(["-W", "-f=${Package} ${db:Status-Status}\\n"])
            .args(&names),
    )
    .unwrap_or_default();
    packages
        .iter()
        .filter(|(n, _)| !out.lines().any(|l| l == format!("{n} installed")))
        .collect()
}

fn nightly_sysroot() -> Option<PathBuf> {
    quiet(
        Command::new("rustup")
            .args(["run", "nightly", "rustc", "--print", "sysroot"])
            .env_remove("RUSTUP_TOOLCHAIN"),
    )
    .map(|s| PathBuf::from(s.trim()))
}

fn bpf_linker_ok() -> bool {
    let bin = cargo_bin().join("bpf-linker");
    let cmd = if bin.exists() {
        bin
    } else {
        PathBuf::from("bpf-linker")
    };
    quiet(Command::new(cmd).arg("--version")).is_some_and(|v| v.contains(BPF_LINKER_VERSION))
}

pub(crate) fn run(what: &str, cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("{what}: could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{what} failed ({status}): {cmd:?}");
    }
    Ok(())
}

/// Ensures the eBPF toolchain and test tools are present; installs what is missing.
pub fn ensure() -> Result<()> {
    let apt = missing_apt(APT_PACKAGES);
    let sysroot = nightly_sysroot();
    let rust_src = sysroot.as_deref().is_some_and(|s| {
        s.join("lib/rustlib/src/rust/library/core/Cargo.toml")
            .exists()
    });
    let linker = bpf_linker_ok();
    if apt.is_empty() && sysroot.is_some() && rust_src && linker {
        return Ok(());
    }

    install_apt(&apt)?;

    if sysroot.is_none() {
        eprintln!("setup: installing the nightly toolchain (rustup): eBPF needs -Z build-std");
        run(
            "rustup toolchain install nightly",
            Command::new("rustup")
                .args([
                    "toolchain",
                    "install",
                    "nightly",
                    "--profile",
                    "minimal",
                    "--component",
                    "rust-src",
                ])
                .env_remove("RUSTUP_TOOLCHAIN"),
        )
        .context("setup: run `rustup toolchain install nightly --component rust-src` by hand")?;
    } else if !rust_src {
        eprintln!("setup: adding rust-src to nightly (rustup): eBPF builds core from source");
        run(
            "rustup component add rust-src",
            Command::new("rustup")
                .args(["component", "add", "rust-src", "--toolchain", "nightly"])
                .env_remove("RUSTUP_TOOLCHAIN"),
        )
        .context("setup: run `rustup component add rust-src --toolchain nightly` by hand")?;
    }

    if !linker {
        if !Path::new(LLVM_PREFIX).join("bin/llvm-config").exists() {
            bail!("setup: {LLVM_PREFIX} is missing; install llvm-22-dev (apt) and run again");
        }
        eprintln!(
            "setup: installing bpf-linker {BPF_LINKER_VERSION} (cargo, built against LLVM 22, \
             ~80 s): it links the eBPF programs"
        );
        run(
            "cargo install bpf-linker",
            Command::new("cargo")
                .args([
                    "install",
                    "bpf-linker",
                    "--force",
                    "--version",
                    BPF_LINKER_VERSION,
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .env("LLVM_PREFIX", LLVM_PREFIX)
                .env_remove("RUSTUP_TOOLCHAIN"),
        )
        .context(format!(
            "setup: run `LLVM_PREFIX={LLVM_PREFIX} cargo install bpf-linker --version \
             {BPF_LINKER_VERSION} --no-default-features --features llvm-22` by hand"
        ))?;
    }
    Ok(())
}

/// Installs `apt` (missing packages, each with why) with apt-get, as root.
fn install_apt(apt: &[&(&str, &str)]) -> Result<()> {
    if apt.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = apt.iter().map(|(n, _)| *n).collect();
    for (n, why) in apt {
        eprintln!("setup: installing {n} (apt): {why}");
    }
    if !is_root() {
        bail!(
            "setup: missing Debian packages and not root. Run:\n  \
                 sudo apt-get update && sudo apt-get install -y {}\nthen run this command again.",
            names.join(" ")
        );
    }
    if quiet(Command::new("apt-get").arg("--version")).is_none() {
        bail!(
            "setup: apt-get not found; install {} by hand (Debian 12 is the supported host)",
            names.join(" ")
        );
    }
    run(
        "apt-get update",
        Command::new("apt-get").args(["update", "-qq"]),
    )?;
    run(
        "apt-get install",
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&names)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(())
}

/// The kernel matrix's tools (qemu, busybox, kmod) and kernels (downloaded into
/// target/vm/): installed when missing, silent when there.
pub fn ensure_vm(root: &Path) -> Result<()> {
    install_apt(&missing_apt(VM_APT_PACKAGES))?;
    crate::vm::ensure_kernels(root)
}

/// PATH with ~/.cargo/bin in front, so a freshly installed bpf-linker is found.
pub fn path_with_cargo_bin() -> std::ffi::OsString {
    let mut parts = vec![cargo_bin()];
    if let Some(p) = std::env::var_os("PATH") {
        parts.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(parts).unwrap_or_default()
}

/// cargo-fuzz, for the wire-scanner fuzz target (`cargo xtask test` runs it briefly).
pub fn ensure_fuzz() -> Result<()> {
    let bin = cargo_bin().join("cargo-fuzz");
    if bin.exists() {
        return Ok(());
    }
    eprintln!(
        "setup: installing cargo-fuzz (cargo, ~60 s): builds and runs the wire-scanner fuzz target"
    );
    run(
        "cargo install cargo-fuzz",
        Command::new("cargo")
            .args(["install", "cargo-fuzz", "--locked"])
            .env_remove("RUSTUP_TOOLCHAIN"),
    )
    .context("setup: run `cargo install cargo-fuzz --locked` by hand")
}
