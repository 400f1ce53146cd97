//! One routing decision per request: Destination-Host, session binding, route table,
//! peer selection — and the binding updates that go with it. Pure apart from the
//! binding store the caller passes in.
//!
//! Order (docs/architecture.md §6):
//! 1. Destination-Host naming a peer in good state wins (RFC 6733 §6.1.5).
//! 2. Gx/Gy sessions are sticky: a request of a bound Session-Id goes to the bound peer
//!    while that peer is good.
//! 3. Otherwise route table + selector. If the session was bound to a peer that is no
//!    longer good, this is a failover and the session is rebound.
//!
//! Binding updates, by CC-Request-Type (RFC 4006 §8.3):
//! - INITIAL / UPDATE: bind (or refresh the TTL of) the session to the chosen peer.
//!   A repeated CCR-I (retransmission) follows an existing good binding.
//! - TERMINATION: remove the binding.
//! - EVENT: one-shot, no binding. Requests without a CC-Request-Type follow an existing
//!   binding but never create or refresh one.
//!
//! A failing binding store (Redis down) does not fail the request: routing continues as
//! if no binding existed and the error is returned in [`RouteOutcome::binding_error`]
//! for the caller to count and log. Rationale: failing every CCR-I while Redis is down
//! would turn a store outage into a signalling outage.

use std::time::Duration;

use super::{
    binding::{BindingError, BindingStore},
    peers::{PeerId, PeerStates},
    select::Selector,
    table::{Candidate, Lookup, RouteMatch, RouteTable},
};

/// Gx Application-Id (3GPP TS 29.212).
pub const APP_GX: u32 = 16_777_238;
/// Diameter Credit-Control Application-Id, used on Gy (RFC 4006 §1.3, 3GPP TS 32.299).
pub const APP_GY: u32 = 4;
/// Default binding time-to-live, refreshed by every CCR-I/CCR-U.
pub const DEFAULT_BINDING_TTL: Duration = Duration::from_secs(24 * 3600);

/// CC-Request-Type AVP values (RFC 4006 §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcRequestType {
    /// INITIAL_REQUEST (1): starts the session.
    Initial,
    /// UPDATE_REQUEST (2).
    Update,
    /// TERMINATION_REQUEST (3): ends the session.
    Termination,
    /// EVENT_REQUEST (4): one-shot, no session state.
    Event,
}

impl CcRequestType {
    /// From the AVP's Enumerated value; `None` for values RFC 4006 does not define.
    pub fn from_value(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Initial),
            2 => Some(Self::Update),
            3 => Some(Self::Termination),
            4 => Some(Self::Event),
            _ => None,
        }
    }
}

/// The request fields routing looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRequest<'a> {
    /// Destination-Realm AVP.
    pub destination_realm: &'a str,
    /// Destination-Host AVP, if present.
    pub destination_host: Option<&'a str>,
    /// Application-Id from the header.
    pub application_id: u32,
    /// Session-Id AVP, if present.
    pub session_id: Option<&'a str>,
    /// CC-Request-Type AVP, if present (CCR only).
    pub cc_request_type: Option<CcRequestType>,
}

/// Why the request goes to its peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// Destination-Host is a peer in good state.
    DestinationHost,
    /// The session's binding.
    Binding,
    /// Route table and selector (no binding, or not a sticky request).
    Selected,
    /// The session was bound to a peer that is not good (or unknown here); a new peer
    /// was selected and, for CCR-I/U, bound.
    Failover {
        /// Name of the previously bound peer.
        previous: String,
    },
}

/// Why no peer could be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unroutable {
    /// No route serves the realm and application.
    NoRoute,
    /// Routes exist but none of their peers is in good state.
    NoGoodPeer,
}

impl Unroutable {
    /// The Result-Code the agent answers with (RFC 6733 §7.1.3):
    /// 3003 DIAMETER_REALM_NOT_SERVED or 3002 DIAMETER_UNABLE_TO_DELIVER.
    pub fn result_code(self) -> u32 {
        match self {
            Self::NoRoute => 3003,
            Self::NoGoodPeer => 3002,
        }
    }
}

/// The routing decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Relay to this peer.
    Forward {
        /// Target peer.
        peer: PeerId,
        /// Why this peer.
        via: Via,
    },
    /// Answer locally with [`Unroutable::result_code`].
    Reject(Unroutable),
}

/// How a routing decision changes the session's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingUpdate {
    /// No change (not sticky, not forwarded, EVENT or no CC-Request-Type).
    Keep,
    /// Bind (or rebind, or refresh the TTL of) the session to this peer name.
    Bind(String),
    /// The session ends (CCR-T): remove the binding.
    Unbind,
}

/// [`Router::decide`]'s result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// What to do with the request.
    pub decision: Decision,
    /// How the session's binding changes.
    pub update: BindingUpdate,
}

/// A decision plus any binding-store error met on the way (routing went on without it).
#[derive(Debug)]
pub struct RouteOutcome {
    /// What to do with the request.
    pub decision: Decision,
    /// First binding-store error, if any.
    pub binding_error: Option<BindingError>,
}

impl RouteOutcome {
    /// The target peer, if the request is forwarded.
    pub fn peer(&self) -> Option<PeerId> {
        match self.decision {
            Decision::Forward { peer, .. } => Some(peer),
            Decision::Reject(_) => None,
        }
    }
}

/// Route table + selector + stickiness policy.
#[derive(Debug, Clone)]
pub struct Router {
    table: RouteTable,
    selector: Selector,
    sticky_applications: Vec<u32>,
    binding_ttl: Duration,
    scratch: Vec<Candidate>,
}

impl Router {
    /// A router; Gx and Gy are sticky, bindings live [`DEFAULT_BINDING_TTL`].
    pub fn new(table: RouteTable, selector: Selector) -> Self {
        Self {
            table,
            selector,
            sticky_applications: vec![APP_GX, APP_GY],
            binding_ttl: DEFAULT_BINDING_TTL,
            scratch: Vec::new(),
        }
    }

    /// Applications whose sessions are sticky (default Gx, Gy).
    pub fn with_sticky_applications(mut self, apps: impl IntoIterator<Item = u32>) -> Self {
        self.sticky_applications = apps.into_iter().collect();
        self
    }

    /// Binding time-to-live; every CCR-I/CCR-U refreshes it.
    pub fn with_binding_ttl(mut self, ttl: Duration) -> Self {
        self.binding_ttl = ttl;
        self
    }

    /// The route table.
    pub fn table(&self) -> &RouteTable {
        &self.table
    }

    /// The selector (e.g. for retries with [`Selector::select_excluding`]).
    pub fn selector_mut(&mut self) -> &mut Selector {
        &mut self.selector
    }

    /// True if sessions of application `app` are sticky.
    pub fn is_sticky_application(&self, app: u32) -> bool {
        self.sticky_applications.contains(&app)
    }

    /// The Session-Id whose binding routes `req`, if `req` is sticky: a session
    /// request of a sticky application that is not a one-shot EVENT.
    pub fn sticky_session<'r>(&self, req: &RouteRequest<'r>) -> Option<&'r str> {
        req.session_id
            .filter(|_| self.sticky_applications.contains(&req.application_id))
            .filter(|_| req.cc_request_type != Some(CcRequestType::Event))
    }

    /// Decide where `req` goes, given the peer its session is bound to (`bound`, looked
    /// up by the caller for [`Self::sticky_session`]), and say how the binding changes.
    /// Pure: the caller applies [`Routed::update`] to its store(s).
    pub fn decide<P>(
        &mut self,
        req: &RouteRequest<'_>,
        peers: &P,
        bound: Option<&str>,
        now: Duration,
    ) -> Routed
    where
        P: PeerStates + ?Sized,
    {
        let sticky = self.sticky_session(req);
        let lookup = self.table.lookup(
            req.destination_realm,
            req.application_id,
            req.destination_host,
            peers,
            &mut self.scratch,
        );
        let decision = match lookup {
            Lookup::DestinationHost(peer) => Decision::Forward {
                peer,
                via: Via::DestinationHost,
            },
            Lookup::Routes(route_match) => {
                let mut previous = None;
                let mut good_bound = None;
                if let (Some(_), Some(name)) = (sticky, bound) {
                    match peers.find(name).filter(|id| peers.is_good(*id)) {
                        Some(id) => good_bound = Some(id),
                        None => previous = Some(name.to_owned()),
                    }
                }
                match good_bound {
                    Some(peer) => Decision::Forward {
                        peer,
                        via: Via::Binding,
                    },
                    None if route_match == RouteMatch::NoRoute => {
                        Decision::Reject(Unroutable::NoRoute)
                    }
                    None => match self.selector.select(&self.scratch, peers, now) {
                        Some(peer) => {
                            let via = previous
                                .map_or(Via::Selected, |previous| Via::Failover { previous });
                            Decision::Forward { peer, via }
                        }
                        None => Decision::Reject(Unroutable::NoGoodPeer),
                    },
                }
            }
        };
        let update = match (sticky, &decision) {
            (Some(_), Decision::Forward { peer, .. }) => match req.cc_request_type {
                Some(CcRequestType::Termination) => BindingUpdate::Unbind,
                Some(CcRequestType::Initial | CcRequestType::Update) => peers
                    .name(*peer)
                    .map_or(BindingUpdate::Keep, |n| BindingUpdate::Bind(n.to_owned())),
                Some(CcRequestType::Event) | None => BindingUpdate::Keep,
            },
            _ => BindingUpdate::Keep,
        };
        Routed { decision, update }
    }

    /// Decide where `req` goes and update its session binding in `bindings` at once
    /// (module docs): [`Self::decide`] with a synchronous store.
    pub fn route_request<P, B>(
        &mut self,
        req: &RouteRequest<'_>,
        peers: &P,
        bindings: &mut B,
        now: Duration,
    ) -> RouteOutcome
    where
        P: PeerStates + ?Sized,
        B: BindingStore + ?Sized,
    {
        let mut binding_error = None;
        let bound = match self.sticky_session(req).map(|sid| bindings.get(sid, now)) {
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                binding_error = Some(e);
                None
            }
            None => None,
        };
        let routed = self.decide(req, peers, bound.as_deref(), now);
        if let Some(sid) = self.sticky_session(req) {
            let r = match &routed.update {
                BindingUpdate::Keep => Ok(()),
                BindingUpdate::Bind(name) => bindings.bind(sid, name, self.binding_ttl, now),
                BindingUpdate::Unbind => bindings.unbind(sid, now),
            };
            if let Err(e) = r {
                binding_error.get_or_insert(e);
            }
        }
        RouteOutcome {
            decision: routed.decision,
            binding_error,
        }
    }

    /// Binding time-to-live given to [`Self::route_request`]'s store.
    pub fn binding_ttl(&self) -> Duration {
        self.binding_ttl
    }
}
