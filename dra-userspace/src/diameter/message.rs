//! Diameter messages (RFC 6733 §3) and the answer builder (§7.2).

use dra_common::wire::flags;

use super::avp::Avp;
use super::dictionary::{avp_code, command_code};
use super::error::{DecodeError, EncodeError};
use super::result_code;

/// One Diameter message: header fields and top-level AVPs in wire order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// Command flags (`dra_common::wire::flags`: R, P, E, T, reserved).
    pub flags: u8,
    /// Command code (24 bits).
    pub command_code: u32,
    /// Application-Id.
    pub application_id: u32,
    /// Hop-by-Hop Identifier.
    pub hop_by_hop: u32,
    /// End-to-End Identifier.
    pub end_to_end: u32,
    /// Top-level AVPs in wire order.
    pub avps: Vec<Avp>,
}

impl Message {
    /// A request (R set) without AVPs. Add P with [`Message::proxiable`].
    pub fn request(
        command_code: u32,
        application_id: u32,
        hop_by_hop: u32,
        end_to_end: u32,
    ) -> Message {
        Message {
            flags: flags::R,
            command_code,
            application_id,
            hop_by_hop,
            end_to_end,
            avps: Vec::new(),
        }
    }

    /// An answer (R clear) without AVPs.
    pub fn answer(
        command_code: u32,
        application_id: u32,
        hop_by_hop: u32,
        end_to_end: u32,
    ) -> Message {
        Message {
            flags: 0,
            ..Message::request(command_code, application_id, hop_by_hop, end_to_end)
        }
    }

    /// Sets the P (proxiable) flag.
    #[must_use]
    pub fn proxiable(mut self) -> Message {
        self.flags |= flags::P;
        self
    }

    /// Appends an AVP.
    #[must_use]
    pub fn with(mut self, avp: Avp) -> Message {
        self.avps.push(avp);
        self
    }

    /// Appends an AVP.
    pub fn push(&mut self, avp: Avp) {
        self.avps.push(avp);
    }

    /// Decodes exactly one message (see [`super::codec::decode`]).
    pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
        super::codec::decode(buf)
    }

    /// Encodes the message (see [`super::codec::encode`]).
    ///
    /// # Panics
    /// When a length does not fit its 24-bit field; use [`Message::try_encode`] to get an
    /// error instead.
    pub fn encode(&self) -> Vec<u8> {
        super::codec::encode(self)
    }

    /// Encodes the message, failing when a length does not fit its 24-bit field.
    pub fn try_encode(&self) -> Result<Vec<u8>, EncodeError> {
        super::codec::try_encode(self)
    }

    /// R: this is a request.
    pub fn is_request(&self) -> bool {
        self.flags & flags::R != 0
    }

    /// P: the message may be proxied, relayed or redirected.
    pub fn is_proxiable(&self) -> bool {
        self.flags & flags::P != 0
    }

    /// E: an answer carrying a protocol error.
    pub fn is_error(&self) -> bool {
        self.flags & flags::E != 0
    }

    /// T: a potentially retransmitted request (RFC 6733 §3).
    pub fn is_retransmit(&self) -> bool {
        self.flags & flags::T != 0
    }

    /// The fast path marked this request as over its rate limit (reserved bit 0x01,
    /// docs/architecture.md §3): answer it at once, never forward it.
    pub fn is_marked(&self) -> bool {
        self.flags & flags::RATE_LIMIT_MARK != 0
    }

    /// Clears the fast path's mark (it must never leave this host).
    pub fn clear_mark(&mut self) {
        self.flags &= !flags::RATE_LIMIT_MARK;
    }

    /// First top-level AVP `code` without Vendor-Id.
    pub fn find(&self, code: u32) -> Option<&Avp> {
        self.find_vendor(code, None)
    }

    /// First top-level AVP `code` from `vendor_id` (`None` = IETF).
    pub fn find_vendor(&self, code: u32, vendor_id: Option<u32>) -> Option<&Avp> {
        self.avps.iter().find(|a| a.is(code, vendor_id))
    }

    /// Every top-level AVP `code` without Vendor-Id, in order.
    pub fn find_all(&self, code: u32) -> impl Iterator<Item = &Avp> + '_ {
        self.avps.iter().filter(move |a| a.is(code, None))
    }

    fn utf8_of(&self, code: u32) -> Option<&str> {
        self.find(code).and_then(|a| a.as_utf8().ok())
    }

    /// Session-Id, when present and UTF-8.
    pub fn session_id(&self) -> Option<&str> {
        self.utf8_of(avp_code::SESSION_ID)
    }

    /// Origin-Host, when present and UTF-8.
    pub fn origin_host(&self) -> Option<&str> {
        self.utf8_of(avp_code::ORIGIN_HOST)
    }

    /// Origin-Realm, when present and UTF-8.
    pub fn origin_realm(&self) -> Option<&str> {
        self.utf8_of(avp_code::ORIGIN_REALM)
    }

    /// Destination-Host, when present and UTF-8.
    pub fn destination_host(&self) -> Option<&str> {
        self.utf8_of(avp_code::DESTINATION_HOST)
    }

    /// Destination-Realm, when present and UTF-8.
    pub fn destination_realm(&self) -> Option<&str> {
        self.utf8_of(avp_code::DESTINATION_REALM)
    }

    /// Result-Code, when present and 4 bytes.
    pub fn result_code(&self) -> Option<u32> {
        self.find(avp_code::RESULT_CODE)
            .and_then(|a| a.as_u32().ok())
    }

    /// (Vendor-Id, Experimental-Result-Code) of Experimental-Result (RFC 6733 §7.6).
    pub fn experimental_result(&self) -> Option<(u32, u32)> {
        let children = self
            .find(avp_code::EXPERIMENTAL_RESULT)?
            .as_grouped()
            .ok()?;
        let get = |code| {
            children
                .iter()
                .find(|a| a.is(code, None))
                .and_then(|a| a.as_u32().ok())
        };
        Some((
            get(avp_code::VENDOR_ID)?,
            get(avp_code::EXPERIMENTAL_RESULT_CODE)?,
        ))
    }

    /// The rate-limiting class of this message, as the fast path classifies it
    /// (`dra_common::wire::classify`): application, command, and for a Credit-Control
    /// request its CC-Request-Type when it is one of the four (else 0).
    pub fn class(&self) -> dra_common::wire::MsgClass {
        let rt = if self.is_request() && self.command_code == dra_common::wire::cmd::CREDIT_CONTROL
        {
            match self.cc_request_type() {
                Some(v @ 1..=4) => v as u8,
                _ => 0,
            }
        } else {
            0
        };
        dra_common::wire::MsgClass::new(self.application_id, self.command_code, rt)
    }

    /// CC-Request-Type, when present and 4 bytes (RFC 4006 §8.3).
    pub fn cc_request_type(&self) -> Option<u32> {
        self.find(avp_code::CC_REQUEST_TYPE)
            .and_then(|a| a.as_u32().ok())
    }
}

/// Builds the answer to `request` (RFC 6733 §6.2, §7.2):
///
/// - same command code, Application-Id, Hop-by-Hop and End-to-End ids; R cleared; P
///   copied; E set when `result_code` is a protocol error (3xxx, §7.1.3); T and the
///   reserved bits (the fast path's mark included) cleared;
/// - AVPs in the answer-message order: Session-Id (first, when the request has one),
///   Origin-Host, Origin-Realm, Result-Code; for Credit-Control the request's
///   Auth-Application-Id, CC-Request-Type and CC-Request-Number (RFC 4006 §3.2);
///   Error-Message; Failed-AVP wrapping `failed_avp`; every Proxy-Info of the request in
///   order (§6.2).
///
/// `failed_avp` is the offending AVP itself; it is wrapped in Failed-AVP (279) here.
pub fn answer_for(
    request: &Message,
    result_code: u32,
    origin_host: &str,
    origin_realm: &str,
    error_message: Option<&str>,
    failed_avp: Option<Avp>,
) -> Message {
    let mut fl = request.flags & flags::P;
    if result_code::is_protocol_error(result_code) {
        fl |= flags::E;
    }
    let mut ans = Message {
        flags: fl,
        command_code: request.command_code,
        application_id: request.application_id,
        hop_by_hop: request.hop_by_hop,
        end_to_end: request.end_to_end,
        avps: Vec::new(),
    };
    if let Some(sid) = request.find(avp_code::SESSION_ID) {
        // RFC 6733 §8.8: Session-Id first, copied verbatim.
        ans.push(sid.clone());
    }
    ans.push(Avp::utf8(avp_code::ORIGIN_HOST, origin_host).mandatory());
    ans.push(Avp::utf8(avp_code::ORIGIN_REALM, origin_realm).mandatory());
    ans.push(Avp::u32(avp_code::RESULT_CODE, result_code).mandatory());
    if request.command_code == command_code::CREDIT_CONTROL {
        // RFC 4006 §3.2: the CCA carries these back.
        for code in [
            avp_code::AUTH_APPLICATION_ID,
            avp_code::CC_REQUEST_TYPE,
            avp_code::CC_REQUEST_NUMBER,
        ] {
            if let Some(a) = request.find(code) {
                ans.push(a.clone());
            }
        }
    }
    if let Some(text) = error_message {
        // RFC 6733 §7.3: Error-Message MUST NOT have the M bit.
        ans.push(Avp::utf8(avp_code::ERROR_MESSAGE, text));
    }
    if let Some(f) = failed_avp {
        ans.push(Avp::grouped(avp_code::FAILED_AVP, [f]).mandatory());
    }
    for pi in request.find_all(avp_code::PROXY_INFO) {
        ans.push(pi.clone());
    }
    ans
}
