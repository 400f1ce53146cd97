//! The relay core (RFC 6733 §6.1, §6.2): forwards requests upstream with a fresh
//! Hop-by-Hop Identifier, maps answers back, and makes sure every request received gets
//! exactly one outcome — a relayed answer, an answer generated here, or a count.
//!
//! Sans-IO: time is a `Duration` since an arbitrary start, passed in by the caller.
//!
//! Life of a request:
//!
//! 1. [`Relay::admit`] checks for a loop (3005) and for room in the bounded pending
//!    table (3004) and rewrites the request (Route-Record, mark cleared); once the
//!    egress limiter lets it go, [`Relay::send`] makes it pending on the chosen peer
//!    and encodes it with a fresh Hop-by-Hop id ([`Relay::forward`] does both). A
//!    request the egress limiter refuses is answered with [`Relay::refused`] or counted
//!    with [`Relay::dropped`]; it was never pending.
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

/// A downstream connection: the shell's connection id (never reused while the relay
/// lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DownstreamRef {
    /// The shell's connection id.
    pub conn_id: u64,
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
    /// Answers generated here (3002, 3004, 3005, and [`Relay::refused`]).
    pub answers_generated: u64,
    /// Outcomes that could not be delivered: the downstream connection was closed.
    pub answers_discarded: u64,
    /// Requests that got no answer on purpose ([`Relay::dropped`], egress `drop`).
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
    /// When it was made pending (sent).
    sent_at: Duration,
}

/// An upstream peer has one request fewer outstanding ([`Relay::poll_released`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The peer.
    pub peer: PeerId,
    /// When the request was sent, if it was answered (for the answer latency).
    pub answered_sent_at: Option<Duration>,
}

/// An admitted request (or a taken retry) not pending yet: what [`Relay::send`] makes
/// pending on a peer, and what waits in an egress queue until then.
#[derive(Debug)]
pub struct Held {
    /// Where it came from.
    pub downstream: DownstreamRef,
    /// The request, with the downstream's Hop-by-Hop id.
    pub request: Message,
    /// Its answer timeout.
    pub timeout: Duration,
    /// Whether it is resent after a failure (RFC 6733 §5.5.4: T flag set when it goes).
    pub retried: bool,
}

impl Held {
    /// A request admitted from `downstream`, sent the first time.
    pub fn new(downstream: DownstreamRef, request: Message, timeout: Duration) -> Held {
        Held {
            downstream,
            request,
            timeout,
            retried: false,
        }
    }

    /// RFC 6733 §5.5.4: requests resent after a failover carry the T flag.
    fn mark_retransmit(&mut self) {
        if self.retried {
            set_retransmit(&mut self.request);
        }
    }
}

/// A request that waits for an alternate peer, taken with [`Relay::take_retry`]: send it
/// with [`Relay::send`] ([`RetryTaken::resend`]) or answer it with [`Relay::refused`].
#[derive(Debug)]
pub struct RetryTaken {
    /// Where it came from.
    pub downstream: DownstreamRef,
    /// The request (T flag set, Route-Record appended, downstream Hop-by-Hop id).
    pub request: Message,
    /// Whether its downstream connection is still open (if not, it was counted as
    /// discarded already).
    pub live: bool,
}

impl RetryTaken {
    /// The request to send again, with answer timeout `timeout`.
    pub fn resend(self, timeout: Duration) -> Held {
        Held {
            retried: true,
            ..Held::new(self.downstream, self.request, timeout)
        }
    }
}

#[derive(Debug)]
struct Awaiting {
    downstream: DownstreamRef,
    request: Message,
    timer: TimerKey,
}

#[derive(Debug, Clone, Copy)]
struct DownstreamState {
    open: bool,
    /// Entries of this connection still in the table.
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
    released: VecDeque<Released>,
    /// Per upstream peer: requests sent and not yet answered, timed out or failed over
    /// (the `pending` entries of that peer). The one count of outstanding requests: the
    /// egress limiter's cap and the selectors read it.
    outstanding: HashMap<PeerId, u32>,
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
            outstanding: HashMap::new(),
            seq: 0,
            stats: RelayStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    /// Forwards `req`, received on `from` whose peer identity (Origin-Host in its CER)
    /// is `from_host`, to upstream peer `to`; `timeout` is the answer timeout:
    /// [`Relay::admit`] then [`Relay::send`] in one (no egress limiter in between).
    ///
    /// Returns the request to send: fresh Hop-by-Hop id unique towards `to`, same
    /// End-to-End id, Route-Record `from_host` appended, the fast path's mark cleared.
    /// The original Hop-by-Hop id is kept for the answer (RFC 6733 §6.1.8, §6.2.2).
    pub fn forward(
        &mut self,
        now: Duration,
        from: DownstreamRef,
        from_host: &str,
        req: Message,
        to: PeerId,
        timeout: Duration,
    ) -> Result<Message, RelayError> {
        let req = self.admit(from, from_host, req, 0)?;
        let mut out = req.clone();
        out.hop_by_hop = self.insert(now, Held::new(from, req, timeout), to);
        Ok(out)
    }

    /// Takes in a request received on `from` (whose Origin-Host in its CER is
    /// `from_host`): counted, checked for a forwarding loop (3005) and for room — the
    /// pending table plus `held_elsewhere` requests the caller holds for it (an egress
    /// queue) must stay below the capacity (3004) — and rewritten: Route-Record
    /// appended, the fast path's mark cleared. The result is not pending yet: hand it to
    /// [`Relay::send`], [`Relay::refused`] or [`Relay::dropped`].
    pub fn admit(
        &mut self,
        from: DownstreamRef,
        from_host: &str,
        mut req: Message,
        held_elsewhere: usize,
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
        if self.len() + held_elsewhere >= self.cfg.capacity {
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
        // The mark is the fast path's, in-band on this host only (docs/architecture.md §3).
        req.clear_mark();
        // RFC 6733 §6.1.8: append the identity of the peer the request came from.
        append_route_record(&mut req, from_host);
        Ok(req)
    }

    /// Makes an admitted request (or a taken retry, [`Held::retried`]) pending on `to` and
    /// returns its encoding with a fresh Hop-by-Hop id: the request is encoded once,
    /// not copied. An encoding error (a message too large for the length field) answers
    /// it 5012 here and returns `Err(answer)` instead.
    pub fn send(
        &mut self,
        now: Duration,
        mut held: Held,
        to: PeerId,
    ) -> Result<Vec<u8>, Option<Delivery>> {
        held.mark_retransmit();
        let mut bytes = match held.request.try_encode() {
            Ok(b) => b,
            Err(e) => {
                let text = format!("cannot forward: {e}");
                let code = result_code::UNABLE_TO_COMPLY;
                return Err(self.refused(held.downstream, &held.request, code, &text));
            }
        };
        if held.retried {
            self.stats.retries += 1;
        }
        let hbh = self.insert(now, held, to);
        // The Hop-by-Hop Identifier is header bytes 12..16 (RFC 6733 §3).
        bytes[12..16].copy_from_slice(&hbh.to_be_bytes());
        Ok(bytes)
    }

    /// An admitted (or taken) request that will not be sent (e.g. the egress limiter
    /// refused it): answered with `result_code` and `error_message`, or — its
    /// downstream is gone — counted as discarded (`None`).
    pub fn refused(
        &mut self,
        from: DownstreamRef,
        req: &Message,
        result_code: u32,
        error_message: &str,
    ) -> Option<Delivery> {
        if self.is_live(from) {
            self.stats.answers_generated += 1;
            Some(Delivery {
                to: from,
                answer: self.answer(req, result_code, error_message),
            })
        } else {
            self.stats.answers_discarded += 1;
            None
        }
    }

    /// An admitted request that gets no answer on purpose (egress action `drop`; the
    /// downstream's transport or application retransmits).
    pub fn dropped(&mut self) {
        self.stats.requests_dropped += 1;
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
        let sent_at = entry.sent_at;
        self.pending.remove(&key);
        self.timers.remove(&timer);
        self.release(from, Some(sent_at));
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
                    out.extend(self.fail(now, (peer, hbh), FailureCause::Timeout));
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
            out.extend(self.fail(now, (peer, hbh), FailureCause::PeerFailed));
        }
        out
    }

    /// Resolves a [`Retry`]: `to = Some(peer)` resends the request there (T flag set,
    /// fresh Hop-by-Hop id, answer timeout `timeout`); `None` answers 3002.
    /// ([`Relay::take_retry`] and [`Relay::send`] when an egress limiter sits between.)
    pub fn retry(
        &mut self,
        now: Duration,
        retry: Retry,
        to: Option<PeerId>,
        timeout: Duration,
    ) -> RetryOutcome {
        let exclude = retry.exclude;
        let Some(t) = self.take_retry(retry) else {
            return RetryOutcome::Stale;
        };
        if !t.live {
            return RetryOutcome::Discarded;
        }
        match to {
            Some(peer) => {
                self.stats.retries += 1;
                let held = t.resend(timeout);
                let mut out = held.request.clone();
                out.hop_by_hop = self.insert(now, held, peer);
                RetryOutcome::Send {
                    to: peer,
                    request: out,
                }
            }
            None => match self.refused(
                t.downstream,
                &t.request,
                result_code::UNABLE_TO_DELIVER,
                &no_alternate(exclude),
            ) {
                Some(d) => RetryOutcome::Answer(d),
                None => RetryOutcome::Discarded,
            },
        }
    }

    /// Takes the request of a [`Retry`] out of the table (`None` if it was already
    /// resolved: it timed out waiting). Give a live one to [`Relay::send`]
    /// ([`RetryTaken::resend`]) or answer it with [`Relay::refused`]; a dead one
    /// (downstream gone) is counted as discarded.
    pub fn take_retry(&mut self, retry: Retry) -> Option<RetryTaken> {
        let aw = self.awaiting.remove(&retry.token)?;
        self.timers.remove(&aw.timer);
        self.entry_gone(aw.downstream);
        let live = self.is_live(aw.downstream);
        if !live {
            self.stats.answers_discarded += 1;
        }
        Some(RetryTaken {
            downstream: aw.downstream,
            request: aw.request,
            live,
        })
    }

    /// A request admitted but never sent whose peer failed before it could go (it
    /// waited in an egress queue): it waits for the caller's choice of another peer as
    /// after a failure ([`Expired::Retry`]).
    pub fn reroute(
        &mut self,
        now: Duration,
        from: DownstreamRef,
        request: Message,
        exclude: PeerId,
        timeout: Duration,
    ) -> Option<Expired> {
        self.entry_added(from);
        let entry = Entry {
            downstream: from,
            request,
            retried: false,
            timeout,
            timer: (now, 0),
            sent_at: now,
        };
        self.fail_over(now, exclude, entry, FailureCause::PeerFailed)
    }

    /// The downstream connection `conn_id` closed: outcomes of its requests are
    /// discarded and counted in `answers_discarded`.
    pub fn downstream_closed(&mut self, conn_id: u64) {
        if let Some(st) = self.downstreams.get_mut(&conn_id) {
            st.open = false;
            if st.entries == 0 {
                self.downstreams.remove(&conn_id);
            }
        }
    }

    /// Next upstream peer with one request fewer outstanding (answered, timed out or
    /// failed over); with the send time when it was answered.
    pub fn poll_released(&mut self) -> Option<Released> {
        self.released.pop_front()
    }

    /// Requests sent to `peer` and not yet answered, timed out or failed over.
    pub fn outstanding(&self, peer: PeerId) -> u32 {
        self.outstanding.get(&peer).copied().unwrap_or(0)
    }

    /// Requests from downstream connection `conn_id` in the table.
    pub fn pending_from(&self, conn_id: u64) -> usize {
        self.downstreams.get(&conn_id).map_or(0, |d| d.entries)
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

    /// Stores `held` (downstream Hop-by-Hop id) pending on `to`; returns the Hop-by-Hop
    /// id it gets towards `to`.
    fn insert(&mut self, now: Duration, mut held: Held, to: PeerId) -> u32 {
        held.mark_retransmit();
        let Held {
            downstream: from,
            request,
            timeout,
            retried,
        } = held;
        let hbh = self.alloc_hop_by_hop(to);
        let timer = self.next_timer(now.saturating_add(timeout));
        self.timers.insert(timer, Timed::Pending(to, hbh));
        self.pending.insert(
            (to, hbh),
            Entry {
                downstream: from,
                request,
                retried,
                timeout,
                timer,
                sent_at: now,
            },
        );
        *self.outstanding.entry(to).or_insert(0) += 1;
        self.entry_added(from);
        hbh
    }

    /// One request of `peer` left the pending table.
    fn release(&mut self, peer: PeerId, answered_sent_at: Option<Duration>) {
        if let Some(n) = self.outstanding.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.outstanding.remove(&peer);
            }
        }
        self.released.push_back(Released {
            peer,
            answered_sent_at,
        });
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

    /// The upstream attempt of the request pending under `key` (peer, Hop-by-Hop id), if
    /// it still is, failed.
    fn fail(&mut self, now: Duration, key: (PeerId, u32), cause: FailureCause) -> Option<Expired> {
        let entry = self.pending.remove(&key)?;
        let peer = key.0;
        self.release(peer, None);
        self.fail_over(now, peer, entry, cause)
    }

    /// An entry (out of the pending table, still counted for its downstream) whose
    /// attempt on `peer` failed: 3002 after a retry, else it waits for the caller's
    /// choice of an alternate (RFC 6733 §5.5.4) with the T flag set.
    fn fail_over(
        &mut self,
        now: Duration,
        peer: PeerId,
        entry: Entry,
        cause: FailureCause,
    ) -> Option<Expired> {
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
        self.downstreams
            .entry(from.conn_id)
            .or_insert(DownstreamState {
                open: true,
                entries: 0,
            });
    }

    fn is_live(&self, d: DownstreamRef) -> bool {
        self.downstreams.get(&d.conn_id).is_some_and(|st| st.open)
    }

    fn entry_added(&mut self, d: DownstreamRef) {
        if let Some(st) = self.downstreams.get_mut(&d.conn_id) {
            st.entries += 1;
        }
    }

    /// Bookkeeping when an entry leaves the table; forgets closed, empty connections
    /// (only closed ones, so `is_live` answers the same before and after).
    fn entry_gone(&mut self, d: DownstreamRef) {
        if let Some(st) = self.downstreams.get_mut(&d.conn_id) {
            st.entries = st.entries.saturating_sub(1);
            if !st.open && st.entries == 0 {
                self.downstreams.remove(&d.conn_id);
            }
        }
    }
}

/// The Error-Message of the 3002 for a request whose peer failed and no alternate was
/// found.
pub(crate) fn no_alternate(failed: PeerId) -> String {
    format!(
        "unable to deliver: upstream peer #{} failed and no alternate peer is available",
        failed.0
    )
}
