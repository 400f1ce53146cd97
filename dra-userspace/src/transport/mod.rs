//! How the bytes of one Diameter connection move (RFC 6733 §2.1): a transport sets a
//! connection up and hands over its two halves; everything after that — framing,
//! decoding, the peer state machine, writing encoded messages — is one driver for
//! every transport: the agent's reader and writer tasks ([`crate::agent::io`]) and
//! dra-loadgen's connection driver.
//!
//! ```text
//!  transport            sets up                          hands over
//!  Kind::Tcp            connect / accept                  Connection { remote, local, kind }
//!  Kind::Tls (TLS/TCP)  connect / accept, then handshake  the same, and `tls`: version and the
//!                       (tls::Connector, tls::Acceptor)   peer's certificate
//!  Kind::Sctp           connectx / accept, multihomed     the same, and `sctp`: both sides'
//!                       (sctp::SctpStream, SctpListener)  addresses of the association
//!                                                         .split() -> (ReadHalf, WriteHalf)
//! ```
//!
//! [`ReadHalf`] and [`WriteHalf`] are `AsyncRead` / `AsyncWrite` over whichever stream
//! the connection has, dispatched by an enum (no boxing, no virtual call per read). A
//! read returns what the transport delivered; the driver's `Framer` cuts it into
//! messages, so a transport that delivers whole messages per read (SCTP's one-to-one
//! sockets) fits the same driver as a byte stream.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

pub mod sctp;
pub mod tls;

type TlsStream = tokio_rustls::TlsStream<TcpStream>;

/// Which transport a connection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// TCP (RFC 6733 §2.1).
    Tcp,
    /// TLS over TCP (RFC 6733 §13.1), from the first byte.
    Tls,
    /// SCTP (RFC 6733 §2.1.1), one-to-one style, multihomed.
    Sctp,
}

impl Kind {
    /// The name logs and `dra status` use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Tls => "tls",
            Kind::Sctp => "sctp",
        }
    }
}

/// One established transport connection, before any Diameter byte.
#[derive(Debug)]
pub struct Connection {
    /// The peer's address.
    pub remote: SocketAddr,
    /// Our address.
    pub local: SocketAddr,
    /// What the TLS handshake established (TLS only).
    pub tls: Option<tls::TlsInfo>,
    /// Every address of the association on each side (SCTP only).
    pub sctp: Option<SctpPaths>,
    stream: Stream,
}

/// An SCTP association's addresses (multihoming), read when it was set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SctpPaths {
    pub local: Vec<SocketAddr>,
    pub remote: Vec<SocketAddr>,
}

#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Sctp(sctp::SctpStream),
}

impl Connection {
    /// A TCP connection (Nagle off: Diameter messages are written whole, and a request
    /// must not wait for the previous one's ACK).
    pub fn tcp(stream: TcpStream) -> io::Result<Connection> {
        let remote = stream.peer_addr()?;
        let local = stream.local_addr()?;
        let _ = stream.set_nodelay(true);
        Ok(Connection {
            remote,
            local,
            tls: None,
            sctp: None,
            stream: Stream::Tcp(stream),
        })
    }

    /// An SCTP association: `remote` and `local` are its primary path.
    pub fn sctp(stream: sctp::SctpStream) -> io::Result<Connection> {
        let (remote, local) = stream.primary()?;
        let paths = SctpPaths {
            local: stream.local_addrs(),
            remote: stream.peer_addrs(),
        };
        Ok(Connection {
            remote,
            local,
            tls: None,
            sctp: Some(paths),
            stream: Stream::Sctp(stream),
        })
    }

    /// A TLS connection whose handshake completed (`tls::Acceptor`, `tls::Connector`).
    fn tls(remote: SocketAddr, local: SocketAddr, s: TlsStream, info: tls::TlsInfo) -> Connection {
        Connection {
            remote,
            local,
            tls: Some(info),
            sctp: None,
            stream: Stream::Tls(Box::new(s)),
        }
    }

    /// The transport.
    pub fn kind(&self) -> Kind {
        match self.stream {
            Stream::Tcp(_) => Kind::Tcp,
            Stream::Tls(_) => Kind::Tls,
            Stream::Sctp(_) => Kind::Sctp,
        }
    }

    /// The two halves, for a reader and a writer that run on their own.
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        match self.stream {
            Stream::Tcp(s) => {
                let fd = s.as_raw_fd();
                let (r, w) = s.into_split();
                (ReadHalf(Read::Tcp(r), fd), WriteHalf(Write::Tcp(w)))
            }
            // The two halves share the TLS session (a lock each poll; the reader and
            // the writer rarely contend).
            Stream::Tls(s) => {
                let fd = s.get_ref().0.as_raw_fd();
                let (r, w) = tokio::io::split(*s);
                (ReadHalf(Read::Tls(r), fd), WriteHalf(Write::Tls(w)))
            }
            Stream::Sctp(s) => {
                let (r, w) = s.split();
                let fd = r.raw_fd();
                (ReadHalf(Read::Sctp(r), fd), WriteHalf(Write::Sctp(w)))
            }
        }
    }
}

/// The reading half of a [`Connection`] (and its socket, for [`ReadHalf::queued`]).
#[derive(Debug)]
pub struct ReadHalf(Read, RawFd);

impl ReadHalf {
    /// Bytes received by the kernel and not read yet (FIONREAD; for TLS, encrypted
    /// bytes): how far the reader is behind its peer. `None` if the kernel does not say.
    pub fn queued(&self) -> Option<usize> {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD on a socket this half keeps open, into a c_int.
        let r = unsafe { libc::ioctl(self.1, libc::FIONREAD, &mut n) };
        (r == 0).then_some(n.max(0) as usize)
    }
}

#[derive(Debug)]
enum Read {
    Tcp(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream>),
    Sctp(sctp::SctpRead),
}

/// The writing half of a [`Connection`]; `shutdown` closes our direction.
#[derive(Debug)]
pub struct WriteHalf(Write);

#[derive(Debug)]
enum Write {
    Tcp(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream>),
    Sctp(sctp::SctpWrite),
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Read::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            Read::Tls(r) => Pin::new(r).poll_read(cx, buf),
            Read::Sctp(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Write::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Write::Tls(w) => Pin::new(w).poll_write(cx, buf),
            Write::Sctp(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Write::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Write::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Write::Sctp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.0 {
            Write::Tcp(w) => w.is_write_vectored(),
            Write::Tls(w) => w.is_write_vectored(),
            Write::Sctp(_) => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Write::Tcp(w) => Pin::new(w).poll_flush(cx),
            Write::Tls(w) => Pin::new(w).poll_flush(cx),
            Write::Sctp(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Write::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Write::Tls(w) => Pin::new(w).poll_shutdown(cx),
            Write::Sctp(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
