//! Wire check of everything the peer state machine emits: CER, CEA (2001, 3010, 5010),
//! DWR, DWA with an RFC 8583 Load AVP, DPR, DPA — produced by real exchanges on fake
//! time, written into a pcap and decoded by tshark's Diameter dissector.

mod support;

use std::time::Duration;

use dra::diameter::peer::{ConnectionOptions, DisconnectCause};
use dra::diameter::{Dictionary, result_code};
use dra_common::wire::cmd;
use support::peer::*;
use support::{assert_clean, assert_decoded, diameter_pdus, pdu_field, require_tshark};

/// Every kind of message the state machine sends, from real exchanges.
fn exchanges() -> Vec<Wire> {
    let mut wire = Vec::new();

    // PGW ↔ DRA: CER/CEA 2001, DWR/DWA with the DRA's load, DPR/DPA.
    let mut dra = dra_config();
    dra.tw = Duration::from_secs(600);
    dra.origin_state_id = Some(5);
    let mut p = Pair::pgw_to_dra_full(
        pgw_config(),
        ConnectionOptions::new(11, START_TIME),
        dra,
        directory(7, PGW_HOST, &["198.18.0.0/24"]),
        ConnectionOptions::new(12, START_TIME).own_load(40_000),
    );
    p.connect();
    let t = p.client.conn.poll_timeout().expect("watchdog");
    p.run_until(t);
    p.client
        .conn
        .start_disconnect(p.now, DisconnectCause::DoNotWantToTalkToYou);
    p.drive();
    wire.extend(p.wire);

    // Unknown Origin-Host: CEA 3010 (E bit).
    let mut p = Pair::pgw_to_dra_full(
        pgw_config(),
        ConnectionOptions::new(21, START_TIME),
        dra_config(),
        directory(7, "pgw9.epc.example.net", &["198.18.0.0/24"]),
        ConnectionOptions::new(22, START_TIME),
    );
    p.connect();
    wire.extend(p.wire);

    // No common application: CEA 5010.
    let mut s6a_only = dra_config();
    s6a_only.auth_application_ids = vec![16_777_251];
    let mut p = Pair::pgw_to_dra_with(
        pgw_config(),
        s6a_only,
        ConnectionOptions::new(31, START_TIME),
    );
    p.connect();
    wire.extend(p.wire);
    wire
}

#[test]
fn tshark_decodes_every_peer_message_cleanly() {
    let wire = exchanges();
    // The exchanges produced exactly the message kinds under test.
    let kinds: Vec<(u32, bool, Option<u32>)> = wire
        .iter()
        .map(|w| (w.msg.command_code, w.msg.is_request(), w.msg.result_code()))
        .collect();
    let ce = cmd::CAPABILITIES_EXCHANGE;
    let ok = Some(result_code::SUCCESS);
    assert_eq!(
        kinds,
        [
            (ce, true, None),
            (ce, false, ok),
            (cmd::DEVICE_WATCHDOG, true, None),
            (cmd::DEVICE_WATCHDOG, false, ok),
            (cmd::DISCONNECT_PEER, true, None),
            (cmd::DISCONNECT_PEER, false, ok),
            (ce, true, None),
            (ce, false, Some(result_code::UNKNOWN_PEER)),
            (ce, true, None),
            (ce, false, Some(result_code::NO_COMMON_APPLICATION)),
        ]
    );
    require_tshark();
    let decoded = tshark_decode(&wire);
    assert_clean(&decoded);

    // One Diameter PDU per message, each with the command name and flags we sent.
    let dict = Dictionary::standard();
    let blocks = diameter_pdus(&decoded);
    assert_eq!(blocks.len(), wire.len(), "one Diameter PDU per message");
    for (block, w) in blocks.iter().zip(&wire) {
        let def = dict.command(w.msg.command_code).expect("command");
        let field = |prefix: &str| {
            pdu_field(block, prefix).unwrap_or_else(|| panic!("no {prefix:?} in:\n{block}"))
        };
        assert_eq!(
            field("    Command Code: "),
            format!("{} ({})", def.name, w.msg.command_code)
        );
        assert!(field("    Flags: ").starts_with(&format!("0x{:02x}", w.msg.flags)));
    }
    assert_decoded(
        &decoded,
        "the peer exchanges",
        &[
            "Result-Code: DIAMETER_SUCCESS (2001)",
            "Result-Code: DIAMETER_UNKNOWN_PEER (3010)",
            "Result-Code: DIAMETER_NO_COMMON_APPLICATION (5010)",
            "Host-IP-Address Address: 198.18.0.1",
            "Host-IP-Address Address: 2001:db8::1",
            "Host-IP-Address Address: 198.18.0.2",
            "Product-Name: pgw-sim",
            "Load-Type: PEER (1)",
            "Load-Value: 40000",
            "SourceID: dra1.epc.example.net",
            "Disconnect-Cause: DO_NOT_WANT_TO_TALK_TO_YOU (2)",
            "Auth-Application-Id: Relay (4294967295)",
        ],
    );
    // Only the 3010 answer has the E bit.
    assert_eq!(decoded.matches("..1. .... = Error: Set").count(), 1);
}

/// Writes the messages as one TCP connection and returns tshark's verbose decode.
fn tshark_decode(wire: &[Wire]) -> String {
    let exchange: Vec<(bool, Vec<u8>)> = wire
        .iter()
        .map(|m| (m.from_client, m.msg.encode()))
        .collect();
    support::tshark_decode("peer", &exchange)
}
