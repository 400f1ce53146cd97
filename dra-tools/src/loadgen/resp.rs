//! A minimal pipelining Redis client (RESP2 over TCP) for the server's per-session
//! side effects: commands go out in order on one connection, replies come back in order.

use std::collections::VecDeque;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// A RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …`.
    Error(String),
    /// `:n`.
    Integer(i64),
    /// `$n` bulk string; `None` = nil.
    Bulk(Option<Vec<u8>>),
    /// `*n` array; `None` = nil.
    Array(Option<Vec<Reply>>),
}

/// A failed Redis command.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    /// Could not connect.
    #[error("cannot connect to redis at {addr}")]
    Connect {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The connection is gone (I/O error or the server closed it).
    #[error("redis connection closed")]
    Closed,
    /// The server sent something that is not RESP2.
    #[error("malformed RESP reply")]
    Malformed,
    /// The server answered with an error.
    #[error("redis error: {message}")]
    Server {
        /// The error text.
        message: String,
    },
}

type Job = (Vec<u8>, oneshot::Sender<Result<Reply, RespError>>);

/// A cloneable handle to one pipelined connection.
#[derive(Clone, Debug)]
pub struct RespClient {
    tx: mpsc::UnboundedSender<Job>,
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parses one reply from the front of `buf`: `Ok(Some((reply, used)))`, `Ok(None)` when
/// incomplete.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[1..end]).map_err(|_| RespError::Malformed)?;
    let after = end + 2;
    let int = || line.parse::<i64>().map_err(|_| RespError::Malformed);
    match buf.first() {
        Some(b'+') => Ok(Some((Reply::Simple(line.to_owned()), after))),
        Some(b'-') => Ok(Some((Reply::Error(line.to_owned()), after))),
        Some(b':') => Ok(Some((Reply::Integer(int()?), after))),
        Some(b'$') => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), after)));
            }
            let n = n as usize;
            if buf.len() < after + n + 2 {
                return Ok(None);
            }
            Ok(Some((
                Reply::Bulk(Some(buf[after..after + n].to_vec())),
                after + n + 2,
            )))
        }
        Some(b'*') => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), after)));
            }
            let mut items = Vec::new();
            let mut pos = after;
            for _ in 0..n {
                match parse_reply(&buf[pos..])? {
                    Some((r, used)) => {
                        items.push(r);
                        pos += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), pos)))
        }
        _ => Err(RespError::Malformed),
    }
}

impl RespClient {
    /// Connects and starts the connection task (needs a tokio runtime).
    pub async fn connect(addr: SocketAddr) -> Result<RespClient, RespError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| RespError::Connect { addr, source })?;
        let _ = stream.set_nodelay(true);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(stream, rx));
        Ok(RespClient { tx })
    }

    /// Sends several commands back to back (one pipeline) and waits for all replies;
    /// the first error, if any, is returned.
    pub async fn pipeline(&self, cmds: &[Vec<&[u8]>]) -> Result<(), RespError> {
        let mut waiting = Vec::with_capacity(cmds.len());
        for args in cmds {
            let (tx, rx) = oneshot::channel();
            self.tx
                .send((encode_command(args), tx))
                .map_err(|_| RespError::Closed)?;
            waiting.push(rx);
        }
        let mut first_err = None;
        for rx in waiting {
            match rx.await.map_err(|_| RespError::Closed)? {
                Ok(Reply::Error(message)) => {
                    first_err.get_or_insert(RespError::Server { message });
                }
                Ok(_) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Sends one command and waits for its reply; a `-ERR` reply is an error.
    pub async fn command(&self, args: &[&[u8]]) -> Result<Reply, RespError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send((encode_command(args), tx))
            .map_err(|_| RespError::Closed)?;
        match rx.await.map_err(|_| RespError::Closed)?? {
            Reply::Error(message) => Err(RespError::Server { message }),
            r => Ok(r),
        }
    }
}

async fn run(stream: TcpStream, mut rx: mpsc::UnboundedReceiver<Job>) {
    let (mut rd, mut wr) = stream.into_split();
    let mut waiting: VecDeque<oneshot::Sender<Result<Reply, RespError>>> = VecDeque::new();
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            job = rx.recv() => {
                let Some((bytes, reply)) = job else { break };
                if wr.write_all(&bytes).await.is_err() {
                    let _ = reply.send(Err(RespError::Closed));
                    break;
                }
                waiting.push_back(reply);
            }
            n = rd.read(&mut chunk) => {
                let n = match n { Ok(0) | Err(_) => break, Ok(n) => n };
                buf.extend_from_slice(&chunk[..n]);
                loop {
                    match parse_reply(&buf) {
                        Ok(Some((r, used))) => {
                            buf.drain(..used);
                            if let Some(w) = waiting.pop_front() {
                                let _ = w.send(Ok(r));
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            if let Some(w) = waiting.pop_front() {
                                let _ = w.send(Err(e));
                            }
                            return;
                        }
                    }
                }
            }
        }
    }
    for w in waiting {
        let _ = w.send(Err(RespError::Closed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_reply_types() {
        assert_eq!(
            parse_reply(b"+OK\r\n").unwrap(),
            Some((Reply::Simple("OK".into()), 5))
        );
        assert_eq!(
            parse_reply(b":12\r\n").unwrap().unwrap().0,
            Reply::Integer(12)
        );
        assert_eq!(parse_reply(b"$3\r\nab").unwrap(), None);
        assert_eq!(
            parse_reply(b"*2\r\n$1\r\na\r\n$-1\r\n").unwrap().unwrap().0,
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"a".to_vec())),
                Reply::Bulk(None)
            ]))
        );
        assert_eq!(
            encode_command(&[b"DEL", b"k"]),
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec()
        );
    }
}
