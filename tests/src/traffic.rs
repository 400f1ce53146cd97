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
    let name = ns.name.clone();
    std::thread::spawn(move || {
        Netns::attach_existing(&name)
            .enter(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(f)
            })
            .unwrap()
    })
    .join()
    .unwrap()
}

/// A PCRF (`pcrf1.pcrf.lab.example`) answering at once on `addr` in its namespace,
/// until dropped.
pub struct Pcrf {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pcrf {
    /// Starts it and waits until it listens.
    pub fn start(ns: &Netns, addr: SocketAddr) -> Pcrf {
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let name = ns.name.clone();
        let t = std::thread::spawn(move || {
            Netns::attach_existing(&name)
                .enter(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(async {
                        let mut c =
                            ServerConfig::new(addr, "pcrf1.pcrf.lab.example", "pcrf.lab.example");
                        c.latency = LatencyDist::Fixed(Duration::ZERO);
                        c.max_concurrent = 100_000;
                        let h = server::run(c).await.expect("pcrf listens");
                        ready_tx.send(()).unwrap();
                        // Wait for the stop signal without blocking the runtime.
                        while matches!(
                            stop_rx.try_recv(),
                            Err(std::sync::mpsc::TryRecvError::Empty)
                        ) {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        h.shutdown().await;
                    });
                })
                .unwrap();
        });
        ready_rx
            .recv_timeout(crate::support::scaled(Duration::from_secs(10)))
            .expect("pcrf ready");
        Pcrf {
            stop: Some(stop_tx),
            thread: Some(t),
        }
    }
}

impl Drop for Pcrf {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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
