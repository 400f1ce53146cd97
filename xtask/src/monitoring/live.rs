//! The live test of the monitoring kit (a privileged step of `cargo xtask test`): the
//! demo's lab, agent and gateways with a shortened storm, and the lab's Prometheus
//! scraping the agent with the shipped rules (alerts' `for:` in seconds: see
//! [`super::rules::with_shorter_for`]). It passes when
//!
//! - every rule Prometheus loaded evaluates without error;
//! - every recording rule and every dashboard query (its variables resolved through
//!   Prometheus as Grafana would) returns data over the run;
//! - DRAThrottleActive fired for pgw1 during the storm and resolved after it, once the
//!   throttle was back at 0;
//! - DRAFastPathDetached stayed quiet, then fired once `dra detach` removed the XDP
//!   program under the running agent;
//! - DRAAgentNotReady stayed quiet (the agent is ready before Prometheus starts);
//! - the overload control's shed counters exist (the control is on, as by default), so
//!   that its panels and recording rule have data whether or not the storm makes the
//!   agent shed; what it did (level, delay, requests shed) is printed.
//!
//! The agent runs the demo's config with one addition, a Redis session store (the lab's
//! Redis), so that the dashboard's store panels have something to show. The gateways
//! play the demo's scenarios with shorter phases ([`PHASES`]) and are stopped once the
//! alert has resolved. Every failing panel, rule or alert is named.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{
    ALERTS, DASHBOARD, MONITORING_DIR, RULES, dashboard, describe_spans,
    prometheus::{Prometheus, unix_now},
    rules::RuleFile,
};
use crate::{
    agent_run::{ClientFiles, LAB, gateway_client},
    demo,
    lab::{self, Bins, DRA_CLIENT_IF, NS_GW},
    procs::{self, Proc},
};

/// The demo's phases, shortened: (name, seconds). The storm is long enough for the DB
/// CPU to rise and the throttle to engage; the cool-down for the reversal (10 s hold,
/// 20 points a step) to bring the throttle from 50 % back to 0. The gateways are stopped
/// as soon as the alert has resolved.
const PHASES: [(&str, u64); 3] = [("steady", 5), ("storm", 20), ("cool-down", 60)];

/// The alert the test watches, for pgw1.
const THROTTLE_ALERT: &str = "DRAThrottleActive";
/// The alert that must stay quiet during the run and fire once `dra detach` has removed
/// the fast path under the agent.
const DETACHED_ALERT: &str = "DRAFastPathDetached";
/// An alert that must stay quiet: the agent is ready before Prometheus starts.
const NOT_READY_ALERT: &str = "DRAAgentNotReady";

/// The demo's gateway scenario at `path` with its phases' durations set to [`PHASES`].
fn shortened_scenario(path: &Path) -> Result<String> {
    let mut v: toml::Value = toml::from_str(&std::fs::read_to_string(path)?)
        .with_context(|| format!("{}", path.display()))?;
    let phases = v
        .get_mut("phase")
        .and_then(|p| p.as_array_mut())
        .with_context(|| format!("{}: no [[phase]]", path.display()))?;
    let names: Vec<String> = phases
        .iter()
        .filter_map(|p| p.get("name")?.as_str().map(str::to_owned))
        .collect();
    let want: Vec<&str> = PHASES.iter().map(|p| p.0).collect();
    if names != want {
        bail!(
            "{}: phases {names:?}, the test expects {want:?}",
            path.display()
        );
    }
    for (p, (_, secs)) in phases.iter_mut().zip(PHASES) {
        p.as_table_mut()
            .context("a phase is a table")?
            .insert("duration_s".into(), toml::Value::Integer(secs as i64));
    }
    Ok(toml::to_string(&v)?)
}

/// The demo's lab config with the lab's Redis as session store. Its overload control
/// must be on (no `[overload]`, or not `enabled = false`): the dashboard's overload panels
/// read its shed counters, which exist only then.
fn agent_config(root: &Path) -> Result<String> {
    let cfg = std::fs::read_to_string(root.join(demo::LAB_CONFIG))?;
    if cfg.contains("[session_store]") {
        bail!("{} has a [session_store] already", demo::LAB_CONFIG);
    }
    let v: toml::Value = toml::from_str(&cfg).with_context(|| demo::LAB_CONFIG.to_owned())?;
    let overload_on = v
        .get("overload")
        .and_then(|o| o.get("enabled"))
        .is_none_or(|e| e.as_bool() != Some(false));
    if !overload_on {
        bail!(
            "{} turns the overload control off ([overload] enabled = false): the \
             dashboard's overload panels would have no data",
            demo::LAB_CONFIG
        );
    }
    Ok(format!(
        "{cfg}\n# Added by the monitoring live test: the dashboard's store panels.\n\
         [session_store]\nkind = \"redis\"\naddresses = [\"127.0.0.1:6379\"]\n"
    ))
}

/// The privileged step: lab up, the run, lab down (also on failure).
pub(crate) fn test(root: &Path, bins: &Bins) -> Result<()> {
    let what = "monitoring live test: a short storm on the lab, a real Prometheus scraping \
                the agent with the shipped rules";
    eprintln!("xtask: {what}");
    let from = Instant::now();
    procs::install_signal_handlers();
    let out = root.join("target/monitoring-live");
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(&out)?;
    let leftovers = lab::down();
    if !leftovers.is_empty() {
        eprintln!("xtask: removed a previous lab: {}", leftovers.join(", "));
    }
    lab::run_on_lab(bins, &out, || {
        let result = run(root, bins, &out);
        // Its log, before the lab's state dir goes (also after a failure).
        let _ = std::fs::copy(lab::log_file("prometheus"), out.join("prometheus.log"));
        result
    })
    .with_context(|| format!("{what} (logs in {})", out.display()))?;
    eprintln!(
        "xtask: monitoring live test: done in {} s",
        from.elapsed().as_secs()
    );
    Ok(())
}

/// What the poll loop saw of the throttle alert.
#[derive(Default)]
struct Watch {
    fired_at: Option<f64>,
    resolved_at: Option<f64>,
}

fn run(root: &Path, bins: &Bins, out: &Path) -> Result<()> {
    let config = out.join("dra-monitoring.toml");
    std::fs::write(&config, agent_config(root)?)?;
    let mut dra_cmd = LAB.agent_command(lab::command_in(lab::NS_DRA, &bins.dra)?, &config, "info");
    dra_cmd.args(["--iface", DRA_CLIENT_IF]);
    let dra_log = out.join("dra.log");
    let mut dra = LAB.spawn(&dra_log, "dra run", "dra", &mut dra_cmd)?;
    LAB.wait_ready(
        &mut dra,
        &dra_log,
        "upstreams open, Redis CPU source and session store up",
        |s| {
            LAB.upstreams_open(s)
                && s.sum("dra_db_cpu_source_up", &[]).is_ok_and(|v| v == 1.0)
                && s.sum("dra_session_store_up", &[]).is_ok_and(|v| v == 1.0)
        },
    )?;
    let mut prom = Prometheus::start(root)?;
    eprintln!(
        "xtask: prometheus ready in {} ({}); waiting for its first scrape of the agent",
        lab::NS_DRA,
        prom.dir.display()
    );
    prom.wait_for(
        r#"dra_fastpath_state{state="attached"} == 1"#,
        Duration::from_secs(20),
    )?;

    let mut clients = Vec::new();
    for (peer, src, scenario) in demo::GATEWAYS {
        let short = out.join(format!("{peer}-scenario.toml"));
        std::fs::write(&short, shortened_scenario(&root.join(scenario))?)?;
        let mut c = lab::command_in(NS_GW, &bins.loadgen)?;
        gateway_client(&mut c, peer, src, &short, &ClientFiles::new(out, peer));
        clients.push(LAB.spawn(&out.join(format!("{peer}.log")), peer, peer, &mut c)?);
    }
    let t0 = unix_now();
    let storm_from = t0 + PHASES[0].1 as f64;
    let storm_to = storm_from + PHASES[1].1 as f64;
    let all_phases: u64 = PHASES.iter().map(|p| p.1).sum();
    let deadline = Instant::now() + Duration::from_secs(all_phases + 15);
    eprintln!(
        "xtask: pgw1 and pgw2 started: steady {} s, storm {} s, cool-down up to {} s",
        PHASES[0].1, PHASES[1].1, PHASES[2].1
    );
    let w = watch(&prom, &mut dra, &mut clients, t0, storm_to, deadline);
    for c in &mut clients {
        c.stop(Duration::from_secs(5));
    }
    let w = w?;
    let end = unix_now();
    let mut failures = Vec::new();
    check_rules(root, &prom, &mut failures)?;
    check_records(root, &prom, end, &mut failures)?;
    check_dashboard(root, &prom, end, &mut failures)?;
    let spans = prom.alert_spans(prom.started, end, 1.0)?;
    println!(
        "\nalerts that fired (t from the gateways' start; storm {} s to {} s):",
        PHASES[0].1,
        PHASES[0].1 + PHASES[1].1
    );
    for l in describe_spans(&spans, t0) {
        println!("  {l}");
    }
    let throttle = spans.iter().find(|s| {
        s.alert == THROTTLE_ALERT
            && s.labels == "{peer=\"pgw1\",severity=\"warning\"}"
            && (storm_from..=storm_to).contains(&s.fired)
    });
    match throttle {
        Some(s) if s.resolved.is_some_and(|r| r > storm_to) => {}
        Some(_) => failures.push(format!(
            "{THROTTLE_ALERT} for pgw1 fired in the storm but did not resolve after it"
        )),
        None => failures.push(format!(
            "{THROTTLE_ALERT} for pgw1 did not fire during the storm (t = {} s to {} s; the \
             poll saw it fire at {:?} s and resolve at {:?} s)",
            PHASES[0].1,
            PHASES[0].1 + PHASES[1].1,
            w.fired_at.map(|t| (t - t0).round()),
            w.resolved_at.map(|t| (t - t0).round())
        )),
    }
    if let Some(s) = spans.iter().find(|s| s.alert == DETACHED_ALERT) {
        failures.push(format!("{DETACHED_ALERT} fired with XDP attached: {s:?}"));
    }
    if let Some(s) = spans.iter().find(|s| s.alert == NOT_READY_ALERT) {
        failures.push(format!(
            "{NOT_READY_ALERT} fired for an agent ready before Prometheus started: {s:?}"
        ));
    }
    match overload_summary(&prom, end) {
        Ok(l) => println!("  {l}"),
        Err(e) => failures.push(format!("the overload control's metrics: {e:#}")),
    }
    // The fast path removed under the running agent: dra_fastpath_state says so.
    let mut detach = lab::command_in(lab::NS_DRA, &bins.dra)?;
    detach.args([
        "detach",
        "--iface",
        DRA_CLIENT_IF,
        "--pin-dir",
        lab::PIN_DIR,
    ]);
    netlab::output(&mut detach)?;
    let detached_at = unix_now();
    let firing = format!(r#"ALERTS{{alertname="{DETACHED_ALERT}",alertstate="firing"}}"#);
    match prom.wait_for(&firing, Duration::from_secs(15)) {
        Ok(()) => println!(
            "  {DETACHED_ALERT} fired {:.0} s after dra detach removed XDP under the agent",
            unix_now() - detached_at
        ),
        Err(e) => failures.push(format!("after dra detach: {e:#}")),
    }
    drop(prom);
    let st = dra.stop(Duration::from_secs(10));
    if !st.is_some_and(|s| s.success()) {
        failures.push(format!(
            "dra run did not exit cleanly on SIGINT ({st:?}); log {}",
            dra_log.display()
        ));
    }
    if !failures.is_empty() {
        bail!("{} failures:\n  {}", failures.len(), failures.join("\n  "));
    }
    println!(
        "monitoring live test: {} recording rules and {} dashboard queries returned data; \
         {THROTTLE_ALERT} fired and resolved, {DETACHED_ALERT} fired after dra detach",
        RuleFile::load(&root.join(MONITORING_DIR).join(RULES))?
            .records()
            .len(),
        dashboard::Dashboard::parse(&std::fs::read_to_string(root.join(DASHBOARD))?)?
            .queries()?
            .len()
    );
    Ok(())
}

/// What the overload control did over the run (from Prometheus' start to `end`): its
/// highest level and delay, and the requests it shed by action. Fails when its shed
/// counters are missing (the control off).
fn overload_summary(prom: &Prometheus, end: f64) -> Result<String> {
    let range = format!("{}s", (end - prom.started).ceil().max(1.0));
    let value = |expr: &str| -> Result<Option<f64>> {
        Ok(prom
            .query(expr)?
            .first()
            .and_then(|s| s.value.1.parse::<f64>().ok()))
    };
    let shed = prom.query(&format!(
        "sum by (action) (increase(dra_overload_shed_total[{range}]))"
    ))?;
    if shed.is_empty() {
        bail!(
            "no dra_overload_shed_total series over the run: the agent exports them while its \
             overload control is on (the default)"
        );
    }
    let by_action = |a: &str| {
        shed.iter()
            .find(|s| s.metric.get("action").is_some_and(|x| x == a))
            .and_then(|s| s.value.1.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let level = value(&format!("max(max_over_time(dra_overload_level[{range}]))"))?;
    let delay = value(&format!(
        "max(max_over_time(dra_overload_delay_seconds[{range}]))"
    ))?;
    let show =
        |v: Option<f64>, scale: f64| v.map_or("-".to_owned(), |v| format!("{:.0}", v * scale));
    Ok(format!(
        "overload control over the run: level up to {}, delay up to {} ms, shed about {:.0} \
         answered 3004 and {:.0} discarded",
        show(level, 1.0),
        show(delay, 1e3),
        by_action("answer"),
        by_action("discard")
    ))
}

/// Polls Prometheus each second until the throttle alert for pgw1 has fired and then
/// resolved after the storm (the throttle back at 0), saying what it sees every 5 s.
fn watch(
    prom: &Prometheus,
    dra: &mut Proc,
    clients: &mut [Proc],
    t0: f64,
    storm_to: f64,
    deadline: Instant,
) -> Result<Watch> {
    let firing =
        format!(r#"ALERTS{{alertname="{THROTTLE_ALERT}",alertstate="firing",peer="pgw1"}}"#);
    let mut w = Watch::default();
    let mut next_line = 0.0;
    loop {
        procs::interrupted()?;
        if let Some(st) = dra.exited() {
            bail!("dra run exited during the run ({st})");
        }
        for c in clients.iter_mut() {
            if let Some(st) = c.exited() {
                bail!("a gateway exited before the alert resolved ({st})");
            }
        }
        let now = unix_now();
        let on = !prom.query(&firing)?.is_empty();
        let throttle = prom
            .query(r#"dra_throttle_percent{peer="pgw1"}"#)?
            .first()
            .and_then(|s| s.value.1.parse::<f64>().ok());
        if on && w.fired_at.is_none() {
            w.fired_at = Some(now);
            eprintln!(
                "xtask: t = {:.0} s: {THROTTLE_ALERT} firing for pgw1",
                now - t0
            );
        }
        if !on && w.fired_at.is_some() && now > storm_to && throttle == Some(0.0) {
            w.resolved_at = Some(now);
            eprintln!(
                "xtask: t = {:.0} s: {THROTTLE_ALERT} resolved for pgw1",
                now - t0
            );
            // One more evaluation, so that the range queries see the resolution.
            std::thread::sleep(Duration::from_secs(2));
            return Ok(w);
        }
        if now - t0 >= next_line {
            let cpu = prom
                .query("dra_db_cpu_percent")?
                .first()
                .map_or("-".into(), |s| s.value.1.clone());
            let alerts: Vec<String> = prom
                .query(r#"ALERTS{alertstate="firing"}"#)?
                .iter()
                .map(|s| s.metric.get("alertname").cloned().unwrap_or_default())
                .collect();
            let overload = prom
                .query("dra_overload_level")?
                .first()
                .map_or("-".into(), |s| s.value.1.clone());
            eprintln!(
                "xtask: t = {:.0} s: pgw1 throttle {} %, DB CPU {cpu} %, overload level \
                 {overload}, firing: {alerts:?}",
                now - t0,
                throttle.map_or("-".into(), |t| t.to_string())
            );
            next_line += 5.0;
        }
        if Instant::now() > deadline {
            bail!(
                "{THROTTLE_ALERT} for pgw1 did not fire and resolve in time (fired at {:?} s, \
                 pgw1 throttle now {throttle:?} %)",
                w.fired_at.map(|t| (t - t0).round())
            );
        }
        std::thread::sleep(Duration::from_millis(1000));
    }
}

/// Every loaded rule evaluated without error (a join that matches many-to-many, a bad
/// template, ...).
fn check_rules(root: &Path, prom: &Prometheus, failures: &mut Vec<String>) -> Result<()> {
    let loaded = prom.rules()?;
    let kit = root.join(MONITORING_DIR);
    let want = RuleFile::load(&kit.join(ALERTS))?.alerts().count()
        + RuleFile::load(&kit.join(RULES))?.records().len();
    if loaded.len() != want {
        failures.push(format!(
            "prometheus loaded {} rules, the kit has {want}",
            loaded.len()
        ));
    }
    for r in loaded.iter().filter(|r| r.health != "ok") {
        failures.push(format!(
            "{} rule {}: health {} ({})",
            r.kind, r.name, r.health, r.last_error
        ));
    }
    Ok(())
}

/// Whether `expr` returned data (a number) over the run; else a failure naming `place`.
fn returns_data(prom: &Prometheus, place: &str, expr: &str, end: f64, failures: &mut Vec<String>) {
    match prom.query_range(expr, prom.started, end, 1.0) {
        Ok(r) if r.iter().any(|s| s.has_number()) => {}
        Ok(r) => failures.push(format!(
            "{place}: no data over the run ({} series, none with a number): {expr}",
            r.len()
        )),
        Err(e) => failures.push(format!("{place}: {e:#}: {expr}")),
    }
}

/// Every recording rule returned data.
fn check_records(
    root: &Path,
    prom: &Prometheus,
    end: f64,
    failures: &mut Vec<String>,
) -> Result<()> {
    let f = RuleFile::load(&root.join(MONITORING_DIR).join(RULES))?;
    for r in f.records() {
        returns_data(prom, &format!("recording rule {r}"), r, end, failures);
    }
    Ok(())
}

/// The dashboard's variables resolved as Grafana resolves them (each `label_values`
/// through Prometheus, in order, the first value taken), then every query returned data.
fn check_dashboard(
    root: &Path,
    prom: &Prometheus,
    end: f64,
    failures: &mut Vec<String>,
) -> Result<()> {
    let d = dashboard::Dashboard::parse(&std::fs::read_to_string(root.join(DASHBOARD))?)?;
    let mut values = BTreeMap::new();
    for v in d.variables().into_iter().filter(|v| v.kind == "query") {
        let q = dashboard::substitute(&v.query, &values)?;
        let (selector, label) = dashboard::label_values_query(&q)?;
        let mut found = prom.label_values(&label, &selector)?;
        found.sort();
        let Some(first) = found.into_iter().next() else {
            bail!("dashboard variable ${}: {q} returned no value", v.name);
        };
        eprintln!("xtask: dashboard variable ${} = {first:?} ({q})", v.name);
        values.insert(v.name, first);
    }
    for q in d.queries()? {
        let expr = dashboard::substitute(&q.expr, &values)?;
        returns_data(
            prom,
            &format!("dashboard {}", q.place),
            &expr,
            end,
            failures,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_scenarios_shorten_to_the_test_phases_and_the_config_gets_a_store() {
        let root = crate::workspace_root();
        for (_, _, scenario) in demo::GATEWAYS {
            let text = shortened_scenario(&root.join(scenario)).unwrap();
            let v: toml::Value = toml::from_str(&text).unwrap();
            let secs: Vec<i64> = v["phase"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["duration_s"].as_integer().unwrap())
                .collect();
            assert_eq!(secs, [5, 20, 60]);
            // Rates unchanged.
            let orig: toml::Value =
                toml::from_str(&std::fs::read_to_string(root.join(scenario)).unwrap()).unwrap();
            assert_eq!(v["phase"][1]["rates"], orig["phase"][1]["rates"]);
        }
        let cfg = agent_config(&root).unwrap();
        assert!(
            cfg.ends_with("[session_store]\nkind = \"redis\"\naddresses = [\"127.0.0.1:6379\"]\n")
        );
    }
}
