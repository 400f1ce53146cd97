//! Requests the fast path marked over-limit: the answer the gateway gets, and which
//! profile decides it.

mod diameter_fixtures;

use diameter_fixtures as fx;
use dra::diameter::{Avp, Message, avp_code, command_code, result_code};
use dra::relay::{
    GroupId, IngressRule, LimitAction, MarkedHandler, MarkedPolicy, MarkedPolicyConfig,
    MarkedResponse, PolicyError, ProfileSource, RejectProfile, Scope, reject_marked,
    respond_marked,
};
use dra::routing::PeerId;
use dra_common::wire::{MsgClass, app, avp_flags, flags};

fn marked(mut m: Message) -> Message {
    m.flags |= flags::RATE_LIMIT_MARK;
    assert!(m.is_marked());
    m
}

fn profile(code: u32, text: &str) -> RejectProfile {
    RejectProfile {
        result_code: code,
        error_message: text.to_owned(),
    }
}

fn u32_of(m: &Message, code: u32) -> Option<u32> {
    m.find(code).and_then(|a| a.as_u32().ok())
}

fn error_message(m: &Message) -> Option<&str> {
    m.find(avp_code::ERROR_MESSAGE)
        .and_then(|a| a.as_utf8().ok())
}

fn proxy_info() -> Avp {
    Avp::grouped(
        avp_code::PROXY_INFO,
        [
            Avp::utf8(avp_code::PROXY_HOST, "proxy.example.net").mandatory(),
            Avp::octets(avp_code::PROXY_STATE, b"state-1".to_vec()).mandatory(),
        ],
    )
    .mandatory()
}

#[test]
fn marked_ccr_gets_3002_with_each_avp_and_the_e_bit() {
    let mut req = marked(fx::ccr_i_gx()).with(proxy_info());
    req.flags |= flags::T; // a retransmission: T must not come back
    let ans = reject_marked(
        &req,
        &profile(
            result_code::UNABLE_TO_DELIVER,
            "rate limit Gx CCR-I 200/s exceeded",
        ),
        fx::DRA_HOST,
        fx::DRA_REALM,
    );
    // Header.
    assert!(!ans.is_request());
    assert!(
        ans.is_error(),
        "3002 is a protocol error: E bit (RFC 6733 §7.1.3)"
    );
    assert!(ans.is_proxiable(), "P copied");
    assert!(!ans.is_marked(), "mark cleared");
    assert_eq!(ans.flags & (flags::RESERVED | flags::T), 0);
    assert_eq!(ans.flags, flags::P | flags::E);
    assert_eq!(ans.command_code, command_code::CREDIT_CONTROL);
    assert_eq!(ans.application_id, app::GX);
    assert_eq!(ans.hop_by_hop, req.hop_by_hop);
    assert_eq!(ans.end_to_end, req.end_to_end);
    // AVPs.
    assert_eq!(ans.avps[0].code, avp_code::SESSION_ID, "Session-Id first");
    assert_eq!(ans.session_id(), Some(fx::SESSION));
    assert_eq!(ans.origin_host(), Some(fx::DRA_HOST));
    assert_eq!(ans.origin_realm(), Some(fx::DRA_REALM));
    assert_eq!(ans.result_code(), Some(result_code::UNABLE_TO_DELIVER));
    assert_eq!(u32_of(&ans, avp_code::AUTH_APPLICATION_ID), Some(app::GX));
    assert_eq!(u32_of(&ans, avp_code::CC_REQUEST_TYPE), Some(1));
    assert_eq!(u32_of(&ans, avp_code::CC_REQUEST_NUMBER), Some(0));
    assert_eq!(
        error_message(&ans),
        Some("rate limit Gx CCR-I 200/s exceeded")
    );
    let em = ans.find(avp_code::ERROR_MESSAGE).expect("Error-Message");
    assert_eq!(
        em.flags & avp_flags::M,
        0,
        "Error-Message never has M (RFC 6733 §7.3)"
    );
    assert_eq!(ans.find(avp_code::PROXY_INFO), Some(&proxy_info()));
    // Nothing of the request's payload leaks into the answer.
    for code in [
        avp_code::DESTINATION_REALM,
        avp_code::SUBSCRIPTION_ID,
        avp_code::CALLED_STATION_ID,
    ] {
        assert!(ans.find(code).is_none(), "AVP {code} copied");
    }
    // It survives the wire.
    assert_eq!(Message::decode(&ans.encode()).expect("decodes"), ans);
}

#[test]
fn marked_answer_e_bit_follows_the_result_code_class() {
    let req = marked(fx::ccr_u_gy());
    for (code, e_bit) in [
        (result_code::UNABLE_TO_DELIVER, true),
        (result_code::TOO_BUSY, true),
        (result_code::UNABLE_TO_COMPLY, false),
        (result_code::END_USER_SERVICE_DENIED, false),
    ] {
        let ans = reject_marked(&req, &profile(code, "limit"), fx::DRA_HOST, fx::DRA_REALM);
        assert_eq!(ans.result_code(), Some(code));
        assert_eq!(ans.is_error(), e_bit, "Result-Code {code}");
        assert!(!ans.is_marked());
        assert_eq!(u32_of(&ans, avp_code::CC_REQUEST_TYPE), Some(2));
        assert_eq!(u32_of(&ans, avp_code::CC_REQUEST_NUMBER), Some(1));
        assert_eq!(u32_of(&ans, avp_code::AUTH_APPLICATION_ID), Some(app::GY));
    }
}

#[test]
fn marked_non_credit_control_request_gets_no_cc_avps() {
    // Rx Session-Termination-Request: its answer (STA, RFC 6733 §8.5) has no
    // Auth-Application-Id and CC-Request-* do not apply.
    let str_rx = marked(
        Message::request(command_code::SESSION_TERMINATION, 16_777_236, 9, 10)
            .proxiable()
            .with(Avp::utf8(avp_code::SESSION_ID, "af;1;2").mandatory())
            .with(Avp::utf8(avp_code::ORIGIN_HOST, "af.example.net").mandatory())
            .with(Avp::utf8(avp_code::ORIGIN_REALM, "example.net").mandatory())
            .with(Avp::utf8(avp_code::DESTINATION_REALM, fx::PCRF_REALM).mandatory())
            .with(Avp::u32(avp_code::AUTH_APPLICATION_ID, 16_777_236).mandatory())
            .with(Avp::u32(avp_code::TERMINATION_CAUSE, 1).mandatory()),
    );
    let ans = reject_marked(
        &str_rx,
        &RejectProfile::default(),
        fx::DRA_HOST,
        fx::DRA_REALM,
    );
    assert_eq!(ans.session_id(), Some("af;1;2"));
    assert_eq!(ans.result_code(), Some(result_code::UNABLE_TO_DELIVER));
    assert_eq!(error_message(&ans), Some("rate limit exceeded"));
    assert!(ans.find(avp_code::AUTH_APPLICATION_ID).is_none());
    assert!(ans.find(avp_code::CC_REQUEST_TYPE).is_none());
    assert_eq!((ans.hop_by_hop, ans.end_to_end), (9, 10));
}

#[test]
fn drop_action_discards() {
    let req = marked(fx::ccr_i_gx());
    assert_eq!(
        respond_marked(&req, &LimitAction::Drop, fx::DRA_HOST, fx::DRA_REALM),
        MarkedResponse::Discard
    );
    match respond_marked(&req, &LimitAction::default(), fx::DRA_HOST, fx::DRA_REALM) {
        MarkedResponse::Answer(a) => {
            assert_eq!(a.result_code(), Some(result_code::UNABLE_TO_DELIVER));
            assert_eq!(error_message(&a), Some("rate limit exceeded"));
        }
        MarkedResponse::Discard => panic!("default is reject"),
    }
}

const P1: PeerId = PeerId(1);
const P2: PeerId = PeerId(2);
const P3: PeerId = PeerId(3);
const P4: PeerId = PeerId(4);
const G1: GroupId = GroupId(0);

/// A Gx CCR class; request type `None` = every CC-Request-Type (0).
fn gx_ccr(request_type: Option<u32>) -> MsgClass {
    MsgClass::gx_ccr(request_type.unwrap_or(0) as u8)
}

fn reject(code: u32, text: &str) -> LimitAction {
    LimitAction::Reject(profile(code, text))
}

/// A rule for `class` (a class or `None` = every request).
fn rule(scope: Scope, class: impl Into<Option<MsgClass>>, action: LimitAction) -> IngressRule {
    IngressRule {
        scope,
        class: class.into(),
        action,
    }
}

/// P1 and P2 in group G1; P3 alone with an overall `drop` profile; P4 unknown.
fn policy() -> MarkedPolicy {
    use Scope::{Group, Peer};
    MarkedPolicy::new(MarkedPolicyConfig {
        rules: vec![
            rule(Group(G1), None, reject(3002, "g1 overall")),
            rule(Peer(P1), None, reject(3002, "p1 overall")),
            rule(Group(G1), gx_ccr(None), reject(3004, "g1 gx ccr")),
            rule(Group(G1), gx_ccr(Some(3)), reject(3004, "g1 gx ccr-t")),
            rule(Peer(P1), gx_ccr(None), reject(5012, "p1 gx ccr")),
            rule(Peer(P1), gx_ccr(Some(1)), reject(3002, "p1 gx ccr-i")),
            rule(Peer(P3), None, LimitAction::Drop),
        ],
        memberships: vec![(P1, G1), (P2, G1)],
        ..MarkedPolicyConfig::default()
    })
    .expect("valid policy")
}

fn class(application: u32, request_type: Option<u32>) -> MsgClass {
    MsgClass::new(
        application,
        command_code::CREDIT_CONTROL,
        request_type.unwrap_or(0) as u8,
    )
}

fn text(a: &LimitAction) -> &str {
    match a {
        LimitAction::Reject(p) => &p.error_message,
        LimitAction::Drop => "drop",
    }
}

#[test]
fn marked_policy_picks_the_most_specific_profile() {
    use ProfileSource as Src;
    let p = policy();
    let cases = [
        (P1, gx_ccr(Some(1)), "p1 gx ccr-i", Src::PeerClassExact),
        // The peer's class profile beats the group's exact one.
        (P1, gx_ccr(Some(3)), "p1 gx ccr", Src::PeerClassAny),
        (P1, gx_ccr(None), "p1 gx ccr", Src::PeerClassAny),
        (P1, class(app::GY, Some(1)), "p1 overall", Src::Peer),
        (P2, gx_ccr(Some(3)), "g1 gx ccr-t", Src::GroupClassExact),
        (P2, gx_ccr(Some(2)), "g1 gx ccr", Src::GroupClassAny),
        (P2, class(app::GY, Some(1)), "g1 overall", Src::Group),
        (P3, gx_ccr(Some(1)), "drop", Src::Peer),
        (P4, gx_ccr(Some(1)), "rate limit exceeded", Src::Default),
    ];
    for (peer, c, want, src) in cases {
        let (action, got_src) = p.select(peer, c);
        assert_eq!((text(action), got_src), (want, src), "{peer:?} {c:?}");
    }
    let (default, _) = p.select(P4, class(app::GY, None));
    assert_eq!(
        default,
        &LimitAction::Reject(profile(
            result_code::UNABLE_TO_DELIVER,
            "rate limit exceeded"
        ))
    );
}

#[test]
fn request_class_reads_cc_request_type_only_for_credit_control() {
    assert_eq!(fx::ccr_i_gx().class(), class(app::GX, Some(1)));
    assert_eq!(fx::ccr_u_gy().class(), class(app::GY, Some(2)));
    let odd = fx::dwr().with(Avp::u32(avp_code::CC_REQUEST_TYPE, 1));
    assert_eq!(odd.class().req_type, 0);
}

#[test]
fn marked_policy_rejects_ambiguous_config() {
    let dup = MarkedPolicy::new(MarkedPolicyConfig {
        rules: vec![
            rule(Scope::Peer(P1), gx_ccr(Some(1)), LimitAction::Drop),
            rule(Scope::Peer(P1), gx_ccr(Some(1)), reject(3002, "x")),
        ],
        ..MarkedPolicyConfig::default()
    });
    assert!(matches!(dup, Err(PolicyError::DuplicateRule { .. })));
    let two = MarkedPolicy::new(MarkedPolicyConfig {
        memberships: vec![(P1, G1), (P1, GroupId(1))],
        ..MarkedPolicyConfig::default()
    });
    assert!(matches!(
        two,
        Err(PolicyError::PeerInTwoGroups { peer: P1, .. })
    ));
}

#[test]
fn marked_handler_answers_with_the_selected_profile_and_counts() {
    let mut h = MarkedHandler::new(policy(), fx::DRA_HOST, fx::DRA_REALM);
    let req = marked(fx::ccr_i_gx());
    match h.handle(P1, &req) {
        MarkedResponse::Answer(a) => {
            assert_eq!(a.result_code(), Some(3002));
            assert_eq!(error_message(&a), Some("p1 gx ccr-i"));
            assert_eq!(a.origin_host(), Some(fx::DRA_HOST));
            assert_eq!(a.hop_by_hop, req.hop_by_hop);
            assert!(!a.is_marked());
        }
        MarkedResponse::Discard => panic!("reject profile"),
    }
    let mut ccr_t = marked(fx::ccr_i_gx());
    for a in &mut ccr_t.avps {
        if a.code == avp_code::CC_REQUEST_TYPE {
            *a = Avp::enumerated(avp_code::CC_REQUEST_TYPE, 3).mandatory();
        }
    }
    match h.handle(P1, &ccr_t) {
        MarkedResponse::Answer(a) => {
            assert_eq!(a.result_code(), Some(5012));
            assert!(!a.is_error(), "5012: no E bit");
            assert_eq!(u32_of(&a, avp_code::CC_REQUEST_TYPE), Some(3));
        }
        MarkedResponse::Discard => panic!("reject profile"),
    }
    assert_eq!(h.handle(P3, &req), MarkedResponse::Discard);
    let s = h.stats();
    assert_eq!((s.answered, s.discarded), (2, 1));
}
