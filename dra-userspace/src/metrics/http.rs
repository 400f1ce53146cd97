//! The `GET /metrics` endpoint: a small HTTP/1.1 server on std threads.
//!
//! Why std threads and not tokio: a scrape is rare (every few seconds), the encoding is
//! CPU work that holds registry locks, and a thread keeps the agent's runtime free of
//! slow or hostile scrapers; it also needs no extra dependency. One accept thread hands
//! each connection to its own short-lived thread (at most [`MAX_CONNECTIONS`] at once),
//! so a stalled client does not block Prometheus.
//!
//! Robustness: the request head must arrive whole within [`REQUEST_TIMEOUT`] and fit in
//! [`MAX_REQUEST_HEAD`] bytes (else 408 / 431); the response must be taken within
//! [`WRITE_TIMEOUT`]; one request per connection (`Connection: close`); connections over
//! the limit are closed at once. [`ServerHandle`] stops the server on drop: the accept
//! thread and every connection thread are joined, so no thread keeps the port.

use std::{
    collections::HashMap,
    io::{self, Read, Write},
    net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use super::Metrics;

/// Content type of `GET /metrics`: OpenMetrics 1.0.0 text (Prometheus negotiates it;
/// counters appear as `<family>_total`, the body ends with `# EOF`).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Largest request head (request line + header fields) accepted, in bytes.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Time a client has to send its whole request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Time a client has to take the whole response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more are closed without a response.
pub const MAX_CONNECTIONS: usize = 16;

/// The path served.
pub const METRICS_PATH: &str = "/metrics";

/// Errors of [`serve`].
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listening socket could not be bound (address in use, not local, no
    /// permission, …).
    #[error("cannot listen for metrics scrapes on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error (e.g. `AddrInUse`).
        #[source]
        source: io::Error,
    },
    /// The bound listener could not be set up (local address, descriptor clone).
    #[error("cannot set up the metrics listener on {addr}")]
    Listener {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The server thread could not be started.
    #[error("cannot start the metrics server thread for {addr}")]
    Spawn {
        /// The bound address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// A running metrics server. Dropping it (or [`ServerHandle::shutdown`]) stops
/// accepting, closes open scrape connections and joins every server thread.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// A second descriptor of the listening socket, used to wake the accept thread.
    waker: TcpListener,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The bound address (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops the server and waits for its threads (same as dropping the handle).
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Linux: shutdown(2) of a listening socket makes a blocked accept(2) return
        // EINVAL at once.
        // SAFETY: `waker` owns a valid socket descriptor for the whole call.
        let rc = unsafe { libc::shutdown(self.waker.as_raw_fd(), libc::SHUT_RDWR) };
        if rc != 0 {
            // Elsewhere: a connection to ourselves wakes accept(2) instead.
            let _ = TcpStream::connect_timeout(&reachable(self.local_addr), Duration::from_secs(1));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The address to connect to for a listener bound to `addr` (unspecified → loopback).
fn reachable(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

/// Binds `addr` and serves `GET /metrics` from `metrics` on a background thread until
/// the returned handle is dropped.
pub fn serve(addr: SocketAddr, metrics: Metrics) -> Result<ServerHandle, MetricsError> {
    let listener = TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
    let setup = |source| MetricsError::Listener { addr, source };
    let local_addr = listener.local_addr().map_err(setup)?;
    let waker = listener.try_clone().map_err(setup)?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = thread::Builder::new()
        .name("dra-metrics".to_string())
        .spawn({
            let stop = Arc::clone(&stop);
            move || accept_loop(&listener, &metrics, &stop)
        })
        .map_err(|source| MetricsError::Spawn {
            addr: local_addr,
            source,
        })?;
    Ok(ServerHandle {
        local_addr,
        stop,
        waker,
        thread: Some(thread),
    })
}

/// Open connections, so they can be closed on shutdown.
type Live = Arc<Mutex<HashMap<u64, TcpStream>>>;

fn accept_loop(listener: &TcpListener, metrics: &Metrics, stop: &AtomicBool) {
    let live: Live = Arc::default();
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id: u64 = 0;
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue;
            }
            Err(_) => {
                // E.g. out of descriptors: back off instead of spinning.
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        workers.retain(|w| !w.is_finished());
        if workers.len() >= MAX_CONNECTIONS {
            continue; // dropping `stream` closes it
        }
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        let id = next_id;
        next_id += 1;
        live.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, clone);
        let spawned = thread::Builder::new()
            .name("dra-metrics-conn".to_string())
            .spawn({
                let live = Arc::clone(&live);
                let metrics = metrics.clone();
                move || {
                    handle_connection(stream, &metrics);
                    live.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&id);
                }
            });
        match spawned {
            Ok(w) => workers.push(w),
            Err(_) => {
                live.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
            }
        }
    }
    for s in live.lock().unwrap_or_else(PoisonError::into_inner).values() {
        let _ = s.shutdown(Shutdown::Both);
    }
    for w in workers {
        let _ = w.join();
    }
}

/// Why no request head could be read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// The client closed (or reset) before a whole head arrived: nothing to answer.
    Closed,
    /// The head did not arrive within [`REQUEST_TIMEOUT`].
    Timeout,
    /// The head exceeds [`MAX_REQUEST_HEAD`].
    TooLarge,
}

/// Length of the head in `buf` including its terminating empty line, if complete.
/// RFC 9112 §2.2: a bare LF is accepted as a line terminator.
fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if buf[i..].starts_with(b"\n\n") || buf[i..].starts_with(b"\n\r\n") {
            Some(i + if buf[i + 1] == b'\n' { 2 } else { 3 })
        } else {
            None
        }
    })
}

fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, HeadError> {
    let mut buf = vec![0u8; MAX_REQUEST_HEAD];
    let mut len = 0;
    loop {
        if let Some(end) = head_end(&buf[..len]) {
            buf.truncate(end);
            return Ok(buf);
        }
        if len == buf.len() {
            return Err(HeadError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(HeadError::Timeout);
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::Timeout);
            }
            Err(_) => return Err(HeadError::Closed),
        }
    }
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// `GET /metrics` (`head_only` for HEAD).
    Metrics { head_only: bool },
    /// Malformed request line.
    BadRequest,
    /// Not HTTP/1.x.
    VersionNotSupported,
    /// Another path.
    NotFound,
    /// `/metrics` with another method.
    MethodNotAllowed,
}

/// Routes a request head (request line first; header fields are not needed).
fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    // RFC 9112 §2.2: ignore empty lines before the request line.
    let Some(line) = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .find(|l| !l.is_empty())
    else {
        return Route::BadRequest;
    };
    // RFC 9112 §3: method SP request-target SP HTTP-version.
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if method.is_empty() || target.is_empty() || !version.starts_with("HTTP/") {
        return Route::BadRequest;
    }
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Route::VersionNotSupported;
    }
    // RFC 9112 §3.2.2: absolute-form must be accepted; only the path matters here.
    let path_and_query = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    let path = path_and_query.split(['?', '#']).next().unwrap_or("");
    if path != METRICS_PATH {
        return Route::NotFound;
    }
    // RFC 9110 §9.1: method names are case-sensitive.
    match method {
        "GET" => Route::Metrics { head_only: false },
        "HEAD" => Route::Metrics { head_only: true },
        _ => Route::MethodNotAllowed,
    }
}

/// A response to write.
struct Response {
    status: &'static str,
    content_type: &'static str,
    extra: &'static str,
    body: Vec<u8>,
    head_only: bool,
}

impl Response {
    fn plain(status: &'static str, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            extra: "",
            body: format!("{body}\n").into_bytes(),
            head_only: false,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len(),
            self.extra
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn respond(route: Route, metrics: &Metrics) -> Response {
    match route {
        Route::Metrics { head_only } => Response {
            status: "200 OK",
            content_type: CONTENT_TYPE,
            extra: "",
            body: metrics.encode().into_bytes(),
            head_only,
        },
        Route::BadRequest => Response::plain("400 Bad Request", "bad request"),
        Route::VersionNotSupported => {
            Response::plain("505 HTTP Version Not Supported", "HTTP/1.x only")
        }
        Route::NotFound => Response::plain("404 Not Found", "not found; try /metrics"),
        // RFC 9110 §15.5.6: a 405 lists the allowed methods.
        Route::MethodNotAllowed => Response {
            extra: "Allow: GET, HEAD\r\n",
            ..Response::plain("405 Method Not Allowed", "method not allowed")
        },
    }
}

fn write_all_by(stream: &mut TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn handle_connection(mut stream: TcpStream, metrics: &Metrics) {
    let response = match read_head(&mut stream, Instant::now() + REQUEST_TIMEOUT) {
        Ok(head) => respond(route(&head), metrics),
        Err(HeadError::Closed) => return,
        Err(HeadError::Timeout) => Response::plain("408 Request Timeout", "request timeout"),
        Err(HeadError::TooLarge) => Response::plain(
            "431 Request Header Fields Too Large",
            "request head too large",
        ),
    };
    if write_all_by(
        &mut stream,
        &response.bytes(),
        Instant::now() + WRITE_TIMEOUT,
    )
    .is_err()
    {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    // Discard what the client already sent beyond the head (e.g. a body), without
    // waiting: closing with unread data would reset the connection and could destroy
    // the response before the client read it.
    if stream.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match stream.read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_path_then_method() {
        let (get, head) = (
            Route::Metrics { head_only: false },
            Route::Metrics { head_only: true },
        );
        for (request, expected) in [
            ("GET /metrics HTTP/1.1\r\n\r\n", get),
            ("HEAD /metrics HTTP/1.0\r\n\r\n", head),
            ("GET /metrics?x=1 HTTP/1.1\r\n\r\n", get),
            ("\r\nGET /metrics HTTP/1.1\r\n\r\n", get),
            ("GET http://h:9/metrics HTTP/1.1\r\n\r\n", get),
            ("GET / HTTP/1.1\r\n\r\n", Route::NotFound),
            ("GET /metrics/ HTTP/1.1\r\n\r\n", Route::NotFound),
            ("POST /metrics HTTP/1.1\r\n\r\n", Route::MethodNotAllowed),
            ("get /metrics HTTP/1.1\r\n\r\n", Route::MethodNotAllowed),
            ("GET /metrics HTTP/2.0\r\n\r\n", Route::VersionNotSupported),
            ("GET /metrics\r\n\r\n", Route::BadRequest),
            ("GET  /metrics HTTP/1.1\r\n\r\n", Route::BadRequest),
            ("\u{1}\u{2}garbage\r\n\r\n", Route::BadRequest),
        ] {
            assert_eq!(route(request.as_bytes()), expected, "{request:?}");
        }
        assert_eq!(route(b"GET /\xff HTTP/1.1\r\n\r\n"), Route::BadRequest);
    }

    #[test]
    fn head_ends_at_the_first_empty_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: x\n\nbody"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(head_end(b""), None);
    }
}
