//! Realm-based route table (RFC 6733 §2.7 Realm-Based Routing Table; StarOS realm routes).
//!
//! Entries map a Destination-Realm (or the wildcard `*`, StarOS "peer-default") and an
//! optional application to a peer with a weight. Lookup order:
//!
//! 1. Destination-Host, if it names a peer that is in good state (see [`RouteTable::lookup`]).
//! 2. Entries for exactly this realm whose application is the request's or "any".
//! 3. Only if step 2 matched nothing: wildcard entries whose application matches.
//!
//! A realm with matching exact entries never falls through to the wildcard entries, even
//! when all its peers are down: "peer-default" serves "any other realm"
//! (docs/architecture.md §6), and sending abc.com traffic to another realm's servers
//! would be wrong. Such a request is answered 3002 by the caller.

use std::{borrow::Cow, collections::HashMap};

use super::peers::{PeerId, PeerStates};

/// Realm part of a route entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RealmMatch {
    /// This realm only; stored lower-case (realms compare case-insensitively).
    Exact(String),
    /// `*`: any realm that has no matching exact entry ("peer-default").
    Wildcard,
}

impl RealmMatch {
    /// Parse a configured realm: `*` is the wildcard, anything else an exact realm.
    pub fn parse(realm: &str) -> Result<Self, RouteTableError> {
        let realm = realm.trim();
        if realm == "*" {
            return Ok(Self::Wildcard);
        }
        if realm.is_empty() {
            return Err(RouteTableError::EmptyRealm);
        }
        if realm.contains('*') {
            return Err(RouteTableError::PartialWildcard {
                realm: realm.to_owned(),
            });
        }
        Ok(Self::Exact(realm.to_ascii_lowercase()))
    }
}

impl std::fmt::Display for RealmMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(r) => f.write_str(r),
            Self::Wildcard => f.write_str("*"),
        }
    }
}

/// One configured route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    /// Realm this entry serves.
    pub realm: RealmMatch,
    /// Application-Id this entry serves; `None` = any application.
    pub application: Option<u32>,
    /// Target peer.
    pub peer: PeerId,
    /// Higher weight is preferred; equal weights share the traffic.
    pub weight: u32,
}

impl RouteEntry {
    /// Build an entry from a configured realm string (`*` = wildcard).
    pub fn new(
        realm: &str,
        application: Option<u32>,
        peer: PeerId,
        weight: u32,
    ) -> Result<Self, RouteTableError> {
        Ok(Self {
            realm: RealmMatch::parse(realm)?,
            application,
            peer,
            weight,
        })
    }

    fn serves(&self, application_id: u32) -> bool {
        self.application.is_none_or(|a| a == application_id)
    }
}

/// A peer that may take a request, with the weight of the route that offers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The peer.
    pub peer: PeerId,
    /// The route's weight: only the highest weight with a good peer is used.
    pub weight: u32,
}

/// Which part of the table produced the candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteMatch {
    /// Entries for exactly the Destination-Realm.
    Realm,
    /// Wildcard ("peer-default") entries.
    Wildcard,
    /// No entry serves this realm and application: the caller answers 3003
    /// DIAMETER_REALM_NOT_SERVED (RFC 6733 §7.1.3).
    NoRoute,
}

/// Result of [`RouteTable::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Destination-Host names a peer in good state: send there, skip realm routing.
    DestinationHost(PeerId),
    /// Realm routing: the candidates were written to the output vector.
    Routes(RouteMatch),
}

/// Errors building a route table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteTableError {
    /// A route with an empty realm.
    #[error("route realm is empty (use \"*\" for the wildcard route)")]
    EmptyRealm,
    /// `*.example.com` and similar: only the whole-realm wildcard `*` exists.
    #[error("route realm {realm:?}: partial wildcards are not supported, only \"*\"")]
    PartialWildcard {
        /// The configured realm.
        realm: String,
    },
    /// The same (realm, application, peer) twice.
    #[error("duplicate route: realm {realm}, application {application:?}, peer #{}", peer.0)]
    Duplicate {
        /// Realm of the duplicate.
        realm: RealmMatch,
        /// Application of the duplicate.
        application: Option<u32>,
        /// Peer of the duplicate.
        peer: PeerId,
    },
}

/// The route table. Immutable once built; rebuild it on config reload.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    exact: HashMap<String, Vec<RouteEntry>>,
    wildcard: Vec<RouteEntry>,
}

impl RouteTable {
    /// Build a table. Entry order is kept: it is the "config order" used by the
    /// `priority` strategy and the round-robin rotation.
    pub fn new(entries: impl IntoIterator<Item = RouteEntry>) -> Result<Self, RouteTableError> {
        let mut table = Self::default();
        for e in entries {
            let list = match &e.realm {
                RealmMatch::Exact(r) => table.exact.entry(r.clone()).or_default(),
                RealmMatch::Wildcard => &mut table.wildcard,
            };
            if list
                .iter()
                .any(|o| o.application == e.application && o.peer == e.peer)
            {
                return Err(RouteTableError::Duplicate {
                    realm: e.realm,
                    application: e.application,
                    peer: e.peer,
                });
            }
            list.push(e);
        }
        Ok(table)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.wildcard.len() + self.exact.values().map(Vec::len).sum::<usize>()
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Realm routing only: write the candidates for (`destination_realm`,
    /// `application_id`) to `out` (cleared first), in config order. A peer offered by
    /// several matching entries (e.g. one for "any" and one for this application)
    /// appears once, with the highest of their weights.
    pub fn candidates_into(
        &self,
        destination_realm: &str,
        application_id: u32,
        out: &mut Vec<Candidate>,
    ) -> RouteMatch {
        out.clear();
        // RFC 6733 §4.3.1: DiameterIdentity (realms included) is an FQDN; compare
        // case-insensitively.
        let realm: Cow<'_, str> = if destination_realm.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(destination_realm.to_ascii_lowercase())
        } else {
            Cow::Borrowed(destination_realm)
        };
        if let Some(entries) = self.exact.get(realm.as_ref()) {
            push_serving(entries, application_id, out);
            if !out.is_empty() {
                return RouteMatch::Realm;
            }
        }
        push_serving(&self.wildcard, application_id, out);
        if out.is_empty() {
            RouteMatch::NoRoute
        } else {
            RouteMatch::Wildcard
        }
    }

    /// Convenience form of [`Self::candidates_into`] that allocates.
    pub fn candidates(
        &self,
        destination_realm: &str,
        application_id: u32,
    ) -> (RouteMatch, Vec<Candidate>) {
        let mut out = Vec::new();
        let m = self.candidates_into(destination_realm, application_id, &mut out);
        (m, out)
    }

    /// Full lookup. Destination-Host wins when it names a known peer in good state
    /// (RFC 6733 §6.1.5: a request whose Destination-Host is a connected peer is sent to
    /// that peer); otherwise realm routing fills `out`.
    pub fn lookup<P: PeerStates + ?Sized>(
        &self,
        destination_realm: &str,
        application_id: u32,
        destination_host: Option<&str>,
        peers: &P,
        out: &mut Vec<Candidate>,
    ) -> Lookup {
        if let Some(id) = destination_host.and_then(|h| peers.find(h))
            && peers.is_good(id)
        {
            out.clear();
            return Lookup::DestinationHost(id);
        }
        Lookup::Routes(self.candidates_into(destination_realm, application_id, out))
    }
}

fn push_serving(entries: &[RouteEntry], application_id: u32, out: &mut Vec<Candidate>) {
    for e in entries.iter().filter(|e| e.serves(application_id)) {
        match out.iter_mut().find(|c| c.peer == e.peer) {
            Some(c) => c.weight = c.weight.max(e.weight),
            None => out.push(Candidate {
                peer: e.peer,
                weight: e.weight,
            }),
        }
    }
}
