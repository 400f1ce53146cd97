//! The agent's shared session store against real Redis (docs/architecture.md §9): the agent
//! runs in process, over real TCP on 127.0.0.1, between PGW clients and strict PCRF
//! simulators; the store is a real redis-server or a real six-node Redis Cluster
//! (support/redis_server.rs; every process killed at the end, also on panic).
//!
//! Each store fault gets one test: unreachable at start (`on_error` local and reject),
//! lost mid-run and back, slow beyond the timeout, a cluster master killed. In each, no
//! request hangs (every one is awaited with a bound), every request gets exactly one
//! answer (counted on the client's wire), and each change of the store's state is
//! logged once (the agent's log is read). And a session bound through DRA A is routed
//! by DRA B, sharing the store, to the same server.
//!
//! The PCRF simulators are strict: a CCR-U/T of a session the server never saw is
//! answered 5002 DIAMETER_UNKNOWN_SESSION_ID (RFC 4006 §8) and counted as misrouted.

mod support;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dra::diameter::{Message, answer_for};
use dra_tools::loadgen::script::{ArrivalLog, Handler};
use support::agent::*;
use support::{LogBuf, RedisCluster, RedisServer, free_port, poll_until, redis_text};
use tokio::task::JoinSet;

/// DIAMETER_UNKNOWN_SESSION_ID (RFC 4006 §8 / RFC 6733 §7.1.5).
const UNKNOWN_SESSION: u32 = 5002;
/// Longest any single request may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(10);
/// What the agent logs when the store's state changes (session/mod.rs).
const LOG_DOWN: &str = "session store unreachable";
const LOG_UP: &str = "session store reachable again";

// ------------------------------------------------------------------ the agent's log

/// The agent's log, captured for the test's thread (the agent runs on this test's
/// current-thread runtime, so everything it logs goes here).
#[derive(Clone, Default)]
struct Log(LogBuf);

impl Log {
    /// A log that captures everything logged on this thread at INFO and above until the
    /// guard drops.
    fn installed() -> (Log, tracing::subscriber::DefaultGuard) {
        let log = Log::default();
        let w = log.0.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        (log, tracing::subscriber::set_default(sub))
    }

    fn count(&self, needle: &str) -> usize {
        self.0.count(needle)
    }

    fn text(&self) -> String {
        self.0.text()
    }
}

// ------------------------------------------------------------------ strict PCRFs

/// What the strict servers saw: per server the sessions it holds, and the misroutes.
#[derive(Default)]
struct Books {
    known: Vec<HashSet<String>>,
    /// Session → index of the server that got its CCR-I.
    owner: HashMap<String, usize>,
    misrouted: u64,
    /// CCR-U/T answered 2001, per server.
    followed: Vec<u64>,
}

struct Pcrfs {
    servers: Vec<SimServer>,
    books: Arc<Mutex<Books>>,
}

impl Pcrfs {
    async fn start(n: usize) -> Pcrfs {
        let books = Arc::new(Mutex::new(Books {
            known: vec![HashSet::new(); n],
            followed: vec![0; n],
            ..Books::default()
        }));
        let mut servers = Vec::new();
        for i in 0..n {
            let host = format!("pcrf{}.{PCRF_REALM}", i + 1);
            let b = books.clone();
            let h = host.clone();
            let handler: Handler = Arc::new(move |req: &Message| {
                let sid = req.session_id().unwrap_or("").to_owned();
                let mut b = b.lock().expect("books");
                let code = match req.cc_request_type() {
                    Some(cc::INITIAL) => {
                        b.known[i].insert(sid.clone());
                        b.owner.entry(sid).or_insert(i);
                        2001
                    }
                    Some(cc::UPDATE | cc::TERMINATION) if b.known[i].contains(&sid) => {
                        if req.cc_request_type() == Some(cc::TERMINATION) {
                            b.known[i].remove(&sid);
                        }
                        b.followed[i] += 1;
                        2001
                    }
                    Some(cc::UPDATE | cc::TERMINATION) => {
                        b.misrouted += 1;
                        UNKNOWN_SESSION
                    }
                    _ => 2001,
                };
                Some(answer_for(req, code, &h, PCRF_REALM, None, None))
            });
            servers.push(
                SimServer::with_handler(
                    any_port(),
                    sim_config(&host, PCRF_REALM, &[GX]),
                    DRA_HOST,
                    None,
                    handler,
                    Arc::default(),
                    ArrivalLog::default(),
                )
                .await
                .expect("pcrf simulator"),
            );
        }
        Pcrfs { servers, books }
    }

    fn addrs(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(|s| s.addr).collect()
    }

    fn misrouted(&self) -> u64 {
        self.books.lock().expect("books").misrouted
    }

    /// Application requests the servers received.
    fn requests(&self) -> usize {
        self.servers.iter().map(|s| s.arrivals.len()).sum()
    }

    fn owner(&self, sid: &str) -> Option<usize> {
        self.books.lock().expect("books").owner.get(sid).copied()
    }
}

// ------------------------------------------------------------------ agents, clients

/// `[session_store]` for a standalone Redis on `port`.
fn redis_store(port: u16, more: &str) -> String {
    format!(
        "[session_store]\nkind = \"redis\"\naddresses = [\"127.0.0.1:{port}\"]\n\
         timeout = \"200ms\"\n{more}\n"
    )
}

struct Agent {
    handle: dra::agent::AgentHandle,
    metrics: dra::metrics::Metrics,
}

impl Agent {
    /// An agent in front of `pcrfs` with `store` appended to its config; returns once
    /// every server is open.
    async fn start(pcrfs: &Pcrfs, store: &str) -> Agent {
        let cfg = parse_config(&agent_toml(&pcrfs.addrs(), &[], None, store));
        let metrics = dra::metrics::Metrics::new();
        // The agent starts whatever the store's state.
        let handle = start_agent(cfg, tc_200ms(), metrics.clone()).await;
        wait_servers_open(&handle, pcrfs.servers.len(), Duration::from_secs(10)).await;
        Agent { handle, metrics }
    }

    /// A PGW on this agent, its wire tapped.
    async fn pgw(&self) -> Pgw {
        let tap: Tap = Arc::default();
        let peer = SimPeer::connect(
            self.handle.listen_addrs()[0],
            sim_config(&format!("pgw1.{REALM}"), REALM, &[GX]),
            DRA_HOST,
            Some(tap.clone()),
        )
        .await
        .expect("CEA success");
        Pgw {
            peer,
            tap,
            sent: Arc::default(),
        }
    }

    /// A sample of the agent's metrics: the value of the line starting with `series`.
    fn metric(&self, series: &str) -> f64 {
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    }

    /// The end of a test: the invariant holds and nothing is pending; then the agent
    /// stops.
    async fn check_and_shut_down(self) {
        let s = self.handle.stats().await.expect("stats");
        assert!(s.invariant_ok(), "{s:?}");
        assert_eq!(s.relay.pending, 0, "{s:?}");
        self.handle.shutdown().await;
    }
}

/// A PGW: sends CCRs, counts what it sent and what came back on its wire.
#[derive(Clone)]
struct Pgw {
    peer: SimPeer,
    tap: Tap,
    sent: Arc<Mutex<usize>>,
}

impl Pgw {
    /// One CCR of session `sid`; its answer's Result-Code. Panics if it hangs.
    async fn ccr(&self, sid: &str, kind: u32) -> u32 {
        let n = kind - 1;
        let m = pgw1_gx_ccr(sid, kind, n);
        *self.sent.lock().expect("sent") += 1;
        let a = tokio::time::timeout(HANG, self.peer.request(m))
            .await
            .unwrap_or_else(|_| panic!("{sid} CC-Request-Type {kind}: no answer in {HANG:?}"))
            .expect("connection open");
        assert_eq!(a.session_id(), Some(sid));
        a.result_code().expect("Result-Code")
    }

    /// The same CCR type for every session at once; their Result-Codes, in order.
    async fn all(&self, sids: &[String], kind: u32) -> Vec<u32> {
        let mut set = JoinSet::new();
        for (i, sid) in sids.iter().enumerate() {
            let (p, sid) = (self.clone(), sid.clone());
            set.spawn(async move { (i, p.ccr(&sid, kind).await) });
        }
        let mut out = vec![0; sids.len()];
        while let Some(r) = set.join_next().await {
            let (i, rc) = r.expect("request task");
            out[i] = rc;
        }
        out
    }

    /// The CCAs on this PGW's wire so far.
    fn answers_on_wire(&self) -> usize {
        self.tap
            .lock()
            .expect("tap")
            .iter()
            .filter(|(mine, _)| !mine)
            .filter_map(|(_, b)| Message::decode(b).ok())
            .filter(|m| !m.is_request() && m.command_code == 272)
            .count()
    }

    /// Every CCR sent got exactly one answer on the wire, from `agent` (this PGW's, its
    /// only downstream peer): counted once nothing is pending there (no answer is still
    /// to come) and the wire holds every answer the agent wrote.
    async fn exactly_one_answer_each(&self, agent: &Agent) {
        let sent = *self.sent.lock().expect("sent");
        let (mut written, mut pending) = (0, 0);
        let settled = poll_until(HANG, async || {
            let s = agent.handle.stats().await.expect("stats");
            (written, pending) = (s.answers_out, s.relay.pending);
            pending == 0 && self.answers_on_wire() as u64 >= written
        })
        .await;
        assert!(
            settled,
            "{pending} pending, {written} answers written, {} on the wire",
            self.answers_on_wire()
        );
        assert_eq!(written, sent as u64, "answers the agent wrote");
        assert_eq!(self.answers_on_wire(), sent);
    }
}

fn sessions(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("pgw1.{REALM};{prefix};{i}"))
        .collect()
}

fn all_are(codes: &[u32], code: u32) -> bool {
    codes.iter().all(|c| *c == code)
}

/// Waits (up to `within`) until `cond` holds, yielding to the agent meanwhile.
async fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let held = poll_until(within, async || cond()).await;
    assert!(held, "{what}: not within {within:?}");
}

fn key(sid: &str) -> String {
    format!("dra:sess:{sid}")
}

/// Waits until the bindings of `sids` are gone from the Redis on `port`: deleted after
/// their CCR-T's answer (in the background, possibly after a grace period).
async fn gone(port: u16, sids: &[String]) {
    eventually(Duration::from_secs(20), "bindings deleted", || {
        sids.iter()
            .all(|s| redis_text(port, &["GET", &key(s)]).is_none())
    })
    .await;
}

/// Blocking work (process control, sync Redis calls) off the agent's thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

// ------------------------------------------------------------------ the faults

#[tokio::test]
async fn redis_unreachable_at_start_routes_locally_and_reconciles_when_it_comes_up() {
    let (log, _g) = Log::installed();
    let port = free_port();
    let pcrfs = Pcrfs::start(2).await;
    let a = Agent::start(&pcrfs, &redis_store(port, "on_error = \"local\"")).await;
    let pgw = a.pgw().await;
    // Several connection attempts fail (one a second, and a probe of the store each
    // second meanwhile): said once.
    let probes = "dra_session_store_errors_total{op=\"get\",kind=\"unavailable\"} ";
    eventually(Duration::from_secs(10), "two probes failed", || {
        a.metric(probes) >= 2.0
    })
    .await;
    assert_eq!(log.count(LOG_DOWN), 1, "{}", log.text());
    assert_eq!(a.metric("dra_session_store_up "), 0.0);

    // Whole sessions while it is down: routed locally, each to one server.
    let done = sessions("down", 10);
    assert!(all_are(&pgw.all(&done, cc::INITIAL).await, 2001));
    assert!(all_are(&pgw.all(&done, cc::UPDATE).await, 2001));
    assert!(all_are(&pgw.all(&done, cc::TERMINATION).await, 2001));
    // Sessions still open when it comes up.
    let open = sessions("open", 10);
    assert!(all_are(&pgw.all(&open, cc::INITIAL).await, 2001));
    assert_eq!(pcrfs.misrouted(), 0);
    assert!(a.metric("dra_session_store_fallbacks_total{on_error=\"local\"} ") >= 20.0);

    let redis = blocking(move || RedisServer::start_on(port)).await;
    // Reconnected; the bindings made meanwhile are written (the ended ones are not).
    eventually(Duration::from_secs(10), "reconciled", || {
        open.iter().all(|s| {
            let owner = pcrfs.owner(s).expect("bound") + 1;
            redis_text(redis.port, &["GET", &key(s)]) == Some(format!("pcrf{owner}.{PCRF_REALM}"))
        })
    })
    .await;
    gone(redis.port, &done).await;
    assert_eq!(log.count(LOG_UP), 1, "{}", log.text());
    assert_eq!(log.count(LOG_DOWN), 1);
    assert_eq!(a.metric("dra_session_store_up "), 1.0);
    pgw.exactly_one_answer_each(&a).await;
    a.check_and_shut_down().await;
}

#[tokio::test]
async fn redis_unreachable_at_start_with_on_error_reject_answers_the_configured_code() {
    let (log, _g) = Log::installed();
    let pcrfs = Pcrfs::start(2).await;
    let store = redis_store(
        free_port(),
        "on_error = \"reject\"\nresult_code = 3004\nerror_message = \"try the other DRA\"",
    );
    let a = Agent::start(&pcrfs, &store).await;
    let pgw = a.pgw().await;
    // Until the agent found the store unreachable (its first connection attempt).
    eventually(Duration::from_secs(10), "store down", || {
        a.metric("dra_session_store_up ") == 0.0
    })
    .await;
    let s = sessions("reject", 10);
    // CCR-I (a new binding) and CCR-U (a lookup) both need the store.
    assert!(all_are(&pgw.all(&s, cc::INITIAL).await, 3004));
    assert!(all_are(&pgw.all(&s, cc::UPDATE).await, 3004));
    let a1 = pgw
        .peer
        .request(pgw1_gx_ccr(&s[0], 1, 0))
        .await
        .expect("answer");
    *pgw.sent.lock().expect("sent") += 1;
    assert_eq!(a1.origin_host(), Some(DRA_HOST), "answered by the agent");
    assert_eq!(
        a1.find(dra::diameter::avp_code::ERROR_MESSAGE)
            .and_then(|v| v.as_utf8().ok()),
        Some("try the other DRA")
    );
    assert_eq!(pcrfs.requests(), 0, "nothing reached a server");
    assert_eq!(
        a.metric("dra_session_store_fallbacks_total{on_error=\"reject\"} "),
        21.0
    );
    assert_eq!(log.count(LOG_DOWN), 1, "{}", log.text());
    pgw.exactly_one_answer_each(&a).await;
    a.check_and_shut_down().await;
}

#[tokio::test]
async fn redis_lost_mid_run_then_back_reconnects_and_reconciles() {
    let (log, _g) = Log::installed();
    let mut redis = blocking(RedisServer::start).await;
    let port = redis.port;
    let pcrfs = Pcrfs::start(2).await;
    let a = Agent::start(&pcrfs, &redis_store(port, "")).await;
    let pgw = a.pgw().await;
    let old = sessions("old", 10);
    assert!(all_are(&pgw.all(&old, cc::INITIAL).await, 2001));
    for s in &old {
        assert!(
            redis_text(port, &["GET", &key(s)]).is_some(),
            "{s} bound in Redis"
        );
    }
    assert_eq!(log.count(LOG_DOWN), 0);

    // SIGKILL: no goodbye to the agent's connection.
    redis = blocking(move || {
        redis.kill();
        redis
    })
    .await;
    // Open sessions go on with their cached servers; new ones are routed locally.
    assert!(all_are(&pgw.all(&old, cc::UPDATE).await, 2001));
    let new = sessions("new", 10);
    assert!(all_are(&pgw.all(&new, cc::INITIAL).await, 2001));
    assert!(all_are(&pgw.all(&new, cc::UPDATE).await, 2001));
    assert_eq!(pcrfs.misrouted(), 0);
    assert_eq!(log.count(LOG_DOWN), 1, "{}", log.text());
    assert_eq!(a.metric("dra_session_store_up "), 0.0);

    // Back, empty (no persistence): the agent finds it and writes every open binding.
    let redis = blocking(move || {
        drop(redis);
        RedisServer::start_on(port)
    })
    .await;
    eventually(Duration::from_secs(15), "reconciled", || {
        old.iter().chain(&new).all(|s| {
            let owner = pcrfs.owner(s).expect("bound") + 1;
            redis_text(redis.port, &["GET", &key(s)]) == Some(format!("pcrf{owner}.{PCRF_REALM}"))
        })
    })
    .await;
    assert_eq!(log.count(LOG_UP), 1, "{}", log.text());
    // The CCR-Ts end them everywhere.
    let everyone: Vec<String> = old.iter().chain(&new).cloned().collect();
    assert!(all_are(&pgw.all(&everyone, cc::TERMINATION).await, 2001));
    gone(port, &everyone).await;
    assert_eq!(log.count(LOG_DOWN), 1);
    pgw.exactly_one_answer_each(&a).await;
    a.check_and_shut_down().await;
}

#[tokio::test]
async fn redis_slower_than_the_timeout_counts_timeouts_and_holds_nothing() {
    let (log, _g) = Log::installed();
    let redis = blocking(RedisServer::start).await;
    let port = redis.port;
    let pcrfs = Pcrfs::start(2).await;
    let a = Agent::start(&pcrfs, &redis_store(port, "")).await;
    let pgw = a.pgw().await;
    // Every client of the Redis stalls for 1.5 s, far beyond the 200 ms timeout.
    let paused = blocking(move || redis_text(port, &["CLIENT", "PAUSE", "1500", "ALL"])).await;
    assert_eq!(paused.as_deref(), Some("OK"));
    let s = sessions("slow", 10);
    assert!(all_are(&pgw.all(&s, cc::INITIAL).await, 2001));
    assert!(
        a.metric("dra_session_store_errors_total{op=\"set\",kind=\"timeout\"} ") >= 1.0,
        "{}",
        a.metrics.encode()
    );
    assert_eq!(log.count(LOG_DOWN), 1, "{}", log.text());
    // The pause ends: the store answers again, the bindings are there. (Wait it out
    // first: the checks below are blocking Redis calls.)
    // The scenario: the Redis pause (1.5 s) runs out.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    eventually(Duration::from_secs(10), "back and reconciled", || {
        s.iter()
            .all(|x| redis_text(port, &["GET", &key(x)]).is_some())
            && log.count(LOG_UP) == 1
    })
    .await;
    assert!(all_are(&pgw.all(&s, cc::UPDATE).await, 2001));
    assert!(all_are(&pgw.all(&s, cc::TERMINATION).await, 2001));
    assert_eq!(pcrfs.misrouted(), 0);
    assert_eq!((log.count(LOG_DOWN), log.count(LOG_UP)), (1, 1));
    pgw.exactly_one_answer_each(&a).await;
    a.check_and_shut_down().await;
    drop(redis);
}

// ------------------------------------------------------------------ two hosts

#[tokio::test]
async fn a_session_bound_via_dra_a_is_routed_by_dra_b_to_the_same_server() {
    let redis = blocking(RedisServer::start).await;
    let pcrfs = Pcrfs::start(2).await;
    let a = Agent::start(&pcrfs, &redis_store(redis.port, "")).await;
    let b = Agent::start(&pcrfs, &redis_store(redis.port, "")).await;
    let memory_only = Agent::start(&pcrfs, "").await;
    let (pa, pb, pm) = (a.pgw().await, b.pgw().await, memory_only.pgw().await);
    // B and the memory-only agent have sent one session already: left alone, their
    // round robin would now pick the other server than A did for every session.
    for p in [&pb, &pm] {
        assert_eq!(p.ccr("warm-up", cc::INITIAL).await, 2001);
    }
    let s = sessions("ab", 10);
    for x in &s {
        assert_eq!(pa.ccr(x, cc::INITIAL).await, 2001);
    }
    let owners: HashSet<usize> = s.iter().filter_map(|x| pcrfs.owner(x)).collect();
    assert_eq!(owners.len(), 2, "A spread the sessions over both servers");

    // The control: without the shared store every CCR-U goes to the wrong server.
    for x in &s {
        assert_eq!(pm.ccr(x, cc::UPDATE).await, UNKNOWN_SESSION, "{x}");
    }
    assert_eq!(pcrfs.misrouted(), 10);

    // Through B: CCR-U and CCR-T reach the server that holds the session.
    for x in &s {
        assert_eq!(pb.ccr(x, cc::UPDATE).await, 2001, "{x}");
        assert_eq!(pb.ccr(x, cc::TERMINATION).await, 2001, "{x}");
    }
    assert_eq!(pcrfs.misrouted(), 10, "no new misroute");
    // B's CCR-Ts delete them.
    gone(redis.port, &s).await;
    for (p, ag) in [(&pa, &a), (&pb, &b), (&pm, &memory_only)] {
        p.exactly_one_answer_each(ag).await;
    }
    for ag in [a, b, memory_only] {
        ag.check_and_shut_down().await;
    }
}

#[tokio::test]
async fn cluster_master_killed_replica_promoted_bindings_still_found() {
    let (log, _g) = Log::installed();
    let mut cluster = blocking(RedisCluster::start).await;
    let seeds = cluster.addresses()[..3]
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let store = format!(
        "[session_store]\nkind = \"redis_cluster\"\naddresses = [{seeds}]\ntimeout = \"1s\"\n"
    );
    let pcrfs = Pcrfs::start(2).await;
    let a = Agent::start(&pcrfs, &store).await;
    let b = Agent::start(&pcrfs, &store).await;
    let (pa, pb) = (a.pgw().await, b.pgw().await);
    assert_eq!(pb.ccr("warm-up", cc::INITIAL).await, 2001);
    let s = sessions("cluster", 30);
    for x in &s {
        assert_eq!(pa.ccr(x, cc::INITIAL).await, 2001);
    }

    // Kill the master holding the first session, once its replica has everything.
    let k = key(&s[0]);
    let (cl, master, replica) = blocking(move || {
        let master = cluster.master_of(&k);
        let replica = cluster.replica_of(master);
        cluster.wait_replicated(master, replica);
        cluster.nodes[master].kill();
        (cluster, master, replica)
    })
    .await;
    cluster = cl;
    let killed_at = Instant::now();
    // Meanwhile new sessions through B: each answered once, none hangs.
    let during = sessions("failover", 10);
    let codes = pb.all(&during, cc::INITIAL).await;
    assert!(all_are(&codes, 2001), "{codes:?}");

    let cluster = blocking(move || {
        cluster.wait_promoted(replica, Duration::from_secs(20));
        cluster
    })
    .await;
    println!(
        "cluster: master {master} killed, replica {replica} promoted and the cluster ok \
         after {:?}",
        killed_at.elapsed()
    );
    // Both hosts' stores answer again (a host that met errors meanwhile probes once a
    // second) before B is asked to follow the bindings.
    eventually(Duration::from_secs(10), "stores up", || {
        a.metric("dra_session_store_up ") == 1.0 && b.metric("dra_session_store_up ") == 1.0
    })
    .await;
    // B never saw these sessions: it asks the cluster, which now answers from the
    // promoted replica, and follows A's binding.
    for x in &s {
        assert_eq!(pb.ccr(x, cc::UPDATE).await, 2001, "{x}");
    }
    for x in &s {
        assert_eq!(pb.ccr(x, cc::TERMINATION).await, 2001, "{x}");
    }
    assert_eq!(pcrfs.misrouted(), 0);
    let errors: f64 = ["get", "set", "del"]
        .iter()
        .flat_map(|op| ["timeout", "unavailable", "error"].map(|k| (*op, k)))
        .map(|(op, k)| {
            b.metric(&format!(
                "dra_session_store_errors_total{{op=\"{op}\",kind=\"{k}\"}} "
            ))
        })
        .sum();
    println!(
        "cluster: DRA B: {errors} store call errors, {} local fallbacks during the failover",
        b.metric("dra_session_store_fallbacks_total{on_error=\"local\"} ")
    );
    // A last call of the failover may still be timing out when the traffic ends: the
    // store must be reported back within a few seconds (each change logged once).
    poll_until(Duration::from_secs(5), async || {
        log.count(LOG_UP) >= log.count(LOG_DOWN)
    })
    .await;
    let (down, up) = (log.count(LOG_DOWN), log.count(LOG_UP));
    assert!(
        down <= 2 && up == down,
        "state changes logged once each:\n{}",
        log.text()
    );
    for (p, ag) in [(&pa, &a), (&pb, &b)] {
        p.exactly_one_answer_each(ag).await;
    }
    for ag in [a, b] {
        ag.check_and_shut_down().await;
    }
    drop(cluster);
}
