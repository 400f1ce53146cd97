//! Many mixed Gx/Gy sessions through the agent over real TCP: exactly one answer per
//! request, session binding, failover when a PCRF dies.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dra::diameter::result_code;
use support::agent::*;
use tokio::sync::Semaphore;

/// Per session: CCR-I, CCR-U, CCR-T in order; which server answered each, and codes.
struct SessionResult {
    app: u32,
    servers: Vec<String>,
    codes: Vec<u32>,
}

/// Runs `sessions` sessions (3 requests each) from two PGWs, at most `window` at once.
/// `after` is called once when `trigger` sessions have finished.
async fn run_sessions(
    lab: &Lab,
    sessions: usize,
    window: usize,
    trigger: usize,
    after: impl FnOnce() + Send + 'static,
) -> (Vec<SessionResult>, u64) {
    let pgws = [lab.pgw("pgw1", None).await, lab.pgw("pgw2", None).await];
    let sem = Arc::new(Semaphore::new(window));
    let unanswered = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let fired = Arc::new(AtomicBool::new(false));
    let after = Arc::new(std::sync::Mutex::new(Some(after)));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let permit = sem.clone().acquire_owned().await.expect("sem");
        let pgw = pgws[i % 2].clone();
        let origin = format!("pgw{}.{REALM}", i % 2 + 1);
        let (app, realm) = if i % 3 == 2 && !lab.ocss.is_empty() {
            (GY, OCS_REALM)
        } else {
            (GX, PCRF_REALM)
        };
        let unanswered = unanswered.clone();
        let done = done.clone();
        let fired = fired.clone();
        let after = after.clone();
        tasks.spawn(async move {
            let sid = format!("{origin};{i};agent-test");
            let mut r = SessionResult {
                app,
                servers: Vec::new(),
                codes: Vec::new(),
            };
            for (n, t) in [cc::INITIAL, cc::UPDATE, cc::TERMINATION]
                .into_iter()
                .enumerate()
            {
                match pgw
                    .request(ccr(&sid, app, &origin, REALM, realm, t, n as u32))
                    .await
                {
                    Some(a) => {
                        assert_eq!(a.session_id(), Some(sid.as_str()));
                        assert_eq!(a.cc_request_type(), Some(t));
                        r.servers.push(a.origin_host().unwrap_or("").to_owned());
                        r.codes.push(a.result_code().unwrap_or(0));
                    }
                    None => {
                        unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            drop(permit);
            if done.fetch_add(1, Ordering::Relaxed) + 1 == trigger as u64
                && !fired.swap(true, Ordering::Relaxed)
                && let Some(f) = after.lock().expect("after").take()
            {
                f();
            }
            r
        });
    }
    let mut out = Vec::new();
    while let Some(r) = tasks.join_next().await {
        out.push(r.expect("session task"));
    }
    (out, unanswered.load(Ordering::Relaxed))
}

fn sessions_from_env(default: usize) -> usize {
    std::env::var("DRA_AGENT_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_gx_gy_every_request_one_answer_and_sessions_stick() {
    let lab = Lab::start(2, 2, None, "", None).await;
    // 34,000 sessions = 102,000 requests (DRA_AGENT_SESSIONS overrides).
    let n = sessions_from_env(34_000);
    let (results, unanswered) = run_sessions(&lab, n, 400, usize::MAX, || {}).await;
    assert_eq!(unanswered, 0);
    assert_eq!(results.len(), n);
    let mut per_server = std::collections::HashMap::<String, u64>::new();
    for r in &results {
        assert_eq!(r.codes, vec![result_code::SUCCESS; 3]);
        // Session binding: CCR-U and CCR-T went where the CCR-I went.
        assert!(
            r.servers.iter().all(|s| *s == r.servers[0]),
            "session moved: {:?}",
            r.servers
        );
        let want = if r.app == GX { PCRF_REALM } else { OCS_REALM };
        assert!(r.servers[0].ends_with(want));
        *per_server.entry(r.servers[0].clone()).or_default() += 1;
    }
    // Round-robin spread both groups over both members.
    assert_eq!(per_server.len(), 4, "{per_server:?}");
    let served: u64 = lab
        .pcrfs
        .iter()
        .chain(&lab.ocss)
        .map(|s| s.stats.requests.load(Ordering::Relaxed))
        .sum();
    assert_eq!(served, 3 * n as u64);
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.requests_in, 3 * n as u64);
    assert_eq!(s.relay.answers_relayed, 3 * n as u64);
    assert_eq!(s.relay.pending, 0);
    assert!(s.invariant_ok(), "{s:?}");
    assert!(
        !lab.metrics
            .encode()
            .contains("dra_unanswered_invariant_violations_total 1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_pcrf_fails_its_sessions_over_without_unanswered_requests() {
    let lab = Arc::new(Lab::start(2, 0, None, "", None).await);
    let n = 3000;
    let l2 = lab.clone();
    let (results, unanswered) = run_sessions(&lab, n, 200, n / 3, move || l2.pcrfs[0].kill()).await;
    assert_eq!(unanswered, 0, "every request got an answer");
    let moved = results
        .iter()
        .filter(|r| {
            r.servers.first().is_some_and(|s| s.starts_with("pcrf1"))
                && r.servers.last().is_some_and(|s| s.starts_with("pcrf2"))
        })
        .count();
    assert!(moved > 0, "sessions bound to pcrf1 continued on pcrf2");
    // After the kill nothing is answered by pcrf1 any more; sessions started late only see pcrf2.
    let late = &results
        .iter()
        .filter(|r| r.servers.iter().all(|s| s.starts_with("pcrf2")))
        .count();
    assert!(*late > n / 3, "later sessions all on pcrf2: {late}");
    // Failed-over requests: answered 2001 by pcrf2 (retried with the T flag) or 3002.
    for r in &results {
        for c in &r.codes {
            assert!(
                *c == result_code::SUCCESS || *c == result_code::UNABLE_TO_DELIVER,
                "{c}"
            );
        }
    }
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.requests_in, 3 * n as u64);
    assert_eq!(s.relay.pending, 0);
    assert!(s.invariant_ok(), "{s:?}");
    let status = lab.agent.status().await.expect("status");
    let pcrf1 = status
        .lines()
        .find(|l| l.starts_with("pcrf1 "))
        .expect("line");
    assert!(!pcrf1.contains(" open "), "{status}");
}
