//! Answers built from a request's bytes, never decoded into a [`Message`](super::Message):
//! the agent's cheap path for requests it answers itself at once — over an ingress
//! limit (3002 by default) or shed by its overload control (3004) — where a decode of
//! every AVP would cost more than the answer is worth (docs/architecture.md §13).
//!
//! [`answer`] writes exactly the bytes [`answer_for`](super::answer_for) encodes for the
//! decoded request (a property test holds the two together): the same header rules, and
//! the request's Session-Id, Auth-Application-Id, CC-Request-Type, CC-Request-Number and
//! Proxy-Info AVPs copied as they came, with zero padding.

use dra_common::wire::{AVP_HEADER_LEN, AVP_HEADER_LEN_VENDOR, HEADER_LEN, avp_flags, flags};

use super::dictionary::{avp_code, command_code};
use super::result_code;

/// One top-level AVP of a framed message: its code, whether it has a Vendor-Id, and its
/// bytes (header and data, without padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawAvp<'a> {
    pub code: u32,
    pub vendor: bool,
    pub bytes: &'a [u8],
}

impl RawAvp<'_> {
    /// The data after the header.
    pub fn data(&self) -> &[u8] {
        let h = if self.vendor {
            AVP_HEADER_LEN_VENDOR
        } else {
            AVP_HEADER_LEN
        };
        &self.bytes[h.min(self.bytes.len())..]
    }

    /// The data as an Unsigned32 / Enumerated, if it is 4 bytes.
    pub fn as_u32(&self) -> Option<u32> {
        self.data().try_into().ok().map(u32::from_be_bytes)
    }

    /// This one AVP decoded (e.g. a Grouped AVP the caller reads the members of).
    pub fn decode(&self) -> Option<super::Avp> {
        let mut padded = self.bytes.to_vec();
        padded.resize(padded.len().div_ceil(4) * 4, 0);
        super::avp::parse_avps(&padded).ok()?.into_iter().next()
    }
}

/// The class of a framed request: application, command and, for Credit-Control, its
/// CC-Request-Type (the fast path's classification, [`dra_common::wire::classify`]).
pub fn class(frame: &[u8]) -> dra_common::wire::MsgClass {
    match dra_common::wire::classify(&frame, 0) {
        Ok(c) => c.class,
        Err(_) => dra_common::wire::MsgClass::ALL,
    }
}

/// The top-level AVPs of `frame` (a whole message) in order; stops at the first AVP
/// whose length does not fit (the rest is not AVPs).
pub fn avps(frame: &[u8]) -> impl Iterator<Item = RawAvp<'_>> + '_ {
    let mut at = HEADER_LEN;
    std::iter::from_fn(move || {
        let h = frame.get(at..at + AVP_HEADER_LEN)?;
        let code = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_be_bytes([0, h[5], h[6], h[7]]) as usize;
        let vendor = h[4] & avp_flags::V != 0;
        let min = if vendor {
            AVP_HEADER_LEN_VENDOR
        } else {
            AVP_HEADER_LEN
        };
        if len < min {
            return None;
        }
        let bytes = frame.get(at..at + len)?;
        at += len.div_ceil(4) * 4;
        Some(RawAvp {
            code,
            vendor,
            bytes,
        })
    })
}

/// The first top-level IETF (no Vendor-Id) AVP `code` of `frame`.
pub fn find(frame: &[u8], code: u32) -> Option<RawAvp<'_>> {
    avps(frame).find(|a| a.code == code && !a.vendor)
}

/// Appends `a` with zero padding to a 32-bit boundary.
fn copy_avp(out: &mut Vec<u8>, a: &RawAvp<'_>) {
    out.extend_from_slice(a.bytes);
    out.resize(out.len().div_ceil(4) * 4, 0);
}

/// Appends an IETF AVP `code` with `flags` and `data`, zero padded.
fn put_avp(out: &mut Vec<u8>, code: u32, flags: u8, data: &[u8]) {
    let len = (AVP_HEADER_LEN + data.len()) as u32;
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | len).to_be_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(4) * 4, 0);
}

/// The answer to the request `frame` (a whole message of at least a header), as
/// [`answer_for`](super::answer_for) without a Failed-AVP builds and encodes it: the
/// request's command, Application-Id, Hop-by-Hop and End-to-End ids; R, T and the
/// reserved bits (the fast path's marks) cleared, P kept, E set for a protocol error
/// (3xxx); Session-Id first, Origin-Host, Origin-Realm, Result-Code, for Credit-Control
/// Auth-Application-Id, CC-Request-Type and CC-Request-Number, Error-Message, every
/// Proxy-Info. `None` if `frame` is shorter than a header or an AVP runs past it.
pub fn answer(
    frame: &[u8],
    result_code: u32,
    origin_host: &str,
    origin_realm: &str,
    error_message: Option<&str>,
) -> Option<Vec<u8>> {
    if frame.len() < HEADER_LEN {
        return None;
    }
    let walked: usize = avps(frame).map(|a| a.bytes.len().div_ceil(4) * 4).sum();
    if HEADER_LEN + walked < frame.len() {
        return None;
    }
    let mut out = Vec::with_capacity(
        HEADER_LEN + 64 + origin_host.len() + origin_realm.len() + frame.len().min(256),
    );
    let mut fl = frame[4] & flags::P;
    if result_code::is_protocol_error(result_code) {
        fl |= flags::E;
    }
    out.extend_from_slice(&[0; 4]);
    out.push(fl);
    out.extend_from_slice(&frame[5..HEADER_LEN]);
    let m = avp_flags::M;
    if let Some(sid) = find(frame, avp_code::SESSION_ID) {
        copy_avp(&mut out, &sid);
    }
    put_avp(&mut out, avp_code::ORIGIN_HOST, m, origin_host.as_bytes());
    put_avp(&mut out, avp_code::ORIGIN_REALM, m, origin_realm.as_bytes());
    put_avp(
        &mut out,
        avp_code::RESULT_CODE,
        m,
        &result_code.to_be_bytes(),
    );
    let command = u32::from_be_bytes([0, frame[5], frame[6], frame[7]]);
    if command == command_code::CREDIT_CONTROL {
        // RFC 4006 §3.2: the CCA carries these back.
        for code in [
            avp_code::AUTH_APPLICATION_ID,
            avp_code::CC_REQUEST_TYPE,
            avp_code::CC_REQUEST_NUMBER,
        ] {
            if let Some(a) = find(frame, code) {
                copy_avp(&mut out, &a);
            }
        }
    }
    if let Some(text) = error_message {
        // RFC 6733 §7.3: Error-Message MUST NOT have the M bit.
        put_avp(&mut out, avp_code::ERROR_MESSAGE, 0, text.as_bytes());
    }
    // RFC 6733 §6.2: every Proxy-Info, in order.
    for pi in avps(frame).filter(|a| a.code == avp_code::PROXY_INFO && !a.vendor) {
        copy_avp(&mut out, &pi);
    }
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&((1u32 << 24) | len).to_be_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diameter::{Avp, Message, answer_for};
    use proptest::prelude::*;

    fn arb_avp() -> impl Strategy<Value = Avp> {
        let codes = prop::sample::select(vec![
            avp_code::SESSION_ID,
            avp_code::ORIGIN_HOST,
            avp_code::AUTH_APPLICATION_ID,
            avp_code::CC_REQUEST_TYPE,
            avp_code::CC_REQUEST_NUMBER,
            avp_code::PROXY_INFO,
            avp_code::ROUTE_RECORD,
            443,
            1027,
        ]);
        (
            codes,
            prop::option::of(prop::sample::select(vec![10415u32, 5535])),
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..24),
        )
            .prop_map(|(code, vendor, m, data)| {
                let mut a = Avp::octets(code, data);
                if m {
                    a = a.mandatory();
                }
                match vendor {
                    Some(v) => a.vendor(v),
                    None => a,
                }
            })
    }

    fn arb_request() -> impl Strategy<Value = Message> {
        (
            prop::sample::select(vec![
                command_code::CREDIT_CONTROL,
                command_code::RE_AUTH,
                command_code::SESSION_TERMINATION,
                8_388_620,
            ]),
            any::<u32>(),
            any::<u8>(),
            any::<u32>(),
            any::<u32>(),
            prop::collection::vec(arb_avp(), 0..12),
        )
            .prop_map(
                |(command_code, application_id, fl, hbh, e2e, avps)| Message {
                    flags: flags::R | (fl & !flags::R),
                    command_code,
                    application_id,
                    hop_by_hop: hbh,
                    end_to_end: e2e,
                    avps,
                },
            )
    }

    proptest! {
        /// The answer from the bytes is the answer from the decoded request, byte for
        /// byte, for any Result-Code (3xxx with E) and with or without Error-Message.
        #[test]
        fn the_raw_answer_is_the_decoded_answer_encoded(
            req in arb_request(),
            code in prop::sample::select(vec![2001u32, 3002, 3004, 5012]),
            text in prop::option::of("[a-z ]{0,20}"),
        ) {
            let frame = req.encode();
            let raw = answer(&frame, code, "dra.lab.example", "lab.example", text.as_deref())
                .expect("a valid request");
            let decoded = Message::decode(&frame).expect("decodes");
            let want = answer_for(
                &decoded,
                code,
                "dra.lab.example",
                "lab.example",
                text.as_deref(),
                None,
            )
            .encode();
            prop_assert_eq!(raw, want);
        }
    }

    #[test]
    fn a_frame_whose_avps_run_past_it_has_no_answer() {
        let mut req = Message {
            flags: flags::R,
            command_code: command_code::CREDIT_CONTROL,
            application_id: 4,
            hop_by_hop: 1,
            end_to_end: 2,
            avps: vec![Avp::utf8(avp_code::SESSION_ID, "s1")],
        }
        .encode();
        assert!(answer(&req, 3004, "h", "r", None).is_some());
        // The AVP's length now claims more than the frame holds.
        req[27] = 200;
        assert!(answer(&req, 3004, "h", "r", None).is_none());
        assert!(answer(&req[..12], 3004, "h", "r", None).is_none());
    }
}
