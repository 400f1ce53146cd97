//! Builds the eBPF programs (dra-ebpf, target bpfel-unknown-none, nightly + rust-src +
//! bpf-linker) and leaves the object at $OUT_DIR/dra for `include_bytes_aligned!`.
//!
//! `AYA_BUILD_SKIP=1` skips it (an empty object is embedded; loading then fails with a
//! clear error) — for work on pure userspace code without the eBPF toolchain.
use std::{env, fs, path::PathBuf};

fn main() -> anyhow::Result<()> {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let skip = matches!(env::var("AYA_BUILD_SKIP").as_deref(), Ok("1") | Ok("true"));
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if skip {
        fs::write(out.join("dra"), [])?;
        return Ok(());
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../dra-ebpf");
    // dra-common is compiled into the programs too.
    println!(
        "cargo:rerun-if-changed={}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../dra-common/src")
    );
    // rustup sets RUSTUP_TOOLCHAIN for us (stable); the nested build must pick nightly.
    // SAFETY: build scripts are single-threaded here.
    unsafe { env::remove_var("RUSTUP_TOOLCHAIN") };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "dra-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
