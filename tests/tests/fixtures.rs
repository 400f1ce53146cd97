//! Fixture table for the XDP programs, run in the kernel through BPF_PROG_TEST_RUN
//! (`aya::programs::TestRun`). Each row: packets in, expected verdicts, expected
//! output bytes where the packet is modified, expected counter deltas, expected
//! out-of-band marks. Flow state and buckets are reset before each row; packets within
//! a row share them. Then sweeps: an over-limit request cut at every byte offset, over
//! TCP (reject and drop) and SCTP (DATA and I-DATA fragments), gets the verdict of the
//! uncut stream.

use aya::Ebpf;
use dra::dataplane::{Maps, Plan};
use dra::oob::{self, OobInbox};
use dra_common::{
    maps::{ClassCounters, UnknownPeerPolicy},
    stats::Counter,
    wire::{MsgClass, app, cc_request_type as rt},
};
use dra_tests::pkt::{self, Frame, TCP_ACK, TCP_PSH, TCP_RST, TCP_SYN};
use dra_tests::support::{
    Hook, LAB_REALM, PCRF_REALM, assert_sweep, counter_mismatches, lab_dra, load_object, oob_inbox,
    run_xdp, slot_delta,
};

const PASS: u32 = 2;
const DROP: u32 = 1;

/// pgw1: CCR-I 1/s burst 2 (reject), CCR-T 1/s burst 2 (drop), Gy CCR-I 1/s burst 2
/// (reject), overall 1000/s; connection guard 1/s burst 2.
/// pgw2: overall 1/s burst 3, action drop.
fn config() -> String {
    lab_dra("diameter_ports = [3868]\nunknown_peer = \"pass\"")
        .client(
            "pgw1",
            LAB_REALM,
            &["198.18.1.2", "2001:db8:1::2"],
            "connection_rate = 1\nconnection_burst = 2",
        )
        .client("pgw2", LAB_REALM, &["198.18.1.3"], "")
        .server("pcrf1", PCRF_REALM, "198.18.2.2:3868", "")
        .route("*", "peer = \"pcrf1\"")
        .with(LIMITS)
        .to_string()
}

const LIMITS: &str = r#"
[[peer_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
rate = 1000
burst = 1000

[[peer_rate_limit_profile]]
peer = "pgw2"
direction = "ingress"
rate = 1
burst = 3
action = "drop"

[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = "gx"
command = "ccr"
request_type = "initial"
rate = 1
burst = 2

[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = "gx"
command = "ccr"
request_type = "termination"
rate = 1
burst = 2
action = "drop"

[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = "gy"
command = "ccr"
request_type = "initial"
rate = 1
burst = 2
"#;

struct Harness {
    ebpf: Ebpf,
    maps: Maps,
    plan: Plan,
    /// The agent's reader of the out-of-band marks, on this object's ring.
    oob: OobInbox,
}

impl Harness {
    fn new() -> Harness {
        let (mut ebpf, maps, plan) = load_object(&config(), "fixtures.toml", Hook::Xdp);
        let oob = oob_inbox(&mut ebpf);
        Harness {
            ebpf,
            maps,
            plan,
            oob,
        }
    }

    /// Fresh flows and full buckets.
    fn reset(&mut self) {
        self.maps.reset_buckets().unwrap();
        self.maps.clear_flows();
    }

    /// The out-of-band marks the program wrote since the last call, for `frame`'s
    /// flow from port 40000 to 3868 over `proto` (TCP or SCTP), as (Hop-by-Hop,
    /// End-to-End), checked against `want` through the agent's own inbox.
    fn oob_marks(&self, frame: &Frame, proto: u8, want: &[(u32, u32)]) -> Result<(), String> {
        let before = self.oob.stats().received;
        self.oob.drain();
        let got = self.oob.stats().received - before;
        let key = oob::flow_key_of(proto, (frame.src, 40000).into(), (frame.dst, 3868).into());
        let mut missing = Vec::new();
        for (h, e) in want {
            if !self.oob.take(&key, *h, *e) {
                missing.push((*h, *e));
            }
        }
        for p in [oob::IPPROTO_TCP, oob::IPPROTO_SCTP] {
            self.oob.forget(&oob::flow_key_of(
                p,
                (frame.src, 40000).into(),
                (frame.dst, 3868).into(),
            ));
        }
        if got != want.len() as u64 || !missing.is_empty() {
            return Err(format!(
                "{got} out-of-band marks, want {want:x?} (missing {missing:x?})"
            ));
        }
        Ok(())
    }

    fn run(&mut self, input: &[u8]) -> (u32, Vec<u8>) {
        run_xdp(&self.ebpf, input)
    }

    fn slot(&self, peer: &str, class: Option<MsgClass>) -> u32 {
        let p = self.plan.peer(peer).unwrap();
        match class {
            None => p.info.overall_slot,
            Some(c) => self.plan.slot_of(peer, c).unwrap_or(p.info.other_slot),
        }
    }

    fn counters(&self) -> Vec<(Counter, u64)> {
        self.maps.stats().unwrap()
    }
}

struct Step {
    pkt: Vec<u8>,
    verdict: u32,
    out: Option<Vec<u8>>,
    /// Every bucket is refilled before this step (the time a sender's retransmission
    /// timeout leaves the limiter).
    refill: bool,
}

fn step(pkt: Vec<u8>, verdict: u32) -> Step {
    Step {
        pkt,
        verdict,
        out: None,
        refill: false,
    }
}

/// `step`, after every bucket was refilled.
fn after_refill(pkt: Vec<u8>, verdict: u32) -> Step {
    Step {
        refill: true,
        ..step(pkt, verdict)
    }
}

/// (peer, class or None for overall, seen, admitted, marked, dropped)
type SlotDelta = (&'static str, Option<MsgClass>, u64, u64, u64, u64);

struct Row {
    name: &'static str,
    steps: Vec<Step>,
    counters: Vec<(Counter, u64)>,
    slots: Vec<SlotDelta>,
    unknown_drop: bool,
    /// Out-of-band marks expected, as (Hop-by-Hop, End-to-End), on the flow of
    /// transport `oob_proto`.
    oob: Vec<(u32, u32)>,
    oob_proto: u8,
}

fn row(
    name: &'static str,
    steps: Vec<Step>,
    counters: Vec<(Counter, u64)>,
    slots: Vec<SlotDelta>,
) -> Row {
    Row {
        name,
        steps,
        counters,
        slots,
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    }
}

const CCR_I: Option<MsgClass> = Some(MsgClass::gx_ccr(rt::INITIAL));
const CCR_T: Option<MsgClass> = Some(MsgClass::gx_ccr(rt::TERMINATION));
const GY_I: Option<MsgClass> = Some(MsgClass::gy_ccr(rt::INITIAL));
/// Classes without a slot of their own count on the peer's "other" slot.
const OTHER: Option<MsgClass> = Some(MsgClass::new(0xdead, 0xdead, 0));

const PGW1: &str = "198.18.1.2";
const PGW2: &str = "198.18.1.3";
const DRA: &str = "198.18.1.1";
const STRANGER: &str = "198.18.9.9";
const ISN: u32 = 1000;

fn f1() -> Frame {
    Frame::v4(PGW1, DRA)
}

fn syn(f: &Frame) -> Vec<u8> {
    f.tcp(40000, 3868, ISN, TCP_SYN, &[], &[])
}

/// Data segment at `off` bytes after the SYN.
fn seg(f: &Frame, off: u32, payload: &[u8]) -> Vec<u8> {
    f.tcp(40000, 3868, ISN + 1 + off, TCP_ACK | TCP_PSH, &[], payload)
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn rows() -> Vec<Row> {
    let f = f1();
    let i0 = pkt::ccr(app::GX, 1, 0);
    let i1 = pkt::ccr(app::GX, 1, 1);
    let i2 = pkt::ccr(app::GX, 1, 2);
    let u0 = pkt::ccr(app::GX, 2, 0);
    let t0 = pkt::ccr(app::GX, 3, 0);
    let l = i0.len() as u32;
    let mut v = Vec::new();

    // --- not Diameter ---
    let mut arp = vec![0u8; 42];
    arp[12] = 0x08;
    arp[13] = 0x06;
    v.push(row(
        "ARP",
        vec![step(arp, PASS)],
        vec![(Counter::NotDiameter, 1)],
        vec![],
    ));
    let mut udp = f.wrap(17, &[0x9c, 0x40, 0x0f, 0x1c, 0, 8, 0, 0]);
    udp.truncate(udp.len());
    v.push(row(
        "UDP to 3868",
        vec![step(udp, PASS)],
        vec![(Counter::NotDiameter, 1)],
        vec![],
    ));
    v.push(row(
        "TCP to port 80",
        vec![step(f.tcp(40000, 80, 1, TCP_ACK, &[], &i0), PASS)],
        vec![(Counter::NotDiameter, 1)],
        vec![],
    ));

    // --- handshake and connection guard ---
    v.push(row(
        "SYN",
        vec![step(syn(&f), PASS)],
        vec![(Counter::NoPayload, 1), (Counter::SynDropped, 0)],
        vec![],
    ));
    v.push(row(
        "SYN over the connection guard (burst 2)",
        vec![
            step(syn(&f), PASS),
            step(syn(&f), PASS),
            step(syn(&f), DROP),
        ],
        vec![(Counter::SynDropped, 1)],
        vec![],
    ));

    // --- classes ---
    v.push(row(
        "Gx CCR-I",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &i0), PASS)],
        vec![(Counter::Resync, 0)],
        vec![("pgw1", CCR_I, 1, 1, 0, 0), ("pgw1", None, 1, 1, 0, 0)],
    ));
    v.push(row(
        "Gx CCR-U (no profile: other slot)",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &u0), PASS)],
        vec![],
        vec![("pgw1", OTHER, 1, 1, 0, 0), ("pgw1", CCR_I, 0, 0, 0, 0)],
    ));
    v.push(row(
        "Gx CCR-T",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &t0), PASS)],
        vec![],
        vec![("pgw1", CCR_T, 1, 1, 0, 0)],
    ));
    v.push(row(
        "Gx CCR-E",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &pkt::ccr(app::GX, 4, 0)), PASS),
        ],
        vec![],
        vec![("pgw1", OTHER, 1, 1, 0, 0)],
    ));
    v.push(row(
        "Gy CCR-I",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &pkt::ccr(app::GY, 1, 0)), PASS),
        ],
        vec![],
        vec![("pgw1", GY_I, 1, 1, 0, 0), ("pgw1", CCR_I, 0, 0, 0, 0)],
    ));
    v.push(row(
        "answer (CCA) is never limited",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &pkt::cca(app::GX, 0)), PASS),
        ],
        vec![(Counter::Answers, 1)],
        vec![("pgw1", None, 0, 0, 0, 0)],
    ));
    v.push(row(
        "DWR (base request) counts on other",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &pkt::dwr()), PASS)],
        vec![],
        vec![("pgw1", OTHER, 1, 1, 0, 0)],
    ));
    v.push(row(
        "CC-Request-Type beyond the scan bound: not CCR-I",
        vec![
            step(syn(&f), PASS),
            step(
                seg(
                    &f,
                    0,
                    &pkt::ccr_deep(app::GX, 1, dra_common::wire::MAX_AVPS_SCANNED),
                ),
                PASS,
            ),
        ],
        vec![],
        vec![("pgw1", CCR_I, 0, 0, 0, 0), ("pgw1", OTHER, 1, 1, 0, 0)],
    ));

    // --- messages per segment ---
    v.push(row(
        "two messages in one segment",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &cat(&[&u0, &i0])), PASS),
        ],
        vec![],
        vec![
            ("pgw1", CCR_I, 1, 1, 0, 0),
            ("pgw1", OTHER, 1, 1, 0, 0),
            ("pgw1", None, 2, 2, 0, 0),
        ],
    ));
    let four = cat(&[&u0, &u0, &u0, &u0]);
    v.push(row(
        "bound (4) messages in one segment",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &four), PASS)],
        vec![(Counter::OverBound, 0)],
        vec![("pgw1", OTHER, 4, 4, 0, 0)],
    ));
    let five = cat(&[&u0, &u0, &u0, &u0, &u0]);
    v.push(row(
        "bound + 1 messages: a second pass of the program charges the fifth",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &five), PASS),
            step(seg(&f, 5 * u0.len() as u32, &i0), PASS),
        ],
        vec![
            (Counter::OverBound, 0),
            (Counter::Resync, 0),
            (Counter::Retransmit, 0),
        ],
        vec![("pgw1", OTHER, 5, 5, 0, 0), ("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let nine: Vec<u8> = (0..9).flat_map(|k| pkt::ccr(app::GX, 1, k)).collect();
    let nine_seg = seg(&f, 0, &nine);
    let marks: Vec<usize> = (2..9).map(|k| k * l as usize + 4).collect();
    v.push(Row {
        name: "nine CCR-I in one segment (three passes): only the burst passes unmarked",
        steps: vec![
            step(syn(&f), PASS),
            Step {
                out: Some(pkt::expect_marked(&nine_seg, &f, &marks)),
                pkt: nine_seg,
                verdict: PASS,
                refill: false,
            },
        ],
        counters: vec![(Counter::OverBound, 0)],
        slots: vec![("pgw1", CCR_I, 9, 2, 7, 0)],
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });

    // --- over limit: reject marks ---
    let third = seg(&f, 2 * l, &i2);
    v.push(Row {
        name: "third CCR-I over the limit is marked, checksum fixed",
        steps: vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &i0), PASS),
            step(seg(&f, l, &i1), PASS),
            Step {
                out: Some(pkt::expect_marked(&third, &f, &[4])),
                pkt: third,
                verdict: PASS,
                refill: false,
            },
        ],
        counters: vec![],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0), ("pgw1", None, 3, 2, 1, 0)],
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });
    let three = seg(&f, 0, &cat(&[&i0, &i1, &i2]));
    v.push(Row {
        name: "three CCR-I in one segment: the third is marked",
        steps: vec![
            step(syn(&f), PASS),
            Step {
                out: Some(pkt::expect_marked(&three, &f, &[2 * l as usize + 4])),
                pkt: three,
                verdict: PASS,
                refill: false,
            },
        ],
        counters: vec![],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0)],
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });

    // --- split messages ---
    let (a, b) = i0.split_at(30);
    v.push(row(
        "message split across 2 segments",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, a), PASS),
            step(seg(&f, 30, b), PASS),
        ],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0), ("pgw1", None, 1, 1, 0, 0)],
    ));
    let (a, rest) = i0.split_at(24);
    let (b, c) = rest.split_at(40);
    v.push(row(
        "message split across 3 segments",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, a), PASS),
            step(seg(&f, 24, b), PASS),
            step(seg(&f, 64, c), PASS),
        ],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let (a, b) = i0.split_at(3);
    v.push(row(
        "header cut after 3 bytes (truncated header)",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, a), PASS),
            step(seg(&f, 3, b), PASS),
        ],
        vec![(Counter::MalformedDiameter, 0)],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    // Split over limit: the flags byte is in the second segment, which gets marked.
    let (a, b) = i2.split_at(3);
    let second = seg(&f, 2 * l + 3, b);
    v.push(Row {
        name: "split CCR-I over the limit: marked in the segment holding its flags",
        steps: vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &cat(&[&i0, &i1])), PASS),
            step(seg(&f, 2 * l, a), PASS),
            Step {
                out: Some(pkt::expect_marked(&second, &f, &[1])),
                pkt: second,
                verdict: PASS,
                refill: false,
            },
        ],
        counters: vec![],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0)],
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });

    // A CCR-I over the limit whose flags byte passed in an earlier segment than its
    // CC-Request-Type: marked out of band (the agent applies it), neither packet
    // touched.
    let rt_at = pkt::avp_offset(&i2, dra_common::wire::avp::CC_REQUEST_TYPE).unwrap();
    let (a, b) = i2.split_at(rt_at + 6);
    v.push(Row {
        name: "straddling CCR-I over the limit: marked out of band",
        steps: vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &cat(&[&i0, &i1, a])), PASS),
            step(seg(&f, 2 * l + a.len() as u32, &cat(&[b, &u0])), PASS),
        ],
        counters: vec![(Counter::MarkedOutOfBand, 1), (Counter::Marked, 1)],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0), ("pgw1", OTHER, 1, 1, 0, 0)],
        unknown_drop: false,
        oob: vec![(0x102, 0x202)],
        oob_proto: oob::IPPROTO_TCP,
    });
    let long = pkt::ccr_3gpp(app::GX, 1, 5);
    let (a, b) = long.split_at(200);
    v.push(row(
        "3GPP names: CC-Request-Type beyond 192 bytes, cut at 200: still CCR-I",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, a), PASS),
            step(seg(&f, 200, b), PASS),
        ],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0), ("pgw1", OTHER, 0, 0, 0, 0)],
    ));

    // RFC 1624 §3: segments whose checksum is 0x0000 (ones' complement −0). An admitted
    // one is left exactly as it was; a marked one gets the checksum a full computation
    // gives (eqn. 3, never 0xffff for a changed byte).
    let sid_at = pkt::avp_offset(&i0, dra_common::wire::avp::SESSION_ID).unwrap() + 8 + 14;
    let zero_i0 = pkt::with_zero_checksum(&seg(&f, 0, &i0), &f, sid_at);
    let zero_i2 = pkt::with_zero_checksum(&seg(&f, 2 * l, &i2), &f, sid_at);
    v.push(row(
        "checksum 0x0000, admitted: packet untouched",
        vec![step(syn(&f), PASS), step(zero_i0, PASS)],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    v.push(Row {
        name: "checksum 0x0000, marked: checksum as recomputed from scratch",
        steps: vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &cat(&[&i0, &i1])), PASS),
            Step {
                out: Some(pkt::expect_marked(&zero_i2, &f, &[4])),
                pkt: zero_i2,
                verdict: PASS,
                refill: false,
            },
        ],
        counters: vec![],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0)],
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });

    // --- retransmissions and holes ---
    let first = seg(&f, 0, &i0);
    v.push(row(
        "retransmitted segment is not charged again",
        vec![
            step(syn(&f), PASS),
            step(first.clone(), PASS),
            step(first, PASS),
        ],
        vec![(Counter::Retransmit, 1)],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let marked_seg = seg(&f, 2 * l, &i2);
    let remarked = pkt::expect_marked(&marked_seg, &f, &[4]);
    v.push(Row {
        name: "retransmission of a marked request is marked again",
        steps: vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &cat(&[&i0, &i1])), PASS),
            Step {
                out: Some(remarked.clone()),
                pkt: marked_seg.clone(),
                verdict: PASS,
                refill: false,
            },
            Step {
                out: Some(remarked),
                pkt: marked_seg,
                verdict: PASS,
                refill: false,
            },
        ],
        counters: vec![(Counter::Retransmit, 1)],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0)],
        unknown_drop: false,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });
    v.push(row(
        "coalesced retransmission: old bytes skipped, new message charged",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &i0), PASS),
            step(seg(&f, 0, &cat(&[&i0, &u0])), PASS),
        ],
        vec![(Counter::Retransmit, 0)],
        vec![("pgw1", CCR_I, 1, 1, 0, 0), ("pgw1", OTHER, 1, 1, 0, 0)],
    ));
    v.push(row(
        "out-of-order segment past a hole is dropped",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, l, &i1), DROP),
            step(seg(&f, 0, &i0), PASS),
            step(seg(&f, l, &i1), PASS),
        ],
        vec![(Counter::OutOfOrder, 1)],
        vec![("pgw1", CCR_I, 2, 2, 0, 0)],
    ));

    // --- malformed ---
    let mut garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    garbage.resize(40, b' ');
    v.push(row(
        "garbage on 3868 in a framed flow: passed, counted, flow dropped",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &garbage), PASS)],
        vec![(Counter::MalformedDiameter, 1)],
        vec![("pgw1", None, 0, 0, 0, 0)],
    ));
    v.push(row(
        "garbage without flow state: passed unframed",
        vec![step(seg(&f, 0, &garbage), PASS)],
        vec![(Counter::Unframed, 1)],
        vec![],
    ));
    let mut bad_avp = i0.clone();
    bad_avp[25..28].copy_from_slice(&[0xff, 0xff, 0xff]);
    v.push(row(
        "AVP length overflow",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &bad_avp), PASS)],
        vec![(Counter::MalformedDiameter, 1)],
        vec![("pgw1", CCR_I, 0, 0, 0, 0)],
    ));
    v.push(row(
        "truncated header only (8 bytes), never completed",
        vec![step(syn(&f), PASS), step(seg(&f, 0, &i0[..8]), PASS)],
        vec![(Counter::MalformedDiameter, 0)],
        vec![("pgw1", None, 0, 0, 0, 0)],
    ));
    v.push(row(
        "RST forgets the flow; data after it resynchronises",
        vec![
            step(syn(&f), PASS),
            step(f.tcp(40000, 3868, ISN + 1, TCP_RST, &[], &[]), PASS),
            step(seg(&f, 0, &i0), PASS),
        ],
        vec![(Counter::Resync, 1)],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));

    // --- L2/L3 variants ---
    let mut frag = f.clone();
    frag.more_fragments = true;
    v.push(row(
        "IPv4 fragment",
        vec![step(frag.tcp(40000, 3868, 5, TCP_ACK, &[], &i0), PASS)],
        vec![(Counter::Fragment, 1)],
        vec![],
    ));
    let mut opt = f.clone();
    opt.ip_options = vec![1, 1, 1, 0]; // NOP NOP NOP EOL
    v.push(row(
        "IPv4 with options",
        vec![
            step(opt.tcp(40000, 3868, ISN, TCP_SYN, &[], &[]), PASS),
            step(opt.tcp(40000, 3868, ISN + 1, TCP_ACK, &[], &i0), PASS),
        ],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let f6 = Frame::v4("2001:db8:1::2", "2001:db8:1::1");
    v.push(row(
        "IPv6",
        vec![step(syn(&f6), PASS), step(seg(&f6, 0, &i0), PASS)],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let mut f6x = f6.clone();
    f6x.ext_headers = vec![0, 60];
    v.push(row(
        "IPv6 with hop-by-hop and destination options",
        vec![step(syn(&f6x), PASS), step(seg(&f6x, 0, &i0), PASS)],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let mut f6f = f6.clone();
    f6f.ext_headers = vec![44];
    v.push(row(
        "IPv6 fragment",
        vec![step(seg(&f6f, 0, &i0), PASS)],
        vec![(Counter::Fragment, 1)],
        vec![],
    ));
    let mut fv = f.clone();
    fv.vlans = vec![100];
    v.push(row(
        "one VLAN tag",
        vec![step(syn(&fv), PASS), step(seg(&fv, 0, &i0), PASS)],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let mut fq = f.clone();
    fq.vlans = vec![200, 100];
    v.push(row(
        "two VLAN tags (QinQ)",
        vec![step(syn(&fq), PASS), step(seg(&fq, 0, &i0), PASS)],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    let ts = [1u8, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    v.push(row(
        "TCP with options (timestamps)",
        vec![
            step(f.tcp(40000, 3868, ISN, TCP_SYN, &ts, &[]), PASS),
            step(f.tcp(40000, 3868, ISN + 1, TCP_ACK, &ts, &i0), PASS),
        ],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));

    // --- unknown peers ---
    let fs = Frame::v4(STRANGER, DRA);
    v.push(row(
        "unknown peer, policy pass",
        vec![step(seg(&fs, 0, &i0), PASS)],
        vec![(Counter::UnknownPeerPass, 1)],
        vec![],
    ));
    v.push(Row {
        name: "unknown peer, policy drop",
        steps: vec![step(seg(&fs, 0, &i0), DROP)],
        counters: vec![(Counter::UnknownPeerDrop, 1)],
        slots: vec![],
        unknown_drop: true,
        oob: vec![],
        oob_proto: oob::IPPROTO_TCP,
    });

    // --- drop action ---
    let f2 = Frame::v4(PGW2, DRA);
    let mut p2 = Vec::new();
    p2.push(step(syn(&f2), PASS));
    for k in 0..3u32 {
        p2.push(step(seg(&f2, k * l, &i0), PASS));
    }
    p2.push(step(seg(&f2, 3 * l, &i0), DROP));
    v.push(row(
        "drop action: the fourth request (burst 3) is dropped",
        p2,
        vec![(Counter::Dropped, 1)],
        vec![("pgw2", None, 3, 3, 0, 1)],
    ));
    v.push(row(
        "drop: the packet is dropped at the over-limit request; those before it stay charged",
        vec![
            step(syn(&f2), PASS),
            step(seg(&f2, 0, &cat(&[&i0, &i0])), PASS),
            step(seg(&f2, 2 * l, &cat(&[&i0, &i0])), DROP),
            // The retransmission: the third is passed as already charged, the fourth is
            // judged again (still over).
            step(seg(&f2, 2 * l, &cat(&[&i0, &i0])), DROP),
            step(seg(&f2, 2 * l, &i0), PASS),
        ],
        vec![(Counter::Dropped, 2), (Counter::Retransmit, 1)],
        vec![("pgw2", None, 3, 3, 0, 2)],
    ));
    v.push(row(
        "after a drop, later segments are not charged around the hole",
        vec![
            step(syn(&f2), PASS),
            step(seg(&f2, 0, &cat(&[&i0, &i0, &i0])), PASS),
            step(seg(&f2, 3 * l, &i0), DROP),
            step(seg(&f2, 4 * l, &i0), DROP),
        ],
        vec![(Counter::Dropped, 1), (Counter::OutOfOrder, 1)],
        vec![("pgw2", None, 3, 3, 0, 1)],
    ));
    // pgw2's SYN and its burst (three requests, admitted), then `more`: the island rows
    // start from an empty bucket.
    let burst_spent = |more: Vec<Step>| -> Vec<Step> {
        let mut steps = vec![
            step(syn(&f2), PASS),
            step(seg(&f2, 0, &cat(&[&i0, &i0, &i0])), PASS),
        ];
        steps.extend(more);
        steps
    };
    // Islands (docs/fast-path.md): after a drop, the bytes past the hole are framed
    // without charging; once the dropped request's retransmission is admitted, new data
    // at the island's end (a sender's F-RTO probe) is charged and passed, and the main
    // line takes the island over when it reaches it.
    v.push(row(
        "island: new data after the drop is charged and passed once the hole's start is",
        burst_spent(vec![
            step(seg(&f2, 3 * l, &i0), DROP),
            // Sent before the timeout: framed, not charged, dropped.
            step(seg(&f2, 4 * l, &i0), DROP),
            // New data before the main line moved: still not charged.
            step(seg(&f2, 5 * l, &i0), DROP),
            after_refill(seg(&f2, 3 * l, &i0), PASS),
            // F-RTO's new data: charged by the island.
            step(seg(&f2, 6 * l, &i0), PASS),
            // Its retransmission: charged already.
            step(seg(&f2, 6 * l, &i0), PASS),
            // The hole's retransmission (after another refill): the main line reaches
            // the island's start and takes the island over, then goes on.
            after_refill(seg(&f2, 4 * l, &cat(&[&i0, &i0])), PASS),
            step(seg(&f2, 7 * l, &i0), PASS),
            step(seg(&f2, 8 * l, &i0), DROP),
        ]),
        vec![
            (Counter::Dropped, 2),
            (Counter::OutOfOrder, 2),
            (Counter::Retransmit, 1),
        ],
        vec![("pgw2", None, 8, 8, 0, 2)],
    ));
    v.push(row(
        "island: a segment past the island's end is dropped once the main line took it over",
        burst_spent(vec![
            step(seg(&f2, 3 * l, &i0), DROP),
            step(seg(&f2, 4 * l, &i0), DROP),
            after_refill(seg(&f2, 3 * l, &i0), PASS),
            step(seg(&f2, 5 * l, &i0), PASS),
            // Up to the island (charged here), the island (charged by it) and a request
            // past it (not walked): dropped.
            step(seg(&f2, 4 * l, &cat(&[&i0, &i0, &i0])), DROP),
            // Its retransmission: only the last request is new.
            after_refill(seg(&f2, 4 * l, &cat(&[&i0, &i0, &i0])), PASS),
        ]),
        vec![
            (Counter::Dropped, 1),
            (Counter::OutOfOrder, 2),
            (Counter::Retransmit, 0),
        ],
        vec![("pgw2", None, 7, 7, 0, 1)],
    ));
    v.push(row(
        "island: the main line catching up before the island charged anything ends it",
        burst_spent(vec![
            step(seg(&f2, 3 * l, &cat(&[&i0, &i0])), DROP),
            after_refill(seg(&f2, 3 * l, &cat(&[&i0, &i0])), PASS),
            step(seg(&f2, 5 * l, &i0), PASS),
        ]),
        vec![(Counter::Dropped, 1), (Counter::OutOfOrder, 0)],
        vec![("pgw2", None, 6, 6, 0, 1)],
    ));
    v.push(row(
        "CCR-T profile with action drop",
        vec![
            step(syn(&f), PASS),
            step(seg(&f, 0, &cat(&[&t0, &t0])), PASS),
            step(seg(&f, 2 * l, &t0), DROP),
        ],
        vec![(Counter::Dropped, 1)],
        vec![("pgw1", CCR_T, 2, 2, 0, 1)],
    ));

    // --- SCTP ---
    v.push(row(
        "SCTP INIT over the connection guard",
        vec![
            step(f.sctp(40000, 3868, &[pkt::sctp_init()]), PASS),
            step(f.sctp(40000, 3868, &[pkt::sctp_init()]), PASS),
            step(f.sctp(40000, 3868, &[pkt::sctp_init()]), DROP),
        ],
        vec![(Counter::SynDropped, 1)],
        vec![],
    ));
    v.push(row(
        "SCTP bundled DATA + SACK + DATA",
        vec![step(
            f.sctp(
                40000,
                3868,
                &[
                    pkt::sctp_data(10, 46, &i0),
                    pkt::sctp_sack(5),
                    pkt::sctp_data(11, 46, &u0),
                ],
            ),
            PASS,
        )],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0), ("pgw1", OTHER, 1, 1, 0, 0)],
    ));
    v.push(row(
        "SCTP I-DATA",
        vec![step(
            f.sctp(40000, 3868, &[pkt::sctp_idata(10, 46, &i0)]),
            PASS,
        )],
        vec![],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    // A multihomed gateway: one association, its packets over two paths (another
    // destination address of the DRA), one TSN sequence across them.
    let path2 = Frame::v4(PGW1, "198.18.1.9");
    v.push(row(
        "SCTP association over two paths: one TSN sequence, a retransmission on the other \
         path not charged again",
        vec![
            step(f.sctp(40000, 3868, &[pkt::sctp_data(10, 46, &i0)]), PASS),
            step(
                path2.sctp(40000, 3868, &[pkt::sctp_data(11, 46, &u0)]),
                PASS,
            ),
            step(
                path2.sctp(40000, 3868, &[pkt::sctp_data(10, 46, &i0)]),
                PASS,
            ),
            step(f.sctp(40000, 3868, &[pkt::sctp_data(12, 46, &i1)]), PASS),
        ],
        vec![
            (Counter::Retransmit, 1),
            (Counter::Resync, 1),
            (Counter::OutOfOrder, 0),
        ],
        vec![("pgw1", CCR_I, 2, 2, 0, 0), ("pgw1", OTHER, 1, 1, 0, 0)],
    ));
    v.push(row(
        "SCTP retransmitted TSN is not charged again",
        vec![
            step(f.sctp(40000, 3868, &[pkt::sctp_data(10, 46, &i0)]), PASS),
            step(f.sctp(40000, 3868, &[pkt::sctp_data(10, 46, &i0)]), PASS),
        ],
        vec![(Counter::Retransmit, 1)],
        vec![("pgw1", CCR_I, 1, 1, 0, 0)],
    ));
    v.push(Row {
        name: "SCTP over a reject limit: passed and marked out of band (no CRC32c rewrite)",
        steps: vec![
            step(
                f.sctp(
                    40000,
                    3868,
                    &[pkt::sctp_data(10, 46, &i0), pkt::sctp_data(11, 46, &i1)],
                ),
                PASS,
            ),
            step(f.sctp(40000, 3868, &[pkt::sctp_data(12, 46, &i2)]), PASS),
        ],
        counters: vec![(Counter::MarkedOutOfBand, 1), (Counter::Marked, 1)],
        slots: vec![("pgw1", CCR_I, 3, 2, 1, 0)],
        unknown_drop: false,
        oob: vec![(0x102, 0x202)],
        oob_proto: oob::IPPROTO_SCTP,
    });
    let (t0, t1, t2) = (
        pkt::ccr(app::GX, 3, 0),
        pkt::ccr(app::GX, 3, 1),
        pkt::ccr(app::GX, 3, 2),
    );
    v.push(row(
        "SCTP over a drop limit: the packet is dropped",
        vec![
            step(
                f.sctp(
                    40000,
                    3868,
                    &[pkt::sctp_data(10, 46, &t0), pkt::sctp_data(11, 46, &t1)],
                ),
                PASS,
            ),
            step(f.sctp(40000, 3868, &[pkt::sctp_data(12, 46, &t2)]), DROP),
        ],
        vec![(Counter::Dropped, 1)],
        vec![("pgw1", CCR_T, 2, 2, 0, 1)],
    ));
    v
}

#[test]
fn fixture_table() {
    let mut h = Harness::new();
    let rows = rows();
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let mut failures = Vec::new();
    for r in &rows {
        h.reset();
        let _ = h.oob_marks(&f1(), r.oob_proto, &[]);
        let mut g = h.plan.global;
        g.unknown_peer = if r.unknown_drop {
            UnknownPeerPolicy::Drop as u32
        } else {
            UnknownPeerPolicy::Pass as u32
        };
        h.maps.write_global(g).unwrap();
        let before = h.counters();
        let slot_before: Vec<ClassCounters> = r
            .slots
            .iter()
            .map(|(p, c, ..)| h.maps.slot_counters(h.slot(p, *c)).unwrap())
            .collect();
        for (i, s) in r.steps.iter().enumerate() {
            if s.refill {
                h.maps.reset_buckets().unwrap();
            }
            let (verdict, out) = h.run(&s.pkt);
            if verdict != s.verdict {
                failures.push(format!(
                    "{}: step {i}: verdict {verdict}, want {}",
                    r.name, s.verdict
                ));
            }
            if verdict == PASS && s.out.is_none() && out != s.pkt {
                failures.push(format!(
                    "{}: step {i}: packet modified unexpectedly",
                    r.name
                ));
            }
            if let Some(want) = &s.out {
                if &out != want {
                    failures.push(format!("{}: step {i}: output bytes differ", r.name));
                }
                if !pkt::tcp_checksum_ok(&out, &f1()) {
                    failures.push(format!(
                        "{}: step {i}: TCP checksum wrong after marking",
                        r.name
                    ));
                }
            }
        }
        let after = h.counters();
        let delta = |c: Counter| after[c as usize].1 - before[c as usize].1;
        if let Err(e) = h.oob_marks(&f1(), r.oob_proto, &r.oob) {
            failures.push(format!("{}: {e}", r.name));
        }
        if delta(Counter::Packets) != r.steps.len() as u64 {
            failures.push(format!(
                "{}: packets counted {}, want {}",
                r.name,
                delta(Counter::Packets),
                r.steps.len()
            ));
        }
        for e in counter_mismatches(&before, &after, &r.counters) {
            failures.push(format!("{}: {e}", r.name));
        }
        for ((p, c, seen, adm, mk, dr), b) in r.slots.iter().zip(slot_before) {
            let got = slot_delta(&b, &h.maps.slot_counters(h.slot(p, *c)).unwrap());
            if got != (*seen, *adm, *mk, *dr) {
                failures.push(format!(
                    "{}: slot {p}/{c:?} (seen, admitted, marked, dropped) delta {got:?}, want {:?}",
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

/// Rewriting a bucket's rate live (what the dynamic controller does) keeps its
/// state: no tokens are handed out by the rewrite.
#[test]
fn live_rate_change_keeps_tokens() {
    let mut h = Harness::new();
    h.maps.reset_buckets().unwrap();
    h.maps.clear_flows();
    let f = f1();
    let slot_i = h.slot("pgw1", CCR_I);
    let mut off = 0;
    let mut send = |h: &mut Harness, n: u32| {
        let m = pkt::ccr(app::GX, 1, n);
        let p = seg(&f, off, &m);
        off += m.len() as u32;
        let (v, out) = h.run(&p);
        assert_eq!(v, PASS);
        out != p // marked?
    };
    assert_eq!(h.run(&syn(&f)).0, PASS);
    assert!(!send(&mut h, 0));
    assert!(!send(&mut h, 1));
    assert!(send(&mut h, 2), "burst 2 spent: the third is marked");
    let before = h.maps.bucket_state(slot_i).unwrap();
    let slot = h.plan.slots[slot_i as usize].clone();
    h.maps.set_rate(&slot, 0.6).unwrap();
    assert_eq!(
        h.maps.bucket_state(slot_i).unwrap(),
        before,
        "state untouched by the rate change"
    );
    assert_eq!(
        h.maps.bucket_config(slot_i).unwrap().interval_ns,
        1_666_666_667
    );
    assert!(
        send(&mut h, 3),
        "no tokens handed out by the rewrite: still marked"
    );
    h.maps.set_rate(&slot, 1.0).unwrap();
    assert!(send(&mut h, 4));
}

/// Slot counters (seen, admitted, marked, dropped) of a peer's class slot.
fn slot4(h: &Harness, peer: &str, class: Option<MsgClass>) -> (u64, u64, u64, u64) {
    let c = h.maps.slot_counters(h.slot(peer, class)).unwrap();
    (c.seen, c.admitted, c.marked, c.dropped)
}

fn sub4(a: (u64, u64, u64, u64), b: (u64, u64, u64, u64)) -> (u64, u64, u64, u64) {
    (a.0 - b.0, a.1 - b.1, a.2 - b.2, a.3 - b.3)
}

/// `reject`: two CCR-I fill the burst; the third is cut at every byte offset into two
/// segments (a CCR-U follows it in the second). The uncut stream marks the third and
/// nothing else. Cut anywhere, it is still marked exactly once: in its header when its
/// flags byte is in the segment that completes its class, else out of band; neither
/// segment is otherwise touched.
#[test]
fn straddle_sweep_reject() {
    let mut h = Harness::new();
    let f = f1();
    let mut failures = Vec::new();
    let mut cases = 0;
    for (label, build) in pkt::CCR_BUILDS {
        let (i0, i1, i2) = (
            build(app::GX, 1, 0),
            build(app::GX, 1, 1),
            build(app::GX, 1, 2),
        );
        let u3 = build(app::GX, 2, 3);
        let pre = cat(&[&i0, &i1]);
        let p = pre.len();
        // The class is known once CC-Request-Type's value is in.
        let decided = pkt::avp_offset(&i2, dra_common::wire::avp::CC_REQUEST_TYPE).unwrap() + 12;
        for k in 1..i2.len() {
            cases += 1;
            h.reset();
            let _ = h.oob_marks(&f, oob::IPPROTO_TCP, &[]);
            let before = h.counters();
            let (ci, cu) = (slot4(&h, "pgw1", CCR_I), slot4(&h, "pgw1", OTHER));
            let a = seg(&f, 0, &cat(&[&pre, &i2[..k]]));
            let b = seg(&f, (p + k) as u32, &cat(&[&i2[k..], &u3]));
            let (want_a, want_b, want_oob) = if k >= decided {
                (pkt::expect_marked(&a, &f, &[p + 4]), b.clone(), vec![])
            } else if k <= 4 {
                (a.clone(), pkt::expect_marked(&b, &f, &[4 - k]), vec![])
            } else {
                (a.clone(), b.clone(), vec![(0x102, 0x202)])
            };
            assert_eq!(h.run(&syn(&f)).0, PASS);
            let (va, oa) = h.run(&a);
            let (vb, ob) = h.run(&b);
            let mut bad = Vec::new();
            if (va, vb) != (PASS, PASS) {
                bad.push(format!("verdicts {va}/{vb}"));
            }
            if oa != want_a || ob != want_b {
                bad.push(format!("marks: first {}, second {}", oa != a, ob != b));
            }
            if let Err(e) = h.oob_marks(&f, oob::IPPROTO_TCP, &want_oob) {
                bad.push(e);
            }
            let after = h.counters();
            let oob_delta = after[Counter::MarkedOutOfBand as usize].1
                - before[Counter::MarkedOutOfBand as usize].1;
            if oob_delta != want_oob.len() as u64 {
                bad.push(format!("marked_out_of_band {oob_delta}"));
            }
            let (di, du) = (
                sub4(slot4(&h, "pgw1", CCR_I), ci),
                sub4(slot4(&h, "pgw1", OTHER), cu),
            );
            if di != (3, 2, 1, 0) || du != (1, 1, 0, 0) {
                bad.push(format!("CCR-I {di:?}, CCR-U {du:?}"));
            }
            if !bad.is_empty() {
                failures.push(format!("{label}, cut at {k}: {}", bad.join("; ")));
            }
        }
    }
    assert_sweep(cases, 250, &failures);
}

/// Runs (name, segment, verdict) steps: one message for each verdict that differs and
/// for each passed segment that came out changed.
fn run_steps(h: &mut Harness, steps: &[(&str, &Vec<u8>, u32)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, pkt, want) in steps {
        let (v, out) = h.run(pkt);
        if v != *want || (v == PASS && out != **pkt) {
            bad.push(format!("{name}: verdict {v}, want {want}"));
        }
    }
    bad
}

/// `drop` (pgw1's CCR-T profile, burst 2): the third CCR-T is cut at every byte offset.
/// The segment that completes its class is dropped — the first when the cut comes after
/// its CC-Request-Type, else the second — and nothing after it in that segment is
/// charged. Its retransmission is judged again (dropped again: still over the limit),
/// never charged twice.
///
/// Then what a Linux sender does after its retransmission timeout, islands at every cut
/// (docs/fast-path.md, "Islands"): the buckets refill; when the first segment was dropped
/// the second arrives (framed by the island, not charged, dropped); the dropped segment
/// is retransmitted (admitted); new data `c` (F-RTO's probe: a CCR-T and a CCR-U)
/// follows and passes — charged by the island when the second segment is still missing
/// — and so does the second segment's retransmission, where the main line takes the
/// island over. In the end every request was charged exactly once (CCR-T: four
/// admitted, the third dropped twice first; CCR-U: two admitted), and the flow's main
/// line stands at the end of `c` with no island left.
#[test]
fn straddle_sweep_drop() {
    let mut h = Harness::new();
    let f = f1();
    let mut failures = Vec::new();
    let mut cases = 0;
    for (label, build) in pkt::CCR_BUILDS {
        let t: Vec<Vec<u8>> = (0..4).map(|k| build(app::GX, 3, k)).collect();
        let (u3, u4) = (build(app::GX, 2, 3), build(app::GX, 2, 4));
        let pre = cat(&[&t[0], &t[1]]);
        let p = pre.len();
        let decided = pkt::avp_offset(&t[2], dra_common::wire::avp::CC_REQUEST_TYPE).unwrap() + 12;
        for k in 1..t[2].len() {
            cases += 1;
            h.reset();
            let (ct, cu) = (slot4(&h, "pgw1", CCR_T), slot4(&h, "pgw1", OTHER));
            let a = seg(&f, 0, &cat(&[&pre, &t[2][..k]]));
            let rest = cat(&[&t[2][k..], &u3]);
            let b = seg(&f, (p + k) as u32, &rest);
            let c_off = (p + k + rest.len()) as u32;
            let c_bytes = cat(&[&t[3], &u4]);
            let c = seg(&f, c_off, &c_bytes);
            assert_eq!(h.run(&syn(&f)).0, PASS);
            let first_dropped = k >= decided;
            let dropped_seg = if first_dropped { &a } else { &b };
            let mut steps = vec![("first segment", &a, if first_dropped { DROP } else { PASS })];
            if !first_dropped {
                steps.push(("second segment", &b, DROP));
            }
            // The retransmission of the dropped segment: judged again.
            steps.push(("retransmission", dropped_seg, DROP));
            let mut bad = run_steps(&mut h, &steps);
            let (dt, du) = (
                sub4(slot4(&h, "pgw1", CCR_T), ct),
                sub4(slot4(&h, "pgw1", OTHER), cu),
            );
            if dt != (2, 2, 0, 2) || du != (0, 0, 0, 0) {
                bad.push(format!("CCR-T {dt:?}, CCR-U {du:?}"));
            }
            // After the timeout.
            let mut later = vec![];
            if first_dropped {
                later.push(("second segment (island)", &b, DROP));
            }
            h.maps.reset_buckets().unwrap();
            later.push(("retransmission after the timeout", dropped_seg, PASS));
            later.push(("new data", &c, PASS));
            if first_dropped {
                later.push(("second segment again", &b, PASS));
            }
            bad.extend(run_steps(&mut h, &later));
            let (dt, du) = (
                sub4(slot4(&h, "pgw1", CCR_T), ct),
                sub4(slot4(&h, "pgw1", OTHER), cu),
            );
            if dt != (4, 4, 0, 2) || du != (2, 2, 0, 0) {
                bad.push(format!("after the timeout: CCR-T {dt:?}, CCR-U {du:?}"));
            }
            let end = ISN + 1 + c_off + c_bytes.len() as u32;
            match h.maps.tcp_flows().as_slice() {
                [(_, fl)] if fl.line.processed_end == end && fl.island.state == 0 => {}
                other => bad.push(format!(
                    "flow state {:?}, want the main line at {end} and no island",
                    other
                        .iter()
                        .map(|(_, fl)| (fl.line.processed_end, fl.island.state))
                        .collect::<Vec<_>>()
                )),
            }
            if !bad.is_empty() {
                failures.push(format!("{label}, cut at {k}: {}", bad.join("; ")));
            }
        }
    }
    assert_sweep(cases, 250, &failures);
}

/// SCTP: the third request of a class over its limit fragmented into two DATA chunks
/// (B, then E) at every byte offset, in two packets; then the same with I-DATA, with a
/// complete message of another stream between the fragments (RFC 8260 interleaving).
/// Over pgw1's CCR-I limit (`reject`) every packet passes and the request is marked out
/// of band once; over its CCR-T limit (`drop`) the packet that completes the class is
/// dropped and the others pass.
#[test]
fn sctp_fragment_sweep() {
    use pkt::{SCTP_B, SCTP_E};
    let mut h = Harness::new();
    let f = f1();
    let mut failures = Vec::new();
    let mut cases = 0;
    for (label, build) in pkt::CCR_BUILDS {
        for (rtype, class, reject) in [(1, CCR_I, true), (3, CCR_T, false)] {
            let (m0, m1, m2) = (
                build(app::GX, rtype, 0),
                build(app::GX, rtype, 1),
                build(app::GX, rtype, 2),
            );
            let u3 = build(app::GX, 2, 3);
            let decided =
                pkt::avp_offset(&m2, dra_common::wire::avp::CC_REQUEST_TYPE).unwrap() + 12;
            for idata in [false, true] {
                for k in 1..m2.len() {
                    cases += 1;
                    h.reset();
                    let _ = h.oob_marks(&f, oob::IPPROTO_SCTP, &[]);
                    let (ci, cu) = (slot4(&h, "pgw1", class), slot4(&h, "pgw1", OTHER));
                    let (p1, p2) = if idata {
                        (
                            f.sctp(
                                40000,
                                3868,
                                &[
                                    pkt::sctp_idata_frag(10, SCTP_B | SCTP_E, 1, 1, 46, &m0),
                                    pkt::sctp_idata_frag(11, SCTP_B | SCTP_E, 1, 2, 46, &m1),
                                    pkt::sctp_idata_frag(12, SCTP_B, 1, 3, 46, &m2[..k]),
                                    // Another stream's message between the two fragments.
                                    pkt::sctp_idata_frag(13, SCTP_B | SCTP_E, 2, 1, 46, &u3),
                                ],
                            ),
                            f.sctp(
                                40000,
                                3868,
                                &[pkt::sctp_idata_frag(14, SCTP_E, 1, 3, 1, &m2[k..])],
                            ),
                        )
                    } else {
                        (
                            f.sctp(
                                40000,
                                3868,
                                &[
                                    pkt::sctp_data(10, 46, &m0),
                                    pkt::sctp_data(11, 46, &m1),
                                    pkt::sctp_data_frag(12, SCTP_B, 46, &m2[..k]),
                                ],
                            ),
                            f.sctp(
                                40000,
                                3868,
                                &[
                                    pkt::sctp_data_frag(13, SCTP_E, 46, &m2[k..]),
                                    pkt::sctp_data(14, 46, &u3),
                                ],
                            ),
                        )
                    };
                    let over = if reject { PASS } else { DROP };
                    let mut bad = Vec::new();
                    let (v1, _) = h.run(&p1);
                    let want1 = if k >= decided { over } else { PASS };
                    if v1 != want1 {
                        bad.push(format!("first packet: verdict {v1}"));
                    }
                    // The second packet: after a drop in the first it is past the hole.
                    if v1 == PASS {
                        let (v2, _) = h.run(&p2);
                        let want2 = if k >= decided { PASS } else { over };
                        if v2 != want2 {
                            bad.push(format!("second packet: verdict {v2}"));
                        }
                    }
                    let dc = sub4(slot4(&h, "pgw1", class), ci);
                    let du = sub4(slot4(&h, "pgw1", OTHER), cu);
                    // The CCR-U: judged unless a drop came before it (DATA: it follows
                    // the dropped fragment; I-DATA: it is in the first packet).
                    let want_u = if reject || (idata && v1 == PASS) {
                        (1, 1, 0, 0)
                    } else {
                        (0, 0, 0, 0)
                    };
                    let want_c = if reject { (3, 2, 1, 0) } else { (2, 2, 0, 1) };
                    if dc != want_c || du != want_u {
                        bad.push(format!("class {dc:?}, CCR-U {du:?}"));
                    }
                    let want_oob: &[(u32, u32)] = if reject { &[(0x102, 0x202)] } else { &[] };
                    if let Err(e) = h.oob_marks(&f, oob::IPPROTO_SCTP, want_oob) {
                        bad.push(e);
                    }
                    if !bad.is_empty() {
                        let kind = if idata { "I-DATA" } else { "DATA" };
                        let action = if reject { "reject" } else { "drop" };
                        failures.push(format!(
                            "{label}, {action}, {kind}, cut at {k}: {}",
                            bad.join("; ")
                        ));
                    }
                }
            }
        }
    }
    assert_sweep(cases, 1000, &failures);
}
