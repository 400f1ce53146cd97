//! Egress RLF over real TCP: the agent holds a PCRF group to its configured rate and
//! rejects what would wait longer than the delay tolerance.

mod support;

use std::time::Duration;

use dra::diameter::result_code;
use support::agent::*;

const EGRESS: &str = "[[peer_rate_limit_profile]]\ngroup = \"pcrf\"\ndirection = \"egress\"\n\
                      rate = 200\nburst = 5\naction = \"reject\"\nresult_code = 3004\n\
                      error_message = \"egress limit pcrf 200/s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_rlf_holds_the_pcrf_group_to_its_rate_and_rejects_beyond_tolerance() {
    let lab = Lab::start(2, 0, None, EGRESS, None).await;
    let pgw = lab.pgw("pgw1", None).await;
    // Offer 400/s (twice the limit) for 3 s, open loop.
    let offered = 1200usize;
    let mut tick = tokio::time::interval(Duration::from_micros(2500));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..offered {
        tick.tick().await;
        let pgw = pgw.clone();
        tasks.spawn(async move {
            let sid = format!("rlf;{i}");
            pgw.request(pgw1_gx_ccr(&sid, cc::EVENT_LIKE, 0)).await
        });
    }
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
    // The servers saw the group's rate: arrivals after the initial burst, ±3 %.
    let mut arrivals: Vec<_> = lab
        .pcrfs
        .iter()
        .flat_map(|s| s.stats.arrivals.lock().expect("arrivals").clone())
        .collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), ok);
    let steady = &arrivals[10..];
    let span = steady
        .last()
        .expect("last")
        .duration_since(steady[0])
        .as_secs_f64();
    let rate = (steady.len() - 1) as f64 / span;
    assert!(
        (rate - 200.0).abs() <= 6.0,
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
