//! `cargo xtask bench overload`: the agent past its own capacity (docs/bench.md,
//! docs/architecture.md §13).
//!
//! The agent's CPU is capped (a cgroup quota, recorded in the result) so that this 2-CPU
//! machine can overload it. Per arm — XDP attached, and the agent alone — its capacity C
//! is measured first (closed loop: four gateways × 25 in flight, the overload control
//! off, with the agent's CPU time per request), then what an answer from a request's
//! bytes costs (the same loop, every gateway over a `reject` limit: each request marked
//! and answered 3002 undecoded, as a shed one is answered 3004), then four open-loop
//! gateways (`dra-loadgen client`, CCR-I, CCR-U and CCR-T in
//! equal thirds, request timeout 2 s) offer 0.5, 1, 1.5, 2, 4 and 8 × C, each level with
//! the overload control on and off, a fresh agent each time. Per level: goodput (2001
//! within the timeout per second), 3004 and discarded per second, CCR-T answered 2001,
//! p50/p99 of the answered, timeouts, the agent's RSS, what the gateways really sent
//! (the generator may not reach a level on this machine: said in the table). The goals
//! are judged from the typed levels (`dra_report::overload::judge`) and printed.

mod net;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use dra_report::overload::{AnswerCost, Capacity, Level, OverloadReport};

use crate::{
    agent_run::run_dir,
    lab::{self, Bins},
    metrics::{METRICS_ADDR, Snap},
    procs::{self, Proc},
};

/// The agent's CPU cap: 10 % of one CPU, in 10 ms periods (a throttled agent waits at
/// most 9 ms). Small enough that 8 × C, the gateways and the kernel's networking for
/// them fit beside it on this 2-CPU machine (at 25 % the gateways alone took both CPUs
/// from 4 × C on, and the agent got a fraction of its quota).
const CAP: net::CpuCap = net::CpuCap {
    period_us: 10_000,
    quota_us: 1_000,
};
/// The levels, × C.
const FACTORS: [f64; 6] = [0.5, 1.0, 1.5, 2.0, 4.0, 8.0];
/// Each level's load (its sessions open when it begins).
const LOAD_S: u64 = 12;
/// Seconds of the load left out at its start and end.
const SKIP_START_S: usize = 2;
const SKIP_END_S: usize = 1;
const TIMEOUT_MS: u64 = 2000;
/// At most this many sessions open per gateway when the scenario begins.
const MAX_OPEN_SESSIONS: f64 = 300_000.0;

/// Preflight: no leftover topology, a cgroup-v1 cpu controller.
pub fn preflight() -> Result<()> {
    net::TOPOLOGY.ensure_removed().context(
        "an earlier overload bench left its namespaces: `cargo xtask bench overload` \
         removes them when it starts again only after you check nothing else uses them \
         (ip netns list | grep ov-)",
    )?;
    ensure!(
        netlab::CpuCap::available(),
        "no cgroup-v1 cpu controller at {}: the bench caps the agent's CPU there",
        netlab::CPU_CGROUPS
    );
    Ok(())
}

/// The bench (see the module docs).
pub fn run(root: &Path) -> Result<()> {
    let out = run_dir(root, "overload")?;
    let bins = Bins::release(root);
    let _guard = net::TOPOLOGY.guard();
    net::up()?;
    let cap = CAP.create()?;
    let mut servers = Vec::new();
    for (name, addr) in net::SERVERS {
        let mut c = lab::command_in(net::NS_SRV, &bins.loadgen)?;
        c.args(["server", "--listen", &format!("{addr}:3868")])
            .args(["--origin-host", &format!("{name}.pcrf.lab.example")])
            .args([
                "--origin-realm",
                "pcrf.lab.example",
                "--latency",
                "fixed:0ms",
                // The gateways' sessions opened before the scenario are bound when their
                // first CCR-U or CCR-T arrives.
                "--lenient-sessions",
            ]);
        let log = out.join(format!("{name}.log"));
        servers.push(Proc::new(name, procs::spawn_logging(&log, name, &mut c)?));
    }
    let mut capacity = Vec::new();
    let mut answer_cost = Vec::new();
    let mut levels = Vec::new();
    for xdp in [true, false] {
        let c = measure_capacity(&bins, &out, &cap, xdp)?;
        eprintln!(
            "xtask: capacity C ({}): {:.0} requests/s (p50 {:.2} ms, p99 {:.2} ms)",
            arm(xdp),
            c.requests_per_s,
            c.p50_ms,
            c.p99_ms
        );
        let a = measure_answer_cost(&bins, &out, &cap, &c)?;
        eprintln!("xtask: {}", cost_line(&a, &c));
        let c_rate = c.requests_per_s;
        capacity.push(c);
        answer_cost.push(a);
        for factor in FACTORS {
            for protection in [true, false] {
                let l = run_level(&bins, &out, &cap, xdp, protection, factor, c_rate)?;
                eprintln!("xtask: {}", level_line(&l));
                levels.push(l);
            }
        }
    }
    drop(servers);
    drop(cap);
    let goals = dra_report::overload::judge(&levels, &answer_cost);
    let report = OverloadReport {
        cpu_quota_us: CAP.quota_us,
        cpu_period_us: CAP.period_us,
        load_s: LOAD_S as f64,
        request_timeout_ms: TIMEOUT_MS,
        capacity,
        answer_cost,
        levels,
        goals,
    };
    let text = serde_json::to_string_pretty(&report)?;
    std::fs::write(out.join("overload.json"), &text)?;
    let latest = root.join("bench/results/overload-latest.json");
    std::fs::write(&latest, &text).with_context(|| format!("write {}", latest.display()))?;
    print_report(&report);
    eprintln!(
        "xtask: overload results in {} and {}",
        out.display(),
        latest.display()
    );
    Ok(())
}

fn arm(xdp: bool) -> &'static str {
    if xdp { "XDP" } else { "no XDP" }
}

/// The agent's config for one run: four gateways, the PCRF group, the metrics and
/// control socket, XDP or not, the overload control on or off.
fn config(xdp: bool, protection: bool, reject_all: bool) -> String {
    let mut t = format!(
        "[global]\norigin_host = \"dra.lab.example\"\norigin_realm = \"lab.example\"\n\n\
         [[listener]]\naddress = \"198.18.1.1:3868\"\n\n\
         [metrics]\naddress = \"{METRICS_ADDR}\"\n\n\
         [overload]\nenabled = {protection}\n\n"
    );
    if xdp {
        t.push_str(&format!("[fast_path]\ninterface = \"{}\"\n\n", net::DRA_IF));
    }
    for (i, a) in net::GATEWAYS.iter().enumerate() {
        let n = i + 1;
        t.push_str(&format!(
            "[[peer]]\nname = \"pgw{n}\"\norigin_host = \"pgw{n}.lab.example\"\n\
             realm = \"lab.example\"\naddresses = [\"{a}\"]\nrole = \"client\"\n\n"
        ));
        if reject_all {
            t.push_str(&format!(
                "[[peer_rate_limit_profile]]\npeer = \"pgw{n}\"\ndirection = \"ingress\"\n\
                 rate = 1\naction = \"reject\"\n\n"
            ));
        }
    }
    for (name, a) in net::SERVERS {
        t.push_str(&format!(
            "[[peer]]\nname = \"{name}\"\norigin_host = \"{name}.pcrf.lab.example\"\n\
             realm = \"pcrf.lab.example\"\nrole = \"server\"\nconnect = \"{a}:3868\"\n\
             group = \"pcrf\"\n\n"
        ));
    }
    t.push_str(
        "[[peer_group]]\nname = \"pcrf\"\nanswer_timeout = \"2s\"\n\n\
         [[route]]\nrealm = \"pcrf.lab.example\"\napplication = \"gx\"\ngroup = \"pcrf\"\n",
    );
    t
}

/// A capped agent of `xdp`'s arm, ready (its upstreams open).
fn start_agent<'s>(
    bins: &Bins,
    dir: &Path,
    cap: &netlab::CpuCap,
    xdp: bool,
    protection: bool,
    reject_all: bool,
) -> Result<crate::agent_run::Agent<'s>> {
    net::SITE.ensure_detached("overload")?;
    let cfg = dir.join("dra.toml");
    std::fs::write(&cfg, config(xdp, protection, reject_all))?;
    let cmd = lab::command_in(net::NS_DRA, &bins.dra)?;
    let agent = net::SITE.start_agent_ready(cmd, &cfg, dir.join("dra.log"))?;
    cap.add(agent.pid()?)?;
    net::SITE.ensure_attached("overload", xdp)?;
    Ok(agent)
}

/// What a closed loop (four gateways × 25 in flight, 10 s after 2 s of warm-up) got
/// from a capped agent.
struct ClosedRun {
    /// Answers per second in the measured window, all gateways.
    per_s: f64,
    /// The worst gateway's p50 and p99, ms.
    p50_ms: f64,
    p99_ms: f64,
    /// Answers over the whole run, and those with `result_code`.
    answered: u64,
    answered_with: u64,
    /// The agent's CPU time over the whole run, µs.
    cpu_us: f64,
}

/// A closed loop against a fresh capped agent of `xdp`'s arm (the overload control off;
/// `reject_all`: every gateway over a `reject` limit). `result_code`: the answers
/// counted apart.
fn closed_run(
    bins: &Bins,
    dir: &Path,
    cap: &netlab::CpuCap,
    xdp: bool,
    reject_all: bool,
    result_code: u32,
) -> Result<ClosedRun> {
    let mut agent = start_agent(bins, dir, cap, xdp, false, reject_all)?;
    let pid = agent.pid()?;
    let cpu0 = cpu_us(pid)?;
    let mut clients = Vec::new();
    for (i, a) in net::GATEWAYS.iter().enumerate() {
        let n = i + 1;
        let mut c = lab::command_in(net::NS_GW, &bins.loadgen)?;
        c.args(["closed", "--connect", "198.18.1.1:3868", "--bind", a])
            .args([
                "--peers",
                "1",
                "--origin-host",
                &format!("pgw{n}.lab.example"),
            ])
            .args(["--destination-realm", "pcrf.lab.example"])
            .args(["--window", "25", "--seconds", "10", "--warmup", "2"])
            .arg("--summary-json")
            .arg(dir.join(format!("pgw{n}.json")));
        let log = dir.join(format!("pgw{n}.log"));
        clients.push(Proc::new(
            "closed loop",
            procs::spawn_logging(&log, "closed", &mut c)?,
        ));
    }
    wait_all(&mut clients, Duration::from_secs(60), &mut agent)?;
    let cpu_us = cpu_us(pid)? - cpu0;
    agent.stop()?;
    net::SITE.detach_left(bins, "closed loop")?;
    let mut r = ClosedRun {
        per_s: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        answered: 0,
        answered_with: 0,
        cpu_us,
    };
    for n in 1..=net::GATEWAYS.len() {
        let path = dir.join(format!("pgw{n}.json"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("the closed loop's summary {}", path.display()))?;
        let s: dra_report::closed::ClosedSummary =
            dra_report::parse(&text, &path.display().to_string())?;
        ensure!(
            s.unanswered == 0,
            "the closed loop lost {} requests ({})",
            s.unanswered,
            path.display()
        );
        r.per_s += s.requests_per_s;
        r.p50_ms = r.p50_ms.max(s.p50_ms);
        r.p99_ms = r.p99_ms.max(s.p99_ms);
        r.answered += s.total_answered.values().sum::<u64>();
        r.answered_with += s.total_answered.get(&result_code).copied().unwrap_or(0);
    }
    ensure!(
        r.answered > 0,
        "the closed loop got no answer ({})",
        dir.display()
    );
    Ok(r)
}

/// C of `xdp`'s arm: relayed requests per second of the closed loop, the agent's CPU
/// time per request.
fn measure_capacity(bins: &Bins, out: &Path, cap: &netlab::CpuCap, xdp: bool) -> Result<Capacity> {
    let dir = run_dir_in(out, &format!("capacity-{}", arm_dir(xdp)))?;
    let r = closed_run(bins, &dir, cap, xdp, false, 2001)?;
    ensure!(
        r.answered_with == r.answered,
        "capacity: {} of {} answers not 2001 ({})",
        r.answered - r.answered_with,
        r.answered,
        dir.display()
    );
    Ok(Capacity {
        xdp,
        requests_per_s: r.per_s,
        p50_ms: r.p50_ms,
        p99_ms: r.p99_ms,
        cpu_us_per_request: r.cpu_us / r.answered as f64,
    })
}

/// The CPU time of an answer from bytes in `xdp`'s arm: the closed loop with every
/// request over its gateway's `reject` limit (answered 3002 by the agent).
fn measure_answer_cost(
    bins: &Bins,
    out: &Path,
    cap: &netlab::CpuCap,
    c: &Capacity,
) -> Result<AnswerCost> {
    let dir = run_dir_in(out, &format!("answers-{}", arm_dir(c.xdp)))?;
    let r = closed_run(bins, &dir, cap, c.xdp, true, 3002)?;
    let per = r.cpu_us / r.answered as f64;
    Ok(AnswerCost {
        xdp: c.xdp,
        answers_per_s: r.per_s,
        rejected_fraction: r.answered_with as f64 / r.answered as f64,
        cpu_us_per_answer: per,
        of_relayed: per / c.cpu_us_per_request,
    })
}

/// The CPU time of process `pid`, every thread (`/proc/PID/task/*/schedstat`), µs.
fn cpu_us(pid: u32) -> Result<f64> {
    let dir = format!("/proc/{pid}/task");
    let mut ns = 0u64;
    for t in std::fs::read_dir(&dir).with_context(|| dir.clone())? {
        let path = t?.path().join("schedstat");
        // A thread that ended between the listing and the read took its time along.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        ns += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .with_context(|| format!("{}: {text:?}", path.display()))?;
    }
    Ok(ns as f64 / 1000.0)
}

fn arm_dir(xdp: bool) -> &'static str {
    if xdp { "xdp" } else { "noxdp" }
}

/// Waits for every client to finish by itself (successfully), at most `patience`.
fn wait_all(
    clients: &mut [Proc],
    patience: Duration,
    agent: &mut crate::agent_run::Agent<'_>,
) -> Result<()> {
    let end = Instant::now() + patience;
    loop {
        procs::interrupted()?;
        agent.ensure_running("under load")?;
        let mut done = true;
        for c in clients.iter_mut() {
            match c.exited() {
                Some(st) if !st.success() => bail!("a load generator failed ({st})"),
                Some(_) => {}
                None => done = false,
            }
        }
        if done {
            return Ok(());
        }
        ensure!(
            Instant::now() < end,
            "the load generators did not finish in time"
        );
        // The poll interval.
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_dir_in(out: &Path, name: &str) -> Result<PathBuf> {
    let d = out.join(name);
    std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
    Ok(d)
}

/// The gateways' scenario: sessions open when it begins (as many as the CCR-U and CCR-T of
/// the whole run would use, with a fifth to spare: the terminations have sessions to close
/// when the CCR-I are shed), then `per_class` requests/s of each of CCR-I, CCR-U and
/// CCR-T per gateway.
fn scenario(per_class: f64) -> String {
    let open = (per_class * LOAD_S as f64 * 1.2).min(MAX_OPEN_SESSIONS) as u64;
    format!(
        "destination_realm = \"pcrf.lab.example\"\nrequest_timeout_ms = {TIMEOUT_MS}\n\
         open_sessions = {open}\n\n\
         [[phase]]\nname = \"load\"\nduration_s = {LOAD_S}\n\
         rates = {{ gx_ccr_i = {per_class:.1}, gx_ccr_u = {per_class:.1}, \
         gx_ccr_t = {per_class:.1} }}\n"
    )
}

/// One level: a fresh capped agent, four open-loop gateways at `factor` × `c` in all.
fn run_level(
    bins: &Bins,
    out: &Path,
    cap: &netlab::CpuCap,
    xdp: bool,
    protection: bool,
    factor: f64,
    c: f64,
) -> Result<Level> {
    let name = format!(
        "{}-{}-{factor}x",
        arm_dir(xdp),
        if protection { "on" } else { "off" }
    );
    let dir = run_dir_in(out, &name)?;
    let target = factor * c;
    let per_class = target / (3.0 * net::GATEWAYS.len() as f64);
    let scn = dir.join("scenario.toml");
    std::fs::write(&scn, scenario(per_class))?;
    let mut agent = start_agent(bins, &dir, cap, xdp, protection, false)?;
    let pid = agent.pid()?;
    let mut clients = Vec::new();
    for (i, a) in net::GATEWAYS.iter().enumerate() {
        let n = i + 1;
        let mut cmd = lab::command_in(net::NS_GW, &bins.loadgen)?;
        cmd.args(["client", "--connect", "198.18.1.1:3868", "--bind", a])
            .args([
                "--peers",
                "1",
                "--origin-host",
                &format!("pgw{n}.lab.example"),
            ])
            .args(["--tw", "6", "--quiet", "--scenario"])
            .arg(&scn)
            .arg("--rows")
            .arg(dir.join(format!("pgw{n}-rows.jsonl")))
            .arg("--summary-json")
            .arg(dir.join(format!("pgw{n}.json")));
        let log = dir.join(format!("pgw{n}.log"));
        clients.push(Proc::new(
            "gateway",
            procs::spawn_logging(&log, "gateway", &mut cmd)?,
        ));
    }
    let t0 = Instant::now();
    // The agent's counters at the edges of the load's interior (as the gateways' rows
    // are taken), and its highest level between.
    let load_start = t0 + Duration::from_secs(SKIP_START_S as u64);
    let load_end = t0 + Duration::from_secs(LOAD_S - SKIP_END_S as u64);
    wait_until(load_start, &mut agent)?;
    let before = net::SITE.scrape()?;
    let cpu0 = cpu_us(pid)?;
    let mut max_level = 0u8;
    while Instant::now() < load_end {
        wait_until(
            (Instant::now() + Duration::from_millis(500)).min(load_end),
            &mut agent,
        )?;
        // A scrape the starved agent does not answer in time is skipped (the level is a
        // maximum over those it did answer; at least the last one below must answer).
        if let Ok(Ok(s)) = crate::metrics::probe(net::NS_DRA, METRICS_ADDR) {
            let l = s.sum("dra_overload_level", &[]).unwrap_or(0.0);
            max_level = max_level.max(l as u8);
        }
    }
    let cpu_us = cpu_us(pid)? - cpu0;
    let after = net::SITE.scrape()?;
    let rss_kb = rss_kb(pid)?;
    wait_all(&mut clients, Duration::from_secs(LOAD_S + 30), &mut agent)?;
    agent.stop()?;
    net::SITE.detach_left(bins, &name)?;
    let mut l = level_of(
        &dir, xdp, protection, factor, c, target, &before, &after, rss_kb, max_level,
    )?;
    let window_us = (LOAD_S as usize - SKIP_START_S - SKIP_END_S) as f64 * 1e6;
    l.cpu_of_quota = cpu_us / (window_us * CAP.quota_us as f64 / CAP.period_us as f64);
    Ok(l)
}

/// Sleeps until `t`, failing on Ctrl-C or when the agent exits.
fn wait_until(t: Instant, agent: &mut crate::agent_run::Agent<'_>) -> Result<()> {
    loop {
        procs::interrupted()?;
        agent.ensure_running("under load")?;
        let now = Instant::now();
        if now >= t {
            return Ok(());
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

/// The resident memory of process `pid` (VmRSS), kB.
fn rss_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// One level's figures from the gateways' rows and summaries and the agent's counters.
#[allow(clippy::too_many_arguments)]
fn level_of(
    dir: &Path,
    xdp: bool,
    protection: bool,
    factor: f64,
    c: f64,
    target: f64,
    before: &Snap,
    after: &Snap,
    rss_kb: u64,
    max_level: u8,
) -> Result<Level> {
    // Per second of the load (summed over the gateways): sent, 2001, 3004, timeouts.
    let mut secs: std::collections::BTreeMap<u64, [u64; 4]> = Default::default();
    let (mut t_sent, mut t_ok) = (0u64, 0u64);
    let (mut p50, mut p99) = (0.0f64, 0.0f64);
    for n in 1..=net::GATEWAYS.len() {
        let path = dir.join(format!("pgw{n}-rows.jsonl"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("the gateway's rows {}", path.display()))?;
        let rows: Vec<dra_report::client::Row> =
            dra_report::parse_lines(&text, &path.display().to_string())?;
        let load: Vec<&dra_report::client::Row> =
            rows.iter().filter(|r| r.phase == "load").collect();
        // The load's interior: its first and last seconds left out.
        let end = load.len().saturating_sub(SKIP_END_S);
        for r in load.get(SKIP_START_S.min(end)..end).unwrap_or(&[]) {
            let e = secs.entry(r.t).or_default();
            for cr in r.classes.values() {
                let code = |c: &str| cr.answered.get(c).copied().unwrap_or(0);
                e[0] += cr.sent;
                e[1] += code("2001");
                e[2] += code("3004");
                e[3] += cr.timeouts;
            }
        }
        let spath = dir.join(format!("pgw{n}.json"));
        let stext = std::fs::read_to_string(&spath)
            .with_context(|| format!("the gateway's summary {}", spath.display()))?;
        let s: dra_report::client::Report =
            dra_report::parse(&stext, &spath.display().to_string())?;
        if let Some(t) = s.classes.get("gx_ccr_t") {
            // Every termination of the run, its answers counted whenever they came.
            t_sent += t.sent;
            t_ok += t.answered_with(2001);
        }
        for cs in s.classes.values().filter(|c| c.answered_total() > 0) {
            p50 = p50.max(cs.latency.p50_ms);
            p99 = p99.max(cs.latency.p99_ms);
        }
    }
    let n = secs.len();
    ensure!(
        n > 0,
        "no second of the load in the gateways' rows ({})",
        dir.display()
    );
    let mean = |i: usize| secs.values().map(|v| v[i] as f64).sum::<f64>() / n as f64;
    let discard = |s: &Snap| {
        s.sum_or_zero_if_absent(
            // Absent: the control off, or nothing shed yet (the series start at 0).
            "dra_overload_shed_total",
            &[("action", "discard")],
        )
    };
    let window_s = (LOAD_S as usize - SKIP_START_S - SKIP_END_S) as f64;
    let goodput = mean(1);
    Ok(Level {
        xdp,
        protection,
        factor,
        target_per_s: target,
        sent_per_s: mean(0),
        goodput_per_s: goodput,
        goodput_of_c: goodput / c,
        too_busy_per_s: mean(2),
        discarded_per_s: (discard(after) - discard(before)) / window_s,
        timeouts_per_s: mean(3),
        ccr_t_sent: t_sent,
        ccr_t_2001: t_ok,
        ccr_t_2001_fraction: (t_sent > 0).then(|| t_ok as f64 / t_sent as f64),
        p50_ms: p50,
        p99_ms: p99,
        rss_kb,
        max_level,
        cpu_of_quota: 0.0,
    })
}

fn level_line(l: &Level) -> String {
    let reached = l.sent_per_s / l.target_per_s;
    format!(
        "{} protection {}: {}× C: sent {:.0}/s{} goodput {:.0}/s ({:.2} C), 3004 {:.0}/s, \
         discarded {:.0}/s, timeouts {:.0}/s, CCR-T 2001 {}, p50/p99 {:.1}/{:.1} ms, RSS {} kB, \
         level ≤ {}, CPU {:.0} % of the quota",
        arm(l.xdp),
        if l.protection { "on" } else { "off" },
        l.factor,
        l.sent_per_s,
        if reached < 0.9 {
            format!(
                " (the generator reached {:.0} % of the level)",
                reached * 100.0
            )
        } else {
            String::new()
        },
        l.goodput_per_s,
        l.goodput_of_c,
        l.too_busy_per_s,
        l.discarded_per_s,
        l.timeouts_per_s,
        l.ccr_t_2001_fraction
            .map_or("none sent".to_owned(), |f| format!("{:.2} %", f * 100.0)),
        l.p50_ms,
        l.p99_ms,
        l.rss_kb,
        l.max_level,
        l.cpu_of_quota * 100.0
    )
}

fn cost_line(a: &AnswerCost, c: &Capacity) -> String {
    format!(
        "answers from bytes ({}): {:.0}/s closed loop, {:.1} % answered by the agent, \
         {:.2} µs of its CPU per answer = {:.3} × a relayed request ({:.2} µs)",
        arm(a.xdp),
        a.answers_per_s,
        a.rejected_fraction * 100.0,
        a.cpu_us_per_answer,
        a.of_relayed,
        c.cpu_us_per_request
    )
}

fn print_report(r: &OverloadReport) {
    println!(
        "\noverload bench: agent capped at {} µs per {} µs of CPU",
        r.cpu_quota_us, r.cpu_period_us
    );
    for c in &r.capacity {
        println!(
            "  C ({}): {:.0} requests/s closed loop (4 × 25 in flight), {:.2} µs of the \
             agent's CPU per request",
            arm(c.xdp),
            c.requests_per_s,
            c.cpu_us_per_request
        );
        if let Some(a) = r.answer_cost.iter().find(|a| a.xdp == c.xdp) {
            println!("  {}", cost_line(a, c));
        }
    }
    for l in &r.levels {
        println!("  {}", level_line(l));
    }
    println!("goals (XDP attached):");
    for g in &r.goals {
        println!(
            "  {}: wanted {}; measured {} — {}",
            g.name,
            g.wanted,
            g.measured,
            if g.met { "met" } else { "MISSED" }
        );
    }
}
