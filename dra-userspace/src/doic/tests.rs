//! The reporting node on fake time: each test names the RFC rule it checks.

use std::time::Duration;

use dra_common::wire::{MsgClass, app, cc_request_type as rt, cmd};

use super::*;
use crate::diameter::dictionary::enums::oc_feature::{LOSS, PEER_REPORT, RATE};
use crate::diameter::{Avp, Message, avp_code as c};

const DRA: &str = "dra.test.example";
const PGW: &str = "pgw1.test.example";
const BASE: u64 = 1_000;
const VALIDITY: u32 = 10;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn gw(algorithms: &[Algorithm], overall: Option<f64>, classes: Vec<ClassLimit>) -> GatewayConfig {
    GatewayConfig {
        origin_host: PGW.into(),
        algorithms: algorithms.to_vec(),
        validity_secs: VALIDITY,
        overall,
        classes,
    }
}

fn ccr_i_limit(rate: f64, dynamic: bool) -> ClassLimit {
    ClassLimit {
        class: MsgClass::gx_ccr(rt::INITIAL),
        rate,
        dynamic,
    }
}

/// Gateway 0 is a DOIC gateway with `cfg`, gateway 1 has DOIC off.
fn reporter(cfg: GatewayConfig) -> Reporter {
    let mut r = Reporter::new(DRA, vec![Some(cfg), None], BASE);
    r.tick(secs(0));
    r
}

fn caps(features: Option<u64>, source: Option<&str>) -> SupportedFeatures {
    SupportedFeatures {
        feature_vector: features,
        source_id: source.map(str::to_owned),
        peer_algo: None,
    }
}

fn peer_caps(features: u64) -> SupportedFeatures {
    caps(Some(features | PEER_REPORT), Some(PGW))
}

fn ccr(request_type: u8, doic: Option<&SupportedFeatures>) -> Message {
    let mut m = Message::request(cmd::CREDIT_CONTROL, app::GX, 1, 1)
        .proxiable()
        .with(Avp::utf8(c::SESSION_ID, "pgw1;1"))
        .with(Avp::u32(c::CC_REQUEST_TYPE, u32::from(request_type)));
    if let Some(sf) = doic {
        m.push(sf.to_avp());
    }
    m
}

fn cca() -> Message {
    Message::answer(cmd::CREDIT_CONTROL, app::GX, 1, 1)
        .with(Avp::u32(c::RESULT_CODE, 2001).mandatory())
}

/// A loss-only gateway whose CCR-I are limited to 100/s (static).
fn loss_reporter() -> Reporter {
    reporter(gw(
        &[Algorithm::Loss],
        None,
        vec![ccr_i_limit(100.0, false)],
    ))
}

/// [`loss_reporter`] after a first window of 1000 CCR-I from a gateway announcing loss
/// with peer reports: 90 % reduction reported.
fn overloaded_10_times() -> (Reporter, SupportedFeatures) {
    let mut r = loss_reporter();
    let sf = peer_caps(LOSS);
    window(&mut r, 1, &sf, &[(1000, rt::INITIAL)]);
    (r, sf)
}

/// One window of gateway 0 announcing `sf`: each `(n, request_type)` of `offered`, then
/// the tick at second `t`.
fn window(r: &mut Reporter, t: u64, sf: &SupportedFeatures, offered: &[(usize, u8)]) {
    for &(n, request_type) in offered {
        send(r, n, request_type, sf);
    }
    r.tick(secs(t));
}

/// What `decorate` says it sent with the loss algorithm (`end`: the end of overload).
fn loss_sent(end: bool) -> Option<Sent> {
    Some(Sent {
        algorithm: Algorithm::Loss,
        end,
    })
}

/// Our peer report (loss) to gateway 0.
fn peer_olr(sequence: u64, reduction: u32, validity: u32) -> Olr {
    Olr {
        sequence,
        report_type: ReportType::Peer,
        reduction: Some(reduction),
        validity: Some(validity),
        source_id: Some(DRA.into()),
        max_rate: None,
    }
}

/// `n` requests of `request_type` from gateway 0 announcing `sf`.
fn send(r: &mut Reporter, n: usize, request_type: u8, sf: &SupportedFeatures) {
    let m = ccr(request_type, Some(sf));
    for _ in 0..n {
        assert_eq!(r.on_request(0, &m).as_ref(), Some(sf));
    }
}

/// An answer to gateway 0 for a request with `sf`, decorated; its DOIC AVPs.
fn answer(
    r: &mut Reporter,
    now: Duration,
    sf: &SupportedFeatures,
) -> (Option<Sent>, Option<SupportedFeatures>, Vec<Olr>) {
    let mut a = cca();
    let sent = r.decorate(now, 0, Some(sf), &mut a);
    let back = SupportedFeatures::of(&a).map(Result::unwrap);
    let olrs = Olr::all_of(&a).map(Result::unwrap).collect();
    (sent, back, olrs)
}

#[test]
fn no_doic_in_the_request_means_nothing_new_in_the_answer_rfc7683_5_1() {
    let mut r = reporter(gw(&[Algorithm::Loss], None, vec![ccr_i_limit(10.0, false)]));
    // Overloaded by a gateway that does not announce DOIC.
    let plain = ccr(rt::INITIAL, None);
    for _ in 0..100 {
        assert_eq!(r.on_request(0, &plain), None);
    }
    r.tick(secs(1));
    let mut a = cca();
    let before = a.clone();
    assert_eq!(r.decorate(secs(1), 0, None, &mut a), None);
    assert_eq!(a, before);
    // A gateway with `doic = false` is never touched, even when it announces DOIC.
    let sf = peer_caps(LOSS);
    let mut a = cca();
    assert_eq!(r.on_request(1, &ccr(rt::INITIAL, Some(&sf))), None);
    assert_eq!(r.decorate(secs(1), 1, Some(&sf), &mut a), None);
    assert_eq!(a, cca());
}

#[test]
fn loss_reduction_is_the_share_over_the_limit_rfc7683_6_rfc8581_peer_report() {
    let mut r = loss_reporter();
    let sf = peer_caps(LOSS);
    // Under the limit: DOIC announced back, no report.
    window(&mut r, 1, &sf, &[(80, rt::INITIAL)]);
    let (sent, back, olrs) = answer(&mut r, secs(1), &sf);
    assert_eq!(sent, None);
    assert!(olrs.is_empty());
    let back = back.expect("OC-Supported-Features in the answer");
    assert_eq!(back.feature_vector, Some(LOSS | PEER_REPORT));
    assert_eq!(back.source_id.as_deref(), Some(DRA));
    assert_eq!(back.peer_algo, Some(LOSS));
    // 1000 CCR-I/s against 100/s, plus 100 CCR-U/s unlimited: 900 of 1100 are over.
    window(&mut r, 2, &sf, &[(1000, rt::INITIAL), (100, rt::UPDATE)]);
    assert_eq!(r.report(0), Some(Report::Reduction(82))); // ⌈100 × 900 / 1100⌉
    let (sent, _, olrs) = answer(&mut r, secs(2), &sf);
    assert_eq!(sent, loss_sent(false));
    assert_eq!(olrs, vec![peer_olr(BASE + 1, 82, VALIDITY)]);
}

#[test]
fn an_obeying_gateway_keeps_its_reduction_and_sequence_rfc7683_7_4() {
    let (mut r, sf) = overloaded_10_times();
    assert_eq!(r.report(0), Some(Report::Reduction(90)));
    let seq = r.sequence(0);
    // It sheds 90 %: 100/s arrive, which is 1000/s offered.
    for t in 2..=4 {
        window(&mut r, t, &sf, &[(100, rt::INITIAL)]);
        assert_eq!(r.report(0), Some(Report::Reduction(90)), "t={t}");
        assert_eq!(r.sequence(0), seq, "an unchanged report keeps its number");
    }
    // Its demand doubles: 200/s arrive = 2000/s offered → 95 %, a new number.
    window(&mut r, 5, &sf, &[(200, rt::INITIAL)]);
    assert_eq!(r.report(0), Some(Report::Reduction(95)));
    assert_eq!(r.sequence(0), seq.map(|s| s + 1));
}

#[test]
fn the_end_of_overload_is_reported_explicitly_rfc7683_5_2() {
    let (mut r, sf) = overloaded_10_times();
    let seq = r.sequence(0).unwrap();
    // Demand falls to 50/s: 5/s arrive under the 90 % report. One calm window keeps the
    // report (no flapping) ...
    window(&mut r, 2, &sf, &[(5, rt::INITIAL)]);
    assert_eq!(r.report(0), Some(Report::Reduction(90)));
    // ... the second ends it: validity 0, reduction 0, a new sequence number.
    window(&mut r, 3, &sf, &[(5, rt::INITIAL)]);
    assert_eq!(r.report(0), None);
    let (sent, _, olrs) = answer(&mut r, secs(3), &sf);
    assert_eq!(sent, loss_sent(true));
    assert_eq!(olrs, vec![peer_olr(seq + 1, 0, 0)]);
    // Carried for one validity period, then answers have no OC-OLR.
    send(&mut r, 50, rt::INITIAL, &sf);
    r.tick(secs(3 + u64::from(VALIDITY) - 1));
    assert_eq!(answer(&mut r, secs(12), &sf).2.len(), 1);
    r.tick(secs(3 + u64::from(VALIDITY)));
    let (sent, back, olrs) = answer(&mut r, secs(13), &sf);
    assert_eq!(sent, None);
    assert!(olrs.is_empty());
    assert!(back.is_some(), "DOIC is still announced");
}

#[test]
fn an_unchanged_report_is_renumbered_before_it_would_expire_rfc7683_7_5() {
    let (mut r, sf) = overloaded_10_times();
    let seq = r.sequence(0).unwrap();
    assert_eq!(answer(&mut r, secs(5), &sf).2[0].sequence, seq);
    // Half the 10 s validity after issue: same content, next number.
    assert_eq!(answer(&mut r, secs(6), &sf).2[0].sequence, seq + 1);
    assert_eq!(answer(&mut r, secs(7), &sf).2[0].sequence, seq + 1);
}

#[test]
fn rate_is_the_limit_we_enforce_rfc8582() {
    // Overall limit only: the maximum rate is that limit.
    let mut r = reporter(gw(&[Algorithm::Rate, Algorithm::Loss], Some(250.0), vec![]));
    let sf = peer_caps(LOSS | RATE);
    window(&mut r, 1, &sf, &[(1000, rt::UPDATE)]);
    assert_eq!(r.report(0), Some(Report::MaxRate(250)));
    let (sent, back, olrs) = answer(&mut r, secs(1), &sf);
    assert_eq!(sent.map(|s| s.algorithm), Some(Algorithm::Rate));
    assert_eq!(back.unwrap().peer_algo, Some(RATE));
    assert_eq!(olrs[0].max_rate, Some(250));
    assert_eq!(olrs[0].reduction, None);
    // It obeys (sends 250/s): the report holds.
    for t in 2..=4 {
        window(&mut r, t, &sf, &[(250, rt::UPDATE)]);
        assert_eq!(r.report(0), Some(Report::MaxRate(250)));
    }
    // Its demand falls under 90 % of the rate for two windows: the end (no rate in it).
    for t in 5..=6 {
        window(&mut r, t, &sf, &[(100, rt::UPDATE)]);
    }
    assert_eq!(r.report(0), None);
    let (sent, _, olrs) = answer(&mut r, secs(6), &sf);
    assert_eq!(sent.map(|s| s.end), Some(true));
    assert_eq!((olrs[0].validity, olrs[0].max_rate), (Some(0), None));
}

#[test]
fn rate_with_class_limits_counts_the_other_requests_rfc8582() {
    // CCR-I limited to 100/s, CCR-U not limited: 1000 CCR-I + 300 CCR-U offered.
    let mut r = reporter(gw(
        &[Algorithm::Rate],
        None,
        vec![ccr_i_limit(100.0, false)],
    ));
    let sf = peer_caps(RATE);
    window(&mut r, 1, &sf, &[(1000, rt::INITIAL), (300, rt::UPDATE)]);
    assert_eq!(r.report(0), Some(Report::MaxRate(400)));
    // Obeying, it sends 100 CCR-I + 300 CCR-U; then its CCR-U dips: the report holds
    // (the other requests' peak counts), so the gateway is not squeezed.
    window(&mut r, 2, &sf, &[(100, rt::INITIAL), (300, rt::UPDATE)]);
    window(&mut r, 3, &sf, &[(150, rt::INITIAL), (230, rt::UPDATE)]);
    assert_eq!(r.report(0), Some(Report::MaxRate(400)));
}

#[test]
fn drl_throttle_is_what_we_enforce_and_changes_the_number_rfc7683_7_4() {
    let mut r = reporter(gw(&[Algorithm::Rate], None, vec![ccr_i_limit(200.0, true)]));
    let sf = peer_caps(RATE);
    window(&mut r, 1, &sf, &[(190, rt::INITIAL)]);
    assert_eq!(r.report(0), None, "under the static limit");
    // DRL throttles 50 %: 100/s is enforced, 190/s offered.
    r.set_throttle(0, 50);
    window(&mut r, 2, &sf, &[(190, rt::INITIAL)]);
    assert_eq!(r.report(0), Some(Report::MaxRate(100)));
    let seq = r.sequence(0).unwrap();
    r.set_throttle(0, 75);
    window(&mut r, 3, &sf, &[(100, rt::INITIAL)]);
    assert_eq!(r.report(0), Some(Report::MaxRate(50)));
    assert_eq!(r.sequence(0), Some(seq + 1));
}

#[test]
fn algorithm_selection_falls_back_to_loss_rfc7683_6_rfc8582() {
    let both = [Algorithm::Rate, Algorithm::Loss];
    assert_eq!(reporter::select(&both, LOSS | RATE), Algorithm::Rate);
    assert_eq!(reporter::select(&both, LOSS), Algorithm::Loss);
    assert_eq!(
        reporter::select(&[Algorithm::Loss], LOSS | RATE),
        Algorithm::Loss
    );
    // We offer rate only; the gateway supports loss only: loss (mandatory for all).
    assert_eq!(reporter::select(&[Algorithm::Rate], LOSS), Algorithm::Loss);
    // No feature vector in the request = loss only (RFC 7683 §7.2).
    assert_eq!(caps(None, Some(PGW)).features(), LOSS);
    let mut r = reporter(gw(&both, None, vec![ccr_i_limit(100.0, false)]));
    let sf = caps(Some(LOSS | PEER_REPORT), Some(PGW));
    window(&mut r, 1, &sf, &[(1000, rt::INITIAL)]);
    assert_eq!(r.report(0), Some(Report::Reduction(90)));
}

#[test]
fn peer_reports_need_the_gateways_own_source_id_rfc8581() {
    let mut r = loss_reporter();
    // Announced through another agent: SourceID is not the gateway's identity.
    for sf in [
        caps(Some(LOSS | PEER_REPORT), Some("other-agent.example")),
        caps(Some(LOSS | PEER_REPORT), None),
        caps(Some(LOSS), Some(PGW)),
    ] {
        window(&mut r, 1, &sf, &[(1000, rt::INITIAL)]);
        let (sent, back, olrs) = answer(&mut r, secs(1), &sf);
        assert_eq!(sent, None, "{sf:?}");
        assert!(olrs.is_empty());
        // DOIC is still announced back, loss, without the peer members.
        assert_eq!(back, Some(caps(Some(LOSS), None)));
    }
}

#[test]
fn relayed_answer_keeps_the_servers_selection_and_host_reports_rfc8581_agents() {
    let mut r = loss_reporter();
    let sf = peer_caps(LOSS | RATE);
    window(&mut r, 1, &sf, &[(1000, rt::INITIAL)]);
    let server_sf = SupportedFeatures {
        feature_vector: Some(RATE | PEER_REPORT),
        source_id: Some("pcrf1.example".into()),
        peer_algo: Some(RATE),
    };
    let host = Olr {
        sequence: 5,
        report_type: ReportType::Host,
        reduction: None,
        validity: Some(20),
        source_id: None,
        max_rate: Some(70),
    };
    let server_peer = Olr {
        report_type: ReportType::Peer,
        source_id: Some("pcrf1.example".into()),
        ..host.clone()
    };
    let mut a = cca()
        .with(server_sf.to_avp())
        .with(host.to_avp())
        .with(server_peer.to_avp());
    let latest = r.latest(0).cloned();
    assert_eq!(latest.as_ref(), Some(&sf));
    let sent = r.decorate(secs(1), 0, latest.as_ref(), &mut a);
    assert!(sent.is_some());
    assert_eq!(a.find_all(c::OC_SUPPORTED_FEATURES).count(), 1);
    let back = SupportedFeatures::of(&a).unwrap().unwrap();
    assert_eq!(
        back.feature_vector,
        Some(RATE | PEER_REPORT),
        "server's selection kept"
    );
    assert_eq!(back.source_id.as_deref(), Some(DRA));
    assert_eq!(back.peer_algo, Some(LOSS));
    let olrs: Vec<Olr> = Olr::all_of(&a).map(Result::unwrap).collect();
    assert_eq!(olrs.len(), 2, "{olrs:?}");
    assert_eq!(olrs[0], host, "host report relayed unchanged");
    assert_eq!(olrs[1].source_id.as_deref(), Some(DRA));
    assert_eq!(olrs[1].reduction, Some(90));
}

#[test]
fn overall_limit_applies_after_the_class_limits_loss() {
    // CCR-I 100/s and overall 300/s: 1000 CCR-I + 400 CCR-U offered → admitted
    // min(100 + 400, 300) = 300 of 1400.
    let mut r = reporter(gw(
        &[Algorithm::Loss],
        Some(300.0),
        vec![ccr_i_limit(100.0, false)],
    ));
    let sf = peer_caps(LOSS);
    window(&mut r, 1, &sf, &[(1000, rt::INITIAL), (400, rt::UPDATE)]);
    assert_eq!(r.report(0), Some(Report::Reduction(79))); // ⌈100 × 1100 / 1400⌉
}

#[test]
fn a_gateway_that_stops_announcing_doic_gets_no_more_reports_rfc7683_5_1() {
    let (mut r, _) = overloaded_10_times();
    assert!(r.report(0).is_some());
    let plain = ccr(rt::INITIAL, None);
    for _ in 0..1000 {
        r.on_request(0, &plain);
    }
    r.tick(secs(2));
    assert_eq!(r.report(0), None);
    assert_eq!(r.latest(0), None);
}
