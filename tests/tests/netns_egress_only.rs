//! TC egress without XDP (docs/config.md, "Which part enforces a limit"): `[fast_path]
//! egress_interface` set, no `interface`, a per-peer, per-class egress `drop` limit — Gx
//! CCR-I to pcrf1 at 100/s. Nothing else enforces it in this setup (ingress goes to the
//! agent's limiter, and with no program attached the PCRF receives ~9,700 CCR-I/s):
//! `dra run` attaches the TC egress program on its own and the kernel enforces the
//! limit.
//!
//! The real `dra run` in the DRA namespace (its overload control off); a gateway (the
//! project's scripted peer) offers CCR-I at 10× the limit, open loop (as fast as the
//! agent reads where that is slower; where that is less than twice the limit, as in an
//! emulated guest, the run is repeated with the limit at a quarter of the rate
//! measured); the PCRF is a sink that logs every request it reads. What the PCRF
//! received while the gateway sent is bounded by rate × duration + burst (the GCRA's
//! own bound; no timing-tight assertion), is more than a quarter of it (the limit is
//! not starved), and the TC program's counters show the excess dropped on pcrf1's
//! CCR-I slot. `/metrics` publishes both parts: the
//! agent's limiter (ingress, no XDP) and the TC program (egress).
//!
//! Topology: gw (198.18.40.2) — veth — dra (198.18.40.1 | 198.18.41.1, TC egress on the
//! server side) — veth — srv (198.18.41.2, pcrf1). Namespaces (`eg-*`) and pins are
//! removed on drop, also on panic.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use dra::dataplane::{Dataplane, Maps, Plan};
use dra_common::{
    stats::Counter,
    wire::{MsgClass, cc_request_type as rt},
};
use dra_tests::{
    agent::Agent,
    netns::GwDraSrv,
    sim::{PGW1, ScriptedServer, Sim, gx_ccrs},
    support::{ConfigToml, Pins, TempDir},
};

/// The egress limit on pcrf1's Gx CCR-I (drop; lower where the gateway cannot offer
/// twice it), and its burst.
const RATE: f64 = 100.0;
const BURST: u32 = 20;
/// What the gateway offers: CCR-I every 1 ms (10× the limit), for this long.
const EVERY: Duration = Duration::from_millis(1);
const OFFER: Duration = Duration::from_secs(4);

const DRA: (&str, &str) = ("dra.lab.example", "lab.example");
const PCRF1: (&str, &str) = ("pcrf1.pcrf.lab.example", "pcrf.lab.example");

fn config(egress_if: &str, control: &std::path::Path, rate: f64) -> String {
    ConfigToml::new(DRA.1, &["198.18.40.1:3868"], "")
        // No interface: no XDP. The TC egress program alone, on the servers' side; the
        // agent's overload control off (it would shed what an emulated guest cannot
        // relay in time before TC sees it: nothing but TC limits the traffic here).
        .with(&format!(
            "[fast_path]\negress_interface = \"{egress_if}\"\n\n\
             [metrics]\naddress = \"198.18.40.1:9464\"\n\n[overload]\nenabled = false"
        ))
        .client("pgw1", DRA.1, &["198.18.40.2"], "")
        .server("pcrf1", PCRF1.1, "198.18.41.2:3868", "group = \"pcrf\"")
        .group("pcrf", "answer_timeout = \"2s\"")
        .route(PCRF1.1, "group = \"pcrf\"")
        .with(&format!(
            "[[message_rate_limit_profile]]\npeer = \"pcrf1\"\ndirection = \"egress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
             rate = {rate}\nburst = {BURST}\naction = \"drop\""
        ))
        .control(control)
        .to_string()
}

/// The lab: the three namespaces, the PCRF sink, the pins and a directory.
struct Lab {
    net: GwDraSrv,
    sim: Sim,
    sink: ScriptedServer,
    tmp: TempDir,
    pins: Pins,
}

/// What one run found wrong, and the rate the gateway offered in it.
struct Run {
    failures: Vec<String>,
    offered_per_s: f64,
}

#[test]
fn a_per_peer_egress_drop_limit_is_enforced_by_tc_without_xdp() {
    let net = GwDraSrv::new("eg-", 40, 41);
    // The PCRF first: the agent dials it at start.
    let sim = Sim::new();
    let sink = sim.sink(&net.srv, "198.18.41.2:3868".parse().unwrap(), PCRF1, DRA.0);
    let lab = Lab {
        net,
        sim,
        sink,
        tmp: TempDir::new("dra-eg-"),
        pins: Pins::new("dra-eg-"),
    };
    let mut run = run_at(&lab, RATE);
    // Where the gateway offered less than twice the limit (the agent reads slower than
    // the gateway's pace: an emulated guest), again at a limit sized from what it
    // offered: a quarter of it.
    let sized = (run.offered_per_s / 4.0).floor().clamp(10.0, RATE);
    if run.offered_per_s < 2.0 * RATE && sized < RATE {
        println!(
            "offered {:.1}/s, less than twice the limit of {RATE}/s: again at {sized}/s",
            run.offered_per_s
        );
        run = run_at(&lab, sized);
    }
    assert!(run.failures.is_empty(), "{}", run.failures.join("\n"));
}

/// `dra run` with pcrf1's CCR-I egress limit at `rate` (detached on exit: the next run
/// starts from a fresh fast path), the gateway offering CCR-I for [`OFFER`]; what went
/// wrong.
fn run_at(lab: &Lab, rate: f64) -> Run {
    let (gw, dra) = (&lab.net.gw, &lab.net.dra);
    let (client_veth, server_veth) = (&lab.net.client, &lab.net.server);
    let (tmp, pins, sim, sink) = (&lab.tmp, &lab.pins, &lab.sim, &lab.sink);
    let egress_if = server_veth.a_if.clone();
    let text = config(&egress_if, &tmp.0.join("dra.sock"), rate);
    let cfg_path = tmp.0.join(format!("dra-{rate}.toml"));
    std::fs::write(&cfg_path, &text).unwrap();
    let args = [
        "--config",
        cfg_path.to_str().unwrap(),
        "--pin-dir",
        pins.0.to_str().unwrap(),
        "--detach-on-exit",
    ];
    let mut agent = Agent::start(dra, &args, &tmp.0.join(format!("dra-{rate}.log")));
    // Ready: pcrf1 open (the egress program attached before that).
    agent.wait_ready(Duration::from_secs(30));
    let log = agent.log_text();
    assert!(log.contains("egress program attached"), "{log}");
    assert!(
        log.contains("the agent enforces the ingress limits in userspace"),
        "{log}"
    );
    // TC egress alone: its link is pinned, no XDP link anywhere.
    assert!(Dataplane::is_egress_pinned(&egress_if, &pins.0));
    assert!(Dataplane::pinned_xdp_links(&pins.0).is_empty());
    assert!(!Dataplane::is_pinned(&client_veth.b_if, &pins.0));
    let maps = Maps::open_pinned(&pins.0).expect("pinned maps");
    let plan = Plan::new(&dra::config::parse(&text, "dra.toml").unwrap()).unwrap();
    let slot = plan
        .egress_slot_of("pcrf1", MsgClass::gx_ccr(rt::INITIAL))
        .expect("pcrf1 CCR-I egress slot");
    let dropped_before = maps.stat(Counter::EgressDropped).unwrap();
    // What the sink read before this run.
    let before = sink.arrivals.len();

    // The gateway: CCR-I at 10× the limit of 100/s, open loop.
    let from: IpAddr = "198.18.40.2".parse().unwrap();
    let to: SocketAddr = "198.18.40.1:3868".parse().unwrap();
    let peer = sim.connect(gw, from, to, PGW1, DRA.0, None, None);
    let sent = sim.paced(&peer, vec![gx_ccrs(EVERY, rt::INITIAL)], OFFER, 1);

    let arrivals = sink.arrivals.snapshot().split_off(before);
    let ccr_i = MsgClass::gx_ccr(rt::INITIAL);
    let window = sent.last.duration_since(sent.first).as_secs_f64();
    // Everything the PCRF read before the gateway's last request was built passed the
    // TC program inside [first, last] (nothing can be forwarded before it is sent).
    let received = arrivals
        .iter()
        .filter(|a| a.class == ccr_i && a.at <= sent.last)
        .count();
    let counters = maps.slot_counters(slot).unwrap();
    let dropped = maps.stat(Counter::EgressDropped).unwrap() - dropped_before;
    let offered = sent.log.len();
    let bound = rate * window + f64::from(BURST) + 1.0;
    let offered_per_s = offered as f64 / window;
    println!(
        "offered {offered} CCR-I in {window:.2} s ({offered_per_s:.0}/s); pcrf1 received \
         {received} in that window ({:.1}/s, limit {rate}/s, bound {bound:.0}); TC slot: \
         seen {} admitted {} dropped {}; egress_dropped {dropped}",
        received as f64 / window,
        counters.seen,
        counters.admitted,
        counters.dropped,
    );
    let mut failures = Vec::new();
    // The precondition, from what the gateway offered in the window it timed (as fast
    // as the agent reads, where that is below its pace): at least twice the limit, else
    // the bound below says nothing.
    if offered_per_s < 2.0 * rate {
        failures.push(format!(
            "the gateway offered only {offered_per_s:.0}/s ({offered} in {window:.2} s), \
             less than twice the limit of {rate}/s"
        ));
    }
    if received as f64 > bound {
        failures.push(format!(
            "pcrf1 received {received} CCR-I, above rate × window + burst = {bound:.0}"
        ));
    }
    if (received as f64) < 0.25 * rate * window {
        failures.push(format!(
            "pcrf1 received only {received} CCR-I: the limit starves"
        ));
    }
    if counters.dropped == 0 || dropped == 0 {
        failures.push(format!(
            "nothing dropped in TC: slot {counters:?}, egress_dropped {dropped}"
        ));
    }
    // Whatever reached pcrf1 passed the TC program, which counted it as it passed:
    // read the arrivals first, the counter after.
    let received_now = (sink.arrivals.len() - before) as u64;
    let counters = maps.slot_counters(slot).unwrap();
    if counters.admitted < received_now {
        failures.push(format!(
            "pcrf1 received {received_now} CCR-I, the TC program admitted only {}",
            counters.admitted
        ));
    }
    // The metrics: ingress from the agent's limiter, egress from the TC program's maps
    // (published once a second, once the agent has read every request).
    let metric = |text: &str, name: &str, labels: &[&str]| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let requests = "dra_fastpath_requests_total{";
    let tc_dropped = [
        r#"peer="pcrf1""#,
        r#"class="egress:gx_ccr_i""#,
        r#"outcome="dropped""#,
    ];
    let mut text = String::new();
    let pgw1_seen = [r#"peer="pgw1""#, r#"class="all""#, r#"outcome="seen""#];
    agent.wait_until(Duration::from_secs(20), || {
        text = dra.enter(|| scrape("198.18.40.1:9464")).unwrap();
        metric(&text, requests, &tc_dropped) > 0
            && metric(&text, requests, &pgw1_seen) >= offered as u64
    });
    let limiter_seen = metric(&text, requests, &pgw1_seen);
    let packets = |reason: &str| {
        metric(
            &text,
            "dra_fastpath_packets_total{",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    println!(
        "metrics: pcrf1 egress CCR-I dropped {}, pgw1 seen by the limiter {limiter_seen}, \
         requests {}, egress_dropped {}",
        metric(&text, requests, &tc_dropped),
        packets("requests"),
        packets("egress_dropped"),
    );
    if metric(&text, requests, &tc_dropped) == 0 || packets("egress_dropped") == 0 {
        failures.push(format!("no TC drop in the metrics:\n{text}"));
    }
    if limiter_seen < offered as u64 || packets("requests") < offered as u64 {
        failures.push(format!("the limiter's counters are not published:\n{text}"));
    }
    agent.stop();
    drop(peer);
    Run {
        failures,
        offered_per_s,
    }
}

/// `GET /metrics` from the calling thread's namespace.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: dra\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}
