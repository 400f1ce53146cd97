//! Encoding and decoding of whole messages, and the TCP stream [`Framer`].
//!
//! Header validation is the fast path's own (`dra_common::wire::parse_header`), so the
//! kernel and the agent agree on what a Diameter header is.

use dra_common::wire::{self, HEADER_LEN, MAX_LEN_FIELD, WireError};

use super::avp::{encode_avps, parse_avps};
use super::error::{DecodeError, EncodeError, FramingError};
use super::message::Message;

/// Default largest message a [`Framer`] accepts: 64 KiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 * 1024;

/// Reads the header at the start of `buf` through the shared scanner. Reserved bits and
/// an E bit on a request are *not* errors here: such a message is still framed, and
/// [`super::validate::validate_request`] answers it with 3008.
fn read_header(buf: &[u8]) -> Result<wire::Header, WireError> {
    match wire::parse_header(&buf, 0) {
        Err(WireError::InvalidHeaderBits) => {
            // parse_header checks version and length before the flags, so both are
            // sound here; read the fields it did not return.
            let w = |o: usize| u32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
            Ok(wire::Header {
                version: buf[0],
                length: w(0) & MAX_LEN_FIELD,
                flags: buf[4],
                command_code: w(4) & MAX_LEN_FIELD,
                application_id: w(8),
            })
        }
        other => other,
    }
}

/// Decodes exactly one message: `buf.len()` must equal the header's Message Length.
///
/// Checks version, length and AVP framing (RFC 6733 §3, §4.1). Header flags are taken as
/// they are (see [`super::validate::validate_request`]); AVP data is kept raw.
pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::Truncated { len: buf.len() });
    }
    let h = read_header(buf).map_err(|e| match e {
        WireError::BadVersion => DecodeError::BadVersion { version: buf[0] },
        // Truncated cannot happen with 20 bytes; report it as a bad length.
        _ => DecodeError::BadLength {
            length: u32::from_be_bytes([0, buf[1], buf[2], buf[3]]),
        },
    })?;
    if h.length as usize != buf.len() {
        return Err(DecodeError::LengthMismatch {
            header_length: h.length,
            buf_len: buf.len(),
        });
    }
    let id = |o: usize| u32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    let mut msg = Message {
        flags: h.flags,
        command_code: h.command_code,
        application_id: h.application_id,
        hop_by_hop: id(12),
        end_to_end: id(16),
        avps: Vec::new(),
    };
    match parse_avps(&buf[HEADER_LEN..]) {
        Ok(avps) => {
            msg.avps = avps;
            Ok(msg)
        }
        Err(e) => {
            msg.avps = e.parsed;
            Err(DecodeError::InvalidAvpLength {
                partial: Box::new(msg),
                avp: e.avp,
                offset: HEADER_LEN + e.offset,
            })
        }
    }
}

/// Encodes `msg` into `out` (appended): header with the 24-bit length, each AVP padded
/// to 32 bits (RFC 6733 §3, §4.1).
pub fn encode_into(msg: &Message, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    if msg.command_code > MAX_LEN_FIELD {
        return Err(EncodeError::CommandCodeTooLarge {
            command_code: msg.command_code,
        });
    }
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    if let Err(e) = encode_avps(&msg.avps, out) {
        out.truncate(start);
        return Err(e);
    }
    let length = out.len() - start;
    if length > MAX_LEN_FIELD as usize {
        out.truncate(start);
        return Err(EncodeError::MessageTooLong { length });
    }
    let hdr = &mut out[start..start + HEADER_LEN];
    hdr[0..4].copy_from_slice(&(((wire::VERSION as u32) << 24) | length as u32).to_be_bytes());
    hdr[4..8].copy_from_slice(&(((msg.flags as u32) << 24) | msg.command_code).to_be_bytes());
    hdr[8..12].copy_from_slice(&msg.application_id.to_be_bytes());
    hdr[12..16].copy_from_slice(&msg.hop_by_hop.to_be_bytes());
    hdr[16..20].copy_from_slice(&msg.end_to_end.to_be_bytes());
    Ok(())
}

/// Encodes `msg`, failing when a length or the command code does not fit 24 bits.
pub fn try_encode(msg: &Message) -> Result<Vec<u8>, EncodeError> {
    let mut out =
        Vec::with_capacity(HEADER_LEN + msg.avps.iter().map(|a| a.padded_length()).sum::<usize>());
    encode_into(msg, &mut out)?;
    Ok(out)
}

/// Encodes `msg`.
///
/// # Panics
/// When the message is over 16 MiB, an AVP does not fit its 24-bit length, or the command
/// code does not fit 24 bits — impossible for decoded messages and anything the agent
/// builds; use [`try_encode`] for untrusted models.
pub fn encode(msg: &Message) -> Vec<u8> {
    match try_encode(msg) {
        Ok(v) => v,
        Err(e) => panic!("cannot encode Diameter message: {e}"),
    }
}

/// Cuts a TCP byte stream into Diameter messages (RFC 6733 §3: the Message Length).
///
/// Sans-IO: [`Framer::push`] what the socket gave, then call [`Framer::next_message`]
/// until it returns `Ok(None)`. A header that is unusable (bad version or length) or
/// announces a message over the size limit is a [`FramingError`]: the stream cannot be
/// resynchronised, the connection must be closed, and the framer keeps returning the
/// same error. The limit is checked as soon as the header is in, so buffered data stays
/// below the limit plus one push.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    /// Start of unconsumed data in `buf`.
    start: usize,
    max_message_size: usize,
    failed: Option<FramingError>,
    /// The first (up to 20) bytes of the message that could not be framed.
    failed_head: Vec<u8>,
}

impl Default for Framer {
    fn default() -> Self {
        Framer::new()
    }
}

impl Framer {
    /// A framer accepting messages up to [`DEFAULT_MAX_MESSAGE_SIZE`].
    pub fn new() -> Framer {
        Framer::with_max_message_size(DEFAULT_MAX_MESSAGE_SIZE)
    }

    /// A framer accepting messages up to `max` bytes (header included).
    pub fn with_max_message_size(max: usize) -> Framer {
        Framer {
            buf: Vec::new(),
            start: 0,
            max_message_size: max,
            failed: None,
            failed_head: Vec::new(),
        }
    }

    /// The configured limit.
    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// Bytes received and not yet returned as a message.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends bytes read from the connection. Ignored after a framing error.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message (its exact bytes), `Ok(None)` when more bytes are
    /// needed, or the framing error that ends the connection.
    pub fn next_message(&mut self) -> Result<Option<Vec<u8>>, FramingError> {
        Ok(self.next_frame()?.map(|f| f.to_vec()))
    }

    /// As [`Framer::next_message`], the message's bytes in the framer's buffer (valid
    /// until the next call): the caller may mark it in place, and copies only what it
    /// keeps.
    pub fn next_frame(&mut self) -> Result<Option<&mut [u8]>, FramingError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let avail = &self.buf[self.start..];
        // parse_header reads version, length, flags, command and application: 12 bytes.
        let h = match read_header(avail) {
            Ok(h) => h,
            Err(WireError::Truncated) => {
                self.compact();
                return Ok(None);
            }
            Err(e) => {
                let err = match e {
                    WireError::BadVersion => FramingError::BadVersion { version: avail[0] },
                    _ => FramingError::BadLength {
                        length: u32::from_be_bytes([0, avail[1], avail[2], avail[3]]),
                    },
                };
                return Err(self.fail(err));
            }
        };
        let len = h.length as usize;
        if len > self.max_message_size {
            return Err(self.fail(FramingError::Oversized {
                length: h.length,
                max: self.max_message_size,
            }));
        }
        if avail.len() < len {
            self.compact();
            return Ok(None);
        }
        // The bytes stay until the next push drops what was taken.
        let at = self.start;
        self.start += len;
        Ok(Some(&mut self.buf[at..at + len]))
    }

    /// After a [`FramingError`]: the first bytes (up to the 20 of a header) of the
    /// message that could not be framed — enough to answer it (RFC 6733 §7.1.5: 5011
    /// for a bad version, 5015 for a bad length), zero-padded by the caller if short.
    pub fn failed_head(&self) -> &[u8] {
        &self.failed_head
    }

    fn fail(&mut self, e: FramingError) -> FramingError {
        let avail = &self.buf[self.start..];
        self.failed_head = avail[..avail.len().min(HEADER_LEN)].to_vec();
        self.buf = Vec::new();
        self.start = 0;
        self.failed = Some(e.clone());
        e
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}
