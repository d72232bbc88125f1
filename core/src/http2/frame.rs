//! HTTP/2 frames (RFC 9113 §4, §6): the nine-byte frame header, frame types, flags, settings,
//! error codes, and writers for every frame a server sends.
//!
//! ```text
//! +-----------------------------------------------+
//! |                 Length (24)                   |
//! +---------------+---------------+---------------+
//! |   Type (8)    |   Flags (8)   |
//! +-+-------------+---------------+-------------------------------+
//! |R|                 Stream Identifier (31)                      |
//! +=+=============================================================+
//! |                   Frame Payload (0...)                      ...
//! +---------------------------------------------------------------+
//! ```

/// What a client sends before its first frame (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of the frame header.
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE until a peer says otherwise, and the largest payload kudurru accepts.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE a peer may set (RFC 9113 §6.5.2).
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// Flow-control windows start here (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// SETTINGS_HEADER_TABLE_SIZE until a peer says otherwise (RFC 9113 §6.5.2).
pub const DEFAULT_HEADER_TABLE_SIZE: usize = 4096;

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// Request or response body bytes.
    pub const DATA: u8 = 0x0;
    /// Opens a stream and carries a field block (or trailers).
    pub const HEADERS: u8 = 0x1;
    /// Deprecated stream priority (RFC 9113 §6.3): parsed, ignored.
    pub const PRIORITY: u8 = 0x2;
    /// Ends a stream at once.
    pub const RST_STREAM: u8 = 0x3;
    /// Connection settings.
    pub const SETTINGS: u8 = 0x4;
    /// Server push; a client never sends it.
    pub const PUSH_PROMISE: u8 = 0x5;
    /// Liveness check, answered with an ACK.
    pub const PING: u8 = 0x6;
    /// Connection shutdown.
    pub const GOAWAY: u8 = 0x7;
    /// Flow-control credit.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// The rest of a field block.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6).
pub mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION: the field block ends in this frame.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS: a pad length byte leads the payload.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: an exclusive flag, stream dependency and weight follow.
    pub const PRIORITY: u8 = 0x20;
}

/// Setting identifiers (RFC 9113 §6.5.2).
pub mod setting {
    /// Largest HPACK dynamic table the sender's decoder allows.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// Whether server push is allowed (0 or 1).
    pub const ENABLE_PUSH: u16 = 0x2;
    /// Most streams the sender allows its peer to open at once.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// Initial stream-level flow-control window for the sender's receiving side.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// Largest frame payload the sender accepts.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// Largest field section the sender is prepared to accept (advisory).
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// An HTTP/2 error code (RFC 9113 §7), carried by RST_STREAM and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Graceful shutdown, or a stream no longer needed.
    pub const NO_ERROR: Self = Self(0x0);
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: Self = Self(0x1);
    /// Something unexpected on this side.
    pub const INTERNAL_ERROR: Self = Self(0x2);
    /// The peer broke flow control.
    pub const FLOW_CONTROL_ERROR: Self = Self(0x3);
    /// A frame on a stream already closed.
    pub const STREAM_CLOSED: Self = Self(0x5);
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: Self = Self(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: Self = Self(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Self = Self(0x8);
    /// The field block could not be decoded: the HPACK state is lost.
    pub const COMPRESSION_ERROR: Self = Self(0x9);
    /// The peer behaves in a way that might be generating excessive load.
    pub const ENHANCE_YOUR_CALM: Self = Self(0xb);
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload length.
    pub length: u32,
    /// Frame type ([`kind`]).
    pub kind: u8,
    /// Flags ([`flag`]).
    pub flags: u8,
    /// Stream identifier; the reserved bit is ignored on receipt (RFC 9113 §4.1).
    pub stream: u32,
}

impl Header {
    /// Reads a frame header.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Self {
        Self {
            length: u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & MAX_WINDOW,
        }
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends a frame header; `length` must be below 2^24.
fn put_header(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(length <= MAX_MAX_FRAME_SIZE as usize);
    let length = (length as u32).to_be_bytes();
    out.extend_from_slice(&length[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
}

/// Reserves a frame header to be filled in by [`finish`] once the payload is written; returns
/// where it starts.
pub fn start(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    at
}

/// Fills in the header reserved at `at` for the payload written since.
pub fn finish(out: &mut [u8], at: usize, kind: u8, flags: u8, stream: u32) {
    let length = (out.len() - at - HEADER_LEN) as u32;
    debug_assert!(length <= MAX_MAX_FRAME_SIZE);
    let header = &mut out[at..at + HEADER_LEN];
    header[..3].copy_from_slice(&length.to_be_bytes()[1..]);
    header[3] = kind;
    header[4] = flags;
    header[5..].copy_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
}

/// A SETTINGS frame with these `(identifier, value)` pairs.
pub fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    put_header(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// A SETTINGS acknowledgement.
pub fn settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// A PING acknowledgement echoing `payload`.
pub fn ping_ack(out: &mut Vec<u8>, payload: &[u8; 8]) {
    put_header(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(payload);
}

/// A WINDOW_UPDATE granting `increment` (1..=2^31-1) bytes on `stream` (0: the connection).
pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

/// An RST_STREAM ending `stream` with `code`.
pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    put_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

/// A GOAWAY: streams up to `last_stream` were or will be processed; `debug` says why.
pub fn goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    put_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// A DATA frame.
pub fn data(out: &mut Vec<u8>, stream: u32, payload: &[u8], end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    put_header(out, payload.len(), kind::DATA, flags, stream);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9113_4_1_headers_round_trip_and_the_reserved_bit_is_ignored() {
        let mut out = Vec::new();
        rst_stream(&mut out, 5, ErrorCode::CANCEL);
        assert_eq!(out, [0, 0, 4, 3, 0, 0, 0, 0, 5, 0, 0, 0, 8]);
        let mut bytes: [u8; HEADER_LEN] = out[..HEADER_LEN].try_into().unwrap();
        bytes[5] |= 0x80;
        let header = Header::parse(&bytes);
        assert_eq!(
            header,
            Header {
                length: 4,
                kind: kind::RST_STREAM,
                flags: 0,
                stream: 5
            }
        );
    }

    #[test]
    fn reserved_headers_are_filled_in_with_the_payload_length() {
        let mut out = vec![0xaa];
        let at = start(&mut out);
        out.extend_from_slice(&[1; 300]);
        finish(&mut out, at, kind::HEADERS, flag::END_HEADERS, 7);
        let header = Header::parse(out[1..1 + HEADER_LEN].try_into().unwrap());
        assert_eq!(header.length, 300);
        assert_eq!(header.kind, kind::HEADERS);
        assert!(header.has(flag::END_HEADERS) && !header.has(flag::END_STREAM));
        assert_eq!(header.stream, 7);
    }

    #[test]
    fn control_frames_have_their_fixed_lengths() {
        let mut out = Vec::new();
        settings(&mut out, &[(setting::MAX_CONCURRENT_STREAMS, 100)]);
        assert_eq!(out, [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        out.clear();
        window_update(&mut out, 0, 1 << 20);
        assert_eq!(out, [0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0x10, 0, 0]);
        out.clear();
        goaway(&mut out, 9, ErrorCode::PROTOCOL_ERROR, b"x");
        assert_eq!(
            out,
            [0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, b'x']
        );
    }
}
