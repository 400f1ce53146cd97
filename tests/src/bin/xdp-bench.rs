//! `cargo xtask bench xdp`: nanoseconds per packet of the XDP programs, per case,
//! and the ratio to a bare `XDP_PASS` program, all measured in one run.
//!
//! Method: BPF_PROG_TEST_RUN (`aya::programs::TestRun`), one run per syscall, the
//! kernel's own per-run duration. One run per syscall because the fast path keeps
//! per-flow state: a repeated segment is a retransmission after its first run. Before
//! each run — of every case, the bare one too — the flow's state is put back (its
//! entry removed and the SYN run again, outside the timed region), so every run takes
//! the full path. The cases are interleaved: N runs per case (default 1,000,000) are
//! split into rounds, each round runs every case in turn (rotating the order), and the
//! median over rounds is reported with the spread (min–max). Each case's verdict and
//! output bytes are checked (an admitted request leaves the packet as it was; an
//! over-limit one is marked in its flags byte). Needs root.
//!
//! Goal (P1, the fast-path cost issue): CCR-I through two buckets at most
//! [`GOAL_NET_NS`] ns per packet net of the bare XDP_PASS of the same run.

use std::time::Duration;

use aya::programs::Xdp;
use dra::dataplane;
use dra_tests::pkt::{self, Frame, TCP_ACK, TCP_PSH};
use dra_tests::support::{Hook, LAB_REALM, lab_config, load_object, test_run_xdp};

/// pgw1 with limits that never bind; pgw2 whose CCR-I is always over its limit.
fn config() -> String {
    let ccr_i = |peer: &str, rate: &str, burst: u32| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"{peer}\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"initial\"\n\
             rate = {rate}\nburst = {burst}\n"
        )
    };
    lab_config()
        .with(
            "[[peer_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             rate = 1000000000\nburst = 1000000\n",
        )
        .with(&ccr_i("pgw1", "1000000000", 1_000_000))
        .client("pgw2", LAB_REALM, &["198.18.1.3"], "")
        .with(&ccr_i("pgw2", "0.001", 1))
        .to_string()
}

/// P1 goal: CCR-I through two buckets, ns per packet net of the bare XDP_PASS.
const GOAL_NET_NS: f64 = 120.0;
/// The goal case.
const GOAL_CASE: &str = "CCR-I admitted through 2 buckets";

const PASS: u32 = 2;

/// What a case's packet must come out as.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// XDP_PASS, bytes unchanged.
    Unchanged,
    /// XDP_PASS with the rate-limit mark set on the flags byte at this frame offset.
    Marked(usize),
}

struct Case {
    name: &'static str,
    prog: &'static str,
    pkt: Vec<u8>,
    /// The SYN that starts this case's flow (run untimed before every run).
    syn: Vec<u8>,
    expect: Expect,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let runs: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: u32 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let per_round = (runs / rounds).max(1);
    let (mut ebpf, mut maps, _plan) = load_object(&config(), "bench.toml", Hook::Xdp);
    {
        let p: &mut Xdp = ebpf
            .program_mut("dra_xdp_pass")
            .unwrap()
            .try_into()
            .unwrap();
        p.load().expect("load dra_xdp_pass");
    }

    let gx = dra_common::wire::app::GX;
    let (f1, f2) = (
        Frame::v4("198.18.1.2", "198.18.1.1"),
        Frame::v4("198.18.1.3", "198.18.1.1"),
    );
    let seq = 1001;
    let seg = |f: &Frame, payload: &[u8]| f.tcp(40000, 3868, seq, TCP_ACK | TCP_PSH, &[], payload);
    let syn = |f: &Frame| f.tcp(40000, 3868, seq - 1, pkt::TCP_SYN, &[], &[]);
    let i0 = pkt::ccr(gx, 1, 0);
    let four: Vec<u8> = (0..4).flat_map(|k| pkt::ccr(gx, 2, k)).collect();
    let over = seg(&f2, &i0);
    let flags_at = pkt::tcp_offset(&over) + 20 + 4;
    let case = |name, prog, pkt: Vec<u8>, f: &Frame, expect| Case {
        name,
        prog,
        pkt,
        syn: syn(f),
        expect,
    };
    let xdp = dataplane::XDP_PROGRAM;
    let cases = [
        case(
            "bare XDP_PASS",
            "dra_xdp_pass",
            seg(&f1, &i0),
            &f1,
            Expect::Unchanged,
        ),
        case(
            "non-Diameter TCP",
            xdp,
            f1.tcp(40000, 80, seq, TCP_ACK, &[], &i0),
            &f1,
            Expect::Unchanged,
        ),
        case(
            "unknown peer on 3868 (LPM miss, pass)",
            xdp,
            Frame::v4("198.18.9.9", "198.18.1.1").tcp(40000, 3868, seq, TCP_ACK, &[], &i0),
            &f1,
            Expect::Unchanged,
        ),
        case(
            "Diameter answer",
            xdp,
            seg(&f1, &pkt::cca(gx, 0)),
            &f1,
            Expect::Unchanged,
        ),
        case(
            "CCR-U admitted",
            xdp,
            seg(&f1, &pkt::ccr(gx, 2, 0)),
            &f1,
            Expect::Unchanged,
        ),
        case(GOAL_CASE, xdp, seg(&f1, &i0), &f1, Expect::Unchanged),
        case(
            "CCR-I over limit (marked)",
            xdp,
            over,
            &f2,
            Expect::Marked(flags_at),
        ),
        case(
            "segment with 4 messages",
            xdp,
            seg(&f1, &four),
            &f1,
            Expect::Unchanged,
        ),
    ];
    // pgw2's CCR-I limit (0.001/s, burst 1): spend the burst, so every timed run is over.
    let mut out = Vec::new();
    test_run_xdp(&ebpf, xdp, &cases[6].syn, &mut out);
    test_run_xdp(&ebpf, xdp, &cases[6].pkt, &mut out);

    let mut per_case: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut wrong: Vec<String> = Vec::new();
    for round in 0..rounds {
        for k in 0..cases.len() {
            // Interleaved, and a different case first in every round.
            let i = (k + round as usize) % cases.len();
            let c = &cases[i];
            let mut total = Duration::ZERO;
            for r in 0..per_round {
                // Fresh flow state (untimed), for every case alike: as after its SYN.
                maps.clear_flows();
                test_run_xdp(&ebpf, xdp, &c.syn, &mut out);
                let (v, d) = test_run_xdp(&ebpf, c.prog, &c.pkt, &mut out);
                total += d;
                if r == 0 {
                    let ok = v == PASS
                        && match c.expect {
                            Expect::Unchanged => out == c.pkt,
                            Expect::Marked(at) => {
                                out.len() == c.pkt.len()
                                    && out[at]
                                        == c.pkt[at] | dra_common::wire::flags::RATE_LIMIT_MARK
                                    && out[at] != c.pkt[at]
                                    && pkt::tcp_checksum_ok(
                                        &out,
                                        &Frame::v4("198.18.1.3", "198.18.1.1"),
                                    )
                            }
                        };
                    if !ok && !wrong.iter().any(|w| w.starts_with(c.name)) {
                        wrong.push(format!("{}: verdict {v}, output not as expected", c.name));
                    }
                }
            }
            per_case[i].push(total.as_nanos() as f64 / per_round as f64);
        }
    }
    let stats: Vec<(f64, f64, f64)> = per_case
        .iter_mut()
        .map(|v| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            (median(v), lo, hi)
        })
        .collect();
    let base = stats[0].0;
    println!(
        "XDP ns/packet: {per_round} runs per case in each of {rounds} interleaved rounds \
         (BPF_PROG_TEST_RUN, kernel-timed, one run per syscall); median of the rounds (min–max)"
    );
    println!("| case | ns/packet | min–max | net of bare | × bare XDP_PASS |");
    println!("|---|---:|---:|---:|---:|");
    for (c, (m, lo, hi)) in cases.iter().zip(&stats) {
        println!(
            "| {} | {m:.1} | {lo:.1}–{hi:.1} | {:.1} | {:.2} |",
            c.name,
            m - base,
            m / base
        );
    }
    let goal_i = cases
        .iter()
        .position(|c| c.name == GOAL_CASE)
        .expect("goal case");
    let net = stats[goal_i].0 - base;
    let met = net <= GOAL_NET_NS;
    println!(
        "goal: {GOAL_CASE} ≤ {GOAL_NET_NS:.0} ns/packet net of bare XDP_PASS; \
         measured {net:.1} ns net: {}",
        if met { "met" } else { "MISSED" }
    );
    if !wrong.is_empty() {
        eprintln!("wrong verdicts or output:\n{}", wrong.join("\n"));
    }
    let json: Vec<String> = cases
        .iter()
        .zip(&stats)
        .map(|(c, (m, lo, hi))| {
            format!(
                "{{\"case\":\"{}\",\"ns_per_packet\":{m:.2},\"ns_min\":{lo:.2},\
                 \"ns_max\":{hi:.2},\"net_ns\":{:.2},\"ratio_to_pass\":{:.3}}}",
                c.name,
                m - base,
                m / base
            )
        })
        .collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("xdp-latest.json");
    std::fs::write(
        &file,
        format!(
            "{{\"runs\":{},\"rounds\":{rounds},\"goal\":{{\"case\":\"{GOAL_CASE}\",\
             \"max_net_ns\":{GOAL_NET_NS},\"net_ns\":{net:.2},\"met\":{met}}},\
             \"verdicts_ok\":{},\"cases\":[{}]}}\n",
            per_round * rounds,
            wrong.is_empty(),
            json.join(",")
        ),
    )
    .expect("write results");
    println!("written: {}", file.display());
    if !wrong.is_empty() {
        std::process::exit(1);
    }
}
