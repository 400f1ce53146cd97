//! What every bench run of the agent does the same way (storm, DOIC, coalesced, flood, HA;
//! the demo's start): `dra run` started in a namespace ([`Site`]) and waited for until its
//! upstreams are open, a gateway `dra-loadgen` beside it, both watched while xtask waits for the
//! instants it measures at, then the end of the run: the gateway's exit, the agent's
//! clean exit on SIGINT, and a fast path left attached removed.
//!
//! The relay bench is not built on it: `dra-bench` (dra-tools) compares three relay
//! programs (`dra run`, `freeDiameterd`, an Erlang/OTP relay), none with a fast path,
//! against closed-loop clients and servers that run inside its own process on one
//! runtime, so that every relay meets the same single-core simulators; a relay is ready
//! when every server has seen its CER. What it shares with the benches here is its
//! namespaces (netlab) and its results, the typed `dra_report::relay` report that the
//! aggregate (`crate::report`) parses back.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use dra_report::client::{Report, Row};

use crate::{
    lab::{self, Bins},
    metrics::{self, Snap},
    procs::{self, Proc},
};

/// Where an agent runs: its namespace, its client-facing interface (where XDP attaches),
/// its pin dir and the upstream peers it must have open to be ready.
pub(crate) struct Site {
    pub(crate) ns: &'static str,
    pub(crate) iface: &'static str,
    pub(crate) pin_dir: &'static str,
    pub(crate) upstreams: &'static [&'static str],
    /// Where the processes' pids go, where the lab's `down` finds them after a crash;
    /// the flood bench's topology keeps none.
    pub(crate) pid_files: Option<PidFiles>,
}

/// A lab's pid files: its state dir and the name of the agent's.
pub(crate) struct PidFiles {
    pub(crate) dir: &'static str,
    pub(crate) agent: &'static str,
}

/// The lab of `lab::up` (storm, DOIC, coalesced, demo).
pub(crate) const LAB: Site = Site {
    ns: lab::NS_DRA,
    iface: lab::DRA_CLIENT_IF,
    pin_dir: lab::PIN_DIR,
    upstreams: &lab::UPSTREAMS,
    pid_files: Some(PidFiles {
        dir: lab::STATE_DIR,
        agent: "dra",
    }),
};

/// The gateway's agent-facing address in every lab: the agent's listener.
const AGENT_LISTENER: &str = "198.18.1.1:3868";

impl Site {
    /// Whether an XDP program is attached to the client-facing interface.
    pub(crate) fn xdp_attached(&self) -> bool {
        lab::ipn(self.ns, &["link", "show", self.iface]).is_ok_and(|o| o.contains("xdp"))
    }

    fn fast_path_left(&self) -> bool {
        self.xdp_attached() || Path::new(self.pin_dir).exists()
    }

    /// Fails when a fast path is still there before run `run`.
    pub(crate) fn ensure_detached(&self, run: &str) -> Result<()> {
        ensure!(
            !self.fast_path_left(),
            "XDP still attached on {} or {} present before run {run}",
            self.iface,
            self.pin_dir
        );
        Ok(())
    }

    /// Whether XDP is attached now, failing unless that is what run `run`'s config says.
    pub(crate) fn ensure_attached(&self, run: &str, config_attaches: bool) -> Result<bool> {
        let attached = self.xdp_attached();
        ensure!(
            attached == config_attaches,
            "run {run}: XDP on {} is {} but the config says {}",
            self.iface,
            if attached { "attached" } else { "not attached" },
            if config_attaches {
                "attach"
            } else {
                "no fast path"
            }
        );
        Ok(attached)
    }

    /// The agent's metrics, fetched inside its namespace ([`metrics::scrape`]).
    pub(crate) fn scrape(&self) -> Result<Snap> {
        metrics::scrape(self.ns, metrics::METRICS_ADDR)
    }

    /// Whether the agent says it is ready (`dra_ready`: listeners bound, an open
    /// connection in every routed group) and every upstream peer of this site is open
    /// (a peer without its state series yet is not): what a bench needs before its
    /// traffic starts.
    pub(crate) fn upstreams_open(&self, s: &Snap) -> bool {
        s.sum("dra_ready", &[]).is_ok_and(|v| v == 1.0)
            && self.upstreams.iter().all(|p| {
                s.sum("dra_peer_state", &[("peer", p), ("state", "open")])
                    .is_ok_and(|v| v == 1.0)
            })
    }

    /// Starts `cmd` (built for this site's namespace) with its output in `log`; `tag`
    /// names its pid file.
    pub(crate) fn spawn(
        &self,
        log: &Path,
        name: &str,
        tag: &str,
        cmd: &mut Command,
    ) -> Result<Proc> {
        let child = match &self.pid_files {
            Some(p) => procs::spawn_to(p.dir, log, tag, cmd)?,
            None => procs::spawn_logging(log, name, cmd)?,
        };
        Ok(Proc::new(name, child))
    }

    /// Removes the pid file of `tag`, a process of [`Site::spawn`]'s that has ended.
    fn forget(&self, tag: &str) {
        if let Some(p) = &self.pid_files {
            procs::remove_pid_file(p.dir, tag);
        }
    }

    /// The name of the agent's pid file.
    pub(crate) fn agent_tag(&self) -> &'static str {
        self.pid_files.as_ref().map_or("dra", |p| p.agent)
    }

    /// `cmd` (the `dra` binary, built for this site's namespace) made `dra run --config
    /// CONFIG`, pinning to this site's pin dir and detaching on exit, `RUST_LOG=rust_log`.
    pub(crate) fn agent_command(&self, mut cmd: Command, config: &Path, rust_log: &str) -> Command {
        cmd.args(["run", "--config"])
            .arg(config)
            .args(["--pin-dir", self.pin_dir, "--detach-on-exit"])
            .env("RUST_LOG", rust_log);
        cmd
    }

    /// Waits up to 40 s until the agent's metrics show `ready` (`what` says what that
    /// is); fails at once when it exits.
    pub(crate) fn wait_ready(
        &self,
        dra: &mut Proc,
        log: &Path,
        what: &str,
        ready: impl Fn(&Snap) -> bool,
    ) -> Result<()> {
        let end = Instant::now() + Duration::from_secs(40);
        loop {
            procs::interrupted()?;
            if let Some(st) = dra.exited() {
                bail!(
                    "dra run exited ({st}); log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            // One silent attempt per poll: an agent still starting refuses connections.
            let last = match metrics::probe(self.ns, metrics::METRICS_ADDR)? {
                Ok(s) if ready(&s) => return Ok(()),
                Ok(_) => format!("metrics answered, not {what}"),
                Err(e) => format!("{e:#}"),
            };
            ensure!(
                Instant::now() < end,
                "the agent did not become ready in 40 s ({what}; last poll: {last}); log {}",
                log.display()
            );
            // The poll interval.
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts [`Site::agent_command`] (quiet: the same logging in every run), its output
    /// in `log`, and waits until its upstreams are open.
    pub(crate) fn start_agent_ready(
        &self,
        cmd: Command,
        config: &Path,
        log: PathBuf,
    ) -> Result<Agent<'_>> {
        let mut cmd = self.agent_command(cmd, config, "warn");
        let mut dra = self.spawn(&log, "dra run", self.agent_tag(), &mut cmd)?;
        self.wait_ready(&mut dra, &log, "ready, upstreams open", |s| {
            self.upstreams_open(s)
        })?;
        Ok(Agent {
            site: self,
            dra,
            log,
        })
    }

    /// After a run: when the agent left its fast path attached, `dra detach`.
    pub(crate) fn detach_left(&self, bins: &Bins, run: &str) -> Result<()> {
        if self.fast_path_left() {
            eprintln!("xtask: the fast path was left attached after run {run}: dra detach");
            let mut d = lab::command_in(self.ns, &bins.dra)?;
            d.args(["detach", "--iface", self.iface, "--pin-dir", self.pin_dir]);
            crate::step("dra detach", &mut d)?;
        }
        Ok(())
    }
}

/// The files of one gateway `dra-loadgen client`: `<dir>/<peer>-rows.jsonl`,
/// `<dir>/<peer>-summary.json` and its log `<dir>/<peer>.log`.
pub(crate) struct ClientFiles {
    pub(crate) rows: PathBuf,
    pub(crate) summary: PathBuf,
    pub(crate) log: PathBuf,
}

impl ClientFiles {
    pub(crate) fn new(dir: &Path, peer: &str) -> ClientFiles {
        ClientFiles {
            rows: dir.join(format!("{peer}-rows.jsonl")),
            summary: dir.join(format!("{peer}-summary.json")),
            log: dir.join(format!("{peer}.log")),
        }
    }

    /// The client's summary (it writes it when it finishes by itself); a field missing
    /// or renamed is an error naming it.
    pub(crate) fn summary(&self) -> Result<Report> {
        let text = std::fs::read_to_string(&self.summary).with_context(|| {
            format!(
                "no client summary {}; log {}",
                self.summary.display(),
                self.log.display()
            )
        })?;
        Ok(dra_report::parse(
            &text,
            &self.summary.display().to_string(),
        )?)
    }

    /// The client's per-second rows (complete once it finished by itself); a line that
    /// does not parse is an error naming it.
    pub(crate) fn rows(&self) -> Result<Vec<Row>> {
        let text = std::fs::read_to_string(&self.rows)
            .with_context(|| format!("no client rows {}", self.rows.display()))?;
        Ok(dra_report::parse_lines(
            &text,
            &self.rows.display().to_string(),
        )?)
    }
}

/// Makes `cmd` (the `dra-loadgen` binary) one gateway peer `peer` (Origin-Host
/// `<peer>.lab.example`) connecting from `src` to the agent and playing `scenario`
/// quietly, its rows and summary in `files`.
pub(crate) fn gateway_client<'c>(
    cmd: &'c mut Command,
    peer: &str,
    src: &str,
    scenario: &Path,
    files: &ClientFiles,
) -> &'c mut Command {
    cmd.args(["client", "--connect", AGENT_LISTENER, "--bind", src])
        .args([
            "--peers",
            "1",
            "--origin-host",
            &format!("{peer}.lab.example"),
        ])
        .args(["--tw", "6", "--quiet", "--scenario"])
        .arg(scenario)
        .arg("--rows")
        .arg(&files.rows)
        .arg("--summary-json")
        .arg(&files.summary)
}

/// A `dra run` that is ready, with its log.
pub(crate) struct Agent<'s> {
    site: &'s Site,
    dra: Proc,
    log: PathBuf,
}

impl<'s> Agent<'s> {
    pub(crate) fn pid(&self) -> Result<u32> {
        self.dra.pid().context("dra run has no pid")
    }

    /// Fails when the agent has exited (`when` says during what).
    pub(crate) fn ensure_running(&mut self, when: &str) -> Result<()> {
        if let Some(st) = self.dra.exited() {
            bail!("dra run exited {when} ({st}); log {}", self.log.display());
        }
        Ok(())
    }

    /// SIGKILL (a fault a bench injects): the agent is gone at once, nothing cleaned up.
    pub(crate) fn kill(&mut self) {
        self.dra.kill();
        self.site.forget(self.site.agent_tag());
    }

    /// Stops the agent (SIGINT, up to 10 s), failing unless it exits cleanly.
    pub(crate) fn stop(&mut self) -> Result<()> {
        let st = self.dra.stop(Duration::from_secs(10));
        self.site.forget(self.site.agent_tag());
        ensure!(
            st.is_some_and(|s| s.success()),
            "dra run did not exit cleanly on SIGINT ({st:?}); log {}",
            self.log.display()
        );
        Ok(())
    }

    /// Lets the agent run on after this is dropped (a lab left up for the operator).
    pub(crate) fn leave_running(self) {
        self.dra.leave_running();
    }

    /// Starts the gateway `cmd` (`name`; `tag`, its peer, names its pid file) with its
    /// output in `log`: the run is under way.
    pub(crate) fn start_client(
        self,
        cmd: &mut Command,
        name: &str,
        tag: &str,
        log: &Path,
    ) -> Result<Run<'s>> {
        Ok(Run {
            client: self.site.spawn(log, name, tag, cmd)?,
            client_tag: tag.to_owned(),
            client_log: log.to_owned(),
            agent: self,
        })
    }
}

/// How long before the end of a wait a client may exit cleanly without it being early.
const CLIENT_EXIT_SLACK: Duration = Duration::from_secs(2);

/// A run under way: the agent and one gateway client.
pub(crate) struct Run<'s> {
    agent: Agent<'s>,
    client: Proc,
    client_tag: String,
    client_log: PathBuf,
}

impl Run<'_> {
    /// Sleeps until `t`, failing on Ctrl-C or when the agent or the client exits early.
    pub(crate) fn wait_until(&mut self, t: Instant) -> Result<()> {
        loop {
            procs::interrupted()?;
            self.agent.ensure_running("during the run")?;
            let now = Instant::now();
            // A client that ended cleanly at most CLIENT_EXIT_SLACK before `t` ran its
            // phases out: its clock started a little before ours, or this wake-up came late
            // on a busy machine. Its summary is checked afterwards.
            if let Some(st) = self.client.exited()
                && !(st.success() && now + CLIENT_EXIT_SLACK >= t)
            {
                bail!(
                    "the load generator exited early ({st}); log {}",
                    self.client_log.display()
                );
            }
            if now >= t {
                return Ok(());
            }
            std::thread::sleep((t - now).min(Duration::from_millis(20)));
        }
    }

    /// Waits until the client has finished by itself, at the latest by `deadline`.
    pub(crate) fn client_finished(&mut self, deadline: Instant) -> Result<()> {
        while self.client.exited().is_none() {
            procs::interrupted()?;
            ensure!(
                Instant::now() < deadline,
                "the load generator did not finish in time; log {}",
                self.client_log.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.agent.site.forget(&self.client_tag);
        Ok(())
    }

    /// Stops the agent (SIGINT, up to 10 s), failing unless it exits cleanly.
    pub(crate) fn stop_agent(&mut self) -> Result<()> {
        self.agent.stop()
    }
}

/// `dra check-config` on each of `configs` (relative to `root`).
pub(crate) fn check_configs(root: &Path, bins: &Bins, configs: &[&str]) -> Result<()> {
    for cfg in configs {
        let out = Command::new(&bins.dra)
            .arg("check-config")
            .arg(root.join(cfg))
            .output()?;
        ensure!(
            out.status.success(),
            "dra check-config {cfg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Creates `<out>/<name>/` for the files of one run.
pub(crate) fn run_files(out: &Path, name: &str) -> Result<PathBuf> {
    let dir = out.join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

/// Creates `results/bench-<bench>-<timestamp>/` for a bench's run files.
pub(crate) fn run_dir(root: &Path, bench: &str) -> Result<PathBuf> {
    let out = root
        .join("results")
        .join(format!("bench-{bench}-{}", crate::results::timestamp()));
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway's summary as `dra-loadgen client` wrote it in a storm bench run (the
    /// first run's `client_summary` of bench/results/storm-latest.json).
    fn recorded_summary() -> String {
        let path = crate::workspace_root().join("bench/results/storm-latest.json");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        serde_json::to_string_pretty(&doc["runs"][0]["client_summary"]).unwrap()
    }

    #[test]
    fn a_renamed_field_in_a_client_summary_fails_the_bench_naming_it() {
        let dir = std::env::temp_dir().join(format!("xtask-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = ClientFiles::new(&dir, "pgw1");
        let text = recorded_summary();
        std::fs::write(&files.summary, &text).unwrap();
        let r = files.summary().expect("the recorded summary parses");
        assert!(r.class("gx_ccr_i").sent > 0, "{r:?}");
        std::fs::write(
            &files.summary,
            text.replace("\"timeouts\"", "\"time_outs\""),
        )
        .unwrap();
        let e = format!("{:#}", files.summary().unwrap_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("pgw1-summary.json"), "{e}");
        assert!(e.contains("time_outs"), "{e}");
    }
}
