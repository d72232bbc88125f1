//! Arbitrary bytes as the answer stream of a transfer the secondary asked for: a first byte
//! (bit 0: an IXFR), four bytes of our serial, then the stream as TCP carries it (each message
//! behind its two-byte length; message ID 0). Never panics; a finished stream is a zone whose
//! first record is the apex SOA, or diffs that lead from our serial, one after another; nothing
//! is accepted after the end. Seeds: an AXFR, an incremental and an AXFR-style IXFR answer.
#![no_main]

use kudurru_core::zone::xfr::{Incoming, Progress, Received, soa_serial};
use libfuzzer_sys::fuzz_target;

const APEX: &[u8] = b"\x04corp\x07example\x00";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((serial, mut stream)) = rest.split_first_chunk::<4>() else {
        return;
    };
    let ixfr_from = (flags & 1 == 1).then(|| u32::from_be_bytes(*serial));
    let mut incoming = Incoming::new(APEX, 0, ixfr_from, 10_000);
    while let Some((len, tail)) = stream.split_first_chunk::<2>() {
        let len = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (message, tail) = tail.split_at(len);
        stream = tail;
        match incoming.message(message) {
            Ok(Progress::More) => {}
            Ok(Progress::Done(received)) => {
                match received {
                    Received::Full(records) => {
                        assert!(records.first().and_then(soa_serial).is_some());
                        assert!(records[0].owner.as_ref() == APEX);
                    }
                    Received::Diffs(diffs) => {
                        assert_eq!(diffs.first().map(|d| d.from), ixfr_from);
                        assert!(diffs.windows(2).all(|w| w[0].to == w[1].from));
                    }
                    Received::UpToDate => assert!(ixfr_from.is_some()),
                }
                assert!(incoming.message(message).is_err(), "nothing after the end");
                return;
            }
            Err(_) => return,
        }
    }
});
