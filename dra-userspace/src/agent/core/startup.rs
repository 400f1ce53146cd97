//! Readiness of a (re)started agent (docs/architecture.md, "Readiness").
//!
//! The listeners are bound before the core dials its servers, so a gateway may send
//! requests a few milliseconds before the first server connection opens. Within
//! `[global] startup_wait` of the start:
//!
//! - a request whose route has no peer in good state, but a candidate whose first
//!   connection is still opening (never open since the start), is **held** — bounded by
//!   its group's answer timeout and by the pending table — and routed again as soon as
//!   a peer comes into service; a held request whose timeout passes is answered 3002,
//!   as it would have been without the hold;
//! - the agent is **ready** once every routed group (each group or peer a route names)
//!   has a peer in service, or when the wait ends (the log names what is still missing).
//!   Ready is what systemd's `READY=1`, `dra status` and `dra_ready` report.
//!
//! After the wait nothing is held: a group whose peers have all gone down is answered
//! 3002 at once (RFC 6733 §6.1.4 has nothing to wait for).

use tokio::sync::watch;

use super::forward::Parked;
use super::*;
use crate::config::Target;

/// A request held until a connection opens, with its deadline.
struct Held {
    deadline: Duration,
    parked: Parked,
}

/// The start-up state of the core.
pub(super) struct Startup {
    /// The end of the startup wait (time since the start).
    until: Duration,
    /// When the agent became ready, and what was still missing then (empty: nothing).
    ready: Option<(Duration, Vec<String>)>,
    tx: watch::Sender<bool>,
    /// Held requests, in arrival order.
    held: Vec<Held>,
    /// The earliest deadline among them.
    next_deadline: Option<Duration>,
    /// A peer came into service since the held requests were last routed.
    release: bool,
}

impl Startup {
    pub(super) fn new(wait: Duration, tx: watch::Sender<bool>) -> Startup {
        Startup {
            until: wait,
            ready: None,
            tx,
            held: Vec::new(),
            next_deadline: None,
            release: false,
        }
    }

    /// The next instant the core must look at the start-up state.
    pub(super) fn poll_timeout(&self) -> Option<Duration> {
        let wait = self.ready.is_none().then_some(self.until);
        match (wait, self.next_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Requests held now (they count as pending in the exactly-one-answer check).
    pub(super) fn held(&self) -> usize {
        self.held.len()
    }
}

impl Core {
    /// The routed groups (each group or single peer a route names), with their peers.
    fn routed_targets(&self) -> Vec<(String, Vec<usize>)> {
        let mut out: Vec<(String, Vec<usize>)> = Vec::new();
        for r in &self.cfg.routes {
            let (label, members): (String, Vec<usize>) = match &r.target {
                Target::Group(g) => (
                    format!("group {g}"),
                    (0..self.cfg.peers.len())
                        .filter(|i| self.cfg.peers[*i].group.as_deref() == Some(g.as_str()))
                        .collect(),
                ),
                Target::Peer(n) => (
                    format!("peer {n}"),
                    self.cfg
                        .peers
                        .iter()
                        .position(|p| &p.name == n)
                        .into_iter()
                        .collect(),
                ),
            };
            if !out.iter().any(|(l, _)| *l == label) {
                out.push((label, members));
            }
        }
        out
    }

    /// The routed groups without a peer in service, each with its peers' states.
    fn groups_not_open(&self) -> Vec<String> {
        self.routed_targets()
            .into_iter()
            .filter(|(_, members)| !members.iter().any(|i| self.slots[*i].good))
            .map(|(label, members)| {
                let states: Vec<String> = members
                    .iter()
                    .map(|i| {
                        let s = &self.slots[*i];
                        let how = if s.connecting {
                            "connecting"
                        } else if s.reconnect_at.is_some() {
                            "dial failed, retrying"
                        } else {
                            s.state.map_or("closed", |st| st.name())
                        };
                        format!("{} {how}", self.cfg.peers[*i].name)
                    })
                    .collect();
                format!("{label} ({})", states.join(", "))
            })
            .collect()
    }

    /// Becomes ready when every routed group has a peer in service, or when the
    /// startup wait is over (saying what is missing). Once ready, stays ready.
    pub(super) fn check_ready(&mut self, now: Duration) {
        if self.startup.ready.is_some() {
            return;
        }
        let missing = self.groups_not_open();
        let after = format!("{:.3}", now.as_secs_f64());
        if missing.is_empty() {
            info!(after_s = %after, "ready: an open connection in every routed group");
        } else if now >= self.startup.until {
            warn!(
                after_s = %after,
                missing = %missing.join("; "),
                "ready: the startup wait ended without an open connection in every routed group"
            );
        } else {
            return;
        }
        self.startup.ready = Some((now, missing));
        self.metrics.set_ready(true);
        let _ = self.startup.tx.send(true);
    }

    /// The `dra status` line about readiness.
    pub(super) fn ready_status(&self) -> String {
        match &self.startup.ready {
            Some((at, missing)) if missing.is_empty() => {
                format!("ready: yes ({:.3} s after the start)", at.as_secs_f64())
            }
            Some((at, missing)) => format!(
                "ready: yes (the startup wait ended at {:.3} s; no open connection in: {})",
                at.as_secs_f64(),
                missing.join("; ")
            ),
            None => format!(
                "ready: no (waiting up to {:.3} s for an open connection in: {})",
                self.startup.until.as_secs_f64(),
                self.groups_not_open().join("; ")
            ),
        }
    }

    /// Holds `p` when its route has no peer in good state only because a first
    /// connection is still opening (module docs); gives it back otherwise.
    pub(super) fn hold(&mut self, now: Duration, p: Parked) -> Option<Parked> {
        if now >= self.startup.until {
            return Some(p);
        }
        let realm = p.req.destination_realm().unwrap_or("");
        self.routers[&Strategy::RoundRobin].table().candidates_into(
            realm,
            p.req.application_id,
            &mut self.scratch,
        );
        let opening = self
            .scratch
            .iter()
            .map(|c| c.peer)
            .find(|c| !self.slots[c.0].ever_connected && !self.slots[c.0].retired);
        let Some(peer) = opening else {
            return Some(p);
        };
        // Bounded by the pending table: held requests count against its capacity.
        let pending = self.pipeline.stats().pending as usize;
        if pending + self.startup.held.len() >= self.opts.pending_capacity {
            return Some(p);
        }
        let deadline = p.held_until.unwrap_or(now + self.timeout_of(peer));
        if deadline <= now {
            return Some(p);
        }
        self.startup.next_deadline = Some(
            self.startup
                .next_deadline
                .map_or(deadline, |d| d.min(deadline)),
        );
        self.startup.held.push(Held {
            deadline,
            parked: p,
        });
        None
    }

    /// A peer came into service: the held requests are routed again (next turn of the
    /// event loop, in arrival order).
    pub(super) fn peer_in_service(&mut self) {
        if !self.startup.held.is_empty() {
            self.startup.release = true;
        }
    }

    /// Routes the held requests again once a peer has come into service.
    pub(super) fn release_held(&mut self, now: Duration) {
        if !std::mem::take(&mut self.startup.release) {
            return;
        }
        let held = std::mem::take(&mut self.startup.held);
        self.startup.next_deadline = None;
        for h in held {
            let mut p = h.parked;
            p.held_until = Some(h.deadline);
            self.dispatch(now, p, None);
        }
    }

    /// Answers the held requests whose deadline has passed (3002, as without the hold),
    /// and becomes ready when the startup wait ends.
    pub(super) fn startup_timer(&mut self, now: Duration) {
        self.check_ready(now);
        if self.startup.next_deadline.is_none_or(|d| d > now) {
            return;
        }
        let held = std::mem::take(&mut self.startup.held);
        let (due, keep): (Vec<Held>, Vec<Held>) = held.into_iter().partition(|h| h.deadline <= now);
        self.startup.next_deadline = keep.iter().map(|h| h.deadline).min();
        self.startup.held = keep;
        for h in due {
            self.answer_locally(
                &h.parked,
                crate::routing::Unroutable::NoGoodPeer.result_code(),
                "no route to the destination: no connection opened in time",
            );
        }
    }
}
