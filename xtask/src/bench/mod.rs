//! `cargo xtask bench [NAME] [ARGS]`: the benchmarks as one table ([`BENCHES`]).
//!
//! Each entry names a bench, its lines of the usage text, and how it is prepared: its
//! arguments parsed and its preflight checks made (no lab up, configs that agree), before
//! anything long runs. Preparing gives the run itself. `bench NAME ARGS` prepares and runs
//! that entry; `bench [ARGS]` and `bench all [ARGS]` prepare every entry that is part of
//! the full run, in table order, then run them in the same order and write the aggregate
//! report (`crate::report`); the arguments of a full run go to [`ALL_ARGS_TO`].
//!
//! What the benches share lives beside the table, so that no bench reaches into another:
//! the configs and scenarios several use and how they are read ([`config`]), CPU time
//! from /proc ([`cpu`]), the client's per-second rows and the statistics over them
//! ([`rows`]), and the window of a measured phase the numbers are taken from
//! ([`window`]).

pub(crate) mod config;
pub(crate) mod cpu;
pub(crate) mod rows;
pub(crate) mod window;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::{coalesced, doic, flood, ha, lab, overload, storm};

/// What the benches of one `cargo xtask bench` share: the workspace and the release
/// build, made at most once.
pub(crate) struct Harness {
    pub(crate) root: PathBuf,
    built: bool,
}

impl Harness {
    /// The release build of the agent and the tools (`cargo xtask build`), once per
    /// `cargo xtask bench`: the benches after the first that needs it find it done.
    pub(crate) fn release_build(&mut self) -> Result<()> {
        if !self.built {
            crate::build(true)?;
            self.built = true;
        }
        Ok(())
    }
}

/// A prepared bench: its arguments parsed, its preflight passed.
pub(crate) type Run = Box<dyn FnOnce(&mut Harness) -> Result<()>>;

/// One benchmark of `cargo xtask bench`.
pub(crate) struct Bench {
    /// `bench NAME`.
    pub(crate) name: &'static str,
    /// Its command line and what it does, for the usage text.
    pub(crate) synopsis: &'static str,
    pub(crate) help: &'static [&'static str],
    /// Whether the full run (`bench`, `bench all`) includes it.
    pub(crate) in_all: bool,
    /// Parses the bench's arguments and makes its preflight checks (workspace root,
    /// arguments); gives the run.
    pub(crate) prepare: fn(&Path, &[String]) -> Result<Run>,
}

/// The benchmarks, in the order of the full run (and of the usage text).
pub(crate) const BENCHES: [Bench; 8] = [
    Bench {
        name: "xdp",
        synopsis: "bench xdp [N]",
        help: &["P1: XDP ns/packet per case vs bare XDP_PASS, N runs each"],
        in_all: true,
        prepare: xdp,
    },
    Bench {
        name: "relay",
        synopsis: "bench relay [ARGS]",
        help: &[
            "P2: relayed requests/s, p50/p99, CPU/request: `dra run` vs",
            "freeDiameter and an Erlang/OTP relay, and `dra run` over TLS vs plain",
            "TCP (goal ≥ 0.5), 100 in flight, 3 alternating rounds",
            "(`bench relay -- --help`); writes bench/results/relay-latest.json",
        ],
        in_all: true,
        prepare: relay,
    },
    Bench {
        name: "storm",
        synopsis: "bench storm [--dra PATH]",
        help: &[
            "P3, P4 on the lab with dra run + dra-loadgen (~10 min;",
            "refuses to run while a lab is up): CCR-I admitted-rate error under a 10x",
            "storm (paced, and coalesced: 4/16/100 in flight, XDP and userspace, reject",
            "and drop), CCR-U p99 storm/no storm (3 pairs each) with servers at fixed",
            "100us and at exp 2ms; writes bench/results/storm-latest.json",
            "(docs/bench.md). --dra: another build's agent, P3/P4 only, A/B (the",
            "results stay in results/bench-storm-*/storm.json)",
        ],
        in_all: true,
        prepare: storm_bench,
    },
    Bench {
        name: "coalesced",
        synopsis: "bench coalesced",
        help: &["only P3's coalesced case (~4.5 min); merged into storm-latest.json"],
        in_all: false,
        prepare: coalesced_bench,
    },
    Bench {
        name: "flood",
        synopsis: "bench flood [--pps N] [--paced-pps N] [--threads N] [--reps N]",
        help: &[
            "P5, the flood shield (~8.5 min, own namespaces fl-*): SYN/junk flood",
            "from non-peers and a peer's reconnect storm, XDP vs the agent alone,",
            "at full rate (--pps 0) and paced (--paced-pps 30000): host CPU per",
            "flood packet, CCR-U p99; writes bench/results/flood-latest.json",
        ],
        in_all: true,
        prepare: flood_bench,
    },
    Bench {
        name: "overload",
        synopsis: "bench overload",
        help: &[
            "the agent past its own capacity (~12 min, own namespaces ov-*): CPU",
            "capped by a cgroup quota, C measured closed loop, then 0.5-8 x C open",
            "loop with the overload control on and off, XDP and the agent alone;",
            "goodput, 3004/discarded, CCR-T, p50/p99, RSS; writes",
            "bench/results/overload-latest.json (docs/bench.md)",
        ],
        in_all: true,
        prepare: overload_bench,
    },
    Bench {
        name: "ha",
        synopsis: "bench ha",
        help: &[
            "the HA pair on its own lab (~3 min): >= 20,000 Gx sessions, DRA A",
            "SIGKILLed and restarted, a Redis master killed; misrouted, unanswered,",
            "resent with T, failover ms, relay req/s memory vs redis_cluster store;",
            "writes bench/results/ha-latest.json (docs/bench.md)",
        ],
        in_all: true,
        prepare: ha_bench,
    },
    Bench {
        name: "doic",
        synopsis: "bench doic",
        help: &[
            "DOIC on the lab (~3 min; refuses to run while a lab is up): the 10x",
            "storm from a gateway without and with DOIC, pcrf1 reporting 50 % loss;",
            "writes bench/results/doic-latest.json (docs/bench.md)",
        ],
        in_all: true,
        prepare: doic_bench,
    },
];

/// The bench the arguments of a full run go to (`bench N`: N XDP runs per case).
const ALL_ARGS_TO: &str = "xdp";

/// The usage of the full run.
const ALL_SYNOPSIS: &str = "bench [all] [N]";
const ALL_HELP: &[&str] = &[
    "every benchmark below but coalesced alone (root, ~28 min); N goes to the",
    "XDP one. Writes bench/results/<YYYY-MM-DD>.json and .md (P1-P5, HA,",
    "DOIC table)",
];

/// The column the help text of `cargo xtask`'s usage starts in.
const HELP_COLUMN: usize = 19;
/// The width of the usage text: a first help line that would end beyond it goes on the
/// line after the synopsis.
const USAGE_WIDTH: usize = 93;

/// One command's entry in the usage text: `synopsis` two columns in, `help` from
/// [`HELP_COLUMN`] (its first line beside the synopsis when it fits).
fn usage_entry(synopsis: &str, help: &[&str]) -> String {
    let indent = " ".repeat(HELP_COLUMN);
    let mut s = format!("  {synopsis}");
    let mut lines = help.iter();
    if let Some(first) = lines.next() {
        let at = s.chars().count();
        if at + 1 < HELP_COLUMN {
            s.push_str(&" ".repeat(HELP_COLUMN - at));
        } else if at + 2 + first.chars().count() <= USAGE_WIDTH {
            s.push_str("  ");
        } else {
            s.push('\n');
            s.push_str(&indent);
        }
        s.push_str(first);
    }
    s.push('\n');
    for l in lines {
        s.push_str(&indent);
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// The bench lines of `cargo xtask`'s usage text: the full run, then every entry.
pub(crate) fn usage() -> String {
    let mut s = usage_entry(ALL_SYNOPSIS, ALL_HELP);
    for b in &BENCHES {
        s.push_str(&usage_entry(b.synopsis, b.help));
    }
    s
}

/// The names `bench` accepts, for an error.
fn names() -> String {
    let mut v: Vec<&str> = vec!["all"];
    v.extend(BENCHES.iter().map(|b| b.name));
    v.join(", ")
}

/// What `bench ARGS` selects.
struct Selection<'a> {
    /// The entries to run, in order, each with its arguments.
    benches: Vec<(&'static Bench, &'a [String])>,
    /// The full run, which ends in the aggregate report.
    full: bool,
}

fn select(args: &[String]) -> Result<Selection<'_>> {
    let (first, rest) = match args.split_first() {
        Some((f, r)) => (Some(f.as_str()), r),
        None => (None, args),
    };
    if let Some(b) = first.and_then(|f| BENCHES.iter().find(|b| b.name == f)) {
        return Ok(Selection {
            benches: vec![(b, rest)],
            full: false,
        });
    }
    // The full run's arguments are the XDP bench's: run counts or its own flags.
    let all_args = match first {
        None => args,
        Some("all") => rest,
        Some(f) if f.starts_with('-') || f.starts_with(|c: char| c.is_ascii_digit()) => args,
        Some(f) => bail!("bench: no bench named {f:?} (benches: {})", names()),
    };
    let benches = BENCHES
        .iter()
        .filter(|b| b.in_all)
        .map(|b| {
            let a: &[String] = if b.name == ALL_ARGS_TO { all_args } else { &[] };
            (b, a)
        })
        .collect();
    Ok(Selection {
        benches,
        full: true,
    })
}

/// `cargo xtask bench ARGS` (root, toolchain ready): prepares every selected bench, then
/// runs them in order; the full run ends in the aggregate report.
pub(crate) fn cmd(root: &Path, args: &[String]) -> Result<()> {
    let Selection { benches, full } = select(args)?;
    // Before anything long runs: every selected bench's arguments and preflight.
    let runs = benches
        .into_iter()
        .map(|(b, a)| (b.prepare)(root, a))
        .collect::<Result<Vec<Run>>>()?;
    let since = std::time::SystemTime::now();
    let mut h = Harness {
        root: root.to_path_buf(),
        built: false,
    };
    for run in runs {
        run(&mut h)?;
    }
    if full {
        crate::report::aggregate(root, since)?;
    }
    Ok(())
}

/// Fails unless `args` is empty: `bench NAME` takes none (`why` says where its settings
/// are, when anywhere).
fn no_args(name: &str, args: &[String], why: &str) -> Result<()> {
    if !args.is_empty() {
        bail!("bench {name} takes no arguments{why}");
    }
    Ok(())
}

fn xdp(_root: &Path, args: &[String]) -> Result<Run> {
    let args = args.to_vec();
    Ok(Box::new(move |_h: &mut Harness| {
        // The XDP bench builds its own binary (dra-tests' xdp-bench).
        crate::step(
            "bench xdp (P1)",
            crate::cargo()
                .args([
                    "run",
                    "--release",
                    "-p",
                    "dra-tests",
                    "--bin",
                    "xdp-bench",
                    "--",
                ])
                .args(&args),
        )
    }))
}

fn relay(_root: &Path, args: &[String]) -> Result<Run> {
    let args = args.to_vec();
    Ok(Box::new(move |h: &mut Harness| {
        // dra-bench runs the release `dra` binary beside it.
        h.release_build()?;
        crate::step("bench relay (P2)", crate::dra_tool("dra-bench").args(&args))
    }))
}

fn storm_bench(root: &Path, args: &[String]) -> Result<Run> {
    let dra = storm::parse_args(args)?;
    storm::preflight(root)?;
    Ok(Box::new(move |h: &mut Harness| {
        h.release_build()?;
        eprintln!("xtask: bench storm (P3, P4)");
        storm::run(&h.root, dra.as_deref())
    }))
}

fn coalesced_bench(_root: &Path, args: &[String]) -> Result<Run> {
    no_args("coalesced", args, " (its configs are config/bench/*.toml)")?;
    if !lab::namespaces().is_empty() {
        bail!("a lab is up (cargo xtask lab down first)");
    }
    Ok(Box::new(|h: &mut Harness| {
        h.release_build()?;
        coalesced::run(&h.root)
    }))
}

fn flood_bench(root: &Path, args: &[String]) -> Result<Run> {
    let opts = flood::parse_opts(args)?;
    flood::preflight(root)?;
    Ok(Box::new(move |h: &mut Harness| {
        h.release_build()?;
        eprintln!("xtask: bench flood (P5)");
        flood::run(&h.root, &opts)
    }))
}

fn overload_bench(_root: &Path, args: &[String]) -> Result<Run> {
    no_args("overload", args, "")?;
    overload::preflight()?;
    Ok(Box::new(|h: &mut Harness| {
        h.release_build()?;
        eprintln!("xtask: bench overload");
        overload::run(&h.root)
    }))
}

fn ha_bench(_root: &Path, args: &[String]) -> Result<Run> {
    no_args("ha", args, "")?;
    ha::preflight()?;
    Ok(Box::new(|h: &mut Harness| {
        h.release_build()?;
        eprintln!("xtask: bench ha (HA pair)");
        ha::bench::run(&h.root)
    }))
}

fn doic_bench(root: &Path, args: &[String]) -> Result<Run> {
    no_args("doic", args, " (its configs are config/bench/*.toml)")?;
    doic::preflight(root)?;
    Ok(Box::new(|h: &mut Harness| {
        h.release_build()?;
        eprintln!("xtask: bench doic (DOIC)");
        doic::run(&h.root)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    fn selected(a: &[&str]) -> (Vec<(String, Vec<String>)>, bool) {
        let a = args(a);
        let Selection { benches, full } = select(&a).unwrap();
        (
            benches
                .into_iter()
                .map(|(b, r)| (b.name.to_owned(), r.to_vec()))
                .collect(),
            full,
        )
    }

    #[test]
    fn a_name_selects_its_bench_with_the_rest_of_the_arguments() {
        for b in &BENCHES {
            let (v, full) = selected(&[b.name, "--x", "1"]);
            assert_eq!(v, [(b.name.to_owned(), args(&["--x", "1"]))]);
            assert!(!full);
        }
    }

    #[test]
    fn the_full_run_is_every_entry_in_order_and_hands_its_arguments_to_xdp() {
        let in_all: Vec<&str> = BENCHES
            .iter()
            .filter(|b| b.in_all)
            .map(|b| b.name)
            .collect();
        assert_eq!(
            in_all,
            ["xdp", "relay", "storm", "flood", "overload", "ha", "doic"]
        );
        for a in [&[][..], &["all"][..]] {
            let (v, full) = selected(a);
            assert!(full);
            assert_eq!(
                v.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
                in_all
            );
            assert!(v.iter().all(|(_, r)| r.is_empty()));
        }
        for a in [&["5"][..], &["all", "5"][..]] {
            let (v, _) = selected(a);
            assert_eq!(v[0], ("xdp".to_owned(), args(&["5"])));
            assert!(v[1..].iter().all(|(_, r)| r.is_empty()));
        }
        let (v, _) = selected(&["100", "5", "--object", "a=b.o"]);
        assert_eq!(v[0].1, args(&["100", "5", "--object", "a=b.o"]));
    }

    #[test]
    fn an_unknown_name_fails_with_the_list() {
        let e = format!("{:#}", select(&args(&["stomr"])).err().unwrap());
        assert!(e.contains("\"stomr\""), "{e}");
        for b in &BENCHES {
            assert!(e.contains(b.name), "{e}");
        }
    }

    #[test]
    fn benches_without_arguments_refuse_some() {
        let root = crate::workspace_root();
        for name in ["ha", "doic", "coalesced"] {
            let b = BENCHES.iter().find(|b| b.name == name).unwrap();
            let e = (b.prepare)(&root, &args(&["x"])).err().unwrap();
            assert!(format!("{e:#}").contains("takes no arguments"), "{e:#}");
        }
    }

    #[test]
    fn the_usage_names_every_bench_in_table_order() {
        let u = usage();
        let mut at = 0;
        for b in &BENCHES {
            let i = u[at..]
                .find(&format!("  bench {}", b.name))
                .unwrap_or_else(|| panic!("{} not in order in\n{u}", b.name))
                + at;
            at = i + 1;
        }
    }
}
