//! Wire check: our encodings, written into a pcap, decode cleanly in tshark's Diameter
//! dissector (an independent implementation of RFC 6733 / RFC 4006 / TS 29.212).

mod support;

use dra::diameter::{Dictionary, Message, answer_for, avp_code, result_code, validate_request};
use dra_common::wire::app;
use support::diameter_fixtures as fx;
use support::{
    assert_clean, assert_decoded, diameter_pdus, pdu_field, require_tshark, tshark_decode,
};

#[test]
fn tshark_decodes_every_message_cleanly() {
    require_tshark();
    let dict = Dictionary::standard();
    let ccr = fx::ccr_i_gx();
    // DRA refuses a CCR-I: unable to deliver (3002), E bit, Error-Message.
    let cca_3002 = answer_for(
        &ccr,
        result_code::UNABLE_TO_DELIVER,
        fx::DRA_HOST,
        fx::DRA_REALM,
        Some("rate limit Gx CCR-I 200/s exceeded"),
        None,
    );
    assert!(cca_3002.is_error());
    // A CCR without CC-Request-Type is answered 5005 with a Failed-AVP.
    let broken = fx::without(fx::ccr_i_gx(), avp_code::CC_REQUEST_TYPE);
    let err = validate_request(&broken, dict, &[app::GX]).expect_err("missing AVP");
    let cca_5005 = err.answer(&broken, fx::DRA_HOST, fx::DRA_REALM);
    assert_eq!(cca_5005.result_code(), Some(result_code::MISSING_AVP));

    let msgs: Vec<(bool, Message, &str)> = vec![
        (true, fx::cer(), "Capabilities-Exchange Request"),
        (false, fx::cea(), "Capabilities-Exchange Answer"),
        (true, fx::dwr(), "Device-Watchdog Request"),
        (false, fx::dwa(), "Device-Watchdog Answer"),
        (true, ccr.clone(), "Credit-Control Request"),
        (false, cca_3002, "Credit-Control Answer"),
        (true, broken, "Credit-Control Request"),
        (false, cca_5005, "Credit-Control Answer"),
        (true, fx::ccr_u_gy(), "Credit-Control Request"),
        (false, fx::cca_i_gx(), "Credit-Control Answer"),
        (true, fx::dwr(), "Device-Watchdog Request"),
        (
            false,
            fx::dwa_with_load(0x0123_4567),
            "Device-Watchdog Answer",
        ),
        (true, fx::dpr(), "Disconnect-Peer Request"),
        (false, fx::dpa(), "Disconnect-Peer Answer"),
    ];
    let exchange: Vec<(bool, Vec<u8>)> = msgs.iter().map(|(c, m, _)| (*c, m.encode())).collect();
    let decoded = tshark_decode("diameter-exchange", &exchange);
    assert_clean(&decoded);

    // Every message is dissected as Diameter, in order, with its command name (from
    // our dictionary, which must agree with Wireshark's) and its flags.
    let headers: Vec<(String, String)> = diameter_pdus(&decoded)
        .into_iter()
        .map(|block| {
            let field = |prefix: &str| {
                pdu_field(block, prefix)
                    .unwrap_or_else(|| panic!("no {prefix:?} in Diameter block:\n{block}"))
                    .to_owned()
            };
            (field("    Flags: "), field("    Command Code: "))
        })
        .collect();
    assert_eq!(
        headers.len(),
        msgs.len(),
        "one Diameter PDU per message: {headers:#?}"
    );
    for ((_, m, summary), (flags, command)) in msgs.iter().zip(&headers) {
        let def = dict.command(m.command_code).expect("command in dictionary");
        assert_eq!(
            command,
            &format!("{} ({})", def.name, m.command_code),
            "{summary}"
        );
        assert!(summary.starts_with(def.name), "{summary} vs {}", def.name);
        assert!(
            flags.starts_with(&format!("0x{:02x}", m.flags)),
            "{summary}: {flags}"
        );
        let kind = if m.is_request() { "Request" } else { "Answer" };
        assert!(summary.ends_with(kind));
    }
    // Specific fields came through as we meant them.
    assert_decoded(
        &decoded,
        "the messages",
        &[
            "Result-Code: DIAMETER_UNABLE_TO_DELIVER (3002)",
            "Error-Message: rate limit Gx CCR-I 200/s exceeded",
            "Result-Code: DIAMETER_MISSING_AVP (5005)",
            "Failed-AVP",
            "Load-Value: 19088743",
            "Host-IP-Address Address: 2001:db8::1",
            "Host-IP-Address Address: 198.18.0.1",
            "Subscription-Id-Data: 001010123456789",
            "CC-Total-Octets: 12345678901",
        ],
    );
    // The E bit is set on the 3002 answer only.
    assert_eq!(decoded.matches("..1. .... = Error: Set").count(), 1);
    assert_eq!(headers[5].0, "0x60, Proxyable, Error");
}

/// The check above is not vacuous: tshark does flag a wrongly encoded message.
#[test]
fn tshark_flags_a_wrongly_sized_avp() {
    require_tshark();
    // Origin-State-Id is Unsigned32; 3 bytes of data is malformed (RFC 6733 §4.2).
    let bad = fx::dwa().with(dra::diameter::Avp::octets(
        avp_code::ORIGIN_STATE_ID,
        [0, 0, 1],
    ));
    let decoded = tshark_decode(
        "diameter-bad",
        &[(true, fx::dwr().encode()), (false, bad.encode())],
    );
    assert!(
        ["Malformed", "Expert Info (Error", "[Malformed"]
            .iter()
            .any(|b| decoded.contains(b)),
        "tshark did not flag a 3-byte Unsigned32:\n{decoded}"
    );
}
