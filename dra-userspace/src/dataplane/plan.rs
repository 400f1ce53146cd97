//! From the validated config to what the fast path's maps must hold: peer ids,
//! bucket slots, class-slot entries and bucket rates. Pure: no maps, no syscalls, so
//! it is tested on its own and the dynamic controller can find the slots it rewrites.
//!
//! Layout:
//! * every peer (clients and servers) gets an id (1-based, config order) and its
//!   source prefixes map to it; unknown sources follow `unknown_peer`;
//! * every peer gets an *overall* slot (its `peer_rate_limit_profile`, ingress; or
//!   its group's, shared by the members; or unlimited, counting only) and an *other*
//!   slot counting classes that have no slot of their own;
//! * each ingress `message_rate_limit_profile` gets one slot per target (a group's is
//!   shared by its members); a profile whose request type is "any" covers every
//!   CC-Request-Type of its command that has no more specific profile;
//! * classes a DRL profile names always have a slot (they are what the controller
//!   rewrites);
//! * a connection guard (`connection_rate`) gets a slot per peer;
//! * a TLS peer gets the same slots (the agent's limiter, laid out from this plan,
//!   enforces its limits: XDP cannot read TLS records), but what XDP is given for it
//!   ([`Plan::xdp_peers`], [`Plan::xdp_class_entries`]) keeps only its connection
//!   guard: no overall or "other" slot and no class slots, so XDP charges and marks
//!   nothing of its traffic (a request is never charged twice, ciphertext is never
//!   taken for a request) while unknown sources are still dropped before the stack.
//!
//! Egress (TC, after every ingress slot so ingress indices do not move):
//! * every destination — a server peer, or a peer an egress profile names directly
//!   or through its group — gets an [`EgressPeer`] keyed by its addresses and the
//!   address it is connected to (`connect`);
//! * a destination's `dest_slot` carries its own egress `peer_rate_limit_profile`
//!   (or only counts); its `group_slot` is its group's egress profile, one slot
//!   shared by the members; `other_slot` counts classes without a slot;
//! * each egress `message_rate_limit_profile` gets one slot per target (a group's
//!   shared), with the same "any request type" expansion as ingress.

use std::collections::BTreeMap;

use dra_common::{
    maps::{
        BucketConfig, BucketKey, EgressPeer, GlobalConfig, MAX_SLOTS, NO_SLOT, PeerInfo,
        UnknownPeerPolicy,
    },
    wire::MsgClass,
};
use ipnet::IpNet;

use crate::config::{Config, Direction, Limit, RequestType, Role, Target, UnknownPeer};

/// One slot of the bucket arrays and what it stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub index: u32,
    /// Peer or group name.
    pub owner: String,
    /// Metrics label of the class: "all", "other", "conn" or a class label.
    pub class_label: String,
    /// Rate at the static configuration (None: counting only).
    pub limit: Option<Limit>,
}

impl Slot {
    /// The fast path's bucket config at rate `rate` (the static rate unless the
    /// dynamic controller scales it).
    pub fn bucket_at(&self, rate: Option<f64>) -> BucketConfig {
        match &self.limit {
            None => BucketConfig::UNLIMITED,
            Some(l) => BucketConfig::new(rate.unwrap_or(l.rate), l.burst, l.action),
        }
    }
}

/// A peer as planned for the fast path.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedPeer {
    pub name: String,
    pub info: PeerInfo,
    pub prefixes: Vec<IpNet>,
    /// A TLS peer: its limits are the agent's limiter's (module docs).
    pub tls: bool,
}

/// A destination as planned for the TC egress program.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedEgress {
    pub name: String,
    pub info: EgressPeer,
    /// Destination prefixes (config addresses and the `connect` address).
    pub prefixes: Vec<IpNet>,
}

/// Everything the fast path's maps hold, derived from a config.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub global: GlobalConfig,
    pub peers: Vec<PlannedPeer>,
    pub slots: Vec<Slot>,
    /// (peer id, class) → slot.
    pub class_slots: BTreeMap<(u32, ClassKey), u32>,
    /// Destinations of the TC egress program.
    pub egress_peers: Vec<PlannedEgress>,
    /// (destination peer id, class) → egress slot.
    pub egress_class_slots: BTreeMap<(u32, ClassKey), u32>,
}

/// Expands "any request type" entries to the specific types without their own slot.
fn expand_any(classes: &mut BTreeMap<ClassKey, u32>) {
    let any: Vec<(ClassKey, u32)> = classes
        .iter()
        .filter(|((_, _, rt), _)| *rt == RequestType::Any.wire())
        .map(|(k, s)| (*k, *s))
        .collect();
    for ((a, c, _), s) in any {
        for rt in 1..=4u8 {
            classes.entry((a, c, rt)).or_insert(s);
        }
    }
}

/// The slots of the group profiles in `direction`, in config order: the overall limits
/// by group, then the class limits by (group, class). Their labels start with `prefix`.
#[allow(clippy::type_complexity)]
fn group_slots(
    cfg: &Config,
    direction: Direction,
    prefix: &str,
    push: &mut impl FnMut(&str, String, Option<Limit>) -> u32,
) -> (BTreeMap<String, u32>, BTreeMap<(String, ClassKey), u32>) {
    let mut overall = BTreeMap::new();
    for p in &cfg.peer_rate_limits {
        if p.direction == direction
            && let Target::Group(g) = &p.target
        {
            overall.insert(
                g.clone(),
                push(g, format!("{prefix}all"), Some(p.limit.clone())),
            );
        }
    }
    let mut class = BTreeMap::new();
    for m in &cfg.message_rate_limits {
        if m.direction == direction
            && let Target::Group(g) = &m.target
        {
            let c = m.msg_class();
            let slot = push(
                g,
                format!("{prefix}{}", class_label(c)),
                Some(m.limit.clone()),
            );
            class.insert((g.clone(), key(c)), slot);
        }
    }
    (overall, class)
}

/// Orderable form of [`MsgClass`].
pub type ClassKey = (u32, u32, u8);

fn key(c: MsgClass) -> ClassKey {
    (c.app_id, c.command_code, c.req_type)
}

/// Why a config cannot be laid out in the fast path's maps.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("the fast path has {max} bucket slots; this config needs more")]
    TooManySlots { max: u32 },
    #[error("the fast path watches at most 4 Diameter ports; the config lists {count}")]
    TooManyPorts { count: usize },
}

pub use crate::metrics::class_label;

impl Plan {
    /// Lays out `cfg`.
    pub fn new(cfg: &Config) -> Result<Plan, PlanError> {
        let mut slots: Vec<Slot> = Vec::new();
        let mut push = |owner: &str, label: String, limit: Option<Limit>| -> u32 {
            let index = slots.len() as u32;
            slots.push(Slot {
                index,
                owner: owner.to_string(),
                class_label: label,
                limit,
            });
            index
        };

        // Shared group slots first (overall, then per class).
        let (group_overall, group_class) = group_slots(cfg, Direction::Ingress, "", &mut push);

        let mut peers = Vec::new();
        let mut class_slots = BTreeMap::new();
        for (i, peer) in cfg.peers.iter().enumerate() {
            let id = i as u32 + 1;
            let own_overall = cfg.peer_rate_limits.iter().find(|p| {
                p.direction == Direction::Ingress && p.target == Target::Peer(peer.name.clone())
            });
            let overall_slot = match (
                own_overall,
                peer.group.as_ref().and_then(|g| group_overall.get(g)),
            ) {
                (Some(p), _) => push(&peer.name, "all".into(), Some(p.limit.clone())),
                (None, Some(s)) => *s,
                (None, None) => push(&peer.name, "all".into(), None),
            };
            let other_slot = push(&peer.name, "other".into(), None);
            let conn_slot = match &peer.connection_guard {
                Some(l) => push(&peer.name, "conn".into(), Some(l.clone())),
                None => NO_SLOT,
            };

            // Classes: this peer's own profiles, then its group's.
            let mut classes: BTreeMap<ClassKey, u32> = BTreeMap::new();
            for m in &cfg.message_rate_limits {
                if m.direction == Direction::Ingress && m.target == Target::Peer(peer.name.clone())
                {
                    let c = m.msg_class();
                    classes.insert(
                        key(c),
                        push(&peer.name, class_label(c), Some(m.limit.clone())),
                    );
                }
            }
            if let Some(g) = &peer.group {
                for ((gname, c), s) in &group_class {
                    if gname == g {
                        classes.entry(*c).or_insert(*s);
                    }
                }
            }
            // DRL classes without a profile still get a (counting) slot.
            if let Some(d) = cfg.dynamic_profile_for_peer(&peer.name) {
                for c in &d.classes {
                    let mc = c.msg_class();
                    classes
                        .entry(key(mc))
                        .or_insert_with(|| push(&peer.name, class_label(mc), None));
                }
            }
            expand_any(&mut classes);
            for (c, s) in classes {
                class_slots.insert((id, c), s);
            }
            peers.push(PlannedPeer {
                name: peer.name.clone(),
                info: PeerInfo {
                    peer_id: id,
                    overall_slot,
                    other_slot,
                    conn_slot,
                },
                prefixes: peer.addresses.clone(),
                tls: peer.tls.is_some(),
            });
        }
        // ---- egress ----
        let (group_egress, group_egress_class) =
            group_slots(cfg, Direction::Egress, "egress:", &mut push);
        let names_egress = |peer: &crate::config::Peer| {
            let t = Target::Peer(peer.name.clone());
            let by_group = |x: &Target| {
                peer.group
                    .as_ref()
                    .is_some_and(|g| *x == Target::Group(g.clone()))
            };
            cfg.peer_rate_limits
                .iter()
                .any(|p| p.direction == Direction::Egress && (p.target == t || by_group(&p.target)))
                || cfg.message_rate_limits.iter().any(|m| {
                    m.direction == Direction::Egress && (m.target == t || by_group(&m.target))
                })
        };
        let mut egress_peers = Vec::new();
        let mut egress_class_slots = BTreeMap::new();
        for (i, peer) in cfg.peers.iter().enumerate() {
            if peer.role != Role::Server && !names_egress(peer) {
                continue;
            }
            let id = i as u32 + 1;
            let own = cfg.peer_rate_limits.iter().find(|p| {
                p.direction == Direction::Egress && p.target == Target::Peer(peer.name.clone())
            });
            let dest_slot = push(
                &peer.name,
                "egress:all".into(),
                own.map(|p| p.limit.clone()),
            );
            let group_slot = peer
                .group
                .as_ref()
                .and_then(|g| group_egress.get(g))
                .copied()
                .unwrap_or(NO_SLOT);
            let other_slot = push(&peer.name, "egress:other".into(), None);
            let mut classes: BTreeMap<ClassKey, u32> = BTreeMap::new();
            for m in &cfg.message_rate_limits {
                if m.direction == Direction::Egress && m.target == Target::Peer(peer.name.clone()) {
                    let c = m.msg_class();
                    classes.insert(
                        key(c),
                        push(
                            &peer.name,
                            format!("egress:{}", class_label(c)),
                            Some(m.limit.clone()),
                        ),
                    );
                }
            }
            if let Some(g) = &peer.group {
                for ((gname, c), s) in &group_egress_class {
                    if gname == g {
                        classes.entry(*c).or_insert(*s);
                    }
                }
            }
            expand_any(&mut classes);
            for (c, s) in classes {
                egress_class_slots.insert((id, c), s);
            }
            let mut prefixes = peer.addresses.clone();
            if let Some(a) = peer.connect {
                let net = IpNet::from(a.ip());
                if !prefixes.contains(&net) {
                    prefixes.push(net);
                }
            }
            egress_peers.push(PlannedEgress {
                name: peer.name.clone(),
                info: EgressPeer {
                    peer_id: id,
                    dest_slot,
                    group_slot,
                    other_slot,
                },
                prefixes,
            });
        }
        // The last slot is the overload answer budget's (OVERLOAD_ANSWER_SLOT).
        if slots.len() as u64 >= MAX_SLOTS as u64 {
            return Err(PlanError::TooManySlots { max: MAX_SLOTS - 1 });
        }
        if cfg.global.diameter_ports.len() > 4 {
            return Err(PlanError::TooManyPorts {
                count: cfg.global.diameter_ports.len(),
            });
        }
        let mut ports = [0u16; 4];
        for (i, p) in cfg.global.diameter_ports.iter().enumerate() {
            ports[i] = *p;
        }
        let global = GlobalConfig {
            ports,
            unknown_peer: match cfg.global.unknown_peer {
                UnknownPeer::Pass => UnknownPeerPolicy::Pass as u32,
                UnknownPeer::Drop => UnknownPeerPolicy::Drop as u32,
            },
            enabled: 1,
        };
        Ok(Plan {
            global,
            peers,
            slots,
            class_slots,
            egress_peers,
            egress_class_slots,
        })
    }

    /// The peer's planned entry, by name.
    pub fn peer(&self, name: &str) -> Option<&PlannedPeer> {
        self.peers.iter().find(|p| p.name == name)
    }

    /// The slot of a peer × class (None if the class has no slot of its own).
    pub fn slot_of(&self, peer: &str, class: MsgClass) -> Option<u32> {
        let p = self.peer(peer)?;
        self.class_slots.get(&(p.info.peer_id, key(class))).copied()
    }

    /// The planned egress destination, by peer name.
    pub fn egress_peer(&self, name: &str) -> Option<&PlannedEgress> {
        self.egress_peers.iter().find(|p| p.name == name)
    }

    /// The egress slot of a destination × class (None if the class has no slot of
    /// its own: it counts on the destination's `other_slot`).
    pub fn egress_slot_of(&self, peer: &str, class: MsgClass) -> Option<u32> {
        let p = self.egress_peer(peer)?;
        self.egress_class_slots
            .get(&(p.info.peer_id, key(class)))
            .copied()
    }

    /// The egress class-slot map entries.
    pub fn egress_class_entries(&self) -> impl Iterator<Item = (BucketKey, u32)> + '_ {
        self.egress_class_slots
            .iter()
            .map(|((peer, (a, c, rt)), s)| (BucketKey::new(*peer, MsgClass::new(*a, *c, *rt)), *s))
    }

    /// The peers as XDP's peer tries hold them: a TLS peer keeps only its id and its
    /// connection guard (module docs).
    pub fn xdp_peers(&self) -> impl Iterator<Item = (&[IpNet], PeerInfo)> + '_ {
        self.peers.iter().map(|p| {
            let info = if p.tls {
                PeerInfo {
                    overall_slot: NO_SLOT,
                    other_slot: NO_SLOT,
                    ..p.info
                }
            } else {
                p.info
            };
            (&p.prefixes[..], info)
        })
    }

    /// The class-slot map entries XDP is given: none of a TLS peer's.
    pub fn xdp_class_entries(&self) -> impl Iterator<Item = (BucketKey, u32)> + '_ {
        let tls: Vec<u32> = self
            .peers
            .iter()
            .filter(|p| p.tls)
            .map(|p| p.info.peer_id)
            .collect();
        self.class_entries()
            .filter(move |(k, _)| !tls.contains(&k.peer))
    }

    /// Whether the slot is one of a TLS peer's ingress slots (enforced and counted by
    /// the agent's limiter, never by XDP).
    pub fn is_tls_slot(&self, slot: &Slot) -> bool {
        let of = |p: &PlannedPeer| {
            [p.info.overall_slot, p.info.other_slot]
                .into_iter()
                .chain(
                    self.class_slots
                        .iter()
                        .filter(|((id, _), _)| *id == p.info.peer_id)
                        .map(|(_, s)| *s),
                )
                .any(|s| s == slot.index)
        };
        self.peers.iter().any(|p| p.tls && of(p))
    }

    /// The class-slot map entries.
    pub fn class_entries(&self) -> impl Iterator<Item = (BucketKey, u32)> + '_ {
        self.class_slots
            .iter()
            .map(|((peer, (a, c, rt)), s)| (BucketKey::new(*peer, MsgClass::new(*a, *c, *rt)), *s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> Plan {
        let cfg = crate::config::parse(include_str!("../../../config/dra.toml"), "dra.toml")
            .expect("seed config");
        Plan::new(&cfg).expect("plan")
    }

    #[test]
    fn seed_egress_group_limits_are_shared_by_members() {
        let plan = seed();
        let p1 = plan
            .egress_peer("pcrf1")
            .expect("pcrf1 is a destination")
            .info;
        let p2 = plan
            .egress_peer("pcrf2")
            .expect("pcrf2 is a destination")
            .info;
        let o1 = plan
            .egress_peer("ocs1")
            .expect("ocs1 is a destination")
            .info;
        assert_eq!(p1.group_slot, p2.group_slot, "one PCRF group bucket");
        assert_ne!(p1.group_slot, o1.group_slot);
        assert_ne!(p1.dest_slot, p2.dest_slot, "per-destination counting");
        let rate = |s: u32| plan.slots[s as usize].limit.as_ref().map(|l| l.rate);
        assert_eq!(rate(p1.group_slot), Some(2000.0));
        assert_eq!(rate(o1.group_slot), Some(500.0));
        assert_eq!(
            rate(p1.dest_slot),
            None,
            "no per-peer egress profile: counting only"
        );
        // Clients are not egress destinations.
        assert!(plan.egress_peer("pgw1").is_none());
    }

    #[test]
    fn egress_slots_come_after_ingress_slots() {
        let plan = seed();
        let max_ingress = plan
            .peers
            .iter()
            .flat_map(|p| [p.info.overall_slot, p.info.other_slot])
            .chain(plan.class_slots.values().copied())
            .max()
            .unwrap();
        for e in &plan.egress_peers {
            assert!(e.info.dest_slot > max_ingress && e.info.other_slot > max_ingress);
            assert!(
                plan.slots[e.info.dest_slot as usize]
                    .class_label
                    .starts_with("egress:")
            );
        }
    }

    #[test]
    fn egress_destinations_include_the_connect_address() {
        let plan = seed();
        let p1 = plan.egress_peer("pcrf1").unwrap();
        assert!(p1.prefixes.contains(&"198.18.2.2/32".parse().unwrap()));
        assert_eq!(
            p1.prefixes
                .iter()
                .filter(|n| **n == "198.18.2.2/32".parse::<IpNet>().unwrap())
                .count(),
            1
        );
    }
}
