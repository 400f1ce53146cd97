//! The agent's session bindings ([`dra::session::Sessions`]) against a real
//! `redis-server` started by the test on a free 127.0.0.1 port (killed on drop, also on
//! panic): what reaches Redis (key, value, TTL), two hosts sharing it, and the store
//! going away and coming back. The store's replies arrive as events, as in the agent.

mod support;

use std::time::Duration;

use dra::config::{SessionStore, StoreKind, StoreOnError};
use dra::metrics::Metrics;
use dra::session::{Event, Lookup, Resolved, Sessions, Write};
use support::{RedisServer, free_port, redis_command, redis_text};
use tokio::sync::mpsc;

const NOW: Duration = Duration::ZERO;

fn store_config(port: u16) -> SessionStore {
    SessionStore {
        kind: StoreKind::Redis,
        addresses: vec![format!("127.0.0.1:{port}")],
        ttl: Duration::from_secs(60),
        timeout: Duration::from_millis(500),
        ..SessionStore::default()
    }
}

/// A host's bindings with their client task running, and the task's events.
struct Host {
    cfg: SessionStore,
    s: Sessions,
    events: mpsc::UnboundedReceiver<Event>,
    metrics: Metrics,
}

impl Host {
    fn start(cfg: &SessionStore) -> Host {
        let metrics = Metrics::new();
        let mut s = Sessions::new(cfg, metrics.clone());
        let (tx, events) = mpsc::unbounded_channel();
        s.start(tx);
        Host {
            cfg: cfg.clone(),
            s,
            events,
            metrics,
        }
    }

    /// Another host sharing the same store (its cache empty).
    fn other(&self) -> Host {
        Host::start(&self.cfg)
    }

    /// Feeds events until one resolves a waited-for call (5 s at most).
    async fn resolved(&mut self) -> Resolved {
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("client task alive");
                if let Some(r) = self.s.on_event(ev, NOW) {
                    return r;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .expect("the store call was answered within 5 s")
    }

    /// Feeds events until the store's state is `up` (10 s at most).
    async fn until_up(&mut self, up: bool) {
        let wait = async {
            while self.s.is_up() != up {
                let ev = self.events.recv().await.expect("client task alive");
                self.s.on_event(ev, NOW);
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| panic!("store never became up={up}"));
    }

    /// Feeds the events already there (background replies).
    async fn settle(&mut self) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        while let Ok(ev) = self.events.try_recv() {
            self.s.on_event(ev, NOW);
        }
    }

    /// A lookup that must ask the store; its answer.
    async fn lookup_in_store(&mut self, sid: &str) -> Option<String> {
        let Lookup::Wait(t) = self.s.lookup(sid, true, NOW) else {
            panic!("{sid}: expected a store lookup")
        };
        let (got, r) = self.resolved().await;
        assert_eq!(got, t);
        r.expect("GET answered")
    }

    /// A new binding written before forwarding; waits for Redis to confirm it.
    async fn bind_new(&mut self, sid: &str, peer: &str) {
        let Write::Wait(t) = self.s.bind(sid, peer, NOW) else {
            panic!("{sid}: a new binding is written before forwarding")
        };
        let (got, r) = self.resolved().await;
        assert_eq!((got, r), (t, Ok(None)));
    }
}

fn pttl(port: u16, key: &str) -> i64 {
    match redis_command(port, &["PTTL", key]).unwrap() {
        redis::Value::Int(n) => n,
        other => panic!("PTTL: {other:?}"),
    }
}

#[tokio::test]
async fn bindings_reach_redis_with_their_ttl_and_go_with_the_ccr_t() {
    let redis = RedisServer::start();
    let mut a = Host::start(&store_config(redis.port));
    // Session-Ids contain ';' and may contain anything; the crate sends bytes as they are.
    let sid = "pgw1.operator.net;1234;5678;ünïcode session";
    let key = format!("dra:sess:{sid}");
    assert_eq!(a.lookup_in_store(sid).await, None);
    a.bind_new(sid, "pcrf1.operator.net").await;
    assert_eq!(
        redis_text(redis.port, &["GET", &key]).as_deref(),
        Some("pcrf1.operator.net")
    );
    let ttl = pttl(redis.port, &key);
    assert!((50_000..=60_000).contains(&ttl), "PTTL {ttl}");

    // A CCR-U: the same binding again refreshes the TTL in the background.
    redis_command(redis.port, &["PEXPIRE", &key, "5000"]).unwrap();
    assert_eq!(a.s.bind(sid, "pcrf1.operator.net", NOW), Write::Done);
    a.settle().await;
    let ttl = pttl(redis.port, &key);
    assert!(ttl > 50_000, "the CCR-U refreshed the TTL: PTTL {ttl}");

    // A failover rebinding is written through before the request goes on.
    a.bind_new(sid, "pcrf2.operator.net").await;
    assert_eq!(
        redis_text(redis.port, &["GET", &key]).as_deref(),
        Some("pcrf2.operator.net")
    );

    // The answered CCR-T removes it.
    a.s.unbind(sid, NOW);
    a.settle().await;
    assert_eq!(redis_text(redis.port, &["GET", &key]), None);
    let text = a.metrics.encode();
    for line in [
        "dra_session_bindings_total{op=\"written\"} 3",
        "dra_session_bindings_total{op=\"deleted\"} 1",
        "dra_session_store_up 1",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
}

#[tokio::test]
async fn a_binding_expires_with_its_ttl() {
    let redis = RedisServer::start();
    let cfg = SessionStore {
        ttl: Duration::from_millis(300),
        ..store_config(redis.port)
    };
    let mut a = Host::start(&cfg);
    a.bind_new("short", "pcrf1").await;
    assert_eq!(
        a.other().lookup_in_store("short").await,
        Some("pcrf1".into())
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(redis_text(redis.port, &["GET", "dra:sess:short"]), None);
    assert_eq!(a.other().lookup_in_store("short").await, None);
}

#[tokio::test]
async fn two_hosts_share_bindings_and_a_cache_hit_asks_nobody() {
    let redis = RedisServer::start();
    let mut a = Host::start(&store_config(redis.port));
    let mut b = a.other();
    a.bind_new("gx-42", "pcrf2").await;
    // Host B never saw the session: one GET, then its cache answers.
    assert_eq!(b.lookup_in_store("gx-42").await, Some("pcrf2".into()));
    redis_command(redis.port, &["CONFIG", "RESETSTAT"]).unwrap();
    for _ in 0..10 {
        assert_eq!(b.s.lookup("gx-42", true, NOW), Lookup::Hit("pcrf2".into()));
    }
    b.settle().await;
    let stats = redis_text(redis.port, &["INFO", "commandstats"]).unwrap_or_default();
    assert!(
        !stats.contains("cmdstat_get"),
        "cache hits reached Redis:\n{stats}"
    );
    assert!(
        b.metrics
            .encode()
            .contains("dra_session_cache_lookups_total{result=\"hit\"} 10")
    );
    // Host B answers the CCR-T: host A's binding is gone from Redis too.
    b.s.unbind("gx-42", NOW);
    b.settle().await;
    assert_eq!(a.other().lookup_in_store("gx-42").await, None);
}

#[tokio::test]
async fn redis_down_fails_fast_and_local_bindings_are_written_when_it_is_back() {
    let port = free_port();
    let mut a = Host::start(&store_config(port));
    a.until_up(false).await;
    // Nothing waits while it is down: the caller follows on_error at once.
    assert_eq!(a.s.lookup("s1", true, NOW), Lookup::Failed);
    assert_eq!(a.s.bind("s1", "pcrf1", NOW), Write::Failed);
    assert_eq!(a.s.fallback(), StoreOnError::Local);
    assert_eq!(a.s.waiting(), 0);

    // Redis comes up: the client connects (retrying every second), the binding made
    // meanwhile is written.
    let mut redis = RedisServer::start_on(port);
    a.until_up(true).await;
    a.settle().await;
    assert_eq!(
        redis_text(port, &["GET", "dra:sess:s1"]).as_deref(),
        Some("pcrf1")
    );

    // Lost mid-run: the next call fails (bounded by the timeout), the store is down.
    redis.kill();
    let t0 = std::time::Instant::now();
    if let Write::Wait(_) = a.s.bind("s2", "pcrf2", NOW) {
        let (_, r) = a.resolved().await;
        assert!(r.is_err(), "{r:?}");
    }
    a.until_up(false).await;
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // The CCR-U of a cached session still finds its peer, and is remembered.
    assert_eq!(a.s.lookup("s1", true, NOW), Lookup::Hit("pcrf1".into()));
    assert_eq!(a.s.bind("s1", "pcrf1", NOW), Write::Done);

    // Back (empty: no persistence): the ticks' probe finds it, both bindings return.
    let _redis = RedisServer::start_on(port);
    let back = async {
        while !a.s.is_up() {
            a.s.tick(NOW);
            tokio::time::sleep(Duration::from_millis(200)).await;
            while let Ok(ev) = a.events.try_recv() {
                a.s.on_event(ev, NOW);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(15), back)
        .await
        .expect("reconnected");
    a.settle().await;
    assert_eq!(
        redis_text(port, &["GET", "dra:sess:s1"]).as_deref(),
        Some("pcrf1")
    );
    assert_eq!(
        redis_text(port, &["GET", "dra:sess:s2"]).as_deref(),
        Some("pcrf2")
    );
}
