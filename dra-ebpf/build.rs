//! Rebuild the programs when bpf-linker changes (it is the linker of the bpf target).
fn main() {
    if let Ok(p) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
