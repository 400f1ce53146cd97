//! Capabilities exchange between a client and a server state machine on fake time
//! (RFC 6733 §5.3, §5.6).

mod peer_support;

use std::sync::Arc;
use std::time::Duration;

use dra::diameter::peer::{
    CloseReason, ConnectionOptions, Handled, PeerConfigError, PeerConnection, PeerEvent, PeerState,
    Reconnect, Role, StaticPeerDirectory, WatchdogState,
};
use dra::diameter::{Avp, Message, avp_code as c, result_code, vendor};
use dra::routing::PeerId;
use dra_common::wire::{app, cmd};
use peer_support::*;

const CE: u32 = cmd::CAPABILITIES_EXCHANGE;

fn addresses(msg: &Message) -> Vec<std::net::IpAddr> {
    msg.find_all(c::HOST_IP_ADDRESS)
        .map(|a| a.as_address().expect("Address"))
        .collect()
}

#[test]
fn pgw_opens_a_connection_to_the_dra() {
    let mut p = Pair::pgw_to_dra();
    p.connect();

    // CER from the PGW, CEA 2001 from the DRA, nothing else.
    assert_eq!(p.wire_summary(), [(true, CE, true), (false, CE, false)]);
    let cer = &p.wire[0].msg;
    let cea = &p.wire[1].msg;
    assert_eq!(cer.origin_host(), Some(PGW_HOST));
    assert_eq!(addresses(cer), [ip(PGW_ADDR), ip(PGW_ADDR6)]);
    assert_eq!(
        cer.find(c::PRODUCT_NAME).unwrap().as_utf8().unwrap(),
        "pgw-sim"
    );
    assert_eq!(cea.result_code(), Some(result_code::SUCCESS));
    assert!(!cea.is_error());
    assert_eq!(
        (cea.hop_by_hop, cea.end_to_end),
        (cer.hop_by_hop, cer.end_to_end)
    );
    // End-to-End: high 12 bits from the start time (RFC 6733 §3).
    assert_eq!(cer.end_to_end >> 20, (START_TIME & 0xfff) as u32);
    assert_eq!(cea.origin_host(), Some(DRA_HOST));
    assert_eq!(addresses(cea), [ip(DRA_ADDR)]);
    assert_eq!(cea.find(c::VENDOR_ID).unwrap().as_u32().unwrap(), 0);
    assert_eq!(cea.find(c::PRODUCT_NAME).unwrap().as_utf8().unwrap(), "dra");
    assert_eq!(
        cea.find(c::AUTH_APPLICATION_ID).unwrap().as_u32().unwrap(),
        app::RELAY
    );

    for end in [&p.client, &p.server] {
        assert_eq!(end.conn.state(), PeerState::Open);
        assert!(end.conn.is_open() && end.conn.in_service());
        assert_eq!(end.conn.watchdog_state(), WatchdogState::Okay);
        assert!(!end.closed);
    }
    // The DRA learned the PGW's identity and addresses from the CER.
    let id = p.server.conn.peer_identity().expect("identity");
    assert_eq!(id.origin_host, PGW_HOST);
    assert_eq!(id.origin_realm, REALM);
    assert_eq!(id.host_ip_addresses, [ip(PGW_ADDR), ip(PGW_ADDR6)]);
    assert_eq!(id.vendor_id, vendor::TGPP);
    assert_eq!(id.product_name, "pgw-sim");
    assert_eq!(id.firmware_revision, Some(3));
    assert_eq!(id.origin_state_id, Some(17));
    let known = p.server.conn.known_peer().unwrap();
    assert_eq!((known.id, known.name.as_str()), (PeerId(7), PGW_HOST));
    // Relay on the DRA: the common applications are the PGW's Gy and Gx.
    match &p.server.event_list()[..] {
        [
            PeerEvent::Opened {
                peer,
                identity,
                applications,
            },
        ] => {
            assert_eq!(peer.id, PeerId(7));
            assert_eq!(identity.origin_host, PGW_HOST);
            assert_eq!(applications.auth, [app::GY, app::GX]);
        }
        other => panic!("server events {other:?}"),
    }
    match &p.client.event_list()[..] {
        [
            PeerEvent::Opened {
                identity,
                applications,
                ..
            },
        ] => {
            assert_eq!(identity.origin_host, DRA_HOST);
            assert_eq!(identity.host_ip_addresses, [ip(DRA_ADDR)]);
            assert_eq!(applications.auth, [app::GY, app::GX]);
        }
        other => panic!("client events {other:?}"),
    }
    assert!(p.client.conn.applications().unwrap().supports(app::GX));
    assert!(!p.client.conn.applications().unwrap().supports(16_777_251));
}

#[test]
fn dra_opens_a_connection_to_a_pcrf() {
    let mut p = Pair::new(
        dra_config(),
        directory(3, PCRF_HOST, &["198.18.0.3/32"]),
        ConnectionOptions::new(5, START_TIME),
        DRA_ADDR,
        pcrf_config(),
        directory(0, DRA_HOST, &["198.18.0.2/32"]),
        ConnectionOptions::new(6, START_TIME),
        PCRF_ADDR,
    );
    p.connect();
    assert!(p.client.conn.in_service() && p.server.conn.in_service());
    // The PCRF (not a relay) shares Gx with the relaying DRA.
    assert_eq!(p.server.conn.applications().unwrap().auth, [app::GX]);
    assert_eq!(p.client.conn.applications().unwrap().auth, [app::GX]);
    assert_eq!(p.client.conn.known_peer().unwrap().id, PeerId(3));
    assert_eq!(
        p.client.conn.peer_identity().unwrap().product_name,
        "pcrf-sim"
    );
}

/// The PGW connecting to the DRA, whose directory is `dra_directory`; nothing
/// exchanged yet.
fn pgw_to_dra(dra_directory: Arc<StaticPeerDirectory>) -> Pair {
    let pgw_opts = ConnectionOptions::new(1, START_TIME);
    Pair::pgw_to_dra_in(pgw_config(), dra_config(), pgw_opts, dra_directory)
}

/// The server refused: CEA `code` went out, and both ends closed.
fn assert_refused(p: &Pair, code: u32, error_bit: bool) {
    assert_eq!(p.wire_summary(), [(true, CE, true), (false, CE, false)]);
    let cea = &p.wire[1].msg;
    assert_eq!(cea.result_code(), Some(code));
    assert_eq!(cea.is_error(), error_bit, "E bit for protocol errors only");
    assert!(cea.find(c::ERROR_MESSAGE).is_some());
    // The refusing CEA still carries our identity (RFC 6733 §5.3.2).
    assert_eq!(cea.origin_host(), Some(DRA_HOST));
    assert_eq!(addresses(cea), [ip(DRA_ADDR)]);
    assert_eq!(
        p.server.event_list(),
        [PeerEvent::Closed {
            reason: CloseReason::Refused { result_code: code },
            reconnect: Reconnect::No,
        }]
    );
    match &p.client.event_list()[..] {
        [
            PeerEvent::Rejected {
                result_code,
                error_message: Some(_),
            },
            PeerEvent::Closed {
                reason: CloseReason::Rejected { result_code: r2 },
                reconnect: Reconnect::After(tc),
            },
        ] => {
            assert_eq!((*result_code, *r2), (code, code));
            assert_eq!(*tc, Duration::from_secs(30));
        }
        other => panic!("client events {other:?}"),
    }
    for end in [&p.client, &p.server] {
        assert_eq!(end.conn.state(), PeerState::Closed);
        assert!(!end.conn.in_service());
        assert!(end.conn.peer_identity().is_none());
        assert_eq!(end.conn.poll_timeout(), None);
    }
}

#[test]
fn unknown_origin_host_gets_3010_and_the_connection_closes() {
    let mut p = pgw_to_dra(directory(7, "pgw9.epc.example.net", &["198.18.0.0/24"]));
    p.connect();
    assert_refused(&p, result_code::UNKNOWN_PEER, true);
}

#[test]
fn known_host_from_the_wrong_address_gets_3010() {
    let mut p = pgw_to_dra(
        // The PGW may only connect from 198.18.9.0/24; it comes from 198.18.0.1.
        directory(7, PGW_HOST, &["198.18.9.0/24"]),
    );
    p.connect();
    assert_refused(&p, result_code::UNKNOWN_PEER, true);
}

#[test]
fn no_common_application_gets_5010() {
    // A server for S6a only; the PGW speaks Gx and Gy.
    let mut hss = dra_config();
    hss.auth_application_ids = vec![16_777_251];
    let mut p = Pair::pgw_to_dra_with(pgw_config(), hss, ConnectionOptions::new(1, START_TIME));
    p.connect();
    assert_refused(&p, result_code::NO_COMMON_APPLICATION, false);
}

#[test]
fn relay_application_matches_any_application() {
    // A client with a single application the DRA has never heard of.
    let mut odd = pgw_config();
    odd.auth_application_ids = vec![];
    odd.vendor_specific_application_ids = vec![];
    odd.acct_application_ids = vec![16_777_999];
    let mut p = Pair::pgw_to_dra_with(odd, dra_config(), ConnectionOptions::new(1, START_TIME));
    p.connect();
    let apps = p.server.conn.applications().expect("open");
    assert_eq!(
        (apps.auth.as_slice(), apps.acct.as_slice()),
        (&[][..], &[16_777_999][..])
    );
    assert!(apps.supports(16_777_999) && !apps.supports(app::GX));
    assert!(p.client.conn.in_service() && p.server.conn.in_service());
}

#[test]
fn initiator_gives_up_when_no_cea_comes() {
    let mut p = Pair::pgw_to_dra();
    p.drop_to_server = true;
    p.connect();
    let sent_at = p.now;
    assert_eq!(p.client.conn.state(), PeerState::WaitCea);
    assert_eq!(
        p.client.conn.poll_timeout(),
        Some(sent_at + Duration::from_secs(10))
    );
    p.run_until(sent_at + Duration::from_millis(9_999));
    assert_eq!(p.client.conn.state(), PeerState::WaitCea);
    p.run_until(sent_at + Duration::from_secs(10));
    assert_eq!(
        p.client.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::CeaTimeout,
            reconnect: Reconnect::After(Duration::from_secs(30)),
        })
    );
}

#[test]
fn responder_gives_up_when_no_cer_comes() {
    let mut p = Pair::pgw_to_dra();
    p.drop_to_server = true;
    p.server.conn.handle_connected(p.now);
    let start = p.now;
    p.run_until(start + Duration::from_secs(10));
    assert_eq!(
        p.server.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::CerTimeout,
            reconnect: Reconnect::No,
        })
    );
}

/// `conn` with its transport up at 1 s, alone (nothing on the other end).
fn lone(conn: Result<PeerConnection, PeerConfigError>) -> PeerConnection {
    let mut conn = conn.unwrap();
    conn.handle_connected(Duration::from_secs(1));
    conn
}

fn lone_responder() -> PeerConnection {
    lone(PeerConnection::new(
        Role::Responder,
        std::sync::Arc::new(dra_config()),
        directory(7, PGW_HOST, &["198.18.0.0/24"]),
        ip(PGW_ADDR),
        ConnectionOptions::new(2, START_TIME),
    ))
}

fn pgw_cer() -> Message {
    let mut i = lone(PeerConnection::new(
        Role::Initiator,
        std::sync::Arc::new(pgw_config()),
        directory(0, DRA_HOST, &["198.18.0.2/32"]),
        ip(DRA_ADDR),
        ConnectionOptions::new(1, START_TIME),
    ));
    i.poll_transmit().expect("CER")
}

#[test]
fn anything_but_a_cer_first_closes_the_connection() {
    // RFC 6733 §5.6: the first message on an accepted connection must be the CER.
    let mut r = lone_responder();
    let dwr = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 1, 1)
        .with(Avp::utf8(c::ORIGIN_HOST, PGW_HOST).mandatory())
        .with(Avp::utf8(c::ORIGIN_REALM, REALM).mandatory());
    assert_eq!(
        r.handle_message(Duration::from_secs(2), dwr),
        Handled::Consumed
    );
    assert_eq!(
        r.poll_transmit(),
        None,
        "no DWA before the capabilities exchange"
    );
    assert_eq!(
        r.poll_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::UnexpectedMessage {
                command_code: cmd::DEVICE_WATCHDOG,
                request: true,
            },
            reconnect: Reconnect::After(Duration::from_secs(30)),
        })
    );
    // Nothing is processed after the close.
    assert_eq!(
        r.handle_message(Duration::from_secs(3), pgw_cer()),
        Handled::Consumed
    );
    assert_eq!(r.poll_transmit(), None);
}

#[test]
fn initiator_closes_when_something_else_than_a_cea_arrives() {
    let mut p = Pair::pgw_to_dra();
    p.drop_to_server = true;
    p.connect();
    let ccr = Message::request(cmd::CREDIT_CONTROL, app::GX, 9, 9).proxiable();
    let h = p.client.conn.handle_message(p.now, ccr);
    assert_eq!(h, Handled::Consumed, "not routed before Open");
    p.drive();
    assert!(matches!(
        p.client.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::UnexpectedMessage {
                command_code: cmd::CREDIT_CONTROL,
                request: true
            },
            ..
        })
    ));
}

#[test]
fn cer_without_product_name_is_answered_5005_with_failed_avp() {
    let mut r = lone_responder();
    let mut cer = pgw_cer();
    cer.avps.retain(|a| a.code != c::PRODUCT_NAME);
    assert_eq!(
        r.handle_message(Duration::from_secs(2), cer),
        Handled::Consumed
    );
    let cea = r.poll_transmit().expect("CEA");
    assert_eq!(cea.result_code(), Some(result_code::MISSING_AVP));
    let failed = cea
        .find(c::FAILED_AVP)
        .expect("Failed-AVP")
        .as_grouped()
        .unwrap();
    assert_eq!(failed[0].code, c::PRODUCT_NAME);
    assert!(matches!(
        r.poll_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::Refused { result_code: 5005 },
            ..
        })
    ));
}

#[test]
fn shell_can_refuse_a_valid_cer() {
    let mut r = lone_responder();
    let h = r.handle_message(Duration::from_secs(2), pgw_cer());
    assert!(matches!(h, Handled::CerReceived { ref peer } if peer.id == PeerId(7)));
    assert_eq!(r.state(), PeerState::CerReceived);
    assert_eq!(r.poll_transmit(), None, "no CEA until the shell decides");
    r.reject_cer(
        Duration::from_secs(2),
        result_code::TOO_BUSY,
        Some("shutting down"),
    );
    let cea = r.poll_transmit().expect("CEA");
    assert_eq!(cea.result_code(), Some(result_code::TOO_BUSY));
    assert!(cea.is_error());
    assert_eq!(r.state(), PeerState::Closed);
}

#[test]
fn an_undecided_cer_times_out() {
    let mut r = lone_responder();
    let _ = r.handle_message(Duration::from_secs(2), pgw_cer());
    assert_eq!(r.poll_timeout(), Some(Duration::from_secs(12)));
    r.handle_timeout(Duration::from_secs(12));
    assert!(matches!(
        r.poll_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::DecisionTimeout,
            ..
        })
    ));
}
