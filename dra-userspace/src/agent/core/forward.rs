//! Requests from peers: marked by the fast path (answered at once), invalid (answered
//! with the RFC's Result-Code), unroutable (3003/3002), or routed and handed to the
//! forwarding pipeline; what the pipeline asks for (requests upstream, answers
//! downstream, retries to route again); answers from upstream.

use super::*;

impl Core {
    /// An answer generated here for a request received on `conn`.
    pub(super) fn reply(&mut self, conn: ConnId, ans: &Message) {
        if self.write(conn, ans) {
            self.count_answer_out(conn, ans);
        }
    }

    pub(super) fn count_answer_out(&mut self, conn: ConnId, ans: &Message) {
        self.stats.answers_out += 1;
        if let Some(p) = self.conns.get(&conn).and_then(|c| c.peer) {
            let rc = ans
                .result_code()
                .or_else(|| ans.experimental_result().map(|(_, c)| c))
                .unwrap_or(0);
            self.metrics.inc_answer(&self.cfg.peers[p.0].name, rc);
        }
    }

    // ----- requests and answers -----

    pub(super) fn on_request(&mut self, now: Duration, conn: ConnId, from: PeerId, req: Message) {
        self.stats.requests_in += 1;
        self.slots[from.0].requests_in += 1;
        let from_name = &self.cfg.peers[from.0].name;
        self.metrics.inc_request(from_name, metrics::Direction::In);
        if req.is_marked() {
            // DESIGN §3: over an ingress limit in the fast path → answer at once.
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
        let to = match self.route(now, &req, None) {
            Ok(p) => p,
            Err(code) => {
                self.stats.local_answers += 1;
                let g = &self.cfg.global;
                let a = answer_for(
                    &req,
                    code,
                    &g.origin_host,
                    &g.origin_realm,
                    Some("no route to the destination"),
                    None,
                );
                self.reply(conn, &a);
                return;
            }
        };
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

    pub(super) fn timeout_of(&self, p: PeerId) -> Duration {
        self.groups[p.0].map_or(self.opts.default_answer_timeout, |g| self.timeouts[g.0])
    }

    /// Routes `req`: `Some(Ok(peer))`, `Some(Err(result_code))` when unroutable. With
    /// `exclude` (a retry) no binding is touched: only the route table and selector.
    pub(super) fn route(
        &mut self,
        now: Duration,
        req: &Message,
        exclude: Option<PeerId>,
    ) -> Result<PeerId, u32> {
        let realm = req.destination_realm().unwrap_or("");
        let cc = req.cc_request_type().and_then(CcRequestType::from_value);
        self.routers[&Strategy::RoundRobin].table().candidates_into(
            realm,
            req.application_id,
            &mut self.scratch,
        );
        let strategy = self
            .scratch
            .first()
            .and_then(|c| self.groups[c.peer.0])
            .map_or(Strategy::RoundRobin, |g| self.group_strategy[g.0]);
        let router = self
            .routers
            .get_mut(&strategy)
            .expect("router per strategy");
        if let Some(ex) = exclude {
            let cands = std::mem::take(&mut self.scratch);
            let pick = router
                .selector_mut()
                .select_excluding(&cands, &self.peers, now, &[ex]);
            self.scratch = cands;
            return pick.ok_or(crate::diameter::result_code::UNABLE_TO_DELIVER);
        }
        let rr = RouteRequest {
            destination_realm: realm,
            destination_host: req.destination_host(),
            application_id: req.application_id,
            session_id: req.session_id(),
            cc_request_type: cc,
        };
        let out = router.route_request(&rr, &self.peers, &mut self.bindings, now);
        if let Some(e) = out.binding_error {
            warn!(error = %crate::error_chain(&e), "session binding store");
        }
        match out.decision {
            Decision::Forward { peer, .. } => Ok(peer),
            Decision::Reject(u) => Err(u.result_code()),
        }
    }

    /// Carries out what the pipeline asks: requests upstream, answers downstream,
    /// latencies; routes the retries it hands back (and those in `retries`).
    pub(super) fn pump(&mut self, now: Duration, mut retries: Vec<Retry>) {
        loop {
            for r in std::mem::take(&mut retries) {
                // RFC 6733 §5.5.4: one retry on an alternate peer, T flag set.
                let to = self.route(now, &r.request, Some(r.exclude)).ok();
                let timeout = to.map_or(self.opts.default_answer_timeout, |p| self.timeout_of(p));
                self.pipeline.retry(now, r, to, timeout);
            }
            let Some(o) = self.pipeline.poll_output() else {
                break;
            };
            match o {
                Output::Send { to, bytes } => self.send_upstream(to, bytes),
                Output::Deliver(d) => self.reply(d.to.conn_id, &d.answer),
                Output::Latency { peer, took } => {
                    self.metrics
                        .observe_answer_latency(&self.cfg.peers[peer.0].name, took);
                    self.peers
                        .set_pending(peer, self.pipeline.outstanding(peer));
                }
            }
        }
        for g in 0..self.cfg.peer_groups.len() {
            let depth = self.pipeline.queue_len(GroupId(g)) as u64;
            self.metrics
                .set_queue_depth(&self.cfg.peer_groups[g].name, depth);
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
            self.metrics
                .inc_request(&self.cfg.peers[to.0].name, metrics::Direction::Out);
        }
    }

    pub(super) fn on_answer(&mut self, now: Duration, from: PeerId, ans: Message) {
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
