//! An upstream's TCP (or DoT) reply stream, in arbitrary reads, through what a pooled connection
//! does with it (`transports/src/upstream/tcp.rs`): the frame buffer cuts it into messages, each
//! goes to the query registered under its message ID, and that query validates it against its
//! own question. Never panics; a frame is handed to at most one query; an accepted answer
//! answers exactly the question of the query it went to; a frame with no registered ID is
//! dropped as mismatched.
#![no_main]

use std::time::Instant;

use kudurru_core::wire;
use kudurru_core::{CacheKey, CachedAnswer, FrameBuffer, TtlPolicy};
use libfuzzer_sys::fuzz_target;

/// The questions of the four waiting queries.
const QUESTIONS: [(&[u8], u16); 4] = [
    (b"\x07example\x03com\x00", 1),
    (b"\x07example\x03com\x00", 28),
    (b"\x03www\x07example\x03org\x00", 1),
    (b"\x07example\x03net\x00", 15),
];

// The input: the IDs the four waiting queries were sent with (4 x 2 bytes; a repeated one waits
// once, as a pool never hands out an ID in use), one byte of read-size seed, then the stream.
fuzz_target!(|data: &[u8]| {
    let Some((head, stream)) = data.split_at_checked(9) else {
        return;
    };
    let ids = [0, 2, 4, 6].map(|i| u16::from_be_bytes([head[i], head[i + 1]]));
    // Read sizes from 1 to 256 bytes, stepping by the seed: every split of frames is reachable.
    let step = usize::from(head[8]) + 1;
    let mut waiting: Vec<(u16, CacheKey)> = Vec::new();
    for (&id, &(name, qtype)) in ids.iter().zip(&QUESTIONS) {
        if waiting.iter().any(|(taken, _)| *taken == id) {
            continue;
        }
        let key = CacheKey::new(name, qtype, 1, false, false).expect("a valid test question");
        waiting.push((id, key));
    }
    let policy = TtlPolicy::default();
    let mut buffer = FrameBuffer::new();
    let mut rest = stream;
    let mut read = 0usize;
    let (mut delivered, mut mismatched) = (0usize, 0usize);
    loop {
        while let Some(frame) = buffer.next_frame() {
            let Some(id) = wire::message_id(&frame) else {
                mismatched += 1;
                continue;
            };
            let mut takers = waiting.iter().filter(|(waiting_id, _)| *waiting_id == id);
            let Some((_, key)) = takers.next() else {
                mismatched += 1;
                continue;
            };
            assert!(takers.next().is_none(), "one query per ID");
            delivered += 1;
            if let Ok(answer) = CachedAnswer::from_reply(&frame, key, id, Instant::now(), &policy) {
                assert!(answer.matches(key), "an answer to the question asked");
                for (other_id, other) in &waiting {
                    if *other_id != id && other.question() != key.question() {
                        assert!(!answer.matches(other), "an answer to one question only");
                    }
                }
            }
        }
        if rest.is_empty() {
            break;
        }
        read = (read + step) % 256;
        let want = read + 1;
        let spare = buffer.spare();
        let n = want.min(spare.len()).min(rest.len());
        spare[..n].copy_from_slice(&rest[..n]);
        buffer.filled(n);
        rest = &rest[n..];
    }
    assert!(delivered + mismatched <= stream.len() / 2);
});
