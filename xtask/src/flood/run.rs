//! One run of the flood bench: a fresh `dra run` in `fl-dra`, pgw1's Gx traffic from
//! `dra-loadgen client` in `fl-gw`, and, in flood runs, the generator through all of the
//! `measure` phase; what the machine, the agent, the interfaces and the client saw over
//! the interior of `measure`.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::{
    FLOOD_LEAD_S, Opts, Plan,
    net::{self, DRA_IF, GW_IF, NS_DRA, NS_GW, SITE},
    sender::{GenReport, Generator, Kind, Target},
};
use crate::{
    agent_run::{ClientFiles, gateway_client, run_files},
    bench::{
        config::MEASURE,
        cpu::{CpuFields, cpu_seconds, loadavg},
        rows::{median, rows_p99},
        window::INTERIOR,
    },
    lab::{self, Bins},
    metrics::Snap,
    procs::Proc,
};

/// What the flood does during `measure`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flood {
    /// No flood: CCR-U p99 without it.
    Off,
    /// Flood all through `measure`: CCR-U p99 with it, and what reached the DRA.
    On,
    /// Flood on and off in turns of [`SLOT_S`] over the interior of `measure`: the CPU a
    /// flood packet costs, from adjacent slots (slow drifts of the machine cancel out).
    Toggle,
}

/// One run: with or without the fast path, and what the flood does.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunSpec {
    pub(super) name: &'static str,
    pub(super) xdp: bool,
    pub(super) flood: Flood,
    /// Flood at `Opts::paced_pps` rather than `Opts::pps`.
    pub(super) paced: bool,
}

impl RunSpec {
    /// The generator's target frames/s in this run (0: unpaced).
    pub(super) fn pps(&self, opts: &Opts) -> f64 {
        if self.paced { opts.paced_pps } else { opts.pps }
    }
}

/// The runs of one repetition, in order (the paced ones only when `Opts::paced_pps` > 0).
pub(super) const RUNS: [RunSpec; 8] = [
    RunSpec {
        name: "xdp-calm",
        xdp: true,
        flood: Flood::Off,
        paced: false,
    },
    RunSpec {
        name: "xdp-flood",
        xdp: true,
        flood: Flood::On,
        paced: false,
    },
    RunSpec {
        name: "xdp-toggle",
        xdp: true,
        flood: Flood::Toggle,
        paced: false,
    },
    RunSpec {
        name: "xdp-flood-paced",
        xdp: true,
        flood: Flood::On,
        paced: true,
    },
    RunSpec {
        name: "noxdp-calm",
        xdp: false,
        flood: Flood::Off,
        paced: false,
    },
    RunSpec {
        name: "noxdp-flood",
        xdp: false,
        flood: Flood::On,
        paced: false,
    },
    RunSpec {
        name: "noxdp-toggle",
        xdp: false,
        flood: Flood::Toggle,
        paced: false,
    },
    RunSpec {
        name: "noxdp-flood-paced",
        xdp: false,
        flood: Flood::On,
        paced: true,
    },
];

/// Length of one slot of a toggle run.
const SLOT_S: f64 = 1.0;
/// Left out at the start of each slot (the flood starting or stopping).
const SETTLE_S: f64 = 0.15;

/// One slot of a toggle run: rates over its measured part.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) on: bool,
    pub(super) window_s: f64,
    /// Per second: softirq (cores), the XDP NAPI threads (cores), agent (cores), all busy
    /// (cores), packets at the DRA.
    pub(super) softirq: f64,
    pub(super) napi: f64,
    pub(super) agent: f64,
    pub(super) busy: f64,
    pub(super) rx_pps: f64,
    pub(super) gen_pps: f64,
    /// Generator frames that reached the DRA per second (sent − dropped by the veth).
    pub(super) flood_pps: f64,
}

/// The light reading taken at slot boundaries.
struct SlotMark {
    at: Instant,
    cpu: CpuFields,
    agent_s: f64,
    napi_s: f64,
    rx: u64,
    gw_tx_dropped: u64,
    gen_sent: u64,
}

/// CPU seconds of the XDP NAPI threads (none without XDP).
fn napi_s(napi: &[u32]) -> f64 {
    napi.iter().filter_map(|&p| cpu_seconds(p).ok()).sum()
}

fn slot_mark(dra_pid: u32, napi: &[u32], g: &Generator) -> Result<SlotMark> {
    Ok(SlotMark {
        rx: net::link_counters(NS_DRA, DRA_IF)?.0,
        gw_tx_dropped: net::link_counters(NS_GW, GW_IF)?.2,
        at: Instant::now(),
        cpu: CpuFields::now()?,
        agent_s: cpu_seconds(dra_pid)?,
        napi_s: napi_s(napi),
        gen_sent: g.sent(),
    })
}

fn slot(on: bool, a: &SlotMark, b: &SlotMark) -> Slot {
    let w = (b.at - a.at).as_secs_f64();
    let cpu = b.cpu.since(&a.cpu);
    Slot {
        on,
        window_s: w,
        softirq: cpu.softirq / w,
        napi: (b.napi_s - a.napi_s) / w,
        agent: (b.agent_s - a.agent_s) / w,
        busy: cpu.busy() / w,
        rx_pps: (b.rx - a.rx) as f64 / w,
        gen_pps: (b.gen_sent - a.gen_sent) as f64 / w,
        flood_pps: (b.gen_sent - a.gen_sent).saturating_sub(b.gw_tx_dropped - a.gw_tx_dropped)
            as f64
            / w,
    }
}

/// What one run measured over the interior of `measure`.
pub(super) struct RunResult {
    pub(super) spec: RunSpec,
    pub(super) rep: usize,
    pub(super) window_s: f64,
    pub(super) cpu: CpuFields,
    pub(super) agent_cpu_s: f64,
    /// The XDP NAPI threads' CPU seconds (XDP runs; 0 without).
    pub(super) napi_cpu_s: f64,
    /// Packets the DRA's interface received (flood + Gx traffic).
    pub(super) rx_packets: u64,
    pub(super) gen_sent: u64,
    /// Generator frames dropped by the veth (its sender side's tx_dropped).
    pub(super) gen_dropped: u64,
    pub(super) gen_cpu_s: f64,
    pub(super) ccr_u_p99_ms: Option<f64>,
    /// Toggle runs: the slots, in order.
    pub(super) slots: Vec<Slot>,
    pub(super) json: Value,
}

/// What is read at the start and the end of the interior.
struct Mark {
    at: Instant,
    cpu: CpuFields,
    agent_s: f64,
    napi_s: f64,
    rx: u64,
    gw_tx: u64,
    gw_tx_dropped: u64,
    gen_sent: u64,
    gen_cpu_s: f64,
    /// The agent's metrics: a live probe, which a flood that starves the host can time
    /// out (kept as the error's text, and the run goes on).
    metrics: Result<Snap, String>,
    tcp: BTreeMap<String, f64>,
}

fn mark(dra_pid: u32, napi: &[u32], g: Option<&Generator>) -> Result<Mark> {
    let (rx, _, _) = net::link_counters(NS_DRA, DRA_IF)?;
    let (_, gw_tx, gw_tx_dropped) = net::link_counters(NS_GW, GW_IF)?;
    Ok(Mark {
        at: Instant::now(),
        cpu: CpuFields::now()?,
        agent_s: cpu_seconds(dra_pid)?,
        napi_s: napi_s(napi),
        rx,
        gw_tx,
        gw_tx_dropped,
        gen_sent: g.map_or(0, Generator::sent),
        gen_cpu_s: g.map_or(0.0, Generator::cpu_s),
        metrics: SITE.scrape().map_err(|e| format!("{e:#}")),
        tcp: tcp_counters()?,
    })
}

/// The kernel's TCP counters in the DRA's namespace that show what it did with the
/// flood (`/proc/thread-self/net/{snmp,netstat}` read from a thread inside it).
const TCP_COUNTERS: [&str; 9] = [
    "Tcp/PassiveOpens",
    "Tcp/AttemptFails",
    "Tcp/OutSegs",
    "Tcp/OutRsts",
    "TcpExt/SyncookiesSent",
    "TcpExt/SyncookiesFailed",
    "TcpExt/ListenOverflows",
    "TcpExt/ListenDrops",
    "TcpExt/TCPReqQFullDoCookies",
];

fn tcp_counters() -> Result<BTreeMap<String, f64>> {
    let text = lab::in_netns(NS_DRA, || {
        let a = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap_or_default();
        let b = std::fs::read_to_string("/proc/thread-self/net/netstat").unwrap_or_default();
        a + &b
    })?;
    Ok(parse_snmp(&text)
        .into_iter()
        .filter(|(k, _)| TCP_COUNTERS.contains(&k.as_str()))
        .collect())
}

/// `Prefix: name name …` / `Prefix: value value …` line pairs into `Prefix/name → value`.
pub(super) fn parse_snmp(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks_exact(2) {
        let (Some((p1, names)), Some((p2, values))) =
            (pair[0].split_once(':'), pair[1].split_once(':'))
        else {
            continue;
        };
        if p1 != p2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<f64>() {
                out.insert(format!("{p1}/{n}"), v);
            }
        }
    }
    out
}

/// Starts the simulated PCRF in `fl-srv` (answers after `latency`), on the network's
/// CPUs.
pub(super) fn start_server(bins: &Bins, latency: &str, log: &Path) -> Result<Proc> {
    let mut c = net::command_pinned(net::NS_SRV, &bins.loadgen, net::cpus().map(|c| c.0))?;
    c.args([
        "server",
        "--listen",
        net::PCRF_LISTEN,
        "--origin-host",
        "pcrf1.pcrf.lab.example",
        "--origin-realm",
        "pcrf.lab.example",
        "--latency",
        latency,
        "--tw",
        "6",
    ]);
    SITE.spawn(log, "pcrf1", "pcrf1", &mut c)
}

fn deltas(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    b.iter()
        // A counter series absent from the first scrape appeared since: it started at 0.
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// The flood's target: the frames' addresses in this topology, and the mix: per 20
/// frames 9 spoofed SYNs, 9 junk segments, 2 SYNs from pgw2 (its reconnect storm).
pub(super) fn target() -> Target {
    let mut mix = Vec::new();
    for i in 0..20 {
        mix.push(if i < 2 {
            Kind::PeerSyn
        } else if i % 2 == 0 {
            Kind::Syn
        } else {
            Kind::Junk
        });
    }
    Target {
        src_mac: net::GW_MAC,
        dst_mac: net::DRA_MAC,
        dst_ip: net::DRA_IP,
        dst_port: 3868,
        spoof_base: net::SPOOF_BASE,
        spoof_count: net::SPOOF_COUNT,
        peer_ip: net::PGW2_IP,
        mix,
    }
}

/// Runs `spec` on the topology that is up; its files go to `out/<name>-<rep>/`.
pub(super) fn run_one(
    root: &Path,
    bins: &Bins,
    spec: RunSpec,
    rep: usize,
    plan: &Plan,
    opts: &Opts,
    out: &Path,
) -> Result<RunResult> {
    let dir = run_files(out, &format!("{}-{rep}", spec.name))?;
    SITE.ensure_detached(spec.name)?;
    let config = if spec.xdp {
        super::XDP_CONFIG
    } else {
        super::NOXDP_CONFIG
    };
    let cpus = net::cpus();
    let cmd = net::command_pinned(NS_DRA, &bins.dra, cpus.map(|c| 1u64 << c.1))?;
    let dra = SITE.start_agent_ready(cmd, &root.join(config), dir.join("dra.log"))?;
    let dra_pid = dra.pid()?;
    let attached = SITE.ensure_attached(spec.name, spec.xdp)?;
    let napi: Vec<u32> = match (spec.xdp, cpus) {
        (true, Some((_, host))) => net::threaded_napi(host)?
            .into_iter()
            .map(|p| p as u32)
            .collect(),
        _ => Vec::new(),
    };
    let files = ClientFiles::new(&dir, "pgw1");
    let mut c = net::command_pinned(NS_GW, &bins.loadgen, cpus.map(|c| c.0))?;
    gateway_client(
        &mut c,
        "pgw1",
        net::PGW1_IP,
        &root.join(super::SCENARIO),
        &files,
    );
    let mut run = dra.start_client(&mut c, "dra-loadgen client", "pgw1", &files.log)?;
    let t0 = Instant::now();
    eprintln!(
        "xtask: flood run {} (rep {}): {} s",
        spec.name,
        rep + 1,
        plan.total_s
    );
    let m_start = t0 + Duration::from_secs_f64(plan.measure_start_s);
    let m_end = m_start + Duration::from_secs_f64(plan.measure_s);
    let (i_start, i_end) = INTERIOR.instants(m_start, plan.measure_s);
    // The agent's counters before any flood and after it stopped: read when nothing
    // starves the host, so these reads must succeed.
    let before = SITE
        .scrape()
        .context("the agent's metrics before the flood")?;
    let before_at = Instant::now();
    let mut gen_ = None;
    if spec.flood != Flood::Off {
        run.wait_until(m_start - Duration::from_secs_f64(FLOOD_LEAD_S))?;
        let g = Generator::start(
            NS_GW,
            GW_IF,
            &target(),
            spec.pps(opts),
            opts.threads,
            cpus.map(|c| c.0),
        )?;
        // A toggle run floods only in its "on" slots.
        g.pause(spec.flood == Flood::Toggle);
        gen_ = Some(g);
    }
    run.wait_until(i_start)?;
    let a = mark(dra_pid, &napi, gen_.as_ref())?;
    let load0 = loadavg();
    let mut slots = Vec::new();
    if let (Flood::Toggle, Some(g)) = (spec.flood, gen_.as_ref()) {
        let n = ((i_end - Instant::now()).as_secs_f64() / SLOT_S).floor() as u32;
        let t = Instant::now();
        for k in 0..n {
            let on = k % 2 == 0;
            g.pause(!on);
            let start = t + Duration::from_secs_f64(SLOT_S * f64::from(k));
            run.wait_until(start + Duration::from_secs_f64(SETTLE_S))?;
            let sa = slot_mark(dra_pid, &napi, g)?;
            run.wait_until(start + Duration::from_secs_f64(SLOT_S))?;
            let sb = slot_mark(dra_pid, &napi, g)?;
            slots.push(slot(on, &sa, &sb));
        }
        g.pause(true);
    }
    run.wait_until(i_end)?;
    let b = mark(dra_pid, &napi, gen_.as_ref())?;
    let load1 = loadavg();
    run.wait_until(m_end)?;
    let gen_report: Option<GenReport> = gen_.take().map(Generator::stop).transpose()?;
    run.client_finished(t0 + Duration::from_secs_f64(plan.total_s + 40.0))?;
    let after = SITE
        .scrape()
        .context("the agent's metrics after the flood stopped")?;
    let span_s = before_at.elapsed().as_secs_f64();
    let summary = files.summary()?;
    run.stop_agent()?;
    SITE.detach_left(bins, spec.name)?;

    let window_s = (b.at - a.at).as_secs_f64();
    let cpu = b.cpu.since(&a.cpu);
    let agent_cpu_s = b.agent_s - a.agent_s;
    let napi_cpu_s = b.napi_s - a.napi_s;
    let rx_packets = b.rx - a.rx;
    let gen_sent = b.gen_sent - a.gen_sent;
    let gen_dropped = b.gw_tx_dropped - a.gw_tx_dropped;
    let gen_cpu_s = b.gen_cpu_s - a.gen_cpu_s;
    // The agent exports every fast-path global counter from its start (0 until set).
    let fp = |s: &Snap, reason: &str| s.sum("dra_fastpath_packets_total", &[("reason", reason)]);
    let reasons = [
        "packets",
        "unknown_peer_drop",
        "syn_dropped",
        "not_diameter",
        "requests",
    ];
    let delta = |a: &Snap, b: &Snap, per: f64| -> Result<BTreeMap<&str, f64>> {
        reasons
            .iter()
            .map(|&r| Ok((r, (fp(b, r)? - fp(a, r)?) / per)))
            .collect()
    };
    // Over the interior when both live probes answered; over the whole run (from
    // before the flood to after it) always.
    let fastpath = match (&a.metrics, &b.metrics) {
        (Ok(sa), Ok(sb)) => {
            Some(delta(sa, sb, window_s).context("the agent's metrics at the window's edges")?)
        }
        _ => None,
    };
    let probe = |m: &Result<Snap, String>| match m {
        Ok(_) => "answered".to_owned(),
        Err(e) => format!("no answer: {e}"),
    };
    let live_probes = json!({
        "interior_start": probe(&a.metrics),
        "interior_end": probe(&b.metrics),
    });
    if fastpath.is_none() {
        eprintln!(
            "xtask: flood run {} (rep {}): the agent's metrics did not answer during the \
             flood ({}; {}): its fast-path counters are reported over the whole run only",
            spec.name,
            rep + 1,
            probe(&a.metrics),
            probe(&b.metrics)
        );
    }
    let fastpath_run =
        delta(&before, &after, 1.0).context("the agent's metrics before and after the flood")?;
    let ccr_u = summary.classes.get("gx_ccr_u");
    let ccr_u_p99_ms = ccr_u
        .filter(|c| c.answered_total() > 0)
        .map(|c| c.latency.p99_ms);
    let rows = files.rows()?;
    let u_p99 = rows_p99(&rows, MEASURE, "gx_ccr_u");
    let per_s = |v: f64| v / window_s;
    let json = json!({
        "run": spec.name,
        "rep": rep + 1,
        "dra_config": config,
        "fast_path_attached": attached,
        "flood": format!("{:?}", spec.flood).to_lowercase(),
        "window_s": window_s,
        "window": format!(
            "{MEASURE} without its first {} s and last {} s",
            INTERIOR.skip_first, INTERIOR.skip_last
        ),
        "machine_cpu_per_s": {
            "user": per_s(cpu.user), "nice": per_s(cpu.nice), "system": per_s(cpu.system),
            "irq": per_s(cpu.irq), "softirq": per_s(cpu.softirq), "steal": per_s(cpu.steal),
            "busy": per_s(cpu.busy()),
            "source": "/proc/stat aggregate cpu line (all CPUs, tick-sampled), cores busy",
        },
        "agent_cpu_per_s": per_s(agent_cpu_s),
        "xdp_napi_threads": napi.len(),
        "xdp_napi_threads_cpu_per_s": (!napi.is_empty()).then(|| per_s(napi_cpu_s)),
        "cpus": cpus.map(|(net, host)| json!({
            "network_mask": format!("{net:#x}"),
            "dra_host_cpu": host,
            "note": "agent, RPS of fl-cli and the XDP NAPI threads (one per queue) on \
                     the DRA host's CPU; generator (nice 19), client and PCRF on the others",
        })),
        "dra_rx_packets_per_s": per_s(rx_packets as f64),
        "gw_tx_packets_per_s": per_s((b.gw_tx - a.gw_tx) as f64),
        "gw_tx_dropped_per_s": per_s((b.gw_tx_dropped - a.gw_tx_dropped) as f64),
        "generator": {
            "sent_per_s": per_s(gen_sent as f64),
            "cpu_per_s": per_s(gen_cpu_s),
            "target_pps": (spec.flood != Flood::Off).then_some(spec.pps(opts)),
            "threads": opts.threads,
            "report": gen_report.as_ref().map(|r| json!({
                "sent": r.sent,
                "by_kind": r.by_kind.iter().map(|(k, n)| (k.to_string(), json!(n)))
                    .collect::<serde_json::Map<_, _>>(),
                "socket_full_events": r.full,
                "elapsed_s": r.elapsed_s,
            })),
        },
        "fast_path_counters_per_s": fastpath,
        "live_probes": live_probes,
        "fast_path_counters_over_run": {
            "span_s": span_s,
            "from": "before the flood starts to after it stops (read when the host is not \
                     flooded)",
            "totals": fastpath_run,
        },
        "kernel_tcp_counters_per_s": deltas(&a.tcp, &b.tcp)
            .into_iter().map(|(k, v)| (k, v / window_s)).collect::<BTreeMap<_, _>>(),
        "load_average": { "start": load0, "end": load1 },
        "toggle_slots": slots.iter().map(|s| json!({
            "flood": s.on, "window_s": s.window_s, "softirq_cores": s.softirq,
            "xdp_napi_threads_cores": s.napi, "flood_pps": s.flood_pps,
            "agent_cores": s.agent, "busy_cores": s.busy, "dra_rx_pps": s.rx_pps,
            "generator_pps": s.gen_pps,
        })).collect::<Vec<_>>(),
        "ccr_u": ccr_u,
        "ccr_u_per_second_p99_ms": {
            "median": median(&u_p99),
            "max": u_p99.iter().copied().fold(f64::NAN, f64::max),
        },
        "files": dir.strip_prefix(root).unwrap_or(&dir).display().to_string(),
    });
    eprintln!(
        "xtask: flood run {}: {:.0} pkt/s at the DRA, generator {:.0}/s; softirq {:.3} \
         cores, XDP NAPI threads {:.3}, agent {:.3}; CCR-U p99 {} ms",
        spec.name,
        per_s(rx_packets as f64),
        per_s(gen_sent as f64),
        per_s(cpu.softirq),
        per_s(napi_cpu_s),
        per_s(agent_cpu_s),
        ccr_u_p99_ms.map_or("-".into(), |v| format!("{v:.2}"))
    );
    Ok(RunResult {
        spec,
        rep,
        window_s,
        cpu,
        agent_cpu_s,
        napi_cpu_s,
        rx_packets,
        gen_sent,
        gen_dropped,
        gen_cpu_s,
        ccr_u_p99_ms,
        slots,
        json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_pairs_parse_into_prefixed_names() {
        let t = "Tcp: RtoAlgorithm OutRsts PassiveOpens\nTcp: 1 42 7\n\
                 TcpExt: SyncookiesSent ListenDrops\nTcpExt: 1000 3\n";
        let m = parse_snmp(t);
        assert_eq!(m["Tcp/OutRsts"], 42.0);
        assert_eq!(m["Tcp/PassiveOpens"], 7.0);
        assert_eq!(m["TcpExt/SyncookiesSent"], 1000.0);
        assert_eq!(m.len(), 5);
    }
}
