//! Diameter over SCTP (RFC 6733 §2.1.1): one-to-one style sockets (RFC 6458 §3,
//! `SOCK_STREAM` + `IPPROTO_SCTP`) under tokio through [`AsyncFd`], with the kernel's
//! SCTP (no library: the socket API is a handful of `setsockopt`s and `sendmsg`).
//!
//! - Multihoming: a listener or a dialling peer binds every local address given
//!   (`bind`, then `SCTP_SOCKOPT_BINDX_ADD`); a dial offers every remote address
//!   (`SCTP_SOCKOPT_CONNECTX`); the association's addresses on both sides are read
//!   back (`SCTP_GET_LOCAL_ADDRS` / `SCTP_GET_PEER_ADDRS`) for the CER's
//!   Host-IP-Address and for `dra status`.
//! - Every DATA chunk carries PPID 46 (RFC 6733 §2.1.1), sent with `SCTP_SNDINFO`;
//!   `SCTP_NODELAY` is set (a request must not wait for its predecessor's SACK).
//! - Streams: [`OUT_STREAMS`] outbound streams are asked for at INIT. The base
//!   protocol (CER/CEA, DWR/DWA, DPR/DPA: application 0) goes on stream 0; every
//!   other message on stream 1 + (hash of its Session-Id) mod (streams − 1), so one
//!   session's messages stay in order on one stream while a slow session's lost chunk
//!   does not hold the others back (head-of-line blocking, RFC 6733 §2.1.1). A message
//!   without a Session-Id goes by its Hop-by-Hop Identifier.
//! - One Diameter message is one SCTP user message: the write half cuts the bytes it
//!   is given at Diameter message boundaries (the header's length) and sends each as
//!   one `sendmsg`, so the one connection driver writes the same encoded bytes as on
//!   TCP. Reads return bytes in arrival order; on a one-to-one socket the messages of
//!   all streams arrive whole and one after the other (no fragment interleaving), so
//!   the driver's framer reads them as a stream.
//! - Close: `shutdown(SHUT_WR)` is SCTP's graceful SHUTDOWN; the peer's SHUTDOWN or
//!   ABORT reads as end of file or an error, as a TCP close does.

use std::{
    io,
    mem::{size_of, zeroed},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, unix::AsyncFd};

/// SCTP's IP protocol number.
const IPPROTO_SCTP: libc::c_int = 132;
/// `linux/sctp.h` socket options the libc crate does not carry.
const SCTP_SOCKOPT_BINDX_ADD: libc::c_int = 100;
const SCTP_GET_PEER_ADDRS: libc::c_int = 108;
const SCTP_GET_LOCAL_ADDRS: libc::c_int = 109;
const SCTP_SOCKOPT_CONNECTX: libc::c_int = 110;
/// Diameter's payload protocol identifier (IANA).
pub const PPID_DIAMETER: u32 = 46;
/// Outbound streams asked for at INIT (the peer may grant fewer).
pub const OUT_STREAMS: u16 = 16;
/// Largest message the write half holds while cutting messages out of its input.
const MAX_PENDING: usize = 1 << 20;

/// Whether this kernel has SCTP sockets; the error names what is missing.
pub fn supported() -> Result<(), String> {
    // SAFETY: socket(2) with constant arguments; the fd is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, IPPROTO_SCTP) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPROTONOSUPPORT) | Some(libc::ESOCKTNOSUPPORT) => format!(
                "kernel {} has no SCTP sockets ({e}): the sctp module is not loaded or \
                 not built (modprobe sctp; CONFIG_IP_SCTP)",
                crate::dataplane::kernel::release()
            ),
            _ => format!("SCTP socket: {e}"),
        });
    }
    // SAFETY: the fd just created.
    unsafe { libc::close(fd) };
    Ok(())
}

/// One socket address as the kernel wants it, and its length.
fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: a zeroed sockaddr_storage is valid; the branches write one family's
    // struct into it.
    unsafe {
        let mut ss: libc::sockaddr_storage = zeroed();
        let len = match a {
            SocketAddr::V4(v4) => {
                let sin = &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in);
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = v4.port().to_be();
                sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v6) => {
                let sin6 = &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6);
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = v6.port().to_be();
                sin6.sin6_addr.s6_addr = v6.ip().octets();
                sin6.sin6_scope_id = v6.scope_id();
                size_of::<libc::sockaddr_in6>()
            }
        };
        (ss, len as libc::socklen_t)
    }
}

/// Addresses packed one after the other, as `bindx` and `connectx` take them.
fn packed(addrs: &[SocketAddr]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in addrs {
        let (ss, len) = sockaddr(*a);
        // SAFETY: the first `len` bytes of the storage are the address.
        let bytes =
            unsafe { std::slice::from_raw_parts(&ss as *const _ as *const u8, len as usize) };
        out.extend_from_slice(bytes);
    }
    out
}

/// Reads back addresses packed as the kernel writes them (`sctp_getaddrs`).
fn unpacked(mut b: &[u8], n: usize) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for _ in 0..n {
        if b.len() < 2 {
            break;
        }
        let family = u16::from_ne_bytes([b[0], b[1]]) as libc::c_int;
        let (addr, len) = match family {
            libc::AF_INET if b.len() >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: enough bytes for a sockaddr_in, read unaligned.
                let sin: libc::sockaddr_in =
                    unsafe { std::ptr::read_unaligned(b.as_ptr() as *const _) };
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                (
                    SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))),
                    size_of::<libc::sockaddr_in>(),
                )
            }
            libc::AF_INET6 if b.len() >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: enough bytes for a sockaddr_in6, read unaligned.
                let s: libc::sockaddr_in6 =
                    unsafe { std::ptr::read_unaligned(b.as_ptr() as *const _) };
                (
                    SocketAddr::V6(SocketAddrV6::new(
                        Ipv6Addr::from(s.sin6_addr.s6_addr),
                        u16::from_be(s.sin6_port),
                        s.sin6_flowinfo,
                        s.sin6_scope_id,
                    )),
                    size_of::<libc::sockaddr_in6>(),
                )
            }
            _ => break,
        };
        out.push(addr);
        b = &b[len..];
    }
    out
}

/// `fd` in tokio's reactor.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is an open descriptor that stays open, the same one, until the
    // AsyncFd that owns it is dropped.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `setsockopt` of a plain value.
fn set<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the option's type, its size given.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            v as *const T as *const _,
            size_of::<T>() as _,
        )
    })
    .map(drop)
}

/// A new non-blocking one-to-one SCTP socket of `a`'s family, with the options every
/// Diameter association gets (streams, no Nagle, PPID 46 by default).
fn socket(a: SocketAddr) -> io::Result<OwnedFd> {
    let family = if a.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket(2); the fd is owned at once.
    let fd = check(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            IPPROTO_SCTP,
        )
    })?;
    // SAFETY: a fresh fd nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = fd.as_raw_fd();
    let init = libc::sctp_initmsg {
        sinit_num_ostreams: OUT_STREAMS,
        sinit_max_instreams: OUT_STREAMS,
        sinit_max_attempts: 0,
        sinit_max_init_timeo: 0,
    };
    set(raw, IPPROTO_SCTP, libc::SCTP_INITMSG, &init)?;
    set(raw, IPPROTO_SCTP, libc::SCTP_NODELAY, &1 as &libc::c_int)?;
    set(
        raw,
        libc::SOL_SOCKET,
        libc::SO_REUSEADDR,
        &1 as &libc::c_int,
    )?;
    Ok(fd)
}

/// Binds `fd` to every address of `local` (the first with bind(2), the others added).
fn bind_all(fd: RawFd, local: &[SocketAddr]) -> io::Result<()> {
    let Some(first) = local.first() else {
        return Ok(());
    };
    let (ss, len) = sockaddr(*first);
    // SAFETY: a valid sockaddr of `len` bytes.
    check(unsafe { libc::bind(fd, &ss as *const _ as *const libc::sockaddr, len) })?;
    // The others on the first one's port (a multihomed endpoint has one port).
    let rest: Vec<SocketAddr> = local[1..]
        .iter()
        .map(|a| SocketAddr::new(a.ip(), first.port()))
        .collect();
    if !rest.is_empty() {
        let b = packed(&rest);
        // SAFETY: `b` holds the packed addresses, its length given.
        check(unsafe {
            libc::setsockopt(
                fd,
                IPPROTO_SCTP,
                SCTP_SOCKOPT_BINDX_ADD,
                b.as_ptr() as *const _,
                b.len() as _,
            )
        })?;
    }
    Ok(())
}

/// The addresses of `fd`'s association on one side (`SCTP_GET_LOCAL_ADDRS` or
/// `SCTP_GET_PEER_ADDRS`); a listener's own with association id 0.
fn addrs(fd: RawFd, which: libc::c_int) -> Vec<SocketAddr> {
    // struct sctp_getaddrs { sctp_assoc_t assoc_id; __u32 addr_num; __u8 addrs[]; }
    let mut buf = vec![0u8; 8 + 16 * size_of::<libc::sockaddr_in6>()];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the buffer's size is given; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd,
            IPPROTO_SCTP,
            which,
            buf.as_mut_ptr() as *mut _,
            &mut len,
        )
    };
    if r < 0 || len < 8 {
        return Vec::new();
    }
    let n = u32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    unpacked(&buf[8..len as usize], n)
}

/// A listening SCTP endpoint (one-to-one style).
pub struct SctpListener {
    fd: AsyncFd<OwnedFd>,
}

impl SctpListener {
    /// Listens on every address of `local` (one port: the first address's).
    pub fn bind(local: &[SocketAddr]) -> io::Result<SctpListener> {
        let first = *local
            .first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
        let fd = socket(first)?;
        bind_all(fd.as_raw_fd(), local)?;
        // SAFETY: listen(2) on our bound socket.
        check(unsafe { libc::listen(fd.as_raw_fd(), 1024) })?;
        Ok(SctpListener { fd: register(fd)? })
    }

    /// The addresses it listens on.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        addrs(self.fd.as_raw_fd(), SCTP_GET_LOCAL_ADDRS)
    }

    /// The next association.
    pub async fn accept(&self) -> io::Result<SctpStream> {
        loop {
            let mut guard = self.fd.readable().await?;
            // SAFETY: accept4(2) on our listening socket; the address is not wanted.
            let r = unsafe {
                libc::accept4(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if r >= 0 {
                // SAFETY: the fd accept4 just returned.
                let fd = unsafe { OwnedFd::from_raw_fd(r) };
                return SctpStream::from_fd(fd);
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                guard.clear_ready();
                continue;
            }
            return Err(e);
        }
    }
}

/// An established SCTP association (one-to-one style socket).
#[derive(Clone)]
pub struct SctpStream {
    fd: Arc<AsyncFd<OwnedFd>>,
}

impl std::fmt::Debug for SctpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SctpStream")
            .field("local", &self.local_addrs())
            .field("peer", &self.peer_addrs())
            .finish()
    }
}

impl SctpStream {
    fn from_fd(fd: OwnedFd) -> io::Result<SctpStream> {
        Ok(SctpStream {
            fd: Arc::new(register(fd)?),
        })
    }

    /// Sets up an association to the peer at `remote` (every address of a multihomed
    /// peer, one port), from `local` (none: the kernel's choice of every address).
    pub async fn connect(local: &[SocketAddr], remote: &[SocketAddr]) -> io::Result<SctpStream> {
        let first = *remote
            .first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
        let fd = socket(first)?;
        let local: Vec<SocketAddr> = local.iter().map(|a| SocketAddr::new(a.ip(), 0)).collect();
        bind_all(fd.as_raw_fd(), &local)?;
        let b = packed(remote);
        // SAFETY: `b` holds the packed addresses, its length given; non-blocking, so
        // EINPROGRESS means the INIT is on its way.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                IPPROTO_SCTP,
                SCTP_SOCKOPT_CONNECTX,
                b.as_ptr() as *const _,
                b.len() as _,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        let s = SctpStream::from_fd(fd)?;
        let _ = s.fd.writable().await?;
        let mut err: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: SO_ERROR into an int of the given size.
        check(unsafe {
            libc::getsockopt(
                s.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut _ as *mut _,
                &mut len,
            )
        })?;
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
        Ok(s)
    }

    /// This end's addresses of the association.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        addrs(self.fd.as_raw_fd(), SCTP_GET_LOCAL_ADDRS)
    }

    /// The peer's addresses of the association.
    pub fn peer_addrs(&self) -> Vec<SocketAddr> {
        addrs(self.fd.as_raw_fd(), SCTP_GET_PEER_ADDRS)
    }

    /// The peer's primary address (where the association was set up) and ours.
    pub fn primary(&self) -> io::Result<(SocketAddr, SocketAddr)> {
        let name = |f: unsafe extern "C" fn(
            RawFd,
            *mut libc::sockaddr,
            *mut libc::socklen_t,
        ) -> libc::c_int| {
            // SAFETY: a zeroed storage of the given size for the kernel to fill.
            unsafe {
                let mut ss: libc::sockaddr_storage = zeroed();
                let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                check(f(
                    self.fd.as_raw_fd(),
                    &mut ss as *mut _ as *mut _,
                    &mut len,
                ))?;
                let b = std::slice::from_raw_parts(&ss as *const _ as *const u8, len as usize);
                unpacked(b, 1)
                    .pop()
                    .ok_or_else(|| io::Error::other("unknown address family"))
            }
        };
        Ok((name(libc::getpeername)?, name(libc::getsockname)?))
    }

    /// The number of outbound streams the association has (`SCTP_STATUS`).
    pub fn out_streams(&self) -> u16 {
        // struct sctp_status: assoc_id (4), state (4), rwnd (4), unackdata (2),
        // penddata (2), instrms (2), outstrms (2), ... — read into a zeroed buffer.
        let mut buf = [0u8; 256];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: the buffer's size is given.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                IPPROTO_SCTP,
                libc::SCTP_STATUS,
                buf.as_mut_ptr() as *mut _,
                &mut len,
            )
        };
        if r < 0 || len < 20 {
            return 1;
        }
        u16::from_ne_bytes([buf[18], buf[19]]).max(1)
    }

    /// The two halves, for a reader and a writer that run on their own.
    pub fn split(self) -> (SctpRead, SctpWrite) {
        let streams = self.out_streams();
        (
            SctpRead {
                fd: self.fd.clone(),
            },
            SctpWrite {
                fd: self.fd,
                pending: Vec::new(),
                streams,
            },
        )
    }
}

/// The reading half: bytes in arrival order.
#[derive(Debug)]
pub struct SctpRead {
    fd: Arc<AsyncFd<OwnedFd>>,
}

impl SctpRead {
    /// The association's socket.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsyncRead for SctpRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            // SAFETY: recv(2) into the initialised unfilled part of the buffer.
            let r = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    unfilled.as_mut_ptr() as *mut _,
                    unfilled.len(),
                    0,
                )
            };
            if r >= 0 {
                buf.advance(r as usize);
                return Poll::Ready(Ok(()));
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                guard.clear_ready();
                continue;
            }
            return Poll::Ready(Err(e));
        }
    }
}

/// The writing half: cuts what it is given into Diameter messages and sends each as
/// one SCTP message, PPID 46, on its stream (module docs).
#[derive(Debug)]
pub struct SctpWrite {
    fd: Arc<AsyncFd<OwnedFd>>,
    /// Bytes given and not sent yet (the first of them start a message).
    pending: Vec<u8>,
    /// Outbound streams of the association.
    streams: u16,
}

/// The stream a Diameter message goes on, of `streams` (module docs).
pub fn stream_of(msg: &[u8], streams: u16) -> u16 {
    if streams <= 1 || msg.len() < 20 {
        return 0;
    }
    let app = u32::from_be_bytes([msg[8], msg[9], msg[10], msg[11]]);
    if app == 0 {
        return 0;
    }
    // The Session-Id, RFC 6733 §8.8: the first AVP where a message has one.
    let key: &[u8] = match msg.get(20..28) {
        Some(h) if u32::from_be_bytes([h[0], h[1], h[2], h[3]]) == 263 => {
            let flags = h[4];
            let len = u32::from_be_bytes([0, h[5], h[6], h[7]]) as usize;
            let data = if flags & 0x80 != 0 { 32 } else { 28 };
            msg.get(data..20 + len).unwrap_or(&msg[12..16])
        }
        _ => &msg[12..16],
    };
    // FNV-1a: stable across runs and hosts.
    let mut h: u32 = 0x811c_9dc5;
    for b in key {
        h = (h ^ *b as u32).wrapping_mul(0x0100_0193);
    }
    1 + (h % (streams as u32 - 1)) as u16
}

impl SctpWrite {
    /// Sends the complete messages at the front of `pending`; Pending when the socket
    /// is full (what is left stays).
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (fd, streams) = (&self.fd, self.streams);
        poll_send_with(&mut self.pending, cx, |cx, msg| {
            send_ready(fd, cx, msg, streams)
        })
    }
}

/// Sends `msg` on its stream once the socket has room (Pending, woken by the socket's
/// readiness, while it has none).
fn send_ready(
    fd: &AsyncFd<OwnedFd>,
    cx: &mut Context<'_>,
    msg: &[u8],
    streams: u16,
) -> Poll<io::Result<()>> {
    let stream = stream_of(msg, streams);
    loop {
        let mut guard = ready!(fd.poll_write_ready(cx))?;
        match send_message(fd.as_raw_fd(), msg, stream) {
            Ok(()) => return Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// Hands the complete messages at the front of `pending` to `send`, one SCTP message
/// each; Pending when `send` is (what is left stays). The write side's buffering, apart
/// from the socket.
fn poll_send_with(
    pending: &mut Vec<u8>,
    cx: &mut Context<'_>,
    mut send: impl FnMut(&mut Context<'_>, &[u8]) -> Poll<io::Result<()>>,
) -> Poll<io::Result<()>> {
    loop {
        if pending.len() < 4 {
            return Poll::Ready(Ok(()));
        }
        let len = u32::from_be_bytes([0, pending[1], pending[2], pending[3]]) as usize;
        if len < 20 {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a Diameter message (length below 20)",
            )));
        }
        if pending.len() < len {
            return Poll::Ready(Ok(()));
        }
        ready!(send(cx, &pending[..len]))?;
        pending.drain(..len);
    }
}

/// `poll_write` over [`poll_send_with`]: takes `buf` unless complete messages of
/// [`MAX_PENDING`] bytes or more wait for room (then Pending, woken by `send`'s socket).
fn poll_write_with(
    pending: &mut Vec<u8>,
    buf: &[u8],
    cx: &mut Context<'_>,
    mut send: impl FnMut(&mut Context<'_>, &[u8]) -> Poll<io::Result<()>>,
) -> Poll<io::Result<usize>> {
    if pending.len() >= MAX_PENDING {
        // What a send leaves is at most one incomplete message, which only more bytes
        // can complete: once the complete ones are out, take them.
        ready!(poll_send_with(pending, cx, &mut send))?;
    }
    pending.extend_from_slice(buf);
    // Send what is complete now; a full socket leaves it for the next call or flush
    // (the bytes are taken either way).
    if let Poll::Ready(Err(e)) = poll_send_with(pending, cx, &mut send) {
        return Poll::Ready(Err(e));
    }
    Poll::Ready(Ok(buf.len()))
}

/// One `sendmsg` of `msg` as one SCTP user message on `stream`, PPID 46.
fn send_message(fd: RawFd, msg: &[u8], stream: u16) -> io::Result<()> {
    // SAFETY: a msghdr over our buffers: one iovec, one SCTP_SNDINFO control message
    // in a buffer sized by CMSG_SPACE.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: msg.as_ptr() as *mut _,
            iov_len: msg.len(),
        };
        let space = libc::CMSG_SPACE(size_of::<libc::sctp_sndinfo>() as u32) as usize;
        let mut control = vec![0u8; space];
        let mut mh: libc::msghdr = zeroed();
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control.as_mut_ptr() as *mut _;
        mh.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&mh);
        (*c).cmsg_level = IPPROTO_SCTP;
        (*c).cmsg_type = libc::SCTP_SNDINFO;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::sctp_sndinfo>() as u32) as _;
        let info = libc::CMSG_DATA(c) as *mut libc::sctp_sndinfo;
        std::ptr::write_unaligned(
            info,
            libc::sctp_sndinfo {
                snd_sid: stream,
                snd_flags: 0,
                snd_ppid: PPID_DIAMETER.to_be(),
                snd_context: 0,
                snd_assoc_id: 0,
            },
        );
        let r = libc::sendmsg(fd, &mh, libc::MSG_NOSIGNAL);
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if r as usize != msg.len() {
            return Err(io::Error::other("SCTP sendmsg sent part of a message"));
        }
    }
    Ok(())
}

impl AsyncWrite for SctpWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let (fd, streams) = (&this.fd, this.streams);
        poll_write_with(&mut this.pending, buf, cx, |cx, msg| {
            send_ready(fd, cx, msg, streams)
        })
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        if this.pending.len() >= 4 {
            // Only part of a message: the rest must come before it can go.
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        // SAFETY: shutdown(2) on our socket: SCTP's graceful SHUTDOWN.
        check(unsafe { libc::shutdown(this.fd.as_raw_fd(), libc::SHUT_WR) })?;
        Poll::Ready(Ok(()))
    }
}

/// The IP of each address (for Host-IP-Address).
pub fn ips(addrs: &[SocketAddr]) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = addrs.iter().map(|a| a.ip().to_canonical()).collect();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(app: u32, hbh: u32, session: Option<&str>) -> Vec<u8> {
        let mut m = vec![1, 0, 0, 0, 0x80, 0, 1, 0x10];
        m.extend_from_slice(&app.to_be_bytes());
        m.extend_from_slice(&hbh.to_be_bytes());
        m.extend_from_slice(&7u32.to_be_bytes());
        if let Some(s) = session {
            let len = 8 + s.len();
            m.extend_from_slice(&263u32.to_be_bytes());
            m.push(0x40);
            m.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
            m.extend_from_slice(s.as_bytes());
            while m.len() % 4 != 0 {
                m.push(0);
            }
        }
        let n = m.len() as u32;
        m[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
        m
    }

    #[test]
    fn base_protocol_on_stream_0_a_session_always_on_one_other_stream() {
        assert_eq!(stream_of(&message(0, 1, None), 16), 0);
        let a = message(16777238, 1, Some("pgw1.lab.example;1;1"));
        let a2 = message(16777238, 99, Some("pgw1.lab.example;1;1"));
        let s = stream_of(&a, 16);
        assert!((1..16).contains(&s));
        assert_eq!(stream_of(&a2, 16), s, "one session, one stream");
        // Sessions spread over the streams.
        let used: std::collections::BTreeSet<u16> = (0..200)
            .map(|i| stream_of(&message(16777238, i, Some(&format!("pgw1;1;{i}"))), 16))
            .collect();
        assert!(used.len() >= 12, "{used:?}");
        // One stream only: everything on it.
        assert_eq!(stream_of(&a, 1), 0);
    }

    #[test]
    fn packed_addresses_read_back() {
        let addrs: Vec<SocketAddr> = vec![
            "198.18.1.1:3868".parse().unwrap(),
            "[2001:db8::1]:3868".parse().unwrap(),
            "198.18.5.1:3868".parse().unwrap(),
        ];
        assert_eq!(unpacked(&packed(&addrs), 3), addrs);
    }

    /// A message larger than the write buffer's bound, written in pieces, is taken
    /// whole and sent once: the writer never waits on a socket that has room (such a
    /// wait registers no wake-up and would hang the connection's writer for good).
    #[test]
    fn a_message_larger_than_the_buffer_bound_is_taken_and_sent_once() {
        let big = {
            let mut m = message(16777238, 1, Some("pgw1.lab.example;1;1"));
            m.resize(MAX_PENDING + MAX_PENDING / 2, 0);
            let n = m.len() as u32;
            m[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
            m
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut pending = Vec::new();
        let mut sent = Vec::new();
        for piece in big.chunks(64 * 1024) {
            let r = poll_write_with(&mut pending, piece, &mut cx, |_, m| {
                sent.push(m.len());
                Poll::Ready(Ok(()))
            });
            assert!(
                matches!(r, Poll::Ready(Ok(n)) if n == piece.len()),
                "a piece was refused with {} bytes buffered and a socket with room",
                pending.len()
            );
        }
        assert_eq!(sent, [big.len()]);
        assert!(pending.is_empty());
    }

    /// Complete messages of the bound or more waiting on a full socket make the writer
    /// wait (back-pressure), and it takes bytes again once the socket has room.
    #[test]
    fn complete_messages_waiting_on_a_full_socket_make_the_writer_wait() {
        let m = message(16777238, 1, Some("pgw1.lab.example;1;1"));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut pending = Vec::new();
        let full = |_: &mut Context<'_>, _: &[u8]| Poll::Pending;
        while pending.len() < MAX_PENDING {
            assert!(poll_write_with(&mut pending, &m, &mut cx, full).is_ready());
        }
        assert!(poll_write_with(&mut pending, &m, &mut cx, full).is_pending());
        let mut sent = 0;
        let r = poll_write_with(&mut pending, &m, &mut cx, |_, _| {
            sent += 1;
            Poll::Ready(Ok(()))
        });
        assert!(matches!(r, Poll::Ready(Ok(n)) if n == m.len()));
        assert_eq!(
            sent * m.len(),
            MAX_PENDING.div_ceil(m.len()) * m.len() + m.len()
        );
        assert!(pending.is_empty());
    }
}
