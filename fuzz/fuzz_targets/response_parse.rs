//! Arbitrary upstream replies through validation, canonicalisation and per-client patching: never
//! panics; every answer served parses, carries the client's ID and question, and fits the UDP
//! limit or has TC set. The same holds for the answer's stale copy (RFC 8767), whose every
//! record has TTL 30 and whose OPT, when the client sent one, carries EDE 3.
#![no_main]

use std::time::{Duration, Instant};

use domain::base::Message;
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{CacheKey, CachedAnswer, TtlPolicy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(id) = wire::message_id(data) else {
        return;
    };
    // Ask the question the reply claims to answer, so validation gets past the question check.
    let key = wire::skip_name(data, wire::HEADER_LEN).and_then(|end| {
        let qtype = wire::read_u16(data, end)?;
        let qclass = wire::read_u16(data, end + 2)?;
        CacheKey::new(
            &data[wire::HEADER_LEN..end],
            qtype,
            qclass,
            data[3] & 1 != 0,
            false,
        )
    });
    let key = key.unwrap_or_else(|| CacheKey::new(b"\x07example\x00", 1, 1, false, false).unwrap());
    let now = Instant::now();
    let Ok(answer) = CachedAnswer::from_reply(data, &key, id, now, &TtlPolicy::default()) else {
        return;
    };
    assert!(answer.matches(&key));
    // Made when it is served (below, 7 s on), as the resolver does.
    let stale = answer.stale_copy(now + Duration::from_secs(7));
    assert!(stale.matches(&key) && stale.is_stale());
    for (served, is_stale) in [(&answer, false), (&stale, true)] {
        for with_opt in [false, true] {
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
            let Ok(q) = Query::parse(&query) else { return };
            for limit in [Some(q.udp_limit(1232)), None] {
                let mut out = Vec::new();
                let truncated = served.write_response(
                    &q,
                    now + Duration::from_secs(7),
                    limit,
                    &ReplyOptions::udp(1232),
                    &mut out,
                );
                let msg = Message::from_slice(&out).expect("served answers parse");
                assert_eq!(msg.header().id(), 0xbeef);
                assert!(msg.header().qr());
                assert_eq!(&out[12..12 + key.question().len()], key.question());
                if let Some(limit) = limit {
                    assert!(out.len() <= limit || truncated, "{} > {limit}", out.len());
                    assert!(out.len() <= limit, "even truncated answers fit");
                }
                assert_eq!(msg.opt().is_some(), with_opt);
                if is_stale {
                    for record in msg.answer().expect("sections parse").flatten() {
                        assert_eq!(record.ttl().as_secs(), 30, "a stale record's TTL");
                    }
                    if with_opt {
                        assert_eq!(&out[out.len() - 6..], &[0, 15, 0, 2, 0, 3], "EDE 3 last");
                    }
                }
            }
        }
    }
});
