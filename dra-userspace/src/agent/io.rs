//! Per-connection I/O tasks: a reader (TCP → Framer → decode → core) and a writer
//! (bounded queue → TCP). No protocol logic: the core owns every `PeerConnection`.
//!
//! Without the XDP fast path the reader also applies the ingress limits
//! ([`crate::limiter`]) to each framed message before decoding it: an over-limit
//! request is marked in its flags byte, exactly as XDP marks it, so the core's marked
//! path answers it; one over a `drop` limit is held: the reader reads nothing more
//! from that connection until the buckets take it (back-pressure through TCP flow
//! control, as XDP_DROP is through retransmission; nothing is lost).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tracing::{Instrument, debug};

use crate::diameter::{DecodeError, Framer, FramingError, Message, decode};
use crate::limiter::{Filter, Limiter, Source};

/// A connection id, unique for the agent's lifetime (never reused).
pub type ConnId = u64;

/// What a connection's tasks report to the core.
#[derive(Debug)]
pub enum IoEvent {
    /// One framed message, decoded (or why it could not be).
    Message {
        /// The connection.
        conn: ConnId,
        /// The decoded message, or the decode error (which may carry a partial request).
        msg: Result<Message, Box<DecodeError>>,
        /// Encoded size, for the pcap/tap and statistics.
        len: usize,
    },
    /// The transport ended: EOF, read error, or broken framing (RFC 6733 §3: a
    /// stream that cannot be framed cannot be resynchronised: close it).
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why, for the log.
        why: CloseCause,
    },
}

/// Why a reader stopped.
#[derive(Debug)]
pub enum CloseCause {
    /// The peer closed its side.
    Eof,
    /// A read failed.
    Io(std::io::Error),
    /// The byte stream is not Diameter (or a message exceeds the size limit).
    Framing(FramingError),
}

/// The handles the core keeps for one connection.
#[derive(Debug)]
pub struct ConnIo {
    /// Encoded messages to write; bounded (see [`crate::agent::AgentOptions::write_queue`]).
    pub tx: mpsc::Sender<Vec<u8>>,
    /// The reader task (aborted when the core drops the connection).
    pub reader: tokio::task::JoinHandle<()>,
    /// Remote address.
    pub remote: SocketAddr,
}

/// Spawns the reader and writer tasks of `stream`. With `limiter` (accepted
/// connections when no fast path is attached) the reader enforces the ingress limits
/// of the connection's source ([`Limiter::source`]: remote address, local port).
pub fn spawn(
    conn: ConnId,
    stream: TcpStream,
    events: mpsc::Sender<IoEvent>,
    max_message_size: usize,
    write_queue: usize,
    limiter: Option<Arc<Limiter>>,
    span: tracing::Span,
) -> std::io::Result<ConnIo> {
    let remote = stream.peer_addr()?;
    let local_port = stream.local_addr()?.port();
    let limits = limiter.and_then(|l| match l.source(remote.ip(), local_port) {
        Source::NotDiameter => None,
        src => Some((l, src)),
    });
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel(write_queue.max(1));
    tokio::spawn(writer(wr, rx).instrument(span.clone()));
    let reader = tokio::spawn(reader(conn, rd, events, max_message_size, limits).instrument(span));
    Ok(ConnIo { tx, reader, remote })
}

async fn reader(
    conn: ConnId,
    mut rd: OwnedReadHalf,
    events: mpsc::Sender<IoEvent>,
    max: usize,
    limits: Option<(Arc<Limiter>, Source)>,
) {
    let mut framer = Framer::with_max_message_size(max);
    let mut buf = vec![0u8; 64 * 1024];
    let why = 'outer: loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) => break CloseCause::Eof,
            Ok(n) => n,
            Err(e) => break CloseCause::Io(e),
        };
        framer.push(&buf[..n]);
        loop {
            match framer.next_message() {
                Ok(Some(mut frame)) => {
                    if let Some((l, src)) = &limits {
                        match l.filter(src, &mut frame, l.now_ns()) {
                            Filter::Pass => {}
                            // An unknown source under `unknown_peer = "drop"`.
                            Filter::Discard => continue,
                            Filter::Hold => {
                                while !l.retry(src, &mut frame, l.now_ns()) {
                                    tokio::time::sleep(l.hold_for(src, &frame, l.now_ns())).await;
                                }
                            }
                        }
                    }
                    let len = frame.len();
                    let msg = decode(&frame).map_err(Box::new);
                    // Bounded channel: a busy core slows the reader, and TCP slows the peer.
                    if events
                        .send(IoEvent::Message { conn, msg, len })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => break 'outer CloseCause::Framing(e),
            }
        }
    };
    debug!(?why, "reader done");
    let _ = events.send(IoEvent::Closed { conn, why }).await;
}

async fn writer(wr: OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    while let Some(bytes) = rx.recv().await {
        if w.write_all(&bytes).await.is_err() {
            return;
        }
        // Coalesce what is already queued, then flush.
        while let Ok(more) = rx.try_recv() {
            if w.write_all(&more).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    // The core dropped the connection: everything queued is written; close our side.
    let _ = w.flush().await;
    let _ = w.into_inner().shutdown().await;
}
