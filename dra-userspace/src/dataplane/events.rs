//! The fast path's rare events (`dra-ebpf/src/events.rs`): aya-log records the programs
//! write into the pinned `AYA_LOGS` ring, printed by `dra run` as `tracing` lines with
//! target `dra::fastpath` at the level the program gave them (debug). The programs
//! send at most one line per event kind per CPU per second; each line names the
//! counter (`dra_fastpath_packets_total{kind=...}`) that counts every occurrence.
//!
//! Shown with `RUST_LOG=info,dra::fastpath=debug` (or `dra=debug`).

use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, LinkError, PinnedLink};
use aya_log::EbpfLogger;
use tokio::io::{Interest, unix::AsyncFd};

/// The ring the programs log into (aya-log's name for it).
pub const LOG_MAP: &str = "AYA_LOGS";

/// The events could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("no fast-path link is pinned in {0}")]
    NoLink(PathBuf),
    #[error("reading the pinned link {path}")]
    Link {
        path: PathBuf,
        #[source]
        source: LinkError,
    },
    #[error("opening the fast path's event log (program {program})")]
    Logger {
        program: u32,
        #[source]
        source: aya_log::Error,
    },
    #[error("watching the fast path's event log")]
    Watch(#[source] std::io::Error),
}

/// Forwards aya-log records to `tracing` (target `dra::fastpath`).
struct Forward;

impl log::Log for Forward {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        let msg = record.args();
        match record.level() {
            log::Level::Error => tracing::error!(target: "dra::fastpath", "{msg}"),
            log::Level::Warn => tracing::warn!(target: "dra::fastpath", "{msg}"),
            log::Level::Info => tracing::info!(target: "dra::fastpath", "{msg}"),
            log::Level::Debug => tracing::debug!(target: "dra::fastpath", "{msg}"),
            log::Level::Trace => tracing::trace!(target: "dra::fastpath", "{msg}"),
        }
    }

    fn flush(&self) {}
}

/// The program behind the first fast-path link pinned in `pin_dir` (XDP `link_<iface>`
/// or TC `link_egress_<iface>`): both write into the one pinned ring.
fn pinned_program(pin_dir: &Path) -> Result<u32, EventLogError> {
    let mut links: Vec<PathBuf> = std::fs::read_dir(pin_dir)
        .map_err(|_| EventLogError::NoLink(pin_dir.into()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("link_"))
        .map(|e| e.path())
        .collect();
    links.sort();
    let path = links
        .into_iter()
        .next()
        .ok_or_else(|| EventLogError::NoLink(pin_dir.into()))?;
    let link = PinnedLink::from_pin(&path)
        .map(FdLink::from)
        .and_then(|l| l.info())
        .map_err(|source| EventLogError::Link { path, source })?;
    Ok(link.program_id())
}

/// Starts printing the fast path's events (on the current tokio runtime) for the
/// programs pinned in `pin_dir`; runs until the runtime ends.
pub fn spawn(pin_dir: &Path) -> Result<tokio::task::JoinHandle<()>, EventLogError> {
    let program = pinned_program(pin_dir)?;
    let logger = EbpfLogger::init_from_id_with_logger(program, Forward)
        .map_err(|source| EventLogError::Logger { program, source })?;
    // SAFETY: the logger owns the ring's file descriptor (its `AsRawFd`), which
    // nothing else closes or replaces while the `AsyncFd` holds the logger.
    let mut fd = unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) }
        .map_err(|e| EventLogError::Watch(e.into()))?;
    Ok(tokio::spawn(async move {
        while let Ok(mut ready) = fd.readable_mut().await {
            ready.get_inner_mut().flush();
            ready.clear_ready();
        }
    }))
}
