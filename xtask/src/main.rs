//! `cargo xtask <setup|build|test|run|package|demo|bench|lab>`: orchestration only.

mod agent_run;
mod bench;
mod coalesced;
mod demo;
mod doic;
mod flood;
mod ha;
mod lab;
mod metrics;
mod monitoring;
mod overload;
mod package;
mod procs;
mod report;
mod results;
mod storm;
mod style;
mod tally;
mod toolchain;
mod vm;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

/// The usage text's lines before the benches (`bench::usage`).
const USAGE_HEAD: &str = "\
usage: cargo xtask <command> [args]

  setup            install what is missing (eBPF toolchain, test tools, qemu and the
                   kernel matrix's kernels); silent when done
  build            build the agent and the eBPF programs (release)
  test             rustfmt --check, Rust lines <= 100 columns, no references to
                   documents outside the tree, clippy (userspace + eBPF), rustdoc
                   (warnings are errors), unit + property tests, package test
                   (dpkg -x into a scratch root, systemd-analyze verify, dra
                   --version), fuzz smoke, privileged netns tests (root), then the
                   kernel matrix: Debian's kernels booted in qemu run the fast path's
                   tests (xtask/src/vm/)
  kernels [NAME..] [--steps A,B]  only the kernel matrix (or the named kernels of it;
                   --steps: these instead of the matrix's — dra-verify, a test binary,
                   NAME:FILTER, all): `dra verify` and privileged tests in qemu (root)
  run -- ARGS      build, then `dra run ARGS` (e.g. -- --config config/dra.toml --iface eth0)
  package [--check]  release build, then target/package/dra_<version>_<arch>.deb: dra,
                   dra-loadgen, systemd unit, /etc/dra/dra.toml, man pages
                   (docs/operations.md); --check: the package test's checks on it
  demo             the seed story on the built-in lab (root, ~2.5 min; docs/demo.md)
  demo --doic      the same with DOIC: pgw2 a DOIC gateway (sheds its storm at the source),
                   pcrf1 reporting overload (the agent diverts new sessions from it)
  demo --monitoring  also a real Prometheus in the lab with the shipped rules; the summary
                   lists the alerts that fired and when (combines with --doic)
  lab up|down|status  the lab topology in network namespaces dralab-* (root)
  lab up --monitoring  also a real Prometheus in the lab (127.0.0.1:9090 in dralab-dra)
                   scraping the agent's metrics with the shipped rules
  lab up|down|status --ha  the HA pair in namespaces draha-*: two DRA hosts (dra run,
                   XDP) sharing a 6-node Redis Cluster store, pgw1/pgw2 connected to both,
                   pcrf1/pcrf2/ocs1 (root; README, HA pair)
  fuzz [SECS]      run every fuzz target SECS seconds each (default 30 s)
  monitoring check|live  the monitoring kit's steps of `test` alone: promtool check and
                   test rules, the dashboard's queries (check); a short lab storm with a
                   real Prometheus (live, root; docs/operations.md, Monitoring)
";

/// The usage text's lines after the benches.
const USAGE_TAIL: &str = "\
  sim lb [ARGS]    load-balancing simulator (`sim lb --help`); writes results/sim-lb/
";

/// `cargo xtask`'s usage text.
fn usage() -> String {
    format!("{USAGE_HEAD}{}{USAGE_TAIL}", bench::usage())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// A cargo command for the userspace (stable) toolchain.
fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace_root());
    c.env("PATH", toolchain::path_with_cargo_bin());
    c
}

/// `cargo run --release -p dra-tools --bin BIN --`: its arguments follow.
fn dra_tool(bin: &str) -> Command {
    let mut c = cargo();
    c.args(["run", "--release", "-p", "dra-tools", "--bin", bin, "--"]);
    c
}

/// A cargo command on the nightly toolchain (eBPF clippy, fuzz).
fn cargo_nightly() -> Command {
    nightly_cargo(Command::new("rustup"))
}

/// `c` (`rustup`, or a wrapper whose arguments end in `rustup`) made to run nightly's
/// cargo.
fn nightly_cargo(mut c: Command) -> Command {
    c.args(["run", "nightly", "cargo"]);
    c.current_dir(workspace_root());
    c.env("PATH", toolchain::path_with_cargo_bin());
    // A nested cargo must not inherit the outer toolchain choice.
    for k in [
        "RUSTUP_TOOLCHAIN",
        "CARGO",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        c.env_remove(k);
    }
    c
}

/// Runs `cmd` as the step `what`, saying when it starts and how long it took (where a
/// run's time goes, read from its log).
fn step(what: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {what}");
    let from = std::time::Instant::now();
    toolchain::run(what, cmd)?;
    eprintln!("xtask: {what}: done in {} s", from.elapsed().as_secs());
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn build(release: bool) -> Result<()> {
    let mut c = cargo();
    c.args(["build", "-p", "dra-userspace", "-p", "dra-tools", "--bins"]);
    if release {
        c.arg("--release");
    }
    step("build dra (agent + eBPF programs)", &mut c)
}

/// The fuzz targets: (crate directory, target). The agent's targets do not need the
/// eBPF programs (built with `AYA_BUILD_SKIP=1`).
const FUZZ_TARGETS: [(&str, &str); 4] = [
    ("dra-common", "wire_scan"),
    ("dra-userspace", "framer"),
    ("dra-userspace", "roundtrip"),
    ("dra-userspace", "grouped"),
];

/// The fuzz targets' build, started at the beginning of `cargo xtask test` at the lowest
/// CPU priority (`nice -n 19`), so that it takes only the CPU the other steps leave
/// (most of all the network tests' waits) and the fuzz step later finds it done. A
/// failure here is not reported as such: the fuzz step builds again in the foreground
/// and fails with the compiler's own message.
struct FuzzPrebuild {
    started: std::time::Instant,
    builds: Vec<(&'static str, std::process::Child)>,
}

impl FuzzPrebuild {
    fn start() -> FuzzPrebuild {
        let mut dirs: Vec<&'static str> = FUZZ_TARGETS.iter().map(|(d, _)| *d).collect();
        dirs.dedup();
        let logs = workspace_root().join("target");
        let _ = std::fs::create_dir_all(&logs);
        let mut builds = Vec::new();
        for dir in dirs {
            let mut nice = Command::new("nice");
            nice.args(["-n", "19", "rustup"]);
            let mut c = nightly_cargo(nice);
            c.args(["fuzz", "build"])
                .current_dir(workspace_root().join(dir))
                .env("AYA_BUILD_SKIP", "1")
                .stdin(std::process::Stdio::null());
            let log = logs.join(format!("fuzz-prebuild-{dir}.log"));
            let Ok(out) = std::fs::File::create(&log) else {
                continue;
            };
            let Ok(err) = out.try_clone() else {
                continue;
            };
            c.stdout(out).stderr(err);
            // The build ends with this process (cargo is what rustup executes).
            // SAFETY: prctl is async-signal-safe.
            unsafe {
                use std::os::unix::process::CommandExt;
                c.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            if let Ok(child) = c.spawn() {
                builds.push((dir, child));
            }
        }
        FuzzPrebuild {
            started: std::time::Instant::now(),
            builds,
        }
    }

    /// Waits for the background builds, saying how they ended.
    fn finish(mut self) {
        for (dir, mut child) in std::mem::take(&mut self.builds) {
            let status = child.wait();
            let how = match status {
                Ok(s) if s.success() => "built".to_owned(),
                Ok(s) => format!(
                    "not built ({s}; target/fuzz-prebuild-{dir}.log): the fuzz step builds it"
                ),
                Err(e) => format!("not waited for ({e})"),
            };
            eprintln!(
                "xtask: fuzz targets of {dir} {how}, beside the other steps ({} s since the start)",
                self.started.elapsed().as_secs()
            );
        }
    }
}

impl Drop for FuzzPrebuild {
    /// A test run that stops early stops the background build too.
    fn drop(&mut self) {
        for (_, child) in &mut self.builds {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs every fuzz target for `secs` seconds (a smoke run: a crash or a slow input —
/// over 1 s, `-timeout=1` — fails it).
fn fuzz_smoke(secs: u64) -> Result<()> {
    for (dir, target) in FUZZ_TARGETS {
        let mut c = cargo_nightly();
        c.args([
            "fuzz",
            "run",
            target,
            "--",
            &format!("-max_total_time={secs}"),
            "-timeout=1",
        ]);
        c.current_dir(workspace_root().join(dir))
            .env("AYA_BUILD_SKIP", "1");
        step(&format!("fuzz {target} for {secs} s"), &mut c)?;
    }
    Ok(())
}

/// rustdoc over the workspace with warnings as errors, so that a broken intra-doc link or
/// a stray `<word>` in a doc comment fails the test. dra-ebpf is left out: it builds only
/// on the nightly toolchain for bpfel-unknown-none (Cargo.toml), and its clippy step
/// checks it.
fn rustdoc() -> Result<()> {
    step(
        "rustdoc (cargo doc --no-deps, warnings are errors)",
        cargo()
            .args(["doc", "--no-deps", "--workspace", "--exclude", "dra-ebpf"])
            .env("RUSTDOCFLAGS", "-D warnings")
            .env("AYA_BUILD_SKIP", "1"),
    )
    .context("rustdoc warnings (printed above) are errors: fix the doc comments they name")
}

fn test() -> Result<()> {
    let from = std::time::Instant::now();
    toolchain::ensure()?;
    toolchain::ensure_fuzz()?;
    // The unit tests' packages; clippy also checks the privileged tests' crate.
    let unit_pkgs = [
        "-p",
        "dra-common",
        "-p",
        "dra-userspace",
        "-p",
        "dra-tools",
        "-p",
        "netlab",
        "-p",
        "xtask",
    ];
    let user_pkgs = [&unit_pkgs[..], &["-p", "dra-tests"]].concat();
    let fuzz_build = FuzzPrebuild::start();
    style::ensure_rustfmt()?;
    step("rustfmt --check", cargo().args(["fmt", "--all", "--check"]))?;
    style::check_line_width(&workspace_root())?;
    style::check_references(&workspace_root())?;
    // Lints and docs do not read the eBPF object: its build is skipped for them.
    step(
        "clippy (userspace)",
        cargo()
            .args(["clippy", "--all-targets"])
            .args(&user_pkgs)
            .args(["--", "-D", "warnings"])
            .env("AYA_BUILD_SKIP", "1"),
    )?;
    rustdoc()?;
    step(
        "clippy (eBPF, bpfel-unknown-none)",
        cargo_nightly()
            .args([
                "clippy",
                "-p",
                "dra-ebpf",
                "--release",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--target-dir",
                "target/ebpf-clippy",
                "--",
                "-D",
                "warnings",
            ])
            .env("CARGO_CFG_BPF_TARGET_ARCH", "x86_64")
            .env(
                "RUSTFLAGS",
                "--cfg bpf_target_arch=\"x86_64\" -C debuginfo=2 -C link-arg=--btf",
            ),
    )?;
    let skip_log = workspace_root().join("target/test-skips.txt");
    let mut host = tally::run_tests(
        "unit and property tests",
        cargo().arg("test").args(unit_pkgs),
        &skip_log,
    )?;
    package::test(&workspace_root())?;
    monitoring::check(&workspace_root())?;
    if !is_root() {
        bail!(
            "the privileged tests (network namespaces, XDP) need root: run `sudo cargo xtask test`"
        );
    }
    step(
        "build dra and dra-loadgen (for the privileged tests)",
        cargo().args(["build", "-p", "dra-userspace", "-p", "dra-tools", "--bins"]),
    )?;
    let dra_bin = workspace_root().join("target/debug/dra");
    let privileged = tally::run_tests(
        "privileged tests (netns, real BPF, real TCP) on this machine's kernel",
        cargo()
            .args(["test", "-p", "dra-tests", "--", "--test-threads=1"])
            .env("DRA_BIN", &dra_bin),
        &skip_log,
    )?;
    host.merge(&privileged);
    monitoring::live::test(&workspace_root(), &lab::Bins::debug(&workspace_root()))?;
    fuzz_build.finish();
    fuzz_smoke(10)?;
    toolchain::ensure_vm(&workspace_root())?;
    vm::run(&workspace_root(), &dra_bin, &[], Some(&privileged))?;
    eprintln!(
        "xtask: all tests passed in {} s; on this machine: {}",
        from.elapsed().as_secs(),
        host.summary(vm::where_run)
    );
    Ok(())
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => {
            eprint!("{}", usage());
            std::process::exit(2);
        }
    };
    match cmd {
        "setup" => {
            toolchain::ensure()?;
            toolchain::ensure_fuzz()?;
            toolchain::ensure_vm(&workspace_root())
        }
        "build" => {
            toolchain::ensure()?;
            build(true)
        }
        "test" => test(),
        "run" => {
            toolchain::ensure()?;
            build(true)?;
            let bin = workspace_root().join("target/release/dra");
            let rest: Vec<&String> = rest.iter().skip_while(|a| *a == "--").collect();
            let mut c = Command::new(bin);
            c.arg("run").args(rest);
            step("dra run", &mut c)
        }
        "kernels" => {
            toolchain::ensure()?;
            toolchain::ensure_vm(&workspace_root())?;
            if !is_root() {
                bail!("the kernel matrix loads eBPF programs in its guests: run it as root");
            }
            step(
                "build dra (for the kernel matrix)",
                cargo().args(["build", "-p", "dra-userspace", "-p", "dra-tools", "--bins"]),
            )?;
            vm::run(
                &workspace_root(),
                &workspace_root().join("target/debug/dra"),
                rest,
                None,
            )
        }
        "package" => {
            toolchain::ensure()?;
            package::cmd(&workspace_root(), rest)
        }
        "demo" => {
            let flag = |f: &str| rest.iter().any(|a| a == f);
            if rest.iter().any(|a| a != "--doic" && a != "--monitoring") {
                bail!("usage: cargo xtask demo [--doic] [--monitoring]");
            }
            toolchain::ensure()?;
            build(true)?;
            demo::run(&workspace_root(), flag("--doic"), flag("--monitoring"))
        }
        "monitoring" => {
            toolchain::ensure()?;
            match rest.first().map(String::as_str) {
                Some("check") => monitoring::check(&workspace_root()),
                Some("live") => {
                    if !is_root() {
                        bail!(
                            "the live test builds the lab (network namespaces, XDP): run it as root"
                        );
                    }
                    step(
                        "build dra and dra-loadgen (debug, as cargo xtask test)",
                        cargo().args(["build", "-p", "dra-userspace", "-p", "dra-tools", "--bins"]),
                    )?;
                    monitoring::live::test(&workspace_root(), &lab::Bins::debug(&workspace_root()))
                }
                _ => bail!("usage: cargo xtask monitoring <check|live>"),
            }
        }
        "lab" => {
            if !is_root() {
                bail!("the lab builds network namespaces: run it as root");
            }
            if rest.first().is_some_and(|a| a == "up") {
                toolchain::ensure()?;
                build(true)?;
            }
            let bins = lab::Bins::release(&workspace_root());
            if rest.iter().any(|a| a == "--ha") {
                let rest: Vec<String> = rest.iter().filter(|a| *a != "--ha").cloned().collect();
                return ha::cmd(&rest, &bins);
            }
            lab::cmd(rest, &bins)
        }
        "fuzz" => {
            toolchain::ensure_fuzz()?;
            let secs = rest.first().and_then(|s| s.parse().ok()).unwrap_or(30);
            fuzz_smoke(secs)
        }
        "sim" => {
            toolchain::ensure()?;
            step("dra-sim", dra_tool("dra-sim").args(rest))
        }
        "bench" => {
            toolchain::ensure()?;
            if !is_root() {
                bail!(
                    "the benchmarks load eBPF programs and create network namespaces: \
                     run them as root"
                );
            }
            bench::cmd(&workspace_root(), rest)
        }
        "help" | "--help" | "-h" => {
            eprint!("{}", usage());
            Ok(())
        }
        other => {
            eprint!("unknown command {other:?}\n{}", usage());
            std::process::exit(2);
        }
    }
}
