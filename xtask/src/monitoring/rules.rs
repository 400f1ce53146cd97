//! The shipped rule files, typed as Prometheus reads them (a key Prometheus does not
//! know fails here too), and the lab's copy of the alerts with shorter `for:` values.

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;

/// A Prometheus rule file (`groups:`).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleFile {
    pub(crate) groups: Vec<Group>,
}

/// A rule group.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Group {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) interval: Option<String>,
    pub(crate) rules: Vec<Rule>,
}

/// A recording rule (`record`) or an alerting rule (`alert`).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rule {
    #[serde(default)]
    pub(crate) record: Option<String>,
    #[serde(default)]
    pub(crate) alert: Option<String>,
    pub(crate) expr: String,
    #[serde(default, rename = "for")]
    pub(crate) for_: Option<String>,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
}

impl RuleFile {
    /// Parses `text` (the file `what`).
    pub(crate) fn parse(text: &str, what: &str) -> Result<RuleFile> {
        serde_yaml_ng::from_str(text).with_context(|| format!("{what}: not a rule file"))
    }

    /// Reads and parses the rule file at `path`.
    pub(crate) fn load(path: &Path) -> Result<RuleFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        RuleFile::parse(&text, &path.display().to_string())
    }

    /// Every rule, in file order.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.groups.iter().flat_map(|g| &g.rules)
    }

    /// The alerting rules, in file order.
    pub(crate) fn alerts(&self) -> impl Iterator<Item = &Rule> {
        self.rules().filter(|r| r.alert.is_some())
    }

    /// The names of the recording rules, in file order.
    pub(crate) fn records(&self) -> Vec<&str> {
        self.rules().filter_map(|r| r.record.as_deref()).collect()
    }
}

/// A Prometheus duration (`1m`, `15m`, `1h30m`, `500ms`: units ms, s, m, h, d, w, y).
pub(crate) fn parse_duration(s: &str) -> Result<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = s;
    ensure!(!rest.is_empty(), "empty duration");
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        ensure!(digits > 0, "duration {s:?}: a number expected at {rest:?}");
        let n: u64 = rest[..digits].parse()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            u => bail!("duration {s:?}: unknown unit {u:?}"),
        };
        total += Duration::from_millis(n * ms);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// `d` as a Prometheus duration: whole seconds as `Ns`, else `Nms`.
fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// How much shorter the lab's `for:` values are than the shipped ones: minutes become
/// seconds, so that an alert of a two-minute demo or test can fire and resolve in it.
pub(crate) const LAB_FOR_DIVISOR: u32 = 60;

/// The rule file `text` with every `for:` value divided by `divisor` and nothing else
/// changed (line by line; each rule of the result is checked equal to the shipped one
/// but for its `for`). The lab's Prometheus (demo, `lab up --monitoring`, the live test)
/// loads the alerts this way.
pub(crate) fn with_shorter_for(text: &str, divisor: u32) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let indent = body.len() - body.trim_start().len();
        match body.trim_start().strip_prefix("for:") {
            Some(v) => {
                let d = parse_duration(v.trim())? / divisor;
                out.push_str(&format!("{}for: {}\n", &body[..indent], format_duration(d)));
            }
            None => out.push_str(line),
        }
    }
    let (shipped, short) = (
        RuleFile::parse(text, "shipped")?,
        RuleFile::parse(&out, "copy")?,
    );
    ensure!(
        shipped.groups.len() == short.groups.len(),
        "the copy has other groups"
    );
    for (a, b) in shipped.rules().zip(short.rules()) {
        let same_but_for = a.record == b.record
            && a.alert == b.alert
            && a.expr == b.expr
            && a.labels == b.labels
            && a.annotations == b.annotations
            && a.for_.is_some() == b.for_.is_some();
        ensure!(
            same_but_for,
            "the copy of {:?} differs beyond for:",
            a.alert
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations_parse_and_scale() {
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        for bad in ["", "m", "5", "5x", "1.5m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
    }

    #[test]
    fn the_lab_copy_changes_only_the_for_values() {
        let text = "\
groups:
  - name: g
    rules:
      - alert: A
        expr: x > 0
        for: 15m
        labels:
          severity: warning
        annotations:
          summary: \"for: 15m is not a key here\"
      - alert: B
        expr: y > 0
";
        let short = with_shorter_for(text, 60).unwrap();
        assert_eq!(short, text.replace("        for: 15m", "        for: 15s"));
        let f = RuleFile::parse(&short, "copy").unwrap();
        let fors: Vec<_> = f.alerts().map(|r| r.for_.clone()).collect();
        assert_eq!(fors, [Some("15s".to_owned()), None]);
        // A key Prometheus does not know is an error, not a silently dropped rule.
        let e = format!(
            "{:#}",
            RuleFile::parse(&text.replace("expr: y", "exp: y"), "typo").unwrap_err()
        );
        assert!(e.contains("typo") && e.contains("exp"), "{e}");
    }
}
