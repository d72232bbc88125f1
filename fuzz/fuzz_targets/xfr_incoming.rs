//! Arbitrary messages as the answer stream of a transfer the secondary asked for: never
//! panics; a finished stream is a zone whose first record is the apex SOA, or diffs that lead
//! from the serial asked for.
#![no_main]

use kudurru_core::zone::xfr::{Incoming, Progress, Received, soa_serial};
use libfuzzer_sys::fuzz_target;

const APEX: &[u8] = b"\x04corp\x07example\x00";

fuzz_target!(|input: (Option<u32>, Vec<Vec<u8>>)| {
    let (ixfr_from, messages) = input;
    let mut incoming = Incoming::new(APEX, 0, ixfr_from, 10_000);
    for message in messages {
        match incoming.message(&message) {
            Ok(Progress::More) => {}
            Ok(Progress::Done(Received::Full(records))) => {
                assert!(records.first().and_then(soa_serial).is_some());
                return;
            }
            Ok(Progress::Done(Received::Diffs(diffs))) => {
                assert_eq!(diffs.first().map(|d| d.from), ixfr_from);
                return;
            }
            Ok(Progress::Done(Received::UpToDate)) | Err(_) => return,
        }
    }
});
