//! Arbitrary server bytes through the sans-IO HTTP/2 client DoH upstreams use
//! (`core::http2::client`), after queries sent, in reads of arbitrary sizes: never panics;
//! everything it writes parses as frames; each query has at most one outcome, with its own
//! tag; an answer's body is within 64 KiB; once it refused the input (a connection error) it
//! is not fed again, as the upstream pool drops the connection.
#![no_main]

use std::collections::HashSet;

use kudurru_core::http2::client::{Client, Method, Outcome};
use kudurru_core::http2::frame::{self, Header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let method = if control & 0x80 == 0 {
        Method::Post
    } else {
        Method::Get
    };
    let mut client = Client::new("https://dns.example/dns-query", method);
    let queries = u16::from(control & 0x7) + 1;
    for tag in 0..queries {
        client
            .send(vec![tag as u8; 12 + usize::from(tag)], tag)
            .unwrap();
    }
    let step = usize::from((control >> 3) & 0xf) + 1;
    let mut outcomes = HashSet::new();
    let mut buffer = Vec::new();
    let mut output = Vec::new();
    for chunk in data.chunks(step) {
        buffer.extend_from_slice(chunk);
        let result = client.receive(&buffer, &mut |outcome| {
            let tag = match outcome {
                Outcome::Answer(tag, body) => {
                    assert!(body.len() <= usize::from(u16::MAX));
                    tag
                }
                Outcome::Failed(tag, _) => tag,
            };
            assert!(tag < queries, "a tag that was never sent");
            assert!(outcomes.insert(tag), "two outcomes for one query");
        });
        let Ok(used) = result else {
            return;
        };
        assert!(used <= buffer.len());
        buffer.drain(..used);
        client.take_output(&mut output);
        let mut at = 0;
        // What the client writes is whole frames (the preface first).
        if output.starts_with(frame::PREFACE) {
            at = frame::PREFACE.len();
        }
        while at < output.len() {
            let header: &[u8; frame::HEADER_LEN] = output[at..at + frame::HEADER_LEN]
                .try_into()
                .expect("a whole frame header");
            at += frame::HEADER_LEN + Header::parse(header).length as usize;
        }
        assert_eq!(at, output.len(), "whole frames only");
    }
});
