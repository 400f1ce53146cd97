//! Raw config → [`Config`], collecting every error with its span.
//!
//! Each check records its error and carries on with what it could resolve, so one
//! pass reports everything; the partial result is thrown away when anything failed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use dra_common::maps::Action;
use dra_common::wire::{app, cmd};
use ipnet::IpNet;

use super::error::Errors;
use super::raw::{
    Item, NameOrNumber, RawClass, RawConfig, RawDbCpuProfile, RawRateLimit, RawSource,
    RawThreshold, S,
};
use super::values::{self, RequestType};
use super::*;

type Span = Range<usize>;

/// Longest Unix socket path (sun_path is 108 bytes including the NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Longest interface name (IFNAMSIZ − 1).
const MAX_IFNAME: usize = 15;
/// Highest rate the fast path can represent (1 ns per message).
const MAX_RATE: f64 = 1e9;

#[derive(Clone, Copy, PartialEq, Eq)]
enum SourceKind {
    Procfs,
    Redis,
    Prometheus,
    File,
}

config_names!(SourceKind { Procfs => "procfs", Redis => "redis", Prometheus => "prometheus", File => "file" });

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

fn quoted(options: &[&str]) -> String {
    options
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One of a fixed set of names.
fn choice<T: ConfigName>(e: &mut Errors<'_>, key: &str, v: &S<String>) -> Option<T> {
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

fn choice_or<T: ConfigName>(e: &mut Errors<'_>, key: &str, v: &Option<S<String>>, default: T) -> T {
    match v {
        Some(v) => choice(e, key, v).unwrap_or(default),
        None => default,
    }
}

/// An integer in `lo..=hi`.
fn int_in(e: &mut Errors<'_>, key: &str, v: &S<i64>, lo: i64, hi: i64, hint: &str) -> Option<i64> {
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

fn u32_in(
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

fn duration(e: &mut Errors<'_>, key: &str, v: &Option<S<String>>, default: Duration) -> Duration {
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

fn positive_duration(
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

fn socket_addr(e: &mut Errors<'_>, key: &str, v: &S<String>, example: &str) -> Option<SocketAddr> {
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
                    "bad socket address for {key} \"{}\": expected IP:port like {example} (IPv6: [2001:db8::1]:3868)",
                    v.get_ref()
                ),
            );
            None
        }
    }
}

fn absolute_path(e: &mut Errors<'_>, key: &str, v: &S<String>) -> Option<PathBuf> {
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
fn name(e: &mut Errors<'_>, what: &str, v: &S<String>) -> Option<String> {
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

/// A DiameterIdentity (host or realm, RFC 6733 §4.3.1): a non-empty FQDN.
fn identity(e: &mut Errors<'_>, key: &str, v: &S<String>) -> Option<String> {
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

fn interface(e: &mut Errors<'_>, key: &str, v: &Option<S<String>>) -> Option<String> {
    let v = v.as_ref()?;
    let n = v.get_ref();
    if n.is_empty()
        || n.len() > MAX_IFNAME
        || n == "."
        || n == ".."
        || n.chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        e.at(
            &v.span(),
            format!("bad {key} \"{n}\": an interface name is 1-{MAX_IFNAME} characters without '/', ':' or spaces"),
        );
        return None;
    }
    Some(n.clone())
}

/// `peer = ...` xor `group = ...` of a profile or route.
fn target(
    e: &mut Errors<'_>,
    table: &str,
    span: &Span,
    peer: &Option<S<String>>,
    group: &Option<S<String>>,
    peers: &Known<'_>,
    groups: &Known<'_>,
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
                format!("[[{table}]] needs a target: set exactly one of peer = \"...\" or group = \"...\""),
            );
            None
        }
        (Some(p), None) => peers.check(e, p).map(Target::Peer),
        (None, Some(g)) => groups.check(e, g).map(Target::Group),
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

fn application(e: &mut Errors<'_>, v: &S<NameOrNumber>) -> Option<u32> {
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
                    "application 0 is the Diameter base protocol; limit peers with [[peer_rate_limit_profile]] instead",
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

fn command(e: &mut Errors<'_>, v: &S<NameOrNumber>) -> Option<u32> {
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
            format!("command {code} is a base protocol command (CER/DWR/DPR, RFC 6733 §5); limiting it would break the peer connection"),
        );
        return None;
    }
    Some(code)
}

/// application + command + request_type of a message profile or DRL class.
fn class(
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
                    "request_type applies only to command = \"ccr\" (CC-Request-Type, RFC 4006 §8.3)",
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

/// The bucket and action keys shared by both static profile tables.
fn limit(
    e: &mut Errors<'_>,
    r: &RawRateLimit,
    target: Option<&Target>,
    direction: Option<Direction>,
    scope: &str,
) -> Option<Limit> {
    let rate = *r.rate.get_ref();
    let rate_ok = if !rate.is_finite() || rate <= 0.0 {
        e.at(
            &r.rate.span(),
            format!("rate must be > 0 messages/s, got {rate}"),
        );
        false
    } else if rate > MAX_RATE {
        e.at(
            &r.rate.span(),
            format!("rate must be at most {MAX_RATE} messages/s, got {rate}"),
        );
        false
    } else {
        true
    };
    let burst = u32_in(e, "burst", &r.burst, 1, u32::MAX, 1);
    let action = choice_or(e, "action", &r.action, Action::Reject);
    if action == Action::Drop {
        for (key, span) in [
            ("result_code", r.result_code.as_ref().map(|v| v.span())),
            ("error_message", r.error_message.as_ref().map(|v| v.span())),
        ] {
            if let Some(span) = span {
                e.at(
                    &span,
                    format!("{key} has no effect with action = \"drop\" (a dropped request gets no answer); remove it or use action = \"reject\""),
                );
            }
        }
    }
    let result_code = match &r.result_code {
        None => Some(DEFAULT_RESULT_CODE),
        // RFC 6733 §7.1: 3xxx protocol errors, 4xxx transient and 5xxx permanent
        // failures. 1xxx (informational) and 2xxx (success) cannot reject a request.
        Some(v) => int_in(
            e,
            "result_code",
            v,
            3000,
            5999,
            " (a rejection needs a 3xxx protocol error, 4xxx transient or 5xxx permanent failure, e.g. 3002, 3004, 5012; RFC 6733 §7.1)",
        )
        .map(|n| n as u32),
    };
    let error_message = match &r.error_message {
        Some(v) if v.get_ref().trim().is_empty() => {
            e.at(
                &v.span(),
                "error_message must not be empty (omit it for the default)",
            );
            None
        }
        Some(v) => Some(v.get_ref().clone()),
        None => target.zip(direction).map(|(t, d)| {
            let who = match d {
                Direction::Ingress => t.name().to_string(),
                Direction::Egress => format!("egress to {}", t.name()),
            };
            format!("rate limit exceeded: {who} {scope} {rate}/s")
        }),
    };
    if !rate_ok {
        return None;
    }
    Some(Limit {
        rate,
        burst: if r.burst.is_some() {
            burst
        } else {
            default_limit_burst(rate, action)
        },
        action,
        result_code: result_code?,
        error_message: error_message?,
    })
}
/// The names references may point to.
struct Refs<'n> {
    peers: Known<'n>,
    groups: Known<'n>,
}

pub(super) fn validate(raw: RawConfig, e: &mut Errors<'_>) -> Option<Config> {
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
    let global = global(e, &raw);
    let (fast_path, metrics, control) = settings(e, &raw);
    let listeners = listeners(e, &raw, global.as_ref());
    let peer_groups = peer_groups(e, &raw);
    let peers = peers(e, &raw, global.as_ref(), &refs);
    let peer_rate_limits = peer_rate_limits(e, &raw, &refs);
    let message_rate_limits = message_rate_limits(e, &raw, &refs);
    let dynamic_peer_rate_limits = dynamic_profiles(e, &raw, &message_rate_limits, &refs);
    let db_cpu_profile = db_cpu_profile_table(e, &raw);
    let routes = routes(e, &raw, &refs);
    Some(Config {
        global: global?,
        fast_path,
        metrics,
        control,
        listeners,
        peers,
        peer_groups,
        peer_rate_limits,
        message_rate_limits,
        dynamic_peer_rate_limits,
        db_cpu_profile,
        routes,
    })
}

/// `[global]` (required).
fn global(e: &mut Errors<'_>, raw: &RawConfig) -> Option<Global> {
    match &raw.global {
        Some(Item { v: g, .. }) => {
            let origin_host = identity(e, "origin_host", &g.origin_host);
            let origin_realm = identity(e, "origin_realm", &g.origin_realm);
            let product_name = match &g.product_name {
                Some(v) if v.get_ref().trim().is_empty() => {
                    e.at(
                        &v.span(),
                        "product_name must not be empty (omit it for the default)",
                    );
                    None
                }
                Some(v) => Some(v.get_ref().clone()),
                None => Some(DEFAULT_PRODUCT_NAME.to_string()),
            };
            let mut diameter_ports = Vec::new();
            match &g.diameter_ports {
                None => diameter_ports.push(DEFAULT_DIAMETER_PORT),
                Some(list) if list.get_ref().is_empty() => {
                    e.at(&list.span(), "diameter_ports must list at least one port");
                }
                Some(list) => {
                    let mut seen = HashMap::new();
                    for p in list.get_ref() {
                        if let Some(n) = int_in(e, "a port", p, 1, 65535, "")
                            && unique(e, &mut seen, n, &p.span(), || {
                                format!("port {n} listed twice")
                            })
                        {
                            diameter_ports.push(n as u16);
                        }
                    }
                }
            }
            Some(Global {
                origin_host: origin_host.unwrap_or_default(),
                origin_realm: origin_realm.unwrap_or_default(),
                product_name: product_name.unwrap_or_default(),
                dynamic_rate_limiting: g
                    .dynamic_rate_limiting
                    .as_ref()
                    .is_some_and(|v| *v.get_ref()),
                unknown_peer: choice_or(e, "unknown_peer", &g.unknown_peer, UnknownPeer::Pass),
                diameter_ports,
            })
        }
        None => {
            if !raw.global_failed {
                e.at(
                    &(raw.doc_span.start..raw.doc_span.start),
                    "missing [global] table (it needs origin_host and origin_realm)",
                );
            }
            None
        }
    }
}

/// `[fast_path]`, `[metrics]`, `[control]` (all optional).
fn settings(e: &mut Errors<'_>, raw: &RawConfig) -> (FastPath, Metrics, Control) {
    let fast_path = match &raw.fast_path {
        Some(Item { v: f, .. }) => FastPath {
            interface: interface(e, "interface", &f.interface),
            xdp_mode: choice_or(e, "xdp_mode", &f.xdp_mode, XdpMode::Auto),
            egress_interface: interface(e, "egress_interface", &f.egress_interface),
        },
        None => FastPath::default(),
    };
    let metrics = Metrics {
        address: raw
            .metrics
            .as_ref()
            .and_then(|m| m.v.address.as_ref())
            .and_then(|a| socket_addr(e, "address", a, "127.0.0.1:9100")),
    };
    let control = Control {
        socket: raw
            .control
            .as_ref()
            .and_then(|c| c.v.socket.as_ref())
            .and_then(|s| {
                let p = absolute_path(e, "socket", s)?;
                if s.get_ref().len() > MAX_SOCKET_PATH {
                    e.at(
                        &s.span(),
                        format!("socket path is {} bytes; a Unix socket path is at most {MAX_SOCKET_PATH}", s.get_ref().len()),
                    );
                    return None;
                }
                Some(p)
            }),
    };
    (fast_path, metrics, control)
}

/// `[[listener]]`: unique addresses on Diameter ports.
fn listeners(e: &mut Errors<'_>, raw: &RawConfig, global: Option<&Global>) -> Vec<Listener> {
    let mut listeners = Vec::new();
    let mut seen_listeners = HashMap::new();
    for Item { v: l, .. } in &raw.listeners {
        let transport = choice_or(e, "transport", &l.transport, Transport::Tcp);
        let Some(address) = socket_addr(e, "address", &l.address, "198.18.1.1:3868") else {
            continue;
        };
        if !unique(e, &mut seen_listeners, address, &l.address.span(), || {
            format!("listener {address} defined twice")
        }) {
            continue;
        }
        if let Some(g) = &global
            && !g.diameter_ports.contains(&address.port())
        {
            e.at(
                    &l.address.span(),
                    format!(
                        "listener port {} is not in global.diameter_ports {:?}: the fast path would not see its traffic",
                        address.port(),
                        g.diameter_ports
                    ),
                );
        }
        listeners.push(Listener { address, transport });
    }
    listeners
}

/// `[[peer_group]]`.
fn peer_groups(e: &mut Errors<'_>, raw: &RawConfig) -> Vec<PeerGroup> {
    let mut peer_groups = Vec::new();
    let mut seen_groups = HashMap::new();
    for Item { v: g, .. } in &raw.peer_groups {
        let group_name = name(e, "peer group", &g.name);
        if let Some(n) = &group_name {
            unique(e, &mut seen_groups, n.clone(), &g.name.span(), || {
                format!("duplicate peer group name \"{n}\"")
            });
        }
        let answer_timeout = positive_duration(
            e,
            "answer_timeout",
            &g.answer_timeout,
            Duration::from_secs(2),
        );
        let delay_tolerance = duration(e, "delay_tolerance", &g.delay_tolerance, Duration::ZERO);
        let queue_limit = u32_in(e, "queue_limit", &g.queue_limit, 1, 1_000_000, 1000);
        let max_outstanding = g
            .max_outstanding
            .as_ref()
            .and_then(|v| int_in(e, "max_outstanding", v, 1, 1_000_000, "").map(|n| n as u32));
        let selection = choice_or(e, "selection", &g.selection, Selection::RoundRobin);
        if let Some(name) = group_name {
            peer_groups.push(PeerGroup {
                name,
                answer_timeout,
                delay_tolerance,
                queue_limit,
                max_outstanding,
                selection,
            });
        }
    }
    peer_groups
}

/// `[[peer]]`: names, identities, addresses (no overlaps), group membership.
fn peers(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    global: Option<&Global>,
    refs: &Refs<'_>,
) -> Vec<Peer> {
    let mut peers = Vec::new();
    let mut seen_peers = HashMap::new();
    let mut seen_hosts: HashMap<String, Span> = HashMap::new();
    // Every address so far: (prefix, peer name, span).
    let mut all_prefixes: Vec<(IpNet, String, Span)> = Vec::new();
    let mut needs_listener: Option<Span> = None;
    for Item { v: p, .. } in &raw.peers {
        let peer_name = name(e, "peer", &p.name);
        if let Some(n) = &peer_name {
            unique(e, &mut seen_peers, n.clone(), &p.name.span(), || {
                format!("duplicate peer name \"{n}\"")
            });
        }
        let origin_host = identity(e, "origin_host", &p.origin_host);
        if let Some(h) = &origin_host {
            if global
                .as_ref()
                .is_some_and(|g| g.origin_host.eq_ignore_ascii_case(h))
            {
                e.at(
                    &p.origin_host.span(),
                    format!("origin_host \"{h}\" is the agent's own global.origin_host"),
                );
            } else {
                // DiameterIdentity is an FQDN: compared case-insensitively.
                unique(
                    e,
                    &mut seen_hosts,
                    h.to_ascii_lowercase(),
                    &p.origin_host.span(),
                    || format!("duplicate origin_host \"{h}\""),
                );
            }
        }
        let realm = identity(e, "realm", &p.realm);
        let role = choice(e, "role", &p.role);
        let group = p.group.as_ref().and_then(|g| refs.groups.check(e, g));
        let connect = p.connect.as_ref().and_then(|c| {
            let a = socket_addr(e, "connect", c, "198.18.2.2:3868")?;
            if role == Some(Role::Client) {
                e.at(
                    &c.span(),
                    "connect is only for role = \"server\" (clients connect to a [[listener]])",
                );
                return None;
            }
            Some(a)
        });
        if connect.is_none() && needs_listener.is_none() && role.is_some() {
            needs_listener = Some(p.name.span());
        }
        let weight = u32_in(e, "weight", &p.weight, 1, 65535, 1);
        let connection_guard = p.connection_rate.as_ref().and_then(|r| {
            let rate = *r.get_ref();
            if !rate.is_finite() || rate <= 0.0 {
                e.at(
                    &r.span(),
                    format!("connection_rate must be > 0 connections/s, got {rate}"),
                );
                return None;
            }
            let burst = u32_in(
                e,
                "connection_burst",
                &p.connection_burst,
                1,
                u32::MAX,
                default_burst(rate),
            );
            Some(Limit {
                rate,
                burst,
                action: Action::Drop,
                result_code: 0,
                error_message: String::new(),
            })
        });
        if p.connection_rate.is_none()
            && let Some(b) = &p.connection_burst
        {
            e.at(&b.span(), "connection_burst needs connection_rate");
        }
        let mut addresses = Vec::new();
        for a in p.addresses.iter().flatten() {
            let net = match values::parse_prefix(a.get_ref()) {
                Ok(net) => net,
                Err(err) => {
                    e.at(&a.span(), err.to_string());
                    continue;
                }
            };
            let this = p.name.get_ref();
            if let Some((other, owner, span)) = all_prefixes
                .iter()
                .find(|(other, _, _)| values::prefixes_overlap(&net, other))
            {
                let line = e.line_of(span);
                let msg = if owner == this {
                    format!(
                        "address {net} overlaps {other}, already listed for this peer (line {line})"
                    )
                } else {
                    format!(
                        "address {net} of peer \"{this}\" overlaps {other} of peer \"{owner}\" (line {line}); the fast path could not tell them apart"
                    )
                };
                e.at(&a.span(), msg);
                continue;
            }
            all_prefixes.push((net, this.clone(), a.span()));
            addresses.push(net);
        }
        if let (Some(name), Some(origin_host), Some(realm), Some(role)) =
            (peer_name, origin_host, realm, role)
        {
            peers.push(Peer {
                name,
                origin_host,
                realm,
                addresses,
                role,
                group,
                connect,
                weight,
                connection_guard,
            });
        }
    }
    if let Some(span) = needs_listener
        && raw.listeners.is_empty()
    {
        e.at(
            &span,
            "this peer connects to the agent (no connect = ...), but no [[listener]] is configured",
        );
    }
    // A group nobody belongs to can never deliver (only when every peer parsed, so a
    // broken [[peer]] entry does not cause a follow-on error here).
    if raw.peers_failed == 0 {
        for Item { v: g, .. } in &raw.peer_groups {
            let n = g.name.get_ref();
            if !raw
                .peers
                .iter()
                .any(|p| p.v.group.as_ref().is_some_and(|pg| pg.get_ref() == n))
            {
                e.at(
                    &g.name.span(),
                    format!("peer group \"{n}\" has no members (set group = \"{n}\" on its [[peer]] entries)"),
                );
            }
        }
    }
    peers
}

/// `[[peer_rate_limit_profile]]`.
fn peer_rate_limits(e: &mut Errors<'_>, raw: &RawConfig, refs: &Refs<'_>) -> Vec<PeerRateLimit> {
    let mut peer_rate_limits = Vec::new();
    let mut seen_plimits = HashMap::new();
    for Item { v: r, span } in &raw.peer_rate_limits {
        for (key, v) in [
            ("application", r.application.as_ref().map(|v| v.span())),
            ("command", r.command.as_ref().map(|v| v.span())),
            ("request_type", r.request_type.as_ref().map(|v| v.span())),
        ] {
            if let Some(s) = v {
                e.at(
                    &s,
                    format!("{key} belongs in [[message_rate_limit_profile]]; a peer profile limits all requests of the peer or group"),
                );
            }
        }
        let target = target(
            e,
            "peer_rate_limit_profile",
            span,
            &r.peer,
            &r.group,
            &refs.peers,
            &refs.groups,
        );
        let direction = choice(e, "direction", &r.direction);
        let limit = limit(e, r, target.as_ref(), direction, "overall");
        if let (Some(target), Some(direction), Some(limit)) = (target, direction, limit)
            && unique(
                e,
                &mut seen_plimits,
                (target.clone(), direction),
                span,
                || {
                    format!(
                        "second {} peer profile for {}",
                        direction.name(),
                        target_label(&target)
                    )
                },
            )
        {
            peer_rate_limits.push(PeerRateLimit {
                target,
                direction,
                limit,
            });
        }
    }
    peer_rate_limits
}

/// `[[message_rate_limit_profile]]`.
fn message_rate_limits(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    refs: &Refs<'_>,
) -> Vec<MessageRateLimit> {
    let mut message_rate_limits = Vec::new();
    let mut seen_mlimits = HashMap::new();
    for Item { v: r, span } in &raw.message_rate_limits {
        let target = target(
            e,
            "message_rate_limit_profile",
            span,
            &r.peer,
            &r.group,
            &refs.peers,
            &refs.groups,
        );
        let direction = choice(e, "direction", &r.direction);
        let class = match (&r.application, &r.command) {
            (Some(a), Some(c)) => class(e, a, c, &r.request_type),
            (a, c) => {
                let missing: Vec<&str> = [("application", a.is_none()), ("command", c.is_none())]
                    .iter()
                    .filter(|(_, m)| *m)
                    .map(|(k, _)| *k)
                    .collect();
                e.at(
                    span,
                    format!("[[message_rate_limit_profile]] is missing {} (e.g. application = \"gx\", command = \"ccr\")", missing.join(" and ")),
                );
                None
            }
        };
        let scope = class.map(|c| c.to_string()).unwrap_or_default();
        let limit = limit(e, r, target.as_ref(), direction, &scope);
        if let (Some(target), Some(direction), Some(class), Some(limit)) =
            (target, direction, class, limit)
            && unique(
                e,
                &mut seen_mlimits,
                (target.clone(), direction, class),
                span,
                || {
                    format!(
                        "second {} profile for {} {class}",
                        direction.name(),
                        target_label(&target)
                    )
                },
            )
        {
            message_rate_limits.push(MessageRateLimit {
                target,
                direction,
                class,
                limit,
            });
        }
    }
    message_rate_limits
}

/// `[[dynamic_peer_rate_limit_profile]]`: each class scales a static ingress rate.
fn dynamic_profiles(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    message_rate_limits: &[MessageRateLimit],
    refs: &Refs<'_>,
) -> Vec<DynamicPeerRateLimit> {
    let all_message_limits_valid = raw.message_limits_failed == 0
        && raw.message_rate_limits.len() == message_rate_limits.len();
    let mut dynamic_peer_rate_limits = Vec::new();
    let mut seen_dyn = HashMap::new();
    for Item { v: d, span } in &raw.dynamic_profiles {
        let target = target(
            e,
            "dynamic_peer_rate_limit_profile",
            span,
            &d.peer,
            &d.group,
            &refs.peers,
            &refs.groups,
        );
        let mut classes = Vec::new();
        let mut class_spans: Vec<(MessageClass, Span)> = Vec::new();
        match &d.classes {
            None => {
                for c in [MessageClass::GX_CCR_I, MessageClass::GX_CCR_T] {
                    classes.push(c);
                    class_spans.push((c, span.clone()));
                }
            }
            Some(list) if list.items.is_empty() && list.failed == 0 => {
                e.at(
                    &list.span,
                    "classes is empty; omit it for the default (Gx CCR-I and Gx CCR-T)",
                );
            }
            Some(list) => {
                let mut seen = HashMap::new();
                for c in &list.items {
                    let RawClass {
                        application,
                        command,
                        request_type,
                    } = &c.v;
                    if let Some(mc) = class(e, application, command, request_type)
                        && unique(e, &mut seen, mc, &c.span, || {
                            format!("class {mc} listed twice")
                        })
                    {
                        classes.push(mc);
                        class_spans.push((mc, c.span.clone()));
                    }
                }
            }
        }
        let Some(target) = target else { continue };
        // Dynamic throttling scales a static ingress rate: each class needs one (only
        // checked when every message profile parsed, to avoid follow-on errors).
        if all_message_limits_valid {
            for (mc, cspan) in &class_spans {
                let has_static = message_rate_limits.iter().any(|m| {
                    m.target == target && m.direction == Direction::Ingress && m.class == *mc
                });
                if !has_static {
                    e.at(
                        cspan,
                        format!(
                            "no static rate for dynamic throttling to scale: add an ingress [[message_rate_limit_profile]] for {} {mc}",
                            target_label(&target)
                        ),
                    );
                }
            }
        }
        if unique(e, &mut seen_dyn, target.clone(), span, || {
            format!(
                "second [[dynamic_peer_rate_limit_profile]] for {}",
                target_label(&target)
            )
        }) {
            dynamic_peer_rate_limits.push(DynamicPeerRateLimit { target, classes });
        }
    }
    dynamic_peer_rate_limits
}

/// `[dynamic_throttling_db_cpu_profile]`, required when DRL is switched on or used.
fn db_cpu_profile_table(e: &mut Errors<'_>, raw: &RawConfig) -> Option<DbCpuProfile> {
    let db_cpu_profile = raw
        .db_cpu_profile
        .as_ref()
        .and_then(|p| db_cpu_profile(e, p));
    if raw.db_cpu_profile.is_none() && !raw.db_cpu_profile_failed {
        let switch = raw
            .global
            .as_ref()
            .and_then(|g| g.v.dynamic_rate_limiting.as_ref())
            .filter(|v| *v.get_ref());
        if let Some(v) = switch {
            e.at(
                &v.span(),
                "dynamic_rate_limiting = true needs a [dynamic_throttling_db_cpu_profile] (thresholds and a CPU source)",
            );
        } else if let Some(first) = raw.dynamic_profiles.first() {
            e.at(
                &first.span,
                "[[dynamic_peer_rate_limit_profile]] needs a [dynamic_throttling_db_cpu_profile] (thresholds and a CPU source)",
            );
        }
    }
    db_cpu_profile
}

/// `[[route]]`.
fn routes(e: &mut Errors<'_>, raw: &RawConfig, refs: &Refs<'_>) -> Vec<Route> {
    let mut routes = Vec::new();
    let mut seen_routes = HashMap::new();
    for Item { v: r, span } in &raw.routes {
        let realm = match r.realm.get_ref().as_str() {
            "*" => Some(RouteRealm::Any),
            s if s.contains('*') => {
                e.at(
                    &r.realm.span(),
                    format!("bad realm \"{s}\": the only wildcard is \"*\" alone (any realm without an exact route)"),
                );
                None
            }
            _ => identity(e, "realm", &r.realm).map(RouteRealm::Exact),
        };
        let application = r.application.as_ref().map(|a| application(e, a));
        let target = target(
            e,
            "route",
            span,
            &r.peer,
            &r.group,
            &refs.peers,
            &refs.groups,
        );
        let weight = u32_in(e, "weight", &r.weight, 1, 65535, 1);
        let (Some(realm), Some(target)) = (realm, target) else {
            continue;
        };
        let Some(application) = application.map_or(Some(None), |a| a.map(Some)) else {
            continue;
        };
        let realm_key = match &realm {
            RouteRealm::Any => "*".to_string(),
            RouteRealm::Exact(s) => s.to_ascii_lowercase(),
        };
        if unique(
            e,
            &mut seen_routes,
            (realm_key, application, target.clone()),
            span,
            || {
                format!(
                    "duplicate route to {} for this realm and application",
                    target_label(&target)
                )
            },
        ) {
            routes.push(Route {
                realm,
                application,
                target,
                weight,
            });
        }
    }
    routes
}

fn percent(e: &mut Errors<'_>, key: &str, v: &S<i64>) -> Option<u8> {
    int_in(e, key, v, 0, 100, " %").map(|n| n as u8)
}

fn db_cpu_profile(e: &mut Errors<'_>, item: &Item<RawDbCpuProfile>) -> Option<DbCpuProfile> {
    const TABLE: &str = "[dynamic_throttling_db_cpu_profile]";
    let p = &item.v;
    let mut thresholds = Vec::new();
    let rows: &[Item<RawThreshold>] = match &p.thresholds {
        None => {
            e.at(
                &item.span,
                format!(
                    "missing key `thresholds` in {TABLE} (rows like {{ cpu = 50, throttle = 20 }})"
                ),
            );
            &[]
        }
        Some(list) => {
            if list.items.is_empty() && list.failed == 0 {
                e.at(
                    &list.span,
                    "thresholds must have at least one { cpu, throttle } row",
                );
            }
            &list.items
        }
    };
    let mut prev: Option<(u8, u8, Span)> = None;
    for row in rows {
        let r = &row.v;
        let (Some(cpu), Some(throttle)) = (
            percent(e, "cpu", &r.cpu),
            percent(e, "throttle", &r.throttle),
        ) else {
            continue;
        };
        if let Some((pcpu, pthrottle, pspan)) = &prev {
            let line = e.line_of(pspan);
            if cpu <= *pcpu {
                e.at(
                    &r.cpu.span(),
                    format!("threshold cpu values must strictly increase: {cpu} follows {pcpu} (line {line})"),
                );
                continue;
            }
            if throttle < *pthrottle {
                e.at(
                    &r.throttle.span(),
                    format!("throttle must not decrease as cpu rises: {throttle} at cpu {cpu} is below {pthrottle} at cpu {pcpu} (line {line})"),
                );
                continue;
            }
        }
        prev = Some((cpu, throttle, r.cpu.span()));
        thresholds.push(Threshold { cpu, throttle });
    }
    let sample_period =
        positive_duration(e, "sample_period", &p.sample_period, Duration::from_secs(1));
    let reversal_hold_time = positive_duration(
        e,
        "reversal_hold_time",
        &p.reversal_hold_time,
        Duration::from_secs(30),
    );
    if reversal_hold_time < sample_period
        && let Some(span) = p
            .reversal_hold_time
            .as_ref()
            .or(p.sample_period.as_ref())
            .map(|v| v.span())
    {
        e.at(
            &span,
            format!(
                "reversal_hold_time {} is shorter than sample_period {}",
                values::format_duration(reversal_hold_time),
                values::format_duration(sample_period)
            ),
        );
    }
    let reversal_step = match &p.reversal_step {
        None => Some(20),
        Some(v) => int_in(
            e,
            "reversal_step",
            v,
            1,
            100,
            " % (0 would never release the throttle)",
        )
        .map(|n| n as u8),
    };
    let ewma_alpha = match &p.ewma_alpha {
        None => None,
        Some(v) => {
            let a = *v.get_ref();
            if a.is_finite() && a > 0.0 && a <= 1.0 {
                Some(a)
            } else {
                e.at(
                    &v.span(),
                    format!("ewma_alpha must be in (0, 1] (1 = no smoothing), got {a}"),
                );
                None
            }
        }
    };
    let missing_after = u32_in(e, "missing_after", &p.missing_after, 1, 1_000_000, 3);
    let on_missing = choice_or(e, "on_missing", &p.on_missing, OnMissing::Hold);
    let source = match &p.source {
        None => {
            e.at(
                &item.span,
                format!("missing key `source` in {TABLE} (e.g. source = {{ kind = \"redis\", address = \"127.0.0.1:6379\" }})"),
            );
            None
        }
        Some(None) => None,
        Some(Some(src)) => source(e, &src.v, &src.span),
    };
    Some(DbCpuProfile {
        thresholds,
        reversal_hold_time,
        reversal_step: reversal_step?,
        sample_period,
        ewma_alpha,
        missing_after,
        on_missing,
        source: source?,
    })
}

fn source(e: &mut Errors<'_>, s: &RawSource, span: &Span) -> Option<CpuSource> {
    let kind = choice(e, "source kind", &s.kind)?;
    let kind_name = s.kind.get_ref();
    // Keys each kind accepts; any other key set is reported.
    let allowed: &[&str] = match kind {
        SourceKind::Procfs => &["process", "pid_file", "host"],
        SourceKind::Redis => &["address"],
        SourceKind::Prometheus => &["url", "query"],
        SourceKind::File => &["path"],
    };
    let present = [
        ("process", s.process.as_ref().map(|v| v.span())),
        ("pid_file", s.pid_file.as_ref().map(|v| v.span())),
        ("host", s.host.as_ref().map(|v| v.span())),
        ("address", s.address.as_ref().map(|v| v.span())),
        ("url", s.url.as_ref().map(|v| v.span())),
        ("query", s.query.as_ref().map(|v| v.span())),
        ("path", s.path.as_ref().map(|v| v.span())),
    ];
    let mut ok = true;
    for (key, sp) in present {
        if let Some(sp) = sp
            && !allowed.contains(&key)
        {
            e.at(
                &sp,
                format!(
                    "{key} does not apply to kind = \"{kind_name}\" (it takes {})",
                    allowed.join(", ")
                ),
            );
            ok = false;
        }
    }
    let missing = |e: &mut Errors<'_>, what: &str| {
        e.at(span, format!("source kind = \"{kind_name}\" needs {what}"));
    };
    let out = match kind {
        SourceKind::Procfs => {
            let host = s.host.as_ref().filter(|h| *h.get_ref());
            match (&s.process, &s.pid_file, host) {
                (Some(p), None, None) if !p.get_ref().is_empty() => {
                    Some(CpuSource::Procfs(ProcTarget::Process(p.get_ref().clone())))
                }
                (Some(p), None, None) => {
                    e.at(&p.span(), "process must not be empty");
                    None
                }
                (None, Some(f), None) => absolute_path(e, "pid_file", f)
                    .map(|p| CpuSource::Procfs(ProcTarget::PidFile(p))),
                (None, None, Some(_)) => Some(CpuSource::Procfs(ProcTarget::Host)),
                (None, None, None) => {
                    missing(
                        e,
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
        SourceKind::Redis => match &s.address {
            Some(a) => socket_addr(e, "address", a, "127.0.0.1:6379")
                .map(|address| CpuSource::Redis { address }),
            None => {
                missing(e, "address = \"127.0.0.1:6379\"");
                None
            }
        },
        SourceKind::Prometheus => match (&s.url, &s.query) {
            (Some(u), Some(q)) => {
                let url = u.get_ref();
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"));
                let url_ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
                if !url_ok {
                    e.at(
                        &u.span(),
                        format!("bad url \"{url}\": expected http://host:port"),
                    );
                }
                if q.get_ref().trim().is_empty() {
                    e.at(&q.span(), "query must not be empty");
                }
                (url_ok && !q.get_ref().trim().is_empty()).then(|| CpuSource::Prometheus {
                    url: url.clone(),
                    query: q.get_ref().clone(),
                })
            }
            _ => {
                missing(e, "url = \"http://...\" and query = \"...\"");
                None
            }
        },
        SourceKind::File => match &s.path {
            Some(p) => absolute_path(e, "path", p).map(|path| CpuSource::File { path }),
            None => {
                missing(e, "path = \"/run/dra/db_cpu\"");
                None
            }
        },
    };
    if ok { out } else { None }
}
