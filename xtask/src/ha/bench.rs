//! `cargo xtask bench ha`: the HA pair under faults (docs/bench.md "HA pair").
//!
//! On the HA lab ([`super`]) with both DRA hosts on the Redis Cluster store:
//!
//! 1. **Failover run.** Two gateways (`dra-loadgen client --secondary`, DRA A primary,
//!    DRA B secondary) run Gx session life cycles: [`BUILD_S`] s of CCR-I only, then
//!    CCR-I, CCR-U and CCR-T at [`RATE`]/s each per gateway for [`STEADY_S`] s, then a
//!    flush (a CCR-T for every open session). At [`KILL_A_AT`] s DRA A gets SIGKILL (the
//!    gateways resend their pending requests to B with the T flag); at [`RESTART_A_AT`] s
//!    it is started again (the gateways fail back once its watchdog is OKAY); at
//!    [`KILL_MASTER_AT`] s one Redis master gets SIGKILL (its replica is promoted).
//!    Counted: sessions, misrouted (5002 from the strict servers), unanswered (timeouts
//!    and lost requests at the gateways), resent_with_t, failover_ms (last answer via A
//!    → first via B), store_errors (both agents' `dra_session_store_errors_total`) and
//!    redis_master_failover_ms (kill → replica is master, cluster_state:ok).
//! 2. **Relay rate by store.** DRA A alone, once with `kind = "memory"` and once with
//!    `kind = "redis_cluster"`: the relay benchmark's closed loop (`dra-loadgen closed`,
//!    both gateways, [`WINDOW`] in flight each) against the same servers; requests/s of
//!    each and their ratio (goal ≥ [`GOAL_RATIO`]).
//!
//! The lab is always removed (guard, and SIGINT/SIGTERM only raise a flag polled here).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use dra_report::client::{ClassSummary, Report};
use dra_report::closed::ClosedSummary;
use dra_report::server::ServerStats;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    DIAMETER_PORT, DRAS, GWS, NS_GW, REDIS_PORTS, SERVERS, STATE_DIR, Store, command_in,
    gateway_command, log_file, recorded_pid, redis_name, redis_node, spawn_logged, start_dra,
};
use crate::agent_run::{Agent, ClientFiles};
use crate::lab::Bins;
use crate::procs::{self, interrupted};
use crate::results::{TableRow, first_line, machine};

/// The result file.
pub const HA_LATEST: &str = "bench/results/ha-latest.json";
/// Goal: relayed requests/s with the Redis Cluster store ÷ with the memory store.
pub const GOAL_RATIO: f64 = 0.5;
/// Goal: at least this many sessions in the failover run.
pub const MIN_SESSIONS: u64 = 20_000;

/// Requests/s per class and gateway in the steady phase.
pub const RATE: u32 = 200;
/// CCR-I only at the start, s (an open-session population for CCR-U/T to pick from).
pub const BUILD_S: u32 = 3;
/// Steady phase, s.
pub const STEADY_S: u32 = 75;
/// Flush phase, s.
pub const FLUSH_S: u32 = 3;
/// When DRA A is killed, restarted, and a Redis master killed (s after the gateways
/// start).
pub const KILL_A_AT: f64 = 20.0;
pub const RESTART_A_AT: f64 = 30.0;
pub const KILL_MASTER_AT: f64 = 60.0;
/// Closed loop: requests in flight per gateway; warm-up and measured seconds.
pub const WINDOW: u32 = 50;
pub const RELAY_WARMUP_S: u32 = 3;
pub const RELAY_SECONDS: u32 = 10;

fn scenario() -> String {
    format!(
        "name = \"ha-failover\"\n\
         destination_realm = \"pcrf.lab.example\"\n\
         request_timeout_ms = 4000\n\
         [[phase]]\nname = \"build\"\nduration_s = {BUILD_S}\nrates = {{ gx_ccr_i = {RATE} }}\n\
         [[phase]]\nname = \"steady\"\nduration_s = {STEADY_S}\n\
         rates = {{ gx_ccr_i = {RATE}, gx_ccr_u = {RATE}, gx_ccr_t = {RATE} }}\n\
         [[phase]]\nname = \"flush\"\nduration_s = {FLUSH_S}\nflush = \"gx\"\n"
    )
}

/// The last counters a `dra-loadgen server --stats-every 1` printed (its log's last
/// line that is a JSON object; the log's other lines are text).
fn server_stats(name: &str) -> Result<ServerStats> {
    let path = log_file(name);
    let log = std::fs::read_to_string(&path)?;
    let line = log
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("no stats line in {}", path.display()))?;
    Ok(dra_report::parse(
        line,
        &format!("{}, last stats line", path.display()),
    )?)
}

/// A Redis master, its replica's port and id (from `CLUSTER NODES`).
struct Master {
    port: u16,
    replica_port: u16,
    replica_id: String,
}

fn port_of(addr: &str) -> Option<u16> {
    addr.split('@').next()?.rsplit(':').next()?.parse().ok()
}

fn pick_master() -> Result<Master> {
    let nodes = redis_node(REDIS_PORTS[0], &["cluster", "nodes"])?;
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| f.len() >= 4)
        .collect();
    for m in lines.iter().filter(|f| f[2].contains("master")) {
        if let Some(r) = lines
            .iter()
            .find(|f| f[2].contains("slave") && f[3] == m[0])
        {
            return Ok(Master {
                port: port_of(m[1]).context("master address")?,
                replica_port: port_of(r[1]).context("replica address")?,
                replica_id: r[0].to_owned(),
            });
        }
    }
    bail!("no master with a replica in CLUSTER NODES:\n{nodes}")
}

/// SIGKILLs a master; returns ms until its replica is master and the cluster is ok.
fn kill_master() -> Result<(u16, f64)> {
    let m = pick_master()?;
    let pid = recorded_pid(&redis_name(m.port)).context("pid of the master")?;
    let t0 = Instant::now();
    // SAFETY: kill(2) on a redis-server this run started (pid file of the lab).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    loop {
        let promoted = redis_node(m.replica_port, &["cluster", "nodes"]).is_ok_and(|n| {
            n.lines()
                .any(|l| l.starts_with(&m.replica_id) && l.contains("master"))
        });
        let ok = redis_node(m.replica_port, &["cluster", "info"])
            .is_ok_and(|s| s.contains("cluster_state:ok"));
        if promoted && ok {
            return Ok((m.port, t0.elapsed().as_secs_f64() * 1000.0));
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "the replica of {} was not promoted in 60 s",
            m.port
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Restarts a killed node (it rejoins as a replica of its promoted replica).
fn restart_node(port: u16) -> Result<()> {
    let dir = Path::new(STATE_DIR).join(redis_name(port));
    let mut c = command_in(super::NS_REDIS, Path::new("redis-server"))?;
    c.args(["--port", &port.to_string(), "--bind", super::REDIS_IP])
        .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args([
            "--cluster-node-timeout",
            &super::CLUSTER_NODE_TIMEOUT_MS.to_string(),
        ])
        .arg("--dir")
        .arg(&dir);
    spawn_logged(&format!("{}-restarted", redis_name(port)), &mut c)?;
    super::wait_cluster_ok(Duration::from_secs(30))
}

/// What the failover run measured.
#[derive(Default)]
struct Failover {
    summaries: Vec<Report>,
    servers: Vec<ServerStats>,
    store_errors: f64,
    killed_master_port: u16,
    redis_master_failover_ms: f64,
    kill_a_at_s: f64,
    restart_a_at_s: f64,
}

impl Failover {
    /// `f` of every gateway's summary, summed.
    fn sum(&self, f: impl Fn(&Report) -> u64) -> u64 {
        self.summaries.iter().map(f).sum()
    }

    /// `f` of every class of every gateway's summary, summed.
    fn classes_sum(&self, f: impl Fn(&ClassSummary) -> u64) -> u64 {
        self.summaries
            .iter()
            .flat_map(|s| s.classes.values())
            .map(f)
            .sum()
    }

    fn answered_with(&self, code: u32) -> u64 {
        self.classes_sum(|c| c.answered_with(code))
    }

    /// `class` over both gateways.
    fn class(&self, class: &str) -> Value {
        let f = |k: fn(&ClassSummary) -> u64| -> u64 {
            self.summaries.iter().map(|s| k(&s.class(class))).sum()
        };
        json!({
            "sent": f(|c| c.sent),
            "answered": f(ClassSummary::answered_total),
            "answered_2001": f(|c| c.answered_with(2001)),
            "timeouts": f(|c| c.timeouts),
            "unanswered": f(|c| c.unanswered),
            "not_sent": f(|c| c.not_sent),
        })
    }

    fn misrouted(&self) -> u64 {
        self.servers.iter().map(|s| s.unknown_session).sum()
    }

    fn gaps(&self) -> Vec<f64> {
        self.summaries
            .iter()
            .flat_map(|s| s.peers.failover.failover_gaps_ms.iter().copied())
            .collect()
    }
}

/// The failover run on the lab's two agents (`agents`: A, B), which it stops at the end.
fn failover_run(bins: &Bins, agents: Vec<Agent<'static>>) -> Result<Failover> {
    let Ok::<[Agent; 2], _>([mut a, mut b]) = agents.try_into() else {
        bail!("the HA lab gave no two agents");
    };
    let dir = Path::new(STATE_DIR);
    let sc = dir.join("ha-failover.toml");
    std::fs::write(&sc, scenario())?;
    let mut gws = Vec::new();
    let t0 = Instant::now();
    for g in &GWS {
        let files = ClientFiles::new(dir, g.name);
        let mut c = gateway_command(bins, g, &sc, "primary")?;
        c.arg("--summary-json")
            .arg(&files.summary)
            .arg("--rows")
            .arg(&files.rows);
        gws.push((
            DRAS[0].site.spawn(&files.log, g.name, g.name, &mut c)?,
            files,
        ));
    }
    let mut out = Failover::default();
    let (mut killed, mut restarted, mut master) = (false, false, false);
    let total = f64::from(BUILD_S + STEADY_S + FLUSH_S) + 30.0;
    loop {
        interrupted()?;
        let t = t0.elapsed().as_secs_f64();
        b.ensure_running("on DRA host b during the failover run")?;
        if !killed && t >= KILL_A_AT {
            eprintln!("xtask: t={t:.1}s SIGKILL DRA A (pid {})", a.pid()?);
            a.kill();
            out.kill_a_at_s = t;
            killed = true;
        }
        if killed && !restarted && t >= RESTART_A_AT {
            eprintln!("xtask: t={t:.1}s restarting DRA A");
            a = start_dra(bins, &DRAS[0], Store::RedisCluster, "dra-a-restarted")?;
            out.restart_a_at_s = t;
            restarted = true;
        }
        if restarted {
            a.ensure_running("on DRA host a after its restart")?;
        }
        if restarted && !master && t >= KILL_MASTER_AT {
            let (port, ms) = kill_master()?;
            eprintln!(
                "xtask: t={t:.1}s SIGKILL Redis master :{port}; replica promoted in {ms:.0} ms"
            );
            out.killed_master_port = port;
            out.redis_master_failover_ms = ms;
            master = true;
        }
        if gws.iter_mut().all(|(p, _)| p.exited().is_some()) {
            break;
        }
        ensure!(t < total, "the gateways did not finish in {total:.0} s");
        std::thread::sleep(Duration::from_millis(20));
    }
    ensure!(
        killed && restarted && master,
        "the run ended before its faults"
    );
    for (g, (p, files)) in GWS.iter().zip(gws.iter_mut()) {
        let st = p.exited();
        ensure!(
            st.is_some_and(|s| s.success()),
            "gateway {} failed ({st:?}); log {}",
            g.name,
            files.log.display()
        );
        out.summaries.push(files.summary()?);
    }
    for d in &DRAS {
        // The agent creates a store-error series (op, kind) at the first such error:
        // without any, it has counted none.
        out.store_errors += d
            .site
            .scrape()
            .with_context(|| format!("metrics of DRA {}", d.name))?
            .sum_or_zero_if_absent("dra_session_store_errors_total", &[]);
    }
    // Servers print their counters every second: the last line after a quiet moment.
    std::thread::sleep(Duration::from_millis(1500));
    for s in &SERVERS {
        out.servers.push(server_stats(s.name)?);
    }
    restart_node(out.killed_master_port)?;
    // Both agents stop; the relay runs start A again with each store.
    b.stop()?;
    a.stop()?;
    Ok(out)
}

/// One closed-loop measurement through DRA A with one store: both gateways together.
#[derive(Serialize)]
struct Relay {
    store: &'static str,
    requests_per_s: f64,
    answered: u64,
    answered_2001: u64,
    p99_ms_max: f64,
    clients: Vec<ClosedSummary>,
}

/// One closed-loop measurement through DRA A with `store`: requests/s of both gateways.
fn relay(bins: &Bins, store: Store) -> Result<Relay> {
    let mut a = start_dra(bins, &DRAS[0], store, &format!("dra-a-{}", store.name()))?;
    let dir = Path::new(STATE_DIR);
    let mut clients = Vec::new();
    for g in &GWS {
        let name = format!("closed-{}-{}", store.name(), g.name);
        let mut c = command_in(NS_GW, &bins.loadgen)?;
        c.args([
            "closed",
            "--connect",
            &format!("{}:{DIAMETER_PORT}", DRAS[0].client_ip),
            "--bind",
            g.ip,
            "--origin-host",
            g.origin_host,
            "--peers",
            "1",
            "--window",
            &WINDOW.to_string(),
            "--warmup",
            &RELAY_WARMUP_S.to_string(),
            "--seconds",
            &RELAY_SECONDS.to_string(),
            "--tw",
            &super::TW_S.to_string(),
        ])
        .arg("--summary-json")
        .arg(dir.join(format!("{name}.json")));
        let p = DRAS[0].site.spawn(&log_file(&name), &name, &name, &mut c)?;
        clients.push((name, p));
    }
    let t0 = Instant::now();
    while clients.iter_mut().any(|(_, p)| p.exited().is_none()) {
        interrupted()?;
        a.ensure_running("during the closed loop")?;
        ensure!(
            t0.elapsed() < Duration::from_secs(u64::from(RELAY_WARMUP_S + RELAY_SECONDS) + 30),
            "closed-loop clients did not finish"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut rps = 0.0;
    let mut ok = 0;
    let mut answered = 0;
    let mut p99: f64 = 0.0;
    let mut per = Vec::new();
    for (name, p) in clients.iter_mut() {
        let st = p.exited();
        ensure!(
            st.is_some_and(|s| s.success()),
            "{name} failed ({st:?}); log {}",
            log_file(name).display()
        );
        let path = dir.join(format!("{name}.json"));
        let v: ClosedSummary = dra_report::parse(
            &std::fs::read_to_string(&path)?,
            &path.display().to_string(),
        )?;
        rps += v.requests_per_s;
        ok += v.answered_with(2001);
        answered += v.answered_total();
        p99 = p99.max(v.p99_ms);
        per.push(v);
    }
    a.stop()?;
    ensure!(answered > 0, "{}: nothing answered", store.name());
    Ok(Relay {
        store: store.name(),
        requests_per_s: (rps * 10.0).round() / 10.0,
        answered,
        answered_2001: ok,
        p99_ms_max: p99,
        clients: per,
    })
}

fn met(b: bool) -> &'static str {
    if b { "met" } else { "missed" }
}

/// `cargo xtask bench ha` (after the release build).
pub fn run(root: &Path) -> Result<()> {
    super::preflight()?;
    procs::install_signal_handlers();
    let bins = Bins::release(root);
    let started = Instant::now();
    let (f, relays) = {
        let _lab = super::TOPOLOGY.guard();
        eprintln!(
            "xtask: HA lab up (namespaces draha-*, 6-node Redis Cluster, 2 DRA hosts, \
             pcrf1/pcrf2/ocs1)"
        );
        let agents = super::up(&bins, true, false)?;
        eprintln!(
            "xtask: failover run ({} s): SIGKILL DRA A at {KILL_A_AT} s, restart at \
             {RESTART_A_AT} s, SIGKILL a Redis master at {KILL_MASTER_AT} s",
            BUILD_S + STEADY_S + FLUSH_S
        );
        let f = failover_run(&bins, agents)?;
        let mut relays = Vec::new();
        for store in [Store::Memory, Store::RedisCluster] {
            eprintln!(
                "xtask: closed-loop relay through DRA A, store {}",
                store.name()
            );
            relays.push(relay(&bins, store)?);
        }
        let keep = root
            .join("results")
            .join(format!("bench-ha-{}", crate::results::timestamp()));
        if std::fs::create_dir_all(&keep).is_ok()
            && let Ok(rd) = std::fs::read_dir(STATE_DIR)
        {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_file() && p.extension().is_some_and(|x| x != "pid" && x != "sock") {
                    let _ = std::fs::copy(&p, keep.join(e.file_name()));
                }
            }
            eprintln!("xtask: logs and summaries kept in {}", keep.display());
        }
        (f, relays)
    };
    let sessions = f.sum(|s| s.sessions.opened);
    let misrouted = f.misrouted();
    let unanswered = f.classes_sum(|c| c.timeouts + c.unanswered);
    let resent = f.sum(|s| s.peers.failover.resent_with_t);
    let gaps = f.gaps();
    let failover_ms = gaps.iter().copied().fold(0.0, f64::max);
    let (mem, cluster) = (relays[0].requests_per_s, relays[1].requests_per_s);
    // relay() refuses a run with nothing answered: mem > 0.
    let ratio = cluster / mem;
    let head = HaHeadline {
        sessions,
        misrouted,
        unanswered,
        resent_with_t: resent,
        failover_ms: (failover_ms * 10.0).round() / 10.0,
        store_errors: f.store_errors,
        redis_master_failover_ms: f.redis_master_failover_ms.round(),
        relay_rps_memory: mem,
        relay_rps_redis_cluster: cluster,
        cluster_to_memory_ratio: (ratio * 1000.0).round() / 1000.0,
    };
    let mut doc = json!({
        "machine": machine(root),
        "goals": {
            "misrouted": 0, "unanswered": 0, "min_sessions": MIN_SESSIONS,
            "min_cluster_to_memory_ratio": GOAL_RATIO,
        },
        "met": {
            "misrouted": misrouted == 0,
            "unanswered": unanswered == 0,
            "sessions": sessions >= MIN_SESSIONS,
            "cluster_to_memory_ratio": ratio >= GOAL_RATIO,
        },
        "details": {
            "failovers": f.sum(|s| s.peers.failover.failovers),
            "failbacks": f.sum(|s| s.peers.failover.failbacks),
            "lost_no_dra": f.sum(|s| s.peers.failover.lost_no_dra),
            "failover_gaps_ms": gaps,
            "answers_via_a": f.sum(|s| s.peers.failover.answers_via[0]),
            "answers_via_b": f.sum(|s| s.peers.failover.answers_via[1]),
            "server_switches": f.sum(|s| s.sessions.server_switches),
            "answered_5002": f.answered_with(5002),
            "answered_3002": f.answered_with(3002),
            "late_answers": f.sum(|s| s.peers.late_answers),
            "gx_ccr_i": f.class("gx_ccr_i"),
            "gx_ccr_u": f.class("gx_ccr_u"),
            "gx_ccr_t": f.class("gx_ccr_t"),
            "servers": f.servers,
            "server_duplicates": f.servers.iter().map(|s| s.duplicates).sum::<u64>(),
            "server_t_flagged": f.servers.iter().map(|s| s.t_flagged).sum::<u64>(),
            "kill_a_at_s": f.kill_a_at_s,
            "restart_a_at_s": f.restart_a_at_s,
            "killed_redis_master_port": f.killed_master_port,
            "rate_per_class_per_gateway": RATE,
            "steady_s": STEADY_S,
            "relay": relays,
            "relay_window_per_gateway": WINDOW,
            "duration_s": started.elapsed().as_secs(),
        },
        "kernel": first_line(&["uname", "-r"]),
    });
    // The headline's figures at the top level of the document, where the table reads them.
    if let (Some(d), Value::Object(h)) = (doc.as_object_mut(), serde_json::to_value(&head)?) {
        d.extend(h);
    }
    let out = root.join(HA_LATEST);
    std::fs::write(&out, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("write {}", out.display()))?;
    println!("\nHA pair (docs/bench.md):");
    for r in table_rows(&head) {
        println!(
            "  {:<44} {:<40} goal {:<10} {}",
            r.metric,
            r.measured,
            r.goal,
            r.met.map_or("", met)
        );
    }
    println!("wrote {}", out.display());
    Ok(())
}

/// The figures of `bench/results/ha-latest.json` the bench table reads (top-level
/// fields of the document). Parsed as this type: a field missing from the file is an
/// error naming it, never a zero that reads as "0 misrouted".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HaHeadline {
    pub sessions: u64,
    pub misrouted: u64,
    pub unanswered: u64,
    pub resent_with_t: u64,
    pub failover_ms: f64,
    pub store_errors: f64,
    pub redis_master_failover_ms: f64,
    pub relay_rps_memory: f64,
    pub relay_rps_redis_cluster: f64,
    pub cluster_to_memory_ratio: f64,
}

impl HaHeadline {
    /// The headline of the HA results document `doc` (`what` names it in the error).
    pub fn of(doc: &Value, what: &str) -> Result<HaHeadline> {
        HaHeadline::deserialize(doc).with_context(|| format!("{what}: HA results"))
    }
}

/// The rows of the HA results for the bench table.
pub fn table_rows(h: &HaHeadline) -> Vec<TableRow> {
    vec![
        TableRow {
            metric: "HA sessions through the pair (faults)".into(),
            measured: format!("{}", h.sessions),
            goal: format!("≥ {MIN_SESSIONS}"),
            met: Some(h.sessions >= MIN_SESSIONS),
        },
        TableRow {
            metric: "HA misrouted (5002 from servers)".into(),
            measured: format!("{}", h.misrouted),
            goal: "0".into(),
            met: Some(h.misrouted == 0),
        },
        TableRow {
            metric: "HA unanswered (timeouts + lost)".into(),
            measured: format!(
                "{} ({} resent with T, failover {:.1} ms)",
                h.unanswered, h.resent_with_t, h.failover_ms
            ),
            goal: "0".into(),
            met: Some(h.unanswered == 0),
        },
        TableRow {
            metric: "HA Redis master failover (replica promoted)".into(),
            measured: format!(
                "{:.0} ms, store errors {:.0}",
                h.redis_master_failover_ms, h.store_errors
            ),
            goal: "— (reported)".into(),
            met: None,
        },
        TableRow {
            metric: "HA relay req/s: redis_cluster ÷ memory".into(),
            measured: format!(
                "{:.2} ({:.0} vs {:.0} req/s)",
                h.cluster_to_memory_ratio, h.relay_rps_redis_cluster, h.relay_rps_memory
            ),
            goal: format!("≥ {GOAL_RATIO}"),
            met: Some(h.cluster_to_memory_ratio >= GOAL_RATIO),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_parses_and_has_enough_sessions() {
        let v: toml::Value = toml::from_str(&scenario()).expect("toml");
        let phases = v["phase"].as_array().expect("phases");
        assert_eq!(phases.len(), 3);
        let per_gw = u64::from(RATE) * u64::from(BUILD_S + STEADY_S);
        assert!(per_gw * GWS.len() as u64 >= MIN_SESSIONS);
        const {
            assert!(KILL_A_AT < RESTART_A_AT && RESTART_A_AT < KILL_MASTER_AT);
            assert!(KILL_MASTER_AT < (BUILD_S + STEADY_S) as f64);
        }
    }

    #[test]
    fn rows_judge_the_goals() {
        let doc = json!({
            "sessions": 30000, "misrouted": 0, "unanswered": 1, "resent_with_t": 12,
            "failover_ms": 3.5, "store_errors": 4.0, "redis_master_failover_ms": 2500.0,
            "relay_rps_memory": 8000.0, "relay_rps_redis_cluster": 3000.0,
            "cluster_to_memory_ratio": 0.375,
        });
        let r = table_rows(&HaHeadline::of(&doc, "t").unwrap());
        let met: Vec<Option<bool>> = r.iter().map(|r| r.met).collect();
        assert_eq!(
            met,
            [Some(true), Some(true), Some(false), None, Some(false)]
        );
        assert_eq!(r[4].measured, "0.38 (3000 vs 8000 req/s)");
    }

    #[test]
    fn a_missing_headline_figure_is_an_error_and_no_goal_is_judged() {
        let path = crate::workspace_root().join(HA_LATEST);
        let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(
            HaHeadline::of(&doc, HA_LATEST).is_ok(),
            "the recorded results parse"
        );
        doc.as_object_mut().unwrap().remove("misrouted");
        let e = format!("{:#}", HaHeadline::of(&doc, HA_LATEST).unwrap_err());
        assert!(e.contains("missing field `misrouted`"), "{e}");
        assert!(e.contains("ha-latest.json"), "{e}");
    }

    #[test]
    fn cluster_nodes_addresses_give_the_port() {
        assert_eq!(port_of("198.19.2.5:7003@17003"), Some(7003));
        assert_eq!(port_of("198.19.2.5:7003"), Some(7003));
    }
}
