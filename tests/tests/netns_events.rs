//! The fast path's rare events through `dra run` (aya-log, `dra-ebpf/src/events.rs`):
//! a source that is no peer's sends SYNs to the Diameter port under `unknown_peer =
//! "drop"`; XDP drops and counts every one, and the agent prints the event at debug level
//! (target `dra::fastpath`) at most once per CPU per second, naming the counter (the
//! program offers one drop in 64 per CPU to the log: bursts of 300 cross that on a CPU).
//!
//! Topology: gw (198.18.1.2 = pgw1, and 198.18.1.3 = nobody's) — veth — dra (198.18.1.1,
//! XDP). Namespaces and pins are removed on drop, also on panic.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use dra::dataplane::Maps;
use dra_common::stats::Counter;
use dra_tests::{
    agent::Agent,
    netns::GwDraSrv,
    support::{Pins, TempDir, gw_dra_srv_config, poll_until},
};
use socket2::{Domain, Socket, Type};

/// A source address in the gateway's namespace that no peer has.
const STRANGER: &str = "198.18.1.3";
/// SYNs per burst.
const BURST: usize = 300;

/// `BURST` connection attempts from `STRANGER` to the DRA, at once; the sockets are
/// closed after 300 ms, before the kernel would send a SYN again (1 s).
fn burst(net: &GwDraSrv) {
    net.gw
        .enter(|| {
            let to: SocketAddr = "198.18.1.1:3868".parse().unwrap();
            let from: SocketAddr = format!("{STRANGER}:0").parse().unwrap();
            let socks: Vec<Socket> = (0..BURST)
                .map(|_| {
                    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
                    s.set_nonblocking(true).unwrap();
                    s.bind(&from.into()).unwrap();
                    // Non-blocking: EINPROGRESS once the SYN is out.
                    let _ = s.connect(&to.into());
                    s
                })
                .collect();
            // The scenario: the burst's sockets stay open 300 ms (their SYNs out), then
            // close before the kernel would send a SYN again.
            std::thread::sleep(Duration::from_millis(300));
            drop(socks);
        })
        .unwrap();
}

/// Has the gateway's namespace resolve the DRA's address (one UDP datagram, which
/// XDP passes) and waits until it has: SYNs sent while the address is unresolved wait
/// in the neighbour's queue, which holds fewer than a burst (an emulated guest resolves
/// slowly enough for that to matter).
fn resolve_dra(net: &GwDraSrv) {
    net.gw
        .enter(|| {
            let s = std::net::UdpSocket::bind(format!("{STRANGER}:0")).unwrap();
            s.send_to(b"x", "198.18.1.1:9").unwrap();
        })
        .unwrap();
    let mut out = String::new();
    let resolved = poll_until(Duration::from_secs(5), || {
        out = dra_neighbour(net);
        ["REACHABLE", "STALE", "DELAY", "PROBE", "PERMANENT"]
            .iter()
            .any(|st| out.contains(st))
    });
    assert!(resolved, "198.18.1.1 never resolved: {out}");
}

/// The gateway namespace's neighbour entry of the DRA's address (`ip neigh show`).
fn dra_neighbour(net: &GwDraSrv) -> String {
    netlab::ipn(&net.gw.name, &["neigh", "show", "198.18.1.1"]).unwrap_or_default()
}

#[test]
fn unknown_peer_drops_are_logged_rate_limited_and_all_counted() {
    let net = GwDraSrv::new("e", 1, 2);
    net.gw
        .exec(&[
            "ip",
            "addr",
            "add",
            &format!("{STRANGER}/24"),
            "dev",
            &net.client.a_if,
        ])
        .unwrap();
    let tmp = TempDir::new("dra-ev-");
    let pins = Pins::new("dra-ev-");
    let cfg = tmp.0.join("dra.toml");
    // No PCRF runs: ready once the listeners are bound (the fast path attached before).
    let toml = gw_dra_srv_config("unknown_peer = \"drop\"\nstartup_wait = \"0s\"")
        .control(&tmp.0.join("dra.sock"))
        .to_string();
    std::fs::write(&cfg, toml).unwrap();
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--iface",
        &net.client.b_if,
        "--pin-dir",
        pins.0.to_str().unwrap(),
    ];
    let mut agent = Agent::start_with_env(
        &net.dra,
        &args,
        &[("RUST_LOG", "info,dra::fastpath=debug")],
        &tmp.0.join("dra.log"),
    );
    agent.wait_ready(Duration::from_secs(20));
    resolve_dra(&net);
    let maps = Maps::open_pinned(&pins.0).unwrap();
    let before = maps.stat(Counter::UnknownPeerDrop).unwrap();

    // Two bursts 1.5 s apart: each is logged (the interval is 1 s per CPU), each SYN
    // counted.
    let start = Instant::now();
    burst(&net);
    // The scenario: the second burst comes 1.2 s after the first, past the log's
    // interval.
    std::thread::sleep(Duration::from_millis(1200));
    burst(&net);
    let span = start.elapsed();
    let counted = || maps.stat(Counter::UnknownPeerDrop).unwrap() - before;
    let all = agent.wait_until(Duration::from_secs(10), || counted() >= 2 * BURST as u64);
    assert!(
        all,
        "unknown_peer_drop counted {} of {}",
        counted(),
        2 * BURST
    );

    let pattern = format!("{STRANGER}:");
    let lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("dra::fastpath") && l.contains(&pattern))
            .map(str::to_string)
            .collect()
    };
    let log = agent.log.clone();
    let logged = agent.wait_until(Duration::from_secs(10), || {
        lines(&std::fs::read_to_string(&log).unwrap_or_default()).len() >= 2
    });
    let text = agent.log_text();
    let got = lines(&text);
    assert!(logged, "fewer than two event lines; log:\n{text}");
    for l in &got {
        assert!(l.contains("DEBUG"), "not at debug level: {l}");
        assert!(
            l.contains("> 198.18.1.1:3868 proto 6") && l.contains("(unknown_peer_drop)"),
            "the line does not name the flow and its counter: {l}"
        );
    }
    // At most one line per CPU per started second of the sending span.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let bound = cpus * (span.as_secs() as usize + 1);
    println!(
        "{} SYNs from {STRANGER} dropped and counted in {:.1} s; {} lines logged \
         (bound {bound}):\n{}",
        counted(),
        span.as_secs_f64(),
        got.len(),
        got.join("\n")
    );
    assert!(got.len() <= bound, "{} lines > {bound}", got.len());
    assert!(agent.stop().is_some_and(|s| s.success()), "log:\n{text}");
}
