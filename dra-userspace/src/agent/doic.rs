//! The agent's DOIC reporting node ([`crate::doic::Reporter`]) built from the config:
//! which gateways have `doic = true`, and the ingress limits each report describes.

use crate::config::{Config, Direction, Role, Target};
use crate::doic::{ClassLimit, GatewayConfig, Reporter};

/// Whether `target` covers `peer` (the peer itself, or its group).
fn covers(target: &Target, name: &str, group: Option<&str>) -> bool {
    match target {
        Target::Peer(p) => p == name,
        Target::Group(g) => Some(g.as_str()) == group,
    }
}

/// The settings of each peer (by index): `None` unless it is a client with DOIC on.
/// A peer's own ingress profile wins over its group's, as in the fast path's plan.
pub fn gateways(cfg: &Config) -> Vec<Option<GatewayConfig>> {
    cfg.peers
        .iter()
        .map(|p| {
            let d = p.doic.as_ref().filter(|_| p.role == Role::Client)?;
            let group = p.group.as_deref();
            let rank = |t: &Target| if matches!(t, Target::Peer(_)) { 0 } else { 1 };
            let overall = cfg
                .peer_rate_limits
                .iter()
                .filter(|l| l.direction == Direction::Ingress && covers(&l.target, &p.name, group))
                .min_by_key(|l| rank(&l.target))
                .map(|l| l.limit.rate);
            let drl = cfg
                .global
                .dynamic_rate_limiting
                .then(|| cfg.dynamic_profile_for_peer(&p.name))
                .flatten();
            let mut classes: Vec<(u8, ClassLimit)> = Vec::new();
            for l in &cfg.message_rate_limits {
                if l.direction != Direction::Ingress || !covers(&l.target, &p.name, group) {
                    continue;
                }
                let r = rank(&l.target);
                let class = l.msg_class();
                let limit = ClassLimit {
                    class,
                    rate: l.limit.rate,
                    dynamic: drl.is_some_and(|d| d.classes.contains(&l.class)),
                };
                match classes.iter_mut().find(|(_, c)| c.class == class) {
                    Some(slot) if r < slot.0 => *slot = (r, limit),
                    Some(_) => {}
                    None => classes.push((r, limit)),
                }
            }
            Some(GatewayConfig {
                origin_host: p.origin_host.clone(),
                algorithms: d.algorithms.clone(),
                validity_secs: d.validity.as_secs() as u32,
                overall,
                classes: classes.into_iter().map(|(_, c)| c).collect(),
            })
        })
        .collect()
}

/// The first OC-Sequence-Number: milliseconds since the Unix epoch now, so the reports
/// of a restarted agent are newer than its predecessor's (as long as that one changed
/// each gateway's report fewer than 1000 times a second).
pub fn sequence_base() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2))
}

/// The reporting node for `cfg`; sequence numbers start at `sequence_base`.
pub fn reporter(cfg: &Config, sequence_base: u64) -> Reporter {
    Reporter::new(&cfg.global.origin_host, gateways(cfg), sequence_base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{client, global, gx_ccr_limit, peer_limit};
    use dra_common::wire::{MsgClass, cc_request_type as rt};

    /// pgw1 (DOIC, loss only, 10 s) and pgw2 in group gws; limits of the group and of pgw1.
    fn text() -> String {
        const GWS: &str = "group = \"gws\"";
        const PGW1: &str = "peer = \"pgw1\"";
        let doic = "doic = true\ndoic_algorithms = [\"loss\"]\ndoic_validity = \"10s\"\n";
        [
            global("dynamic_rate_limiting = true\n"),
            client("pgw1", &["198.18.1.2"], &format!("{GWS}\n{doic}")),
            client("pgw2", &["198.18.1.3"], &format!("{GWS}\n")),
            "\n[[peer_group]]\nname = \"gws\"\n".into(),
            peer_limit(GWS, "ingress", 500, ""),
            peer_limit(PGW1, "ingress", 300, ""),
            gx_ccr_limit(GWS, "initial", 100, ""),
            gx_ccr_limit(PGW1, "initial", 50, ""),
            gx_ccr_limit(GWS, "termination", 80, ""),
            r#"
[[dynamic_peer_rate_limit_profile]]
peer = "pgw1"
classes = [{ application = "gx", command = "ccr", request_type = "initial" }]

[dynamic_throttling_db_cpu_profile]
thresholds = [{ cpu = 50, throttle = 20 }]
source = { kind = "procfs", process = "redis-server" }
"#
            .into(),
        ]
        .concat()
    }

    #[test]
    fn gateways_take_the_limits_the_fast_path_enforces() {
        let cfg = crate::config::parse(&text(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let g = gateways(&cfg);
        assert_eq!(g.len(), 2);
        assert!(g[1].is_none(), "pgw2 has no doic");
        let g = g[0].clone().expect("pgw1");
        assert_eq!(g.origin_host, "pgw1.lab.example");
        assert_eq!(g.algorithms, vec![crate::doic::Algorithm::Loss]);
        assert_eq!(g.validity_secs, 10);
        // The peer's own profiles win over the group's; the group's fill the rest.
        assert_eq!(g.overall, Some(300.0));
        let mut classes = g.classes.clone();
        classes.sort_by_key(|c| c.class.req_type);
        assert_eq!(
            classes,
            vec![
                ClassLimit {
                    class: MsgClass::gx_ccr(rt::INITIAL),
                    rate: 50.0,
                    dynamic: true,
                },
                ClassLimit {
                    class: MsgClass::gx_ccr(rt::TERMINATION),
                    rate: 80.0,
                    dynamic: false,
                },
            ]
        );
    }
}
