//! dra-loadgen's DOIC roles over real TCP on 127.0.0.1 (docs/loadgen.md): gateways as
//! reacting nodes (`ClientConfig::doic`) against a server that is a reporting node
//! (`ServerConfig::doic`, capacity 100 CCR/s, 50 % reduction asked for). Offered 300
//! CCR-I/s for 4 s: once the first report arrives the gateways shed half their new
//! sessions themselves; without `doic` on the gateways nothing is shed (the server
//! reports only to requests that announce DOIC).

mod support;

use std::sync::Arc;

use dra_tools::loadgen::client::{self, ClientConfig};
use dra_tools::loadgen::doic::ServerReporter;
use dra_tools::loadgen::scenario::Class;
use dra_tools::loadgen::server::{self, ServerConfig};
use dra_tools::loadgen::stats::Report;
use support::pcrf_scenario;

const HOST: &str = "pcrf1.lab.example";

async fn run(doic_gateways: bool) -> (Report, u64) {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), HOST, "pcrf.lab.example");
    let reporter = Arc::new(ServerReporter::new(HOST, Some(100.0), Some(50), 30));
    cfg.doic = Some(reporter.clone());
    let srv = server::run(cfg).await.unwrap();
    let scenario =
        pcrf_scenario(&[r#"name = "storm", duration_s = 4, rates = { gx_ccr_i = 300 }"#]);
    let mut ccfg = ClientConfig::new(srv.local_addr(), 2);
    ccfg.doic = doic_gateways;
    let report = client::run(ccfg, scenario).await.unwrap();
    srv.shutdown().await;
    (report, reporter.sent())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doic_gateways_shed_what_the_server_reports() {
    let (with, sent_with) = run(true).await;
    let i = with.class(Class::GxCcrI.name());
    eprintln!(
        "with DOIC: sent {} shed {} answered {} (server OLRs {sent_with})",
        i.sent,
        i.doic_shed,
        i.answered_total()
    );
    assert!(sent_with > 0, "the server never reported");
    let offered = i.sent + i.doic_shed;
    assert!((1150..=1200).contains(&offered), "{offered}");
    // 50 % from the first report on (after the first one-second window): about
    // 3 s × 150 shed; allow for the report's start.
    assert!((380..=470).contains(&i.doic_shed), "{i:?}");
    assert_eq!(i.answered_total(), i.sent, "every request sent is answered");
    assert!(
        with.to_text()
            .contains("shed by the gateways (DOIC): gx_ccr_i:")
    );

    let (without, sent_without) = run(false).await;
    let i = without.class(Class::GxCcrI.name());
    assert_eq!(
        sent_without, 0,
        "reports only to requests that announce DOIC"
    );
    assert_eq!(i.doic_shed, 0);
}
