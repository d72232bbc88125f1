//! DNS over QUIC (RFC 9250), sans-IO: what one client stream must carry, and the error codes.
//!
//! ```text
//! stream bytes (read to FIN) ─▶ query() ─┬ Ok(message) ─▶ pipeline ─▶ frame(answer) ─▶ FIN
//!                                        └ Err(ProtocolError) ─▶ CONNECTION_CLOSE(DOQ_PROTOCOL_ERROR)
//! ```
//! A stream holds exactly one query: a 2-octet length and that many bytes, then FIN (§4.2).
//! The protocol errors of §4.3.3 a server can see in one stream are fatal to the connection:
//! a FIN before the whole message, more than one message, a non-zero message ID (§4.2.1), and
//! edns-tcp-keepalive (§5.5.2). Anything else (a malformed message past its header) is the
//! pipeline's to answer, as on every transport.

use crate::wire::{self, Query};

/// ALPN protocol of DNS over QUIC (RFC 9250 §4.1).
pub const ALPN: &[u8] = b"doq";

/// Most bytes a client stream may carry: the length prefix and a maximum-size message.
pub const MAX_STREAM: usize = 2 + 65_535;

/// DoQ application error codes (RFC 9250 §4.3, IANA "DNS-over-QUIC Error Codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    /// No error: used when the connection or stream is closed normally.
    NoError = 0x0,
    /// The DoQ implementation hit an internal error and cannot go on with the transaction.
    InternalError = 0x1,
    /// The peer violated the DoQ protocol.
    ProtocolError = 0x2,
    /// A request is cancelled (a stream reset by the side that gives up on it).
    RequestCancelled = 0x3,
    /// The server is too busy to serve the connection.
    ExcessiveLoad = 0x4,
    /// No more specific code applies.
    UnspecifiedError = 0x5,
}

impl ErrorCode {
    /// The code on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// A protocol error in a client stream (RFC 9250 §4.3.3): fatal to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// FIN came before the 2-octet length, or before the bytes it announced.
    #[error("stream ended before the whole message (RFC 9250 §4.3.3)")]
    Truncated,
    /// Bytes after the message: a stream carries exactly one query (§4.2).
    #[error("more than one message on a stream (RFC 9250 §4.2)")]
    Trailing,
    /// A message ID other than 0 (§4.2.1).
    #[error("message ID is not 0 (RFC 9250 §4.2.1)")]
    NonZeroId,
    /// edns-tcp-keepalive in the query (§5.5.2).
    #[error("edns-tcp-keepalive is not allowed on DoQ (RFC 9250 §5.5.2)")]
    Keepalive,
    /// More than [`MAX_STREAM`] bytes.
    #[error("stream longer than the largest DNS message")]
    TooLong,
}

impl ProtocolError {
    /// The DoQ error code the connection closes with.
    pub fn code(self) -> ErrorCode {
        ErrorCode::ProtocolError
    }

    /// A short reason for CONNECTION_CLOSE and the logs.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Truncated => "truncated message",
            Self::Trailing => "more than one message on a stream",
            Self::NonZeroId => "message ID must be 0",
            Self::Keepalive => "edns-tcp-keepalive not allowed",
            Self::TooLong => "stream too long",
        }
    }
}

/// The DNS message of a client stream read to its FIN.
pub fn query(stream: &[u8]) -> Result<&[u8], ProtocolError> {
    if stream.len() > MAX_STREAM {
        return Err(ProtocolError::TooLong);
    }
    let declared = wire::read_u16(stream, 0).ok_or(ProtocolError::Truncated)? as usize;
    let message = &stream[2..];
    if message.len() < declared {
        return Err(ProtocolError::Truncated);
    }
    if message.len() > declared {
        return Err(ProtocolError::Trailing);
    }
    // Shorter than an ID: garbage, which the pipeline drops like on any transport.
    if wire::message_id(message).is_some_and(|id| id != 0) {
        return Err(ProtocolError::NonZeroId);
    }
    // Only a message with additional records can carry OPT: the common query is not parsed twice.
    if wire::read_u16(message, 10).is_some_and(|arcount| arcount > 0)
        && let Ok(query) = Query::parse(message)
        && query.edns().is_some_and(|edns| edns.tcp_keepalive)
    {
        return Err(ProtocolError::Keepalive);
    }
    Ok(message)
}

/// The DNS message of a server's stream read to its FIN (the client side, RFC 9250 §4.2): a
/// 2-octet length and exactly that many bytes. The message itself (its ID must be 0, its
/// question the query's) is the caller's to check.
pub fn reply(stream: &[u8]) -> Result<&[u8], ProtocolError> {
    if stream.len() > MAX_STREAM {
        return Err(ProtocolError::TooLong);
    }
    let declared = wire::read_u16(stream, 0).ok_or(ProtocolError::Truncated)? as usize;
    let message = stream.get(2..).ok_or(ProtocolError::Truncated)?;
    match message.len().cmp(&declared) {
        std::cmp::Ordering::Less => Err(ProtocolError::Truncated),
        std::cmp::Ordering::Greater => Err(ProtocolError::Trailing),
        std::cmp::Ordering::Equal => Ok(message),
    }
}

/// `answer` framed for a DoQ stream: the 2-octet length, then the message.
pub fn frame(answer: &[u8]) -> Vec<u8> {
    framed(answer.to_vec())
}

/// [`frame`] in place: the length goes in front of `answer`'s own bytes, no second buffer.
pub fn framed(mut answer: Vec<u8>) -> Vec<u8> {
    let len = answer.len().min(usize::from(u16::MAX)) as u16;
    answer.splice(0..0, len.to_be_bytes());
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `example.com. A` with `id`, and an OPT record carrying `options`.
    fn message(id: u16, options: Option<&[u8]>) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(options.is_some())]);
        m.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
        if let Some(options) = options {
            m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
            m.extend_from_slice(&(options.len() as u16).to_be_bytes());
            m.extend_from_slice(options);
        }
        m
    }

    #[test]
    fn framing_in_place_prefixes_the_length() {
        let m = message(0, None);
        let stream = framed(m.clone());
        assert_eq!(
            usize::from(u16::from_be_bytes([stream[0], stream[1]])),
            m.len()
        );
        assert_eq!(&stream[2..], &m[..]);
        assert_eq!(stream, frame(&m));
        assert_eq!(framed(Vec::new()), vec![0, 0]);
    }

    #[test]
    fn a_stream_carries_one_length_prefixed_query_with_id_zero() {
        let m = message(0, None);
        let stream = frame(&m);
        assert_eq!(&stream[..2], &(m.len() as u16).to_be_bytes());
        assert_eq!(query(&stream), Ok(&m[..]));
        // Padding is fine; only keepalive is refused.
        let padded = frame(&message(0, Some(&[0, 12, 0, 3, 0, 0, 0])));
        assert!(query(&padded).is_ok());
    }

    #[test]
    fn each_protocol_error_of_rfc_9250_is_named() {
        let m = message(0, None);
        let stream = frame(&m);
        assert_eq!(query(&[]), Err(ProtocolError::Truncated));
        assert_eq!(query(&stream[..1]), Err(ProtocolError::Truncated));
        assert_eq!(
            query(&stream[..stream.len() - 1]),
            Err(ProtocolError::Truncated)
        );
        let mut two = stream.clone();
        two.extend_from_slice(&stream);
        assert_eq!(query(&two), Err(ProtocolError::Trailing));
        assert_eq!(
            query(&frame(&message(0x1234, None))),
            Err(ProtocolError::NonZeroId)
        );
        let keepalive = frame(&message(0, Some(&[0, 11, 0, 0])));
        assert_eq!(query(&keepalive), Err(ProtocolError::Keepalive));
        assert_eq!(
            query(&vec![0xff; MAX_STREAM + 1]),
            Err(ProtocolError::TooLong)
        );
        assert_eq!(ProtocolError::NonZeroId.code().code(), 0x2);
        assert_eq!(ErrorCode::RequestCancelled.code(), 0x3);
    }

    #[test]
    fn garbage_past_the_prefix_is_left_to_the_pipeline() {
        // One byte: no ID to check; the pipeline drops it like any unparseable message.
        assert_eq!(query(&[0, 1, 0xab]), Ok(&[0xab][..]));
        // A header with ID 0 and a broken question: FORMERR is the pipeline's answer.
        let mut m = message(0, None);
        m.truncate(15);
        assert_eq!(query(&frame(&m)), Ok(&m[..]));
    }

    #[test]
    fn a_server_stream_carries_exactly_one_length_prefixed_reply() {
        let answer = message(0, None);
        assert_eq!(reply(&frame(&answer)), Ok(&answer[..]));
        let mut long = frame(&answer);
        long.push(0);
        assert_eq!(reply(&long), Err(ProtocolError::Trailing));
        let short = frame(&answer);
        assert_eq!(
            reply(&short[..short.len() - 1]),
            Err(ProtocolError::Truncated)
        );
        assert_eq!(reply(&[0x00]), Err(ProtocolError::Truncated));
        assert_eq!(reply(&[]), Err(ProtocolError::Truncated));
        // The ID is the caller's to check (it matches the reply against its query).
        assert_eq!(reply(&frame(&message(7, None))).map(|m| m[1]), Ok(7));
        assert_eq!(reply(&vec![0; MAX_STREAM + 1]), Err(ProtocolError::TooLong));
    }
}
