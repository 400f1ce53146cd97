//! Running the real `dra` binary inside a test namespace, stopped on drop.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
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
    /// The control socket of the config it was started with (`[control] socket`).
    control: Option<PathBuf>,
}

/// The control socket named by the config file after `--config` in `args`, if that file
/// parses and names one.
fn control_socket(args: &[&str]) -> Option<PathBuf> {
    let i = args.iter().position(|a| *a == "--config")?;
    let path = args.get(i + 1)?;
    let text = std::fs::read_to_string(path).ok()?;
    dra::config::parse(&text, path).ok()?.control.socket
}

/// One request over the agent's control socket (`status`, `reload`): its reply, or why
/// there was none.
pub fn control_request(socket: &Path, request: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(crate::support::scaled(Duration::from_secs(10))))?;
    s.write_all(format!("{request}\n").as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
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
            control: control_socket(args),
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `dra status`'s text, read over the control socket.
    pub fn status(&self) -> std::io::Result<String> {
        let socket = self.control.as_deref().unwrap_or_else(|| {
            panic!("the agent's config has no [control] socket (ConfigToml::control)")
        });
        control_request(socket, "status")
    }

    /// Waits until the agent says it is ready (`dra status`: "ready: yes": listeners
    /// bound, an open connection in every routed group or its startup wait over, the
    /// fast path attached before that). Fails naming the last status (or why there was
    /// none) and the log when it is not within `timeout` (scaled), or the agent exits.
    /// Returns the status text.
    pub fn wait_ready(&mut self, timeout: Duration) -> String {
        let socket = self.control.clone().unwrap_or_else(|| {
            panic!("the agent's config has no [control] socket (ConfigToml::control)")
        });
        let mut last = String::from("no answer on the control socket yet");
        let ready = self.wait_until(timeout, || match control_request(&socket, "status") {
            Ok(text) => {
                let yes = text.lines().any(|l| l.starts_with("ready: yes"));
                last = text;
                yes
            }
            Err(e) => {
                last = format!("no status: {e}");
                false
            }
        });
        assert!(
            ready,
            "dra run not ready within {timeout:?} (scaled); last status:\n{last}\nlog:\n{}",
            self.log_text()
        );
        last
    }

    /// Waits until `cond` holds (polled), the process exits, or `timeout` passes
    /// (scaled by [`crate::support::time_scale`]).
    pub fn wait_until(&mut self, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
        crate::support::poll_until(timeout, || {
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
            false
        })
    }

    /// Waits for the agent to exit on its own, at most `timeout` (scaled); its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let c = self.child.as_mut()?;
        let mut st = None;
        crate::support::poll_until(timeout, || {
            st = c.try_wait().ok().flatten();
            st.is_some()
        });
        if st.is_some() {
            self.child = None;
        }
        st
    }

    /// Stops the agent the way an operator would (SIGINT) and waits for it.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let mut st = None;
        crate::support::poll_until(Duration::from_secs(10), || {
            st = c.try_wait().ok().flatten();
            st.is_some()
        });
        if st.is_some() {
            return st;
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

/// The state column of `peer`'s row in `dra status`'s text.
pub fn peer_state<'a>(status: &'a str, peer: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(peer)).then(|| w.nth(1)).flatten()
    })
}

/// `GET /metrics` of the agent at `addr`, from inside `ns`: the page ("" when nothing
/// answers).
pub fn scrape(ns: &Netns, addr: &str) -> String {
    use std::io::{Read, Write};
    ns.enter(|| {
        let mut s = std::net::TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(crate::support::scaled(Duration::from_secs(5))))
            .ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: dra\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    })
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// The value of the metric `series` (its name and labels as printed) in `page`.
pub fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}
