//! Error types of the Diameter core.
//!
//! Two families, kept apart on purpose (the h2 split between stream and connection
//! errors):
//!
//! - [`FramingError`]: the byte stream cannot be cut into messages any more (bad
//!   version, bad or oversized length). The only sound reaction is to close the
//!   transport connection.
//! - [`ProtocolError`]: a well-framed request is wrong (header bits, AVP lengths,
//!   missing AVPs, unknown command or application). The reaction is an answer with the
//!   error's Result-Code and, where the RFC asks for it, a Failed-AVP; the connection
//!   stays up.
//!
//! [`DecodeError`] is what [`decode`](super::codec::decode) reports for one framed
//! message; [`DecodeError::to_protocol_error`] turns the answerable cases into a
//! [`ProtocolError`].

use super::avp::Avp;
use super::dictionary::{Dictionary, FlagRule};
use super::message::Message;
use super::result_code;

/// The header of an AVP that could not be decoded, as far as it could be read. An
/// incomplete header is padded with zero bytes up to the minimum header length, which
/// is also how RFC 6733 §7.1.5 (DIAMETER_INVALID_AVP_LENGTH) asks for it to be reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffendingAvp {
    /// AVP code.
    pub code: u32,
    /// AVP flags as received.
    pub flags: u8,
    /// Vendor-Id when the V flag was set.
    pub vendor_id: Option<u32>,
    /// The AVP Length field as received (24 bits), 0 when it could not be read.
    pub length: u32,
}

impl OffendingAvp {
    /// An AVP with this header and a zero-filled payload of the minimum length for its
    /// data type (empty for Grouped and unknown AVPs) — the Failed-AVP content RFC 6733
    /// §7.1.5 asks for when the received length cannot be trusted.
    pub fn zero_filled(&self, dict: &Dictionary) -> Avp {
        let min = dict
            .avp(self.code, self.vendor_id)
            .map_or(0, |d| d.data_type.min_len());
        Avp {
            code: self.code,
            flags: self.flags,
            vendor_id: self.vendor_id,
            data: vec![0; min],
        }
    }
}

/// Why bytes that were handed over as one Diameter message are not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer than the 20 bytes of a Diameter header.
    #[error("truncated Diameter header: {len} bytes, need 20")]
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// Version is not 1 (RFC 6733 §3).
    #[error("unsupported Diameter version {version}")]
    BadVersion {
        /// The version byte received.
        version: u8,
    },
    /// Message Length below 20 or not a multiple of 4 (RFC 6733 §3).
    #[error("invalid Diameter message length {length}")]
    BadLength {
        /// The Message Length field.
        length: u32,
    },
    /// The header's Message Length is not the number of bytes handed over.
    #[error("message length {header_length} does not match the {buf_len} bytes given")]
    LengthMismatch {
        /// The Message Length field.
        header_length: u32,
        /// Bytes handed to the decoder.
        buf_len: usize,
    },
    /// An AVP's length is shorter than its header or runs past the end of the message
    /// (RFC 6733 §4.1). The message is framed correctly, so a request is answered with
    /// DIAMETER_INVALID_AVP_LENGTH (5014); see [`DecodeError::to_protocol_error`].
    #[error(
        "AVP {} at offset {offset} has invalid length {}",
        .avp.code,
        .avp.length
    )]
    InvalidAvpLength {
        /// The header, hop-by-hop/end-to-end ids and the AVPs decoded before the bad
        /// one: enough to build the answer (Session-Id comes first in a request).
        partial: Box<Message>,
        /// The AVP that could not be decoded.
        avp: OffendingAvp,
        /// Byte offset of that AVP in the message.
        offset: usize,
    },
}

impl DecodeError {
    /// The partly decoded message, when the header was sound (only for
    /// [`DecodeError::InvalidAvpLength`]).
    pub fn partial(&self) -> Option<&Message> {
        match self {
            DecodeError::InvalidAvpLength { partial, .. } => Some(partial),
            _ => None,
        }
    }

    /// The answerable form of this error, or `None` when the bytes are not a framed
    /// message at all (the transport must then be closed instead).
    pub fn to_protocol_error(&self, dict: &Dictionary) -> Option<ProtocolError> {
        match self {
            DecodeError::InvalidAvpLength { avp, .. } => Some(ProtocolError::InvalidAvpLength {
                code: avp.code,
                vendor_id: avp.vendor_id,
                name: dict.avp_name(avp.code, avp.vendor_id),
                length: avp.length,
                // RFC 6733 §7.1.5: header plus a zero-filled payload of the minimum
                // length for the data type, since the received length is not usable.
                failed_avp: avp.zero_filled(dict),
            }),
            _ => None,
        }
    }
}

/// A message that cannot be encoded: a length does not fit the 24-bit fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// An AVP is longer than the 24-bit AVP Length field allows (RFC 6733 §4.1).
    #[error("AVP {code} is {length} bytes, more than the 24-bit length field holds")]
    AvpTooLong {
        /// AVP code.
        code: u32,
        /// Its length including the header.
        length: usize,
    },
    /// The message is longer than the 24-bit Message Length field allows (RFC 6733 §3).
    #[error("message is {length} bytes, more than the 24-bit length field holds")]
    MessageTooLong {
        /// The encoded length.
        length: usize,
    },
    /// A command code does not fit in 24 bits (RFC 6733 §3).
    #[error("command code {command_code} does not fit in 24 bits")]
    CommandCodeTooLarge {
        /// The command code.
        command_code: u32,
    },
}

/// The TCP byte stream cannot be framed any more; the connection must be closed
/// (RFC 6733 §3: there is no way to find the next message boundary).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// Version is not 1 (RFC 6733 §3).
    #[error("unsupported Diameter version {version} on the stream")]
    BadVersion {
        /// The version byte received.
        version: u8,
    },
    /// Message Length below 20 or not a multiple of 4 (RFC 6733 §3).
    #[error("invalid Diameter message length {length} on the stream")]
    BadLength {
        /// The Message Length field.
        length: u32,
    },
    /// The announced message is larger than this framer accepts.
    #[error("Diameter message of {length} bytes exceeds the {max} byte limit")]
    Oversized {
        /// The Message Length field.
        length: u32,
        /// The configured maximum.
        max: usize,
    },
}

/// Why a value could not be read out of an AVP's data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AvpDataError {
    /// The data has the wrong size for the requested type.
    #[error("AVP {code}: {actual} bytes of data, expected {expected}")]
    WrongLength {
        /// AVP code.
        code: u32,
        /// Bytes expected for the type.
        expected: usize,
        /// Bytes present.
        actual: usize,
    },
    /// UTF8String / DiameterIdentity data that is not UTF-8 (RFC 6733 §4.3.1).
    #[error("AVP {code}: data is not valid UTF-8")]
    InvalidUtf8 {
        /// AVP code.
        code: u32,
        /// Where the decoding failed.
        #[source]
        source: std::str::Utf8Error,
    },
    /// An Address whose family is neither IPv4 (1) nor IPv6 (2), or whose length does
    /// not match the family (RFC 6733 §4.3.1).
    #[error("AVP {code}: address family {family} with {len} address bytes is not IPv4/IPv6")]
    BadAddress {
        /// AVP code.
        code: u32,
        /// The 2-byte AddressType (IANA address family number), 0 if absent.
        family: u16,
        /// Address bytes after the family.
        len: usize,
    },
    /// Grouped data that is not a sequence of well-formed AVPs (RFC 6733 §4.4).
    #[error(
        "grouped AVP {code}: inner AVP {} at offset {offset} has invalid length {}",
        .inner.code,
        .inner.length
    )]
    BadGrouped {
        /// Code of the grouped AVP.
        code: u32,
        /// The inner AVP that could not be decoded.
        inner: OffendingAvp,
        /// Its offset within the grouped AVP's data.
        offset: usize,
    },
}

/// A request that is framed correctly but wrong in a way that is answered with a
/// Result-Code (RFC 6733 §7.1). Build the answer with [`ProtocolError::answer`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Reserved header bits set, E set on a request, or P not as the command defines
    /// (RFC 6733 §3, §7.1.3): DIAMETER_INVALID_HDR_BITS 3008.
    #[error("invalid command flags {flags:#04x} for command {command_code}")]
    InvalidHeaderBits {
        /// The command flags received.
        flags: u8,
        /// The command code.
        command_code: u32,
    },
    /// The Application-Id is not one this node supports (RFC 6733 §7.1.3):
    /// DIAMETER_APPLICATION_UNSUPPORTED 3007.
    #[error("application {application_id} is not supported")]
    ApplicationUnsupported {
        /// The Application-Id of the request.
        application_id: u32,
    },
    /// The command code is not known (RFC 6733 §7.1.3):
    /// DIAMETER_COMMAND_UNSUPPORTED 3001.
    #[error("command {command_code} is not supported")]
    CommandUnsupported {
        /// The command code of the request.
        command_code: u32,
    },
    /// An AVP's length is wrong for its header or its data type (RFC 6733 §7.1.5):
    /// DIAMETER_INVALID_AVP_LENGTH 5014.
    #[error("AVP {name} ({code}) has an invalid length {length}")]
    InvalidAvpLength {
        /// Code of the offending AVP.
        code: u32,
        /// Its Vendor-Id.
        vendor_id: Option<u32>,
        /// Its dictionary name ("Unknown-AVP" when not in the dictionary).
        name: &'static str,
        /// The AVP Length received.
        length: u32,
        /// What goes into Failed-AVP: the offending AVP, wrapped in its enclosing
        /// Grouped AVPs when it was nested (RFC 6733 §7.5).
        failed_avp: Avp,
    },
    /// A Grouped AVP nests Grouped AVPs deeper than the node accepts
    /// ([`super::validate::MAX_GROUPED_DEPTH`]): its data is a value this node does not
    /// take (RFC 6733 §7.1.5): DIAMETER_INVALID_AVP_VALUE 5004.
    #[error("Grouped AVP {name} ({code}) nests deeper than {limit} levels")]
    GroupedTooDeep {
        /// Code of the AVP at the limit.
        code: u32,
        /// Its Vendor-Id.
        vendor_id: Option<u32>,
        /// Its dictionary name.
        name: &'static str,
        /// The limit.
        limit: usize,
        /// What goes into Failed-AVP: that AVP, wrapped in its enclosing Grouped AVPs.
        failed_avp: Avp,
    },
    /// A required AVP is absent (RFC 6733 §7.1.5): DIAMETER_MISSING_AVP 5005.
    #[error("missing AVP {name} ({code})")]
    MissingAvp {
        /// Code of the missing AVP.
        code: u32,
        /// Its Vendor-Id.
        vendor_id: Option<u32>,
        /// Its dictionary name.
        name: &'static str,
        /// What goes into Failed-AVP: an example of the missing AVP with a zero-filled
        /// payload of the minimum length for its type (RFC 6733 §7.5).
        failed_avp: Avp,
    },
}

impl ProtocolError {
    /// The Result-Code this error is answered with.
    pub const fn result_code(&self) -> u32 {
        match self {
            ProtocolError::InvalidHeaderBits { .. } => result_code::INVALID_HDR_BITS,
            ProtocolError::ApplicationUnsupported { .. } => result_code::APPLICATION_UNSUPPORTED,
            ProtocolError::CommandUnsupported { .. } => result_code::COMMAND_UNSUPPORTED,
            ProtocolError::InvalidAvpLength { .. } => result_code::INVALID_AVP_LENGTH,
            ProtocolError::GroupedTooDeep { .. } => result_code::INVALID_AVP_VALUE,
            ProtocolError::MissingAvp { .. } => result_code::MISSING_AVP,
        }
    }

    /// The AVP to report inside Failed-AVP, if this error carries one.
    pub fn failed_avp(&self) -> Option<&Avp> {
        match self {
            ProtocolError::InvalidAvpLength { failed_avp, .. }
            | ProtocolError::GroupedTooDeep { failed_avp, .. }
            | ProtocolError::MissingAvp { failed_avp, .. } => Some(failed_avp),
            _ => None,
        }
    }

    /// The answer to `request` for this error: Result-Code, this error's text as
    /// Error-Message, Failed-AVP where one applies; E bit for 3xxx (see
    /// [`super::message::answer_for`]).
    pub fn answer(&self, request: &Message, origin_host: &str, origin_realm: &str) -> Message {
        super::message::answer_for(
            request,
            self.result_code(),
            origin_host,
            origin_realm,
            Some(&self.to_string()),
            self.failed_avp().cloned(),
        )
    }

    /// A [`ProtocolError::MissingAvp`] for `code`/`vendor_id`, with the example AVP built
    /// from the dictionary (RFC 6733 §7.5).
    pub fn missing(dict: &Dictionary, code: u32, vendor_id: Option<u32>) -> ProtocolError {
        let def = dict.avp(code, vendor_id);
        let min = def.map_or(0, |d| d.data_type.min_len());
        let mut failed_avp = Avp::octets(code, vec![0; min]);
        if def.is_some_and(|d| d.m_bit == FlagRule::Must) {
            failed_avp = failed_avp.mandatory();
        }
        if let Some(v) = vendor_id {
            failed_avp = failed_avp.vendor(v);
        }
        ProtocolError::MissingAvp {
            code,
            vendor_id,
            name: dict.avp_name(code, vendor_id),
            failed_avp,
        }
    }
}
