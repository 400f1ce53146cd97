//! RFC 8583 Load reports on the watchdog exchange, on fake time.

mod peer_support;

use std::time::Duration;

use dra::diameter::dictionary::enums::load_type;
use dra::diameter::peer::{ConnectionOptions, PeerConfig, PeerEvent, peer_load_avp};
use dra::diameter::{Avp, Message, avp_code as c};
use dra::routing::LoadInfo;
use dra_common::wire::{app, cmd};
use peer_support::*;

const DW: u32 = cmd::DEVICE_WATCHDOG;

/// PGW → DRA, the DRA reporting `load`; only the PGW's watchdog runs.
fn pair(load: Option<u16>) -> Pair {
    let mut dra: PeerConfig = dra_config();
    dra.tw = Duration::from_secs(600);
    let mut p = Pair::pgw_to_dra_full(
        pgw_config(),
        ConnectionOptions::new(1, START_TIME),
        dra,
        directory(7, PGW_HOST, &["198.18.0.0/24"]),
        match load {
            Some(v) => ConnectionOptions::new(2, START_TIME).own_load(v),
            None => ConnectionOptions::new(2, START_TIME),
        },
    );
    p.connect();
    p
}

fn load_reports(end: &End) -> Vec<LoadInfo> {
    end.event_list()
        .into_iter()
        .filter_map(|e| match e {
            PeerEvent::LoadReport(l) => Some(l),
            _ => None,
        })
        .collect()
}

#[test]
fn dwa_carries_our_load_and_the_peer_reports_it() {
    let mut p = pair(Some(40_000));
    assert_eq!(p.client.conn.last_load(), None);
    let t1 = p.client.conn.poll_timeout().unwrap();
    p.run_until(t1);

    // The DWA's Load AVP: PEER, the value, SourceID = the DRA (RFC 8583 §7).
    let dwa = &p.sent(false, DW, false)[0].msg;
    let load = dwa.find(c::LOAD).expect("Load AVP in DWA");
    assert!(!load.is_mandatory());
    let children = load.as_grouped().unwrap();
    let get = |code| children.iter().find(|a| a.code == code).expect("child");
    assert_eq!(get(c::LOAD_TYPE).as_i32().unwrap(), load_type::PEER);
    assert_eq!(get(c::LOAD_VALUE).as_u64().unwrap(), 40_000);
    assert_eq!(get(c::SOURCE_ID).as_utf8().unwrap(), DRA_HOST);

    let first = LoadInfo {
        value: 40_000,
        received_at: t1,
    };
    assert_eq!(load_reports(&p.client), [first]);
    assert_eq!(p.client.conn.last_load(), Some(first));

    // The DRA gets busier; the next DWA says so, with the new time.
    p.server.conn.set_own_load(1_234);
    let t2 = p.client.conn.poll_timeout().unwrap();
    p.run_until(t2);
    let second = LoadInfo {
        value: 1_234,
        received_at: t2,
    };
    assert_eq!(load_reports(&p.client), [first, second]);
    assert_eq!(p.client.conn.last_load(), Some(second));
    assert!(second.load_fraction() > first.load_fraction());
}

#[test]
fn no_load_configured_sends_no_load_avp() {
    let mut p = pair(None);
    let t = p.client.conn.poll_timeout().unwrap();
    p.run_until(t);
    assert!(p.sent(false, DW, false)[0].msg.find(c::LOAD).is_none());
    assert!(load_reports(&p.client).is_empty());
    assert_eq!(p.client.conn.last_load(), None);
}

#[test]
fn peer_reports_in_answers_count_only_when_they_come_from_the_peer() {
    let mut p = pair(None);
    let now = p.now;
    // An answer relayed by the DRA from a PCRF, carrying the PCRF's PEER report: not ours.
    let relayed = Message::answer(cmd::CREDIT_CONTROL, app::GX, 3, 3)
        .proxiable()
        .with(Avp::utf8(c::ORIGIN_HOST, PCRF_HOST))
        .with(peer_load_avp(100, PCRF_HOST));
    p.deliver(true, relayed);
    assert!(load_reports(&p.client).is_empty());
    // The DRA's own PEER report piggybacked on the same answer counts.
    let with_dra = Message::answer(cmd::CREDIT_CONTROL, app::GX, 4, 4)
        .proxiable()
        .with(Avp::utf8(c::ORIGIN_HOST, PCRF_HOST))
        .with(peer_load_avp(100, PCRF_HOST))
        .with(peer_load_avp(9_000, DRA_HOST));
    p.deliver(true, with_dra);
    p.drive();
    assert_eq!(
        load_reports(&p.client),
        [LoadInfo {
            value: 9_000,
            received_at: now
        }]
    );
    assert_eq!(
        p.client.app_messages.len(),
        2,
        "answers still go to the shell"
    );
}
