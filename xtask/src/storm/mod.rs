//! `cargo xtask bench storm`: P3, P4 and P5 on the lab with the real binaries
//! (docs/bench.md, "Storm benchmarks").
//!
//! One lab (`lab::up`: namespaces, Redis, the pcrf1/pcrf2/ocs1 simulators), then four
//! runs, each a fresh `dra run` in `dralab-dra` and one `dra-loadgen client` as pgw1 in
//! `dralab-gw`:
//!
//! | run | dra config | scenario | for |
//! |---|---|---|---|
//! | `no-storm` | dra-storm-reject.toml (XDP) | storm-baseline.toml (CCR-I at L) | P4 denominator |
//! | `storm-reject-xdp` | dra-storm-reject.toml (XDP) | storm-10x.toml (CCR-I at 10·L) | P3, P4 numerator |
//! | `storm-drop-xdp` | dra-storm-drop-xdp.toml (XDP) | storm-10x.toml | P5 run 1 |
//! | `storm-drop-userspace` | dra-storm-drop-userspace.toml (no fast path) | storm-10x.toml | P5 run 2 |
//!
//! Everything is measured over the scenario's `measure` phase, located on xtask's clock
//! from the instant the client was spawned (the client's phases are timed from its start,
//! a few ms later). The lab is always removed (guard + SIGINT/SIGTERM handling).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::{
    lab::{self, Bins, DRA_CLIENT_IF, NS_DRA, NS_GW, PIN_DIR, UPSTREAMS},
    metrics::{self, Snap, counter_deltas, outcome_deltas},
    procs::{self, Proc, remove_pid_file},
    results::{self, STORM_LATEST, TableRow},
};

/// P3, P4 (action reject, XDP attached).
pub const REJECT_CONFIG: &str = "config/bench/dra-storm-reject.toml";
/// P5 run 1 (action drop, XDP attached).
pub const DROP_XDP_CONFIG: &str = "config/bench/dra-storm-drop-xdp.toml";
/// P5 run 2 (action drop, no fast path: the agent limits in userspace).
pub const DROP_USERSPACE_CONFIG: &str = "config/bench/dra-storm-drop-userspace.toml";
/// CCR-I at the limit.
pub const BASELINE_SCENARIO: &str = "config/bench/storm-baseline.toml";
/// CCR-I at 10 × the limit.
pub const STORM_SCENARIO: &str = "config/bench/storm-10x.toml";

/// The scenario phase every number is taken from.
const MEASURE: &str = "measure";
/// The limited peer and class.
const PEER: &str = "pgw1";
const PEER_SRC: &str = "198.18.1.2";
const CLASS: &str = "gx_ccr_i";
/// Seconds of `measure` left out of per-second averages (start-up of the storm, drain).
const SKIP_FIRST: usize = 2;
const SKIP_LAST: usize = 1;
/// The storm's multiple of the limit.
const STORM_FACTOR: f64 = 10.0;

/// P3 goal: |admitted − L| / L at most this.
pub const GOAL_P3_MAX_ERROR: f64 = 0.02;
/// P4 goal: CCR-U p99 storm / no storm at most this.
pub const GOAL_P4_MAX_RATIO: f64 = 1.5;
/// P5 goal: agent CPU userspace / XDP at least this.
pub const GOAL_P5_MIN_RATIO: f64 = 5.0;
/// A run "limited" when its admitted CCR-I rate stayed at most this × L (P5 validity).
const LIMITED_MAX_FACTOR: f64 = 1.2;

struct RunSpec {
    name: &'static str,
    config: &'static str,
    scenario: &'static str,
    fast_path: bool,
    /// P4 needs the client's summary (CCR-U HdrHistogram); the drop runs do not, and
    /// their client may not finish (see `run_one`).
    needs_summary: bool,
    purpose: &'static str,
}

const RUNS: [RunSpec; 4] = [
    RunSpec {
        name: "no-storm",
        config: REJECT_CONFIG,
        scenario: BASELINE_SCENARIO,
        fast_path: true,
        needs_summary: true,
        purpose: "P4 without storm: CCR-I at L, steady CCR-U",
    },
    RunSpec {
        name: "storm-reject-xdp",
        config: REJECT_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: true,
        needs_summary: true,
        purpose: "P3 and P4 with storm: CCR-I at 10 L, steady CCR-U, action reject",
    },
    RunSpec {
        name: "storm-drop-xdp",
        config: DROP_XDP_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: true,
        needs_summary: false,
        purpose: "P5 run 1: action drop in XDP",
    },
    RunSpec {
        name: "storm-drop-userspace",
        config: DROP_USERSPACE_CONFIG,
        scenario: STORM_SCENARIO,
        fast_path: false,
        needs_summary: false,
        purpose: "P5 run 2: fast path detached, the agent limits in userspace",
    },
];

// ---- pure parts ---------------------------------------------------------------------

/// utime + stime (clock ticks) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may contain spaces or ')', so fields are counted after the
/// last ')': state is field 3, utime field 14, stime field 15 (proc(5)).
pub fn proc_stat_cpu_ticks(stat: &str) -> Result<u64> {
    let (_, rest) = stat
        .rsplit_once(')')
        .context("no ')' after the command name")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    ensure!(
        f.len() >= 13,
        "only {} fields after the command name",
        f.len()
    );
    let utime: u64 = f[11]
        .parse()
        .with_context(|| format!("utime {:?}", f[11]))?;
    let stime: u64 = f[12]
        .parse()
        .with_context(|| format!("stime {:?}", f[12]))?;
    Ok(utime + stime)
}

/// Busy and total jiffies of the first (`cpu`) line of `/proc/stat`: busy = total −
/// idle − iowait (proc(5): user nice system idle iowait irq softirq steal …).
pub fn proc_stat_busy_total(stat: &str) -> Result<(u64, u64)> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no aggregate cpu line")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("cpu line")?;
    ensure!(v.len() >= 5, "cpu line too short");
    // guest/guest_nice (fields 9, 10) are already counted in user/nice.
    let total: u64 = v.iter().take(8).sum();
    Ok((total - v[3] - v[4], total))
}

/// Busy CPU seconds of the whole machine so far (all CPUs).
fn machine_busy_s() -> Result<f64> {
    let s = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
    Ok(proc_stat_busy_total(&s)?.0 as f64 / clock_ticks_per_s())
}

/// CPU seconds used so far by every process in the lab's namespaces (agent, Redis,
/// simulators, load generator).
fn lab_processes_cpu_s() -> f64 {
    lab::namespaces()
        .iter()
        .flat_map(|ns| {
            lab::sh(&["ip", "netns", "pids", ns])
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .filter_map(|pid| cpu_seconds(pid).ok())
        .sum()
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn cpu_seconds(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    Ok(proc_stat_cpu_ticks(&s)? as f64 / clock_ticks_per_s())
}

/// Per second of `phase` (client rows, JSON lines): (t, requests of `class` sent,
/// answers of `class` with `code`).
pub fn rows_per_second(rows: &str, phase: &str, class: &str, code: &str) -> Vec<(u64, u64, u64)> {
    rows.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("phase").and_then(Value::as_str) == Some(phase))
        .map(|r| {
            let t = r.get("t").and_then(Value::as_u64).unwrap_or(0);
            let c = r.get("classes").and_then(|c| c.get(class));
            let sent = c
                .and_then(|c| c.get("sent"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let ok = c
                .and_then(|c| c.get("answered"))
                .and_then(|a| a.get(code))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            (t, sent, ok)
        })
        .collect()
}

/// Per second of `phase`: the p99 latency (ms) the client rows give for `class`
/// (seconds without answers of that class are left out).
pub fn rows_p99(rows: &str, phase: &str, class: &str) -> Vec<f64> {
    rows.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("phase").and_then(Value::as_str) == Some(phase))
        .filter_map(|r| {
            let c = r.get("classes")?.get(class)?;
            let answered: u64 = c
                .get("answered")?
                .as_object()?
                .values()
                .filter_map(Value::as_u64)
                .sum();
            (answered > 0)
                .then(|| c.get("p99_ms").and_then(Value::as_f64))
                .flatten()
        })
        .collect()
}

/// Median (mean of the middle two for an even count); None when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Mean of `v` without its first `skip_first` and last `skip_last` values (None when
/// nothing is left).
pub fn interior_mean(v: &[f64], skip_first: usize, skip_last: usize) -> Option<f64> {
    let end = v.len().checked_sub(skip_last)?;
    let inner = v.get(skip_first..end)?;
    (!inner.is_empty()).then(|| inner.iter().sum::<f64>() / inner.len() as f64)
}

/// |measured − target| / target.
pub fn relative_error(measured: f64, target: f64) -> f64 {
    (measured - target).abs() / target
}

/// a / b, None unless both are finite and b > 0.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}

// ---- the bench configs --------------------------------------------------------------

/// The one limit of the bench configs.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    pub rate: f64,
    pub burst: Option<i64>,
    pub action: String,
}

fn num(v: &toml::Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

fn read_toml(root: &Path, rel: &str) -> Result<toml::Value> {
    let p = root.join(rel);
    let text = std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))?;
    toml::from_str(&text).with_context(|| format!("parse {}", p.display()))
}

/// The config without what the P5 runs may differ in: `[fast_path] interface` and the
/// limits' `action`.
fn without_action_and_interface(v: &toml::Value) -> toml::Value {
    let mut v = v.clone();
    if let Some(fp) = v.get_mut("fast_path").and_then(toml::Value::as_table_mut) {
        fp.remove("interface");
    }
    for t in ["message_rate_limit_profile", "peer_rate_limit_profile"] {
        if let Some(a) = v.get_mut(t).and_then(toml::Value::as_array_mut) {
            for p in a.iter_mut().filter_map(toml::Value::as_table_mut) {
                p.remove("action");
            }
        }
    }
    v
}

/// Checks a bench dra config: dynamic limiting off, exactly one limit (pgw1 ingress Gx
/// CCR-I), and returns it with whether a fast-path interface is set.
pub fn config_limit(v: &toml::Value) -> Result<(Limit, bool)> {
    let drl = v
        .get("global")
        .and_then(|g| g.get("dynamic_rate_limiting"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(false);
    ensure!(
        !drl,
        "dynamic_rate_limiting must be false (the DB CPU would move the limit being measured)"
    );
    ensure!(
        v.get("peer_rate_limit_profile").is_none(),
        "no [[peer_rate_limit_profile]] expected"
    );
    let profiles = v
        .get("message_rate_limit_profile")
        .and_then(toml::Value::as_array)
        .context("no [[message_rate_limit_profile]]")?;
    ensure!(
        profiles.len() == 1,
        "exactly one [[message_rate_limit_profile]] expected, found {}",
        profiles.len()
    );
    let p = &profiles[0];
    let s = |k: &str| p.get(k).and_then(toml::Value::as_str).unwrap_or("");
    ensure!(
        s("peer") == PEER
            && s("direction") == "ingress"
            && s("application") == "gx"
            && s("command") == "ccr"
            && s("request_type") == "initial",
        "the limit must be {PEER} ingress Gx CCR-I"
    );
    let limit = Limit {
        rate: p.get("rate").and_then(num).context("limit without rate")?,
        burst: p.get("burst").and_then(toml::Value::as_integer),
        action: if s("action").is_empty() {
            "reject".to_owned()
        } else {
            s("action").to_owned()
        },
    };
    let iface = v
        .get("fast_path")
        .and_then(|f| f.get("interface"))
        .and_then(toml::Value::as_str);
    if let Some(i) = iface {
        ensure!(
            i == DRA_CLIENT_IF,
            "fast_path.interface must be {DRA_CLIENT_IF}, got {i}"
        );
    }
    Ok((limit, iface.is_some()))
}

/// The `measure` phase: (start offset s, duration s, rates by class).
pub fn measure_phase(scn: &toml::Value) -> Result<(f64, f64, BTreeMap<String, f64>)> {
    let phases = scn
        .get("phase")
        .and_then(toml::Value::as_array)
        .context("no [[phase]]")?;
    let mut start = 0.0;
    for p in phases {
        let d = p
            .get("duration_s")
            .and_then(num)
            .context("phase without duration_s")?;
        if p.get("name").and_then(toml::Value::as_str) == Some(MEASURE) {
            let mut rates = BTreeMap::new();
            if let Some(r) = p.get("rates").and_then(toml::Value::as_table) {
                for (k, v) in r {
                    rates.insert(
                        k.clone(),
                        num(v).with_context(|| format!("{MEASURE} rate {k} must be a number"))?,
                    );
                }
            }
            return Ok((start, d, rates));
        }
        start += d;
    }
    bail!("no phase named {MEASURE:?}")
}

/// Total length of a scenario, seconds.
fn scenario_secs(scn: &toml::Value) -> f64 {
    scn.get("phase")
        .and_then(toml::Value::as_array)
        .map_or(0.0, |a| {
            a.iter()
                .filter_map(|p| p.get("duration_s").and_then(num))
                .sum()
        })
}

/// What the runs share, checked before anything starts.
pub struct Plan {
    pub limit: Limit,
    pub drop_limit: Limit,
    pub measure_start_s: f64,
    pub measure_s: f64,
    pub storm_rates: BTreeMap<String, f64>,
    pub baseline_rates: BTreeMap<String, f64>,
}

/// Reads and cross-checks the bench configs: the P5 configs carry the same limits (and
/// everything else) as the reject config apart from `action` and the interface; the
/// scenarios differ only in the `measure` CCR-I rate, which is L and 10·L.
pub fn plan(root: &Path) -> Result<Plan> {
    let reject = read_toml(root, REJECT_CONFIG)?;
    let drop_xdp = read_toml(root, DROP_XDP_CONFIG)?;
    let drop_us = read_toml(root, DROP_USERSPACE_CONFIG)?;
    let (limit, fp) = config_limit(&reject).context(REJECT_CONFIG)?;
    ensure!(
        fp && limit.action == "reject",
        "{REJECT_CONFIG}: expected action reject with XDP attached"
    );
    let (dx, fpx) = config_limit(&drop_xdp).context(DROP_XDP_CONFIG)?;
    ensure!(
        fpx && dx.action == "drop",
        "{DROP_XDP_CONFIG}: expected action drop with XDP attached"
    );
    let (du, fpu) = config_limit(&drop_us).context(DROP_USERSPACE_CONFIG)?;
    ensure!(
        !fpu && du.action == "drop",
        "{DROP_USERSPACE_CONFIG}: expected action drop without a fast-path interface"
    );
    let base = without_action_and_interface(&reject);
    ensure!(
        base == without_action_and_interface(&drop_xdp),
        "{DROP_XDP_CONFIG} differs from {REJECT_CONFIG} beyond action/interface"
    );
    ensure!(
        base == without_action_and_interface(&drop_us),
        "{DROP_USERSPACE_CONFIG} differs from {REJECT_CONFIG} beyond action/interface"
    );
    let b = read_toml(root, BASELINE_SCENARIO)?;
    let s = read_toml(root, STORM_SCENARIO)?;
    let (b_start, b_len, b_rates) = measure_phase(&b).context(BASELINE_SCENARIO)?;
    let (s_start, s_len, s_rates) = measure_phase(&s).context(STORM_SCENARIO)?;
    ensure!(
        b_start == s_start && b_len == s_len,
        "the two scenarios' {MEASURE} phases must be at the same time"
    );
    ensure!(
        s_len.fract() == 0.0 && s_len >= (SKIP_FIRST + SKIP_LAST + 3) as f64,
        "{MEASURE} must last a whole number of seconds ≥ 6"
    );
    ensure!(
        s_start.fract() == 0.0,
        "{MEASURE} must start on a whole second"
    );
    ensure!(
        b_rates.get(CLASS) == Some(&limit.rate),
        "{BASELINE_SCENARIO}: {MEASURE} {CLASS} must be L = {}",
        limit.rate
    );
    ensure!(
        s_rates.get(CLASS) == Some(&(STORM_FACTOR * limit.rate)),
        "{STORM_SCENARIO}: {MEASURE} {CLASS} must be {STORM_FACTOR} × L = {}",
        STORM_FACTOR * limit.rate
    );
    let strip = |v: &toml::Value| {
        let mut v = v.clone();
        if let Some(t) = v.as_table_mut() {
            t.remove("name");
        }
        if let Some(phases) = v.get_mut("phase").and_then(toml::Value::as_array_mut) {
            for p in phases {
                if p.get("name").and_then(toml::Value::as_str) == Some(MEASURE)
                    && let Some(r) = p.get_mut("rates").and_then(toml::Value::as_table_mut)
                {
                    r.remove(CLASS);
                }
            }
        }
        v
    };
    ensure!(
        strip(&b) == strip(&s),
        "the scenarios must differ only in the {MEASURE} {CLASS} rate"
    );
    ensure!(
        s_rates.get("gx_ccr_u").copied().unwrap_or(0.0) > 0.0,
        "{MEASURE} needs steady CCR-U (P4)"
    );
    Ok(Plan {
        limit,
        drop_limit: dx,
        measure_start_s: s_start,
        measure_s: s_len,
        storm_rates: s_rates,
        baseline_rates: b_rates,
    })
}

// ---- running ------------------------------------------------------------------------

/// Refuses to start when a lab (namespaces or pins) exists: it may be someone's.
pub fn preflight(root: &Path) -> Result<Plan> {
    let ns = lab::namespaces();
    if !ns.is_empty() || Path::new(PIN_DIR).exists() {
        bail!(
            "a lab is up (namespaces {ns:?}, pins {PIN_DIR}: {}); the storm benchmark builds its own. \
             Remove it with `cargo xtask lab down` and run again",
            Path::new(PIN_DIR).exists()
        );
    }
    plan(root)
}

/// What one run measured.
struct RunResult {
    name: &'static str,
    fast_path: bool,
    cpu_s: f64,
    window_s: f64,
    /// CCR-I 2001 per second over the interior of `measure` (client rows).
    admitted_per_s: Option<f64>,
    /// CCR-I sent per second over the interior (what the client really offered).
    offered_per_s: Option<f64>,
    /// Per family/outcome over the interior, from the agent's metrics (per second).
    metrics_interior_per_s: BTreeMap<String, f64>,
    /// Per family/outcome over all of `measure` (counts).
    metrics_measure: BTreeMap<String, f64>,
    /// Requests the agent read from pgw1 per second over `measure` (dra_requests_total).
    requests_in_per_s: f64,
    /// The client's summary, when it finished by itself.
    summary: Value,
    json: Value,
}

impl RunResult {
    /// Admitted CCR-I per second over the interior as the agent counted it (any
    /// `…/admitted` outcome counter), else as the client saw it (2001 answers).
    fn admitted_at_agent(&self) -> (Option<f64>, &'static str) {
        let m: Vec<f64> = self
            .metrics_interior_per_s
            .iter()
            .filter(|(k, _)| k.ends_with("/admitted"))
            .map(|(_, v)| *v)
            .collect();
        if m.is_empty() {
            (self.admitted_per_s, "client rows (CCR-I answered 2001)")
        } else {
            (Some(m.iter().sum()), "agent metrics (outcome=\"admitted\")")
        }
    }

    fn ccr_u(&self) -> Value {
        self.summary
            .get("classes")
            .and_then(|c| c.get("gx_ccr_u"))
            .cloned()
            .unwrap_or(Value::Null)
    }
    fn ccr_u_p99(&self) -> Option<f64> {
        self.ccr_u()
            .get("latency")
            .and_then(|l| l.get("p99_ms"))
            .and_then(Value::as_f64)
    }
}

fn xdp_attached() -> bool {
    lab::sh(&["ip", "-n", NS_DRA, "link", "show", DRA_CLIENT_IF]).is_ok_and(|o| o.contains("xdp"))
}

/// Sleeps until `t`, failing on Ctrl-C or when the agent or client exits early.
fn wait_until(
    t: Instant,
    dra: &mut Proc,
    client: &mut Proc,
    dra_log: &Path,
    client_log: &Path,
) -> Result<()> {
    loop {
        procs::interrupted()?;
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited during the run ({st}); log {}",
                dra_log.display()
            );
        }
        if let Some(st) = client.exited() {
            bail!(
                "the load generator exited before the end of {MEASURE} ({st}); log {}",
                client_log.display()
            );
        }
        let now = Instant::now();
        if now >= t {
            return Ok(());
        }
        std::thread::sleep((t - now).min(Duration::from_millis(20)));
    }
}

fn run_one(root: &Path, bins: &Bins, spec: &RunSpec, plan: &Plan, out: &Path) -> Result<RunResult> {
    let dir = out.join(spec.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    if xdp_attached() || Path::new(PIN_DIR).exists() {
        bail!(
            "XDP still attached on {DRA_CLIENT_IF} or {PIN_DIR} present before run {}",
            spec.name
        );
    }
    let mut cmd = lab::command_in(NS_DRA, &bins.dra)?;
    cmd.args(["run", "--config"])
        .arg(root.join(spec.config))
        .args(["--pin-dir", PIN_DIR, "--detach-on-exit"]);
    // warn: the same (quiet) logging in every run, so logging is no part of the CPU compared.
    cmd.env("RUST_LOG", "warn");
    let dra_log = dir.join("dra.log");
    let mut dra = Proc::new("dra run", procs::spawn_to(&dra_log, "dra", &mut cmd)?);
    let dra_pid = dra_pid(&dra)?;
    let end = Instant::now() + Duration::from_secs(40);
    loop {
        procs::interrupted()?;
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited ({st}); log:\n{}",
                std::fs::read_to_string(&dra_log).unwrap_or_default()
            );
        }
        if let Ok(s) = metrics::scrape()
            && UPSTREAMS
                .iter()
                .all(|p| s.sum("dra_peer_state", &[("peer", p), ("state", "open")]) == 1.0)
        {
            break;
        }
        if Instant::now() > end {
            bail!(
                "the agent did not become ready in 40 s (upstreams open); log {}",
                dra_log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let attached = xdp_attached();
    ensure!(
        attached == spec.fast_path,
        "run {}: XDP on {DRA_CLIENT_IF} is {} but the config says {}",
        spec.name,
        if attached { "attached" } else { "not attached" },
        if spec.fast_path {
            "attach"
        } else {
            "no fast path"
        }
    );
    let scn = read_toml(root, spec.scenario)?;
    let total_s = scenario_secs(&scn);
    let rows_path = dir.join("pgw1-rows.jsonl");
    let summary_path = dir.join("pgw1-summary.json");
    let client_log = dir.join("pgw1.log");
    let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
    c.args([
        "client",
        "--connect",
        "198.18.1.1:3868",
        "--bind",
        PEER_SRC,
        "--peers",
        "1",
    ])
    .args([
        "--origin-host",
        "pgw1.lab.example",
        "--tw",
        "6",
        "--quiet",
        "--scenario",
    ])
    .arg(root.join(spec.scenario))
    .arg("--rows")
    .arg(&rows_path)
    .arg("--summary-json")
    .arg(&summary_path);
    let mut client = Proc::new(
        "dra-loadgen client",
        procs::spawn_to(&client_log, "pgw1", &mut c)?,
    );
    let t0 = Instant::now();
    eprintln!("xtask: run {} ({}): {} s", spec.name, spec.purpose, total_s);
    let m_start = t0 + Duration::from_secs_f64(plan.measure_start_s);
    let m_end = m_start + Duration::from_secs_f64(plan.measure_s);
    let i_start = m_start + Duration::from_secs(SKIP_FIRST as u64);
    let i_end = m_end - Duration::from_secs(SKIP_LAST as u64);
    wait_until(m_start, &mut dra, &mut client, &dra_log, &client_log)?;
    let (cpu0, at0) = (cpu_seconds(dra_pid)?, Instant::now());
    let (busy0, lab0, load0) = (machine_busy_s()?, lab_processes_cpu_s(), loadavg());
    let snap_m0 = metrics::scrape()?;
    wait_until(i_start, &mut dra, &mut client, &dra_log, &client_log)?;
    let snap_i0 = metrics::scrape()?;
    wait_until(i_end, &mut dra, &mut client, &dra_log, &client_log)?;
    let snap_i1 = metrics::scrape()?;
    wait_until(m_end, &mut dra, &mut client, &dra_log, &client_log)?;
    let (cpu1, at1) = (cpu_seconds(dra_pid)?, Instant::now());
    let (busy1, lab1, load1) = (machine_busy_s()?, lab_processes_cpu_s(), loadavg());
    let snap_m1 = metrics::scrape()?;
    // The client stops after its last phase plus a drain of one request timeout. With
    // `drop` its TCP connection can be far behind (the sender's congestion control
    // slows down under the policer and dra-loadgen keeps queueing): it then waits for
    // its DPA behind that backlog. Its rows are written every second, so for the runs
    // that need no summary it is stopped after a grace period.
    let timeout_s = scn
        .get("request_timeout_ms")
        .and_then(toml::Value::as_integer)
        .unwrap_or(2000) as f64
        / 1000.0;
    let grace = if spec.needs_summary {
        40.0
    } else {
        timeout_s + 8.0
    };
    let deadline = t0 + Duration::from_secs_f64(total_s + grace);
    let mut client_end = "exited by itself".to_owned();
    while client.exited().is_none() {
        procs::interrupted()?;
        if Instant::now() > deadline {
            if spec.needs_summary {
                bail!(
                    "the load generator did not finish in time; log {}",
                    client_log.display()
                );
            }
            client.stop(Duration::from_secs(2));
            client_end = format!(
                "stopped by xtask {grace:.0} s after its last phase (still sending its backlog; no summary)"
            );
            eprintln!("xtask: run {}: client {client_end}", spec.name);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    remove_pid_file("pgw1");
    let summary: Value = match std::fs::read_to_string(&summary_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
    {
        Some(v) => v,
        None if !spec.needs_summary => Value::Null,
        None => bail!(
            "no client summary ({:?}); log {}",
            client.exited(),
            client_log.display()
        ),
    };
    let snap_end = metrics::scrape()?;
    let st = dra.stop(Duration::from_secs(10));
    remove_pid_file("dra");
    if !st.is_some_and(|s| s.success()) {
        bail!(
            "dra run did not exit cleanly on SIGINT ({st:?}); log {}",
            dra_log.display()
        );
    }
    if xdp_attached() || Path::new(PIN_DIR).exists() {
        eprintln!(
            "xtask: the fast path was left attached after run {}: dra detach",
            spec.name
        );
        let mut d = lab::command_in(NS_DRA, &bins.dra)?;
        d.args(["detach", "--iface", DRA_CLIENT_IF, "--pin-dir", PIN_DIR]);
        crate::step("dra detach", &mut d)?;
    }

    let rows = std::fs::read_to_string(&rows_path).unwrap_or_default();
    let per_second = rows_per_second(&rows, MEASURE, CLASS, "2001");
    let ok: Vec<f64> = per_second.iter().map(|r| r.2 as f64).collect();
    let sent: Vec<f64> = per_second.iter().map(|r| r.1 as f64).collect();
    let admitted_per_s = interior_mean(&ok, SKIP_FIRST, SKIP_LAST);
    let offered_per_s = interior_mean(&sent, SKIP_FIRST, SKIP_LAST);
    let interior_s = plan.measure_s - (SKIP_FIRST + SKIP_LAST) as f64;
    let metrics_interior_per_s: BTreeMap<String, f64> =
        outcome_deltas(&snap_i0, &snap_i1, PEER, CLASS)
            .into_iter()
            .map(|(k, v)| (k, v / interior_s))
            .collect();
    let metrics_measure = outcome_deltas(&snap_m0, &snap_m1, PEER, CLASS);
    let cpu_s = cpu1 - cpu0;
    let window_s = (at1 - at0).as_secs_f64();
    let req_in =
        |snap: &Snap| snap.sum("dra_requests_total", &[("peer", PEER), ("direction", "in")]);
    let requests_in_per_s = (req_in(&snap_m1) - req_in(&snap_m0)) / plan.measure_s;
    let u_p99: Vec<f64> = rows_p99(&rows, MEASURE, "gx_ccr_u");
    let cfg_limit = config_limit(&read_toml(root, spec.config)?)?.0;
    let json = json!({
        "run": spec.name,
        "purpose": spec.purpose,
        "dra_config": spec.config,
        "scenario": spec.scenario,
        "limit": { "peer": PEER, "class": CLASS, "rate_per_s": cfg_limit.rate, "burst": cfg_limit.burst, "action": cfg_limit.action },
        "fast_path_attached": attached,
        "measure_phase": { "start_s": plan.measure_start_s, "duration_s": plan.measure_s,
                           "interior": format!("seconds {}..{} of {MEASURE} (first {SKIP_FIRST} and last {SKIP_LAST} left out)", SKIP_FIRST, plan.measure_s as usize - SKIP_LAST) },
        "agent_cpu": { "seconds": cpu_s, "window_s": window_s, "percent_of_one_core": 100.0 * cpu_s / window_s,
                       "source": "utime+stime of the `dra run` process, /proc/<pid>/stat, at the start and end of measure" },
        "client_ccr_i": { "offered_per_s": offered_per_s, "answered_2001_per_s": admitted_per_s,
                          "per_second": per_second.iter().map(|(t, s, a)| json!({"t": t, "sent": s, "answered_2001": a})).collect::<Vec<_>>() },
        "agent_metrics": {
            "ccr_i_by_outcome_measure": metrics_measure,
            "ccr_i_by_outcome_interior_per_s": metrics_interior_per_s,
            "pgw1_counter_deltas_measure": counter_deltas(&snap_m0, &snap_m1, PEER),
            "pgw1_counter_totals_at_end": counter_deltas(&Snap { series: Vec::new() }, &snap_end, PEER),
            "note": "fast-path counters are copied into the metrics once per second; the interior snapshots are a whole number of seconds apart",
        },
        "agent_requests_in_per_s": requests_in_per_s,
        "machine_during_measure": {
            "busy_cpu_s_all_cpus": busy1 - busy0,
            "lab_processes_cpu_s": lab1 - lab0,
            "other_cpu_s": (busy1 - busy0) - (lab1 - lab0),
            "load_average_start": load0, "load_average_end": load1,
            "note": "other = machine busy − the lab's processes: other jobs on the machine plus kernel time not charged to a process (softirq: the lab's packets, XDP)",
        },
        "client_ccr_u_per_second_p99_ms": { "median": median(&u_p99), "max": u_p99.iter().copied().fold(f64::NAN, f64::max), "values": u_p99 },
        "client_end": client_end,
        "client_summary": summary,
        "files": dir.strip_prefix(root).unwrap_or(&dir).display().to_string(),
    });
    eprintln!(
        "xtask: run {}: agent CPU {:.2} s over {:.1} s; CCR-I offered {:.0}/s, answered 2001 {:.0}/s; CCR-U p99 {} ms",
        spec.name,
        cpu_s,
        window_s,
        offered_per_s.unwrap_or(f64::NAN),
        admitted_per_s.unwrap_or(f64::NAN),
        summary
            .pointer("/classes/gx_ccr_u/latency/p99_ms")
            .and_then(Value::as_f64)
            .map_or("-".into(), |v| format!("{v:.2}"))
    );
    Ok(RunResult {
        name: spec.name,
        fast_path: attached,
        cpu_s,
        window_s,
        admitted_per_s,
        offered_per_s,
        metrics_interior_per_s,
        metrics_measure,
        requests_in_per_s,
        summary,
        json,
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn dra_pid(p: &Proc) -> Result<u32> {
    p.pid().context("dra run has no pid")
}

// ---- P3, P4, P5 from the runs -------------------------------------------------------

fn find<'a>(runs: &'a [RunResult], name: &str) -> Result<&'a RunResult> {
    runs.iter()
        .find(|r| r.name == name)
        .with_context(|| format!("run {name} missing"))
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// P3 from the reject storm run.
fn p3(plan: &Plan, r: &RunResult) -> (Value, TableRow) {
    let l = plan.limit.rate;
    let err = r.admitted_per_s.map(|a| relative_error(a, l));
    let met = err.map(|e| e <= GOAL_P3_MAX_ERROR);
    let fp_admitted = r
        .metrics_interior_per_s
        .get("dra_fastpath_requests_total/admitted")
        .copied();
    let v = json!({
        "run": r.name,
        "limit_per_s": l, "burst": plan.limit.burst, "action": plan.limit.action,
        "offered_target_per_s": STORM_FACTOR * l,
        "offered_per_s": r.offered_per_s,
        "admitted_per_s": r.admitted_per_s,
        "error": err,
        "goal_max_error": GOAL_P3_MAX_ERROR,
        "met": met,
        "source": format!("client rows (--rows): {CLASS} answered 2001 per second, mean over the interior of {MEASURE}"),
        "cross_check": {
            "source": "agent metrics dra_fastpath_requests_total{peer=\"pgw1\",class=\"gx_ccr_i\",outcome=\"admitted\"}, same interior",
            "admitted_per_s": fp_admitted,
            "error": fp_admitted.map(|a| relative_error(a, l)),
            "all_outcomes_per_s": r.metrics_interior_per_s,
        },
    });
    let row = TableRow {
        metric: "P3 admitted CCR-I rate error, 10× offered".into(),
        measured: format!(
            "{} % ({} /s admitted of {} /s offered, limit {l} /s)",
            fmt_opt(err.map(|e| 100.0 * e), 2),
            fmt_opt(r.admitted_per_s, 1),
            fmt_opt(r.offered_per_s, 0)
        ),
        goal: format!("≤ {} %", 100.0 * GOAL_P3_MAX_ERROR),
        met,
    };
    (v, row)
}

/// P4 from the no-storm and reject storm runs.
fn p4(calm: &RunResult, storm: &RunResult) -> (Value, TableRow) {
    let (a, b) = (storm.ccr_u_p99(), calm.ccr_u_p99());
    let q = a.zip(b).and_then(|(a, b)| ratio(a, b));
    let met = q.map(|q| q <= GOAL_P4_MAX_RATIO);
    let v = json!({
        "action": "reject",
        "runs": { "no_storm": calm.name, "storm": storm.name },
        "ccr_u_p99_no_storm_ms": b,
        "ccr_u_p99_storm_ms": a,
        "ratio": q,
        "goal_max_ratio": GOAL_P4_MAX_RATIO,
        "met": met,
        "source": "client summary (HdrHistogram) of gx_ccr_u; CCR-U is sent only in the measure phase",
        "ccr_u_no_storm": calm.ccr_u(),
        "ccr_u_storm": storm.ccr_u(),
    });
    let row = TableRow {
        metric: "P4 CCR-U p99 during 10× CCR-I storm ÷ without (reject)".into(),
        measured: format!(
            "{}× ({} ms vs {} ms)",
            fmt_opt(q, 2),
            fmt_opt(a, 2),
            fmt_opt(b, 2)
        ),
        goal: format!("≤ {GOAL_P4_MAX_RATIO}×"),
        met,
    };
    (v, row)
}

/// Whether a run is seen to limit CCR-I: the agent's own counters (any family with
/// labels peer, class, outcome) show over-limit requests dropped or marked, and it
/// admitted at most [`LIMITED_MAX_FACTOR`] × L. A run without such counters cannot be
/// verified and does not count as limited.
pub fn limited(
    admitted_per_s: Option<f64>,
    limit: f64,
    by_outcome: &BTreeMap<String, f64>,
) -> bool {
    let refused: f64 = by_outcome
        .iter()
        .filter(|(k, _)| k.ends_with("/dropped") || k.ends_with("/marked"))
        .map(|(_, v)| v)
        .sum();
    refused > 0.0 && admitted_per_s.is_some_and(|a| a <= LIMITED_MAX_FACTOR * limit)
}

/// P5 from the two drop runs.
fn p5(plan: &Plan, xdp: &RunResult, us: &RunResult) -> (Value, TableRow) {
    let l = plan.drop_limit.rate;
    let q = ratio(us.cpu_s, xdp.cpu_s);
    let (ax, sx) = xdp.admitted_at_agent();
    let (au, su) = us.admitted_at_agent();
    let (lx, lu) = (
        limited(ax, l, &xdp.metrics_measure),
        limited(au, l, &us.metrics_measure),
    );
    let valid = lx && lu && xdp.fast_path && !us.fast_path;
    let met = q.map(|q| valid && q >= GOAL_P5_MIN_RATIO);
    let note = if valid {
        format!(
            "both runs limited CCR-I (the agent's counters show refused requests, admitted ≤ {LIMITED_MAX_FACTOR} L): \
             XDP run {}/s ({sx}), userspace run {}/s ({su}); the agent read {:.0} requests/s from pgw1 in the XDP \
             run and {:.0}/s in the userspace run. With drop, the sender's TCP slows down under the policer, so an \
             XDP run can admit less than L.",
            fmt_opt(ax, 0),
            fmt_opt(au, 0),
            xdp.requests_in_per_s,
            us.requests_in_per_s
        )
    } else {
        format!(
            "NOT A VALID COMPARISON: CCR-I limited in the XDP run: {lx} ({}/s, {sx}), in the userspace run: {lu} \
             ({}/s, {su}); limited = the agent's counters (labels peer, class, outcome) show dropped/marked CCR-I \
             and admitted ≤ {LIMITED_MAX_FACTOR} L = {:.0}/s; XDP attached in run 1 and not in run 2. Without a \
             userspace limiter in `dra run` the fast-path-less run forwards the whole storm.",
            fmt_opt(ax, 0),
            fmt_opt(au, 0),
            LIMITED_MAX_FACTOR * l
        )
    };
    let side = |r: &RunResult, admitted: Option<f64>, source: &str| {
        json!({
            "run": r.name,
            "fast_path_attached": r.fast_path,
            "agent_cpu_s": r.cpu_s,
            "window_s": r.window_s,
            "agent_requests_in_per_s": r.requests_in_per_s,
            "ccr_i_offered_per_s_client": r.offered_per_s,
            "ccr_i_answered_2001_per_s_client": r.admitted_per_s,
            "ccr_i_admitted_per_s": admitted,
            "ccr_i_admitted_source": source,
            "ccr_i_by_outcome_measure": r.metrics_measure,
            "ccr_i_admitted_fraction_of_limit": admitted.map(|a| a / l),
            "limited": limited(admitted, l, &r.metrics_measure),
        })
    };
    let v = json!({
        "action": "drop",
        "limit_per_s": l, "burst": plan.drop_limit.burst,
        "xdp": side(xdp, ax, sx),
        "userspace": side(us, au, su),
        "ratio_userspace_to_xdp": q,
        "goal_min_ratio": GOAL_P5_MIN_RATIO,
        "valid": valid,
        "met": met,
        "note": note,
        "source": "utime+stime of `dra run` over the measure phase (/proc/<pid>/stat, sysconf(_SC_CLK_TCK))",
    });
    let measured = format!(
        "{}× ({:.2} s vs {:.2} s CPU; CCR-I admitted {} vs {} /s){}",
        fmt_opt(q, 2),
        us.cpu_s,
        xdp.cpu_s,
        fmt_opt(au, 0),
        fmt_opt(ax, 0),
        if valid { "" } else { " — INVALID: see note" }
    );
    let row = TableRow {
        metric: "P5 agent CPU in 10× storm: userspace limiting ÷ XDP drop".into(),
        measured,
        goal: format!("≥ {GOAL_P5_MIN_RATIO}×"),
        met,
    };
    (v, row)
}

/// `cargo xtask bench storm` (after the release build): runs everything, writes
/// [`STORM_LATEST`] and the run files under results/bench-storm-<timestamp>/, prints the table.
pub fn run(root: &Path) -> Result<()> {
    let plan = preflight(root)?;
    procs::install_signal_handlers();
    let bins = Bins::release(root);
    for cfg in [REJECT_CONFIG, DROP_XDP_CONFIG, DROP_USERSPACE_CONFIG] {
        let out = std::process::Command::new(&bins.dra)
            .arg("check-config")
            .arg(root.join(cfg))
            .output()?;
        ensure!(
            out.status.success(),
            "dra check-config {cfg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out: PathBuf = root
        .join("results")
        .join(format!("bench-storm-{}", results::timestamp()));
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let started = Instant::now();
    let result = {
        let _lab = lab::LabGuard;
        eprintln!("xtask: lab up (namespaces dralab-*, Redis, pcrf1/pcrf2/ocs1 simulators)");
        lab::up(&bins)?;
        let mut runs = Vec::new();
        let mut failed = None;
        for spec in &RUNS {
            match run_one(root, &bins, spec, &plan, &out) {
                Ok(r) => runs.push(r),
                Err(e) => {
                    failed = Some(e.context(format!("run {}", spec.name)));
                    break;
                }
            }
        }
        // P3's coalesced case, on the same lab.
        let mut coalesced = (Vec::new(), Vec::new());
        if failed.is_none() {
            match crate::coalesced::runs(root, &bins, &out) {
                Ok(c) => coalesced = c,
                Err(e) => failed = Some(e),
            }
        }
        for s in UPSTREAMS {
            let _ = std::fs::copy(lab::log_file(s), out.join(format!("{s}.log")));
        }
        match failed {
            Some(e) => Err(e),
            None => Ok((runs, coalesced)),
        }
    };
    let left_ns = lab::namespaces();
    let left_pins = Path::new(PIN_DIR).exists();
    let (runs, (coalesced, coalesced_rows)) = result?;
    if !left_ns.is_empty() || left_pins {
        bail!("lab not fully removed: namespaces {left_ns:?}, pins left: {left_pins}");
    }
    let (p3v, p3r) = p3(&plan, find(&runs, "storm-reject-xdp")?);
    let (p4v, p4r) = p4(find(&runs, "no-storm")?, find(&runs, "storm-reject-xdp")?);
    let (p5v, p5r) = p5(
        &plan,
        find(&runs, "storm-drop-xdp")?,
        find(&runs, "storm-drop-userspace")?,
    );
    let table = vec![p3r, p4r, p5r];
    let mut printed = table.clone();
    printed.extend(coalesced_rows.iter().cloned());
    let doc = json!({
        "machine": results::machine(root),
        "duration_s": started.elapsed().as_secs_f64(),
        "configs": { "reject": REJECT_CONFIG, "drop_xdp": DROP_XDP_CONFIG, "drop_userspace": DROP_USERSPACE_CONFIG,
                     "baseline_scenario": BASELINE_SCENARIO, "storm_scenario": STORM_SCENARIO,
                     "measure_rates_storm": plan.storm_rates, "measure_rates_no_storm": plan.baseline_rates },
        "p3": p3v,
        "p4": p4v,
        "p5": p5v,
        "table": table.iter().map(TableRow::to_json).collect::<Vec<_>>(),
        "runs": runs.iter().map(|r| r.json.clone()).collect::<Vec<_>>(),
        "coalesced": coalesced,
        "coalesced_table": coalesced_rows.iter().map(TableRow::to_json).collect::<Vec<_>>(),
        "run_files": out.strip_prefix(root).unwrap_or(&out).display().to_string(),
    });
    let text = serde_json::to_string_pretty(&doc)? + "\n";
    let latest = root.join(STORM_LATEST);
    std::fs::write(&latest, &text).with_context(|| format!("write {}", latest.display()))?;
    std::fs::write(out.join("storm.json"), &text)?;
    let mut s = String::new();
    let _ = writeln!(s, "\n{}", results::render_markdown(&printed));
    print!("{s}");
    println!("written {} (runs in {})", latest.display(), out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_gives_utime_plus_stime_even_with_spaces_and_parens_in_the_name() {
        // Fields 14 (utime) = 1234 and 15 (stime) = 56.
        let stat = "4242 (dra (run) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 56 0 0 20 0 6 0 \
                    31337 1000000 500 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(proc_stat_cpu_ticks(stat).unwrap(), 1290);
        assert!(proc_stat_cpu_ticks("4242 (dra) S 1 2").is_err());
        assert!(proc_stat_cpu_ticks("no parens at all").is_err());
    }

    #[test]
    fn our_own_stat_line_parses() {
        let s = std::fs::read_to_string("/proc/self/stat").unwrap();
        proc_stat_cpu_ticks(&s).unwrap();
    }

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 1000 20 3 7 2 9 0\ncpu0 50 2 25 500 10 1 3 1 0 0\nintr 1 2\n";
        // total = 100+5+50+1000+20+3+7+2 (guest not added again), busy = total − idle − iowait.
        assert_eq!(proc_stat_busy_total(stat).unwrap(), (167, 1187));
        assert!(proc_stat_busy_total("intr 1 2").is_err());
    }

    const ROWS: &str = r#"{"t":5,"phase":"open","classes":{"gx_ccr_i":{"sent":400,"answered":{"2001":400}}}}
{"t":6,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":510,"3002":4490}}}}
{"t":7,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":502,"3002":4498}}}}
{"t":8,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":498,"3002":4502}}}}
{"t":9,"phase":"measure","classes":{"gx_ccr_i":{"sent":4990,"answered":{"2001":504,"3002":4486}}}}
{"t":10,"phase":"measure","classes":{"gx_ccr_u":{"sent":1000,"answered":{"2001":1000}}}}
{"t":11,"phase":"measure","classes":{"gx_ccr_i":{"sent":5000,"answered":{"2001":300}}}}
not json
"#;

    #[test]
    fn admitted_rate_and_error_come_from_the_interior_of_the_phase() {
        let ps = rows_per_second(ROWS, "measure", "gx_ccr_i", "2001");
        assert_eq!(
            ps.len(),
            6,
            "only rows of the phase, a second without CCR-I counts as 0"
        );
        assert_eq!(ps[0], (6, 5000, 510));
        assert_eq!(ps[4], (10, 0, 0));
        let ok: Vec<f64> = ps.iter().map(|r| r.2 as f64).collect();
        // Without the first 2 and the last 1: 498, 504, 0.
        assert_eq!(interior_mean(&ok, 2, 1), Some(334.0));
        assert_eq!(interior_mean(&ok[..4], 2, 1), Some(498.0));
        assert_eq!(interior_mean(&ok[..3], 2, 1), None);
        assert!((relative_error(490.0, 500.0) - 0.02).abs() < 1e-12);
        assert!((relative_error(510.0, 500.0) - 0.02).abs() < 1e-12);
        assert_eq!(ratio(6.0, 2.0), Some(3.0));
        assert_eq!(ratio(6.0, 0.0), None);
    }

    #[test]
    fn per_second_p99_and_median() {
        let rows = r#"{"t":6,"phase":"measure","classes":{"gx_ccr_u":{"sent":1000,"answered":{"2001":990},"p99_ms":12.5}}}
{"t":7,"phase":"measure","classes":{"gx_ccr_u":{"sent":1000,"answered":{},"p99_ms":0.0}}}
{"t":8,"phase":"measure","classes":{"gx_ccr_u":{"sent":1000,"answered":{"2001":1000},"p99_ms":80.0}}}
{"t":9,"phase":"measure","classes":{"gx_ccr_u":{"sent":1000,"answered":{"2001":1000},"p99_ms":11.0}}}
{"t":5,"phase":"open","classes":{"gx_ccr_u":{"sent":1,"answered":{"2001":1},"p99_ms":99.0}}}"#;
        let v = rows_p99(rows, "measure", "gx_ccr_u");
        assert_eq!(v, [12.5, 80.0, 11.0], "a second without answers has no p99");
        assert_eq!(median(&v), Some(12.5));
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn a_run_limited_when_it_admitted_at_most_1_2_l() {
        let refused = BTreeMap::from([("dra_fastpath_requests_total/dropped".to_owned(), 900.0)]);
        let none = BTreeMap::from([("dra_fastpath_requests_total/dropped".to_owned(), 0.0)]);
        assert!(limited(Some(500.0), 500.0, &refused));
        assert!(
            limited(Some(190.0), 500.0, &refused),
            "TCP back-pressure below L still limited"
        );
        assert!(
            !limited(Some(4800.0), 500.0, &refused),
            "a run that forwarded the storm did not limit"
        );
        assert!(
            !limited(Some(231.0), 500.0, &BTreeMap::new()),
            "no counters of the agent: not verified"
        );
        assert!(
            !limited(Some(231.0), 500.0, &none),
            "nothing refused: low throughput is not limiting"
        );
        assert!(!limited(None, 500.0, &refused));
    }

    #[test]
    fn the_bench_configs_carry_the_same_limit_and_the_scenarios_offer_l_and_10_l() {
        let root = crate::workspace_root();
        let p = plan(&root).unwrap();
        assert_eq!(p.limit.action, "reject");
        assert_eq!(p.drop_limit.action, "drop");
        assert_eq!(
            (p.limit.rate, p.limit.burst),
            (p.drop_limit.rate, p.drop_limit.burst)
        );
        assert_eq!(p.storm_rates[CLASS], 10.0 * p.limit.rate);
        assert_eq!(p.baseline_rates[CLASS], p.limit.rate);
        assert_eq!(p.storm_rates["gx_ccr_u"], p.baseline_rates["gx_ccr_u"]);
    }

    #[test]
    fn a_config_that_changes_more_than_action_or_interface_is_refused() {
        let root = crate::workspace_root();
        let a = read_toml(&root, REJECT_CONFIG).unwrap();
        let text = std::fs::read_to_string(root.join(DROP_USERSPACE_CONFIG)).unwrap();
        let b: toml::Value = toml::from_str(&text.replace("rate = 500", "rate = 600")).unwrap();
        assert_ne!(
            without_action_and_interface(&a),
            without_action_and_interface(&b)
        );
        let c: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            without_action_and_interface(&a),
            without_action_and_interface(&c)
        );
        let drl: toml::Value = toml::from_str(&text.replace(
            "dynamic_rate_limiting = false",
            "dynamic_rate_limiting = true",
        ))
        .unwrap();
        assert!(config_limit(&drl).is_err());
    }
}
