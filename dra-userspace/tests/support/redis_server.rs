//! Real Redis for the tests: [`RedisServer`] (one redis-server on 127.0.0.1) and
//! [`RedisCluster`] (six of them made a Redis Cluster of 3 masters + 3 replicas with
//! `redis-cli --cluster create`). Every process is killed and reaped on drop, also when
//! a test panics. Commands go through the `redis` crate ([`command`]), never by hand.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{TempDir, free_port};

/// Runs one command on the Redis at 127.0.0.1:`port` (a fresh connection, 2 s bounds).
pub fn command(port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn)
}

/// [`command`] whose reply is text (a bulk or simple string); `None` for nil.
pub fn command_text(port: u16, args: &[&str]) -> Option<String> {
    match command(port, args).unwrap_or_else(|e| panic!("{args:?} on :{port}: {e}")) {
        redis::Value::Nil => None,
        redis::Value::Okay => Some("OK".to_owned()),
        redis::Value::BulkString(b) => Some(String::from_utf8(b).expect("utf-8 reply")),
        redis::Value::SimpleString(s) | redis::Value::VerbatimString { text: s, .. } => Some(s),
        other => panic!("{args:?} on :{port}: not text: {other:?}"),
    }
}

/// Whether a Redis on 127.0.0.1:`port` answers PING.
pub fn ping(port: u16) -> bool {
    matches!(command(port, &["PING"]), Ok(redis::Value::SimpleString(s)) if s == "PONG")
}

/// A redis-server on 127.0.0.1 without persistence, killed (and reaped) on drop, also
/// when a test panics.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    /// 127.0.0.1 and its port.
    pub addr: SocketAddr,
}

impl RedisServer {
    /// On a free port; a port taken between the probe and redis' bind: the next one.
    pub fn start() -> RedisServer {
        for _ in 0..5 {
            if let Some(r) = RedisServer::try_start(free_port(), &[]) {
                return r;
            }
        }
        panic!("redis-server did not answer PING");
    }

    /// On `port`.
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::try_start(port, &[])
            .unwrap_or_else(|| panic!("redis-server on port {port} did not come up"))
    }

    /// Starts it with `extra` arguments and waits (5 s at most) until it answers PING;
    /// `None` if it exited or never answered.
    fn try_start(port: u16, extra: &[&str]) -> Option<RedisServer> {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .args(extra)
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
                return Some(RedisServer {
                    child: Some(child),
                    port,
                    addr,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// SIGKILL now (a crash: no goodbye to its clients); idempotent.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster on 127.0.0.1: six redis-servers (own data port and cluster bus port,
/// node timeout 1 s), three masters with one replica each; killed on drop.
pub struct RedisCluster {
    /// The nodes, in the order given to `redis-cli --cluster create`.
    pub nodes: Vec<RedisServer>,
    _dir: TempDir,
}

/// Cluster bus failure detection: a dead master is replaced about this long after.
pub const CLUSTER_NODE_TIMEOUT_MS: u32 = 1000;

impl RedisCluster {
    /// Starts six nodes, creates the cluster and waits until every node reports
    /// `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let dir = TempDir::new("dra-redis-cluster-");
        let mut nodes = Vec::new();
        let mut tries = 0;
        while nodes.len() < 6 {
            tries += 1;
            assert!(tries < 30, "could not start six cluster nodes");
            let (port, bus) = (free_port(), free_port());
            if port == bus {
                continue;
            }
            let conf = dir.0.join(format!("nodes-{port}.conf"));
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                conf.to_str().expect("utf-8 path"),
                "--cluster-port",
                &bus.to_string(),
                "--cluster-node-timeout",
                &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                "--dir",
                dir.0.to_str().expect("utf-8 path"),
            ]
            .map(str::to_owned);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Some(n) = RedisServer::try_start(port, &args) {
                nodes.push(n);
            }
        }
        let cluster = RedisCluster { nodes, _dir: dir };
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(cluster.addresses())
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("spawn redis-cli: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let start = Instant::now();
        while !cluster.nodes.iter().all(|n| cluster_ok(n.port)) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the cluster never reported cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// `127.0.0.1:port` of every node.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.to_string()).collect()
    }

    /// The index of the live master serving `key`'s slot, as a live node sees it.
    pub fn master_of(&self, key: &str) -> usize {
        let any = self.live_port();
        let slot: u16 = match command(any, &["CLUSTER", "KEYSLOT", key]) {
            Ok(redis::Value::Int(s)) => s as u16,
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        };
        for line in self.cluster_nodes(any).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| {
                let mut it = r.split('-').map(|n| n.parse::<u16>());
                match (it.next(), it.next()) {
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    (Some(Ok(a)), None) => a == slot,
                    _ => false,
                }
            });
            if serves {
                return self.index_of(f[1]);
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// The index of `master`'s replica.
    pub fn replica_of(&self, master: usize) -> usize {
        let any = self.live_port();
        let text = self.cluster_nodes(any);
        let port = self.nodes[master].port;
        let id = text
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| self.port_of(a) == port)
            })
            .and_then(|l| l.split_whitespace().next())
            .expect("master in CLUSTER NODES");
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(id))
            .unwrap_or_else(|| panic!("no replica of {id}:\n{text}"));
        self.index_of(line.split_whitespace().nth(1).expect("address"))
    }

    /// Waits until the replica has everything its master had at the call: its link to
    /// the master is up and its replication offset reached the master's. (Key counts
    /// are no measure: a replica in its first sync, or one that keeps keys its master
    /// has expired until the master's DEL arrives, can differ for long.)
    pub fn wait_replicated(&self, master: usize, replica: usize) {
        let start = Instant::now();
        let field = |port: u16, name: &str| -> Option<String> {
            let info = command_text(port, &["INFO", "replication"])?;
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let offset = |port: u16, name: &str| -> Option<u64> { field(port, name)?.parse().ok() };
        let target = offset(self.nodes[master].port, "master_repl_offset")
            .expect("master_repl_offset in the master's INFO replication");
        loop {
            let port = self.nodes[replica].port;
            let up = field(port, "master_link_status").is_some_and(|s| s == "up");
            let at = offset(port, "slave_repl_offset");
            if up && at.is_some_and(|at| at >= target) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "replica {replica} not caught up with master {master} after 30 s: link up \
                 {up}, offset {at:?} of {target}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether node `i` is a master in its own view (`ROLE`).
    pub fn is_master(&self, i: usize) -> bool {
        match command(self.nodes[i].port, &["ROLE"]) {
            Ok(redis::Value::Array(v)) => {
                matches!(v.first(), Some(redis::Value::BulkString(b)) if b == b"master")
            }
            _ => false,
        }
    }

    /// Waits until `replica` took over as master and every live node reports
    /// `cluster_state:ok`; how long that took.
    pub fn wait_promoted(&self, replica: usize, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let live_ok = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .all(|n| cluster_ok(n.port));
            if self.is_master(replica) && live_ok {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "replica {replica} not promoted within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a live node")
            .port
    }

    fn cluster_nodes(&self, port: u16) -> String {
        command_text(port, &["CLUSTER", "NODES"]).expect("CLUSTER NODES")
    }

    /// `ip:port@bus` → port.
    fn port_of(&self, addr: &str) -> u16 {
        addr.split('@')
            .next()
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    fn index_of(&self, addr: &str) -> usize {
        let port = self.port_of(addr);
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("{addr} is not one of ours"))
    }
}

/// Whether the node on `port` reports `cluster_state:ok`.
fn cluster_ok(port: u16) -> bool {
    match command(port, &["CLUSTER", "INFO"]) {
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).contains("cluster_state:ok"),
        Ok(redis::Value::VerbatimString { text, .. }) => text.contains("cluster_state:ok"),
        _ => false,
    }
}
