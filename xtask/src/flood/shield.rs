//! P5 from the flood runs: host CPU per flood packet with and without XDP, and CCR-U p99
//! with the flood relative to without.

use serde_json::{Value, json};

use super::{
    Opts,
    run::{Flood, RunResult, Slot},
};
use crate::{bench::rows::median, results::TableRow};

/// P5 goal: host CPU per flood packet without XDP ÷ with XDP at least this.
pub const GOAL_CPU_RATIO: f64 = 10.0;
/// P5 goal: CCR-U p99 with the flood ÷ without (XDP) at most this.
pub const GOAL_P99_RATIO: f64 = 1.5;

/// What the flood did in one mode, one repetition.
#[derive(Clone, Debug)]
struct Cost {
    /// Toggle run: (softirq + agent) per flood packet, ns, per pair of adjacent slots
    /// (flood on, then off), and the median of those.
    pair_ns: Vec<f64>,
    ns_per_pkt: f64,
    /// Toggle run, mean of the on slots − mean of the off slots: cores and packets.
    extra_softirq: f64,
    extra_napi: f64,
    extra_agent: f64,
    extra_busy: f64,
    toggle_pps: f64,
    /// All busy CPU per flood packet (the generator's sending included), ns.
    busy_ns_per_pkt: f64,
    /// Flood run: packets per second at the DRA's interface (flood run − calm run) and
    /// what the generator sent; (softirq + agent) per flood packet from the whole
    /// runs (flood − calm, a cross-check exposed to the machine's drifts).
    flood_pps: f64,
    /// Flood run − calm run, the DRA interface's rx counter.
    rx_pps: f64,
    gen_sent_pps: f64,
    gen_cpu: f64,
    runs_ns_per_pkt: f64,
    p99_calm: Option<f64>,
    p99_flood: Option<f64>,
    /// The paced flood run (when there is one): flood packets/s that reached the DRA,
    /// the generator's cores, CCR-U p99.
    paced_pps: Option<f64>,
    paced_gen_cpu: Option<f64>,
    p99_paced: Option<f64>,
}

impl Cost {
    fn p99_ratio(&self) -> Option<f64> {
        match (self.p99_flood, self.p99_calm) {
            (Some(f), Some(c)) if c > 0.0 => Some(f / c),
            _ => None,
        }
    }

    fn p99_paced_ratio(&self) -> Option<f64> {
        match (self.p99_paced, self.p99_calm) {
            (Some(f), Some(c)) if c > 0.0 => Some(f / c),
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "toggle": {
                "ns_per_flood_packet_median_of_pairs": self.ns_per_pkt,
                "ns_per_flood_packet_per_pair": self.pair_ns,
                "flood_pps_at_dra_on_minus_off": self.toggle_pps,
                "extra_cores_on_minus_off": {
                    "softirq": self.extra_softirq,
                    "xdp_napi_threads": self.extra_napi,
                    "agent": self.extra_agent,
                    "all_busy": self.extra_busy,
                },
                "all_busy_ns_per_flood_packet": self.busy_ns_per_pkt,
            },
            "flood_run": {
                "flood_pps_at_dra": self.flood_pps,
                "dra_rx_pps_flood_minus_calm": self.rx_pps,
                "generator_sent_pps": self.gen_sent_pps,
                "generator_cores": self.gen_cpu,
                "ns_per_flood_packet_flood_minus_calm_run": self.runs_ns_per_pkt,
            },
            "paced_run": {
                "flood_pps_at_dra": self.paced_pps,
                "generator_cores": self.paced_gen_cpu,
                "ccr_u_p99_ms": self.p99_paced,
                "ccr_u_p99_ratio": self.p99_paced_ratio(),
            },
            "ccr_u_p99_calm_ms": self.p99_calm,
            "ccr_u_p99_flood_ms": self.p99_flood,
            "ccr_u_p99_ratio": self.p99_ratio(),
        })
    }
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (n, s) = v.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

/// Generator frames that reached the DRA per second (sent − dropped by the veth).
fn reached_pps(r: &RunResult) -> f64 {
    r.gen_sent.saturating_sub(r.gen_dropped) as f64 / r.window_s
}

fn cost(
    calm: &RunResult,
    flood: &RunResult,
    toggle: &RunResult,
    paced: Option<&RunResult>,
) -> Cost {
    let per_s = |r: &RunResult, v: f64| v / r.window_s;
    let d = |f: fn(&RunResult) -> f64| per_s(flood, f(flood)) - per_s(calm, f(calm));
    // Generator frames that reached the DRA (sent − dropped by the veth); the calm run
    // sends none. The DRA's rx counter also counts the Gx traffic and, without XDP, the
    // RSTs pgw2's kernel answers to the SYN-ACKs of its storm (both in the JSON).
    let flood_pps = reached_pps(flood);
    let rx_pps = d(|r| r.rx_packets as f64);
    let ns = |cores: f64, pps: f64| {
        if pps > 0.0 {
            cores / pps * 1e9
        } else {
            f64::NAN
        }
    };
    let pair_ns: Vec<f64> = toggle
        .slots
        .windows(2)
        .filter(|w| w[0].on && !w[1].on)
        .map(|w| {
            ns(
                (w[0].softirq + w[0].napi + w[0].agent) - (w[1].softirq + w[1].napi + w[1].agent),
                w[0].flood_pps - w[1].flood_pps,
            )
        })
        .collect();
    let on_off = |f: fn(&Slot) -> f64| {
        mean(toggle.slots.iter().filter(|s| s.on).map(f))
            - mean(toggle.slots.iter().filter(|s| !s.on).map(f))
    };
    let toggle_pps = on_off(|s| s.flood_pps);
    let extra_busy = on_off(|s| s.busy);
    Cost {
        // No on/off pair: no figure (NaN prints as such and meets no goal).
        ns_per_pkt: median(&pair_ns).unwrap_or(f64::NAN),
        pair_ns,
        extra_softirq: on_off(|s| s.softirq),
        extra_napi: on_off(|s| s.napi),
        extra_agent: on_off(|s| s.agent),
        extra_busy,
        toggle_pps,
        busy_ns_per_pkt: ns(extra_busy, toggle_pps),
        flood_pps,
        gen_sent_pps: per_s(flood, flood.gen_sent as f64),
        gen_cpu: per_s(flood, flood.gen_cpu_s),
        runs_ns_per_pkt: ns(
            d(|r| r.cpu.softirq) + d(|r| r.napi_cpu_s) + d(|r| r.agent_cpu_s),
            flood_pps,
        ),
        rx_pps,
        p99_calm: calm.ccr_u_p99_ms,
        p99_flood: flood.ccr_u_p99_ms,
        paced_pps: paced.map(reached_pps),
        paced_gen_cpu: paced.map(|r| per_s(r, r.gen_cpu_s)),
        p99_paced: paced.and_then(|r| r.ccr_u_p99_ms),
    }
}

/// Per repetition, the mode's calm, flood and toggle runs.
fn costs(runs: &[RunResult], xdp: bool) -> Vec<Cost> {
    let reps = runs.iter().map(|r| r.rep).max().map_or(0, |m| m + 1);
    (0..reps)
        .filter_map(|rep| {
            let find = |flood: Flood, paced: bool| {
                runs.iter().find(|r| {
                    r.rep == rep
                        && r.spec.xdp == xdp
                        && r.spec.flood == flood
                        && r.spec.paced == paced
                })
            };
            Some(cost(
                find(Flood::Off, false)?,
                find(Flood::On, false)?,
                find(Flood::Toggle, false)?,
                find(Flood::On, true),
            ))
        })
        .collect()
}

fn med(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    median(&v)
}

/// The lowest calm p99 of a mode's repetitions: the denominator of its p99 ratios. A
/// calm run that the machine stalled (another job, the hypervisor) would flatter a ratio,
/// so the ratio is taken against the best calm run.
fn calm_p99(v: &[Cost]) -> Option<f64> {
    v.iter()
        .filter_map(|c| c.p99_calm)
        .filter(|p| *p > 0.0)
        .reduce(f64::min)
}

/// Median over the repetitions of `f` (a flood run's p99) ÷ [`calm_p99`].
fn p99_ratio(v: &[Cost], f: fn(&Cost) -> Option<f64>) -> Option<f64> {
    let flood = med(v.iter().filter_map(f))?;
    Some(flood / calm_p99(v)?)
}

/// The p99s of `f` over the repetitions, in order, e.g. "444.7, 31.1, 16.4".
fn list(v: &[Cost], f: fn(&Cost) -> Option<f64>) -> String {
    v.iter()
        .map(|c| fmt(f(c), 1))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite())
        .map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The P5 JSON and its table rows: CPU per flood packet, CCR-U p99 at the flood's full
/// rate and (when there were paced runs) at the paced rate.
pub(super) fn p5(runs: &[RunResult], opts: &Opts) -> (Value, Vec<TableRow>) {
    let (x, n) = (costs(runs, true), costs(runs, false));
    let m = |v: &[Cost], f: fn(&Cost) -> Option<f64>| med(v.iter().filter_map(f));
    let x_ns = m(&x, |c| Some(c.ns_per_pkt));
    let n_ns = m(&n, |c| Some(c.ns_per_pkt));
    // A cost lost in the noise (≤ 0) gives no ratio.
    let ratio = match (n_ns, x_ns) {
        (Some(n), Some(x)) if x > 0.0 => Some(n / x),
        _ => None,
    };
    let cpu_met = ratio.map(|q| q >= GOAL_CPU_RATIO);
    let x_p99 = p99_ratio(&x, |c| c.p99_flood);
    let n_p99 = p99_ratio(&n, |c| c.p99_flood);
    let p99_met = x_p99.map(|q| q <= GOAL_P99_RATIO);
    let x_pps = m(&x, |c| Some(c.flood_pps));
    let n_pps = m(&n, |c| Some(c.flood_pps));
    let x_p99p = p99_ratio(&x, |c| c.p99_paced);
    let n_p99p = p99_ratio(&n, |c| c.p99_paced);
    let p99_paced_met = x_p99p.map(|q| q <= GOAL_P99_RATIO);
    let x_ppsp = m(&x, |c| c.paced_pps);
    let n_ppsp = m(&n, |c| c.paced_pps);
    let pairs = |v: &[Cost]| {
        let all: Vec<f64> = v.iter().flat_map(|c| c.pair_ns.iter().copied()).collect();
        json!({
            "min": all.iter().copied().fold(f64::INFINITY, f64::min),
            "max": all.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            "values": all,
        })
    };
    let n_pairs: usize = x.iter().map(|c| c.pair_ns.len()).sum();
    let note = format!(
        "flood {} ({} sender thread(s), nice 19, on the CPU it shares with the client and \
         the PCRF; it used {} and {} of a CPU); in the flood runs it reached the DRA's \
         interface at {} pkt/s with XDP and {} pkt/s without. Host CPU per flood packet \
         = (softirq of the machine + the XDP NAPI threads + the agent's CPU), flood-on slot \
         − next flood-off slot \
         of the toggle run, ÷ the flood packets of the slot; median of {n_pairs} pairs: \
         {} ns with XDP, {} ns without (whole flood run − calm run: {} vs {} ns; all busy \
         CPU, the generator's sending included: {} vs {} ns). CCR-U p99 ratio = median \
         of the flood runs' p99 ÷ the lowest calm p99 of the mode (a calm run that the \
         machine stalled would flatter it); per repetition, XDP: flood {} ms, calm {} \
         ms; no XDP: flood {} ms, calm {} ms. {}",
        if opts.pps > 0.0 {
            format!("paced at {:.0} frames/s", opts.pps)
        } else {
            "unpaced (as fast as the generator goes)".into()
        },
        opts.threads,
        fmt(m(&x, |c| Some(c.gen_cpu)), 2),
        fmt(m(&n, |c| Some(c.gen_cpu)), 2),
        fmt(x_pps, 0),
        fmt(n_pps, 0),
        fmt(x_ns, 0),
        fmt(n_ns, 0),
        fmt(m(&x, |c| Some(c.runs_ns_per_pkt)), 0),
        fmt(m(&n, |c| Some(c.runs_ns_per_pkt)), 0),
        fmt(m(&x, |c| Some(c.busy_ns_per_pkt)), 0),
        fmt(m(&n, |c| Some(c.busy_ns_per_pkt)), 0),
        list(&x, |c| c.p99_flood),
        list(&x, |c| c.p99_calm),
        list(&n, |c| c.p99_flood),
        list(&n, |c| c.p99_calm),
        if opts.paced_pps > 0.0 {
            format!(
                "Paced runs at {:.0} frames/s (reached the DRA at {} pkt/s with XDP, {} \
                 without): CCR-U p99 XDP {} ms ({}×), no XDP {} ms ({}×).",
                opts.paced_pps,
                fmt(x_ppsp, 0),
                fmt(n_ppsp, 0),
                list(&x, |c| c.p99_paced),
                fmt(x_p99p, 2),
                list(&n, |c| c.p99_paced),
                fmt(n_p99p, 2),
            )
        } else {
            String::new()
        },
    );
    let v = json!({
        "goal_min_cpu_ratio": GOAL_CPU_RATIO,
        "goal_max_ccr_u_p99_ratio": GOAL_P99_RATIO,
        "ccr_u_p99_ratio_rule": "median of the flood runs' p99 ÷ the lowest calm p99 of \
                                 the mode",
        "ccr_u_p99_calm_lowest_ms": { "xdp": calm_p99(&x), "noxdp": calm_p99(&n) },
        "cpu_ratio_noxdp_to_xdp": ratio,
        "ns_per_flood_packet": { "xdp": x_ns, "noxdp": n_ns },
        "flood_pps_at_dra": { "xdp": x_pps, "noxdp": n_pps },
        "ccr_u_p99_ratio": { "xdp": x_p99, "noxdp": n_p99 },
        "paced": {
            "target_pps": opts.paced_pps,
            "flood_pps_at_dra": { "xdp": x_ppsp, "noxdp": n_ppsp },
            "ccr_u_p99_ratio": { "xdp": x_p99p, "noxdp": n_p99p },
            "p99_met": p99_paced_met,
        },
        "cpu_met": cpu_met,
        "p99_met": p99_met,
        "met": cpu_met.zip(p99_met).map(|(a, b)| a && b),
        "xdp": x.iter().map(Cost::to_json).collect::<Vec<_>>(),
        "noxdp": n.iter().map(Cost::to_json).collect::<Vec<_>>(),
        "pairs_ns_per_packet": { "xdp": pairs(&x), "noxdp": pairs(&n) },
        "note": note,
        "source": "CPU: /proc/stat softirq (all CPUs, tick-sampled) + utime+stime of the \
                   XDP NAPI threads and of `dra run`, per slot of the toggle runs (1 s \
                   slots, first 0.15 s left out); flood packets: the generator's frames \
                   sent − tx_dropped of fl-gw0 (ip -s -j link: the frames the veth could \
                   not queue). CCR-U p99: the client's summary (HdrHistogram) of the calm \
                   and flood runs.",
    });
    // "R× (median … ms of … vs lowest calm … ms; without XDP R×: median … ms" for the p99
    // of one kind of flood run (`f`: full-rate or paced), with XDP and without.
    let p99_vs_calm = |f: fn(&Cost) -> Option<f64>| {
        format!(
            "{}× (median {} ms of {} vs lowest calm {} ms; without XDP {}×: median {} ms",
            fmt(p99_ratio(&x, f), 2),
            fmt(m(&x, f), 1),
            list(&x, f),
            fmt(calm_p99(&x), 1),
            fmt(p99_ratio(&n, f), 2),
            fmt(m(&n, f), 1),
        )
    };
    let mut rows = vec![
        TableRow {
            metric: "P5 flood shield: host CPU per flood packet (softirq + XDP NAPI + \
                     agent), without XDP ÷ with XDP, full-rate flood"
                .into(),
            measured: format!(
                "{}× ({} ns vs {} ns per packet; flood at the DRA {} pkt/s without XDP, \
                 {} with)",
                fmt(ratio, 1),
                fmt(n_ns, 0),
                fmt(x_ns, 0),
                fmt(n_pps, 0),
                fmt(x_pps, 0)
            ),
            goal: format!("≥ {GOAL_CPU_RATIO}×"),
            met: cpu_met,
        },
        TableRow {
            metric: "P5 flood shield: CCR-U p99 with flood ÷ without, XDP, full-rate flood".into(),
            measured: format!(
                "{} vs {} ms)",
                p99_vs_calm(|c| c.p99_flood),
                fmt(calm_p99(&n), 1)
            ),
            goal: format!("≤ {GOAL_P99_RATIO}×"),
            met: p99_met,
        },
    ];
    if opts.paced_pps > 0.0 {
        rows.push(TableRow {
            metric: format!(
                "P5 flood shield: CCR-U p99 with flood ÷ without, XDP, flood paced at \
                 {:.0}/s",
                opts.paced_pps
            ),
            measured: format!(
                "{}; flood at the DRA {} pkt/s)",
                p99_vs_calm(|c| c.p99_paced),
                fmt(x_ppsp, 0)
            ),
            goal: format!("≤ {GOAL_P99_RATIO}×"),
            met: p99_paced_met,
        });
    }
    (v, rows)
}
