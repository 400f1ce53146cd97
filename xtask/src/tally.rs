//! What the tests of a `cargo xtask test` run did: passed, failed, ignored and skipped,
//! read from libtest's own result lines and from the skip log the tests write
//! (`DRA_TEST_SKIP_LOG`, `dra_tests::support::skip`). A test that cannot run here says
//! so and returns; libtest counts it as passed, so the summary takes it out of the
//! passed count and names it and its reason.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The variable naming the file a test appends its skip to (one line, `test\treason`).
pub const SKIP_LOG_VAR: &str = "DRA_TEST_SKIP_LOG";

/// One test that did not run here, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// `binary::test`.
    pub test: String,
    pub reason: String,
}

/// Counts of one or more test runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Tests libtest reported as passed that really ran (skips taken out).
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    pub skipped: Vec<Skip>,
    /// libtest's "passed" before the skips are taken out.
    reported_passed: u64,
}

impl Tally {
    /// Adds libtest's result lines in `output` (`test result: ok. 12 passed; 0 failed;
    /// 1 ignored; ...`).
    pub fn add_output(&mut self, output: &str) {
        for line in output.lines() {
            let Some(rest) = line.trim().strip_prefix("test result: ") else {
                continue;
            };
            for part in rest.split(';') {
                let mut w = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (w.next(), w.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else {
                    continue;
                };
                match what {
                    "passed" => self.reported_passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
        self.passed = self.reported_passed - (self.skipped.len() as u64).min(self.reported_passed);
    }

    /// Adds the skips recorded in `log` (the file may not exist: nothing was skipped).
    pub fn add_skips(&mut self, log: &Path) -> Result<()> {
        let text = match std::fs::read_to_string(log) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", log.display())),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (test, reason) = line
                .split_once('\t')
                .with_context(|| format!("{}: a line without a reason: {line:?}", log.display()))?;
            self.skipped.push(Skip {
                test: test.to_owned(),
                reason: reason.to_owned(),
            });
        }
        self.passed = self.reported_passed - (self.skipped.len() as u64).min(self.reported_passed);
        Ok(())
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        self.reported_passed += other.reported_passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.skipped.extend(other.skipped.iter().cloned());
        self.passed = self.reported_passed - (self.skipped.len() as u64).min(self.reported_passed);
    }

    /// `604 passed, 0 failed, 3 skipped: no SCTP on this kernel (netns_sctp ×3, run in
    /// debian12-6.1)`; `where_run` names where a skipped binary's tests do run.
    pub fn summary(&self, where_run: impl Fn(&str) -> Vec<String>) -> String {
        let mut s = format!("{} passed, {} failed", self.passed, self.failed);
        if self.ignored > 0 {
            s.push_str(&format!(", {} ignored", self.ignored));
        }
        s.push_str(&format!(", {} skipped", self.skipped.len()));
        // Grouped by reason, then by binary.
        let mut reasons: Vec<&str> = self.skipped.iter().map(|k| k.reason.as_str()).collect();
        reasons.dedup();
        reasons.sort_unstable();
        reasons.dedup();
        let mut groups = Vec::new();
        for r in reasons {
            let mut bins: Vec<(&str, usize)> = Vec::new();
            for k in self.skipped.iter().filter(|k| k.reason == r) {
                let bin = k.test.split("::").next().unwrap_or(&k.test);
                match bins.iter_mut().find(|(b, _)| *b == bin) {
                    Some((_, n)) => *n += 1,
                    None => bins.push((bin, 1)),
                }
            }
            let parts: Vec<String> = bins
                .iter()
                .map(|(b, n)| {
                    let run = where_run(b);
                    let run = if run.is_empty() {
                        String::new()
                    } else {
                        format!(", run in {}", run.join(", "))
                    };
                    format!("{b} ×{n}{run}")
                })
                .collect();
            groups.push(format!("{r} ({})", parts.join("; ")));
        }
        if !groups.is_empty() {
            s.push_str(": ");
            s.push_str(&groups.join("; "));
        }
        s
    }
}

/// Runs the test command `cmd` as the step `what` (see [`crate::step`]), its standard
/// output shown as it comes and read for libtest's result lines; the tests' skips are
/// recorded in `skip_log` (emptied first). The step fails when the command does.
pub fn run_tests(what: &str, cmd: &mut Command, skip_log: &Path) -> Result<Tally> {
    eprintln!("xtask: {what}");
    let from = std::time::Instant::now();
    let _ = std::fs::remove_file(skip_log);
    cmd.env(SKIP_LOG_VAR, skip_log).stdout(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("{what}: could not start {cmd:?}"))?;
    let out = child.stdout.take().context("the tests' standard output")?;
    let mut text = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.context("reading the tests' output")?;
        println!("{line}");
        text.push_str(&line);
        text.push('\n');
    }
    let status = child.wait()?;
    let mut tally = Tally::default();
    tally.add_skips(skip_log)?;
    tally.add_output(&text);
    if !status.success() {
        bail!("{what} failed ({status}): {cmd:?}");
    }
    eprintln!(
        "xtask: {what}: done in {} s ({})",
        from.elapsed().as_secs(),
        tally.summary(|_| Vec::new())
    );
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_skipped_and_failed_are_counted_from_libtest_and_the_skip_log() {
        let dir = std::env::temp_dir().join(format!("xtask-tally-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        std::fs::write(
            &log,
            "netns_sctp::a\tno SCTP on this kernel\nnetns_sctp::b\tno SCTP on this kernel\n",
        )
        .unwrap();
        let mut t = Tally::default();
        t.add_skips(&log).unwrap();
        t.add_output(
            "running 4 tests\ntest a ... ok\n\
             test result: ok. 4 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out\n\
             test result: ok. 10 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n",
        );
        assert_eq!(
            (t.passed, t.failed, t.ignored, t.skipped.len()),
            (12, 0, 1, 2)
        );
        let s = t.summary(|b| {
            if b == "netns_sctp" {
                vec!["debian12-6.1".into()]
            } else {
                Vec::new()
            }
        });
        assert_eq!(
            s,
            "12 passed, 0 failed, 1 ignored, 2 skipped: no SCTP on this kernel \
             (netns_sctp ×2, run in debian12-6.1)"
        );
        let mut all = Tally::default();
        all.merge(&t);
        all.merge(&t);
        assert_eq!((all.passed, all.skipped.len()), (24, 4));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_skip_line_without_a_reason_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("xtask-tally-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        std::fs::write(&log, "netns_sctp::a\n").unwrap();
        let e = Tally::default().add_skips(&log).unwrap_err();
        assert!(format!("{e:#}").contains("skips"), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
