//! TLS peers (RFC 6733 §13.1; [`crate::transport::tls`]): the handshake of accepted
//! connections, which configured peers an accepted certificate names, the binding of
//! the CER's Origin-Host to it, refusals (one log line, a counter) and who enforces the
//! ingress limits of a TLS connection.
//!
//! An accepted TLS connection counts against the CER-wait caps
//! ([`AgentOptions::max_awaiting_cer`](crate::agent::AgentOptions)) from the moment it
//! is accepted: its handshake (bounded by `handshake_timeout`) and then its CER share
//! the one budget, so a peer that never completes a handshake costs a bounded number of
//! tasks and timers, as one that never sends its CER does.
//!
//! Before any Diameter byte is read, the client's certificate (already chained to the
//! listener's CA by rustls) must name a TLS peer as a DNS subject alternative name —
//! the peer whose `addresses` hold the connection's source address, when it comes from
//! one, else any TLS peer. At its CER the Origin-Host must be one of the peers it
//! named; a peer configured for TLS that sends its CER over plain TCP is refused
//! (5017 DIAMETER_NO_COMMON_SECURITY).

use std::net::SocketAddr;

use super::*;
use crate::transport::tls::{self as t, Refusal};
use crate::transport::{Connection, Kind};

/// Why a connection to a server could not be set up.
#[derive(Debug)]
pub(in crate::agent) enum DialError {
    /// TCP connect failed or timed out.
    Io(std::io::Error),
    /// The TLS handshake failed.
    Tls(Refusal),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Io(e) => e.fmt(f),
            DialError::Tls(r) => write!(f, "TLS: {r}"),
        }
    }
}

/// The TLS acceptor and handshake bound of each TLS listener (by configured address).
pub(super) fn listeners(cfg: &Config) -> HashMap<SocketAddr, (t::Acceptor, Duration)> {
    cfg.listeners
        .iter()
        .filter_map(|l| {
            let tls = l.tls.as_ref()?;
            Some((
                l.address,
                (tls.credentials.as_ref()?.acceptor(), tls.handshake_timeout),
            ))
        })
        .collect()
}

impl Core {
    /// An accepted connection on `listener`: plain TCP opens at once; TLS starts its
    /// handshake (counted as waiting for its CER from now on).
    pub(super) fn accepted(&mut self, stream: tokio::net::TcpStream, listener: SocketAddr) {
        if self.shutdown.is_some() {
            return;
        }
        let Ok(remote) = stream.peer_addr() else {
            return;
        };
        let ip = remote.ip().to_canonical();
        if !self.cer_wait_admits(remote, ip) {
            return;
        }
        match self.tls_listeners.get(&listener).cloned() {
            None => {
                let Ok(stream) = Connection::tcp(stream) else {
                    return;
                };
                if let Some(id) = self.open_accepted(stream) {
                    self.cer_wait_begins(id, ip, true);
                }
            }
            Some((acceptor, timeout)) => {
                *self.awaiting_cer.entry(ip).or_insert(0) += 1;
                let tx = self.ctl_tx.clone();
                tokio::spawn(async move {
                    let result = acceptor.accept(stream, timeout).await;
                    let _ = tx.send(Ctl::Handshaken { remote, result }).await;
                });
            }
        }
    }

    /// An accepted SCTP association: it opens at once (SCTP listeners have no TLS).
    pub(super) fn accepted_sctp(&mut self, conn: Connection) {
        if self.shutdown.is_some() {
            return;
        }
        let ip = conn.remote.ip().to_canonical();
        if !self.cer_wait_admits(conn.remote, ip) {
            return;
        }
        if let Some(id) = self.open_accepted(conn) {
            self.cer_wait_begins(id, ip, true);
        }
    }

    /// The handshake of an accepted TLS connection ended.
    pub(super) fn handshaken(&mut self, remote: SocketAddr, result: Result<Connection, Refusal>) {
        let ip = remote.ip().to_canonical();
        let authorised = result.and_then(|c| {
            let peers = self.named_peers(&c)?;
            Ok((c, peers))
        });
        let (conn, peers) = match authorised {
            Ok(x) if self.shutdown.is_none() => x,
            Ok(_) => {
                self.cer_wait_released(ip);
                return;
            }
            Err(r) => {
                self.cer_wait_released(ip);
                self.tls_refused("accepted", r, Some(remote), None);
                return;
            }
        };
        match self.open_accepted(conn) {
            Some(id) => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.tls_peers = Some(peers);
                }
                self.cer_wait_begins(id, ip, false);
            }
            None => self.cer_wait_released(ip),
        }
    }

    /// The configured TLS peers the client certificate of `c` names (module docs).
    fn named_peers(&self, c: &Connection) -> Result<Vec<PeerId>, Refusal> {
        let cert = c
            .tls
            .as_ref()
            .and_then(|i| i.peer_certificate.as_ref())
            .ok_or(Refusal::NoCertificate)?;
        let ip = c.remote.ip().to_canonical();
        let from =
            self.cfg.peers.iter().enumerate().find(|(i, p)| {
                !self.slots[*i].retired && p.addresses.iter().any(|n| n.contains(&ip))
            });
        let candidates: Vec<(usize, &str)> = match from {
            Some((i, p)) => p.tls_name().map(|n| (i, n)).into_iter().collect(),
            None => self
                .cfg
                .peers
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.slots[*i].retired)
                .filter_map(|(i, p)| Some((i, p.tls_name()?)))
                .collect(),
        };
        let named: Vec<PeerId> = t::names(cert, candidates.iter().map(|(_, n)| *n))
            .into_iter()
            .map(|k| PeerId(candidates[k].0))
            .collect();
        if named.is_empty() {
            return Err(Refusal::NotForPeer);
        }
        Ok(named)
    }

    /// Counts and logs a refused TLS connection (at most one line a second for each
    /// side and reason; the others are summed up by the housekeeping).
    pub(super) fn tls_refused(
        &mut self,
        side: &'static str,
        r: Refusal,
        remote: Option<SocketAddr>,
        peer: Option<&str>,
    ) {
        self.metrics.inc_tls_refused(side, r.label());
        let seen = self
            .tls_refused_since_log
            .entry((side, r.label()))
            .or_insert(0);
        *seen += 1;
        if *seen == 1 {
            let remote = remote.map_or("-".to_owned(), |a| a.to_string());
            warn!(
                %remote,
                peer = peer.unwrap_or("-"),
                side,
                reason = r.label(),
                "TLS connection refused: {r} (counted in dra_tls_refused_total; logged once \
                 per second at most for each reason)"
            );
        }
    }

    /// A TLS connection that the peer ends before it opened: with TLS 1.3 the client's
    /// side of the handshake completes before the server has checked the client's
    /// certificate, so a server refusing ours says so only afterwards — with an alert,
    /// or (GnuTLS) by closing. On a connection we dialled, either before the CEA is
    /// counted and logged as the server's refusal; on an accepted one, an alert.
    pub(super) fn tls_closed_before_open(&mut self, conn: ConnId, why: &io::CloseCause) {
        use crate::diameter::peer::Role;
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if c.tls_peers.is_none() || c.pc.is_open() {
            return;
        }
        let dialled = c.pc.role() == Role::Initiator;
        let refused = match why {
            io::CloseCause::Io(e) => {
                Refusal::of(e) == Refusal::PeerRefused
                    || (dialled && e.kind() == std::io::ErrorKind::UnexpectedEof)
            }
            io::CloseCause::Eof => dialled,
            io::CloseCause::Framing(..) => false,
        };
        if !refused {
            return;
        }
        let side = if dialled { "dialled" } else { "accepted" };
        let name = c.peer.map(|p| self.cfg.peers[p.0].name.clone());
        let span = c.span.clone();
        span.in_scope(|| self.tls_refused(side, Refusal::PeerRefused, None, name.as_deref()));
    }

    /// Who enforces the ingress limits of an accepted connection of this transport:
    /// XDP cannot read TLS records, so a TLS connection's limits are the agent's
    /// limiter's even when XDP is attached (docs/architecture.md §12).
    pub(super) fn ingress_for(&self, kind: Kind) -> io::Ingress {
        match (kind, &self.opts.limiter, &self.opts.ingress) {
            // XDP reads SCTP's chunks as it reads TCP's segments.
            (Kind::Tcp | Kind::Sctp, _, i) => i.clone(),
            (Kind::Tls, Some(l), _) => io::Ingress::Limiter(l.clone()),
            (Kind::Tls, None, io::Ingress::Limiter(l)) => io::Ingress::Limiter(l.clone()),
            (Kind::Tls, None, _) => io::Ingress::None,
        }
    }

    /// At a CER: the peer's transport must be the one it is configured for, and over
    /// TLS its Origin-Host one its certificate named. `false` when the CER was refused.
    pub(super) fn cer_transport_ok(&mut self, now: Duration, conn: ConnId, peer: PeerId) -> bool {
        let Some(c) = self.conns.get(&conn) else {
            return false;
        };
        let wants_tls = self.cfg.peers[peer.0].tls.is_some();
        let refusal = match (&c.tls_peers, wants_tls) {
            (None, true) => Some((
                Refusal::PlainTcp,
                crate::diameter::result_code::NO_COMMON_SECURITY,
            )),
            (Some(named), _) if !named.contains(&peer) => Some((
                Refusal::CerIdentity,
                crate::diameter::result_code::UNKNOWN_PEER,
            )),
            _ => None,
        };
        let Some((r, code)) = refusal else {
            return true;
        };
        let name = self.cfg.peers[peer.0].name.clone();
        let span = c.span.clone();
        // The connection's span names its remote address.
        span.in_scope(|| self.tls_refused("accepted", r, None, Some(&name)));
        if let Some(c) = self.conns.get_mut(&conn) {
            c.pc.reject_cer(now, code, Some(&r.to_string()));
        }
        false
    }
}

/// How a server reached over TCP is dialled: in the clear, or over TLS with its
/// connector. A TLS server whose connector cannot be built (no credentials, a name that
/// is not a DNS name) is an error naming why — never a server dialled in the clear.
pub(super) fn tcp_dial(p: &crate::config::Peer) -> Result<Dial, String> {
    let Some(tls) = p.tls.as_ref() else {
        return Ok(Dial::Tcp);
    };
    let credentials = tls
        .credentials
        .as_ref()
        .ok_or("it has no TLS credentials (cert, key, ca)")?;
    let name = p.tls_name().ok_or("it has no TLS name")?;
    let c = credentials
        .connector(name)
        .ok_or_else(|| format!("its TLS name {name:?} is not a DNS name"))?;
    Ok(Dial::Tls((c, tls.handshake_timeout)))
}

/// How a server is dialled.
pub(super) enum Dial {
    Tcp,
    /// TCP, then the TLS handshake (bounded by its duration).
    Tls((t::Connector, Duration)),
    /// An SCTP association to these addresses (the first is `connect`).
    Sctp(Vec<SocketAddr>),
}

/// Connects (bounded by `timeout`) over TCP, TLS or SCTP.
pub(super) async fn dial(
    addr: SocketAddr,
    timeout: Duration,
    how: Dial,
) -> Result<Connection, DialError> {
    let timed_out = || {
        DialError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        ))
    };
    let tls = match how {
        Dial::Tcp => None,
        Dial::Tls(c) => Some(c),
        Dial::Sctp(remotes) => {
            let s = crate::transport::sctp::SctpStream::connect(&[], &remotes);
            return match tokio::time::timeout(timeout, s).await {
                Ok(r) => r.and_then(Connection::sctp).map_err(DialError::Io),
                Err(_) => Err(timed_out()),
            };
        }
    };
    let tcp = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(r) => r.map_err(DialError::Io)?,
        Err(_) => return Err(timed_out()),
    };
    match tls {
        None => Connection::tcp(tcp).map_err(DialError::Io),
        Some((c, t)) => c.connect(tcp, t).await.map_err(DialError::Tls),
    }
}

#[cfg(test)]
mod tests {
    use super::{Dial, tcp_dial};

    /// A TLS server the agent cannot build a connector for is not dialled at all,
    /// least of all in the clear.
    #[test]
    fn a_tls_server_without_a_connector_is_never_dialled_in_the_clear() {
        let text = "[global]\norigin_host = \"dra.lab.example\"\norigin_realm = \"lab.example\"\n\
                    [[listener]]\naddress = \"198.18.1.1:3868\"\n\
                    [[peer]]\nname = \"pcrf1\"\norigin_host = \"pcrf1.lab.example\"\n\
                    realm = \"lab.example\"\nrole = \"server\"\n\
                    connect = \"198.18.2.2:3868\"\n";
        let cfg = crate::config::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let mut p = cfg.peers[0].clone();
        assert!(matches!(tcp_dial(&p), Ok(Dial::Tcp)));
        p.tls = Some(crate::config::Tls {
            files: None,
            credentials: None,
            identity: None,
            handshake_timeout: std::time::Duration::from_secs(5),
        });
        match tcp_dial(&p) {
            Err(why) => assert!(why.contains("no TLS credentials"), "{why}"),
            Ok(Dial::Tcp) => panic!("a TLS server would be dialled over plain TCP"),
            Ok(_) => panic!("a connector without credentials"),
        }
    }
}
