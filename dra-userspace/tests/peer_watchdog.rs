//! Device watchdog between two state machines on fake time (RFC 3539 §3.4, RFC 6733
//! §5.5).

mod peer_support;

use std::time::Duration;

use dra::diameter::peer::{
    CloseReason, ConnectionOptions, PeerConfig, PeerEvent, PeerState, Reconnect, WatchdogState,
};
use dra::diameter::{Message, result_code};
use dra_common::wire::{app, cmd};
use peer_support::*;

const DW: u32 = cmd::DEVICE_WATCHDOG;
const S: fn(u64) -> Duration = Duration::from_secs;
const TW: Duration = Duration::from_secs(30);
const JITTER: Duration = Duration::from_secs(2);

/// A DRA whose own watchdog stays quiet (Tw 10 min), so that only the PGW's runs.
fn quiet_dra() -> PeerConfig {
    let mut c = dra_config();
    c.tw = S(600);
    c
}

fn open_pair(pgw_opts: ConnectionOptions) -> Pair {
    let mut p = Pair::pgw_to_dra_with(pgw_config(), quiet_dra(), pgw_opts);
    p.connect();
    assert!(p.client.conn.is_open());
    p
}

fn ccr_from_dra() -> Message {
    Message::request(cmd::CREDIT_CONTROL, app::GX, 77, 77).proxiable()
}

#[test]
fn dwr_goes_out_after_tw_with_jitter_of_silence_and_is_answered() {
    let mut p = open_pair(ConnectionOptions::new(1, START_TIME));
    let opened = p.now;
    let due = p.client.conn.poll_timeout().expect("watchdog armed");
    assert!(
        due >= opened + TW - JITTER && due <= opened + TW + JITTER,
        "{:?}",
        due - opened
    );
    p.run_until(due - Duration::from_millis(1));
    assert!(
        p.sent(true, DW, true).is_empty(),
        "no DWR before Tw - jitter"
    );
    p.run_until(due);
    let dwr = p.sent(true, DW, true);
    assert_eq!(dwr.len(), 1);
    assert_eq!(dwr[0].at, due);
    assert_eq!(dwr[0].msg.origin_host(), Some(PGW_HOST));
    let dwa = p.sent(false, DW, false);
    assert_eq!(dwa.len(), 1);
    assert_eq!(dwa[0].msg.hop_by_hop, dwr[0].msg.hop_by_hop);
    assert_eq!(dwa[0].msg.result_code(), Some(result_code::SUCCESS));
    assert_eq!(dwa[0].msg.origin_host(), Some(DRA_HOST));
    assert!(p.client.conn.in_service());
    // Next DWR one Tw ± jitter after the answer (the DWA restarted the timer).
    let next = p.client.conn.poll_timeout().unwrap();
    assert!(next >= due + TW - JITTER && next <= due + TW + JITTER);
}

#[test]
fn jitter_differs_between_connections() {
    let mut offsets = Vec::new();
    for seed in 1..=8 {
        let p = open_pair(ConnectionOptions::new(seed, START_TIME));
        let d = p.client.conn.poll_timeout().unwrap() - p.now;
        assert!(d >= TW - JITTER && d <= TW + JITTER, "{d:?}");
        offsets.push(d);
    }
    offsets.sort();
    offsets.dedup();
    assert!(
        offsets.len() >= 4,
        "seeded jitter should spread the timers: {offsets:?}"
    );
}

#[test]
fn traffic_from_the_peer_postpones_the_dwr() {
    let mut p = open_pair(ConnectionOptions::new(1, START_TIME));
    let opened = p.now;
    p.run_until(opened + S(20));
    // The DRA relays a request to the PGW: routed by the shell, counted as traffic.
    p.deliver(true, ccr_from_dra());
    assert_eq!(p.client.app_messages.len(), 1);
    let due = p.client.conn.poll_timeout().unwrap();
    assert!(
        due >= opened + S(20) + TW - JITTER,
        "timer restarted: {:?}",
        due - opened
    );
    // Traffic reported without handle_message counts too.
    p.run_until(opened + S(45));
    assert!(p.sent(true, DW, true).is_empty());
    p.client.conn.handle_traffic(p.now);
    let due = p.client.conn.poll_timeout().unwrap();
    assert!(due >= opened + S(45) + TW - JITTER);
    p.run_until(due - Duration::from_millis(1));
    assert!(
        p.sent(true, DW, true).is_empty(),
        "silence was never Tw long"
    );
    p.run_until(due);
    assert_eq!(p.sent(true, DW, true).len(), 1);
}

#[test]
fn unanswered_watchdog_makes_the_peer_suspect_then_down() {
    let mut p = open_pair(ConnectionOptions::new(1, START_TIME));
    p.drop_to_client = true; // DWAs are lost.
    let first = p.client.conn.poll_timeout().unwrap();
    p.run_until(first);
    assert_eq!(p.sent(true, DW, true).len(), 1);
    assert!(
        p.client.conn.in_service(),
        "one DWR outstanding is still OKAY"
    );

    let second = p.client.conn.poll_timeout().unwrap();
    assert!(second >= first + TW - JITTER && second <= first + TW + JITTER);
    p.run_until(second - Duration::from_millis(1));
    assert!(p.client.conn.in_service());
    p.run_until(second);
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Suspect);
    assert!(p.client.conn.is_open(), "SUSPECT keeps the connection");
    assert!(!p.client.conn.in_service(), "routing must stop using it");
    assert_eq!(p.client.count(|e| *e == PeerEvent::WatchdogSuspect), 1);
    assert_eq!(
        p.sent(true, DW, true).len(),
        1,
        "no second DWR while suspect"
    );

    let third = p.client.conn.poll_timeout().unwrap();
    p.run_until(third);
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Down);
    assert_eq!(p.client.conn.state(), PeerState::Closed);
    let tail: Vec<_> = p.client.event_list().into_iter().rev().take(2).collect();
    assert_eq!(
        tail,
        [
            PeerEvent::Closed {
                reason: CloseReason::WatchdogDown,
                reconnect: Reconnect::After(S(30)),
            },
            PeerEvent::WatchdogDown,
        ]
    );
    // The shell closed the transport; the DRA side saw it go.
    assert!(matches!(
        p.server.closed_event(),
        Some(PeerEvent::Closed {
            reason: CloseReason::TransportClosed,
            ..
        })
    ));
}

#[test]
fn suspect_peer_is_back_in_service_when_it_talks_again() {
    let mut p = open_pair(ConnectionOptions::new(1, START_TIME));
    p.drop_to_client = true;
    let first = p.client.conn.poll_timeout().unwrap();
    p.run_until(first);
    let second = p.client.conn.poll_timeout().unwrap();
    p.run_until(second);
    assert!(!p.client.conn.in_service());
    p.drop_to_client = false;
    p.deliver(true, ccr_from_dra());
    p.drive();
    assert!(p.client.conn.in_service());
    assert_eq!(p.client.count(|e| *e == PeerEvent::WatchdogOkay), 1);
}

#[test]
fn reopened_connection_needs_three_dwas_before_service() {
    let mut p = open_pair(ConnectionOptions::new(1, START_TIME).reopen(true));
    // RFC 3539 §3.4.1: REOPEN probes at once; the first DWA is already in.
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Reopen);
    assert_eq!(p.sent(true, DW, true).len(), 1);
    assert_eq!(p.sent(false, DW, false).len(), 1);
    assert!(p.client.conn.is_open() && !p.client.conn.in_service());
    assert!(matches!(
        p.client.event_list()[..],
        [PeerEvent::Opened { .. }]
    ));

    // Application traffic does not count towards the three.
    p.deliver(true, ccr_from_dra());
    let t = p.client.conn.poll_timeout().unwrap();
    p.run_until(t);
    assert_eq!(p.sent(false, DW, false).len(), 2);
    assert!(!p.client.conn.in_service(), "two DWAs are not enough");
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Reopen);

    let t = p.client.conn.poll_timeout().unwrap();
    p.run_until(t);
    assert_eq!(p.sent(false, DW, false).len(), 3);
    assert!(p.client.conn.in_service());
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Okay);
    assert_eq!(p.client.count(|e| *e == PeerEvent::WatchdogOkay), 1);
}

#[test]
fn reopened_connection_that_misses_dwas_goes_down() {
    let mut p = open_pair(ConnectionOptions::new(1, START_TIME).reopen(true));
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Reopen);
    p.drop_to_client = true; // From now on the DWAs are lost.
    let t = p.client.conn.poll_timeout().unwrap();
    p.run_until(t);
    assert_eq!(p.sent(true, DW, true).len(), 2, "second probe sent");
    let t = p.client.conn.poll_timeout().unwrap();
    p.run_until(t);
    assert!(p.client.conn.is_open(), "one miss restarts the count");
    assert_eq!(p.client.conn.watchdog_state(), WatchdogState::Reopen);
    let t = p.client.conn.poll_timeout().unwrap();
    p.run_until(t);
    assert_eq!(p.client.conn.state(), PeerState::Closed);
    assert_eq!(p.client.count(|e| *e == PeerEvent::WatchdogDown), 1);
    assert_eq!(p.client.count(|e| *e == PeerEvent::WatchdogSuspect), 0);
    assert!(!p.client.conn.in_service());
}

#[test]
fn dwr_from_the_peer_is_answered_and_counts_as_traffic() {
    // Here the DRA's watchdog fires first (the PGW's Tw is long).
    let mut pgw = pgw_config();
    pgw.tw = S(600);
    let mut p = Pair::pgw_to_dra_with(pgw, dra_config(), ConnectionOptions::new(1, START_TIME));
    p.connect();
    let due = p.server.conn.poll_timeout().unwrap();
    p.run_until(due);
    let dwr = p.sent(false, DW, true);
    let dwa = p.sent(true, DW, false);
    assert_eq!((dwr.len(), dwa.len()), (1, 1));
    assert_eq!(dwa[0].msg.hop_by_hop, dwr[0].msg.hop_by_hop);
    // The PGW's DWA carries its Origin-State-Id.
    assert_eq!(
        dwa[0]
            .msg
            .find(dra::diameter::avp_code::ORIGIN_STATE_ID)
            .unwrap()
            .as_u32()
            .unwrap(),
        17
    );
    assert!(p.server.conn.in_service() && p.client.conn.in_service());
}
