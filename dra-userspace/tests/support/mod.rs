//! Helpers the test crates of the workspace share: a free port, a redis-server or a
//! Redis Cluster, a temporary directory, a config's text, the repository's files. Used
//! here as `mod support;`; included by path from dra-tools/tests/support (all of it)
//! and from the privileged tests' tests/src/support.rs ([`TempDir`], [`ConfigToml`]),
//! so that each helper exists once.
#![allow(dead_code)]

mod config_toml;
mod redis_server;
mod temp_dir;

// Each test crate that includes this module uses a different subset.
#[allow(unused_imports)]
pub use config_toml::ConfigToml;
#[allow(unused_imports)]
pub use redis_server::{
    CLUSTER_NODE_TIMEOUT_MS, RedisCluster, RedisServer, command as redis_command,
    command_text as redis_text, ping,
};
#[allow(unused_imports)]
pub use temp_dir::TempDir;

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A port on 127.0.0.1 that was free a moment ago (the listener is closed again).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .expect("bind an ephemeral loopback port")
        .local_addr()
        .expect("local addr")
        .port()
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

/// `# expect: LINE:COLUMN message fragment` lines at the top of a fixture.
pub fn expectations(text: &str) -> Vec<(usize, usize, String)> {
    text.lines()
        .map_while(|l| l.strip_prefix("# expect: "))
        .map(|rest| {
            let (pos, fragment) = rest.split_once(' ').expect("expect: L:C fragment");
            let (line, column) = pos.split_once(':').expect("L:C");
            (
                line.parse().unwrap(),
                column.parse().unwrap(),
                fragment.to_string(),
            )
        })
        .collect()
}

/// Whether `path` is a `dra-loadgen` scenario (a TOML file with `[[phase]]`) rather
/// than an agent config.
pub fn is_scenario(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("phase"))
}

/// Starts `dra run ARGS --config CONFIG` (`dra` is the binary's path, the calling test
/// crate's `env!("CARGO_BIN_EXE_dra")`) with stdout discarded and stderr written to
/// `log`; `RUST_LOG` and `NOTIFY_SOCKET` are unset so that the test's environment does
/// not change what it logs.
pub fn spawn_dra_run(dra: &str, args: &[&str], config: &Path, log: &Path) -> Child {
    Command::new(dra)
        .arg("run")
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("run dra")
}
