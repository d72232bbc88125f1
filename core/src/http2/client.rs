//! The client side of an HTTP/2 connection for DNS over HTTPS (RFC 8484), sans I/O: queries
//! in, bytes for the server out; the server's bytes in, outcomes out. Shared by kudurru's DoH
//! upstreams (`transports`) and kudurru-bench's DoH load (both keep only the socket tasks).
//!
//! ```text
//! send(message, tag) ─▶ HEADERS (+ DATA) ─▶ output ─▶ shell writes it to TLS
//! receive(bytes from TLS) ─▶ frames ─▶ Outcome::Answer(tag, body) | Outcome::Failed(tag, status)
//! ```
//!
//! A query costs an encoded head and a copy. Each query carries a tag of the shell's choosing
//! (the upstream client's DNS message ID, nothing for the bench), handed back with its outcome.
//!
//! The client keeps to the server's limits: SETTINGS_MAX_CONCURRENT_STREAMS (queries over it
//! wait for a stream to end), flow-control windows for request bodies, and it sends again a
//! stream refused with REFUSED_STREAM (RFC 9113 §8.7: not processed), which happens when a new
//! connection's first queries go out before the server's SETTINGS arrive. Everything the
//! server sends is peer input: a malformed frame ends the connection with an error, never a
//! panic (fuzz target `upstream_doh_response`).

use std::collections::{HashMap, VecDeque};

use base64::Engine;

use super::frame::{self, ErrorCode, Header, flag, kind, setting};
use super::hpack;

/// How queries are carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `POST` with an `application/dns-message` body.
    Post,
    /// `GET ?dns=` base64url.
    Get,
}

/// Tries per query when the server refuses its stream before processing it.
const REFUSED_ATTEMPTS: u8 = 4;
/// The stream-level receive window the client advertises (answers are at most 64 KiB).
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection-level receive window; credit goes back once a quarter of it is used.
const CONNECTION_WINDOW: u32 = 4 << 20;
/// Most bytes of an answer kept; a longer body fails the query.
const MAX_ANSWER: usize = u16::MAX as usize;
/// How much of the server's HPACK dynamic table the request encoder uses: the authority,
/// path and media types fit.
const ENCODER_TABLE: usize = 512;
/// Largest response field block kept while its CONTINUATION frames arrive.
const MAX_FIELD_BLOCK: usize = 64 << 10;

/// What became of one query, with its tag.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// A `200` response's body.
    Answer(T, Vec<u8>),
    /// Any other status, or 0 for a stream reset (or refused too often).
    Failed(T, u16),
}

/// One query's stream.
struct Exchange<T> {
    message: Vec<u8>,
    tag: T,
    /// Streams the query was sent on so far (refusals send it again).
    attempts: u8,
    /// What the server may still receive on this stream.
    send_window: i64,
    status: Option<u16>,
    body: Vec<u8>,
    /// The body went over [`MAX_ANSWER`].
    too_long: bool,
}

/// A field block spread over HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
}

/// The client side of one HTTP/2 connection, sans I/O: queries in, bytes for the server out;
/// the server's bytes in, [`Outcome`]s out.
pub struct Client<T> {
    authority: Box<str>,
    path: Box<str>,
    method: Method,
    encoder: hpack::Encoder,
    decoder: hpack::Decoder,
    /// Bytes for the server, not yet taken.
    out: Vec<u8>,
    next_stream: u32,
    streams: HashMap<u32, Exchange<T>>,
    /// Queries over the server's stream limit, waiting for a stream to end (with the streams
    /// they were refused on so far).
    waiting: VecDeque<(Vec<u8>, T, u8)>,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (none until its SETTINGS).
    max_streams: usize,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE.
    initial_window: i64,
    /// What the server may still receive on the connection.
    send_window: i64,
    /// POST streams whose body waits for window, oldest first.
    blocked: VecDeque<u32>,
    /// Body bytes received since credit last went back.
    received: u32,
    block: Option<Block>,
}

impl<T> Client<T> {
    /// A connection to `uri` (`https://AUTHORITY/PATH`): the preface and this side's SETTINGS
    /// are the first output.
    pub fn new(uri: &str, method: Method) -> Self {
        let (authority, path) = split_uri(uri);
        let mut out = frame::PREFACE.to_vec();
        frame::settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            ],
        );
        frame::window_update(&mut out, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
        Self {
            authority: authority.into(),
            path: path.into(),
            method,
            encoder: hpack::Encoder::new(ENCODER_TABLE),
            decoder: hpack::Decoder::new(frame::DEFAULT_HEADER_TABLE_SIZE),
            out,
            next_stream: 1,
            streams: HashMap::new(),
            waiting: VecDeque::new(),
            max_streams: usize::MAX,
            initial_window: i64::from(frame::DEFAULT_WINDOW),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            blocked: VecDeque::new(),
            received: 0,
            block: None,
        }
    }

    /// Bytes for the server.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// Moves the bytes for the server into `into` (cleared first).
    pub fn take_output(&mut self, into: &mut Vec<u8>) {
        into.clear();
        std::mem::swap(into, &mut self.out);
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Sends `message` as one request, or queues it while the server's stream limit is
    /// reached. Fails when the connection has used up its stream identifiers.
    pub fn send(&mut self, message: Vec<u8>, tag: T) -> Result<(), &'static str> {
        if self.streams.len() >= self.max_streams {
            self.waiting.push_back((message, tag, 0));
            return Ok(());
        }
        self.open(message, tag, 0)
    }

    fn open(&mut self, message: Vec<u8>, tag: T, attempts: u8) -> Result<(), &'static str> {
        let stream = self.next_stream;
        if stream > frame::MAX_WINDOW {
            return Err("stream identifiers used up");
        }
        self.next_stream += 2;
        let post = self.method == Method::Post;
        let at = frame::start(&mut self.out);
        self.encoder.begin_block(&mut self.out);
        let method: &[u8] = if post { b"POST" } else { b"GET" };
        self.encoder.field(b":method", method, true, &mut self.out);
        self.encoder
            .field(b":scheme", b"https", true, &mut self.out);
        self.encoder.field(
            b":authority",
            self.authority.as_bytes(),
            true,
            &mut self.out,
        );
        if post {
            self.encoder
                .field(b":path", self.path.as_bytes(), true, &mut self.out);
        } else {
            let mut path = String::with_capacity(self.path.len() + 5 + message.len() * 4 / 3 + 3);
            path.push_str(&self.path);
            path.push_str("?dns=");
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(&message, &mut path);
            self.encoder
                .field(b":path", path.as_bytes(), false, &mut self.out);
        }
        self.encoder
            .field(b"accept", b"application/dns-message", true, &mut self.out);
        if post {
            self.encoder.field(
                b"content-type",
                b"application/dns-message",
                true,
                &mut self.out,
            );
        }
        let end_stream = if post { 0 } else { flag::END_STREAM };
        frame::finish(
            &mut self.out,
            at,
            kind::HEADERS,
            flag::END_HEADERS | end_stream,
            stream,
        );
        self.streams.insert(
            stream,
            Exchange {
                message,
                tag,
                attempts: attempts + 1,
                send_window: self.initial_window,
                status: None,
                body: Vec::new(),
                too_long: false,
            },
        );
        if post {
            self.blocked.push_back(stream);
            self.send_bodies();
        }
        Ok(())
    }

    /// Sends the bodies waiting for window, in order, as far as the windows allow.
    fn send_bodies(&mut self) {
        while let Some(&stream) = self.blocked.front() {
            let Some(exchange) = self.streams.get_mut(&stream) else {
                self.blocked.pop_front();
                continue;
            };
            let len = exchange.message.len() as i64;
            if len > self.send_window || len > exchange.send_window {
                return;
            }
            self.send_window -= len;
            exchange.send_window -= len;
            frame::data(&mut self.out, stream, &exchange.message, true);
            self.blocked.pop_front();
        }
    }

    /// Takes the server's bytes: whole frames are processed, each finished query reported to
    /// `outcome`; returns how many bytes were used (a partial frame waits for more). An error
    /// ends the connection: what it says went wrong.
    pub fn receive(
        &mut self,
        input: &[u8],
        outcome: &mut impl FnMut(Outcome<T>),
    ) -> Result<usize, String> {
        let mut at = 0;
        while input.len() - at >= frame::HEADER_LEN {
            let header = Header::parse(
                input[at..at + frame::HEADER_LEN]
                    .try_into()
                    .expect("the loop condition leaves nine bytes"),
            );
            if header.length > frame::DEFAULT_MAX_FRAME_SIZE {
                return Err(format!("a frame of {} bytes", header.length));
            }
            let end = at + frame::HEADER_LEN + header.length as usize;
            if input.len() < end {
                break;
            }
            self.frame(header, &input[at + frame::HEADER_LEN..end], outcome)?;
            at = end;
        }
        if self.received >= CONNECTION_WINDOW / 4 {
            frame::window_update(&mut self.out, 0, self.received);
            self.received = 0;
        }
        Ok(at)
    }

    fn frame(
        &mut self,
        header: Header,
        payload: &[u8],
        outcome: &mut impl FnMut(Outcome<T>),
    ) -> Result<(), String> {
        if let Some(block) = &mut self.block {
            if header.kind != kind::CONTINUATION || header.stream != block.stream {
                return Err("a field block interrupted".into());
            }
            if block.bytes.len() + payload.len() > MAX_FIELD_BLOCK {
                return Err("a response field block over 64 KiB".into());
            }
            block.bytes.extend_from_slice(payload);
            if header.has(flag::END_HEADERS) {
                let block = self.block.take().expect("matched above");
                self.field_block(block.stream, &block.bytes, block.end_stream, outcome)?;
            }
            return Ok(());
        }
        match header.kind {
            kind::DATA => {
                self.received = self.received.saturating_add(header.length);
                let data = unpad(header, payload)?;
                if let Some(exchange) = self.streams.get_mut(&header.stream) {
                    if exchange.body.len() + data.len() > MAX_ANSWER {
                        exchange.too_long = true;
                    } else {
                        exchange.body.extend_from_slice(data);
                    }
                }
                if header.has(flag::END_STREAM) {
                    self.finish(header.stream, outcome);
                }
            }
            kind::HEADERS => {
                let mut block = unpad(header, payload)?;
                if header.has(flag::PRIORITY) {
                    block = block.get(5..).ok_or("HEADERS too short for its priority")?;
                }
                let end_stream = header.has(flag::END_STREAM);
                if header.has(flag::END_HEADERS) {
                    self.field_block(header.stream, block, end_stream, outcome)?;
                } else {
                    self.block = Some(Block {
                        stream: header.stream,
                        end_stream,
                        bytes: block.to_vec(),
                    });
                }
            }
            kind::RST_STREAM => {
                let code = payload
                    .try_into()
                    .map(u32::from_be_bytes)
                    .map_err(|_| "RST_STREAM of the wrong size")?;
                if let Some(exchange) = self.streams.remove(&header.stream) {
                    if code == ErrorCode::REFUSED_STREAM.0 && exchange.attempts < REFUSED_ATTEMPTS {
                        self.waiting.push_front((
                            exchange.message,
                            exchange.tag,
                            exchange.attempts,
                        ));
                    } else {
                        outcome(Outcome::Failed(exchange.tag, 0));
                    }
                    self.admit()?;
                }
            }
            kind::SETTINGS if !header.has(flag::ACK) => {
                if header.stream != 0 || !payload.len().is_multiple_of(6) {
                    return Err("a malformed SETTINGS frame".into());
                }
                for entry in payload.chunks_exact(6) {
                    let id = u16::from_be_bytes([entry[0], entry[1]]);
                    let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
                    match id {
                        setting::HEADER_TABLE_SIZE => {
                            self.encoder.set_peer_max_table_size(value as usize);
                        }
                        setting::MAX_CONCURRENT_STREAMS => self.max_streams = value as usize,
                        setting::INITIAL_WINDOW_SIZE => {
                            if value > frame::MAX_WINDOW {
                                return Err("SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1".into());
                            }
                            let change = i64::from(value) - self.initial_window;
                            self.initial_window = i64::from(value);
                            for exchange in self.streams.values_mut() {
                                exchange.send_window += change;
                            }
                        }
                        _ => {}
                    }
                }
                frame::settings_ack(&mut self.out);
                self.send_bodies();
                self.admit()?;
            }
            kind::PING if !header.has(flag::ACK) => {
                let payload: &[u8; 8] = payload.try_into().map_err(|_| "PING of the wrong size")?;
                frame::ping_ack(&mut self.out, payload);
            }
            kind::WINDOW_UPDATE => {
                let increment = payload
                    .try_into()
                    .map(|b| u32::from_be_bytes(b) & frame::MAX_WINDOW)
                    .map_err(|_| "WINDOW_UPDATE of the wrong size")?;
                if header.stream == 0 {
                    self.send_window += i64::from(increment);
                } else if let Some(exchange) = self.streams.get_mut(&header.stream) {
                    exchange.send_window += i64::from(increment);
                }
                self.send_bodies();
            }
            kind::GOAWAY => return Err("the server sent GOAWAY".into()),
            kind::PUSH_PROMISE => return Err("PUSH_PROMISE with push disabled".into()),
            kind::CONTINUATION => return Err("CONTINUATION outside a field block".into()),
            _ => {} // SETTINGS and PING acknowledgements, PRIORITY, unknown types
        }
        Ok(())
    }

    /// A complete field block on `stream`: the response's `:status` (a later block is a
    /// trailer section and only keeps the decoder in step).
    fn field_block(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
        outcome: &mut impl FnMut(Outcome<T>),
    ) -> Result<(), String> {
        let mut status = None;
        self.decoder
            .decode(block, |name, value| {
                if name == b":status" {
                    status = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                }
            })
            .map_err(|e| format!("HPACK: {e}"))?;
        if let Some(exchange) = self.streams.get_mut(&stream)
            && exchange.status.is_none()
        {
            exchange.status = Some(status.unwrap_or(0));
        }
        if end_stream {
            self.finish(stream, outcome);
        }
        Ok(())
    }

    /// `stream` ended: its outcome, and a waiting query takes its place.
    fn finish(&mut self, stream: u32, outcome: &mut impl FnMut(Outcome<T>)) {
        let Some(exchange) = self.streams.remove(&stream) else {
            return;
        };
        outcome(match exchange.status {
            Some(200) if !exchange.too_long => Outcome::Answer(exchange.tag, exchange.body),
            Some(status) => Outcome::Failed(exchange.tag, status),
            None => Outcome::Failed(exchange.tag, 0),
        });
        // Stream identifiers run out only after ~10^9 queries; the connection then ends at
        // the next send.
        let _ = self.admit();
    }

    /// Opens streams for waiting queries while the server's limit allows.
    fn admit(&mut self) -> Result<(), String> {
        while self.streams.len() < self.max_streams {
            let Some((message, tag, attempts)) = self.waiting.pop_front() else {
                break;
            };
            self.open(message, tag, attempts)?;
        }
        Ok(())
    }
}

/// A DATA or HEADERS payload without its padding.
fn unpad(header: Header, payload: &[u8]) -> Result<&[u8], String> {
    if !header.has(flag::PADDED) {
        return Ok(payload);
    }
    let (&pad, rest) = payload
        .split_first()
        .ok_or("a padded frame without its length")?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|end| &rest[..end])
        .ok_or_else(|| "padding longer than the frame".into())
}

/// `https://AUTHORITY/PATH` as its authority and path.
pub fn split_uri(uri: &str) -> (&str, &str) {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::{Config, Connection, Field, Request};
    use std::time::Instant;

    /// A kudurru HTTP/2 server connection in memory, the client's peer.
    struct Server {
        connection: Connection,
        requests: Vec<Request>,
    }

    impl Server {
        fn new(max_streams: u32) -> Self {
            Self {
                connection: Connection::new(Config {
                    max_streams,
                    max_head: 16 << 10,
                    max_body: 65_535,
                    connection_window: 1 << 20,
                }),
                requests: Vec::new(),
            }
        }

        /// Takes everything the client wrote.
        fn take(&mut self, client: &mut Client<u8>) {
            let mut bytes = Vec::new();
            client.take_output(&mut bytes);
            let used = self
                .connection
                .receive(&bytes, Instant::now(), &mut self.requests)
                .expect("the client speaks HTTP/2");
            assert_eq!(used, bytes.len(), "whole frames only");
        }

        /// Gives the client everything this side wrote; what it finished, in order.
        fn give(&mut self, client: &mut Client<u8>) -> Vec<Outcome<u8>> {
            let bytes = self.connection.output().to_vec();
            self.connection.sent(bytes.len());
            let mut outcomes = Vec::new();
            // Byte by byte: a frame split anywhere waits for the rest.
            let mut pending = Vec::new();
            for byte in bytes {
                pending.push(byte);
                let used = client
                    .receive(&pending, &mut |o| outcomes.push(o))
                    .expect("the server speaks HTTP/2");
                pending.drain(..used);
            }
            assert!(pending.is_empty());
            outcomes
        }
    }

    fn content_type() -> [Field<'static>; 1] {
        [Field {
            name: b"content-type",
            value: b"application/dns-message",
            remember: true,
        }]
    }

    #[test]
    fn posts_and_gets_reach_a_kudurru_server_and_answers_come_back_by_stream() {
        for method in [Method::Post, Method::Get] {
            let mut client = Client::<u8>::new("https://127.0.0.1:8443/dns-query", method);
            let mut server = Server::new(100);
            for i in 0..3u8 {
                client.send(vec![i; 20 + usize::from(i)], i).unwrap();
            }
            server.take(&mut client);
            assert_eq!(server.requests.len(), 3, "{method:?}");
            for (i, request) in server.requests.iter().enumerate() {
                let query = vec![i as u8; 20 + i];
                match method {
                    Method::Post => {
                        assert_eq!(request.target, b"/dns-query");
                        assert_eq!(
                            request.content_type.as_deref(),
                            Some(&b"application/dns-message"[..])
                        );
                        assert_eq!(request.body.as_deref(), Ok(&query[..]));
                    }
                    Method::Get => {
                        let encoded =
                            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&query);
                        assert_eq!(
                            request.target,
                            format!("/dns-query?dns={encoded}").as_bytes()
                        );
                    }
                }
            }
            // Answered out of order, one with a body over several DATA frames, one refused.
            let streams: Vec<u32> = server.requests.iter().map(|r| r.stream).collect();
            let long = vec![7u8; 40_000];
            server
                .connection
                .respond(streams[2], 200, &content_type(), b"third");
            server.connection.respond(streams[0], 404, &[], b"");
            server
                .connection
                .respond(streams[1], 200, &content_type(), &long);
            assert_eq!(
                server.give(&mut client),
                [
                    Outcome::Answer(2, b"third".to_vec()),
                    Outcome::Failed(0, 404),
                    Outcome::Answer(1, long)
                ]
            );
            assert_eq!(client.open_streams(), 0);
        }
    }

    #[test]
    fn queries_over_the_servers_stream_limit_wait_and_refused_ones_go_again() {
        let mut client = Client::<u8>::new("https://localhost/q", Method::Post);
        let mut server = Server::new(2);
        // Before the server's SETTINGS: all five go out and three are refused.
        for i in 0..5u8 {
            client.send(vec![i; 12], i).unwrap();
        }
        server.take(&mut client);
        assert_eq!(server.requests.len(), 2);
        assert!(
            server.give(&mut client).is_empty(),
            "refusals are no outcome"
        );
        assert_eq!(client.open_streams(), 2, "the limit is known now");
        server.take(&mut client);
        let mut answered = Vec::new();
        while answered.len() < 5 {
            let requests = std::mem::take(&mut server.requests);
            assert!(
                !requests.is_empty() && requests.len() <= 2,
                "{}",
                requests.len()
            );
            for request in requests {
                let body = request.body.unwrap();
                server
                    .connection
                    .respond(request.stream, 200, &content_type(), &body);
            }
            for outcome in server.give(&mut client) {
                let Outcome::Answer(tag, body) = outcome else {
                    panic!("{outcome:?}")
                };
                assert_eq!(tag, body[0], "the tag comes back with its answer");
                answered.push(body[0]);
            }
            server.take(&mut client);
        }
        answered.sort_unstable();
        assert_eq!(answered, [0, 1, 2, 3, 4], "every query answered once");
    }

    #[test]
    fn a_stream_refused_too_often_and_a_reset_one_fail_with_status_zero() {
        let mut client = Client::<u8>::new("https://localhost/q", Method::Post);
        let mut refusal = Vec::new();
        client.send(b"query".to_vec(), 1).unwrap();
        client.send(b"other".to_vec(), 2).unwrap();
        let mut outcomes = Vec::new();
        // Stream 1 refused on every attempt (1, 5, 7, 9 once stream 3 holds 3); stream 3 reset.
        frame::rst_stream(&mut refusal, 3, ErrorCode::INTERNAL_ERROR);
        for stream in [1, 5, 7, 9] {
            frame::rst_stream(&mut refusal, stream, ErrorCode::REFUSED_STREAM);
        }
        let used = client.receive(&refusal, &mut |o| outcomes.push(o)).unwrap();
        assert_eq!(used, refusal.len());
        assert_eq!(outcomes, [Outcome::Failed(2, 0), Outcome::Failed(1, 0)]);
        assert_eq!(client.open_streams(), 0);
    }

    #[test]
    fn bodies_wait_for_flow_control_window() {
        let mut client = Client::<u8>::new("https://localhost/q", Method::Post);
        let mut settings = Vec::new();
        frame::settings(&mut settings, &[(setting::INITIAL_WINDOW_SIZE, 100)]);
        client.receive(&settings, &mut |_| {}).unwrap();
        let mut ignored = Vec::new();
        client.take_output(&mut ignored);
        client.send(vec![1; 80], 1).unwrap();
        client.send(vec![2; 80], 2).unwrap();
        let data_frames = |client: &mut Client<u8>| {
            let mut out = Vec::new();
            client.take_output(&mut out);
            let mut at = 0;
            let mut data = Vec::new();
            while at < out.len() {
                let header = Header::parse(out[at..at + 9].try_into().unwrap());
                if header.kind == kind::DATA {
                    data.push((header.stream, header.length));
                }
                at += 9 + header.length as usize;
            }
            data
        };
        assert_eq!(data_frames(&mut client), [(1, 80), (3, 80)]);
        // The connection window (65,535) holds 819 bodies of 80: the rest wait for credit.
        for _ in 0..818 {
            client.send(vec![3; 80], 3).unwrap();
        }
        assert_eq!(data_frames(&mut client).len(), 817);
        client.send(vec![4; 80], 4).unwrap();
        assert!(
            data_frames(&mut client).is_empty(),
            "out of connection window"
        );
        let mut update = Vec::new();
        frame::window_update(&mut update, 0, 1000);
        client.receive(&update, &mut |_| {}).unwrap();
        assert_eq!(data_frames(&mut client).len(), 2);
    }

    /// Whatever a server sends, the client ends the connection with an error or goes on; it
    /// never panics, and a CONTINUATION flood stops at the field block limit.
    #[test]
    fn arbitrary_server_bytes_never_panic_and_field_blocks_are_bounded() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let mut client = Client::<u8>::new("https://localhost/q", Method::Post);
            for i in 0..4u8 {
                client.send(vec![i; 16], i).unwrap();
            }
            let mut input = Vec::new();
            // Plausible frame headers (types 0-10, streams 0-9) with random payloads.
            for _ in 0..(next() % 8) {
                let len = (next() % 40) as usize;
                let r = next();
                input.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
                input.extend_from_slice(&[(r % 11) as u8, (r >> 8) as u8]);
                input.extend_from_slice(&((r >> 16) as u32 % 10).to_be_bytes());
                input.extend((0..len).map(|_| next() as u8));
            }
            let _ = client.receive(&input, &mut |_| {});
        }
        let mut client = Client::<u8>::new("https://localhost/q", Method::Post);
        client.send(b"query".to_vec(), 1).unwrap();
        let mut flood = Vec::new();
        let at = frame::start(&mut flood);
        flood.push(0x88); // :status 200, without END_HEADERS
        frame::finish(&mut flood, at, kind::HEADERS, 0, 1);
        let continuation = |out: &mut Vec<u8>| {
            let at = frame::start(out);
            out.extend_from_slice(&[0u8; 16_000]);
            frame::finish(out, at, kind::CONTINUATION, 0, 1);
        };
        for _ in 0..4 {
            continuation(&mut flood);
        }
        assert_eq!(
            client.receive(&flood, &mut |_| {}),
            Ok(flood.len()),
            "64,000 bytes are within the limit"
        );
        let mut more = Vec::new();
        continuation(&mut more);
        assert!(client.receive(&more, &mut |_| {}).is_err());
    }

    #[test]
    fn uris_split_into_authority_and_path() {
        assert_eq!(
            split_uri("https://127.0.0.1:443/dns-query"),
            ("127.0.0.1:443", "/dns-query")
        );
        assert_eq!(split_uri("https://[::1]:8443/q?x"), ("[::1]:8443", "/q?x"));
        assert_eq!(split_uri("https://dns.example"), ("dns.example", "/"));
    }
}
