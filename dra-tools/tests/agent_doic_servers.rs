//! The agent as a DOIC reacting node towards its servers, over real loopback TCP
//! (docs/doic.md): three `dra-loadgen` servers with `doic = true` in the agent's config,
//! each a DOIC reporting node whose report the test forces (`ServerReporter::force`):
//!
//! - realm A: `pcrf1` and `pcrf2`, round robin. `pcrf1` reports a host report of 50 %
//!   loss: it gets about half the CCR-I it got before, the rest go to `pcrf2`
//!   (diverted), none is refused;
//! - realm B: `pcrf3` alone reports 50 %: half its CCR-I are answered 3004 by the agent;
//!   the CCR-T of its sessions are never shed (CCR-T last) and never diverted, the CCR-U
//!   of realm A's sessions stay on their server;
//! - a report with an older sequence number is ignored and counted; once the report
//!   expires, traffic is back to normal;
//! - the gateway announces no DOIC: the requests to the servers carry the agent's
//!   OC-Supported-Features (the servers report only to requests that announce DOIC), and
//!   the answers it gets carry no DOIC AVP.

mod support;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use dra::diameter::avp_code as c;
use dra::diameter::result_code;
use dra::doic::ReportType;
use dra_common::wire::app;
use dra_tools::loadgen::doic::{ForcedReport, ServerReporter};
use dra_tools::loadgen::loadgen_peer_config;
use dra_tools::loadgen::script::{ScriptedPeer, cc, ccr};
use dra_tools::loadgen::server::{ServerConfig, ServerHandle};
use support::agent::{
    DRA_HOST, REALM, agent_config, parse_config, start_agent, tc_200ms, wait_servers_open,
};
use support::free_port;

const REALM_A: &str = "a.pcrf.test.example";
const REALM_B: &str = "b.pcrf.test.example";
const GW_HOST: &str = "pgw1.test.example";
/// Long enough for every phase before the expiry (a repeated report does not extend
/// its validity: RFC 7683 §7.5 times it from the first receipt of its number).
const VALIDITY: u32 = 8;
const PATIENCE: Duration = Duration::from_secs(10);

struct Server {
    handle: ServerHandle,
    doic: Arc<ServerReporter>,
    host: String,
}

async fn server(name: &str, realm: &str) -> Server {
    let host = format!("{name}.{realm}");
    let mut cfg = ServerConfig::new(
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        &host,
        realm,
    );
    // Strict sessions: a CCR-U/T reaching a server that did not open its session is
    // answered 5002, so a diverted bound request would show.
    cfg.strict_sessions = true;
    let doic = Arc::new(ServerReporter::new(&host, None, None, VALIDITY));
    cfg.doic = Some(doic.clone());
    let handle = dra_tools::loadgen::server::run(cfg).await.expect("server");
    Server { handle, doic, host }
}

struct Lab {
    agent: dra::agent::AgentHandle,
    metrics: dra::metrics::Metrics,
    servers: Vec<Server>,
    gw: ScriptedPeer,
    n: u32,
}

async fn start() -> Lab {
    let servers = vec![
        server("pcrf1", REALM_A).await,
        server("pcrf2", REALM_A).await,
        server("pcrf3", REALM_B).await,
    ];
    let mut t = agent_config(&["127.0.0.1"], free_port()).client("pgw1", REALM, &["127.0.0.1"], "");
    for (s, (name, realm, group)) in servers.iter().zip([
        ("pcrf1", REALM_A, "a"),
        ("pcrf2", REALM_A, "a"),
        ("pcrf3", REALM_B, "b"),
    ]) {
        t = t.server(
            name,
            realm,
            &s.handle.local_addr().to_string(),
            &format!("group = \"{group}\"\ndoic = true"),
        );
    }
    let text = t
        .group("a", "answer_timeout = \"5s\"\nselection = \"round_robin\"")
        .group("b", "answer_timeout = \"5s\"\nselection = \"round_robin\"")
        .route(REALM_A, "application = \"gx\"\ngroup = \"a\"")
        .route(REALM_B, "application = \"gx\"\ngroup = \"b\"")
        .to_string();
    let metrics = dra::metrics::Metrics::new();
    let agent = start_agent(parse_config(&text), tc_200ms(), metrics.clone()).await;
    wait_servers_open(&agent, 3, PATIENCE).await;
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let to = SocketAddr::new(lo, agent.listen_addrs()[0].port());
    let pc = loadgen_peer_config(GW_HOST, REALM, lo, Duration::from_secs(30));
    let gw = ScriptedPeer::connect_from(Some(lo), to, pc, DRA_HOST, None)
        .await
        .unwrap_or_else(|rc| panic!("CER refused ({rc})"));
    Lab {
        agent,
        metrics,
        servers,
        gw,
        n: 0,
    }
}

/// Who answered a request: a server's Origin-Host and its Result-Code.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Got {
    from: String,
    rc: Option<u32>,
}

impl Lab {
    /// One CCR of `kind` for session `sid` to `realm`.
    async fn send(&mut self, sid: &str, realm: &str, kind: u32) -> Got {
        self.n += 1;
        let req = ccr(sid, app::GX, GW_HOST, REALM, realm, kind, self.n);
        let ans = self.gw.request(req).await.expect("answer");
        // The gateway announced no DOIC: nothing DOIC reaches it (RFC 7683 §5.1).
        assert!(ans.find(c::OC_SUPPORTED_FEATURES).is_none(), "{ans:?}");
        assert!(ans.find(c::OC_OLR).is_none(), "{ans:?}");
        Got {
            from: ans.origin_host().unwrap_or("").to_owned(),
            rc: ans.result_code(),
        }
    }

    /// `n` new sessions (CCR-I) to `realm`: their ids and who answered each.
    async fn open(&mut self, tag: &str, realm: &str, n: usize) -> Vec<(String, Got)> {
        let mut out = Vec::new();
        for k in 0..n {
            let sid = format!("{GW_HOST};{tag};{k}");
            let g = self.send(&sid, realm, cc::INITIAL).await;
            out.push((sid, g));
        }
        out
    }

    fn force(&self, i: usize, sequence: u64, reduction: u32) {
        self.servers[i].doic.force(Some(ForcedReport {
            report_type: ReportType::Host,
            sequence,
            reduction,
            validity: VALIDITY,
        }));
    }

    fn host(&self, i: usize) -> &str {
        &self.servers[i].host
    }
}

fn tally(got: &[(String, Got)]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for (_, g) in got {
        let key = match g.rc {
            Some(result_code::SUCCESS) => g.from.clone(),
            rc => format!("{}:{rc:?}", g.from),
        };
        *m.entry(key).or_default() += 1;
    }
    m
}

fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_loss_reports_divert_or_shed_ccr_i_and_expire() {
    const N: usize = 40;
    let mut lab = start().await;
    let (p1, p2, p3) = (
        lab.host(0).to_owned(),
        lab.host(1).to_owned(),
        lab.host(2).to_owned(),
    );

    // --- Before: round robin splits realm A evenly, realm B all to pcrf3.
    let before_a = lab.open("before-a", REALM_A, N).await;
    let t = tally(&before_a);
    assert_eq!(t.get(&p1), Some(&(N / 2)), "{t:?}");
    assert_eq!(t.get(&p2), Some(&(N / 2)), "{t:?}");
    let before_b = lab.open("before-b", REALM_B, N / 2).await;
    assert_eq!(tally(&before_b).get(&p3), Some(&(N / 2)));

    // --- pcrf1 and pcrf3 report 50 % loss (host reports). The next answer from each
    // carries it: a CCR-U of a session bound to it.
    lab.force(0, 10, 50);
    lab.force(2, 10, 50);
    let bound1 = before_a
        .iter()
        .find(|(_, g)| g.from == p1)
        .unwrap()
        .0
        .clone();
    let bound3 = before_b[0].0.clone();
    assert_eq!(lab.send(&bound1, REALM_A, cc::UPDATE).await.from, p1);
    assert_eq!(lab.send(&bound3, REALM_B, cc::UPDATE).await.from, p3);
    let status = lab.agent.status().await.expect("status");
    assert!(
        status.contains(&format!("doic from {p1}: host report loss 50%")),
        "{status}"
    );
    assert!(status.contains(&format!("doic from {p3}: host report loss 50%")));

    // Realm A: pcrf1 gets about half of what it got; the rest is diverted to pcrf2.
    let during_a = lab.open("during-a", REALM_A, N).await;
    let t = tally(&during_a);
    let to1 = t.get(&p1).copied().unwrap_or(0);
    let to2 = t.get(&p2).copied().unwrap_or(0);
    assert_eq!(to1 + to2, N, "every CCR-I answered 2001 by a server: {t:?}");
    // Before: 20 of 40. Round robin still hands pcrf1 20 of these (a diversion does not
    // move the selection); the loss report sheds exactly every second one (the reactor is
    // deterministic, its debt starts at 50 from the priming CCR-U): 10. A binomial
    // tolerance (±2σ of Bin(20, 0.5) ≈ ±4.5) allows for an implementation that draws.
    assert!((8..=12).contains(&to1), "pcrf1 got {to1} of {N}: {t:?}");
    eprintln!("during the report, realm A: {t:?}");

    // Realm B: no other server: the shed half is answered 3004 by the agent.
    let during_b = lab.open("during-b", REALM_B, N / 2).await;
    let busy = during_b
        .iter()
        .filter(|(_, g)| g.rc == Some(result_code::TOO_BUSY))
        .count();
    for (_, g) in &during_b {
        if g.rc == Some(result_code::TOO_BUSY) {
            assert_eq!(g.from, DRA_HOST, "3004 comes from the agent");
        } else {
            assert_eq!(g.from, p3);
        }
    }
    assert_eq!(busy, N / 4, "half of {} CCR-I to pcrf3", N / 2);
    eprintln!(
        "during the report, realm B: {busy} of {} answered 3004",
        N / 2
    );

    // CCR-T of pcrf3's sessions, between new CCR-I: never shed, never diverted (strict
    // sessions: pcrf3 answers 2001 only to its own sessions).
    let mut t_busy = 0;
    let mut i_busy = 0;
    for (k, (sid, _)) in before_b.iter().enumerate().skip(1).take(8) {
        let g = lab.send(sid, REALM_B, cc::TERMINATION).await;
        assert_eq!(g.from, p3, "CCR-T answered by {g:?}");
        // A shed CCR-T would be answered 5012 (bound: no other path, RFC 7683 §8).
        t_busy += usize::from(
            g.rc == Some(result_code::TOO_BUSY) || g.rc == Some(result_code::UNABLE_TO_COMPLY),
        );
        let g = lab
            .send(&format!("{GW_HOST};mix;{k}"), REALM_B, cc::INITIAL)
            .await;
        i_busy += usize::from(g.rc == Some(result_code::TOO_BUSY));
    }
    assert_eq!(t_busy, 0, "a CCR-T was shed while CCR-I remained");
    assert!(i_busy >= 4, "CCR-I pay first: {i_busy} of 8 shed");
    eprintln!("8 CCR-T + 8 CCR-I to pcrf3: {t_busy} CCR-T and {i_busy} CCR-I shed");
    // CCR-U of realm A sessions bound to pcrf1 stay there (2001) or are refused by the
    // agent with 5012 (RFC 7683 §8: no other path can serve them): never answered by
    // pcrf2, never 3004.
    for (sid, g) in before_a.iter().filter(|(_, g)| g.from == p1).take(4) {
        let u = lab.send(sid, REALM_A, cc::UPDATE).await;
        assert!(
            (u.from == p1 && u.rc == Some(result_code::SUCCESS))
                || (u.from == DRA_HOST && u.rc == Some(result_code::UNABLE_TO_COMPLY)),
            "{sid} ({g:?}) → {u:?}"
        );
    }

    // --- A stale report (older number, 100 %) is ignored and counted.
    lab.force(0, 9, 100);
    let stale_a = lab.open("stale-a", REALM_A, N).await;
    let t = tally(&stale_a);
    let to1 = t.get(&p1).copied().unwrap_or(0);
    assert!(
        (8..=12).contains(&to1),
        "still 50 %: pcrf1 got {to1}: {t:?}"
    );
    eprintln!("stale report ignored, realm A: {t:?}");
    let text = lab.metrics.encode();
    let stale = metric(
        &text,
        "dra_doic_olrs_received_total",
        &["peer=\"pcrf1\"", "result=\"stale\""],
    );
    assert!(stale >= 1.0, "stale reports not counted:\n{text}");
    let applied = metric(
        &text,
        "dra_doic_olrs_received_total",
        &["peer=\"pcrf1\"", "result=\"applied\""],
    );
    assert_eq!(applied, 1.0, "{text}");
    assert!(
        metric(
            &text,
            "dra_doic_requests_abated_total",
            &["outcome=\"diverted\""]
        ) >= 6.0
    );
    assert_eq!(
        metric(
            &text,
            "dra_doic_requests_abated_total",
            &["peer=\"pcrf3\"", "outcome=\"rejected\""]
        ),
        (busy + i_busy) as f64,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "dra_doic_server_reduction_percent",
            &["peer=\"pcrf1\""]
        ),
        50.0
    );
    assert!(lab.servers[0].doic.sent() > 0);

    // --- The servers stop reporting; after the validity, full traffic again.
    lab.servers[0].doic.force(None);
    lab.servers[2].doic.force(None);
    // The scenario: the reports' validity (VALIDITY s from their first receipt, before
    // now) runs out.
    tokio::time::sleep(Duration::from_secs(u64::from(VALIDITY)) + Duration::from_millis(300)).await;
    let after_a = lab.open("after-a", REALM_A, N).await;
    let t = tally(&after_a);
    assert_eq!(
        t.get(&p1).copied().unwrap_or(0) + t.get(&p2).copied().unwrap_or(0),
        N
    );
    assert!(
        (N / 2 - 1..=N / 2 + 1).contains(t.get(&p1).unwrap_or(&0)),
        "{t:?}"
    );
    eprintln!("after expiry, realm A: {t:?}");
    let after_b = lab.open("after-b", REALM_B, N / 2).await;
    assert_eq!(
        tally(&after_b).get(&p3),
        Some(&(N / 2)),
        "expired: nothing shed"
    );
    let status = lab.agent.status().await.expect("status");
    assert!(!status.contains("doic from"), "{status}");

    let stats = lab.agent.stats().await.expect("stats");
    assert!(stats.invariant_ok(), "{stats:?}");
    lab.gw.disconnect().await;
    lab.agent.shutdown().await;
}
