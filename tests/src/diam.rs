//! A minimal Diameter sink and paced client over real TCP, for the fast-path tests.
//! (The product's simulator, dra-loadgen, replaces these as it lands.)

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use dra::diameter::Framer;
use dra_common::wire::{self, MsgClass};

use crate::netns::Netns;

/// One message as it arrived at the sink.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub at: Instant,
    pub class: MsgClass,
    pub marked: bool,
    pub hop_by_hop: u32,
    pub conn: usize,
}

/// Counts and records every message it receives; never answers.
pub struct Sink {
    pub arrivals: Arc<Mutex<Vec<Arrival>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl Sink {
    /// Listens on `addr` inside `ns`.
    pub fn start(ns: &Netns, addr: SocketAddr) -> Sink {
        let listener = ns.enter(|| TcpListener::bind(addr)).unwrap().expect("bind sink");
        listener.set_nonblocking(true).unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (arrivals.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut conns: Vec<(TcpStream, Framer)> = Vec::new();
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if let Ok((c, _)) = listener.accept() {
                    c.set_nonblocking(true).unwrap();
                    conns.push((c, Framer::with_max_message_size(1 << 20)));
                }
                let mut idle = true;
                for (i, (c, fr)) in conns.iter_mut().enumerate() {
                    match c.read(&mut buf) {
                        Ok(0) => {}
                        Ok(n) => {
                            idle = false;
                            fr.push(&buf[..n]);
                            let now = Instant::now();
                            while let Ok(Some(m)) = fr.next_message() {
                                if let Ok(cl) = wire::classify(&m.as_slice(), 0) {
                                    let hbh = u32::from_be_bytes([m[12], m[13], m[14], m[15]]);
                                    a.lock().unwrap().push(Arrival {
                                        at: now,
                                        class: cl.class,
                                        marked: cl.header.is_marked(),
                                        hop_by_hop: hbh,
                                        conn: i,
                                    });
                                }
                            }
                        }
                        Err(_) => {}
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        Sink { arrivals, stop, thread: Some(thread), addr }
    }

    pub fn snapshot(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    /// Waits until `n` messages arrived or `timeout` passed; returns the count.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> usize {
        let end = Instant::now() + timeout;
        loop {
            let c = self.arrivals.lock().unwrap().len();
            if c >= n || Instant::now() > end {
                return c;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a paced sender sent: (time, hop-by-hop) per message.
pub struct Sent {
    pub first: Instant,
    pub last: Instant,
    pub log: Vec<(Instant, u32)>,
}

/// A schedule entry: every `every` send one message built by `make(n)`.
pub struct Stream {
    pub every: Duration,
    pub make: Box<dyn Fn(u32) -> Vec<u8> + Send>,
}

/// Connects from `ns` to `to` and sends the streams for `duration`, `batch`
/// messages per write (1 = one write per message). Returns what was sent.
pub fn paced_client(ns: &Netns, to: SocketAddr, streams: Vec<Stream>, duration: Duration, batch: usize) -> Sent {
    let mut s = ns.enter(|| TcpStream::connect_timeout(&to, Duration::from_secs(3))).unwrap().expect("connect");
    s.set_nodelay(true).unwrap();
    let start = Instant::now();
    let mut next: Vec<Instant> = streams.iter().map(|_| start).collect();
    let mut n = 0u32;
    let mut log = Vec::new();
    let mut pending = Vec::new();
    let mut pending_n = 0;
    while start.elapsed() < duration {
        let now = Instant::now();
        for (i, st) in streams.iter().enumerate() {
            while next[i] <= now {
                n += 1;
                let m = (st.make)(n);
                log.push((Instant::now(), n));
                pending.extend_from_slice(&m);
                pending_n += 1;
                next[i] += st.every;
                if pending_n >= batch {
                    s.write_all(&pending).expect("write");
                    pending.clear();
                    pending_n = 0;
                }
            }
        }
        let wake = *next.iter().min().unwrap();
        let d = wake.saturating_duration_since(Instant::now());
        if !d.is_zero() {
            std::thread::sleep(d.min(Duration::from_millis(1)));
        }
    }
    if !pending.is_empty() {
        s.write_all(&pending).expect("write");
    }
    let first = log.first().map(|l| l.0).unwrap_or(start);
    let last = log.last().map(|l| l.0).unwrap_or(start);
    // Keep the connection open until the caller has seen everything arrive.
    std::mem::forget(s);
    Sent { first, last, log }
}
