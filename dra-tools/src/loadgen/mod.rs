//! `dra-loadgen`: the project's Diameter simulator for tests, the demo and benchmarks.
//!
//! - [`client`]: N gateway peers (PGW), each with its own TCP connection and Origin-Host,
//!   doing real CER/CEA and watchdogs through [`dra::diameter::peer::PeerConnection`],
//!   sending Gx/Gy CCR-I/U/T that follow session life cycles at the rates of a
//!   [`scenario::Scenario`], measuring answers, latency, timeouts.
//! - [`closed`]: the same gateways at a fixed concurrency (closed loop, W requests in
//!   flight per peer, CCR-I/CCR-T per slot), measuring requests/s and latency; the
//!   relay benchmark's clients.
//! - [`failover`]: a gateway connected to two DRAs (RFC 6733 §5.5.4, RFC 3539): which
//!   DRA gets a request, resending pending requests with the T flag on a failover; and
//!   the servers' duplicate detection.
//! - [`script`]: scripted peers and servers, one message at a time, for tests and tools.
//! - [`server`]: a PCRF/OCS answering CCR after a latency distribution within a
//!   capacity, reporting its RFC 8583 load in DWAs, optionally writing a Redis key per
//!   session.
//!
//! Every mode drives its connections with one driver (`conn`: a [`PeerConnection`] over
//! a TCP stream, the mode's requests, answers and measurements in its own `Mode`).
//! Sans-IO parts ([`scenario::Schedule`], [`session::SessionPool`]) are unit-tested; the
//! tokio shells are tested over real TCP in `dra-tools/tests/loadgen_*.rs`.
//!
//! [`PeerConnection`]: dra::diameter::peer::PeerConnection

pub mod client;
pub mod closed;
mod conn;
pub mod doic;
pub mod failover;
pub mod resp;
pub mod scenario;
pub mod script;
pub mod server;
pub mod session;
pub mod stats;

use std::net::IpAddr;
use std::time::Duration;

use dra_common::wire::app;

use dra::diameter::peer::{
    ApplicationId, KnownPeer, PeerConfig, PeerDirectory, Rejection, VendorSpecificApplicationId,
};
use dra::routing::PeerId;
use dra::transport::Connection;
use dra::transport::tls::Connector;

/// Connects to `to`, from local address `bind` (port chosen by the system) when given:
/// a DRA tells peers apart by source address, so gateways sharing a host bind their own.
pub async fn connect_from(
    bind: Option<IpAddr>,
    to: std::net::SocketAddr,
) -> std::io::Result<tokio::net::TcpStream> {
    connect_with(bind, to, None).await
}

/// As [`connect_from`], with the socket's TCP congestion control set to `congestion`
/// (e.g. `"cubic"`) when given, whatever the host's default: how a gateway's TCP
/// recovers from dropped segments depends on it (root may pick any the kernel has).
pub async fn connect_with(
    bind: Option<IpAddr>,
    to: std::net::SocketAddr,
    congestion: Option<&str>,
) -> std::io::Result<tokio::net::TcpStream> {
    let sock = if to.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    if let Some(cc) = congestion {
        use std::os::fd::AsRawFd;
        // SAFETY: setsockopt(2) on this open socket with a buffer and its length.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                cc.as_ptr().cast(),
                cc.len() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if let Some(ip) = bind {
        sock.bind(std::net::SocketAddr::new(ip, 0))?;
    }
    sock.connect(to).await
}

/// SCTP instead of TCP (RFC 6733 §2.1.1): a gateway's association from `bind` and
/// these further local addresses, a server listening on its address and these
/// (multihoming; the same port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sctp {
    pub multihome: Vec<IpAddr>,
}

/// Connects to `to` (from `bind` when given) and, with `tls`, makes the TLS handshake
/// (bounded by [`dra::transport::tls::DEFAULT_HANDSHAKE_TIMEOUT`]), or with `sctp` sets
/// up an SCTP association instead: the connection every gateway mode starts from.
pub async fn dial(
    bind: Option<IpAddr>,
    to: std::net::SocketAddr,
    congestion: Option<&str>,
    tls: Option<&Connector>,
    sctp: Option<&Sctp>,
) -> std::io::Result<Connection> {
    if let Some(s) = sctp {
        let local: Vec<std::net::SocketAddr> = bind
            .into_iter()
            .chain(s.multihome.iter().copied())
            .map(|ip| std::net::SocketAddr::new(ip, 0))
            .collect();
        let a = dra::transport::sctp::SctpStream::connect(&local, &[to]).await?;
        return Connection::sctp(a);
    }
    let tcp = connect_with(bind, to, congestion).await?;
    match tls {
        None => Connection::tcp(tcp),
        Some(c) => c
            .connect(tcp, dra::transport::tls::DEFAULT_HANDSHAKE_TIMEOUT)
            .await
            .map_err(|r| std::io::Error::other(format!("TLS: {r}"))),
    }
}

/// A TLS side for dra-loadgen from three PEM files: the certificate (with every
/// Origin-Host its peers use as a DNS name), its key, and the CA the other side's
/// certificate must chain to.
pub fn tls_credentials(
    cert: &std::path::Path,
    key: &std::path::Path,
    ca: &std::path::Path,
) -> std::io::Result<dra::transport::tls::Credentials> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    dra::transport::tls::Credentials::from_pem(&read(cert)?, &read(key)?, &read(ca)?)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Origin-Host of peer `i` (0-based) from a pattern where `{n}` is 1..=peers.
pub fn origin_host_of(pattern: &str, i: usize) -> String {
    pattern.replace("{n}", &(i + 1).to_string())
}

/// 3GPP vendor id (Gx is a 3GPP application).
pub const VENDOR_3GPP: u32 = 10415;

/// The [`PeerConfig`] both modes use: Gx (as a 3GPP vendor-specific application) and Gy
/// advertised, Product-Name "dra-loadgen".
pub fn loadgen_peer_config(
    origin_host: &str,
    origin_realm: &str,
    ip: IpAddr,
    tw: Duration,
) -> PeerConfig {
    let mut c = PeerConfig::new(origin_host, origin_realm, vec![ip]);
    c.product_name = "dra-loadgen".to_owned();
    c.auth_application_ids = vec![app::GY];
    c.supported_vendor_ids = vec![VENDOR_3GPP];
    c.vendor_specific_application_ids = vec![VendorSpecificApplicationId {
        vendor_id: VENDOR_3GPP,
        application: ApplicationId::Auth(app::GX),
    }];
    c.tw = tw;
    c.cea_timeout = Duration::from_secs(5);
    c.cer_timeout = Duration::from_secs(5);
    c.dpa_timeout = Duration::from_secs(1);
    c
}

/// Checks the identity a client's first peer would use (Origin-Host from the pattern,
/// realm, Tw) before anything connects, so a bad option fails at once with the reason.
pub(crate) fn check_identity(
    pattern: &str,
    origin_realm: &str,
    ip: IpAddr,
    tw: Duration,
) -> Result<(), dra::diameter::peer::PeerConfigError> {
    loadgen_peer_config(&origin_host_of(pattern, 0), origin_realm, ip, tw).validate()
}

/// A peer directory that admits the listed Origin-Hosts (case-insensitive) from any
/// address, or anyone when the list is empty.
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    hosts: Vec<String>,
}

impl AllowList {
    /// Admits `hosts`; empty = any.
    pub fn new(hosts: Vec<String>) -> AllowList {
        AllowList { hosts }
    }
}

impl PeerDirectory for AllowList {
    fn lookup(&self, origin_host: &str, _address: IpAddr) -> Result<KnownPeer, Rejection> {
        if self.hosts.is_empty()
            || self
                .hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(origin_host))
        {
            Ok(KnownPeer {
                id: PeerId(server::name_id(origin_host)),
                name: origin_host.to_owned(),
            })
        } else {
            Err(Rejection::UnknownHost {
                origin_host: origin_host.to_owned(),
            })
        }
    }
}
