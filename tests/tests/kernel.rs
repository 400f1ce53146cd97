//! The fast path on the kernel these tests run on (this machine's, or a guest of the
//! kernel matrix, `cargo xtask test`): what `dra verify` reports, and what `dra run`
//! with XDP does — on a kernel that can load the programs it attaches them; on one that
//! cannot (a feature missing: Debian 11's 5.10 has no `bpf_loop`) it refuses to start
//! naming the feature, and with `[fast_path] fallback = "userspace"` it starts and the
//! agent's limiter holds the same limits. Either way a CCR-I limit holds exactly: 50/s
//! each for CCR-I and CCR-T, or, where the gateway offers less than twice that (an
//! emulated guest), again at an eighth of the rate it offered.
//!
//! `DRA_EXPECT_FAST_PATH` (set by the matrix for each kernel: `full` or `refused`)
//! is checked against the probe, so a kernel that should load the programs and does
//! not fails here instead of passing through the fallback.
//!
//! Topology: gw (198.18.1.2) — veth — dra (198.18.1.1, `--iface`) — veth — srv
//! (198.18.2.2, a PCRF answering at once). Namespaces and pins are removed on drop.

use std::{net::SocketAddr, process::Command, time::Duration};

use dra::dataplane::{
    kernel::{BPF_LOOP, Hook, KernelFeatures},
    verify,
};
use dra_tests::{
    agent::{Agent, dra_bin},
    netns::GwDraSrv,
    support::{Pins, TempDir, gw_dra_srv_config},
    traffic::{self, closed_loop},
};
use dra_tools::loadgen::closed::ClosedReport;

/// The probe, checked against what the matrix expects of this kernel.
fn kernel() -> KernelFeatures {
    let k = KernelFeatures::probe();
    let xdp = k.unsupported(Hook::Xdp);
    match std::env::var("DRA_EXPECT_FAST_PATH").as_deref() {
        Ok("full") => assert_eq!(xdp, None, "the fast path must load on {}", k.release),
        Ok("refused") => {
            let u = xdp.unwrap_or_else(|| panic!("{} was expected to lack bpf_loop", k.release));
            assert!(u.missing.contains(&BPF_LOOP), "{u}");
        }
        Ok(other) => panic!("DRA_EXPECT_FAST_PATH={other}: full or refused"),
        Err(_) => {}
    }
    k
}

#[test]
fn dra_verify_names_the_kernel_its_features_and_every_programs_verdict() {
    let k = kernel();
    let out = Command::new(dra_bin()).arg("verify").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(format!("kernel {}", k.release).as_str()));
    for (f, _) in &k.present {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{} (", f.name))),
            "feature {} not reported",
            f.name
        );
    }
    let mut all = true;
    for (name, hook) in verify::programs() {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}"));
        match k.unsupported(hook) {
            None => assert!(
                line.contains("loaded (") && line.contains("instructions processed"),
                "{line}"
            ),
            Some(u) => {
                all = false;
                assert!(line.contains("not loaded: kernel"), "{line}");
                for m in &u.missing {
                    assert!(line.contains(m.name), "{line} does not name {}", m.name);
                }
            }
        }
    }
    assert_eq!(out.status.success(), all, "exit status {:?}", out.status);
}

/// The CCR-I and the CCR-T limit of the runs below (the closed loop alternates them),
/// where the gateway offers at least twice as much.
const LIMIT: f64 = 50.0;
const WARMUP: Duration = Duration::from_secs(2);
const MEASURE: Duration = Duration::from_secs(5);

/// The limit (each class) for a gateway that offered `offered` requests a second (both
/// classes): an eighth of it (each class gets half, and twice the limit is needed, with
/// a margin of two), even (its burst is half of it), between 10/s and [`LIMIT`].
fn sized_limit(offered: f64) -> f64 {
    (2.0 * (offered / 16.0).floor()).clamp(10.0, LIMIT)
}

/// The measured window at `limit` each: [`MEASURE`], longer where the limit is low, so
/// that at least 500 requests are admitted in it (a request more or less at an edge of
/// the window is then at most 0.2 %).
fn window(limit: f64) -> Duration {
    MEASURE.max(Duration::from_secs_f64((250.0 / limit).ceil()))
}

fn config(fallback: &str, socket: &std::path::Path, limit: f64) -> String {
    // A burst of 0.5 s: a stall of an emulated guest shorter than that costs no
    // admission (the bucket banks it; the warm-up's overload has emptied it before the
    // window, so the burst adds nothing to the window's count).
    let limit = |rt: &str| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"{rt}\"\n\
             rate = {limit}\nburst = {}\naction = \"reject\"\n",
            limit / 2.0
        )
    };
    gw_dra_srv_config("")
        .with(&limit("initial"))
        .with(&limit("termination"))
        // The agent's overload control off: the closed loop keeps the agent saturated (in
        // an emulated guest, later than its target delay), and every request must be
        // answered by the PCRF or the limit, none shed.
        .with(&format!(
            "[fast_path]\nfallback = \"{fallback}\"\n\n[control]\nsocket = \"{}\"\n\n\
             [overload]\nenabled = false\n",
            socket.display()
        ))
        .to_string()
}

struct Lab {
    net: GwDraSrv,
    tmp: TempDir,
    pins: Pins,
}

impl Lab {
    fn new() -> Lab {
        Lab {
            net: GwDraSrv::new("k", 1, 2),
            tmp: TempDir::new("dra-kernel-"),
            pins: Pins::new("dra-kernel-"),
        }
    }

    /// `dra run --iface` on the gateways' side with `fallback` and the limits at
    /// `limit` each (its files named `name`; the fast path detached on exit: a next run
    /// starts from fresh maps and buckets).
    fn agent(&self, name: &str, fallback: &str, limit: f64) -> Agent {
        let cfg = self.tmp.0.join(format!("{name}.toml"));
        let socket = self.tmp.0.join(format!("{name}.sock"));
        std::fs::write(&cfg, config(fallback, &socket, limit)).unwrap();
        let args = [
            "--config",
            cfg.to_str().unwrap(),
            "--iface",
            &self.net.client.b_if,
            "--pin-dir",
            self.pins.0.to_str().unwrap(),
            "--detach-on-exit",
        ];
        Agent::start(
            &self.net.dra,
            &args,
            &self.tmp.0.join(format!("{name}.log")),
        )
    }
}

#[test]
fn without_a_fallback_dra_run_attaches_xdp_or_refuses_naming_the_missing_feature() {
    let k = kernel();
    let lab = Lab::new();
    // The PCRF the agent dials: ready once it is open (XDP attached before that).
    let _pcrf = traffic::pcrf(&lab.net.srv, "198.18.2.2:3868".parse().unwrap());
    let mut agent = lab.agent("dra-none", "none", LIMIT);
    match k.unsupported(Hook::Xdp) {
        None => {
            agent.wait_ready(Duration::from_secs(20));
            let log = agent.log_text();
            assert!(log.contains("fast path attached"), "log:\n{log}");
        }
        Some(u) => {
            let st = agent.wait_exit(Duration::from_secs(20));
            let log = agent.log_text();
            assert_eq!(st.and_then(|s| s.code()), Some(3), "{st:?}; log:\n{log}");
            for want in [k.release.as_str(), "bpf_loop", "fallback = \"userspace\""] {
                assert!(
                    log.contains(want),
                    "the refusal does not say {want:?}:\n{log}"
                );
            }
            assert!(!lab.pins.0.exists(), "nothing may be pinned: {u}");
        }
    }
}

#[test]
fn with_the_userspace_fallback_the_limit_holds_whichever_part_enforces_it() {
    let k = kernel();
    let lab = Lab::new();
    let _pcrf = traffic::pcrf(&lab.net.srv, "198.18.2.2:3868".parse().unwrap());
    // At LIMIT; where the gateway offered less than twice that (a slower machine), again
    // at a limit sized from what it offered.
    let mut limit_each = LIMIT;
    let mut run = fallback_run(&lab, &k, limit_each);
    let sized = sized_limit(run.offered);
    if run.offered < 2.0 * 2.0 * limit_each && sized < limit_each {
        println!(
            "offered {:.1}/s, less than twice the limits of {limit_each}/s each: again at \
             {sized}/s each",
            run.offered
        );
        limit_each = sized;
        run = fallback_run(&lab, &k, limit_each);
    }
    let FallbackRun {
        offered,
        admitted,
        rejected,
        report,
    } = run;
    let limit = 2.0 * limit_each;
    assert!(
        (admitted - limit).abs() / limit <= 0.02,
        "admitted {admitted:.1}/s, limit {limit}/s"
    );
    // The precondition, measured over the window: offered at least twice the limit.
    assert!(
        offered >= 2.0 * limit,
        "offered {offered:.1}/s, less than twice the limit of {limit}/s ({rejected} rejected)"
    );
    let answered: u64 = report.total_answered.values().sum();
    assert_eq!(report.unanswered, 0);
    assert_eq!(answered, report.total_sent, "every request answered once");
}

/// What one run with the userspace fallback measured, per second over the gateway's
/// window: offered, admitted (answered by the PCRF: 2001, or 5002 for the CCR-T of a
/// session whose CCR-I the limit rejected); and rejected in the window.
struct FallbackRun {
    offered: f64,
    admitted: f64,
    rejected: u64,
    report: ClosedReport,
}

/// `dra run` with `[fast_path] fallback = "userspace"` and the limits at `limit` each;
/// `dra status` says who enforces them (checked against `k`), then the closed loop.
fn fallback_run(lab: &Lab, k: &KernelFeatures, limit: f64) -> FallbackRun {
    let name = format!("dra-userspace-{limit}");
    let mut agent = lab.agent(&name, "userspace", limit);
    agent.wait_ready(Duration::from_secs(20));
    // `dra status` says who enforces the ingress limits, and why.
    let status = status(&lab.tmp.0.join(format!("{name}.toml")));
    let line = status
        .lines()
        .find(|l| l.starts_with("ingress limits: "))
        .unwrap_or_else(|| panic!("no ingress line in:\n{status}"));
    match k.unsupported(Hook::Xdp) {
        None => assert_eq!(
            line,
            format!("ingress limits: XDP on {}", lab.net.client.b_if)
        ),
        Some(u) => {
            assert!(
                line.contains("the agent (fallback = \"userspace\""),
                "{line}"
            );
            assert!(line.contains(&u.to_string()), "{line}");
            // Said once in the log.
            assert_eq!(
                agent
                    .log_text()
                    .matches("the agent enforces the ingress limits")
                    .count(),
                1
            );
        }
    }
    let report = closed_loop(
        &lab.net.gw,
        "198.18.1.1:3868".parse::<SocketAddr>().unwrap(),
        "198.18.1.2".parse().unwrap(),
        16,
        WARMUP,
        window(limit),
    );
    agent.stop();
    // The window as the gateway timed it (requests sent between its two edges).
    let secs = report.measured.as_secs_f64();
    let run = FallbackRun {
        offered: report.sent as f64 / secs,
        admitted: (report.decided_with(2001) + report.decided_with(5002)) as f64 / secs,
        rejected: report.answered_with(3002),
        report,
    };
    let both = 2.0 * limit;
    println!(
        "{line}: offered {:.1}/s, admitted {:.1}/s (limit {both}/s, error {:+.2} %), \
         rejected {} in the window of {secs:.1} s; sent {} answered {:?} unanswered {}",
        run.offered,
        run.admitted,
        100.0 * (run.admitted - both) / both,
        run.rejected,
        run.report.total_sent,
        run.report.total_answered,
        run.report.unanswered
    );
    run
}

/// `dra status` of the running agent (its control socket is in the namespace's reach
/// through the filesystem).
fn status(cfg: &std::path::Path) -> String {
    let out = Command::new(dra_bin())
        .args(["status", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
