//! [`BindingStore`] in Redis, shared by several DRA hosts.
//!
//! A minimal RESP2 client over a blocking `std::net::TcpStream` (only GET, SET PX, DEL,
//! PING are needed; no extra dependency). Keys are `dra:sess:<Session-Id>`, values the
//! peer's DiameterIdentity, expiry by Redis (`SET key value PX ttl_ms`), so every host
//! sees the same binding and the same expiry.
//!
//! Every call is bounded by the I/O timeout. On an I/O or protocol error the connection
//! is dropped and the next call reconnects; a command that fails on a reused connection
//! is retried once on a fresh one (all commands used are idempotent). The calls block:
//! from async code run them on a blocking thread.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use super::binding::{BindingError, BindingStore};

/// Default key prefix for session bindings.
pub const KEY_PREFIX: &str = "dra:sess:";
/// Default connect/read/write timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest status/error/integer line accepted from the server.
const MAX_LINE: u64 = 4096;
/// Longest bulk string accepted (peer names are short).
const MAX_BULK: i64 = 64 * 1024;

/// A RESP2 reply (arrays are not needed by the commands used and are rejected).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
}

/// Session bindings in Redis.
#[derive(Debug)]
pub struct RedisBindingStore {
    addr: SocketAddr,
    timeout: Duration,
    prefix: String,
    conn: Option<BufReader<TcpStream>>,
    out: Vec<u8>,
}

impl RedisBindingStore {
    /// A store for the Redis server at `addr`; connects lazily on first use.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            timeout: DEFAULT_TIMEOUT,
            prefix: KEY_PREFIX.to_owned(),
            conn: None,
            out: Vec::new(),
        }
    }

    /// Connect now and check the server answers PING.
    pub fn connect(addr: SocketAddr) -> Result<Self, BindingError> {
        let mut s = Self::new(addr);
        s.ping()?;
        Ok(s)
    }

    /// Bound on connecting and on each read/write (default 200 ms).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.conn = None;
        self
    }

    /// Use another key prefix than `dra:sess:` (e.g. one per deployment on a shared Redis).
    pub fn with_key_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// The server address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Check the server answers (PING → PONG).
    pub fn ping(&mut self) -> Result<(), BindingError> {
        match self.command("PING", &[b"PING"])? {
            Reply::Simple(s) if s == "PONG" => Ok(()),
            other => Err(unexpected("PING", &other)),
        }
    }

    fn key(&self, session_id: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + session_id.len());
        k.extend_from_slice(self.prefix.as_bytes());
        k.extend_from_slice(session_id.as_bytes());
        k
    }

    fn open(&self) -> Result<BufReader<TcpStream>, BindingError> {
        let connect = |e| BindingError::Connect {
            addr: self.addr,
            source: e,
        };
        let stream = TcpStream::connect_timeout(&self.addr, self.timeout).map_err(connect)?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(connect)?;
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(connect)?;
        stream.set_nodelay(true).map_err(connect)?;
        Ok(BufReader::new(stream))
    }

    /// Send one command and read its reply, reconnecting as described in the module docs.
    fn command(&mut self, name: &'static str, args: &[&[u8]]) -> Result<Reply, BindingError> {
        encode(&mut self.out, args);
        let reused = self.conn.is_some();
        match self.round_trip(name) {
            Err(BindingError::Io { .. }) if reused => self.round_trip(name),
            r => r,
        }
    }

    fn round_trip(&mut self, name: &'static str) -> Result<Reply, BindingError> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => self.open()?,
        };
        let io = |e| BindingError::Io {
            command: name,
            source: e,
        };
        conn.get_mut().write_all(&self.out).map_err(io)?;
        let reply = read_reply(&mut conn, name)?;
        // Only a connection that completed a full exchange is kept for reuse.
        self.conn = Some(conn);
        match reply {
            Reply::Error(message) => Err(BindingError::Server {
                command: name,
                message,
            }),
            r => Ok(r),
        }
    }
}

impl BindingStore for RedisBindingStore {
    fn get(&mut self, session_id: &str, _now: Duration) -> Result<Option<String>, BindingError> {
        let key = self.key(session_id);
        match self.command("GET", &[b"GET", &key])? {
            Reply::Bulk(None) => Ok(None),
            Reply::Bulk(Some(v)) => String::from_utf8(v)
                .map(Some)
                .map_err(|e| BindingError::NotUtf8 { source: e }),
            other => Err(unexpected("GET", &other)),
        }
    }

    fn bind(
        &mut self,
        session_id: &str,
        peer: &str,
        ttl: Duration,
        _now: Duration,
    ) -> Result<(), BindingError> {
        let key = self.key(session_id);
        // Redis rejects PX 0; the shortest expiry it takes is 1 ms.
        let ms = u64::try_from(ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
            .to_string();
        match self.command(
            "SET",
            &[b"SET", &key, peer.as_bytes(), b"PX", ms.as_bytes()],
        )? {
            Reply::Simple(s) if s == "OK" => Ok(()),
            other => Err(unexpected("SET", &other)),
        }
    }

    fn unbind(&mut self, session_id: &str, _now: Duration) -> Result<(), BindingError> {
        let key = self.key(session_id);
        match self.command("DEL", &[b"DEL", &key])? {
            Reply::Integer(_) => Ok(()),
            other => Err(unexpected("DEL", &other)),
        }
    }
}

fn unexpected(command: &'static str, reply: &Reply) -> BindingError {
    BindingError::Protocol {
        command,
        detail: format!("{reply:?}"),
    }
}

/// RESP2 request: an array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn read_reply<R: BufRead>(r: &mut R, command: &'static str) -> Result<Reply, BindingError> {
    let io = |e| BindingError::Io { command, source: e };
    let proto = |detail: String| BindingError::Protocol { command, detail };

    let mut line = Vec::new();
    r.by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .map_err(io)?;
    if line.is_empty() {
        return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    let Some(body) = line.strip_suffix(b"\r\n") else {
        return Err(proto(format!(
            "reply line not CRLF-terminated within {MAX_LINE} bytes"
        )));
    };
    let (kind, rest) = body
        .split_first()
        .ok_or_else(|| proto("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Reply::Simple(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => text()
            .parse()
            .map(Reply::Integer)
            .map_err(|_| proto(format!("bad integer {:?}", text()))),
        b'$' => {
            let len: i64 = text()
                .parse()
                .map_err(|_| proto(format!("bad bulk length {:?}", text())))?;
            if len == -1 {
                return Ok(Reply::Bulk(None));
            }
            if !(0..=MAX_BULK).contains(&len) {
                return Err(proto(format!(
                    "bulk length {len} out of range 0..={MAX_BULK}"
                )));
            }
            let mut data = vec![0u8; len as usize + 2];
            r.read_exact(&mut data).map_err(io)?;
            if !data.ends_with(b"\r\n") {
                return Err(proto("bulk string not CRLF-terminated".into()));
            }
            data.truncate(len as usize);
            Ok(Reply::Bulk(Some(data)))
        }
        other => Err(proto(format!(
            "unsupported reply type {:?}",
            char::from(*other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, BindingError> {
        read_reply(&mut &bytes[..], "TEST")
    }

    #[test]
    fn encodes_commands_as_resp_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(
            &mut out,
            &[b"SET", b"dra:sess:a;1", b"pcrf1", b"PX", b"200"],
        );
        assert_eq!(
            out,
            b"*5\r\n$3\r\nSET\r\n$12\r\ndra:sess:a;1\r\n$5\r\npcrf1\r\n$2\r\nPX\r\n$3\r\n200\r\n"
        );
    }

    #[test]
    fn parses_every_reply_kind_the_store_uses() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Simple("OK".into()));
        assert_eq!(
            parse(b"-ERR bad\r\n").unwrap(),
            Reply::Error("ERR bad".into())
        );
        assert_eq!(parse(b":1\r\n").unwrap(), Reply::Integer(1));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(
            parse(b"$5\r\npcrf1\r\n").unwrap(),
            Reply::Bulk(Some(b"pcrf1".to_vec()))
        );
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Reply::Bulk(Some(Vec::new())));
    }

    #[test]
    fn rejects_malformed_or_oversized_replies_with_typed_errors() {
        assert!(matches!(
            parse(b"$999999999\r\n"),
            Err(BindingError::Protocol { .. })
        ));
        assert!(matches!(
            parse(b"$5\r\npcrf1XY"),
            Err(BindingError::Protocol { .. })
        ));
        assert!(matches!(parse(b"$5\r\npc"), Err(BindingError::Io { .. })));
        assert!(matches!(
            parse(b"*1\r\n"),
            Err(BindingError::Protocol { .. })
        ));
        assert!(matches!(
            parse(b":x\r\n"),
            Err(BindingError::Protocol { .. })
        ));
        assert!(matches!(parse(b""), Err(BindingError::Io { .. })));
        assert!(matches!(parse(b"+OK"), Err(BindingError::Protocol { .. })));
    }
}
