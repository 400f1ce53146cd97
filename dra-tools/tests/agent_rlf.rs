//! Egress RLF over real TCP: the agent holds a PCRF group to its configured rate and
//! rejects what would wait longer than the delay tolerance.

mod support;

use std::time::{Duration, Instant};

use dra::diameter::result_code;
use support::agent::*;

/// The group's egress limit: 200/s, a burst of 200 ms (a stall of this test's runtime
/// shorter than that, on a busy machine, costs the servers no admission: the bucket
/// banks it).
const EGRESS: &str = "[[peer_rate_limit_profile]]\ngroup = \"pcrf\"\ndirection = \"egress\"\n\
                      rate = 200\nburst = 40\naction = \"reject\"\nresult_code = 3004\n\
                      error_message = \"egress limit pcrf 200/s\"\n";
const RATE: f64 = 200.0;
const BURST: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_rlf_holds_the_pcrf_group_to_its_rate_and_rejects_beyond_tolerance() {
    let lab = Lab::start(2, 0, None, EGRESS, None).await;
    let pgw = lab.pgw("pgw1", None).await;
    // Offer 500/s (two and a half times the limit) for 3 s, open loop.
    let offered = 1500usize;
    let mut tick = tokio::time::interval(Duration::from_micros(2000));
    let mut tasks = tokio::task::JoinSet::new();
    let mut first = None;
    for i in 0..offered {
        tick.tick().await;
        first.get_or_insert_with(Instant::now);
        let pgw = pgw.clone();
        tasks.spawn(async move {
            let sid = format!("rlf;{i}");
            pgw.request(pgw1_gx_ccr(&sid, cc::EVENT_LIKE, 0)).await
        });
    }
    // The precondition, measured: offered at least twice the limit.
    let sending = first.expect("sent").elapsed().as_secs_f64();
    let offered_per_s = (offered - 1) as f64 / sending;
    assert!(
        offered_per_s >= 2.0 * RATE,
        "offered {offered_per_s:.1}/s, less than twice the limit of {RATE}/s"
    );
    let mut ok = 0usize;
    let mut rejected = 0usize;
    while let Some(r) = tasks.join_next().await {
        let a = r.expect("task").expect("every request answered");
        match a.result_code() {
            Some(result_code::SUCCESS) => ok += 1,
            Some(result_code::TOO_BUSY) => {
                assert_eq!(
                    a.find(dra::diameter::avp_code::ERROR_MESSAGE)
                        .and_then(|x| x.as_utf8().ok()),
                    Some("egress limit pcrf 200/s")
                );
                assert_eq!(a.origin_host(), Some(DRA_HOST));
                rejected += 1;
            }
            other => panic!("unexpected result {other:?}"),
        }
    }
    assert_eq!(ok + rejected, offered);
    // Roughly half goes through, the rest is refused once the queue holds more than
    // the delay tolerance (200 ms = 40 requests) worth.
    assert!(rejected > offered / 3, "rejected {rejected}");
    // The servers saw the group's rate: arrivals after the initial burst (the bucket's
    // burst spent at the offered rate, twice the limit: two bursts' worth), ±3 %.
    let mut arrivals: Vec<_> = lab
        .pcrfs
        .iter()
        .flat_map(|s| s.stats.arrivals.lock().expect("arrivals").clone())
        .collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), ok);
    let steady = &arrivals[2 * BURST..];
    let span = steady
        .last()
        .expect("last")
        .duration_since(steady[0])
        .as_secs_f64();
    let rate = (steady.len() - 1) as f64 / span;
    println!(
        "offered {offered} at {offered_per_s:.1}/s: {ok} admitted, {rejected} rejected; \
         egress rate at the servers {rate:.1}/s"
    );
    assert!(
        (rate - RATE).abs() <= 0.03 * RATE,
        "measured egress rate {rate:.1}/s"
    );
    let s = lab.agent.stats().await.expect("stats");
    let (_, egress) = s
        .egress
        .iter()
        .find(|(g, _)| g == "pcrf")
        .expect("pcrf limiter");
    assert_eq!(egress.offered, offered as u64);
    assert!(s.invariant_ok());
}
