//! Arbitrary bytes, split into arbitrary reads, through the TCP frame buffer: never panics,
//! yields exactly the messages a one-shot split of the whole stream yields, in order, whatever the
//! read sizes, and keeps the unfinished tail pending.
#![no_main]

use kudurru_core::FrameBuffer;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    /// Read sizes, cycled (0 counts as 1).
    reads: Vec<u16>,
    stream: Vec<u8>,
}

/// The reference: frames of the whole stream at once, and the leftover byte count.
fn split(mut bytes: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut frames = Vec::new();
    while bytes.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
        if bytes.len() < 2 + len {
            break;
        }
        frames.push(bytes[2..2 + len].to_vec());
        bytes = &bytes[2 + len..];
    }
    (frames, bytes.len())
}

fuzz_target!(|input: Input| {
    let (expected, leftover) = split(&input.stream);
    let mut buffer = FrameBuffer::new();
    let mut got = Vec::new();
    let mut rest = input.stream.as_slice();
    let mut reads = input.reads.iter().cycle();
    while !rest.is_empty() {
        let want = reads.next().map_or(4096, |&n| usize::from(n).max(1));
        let spare = buffer.spare();
        assert!(!spare.is_empty(), "spare is never empty");
        let n = spare.len().min(want).min(rest.len());
        spare[..n].copy_from_slice(&rest[..n]);
        buffer.filled(n);
        rest = &rest[n..];
        while let Some(frame) = buffer.next_frame() {
            got.push(frame);
        }
    }
    assert_eq!(got, expected);
    assert_eq!(buffer.pending(), leftover);
});
