//! AVPs (RFC 6733 §4): raw data kept as received, typed views decoded on demand.
//!
//! An [`Avp`] holds its data bytes exactly as they came off the wire (without the
//! padding), so a relay forwards AVPs it does not understand byte for byte. Typed
//! accessors (`as_u32`, `as_utf8`, `as_address`, `as_grouped`, …) check the size and
//! decode when asked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dra_common::wire::{AVP_HEADER_LEN, AVP_HEADER_LEN_VENDOR, MAX_LEN_FIELD, avp_flags};

use super::error::{AvpDataError, EncodeError, OffendingAvp};

/// IANA address family numbers used by the Address type (RFC 6733 §4.3.1).
pub mod address_family {
    /// IP version 4.
    pub const IPV4: u16 = 1;
    /// IP version 6.
    pub const IPV6: u16 = 2;
}

/// One AVP. `flags` carries V/M/P as on the wire; `vendor_id` is the source of truth for
/// the V bit when encoding (the builders keep both in step, and decoding sets both).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Avp {
    /// AVP code.
    pub code: u32,
    /// AVP flags (`dra_common::wire::avp_flags`: V 0x80, M 0x40, P 0x20).
    pub flags: u8,
    /// Vendor-Id, present exactly when the V flag is set.
    pub vendor_id: Option<u32>,
    /// The data, unpadded, exactly as received or built.
    pub data: Vec<u8>,
}

impl Avp {
    /// An AVP with raw data (OctetString or any type already encoded), no flags.
    pub fn octets(code: u32, data: impl Into<Vec<u8>>) -> Avp {
        Avp {
            code,
            flags: 0,
            vendor_id: None,
            data: data.into(),
        }
    }

    /// An Unsigned32 AVP (RFC 6733 §4.2).
    pub fn u32(code: u32, v: u32) -> Avp {
        Avp::octets(code, v.to_be_bytes())
    }

    /// An Unsigned64 AVP (RFC 6733 §4.2).
    pub fn u64(code: u32, v: u64) -> Avp {
        Avp::octets(code, v.to_be_bytes())
    }

    /// An Integer32 AVP (RFC 6733 §4.2).
    pub fn i32(code: u32, v: i32) -> Avp {
        Avp::octets(code, v.to_be_bytes())
    }

    /// An Integer64 AVP (RFC 6733 §4.2).
    pub fn i64(code: u32, v: i64) -> Avp {
        Avp::octets(code, v.to_be_bytes())
    }

    /// An Enumerated AVP: an Integer32 on the wire (RFC 6733 §4.3.1).
    pub fn enumerated(code: u32, v: i32) -> Avp {
        Avp::i32(code, v)
    }

    /// A UTF8String / DiameterIdentity / DiameterURI AVP (RFC 6733 §4.3.1).
    pub fn utf8(code: u32, s: &str) -> Avp {
        Avp::octets(code, s.as_bytes())
    }

    /// An Address AVP: 2-byte address family (1 IPv4, 2 IPv6) then the address
    /// (RFC 6733 §4.3.1).
    pub fn address(code: u32, addr: IpAddr) -> Avp {
        let mut data = Vec::with_capacity(18);
        match addr {
            IpAddr::V4(a) => {
                data.extend_from_slice(&address_family::IPV4.to_be_bytes());
                data.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                data.extend_from_slice(&address_family::IPV6.to_be_bytes());
                data.extend_from_slice(&a.octets());
            }
        }
        Avp::octets(code, data)
    }

    /// A Grouped AVP whose data is the encoding of `children`, each padded to 32 bits
    /// (RFC 6733 §4.4).
    ///
    /// # Panics
    /// When a child is longer than the 24-bit AVP Length field allows (16 MiB).
    pub fn grouped(code: u32, children: impl IntoIterator<Item = Avp>) -> Avp {
        let mut data = Vec::new();
        for c in children {
            if let Err(e) = c.encode_into(&mut data) {
                panic!("cannot build grouped AVP {code}: {e}");
            }
        }
        Avp::octets(code, data)
    }

    /// Sets the M (mandatory) flag.
    #[must_use]
    pub fn mandatory(mut self) -> Avp {
        self.flags |= avp_flags::M;
        self
    }

    /// Makes the AVP vendor-specific: sets the V flag and the Vendor-Id.
    #[must_use]
    pub fn vendor(mut self, vendor_id: u32) -> Avp {
        self.flags |= avp_flags::V;
        self.vendor_id = Some(vendor_id);
        self
    }

    /// The M flag is set.
    pub fn is_mandatory(&self) -> bool {
        self.flags & avp_flags::M != 0
    }

    /// This AVP matches `code` and `vendor_id` (`None` = IETF, no V flag).
    pub fn is(&self, code: u32, vendor_id: Option<u32>) -> bool {
        self.code == code && self.vendor_id == vendor_id
    }

    /// Header length on the wire: 12 with a Vendor-Id, else 8 (RFC 6733 §4.1).
    pub fn header_len(&self) -> usize {
        if self.vendor_id.is_some() {
            AVP_HEADER_LEN_VENDOR
        } else {
            AVP_HEADER_LEN
        }
    }

    /// The AVP Length field: header plus data, without padding (RFC 6733 §4.1).
    pub fn length(&self) -> usize {
        self.header_len() + self.data.len()
    }

    /// Bytes taken on the wire, padding to a 32-bit boundary included.
    pub fn padded_length(&self) -> usize {
        pad4(self.length())
    }

    /// Appends the wire form (header, data, zero padding) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let length = self.length();
        if length > MAX_LEN_FIELD as usize {
            return Err(EncodeError::AvpTooLong {
                code: self.code,
                length,
            });
        }
        let flags = match self.vendor_id {
            Some(_) => self.flags | avp_flags::V,
            None => self.flags & !avp_flags::V,
        };
        out.extend_from_slice(&self.code.to_be_bytes());
        out.extend_from_slice(&(((flags as u32) << 24) | length as u32).to_be_bytes());
        if let Some(v) = self.vendor_id {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.data);
        // RFC 6733 §4.1: padding to a 32-bit boundary, not counted in AVP Length.
        out.resize(out.len() + (pad4(length) - length), 0);
        Ok(())
    }

    fn fixed<const N: usize>(&self) -> Result<[u8; N], AvpDataError> {
        self.data
            .as_slice()
            .try_into()
            .map_err(|_| AvpDataError::WrongLength {
                code: self.code,
                expected: N,
                actual: self.data.len(),
            })
    }

    /// Unsigned32 (also Enumerated read unsigned).
    pub fn as_u32(&self) -> Result<u32, AvpDataError> {
        self.fixed::<4>().map(u32::from_be_bytes)
    }

    /// Unsigned64.
    pub fn as_u64(&self) -> Result<u64, AvpDataError> {
        self.fixed::<8>().map(u64::from_be_bytes)
    }

    /// Integer32 / Enumerated.
    pub fn as_i32(&self) -> Result<i32, AvpDataError> {
        self.fixed::<4>().map(i32::from_be_bytes)
    }

    /// Integer64.
    pub fn as_i64(&self) -> Result<i64, AvpDataError> {
        self.fixed::<8>().map(i64::from_be_bytes)
    }

    /// UTF8String / DiameterIdentity / DiameterURI.
    pub fn as_utf8(&self) -> Result<&str, AvpDataError> {
        std::str::from_utf8(&self.data).map_err(|source| AvpDataError::InvalidUtf8 {
            code: self.code,
            source,
        })
    }

    /// OctetString: the raw data.
    pub fn as_octets(&self) -> &[u8] {
        &self.data
    }

    /// Address with family IPv4 (1) or IPv6 (2) (RFC 6733 §4.3.1).
    pub fn as_address(&self) -> Result<IpAddr, AvpDataError> {
        let bad = |family| AvpDataError::BadAddress {
            code: self.code,
            family,
            len: self.data.len().saturating_sub(2),
        };
        let (fam, addr) = match self.data.split_first_chunk::<2>() {
            Some((f, rest)) => (u16::from_be_bytes(*f), rest),
            None => return Err(bad(0)),
        };
        match fam {
            address_family::IPV4 => <[u8; 4]>::try_from(addr)
                .map(|a| IpAddr::V4(Ipv4Addr::from(a)))
                .map_err(|_| bad(fam)),
            address_family::IPV6 => <[u8; 16]>::try_from(addr)
                .map(|a| IpAddr::V6(Ipv6Addr::from(a)))
                .map_err(|_| bad(fam)),
            _ => Err(bad(fam)),
        }
    }

    /// The inner AVPs of a Grouped AVP (RFC 6733 §4.4).
    pub fn as_grouped(&self) -> Result<Vec<Avp>, AvpDataError> {
        parse_avps(&self.data).map_err(|e| AvpDataError::BadGrouped {
            code: self.code,
            inner: e.avp,
            offset: e.offset,
        })
    }

    /// First inner AVP with this code and vendor, for Grouped AVPs.
    pub fn child(&self, code: u32, vendor_id: Option<u32>) -> Result<Option<Avp>, AvpDataError> {
        Ok(self
            .as_grouped()?
            .into_iter()
            .find(|a| a.is(code, vendor_id)))
    }
}

/// `n` rounded up to a multiple of 4.
pub(crate) const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// A sequence of AVPs stopped at a malformed one.
#[derive(Debug)]
pub(crate) struct AvpListError {
    /// AVPs decoded before the bad one.
    pub parsed: Vec<Avp>,
    /// The bad AVP's header, zero-padded where incomplete.
    pub avp: OffendingAvp,
    /// Its offset in the input.
    pub offset: usize,
}

/// Decodes a sequence of AVPs filling `buf` (message body or Grouped data).
///
/// RFC 6733 §4.1: an AVP Length below the header size or running past the end is an
/// error. The padding of the last AVP may be missing in Grouped data (some encoders omit
/// it); padding bytes are not checked for zero.
pub(crate) fn parse_avps(buf: &[u8]) -> Result<Vec<Avp>, AvpListError> {
    let mut avps = Vec::new();
    let mut off = 0;
    while off < buf.len() {
        match parse_one(&buf[off..]) {
            Ok((avp, consumed)) => {
                avps.push(avp);
                off += consumed;
            }
            Err(avp) => {
                return Err(AvpListError {
                    parsed: avps,
                    avp,
                    offset: off,
                });
            }
        }
    }
    Ok(avps)
}

/// An AVP read in place: its data borrowed from the buffer it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AvpRef<'a> {
    pub code: u32,
    pub flags: u8,
    pub vendor_id: Option<u32>,
    pub data: &'a [u8],
}

impl AvpRef<'_> {
    /// An owned copy.
    pub(crate) fn to_avp(self) -> Avp {
        Avp {
            code: self.code,
            flags: self.flags,
            vendor_id: self.vendor_id,
            data: self.data.to_vec(),
        }
    }
}

impl Avp {
    /// This AVP read in place (no copy).
    pub(crate) fn as_ref(&self) -> AvpRef<'_> {
        AvpRef {
            code: self.code,
            flags: self.flags,
            vendor_id: self.vendor_id,
            data: &self.data,
        }
    }
}

/// Decodes the AVP at the start of `b`; returns it and the bytes it takes (padding
/// included, capped at `b.len()`).
fn parse_one(b: &[u8]) -> Result<(Avp, usize), OffendingAvp> {
    parse_ref(b).map(|(a, n)| (a.to_avp(), n))
}

/// [`parse_one`] without copying the data.
pub(crate) fn parse_ref(b: &[u8]) -> Result<(AvpRef<'_>, usize), OffendingAvp> {
    // Zero-pad an incomplete header to read what there is (RFC 6733 §7.1.5).
    let mut hdr = [0u8; AVP_HEADER_LEN_VENDOR];
    let n = b.len().min(AVP_HEADER_LEN_VENDOR);
    hdr[..n].copy_from_slice(&b[..n]);
    let code = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let flags = hdr[4];
    let length = u32::from_be_bytes([0, hdr[5], hdr[6], hdr[7]]);
    let vendor = flags & avp_flags::V != 0;
    let vendor_id = vendor.then(|| u32::from_be_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]));
    let hlen = if vendor {
        AVP_HEADER_LEN_VENDOR
    } else {
        AVP_HEADER_LEN
    };
    let len = length as usize;
    if b.len() < hlen || len < hlen || len > b.len() {
        return Err(OffendingAvp {
            code,
            flags,
            vendor_id,
            length: if b.len() < AVP_HEADER_LEN { 0 } else { length },
        });
    }
    let avp = AvpRef {
        code,
        flags,
        vendor_id,
        data: &b[hlen..len],
    };
    Ok((avp, pad4(len).min(b.len())))
}

/// Encodes a list of AVPs, each padded.
pub(crate) fn encode_avps(avps: &[Avp], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    avps.iter().try_for_each(|a| a.encode_into(out))
}
