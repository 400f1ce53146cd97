//! `dra run` between two network namespaces for the TLS tests: the agent's namespace
//! (198.18.0.1, `dra run` as a child process) and the peers' (198.18.0.2, the test's
//! own thread and runtime), a CA and a temporary directory; all removed on drop.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dra::transport::tls::{Connector, Credentials};
use dra_tools::loadgen::tls_credentials;
use dra_tools::netns::{self, Netns};
use dra_tools::pki::{TestCa, TlsFiles};

use super::TempDir;

pub const DRA_IP: &str = "198.18.0.1";
pub const SIM_IP: &str = "198.18.0.2";
/// `dra run`'s metrics endpoint.
pub const METRICS: &str = "198.18.0.1:9100";
pub const DRA_HOST: &str = "dra.test.example";

/// The `dra` binary under test.
pub fn dra_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("DRA_BIN") {
        return p.into();
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/dra");
    assert!(
        p.is_file(),
        "{}: build the agent first (cargo build -p dra-userspace) or set DRA_BIN",
        p.display()
    );
    p
}

/// The two namespaces, the CA, a temporary directory and `dra run` once started.
pub struct Lab {
    pub dra_ns: Netns,
    pub sim_ns: Netns,
    /// The agent's end of the veth pair (where XDP attaches).
    pub dra_if: String,
    pub dir: TempDir,
    pub ca: TestCa,
    dra: Option<Child>,
    /// The simulators' runtime, on this thread, in the simulators' namespace.
    rt: tokio::runtime::Runtime,
}

/// Runs `test` with a new [`Lab`] on a thread of its own (it enters the simulators'
/// namespace); a panic in it fails the test with its message.
pub fn with_lab(tag: &str, test: impl FnOnce(&mut Lab) + Send + 'static) {
    let tag = tag.to_owned();
    let t = std::thread::spawn(move || {
        let mut lab = Lab::new(&tag);
        test(&mut lab);
    });
    if let Err(e) = t.join() {
        std::panic::resume_unwind(e);
    }
}

impl Lab {
    pub fn new(tag: &str) -> Lab {
        super::require_root("network namespaces");
        let dra_ns = Netns::new(&format!("t{tag}d")).expect("namespace");
        let sim_ns = Netns::new(&format!("t{tag}s")).expect("namespace");
        let veth = netns::veth_pair(
            &dra_ns,
            &format!("{DRA_IP}/30"),
            &sim_ns,
            &format!("{SIM_IP}/30"),
        )
        .expect("veth pair");
        let dir = TempDir::new("dra-tls-");
        let ca = TestCa::in_dir("good", &dir.0).expect("CA");
        sim_ns.enter().expect("setns");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        Lab {
            dra_ns,
            sim_ns,
            dra_if: veth.a_if,
            dir,
            ca,
            dra: None,
            rt,
        }
    }

    pub fn control(&self) -> PathBuf {
        self.dir.0.join("dra.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("dra.log")).unwrap_or_default()
    }

    /// `dra run` on `config` (written to the directory) in the agent's namespace.
    pub fn start_dra(&mut self, config: &str, args: &[&str]) {
        let path = self.dir.0.join("dra.toml");
        std::fs::write(&path, config).expect("config");
        let check = Command::new(dra_bin())
            .arg("check-config")
            .arg(&path)
            .output()
            .expect("dra check-config");
        assert!(
            check.status.success(),
            "check-config:\n{}",
            String::from_utf8_lossy(&check.stderr)
        );
        let mut cmd = Command::new(dra_bin());
        cmd.arg("run")
            .args(args)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.0.join("dra.log")).expect("log"));
        self.dra = Some(self.dra_ns.spawn(&mut cmd).expect("spawn dra run"));
    }

    /// `dra status` of the agent (over its control socket).
    pub async fn status(&self) -> String {
        dra::agent::query_status(&self.control())
            .await
            .unwrap_or_else(|e| format!("no status: {e}"))
    }

    /// Waits until the agent says it is ready (`dra status`: "ready: yes": listeners
    /// bound, the fast path attached, an open connection in every routed group or its
    /// startup wait over); fails naming the last status and the log. The status.
    pub async fn wait_ready(&self, patience: Duration) -> String {
        let mut last = String::new();
        let ready = super::poll_until(patience, async || {
            last = self.status().await;
            last.lines().any(|l| l.starts_with("ready: yes"))
        })
        .await;
        assert!(
            ready,
            "dra run not ready within {patience:?}; last status:\n{last}\nlog:\n{}",
            self.log()
        );
        last
    }

    /// Runs `f` on the simulators' runtime (tasks it spawned, such as servers, go on
    /// in later calls).
    pub fn in_sim<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt.block_on(f)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(c) = &mut self.dra {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            super::poll_until_blocking(Duration::from_secs(5), || {
                !matches!(c.try_wait(), Ok(None))
            });
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn creds(f: &TlsFiles) -> Credentials {
    tls_credentials(&f.cert, &f.key, &f.ca).expect("credentials")
}

pub fn connector(f: &TlsFiles) -> Connector {
    creds(f).connector(DRA_HOST).expect("a DNS name")
}

/// The metrics page of `dra run` (from the simulators' namespace).
pub fn scrape() -> String {
    let Ok(mut s) = std::net::TcpStream::connect(METRICS) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: dra\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The value of the metric line that starts with `series` (0 if absent).
pub fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `f` holds, else fails with `what` and the log.
pub async fn until(lab: &Lab, what: &str, patience: Duration, mut f: impl FnMut() -> bool) {
    let held = super::poll_until(patience, async || f()).await;
    assert!(held, "{what}; dra run log:\n{}", lab.log());
}
