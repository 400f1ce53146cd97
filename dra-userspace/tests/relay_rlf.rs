//! Egress RLF on fake time: how many requests reach an upstream group, when, and what
//! happens to the rest.

use std::time::Duration;

use dra::relay::{LimitAction, Offer, RejectProfile, Rlf, RlfConfig, RlfConfigError};
use dra::routing::PeerId;

const A: PeerId = PeerId(10);
const B: PeerId = PeerId(11);

/// No requests outstanding (limiters without a cap ignore the count).
const NONE: fn(PeerId) -> u32 = |_| 0;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn reject(code: u32, text: &str) -> LimitAction {
    LimitAction::Reject(RejectProfile {
        result_code: code,
        error_message: text.to_owned(),
    })
}

#[derive(Debug, Default)]
struct Tally {
    offered: u64,
    sent: u64,
    refused: u64,
    expired: u64,
    /// Send times, nanoseconds.
    sent_at: Vec<u64>,
}

/// Offers `per_sec` items per second, evenly spaced, for `dur`, and drives the
/// limiter the way the shell does: wake at the next offer or at `poll_timeout`, drain
/// `poll_expired` then `poll_ready`.
fn drive(rlf: &mut Rlf<u64>, per_sec: u64, dur: Duration) -> Tally {
    let mut t = Tally::default();
    let end = dur.as_nanos() as u64;
    let mut k = 0u64;
    let mut now = 0u64;
    let mut wakeups = 0u64;
    loop {
        let next_offer = k * 1_000_000_000 / per_sec;
        let wake = match rlf.poll_timeout(NONE) {
            Some(p) if (p.as_nanos() as u64) < next_offer => (p.as_nanos() as u64).max(now),
            _ => next_offer,
        };
        if wake >= end {
            break;
        }
        wakeups += 1;
        assert!(
            wakeups < 100 * (k + 10),
            "the limiter keeps waking without progress"
        );
        now = wake;
        let at = Duration::from_nanos(now);
        while rlf.poll_expired(at).is_some() {
            t.expired += 1;
        }
        while rlf.poll_ready(at, NONE).is_some() {
            t.sent += 1;
            t.sent_at.push(now);
        }
        if now == next_offer {
            t.offered += 1;
            match rlf.offer(at, k, A, NONE) {
                Offer::Send(_) => {
                    t.sent += 1;
                    t.sent_at.push(now);
                }
                Offer::Queued => {}
                Offer::Rejected { .. } | Offer::Dropped(_) => t.refused += 1,
            }
            k += 1;
        }
    }
    t
}

#[test]
fn rlf_holds_the_rate_over_60_virtual_seconds_under_3x_load() {
    for rate in [333.3, 1000.0, 2500.0] {
        let burst = (rate / 10.0_f64).ceil() as u32;
        let mut rlf = Rlf::new(RlfConfig::new(rate, burst)).expect("valid");
        let offered = (rate * 3.0).round() as u64;
        let t = drive(&mut rlf, offered, Duration::from_secs(60));
        let target = rate * 60.0;
        let err = (t.sent as f64 - target).abs() / target;
        println!(
            "rate {rate}/s: sent {} (target {target}, error {:.4} %), offered {}, refused {}, \
             expired {}",
            t.sent,
            err * 100.0,
            t.offered,
            t.refused,
            t.expired
        );
        assert!(
            err <= 0.01,
            "rate {rate}: sent {} in 60 s, target {target}",
            t.sent
        );
        assert!(
            t.sent as f64 <= target + f64::from(burst) + 1.0,
            "never above rate + burst"
        );
        // Every offered item is accounted for.
        assert_eq!(
            t.offered,
            t.sent + t.refused + t.expired + rlf.queue_len() as u64,
            "rate {rate}: {t:?}"
        );
        assert!(
            t.refused + t.expired > t.offered / 2,
            "the excess is refused: {t:?}"
        );
        // In every whole second, at most rate + burst (the limit holds locally too).
        for sec in 0..60u64 {
            let n = t
                .sent_at
                .iter()
                .filter(|&&s| s / 1_000_000_000 == sec)
                .count() as f64;
            assert!(
                n <= rate + f64::from(burst) + 1.0,
                "rate {rate}: {n} sent in second {sec}"
            );
        }
    }
}

#[test]
fn rlf_rate_is_exact_over_long_runs() {
    // No burst, no queue: exactly one message per interval, no drift.
    let mut rlf = Rlf::new(RlfConfig {
        queue_limit: 0,
        ..RlfConfig::new(1000.0, 1)
    })
    .expect("valid");
    let t = drive(&mut rlf, 3000, Duration::from_secs(60));
    assert_eq!(t.sent, 60_000);
    assert_eq!(t.refused, 120_000);
    // A rate that is not a whole number of nanoseconds per message: 3 per second,
    // offered at 3000/s for an hour. Burst 2 absorbs the sub-millisecond lateness of
    // the offers, so the count is the ideal one: 2 at t = 0, then one every ⅓ s.
    let mut rlf = Rlf::new(RlfConfig {
        queue_limit: 0,
        ..RlfConfig::new(3.0, 2)
    })
    .expect("valid");
    let t = drive(&mut rlf, 3000, Duration::from_secs(3600));
    assert_eq!(t.sent, 3 * 3600 + 1, "no drift over an hour");
}

#[test]
fn queued_items_beyond_the_delay_tolerance_get_the_action() {
    let mut rlf = Rlf::new(RlfConfig {
        queue_limit: 100,
        delay_tolerance: Duration::from_secs(2),
        action: reject(3004, "PCRF group busy"),
        ..RlfConfig::new(10.0, 1)
    })
    .expect("valid");
    assert_eq!(rlf.offer(ms(0), 0u64, A, NONE), Offer::Send(0));
    for i in 1..=30u64 {
        assert_eq!(rlf.offer(ms(0), i, A, NONE), Offer::Queued, "slow down");
    }
    let mut sent = Vec::new();
    let mut expired = Vec::new();
    while let Some(at) = rlf.poll_timeout(NONE) {
        while let Some(o) = rlf.poll_expired(at) {
            assert!(o.waited > Duration::from_secs(2));
            assert_eq!(o.action, reject(3004, "PCRF group busy"));
            assert_eq!(o.peer, A);
            expired.push(o.item);
        }
        while let Some((item, peer)) = rlf.poll_ready(at, NONE) {
            assert_eq!(peer, A);
            sent.push((item, at));
        }
    }
    // One token every 100 ms: item i goes at i × 100 ms while it has waited ≤ 2 s.
    assert_eq!(sent.len(), 20);
    for (n, (item, at)) in sent.iter().enumerate() {
        let i = n as u64 + 1;
        assert_eq!((*item, *at), (i, ms(100 * i)), "FIFO at the token times");
    }
    assert_eq!(expired, (21..=30).collect::<Vec<_>>());
    assert_eq!(rlf.queue_len(), 0);
    let s = rlf.stats();
    assert_eq!((s.sent_direct, s.sent_queued, s.expired), (1, 20, 10));
}

#[test]
fn full_queue_gets_the_action_at_once() {
    for action in [reject(5012, "egress limit"), LimitAction::Drop] {
        let mut rlf = Rlf::new(RlfConfig {
            queue_limit: 3,
            action: action.clone(),
            ..RlfConfig::new(1.0, 1)
        })
        .expect("valid");
        assert_eq!(rlf.offer(ms(0), 0u32, A, NONE), Offer::Send(0));
        for i in 1..=3 {
            assert_eq!(rlf.offer(ms(1), i, A, NONE), Offer::Queued);
        }
        let got = rlf.offer(ms(2), 4, A, NONE);
        match action {
            LimitAction::Drop => assert_eq!(got, Offer::Dropped(4)),
            LimitAction::Reject(_) => assert_eq!(
                got,
                Offer::Rejected {
                    item: 4,
                    result_code: 5012,
                    error_message: "egress limit".to_owned()
                }
            ),
        }
        assert_eq!(rlf.queue_len(), 3);
        assert_eq!(rlf.stats().refused, 1);
    }
}

#[test]
fn zero_delay_tolerance_never_queues() {
    let mut rlf = Rlf::new(RlfConfig {
        delay_tolerance: Duration::ZERO,
        ..RlfConfig::new(100.0, 2)
    })
    .expect("valid");
    assert_eq!(rlf.offer(ms(0), 1u8, A, NONE), Offer::Send(1));
    assert_eq!(rlf.offer(ms(0), 2, A, NONE), Offer::Send(2));
    assert!(matches!(
        rlf.offer(ms(0), 3, A, NONE),
        Offer::Rejected {
            item: 3,
            result_code: 3002,
            ..
        }
    ));
    assert_eq!(
        rlf.offer(ms(10), 4, A, NONE),
        Offer::Send(4),
        "one token back after 10 ms"
    );
}

#[test]
fn back_pressure_says_when_to_send_again() {
    let mut rlf = Rlf::new(RlfConfig::new(100.0, 1)).expect("valid");
    assert_eq!(rlf.offer(ms(0), 'a', A, NONE), Offer::Send('a'));
    assert_eq!(rlf.offer(ms(0), 'b', A, NONE), Offer::Queued);
    assert_eq!(rlf.offer(ms(1), 'c', A, NONE), Offer::Queued, "behind b");
    assert_eq!(rlf.poll_timeout(NONE), Some(ms(10)));
    assert_eq!(rlf.poll_ready(Duration::from_micros(9_999), NONE), None);
    assert_eq!(rlf.poll_ready(ms(10), NONE), Some(('b', A)));
    assert_eq!(rlf.poll_ready(ms(10), NONE), None);
    assert_eq!(rlf.poll_timeout(NONE), Some(ms(20)));
    // A new offer does not overtake a queued item whose token is due.
    assert_eq!(rlf.offer(ms(25), 'd', A, NONE), Offer::Queued);
    assert_eq!(rlf.poll_ready(ms(25), NONE), Some(('c', A)));
}

/// The caller's count of requests outstanding per peer (the relay's, in the agent).
#[derive(Default)]
struct Outstanding(std::cell::RefCell<std::collections::HashMap<PeerId, u32>>);

impl Outstanding {
    fn of(&self) -> impl Fn(PeerId) -> u32 + '_ {
        |p| self.0.borrow().get(&p).copied().unwrap_or(0)
    }
    fn sent(&self, p: PeerId) {
        *self.0.borrow_mut().entry(p).or_insert(0) += 1;
    }
    fn answered(&self, p: PeerId) {
        if let Some(n) = self.0.borrow_mut().get_mut(&p) {
            *n = n.saturating_sub(1);
        }
    }
}

/// An RLF of `rate`/s and `burst` that keeps at most `max` requests outstanding per peer.
fn with_max_outstanding<T>(max: u32, rate: f64, burst: u32) -> Rlf<T> {
    Rlf::new(RlfConfig {
        max_outstanding_per_peer: Some(max),
        ..RlfConfig::new(rate, burst)
    })
    .expect("valid")
}

#[test]
fn max_outstanding_blocks_until_answers_arrive() {
    let mut rlf = with_max_outstanding(2, 1e6, 100);
    let out = Outstanding::default();
    let now = ms(0);
    let offer = |rlf: &mut Rlf<u32>, i: u32, p: PeerId| {
        let o = rlf.offer(now, i, p, out.of());
        if matches!(o, Offer::Send(_)) {
            out.sent(p);
        }
        o
    };
    assert_eq!(offer(&mut rlf, 1, A), Offer::Send(1));
    assert_eq!(offer(&mut rlf, 2, A), Offer::Send(2));
    for i in 3..=5 {
        assert_eq!(offer(&mut rlf, i, A), Offer::Queued, "A has 2 outstanding");
    }
    // Another peer of the group is not held up by A's queue.
    assert_eq!(offer(&mut rlf, 100, B), Offer::Send(100));
    assert_eq!(out.of()(A), 2);
    assert_eq!(
        rlf.poll_ready(ms(1), out.of()),
        None,
        "tokens, but no answers yet"
    );
    // Only the delay tolerance is left to wait for.
    assert_eq!(
        rlf.poll_timeout(out.of()),
        Some(Duration::from_secs(2) + Duration::from_nanos(1))
    );
    let ready = |rlf: &mut Rlf<u32>, at| {
        let r = rlf.poll_ready(at, out.of());
        if let Some((_, p)) = r {
            out.sent(p);
        }
        r
    };
    out.answered(A);
    assert_eq!(ready(&mut rlf, ms(2)), Some((3, A)));
    assert_eq!(ready(&mut rlf, ms(2)), None);
    out.answered(A);
    out.answered(A);
    assert_eq!(ready(&mut rlf, ms(3)), Some((4, A)));
    assert_eq!(ready(&mut rlf, ms(3)), Some((5, A)));
    assert_eq!(out.of()(A), 2);
    assert_eq!(rlf.queue_len(), 0);
}

#[test]
fn resumes_after_draining() {
    let mut rlf = Rlf::new(RlfConfig::new(100.0, 5)).expect("valid");
    // Overload for one second.
    let t = drive(&mut rlf, 300, Duration::from_secs(1));
    assert!(t.sent <= 106, "{t:?}");
    assert!(rlf.queue_len() > 0);
    // Then quiet: the queue drains at the token times, nothing expires.
    let mut drained = 0;
    while let Some(at) = rlf.poll_timeout(NONE) {
        assert!(
            rlf.poll_expired(at).is_none(),
            "drains within the tolerance"
        );
        while rlf.poll_ready(at, NONE).is_some() {
            drained += 1;
        }
    }
    assert_eq!(rlf.queue_len(), 0);
    assert_eq!(t.sent + drained, t.offered - t.refused - t.expired);
    // After a pause the bucket is full again: a burst goes out at once.
    let later = Duration::from_secs(60);
    for i in 0..5u64 {
        assert_eq!(rlf.offer(later, i, A, NONE), Offer::Send(i));
    }
    assert_eq!(rlf.offer(later, 5, A, NONE), Offer::Queued);
}

#[test]
fn peer_failure_returns_its_queued_items() {
    let mut rlf = with_max_outstanding(1, 1000.0, 10);
    let out = Outstanding::default();
    let offer = |rlf: &mut Rlf<&'static str>, at, item, p: PeerId| {
        let o = rlf.offer(at, item, p, out.of());
        if matches!(o, Offer::Send(_)) {
            out.sent(p);
        }
        o
    };
    assert_eq!(offer(&mut rlf, ms(0), "a1", A), Offer::Send("a1"));
    assert_eq!(offer(&mut rlf, ms(0), "a2", A), Offer::Queued);
    assert_eq!(offer(&mut rlf, ms(0), "b1", B), Offer::Send("b1"));
    assert_eq!(offer(&mut rlf, ms(0), "b2", B), Offer::Queued);
    assert_eq!(offer(&mut rlf, ms(0), "a3", A), Offer::Queued);
    assert_eq!(rlf.on_peer_failed(A), vec!["a2", "a3"]);
    // The caller's count: A's outstanding request failed over with it.
    out.answered(A);
    assert_eq!(out.of()(A), 0);
    assert_eq!(rlf.queue_len(), 1);
    assert_eq!(
        offer(&mut rlf, ms(1), "a4", A),
        Offer::Send("a4"),
        "A usable again"
    );
    out.answered(B);
    assert_eq!(rlf.poll_ready(ms(1), out.of()), Some(("b2", B)));
}

#[test]
fn invalid_settings_are_refused() {
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            Rlf::<u8>::new(RlfConfig::new(rate, 1)),
            Err(RlfConfigError::InvalidRate { .. })
        ));
    }
    assert_eq!(
        Rlf::<u8>::new(RlfConfig::new(10.0, 0)).err(),
        Some(RlfConfigError::ZeroBurst)
    );
}
