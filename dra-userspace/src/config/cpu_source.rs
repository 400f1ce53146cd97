//! `source = { kind = "...", ... }` of `[dynamic_throttling_db_cpu_profile]`: where the
//! session DB's CPU figure comes from.
//!
//! Every source kind's configuration lives here, kind by kind: its keys as written
//! ([`RawSource`]), their checks (with spans, like the rest of `validate`), the checked
//! value ([`CpuSource`]), how `dra check-config` describes it (`Display`) and how `dra run`
//! opens it ([`CpuSource::open`]). The sources themselves are in
//! [`crate::control::sources`].
//!
//! Adding a kind means, in this file: a [`SourceKind`] with its name and keys, its keys
//! in [`RawSource`] and [`RawSource::keys_set`], a [`CpuSource`] variant, and its arms in
//! [`SourceKind::check`], `Display` and [`CpuSource::open`]; outside it: the source in
//! `control/sources/` and a row in docs/config.md's table of kinds (a test below checks
//! that every kind and key is documented there).

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::error::Errors;
use super::raw::S;
use super::validate::syntax::{absolute_path, choice, socket_addr};
use crate::control::sources::{
    self, Aggregate, FileCpu, HostCpu, ProcessCpu, ProcessSelector, PrometheusCpu, RedisClusterCpu,
    RedisCpu, SourceError,
};

type Span = Range<usize>;

/// Where the session DB's CPU utilisation is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuSource {
    /// `/proc` on this host.
    Procfs(ProcTarget),
    /// Redis `INFO cpu` of the session DB.
    Redis {
        /// Redis address.
        address: SocketAddr,
    },
    /// Redis `INFO cpu` of a Redis Cluster's masters, aggregated.
    RedisCluster {
        /// Seed nodes (any cluster node; the masters are discovered).
        addresses: Vec<SocketAddr>,
        /// How the masters' figures become one.
        aggregate: Aggregate,
    },
    /// A Prometheus instant query returning one value in percent.
    Prometheus {
        /// Base URL, `http://host[:port][/prefix]` (what [`PrometheusCpu::new`] accepts).
        url: String,
        /// PromQL expression.
        query: String,
    },
    /// A file holding one number (percent), rewritten by something else.
    File {
        /// Absolute path.
        path: PathBuf,
    },
}

/// What `/proc` measures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcTarget {
    /// The process with this command name (`/proc/*/comm`).
    Process(String),
    /// The process whose pid is in this file.
    PidFile(PathBuf),
    /// The whole host (`/proc/stat`).
    Host,
}

impl CpuSource {
    /// The source `dra run` samples. Nothing is read or connected here; `timeout` bounds
    /// each network call of the `redis` and `prometheus` kinds. A checked config always
    /// opens: the checks below refuse what a source would refuse.
    pub fn open(&self, timeout: Duration) -> Result<Box<dyn sources::CpuSource>, SourceError> {
        Ok(match self {
            CpuSource::Procfs(ProcTarget::Host) => Box::new(HostCpu::new()),
            CpuSource::Procfs(ProcTarget::Process(name)) => {
                Box::new(ProcessCpu::new(ProcessSelector::Name(name.clone())))
            }
            CpuSource::Procfs(ProcTarget::PidFile(p)) => {
                Box::new(ProcessCpu::new(ProcessSelector::PidFile(p.clone())))
            }
            CpuSource::Redis { address } => {
                Box::new(RedisCpu::new(address.to_string()).with_timeout(timeout))
            }
            CpuSource::RedisCluster {
                addresses,
                aggregate,
            } => Box::new(
                RedisClusterCpu::new(
                    addresses.iter().map(|a| a.to_string()).collect(),
                    *aggregate,
                )
                .with_timeout(timeout),
            ),
            CpuSource::Prometheus { url, query } => {
                Box::new(PrometheusCpu::new(url, query)?.with_timeout(timeout))
            }
            CpuSource::File { path } => Box::new(FileCpu::new(path.clone())),
        })
    }
}

impl fmt::Display for CpuSource {
    /// As `dra check-config`'s summary shows it, e.g. `redis 127.0.0.1:6379`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuSource::Procfs(ProcTarget::Process(n)) => write!(f, "procfs process {n}"),
            CpuSource::Procfs(ProcTarget::PidFile(p)) => {
                write!(f, "procfs pid file {}", p.display())
            }
            CpuSource::Procfs(ProcTarget::Host) => write!(f, "procfs host"),
            CpuSource::Redis { address } => write!(f, "redis {address}"),
            CpuSource::RedisCluster {
                addresses,
                aggregate,
            } => {
                let a: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
                let agg = match aggregate {
                    Aggregate::Max => "max",
                    Aggregate::Mean => "mean",
                };
                write!(f, "redis_cluster {} ({agg} of the masters)", a.join(","))
            }
            CpuSource::Prometheus { url, query } => write!(f, "prometheus {url} query {query:?}"),
            CpuSource::File { path } => write!(f, "file {}", path.display()),
        }
    }
}

/// The source table as written: `kind` and every kind's keys, checked per kind by
/// [`check`] (a serde internally-tagged enum would lose the spans).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    pub kind: S<String>,
    pub process: Option<S<String>>,
    pub pid_file: Option<S<String>>,
    pub host: Option<S<bool>>,
    pub address: Option<S<String>>,
    pub addresses: Option<Vec<S<String>>>,
    pub aggregate: Option<S<String>>,
    pub url: Option<S<String>>,
    pub query: Option<S<String>>,
    pub path: Option<S<String>>,
}

impl RawSource {
    /// Every key but `kind`, in field order, with its span when it is set.
    fn keys_set(&self) -> [(&'static str, Option<Span>); 9] {
        [
            ("process", self.process.as_ref().map(|v| v.span())),
            ("pid_file", self.pid_file.as_ref().map(|v| v.span())),
            ("host", self.host.as_ref().map(|v| v.span())),
            ("address", self.address.as_ref().map(|v| v.span())),
            (
                "addresses",
                self.addresses
                    .as_ref()
                    .and_then(|v| v.first())
                    .map(|v| v.span()),
            ),
            ("aggregate", self.aggregate.as_ref().map(|v| v.span())),
            ("url", self.url.as_ref().map(|v| v.span())),
            ("query", self.query.as_ref().map(|v| v.span())),
            ("path", self.path.as_ref().map(|v| v.span())),
        ]
    }
}

/// The kinds, as `kind = "..."` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SourceKind {
    Procfs,
    Redis,
    RedisCluster,
    Prometheus,
    File,
}

config_names!(SourceKind {
    Procfs => "procfs",
    Redis => "redis",
    RedisCluster => "redis_cluster",
    Prometheus => "prometheus",
    File => "file",
});

impl SourceKind {
    /// The keys this kind takes besides `kind`; any other key is refused.
    fn keys(self) -> &'static [&'static str] {
        match self {
            SourceKind::Procfs => &["process", "pid_file", "host"],
            SourceKind::Redis => &["address"],
            SourceKind::RedisCluster => &["addresses", "aggregate"],
            SourceKind::Prometheus => &["url", "query"],
            SourceKind::File => &["path"],
        }
    }

    /// Checks this kind's keys; `span` is the source table's (for missing keys).
    fn check(self, e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
        match self {
            SourceKind::Procfs => procfs(e, s, span),
            SourceKind::Redis => redis(e, s, span),
            SourceKind::RedisCluster => redis_cluster(e, s, span),
            SourceKind::Prometheus => prometheus(e, s, span),
            SourceKind::File => file(e, s, span),
        }
    }
}

/// Checks a source table: its kind, that it sets only that kind's keys, and the keys.
pub(super) fn check(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let kind: SourceKind = choice(e, "source kind", &s.kind)?;
    let allowed = kind.keys();
    let mut ok = true;
    for (key, sp) in s.keys_set() {
        if let Some(sp) = sp
            && !allowed.contains(&key)
        {
            e.at(
                &sp,
                format!(
                    "{key} does not apply to kind = \"{}\" (it takes {})",
                    s.kind.get_ref(),
                    allowed.join(", ")
                ),
            );
            ok = false;
        }
    }
    let out = kind.check(e, s, span);
    if ok { out } else { None }
}

/// Records that the source table lacks `what`.
fn missing(e: &mut Errors<'_>, s: &RawSource, span: &Span, what: &str) {
    e.at(
        span,
        format!("source kind = \"{}\" needs {what}", s.kind.get_ref()),
    );
}

/// `kind = "procfs"`: exactly one of `process`, `pid_file`, `host = true`.
fn procfs(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let host = s.host.as_ref().filter(|h| *h.get_ref());
    match (&s.process, &s.pid_file, host) {
        (Some(p), None, None) if !p.get_ref().is_empty() => {
            Some(CpuSource::Procfs(ProcTarget::Process(p.get_ref().clone())))
        }
        (Some(p), None, None) => {
            e.at(&p.span(), "process must not be empty");
            None
        }
        (None, Some(f), None) => {
            absolute_path(e, "pid_file", f).map(|p| CpuSource::Procfs(ProcTarget::PidFile(p)))
        }
        (None, None, Some(_)) => Some(CpuSource::Procfs(ProcTarget::Host)),
        (None, None, None) => {
            missing(
                e,
                s,
                span,
                "one of process = \"redis-server\", pid_file = \"/run/...\" or host = true",
            );
            None
        }
        _ => {
            e.at(
                span,
                "procfs source takes exactly one of process, pid_file or host = true",
            );
            None
        }
    }
}

/// `kind = "redis"`: `address`.
fn redis(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let Some(a) = &s.address else {
        missing(e, s, span, "address = \"127.0.0.1:6379\"");
        return None;
    };
    socket_addr(e, "address", a, "127.0.0.1:6379").map(|address| CpuSource::Redis { address })
}

/// `kind = "redis_cluster"`: `addresses` (one or more seed nodes), `aggregate`.
fn redis_cluster(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let list = match &s.addresses {
        Some(l) if !l.is_empty() => l,
        _ => {
            missing(
                e,
                s,
                span,
                "addresses = [\"198.18.0.10:7000\", ...] (one or more cluster nodes)",
            );
            return None;
        }
    };
    let addresses: Vec<SocketAddr> = list
        .iter()
        .filter_map(|a| socket_addr(e, "addresses", a, "198.18.0.10:7000"))
        .collect();
    let aggregate = match &s.aggregate {
        None => Aggregate::Max,
        Some(a) => match a.get_ref().as_str() {
            "max" => Aggregate::Max,
            "mean" => Aggregate::Mean,
            other => {
                e.at(
                    &a.span(),
                    format!(
                        "aggregate = \"{other}\" is not valid; expected one of \"max\", \"mean\""
                    ),
                );
                return None;
            }
        },
    };
    (addresses.len() == list.len()).then_some(CpuSource::RedisCluster {
        addresses,
        aggregate,
    })
}

/// `kind = "prometheus"`: `url` and `query`. The URL is checked by the source's own rule
/// ([`PrometheusCpu::check_base_url`]), so `dra check-config` accepts exactly the URLs
/// `dra run` can open (no `https://`: the source has no TLS).
fn prometheus(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let (Some(u), Some(q)) = (&s.url, &s.query) else {
        missing(e, s, span, "url = \"http://...\" and query = \"...\"");
        return None;
    };
    let url = u.get_ref();
    let url_ok = match PrometheusCpu::check_base_url(url) {
        Ok(()) => true,
        Err(reason) => {
            e.at(&u.span(), format!("bad url \"{url}\": {reason}"));
            false
        }
    };
    let query_ok = !q.get_ref().trim().is_empty();
    if !query_ok {
        e.at(&q.span(), "query must not be empty");
    }
    (url_ok && query_ok).then(|| CpuSource::Prometheus {
        url: url.clone(),
        query: q.get_ref().clone(),
    })
}

/// `kind = "file"`: `path`.
fn file(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let Some(p) = &s.path else {
        missing(e, s, span, "path = \"/run/dra/db_cpu\"");
        return None;
    };
    absolute_path(e, "path", p).map(|path| CpuSource::File { path })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigName;
    use crate::config::raw::fields_of;

    /// `kind`, then every kind's keys in kind order, each once.
    fn all_keys() -> Vec<&'static str> {
        let mut keys = vec!["kind"];
        for kind in SourceKind::ALL {
            for key in kind.keys() {
                if !keys.contains(key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    #[test]
    fn the_raw_table_has_exactly_the_keys_of_the_kinds() {
        assert_eq!(fields_of::<RawSource>(), all_keys());
        let none = RawSource {
            kind: S::new(0..0, String::new()),
            process: None,
            pid_file: None,
            host: None,
            address: None,
            addresses: None,
            aggregate: None,
            url: None,
            query: None,
            path: None,
        };
        let listed: Vec<&str> = none.keys_set().iter().map(|(k, _)| *k).collect();
        assert_eq!(listed, all_keys()[1..]);
    }

    #[test]
    fn every_kind_and_its_keys_are_in_the_table_of_kinds_in_docs_config_md() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md"))
                .unwrap();
        let rows: Vec<&str> = doc
            .lines()
            .skip_while(|l| !l.starts_with("| `kind` | Keys |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        let documented: Vec<&str> = rows
            .iter()
            .filter_map(|r| r.strip_prefix("| `\"")?.split_once("\"`").map(|(k, _)| k))
            .collect();
        let kinds: Vec<&str> = SourceKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(documented, kinds, "docs/config.md, `source` kinds");
        for (kind, row) in SourceKind::ALL.iter().zip(&rows) {
            for key in kind.keys() {
                assert!(
                    row.contains(&format!("`{key}")),
                    "{key} of {} not documented: {row}",
                    kind.name()
                );
            }
        }
    }
}
