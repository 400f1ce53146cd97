//! Gateway failover over real TCP: two `dra` agents (in process) sharing one real
//! redis-server as their session store, strict PCRF simulators behind both, and
//! `dra-loadgen` gateways connected to both agents. One agent is killed mid-run (its
//! tasks aborted: every socket it held closes at once, as on SIGKILL): the gateways
//! send their pending requests to the other agent with the T flag, and the other agent
//! routes every session to the server that has it (a server answers 5002 to a session
//! it never saw: a misroute).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::failover::DraMode;
use dra_tools::loadgen::scenario::{Class, Scenario};
use dra_tools::loadgen::server::{self, LatencyDist, ServerConfig, ServerHandle, ServerStats};
use dra_tools::loadgen::stats::Report;
use support::RedisServer;
use support::agent::{
    PCRF_REALM, REALM, agent_toml, parse_config, start_agent, tc_200ms, wait_servers_open,
};

/// Strict PCRF simulators (5002 to an unknown session) answering after `latency`.
async fn pcrfs(latency: Duration) -> Vec<ServerHandle> {
    let mut v = Vec::new();
    for i in 1..=2 {
        let mut cfg = ServerConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            &format!("pcrf{i}.{PCRF_REALM}"),
            PCRF_REALM,
        );
        cfg.latency = LatencyDist::Fixed(latency);
        cfg.strict_sessions = true;
        cfg.seed = i;
        v.push(server::run(cfg).await.expect("pcrf simulator"));
    }
    v
}

/// An agent with a Redis session store in front of `servers`; waits until both servers
/// are open.
async fn agent(servers: &[ServerHandle], redis: SocketAddr) -> dra::agent::AgentHandle {
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
    let store = format!(
        "[session_store]\nkind = \"redis\"\naddresses = [\"{redis}\"]\ntimeout = \"500ms\""
    );
    let cfg = parse_config(&agent_toml(&addrs, &[], None, &store));
    let a = start_agent(cfg, tc_200ms(), dra::metrics::Metrics::new()).await;
    wait_servers_open(&a, servers.len(), Duration::from_secs(5)).await;
    a
}

/// DRAs A and B ([`agent`]) sharing the Redis store at `redis`, in front of `servers`.
async fn dras(
    servers: &[ServerHandle],
    redis: SocketAddr,
) -> (dra::agent::AgentHandle, dra::agent::AgentHandle) {
    (agent(servers, redis).await, agent(servers, redis).await)
}

fn scenario(seconds: f64) -> Scenario {
    Scenario::from_toml(&format!(
        r#"
name = "failover"
destination_realm = "{PCRF_REALM}"
request_timeout_ms = 4000
[[phase]]
name = "run"
duration_s = {seconds}
rates = {{ gx_ccr_i = 120, gx_ccr_u = 150, gx_ccr_t = 100 }}
"#
    ))
    .expect("scenario")
}

fn client_cfg(a: SocketAddr, b: SocketAddr, mode: DraMode) -> ClientConfig {
    let mut c = ClientConfig::new(a, 2);
    c.secondary = Some(b);
    c.dra_mode = mode;
    c.origin_host_pattern = format!("pgw{{n}}.{REALM}");
    c.origin_realm = REALM.to_owned();
    c.tw = Duration::from_secs(6);
    c
}

async fn stats(servers: Vec<ServerHandle>) -> Vec<ServerStats> {
    let mut v = Vec::new();
    for s in servers {
        v.push(s.shutdown().await);
    }
    v
}

/// Every request answered, none lost, none timed out.
fn assert_all_answered(r: &Report) {
    for c in [Class::GxCcrI, Class::GxCcrU, Class::GxCcrT] {
        let s = r.class(c.name());
        assert!(s.sent > 0, "{c:?} sent nothing\n{}", r.to_text());
        assert_eq!(s.timeouts, 0, "{c:?} timeouts\n{}", r.to_text());
        assert_eq!(s.unanswered, 0, "{c:?} lost\n{}", r.to_text());
        assert_eq!(
            s.answered_total(),
            s.sent,
            "{c:?}: every request answered once\n{}",
            r.to_text()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_primary_dra_resends_pending_requests_with_t_and_misroutes_nothing() {
    let redis = RedisServer::start();
    // 50 ms of service time: requests are in flight when the agent dies.
    let servers = pcrfs(Duration::from_millis(50)).await;
    let (a, b) = dras(&servers, redis.addr).await;
    let (tx, mut rows) = tokio::sync::mpsc::unbounded_channel();
    let mut cfg = client_cfg(a.listen_addrs()[0], b.listen_addrs()[0], DraMode::Primary);
    cfg.rows_tx = Some(tx);
    let run = tokio::spawn(client::run(cfg, scenario(6.0)));
    // Two seconds of traffic through A, then A dies with everything in flight.
    let mut a = Some(a);
    while let Some(row) = rows.recv().await {
        if row.t == 2 {
            drop(a.take());
        }
    }
    let r = run.await.unwrap().expect("client");
    let st = stats(servers).await;
    drop(b);
    let f = &r.peers.failover;
    eprintln!("{}", r.to_text());
    eprintln!("{st:?}");
    assert_all_answered(&r);
    assert_eq!(
        f.failovers,
        2,
        "each gateway failed over once\n{}",
        r.to_text()
    );
    assert!(f.resent_with_t > 0, "requests were pending at the kill");
    assert_eq!(f.lost_no_dra, 0);
    assert!(f.answers_via[0] > 0 && f.answers_via[1] > 0, "{f:?}");
    assert_eq!(f.failover_gaps_ms.len(), 2, "{f:?}");
    // The resent requests reached the servers through B with the T flag.
    let t_flagged: u64 = st.iter().map(|s| s.t_flagged).sum();
    assert!(t_flagged > 0, "{st:?}");
    assert!(t_flagged <= f.resent_with_t, "{st:?}");
    // No misroute: no server saw a CCR-U/T of a session it never had.
    let misrouted: u64 = st.iter().map(|s| s.unknown_session).sum();
    assert_eq!(misrouted, 0, "{st:?}");
    assert_eq!(r.class(Class::GxCcrU.name()).answered_with(5002), 0);
    assert_eq!(r.class(Class::GxCcrT.name()).answered_with(5002), 0);
    assert_eq!(r.sessions.server_switches, 0, "{:?}", r.sessions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_gateways_use_both_dras_and_each_routes_the_others_sessions() {
    let redis = RedisServer::start();
    let servers = pcrfs(Duration::from_millis(2)).await;
    let (a, b) = dras(&servers, redis.addr).await;
    let cfg = client_cfg(a.listen_addrs()[0], b.listen_addrs()[0], DraMode::Split);
    let r = client::run(cfg, scenario(3.0)).await.expect("client");
    let st = stats(servers).await;
    drop((a, b));
    let f = &r.peers.failover;
    assert_all_answered(&r);
    // Requests alternate: a session's CCR-U/T often go through the DRA that did not
    // see its CCR-I; the shared store keeps them on the server of the CCR-I.
    assert!(f.answers_via[0] > 100 && f.answers_via[1] > 100, "{f:?}");
    assert_eq!((f.failovers, f.resent_with_t), (0, 0), "{f:?}");
    let misrouted: u64 = st.iter().map(|s| s.unknown_session).sum();
    assert_eq!(misrouted, 0, "{st:?}");
    assert_eq!(r.sessions.server_switches, 0, "{:?}", r.sessions);
}
