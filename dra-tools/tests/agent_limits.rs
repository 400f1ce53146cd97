//! Without the XDP fast path the agent enforces the configured ingress limits itself
//! (`dra::limiter`): over real loopback TCP, a gateway that sends more CCR-I than its
//! limit allows gets the excess answered 3002 by the agent (`reject`) or held back
//! until the limit allows it (`drop`: back-pressure, nothing lost), while the server
//! sees only what was admitted.

mod support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use dra::diameter::{Message, avp_code, result_code};
use dra::limiter::Limiter;
use dra_common::wire::{MsgClass, app, cc_request_type, cmd};
use dra_tools::loadgen::loadgen_peer_config;
use dra_tools::loadgen::script::{ScriptedPeer, Tap, cc, ccr};
use dra_tools::loadgen::server::{ServerConfig, ServerHandle};
use support::agent::{
    DRA_HOST, PCRF_REALM, REALM, agent_config, parse_config, start_agent, wait_servers_open,
    with_limiter,
};
use support::free_port;
use tokio::time::Instant;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const PCRF_HOST: &str = "pcrf1.pcrf.test.example";
const PGW_HOST: &str = "pgw1.test.example";
/// A second gateway without `addresses`: the limiter (as XDP) cannot identify it.
const PGW2_HOST: &str = "pgw2.test.example";
/// Requests sent back to back; the limit's burst admits [`BURST`] of them.
const SENT: usize = 20;
const BURST: usize = 5;
/// Bound on waiting for what must happen (never reached when the agent works).
const PATIENCE: Duration = Duration::from_secs(10);

/// The agent's config: listeners on 127.0.0.1 and ::1, client `pgw1` at 127.0.0.1 with
/// a Gx CCR-I limit of 0.1/s, burst 5 (nothing refills during the test), client `pgw2`
/// without addresses and with the same limit, server `pcrf1`.
fn agent_toml(pcrf: SocketAddr, action: &str, rate: f64) -> String {
    // Answer settings exist only for `reject` (the config refuses them with `drop`).
    let answer = if action == "reject" {
        "result_code = 3002\nerror_message = \"rate limit exceeded: pgw1 Gx CCR-I\"\n"
    } else {
        ""
    };
    let limit = |peer: &str| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"{peer}\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
             rate = {rate}\nburst = {BURST}\naction = \"{action}\"\n"
        )
    };
    agent_config(&["127.0.0.1", "[::1]"], free_port())
        .client("pgw2", REALM, &[], "")
        .client("pgw1", REALM, &["127.0.0.1"], "")
        .server("pcrf1", PCRF_REALM, &pcrf.to_string(), "group = \"pcrf\"")
        .group(
            "pcrf",
            "answer_timeout = \"5s\"\nselection = \"round_robin\"",
        )
        .route(PCRF_REALM, "application = \"gx\"\ngroup = \"pcrf\"")
        .with(&format!("{}{answer}", limit("pgw1")))
        .with(&limit("pgw2"))
        .to_string()
}

struct Lab {
    agent: dra::agent::AgentHandle,
    server: ServerHandle,
    limiter: Arc<Limiter>,
    plan: dra::dataplane::Plan,
}

impl Lab {
    /// The limit at 0.1/s: nothing refills during a test.
    async fn start(action: &str) -> Lab {
        Lab::start_at(action, 0.1).await
    }

    async fn start_at(action: &str, rate: f64) -> Lab {
        let mut scfg = ServerConfig::new(SocketAddr::new(LOCALHOST, 0), PCRF_HOST, PCRF_REALM);
        scfg.strict_sessions = false;
        let server = dra_tools::loadgen::server::run(scfg).await.expect("server");
        let text = agent_toml(server.local_addr(), action, rate);
        let cfg = parse_config(&text);
        let plan = dra::dataplane::Plan::new(&cfg).expect("plan");
        let limiter = Arc::new(Limiter::new(&plan));
        let opts = with_limiter(limiter.clone());
        let agent = start_agent(cfg, opts, dra::metrics::Metrics::new()).await;
        wait_servers_open(&agent, 1, PATIENCE).await;
        Lab {
            agent,
            server,
            limiter,
            plan,
        }
    }

    fn ccr_i_counters(&self) -> dra_common::maps::ClassCounters {
        let slot = self
            .plan
            .slot_of("pgw1", MsgClass::gx_ccr(cc_request_type::INITIAL))
            .expect("CCR-I slot");
        self.limiter.slot_counters(slot).expect("counters")
    }
}

/// A gateway: the project's simulator (`dra_tools::loadgen::script`) after CER/CEA writes
/// CCRs back to back in one write; the answers are read from its tap.
struct Gateway {
    peer: ScriptedPeer,
    tap: Tap,
    /// Our Origin-Host.
    host: &'static str,
}

impl Gateway {
    async fn connect(to: SocketAddr, host: &'static str) -> Gateway {
        let local = if to.is_ipv6() {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            LOCALHOST
        };
        let tap = Tap::default();
        let cfg = loadgen_peer_config(host, REALM, local, Duration::from_secs(30));
        let peer = ScriptedPeer::connect(to, cfg, DRA_HOST, Some(tap.clone()))
            .await
            .unwrap_or_else(|rc| panic!("CER refused ({rc})"));
        Gateway { peer, tap, host }
    }

    /// Sends `n` Gx CCR-I (distinct sessions) in one write.
    async fn send_ccr_i(&self, n: usize) {
        let mut bytes = Vec::new();
        for i in 0..n {
            let mut m = ccr(
                &format!("{};limits;{i}", self.host),
                app::GX,
                self.host,
                REALM,
                PCRF_REALM,
                cc::INITIAL,
                0,
            );
            m.hop_by_hop = 1000 + i as u32;
            bytes.extend_from_slice(&m.encode());
        }
        assert!(self.peer.send_bytes(bytes).await, "connection gone");
    }

    /// Sends `n` Gx CCR-I ([`Gateway::send_ccr_i`]) and waits for every answer.
    async fn exchange_ccr_i(&self, n: usize) {
        self.send_ccr_i(n).await;
        self.wait_answers(n).await;
    }

    /// The CCAs received so far.
    fn answers(&self) -> Vec<Message> {
        support::agent::received(&self.tap)
            .into_iter()
            .filter(|m| m.command_code == cmd::CREDIT_CONTROL && !m.is_request())
            .collect()
    }

    /// Waits until `n` answers arrived (panics after [`PATIENCE`]).
    async fn wait_answers(&self, n: usize) {
        support::wait_count(n, "answers", PATIENCE, || self.answers().len()).await;
    }

    fn count(&self, code: u32, origin: &str) -> usize {
        self.answers()
            .iter()
            .filter(|a| a.result_code() == Some(code) && a.origin_host() == Some(origin))
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_answers_the_excess_3002_from_the_agent() {
    let lab = Lab::start("reject").await;
    let gw = Gateway::connect(lab.agent.listen_addrs()[0], PGW_HOST).await;
    gw.exchange_ccr_i(SENT).await;
    assert_eq!(
        gw.count(result_code::SUCCESS, PCRF_HOST),
        BURST,
        "admitted: relayed to the server"
    );
    assert_eq!(
        gw.count(result_code::UNABLE_TO_DELIVER, DRA_HOST),
        SENT - BURST,
        "marked: answered by the agent"
    );
    let rejected = gw
        .answers()
        .into_iter()
        .find(|a| a.origin_host() == Some(DRA_HOST))
        .expect("a 3002");
    assert_eq!(
        rejected
            .find(avp_code::ERROR_MESSAGE)
            .and_then(|a| a.as_utf8().ok()),
        Some("rate limit exceeded: pgw1 Gx CCR-I")
    );
    assert_eq!(
        lab.server.stats().ccr_received.values().sum::<u64>(),
        BURST as u64,
        "the server saw only the admitted"
    );
    let c = lab.ccr_i_counters();
    assert_eq!(
        (c.seen, c.admitted, c.marked, c.dropped),
        (SENT as u64, BURST as u64, (SENT - BURST) as u64, 0)
    );
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.marked_answered, (SENT - BURST) as u64);
    assert!(s.invariant_ok(), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_holds_the_excess_back_and_loses_nothing() {
    // 5/s, burst 5: GCRA admits request k (1-based) of a back-to-back batch no earlier
    // than (k − 1) × 200 ms − 800 ms; the 20th at 3.0 s.
    let lab = Lab::start_at("drop", 5.0).await;
    let gw = Gateway::connect(lab.agent.listen_addrs()[0], PGW_HOST).await;
    gw.send_ccr_i(SENT).await;
    gw.wait_answers(BURST).await;
    let first = Instant::now();
    // Held, not discarded: every request is answered by the server, none by the agent.
    gw.wait_answers(SENT).await;
    let spread = first.elapsed();
    assert_eq!(
        gw.count(result_code::SUCCESS, PCRF_HOST),
        SENT,
        "nothing lost"
    );
    assert_eq!(
        lab.server.stats().ccr_received.values().sum::<u64>(),
        SENT as u64
    );
    // The excess came through at the limit's pace, no faster (a lower bound: the
    // reader held the connection between admissions).
    assert!(
        spread >= Duration::from_millis(2800),
        "15 requests over the burst took only {spread:?}"
    );
    let c = lab.ccr_i_counters();
    assert_eq!(
        (c.seen, c.admitted, c.marked),
        (SENT as u64, SENT as u64, 0)
    );
    assert!(
        (1..=(SENT - BURST) as u64).contains(&c.dropped),
        "held at least once, each request at most once: {c:?}"
    );
    let s = lab.agent.stats().await.expect("stats");
    assert_eq!(s.requests_in, SENT as u64);
    assert_eq!(s.marked_answered, 0);
    assert!(s.invariant_ok(), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_source_passes_uncharged_as_in_xdp() {
    // pgw2 has a limit but no `addresses`: neither XDP nor the agent's limiter can
    // tell its traffic from any other source's, so `unknown_peer = "pass"` applies.
    let lab = Lab::start("reject").await;
    let v6 = *lab
        .agent
        .listen_addrs()
        .iter()
        .find(|a| a.is_ipv6())
        .expect("[::1] listener");
    let gw = Gateway::connect(v6, PGW2_HOST).await;
    gw.exchange_ccr_i(SENT).await;
    assert_eq!(
        gw.count(result_code::SUCCESS, PCRF_HOST),
        SENT,
        "none limited"
    );
    let slot = lab
        .plan
        .slot_of("pgw2", MsgClass::gx_ccr(cc_request_type::INITIAL))
        .expect("pgw2 CCR-I slot");
    assert_eq!(
        lab.limiter.slot_counters(slot).expect("counters").seen,
        0,
        "nothing charged to pgw2"
    );
    let g = lab.limiter.global_counters();
    // The CER and the 20 CCR-I.
    assert!(
        g.contains(&(dra_common::stats::Counter::UnknownPeerPass, SENT as u64 + 1)),
        "{g:?}"
    );
    assert!(
        g.contains(&(dra_common::stats::Counter::Requests, 0)),
        "{g:?}"
    );
}
