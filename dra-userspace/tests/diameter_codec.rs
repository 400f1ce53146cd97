//! Codec and framer behaviour: byte layout (RFC 6733 §3, §4.1), round trips, typed
//! accessors, decode errors, TCP framing.

mod diameter_fixtures;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use diameter_fixtures as fx;
use dra::diameter::error::EncodeError;
use dra::diameter::{
    Avp, AvpDataError, DecodeError, Framer, FramingError, Message, OffendingAvp, avp_code as c,
    command_code as cmd, decode, encode, try_encode, vendor,
};
use dra_common::wire::{app, avp_flags, flags};

fn all_fixtures() -> Vec<Message> {
    vec![
        fx::cer(),
        fx::cea(),
        fx::dwr(),
        fx::dwa(),
        fx::dwa_with_load(42),
        fx::dpr(),
        fx::dpa(),
        fx::ccr_i_gx(),
        fx::cca_i_gx(),
        fx::ccr_u_gy(),
    ]
}

#[test]
fn every_fixture_round_trips_exactly() {
    for msg in all_fixtures() {
        let bytes = encode(&msg);
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(
            u32::from_be_bytes([0, bytes[1], bytes[2], bytes[3]]) as usize,
            bytes.len()
        );
        let back = decode(&bytes).expect("decode");
        assert_eq!(back, msg);
        assert_eq!(encode(&back), bytes);
    }
}

#[test]
fn dwr_has_the_exact_rfc_byte_layout() {
    let msg = Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 0x0102_0304, 0x0a0b_0c0d)
        .with(Avp::utf8(c::ORIGIN_HOST, "a.b").mandatory())
        .with(Avp::u32(c::ORIGIN_STATE_ID, 9).mandatory());
    #[rustfmt::skip]
    let expected: Vec<u8> = vec![
        // Version 1, Message Length 44.
        0x01, 0x00, 0x00, 0x2c,
        // Flags R, Command Code 280.
        0x80, 0x00, 0x01, 0x18,
        // Application-Id 0, Hop-by-Hop, End-to-End.
        0x00, 0x00, 0x00, 0x00,
        0x01, 0x02, 0x03, 0x04,
        0x0a, 0x0b, 0x0c, 0x0d,
        // Origin-Host 264, M, AVP Length 11 (padding not counted), "a.b", 1 pad byte.
        0x00, 0x00, 0x01, 0x08,
        0x40, 0x00, 0x00, 0x0b,
        b'a', b'.', b'b', 0x00,
        // Origin-State-Id 278, M, length 12, value 9.
        0x00, 0x00, 0x01, 0x16,
        0x40, 0x00, 0x00, 0x0c,
        0x00, 0x00, 0x00, 0x09,
    ];
    assert_eq!(encode(&msg), expected);
    assert_eq!(decode(&expected).unwrap(), msg);
}

#[test]
fn vendor_avp_carries_v_flag_and_vendor_id() {
    let a = Avp::u32(c::FEATURE_LIST, 0x0b)
        .vendor(vendor::TGPP)
        .mandatory();
    let msg = Message::answer(cmd::CREDIT_CONTROL, app::GX, 1, 2).with(a.clone());
    let bytes = encode(&msg);
    #[rustfmt::skip]
    assert_eq!(&bytes[20..], &[
        0x00, 0x00, 0x02, 0x76, // 630
        0xc0, 0x00, 0x00, 0x10, // V|M, length 16 = 12-byte header + 4
        0x00, 0x00, 0x28, 0xaf, // 10415
        0x00, 0x00, 0x00, 0x0b,
    ]);
    let back = decode(&bytes).unwrap();
    assert_eq!(back.avps[0], a);
    assert_eq!(
        back.find_vendor(c::FEATURE_LIST, Some(vendor::TGPP)),
        Some(&a)
    );
    // The IETF code space is distinct from the vendor's.
    assert_eq!(back.find(c::FEATURE_LIST), None);
    assert_eq!(a.header_len(), 12);
    assert_eq!(a.length(), 16);
}

#[test]
fn encoding_derives_the_v_flag_from_vendor_id() {
    let mut a = Avp::u32(c::RESULT_CODE, 2001);
    a.flags = avp_flags::V | avp_flags::M; // inconsistent: no vendor id
    let bytes = encode(&Message::answer(1, 0, 0, 0).with(a));
    assert_eq!(bytes[24], avp_flags::M);
    assert_eq!(decode(&bytes).unwrap().avps[0].vendor_id, None);
}

#[test]
fn grouped_avps_nest_and_decode_on_demand() {
    let inner = Avp::grouped(
        c::USED_SERVICE_UNIT,
        vec![
            Avp::u32(c::CC_TIME, 60),
            Avp::u64(c::CC_TOTAL_OCTETS, 1 << 40),
        ],
    );
    let mscc = Avp::grouped(
        c::MULTIPLE_SERVICES_CREDIT_CONTROL,
        vec![inner.clone(), Avp::utf8(c::USER_NAME, "x")],
    )
    .mandatory();
    let msg = Message::request(cmd::CREDIT_CONTROL, app::GY, 5, 6).with(mscc.clone());
    let back = decode(&encode(&msg)).unwrap();
    let outer = back.find(c::MULTIPLE_SERVICES_CREDIT_CONTROL).unwrap();
    let children = outer.as_grouped().unwrap();
    assert_eq!(children.len(), 2);
    assert_eq!(children[0], inner);
    assert_eq!(children[1].as_utf8().unwrap(), "x");
    let leaves = children[0].as_grouped().unwrap();
    assert_eq!(leaves[0].as_u32().unwrap(), 60);
    assert_eq!(leaves[1].as_u64().unwrap(), 1 << 40);
    assert_eq!(
        outer
            .child(c::USER_NAME, None)
            .unwrap()
            .unwrap()
            .as_utf8()
            .unwrap(),
        "x"
    );
    // Inner AVPs are padded inside the group: "x" takes 12 bytes, not 9.
    assert_eq!(mscc.data.len(), inner.padded_length() + 12);
}

#[test]
fn grouped_without_final_padding_still_decodes() {
    // Some encoders leave the last inner AVP unpadded; the group length then ends on it.
    let mut data = Vec::new();
    Avp::utf8(c::PROXY_HOST, "h")
        .encode_into(&mut data)
        .unwrap();
    data.truncate(9);
    let pi = Avp::octets(c::PROXY_INFO, data);
    let children = pi.as_grouped().unwrap();
    assert_eq!(children, vec![Avp::utf8(c::PROXY_HOST, "h")]);
    // And the group itself is forwarded byte for byte.
    let msg = Message::request(cmd::CREDIT_CONTROL, app::GX, 1, 1).with(pi.clone());
    assert_eq!(decode(&encode(&msg)).unwrap().avps[0], pi);
}

#[test]
fn padding_is_zero_and_not_counted_in_avp_length() {
    for n in 0..=9usize {
        let a = Avp::octets(c::CLASS, vec![0xff; n]);
        let mut out = Vec::new();
        a.encode_into(&mut out).unwrap();
        assert_eq!(a.length(), 8 + n);
        assert_eq!(out.len(), (8 + n).div_ceil(4) * 4);
        assert_eq!(a.padded_length(), out.len());
        assert_eq!(
            u32::from_be_bytes([0, out[5], out[6], out[7]]) as usize,
            8 + n
        );
        assert!(out[8 + n..].iter().all(|&b| b == 0), "padding for {n}");
    }
}

#[test]
fn unknown_avps_are_forwarded_byte_exact() {
    // An AVP no dictionary knows, vendor-specific, odd length, non-zero reserved flag
    // bits: the relay must not touch it.
    let mut body = Vec::new();
    body.extend_from_slice(&0x00ab_cdefu32.to_be_bytes());
    body.extend_from_slice(&[0x87, 0, 0, 17]); // V + reserved bits, length 17
    body.extend_from_slice(&0xdead_beefu32.to_be_bytes());
    body.extend_from_slice(b"hello");
    body.extend_from_slice(&[0, 0, 0]);
    let mut bytes = encode(&fx::ccr_i_gx());
    let total = bytes.len() + body.len();
    bytes.extend_from_slice(&body);
    bytes[1..4].copy_from_slice(&(total as u32).to_be_bytes()[1..]);
    let msg = decode(&bytes).unwrap();
    let odd = msg.avps.last().unwrap();
    assert_eq!(odd.code, 0x00ab_cdef);
    assert_eq!(odd.flags, 0x87);
    assert_eq!(odd.vendor_id, Some(0xdead_beef));
    assert_eq!(odd.as_octets(), b"hello");
    assert_eq!(encode(&msg), bytes);
}

#[test]
fn typed_accessors_read_and_reject() {
    assert_eq!(Avp::u32(1, 0xfeed_f00d).as_u32().unwrap(), 0xfeed_f00d);
    assert_eq!(Avp::u64(1, u64::MAX - 1).as_u64().unwrap(), u64::MAX - 1);
    assert_eq!(Avp::i32(1, -5).as_i32().unwrap(), -5);
    assert_eq!(Avp::i64(1, -6).as_i64().unwrap(), -6);
    assert_eq!(Avp::enumerated(1, 3).as_u32().unwrap(), 3);
    assert_eq!(Avp::utf8(1, "réalm").as_utf8().unwrap(), "réalm");
    let v4 = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2));
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6));
    assert_eq!(Avp::address(257, v4).data, [0, 1, 198, 18, 1, 2]);
    assert_eq!(Avp::address(257, v4).as_address().unwrap(), v4);
    assert_eq!(Avp::address(257, v6).as_address().unwrap(), v6);

    assert_eq!(
        Avp::u64(7, 1).as_u32(),
        Err(AvpDataError::WrongLength {
            code: 7,
            expected: 4,
            actual: 8
        })
    );
    assert!(matches!(
        Avp::octets(7, [0xff, 0xfe]).as_utf8(),
        Err(AvpDataError::InvalidUtf8 { code: 7, .. })
    ));
    assert_eq!(
        Avp::octets(257, [0, 1, 10, 0, 0]).as_address(),
        Err(AvpDataError::BadAddress {
            code: 257,
            family: 1,
            len: 3
        })
    );
    assert_eq!(
        Avp::octets(257, [0, 8, 1, 2, 3]).as_address(),
        Err(AvpDataError::BadAddress {
            code: 257,
            family: 8,
            len: 3
        })
    );
    assert!(matches!(
        Avp::octets(260, [0, 0, 1, 10, 0, 0, 0, 4]).as_grouped(),
        Err(AvpDataError::BadGrouped {
            code: 260,
            offset: 0,
            ..
        })
    ));
}

#[test]
fn message_helpers_read_header_bits_and_routing_avps() {
    let mut ccr = fx::ccr_i_gx();
    assert!(ccr.is_request() && ccr.is_proxiable());
    assert!(!ccr.is_error() && !ccr.is_retransmit() && !ccr.is_marked());
    assert_eq!(ccr.session_id(), Some(fx::SESSION));
    assert_eq!(ccr.origin_host(), Some(fx::PGW_HOST));
    assert_eq!(ccr.origin_realm(), Some(fx::PGW_REALM));
    assert_eq!(ccr.destination_realm(), Some(fx::PCRF_REALM));
    assert_eq!(ccr.destination_host(), None);
    assert_eq!(ccr.cc_request_type(), Some(1));
    assert_eq!(ccr.find_all(c::SUBSCRIPTION_ID).count(), 2);
    ccr.flags |= flags::T | flags::RATE_LIMIT_MARK;
    let back = decode(&encode(&ccr)).unwrap();
    assert!(back.is_retransmit() && back.is_marked());
    ccr.clear_mark();
    assert!(!ccr.is_marked() && ccr.is_retransmit());

    let cca = fx::cca_i_gx();
    assert_eq!(cca.result_code(), Some(2001));
    let exp = Message::answer(cmd::CREDIT_CONTROL, app::GX, 1, 1).with(Avp::grouped(
        c::EXPERIMENTAL_RESULT,
        vec![
            Avp::u32(c::VENDOR_ID, vendor::TGPP),
            Avp::u32(c::EXPERIMENTAL_RESULT_CODE, 5065),
        ],
    ));
    assert_eq!(exp.experimental_result(), Some((vendor::TGPP, 5065)));
}

#[test]
fn decode_rejects_what_is_not_one_message() {
    let good = encode(&fx::dwr());
    assert_eq!(decode(&good[..19]), Err(DecodeError::Truncated { len: 19 }));
    let mut v2 = good.clone();
    v2[0] = 2;
    assert_eq!(decode(&v2), Err(DecodeError::BadVersion { version: 2 }));
    let mut odd = good.clone();
    odd[3] = odd[3].wrapping_add(1);
    assert!(matches!(decode(&odd), Err(DecodeError::BadLength { .. })));
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 4]);
    assert_eq!(
        decode(&longer),
        Err(DecodeError::LengthMismatch {
            header_length: good.len() as u32,
            buf_len: good.len() + 4
        })
    );
    assert!(matches!(
        decode(&good[..good.len() - 4]),
        Err(DecodeError::LengthMismatch { .. })
    ));
}

/// Replaces the AVP Length field of the AVP at `off`.
fn set_avp_len(bytes: &mut [u8], off: usize, len: u32) {
    bytes[off + 5..off + 8].copy_from_slice(&len.to_be_bytes()[1..]);
}

#[test]
fn avp_length_past_the_message_keeps_the_avps_before_it() {
    let msg = fx::ccr_i_gx();
    let mut bytes = encode(&msg);
    // Third AVP (Origin-Host) claims to run past the end.
    let off = 20 + msg.avps[0].padded_length() + msg.avps[1].padded_length();
    set_avp_len(&mut bytes, off, 0x00ff_fff0);
    let err = decode(&bytes).unwrap_err();
    let DecodeError::InvalidAvpLength {
        partial,
        avp,
        offset,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(*offset, off);
    assert_eq!(
        *avp,
        OffendingAvp {
            code: c::ORIGIN_HOST,
            flags: avp_flags::M,
            vendor_id: None,
            length: 0x00ff_fff0
        }
    );
    assert_eq!(partial.avps, msg.avps[..2].to_vec());
    assert_eq!(partial.session_id(), Some(fx::SESSION));
    assert_eq!(
        (partial.hop_by_hop, partial.end_to_end),
        (msg.hop_by_hop, msg.end_to_end)
    );
    assert_eq!(err.partial(), Some(&**partial));
}

#[test]
fn avp_shorter_than_its_header_is_an_avp_length_error() {
    let msg = fx::dwr();
    for (len, vendor) in [(0u32, false), (7, false), (11, true)] {
        let mut bytes = encode(&msg);
        if vendor {
            bytes[24] |= avp_flags::V;
        }
        set_avp_len(&mut bytes, 20, len);
        match decode(&bytes) {
            Err(DecodeError::InvalidAvpLength {
                avp,
                offset: 20,
                partial,
            }) => {
                assert_eq!(avp.code, c::ORIGIN_HOST);
                assert_eq!(avp.length, len);
                assert!(partial.avps.is_empty());
            }
            other => panic!("length {len}: {other:?}"),
        }
    }
    // Four stray bytes after the last AVP: an AVP header that cannot be complete.
    let mut bytes = encode(&msg);
    bytes.extend_from_slice(&[0, 0, 1, 7]);
    let total = bytes.len() as u32;
    bytes[1..4].copy_from_slice(&total.to_be_bytes()[1..]);
    match decode(&bytes) {
        Err(DecodeError::InvalidAvpLength { avp, partial, .. }) => {
            // Zero-padded to a full header: code 263, no flags, length unreadable.
            assert_eq!(
                avp,
                OffendingAvp {
                    code: 263,
                    flags: 0,
                    vendor_id: None,
                    length: 0
                }
            );
            assert_eq!(partial.avps, msg.avps);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn encode_refuses_lengths_that_do_not_fit_24_bits() {
    let big = Message::request(1, 0, 0, 0).with(Avp::octets(c::CLASS, vec![0; 1 << 24]));
    assert!(matches!(
        try_encode(&big),
        Err(EncodeError::AvpTooLong { code: 25, .. })
    ));
    let many = Message::request(1, 0, 0, 0)
        .with(Avp::octets(c::CLASS, vec![0; (1 << 23) + 4]))
        .with(Avp::octets(c::CLASS, vec![0; 1 << 23]));
    assert!(matches!(
        try_encode(&many),
        Err(EncodeError::MessageTooLong { .. })
    ));
    let cmd = Message::request(1 << 24, 0, 0, 0);
    assert!(matches!(
        try_encode(&cmd),
        Err(EncodeError::CommandCodeTooLarge { .. })
    ));
}

fn stream_of(msgs: &[Message]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let frames: Vec<Vec<u8>> = msgs.iter().map(encode).collect();
    (frames.concat(), frames)
}

fn drain(f: &mut Framer) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = f.next_message().expect("no framing error") {
        out.push(m);
    }
    out
}

#[test]
fn framer_handles_a_split_at_every_byte_boundary() {
    let (stream, frames) = stream_of(&[fx::cer(), fx::ccr_i_gx(), fx::dwa_with_load(3)]);
    for cut in 0..=stream.len() {
        let mut f = Framer::new();
        f.push(&stream[..cut]);
        let mut got = drain(&mut f);
        f.push(&stream[cut..]);
        got.extend(drain(&mut f));
        assert_eq!(got, frames, "cut at {cut}");
        assert_eq!(f.buffered(), 0);
    }
}

#[test]
fn framer_handles_one_byte_at_a_time_and_many_in_one_push() {
    let (stream, frames) = stream_of(&all_fixtures());
    let mut f = Framer::new();
    let mut got = Vec::new();
    for b in &stream {
        f.push(std::slice::from_ref(b));
        got.extend(drain(&mut f));
    }
    assert_eq!(got, frames);

    let mut f = Framer::new();
    f.push(&stream);
    assert_eq!(drain(&mut f), frames);
    // Each frame decodes to its message.
    for (frame, msg) in frames.iter().zip(all_fixtures()) {
        assert_eq!(decode(frame).unwrap(), msg);
    }
}

#[test]
fn framer_rejects_an_oversized_message_from_its_header_alone() {
    let mut f = Framer::with_max_message_size(1024);
    assert_eq!(f.max_message_size(), 1024);
    let big = Message::request(cmd::CREDIT_CONTROL, app::GX, 1, 1)
        .proxiable()
        .with(Avp::octets(c::CLASS, vec![7; 2000]));
    let bytes = encode(&big);
    // Only the first 12 bytes arrived: already enough to refuse.
    f.push(&bytes[..12]);
    let err = f.next_message().unwrap_err();
    assert_eq!(
        err,
        FramingError::Oversized {
            length: bytes.len() as u32,
            max: 1024
        }
    );
    // The connection is done: the error sticks and nothing more is buffered.
    f.push(&encode(&fx::dwr()));
    assert_eq!(f.next_message().unwrap_err(), err);
    assert_eq!(f.buffered(), 0);

    // At exactly the limit it is accepted.
    let mut f = Framer::with_max_message_size(bytes.len());
    f.push(&bytes);
    assert_eq!(drain(&mut f), vec![bytes]);
}

#[test]
fn framer_default_limit_is_64_kib() {
    let mut f = Framer::default();
    let msg = Message::request(cmd::CREDIT_CONTROL, app::GX, 1, 1)
        .with(Avp::octets(c::CLASS, vec![0; 64 * 1024]));
    f.push(&encode(&msg)[..12]);
    assert!(matches!(
        f.next_message(),
        Err(FramingError::Oversized { max: 65536, .. })
    ));
}

#[test]
fn framer_rejects_bad_version_and_bad_length_after_good_messages() {
    let good = encode(&fx::dwr());
    let mut bad_version = good.clone();
    bad_version[0] = 0;
    let mut f = Framer::new();
    f.push(&good);
    f.push(&bad_version);
    assert_eq!(f.next_message().unwrap(), Some(good.clone()));
    assert_eq!(
        f.next_message(),
        Err(FramingError::BadVersion { version: 0 })
    );
    // What is kept to answer it (RFC 6733 §7.1.5): its header.
    assert_eq!(f.failed_head(), &bad_version[..20]);

    for length in [0u32, 16, 22] {
        let mut bad = good.clone();
        bad[1..4].copy_from_slice(&length.to_be_bytes()[1..]);
        let mut f = Framer::new();
        f.push(&bad);
        assert_eq!(f.next_message(), Err(FramingError::BadLength { length }));
        assert_eq!(f.failed_head(), &bad[..20]);
    }
    // A bad header cut short: what there is.
    let mut f = Framer::new();
    f.push(&bad_version[..14]);
    assert!(f.next_message().is_err());
    assert_eq!(f.failed_head(), &bad_version[..14]);
}

#[test]
fn framer_frames_a_request_with_bad_header_bits_so_it_can_be_answered() {
    let mut msg = fx::ccr_i_gx();
    msg.flags |= 0x04; // a reserved bit
    let bytes = encode(&msg);
    let mut f = Framer::new();
    f.push(&bytes);
    let frame = f.next_message().unwrap().unwrap();
    assert_eq!(decode(&frame).unwrap(), msg);
}
