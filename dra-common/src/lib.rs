//! Shared between the eBPF programs (`dra-ebpf`) and the agent (`dra-userspace`):
//! the Diameter wire constants and bounded scanner, the BPF map types, and the
//! counter enum. `no_std`, no allocation: the same code runs in the kernel.
#![no_std]

pub mod gcra;
pub mod maps;
pub mod stats;
pub mod wire;
pub mod words;
