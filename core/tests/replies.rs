//! Regression tests from fuzzing: upstream replies that once broke an invariant.

use std::time::Instant;

use domain::base::Message;
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{CacheKey, CachedAnswer, TtlPolicy};

fn serve(reply: &[u8], with_opt: bool) -> Option<Vec<u8>> {
    let end = wire::skip_name(reply, 12).unwrap();
    let qtype = wire::read_u16(reply, end).unwrap();
    let qclass = wire::read_u16(reply, end + 2).unwrap();
    let key = CacheKey::new(&reply[12..end], qtype, qclass, false, false).unwrap();
    let now = Instant::now();
    let answer = CachedAnswer::from_reply(
        reply,
        &key,
        wire::message_id(reply).unwrap(),
        now,
        &TtlPolicy::default(),
    )
    .ok()?;
    let mut query = vec![
        0xbe,
        0xef,
        0x01,
        0x00,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        u8::from(with_opt),
    ];
    query.extend_from_slice(key.question());
    if with_opt {
        query.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    let q = Query::parse(&query).unwrap();
    let mut out = Vec::new();
    answer.write_response(
        &q,
        now,
        Some(q.udp_limit(1232)),
        &ReplyOptions::udp(1232),
        &mut out,
    );
    Some(out)
}

/// A reply whose additional-section names point into the header: it parsed as received, but the
/// patched ID and the added OPT record changed what the pointers decode to, so the answer served
/// to an EDNS client no longer parsed (found by the `reply_path` fuzzer). Replies are now
/// re-encoded, so the served answer parses whatever is patched.
#[test]
fn opt_is_added_after_kept_additional_records() {
    let reply = include_bytes!("regressions/reply_opt_after_additional.bin");
    for with_opt in [false, true] {
        let out = serve(reply, with_opt).expect("the reply is well-formed and cached");
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(
            msg.opt().is_some(),
            with_opt,
            "the client's EDNS decides the OPT"
        );
        for record in msg.additional().unwrap() {
            record.expect("every served record parses");
        }
    }
}

#[test]
fn well_formed_compressed_reply_is_served_with_opt() {
    // www.example.com A: answer owner compressed to the question, CNAME target compressed.
    let mut reply = vec![0x11, 0x11, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
    reply.extend_from_slice(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
    reply.extend_from_slice(&[
        0xc0, 0x0c, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 3, b'w', b'e', b'b', 0xc0, 0x10,
    ]);
    reply.extend_from_slice(&[0xc0, 0x2d, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 192, 0, 2, 9]);
    for with_opt in [false, true] {
        let out = serve(&reply, with_opt).expect("valid reply is cached");
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.opt().is_some(), with_opt);
        assert_eq!(msg.answer().unwrap().count(), 2);
    }
}
