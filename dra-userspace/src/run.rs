//! `dra run`: attach (or reuse) the fast path, write the config into it, drive
//! dynamic throttling from the DB CPU, publish metrics, until SIGINT or SIGTERM.
//!
//! The Diameter agent ([`crate::agent`]: listeners, peers, routing, relay, marked
//! answers, egress RLF, control socket) runs on the same runtime; at SIGINT/SIGTERM it
//! sends DPR to every open peer before the process exits.
//!
//! Who enforces the ingress limits: with an interface (`--iface` or `[fast_path]
//! interface`) the XDP program; without one the agent itself ([`crate::limiter`],
//! built from the same [`Plan`], same semantics), so configured limits always apply.
//! TLS peers' limits are the agent's limiter's in either case (XDP cannot read TLS
//! records; it keeps their connection guard and the unknown-source drop).
//! Either way the dynamic controller rewrites the rates and the counters are published
//! as the `dra_fastpath_*` metrics.
//!
//! Egress: the agent's RLF takes each group's overall limit; the TC egress program,
//! attached wherever `[fast_path] egress_interface` is set — with XDP or without —
//! takes the other `drop` limits (per destination, per class). A limit that neither
//! would enforce is refused before this runs (`config::load_for`, docs/config.md
//! "Which part enforces a limit").

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tracing::{info, warn};

mod reload;

use crate::{
    config::{Config, Fallback},
    control::{SampleLoop, effective_rate},
    dataplane::{
        AttachMode, Dataplane, DataplaneError, Maps, Plan, PlanError,
        kernel::{Hook, KernelFeatures, Unsupported},
    },
    drl::{self, DrlError, DrlTarget},
    limiter::Limiter,
    metrics::{self, FastPathState, Metrics},
};

/// Options of `dra run` beyond the config file.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Overrides `[fast_path] interface`.
    pub iface: Option<String>,
    pub mode: AttachMode,
    pub pin_dir: PathBuf,
    /// Remove the programs and maps when the agent exits (default: leave them
    /// attached and pinned, so a restart has no traffic gap).
    pub detach_on_exit: bool,
    /// The config file, read again at a reload (`dra reload`, SIGHUP).
    pub config_path: Option<PathBuf>,
    /// Why this kernel cannot load the XDP programs, when `[fast_path] fallback =
    /// "userspace"` has the agent enforce the ingress limits instead ([`check_kernel`]).
    pub fallback: Option<Unsupported>,
}

/// What [`check_kernel`] found.
#[derive(Debug, PartialEq)]
pub enum KernelCheck {
    /// Everything the setup needs loads here (or is pinned already and reused).
    Ok,
    /// The XDP programs cannot load, and `fallback = "userspace"`: run without them.
    Fallback(Unsupported),
}

/// A setup this kernel cannot run.
#[derive(Debug, thiserror::Error)]
#[error("{unsupported}; {remedy}")]
pub struct KernelRefused {
    pub unsupported: Unsupported,
    pub remedy: &'static str,
}

/// Before anything is loaded: whether this kernel can load what `dra run` with XDP on
/// `iface` (if any) and `cfg`'s egress interface needs. What is already pinned in
/// `pin_dir` is reused as it is, so only what must be loaded is probed. Without the
/// XDP programs' features: [`KernelCheck::Fallback`] with `fallback = "userspace"`,
/// else refused; without the TC program's, refused (nothing else enforces its limits).
pub fn check_kernel(
    cfg: &Config,
    iface: Option<&str>,
    pin_dir: &std::path::Path,
) -> Result<KernelCheck, KernelRefused> {
    let xdp = iface.filter(|i| !Dataplane::is_pinned(i, pin_dir));
    let tc = cfg
        .fast_path
        .egress_interface
        .as_deref()
        .filter(|i| !Dataplane::is_egress_pinned(i, pin_dir));
    if xdp.is_none() && tc.is_none() {
        return Ok(KernelCheck::Ok);
    }
    let kernel = KernelFeatures::probe();
    if tc.is_some()
        && let Some(u) = kernel.unsupported(Hook::Tc)
    {
        return Err(KernelRefused {
            unsupported: u,
            remedy: "[fast_path] egress_interface needs it (the limits the TC program \
                     enforces have no other enforcer); remove egress_interface or run on a \
                     kernel `dra verify` accepts",
        });
    }
    match (xdp, kernel.unsupported(Hook::Xdp)) {
        (Some(_), Some(u)) => match cfg.fast_path.fallback {
            Fallback::Userspace => Ok(KernelCheck::Fallback(u)),
            Fallback::None => Err(KernelRefused {
                unsupported: u,
                remedy: "set [fast_path] fallback = \"userspace\" to have the agent enforce \
                         the ingress limits itself, or run on a kernel `dra verify` accepts",
            }),
        },
        _ => Ok(KernelCheck::Ok),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("fast path layout")]
    Plan(#[source] PlanError),
    #[error("fast path")]
    Dataplane(#[source] DataplaneError),
    #[error("dynamic rate limiting")]
    Drl(#[source] DrlError),
    #[error("metrics endpoint")]
    Metrics(#[source] metrics::MetricsError),
    #[error("signal handling")]
    Signal(#[source] std::io::Error),
    #[error("runtime")]
    Runtime(#[source] std::io::Error),
    #[error("diameter agent")]
    Agent(#[source] crate::agent::AgentError),
}

/// What the run loop shares between its tasks.
struct Shared {
    maps: Option<Maps>,
    /// The readers' out-of-band marks, when XDP is attached.
    oob: Option<Arc<crate::oob::OobInbox>>,
    /// The agent's own limiter: every peer's without XDP, the TLS peers' with it.
    limiter: Option<Arc<Limiter>>,
    /// XDP is attached (the limiter then takes only the TLS peers).
    xdp: bool,
    plan: Plan,
    metrics: Metrics,
    /// The running agent's DOIC reporting node follows the throttle (set once the
    /// agent runs), and the throttle last applied, to hand it over then.
    doic: Option<crate::agent::ThrottleSink>,
    throttle: u8,
    /// The slots the DRL controller rewrites (swapped by a reload).
    targets: Vec<DrlTarget>,
    /// Where this run attached XDP (pinned in `pin_dir`), and whether the agent took the
    /// ingress limits over because the kernel cannot load it (`dra_fastpath_state`).
    xdp_iface: Option<String>,
    pin_dir: PathBuf,
    fallback: bool,
}

/// Whether the XDP program this run attached to `iface` is still attached: its pinned
/// link holds it (`dra detach` removes the pin, which detaches it) and the interface
/// still exists in this network namespace (a deleted interface takes the program along).
fn xdp_still_attached(iface: &str, pin_dir: &Path) -> bool {
    let Ok(name) = std::ffi::CString::new(iface) else {
        return false;
    };
    // SAFETY: if_nametoindex(3) reads the NUL-terminated name only.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    index != 0 && Dataplane::is_pinned(iface, pin_dir)
}

/// Who enforces the ingress limits now, into `dra_fastpath_state`.
fn publish_fastpath_state(metrics: &Metrics, iface: Option<&str>, pin_dir: &Path, fallback: bool) {
    metrics.set_fastpath_state(FastPathState::of(iface, fallback, |i| {
        xdp_still_attached(i, pin_dir)
    }));
}

impl Shared {
    /// Copies the fast path's (or the userspace limiter's) counters into the metrics.
    /// With the limiter and TC egress both running (no XDP), the ingress counters are
    /// the limiter's and the egress ones the maps'.
    /// With XDP the TLS peers' class counters are the limiter's, the rest the maps'.
    /// Also says whether the XDP program is still attached (`dra_fastpath_state`).
    fn publish_fastpath(&self) {
        publish_fastpath_state(
            &self.metrics,
            self.xdp_iface.as_deref(),
            &self.pin_dir,
            self.fallback,
        );
        let mut classes = Vec::new();
        let tls_slots: Vec<&crate::dataplane::Slot> = self
            .plan
            .slots
            .iter()
            .filter(|s| self.plan.is_tls_slot(s))
            .collect();
        if let Some(l) = &self.limiter {
            if self.xdp {
                for s in &tls_slots {
                    if let Some(c) = l.slot_counters(s.index) {
                        classes.push((s.owner.clone(), s.class_label.clone(), c));
                    }
                }
            } else {
                self.metrics.set_fastpath_global(&l.global_counters());
                classes.extend(l.class_counters());
            }
        }
        if let Some(o) = &self.oob {
            let st = o.stats();
            self.metrics
                .set_oob_marks(st.received, st.applied, st.expired);
        }
        let egress_only = !self.xdp;
        if let Some(maps) = &self.maps {
            if let Ok(mut stats) = maps.stats() {
                if egress_only {
                    stats.retain(|(c, _)| c.name().starts_with("egress"));
                }
                self.metrics.set_fastpath_global(&stats);
            }
            for s in &self.plan.slots {
                if egress_only && !s.class_label.starts_with("egress:") {
                    continue;
                }
                if tls_slots.iter().any(|t| t.index == s.index) {
                    continue;
                }
                if let Ok(c) = maps.slot_counters(s.index) {
                    classes.push((s.owner.clone(), s.class_label.clone(), c));
                }
            }
        }
        self.metrics.set_fastpath_classes(classes);
    }

    fn apply_throttle(&mut self, throttle: u8) {
        for t in &self.targets {
            let rate = effective_rate(t.static_rate, throttle);
            if let Some(l) = &self.limiter {
                l.set_rate(&t.slot, rate);
            }
            if let Some(maps) = &mut self.maps
                && let Err(e) = maps.set_rate(&t.slot, rate)
            {
                warn!(
                    peer = %t.peer,
                    class = %t.class_label,
                    error = %crate::error_chain(&e),
                    "writing the effective rate failed"
                );
            }
            self.metrics
                .set_effective_rate(&t.peer, &t.class_label, rate);
            self.metrics.set_throttle_percent(&t.peer, throttle);
            if let Some(d) = &self.doic {
                d.set(&t.peer, throttle);
            }
        }
        self.throttle = throttle;
    }
}

/// Runs until SIGINT or SIGTERM.
pub fn run(cfg: Config, opts: RunOptions) -> Result<(), RunError> {
    for w in cfg.warnings() {
        warn!("config: {w}");
    }
    let plan = Plan::new(&cfg).map_err(RunError::Plan)?;
    let metrics = Metrics::new();
    // With the fallback the agent's limiter takes the interface's ingress limits.
    let iface = match &opts.fallback {
        Some(_) => None,
        None => opts
            .iface
            .clone()
            .or_else(|| cfg.fast_path.interface.clone()),
    };
    let egress = cfg.fast_path.egress_interface.clone();
    let mut dataplane = None;
    if let Some(iface) = &iface {
        dataplane =
            Some(Dataplane::attach(iface, opts.mode, &opts.pin_dir).map_err(RunError::Dataplane)?);
    } else if egress.is_some() {
        // An XDP link an earlier run left pinned keeps judging ingress on the maps this
        // run writes, besides the agent's limiter.
        for x in Dataplane::pinned_xdp_links(&opts.pin_dir) {
            warn!(
                iface = %x,
                pin_dir = %opts.pin_dir.display(),
                "an XDP program an earlier run attached is still pinned and enforces \
                 ingress limits too; `dra detach --iface {x}` removes it"
            );
        }
    }
    // TC egress (counting, and policing of the `drop` limits per destination and class)
    // wherever the operator names the upstream interface, with XDP or without: the
    // agent's RLF only takes the groups' overall limits.
    if let Some(eg) = &egress {
        let a = Dataplane::attach_egress(eg, &opts.pin_dir).map_err(RunError::Dataplane)?;
        let how = if a.tcx {
            "TCX"
        } else {
            "clsact qdisc, netlink filter"
        };
        info!(iface = %eg, reused = a.reused, how, "egress program attached");
    }
    let mut maps = match dataplane {
        Some(dp) => {
            info!(
                iface = %dp.iface,
                reused = dp.reused,
                pin_dir = %opts.pin_dir.display(),
                "fast path attached"
            );
            Some(dp.into_maps())
        }
        // TC egress alone: its maps are the pinned ones (created by attach_egress).
        None if egress.is_some() => {
            Some(Maps::open_pinned(&opts.pin_dir).map_err(RunError::Dataplane)?)
        }
        None => None,
    };
    if let Some(m) = &mut maps {
        m.write_plan(&plan).map_err(RunError::Dataplane)?;
    }
    let xdp = iface.is_some();
    // Without XDP the agent enforces the same ingress limits itself (before decoding);
    // with XDP it still enforces the TLS peers' (XDP cannot read their requests).
    let ingress_by = match (&iface, &opts.fallback) {
        (Some(i), _) => format!("XDP on {i}"),
        (None, Some(u)) => format!("the agent (fallback = \"userspace\": {u})"),
        (None, None) => "the agent (no fast path interface)".to_owned(),
    };
    if xdp {
        if plan.peers.iter().any(|p| p.tls) {
            info!("TLS peers: the agent enforces their ingress limits in userspace");
        }
    } else {
        match &opts.fallback {
            Some(u) => warn!(
                "{u}; fallback = \"userspace\": the agent enforces the ingress limits in \
                 userspace (no connection guard, no unknown-peer drop in the kernel)"
            ),
            None => {
                info!("no fast path interface: the agent enforces the ingress limits in userspace")
            }
        }
    }
    let limiter = Some(Arc::new(Limiter::new(&plan)));
    // With XDP: the readers apply the requests it marked out of band.
    let oob = if xdp {
        Some(Arc::new(
            crate::oob::OobInbox::open_pinned(&opts.pin_dir).map_err(RunError::Dataplane)?,
        ))
    } else {
        None
    };
    let ingress = match (&oob, &limiter) {
        (Some(o), _) => crate::agent::io::Ingress::FastPath(o.clone()),
        (None, Some(l)) => crate::agent::io::Ingress::Limiter(l.clone()),
        (None, None) => crate::agent::io::Ingress::None,
    };
    let targets = drl::targets(&cfg, &plan).map_err(RunError::Drl)?;
    let shared = Arc::new(Mutex::new(Shared {
        maps,
        oob,
        limiter: limiter.clone(),
        xdp,
        plan,
        metrics: metrics.clone(),
        doic: None,
        throttle: 0,
        targets: targets.clone(),
        xdp_iface: iface.clone(),
        pin_dir: opts.pin_dir.clone(),
        fallback: opts.fallback.is_some(),
    }));
    publish_fastpath_state(
        &metrics,
        iface.as_deref(),
        &opts.pin_dir,
        opts.fallback.is_some(),
    );
    publish_peer_info(&metrics, &cfg);
    // Static rates first (a restart after throttling must not keep a stale rate).
    shared.lock().expect("lock").apply_throttle(0);

    let server = match cfg.metrics.address {
        Some(addr) => Some(metrics::serve(addr, metrics.clone()).map_err(RunError::Metrics)?),
        None => None,
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    rt.block_on(async {
        // The programs' rare events (resync, hole timeout, unknown-peer drops, ...) as
        // debug lines; without them the fast path works as well.
        let _events = match (&iface, &egress) {
            (None, None) => None,
            _ => crate::dataplane::events::spawn(&opts.pin_dir)
                .inspect_err(|e| {
                    warn!(error = %crate::error_chain(e), "fast-path events are not logged");
                })
                .ok(),
        };
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(RunError::Signal)?;
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(RunError::Signal)?;
        let control = match (&cfg.db_cpu_profile, targets.is_empty()) {
            (Some(p), false) => Some(spawn_controller(p, shared.clone(), 0)?),
            _ => None,
        };
        let (reload_tx, mut reload_rx) = tokio::sync::mpsc::channel(4);
        let info = Arc::new(Mutex::new(reload::initial_info(
            opts.config_path.as_deref(),
        )));
        // The overload control sheds in the fast path where XDP reads the requests (the
        // readers' table, inside the limiter, takes the rest).
        let mut shed_ports: Vec<Arc<dyn crate::overload::ShedPort>> = Vec::new();
        if xdp {
            match crate::dataplane::overload::FastPathShed::open_pinned(&opts.pin_dir) {
                Ok(p) => shed_ports.push(Arc::new(p)),
                Err(e) => warn!(
                    error = %crate::error_chain(&e),
                    "the fast path has no overload maps (pinned by an older version? `dra \
                     detach` and restart): overload shedding is done by the agent's readers \
                     only for the connections XDP cannot read"
                ),
            }
        }
        let agent_opts = crate::agent::AgentOptions {
            ingress,
            ingress_by,
            limiter: limiter.clone(),
            reload: Some(reload_tx),
            config_info: Some(info.clone()),
            shed_ports,
            ..Default::default()
        };
        let mut agent = crate::agent::start(cfg.clone(), agent_opts, metrics.clone())
            .await
            .map_err(RunError::Agent)?;
        info!(listeners = ?agent.listen_addrs(), "diameter agent running");
        notify(&[sd_notify::NotifyState::Status(
            "starting: opening server connections",
        )]);
        {
            let mut sh = shared.lock().expect("lock");
            let sink = agent.throttle_sink();
            for t in &targets {
                sink.set(&t.peer, sh.throttle);
            }
            sh.doic = Some(sink);
        }
        let stats = {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    shared.lock().expect("lock").publish_fastpath();
                }
            })
        };
        let mut reloader = reload::Reloader {
            path: opts.config_path.clone(),
            setup: match opts.fallback {
                Some(_) => crate::config::Setup::Fallback,
                None => crate::config::Setup::Run {
                    iface: opts.iface.clone(),
                },
            },
            cfg: cfg.clone(),
            info,
            metrics: metrics.clone(),
            metrics_server: server,
            control,
        };
        let mut ready = false;
        loop {
            tokio::select! {
                // systemd `Type=notify`: ready once the fast path is attached, its maps
                // written, the listeners bound and the agent ready (an open connection in
                // every routed group, or its startup wait over; docs/operations.md).
                // Nothing is sent without $NOTIFY_SOCKET.
                _ = agent.ready(), if !ready => {
                    ready = true;
                    notify(&[
                        sd_notify::NotifyState::Ready,
                        sd_notify::NotifyState::Status("running"),
                    ]);
                }
                _ = tokio::signal::ctrl_c() => {
                    info!("SIGINT");
                    break;
                }
                _ = term.recv() => {
                    info!("SIGTERM");
                    break;
                }
                _ = hup.recv() => {
                    notify(&[sd_notify::NotifyState::Reloading]);
                    reloader.reload(false, &shared, &mut agent).await;
                    // Before the agent is ready, READY=1 comes when it is.
                    if ready {
                        notify(&[sd_notify::NotifyState::Ready]);
                    }
                }
                Some(req) = reload_rx.recv() => {
                    if !req.dry_run {
                        notify(&[sd_notify::NotifyState::Reloading]);
                    }
                    let r = reloader.reload(req.dry_run, &shared, &mut agent).await;
                    if !req.dry_run && ready {
                        notify(&[sd_notify::NotifyState::Ready]);
                    }
                    let _ = req.reply.send(r);
                }
            }
        }
        notify(&[sd_notify::NotifyState::Stopping]);
        agent.shutdown().await;
        stats.abort();
        if let Some(c) = reloader.control.take() {
            c.stop();
        }
        Ok::<(), RunError>(())
    })?;
    let attached = iface.is_some() || egress.is_some();
    if opts.detach_on_exit && attached {
        let mut removed = 0;
        if let Some(eg) = egress.as_deref().filter(|eg| Some(*eg) != iface.as_deref()) {
            removed += Dataplane::detach(Some(eg), &opts.pin_dir)
                .map_err(RunError::Dataplane)?
                .len();
        }
        if let Some(iface) = &iface {
            removed += Dataplane::detach(Some(iface), &opts.pin_dir)
                .map_err(RunError::Dataplane)?
                .len();
        }
        info!(removed, "fast path detached");
    } else if attached {
        info!(
            pin_dir = %opts.pin_dir.display(),
            "leaving the fast path attached and pinned (dra detach removes it)"
        );
    }
    Ok(())
}

/// The configured peers into `dra_peer_info` (at start and after each applied reload).
pub(crate) fn publish_peer_info(metrics: &Metrics, cfg: &Config) {
    use crate::config::ConfigName;
    metrics.set_peer_info(
        cfg.peers
            .iter()
            .map(|p| (p.name.as_str(), p.role.name(), p.group.as_deref())),
    );
}

/// One sd_notify message; a failure is logged, never fatal.
fn notify(state: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        warn!(error = %e, "sd_notify failed");
    }
}

/// How often a DB CPU source that keeps failing is reported again (the first failure
/// and the recovery are logged at once).
const SOURCE_FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// The DB CPU controller's thread and its stop flag.
struct Controller {
    thread: std::thread::JoinHandle<()>,
    stop: Arc<AtomicBool>,
}

impl Controller {
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// The DRL controller thread; `throttle`: where it starts (0 at start, the throttle in
/// force when a live reload changes the profile).
fn spawn_controller(
    p: &crate::config::DbCpuProfile,
    shared: Arc<Mutex<Shared>>,
    throttle: u8,
) -> Result<Controller, RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    let targets = shared.lock().expect("lock").targets.len();
    let (profile, settings) = drl::settings(p).map_err(RunError::Drl)?;
    let period = settings.period;
    let mut source =
        drl::source(&p.source, period.min(Duration::from_secs(1))).map_err(RunError::Drl)?;
    info!(
        source = %source.describe(),
        period = ?period,
        targets,
        "dynamic throttling on"
    );
    let start = Instant::now();
    let mut lp = SampleLoop::resume(profile, settings, Duration::ZERO, throttle)
        .map_err(|e| RunError::Drl(DrlError::Loop(e)))?;
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut next = Instant::now();
        // Failing samples since the source was last up, and when that was last logged.
        let (mut failing, mut logged_at): (u64, Option<Instant>) = (0, None);
        while !stop.load(Ordering::Relaxed) {
            next += period;
            let now = start.elapsed();
            match source.sample() {
                Ok(Some(cpu)) => {
                    if failing > 0 {
                        info!(failed_samples = failing, "DB CPU source answering again");
                        (failing, logged_at) = (0, None);
                    }
                    let _ = lp.sample(now, cpu);
                    let m = &shared.lock().expect("lock").metrics;
                    m.set_db_cpu_percent(cpu);
                    m.set_db_cpu_source_up(true);
                }
                Ok(None) => lp.tick(now),
                Err(e) => {
                    failing += 1;
                    if logged_at.is_none_or(|t| t.elapsed() >= SOURCE_FAILURE_LOG_EVERY) {
                        warn!(
                            error = %crate::error_chain(&e),
                            failed_samples = failing,
                            "DB CPU sample failed (logged again every {}s while it fails)",
                            SOURCE_FAILURE_LOG_EVERY.as_secs()
                        );
                        logged_at = Some(Instant::now());
                    }
                    shared
                        .lock()
                        .expect("lock")
                        .metrics
                        .set_db_cpu_source_up(false);
                    lp.tick(now);
                }
            }
            while let Some(ev) = lp.poll_event() {
                let mut sh = shared.lock().expect("lock");
                sh.metrics.record_throttle_event(None, &ev);
                if matches!(ev.reason, crate::control::Reason::SourceMissing { .. }) {
                    warn!(event = %ev, "DB CPU source missing");
                    sh.metrics.inc_db_cpu_missing();
                }
                if ev.changed() {
                    info!(event = %ev, "throttle changed");
                    sh.apply_throttle(ev.to);
                }
            }
            // Sleep in short steps so a stop request is seen promptly.
            while !stop.load(Ordering::Relaxed) && Instant::now() < next {
                std::thread::sleep(
                    next.saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(100)),
                );
            }
        }
    });
    Ok(Controller { thread, stop: flag })
}
