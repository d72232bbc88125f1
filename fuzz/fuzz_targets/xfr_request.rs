//! Arbitrary bytes as an AXFR/IXFR request on the core, from an allowed and a refused client,
//! with and without a key, planned from a record list and from a compiled zone (streamed):
//! never panics; every message of a transfer fits a TCP frame.
#![no_main]

use std::str::FromStr;
use std::sync::Arc;

use domain::tsig::{Algorithm, Key, KeyName};
use kudurru_core::zone::xfr::{Journal, Transfer, TransferPolicy};
use kudurru_core::zone::{Record, Zone, ZoneData, ZoneKind};
use libfuzzer_sys::fuzz_target;

fn soa() -> Record {
    let mut rdata = b"\x03ns1\x04corp\x07example\x00\x0ahostmaster\x04corp\x07example\x00".to_vec();
    for value in [5u32, 3600, 600, 86400, 300] {
        rdata.extend_from_slice(&value.to_be_bytes());
    }
    Record {
        owner: b"\x04corp\x07example\x00".to_vec().into(),
        rtype: 6,
        ttl: 3600,
        rdata: rdata.into(),
    }
}

// The first byte: bit 0 client allowed, bit 1 planned from a compiled zone (the seeds from
// before that bit keep their meaning); the second: zone keyed.
fuzz_target!(|input: (u8, bool, &[u8])| {
    let (flags, keyed, request) = input;
    let (allowed, compiled) = (flags & 1 != 0, flags & 2 != 0);
    let key = keyed.then(|| {
        Arc::new(
            Key::new(
                Algorithm::Sha256,
                b"0123456789abcdef",
                KeyName::from_str("k.").unwrap(),
                None,
                None,
            )
            .unwrap(),
        )
    });
    let policy = TransferPolicy {
        allow: vec![("127.0.0.0".parse().unwrap(), 8)],
        key,
    };
    let client = if allowed { "127.0.0.1" } else { "192.0.2.1" };
    let records = vec![Record {
        owner: b"\x03www\x04corp\x07example\x00".to_vec().into(),
        rtype: 1,
        ttl: 300,
        rdata: vec![192, 0, 2, 1].into(),
    }];
    let planned = if compiled {
        let apex_ns = Record {
            owner: b"\x04corp\x07example\x00".to_vec().into(),
            rtype: 2,
            ttl: 3600,
            rdata: b"\x03ns1\x04corp\x07example\x00".to_vec().into(),
        };
        let mut all = vec![soa(), apex_ns];
        all.extend(records);
        let data = ZoneData {
            apex: b"\x04corp\x07example\x00".to_vec().into(),
            records: all,
            origins: Vec::new(),
        };
        let zone = Arc::new(Zone::compile(&data, ZoneKind::Primary).unwrap());
        Transfer::plan_zone(
            &policy,
            &Journal::default(),
            &zone,
            request,
            client.parse().unwrap(),
            1_700_000_000,
        )
    } else {
        Transfer::plan(
            &policy,
            &Journal::default(),
            5,
            || (Some(soa()), records),
            request,
            client.parse().unwrap(),
            1_700_000_000,
        )
    };
    match planned {
        Ok(mut transfer) => {
            assert!(allowed);
            while let Some(message) = transfer.next_message() {
                assert!(message.len() <= usize::from(u16::MAX));
            }
        }
        Err(answer) => assert!(answer.len() >= 12 && answer.len() <= usize::from(u16::MAX)),
    }
});
