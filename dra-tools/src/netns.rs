//! Network namespaces for the tools that need two hosts on one machine (`dra-bench`, the
//! freeDiameter interop test): the guards of the `netlab` crate, plus entering a
//! namespace for good and spawning a process into one. Needs root.

use std::fs::File;
use std::io;
use std::process::{Child, Command};

/// A network namespace with its loopback up, deleted on drop (with the veth ends in it).
pub struct Netns(netlab::Netns);

impl Netns {
    /// A new namespace named `<prefix><pid><n>`.
    pub fn new(prefix: &str) -> io::Result<Netns> {
        netlab::Netns::new(prefix).map(Netns).map_err(io_error)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Its file, for [`enter`] from another thread.
    pub fn file(&self) -> io::Result<File> {
        netlab::open(self.name()).map_err(io_error)
    }

    /// Moves the calling thread into this namespace; the threads it creates afterwards
    /// (a runtime's workers) start there too.
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.file()?)
    }

    /// Spawns `cmd` in this namespace ([`spawn_in`]).
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<Child> {
        spawn_in(self.name(), cmd)
    }
}

/// Spawns `cmd` in the network namespace `name` (made with `ip netns`), entering only
/// the network namespace ([`netlab::command_in`]).
pub fn spawn_in(name: &str, cmd: &mut Command) -> io::Result<Child> {
    netlab::command_in(name, cmd).map_err(io_error)?.spawn()
}

/// Moves the calling thread into the namespace of `file` ([`Netns::file`]).
pub fn enter(file: &File) -> io::Result<()> {
    netlab::enter(file)
}

/// Joins `a` and `b` with a veth pair: `a_addr` on `a`'s end, `b_addr` on `b`'s (with
/// their prefix length, e.g. `198.18.0.1/30`), both up; returns the two interfaces'
/// names (removed with the namespaces).
pub fn veth_pair(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str) -> io::Result<netlab::VethPair> {
    netlab::VethPair::new(&a.0, a_addr, &b.0, b_addr).map_err(io_error)
}

fn io_error(e: anyhow::Error) -> io::Error {
    io::Error::other(format!("{e:#}"))
}
