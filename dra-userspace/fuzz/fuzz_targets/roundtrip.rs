//! decode → (if Ok) encode → decode must give the same message; an answerable decode
//! error and any validation error must give an answer that round-trips too.
#![no_main]

use dra::diameter::{Dictionary, decode, encode, validate_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dict = Dictionary::standard();
    match decode(data) {
        Ok(msg) => {
            let bytes = encode(&msg);
            assert_eq!(bytes.len(), data.len());
            let again = decode(&bytes).expect("our own encoding must decode");
            assert_eq!(again, msg);
            if let Err(e) = validate_request(&msg, dict, &[4, 16_777_238]) {
                let ans = e.answer(&msg, "dra.fuzz", "fuzz");
                assert_eq!(decode(&encode(&ans)).expect("answer decodes"), ans);
            }
            for avp in &msg.avps {
                // Typed views never panic on arbitrary data.
                let _ = (avp.as_u32(), avp.as_u64(), avp.as_utf8(), avp.as_address());
                let _ = avp.as_grouped();
            }
        }
        Err(e) => {
            if let (Some(req), Some(pe)) = (e.partial(), e.to_protocol_error(dict)) {
                let ans = pe.answer(req, "dra.fuzz", "fuzz");
                assert_eq!(decode(&encode(&ans)).expect("answer decodes"), ans);
            }
        }
    }
});
