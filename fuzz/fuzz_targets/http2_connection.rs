//! Arbitrary client bytes through kudurru's sans-IO HTTP/2 server connection, after a valid
//! preface and SETTINGS (so frames are reached), in reads of arbitrary sizes, with requests
//! answered, cancelled or left open as the input says: never panics; everything written parses
//! as frames no larger than the default frame size; a connection error writes GOAWAY last and
//! then refuses all input; streams open stay within the limit; a stream is delivered at most
//! once; each request's body is within the body limit.
#![no_main]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kudurru_core::http2::{Config, Connection, Field, frame};
use libfuzzer_sys::fuzz_target;

const CONFIG: Config = Config {
    max_streams: 8,
    max_head: 2048,
    max_body: 1024,
    connection_window: 4096,
};

fuzz_target!(|data: &[u8]| {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let mut connection = Connection::new(CONFIG);
    let mut input = frame::PREFACE.to_vec();
    frame::settings(&mut input, &[]);
    input.extend_from_slice(data);
    let now = Instant::now();
    let mut requests = Vec::new();
    let mut delivered = HashSet::new();
    let mut buffer = Vec::new();
    let mut failed = false;
    let step = usize::from(control % 17) + 1;
    for (n, chunk) in input.chunks(step).enumerate() {
        buffer.extend_from_slice(chunk);
        match connection.receive(&buffer, now, &mut requests) {
            Ok(used) => {
                assert!(!failed, "input taken after a connection error");
                buffer.drain(..used);
                assert!(buffer.len() < frame::HEADER_LEN + frame::DEFAULT_MAX_FRAME_SIZE as usize);
            }
            Err(e) => {
                assert!(!e.reason.is_empty());
                failed = true;
                buffer.clear();
            }
        }
        assert!(connection.open_streams() <= CONFIG.max_streams as usize);
        for request in requests.drain(..) {
            assert!(delivered.insert(request.stream), "stream delivered twice");
            assert_eq!(request.stream % 2, 1);
            if let Ok(body) = &request.body {
                assert!(body.len() <= CONFIG.max_body);
            }
            match (control >> 5, n % 3) {
                (0, _) | (_, 0) => connection.respond(
                    request.stream,
                    200,
                    &[Field {
                        name: b"content-type",
                        value: b"application/dns-message",
                        remember: true,
                    }],
                    &vec![7; usize::from(control) * 40],
                ),
                (_, 1) => connection.cancel(request.stream),
                _ => {}
            }
        }
        connection.expire(
            now + Duration::from_secs(n as u64),
            Duration::from_secs(3),
            &mut requests,
        );
        let output = connection.output().to_vec();
        connection.sent(output.len());
        let mut rest = &output[..];
        let mut last_kind = None;
        while !rest.is_empty() {
            let header = frame::Header::parse(rest[..frame::HEADER_LEN].try_into().unwrap());
            assert!(header.length <= frame::DEFAULT_MAX_FRAME_SIZE);
            rest = &rest[frame::HEADER_LEN + header.length as usize..];
            last_kind = Some(header.kind);
        }
        if failed && !output.is_empty() {
            assert_eq!(last_kind, Some(frame::kind::GOAWAY));
        }
    }
});
