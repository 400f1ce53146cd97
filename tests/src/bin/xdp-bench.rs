//! `cargo xtask bench xdp`: nanoseconds per packet of the XDP programs, per case,
//! and the ratio to a bare `XDP_PASS` program, all measured in one run.
//!
//! Method: BPF_PROG_TEST_RUN (`aya::programs::TestRun`), one run per syscall, the
//! kernel's own per-run duration summed over N runs (default 1,000,000 per case).
//! One run per syscall because the fast path keeps per-flow state: a repeated
//! segment is a retransmission after its first run. Before each run the flow's state
//! is put back (a map write, outside the timed region), so every run takes the full
//! path. Needs root.

use std::time::Duration;

use aya::programs::{TestRun, TestRunOptions, Xdp};
use dra::dataplane::{self, Maps, Plan};
use dra_tests::pkt::{self, Frame, TCP_ACK, TCP_PSH};

const CONFIG: &str = r#"
[global]
origin_host = "dra.lab.example"
origin_realm = "lab.example"
[[listener]]
address = "198.18.1.1:3868"
[[peer]]
name = "pgw1"
origin_host = "pgw1.lab.example"
realm = "lab.example"
addresses = ["198.18.1.2"]
role = "client"
[[peer]]
name = "pcrf1"
origin_host = "pcrf1.pcrf.lab.example"
realm = "pcrf.lab.example"
role = "server"
connect = "198.18.2.2:3868"
[[route]]
realm = "*"
peer = "pcrf1"
[[peer_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
rate = 1000000000
burst = 1000000
[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = "gx"
command = "ccr"
request_type = "initial"
rate = 1000000000
burst = 1000000
[[message_rate_limit_profile]]
peer = "pgw1"
direction = "ingress"
application = "gx"
command = "ccr"
request_type = "termination"
rate = 0.001
burst = 1
"#;

struct Case {
    name: &'static str,
    prog: &'static str,
    pkt: Vec<u8>,
}

fn main() {
    let runs: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let cfg = dra::config::parse(CONFIG, "bench.toml").expect("config");
    let plan = Plan::new(&cfg).expect("plan");
    let mut ebpf = dataplane::open().expect("eBPF object");
    dataplane::load_xdp(&mut ebpf).expect("load");
    {
        let p: &mut Xdp = ebpf.program_mut("dra_xdp_pass").unwrap().try_into().unwrap();
        p.load().expect("load dra_xdp_pass");
    }
    let mut maps = Maps::take(&mut ebpf).expect("maps");
    maps.write_plan(&plan).expect("plan");

    let f = Frame::v4("198.18.1.2", "198.18.1.1");
    let seq = 1001;
    let seg = |payload: &[u8]| f.tcp(40000, 3868, seq, TCP_ACK | TCP_PSH, &[], payload);
    let i0 = pkt::ccr(dra_common::wire::app::GX, 1, 0);
    let four: Vec<u8> = (0..4).flat_map(|k| pkt::ccr(dra_common::wire::app::GX, 2, k)).collect();
    let cases = vec![
        Case { name: "bare XDP_PASS", prog: "dra_xdp_pass", pkt: seg(&i0) },
        Case { name: "non-Diameter TCP", prog: dataplane::XDP_PROGRAM, pkt: f.tcp(40000, 80, seq, TCP_ACK, &[], &i0) },
        Case {
            name: "unknown peer on 3868 (LPM miss, pass)",
            prog: dataplane::XDP_PROGRAM,
            pkt: Frame::v4("198.18.9.9", "198.18.1.1").tcp(40000, 3868, seq, TCP_ACK, &[], &i0),
        },
        Case { name: "Diameter answer", prog: dataplane::XDP_PROGRAM, pkt: seg(&pkt::cca(dra_common::wire::app::GX, 0)) },
        Case { name: "CCR-U admitted", prog: dataplane::XDP_PROGRAM, pkt: seg(&pkt::ccr(dra_common::wire::app::GX, 2, 0)) },
        Case { name: "CCR-I admitted through 2 buckets", prog: dataplane::XDP_PROGRAM, pkt: seg(&i0) },
        Case { name: "CCR-I over limit (marked)", prog: dataplane::XDP_PROGRAM, pkt: seg(&pkt::ccr(dra_common::wire::app::GX, 3, 0)) },
        Case { name: "segment with 4 messages", prog: dataplane::XDP_PROGRAM, pkt: seg(&four) },
    ];
    // The over-limit case uses the CCR-T profile (rate 0.001/s, burst 1): after its
    // first run every run is over the limit. Spend the burst now.
    let syn = f.tcp(40000, 3868, seq - 1, pkt::TCP_SYN, &[], &[]);

    let mut results = Vec::new();
    for c in &cases {
        let mut total = Duration::ZERO;
        let mut out = vec![0u8; c.pkt.len() + 64];
        let mut verdict = 0;
        for _ in 0..runs {
            // Fresh flow state for the segment (untimed): as after its SYN.
            if c.prog != "dra_xdp_pass" {
                maps.clear_flows();
                let p: &mut Xdp = ebpf.program_mut(dataplane::XDP_PROGRAM).unwrap().try_into().unwrap();
                let mut o = vec![0u8; syn.len() + 64];
                let mut opts = TestRunOptions::new();
                opts.data_in = Some(&syn);
                opts.data_out = Some(&mut o);
                p.test_run(opts).expect("syn");
            }
            let p: &mut Xdp = ebpf.program_mut(c.prog).unwrap().try_into().unwrap();
            let mut opts = TestRunOptions::new();
            opts.data_in = Some(&c.pkt);
            opts.data_out = Some(&mut out);
            let r = p.test_run(opts).expect("test run");
            total += r.duration;
            verdict = r.return_value;
        }
        let ns = total.as_nanos() as f64 / runs as f64;
        results.push((c.name, ns, verdict));
    }
    let base = results[0].1;
    println!("XDP ns/packet, {runs} runs per case (BPF_PROG_TEST_RUN, kernel-timed, one run per syscall)");
    println!("| case | ns/packet | × bare XDP_PASS | verdict |");
    println!("|---|---:|---:|---|");
    for (name, ns, v) in &results {
        let verdict = match v {
            1 => "DROP",
            2 => "PASS",
            _ => "other",
        };
        println!("| {name} | {ns:.1} | {:.2} | {verdict} |", ns / base);
    }
    let json: Vec<String> = results
        .iter()
        .map(|(n, ns, _)| format!("{{\"case\":\"{n}\",\"ns_per_packet\":{ns:.2},\"ratio_to_pass\":{:.3}}}", ns / base))
        .collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("xdp-latest.json");
    std::fs::write(&file, format!("{{\"runs\":{runs},\"cases\":[{}]}}\n", json.join(","))).expect("write results");
    println!("written: {}", file.display());
}
