//! The relay core (RFC 6733 §6.1, §6.2): forwards requests upstream with a fresh
//! Hop-by-Hop Identifier, maps answers back, and makes sure every request received gets
//! exactly one outcome — a relayed answer, an answer generated here, or a count.
//!
//! Sans-IO: time is a `Duration` since an arbitrary start, passed in by the caller.
//!
//! Life of a request:
//!
//! 1. [`Relay::forward`] checks for a loop (3005) and for room in the bounded pending
//!    table (3004), then returns the rewritten request to send to the chosen peer.
//! 2. [`Relay::on_answer`] restores the Hop-by-Hop id and says which downstream
//!    connection gets the answer.
//! 3. No answer in time ([`Relay::handle_timeout`]) or the upstream transport failed
//!    ([`Relay::peer_failed`]): the first time, an [`Expired::Retry`] asks the caller to
//!    pick an alternate peer and hand it back with [`Relay::retry`] (the request is then
//!    resent with the T flag); the second time, the downstream gets 3002
//!    DIAMETER_UNABLE_TO_DELIVER generated here.
//!
//! The caller (the tokio shell) keeps the choice of the alternate peer because routing
//! may need I/O (the Redis session-binding store).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::diameter::{Message, answer_for, result_code};
use crate::routing::PeerId;

use super::forward::{append_route_record, is_loop, set_retransmit};

/// A downstream connection: the shell's connection id plus a generation that changes
/// whenever the id is reused for a new transport connection (e.g. after a reconnect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DownstreamRef {
    /// The shell's connection id.
    pub conn_id: u64,
    /// The connection's generation; answers for an older generation are discarded.
    pub generation: u64,
}

/// An answer to write to a downstream connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Where the answer goes.
    pub to: DownstreamRef,
    /// The answer, with the downstream's Hop-by-Hop id restored.
    pub answer: Message,
}

/// The relay's own identity and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The DRA's Origin-Host, also its identity in Route-Record.
    pub own_host: String,
    /// The DRA's Origin-Realm.
    pub own_realm: String,
    /// Most requests waiting for an upstream answer (or for the caller's retry choice)
    /// at once; one more is answered 3004 DIAMETER_TOO_BUSY.
    pub capacity: usize,
    /// First Hop-by-Hop id used towards each upstream peer (mixed with the peer id).
    /// RFC 6733 §3 suggests a random start, which also keeps ids used before a restart
    /// from matching new requests; the caller supplies it (no randomness in the core).
    pub hop_by_hop_seed: u32,
}

/// Why a pending request left its upstream peer without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureCause {
    /// No answer within the answer timeout.
    Timeout,
    /// The upstream transport connection failed (RFC 6733 §5.5.4).
    PeerFailed,
}

/// A request that must be resent to an alternate peer (RFC 6733 §5.5.4). Hand it back
/// with [`Relay::retry`]; if that never happens, the relay answers 3002 itself after
/// the original answer timeout.
#[derive(Debug)]
pub struct Retry {
    /// The request as it will be resent: T flag set, Route-Record appended, the
    /// downstream's Hop-by-Hop id. For routing; [`Relay::retry`] uses its own copy.
    pub request: Message,
    /// The peer that failed; choose another one.
    pub exclude: PeerId,
    /// Where the request came from.
    pub downstream: DownstreamRef,
    /// What went wrong with the first attempt.
    pub cause: FailureCause,
    token: u64,
}

/// Output of [`Relay::handle_timeout`] and [`Relay::peer_failed`].
#[derive(Debug)]
pub enum Expired {
    /// First failure: pick an alternate peer and call [`Relay::retry`].
    Retry(Retry),
    /// Second failure (or no alternate in time): send this 3002 answer downstream.
    Answer(Delivery),
}

/// Output of [`Relay::retry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryOutcome {
    /// Send `request` (fresh Hop-by-Hop id, T flag set) to `to`.
    Send {
        /// The alternate peer.
        to: PeerId,
        /// The rewritten request.
        request: Message,
    },
    /// No alternate: send this 3002 answer downstream.
    Answer(Delivery),
    /// The downstream connection is gone; nothing to send (counted as discarded).
    Discarded,
    /// The retry was already resolved (timed out waiting for the choice); nothing to do.
    Stale,
}

/// A request the relay refuses to forward. The answerable variants carry the answer to
/// send back on the connection the request came from (built with [`answer_for`]).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// RFC 6733 §6.1.3: our own identity is in a Route-Record → 3005.
    #[error("forwarding loop: {own_host} is already in a Route-Record of the request")]
    LoopDetected {
        /// Our identity.
        own_host: String,
        /// The 3005 DIAMETER_LOOP_DETECTED answer.
        answer: Box<Message>,
    },
    /// The pending table is full → 3004 (RFC 6733 §7.1.3).
    #[error("pending table full: {capacity} requests await an upstream answer")]
    TooBusy {
        /// The configured capacity.
        capacity: usize,
        /// The 3004 DIAMETER_TOO_BUSY answer.
        answer: Box<Message>,
    },
    /// The message is an answer (R bit clear); answers are matched with
    /// [`Relay::on_answer`]. Not counted as a request.
    #[error("not a request: command {command_code} has the R bit clear")]
    NotARequest {
        /// Command code of the message.
        command_code: u32,
    },
}

impl RelayError {
    /// The Result-Code of the generated answer, if there is one.
    pub fn result_code(&self) -> Option<u32> {
        match self {
            RelayError::LoopDetected { .. } => Some(result_code::LOOP_DETECTED),
            RelayError::TooBusy { .. } => Some(result_code::TOO_BUSY),
            RelayError::NotARequest { .. } => None,
        }
    }

    /// The answer to send downstream, if there is one.
    pub fn into_answer(self) -> Option<Message> {
        match self {
            RelayError::LoopDetected { answer, .. } | RelayError::TooBusy { answer, .. } => {
                Some(*answer)
            }
            RelayError::NotARequest { .. } => None,
        }
    }
}

/// Counters. Every request counted in `requests_in` ends in exactly one of relayed,
/// generated, discarded or dropped — or is still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RelayStats {
    /// Requests given to [`Relay::forward`] (answers excluded).
    pub requests_in: u64,
    /// Upstream answers relayed downstream.
    pub answers_relayed: u64,
    /// Answers generated here (3002, 3004, 3005, and [`Relay::cancel`]).
    pub answers_generated: u64,
    /// Outcomes that could not be delivered: the downstream connection was closed.
    pub answers_discarded: u64,
    /// Requests removed without any answer ([`Relay::drop_request`], egress `drop`).
    pub requests_dropped: u64,
    /// Answers whose Hop-by-Hop id matched nothing pending (late or duplicate).
    pub late_answers: u64,
    /// Requests resent to an alternate peer.
    pub retries: u64,
    /// Requests in the table now (waiting for an answer or for a retry choice).
    pub pending: u64,
}

impl RelayStats {
    /// `requests_in == relayed + generated + discarded + dropped + pending`.
    pub fn invariant_ok(&self) -> bool {
        self.requests_in
            == self.answers_relayed
                + self.answers_generated
                + self.answers_discarded
                + self.requests_dropped
                + self.pending
    }
}

type TimerKey = (Duration, u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timed {
    Pending(PeerId, u32),
    AwaitingRetry(u64),
}

#[derive(Debug)]
struct Entry {
    downstream: DownstreamRef,
    /// As forwarded (Route-Record appended, T flag on retries) but with the
    /// downstream's Hop-by-Hop id: the source of retries and generated answers.
    request: Message,
    retried: bool,
    timeout: Duration,
    timer: TimerKey,
}

#[derive(Debug)]
struct Awaiting {
    downstream: DownstreamRef,
    request: Message,
    timer: TimerKey,
}

#[derive(Debug, Clone, Copy)]
struct DownstreamState {
    generation: u64,
    open: bool,
    /// Entries (any generation) of this connection id still in the table.
    entries: usize,
}

/// The pending-request table and answer mapping. See the module docs.
#[derive(Debug)]
pub struct Relay {
    cfg: RelayConfig,
    pending: HashMap<(PeerId, u32), Entry>,
    awaiting: HashMap<u64, Awaiting>,
    timers: BTreeMap<TimerKey, Timed>,
    next_hop_by_hop: HashMap<PeerId, u32>,
    downstreams: HashMap<u64, DownstreamState>,
    released: VecDeque<PeerId>,
    seq: u64,
    stats: RelayStats,
}

impl Relay {
    /// An empty relay.
    pub fn new(cfg: RelayConfig) -> Relay {
        Relay {
            cfg,
            pending: HashMap::new(),
            awaiting: HashMap::new(),
            timers: BTreeMap::new(),
            next_hop_by_hop: HashMap::new(),
            downstreams: HashMap::new(),
            released: VecDeque::new(),
            seq: 0,
            stats: RelayStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    /// Forwards `req`, received on `from` whose peer identity (Origin-Host in its CER)
    /// is `from_host`, to upstream peer `to`; `timeout` is the answer timeout.
    ///
    /// Returns the request to send: fresh Hop-by-Hop id unique towards `to`, same
    /// End-to-End id, Route-Record `from_host` appended, the fast path's mark cleared.
    /// The original Hop-by-Hop id is kept for the answer (RFC 6733 §6.1.8, §6.2.2).
    pub fn forward(
        &mut self,
        now: Duration,
        from: DownstreamRef,
        from_host: &str,
        mut req: Message,
        to: PeerId,
        timeout: Duration,
    ) -> Result<Message, RelayError> {
        if !req.is_request() {
            return Err(RelayError::NotARequest {
                command_code: req.command_code,
            });
        }
        self.stats.requests_in += 1;
        self.note_downstream(from);
        // RFC 6733 §6.1.3: a relay MUST check for forwarding loops.
        if is_loop(&req, &self.cfg.own_host) {
            self.stats.answers_generated += 1;
            let text = format!(
                "forwarding loop: request already passed through {}",
                self.cfg.own_host
            );
            return Err(RelayError::LoopDetected {
                own_host: self.cfg.own_host.clone(),
                answer: Box::new(self.answer(&req, result_code::LOOP_DETECTED, &text)),
            });
        }
        if self.len() >= self.cfg.capacity {
            self.stats.answers_generated += 1;
            let text = format!(
                "too busy: {} requests already await an upstream answer",
                self.cfg.capacity
            );
            return Err(RelayError::TooBusy {
                capacity: self.cfg.capacity,
                answer: Box::new(self.answer(&req, result_code::TOO_BUSY, &text)),
            });
        }
        // The mark is the fast path's, in-band on this host only (DESIGN.md §3).
        req.clear_mark();
        // RFC 6733 §6.1.8: append the identity of the peer the request came from.
        append_route_record(&mut req, from_host);
        Ok(self.insert(now, from, req, to, timeout, false))
    }

    /// Matches an upstream answer from `from` (RFC 6733 §6.2.2). Returns the answer
    /// with the downstream's Hop-by-Hop id restored, or `None` when it matches nothing
    /// pending (late or duplicate: counted in `late_answers`), when the downstream
    /// connection is gone (counted in `answers_discarded`), or when `ans` is a request.
    pub fn on_answer(&mut self, from: PeerId, mut ans: Message) -> Option<Delivery> {
        if ans.is_request() {
            return None;
        }
        let key = (from, ans.hop_by_hop);
        // RFC 6733 §3: the End-to-End id of an answer equals the request's; a
        // mismatch means this answer is not for the request now holding the id.
        let Some(entry) = self
            .pending
            .get(&key)
            .filter(|e| e.request.end_to_end == ans.end_to_end)
        else {
            self.stats.late_answers += 1;
            return None;
        };
        let downstream = entry.downstream;
        ans.hop_by_hop = entry.request.hop_by_hop;
        let timer = entry.timer;
        self.pending.remove(&key);
        self.timers.remove(&timer);
        self.released.push_back(from);
        let live = self.is_live(downstream);
        self.entry_gone(downstream);
        if live {
            self.stats.answers_relayed += 1;
            Some(Delivery {
                to: downstream,
                answer: ans,
            })
        } else {
            self.stats.answers_discarded += 1;
            None
        }
    }

    /// The earliest deadline, if anything is pending: call [`Relay::handle_timeout`]
    /// then.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.timers.keys().next().map(|(t, _)| *t)
    }

    /// Expires everything whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: Duration) -> Vec<Expired> {
        let mut out = Vec::new();
        while let Some((&key, &timed)) = self.timers.first_key_value() {
            if key.0 > now {
                break;
            }
            self.timers.remove(&key);
            match timed {
                Timed::Pending(peer, hbh) => {
                    if let Some(entry) = self.pending.remove(&(peer, hbh)) {
                        out.extend(self.fail(now, peer, entry, FailureCause::Timeout));
                    }
                }
                Timed::AwaitingRetry(token) => {
                    if let Some(aw) = self.awaiting.remove(&token) {
                        let text = "no alternate upstream peer was chosen in time";
                        out.extend(self.generate_unable(aw.downstream, &aw.request, text));
                    }
                }
            }
        }
        out
    }

    /// The transport to `peer` failed: every request pending on it fails over (RFC 6733
    /// §5.5.4), in the order they were sent.
    pub fn peer_failed(&mut self, now: Duration, peer: PeerId) -> Vec<Expired> {
        let mut keys: Vec<(TimerKey, u32)> = self
            .pending
            .iter()
            .filter(|((p, _), _)| *p == peer)
            .map(|((_, hbh), e)| (e.timer, *hbh))
            .collect();
        keys.sort_unstable_by_key(|(t, _)| t.1);
        let mut out = Vec::new();
        for (timer, hbh) in keys {
            self.timers.remove(&timer);
            if let Some(entry) = self.pending.remove(&(peer, hbh)) {
                out.extend(self.fail(now, peer, entry, FailureCause::PeerFailed));
            }
        }
        out
    }

    /// Resolves a [`Retry`]: `to = Some(peer)` resends the request there (T flag set,
    /// fresh Hop-by-Hop id, answer timeout `timeout`); `None` answers 3002.
    pub fn retry(
        &mut self,
        now: Duration,
        retry: Retry,
        to: Option<PeerId>,
        timeout: Duration,
    ) -> RetryOutcome {
        let Some(aw) = self.awaiting.remove(&retry.token) else {
            return RetryOutcome::Stale;
        };
        self.timers.remove(&aw.timer);
        if !self.is_live(aw.downstream) {
            self.stats.answers_discarded += 1;
            self.entry_gone(aw.downstream);
            return RetryOutcome::Discarded;
        }
        match to {
            Some(peer) => {
                self.stats.retries += 1;
                // The entry moves from `awaiting` to `pending`: count it once.
                self.entry_gone(aw.downstream);
                let request = self.insert(now, aw.downstream, aw.request, peer, timeout, true);
                RetryOutcome::Send { to: peer, request }
            }
            None => {
                let text = format!(
                    "unable to deliver: upstream peer #{} failed and no alternate peer is available",
                    retry.exclude.0
                );
                match self.generate_unable(aw.downstream, &aw.request, &text) {
                    Some(Expired::Answer(d)) => RetryOutcome::Answer(d),
                    _ => RetryOutcome::Discarded,
                }
            }
        }
    }

    /// Answers a pending request that was never sent upstream (e.g. egress RLF refused
    /// it) with `result_code` and `error_message`. `hop_by_hop` is the id in the
    /// rewritten request. `None` if nothing matches or the downstream is gone.
    /// Does not emit a release ([`Relay::poll_released`]): nothing was outstanding.
    pub fn cancel(
        &mut self,
        peer: PeerId,
        hop_by_hop: u32,
        result_code: u32,
        error_message: &str,
    ) -> Option<Delivery> {
        let entry = self.pending.remove(&(peer, hop_by_hop))?;
        self.timers.remove(&entry.timer);
        self.entry_gone(entry.downstream);
        if self.is_live(entry.downstream) {
            self.stats.answers_generated += 1;
            Some(Delivery {
                to: entry.downstream,
                answer: self.answer(&entry.request, result_code, error_message),
            })
        } else {
            self.stats.answers_discarded += 1;
            None
        }
    }

    /// Removes a pending request that was never sent and gets no answer (egress action
    /// `drop`; the downstream's transport or application retransmits). Counted in
    /// `requests_dropped`. Returns whether it was pending.
    pub fn drop_request(&mut self, peer: PeerId, hop_by_hop: u32) -> bool {
        let Some(entry) = self.pending.remove(&(peer, hop_by_hop)) else {
            return false;
        };
        self.timers.remove(&entry.timer);
        self.entry_gone(entry.downstream);
        self.stats.requests_dropped += 1;
        true
    }

    /// The downstream connection `conn_id` closed (every generation so far): outcomes
    /// of its requests are discarded and counted in `answers_discarded`. A later
    /// [`Relay::forward`] with a higher generation reopens the id.
    pub fn downstream_closed(&mut self, conn_id: u64) {
        if let Some(st) = self.downstreams.get_mut(&conn_id) {
            st.open = false;
            if st.entries == 0 {
                self.downstreams.remove(&conn_id);
            }
        }
    }

    /// Next upstream peer with one request fewer outstanding (answered, timed out or
    /// failed over). Feed these to the egress limiter ([`super::Rlf::on_answer`]).
    pub fn poll_released(&mut self) -> Option<PeerId> {
        self.released.pop_front()
    }

    /// Requests waiting for an answer from `peer`.
    pub fn outstanding(&self, peer: PeerId) -> usize {
        self.pending.keys().filter(|(p, _)| *p == peer).count()
    }

    /// Requests in the table (waiting for an upstream answer or for a retry choice).
    pub fn len(&self) -> usize {
        self.pending.len() + self.awaiting.len()
    }

    /// Nothing pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            pending: self.len() as u64,
            ..self.stats
        }
    }

    /// Every request so far has exactly one outcome or is pending.
    pub fn invariant_ok(&self) -> bool {
        self.stats().invariant_ok()
    }

    fn answer(&self, req: &Message, code: u32, text: &str) -> Message {
        answer_for(
            req,
            code,
            &self.cfg.own_host,
            &self.cfg.own_realm,
            Some(text),
            None,
        )
    }

    fn next_timer(&mut self, deadline: Duration) -> TimerKey {
        self.seq += 1;
        (deadline, self.seq)
    }

    /// Stores `req` (downstream Hop-by-Hop id) pending on `to`; returns the copy to send.
    fn insert(
        &mut self,
        now: Duration,
        from: DownstreamRef,
        mut req: Message,
        to: PeerId,
        timeout: Duration,
        retried: bool,
    ) -> Message {
        if retried {
            // RFC 6733 §5.5.4: requests resent after a failover carry the T flag.
            set_retransmit(&mut req);
        }
        let hbh = self.alloc_hop_by_hop(to);
        let mut out = req.clone();
        out.hop_by_hop = hbh;
        let timer = self.next_timer(now.saturating_add(timeout));
        self.timers.insert(timer, Timed::Pending(to, hbh));
        self.pending.insert(
            (to, hbh),
            Entry {
                downstream: from,
                request: req,
                retried,
                timeout,
                timer,
            },
        );
        self.entry_added(from);
        out
    }

    /// A Hop-by-Hop id not pending towards `peer` (RFC 6733 §3: unique per connection).
    fn alloc_hop_by_hop(&mut self, peer: PeerId) -> u32 {
        let seed = self
            .cfg
            .hop_by_hop_seed
            .wrapping_add((peer.0 as u32).wrapping_mul(0x9e37_79b9));
        let next = self.next_hop_by_hop.entry(peer).or_insert(seed);
        // Terminates: at most `capacity` ids are in use.
        loop {
            let id = *next;
            *next = next.wrapping_add(1);
            if !self.pending.contains_key(&(peer, id)) {
                return id;
            }
        }
    }

    /// A pending request's upstream attempt failed.
    fn fail(
        &mut self,
        now: Duration,
        peer: PeerId,
        entry: Entry,
        cause: FailureCause,
    ) -> Option<Expired> {
        self.released.push_back(peer);
        if !self.is_live(entry.downstream) {
            self.stats.answers_discarded += 1;
            self.entry_gone(entry.downstream);
            return None;
        }
        if entry.retried {
            let text = match cause {
                FailureCause::Timeout => format!(
                    "unable to deliver: no answer from upstream within {} ms, after one retry",
                    entry.timeout.as_millis()
                ),
                FailureCause::PeerFailed => {
                    "unable to deliver: upstream connection failed, after one retry".to_owned()
                }
            };
            self.entry_gone(entry.downstream);
            self.stats.answers_generated += 1;
            return Some(Expired::Answer(Delivery {
                to: entry.downstream,
                answer: self.answer(&entry.request, result_code::UNABLE_TO_DELIVER, &text),
            }));
        }
        // First failure: the caller picks an alternate (RFC 6733 §5.5.4). The entry
        // stays counted (now in `awaiting`) until it does, or until another timeout.
        let mut request = entry.request;
        set_retransmit(&mut request);
        let timer = self.next_timer(now.saturating_add(entry.timeout));
        self.seq += 1;
        let token = self.seq;
        self.timers.insert(timer, Timed::AwaitingRetry(token));
        self.awaiting.insert(
            token,
            Awaiting {
                downstream: entry.downstream,
                request: request.clone(),
                timer,
            },
        );
        Some(Expired::Retry(Retry {
            request,
            exclude: peer,
            downstream: entry.downstream,
            cause,
            token,
        }))
    }

    /// 3002 for a request leaving the table, or a discard if its downstream is gone.
    fn generate_unable(
        &mut self,
        downstream: DownstreamRef,
        request: &Message,
        text: &str,
    ) -> Option<Expired> {
        self.entry_gone(downstream);
        if self.is_live(downstream) {
            self.stats.answers_generated += 1;
            Some(Expired::Answer(Delivery {
                to: downstream,
                answer: self.answer(request, result_code::UNABLE_TO_DELIVER, text),
            }))
        } else {
            self.stats.answers_discarded += 1;
            None
        }
    }

    fn note_downstream(&mut self, from: DownstreamRef) {
        let st = self
            .downstreams
            .entry(from.conn_id)
            .or_insert(DownstreamState {
                generation: from.generation,
                open: true,
                entries: 0,
            });
        if from.generation > st.generation {
            // A new transport connection reusing the id: earlier generations are dead.
            st.generation = from.generation;
            st.open = true;
        }
    }

    fn is_live(&self, d: DownstreamRef) -> bool {
        self.downstreams
            .get(&d.conn_id)
            .is_some_and(|st| st.open && st.generation == d.generation)
    }

    fn entry_added(&mut self, d: DownstreamRef) {
        if let Some(st) = self.downstreams.get_mut(&d.conn_id) {
            st.entries += 1;
        }
    }

    /// Bookkeeping when an entry leaves the table; forgets closed, empty connections
    /// (only closed ones, so [`Relay::is_live`] answers the same before and after).
    fn entry_gone(&mut self, d: DownstreamRef) {
        if let Some(st) = self.downstreams.get_mut(&d.conn_id) {
            st.entries = st.entries.saturating_sub(1);
            if !st.open && st.entries == 0 {
                self.downstreams.remove(&d.conn_id);
            }
        }
    }
}
