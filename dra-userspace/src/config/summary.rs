//! `Config::summary`: a one-screen human overview, printed by `dra check-config`.

use std::fmt::Write;

use super::values::format_duration;
use super::*;

fn target(t: &Target) -> String {
    match t {
        Target::Peer(n) => n.clone(),
        Target::Group(n) => format!("group {n}"),
    }
}

fn limit(l: &Limit) -> String {
    let mut s = format!("{}/s burst {} {}", l.rate, l.burst, l.action.name());
    if l.action == Action::Reject {
        let _ = write!(s, " {} \"{}\"", l.result_code, l.error_message);
    }
    s
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

/// Linux's minimum TCP retransmission timeout (`TCP_RTO_MIN`, 200 ms): how long a TCP
/// sender waits, at least, before it resends a segment the fast path dropped.
const TCP_RTO_MIN_S: f64 = 0.2;

/// An ingress `drop` limit whose burst cannot cover one retransmission timeout: after
/// a dropped segment the sender is silent for ≥ 200 ms, and a bucket that banks fewer
/// than rate × 200 ms messages meanwhile admits only a fraction of its rate (measured:
/// 11 % at 500/s with burst 10, 92 % with burst 100; docs/fast-path.md).
fn drop_burst_warning(what: String, l: &Limit) -> Option<String> {
    let want = (l.rate * TCP_RTO_MIN_S).ceil();
    (l.action == Action::Drop && f64::from(l.burst) < want).then(|| {
        format!(
            "{what}: drop limit {}/s with burst {}: on TCP the sender waits at least 200 ms to \
             resend a dropped segment, so a burst below rate x 200 ms ({want}) admits only a \
             fraction of the rate; raise the burst or use reject (docs/fast-path.md)",
            l.rate, l.burst
        )
    })
}

pub(super) fn warnings(c: &Config) -> Vec<String> {
    let peers = c
        .peer_rate_limits
        .iter()
        .filter(|p| p.direction == Direction::Ingress)
        .filter_map(|p| drop_burst_warning(format!("{} overall", target(&p.target)), &p.limit));
    let messages = c
        .message_rate_limits
        .iter()
        .filter(|m| m.direction == Direction::Ingress)
        .filter_map(|m| drop_burst_warning(format!("{} {}", target(&m.target), m.class), &m.limit));
    peers.chain(messages).collect()
}

pub(super) fn render(c: &Config) -> String {
    let mut o = String::new();
    let g = &c.global;
    let _ = writeln!(
        o,
        "agent: {} realm {} ({})",
        g.origin_host, g.origin_realm, g.product_name
    );
    let ports: Vec<String> = g.diameter_ports.iter().map(u16::to_string).collect();
    let _ = writeln!(
        o,
        "dynamic rate limiting: {}; unknown peers: {}; diameter ports: {}; watchdog {} s; \
         startup wait {} s",
        if g.dynamic_rate_limiting { "on" } else { "off" },
        g.unknown_peer.name(),
        ports.join(", "),
        g.watchdog.as_secs_f64(),
        g.startup_wait.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "fast path: interface {}, xdp mode {}, egress interface {}, fallback {}",
        or_dash(c.fast_path.interface.clone()),
        c.fast_path.xdp_mode.name(),
        or_dash(c.fast_path.egress_interface.clone()),
        c.fast_path.fallback.name(),
    );
    let st = &c.session_store;
    let _ = match st.kind {
        StoreKind::Memory => writeln!(o, "session store: memory ({} bindings)", st.cache_capacity),
        _ => writeln!(
            o,
            "session store: {} {} (ttl {}, timeout {}, write {}, on error {})",
            st.kind.name(),
            st.addresses.join(","),
            format_duration(st.ttl),
            format_duration(st.timeout),
            st.write.name(),
            st.on_error.name(),
        ),
    };
    let listeners: Vec<String> = c
        .listeners
        .iter()
        .map(|l| {
            let tls = if l.tls.is_some() { "+tls" } else { "" };
            format!("{} {}{tls}", l.address, l.transport.name())
        })
        .collect();
    let _ = writeln!(
        o,
        "listeners: {}; metrics: {}; control: {}",
        if listeners.is_empty() {
            "-".to_string()
        } else {
            listeners.join(", ")
        },
        or_dash(c.metrics.address.map(|a| a.to_string())),
        or_dash(c.control.socket.as_ref().map(|p| p.display().to_string())),
    );

    let _ = writeln!(o, "peers ({}):", c.peers.len());
    let w = c.peers.iter().map(|p| p.name.len()).max().unwrap_or(0);
    for p in &c.peers {
        let addrs: Vec<String> = p.addresses.iter().map(|a| a.to_string()).collect();
        let mut line = format!(
            "  {:w$}  {:6}  group {:8} {} ({})",
            p.name,
            p.role.name(),
            p.group.as_deref().unwrap_or("-"),
            p.origin_host,
            p.realm,
        );
        if !addrs.is_empty() {
            let _ = write!(line, "  from {}", addrs.join(", "));
        }
        if let Some(a) = p.connect {
            let _ = write!(line, "  connect {a}");
        }
        if p.weight != 1 {
            let _ = write!(line, "  weight {}", p.weight);
        }
        if let Some(n) = p.tls_name() {
            let _ = write!(line, "  tls {n}");
        }
        let _ = writeln!(o, "{line}");
    }

    if !c.peer_groups.is_empty() {
        let _ = writeln!(o, "peer groups:");
        for grp in &c.peer_groups {
            let members: Vec<&str> = c
                .group_members(&grp.name)
                .map(|p| p.name.as_str())
                .collect();
            let mut line = format!(
                "  {}: {} ({}), answer timeout {}, delay tolerance {}, queue {}",
                grp.name,
                members.join(", "),
                grp.selection.name(),
                format_duration(grp.answer_timeout),
                format_duration(grp.delay_tolerance),
                grp.queue_limit,
            );
            if let Some(m) = grp.max_outstanding {
                let _ = write!(line, ", max outstanding {m}");
            }
            let _ = writeln!(o, "{line}");
        }
    }

    if !c.peer_rate_limits.is_empty() || !c.message_rate_limits.is_empty() {
        let _ = writeln!(o, "static limits:");
        for p in &c.peer_rate_limits {
            let _ = writeln!(
                o,
                "  {:7} {} overall: {}",
                p.direction.name(),
                target(&p.target),
                limit(&p.limit)
            );
        }
        for m in &c.message_rate_limits {
            let _ = writeln!(
                o,
                "  {:7} {} {}: {}",
                m.direction.name(),
                target(&m.target),
                m.class,
                limit(&m.limit)
            );
        }
    }

    let enforced = c.enforced_by(c.fast_path.interface.as_ref().map(|_| true));
    if !enforced.is_empty() {
        let _ = writeln!(o, "enforced by:");
        let w = enforced
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        for (limit, part) in &enforced {
            let _ = writeln!(o, "  {limit:w$}  {part}");
        }
    }

    if !c.dynamic_peer_rate_limits.is_empty() {
        let state = if g.dynamic_rate_limiting {
            ""
        } else {
            " (switched off in [global])"
        };
        let _ = writeln!(o, "dynamic rate limiting peers{state}:");
        for d in &c.dynamic_peer_rate_limits {
            let classes: Vec<String> = d.classes.iter().map(|c| c.to_string()).collect();
            let _ = writeln!(o, "  {}: {}", target(&d.target), classes.join(", "));
        }
    }

    if let Some(p) = &c.db_cpu_profile {
        let mut line = format!(
            "db cpu profile: {}, sample every {}, hold {}, step {} %, missing after {} ({})",
            p.source,
            format_duration(p.sample_period),
            format_duration(p.reversal_hold_time),
            p.reversal_step,
            p.missing_after,
            p.on_missing.name(),
        );
        if let Some(a) = p.ewma_alpha {
            let _ = write!(line, ", ewma {a}");
        }
        let _ = writeln!(o, "{line}");
        let rows: Vec<String> = p
            .thresholds
            .iter()
            .map(|t| format!("{}%→{}%", t.cpu, t.throttle))
            .collect();
        let _ = writeln!(o, "  cpu → throttle: {}", rows.join(", "));
    }

    if !c.routes.is_empty() {
        let _ = writeln!(o, "routes:");
        for r in &c.routes {
            let realm = match &r.realm {
                RouteRealm::Exact(s) => s.as_str(),
                RouteRealm::Any => "*",
            };
            let app = r
                .application
                .map_or_else(|| "any app".to_string(), values::application_label);
            let _ = writeln!(
                o,
                "  {realm} {app} → {} weight {}",
                target(&r.target),
                r.weight
            );
        }
    }
    o
}
