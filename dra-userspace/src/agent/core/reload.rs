//! A reload (`dra reload`, SIGHUP; `crate::reload`): the core swaps its routing,
//! groups and policies for the new config's and connects, disconnects or re-dials the
//! peers that were added, removed or moved. The caller has validated the config and
//! checked with [`crate::config::diff`] that it can be applied live.
//!
//! Peer and group ids are positions and stay valid: kept peers and groups keep their
//! position (their connections, load, pending requests and egress queues stay), new
//! ones are appended, removed ones stay as tombstones (no group, no `connect`, not in
//! the peer directory, not shown by `dra status`). The route table, memberships and
//! marked policy are rebuilt and swapped at once: requests in flight already have
//! their upstream peer (a retry takes the new table).

use super::*;
use crate::config::diff::ConfigDiff;
use crate::diameter::peer::StaticPeerDirectory;

/// Marks a tombstone's name in the peer table (never a DiameterIdentity).
const REMOVED: &str = "\u{0}removed:";

impl Core {
    /// Applies `new` (validated, diffed against the running config as `diff`).
    pub(super) fn reload(&mut self, new: Config, diff: &ConfigDiff) -> Result<(), SetupError> {
        let now = self.now();
        let old = self.cfg.clone();
        // The merged config: old positions first, then the new peers and groups.
        let mut merged = new.clone();
        merged.peers.clear();
        let mut removed = Vec::new();
        let mut revived = Vec::new();
        for (i, o) in old.peers.iter().enumerate() {
            match new.peers.iter().find(|n| n.name == o.name) {
                Some(n) => {
                    if self.slots[i].retired {
                        revived.push(i);
                    }
                    merged.peers.push(n.clone());
                }
                None => {
                    if !self.slots[i].retired {
                        removed.push(i);
                    }
                    let mut t = o.clone();
                    t.group = None;
                    t.connect = None;
                    t.doic = None;
                    t.connection_guard = None;
                    t.tls = None;
                    merged.peers.push(t);
                }
            }
        }
        let added: Vec<usize> = new
            .peers
            .iter()
            .filter(|n| !old.peers.iter().any(|o| o.name == n.name))
            .map(|n| {
                merged.peers.push(n.clone());
                merged.peers.len() - 1
            })
            .collect();
        merged.peer_groups.clear();
        for o in &old.peer_groups {
            // A removed group keeps its position (and its limiter drains): no members.
            let g = new.peer_groups.iter().find(|n| n.name == o.name);
            merged.peer_groups.push(g.unwrap_or(o).clone());
        }
        let first_new_group = merged.peer_groups.len();
        for n in &new.peer_groups {
            if !old.peer_groups.iter().any(|o| o.name == n.name) {
                merged.peer_groups.push(n.clone());
            }
        }

        // Everything that can fail first: nothing changes unless all of it is built.
        let table = setup::route_table(&merged)?;
        let rlfs: Vec<Option<Rlf<crate::relay::Held>>> = setup::egress(&merged)?
            .into_iter()
            .skip(first_new_group)
            .map(|c| c.map(|c| Rlf::new(c).expect("checked in setup")))
            .collect();
        let policy =
            MarkedPolicy::new(setup::marked_policy(&merged)).map_err(setup::SetupError::Policy)?;

        // Swap the routing and the groups at once.
        let retired = |i: usize| {
            removed.contains(&i)
                || (self.slots.get(i).is_some_and(|s| s.retired) && !revived.contains(&i))
        };
        let retired: Vec<bool> = (0..merged.peers.len()).map(retired).collect();
        let mut peers = PeerTable::new();
        for (i, p) in merged.peers.iter().enumerate() {
            let name = if retired[i] {
                format!("{REMOVED}{i}")
            } else {
                p.origin_host.clone()
            };
            let id = peers.add(&name);
            debug_assert_eq!(id, PeerId(i));
            if let (Some(v), Some(dst)) = (self.peers.view(PeerId(i)), peers.view_mut(id))
                && !retired[i]
            {
                *dst = v;
            }
        }
        let mut dir = StaticPeerDirectory::new();
        for (i, p) in merged.peers.iter().enumerate() {
            if retired[i] {
                continue;
            }
            dir.add(PeerId(i), &p.origin_host, setup::accepted_from(p));
        }
        self.dir = Arc::new(dir);
        self.peers = peers;
        self.groups = setup::memberships(&merged);
        self.timeouts = setup::answer_timeouts(&merged);
        self.group_strategy = merged
            .peer_groups
            .iter()
            .map(|g| setup::strategy(g.selection))
            .collect();
        for s in self
            .group_strategy
            .clone()
            .into_iter()
            .chain([Strategy::RoundRobin])
        {
            let sel = match self.routers.get_mut(&s) {
                Some(r) => r.selector_mut().clone(),
                None => Selector::new(s, self.opts.seed ^ s as u64),
            };
            self.routers.insert(s, Router::new(table.clone(), sel));
        }
        self.pipeline.regroup(self.groups.clone(), rlfs);
        self.marked.set_policy(policy);
        if super::super::doic::gateways(&merged) != super::super::doic::gateways(&old) {
            self.doic = super::super::doic::reporter(&merged, super::super::doic::sequence_base());
        }
        self.slots.resize_with(merged.peers.len(), Slot::default);
        self.announces.resize(merged.peers.len(), false);
        for (i, r) in retired.iter().enumerate() {
            self.slots[i].retired = *r;
        }
        // New TLS connections use the certificate, key and CA just read; the open ones
        // keep the session they have.
        self.tls_listeners = super::tls::listeners(&merged);
        if merged.overload != self.cfg.overload {
            self.overload.reconfigure(&merged.overload);
        }
        self.cfg = merged;

        // Peers: the removed ones get DPR, those dialled elsewhere re-dial, the new ones
        // (and revived ones) are dialled.
        let reconnect: Vec<usize> = diff
            .peers_changed
            .iter()
            .filter(|c| c.reconnects())
            .filter_map(|c| self.cfg.peers.iter().position(|p| p.name == c.name))
            .collect();
        for &i in &reconnect {
            self.slots[i].redial_now = true;
            self.slots[i].failures = 0;
        }
        for &i in removed.iter().chain(&reconnect) {
            self.slots[i].reconnect_at = None;
            let ids: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.peer == Some(PeerId(i)))
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                if let Some(c) = self.conns.get_mut(&id) {
                    if c.pc.is_open() {
                        let cause = if removed.contains(&i) {
                            DisconnectCause::DoNotWantToTalkToYou
                        } else {
                            DisconnectCause::Rebooting
                        };
                        c.pc.start_disconnect(now, cause);
                    } else {
                        c.pc.abort(now);
                    }
                }
                self.drive(now, id);
            }
        }
        for &i in &reconnect {
            // Not connected (down, waiting for Tc): dialled at the new address now.
            if !self.conns.values().any(|c| c.peer == Some(PeerId(i))) {
                self.slots[i].redial_now = false;
                self.dial(i);
            }
        }
        for &i in added.iter().chain(&revived) {
            self.set_state_metric(PeerId(i), metrics::PeerState::Closed);
            let p = &self.cfg.peers[i];
            if p.role == CfgRole::Server && p.connect.is_some() {
                self.dial(i);
            }
        }
        Ok(())
    }

    /// A removed peer (kept as a tombstone so that ids stay).
    pub(super) fn is_removed(&self, p: usize) -> bool {
        self.slots.get(p).is_some_and(|s| s.retired)
    }
}

use setup::SetupError;
