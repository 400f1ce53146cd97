//! From the validated [`Config`] to the sans-IO pieces: peer directory, peer table,
//! route table, selectors per strategy, egress limiters per group, marked policy.

use std::time::Duration;

use dra_common::maps::Action;
use ipnet::IpNet;

use crate::config::{self, Config, Direction, RouteRealm, Selection, Target};
use crate::diameter::peer::StaticPeerDirectory;
use crate::relay::{
    GroupId, IngressRule, LimitAction, MarkedPolicyConfig, RejectProfile, RlfConfig, Scope,
};
use crate::routing::{PeerId, PeerTable, RouteEntry, RouteTable, RouteTableError, Strategy};

/// Why the agent cannot be built from a config.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A route could not be turned into a route-table entry.
    #[error("route table")]
    Routes(#[source] RouteTableError),
    /// The ingress profiles do not form a policy.
    #[error("ingress rate limit profiles")]
    Policy(#[source] crate::relay::PolicyError),
    /// An egress profile is not a valid limiter.
    #[error("egress limit of peer group {group}")]
    Rlf {
        /// The group.
        group: String,
        /// What is wrong.
        #[source]
        source: crate::relay::RlfConfigError,
    },
}

/// The routing strategy of a configured selection.
pub fn strategy(s: Selection) -> Strategy {
    match s {
        Selection::RoundRobin => Strategy::RoundRobin,
        Selection::Priority => Strategy::Priority,
        Selection::LeastLoaded => Strategy::LeastLoaded,
        Selection::WeightedLoad => Strategy::WeightedLoad,
        Selection::P2c => Strategy::P2c,
    }
}

/// Peer ids are config positions; the directory and the peer table use the peers'
/// Origin-Hosts. A peer without configured addresses is accepted from any address
/// (config: "addresses then come from CER only").
pub fn directory(cfg: &Config) -> StaticPeerDirectory {
    let mut dir = StaticPeerDirectory::new();
    for (i, p) in cfg.peers.iter().enumerate() {
        dir.add(PeerId(i), &p.origin_host, accepted_from(p));
    }
    dir
}

/// The networks the directory accepts peer `p` from: its addresses, or any address.
pub fn accepted_from(p: &config::Peer) -> Vec<IpNet> {
    if p.addresses.is_empty() {
        vec![
            "0.0.0.0/0".parse().expect("net"),
            "::/0".parse().expect("net"),
        ]
    } else {
        p.addresses.clone()
    }
}

/// A peer table in config order, every peer not yet good.
pub fn peer_table(cfg: &Config) -> PeerTable {
    let mut t = PeerTable::new();
    for p in &cfg.peers {
        t.add(&p.origin_host);
    }
    t
}

/// Group index of each peer (config order of `[[peer_group]]`).
pub fn memberships(cfg: &Config) -> Vec<Option<GroupId>> {
    cfg.peers
        .iter()
        .map(|p| {
            p.group
                .as_deref()
                .and_then(|g| cfg.peer_groups.iter().position(|x| x.name == g))
                .map(GroupId)
        })
        .collect()
}

/// The route table: a group route becomes one entry per member, with the route's
/// weight (members share it; the group's selection picks among them).
pub fn route_table(cfg: &Config) -> Result<RouteTable, SetupError> {
    let mut entries = Vec::new();
    for r in &cfg.routes {
        let realm = match &r.realm {
            RouteRealm::Exact(s) => s.as_str(),
            RouteRealm::Any => "*",
        };
        let peers: Vec<usize> = match &r.target {
            Target::Peer(n) => cfg
                .peers
                .iter()
                .position(|p| &p.name == n)
                .into_iter()
                .collect(),
            Target::Group(g) => cfg
                .peers
                .iter()
                .enumerate()
                .filter(|(_, p)| p.group.as_deref() == Some(g.as_str()))
                .map(|(i, _)| i)
                .collect(),
        };
        for i in peers {
            entries.push(
                RouteEntry::new(realm, r.application, PeerId(i), r.weight)
                    .map_err(SetupError::Routes)?,
            );
        }
    }
    RouteTable::new(entries).map_err(SetupError::Routes)
}

fn group_index(cfg: &Config, name: &str) -> Option<usize> {
    cfg.peer_groups.iter().position(|g| g.name == name)
}

/// One egress limiter setting per group (index = group position), from the group's
/// overall egress profile (`peer_rate_limit_profile`, direction egress) and the group's
/// queue limit, delay tolerance and max outstanding. A group with `max_outstanding`
/// but no egress rate gets an unlimited-rate limiter that only enforces the cap.
pub fn egress(cfg: &Config) -> Result<Vec<Option<RlfConfig>>, SetupError> {
    let mut out = Vec::new();
    for g in &cfg.peer_groups {
        let profile = cfg.peer_rate_limits.iter().find(|p| {
            p.direction == Direction::Egress && p.target == Target::Group(g.name.clone())
        });
        let rc = match profile {
            Some(p) => {
                let mut c = RlfConfig::new(p.limit.rate, p.limit.burst);
                c.action = limit_action(&p.limit);
                Some(c)
            }
            None if g.max_outstanding.is_some() => Some(RlfConfig::new(1e9, u32::MAX)),
            None => None,
        };
        let rc = rc.map(|mut c| {
            c.queue_limit = g.queue_limit;
            c.delay_tolerance = g.delay_tolerance;
            c.max_outstanding_per_peer = g.max_outstanding;
            c
        });
        if let Some(c) = &rc {
            crate::relay::Rlf::<()>::new(c.clone()).map_err(|source| SetupError::Rlf {
                group: g.name.clone(),
                source,
            })?;
        }
        out.push(rc);
    }
    Ok(out)
}

/// Answer timeout of each group.
pub fn answer_timeouts(cfg: &Config) -> Vec<Duration> {
    cfg.peer_groups.iter().map(|g| g.answer_timeout).collect()
}

/// What a configured limit does to a request over it (ingress or egress alike).
fn limit_action(l: &config::Limit) -> LimitAction {
    match l.action {
        Action::Drop => LimitAction::Drop,
        Action::Reject => LimitAction::Reject(RejectProfile {
            result_code: l.result_code,
            error_message: l.error_message.clone(),
        }),
    }
}

fn scope(cfg: &Config, t: &Target) -> Option<Scope> {
    match t {
        Target::Peer(n) => cfg
            .peers
            .iter()
            .position(|p| &p.name == n)
            .map(|i| Scope::Peer(PeerId(i))),
        Target::Group(g) => group_index(cfg, g).map(|i| Scope::Group(GroupId(i))),
    }
}

/// The ingress profiles (peer and message rate limit profiles with direction
/// ingress) as the marked-request policy.
pub fn marked_policy(cfg: &Config) -> MarkedPolicyConfig {
    let ingress = Direction::Ingress;
    let peer = cfg
        .peer_rate_limits
        .iter()
        .filter(|p| p.direction == ingress);
    let message = cfg
        .message_rate_limits
        .iter()
        .filter(|m| m.direction == ingress);
    let rules = peer
        .map(|p| (&p.target, None, &p.limit))
        .chain(message.map(|m| (&m.target, Some(m.class.msg_class()), &m.limit)))
        .filter_map(|(target, class, limit)| {
            Some(IngressRule {
                scope: scope(cfg, target)?,
                class,
                action: limit_action(limit),
            })
        })
        .collect();
    let memberships = memberships(cfg)
        .into_iter()
        .enumerate()
        .filter_map(|(i, g)| g.map(|g| (PeerId(i), g)))
        .collect();
    MarkedPolicyConfig {
        rules,
        memberships,
        default: LimitAction::default(),
    }
}
