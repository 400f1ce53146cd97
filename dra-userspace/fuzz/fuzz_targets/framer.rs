//! The framer never panics, never returns a frame over its limit, and every frame it
//! returns has the length its header announces. The first byte picks the chunk size.
#![no_main]

use dra::diameter::Framer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, rest)) = data.split_first() else {
        return;
    };
    let max = 256;
    let mut f = Framer::with_max_message_size(max);
    for piece in rest.chunks(usize::from(chunk).max(1)) {
        f.push(piece);
        loop {
            match f.next_message() {
                Ok(Some(m)) => {
                    assert!(m.len() >= 20 && m.len() <= max);
                    assert_eq!(u32::from_be_bytes([0, m[1], m[2], m[3]]) as usize, m.len());
                }
                Ok(None) | Err(_) => break,
            }
        }
        assert!(f.buffered() <= max + piece.len());
    }
});
