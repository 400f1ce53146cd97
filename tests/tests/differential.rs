//! The XDP fast path and the agent's userspace limiter agree on every request: the same
//! byte stream (one gateway connection, requests of several classes and sizes, limits
//! exceeded) is fed to both — to the kernel cut into TCP segments at every single byte
//! offset, at random multi-cut patterns and at MSS boundaries, through
//! BPF_PROG_TEST_RUN; to the limiter as whole messages — and every request's verdict
//! must be the same.
//!
//! - `reject`: per request, marked or not. The kernel's mark is the header bit in the
//!   segment's output bytes, or an out-of-band mark read through the agent's own
//!   `OobInbox` — exactly what the agent's reader would see.
//! - `drop`: the segments are sent until the first one the kernel drops; the limiter
//!   reads until the first request it holds. Both must have judged the same requests
//!   the same way: per-slot counters (seen, admitted, marked, dropped) equal.

use aya::Ebpf;
use dra::{
    dataplane::{Maps, Plan},
    limiter::{Limiter, Source, Verdict},
    oob::{self, OobInbox},
};
use dra_common::{
    maps::ClassCounters,
    wire::{app, flags},
};
use dra_tests::pkt::{self, Frame, TCP_ACK, TCP_PSH, TCP_SYN};
use dra_tests::support::{
    Hook, SlotCounts, lab_config, load_object, oob_inbox, run_xdp, slot_delta,
};

const PASS: u32 = 2;
const DROP: u32 = 1;
const ISN: u32 = 5000;

/// Every limit is exceeded by the stream below: overall burst 12, Gx CCR-I burst 3,
/// Gx CCR-T burst 2, Gy CCR-I burst 2, all at 1/s (nothing refills during a run).
fn config(action: &str) -> String {
    let limit = |app: &str, rt: &str, burst: u32| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             application = \"{app}\"\ncommand = \"ccr\"\nrequest_type = \"{rt}\"\n\
             rate = 1\nburst = {burst}\naction = \"{action}\"\n"
        )
    };
    lab_config()
        .with(&format!(
            "[[peer_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             rate = 1\nburst = 12\naction = \"{action}\"\n"
        ))
        .with(&limit("gx", "initial", 3))
        .with(&limit("gx", "termination", 2))
        .with(&limit("gy", "initial", 2))
        .to_string()
}

/// The stream: 20 messages, requests of every limited class (short and 3GPP-sized),
/// others, a DWR and an answer, each with its own Hop-by-Hop/End-to-End ids.
fn stream() -> Vec<Vec<u8>> {
    let (s, g) = (pkt::ccr as pkt::CcrBuild, pkt::ccr_3gpp as pkt::CcrBuild);
    let plan: [(pkt::CcrBuild, u32, u32); 18] = [
        (g, app::GX, 1),
        (s, app::GX, 1),
        (s, app::GX, 2),
        (g, app::GX, 1),
        (g, app::GX, 3),
        (g, app::GY, 1),
        (s, app::GX, 1),
        (s, app::GX, 3),
        (g, app::GX, 3),
        (s, app::GY, 1),
        (g, app::GY, 1),
        (g, app::GX, 2),
        (s, app::GX, 1),
        (s, app::GY, 2),
        (g, app::GX, 4),
        (s, app::GX, 3),
        (g, app::GX, 1),
        (s, app::GX, 2),
    ];
    let mut v: Vec<Vec<u8>> = plan
        .iter()
        .enumerate()
        .map(|(n, (b, a, rt))| b(*a, *rt, n as u32))
        .collect();
    v.insert(7, pkt::dwr());
    v.insert(11, pkt::cca(app::GX, 99));
    v
}

struct Harness {
    ebpf: Ebpf,
    maps: Maps,
    plan: Plan,
    oob: OobInbox,
    frame: Frame,
}

impl Harness {
    fn new(action: &str) -> Harness {
        let (mut ebpf, maps, plan) = load_object(&config(action), "differential.toml", Hook::Xdp);
        let oob = oob_inbox(&mut ebpf);
        Harness {
            ebpf,
            maps,
            plan,
            oob,
            frame: Frame::v4("198.18.1.2", "198.18.1.1"),
        }
    }

    fn run(&mut self, input: &[u8]) -> (u32, Vec<u8>) {
        run_xdp(&self.ebpf, input)
    }

    /// Full buckets (of this plan's slots) and no flow state.
    fn reset(&mut self) {
        for s in &self.plan.slots {
            self.maps.reset_bucket(s.index).unwrap();
        }
        self.maps.clear_flows();
        self.oob.drain();
        self.oob.forget(&self.key());
    }

    fn key(&self) -> dra_common::maps::FlowKey {
        oob::flow_key(
            (self.frame.src, 40000).into(),
            (self.frame.dst, 3868).into(),
        )
    }

    /// [`Harness::reset`], then the SYN of the flow, which passes; the counters before it.
    fn open_flow(&mut self) -> Vec<ClassCounters> {
        self.reset();
        let before = self.counters();
        let syn = self.frame.tcp(40000, 3868, ISN, TCP_SYN, &[], &[]);
        assert_eq!(self.run(&syn).0, PASS);
        before
    }

    fn counters(&self) -> Vec<ClassCounters> {
        self.plan
            .slots
            .iter()
            .map(|s| self.maps.slot_counters(s.index).unwrap())
            .collect()
    }
}

/// Per slot: (seen, admitted, marked, dropped).
type Counts = Vec<SlotCounts>;

fn delta(after: &[ClassCounters], before: &[ClassCounters]) -> Counts {
    after
        .iter()
        .zip(before)
        .map(|(a, b)| slot_delta(b, a))
        .collect()
}

/// What the limiter decides for each message of `msgs`, and its per-slot counters.
/// With `stop_at_drop`, reading stops at the first held request (as the reader does).
fn userspace(plan: &Plan, msgs: &[Vec<u8>], stop_at_drop: bool) -> (Vec<Verdict>, Counts) {
    let l = Limiter::new(plan);
    let Source::Peer(peer) = l.source("198.18.1.2".parse().unwrap(), 3868) else {
        panic!("pgw1 is a peer")
    };
    let mut v = Vec::new();
    for m in msgs {
        let x = l.admit(&peer, m, 0);
        v.push(x);
        if stop_at_drop && x == Verdict::Drop {
            break;
        }
    }
    let counters = plan
        .slots
        .iter()
        .map(|s| l.slot_counters(s.index).unwrap_or_default())
        .map(|c| (c.seen, c.admitted, c.marked, c.dropped))
        .collect();
    (v, counters)
}

/// Segment boundaries (stream offsets, strictly inside the stream), for each pattern.
fn patterns(total: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (1..total).map(|k| vec![k]).collect();
    // Deterministic pseudo-random multi-cut patterns (xorshift).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..300 {
        let n = 2 + (next() % 14) as usize;
        let mut cuts: Vec<usize> = (0..n)
            .map(|_| 1 + (next() as usize % (total - 1)))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        out.push(cuts);
    }
    for mss in [536, MSS] {
        out.push((1..).map(|i| i * mss).take_while(|&c| c < total).collect());
    }
    out
}

/// Largest segment sent: an Ethernet MSS. (BPF_PROG_TEST_RUN puts bytes beyond ~3.5 KB
/// of a frame into fragments; on the wire the program never sees those: a veth or NIC
/// at MTU 1500 has none, and XDP on a jumbo-MTU device needs a frags-aware program.)
const MSS: usize = 1448;

/// The segments of `bytes` cut at `cuts`, each cut further into MSS-sized segments.
fn segments(h: &Harness, bytes: &[u8], cuts: &[usize]) -> Vec<(usize, Vec<u8>)> {
    let mut bounds = vec![0];
    for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let last = *bounds.last().unwrap();
        bounds.extend((1..).map(|i| last + i * MSS).take_while(|&b| b < c));
        bounds.push(c);
    }
    bounds
        .windows(2)
        .map(|w| {
            (
                w[0],
                h.frame.tcp(
                    40000,
                    3868,
                    ISN + 1 + w[0] as u32,
                    TCP_ACK | TCP_PSH,
                    &[],
                    &bytes[w[0]..w[1]],
                ),
            )
        })
        .collect()
}

/// Fails with the first 20 of `failures` (one per cut pattern of `patterns`).
fn assert_agree(failures: &[String], patterns: usize) {
    assert!(
        failures.is_empty(),
        "{} of {patterns} patterns disagree:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

#[test]
fn reject_verdicts_agree_at_every_cut() {
    let mut h = Harness::new("reject");
    let msgs = stream();
    let bytes = msgs.concat();
    let starts: Vec<usize> = msgs
        .iter()
        .scan(0, |o, m| {
            let s = *o;
            *o += m.len();
            Some(s)
        })
        .collect();
    let (want, want_counters) = userspace(&h.plan, &msgs, false);
    let marked_by_userspace = want.iter().filter(|v| **v == Verdict::Mark).count();
    assert!(
        marked_by_userspace >= 6,
        "the stream exceeds the limits ({marked_by_userspace} marked)"
    );
    assert!(!want.contains(&Verdict::Drop));
    let key = h.key();
    let mut failures = Vec::new();
    let pats = patterns(bytes.len());
    let mut oob_used = 0;
    for cuts in &pats {
        let before = h.open_flow();
        // The bytes the receiver gets, with the kernel's in-band marks.
        let mut delivered = bytes.clone();
        let mut bad = Vec::new();
        for (at, seg) in segments(&h, &bytes, cuts) {
            let (v, out) = h.run(&seg);
            if v != PASS {
                bad.push(format!("segment at {at}: verdict {v}"));
            }
            let payload = pkt::tcp_offset(&seg) + 20;
            let n = seg.len() - payload;
            delivered[at..at + n].copy_from_slice(&out[payload..]);
            if !pkt::tcp_checksum_ok(&out, &h.frame) {
                bad.push(format!("segment at {at}: TCP checksum wrong"));
            }
        }
        h.oob.drain();
        let got: Vec<Verdict> = msgs
            .iter()
            .zip(&starts)
            .map(|(m, &s)| {
                let mut f = delivered[s..s + m.len()].to_vec();
                if h.oob.apply(&key, &mut f) {
                    oob_used += 1;
                }
                if f[4] & flags::RATE_LIMIT_MARK != 0 {
                    Verdict::Mark
                } else {
                    Verdict::Admit
                }
            })
            .collect();
        if got != want {
            let diff: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
            bad.push(format!("verdicts differ at messages {diff:?}"));
        }
        let d = delta(&h.counters(), &before);
        if d != want_counters {
            bad.push(format!("slot counters {d:?}, userspace {want_counters:?}"));
        }
        if !bad.is_empty() {
            failures.push(format!("cuts {cuts:?}: {}", bad.join("; ")));
        }
    }
    println!(
        "{} cut patterns of a {}-byte stream; {} out-of-band marks applied",
        pats.len(),
        bytes.len(),
        oob_used
    );
    assert!(oob_used > 0, "some cuts straddle a marked request's class");
    assert_agree(&failures, pats.len());
}

#[test]
fn drop_verdicts_agree_at_every_cut() {
    let mut h = Harness::new("drop");
    let msgs = stream();
    let bytes = msgs.concat();
    let (want, want_counters) = userspace(&h.plan, &msgs, true);
    assert_eq!(
        want.last(),
        Some(&Verdict::Drop),
        "the stream exceeds a drop limit"
    );
    let mut failures = Vec::new();
    let pats = patterns(bytes.len());
    for cuts in &pats {
        let before = h.open_flow();
        let mut dropped = false;
        for (at, seg) in segments(&h, &bytes, cuts) {
            let (v, out) = h.run(&seg);
            if v == DROP {
                dropped = true;
                break;
            }
            if out != seg {
                failures.push(format!(
                    "cuts {cuts:?}: segment at {at} modified in drop mode"
                ));
            }
        }
        let d = delta(&h.counters(), &before);
        if !dropped || d != want_counters {
            failures.push(format!(
                "cuts {cuts:?}: dropped {dropped}, slot counters {d:?}, userspace {want_counters:?}"
            ));
        }
    }
    println!(
        "{} cut patterns of a {}-byte stream",
        pats.len(),
        bytes.len()
    );
    assert_agree(&failures, pats.len());
}
