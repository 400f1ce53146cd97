//! The DRA as a DOIC reacting node towards its servers (RFC 7683 §5.2, §6 loss; RFC
//! 8581 peer reports), sans-IO. **Not wired into the agent yet** (docs/doic.md): this is
//! the state and the abatement decision, tested on fake time.
//!
//! - [`Reactor::on_answer`]: every OC-OLR in an answer from a server is checked and
//!   stored as overload control state (OCS), keyed as RFC 7683 keys it: a host report by
//!   (application, reporting host = the answer's Origin-Host), a realm report by
//!   (application, realm = the answer's Origin-Realm), a peer report by the reporting
//!   peer (RFC 8581). A report whose sequence number is not higher than the stored one
//!   is ignored (stale or duplicate, counted); validity 0 ends it at once; otherwise it
//!   expires after its validity (30 s when absent). A peer report whose SourceID is not
//!   the peer that sent the answer is ignored and counted (RFC 8581: it was relayed from
//!   further away). Only the loss algorithm is implemented here: a report without
//!   OC-Reduction-Percentage, or above 100 (RFC 7683 §7.7), is ignored and counted.
//! - [`Reactor::admit`]: whether a request about to be sent to a server goes, or is
//!   abated by a report that applies to it: host reports to requests for that host
//!   (Destination-Host, or the server routing chose), realm reports to requests for that
//!   realm, peer reports to every request sent to that peer; each for its application.
//!   Loss is exact and deterministic rather than random: each request adds the
//!   reduction to a per-report debt, and a request pays 100 of it by being shed. CCR-I
//!   pay first; CCR-U and other requests only once the debt is over 200 (not enough
//!   CCR-I to pay it); CCR-T only over 300 — shed last, as RFC 7683's appendix suggests
//!   for session-ending requests. The debt is capped at 400.

use std::collections::HashMap;
use std::time::Duration;

use dra_common::wire::cc_request_type as crt;

use super::avps::{Olr, ReportType};
use crate::diameter::Message;

/// Largest debt a report keeps (see the module docs).
const MAX_DEBT: u32 = 400;

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
    reduction: u32,
    expires: Duration,
    debt: u32,
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
    /// Malformed, or not a loss report: ignored.
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
    /// Malformed or non-loss reports ignored.
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

    /// The reduction in force under `key`, if any.
    pub fn reduction(&self, now: Duration, key: &OcsKey) -> Option<u32> {
        self.ocs
            .get(key)
            .filter(|e| e.expires > now)
            .map(|e| e.reduction)
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
        // RFC 7683 §5.2: only a higher sequence number replaces the state.
        if let Some(e) = self.ocs.get(&key).filter(|e| e.expires > now) {
            if o.sequence < e.sequence {
                return Received::Stale(key);
            }
            if o.sequence == e.sequence {
                return Received::Duplicate(key);
            }
        }
        if o.validity == Some(0) {
            // RFC 7683 §7.5, §5.2: the end of the overload.
            self.ocs.remove(&key);
            return Received::Ended(key);
        }
        // RFC 7683 §7.7: a loss report needs its percentage; above 100 is ignored.
        let Some(reduction) = o.reduction.filter(|r| *r <= 100) else {
            return Received::Unusable;
        };
        let expires = now + Duration::from_secs(u64::from(o.validity_secs()));
        let debt = self.ocs.get(&key).map_or(0, |e| e.debt);
        self.ocs.insert(
            key.clone(),
            Entry {
                sequence: o.sequence,
                reduction,
                expires,
                debt,
            },
        );
        Received::Applied(key)
    }

    /// Whether `req`, about to be sent to the peer `to_peer` (its identity), for the
    /// server `target_host` routing chose (or the peer itself), goes.
    pub fn admit(
        &mut self,
        now: Duration,
        req: &Message,
        to_peer: &str,
        target_host: &str,
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
        // The report asking for the largest reduction decides.
        let Some(key) = candidates
            .into_iter()
            .filter(|k| self.ocs.contains_key(k))
            .max_by_key(|k| self.ocs[k].reduction)
        else {
            return Verdict::Send;
        };
        let threshold = match (req.command_code, req.cc_request_type()) {
            (dra_common::wire::cmd::CREDIT_CONTROL, Some(t)) if t == u32::from(crt::INITIAL) => 100,
            (dra_common::wire::cmd::CREDIT_CONTROL, Some(t))
                if t == u32::from(crt::TERMINATION) =>
            {
                300
            }
            _ => 200,
        };
        let e = self.ocs.get_mut(&key).expect("present");
        e.debt = (e.debt + e.reduction).min(MAX_DEBT);
        if e.debt >= threshold {
            e.debt -= 100;
            self.stats.abated += 1;
            Verdict::Abate(key)
        } else {
            Verdict::Send
        }
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

    fn shed(r: &mut Reactor, now: Duration, req: &Message, n: usize) -> usize {
        (0..n)
            .filter(|_| r.admit(now, req, PCRF, PCRF) != Verdict::Send)
            .count()
    }

    #[test]
    fn host_report_loss_sheds_exactly_its_share_rfc7683_6() {
        let mut r = Reactor::new();
        let got = r.on_answer(
            secs(0),
            PCRF,
            &answer(app::GX, &[olr(ReportType::Host, 1, Some(50), Some(10))]),
        );
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
            .filter(|_| r.admit(secs(1), &other, "pcrf2.pcrf.example", "x") != Verdict::Send)
            .count();
        assert_eq!(n, 0);
    }

    #[test]
    fn ccr_i_shed_first_ccr_t_last_rfc7683_appendix() {
        // 1000 requests: per 10, 5 CCR-I, 4 CCR-U, 1 CCR-T. Returns (I, U, T) shed.
        fn run(reduction: u32) -> (u32, u32, u32) {
            let mut r = Reactor::new();
            r.on_answer(
                secs(0),
                PCRF,
                &answer(app::GX, &[olr(ReportType::Host, 1, Some(reduction), None)]),
            );
            let mut shed = (0, 0, 0);
            for k in 0..1000 {
                let rt = match k % 10 {
                    0..=4 => crt::INITIAL,
                    5..=8 => crt::UPDATE,
                    _ => crt::TERMINATION,
                };
                if r.admit(secs(1), &ccr(app::GX, rt, None), PCRF, PCRF) != Verdict::Send {
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
    fn stale_and_duplicate_reports_are_ignored_and_counted_rfc7683_5_2() {
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
        let mut r = Reactor::new();
        let mut foreign = olr(ReportType::Peer, 1, Some(100), None);
        foreign.source_id = Some("agent-behind.example".into());
        let got = r.on_answer(secs(0), PCRF, &answer(app::GX, &[foreign]));
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
        let mut r = Reactor::new();
        let got = r.on_answer(
            secs(0),
            PCRF,
            &answer(
                app::GX,
                &[
                    olr(ReportType::Host, 1, Some(101), None),
                    olr(ReportType::Host, 2, None, None),
                ],
            ),
        );
        assert_eq!(got, vec![Received::Unusable, Received::Unusable]);
        let req = ccr(app::GX, crt::INITIAL, None);
        assert_eq!(shed(&mut r, secs(1), &req, 10), 0);
    }
}
