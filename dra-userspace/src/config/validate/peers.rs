//! `[[peer_group]]` and `[[peer]]`.

use std::collections::HashMap;
use std::time::Duration;

use dra_common::maps::Action;
use ipnet::IpNet;

use super::syntax::{
    choice, choice_or, duration, identity, int_in, name, positive_duration, socket_addr, u32_in,
};
use super::{Refs, Span, unique};
use crate::config::ConfigName as _;
use crate::config::error::Errors;
use crate::config::raw::RawPeer;
use crate::config::raw::{Item, RawConfig};
use crate::config::values;
use crate::config::{
    Doic, Global, Limit, Peer, PeerGroup, Role, Selection, Transport, default_burst,
};
use crate::doic::Algorithm;

/// `[[peer_group]]`.
pub(super) fn peer_groups(e: &mut Errors<'_>, raw: &RawConfig) -> Vec<PeerGroup> {
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
pub(super) fn peers(
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
                        "address {net} of peer \"{this}\" overlaps {other} of peer \"{owner}\" \
                         (line {line}); the fast path could not tell them apart"
                    )
                };
                e.at(&a.span(), msg);
                continue;
            }
            all_prefixes.push((net, this.clone(), a.span()));
            addresses.push(net);
        }
        let doic = doic(e, p, role);
        let tls = p.tls.as_ref().and_then(|t| {
            let t = t.as_ref()?;
            let owner = if connect.is_some() || p.connect.is_some() {
                super::tls::Owner::Dialled
            } else {
                if !raw
                    .listeners
                    .iter()
                    .any(|l| l.v.tls.as_ref().is_some_and(Option::is_some))
                {
                    e.at(
                        &t.span,
                        format!(
                            "peer \"{}\" connects to the agent over TLS, but no [[listener]] \
                             has tls",
                            p.name.get_ref()
                        ),
                    );
                }
                super::tls::Owner::Accepted
            };
            super::tls::tls(e, t, owner, origin_host.as_deref())
        });
        let transport = choice_or(e, "transport", &p.transport, Transport::Tcp);
        if transport == Transport::Sctp
            && let Some(t) = p.tls.as_ref().and_then(|t| t.as_ref())
        {
            e.at(
                &t.span,
                "tls over SCTP (DTLS, RFC 6083) is not supported: use transport = \"tcp\" \
                 with tls, or SCTP without it",
            );
        }
        if transport == Transport::Sctp
            && connect.is_none()
            && !raw.listeners.iter().any(|l| {
                l.v.transport
                    .as_ref()
                    .is_some_and(|t| t.get_ref() == Transport::Sctp.name())
            })
            && let Some(t) = &p.transport
        {
            e.at(
                &t.span(),
                format!(
                    "peer \"{}\" connects to the agent over SCTP, but no [[listener]] has \
                     transport = \"sctp\"",
                    p.name.get_ref()
                ),
            );
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
                doic,
                tls,
                transport,
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
                    format!(
                        "peer group \"{n}\" has no members (set group = \"{n}\" on its \
                         [[peer]] entries)"
                    ),
                );
            }
        }
    }
    peers
}

/// A peer's `doic`, `doic_algorithms` and `doic_validity` (docs/doic.md).
fn doic(e: &mut Errors<'_>, p: &RawPeer, role: Option<Role>) -> Option<Doic> {
    let on = p.doic.as_ref().is_some_and(|d| *d.get_ref());
    if !on {
        // The details need the switch.
        for span in [
            p.doic_algorithms.as_ref().map(|v| v.span()),
            p.doic_validity.as_ref().map(|v| v.span()),
        ]
        .into_iter()
        .flatten()
        {
            e.at(&span, "doic_algorithms and doic_validity need doic = true");
        }
        return None;
    }
    let mut d = Doic::new();
    if let Some(list) = &p.doic_algorithms {
        let mut algorithms = Vec::new();
        for a in list.get_ref() {
            match Algorithm::from_name(a.get_ref()) {
                Some(alg) if algorithms.contains(&alg) => {
                    e.at(&a.span(), format!("\"{}\" is listed twice", a.get_ref()));
                }
                Some(alg) => algorithms.push(alg),
                None => e.at(
                    &a.span(),
                    format!(
                        "unknown DOIC algorithm \"{}\" (expected \"loss\" or \"rate\")",
                        a.get_ref()
                    ),
                ),
            }
        }
        if list.get_ref().is_empty() {
            e.at(
                &list.span(),
                "doic_algorithms must list at least one of \"loss\", \"rate\"",
            );
        }
        if !algorithms.is_empty() {
            d.algorithms = algorithms;
        }
    }
    if role == Some(Role::Server) {
        // The agent reacts to a server's reports (docs/doic.md): loss only, and the
        // validity is the server's to say.
        if let Some(list) = &p.doic_algorithms {
            for a in list.get_ref() {
                if a.get_ref() == "rate" {
                    e.at(
                        &a.span(),
                        "on a server, doic_algorithms can only be [\"loss\"]: the agent \
                         reacts to servers' reports with loss only (RFC 8582 rate is not \
                         implemented for servers)",
                    );
                }
            }
        }
        if let Some(v) = &p.doic_validity {
            e.at(
                &v.span(),
                "doic_validity is for role = \"client\": a server's reports carry their own",
            );
        }
        d.algorithms = vec![Algorithm::Loss];
        return Some(d);
    }
    if let Some(v) = &p.doic_validity {
        let got = positive_duration(e, "doic_validity", &p.doic_validity, d.validity);
        // RFC 7683 §7.5: whole seconds, at most 86,400.
        if got.subsec_nanos() != 0 || got > Duration::from_secs(86_400) {
            e.at(
                &v.span(),
                "doic_validity must be whole seconds between 1s and 86400s (RFC 7683 §7.5)",
            );
        } else {
            d.validity = got;
        }
    }
    Some(d)
}
