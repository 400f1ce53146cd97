//! The election of RFC 6733 §5.6.4: two agents connect to each other at the same time;
//! each runs the shell procedure documented in `dra::diameter::peer` on fake time.

mod peer_support;

use dra::diameter::peer::{
    CloseReason, ConnectionOptions, PeerConfig, PeerEvent, PeerState, Reconnect, election_won,
};
use dra::diameter::result_code;
use dra_common::wire::cmd;
use peer_support::*;

const A_ADDR: &str = "198.18.0.10";
const B_ADDR: &str = "198.18.0.11";

fn node(host: &str, addr: &str) -> PeerConfig {
    PeerConfig::new(host, REALM, vec![ip(addr)])
}

/// A connection from node `from` to node `to` (each a host and address; each knows the
/// other's /32) with `seeds` for its client and server side. The responder's shell
/// decides on the CER (`auto_accept` off).
fn crossing(from: (&str, &str), to: (&str, &str), seeds: (u64, u64)) -> Pair {
    let ((from, from_addr), (to, to_addr)) = (from, to);
    let mut p = Pair::new(
        node(from, from_addr),
        directory(1, to, &[&format!("{to_addr}/32")]),
        ConnectionOptions::new(seeds.0, START_TIME),
        from_addr,
        node(to, to_addr),
        directory(1, from, &[&format!("{from_addr}/32")]),
        ConnectionOptions::new(seeds.1, START_TIME),
        to_addr,
    );
    p.server.auto_accept = false;
    p
}

/// One node's shell, on a CER from `peer_host` arriving on its `responder` while its
/// `initiator` to the same peer waits for the CEA. Returns whether it won.
fn elect(
    local_host: &str,
    peer_host: &str,
    initiator: &mut End,
    responder: &mut End,
    pair_now: std::time::Duration,
) -> bool {
    let peer = responder
        .pending_cer
        .take()
        .expect("a valid CER waits for a decision");
    assert!(peer.name.eq_ignore_ascii_case(peer_host));
    assert_eq!(responder.conn.state(), PeerState::CerReceived);
    assert_eq!(
        initiator.conn.state(),
        PeerState::WaitCea,
        "Wait-I-CEA: election needed"
    );
    let won = election_won(local_host, peer_host);
    initiator.conn.handle_election(pair_now, won);
    if won {
        // I-Disc (done by handle_election), R-Snd-CEA.
        responder.conn.accept_cer(pair_now);
    } else {
        // Keep the CER unanswered (Wait-Returns) until our initiator's CEA arrives.
        responder.pending_cer = Some(peer);
    }
    won
}

/// A (`a_host`) and B (`b_host`) connect to each other simultaneously. Returns
/// (conn1 = A→B, conn2 = B→A) after both shells ran the election and its follow-up.
fn simultaneous_open(a_host: &str, b_host: &str) -> (Pair, Pair, bool) {
    let mut conn1 = crossing((a_host, A_ADDR), (b_host, B_ADDR), (1, 101));
    let mut conn2 = crossing((b_host, B_ADDR), (a_host, A_ADDR), (2, 102));
    // Both CERs cross: each responder holds a valid CER, each initiator waits.
    conn1.connect();
    conn2.connect();
    let now = conn1.now;
    let a_won = elect(a_host, b_host, &mut conn1.client, &mut conn2.server, now);
    let b_won = elect(b_host, a_host, &mut conn2.client, &mut conn1.server, now);
    assert_ne!(a_won, b_won, "exactly one side wins");

    // The winner's CEA travels on the loser's connection first; then the loser's shell
    // sees its initiator open and drops the held responder (I-Rcv-CEA: R-Disc).
    let (survivor, other) = if a_won {
        (&mut conn2, &mut conn1)
    } else {
        (&mut conn1, &mut conn2)
    };
    survivor.drive();
    assert!(
        survivor
            .client
            .event_list()
            .iter()
            .any(|e| matches!(e, PeerEvent::Opened { .. })),
        "the loser's initiator opened"
    );
    other.server.conn.abort(now);
    other.server.pending_cer = None;
    other.drive();
    (conn1, conn2, a_won)
}

fn assert_outcome(conn1: &Pair, conn2: &Pair, a_won: bool) {
    // The connection initiated by the loser survives, open at both ends.
    let (kept, dropped) = if a_won {
        (conn2, conn1)
    } else {
        (conn1, conn2)
    };
    for end in [&kept.client, &kept.server] {
        assert_eq!(end.conn.state(), PeerState::Open);
        assert!(end.conn.in_service());
        assert!(end.closed_event().is_none());
    }
    let cea = kept.sent(false, cmd::CAPABILITIES_EXCHANGE, false);
    assert_eq!(cea.len(), 1);
    assert_eq!(cea[0].msg.result_code(), Some(result_code::SUCCESS));
    // The winner closed the connection it initiated; the loser dropped the responder
    // side without ever answering the CER.
    assert_eq!(
        dropped.client.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::ElectionWon,
            reconnect: Reconnect::No,
        })
    );
    assert_eq!(
        dropped.server.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::Aborted,
            reconnect: Reconnect::No,
        })
    );
    assert!(
        dropped
            .sent(false, cmd::CAPABILITIES_EXCHANGE, false)
            .is_empty()
    );
    assert_eq!(
        dropped.wire.len(),
        1,
        "only the CER crossed the dropped connection"
    );
}

/// The Origin-Host `end`'s peer announced in its CER or CEA.
fn peer_host(end: &End) -> &str {
    &end.conn.peer_identity().unwrap().origin_host
}

#[test]
fn higher_origin_host_wins_and_keeps_the_connection_the_peer_initiated() {
    let (conn1, conn2, a_won) = simultaneous_open("dra2.epc.example.net", "dra1.epc.example.net");
    assert!(a_won);
    assert_outcome(&conn1, &conn2, a_won);
    // A is the responder on the surviving connection.
    assert_eq!(peer_host(&conn2.server), "dra1.epc.example.net");
}

#[test]
fn lower_origin_host_loses_and_keeps_its_own_connection() {
    // Case differences do not change the order (RFC 6733 §5.6.4).
    let (conn1, conn2, a_won) = simultaneous_open("DRA1.epc.example.net", "dra2.epc.example.net");
    assert!(!a_won);
    assert_outcome(&conn1, &conn2, a_won);
    // A is the initiator on the surviving connection.
    assert_eq!(peer_host(&conn1.client), "dra2.epc.example.net");
}

#[test]
fn loser_whose_initiator_fails_answers_the_held_cer() {
    // RFC 6733 §5.6 Wait-Returns + I-Peer-Disc: I-Disc, R-Snd-CEA → R-Open.
    let a = "dra1.epc.example.net";
    let b = "dra2.epc.example.net";
    let mut conn1 = crossing((a, A_ADDR), (b, B_ADDR), (1, 2));
    let mut conn2 = crossing((b, B_ADDR), (a, A_ADDR), (3, 4));
    conn1.drop_to_server = true; // A's CER never reaches B: B does not elect.
    conn1.connect();
    conn2.connect();
    let now = conn1.now;
    // A (lower, loses) holds B's CER and keeps waiting on its own initiator.
    assert!(!elect(a, b, &mut conn1.client, &mut conn2.server, now));
    assert_eq!(conn1.client.conn.state(), PeerState::WaitCea);
    // A's initiator dies before any CEA.
    conn1.client.conn.handle_closed(now);
    conn1.drive();
    assert!(matches!(
        conn1.client.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::TransportClosed,
            ..
        })
    ));
    // A's shell answers the held CER: B's initiator opens.
    conn2.server.conn.accept_cer(now);
    conn2.server.pending_cer = None;
    conn2.drive();
    assert!(conn2.client.conn.in_service() && conn2.server.conn.in_service());
}
