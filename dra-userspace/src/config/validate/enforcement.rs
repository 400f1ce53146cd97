//! Which part of `dra` enforces each configured limit, for the setup the config runs
//! with ([`Setup`]; docs/config.md, "Which part enforces a limit"). A limit that no
//! part would enforce is an error; one that holds only under conditions the file
//! cannot state (a command-line flag, where traffic is routed) is a warning.
//!
//! The parts and what each can see:
//!
//! - **XDP** (`[fast_path] interface` or `dra run --iface`) and, without it, **the
//!   agent's limiter** enforce the ingress limits. Both tell peers apart by the source
//!   address of connections *to* a Diameter port: a peer without `addresses` is never
//!   recognised, and the requests of a server the agent dials (`connect`) arrive on a
//!   connection *from* a Diameter port, which neither looks at.
//! - **TLS peers** (`tls = { ... }`): XDP cannot read a request inside a TLS record,
//!   so their ingress limits are the agent's limiter's in every setup (XDP keeps their
//!   connection guard and drops unknown sources). One limit is enforced by one part:
//!   a group limit whose members mix TLS and plain TCP peers would be two buckets with
//!   XDP attached, and is refused then.
//! - **The connection guard** (`connection_rate`) exists only in XDP.
//! - **The agent's egress limiter** (StarOS RLF, `relay/rlf.rs`) enforces a group's
//!   overall egress limit, `reject` or `drop`, in every setup.
//! - **The TC egress program** (`[fast_path] egress_interface`, attached by `dra run`
//!   with or without XDP) enforces every other egress limit whose action is `drop`; it
//!   recognises a destination by its `addresses` and `connect` address, and sees only
//!   what leaves through its interface. Over a `reject` limit it only counts.
//!
//! Runs only on a config without errors, so each raw profile matches the validated one
//! at the same index.

use dra_common::maps::Action;

use super::Span;
use crate::config::error::Errors;
use crate::config::raw::{Item, RawConfig, RawRateLimit};
use crate::config::{Config, Direction, Limit, Peer, Role, Setup, Target};

/// Where XDP will be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Xdp<'a> {
    /// On this interface.
    On(&'a str),
    /// Nowhere: the agent's limiter enforces the ingress limits.
    Off,
    /// Nowhere because this kernel cannot load it, and `fallback = "userspace"`: the
    /// agent's limiter enforces the ingress limits.
    Unloadable,
    /// Not known yet (`dra check-config` without `[fast_path] interface`: `dra run
    /// --iface` may add one).
    Maybe,
}

/// One static limit profile as the checks need it.
struct Profile<'a> {
    raw: &'a RawRateLimit,
    target: &'a Target,
    direction: Direction,
    limit: &'a Limit,
    /// "" for an overall limit, else the class with a trailing space ("Gx CCR-I ").
    class: String,
}

impl Profile<'_> {
    /// "egress Gx CCR-I limit on peer \"pcrf1\"".
    fn describe(&self) -> String {
        let dir = match self.direction {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        };
        let kind = if self.class.is_empty() {
            "overall "
        } else {
            ""
        };
        format!(
            "{dir} {kind}{}limit on {}",
            self.class,
            super::target_label(self.target)
        )
    }

    fn target_span(&self) -> Span {
        self.raw
            .peer
            .as_ref()
            .or(self.raw.group.as_ref())
            .map_or_else(|| self.raw.direction.span(), |v| v.span())
    }

    fn action_span(&self) -> Span {
        self.raw
            .action
            .as_ref()
            .map_or_else(|| self.raw.direction.span(), |v| v.span())
    }

    /// A group's overall limit: the agent's egress limiter takes it in every setup.
    fn is_group_overall(&self) -> bool {
        self.class.is_empty() && matches!(self.target, Target::Group(_))
    }
}

/// The peers a profile applies to: the peer, or the group's members.
fn members<'c>(cfg: &'c Config, t: &'c Target) -> Vec<&'c Peer> {
    match t {
        Target::Peer(n) => cfg.peer(n).into_iter().collect(),
        Target::Group(g) => cfg.group_members(g).collect(),
    }
}

/// "" for a peer target (the profile names it), " for its member \"x\"" for a group's.
fn member(t: &Target, p: &Peer) -> String {
    match t {
        Target::Peer(_) => String::new(),
        Target::Group(_) => format!(" for its member \"{}\"", p.name),
    }
}

/// Records an error for every limit no part of `setup` enforces and a warning for
/// every limit enforced only under conditions the file cannot state.
pub(super) fn check(e: &mut Errors<'_>, raw: &RawConfig, cfg: &Config, setup: &Setup) {
    let xdp = match (setup, cfg.fast_path.interface.as_deref()) {
        (Setup::Fallback, _) => Xdp::Unloadable,
        (Setup::Run { iface: Some(i) }, _) => Xdp::On(i.as_str()),
        (_, Some(i)) => Xdp::On(i),
        (Setup::Run { iface: None }, None) => Xdp::Off,
        (Setup::File, None) => Xdp::Maybe,
    };
    let tc = cfg.fast_path.egress_interface.as_deref();

    debug_assert_eq!(raw.peer_rate_limits.len(), cfg.peer_rate_limits.len());
    debug_assert_eq!(raw.message_rate_limits.len(), cfg.message_rate_limits.len());
    let overall = raw
        .peer_rate_limits
        .iter()
        .zip(&cfg.peer_rate_limits)
        .map(|(i, p)| (&i.v, &p.target, p.direction, &p.limit, String::new()));
    let per_class = raw
        .message_rate_limits
        .iter()
        .zip(&cfg.message_rate_limits)
        .map(|(i, m)| {
            (
                &i.v,
                &m.target,
                m.direction,
                &m.limit,
                format!("{} ", m.class),
            )
        });
    let profiles: Vec<Profile<'_>> = overall
        .chain(per_class)
        .map(|(raw, target, direction, limit, class)| Profile {
            raw,
            target,
            direction,
            limit,
            class,
        })
        .collect();
    for p in &profiles {
        match p.direction {
            Direction::Ingress => ingress(e, cfg, p, xdp, tc),
            Direction::Egress => egress(e, cfg, p, xdp, tc),
        }
    }
    connection_guards(e, raw, cfg, xdp);
}

/// Ingress limits: XDP or the agent's limiter, which recognise a peer by the source
/// address of its connections to a Diameter port.
fn ingress(e: &mut Errors<'_>, cfg: &Config, p: &Profile<'_>, xdp: Xdp<'_>, tc: Option<&str>) {
    let span = p.target_span();
    let all = members(cfg, p.target);
    let tls = all.iter().filter(|m| m.tls.is_some()).count();
    if tls > 0 && tls < all.len() {
        let why = format!(
            "{} covers TLS and plain TCP members: the agent's limiter enforces it for the TLS \
             ones (XDP cannot read TLS) and XDP for the others, as two buckets; put them in \
             groups of one transport",
            p.describe()
        );
        match xdp {
            Xdp::On(_) => e.at(&span, why),
            Xdp::Maybe => e.warn(&span, format!("{why} (if dra run is given --iface)")),
            Xdp::Off | Xdp::Unloadable => {}
        }
    }
    for m in members(cfg, p.target) {
        if let Some(c) = m.connect {
            e.at(
                &span,
                format!(
                    "{} is never enforced{}: the agent connects to it (connect = \"{c}\"), \
                     so its requests arrive from its Diameter port, and XDP and the agent's \
                     limiter only look at connections to a Diameter port; remove the limit",
                    p.describe(),
                    member(p.target, m)
                ),
            );
        } else if m.addresses.is_empty() {
            e.at(
                &span,
                format!(
                    "{} is never enforced{}: it has no addresses, and XDP and the agent's \
                     limiter recognise a peer only by its source address; list its addresses",
                    p.describe(),
                    member(p.target, m)
                ),
            );
        } else if m.role == Role::Server
            && let (Xdp::On(i), Some(eg)) = (xdp, tc)
            && i != eg
        {
            e.warn(
                &span,
                format!(
                    "{} is enforced by XDP on \"{i}\" only for connections from server \"{}\" \
                     that arrive through \"{i}\"; servers are usually on the egress_interface \
                     side (\"{eg}\"), where nothing enforces ingress limits",
                    p.describe(),
                    m.name
                ),
            );
        }
    }
}

/// Egress limits: a group's overall limit is the agent's egress limiter's; every other
/// one needs action `drop` and the TC egress program, which must recognise the
/// destinations.
fn egress(e: &mut Errors<'_>, cfg: &Config, p: &Profile<'_>, xdp: Xdp<'_>, tc: Option<&str>) {
    if p.is_group_overall() {
        return;
    }
    if p.limit.action == Action::Reject {
        e.at(
            &p.action_span(),
            format!(
                "{} with action = \"reject\" is enforced by nothing: the agent's egress \
                 limiter applies only a group's overall egress limit ([[peer_rate_limit_profile]] \
                 with group = ...), and the TC egress program enforces only action = \"drop\"; \
                 use action = \"drop\" with [fast_path] egress_interface, or a group's overall \
                 limit",
                p.describe()
            ),
        );
        return;
    }
    let Some(eg) = tc else {
        e.at(
            &p.action_span(),
            format!(
                "{} is enforced only by the TC egress program, and [fast_path] \
                 egress_interface is not set (the agent's egress limiter applies only a \
                 group's overall egress limit); set egress_interface to the interface \
                 facing the servers",
                p.describe()
            ),
        );
        return;
    };
    let span = p.target_span();
    for m in members(cfg, p.target) {
        if m.addresses.is_empty() && m.connect.is_none() {
            e.at(
                &span,
                format!(
                    "{} is never enforced{}: the TC egress program recognises a destination \
                     by its addresses or connect address, and it has neither",
                    p.describe(),
                    member(p.target, m)
                ),
            );
        } else if m.role == Role::Client && xdp != Xdp::On(eg) {
            e.warn(
                &span,
                format!(
                    "{} is enforced by the TC egress program on \"{eg}\" only for requests to \
                     client \"{}\" that leave through \"{eg}\"; the clients are usually on the \
                     [fast_path] interface side",
                    p.describe(),
                    m.name
                ),
            );
        }
    }
}

/// `connection_rate`: only XDP has a connection guard.
fn connection_guards(e: &mut Errors<'_>, raw: &RawConfig, cfg: &Config, xdp: Xdp<'_>) {
    for Item { v: r, .. } in &raw.peers {
        let Some(rate) = &r.connection_rate else {
            continue;
        };
        let Some(peer) = cfg.peer(r.name.get_ref()) else {
            continue;
        };
        let span = rate.span();
        if peer.addresses.is_empty() {
            e.at(
                &span,
                format!(
                    "connection_rate of peer \"{}\" is never enforced: it has no addresses, and \
                     the connection guard recognises a peer only by its source address",
                    peer.name
                ),
            );
            continue;
        }
        let fallback = cfg.fast_path.fallback == crate::config::Fallback::Userspace;
        match xdp {
            Xdp::On(_) | Xdp::Maybe if fallback => e.warn(
                &span,
                format!(
                    "connection_rate of peer \"{}\" is enforced only by XDP: on a kernel that \
                     cannot load the XDP programs, fallback = \"userspace\" makes dra run \
                     refuse to start with it",
                    peer.name
                ),
            ),
            Xdp::On(_) => {}
            Xdp::Unloadable => e.at(
                &span,
                format!(
                    "connection_rate of peer \"{}\" is enforced only by XDP, which this kernel \
                     cannot load (fallback = \"userspace\" enforces the other ingress limits \
                     in the agent); remove it, or run on a kernel `dra verify` accepts",
                    peer.name
                ),
            ),
            Xdp::Off => e.at(
                &span,
                format!(
                    "connection_rate of peer \"{}\" is enforced only by XDP, and dra run has no \
                     XDP interface (neither --iface nor [fast_path] interface)",
                    peer.name
                ),
            ),
            Xdp::Maybe => e.warn(
                &span,
                format!(
                    "connection_rate of peer \"{}\" is enforced only by XDP, and [fast_path] \
                     interface is not set: it applies only if dra run is given --iface",
                    peer.name
                ),
            ),
        }
    }
}

/// Which part of `dra` enforces a limit on `target` in `direction` (`group_overall`:
/// a group's overall limit), for `dra check-config`'s summary and `dra status`.
/// `xdp`: XDP attached (`Some(true)`), not (`Some(false)`), not known yet (`None`:
/// a file without `[fast_path] interface`).
pub(crate) fn part(
    cfg: &Config,
    target: &Target,
    direction: Direction,
    group_overall: bool,
    xdp: Option<bool>,
) -> &'static str {
    match direction {
        Direction::Egress if group_overall => "agent RLF",
        Direction::Egress => "TC egress",
        Direction::Ingress => {
            let all = members(cfg, target);
            if !all.is_empty() && all.iter().all(|m| m.tls.is_some()) {
                return "agent limiter (TLS: XDP cannot read it)";
            }
            match xdp {
                Some(true) => "XDP",
                Some(false) => "agent limiter (no XDP)",
                None => "XDP (with dra run --iface), else agent limiter",
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{client, global, server};
    use crate::config::{ConfigError, Setup, parse, parse_for};

    /// pgw1 (addresses), pgw2 (none), pcrf1 (connect), pcrf2 (addresses, connects to
    /// the agent), pcrf3 (neither); pcrf1..3 in group pcrf, pcrf1 in group "dial" too
    /// (alone), pcrf2 alone in group "inbound".
    fn head(fast_path: &str) -> String {
        let group = |name: &str| format!("group = \"{name}\"\n");
        [
            global(fast_path),
            client("pgw1", &["198.18.1.2"], ""),
            client("pgw2", &[], ""),
            server(
                "pcrf1",
                &[],
                &(group("dial") + "connect = \"198.18.2.2:3868\"\n"),
            ),
            server("pcrf2", &["198.18.2.3"], &group("inbound")),
            server("pcrf3", &[], &group("pcrf")),
            server(
                "pcrf4",
                &[],
                &(group("pcrf") + "connect = \"198.18.2.4:3868\"\n"),
            ),
            r#"
[[peer_group]]
name = "pcrf"

[[peer_group]]
name = "dial"

[[peer_group]]
name = "inbound"

[[route]]
realm = "pcrf.lab.example"
group = "dial"
"#
            .into(),
        ]
        .concat()
    }

    const TC: &str = "[fast_path]\negress_interface = \"eth1\"\n";
    const XDP_TC: &str = "[fast_path]\ninterface = \"eth0\"\negress_interface = \"eth1\"\n";
    const XDP: &str = "[fast_path]\ninterface = \"eth0\"\n";
    const RUN: Setup = Setup::Run { iface: None };

    /// [`head`] with the fast path `fp`, then [`limit`].
    fn with_limit(fp: &str, target: &str, direction: &str, action: &str, class: bool) -> String {
        format!("{}{}", head(fp), limit(target, direction, action, class))
    }

    /// `dra run --iface IFACE`.
    fn run_on(iface: &str) -> Setup {
        Setup::Run {
            iface: Some(iface.into()),
        }
    }

    /// A `[[message_rate_limit_profile]]` (Gx CCR-I) or, with `class` false, a
    /// `[[peer_rate_limit_profile]]`.
    fn limit(target: &str, direction: &str, action: &str, class: bool) -> String {
        let class = if class {
            "application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n"
        } else {
            ""
        };
        let table = if class.is_empty() {
            "peer_rate_limit_profile"
        } else {
            "message_rate_limit_profile"
        };
        let action = if action.is_empty() {
            String::new()
        } else {
            format!("action = \"{action}\"\n")
        };
        format!("\n[[{table}]]\n{target}\ndirection = \"{direction}\"\n{class}rate = 100\n{action}")
    }

    /// `(line, column, message)` of the errors, or panics if accepted.
    fn refused(text: &str, setup: &Setup) -> Vec<(usize, usize, String)> {
        // The file itself is valid: only the enforcement check refuses it.
        parse(text, "t.toml").unwrap_or_else(|e| panic!("invalid file:\n{e}"));
        match parse_for(text, "t.toml", setup) {
            Ok(_) => panic!("accepted with {setup:?}:\n{text}"),
            Err(e) => e
                .errors
                .into_iter()
                .map(|e| (e.line, e.column, e.message))
                .collect(),
        }
    }

    fn warnings(text: &str, setup: &Setup) -> Vec<ConfigError> {
        match parse_for(text, "t.toml", setup) {
            Ok(c) => c.warnings,
            Err(e) => panic!("refused with {setup:?}:\n{e}"),
        }
    }

    /// 1-based line of the first line of `text` that starts with `needle`, after line
    /// `after`.
    fn line_of(text: &str, needle: &str, after: usize) -> usize {
        text.lines()
            .enumerate()
            .skip(after)
            .find(|(_, l)| l.starts_with(needle))
            .map(|(i, _)| i + 1)
            .unwrap_or_else(|| panic!("{needle} not in text"))
    }

    #[test]
    fn shipped_configs_are_enforced_as_written() {
        for (name, text) in [
            ("dra.toml", include_str!("../../../../config/dra.toml")),
            (
                "drop.toml",
                include_str!("../../../../config/examples/drop.toml"),
            ),
            (
                "minimal.toml",
                include_str!("../../../../config/examples/minimal.toml"),
            ),
            (
                "ipv6.toml",
                include_str!("../../../../config/examples/ipv6.toml"),
            ),
        ] {
            for setup in [Setup::File, RUN] {
                let c = parse_for(text, name, &setup).unwrap_or_else(|e| panic!("{name}:\n{e}"));
                assert!(c.warnings.is_empty(), "{name}: {:?}", c.warnings);
            }
        }
    }

    #[test]
    fn egress_drop_below_a_group_needs_the_tc_program() {
        for (target, class) in [
            ("peer = \"pcrf1\"", true),
            ("peer = \"pcrf1\"", false),
            ("group = \"dial\"", true),
        ] {
            let without = with_limit("", target, "egress", "drop", class);
            let errs = refused(&without, &Setup::File);
            assert_eq!(errs.len(), 1, "{errs:?}");
            let (line, column, msg) = &errs[0];
            let head_lines = head("").lines().count();
            // At the action value.
            assert_eq!(*line, line_of(&without, "action", head_lines), "{msg}");
            assert_eq!(*column, 10, "{msg}");
            assert!(
                msg.contains("enforced only by the TC egress program")
                    && msg.contains("egress_interface is not set"),
                "{msg}"
            );
            // Every setup without egress_interface, XDP or not.
            assert_eq!(refused(&without, &RUN).len(), 1);
            let xdp = with_limit(XDP, target, "egress", "drop", class);
            assert_eq!(refused(&xdp, &Setup::File).len(), 1);
            // With egress_interface, with or without XDP: the TC program takes it.
            for fp in [TC, XDP_TC] {
                let with = with_limit(fp, target, "egress", "drop", class);
                for setup in [Setup::File, RUN] {
                    assert!(warnings(&with, &setup).is_empty());
                }
            }
        }
    }

    #[test]
    fn egress_reject_below_a_group_is_enforced_by_nothing() {
        for (target, class) in [
            ("peer = \"pcrf1\"", true),
            ("peer = \"pcrf1\"", false),
            ("group = \"dial\"", true),
        ] {
            for action in ["", "reject"] {
                for fp in ["", TC, XDP_TC] {
                    let text = with_limit(fp, target, "egress", action, class);
                    let errs = refused(&text, &Setup::File);
                    assert_eq!(errs.len(), 1, "{errs:?}");
                    let (line, _, msg) = &errs[0];
                    let key = if action.is_empty() {
                        "direction"
                    } else {
                        "action"
                    };
                    assert_eq!(*line, line_of(&text, key, head(fp).lines().count()));
                    assert!(msg.contains("with action = \"reject\" is enforced by nothing"));
                }
            }
        }
    }

    #[test]
    fn a_groups_overall_egress_limit_is_the_agents_in_every_setup() {
        for action in ["reject", "drop"] {
            for fp in ["", TC, XDP, XDP_TC] {
                let text = with_limit(fp, "group = \"pcrf\"", "egress", action, false);
                for setup in [Setup::File, RUN, run_on("x")] {
                    assert!(warnings(&text, &setup).is_empty(), "{action} {fp}");
                }
            }
        }
    }

    #[test]
    fn the_tc_program_must_recognise_every_destination() {
        // Group pcrf: pcrf3 has neither addresses nor connect; pcrf4 has connect.
        let text = with_limit(TC, "group = \"pcrf\"", "egress", "drop", true);
        let errs = refused(&text, &Setup::File);
        assert_eq!(errs.len(), 1, "{errs:?}");
        let (line, column, msg) = &errs[0];
        assert_eq!(
            *line,
            line_of(&text, "group = \"pcrf\"", head(TC).lines().count())
        );
        assert_eq!(*column, 9);
        assert!(
            msg.contains("for its member \"pcrf3\"") && msg.contains("has neither"),
            "{msg}"
        );
        // pcrf2 (addresses, no connect) and pcrf1 (connect) are recognised.
        for t in ["peer = \"pcrf2\"", "peer = \"pcrf1\""] {
            let text = with_limit(TC, t, "egress", "drop", true);
            assert!(warnings(&text, &Setup::File).is_empty());
        }
    }

    #[test]
    fn an_egress_drop_limit_on_a_client_warns_unless_xdp_shares_the_interface() {
        let text = with_limit(TC, "peer = \"pgw1\"", "egress", "drop", false);
        for setup in [Setup::File, RUN, run_on("eth0")] {
            let w = warnings(&text, &setup);
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(
                w[0].message
                    .contains("client \"pgw1\" that leave through \"eth1\"")
            );
        }
        assert!(warnings(&text, &run_on("eth1")).is_empty());
    }

    #[test]
    fn ingress_limits_need_a_peer_the_fast_path_can_recognise() {
        for (target, who) in [
            ("peer = \"pgw2\"", "no addresses"),
            ("peer = \"pcrf3\"", "no addresses"),
            (
                "group = \"pcrf\"",
                "for its member \"pcrf3\": it has no addresses",
            ),
            (
                "peer = \"pcrf1\"",
                "the agent connects to it (connect = \"198.18.2.2:3868\")",
            ),
        ] {
            for class in [true, false] {
                for fp in ["", XDP, XDP_TC] {
                    let text = with_limit(fp, target, "ingress", "", class);
                    for setup in [Setup::File, RUN] {
                        let errs = refused(&text, &setup);
                        assert!(!errs.is_empty());
                        assert!(
                            errs.iter().any(|(_, _, m)| m.contains(who)),
                            "{target}: {errs:?}"
                        );
                        let at = line_of(&text, target, head(fp).lines().count());
                        assert!(errs.iter().all(|(l, c, _)| *l == at && *c >= 8), "{errs:?}");
                    }
                }
            }
        }
        // Group pcrf: pcrf3 (no addresses) and pcrf4 (connect), one error each.
        let text = with_limit("", "group = \"pcrf\"", "ingress", "", false);
        assert_eq!(refused(&text, &Setup::File).len(), 2);
        // A client with addresses: XDP or the agent's limiter, in every setup.
        let text = with_limit("", "peer = \"pgw1\"", "ingress", "drop", true);
        for setup in [Setup::File, RUN] {
            assert!(warnings(&text, &setup).is_empty());
        }
    }

    #[test]
    fn an_ingress_limit_on_a_server_warns_when_xdp_faces_the_clients() {
        let t = "peer = \"pcrf2\"";
        let text = with_limit(XDP_TC, t, "ingress", "", false);
        let w = warnings(&text, &Setup::File);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].message
                .contains("only for connections from server \"pcrf2\"")
        );
        // XDP on the servers' side, or the agent's limiter: no doubt.
        assert!(warnings(&text, &run_on("eth1")).is_empty());
        let text = with_limit(TC, t, "ingress", "", false);
        assert!(warnings(&text, &RUN).is_empty());
    }

    #[test]
    fn connection_rate_needs_xdp() {
        let with_guard = |fp: &str| {
            head(fp).replace(
                "addresses = [\"198.18.1.2\"]\nrole = \"client\"\n",
                "addresses = [\"198.18.1.2\"]\nrole = \"client\"\nconnection_rate = 10\n",
            )
        };
        let text = with_guard("");
        let at = line_of(&text, "connection_rate", 0);
        // check-config without [fast_path] interface: depends on --iface.
        let w = warnings(&text, &Setup::File);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].line, w[0].column), (at, 19));
        assert!(
            w[0].message
                .contains("applies only if dra run is given --iface")
        );
        // dra run without XDP refuses it; with --iface it is XDP's.
        let errs = refused(&text, &RUN);
        assert_eq!(errs.len(), 1);
        assert_eq!((errs[0].0, errs[0].1), (at, 19));
        assert!(
            errs[0].2.contains("dra run has no XDP interface"),
            "{errs:?}"
        );
        assert!(warnings(&text, &run_on("eth0")).is_empty());
        // With [fast_path] interface, in every setup.
        let text = with_guard(XDP);
        for setup in [Setup::File, RUN] {
            assert!(warnings(&text, &setup).is_empty());
        }
        // On a peer without addresses: never.
        let text = head(XDP).replace(
            "name = \"pgw2\"\norigin_host = \"pgw2.lab.example\"\nrealm = \"lab.example\"\n",
            "name = \"pgw2\"\norigin_host = \"pgw2.lab.example\"\nrealm = \"lab.example\"\n\
             connection_rate = 10\n",
        );
        let errs = refused(&text, &Setup::File);
        assert!(
            errs[0].2.contains("never enforced: it has no addresses"),
            "{errs:?}"
        );
    }

    #[test]
    fn other_errors_come_without_enforcement_noise() {
        // A broken rate elsewhere: only that error (the check runs on valid files).
        let text = format!(
            "{}{}\n[[peer_rate_limit_profile]]\ngroup = \"pcrf\"\ndirection = \"egress\"\n{}",
            head(""),
            limit("peer = \"pcrf1\"", "egress", "drop", true),
            "rate = 0\n"
        );
        let e = parse_for(&text, "t.toml", &Setup::File).unwrap_err();
        assert_eq!(e.errors.len(), 1, "{e}");
        assert!(e.errors[0].message.contains("rate must be > 0"));
    }
}
