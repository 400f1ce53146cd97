//! Wire check: the messages the relay writes (relayed request with Route-Record, retry
//! with the T flag, restored answer, generated 3002/3004/3005/5012 answers, the answer
//! to a marked request), in a pcap, decode cleanly in tshark's Diameter dissector.

mod support;

use std::time::Duration;

use dra::diameter::{Avp, Message, avp_code, result_code};
use dra::relay::{
    DownstreamRef, Expired, RejectProfile, Relay, RelayConfig, RetryOutcome, reject_marked,
};
use dra::routing::PeerId;
use dra_common::wire::flags;
use support::diameter_fixtures as fx;
use support::{
    assert_clean, assert_decoded, diameter_pdus, pdu_field, require_tshark, tshark_decode,
};

/// (flags line, Hop-by-Hop line, Result-Code or "") of each Diameter PDU, in order.
fn pdus(decoded: &str) -> Vec<(String, String, String)> {
    diameter_pdus(decoded)
        .into_iter()
        .map(|block| {
            let field = |prefix: &str| pdu_field(block, prefix).unwrap_or_default().to_owned();
            (
                field("    Flags: "),
                field("    Hop-by-Hop Identifier: "),
                field("        Result-Code: "),
            )
        })
        .collect()
}

#[test]
fn tshark_decodes_relayed_and_generated_messages_cleanly() {
    require_tshark();
    let pgw = DownstreamRef { conn_id: 1 };
    let (pcrf1, pcrf2) = (PeerId(1), PeerId(2));
    let timeout = Duration::from_secs(2);
    let mut relay = Relay::new(RelayConfig {
        own_host: fx::DRA_HOST.to_owned(),
        own_realm: fx::DRA_REALM.to_owned(),
        capacity: 2,
        hop_by_hop_seed: 0x7000_0000,
    });
    let t0 = Duration::ZERO;

    // 1. Relayed with Route-Record; no answer → retry on PCRF2 with T; answered.
    let ccr = fx::ccr_i_gx();
    let relayed = relay
        .forward(t0, pgw, fx::PGW_HOST, ccr.clone(), pcrf1, timeout)
        .expect("relayed");
    let retry = match relay.handle_timeout(timeout).remove(0) {
        Expired::Retry(r) => r,
        Expired::Answer(a) => panic!("{a:?}"),
    };
    let retried = match relay.retry(timeout, retry, Some(pcrf2), timeout) {
        RetryOutcome::Send { request, .. } => request,
        other => panic!("{other:?}"),
    };
    let mut cca = fx::cca_i_gx();
    cca.hop_by_hop = retried.hop_by_hop;
    cca.end_to_end = retried.end_to_end;
    let restored = relay
        .on_answer(pcrf2, cca.clone())
        .expect("delivered")
        .answer;

    // 2. Forwarded, then both attempts time out → 3002.
    let ccr_u = fx::ccr_u_gy();
    let fwd_u = relay
        .forward(timeout, pgw, fx::PGW_HOST, ccr_u.clone(), pcrf1, timeout)
        .expect("relayed");
    let r2 = match relay.handle_timeout(timeout * 2).remove(0) {
        Expired::Retry(r) => r,
        Expired::Answer(a) => panic!("{a:?}"),
    };
    let RetryOutcome::Send { .. } = relay.retry(timeout * 2, r2, Some(pcrf2), timeout) else {
        panic!("retry")
    };
    let ans_3002 = match relay.handle_timeout(timeout * 3).remove(0) {
        Expired::Answer(d) => d.answer,
        Expired::Retry(r) => panic!("{r:?}"),
    };
    assert_eq!(ans_3002.result_code(), Some(result_code::UNABLE_TO_DELIVER));

    // 3. Loop → 3005.
    let looped = fx::ccr_i_gx().with(Avp::utf8(avp_code::ROUTE_RECORD, fx::DRA_HOST).mandatory());
    let ans_3005 = relay
        .forward(
            timeout * 3,
            pgw,
            fx::PGW_HOST,
            looped.clone(),
            pcrf1,
            timeout,
        )
        .expect_err("loop")
        .into_answer()
        .expect("3005");

    // 4. Table full → 3004.
    for i in 0..2u32 {
        let mut c = fx::ccr_i_gx();
        c.end_to_end = 0xbbbb_0000 + i;
        c.hop_by_hop = 0x2222_0000 + i;
        relay
            .forward(timeout * 3, pgw, fx::PGW_HOST, c, pcrf1, timeout)
            .expect("room");
    }
    let busy = fx::ccr_u_gy();
    let ans_3004 = relay
        .forward(timeout * 3, pgw, fx::PGW_HOST, busy.clone(), pcrf1, timeout)
        .expect_err("full")
        .into_answer()
        .expect("3004");

    // 5. Marked requests: default profile (3002) and a 5012 profile.
    let mut marked = fx::ccr_i_gx();
    marked.hop_by_hop = 0x3333_0001;
    marked.flags |= flags::RATE_LIMIT_MARK;
    let ans_marked = reject_marked(
        &marked,
        &RejectProfile::default(),
        fx::DRA_HOST,
        fx::DRA_REALM,
    );
    let mut marked_u = fx::ccr_u_gy();
    marked_u.hop_by_hop = 0x3333_0002;
    marked_u.flags |= flags::RATE_LIMIT_MARK;
    let ans_5012 = reject_marked(
        &marked_u,
        &RejectProfile {
            result_code: result_code::UNABLE_TO_COMPLY,
            error_message: "rate limit Gy CCR-U exceeded".to_owned(),
        },
        fx::DRA_HOST,
        fx::DRA_REALM,
    );

    // The marked requests themselves never go on the wire (the mark is a reserved bit
    // tshark would flag); each answer follows the request it answers, with the mark
    // cleared on the request copy we write.
    let unmark = |mut m: Message| {
        m.clear_mark();
        m
    };
    let msgs: Vec<(bool, Message, &str)> = vec![
        (true, ccr.clone(), "downstream CCR-I"),
        (true, relayed.clone(), "relayed CCR-I with Route-Record"),
        (true, retried.clone(), "retried CCR-I with T"),
        (false, cca.clone(), "PCRF CCA-I"),
        (false, restored.clone(), "restored CCA-I"),
        (true, ccr_u.clone(), "downstream CCR-U"),
        (true, fwd_u.clone(), "relayed CCR-U"),
        (false, ans_3002.clone(), "3002"),
        (true, looped.clone(), "looped CCR-I"),
        (false, ans_3005.clone(), "3005"),
        (true, busy.clone(), "CCR-U when full"),
        (false, ans_3004.clone(), "3004"),
        (true, unmark(marked.clone()), "marked CCR-I"),
        (false, ans_marked.clone(), "marked 3002"),
        (true, unmark(marked_u.clone()), "marked CCR-U"),
        (false, ans_5012.clone(), "5012"),
    ];
    let exchange: Vec<(bool, Vec<u8>)> = msgs.iter().map(|(c, m, _)| (*c, m.encode())).collect();
    let decoded = tshark_decode("relay-relay", &exchange);
    assert_clean(&decoded);

    let got = pdus(&decoded);
    assert_eq!(got.len(), msgs.len(), "one Diameter PDU per message");
    for ((_, m, what), (fl, hbh, rc)) in msgs.iter().zip(&got) {
        assert!(
            fl.starts_with(&format!("0x{:02x}", m.flags)),
            "{what}: flags {fl}"
        );
        assert!(
            hbh.starts_with(&format!("0x{:08x}", m.hop_by_hop)),
            "{what}: Hop-by-Hop {hbh}"
        );
        if let Some(code) = m.result_code() {
            assert!(
                rc.contains(&format!("({code})")),
                "{what}: Result-Code {rc:?}"
            );
        }
    }
    // Relayed request: R|P and one Route-Record; retry: R|P|T.
    assert_eq!(got[1].0, "0xc0, Request, Proxyable");
    assert_eq!(
        got[2].0,
        "0xd0, Request, Proxyable, T(Potentially re-transmitted message)"
    );
    assert!(decoded.contains(&format!("Route-Record: {}", fx::PGW_HOST)));
    assert!(decoded.contains(&format!("Route-Record: {}", fx::DRA_HOST)));
    // Restored answer: the downstream's Hop-by-Hop id.
    assert_eq!(restored.hop_by_hop, ccr.hop_by_hop);
    // Generated answers: E bit for 3xxx only.
    for i in [7, 9, 11, 13] {
        assert!(got[i].0.contains("Error"), "{}: {}", msgs[i].2, got[i].0);
    }
    assert!(!got[15].0.contains("Error"), "5012: {}", got[15].0);
    assert!(!got[4].0.contains("Error"));
    assert_decoded(
        &decoded,
        "the relayed messages",
        &[
            "Result-Code: DIAMETER_UNABLE_TO_DELIVER (3002)",
            "Result-Code: DIAMETER_TOO_BUSY (3004)",
            "Result-Code: DIAMETER_LOOP_DETECTED (3005)",
            "Result-Code: DIAMETER_UNABLE_TO_COMPLY (5012)",
            "Error-Message: rate limit exceeded",
            "Error-Message: rate limit Gy CCR-U exceeded",
            "after one retry",
        ],
    );
}
