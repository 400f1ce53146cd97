//! One driver for a [`PeerConnection`] over a transport connection
//! ([`dra::transport`]: TCP, or TLS over TCP), used by every mode (client, closed loop,
//! scripted peers and servers, server). It follows the driving table of
//! [`dra::diameter::peer`]:
//!
//! ```text
//! start      handle_connected
//! each turn  Mode::turn                    (the mode's own clock: may end the connection)
//!            poll_transmit -> Mode::transmit -> Link::out
//!            poll_event    -> Mode::on_event (PeerEvent::Closed ends the connection)
//!            write Link::out (in this task, or through a writer task)
//!            wait for the first of:
//!              Mode::input                 -> Mode::on_input
//!              a read                      -> frames: Mode::on_frame (raw bytes),
//!                                             decode, Mode::on_message, handle_message,
//!                                             Mode::on_cer / Mode::on_application
//!              end of stream, read error   -> handle_closed
//!              poll_timeout, Mode::deadline -> Mode::on_deadline, handle_timeout
//! ```
//!
//! What differs between the modes (their requests and answers, commands, measurements,
//! logs) is in their [`Mode`]; what they share (framing, decoding, the state machine's
//! inputs and outputs, timers, writing) is here once.

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

use dra::diameter::peer::{Handled, PeerConnection, PeerEvent};
use dra::diameter::{Framer, FramingError, Message, encode_into};
use dra::transport::{Connection, ReadHalf, WriteHalf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How a connection writes.
enum Writer {
    /// In the driving task, `write_all` of everything queued once per turn: the fewest
    /// copies and wake-ups (closed loop, scripted peers; exact write boundaries).
    Direct(WriteHalf),
    /// Through a writer task fed by a channel, so a peer that does not read never
    /// blocks the driver (client), and other tasks can answer on the connection
    /// (server: answers after a service time).
    Task {
        /// Bytes to write, in order.
        tx: mpsc::UnboundedSender<Vec<u8>>,
        /// The writer task.
        task: JoinHandle<()>,
    },
}

/// What to do with the writer when the connection is done.
pub(crate) enum Close {
    /// Write what is queued (also by other tasks), at most this long when given.
    Flush(Option<Duration>),
    /// Drop whatever is still queued.
    Abort,
}

/// The connection a [`Mode`] acts on: the state machine and the bytes to write.
pub(crate) struct Link {
    /// The peer state machine.
    pub pc: PeerConnection,
    /// Bytes to write: written once per turn, after the state machine's messages of
    /// that turn (see [`Mode::transmit`]).
    pub out: Vec<u8>,
    start: Instant,
    rd: ReadHalf,
    writer: Writer,
    read_size: usize,
}

/// Capacity of a [`Writer::Task`] batch.
const BATCH: usize = 16 * 1024;
/// Bytes read at once by a [`Link::with_writer`] connection.
const READ_SIZE: usize = 64 * 1024;

impl Link {
    /// A connection over `stream` that writes in the driving task, its clock starting
    /// at `start`, reading up to `read_size` bytes at once.
    pub fn direct(
        stream: Connection,
        pc: PeerConnection,
        start: Instant,
        read_size: usize,
    ) -> Link {
        let (rd, wr) = stream.split();
        Link {
            pc,
            out: Vec::with_capacity(read_size),
            start,
            rd,
            writer: Writer::Direct(wr),
            read_size,
        }
    }

    /// As [`Link::direct`], but writing through a writer task; also returns the task's
    /// channel, for answers other tasks write on this connection.
    pub fn with_writer(
        stream: Connection,
        pc: PeerConnection,
        start: Instant,
    ) -> (Link, mpsc::UnboundedSender<Vec<u8>>) {
        let (rd, wr) = stream.split();
        let (tx, task) = spawn_writer(wr);
        let link = Link {
            pc,
            out: Vec::with_capacity(BATCH),
            start,
            rd,
            writer: Writer::Task {
                tx: tx.clone(),
                task,
            },
            read_size: READ_SIZE,
        };
        (link, tx)
    }

    /// The state machine's clock: time since the start the link was made with.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Writes (or hands to the writer task) everything in [`Link::out`].
    async fn flush(&mut self) -> io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        match &mut self.writer {
            Writer::Direct(wr) => {
                // TLS holds records until flushed; TCP's flush is a no-op.
                let r = match wr.write_all(&self.out).await {
                    Ok(()) => wr.flush().await,
                    e => e,
                };
                self.out.clear();
                r
            }
            Writer::Task { tx, .. } => {
                let batch = std::mem::replace(&mut self.out, Vec::with_capacity(BATCH));
                let _ = tx.send(batch);
                Ok(())
            }
        }
    }

    /// Writes what is queued, then `bytes` exactly as given in one write (or one batch
    /// of the writer task).
    pub async fn write_now(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.flush().await?;
        match &mut self.writer {
            Writer::Direct(wr) => {
                wr.write_all(&bytes).await?;
                wr.flush().await
            }
            Writer::Task { tx, .. } => {
                let _ = tx.send(bytes);
                Ok(())
            }
        }
    }

    /// Ends the connection (the socket closes once both halves are gone).
    pub async fn close(self, how: Close) {
        let Writer::Task { tx, task } = self.writer else {
            return;
        };
        drop(tx);
        match how {
            Close::Flush(None) => {
                let _ = task.await;
            }
            Close::Flush(Some(limit)) => {
                let abort = task.abort_handle();
                if tokio::time::timeout(limit, task).await.is_err() {
                    abort.abort();
                }
            }
            Close::Abort => task.abort(),
        }
    }
}

/// Whether the connection goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on.
    Continue,
    /// End the connection now (nothing more is written).
    End,
}

/// Why [`drive`] returned.
#[derive(Debug)]
pub(crate) enum Exit {
    /// The state machine closed ([`PeerEvent::Closed`]); what it queued was written.
    Closed,
    /// Writing failed before that.
    WriteFailed(io::Error),
    /// The mode returned [`Flow::End`].
    Ended,
}

/// What one mode does with a connection. Every hook but [`Mode::on_input`] and
/// [`Mode::on_event`] has a default.
pub(crate) trait Mode: Send {
    /// Something from outside the connection: a command, a stop signal.
    type Input: Send;

    /// Waits for the next input (cancel-safe: dropped whenever the socket or a timer
    /// is first). Default: none ever.
    fn input(&mut self) -> impl Future<Output = Self::Input> + Send {
        std::future::pending()
    }

    /// Acts on an input.
    fn on_input(
        &mut self,
        input: Self::Input,
        link: &mut Link,
    ) -> impl Future<Output = Flow> + Send;

    /// Start of every turn, before the state machine's outputs: the mode's own clock.
    fn turn(&mut self, _link: &mut Link) -> Flow {
        Flow::Continue
    }

    /// The mode's next deadline besides the state machine's.
    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// A deadline passed (the mode's or the state machine's, which runs after this).
    fn on_deadline(&mut self, _link: &mut Link) {}

    /// A message of the state machine, to be written.
    fn transmit(&mut self, msg: &Message, out: &mut Vec<u8>) {
        let _ = encode_into(msg, out);
    }

    /// An event of the state machine; [`PeerEvent::Closed`] is the last one.
    fn on_event(&mut self, event: PeerEvent, link: &mut Link);

    /// A whole frame as read, at `at` (one instant per read): `true` when the mode took
    /// it (it then counts as traffic for the watchdog, once per read).
    fn on_frame(&mut self, _frame: &[u8], _at: Instant, _link: &mut Link) -> bool {
        false
    }

    /// A decoded message, before the state machine: `None` when the mode took it.
    fn on_message(&mut self, msg: Message, _link: &mut Link) -> Option<Message> {
        Some(msg)
    }

    /// A CER passed the checks (responder): accepted by default.
    fn on_cer(&mut self, link: &mut Link) {
        let now = link.now();
        link.pc.accept_cer(now);
    }

    /// An application message (request or answer) the state machine passed on.
    fn on_application(&mut self, _msg: Message, _link: &mut Link) {}

    /// The byte stream is not Diameter (RFC 6733 §3): by default the connection is
    /// aborted; the rest of the read is not looked at.
    fn on_framing_error(&mut self, _error: FramingError, link: &mut Link) -> Flow {
        let now = link.now();
        link.pc.abort(now);
        Flow::Continue
    }
}

/// Drives `link` with `mode` until the state machine closes, a write fails or the mode
/// ends it. The caller then closes the link ([`Link::close`]).
pub(crate) async fn drive<M: Mode>(link: &mut Link, mode: &mut M) -> Exit {
    let mut framer = Framer::new();
    let mut buf = vec![0u8; link.read_size];
    let now = link.now();
    link.pc.handle_connected(now);
    loop {
        if mode.turn(link) == Flow::End {
            return Exit::Ended;
        }
        while let Some(m) = link.pc.poll_transmit() {
            mode.transmit(&m, &mut link.out);
        }
        let mut closed = false;
        while let Some(e) = link.pc.poll_event() {
            closed |= matches!(e, PeerEvent::Closed { .. });
            mode.on_event(e, link);
        }
        let written = link.flush().await;
        if closed {
            // The transport closes after the last writes, whether they went out or not.
            return Exit::Closed;
        }
        if let Err(e) = written {
            return Exit::WriteFailed(e);
        }
        let deadline = match (link.pc.poll_timeout(), mode.deadline()) {
            (Some(t), Some(d)) => Some(d.min(link.start + t)),
            (t, d) => d.or(t.map(|t| link.start + t)),
        };
        let flow = tokio::select! {
            input = mode.input() => mode.on_input(input, link).await,
            r = link.rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let now = link.now();
                    link.pc.handle_closed(now);
                    Flow::Continue
                }
                Ok(n) => {
                    framer.push(&buf[..n]);
                    read_frames(&mut framer, link, mode)
                }
            },
            () = sleep_until(deadline) => {
                mode.on_deadline(link);
                let now = link.now();
                link.pc.handle_timeout(now);
                Flow::Continue
            }
        };
        if flow == Flow::End {
            return Exit::Ended;
        }
    }
}

/// Hands every whole frame of the framer to the mode and the state machine.
fn read_frames<M: Mode>(framer: &mut Framer, link: &mut Link, mode: &mut M) -> Flow {
    let at = Instant::now();
    let now = at.duration_since(link.start);
    let mut traffic = false;
    loop {
        let frame = match framer.next_message() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                if mode.on_framing_error(e, link) == Flow::End {
                    return Flow::End;
                }
                break;
            }
        };
        if mode.on_frame(&frame, at, link) {
            traffic = true;
            continue;
        }
        let Ok(msg) = Message::decode(&frame) else {
            continue;
        };
        let Some(msg) = mode.on_message(msg, link) else {
            continue;
        };
        match link.pc.handle_message(now, msg) {
            Handled::Consumed => {}
            Handled::CerReceived { .. } => mode.on_cer(link),
            Handled::Application(m) => mode.on_application(m, link),
        }
    }
    if traffic {
        // RFC 3539 §3.4.1: any message from the peer counts as traffic for the watchdog.
        link.pc.handle_traffic(now);
    }
    Flow::Continue
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// Spawns the writer half: everything sent on the channel is written in order.
fn spawn_writer(mut wr: WriteHalf) -> (mpsc::UnboundedSender<Vec<u8>>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let h = tokio::spawn(async move {
        while let Some(mut buf) = rx.recv().await {
            // Coalesce whatever else is queued.
            while let Ok(more) = rx.try_recv() {
                buf.extend_from_slice(&more);
                if buf.len() > 256 * 1024 {
                    break;
                }
            }
            if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    (tx, h)
}
