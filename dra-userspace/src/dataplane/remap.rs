//! A reload's plan on top of the running one (`crate::run`'s reload): every bucket
//! that stays — same owner (peer or group) and class label — keeps its slot, so its
//! tokens (the GCRA state in `bucket_state`) carry over even when its rate changes;
//! every peer that stays keeps its fast-path id. New buckets get slots the running
//! plan does not use (they start full: the caller resets them); removed ones are
//! no longer referenced once the new plan is written.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dra_common::maps::{MAX_SLOTS, NO_SLOT};

use super::{Plan, PlanError};

/// How a new plan's slots and peer ids were moved onto the running plan's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remap {
    /// New plan's slot (as [`Plan::new`] numbered it) → slot in the maps.
    pub slots: HashMap<u32, u32>,
    /// Slots that were not in the running plan (to be filled).
    pub fresh: Vec<u32>,
    /// Slots of the running plan no longer used.
    pub freed: Vec<u32>,
}

impl Remap {
    /// Where slot `s` of the new plan went.
    pub fn slot(&self, s: u32) -> u32 {
        if s == NO_SLOT {
            return s;
        }
        self.slots.get(&s).copied().unwrap_or(s)
    }
}

impl Plan {
    /// Renumbers this (new) plan's slots and peer ids onto `old`'s (see the module
    /// docs).
    pub fn remap_onto(&mut self, old: &Plan) -> Result<Remap, PlanError> {
        let old_slots: HashMap<(&str, &str), u32> = old
            .slots
            .iter()
            .map(|s| ((s.owner.as_str(), s.class_label.as_str()), s.index))
            .collect();
        let old_used: BTreeSet<u32> = old.slots.iter().map(|s| s.index).collect();
        let mut taken = BTreeSet::new();
        let mut map = HashMap::new();
        let mut pending = Vec::new();
        for s in &self.slots {
            match old_slots.get(&(s.owner.as_str(), s.class_label.as_str())) {
                Some(&i) if taken.insert(i) => {
                    map.insert(s.index, i);
                }
                _ => pending.push(s.index),
            }
        }
        let freed: Vec<u32> = old_used.difference(&taken).copied().collect();
        // Fresh slots: never used by the running plan first, then freed ones.
        // The last slot is the overload answer budget's (OVERLOAD_ANSWER_SLOT).
        let mut free = (0..MAX_SLOTS - 1)
            .filter(|i| !old_used.contains(i))
            .chain(freed.iter().copied());
        let mut fresh = Vec::new();
        for s in pending {
            let i = free
                .next()
                .ok_or(PlanError::TooManySlots { max: MAX_SLOTS - 1 })?;
            map.insert(s, i);
            fresh.push(i);
        }
        let r = Remap {
            slots: map,
            fresh,
            freed: freed.into_iter().filter(|i| !taken.contains(i)).collect(),
        };
        // Peer ids: kept by name; new peers get ids the running plan does not use.
        let old_ids: HashMap<&str, u32> = old.peer_ids().collect();
        let mut next = old_ids.values().copied().max().unwrap_or(0) + 1;
        let mut ids: HashMap<u32, u32> = HashMap::new();
        let names: Vec<(String, u32)> = self
            .peer_ids()
            .map(|(name, id)| (name.to_owned(), id))
            .collect();
        for (name, id) in names {
            if ids.contains_key(&id) {
                continue;
            }
            let to = match old_ids.get(name.as_str()) {
                Some(&o) => o,
                None => {
                    next += 1;
                    next - 1
                }
            };
            ids.insert(id, to);
        }
        let id = |i: u32| ids.get(&i).copied().unwrap_or(i);
        for s in &mut self.slots {
            s.index = r.slot(s.index);
        }
        for p in &mut self.peers {
            p.info.peer_id = id(p.info.peer_id);
            p.info.overall_slot = r.slot(p.info.overall_slot);
            p.info.other_slot = r.slot(p.info.other_slot);
            p.info.conn_slot = r.slot(p.info.conn_slot);
        }
        for p in &mut self.egress_peers {
            p.info.peer_id = id(p.info.peer_id);
            p.info.dest_slot = r.slot(p.info.dest_slot);
            p.info.group_slot = r.slot(p.info.group_slot);
            p.info.other_slot = r.slot(p.info.other_slot);
        }
        let remap = |m: &BTreeMap<(u32, super::plan::ClassKey), u32>| {
            m.iter()
                .map(|((p, c), s)| ((id(*p), *c), r.slot(*s)))
                .collect::<BTreeMap<_, _>>()
        };
        self.class_slots = remap(&self.class_slots);
        self.egress_class_slots = remap(&self.egress_class_slots);
        Ok(r)
    }

    /// The name and id of every peer: the ingress peers, then the egress destinations.
    fn peer_ids(&self) -> impl Iterator<Item = (&str, u32)> {
        let ingress = self.peers.iter().map(|p| (p.name.as_str(), p.info.peer_id));
        let egress = self
            .egress_peers
            .iter()
            .map(|p| (p.name.as_str(), p.info.peer_id));
        ingress.chain(egress)
    }

    /// The slot with this index (a remapped plan's slots are not in index order).
    pub fn slot_at(&self, index: u32) -> Option<&super::Slot> {
        self.slots.iter().find(|s| s.index == index)
    }
}

#[cfg(test)]
mod tests {
    use dra_common::wire::MsgClass;

    use super::*;
    use crate::config::parse;
    use crate::config::testing::{client, global, gx_ccr_limit};

    /// The agent and the clients pgw1 and pgw2.
    fn base() -> String {
        [
            global(""),
            client("pgw1", &["198.18.1.2"], ""),
            client("pgw2", &["198.18.1.3"], ""),
        ]
        .concat()
    }

    fn lim(peer: &str, rt: &str, rate: u32) -> String {
        gx_ccr_limit(&format!("peer = \"{peer}\""), rt, rate, "")
    }

    fn plan(extra: &str) -> Plan {
        let c = parse(&(base() + extra), "t.toml").unwrap_or_else(|e| panic!("{e}"));
        Plan::new(&c).expect("plan")
    }

    #[test]
    fn kept_buckets_keep_their_slots_and_new_ones_get_unused_ones() {
        let old = plan(&lim("pgw2", "initial", 200));
        let i = MsgClass::gx_ccr(1);
        let u = MsgClass::gx_ccr(2);
        let old_slot = old.slot_of("pgw2", i).expect("slot");
        // pgw1 gets a limit before pgw2's in config order: Plan::new numbers it first.
        let mut new = plan(&format!(
            "{}{}{}",
            lim("pgw1", "update", 50),
            lim("pgw2", "initial", 100),
            lim("pgw2", "update", 70)
        ));
        assert_ne!(
            new.slot_of("pgw2", i),
            Some(old_slot),
            "the test must move it"
        );
        let r = new.remap_onto(&old).expect("remap");
        assert_eq!(new.slot_of("pgw2", i), Some(old_slot));
        let s = new.slot_at(old_slot).expect("slot");
        assert_eq!(s.limit.as_ref().map(|l| l.rate), Some(100.0));
        let fresh_u = new.slot_of("pgw2", u).expect("slot");
        let fresh_1 = new.slot_of("pgw1", u).expect("slot");
        for f in [fresh_u, fresh_1] {
            assert!(r.fresh.contains(&f), "{f} not fresh: {r:?}");
            assert!(old.slot_at(f).is_none(), "{f} was used");
        }
        // Peer ids and every other slot stay.
        for p in ["pgw1", "pgw2"] {
            assert_eq!(new.peer(p).unwrap().info, {
                let mut info = old.peer(p).unwrap().info;
                info.peer_id = new.peer(p).unwrap().info.peer_id;
                info
            });
            assert_eq!(
                new.peer(p).unwrap().info.peer_id,
                old.peer(p).unwrap().info.peer_id
            );
        }
        let mut idx: Vec<u32> = new.slots.iter().map(|s| s.index).collect();
        idx.sort_unstable();
        idx.dedup();
        assert_eq!(idx.len(), new.slots.len(), "slots collide");
    }

    #[test]
    fn removed_buckets_are_freed_and_removed_peers_ids_not_reused() {
        let old = plan(&format!(
            "{}{}",
            lim("pgw1", "initial", 10),
            lim("pgw2", "initial", 20)
        ));
        let text = base().replace(
            "name = \"pgw1\"\norigin_host = \"pgw1.lab.example\"",
            "name = \"pgw3\"\norigin_host = \"pgw3.lab.example\"",
        );
        let c = parse(&format!("{text}{}", lim("pgw2", "initial", 20)), "t.toml")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut new = Plan::new(&c).expect("plan");
        let r = new.remap_onto(&old).expect("remap");
        let gone = old.slot_of("pgw1", MsgClass::gx_ccr(1)).expect("slot");
        assert!(r.freed.contains(&gone), "{r:?}");
        let ids: Vec<u32> = old.peers.iter().map(|p| p.info.peer_id).collect();
        assert!(!ids.contains(&new.peer("pgw3").unwrap().info.peer_id));
        assert_eq!(
            new.peer("pgw2").unwrap().info.peer_id,
            old.peer("pgw2").unwrap().info.peer_id
        );
        assert_eq!(
            new.slot_of("pgw2", MsgClass::gx_ccr(1)),
            old.slot_of("pgw2", MsgClass::gx_ccr(1))
        );
    }
}
