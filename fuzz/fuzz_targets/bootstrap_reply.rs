//! Arbitrary bytes as a bootstrap resolver's reply to an A or AAAA query for a host name in an
//! upstream URL: `core::bootstrap::parse_reply` never panics; accepted addresses are of the type
//! asked, without duplicates, and come with a TTL only when there are some; a reply whose ID is
//! not the query's is foreign.
#![no_main]

use kudurru_core::bootstrap::{BootstrapError, parse_reply};
use kudurru_core::wire::{self, rtype};
use libfuzzer_sys::fuzz_target;

const HOST: &str = "upstream.test.example";

fuzz_target!(|data: &[u8]| {
    let Some(id) = wire::message_id(data) else {
        assert!(parse_reply(data, HOST, rtype::A, 0).is_err());
        return;
    };
    for qtype in [rtype::A, rtype::AAAA] {
        if let Ok(answer) = parse_reply(data, HOST, qtype, id) {
            assert!(
                answer
                    .addrs
                    .iter()
                    .all(|a| a.is_ipv4() == (qtype == rtype::A))
            );
            for (i, a) in answer.addrs.iter().enumerate() {
                assert!(!answer.addrs[..i].contains(a), "duplicate {a}");
            }
            if answer.addrs.is_empty() {
                assert_eq!(answer.ttl, 0);
            }
            assert!(answer.ttl <= i32::MAX as u32);
        }
        assert_eq!(
            parse_reply(data, HOST, qtype, id.wrapping_add(1)),
            Err(BootstrapError::Foreign)
        );
    }
});
