//! HTTP/3 (RFC 9114) for DNS over HTTPS, sans-IO: the bytes of a request stream in, a whole
//! request out; a response in, the bytes of its stream out; the client's unidirectional
//! streams (control, QPACK encoder and decoder) checked as they arrive. QUIC itself (streams,
//! flow control, loss recovery) is quinn's; this is only HTTP/3's framing and rules on top.
//!
//! ```text
//! request stream bytes ─▶ RequestStream::receive ─▶ HEADERS (QPACK, static table only)
//!                                                ─▶ DATA… ─▶ [trailers] ─▶ FIN ─▶ Request
//! response ─▶ encode_response ─▶ HEADERS ‖ DATA ─▶ the stream, then FIN
//! uni stream ─▶ UniStream::receive: control (SETTINGS first), QPACK encoder/decoder (nothing
//!               allowed but capacity 0 and cancellations), push (error), unknown (ignored)
//! ```
//!
//! Why not the `h3` crate: with kudurru's own HTTP/2, DoH3 through h3 cost 5x DoH's CPU per
//! answer at saturation (QPACK encoding with Huffman, `http` types, a task and several
//! allocations per frame); RFC 8484 over HTTP/3 needs only this much. kudurru advertises a
//! QPACK dynamic table capacity of 0, so a field section decodes on its own and no stream ever
//! waits for another (RFC 9204 §2.1.2).

pub mod client;
pub mod qpack;

use crate::http::head::{self, HeadBuilder};
use crate::http::{BodyError, Method};

/// HTTP/3 and QPACK error codes (RFC 9114 §8.1, RFC 9204 §6).
pub mod code {
    /// No error: a graceful close, or a request stream no longer wanted.
    pub const H3_NO_ERROR: u64 = 0x100;
    /// The peer opened a stream type it may not (a push stream, a second control stream).
    pub const H3_STREAM_CREATION_ERROR: u64 = 0x103;
    /// A control or QPACK stream was closed.
    pub const H3_CLOSED_CRITICAL_STREAM: u64 = 0x104;
    /// A frame not allowed where it was sent.
    pub const H3_FRAME_UNEXPECTED: u64 = 0x105;
    /// A frame that does not parse, or a stream that ends inside one.
    pub const H3_FRAME_ERROR: u64 = 0x106;
    /// The peer is generating excessive load.
    pub const H3_EXCESSIVE_LOAD: u64 = 0x107;
    /// A SETTINGS frame that breaks the rules.
    pub const H3_SETTINGS_ERROR: u64 = 0x109;
    /// The control stream did not start with SETTINGS.
    pub const H3_MISSING_SETTINGS: u64 = 0x10a;
    /// The request is no longer wanted (a drop).
    pub const H3_REQUEST_CANCELLED: u64 = 0x10c;
    /// The request stream ended before a complete request.
    pub const H3_REQUEST_INCOMPLETE: u64 = 0x10d;
    /// A malformed request (RFC 9114 §4.1.2).
    pub const H3_MESSAGE_ERROR: u64 = 0x10e;
    /// A field section that does not decode.
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
    /// A bad instruction on the peer's QPACK encoder stream.
    pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
    /// A bad instruction on the peer's QPACK decoder stream.
    pub const QPACK_DECODER_STREAM_ERROR: u64 = 0x202;
}

/// Frame types (RFC 9114 §7.2).
pub mod frame_type {
    /// DATA: request or response content.
    pub const DATA: u64 = 0x0;
    /// HEADERS: a field section.
    pub const HEADERS: u64 = 0x1;
    pub(super) const CANCEL_PUSH: u64 = 0x3;
    pub(super) const SETTINGS: u64 = 0x4;
    pub(super) const PUSH_PROMISE: u64 = 0x5;
    pub(super) const GOAWAY: u64 = 0x7;
    pub(super) const MAX_PUSH_ID: u64 = 0xd;

    /// HTTP/2 frame types with no HTTP/3 meaning: receiving one is H3_FRAME_UNEXPECTED
    /// (RFC 9114 §7.2.8).
    pub(super) fn http2_only(kind: u64) -> bool {
        matches!(kind, 0x2 | 0x6 | 0x8 | 0x9)
    }
}

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
mod stream_type {
    pub(super) const CONTROL: u64 = 0x0;
    pub(super) const PUSH: u64 = 0x1;
    pub(super) const QPACK_ENCODER: u64 = 0x2;
    pub(super) const QPACK_DECODER: u64 = 0x3;
}

/// SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114 §7.2.4.1).
const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x6;
/// Longest control-stream frame accepted (a SETTINGS of many entries is still far below).
const MAX_CONTROL_FRAME: u64 = 16 * 1024;

/// Whether an error ends only its stream or the whole connection (RFC 9114 §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Reset the stream (and stop reading it) with the code; the connection goes on.
    Stream,
    /// Close the connection with the code and reason.
    Connection,
}

/// A protocol error, with the code to send and what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (HTTP/3 error {code:#x})")]
pub struct Error {
    /// What to end.
    pub scope: Scope,
    /// The HTTP/3 or QPACK error code.
    pub code: u64,
    /// What the peer did; sent as the reason phrase of a connection close.
    pub reason: &'static str,
}

fn connection_error(code: u64, reason: &'static str) -> Error {
    Error {
        scope: Scope::Connection,
        code,
        reason,
    }
}

fn stream_error(code: u64, reason: &'static str) -> Error {
    Error {
        scope: Scope::Stream,
        code,
        reason,
    }
}

/// Reads a QUIC variable-length integer (RFC 9000 §16); `None` when `input` ends first.
pub fn read_varint(input: &mut &[u8]) -> Option<u64> {
    let first = *input.first()?;
    let len = 1usize << (first >> 6);
    let bytes = input.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        value = value << 8 | u64::from(b);
    }
    *input = &input[len..];
    Some(value)
}

/// Appends a QUIC variable-length integer; `value` must be below 2^62.
pub fn write_varint(out: &mut Vec<u8>, value: u64) {
    debug_assert!(value < 1 << 62);
    match value {
        0..=0x3f => out.push(value as u8),
        0x40..=0x3fff => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Appends a frame: its type, its length, then `payload` (RFC 9114 §7.1).
pub fn write_frame(out: &mut Vec<u8>, kind: u64, payload: &[u8]) {
    write_varint(out, kind);
    write_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// A frame's type and length, and how many bytes they took; `None` when incomplete.
fn frame_header(input: &[u8]) -> Option<(u64, u64, usize)> {
    let mut rest = input;
    let kind = read_varint(&mut rest)?;
    let len = read_varint(&mut rest)?;
    Some((kind, len, input.len() - rest.len()))
}

/// A request as far as DNS over HTTPS needs it.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `:method`.
    pub method: Method,
    /// `:path`; empty for CONNECT.
    pub target: Vec<u8>,
    /// The first `content-type` field.
    pub content_type: Option<Vec<u8>>,
    /// The body, or why there is none to answer from.
    pub body: Result<Vec<u8>, BodyError>,
    /// The client's side of the stream was read to its end; when it was not, the answer is
    /// followed by STOP_SENDING(H3_NO_ERROR) (RFC 9114 §4.1.2).
    pub complete: bool,
}

/// What a request stream has shown so far.
#[derive(Debug)]
enum Phase {
    /// Waiting for the HEADERS frame.
    Head,
    /// HEADERS seen: DATA frames, perhaps trailers, until FIN.
    Body,
    /// Trailers seen: only FIN (or unknown frames) may follow.
    Trailers,
    /// The request was handed out.
    Done,
}

/// One client-initiated bidirectional stream: bytes in, one request out (RFC 9114 §4.1).
#[derive(Debug)]
pub struct RequestStream {
    phase: Phase,
    /// Bytes of a frame not complete yet.
    buffer: Vec<u8>,
    /// Bytes of an unknown frame still to skip.
    skip: u64,
    head: Option<HeadBuilder>,
    body: Vec<u8>,
    max_head: usize,
    max_body: usize,
}

impl RequestStream {
    /// A stream whose field section may be `max_head` bytes (RFC 9114 §4.2.2 sizes; larger is
    /// delivered as [`BodyError::HeadTooLarge`]) and whose body may be `max_body` bytes.
    pub fn new(max_head: usize, max_body: usize) -> Self {
        Self {
            phase: Phase::Head,
            buffer: Vec::new(),
            skip: 0,
            head: None,
            body: Vec::new(),
            max_head,
            max_body,
        }
    }

    /// Takes the next bytes of the stream (`fin`: the stream ended after them). Returns the
    /// request once it is complete, or as soon as it is known to be answerable (a GET needs no
    /// body) or not (too large). After a request or an error the stream is not read again.
    pub fn receive(&mut self, bytes: &[u8], fin: bool) -> Result<Option<Request>, Error> {
        if matches!(self.phase, Phase::Done) {
            return Ok(None);
        }
        let mut input = bytes;
        if self.skip > 0 {
            let n = (self.skip.min(input.len() as u64)) as usize;
            self.skip -= n as u64;
            input = &input[n..];
        }
        let owned;
        if !self.buffer.is_empty() {
            self.buffer.extend_from_slice(input);
            owned = std::mem::take(&mut self.buffer);
            input = &owned;
        }
        loop {
            if self.skip > 0 {
                let n = (self.skip.min(input.len() as u64)) as usize;
                self.skip -= n as u64;
                input = &input[n..];
                if self.skip > 0 {
                    break;
                }
            }
            if input.is_empty() {
                break;
            }
            let Some((kind, len, header)) = frame_header(input) else {
                break;
            };
            if let Some(mut request) = self.early(kind, len)? {
                request.complete = false;
                return Ok(Some(request));
            }
            if kind != frame_type::DATA && kind != frame_type::HEADERS && !known(kind) {
                // RFC 9114 §9: unknown and reserved frame types are skipped.
                input = &input[header..];
                self.skip = len;
                continue;
            }
            let Some(payload) = usize::try_from(len)
                .ok()
                .and_then(|len| input.get(header..header + len))
            else {
                break;
            };
            input = &input[header + payload.len()..];
            if let Some(mut request) = self.frame(kind, payload)? {
                // A GET whose FIN came with its HEADERS was read to its end.
                request.complete |= fin && input.is_empty();
                return Ok(Some(request));
            }
        }
        if fin {
            if !input.is_empty() || self.skip > 0 {
                return Err(connection_error(
                    code::H3_FRAME_ERROR,
                    "request stream ends inside a frame",
                ));
            }
            return self.end();
        }
        self.buffer.extend_from_slice(input);
        Ok(None)
    }

    /// The request's time ran out: a request whose head arrived is delivered as
    /// [`BodyError::TimedOut`] (answer 408); `None` when not even the head came.
    pub fn expire(&mut self) -> Option<Request> {
        let head = self.head.take()?;
        Some(self.deliver_head(head, Err(BodyError::TimedOut), false))
    }

    /// Decisions that need only a frame's header: a field section or body too large to wait
    /// for.
    fn early(&mut self, kind: u64, len: u64) -> Result<Option<Request>, Error> {
        match (kind, &self.phase) {
            (frame_type::HEADERS, Phase::Head) if len > 2 * self.max_head as u64 => {
                // Never decoded (no QPACK state depends on it): answered 431.
                Ok(Some(self.deliver(
                    Method::Other,
                    Vec::new(),
                    None,
                    Err(BodyError::HeadTooLarge),
                    false,
                )))
            }
            (frame_type::DATA, Phase::Body)
                if self.body.len() as u64 + len > self.max_body as u64 =>
            {
                let head = self.head.take().expect("the head comes before the body");
                Ok(Some(self.deliver_head(
                    head,
                    Err(BodyError::TooLarge),
                    false,
                )))
            }
            (frame_type::HEADERS, _) | (frame_type::DATA, _)
                if len > (self.max_body + 2 * self.max_head) as u64 =>
            {
                Err(connection_error(code::H3_EXCESSIVE_LOAD, "frame too long"))
            }
            (frame_type::HEADERS | frame_type::DATA, _) => Ok(None),
            // Known frames that never belong on a request stream: refused at their header.
            _ if known(kind) => Err(connection_error(
                code::H3_FRAME_UNEXPECTED,
                "control frame on a request stream",
            )),
            _ => Ok(None),
        }
    }

    fn frame(&mut self, kind: u64, payload: &[u8]) -> Result<Option<Request>, Error> {
        match (kind, &self.phase) {
            (frame_type::HEADERS, Phase::Head) => {
                let mut head = HeadBuilder::new(self.max_head);
                qpack::decode(payload, |name, value| head.field(name, value)).map_err(|_| {
                    connection_error(
                        code::QPACK_DECOMPRESSION_FAILED,
                        "field section does not decode (QPACK)",
                    )
                })?;
                head.finish();
                if head.too_large() {
                    return Ok(Some(self.deliver(
                        Method::Other,
                        Vec::new(),
                        None,
                        Err(BodyError::HeadTooLarge),
                        false,
                    )));
                }
                if head.malformed.is_some() {
                    return Err(stream_error(
                        code::H3_MESSAGE_ERROR,
                        "malformed request head",
                    ));
                }
                let post = head.method == Some(Method::Post);
                if !post {
                    // Nothing of a body is used: answered at once (RFC 9114 §4.1).
                    return Ok(Some(self.deliver_head(head, Ok(Vec::new()), false)));
                }
                if head
                    .content_length
                    .is_some_and(|n| n > self.max_body as u64)
                {
                    return Ok(Some(self.deliver_head(
                        head,
                        Err(BodyError::TooLarge),
                        false,
                    )));
                }
                self.head = Some(head);
                self.phase = Phase::Body;
                Ok(None)
            }
            (frame_type::DATA, Phase::Body) => {
                self.body.extend_from_slice(payload);
                Ok(None)
            }
            (frame_type::HEADERS, Phase::Body) => {
                let mut malformed = None;
                qpack::decode(payload, |name, value| {
                    head::trailer_field(name, value, &mut malformed)
                })
                .map_err(|_| {
                    connection_error(
                        code::QPACK_DECOMPRESSION_FAILED,
                        "field section does not decode (QPACK)",
                    )
                })?;
                if malformed.is_some() {
                    return Err(stream_error(code::H3_MESSAGE_ERROR, "malformed trailers"));
                }
                self.phase = Phase::Trailers;
                Ok(None)
            }
            (frame_type::DATA, Phase::Head) => Err(connection_error(
                code::H3_FRAME_UNEXPECTED,
                "DATA before HEADERS",
            )),
            (frame_type::DATA | frame_type::HEADERS, _) => Err(connection_error(
                code::H3_FRAME_UNEXPECTED,
                "frame after the trailers",
            )),
            _ => Err(connection_error(
                code::H3_FRAME_UNEXPECTED,
                "control frame on a request stream",
            )),
        }
    }

    /// The stream ended cleanly.
    fn end(&mut self) -> Result<Option<Request>, Error> {
        let Some(head) = self.head.take() else {
            return Err(stream_error(
                code::H3_REQUEST_INCOMPLETE,
                "request stream ended before its HEADERS",
            ));
        };
        if head
            .content_length
            .is_some_and(|n| n != self.body.len() as u64)
        {
            // RFC 9114 §4.1.2: content-length must match the DATA frames.
            return Err(stream_error(
                code::H3_MESSAGE_ERROR,
                "body length differs from content-length",
            ));
        }
        let body = std::mem::take(&mut self.body);
        Ok(Some(self.deliver_head(head, Ok(body), true)))
    }

    fn deliver_head(
        &mut self,
        head: HeadBuilder,
        body: Result<Vec<u8>, BodyError>,
        complete: bool,
    ) -> Request {
        self.deliver(
            head.method.unwrap_or(Method::Other),
            head.path.unwrap_or_default(),
            head.content_type,
            body,
            complete,
        )
    }

    fn deliver(
        &mut self,
        method: Method,
        target: Vec<u8>,
        content_type: Option<Vec<u8>>,
        body: Result<Vec<u8>, BodyError>,
        complete: bool,
    ) -> Request {
        self.phase = Phase::Done;
        self.buffer = Vec::new();
        Request {
            method,
            target,
            content_type,
            body,
            complete,
        }
    }
}

/// Frame types with a meaning in HTTP/3 (or HTTP/2's, which are errors).
fn known(kind: u64) -> bool {
    matches!(
        kind,
        frame_type::DATA
            | frame_type::HEADERS
            | frame_type::CANCEL_PUSH
            | frame_type::SETTINGS
            | frame_type::PUSH_PROMISE
            | frame_type::GOAWAY
            | frame_type::MAX_PUSH_ID
    ) || frame_type::http2_only(kind)
}

/// Writes the response to a request: HEADERS (`:status` and `fields`), then `body` as one
/// DATA frame (none when empty). The stream is finished after it.
pub fn encode_response(status: u16, fields: &[(&[u8], &[u8])], body: &[u8], out: &mut Vec<u8>) {
    encode_response_head(status, fields, body.len(), out);
    out.extend_from_slice(body);
}

/// Writes what goes before a response's body of `body_len` bytes: HEADERS (`:status` and
/// `fields`), then the DATA frame's type and length (nothing when the body is empty).
pub fn encode_response_head(
    status: u16,
    fields: &[(&[u8], &[u8])],
    body_len: usize,
    out: &mut Vec<u8>,
) {
    write_varint(out, frame_type::HEADERS);
    // The section is encoded in place; its length goes in a two-byte varint reserved before
    // it (RFC 9000 §16 allows any length of encoding), or is moved if it needs more.
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    qpack::encode_response(status, fields, out);
    let len = out.len() - at - 2;
    if len <= 0x3fff {
        out[at..at + 2].copy_from_slice(&(len as u16 | 0x4000).to_be_bytes());
    } else {
        let section = out.split_off(at + 2);
        out.truncate(at);
        write_varint(out, section.len() as u64);
        out.extend_from_slice(&section);
    }
    if body_len > 0 {
        write_varint(out, frame_type::DATA);
        write_varint(out, body_len as u64);
    }
}

/// What the server writes on its control stream when the connection starts: the stream type
/// and SETTINGS (RFC 9114 §6.2.1, §7.2.4). The QPACK dynamic table capacity stays at its
/// default, 0.
pub fn server_control_stream(max_field_section: u64) -> Vec<u8> {
    let mut settings = Vec::new();
    write_varint(&mut settings, SETTINGS_MAX_FIELD_SECTION_SIZE);
    write_varint(&mut settings, max_field_section);
    let mut out = Vec::new();
    write_varint(&mut out, stream_type::CONTROL);
    write_frame(&mut out, frame_type::SETTINGS, &settings);
    out
}

/// The client's critical unidirectional streams seen on a connection: each type at most once
/// (RFC 9114 §6.2.1, RFC 9204 §4.2).
#[derive(Debug, Default)]
pub struct CriticalStreams {
    seen: [bool; 3],
}

impl CriticalStreams {
    /// A stream of `kind` opened; a second of a critical type is H3_STREAM_CREATION_ERROR.
    pub fn open(&mut self, kind: UniKind) -> Result<(), Error> {
        let slot = match kind {
            UniKind::Control => 0,
            UniKind::QpackEncoder => 1,
            UniKind::QpackDecoder => 2,
            UniKind::Unknown => return Ok(()),
        };
        if std::mem::replace(&mut self.seen[slot], true) {
            return Err(connection_error(
                code::H3_STREAM_CREATION_ERROR,
                "a second control or QPACK stream",
            ));
        }
        Ok(())
    }
}

/// What a client's unidirectional stream turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniKind {
    /// The control stream.
    Control,
    /// The QPACK encoder stream.
    QpackEncoder,
    /// The QPACK decoder stream.
    QpackDecoder,
    /// A type this side does not know: stop reading it (RFC 9114 §6.2, §9).
    Unknown,
}

/// One unidirectional stream from the client: its type, then what it carries, checked.
#[derive(Debug)]
pub struct UniStream {
    kind: Option<UniKind>,
    buffer: Vec<u8>,
    /// Control stream: SETTINGS arrived.
    settings_seen: bool,
    skip: u64,
}

impl Default for UniStream {
    fn default() -> Self {
        Self::new()
    }
}

impl UniStream {
    /// A stream whose type is not known yet.
    pub fn new() -> Self {
        Self {
            kind: None,
            buffer: Vec::new(),
            settings_seen: false,
            skip: 0,
        }
    }

    /// The stream's type, once read.
    pub fn kind(&self) -> Option<UniKind> {
        self.kind
    }

    /// Takes the next bytes of the stream. Every error is a connection error; an unknown type
    /// is not one (the caller stops reading).
    pub fn receive(&mut self, bytes: &[u8], fin: bool) -> Result<(), Error> {
        self.buffer.extend_from_slice(bytes);
        let buffer = std::mem::take(&mut self.buffer);
        let mut input = &buffer[..];
        if self.kind.is_none() {
            let Some(kind) = read_varint(&mut input) else {
                return if fin {
                    Err(connection_error(
                        code::H3_STREAM_CREATION_ERROR,
                        "unidirectional stream without a type",
                    ))
                } else {
                    self.buffer = input.to_vec();
                    Ok(())
                };
            };
            self.kind = Some(match kind {
                stream_type::CONTROL => UniKind::Control,
                stream_type::QPACK_ENCODER => UniKind::QpackEncoder,
                stream_type::QPACK_DECODER => UniKind::QpackDecoder,
                stream_type::PUSH => {
                    return Err(connection_error(
                        code::H3_STREAM_CREATION_ERROR,
                        "a client opened a push stream",
                    ));
                }
                _ => UniKind::Unknown,
            });
        }
        let result = match self.kind {
            Some(UniKind::Control) => self.control(&mut input),
            Some(UniKind::QpackEncoder) => encoder_instructions(&mut input),
            Some(UniKind::QpackDecoder) => decoder_instructions(&mut input),
            _ => {
                input = &[];
                Ok(())
            }
        };
        result?;
        if fin && self.kind != Some(UniKind::Unknown) {
            return Err(connection_error(
                code::H3_CLOSED_CRITICAL_STREAM,
                "a critical stream was closed",
            ));
        }
        self.buffer = input.to_vec();
        Ok(())
    }

    /// Frames on the control stream (RFC 9114 §6.2.1): SETTINGS first and once; GOAWAY,
    /// MAX_PUSH_ID and CANCEL_PUSH taken as they come (kudurru never pushes); request frames
    /// are errors.
    fn control(&mut self, input: &mut &[u8]) -> Result<(), Error> {
        loop {
            if self.skip > 0 {
                let n = self.skip.min(input.len() as u64) as usize;
                self.skip -= n as u64;
                *input = &input[n..];
                if self.skip > 0 {
                    return Ok(());
                }
            }
            let Some((kind, len, header)) = frame_header(input) else {
                return Ok(());
            };
            if !self.settings_seen && kind != frame_type::SETTINGS {
                return Err(connection_error(
                    code::H3_MISSING_SETTINGS,
                    "control stream does not start with SETTINGS",
                ));
            }
            if !known(kind) {
                *input = &input[header..];
                self.skip = len;
                continue;
            }
            if len > MAX_CONTROL_FRAME {
                return Err(connection_error(
                    code::H3_EXCESSIVE_LOAD,
                    "control frame too long",
                ));
            }
            let Some(payload) = input.get(header..header + len as usize) else {
                return Ok(());
            };
            match kind {
                frame_type::SETTINGS if !self.settings_seen => {
                    self.settings_seen = true;
                    settings(payload)?;
                }
                frame_type::GOAWAY | frame_type::MAX_PUSH_ID | frame_type::CANCEL_PUSH => {
                    let mut rest = payload;
                    if read_varint(&mut rest).is_none() || !rest.is_empty() {
                        return Err(connection_error(
                            code::H3_FRAME_ERROR,
                            "control frame of the wrong length",
                        ));
                    }
                }
                _ => {
                    return Err(connection_error(
                        code::H3_FRAME_UNEXPECTED,
                        "frame not allowed on the control stream",
                    ));
                }
            }
            *input = &input[header + payload.len()..];
        }
    }
}

/// Checks a client's SETTINGS (RFC 9114 §7.2.4): no identifier twice, none of HTTP/2's.
fn settings(mut payload: &[u8]) -> Result<(), Error> {
    let mut seen: Vec<u64> = Vec::new();
    while !payload.is_empty() {
        let (Some(id), Some(_value)) = (read_varint(&mut payload), read_varint(&mut payload))
        else {
            return Err(connection_error(
                code::H3_FRAME_ERROR,
                "SETTINGS ends inside an entry",
            ));
        };
        if matches!(id, 0x2..=0x5) {
            return Err(connection_error(
                code::H3_SETTINGS_ERROR,
                "an HTTP/2 setting in HTTP/3 SETTINGS",
            ));
        }
        if seen.contains(&id) {
            return Err(connection_error(
                code::H3_SETTINGS_ERROR,
                "a setting given twice",
            ));
        }
        if seen.len() < 64 {
            seen.push(id);
        }
    }
    Ok(())
}

/// The client's QPACK encoder stream (RFC 9204 §4.3): with a capacity of 0, only "Set Dynamic
/// Table Capacity" to 0 is allowed.
fn encoder_instructions(input: &mut &[u8]) -> Result<(), Error> {
    while let Some(&first) = input.first() {
        if first & 0xe0 != 0x20 {
            return Err(connection_error(
                code::QPACK_ENCODER_STREAM_ERROR,
                "insertion into a dynamic table of capacity 0",
            ));
        }
        let mut rest = *input;
        match qpack::read_integer(&mut rest, 5) {
            Ok(0) => *input = rest,
            Ok(_) => {
                return Err(connection_error(
                    code::QPACK_ENCODER_STREAM_ERROR,
                    "dynamic table capacity over 0",
                ));
            }
            Err(qpack::DecodeError::Truncated) => return Ok(()),
            Err(_) => {
                return Err(connection_error(
                    code::QPACK_ENCODER_STREAM_ERROR,
                    "bad encoder instruction",
                ));
            }
        }
    }
    Ok(())
}

/// The client's QPACK decoder stream (RFC 9204 §4.4): kudurru's responses never use the
/// dynamic table, so only Stream Cancellation may arrive.
fn decoder_instructions(input: &mut &[u8]) -> Result<(), Error> {
    while let Some(&first) = input.first() {
        if first & 0xc0 != 0x40 {
            return Err(connection_error(
                code::QPACK_DECODER_STREAM_ERROR,
                "acknowledgement of a dynamic table never used",
            ));
        }
        let mut rest = *input;
        match qpack::read_integer(&mut rest, 6) {
            Ok(_) => *input = rest,
            Err(qpack::DecodeError::Truncated) => return Ok(()),
            Err(_) => {
                return Err(connection_error(
                    code::QPACK_DECODER_STREAM_ERROR,
                    "bad decoder instruction",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
