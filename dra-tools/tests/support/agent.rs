//! The agent's config and a small lab (PCRF and OCS simulators + the agent) for the
//! tests that run the agent in process, built on the project's simulator,
//! `dra_tools::loadgen::script`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use dra::diameter::peer::PeerConfig;

use super::{ConfigToml, free_port};
// Each test crate that includes this module uses a different subset.
#[allow(unused_imports)]
pub use dra_common::wire::app::{GX, GY};
#[allow(unused_imports)]
pub use dra_tools::loadgen::script::{
    ScriptedPeer as SimPeer, ScriptedServer as SimServer, Tap, cc, ccr, dwr,
};

pub const LOCALHOST: &str = "127.0.0.1";

/// A simulator's own identity (advertises `apps` as Auth-Application-Ids).
pub fn sim_config(host: &str, realm: &str, apps: &[u32]) -> PeerConfig {
    dra_tools::loadgen::script::scripted_config(host, realm, apps, ip(LOCALHOST))
}

/// A free port on 127.0.0.1 for a simulator.
pub fn any_port() -> SocketAddr {
    SocketAddr::new(ip(LOCALHOST), 0)
}

/// Just an address helper.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

pub const DRA_HOST: &str = "dra.test.example";
pub const REALM: &str = "test.example";
pub const PCRF_REALM: &str = "pcrf.test.example";
pub const OCS_REALM: &str = "ocs.test.example";

/// The agent `dra.test.example` (realm [`REALM`]) listening on each of `ips` at `port`,
/// its only Diameter port.
pub fn agent_config(ips: &[&str], port: u16) -> ConfigToml {
    let listeners: Vec<String> = ips.iter().map(|ip| format!("{ip}:{port}")).collect();
    let listeners: Vec<&str> = listeners.iter().map(String::as_str).collect();
    ConfigToml::new(REALM, &listeners, &format!("diameter_ports = [{port}]"))
}

/// The agent's config for the tests: listener on 127.0.0.1 (free port), clients
/// `pgw1`, `pgw2`, servers of group `pcrf` (Gx, realm [`PCRF_REALM`]) and `ocs` (Gy,
/// realm [`OCS_REALM`]) at the given addresses; `extra` is appended verbatim.
pub fn agent_toml(
    pcrfs: &[SocketAddr],
    ocss: &[SocketAddr],
    control: Option<&std::path::Path>,
    extra: &str,
) -> String {
    // The config refuses port 0: take a free port (released just before the agent binds it).
    let mut t = agent_config(&[LOCALHOST], free_port());
    if let Some(p) = control {
        t = t.with(&format!("[control]\nsocket = \"{}\"", p.display()));
    }
    for c in ["pgw1", "pgw2"] {
        t = t.client(c, REALM, &[], "");
    }
    for (group, realm, list) in [("pcrf", PCRF_REALM, pcrfs), ("ocs", OCS_REALM, ocss)] {
        for (i, a) in list.iter().enumerate() {
            let name = format!("{group}{}", i + 1);
            t = t.server(
                &name,
                realm,
                &a.to_string(),
                &format!("group = \"{group}\""),
            );
        }
    }
    for (group, realm, app, list) in [
        ("pcrf", PCRF_REALM, "gx", pcrfs),
        ("ocs", OCS_REALM, "gy", ocss),
    ] {
        if list.is_empty() {
            continue;
        }
        t = t
            .group(
                group,
                "answer_timeout = \"2s\"\ndelay_tolerance = \"200ms\"\nqueue_limit = 1000\n\
                 selection = \"round_robin\"",
            )
            .route(
                realm,
                &format!("application = \"{app}\"\ngroup = \"{group}\""),
            );
    }
    t.with(extra).to_string()
}

/// The agent's config `text` parsed; panics with the text when it does not parse.
pub fn parse_config(text: &str) -> dra::config::Config {
    dra::config::parse(text, "test.toml").unwrap_or_else(|e| panic!("config: {e}\n{text}"))
}

/// The in-process agent's options for the tests: reconnect timer Tc of 200 ms.
pub fn tc_200ms() -> dra::agent::AgentOptions {
    dra::agent::AgentOptions {
        tc: Some(Duration::from_millis(200)),
        ..Default::default()
    }
}

/// [`tc_200ms`] with the in-process ingress limiter `limiter` (what XDP does in production).
pub fn with_limiter(limiter: std::sync::Arc<dra::limiter::Limiter>) -> dra::agent::AgentOptions {
    dra::agent::AgentOptions {
        ingress: dra::agent::io::Ingress::Limiter(limiter),
        ..tc_200ms()
    }
}

/// Starts the agent in process (panics when it does not start).
pub async fn start_agent(
    cfg: dra::config::Config,
    opts: dra::agent::AgentOptions,
    metrics: dra::metrics::Metrics,
) -> dra::agent::AgentHandle {
    dra::agent::start(cfg, opts, metrics).await.expect("agent")
}

/// Waits until the agent's status shows `n` servers open; panics with the status when
/// that takes longer than `patience`.
pub async fn wait_servers_open(agent: &dra::agent::AgentHandle, n: usize, patience: Duration) {
    let mut s = String::new();
    let mut poll = super::Poll::new(patience);
    while poll.next().await {
        s = agent.status().await.expect("status");
        let open = s
            .lines()
            .filter(|l| l.contains(" server ") && l.contains(" open "))
            .count();
        if open == n {
            return;
        }
    }
    panic!("servers never opened:\n{s}");
}

/// Waits until `dra status` shows `peer` open; panics with the status when that takes
/// longer than `patience`.
pub async fn wait_peer_open(agent: &dra::agent::AgentHandle, peer: &str, patience: Duration) {
    let mut s = String::new();
    let mut poll = super::Poll::new(patience);
    while poll.next().await {
        s = agent.status().await.expect("status");
        if peer_state(&s, peer) == Some("open") {
            return;
        }
    }
    panic!("{peer} never opened:\n{s}");
}

/// The state column of `peer`'s row in the agent's status text.
pub fn peer_state<'a>(status: &'a str, peer: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(peer)).then(|| w.nth(1)).flatten()
    })
}

/// The messages `tap` saw arrive (not those sent), decoded, in order.
pub fn received(tap: &Tap) -> Vec<dra::diameter::Message> {
    tap.lock()
        .expect("tap")
        .iter()
        .filter(|(sent, _)| !sent)
        .filter_map(|(_, b)| dra::diameter::decode(b).ok())
        .collect()
}

/// A CCR on Gx from `pgw1.test.example` to the PCRF realm (CC-Request-Type
/// `request_type`, CC-Request-Number `number`).
pub fn pgw1_gx_ccr(session: &str, request_type: u32, number: u32) -> dra::diameter::Message {
    ccr(
        session,
        GX,
        &format!("pgw1.{REALM}"),
        REALM,
        PCRF_REALM,
        request_type,
        number,
    )
}

/// Starts PCRF and OCS simulators and the agent; waits until every server is open.
pub struct Lab {
    pub agent: dra::agent::AgentHandle,
    pub pcrfs: Vec<SimServer>,
    pub ocss: Vec<SimServer>,
    pub metrics: dra::metrics::Metrics,
}

impl Lab {
    pub async fn start(
        n_pcrf: usize,
        n_ocs: usize,
        control: Option<&std::path::Path>,
        extra: &str,
        tap: Option<Tap>,
    ) -> Lab {
        let pcrfs = sims(n_pcrf, "pcrf", PCRF_REALM, GX, &tap).await;
        let ocss = sims(n_ocs, "ocs", OCS_REALM, GY, &tap).await;
        let p: Vec<SocketAddr> = pcrfs.iter().map(|s| s.addr).collect();
        let o: Vec<SocketAddr> = ocss.iter().map(|s| s.addr).collect();
        let cfg = parse_config(&agent_toml(&p, &o, control, extra));
        let metrics = dra::metrics::Metrics::new();
        let agent = start_agent(cfg, tc_200ms(), metrics.clone()).await;
        wait_servers_open(&agent, n_pcrf + n_ocs, Duration::from_secs(5)).await;
        Lab {
            agent,
            pcrfs,
            ocss,
            metrics,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.agent.listen_addrs()[0]
    }

    /// A PGW client `pgwN.test.example` (Gx + Gy).
    pub async fn pgw(&self, name: &str, tap: Option<Tap>) -> SimPeer {
        connect_pgw(self.addr(), name, tap).await
    }
}

/// `n` server simulators `{prefix}1.{realm}`… (application `app`) on free ports.
async fn sims(n: usize, prefix: &str, realm: &str, app: u32, tap: &Option<Tap>) -> Vec<SimServer> {
    let mut out = Vec::new();
    for i in 1..=n {
        out.push(
            SimServer::start(
                any_port(),
                sim_config(&format!("{prefix}{i}.{realm}"), realm, &[app]),
                DRA_HOST,
                tap.clone(),
            )
            .await
            .unwrap_or_else(|e| panic!("{prefix} simulator: {e:?}")),
        );
    }
    out
}

/// A PGW client `{name}.test.example` (Gx + Gy) connected to the agent at `agent`.
pub async fn connect_pgw(agent: SocketAddr, name: &str, tap: Option<Tap>) -> SimPeer {
    SimPeer::connect(
        agent,
        sim_config(&format!("{name}.{REALM}"), REALM, &[GX, GY]),
        DRA_HOST,
        tap,
    )
    .await
    .expect("CEA success")
}
