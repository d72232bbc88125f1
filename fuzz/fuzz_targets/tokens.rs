//! Arbitrary bytes as the token file and an arbitrary presented token: never panics; a token is
//! accepted only in the `kdr_<id>_<secret>` form, for an id the file holds, before its expiry.
#![no_main]

use std::time::Duration;

use kudurru_control::tokens::{identify_among, parse_token_file};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&[u8], &str, u32)| {
    let (file, token, now) = input;
    let Ok(entries) = parse_token_file(file) else {
        return;
    };
    let now = u64::from(now);
    if let Ok((_, id)) = identify_among(&entries, token, Duration::from_secs(90 * 86_400), now) {
        assert!(token.starts_with(&format!("kdr_{id}_")), "{token}");
        assert!(
            entries.iter().any(|e| e.id == id && now < e.expires),
            "accepted without a current entry of that id"
        );
    }
});
