//! Diameter traffic through the real agent for the privileged tests: a zero-latency
//! PCRF and a closed-loop gateway (`dra_tools::loadgen`), each on a thread inside its
//! namespace.

use std::{net::SocketAddr, time::Duration};

use dra_tools::loadgen::{
    closed::{self, ClosedConfig, ClosedReport},
    server::{self, LatencyDist, ServerConfig},
};

use crate::netns::Netns;

/// Runs `f` on a current-thread runtime on a thread inside `ns`: every socket its tasks
/// create belongs to `ns`.
pub fn in_ns<T: Send + 'static>(
    ns: &Netns,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let ns = Netns::attach_existing(&ns.name);
    std::thread::spawn(move || in_this_thread(&ns, f))
        .join()
        .unwrap()
}

/// Runs `f` on a current-thread runtime with this thread inside `ns`.
fn in_this_thread<T>(ns: &Netns, f: impl std::future::Future<Output = T>) -> T {
    ns.enter(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .unwrap()
}

/// A `dra-loadgen` server (`config`) on a thread inside its namespace, until stopped or
/// dropped.
pub struct Server {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Server {
    /// Starts it and waits until it listens.
    pub fn start(ns: &Netns, config: ServerConfig) -> Server {
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn({
            let ns = Netns::attach_existing(&ns.name);
            move || {
                in_this_thread(&ns, async move {
                    let h = server::run(config).await.expect("server listens");
                    ready_tx.send(()).unwrap();
                    // Until stopped (the sender dropped), off the runtime's thread.
                    let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                    h.shutdown().await.answered.values().sum::<u64>()
                })
            }
        });
        ready_rx
            .recv_timeout(crate::support::scaled(Duration::from_secs(10)))
            .expect("server ready");
        Server {
            stop: Some(stop_tx),
            thread: Some(t),
        }
    }

    /// Stops it; the requests it answered.
    pub fn stop(mut self) -> u64 {
        drop(self.stop.take());
        self.thread.take().expect("running").join().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The PCRF of the tests: `pcrf1.pcrf.lab.example` on `addr`, answering at once.
pub fn pcrf_config(addr: SocketAddr) -> ServerConfig {
    let mut c = ServerConfig::new(addr, "pcrf1.pcrf.lab.example", "pcrf.lab.example");
    c.latency = LatencyDist::Fixed(Duration::ZERO);
    c.max_concurrent = 100_000;
    c
}

/// A PCRF ([`pcrf_config`]) in `ns`, until dropped.
pub fn pcrf(ns: &Netns, addr: SocketAddr) -> Server {
    Server::start(ns, pcrf_config(addr))
}

/// A closed-loop gateway `pgw1.lab.example` from `bind` in `ns` to the agent at `dra`:
/// `window` requests in flight on one connection (Gx sessions: CCR-I, CCR-U, CCR-T),
/// counted over `measure` after `warmup`.
pub fn closed_loop(
    ns: &Netns,
    dra: SocketAddr,
    bind: std::net::IpAddr,
    window: usize,
    warmup: Duration,
    measure: Duration,
) -> ClosedReport {
    let mut c = ClosedConfig::new(dra, 1, window);
    c.bind = Some(bind);
    c.origin_host_pattern = "pgw{n}.lab.example".into();
    c.warmup = warmup;
    c.measure = measure;
    c.drain = crate::support::scaled(Duration::from_secs(10));
    in_ns(
        ns,
        async move { closed::run(c).await.expect("closed loop") },
    )
}
