//! Diameter over SCTP through the real `dra run`, on a kernel with SCTP (the kernel
//! matrix's guests; this machine's kernel has none, and there `dra run` must refuse an
//! SCTP listener naming what is missing).
//!
//! - Limits: four gateways (pgw1–pgw4, one address each) keep 25 requests each in
//!   flight over SCTP associations to a multihomed listener (two addresses); XDP on
//!   the gateways' veth; the group's Gx CCR-I and CCR-T limits are exact over 10 s
//!   (longer for a low limit: 250 requests of each class at least) in `reject` (every
//!   request the fast path marked answered 3002 with its Error-Message, every request
//!   answered once; burst 0.5 s) and not exceeded in `drop` (default burst, nothing
//!   lost). The PCRF is dialled over SCTP too. The limits are 100/s each; where the
//!   gateways offer less than twice that (an emulated guest), `reject` runs again at an
//!   eighth of the rate they offered, so that it is offered at least twice its limit; a
//!   run offered less fails naming the rate it measured.
//! - Multihoming: a gateway's association has two paths; the primary path's address is
//!   removed from the gateway mid-run, and the association keeps serving.
//! - Rate: the same closed loop over SCTP and over TCP, no limits, printed (no goal).
//! - Interop: freeDiameter 1.2.1 relays over SCTP on either side of the agent.
//!
//! `DRA_EXPECT_SCTP=yes` (set by the kernel matrix for its guests) makes a kernel
//! without SCTP a failure instead of the refusal test's case.
//!
//! Topology: gw (198.18.1.2–.5, 198.18.5.2) — veth — dra (198.18.1.1, 198.18.5.1; XDP)
//! — veth — srv (198.18.2.2, the PCRF). Namespaces and pins are removed on drop.

use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
    process::Command,
    time::Duration,
};

use dra::dataplane::{Maps, Plan};
use dra::transport::sctp;
use dra_common::wire::{MsgClass, avp as avp_code, cc_request_type as rt};
use dra_tests::{
    agent::{Agent, dra_bin, peer_state},
    netns::{GwDraSrv, Netns},
    support::{ConfigToml, LAB_REALM, PCRF_REALM, Pins, TempDir, scaled},
    traffic::{self, Server, in_ns},
};
use dra_tools::loadgen::{
    self, Sctp,
    closed::{self, ClosedConfig, ClosedReport},
    script::{ScriptedPeer, ccr, scripted_config},
    server::{LatencyDist, ServerConfig},
};

/// Whether this kernel has SCTP; a guest of the matrix must.
fn sctp_here() -> Result<(), String> {
    let r = sctp::supported();
    if std::env::var("DRA_EXPECT_SCTP").as_deref() == Ok("yes") {
        assert_eq!(r, Ok(()), "this kernel was expected to have SCTP");
    }
    r
}

/// Every test but the refusal needs SCTP: on a kernel without it (this machine's),
/// there is nothing to run — a skip, counted as one in `cargo xtask test`'s summary
/// (the matrix's guests run them).
macro_rules! need_sctp {
    () => {
        if let Err(e) = sctp_here() {
            dra_tests::support::skip("no SCTP on this kernel", &e);
            return;
        }
    };
}

const GATEWAYS: [&str; 4] = ["198.18.1.2", "198.18.1.3", "198.18.1.4", "198.18.1.5"];
/// pgw5, a fifth member of the group: one scripted gateway that reads a 3002's AVPs.
const PROBE: &str = "198.18.1.7";
const DRA_IP: &str = "198.18.1.1";
const DRA_IP2: &str = "198.18.5.1";
const GW_IP2: &str = "198.18.5.2";
const PCRF: &str = "198.18.2.2:3868";
/// The group's Gx CCR-I and CCR-T limits (each, per second), where the gateways offer
/// at least twice as much (the limits are exact only where the offered load keeps the
/// buckets spent).
const LIMIT_EACH: f64 = 100.0;
/// The least limit a slower machine's run is sized to.
const LIMIT_EACH_MIN: f64 = 10.0;

/// The limit (each class) for gateways that offered `offered` requests a second (both
/// classes) in `reject`: an eighth of it (each class gets half, and twice the limit is
/// needed, with a margin of two for a busier run), even (its burst is half of it), at
/// most [`LIMIT_EACH`].
fn sized_limit(offered: f64) -> f64 {
    (2.0 * (offered / 16.0).floor()).clamp(LIMIT_EACH_MIN, LIMIT_EACH)
}
const WARMUP: Duration = Duration::from_secs(2);
const MEASURE: Duration = Duration::from_secs(10);

/// The measured window of the limits runs at `limit` each: [`MEASURE`], longer where
/// the limit is low, so that each class admits at least 250 requests in it (a request
/// more or less at an edge of the window is then at most 0.4 %, well inside the 2 %).
fn window(limit: f64) -> Duration {
    MEASURE.max(Duration::from_secs_f64((250.0 / limit).ceil()))
}
const ERROR_MESSAGE: &str = "rate limit exceeded: gws Gx CCR";

struct Lab {
    net: GwDraSrv,
    tmp: TempDir,
    pins: Pins,
}

impl Lab {
    fn new(prefix: &str) -> Lab {
        let net = GwDraSrv::new(prefix, 1, 2);
        // The gateways' and the second path's addresses (one veth, two subnets).
        for ip in GATEWAYS[1..].iter().chain([&PROBE]) {
            netlab::ipn(
                &net.gw.name,
                &["addr", "add", &format!("{ip}/24"), "dev", &net.client.a_if],
            )
            .unwrap();
        }
        netlab::ipn(
            &net.gw.name,
            &[
                "addr",
                "add",
                &format!("{GW_IP2}/24"),
                "dev",
                &net.client.a_if,
            ],
        )
        .unwrap();
        netlab::ipn(
            &net.dra.name,
            &[
                "addr",
                "add",
                &format!("{DRA_IP2}/24"),
                "dev",
                &net.client.b_if,
            ],
        )
        .unwrap();
        net.full_checksums();
        // Path failure found in about a second (defaults: 5 retransmissions, RTO up
        // to 60 s, heartbeats every 30 s).
        for ns in [&net.gw, &net.dra, &net.srv] {
            ns.enter(|| {
                for (k, v) in [
                    ("rto_min", "100"),
                    ("rto_initial", "200"),
                    ("rto_max", "400"),
                    ("path_max_retrans", "2"),
                    ("hb_interval", "200"),
                ] {
                    std::fs::write(format!("/proc/sys/net/sctp/{k}"), v)
                        .unwrap_or_else(|e| panic!("net.sctp.{k}: {e}"));
                }
            })
            .unwrap();
        }
        Lab {
            net,
            tmp: TempDir::new(&format!("dra-{prefix}-")),
            pins: Pins::new(&format!("dra-{prefix}-")),
        }
    }

    /// `dra run` with XDP on the gateways' veth and `cfg`; waits until it is ready (XDP
    /// attached, pcrf1 open). Each run detaches on exit: the next starts from fresh maps
    /// and buckets.
    fn agent(&self, name: &str, cfg: &str) -> Agent {
        let path = self.tmp.0.join(format!("{name}.toml"));
        std::fs::write(&path, cfg).unwrap();
        let args = [
            "--config",
            path.to_str().unwrap(),
            "--iface",
            &self.net.client.b_if,
            "--pin-dir",
            self.pins.0.to_str().unwrap(),
            "--detach-on-exit",
        ];
        let log = self.tmp.0.join(format!("{name}.log"));
        let mut agent = Agent::start(&self.net.dra, &args, &log);
        agent.wait_ready(Duration::from_secs(30));
        agent
    }
}

/// The agent's SCTP port (its TCP listener is on [`TCP_PORT`]).
const SCTP_PORT: u16 = 3868;
const TCP_PORT: u16 = 3869;

/// The agent: an SCTP listener on both its gateway-side addresses and TCP on the
/// first, gateways pgw1–pgw4 in group gws (`limits`: more config), pcrf1 dialled over
/// SCTP. Its overload control is off: the closed loops keep it saturated (in an emulated
/// guest, later than its target delay), and every request they send must be answered
/// by the PCRF or the fast path's limit, none shed by the agent.
fn config(limits: &str) -> String {
    let mut t = ConfigToml::new(LAB_REALM, &[], "diameter_ports = [3868, 3869]").with(&format!(
        "[[listener]]\naddress = \"{DRA_IP}:{SCTP_PORT}\"\ntransport = \"sctp\"\n\
         multihome = [\"{DRA_IP2}\"]\n\n[[listener]]\naddress = \"{DRA_IP}:{TCP_PORT}\"\n\n\
         [control]\nsocket = \"{}\"\n\n[metrics]\naddress = \"127.0.0.1:9109\"\n\n\
         [overload]\nenabled = false\n",
        control_socket().display()
    ));
    for (i, ip) in GATEWAYS.iter().chain([&PROBE]).enumerate() {
        let n = i + 1;
        let more = if n == 1 {
            format!(", \"{GW_IP2}\"")
        } else {
            String::new()
        };
        t = t.with(&format!(
            "[[peer]]\nname = \"pgw{n}\"\norigin_host = \"pgw{n}.{LAB_REALM}\"\n\
             realm = \"{LAB_REALM}\"\naddresses = [\"{ip}\"{more}]\nrole = \"client\"\n\
             group = \"gws\"\ntransport = \"sctp\"\n"
        ));
    }
    t.group("gws", "")
        .server(
            "pcrf1",
            PCRF_REALM,
            PCRF,
            "addresses = [\"198.18.2.2\"]\ntransport = \"sctp\"\ngroup = \"pcrfs\"",
        )
        .group("pcrfs", "")
        .route(PCRF_REALM, "group = \"pcrfs\"")
        .with(limits)
        .to_string()
}

/// The group's CCR-I and CCR-T limits, `limit` each, with `action`.
fn limits(action: &str, limit: f64) -> String {
    ["initial", "termination"]
        .iter()
        .map(|r| {
            format!(
                "[[message_rate_limit_profile]]\ngroup = \"gws\"\ndirection = \"ingress\"\n\
                 application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"{r}\"\n\
                 rate = {limit}\naction = \"{action}\"\n{}",
                // reject: a burst of 0.5 s, so that a stall of the emulated guest shorter
                // than that loses no admission (the bucket banks it); drop: the default.
                if action == "reject" {
                    format!(
                        "burst = {}\nresult_code = 3002\nerror_message = \"{ERROR_MESSAGE}\"\n",
                        limit / 2.0
                    )
                } else {
                    String::new()
                }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The PCRF (`PCRF`), answering at once, over SCTP (or TCP), in `ns` until dropped.
fn pcrf(ns: &Netns, over_sctp: bool) -> Server {
    let mut c = traffic::pcrf_config(PCRF.parse().unwrap());
    c.sctp = over_sctp.then(Sctp::default);
    Server::start(ns, c)
}

/// Closed loops from the gateways at `binds` (each its own Origin-Host pgwN), `window`
/// in flight each, over SCTP to the listener (or TCP), run at once; their reports.
fn gateways(
    gw: &Netns,
    binds: &[(usize, IpAddr, Vec<IpAddr>)],
    window: usize,
    over_sctp: bool,
    warmup: Duration,
    measure: Duration,
) -> Vec<ClosedReport> {
    let threads: Vec<_> = binds
        .iter()
        .map(|(n, ip, multihome)| {
            let port = if over_sctp { SCTP_PORT } else { TCP_PORT };
            let mut c = ClosedConfig::new(format!("{DRA_IP}:{port}").parse().unwrap(), 1, window);
            c.bind = Some(*ip);
            c.origin_host_pattern = format!("pgw{n}.lab.example");
            c.warmup = warmup;
            c.measure = measure;
            c.drain = scaled(Duration::from_secs(10));
            c.sctp = over_sctp.then(|| Sctp {
                multihome: multihome.clone(),
            });
            let name = gw.name.clone();
            std::thread::spawn(move || {
                in_ns(&Netns::attach_existing(&name), async move {
                    closed::run(c).await.expect("closed loop")
                })
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn all_gateways() -> Vec<(usize, IpAddr, Vec<IpAddr>)> {
    GATEWAYS
        .iter()
        .enumerate()
        .map(|(i, ip)| (i + 1, ip.parse().unwrap(), Vec::new()))
        .collect()
}

/// Sums of the gateways' reports: (decided with `rc` …) helpers.
fn decided(r: &[ClosedReport], rc: u32) -> u64 {
    r.iter().map(|x| x.decided_with(rc)).sum()
}

fn sent_answered(r: &[ClosedReport]) -> (u64, u64, u64) {
    let sent = r.iter().map(|x| x.total_sent).sum();
    let answered = r
        .iter()
        .map(|x| x.total_answered.values().sum::<u64>())
        .sum();
    let unanswered = r.iter().map(|x| x.unanswered).sum();
    (sent, answered, unanswered)
}

#[test]
fn without_kernel_sctp_dra_run_refuses_an_sctp_listener_naming_it() {
    let Err(why) = sctp_here() else {
        dra_tests::support::skip(
            "this kernel has SCTP: nothing to refuse",
            "the refusal runs on a kernel without SCTP",
        );
        return;
    };
    let tmp = TempDir::new("dra-nosctp-");
    let cfg = tmp.0.join("dra.toml");
    std::fs::write(&cfg, config(&limits("reject", LIMIT_EACH))).unwrap();
    let check = Command::new(dra_bin())
        .args(["check-config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{stderr}");
    assert!(
        stderr.contains("use SCTP") && stderr.contains("no SCTP"),
        "{stderr}"
    );
    let ns = Netns::new("nsc").unwrap();
    let log = tmp.0.join("dra.log");
    let pins = Pins::new("dra-nosctp-");
    let mut agent = Agent::start(
        &ns,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--pin-dir",
            pins.0.to_str().unwrap(),
        ],
        &log,
    );
    let st = agent.wait_exit(Duration::from_secs(20));
    let text = agent.log_text();
    assert_eq!(st.and_then(|s| s.code()), Some(3), "{st:?}\n{text}");
    for want in ["listener 198.18.1.1:3868", "no SCTP", "modprobe sctp"] {
        assert!(
            text.contains(want),
            "the refusal does not say {want:?}:\n{text}"
        );
    }
    println!("refused as expected: {why}");
}

/// What one limits run measured.
struct LimitRun {
    /// Offered (sent in the window) per second, both classes, by the gateways.
    offered: f64,
    /// Admitted (answered by the PCRF: 2001, or 5002 for the CCR-T of a session whose
    /// CCR-I was refused) per second, both classes, by the gateways' windows.
    admitted: f64,
    /// CCR-I and CCR-T admitted per second by the fast path's counters, over the
    /// sampler's window as it elapsed.
    ccr_i: f64,
    ccr_t: f64,
    /// Decided 3002 in the window.
    rejected: u64,
    /// The whole run: sent, answered, unanswered.
    sent: u64,
    answered: u64,
    unanswered: u64,
    /// 2001 and 5002 over the whole run.
    by_pcrf: u64,
    /// 3002 over the whole run, the probe's first included.
    answered_3002: u64,
    /// Marked out of band by the fast path, and applied by the agent (its metrics).
    oob: u64,
    applied: Option<u64>,
    /// The probe's first 3002's Error-Message.
    probed: Option<String>,
}

/// The four gateways against `dra run` with the group's limits at `limit` each and
/// `action`: warm-up, then the measured window ([`window`]).
fn limit_run(lab: &Lab, action: &str, limit: f64) -> LimitRun {
    let measure = window(limit);
    let cfg = config(&limits(action, limit));
    let plan = Plan::new(&dra::config::parse(&cfg, "t.toml").unwrap()).unwrap();
    let slot_i = plan.slot_of("pgw1", MsgClass::gx_ccr(rt::INITIAL)).unwrap();
    let slot_t = plan
        .slot_of("pgw1", MsgClass::gx_ccr(rt::TERMINATION))
        .unwrap();
    let mut agent = lab.agent(&format!("{action}-{limit}"), &cfg);
    let maps = Maps::open_pinned(&lab.pins.0).unwrap();
    let stats_before = maps.stats().unwrap();
    let oob_before = maps
        .stat(dra_common::stats::Counter::MarkedOutOfBand)
        .unwrap();
    let pins = lab.pins.0.clone();
    let sampler = std::thread::spawn(move || {
        let maps = Maps::open_pinned(&pins).unwrap();
        let admitted = |s| maps.slot_counters(s).unwrap().admitted;
        // The scenario's timeline: the window starts after the gateways' warm-up.
        std::thread::sleep(WARMUP);
        let (i, t) = (admitted(slot_i), admitted(slot_t));
        let from = std::time::Instant::now();
        // ... and lasts `measure` (the rate is taken over the time that elapsed).
        std::thread::sleep(measure);
        let (i2, t2) = (admitted(slot_i), admitted(slot_t));
        // The window as it elapsed (a busy guest wakes the sampler late).
        (i2 - i, t2 - t, from.elapsed().as_secs_f64())
    });
    let gw = lab.net.gw.name.clone();
    let probe = std::thread::spawn(move || {
        // The scenario: the probe starts once the warm-up has spent the bucket.
        std::thread::sleep(WARMUP);
        over_limit_answer(&gw, limit)
    });
    let r = gateways(&lab.net.gw, &all_gateways(), 25, true, WARMUP, measure);
    let (i, t, sampled_s) = sampler.join().unwrap();
    let probed = probe.join().unwrap();
    let changed: Vec<String> = maps
        .stats()
        .unwrap()
        .iter()
        .zip(&stats_before)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((c, a), (_, b))| format!("{} +{}", c.name(), a - b))
        .collect();
    // The window as the gateways timed it (requests sent between its edges).
    let secs = r[0].measured.as_secs_f64();
    let (sent, answered, unanswered) = sent_answered(&r);
    let total = |rc: u32| -> u64 {
        r.iter()
            .map(|x| x.total_answered.get(&rc).copied().unwrap_or(0))
            .sum()
    };
    // This run's (the pins, and so the counters, outlive the agent).
    let oob = maps
        .stat(dra_common::stats::Counter::MarkedOutOfBand)
        .unwrap()
        - oob_before;
    // The agent publishes its counters once a second: wait until they show this run's
    // marks (the gateways are done).
    let applied = "dra_fastpath_oob_marks_total{outcome=\"applied\"}";
    let mut metrics = String::new();
    agent.wait_until(Duration::from_secs(10), || {
        metrics = scrape(&lab.net.dra, "dra_fastpath_oob_marks_total");
        metric(&metrics, applied) == Some(oob) || action == "drop"
    });
    agent.stop();
    let run = LimitRun {
        offered: r.iter().map(|x| x.sent).sum::<u64>() as f64 / secs,
        admitted: (decided(&r, 2001) + decided(&r, 5002)) as f64 / secs,
        ccr_i: i as f64 / sampled_s,
        ccr_t: t as f64 / sampled_s,
        rejected: decided(&r, 3002),
        sent,
        answered,
        unanswered,
        by_pcrf: total(2001) + total(5002),
        answered_3002: total(3002) + u64::from(probed.is_some()),
        oob,
        applied: metric(&metrics, applied),
        probed,
    };
    let all: std::collections::BTreeMap<u32, u64> =
        r.iter()
            .fold(std::collections::BTreeMap::new(), |mut m, x| {
                for (k, v) in &x.total_answered {
                    *m.entry(*k).or_insert(0u64) += v;
                }
                m
            });
    println!(
        "{action}, 4 SCTP gateways x 25 in flight, window {measure:?}: offered {:.1}/s, \
         admitted {:.1}/s (CCR-I + CCR-T, limit {}/s), CCR-I {:.1}/s by the fast path (limit \
         {limit}/s), rejected {} in the window; sent {sent} answered {answered} unanswered \
         {unanswered}; marked out of band {oob}; CCR-T {:.1}/s by the fast path; fast path \
         counters: {}; the agent's {metrics}; all answers {all:?}",
        run.offered,
        run.admitted,
        2.0 * limit,
        run.ccr_i,
        run.rejected,
        run.ccr_t,
        changed.join(", "),
    );
    run
}

#[test]
fn sctp_gateways_get_exactly_the_limit_in_reject_and_no_more_in_drop() {
    need_sctp!();
    let lab = Lab::new("sl");
    let _pcrf = pcrf(&lab.net.srv, true);
    let mut failures = Vec::new();
    // reject at LIMIT_EACH; where the gateways offered less than twice that (a slower
    // machine), again at a limit sized from what they offered.
    let mut limit_each = LIMIT_EACH;
    let mut r = limit_run(&lab, "reject", limit_each);
    let sized = sized_limit(r.offered);
    if r.offered < 2.0 * 2.0 * limit_each && sized < limit_each {
        println!(
            "reject: offered {:.1}/s, less than twice the limits of {limit_each}/s each: \
             again at {sized}/s each",
            r.offered
        );
        limit_each = sized;
        r = limit_run(&lab, "reject", limit_each);
    }
    let limit = 2.0 * limit_each;
    for (what, v, l) in [
        ("both classes", r.admitted, limit),
        ("CCR-I", r.ccr_i, limit_each),
    ] {
        if (v - l).abs() / l > 0.02 {
            failures.push(format!("reject: {what} admitted {v:.1}/s, limit {l}/s"));
        }
    }
    // Offered at least twice the limit (measured over the window): the buckets stayed
    // spent.
    if r.offered < 2.0 * limit {
        failures.push(format!(
            "reject: offered {:.1}/s, less than twice the limit of {limit}/s ({} rejected)",
            r.offered, r.rejected
        ));
    }
    // Every request the fast path marked was answered 3002, once: the marks the agent
    // applied, and the 3002s the gateways and the probe got (its first).
    if r.oob == 0 || r.applied != Some(r.oob) || r.answered_3002 != r.oob {
        failures.push(format!(
            "reject: marked out of band {}, applied by the agent {:?}, answered 3002 {}",
            r.oob, r.applied, r.answered_3002
        ));
    }
    // The Error-Message of a 3002 is the configured one, as over TCP.
    if r.probed.as_deref() != Some(ERROR_MESSAGE) {
        failures.push(format!("reject: a 3002's Error-Message is {:?}", r.probed));
    }
    if r.unanswered != 0 || r.answered != r.sent {
        failures.push(format!(
            "reject: sent {}, answered {}, unanswered {}",
            r.sent, r.answered, r.unanswered
        ));
    }
    let d = limit_run(&lab, "drop", limit_each);
    for (what, v, l) in [
        ("both classes", d.admitted, limit),
        ("CCR-I", d.ccr_i, limit_each),
    ] {
        if v > l * 1.02 {
            failures.push(format!("drop: {what} admitted {v:.1}/s, limit {l}/s"));
        }
    }
    if d.by_pcrf != d.sent {
        failures.push(format!(
            "drop: sent {}, answered by the PCRF {}",
            d.sent, d.by_pcrf
        ));
    }
    if d.unanswered != 0 || d.answered != d.sent {
        failures.push(format!(
            "drop: sent {}, answered {}, unanswered {}",
            d.sent, d.answered, d.unanswered
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The agent's metrics lines starting with `prefix` (its endpoint in `ns`).
fn scrape(ns: &Netns, prefix: &str) -> String {
    use std::io::{Read, Write};
    ns.enter(|| {
        let mut s = std::net::TcpStream::connect("127.0.0.1:9109").ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(
            body.lines()
                .filter(|l| l.starts_with(prefix))
                .collect::<Vec<_>>()
                .join("; "),
        )
    })
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// The value of the metric `name` (name and labels as printed) in what [`scrape`]
/// returned.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.split("; ")
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// CCR-Is from pgw5 over an SCTP association of its own while the other gateways keep
/// its group's bucket (at `limit`/s) spent: the Error-Message of the first 3002 (None if
/// none came).
fn over_limit_answer(gw: &str, limit: f64) -> Option<String> {
    let gw = Netns::attach_existing(gw);
    in_ns(&gw, async move {
        let to: SocketAddr = format!("{DRA_IP}:{SCTP_PORT}").parse().unwrap();
        let ip: IpAddr = PROBE.parse().unwrap();
        let conn = loadgen::dial(Some(ip), to, None, None, Some(&Sctp::default()))
            .await
            .ok()?;
        let peer = ScriptedPeer::open(
            conn,
            scripted_config("pgw5.lab.example", LAB_REALM, &[16777238], ip),
            "dra.lab.example",
            None,
        )
        .await
        .ok()?;
        for n in 0..(3.0 * limit) as u32 {
            let req = ccr(
                &format!("pgw5.lab.example;sctp;{n}"),
                16777238,
                "pgw5.lab.example",
                LAB_REALM,
                PCRF_REALM,
                rt::INITIAL.into(),
                0,
            );
            // Bounded: a request never answered ends the probe (None).
            let a = tokio::time::timeout(scaled(Duration::from_secs(10)), peer.request(req))
                .await
                .ok()??;
            if a.result_code() == Some(3002) {
                return a
                    .find(avp_code::ERROR_MESSAGE)
                    .and_then(|x| x.as_utf8().ok().map(str::to_owned));
            }
        }
        None
    })
}

#[test]
fn a_multihomed_association_keeps_serving_when_its_primary_path_goes() {
    need_sctp!();
    let lab = Lab::new("sm");
    let _pcrf = pcrf(&lab.net.srv, true);
    let mut agent = lab.agent("multihome", &config(""));
    let gw_if = lab.net.client.a_if.clone();
    let gw_name = lab.net.gw.name.clone();
    // The primary path (198.18.1.2 ⇄ 198.18.1.1) goes 1.5 s into the warm-up.
    let cut = std::thread::spawn(move || {
        // The scenario: the path goes 1.5 s into the gateway's warm-up.
        std::thread::sleep(Duration::from_millis(1500));
        netlab::ipn(
            &gw_name,
            &["addr", "del", &format!("{}/24", GATEWAYS[0]), "dev", &gw_if],
        )
        .unwrap();
    });
    let binds = [(
        1,
        GATEWAYS[0].parse().unwrap(),
        vec![GW_IP2.parse().unwrap()],
    )];
    let r = gateways(
        &lab.net.gw,
        &binds,
        25,
        true,
        Duration::from_secs(4),
        MEASURE,
    );
    cut.join().unwrap();
    let status = status_of(&lab);
    agent.stop();
    let log = agent.log_text();
    let (sent, answered, unanswered) = sent_answered(&r);
    let served = r[0].answered_with(2001) + r[0].answered_with(5002);
    println!(
        "multihomed pgw1: {served} answered in the {MEASURE:?} after its primary path went \
         ({:.0}/s); sent {sent} answered {answered} unanswered {unanswered}\n{status}",
        served as f64 / MEASURE.as_secs_f64()
    );
    assert!(served > 0, "nothing served after the path went");
    assert_eq!(
        (unanswered, answered),
        (0, sent),
        "every request answered once"
    );
    // One association all along: up once, down only at the gateway's DPR.
    assert_eq!(
        log.matches("peer up peer=pgw1").count(),
        1,
        "pgw1 reconnected:\n{log}"
    );
    assert!(
        log.contains("reason=PeerDisconnect"),
        "pgw1 did not end with its DPR:\n{log}"
    );
}

/// The agent's control socket (one agent runs at a time).
fn control_socket() -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/tmp/dra-sctp-{}.sock", std::process::id()))
}

fn status_of(_lab: &Lab) -> String {
    let out = Command::new(dra_bin())
        .args(["status", "--socket"])
        .arg(control_socket())
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[test]
fn relay_rate_over_sctp_and_over_tcp() {
    need_sctp!();
    let lab = Lab::new("sr");
    let mut rates = Vec::new();
    for over_sctp in [true, false] {
        let _pcrf = pcrf(&lab.net.srv, true);
        let mut agent = lab.agent("rate", &config(""));
        let binds = [(1, GATEWAYS[0].parse().unwrap(), Vec::new())];
        let r = gateways(&lab.net.gw, &binds, 100, over_sctp, WARMUP, MEASURE);
        agent.stop();
        let (sent, answered, unanswered) = sent_answered(&r);
        assert_eq!(
            (unanswered, answered),
            (0, sent),
            "every request answered once"
        );
        rates.push(r[0].requests_per_s());
    }
    println!(
        "relayed requests/s, one gateway, 100 in flight, dra run with XDP: SCTP {:.0}, TCP \
         {:.0}, SCTP / TCP = {:.2} (no goal)",
        rates[0],
        rates[1],
        rates[0] / rates[1]
    );
}

/// A freeDiameter node of the interop test: `host` listening on `ip` (SCTP and TCP,
/// port 3868), admitting `admit`, sending `realm` to `next_hop`, which it dials at
/// `connect` over SCTP (`sctp_next`) or TCP.
struct FdNode<'a> {
    host: &'a str,
    ip: &'a str,
    admit: &'a str,
    realm: &'a str,
    next_hop: &'a str,
    connect: (&'a str, u16),
    sctp_next: bool,
}

/// freeDiameter's config (`freeDiameterd -c`) of `n` in `dir`: the DCCA dictionaries,
/// `acl_wl` for its admitted peer, `rt_default` for its route.
fn fd_conf(dir: &Path, n: &FdNode) -> std::path::PathBuf {
    let FdNode {
        host,
        ip,
        admit,
        realm,
        next_hop,
        connect,
        sctp_next,
    } = *n;
    let port = 3868;
    let (crt, key) = dra_tools::freediameter::self_signed_cert(dir, host, host).expect("openssl");
    let acl = dir.join(format!("{host}.acl"));
    std::fs::write(&acl, format!("ALLOW_IPSEC {admit}\n")).unwrap();
    let rtf = dir.join(format!("{host}.rt"));
    std::fs::write(&rtf, format!("dr=\"{realm}\" : \"{next_hop}\" += 100 ;\n")).unwrap();
    let transport = if sctp_next { "No_TCP;" } else { "No_SCTP;" };
    let text = format!(
        "Identity = \"{host}\";\nRealm = \"test.example\";\nPort = {port};\nSecPort = 0;\n\
         No_IPv6;\nListenOn = \"{ip}\";\nTwTimer = 30;\nTcTimer = 1;\n\
         TLS_Cred = \"{}\", \"{}\";\nTLS_CA = \"{}\";\n\
         LoadExtension = \"dict_nasreq.fdx\";\nLoadExtension = \"dict_dcca.fdx\";\n\
         LoadExtension = \"dict_dcca_3gpp.fdx\";\n\
         LoadExtension = \"acl_wl.fdx\" : \"{}\";\n\
         LoadExtension = \"rt_default.fdx\" : \"{}\";\n\
         ConnectPeer = \"{next_hop}\" {{ ConnectTo = \"{}\"; Port = {}; No_TLS; {transport} }};\n",
        crt.display(),
        key.display(),
        crt.display(),
        acl.display(),
        rtf.display(),
        connect.0,
        connect.1,
    );
    let p = dir.join(format!("{host}.conf"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn freediameter_relays_over_sctp_on_either_side_of_the_agent() {
    need_sctp!();
    // gw: loadgen pgw1 (198.18.1.2) and freeDiameter fdr1 (198.18.1.6); srv: loadgen
    // srv1 (198.18.2.2) and freeDiameter fdr2 (198.18.2.6) with srv2 (198.18.2.7) behind.
    //   pgw1 ─TCP─▶ fdr1 ═SCTP═▶ agent ─SCTP─▶ srv1        (realm pcrf.lab.example)
    //   pgw1 ─SCTP─▶ agent ═SCTP═▶ fdr2 ─TCP─▶ srv2        (realm far.test.example)
    let lab = Lab::new("sf");
    for (ns, dev, ip) in [
        (&lab.net.gw, &lab.net.client.a_if, "198.18.1.6/24"),
        (&lab.net.srv, &lab.net.server.b_if, "198.18.2.6/24"),
        (&lab.net.srv, &lab.net.server.b_if, "198.18.2.7/24"),
    ] {
        netlab::ipn(&ns.name, &["addr", "add", ip, "dev", dev]).unwrap();
    }
    let _srv1 = pcrf(&lab.net.srv, true);
    let srv2 = sim_server(
        &lab.net.srv,
        "198.18.2.7:3868",
        "srv2.far.test.example",
        "far.test.example",
    );
    let fdr1 = fd_conf(
        &lab.tmp.0,
        &FdNode {
            host: "fdr1.test.example",
            ip: "198.18.1.6",
            admit: "pgw1.lab.example",
            realm: PCRF_REALM,
            next_hop: "dra.lab.example",
            connect: (DRA_IP, SCTP_PORT),
            sctp_next: true,
        },
    );
    let fdr2 = fd_conf(
        &lab.tmp.0,
        &FdNode {
            host: "fdr2.test.example",
            ip: "198.18.2.6",
            admit: "dra.lab.example",
            realm: "far.test.example",
            next_hop: "srv2.far.test.example",
            connect: ("198.18.2.7", 3868),
            sctp_next: false,
        },
    );
    let cfg = config("")
        + "\n[[peer]]\nname = \"fdr1\"\norigin_host = \"fdr1.test.example\"\n\
             realm = \"test.example\"\nrole = \"client\"\n\
             transport = \"sctp\"\n\n[[peer]]\nname = \"fdr2\"\norigin_host = \
             \"fdr2.test.example\"\nrealm = \"test.example\"\nrole = \"server\"\n\
             connect = \"198.18.2.6:3868\"\ntransport = \"sctp\"\ngroup = \"far\"\n\n\
             [[peer_group]]\nname = \"far\"\n\n[[route]]\nrealm = \"far.test.example\"\n\
             group = \"far\"\n";
    // freeDiameter first (fdr1 dials the agent every second; the agent redials fdr2 on
    // a short schedule until it first opens); the agent is ready once pcrf1 and fdr2
    // are open (or its startup wait ends), and fdr1 opens when it dials next.
    let fd1 = spawn_fd(&lab.net.gw, &fdr1, &lab.tmp.0.join("fdr1.log"));
    let fd2 = spawn_fd(&lab.net.srv, &fdr2, &lab.tmp.0.join("fdr2.log"));
    let mut agent = lab.agent("interop", &cfg);
    let mut status = String::new();
    let up = agent.wait_until(Duration::from_secs(60), || {
        status = status_of(&lab);
        ["fdr1", "fdr2"]
            .iter()
            .all(|p| peer_state(&status, p) == Some("open"))
    });
    assert!(
        up,
        "freeDiameter peers not up over SCTP:\n{status}\nagent:\n{}\nfdr1:\n{}\nfdr2:\n{}",
        agent.log_text(),
        read(&lab.tmp.0.join("fdr1.log")),
        read(&lab.tmp.0.join("fdr2.log"))
    );
    // Through fdr1 (TCP to it, SCTP from it to the agent) to srv1.
    let mut c = ClosedConfig::new("198.18.1.6:3868".parse().unwrap(), 1, 4);
    c.bind = Some(GATEWAYS[0].parse().unwrap());
    c.origin_host_pattern = "pgw1.lab.example".into();
    c.warmup = Duration::from_secs(1);
    c.measure = Duration::from_secs(3);
    c.drain = scaled(Duration::from_secs(10));
    let via_fdr1 = in_ns(&lab.net.gw, async move {
        closed::run(c).await.expect("via fdr1")
    });
    // Over SCTP to the agent, through fdr2 (SCTP from the agent, TCP on) to srv2.
    let mut c = ClosedConfig::new(format!("{DRA_IP}:{SCTP_PORT}").parse().unwrap(), 1, 4);
    c.bind = Some(GATEWAYS[0].parse().unwrap());
    c.origin_host_pattern = "pgw1.lab.example".into();
    c.destination_realm = "far.test.example".into();
    c.warmup = Duration::from_secs(1);
    c.measure = Duration::from_secs(3);
    c.drain = scaled(Duration::from_secs(10));
    c.sctp = Some(Sctp::default());
    let via_fdr2 = in_ns(&lab.net.gw, async move {
        closed::run(c).await.expect("via fdr2")
    });
    let srv2_stats = srv2.stop();
    drop((fd1, fd2));
    agent.stop();
    for (name, r) in [
        ("pgw1 -> fdr1 -> agent -> srv1", &via_fdr1),
        ("pgw1 -> agent -> fdr2 -> srv2", &via_fdr2),
    ] {
        let (sent, answered, unanswered) = sent_answered(std::slice::from_ref(r));
        println!(
            "{name}: sent {sent}, answered {:?}, unanswered {unanswered}",
            r.total_answered
        );
        assert!(sent > 0, "{name}: nothing sent");
        assert_eq!(
            (unanswered, answered),
            (0, sent),
            "{name}: every request answered"
        );
        assert_eq!(
            r.total_answered.keys().copied().collect::<Vec<_>>(),
            vec![2001],
            "{name}: every answer 2001"
        );
    }
    assert!(srv2_stats > 0, "srv2 answered nothing");
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn spawn_fd(ns: &Netns, conf: &Path, log: &Path) -> FdGuard {
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new("freeDiameterd");
    cmd.arg("-c").arg(conf).arg("-d");
    cmd.stdout(out.try_clone().unwrap()).stderr(out);
    FdGuard(dra_tools::netns::spawn_in(&ns.name, &mut cmd).expect("freeDiameterd"))
}

/// A freeDiameterd, killed on drop.
struct FdGuard(std::process::Child);

impl Drop for FdGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A plain-TCP loadgen server `host` of `realm` at `addr` in `ns`; `stop` returns the
/// requests it answered.
/// A server `host` of `realm` on `addr` in `ns` answering at once, whatever the session.
fn sim_server(ns: &Netns, addr: &str, host: &str, realm: &str) -> Server {
    let mut c = ServerConfig::new(addr.parse().unwrap(), host, realm);
    c.latency = LatencyDist::Fixed(Duration::ZERO);
    c.strict_sessions = false;
    Server::start(ns, c)
}
