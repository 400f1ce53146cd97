//! `redis` source: CPU of a Redis server from `INFO cpu`, over RESP on a plain TCP
//! stream.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{CpuSource, SourceError, parse_number};

/// Largest RESP bulk reply accepted (`INFO cpu` is a few hundred bytes).
const MAX_BULK: usize = 1 << 20;

/// CPU of a Redis server: the increase of `used_cpu_sys + used_cpu_user` (seconds of CPU
/// used by the server process, all threads) between two `INFO cpu` calls, over the wall
/// time between the replies, in **percent of one core** (Redis executes commands on one
/// thread; with `io-threads` the value can exceed 100, which the controller clamps).
///
/// The connection is kept open between samples. Any I/O or protocol failure drops it and
/// is returned as an error; the next call reconnects. If the counters went backwards
/// (the server restarted) the call returns `Ok(None)` and starts over.
#[derive(Debug)]
pub struct RedisCpu {
    address: String,
    timeout: Duration,
    auth: Option<(Option<String>, String)>,
    conn: Option<BufReader<TcpStream>>,
    last: Option<(Instant, f64)>,
}

impl RedisCpu {
    /// A source for the server at `address` (`host:port`), with a 2 s connect/read/write
    /// timeout.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            timeout: Duration::from_secs(2),
            auth: None,
            conn: None,
            last: None,
        }
    }

    /// Sets the connect, read and write timeout (each).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Authenticates with `AUTH [username] password` after connecting.
    #[must_use]
    pub fn with_auth(mut self, username: Option<String>, password: String) -> Self {
        self.auth = Some((username, password));
        self
    }

    fn connect(&self) -> Result<BufReader<TcpStream>, SourceError> {
        let ctx = format!("{}: connect", self.describe());
        let addrs = self
            .address
            .to_socket_addrs()
            .map_err(|e| SourceError::io(&ctx, e))?;
        let mut last_err = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.timeout) {
                Ok(s) => {
                    s.set_read_timeout(Some(self.timeout))
                        .map_err(|e| SourceError::io(&ctx, e))?;
                    s.set_write_timeout(Some(self.timeout))
                        .map_err(|e| SourceError::io(&ctx, e))?;
                    s.set_nodelay(true).map_err(|e| SourceError::io(&ctx, e))?;
                    let mut conn = BufReader::new(s);
                    if let Some((user, pass)) = &self.auth {
                        let mut args: Vec<&[u8]> = vec![b"AUTH"];
                        if let Some(u) = user {
                            args.push(u.as_bytes());
                        }
                        args.push(pass.as_bytes());
                        let ctx = format!("{}: AUTH", self.describe());
                        match command(&mut conn, &ctx, &args)? {
                            Reply::Simple(s) if s == "OK" => {}
                            _ => return Err(SourceError::malformed(ctx, "AUTH not answered +OK")),
                        }
                    }
                    return Ok(conn);
                }
                Err(e) => last_err = e,
            }
        }
        Err(SourceError::io(ctx, last_err))
    }

    fn info_cpu(&mut self) -> Result<f64, SourceError> {
        let ctx = format!("{}: INFO cpu", self.describe());
        if self.conn.is_none() {
            self.conn = Some(self.connect()?);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(SourceError::malformed(ctx, "no connection"));
        };
        let reply = command(conn, &ctx, &[b"INFO", b"cpu"]);
        let body = match reply {
            Ok(Reply::Bulk(b)) => b,
            Ok(Reply::Simple(_)) => {
                self.conn = None;
                return Err(SourceError::malformed(ctx, "expected a bulk string reply"));
            }
            Err(e) => {
                // The stream may be desynchronised or dead: reconnect next time.
                self.conn = None;
                return Err(e);
            }
        };
        let text = String::from_utf8_lossy(&body);
        parse_info_cpu(&ctx, &text)
    }
}

impl CpuSource for RedisCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let used = self.info_cpu()?;
        let now = Instant::now();
        let value = match self.last {
            Some((then, prev)) if used >= prev => {
                let wall = now.duration_since(then).as_secs_f64();
                (wall > 0.0).then(|| (used - prev) / wall * 100.0)
            }
            // First reading, or counters went backwards (server restart).
            _ => None,
        };
        self.last = Some((now, used));
        Ok(value)
    }

    fn describe(&self) -> String {
        format!("redis {}", self.address)
    }
}

/// A RESP reply we accept.
enum Reply {
    /// `+OK` style.
    Simple(String),
    /// `$<len>` bulk string.
    Bulk(Vec<u8>),
}

/// Sends one command as a RESP array of bulk strings and reads one reply.
fn command(
    conn: &mut BufReader<TcpStream>,
    ctx: &str,
    args: &[&[u8]],
) -> Result<Reply, SourceError> {
    conn.get_mut()
        .write_all(&encode(args))
        .map_err(|e| SourceError::io(ctx, e))?;
    read_reply(conn, ctx)
}

/// RESP array of bulk strings: `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per argument.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_reply(conn: &mut impl BufRead, ctx: &str) -> Result<Reply, SourceError> {
    let mut line = Vec::new();
    // Bounded: a status line longer than MAX_BULK is a broken peer.
    let n = conn
        .by_ref()
        .take(MAX_BULK as u64)
        .read_until(b'\n', &mut line)
        .map_err(|e| SourceError::io(ctx, e))?;
    if n == 0 {
        return Err(SourceError::io(
            ctx,
            io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"),
        ));
    }
    let Some(line) = line.strip_suffix(b"\r\n") else {
        return Err(SourceError::malformed(
            ctx,
            "reply line not terminated by CRLF",
        ));
    };
    let text = String::from_utf8_lossy(line);
    let (kind, rest) = text.split_at_checked(1).unwrap_or(("", ""));
    match kind {
        "+" => Ok(Reply::Simple(rest.to_owned())),
        "-" => Err(SourceError::Remote {
            context: ctx.to_owned(),
            detail: rest.to_owned(),
        }),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| SourceError::malformed(ctx, format!("bad bulk length {rest:?}")))?;
            let len = usize::try_from(len)
                .ok()
                .filter(|&l| l <= MAX_BULK)
                .ok_or_else(|| {
                    SourceError::malformed(ctx, format!("unusable bulk length {len}"))
                })?;
            let mut buf = vec![0; len + 2];
            conn.read_exact(&mut buf)
                .map_err(|e| SourceError::io(ctx, e))?;
            if !buf.ends_with(b"\r\n") {
                return Err(SourceError::malformed(
                    ctx,
                    "bulk string not terminated by CRLF",
                ));
            }
            buf.truncate(len);
            Ok(Reply::Bulk(buf))
        }
        _ => Err(SourceError::malformed(
            ctx,
            format!("unexpected reply {:?}", truncate(&text)),
        )),
    }
}

/// `used_cpu_sys + used_cpu_user` from an `INFO cpu` body (`key:value` lines). The
/// `_children` and `_main_thread` variants are not used.
fn parse_info_cpu(ctx: &str, text: &str) -> Result<f64, SourceError> {
    let field = |key: &str| -> Result<f64, SourceError> {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
            .ok_or_else(|| SourceError::malformed(ctx, format!("no {key} in INFO cpu")))?;
        parse_number(ctx, v)
    };
    Ok(field("used_cpu_sys")? + field("used_cpu_user")?)
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_encoded_as_resp_arrays() {
        assert_eq!(
            encode(&[b"INFO", b"cpu"]),
            b"*2\r\n$4\r\nINFO\r\n$3\r\ncpu\r\n"
        );
    }

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
    fn replies_are_framed_and_errors_surface() {
        let mut r = &b"$5\r\nhello\r\n+OK\r\n-ERR unknown command\r\n$3\r\nab"[..];
        assert!(matches!(read_reply(&mut r, "t"), Ok(Reply::Bulk(b)) if b == b"hello"));
        assert!(matches!(read_reply(&mut r, "t"), Ok(Reply::Simple(s)) if s == "OK"));
        assert!(
            matches!(read_reply(&mut r, "t"), Err(SourceError::Remote { detail, .. }) if detail == "ERR unknown command")
        );
        assert!(
            matches!(read_reply(&mut r, "t"), Err(SourceError::Io { .. })),
            "short bulk"
        );
        assert!(matches!(
            read_reply(&mut &b""[..], "t"),
            Err(SourceError::Io { .. })
        ));
        assert!(matches!(
            read_reply(&mut &b"$-1\r\n"[..], "t"),
            Err(SourceError::Malformed { .. })
        ));
        assert!(matches!(
            read_reply(&mut &b":1\r\n"[..], "t"),
            Err(SourceError::Malformed { .. })
        ));
    }

    #[test]
    fn connection_refused_is_an_error_not_a_panic() {
        // Bind then drop to get a port with (very likely) nothing listening.
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
    }
}
