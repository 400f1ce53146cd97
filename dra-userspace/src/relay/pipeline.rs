//! The forwarding pipeline (sans-IO): a request the router sent to an upstream peer
//! goes through the relay core ([`Relay`]: loop check, capacity, Route-Record), the
//! egress limiter of the peer's group ([`Rlf`], if it has one), and only then becomes
//! pending on the peer with a fresh Hop-by-Hop id. Answers, timeouts and peer failures
//! come back through it; requests queued by a limiter leave the queue when a token (or
//! an answer under the outstanding cap) allows.
//!
//! One owner per count: requests outstanding on a peer are the relay's pending entries
//! of that peer ([`Relay::outstanding`]); the limiter's cap and the selectors read that
//! count. Time is a `Duration` since an arbitrary start, passed in.
//!
//! Outputs ([`Pipeline::poll_output`]): requests to write upstream (already encoded),
//! answers to write downstream, and answer latencies. A failed first attempt comes back
//! from [`Pipeline::handle_timeout`] / [`Pipeline::peer_failed`] as a [`Retry`]: the
//! caller routes it again (routing may need I/O) and hands it to [`Pipeline::retry`].

use std::collections::VecDeque;
use std::time::Duration;

use crate::diameter::Message;
use crate::routing::PeerId;

use super::{
    Delivery, DownstreamRef, Expired, GroupId, Held, LimitAction, Offer, Relay, RelayError,
    RelayStats, Retry, Rlf, RlfStats,
};

/// What the pipeline asks the caller to do.
#[derive(Debug)]
pub enum Output {
    /// Write `bytes` (an encoded request) to upstream peer `to`.
    Send {
        /// The peer.
        to: PeerId,
        /// The request, encoded with its Hop-by-Hop id towards `to`.
        bytes: Vec<u8>,
    },
    /// Write an answer downstream.
    Deliver(Delivery),
    /// An answer from `peer` arrived `took` after its request was sent.
    Latency {
        /// The peer.
        peer: PeerId,
        /// Send → answer.
        took: Duration,
    },
}

/// The relay core and the egress limiters of the upstream groups. See the module docs.
#[derive(Debug)]
pub struct Pipeline {
    relay: Relay,
    /// Per group: its egress limiter, if it has one.
    rlfs: Vec<Option<Rlf<Held>>>,
    /// Per peer: its group.
    group_of: Vec<Option<GroupId>>,
    out: VecDeque<Output>,
}

impl Pipeline {
    /// A pipeline over `relay`, with one optional limiter per group and each peer's
    /// group.
    pub fn new(
        relay: Relay,
        rlfs: Vec<Option<Rlf<Held>>>,
        group_of: Vec<Option<GroupId>>,
    ) -> Pipeline {
        Pipeline {
            relay,
            rlfs,
            group_of,
            out: VecDeque::new(),
        }
    }

    /// A reload (`dra reload`): each peer's group is now `group_of` (peers and groups
    /// only ever appended, ids stay), and groups appended after the current ones get
    /// `added` limiters. Limiters of existing groups, with their queues, stay.
    pub fn regroup(
        &mut self,
        group_of: Vec<Option<GroupId>>,
        added: impl IntoIterator<Item = Option<Rlf<Held>>>,
    ) {
        self.group_of = group_of;
        self.rlfs.extend(added);
    }

    /// Number of groups (limiter slots).
    pub fn groups(&self) -> usize {
        self.rlfs.len()
    }

    /// Forwards `req` received on `from` (whose CER Origin-Host is `from_host`) to `to`,
    /// with answer timeout `timeout`. `Err` carries the relay's refusal (3005 loop,
    /// 3004 too busy: [`RelayError::into_answer`] is the answer to write back).
    pub fn forward(
        &mut self,
        now: Duration,
        from: DownstreamRef,
        from_host: &str,
        req: Message,
        to: PeerId,
        timeout: Duration,
    ) -> Result<(), RelayError> {
        let held = self.queued();
        let request = self.relay.admit(from, from_host, req, held)?;
        self.egress(now, Held::new(from, request, timeout), to);
        Ok(())
    }

    /// Resolves a [`Retry`]: `to = Some(peer)` resends its request there through the
    /// peer's egress limiter (T flag set); `None` answers 3002.
    pub fn retry(&mut self, now: Duration, retry: Retry, to: Option<PeerId>, timeout: Duration) {
        let failed = retry.exclude;
        let Some(t) = self.relay.take_retry(retry) else {
            return;
        };
        if !t.live {
            return;
        }
        match to {
            Some(peer) => self.egress(now, t.resend(timeout), peer),
            None => {
                let text = super::pending::no_alternate(failed);
                let code = crate::diameter::result_code::UNABLE_TO_DELIVER;
                if let Some(d) = self.relay.refused(t.downstream, &t.request, code, &text) {
                    self.out.push_back(Output::Deliver(d));
                }
            }
        }
    }

    /// An answer from upstream peer `from` (RFC 6733 §6.2.2).
    pub fn on_answer(&mut self, now: Duration, from: PeerId, ans: Message) {
        if let Some(d) = self.relay.on_answer(from, ans) {
            self.out.push_back(Output::Deliver(d));
        }
        self.released(now);
    }

    /// Expires what is due at `now`: answer timeouts (first ones come back as retries
    /// to route), retry choices not made in time, requests that waited in an egress
    /// queue beyond its delay tolerance; and sends what the limiters now allow.
    pub fn handle_timeout(&mut self, now: Duration) -> Vec<Retry> {
        let expired = self.relay.handle_timeout(now);
        let retries = self.expired(expired);
        self.released(now);
        for g in 0..self.rlfs.len() {
            self.service(now, GroupId(g));
        }
        retries
    }

    /// The transport to `peer` failed: requests pending on it fail over (RFC 6733
    /// §5.5.4), and those waiting in its group's egress queue are routed again.
    pub fn peer_failed(&mut self, now: Duration, peer: PeerId) -> Vec<Retry> {
        let mut expired = self.relay.peer_failed(now, peer);
        if let Some(g) = self.group_of[peer.0]
            && let Some(r) = self.rlfs[g.0].as_mut()
        {
            for h in r.on_peer_failed(peer) {
                expired.extend(
                    self.relay
                        .reroute(now, h.downstream, h.request, peer, h.timeout),
                );
            }
        }
        let retries = self.expired(expired);
        self.released(now);
        retries
    }

    /// The downstream connection `conn_id` closed: its outcomes are discarded.
    pub fn downstream_closed(&mut self, conn_id: u64) {
        self.relay.downstream_closed(conn_id);
    }

    /// The next thing to do, until `None`.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`Pipeline::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let relay = &self.relay;
        let rlf = self
            .rlfs
            .iter()
            .flatten()
            .filter_map(|r| r.poll_timeout(|p| relay.outstanding(p)))
            .min();
        match (relay.poll_timeout(), rlf) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Requests sent to `peer` and not yet answered, timed out or failed over.
    pub fn outstanding(&self, peer: PeerId) -> u32 {
        self.relay.outstanding(peer)
    }

    /// Requests from downstream connection `conn_id` not answered yet (pending upstream,
    /// waiting for a retry choice, or in an egress queue).
    pub fn in_flight_from(&self, conn_id: u64) -> usize {
        let queued: usize = self
            .rlfs
            .iter()
            .flatten()
            .map(|r| r.count(|h| h.downstream.conn_id == conn_id))
            .sum();
        self.relay.pending_from(conn_id) + queued
    }

    /// Requests waiting in group `g`'s egress queue.
    pub fn queue_len(&self, g: GroupId) -> usize {
        self.rlfs[g.0].as_ref().map_or(0, Rlf::queue_len)
    }

    /// Requests in the table or in an egress queue.
    pub fn pending(&self) -> usize {
        self.relay.len() + self.queued()
    }

    /// The relay's counters; `pending` includes requests in egress queues.
    pub fn stats(&self) -> RelayStats {
        let mut s = self.relay.stats();
        s.pending += self.queued() as u64;
        s
    }

    /// Every request so far has exactly one outcome or is pending.
    pub fn invariant_ok(&self) -> bool {
        self.stats().invariant_ok()
    }

    /// Counters of the limiter of group `g`, if it has one.
    pub fn rlf_stats(&self, g: GroupId) -> Option<RlfStats> {
        self.rlfs[g.0].as_ref().map(Rlf::stats)
    }

    fn queued(&self) -> usize {
        self.rlfs.iter().flatten().map(Rlf::queue_len).sum()
    }

    /// Through `to`'s egress limiter, if any: sent, queued or refused.
    fn egress(&mut self, now: Duration, h: Held, to: PeerId) {
        let Some(g) = self.group_of[to.0].filter(|g| self.rlfs[g.0].is_some()) else {
            return self.send(now, h, to);
        };
        let relay = &self.relay;
        let rlf = self.rlfs[g.0].as_mut().expect("limiter");
        match rlf.offer(now, h, to, |p| relay.outstanding(p)) {
            Offer::Send(h) => self.send(now, h, to),
            Offer::Queued => {}
            Offer::Rejected {
                item,
                result_code,
                error_message,
            } => {
                if let Some(d) =
                    self.relay
                        .refused(item.downstream, &item.request, result_code, &error_message)
                {
                    self.out.push_back(Output::Deliver(d));
                }
            }
            Offer::Dropped(_) => self.relay.dropped(),
        }
        self.service(now, g);
    }

    fn send(&mut self, now: Duration, h: Held, to: PeerId) {
        match self.relay.send(now, h, to) {
            Ok(bytes) => self.out.push_back(Output::Send { to, bytes }),
            Err(Some(d)) => self.out.push_back(Output::Deliver(d)),
            Err(None) => {}
        }
    }

    /// Group `g`'s queue: what expired gets the configured action, what may go is sent.
    fn service(&mut self, now: Duration, g: GroupId) {
        loop {
            let relay = &self.relay;
            let Some(rlf) = self.rlfs[g.0].as_mut() else {
                return;
            };
            if let Some(o) = rlf.poll_expired(now) {
                // StarOS RLF: beyond the delay tolerance the configured action applies.
                match o.action {
                    LimitAction::Reject(p) => {
                        let h = o.item;
                        if let Some(d) = self.relay.refused(
                            h.downstream,
                            &h.request,
                            p.result_code,
                            &p.error_message,
                        ) {
                            self.out.push_back(Output::Deliver(d));
                        }
                    }
                    LimitAction::Drop => self.relay.dropped(),
                }
                continue;
            }
            let Some((h, peer)) = rlf.poll_ready(now, |p| relay.outstanding(p)) else {
                return;
            };
            self.send(now, h, peer);
        }
    }

    /// Answers go out; first failures come back as retries.
    fn expired(&mut self, list: Vec<Expired>) -> Vec<Retry> {
        let mut retries = Vec::new();
        for e in list {
            match e {
                Expired::Answer(d) => self.out.push_back(Output::Deliver(d)),
                Expired::Retry(r) => retries.push(r),
            }
        }
        retries
    }

    /// Requests left the pending table: latencies out, and the limiters of their groups
    /// may send what waited for an answer.
    fn released(&mut self, now: Duration) {
        let mut touched: Vec<GroupId> = Vec::new();
        while let Some(r) = self.relay.poll_released() {
            if let Some(sent) = r.answered_sent_at {
                self.out.push_back(Output::Latency {
                    peer: r.peer,
                    took: now.saturating_sub(sent),
                });
            }
            if let Some(g) = self.group_of[r.peer.0]
                && self.rlfs[g.0].is_some()
                && !touched.contains(&g)
            {
                touched.push(g);
            }
        }
        for g in touched {
            self.service(now, g);
        }
    }
}
