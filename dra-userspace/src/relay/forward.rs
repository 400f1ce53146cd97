//! Request rewriting for relaying (RFC 6733 §6.1.3, §6.1.7, §6.1.8): Route-Record checks
//! and appends. Pure functions over [`Message`].

use dra_common::wire::flags;

use crate::diameter::{Avp, Message, avp_code};

/// True if a top-level Route-Record AVP carries `identity`.
///
/// DiameterIdentity is an FQDN (RFC 6733 §4.3.1), so the comparison ignores ASCII case
/// (RFC 4343). Route-Record AVPs that are not valid UTF-8 never match.
pub fn route_record_contains(req: &Message, identity: &str) -> bool {
    req.find_all(avp_code::ROUTE_RECORD)
        .filter_map(|a| a.as_utf8().ok())
        .any(|rr| rr.eq_ignore_ascii_case(identity))
}

/// A forwarding loop (RFC 6733 §6.1.3): our own identity is already in a Route-Record.
pub fn is_loop(req: &Message, own_identity: &str) -> bool {
    route_record_contains(req, own_identity)
}

/// Appends a Route-Record AVP (M bit set, RFC 6733 §6.1.8 and §4.5) naming `identity`.
///
/// RFC 6733 §6.1.8: "A relay or proxy agent MUST append a Route-Record AVP to all
/// requests forwarded. The AVP contains the identity of the peer from which the request
/// was received" — i.e. the downstream peer's Origin-Host from its CER, which is not
/// necessarily the request's Origin-Host (the request may have crossed other agents).
pub fn append_route_record(req: &mut Message, identity: &str) {
    req.push(Avp::utf8(avp_code::ROUTE_RECORD, identity).mandatory());
}

/// Sets the T flag: "potentially retransmitted" after a failover (RFC 6733 §3, §5.5.4).
pub fn set_retransmit(req: &mut Message) {
    req.flags |= flags::T;
}
