//! The fast path on the kernel these tests run on (this machine's, or a guest of the
//! kernel matrix, `cargo xtask test`): what `dra verify` reports, and what `dra run`
//! with XDP does — on a kernel that can load the programs it attaches them; on one that
//! cannot (a feature missing: Debian 11's 5.10 has no `bpf_loop`) it refuses to start
//! naming the feature, and with `[fast_path] fallback = "userspace"` it starts and the
//! agent's limiter holds the same limits. Either way a CCR-I limit holds exactly.
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

/// The CCR-I and the CCR-T limit of the runs below (the closed loop alternates them).
const LIMIT: f64 = 50.0;
const WARMUP: Duration = Duration::from_secs(2);
const MEASURE: Duration = Duration::from_secs(5);

fn config(fallback: &str, socket: &std::path::Path) -> String {
    let limit = |rt: &str| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"{rt}\"\n\
             rate = {LIMIT}\naction = \"reject\"\n"
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

    /// `dra run --iface` on the gateways' side with `fallback`.
    fn agent(&self, fallback: &str) -> Agent {
        let cfg = self.tmp.0.join(format!("dra-{fallback}.toml"));
        let socket = self.tmp.0.join(format!("dra-{fallback}.sock"));
        std::fs::write(&cfg, config(fallback, &socket)).unwrap();
        let args = [
            "--config",
            cfg.to_str().unwrap(),
            "--iface",
            &self.net.client.b_if,
            "--pin-dir",
            self.pins.0.to_str().unwrap(),
        ];
        Agent::start(
            &self.net.dra,
            &args,
            &self.tmp.0.join(format!("dra-{fallback}.log")),
        )
    }
}

#[test]
fn without_a_fallback_dra_run_attaches_xdp_or_refuses_naming_the_missing_feature() {
    let k = kernel();
    let lab = Lab::new();
    // The PCRF the agent dials: ready once it is open (XDP attached before that).
    let _pcrf = traffic::pcrf(&lab.net.srv, "198.18.2.2:3868".parse().unwrap());
    let mut agent = lab.agent("none");
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
    let mut agent = lab.agent("userspace");
    let log = || agent_log(&lab, "userspace");
    agent.wait_ready(Duration::from_secs(20));
    // `dra status` says who enforces the ingress limits, and why.
    let status = status(&lab);
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
                log()
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
        MEASURE,
    );
    agent.stop();
    // Admitted: answered by the PCRF, 2001, or 5002 for the CCR-T of a session whose
    // CCR-I the limit rejected (the PCRF never saw that session).
    let limit = 2.0 * LIMIT;
    // The window as the gateway timed it (requests sent between its two edges).
    let secs = report.measured.as_secs_f64();
    let admitted = (report.decided_with(2001) + report.decided_with(5002)) as f64 / secs;
    let rejected = report.answered_with(3002);
    let offered = report.sent as f64 / secs;
    println!(
        "{line}: offered {offered:.1}/s, admitted {admitted:.1}/s (limit {limit}/s, error \
         {:+.2} %), rejected {rejected} in the window; sent {} answered {:?} unanswered {}",
        100.0 * (admitted - limit) / limit,
        report.total_sent,
        report.total_answered,
        report.unanswered
    );
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

fn agent_log(lab: &Lab, fallback: &str) -> String {
    std::fs::read_to_string(lab.tmp.0.join(format!("dra-{fallback}.log"))).unwrap_or_default()
}

/// `dra status` of the running agent (its control socket is in the namespace's reach
/// through the filesystem).
fn status(lab: &Lab) -> String {
    let cfg = lab.tmp.0.join("dra-userspace.toml");
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
