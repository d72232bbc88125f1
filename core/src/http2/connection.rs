//! The server side of one HTTP/2 connection: frames in, requests out, responses in, frames out.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hashbrown::HashMap;

use super::frame::{self, ErrorCode, Header, flag, kind, setting};
use super::hpack;
use crate::http::head::{self, HeadBuilder};
use crate::http::{BodyError, Method};

/// Stream errors this side may send on one connection before it gives up on the client.
pub const MAX_LOCAL_RESETS: u32 = 1024;
/// Streams a client may reset before their answer beyond the number of answers it took.
pub const RESET_ALLOWANCE: u32 = 100;
/// Frames that carry no request and free nothing a connection may send beyond four per request
/// (RFC 9113 §10.5): PING, SETTINGS and their acknowledgements, PRIORITY, GOAWAY, empty DATA or
/// CONTINUATION, unknown types, RST_STREAM on a stream not open, and WINDOW_UPDATE that unblocks
/// no response (on the connection with nothing waiting, on a closed stream, on an open stream
/// with nothing to send).
pub const IDLE_FRAME_ALLOWANCE: u32 = 1000;
/// Streams recently reset by this side whose late frames are ignored (RFC 9113 §5.1 "closed"),
/// and streams recently closed whose late HEADERS are a stream error, not a new stream.
const RESET_MEMORY: usize = 128;
/// Dynamic table the response encoder uses: small, so its lookups stay short.
const ENCODER_TABLE: usize = 512;

/// Limits of a connection, fixed when it starts.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams open at once; more are refused.
    pub max_streams: u32,
    /// Largest request field section (RFC 9113 §6.5.2 size); larger ones are delivered as
    /// [`BodyError::HeadTooLarge`]. Also advertised as SETTINGS_MAX_HEADER_LIST_SIZE.
    pub max_head: usize,
    /// Largest request body kept.
    pub max_body: usize,
    /// Connection-level receive window: the most body bytes in progress at once.
    pub connection_window: u32,
}

/// One request, complete or as far as it will get.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// Its stream: pass to [`Connection::respond`] or [`Connection::cancel`].
    pub stream: u32,
    /// `:method`.
    pub method: Method,
    /// `:path` (origin form with the query); empty for CONNECT.
    pub target: Vec<u8>,
    /// The first `content-type` field.
    pub content_type: Option<Vec<u8>>,
    /// The body, or why there is none to answer from.
    pub body: Result<Vec<u8>, BodyError>,
}

/// A connection error (RFC 9113 §5.4.1): GOAWAY with this code and reason is in the output,
/// and the connection is over once it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (HTTP/2 error {code:?})")]
pub struct ConnectionError {
    /// The code sent in GOAWAY.
    pub code: ErrorCode,
    /// What the client did, also sent as GOAWAY's debug data.
    pub reason: &'static str,
}

fn error(code: ErrorCode, reason: &'static str) -> ConnectionError {
    ConnectionError { code, reason }
}

/// A response header field. Names are lowercase.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    /// Field name.
    pub name: &'static [u8],
    /// Field value.
    pub value: &'a [u8],
    /// The value repeats across responses: worth a place in the HPACK dynamic table.
    pub remember: bool,
}

/// What a request's head said, kept until its body ends.
#[derive(Debug)]
struct Head {
    method: Method,
    target: Vec<u8>,
    content_type: Option<Vec<u8>>,
    content_length: Option<u64>,
}

#[derive(Debug)]
struct Stream {
    /// The client sent END_STREAM (half-closed remote).
    remote_closed: bool,
    /// The head, until the request is delivered.
    head: Option<Head>,
    body: Vec<u8>,
    /// Body bytes received, kept or not.
    received: u64,
    /// What the client may still send on this stream.
    recv_credit: i64,
    /// What this side may still send on this stream.
    send_window: i64,
    /// A response was given; DATA may still wait for window.
    responded: bool,
    /// The body is over the limit: what arrives is discarded.
    too_large: bool,
    /// Response bytes not yet sent for want of window.
    pending: Vec<u8>,
    opened: Instant,
}

/// A field block spread over HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    self_dependent: bool,
    bytes: Vec<u8>,
}

/// One HTTP/2 server connection.
pub struct Connection {
    config: Config,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    out: Vec<u8>,
    /// Preface bytes still expected.
    preface_left: usize,
    /// The client's first SETTINGS arrived.
    settings_seen: bool,
    failed: Option<ConnectionError>,
    block: Option<Block>,
    streams: HashMap<u32, Stream, foldhash::fast::FixedState>,
    /// Highest stream the client opened.
    last_stream: u32,
    /// The GOAWAY this side sent, with its last stream.
    goaway: Option<u32>,
    peer_goaway: bool,
    peer_max_frame: usize,
    peer_initial_window: i64,
    /// What this side may still send on the connection.
    send_window: i64,
    /// What the client may still send on the connection.
    recv_credit: i64,
    /// Received bytes no longer held, to be returned with WINDOW_UPDATE.
    released: u32,
    /// Streams whose DATA waits for window, oldest first.
    blocked: VecDeque<u32>,
    recently_reset: VecDeque<u32>,
    /// Streams that were open and are closed, newest last ([`RESET_MEMORY`] of them).
    recently_closed: VecDeque<u32>,
    /// Streams whose body is still arriving.
    receiving: usize,
    requests: u32,
    responses: u32,
    local_resets: u32,
    client_resets: u32,
    idle_frames: u32,
}

impl Connection {
    /// A connection that has not read the preface yet; its SETTINGS are in the output.
    pub fn new(config: Config) -> Self {
        let mut out = Vec::with_capacity(4096);
        let stream_window = (config.max_body as u32)
            .saturating_add(1)
            .min(frame::MAX_WINDOW);
        frame::settings(
            &mut out,
            &[
                (setting::MAX_CONCURRENT_STREAMS, config.max_streams),
                (setting::INITIAL_WINDOW_SIZE, stream_window),
                (
                    setting::MAX_HEADER_LIST_SIZE,
                    u32::try_from(config.max_head).unwrap_or(u32::MAX),
                ),
            ],
        );
        let connection_window = config
            .connection_window
            .clamp(frame::DEFAULT_WINDOW, frame::MAX_WINDOW);
        if connection_window > frame::DEFAULT_WINDOW {
            frame::window_update(&mut out, 0, connection_window - frame::DEFAULT_WINDOW);
        }
        Self {
            config: Config {
                connection_window,
                ..config
            },
            decoder: hpack::Decoder::new(frame::DEFAULT_HEADER_TABLE_SIZE),
            encoder: hpack::Encoder::new(ENCODER_TABLE),
            out,
            preface_left: frame::PREFACE.len(),
            settings_seen: false,
            failed: None,
            block: None,
            streams: HashMap::with_hasher(foldhash::fast::FixedState::default()),
            last_stream: 0,
            goaway: None,
            peer_goaway: false,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE as usize,
            peer_initial_window: i64::from(frame::DEFAULT_WINDOW),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_credit: i64::from(connection_window),
            released: 0,
            blocked: VecDeque::new(),
            recently_reset: VecDeque::new(),
            recently_closed: VecDeque::new(),
            receiving: 0,
            requests: 0,
            responses: 0,
            local_resets: 0,
            client_resets: 0,
            idle_frames: 0,
        }
    }

    /// Bytes to send, in order.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// The first `n` bytes of [`Self::output`] were sent.
    pub fn sent(&mut self, n: usize) {
        if n >= self.out.len() {
            self.out.clear();
        } else {
            self.out.drain(..n);
        }
    }

    /// Streams open: requests in progress or owed a response.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The client sent GOAWAY: it opens no more streams.
    pub fn peer_went_away(&self) -> bool {
        self.peer_goaway
    }

    /// This side sent GOAWAY ([`Self::shut_down`] or a connection error).
    pub fn going_away(&self) -> bool {
        self.goaway.is_some()
    }

    /// A connection error ended the connection (GOAWAY is in the output).
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Takes the bytes the client sent: whole frames are processed and complete requests
    /// appended to `requests`; returns how many bytes were used (a partial frame is left for
    /// the next call with more bytes after it). The caller's buffer must be able to hold a
    /// whole frame: [`frame::HEADER_LEN`] + [`frame::DEFAULT_MAX_FRAME_SIZE`] bytes.
    pub fn receive(
        &mut self,
        input: &[u8],
        now: Instant,
        requests: &mut Vec<Request>,
    ) -> Result<usize, ConnectionError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut at = 0;
        if self.preface_left > 0 {
            let seen = frame::PREFACE.len() - self.preface_left;
            let n = self.preface_left.min(input.len());
            if input[..n] != frame::PREFACE[seen..seen + n] {
                return Err(self.fail(error(
                    ErrorCode::PROTOCOL_ERROR,
                    "not an HTTP/2 connection preface",
                )));
            }
            self.preface_left -= n;
            at = n;
        }
        while self.preface_left == 0 && input.len() - at >= frame::HEADER_LEN {
            let header = Header::parse(
                input[at..at + frame::HEADER_LEN]
                    .try_into()
                    .expect("the loop condition leaves nine bytes"),
            );
            if header.length > frame::DEFAULT_MAX_FRAME_SIZE {
                return Err(self.fail(error(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                )));
            }
            let end = at + frame::HEADER_LEN + header.length as usize;
            if input.len() < end {
                break;
            }
            let payload = &input[at + frame::HEADER_LEN..end];
            if let Err(e) = self.frame(header, payload, now, requests) {
                return Err(self.fail(e));
            }
            at = end;
        }
        self.replenish();
        Ok(at)
    }

    /// Answers `stream`: HEADERS with `:status` and `fields`, then `body` as DATA (as far as the
    /// client's windows allow; the rest follows its WINDOW_UPDATEs). A stream that is gone
    /// (reset by the client, or already answered) is skipped.
    pub fn respond(&mut self, stream: u32, status: u16, fields: &[Field<'_>], body: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        if state.responded {
            return;
        }
        state.responded = true;
        self.responses = self.responses.saturating_add(1);
        let at = frame::start(&mut self.out);
        self.encoder.begin_block(&mut self.out);
        self.encoder.status(status, &mut self.out);
        for field in fields {
            self.encoder
                .field(field.name, field.value, field.remember, &mut self.out);
        }
        let end_stream = if body.is_empty() { flag::END_STREAM } else { 0 };
        let block_len = self.out.len() - at - frame::HEADER_LEN;
        if block_len <= self.peer_max_frame {
            frame::finish(
                &mut self.out,
                at,
                kind::HEADERS,
                flag::END_HEADERS | end_stream,
                stream,
            );
        } else {
            // A block over the client's frame size continues in CONTINUATION frames.
            let block = self.out.split_off(at + frame::HEADER_LEN);
            self.out.truncate(at);
            let mut chunks = block.chunks(self.peer_max_frame).peekable();
            let mut first = true;
            while let Some(chunk) = chunks.next() {
                let last = chunks.peek().is_none();
                let at = frame::start(&mut self.out);
                self.out.extend_from_slice(chunk);
                let (kind, mut flags) = if first {
                    (kind::HEADERS, end_stream)
                } else {
                    (kind::CONTINUATION, 0)
                };
                if last {
                    flags |= flag::END_HEADERS;
                }
                frame::finish(&mut self.out, at, kind, flags, stream);
                first = false;
            }
        }
        if body.is_empty() {
            self.close_local(stream);
        } else {
            self.send_body(stream, body);
        }
    }

    /// Abandons `stream` without a response: RST_STREAM(CANCEL) (RFC 8484 servers abort a
    /// dropped query this way).
    pub fn cancel(&mut self, stream: u32) {
        if self.failed.is_none() && self.remove(stream).is_some() {
            frame::rst_stream(&mut self.out, stream, ErrorCode::CANCEL);
            self.remember_reset(stream);
        }
    }

    /// Graceful shutdown: GOAWAY(NO_ERROR); streams the client opened so far are still
    /// answered, later ones ignored (RFC 9113 §6.8).
    pub fn shut_down(&mut self) {
        if self.goaway.is_none() && self.failed.is_none() {
            self.goaway = Some(self.last_stream);
            frame::goaway(&mut self.out, self.last_stream, ErrorCode::NO_ERROR, b"");
        }
    }

    /// When the oldest body still arriving runs out of `timeout`, if one is.
    pub fn next_expiry(&self, timeout: Duration) -> Option<Instant> {
        if self.receiving == 0 {
            return None;
        }
        self.streams
            .values()
            .filter(|s| s.head.is_some())
            .map(|s| s.opened + timeout)
            .min()
    }

    /// Delivers, as [`BodyError::TimedOut`], every request whose body did not end within
    /// `timeout` of its head.
    pub fn expire(&mut self, now: Instant, timeout: Duration, requests: &mut Vec<Request>) {
        if self.receiving == 0 || self.failed.is_some() {
            return;
        }
        let late: Vec<(u32, bool)> = self
            .streams
            .iter()
            .filter(|(_, s)| s.head.is_some() && s.opened + timeout <= now)
            .map(|(&id, s)| (id, s.too_large))
            .collect();
        for (id, too_large) in late {
            let why = if too_large {
                BodyError::TooLarge
            } else {
                BodyError::TimedOut
            };
            self.deliver(id, Err(why), requests);
        }
        self.replenish();
    }

    // ---- receiving --------------------------------------------------------------------

    /// The stream window this side advertises: room for one whole body, and one byte to tell
    /// a body over the limit.
    fn stream_window(&self) -> i64 {
        (self.config.max_body as i64 + 1).min(i64::from(frame::MAX_WINDOW))
    }

    fn fail(&mut self, e: ConnectionError) -> ConnectionError {
        if self.failed.is_none() {
            self.failed = Some(e);
            frame::goaway(&mut self.out, self.last_stream, e.code, e.reason.as_bytes());
            self.goaway = Some(self.last_stream);
        }
        e
    }

    fn frame(
        &mut self,
        header: Header,
        payload: &[u8],
        now: Instant,
        requests: &mut Vec<Request>,
    ) -> Result<(), ConnectionError> {
        if self.block.is_some() && header.kind != kind::CONTINUATION {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "field block interrupted by another frame",
            ));
        }
        if !self.settings_seen && (header.kind != kind::SETTINGS || header.has(flag::ACK)) {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "the first frame is not SETTINGS",
            ));
        }
        match header.kind {
            kind::DATA => self.data(header, payload, requests),
            kind::HEADERS => self.headers(header, payload, now, requests),
            kind::CONTINUATION => self.continuation(header, payload, now, requests),
            kind::WINDOW_UPDATE => self.window_update(header, payload),
            kind::RST_STREAM => self.rst_stream(header, payload),
            kind::SETTINGS => self.settings(header, payload),
            kind::PING => self.ping(header, payload),
            kind::PRIORITY => self.priority(header, payload),
            kind::GOAWAY => self.peer_goaway(header, payload),
            kind::PUSH_PROMISE => Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "a client sent PUSH_PROMISE",
            )),
            // RFC 9113 §5.5: frames of unknown types are ignored.
            _ => self.idle_frame(),
        }
    }

    /// Counts a frame that carries no request.
    fn idle_frame(&mut self) -> Result<(), ConnectionError> {
        self.idle_frames = self.idle_frames.saturating_add(1);
        if self.idle_frames > IDLE_FRAME_ALLOWANCE.saturating_add(self.requests.saturating_mul(4)) {
            return Err(error(
                ErrorCode::ENHANCE_YOUR_CALM,
                "too many frames without requests",
            ));
        }
        Ok(())
    }

    fn data(
        &mut self,
        header: Header,
        payload: &[u8],
        requests: &mut Vec<Request>,
    ) -> Result<(), ConnectionError> {
        let id = header.stream;
        if id == 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        // Flow control counts the whole payload, padding included (RFC 9113 §6.9.1).
        let len = payload.len() as u32;
        if i64::from(len) > self.recv_credit {
            return Err(error(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        self.recv_credit -= i64::from(len);
        let data = unpad(&header, payload)?;
        let end_stream = header.has(flag::END_STREAM);
        if data.is_empty() && !end_stream {
            self.idle_frame()?;
        }
        let window = self.stream_window();
        let Some(stream) = self.streams.get_mut(&id) else {
            self.release(len);
            if id > self.last_stream {
                return Err(error(ErrorCode::PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            if !self.recently_reset.contains(&id) {
                self.stream_error(id, ErrorCode::STREAM_CLOSED)?;
            }
            return Ok(());
        };
        if stream.remote_closed {
            self.release(len);
            return self.stream_error(id, ErrorCode::STREAM_CLOSED);
        }
        if i64::from(len) > stream.recv_credit {
            self.release(len);
            return self.stream_error(id, ErrorCode::FLOW_CONTROL_ERROR);
        }
        stream.recv_credit -= i64::from(len);
        stream.received += data.len() as u64;
        let Some(head) = &stream.head else {
            // Delivered early (too large, timed out): the rest is discarded.
            self.released = self.released.saturating_add(len);
            if end_stream {
                stream.remote_closed = true;
                self.close_if_done(id);
            }
            return Ok(());
        };
        if head.content_length.is_some_and(|n| stream.received > n) {
            self.released = self.released.saturating_add(len);
            return self.stream_error(id, ErrorCode::PROTOCOL_ERROR);
        }
        if stream.too_large || stream.received > self.config.max_body as u64 {
            // Too large: the upload is read to its end and discarded, then answered (a client
            // reset mid-upload reports an error instead of the answer, curl 7.88 among them),
            // up to twice the body limit; past that it is answered at once.
            stream.too_large = true;
            let held = std::mem::take(&mut stream.body).len() as u32;
            self.released = self.released.saturating_add(len).saturating_add(held);
            if end_stream || stream.received > 2 * self.config.max_body as u64 {
                stream.remote_closed = end_stream;
                self.deliver(id, Err(BodyError::TooLarge), requests);
            } else if stream.recv_credit < window / 2 {
                let grant = window - stream.recv_credit;
                stream.recv_credit += grant;
                frame::window_update(&mut self.out, id, grant as u32);
            }
            return Ok(());
        }
        stream.body.extend_from_slice(data);
        self.released = self.released.saturating_add(len - data.len() as u32);
        if end_stream {
            self.end_of_body(id, requests)?;
        }
        Ok(())
    }

    /// The client ended a stream whose body was still arriving.
    fn end_of_body(&mut self, id: u32, requests: &mut Vec<Request>) -> Result<(), ConnectionError> {
        let Some(stream) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        stream.remote_closed = true;
        let length_ok = stream
            .head
            .as_ref()
            .and_then(|h| h.content_length)
            .is_none_or(|n| n == stream.received);
        if !length_ok {
            // RFC 9113 §8.1.1: a body that does not match content-length is malformed.
            return self.stream_error(id, ErrorCode::PROTOCOL_ERROR);
        }
        let body = std::mem::take(&mut stream.body);
        self.deliver(id, Ok(body), requests);
        Ok(())
    }

    fn headers(
        &mut self,
        header: Header,
        payload: &[u8],
        now: Instant,
        requests: &mut Vec<Request>,
    ) -> Result<(), ConnectionError> {
        let id = header.stream;
        if id == 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        if id.is_multiple_of(2) {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "HEADERS on a server-initiated (even) stream",
            ));
        }
        let mut fragment = unpad(&header, payload)?;
        let mut self_dependent = false;
        if header.has(flag::PRIORITY) {
            let Some((priority, rest)) = fragment.split_first_chunk::<5>() else {
                return Err(error(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "HEADERS too short for its priority",
                ));
            };
            let dependency =
                u32::from_be_bytes([priority[0], priority[1], priority[2], priority[3]])
                    & frame::MAX_WINDOW;
            self_dependent = dependency == id;
            fragment = rest;
        }
        let end_stream = header.has(flag::END_STREAM);
        if header.has(flag::END_HEADERS) {
            return self.field_block(id, end_stream, self_dependent, fragment, now, requests);
        }
        self.check_block_size(fragment.len())?;
        self.block = Some(Block {
            stream: id,
            end_stream,
            self_dependent,
            bytes: fragment.to_vec(),
        });
        Ok(())
    }

    fn continuation(
        &mut self,
        header: Header,
        payload: &[u8],
        now: Instant,
        requests: &mut Vec<Request>,
    ) -> Result<(), ConnectionError> {
        let Some(block) = self.block.as_ref() else {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "CONTINUATION without a field block",
            ));
        };
        if block.stream != header.stream {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "CONTINUATION on another stream",
            ));
        }
        let held = block.bytes.len();
        let end = header.has(flag::END_HEADERS);
        if payload.is_empty() && !end {
            self.idle_frame()?;
        }
        self.check_block_size(held + payload.len())?;
        let mut block = self.block.take().expect("checked above");
        block.bytes.extend_from_slice(payload);
        if !end {
            self.block = Some(block);
            return Ok(());
        }
        self.field_block(
            block.stream,
            block.end_stream,
            block.self_dependent,
            &block.bytes,
            now,
            requests,
        )
    }

    fn check_block_size(&self, len: usize) -> Result<(), ConnectionError> {
        if len > self.config.max_head.saturating_mul(2) {
            return Err(error(
                ErrorCode::ENHANCE_YOUR_CALM,
                "field block too large to decode",
            ));
        }
        Ok(())
    }

    /// A complete field block: a new request, trailers, or a block for a closed stream.
    fn field_block(
        &mut self,
        id: u32,
        end_stream: bool,
        self_dependent: bool,
        block: &[u8],
        now: Instant,
        requests: &mut Vec<Request>,
    ) -> Result<(), ConnectionError> {
        const COMPRESSION: ConnectionError = ConnectionError {
            code: ErrorCode::COMPRESSION_ERROR,
            reason: "field block does not decode (HPACK)",
        };
        if let Some(stream) = self.streams.get(&id) {
            // Trailers (RFC 9113 §8.1): decoded to keep HPACK in step, then only checked.
            let mut malformed = None;
            self.decoder
                .decode(block, |name, value| {
                    head::trailer_field(name, value, &mut malformed)
                })
                .map_err(|_| COMPRESSION)?;
            if stream.remote_closed {
                return self.stream_error(id, ErrorCode::STREAM_CLOSED);
            }
            if !end_stream || malformed.is_some() || self_dependent {
                return self.stream_error(id, ErrorCode::PROTOCOL_ERROR);
            }
            if stream.head.is_none() {
                // Delivered early; the stream is now closed from the client's side.
                if let Some(stream) = self.streams.get_mut(&id) {
                    stream.remote_closed = true;
                }
                self.close_if_done(id);
                return Ok(());
            }
            return self.end_of_body(id, requests);
        }
        if id <= self.last_stream {
            self.decoder
                .decode(block, |_, _| {})
                .map_err(|_| COMPRESSION)?;
            if self.recently_reset.contains(&id) {
                return Ok(());
            }
            if self.recently_closed.contains(&id) {
                return self.stream_error(id, ErrorCode::STREAM_CLOSED);
            }
            // RFC 9113 §5.1.1: a new stream's identifier must be greater than every one the
            // client used; a lower one that never opened is an unexpected identifier.
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "stream identifier lower than one already used",
            ));
        }
        self.last_stream = id;
        let mut head = HeadBuilder::new(self.config.max_head);
        self.decoder
            .decode(block, |name, value| head.field(name, value))
            .map_err(|_| COMPRESSION)?;
        head.finish();
        if self.goaway.is_some_and(|last| id > last) {
            // RFC 9113 §6.8: streams opened after GOAWAY are ignored.
            return Ok(());
        }
        if self_dependent || head.malformed.is_some() {
            return self.stream_error(id, ErrorCode::PROTOCOL_ERROR);
        }
        if self.streams.len() >= self.config.max_streams as usize {
            // RFC 9113 §5.1.2.
            return self.stream_error(id, ErrorCode::REFUSED_STREAM);
        }
        self.requests = self.requests.saturating_add(1);
        let too_large = head.too_large();
        let content_length = head.content_length;
        self.streams.insert(
            id,
            Stream {
                remote_closed: false,
                head: Some(Head {
                    method: head.method.unwrap_or(Method::Other),
                    target: head.path.unwrap_or_default(),
                    content_type: head.content_type,
                    content_length,
                }),
                body: Vec::new(),
                received: 0,
                recv_credit: self.stream_window(),
                send_window: self.peer_initial_window,
                responded: false,
                too_large: false,
                pending: Vec::new(),
                opened: now,
            },
        );
        self.receiving += 1;
        if too_large {
            self.streams
                .get_mut(&id)
                .expect("inserted above")
                .remote_closed = end_stream;
            self.deliver(id, Err(BodyError::HeadTooLarge), requests);
        } else if end_stream {
            if content_length.is_some_and(|n| n > 0) {
                return self.stream_error(id, ErrorCode::PROTOCOL_ERROR);
            }
            self.end_of_body(id, requests)?;
        } else if content_length.is_some_and(|n| n > 2 * self.config.max_body as u64) {
            // Too large to be worth reading: answered now, the upload reset after the answer.
            self.deliver(id, Err(BodyError::TooLarge), requests);
        } else if content_length.is_some_and(|n| n > self.config.max_body as u64) {
            // Answered once the upload ends (see `data`).
            self.streams.get_mut(&id).expect("inserted above").too_large = true;
        }
        Ok(())
    }

    fn window_update(&mut self, header: Header, payload: &[u8]) -> Result<(), ConnectionError> {
        let Ok(bytes) = <[u8; 4]>::try_from(payload) else {
            return Err(error(
                ErrorCode::FRAME_SIZE_ERROR,
                "WINDOW_UPDATE is not 4 bytes",
            ));
        };
        let increment = i64::from(u32::from_be_bytes(bytes) & frame::MAX_WINDOW);
        let id = header.stream;
        if id == 0 {
            if increment == 0 {
                return Err(error(
                    ErrorCode::PROTOCOL_ERROR,
                    "WINDOW_UPDATE of 0 on the connection",
                ));
            }
            self.send_window += increment;
            if self.send_window > i64::from(frame::MAX_WINDOW) {
                return Err(error(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window over 2^31-1",
                ));
            }
            if self.blocked.is_empty() {
                return self.idle_frame();
            }
            self.flush_blocked();
            return Ok(());
        }
        if id > self.last_stream {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        let Some(stream) = self.streams.get_mut(&id) else {
            // Closed: allowed (RFC 9113 §6.9), but it frees nothing.
            return self.idle_frame();
        };
        if increment == 0 {
            return self.stream_error(id, ErrorCode::PROTOCOL_ERROR);
        }
        stream.send_window += increment;
        if stream.send_window > i64::from(frame::MAX_WINDOW) {
            return self.stream_error(id, ErrorCode::FLOW_CONTROL_ERROR);
        }
        if stream.pending.is_empty() {
            return self.idle_frame();
        }
        self.flush_stream(id);
        Ok(())
    }

    fn rst_stream(&mut self, header: Header, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream == 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        if payload.len() != 4 {
            return Err(error(
                ErrorCode::FRAME_SIZE_ERROR,
                "RST_STREAM is not 4 bytes",
            ));
        }
        if header.stream > self.last_stream {
            return Err(error(
                ErrorCode::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        match self.remove(header.stream) {
            Some(stream) if !stream.responded => {
                self.client_resets = self.client_resets.saturating_add(1);
                if self.client_resets > RESET_ALLOWANCE.saturating_add(self.responses) {
                    return Err(error(
                        ErrorCode::ENHANCE_YOUR_CALM,
                        "too many streams reset before their answer",
                    ));
                }
                Ok(())
            }
            Some(_) => Ok(()),
            // Already closed: it resets nothing.
            None => self.idle_frame(),
        }
    }

    fn settings(&mut self, header: Header, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream != 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if header.has(flag::ACK) {
            if !payload.is_empty() {
                return Err(error(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "SETTINGS acknowledgement with a payload",
                ));
            }
            // This side sends SETTINGS once: every acknowledgement past that one is idle.
            return self.idle_frame();
        }
        if !payload.len().is_multiple_of(6) {
            return Err(error(
                ErrorCode::FRAME_SIZE_ERROR,
                "SETTINGS length not a multiple of 6",
            ));
        }
        if self.settings_seen {
            self.idle_frame()?;
        }
        self.settings_seen = true;
        let mut grew = false;
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                setting::HEADER_TABLE_SIZE => {
                    self.encoder.set_peer_max_table_size(value as usize);
                }
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(error(
                        ErrorCode::PROTOCOL_ERROR,
                        "SETTINGS_ENABLE_PUSH not 0 or 1",
                    ));
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if value > frame::MAX_WINDOW {
                        return Err(error(
                            ErrorCode::FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
                        ));
                    }
                    // RFC 9113 §6.9.2: open streams' windows move by the difference.
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for stream in self.streams.values_mut() {
                        stream.send_window += delta;
                        if stream.send_window > i64::from(frame::MAX_WINDOW) {
                            return Err(error(
                                ErrorCode::FLOW_CONTROL_ERROR,
                                "stream window over 2^31-1",
                            ));
                        }
                    }
                    grew |= delta > 0;
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value)
                    {
                        return Err(error(
                            ErrorCode::PROTOCOL_ERROR,
                            "SETTINGS_MAX_FRAME_SIZE out of range",
                        ));
                    }
                    self.peer_max_frame = value as usize;
                }
                // Others, and settings this side need not act on, are ignored (§6.5.2).
                _ => {}
            }
        }
        frame::settings_ack(&mut self.out);
        if grew {
            self.flush_blocked();
        }
        Ok(())
    }

    fn ping(&mut self, header: Header, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream != 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "PING on a stream"));
        }
        let Ok(data) = <&[u8; 8]>::try_from(payload) else {
            return Err(error(ErrorCode::FRAME_SIZE_ERROR, "PING is not 8 bytes"));
        };
        self.idle_frame()?;
        if !header.has(flag::ACK) {
            frame::ping_ack(&mut self.out, data);
        }
        Ok(())
    }

    fn priority(&mut self, header: Header, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream == 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "PRIORITY on stream 0"));
        }
        self.idle_frame()?;
        let Ok(bytes) = <[u8; 5]>::try_from(payload) else {
            return self.stream_error(header.stream, ErrorCode::FRAME_SIZE_ERROR);
        };
        let dependency =
            u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) & frame::MAX_WINDOW;
        if dependency == header.stream {
            return self.stream_error(header.stream, ErrorCode::PROTOCOL_ERROR);
        }
        Ok(())
    }

    fn peer_goaway(&mut self, header: Header, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream != 0 {
            return Err(error(ErrorCode::PROTOCOL_ERROR, "GOAWAY on a stream"));
        }
        if payload.len() < 8 {
            return Err(error(
                ErrorCode::FRAME_SIZE_ERROR,
                "GOAWAY shorter than 8 bytes",
            ));
        }
        self.peer_goaway = true;
        self.idle_frame()
    }

    // ---- stream bookkeeping -------------------------------------------------------------

    /// Hands out the request on `id` (once): its head, with `body`.
    fn deliver(&mut self, id: u32, body: Result<Vec<u8>, BodyError>, requests: &mut Vec<Request>) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(head) = stream.head.take() else {
            return;
        };
        self.receiving -= 1;
        // Body bytes held so far now belong to the caller (or are dropped): credit returns.
        let held = stream.body.len() + body.as_ref().map_or(0, Vec::len);
        stream.body = Vec::new();
        self.release(held as u32);
        requests.push(Request {
            stream: id,
            method: head.method,
            target: head.target,
            content_type: head.content_type,
            body,
        });
    }

    /// Ends `id` with a stream error (RFC 9113 §5.4.2).
    fn stream_error(&mut self, id: u32, code: ErrorCode) -> Result<(), ConnectionError> {
        self.remove(id);
        frame::rst_stream(&mut self.out, id, code);
        self.remember_reset(id);
        self.local_resets = self.local_resets.saturating_add(1);
        if self.local_resets > MAX_LOCAL_RESETS {
            return Err(error(
                ErrorCode::ENHANCE_YOUR_CALM,
                "too many stream errors",
            ));
        }
        Ok(())
    }

    /// Forgets `id`, returning flow-control credit for any body it held.
    fn remove(&mut self, id: u32) -> Option<Stream> {
        let stream = self.streams.remove(&id)?;
        if self.recently_closed.len() == RESET_MEMORY {
            self.recently_closed.pop_front();
        }
        self.recently_closed.push_back(id);
        if stream.head.is_some() {
            self.receiving -= 1;
            self.release(stream.body.len() as u32);
        }
        Some(stream)
    }

    fn remember_reset(&mut self, id: u32) {
        if self.recently_reset.len() == RESET_MEMORY {
            self.recently_reset.pop_front();
        }
        self.recently_reset.push_back(id);
    }

    /// `n` received bytes are no longer held.
    fn release(&mut self, n: u32) {
        self.released = self.released.saturating_add(n);
    }

    /// Returns released credit once the client is down to half its window, in one
    /// WINDOW_UPDATE (not one per request).
    fn replenish(&mut self) {
        if self.released > 0
            && self.recv_credit < i64::from(self.config.connection_window / 2)
            && self.failed.is_none()
        {
            frame::window_update(&mut self.out, 0, self.released);
            self.recv_credit += i64::from(self.released);
            self.released = 0;
        }
    }

    // ---- sending ------------------------------------------------------------------------

    /// Sends what the windows allow of `body` on `id`; keeps the rest.
    fn send_body(&mut self, id: u32, body: &[u8]) {
        let sent = self.send_data(id, body);
        if sent == body.len() {
            return self.close_local(id);
        }
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.pending = body[sent..].to_vec();
            self.blocked.push_back(id);
        }
    }

    /// Writes DATA frames for as much of `body` as the connection's and `id`'s windows allow,
    /// END_STREAM on the last byte; returns how much.
    fn send_data(&mut self, id: u32, body: &[u8]) -> usize {
        let Some(stream) = self.streams.get_mut(&id) else {
            return 0;
        };
        let allowed = self.send_window.min(stream.send_window).max(0) as usize;
        let n = allowed.min(body.len());
        let mut sent = 0;
        while sent < n {
            let chunk = (n - sent).min(self.peer_max_frame);
            let last = sent + chunk == body.len();
            frame::data(&mut self.out, id, &body[sent..sent + chunk], last);
            sent += chunk;
        }
        self.send_window -= n as i64;
        stream.send_window -= n as i64;
        n
    }

    /// Sends what the windows now allow of `id`'s waiting response.
    fn flush_stream(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let pending = std::mem::take(&mut stream.pending);
        let sent = self.send_data(id, &pending);
        if sent == pending.len() {
            self.blocked.retain(|&b| b != id);
            self.close_local(id);
        } else if let Some(stream) = self.streams.get_mut(&id) {
            stream.pending = pending[sent..].to_vec();
        }
    }

    /// Sends waiting responses, oldest first, while the connection window lasts.
    fn flush_blocked(&mut self) {
        let mut waiting = std::mem::take(&mut self.blocked);
        while self.send_window > 0
            && let Some(id) = waiting.pop_front()
        {
            self.flush_stream(id);
            if self.streams.get(&id).is_some_and(|s| !s.pending.is_empty()) {
                self.blocked.push_back(id);
            }
        }
        self.blocked.extend(waiting);
    }

    /// This side finished its response on `id`: the stream closes once the client's side has
    /// too; a client still sending is asked to stop (RST_STREAM(NO_ERROR), RFC 9113 §8.1).
    fn close_local(&mut self, id: u32) {
        let Some(stream) = self.streams.get(&id) else {
            return;
        };
        if !stream.pending.is_empty() {
            return;
        }
        let remote_closed = stream.remote_closed;
        self.remove(id);
        if !remote_closed {
            frame::rst_stream(&mut self.out, id, ErrorCode::NO_ERROR);
            self.remember_reset(id);
        }
    }

    /// Removes `id` if both sides are done with it.
    fn close_if_done(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.remote_closed && s.responded && s.pending.is_empty())
        {
            self.remove(id);
        }
    }
}

/// The payload of a DATA or HEADERS frame without its padding (RFC 9113 §6.1, §6.2).
fn unpad<'a>(header: &Header, payload: &'a [u8]) -> Result<&'a [u8], ConnectionError> {
    if !header.has(flag::PADDED) {
        return Ok(payload);
    }
    match payload.split_first() {
        Some((&pad, rest)) if usize::from(pad) <= rest.len() => {
            Ok(&rest[..rest.len() - usize::from(pad)])
        }
        _ => Err(error(
            ErrorCode::PROTOCOL_ERROR,
            "padding as long as the frame",
        )),
    }
}
