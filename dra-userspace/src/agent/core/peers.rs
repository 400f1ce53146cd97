//! Connections: accepted and dialled, reconnect with back-off, the peer state machines'
//! inputs (I/O events) and outputs (messages to write, events), CER and election,
//! peer slots and their state metric, writing with a bounded queue.

use std::net::IpAddr;

use super::*;

impl Core {
    pub(super) fn span(
        &self,
        id: ConnId,
        remote: std::net::SocketAddr,
        origin_host: Option<&str>,
    ) -> Span {
        let span = info_span!("peer", conn = id, %remote, origin_host = tracing::field::Empty);
        if let Some(h) = origin_host {
            span.record("origin_host", h);
        }
        span
    }

    pub(super) fn options(&mut self, reopen: bool) -> ConnectionOptions {
        let seed = self
            .opts
            .seed
            .wrapping_add(self.next_conn.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        ConnectionOptions::new(seed, self.start_secs).reopen(reopen)
    }

    /// Whether one more accepted connection from `ip` may wait for its CER (the caps
    /// of [`AgentOptions::max_awaiting_cer`]); a refusal is counted and logged once a
    /// second at most. Dropping the stream then closes it (RST if data is pending).
    pub(super) fn cer_wait_admits(&mut self, remote: std::net::SocketAddr, ip: IpAddr) -> bool {
        // Connections that have not sent their CER yet cost a task and a timer each: a
        // peer (or anyone) opening many at once is refused beyond the caps.
        let total: usize = self.awaiting_cer.values().sum();
        let from_ip = self.awaiting_cer.get(&ip).copied().unwrap_or(0);
        let refuse = if total >= self.opts.max_awaiting_cer {
            Some("cer_backlog")
        } else if from_ip >= self.opts.max_awaiting_cer_per_source {
            Some("cer_backlog_per_source")
        } else {
            None
        };
        let Some(reason) = refuse else {
            return true;
        };
        self.metrics.inc_connection_refused(reason);
        if self.refused_since_log == 0 {
            warn!(
                %remote,
                reason,
                waiting = total,
                from_source = from_ip,
                "connection refused: too many connections waiting for a CER (counted; \
                 logged once per second at most)"
            );
        }
        self.refused_since_log += 1;
        false
    }

    /// Opens an accepted connection (plain, or TLS after its handshake).
    pub(super) fn open_accepted(&mut self, stream: crate::transport::Connection) -> Option<ConnId> {
        // Inbound connections are usually clients: they start with our current load.
        let opts = self.options(false).own_load(self.own_load);
        let span = self.span(self.next_conn, stream.remote, None);
        if let Some(info) = &stream.tls {
            span.in_scope(|| debug!(version = info.version, "TLS handshake done"));
        }
        // Accepted connections come to a Diameter port: the ingress limits apply when
        // the agent enforces them itself (always for TLS: XDP cannot read it).
        let ingress = self.ingress_for(stream.kind());
        self.open_conn(stream, None, opts, ingress, span)
    }

    /// Connection `id` from `ip` waits for its CER; `count`: not yet counted (a TLS
    /// connection was counted from its accept on).
    pub(super) fn cer_wait_begins(&mut self, id: ConnId, ip: IpAddr, count: bool) {
        match self.conns.get_mut(&id) {
            Some(c) if !c.pc.is_open() => {
                c.awaiting_from = Some(ip);
                if count {
                    *self.awaiting_cer.entry(ip).or_insert(0) += 1;
                }
            }
            _ if !count => self.cer_wait_released(ip),
            _ => {}
        }
    }

    /// One connection from `ip` stops waiting for its CER.
    pub(super) fn cer_wait_released(&mut self, ip: IpAddr) {
        if let Some(n) = self.awaiting_cer.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.awaiting_cer.remove(&ip);
            }
        }
    }

    /// The connection stops waiting for its CER (it opened, or it closed).
    pub(super) fn cer_wait_over(&mut self, id: ConnId) {
        if let Some(ip) = self.conns.get_mut(&id).and_then(|c| c.awaiting_from.take()) {
            self.cer_wait_released(ip);
        }
    }

    /// Sets up a connection: its `PeerConnection` (responder for an accepted one,
    /// initiator when `peer` is the server we dialled), its I/O tasks, and starts it.
    /// `None` (logged) if either could not be created.
    pub(super) fn open_conn(
        &mut self,
        stream: crate::transport::Connection,
        peer: Option<PeerId>,
        opts: ConnectionOptions,
        ingress: io::Ingress,
        span: Span,
    ) -> Option<ConnId> {
        let id = self.next_conn;
        self.next_conn += 1;
        let dir = self.dir.clone();
        // Over SCTP the CER and CEA name the association's own addresses (all its
        // paths, RFC 6733 §2.1.1); over TCP the listeners'.
        let cfg = match &stream.sctp {
            Some(p) if !p.local.is_empty() => {
                let mut c = (*self.peer_cfg).clone();
                c.identity.host_ip_addresses = crate::transport::sctp::ips(&p.local);
                std::sync::Arc::new(c)
            }
            _ => self.peer_cfg.clone(),
        };
        let role = match peer {
            None => Role::Responder,
            Some(_) => Role::Initiator,
        };
        let kind = stream.kind();
        let pc = PeerConnection::new(role, cfg, dir, stream.remote.ip(), opts);
        let pc = match pc {
            Ok(pc) => pc,
            Err(e) => {
                span.in_scope(|| warn!(error = %e, "cannot create a peer connection"));
                return None;
            }
        };
        let io = io::spawn(
            id,
            stream,
            self.io_tx.clone(),
            self.opts.max_message_size,
            self.opts.write_queue,
            ingress,
            self.overload.reads.clone(),
            span.clone(),
        );
        span.in_scope(|| match peer {
            None => debug!("accepted"),
            Some(_) => info!("connected, sending CER"),
        });
        // A server we dialled over TLS was named by its certificate (rustls checked).
        let tls_peers = (kind == crate::transport::Kind::Tls).then(|| peer.into_iter().collect());
        self.conns.insert(
            id,
            Conn {
                pc,
                io,
                peer,
                span,
                awaiting_from: None,
                ignored: 0,
                tls_peers,
            },
        );
        let now = self.now();
        if let Some(c) = self.conns.get_mut(&id) {
            c.pc.handle_connected(now);
        }
        self.drive(now, id);
        Some(id)
    }

    pub(super) fn dial(&mut self, peer: usize) {
        let Some(addr) = self.cfg.peers[peer].connect else {
            return;
        };
        let slot = &mut self.slots[peer];
        if slot.connecting || slot.initiator.is_some() || self.shutdown.is_some() {
            return;
        }
        slot.connecting = true;
        slot.reconnect_at = None;
        let tx = self.ctl_tx.clone();
        let timeout = self.opts.connect_timeout;
        let p = &self.cfg.peers[peer];
        let how = match p.transport {
            crate::config::Transport::Sctp => tls::Dial::Sctp(sctp_remotes(p, addr)),
            crate::config::Transport::Tcp => match tls::tcp_dial(p) {
                Ok(how) => how,
                Err(why) => {
                    warn!(peer = %p.name, why, "TLS server not dialled: {why}");
                    self.slots[peer].connecting = false;
                    self.schedule_reconnect(peer, None);
                    return;
                }
            },
        };
        tokio::spawn(async move {
            let result = tls::dial(addr, timeout, how).await;
            let _ = tx.send(Ctl::Connected { peer, result }).await;
        });
    }

    pub(super) fn schedule_reconnect(&mut self, peer: usize, hold_off: Option<Duration>) {
        if self.shutdown.is_some() || self.cfg.peers[peer].connect.is_none() {
            return;
        }
        let now = self.now();
        let slot = &mut self.slots[peer];
        if std::mem::take(&mut slot.redial_now) {
            slot.reconnect_at = Some(now);
            return;
        }
        let backoff = reconnect_delay(
            self.peer_cfg.tc,
            self.opts.max_backoff,
            slot.failures,
            slot.ever_connected,
        );
        let delay = hold_off.map_or(backoff, |h| h.max(backoff));
        slot.failures = slot.failures.saturating_add(1);
        slot.reconnect_at = Some(now + delay);
        debug!(peer = %self.cfg.peers[peer].name, ?delay, "reconnect scheduled");
    }

    pub(super) fn connected(
        &mut self,
        peer: usize,
        result: Result<crate::transport::Connection, tls::DialError>,
    ) {
        self.slots[peer].connecting = false;
        let stream = match result {
            Ok(s) if self.shutdown.is_none() => s,
            Ok(_) => return,
            Err(e) => {
                let name = self.cfg.peers[peer].name.clone();
                match &e {
                    tls::DialError::Tls(r) => {
                        let addr = self.cfg.peers[peer].connect;
                        self.tls_refused("dialled", *r, addr, Some(&name));
                    }
                    tls::DialError::Io(_) => warn!(peer = %name, error = %e, "connect failed"),
                }
                self.schedule_reconnect(peer, None);
                return;
            }
        };
        let remote = stream.remote;
        let reopen = self.slots[peer].ever_connected;
        let opts = self.options(reopen);
        let span = self.span(
            self.next_conn,
            remote,
            Some(&self.cfg.peers[peer].origin_host),
        );
        // Our own outbound connections: the fast path sees their traffic arrive on an
        // ephemeral port, never limited; so does the agent's limiter.
        match self.open_conn(stream, Some(PeerId(peer)), opts, io::Ingress::None, span) {
            Some(id) => self.slots[peer].initiator = Some(id),
            None => self.schedule_reconnect(peer, None),
        }
    }

    // ----- I/O events -----

    pub(super) fn on_io(&mut self, e: IoEvent) {
        let now = self.now();
        match e {
            IoEvent::Closed { conn, why } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.span.in_scope(|| match &why {
                    CloseCause::Eof => debug!("peer closed the connection"),
                    CloseCause::Io(e) => info!(error = %e, "transport error"),
                    CloseCause::Framing(e, _) => {
                        warn!(error = %e, "broken framing: answering it, then closing")
                    }
                });
                self.tls_closed_before_open(conn, &why);
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                match why {
                    CloseCause::Framing(e, head) => self.framing_error(now, conn, &e, &head),
                    _ => {
                        c.pc.handle_closed(now);
                        self.drive(now, conn);
                    }
                }
            }
            IoEvent::Message { conn, msg, read_at } => {
                self.observe_lateness(read_at);
                self.on_message(now, conn, msg);
            }
            IoEvent::Marked {
                conn,
                frame,
                read_at,
            } => {
                self.observe_lateness(read_at);
                self.on_marked(now, conn, frame);
            }
        }
    }

    /// One decoded message (or why it could not be decoded) from connection `conn`.
    pub(super) fn on_message(
        &mut self,
        now: Duration,
        conn: ConnId,
        msg: Result<Message, Box<crate::diameter::DecodeError>>,
    ) {
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                self.undecodable(now, conn, &e);
                return;
            }
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let handled = c.pc.handle_message(now, msg);
        match handled {
            Handled::Consumed => {}
            Handled::Application(m) => {
                if let Some(p) = c.peer {
                    if m.is_request() {
                        self.on_request(now, conn, p, m);
                    } else {
                        self.on_answer(now, p, m);
                    }
                }
            }
            Handled::CerReceived { peer } => self.cer_received(now, conn, peer.id),
        }
        self.drive(now, conn);
    }

    /// The connection's byte stream cannot be framed any more (RFC 6733 §3): it must
    /// close, but nothing is lost on the way. The unframable message, if a request, is
    /// answered — 5011 DIAMETER_UNSUPPORTED_VERSION for a bad version, 5015
    /// DIAMETER_INVALID_MESSAGE_LENGTH for a bad length (§7.1.5), 5012 for one over the
    /// size limit — and the requests already relayed from this connection get their
    /// answers before it closes (reading has stopped; bounded by the answer timeouts).
    pub(super) fn framing_error(
        &mut self,
        now: Duration,
        conn: ConnId,
        e: &crate::diameter::FramingError,
        head: &[u8],
    ) {
        use crate::diameter::{FramingError, result_code};
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let mut h = [0u8; 20];
        h[..head.len().min(20)].copy_from_slice(&head[..head.len().min(20)]);
        let w = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let request = Message {
            flags: h[4],
            command_code: w(4) & 0x00ff_ffff,
            application_id: w(8),
            hop_by_hop: w(12),
            end_to_end: w(16),
            avps: Vec::new(),
        };
        let (code, text) = match e {
            FramingError::BadVersion { .. } => (result_code::UNSUPPORTED_VERSION, e.to_string()),
            FramingError::BadLength { .. } => (result_code::INVALID_MESSAGE_LENGTH, e.to_string()),
            FramingError::Oversized { .. } => (result_code::UNABLE_TO_COMPLY, e.to_string()),
        };
        if c.pc.is_open() && request.is_request() && head.len() >= 12 {
            self.stats.requests_in += 1;
            self.stats.local_answers += 1;
            let g = &self.cfg.global;
            let ans = answer_for(
                &request,
                code,
                &g.origin_host,
                &g.origin_realm,
                Some(&text),
                None,
            );
            self.reply(conn, &ans);
        }
        let longest = self.timeouts.iter().copied().max().unwrap_or_default();
        let grace = longest.max(self.opts.default_answer_timeout) * 2;
        self.draining.insert(conn, now + grace);
        self.finish_draining(now);
    }

    /// Closes the draining connections whose relayed requests are all answered (or
    /// whose grace ran out).
    pub(super) fn finish_draining(&mut self, now: Duration) {
        if self.draining.is_empty() {
            return;
        }
        let done: Vec<ConnId> = self
            .draining
            .iter()
            .filter(|(c, until)| now >= **until || self.pipeline.in_flight_from(**c) == 0)
            .map(|(c, _)| *c)
            .collect();
        for conn in done {
            self.draining.remove(&conn);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.pc.abort(now);
            }
            self.drive(now, conn);
        }
    }

    pub(super) fn undecodable(
        &mut self,
        now: Duration,
        conn: ConnId,
        e: &crate::diameter::DecodeError,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.pc.handle_traffic(now);
        let open = c.pc.is_open();
        if let (Some(req), Some(pe), true) = (
            e.partial(),
            e.to_protocol_error(Dictionary::standard()),
            open,
        ) && req.is_request()
        {
            // RFC 6733 §7.1.5: a malformed request is answered with the error.
            self.stats.requests_in += 1;
            self.stats.local_answers += 1;
            let ans = pe.answer(
                req,
                &self.cfg.global.origin_host,
                &self.cfg.global.origin_realm,
            );
            self.reply(conn, &ans);
        } else {
            // Once per connection: a peer sending garbage must not flood the log.
            c.ignored += 1;
            if c.ignored == 1 {
                c.span.in_scope(|| {
                    warn!(
                        error = %e,
                        "undecodable message ignored \
                         (further ones on this connection are not logged)"
                    )
                });
            }
        }
    }

    pub(super) fn cer_received(&mut self, now: Duration, conn: ConnId, peer: PeerId) {
        if !self.cer_transport_ok(now, conn, peer) {
            return;
        }
        let slot = &self.slots[peer.0];
        let other_open = slot
            .conn
            .filter(|o| *o != conn)
            .is_some_and(|o| self.conns.get(&o).is_some_and(|c| c.pc.is_open()));
        let mut accept = true;
        if other_open {
            // RFC 6733 §5.6.4 R-Reject: the peer already has an open connection.
            accept = false;
        } else if let Some(i) = slot.initiator.filter(|i| *i != conn)
            && self
                .conns
                .get(&i)
                .is_some_and(|c| c.pc.state() == PeerState::WaitCea)
        {
            // RFC 6733 §5.6.4 election. Simplification: when we lose, the responder
            // connection is refused at once instead of held until our CEA arrives.
            let won = election_won(
                &self.cfg.global.origin_host,
                &self.cfg.peers[peer.0].origin_host,
            );
            if let Some(c) = self.conns.get_mut(&i) {
                c.pc.handle_election(now, won);
            }
            self.drive(now, i);
            accept = won;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.peer = Some(peer);
        c.span
            .record("origin_host", self.cfg.peers[peer.0].origin_host.as_str());
        if accept {
            c.pc.accept_cer(now);
        } else {
            c.pc.abort(now);
        }
    }

    // ----- the peer state machine's outputs -----

    pub(super) fn drive(&mut self, now: Duration, id: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            let mut out = Vec::new();
            while let Some(m) = c.pc.poll_transmit() {
                out.push(m);
            }
            let mut events = Vec::new();
            while let Some(e) = c.pc.poll_event() {
                events.push(e);
            }
            if out.is_empty() && events.is_empty() {
                break;
            }
            for m in &out {
                self.write(id, m);
            }
            for e in events {
                self.on_peer_event(now, id, e);
            }
        }
        self.refresh_peer(now, id);
    }

    pub(super) fn refresh_peer(&mut self, now: Duration, id: ConnId) {
        let Some(p) = self.conns.get(&id).and_then(|c| c.peer) else {
            return;
        };
        self.refresh_slot(now, p);
    }

    pub(super) fn refresh_slot(&mut self, now: Duration, p: PeerId) {
        let slot = &self.slots[p.0];
        let conn = slot
            .conn
            .or(slot.initiator)
            .and_then(|c| self.conns.get(&c));
        let good = slot
            .conn
            .and_then(|c| self.conns.get(&c))
            .is_some_and(|c| c.pc.in_service());
        let state = match conn {
            None => metrics::PeerState::Closed,
            Some(c) => match (c.pc.state(), c.pc.watchdog_state()) {
                (PeerState::Open, WatchdogState::Okay) => metrics::PeerState::Open,
                (PeerState::Open, WatchdogState::Suspect) => metrics::PeerState::Suspect,
                (PeerState::Open, WatchdogState::Reopen) => metrics::PeerState::Reopen,
                (PeerState::Open, _) => metrics::PeerState::Down,
                (PeerState::WaitCea, _) => metrics::PeerState::WaitCea,
                _ => metrics::PeerState::Closed,
            },
        };
        let was_good = self.slots[p.0].good;
        self.slots[p.0].good = good;
        self.peers.set_good(p, good);
        if self.slots[p.0].state != Some(state) {
            self.set_state_metric(p, state);
        }
        // One log line per change of service (docs/operations.md "Logs").
        if good != was_good {
            let (peer, state) = (&self.cfg.peers[p.0].name, state.name());
            if good {
                info!(%peer, state, "peer up");
            } else {
                warn!(%peer, state, "peer down");
            }
        }
        if good && !was_good {
            self.peer_in_service();
            self.check_ready(now);
        }
        if was_good && !good {
            // RFC 6733 §5.5.4 / RFC 3539 §3.4: out of service → fail pending requests over.
            self.peer_failed(now, p);
        }
    }

    pub(super) fn set_state_metric(&mut self, p: PeerId, state: metrics::PeerState) {
        self.slots[p.0].state = Some(state);
        self.metrics
            .set_peer_state(&self.cfg.peers[p.0].name, state);
    }

    pub(super) fn on_peer_event(&mut self, now: Duration, id: ConnId, e: PeerEvent) {
        let Some(c) = self.conns.get(&id) else { return };
        let peer = c.peer;
        let span = c.span.clone();
        let _g = span.enter();
        match e {
            PeerEvent::Opened { peer: known, .. } => {
                info!("capabilities exchanged: open");
                self.cer_wait_over(id);
                let p = known.id;
                if let Some(c) = self.conns.get_mut(&id) {
                    c.peer = Some(p);
                }
                let slot = &mut self.slots[p.0];
                slot.conn = Some(id);
                slot.ever_connected = true;
                slot.failures = 0;
            }
            PeerEvent::Rejected {
                result_code,
                error_message,
            } => {
                warn!(
                    result_code,
                    error_message = error_message.as_deref().unwrap_or(""),
                    "CER refused by the peer"
                );
            }
            PeerEvent::WatchdogSuspect => warn!("watchdog: SUSPECT"),
            PeerEvent::WatchdogOkay => info!("watchdog: OKAY"),
            PeerEvent::WatchdogDown => warn!("watchdog: DOWN"),
            PeerEvent::LoadReport(load) => {
                if let Some(p) = peer {
                    self.peers.set_load(p, Some(load));
                }
            }
            PeerEvent::Closed { reason, reconnect } => {
                info!(?reason, "connection closed");
                self.cer_wait_over(id);
                let Some(c) = self.conns.remove(&id) else {
                    return;
                };
                c.io.reader.abort();
                // Dropping `c.io.tx` lets the writer flush what is queued and close.
                drop(c.io);
                self.pipeline.downstream_closed(id);
                if let Some(p) = peer {
                    let slot = &mut self.slots[p.0];
                    if slot.conn == Some(id) {
                        slot.conn = None;
                    }
                    let was_initiator = slot.initiator == Some(id);
                    if was_initiator {
                        slot.initiator = None;
                    }
                    self.refresh_slot(now, p);
                    if was_initiator && self.slots[p.0].conn.is_none() {
                        let hold = match reconnect {
                            Reconnect::After(d) => Some(d),
                            Reconnect::PeerAskedNot { hold_off, .. } => Some(hold_off),
                            Reconnect::No => None,
                        };
                        self.schedule_reconnect(p.0, hold);
                    }
                }
            }
        }
    }

    // ----- writing -----

    /// Queues `m` on connection `id`; a full queue aborts the connection (module docs).
    pub(super) fn write(&mut self, id: ConnId, m: &Message) -> bool {
        let Some(c) = self.conns.get(&id) else {
            return false;
        };
        match m.try_encode() {
            Ok(b) => self.write_bytes(id, b),
            Err(e) => {
                c.span
                    .in_scope(|| warn!(error = %e, "cannot encode message"));
                false
            }
        }
    }

    /// Queues an encoded message on connection `id` (see [`Core::write`]).
    pub(super) fn write_bytes(&mut self, id: ConnId, bytes: Vec<u8>) -> bool {
        let Some(c) = self.conns.get(&id) else {
            return false;
        };
        match c.io.tx.try_send(bytes) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                if !self.to_abort.contains(&id) {
                    c.span.in_scope(|| {
                        warn!(
                            limit = self.opts.write_queue,
                            "write queue full: peer too slow, closing"
                        )
                    });
                    self.stats.write_queue_overflows += 1;
                    self.to_abort.push(id);
                }
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    pub(super) fn abort_overflowed(&mut self) {
        let now = self.now();
        for id in std::mem::take(&mut self.to_abort) {
            if let Some(c) = self.conns.get_mut(&id) {
                c.pc.abort(now);
            }
            self.drive(now, id);
        }
    }
}

/// The first retry of a server never open since the start.
pub(super) const FIRST_RETRY: Duration = Duration::from_millis(100);

/// How long after its `failures`-th consecutive failed dial a server is dialled again.
///
/// A server that has not been open since the agent started (the agent restarted, or the
/// server is still starting) is retried on a short schedule — 100 ms, doubling, while
/// that is shorter than Tc — so that a restart costs no more than the server's own start.
/// Then, and after a connection that had opened, RFC 6733 §2.1's Tc applies, doubled per
/// consecutive failure up to `max`.
pub(super) fn reconnect_delay(
    tc: Duration,
    max: Duration,
    failures: u32,
    ever_connected: bool,
) -> Duration {
    let mut k = failures;
    if !ever_connected {
        let short = FIRST_RETRY.saturating_mul(1u32 << k.min(20));
        if short < tc {
            return short;
        }
        // The short steps taken before reaching Tc.
        let steps = (0..20)
            .take_while(|i| FIRST_RETRY.saturating_mul(1u32 << i) < tc)
            .count() as u32;
        k -= steps.min(k);
    }
    tc.saturating_mul(1u32 << k.min(10)).min(max)
}

/// The addresses an SCTP server is dialled at: `connect`, then its other host
/// addresses on `connect`'s port (multihoming: the association may use every one).
fn sctp_remotes(
    p: &crate::config::Peer,
    connect: std::net::SocketAddr,
) -> Vec<std::net::SocketAddr> {
    let mut v = vec![connect];
    for net in &p.addresses {
        if net.prefix_len() == net.max_prefix_len() && net.addr() != connect.ip() {
            v.push(std::net::SocketAddr::new(net.addr(), connect.port()));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::reconnect_delay;
    use std::time::Duration;

    #[test]
    fn a_server_never_open_is_retried_on_a_short_schedule_then_after_tc() {
        let (tc, max) = (Duration::from_secs(30), Duration::from_secs(300));
        let ms = |f: u32, ever: bool| reconnect_delay(tc, max, f, ever).as_millis();
        let first: Vec<u128> = (0..13).map(|f| ms(f, false)).collect();
        assert_eq!(
            first,
            [
                100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 60_000, 120_000,
                240_000
            ]
        );
        assert_eq!(ms(40, false), 300_000);
        // A server that had been open: RFC 6733 §2.1's Tc from the first failure.
        let after: Vec<u128> = (0..5).map(|f| ms(f, true)).collect();
        assert_eq!(after, [30_000, 60_000, 120_000, 240_000, 300_000]);
    }
}
