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

/// The reporting node for `cfg`; sequence numbers start at `sequence_base`.
pub fn reporter(cfg: &Config, sequence_base: u64) -> Reporter {
    Reporter::new(&cfg.global.origin_host, gateways(cfg), sequence_base)
}
