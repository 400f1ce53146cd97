//! Who may open a connection: the directory consulted for every CER and CEA (RFC 6733
//! §5.3: a CER from an unknown Origin-Host is answered DIAMETER_UNKNOWN_PEER).

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::diameter::result_code;
use crate::routing::PeerId;

/// A configured peer the directory recognised.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KnownPeer {
    /// The peer's index in the agent's peer list (the id routing uses).
    pub id: PeerId,
    /// Its DiameterIdentity as configured.
    pub name: String,
}

/// Why the directory refuses a peer. Answered in the CEA with
/// [`Rejection::result_code`]; the texts go into Error-Message, so they name no
/// configuration detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No configured peer has this Origin-Host (RFC 6733 §5.3: DIAMETER_UNKNOWN_PEER).
    #[error("Origin-Host is not a configured peer")]
    UnknownHost {
        /// The Origin-Host received.
        origin_host: String,
    },
    /// The peer is known but the connection comes from an address not configured for it
    /// (answered DIAMETER_UNKNOWN_PEER like an unknown host).
    #[error("the connection does not come from an address of this peer")]
    WrongAddress {
        /// The Origin-Host received.
        origin_host: String,
        /// The transport's remote address.
        address: IpAddr,
    },
    /// Local policy refuses the peer with this Result-Code (e.g. 3004 DIAMETER_TOO_BUSY
    /// while shutting down).
    #[error("refused by local policy")]
    Refused {
        /// Result-Code for the CEA.
        result_code: u32,
    },
}

impl Rejection {
    /// The CEA's Result-Code: 3010 DIAMETER_UNKNOWN_PEER for an unknown host or a wrong
    /// address, else the policy's code.
    pub const fn result_code(&self) -> u32 {
        match self {
            Rejection::UnknownHost { .. } | Rejection::WrongAddress { .. } => {
                result_code::UNKNOWN_PEER
            }
            Rejection::Refused { result_code } => *result_code,
        }
    }
}

/// The agent's list of peers, consulted by the state machine: by a responder when a CER
/// arrives, by an initiator when the CEA arrives.
pub trait PeerDirectory: Send + Sync {
    /// The peer whose DiameterIdentity is `origin_host` (compared case-insensitively,
    /// RFC 4343), if the transport's remote `address` is one of its addresses.
    fn lookup(&self, origin_host: &str, address: IpAddr) -> Result<KnownPeer, Rejection>;
}

/// A fixed [`PeerDirectory`]: names and address ranges, e.g. from the config file.
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, from dual-stack listeners) match IPv4
/// ranges.
#[derive(Clone, Debug, Default)]
pub struct StaticPeerDirectory {
    peers: Vec<(KnownPeer, Vec<IpNet>)>,
    by_name: HashMap<String, usize>,
}

impl StaticPeerDirectory {
    /// An empty directory: every lookup is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a peer with the address ranges it may connect from.
    pub fn add(&mut self, id: PeerId, name: &str, addresses: impl IntoIterator<Item = IpNet>) {
        let entry = (
            KnownPeer {
                id,
                name: name.to_owned(),
            },
            addresses.into_iter().collect(),
        );
        let key = name.to_ascii_lowercase();
        match self.by_name.get(&key) {
            Some(&i) => self.peers[i] = entry,
            None => {
                self.by_name.insert(key, self.peers.len());
                self.peers.push(entry);
            }
        }
    }

    /// Builder form of [`StaticPeerDirectory::add`].
    #[must_use]
    pub fn with(
        mut self,
        id: PeerId,
        name: &str,
        addresses: impl IntoIterator<Item = IpNet>,
    ) -> Self {
        self.add(id, name, addresses);
        self
    }
}

impl PeerDirectory for StaticPeerDirectory {
    fn lookup(&self, origin_host: &str, address: IpAddr) -> Result<KnownPeer, Rejection> {
        let Some(&i) = self.by_name.get(&origin_host.to_ascii_lowercase()) else {
            return Err(Rejection::UnknownHost {
                origin_host: origin_host.to_owned(),
            });
        };
        let (peer, nets) = &self.peers[i];
        let address = address.to_canonical();
        if nets.iter().any(|n| n.contains(&address)) {
            Ok(peer.clone())
        } else {
            Err(Rejection::WrongAddress {
                origin_host: origin_host.to_owned(),
                address,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive_and_checks_the_address() {
        let dir = StaticPeerDirectory::new().with(
            PeerId(3),
            "pcrf1.example.net",
            ["198.18.1.0/24".parse().unwrap()],
        );
        let ok = dir
            .lookup("PCRF1.Example.NET", "198.18.1.7".parse().unwrap())
            .unwrap();
        assert_eq!(ok.id, PeerId(3));
        // A dual-stack listener reports IPv4 clients as IPv4-mapped IPv6.
        assert!(
            dir.lookup("pcrf1.example.net", "::ffff:198.18.1.7".parse().unwrap())
                .is_ok()
        );
        let wrong = dir
            .lookup("pcrf1.example.net", "198.18.2.7".parse().unwrap())
            .unwrap_err();
        assert_eq!(wrong.result_code(), result_code::UNKNOWN_PEER);
        assert!(matches!(wrong, Rejection::WrongAddress { .. }));
        let unknown = dir
            .lookup("pcrf9.example.net", "198.18.1.7".parse().unwrap())
            .unwrap_err();
        assert!(matches!(unknown, Rejection::UnknownHost { .. }));
    }
}
