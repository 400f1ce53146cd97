//! Running the real `dra` binary inside a test namespace, stopped on drop.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::netns::Netns;

/// The `dra` binary: $DRA_BIN, else target/debug/dra of this workspace.
pub fn dra_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("DRA_BIN") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/dra");
    assert!(
        p.exists(),
        "{} not found: build it first (cargo build -p dra-userspace --bins)",
        p.display()
    );
    p
}

/// A `dra run` process, interrupted (SIGINT) and reaped on drop.
pub struct Agent {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Agent {
    /// Starts `dra run` in `ns` with the given arguments; stderr goes to `log`.
    /// Only the network namespace is entered (not `ip netns exec`, which also
    /// gives the process a private /sys and so a private bpffs: its pins would
    /// vanish with it).
    pub fn start(ns: &Netns, args: &[&str], log: &Path) -> Agent {
        Agent::start_with_env(ns, args, &[], log)
    }

    /// As [`Agent::start`], with these environment variables set (e.g. `RUST_LOG`).
    pub fn start_with_env(ns: &Netns, args: &[&str], env: &[(&str, &str)], log: &Path) -> Agent {
        let f = std::fs::File::create(log).expect("log file");
        let mut cmd = Command::new(dra_bin());
        cmd.arg("run").args(args).stdout(Stdio::null()).stderr(f);
        cmd.envs(env.iter().copied());
        let child = dra_tools::netns::spawn_in(&ns.name, &mut cmd).expect("spawn dra run");
        Agent {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    /// Waits until `cond` holds (polled), the process exits, or `timeout` passes
    /// (scaled by [`crate::support::time_scale`]).
    pub fn wait_until(&mut self, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + crate::support::scaled(timeout);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            if let Some(c) = &mut self.child
                && let Ok(Some(st)) = c.try_wait()
            {
                panic!(
                    "dra run exited early ({st}); log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits for the agent to exit on its own, at most `timeout` (scaled); its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + crate::support::scaled(timeout);
        while Instant::now() < end {
            if let Some(c) = &mut self.child
                && let Ok(Some(st)) = c.try_wait()
            {
                self.child = None;
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Stops the agent the way an operator would (SIGINT) and waits for it.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let end = Instant::now() + crate::support::scaled(Duration::from_secs(10));
        while Instant::now() < end {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        c.wait().ok()
    }

    /// Kills the agent without letting it clean up (a crash).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}
