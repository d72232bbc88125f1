//! Arbitrary HTTP/1.1 request heads and GET/POST request parts through kudurru's DNS-over-HTTPS
//! rules: never panics; a head that parses ends inside the input and never claims more than
//! `MAX_HEAD`; a GET's decoded message re-encodes to a `dns` parameter that decodes to the same
//! bytes; a chunked body decodes within its input and re-encodes to the same data; every
//! rejection maps to one of the statuses kudurru sends; `max_age` is total.
#![no_main]

use base64::Engine;
use kudurru_core::doh::{self, Request, RequestError};
use libfuzzer_sys::fuzz_target;

const PATH: &str = "/dns-query";
const STATUSES: [u16; 7] = [400, 404, 405, 413, 415, 431, 501];

fn known(e: RequestError) -> bool {
    STATUSES.contains(&e.status())
}

fuzz_target!(|data: &[u8]| {
    // 1. The bytes as the start of an HTTP/1.1 connection.
    match doh::parse_http1_head(data, PATH) {
        Ok(Some(head)) => {
            assert!(head.len <= data.len() && head.len <= doh::MAX_HEAD);
            match head.request {
                Ok(Request::Get(message)) => assert!(message.len() <= doh::MAX_MESSAGE),
                Ok(Request::Post) => {}
                Err(e) => assert!(known(e), "{e:?}"),
            }
        }
        Ok(None) => assert!(data.len() < doh::MAX_HEAD),
        Err(e) => assert!(known(e), "{e:?}"),
    }
    // 2. The bytes as request parts: method selector, target up to a NUL, the rest as a
    //    content type and as a message.
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let method: &[u8] = match selector % 3 {
        0 => b"GET",
        1 => b"POST",
        _ => b"PATCH",
    };
    let (target, tail) = match rest.iter().position(|&b| b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    match doh::request(method, target, PATH, Some(tail)) {
        Ok(Request::Get(message)) => {
            assert!(message.len() <= doh::MAX_MESSAGE);
            let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&message);
            let again = format!("{PATH}?dns={encoded}");
            assert_eq!(
                doh::request(b"GET", again.as_bytes(), PATH, None),
                Ok(Request::Get(message))
            );
        }
        Ok(Request::Post) => assert_eq!(method, b"POST"),
        Err(e) => assert!(known(e), "{e:?}"),
    }
    // 3. The tail as a chunked body: what decodes fits and re-encodes as one chunk that
    //    decodes to the same data.
    match doh::chunked_body(tail) {
        Ok(Some((body, len))) => {
            assert!(len <= tail.len() && len <= doh::MAX_CHUNKED);
            assert!(body.len() <= doh::MAX_MESSAGE);
            let mut again = Vec::new();
            if !body.is_empty() {
                again.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                again.extend_from_slice(&body);
                again.extend_from_slice(b"\r\n");
            }
            again.extend_from_slice(b"0\r\n\r\n");
            let len = again.len();
            assert_eq!(doh::chunked_body(&again), Ok(Some((body, len))));
        }
        Ok(None) => assert!(tail.len() < doh::MAX_CHUNKED),
        Err(e) => assert!(known(e), "{e:?}"),
    }
    let _ = doh::check_message(tail);
    let _ = doh::max_age(tail);
    if let Some(ttl) = doh::min_ttl(tail) {
        assert_eq!(doh::max_age(tail), ttl);
    }
});
