//! What HTTP/2 and HTTP/3 share, so that neither version owns it: the prefixed integers and the
//! Huffman code of HPACK, which QPACK reuses (RFC 7541 §5.1 and Appendix B, RFC 9204 §4.1),
//! the request head checked field by field as it is decoded (RFC 9113 §8.2 and §8.3, which
//! RFC 9114 §4.2 and §4.3 repeat), and why a request body was not delivered.
//!
//! ```text
//! http2::hpack ─┐                  ┌─ integer, huffman
//!               ├─▶ http ──────────┤
//! http3::qpack ─┘                  └─ head (Method, Malformed, HeadBuilder), BodyError
//! ```

pub(crate) mod head;
pub(crate) mod huffman;
pub mod integer;

pub use head::{Malformed, Method};

/// Why a request has no usable body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The field section is over the head limit the connection was configured with (answer 431).
    #[error("request head too large")]
    HeadTooLarge,
    /// The body is, or says it will be, over the body limit the connection was configured with (answer 413).
    #[error("request body too large")]
    TooLarge,
    /// The body did not end in time (answer 408): the connection's `expire` delivered it as it was.
    #[error("request body timed out")]
    TimedOut,
}

/// Octets from hex digits, ignoring anything else (spaces, separators): the RFC examples as
/// they are printed.
#[cfg(test)]
pub(crate) fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}
