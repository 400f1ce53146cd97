//! `cargo xtask demo --doic`: the seed story with DOIC (docs/demo.md, docs/doic.md).
//!
//! The agent runs config/lab/dra-lab-doic.toml (the lab config plus `doic = true` on
//! pgw2, pcrf1, pcrf2); pgw2 is a DOIC gateway (`dra-loadgen client --doic`) and sheds
//! its storm at the source instead of being answered 3002; pcrf1 reports overload
//! during the storm (`dra-loadgen server --doic-capacity`, 50 % loss) and the agent
//! diverts pgw1's new sessions from it to pcrf2. pgw1 keeps the seed story (dynamic
//! throttling, no DOIC). [`checks`] are the DOIC part of the story checks.

use std::collections::BTreeMap;

use anyhow::Result;
use dra_report::client::{ClassSummary, Report};

use super::checks::Check;
use crate::{lab::Server, metrics::Snap};

/// The agent's config for the DOIC story.
pub(super) const CONFIG: &str = "config/lab/dra-lab-doic.toml";
/// The DOIC gateway.
pub(super) const GATEWAY: &str = "pgw2";
/// The reporting PCRF, its capacity (requests/s) and the reduction it asks for.
pub(super) const REPORTER: &str = "pcrf1";
const CAPACITY: u32 = 200;
const REDUCTION: u32 = 50;
/// pgw2's 3002 at most this share of the CCR-I its limit would have rejected.
const MAX_REJECT_SHARE: f64 = 0.20;

/// The extra `dra-loadgen server` arguments of `s` in the DOIC story.
pub(super) fn server_args(s: &Server) -> Vec<String> {
    if s.name == REPORTER {
        vec![
            "--doic-capacity".into(),
            CAPACITY.to_string(),
            "--doic-reduction".into(),
            REDUCTION.to_string(),
        ]
    } else {
        Vec::new()
    }
}

/// `peer`'s totals of `class` (all zero when the peer sent none of it).
fn class_of(clients: &BTreeMap<String, Report>, peer: &str, class: &str) -> ClassSummary {
    clients
        .get(peer)
        .map(|r| r.class(class))
        .unwrap_or_default()
}

/// The DOIC checks, from the agent's last scrape and the gateways' summaries; an error
/// when the scrape lacks a figure a check needs.
pub(super) fn checks(last: &Snap, clients: &BTreeMap<String, Report>) -> Result<Vec<Check>> {
    let i = class_of(clients, GATEWAY, "gx_ccr_i");
    let (shed, sent) = (i.doic_shed, i.sent);
    let (ok_2001, rej) = (i.answered_with(2001), i.answered_with(3002));
    // What its static limit would have rejected without DOIC: everything offered that
    // was not admitted.
    let excess = (sent + shed).saturating_sub(ok_2001);
    let share = if excess > 0 {
        rej as f64 / excess as f64
    } else {
        f64::NAN
    };
    // The agent creates a gateway's OC-OLR series at its first OC-OLR to it: absent, none
    // sent. The check passes only with OC-OLRs counted for GATEWAY, so a series name the
    // agent does not export cannot pass it as "0 to pgw1".
    let olrs =
        |peer: &str| last.sum_or_zero_if_absent("dra_doic_olrs_sent_total", &[("peer", peer)]);
    let (olrs_gateway, olrs_pgw1) = (olrs(GATEWAY), olrs("pgw1"));
    let other_shed = class_of(clients, "pgw1", "gx_ccr_i").doic_shed;
    // The next three series appear at the first OC-OLR applied and the first request
    // abated: absent, none. The check needs `applied` and `diverted` > 0, so their
    // absence fails it; `rejected` is only shown.
    let applied = last.sum_or_zero_if_absent(
        "dra_doic_olrs_received_total",
        &[("peer", REPORTER), ("result", "applied")],
    );
    let diverted = last.sum_or_zero_if_absent(
        "dra_doic_requests_abated_total",
        &[("peer", REPORTER), ("outcome", "diverted")],
    );
    let rejected = last.sum_or_zero_if_absent(
        "dra_doic_requests_abated_total",
        &[("peer", REPORTER), ("outcome", "rejected")],
    );
    // Both servers are sent requests (round robin) from the start: a missing series is
    // an error, never a 0 that reads as "fewer".
    let out = |p: &str| last.sum("dra_requests_total", &[("peer", p), ("direction", "out")]);
    let (p1, p2) = (out(REPORTER)?, out("pcrf2")?);
    Ok(vec![
        Check::new(
            format!("{GATEWAY} (DOIC) shed its storm at the source"),
            format!("{GATEWAY} gx_ccr_i shed by the gateway > 0"),
            format!("{shed} shed, {sent} sent"),
            shed > 0,
        ),
        Check::new(
            format!("the agent reported its limits to {GATEWAY} only"),
            format!("OC-OLRs sent to {GATEWAY} > 0, to pgw1 (no DOIC) 0, pgw1 shed nothing"),
            format!("{GATEWAY}: {olrs_gateway:.0}, pgw1: {olrs_pgw1:.0}; pgw1 shed {other_shed}"),
            olrs_gateway > 0.0 && olrs_pgw1 == 0.0 && other_shed == 0,
        ),
        Check::new(
            format!("{GATEWAY} got far fewer 3002 than its limit would have sent"),
            format!(
                "gx_ccr_i 3002 ≤ {:.0} % of (offered − answered 2001)",
                100.0 * MAX_REJECT_SHARE
            ),
            format!(
                "{rej} 3002 of {excess} over the limit ({:.1} %)",
                100.0 * share
            ),
            share <= MAX_REJECT_SHARE,
        ),
        Check::new(
            format!("{REPORTER} reported overload and the agent diverted new sessions"),
            format!("{REPORTER} OC-OLRs applied > 0, diverted > 0"),
            format!(
                "{applied:.0} applied, {diverted:.0} diverted, {rejected:.0} answered 3004/5012"
            ),
            applied > 0.0 && diverted > 0.0,
        ),
        Check::new(
            format!("{REPORTER} (reporting) got fewer requests than pcrf2"),
            format!("requests sent to {REPORTER} < to pcrf2"),
            format!("{p1:.0} vs {p2:.0}"),
            p1 < p2,
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::config::read_toml;

    #[test]
    fn the_doic_lab_config_is_the_lab_config_plus_doic_on_pgw2_and_the_pcrfs() {
        let root = crate::workspace_root();
        let doic = read_toml(&root, CONFIG).unwrap();
        let lab = read_toml(&root, super::super::LAB_CONFIG).unwrap();
        let peers = [GATEWAY, REPORTER, "pcrf2"];
        assert_eq!(crate::bench::config::without_doic(&doic, &peers), lab);
        for p in peers {
            assert_eq!(crate::bench::config::peer_doic(&doic, p), Some(true), "{p}");
        }
        assert_eq!(crate::bench::config::peer_doic(&doic, "pgw1"), None);
    }

    #[test]
    fn the_reject_share_check_fails_when_the_gateway_does_not_shed() {
        let snap = Snap {
            series: crate::metrics::parse_metrics(
                "dra_requests_total{peer=\"pcrf1\",direction=\"out\"} 300\n\
                 dra_requests_total{peer=\"pcrf2\",direction=\"out\"} 700\n",
            ),
        };
        let v = |shed: u64, rej: u64| {
            let mut r = Report::default();
            r.classes.insert(
                "gx_ccr_i".into(),
                ClassSummary {
                    sent: 1000 - shed,
                    doic_shed: shed,
                    answered: [("2001".to_owned(), 500), ("3002".to_owned(), rej)].into(),
                    ..ClassSummary::default()
                },
            );
            BTreeMap::from([(GATEWAY.to_owned(), r)])
        };
        let c = |shed: u64, rej: u64| checks(&snap, &v(shed, rej)).unwrap();
        assert!(c(450, 50)[2].ok && c(450, 50)[0].ok);
        assert!(!c(0, 500)[2].ok && !c(0, 500)[0].ok);
        assert!(c(0, 500)[4].ok, "300 requests to pcrf1 < 700 to pcrf2");
        // Without the requests sent to the servers: an error, not "0 < 0".
        let e = checks(&Snap { series: Vec::new() }, &v(450, 50)).unwrap_err();
        assert!(format!("{e:#}").contains("dra_requests_total"), "{e:#}");
    }
}
