//! RFC 8583 Load AVPs on the peer link: building ours, reading the peer's.
//!
//! ```text
//! Load ::= < AVP Code: 650 >          (Grouped, RFC 8583 §7.1)
//!          [ Load-Type ]              (651, Enumerated: HOST 0, PEER 1, §7.2)
//!          [ Load-Value ]             (652, Unsigned64, 0..=65535, higher = less loaded, §7.3)
//!          [ SourceID ]               (649, DiameterIdentity of the reporting node, §7.4)
//!        * [ AVP ]
//! ```
//!
//! A PEER report describes the sender as the next hop and is only meaningful to the node
//! that received it directly; its SourceID identifies the sender (RFC 8583 §6). None of
//! these AVPs has the M bit.

use crate::diameter::dictionary::enums::load_type;
use crate::diameter::{Avp, Message, avp_code as c};

/// Our PEER load report for a DWA: Load-Type PEER, Load-Value `value` (higher = less
/// loaded), SourceID `origin_host`.
pub fn peer_load_avp(value: u16, origin_host: &str) -> Avp {
    Avp::grouped(
        c::LOAD,
        [
            Avp::enumerated(c::LOAD_TYPE, load_type::PEER),
            Avp::u64(c::LOAD_VALUE, u64::from(value)),
            Avp::utf8(c::SOURCE_ID, origin_host),
        ],
    )
}

/// The first Load report in `msg` that describes the directly connected peer whose
/// DiameterIdentity is `peer_host`, as a Load-Value:
///
/// - type PEER with a SourceID equal to `peer_host`;
/// - type HOST (or no Load-Type) in a message whose Origin-Host is `peer_host` (the
///   peer's own load, e.g. in its DWA), SourceID absent or equal.
///
/// Reports about other nodes, malformed ones and values above 65535 (outside the range
/// of RFC 8583 §7.3) are ignored. Identities compare case-insensitively.
pub fn peer_load_value(msg: &Message, peer_host: &str) -> Option<u16> {
    let from_peer = msg
        .origin_host()
        .is_some_and(|h| h.eq_ignore_ascii_case(peer_host));
    msg.find_all(c::LOAD).find_map(|load| {
        let children = load.as_grouped().ok()?;
        let child = |code| children.iter().find(|a| a.is(code, None));
        let kind = match child(c::LOAD_TYPE) {
            Some(a) => a.as_i32().ok()?,
            None => load_type::HOST,
        };
        let value = u16::try_from(child(c::LOAD_VALUE)?.as_u64().ok()?).ok()?;
        let source = match child(c::SOURCE_ID) {
            Some(a) => Some(a.as_utf8().ok()?),
            None => None,
        };
        let source_is_peer = source.map(|s| s.eq_ignore_ascii_case(peer_host));
        let accepted = match kind {
            load_type::PEER => source_is_peer == Some(true),
            load_type::HOST => from_peer && source_is_peer != Some(false),
            _ => false,
        };
        accepted.then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dra_common::wire::cmd;

    fn dwa_from(host: &str) -> Message {
        Message::answer(cmd::DEVICE_WATCHDOG, 0, 1, 1).with(Avp::utf8(c::ORIGIN_HOST, host))
    }

    #[test]
    fn only_reports_about_the_peer_are_taken() {
        let peer = "pcrf1.example.net";
        let ours = dwa_from(peer).with(peer_load_avp(4000, peer));
        assert_eq!(peer_load_value(&ours, "PCRF1.example.net"), Some(4000));

        // A PEER report from another node (relayed through) is not the peer's load.
        let other = dwa_from(peer).with(peer_load_avp(10, "pcrf2.example.net"));
        assert_eq!(peer_load_value(&other, peer), None);

        // HOST report from the peer itself: its own load.
        let host = dwa_from(peer).with(Avp::grouped(
            c::LOAD,
            [
                Avp::enumerated(c::LOAD_TYPE, load_type::HOST),
                Avp::u64(c::LOAD_VALUE, 77),
            ],
        ));
        assert_eq!(peer_load_value(&host, peer), Some(77));
        // HOST report in an answer that originated elsewhere: not the peer's.
        let relayed =
            dwa_from("ocs.example.net").with(Avp::grouped(c::LOAD, [Avp::u64(c::LOAD_VALUE, 77)]));
        assert_eq!(peer_load_value(&relayed, peer), None);

        // Out of range and malformed values are ignored; a later valid one is used.
        let odd = dwa_from(peer)
            .with(Avp::grouped(
                c::LOAD,
                [
                    Avp::enumerated(c::LOAD_TYPE, load_type::PEER),
                    Avp::u64(c::LOAD_VALUE, 70_000),
                    Avp::utf8(c::SOURCE_ID, peer),
                ],
            ))
            .with(Avp::grouped(c::LOAD, [Avp::u32(c::LOAD_VALUE, 5)]))
            .with(peer_load_avp(65_535, peer));
        assert_eq!(peer_load_value(&odd, peer), Some(65_535));
    }
}
