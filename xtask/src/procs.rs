//! The processes xtask starts for the lab's runs (demo, storm, coalesced): a wrapper that
//! stops them when dropped, spawning with a log file and a pid file in the lab's state
//! dir, and SIGINT/SIGTERM/SIGHUP turned into a flag the long loops poll.

use std::{
    path::Path,
    process::Child,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::lab;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// From now on SIGINT, SIGTERM and SIGHUP only raise a flag, seen by [`interrupted`].
pub(crate) fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// An error once one of those signals has arrived.
pub(crate) fn interrupted() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// A process of a run (demo, storm, coalesced), stopped (SIGINT, then SIGKILL) when dropped.
pub(crate) struct Proc {
    name: String,
    child: Option<Child>,
    status: Option<std::process::ExitStatus>,
}

impl Proc {
    pub(crate) fn new(name: &str, child: Child) -> Proc {
        Proc {
            name: name.to_owned(),
            child: Some(child),
            status: None,
        }
    }

    /// Its pid while it has not been reaped.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its exit status, once it has exited (reaped here, remembered).
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        if self.status.is_none()
            && let Some(c) = self.child.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            self.status = Some(st);
            self.child = None;
        }
        self.status
    }

    /// SIGKILL, at once (a fault a bench injects); the exit status.
    pub(crate) fn kill(&mut self) -> Option<std::process::ExitStatus> {
        if self.exited().is_none()
            && let Some(mut c) = self.child.take()
        {
            let _ = c.kill();
            self.status = c.wait().ok();
        }
        self.status
    }

    /// Lets it run on after this is dropped (a lab left up for the operator).
    pub(crate) fn leave_running(mut self) {
        self.child = None;
    }

    /// SIGINT, up to `grace` to exit, then SIGKILL; the exit status.
    pub(crate) fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        if self.exited().is_some() {
            return self.status;
        }
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own, not yet reaped child.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Ok(Some(st)) = c.try_wait() {
                self.status = Some(st);
                return self.status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("xtask: {} did not stop in {grace:?}: killed", self.name);
        let _ = c.kill();
        self.status = c.wait().ok();
        self.status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_none() && self.child.is_some() {
            eprintln!("xtask: stopping {}", self.name);
            self.stop(Duration::from_secs(5));
        }
    }
}

/// Starts `cmd` with its output in `log`.
pub(crate) fn spawn_logging(
    log: &Path,
    name: &str,
    cmd: &mut std::process::Command,
) -> Result<Child> {
    let f = std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
    cmd.stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .with_context(|| format!("start {name}"))
}

/// Starts `cmd` with its output in `log` and its pid recorded in the state dir `dir` (as
/// `<name>.pid`, where the lab's `down` finds it).
pub(crate) fn spawn_to(
    dir: &str,
    log: &Path,
    name: &str,
    cmd: &mut std::process::Command,
) -> Result<Child> {
    let child = spawn_logging(log, name, cmd)?;
    std::fs::write(lab::pid_file_in(dir, name), format!("{}\n", child.id()))?;
    Ok(child)
}

/// Removes the pid file [`spawn_to`] wrote for `name` in `dir`.
pub(crate) fn remove_pid_file(dir: &str, name: &str) {
    let _ = std::fs::remove_file(lab::pid_file_in(dir, name));
}
