//! Diameter wire format (RFC 6733 §3, §4) and the bounded scanner shared by the XDP
//! program and the agent.
//!
//! Everything here reads through [`Bytes`], so the exact same code runs over packet
//! memory in the kernel (bounds checked against `data_end`) and over `&[u8]` in
//! userspace, where it is unit-, property- and fuzz-tested.

/// Diameter protocol version (RFC 6733 §3).
pub const VERSION: u8 = 1;
/// Fixed header length in bytes (RFC 6733 §3).
pub const HEADER_LEN: usize = 20;
/// An AVP header without Vendor-Id (RFC 6733 §4.1).
pub const AVP_HEADER_LEN: usize = 8;
/// An AVP header with Vendor-Id (V flag set).
pub const AVP_HEADER_LEN_VENDOR: usize = 12;
/// The IANA Diameter port (RFC 6733 §2.1).
pub const DIAMETER_PORT: u16 = 3868;
/// SCTP payload protocol identifier for Diameter (RFC 6733 §2.1, IANA PPID 46).
pub const SCTP_PPID_DIAMETER: u32 = 46;

/// Largest value of the 24-bit message and AVP length fields.
pub const MAX_LEN_FIELD: u32 = 0x00ff_ffff;

/// How many AVPs the classifier looks at before it gives up on finding
/// CC-Request-Type. An AVP 416 beyond this is reported as [`ReqTypeScan::BeyondBound`],
/// never as a wrong class. RFC 4006 §3.1 puts CC-Request-Type right after the routing
/// AVPs, so real gateways place it within the first eight or so.
pub const MAX_AVPS_SCANNED: usize = 16;

/// Header command flags (RFC 6733 §3).
pub mod flags {
    /// Request.
    pub const R: u8 = 0x80;
    /// Proxiable.
    pub const P: u8 = 0x40;
    /// Error (answers only).
    pub const E: u8 = 0x20;
    /// Potentially retransmitted.
    pub const T: u8 = 0x10;
    /// The four reserved bits; RFC 6733 §3 says they MUST be zero on the wire.
    pub const RESERVED: u8 = 0x0f;
    /// The reserved bit the fast path sets in-band on an over-limit request, so that the
    /// agent answers it at once (DESIGN.md §3, action `reject`). Never sent upstream.
    pub const RATE_LIMIT_MARK: u8 = 0x01;
}

/// AVP flags (RFC 6733 §4.1).
pub mod avp_flags {
    /// Vendor-Specific: a Vendor-Id follows the length.
    pub const V: u8 = 0x80;
    /// Mandatory.
    pub const M: u8 = 0x40;
    /// Protected (deprecated, must be zero in RFC 6733).
    pub const P: u8 = 0x20;
}

/// Command codes used by the fast path and the agent.
pub mod cmd {
    /// Capabilities-Exchange-Request/Answer (RFC 6733 §5.3).
    pub const CAPABILITIES_EXCHANGE: u32 = 257;
    /// Re-Auth-Request/Answer (RFC 6733 §8.3).
    pub const RE_AUTH: u32 = 258;
    /// Device-Watchdog-Request/Answer (RFC 6733 §5.5).
    pub const DEVICE_WATCHDOG: u32 = 280;
    /// Disconnect-Peer-Request/Answer (RFC 6733 §5.4).
    pub const DISCONNECT_PEER: u32 = 282;
    /// Credit-Control-Request/Answer (RFC 4006 §3.1, TS 29.212 for Gx).
    pub const CREDIT_CONTROL: u32 = 272;
}

/// Application ids.
pub mod app {
    /// Diameter common messages (base protocol, RFC 6733 §2.4).
    pub const COMMON: u32 = 0;
    /// Diameter Credit-Control Application: Gy/Ro (RFC 4006 §1.2).
    pub const GY: u32 = 4;
    /// 3GPP Gx (TS 29.212 §5.1).
    pub const GX: u32 = 16_777_238;
    /// Relay application (RFC 6733 §2.4).
    pub const RELAY: u32 = 0xffff_ffff;
}

/// AVP codes the fast path and the agent need.
pub mod avp {
    pub const SESSION_ID: u32 = 263;
    pub const ORIGIN_HOST: u32 = 264;
    pub const ORIGIN_REALM: u32 = 296;
    pub const DESTINATION_HOST: u32 = 293;
    pub const DESTINATION_REALM: u32 = 283;
    pub const AUTH_APPLICATION_ID: u32 = 258;
    pub const ACCT_APPLICATION_ID: u32 = 259;
    pub const RESULT_CODE: u32 = 268;
    pub const ERROR_MESSAGE: u32 = 281;
    pub const FAILED_AVP: u32 = 279;
    pub const ROUTE_RECORD: u32 = 282;
    pub const HOST_IP_ADDRESS: u32 = 257;
    /// CC-Request-Type (RFC 4006 §8.3).
    pub const CC_REQUEST_TYPE: u32 = 416;
    /// CC-Request-Number (RFC 4006 §8.2).
    pub const CC_REQUEST_NUMBER: u32 = 415;
    /// Load (RFC 8583 §6.1).
    pub const LOAD: u32 = 650;
    pub const LOAD_TYPE: u32 = 651;
    pub const LOAD_VALUE: u32 = 652;
}

/// CC-Request-Type values (RFC 4006 §8.3).
pub mod cc_request_type {
    pub const INITIAL: u8 = 1;
    pub const UPDATE: u8 = 2;
    pub const TERMINATION: u8 = 3;
    pub const EVENT: u8 = 4;
}

/// A bounds-checked, big-endian byte source. Offsets are relative to the source's
/// start. Every read either returns the bytes or `None`; nothing panics.
pub trait Bytes {
    /// Number of readable bytes.
    fn len(&self) -> usize;
    /// True when nothing can be read.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// One byte at `off`.
    fn u8_at(&self, off: usize) -> Option<u8>;
    /// A big-endian u32 at `off`.
    fn u32_at(&self, off: usize) -> Option<u32>;
}

impl Bytes for &[u8] {
    #[inline(always)]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    #[inline(always)]
    fn u8_at(&self, off: usize) -> Option<u8> {
        self.get(off).copied()
    }
    #[inline(always)]
    fn u32_at(&self, off: usize) -> Option<u32> {
        let end = off.checked_add(4)?;
        let b = self.get(off..end)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Why bytes are not a valid Diameter header or message. The agent maps these to
/// Result-Codes; the fast path counts them and passes the segment to the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the part being read.
    Truncated,
    /// Version is not 1 (RFC 6733 §3). Answer: DIAMETER_UNSUPPORTED_VERSION 5011.
    BadVersion,
    /// Message length < 20 or not a multiple of 4 (RFC 6733 §3). A framing error: the
    /// connection cannot be resynchronised.
    BadLength,
    /// Reserved header bits set, or E set on a request (RFC 6733 §3). Answer:
    /// DIAMETER_INVALID_HDR_BITS 3008.
    InvalidHeaderBits,
    /// AVP length shorter than its header, or running past the message (RFC 6733
    /// §4.1). Answer: DIAMETER_INVALID_AVP_LENGTH 5014.
    AvpLength,
}

impl WireError {
    /// The Result-Code that RFC 6733 §7.1 gives for this error, where one exists.
    pub const fn result_code(self) -> Option<u32> {
        match self {
            WireError::BadVersion => Some(5011),
            WireError::InvalidHeaderBits => Some(3008),
            WireError::AvpLength => Some(5014),
            WireError::Truncated | WireError::BadLength => None,
        }
    }
    /// A short stable name (metrics labels, logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            WireError::Truncated => "truncated",
            WireError::BadVersion => "bad_version",
            WireError::BadLength => "bad_length",
            WireError::InvalidHeaderBits => "invalid_header_bits",
            WireError::AvpLength => "avp_length",
        }
    }
}

/// The fixed part of a Diameter header that routing and rate limiting need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    /// Message length including the header (24 bits).
    pub length: u32,
    pub flags: u8,
    /// Command code (24 bits).
    pub command_code: u32,
    pub application_id: u32,
}

impl Header {
    #[inline(always)]
    pub const fn is_request(&self) -> bool {
        self.flags & flags::R != 0
    }
    /// The fast path marked this request as over its limit.
    #[inline(always)]
    pub const fn is_marked(&self) -> bool {
        self.flags & flags::RATE_LIMIT_MARK != 0
    }
}

/// Reads and validates the header at `off`: version 1, length ≥ 20 and a multiple of
/// 4, no reserved bit other than the fast path's mark, no E bit on a request (RFC 6733
/// §3). Only the first 12 bytes are read, so a segment that ends inside the
/// Hop-by-Hop or End-to-End id still yields its header.
#[inline(always)]
pub fn parse_header<B: Bytes>(b: &B, off: usize) -> Result<Header, WireError> {
    let w0 = b.u32_at(off).ok_or(WireError::Truncated)?;
    let w1 = b.u32_at(off + 4).ok_or(WireError::Truncated)?;
    let application_id = b.u32_at(off + 8).ok_or(WireError::Truncated)?;
    let version = (w0 >> 24) as u8;
    let length = w0 & MAX_LEN_FIELD;
    let fl = (w1 >> 24) as u8;
    if version != VERSION {
        return Err(WireError::BadVersion);
    }
    if length < HEADER_LEN as u32 || !length.is_multiple_of(4) {
        return Err(WireError::BadLength);
    }
    if fl & flags::RESERVED & !flags::RATE_LIMIT_MARK != 0
        || (fl & flags::R != 0 && fl & flags::E != 0)
    {
        return Err(WireError::InvalidHeaderBits);
    }
    Ok(Header {
        version,
        length,
        flags: fl,
        command_code: w1 & MAX_LEN_FIELD,
        application_id,
    })
}

/// Outcome of looking for CC-Request-Type in a CCR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqTypeScan {
    /// AVP 416 found with this value.
    Found(u32),
    /// Every AVP of the message was scanned; there is no AVP 416.
    Absent,
    /// [`MAX_AVPS_SCANNED`] AVPs were scanned without reaching AVP 416 or the end.
    BeyondBound,
    /// The bytes ended before AVP 416 or the end of the message (message continues in
    /// a later segment).
    Truncated,
}

impl ReqTypeScan {
    /// The request-type byte of a message class: the value when found and in 1..=4,
    /// else 0 ("not found" — never a guessed class).
    #[inline(always)]
    pub const fn class_byte(self) -> u8 {
        match self {
            ReqTypeScan::Found(v) if v >= 1 && v <= 4 => v as u8,
            _ => 0,
        }
    }
}

/// Walks the AVPs of the message at `msg_off` (whose header said `msg_len` bytes)
/// looking for CC-Request-Type (416, no vendor). Bounded by [`MAX_AVPS_SCANNED`].
/// Vendor-flagged AVPs are skipped with their 12-byte header; padding is honoured.
/// A zero-length, too-short or overflowing AVP is [`WireError::AvpLength`].
#[inline(always)]
pub fn scan_request_type<B: Bytes>(
    b: &B,
    msg_off: usize,
    msg_len: u32,
) -> Result<ReqTypeScan, WireError> {
    let end = msg_off + msg_len as usize;
    let mut off = msg_off + HEADER_LEN;
    // Bounded loop: at most MAX_AVPS_SCANNED AVP headers are read.
    let mut i = 0;
    while i < MAX_AVPS_SCANNED {
        i += 1;
        if off >= end {
            return Ok(ReqTypeScan::Absent);
        }
        if off + AVP_HEADER_LEN > end {
            return Err(WireError::AvpLength);
        }
        let Some(code) = b.u32_at(off) else {
            return Ok(ReqTypeScan::Truncated);
        };
        let Some(fl_len) = b.u32_at(off + 4) else {
            return Ok(ReqTypeScan::Truncated);
        };
        let avp_len = (fl_len & MAX_LEN_FIELD) as usize;
        let vendor = (fl_len >> 24) as u8 & avp_flags::V != 0;
        let hdr = if vendor {
            AVP_HEADER_LEN_VENDOR
        } else {
            AVP_HEADER_LEN
        };
        if avp_len < hdr || avp_len > end - off {
            return Err(WireError::AvpLength);
        }
        if code == avp::CC_REQUEST_TYPE && !vendor {
            // Enumerated: exactly 4 bytes of data (RFC 6733 §4.2, Integer32).
            if avp_len != AVP_HEADER_LEN + 4 {
                return Err(WireError::AvpLength);
            }
            return match b.u32_at(off + AVP_HEADER_LEN) {
                Some(v) => Ok(ReqTypeScan::Found(v)),
                None => Ok(ReqTypeScan::Truncated),
            };
        }
        // Padding to a 32-bit boundary is not counted in the AVP length (§4.1).
        off += (avp_len + 3) & !3;
    }
    if off >= end {
        Ok(ReqTypeScan::Absent)
    } else {
        Ok(ReqTypeScan::BeyondBound)
    }
}

/// The rate-limiting class of a message: application, command, and for
/// Credit-Control the request type (0 = not a CCR or type not found).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MsgClass {
    pub app_id: u32,
    pub command_code: u32,
    pub req_type: u8,
    pub _pad: [u8; 3],
}

impl MsgClass {
    /// The class that stands for "every message of the peer" (overall bucket).
    /// Command code 0 is not a Diameter command, so it cannot collide.
    pub const ALL: MsgClass = MsgClass::new(0, 0, 0);

    pub const fn new(app_id: u32, command_code: u32, req_type: u8) -> MsgClass {
        MsgClass {
            app_id,
            command_code,
            req_type,
            _pad: [0; 3],
        }
    }
    /// Gx CCR with the given CC-Request-Type.
    pub const fn gx_ccr(req_type: u8) -> MsgClass {
        MsgClass::new(app::GX, cmd::CREDIT_CONTROL, req_type)
    }
    /// Gy CCR with the given CC-Request-Type.
    pub const fn gy_ccr(req_type: u8) -> MsgClass {
        MsgClass::new(app::GY, cmd::CREDIT_CONTROL, req_type)
    }
}

/// A classified message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    pub header: Header,
    pub class: MsgClass,
    /// How CC-Request-Type was looked for (only CCRs are scanned).
    pub req_type: Option<ReqTypeScan>,
}

/// Parses the header at `off` and, for a Credit-Control request, scans for
/// CC-Request-Type. Answers and other commands are classified from the header alone.
#[inline(always)]
pub fn classify<B: Bytes>(b: &B, off: usize) -> Result<Classified, WireError> {
    let header = parse_header(b, off)?;
    let mut req_type = None;
    let mut rt = 0;
    if header.is_request() && header.command_code == cmd::CREDIT_CONTROL {
        let scan = scan_request_type(b, off, header.length)?;
        rt = scan.class_byte();
        req_type = Some(scan);
    }
    Ok(Classified {
        header,
        class: MsgClass::new(header.application_id, header.command_code, rt),
        req_type,
    })
}
