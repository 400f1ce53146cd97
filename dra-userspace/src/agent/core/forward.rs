//! Requests from peers: marked by the fast path (answered at once), invalid (answered
//! with the RFC's Result-Code), unroutable (3003/3002), or routed and handed to the
//! forwarding pipeline; what the pipeline asks for (requests upstream, answers
//! downstream, retries to route again); answers from upstream.

use super::*;
use crate::config::StoreOnError;

/// A request between arriving and entering the forwarding pipeline; parked while a
/// session store call it needs is under way.
pub(super) struct Parked {
    conn: ConnId,
    from: PeerId,
    pub(super) req: Message,
    stage: Stage,
    /// Held at start-up until this deadline (`super::startup`): routed again when a
    /// connection opens, still bound by the first hold's deadline.
    pub(super) held_until: Option<Duration>,
}

/// What a parked request waits for.
#[derive(Clone, Copy)]
enum Stage {
    /// The binding lookup (routing comes after).
    Route,
    /// Its new binding to be written, then forwarding to this peer.
    Write { to: PeerId },
}

/// The fields routing reads from `req`.
fn route_request(req: &Message) -> RouteRequest<'_> {
    RouteRequest {
        destination_realm: req.destination_realm().unwrap_or(""),
        destination_host: req.destination_host(),
        application_id: req.application_id,
        session_id: req.session_id(),
        cc_request_type: req.cc_request_type().and_then(CcRequestType::from_value),
    }
}

impl Core {
    /// An answer (generated here, or relayed) for a request received on `conn`; a
    /// DOIC gateway's gets our OC-Supported-Features and OC-OLR (`crate::doic`).
    pub(super) fn reply(&mut self, conn: ConnId, ans: &Message) {
        let mut decorated = self.doic_answer(conn, ans);
        if decorated.is_none()
            && Core::doic_present(ans)
            && let Some(p) = self.conns.get(&conn).and_then(|c| c.peer)
        {
            // Relayed DOIC AVPs our reporting node did not rewrite (`react`).
            let mut a = ans.clone();
            Core::doic_strip(&mut a, self.announces[p.0]);
            decorated = Some(a);
        }
        let ans = decorated.as_ref().unwrap_or(ans);
        if self.write(conn, ans) {
            self.count_answer_out(conn, ans);
        }
    }

    /// `ans` with DOIC added when `conn` is a DOIC gateway's that announced DOIC.
    fn doic_answer(&mut self, conn: ConnId, ans: &Message) -> Option<Message> {
        let p = self.conns.get(&conn).and_then(|c| c.peer)?;
        let caps = self.doic.latest(p.0)?.clone();
        let mut a = ans.clone();
        let sent = self.doic.decorate(self.now(), p.0, Some(&caps), &mut a);
        if let Some(s) = sent {
            let name = &self.cfg.peers[p.0].name;
            self.metrics
                .inc_doic_olr(name, "peer", s.algorithm.name(), s.end);
        }
        Some(a)
    }

    /// Ends a DOIC measurement window (every housekeeping tick) and publishes the
    /// reports.
    pub(super) fn doic_tick(&mut self, now: Duration) {
        self.doic.tick(now);
        self.doic_server_tick(now);
        for (i, p) in self.cfg.peers.iter().enumerate() {
            if !self.doic.enabled(i) {
                continue;
            }
            let (reduction, rate) = match self.doic.report(i) {
                Some(crate::doic::Report::Reduction(r)) => (r, 0),
                Some(crate::doic::Report::MaxRate(r)) => (0, r),
                None => (0, 0),
            };
            self.metrics.set_doic_report(&p.name, reduction, rate);
        }
    }

    pub(super) fn count_answer_out(&mut self, conn: ConnId, ans: &Message) {
        self.stats.answers_out += 1;
        if let Some(p) = self.conns.get(&conn).and_then(|c| c.peer) {
            let rc = ans
                .result_code()
                .or_else(|| ans.experimental_result().map(|(_, c)| c))
                .unwrap_or(0);
            series(&mut self.slots, &self.cfg, &self.metrics, p).inc_answer(&self.metrics, rc);
        }
    }

    // ----- requests and answers -----

    pub(super) fn on_request(&mut self, now: Duration, conn: ConnId, from: PeerId, req: Message) {
        self.stats.requests_in += 1;
        self.slots[from.0].requests_in += 1;
        series(&mut self.slots, &self.cfg, &self.metrics, from)
            .inc_request(&self.metrics, metrics::Direction::In);
        // Counted for DOIC before anything answers it (marked requests too).
        self.doic.on_request(from.0, &req);
        self.announces[from.0] = req
            .find(crate::diameter::avp_code::OC_SUPPORTED_FEATURES)
            .is_some();
        if req.is_marked() {
            // docs/architecture.md §3: over an ingress limit in the fast path → answer at once.
            match self.marked.handle(from, &req) {
                MarkedResponse::Answer(a) => {
                    self.stats.local_answers += 1;
                    self.reply(conn, &a);
                }
                MarkedResponse::Discard => {}
            }
            return;
        }
        // RFC 6733 §7.1: protocol errors are answered here. A relay serves every
        // application (RFC 6733 §2.4).
        if let Err(pe) = validate_request(&req, Dictionary::standard(), &[app::RELAY]) {
            self.stats.local_answers += 1;
            let a = pe.answer(
                &req,
                &self.cfg.global.origin_host,
                &self.cfg.global.origin_realm,
            );
            self.reply(conn, &a);
            return;
        }
        self.dispatch(
            now,
            Parked {
                conn,
                from,
                req,
                stage: Stage::Route,
                held_until: None,
            },
            None,
        );
    }

    /// Routes a request and forwards it, parking it while a session store call it
    /// needs is under way (`crate::session`). `bound`: the store's answer to its
    /// lookup, when it comes back from one.
    pub(super) fn dispatch(&mut self, now: Duration, p: Parked, bound: Option<Option<String>>) {
        let (strategy, sticky, ask_store) = {
            let req = &p.req;
            let strategy = self.strategy_for(req);
            let rr = route_request(req);
            let sticky = self.routers[&strategy]
                .sticky_session(&rr)
                .map(str::to_owned);
            // A CCR-I starts its session and needs no lookup, unless it is a
            // retransmission (T flag: the gateway may have sent it via another host).
            let ask = rr.cc_request_type != Some(CcRequestType::Initial) || req.is_retransmit();
            (strategy, sticky, ask)
        };
        let bound = match (bound, &sticky) {
            (Some(b), _) => b,
            (None, None) => None,
            (None, Some(sid)) => match self.sessions.lookup(sid, ask_store, now) {
                session::Lookup::Hit(peer) => Some(peer),
                session::Lookup::Miss => None,
                session::Lookup::Wait(token) => return self.park(now, token, p),
                session::Lookup::Failed => match self.store_failed(&p) {
                    Some(()) => None,
                    None => return,
                },
            },
        };
        let routed = {
            let router = self
                .routers
                .get_mut(&strategy)
                .expect("router per strategy");
            router.decide(&route_request(&p.req), &self.peers, bound.as_deref(), now)
        };
        let to = match routed.decision {
            Decision::Forward { peer, .. } => peer,
            Decision::Reject(u) => {
                // A (re)started agent whose first connection there is still opening
                // holds it instead (`super::startup`).
                let p = match u {
                    crate::routing::Unroutable::NoGoodPeer => match self.hold(now, p) {
                        Some(p) => p,
                        None => return,
                    },
                    crate::routing::Unroutable::NoRoute => p,
                };
                return self.answer_locally(&p, u.result_code(), "no route to the destination");
            }
        };
        // DOIC (RFC 7683 §5.2, §6): a server's overload reports may shed or divert it.
        let mut update = routed.update;
        let to = match self.doic_admit(now, &p.req, to, bound.is_some()) {
            react::Abatement::Send(to) => to,
            react::Abatement::Diverted(alt) => {
                if let BindingUpdate::Bind(name) = &mut update {
                    name.clone_from(&self.cfg.peers[alt.0].origin_host);
                }
                alt
            }
            react::Abatement::Reject(code) => {
                // RFC 7683 §8: 3004 when the request may succeed on another path, 5012
                // when it cannot (its session is bound to the reporting server).
                return self.answer_locally(
                    &p,
                    code,
                    "request abated by the server's overload report (DOIC)",
                );
            }
        };
        if let (BindingUpdate::Bind(name), Some(sid)) = (&update, &sticky) {
            match self.sessions.bind(sid, name, now) {
                session::Write::Done => {}
                session::Write::Wait(token) => {
                    let p = Parked {
                        stage: Stage::Write { to },
                        ..p
                    };
                    return self.park(now, token, p);
                }
                session::Write::Failed => {
                    if self.store_failed(&p).is_none() {
                        return;
                    }
                }
            }
        }
        // BindingUpdate::Unbind: the binding goes when the CCR-T is answered (`pump`),
        // so a retransmitted CCR-T still finds its server.
        self.forward_to(now, p, to);
    }

    /// The store failed a request that needed it: `Some(())` to go on without it
    /// (`on_error = "local"`), `None` once it was answered (`"reject"`).
    fn store_failed(&mut self, p: &Parked) -> Option<()> {
        match self.sessions.fallback() {
            StoreOnError::Local => Some(()),
            StoreOnError::Reject => {
                let (code, msg) = self.sessions.reject_answer();
                let msg = msg.to_owned();
                self.answer_locally(p, code, &msg);
                None
            }
        }
    }

    pub(super) fn answer_locally(&mut self, p: &Parked, code: u32, message: &str) {
        self.stats.local_answers += 1;
        let g = &self.cfg.global;
        let a = answer_for(
            &p.req,
            code,
            &g.origin_host,
            &g.origin_realm,
            Some(message),
            None,
        );
        self.reply(p.conn, &a);
    }

    fn park(&mut self, now: Duration, token: u64, p: Parked) {
        self.parked_deadlines
            .push_back((now + self.sessions.deadline_after(), token));
        self.parked.insert(token, p);
    }

    /// A session store event; resumes the request parked on the call it resolves.
    pub(super) fn on_store(&mut self, now: Duration, ev: session::Event) {
        let Some((token, result)) = self.sessions.on_event(ev, now) else {
            return;
        };
        if let Some(p) = self.parked.remove(&token) {
            self.resume(now, p, result.map_err(|_| ()));
        }
    }

    /// Parked requests whose store call never came back in time (the client task's own
    /// timeout normally answers first): treated as failed calls.
    pub(super) fn expire_parked(&mut self, now: Duration) {
        while let Some(&(deadline, token)) = self.parked_deadlines.front() {
            if deadline > now {
                break;
            }
            self.parked_deadlines.pop_front();
            if let Some(p) = self.parked.remove(&token) {
                self.sessions.abandon(token, now);
                self.resume(now, p, Err(()));
            }
        }
    }

    fn resume(&mut self, now: Duration, p: Parked, result: Result<Option<String>, ()>) {
        match (p.stage, result) {
            (Stage::Route, Ok(bound)) => self.dispatch(now, p, Some(bound)),
            (Stage::Route, Err(())) => {
                if self.store_failed(&p).is_some() {
                    self.dispatch(now, p, Some(None));
                }
            }
            (Stage::Write { to }, Ok(_)) => self.forward_to(now, p, to),
            (Stage::Write { to }, Err(())) => {
                if self.store_failed(&p).is_some() {
                    self.forward_to(now, p, to);
                }
            }
        }
    }

    /// Hands a routed request to the forwarding pipeline.
    fn forward_to(&mut self, now: Duration, p: Parked, to: PeerId) {
        let Parked {
            conn,
            from,
            mut req,
            ..
        } = p;
        self.doic_request(to, &mut req);
        self.overload.routed += 1;
        let timeout = self.timeout_of(to);
        let down = DownstreamRef { conn_id: conn };
        let from_host = &self.cfg.peers[from.0].origin_host;
        match self
            .pipeline
            .forward(now, down, from_host, req, to, timeout)
        {
            Ok(()) => self.pump(now, Vec::new()),
            Err(e) => {
                if let RelayError::TooBusy { .. } | RelayError::LoopDetected { .. } = e
                    && let Some(a) = e.into_answer()
                {
                    self.reply(conn, &a);
                }
            }
        }
    }

    /// The selection strategy of the group serving `req`'s realm and application.
    pub(super) fn strategy_for(&mut self, req: &Message) -> Strategy {
        let realm = req.destination_realm().unwrap_or("");
        self.routers[&Strategy::RoundRobin].table().candidates_into(
            realm,
            req.application_id,
            &mut self.scratch,
        );
        self.scratch
            .first()
            .and_then(|c| self.groups[c.peer.0])
            .map_or(Strategy::RoundRobin, |g| self.group_strategy[g.0])
    }

    pub(super) fn timeout_of(&self, p: PeerId) -> Duration {
        self.groups[p.0].map_or(self.opts.default_answer_timeout, |g| self.timeouts[g.0])
    }

    /// An alternate peer for a retry of `req` (RFC 6733 §5.5.4): route table and
    /// selector only, excluding the peer that failed; no binding is touched.
    pub(super) fn route_retry(
        &mut self,
        now: Duration,
        req: &Message,
        exclude: PeerId,
    ) -> Option<PeerId> {
        let strategy = self.strategy_for(req);
        let router = self
            .routers
            .get_mut(&strategy)
            .expect("router per strategy");
        let cands = std::mem::take(&mut self.scratch);
        let pick = router
            .selector_mut()
            .select_excluding(&cands, &self.peers, now, &[exclude]);
        self.scratch = cands;
        pick
    }

    /// Carries out what the pipeline asks: requests upstream, answers downstream,
    /// latencies; routes the retries it hands back (and those in `retries`).
    pub(super) fn pump(&mut self, now: Duration, mut retries: Vec<Retry>) {
        loop {
            for r in std::mem::take(&mut retries) {
                // RFC 6733 §5.5.4: one retry on an alternate peer, T flag set.
                let to = self.route_retry(now, &r.request, r.exclude);
                let timeout = to.map_or(self.opts.default_answer_timeout, |p| self.timeout_of(p));
                self.pipeline.retry(now, r, to, timeout);
            }
            let Some(o) = self.pipeline.poll_output() else {
                break;
            };
            match o {
                Output::Send { to, bytes } => self.send_upstream(to, bytes),
                Output::Deliver(d) => {
                    self.session_answered(now, &d.answer);
                    self.reply(d.to.conn_id, &d.answer);
                }
                Output::Latency { peer, took } => {
                    series(&mut self.slots, &self.cfg, &self.metrics, peer)
                        .observe_answer_latency(&self.metrics, took);
                    self.peers
                        .set_pending(peer, self.pipeline.outstanding(peer));
                }
            }
        }
        self.queue_depths.resize(self.cfg.peer_groups.len(), None);
        for g in 0..self.cfg.peer_groups.len() {
            let depth = self.pipeline.queue_len(GroupId(g)) as u64;
            if self.queue_depths[g] != Some(depth) {
                self.queue_depths[g] = Some(depth);
                self.metrics
                    .set_queue_depth(&self.cfg.peer_groups[g].name, depth);
            }
        }
    }

    /// The answer to a CCR-T ends its session: its binding goes (docs/architecture.md
    /// §9), after [`crate::session::ENDED_GRACE`] so that a CCR-T resent with the T flag
    /// through another DRA host (the gateway lost this one with the answer) still finds
    /// its server.
    fn session_answered(&mut self, now: Duration, ans: &Message) {
        if ans.cc_request_type() != Some(u32::from(dra_common::wire::cc_request_type::TERMINATION))
        {
            return;
        }
        let router = &self.routers[&Strategy::RoundRobin];
        if let Some(sid) = ans
            .session_id()
            .filter(|_| router.is_sticky_application(ans.application_id))
        {
            self.sessions.end(sid, now);
        }
    }

    pub(super) fn send_upstream(&mut self, to: PeerId, bytes: Vec<u8>) {
        self.peers.set_pending(to, self.pipeline.outstanding(to));
        let Some(conn) = self.slots[to.0].conn else {
            // The peer went away while the request waited; the relay's timer answers.
            return;
        };
        if self.write_bytes(conn, bytes) {
            self.slots[to.0].requests_out += 1;
            series(&mut self.slots, &self.cfg, &self.metrics, to)
                .inc_request(&self.metrics, metrics::Direction::Out);
        }
    }

    pub(super) fn on_answer(&mut self, now: Duration, from: PeerId, ans: Message) {
        self.doic_server_answer(now, from, &ans);
        self.pipeline.on_answer(now, from, ans);
        self.peers
            .set_pending(from, self.pipeline.outstanding(from));
        self.pump(now, Vec::new());
    }

    pub(super) fn peer_failed(&mut self, now: Duration, p: PeerId) {
        let retries = self.pipeline.peer_failed(now, p);
        self.peers.set_pending(p, self.pipeline.outstanding(p));
        self.pump(now, retries);
    }
}
