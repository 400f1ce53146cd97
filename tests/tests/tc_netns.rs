//! The TC egress program on real TCP between network namespaces: a client in
//! namespace A (standing for the DRA) sends Diameter requests to a sink in
//! namespace B (standing for a PCRF), with the classifier attached through TCX on
//! the egress of A's veth. Client and sink are the project's simulator
//! (`dra_tools::loadgen::script`): each connection starts with CER/CEA. The egress program
//! charges and counts every request, the CER too (on the destination, the group and
//! the "other" class), so the expectations below add the base-protocol requests the
//! client wrote, counted from its tap. Addresses from 198.18.0.0/15 only; namespaces
//! and pins are removed on drop, also on panic.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use dra::dataplane::{Dataplane, Maps, Plan, kernel::KernelFeatures};
use dra_common::wire::{MsgClass, cc_request_type as rt};
use dra_tests::support::{ConfigToml, LAB_REALM, PCRF_REALM, Pins, poll_until, scaled};
use dra_tests::{
    netns::{Netns, VethPair},
    sim::{
        ScriptedPeer, ScriptedServer, Sim, Tap, assert_policed_and_lossless, base_requests_sent,
        gx_ccrs,
    },
};

struct Lab {
    dra: Netns,
    _server: Netns,
    veth: VethPair,
    pins: Pins,
    sim: Sim,
    sink: ScriptedServer,
    sink_addr: SocketAddr,
    /// Every message the lab's clients wrote.
    tap: Tap,
}

/// Origin-Host/-Realm of the client (the DRA) and of the sink (pcrf1).
const DRA: (&str, &str) = ("dra.lab.example", "lab.example");
const PCRF1: (&str, &str) = ("pcrf1.pcrf.lab.example", "pcrf.lab.example");

/// pcrf1 (group pcrf) with an egress group limit, and a Gx CCR-I egress profile
/// on pcrf1 (high rate, reject: a counting class slot, never policed here).
fn config(group_limit: &str) -> String {
    ConfigToml::new(LAB_REALM, &["198.18.3.1:3868"], "")
        .server("pcrf1", PCRF_REALM, "198.18.3.2:3868", "group = \"pcrf\"")
        .group("pcrf", "")
        .route("*", "group = \"pcrf\"")
        .with(
            "[[message_rate_limit_profile]]\npeer = \"pcrf1\"\ndirection = \"egress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
             rate = 100000\n",
        )
        .with(group_limit)
        .to_string()
}

impl Lab {
    fn new(cfg: &str) -> (Lab, Maps, Plan) {
        let dra = Netns::new("tca").unwrap();
        let server = Netns::new("tcb").unwrap();
        let veth = VethPair::new(&dra, "198.18.3.1/24", &server, "198.18.3.2/24").unwrap();
        let pins = Pins::new("dra-tc-");
        let a = dra
            .enter(|| Dataplane::attach_egress(&veth.a_if, &pins.0))
            .unwrap()
            .expect("attach TC egress");
        assert!(!a.reused);
        assert_eq!(
            a.tcx,
            KernelFeatures::probe_tcx(),
            "TCX exactly where the kernel has it"
        );
        assert!(Dataplane::is_egress_pinned(&veth.a_if, &pins.0));
        let mut maps = Maps::open_pinned(&pins.0).expect("pinned maps");
        let cfg = dra::config::parse(cfg, "tc_netns.toml").unwrap();
        let plan = Plan::new(&cfg).unwrap();
        maps.write_plan(&plan).unwrap();
        let sink_addr: SocketAddr = "198.18.3.2:3868".parse().unwrap();
        let sim = Sim::new();
        let sink = sim.sink(&server, sink_addr, PCRF1, DRA.0);
        (
            Lab {
                dra,
                _server: server,
                veth,
                pins,
                sim,
                sink,
                sink_addr,
                tap: Tap::default(),
            },
            maps,
            plan,
        )
    }

    /// A new connection from the DRA namespace (198.18.3.1) to pcrf1, CER/CEA done.
    fn connect(&self) -> ScriptedPeer {
        let from: IpAddr = "198.18.3.1".parse().unwrap();
        self.sim.connect(
            &self.dra,
            from,
            self.sink_addr,
            DRA,
            PCRF1.0,
            Some(self.tap.clone()),
            None,
        )
    }

    /// Base-protocol requests (CERs) the lab's clients wrote so far.
    fn base_requests(&self) -> u64 {
        base_requests_sent(&self.tap) as u64
    }
}

const CCR_I: MsgClass = MsgClass::gx_ccr(rt::INITIAL);

/// Counting: CCR-I and CCR-U, one write per message and ten per write (multi-message
/// and GSO skbs). What the sink received per class equals the program's counters
/// for the destination, its group and the classes.
/// The TC program's non-zero counters.
fn egress_stats(maps: &Maps) -> Vec<(dra_common::stats::Counter, u64)> {
    maps.stats()
        .unwrap()
        .into_iter()
        .filter(|(c, v)| *v > 0 && c.name().starts_with("egress"))
        .collect()
}

#[test]
fn egress_counts_match_the_sink() {
    let (lab, maps, plan) = Lab::new(&config(""));
    let mk = |every_us: u64, t: u8| gx_ccrs(Duration::from_micros(every_us), t);
    let a = lab.sim.paced(
        &lab.connect(),
        vec![mk(2000, rt::INITIAL), mk(1000, rt::UPDATE)],
        Duration::from_secs(2),
        1,
    );
    let b = lab.sim.paced(
        &lab.connect(),
        vec![mk(500, rt::INITIAL), mk(250, rt::UPDATE)],
        Duration::from_secs(2),
        10,
    );
    let n = a.log.len() + b.log.len();
    assert_eq!(
        lab.sink
            .arrivals
            .wait_for_blocking(n, scaled(Duration::from_secs(20))),
        n,
        "every message arrives"
    );
    let arr = lab.sink.arrivals.snapshot();
    let i = arr.iter().filter(|x| x.class == CCR_I).count() as u64;
    let others = arr.len() as u64 - i;
    let p = plan.egress_peer("pcrf1").unwrap().info;
    let dest = maps.slot_counters(p.dest_slot).unwrap();
    let ci = maps
        .slot_counters(plan.egress_slot_of("pcrf1", CCR_I).unwrap())
        .unwrap();
    let other = maps.slot_counters(p.other_slot).unwrap();
    let stats = egress_stats(&maps);
    // The CER of each connection is a request of class "other" to pcrf1 as well.
    let cers = lab.base_requests();
    println!(
        "sink: {} CCRs ({i} CCR-I, {others} other) + {cers} CERs; dest {dest:?}; \
         CCR-I slot {ci:?}; other {other:?}; stats {stats:?}",
        arr.len()
    );
    assert_eq!(cers, 2, "one CER per connection, no DWR or DPR");
    assert_eq!(
        p.group_slot,
        dra_common::maps::NO_SLOT,
        "no group limit configured"
    );
    assert_eq!(
        dest.seen,
        arr.len() as u64 + cers,
        "requests counted for the destination"
    );
    assert_eq!(ci.seen, i, "CCR-I counted");
    assert_eq!(other.seen, others + cers, "other classes counted");
    assert_eq!(dest.dropped, 0);
    assert!(maps.egress_flows().len() >= 2, "two connections tracked");
    let _ = (&lab.veth, &lab.pins);
}

/// Policing: group limit 200/s burst 20 (drop), offered 1000/s for 3 s. The admitted
/// count at the sink within the offer window stays ≤ rate × seconds + burst (+2 %),
/// and every message is delivered exactly once in the end (TCP sends the dropped
/// bytes again).
#[test]
fn egress_police_limits_the_rate_and_loses_nothing() {
    let (rate, burst) = (200u32, 20u32);
    let limit = format!(
        "[[peer_rate_limit_profile]]\ngroup = \"pcrf\"\ndirection = \"egress\"\n\
         rate = {rate}\nburst = {burst}\naction = \"drop\"\n"
    );
    let (lab, maps, plan) = Lab::new(&config(&limit));
    let sent = lab.sim.paced(
        &lab.connect(),
        vec![gx_ccrs(Duration::from_micros(1000), rt::INITIAL)],
        Duration::from_secs(3),
        1,
    );
    let n = sent.log.len();
    let got = lab
        .sink
        .arrivals
        .wait_for_blocking(n, scaled(Duration::from_secs(120)));
    let arr = lab.sink.arrivals.snapshot();
    let end = sent.last;
    let in_window = arr.iter().filter(|a| a.at <= end).count();
    let secs = (end - sent.first).as_secs_f64();
    let allowed = rate as f64 * secs + burst as f64;
    let last = arr.iter().map(|a| a.at).max().unwrap();
    let p = plan.egress_peer("pcrf1").unwrap().info;
    let g = maps.slot_counters(p.group_slot).unwrap();
    let stats = egress_stats(&maps);
    println!(
        "police: offered {n} in {secs:.2} s; at the sink in the window {in_window} \
         (allowed {allowed:.0}); all {got} after {:.1} s; group slot {g:?}; stats {stats:?}",
        (last - sent.first).as_secs_f64()
    );
    assert_policed_and_lossless(&sent, &arr, got, rate, burst);
    // The CER went through the group bucket before the CCRs (it only leaves the CCRs
    // one token less, so the window bound above holds as it is).
    let cers = lab.base_requests();
    assert_eq!(cers, 1, "one CER, no DWR or DPR");
    assert_eq!(g.admitted, n as u64 + cers, "each request admitted once");
    assert!(g.dropped > 0, "the policer dropped");
}

/// A second attach reuses the pinned link; detach removes it, and the program no
/// longer sees the interface's traffic.
#[test]
fn egress_link_is_reused_and_detach_removes_it() {
    let (lab, maps, _plan) = Lab::new(&config(""));
    let again = lab
        .dra
        .enter(|| Dataplane::attach_egress(&lab.veth.a_if, &lab.pins.0))
        .unwrap()
        .expect("reuse");
    assert!(again.reused, "the pinned attachment is reused");
    let s = || gx_ccrs(Duration::from_micros(1000), rt::UPDATE);
    let a = lab
        .sim
        .paced(&lab.connect(), vec![s()], Duration::from_millis(200), 1);
    assert_eq!(
        lab.sink
            .arrivals
            .wait_for_blocking(a.log.len(), scaled(Duration::from_secs(10))),
        a.log.len()
    );
    let counted = maps
        .stat(dra_common::stats::Counter::EgressRequests)
        .unwrap();
    // The CCR-Us and the connection's CER.
    let cers = lab.base_requests();
    assert_eq!(cers, 1, "one CER, no DWR or DPR");
    assert_eq!(counted, a.log.len() as u64 + cers);

    assert_eq!(
        egress_programs(&lab),
        vec!["dra_tc_egress".to_string()],
        "one egress program"
    );

    // In the interface's namespace, as the agent detaches (a netlink filter is removed
    // through the interface; a TCX link through its pin alone).
    let removed = lab
        .dra
        .enter(|| Dataplane::detach(Some(&lab.veth.a_if), &lab.pins.0))
        .unwrap()
        .unwrap();
    let pin = if again.tcx {
        "link_egress_"
    } else {
        "prog_egress_"
    };
    assert!(
        removed
            .iter()
            .any(|p| p.ends_with(format!("{pin}{}", lab.veth.a_if))),
        "{removed:?}"
    );
    assert!(!Dataplane::is_egress_pinned(&lab.veth.a_if, &lab.pins.0));
    // The kernel releases an unpinned link after an RCU grace period: wait for the
    // egress chain to be empty before sending again.
    let released = poll_until(Duration::from_secs(5), || egress_programs(&lab).is_empty());
    assert!(released, "egress program still attached after detach");
    // A new connection: its CER is not counted either.
    let b = lab
        .sim
        .paced(&lab.connect(), vec![s()], Duration::from_millis(200), 1);
    assert_eq!(
        lab.base_requests(),
        2,
        "the second connection's CER went out"
    );
    let total = a.log.len() + b.log.len();
    assert_eq!(
        lab.sink
            .arrivals
            .wait_for_blocking(total, scaled(Duration::from_secs(10))),
        total
    );
    assert_eq!(
        maps.stat(dra_common::stats::Counter::EgressRequests)
            .unwrap(),
        counted,
        "detached: nothing counted any more"
    );
}

/// Names of the programs on the egress of the lab's DRA-side veth: its TCX chain, or
/// on a kernel without TCX the BPF filters of its clsact qdisc (as `tc` lists them:
/// "... bpf chain 0 handle 0xd7a dra_tc_egress direct-action ...").
fn egress_programs(lab: &Lab) -> Vec<String> {
    if !KernelFeatures::probe_tcx() {
        let out = netlab::sh(&[
            "tc",
            "-n",
            &lab.dra.name,
            "filter",
            "show",
            "dev",
            &lab.veth.a_if,
            "egress",
        ])
        .unwrap();
        return out
            .lines()
            .filter(|l| l.contains(" bpf "))
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let h = w.iter().position(|x| *x == "handle")?;
                w.get(h + 2).map(|s| s.to_string())
            })
            .collect();
    }
    let (_, progs) = lab
        .dra
        .enter(|| {
            aya::programs::SchedClassifier::query_tcx(
                &lab.veth.a_if,
                aya::programs::TcAttachType::Egress,
            )
        })
        .unwrap()
        .expect("query TCX");
    progs
        .iter()
        .map(|p| p.name_as_str().unwrap_or("?").to_string())
        .collect()
}
