//! `redis` and `redis_cluster` sources: CPU of the session DB from `INFO cpu`, through
//! the `redis` crate's blocking client (these sources run on the DRL controller's own
//! thread, see the module docs of [`super`]).
//!
//! One Redis server: the increase of `used_cpu_sys + used_cpu_user` (CPU seconds of the
//! server process, all threads) between two `INFO cpu` calls over the wall time between
//! them, in **percent of one core** (Redis executes commands on one thread; with
//! `io-threads` the value can exceed 100, which the controller clamps).
//!
//! A Redis Cluster: the same figure for every master (found with `CLUSTER NODES` from
//! the first seed that answers), aggregated by max (default: the busiest shard limits
//! the session DB) or mean. Every DRA host sampling the same cluster computes the same
//! value, so all of them apply the same throttle (docs/architecture.md §9).

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use super::{CpuSource, SourceError, parse_number};

/// Default connect, read and write timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// How a cluster's masters' CPU figures become one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Aggregate {
    /// The busiest master.
    #[default]
    Max,
    /// The mean over the masters.
    Mean,
}

/// One server's `INFO cpu` counter and the delta between readings.
struct Node {
    address: String,
    timeout: Duration,
    auth: Option<(Option<String>, String)>,
    conn: Option<redis::Connection>,
    last: Option<(Instant, f64)>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.address)
            .field("connected", &self.conn.is_some())
            .field("last", &self.last)
            .finish()
    }
}

impl Node {
    fn new(address: String, timeout: Duration, auth: Option<(Option<String>, String)>) -> Self {
        Node {
            address,
            timeout,
            auth,
            conn: None,
            last: None,
        }
    }

    fn context(&self, what: &str) -> String {
        format!("redis {}: {what}", self.address)
    }

    fn connection(&mut self) -> Result<&mut redis::Connection, SourceError> {
        if self.conn.is_none() {
            let ctx = self.context("connect");
            let info = redis::IntoConnectionInfo::into_connection_info(format!(
                "redis://{}/",
                self.address
            ))
            .map_err(|e| error(&ctx, &e))?;
            let mut redis_settings = info.redis_settings().clone();
            if let Some((user, pass)) = &self.auth {
                redis_settings = redis_settings.set_password(pass.clone());
                if let Some(u) = user {
                    redis_settings = redis_settings.set_username(u.clone());
                }
            }
            let info = info.set_redis_settings(redis_settings);
            let client = redis::Client::open(info).map_err(|e| error(&ctx, &e))?;
            let conn = client
                .get_connection_with_timeout(self.timeout)
                .map_err(|e| error(&ctx, &e))?;
            conn.set_read_timeout(Some(self.timeout))
                .map_err(|e| error(&ctx, &e))?;
            conn.set_write_timeout(Some(self.timeout))
                .map_err(|e| error(&ctx, &e))?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("set above"))
    }

    /// One command's text reply; any failure drops the connection (the next call
    /// reconnects).
    fn query(&mut self, args: &[&str]) -> Result<String, SourceError> {
        let ctx = self.context(&args.join(" "));
        let conn = self.connection()?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        match cmd.query::<String>(conn) {
            Ok(s) => Ok(s),
            Err(e) => {
                self.conn = None;
                Err(error(&ctx, &e))
            }
        }
    }

    /// CPU percent since the previous reading (`None` on the first, or after the
    /// counters went backwards: the server restarted).
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let body = self.query(&["INFO", "cpu"])?;
        let used = parse_info_cpu(&self.context("INFO cpu"), &body)?;
        let now = Instant::now();
        let value = match self.last {
            Some((then, prev)) if used >= prev => {
                let wall = now.duration_since(then).as_secs_f64();
                (wall > 0.0).then(|| (used - prev) / wall * 100.0)
            }
            _ => None,
        };
        self.last = Some((now, used));
        Ok(value)
    }
}

/// A `redis` crate error as a [`SourceError`]: transport failures (refused, timed out,
/// dropped) are `Io`; anything the server said (an error reply such as `NOAUTH
/// Authentication required.`, a failed AUTH) is `Remote`.
fn error(ctx: &str, e: &redis::RedisError) -> SourceError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_refusal() || e.is_connection_dropped() {
        let kind = if e.is_timeout() {
            io::ErrorKind::TimedOut
        } else if e.is_connection_refusal() {
            io::ErrorKind::ConnectionRefused
        } else {
            io::ErrorKind::Other
        };
        return SourceError::io(ctx, io::Error::new(kind, e.to_string()));
    }
    SourceError::Remote {
        context: ctx.to_owned(),
        detail: match (e.code(), e.detail()) {
            (Some(code), Some(d)) => format!("{code} {d}"),
            (Some(code), None) => code.to_owned(),
            _ => e.to_string(),
        },
    }
}

/// CPU of one Redis server (module docs). The connection is kept between samples.
#[derive(Debug)]
pub struct RedisCpu {
    node: Node,
}

impl RedisCpu {
    /// A source for the server at `address` (`host:port`), with a 2 s timeout.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            node: Node::new(address.into(), DEFAULT_TIMEOUT, None),
        }
    }

    /// Sets the connect, read and write timeout (each).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.node.timeout = timeout;
        self.node.conn = None;
        self
    }

    /// Authenticates (`AUTH [username] password`) on connecting.
    #[must_use]
    pub fn with_auth(mut self, username: Option<String>, password: String) -> Self {
        self.node.auth = Some((username, password));
        self.node.conn = None;
        self
    }
}

impl CpuSource for RedisCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        self.node.sample()
    }

    fn describe(&self) -> String {
        format!("redis {}", self.node.address)
    }
}

/// CPU of a Redis Cluster's masters, aggregated (module docs).
#[derive(Debug)]
pub struct RedisClusterCpu {
    seeds: Vec<String>,
    aggregate: Aggregate,
    timeout: Duration,
    /// Per master address, its counter history (kept while it stays a master).
    masters: HashMap<String, Node>,
}

impl RedisClusterCpu {
    /// A source for the cluster reachable through `seeds` (`host:port` each).
    pub fn new(seeds: Vec<String>, aggregate: Aggregate) -> Self {
        Self {
            seeds,
            aggregate,
            timeout: DEFAULT_TIMEOUT,
            masters: HashMap::new(),
        }
    }

    /// Sets the connect, read and write timeout of every call.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The masters' addresses, from the first seed (or known master) that answers
    /// `CLUSTER NODES`.
    fn discover(&mut self) -> Result<Vec<String>, SourceError> {
        let mut last = None;
        let known: Vec<String> = self.masters.keys().cloned().collect();
        for addr in known.iter().chain(self.seeds.iter()) {
            let mut n = Node::new(addr.clone(), self.timeout, None);
            match n.query(&["CLUSTER", "NODES"]) {
                Ok(text) => {
                    let masters = parse_cluster_masters(&text);
                    if masters.is_empty() {
                        last = Some(SourceError::malformed(
                            n.context("CLUSTER NODES"),
                            "no master in the cluster's node list",
                        ));
                        continue;
                    }
                    return Ok(masters);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| SourceError::malformed("redis cluster", "no seed address")))
    }
}

impl CpuSource for RedisClusterCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let masters = self.discover()?;
        self.masters.retain(|a, _| masters.contains(a));
        let mut values = Vec::with_capacity(masters.len());
        for a in &masters {
            let timeout = self.timeout;
            let node = self
                .masters
                .entry(a.clone())
                .or_insert_with(|| Node::new(a.clone(), timeout, None));
            if let Some(v) = node.sample()? {
                values.push(v);
            }
        }
        // Until every master has two readings (start, or a replica just promoted) the
        // aggregate would describe only some shards: no value yet.
        if values.len() < masters.len() {
            return Ok(None);
        }
        Ok(Some(match self.aggregate {
            Aggregate::Max => values.iter().copied().fold(f64::MIN, f64::max),
            Aggregate::Mean => values.iter().sum::<f64>() / values.len() as f64,
        }))
    }

    fn describe(&self) -> String {
        format!("redis cluster {}", self.seeds.join(","))
    }
}

/// Addresses (`ip:port`) of the masters not marked failed in a `CLUSTER NODES` reply
/// (`<id> <ip:port@cport[,hostname]> <flags> <master> ...` per line).
fn parse_cluster_masters(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_id, addr, flags) = (f.next()?, f.next()?, f.next()?);
            let flags: Vec<&str> = flags.split(',').collect();
            let usable = flags.contains(&"master")
                && !flags
                    .iter()
                    .any(|x| matches!(*x, "fail" | "fail?" | "handshake" | "noaddr"));
            let addr = addr.split(['@', ',']).next()?;
            (usable && !addr.starts_with(':')).then(|| addr.to_owned())
        })
        .collect();
    out.sort();
    out
}

/// `used_cpu_sys + used_cpu_user` from an `INFO cpu` body (`key:value` lines). The
/// `_children` and `_main_thread` variants are not used.
fn parse_info_cpu(ctx: &str, text: &str) -> Result<f64, SourceError> {
    let field = |key: &str| -> Result<f64, SourceError> {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
            .ok_or_else(|| SourceError::malformed(ctx, format!("no {key} in INFO cpu")))?;
        parse_number(ctx, v.trim())
    };
    Ok(field("used_cpu_sys")? + field("used_cpu_user")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_cpu_sums_sys_and_user_only() {
        let body = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n\
                    used_cpu_sys_children:9.0\r\nused_cpu_user_children:9.0\r\n\
                    used_cpu_sys_main_thread:1.0\r\nused_cpu_user_main_thread:2.0\r\n";
        assert_eq!(parse_info_cpu("t", body).unwrap(), 3.75);
        assert!(matches!(
            parse_info_cpu("t", "used_cpu_sys:1.0\r\n"),
            Err(SourceError::Malformed { .. })
        ));
        assert!(matches!(
            parse_info_cpu("t", "used_cpu_sys:x\r\nused_cpu_user:1\r\n"),
            Err(SourceError::Number { .. })
        ));
    }

    #[test]
    fn cluster_nodes_gives_the_live_masters() {
        let text = "\
a1 198.18.0.10:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 198.18.0.11:7001@17001 master - 0 1 2 connected 5461-10922
c3 198.18.0.12:7002@17002,host-c master,fail - 0 1 3 connected
d4 198.18.0.13:7003@17003 slave a1 0 1 1 connected
e5 198.18.0.14:7004@17004 master - 0 1 5 connected 10923-16383
f6 :0@0 master,noaddr - 0 1 6 disconnected
";
        assert_eq!(
            parse_cluster_masters(text),
            ["198.18.0.10:7000", "198.18.0.11:7001", "198.18.0.14:7004"]
        );
    }

    #[test]
    fn connection_refused_is_an_error_not_a_panic() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut src =
            RedisCpu::new(format!("127.0.0.1:{port}")).with_timeout(Duration::from_millis(500));
        assert!(matches!(src.sample(), Err(SourceError::Io { .. })));
        assert!(
            matches!(src.sample(), Err(SourceError::Io { .. })),
            "retries, still an error"
        );
        let mut cluster = RedisClusterCpu::new(vec![format!("127.0.0.1:{port}")], Aggregate::Max)
            .with_timeout(Duration::from_millis(500));
        assert!(matches!(cluster.sample(), Err(SourceError::Io { .. })));
    }
}
