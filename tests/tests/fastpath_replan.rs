//! A flow's requests are counted on the slot of the plan in force, also after a new plan
//! moved their class to another slot while the flow kept its state (BPF_PROG_TEST_RUN).
//! Guards any per-flow caching of class slots (one is measured in docs/fast-path.md,
//! "Cost"): such a cache must refresh when the plan changes, and this test fails for a
//! cache that does not.

use dra::dataplane::Maps;
use dra_common::wire::{MsgClass, app, cc_request_type as rt};
use dra_tests::{
    pkt::{Frame, TCP_ACK, TCP_PSH, ccr},
    support::{Hook, lab_config, load_object, run_xdp},
};

const XDP_PASS: u32 = 2;

fn limit(request_type: &str) -> String {
    format!(
        "[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
         application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"{request_type}\"\n\
         rate = 100000\n"
    )
}

#[test]
fn a_flow_counts_on_the_slot_of_the_plan_in_force() {
    // Plan A: CCR-I has a slot. Plan B: a CCR-U limit first, so CCR-I's slot moves.
    let a = lab_config().with(&limit("initial")).to_string();
    let b = lab_config()
        .with(&limit("update"))
        .with(&limit("initial"))
        .to_string();
    let (ebpf, mut maps, plan_a) = load_object(&a, "a.toml", Hook::Xdp);
    let plan_b = dra::dataplane::Plan::new(&dra::config::parse(&b, "b.toml").unwrap()).unwrap();
    let class = MsgClass::gx_ccr(rt::INITIAL);
    let (slot_a, slot_b) = (
        plan_a.slot_of("pgw1", class).unwrap(),
        plan_b.slot_of("pgw1", class).unwrap(),
    );
    assert_ne!(slot_a, slot_b, "plan B must move CCR-I to another slot");

    let f = Frame::v4("198.18.1.2", "198.18.1.1");
    let mut seq = 1000;
    let mut send = |n: u32| {
        let m = ccr(app::GX, rt::INITIAL as u32, n);
        let (v, _) = run_xdp(&ebpf, &f.tcp(40_000, 3868, seq, TCP_ACK | TCP_PSH, &[], &m));
        assert_eq!(v, XDP_PASS);
        seq += m.len() as u32;
    };
    // Two CCR-Is on the flow: what slot A and slot B admitted meanwhile.
    let mut n = 0;
    let mut two_ccr_i = |maps: &Maps| -> [u64; 2] {
        let before = [slot_a, slot_b].map(|s| maps_admitted(maps, s));
        for _ in 0..2 {
            n += 1;
            send(n);
        }
        let after = [slot_a, slot_b].map(|s| maps_admitted(maps, s));
        [after[0] - before[0], after[1] - before[1]]
    };
    // Plan A (the second request from a flow that has classified one already).
    assert_eq!(two_ccr_i(&maps)[0], 2, "plan A: both on CCR-I's slot");
    // Plan B written while the flow keeps its state: the flow's next CCR-Is count on
    // plan B's CCR-I slot, nothing on the old one.
    maps.write_plan(&plan_b).unwrap();
    assert_eq!(two_ccr_i(&maps), [0, 2], "plan B: on CCR-I's new slot only");
    assert_eq!(maps.tcp_flow_count(), 1, "one flow throughout");
}

fn maps_admitted(maps: &Maps, slot: u32) -> u64 {
    maps.slot_counters(slot).unwrap().admitted
}
