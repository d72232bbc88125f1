//! `kudurru_core::querylog::summarize` over an arbitrary query and response (the first byte
//! splits the input): never panics, and what it says stays in bounds: the name is empty or
//! printable lowercase ASCII ending in a dot, at most `ANSWERS_MAX` answers of bounded length,
//! and no rcode without a response.
#![no_main]

use kudurru_core::querylog::{ANSWER_TEXT_MAX, ANSWERS_MAX, summarize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (query, response) = rest.split_at(at);
    let summary = summarize(query, response);
    assert!(summary.qname.is_empty() || summary.qname.ends_with('.'));
    assert!(
        summary
            .qname
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()),
        "{:?}",
        summary.qname
    );
    // 255 wire bytes at most 4 characters each (`\DDD`).
    assert!(summary.qname.len() <= 4 * 255);
    assert!(summary.answers.len() <= ANSWERS_MAX);
    for answer in &summary.answers {
        // A name in an answer is at most 4 * 255 characters; other data is cut.
        assert!(
            answer.chars().count() <= ANSWER_TEXT_MAX + 16 + 4 * 255,
            "{answer}"
        );
    }
    if response.len() < 12 {
        assert_eq!(summary.rcode, None);
    }
    if summary.rcode.is_none() {
        assert!(summary.answers.is_empty() && summary.ede.is_none() && !summary.truncated);
    }
});
