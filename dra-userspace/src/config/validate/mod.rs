//! Raw config → [`Config`], collecting every error with its span.
//!
//! Each check records its error and carries on with what it could resolve, so one
//! pass reports everything; the partial result is thrown away when anything failed.
//! Errors are recorded in [`Errors`] (byte span → `file:line:column`) and sorted by
//! position at the end, so the order of the checks only matters for errors at the same
//! position.
//!
//! One file per part of the file format, in the order of `raw.rs` and
//! `docs/config.md`:
//!
//! - `scalars.rs`: `[global]`, `[fast_path]`, `[metrics]`, `[control]`, `[[listener]]`;
//! - `peers.rs`: `[[peer_group]]`, `[[peer]]`;
//! - `limits.rs`: `[[peer_rate_limit_profile]]`, `[[message_rate_limit_profile]]` and
//!   `[[dynamic_peer_rate_limit_profile]]` (which of those limits DRL scales);
//! - `session_store.rs`: `[session_store]`;
//! - `db_cpu.rs`: `[dynamic_throttling_db_cpu_profile]`;
//! - `routes.rs`: `[[route]]`;
//! - `tls.rs`: the `tls` tables of `[[listener]]` and `[[peer]]` (their files are read
//!   and checked);
//! - `enforcement.rs`: which part of `dra` enforces each limit in the setup it runs
//!   with (only for [`super::parse_for`]: `dra check-config`, `dra run`);
//! - `syntax.rs`: the value syntaxes the tables share (durations, socket addresses,
//!   names, identities, percentages, applications, commands, ...).
//!
//! This file holds the entry point and what relates tables to each other: references
//! to peers and groups (`peer = ...` / `group = ...`) and duplicate detection.

use std::collections::HashMap;
use std::ops::Range;

use super::error::Errors;
use super::raw::{RawConfig, S};
use super::{Config, Setup, Target};

mod db_cpu;
pub(super) mod enforcement;
mod limits;
pub(super) mod overload;
mod peers;
mod routes;
mod scalars;
mod session_store;
pub(super) mod syntax;
mod tls;

type Span = Range<usize>;

/// Names a reference may point to, with where each was defined.
struct Known<'n> {
    what: &'static str,
    names: &'n [String],
}

impl Known<'_> {
    fn check(&self, e: &mut Errors<'_>, v: &S<String>) -> Option<String> {
        let name = v.get_ref();
        if self.names.iter().any(|n| n == name) {
            return Some(name.clone());
        }
        let mut list: Vec<&str> = self.names.iter().map(String::as_str).collect();
        list.dedup();
        let known = if list.is_empty() {
            format!("no [[{}]] is defined", self.table())
        } else if list.len() > 8 {
            format!("known: {}, …", list[..8].join(", "))
        } else {
            format!("known: {}", list.join(", "))
        };
        e.at(
            &v.span(),
            format!("unknown {} \"{name}\" ({known})", self.what),
        );
        None
    }

    fn table(&self) -> &'static str {
        if self.what == "peer" {
            "peer"
        } else {
            "peer_group"
        }
    }
}

/// `peer = ...` xor `group = ...` of a profile or route.
impl Refs<'_> {
    /// The `peer` or `group` of a `[[table]]` entry: exactly one must be set, to a
    /// configured name.
    fn target(
        &self,
        e: &mut Errors<'_>,
        table: &str,
        span: &Span,
        peer: &Option<S<String>>,
        group: &Option<S<String>>,
    ) -> Option<Target> {
        match (peer, group) {
            (Some(_), Some(g)) => {
                e.at(
                    &g.span(),
                    format!("[[{table}]] sets both peer and group; set exactly one"),
                );
                None
            }
            (None, None) => {
                e.at(
                    span,
                    format!(
                        "[[{table}]] needs a target: set exactly one of peer = \"...\" or \
                         group = \"...\""
                    ),
                );
                None
            }
            (Some(p), None) => self.peers.check(e, p).map(Target::Peer),
            (None, Some(g)) => self.groups.check(e, g).map(Target::Group),
        }
    }
}

/// Records `why(key)` at each key of `keys` that is set: keys that do not belong where
/// they are.
fn refuse_keys(e: &mut Errors<'_>, keys: &[(&str, Option<Span>)], why: impl Fn(&str) -> String) {
    for (key, span) in keys {
        if let Some(span) = span {
            e.at(span, why(key));
        }
    }
}

fn target_label(t: &Target) -> String {
    match t {
        Target::Peer(n) => format!("peer \"{n}\""),
        Target::Group(n) => format!("group \"{n}\""),
    }
}

/// Records a duplicate when `key` was seen before; otherwise remembers its span.
fn unique<K: std::hash::Hash + Eq>(
    e: &mut Errors<'_>,
    seen: &mut HashMap<K, Span>,
    key: K,
    span: &Span,
    what: impl FnOnce() -> String,
) -> bool {
    if let Some(first) = seen.get(&key) {
        let line = e.line_of(first);
        e.at(span, format!("{} (first at line {line})", what()));
        false
    } else {
        seen.insert(key, span.clone());
        true
    }
}

/// The names references may point to.
struct Refs<'n> {
    peers: Known<'n>,
    groups: Known<'n>,
}

/// Checks every table, in the order of the file format, then — for a `setup`, when
/// nothing else failed — that some part of that setup enforces every limit. The result
/// is only usable when no error was recorded in `e` (the caller checks).
pub(super) fn validate(
    raw: RawConfig,
    e: &mut Errors<'_>,
    setup: Option<&Setup>,
) -> Option<Config> {
    let refs = Refs {
        peers: Known {
            what: "peer",
            names: &raw.peer_names,
        },
        groups: Known {
            what: "peer group",
            names: &raw.group_names,
        },
    };
    let global = scalars::global(e, &raw);
    let (fast_path, metrics, control) = scalars::settings(e, &raw);
    let listeners = scalars::listeners(e, &raw, global.as_ref());
    let session_store = session_store::session_store(e, &raw);
    let peer_groups = peers::peer_groups(e, &raw);
    let peers = peers::peers(e, &raw, global.as_ref(), &refs);
    let peer_rate_limits = limits::peer_rate_limits(e, &raw, &refs);
    let message_rate_limits = limits::message_rate_limits(e, &raw, &refs);
    let dynamic_peer_rate_limits = limits::dynamic_profiles(e, &raw, &message_rate_limits, &refs);
    let db_cpu_profile = db_cpu::db_cpu_profile_table(e, &raw);
    let routes = routes::routes(e, &raw, &refs);
    let overload = overload::overload(e, &raw);
    let cfg = Config {
        global: global?,
        fast_path,
        metrics,
        control,
        session_store,
        listeners,
        peers,
        peer_groups,
        peer_rate_limits,
        message_rate_limits,
        dynamic_peer_rate_limits,
        db_cpu_profile,
        routes,
        overload,
    };
    if let Some(setup) = setup
        && e.is_empty()
    {
        enforcement::check(e, &raw, &cfg, setup);
    }
    Some(cfg)
}
