//! What a reload changes: the difference between the running config and a newly
//! validated one (`dra reload`, SIGHUP; docs/operations.md "Reload"). Sans-IO: the
//! agent applies a [`ConfigDiff`] piece by piece (`crate::reload`), `dra reload
//! --dry-run` prints it.
//!
//! Some settings cannot change under a running agent: its identity (Origin-Host,
//! Origin-Realm, Product-Name: every open connection's capabilities exchange named
//! them), the fast path's interfaces, the control socket, the session store, a peer's
//! Origin-Host or role, and the egress limiter of a group that stays (its queue holds
//! requests). A diff with any of them is [refused](ConfigDiff::refused): nothing is
//! applied.

use std::fmt;
use std::net::SocketAddr;

use super::{Config, Direction, Peer, Target};

/// One peer whose settings changed, and which ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerChange {
    /// The peer's name.
    pub name: String,
    /// Changed keys (`connect`, `addresses`, `group`, ...).
    pub keys: Vec<&'static str>,
}

impl PeerChange {
    /// The peer must reconnect: the address it is dialled at changed.
    pub fn reconnects(&self) -> bool {
        self.keys.contains(&"connect")
    }
}

/// The difference between two valid configs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Why the new config cannot be applied live (empty: it can).
    pub refused: Vec<String>,
    pub peers_added: Vec<String>,
    pub peers_removed: Vec<String>,
    pub peers_changed: Vec<PeerChange>,
    pub groups_added: Vec<String>,
    pub groups_removed: Vec<String>,
    pub groups_changed: Vec<String>,
    /// Routes only in the new config, and only in the old one (as printed).
    pub routes_added: Vec<String>,
    pub routes_removed: Vec<String>,
    /// Limits (peer and message rate limit profiles, connection guards): changed
    /// entries, as printed.
    pub limits_added: Vec<String>,
    pub limits_removed: Vec<String>,
    /// The dynamic rate limiting (DRL) settings: `[global] dynamic_rate_limiting`,
    /// the dynamic peer rate limit profiles, the DB CPU profile.
    pub drl_changed: bool,
    /// `[global] unknown_peer` or `diameter_ports` (the fast path's global settings).
    pub fast_path_global_changed: bool,
    pub listeners_added: Vec<SocketAddr>,
    pub listeners_removed: Vec<SocketAddr>,
    /// Listeners that stay whose `tls` changed (a certificate, key or CA rewritten in
    /// place included): new connections use the new one, open ones keep theirs.
    pub listeners_tls_changed: Vec<SocketAddr>,
    /// The metrics address, old → new.
    pub metrics: Option<(Option<SocketAddr>, Option<SocketAddr>)>,
    /// `[overload]` changed (applied live: the controller keeps its state).
    pub overload_changed: bool,
}

impl ConfigDiff {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        *self == ConfigDiff::default()
    }

    /// The new config can be applied live.
    pub fn applicable(&self) -> bool {
        self.refused.is_empty()
    }

    /// Limits, DRL or the fast path's global settings changed: the fast path (or the
    /// userspace limiter) and the DRL targets are rewritten.
    pub fn limits_changed(&self) -> bool {
        !self.limits_added.is_empty()
            || !self.limits_removed.is_empty()
            || self.drl_changed
            || self.fast_path_global_changed
            || !self.peers_added.is_empty()
            || !self.peers_removed.is_empty()
            || self.peers_changed.iter().any(|c| {
                c.keys
                    .iter()
                    .any(|k| ["addresses", "group", "connect", "tls"].contains(k))
            })
    }

    /// One line for the log: counts per kind of change.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "no change".into();
        }
        let counts = [
            ("peers+", self.peers_added.len()),
            ("peers-", self.peers_removed.len()),
            ("peers~", self.peers_changed.len()),
            ("groups+", self.groups_added.len()),
            ("groups-", self.groups_removed.len()),
            ("groups~", self.groups_changed.len()),
            ("routes+", self.routes_added.len()),
            ("routes-", self.routes_removed.len()),
            ("limits+", self.limits_added.len()),
            ("limits-", self.limits_removed.len()),
            ("listeners+", self.listeners_added.len()),
            ("listeners-", self.listeners_removed.len()),
            ("listeners tls~", self.listeners_tls_changed.len()),
        ];
        let mut parts: Vec<String> = counts
            .iter()
            .filter(|(_, k)| *k > 0)
            .map(|(what, k)| format!("{what} {k}"))
            .collect();
        for (on, what) in [
            (self.drl_changed, "drl changed"),
            (self.fast_path_global_changed, "fast path global changed"),
            (self.metrics.is_some(), "metrics address changed"),
            (self.overload_changed, "overload changed"),
        ] {
            if on {
                parts.push(what.into());
            }
        }
        if !self.refused.is_empty() {
            parts.push(format!("refused {}", self.refused.len()));
        }
        parts.join(", ")
    }
}

impl fmt::Display for ConfigDiff {
    /// One line per change (what `dra reload --dry-run` prints).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "no change");
        }
        lines(f, "refused:", &self.refused)?;
        lines(f, "+ peer", &self.peers_added)?;
        for p in &self.peers_removed {
            writeln!(f, "- peer {p} (disconnected with DPR)")?;
        }
        for c in &self.peers_changed {
            writeln!(f, "~ peer {}: {}", c.name, c.keys.join(", "))?;
        }
        for (what, items) in [
            ("+ peer_group", &self.groups_added),
            ("- peer_group", &self.groups_removed),
            ("~ peer_group", &self.groups_changed),
            ("+ route", &self.routes_added),
            ("- route", &self.routes_removed),
            ("+ limit", &self.limits_added),
            ("- limit", &self.limits_removed),
        ] {
            lines(f, what, items)?;
        }
        if self.drl_changed {
            writeln!(f, "~ dynamic rate limiting (DRL profiles, DB CPU profile)")?;
        }
        if self.fast_path_global_changed {
            writeln!(f, "~ [global] unknown_peer / diameter_ports")?;
        }
        if self.overload_changed {
            writeln!(f, "~ [overload] (the controller keeps its state)")?;
        }
        lines(f, "+ listener", &self.listeners_added)?;
        lines(f, "- listener", &self.listeners_removed)?;
        for l in &self.listeners_tls_changed {
            writeln!(
                f,
                "~ listener {l}: tls (new connections; open ones keep theirs)"
            )?;
        }
        if let Some((old, new)) = &self.metrics {
            let s = |a: &Option<SocketAddr>| a.map_or("none".to_owned(), |a| a.to_string());
            writeln!(f, "~ metrics address {} -> {}", s(old), s(new))?;
        }
        Ok(())
    }
}

/// One line `what item` per item.
fn lines<T: fmt::Display>(f: &mut fmt::Formatter<'_>, what: &str, items: &[T]) -> fmt::Result {
    items.iter().try_for_each(|i| writeln!(f, "{what} {i}"))
}

fn target(t: &Target) -> String {
    match t {
        Target::Peer(p) => format!("peer {p}"),
        Target::Group(g) => format!("group {g}"),
    }
}

fn dir(d: Direction) -> &'static str {
    match d {
        Direction::Ingress => "ingress",
        Direction::Egress => "egress",
    }
}

/// Every limit of a config, one printable line each (compared as strings: a changed
/// rate is one removed and one added line).
fn limits(c: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for p in &c.peer_rate_limits {
        out.push(format!(
            "{} {} all: {}/s burst {} {:?}",
            target(&p.target),
            dir(p.direction),
            p.limit.rate,
            p.limit.burst,
            p.limit.action
        ));
    }
    for m in &c.message_rate_limits {
        out.push(format!(
            "{} {} {}: {}/s burst {} {:?} {} {:?}",
            target(&m.target),
            dir(m.direction),
            crate::metrics::class_label(m.msg_class()),
            m.limit.rate,
            m.limit.burst,
            m.limit.action,
            m.limit.result_code,
            m.limit.error_message
        ));
    }
    for p in &c.peers {
        if let Some(l) = &p.connection_guard {
            out.push(format!(
                "peer {} connection_rate: {}/s burst {}",
                p.name, l.rate, l.burst
            ));
        }
    }
    out
}

fn routes(c: &Config) -> Vec<String> {
    c.routes
        .iter()
        .map(|r| {
            let realm = match &r.realm {
                super::RouteRealm::Exact(s) => s.clone(),
                super::RouteRealm::Any => "*".into(),
            };
            let app = r.application.map_or("any".into(), |a| a.to_string());
            format!(
                "realm {realm} application {app} -> {} weight {}",
                target(&r.target),
                r.weight
            )
        })
        .collect()
}

/// `a` minus `b`, in `a`'s order (multiset: duplicates count).
fn minus<T: Clone + PartialEq>(a: &[T], b: &[T]) -> Vec<T> {
    let mut rest: Vec<&T> = b.iter().collect();
    let mut out = Vec::new();
    for x in a {
        match rest.iter().position(|y| *y == x) {
            Some(i) => {
                rest.swap_remove(i);
            }
            None => out.push(x.clone()),
        }
    }
    out
}

fn peer_keys(o: &Peer, n: &Peer) -> Vec<&'static str> {
    [
        ("realm", o.realm != n.realm),
        ("addresses", o.addresses != n.addresses),
        ("group", o.group != n.group),
        ("connect", o.connect != n.connect),
        ("connection_rate", o.connection_guard != n.connection_guard),
        ("weight", o.weight != n.weight),
        ("doic", o.doic != n.doic),
        ("tls", o.tls != n.tls),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// The difference from `old` (running) to `new` (validated).
pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    let og = &old.global;
    let ng = &new.global;
    let mut refuse = |what: &str, why: &str| d.refused.push(format!("{what}: {why}"));
    let identity = "the agent's identity in every open connection's capabilities exchange";
    for (key, changed) in [
        ("origin_host", og.origin_host != ng.origin_host),
        ("origin_realm", og.origin_realm != ng.origin_realm),
        ("product_name", og.product_name != ng.product_name),
    ] {
        if changed {
            refuse(&format!("[global] {key}"), identity);
        }
    }
    if og.watchdog != ng.watchdog {
        refuse(
            "[global] watchdog",
            "every connection's watchdog timer is set when the agent starts",
        );
    }
    if og.startup_wait != ng.startup_wait {
        refuse(
            "[global] startup_wait",
            "it bounds the agent's start only (it takes effect at the next start)",
        );
    }
    let attach = "the fast path's programs are attached to it at start";
    let (of, nf) = (&old.fast_path, &new.fast_path);
    for (key, changed) in [
        ("interface", of.interface != nf.interface),
        ("xdp_mode", of.xdp_mode != nf.xdp_mode),
        (
            "egress_interface",
            of.egress_interface != nf.egress_interface,
        ),
        ("fallback", of.fallback != nf.fallback),
    ] {
        if changed {
            refuse(&format!("[fast_path] {key}"), attach);
        }
    }
    for n in &new.listeners {
        if let Some(o) = old.listeners.iter().find(|o| o.address == n.address)
            && (o.transport != n.transport || o.multihome != n.multihome)
        {
            refuse(
                &format!("listener {} transport or multihome", n.address),
                "its socket is bound at start; remove the listener and add one at another \
                 address, or restart",
            );
        }
    }
    if old.control.socket != new.control.socket {
        refuse(
            "[control] socket",
            "reloads are requested over it (`dra reload` would lose the agent)",
        );
    }
    if old.session_store != new.session_store {
        refuse(
            "[session_store]",
            "the store client and its bindings are set up at start",
        );
    }
    for n in &new.peers {
        if let Some(o) = old.peers.iter().find(|o| o.name == n.name) {
            if o.origin_host != n.origin_host {
                refuse(
                    &format!("peer {} origin_host", n.name),
                    "its connection was established under the old one; \
                     add it under a new name instead",
                );
            }
            if o.role != n.role {
                refuse(
                    &format!("peer {} role", n.name),
                    "remove it and add it under a new name",
                );
            }
            if o.transport != n.transport {
                refuse(
                    &format!("peer {} transport", n.name),
                    "its connections are of the old one; remove it and add it under a new name",
                );
            }
        }
    }
    for n in &new.peer_groups {
        if let Some(o) = old.peer_groups.iter().find(|o| o.name == n.name) {
            let egress = |c: &Config| {
                c.peer_rate_limits
                    .iter()
                    .find(|p| {
                        p.direction == Direction::Egress
                            && p.target == Target::Group(n.name.clone())
                    })
                    .map(|p| p.limit.clone())
            };
            if (o.queue_limit, o.delay_tolerance, o.max_outstanding)
                != (n.queue_limit, n.delay_tolerance, n.max_outstanding)
                || egress(old) != egress(new)
            {
                refuse(
                    &format!("peer_group {} egress limiter", n.name),
                    "its queue holds requests in flight (queue_limit, delay_tolerance, \
                     max_outstanding and its egress profile need a restart)",
                );
            }
        }
    }
    for n in &new.peers {
        match old.peers.iter().find(|o| o.name == n.name) {
            None => d.peers_added.push(n.name.clone()),
            Some(o) => {
                let keys = peer_keys(o, n);
                if !keys.is_empty() {
                    d.peers_changed.push(PeerChange {
                        name: n.name.clone(),
                        keys,
                    });
                }
            }
        }
    }
    for o in &old.peers {
        if !new.peers.iter().any(|n| n.name == o.name) {
            d.peers_removed.push(o.name.clone());
        }
        // A new peer with a removed peer's Origin-Host: the same Diameter identity
        // under another name.
        if !new.peers.iter().any(|n| n.name == o.name)
            && let Some(n) = new.peers.iter().find(|n| n.origin_host == o.origin_host)
        {
            d.refused.push(format!(
                "peer {}: origin_host {} was peer {}'s (removed in the same reload); \
                 remove it in one reload and add it in the next",
                n.name, n.origin_host, o.name
            ));
        }
    }
    for n in &new.peer_groups {
        match old.peer_groups.iter().find(|o| o.name == n.name) {
            None => d.groups_added.push(n.name.clone()),
            Some(o) if o != n => d.groups_changed.push(n.name.clone()),
            Some(_) => {}
        }
    }
    for o in &old.peer_groups {
        if !new.peer_groups.iter().any(|n| n.name == o.name) {
            d.groups_removed.push(o.name.clone());
        }
    }
    let (ro, rn) = (routes(old), routes(new));
    d.routes_added = minus(&rn, &ro);
    d.routes_removed = minus(&ro, &rn);
    let (lo, ln) = (limits(old), limits(new));
    d.limits_added = minus(&ln, &lo);
    d.limits_removed = minus(&lo, &ln);
    d.drl_changed = og.dynamic_rate_limiting != ng.dynamic_rate_limiting
        || old.dynamic_peer_rate_limits != new.dynamic_peer_rate_limits
        || old.db_cpu_profile != new.db_cpu_profile;
    d.fast_path_global_changed =
        og.unknown_peer != ng.unknown_peer || og.diameter_ports != ng.diameter_ports;
    d.overload_changed = old.overload != new.overload;
    let la: Vec<SocketAddr> = old.listeners.iter().map(|l| l.address).collect();
    let lb: Vec<SocketAddr> = new.listeners.iter().map(|l| l.address).collect();
    d.listeners_added = minus(&lb, &la);
    d.listeners_removed = minus(&la, &lb);
    d.listeners_tls_changed = new
        .listeners
        .iter()
        .filter(|n| {
            old.listeners
                .iter()
                .any(|o| o.address == n.address && o.tls != n.tls)
        })
        .map(|n| n.address)
        .collect();
    if old.metrics.address != new.metrics.address {
        d.metrics = Some((old.metrics.address, new.metrics.address));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{client, global, gx_ccr_limit, server};

    /// The agent, the client pgw1, the server pcrf1 in group pcrf and a route to it.
    fn base() -> String {
        [
            global(""),
            client("pgw1", &["198.18.1.2"], ""),
            server(
                "pcrf1",
                &[],
                "group = \"pcrf\"\nconnect = \"198.18.2.2:3868\"\n",
            ),
            "\n[[peer_group]]\nname = \"pcrf\"\n".into(),
            "\n[[route]]\nrealm = \"pcrf.lab.example\"\ngroup = \"pcrf\"\n".into(),
        ]
        .concat()
    }

    fn cfg(text: &str) -> Config {
        super::super::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    fn with(extra: &str) -> Config {
        cfg(&(base() + extra))
    }

    #[test]
    fn the_same_config_is_no_change() {
        let d = diff(&with(""), &with(""));
        assert!(d.is_empty() && d.applicable(), "{d:?}");
        assert_eq!(d.to_string(), "no change\n");
        assert_eq!(d.summary(), "no change");
    }

    #[test]
    fn identity_and_attachments_are_refused_with_the_reason() {
        let old = with("");
        let text = base().replace("dra.lab.example", "dra2.lab.example");
        let new = cfg(&text.replace(
            "origin_realm = \"lab.example\"",
            "origin_realm = \"lab2.example\"",
        ));
        let d = diff(&old, &new);
        assert!(!d.applicable());
        assert_eq!(d.refused.len(), 2, "{:?}", d.refused);
        assert!(
            d.refused[0].starts_with("[global] origin_host: "),
            "{:?}",
            d.refused
        );
        assert!(d.refused[1].starts_with("[global] origin_realm: "));
        let new = with("[fast_path]\ninterface = \"eth9\"\n");
        let d = diff(&old, &new);
        assert_eq!(d.refused.len(), 1);
        assert!(d.refused[0].contains("interface"), "{:?}", d.refused);
        assert!(
            d.to_string()
                .starts_with("refused: [fast_path] interface: ")
        );
        let text = base().replace(
            "origin_realm = \"lab.example\"",
            "origin_realm = \"lab.example\"\nwatchdog = \"6s\"",
        );
        let d = diff(&old, &cfg(&text));
        assert_eq!(
            d.refused,
            ["[global] watchdog: every connection's watchdog timer is set when the agent starts"]
        );
    }

    #[test]
    fn peers_added_removed_and_changed() {
        let old = with("");
        let pcrf2 = server(
            "pcrf2",
            &[],
            "group = \"pcrf\"\nconnect = \"198.18.2.3:3868\"\n",
        );
        let text = base().replace("198.18.2.2:3868", "198.18.2.9:3868");
        let new = cfg(&text.replace("\n[[peer_group]]", &format!("{pcrf2}\n[[peer_group]]")));
        let d = diff(&old, &new);
        assert!(d.applicable(), "{:?}", d.refused);
        assert_eq!(d.peers_added, ["pcrf2"]);
        assert!(d.peers_removed.is_empty());
        assert_eq!(d.peers_changed.len(), 1);
        assert_eq!(d.peers_changed[0].name, "pcrf1");
        assert_eq!(d.peers_changed[0].keys, ["connect"]);
        assert!(d.peers_changed[0].reconnects());
        let back = diff(&new, &old);
        assert_eq!(back.peers_removed, ["pcrf2"]);
        assert!(
            back.to_string()
                .contains("- peer pcrf2 (disconnected with DPR)\n")
        );
    }

    #[test]
    fn a_changed_rate_is_one_limit_removed_and_one_added() {
        let lim = |rate: u32| gx_ccr_limit("peer = \"pgw1\"", "initial", rate, "");
        let d = diff(&with(&lim(200)), &with(&lim(100)));
        assert!(d.applicable(), "{:?}", d.refused);
        assert_eq!(d.limits_added.len(), 1, "{d:?}");
        assert_eq!(d.limits_removed.len(), 1);
        assert!(d.limits_added[0].contains("100/s"), "{:?}", d.limits_added);
        assert!(d.limits_removed[0].contains("200/s"));
        assert!(d.limits_changed());
        assert_eq!(d.summary(), "limits+ 1, limits- 1");
    }

    #[test]
    fn routes_listeners_and_metrics() {
        let old = with("");
        let new = with(
            "[[route]]\nrealm = \"*\"\npeer = \"pcrf1\"\n\n\
             [[listener]]\naddress = \"198.18.1.9:3868\"\n\n\
             [metrics]\naddress = \"198.18.1.1:9100\"\n",
        );
        let d = diff(&old, &new);
        assert!(d.applicable(), "{:?}", d.refused);
        assert_eq!(
            d.routes_added,
            ["realm * application any -> peer pcrf1 weight 1"]
        );
        assert!(d.routes_removed.is_empty());
        assert_eq!(d.listeners_added, ["198.18.1.9:3868".parse().unwrap()]);
        assert_eq!(
            d.metrics,
            Some((None, Some("198.18.1.1:9100".parse().unwrap())))
        );
        let back = diff(&new, &old);
        assert_eq!(back.listeners_removed.len(), 1);
        assert_eq!(back.routes_removed.len(), 1);
    }

    #[test]
    fn a_groups_egress_limiter_cannot_change_live() {
        let old = with("");
        let new = cfg(&base().replace("name = \"pcrf\"\n", "name = \"pcrf\"\nqueue_limit = 7\n"));
        let d = diff(&old, &new);
        assert_eq!(d.refused.len(), 1, "{d:?}");
        assert!(d.refused[0].starts_with("peer_group pcrf egress limiter: "));
    }
}
