//! Arbitrary field blocks through kudurru's HPACK decoder, several blocks on one decoder (the
//! dynamic table carries over): never panics; what decodes re-encodes with kudurru's encoder
//! and decodes back to the same fields on a fresh decoder pair.
#![no_main]

use kudurru_core::http2::hpack::{Decoder, Encoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(4096);
    let mut encoder = Encoder::new(256);
    let mut mirror = Decoder::new(4096);
    for block in data.split(|&b| b == 0xff) {
        let mut fields = Vec::new();
        if decoder
            .decode(block, |name, value| {
                fields.push((name.to_vec(), value.to_vec()))
            })
            .is_err()
        {
            return;
        }
        let mut encoded = Vec::new();
        encoder.begin_block(&mut encoded);
        for (name, value) in &fields {
            let name = name.to_ascii_lowercase();
            encoder.field(&name, value, value.len() % 2 == 0, &mut encoded);
        }
        let mut again = Vec::new();
        mirror
            .decode(&encoded, |name, value| {
                again.push((name.to_vec(), value.to_vec()))
            })
            .expect("kudurru's own encoding decodes");
        let lowered: Vec<_> = fields
            .iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
            .collect();
        assert_eq!(again, lowered);
    }
});
