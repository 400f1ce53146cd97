//! The value syntaxes the tables share (docs/config.md, "Value syntax"): each check
//! records an error at the value's span and returns `None` (or the default) when the
//! value is not valid.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use dra_common::wire::{app, cmd};

use crate::config::error::Errors;
use crate::config::raw::{NameOrNumber, S};
use crate::config::values::{self, RequestType};
use crate::config::{ConfigName, MessageClass};

fn quoted(options: &[&str]) -> String {
    options
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One of a fixed set of names.
pub(in crate::config) fn choice<T: ConfigName>(
    e: &mut Errors<'_>,
    key: &str,
    v: &S<String>,
) -> Option<T> {
    if let Some(t) = T::from_name(v.get_ref()) {
        return Some(t);
    }
    let names: Vec<&str> = T::ALL.iter().map(|t| t.name()).collect();
    e.at(
        &v.span(),
        format!(
            "{key} = \"{}\" is not valid; expected {}{}",
            v.get_ref(),
            if names.len() > 1 { "one of " } else { "" },
            quoted(&names)
        ),
    );
    None
}

pub(super) fn choice_or<T: ConfigName>(
    e: &mut Errors<'_>,
    key: &str,
    v: &Option<S<String>>,
    default: T,
) -> T {
    match v {
        Some(v) => choice(e, key, v).unwrap_or(default),
        None => default,
    }
}

/// An integer in `lo..=hi`.
pub(super) fn int_in(
    e: &mut Errors<'_>,
    key: &str,
    v: &S<i64>,
    lo: i64,
    hi: i64,
    hint: &str,
) -> Option<i64> {
    let n = *v.get_ref();
    if (lo..=hi).contains(&n) {
        Some(n)
    } else {
        e.at(
            &v.span(),
            format!("{key} must be between {lo} and {hi}{hint}, got {n}"),
        );
        None
    }
}

pub(super) fn u32_in(
    e: &mut Errors<'_>,
    key: &str,
    v: &Option<S<i64>>,
    lo: u32,
    hi: u32,
    default: u32,
) -> u32 {
    match v {
        Some(v) => int_in(e, key, v, lo.into(), hi.into(), "")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(default),
        None => default,
    }
}

pub(super) fn duration(
    e: &mut Errors<'_>,
    key: &str,
    v: &Option<S<String>>,
    default: Duration,
) -> Duration {
    let Some(v) = v else { return default };
    match values::parse_duration(v.get_ref()) {
        Ok(d) => d,
        Err(err) => {
            e.at(
                &v.span(),
                format!("bad duration for {key} \"{}\": {err}", v.get_ref()),
            );
            default
        }
    }
}

pub(super) fn positive_duration(
    e: &mut Errors<'_>,
    key: &str,
    v: &Option<S<String>>,
    default: Duration,
) -> Duration {
    let d = duration(e, key, v, default);
    if d.is_zero() {
        if let Some(v) = v {
            e.at(&v.span(), format!("{key} must be longer than 0s"));
        }
        return default;
    }
    d
}

pub(in crate::config) fn socket_addr(
    e: &mut Errors<'_>,
    key: &str,
    v: &S<String>,
    example: &str,
) -> Option<SocketAddr> {
    match SocketAddr::from_str(v.get_ref().trim()) {
        Ok(a) if a.port() == 0 => {
            e.at(
                &v.span(),
                format!("{key} \"{}\" needs a port other than 0", v.get_ref()),
            );
            None
        }
        Ok(a) => Some(a),
        Err(_) => {
            e.at(
                &v.span(),
                format!(
                    "bad socket address for {key} \"{}\": expected IP:port like {example} \
                     (IPv6: [2001:db8::1]:3868)",
                    v.get_ref()
                ),
            );
            None
        }
    }
}

pub(in crate::config) fn absolute_path(
    e: &mut Errors<'_>,
    key: &str,
    v: &S<String>,
) -> Option<PathBuf> {
    let p = v.get_ref();
    if p.is_empty() || !p.starts_with('/') {
        e.at(
            &v.span(),
            format!("{key} must be an absolute path, got \"{p}\""),
        );
        return None;
    }
    Some(PathBuf::from(p))
}

/// A config name (peer, group): letters, digits, `_`, `-`, `.`.
pub(super) fn name(e: &mut Errors<'_>, what: &str, v: &S<String>) -> Option<String> {
    let n = v.get_ref();
    if n.is_empty()
        || n.len() > 64
        || !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        e.at(
            &v.span(),
            format!("bad {what} name \"{n}\": use 1-64 letters, digits, '_', '-' or '.'"),
        );
        return None;
    }
    Some(n.clone())
}

/// An optional text `key` that must not be blank when given (`None`, an error, if it is);
/// `default()` when it is absent.
pub(super) fn text_or(
    e: &mut Errors<'_>,
    key: &str,
    v: &Option<S<String>>,
    default: impl FnOnce() -> Option<String>,
) -> Option<String> {
    match v {
        Some(v) if v.get_ref().trim().is_empty() => {
            e.at(
                &v.span(),
                format!("{key} must not be empty (omit it for the default)"),
            );
            None
        }
        Some(v) => Some(v.get_ref().clone()),
        None => default(),
    }
}

/// A DiameterIdentity (host or realm, RFC 6733 §4.3.1): a non-empty FQDN.
pub(super) fn identity(e: &mut Errors<'_>, key: &str, v: &S<String>) -> Option<String> {
    let n = v.get_ref();
    let ok = !n.is_empty()
        && n.len() <= 255
        && !n.starts_with('.')
        && !n.ends_with('.')
        && !n.contains("..")
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if !ok {
        e.at(
            &v.span(),
            format!("bad {key} \"{n}\": expected a DiameterIdentity (FQDN) like host.lab.example"),
        );
        return None;
    }
    Some(n.clone())
}

pub(super) fn percent(e: &mut Errors<'_>, key: &str, v: &S<i64>) -> Option<u8> {
    int_in(e, key, v, 0, 100, " %").map(|n| n as u8)
}

pub(super) fn application(e: &mut Errors<'_>, v: &S<NameOrNumber>) -> Option<u32> {
    match v.get_ref() {
        NameOrNumber::Name(n) => match values::APPLICATIONS.iter().find(|(a, _)| a == n) {
            Some((_, id)) => Some(*id),
            None => {
                e.at(
                    &v.span(),
                    format!(
                        "unknown application \"{n}\"; expected {} or a numeric application id",
                        quoted(
                            &values::APPLICATIONS
                                .iter()
                                .map(|(a, _)| *a)
                                .collect::<Vec<_>>()
                        )
                    ),
                );
                None
            }
        },
        NameOrNumber::Number(n) => {
            if *n == i64::from(app::COMMON) {
                e.at(
                    &v.span(),
                    "application 0 is the Diameter base protocol; limit peers with \
                     [[peer_rate_limit_profile]] instead",
                );
                None
            } else if (1..=i64::from(u32::MAX)).contains(n) {
                Some(*n as u32)
            } else {
                e.at(
                    &v.span(),
                    format!("application id must be between 1 and {}, got {n}", u32::MAX),
                );
                None
            }
        }
    }
}

pub(super) fn command(e: &mut Errors<'_>, v: &S<NameOrNumber>) -> Option<u32> {
    let code = match v.get_ref() {
        NameOrNumber::Name(n) => match values::COMMANDS.iter().find(|(c, _)| c == n) {
            Some((_, code)) => *code,
            None => {
                e.at(
                    &v.span(),
                    format!(
                        "unknown command \"{n}\"; expected {} or a numeric command code",
                        quoted(&values::COMMANDS.iter().map(|(c, _)| *c).collect::<Vec<_>>())
                    ),
                );
                return None;
            }
        },
        // RFC 6733 §3: the command code is 24 bits.
        NameOrNumber::Number(n) if (1..=0xff_ffff).contains(n) => *n as u32,
        NameOrNumber::Number(n) => {
            e.at(
                &v.span(),
                format!(
                    "command code must be between 1 and 16777215 (24 bits, RFC 6733 §3), got {n}"
                ),
            );
            return None;
        }
    };
    if values::BASE_COMMANDS.contains(&code) {
        e.at(
            &v.span(),
            format!(
                "command {code} is a base protocol command (CER/DWR/DPR, RFC 6733 §5); limiting \
                 it would break the peer connection"
            ),
        );
        return None;
    }
    Some(code)
}

/// application + command + request_type of a message profile or DRL class.
pub(super) fn class(
    e: &mut Errors<'_>,
    application_v: &S<NameOrNumber>,
    command_v: &S<NameOrNumber>,
    request_type_v: &Option<S<String>>,
) -> Option<MessageClass> {
    let application = application(e, application_v);
    let command = command(e, command_v);
    let request_type = match request_type_v {
        None => Some(RequestType::Any),
        Some(v) => match RequestType::from_name(v.get_ref()) {
            Some(rt)
                if rt != RequestType::Any && command.is_some_and(|c| c != cmd::CREDIT_CONTROL) =>
            {
                e.at(
                    &v.span(),
                    "request_type applies only to command = \"ccr\" \
                     (CC-Request-Type, RFC 4006 §8.3)",
                );
                None
            }
            Some(rt) => Some(rt),
            None => {
                e.at(
                    &v.span(),
                    format!(
                        "unknown request_type \"{}\"; expected one of {}",
                        v.get_ref(),
                        quoted(RequestType::NAMES)
                    ),
                );
                None
            }
        },
    };
    Some(MessageClass {
        application: application?,
        command: command?,
        request_type: request_type?,
    })
}
