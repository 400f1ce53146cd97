//! DOIC end to end over real loopback TCP (docs/doic.md): the agent enforces a Gx CCR-I
//! limit of 20/s itself (`dra::limiter`, no XDP) on three gateways that each storm it
//! at 60 CCR-I/s, then calm down to 2/s:
//!
//! - `pgw1` announces DOIC with loss, rate and peer reports: its answers (relayed CCAs
//!   and the agent's own 3002s) carry OC-OLR peer reports with OC-Maximum-Rate 20 —
//!   exactly its limit — and, once calm, the explicit end (validity 0, newer number);
//! - `pgw2` has `doic = true` but announces nothing: its answers carry no DOIC AVP;
//! - `pgw3` announces loss only and obeys the reports (sheds the reduction it is told):
//!   the reduction settles where 20 of its 60/s get through (≈ 67 %), then ends.

mod support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use dra::diameter::dictionary::enums::oc_feature::{LOSS, PEER_REPORT, RATE};
use dra::diameter::result_code;
use dra::doic::{Olr, ReportType, SupportedFeatures};
use dra::limiter::Limiter;
use dra_common::wire::app;
use dra_tools::loadgen::loadgen_peer_config;
use dra_tools::loadgen::script::{ScriptedPeer, cc, ccr};
use dra_tools::loadgen::server::{ServerConfig, ServerHandle};
use support::agent::{
    DRA_HOST, PCRF_REALM, REALM, agent_config, parse_config, start_agent, wait_servers_open,
    with_limiter,
};
use support::free_port;
use tokio::time::Instant;

const PCRF_HOST: &str = "pcrf1.pcrf.test.example";
const LIMIT: u32 = 20;
const STORM_RATE: f64 = 60.0;
const STORM: Duration = Duration::from_secs(4);
const CALM_RATE: f64 = 2.0;
const CALM: Duration = Duration::from_millis(4500);
const VALIDITY: u32 = 5;
const PATIENCE: Duration = Duration::from_secs(10);

fn agent_toml(pcrf: SocketAddr) -> String {
    let limit = |peer: &str| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"{peer}\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
             rate = {LIMIT}\nburst = 2\nresult_code = 3002\n"
        )
    };
    let doic = format!("doic = true\ndoic_validity = \"{VALIDITY}s\"\n");
    agent_config(&["127.0.0.1", "[::1]"], free_port())
        .client("pgw1", REALM, &["127.0.0.1"], &doic)
        .client("pgw2", REALM, &["::1"], &doic)
        .client(
            "pgw3",
            REALM,
            &["127.0.0.2"],
            &format!("{doic}doic_algorithms = [\"loss\"]\n"),
        )
        .server("pcrf1", PCRF_REALM, &pcrf.to_string(), "group = \"pcrf\"")
        .group(
            "pcrf",
            "answer_timeout = \"5s\"\nselection = \"round_robin\"",
        )
        .route(PCRF_REALM, "application = \"gx\"\ngroup = \"pcrf\"")
        .with(&limit("pgw1"))
        .with(&limit("pgw2"))
        .with(&limit("pgw3"))
        .to_string()
}

struct Lab {
    agent: dra::agent::AgentHandle,
    _server: ServerHandle,
    metrics: dra::metrics::Metrics,
}

async fn start() -> Lab {
    let mut scfg = ServerConfig::new(
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        PCRF_HOST,
        PCRF_REALM,
    );
    scfg.strict_sessions = false;
    let server = dra_tools::loadgen::server::run(scfg).await.expect("server");
    let text = agent_toml(server.local_addr());
    let cfg = parse_config(&text);
    let plan = dra::dataplane::Plan::new(&cfg).expect("plan");
    let metrics = dra::metrics::Metrics::new();
    let opts = with_limiter(Arc::new(Limiter::new(&plan)));
    let agent = start_agent(cfg, opts, metrics.clone()).await;
    wait_servers_open(&agent, 1, PATIENCE).await;
    Lab {
        agent,
        _server: server,
        metrics,
    }
}

/// One answer as the gateway saw it.
struct Seen {
    storm: bool,
    result_code: Option<u32>,
    features: Option<SupportedFeatures>,
    olrs: Vec<Olr>,
}

/// A gateway that sends CCR-I at [`STORM_RATE`] for [`STORM`], then at [`CALM_RATE`]
/// for [`CALM`], each request after the previous answer. `announce`: its
/// OC-Supported-Features; `obey`: it sheds the reduction of the latest loss report.
async fn gateway(
    lab: &Lab,
    name: &str,
    from: IpAddr,
    announce: Option<SupportedFeatures>,
    obey: bool,
) -> Vec<Seen> {
    let host = format!("{name}.{REALM}");
    let to = SocketAddr::new(
        if from.is_ipv6() {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        },
        lab.agent.listen_addrs()[0].port(),
    );
    let cfg = loadgen_peer_config(&host, REALM, from, Duration::from_secs(30));
    let peer = ScriptedPeer::connect_from(Some(from), to, cfg, DRA_HOST, None)
        .await
        .unwrap_or_else(|rc| panic!("{name}: CER refused ({rc})"));
    let mut seen = Vec::new();
    let mut reduction = 0u32;
    let mut credit = 0.0;
    let start = Instant::now();
    let mut n = 0u32;
    for (storm, rate, length) in [(true, STORM_RATE, STORM), (false, CALM_RATE, CALM)] {
        let phase_end = Instant::now() + length;
        let mut next = Instant::now();
        while Instant::now() < phase_end {
            tokio::time::sleep_until(next).await;
            next += Duration::from_secs_f64(1.0 / rate);
            if obey {
                // RFC 7683 loss: drop `reduction` % of what we would send.
                credit += f64::from(100 - reduction) / 100.0;
                if credit < 1.0 {
                    continue;
                }
                credit -= 1.0;
            }
            n += 1;
            let mut req = ccr(
                &format!("{host};doic;{n}"),
                app::GX,
                &host,
                REALM,
                PCRF_REALM,
                cc::INITIAL,
                0,
            );
            if let Some(sf) = &announce {
                req.push(sf.to_avp());
            }
            let ans = peer.request(req).await.expect("answer");
            let olrs: Vec<Olr> = Olr::all_of(&ans)
                .map(|o| o.expect("valid OC-OLR"))
                .collect();
            if let Some(o) = olrs.iter().find(|o| o.report_type == ReportType::Peer) {
                reduction = if o.validity == Some(0) {
                    0
                } else {
                    o.reduction.unwrap_or(0)
                };
            }
            seen.push(Seen {
                storm,
                result_code: ans.result_code(),
                features: SupportedFeatures::of(&ans).map(|f| f.expect("valid")),
                olrs,
            });
        }
    }
    assert!(start.elapsed() < STORM + CALM + PATIENCE);
    peer.disconnect().await;
    seen
}

fn announce(features: u64, name: &str) -> Option<SupportedFeatures> {
    Some(SupportedFeatures {
        feature_vector: Some(features | PEER_REPORT),
        source_id: Some(format!("{name}.{REALM}")),
        peer_algo: None,
    })
}

/// The peer reports in `seen`, in order, with whether they came in a storm answer.
fn reports(seen: &[Seen]) -> Vec<(bool, Option<u32>, Olr)> {
    seen.iter()
        .flat_map(|s| {
            s.olrs
                .iter()
                .map(move |o| (s.storm, s.result_code, o.clone()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doic_gateways_get_what_the_agent_enforces_and_the_end() {
    let lab = start().await;
    let lo2 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    // `dra status` lists the reports in force while the storm lasts.
    let status = async {
        // The scenario's timeline: the status is read 0.5 s before the storm ends.
        tokio::time::sleep(STORM - Duration::from_millis(500)).await;
        lab.agent.status().await.expect("status")
    };
    let (g1, g2, g3, status) = tokio::join!(
        gateway(
            &lab,
            "pgw1",
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            announce(LOSS | RATE, "pgw1"),
            false
        ),
        gateway(&lab, "pgw2", IpAddr::V6(Ipv6Addr::LOCALHOST), None, false),
        gateway(&lab, "pgw3", lo2, announce(LOSS, "pgw3"), true),
        status,
    );
    assert!(
        status.contains("doic pgw1: peer report rate 20/s"),
        "{status}"
    );
    assert!(status.contains("doic pgw3: peer report loss "), "{status}");
    assert!(!status.contains("doic pgw2"), "{status}");

    // --- pgw1: rate. Every answer announces our DOIC back, rate for peer reports.
    for s in &g1 {
        let f = s
            .features
            .as_ref()
            .expect("OC-Supported-Features in every answer");
        assert_eq!(f.peer_algo, Some(RATE));
        assert_eq!(f.source_id.as_deref(), Some(DRA_HOST));
        assert_ne!(f.features() & PEER_REPORT, 0);
    }
    let r1 = reports(&g1);
    let live: Vec<&(bool, Option<u32>, Olr)> = r1
        .iter()
        .filter(|(_, _, o)| o.validity != Some(0))
        .collect();
    assert!(!live.is_empty(), "pgw1 got no overload report");
    for (_, _, o) in &live {
        assert_eq!(o.report_type, ReportType::Peer);
        assert_eq!(o.source_id.as_deref(), Some(DRA_HOST));
        assert_eq!(o.max_rate, Some(LIMIT), "the limit we enforce");
        assert_eq!(o.reduction, None);
        assert_eq!(o.validity, Some(VALIDITY));
    }
    // In the agent's own 3002s and in relayed CCAs alike.
    for rc in [result_code::UNABLE_TO_DELIVER, result_code::SUCCESS] {
        assert!(
            live.iter().any(|(_, c, _)| *c == Some(rc)),
            "no report in a {rc}"
        );
    }
    let last_seq = live.iter().map(|(_, _, o)| o.sequence).max().unwrap();
    // RFC 7683 §5.2: the end is reported (validity 0, no rate, a newer number).
    let ends: Vec<&Olr> = r1
        .iter()
        .filter(|(storm, _, o)| !storm && o.validity == Some(0))
        .map(|(_, _, o)| o)
        .collect();
    assert!(!ends.is_empty(), "pgw1: no end of overload reported");
    assert!(
        ends.iter()
            .all(|o| o.sequence > last_seq && o.max_rate.is_none())
    );

    // --- pgw2: limited too, but announced no DOIC: nothing new in its answers.
    assert!(
        g2.iter()
            .any(|s| s.result_code == Some(result_code::UNABLE_TO_DELIVER)),
        "pgw2 was not limited"
    );
    for s in &g2 {
        assert!(s.features.is_none() && s.olrs.is_empty());
    }

    // --- pgw3: loss, obeying. The reduction its last storm answers carry is where 20
    // of its 60/s get through (2/3); then the end, with reduction 0.
    let r3 = reports(&g3);
    let last_storm = r3
        .iter()
        .filter(|(storm, _, o)| *storm && o.validity != Some(0))
        .map(|(_, _, o)| o.reduction.expect("loss report"))
        .next_back()
        .expect("pgw3 got no overload report");
    println!("pgw3: last reduction in the storm {last_storm} %");
    assert!(
        (55..=80).contains(&last_storm),
        "reduction {last_storm} % for 60/s against 20/s"
    );
    let end3 = r3
        .iter()
        .find(|(storm, _, o)| !storm && o.validity == Some(0))
        .map(|(_, _, o)| o.clone())
        .expect("pgw3: no end of overload reported");
    assert_eq!(end3.reduction, Some(0));
    for s in &g3 {
        assert_eq!(s.features.as_ref().and_then(|f| f.peer_algo), Some(LOSS));
    }
    // Obeying cut its 3002s: fewer than the storm's excess without DOIC.
    let rejected3 = g3
        .iter()
        .filter(|s| s.result_code == Some(result_code::UNABLE_TO_DELIVER))
        .count();
    let rejected2 = g2
        .iter()
        .filter(|s| s.result_code == Some(result_code::UNABLE_TO_DELIVER))
        .count();
    println!("3002s: pgw2 (no DOIC) {rejected2}, pgw3 (DOIC loss, obeying) {rejected3}");
    assert!(rejected3 < rejected2, "{rejected3} vs {rejected2}");

    // Metrics: OLRs sent per gateway and kind; pgw2 has none.
    let text = lab.metrics.encode();
    for (peer, algorithm, kind) in [
        ("pgw1", "rate", "report"),
        ("pgw1", "rate", "end"),
        ("pgw3", "loss", "report"),
    ] {
        let needle = format!(
            "dra_doic_olrs_sent_total{{peer=\"{peer}\",report_type=\"peer\",\
             algorithm=\"{algorithm}\",kind=\"{kind}\"}}"
        );
        assert!(text.contains(&needle), "metrics lack {needle}:\n{text}");
    }
    assert!(!text.contains("dra_doic_olrs_sent_total{peer=\"pgw2\""));
    let stats = lab.agent.stats().await.expect("stats");
    assert!(stats.invariant_ok(), "{stats:?}");
}
