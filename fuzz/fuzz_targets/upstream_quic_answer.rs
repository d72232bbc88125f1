//! Arbitrary server streams (the bytes up to FIN) as a DoQ or DoH3 upstream's reply to one
//! query: the first byte picks the protocol (bit 0: DoH3), the rest is the stream. Never
//! panics; a DoQ stream accepted is exactly one length-prefixed message that `frame` turns
//! back into the same bytes, and is refused once a byte is appended or removed; a DoH3
//! response is a final status (200..=599) and a body no longer than the stream, and parsing
//! it again gives the same. (What the message then says is `response_parse`'s.)
#![no_main]

use kudurru_core::doq::{self, ProtocolError};
use kudurru_core::http3::client;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, stream)) = data.split_first() else {
        return;
    };
    if selector & 1 == 0 {
        if let Ok(message) = doq::reply(stream) {
            assert_eq!(doq::frame(message), stream);
            let mut longer = stream.to_vec();
            longer.push(0);
            assert!(matches!(
                doq::reply(&longer),
                Err(ProtocolError::Trailing | ProtocolError::TooLong)
            ));
            assert_eq!(
                doq::reply(&stream[..stream.len() - 1]),
                Err(ProtocolError::Truncated)
            );
        }
    } else if let Ok((status, body)) = client::response(stream) {
        assert!((200..=599).contains(&status), "{status}");
        assert!(body.len() <= stream.len());
        assert_eq!(client::response(stream), Ok((status, body)));
    }
});
