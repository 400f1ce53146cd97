//! Disconnect-Peer from either side (RFC 6733 §5.4), on fake time.

mod peer_support;

use std::time::Duration;

use dra::diameter::peer::{
    CloseReason, ConnectionOptions, DisconnectCause, PeerEvent, PeerState, Reconnect,
};
use dra::diameter::{Message, avp_code as c, result_code};
use dra_common::wire::{app, cmd};
use peer_support::*;

const DP: u32 = cmd::DISCONNECT_PEER;

fn open() -> Pair {
    let mut p = Pair::pgw_to_dra();
    p.connect();
    assert!(p.client.conn.is_open() && p.server.conn.is_open());
    p
}

fn cause_of(msg: &Message) -> i32 {
    msg.find(c::DISCONNECT_CAUSE)
        .expect("Disconnect-Cause")
        .as_i32()
        .unwrap()
}

#[test]
fn client_disconnects_with_dpr_and_the_server_answers_dpa() {
    let mut p = open();
    p.client
        .conn
        .start_disconnect(p.now, DisconnectCause::Rebooting);
    assert_eq!(p.client.conn.state(), PeerState::Closing);
    assert!(!p.client.conn.in_service(), "no new requests while closing");
    p.drive();
    let dpr = p.sent(true, DP, true);
    let dpa = p.sent(false, DP, false);
    assert_eq!((dpr.len(), dpa.len()), (1, 1));
    assert_eq!(cause_of(&dpr[0].msg), 0);
    assert_eq!(dpr[0].msg.origin_host(), Some(PGW_HOST));
    assert_eq!(dpa[0].msg.result_code(), Some(result_code::SUCCESS));
    assert_eq!(dpa[0].msg.hop_by_hop, dpr[0].msg.hop_by_hop);
    assert_eq!(
        p.client.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::LocalDisconnect {
                cause: DisconnectCause::Rebooting
            },
            reconnect: Reconnect::No,
        })
    );
    // REBOOTING: the peer may reconnect after Tc.
    assert_eq!(
        p.server.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::PeerDisconnect {
                cause: Some(DisconnectCause::Rebooting)
            },
            reconnect: Reconnect::After(Duration::from_secs(30)),
        })
    );
    assert_eq!(p.server.conn.state(), PeerState::Closed);
}

#[test]
fn server_disconnects_and_the_client_learns_whether_to_reconnect() {
    let expected = [
        (
            DisconnectCause::Rebooting,
            Reconnect::After(Duration::from_secs(30)),
        ),
        (
            DisconnectCause::Busy,
            Reconnect::PeerAskedNot {
                cause: DisconnectCause::Busy,
                hold_off: Duration::from_secs(300),
            },
        ),
        (
            DisconnectCause::DoNotWantToTalkToYou,
            Reconnect::PeerAskedNot {
                cause: DisconnectCause::DoNotWantToTalkToYou,
                hold_off: Duration::from_secs(3600),
            },
        ),
    ];
    for (cause, reconnect) in expected {
        let mut p = open();
        p.server.conn.start_disconnect(p.now, cause);
        p.drive();
        assert_eq!(cause_of(&p.sent(false, DP, true)[0].msg), cause.code());
        assert_eq!(p.sent(true, DP, false).len(), 1, "DPA from the client");
        assert_eq!(
            p.client.closed_event(),
            Some(PeerEvent::Closed {
                reason: CloseReason::PeerDisconnect { cause: Some(cause) },
                reconnect,
            }),
            "{cause:?}"
        );
        assert!(matches!(
            p.server.closed_event(),
            Some(PeerEvent::Closed {
                reason: CloseReason::LocalDisconnect { .. },
                reconnect: Reconnect::No
            })
        ));
    }
}

#[test]
fn answers_still_arrive_while_waiting_for_the_dpa_and_the_wait_is_bounded() {
    let mut p = open();
    p.drop_to_server = true; // The DPR is lost: no DPA comes.
    p.client.conn.start_disconnect(p.now, DisconnectCause::Busy);
    p.drive();
    let start = p.now;
    // An answer to an earlier request is still handed to the shell.
    let cca = Message::answer(cmd::CREDIT_CONTROL, app::GX, 5, 5).proxiable();
    let h = p.client.conn.handle_message(p.now, cca.clone());
    assert_eq!(h, dra::diameter::peer::Handled::Application(cca));
    assert_eq!(
        p.client.conn.poll_timeout(),
        Some(start + Duration::from_secs(5))
    );
    p.run_until(start + Duration::from_secs(5));
    assert_eq!(
        p.client.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::LocalDisconnect {
                cause: DisconnectCause::Busy
            },
            reconnect: Reconnect::No,
        })
    );
}

#[test]
fn disconnect_before_open_just_closes() {
    let mut p = Pair::pgw_to_dra_with(
        pgw_config(),
        dra_config(),
        ConnectionOptions::new(1, START_TIME),
    );
    p.drop_to_server = true;
    p.connect();
    p.client
        .conn
        .start_disconnect(p.now, DisconnectCause::Rebooting);
    p.drive();
    assert!(
        p.sent(true, DP, true).is_empty(),
        "no DPR on a connection that never opened"
    );
    assert_eq!(p.client.conn.state(), PeerState::Closed);
}
