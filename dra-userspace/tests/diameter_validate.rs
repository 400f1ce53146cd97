//! Requests that are answered with an error (RFC 6733 §7.1), and the answers themselves
//! (§6.2, §7.2, §7.5).

mod diameter_fixtures;

use diameter_fixtures as fx;
use dra::diameter::{
    Avp, Dictionary, Message, ProtocolError, answer_for, avp_code as c, command_code as cmd,
    decode, encode, result_code as rc, validate_request, vendor,
};
use dra_common::wire::{app, avp_flags, flags};

const APPS: &[u32] = &[app::GX, app::GY];

fn dict() -> &'static Dictionary {
    Dictionary::standard()
}

fn check(msg: &Message) -> Result<(), ProtocolError> {
    validate_request(msg, dict(), APPS)
}

/// Sends the error's answer over the wire and back, as the peer would see it.
fn answer_on_wire(err: &ProtocolError, req: &Message) -> Message {
    decode(&encode(&err.answer(req, fx::DRA_HOST, fx::DRA_REALM))).unwrap()
}

/// Checks that `msg` is refused with `expected`, whose Result-Code is `code`, and
/// returns the answer the peer gets.
fn refused(msg: &Message, expected: ProtocolError, code: u32) -> Message {
    let err = check(msg).unwrap_err();
    assert_eq!(err, expected);
    assert_eq!(err.result_code(), code);
    let ans = answer_on_wire(&err, msg);
    assert_eq!(ans.result_code(), Some(code));
    ans
}

/// `msg`'s refusal, which must be an invalid AVP length, with that AVP's code,
/// Vendor-Id, received length and dictionary name.
fn invalid_length(msg: &Message) -> (ProtocolError, (u32, Option<u32>, u32, &'static str)) {
    let err = check(msg).unwrap_err();
    let ProtocolError::InvalidAvpLength {
        code,
        vendor_id,
        length,
        name,
        ..
    } = err
    else {
        panic!("not an invalid AVP length: {err:?}");
    };
    (err, (code, vendor_id, length, name))
}

fn failed_avp_of(answer: &Message) -> Avp {
    let f = answer.find(c::FAILED_AVP).expect("Failed-AVP present");
    let inner = f.as_grouped().unwrap();
    assert_eq!(inner.len(), 1);
    inner.into_iter().next().unwrap()
}

/// Where the first top-level AVP with `code` stands in `msg`.
fn position_of(msg: &Message, code: u32) -> usize {
    msg.avps.iter().position(|a| a.code == code).unwrap()
}

/// `msg` with its first top-level AVP of `code` replaced by `avp`.
fn replaced(mut msg: Message, code: u32, avp: Avp) -> Message {
    let pos = position_of(&msg, code);
    msg.avps[pos] = avp;
    msg
}

#[test]
fn well_formed_requests_pass() {
    for msg in [
        fx::cer(),
        fx::dwr(),
        fx::dpr(),
        fx::ccr_i_gx(),
        fx::ccr_u_gy(),
    ] {
        assert_eq!(check(&msg), Ok(()), "{:?}", msg.command_code);
    }
    // Answers are checked for header bits and lengths only.
    for msg in [fx::cea(), fx::dwa_with_load(1), fx::cca_i_gx()] {
        assert_eq!(check(&msg), Ok(()));
    }
    // An answer of a command or application this node does not know is not refused.
    let odd = Message::answer(8_388_620, 16_777_236, 1, 1).with(Avp::u32(c::RESULT_CODE, 2001));
    assert_eq!(check(&odd), Ok(()));
    let mut odd_bits = odd.clone();
    odd_bits.flags |= 0x08;
    assert!(matches!(
        check(&odd_bits),
        Err(ProtocolError::InvalidHeaderBits { .. })
    ));
}

#[test]
fn a_marked_request_is_still_valid() {
    let mut msg = fx::ccr_i_gx();
    msg.flags |= flags::RATE_LIMIT_MARK;
    assert!(msg.is_marked());
    assert_eq!(check(&msg), Ok(()));
}

#[test]
fn bad_header_bits_are_answered_3008_with_the_e_bit() {
    let mut reserved = fx::ccr_i_gx();
    reserved.flags |= 0x02;
    let mut e_on_request = fx::ccr_i_gx();
    e_on_request.flags |= flags::E;
    let mut ccr_without_p = fx::ccr_i_gx();
    ccr_without_p.flags &= !flags::P;
    let cer_with_p = fx::cer().proxiable();
    for msg in [reserved, e_on_request, ccr_without_p, cer_with_p] {
        let expected = ProtocolError::InvalidHeaderBits {
            flags: msg.flags,
            command_code: msg.command_code,
        };
        let ans = refused(&msg, expected, rc::INVALID_HDR_BITS);
        assert_eq!(ans.result_code(), Some(3008));
        assert!(ans.is_error() && !ans.is_request());
        assert_eq!(ans.find(c::FAILED_AVP), None);
    }
}

#[test]
fn unsupported_application_is_answered_3007() {
    let mut msg = fx::ccr_i_gx();
    msg.application_id = 16_777_236; // Rx, not served here
    let expected = ProtocolError::ApplicationUnsupported {
        application_id: 16_777_236,
    };
    let ans = refused(&msg, expected, rc::APPLICATION_UNSUPPORTED);
    assert!(ans.is_error());
    assert_eq!(ans.application_id, 16_777_236);
    // A relay (application 0xffffffff advertised) accepts every application.
    assert_eq!(validate_request(&msg, dict(), &[app::RELAY]), Ok(()));
    // The common application is always served.
    assert_eq!(validate_request(&fx::dwr(), dict(), &[]), Ok(()));
}

#[test]
fn unknown_command_is_answered_3001() {
    let msg = Message::request(8_388_620, app::GX, 9, 9)
        .proxiable()
        .with(Avp::utf8(c::SESSION_ID, "s"));
    let expected = ProtocolError::CommandUnsupported {
        command_code: 8_388_620,
    };
    let ans = refused(&msg, expected, rc::COMMAND_UNSUPPORTED);
    assert!(ans.is_error());
    assert_eq!(ans.command_code, 8_388_620);
    assert_eq!(ans.session_id(), Some("s"));
}

#[test]
fn wrong_size_unsigned32_is_answered_5014_with_the_whole_avp() {
    let bad = Avp::octets(c::CC_REQUEST_NUMBER, [0, 0, 0, 0, 1]).mandatory(); // length 13
    let msg = replaced(fx::ccr_i_gx(), c::CC_REQUEST_NUMBER, bad.clone());
    let (err, got) = invalid_length(&msg);
    assert_eq!(err.result_code(), rc::INVALID_AVP_LENGTH);
    assert_eq!(got, (415, None, 13, "CC-Request-Number"));
    let ans = answer_on_wire(&err, &msg);
    assert_eq!(ans.result_code(), Some(5014));
    assert!(!ans.is_error(), "5xxx is not a protocol error");
    assert_eq!(failed_avp_of(&ans), bad);
    assert_eq!(
        ans.find(c::ERROR_MESSAGE).unwrap().as_utf8().unwrap(),
        "AVP CC-Request-Number (415) has an invalid length 13"
    );
}

#[test]
fn wrong_size_address_and_vendor_avp_are_5014() {
    let mut cer = fx::cer();
    cer.avps[2] = Avp::octets(c::HOST_IP_ADDRESS, [0, 1, 198, 18, 0]).mandatory();
    let (_, got) = invalid_length(&cer);
    assert_eq!(got, (257, None, 13, "Host-IP-Address"));

    let mut ccr = fx::ccr_i_gx();
    ccr.push(
        Avp::octets(c::IP_CAN_TYPE, [0, 5])
            .vendor(vendor::TGPP)
            .mandatory(),
    );
    let (_, got) = invalid_length(&ccr);
    assert_eq!(got, (1027, Some(10415), 14, "IP-CAN-Type"));
}

#[test]
fn bad_avp_inside_a_group_is_reported_inside_its_group() {
    let bad_child = Avp::octets(c::SUBSCRIPTION_ID_TYPE, [0, 1]).mandatory();
    let sid_data = Avp::utf8(c::SUBSCRIPTION_ID_DATA, "001010123456789").mandatory();
    let msg = with_subscription_id(
        Avp::grouped(c::SUBSCRIPTION_ID, vec![sid_data, bad_child.clone()]).mandatory(),
    );
    let (err, got) = invalid_length(&msg);
    assert_eq!(got, (450, None, 10, "Subscription-Id-Type"));
    // RFC 6733 §7.5: the group hierarchy down to the single offending AVP.
    let failed = failed_avp_of(&answer_on_wire(&err, &msg));
    assert_eq!(failed.code, c::SUBSCRIPTION_ID);
    assert!(failed.is_mandatory());
    assert_eq!(failed.as_grouped().unwrap(), vec![bad_child]);
}

#[test]
fn broken_group_structure_reports_a_zero_filled_inner_header() {
    // QoS-Information whose inner APN-AMBR-UL claims 200 bytes.
    let mut inner = Vec::new();
    Avp::u32(c::APN_AGGREGATE_MAX_BITRATE_UL, 1)
        .vendor(vendor::TGPP)
        .encode_into(&mut inner)
        .unwrap();
    inner[5..8].copy_from_slice(&200u32.to_be_bytes()[1..]);
    let qos = Avp::octets(c::QOS_INFORMATION, inner)
        .vendor(vendor::TGPP)
        .mandatory();
    let msg = replaced(fx::ccr_i_gx(), c::QOS_INFORMATION, qos);
    let (err, got) = invalid_length(&msg);
    assert_eq!(
        got,
        (1041, Some(10415), 200, "APN-Aggregate-Max-Bitrate-UL")
    );
    let failed = failed_avp_of(&answer_on_wire(&err, &msg));
    assert_eq!(failed.code, c::QOS_INFORMATION);
    assert_eq!(
        failed.as_grouped().unwrap(),
        vec![Avp::octets(c::APN_AGGREGATE_MAX_BITRATE_UL, [0; 4]).vendor(vendor::TGPP)]
    );
}

#[test]
fn avp_running_past_the_message_is_answered_5014_from_the_decode_error() {
    let msg = fx::ccr_i_gx();
    let mut bytes = encode(&msg);
    // CC-Request-Number (7th AVP) claims more bytes than the message has.
    let pos = position_of(&msg, c::CC_REQUEST_NUMBER);
    let off = 20
        + msg.avps[..pos]
            .iter()
            .map(Avp::padded_length)
            .sum::<usize>();
    bytes[off + 5..off + 8].copy_from_slice(&[0, 0x10, 0]);
    let err = decode(&bytes).unwrap_err();
    let req = err.partial().expect("header was sound");
    let pe = err.to_protocol_error(dict()).expect("answerable");
    assert_eq!(pe.result_code(), rc::INVALID_AVP_LENGTH);
    let ans = answer_on_wire(&pe, req);
    assert_eq!(
        (ans.hop_by_hop, ans.end_to_end),
        (msg.hop_by_hop, msg.end_to_end)
    );
    assert_eq!(ans.session_id(), Some(fx::SESSION));
    assert_eq!(ans.result_code(), Some(5014));
    // RFC 6733 §7.1.5: the header and a zero-filled payload of the type's minimum size.
    assert_eq!(
        failed_avp_of(&ans),
        Avp::u32(c::CC_REQUEST_NUMBER, 0).mandatory()
    );
}

#[test]
fn framing_decode_errors_are_not_answerable() {
    let mut bytes = encode(&fx::dwr());
    bytes[0] = 2;
    let err = decode(&bytes).unwrap_err();
    assert_eq!(err.to_protocol_error(dict()), None);
    assert_eq!(err.partial(), None);
}

#[test]
fn each_missing_ccr_avp_is_answered_5005_with_an_example() {
    let required = [
        (c::SESSION_ID, 0usize),
        (c::ORIGIN_HOST, 0),
        (c::ORIGIN_REALM, 0),
        (c::DESTINATION_REALM, 0),
        (c::AUTH_APPLICATION_ID, 4),
        (c::CC_REQUEST_TYPE, 4),
        (c::CC_REQUEST_NUMBER, 4),
    ];
    for (code, min) in required {
        let msg = fx::without(fx::ccr_i_gx(), code);
        let err = check(&msg).unwrap_err();
        assert_eq!(err.result_code(), rc::MISSING_AVP, "{code}");
        let ProtocolError::MissingAvp {
            code: got,
            vendor_id: None,
            name,
            ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(*got, code);
        let ans = answer_on_wire(&err, &msg);
        assert_eq!(ans.result_code(), Some(5005));
        assert!(!ans.is_error());
        let example = failed_avp_of(&ans);
        assert_eq!(example.code, code);
        assert_eq!(example.vendor_id, None);
        assert_eq!(example.data, vec![0; min], "{name}");
        assert!(example.is_mandatory());
        assert!(
            ans.find(c::ERROR_MESSAGE)
                .unwrap()
                .as_utf8()
                .unwrap()
                .contains(name)
        );
        // Without a Session-Id in the request there is none in the answer.
        assert_eq!(ans.session_id().is_some(), code != c::SESSION_ID);
    }
}

#[test]
fn gy_needs_service_context_id_and_gx_does_not() {
    let gy = fx::without(fx::ccr_u_gy(), c::SERVICE_CONTEXT_ID);
    assert!(matches!(
        check(&gy),
        Err(ProtocolError::MissingAvp { code: 461, .. })
    ));
    assert_eq!(check(&fx::ccr_i_gx()), Ok(()));
}

#[test]
fn base_commands_need_their_avps() {
    let cer = fx::without(fx::cer(), c::HOST_IP_ADDRESS);
    let err = check(&cer).unwrap_err();
    assert!(matches!(err, ProtocolError::MissingAvp { code: 257, .. }));
    // Address example: family + IPv4 zero-filled.
    assert_eq!(err.failed_avp().unwrap().data, vec![0; 6]);
    let dpr = fx::without(fx::dpr(), c::DISCONNECT_CAUSE);
    assert!(matches!(
        check(&dpr),
        Err(ProtocolError::MissingAvp { code: 273, .. })
    ));
    let dwr = fx::without(fx::dwr(), c::ORIGIN_REALM);
    assert!(matches!(
        check(&dwr),
        Err(ProtocolError::MissingAvp { code: 296, .. })
    ));
}

#[test]
fn answer_for_copies_ids_and_builds_the_answer_message_format() {
    let mut req = fx::ccr_i_gx();
    req.flags |= flags::T | flags::RATE_LIMIT_MARK;
    let pi1 = Avp::grouped(
        c::PROXY_INFO,
        vec![
            Avp::utf8(c::PROXY_HOST, "p1").mandatory(),
            Avp::octets(c::PROXY_STATE, *b"s1").mandatory(),
        ],
    )
    .mandatory();
    let pi2 = Avp::grouped(c::PROXY_INFO, vec![Avp::utf8(c::PROXY_HOST, "p2")]).mandatory();
    req.push(pi1.clone());
    req.push(pi2.clone());
    let ans = answer_for(
        &req,
        rc::UNABLE_TO_DELIVER,
        fx::DRA_HOST,
        fx::DRA_REALM,
        Some("rate limit exceeded"),
        None,
    );
    assert_eq!(ans.command_code, cmd::CREDIT_CONTROL);
    assert_eq!(ans.application_id, app::GX);
    assert_eq!(
        (ans.hop_by_hop, ans.end_to_end),
        (req.hop_by_hop, req.end_to_end)
    );
    // R, T and the mark cleared; P copied; E for a 3xxx.
    assert_eq!(ans.flags, flags::P | flags::E);
    let codes: Vec<u32> = ans.avps.iter().map(|a| a.code).collect();
    assert_eq!(
        codes,
        vec![
            c::SESSION_ID,
            c::ORIGIN_HOST,
            c::ORIGIN_REALM,
            c::RESULT_CODE,
            c::AUTH_APPLICATION_ID,
            c::CC_REQUEST_TYPE,
            c::CC_REQUEST_NUMBER,
            c::ERROR_MESSAGE,
            c::PROXY_INFO,
            c::PROXY_INFO,
        ]
    );
    assert_eq!(ans.session_id(), Some(fx::SESSION));
    assert_eq!(ans.origin_host(), Some(fx::DRA_HOST));
    assert_eq!(ans.origin_realm(), Some(fx::DRA_REALM));
    assert_eq!(ans.cc_request_type(), Some(1));
    assert_eq!(ans.find(c::CC_REQUEST_NUMBER).unwrap().as_u32(), Ok(0));
    assert_eq!(
        ans.find_all(c::PROXY_INFO).cloned().collect::<Vec<_>>(),
        vec![pi1, pi2]
    );
    let em = ans.find(c::ERROR_MESSAGE).unwrap();
    assert_eq!(
        em.flags & avp_flags::M,
        0,
        "Error-Message must not have M (RFC 6733 §7.3)"
    );
    for code in [c::ORIGIN_HOST, c::ORIGIN_REALM, c::RESULT_CODE] {
        assert!(ans.find(code).unwrap().is_mandatory());
    }
    assert_eq!(check(&ans), Ok(()));
}

#[test]
fn answer_e_bit_follows_the_result_code_class() {
    let dwr = fx::dwr();
    for (code, e) in [
        (2001, false),
        (3002, true),
        (3004, true),
        (3005, true),
        (5012, false),
        (4010, false),
    ] {
        let ans = answer_for(&dwr, code, fx::DRA_HOST, fx::DRA_REALM, None, None);
        assert_eq!(ans.is_error(), e, "{code}");
        assert!(!ans.is_proxiable());
        assert_eq!(ans.find(c::ERROR_MESSAGE), None);
        assert_eq!(ans.find(c::SESSION_ID), None);
        // Non-CCR answers carry no CC AVPs.
        assert_eq!(ans.avps.len(), 3);
    }
}

#[test]
fn result_code_names() {
    assert_eq!(
        rc::name(rc::UNABLE_TO_DELIVER),
        Some("DIAMETER_UNABLE_TO_DELIVER")
    );
    assert_eq!(rc::name(rc::UNKNOWN_PEER), Some("DIAMETER_UNKNOWN_PEER"));
    assert_eq!(
        rc::name(rc::NO_COMMON_APPLICATION),
        Some("DIAMETER_NO_COMMON_APPLICATION")
    );
    assert_eq!(rc::name(9999), None);
    assert!(rc::is_protocol_error(rc::LOOP_DETECTED) && !rc::is_protocol_error(rc::MISSING_AVP));
}

#[test]
fn dictionary_knows_the_dra_avps_and_commands() {
    let d = dict();
    for (code, vendor_id, name) in [
        (263, None, "Session-Id"),
        (297, None, "Experimental-Result"),
        (443, None, "Subscription-Id"),
        (456, None, "Multiple-Services-Credit-Control"),
        (623, None, "OC-OLR"),
        (650, None, "Load"),
        (649, None, "SourceID"),
        (1001, Some(10415), "Charging-Rule-Install"),
        (628, Some(10415), "Supported-Features"),
        (1032, Some(10415), "RAT-Type"),
    ] {
        assert_eq!(d.avp_name(code, vendor_id), name);
    }
    assert_eq!(d.avp_name(1001, None), "Unknown-AVP");
    assert_eq!(
        d.avp(652, None).unwrap().data_type,
        dra::diameter::DataType::Unsigned64
    );
    for (code, req, ans) in [
        (257, "CER", "CEA"),
        (280, "DWR", "DWA"),
        (282, "DPR", "DPA"),
        (272, "CCR", "CCA"),
        (258, "RAR", "RAA"),
        (274, "ASR", "ASA"),
        (275, "STR", "STA"),
    ] {
        let def = d.command(code).unwrap();
        assert_eq!((def.request_abbrev, def.answer_abbrev), (req, ans));
    }
}

/// A Subscription-Id nesting `levels` Subscription-Ids (each Grouped), the innermost
/// holding a Subscription-Id-Data, built as bytes in one pass (the test's own encoder:
/// 8-byte AVP headers, M bit, lengths computed from the inside out).
fn nested_subscription_id(levels: usize) -> Avp {
    let leaf = b"001010123456789\0"; // 16 bytes, no padding needed
    let leaf_len = 8 + leaf.len();
    let mut data = Vec::with_capacity(levels * 8 + leaf_len);
    for i in 1..levels {
        let len = (levels - i) * 8 + leaf_len;
        data.extend_from_slice(&c::SUBSCRIPTION_ID.to_be_bytes());
        data.push(avp_flags::M);
        data.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    }
    data.extend_from_slice(&c::SUBSCRIPTION_ID_DATA.to_be_bytes());
    data.push(avp_flags::M);
    data.extend_from_slice(&(leaf_len as u32).to_be_bytes()[1..]);
    data.extend_from_slice(leaf);
    Avp::octets(c::SUBSCRIPTION_ID, data).mandatory()
}

fn with_subscription_id(avp: Avp) -> Message {
    replaced(fx::ccr_i_gx(), c::SUBSCRIPTION_ID, avp)
}

#[test]
fn grouped_nesting_up_to_the_limit_passes() {
    use dra::diameter::validate::MAX_GROUPED_DEPTH;
    // Top level (depth 0) to depth MAX_GROUPED_DEPTH − 1 are groups; the leaf is at the
    // limit.
    let msg = with_subscription_id(nested_subscription_id(MAX_GROUPED_DEPTH));
    assert_eq!(check(&msg), Ok(()));
}

/// ~64 KiB of Grouped AVPs nested 8,000 deep (the hostile message that cost the agent
/// ~90 ms per message and could exhaust a debug build's stack): answered 5004 at the
/// depth limit, with a Failed-AVP of 17 headers, after a walk that stops there.
#[test]
fn grouped_nesting_beyond_the_limit_is_answered_5004() {
    use dra::diameter::validate::MAX_GROUPED_DEPTH;
    for levels in [MAX_GROUPED_DEPTH + 1, 8000] {
        let msg = with_subscription_id(nested_subscription_id(levels));
        let wire = encode(&msg);
        assert!(levels < 1000 || wire.len() > 64_000, "{} bytes", wire.len());
        let err = check(&decode(&wire).unwrap()).unwrap_err();
        assert_eq!(
            err.result_code(),
            rc::INVALID_AVP_VALUE,
            "{levels} levels: {err}"
        );
        assert!(matches!(
            err,
            ProtocolError::GroupedTooDeep {
                code: c::SUBSCRIPTION_ID,
                limit: MAX_GROUPED_DEPTH,
                ..
            }
        ));
        // RFC 6733 §7.5: Failed-AVP holds the group hierarchy down to the offending AVP
        // (its header only: its data is the rest of the nesting).
        let answer = answer_on_wire(&err, &msg);
        assert_eq!(answer.result_code(), Some(rc::INVALID_AVP_VALUE));
        let mut a = failed_avp_of(&answer);
        let mut depth = 0;
        while !a.data.is_empty() {
            assert_eq!(a.code, c::SUBSCRIPTION_ID);
            let mut inner = a.as_grouped().unwrap();
            assert_eq!(inner.len(), 1, "single-child groups");
            a = inner.remove(0);
            depth += 1;
        }
        assert_eq!(depth, MAX_GROUPED_DEPTH, "wrapped in its enclosing groups");
        assert!(encode(&answer).len() < 512);
    }
}
