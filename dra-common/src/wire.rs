//! Diameter wire format (RFC 6733 §3, §4) and the bounded scanner shared by the XDP
//! program and the agent.
//!
//! Everything here reads through [`Bytes`], so the exact same code runs over packet
//! memory in the kernel (bounds checked against `data_end`) and over `&[u8]` in
//! userspace, where it is unit-, property- and fuzz-tested.

use core::ptr::write_volatile;

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
    /// agent answers it at once (docs/architecture.md §3, action `reject`). Never sent
    /// upstream.
    pub const RATE_LIMIT_MARK: u8 = 0x01;
    /// The reserved bit the fast path (or the agent's reader) sets on a request its
    /// overload control sheds: the agent answers it 3004 DIAMETER_TOO_BUSY at once,
    /// from its bytes (docs/architecture.md §13). Never sent upstream.
    pub const OVERLOAD_SHED: u8 = 0x02;
    /// The reserved bit set on a request shed beyond what the agent can afford to
    /// answer: its reader discards it unanswered; the gateway's own timers decide.
    pub const OVERLOAD_DISCARD: u8 = 0x04;
    /// Every mark the fast path sets.
    pub const MARKS: u8 = RATE_LIMIT_MARK | OVERLOAD_SHED | OVERLOAD_DISCARD;
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
    /// DRMP, the Diameter Routing Message Priority (RFC 7944 §9.1): Enumerated, 0 the
    /// highest priority, 15 the lowest.
    pub const DRMP: u32 = 301;
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

/// The rate-limiting class of a message: application, command, and for
/// Credit-Control the request type (0 = not a CCR or type not found).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MsgClass {
    pub app_id: u32,
    pub command_code: u32,
    pub req_type: u8,
    /// Padding, zero. Two fields rather than `[u8; 3]`: zeroing an array is a `memset`
    /// call on the BPF target (see [`crate::words`]), on every request's class-slot key.
    pub _pad: u8,
    pub _pad2: u16,
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
            _pad: 0,
            _pad2: 0,
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

/// Size of the buffer that collects one scan item from several pieces: twice
/// [`MAX_ITEM_LEN`], so that "copy n ≤ MAX_ITEM_LEN bytes at offset ≤ MAX_ITEM_LEN" is
/// provably in bounds for the kernel's verifier.
pub const PART_BUF: usize = 2 * MAX_ITEM_LEN;

/// Where [`ScanCursor::advance`] reads the bytes of a piece from (packet memory in
/// the kernel, a slice in userspace).
pub trait Source {
    /// Copies `n` bytes (1 ≤ n ≤ [`MAX_ITEM_LEN`]) at offset `off` of the source to
    /// `dst[at..at + n]` (`at` ≤ [`MAX_ITEM_LEN`]). False if they are not there.
    fn copy(&self, off: usize, dst: &mut [u8; PART_BUF], at: usize, n: usize) -> bool;

    /// Feeds `scan` the item at offset `off` read in place, if this source can (the
    /// item is whole in it); `None` to have it copied instead.
    #[inline(always)]
    fn feed_in_place(&self, _scan: &mut MsgScan, _off: usize) -> Option<Result<(), WireError>> {
        None
    }
}

impl Source for &[u8] {
    #[inline(always)]
    fn feed_in_place(&self, scan: &mut MsgScan, off: usize) -> Option<Result<(), WireError>> {
        Some(scan.feed(self, off))
    }

    fn copy(&self, off: usize, dst: &mut [u8; PART_BUF], at: usize, n: usize) -> bool {
        match (
            self.get(off..off.saturating_add(n)),
            dst.get_mut(at..at.saturating_add(n)),
        ) {
            (Some(s), Some(d)) => {
                d.copy_from_slice(s);
                true
            }
            _ => false,
        }
    }
}

/// What [`ScanCursor::step`] and [`ScanCursor::advance`] got to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The message is classified.
    Done(Classified),
    /// One item was read (`step` only): step again.
    Read,
    /// The scan needs bytes beyond this piece.
    More,
    /// The bytes are not a valid message (or not where the cursor expected them).
    Invalid(WireError),
}

/// A [`MsgScan`] fed from pieces of a message (TCP segments, SCTP fragments): it keeps
/// the first bytes of an item that a piece's end cut off (`part`), so the next piece
/// completes it. Every item is copied into `part` before it is read: one code path,
/// a plain buffer the verifier bounds cheaply. A map value in the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanCursor {
    pub scan: MsgScan,
    /// Bytes of the next item held in `part`.
    pub part_len: u32,
    pub part: [u8; PART_BUF],
}

impl Default for ScanCursor {
    fn default() -> Self {
        ScanCursor::new()
    }
}

impl ScanCursor {
    /// A cursor at the first byte of a message.
    pub const fn new() -> ScanCursor {
        ScanCursor {
            scan: MsgScan::new(),
            part_len: 0,
            part: [0; PART_BUF],
        }
    }

    /// Back to the first byte of a (next) message. The part buffer's bytes are left as
    /// they are: `part_len` = 0 makes them meaningless.
    ///
    /// Field by field, each store volatile: LLVM merges a run of zero stores into a
    /// `memset` call, which on the BPF target moves one byte per iteration (~190
    /// instructions for these 36 bytes, twice per request in the fast path; see
    /// [`crate::words`]).
    #[inline(always)]
    pub fn reset(&mut self) {
        let s = &mut self.scan;
        // SAFETY: each pointer is a field of `self`, valid and aligned for its type.
        unsafe {
            write_volatile(&mut s.length, 0);
            write_volatile(&mut s.command_code, 0);
            write_volatile(&mut s.application_id, 0);
            write_volatile(&mut s.hop_by_hop, 0);
            write_volatile(&mut s.end_to_end, 0);
            write_volatile(&mut s.at, 0);
            write_volatile(&mut s.req_value, 0);
            write_volatile(&mut s.flags, 0);
            write_volatile(&mut s.phase, scan_phase::HEADER);
            write_volatile(&mut s.avps, 0);
            write_volatile(&mut s.outcome, outcome::NONE);
            write_volatile(&mut s.drmp, 0);
            write_volatile(&mut self.part_len, 0);
        }
    }

    /// Makes `self` a copy of `src` ([`crate::words::copy`]: `*self = *src` is a
    /// byte-by-byte `memmove` call on the BPF target).
    #[inline(always)]
    pub fn copy_from(&mut self, src: &ScanCursor) {
        crate::words::copy(self, src);
    }

    /// Reads at most one item from message bytes `start..end` (message offsets), the
    /// first of which is at offset `off` of `src`. The bytes before `start` must have
    /// been given to earlier calls (except those the scan skips); bytes the scan does
    /// not need are never read. No loop: the kernel drives it from `bpf_loop`.
    #[inline(always)]
    pub fn step<S: Source>(&mut self, src: &S, off: usize, start: u32, end: u32) -> Progress {
        let (at, len) = match self.scan.need() {
            Need::Item { at, len } => (at, len),
            Need::Done(c) => return Progress::Done(c),
            Need::Invalid(e) => return Progress::Invalid(e),
        };
        let have = self.part_len;
        if have >= len {
            return Progress::Invalid(WireError::Truncated);
        }
        // The first byte of the item still needed.
        let from = at + have;
        if from >= end {
            return Progress::More;
        }
        if from < start {
            // Not given before, and not in this piece.
            return Progress::Invalid(WireError::Truncated);
        }
        let want = len - have;
        let o = off + (from - start) as usize;
        if have == 0 && len <= end - from {
            // The whole item is in this piece: read it in place where the source can.
            match src.feed_in_place(&mut self.scan, o) {
                Some(Ok(())) => return Progress::Read,
                Some(Err(WireError::Truncated)) | None => {}
                Some(Err(e)) => return Progress::Invalid(e),
            }
        }
        let n = if want < end - from { want } else { end - from };
        if !src.copy(o, &mut self.part, have as usize, n as usize) {
            return Progress::Invalid(WireError::Truncated);
        }
        if have + n < len {
            self.part_len = have + n;
            return Progress::More;
        }
        self.part_len = 0;
        let Some(b) = self.part.get(..len as usize) else {
            return Progress::Invalid(WireError::Truncated);
        };
        match self.scan.feed(&b, 0) {
            Ok(()) => Progress::Read,
            Err(e) => Progress::Invalid(e),
        }
    }

    /// [`ScanCursor::step`] until the message is classified or the piece is used up.
    #[inline(always)]
    pub fn advance<S: Source>(&mut self, src: &S, off: usize, start: u32, end: u32) -> Scanned {
        // Bounded loop: one item per iteration, and a last look.
        let mut i = 0;
        while i <= MAX_SCAN_ITEMS {
            i += 1;
            match self.step(src, off, start, end) {
                Progress::Read => {}
                Progress::Done(c) => return Scanned::Done(c),
                Progress::More => return Scanned::More,
                Progress::Invalid(e) => return Scanned::Invalid(e),
            }
        }
        Scanned::More
    }
}

/// Where [`ScanCursor::advance`] left a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scanned {
    /// The message is classified.
    Done(Classified),
    /// The scan needs bytes beyond this piece.
    More,
    /// The bytes are not a valid message (or not where the cursor expected them).
    Invalid(WireError),
}

/// A classified message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    pub header: Header,
    pub class: MsgClass,
    /// How CC-Request-Type was looked for (only CCRs are scanned).
    pub req_type: Option<ReqTypeScan>,
    /// The DRMP priority + 1 the scan met (0: none), as [`MsgScan::drmp`].
    pub drmp: u8,
}

impl Classified {
    /// The request's DRMP priority (RFC 7944: 0 highest … 15 lowest), if it had one
    /// where the scan looked.
    pub const fn drmp(&self) -> Option<u8> {
        match self.drmp {
            1..=16 => Some(self.drmp - 1),
            _ => None,
        }
    }
}

/// Items a scan reads at most: the header, the Hop-by-Hop/End-to-End ids,
/// [`MAX_AVPS_SCANNED`] AVP headers, one DRMP value and one CC-Request-Type value.
pub const MAX_SCAN_ITEMS: usize = MAX_AVPS_SCANNED + 4;
/// An Enumerated AVP (CC-Request-Type, DRMP) without Vendor-Id: header and 4 bytes.
const AVP_VALUE_LEN: u32 = AVP_HEADER_LEN as u32 + 4;
/// `MsgScan::drmp` while the DRMP value is the next item.
const DRMP_PENDING: u8 = 0xff;
/// Longest item a scan reads at once (the first 12 header bytes).
pub const MAX_ITEM_LEN: usize = 12;

/// Where a [`MsgScan`] is (its `phase`).
pub mod scan_phase {
    /// Header bytes 0..12 (version, length, flags, command, application) next.
    pub const HEADER: u8 = 0;
    /// Header bytes 12..20 (Hop-by-Hop and End-to-End ids) next (requests only).
    pub const IDS: u8 = 1;
    /// The AVP header at `at` next (Credit-Control requests only).
    pub const AVP: u8 = 2;
    /// The value (4 bytes) at `at` of CC-Request-Type, or of DRMP when `drmp` is
    /// pending (then the next AVP header).
    pub const VALUE: u8 = 3;
    /// Classified.
    pub const DONE: u8 = 4;
}

/// How [`ReqTypeScan`] is stored in a [`MsgScan`] (`outcome`).
mod outcome {
    pub const NONE: u8 = 0;
    pub const FOUND: u8 = 1;
    pub const ABSENT: u8 = 2;
    pub const BEYOND: u8 = 3;
}

/// What a [`MsgScan`] needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Bytes `at..at + len` of the message (`len` ≤ [`MAX_ITEM_LEN`]), to be given to
    /// [`MsgScan::feed`].
    Item { at: u32, len: u32 },
    /// The message is classified.
    Done(Classified),
    /// The bytes are not a valid message.
    Invalid(WireError),
}

/// Classification of one Diameter message from its bytes in order, in as many pieces
/// as the transport cuts it into, with constant state: what the bytes seen so far
/// said, and where the next item the scan reads starts. The class is the same
/// whatever the cuts — [`classify`] is this scan over one buffer — so the fast path
/// (which sees segments) and the agent (which sees whole messages) agree on every
/// message. Values the scan skips (Session-Id, Origin-Host, ...) are never read.
///
/// Driving it: `need()` names the next item (message offset and length); the driver
/// reads those bytes (all of them, from wherever the transport put them) and hands them
/// to `feed()`, until `need()` says [`Need::Done`] or [`Need::Invalid`].
///
/// A map value in the kernel (`#[repr(C)]`, no padding holes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MsgScan {
    /// Message length from the header (0 until the header is read).
    pub length: u32,
    pub command_code: u32,
    pub application_id: u32,
    pub hop_by_hop: u32,
    pub end_to_end: u32,
    /// Message offset of the next item (AVP or CC-Request-Type value).
    pub at: u32,
    /// CC-Request-Type's value (when `outcome` is found).
    pub req_value: u32,
    pub flags: u8,
    /// One of [`scan_phase`].
    pub phase: u8,
    /// AVP headers read so far.
    pub avps: u8,
    /// How the search for CC-Request-Type ended (private encoding of [`ReqTypeScan`]).
    pub outcome: u8,
    /// The DRMP AVP's priority + 1, when one came before CC-Request-Type (RFC 8506
    /// §3.1 and TS 29.212 put it right after Session-Id); 0: none seen.
    pub drmp: u8,
    /// Padding, zero (two fields: a `[u8; 3]` is zeroed with a `memset` call on the BPF
    /// target, see [`crate::words`]).
    pub _pad: u8,
    pub _pad2: u16,
}

impl MsgScan {
    /// A scan of a message whose first byte is next.
    pub const fn new() -> MsgScan {
        MsgScan {
            length: 0,
            command_code: 0,
            application_id: 0,
            hop_by_hop: 0,
            end_to_end: 0,
            at: 0,
            req_value: 0,
            flags: 0,
            phase: scan_phase::HEADER,
            avps: 0,
            outcome: outcome::NONE,
            drmp: 0,
            _pad: 0,
            _pad2: 0,
        }
    }

    /// The request's DRMP priority (RFC 7944: 0 highest … 15 lowest), if the scan met
    /// a DRMP AVP.
    #[inline(always)]
    pub const fn drmp(&self) -> Option<u8> {
        match self.drmp {
            1..=16 => Some(self.drmp - 1),
            _ => None,
        }
    }

    /// The header, once read.
    #[inline(always)]
    pub const fn header(&self) -> Header {
        Header {
            version: VERSION,
            length: self.length,
            flags: self.flags,
            command_code: self.command_code,
            application_id: self.application_id,
        }
    }

    #[inline(always)]
    const fn scans_avps(&self) -> bool {
        self.flags & flags::R != 0 && self.command_code == cmd::CREDIT_CONTROL
    }

    /// How the search for CC-Request-Type ended, were it ended `how`.
    #[inline(always)]
    fn req_type_scan_as(&self, how: u8) -> Option<ReqTypeScan> {
        if !self.scans_avps() {
            return None;
        }
        Some(match how {
            outcome::FOUND => ReqTypeScan::Found(self.req_value),
            outcome::ABSENT => ReqTypeScan::Absent,
            outcome::BEYOND => ReqTypeScan::BeyondBound,
            _ => ReqTypeScan::Truncated,
        })
    }

    /// The classification as far as the scan got (CC-Request-Type "truncated" while
    /// it is still to come).
    #[inline(always)]
    pub fn classified(&self) -> Classified {
        self.classified_as(self.outcome)
    }

    /// [`MsgScan::classified`] as if the search had ended `how` (no copy of the scan: a
    /// struct copy is a byte-by-byte `memmove` call on the BPF target).
    #[inline(always)]
    fn classified_as(&self, how: u8) -> Classified {
        let req_type = self.req_type_scan_as(how);
        let rt = match req_type {
            Some(s) => s.class_byte(),
            None => 0,
        };
        Classified {
            header: self.header(),
            class: MsgClass::new(self.application_id, self.command_code, rt),
            req_type,
            drmp: self.drmp,
        }
    }

    /// The next item to read, or the end of the scan.
    #[inline(always)]
    pub fn need(&self) -> Need {
        match self.phase {
            scan_phase::HEADER => Need::Item { at: 0, len: 12 },
            scan_phase::IDS => Need::Item { at: 12, len: 8 },
            scan_phase::AVP => {
                // RFC 6733 §4.1: AVPs fill the message exactly.
                if self.at >= self.length {
                    Need::Done(self.finish(outcome::ABSENT))
                } else if self.avps as usize >= MAX_AVPS_SCANNED {
                    Need::Done(self.finish(outcome::BEYOND))
                } else if self.at + AVP_HEADER_LEN as u32 > self.length {
                    Need::Invalid(WireError::AvpLength)
                } else {
                    Need::Item {
                        at: self.at,
                        len: AVP_HEADER_LEN as u32,
                    }
                }
            }
            scan_phase::VALUE => Need::Item {
                at: self.at,
                len: 4,
            },
            _ => Need::Done(self.classified()),
        }
    }

    #[inline(always)]
    fn finish(&self, how: u8) -> Classified {
        self.classified_as(how)
    }

    /// Settles a [`Need::Done`] that needed no bytes (end of the AVPs, or the bound):
    /// afterwards `phase` is [`scan_phase::DONE`].
    #[inline(always)]
    pub fn settle(&mut self) {
        if self.phase == scan_phase::AVP {
            if self.at >= self.length {
                self.outcome = outcome::ABSENT;
                self.phase = scan_phase::DONE;
            } else if self.avps as usize >= MAX_AVPS_SCANNED {
                self.outcome = outcome::BEYOND;
                self.phase = scan_phase::DONE;
            }
        }
    }

    /// Reads the item [`MsgScan::need`] asked for, whose first byte is at `off` in `b`.
    /// `Err(Truncated)` if `b` does not hold all of it (nothing changes then); any other
    /// error means the message is invalid (RFC 6733 §3, §4.1).
    #[inline(always)]
    pub fn feed<B: Bytes>(&mut self, b: &B, off: usize) -> Result<(), WireError> {
        match self.phase {
            scan_phase::HEADER => {
                let h = parse_header(b, off)?;
                self.length = h.length;
                self.flags = h.flags;
                self.command_code = h.command_code;
                self.application_id = h.application_id;
                // Answers are never limited: their ids and AVPs are not needed.
                self.phase = if h.is_request() {
                    scan_phase::IDS
                } else {
                    scan_phase::DONE
                };
            }
            scan_phase::IDS => {
                let hbh = b.u32_at(off).ok_or(WireError::Truncated)?;
                let e2e = b.u32_at(off + 4).ok_or(WireError::Truncated)?;
                self.hop_by_hop = hbh;
                self.end_to_end = e2e;
                if self.scans_avps() {
                    self.at = HEADER_LEN as u32;
                    self.phase = scan_phase::AVP;
                } else {
                    self.phase = scan_phase::DONE;
                }
            }
            scan_phase::AVP => {
                let code = b.u32_at(off).ok_or(WireError::Truncated)?;
                let fl_len = b.u32_at(off + 4).ok_or(WireError::Truncated)?;
                let avp_len = fl_len & MAX_LEN_FIELD;
                let vendor = (fl_len >> 24) as u8 & avp_flags::V != 0;
                let hdr = if vendor {
                    AVP_HEADER_LEN_VENDOR
                } else {
                    AVP_HEADER_LEN
                } as u32;
                // Too short for its own header, or running past the message (§4.1).
                if avp_len < hdr || avp_len > self.length - self.at {
                    return Err(WireError::AvpLength);
                }
                self.avps += 1;
                if code == avp::CC_REQUEST_TYPE && !vendor {
                    // Enumerated: exactly 4 bytes of data (RFC 6733 §4.2, Integer32).
                    if avp_len != AVP_VALUE_LEN {
                        return Err(WireError::AvpLength);
                    }
                    self.at += AVP_HEADER_LEN as u32;
                    self.phase = scan_phase::VALUE;
                } else if code == avp::DRMP && !vendor && avp_len == AVP_VALUE_LEN {
                    // Enumerated (RFC 7944 §9.1); a malformed one is skipped, not read.
                    self.drmp = DRMP_PENDING;
                    self.at += AVP_HEADER_LEN as u32;
                    self.phase = scan_phase::VALUE;
                } else {
                    // Padding to a 32-bit boundary is not counted in the length (§4.1).
                    self.at += (avp_len + 3) & !3;
                }
            }
            scan_phase::VALUE => {
                let v = b.u32_at(off).ok_or(WireError::Truncated)?;
                if self.drmp == DRMP_PENDING {
                    // DRMP's value; values past PRIORITY_15 are not defined: taken as
                    // the lowest. Then the next AVP.
                    self.drmp = if v > 15 { 16 } else { v as u8 + 1 };
                    self.at += 4;
                    self.phase = scan_phase::AVP;
                } else {
                    self.req_value = v;
                    self.outcome = outcome::FOUND;
                    self.phase = scan_phase::DONE;
                }
            }
            _ => {}
        }
        self.settle();
        Ok(())
    }

    /// True once the scan has classified the message.
    #[inline(always)]
    pub const fn is_done(&self) -> bool {
        self.phase == scan_phase::DONE
    }

    /// What the bytes seen so far tell, if they end here: nothing without the first 12
    /// header bytes; else the header, and for a Credit-Control request "CC-Request-Type
    /// truncated" until it is found (class byte 0).
    #[inline(always)]
    pub fn so_far(&self) -> Result<Classified, WireError> {
        if self.phase == scan_phase::HEADER {
            Err(WireError::Truncated)
        } else {
            Ok(self.classified())
        }
    }
}

/// Classifies the message at `off` of `b`: [`MsgScan`] over one buffer. Answers and
/// other commands are classified from the header alone; for a Credit-Control request
/// the AVPs are walked (at most [`MAX_AVPS_SCANNED`]) for CC-Request-Type (416, no
/// vendor). Bytes that end before the scan does give the header with CC-Request-Type
/// [`ReqTypeScan::Truncated`] (class byte 0), or `Err(Truncated)` without 12 header
/// bytes.
#[inline(always)]
pub fn classify<B: Bytes>(b: &B, off: usize) -> Result<Classified, WireError> {
    let mut s = MsgScan::new();
    let avail = b.len();
    // Bounded loop: one item per iteration.
    let mut i = 0;
    while i < MAX_SCAN_ITEMS {
        i += 1;
        match s.need() {
            Need::Item { at, len } => {
                let start = off + at as usize;
                if start + len as usize > avail {
                    return s.so_far();
                }
                s.feed(b, start)?;
            }
            Need::Done(c) => return Ok(c),
            Need::Invalid(e) => return Err(e),
        }
    }
    Ok(s.classified())
}
