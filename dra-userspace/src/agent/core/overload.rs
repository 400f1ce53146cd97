//! The agent's own overload control in the core ([`crate::overload`], docs/architecture.md
//! §13): the lateness of what the readers hand over, the controller's tick, the shed
//! plan written to the fast path and the readers, the level and its log lines; and the
//! cheap path for requests marked to be answered at once (over a `reject` limit or
//! shed), answered from their bytes ([`crate::diameter::raw`]).

use std::sync::Arc;

use dra_common::wire::flags;

use super::*;
use crate::diameter::raw;
use crate::overload::{Controller, INTERVAL, ShedCount, ShedPort, Tick};

/// Error-Message of a request shed by the overload control (answered 3004).
pub const SHED_MESSAGE: &str = "DRA overloaded: request shed (try another agent)";

/// The core's part of the overload control.
pub(super) struct Overload {
    /// None when `[overload] enabled = false`.
    controller: Option<Controller>,
    /// Where plans go and judged counts come from: the fast path's maps (when XDP is
    /// attached) and the readers' table.
    ports: Vec<Arc<dyn ShedPort>>,
    /// Requests routed so far (the work the controller measures).
    pub(super) routed: u64,
    next_tick: Duration,
    /// The last tick, for `dra status`.
    last: Tick,
    /// When the level last changed.
    level_since: Duration,
    /// Shed requests answered 3004 by the agent.
    pub(super) answered: u64,
    /// A port failed to take a plan (logged once per failure streak).
    failing: bool,
    /// Bytes every reader has read so far, and at the last tick.
    pub(super) reads: super::io::ReadCounters,
    last_bytes: u64,
}

impl Overload {
    pub(super) fn new(cfg: &crate::config::Overload, ports: Vec<Arc<dyn ShedPort>>) -> Overload {
        for p in &ports {
            if let Err(e) = p.set_priorities(&cfg.priorities, cfg.enabled) {
                warn!(error = %e, "overload: class priorities not written");
            }
        }
        Overload {
            controller: cfg.enabled.then(|| Controller::new(cfg.settings.clone())),
            ports,
            routed: 0,
            next_tick: INTERVAL,
            last: Tick::default(),
            level_since: Duration::ZERO,
            answered: 0,
            failing: false,
            reads: super::io::ReadCounters::default(),
            last_bytes: 0,
        }
    }

    /// A reload: new settings and priorities (the controller keeps its state; turned
    /// off, nothing is shed any more).
    pub(super) fn reconfigure(&mut self, cfg: &crate::config::Overload) {
        for p in &self.ports {
            if let Err(e) = p.set_priorities(&cfg.priorities, cfg.enabled) {
                warn!(error = %e, "overload: class priorities not written");
            }
        }
        match (&mut self.controller, cfg.enabled) {
            (Some(c), true) => c.set_settings(cfg.settings.clone()),
            (None, true) => self.controller = Some(Controller::new(cfg.settings.clone())),
            (_, false) => {
                self.controller = None;
                self.apply(&crate::overload::ShedPlan::NONE);
            }
        }
    }

    pub(super) fn poll_timeout(&self) -> Option<Duration> {
        self.controller.as_ref().map(|_| self.next_tick)
    }

    /// The level now (0 when off).
    pub(super) fn level(&self) -> u8 {
        self.controller.as_ref().map_or(0, Controller::level)
    }

    fn apply(&mut self, plan: &crate::overload::ShedPlan) {
        let mut failed = None;
        for p in &self.ports {
            if let Err(e) = p.apply(plan) {
                failed = Some(e);
            }
        }
        match failed {
            Some(e) if !self.failing => {
                warn!(error = %e, "overload: the shed plan could not be written");
                self.failing = true;
            }
            Some(_) => {}
            None => self.failing = false,
        }
    }

    /// Every port's shed counts, summed per class.
    pub(super) fn shed_counts(&self) -> Vec<ShedCount> {
        let mut out: Vec<ShedCount> = Vec::new();
        for p in &self.ports {
            for c in p.shed() {
                match out.iter_mut().find(|o| o.class == c.class) {
                    Some(o) => {
                        o.answered += c.answered;
                        o.discarded += c.discarded;
                    }
                    None => out.push(c),
                }
            }
        }
        out
    }
}

impl Core {
    /// A message the core takes, read at `read_at`: how late the agent is.
    pub(super) fn observe_lateness(&mut self, read_at: std::time::Instant) {
        if let Some(c) = &mut self.overload.controller {
            c.observe(read_at.elapsed());
        }
    }

    /// The controller's tick, when due: the plan to the fast path and the readers, the
    /// level to the metrics, the log and the DOIC reports.
    pub(super) fn overload_tick(&mut self, now: Duration) {
        if self.overload.controller.is_none() || now < self.overload.next_tick {
            return;
        }
        // What the kernel holds for the readers, in time at the rate they read: the
        // part of the agent's lateness the readers cannot see.
        let queued: u64 = self
            .conns
            .values()
            .map(|c| c.io.queued.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        let o = &mut self.overload;
        let dt = (now + INTERVAL).saturating_sub(o.next_tick);
        o.next_tick = now + INTERVAL;
        let bytes = o.reads.bytes.load(std::sync::atomic::Ordering::Relaxed);
        let rate = bytes.saturating_sub(o.last_bytes) as f64 / dt.as_secs_f64().max(1e-3);
        o.last_bytes = bytes;
        let behind = if queued == 0 {
            Duration::ZERO
        } else if rate > 0.0 {
            Duration::from_secs_f64((queued as f64 / rate).min(10.0))
        } else {
            dt
        };
        let mut judged = [0u64; crate::overload::PRIORITIES];
        for p in &o.ports {
            for (j, n) in judged.iter_mut().zip(p.judged()) {
                *j += n;
            }
        }
        let Some(c) = &mut o.controller else { return };
        c.observe_queued(behind);
        let t = c.tick(now, o.routed, judged);
        if let Some(plan) = &t.plan {
            let plan = plan.clone();
            o.apply(&plan);
            let admit = match t.admit {
                Some(a) if plan.is_active() && t.offered > 0.0 => (a / t.offered).min(1.0),
                _ => 1.0,
            };
            self.doic.set_overload(admit);
        }
        if let Some((old, new)) = t.level_change {
            self.overload.level_since = now;
            let shares = shares_text(&self.overload_plan());
            let (delay_ms, admit) = (t.delay.as_secs_f64() * 1e3, t.admit.map_or(0.0, f64::round));
            let offered = t.offered.round();
            if new > old {
                warn!(
                    overload_level = new,
                    from = old,
                    delay_ms,
                    admit_per_s = admit,
                    offered_per_s = offered,
                    shed = %shares,
                    "overload level {new}: {}",
                    level_words(new)
                );
            } else {
                info!(
                    overload_level = new,
                    from = old,
                    delay_ms,
                    offered_per_s = offered,
                    "overload level {new}: {}",
                    level_words(new)
                );
            }
        }
        self.metrics
            .set_overload(self.overload.level(), t.delay, t.admit.unwrap_or(0.0));
        self.overload.last = t;
    }

    fn overload_plan(&self) -> crate::overload::ShedPlan {
        self.overload
            .controller
            .as_ref()
            .map_or(crate::overload::ShedPlan::NONE, |c| c.plan().clone())
    }

    /// The `dra status` lines of the overload control.
    pub(super) fn overload_status(&self, now: Duration) -> String {
        let o = &self.overload;
        let Some(c) = &o.controller else {
            return "overload control: off".to_owned();
        };
        let t = &o.last;
        let level = c.level();
        let mut s = format!(
            "overload: level {level} ({}, {:.0} s), delay {:.1} ms (target {} ms), \
             offered {:.0}/s, routed {:.0}/s",
            level_words(level),
            now.saturating_sub(o.level_since).as_secs_f64(),
            t.delay.as_secs_f64() * 1e3,
            c.settings().target.as_millis(),
            t.offered,
            t.routed
        );
        if let Some(a) = t.admit {
            let _ = write!(
                s,
                ", admitting {a:.0}/s, shedding {}",
                shares_text(c.plan())
            );
        }
        let shed: Vec<String> = o
            .shed_counts()
            .into_iter()
            .filter(|c| c.answered + c.discarded > 0)
            .map(|c| format!("{} {}/{}", c.class, c.answered, c.discarded))
            .collect();
        if !shed.is_empty() {
            let _ = write!(
                s,
                "\noverload shed (answered 3004/discarded): {}",
                shed.join("  ")
            );
        }
        s
    }

    /// Publishes the shed counters (housekeeping).
    pub(super) fn overload_metrics(&self) {
        if self.overload.controller.is_some() {
            self.metrics.set_overload_shed(&self.overload.shed_counts());
        }
    }

    // ----- requests answered from their bytes -----

    /// A request the fast path (or the readers' limiter) marked to be answered at once:
    /// over a `reject` limit (its profile's Result-Code, 3002 by default) or shed by the
    /// overload control (3004 DIAMETER_TOO_BUSY, RFC 7683 §8: it may succeed on another
    /// path). Answered from its bytes, never decoded; a DOIC gateway's answer carries
    /// our OC-Supported-Features and peer report as any answer does.
    pub(super) fn on_marked(&mut self, now: Duration, conn: ConnId, frame: Vec<u8>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let (Some(from), true) = (c.peer, c.pc.is_open()) else {
            // Before the capabilities exchange the state machine decides what any
            // message means.
            let msg = crate::diameter::decode(&frame).map_err(Box::new);
            return self.on_message(now, conn, msg);
        };
        let bits = frame[4] & flags::MARKS;
        let class = raw::class(&frame);
        let profile = if bits & flags::RATE_LIMIT_MARK != 0 {
            // docs/architecture.md §3: over an ingress limit in the fast path.
            match self.marked.policy().select(from, class).0 {
                crate::relay::LimitAction::Reject(p) => {
                    Some((p.result_code, p.error_message.clone()))
                }
                crate::relay::LimitAction::Drop => None,
            }
        } else {
            Some((
                crate::diameter::result_code::TOO_BUSY,
                SHED_MESSAGE.to_owned(),
            ))
        };
        let answer = match &profile {
            Some((code, text)) => {
                let g = &self.cfg.global;
                match raw::answer(&frame, *code, &g.origin_host, &g.origin_realm, Some(text)) {
                    Some(a) => Some(a),
                    // Its AVPs do not frame: the decoder answers it (5xxx, RFC 6733 §7).
                    None => {
                        let msg = crate::diameter::decode(&frame).map_err(Box::new);
                        return self.on_message(now, conn, msg);
                    }
                }
            }
            None => None,
        };
        if let Some(c) = self.conns.get_mut(&conn) {
            // Any message from the peer is traffic (RFC 3539 §3.4.1).
            c.pc.handle_traffic(now);
        }
        self.stats.requests_in += 1;
        self.slots[from.0].requests_in += 1;
        series(&mut self.slots, &self.cfg, &self.metrics, from)
            .inc_request(&self.metrics, metrics::Direction::In);
        // Counted for DOIC, its announcement remembered, as for every request.
        let caps = raw::find(&frame, crate::diameter::avp_code::OC_SUPPORTED_FEATURES)
            .and_then(|a| a.decode())
            .and_then(|a| crate::doic::SupportedFeatures::from_avp(&a).ok());
        self.announces[from.0] = caps.is_some();
        self.doic.on_request_of(from.0, class, caps.clone());
        if bits & flags::RATE_LIMIT_MARK != 0 {
            self.marked.count(answer.is_some());
        }
        let Some(mut answer) = answer else {
            // An over-limit request of a `drop` profile: no answer on purpose.
            return;
        };
        self.stats.local_answers += 1;
        if bits & flags::RATE_LIMIT_MARK == 0 {
            self.overload.answered += 1;
        }
        self.doic_append(now, from, caps.as_ref(), &mut answer);
        let code = profile.map_or(0, |(c, _)| c);
        if self.write_bytes(conn, answer) {
            self.stats.answers_out += 1;
            self.metrics.inc_answer(&self.cfg.peers[from.0].name, code);
        }
    }

    /// Appends our DOIC AVPs to an answer built from bytes for a DOIC gateway whose
    /// request announced DOIC (`caps`), as [`Core::reply`] decorates decoded answers.
    fn doic_append(
        &mut self,
        now: Duration,
        from: PeerId,
        caps: Option<&crate::doic::SupportedFeatures>,
        answer: &mut Vec<u8>,
    ) {
        let Some(caps) = caps else { return };
        if !self.doic.enabled(from.0) {
            return;
        }
        let mut extra = Message {
            flags: 0,
            command_code: 0,
            application_id: 0,
            hop_by_hop: 0,
            end_to_end: 0,
            avps: Vec::new(),
        };
        if let Some(s) = self.doic.decorate(now, from.0, Some(caps), &mut extra) {
            let name = &self.cfg.peers[from.0].name;
            self.metrics
                .inc_doic_olr(name, "peer", s.algorithm.name(), s.end);
        }
        for a in &extra.avps {
            if a.encode_into(answer).is_err() {
                return;
            }
        }
        let len = answer.len() as u32;
        answer[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
    }
}

/// The shed shares of a plan, by priority: "12: 100%, 8: 35%".
fn shares_text(plan: &crate::overload::ShedPlan) -> String {
    let parts: Vec<String> = plan
        .shares
        .iter()
        .enumerate()
        .filter(|(_, s)| **s > 0.0)
        .map(|(p, s)| format!("priority {p} {:.0}%", s * 100.0))
        .collect();
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(", ")
    }
}

/// What a level means, for the log and `dra status`.
fn level_words(level: u8) -> &'static str {
    match level {
        0 => "nothing shed",
        1 => "shedding new sessions",
        2 => "shedding new sessions and updates",
        _ => "shedding down to terminations",
    }
}
