//! `[global]`, `[fast_path]`, `[metrics]`, `[control]` and `[[listener]]`.

use std::collections::HashMap;
use std::net::IpAddr;

use std::time::Duration;

use super::syntax::{absolute_path, choice_or, duration, identity, int_in, socket_addr, text_or};
use super::unique;
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig, S};
use crate::config::{
    Control, DEFAULT_DIAMETER_PORT, DEFAULT_PRODUCT_NAME, Fallback, FastPath, Global, Listener,
    Metrics, Transport, UnknownPeer, XdpMode,
};
use crate::diameter::peer::{DEFAULT_TW, MIN_TW};
use crate::transport::tls::DIAMETERS_PORT;

/// Longest Unix socket path (sun_path is 108 bytes including the NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Longest interface name (IFNAMSIZ − 1).
const MAX_IFNAME: usize = 15;
/// Longest accepted `watchdog`: a dead peer is taken out of service after 2 Tw.
const MAX_WATCHDOG: Duration = Duration::from_secs(3600);
/// `startup_wait` when the file has none.
pub const DEFAULT_STARTUP_WAIT: Duration = Duration::from_secs(10);
/// Longest accepted `startup_wait` (systemd's default start timeout is 90 s).
const MAX_STARTUP_WAIT: Duration = Duration::from_secs(60);

/// `[global]` (required).
pub(super) fn global(e: &mut Errors<'_>, raw: &RawConfig) -> Option<Global> {
    match &raw.global {
        Some(Item { v: g, .. }) => {
            let origin_host = identity(e, "origin_host", &g.origin_host);
            let origin_realm = identity(e, "origin_realm", &g.origin_realm);
            let product_name = text_or(e, "product_name", &g.product_name, || {
                Some(DEFAULT_PRODUCT_NAME.to_string())
            });
            let mut diameter_ports = Vec::new();
            match &g.diameter_ports {
                // A TLS listener's usual port (IANA "diameters") is watched too.
                None if raw.listeners.iter().any(|l| l.v.tls.is_some()) => {
                    diameter_ports.extend([DEFAULT_DIAMETER_PORT, DIAMETERS_PORT]);
                }
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
            let watchdog = duration(e, "watchdog", &g.watchdog, DEFAULT_TW);
            if let Some(v) = &g.watchdog
                && (watchdog < MIN_TW || watchdog > MAX_WATCHDOG)
            {
                e.at(
                    &v.span(),
                    format!(
                        "watchdog must be between {}s (RFC 3539 §3.4.1) and {}s",
                        MIN_TW.as_secs(),
                        MAX_WATCHDOG.as_secs()
                    ),
                );
            }
            let startup_wait = duration(e, "startup_wait", &g.startup_wait, DEFAULT_STARTUP_WAIT);
            if let Some(v) = &g.startup_wait
                && startup_wait > MAX_STARTUP_WAIT
            {
                e.at(
                    &v.span(),
                    format!(
                        "startup_wait must be at most {}s",
                        MAX_STARTUP_WAIT.as_secs()
                    ),
                );
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
                watchdog,
                startup_wait,
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
pub(super) fn settings(e: &mut Errors<'_>, raw: &RawConfig) -> (FastPath, Metrics, Control) {
    let fast_path = match &raw.fast_path {
        Some(Item { v: f, .. }) => FastPath {
            interface: interface(e, "interface", &f.interface),
            xdp_mode: choice_or(e, "xdp_mode", &f.xdp_mode, XdpMode::Auto),
            egress_interface: interface(e, "egress_interface", &f.egress_interface),
            fallback: choice_or(e, "fallback", &f.fallback, Fallback::None),
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
                        format!(
                            "socket path is {} bytes; a Unix socket path is at most \
                             {MAX_SOCKET_PATH}",
                            s.get_ref().len()
                        ),
                    );
                    return None;
                }
                Some(p)
            }),
    };
    (fast_path, metrics, control)
}

/// `[[listener]]`: unique addresses on Diameter ports.
pub(super) fn listeners(
    e: &mut Errors<'_>,
    raw: &RawConfig,
    global: Option<&Global>,
) -> Vec<Listener> {
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
                    "listener port {} is not in global.diameter_ports {:?}: the fast path \
                         would not see its traffic",
                    address.port(),
                    g.diameter_ports
                ),
            );
        }
        let tls = l
            .tls
            .as_ref()
            .and_then(|t| super::tls::tls(e, t.as_ref()?, super::tls::Owner::Listener, None));
        let mut multihome = Vec::new();
        if let Some(m) = &l.multihome {
            if transport != Transport::Sctp {
                e.at(
                    &m.span(),
                    "multihome needs transport = \"sctp\" (a TCP listener has one address)",
                );
            }
            for a in m.get_ref() {
                match a.get_ref().parse::<IpAddr>() {
                    Ok(ip) if ip == address.ip() || multihome.contains(&ip) => {
                        e.at(&a.span(), format!("multihome address {ip} listed twice"))
                    }
                    Ok(ip) if ip.is_unspecified() || address.ip().is_unspecified() => e.at(
                        &a.span(),
                        "multihome lists further addresses of a listener on one address \
                         (0.0.0.0 or :: already binds them all)",
                    ),
                    Ok(ip) => multihome.push(ip),
                    Err(_) => e.at(
                        &a.span(),
                        format!(
                            "bad multihome address \"{}\": an IP address \
                             (the listener's port is used)",
                            a.get_ref()
                        ),
                    ),
                }
            }
        }
        if transport == Transport::Sctp
            && let Some(t) = l.tls.as_ref().and_then(|t| t.as_ref())
        {
            e.at(
                &t.span,
                "tls over SCTP (DTLS, RFC 6083) is not supported: use transport = \"tcp\" \
                 with tls, or SCTP without it",
            );
        }
        listeners.push(Listener {
            address,
            transport,
            multihome,
            tls,
        });
    }
    listeners
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
            format!(
                "bad {key} \"{n}\": an interface name is 1-{MAX_IFNAME} characters without '/', \
                 ':' or spaces"
            ),
        );
        return None;
    }
    Some(n.clone())
}
