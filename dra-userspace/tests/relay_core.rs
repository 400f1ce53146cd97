//! The relay core on fake time: what the downstream and upstream peers see.

mod diameter_fixtures;

use std::collections::HashMap;
use std::time::Duration;

use diameter_fixtures as fx;
use dra::diameter::{Avp, Message, avp_code, result_code};
use dra::relay::{
    Delivery, DownstreamRef, Expired, FailureCause, Held, Relay, RelayConfig, RelayError, Retry,
    RetryOutcome,
};
use dra::routing::{PeerId, SplitMix64};
use dra_common::wire::flags;

const PGW: DownstreamRef = DownstreamRef { conn_id: 7 };
const PGW2: DownstreamRef = DownstreamRef { conn_id: 8 };
const PCRF1: PeerId = PeerId(1);
const PCRF2: PeerId = PeerId(2);
const TIMEOUT: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn relay(capacity: usize) -> Relay {
    Relay::new(RelayConfig {
        own_host: fx::DRA_HOST.to_owned(),
        own_realm: fx::DRA_REALM.to_owned(),
        capacity,
        hop_by_hop_seed: 0x5000_0000,
    })
}

/// Forwards `req` from PGW (Origin-Host `fx::PGW_HOST`) to `to`, with the answer timeout
/// [`TIMEOUT`].
fn from_pgw(r: &mut Relay, now: Duration, req: Message, to: PeerId) -> Result<Message, RelayError> {
    r.forward(now, PGW, fx::PGW_HOST, req, to, TIMEOUT)
}

/// Retries `retry` on PCRF2, with the answer timeout [`TIMEOUT`].
fn retry_on_pcrf2(r: &mut Relay, now: Duration, retry: Retry) -> RetryOutcome {
    r.retry(now, retry, Some(PCRF2), TIMEOUT)
}

/// The PCRF's answer to a forwarded request (same Hop-by-Hop and End-to-End ids).
fn pcrf_answer(fwd: &Message) -> Message {
    let mut a = fx::cca_i_gx();
    a.hop_by_hop = fwd.hop_by_hop;
    a.end_to_end = fwd.end_to_end;
    a
}

fn route_records(m: &Message) -> Vec<&str> {
    m.find_all(avp_code::ROUTE_RECORD)
        .map(|a| a.as_utf8().expect("utf8"))
        .collect()
}

fn error_message(m: &Message) -> &str {
    m.find(avp_code::ERROR_MESSAGE)
        .and_then(|a| a.as_utf8().ok())
        .expect("Error-Message")
}

fn expect_retry(e: Expired) -> Retry {
    match e {
        Expired::Retry(r) => r,
        Expired::Answer(d) => panic!("expected a retry, got answer {d:?}"),
    }
}

fn expect_answer(e: Expired) -> Delivery {
    match e {
        Expired::Answer(d) => d,
        Expired::Retry(r) => panic!("expected an answer, got retry {r:?}"),
    }
}

fn expect_send(o: RetryOutcome) -> (PeerId, Message) {
    match o {
        RetryOutcome::Send { to, request } => (to, request),
        other => panic!("expected Send, got {other:?}"),
    }
}

#[test]
fn forward_rewrites_hop_by_hop_keeps_end_to_end_and_appends_route_record() {
    let mut r = relay(16);
    let req = fx::ccr_i_gx();
    let fwd = from_pgw(&mut r, ms(0), req.clone(), PCRF1).expect("forwarded");
    assert_ne!(
        fwd.hop_by_hop, req.hop_by_hop,
        "fresh Hop-by-Hop id upstream"
    );
    assert_eq!(fwd.end_to_end, req.end_to_end, "End-to-End id kept");
    assert_eq!(fwd.flags, req.flags, "R and P kept, nothing else set");
    assert_eq!(fwd.command_code, req.command_code);
    assert_eq!(fwd.application_id, req.application_id);
    // Every original AVP in order, then our Route-Record (M bit) at the end.
    assert_eq!(&fwd.avps[..req.avps.len()], &req.avps[..]);
    let rr = fwd.avps.last().expect("an AVP");
    assert_eq!(rr.code, avp_code::ROUTE_RECORD);
    assert!(rr.is_mandatory());
    assert_eq!(route_records(&fwd), vec![fx::PGW_HOST]);
    assert_eq!(r.stats().pending, 1);

    let ans = pcrf_answer(&fwd);
    let d = r.on_answer(PCRF1, ans.clone()).expect("delivered");
    assert_eq!(d.to, PGW);
    assert_eq!(d.answer.hop_by_hop, req.hop_by_hop, "Hop-by-Hop restored");
    assert_eq!(d.answer.end_to_end, req.end_to_end);
    assert_eq!(d.answer.avps, ans.avps, "answer relayed unchanged");
    assert_eq!(d.answer.flags, ans.flags);
    assert_eq!(r.poll_released().map(|x| x.peer), Some(PCRF1));
    assert_eq!(r.poll_released(), None);
    let s = r.stats();
    assert_eq!((s.requests_in, s.answers_relayed, s.pending), (1, 1, 0));
    assert!(r.invariant_ok());
    // The same answer again is a duplicate: counted, not delivered.
    assert!(r.on_answer(PCRF1, ans).is_none());
    assert_eq!(r.stats().late_answers, 1);
    assert!(r.invariant_ok());
}

#[test]
fn route_record_names_the_peer_the_request_came_from() {
    // The request crossed an edge agent: its Origin-Host is the PGW, but the peer we
    // received it from is the edge DRA (RFC 6733 §6.1.8).
    let mut r = relay(4);
    let req = fx::ccr_i_gx().with(Avp::utf8(avp_code::ROUTE_RECORD, fx::PGW_HOST).mandatory());
    let fwd = r
        .forward(ms(0), PGW, "edge-dra.example.net", req, PCRF1, TIMEOUT)
        .expect("forwarded");
    assert_eq!(
        route_records(&fwd),
        vec![fx::PGW_HOST, "edge-dra.example.net"]
    );
    assert_eq!(fwd.origin_host(), Some(fx::PGW_HOST));
}

#[test]
fn hop_by_hop_ids_are_unique_per_upstream_peer_and_wrap() {
    let mut r = Relay::new(RelayConfig {
        hop_by_hop_seed: u32::MAX - 1,
        ..relay(2000).config().clone()
    });
    let mut seen: HashMap<PeerId, Vec<u32>> = HashMap::new();
    for i in 0..1000u32 {
        // Downstream ids collide on purpose (two gateways may use the same ids).
        let mut req = fx::ccr_i_gx();
        req.end_to_end = i;
        let to = if i % 2 == 0 { PeerId(0) } else { PCRF2 };
        let fwd = r
            .forward(ms(0), PGW, fx::PGW_HOST, req, to, TIMEOUT)
            .expect("room");
        seen.entry(to).or_default().push(fwd.hop_by_hop);
    }
    for (peer, ids) in &seen {
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "duplicate id towards {peer:?}");
    }
    // Peer 0 starts at the seed itself and wraps past u32::MAX.
    assert_eq!(&seen[&PeerId(0)][..3], &[u32::MAX - 1, u32::MAX, 0]);
    // Answers come back keyed by (peer, id): all 1000 map back.
    let mut delivered = 0;
    for (peer, ids) in &seen {
        for (k, id) in ids.iter().enumerate() {
            let e2e = if *peer == PeerId(0) { 2 * k } else { 2 * k + 1 } as u32;
            let ans = Message::answer(272, 16_777_238, *id, e2e);
            let d = r.on_answer(*peer, ans).expect("matched");
            assert_eq!(d.answer.hop_by_hop, fx::ccr_i_gx().hop_by_hop);
            delivered += 1;
        }
    }
    assert_eq!(delivered, 1000);
    assert!(r.is_empty() && r.invariant_ok());
}

#[test]
fn answer_from_another_peer_or_with_another_end_to_end_is_not_matched() {
    let mut r = relay(4);
    let fwd = from_pgw(&mut r, ms(0), fx::ccr_i_gx(), PCRF1).expect("forwarded");
    assert!(
        r.on_answer(PCRF2, pcrf_answer(&fwd)).is_none(),
        "wrong peer"
    );
    let mut wrong_e2e = pcrf_answer(&fwd);
    wrong_e2e.end_to_end ^= 1;
    assert!(r.on_answer(PCRF1, wrong_e2e).is_none(), "wrong End-to-End");
    assert_eq!(r.stats().late_answers, 2);
    assert!(r.on_answer(PCRF1, pcrf_answer(&fwd)).is_some());
    assert!(r.invariant_ok());
}

#[test]
fn own_identity_in_route_record_is_answered_3005() {
    let mut r = relay(4);
    // DiameterIdentity compares case-insensitively.
    let req = fx::ccr_i_gx()
        .with(Avp::utf8(avp_code::ROUTE_RECORD, &fx::DRA_HOST.to_ascii_uppercase()).mandatory());
    let err = from_pgw(&mut r, ms(0), req.clone(), PCRF1).expect_err("loop");
    assert!(matches!(err, RelayError::LoopDetected { .. }), "{err}");
    assert_eq!(err.result_code(), Some(result_code::LOOP_DETECTED));
    let ans = err.into_answer().expect("an answer");
    assert_eq!(ans.result_code(), Some(result_code::LOOP_DETECTED));
    assert!(ans.is_error(), "3005 is a protocol error: E bit");
    assert!(!ans.is_request());
    assert_eq!(ans.hop_by_hop, req.hop_by_hop);
    assert_eq!(ans.end_to_end, req.end_to_end);
    assert_eq!(ans.origin_host(), Some(fx::DRA_HOST));
    assert_eq!(ans.origin_realm(), Some(fx::DRA_REALM));
    assert_eq!(ans.session_id(), Some(fx::SESSION));
    assert!(error_message(&ans).contains("loop"));
    let s = r.stats();
    assert_eq!((s.requests_in, s.answers_generated, s.pending), (1, 1, 0));
    assert!(r.invariant_ok());
    // Someone else's identity in Route-Record is no loop.
    let ok = fx::ccr_i_gx().with(Avp::utf8(avp_code::ROUTE_RECORD, "other-dra.example.net"));
    assert!(from_pgw(&mut r, ms(0), ok, PCRF1).is_ok());
}

#[test]
fn full_pending_table_answers_3004_until_room_frees_up() {
    let mut r = relay(2);
    let a = from_pgw(&mut r, ms(0), fx::ccr_i_gx(), PCRF1).expect("1st");
    from_pgw(&mut r, ms(0), fx::ccr_u_gy(), PCRF2).expect("2nd");
    let req = fx::ccr_i_gx();
    let err = from_pgw(&mut r, ms(1), req.clone(), PCRF1).expect_err("full");
    assert!(
        matches!(err, RelayError::TooBusy { capacity: 2, .. }),
        "{err}"
    );
    let ans = err.into_answer().expect("answer");
    assert_eq!(ans.result_code(), Some(result_code::TOO_BUSY));
    assert!(ans.is_error());
    assert_eq!(ans.hop_by_hop, req.hop_by_hop);
    assert!(route_records(&ans).is_empty());
    assert!(r.invariant_ok());
    assert!(r.on_answer(PCRF1, pcrf_answer(&a)).is_some());
    assert!(from_pgw(&mut r, ms(2), req, PCRF1).is_ok());
    let s = r.stats();
    assert_eq!(
        (
            s.requests_in,
            s.answers_relayed,
            s.answers_generated,
            s.pending
        ),
        (4, 1, 1, 2)
    );
    assert!(r.invariant_ok());
}

#[test]
fn timeout_retries_once_on_alternate_with_t_flag_then_answers_3002() {
    let mut r = relay(8);
    let req = fx::ccr_i_gx();
    let fwd = from_pgw(&mut r, ms(0), req.clone(), PCRF1).expect("forwarded");
    assert!(!fwd.is_retransmit());
    assert_eq!(r.poll_timeout(), Some(TIMEOUT));
    assert!(r.handle_timeout(ms(1999)).is_empty(), "not yet");

    let mut exp = r.handle_timeout(ms(2000));
    assert_eq!(exp.len(), 1);
    let retry = expect_retry(exp.remove(0));
    assert_eq!(retry.exclude, PCRF1);
    assert_eq!(retry.cause, FailureCause::Timeout);
    assert_eq!(retry.downstream, PGW);
    assert!(retry.request.is_retransmit(), "T flag on the retry");
    assert_eq!(
        r.poll_released().map(|x| x.peer),
        Some(PCRF1),
        "PCRF1's slot is free"
    );
    assert!(r.invariant_ok());
    assert_eq!(
        r.stats().pending,
        1,
        "still counted while the caller routes"
    );

    let (to, resent) = expect_send(retry_on_pcrf2(&mut r, ms(2000), retry));
    assert_eq!(to, PCRF2);
    assert!(resent.is_retransmit());
    assert_eq!(resent.flags, req.flags | flags::T);
    assert_eq!(
        resent.end_to_end, req.end_to_end,
        "End-to-End kept for duplicate detection"
    );
    assert_ne!(resent.hop_by_hop, req.hop_by_hop);
    assert_eq!(
        route_records(&resent),
        vec![fx::PGW_HOST],
        "Route-Record not doubled"
    );
    assert_eq!(r.poll_timeout(), Some(ms(4000)));

    // The first peer answers late: not ours any more.
    assert!(r.on_answer(PCRF1, pcrf_answer(&fwd)).is_none());
    assert_eq!(r.stats().late_answers, 1);

    let mut exp = r.handle_timeout(ms(4000));
    assert_eq!(exp.len(), 1);
    let d = expect_answer(exp.remove(0));
    assert_eq!(d.to, PGW);
    let a = d.answer;
    assert_eq!(a.result_code(), Some(result_code::UNABLE_TO_DELIVER));
    assert!(a.is_error(), "3002: E bit");
    assert!(!a.is_retransmit(), "T never on answers");
    assert_eq!(a.hop_by_hop, req.hop_by_hop, "downstream's Hop-by-Hop");
    assert_eq!(a.end_to_end, req.end_to_end);
    assert_eq!(a.origin_host(), Some(fx::DRA_HOST));
    assert_eq!(a.origin_realm(), Some(fx::DRA_REALM));
    assert_eq!(a.session_id(), Some(fx::SESSION));
    assert_eq!(a.cc_request_type(), Some(1));
    assert!(
        error_message(&a).contains("after one retry"),
        "{}",
        error_message(&a)
    );
    assert_eq!(r.poll_released().map(|x| x.peer), Some(PCRF2));
    let s = r.stats();
    assert_eq!(
        (s.requests_in, s.retries, s.answers_generated, s.pending),
        (1, 1, 1, 0)
    );
    assert!(r.invariant_ok());
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn retried_request_answered_by_the_alternate_reaches_the_downstream() {
    let mut r = relay(8);
    let req = fx::ccr_i_gx();
    from_pgw(&mut r, ms(0), req.clone(), PCRF1).expect("forwarded");
    let retry = expect_retry(r.handle_timeout(ms(2000)).remove(0));
    let (_, resent) = expect_send(retry_on_pcrf2(&mut r, ms(2000), retry));
    let d = r.on_answer(PCRF2, pcrf_answer(&resent)).expect("delivered");
    assert_eq!((d.to, d.answer.hop_by_hop), (PGW, req.hop_by_hop));
    assert_eq!(d.answer.result_code(), Some(result_code::SUCCESS));
    assert!(r.is_empty() && r.invariant_ok());
}

#[test]
fn no_alternate_or_no_choice_in_time_answers_3002() {
    let mut r = relay(8);
    from_pgw(&mut r, ms(0), fx::ccr_i_gx(), PCRF1).expect("a");
    from_pgw(&mut r, ms(0), fx::ccr_u_gy(), PCRF1).expect("b");
    let mut exp = r.handle_timeout(ms(2000));
    let first = expect_retry(exp.remove(0));
    let second = expect_retry(exp.remove(0));
    // No alternate peer: 3002 now.
    match r.retry(ms(2000), first, None, TIMEOUT) {
        RetryOutcome::Answer(d) => {
            assert_eq!(d.answer.result_code(), Some(result_code::UNABLE_TO_DELIVER));
            assert!(error_message(&d.answer).contains("no alternate"));
        }
        other => panic!("{other:?}"),
    }
    // The caller never decides about the second: 3002 one timeout later.
    let mut exp = r.handle_timeout(ms(4000));
    let d = expect_answer(exp.remove(0));
    assert_eq!(d.answer.session_id(), Some("pgw1;1700000000;43;gy"));
    assert_eq!(
        retry_on_pcrf2(&mut r, ms(4001), second),
        RetryOutcome::Stale
    );
    let s = r.stats();
    assert_eq!((s.answers_generated, s.retries, s.pending), (2, 0, 0));
    assert!(r.invariant_ok());
}

#[test]
fn peer_failure_fails_over_its_pending_requests_in_order() {
    let mut r = relay(16);
    let mut e2e_sent = Vec::new();
    for i in 0..3u32 {
        let mut req = fx::ccr_i_gx();
        req.end_to_end = 100 + i;
        e2e_sent.push(req.end_to_end);
        from_pgw(&mut r, ms(u64::from(i)), req, PCRF1).expect("to PCRF1");
    }
    let other = r
        .forward(ms(5), PGW2, fx::PGW_HOST, fx::ccr_u_gy(), PCRF2, TIMEOUT)
        .expect("to PCRF2");

    let exp = r.peer_failed(ms(10), PCRF1);
    assert_eq!(exp.len(), 3);
    let retries: Vec<Retry> = exp.into_iter().map(expect_retry).collect();
    assert_eq!(
        retries
            .iter()
            .map(|x| x.request.end_to_end)
            .collect::<Vec<_>>(),
        e2e_sent,
        "in the order they were sent"
    );
    assert!(retries.iter().all(|x| x.cause == FailureCause::PeerFailed
        && x.exclude == PCRF1
        && x.request.is_retransmit()));
    assert_eq!(r.outstanding(PCRF1), 0);
    assert_eq!(r.outstanding(PCRF2), 1, "other peer untouched");
    for _ in 0..3 {
        assert_eq!(r.poll_released().map(|x| x.peer), Some(PCRF1));
    }
    for x in retries {
        let (to, m) = expect_send(retry_on_pcrf2(&mut r, ms(10), x));
        assert_eq!(to, PCRF2);
        assert!(m.is_retransmit());
    }
    assert_eq!(r.outstanding(PCRF2), 4);
    // Now PCRF2 fails too: the retried three get 3002, the fresh one a retry.
    let exp = r.peer_failed(ms(20), PCRF2);
    let (answers, retries): (Vec<_>, Vec<_>) = exp
        .into_iter()
        .partition(|e| matches!(e, Expired::Answer(_)));
    assert_eq!(answers.len(), 3);
    for a in answers {
        let d = expect_answer(a);
        assert_eq!(d.to, PGW);
        assert_eq!(d.answer.result_code(), Some(result_code::UNABLE_TO_DELIVER));
        assert!(error_message(&d.answer).contains("connection failed"));
    }
    let x = expect_retry(retries.into_iter().next().expect("one retry"));
    assert_eq!(
        (x.downstream, x.request.end_to_end),
        (PGW2, other.end_to_end)
    );
    assert!(r.invariant_ok());
}

#[test]
fn answers_for_a_closed_downstream_are_discarded_and_counted() {
    let mut r = relay(16);
    let a = from_pgw(&mut r, ms(0), fx::ccr_i_gx(), PCRF1).expect("a");
    let b = from_pgw(&mut r, ms(0), fx::ccr_u_gy(), PCRF1).expect("b");
    let c = r
        .forward(ms(0), PGW2, fx::PGW_HOST, fx::ccr_i_gx(), PCRF1, TIMEOUT)
        .expect("c");
    r.downstream_closed(PGW.conn_id);
    // The upstream still answers; the slot is freed, the answer goes nowhere.
    assert!(r.on_answer(PCRF1, pcrf_answer(&a)).is_none());
    assert_eq!(r.poll_released().map(|x| x.peer), Some(PCRF1));
    let s = r.stats();
    assert_eq!((s.answers_discarded, s.late_answers), (1, 0));
    // A timeout of a closed downstream's request is not retried.
    let exp = r.handle_timeout(ms(2000));
    assert_eq!(exp.len(), 1, "only PGW2's request is retried");
    let retry = expect_retry(exp.into_iter().next().expect("one"));
    assert_eq!(retry.downstream, PGW2);
    assert_eq!(r.stats().answers_discarded, 2);
    assert!(r.on_answer(PCRF1, pcrf_answer(&b)).is_none());
    assert_eq!(r.stats().late_answers, 1, "b already timed out");
    // PGW2 closes while its retry is being routed.
    r.downstream_closed(PGW2.conn_id);
    assert_eq!(
        retry_on_pcrf2(&mut r, ms(2000), retry),
        RetryOutcome::Discarded
    );
    let _ = c;
    let s = r.stats();
    assert_eq!((s.requests_in, s.answers_discarded, s.pending), (3, 3, 0));
    assert!(r.invariant_ok());
}

#[test]
fn egress_refusals_are_answered_or_dropped_and_never_pending() {
    let mut r = relay(16);
    let req = fx::ccr_i_gx();
    let a = r.admit(PGW, fx::PGW_HOST, req.clone(), 0).expect("a");
    let b = r.admit(PGW, fx::PGW_HOST, fx::ccr_u_gy(), 0).expect("b");
    assert_eq!(r.len(), 0, "admitted, not pending");
    let d = r
        .refused(PGW, &a, result_code::UNABLE_TO_COMPLY, "egress limit")
        .expect("answer");
    assert_eq!(d.answer.result_code(), Some(result_code::UNABLE_TO_COMPLY));
    assert!(!d.answer.is_error(), "5012 is not a protocol error");
    assert_eq!(d.answer.hop_by_hop, req.hop_by_hop);
    drop(b);
    r.dropped();
    assert_eq!(r.poll_released(), None, "neither was ever outstanding");
    let s = r.stats();
    assert_eq!(
        (s.answers_generated, s.requests_dropped, s.pending),
        (1, 1, 0)
    );
    assert!(r.invariant_ok());
}

#[test]
fn send_encodes_once_with_a_fresh_hop_by_hop_id() {
    let mut r = relay(16);
    let req = fx::ccr_i_gx();
    let admitted = r
        .admit(PGW, fx::PGW_HOST, req.clone(), 0)
        .expect("admitted");
    let bytes = r
        .send(ms(0), Held::new(PGW, admitted, TIMEOUT), PCRF1)
        .expect("encoded");
    let sent = dra::diameter::decode(&bytes).expect("decodes");
    assert_ne!(sent.hop_by_hop, req.hop_by_hop);
    assert_eq!(sent.end_to_end, req.end_to_end);
    assert_eq!(route_records(&sent), [fx::PGW_HOST]);
    assert_eq!(r.outstanding(PCRF1), 1);
    let d = r.on_answer(PCRF1, pcrf_answer(&sent)).expect("relayed");
    assert_eq!(d.answer.hop_by_hop, req.hop_by_hop);
    assert_eq!(r.outstanding(PCRF1), 0);
    let rel = r.poll_released().expect("released");
    assert_eq!((rel.peer, rel.answered_sent_at), (PCRF1, Some(ms(0))));
    // Capacity counts what the caller holds elsewhere (an egress queue).
    let err = r
        .admit(PGW, fx::PGW_HOST, fx::ccr_i_gx(), 16)
        .expect_err("full with 16 held elsewhere");
    assert!(matches!(err, RelayError::TooBusy { .. }));
}

#[test]
fn answers_are_not_forwarded_as_requests() {
    let mut r = relay(4);
    let err = from_pgw(&mut r, ms(0), fx::cca_i_gx(), PCRF1).expect_err("an answer");
    assert!(matches!(err, RelayError::NotARequest { command_code: 272 }));
    assert_eq!(err.into_answer(), None);
    assert_eq!(r.stats().requests_in, 0);
}

#[test]
fn marked_bit_never_leaves_the_host() {
    let mut r = relay(4);
    let mut req = fx::ccr_i_gx();
    req.flags |= flags::RATE_LIMIT_MARK;
    let fwd = from_pgw(&mut r, ms(0), req, PCRF1).expect("forwarded");
    assert_eq!(fwd.flags & flags::RESERVED, 0);
}

/// What the randomized run remembers about each request.
struct Sent {
    from: DownstreamRef,
    hop_by_hop: u32,
    outcomes: u32,
}

fn deliver(d: Delivery, sent: &mut [Sent]) {
    let s = &mut sent[d.answer.end_to_end as usize];
    assert_eq!(
        d.to, s.from,
        "answer to the connection the request came from"
    );
    assert_eq!(d.answer.hop_by_hop, s.hop_by_hop, "Hop-by-Hop restored");
    assert!(!d.answer.is_request());
    s.outcomes += 1;
}

fn handle_expired(exp: Vec<Expired>, retries: &mut Vec<Retry>, sent: &mut [Sent]) {
    for e in exp {
        match e {
            Expired::Answer(d) => {
                assert_eq!(d.answer.result_code(), Some(result_code::UNABLE_TO_DELIVER));
                assert!(d.answer.is_error());
                deliver(d, sent);
            }
            Expired::Retry(x) => {
                assert!(x.request.is_retransmit());
                retries.push(x);
            }
        }
    }
}

/// 100,000 requests with random answers, duplicates, timeouts, peer failures,
/// downstream closes, retry choices and egress refusals. After every step the counters
/// add up; at the end every request has exactly one outcome: one delivery, or (its
/// downstream closed) a discard, or a drop.
#[test]
fn randomized_run_every_request_gets_exactly_one_outcome() {
    const REQUESTS: u32 = 100_000;
    const PEERS: usize = 4;
    const CONNS: u64 = 8;
    let mut rng = SplitMix64::new(0x00d1_a5ee_d000_0001);
    let mut r = relay(300);
    let mut now = Duration::ZERO;
    // The connection ids in use; a closed connection's slot gets a fresh id (the shell
    // never reuses one).
    let mut conn_ids: Vec<u64> = (0..CONNS).collect();
    let mut next_conn_id = CONNS;
    let mut sent: Vec<Sent> = Vec::with_capacity(REQUESTS as usize);
    // Requests upstream as the peers see them (may be stale after failover).
    let mut upstream: Vec<(PeerId, Message)> = Vec::new();
    let mut retries: Vec<Retry> = Vec::new();
    let mut dropped = 0u64;
    let mut closes = 0u64;

    let mut next = 0u32;
    let mut steps = 0u64;
    while next < REQUESTS {
        steps += 1;
        now += Duration::from_micros(200 + rng.below(600));
        let roll = rng.below(1000);
        if roll < 500 {
            // A new request.
            let conn = rng.below(CONNS);
            let from = DownstreamRef {
                conn_id: conn_ids[conn as usize],
            };
            let hbh = rng.next_u64() as u32;
            let mut req = Message::request(272, 16_777_238, hbh, next)
                .proxiable()
                .with(Avp::utf8(avp_code::SESSION_ID, &format!("s;{next}")).mandatory());
            if rng.below(100) == 0 {
                req.push(Avp::utf8(avp_code::ROUTE_RECORD, fx::DRA_HOST).mandatory());
            }
            sent.push(Sent {
                from,
                hop_by_hop: hbh,
                outcomes: 0,
            });
            let to = PeerId(rng.below(PEERS as u64) as usize);
            let timeout = Duration::from_millis(50 + rng.below(200));
            // Egress refusals now and then: admitted, then answered or dropped.
            let refusal = rng.below(200);
            let result = if refusal < 2 {
                r.admit(from, "pgw", req, 0).map(|admitted| {
                    if refusal == 0 {
                        let d = r
                            .refused(from, &admitted, result_code::TOO_BUSY, "egress")
                            .expect("live");
                        deliver(d, &mut sent);
                    } else {
                        r.dropped();
                        sent[next as usize].outcomes += 1;
                        dropped += 1;
                    }
                })
            } else {
                r.forward(now, from, "pgw", req, to, timeout).map(|fwd| {
                    assert_eq!(fwd.end_to_end, next);
                    upstream.push((to, fwd));
                })
            };
            if let Err(e) = result {
                let rc = e.result_code().expect("answerable");
                assert!(rc == result_code::LOOP_DETECTED || rc == result_code::TOO_BUSY);
                let a = e.into_answer().expect("answer");
                assert_eq!((a.hop_by_hop, a.end_to_end), (hbh, next));
                deliver(
                    Delivery {
                        to: from,
                        answer: a,
                    },
                    &mut sent,
                );
            }
            next += 1;
        } else if roll < 900 {
            // An upstream answer (possibly late, possibly answered again later).
            if !upstream.is_empty() {
                // Mostly one of the latest requests; now and then an old one (late).
                let n = upstream.len() as u64;
                let i = if rng.below(20) == 0 {
                    rng.below(n)
                } else {
                    n - 1 - rng.below(n.min(32))
                } as usize;
                let (peer, fwd) = if rng.below(20) == 0 {
                    upstream[i].clone() // duplicate answer
                } else {
                    upstream.swap_remove(i)
                };
                let ans = Message::answer(272, 16_777_238, fwd.hop_by_hop, fwd.end_to_end)
                    .with(Avp::u32(avp_code::RESULT_CODE, result_code::SUCCESS));
                if let Some(d) = r.on_answer(peer, ans) {
                    assert_eq!(d.answer.result_code(), Some(result_code::SUCCESS));
                    deliver(d, &mut sent);
                }
            }
        } else if roll < 960 {
            // Resolve a pending retry choice (or leave it to time out).
            if !retries.is_empty() {
                let x = retries.swap_remove(rng.below(retries.len() as u64) as usize);
                let alt = (x.exclude.0 + 1 + rng.below(PEERS as u64 - 1) as usize) % PEERS;
                let choice = (rng.below(4) != 0).then_some(PeerId(alt));
                match r.retry(now, x, choice, Duration::from_millis(100)) {
                    RetryOutcome::Send { to, request } => {
                        assert!(request.is_retransmit());
                        upstream.push((to, request));
                    }
                    RetryOutcome::Answer(d) => deliver(d, &mut sent),
                    RetryOutcome::Discarded | RetryOutcome::Stale => {}
                }
            }
        } else if roll < 965 {
            let exp = r.peer_failed(now, PeerId(rng.below(PEERS as u64) as usize));
            handle_expired(exp, &mut retries, &mut sent);
        } else if roll < 968 {
            // A downstream connection closes; a new one takes its place.
            let conn = rng.below(CONNS) as usize;
            closes += 1;
            r.downstream_closed(conn_ids[conn]);
            conn_ids[conn] = next_conn_id;
            next_conn_id += 1;
        }
        if rng.below(100) == 0 {
            retries.clear(); // the shell forgot some: they must still end
        }
        if r.poll_timeout().is_some_and(|t| t <= now) {
            let exp = r.handle_timeout(now);
            handle_expired(exp, &mut retries, &mut sent);
        }
        while r.poll_released().is_some() {}
        assert!(r.invariant_ok(), "step {steps}: {:?}", r.stats());
    }
    // Drain: no more answers; every choice says "no alternate"; time runs out.
    for _ in 0..4 {
        for x in retries.drain(..) {
            if let RetryOutcome::Answer(d) = r.retry(now, x, None, Duration::ZERO) {
                deliver(d, &mut sent);
            }
        }
        now += Duration::from_secs(10);
        let exp = r.handle_timeout(now);
        handle_expired(exp, &mut retries, &mut sent);
    }
    let s = r.stats();
    assert_eq!(s.pending, 0, "{s:?}");
    assert!(r.invariant_ok(), "{s:?}");
    assert_eq!(s.requests_in, u64::from(REQUESTS));
    assert_eq!(s.requests_dropped, dropped);
    let mut zero = 0u64;
    for (i, x) in sent.iter().enumerate() {
        assert!(x.outcomes <= 1, "request {i} got {} outcomes", x.outcomes);
        if x.outcomes == 0 {
            zero += 1;
        }
    }
    let delivered: u64 = sent.iter().map(|x| u64::from(x.outcomes)).sum::<u64>() - dropped;
    assert_eq!(delivered, s.answers_relayed + s.answers_generated);
    assert_eq!(
        zero, s.answers_discarded,
        "the only silent outcomes are discards"
    );
    // The run exercised every path.
    assert!(s.answers_relayed > 10_000, "{s:?}");
    assert!(s.answers_generated > 1_000, "{s:?}");
    assert!(s.answers_discarded > 100, "{s:?}");
    assert!(s.late_answers > 100, "{s:?}");
    assert!(s.retries > 1_000, "{s:?}");
    assert!(closes > 100);
    println!("{s:?}");
}
