//! What the privileged tests share: pins removed on drop, a temporary directory, the
//! lab's config text, and the eBPF object loaded for BPF_PROG_TEST_RUN (the fixture
//! tables, the differential test and `xdp-bench`).

use std::path::PathBuf;
use std::time::Duration;

use aya::programs::{SchedClassifier, TestRun, TestRunOptions, Xdp};
use aya::{Ebpf, TestRunResult};
use dra::dataplane::{self, Dataplane, Maps, Plan};
use dra::oob::OobInbox;
use dra_common::maps::ClassCounters;
use dra_common::stats::Counter;

use crate::netns::unique;

// Shared with the other test crates (dra-userspace/tests/support/mod.rs).
#[path = "../../dra-userspace/tests/support/config_toml.rs"]
mod config_toml;
#[path = "../../dra-userspace/tests/support/temp_dir.rs"]
mod temp_dir;

pub use config_toml::ConfigToml;
pub use temp_dir::TempDir;

/// How much slower than this machine the tests run (`DRA_TEST_TIME_SCALE`, set by the
/// kernel matrix for its emulated guests; 1 here): waits are scaled by it, never
/// assertions.
pub fn time_scale() -> u32 {
    std::env::var("DRA_TEST_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s >= 1)
        .unwrap_or(1)
}

/// A wait of `d` on this machine, scaled by [`time_scale`].
pub fn scaled(d: Duration) -> Duration {
    d * time_scale()
}

/// Polls `cond` until it holds or `timeout` (scaled by [`time_scale`]) passes: whether
/// it held. The one poll loop of these tests' waits on a signal (a status line, a
/// counter, a pinned map, a process's exit); [`crate::agent::Agent::wait_until`] is built
/// on it.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + scaled(timeout);
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        // The poll interval of a wait on a signal (not a wait for anything itself).
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Says that the calling test cannot run here, and why (`reason`, short: the summary
/// groups by it; `detail` is printed only), and records it for `cargo xtask test`'s
/// summary in the file `DRA_TEST_SKIP_LOG` names: counted as skipped, never as passed.
/// The test returns right after.
pub fn skip(reason: &str, detail: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned();
    // The test binary's name without cargo's hash (netns_sctp-0123abcd → netns_sctp).
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => s,
        })
        .unwrap_or_default();
    println!("SKIPPED {bin}::{test}: {reason} ({detail})");
    if let Some(path) = std::env::var_os("DRA_TEST_SKIP_LOG") {
        use std::io::Write as _;
        let line = format!("{bin}::{test}\t{reason}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        // A skip that cannot be recorded would be counted as a pass: fail instead.
        if let Err(e) = written {
            panic!("recording the skip in {}: {e}", path.to_string_lossy());
        }
    }
}

/// A pin directory under bpffs, removed on drop with what is pinned there (the
/// programs' links too: XDP and TC are detached).
pub struct Pins(pub PathBuf);

impl Pins {
    /// `/sys/fs/bpf/<prefix><unique>`, not created yet.
    pub fn new(prefix: &str) -> Pins {
        Pins(PathBuf::from(format!("/sys/fs/bpf/{}", unique(prefix))))
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = Dataplane::detach(None, &self.0);
    }
}

/// The lab's realm: the DRA is `dra.lab.example`, gateways `pgwN.lab.example`.
pub const LAB_REALM: &str = "lab.example";
/// The PCRFs' realm.
pub const PCRF_REALM: &str = "pcrf.lab.example";

/// The lab's DRA listening on 198.18.1.1:3868, with more `[global]` keys ("" for
/// none).
pub fn lab_dra(global: &str) -> ConfigToml {
    ConfigToml::new(LAB_REALM, &["198.18.1.1:3868"], global)
}

/// The lab most tests start from: pgw1 at 198.18.1.2, pcrf1 at 198.18.2.2:3868, every
/// realm routed to pcrf1; limits and other peers are added by the test.
pub fn lab_config() -> ConfigToml {
    lab_dra("")
        .client("pgw1", LAB_REALM, &["198.18.1.2"], "")
        .server("pcrf1", PCRF_REALM, "198.18.2.2:3868", "")
        .route("*", "peer = \"pcrf1\"")
}

/// The three-namespace lab's agent (`netns::GwDraSrv`) with `[global]` keys `global`:
/// pgw1 at 198.18.1.2, pcrf1 at 198.18.2.2:3868 (its address known, as a destination),
/// the PCRF realm routed to it.
pub fn gw_dra_srv_config(global: &str) -> ConfigToml {
    lab_dra(global)
        .client("pgw1", LAB_REALM, &["198.18.1.2"], "")
        .server(
            "pcrf1",
            PCRF_REALM,
            "198.18.2.2:3868",
            "addresses = [\"198.18.2.2\"]",
        )
        .route(PCRF_REALM, "peer = \"pcrf1\"")
}

/// Which programs [`load_object`] loads.
#[derive(Clone, Copy, Debug)]
pub enum Hook {
    /// The XDP dispatcher and its tail calls.
    Xdp,
    /// The TC egress classifier.
    Tc,
}

/// The agent's eBPF object for BPF_PROG_TEST_RUN: `hook`'s programs loaded (verified)
/// as the agent loads them, and the plan of `config` (called `name` in errors) written
/// into its maps.
pub fn load_object(config: &str, name: &str, hook: Hook) -> (Ebpf, Maps, Plan) {
    let cfg = dra::config::parse(config, name).unwrap_or_else(|e| panic!("{e}"));
    let plan = Plan::new(&cfg).expect("plan");
    let mut ebpf = dataplane::open().expect("eBPF object");
    match hook {
        Hook::Xdp => dataplane::load_xdp(&mut ebpf).expect("the verifier accepts XDP"),
        Hook::Tc => dataplane::load_tc(&mut ebpf).expect("the verifier accepts TC"),
    }
    let mut maps = Maps::take(&mut ebpf).expect("maps");
    maps.write_plan(&plan).expect("write plan");
    (ebpf, maps, plan)
}

/// The agent's reader of the out-of-band marks, on `ebpf`'s ring.
pub fn oob_inbox(ebpf: &mut Ebpf) -> OobInbox {
    let ring = ebpf
        .take_map(dra_common::maps::names::OOB_MARKS)
        .expect("OOB_MARKS");
    OobInbox::new(ring).expect("ring buffer")
}

/// One BPF_PROG_TEST_RUN of the XDP program `prog` on `input`: its verdict and the
/// kernel's run time; `out` gets the output bytes.
pub fn test_run_xdp(ebpf: &Ebpf, prog: &str, input: &[u8], out: &mut Vec<u8>) -> (u32, Duration) {
    let p: &Xdp = ebpf.program(prog).expect(prog).try_into().expect("XDP");
    test_run(p, input, out)
}

/// The XDP dispatcher once on `input`: its verdict and output bytes.
pub fn run_xdp(ebpf: &Ebpf, input: &[u8]) -> (u32, Vec<u8>) {
    let mut out = Vec::new();
    let (verdict, _) = test_run_xdp(ebpf, dataplane::XDP_PROGRAM, input, &mut out);
    (verdict, out)
}

/// The TC classifier once on `input` (an skb): its verdict.
pub fn run_tc(ebpf: &Ebpf, input: &[u8]) -> u32 {
    let name = dataplane::TC_PROGRAM;
    let p: &SchedClassifier = ebpf.program(name).expect(name).try_into().expect("TC");
    test_run(p, input, &mut Vec::new()).0
}

fn test_run<P>(prog: &P, input: &[u8], out: &mut Vec<u8>) -> (u32, Duration)
where
    P: for<'a> TestRun<Opts<'a> = TestRunOptions<'a>, Result = TestRunResult>,
{
    out.clear();
    out.resize(input.len() + 256, 0);
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(input);
    opts.data_out = Some(out.as_mut_slice());
    let r = prog.test_run(opts).expect("test run");
    out.truncate(r.data_size_out as usize);
    (r.return_value, r.duration)
}

/// A slot's counts: (seen, admitted, marked, dropped).
pub type SlotCounts = (u64, u64, u64, u64);

/// What a slot counted from `before` to `after`.
pub fn slot_delta(before: &ClassCounters, after: &ClassCounters) -> SlotCounts {
    (
        after.seen - before.seen,
        after.admitted - before.admitted,
        after.marked - before.marked,
        after.dropped - before.dropped,
    )
}

/// Each counter of `want` ((counter, delta)) whose delta from `before` to `after` (the
/// per-CPU counters as `Maps::stats` reads them) is another, as a message.
pub fn counter_mismatches(
    before: &[(Counter, u64)],
    after: &[(Counter, u64)],
    want: &[(Counter, u64)],
) -> Vec<String> {
    let delta = |c: Counter| after[c as usize].1 - before[c as usize].1;
    want.iter()
        .filter(|(c, w)| delta(*c) != *w)
        .map(|(c, w)| format!("counter {} delta {}, want {w}", c.name(), delta(*c)))
        .collect()
}

/// The end of a sweep over cut positions: more than `min` cuts were tried, and none
/// went wrong (`failures`: one message per wrong cut, naming it).
pub fn assert_sweep(cases: usize, min: usize, failures: &[String]) {
    assert!(cases > min, "{cases} cuts");
    assert!(
        failures.is_empty(),
        "{} of {cases} cuts wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
