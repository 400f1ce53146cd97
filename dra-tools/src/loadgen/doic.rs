//! DOIC roles of `dra-loadgen` (RFC 7683, 8581, 8582; docs/loadgen.md), sans-IO (time is
//! an argument):
//!
//! - [`ServerReporter`]: a server (PCRF/OCS) as a reporting node. While the requests it
//!   gets in a one-second window exceed its configured capacity, answers to requests
//!   that announced DOIC carry an OC-OLR (host report, loss) asking for the configured
//!   reduction, or, without one, the share over capacity; once calm for a window, the
//!   end (validity 0, new sequence number, RFC 7683 §5.2) is sent for one validity
//!   period. A report can also be forced ([`ServerReporter::force`], for tests).
//! - [`GatewayReactor`]: a gateway as a reacting node. It announces loss and rate (RFC
//!   7683 §5.1, RFC 8582), keeps the latest report of each key (a higher sequence number
//!   replaces it, §5.2; validity 0 ends it; expiry), and decides for each request it would
//!   offer whether it goes: loss sheds exactly the reduction (deterministic debt), rate
//!   admits at most the maximum rate (token bucket). Only new sessions (CCR-I) are shed:
//!   the CCR-U/T of sessions the gateway has always go (they count against the rate),
//!   as a gateway that keeps its users' sessions would do. It counts what it sheds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use dra::diameter::Message;
use dra::diameter::dictionary::enums::oc_feature;
use dra::doic::{Olr, ReportType, SupportedFeatures};

/// A fixed report a test forces on the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedReport {
    /// Host, realm or peer (a peer report carries the server's SourceID).
    pub report_type: ReportType,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// OC-Reduction-Percentage.
    pub reduction: u32,
    /// OC-Validity-Duration (0: the end of the overload).
    pub validity: u32,
}

#[derive(Debug, Default)]
struct ServerState {
    forced: Option<ForcedReport>,
    window_start: Duration,
    window_count: u64,
    /// The report in force (reduction) and its number.
    current: Option<u32>,
    sequence: u64,
    /// Until when the end report is repeated.
    ending_until: Option<Duration>,
    calm_windows: u32,
    sent: u64,
}

/// A server's DOIC reporting node (see the module docs). Shared by its connections.
#[derive(Debug)]
pub struct ServerReporter {
    origin_host: String,
    /// Requests per second the server takes before it reports overload.
    capacity: Option<f64>,
    /// Reduction asked for while over capacity; `None`: the share over capacity.
    reduction: Option<u32>,
    validity: u32,
    state: Mutex<ServerState>,
    epoch: std::time::Instant,
}

impl ServerReporter {
    /// A reporting node for `origin_host`. `capacity`: requests/s before reporting
    /// (`None`: only forced reports); `reduction`: what to ask for (`None`: the share
    /// over capacity, rounded up, at most 99); `validity`: OC-Validity-Duration (s).
    pub fn new(
        origin_host: &str,
        capacity: Option<f64>,
        reduction: Option<u32>,
        validity: u32,
    ) -> ServerReporter {
        ServerReporter {
            origin_host: origin_host.to_owned(),
            capacity,
            reduction: reduction.map(|r| r.min(100)),
            validity: validity.clamp(1, 86_400),
            state: Mutex::new(ServerState {
                sequence: 1,
                ..Default::default()
            }),
            epoch: std::time::Instant::now(),
        }
    }

    /// Forces a report into every answer to a DOIC request (`None`: back to capacity).
    pub fn force(&self, report: Option<ForcedReport>) {
        self.state.lock().expect("lock").forced = report;
    }

    /// Answers that carried an OC-OLR.
    pub fn sent(&self) -> u64 {
        self.state.lock().expect("lock").sent
    }

    /// The reduction the capacity rule reports now (0: none).
    pub fn current(&self) -> u32 {
        self.state.lock().expect("lock").current.unwrap_or(0)
    }

    /// [`ServerReporter::decorate`] at the current time.
    pub fn decorate_now(&self, req: &Message, ans: &mut Message) {
        self.decorate(self.epoch.elapsed(), req, ans);
    }

    /// Counts `req` (at `now`) and adds DOIC to its answer `ans` when `req` announced
    /// DOIC (RFC 7683 §5.1: never to a node that did not).
    pub fn decorate(&self, now: Duration, req: &Message, ans: &mut Message) {
        let mut s = self.state.lock().expect("lock");
        self.count(&mut s, now);
        let Some(Ok(caps)) = SupportedFeatures::of(req) else {
            return;
        };
        let peer = caps.feature_vector.unwrap_or(0) & oc_feature::PEER_REPORT != 0;
        // Loss is the one algorithm we report with (every node supports it, §6).
        ans.push(
            SupportedFeatures {
                feature_vector: Some(
                    oc_feature::LOSS | if peer { oc_feature::PEER_REPORT } else { 0 },
                ),
                source_id: peer.then(|| self.origin_host.clone()),
                peer_algo: peer.then_some(oc_feature::LOSS),
            }
            .to_avp(),
        );
        let olr = if let Some(f) = &s.forced {
            Some(Olr {
                sequence: f.sequence,
                report_type: f.report_type,
                reduction: Some(f.reduction),
                validity: Some(f.validity),
                source_id: (f.report_type == ReportType::Peer).then(|| self.origin_host.clone()),
                max_rate: None,
            })
        } else if let Some(r) = s.current {
            Some(self.host_olr(s.sequence, r, self.validity))
        } else if s.ending_until.is_some_and(|t| now < t) {
            Some(self.host_olr(s.sequence, 0, 0))
        } else {
            None
        };
        if let Some(o) = olr {
            ans.push(o.to_avp());
            s.sent += 1;
        }
    }

    fn host_olr(&self, sequence: u64, reduction: u32, validity: u32) -> Olr {
        Olr {
            sequence,
            report_type: ReportType::Host,
            reduction: Some(reduction),
            validity: Some(validity),
            source_id: None,
            max_rate: None,
        }
    }

    /// Counts one request; ends the window after a second.
    fn count(&self, s: &mut ServerState, now: Duration) {
        let Some(capacity) = self.capacity else {
            return;
        };
        if now >= s.window_start + Duration::from_secs(1) {
            let elapsed = (now - s.window_start).as_secs_f64().max(1.0);
            let offered_seen = s.window_count as f64 / elapsed;
            // What arrives is what the reacting nodes let through: the offered rate is
            // that divided by the share they let through.
            let pass = 1.0 - f64::from(s.current.unwrap_or(0)) / 100.0;
            let offered = offered_seen / pass.max(0.01);
            let want = if offered > capacity {
                Some(self.reduction.unwrap_or_else(|| {
                    (((offered - capacity) / offered * 100.0).ceil() as u32).min(99)
                }))
            } else {
                None
            };
            match (s.current, want) {
                (Some(a), Some(b)) if a == b => s.calm_windows = 0,
                (_, Some(b)) => {
                    s.current = Some(b);
                    s.sequence += 1;
                    s.calm_windows = 0;
                    s.ending_until = None;
                }
                (Some(_), None) => {
                    s.calm_windows += 1;
                    if s.calm_windows >= 2 {
                        // RFC 7683 §5.2: the end, with a new number, for one validity.
                        s.current = None;
                        s.sequence += 1;
                        s.ending_until = Some(now + Duration::from_secs(self.validity.into()));
                    }
                }
                (None, None) => {}
            }
            s.window_start = now;
            s.window_count = 0;
        }
        s.window_count += 1;
    }
}

/// The key of a report a gateway keeps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    report_type: ReportType,
    name: String,
}

#[derive(Clone, Debug)]
struct Held {
    sequence: u64,
    expires: Duration,
    loss: Option<u32>,
    rate: Option<u32>,
}

/// What a gateway's reacting node shed and received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatewayDoicStats {
    /// Requests shed by loss reports.
    pub shed_loss: u64,
    /// Requests shed by rate reports.
    pub shed_rate: u64,
    /// Reports applied.
    pub applied: u64,
    /// Reports ignored (stale or duplicate number).
    pub stale: u64,
    /// Host reports of a server behind an agent (not applied: the agent applies them).
    pub not_ours: u64,
}

/// A gateway's DOIC reacting node (see the module docs).
#[derive(Debug)]
pub struct GatewayReactor {
    origin_host: String,
    held: HashMap<Key, Held>,
    debt: u32,
    tokens: f64,
    last: Duration,
    stats: GatewayDoicStats,
}

impl GatewayReactor {
    /// A reacting node for the gateway `origin_host`.
    pub fn new(origin_host: &str) -> GatewayReactor {
        GatewayReactor {
            origin_host: origin_host.to_owned(),
            held: HashMap::new(),
            debt: 0,
            tokens: 1.0,
            last: Duration::ZERO,
            stats: GatewayDoicStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> GatewayDoicStats {
        self.stats
    }

    /// OC-Supported-Features for every request (RFC 7683 §5.1): loss, rate (RFC 8582)
    /// and peer reports (RFC 8581, SourceID = us).
    pub fn announce(&self) -> SupportedFeatures {
        SupportedFeatures {
            feature_vector: Some(oc_feature::LOSS | oc_feature::RATE | oc_feature::PEER_REPORT),
            source_id: Some(self.origin_host.clone()),
            peer_algo: None,
        }
    }

    /// The OC-OLRs of an answer (RFC 7683 §5.2): a higher number replaces the kept
    /// report, validity 0 ends it; a peer report must name the answer's sender
    /// (`from`, RFC 8581). A host report applies to requests that name the host in
    /// Destination-Host (RFC 7683 §4.3): this gateway's CCR-I name none, so a host
    /// report counts only when the host is its adjacent peer (`from`: it sends there);
    /// one relayed by an agent is the agent's to apply (the agent chose the host) and is
    /// counted in `not_ours`.
    pub fn on_answer(&mut self, now: Duration, from: &str, ans: &Message) {
        for o in Olr::all_of(ans).flatten() {
            if o.report_type == ReportType::Host
                && !ans
                    .origin_host()
                    .is_some_and(|h| h.eq_ignore_ascii_case(from))
            {
                self.stats.not_ours += 1;
                continue;
            }
            let name = match o.report_type {
                ReportType::Host => ans.origin_host(),
                ReportType::Realm => ans.origin_realm(),
                ReportType::Peer => match o.source_id.as_deref() {
                    Some(s) if s.eq_ignore_ascii_case(from) => Some(s),
                    _ => None,
                },
            };
            let Some(name) = name else { continue };
            let key = Key {
                report_type: o.report_type,
                name: name.to_ascii_lowercase(),
            };
            if let Some(h) = self.held.get(&key).filter(|h| h.expires > now)
                && o.sequence <= h.sequence
            {
                self.stats.stale += 1;
                continue;
            }
            if o.validity == Some(0) {
                self.held.remove(&key);
                continue;
            }
            self.stats.applied += 1;
            self.held.insert(
                key,
                Held {
                    sequence: o.sequence,
                    expires: now + Duration::from_secs(o.validity_secs().into()),
                    loss: o
                        .max_rate
                        .is_none()
                        .then_some(o.reduction.unwrap_or(0).min(100)),
                    rate: o.max_rate,
                },
            );
        }
    }

    /// The strongest loss and the lowest rate in force.
    fn in_force(&mut self, now: Duration) -> (u32, Option<u32>) {
        self.held.retain(|_, h| h.expires > now);
        let loss = self.held.values().filter_map(|h| h.loss).max().unwrap_or(0);
        let rate = self.held.values().filter_map(|h| h.rate).min();
        (loss, rate)
    }

    /// Whether a request the gateway would offer at `now` goes (RFC 7683 §6 loss:
    /// exactly the reduction is shed; RFC 8582 rate: at most the maximum rate).
    /// `initial`: it starts a session (CCR-I); others are never shed.
    pub fn admit(&mut self, now: Duration, initial: bool) -> bool {
        let (loss, rate) = self.in_force(now);
        if let Some(r) = rate {
            let dt = now.saturating_sub(self.last).as_secs_f64();
            self.last = now;
            let cap = f64::from(r).max(1.0);
            self.tokens = (self.tokens + dt * f64::from(r)).min(cap);
            if initial && self.tokens < 1.0 {
                self.stats.shed_rate += 1;
                return false;
            }
            self.tokens = (self.tokens - 1.0).max(-cap);
        } else {
            self.last = now;
        }
        if !initial {
            return true;
        }
        if loss > 0 {
            self.debt += loss;
            if self.debt >= 100 {
                self.debt -= 100;
                self.stats.shed_loss += 1;
                return false;
            }
        } else {
            self.debt = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dra::diameter::{Avp, avp_code as c};

    const GW: &str = "pgw1.example";
    const SRV: &str = "pcrf1.example";

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn answer_with(olrs: &[Olr]) -> Message {
        let mut m = Message::answer(272, 16_777_238, 1, 1)
            .with(Avp::utf8(c::ORIGIN_HOST, SRV))
            .with(Avp::utf8(c::ORIGIN_REALM, "example"));
        for o in olrs {
            m.push(o.to_avp());
        }
        m
    }

    fn loss(seq: u64, r: u32, validity: u32) -> Olr {
        Olr {
            sequence: seq,
            report_type: ReportType::Host,
            reduction: Some(r),
            validity: Some(validity),
            source_id: None,
            max_rate: None,
        }
    }

    fn request(announce: bool) -> Message {
        let mut m = Message::request(272, 16_777_238, 1, 1).with(Avp::utf8(c::ORIGIN_HOST, GW));
        if announce {
            m.push(GatewayReactor::new(GW).announce().to_avp());
        }
        m
    }

    #[test]
    fn gateway_loss_sheds_exactly_the_reduction_rfc7683_6() {
        let mut g = GatewayReactor::new(GW);
        g.on_answer(secs(0.0), SRV, &answer_with(&[loss(1, 30, 10)]));
        let sent = (0..100).filter(|_| g.admit(secs(1.0), true)).count();
        assert_eq!(sent, 70);
        assert_eq!(g.stats().shed_loss, 30);
        // A session's CCR-U/T always go.
        assert_eq!((0..10).filter(|_| g.admit(secs(1.0), false)).count(), 10);
        // Expiry restores everything (RFC 7683 §7.5).
        let sent = (0..100).filter(|_| g.admit(secs(10.0), true)).count();
        assert_eq!(sent, 100);
    }

    #[test]
    fn gateway_sequence_and_end_rfc7683_5_2() {
        let mut g = GatewayReactor::new(GW);
        g.on_answer(secs(0.0), SRV, &answer_with(&[loss(5, 50, 30)]));
        // Stale and duplicate: ignored and counted.
        g.on_answer(secs(0.1), SRV, &answer_with(&[loss(4, 100, 30)]));
        g.on_answer(secs(0.1), SRV, &answer_with(&[loss(5, 100, 30)]));
        assert_eq!(g.stats().stale, 2);
        assert_eq!((0..10).filter(|_| g.admit(secs(1.0), true)).count(), 5);
        // Validity 0 with a newer number ends it.
        g.on_answer(secs(1.0), SRV, &answer_with(&[loss(6, 0, 0)]));
        assert_eq!((0..10).filter(|_| g.admit(secs(1.0), true)).count(), 10);
    }

    #[test]
    fn gateway_rate_admits_the_maximum_rate_rfc8582() {
        let mut g = GatewayReactor::new(GW);
        let mut o = loss(1, 0, 30);
        o.reduction = None;
        o.max_rate = Some(10);
        g.on_answer(secs(0.0), SRV, &answer_with(&[o]));
        // 100/s offered for 5 s: about 10/s go.
        let sent = (0..500)
            .filter(|k| g.admit(secs(f64::from(*k) / 100.0), true))
            .count();
        assert!((49..=52).contains(&sent), "{sent}");
        assert_eq!(g.stats().shed_rate, 500 - sent as u64);
    }

    /// RFC 7683 §4.3: a host report of a server behind an agent applies to requests
    /// naming that host; this gateway's CCR-I name none, so it leaves it to the agent.
    #[test]
    fn gateway_leaves_a_relayed_host_report_to_the_agent_rfc7683_4_3() {
        let mut g = GatewayReactor::new(GW);
        g.on_answer(secs(0.0), "dra.example", &answer_with(&[loss(1, 100, 30)]));
        assert!(g.admit(secs(0.5), true), "not applied when relayed");
        assert_eq!((g.stats().not_ours, g.stats().applied), (1, 0));
        g.on_answer(secs(0.0), SRV, &answer_with(&[loss(1, 100, 30)]));
        assert!(
            !g.admit(secs(0.5), true),
            "applied when the server is the peer"
        );
    }

    #[test]
    fn gateway_ignores_foreign_peer_reports_rfc8581() {
        let mut g = GatewayReactor::new(GW);
        let mut o = loss(1, 100, 30);
        o.report_type = ReportType::Peer;
        o.source_id = Some("other.example".into());
        g.on_answer(secs(0.0), SRV, &answer_with(&[o.clone()]));
        assert!(g.admit(secs(0.5), true));
        o.source_id = Some(SRV.into());
        g.on_answer(secs(0.0), SRV, &answer_with(&[o]));
        assert!(!g.admit(secs(0.5), true));
    }

    #[test]
    fn server_reports_only_to_doic_requests_rfc7683_5_1() {
        let s = ServerReporter::new(SRV, Some(10.0), Some(40), 5);
        let mut plain = answer_with(&[]);
        s.decorate(secs(0.0), &request(false), &mut plain);
        assert!(plain.find(c::OC_SUPPORTED_FEATURES).is_none());
        assert!(plain.find(c::OC_OLR).is_none());
        let mut a = answer_with(&[]);
        s.decorate(secs(0.0), &request(true), &mut a);
        let f = SupportedFeatures::of(&a).unwrap().unwrap();
        assert_eq!(f.source_id.as_deref(), Some(SRV));
        assert!(a.find(c::OC_OLR).is_none(), "not overloaded yet");
    }

    #[test]
    fn server_reports_over_capacity_then_ends_rfc7683_5_2() {
        let s = ServerReporter::new(SRV, Some(10.0), Some(40), 5);
        let last = |s: &ServerReporter, t: f64| {
            let mut a = answer_with(&[]);
            s.decorate(secs(t), &request(true), &mut a);
            Olr::all_of(&a).next().map(|o| o.unwrap())
        };
        // 20/s for 2 s: over capacity → 40 % report.
        for k in 0..40 {
            last(&s, f64::from(k) / 20.0);
        }
        let o = last(&s, 2.0).expect("report");
        assert_eq!((o.reduction, o.validity), (Some(40), Some(5)));
        let seq = o.sequence;
        // 2/s: calm for two windows → the end with a newer number.
        let mut end = None;
        for k in 0..10 {
            end = last(&s, 2.5 + f64::from(k) / 2.0);
        }
        let e = end.expect("end report");
        assert_eq!(e.validity, Some(0));
        assert!(e.sequence > seq);
        // After one validity period, nothing.
        assert!(last(&s, 20.0).is_none());
        // A forced report wins.
        s.force(Some(ForcedReport {
            report_type: ReportType::Host,
            sequence: 99,
            reduction: 50,
            validity: 3,
        }));
        assert_eq!(last(&s, 21.0).unwrap().sequence, 99);
    }
}
