//! `[session_store]`: where Gx/Gy session bindings live (docs/architecture.md §9).

use std::net::SocketAddr;
use std::time::Duration;

use super::refuse_keys;
use super::syntax::{choice_or, int_in, positive_duration};
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig, S};
use crate::config::{SessionStore, StoreKind, StoreOnError};

/// Longest accepted `timeout`: a store call holds a request that long at most.
const MAX_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest accepted `key_prefix`.
const MAX_PREFIX: usize = 64;
/// Most bindings the local cache may be asked to hold.
const MAX_CACHE: i64 = 100_000_000;

/// `[session_store]` (optional: an in-memory store by default).
pub(super) fn session_store(e: &mut Errors<'_>, raw: &RawConfig) -> SessionStore {
    let Some(Item { v: s, span }) = &raw.session_store else {
        return SessionStore::default();
    };
    let d = SessionStore::default();
    let kind = choice_or(e, "kind", &s.kind, d.kind);
    let addresses: Vec<String> = s
        .addresses
        .iter()
        .flatten()
        .filter_map(|a| address(e, a))
        .collect();
    match (kind, &s.addresses) {
        (StoreKind::Memory, Some(list)) if !list.is_empty() => e.at(
            &list[0].span(),
            "addresses are for kind = \"redis\" or \"redis_cluster\"; kind = \"memory\" keeps \
             the bindings in this agent",
        ),
        (StoreKind::Redis, list) if list.as_ref().is_none_or(|l| l.len() != 1) => e.at(
            &list
                .as_ref()
                .and_then(|l| l.get(1))
                .map_or(span.clone(), |a| a.span()),
            "kind = \"redis\" needs exactly one address, like addresses = [\"198.18.0.10:6379\"] \
             (several servers: kind = \"redis_cluster\")",
        ),
        (StoreKind::RedisCluster, list) if list.as_ref().is_none_or(|l| l.is_empty()) => e.at(
            span,
            "kind = \"redis_cluster\" needs the addresses of one or more cluster nodes, like \
             addresses = [\"198.18.0.10:7000\", \"198.18.0.11:7000\"]",
        ),
        _ => {}
    }
    let timeout = positive_duration(e, "timeout", &s.timeout, d.timeout);
    if timeout > MAX_TIMEOUT
        && let Some(v) = &s.timeout
    {
        e.at(
            &v.span(),
            format!(
                "timeout is at most {}s: a request waits that long for the store",
                MAX_TIMEOUT.as_secs()
            ),
        );
    }
    let key_prefix = match &s.key_prefix {
        Some(v) => {
            let p = v.get_ref();
            if p.len() > MAX_PREFIX || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                e.at(
                    &v.span(),
                    format!("key_prefix is at most {MAX_PREFIX} characters without spaces"),
                );
            }
            p.clone()
        }
        None => d.key_prefix,
    };
    let on_error = choice_or(e, "on_error", &s.on_error, d.on_error);
    if on_error != StoreOnError::Reject {
        let keys = [
            ("result_code", s.result_code.as_ref().map(|v| v.span())),
            ("error_message", s.error_message.as_ref().map(|v| v.span())),
        ];
        refuse_keys(e, &keys, |key| {
            format!("{key} is only used with on_error = \"reject\"")
        });
    }
    let result_code = s
        .result_code
        .as_ref()
        .and_then(|v| {
            int_in(
                e,
                "result_code",
                v,
                3000,
                5999,
                " (an error the gateway can act on, e.g. 3002 UNABLE_TO_DELIVER, 3004 \
                 TOO_BUSY, 5012 UNABLE_TO_COMPLY)",
            )
        })
        .map_or(d.result_code, |n| n as u32);
    let cache_capacity = s
        .cache_capacity
        .as_ref()
        .and_then(|v| int_in(e, "cache_capacity", v, 1, MAX_CACHE, ""))
        .map_or(d.cache_capacity, |n| n as usize);
    SessionStore {
        kind,
        addresses,
        ttl: positive_duration(e, "ttl", &s.ttl, d.ttl),
        timeout,
        key_prefix,
        write: choice_or(e, "write", &s.write, d.write),
        on_error,
        result_code,
        error_message: s
            .error_message
            .as_ref()
            .map_or(d.error_message, |m| m.get_ref().clone()),
        cache_capacity,
    }
}

/// `host:port` (an IP address, `[IPv6]`, or a DNS name) with a port other than 0.
fn address(e: &mut Errors<'_>, v: &S<String>) -> Option<String> {
    let a = v.get_ref().trim();
    let ok = match a.parse::<SocketAddr>() {
        Ok(sa) => sa.port() != 0,
        Err(_) => a.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                && port.parse::<u16>().is_ok_and(|p| p != 0)
        }),
    };
    if ok {
        Some(a.to_owned())
    } else {
        e.at(
            &v.span(),
            format!(
                "bad store address \"{a}\": expected host:port like 198.18.0.10:6379 \
                 ([2001:db8::10]:6379 for IPv6)"
            ),
        );
        None
    }
}
