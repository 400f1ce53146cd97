//! Request checks that end in an answer rather than a closed connection (RFC 6733 §7.1).
//!
//! Order of the checks, first failure wins: header bits (3008), application (3007),
//! command (3001), AVP lengths by data type, nested Grouped AVPs included (5014), Grouped
//! AVPs nested deeper than [`MAX_GROUPED_DEPTH`] (5004), required AVPs of the command
//! (5005). Unknown AVPs, M bit or not, are not rejected: a relay forwards what it does
//! not understand (RFC 6733 §6.1.8).
//!
//! Cost: linear in the message's size. Grouped AVPs are walked in place (no copies of
//! their data), and the nesting is capped: a hostile peer cannot make one message cost
//! more than one pass over its bytes, and the recursion stays shallow.

use dra_common::wire::{app, flags};

use super::avp::{Avp, AvpRef, address_family, parse_ref};
use super::dictionary::{DataType, Dictionary};
use super::error::ProtocolError;
use super::message::Message;

/// Checks a received request. `supported_apps` are the Application-Ids this node
/// serves; the common application (0) is always accepted, and the Relay application
/// (0xffffffff) in the list accepts every application (RFC 6733 §2.4).
///
/// Answers (R clear) are checked for reserved header bits and AVP lengths only.
pub fn validate_request(
    msg: &Message,
    dict: &Dictionary,
    supported_apps: &[u32],
) -> Result<(), ProtocolError> {
    let command = dict.command(msg.command_code);
    // RFC 6733 §3: reserved bits MUST be zero (the fast path's mark excepted), E MUST
    // NOT be set on a request, and P must follow the command's PXY (§7.1.3, 3008).
    let reserved = msg.flags & flags::RESERVED & !flags::RATE_LIMIT_MARK != 0;
    let e_on_request = msg.is_request() && msg.is_error();
    let p_mismatch = msg.is_request() && command.is_some_and(|c| c.proxiable != msg.is_proxiable());
    if reserved || e_on_request || p_mismatch {
        return Err(ProtocolError::InvalidHeaderBits {
            flags: msg.flags,
            command_code: msg.command_code,
        });
    }
    if msg.is_request() {
        // RFC 6733 §6.1: a request for an application the node does not support.
        let app_ok = msg.application_id == app::COMMON
            || supported_apps.contains(&msg.application_id)
            || supported_apps.contains(&app::RELAY);
        if !app_ok {
            return Err(ProtocolError::ApplicationUnsupported {
                application_id: msg.application_id,
            });
        }
        if command.is_none() {
            return Err(ProtocolError::CommandUnsupported {
                command_code: msg.command_code,
            });
        }
    }
    for avp in &msg.avps {
        check_avp(avp.as_ref(), dict, 0).map_err(|b| b.into_error(dict))?;
    }
    if let Some(command) = command.filter(|_| msg.is_request()) {
        // RFC 6733 §7.5: a missing required AVP is reported with an example of it.
        for (code, vendor) in command.required(msg.application_id) {
            if msg.find_vendor(code, vendor).is_none() {
                return Err(ProtocolError::missing(dict, code, vendor));
            }
        }
    }
    Ok(())
}

/// Most levels of Grouped AVPs inside a top-level AVP (3GPP applications nest four or
/// five); deeper is answered 5004 DIAMETER_INVALID_AVP_VALUE.
pub const MAX_GROUPED_DEPTH: usize = 16;

/// An AVP found wrong by [`check_avp`].
struct Bad {
    /// Failed-AVP content: the offending AVP, wrapped in its enclosing Grouped AVPs as
    /// single-child groups (RFC 6733 §7.5).
    failed_avp: Avp,
    code: u32,
    vendor_id: Option<u32>,
    /// Its length is wrong (5014), or it nests too deep (5004).
    kind: BadKind,
}

enum BadKind {
    Length(u32),
    TooDeep,
}

impl Bad {
    fn into_error(self, dict: &Dictionary) -> ProtocolError {
        let name = dict.avp_name(self.code, self.vendor_id);
        match self.kind {
            BadKind::Length(length) => ProtocolError::InvalidAvpLength {
                code: self.code,
                vendor_id: self.vendor_id,
                name,
                length,
                failed_avp: self.failed_avp,
            },
            BadKind::TooDeep => ProtocolError::GroupedTooDeep {
                code: self.code,
                vendor_id: self.vendor_id,
                name,
                limit: MAX_GROUPED_DEPTH,
                failed_avp: self.failed_avp,
            },
        }
    }
}

/// Checks one AVP (and, for Grouped, its descendants, at most [`MAX_GROUPED_DEPTH`]
/// levels below the top) against the dictionary types; `depth` is its own level.
fn check_avp(avp: AvpRef<'_>, dict: &Dictionary, depth: usize) -> Result<(), Bad> {
    let Some(def) = dict.avp(avp.code, avp.vendor_id) else {
        return Ok(());
    };
    let len = avp.data.len();
    let ok = match def.data_type {
        DataType::Grouped => return check_grouped(avp, dict, depth),
        DataType::Address => match avp.data.get(..2) {
            // RFC 6733 §4.3.1: 2-byte family, then 4 (IPv4) or 16 (IPv6) bytes.
            Some([a, b]) => match u16::from_be_bytes([*a, *b]) {
                address_family::IPV4 => len == 6,
                address_family::IPV6 => len == 18,
                _ => true,
            },
            _ => false,
        },
        t => t.fixed_len().is_none_or(|n| n == len),
    };
    if ok {
        Ok(())
    } else {
        // The whole AVP as received goes into Failed-AVP (RFC 6733 §7.5).
        Err(Bad {
            failed_avp: avp.to_avp(),
            code: avp.code,
            vendor_id: avp.vendor_id,
            kind: BadKind::Length(header_len(avp) + len as u32),
        })
    }
}

/// The children of a Grouped AVP (RFC 6733 §4.4), read in place.
fn check_grouped(avp: AvpRef<'_>, dict: &Dictionary, depth: usize) -> Result<(), Bad> {
    if depth >= MAX_GROUPED_DEPTH && !avp.data.is_empty() {
        // Failed-AVP: its header without the data (which may be most of the message).
        return Err(Bad {
            failed_avp: AvpRef { data: &[], ..avp }.to_avp(),
            code: avp.code,
            vendor_id: avp.vendor_id,
            kind: BadKind::TooDeep,
        });
    }
    let mut off = 0;
    while off < avp.data.len() {
        match parse_ref(&avp.data[off..]) {
            Ok((child, n)) => {
                check_avp(child, dict, depth + 1).map_err(|mut b| {
                    b.failed_avp = rewrap(avp, b.failed_avp);
                    b
                })?;
                off += n;
            }
            Err(inner) => {
                // RFC 6733 §7.1.5: the inner length cannot be trusted, so report its
                // header with a zero-filled payload of the type's minimum length.
                return Err(Bad {
                    failed_avp: rewrap(avp, inner.zero_filled(dict)),
                    code: inner.code,
                    vendor_id: inner.vendor_id,
                    kind: BadKind::Length(inner.length),
                });
            }
        }
    }
    Ok(())
}

fn header_len(avp: AvpRef<'_>) -> u32 {
    if avp.vendor_id.is_some() { 12 } else { 8 }
}

/// `outer` with `inner` as its only child.
fn rewrap(outer: AvpRef<'_>, inner: Avp) -> Avp {
    Avp {
        code: outer.code,
        flags: outer.flags,
        vendor_id: outer.vendor_id,
        data: Avp::grouped(0, [inner]).data,
    }
}
