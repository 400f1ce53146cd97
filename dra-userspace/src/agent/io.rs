//! Per-connection I/O tasks: a reader (transport → Framer → decode → core) and a writer
//! (bounded queue → transport), the same for every transport ([`crate::transport`]).
//! No protocol logic: the core owns every `PeerConnection`.
//!
//! The reader of an accepted connection applies the ingress verdicts before decoding
//! each framed message ([`Ingress`]); a request marked to be answered at once (over a
//! `reject` limit, or shed by the overload control) goes to the core undecoded, one
//! marked to be discarded (shed beyond the agent's answer budget) goes nowhere:
//! - with the XDP fast path, requests it marked out of band (they straddled TCP
//!   segments; [`crate::oob`]) get the header mark here;
//! - without it, the reader applies the ingress limits itself ([`crate::limiter`]): an
//!   over-limit request is marked in its flags byte, exactly as XDP marks it, so the
//!   core's marked path answers it; one over a `drop` limit is held: the reader reads
//!   nothing more from that connection until the buckets take it (back-pressure
//!   through TCP flow control, as XDP_DROP is through retransmission; nothing is
//!   lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use dra_common::wire::flags;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tracing::{Instrument, debug};

use crate::diameter::{DecodeError, Framer, FramingError, Message, decode};
use crate::limiter::{Filter, Limiter, Source};
use crate::oob::{self, OobInbox};
use crate::transport::{Connection, ReadHalf, WriteHalf};

/// Who enforces the ingress limits on an accepted connection (see the module docs).
#[derive(Clone, Debug, Default)]
pub enum Ingress {
    /// Nobody here: an outbound connection, or no limits.
    #[default]
    None,
    /// The agent itself (no fast path attached).
    Limiter(Arc<Limiter>),
    /// The XDP fast path; its out-of-band marks are applied by the reader.
    FastPath(Arc<OobInbox>),
}

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
        /// When its bytes were read (how late the agent is: `crate::overload`).
        read_at: Instant,
    },
    /// A request marked to be answered at once (over a `reject` limit, or shed by the
    /// overload control), not decoded: the core answers it from its bytes.
    Marked {
        /// The connection.
        conn: ConnId,
        /// The request's bytes, its mark in the flags byte.
        frame: Vec<u8>,
        /// When its bytes were read.
        read_at: Instant,
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
    /// The byte stream is not Diameter (or a message exceeds the size limit); with the
    /// first bytes (≤ 20) of the message that could not be framed.
    Framing(FramingError, Vec<u8>),
}

/// The handles the core keeps for one connection.
#[derive(Debug)]
pub struct ConnIo {
    /// Encoded messages to write; bounded (see [`crate::agent::AgentOptions::write_queue`]).
    pub tx: mpsc::Sender<Vec<u8>>,
    /// The reader task (aborted when the core drops the connection).
    pub reader: tokio::task::JoinHandle<()>,
    /// Bytes the kernel held for the reader after its latest read (0 when that read
    /// emptied the socket): how far behind its peer the agent is (`crate::overload`).
    pub queued: Arc<AtomicU64>,
}

/// What the readers share with the core: bytes read so far by every reader (the rate
/// the agent takes its input at).
#[derive(Clone, Debug, Default)]
pub struct ReadCounters {
    /// Bytes read from every connection.
    pub bytes: Arc<AtomicU64>,
}

/// How the reader of one connection applies the ingress verdicts.
enum Verdicts {
    None,
    /// The agent's limiter, for this connection's source.
    Limiter(Arc<Limiter>, Source),
    /// The fast path's out-of-band marks, for this connection's flows: its TCP flow,
    /// or each path (pair of addresses) of its SCTP association.
    FastPath(Arc<OobInbox>, Vec<dra_common::maps::FlowKey>),
}

/// Spawns the reader and writer tasks of `stream`. `ingress` says who enforces the
/// ingress limits for an accepted connection (see [`Ingress`]): the agent's limiter
/// (for the connection's source: remote address, local port), or XDP.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    conn: ConnId,
    stream: Connection,
    events: mpsc::Sender<IoEvent>,
    max: usize,
    write_queue: usize,
    ingress: Ingress,
    counters: ReadCounters,
    span: tracing::Span,
) -> ConnIo {
    let (remote, local) = (stream.remote, stream.local);
    let flows = match &stream.sctp {
        None => vec![oob::flow_key(remote, local)],
        // Each of the peer's addresses (a mark names the path its packet took; our
        // side of it is not kept, see `oob`).
        Some(p) => p
            .remote
            .iter()
            .map(|r| oob::flow_key_of(oob::IPPROTO_SCTP, *r, local))
            .collect(),
    };
    let verdicts = match ingress {
        Ingress::None => Verdicts::None,
        Ingress::Limiter(l) => match l.source(remote.ip(), local.port()) {
            Source::NotDiameter => Verdicts::None,
            src => Verdicts::Limiter(l, src),
        },
        Ingress::FastPath(o) => Verdicts::FastPath(o, flows),
    };
    let (rd, wr) = stream.split();
    let (tx, rx) = mpsc::channel(write_queue.max(1));
    tokio::spawn(writer(wr, rx).instrument(span.clone()));
    let queued = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn(
        reader(conn, rd, events, max, verdicts, queued.clone(), counters).instrument(span),
    );
    ConnIo { tx, reader, queued }
}

async fn reader(
    conn: ConnId,
    mut rd: ReadHalf,
    events: mpsc::Sender<IoEvent>,
    max: usize,
    verdicts: Verdicts,
    queued: Arc<AtomicU64>,
    counters: ReadCounters,
) {
    let mut framer = Framer::with_max_message_size(max);
    let mut buf = vec![0u8; 64 * 1024];
    let why = 'outer: loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) => break CloseCause::Eof,
            Ok(n) => n,
            Err(e) => break CloseCause::Io(e),
        };
        let read_at = Instant::now();
        counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        // A read that filled the buffer may have left more in the kernel: how much.
        let left = if n == buf.len() {
            rd.queued().unwrap_or(0)
        } else {
            0
        };
        queued.store(left as u64, Ordering::Relaxed);
        framer.push(&buf[..n]);
        // Every out-of-band mark of a request these bytes complete is in the ring by
        // now (crate::oob, "Ordering").
        if let Verdicts::FastPath(o, _) = &verdicts {
            o.drain();
        }
        loop {
            match framer.next_frame() {
                Ok(Some(frame)) => {
                    match &verdicts {
                        Verdicts::None => {}
                        Verdicts::FastPath(o, keys) => {
                            keys.iter().any(|k| o.apply(k, frame));
                        }
                        Verdicts::Limiter(l, src) => match l.filter(src, frame, l.now_ns()) {
                            Filter::Pass => {}
                            // An unknown source under `unknown_peer = "drop"`.
                            Filter::Discard => continue,
                            Filter::Hold => {
                                while !l.retry(src, frame, l.now_ns()) {
                                    tokio::time::sleep(l.hold_for(src, frame, l.now_ns())).await;
                                }
                            }
                        },
                    }
                    let ev = match marks(frame) {
                        // Shed beyond what the agent can afford to answer: dropped here,
                        // unread (counted where it was marked).
                        m if m & flags::OVERLOAD_DISCARD != 0 => continue,
                        0 => IoEvent::Message {
                            conn,
                            msg: decode(frame).map_err(Box::new),
                            read_at,
                        },
                        _ => IoEvent::Marked {
                            conn,
                            frame: frame.to_vec(),
                            read_at,
                        },
                    };
                    // Bounded channel: a busy core slows the reader, and TCP slows the peer.
                    if events.send(ev).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => break 'outer CloseCause::Framing(e, framer.failed_head().to_vec()),
            }
        }
    };
    debug!(?why, "reader done");
    if let Verdicts::FastPath(o, keys) = &verdicts {
        for k in keys {
            o.forget(k);
        }
    }
    let _ = events.send(IoEvent::Closed { conn, why }).await;
}

/// The marks (fast path or limiter, [`flags::MARKS`]) a request carries; 0 for an
/// answer or an unmarked request.
fn marks(frame: &[u8]) -> u8 {
    match frame.get(4) {
        Some(f) if f & flags::R != 0 => f & flags::MARKS,
        _ => 0,
    }
}

async fn writer(wr: WriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) {
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
