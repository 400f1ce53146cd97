//! The monitoring kit the package ships (packaging/monitoring/: alert and recording
//! rules, their promtool unit tests, a Grafana dashboard) and its checks:
//!
//! - [`check`], a step of `cargo xtask test` that needs no root: `promtool check rules`,
//!   `promtool test rules` (each alert fires on its condition, stays quiet on a healthy
//!   series), the dashboard's static checks ([`dashboard::Dashboard::check`]) and every
//!   dashboard query through Prometheus' own parser, and each alert's runbook in
//!   docs/operations.md;
//! - [`live::test`], a privileged step: a short storm on the lab with a real Prometheus
//!   ([`prometheus`]) scraping the agent, every dashboard query and recording rule
//!   returning data, the throttle alert firing in the storm and resolving after it.
//!
//! The lab's Prometheus (`lab up --monitoring`, `demo --monitoring`, the live test) loads
//! the shipped files, the alerts with their `for:` in seconds instead of minutes
//! ([`rules::with_shorter_for`]).

pub(crate) mod dashboard;
pub(crate) mod live;
pub(crate) mod prometheus;
pub(crate) mod rules;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail, ensure};

use dashboard::Dashboard;
use rules::RuleFile;

/// The kit in the source tree (installed under /usr/share/dra/monitoring/).
pub(crate) const MONITORING_DIR: &str = "packaging/monitoring";
/// The alert rules, in [`MONITORING_DIR`].
pub(crate) const ALERTS: &str = "dra-alerts.yml";
/// The recording rules, in [`MONITORING_DIR`].
pub(crate) const RULES: &str = "dra-rules.yml";
/// The Grafana dashboard, from the workspace root.
pub(crate) const DASHBOARD: &str = "packaging/monitoring/dra-dashboard.json";
/// The promtool unit tests, in [`MONITORING_DIR`].
const TESTS_DIR: &str = "tests";
/// Where the package installs the kit, and which of its files.
pub(crate) const INSTALL_DIR: &str = "usr/share/dra/monitoring";
pub(crate) const FILES: &[&str] = &[
    ALERTS,
    RULES,
    "dra-dashboard.json",
    "tests/dra-alerts.test.yml",
    "tests/dra-rules.test.yml",
];

/// The promtool unit test files, sorted.
fn test_files(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join(MONITORING_DIR).join(TESTS_DIR);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    v.sort();
    ensure!(!v.is_empty(), "no promtool tests in {}", dir.display());
    Ok(v)
}

/// `promtool ARGS`, its output printed; an error with the output when it fails.
fn promtool(what: &str, args: &[&std::ffi::OsStr], dir: &Path) -> Result<String> {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .context("promtool (Debian package prometheus: cargo xtask setup installs it)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    Ok(text)
}

/// The `cargo xtask test` step for the kit (no root needed).
pub(crate) fn check(root: &Path) -> Result<()> {
    let what = "monitoring: promtool check rules + test rules, the dashboard's queries, \
                the runbooks in docs/operations.md";
    eprintln!("xtask: {what}");
    let from = std::time::Instant::now();
    let dir = root.join(MONITORING_DIR);
    let files = [dir.join(RULES), dir.join(ALERTS)];
    let mut args: Vec<&std::ffi::OsStr> = vec!["check".as_ref(), "rules".as_ref()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    eprint!("{}", promtool("promtool check rules", &args, &dir)?);
    let tests = test_files(root)?;
    let mut args: Vec<&std::ffi::OsStr> = vec!["test".as_ref(), "rules".as_ref()];
    args.extend(tests.iter().map(|f| f.as_os_str()));
    eprint!("{}", promtool("promtool test rules", &args, &dir)?);
    let n = check_dashboard_parses(root)?;
    let alerts = check_runbooks(root)?;
    check_every_alert_tested(root, &tests)?;
    eprintln!(
        "xtask: monitoring: {alerts} alerts (each with a promtool test and its runbook in \
         docs/operations.md), {} recording rules, {n} dashboard queries parsed: done in {} s",
        RuleFile::load(&dir.join(RULES))?.records().len(),
        from.elapsed().as_secs()
    );
    Ok(())
}

/// The dashboard's static checks, then each of its queries (variables given sample
/// values) through `promtool check rules` as a recording rule: Prometheus' own parser.
/// Returns how many queries it parsed.
fn check_dashboard_parses(root: &Path) -> Result<usize> {
    let d = Dashboard::parse(&std::fs::read_to_string(root.join(DASHBOARD))?)?;
    d.check().context(DASHBOARD)?;
    let values = std::collections::BTreeMap::from([
        ("job".to_owned(), "dra".to_owned()),
        ("instance".to_owned(), "dra1:9100".to_owned()),
    ]);
    let queries = d.queries()?;
    let work = root.join("target/monitoring-check");
    std::fs::create_dir_all(&work)?;
    let mut exprs = Vec::new();
    for q in &queries {
        exprs.push(dashboard::substitute(&q.expr, &values).context(q.place.clone())?);
    }
    // JSON is YAML: promtool reads these files as rule files.
    let rule_file = |exprs: &[&String]| {
        let rules: Vec<serde_json::Value> = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": e}))
            .collect();
        serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}).to_string()
    };
    let check_file = |name: &str, text: String| -> Result<()> {
        let file = work.join(name);
        std::fs::write(&file, text)?;
        let args = ["check".as_ref(), "rules".as_ref(), file.as_os_str()];
        promtool("promtool check rules", &args, &work).map(|_| ())
    };
    let all: Vec<&String> = exprs.iter().collect();
    if check_file("queries.yml", rule_file(&all)).is_err() {
        // Which ones: each alone.
        let mut failed = Vec::new();
        for (q, e) in queries.iter().zip(&exprs) {
            if let Err(err) = check_file("query.yml", rule_file(&[e])) {
                failed.push(format!("{}: {}\n  {err:#}", q.place, q.expr));
            }
        }
        bail!(
            "dashboard queries that do not parse:\n{}",
            failed.join("\n")
        );
    }
    std::fs::remove_dir_all(&work)?;
    Ok(queries.len())
}

/// Each alert's `runbook` annotation appears in docs/operations.md under its name (both
/// with whitespace folded). Returns how many alerts there are.
fn check_runbooks(root: &Path) -> Result<usize> {
    let fold = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let docs = fold(&std::fs::read_to_string(root.join("docs/operations.md"))?);
    let alerts = RuleFile::load(&root.join(MONITORING_DIR).join(ALERTS))?;
    let mut missing = Vec::new();
    let mut n = 0;
    for a in alerts.alerts() {
        n += 1;
        let name = a.alert.as_deref().unwrap_or("");
        let runbook = a.annotations.get("runbook").map(|r| fold(r));
        let Some(runbook) = runbook else {
            missing.push(format!("{name}: no runbook annotation"));
            continue;
        };
        let documented = docs
            .find(&format!("`{name}`"))
            .is_some_and(|at| docs[at..].contains(&runbook));
        if !documented {
            missing.push(format!(
                "{name}: its runbook is not in docs/operations.md:\n  {runbook}"
            ));
        }
    }
    if !missing.is_empty() {
        bail!(
            "alerts whose runbook docs/operations.md does not repeat (under `NAME`):\n{}",
            missing.join("\n")
        );
    }
    Ok(n)
}

/// The parts of a promtool test file this check reads.
#[derive(serde::Deserialize)]
struct TestFile {
    tests: Vec<TestGroup>,
}

#[derive(serde::Deserialize)]
struct TestGroup {
    #[serde(default)]
    alert_rule_test: Vec<AlertTest>,
}

#[derive(serde::Deserialize)]
struct AlertTest {
    alertname: String,
    #[serde(default)]
    exp_alerts: Vec<serde_yaml_ng::Value>,
}

/// Every alert of the kit has, among the promtool tests `files`, an evaluation where it
/// fires and one where it stays quiet.
fn check_every_alert_tested(root: &Path, files: &[PathBuf]) -> Result<()> {
    let mut fires = std::collections::BTreeSet::new();
    let mut quiet = std::collections::BTreeSet::new();
    for f in files {
        let t: TestFile = serde_yaml_ng::from_str(&std::fs::read_to_string(f)?)
            .with_context(|| format!("{}: not a promtool test file", f.display()))?;
        for a in t.tests.iter().flat_map(|g| &g.alert_rule_test) {
            if a.exp_alerts.is_empty() {
                quiet.insert(a.alertname.clone());
            } else {
                fires.insert(a.alertname.clone());
            }
        }
    }
    let alerts = RuleFile::load(&root.join(MONITORING_DIR).join(ALERTS))?;
    let mut untested = Vec::new();
    for name in alerts.alerts().filter_map(|a| a.alert.as_deref()) {
        if !fires.contains(name) {
            untested.push(format!("{name}: no test where it fires"));
        }
        if !quiet.contains(name) {
            untested.push(format!("{name}: no test where it stays quiet"));
        }
    }
    if !untested.is_empty() {
        bail!(
            "alerts without their promtool tests:\n  {}",
            untested.join("\n  ")
        );
    }
    Ok(())
}

/// Hours, minutes and seconds of Unix time `t`, UTC.
pub(crate) fn utc_clock(t: f64) -> String {
    let s = t.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// One line per alert stretch: fired and resolved as seconds from `t0` (Unix time) and
/// UTC clock time.
pub(crate) fn describe_spans(spans: &[prometheus::AlertSpan], t0: f64) -> Vec<String> {
    spans
        .iter()
        .map(|s| {
            let resolved = match s.resolved {
                Some(r) => format!("resolved at t = {:.0} s ({})", r - t0, utc_clock(r)),
                None => "still firing at the end".to_owned(),
            };
            format!(
                "{}{} fired at t = {:.0} s ({}), {resolved}",
                s.alert,
                s.labels,
                s.fired - t0,
                utc_clock(s.fired)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_alert_has_a_runbook_that_the_docs_repeat() {
        let root = crate::workspace_root();
        assert!(check_runbooks(&root).unwrap() >= 10);
        let alerts = RuleFile::load(&root.join(MONITORING_DIR).join(ALERTS)).unwrap();
        for a in alerts.alerts() {
            let name = a.alert.as_deref().unwrap();
            assert!(name.starts_with("DRA"), "{name}");
            let severity = a.labels.get("severity").map(String::as_str);
            assert!(matches!(severity, Some("warning" | "critical")), "{name}");
            for k in ["summary", "description", "runbook"] {
                assert!(a.annotations.contains_key(k), "{name}: no {k}");
            }
        }
    }

    #[test]
    fn every_shipped_alert_has_a_test_where_it_fires_and_one_where_it_is_quiet() {
        let root = crate::workspace_root();
        check_every_alert_tested(&root, &test_files(&root).unwrap()).unwrap();
        let e = format!("{:#}", check_every_alert_tested(&root, &[]).unwrap_err());
        assert!(
            e.contains("DRAThrottleActive: no test where it fires"),
            "{e}"
        );
    }

    #[test]
    fn the_lab_copy_of_the_shipped_alerts_fires_in_seconds() {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join(MONITORING_DIR).join(ALERTS)).unwrap();
        let short = rules::with_shorter_for(&text, rules::LAB_FOR_DIVISOR).unwrap();
        let f = RuleFile::parse(&short, "copy").unwrap();
        let throttle = f
            .alerts()
            .find(|a| a.alert.as_deref() == Some("DRAThrottleActive"))
            .unwrap();
        assert_eq!(throttle.for_.as_deref(), Some("1s"));
    }

    #[test]
    fn the_package_lists_every_file_of_the_kit() {
        let root = crate::workspace_root();
        for f in FILES {
            assert!(root.join(MONITORING_DIR).join(f).is_file(), "{f}");
        }
        let tests = test_files(&root).unwrap();
        for t in &tests {
            let name = format!("tests/{}", t.file_name().unwrap().to_string_lossy());
            assert!(FILES.contains(&name.as_str()), "{name} is not packaged");
        }
    }

    #[test]
    fn spans_are_told_from_the_start_and_in_utc() {
        let s = prometheus::AlertSpan {
            alert: "DRAThrottleActive".into(),
            labels: "{peer=\"pgw1\"}".into(),
            fired: 86_400.0 * 3.0 + 3_723.0,
            resolved: None,
        };
        assert_eq!(utc_clock(s.fired), "01:02:03 UTC");
        let l = describe_spans(&[s], 86_400.0 * 3.0 + 3_700.0);
        assert_eq!(
            l,
            [
                "DRAThrottleActive{peer=\"pgw1\"} fired at t = 23 s (01:02:03 UTC), still \
              firing at the end"
            ]
        );
    }
}
