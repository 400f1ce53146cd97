//! The DRA as a DOIC reacting node towards its servers (RFC 7683 §5.2.2, §6 loss; RFC
//! 8582 rate; RFC 8581 peer reports), sans-IO: the state and the abatement decision,
//! tested on fake time. The agent (`agent::core::forward`) shows it every answer from a server with
//! `doic = true` and asks it about every request routed to one (docs/doic.md).
//!
//! - [`Reactor::on_answer`]: every OC-OLR in an answer from a server is checked and
//!   stored as overload control state (OCS), keyed as RFC 7683 keys it: a host report by
//!   (application, reporting host = the answer's Origin-Host), a realm report by
//!   (application, realm = the answer's Origin-Realm), a peer report by the reporting
//!   peer (RFC 8581). A report whose sequence number is not higher than the stored one
//!   is ignored (stale or duplicate, counted); validity 0 ends it at once; otherwise it
//!   expires after its validity (30 s when absent). A peer report whose SourceID is not
//!   the peer that sent the answer is ignored and counted (RFC 8581: it was relayed from
//!   further away). A report with OC-Maximum-Rate is a rate report (RFC 8582); any other
//!   is a loss report, which needs OC-Reduction-Percentage ≤ 100 (RFC 7683 §7.7):
//!   without it, or above 100, it is ignored and counted.
//! - [`Reactor::admit`]: whether a request about to be sent to a server goes, or is
//!   abated by a report that applies to it: host reports to requests for that host
//!   (Destination-Host, or the server routing chose), realm reports to requests for that
//!   realm, peer reports to every request sent to that peer; each for its application.
//!   Loss is exact and deterministic rather than random: each request adds the
//!   reduction to a per-report debt, and a request pays 100 of it by being shed. CCR-I
//!   pay first; CCR-U and other requests only once the debt is over 200 (not enough
//!   CCR-I to pay it); CCR-T only over 300 — shed last, as RFC 7683 Appendix C.4 suggests
//!   for session-ending requests. The debt is capped at 400.
//!   Rate (RFC 8582; its section numbers are not cited here: only the first page of its
//!   text was available to check against) keeps the requests sent under the report at
//!   most its OC-Maximum-Rate per second with a GCRA (`dra_common::gcra`, the project's
//!   one token bucket) per report, the same priorities as loss: a request goes if it
//!   conforms with a tolerance of [`RATE_TOLERANCE_MS`] for its class — CCR-I the
//!   smallest, CCR-T the largest — so when the rate is short CCR-I are abated first
//!   and CCR-T last, while every request sent moves the bucket (the long-run rate of
//!   all classes together is the maximum rate). When several reports apply, the
//!   strongest loss report decides first, then every rate report must admit the
//!   request.

use std::collections::HashMap;
use std::time::Duration;

use dra_common::gcra;
use dra_common::wire::cc_request_type as crt;

use super::avps::{Olr, ReportType};
use crate::diameter::Message;

/// Largest debt a report keeps (see the module docs).
const MAX_DEBT: u32 = 400;
/// Rate reports: the GCRA tolerance (ms of the bucket ahead of now) a request may find
/// and still go: CCR-I, other requests (CCR-U, non-CC), CCR-T.
pub const RATE_TOLERANCE_MS: [u64; 3] = [100, 200, 300];

/// The key of one piece of overload control state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OcsKey {
    /// Host, realm or peer.
    pub report_type: ReportType,
    /// The reporting host, realm or peer (lower case).
    pub name: String,
    /// The application the report is for (0 for peer reports: every application).
    pub application_id: u32,
}

#[derive(Clone, Debug)]
struct Entry {
    sequence: u64,
    expires: Duration,
    abatement: Abatement,
}

/// What a report asks for and the state its algorithm keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Abatement {
    /// RFC 7683 §6: shed this percentage (debt: see the module docs).
    Loss { reduction: u32, debt: u32 },
    /// RFC 8582: at most `max_rate` requests per second (GCRA state `tat_ns`).
    Rate { max_rate: u32, tat_ns: u64 },
}

/// A report in force, as `dra status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Loss: the reduction, percent.
    Loss(u32),
    /// Rate: the maximum rate, requests per second.
    Rate(u32),
}

impl Entry {
    fn reduction(&self) -> Option<u32> {
        match self.abatement {
            Abatement::Loss { reduction, .. } => Some(reduction),
            Abatement::Rate { .. } => None,
        }
    }
}

fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// What became of one received OC-OLR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// Stored (new or newer report).
    Applied(OcsKey),
    /// Validity 0: the overload is over.
    Ended(OcsKey),
    /// Sequence number lower than the stored one: ignored.
    Stale(OcsKey),
    /// Sequence number equal to the stored one: ignored.
    Duplicate(OcsKey),
    /// A peer report whose SourceID is not the sending peer's: ignored.
    SourceMismatch,
    /// Malformed, or a loss report without a usable percentage: ignored.
    Unusable,
}

/// The decision for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Send,
    /// Abated by the report under this key (divert it, or answer it).
    Abate(OcsKey),
}

/// Counters of the reacting node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReactorStats {
    /// Reports stored.
    pub applied: u64,
    /// Reports that ended an overload (validity 0).
    pub ended: u64,
    /// Stale or duplicate reports ignored.
    pub stale: u64,
    /// Peer reports with a foreign SourceID ignored.
    pub source_mismatch: u64,
    /// Malformed or unusable reports ignored.
    pub unusable: u64,
    /// Requests abated.
    pub abated: u64,
}

/// The reacting node's overload control state.
#[derive(Debug, Default)]
pub struct Reactor {
    ocs: HashMap<OcsKey, Entry>,
    stats: ReactorStats,
}

impl Reactor {
    /// No state.
    pub fn new() -> Reactor {
        Reactor::default()
    }

    /// The counters.
    pub fn stats(&self) -> ReactorStats {
        self.stats
    }

    /// The loss reduction in force under `key`, if any.
    pub fn reduction(&self, now: Duration, key: &OcsKey) -> Option<u32> {
        self.ocs
            .get(key)
            .filter(|e| e.expires > now)
            .and_then(Entry::reduction)
    }

    /// The maximum rate in force under `key` (a rate report), if any.
    pub fn max_rate(&self, now: Duration, key: &OcsKey) -> Option<u32> {
        self.ocs
            .get(key)
            .filter(|e| e.expires > now)
            .and_then(|e| match e.abatement {
                Abatement::Rate { max_rate, .. } => Some(max_rate),
                Abatement::Loss { .. } => None,
            })
    }

    /// The OC-OLRs of `answer`, received from the peer whose identity is `from_peer`.
    pub fn on_answer(&mut self, now: Duration, from_peer: &str, answer: &Message) -> Vec<Received> {
        let mut out = Vec::new();
        for olr in Olr::all_of(answer) {
            let r = match olr {
                Ok(o) => self.on_olr(now, from_peer, answer, &o),
                Err(_) => Received::Unusable,
            };
            match &r {
                Received::Applied(_) => self.stats.applied += 1,
                Received::Ended(_) => self.stats.ended += 1,
                Received::Stale(_) | Received::Duplicate(_) => self.stats.stale += 1,
                Received::SourceMismatch => self.stats.source_mismatch += 1,
                Received::Unusable => self.stats.unusable += 1,
            }
            out.push(r);
        }
        out
    }

    fn on_olr(&mut self, now: Duration, from_peer: &str, answer: &Message, o: &Olr) -> Received {
        let name = match o.report_type {
            ReportType::Host => answer.origin_host(),
            // Errata 4549: the realm is the answer's Origin-Realm.
            ReportType::Realm => answer.origin_realm(),
            ReportType::Peer => match o.source_id.as_deref() {
                Some(s) if s.eq_ignore_ascii_case(from_peer) => Some(s),
                _ => return Received::SourceMismatch,
            },
        };
        let Some(name) = name else {
            return Received::Unusable;
        };
        let key = OcsKey {
            report_type: o.report_type,
            name: name.to_ascii_lowercase(),
            application_id: if o.report_type == ReportType::Peer {
                0
            } else {
                answer.application_id
            },
        };
        // RFC 7683 §5.2.1.3: only a higher sequence number replaces the state.
        if let Some(e) = self.ocs.get(&key).filter(|e| e.expires > now) {
            if o.sequence < e.sequence {
                return Received::Stale(key);
            }
            if o.sequence == e.sequence {
                return Received::Duplicate(key);
            }
        }
        if o.validity == Some(0) {
            // RFC 7683 §5.2.1.3: validity 0 expires the state (the end of the overload).
            self.ocs.remove(&key);
            return Received::Ended(key);
        }
        let old = self.ocs.get(&key).map(|e| e.abatement);
        let abatement = if let Some(max_rate) = o.max_rate {
            // RFC 8582: a rate report; a bucket already running for this key keeps its
            // state (a new number with another rate must not grant a fresh burst).
            let tat_ns = match old {
                Some(Abatement::Rate { tat_ns, .. }) => tat_ns,
                _ => nanos(now),
            };
            Abatement::Rate { max_rate, tat_ns }
        } else {
            // RFC 7683 §7.7: a loss report needs its percentage; above 100 is ignored.
            let Some(reduction) = o.reduction.filter(|r| *r <= 100) else {
                return Received::Unusable;
            };
            let debt = match old {
                Some(Abatement::Loss { debt, .. }) => debt,
                _ => 0,
            };
            Abatement::Loss { reduction, debt }
        };
        let expires = now + Duration::from_secs(u64::from(o.validity_secs()));
        self.ocs.insert(
            key.clone(),
            Entry {
                sequence: o.sequence,
                expires,
                abatement,
            },
        );
        Received::Applied(key)
    }

    /// The reports in force: key, what it asks for, sequence number, time left; sorted.
    pub fn active(&self, now: Duration) -> Vec<(OcsKey, Asked, u64, Duration)> {
        let mut v: Vec<_> = self
            .ocs
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(k, e)| {
                let asked = match e.abatement {
                    Abatement::Loss { reduction, .. } => Asked::Loss(reduction),
                    Abatement::Rate { max_rate, .. } => Asked::Rate(max_rate),
                };
                (k.clone(), asked, e.sequence, e.expires - now)
            })
            .collect();
        v.sort_by(|a, b| {
            (&a.0.name, a.0.report_type.value(), a.0.application_id).cmp(&(
                &b.0.name,
                b.0.report_type.value(),
                b.0.application_id,
            ))
        });
        v
    }

    /// The largest loss reduction in force towards the server `host` (its host reports,
    /// any application, and its peer report); 0 when none.
    pub fn reduction_towards(&self, now: Duration, host: &str) -> u32 {
        self.ocs
            .iter()
            .filter(|(k, e)| {
                e.expires > now
                    && k.report_type != ReportType::Realm
                    && k.name.eq_ignore_ascii_case(host)
            })
            .filter_map(|(_, e)| e.reduction())
            .max()
            .unwrap_or(0)
    }

    /// Whether `req`, about to be sent to the peer `to_peer` (its identity), for the
    /// server `target_host` routing chose (or the peer itself), goes.
    /// `host_and_realm`: whether host and realm reports apply — not when the request
    /// came from a client that announced DOIC itself: that client is the reacting node
    /// for them (RFC 7683 §5.1, §5.2; the agent relays the reports to it), so the agent
    /// abating too would shed twice — except a host report for a request without
    /// Destination-Host, which the client does not apply (§4.3: host reports are for
    /// requests naming the host) and the agent does (it chose the host). Peer reports
    /// are the agent's alone (RFC 8581).
    pub fn admit(
        &mut self,
        now: Duration,
        req: &Message,
        to_peer: &str,
        target_host: &str,
        host_and_realm: bool,
    ) -> Verdict {
        self.ocs.retain(|_, e| e.expires > now);
        let app = req.application_id;
        let host = req.destination_host().unwrap_or(target_host);
        let candidates = [
            OcsKey {
                report_type: ReportType::Host,
                name: host.to_ascii_lowercase(),
                application_id: app,
            },
            OcsKey {
                report_type: ReportType::Realm,
                name: req.destination_realm().unwrap_or("").to_ascii_lowercase(),
                application_id: app,
            },
            OcsKey {
                report_type: ReportType::Peer,
                name: to_peer.to_ascii_lowercase(),
                application_id: 0,
            },
        ];
        // A DOIC client applies the realm reports and the host reports of requests that
        // name the host (RFC 7683 §4.3); a host report for a request routed by realm
        // alone is ours to apply: we chose the host.
        let realm_routed = req.destination_host().is_none();
        let applying: Vec<OcsKey> = candidates
            .into_iter()
            .filter(|k| match k.report_type {
                ReportType::Peer => true,
                ReportType::Host => host_and_realm || realm_routed,
                ReportType::Realm => host_and_realm,
            })
            .filter(|k| self.ocs.contains_key(k))
            .collect();
        if applying.is_empty() {
            return Verdict::Send;
        }
        // CCR-I first (0), other requests (1), CCR-T last (2).
        let priority = match (req.command_code, req.cc_request_type()) {
            (dra_common::wire::cmd::CREDIT_CONTROL, Some(t)) if t == u32::from(crt::INITIAL) => 0,
            (dra_common::wire::cmd::CREDIT_CONTROL, Some(t))
                if t == u32::from(crt::TERMINATION) =>
            {
                2
            }
            _ => 1,
        };
        // Loss: the report asking for the largest reduction decides.
        if let Some(key) = applying
            .iter()
            .filter(|k| self.ocs[*k].reduction().is_some())
            .max_by_key(|k| self.ocs[*k].reduction())
            .cloned()
        {
            let e = self.ocs.get_mut(&key).expect("present");
            if let Abatement::Loss { reduction, debt } = &mut e.abatement {
                *debt = (*debt + *reduction).min(MAX_DEBT);
                if *debt >= 100 * (priority + 1) {
                    *debt -= 100;
                    self.stats.abated += 1;
                    return Verdict::Abate(key);
                }
            }
        }
        // Rate: every rate report must admit it; only then is it charged to them.
        let t = nanos(now);
        let tolerance = RATE_TOLERANCE_MS[priority as usize] * 1_000_000;
        let mut charged = Vec::new();
        for key in &applying {
            if let Abatement::Rate { max_rate, tat_ns } = self.ocs[key].abatement {
                let interval = gcra::Rate::new(f64::from(max_rate), 1).interval_ns;
                match gcra::conforms(tat_ns, t, interval, tolerance) {
                    Some(next) => charged.push((key.clone(), next)),
                    None => {
                        self.stats.abated += 1;
                        return Verdict::Abate(key.clone());
                    }
                }
            }
        }
        for (key, next) in charged {
            if let Some(Entry {
                abatement: Abatement::Rate { tat_ns, .. },
                ..
            }) = self.ocs.get_mut(&key)
            {
                *tat_ns = next;
            }
        }
        Verdict::Send
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diameter::{Avp, avp_code as c};
    use dra_common::wire::app;

    const PCRF: &str = "pcrf1.pcrf.example";
    const PCRF_REALM: &str = "pcrf.example";

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn olr(rt: ReportType, seq: u64, reduction: Option<u32>, validity: Option<u32>) -> Olr {
        Olr {
            sequence: seq,
            report_type: rt,
            reduction,
            validity,
            source_id: (rt == ReportType::Peer).then(|| PCRF.to_owned()),
            max_rate: None,
        }
    }

    fn answer(application: u32, olrs: &[Olr]) -> Message {
        let mut m = Message::answer(272, application, 1, 1)
            .with(Avp::utf8(c::ORIGIN_HOST, PCRF))
            .with(Avp::utf8(c::ORIGIN_REALM, PCRF_REALM));
        for o in olrs {
            m.push(o.to_avp());
        }
        m
    }

    fn ccr(application: u32, request_type: u8, dest_host: Option<&str>) -> Message {
        let mut m = Message::request(272, application, 1, 1)
            .with(Avp::utf8(c::DESTINATION_REALM, PCRF_REALM))
            .with(Avp::u32(c::CC_REQUEST_TYPE, u32::from(request_type)));
        if let Some(h) = dest_host {
            m.push(Avp::utf8(c::DESTINATION_HOST, h));
        }
        m
    }

    /// A new reactor after a Gx answer from PCRF carrying `olrs` at t=0, and what it made
    /// of them.
    fn reported(olrs: &[Olr]) -> (Reactor, Vec<Received>) {
        let mut r = Reactor::new();
        let got = r.on_answer(secs(0), PCRF, &answer(app::GX, olrs));
        (r, got)
    }

    fn shed(r: &mut Reactor, now: Duration, req: &Message, n: usize) -> usize {
        (0..n)
            .filter(|_| r.admit(now, req, PCRF, PCRF, true) != Verdict::Send)
            .count()
    }

    #[test]
    fn host_report_loss_sheds_exactly_its_share_rfc7683_6() {
        let (mut r, got) = reported(&[olr(ReportType::Host, 1, Some(50), Some(10))]);
        assert!(matches!(got[..], [Received::Applied(_)]));
        let req = ccr(app::GX, crt::INITIAL, None);
        assert_eq!(shed(&mut r, secs(1), &req, 100), 50);
        // Another application is not concerned (reports are per application).
        assert_eq!(
            shed(&mut r, secs(1), &ccr(app::GY, crt::INITIAL, None), 100),
            0
        );
        // Another host is not concerned by a host report.
        let other = ccr(app::GX, crt::INITIAL, Some("pcrf2.pcrf.example"));
        let n = (0..100)
            .filter(|_| r.admit(secs(1), &other, "pcrf2.pcrf.example", "x", true) != Verdict::Send)
            .count();
        assert_eq!(n, 0);
    }

    #[test]
    fn ccr_i_shed_first_ccr_t_last_rfc7683_appendix_c4() {
        // 1000 requests: per 10, 5 CCR-I, 4 CCR-U, 1 CCR-T. Returns (I, U, T) shed.
        fn run(reduction: u32) -> (u32, u32, u32) {
            let (mut r, _) = reported(&[olr(ReportType::Host, 1, Some(reduction), None)]);
            let mut shed = (0, 0, 0);
            for k in 0..1000 {
                let rt = match k % 10 {
                    0..=4 => crt::INITIAL,
                    5..=8 => crt::UPDATE,
                    _ => crt::TERMINATION,
                };
                if r.admit(secs(1), &ccr(app::GX, rt, None), PCRF, PCRF, true) != Verdict::Send {
                    match rt {
                        crt::INITIAL => shed.0 += 1,
                        crt::UPDATE => shed.1 += 1,
                        _ => shed.2 += 1,
                    }
                }
            }
            shed
        }
        // 30 %: CCR-I alone pay (the last debt under 300 is still owed).
        let (i, u, t) = run(30);
        assert_eq!((u, t), (0, 0));
        assert!((297..=300).contains(&i), "{i}");
        // 70 %: every CCR-I, then CCR-U; never a CCR-T while those remain.
        let (i, u, t) = run(70);
        assert_eq!(t, 0, "CCR-T shed while CCR-I and CCR-U remain");
        // (The first CCR-I come before any debt.)
        assert!(i >= 497, "{i}");
        assert!((697..=700).contains(&(i + u)), "{i} + {u}");
    }

    #[test]
    fn stale_and_duplicate_reports_are_ignored_and_counted_rfc7683_5_2_1_3() {
        let mut r = Reactor::new();
        let a = |seq, red| answer(app::GX, &[olr(ReportType::Host, seq, Some(red), None)]);
        r.on_answer(secs(0), PCRF, &a(5, 40));
        assert!(matches!(
            r.on_answer(secs(1), PCRF, &a(5, 90))[..],
            [Received::Duplicate(_)]
        ));
        assert!(matches!(
            r.on_answer(secs(1), PCRF, &a(4, 90))[..],
            [Received::Stale(_)]
        ));
        let key = OcsKey {
            report_type: ReportType::Host,
            name: PCRF.into(),
            application_id: app::GX,
        };
        assert_eq!(r.reduction(secs(1), &key), Some(40));
        assert!(matches!(
            r.on_answer(secs(1), PCRF, &a(6, 90))[..],
            [Received::Applied(_)]
        ));
        assert_eq!(r.reduction(secs(1), &key), Some(90));
        assert_eq!(r.stats().stale, 2);
    }

    #[test]
    fn reports_expire_and_end_explicitly_rfc7683_7_5() {
        let mut r = Reactor::new();
        let key = OcsKey {
            report_type: ReportType::Realm,
            name: PCRF_REALM.into(),
            application_id: app::GX,
        };
        // No validity: 30 s.
        r.on_answer(
            secs(0),
            PCRF,
            &answer(app::GX, &[olr(ReportType::Realm, 1, Some(100), None)]),
        );
        assert_eq!(r.reduction(secs(29), &key), Some(100));
        assert_eq!(r.reduction(secs(30), &key), None);
        let req = ccr(app::GX, crt::INITIAL, None);
        assert_eq!(shed(&mut r, secs(30), &req, 10), 0);
        // Validity 0 ends it at once.
        r.on_answer(
            secs(40),
            PCRF,
            &answer(app::GX, &[olr(ReportType::Realm, 2, Some(100), Some(60))]),
        );
        assert_eq!(shed(&mut r, secs(41), &req, 10), 10);
        let got = r.on_answer(
            secs(42),
            PCRF,
            &answer(app::GX, &[olr(ReportType::Realm, 3, Some(0), Some(0))]),
        );
        assert_eq!(got, vec![Received::Ended(key.clone())]);
        assert_eq!(r.reduction(secs(42), &key), None);
        assert_eq!(shed(&mut r, secs(42), &req, 10), 0);
    }

    #[test]
    fn peer_report_needs_the_senders_source_id_rfc8581() {
        let mut foreign = olr(ReportType::Peer, 1, Some(100), None);
        foreign.source_id = Some("agent-behind.example".into());
        let (mut r, got) = reported(&[foreign]);
        assert_eq!(got, vec![Received::SourceMismatch]);
        assert_eq!(r.stats().source_mismatch, 1);
        let req = ccr(app::GY, crt::INITIAL, None);
        assert_eq!(shed(&mut r, secs(1), &req, 10), 0);
        // Its own SourceID: every request to that peer, any application.
        r.on_answer(
            secs(0),
            PCRF,
            &answer(app::GX, &[olr(ReportType::Peer, 1, Some(100), None)]),
        );
        assert_eq!(shed(&mut r, secs(1), &req, 10), 10);
    }

    #[test]
    fn unusable_reports_are_ignored_rfc7683_7_7() {
        let (mut r, got) = reported(&[
            olr(ReportType::Host, 1, Some(101), None),
            olr(ReportType::Host, 2, None, None),
        ]);
        assert_eq!(got, vec![Received::Unusable, Received::Unusable]);
        let req = ccr(app::GX, crt::INITIAL, None);
        assert_eq!(shed(&mut r, secs(1), &req, 10), 0);
    }

    /// RFC 7683 §4.3, §5.2; RFC 8581: a DOIC client applies realm reports and the host
    /// reports of requests naming the host; a host report for a request routed by realm
    /// alone is the agent's (it chose the host); peer reports are the agent's alone.
    #[test]
    fn host_reports_left_to_a_doic_client_peer_reports_kept_rfc7683_5_2_rfc8581() {
        let (mut r, _) = reported(&[olr(ReportType::Host, 1, Some(100), Some(10))]);
        let shed_of = |r: &mut Reactor, req: &Message| {
            (0..10)
                .filter(|_| r.admit(secs(1), req, PCRF, PCRF, false) != Verdict::Send)
                .count()
        };
        // The client announced DOIC and named the host: it abates, not the agent.
        let req = ccr(app::GX, crt::INITIAL, Some(PCRF));
        assert_eq!(shed_of(&mut r, &req), 0);
        // Routed by realm alone: the client does not apply the host report; we do.
        assert_eq!(shed_of(&mut r, &ccr(app::GX, crt::INITIAL, None)), 10);
        assert_eq!(r.reduction_towards(secs(1), PCRF), 100);
        // A realm report is the DOIC client's to apply.
        let (mut realm, _) = reported(&[olr(ReportType::Realm, 1, Some(100), Some(10))]);
        assert_eq!(shed_of(&mut realm, &ccr(app::GX, crt::INITIAL, None)), 0);
        r.on_answer(
            secs(1),
            PCRF,
            &answer(app::GX, &[olr(ReportType::Peer, 1, Some(100), Some(10))]),
        );
        let n = (0..10)
            .filter(|_| r.admit(secs(1), &req, PCRF, PCRF, false) != Verdict::Send)
            .count();
        assert_eq!(n, 10);
        assert_eq!(r.active(secs(1)).len(), 2);
        assert!(r.active(secs(11)).is_empty());
    }

    fn rate_olr(seq: u64, max_rate: u32, validity: Option<u32>) -> Olr {
        Olr {
            max_rate: Some(max_rate),
            ..olr(ReportType::Host, seq, None, validity)
        }
    }

    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }

    // RFC 8582 (rate algorithm; section numbers unverified, see the module docs): a
    // reacting node sends at most OC-Maximum-Rate requests per second to the reporter.
    #[test]
    fn rate_report_sends_at_most_the_maximum_rate_rfc8582() {
        let (mut r, got) = reported(&[rate_olr(1, 100, Some(30))]);
        assert!(matches!(got[..], [Received::Applied(_)]));
        let key = OcsKey {
            report_type: ReportType::Host,
            name: PCRF.into(),
            application_id: app::GX,
        };
        assert_eq!(
            (r.max_rate(secs(0), &key), r.reduction(secs(0), &key)),
            (Some(100), None)
        );
        assert_eq!(r.active(secs(0))[0].1, Asked::Rate(100));
        // CCR-I offered at 1000/s for 5 s (one per ms).
        let req = ccr(app::GX, crt::INITIAL, None);
        let sent = (0..5000u64)
            .filter(|k| r.admit(ms(*k), &req, PCRF, PCRF, true) == Verdict::Send)
            .count();
        // 100/s for 5 s, plus what the CCR-I tolerance (100 ms: 10 requests) lets through
        // at the start.
        assert!((500..=511).contains(&sent), "{sent}");
        // Another host is not concerned.
        let other = ccr(app::GX, crt::INITIAL, Some("pcrf2.pcrf.example"));
        assert_eq!(
            r.admit(ms(5000), &other, "pcrf2.pcrf.example", "x", true),
            Verdict::Send
        );
    }

    // RFC 8582 with RFC 7683 Appendix C.4's priorities: when the rate is short, CCR-I are
    // abated first, CCR-T last; the total still keeps to the rate.
    #[test]
    fn rate_abates_ccr_i_first_ccr_t_last_rfc8582_rfc7683_appendix_c4() {
        let (mut r, _) = reported(&[rate_olr(1, 100, None)]);
        // 4 s: CCR-I every 2 ms (500/s), CCR-U every 20 ms (50/s), CCR-T every 40 ms
        // (25/s): 575/s offered against 100/s.
        let (mut i, mut u, mut t) = (0, 0, 0);
        let (mut u_off, mut t_off) = (0, 0);
        for k in (0..4000u64).step_by(2) {
            let mut go = |rt: u8| r.admit(ms(k), &ccr(app::GX, rt, None), PCRF, PCRF, true);
            if k % 40 == 0 {
                t_off += 1;
                t += usize::from(go(crt::TERMINATION) == Verdict::Send);
            }
            if k % 20 == 0 {
                u_off += 1;
                u += usize::from(go(crt::UPDATE) == Verdict::Send);
            }
            i += usize::from(go(crt::INITIAL) == Verdict::Send);
        }
        assert_eq!(
            (t, u),
            (t_off, u_off),
            "CCR-T and CCR-U abated while CCR-I were sent"
        );
        let total = i + u + t;
        // 4 s at 100/s, plus at most the largest tolerance (300 ms: 30 requests) and one.
        assert!((400..=431).contains(&total), "{i} + {u} + {t}");
        assert!(i < 200, "CCR-I take only what is left: {i}");
    }

    // RFC 7683 §5.2.1.3 (a higher number updates the state), §7.5 (validity 0 ends it):
    // a new rate keeps the bucket (no fresh burst), the end report lifts it.
    #[test]
    fn rate_report_updated_without_a_new_burst_then_ended_rfc7683_5_2_1_3() {
        let (mut r, _) = reported(&[rate_olr(1, 100, None)]);
        let req = ccr(app::GX, crt::INITIAL, None);
        let send = |r: &mut Reactor, from: u64, to: u64| {
            (from..to)
                .filter(|k| r.admit(ms(*k), &req, PCRF, PCRF, true) == Verdict::Send)
                .count()
        };
        assert!((100..=111).contains(&send(&mut r, 0, 1000)));
        // Halved at 1 s: the second after sends about 50, not a new burst.
        r.on_answer(ms(1000), PCRF, &answer(app::GX, &[rate_olr(2, 50, None)]));
        let n = send(&mut r, 1000, 2000);
        assert!((45..=56).contains(&n), "{n}");
        // A stale number is ignored.
        let got = r.on_answer(ms(2000), PCRF, &answer(app::GX, &[rate_olr(1, 1000, None)]));
        assert!(matches!(got[..], [Received::Stale(_)]));
        let n = send(&mut r, 2000, 3000);
        assert!((45..=56).contains(&n), "{n}");
        r.on_answer(ms(3000), PCRF, &answer(app::GX, &[rate_olr(3, 0, Some(0))]));
        assert_eq!(send(&mut r, 3000, 3100), 100);
    }

    // A loss report and a rate report towards the same server both apply: the loss
    // decides first, then the rate must admit what loss lets through (RFC 7683 §5.2.2:
    // a request matching an active OCS gets its algorithm's treatment).
    #[test]
    fn loss_and_rate_reports_both_apply_rfc7683_5_2_2() {
        let (mut r, _) = reported(&[olr(ReportType::Host, 1, Some(50), None)]);
        let peer_rate = Olr {
            max_rate: Some(100),
            ..olr(ReportType::Peer, 1, None, None)
        };
        r.on_answer(secs(0), PCRF, &answer(app::GX, &[peer_rate]));
        let req = ccr(app::GX, crt::INITIAL, None);
        // 1000/s offered for 2 s: loss lets 500/s through, the rate 100/s of those.
        let sent = (0..2000u64)
            .filter(|k| r.admit(ms(*k), &req, PCRF, PCRF, true) == Verdict::Send)
            .count();
        assert!((200..=212).contains(&sent), "{sent}");
        assert_eq!(r.reduction_towards(secs(1), PCRF), 50);
    }
}
