//! The wire scanner, run in userspace on exactly the code the XDP program runs.

use dra_common::wire::{
    self, Bytes, MAX_AVPS_SCANNED, MsgClass, MsgScan, Need, ReqTypeScan, ScanCursor, Scanned,
    WireError, app, avp, avp_flags, cc_request_type, cmd, flags, parse_header,
};
use proptest::prelude::*;

/// A test encoder, independent of the scanner: builds AVPs and messages byte by byte.
#[derive(Clone, Debug)]
struct TAvp {
    code: u32,
    vendor: Option<u32>,
    data: Vec<u8>,
}

impl TAvp {
    fn u32(code: u32, v: u32) -> TAvp {
        TAvp {
            code,
            vendor: None,
            data: v.to_be_bytes().to_vec(),
        }
    }
    fn bytes(code: u32, data: &[u8]) -> TAvp {
        TAvp {
            code,
            vendor: None,
            data: data.to_vec(),
        }
    }
    fn vendor(code: u32, vendor: u32, data: &[u8]) -> TAvp {
        TAvp {
            code,
            vendor: Some(vendor),
            data: data.to_vec(),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        let hdr = if self.vendor.is_some() { 12 } else { 8 };
        let len = hdr + self.data.len();
        out.extend_from_slice(&self.code.to_be_bytes());
        let fl: u8 = if self.vendor.is_some() {
            avp_flags::V | avp_flags::M
        } else {
            avp_flags::M
        };
        out.push(fl);
        out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
        if let Some(v) = self.vendor {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.data);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    }
}

fn message(fl: u8, command: u32, app_id: u32, avps: &[TAvp]) -> Vec<u8> {
    let mut body = Vec::new();
    for a in avps {
        a.encode(&mut body);
    }
    let len = 20 + body.len();
    let mut m = vec![1u8];
    m.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    m.push(fl);
    m.extend_from_slice(&command.to_be_bytes()[1..]);
    m.extend_from_slice(&app_id.to_be_bytes());
    m.extend_from_slice(&0x1111_2222u32.to_be_bytes());
    m.extend_from_slice(&0x3333_4444u32.to_be_bytes());
    m.extend_from_slice(&body);
    m
}

fn ccr(app_id: u32, req_type: u32, before: &[TAvp]) -> Vec<u8> {
    let mut avps = vec![TAvp::bytes(avp::SESSION_ID, b"pgw1.lab.example;1;2")];
    avps.extend_from_slice(before);
    avps.push(TAvp::bytes(avp::ORIGIN_HOST, b"pgw1.lab.example"));
    avps.push(TAvp::u32(avp::CC_REQUEST_TYPE, req_type));
    avps.push(TAvp::u32(avp::CC_REQUEST_NUMBER, 0));
    message(flags::R | flags::P, cmd::CREDIT_CONTROL, app_id, &avps)
}

fn classify(m: &[u8]) -> Result<wire::Classified, WireError> {
    wire::classify(&m, 0)
}

#[test]
fn gx_classes() {
    for rt in 1..=4u8 {
        let m = ccr(app::GX, rt as u32, &[]);
        let c = classify(&m).unwrap();
        assert_eq!(c.class, MsgClass::gx_ccr(rt));
        assert_eq!(c.req_type, Some(ReqTypeScan::Found(rt as u32)));
        assert!(c.header.is_request());
        assert_eq!(c.header.length as usize, m.len());
    }
}

/// The class and the CC-Request-Type scan of requests other than a Gx CCR-I/U/T/E:
/// (case, message, class, scan).
#[test]
fn class_and_request_type_of_other_requests() {
    let update = cc_request_type::UPDATE;
    let dwr_avps = [TAvp::bytes(avp::ORIGIN_HOST, b"x")];
    let no_type_avps = [TAvp::bytes(avp::SESSION_ID, b"s")];
    let cases = [
        (
            "Gy CCR-U",
            ccr(app::GY, update as u32, &[]),
            MsgClass::gy_ccr(update),
            Some(ReqTypeScan::Found(update as u32)),
        ),
        (
            "a DWR: not a CCR, no request type",
            message(flags::R, cmd::DEVICE_WATCHDOG, app::COMMON, &dwr_avps),
            MsgClass::new(0, cmd::DEVICE_WATCHDOG, 0),
            None,
        ),
        (
            "a CCR without CC-Request-Type",
            message(flags::R, cmd::CREDIT_CONTROL, app::GX, &no_type_avps),
            MsgClass::gx_ccr(0),
            Some(ReqTypeScan::Absent),
        ),
        (
            "CC-Request-Type 9: found, but not a class",
            ccr(app::GX, 9, &[]),
            MsgClass::gx_ccr(0),
            Some(ReqTypeScan::Found(9)),
        ),
    ];
    for (case, m, class, scan) in cases {
        let c = classify(&m).unwrap();
        assert_eq!((c.class, c.req_type), (class, scan), "{case}");
    }
}

#[test]
fn answer_is_not_scanned() {
    let mut m = ccr(app::GX, 1, &[]);
    m[4] = flags::P; // CCA
    let c = classify(&m).unwrap();
    assert!(!c.header.is_request());
    assert_eq!(c.req_type, None);
    assert_eq!(c.class, MsgClass::new(app::GX, cmd::CREDIT_CONTROL, 0));
}

#[test]
fn request_type_after_vendor_specific_avp() {
    // A 3GPP vendor AVP (12-byte header, odd data length → padding) before AVP 416.
    let m = ccr(
        app::GX,
        3,
        &[
            TAvp::vendor(1027, 10415, &[0, 0, 0, 5, 1]),
            TAvp::vendor(416, 10415, &[0, 0, 0, 1]),
        ],
    );
    let c = classify(&m).unwrap();
    // The vendor AVP with code 416 is not CC-Request-Type; the real one says 3.
    assert_eq!(c.class, MsgClass::gx_ccr(3));
}

#[test]
fn request_type_at_the_bound_is_found_and_beyond_is_not() {
    // AVP 416 is the (MAX_AVPS_SCANNED)th AVP: found.
    let fillers = |n: usize| {
        (0..n)
            .map(|i| TAvp::bytes(1000 + i as u32, b"abc"))
            .collect::<Vec<_>>()
    };
    let mut avps = fillers(MAX_AVPS_SCANNED - 1);
    avps.push(TAvp::u32(avp::CC_REQUEST_TYPE, 1));
    let m = message(flags::R, cmd::CREDIT_CONTROL, app::GX, &avps);
    assert_eq!(classify(&m).unwrap().class, MsgClass::gx_ccr(1));

    // One more filler: AVP 416 is beyond the bound → "not found", class byte 0.
    let mut avps = fillers(MAX_AVPS_SCANNED);
    avps.push(TAvp::u32(avp::CC_REQUEST_TYPE, 1));
    let m = message(flags::R, cmd::CREDIT_CONTROL, app::GX, &avps);
    let c = classify(&m).unwrap();
    assert_eq!(c.req_type, Some(ReqTypeScan::BeyondBound));
    assert_eq!(c.class, MsgClass::gx_ccr(0));
}

#[test]
fn header_length_fields() {
    let good = ccr(app::GX, 1, &[]);
    for (len, want) in [
        (0u32, WireError::BadLength),
        (4, WireError::BadLength),
        (7, WireError::BadLength),
        (19, WireError::BadLength),
        (22, WireError::BadLength),
        (wire::MAX_LEN_FIELD, WireError::BadLength),
    ] {
        let mut m = good.clone();
        m[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
        assert_eq!(parse_header(&m.as_slice(), 0), Err(want), "length {len}");
    }
    // 2^24-4: a valid header length, but the AVP scan runs into the buffer's end.
    let mut m = good.clone();
    m[1..4].copy_from_slice(&(wire::MAX_LEN_FIELD - 3).to_be_bytes()[1..]);
    let h = parse_header(&m.as_slice(), 0).unwrap();
    assert_eq!(h.length, 0x00ff_fffc);
    // The first AVPs are readable: AVP 416 is found inside the available bytes.
    assert_eq!(classify(&m).unwrap().class, MsgClass::gx_ccr(1));
}

#[test]
fn version_and_header_bits() {
    let good = ccr(app::GX, 1, &[]);
    let mut m = good.clone();
    m[0] = 2;
    assert_eq!(classify(&m), Err(WireError::BadVersion));
    for (bit, what) in [
        (0x02u8, "reserved bit 0x2"),
        (0x04, "reserved bit 0x4"),
        (0x08, "reserved bit 0x8"),
        (flags::E, "E on a request"),
    ] {
        let mut m = good.clone();
        m[4] |= bit;
        assert_eq!(classify(&m), Err(WireError::InvalidHeaderBits), "{what}");
    }
    // The fast path's mark is accepted and visible.
    let mut m = good.clone();
    m[4] |= flags::RATE_LIMIT_MARK;
    let c = classify(&m).unwrap();
    assert!(c.header.is_marked());
    assert_eq!(c.class, MsgClass::gx_ccr(1));
}

#[test]
fn truncated_buffers() {
    let m = ccr(app::GX, 1, &[]);
    for cut in 0..12 {
        assert_eq!(classify(&m[..cut]), Err(WireError::Truncated), "cut {cut}");
    }
    // Header readable, AVP 416 not yet: the scan says Truncated, class byte 0.
    let c = classify(&m[..24]).unwrap();
    assert_eq!(c.req_type, Some(ReqTypeScan::Truncated));
    assert_eq!(c.class.req_type, 0);
}

#[test]
fn avp_length_errors() {
    let base = ccr(app::GX, 1, &[]);
    // First AVP (Session-Id) at offset 20; its length field at 25..28.
    for bad in [0u32, 4, 7] {
        let mut m = base.clone();
        m[25..28].copy_from_slice(&bad.to_be_bytes()[1..]);
        assert_eq!(classify(&m), Err(WireError::AvpLength), "avp len {bad}");
    }
    // Overflow: runs past the message.
    let mut m = base.clone();
    m[25..28].copy_from_slice(&(wire::MAX_LEN_FIELD).to_be_bytes()[1..]);
    assert_eq!(classify(&m), Err(WireError::AvpLength));
    // Vendor flag with an AVP too short for the 12-byte header.
    let mut m = base.clone();
    m[24] |= avp_flags::V;
    m[25..28].copy_from_slice(&10u32.to_be_bytes()[1..]);
    assert_eq!(classify(&m), Err(WireError::AvpLength));
    // CC-Request-Type with 8 bytes of data.
    let m = message(
        flags::R,
        cmd::CREDIT_CONTROL,
        app::GX,
        &[TAvp::bytes(avp::CC_REQUEST_TYPE, &[0; 8])],
    );
    assert_eq!(classify(&m), Err(WireError::AvpLength));
}

#[test]
fn scan_at_an_offset() {
    // Two messages back to back: the second is scanned at its own offset.
    let mut buf = ccr(app::GX, 1, &[]);
    let first = buf.len();
    buf.extend(ccr(app::GY, 3, &[]));
    let c = wire::classify(&buf.as_slice(), first).unwrap();
    assert_eq!(c.class, MsgClass::gy_ccr(3));
    let h = parse_header(&buf.as_slice(), first).unwrap();
    assert_eq!(h.length as usize, buf.len() - first);
    assert_eq!(c.req_type, Some(ReqTypeScan::Found(3)));
}

#[test]
fn slice_bytes_bounds() {
    let b: &[u8] = &[1, 2, 3, 4, 5];
    assert_eq!(b.u32_at(0), Some(0x0102_0304));
    assert_eq!(b.u32_at(1), Some(0x0203_0405));
    assert_eq!(b.u32_at(2), None);
    assert_eq!(b.u32_at(usize::MAX), None);
    assert_eq!(b.u8_at(4), Some(5));
    assert_eq!(b.u8_at(5), None);
}

/// The message's bytes arrive in pieces (TCP segments) cut at `cuts`, and a
/// [`ScanCursor`] (the fast path's driver, in dra-common) classifies them. Returns
/// what the scan knows when it is done, or when the bytes run out.
fn scan_in_pieces(m: &[u8], cuts: &[usize]) -> Result<wire::Classified, WireError> {
    let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(m.len())).collect();
    bounds.push(m.len());
    bounds.sort_unstable();
    let mut cur = ScanCursor::new();
    let mut a = 0;
    for &b in &bounds {
        let piece = &m[a..b];
        match cur.advance(&piece, 0, a as u32, b as u32) {
            Scanned::Done(c) => return Ok(c),
            Scanned::Invalid(e) => return Err(e),
            Scanned::More => {}
        }
        a = b;
    }
    cur.scan.so_far()
}

#[test]
fn every_single_cut_of_a_ccr_gives_its_class() {
    for (app_id, rt) in [(app::GX, 1), (app::GX, 3), (app::GY, 2)] {
        let m = ccr(app_id, rt, &[TAvp::vendor(1027, 10415, b"vendor data")]);
        let whole = classify(&m).unwrap();
        assert_eq!(
            whole.class,
            MsgClass::new(app_id, cmd::CREDIT_CONTROL, rt as u8)
        );
        for cut in 0..=m.len() {
            assert_eq!(scan_in_pieces(&m, &[cut]), Ok(whole), "cut at {cut}");
        }
    }
}

#[test]
fn scan_keeps_the_ids() {
    let m = ccr(app::GX, 1, &[]);
    let mut s = MsgScan::new();
    s.feed(&m.as_slice(), 0).unwrap();
    assert_eq!(s.need(), Need::Item { at: 12, len: 8 });
    s.feed(&m.as_slice(), 12).unwrap();
    assert_eq!((s.hop_by_hop, s.end_to_end), (0x1111_2222, 0x3333_4444));
    // Answers need only the first 12 bytes.
    let mut a = m.clone();
    a[4] &= !flags::R;
    let mut s = MsgScan::new();
    s.feed(&a.as_slice(), 0).unwrap();
    assert!(s.is_done());
}

fn arb_avp() -> impl Strategy<Value = TAvp> {
    (
        1u32..5000,
        proptest::option::of(1u32..20000),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        // Keep the generated AVPs from being CC-Request-Type (416, no vendor) by accident.
        .prop_map(|(code, vendor, data)| TAvp {
            code: if code == avp::CC_REQUEST_TYPE && vendor.is_none() {
                417
            } else {
                code
            },
            vendor,
            data,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// A valid message cut anywhere, any number of times, is classified as when whole.
    #[test]
    fn cuts_never_change_the_class(
        app_id in prop_oneof![Just(app::GX), Just(app::GY)],
        req_type in 1u32..=4,
        before in proptest::collection::vec(arb_avp(), 0..20),
        cuts in proptest::collection::vec(0usize..2000, 0..6),
        is_request in any::<bool>(),
    ) {
        let mut avps = before;
        avps.push(TAvp::u32(avp::CC_REQUEST_TYPE, req_type));
        let fl = if is_request { flags::R | flags::P } else { flags::P };
        let m = message(fl, cmd::CREDIT_CONTROL, app_id, &avps);
        prop_assert_eq!(scan_in_pieces(&m, &cuts), classify(&m));
    }

    /// Arbitrary bytes cut anywhere: same result (class or error) as in one buffer.
    #[test]
    fn cuts_never_change_the_outcome(
        body in proptest::collection::vec(any::<u8>(), 0..400),
        len in 20u32..600,
        cuts in proptest::collection::vec(0usize..500, 0..6),
    ) {
        let mut m = vec![1u8];
        m.extend_from_slice(&(len & !3).max(20).to_be_bytes()[1..]);
        m.extend_from_slice(&[flags::R, 0, 1, 16, 1, 0, 0, 0xd6]);
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&body);
        prop_assert_eq!(scan_in_pieces(&m, &cuts), classify(&m));
    }

    /// Arbitrary bytes never panic and always finish (the loop is bounded).
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        off in 0usize..64,
    ) {
        let _ = wire::classify(&bytes.as_slice(), off);
    }

    /// Arbitrary bytes behind a valid-looking header still never panic.
    #[test]
    fn arbitrary_body_never_panics(
        body in proptest::collection::vec(any::<u8>(), 0..600),
        len in 20u32..2000,
    ) {
        let mut m = vec![1u8];
        m.extend_from_slice(&(len & !3).max(20).to_be_bytes()[1..]);
        m.extend_from_slice(&[flags::R, 0, 1, 16, 1, 0, 0, 0xd6]);
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&body);
        let _ = wire::classify(&m.as_slice(), 0);
    }

    /// For every valid message the test encoder builds, the scanner's class is the
    /// encoder's input: request type found when within the bound, else "not found".
    #[test]
    fn class_matches_encoder(
        app_id in prop_oneof![Just(app::GX), Just(app::GY), 0u32..100],
        req_type in 1u32..=4,
        before in proptest::collection::vec(arb_avp(), 0..24),
        after in proptest::collection::vec(arb_avp(), 0..4),
        is_request in any::<bool>(),
        command in prop_oneof![
            Just(cmd::CREDIT_CONTROL),
            Just(cmd::DEVICE_WATCHDOG),
            1u32..0xffffff,
        ],
    ) {
        let mut avps = before.clone();
        avps.push(TAvp::u32(avp::CC_REQUEST_TYPE, req_type));
        avps.extend(after);
        let fl = if is_request { flags::R | flags::P } else { flags::P };
        let m = message(fl, command, app_id, &avps);
        let c = wire::classify(&m.as_slice(), 0).unwrap();
        prop_assert_eq!(c.header.length as usize, m.len());
        prop_assert_eq!(c.header.command_code, command);
        prop_assert_eq!(c.header.application_id, app_id);
        let scanned = is_request && command == cmd::CREDIT_CONTROL;
        let want_rt = if scanned && before.len() < MAX_AVPS_SCANNED { req_type as u8 } else { 0 };
        prop_assert_eq!(c.class, MsgClass::new(app_id, command, want_rt));
        if scanned && before.len() >= MAX_AVPS_SCANNED {
            prop_assert_eq!(c.req_type, Some(ReqTypeScan::BeyondBound));
        }
    }
}

/// As [`scan_in_pieces`], the DRMP priority the scan met (RFC 7944).
fn drmp_in_pieces(m: &[u8], cuts: &[usize]) -> Option<u8> {
    let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(m.len())).collect();
    bounds.push(m.len());
    bounds.sort_unstable();
    let mut cur = ScanCursor::new();
    let mut a = 0;
    for &b in &bounds {
        let piece = &m[a..b];
        match cur.advance(&piece, 0, a as u32, b as u32) {
            Scanned::Done(_) => return cur.scan.drmp(),
            Scanned::Invalid(e) => panic!("invalid: {e:?}"),
            Scanned::More => {}
        }
        a = b;
    }
    cur.scan.drmp()
}

/// A DRMP AVP where RFC 8506 and TS 29.212 put it (after Session-Id, before
/// CC-Request-Type) gives the request's priority, whatever the cuts; the class is the
/// same as without it.
#[test]
fn drmp_before_the_request_type_is_read_at_every_cut() {
    for prio in [0u32, 7, 15] {
        let m = ccr(app::GX, 1, &[TAvp::u32(avp::DRMP, prio)]);
        let whole = classify(&m).unwrap();
        assert_eq!(whole.class, MsgClass::gx_ccr(1));
        for cut in 0..=m.len() {
            assert_eq!(drmp_in_pieces(&m, &[cut]), Some(prio as u8), "cut at {cut}");
            assert_eq!(scan_in_pieces(&m, &[cut]), Ok(whole), "cut at {cut}");
        }
    }
}

/// No DRMP, a DRMP past CC-Request-Type (the scan stops there), a vendor-specific AVP
/// 301 or one of the wrong length: no priority from it. A value past PRIORITY_15 is
/// the lowest priority.
#[test]
fn drmp_absent_late_malformed_or_out_of_range() {
    assert_eq!(drmp_in_pieces(&ccr(app::GX, 1, &[]), &[]), None);
    let mut late = ccr(app::GX, 3, &[]);
    let extra = {
        let mut b = Vec::new();
        TAvp::u32(avp::DRMP, 2).encode(&mut b);
        b
    };
    late.extend_from_slice(&extra);
    let n = late.len() as u32;
    late[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
    assert_eq!(classify(&late).unwrap().class, MsgClass::gx_ccr(3));
    assert_eq!(drmp_in_pieces(&late, &[]), None);
    let vendor = ccr(app::GX, 1, &[TAvp::vendor(avp::DRMP, 10415, &[0, 0, 0, 2])]);
    assert_eq!(drmp_in_pieces(&vendor, &[]), None);
    let long = ccr(app::GX, 1, &[TAvp::bytes(avp::DRMP, &[0, 0, 0, 0, 2])]);
    assert_eq!(classify(&long).unwrap().class, MsgClass::gx_ccr(1));
    assert_eq!(drmp_in_pieces(&long, &[]), None);
    assert_eq!(
        drmp_in_pieces(&ccr(app::GY, 2, &[TAvp::u32(avp::DRMP, 99)]), &[]),
        Some(15)
    );
}
