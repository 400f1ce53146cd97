//! Fixtures that run the project's simulator, `dra_tools::loadgen::script`, inside test
//! namespaces from the (sync) privileged tests. One tokio runtime per test: its worker
//! threads drive every connection, while each socket is created on the calling thread
//! inside [`Netns::enter`], so it belongs to that namespace (a socket keeps the
//! namespace it was created in; accepted sockets that of their listener).

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use dra::diameter::peer::PeerConfig;
use dra_common::wire::{self, app};
pub use dra_tools::loadgen::script::{Arrival, ScriptedPeer, ScriptedServer, Sent, Stream, Tap};
use dra_tools::loadgen::script::{ccr, paced, scripted_config};

use crate::netns::Netns;

/// Origin-Host and -Realm of the client (PCEF) in the test configs.
pub const PGW1: (&str, &str) = ("pgw1.lab.example", "lab.example");

/// Waits (at most 10 s) until `sink` has logged every request of `sent`, asserting that
/// none is missing; how many of them arrived unmarked (admitted by the fast path).
pub fn unmarked_of_all(sink: &ScriptedServer, sent: &Sent) -> usize {
    assert_eq!(
        sink.arrivals.wait_for_blocking(
            sent.log.len(),
            crate::support::scaled(Duration::from_secs(10))
        ),
        sent.log.len()
    );
    sink.arrivals
        .snapshot()
        .iter()
        .filter(|a| !a.marked)
        .count()
}

/// The verdict on a policed (drop) run at the sink, once `got` of the `sent` requests
/// have arrived: within the offer window at most `rate` × its seconds + `burst` arrived
/// (+2 %), every request arrived in the end exactly once (TCP sends the dropped bytes
/// again), and over the whole run the arrivals never beat the rate either.
pub fn assert_policed_and_lossless(
    sent: &Sent,
    arrivals: &[Arrival],
    got: usize,
    rate: u32,
    burst: u32,
) {
    let n = sent.log.len();
    let in_window = arrivals.iter().filter(|a| a.at <= sent.last).count();
    let allowed = rate as f64 * (sent.last - sent.first).as_secs_f64() + burst as f64;
    assert!(
        in_window as f64 <= allowed * 1.02,
        "admitted {in_window} > {allowed:.0}"
    );
    assert_eq!(got, n, "every message delivered");
    let mut ids: Vec<u32> = arrivals.iter().map(|a| a.hop_by_hop).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "each exactly once");
    let last = arrivals.iter().map(|a| a.at).max().expect("arrivals");
    let total = (last - sent.first).as_secs_f64();
    assert!(
        n as f64 <= rate as f64 * total * 1.02 + burst as f64,
        "{n} in {total:.1} s"
    );
}

/// A simulator identity advertising Gx. Its watchdog interval is longer than any test,
/// so that no DWR/DWA joins the traffic under test (a test counts requests that the
/// fast path sees; a DWR is one).
pub fn identity(host: &str, realm: &str, address: IpAddr) -> PeerConfig {
    let mut c = scripted_config(host, realm, &[app::GX], address);
    c.tw = Duration::from_secs(3600);
    c
}

/// A stream of Gx CCRs of CC-Request-Type `req_type` from pgw1, one every `every`.
pub fn gx_ccrs(every: Duration, req_type: u8) -> Stream {
    Stream {
        every,
        make: Box::new(move |n| {
            ccr(
                &format!("{};1;{n}", PGW1.0),
                app::GX,
                PGW1.0,
                PGW1.1,
                "pcrf.lab.example",
                u32::from(req_type),
                n,
            )
        }),
    }
}

/// Base-protocol requests (Application-Id 0: CER, DWR, DPR) the peers on `tap` wrote.
pub fn base_requests_sent(tap: &Tap) -> usize {
    tap.lock()
        .unwrap()
        .iter()
        .filter(|(sent, b)| {
            *sent
                && wire::classify(&b.as_slice(), 0)
                    .is_ok_and(|c| c.header.is_request() && c.header.application_id == app::COMMON)
        })
        .count()
}

/// The runtime that drives the simulated peers and servers of one test.
pub struct Sim {
    rt: tokio::runtime::Runtime,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

impl Sim {
    /// A runtime with two worker threads (the machine's cores), timers and I/O.
    pub fn new() -> Sim {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        Sim { rt }
    }

    /// A server `host`/`realm` listening at `addr` in `ns`, accepting the peer
    /// `client_host`: CER/CEA, DWR and DPR are answered, application requests are only
    /// logged (`.arrivals`), never answered.
    pub fn sink(
        &self,
        ns: &Netns,
        addr: SocketAddr,
        (host, realm): (&str, &str),
        client_host: &str,
    ) -> ScriptedServer {
        let cfg = identity(host, realm, addr.ip());
        ns.enter(|| {
            self.rt
                .block_on(ScriptedServer::sink(addr, cfg, client_host, None))
        })
        .unwrap()
        .expect("sink listens")
    }

    /// As [`Sim::sink`], standing where the agent would behind the fast path pinned in
    /// `pin_dir`: its arrival log applies the XDP program's out-of-band marks (requests
    /// marked after their header had passed) as the agent's readers do.
    pub fn fast_path_sink(
        &self,
        ns: &Netns,
        addr: SocketAddr,
        (host, realm): (&str, &str),
        client_host: &str,
        pin_dir: &std::path::Path,
    ) -> ScriptedServer {
        let cfg = identity(host, realm, addr.ip());
        let inbox = dra::oob::OobInbox::open_pinned(pin_dir).expect("pinned OOB_MARKS");
        let log = dra_tools::loadgen::script::ArrivalLog::fast_path(std::sync::Arc::new(inbox));
        ns.enter(|| {
            self.rt
                .block_on(ScriptedServer::sink_into(addr, cfg, client_host, None, log))
        })
        .unwrap()
        .expect("sink listens")
    }

    /// A peer `host`/`realm` connecting from `from` in `ns` to `to`, done with CER/CEA
    /// (the server's Origin-Host must be `server_host`). `tap` sees every message. The
    /// peer's socket has the TCP congestion control `congestion` (e.g. `"cubic"`) when
    /// given, else the host's default.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &self,
        ns: &Netns,
        from: IpAddr,
        to: SocketAddr,
        (host, realm): (&str, &str),
        server_host: &str,
        tap: Option<Tap>,
        congestion: Option<&str>,
    ) -> ScriptedPeer {
        let cfg = identity(host, realm, from);
        ns.enter(|| {
            self.rt.block_on(ScriptedPeer::connect_with(
                Some(from),
                to,
                cfg,
                server_host,
                tap,
                congestion,
            ))
        })
        .unwrap()
        .unwrap_or_else(|rc| panic!("CER/CEA with {server_host} at {to} failed (Result-Code {rc})"))
    }

    /// Runs [`paced`] on this thread until it ends.
    pub fn paced(
        &self,
        peer: &ScriptedPeer,
        streams: Vec<Stream>,
        duration: Duration,
        batch: usize,
    ) -> Sent {
        self.rt
            .block_on(paced(peer, streams, duration, batch))
            .expect("paced run")
    }

    /// Starts [`paced`] on the runtime's workers; [`Sim::join`] waits for it.
    pub fn spawn_paced(
        &self,
        peer: ScriptedPeer,
        streams: Vec<Stream>,
        duration: Duration,
        batch: usize,
    ) -> tokio::task::JoinHandle<Sent> {
        self.rt.spawn(async move {
            paced(&peer, streams, duration, batch)
                .await
                .expect("paced run")
        })
    }

    /// Waits for a run started with [`Sim::spawn_paced`].
    pub fn join(&self, run: tokio::task::JoinHandle<Sent>) -> Sent {
        self.rt.block_on(run).expect("paced task")
    }
}
