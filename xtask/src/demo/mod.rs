//! `cargo xtask demo`: the seed story on the lab (docs/demo.md).
//!
//! lab up → `dra run` (config/lab/dra-lab.toml: the seed with a 10 s reversal hold and a
//! lower-CPU demo profile, CPU source = the lab's Redis) → two gateways (pgw1 with
//! dynamic throttling, pgw2 with static limits only) send steady traffic, then a
//! CCR-I/CCR-T storm, then steady traffic again. The agent's /metrics (fetched inside
//! the dra namespace) is scraped every 250 ms over the whole run ([`series`]); a live
//! view refreshes each second; at the end a summary, CSVs and a PNG in
//! `results/demo-<timestamp>/`, and the story checks ([`checks`]) decide the exit code.
//! The lab is always removed (guard + SIGINT/SIGTERM handling). `--doic`: the same story
//! with DOIC ([`doic`]): pgw2 a DOIC gateway, pcrf1 reporting overload. `--monitoring`:
//! a real Prometheus in the lab scrapes the agent with the shipped rules
//! ([`crate::monitoring`]); the summary lists the alerts that fired and when.

mod checks;
mod doic;
mod profile;
mod series;
mod view;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::Write,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    agent_run::{ClientFiles, LAB, gateway_client},
    lab::{self, Bins, DRA_CLIENT_IF, NS_DRA, NS_GW, PIN_DIR, UPSTREAMS},
    metrics::Snap,
    monitoring::{
        describe_spans,
        prometheus::{AlertSpan, Prometheus, unix_now},
    },
    procs::{install_signal_handlers, interrupted},
    results::timestamp,
};
use checks::Check;
use profile::{Profile, read_profile};
use series::{Row, Rows, SCRAPE_PERIOD, Sample};

pub(crate) const LAB_CONFIG: &str = "config/lab/dra-lab.toml";
pub(crate) const GATEWAYS: [(&str, &str, &str); 2] = [
    ("pgw1", "198.18.1.2", "config/lab/pgw1.toml"),
    ("pgw2", "198.18.1.3", "config/lab/pgw2.toml"),
];

fn last_phase(rows_file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(rows_file).ok()?;
    let last = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let v: serde_json::Value = serde_json::from_str(last).ok()?;
    v.get("phase")?.as_str().map(str::to_owned)
}

fn scenario_secs(path: &Path) -> Result<f64> {
    let v: toml::Value = toml::from_str(&std::fs::read_to_string(path)?)?;
    v.get("phase")
        .and_then(|p| p.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    p.get("duration_s")
                        .and_then(|d| d.as_float().or_else(|| d.as_integer().map(|i| i as f64)))
                })
                .sum()
        })
        .with_context(|| format!("{}: no [[phase]]", path.display()))
}

// ---- the run -------------------------------------------------------------------

/// What the run observed, for the checks and the summary.
struct Outcome {
    /// Every scrape, from the gateways' start to their end.
    samples: Vec<Sample>,
    /// Fast-path rates per publish period.
    rows: Vec<Row>,
    last: Snap,
    clients: BTreeMap<String, dra_report::client::Report>,
    /// With `--monitoring`: when each alert fired and resolved (Unix time of t = 0).
    alerts: Option<(Vec<AlertSpan>, f64)>,
}

/// `cargo xtask demo [--doic] [--monitoring]` (after the toolchain bootstrap and the
/// release build).
pub fn run(root: &Path, with_doic: bool, monitoring: bool) -> Result<()> {
    if !crate::is_root() {
        bail!("the demo builds network namespaces and attaches XDP: run it as root");
    }
    install_signal_handlers();
    let started = Instant::now();
    let out_dir = root.join("results").join(format!("demo-{}", timestamp()));
    std::fs::create_dir_all(&out_dir).with_context(|| format!("create {}", out_dir.display()))?;
    let bins = Bins::release(root);
    let profile = read_profile(&root.join(LAB_CONFIG))?;
    let leftovers = lab::down();
    if !leftovers.is_empty() {
        eprintln!("xtask: removed a previous lab: {}", leftovers.join(", "));
    }
    let result = {
        let _lab = lab::TOPOLOGY.guard();
        eprintln!("xtask: lab up (namespaces dralab-*, Redis, pcrf1/pcrf2/ocs1 simulators)");
        lab::up(&bins)?;
        if with_doic {
            eprintln!(
                "xtask: DOIC story: {} reports overload (servers restarted); {} is a DOIC \
                 gateway; agent config {}",
                doic::REPORTER,
                doic::GATEWAY,
                doic::CONFIG
            );
            lab::restart_servers_with(&bins, lab::SERVER_LATENCY, &doic::server_args)?;
        }
        story(root, &bins, &profile, &out_dir, with_doic, monitoring)
    };
    // The guard has removed the lab; make sure nothing is left.
    let left_ns = lab::namespaces();
    let left_pins = Path::new(PIN_DIR).exists();
    let outcome = result?;
    let checks = report(&outcome, &profile, &out_dir, with_doic)?;
    println!(
        "run time {:.0} s; results in {}",
        started.elapsed().as_secs_f64(),
        out_dir.display()
    );
    if !left_ns.is_empty() || left_pins {
        bail!("lab not fully removed: namespaces {left_ns:?}, pins left: {left_pins}");
    }
    if !checks {
        bail!("the story checks failed (see above)");
    }
    Ok(())
}

fn story(
    root: &Path,
    bins: &Bins,
    profile: &Profile,
    out: &Path,
    with_doic: bool,
    monitoring: bool,
) -> Result<Outcome> {
    // The agent, in the dra namespace (network namespace only: its pins must be global).
    let config = if with_doic { doic::CONFIG } else { LAB_CONFIG };
    let mut dra_cmd = LAB.agent_command(
        lab::command_in(NS_DRA, &bins.dra)?,
        &root.join(config),
        "info",
    );
    dra_cmd.args(["--iface", DRA_CLIENT_IF]);
    let dra_log = out.join("dra.log");
    let mut dra = LAB.spawn(&dra_log, "dra run", "dra", &mut dra_cmd)?;
    eprintln!(
        "xtask: dra run in {NS_DRA}: XDP on {DRA_CLIENT_IF}, pins in {PIN_DIR}, log {}",
        dra_log.display()
    );
    LAB.wait_ready(
        &mut dra,
        &dra_log,
        "upstreams open, Redis CPU source up",
        // A scrape without the gauge (none yet) is not ready.
        |s| LAB.upstreams_open(s) && s.sum("dra_db_cpu_source_up", &[]).is_ok_and(|v| v == 1.0),
    )?;
    let prom = if monitoring {
        let mut p = Prometheus::start(root)?;
        p.wait_for(r#"up{job="dra"} == 1"#, Duration::from_secs(20))?;
        eprintln!(
            "xtask: prometheus scraping the agent every second ({lab_ns}, {listen}; rules: \
             the shipped ones, each alert's for: in seconds instead of minutes)",
            lab_ns = NS_DRA,
            listen = crate::monitoring::prometheus::LISTEN
        );
        Some(p)
    } else {
        None
    };
    eprintln!(
        "xtask: agent ready (pcrf1, pcrf2, ocs1 open; Redis CPU source up); starting pgw1 and pgw2"
    );
    let mut total_s: f64 = 0.0;
    let mut clients = Vec::new();
    for (peer, src, scenario) in GATEWAYS {
        total_s = total_s.max(scenario_secs(&root.join(scenario))?);
        let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
        gateway_client(
            &mut c,
            peer,
            src,
            &root.join(scenario),
            &ClientFiles::new(out, peer),
        );
        if with_doic && peer == doic::GATEWAY {
            c.arg("--doic");
        }
        clients.push(LAB.spawn(&out.join(format!("{peer}.log")), peer, peer, &mut c)?);
    }
    // SAFETY: isatty(3) on fd 1 only reads its state.
    let tty = unsafe { libc::isatty(1) } == 1;
    if !tty {
        println!(
            "DRL profile (DEMO, lower CPU than the seed): {}; reversal hold {} (SHORTENED, \
             seed scenario 30 s), step {} %; CPU source = the lab's Redis",
            profile.describe(),
            profile.hold,
            profile.step
        );
    }
    let t0 = Instant::now();
    let t0_unix = unix_now();
    let mut samples = Vec::new();
    let mut rows = Vec::new();
    let mut splitter = Rows::new();
    let mut last = LAB.scrape()?;
    samples.push(Sample::from_snap(0.0, &last).context("the first scrape")?);
    let deadline = t0 + Duration::from_secs_f64(total_s + 60.0);
    let mut next = t0 + SCRAPE_PERIOD;
    loop {
        while Instant::now() < next {
            interrupted()?;
            std::thread::sleep(Duration::from_millis(10));
        }
        next += SCRAPE_PERIOD;
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited during the demo ({st}); log {}",
                dra_log.display()
            );
        }
        last = LAB.scrape()?;
        let t = t0.elapsed().as_secs_f64();
        samples
            .push(Sample::from_snap(t, &last).with_context(|| format!("the scrape at {t:.1} s"))?);
        let phase =
            || last_phase(&out.join("pgw1-rows.jsonl")).unwrap_or_else(|| "starting".into());
        if let Some(row) = splitter.push(&samples, phase) {
            if tty {
                print!("\x1b[H\x1b[2J{}", view::render(&row, profile, total_s));
            } else {
                println!("{}", view::line(&row));
            }
            let _ = std::io::stdout().flush();
            rows.push(row);
        }
        if clients.iter_mut().all(|c| c.exited().is_some()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the load generators did not finish in time");
        }
    }
    let mut client_reports = BTreeMap::new();
    for (c, (peer, _, _)) in clients.iter_mut().zip(GATEWAYS) {
        let st = c.exited();
        let path = out.join(format!("{peer}-summary.json"));
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "{peer}: no summary ({st:?}); log {}",
                out.join(format!("{peer}.log")).display()
            )
        })?;
        let v: dra_report::client::Report = dra_report::parse(&text, &path.display().to_string())?;
        client_reports.insert(peer.to_owned(), v);
    }
    // The alerts, before the agent stops (its scrape failing would be one).
    let alerts = match &prom {
        Some(p) => Some((p.alert_spans(p.started, unix_now(), 1.0)?, t0_unix)),
        None => None,
    };
    if let Some(p) = prom {
        let _ = std::fs::copy(p.log(), out.join("prometheus.log"));
    }
    // Stop the agent (DPR to its peers, detach), then the servers (they print stats).
    let st = dra.stop(Duration::from_secs(10));
    if !st.is_some_and(|s| s.success()) {
        bail!(
            "dra run did not exit cleanly on SIGINT ({st:?}); log {}",
            dra_log.display()
        );
    }
    for s in UPSTREAMS {
        if let Ok(p) = std::fs::read_to_string(Path::new(lab::STATE_DIR).join(format!("{s}.pid")))
            && let Ok(pid) = p.trim().parse::<i32>()
        {
            lab::stop_pid(pid, libc::SIGINT, Duration::from_secs(5));
        }
        let _ = std::fs::copy(lab::log_file(s), out.join(format!("{s}.log")));
    }
    let _ = std::fs::copy(lab::log_file("redis"), out.join("redis.log"));
    Ok(Outcome {
        samples,
        rows,
        last,
        clients: client_reports,
        alerts,
    })
}

// ---- summary, checks, plot ------------------------------------------------------

fn report(o: &Outcome, profile: &Profile, out: &Path, with_doic: bool) -> Result<bool> {
    let mut s = String::new();
    let _ = writeln!(s, "\n=== dra demo summary ===");
    let _ = writeln!(
        s,
        "DRL profile (DEMO): {}; reversal hold {} (shortened), step {} %",
        profile.describe(),
        profile.hold,
        profile.step
    );
    let _ = writeln!(s, "\nfast path totals (requests):");
    let _ = writeln!(
        s,
        "{:<6} {:<10} {:>10} {:>10} {:>10}",
        "peer", "class", "offered", "admitted", "rejected"
    );
    let tot = |peer: &str, class: &str, outcome: &str| {
        o.last
            .sum(
                "dra_fastpath_requests_total",
                &[("peer", peer), ("class", class), ("outcome", outcome)],
            )
            .context("the agent's last scrape")
    };
    for (peer, _, _) in GATEWAYS {
        for class in o
            .last
            .label_values("dra_fastpath_requests_total", &[("peer", peer)], "class")
        {
            if class == "conn" {
                continue;
            }
            let rej = tot(peer, &class, "marked")? + tot(peer, &class, "dropped")?;
            let _ = writeln!(
                s,
                "{peer:<6} {class:<10} {:>10.0} {:>10.0} {:>10.0}",
                tot(peer, &class, "seen")?,
                tot(peer, &class, "admitted")?,
                rej
            );
        }
    }
    let _ = writeln!(
        s,
        "\nanswers the agent sent to each gateway, by Result-Code:"
    );
    for (peer, _, _) in GATEWAYS {
        let codes = o
            .last
            .label_values("dra_answers_total", &[("peer", peer)], "result_code");
        let list: Vec<String> = codes
            .iter()
            .map(|c| {
                let n = o
                    .last
                    .sum("dra_answers_total", &[("peer", peer), ("result_code", c)])
                    .context("the agent's last scrape")?;
                Ok(format!("{c}: {n:.0}"))
            })
            .collect::<Result<_>>()?;
        let _ = writeln!(s, "  {peer}: {}", list.join(", "));
    }
    let _ = writeln!(s, "\nload generators (client side):");
    let _ = writeln!(
        s,
        "{:<6} {:<9} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>8}",
        "peer", "class", "sent", "2001", "3002", "timeouts", "unanswered", "not_sent", "p99 ms"
    );
    let mut lost = 0u64;
    for (peer, v) in &o.clients {
        for (class, c) in &v.classes {
            if c.sent == 0 {
                continue;
            }
            lost += c.timeouts + c.unanswered;
            let p99 = if c.answered_total() > 0 {
                c.latency.p99_ms
            } else {
                f64::NAN
            };
            let _ = writeln!(
                s,
                "{peer:<6} {class:<9} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>8.1}",
                c.sent,
                c.answered_with(2001),
                c.answered_with(3002),
                c.timeouts,
                c.unanswered,
                c.not_sent,
                p99
            );
        }
    }
    // Summary text: as in the plot, a missing gauge reads as unthrottled (the gauge
    // check fails the demo when it is missing).
    let pgw1 = |s: &Sample| s.throttle_of("pgw1").unwrap_or(0.0);
    let peak_throttle = o.samples.iter().map(pgw1).fold(0.0, f64::max);
    let peak_cpu = o.samples.iter().map(|s| s.cpu).fold(0.0, f64::max);
    let engaged_at = o.samples.iter().find(|s| pgw1(s) > 0.0).map(|s| s.t);
    let last_on = o.samples.iter().rposition(|s| pgw1(s) > 0.0);
    let released_at = last_on.and_then(|i| o.samples.get(i + 1)).map(|s| s.t);
    let final_throttle = o.samples.last().map_or(f64::NAN, pgw1);
    let pgw1_throttled_rejects: f64 = o
        .rows
        .iter()
        .filter(|r| r.throttle > 0.0)
        .map(|r| r.rate("pgw1", "gx_ccr_i", 2) * r.secs)
        .sum();
    let pgw2_rejected = tot("pgw2", "gx_ccr_i", "marked")? + tot("pgw2", "gx_ccr_i", "dropped")?;
    // The agent creates pgw2's 3002 series at its first 3002 answer: absent, none were
    // sent (and the check below fails).
    let pgw2_3002 = o.last.sum_or_zero_if_absent(
        "dra_answers_total",
        &[("peer", "pgw2"), ("result_code", "3002")],
    );
    let violations = o
        .last
        .sum("dra_unanswered_invariant_violations_total", &[])
        .context("the agent's last scrape")?;
    // ocs1's latency series appears at its first answer: absent, none answered (the
    // check below fails).
    let ocs_answers = o
        .last
        .sum_or_zero_if_absent("dra_answer_latency_seconds_count", &[("peer", "ocs1")]);
    let at = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.1}"));
    let _ = writeln!(
        s,
        "\npeak DB CPU {peak_cpu:.2} %, peak pgw1 throttle {peak_throttle:.0} %"
    );
    let _ = writeln!(
        s,
        "throttle engaged at t = {} s, back to 0 at t = {} s; final throttle {final_throttle:.0} %",
        at(engaged_at),
        at(released_at)
    );
    let _ = writeln!(
        s,
        "{} scrapes of /metrics every {} ms, {} rows of fast-path rates",
        o.samples.len(),
        SCRAPE_PERIOD.as_millis(),
        o.rows.len()
    );
    let gateways: Vec<&str> = GATEWAYS.iter().map(|g| g.0).collect();
    let mut checks = vec![
        Check::new(
            "pgw2's static CCR-I limit rejected requests in the fast path",
            "pgw2 gx_ccr_i marked + dropped > 0",
            format!("{pgw2_rejected:.0}"),
            pgw2_rejected > 0.0,
        ),
        Check::new(
            "the agent answered pgw2 with 3002",
            "dra_answers_total{peer=pgw2,result_code=3002} > 0",
            format!("{pgw2_3002:.0}"),
            pgw2_3002 > 0.0,
        ),
        Check::new(
            "DB CPU reached the lowest threshold of the profile",
            format!("peak DB CPU ≥ {} %", profile.lowest()),
            format!("{peak_cpu:.2} %"),
            peak_cpu >= profile.lowest(),
        ),
        Check::new(
            "dynamic throttling of pgw1 engaged",
            "pgw1 throttle > 0 at some scrape",
            format!(
                "peak {peak_throttle:.0} %, first at t = {} s",
                at(engaged_at)
            ),
            peak_throttle > 0.0,
        ),
        checks::follows_profile(&o.samples, profile, "pgw1"),
        Check::new(
            "pgw1 requests were rejected while throttled",
            "pgw1 gx_ccr_i rejected > 0 in rows with throttle > 0",
            format!("{pgw1_throttled_rejects:.0}"),
            pgw1_throttled_rejects > 0.0,
        ),
        checks::admitted_is_effective(&o.samples, &o.rows, profile, "pgw1"),
        checks::reversal(&o.samples, profile, "pgw1"),
        Check::new(
            "reversal stepped the throttle back to 0 before the end",
            "throttle 0 at the last scrape, after a throttle > 0",
            format!(
                "back to 0 at t = {} s, final {final_throttle:.0} %",
                at(released_at)
            ),
            final_throttle == 0.0 && peak_throttle > 0.0,
        ),
        checks::throttle_series(&o.samples, profile, &gateways),
        checks::admitted_is_static(&o.rows, profile, "pgw2", !with_doic),
        Check::new(
            "Gy traffic was relayed to ocs1 and answered",
            "answers from ocs1 > 0",
            format!("{ocs_answers:.0}"),
            ocs_answers > 0.0,
        ),
        Check::new(
            "every request was answered (no timeouts, none unanswered)",
            "client timeouts + unanswered = 0, invariant violations = 0",
            format!("{lost} lost at the clients, {violations:.0} violations"),
            lost == 0 && violations == 0.0,
        ),
    ];
    if with_doic {
        checks.extend(doic::checks(&o.last, &o.clients).context("the DOIC checks")?);
    }
    if let Some((spans, t0)) = &o.alerts {
        let _ = writeln!(
            s,
            "\nalerts that fired (the lab's Prometheus, shipped rules with each for: in \
             seconds instead of minutes; t as above):"
        );
        if spans.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for l in describe_spans(spans, *t0) {
            let _ = writeln!(s, "  {l}");
        }
        let throttle: Vec<AlertSpan> = spans
            .iter()
            .filter(|a| a.alert == "DRAThrottleActive" && a.labels.contains("peer=\"pgw1\""))
            .cloned()
            .collect();
        checks.push(Check::new(
            "the throttle alert fired for pgw1 and resolved after the storm",
            "DRAThrottleActive{peer=pgw1} fired, then resolved before the end",
            match describe_spans(&throttle, *t0).join("; ") {
                d if d.is_empty() => "never fired".to_owned(),
                d => d,
            },
            !throttle.is_empty() && throttle.iter().all(|a| a.resolved.is_some()),
        ));
    }
    let _ = writeln!(s, "\nstory checks:");
    let mut all = true;
    for c in &checks {
        all &= c.ok;
        let _ = writeln!(
            s,
            "  [{}] {}\n         expected: {}\n         saw:      {}",
            if c.ok { "PASS" } else { "FAIL" },
            c.what,
            c.expected,
            c.saw
        );
    }
    let passed = checks.iter().filter(|c| c.ok).count();
    let _ = writeln!(s, "{passed}/{} story checks passed", checks.len());
    print!("{s}");
    std::fs::write(out.join("summary.txt"), &s)?;
    view::write_csv(&o.rows, &out.join("timeseries.csv"))?;
    view::write_samples_csv(&o.samples, &out.join("samples.csv"))?;
    let png = out.join("demo.png");
    match view::plot(&o.rows, &o.samples, profile, &png) {
        Ok(()) => println!("plot: {}", png.display()),
        Err(e) => {
            eprintln!("xtask: plot failed: {e:#}");
            all = false;
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_config_keeps_the_seed_apart_from_the_documented_keys() {
        let root = crate::workspace_root();
        let lab = read_profile(&root.join(LAB_CONFIG)).unwrap();
        let seed = read_profile(&root.join("config/dra.toml")).unwrap();
        assert_eq!(lab.hold, "10s");
        assert_eq!(lab.step, seed.step);
        assert_eq!(lab.drl_peers, seed.drl_peers);
        assert_eq!(lab.static_rates, seed.static_rates);
        let throttles = |p: &Profile| p.thresholds.iter().map(|t| t.1).collect::<Vec<_>>();
        assert_eq!(
            throttles(&lab),
            throttles(&seed),
            "the demo profile keeps the seed's throttle column"
        );
    }
}
