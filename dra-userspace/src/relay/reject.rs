//! Requests the fast path marked as over their ingress limit (reserved header bit 0x01,
//! docs/architecture.md §3, action `reject`): answered at once, no routing, no DB, no
//! upstream work.
//!
//! The fast path sets one bit and says nothing about which bucket overflowed, so
//! [`MarkedPolicy`] finds the profile: the most specific ingress profile that matches
//! the requesting peer and the request's class.

use std::collections::HashMap;

use dra_common::wire::MsgClass;

use crate::diameter::{Message, answer_for, result_code};
use crate::routing::PeerId;

/// Default Error-Message of a rate-limit rejection.
pub const DEFAULT_REJECT_MESSAGE: &str = "rate limit exceeded";

/// The answer given to a rejected request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RejectProfile {
    /// Result-Code (default 3002 DIAMETER_UNABLE_TO_DELIVER).
    pub result_code: u32,
    /// Error-Message text.
    pub error_message: String,
}

impl Default for RejectProfile {
    /// 3002 "rate limit exceeded" (the seed's behaviour).
    fn default() -> RejectProfile {
        RejectProfile {
            result_code: result_code::UNABLE_TO_DELIVER,
            error_message: DEFAULT_REJECT_MESSAGE.to_owned(),
        }
    }
}

/// Answers a marked request at once (RFC 6733 §6.2, §7.2, via [`answer_for`]):
///
/// - Result-Code and Error-Message from `profile`; the E bit exactly when the code is a
///   protocol error (3xxx, RFC 6733 §7.1.3) — so 3002/3004 get it, 5012 does not;
/// - Origin-Host/Origin-Realm are the DRA's own; Session-Id copied (first);
///   Auth-Application-Id, CC-Request-Type and CC-Request-Number copied for
///   Credit-Control (RFC 4006 §3.2); Proxy-Info copied (RFC 6733 §6.2);
/// - Hop-by-Hop and End-to-End ids preserved; the mark, like every reserved bit and T,
///   cleared.
pub fn reject_marked(
    req: &Message,
    profile: &RejectProfile,
    own_host: &str,
    own_realm: &str,
) -> Message {
    answer_for(
        req,
        profile.result_code,
        own_host,
        own_realm,
        Some(&profile.error_message),
        None,
    )
}

/// What happens to a request over a limit — ingress (a marked request) or egress (the
/// RLF's queue full or waited too long).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LimitAction {
    /// Answer with this profile.
    Reject(RejectProfile),
    /// Discard silently and count; the sender's transport or application retransmits.
    Drop,
}

impl Default for LimitAction {
    /// Reject with 3002 "rate limit exceeded".
    fn default() -> LimitAction {
        LimitAction::Reject(RejectProfile::default())
    }
}

/// The response to a marked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkedResponse {
    /// Send this answer back on the connection the request came from.
    Answer(Message),
    /// Send nothing; count it.
    Discard,
}

/// Applies `action` to a marked request.
pub fn respond_marked(
    req: &Message,
    action: &LimitAction,
    own_host: &str,
    own_realm: &str,
) -> MarkedResponse {
    match action {
        LimitAction::Reject(p) => {
            MarkedResponse::Answer(reject_marked(req, p, own_host, own_realm))
        }
        LimitAction::Drop => MarkedResponse::Discard,
    }
}

/// A peer group, by the caller's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub usize);

/// Whom a profile applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// One peer.
    Peer(PeerId),
    /// Every member of a group.
    Group(GroupId),
}

/// One ingress profile: overall (`class: None`) or for one message class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressRule {
    /// Peer or group.
    pub scope: Scope,
    /// The message class (request type 0: every CC-Request-Type), or `None` for the
    /// overall (peer rate limit) profile.
    pub class: Option<MsgClass>,
    /// What happens to its over-limit requests.
    pub action: LimitAction,
}

/// Inputs of [`MarkedPolicy::new`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MarkedPolicyConfig {
    /// Ingress profiles (the integrator maps peer and message rate limit profiles with
    /// direction `ingress` here).
    pub rules: Vec<IngressRule>,
    /// Group of each peer that has one.
    pub memberships: Vec<(PeerId, GroupId)>,
    /// Used when nothing matches (default: reject 3002 "rate limit exceeded").
    pub default: LimitAction,
}

/// Which rule [`MarkedPolicy::select`] picked, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProfileSource {
    /// The peer's profile for this class with this CC-Request-Type.
    PeerClassExact,
    /// The peer's profile for this class, any CC-Request-Type.
    PeerClassAny,
    /// The group's profile for this class with this CC-Request-Type.
    GroupClassExact,
    /// The group's profile for this class, any CC-Request-Type.
    GroupClassAny,
    /// The peer's overall profile.
    Peer,
    /// The group's overall profile.
    Group,
    /// Nothing matched.
    Default,
}

/// A bad [`MarkedPolicyConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Two rules for the same scope and class.
    #[error("two ingress profiles for {scope:?} and class {class:?}")]
    DuplicateRule {
        /// The scope.
        scope: Scope,
        /// The class (`None` = overall).
        class: Option<MsgClass>,
    },
    /// A peer listed in two groups.
    #[error("peer #{} is in two groups: #{} and #{}", peer.0, first.0, second.0)]
    PeerInTwoGroups {
        /// The peer.
        peer: PeerId,
        /// Its first group.
        first: GroupId,
        /// The other group.
        second: GroupId,
    },
}

/// Picks the ingress profile for a marked request (see [`MarkedPolicy::select`]).
#[derive(Debug, Clone)]
pub struct MarkedPolicy {
    rules: HashMap<(Scope, Option<MsgClass>), LimitAction>,
    groups: HashMap<PeerId, GroupId>,
    default: LimitAction,
}

impl MarkedPolicy {
    /// Builds the lookup tables; duplicates are errors.
    pub fn new(cfg: MarkedPolicyConfig) -> Result<MarkedPolicy, PolicyError> {
        let mut groups = HashMap::new();
        for (peer, group) in cfg.memberships {
            match groups.insert(peer, group) {
                Some(first) if first != group => {
                    return Err(PolicyError::PeerInTwoGroups {
                        peer,
                        first,
                        second: group,
                    });
                }
                _ => {}
            }
        }
        let mut rules = HashMap::new();
        for r in cfg.rules {
            if rules.insert((r.scope, r.class), r.action).is_some() {
                return Err(PolicyError::DuplicateRule {
                    scope: r.scope,
                    class: r.class,
                });
            }
        }
        Ok(MarkedPolicy {
            rules,
            groups,
            default: cfg.default,
        })
    }

    /// The most specific profile for a request of `class` from `peer`: the peer's
    /// message profile for that class (exact CC-Request-Type before any), else the
    /// group's message profile, else the peer's overall profile, else the group's
    /// overall profile, else the default.
    pub fn select(&self, peer: PeerId, class: MsgClass) -> (&LimitAction, ProfileSource) {
        let peer_scope = Some(Scope::Peer(peer));
        let group_scope = self.groups.get(&peer).map(|g| Scope::Group(*g));
        // `None` skips the candidate; `Some(None)` is the overall profile.
        let exact = (class.req_type != 0).then_some(Some(class));
        let any = Some(Some(MsgClass::new(class.app_id, class.command_code, 0)));
        let overall = Some(None);
        let order = [
            (peer_scope, exact, ProfileSource::PeerClassExact),
            (peer_scope, any, ProfileSource::PeerClassAny),
            (group_scope, exact, ProfileSource::GroupClassExact),
            (group_scope, any, ProfileSource::GroupClassAny),
            (peer_scope, overall, ProfileSource::Peer),
            (group_scope, overall, ProfileSource::Group),
        ];
        order
            .into_iter()
            .find_map(|(scope, class, src)| self.rules.get(&(scope?, class?)).map(|a| (a, src)))
            .unwrap_or((&self.default, ProfileSource::Default))
    }
}

/// Counters of [`MarkedHandler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MarkedStats {
    /// Marked requests answered at once.
    pub answered: u64,
    /// Marked requests discarded (action `drop`).
    pub discarded: u64,
}

/// The agent's entry point for marked requests: policy, identity, counters.
#[derive(Debug, Clone)]
pub struct MarkedHandler {
    policy: MarkedPolicy,
    own_host: String,
    own_realm: String,
    stats: MarkedStats,
}

impl MarkedHandler {
    /// A handler answering as `own_host` / `own_realm`.
    pub fn new(policy: MarkedPolicy, own_host: &str, own_realm: &str) -> MarkedHandler {
        MarkedHandler {
            policy,
            own_host: own_host.to_owned(),
            own_realm: own_realm.to_owned(),
            stats: MarkedStats::default(),
        }
    }

    /// Responds to a marked request `req` from downstream `peer`, and counts it.
    pub fn handle(&mut self, peer: PeerId, req: &Message) -> MarkedResponse {
        let (action, _) = self.policy.select(peer, req.class());
        let resp = respond_marked(req, action, &self.own_host, &self.own_realm);
        match resp {
            MarkedResponse::Answer(_) => self.stats.answered += 1,
            MarkedResponse::Discard => self.stats.discarded += 1,
        }
        resp
    }

    /// Counts a marked request answered (or discarded, `answered` false) by a caller that
    /// answers from the request's bytes ([`MarkedPolicy::select`] chose how).
    pub fn count(&mut self, answered: bool) {
        if answered {
            self.stats.answered += 1;
        } else {
            self.stats.discarded += 1;
        }
    }

    /// Replaces the policy (a reload), keeping the counters.
    pub fn set_policy(&mut self, policy: MarkedPolicy) {
        self.policy = policy;
    }

    /// The policy.
    pub fn policy(&self) -> &MarkedPolicy {
        &self.policy
    }

    /// The counters.
    pub fn stats(&self) -> MarkedStats {
        self.stats
    }
}
