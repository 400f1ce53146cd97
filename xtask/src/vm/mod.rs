//! The kernel matrix of `cargo xtask test`: each kernel of [`matrix::MATRIX`] but this
//! machine's is booted in qemu with this machine's filesystem (9p, read-only, a tmpfs
//! layer on top) and runs its steps — `dra verify` and privileged test binaries built
//! here — as root; the verdicts are read from the console and each step's log from the
//! shared job directory (`target/vm/<kernel>/job/`). Tests scale their waits by
//! `DRA_TEST_TIME_SCALE`, never their assertions.

mod guest;
mod kernel;
pub mod matrix;
mod qemu;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use matrix::{FastPath, Kernel, MATRIX, Source, Step};

use crate::tally::{self, Tally};

/// Guest size: this machine's 2 CPUs, and memory for the tests' agents, Redis and
/// loadgens with room to spare.
const CPUS: u32 = 2;
const MEM_MIB: u32 = 4096;
/// Bound on one step in the guest, and on a whole boot.
const STEP_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const BOOT_TIMEOUT: Duration = Duration::from_secs(45 * 60);

fn vm_dir(root: &Path) -> PathBuf {
    root.join("target/vm")
}

/// Downloads and unpacks every kernel of the matrix that is not there yet (the setup
/// step; silent when all are).
pub fn ensure_kernels(root: &Path) -> Result<()> {
    for k in MATRIX {
        kernel::ensure(&vm_dir(root), k.name, &k.source)?;
    }
    Ok(())
}

/// The privileged tests' binaries (built here with `cargo test --no-run`), by name.
fn test_binaries(root: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let out = netlab::output(
        crate::cargo()
            .args([
                "test",
                "-p",
                "dra-tests",
                "--no-run",
                "--message-format=json",
            ])
            .current_dir(root),
    )
    .context("building the privileged tests for the kernel matrix")?;
    let mut bins = BTreeMap::new();
    for line in out.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(name), Some(exe)) = (
            v.pointer("/target/name").and_then(|n| n.as_str()),
            v.get("executable").and_then(|e| e.as_str()),
        ) else {
            continue;
        };
        let is_test = v
            .pointer("/target/kind")
            .and_then(|k| k.as_array())
            .is_some_and(|k| k.iter().any(|x| x == "test"));
        if is_test {
            bins.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    Ok(bins)
}

/// The binaries the guests run, hard-linked (copied where a link cannot be made) into
/// target/vm/bin: a build on this machine while the guests run replaces the files
/// under target/debug, not these. `dra-loadgen` goes beside `dra`, where the tests
/// look for it. Returns the test binaries and `dra` there.
fn snapshot(
    root: &Path,
    bins: &BTreeMap<String, PathBuf>,
    dra_bin: &Path,
) -> Result<(BTreeMap<String, PathBuf>, PathBuf)> {
    let dir = vm_dir(root).join("bin");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let keep = |src: &Path, name: &str| -> Result<PathBuf> {
        let dst = dir.join(name);
        if std::fs::hard_link(src, &dst).is_err() {
            std::fs::copy(src, &dst).with_context(|| format!("copying {}", src.display()))?;
        }
        Ok(dst)
    };
    let mut out = BTreeMap::new();
    for (name, bin) in bins {
        out.insert(name.clone(), keep(bin, &format!("test-{name}"))?);
    }
    let dra = keep(dra_bin, "dra")?;
    keep(&dra_bin.with_file_name("dra-loadgen"), "dra-loadgen")?;
    Ok((out, dra))
}

/// One guest step's outcome.
struct StepResult {
    name: String,
    status: i32,
    secs: u64,
}

/// The kernels of the matrix whose guests run the test binary `bin` (e.g. where a test
/// skipped on this machine runs).
pub fn where_run(bin: &str) -> Vec<String> {
    MATRIX
        .iter()
        .filter(|k| {
            k.steps
                .iter()
                .any(|s| matches!(s, Step::Tests(b) if *b == bin))
        })
        .map(|k| k.name.to_owned())
        .collect()
}

/// Runs the matrix's guests, or only the kernels named in `only`; fails if a step of any
/// of them fails. The host's row is what `host` says: the privileged tests run on this
/// machine before this (none under `cargo xtask kernels`, which runs only the guests).
/// `only`: kernel names, and `--steps a,b` to run those steps instead of the matrix's
/// (a developer's shortcut: `dra-verify`, test binaries, `name:filter`, `all`).
pub fn run(root: &Path, dra_bin: &Path, only: &[String], host: Option<&Tally>) -> Result<()> {
    let mut steps_only: Option<Vec<String>> = None;
    let mut names = Vec::new();
    let mut it = only.iter();
    while let Some(a) = it.next() {
        if a == "--steps" {
            let list = it.next().context("--steps needs a comma-separated list")?;
            steps_only = Some(list.split(',').map(str::to_owned).collect());
        } else {
            names.push(a.clone());
        }
    }
    let only = &names[..];
    if let Some(n) = only
        .iter()
        .find(|n| !MATRIX.iter().any(|k| k.name == n.as_str()))
    {
        let names: Vec<&str> = MATRIX.iter().map(|k| k.name).collect();
        bail!("no kernel {n} in the matrix ({})", names.join(", "));
    }
    let chosen: Vec<&Kernel> = MATRIX
        .iter()
        .filter(|k| only.is_empty() || only.iter().any(|n| n == k.name))
        .collect();
    let start = Instant::now();
    let accel = qemu::Accel::detect();
    eprintln!(
        "xtask: kernel matrix: {} kernels, guests in qemu ({}, {CPUS} vCPUs, waits x{})",
        chosen.len(),
        accel.name(),
        accel.time_scale()
    );
    let (bins, dra_bin) = snapshot(root, &test_binaries(root)?, dra_bin)?;
    let dra_bin = dra_bin.as_path();
    let mut failed = Vec::new();
    let mut summary = Vec::new();
    for k in chosen {
        let t0 = Instant::now();
        match k.source {
            Source::Host => {
                let rel = netlab::sh(&["uname", "-r"])?.trim().to_owned();
                let ran = match host {
                    Some(t) => format!("the privileged tests, run above: {}", t.summary(where_run)),
                    None => "not run by `cargo xtask kernels` (`cargo xtask test` runs the \
                             privileged tests here)"
                        .to_owned(),
                };
                eprintln!("xtask: [{}] {rel}, {}: {ran}", k.name, k.what);
                summary.push(format!("{} ({rel}): {ran}", k.name));
                continue;
            }
            Source::Deb { .. } => {}
        }
        let (results, rel, tests) =
            run_guest(root, k, accel, dra_bin, &bins, steps_only.as_deref())?;
        let bad: Vec<&StepResult> = results.iter().filter(|r| !step_ok(k, r)).collect();
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        if bad.is_empty() {
            summary.push(format!(
                "{} ({rel}): {} in {} s; tests {}",
                k.name,
                names.join(", "),
                t0.elapsed().as_secs(),
                tests.summary(|_| Vec::new())
            ));
        } else {
            failed.push(k.name);
            summary.push(format!("{} ({rel}): FAILED", k.name));
        }
    }
    eprintln!(
        "xtask: kernel matrix, {} s:\n  {}",
        start.elapsed().as_secs(),
        summary.join("\n  ")
    );
    if !failed.is_empty() {
        bail!(
            "the kernel matrix failed on {} (step logs under target/vm/<kernel>/job/)",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Whether a step did what the kernel's row expects: `dra verify` succeeds exactly where
/// the fast path is full; tests pass everywhere.
fn step_ok(k: &Kernel, r: &StepResult) -> bool {
    if r.name == Step::VERIFY {
        (r.status == 0) == (k.fast_path == FastPath::Full)
    } else {
        r.status == 0
    }
}

/// Boots kernel `k` and runs its steps; the results read from the console, and the
/// guest's release.
fn run_guest(
    root: &Path,
    k: &Kernel,
    accel: qemu::Accel,
    dra_bin: &Path,
    bins: &BTreeMap<String, PathBuf>,
    steps_only: Option<&[String]>,
) -> Result<(Vec<StepResult>, String, Tally)> {
    let vm = vm_dir(root);
    let kern = kernel::ensure(&vm, k.name, &k.source)?.context("a guest kernel")?;
    let dir = vm.join(k.name);
    let job = dir.join("job");
    let _ = std::fs::remove_dir_all(&job);
    std::fs::create_dir_all(&job)?;
    let initrd = dir.join("initramfs.cpio");
    guest::initramfs(&kern, &initrd)?;
    let test_step = |name: &str, bin: &Path| guest::JobStep {
        name: name.to_owned(),
        argv: vec![
            bin.to_path_buf(),
            "--test-threads=1".into(),
            "--nocapture".into(),
        ],
    };
    let verify = || guest::JobStep {
        name: Step::VERIFY.to_owned(),
        argv: vec![dra_bin.to_path_buf(), "verify".into()],
    };
    let tests = |file: &str| -> Result<guest::JobStep> {
        let bin = bins
            .get(file)
            .with_context(|| format!("no test binary {file} in dra-tests"))?;
        Ok(test_step(file, bin))
    };
    let mut steps = Vec::new();
    match steps_only {
        // The matrix's steps for this kernel.
        None => {
            for s in k.steps {
                steps.push(match s {
                    Step::Verify => verify(),
                    Step::Tests(file) => tests(file)?,
                });
            }
        }
        // A developer's choice: `dra-verify`, a test binary's name, `name:filter` (the
        // filter goes to the test binary), or `all` (every test binary).
        Some(only) => {
            for o in only {
                let (name, filter) = o.split_once(':').unwrap_or((o, ""));
                match name {
                    Step::VERIFY => steps.push(verify()),
                    "all" => {
                        for name in bins.keys() {
                            steps.push(tests(name)?);
                        }
                    }
                    _ => {
                        let mut step = tests(name)?;
                        if !filter.is_empty() {
                            step.argv.push(filter.into());
                        }
                        steps.push(step);
                    }
                }
            }
        }
    }
    let env = guest::JobEnv {
        kernel: &kern,
        workspace: root,
        vars: vec![
            ("DRA_BIN", dra_bin.display().to_string()),
            ("DRA_TEST_TIME_SCALE", accel.time_scale().to_string()),
            ("DRA_EXPECT_FAST_PATH", k.fast_path.env().to_owned()),
            // Every Debian kernel has SCTP (a module, loaded before the first step).
            ("DRA_EXPECT_SCTP", "yes".to_owned()),
            (tally::SKIP_LOG_VAR, format!("/dra-job/{GUEST_SKIP_LOG}")),
            ("RUST_BACKTRACE", "1".to_owned()),
        ],
        step_timeout_s: STEP_TIMEOUT.as_secs(),
    };
    guest::write_job(&job, &env, &steps)?;
    eprintln!(
        "xtask: [{}] {} ({}): {}; fast path expected {}",
        k.name,
        kern.release,
        kern.package,
        k.what,
        k.fast_path.env()
    );
    let mut results = Vec::new();
    let mut exit = None;
    let mut guest_fail = None;
    let mut release = kern.release.clone();
    let log = dir.join("console.log");
    let boot = qemu::Boot {
        vmlinuz: &kern.vmlinuz,
        initrd: &initrd,
        job_dir: &job,
        accel,
        cpus: CPUS,
        mem_mib: MEM_MIB,
        log: &log,
        timeout: BOOT_TIMEOUT,
    };
    let ended = qemu::boot(&boot, |line| {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("DRA-VM-STEP") => {
                let (Some(name), Some(rc), Some(secs)) = (w.next(), w.next(), w.next()) else {
                    return;
                };
                let r = StepResult {
                    name: name.to_owned(),
                    status: rc.parse().unwrap_or(-1),
                    // Shown, never judged (the status decides).
                    secs: secs.parse().unwrap_or(0),
                };
                report_step(k, &r, &job);
                results.push(r);
            }
            Some("DRA-VM-KERNEL") => {
                if let Some(r) = w.next() {
                    release = r.to_owned();
                }
            }
            Some("DRA-VM-NOTE") => eprintln!("xtask: [{}]   {line}", k.name),
            Some("DRA-VM-EXIT") => exit = w.next().map(str::to_owned),
            Some("DRA-VM-FAIL") => guest_fail = Some(line.to_owned()),
            _ => {}
        }
    })?;
    let console_tail = || tail(&std::fs::read_to_string(&log).unwrap_or_default(), 60);
    if let Some(f) = guest_fail {
        bail!(
            "[{}] the guest could not run its job: {f}\n{}",
            k.name,
            console_tail()
        );
    }
    if matches!(ended, qemu::Ended::TimedOut) {
        bail!(
            "[{}] the guest overran {} s; console:\n{}",
            k.name,
            BOOT_TIMEOUT.as_secs(),
            console_tail()
        );
    }
    if exit.is_none() || results.len() != steps.len() {
        bail!(
            "[{}] the guest stopped after {} of {} steps; console ({}):\n{}",
            k.name,
            results.len(),
            steps.len(),
            log.display(),
            console_tail()
        );
    }
    // What the steps' tests did, from their logs and the skip log they share.
    let mut tests = Tally::default();
    tests.add_skips(&job.join(GUEST_SKIP_LOG))?;
    for r in &results {
        if r.name != Step::VERIFY {
            tests.add_output(&std::fs::read_to_string(
                job.join(format!("{}.log", r.name)),
            )?);
        }
    }
    Ok((results, release, tests))
}

/// The file in a guest's job directory its tests record their skips in.
const GUEST_SKIP_LOG: &str = "skips.txt";

/// Prints one step's outcome as it arrives; a failed step's log (its end) with it.
fn report_step(k: &Kernel, r: &StepResult, job: &Path) {
    let log = job.join(format!("{}.log", r.name));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let ok = step_ok(k, r);
    let verdict = match (ok, r.status) {
        (true, 0) => "ok".to_owned(),
        (true, s) => format!("ok (exit {s}, as expected here)"),
        (false, s) => format!("FAILED (exit {s})"),
    };
    eprintln!("xtask: [{}]   {} {verdict} ({} s)", k.name, r.name, r.secs);
    if r.name == Step::VERIFY {
        for l in text.lines().filter(|l| !l.trim().is_empty()).take(20) {
            eprintln!("xtask: [{}]     {l}", k.name);
        }
    } else if !ok {
        eprintln!("{}", tail(&text, 200));
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
