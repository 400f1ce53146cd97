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
//! Goal (P1): CCR-I through two buckets at most
//! [`GOAL_NET_NS`] ns per packet net of the bare XDP_PASS of the same run. Beside it,
//! the floor: the same packet through `dra_xdp_floor` (dra-ebpf/src/floor.rs), which makes
//! the goal case's lookups and bucket charges and nothing else; the difference is what
//! the framing costs.
//!
//! A/B: `xdp-bench [RUNS [ROUNDS]] --object LABEL=PATH --object LABEL=PATH ...` runs the
//! same cases on each given eBPF object (built by another commit; its maps must have
//! this build's layout), interleaved run for run, and prints each case's median per
//! object and the ratio to the first. Nothing is written then (P1 is this build's).

use std::time::Duration;

use aya::{Ebpf, programs::Xdp};
use dra::dataplane::{self, Maps, Plan};
use dra_report::xdp::{XdpCase, XdpGoal, XdpReport};
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
/// The floor of the goal case: its lookups and charges without the framing.
const FLOOR_PROGRAM: &str = "dra_xdp_floor";
const FLOOR_CASE: &str = "floor: CCR-I's lookups and 2 buckets, no framing";
const FLOOR_WARM_CASE: &str = "floor, warm flow (after a CCR-I)";
/// A CCR-I of pgw2, always over its limit.
const OVER_CASE: &str = "CCR-I over limit (marked)";

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
    /// What is run untimed before every run, after the flow's state was removed: the
    /// SYN that starts this case's flow, and for a warm flow the message before.
    setup: Vec<Vec<u8>>,
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

/// One eBPF object under test: the one built into this binary, or one from a file.
struct Object {
    label: String,
    ebpf: Ebpf,
    maps: Maps,
}

/// Loads the eBPF object at `path` as the agent does, with the plan of `config`.
fn load_file(path: &str, config: &str) -> (Ebpf, Maps) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // The ELF parser wants the object 8-byte aligned (as include_bytes_aligned gives it).
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: a u64 buffer viewed as the bytes it holds (at least bytes.len() of them).
    let aligned =
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), bytes.len()) };
    aligned.copy_from_slice(&bytes);
    let mut ebpf = Ebpf::load(aligned).unwrap_or_else(|e| panic!("{path}: {e}"));
    dataplane::load_xdp(&mut ebpf).unwrap_or_else(|e| panic!("{path}: {e}"));
    let cfg = dra::config::parse(config, "bench.toml").expect("config");
    let mut maps = Maps::take(&mut ebpf).unwrap_or_else(|e| panic!("{path}: {e}"));
    maps.write_plan(&Plan::new(&cfg).expect("plan"))
        .expect("write plan");
    (ebpf, maps)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut numbers = Vec::new();
    let mut files: Vec<(String, String)> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--object" {
            let v = it.next().expect("--object LABEL=PATH");
            let (label, path) = v.split_once('=').expect("--object LABEL=PATH");
            files.push((label.to_string(), path.to_string()));
        } else {
            numbers.push(
                a.parse::<u32>()
                    .unwrap_or_else(|_| panic!("not a number: {a}")),
            );
        }
    }
    let runs = numbers.first().copied().unwrap_or(1_000_000);
    let rounds = numbers.get(1).copied().unwrap_or(20);
    let per_round = (runs / rounds).max(1);
    let mut objects: Vec<Object> = if files.is_empty() {
        let (ebpf, maps, _plan) = load_object(&config(), "bench.toml", Hook::Xdp);
        vec![Object {
            label: String::new(),
            ebpf,
            maps,
        }]
    } else {
        files
            .iter()
            .map(|(label, path)| {
                let (ebpf, maps) = load_file(path, &config());
                Object {
                    label: label.clone(),
                    ebpf,
                    maps,
                }
            })
            .collect()
    };
    for o in &mut objects {
        let p: &mut Xdp = o
            .ebpf
            .program_mut("dra_xdp_pass")
            .unwrap()
            .try_into()
            .unwrap();
        p.load().expect("load dra_xdp_pass");
        // The floor (see dra-ebpf/src/floor.rs); objects built before it have none.
        if let Some(p) = o.ebpf.program_mut(FLOOR_PROGRAM) {
            let p: &mut Xdp = p.try_into().unwrap();
            p.load().expect("load the floor");
        }
        // Loaded (verified) only to report its verifier cost beside the XDP programs'.
        dataplane::load_tc(&mut o.ebpf).expect("the verifier accepts TC");
    }
    let verified: Vec<String> = objects.iter().map(verifier_cost).collect();
    for (o, v) in objects.iter().zip(&verified) {
        println!(
            "verifier, instructions processed{}: {v}",
            label_suffix(&o.label)
        );
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
        setup: vec![syn(f)],
        expect,
    };
    // A flow that already carried one request of the class: the timed segment follows
    // it (every packet of a connection after its first).
    let warm = |name, prog, earlier: Vec<u8>, timed: Vec<u8>, f: &Frame| Case {
        name,
        prog,
        pkt: f.tcp(
            40000,
            3868,
            seq + earlier.len() as u32,
            TCP_ACK | TCP_PSH,
            &[],
            &timed,
        ),
        setup: vec![syn(f), seg(f, &earlier)],
        expect: Expect::Unchanged,
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
            FLOOR_CASE,
            FLOOR_PROGRAM,
            seg(&f1, &i0),
            &f1,
            Expect::Unchanged,
        ),
        case(OVER_CASE, xdp, over, &f2, Expect::Marked(flags_at)),
        case(
            "segment with 4 messages",
            xdp,
            seg(&f1, &four),
            &f1,
            Expect::Unchanged,
        ),
        warm(
            "CCR-U admitted, warm flow (after a CCR-U)",
            xdp,
            pkt::ccr(gx, 2, 1),
            pkt::ccr(gx, 2, 0),
            &f1,
        ),
        warm(
            "CCR-I through 2 buckets, warm flow (after a CCR-I)",
            xdp,
            pkt::ccr(gx, 1, 1),
            i0.clone(),
            &f1,
        ),
        warm(
            FLOOR_WARM_CASE,
            FLOOR_PROGRAM,
            pkt::ccr(gx, 1, 1),
            i0.clone(),
            &f1,
        ),
    ];
    // A case whose program an object lacks (the floor, in objects built before it) is
    // left out of the run.
    let cases: Vec<Case> = cases
        .into_iter()
        .filter(|c| objects.iter().all(|o| o.ebpf.program(c.prog).is_some()))
        .collect();
    // pgw2's CCR-I limit (0.001/s, burst 1): spend the burst, so every timed run is over.
    let over = cases
        .iter()
        .find(|c| c.name == OVER_CASE)
        .expect("over-limit case");
    let mut out = Vec::new();
    for o in &objects {
        for p in &over.setup {
            test_run_xdp(&o.ebpf, xdp, p, &mut out);
        }
        test_run_xdp(&o.ebpf, xdp, &over.pkt, &mut out);
    }

    // per_case[object][case]: one mean per round.
    let mut per_case: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); cases.len()]; objects.len()];
    let mut wrong: Vec<String> = Vec::new();
    for round in 0..rounds {
        for k in 0..cases.len() {
            // Interleaved, and a different case first in every round.
            let i = (k + round as usize) % cases.len();
            let c = &cases[i];
            let mut total = vec![Duration::ZERO; objects.len()];
            for r in 0..per_round {
                // The objects run for run, so they share the machine's moods, each first
                // as often as the others: the object that runs right after another finds
                // the kernel's paths warm (a few % in a first-vs-second comparison of
                // two identical paths).
                let count = objects.len();
                for k in 0..count {
                    let n = (k + r as usize) % count;
                    let o = &mut objects[n];
                    // Fresh flow state (untimed), for every case alike: as after its SYN.
                    o.maps.clear_flows();
                    for p in &c.setup {
                        test_run_xdp(&o.ebpf, xdp, p, &mut out);
                    }
                    let (v, d) = test_run_xdp(&o.ebpf, c.prog, &c.pkt, &mut out);
                    total[n] += d;
                    if r == 0 && !output_ok(c, v, &out) {
                        let w =
                            format!("{}{}: verdict {v}, output not as expected", o.label, c.name);
                        if !wrong.contains(&w) {
                            wrong.push(w);
                        }
                    }
                }
            }
            for (n, t) in total.iter().enumerate() {
                per_case[n][i].push(t.as_nanos() as f64 / per_round as f64);
            }
        }
    }
    let stats: Vec<Vec<(f64, f64, f64)>> = per_case
        .iter_mut()
        .map(|o| {
            o.iter_mut()
                .map(|v| {
                    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().copied().fold(0.0, f64::max);
                    (median(v), lo, hi)
                })
                .collect()
        })
        .collect();
    println!(
        "XDP ns/packet: {per_round} runs per case in each of {rounds} interleaved rounds \
         (BPF_PROG_TEST_RUN, kernel-timed, one run per syscall); median of the rounds (min–max)"
    );
    if objects.len() > 1 {
        ab_table(&objects, &cases, &stats);
        if !wrong.is_empty() {
            eprintln!("wrong verdicts or output:\n{}", wrong.join("\n"));
            std::process::exit(1);
        }
        return;
    }
    let stats = &stats[0];
    let base = stats[0].0;
    println!("| case | ns/packet | min–max | net of bare | × bare XDP_PASS |");
    println!("|---|---:|---:|---:|---:|");
    for (c, (m, lo, hi)) in cases.iter().zip(stats) {
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
    let net_of =
        |name: &str| stats[cases.iter().position(|c| c.name == name).expect(name)].0 - base;
    let floor = net_of(FLOOR_CASE);
    println!(
        "floor (the goal case's lookups and charges, no framing): {floor:.1} ns net \
         ({:.1} on a warm flow); the framing above it: {:.1} ns",
        net_of(FLOOR_WARM_CASE),
        net - floor
    );
    if !wrong.is_empty() {
        eprintln!("wrong verdicts or output:\n{}", wrong.join("\n"));
    }
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    let report = XdpReport {
        runs: (per_round * rounds) as u64,
        rounds: rounds as u64,
        goal: XdpGoal {
            case: GOAL_CASE.into(),
            max_net_ns: GOAL_NET_NS,
            net_ns: round2(net),
            met,
            floor_net_ns: round2(floor),
        },
        verdicts_ok: wrong.is_empty(),
        verifier_insns: verified[0].clone(),
        reference: cases[0].name.to_owned(),
        cases: cases
            .iter()
            .zip(stats)
            .map(|(c, (m, lo, hi))| XdpCase {
                case: c.name.to_owned(),
                ns_per_packet: round2(*m),
                ns_min: round2(*lo),
                ns_max: round2(*hi),
                net_ns: round2(m - base),
                ratio_to_pass: (m / base * 1000.0).round() / 1000.0,
            })
            .collect(),
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("xdp-latest.json");
    let text = serde_json::to_string(&report).expect("a report serializes");
    std::fs::write(&file, text + "\n").expect("write results");
    println!("written: {}", file.display());
    if !wrong.is_empty() {
        std::process::exit(1);
    }
}

/// " (LABEL)" for an A/B object, nothing for this build's.
fn label_suffix(label: &str) -> String {
    if label.is_empty() {
        String::new()
    } else {
        format!(" ({label})")
    }
}

/// The verifier's instruction count (instructions processed) of each program.
fn verifier_cost(o: &Object) -> String {
    let mut names: Vec<&str> = vec![dataplane::XDP_PROGRAM];
    names.extend(dataplane::XDP_TAIL_PROGRAMS.iter().map(|(_, n)| *n));
    names.push(dataplane::TC_PROGRAM);
    names
        .iter()
        .map(|n| {
            let count = o
                .ebpf
                .program(n)
                .and_then(|p| p.info().ok())
                .and_then(|i| i.verified_instruction_count());
            match count {
                Some(c) => format!("{n} {c}"),
                None => format!("{n} ?"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a case's run came out as it must: XDP_PASS, and the bytes unchanged or
/// marked (flags byte, valid checksum) as the case expects.
fn output_ok(c: &Case, v: u32, out: &[u8]) -> bool {
    v == PASS
        && match c.expect {
            Expect::Unchanged => out == c.pkt.as_slice(),
            Expect::Marked(at) => {
                out.len() == c.pkt.len()
                    && out[at] == c.pkt[at] | dra_common::wire::flags::RATE_LIMIT_MARK
                    && out[at] != c.pkt[at]
                    && pkt::tcp_checksum_ok(out, &Frame::v4("198.18.1.3", "198.18.1.1"))
            }
        }
}

/// A/B: each case's median per object, net of that object's bare XDP_PASS, and the
/// ratio of each net to the first object's.
fn ab_table(objects: &[Object], cases: &[Case], stats: &[Vec<(f64, f64, f64)>]) {
    let labels: Vec<&str> = objects.iter().map(|o| o.label.as_str()).collect();
    let ratios: Vec<String> = labels
        .iter()
        .map(|l| format!("{l} ÷ {}", labels[0]))
        .collect();
    println!(
        "| case | {} | net {} | net {} |",
        labels.join(" | "),
        labels.join(" | net "),
        ratios.join(" | net ")
    );
    println!("|---|{}", "---:|".repeat(3 * objects.len()));
    for (i, c) in cases.iter().enumerate() {
        let cells: Vec<String> = stats
            .iter()
            .map(|s| format!("{:.1} ({:.0}–{:.0})", s[i].0, s[i].1, s[i].2))
            .collect();
        let nets: Vec<f64> = stats.iter().map(|s| s[i].0 - s[0].0).collect();
        let ratios: Vec<String> = nets
            .iter()
            .map(|n| {
                if nets[0] > 0.0 {
                    format!("{:.2}", n / nets[0])
                } else {
                    "—".into()
                }
            })
            .collect();
        let nets: Vec<String> = nets.iter().map(|n| format!("{n:.1}")).collect();
        println!(
            "| {} | {} | {} | {} |",
            c.name,
            cells.join(" | "),
            nets.join(" | "),
            ratios.join(" | ")
        );
    }
}
