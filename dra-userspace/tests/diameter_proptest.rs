//! Properties of the codec and framer over generated messages and arbitrary bytes.

use dra::diameter::{Avp, Dictionary, Framer, Message, decode, encode, validate_request};
use dra_common::wire::{MAX_LEN_FIELD, avp_flags};
use proptest::prelude::*;

fn arb_leaf() -> impl Strategy<Value = Avp> {
    (
        any::<u32>(),
        any::<u8>(),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(code, flags, vendor_id, data)| Avp {
            code,
            // The V flag is set exactly when a Vendor-Id is present (RFC 6733 §4.1).
            flags: if vendor_id.is_some() {
                flags | avp_flags::V
            } else {
                flags & !avp_flags::V
            },
            vendor_id,
            data,
        })
}

/// AVPs, Grouped ones nested up to three levels.
fn arb_avp() -> impl Strategy<Value = Avp> {
    arb_leaf().prop_recursive(3, 24, 4, |inner| {
        (
            any::<u32>(),
            any::<bool>(),
            proptest::collection::vec(inner, 0..4),
        )
            .prop_map(|(code, m, children)| {
                let g = Avp::grouped(code, children);
                if m { g.mandatory() } else { g }
            })
    })
}

fn arb_message() -> impl Strategy<Value = Message> {
    (
        any::<u8>(),
        0..=MAX_LEN_FIELD,
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(arb_avp(), 0..8),
    )
        .prop_map(
            |(flags, command_code, application_id, hop_by_hop, end_to_end, avps)| Message {
                flags,
                command_code,
                application_id,
                hop_by_hop,
                end_to_end,
                avps,
            },
        )
}

/// Bytes with a plausible header (version 1, right length) and an arbitrary body, so
/// the AVP decoder is reached far more often than with fully random bytes.
fn arb_framed_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<[u8; 16]>(),
        proptest::collection::vec(any::<u8>(), 0..50),
    )
        .prop_map(|(hdr, mut words)| {
            words.truncate(words.len() / 4 * 4);
            let len = 20 + words.len();
            let mut b = vec![1, 0, 0, 0];
            b[1..4].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
            b.extend_from_slice(&hdr);
            b.extend_from_slice(&words);
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn encode_then_decode_gives_the_same_message(msg in arb_message()) {
        let bytes = encode(&msg);
        prop_assert_eq!(bytes.len() % 4, 0);
        let back = decode(&bytes).expect("our own encoding decodes");
        prop_assert_eq!(&back, &msg);
        prop_assert_eq!(encode(&back), bytes);
    }

    #[test]
    fn grouped_children_decode_back(
        code in any::<u32>(),
        children in proptest::collection::vec(arb_avp(), 0..6),
    ) {
        let g = Avp::grouped(code, children.clone());
        prop_assert_eq!(g.as_grouped().expect("well-formed group"), children);
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        if let Ok(msg) = decode(&bytes) {
            prop_assert_eq!(decode(&encode(&msg)).ok(), Some(msg.clone()));
        }
    }

    #[test]
    fn decoded_framed_bytes_re_encode_stably(bytes in arb_framed_bytes()) {
        match decode(&bytes) {
            Ok(msg) => {
                // Padding bytes may differ (we write zeros); the model may not.
                let again = encode(&msg);
                prop_assert_eq!(again.len(), bytes.len());
                prop_assert_eq!(decode(&again).ok(), Some(msg.clone()));
                // Checks and answers never panic, and answers always encode.
                if let Err(e) = validate_request(&msg, Dictionary::standard(), &[4]) {
                    let ans = e.answer(&msg, "dra.example", "example");
                    prop_assert_eq!(decode(&encode(&ans)).ok(), Some(ans.clone()));
                }
            }
            Err(e) => {
                let pe = e.to_protocol_error(Dictionary::standard());
                if let (Some(req), Some(pe)) = (e.partial(), pe) {
                    let ans = pe.answer(req, "dra.example", "example");
                    prop_assert_eq!(decode(&encode(&ans)).ok(), Some(ans.clone()));
                }
            }
        }
    }

    #[test]
    fn framer_recovers_every_message_from_any_chunking(
        msgs in proptest::collection::vec(arb_message(), 1..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let frames: Vec<Vec<u8>> = msgs.iter().map(encode).collect();
        let stream = frames.concat();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut f = Framer::with_max_message_size(1 << 24);
        let mut got = Vec::new();
        for w in points.windows(2) {
            f.push(&stream[w[0]..w[1]]);
            while let Some(m) = f.next_message().expect("valid stream") {
                got.push(m);
            }
        }
        prop_assert_eq!(got, frames);
        prop_assert_eq!(f.buffered(), 0);
    }

    #[test]
    fn framer_never_panics_and_stays_bounded(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16),
        max in 20usize..256,
    ) {
        let mut f = Framer::with_max_message_size(max);
        for c in &chunks {
            f.push(c);
            loop {
                match f.next_message() {
                    Ok(Some(m)) => prop_assert!(m.len() <= max && m.len() >= 20),
                    Ok(None) => break,
                    Err(_) => break,
                }
            }
            // Whatever is left is less than one message of the limit plus what came in.
            prop_assert!(f.buffered() <= max + c.len());
        }
    }
}
