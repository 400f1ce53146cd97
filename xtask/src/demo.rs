//! `cargo xtask demo`: the seed story on the lab (docs/demo.md).
//!
//! lab up → `dra run` (config/lab/dra-lab.toml: the seed with a 10 s reversal hold and a
//! lower-CPU demo profile, CPU source = the lab's Redis) → two gateways (pgw1 with
//! dynamic throttling, pgw2 with static limits only) send steady traffic, then a
//! CCR-I/CCR-T storm, then steady traffic again. A live view (from the agent's /metrics,
//! fetched inside the dra namespace) refreshes each second; at the end a summary, a CSV
//! and a PNG in results/demo-<timestamp>/, and the story checks decide the exit code.
//! The lab is always removed (guard + SIGINT/SIGTERM handling).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::Write,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    lab::{self, Bins, DRA_CLIENT_IF, NS_DRA, NS_GW, PIN_DIR, UPSTREAMS},
    metrics::{Snap, scrape},
    procs::{Proc, install_signal_handlers, interrupted, spawn_to},
    results::timestamp,
};

const LAB_CONFIG: &str = "config/lab/dra-lab.toml";
const GATEWAYS: [(&str, &str, &str); 2] = [
    ("pgw1", "198.18.1.2", "config/lab/pgw1.toml"),
    ("pgw2", "198.18.1.3", "config/lab/pgw2.toml"),
];

// ---- the DRL profile shown on screen ---------------------------------------

struct Profile {
    thresholds: Vec<(f64, f64)>,
    hold: String,
    step: f64,
}

fn read_profile(path: &Path) -> Result<Profile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let v: toml::Value =
        toml::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    let p = v
        .get("dynamic_throttling_db_cpu_profile")
        .context("no [dynamic_throttling_db_cpu_profile]")?;
    let num = |x: &toml::Value| x.as_float().or_else(|| x.as_integer().map(|i| i as f64));
    let thresholds = p
        .get("thresholds")
        .and_then(|t| t.as_array())
        .context("no thresholds")?
        .iter()
        .filter_map(|r| Some((num(r.get("cpu")?)?, num(r.get("throttle")?)?)))
        .collect();
    Ok(Profile {
        thresholds,
        hold: p
            .get("reversal_hold_time")
            .and_then(|h| h.as_str())
            .unwrap_or("?")
            .to_owned(),
        step: p.get("reversal_step").and_then(num).unwrap_or(0.0),
    })
}

impl Profile {
    fn describe(&self) -> String {
        let rows: Vec<String> = self
            .thresholds
            .iter()
            .map(|(c, t)| format!("{c}%→{t}%"))
            .collect();
        format!("{} (seed: 50%→20% 55%→30% 60%→40% 65%→50%)", rows.join(" "))
    }

    fn lowest(&self) -> f64 {
        self.thresholds
            .iter()
            .map(|r| r.0)
            .fold(f64::INFINITY, f64::min)
    }
}

// ---- per-second view ---------------------------------------------------------

/// Per peer and class: offered, admitted, rejected (fast path, per second).
type ClassRates = BTreeMap<String, [f64; 3]>;

#[derive(Clone, Debug, Default)]
struct Row {
    t: f64,
    phase: String,
    peers: BTreeMap<String, ClassRates>,
    throttle: f64,
    cpu: f64,
    eff_rate: f64,
    /// Per upstream: answers/s, mean answer latency in ms over the second.
    upstream: BTreeMap<String, (f64, f64)>,
}

fn rates(prev: &Snap, cur: &Snap, dt: f64, t: f64, phase: &str) -> Row {
    let d = |name: &str, want: &[(&str, &str)]| {
        ((cur.sum(name, want) - prev.sum(name, want)) / dt).max(0.0)
    };
    let mut row = Row {
        t,
        phase: phase.to_owned(),
        ..Row::default()
    };
    for (peer, _, _) in GATEWAYS {
        let mut classes = ClassRates::new();
        for class in cur.label_values("dra_fastpath_requests_total", &[("peer", peer)], "class") {
            if class == "conn" {
                continue;
            }
            let f = |outcome| {
                d(
                    "dra_fastpath_requests_total",
                    &[("peer", peer), ("class", &class), ("outcome", outcome)],
                )
            };
            classes.insert(
                class.clone(),
                [f("seen"), f("admitted"), f("marked") + f("dropped")],
            );
        }
        row.peers.insert(peer.to_owned(), classes);
    }
    row.throttle = cur.sum("dra_throttle_percent", &[("peer", "pgw1")]);
    row.cpu = cur.sum("dra_db_cpu_percent", &[]);
    row.eff_rate = cur.sum(
        "dra_effective_rate",
        &[("peer", "pgw1"), ("class", "gx_ccr_i")],
    );
    for up in UPSTREAMS {
        let n = cur.sum("dra_answer_latency_seconds_count", &[("peer", up)])
            - prev.sum("dra_answer_latency_seconds_count", &[("peer", up)]);
        let s = cur.sum("dra_answer_latency_seconds_sum", &[("peer", up)])
            - prev.sum("dra_answer_latency_seconds_sum", &[("peer", up)]);
        row.upstream.insert(
            up.to_owned(),
            (n / dt, if n > 0.0 { 1000.0 * s / n } else { f64::NAN }),
        );
    }
    row
}

fn render(row: &Row, profile: &Profile, total_s: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dra demo — t = {:>4.0} s of ~{:.0} s   phase: {}\n\
         DRL profile (DEMO, lower CPU than the seed): {}\n\
         reversal hold {} (SHORTENED, seed 30 s), step {} %, CPU source = the lab's Redis \
         (INFO cpu)\n",
        row.t,
        total_s,
        row.phase,
        profile.describe(),
        profile.hold,
        profile.step
    );
    let _ = writeln!(
        s,
        "DB CPU (Redis) {:>5.1} %   pgw1 throttle {:>3.0} %   pgw1 Gx CCR-I/T effective \
         rate {:>5.0}/s\n",
        row.cpu, row.throttle, row.eff_rate
    );
    let _ = writeln!(
        s,
        "{:<6} {:<10} {:>10} {:>10} {:>10}",
        "peer", "class", "offered/s", "admitted/s", "rejected/s"
    );
    for (peer, classes) in &row.peers {
        for (class, [o, a, r]) in classes {
            let _ = writeln!(s, "{peer:<6} {class:<10} {o:>10.0} {a:>10.0} {r:>10.0}");
        }
    }
    let _ = writeln!(
        s,
        "\n{:<8} {:>10} {:>16}",
        "upstream", "answers/s", "mean latency ms"
    );
    for (up, (n, ms)) in &row.upstream {
        let ms = if ms.is_nan() {
            "-".to_owned()
        } else {
            format!("{ms:.2}")
        };
        let _ = writeln!(s, "{up:<8} {n:>10.0} {ms:>16}");
    }
    s
}

fn last_phase(rows_file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(rows_file).ok()?;
    let last = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let v: serde_json::Value = serde_json::from_str(last).ok()?;
    v.get("phase")?.as_str().map(str::to_owned)
}

fn scenario_secs(path: &Path) -> Result<f64> {
    let v: toml::Value = toml::from_str(&std::fs::read_to_string(path)?)?;
    Ok(v.get("phase")
        .and_then(|p| p.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    p.get("duration_s")
                        .and_then(|d| d.as_float().or_else(|| d.as_integer().map(|i| i as f64)))
                })
                .sum()
        })
        .unwrap_or(0.0))
}

// ---- the run -------------------------------------------------------------------

/// What the run observed, for the checks and the summary.
struct Outcome {
    rows: Vec<Row>,
    last: Snap,
    clients: BTreeMap<String, serde_json::Value>,
}

/// `cargo xtask demo` (after the toolchain bootstrap and the release build).
pub fn run(root: &Path) -> Result<()> {
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
        let _lab = lab::LabGuard;
        eprintln!("xtask: lab up (namespaces dralab-*, Redis, pcrf1/pcrf2/ocs1 simulators)");
        lab::up(&bins)?;
        story(root, &bins, &profile, &out_dir)
    };
    // The guard has removed the lab; make sure nothing is left.
    let left_ns = lab::namespaces();
    let left_pins = Path::new(PIN_DIR).exists();
    let outcome = result?;
    let checks = report(&outcome, &profile, &out_dir)?;
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

fn story(root: &Path, bins: &Bins, profile: &Profile, out: &Path) -> Result<Outcome> {
    // The agent, in the dra namespace (network namespace only: its pins must be global).
    let mut dra_cmd = lab::command_in(NS_DRA, &bins.dra)?;
    dra_cmd
        .args(["run", "--config"])
        .arg(root.join(LAB_CONFIG))
        .args([
            "--iface",
            DRA_CLIENT_IF,
            "--pin-dir",
            PIN_DIR,
            "--detach-on-exit",
        ])
        .env("RUST_LOG", "info");
    let dra_log = out.join("dra.log");
    let mut dra = Proc::new("dra run", spawn_to(&dra_log, "dra", &mut dra_cmd)?);
    eprintln!(
        "xtask: dra run in {NS_DRA}: XDP on {DRA_CLIENT_IF}, pins in {PIN_DIR}, log {}",
        dra_log.display()
    );
    // Ready: metrics up, upstreams open, CPU source delivering.
    let end = Instant::now() + Duration::from_secs(40);
    loop {
        interrupted()?;
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited ({st}); log:\n{}",
                std::fs::read_to_string(&dra_log).unwrap_or_default()
            );
        }
        if let Ok(s) = scrape() {
            let open = UPSTREAMS
                .iter()
                .all(|p| s.sum("dra_peer_state", &[("peer", p), ("state", "open")]) == 1.0);
            if open && s.sum("dra_db_cpu_source_up", &[]) == 1.0 {
                break;
            }
        }
        if Instant::now() > end {
            bail!(
                "the agent did not become ready in 40 s (upstreams open, Redis CPU source up); \
                 log {}",
                dra_log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "xtask: agent ready (pcrf1, pcrf2, ocs1 open; Redis CPU source up); starting pgw1 and pgw2"
    );
    let mut total_s: f64 = 0.0;
    let mut clients = Vec::new();
    for (peer, src, scenario) in GATEWAYS {
        total_s = total_s.max(scenario_secs(&root.join(scenario))?);
        let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
        c.args([
            "client",
            "--connect",
            "198.18.1.1:3868",
            "--bind",
            src,
            "--peers",
            "1",
        ])
        .args([
            "--origin-host",
            &format!("{peer}.lab.example"),
            "--tw",
            "6",
            "--quiet",
            "--scenario",
        ])
        .arg(root.join(scenario))
        .arg("--rows")
        .arg(out.join(format!("{peer}-rows.jsonl")))
        .arg("--summary-json")
        .arg(out.join(format!("{peer}-summary.json")));
        let child = spawn_to(&out.join(format!("{peer}.log")), peer, &mut c)?;
        clients.push(Proc::new(peer, child));
    }
    // SAFETY: isatty(3) on fd 1 only reads its state.
    let tty = unsafe { libc::isatty(1) } == 1;
    if !tty {
        println!(
            "DRL profile (DEMO, lower CPU than the seed): {}; reversal hold {} (SHORTENED, \
             seed 30 s), step {} %; CPU source = the lab's Redis",
            profile.describe(),
            profile.hold,
            profile.step
        );
    }
    let t0 = Instant::now();
    let mut prev = (Instant::now(), scrape()?);
    let mut rows = Vec::new();
    let deadline = t0 + Duration::from_secs_f64(total_s + 60.0);
    let mut next = t0 + Duration::from_secs(1);
    loop {
        while Instant::now() < next {
            interrupted()?;
            std::thread::sleep(Duration::from_millis(50));
        }
        next += Duration::from_secs(1);
        if let Some(st) = dra.exited() {
            bail!(
                "dra run exited during the demo ({st}); log {}",
                dra_log.display()
            );
        }
        let cur = (Instant::now(), scrape()?);
        let phase = last_phase(&out.join("pgw1-rows.jsonl")).unwrap_or_else(|| "starting".into());
        let row = rates(
            &prev.1,
            &cur.1,
            (cur.0 - prev.0).as_secs_f64(),
            t0.elapsed().as_secs_f64(),
            &phase,
        );
        let view = render(&row, profile, total_s);
        if tty {
            print!("\x1b[H\x1b[2J{view}");
        } else {
            let r = |p: &str, c: &str| {
                row.peers
                    .get(p)
                    .and_then(|m| m.get(c))
                    .copied()
                    .unwrap_or_default()
            };
            let (a, b) = (r("pgw1", "all"), r("pgw2", "all"));
            println!(
                "t={:>4.0} {:<9} cpu={:>5.1}% throttle={:>2.0}% pgw1 {:>4.0}/{:>4.0}/{:>4.0} \
                 pgw2 {:>4.0}/{:>4.0}/{:>4.0} (offered/admitted/rejected per s)",
                row.t, row.phase, row.cpu, row.throttle, a[0], a[1], a[2], b[0], b[1], b[2]
            );
        }
        let _ = std::io::stdout().flush();
        rows.push(row);
        prev = cur;
        if clients.iter_mut().all(|c| c.exited().is_some()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the load generators did not finish in time");
        }
    }
    let last = prev.1;
    let mut client_reports = BTreeMap::new();
    for (c, (peer, _, _)) in clients.iter_mut().zip(GATEWAYS) {
        let st = c.exited();
        let path = out.join(format!("{peer}-summary.json"));
        let v: serde_json::Value = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .with_context(|| {
                format!(
                    "{peer}: no summary ({st:?}); log {}",
                    out.join(format!("{peer}.log")).display()
                )
            })?;
        client_reports.insert(peer.to_owned(), v);
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
        rows,
        last,
        clients: client_reports,
    })
}

// ---- summary, checks, plot ------------------------------------------------------

fn report(o: &Outcome, profile: &Profile, out: &Path) -> Result<bool> {
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
        o.last.sum(
            "dra_fastpath_requests_total",
            &[("peer", peer), ("class", class), ("outcome", outcome)],
        )
    };
    for (peer, _, _) in GATEWAYS {
        for class in o
            .last
            .label_values("dra_fastpath_requests_total", &[("peer", peer)], "class")
        {
            if class == "conn" {
                continue;
            }
            let rej = tot(peer, &class, "marked") + tot(peer, &class, "dropped");
            let _ = writeln!(
                s,
                "{peer:<6} {class:<10} {:>10.0} {:>10.0} {:>10.0}",
                tot(peer, &class, "seen"),
                tot(peer, &class, "admitted"),
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
                format!(
                    "{c}: {:.0}",
                    o.last
                        .sum("dra_answers_total", &[("peer", peer), ("result_code", c)])
                )
            })
            .collect();
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
        if let Some(classes) = v.get("classes").and_then(|c| c.as_object()) {
            for (class, c) in classes {
                let n = |k: &str| c.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
                let code = |k: &str| {
                    c.get("answered")
                        .and_then(|a| a.get(k))
                        .and_then(|x| x.as_u64())
                        .unwrap_or(0)
                };
                if n("sent") == 0 {
                    continue;
                }
                lost += n("timeouts") + n("unanswered");
                let p99 = c
                    .get("latency")
                    .and_then(|l| l.get("p99_ms"))
                    .and_then(|x| x.as_f64())
                    .unwrap_or(f64::NAN);
                let _ = writeln!(
                    s,
                    "{peer:<6} {class:<9} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>8.1}",
                    n("sent"),
                    code("2001"),
                    code("3002"),
                    n("timeouts"),
                    n("unanswered"),
                    n("not_sent"),
                    p99
                );
            }
        }
    }
    let peak_throttle = o.rows.iter().map(|r| r.throttle).fold(0.0, f64::max);
    let peak_cpu = o.rows.iter().map(|r| r.cpu).fold(0.0, f64::max);
    let engaged_at = o.rows.iter().find(|r| r.throttle > 0.0).map(|r| r.t);
    let last_on = o.rows.iter().rposition(|r| r.throttle > 0.0);
    let released_at = last_on.and_then(|i| o.rows.get(i + 1)).map(|r| r.t);
    let final_throttle = o.rows.last().map(|r| r.throttle).unwrap_or(f64::NAN);
    let pgw1_throttled_rejects: f64 = o
        .rows
        .iter()
        .filter(|r| r.throttle > 0.0)
        .filter_map(|r| {
            r.peers
                .get("pgw1")
                .and_then(|m| m.get("gx_ccr_i"))
                .map(|x| x[2])
        })
        .sum();
    let pgw2_rejected = tot("pgw2", "gx_ccr_i", "marked") + tot("pgw2", "gx_ccr_i", "dropped");
    let pgw2_3002 = o.last.sum(
        "dra_answers_total",
        &[("peer", "pgw2"), ("result_code", "3002")],
    );
    let pgw2_throttle_max = o.last.sum("dra_throttle_percent", &[("peer", "pgw2")]);
    let violations = o.last.sum("dra_unanswered_invariant_violations_total", &[]);
    let ocs_answers = o
        .last
        .sum("dra_answer_latency_seconds_count", &[("peer", "ocs1")]);
    let _ = writeln!(
        s,
        "\npeak DB CPU {peak_cpu:.2} %, peak pgw1 throttle {peak_throttle:.0} %"
    );
    let _ = writeln!(
        s,
        "throttle engaged at t = {} s, back to 0 at t = {} s; final throttle {final_throttle:.0} %",
        engaged_at.map_or("-".into(), |t| format!("{t:.0}")),
        released_at.map_or("-".into(), |t| format!("{t:.0}"))
    );
    let checks = [
        (
            "pgw2's static CCR-I limit rejected requests (fast path marked)",
            pgw2_rejected > 0.0,
        ),
        ("the agent answered pgw2 with 3002", pgw2_3002 > 0.0),
        (
            "DB CPU reached the lowest threshold of the profile",
            peak_cpu >= profile.lowest(),
        ),
        ("dynamic throttling of pgw1 engaged", peak_throttle > 0.0),
        (
            "pgw1 requests were rejected while throttled",
            pgw1_throttled_rejects > 0.0,
        ),
        (
            "reversal stepped the throttle back to 0 before the end",
            final_throttle == 0.0 && peak_throttle > 0.0,
        ),
        (
            "pgw2 was never throttled dynamically",
            pgw2_throttle_max == 0.0,
        ),
        (
            "Gy traffic was relayed to ocs1 and answered",
            ocs_answers > 0.0,
        ),
        (
            "every request was answered (no timeouts, none unanswered)",
            lost == 0 && violations == 0.0,
        ),
    ];
    let _ = writeln!(s, "\nstory checks:");
    let mut all = true;
    for (what, ok) in checks {
        all &= ok;
        let _ = writeln!(s, "  [{}] {what}", if ok { "PASS" } else { "FAIL" });
    }
    print!("{s}");
    std::fs::write(out.join("summary.txt"), &s)?;
    write_csv(&o.rows, &out.join("timeseries.csv"))?;
    let png = out.join("demo.png");
    match plot(&o.rows, profile, &png) {
        Ok(()) => println!("plot: {}", png.display()),
        Err(e) => {
            eprintln!("xtask: plot failed: {e:#}");
            all = false;
        }
    }
    Ok(all)
}

fn get(r: &Row, peer: &str, class: &str, i: usize) -> f64 {
    r.peers
        .get(peer)
        .and_then(|m| m.get(class))
        .map_or(0.0, |x| x[i])
}

fn write_csv(rows: &[Row], path: &PathBuf) -> Result<()> {
    let mut s = String::from(
        "t_s,phase,db_cpu_percent,pgw1_throttle_percent,pgw1_ccr_i_effective_rate,\
         pgw1_offered,pgw1_admitted,pgw1_rejected,pgw2_offered,pgw2_admitted,pgw2_rejected,\
         pcrf1_answers,pcrf1_latency_ms,pcrf2_answers,pcrf2_latency_ms\n",
    );
    for r in rows {
        let up = |p: &str| r.upstream.get(p).copied().unwrap_or((0.0, f64::NAN));
        let _ = writeln!(
            s,
            "{:.1},{},{:.2},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},\
             {:.3},{:.0},{:.3}",
            r.t,
            r.phase,
            r.cpu,
            r.throttle,
            r.eff_rate,
            get(r, "pgw1", "all", 0),
            get(r, "pgw1", "all", 1),
            get(r, "pgw1", "all", 2),
            get(r, "pgw2", "all", 0),
            get(r, "pgw2", "all", 1),
            get(r, "pgw2", "all", 2),
            up("pcrf1").0,
            up("pcrf1").1,
            up("pcrf2").0,
            up("pcrf2").1
        );
    }
    std::fs::write(path, s).with_context(|| format!("write {}", path.display()))
}

fn plot(rows: &[Row], profile: &Profile, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow::anyhow!("the embedded font could not be registered"))?;
    let t_max = rows.last().map_or(1.0, |r| r.t).max(1.0);
    let root = BitMapBackend::new(path, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((3, 1));
    let e = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    // 1. Rates.
    let r_max = rows
        .iter()
        .flat_map(|r| [get(r, "pgw1", "all", 0), get(r, "pgw2", "all", 0)])
        .fold(10.0, f64::max)
        * 1.1;
    let mut c = ChartBuilder::on(&panels[0])
        .caption(
            "requests/s at the fast path (Gx, all classes)",
            ("sans-serif", 18),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..r_max)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc("t (s)")
        .y_desc("msgs/s")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    let lines: [(&str, &str, usize, RGBColor); 6] = [
        ("pgw1 offered", "pgw1", 0, RGBColor(31, 119, 180)),
        ("pgw1 admitted", "pgw1", 1, RGBColor(44, 160, 44)),
        ("pgw1 rejected (throttle)", "pgw1", 2, RGBColor(214, 39, 40)),
        ("pgw2 offered", "pgw2", 0, RGBColor(148, 103, 189)),
        ("pgw2 admitted", "pgw2", 1, RGBColor(140, 86, 75)),
        (
            "pgw2 rejected (static 3002)",
            "pgw2",
            2,
            RGBColor(255, 127, 14),
        ),
    ];
    for (label, peer, i, col) in lines {
        c.draw_series(LineSeries::new(
            rows.iter().map(|r| (r.t, get(r, peer, "all", i))),
            col.stroke_width(2),
        ))
        .map_err(|x| e(&x))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    // 2. Throttle.
    let mut c = ChartBuilder::on(&panels[1])
        .caption(
            format!(
                "pgw1 dynamic throttle % (reversal hold {}, step {} %)",
                profile.hold, profile.step
            ),
            ("sans-serif", 18),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..100.0)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc("t (s)")
        .y_desc("throttle %")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    c.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.t, r.throttle)),
        RED.stroke_width(2),
    ))
    .map_err(|x| e(&x))?;
    // 3. CPU with the thresholds.
    let cpu_max = rows.iter().map(|r| r.cpu).fold(
        profile.thresholds.iter().map(|t| t.0).fold(0.0, f64::max),
        f64::max,
    ) * 1.2;
    let mut c = ChartBuilder::on(&panels[2])
        .caption(
            format!(
                "Redis CPU % of one core (demo thresholds {})",
                profile.describe()
            ),
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..cpu_max.max(1.0))
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc("t (s)")
        .y_desc("CPU %")
        .y_label_formatter(&|v| format!("{v:.1}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    for (cpu, _) in &profile.thresholds {
        c.draw_series(LineSeries::new(
            [(0.0, *cpu), (t_max, *cpu)],
            RGBColor(180, 180, 180),
        ))
        .map_err(|x| e(&x))?;
    }
    c.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.t, r.cpu)),
        BLUE.stroke_width(2),
    ))
    .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{parse_metrics, tests::EXPOSITION};

    #[test]
    fn per_second_rates_come_from_counter_deltas() {
        let a = Snap {
            series: parse_metrics(EXPOSITION),
        };
        let b = Snap {
            series: parse_metrics(
                &EXPOSITION
                    .replace("} 900", "} 1800")
                    .replace("} 300", "} 500"),
            ),
        };
        let row = rates(&a, &b, 2.0, 10.0, "storm");
        assert_eq!(row.peers["pgw1"]["gx_ccr_i"], [450.0, 0.0, 100.0]);
        assert_eq!(row.throttle, 40.0);
    }

    #[test]
    fn the_lab_config_keeps_the_seed_apart_from_the_documented_keys() {
        let root = crate::workspace_root();
        let lab = read_profile(&root.join(LAB_CONFIG)).unwrap();
        let seed = read_profile(&root.join("config/dra.toml")).unwrap();
        assert_eq!(lab.hold, "10s");
        assert_eq!(lab.step, seed.step);
        let throttles = |p: &Profile| p.thresholds.iter().map(|t| t.1).collect::<Vec<_>>();
        assert_eq!(
            throttles(&lab),
            throttles(&seed),
            "the demo profile keeps the seed's throttle column"
        );
    }
}
