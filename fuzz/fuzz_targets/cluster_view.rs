//! A member's `/internal/zones` answer (`kudurru_control::cluster::peers::parse_view`): what
//! another node sends is peer input, so arbitrary bytes answer an error or a view, never a
//! panic; an accepted view is within the size limit and survives a round trip unchanged.
#![no_main]

use kudurru_control::cluster::peers::{MAX_VIEW, parse_view};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(view) = parse_view(data) else {
        return;
    };
    assert!(data.len() <= MAX_VIEW);
    let again = serde_json::to_vec(&view).expect("a view encodes");
    assert_eq!(parse_view(&again).expect("its own encoding parses"), view);
});
