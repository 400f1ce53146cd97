#![no_std]
// This file exists so that dra-userspace can name dra-ebpf as a build dependency
// (cargo then reruns its build script when the programs' crate changes).
