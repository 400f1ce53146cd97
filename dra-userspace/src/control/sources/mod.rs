//! CPU sample sources (this is the I/O side of DRL).
//!
//! Every source implements [`CpuSource`]: a blocking call returning a CPU percentage.
//! Sources that read cumulative counters (procfs, Redis) compute the value as a delta
//! between two readings over the wall time between them, so their first call (and the
//! first call after the measured process restarted) returns `Ok(None)`; `prometheus` and
//! `file` return the value as read. Errors are values, never panics.
//!
//! # Where they run
//!
//! A call blocks its thread: file and `/proc` reads, and for `redis`, `redis_cluster` and
//! `prometheus` TCP exchanges whose connect, writes and reads are each bounded by the
//! source's I/O timeout (Redis through the `redis` crate's blocking client; a Prometheus
//! host name is resolved first, by the system resolver). Nothing
//! here uses `tokio::task::spawn_blocking`; the two callers are:
//!
//! - **The DB CPU source** (`[dynamic_throttling_db_cpu_profile] source`, any kind,
//!   opened by `config::CpuSource::open`): `dra run` samples it on the DRL controller's
//!   own `std::thread` (`run.rs`, `spawn_controller`), once per `sample_period`, with an
//!   I/O timeout of `sample_period` capped at 1 s. An error is logged and fed to the
//!   [`super::SampleLoop`] as a tick instead of a sample (the loop then applies
//!   `on_missing` after `missing_after` periods).
//! - **The agent's own CPU**, for the load it reports in its DWAs (`agent/load.rs`,
//!   `OwnCpu`): a [`ProcessCpu`] on the agent's pid, called inline in the agent's core
//!   task (`agent/core.rs`, housekeeping, once a second), so on a tokio runtime thread:
//!   one read of `/proc/<pid>/stat`, no network. After its first error it is not read
//!   again.
//!
//! A source that waits on the network must not be called from an async task: give it a
//! thread of its own, as `dra run` does.

use std::io;
use std::num::ParseFloatError;

mod file;
mod procfs;
mod prometheus;
mod redis;

pub use file::FileCpu;
pub use procfs::{HostCpu, ProcessCpu, ProcessSelector};
pub use prometheus::PrometheusCpu;
pub use redis::{Aggregate, RedisClusterCpu, RedisCpu};

/// A CPU utilisation source.
pub trait CpuSource: Send {
    /// The CPU in percent since the previous call, `Ok(None)` when no value is available
    /// yet (first reading of a delta source, or no time elapsed).
    fn sample(&mut self) -> Result<Option<f64>, SourceError>;

    /// A short description for logs, e.g. `redis 127.0.0.1:6379`.
    fn describe(&self) -> String;
}

impl<T: CpuSource + ?Sized> CpuSource for Box<T> {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        (**self).sample()
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// Why a source could not produce a sample. `context` says which source and what it was
/// doing (e.g. `redis 127.0.0.1:6379: INFO cpu`).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a file or talking to a server failed (includes timeouts and refused
    /// connections).
    #[error("{context}: I/O error")]
    Io {
        /// Source and operation.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A value that should be a number is not.
    #[error("{context}: {input:?} is not a number")]
    Number {
        /// Source and operation.
        context: String,
        /// The offending text (truncated to 64 characters).
        input: String,
        /// The parse error.
        #[source]
        source: ParseFloatError,
    },
    /// A number that is NaN or infinite.
    #[error("{context}: value {value} is not finite")]
    NotFinite {
        /// Source and operation.
        context: String,
        /// The value.
        value: f64,
    },
    /// The data does not have the expected shape (missing field, wrong type, empty file,
    /// broken HTTP framing, a Redis INFO reply without the CPU fields, a Prometheus
    /// result that is not exactly one value).
    #[error("{context}: {detail}")]
    Malformed {
        /// Source and operation.
        context: String,
        /// What was wrong.
        detail: String,
    },
    /// A JSON body that does not parse.
    #[error("{context}: invalid JSON")]
    Json {
        /// Source and operation.
        context: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The server answered with an error (Redis `-ERR`, HTTP status, Prometheus
    /// `"status":"error"`).
    #[error("{context}: server error: {detail}")]
    Remote {
        /// Source and operation.
        context: String,
        /// The server's error text.
        detail: String,
    },
    /// A source address that cannot be used (e.g. a non-`http://` Prometheus URL).
    #[error("invalid source address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        address: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// No process matched the selector.
    #[error("no process matches {selector}")]
    NoProcess {
        /// The selector, e.g. `name "mongod"`.
        selector: String,
    },
}

impl SourceError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn malformed(context: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Malformed {
            context: context.into(),
            detail: detail.into(),
        }
    }
}

/// Parses a finite `f64`, with the error naming the context and (truncated) input.
pub(crate) fn parse_number(context: &str, input: &str) -> Result<f64, SourceError> {
    let v: f64 = input.trim().parse().map_err(|source| SourceError::Number {
        context: context.to_owned(),
        input: input.chars().take(64).collect(),
        source,
    })?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(SourceError::NotFinite {
            context: context.to_owned(),
            value: v,
        })
    }
}
