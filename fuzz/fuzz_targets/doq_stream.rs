//! Arbitrary DNS-over-QUIC client streams (the bytes up to FIN) through kudurru's RFC 9250
//! rules: never panics; an accepted stream is exactly one length-prefixed message with ID 0
//! (or too short to carry one), which `frame` turns back into the same bytes; every rejection
//! closes with DOQ_PROTOCOL_ERROR; and a stream accepted whole is refused once a byte is
//! appended (more than one message) or removed (truncated).
#![no_main]

use kudurru_core::doq::{self, ErrorCode, ProtocolError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match doq::query(data) {
        Ok(message) => {
            assert_eq!(data.len(), message.len() + 2);
            assert_eq!(&data[2..], message);
            if message.len() >= 2 {
                assert_eq!(&message[..2], &[0, 0], "only ID 0 is accepted");
            }
            assert_eq!(doq::frame(message), data);
            let mut longer = data.to_vec();
            longer.push(0);
            assert!(matches!(
                doq::query(&longer),
                Err(ProtocolError::Trailing | ProtocolError::TooLong)
            ));
            assert_eq!(
                doq::query(&data[..data.len() - 1]),
                Err(ProtocolError::Truncated)
            );
        }
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::ProtocolError);
            assert!(!e.reason().is_empty());
        }
    }
});
