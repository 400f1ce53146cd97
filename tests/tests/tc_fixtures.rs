//! Fixture table for the TC egress classifier, run in the kernel through
//! BPF_PROG_TEST_RUN with an skb context. Each row: packets the agent sends (DRA →
//! servers), expected verdicts, expected counter deltas. Egress flow state and
//! buckets are reset before each row; packets within a row share them.

use aya::{Ebpf, programs::SchedClassifier};
use dra::dataplane::{self, Maps, Plan};
use dra_common::{
    maps::NO_SLOT,
    stats::Counter,
    wire::{MsgClass, app},
};
use dra_tests::pkt::{self, Frame, TCP_ACK, TCP_PSH, TCP_SYN};
use dra_tests::support::{
    Hook, LAB_REALM, PCRF_REALM, assert_sweep, counter_mismatches, lab_dra, load_object, run_tc,
    slot_delta,
};

/// TC_ACT_UNSPEC (TCX "next"): the packet goes on.
const PASS: u32 = u32::MAX;
/// TC_ACT_SHOT.
const SHOT: u32 = 2;

/// pcrf1, pcrf2 in group pcrf: egress group limit 1/s burst 3, drop (shared).
/// pcrf1: Gx CCR-I egress profile 1000/s (reject: counted, never policed here).
/// ocs1 (IPv4 + IPv6) in group ocs: Gy CCR-I 1/s burst 2, drop.
/// ocs2 in group ocs: its own egress limit 1/s burst 1, reject (not policed here:
/// over-limit requests pass and count as `marked`).
fn config() -> String {
    let ocs = "ocs.lab.example";
    lab_dra("diameter_ports = [3868]")
        .client("pgw1", LAB_REALM, &["198.18.1.2"], "")
        .server("pcrf1", PCRF_REALM, "198.18.2.2:3868", "group = \"pcrf\"")
        .server("pcrf2", PCRF_REALM, "198.18.2.3:3868", "group = \"pcrf\"")
        .server(
            "ocs1",
            ocs,
            "198.18.2.4:3868",
            "addresses = [\"198.18.2.4\", \"2001:db8:2::4\"]\ngroup = \"ocs\"",
        )
        .server("ocs2", ocs, "198.18.2.5:3868", "group = \"ocs\"")
        .with(
            "[[peer_rate_limit_profile]]\npeer = \"ocs2\"\ndirection = \"egress\"\n\
             rate = 1\nburst = 1\naction = \"reject\"\n",
        )
        .group("pcrf", "")
        .group("ocs", "")
        .route(PCRF_REALM, "group = \"pcrf\"")
        .route(ocs, "group = \"ocs\"")
        .with(LIMITS)
        .to_string()
}

const LIMITS: &str = r#"
[[peer_rate_limit_profile]]
group = "pcrf"
direction = "egress"
rate = 1
burst = 3
action = "drop"

[[message_rate_limit_profile]]
peer = "pcrf1"
direction = "egress"
application = "gx"
command = "ccr"
request_type = "initial"
rate = 1000

[[message_rate_limit_profile]]
group = "ocs"
direction = "egress"
application = "gy"
command = "ccr"
request_type = "initial"
rate = 1
burst = 2
action = "drop"
"#;

struct Harness {
    ebpf: Ebpf,
    maps: Maps,
    plan: Plan,
}

impl Harness {
    fn new() -> Harness {
        let (ebpf, maps, plan) = load_object(&config(), "tc_fixtures.toml", Hook::Tc);
        Harness { ebpf, maps, plan }
    }

    fn run(&mut self, input: &[u8]) -> u32 {
        run_tc(&self.ebpf, input)
    }

    /// Slot of a destination: "dest", "group", "other" or a class.
    fn slot(&self, peer: &str, which: Which) -> u32 {
        let p = self.plan.egress_peer(peer).unwrap();
        match which {
            Which::Dest => p.info.dest_slot,
            Which::Group => p.info.group_slot,
            Which::Class(c) => self
                .plan
                .egress_slot_of(peer, c)
                .unwrap_or(p.info.other_slot),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Which {
    Dest,
    Group,
    Class(MsgClass),
}

const GX_I: Which = Which::Class(MsgClass::gx_ccr(1));
const GY_I: Which = Which::Class(MsgClass::gy_ccr(1));
const OTHER: Which = Which::Class(MsgClass::new(0xdead, 0xdead, 0));

const DRA: &str = "198.18.2.1";
const PCRF1: &str = "198.18.2.2";
const PCRF2: &str = "198.18.2.3";
const OCS1: &str = "198.18.2.4";
const ISN: u32 = 7000;

/// (peer, slot, seen, admitted, marked, dropped)
type SlotDelta = (&'static str, Which, u64, u64, u64, u64);

struct Row {
    name: &'static str,
    steps: Vec<(Vec<u8>, u32)>,
    counters: Vec<(Counter, u64)>,
    slots: Vec<SlotDelta>,
}

fn syn(f: &Frame) -> Vec<u8> {
    f.tcp(41000, 3868, ISN, TCP_SYN, &[], &[])
}

fn seg(f: &Frame, off: u32, payload: &[u8]) -> Vec<u8> {
    f.tcp(41000, 3868, ISN + 1 + off, TCP_ACK | TCP_PSH, &[], payload)
}

fn rows() -> Vec<Row> {
    let p1 = Frame::v4(DRA, PCRF1);
    let p2 = Frame::v4(DRA, PCRF2);
    let o1 = Frame::v4(DRA, OCS1);
    let i0 = pkt::ccr(app::GX, 1, 0);
    let l = i0.len() as u32;
    let mut v = Vec::new();
    let gy = pkt::ccr(app::GY, 1, 0);

    v.push(Row {
        name: "not a Diameter port: passed, not counted",
        steps: vec![(p1.tcp(41000, 80, 1, TCP_ACK, &[], &i0), PASS)],
        counters: vec![(Counter::EgressRequests, 0)],
        slots: vec![("pcrf1", Which::Dest, 0, 0, 0, 0)],
    });
    v.push(Row {
        name: "destination that is no peer: passed, not counted",
        steps: vec![(
            Frame::v4(DRA, "198.18.9.9").tcp(41000, 3868, 1, TCP_ACK, &[], &i0),
            PASS,
        )],
        counters: vec![(Counter::EgressRequests, 0), (Counter::EgressUnframed, 0)],
        slots: vec![],
    });
    v.push(Row {
        name: "Gx CCR-I to pcrf1: destination, group and class counted",
        steps: vec![(syn(&p1), PASS), (seg(&p1, 0, &i0), PASS)],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![
            ("pcrf1", Which::Dest, 1, 1, 0, 0),
            ("pcrf1", Which::Group, 1, 1, 0, 0),
            ("pcrf1", GX_I, 1, 1, 0, 0),
        ],
    });
    v.push(Row {
        name: "Gx CCR-U: counted on the destination's other slot",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &pkt::ccr(app::GX, 2, 0)), PASS),
        ],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![("pcrf1", OTHER, 1, 1, 0, 0), ("pcrf1", GX_I, 0, 0, 0, 0)],
    });
    v.push(Row {
        name: "answers are not counted",
        steps: vec![(syn(&p1), PASS), (seg(&p1, 0, &pkt::cca(app::GX, 0)), PASS)],
        counters: vec![(Counter::EgressAnswers, 1), (Counter::EgressRequests, 0)],
        slots: vec![("pcrf1", Which::Dest, 0, 0, 0, 0)],
    });
    v.push(Row {
        name: "no SYN seen: resynchronises on a segment starting with a header",
        steps: vec![(seg(&p1, 0, &i0), PASS)],
        counters: vec![(Counter::EgressResync, 1), (Counter::EgressRequests, 1)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0)],
    });
    v.push(Row {
        name: "no state and no header at the segment start: passed uncounted",
        steps: vec![(seg(&p1, 0, &i0[8..]), PASS)],
        counters: vec![(Counter::EgressUnframed, 1), (Counter::EgressRequests, 0)],
        slots: vec![],
    });
    v.push(Row {
        name: "retransmission is not counted again",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &i0), PASS),
            (seg(&p1, 0, &i0), PASS),
        ],
        counters: vec![(Counter::EgressRetransmit, 1), (Counter::EgressRequests, 1)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0)],
    });
    let three_gx: Vec<u8> = [
        pkt::ccr(app::GX, 1, 0),
        pkt::ccr(app::GX, 2, 1),
        pkt::cca(app::GX, 2),
    ]
    .concat();
    v.push(Row {
        name: "CCR-I + CCR-U + CCA in one skb",
        steps: vec![(syn(&p1), PASS), (seg(&p1, 0, &three_gx), PASS)],
        counters: vec![(Counter::EgressRequests, 2), (Counter::EgressAnswers, 1)],
        slots: vec![
            ("pcrf1", GX_I, 1, 1, 0, 0),
            ("pcrf1", OTHER, 1, 1, 0, 0),
            ("pcrf1", Which::Dest, 2, 2, 0, 0),
        ],
    });
    // Twelve CCR-U (more than ingress's per-pass bound) in one skb, to the
    // unlimited-class other slot of pcrf2... via pcrf1's dest (group limit 3 would
    // drop them): use ocs1, whose only limit is on Gy CCR-I.
    let twelve: Vec<u8> = (0..12).flat_map(|k| pkt::ccr(app::GY, 2, k)).collect();
    v.push(Row {
        name: "twelve requests in one skb are all counted",
        steps: vec![(syn(&o1), PASS), (seg(&o1, 0, &twelve), PASS)],
        counters: vec![(Counter::EgressRequests, 12)],
        slots: vec![
            ("ocs1", OTHER, 12, 12, 0, 0),
            ("ocs1", Which::Dest, 12, 12, 0, 0),
        ],
    });
    // A message split across skbs after 60 bytes: CC-Request-Type is in the second.
    v.push(Row {
        name: "CCR-I split across two skbs: classified and counted once, in the second",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &i0[..60]), PASS),
            (seg(&p1, 60, &i0[60..]), PASS),
        ],
        counters: vec![(Counter::EgressRequests, 1), (Counter::EgressResync, 0)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0), ("pcrf1", OTHER, 0, 0, 0, 0)],
    });
    v.push(Row {
        name: "header cut after 5 bytes, next message behind it",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &i0[..5]), PASS),
            (
                seg(&p1, 5, &[&i0[5..], &pkt::ccr(app::GX, 2, 1)[..]].concat()),
                PASS,
            ),
        ],
        counters: vec![(Counter::EgressRequests, 2)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0), ("pcrf1", OTHER, 1, 1, 0, 0)],
    });
    // Policing: the pcrf group bucket (burst 3, drop) is shared by pcrf1 and pcrf2.
    v.push(Row {
        name: "group limit: fourth request to the group is shot, on either member",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &i0), PASS),
            (seg(&p1, l, &i0), PASS),
            (syn(&p2), PASS),
            (seg(&p2, 0, &i0), PASS),
            (seg(&p2, l, &i0), SHOT),
            (seg(&p1, 2 * l, &i0), SHOT),
        ],
        counters: vec![(Counter::EgressDropped, 2), (Counter::EgressRequests, 3)],
        slots: vec![
            ("pcrf1", Which::Group, 3, 3, 0, 2),
            ("pcrf1", Which::Dest, 2, 2, 0, 1),
            ("pcrf2", Which::Dest, 1, 1, 0, 1),
        ],
    });
    let five: Vec<u8> = (0..5).flat_map(|k| pkt::ccr(app::GX, 2, k)).collect();
    v.push(Row {
        name: "five requests in one skb over burst 3: shot; \
               the three that fit are committed, not charged again",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &five), SHOT),
            (seg(&p1, 0, &five), SHOT),
        ],
        counters: vec![(Counter::EgressDropped, 2), (Counter::EgressRequests, 3)],
        slots: vec![
            ("pcrf1", Which::Group, 3, 3, 0, 2),
            ("pcrf1", OTHER, 3, 3, 0, 2),
        ],
    });
    v.push(Row {
        name: "answers pass a group that is over its limit",
        steps: vec![
            (syn(&p1), PASS),
            (seg(&p1, 0, &[&i0[..], &i0[..], &i0[..]].concat()), PASS),
            (seg(&p1, 3 * l, &pkt::cca(app::GX, 1)), PASS),
        ],
        counters: vec![(Counter::EgressDropped, 0), (Counter::EgressAnswers, 1)],
        slots: vec![("pcrf1", Which::Group, 3, 3, 0, 0)],
    });
    v.push(Row {
        name: "class limit (Gy CCR-I burst 2, drop) to ocs1; other classes pass",
        steps: vec![
            (syn(&o1), PASS),
            (seg(&o1, 0, &[&gy[..], &gy[..]].concat()), PASS),
            (seg(&o1, 2 * gy.len() as u32, &gy), SHOT),
            (
                seg(&o1, 2 * gy.len() as u32, &pkt::ccr(app::GY, 2, 0)),
                PASS,
            ),
        ],
        counters: vec![(Counter::EgressDropped, 1), (Counter::EgressRequests, 3)],
        slots: vec![("ocs1", GY_I, 2, 2, 0, 1), ("ocs1", OTHER, 1, 1, 0, 0)],
    });
    v.push(Row {
        name: "a server's connection to the agent (source port 3868): counted",
        steps: vec![
            (p1.tcp(3868, 45000, ISN, TCP_SYN | TCP_ACK, &[], &[]), PASS),
            (
                p1.tcp(3868, 45000, ISN + 1, TCP_ACK | TCP_PSH, &[], &i0),
                PASS,
            ),
        ],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0)],
    });
    let o2 = Frame::v4(DRA, "198.18.2.5");
    let gy_u = pkt::ccr(app::GY, 2, 0);
    v.push(Row {
        name: "reject limit: over-limit requests pass, counted marked",
        steps: vec![
            (syn(&o2), PASS),
            (
                seg(&o2, 0, &[&gy_u[..], &gy_u[..], &gy_u[..]].concat()),
                PASS,
            ),
        ],
        counters: vec![(Counter::EgressDropped, 0), (Counter::EgressRequests, 3)],
        slots: vec![
            ("ocs2", Which::Dest, 3, 1, 2, 0),
            ("ocs2", OTHER, 3, 1, 2, 0),
        ],
    });
    let o6 = Frame::v4("2001:db8:2::1", "2001:db8:2::4");
    v.push(Row {
        name: "IPv6 destination",
        steps: vec![(syn(&o6), PASS), (seg(&o6, 0, &gy), PASS)],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![("ocs1", GY_I, 1, 1, 0, 0)],
    });
    let mut o6x = o6.clone();
    o6x.ext_headers = vec![0, 60];
    v.push(Row {
        name: "IPv6 with hop-by-hop and destination options",
        steps: vec![(syn(&o6x), PASS), (seg(&o6x, 0, &gy), PASS)],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![("ocs1", GY_I, 1, 1, 0, 0)],
    });
    let mut pv = p1.clone();
    pv.vlans = vec![100];
    v.push(Row {
        name: "802.1Q tag in the data",
        steps: vec![(syn(&pv), PASS), (seg(&pv, 0, &i0), PASS)],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0)],
    });
    let mut pq = p1.clone();
    pq.vlans = vec![200, 100];
    v.push(Row {
        name: "QinQ",
        steps: vec![(syn(&pq), PASS), (seg(&pq, 0, &i0), PASS)],
        counters: vec![(Counter::EgressRequests, 1)],
        slots: vec![("pcrf1", GX_I, 1, 1, 0, 0)],
    });
    v
}

#[test]
fn tc_classifier_passes_the_verifier() {
    let mut ebpf = dataplane::open().expect("open embedded object");
    dataplane::load_tc(&mut ebpf).expect("verifier accepts dra_tc_egress");
    let prog: &SchedClassifier = ebpf
        .program(dataplane::TC_PROGRAM)
        .unwrap()
        .try_into()
        .unwrap();
    let info = prog.info().expect("program info");
    let n = info
        .verified_instruction_count()
        .expect("verified instruction count");
    println!(
        "{}: verifier processed {n} instructions; {:?} instructions after translation",
        dataplane::TC_PROGRAM,
        info.size_translated().map(|b| b / 8)
    );
    assert!(n > 0);
}

#[test]
fn tc_fixture_table() {
    let mut h = Harness::new();
    assert_ne!(h.slot("pcrf1", Which::Group), NO_SLOT);
    assert_eq!(
        h.slot("pcrf1", Which::Group),
        h.slot("pcrf2", Which::Group),
        "group slot shared"
    );
    let rows = rows();
    let mut failures = Vec::new();
    for r in &rows {
        h.maps.reset_buckets().unwrap();
        h.maps.clear_egress_flows();
        let before = h.maps.stats().unwrap();
        let slot_before: Vec<_> = r
            .slots
            .iter()
            .map(|(p, w, ..)| h.maps.slot_counters(h.slot(p, *w)).unwrap())
            .collect();
        for (i, (p, want)) in r.steps.iter().enumerate() {
            let got = h.run(p);
            if got != *want {
                failures.push(format!(
                    "{}: step {i}: verdict {got:#x}, want {want:#x}",
                    r.name
                ));
            }
        }
        let after = h.maps.stats().unwrap();
        let delta = |c: Counter| after[c as usize].1 - before[c as usize].1;
        if delta(Counter::EgressPackets) != r.steps.len() as u64 {
            failures.push(format!(
                "{}: egress packets {}, want {}",
                r.name,
                delta(Counter::EgressPackets),
                r.steps.len()
            ));
        }
        for e in counter_mismatches(&before, &after, &r.counters) {
            failures.push(format!("{}: {e}", r.name));
        }
        for ((p, w, seen, adm, mk, dr), b) in r.slots.iter().zip(slot_before) {
            let got = slot_delta(&b, &h.maps.slot_counters(h.slot(p, *w)).unwrap());
            if got != (*seen, *adm, *mk, *dr) {
                failures.push(format!(
                    "{}: slot {p}/{w:?} (seen, admitted, marked, dropped) delta {got:?}, want {:?}",
                    r.name,
                    (seen, adm, mk, dr)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

/// Egress `drop` (group ocs: Gy CCR-I burst 2): the third Gy CCR-I the agent sends is cut
/// at every byte offset into two skbs. The skb that completes its class is shot — the
/// first when the cut comes after its CC-Request-Type, else the second — and the resend
/// of that skb is judged again (shot again: still over), never counted twice. Short
/// names and 3GPP names (CC-Request-Type beyond 192 bytes).
#[test]
fn tc_straddle_sweep() {
    let mut h = Harness::new();
    let o1 = Frame::v4(DRA, OCS1);
    let mut failures = Vec::new();
    let mut cases = 0;
    for (label, build) in pkt::CCR_BUILDS {
        let (g0, g1, g2) = (
            build(app::GY, 1, 0),
            build(app::GY, 1, 1),
            build(app::GY, 1, 2),
        );
        let pre = [g0, g1].concat();
        let p = pre.len();
        let decided = pkt::avp_offset(&g2, dra_common::wire::avp::CC_REQUEST_TYPE).unwrap() + 12;
        for k in 1..g2.len() {
            cases += 1;
            h.maps.reset_buckets().unwrap();
            h.maps.clear_egress_flows();
            let slot = h.slot("ocs1", GY_I);
            let before = h.maps.slot_counters(slot).unwrap();
            let a = seg(&o1, 0, &[&pre[..], &g2[..k]].concat());
            let b = seg(&o1, (p + k) as u32, &g2[k..]);
            let mut bad = Vec::new();
            assert_eq!(h.run(&syn(&o1)), PASS);
            let va = h.run(&a);
            let (want_a, shot) = if k >= decided { (SHOT, &a) } else { (PASS, &b) };
            if va != want_a {
                bad.push(format!("first skb: {va:#x}"));
            }
            if k < decided {
                let vb = h.run(&b);
                if vb != SHOT {
                    bad.push(format!("second skb: {vb:#x}"));
                }
            }
            let vr = h.run(shot);
            if vr != SHOT {
                bad.push(format!("resend: {vr:#x}"));
            }
            let c = h.maps.slot_counters(slot).unwrap();
            let d = (
                c.seen - before.seen,
                c.admitted - before.admitted,
                c.marked - before.marked,
                c.dropped - before.dropped,
            );
            if d != (2, 2, 0, 2) {
                bad.push(format!("Gy CCR-I {d:?}"));
            }
            if !bad.is_empty() {
                failures.push(format!("{label}, cut at {k}: {}", bad.join("; ")));
            }
        }
    }
    assert_sweep(cases, 250, &failures);
}
