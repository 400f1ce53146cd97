//! A live reload of `dra run` (`dra reload`, SIGHUP; docs/operations.md "Reload").
//!
//! 1. Read the file the agent was started with and validate it as `dra run` does
//!    (every error as file:line:column; the running config stays).
//! 2. [`diff`] it against the running config; a change that cannot be applied live
//!    is refused with the reason, nothing applied. `--dry-run` stops here.
//! 3. Build everything that can fail (fast-path plan, DRL targets, metrics listener)
//!    before changing anything.
//! 4. The agent: listeners, routes and groups (swapped at once), peers (new ones
//!    dialled, removed ones DPR'd) — [`crate::agent::AgentHandle::reload`].
//! 5. The fast path: the new plan renumbered onto the running one
//!    ([`Plan::remap_onto`]: kept buckets keep their slot and tokens, new ones start
//!    full) and written with the DRL throttle in force applied to its targets, so no
//!    rate is ever written at a value the controller would not have; without XDP the
//!    userspace limiter is laid out the same way ([`crate::limiter::Limiter::relayout`]).
//! 6. The DRL targets swapped; a changed DB CPU profile restarts the controller at the
//!    throttle in force (no step: the new profile acts from its first sample); turning
//!    dynamic rate limiting off ends the throttle.
//! 7. The metrics listener moved; `dra status`'s config hash, time and outcome; one
//!    log line; `dra_config_reloads_total{outcome}`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::{Controller, Shared, spawn_controller};
use crate::agent::{AgentHandle, ConfigInfo};
use crate::config::diff::{ConfigDiff, diff};
use crate::config::{self, Config, Setup};
use crate::control::effective_rate;
use crate::dataplane::Plan;
use crate::drl;
use crate::metrics::{self, Metrics};

/// What a reload needs besides the shared fast-path state and the agent.
pub(super) struct Reloader {
    pub path: Option<std::path::PathBuf>,
    pub setup: Setup,
    /// The running config.
    pub cfg: Config,
    pub info: Arc<Mutex<ConfigInfo>>,
    pub metrics: Metrics,
    pub metrics_server: Option<metrics::ServerHandle>,
    pub control: Option<Controller>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The config info at start: the file's hash now.
pub(super) fn initial_info(path: Option<&Path>) -> ConfigInfo {
    ConfigInfo {
        path: path.map(Path::to_path_buf),
        sha256: path
            .and_then(|p| std::fs::read(p).ok())
            .map_or_else(|| "-".into(), |b| sha256_hex(&b)),
        loaded_at: unix_now(),
        last_reload: None,
    }
}

/// Why a reload did not apply, and the metric's outcome label.
struct Failure {
    outcome: &'static str,
    text: String,
}

impl Failure {
    fn new(outcome: &'static str, text: impl Into<String>) -> Failure {
        Failure {
            outcome,
            text: text.into(),
        }
    }
}

/// Everything built before anything is applied.
struct Prepared {
    cfg: Config,
    bytes_sha: String,
    diff: ConfigDiff,
    plan: Plan,
    fresh: Vec<u32>,
    targets: Vec<drl::DrlTarget>,
    server: Option<Option<metrics::ServerHandle>>,
}

impl Reloader {
    /// One reload; returns (success, text for the operator). Logs one line.
    pub async fn reload(
        &mut self,
        dry_run: bool,
        shared: &Arc<Mutex<Shared>>,
        agent: &mut AgentHandle,
    ) -> (bool, String) {
        let r = self.run(dry_run, shared, agent).await;
        let (outcome, ok, text, summary) = match r {
            Ok((outcome, d)) => {
                let text = if dry_run {
                    d.to_string()
                } else {
                    format!("{outcome}: {}\n{d}", d.summary())
                };
                (outcome, true, text, d.summary())
            }
            Err(f) => {
                let summary = f.text.lines().next().unwrap_or("").to_owned();
                (f.outcome, false, f.text, summary)
            }
        };
        self.metrics.inc_config_reload(outcome);
        if ok {
            info!(outcome, changes = %summary, dry_run, "config reload");
        } else {
            warn!(outcome, error = %summary, dry_run, "config reload failed");
        }
        if !dry_run {
            let at = unix_now();
            self.info.lock().expect("lock").last_reload =
                Some((at, format!("{outcome}: {summary}")));
        }
        (ok, text)
    }

    async fn run(
        &mut self,
        dry_run: bool,
        shared: &Arc<Mutex<Shared>>,
        agent: &mut AgentHandle,
    ) -> Result<(&'static str, ConfigDiff), Failure> {
        let p = self.prepare(dry_run, shared)?;
        if dry_run {
            return Ok(("dry_run", p.diff));
        }
        if p.diff.is_empty() {
            self.loaded(&p.bytes_sha);
            return Ok(("unchanged", p.diff));
        }
        agent
            .reload(p.cfg.clone(), &p.diff)
            .await
            .map_err(|e| Failure::new("failed", format!("agent: {e}\n")))?;
        // The fast path (the agent's new peers are known to it from now on).
        let drl_restart = self.cfg.db_cpu_profile != p.cfg.db_cpu_profile
            || self.cfg.global.dynamic_rate_limiting != p.cfg.global.dynamic_rate_limiting;
        {
            let mut sh = shared.lock().expect("lock");
            let drl_on = p.cfg.global.dynamic_rate_limiting && p.cfg.db_cpu_profile.is_some();
            if drl_restart && !drl_on {
                // Dynamic rate limiting off: the static rates.
                sh.throttle = 0;
            }
            let throttle = sh.throttle;
            let mut written = p.plan.clone();
            for t in &p.targets {
                if let Some(s) = written.slots.iter_mut().find(|s| s.index == t.slot.index)
                    && let Some(l) = &mut s.limit
                {
                    l.rate = effective_rate(t.static_rate, throttle);
                }
            }
            if let Some(maps) = &mut sh.maps {
                for &f in &p.fresh {
                    maps.reset_bucket(f)
                        .map_err(|e| Failure::new("failed", crate::error_chain(&e)))?;
                }
                maps.write_plan(&written)
                    .map_err(|e| Failure::new("failed", crate::error_chain(&e)))?;
            }
            if let Some(l) = &sh.limiter {
                l.relayout(&written, &p.fresh);
            }
            sh.plan = p.plan.clone();
            sh.targets = p.targets.clone();
            sh.apply_throttle(throttle);
        }
        if drl_restart {
            if let Some(c) = self.control.take() {
                c.stop();
            }
            let (empty, throttle) = {
                let sh = shared.lock().expect("lock");
                (sh.targets.is_empty(), sh.throttle)
            };
            if let (Some(prof), false) = (&p.cfg.db_cpu_profile, empty) {
                self.control = Some(
                    spawn_controller(prof, shared.clone(), throttle)
                        .map_err(|e| Failure::new("failed", crate::error_chain(&e)))?,
                );
            }
        }
        if let Some(server) = p.server {
            self.metrics_server = server;
        }
        super::publish_peer_info(&self.metrics, &p.cfg);
        self.cfg = p.cfg;
        self.loaded(&p.bytes_sha);
        Ok(("applied", p.diff))
    }

    fn loaded(&self, sha: &str) {
        let mut i = self.info.lock().expect("lock");
        i.sha256 = sha.to_owned();
        i.loaded_at = unix_now();
    }

    fn prepare(&self, dry_run: bool, shared: &Arc<Mutex<Shared>>) -> Result<Prepared, Failure> {
        let Some(path) = &self.path else {
            return Err(Failure::new(
                "failed",
                "the agent was started without a config file\n",
            ));
        };
        let bytes = std::fs::read(path).map_err(|e| {
            Failure::new(
                "invalid",
                format!("{}:0:0: cannot read config: {e}\n", path.display()),
            )
        })?;
        let text = String::from_utf8_lossy(&bytes);
        let cfg = match config::parse_for(&text, &path.display().to_string(), &self.setup) {
            Ok(c) => c.config,
            Err(e) => {
                return Err(Failure::new(
                    "invalid",
                    format!("{e}the running config stays\n"),
                ));
            }
        };
        let d = diff(&self.cfg, &cfg);
        if !d.applicable() {
            return Err(Failure::new(
                "refused",
                format!("{d}nothing applied: these need a restart\n"),
            ));
        }
        let old_plan = shared.lock().expect("lock").plan.clone();
        let fail = |e: &dyn std::error::Error| Failure::new("failed", crate::error_chain(e));
        let fresh_plan = Plan::new(&cfg).map_err(|e| fail(&e))?;
        let targets = drl::targets(&cfg, &fresh_plan).map_err(|e| fail(&e))?;
        let mut plan = fresh_plan;
        let remap = plan.remap_onto(&old_plan).map_err(|e| fail(&e))?;
        let targets = targets
            .into_iter()
            .map(|mut t| {
                t.slot.index = remap.slot(t.slot.index);
                t
            })
            .collect();
        // A new metrics listener is bound before anything changes (the old one stays
        // bound until the reload is applied).
        let server = match &d.metrics {
            Some((_, new)) if !dry_run => Some(match new {
                Some(a) => Some(metrics::serve(*a, self.metrics.clone()).map_err(|e| fail(&e))?),
                None => None,
            }),
            _ => None,
        };
        Ok(Prepared {
            cfg,
            bytes_sha: sha256_hex(&bytes),
            diff: d,
            plan,
            fresh: remap.fresh,
            targets,
            server,
        })
    }
}
