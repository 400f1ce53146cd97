//! Structure-aware: a valid CCR carrying a tree of Grouped AVPs (nested to any depth,
//! any fan-out) with well-formed leaves. Validation never panics, costs one pass, and
//! answers 5004 (Grouped nested too deep) exactly when a non-empty group sits at
//! `MAX_GROUPED_DEPTH` or below; otherwise the request is valid.
#![no_main]

use arbitrary::Arbitrary;
use dra::diameter::{
    Avp, Dictionary, Message, ProtocolError, avp_code as c, decode, encode,
    validate::MAX_GROUPED_DEPTH, validate_request,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Node {
    /// Subscription-Id-Data (UTF8String) of this many bytes.
    Leaf(u8),
    /// Subscription-Id (Grouped) with these children.
    Group(Vec<Node>),
}

/// Encodes `n`; returns the AVP and whether a non-empty group sits at depth ≥ the limit.
fn build(n: &Node, depth: usize) -> (Avp, bool) {
    match n {
        Node::Leaf(len) => (
            Avp::octets(c::SUBSCRIPTION_ID_DATA, vec![b'1'; usize::from(*len)]).mandatory(),
            false,
        ),
        Node::Group(children) => {
            let mut deep = depth >= MAX_GROUPED_DEPTH && !children.is_empty();
            let mut kids = Vec::with_capacity(children.len());
            for k in children {
                let (a, d) = build(k, depth + 1);
                deep |= d;
                kids.push(a);
            }
            (Avp::grouped(c::SUBSCRIPTION_ID, kids).mandatory(), deep)
        }
    }
}

fuzz_target!(|tree: Node| {
    let (avp, deep) = build(&tree, 0);
    let msg = Message::request(272, 16_777_238, 1, 2)
        .proxiable()
        .with(Avp::utf8(c::SESSION_ID, "pgw.fuzz;1;2").mandatory())
        .with(Avp::u32(c::AUTH_APPLICATION_ID, 16_777_238).mandatory())
        .with(Avp::utf8(c::ORIGIN_HOST, "pgw.fuzz").mandatory())
        .with(Avp::utf8(c::ORIGIN_REALM, "fuzz").mandatory())
        .with(Avp::utf8(c::DESTINATION_REALM, "fuzz").mandatory())
        .with(Avp::u32(c::CC_REQUEST_TYPE, 1).mandatory())
        .with(Avp::u32(c::CC_REQUEST_NUMBER, 0).mandatory())
        .with(avp);
    let Ok(bytes) = msg.try_encode() else { return };
    if bytes.len() > 64 * 1024 {
        return; // over the agent's message size limit: never read
    }
    let msg = decode(&bytes).expect("our own encoding decodes");
    let r = validate_request(&msg, Dictionary::standard(), &[16_777_238]);
    match (deep, r) {
        (true, Err(ProtocolError::GroupedTooDeep { limit, .. })) => {
            assert_eq!(limit, MAX_GROUPED_DEPTH);
        }
        (false, Ok(())) => {}
        (deep, r) => panic!("nested too deep: {deep}, validation: {r:?}"),
    }
    // The answer, when there is one, is small and decodes.
    if let Err(e) = validate_request(&msg, Dictionary::standard(), &[16_777_238]) {
        let ans = encode(&e.answer(&msg, "dra.fuzz", "fuzz"));
        assert!(ans.len() < 1024);
        decode(&ans).expect("answer decodes");
    }
});
