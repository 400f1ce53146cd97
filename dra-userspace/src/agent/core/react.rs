//! The DRA as a DOIC reacting node towards the servers with `doic = true`
//! (`crate::doic::Reactor`, docs/doic.md):
//!
//! - requests relayed to such a server carry OC-Supported-Features (RFC 7683 §5.1): the
//!   client's, when it announced DOIC, with the peer-report bit and our SourceID (RFC
//!   8581: the server's peer reports are for its adjacent peer, the DRA), else ours
//!   (loss and peer reports: `doic_algorithms` on a server is only `["loss"]`). A
//!   client that announced rate (RFC 8582) lets the server choose rate, for its peer
//!   reports to the agent too: the reactor abates by those as well;
//! - every OC-OLR in their answers goes to the reactor (sequence, expiry, SourceID);
//! - a request routed to such a server that a report selects for abatement (RFC 7683
//!   §5.2.2; §6 loss, RFC 8582 rate) is diverted to another server of its route in good
//!   state when it is not bound to that server (a new session's CCR-I, or a request
//!   without a binding), else answered by the agent (RFC 7683 §8): DIAMETER_TOO_BUSY
//!   (3004) when it may succeed on another path (a new session: through another DRA
//!   host, or later), DIAMETER_UNABLE_TO_COMPLY (5012) when it cannot (a request of a
//!   session bound to that server);
//! - answers relayed to a client that did not announce DOIC lose their DOIC AVPs (RFC
//!   7683 §5.1: only a node that announced DOIC gets them); a server's peer report and
//!   peer-report members never pass (they were for the DRA, RFC 8581).

use super::*;
use crate::diameter::avp_code as c;
use crate::diameter::dictionary::enums::oc_feature;
use crate::doic::{Asked, Olr, Received, ReportType, SupportedFeatures, Verdict};
use dra_common::wire::cc_request_type as crt;

/// What becomes of a request routed to a server.
pub(super) enum Abatement {
    /// Send it there (no report selected it).
    Send(PeerId),
    /// Selected by a report; send it to this other server instead.
    Diverted(PeerId),
    /// Selected by a report and no other server: answer with this Result-Code (RFC 7683
    /// §8: 3004 when another path could serve it, 5012 when none can).
    Reject(u32),
}

impl Core {
    /// Whether `p` is a server with `doic = true`.
    pub(super) fn doic_server(&self, p: PeerId) -> bool {
        let c = &self.cfg.peers[p.0];
        c.role == CfgRole::Server && c.doic.is_some()
    }

    /// RFC 7683 §5.2.2 (a request matching an active overload control state gets the
    /// algorithm's overload treatment), §6 (loss): whether `req`, routed to `to`, goes.
    /// `bound`: it belongs to a session bound to `to` (never diverted).
    pub(super) fn doic_admit(
        &mut self,
        now: Duration,
        req: &Message,
        to: PeerId,
        bound: bool,
    ) -> Abatement {
        if !self.doic_server(to) {
            return Abatement::Send(to);
        }
        let client_reacts = req.find(c::OC_SUPPORTED_FEATURES).is_some();
        let host = self.cfg.peers[to.0].origin_host.clone();
        if self.reactor.admit(now, req, &host, &host, !client_reacts) == Verdict::Send {
            return Abatement::Send(to);
        }
        let t = req.cc_request_type();
        let session_bound =
            bound || t == Some(u32::from(crt::UPDATE)) || t == Some(u32::from(crt::TERMINATION));
        let server = self.cfg.peers[to.0].name.clone();
        if !session_bound && let Some(alt) = self.divert_target(now, req, to) {
            // Another server in good state: not abating this request by its own reports.
            let ok = !self.doic_server(alt) || {
                let h = self.cfg.peers[alt.0].origin_host.clone();
                self.reactor.admit(now, req, &h, &h, !client_reacts) == Verdict::Send
            };
            if ok {
                self.metrics.inc_doic_abated(&server, "diverted");
                return Abatement::Diverted(alt);
            }
        }
        self.metrics.inc_doic_abated(&server, "rejected");
        Abatement::Reject(if session_bound {
            crate::diameter::result_code::UNABLE_TO_COMPLY
        } else {
            crate::diameter::result_code::TOO_BUSY
        })
    }

    /// The server a diverted request goes to: the one the route's selection would pick
    /// next among the servers in good state other than `exclude`, without moving the
    /// selection (a copy picks): the servers' shares stay those of routing, so the
    /// reporting server gets exactly what routing gives it minus what its report sheds.
    fn divert_target(&mut self, now: Duration, req: &Message, exclude: PeerId) -> Option<PeerId> {
        let strategy = self.strategy_for(req);
        let mut selector = self
            .routers
            .get_mut(&strategy)
            .expect("router per strategy")
            .selector_mut()
            .clone();
        selector.select_excluding(&self.scratch, &self.peers, now, &[exclude])
    }

    /// RFC 7683 §5.1, RFC 8581: the OC-Supported-Features of a request to `to`.
    pub(super) fn doic_request(&self, to: PeerId, req: &mut Message) {
        if !self.doic_server(to) {
            return;
        }
        let own = self.cfg.global.origin_host.clone();
        let pos = req
            .avps
            .iter()
            .position(|a| a.is(c::OC_SUPPORTED_FEATURES, None));
        let client = pos.and_then(|i| SupportedFeatures::from_avp(&req.avps[i]).ok());
        let ours = SupportedFeatures {
            feature_vector: Some(
                client
                    .as_ref()
                    .and_then(|f| f.feature_vector)
                    .unwrap_or(oc_feature::LOSS)
                    | oc_feature::PEER_REPORT,
            ),
            source_id: Some(own),
            peer_algo: None,
        };
        match pos {
            Some(i) => req.avps[i] = ours.to_avp(),
            None => req.push(ours.to_avp()),
        }
    }

    /// The OC-OLRs of an answer from server `from` (before it is relayed).
    pub(super) fn doic_server_answer(&mut self, now: Duration, from: PeerId, ans: &Message) {
        if !self.doic_server(from) || ans.find(c::OC_OLR).is_none() {
            return;
        }
        let types: Vec<&'static str> = Olr::all_of(ans)
            .map(|o| o.map_or("unknown", |o| o.report_type.name()))
            .collect();
        let host = self.cfg.peers[from.0].origin_host.clone();
        let got = self.reactor.on_answer(now, &host, ans);
        let name = &self.cfg.peers[from.0].name;
        for (r, t) in got.iter().zip(types) {
            let result = match r {
                Received::Applied(_) => "applied",
                Received::Ended(_) => "ended",
                Received::Stale(_) => "stale",
                Received::Duplicate(_) => "duplicate",
                Received::SourceMismatch => "source_mismatch",
                Received::Unusable => "unusable",
            };
            if !matches!(r, Received::Applied(_)) {
                debug!(server = %name, result, "DOIC report from server");
            }
            self.metrics.inc_doic_olr_received(name, t, result);
        }
        self.metrics
            .set_doic_server_reduction(name, self.reactor.reduction_towards(now, &host));
    }

    /// The per-server reduction gauges (reports expire with time).
    pub(super) fn doic_server_tick(&mut self, now: Duration) {
        for p in &self.cfg.peers {
            if p.role == CfgRole::Server && p.doic.is_some() {
                let r = self.reactor.reduction_towards(now, &p.origin_host);
                self.metrics.set_doic_server_reduction(&p.name, r);
            }
        }
    }

    /// Whether `ans` carries any DOIC AVP (only then is it copied to be stripped).
    pub(super) fn doic_present(ans: &Message) -> bool {
        ans.find(c::OC_SUPPORTED_FEATURES).is_some() || ans.find(c::OC_OLR).is_some()
    }

    /// RFC 7683 §5.1, RFC 8581: DOIC AVPs a relayed answer may not carry to a client
    /// our reporting node did not decorate. `announced`: the client's latest request
    /// carried OC-Supported-Features.
    pub(super) fn doic_strip(ans: &mut Message, announced: bool) {
        if !Core::doic_present(ans) {
            return;
        }
        if !announced {
            ans.avps
                .retain(|a| !a.is(c::OC_SUPPORTED_FEATURES, None) && !a.is(c::OC_OLR, None));
            return;
        }
        ans.avps.retain(|a| {
            !(a.is(c::OC_OLR, None)
                && Olr::from_avp(a).is_ok_and(|o| o.report_type == ReportType::Peer))
        });
        for a in ans.avps.iter_mut() {
            if a.is(c::OC_SUPPORTED_FEATURES, None)
                && let Ok(mut f) = SupportedFeatures::from_avp(a)
            {
                f.feature_vector = f.feature_vector.map(|v| v & !oc_feature::PEER_REPORT);
                f.source_id = None;
                f.peer_algo = None;
                *a = f.to_avp();
            }
        }
    }

    /// `dra status` lines: the servers' reports in force.
    pub(super) fn doic_status(&self, now: Duration, o: &mut String) {
        for (k, asked, seq, left) in self.reactor.active(now) {
            let app = if k.report_type == ReportType::Peer {
                String::new()
            } else {
                format!(" app {}", k.application_id)
            };
            let asked = match asked {
                Asked::Loss(r) => format!("loss {r}%"),
                Asked::Rate(r) => format!("rate {r}/s"),
            };
            let _ = writeln!(
                o,
                "doic from {}: {} report {asked}{app}  seq {seq}  {}s left",
                k.name,
                k.report_type.name(),
                left.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diameter::Avp;

    fn relayed() -> Message {
        let host = Olr {
            sequence: 1,
            report_type: ReportType::Host,
            reduction: Some(50),
            validity: Some(10),
            source_id: None,
            max_rate: None,
        };
        let peer = Olr {
            report_type: ReportType::Peer,
            source_id: Some("pcrf1.example".into()),
            ..host.clone()
        };
        let features = SupportedFeatures {
            feature_vector: Some(oc_feature::LOSS | oc_feature::PEER_REPORT),
            source_id: Some("pcrf1.example".into()),
            peer_algo: Some(oc_feature::LOSS),
        };
        Message::answer(272, 16_777_238, 1, 1)
            .with(Avp::utf8(c::ORIGIN_HOST, "pcrf1.example"))
            .with(features.to_avp())
            .with(host.to_avp())
            .with(peer.to_avp())
    }

    #[test]
    fn nothing_doic_to_a_client_that_did_not_announce_rfc7683_5_1() {
        let mut a = relayed();
        Core::doic_strip(&mut a, false);
        assert!(!Core::doic_present(&a));
        assert!(a.find(c::ORIGIN_HOST).is_some());
    }

    #[test]
    fn host_reports_relayed_peer_reports_kept_back_rfc8581() {
        let mut a = relayed();
        Core::doic_strip(&mut a, true);
        let olrs: Vec<Olr> = Olr::all_of(&a).map(|o| o.unwrap()).collect();
        assert_eq!(olrs.len(), 1);
        assert_eq!(olrs[0].report_type, ReportType::Host);
        let f = SupportedFeatures::of(&a).unwrap().unwrap();
        assert_eq!(f.feature_vector, Some(oc_feature::LOSS));
        assert_eq!((f.source_id, f.peer_algo), (None, None));
    }
}
