//! Helpers the test crates of the workspace share: a free port, a redis-server, a
//! temporary directory, a config's text, the repository's files. Used here as
//! `mod support;`; included by path from dra-tools/tests/support (all of it) and from
//! the privileged tests' tests/src/support.rs ([`TempDir`], [`ConfigToml`]), so that
//! each helper exists once.
#![allow(dead_code)]

mod config_toml;
mod temp_dir;

// Each test crate that includes this module uses a different subset.
#[allow(unused_imports)]
pub use config_toml::ConfigToml;
#[allow(unused_imports)]
pub use temp_dir::TempDir;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A port on 127.0.0.1 that was free a moment ago (the listener is closed again).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .expect("bind an ephemeral loopback port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A redis-server on 127.0.0.1 without persistence, killed (and reaped) on drop, also
/// when a test panics.
pub struct RedisServer {
    child: Child,
    /// Its port.
    pub port: u16,
    /// 127.0.0.1 and its port.
    pub addr: SocketAddr,
}

impl RedisServer {
    /// On a free port; a port taken between the probe and redis' bind: the next one.
    pub fn start() -> RedisServer {
        for _ in 0..5 {
            if let Some(r) = RedisServer::try_start(free_port()) {
                return r;
            }
        }
        panic!("redis-server did not answer PING");
    }

    /// On `port`.
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::try_start(port)
            .unwrap_or_else(|| panic!("redis-server on port {port} did not come up"))
    }

    /// Starts it and waits (5 s at most) until it answers PING; `None` if it exited or
    /// never answered.
    fn try_start(port: u16) -> Option<RedisServer> {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn redis-server: {e}"));
        for _ in 0..250 {
            if let Ok(Some(_)) = child.try_wait() {
                return None; // exited (port taken?)
            }
            if ping(port) {
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                return Some(RedisServer { child, port, addr });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a Redis on 127.0.0.1:`port` answers PING (RESP).
pub fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && s.read_exact(&mut buf).is_ok()
        && &buf == b"+PONG\r\n"
}

/// The workspace's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate lives in the workspace")
        .to_path_buf()
}

/// Every `.toml` file under `dir`, recursively, sorted.
pub fn toml_files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "toml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
}

/// Whether `path` is a `dra-loadgen` scenario (a TOML file with `[[phase]]`) rather
/// than an agent config.
pub fn is_scenario(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("phase"))
}
