//! The connection against hand-built client frames, named after the RFC 9113 sections they
//! check.

use std::time::{Duration, Instant};

use super::frame::{self, ErrorCode, Header, flag, kind, setting};
use super::hpack::Decoder;
use super::*;
use crate::http::integer;

const CONFIG: Config = Config {
    max_streams: 4,
    max_head: 16 * 1024,
    max_body: 65_535,
    connection_window: 1 << 20,
};

/// A field block of literals without indexing and with literal names (RFC 7541 §6.2.2).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0);
        integer::write(&mut out, 0, 7, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        integer::write(&mut out, 0, 7, value.len() as u64);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let at = frame::start(&mut out);
    out.extend_from_slice(payload);
    frame::finish(&mut out, at, kind, flags, stream);
    out
}

fn get_fields(path: &str) -> Vec<(&str, &str)> {
    vec![
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "dns.example"),
        (":path", path),
    ]
}

fn post_fields(length: Option<&str>) -> Vec<(&'static str, &str)> {
    let mut fields = vec![
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/dns-query"),
        ("content-type", "application/dns-message"),
    ];
    if let Some(length) = length {
        fields.push(("content-length", length));
    }
    fields
}

/// One frame as the connection wrote it.
#[derive(Debug)]
struct Sent {
    header: Header,
    payload: Vec<u8>,
}

impl Sent {
    fn error_code(&self) -> ErrorCode {
        let at = if self.header.kind == kind::GOAWAY {
            4
        } else {
            0
        };
        ErrorCode(u32::from_be_bytes(
            self.payload[at..at + 4].try_into().unwrap(),
        ))
    }
}

/// A client talking to a [`Connection`] in memory.
struct Client {
    connection: Connection,
    now: Instant,
    requests: Vec<Request>,
    decoder: Decoder,
}

impl Client {
    /// A connection past the preface and the client's (empty) SETTINGS, output drained.
    fn new(config: Config) -> Self {
        Self::with_settings(config, &[])
    }

    fn with_settings(config: Config, settings: &[(u16, u32)]) -> Self {
        let mut client = Self {
            connection: Connection::new(config),
            now: Instant::now(),
            requests: Vec::new(),
            decoder: Decoder::new(frame::DEFAULT_HEADER_TABLE_SIZE),
        };
        let mut hello = frame::PREFACE.to_vec();
        frame::settings(&mut hello, settings);
        client.send(&hello).unwrap();
        let sent = client.take();
        assert_eq!(sent[0].header.kind, kind::SETTINGS, "{sent:?}");
        assert!(
            sent.iter()
                .any(|f| f.header.kind == kind::SETTINGS && f.header.has(flag::ACK))
        );
        client
    }

    /// Sends bytes; everything must be used.
    fn send(&mut self, bytes: &[u8]) -> Result<(), ConnectionError> {
        let used = self
            .connection
            .receive(bytes, self.now, &mut self.requests)?;
        assert_eq!(used, bytes.len(), "whole frames are used");
        Ok(())
    }

    fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
        let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
        self.send(&raw_frame(kind::HEADERS, flags, stream, &block(fields)))
            .unwrap();
    }

    fn data(&mut self, stream: u32, bytes: &[u8], end_stream: bool) -> Result<(), ConnectionError> {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        self.send(&raw_frame(kind::DATA, flags, stream, bytes))
    }

    /// The frames written since the last call.
    fn take(&mut self) -> Vec<Sent> {
        let mut out = self.connection.output().to_vec();
        self.connection.sent(out.len());
        let mut frames = Vec::new();
        while !out.is_empty() {
            let header = Header::parse(out[..frame::HEADER_LEN].try_into().unwrap());
            let end = frame::HEADER_LEN + header.length as usize;
            frames.push(Sent {
                header,
                payload: out[frame::HEADER_LEN..end].to_vec(),
            });
            out.drain(..end);
        }
        frames
    }

    /// The one request delivered since the last call.
    fn request(&mut self) -> Request {
        assert_eq!(self.requests.len(), 1, "{:?}", self.requests);
        self.requests.pop().unwrap()
    }

    /// Decodes a HEADERS payload (END_HEADERS, no padding) into its fields.
    fn fields(&mut self, sent: &Sent) -> Vec<(String, String)> {
        assert_eq!(sent.header.kind, kind::HEADERS);
        let mut fields = Vec::new();
        self.decoder
            .decode(&sent.payload, |name, value| {
                fields.push((
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(value).into_owned(),
                ));
            })
            .unwrap();
        fields
    }
}

fn assert_goaway(result: Result<(), ConnectionError>, client: &mut Client, code: ErrorCode) {
    let e = result.expect_err("a connection error");
    assert_eq!(e.code, code, "{e}");
    let sent = client.take();
    let goaway = sent.last().expect("GOAWAY written");
    assert_eq!(goaway.header.kind, kind::GOAWAY, "{sent:?}");
    assert_eq!(goaway.error_code(), code);
    assert_eq!(&goaway.payload[8..], e.reason.as_bytes());
    assert!(client.connection.failed());
    // Nothing more is taken.
    assert_eq!(
        client.connection.receive(
            &raw_frame(kind::PING, 0, 0, &[0; 8]),
            client.now,
            &mut client.requests
        ),
        Err(e)
    );
}

fn assert_reset(client: &mut Client, stream: u32, code: ErrorCode) {
    let sent = client.take();
    assert!(
        sent.iter().any(|f| f.header.kind == kind::RST_STREAM
            && f.header.stream == stream
            && f.error_code() == code),
        "RST_STREAM({code:?}) on {stream}: {sent:?}"
    );
}

#[test]
fn rfc9113_3_4_the_server_opens_with_its_settings_and_a_larger_connection_window() {
    let mut connection = Connection::new(CONFIG);
    let out = connection.output().to_vec();
    connection.sent(out.len());
    let header = Header::parse(out[..9].try_into().unwrap());
    assert_eq!(
        (header.kind, header.flags, header.stream),
        (kind::SETTINGS, 0, 0)
    );
    let settings: Vec<(u16, u32)> = out[9..9 + header.length as usize]
        .chunks(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect();
    assert!(settings.contains(&(setting::MAX_CONCURRENT_STREAMS, 4)));
    assert!(settings.contains(&(setting::INITIAL_WINDOW_SIZE, 65_536)));
    let update = Header::parse(out[27..36].try_into().unwrap());
    assert_eq!(update.kind, kind::WINDOW_UPDATE);
    let increment = u32::from_be_bytes(out[out.len() - 4..].try_into().unwrap());
    assert_eq!(increment, (1 << 20) - 65_535);
}

#[test]
fn rfc9113_3_4_a_bad_preface_or_a_first_frame_other_than_settings_is_a_protocol_error() {
    let mut connection = Connection::new(CONFIG);
    let mut requests = Vec::new();
    let e = connection
        .receive(b"GET / HTTP/1.1\r\n\r\n", Instant::now(), &mut requests)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PROTOCOL_ERROR);

    let mut connection = Connection::new(CONFIG);
    let mut bytes = frame::PREFACE.to_vec();
    bytes.extend(raw_frame(kind::PING, 0, 0, &[0; 8]));
    let e = connection
        .receive(&bytes, Instant::now(), &mut requests)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn rfc9113_4_1_frames_split_anywhere_are_reassembled() {
    let mut connection = Connection::new(CONFIG);
    let mut bytes = frame::PREFACE.to_vec();
    frame::settings(&mut bytes, &[]);
    bytes.extend(raw_frame(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &block(&post_fields(Some("3"))),
    ));
    bytes.extend(raw_frame(kind::DATA, 0, 1, b"ab"));
    bytes.extend(raw_frame(kind::DATA, flag::END_STREAM, 1, b"c"));
    let mut requests = Vec::new();
    let mut buffer = Vec::new();
    for &byte in &bytes {
        buffer.push(byte);
        let used = connection
            .receive(&buffer, Instant::now(), &mut requests)
            .unwrap();
        buffer.drain(..used);
    }
    assert!(buffer.is_empty());
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body, Ok(b"abc".to_vec()));
    assert_eq!(requests[0].method, Method::Post);
    assert_eq!(
        requests[0].content_type.as_deref(),
        Some(&b"application/dns-message"[..])
    );
}

#[test]
fn rfc9113_8_1_a_get_is_delivered_at_end_stream_and_answered_with_headers_and_data() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &get_fields("/dns-query?dns=AAAB"), true);
    let request = client.request();
    assert_eq!(request.stream, 1);
    assert_eq!(request.method, Method::Get);
    assert_eq!(request.target, b"/dns-query?dns=AAAB");
    assert_eq!(request.body, Ok(Vec::new()));
    assert_eq!(client.connection.open_streams(), 1);
    let fields = [
        Field {
            name: b"content-type",
            value: b"application/dns-message",
            remember: true,
        },
        Field {
            name: b"cache-control",
            value: b"max-age=300",
            remember: false,
        },
    ];
    for (stream, round) in [(1, 0), (3, 1)] {
        if round == 1 {
            client.headers(3, &get_fields("/dns-query?dns=AAAC"), true);
            client.request();
        }
        client.connection.respond(stream, 200, &fields, b"answer");
        let sent = client.take();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert!(sent[0].header.has(flag::END_HEADERS) && !sent[0].header.has(flag::END_STREAM));
        assert_eq!(
            client.fields(&sent[0]),
            [
                (":status".into(), "200".into()),
                ("content-type".into(), "application/dns-message".into()),
                ("cache-control".into(), "max-age=300".into()),
            ]
        );
        assert_eq!(sent[1].header.kind, kind::DATA);
        assert!(sent[1].header.has(flag::END_STREAM));
        assert_eq!(sent[1].payload, b"answer");
    }
    assert_eq!(client.connection.open_streams(), 0);
    // A response to a stream that is gone is skipped.
    client.connection.respond(1, 200, &fields, b"late");
    assert!(client.take().is_empty());
}

#[test]
fn rfc9113_8_1_trailers_end_a_post_body() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(None), false);
    client.data(1, b"query", false).unwrap();
    assert!(client.requests.is_empty());
    client.headers(1, &[("x-checksum", "1")], true);
    assert_eq!(client.request().body, Ok(b"query".to_vec()));
}

#[test]
fn rfc9113_8_1_1_a_body_that_disagrees_with_content_length_is_malformed() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(Some("10")), false);
    client.data(1, b"short", true).unwrap();
    assert!(client.requests.is_empty());
    assert_reset(&mut client, 1, ErrorCode::PROTOCOL_ERROR);

    client.headers(3, &post_fields(Some("2")), false);
    client.data(3, b"long", false).unwrap();
    assert_reset(&mut client, 3, ErrorCode::PROTOCOL_ERROR);
    assert_eq!(client.connection.open_streams(), 0);
}

#[test]
fn rfc9113_8_1_an_oversize_body_is_read_to_its_end_then_delivered_for_a_413() {
    let mut client = Client::new(CONFIG);
    // Announced by content-length: discarded as it arrives, delivered at its end.
    client.headers(1, &post_fields(Some("65536")), false);
    for n in 0..4 {
        client.data(1, &[0; 16_384], n == 3).unwrap();
    }
    assert_eq!(client.request().body, Err(BodyError::TooLarge));
    client.connection.respond(1, 413, &[], b"{}");
    let sent = client.take();
    assert!(
        !sent.iter().any(|f| f.header.kind == kind::RST_STREAM),
        "{sent:?}"
    );
    assert!(sent.last().unwrap().header.has(flag::END_STREAM));
    assert_eq!(client.connection.open_streams(), 0);

    // Without content-length: found when the body passes the limit; the stream's window is
    // opened again so the upload can finish.
    client.headers(3, &post_fields(None), false);
    for _ in 0..4 {
        client.data(3, &[0; 16_384], false).unwrap();
    }
    assert!(client.requests.is_empty());
    let sent = client.take();
    assert!(
        sent.iter()
            .any(|f| f.header.kind == kind::WINDOW_UPDATE && f.header.stream == 3),
        "{sent:?}"
    );
    client.data(3, &[0; 16_384], true).unwrap();
    assert_eq!(client.request().body, Err(BodyError::TooLarge));
}

#[test]
fn rfc9113_8_1_an_upload_past_twice_the_limit_is_answered_at_once_and_reset_after() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(Some("200000")), false);
    assert_eq!(client.request().body, Err(BodyError::TooLarge));
    client.connection.respond(1, 413, &[], b"{}");
    let sent = client.take();
    assert_eq!(sent[2].header.kind, kind::RST_STREAM);
    assert_eq!(sent[2].error_code(), ErrorCode::NO_ERROR);
    // The rest of the upload, already on its way, is ignored.
    client.data(1, &[0; 1000], false).unwrap();
    assert!(client.take().is_empty());

    client.headers(3, &post_fields(None), false);
    let mut sent_bytes = 0;
    while client.requests.is_empty() {
        client.data(3, &[0; 16_384], false).unwrap();
        sent_bytes += 16_384;
        assert!(sent_bytes <= 2 * 65_535 + 16_384);
    }
    assert_eq!(client.request().body, Err(BodyError::TooLarge));
    assert!(sent_bytes > 2 * 65_535);
}

#[test]
fn rfc9113_6_9_a_stream_may_send_one_body_before_its_window_is_spent() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(None), false);
    for _ in 0..3 {
        client.data(1, &[0; 16_384], false).unwrap();
    }
    client.data(1, &[0; 16_383], false).unwrap();
    // 65535 bytes: within the limit, and one byte of window left; two bytes are too many.
    client.data(1, &[0; 2], false).unwrap();
    assert_reset(&mut client, 1, ErrorCode::FLOW_CONTROL_ERROR);
    assert!(client.requests.is_empty());
}

#[test]
fn rfc9113_6_9_1_connection_credit_returns_as_bodies_are_delivered() {
    let config = Config {
        connection_window: 100_000,
        ..CONFIG
    };
    let mut client = Client::new(config);
    let mut updates = 0;
    for stream in (1..200).step_by(2) {
        client.headers(stream, &post_fields(None), false);
        client.data(stream, &[0; 1500], true).unwrap();
        let request = client.request();
        client.connection.respond(request.stream, 200, &[], b"x");
        updates += client
            .take()
            .iter()
            .filter(|f| f.header.kind == kind::WINDOW_UPDATE && f.header.stream == 0)
            .count();
    }
    // 150,000 bytes sent through a 100,000-byte window: credit came back, in few updates.
    assert!((1..=3).contains(&updates), "{updates} updates");
}

#[test]
fn rfc9113_6_9_1_data_beyond_the_connection_window_is_a_flow_control_error() {
    let config = Config {
        connection_window: frame::DEFAULT_WINDOW,
        max_streams: 10,
        ..CONFIG
    };
    let mut client = Client::new(config);
    let mut result = Ok(());
    for stream in [1, 3, 5, 7, 9] {
        client.headers(stream, &post_fields(None), false);
        result = client.data(stream, &[0; 16_384], false);
        if result.is_err() {
            break;
        }
    }
    assert_goaway(result, &mut client, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn rfc9113_6_9_2_responses_wait_for_the_clients_windows() {
    let mut client = Client::with_settings(CONFIG, &[(setting::INITIAL_WINDOW_SIZE, 10)]);
    client.headers(1, &get_fields("/dns-query?dns=AAAB"), true);
    client.request();
    let body: Vec<u8> = (0..30).collect();
    client.connection.respond(1, 200, &[], &body);
    let sent = client.take();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].payload, body[..10]);
    assert!(!sent[1].header.has(flag::END_STREAM));
    // The stream's window opens by 15, then the setting grows by 100 (RFC 9113 §6.9.2).
    let mut update = Vec::new();
    frame::window_update(&mut update, 1, 15);
    client.send(&update).unwrap();
    let sent = client.take();
    assert_eq!(sent[0].payload, body[10..25]);
    let mut settings = Vec::new();
    frame::settings(&mut settings, &[(setting::INITIAL_WINDOW_SIZE, 110)]);
    client.send(&settings).unwrap();
    let sent = client.take();
    let data: Vec<&Sent> = sent
        .iter()
        .filter(|f| f.header.kind == kind::DATA)
        .collect();
    assert_eq!(data[0].payload, body[25..]);
    assert!(data[0].header.has(flag::END_STREAM));
    assert_eq!(client.connection.open_streams(), 0);
}

#[test]
fn rfc9113_6_9_responses_wait_for_the_connection_window_in_order() {
    let config = Config {
        max_streams: 10,
        ..CONFIG
    };
    let mut client = Client::with_settings(config, &[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
    for stream in [1, 3] {
        client.headers(stream, &get_fields("/dns-query?dns=AAAB"), true);
        client.request();
    }
    // 65535 bytes of connection window: the first response takes 40000, the second 25535.
    client.connection.respond(1, 200, &[], &[1; 40_000]);
    client.connection.respond(3, 200, &[], &[3; 40_000]);
    let sent = client.take();
    let data = |sent: &[Sent], stream| -> usize {
        sent.iter()
            .filter(|f| f.header.kind == kind::DATA && f.header.stream == stream)
            .inspect(|f| assert!(f.payload.len() <= 16_384))
            .map(|f| f.payload.len())
            .sum()
    };
    assert_eq!((data(&sent, 1), data(&sent, 3)), (40_000, 25_535));
    let mut update = Vec::new();
    frame::window_update(&mut update, 0, 100_000);
    client.send(&update).unwrap();
    let sent = client.take();
    assert_eq!(data(&sent, 3), 14_465);
    assert!(sent.last().unwrap().header.has(flag::END_STREAM));
}

#[test]
fn rfc9113_6_5_peer_settings_change_frame_size_and_table_size() {
    let mut client = Client::with_settings(
        CONFIG,
        &[
            (setting::MAX_FRAME_SIZE, 20_000),
            (setting::INITIAL_WINDOW_SIZE, 1 << 20),
            (setting::HEADER_TABLE_SIZE, 0),
        ],
    );
    client.headers(1, &get_fields("/dns-query?dns=AAAB"), true);
    client.request();
    let remembered = [Field {
        name: b"content-type",
        value: b"application/dns-message",
        remember: true,
    }];
    client.connection.respond(1, 200, &remembered, &[7; 30_000]);
    let sent = client.take();
    assert_eq!(client.fields(&sent[0])[1].1, "application/dns-message");
    assert_eq!(sent[1].payload.len(), 20_000);
    assert_eq!(sent[2].payload.len(), 10_000);
    for (settings, code) in [
        ((setting::MAX_FRAME_SIZE, 16_383), ErrorCode::PROTOCOL_ERROR),
        ((setting::ENABLE_PUSH, 2), ErrorCode::PROTOCOL_ERROR),
        (
            (setting::INITIAL_WINDOW_SIZE, 1 << 31),
            ErrorCode::FLOW_CONTROL_ERROR,
        ),
    ] {
        let mut client = Client::new(CONFIG);
        let mut bytes = Vec::new();
        frame::settings(&mut bytes, &[settings]);
        let result = client.send(&bytes);
        assert_goaway(result, &mut client, code);
    }
}

#[test]
fn rfc9113_6_7_pings_are_acknowledged_with_their_payload() {
    let mut client = Client::new(CONFIG);
    client
        .send(&raw_frame(kind::PING, 0, 0, b"12345678"))
        .unwrap();
    client
        .send(&raw_frame(kind::PING, flag::ACK, 0, b"abcdefgh"))
        .unwrap();
    let sent = client.take();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].header.has(flag::ACK));
    assert_eq!(sent[0].payload, b"12345678");
    let result = client.send(&raw_frame(kind::PING, 0, 0, b"1234"));
    assert_goaway(result, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn rfc9113_6_10_a_field_block_continues_in_continuation_frames_only() {
    let mut client = Client::new(CONFIG);
    let fields = block(&get_fields("/dns-query?dns=AAAB"));
    let (first, rest) = fields.split_at(10);
    client
        .send(&raw_frame(kind::HEADERS, flag::END_STREAM, 1, first))
        .unwrap();
    assert!(client.requests.is_empty());
    client
        .send(&raw_frame(kind::CONTINUATION, flag::END_HEADERS, 1, rest))
        .unwrap();
    assert_eq!(client.request().target, b"/dns-query?dns=AAAB");

    client
        .send(&raw_frame(kind::HEADERS, flag::END_STREAM, 3, first))
        .unwrap();
    let result = client.send(&raw_frame(kind::PING, 0, 0, &[0; 8]));
    assert_goaway(result, &mut client, ErrorCode::PROTOCOL_ERROR);

    let mut client = Client::new(CONFIG);
    let result = client.send(&raw_frame(kind::CONTINUATION, flag::END_HEADERS, 1, rest));
    assert_goaway(result, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn rfc9113_10_5_a_continuation_flood_ends_the_connection() {
    let mut client = Client::new(CONFIG);
    client
        .send(&raw_frame(kind::HEADERS, 0, 1, &block(&get_fields("/"))))
        .unwrap();
    let filler = block(&[("x-filler", &"a".repeat(16_000))]);
    let mut result = Ok(());
    for _ in 0..3 {
        result = client.send(&raw_frame(kind::CONTINUATION, 0, 1, &filler));
        if result.is_err() {
            break;
        }
    }
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

#[test]
fn rfc9113_6_5_2_a_head_over_the_size_limit_is_delivered_for_a_431() {
    let mut client = Client::new(CONFIG);
    let mut fields = get_fields("/dns-query?dns=AAAB");
    let big = "a".repeat(9_000);
    fields.push(("x-one", &big));
    fields.push(("x-two", &big));
    let block = block(&fields);
    let (first, rest) = block.split_at(12_000);
    client
        .send(&raw_frame(kind::HEADERS, flag::END_STREAM, 1, first))
        .unwrap();
    client
        .send(&raw_frame(kind::CONTINUATION, flag::END_HEADERS, 1, rest))
        .unwrap();
    assert_eq!(client.request().body, Err(BodyError::HeadTooLarge));
}

#[test]
fn rfc9113_8_1_1_malformed_requests_are_reset_and_the_connection_goes_on() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &[(":method", "GET"), (":path", "/")], true);
    assert!(client.requests.is_empty());
    assert_reset(&mut client, 1, ErrorCode::PROTOCOL_ERROR);
    client.headers(3, &get_fields("/dns-query?dns=AAAB"), true);
    assert_eq!(client.request().stream, 3);
}

#[test]
fn rfc9113_5_1_2_streams_past_the_limit_are_refused() {
    let mut client = Client::new(CONFIG);
    for stream in [1, 3, 5, 7] {
        client.headers(stream, &get_fields("/"), true);
    }
    assert_eq!(client.requests.len(), 4);
    client.headers(9, &get_fields("/"), true);
    assert_eq!(client.requests.len(), 4);
    assert_reset(&mut client, 9, ErrorCode::REFUSED_STREAM);
    client.connection.respond(1, 200, &[], b"x");
    client.headers(11, &get_fields("/"), true);
    assert_eq!(client.requests.len(), 5);
}

#[test]
fn rfc9113_5_1_frames_on_idle_closed_and_even_streams() {
    let cases: [(&[u8], ErrorCode); 5] = [
        (
            &raw_frame(kind::DATA, 0, 1, b"x"),
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            &raw_frame(kind::DATA, 0, 0, b"x"),
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            &raw_frame(kind::RST_STREAM, 0, 5, &[0; 4]),
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            &raw_frame(kind::WINDOW_UPDATE, 0, 5, &[0, 0, 0, 1]),
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            &raw_frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
            ErrorCode::PROTOCOL_ERROR,
        ),
    ];
    for (bytes, code) in cases {
        let mut client = Client::new(CONFIG);
        let result = client.send(bytes);
        assert_goaway(result, &mut client, code);
    }
    let mut client = Client::new(CONFIG);
    let result = client.send(&raw_frame(
        kind::HEADERS,
        flag::END_HEADERS,
        2,
        &block(&get_fields("/")),
    ));
    assert_goaway(result, &mut client, ErrorCode::PROTOCOL_ERROR);

    // A stream that completed: DATA on it is a stream error, WINDOW_UPDATE is allowed.
    let mut client = Client::new(CONFIG);
    client.headers(1, &get_fields("/"), true);
    client.request();
    client.connection.respond(1, 200, &[], b"x");
    client.take();
    client
        .send(&raw_frame(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]))
        .unwrap();
    assert!(client.take().is_empty());
    client.data(1, b"x", false).unwrap();
    assert_reset(&mut client, 1, ErrorCode::STREAM_CLOSED);
}

#[test]
fn rfc9113_6_1_padding_is_removed_and_padding_as_long_as_the_frame_is_an_error() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(None), false);
    let mut padded = vec![3];
    padded.extend_from_slice(b"ab");
    padded.extend_from_slice(&[0; 3]);
    client
        .send(&raw_frame(
            kind::DATA,
            flag::PADDED | flag::END_STREAM,
            1,
            &padded,
        ))
        .unwrap();
    assert_eq!(client.request().body, Ok(b"ab".to_vec()));
    client.headers(3, &post_fields(None), false);
    let result = client.send(&raw_frame(kind::DATA, flag::PADDED, 3, &[5, 0, 0]));
    assert_goaway(result, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn rfc9113_4_2_frames_over_the_maximum_size_are_a_frame_size_error() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(None), false);
    let result = client.data(1, &[0; 16_385], false);
    assert_goaway(result, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn a_dropped_query_cancels_its_stream_and_late_frames_are_ignored() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &post_fields(None), false);
    client.data(1, b"q", true).unwrap();
    client.request();
    client.connection.cancel(1);
    assert_reset(&mut client, 1, ErrorCode::CANCEL);
    assert_eq!(client.connection.open_streams(), 0);
}

#[test]
fn bodies_that_do_not_arrive_in_time_are_delivered_as_timed_out() {
    let mut client = Client::new(CONFIG);
    let timeout = Duration::from_secs(5);
    client.headers(1, &post_fields(Some("12")), false);
    client.data(1, b"part", false).unwrap();
    assert_eq!(
        client.connection.next_expiry(timeout),
        Some(client.now + timeout)
    );
    let mut requests = Vec::new();
    client
        .connection
        .expire(client.now + Duration::from_secs(4), timeout, &mut requests);
    assert!(requests.is_empty());
    client
        .connection
        .expire(client.now + timeout, timeout, &mut requests);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body, Err(BodyError::TimedOut));
    assert_eq!(client.connection.next_expiry(timeout), None);
}

#[test]
fn rfc9113_6_8_after_goaway_new_streams_are_ignored_and_open_ones_answered() {
    let mut client = Client::new(CONFIG);
    client.headers(1, &get_fields("/"), true);
    client.request();
    client.connection.shut_down();
    let sent = client.take();
    assert_eq!(sent[0].header.kind, kind::GOAWAY);
    assert_eq!(&sent[0].payload[..4], &1u32.to_be_bytes());
    assert_eq!(sent[0].error_code(), ErrorCode::NO_ERROR);
    client.headers(3, &get_fields("/"), true);
    assert!(client.requests.is_empty());
    assert!(client.take().is_empty());
    client.connection.respond(1, 200, &[], b"x");
    assert_eq!(client.take().len(), 2);
}

#[test]
fn rfc9113_10_5_clients_that_reset_what_they_ask_are_cut_off() {
    let config = Config {
        max_streams: 1000,
        ..CONFIG
    };
    let mut client = Client::new(config);
    let mut result = Ok(());
    for n in 0..=RESET_ALLOWANCE + 1 {
        let stream = 2 * n + 1;
        client.headers(stream, &get_fields("/"), true);
        result = client.send(&raw_frame(kind::RST_STREAM, 0, stream, &[0, 0, 0, 8]));
        if result.is_err() {
            break;
        }
    }
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

#[test]
fn rfc9113_10_5_frames_without_requests_are_bounded() {
    let mut client = Client::new(CONFIG);
    let mut result = Ok(());
    for _ in 0..=IDLE_FRAME_ALLOWANCE {
        result = client.send(&raw_frame(kind::PING, 0, 0, &[0; 8]));
        if result.is_err() {
            break;
        }
    }
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

#[test]
fn rfc9113_5_1_1_a_stream_id_lower_than_one_already_used_is_a_protocol_error() {
    let mut client = Client::new(CONFIG);
    client.headers(5, &get_fields("/"), true);
    client.request();
    client.take();
    let result = client.send(&raw_frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        3,
        &block(&get_fields("/")),
    ));
    assert_goaway(result, &mut client, ErrorCode::PROTOCOL_ERROR);

    // A stream that was open and closed is no new stream: HEADERS on it is a stream error
    // (RFC 9113 §5.1 "closed"), and the connection goes on.
    let mut client = Client::new(CONFIG);
    client.headers(1, &get_fields("/"), true);
    client.request();
    client.connection.respond(1, 200, &[], b"x");
    client.take();
    client.headers(1, &get_fields("/"), true);
    assert_reset(&mut client, 1, ErrorCode::STREAM_CLOSED);
    client.headers(3, &get_fields("/"), true);
    assert_eq!(client.request().stream, 3);
}

/// Sends `frame` until the connection fails or `times` were sent; returns the last result.
fn flood(client: &mut Client, frame: &[u8], times: u32) -> Result<(), ConnectionError> {
    for _ in 0..times {
        client.send(frame)?;
        client.take();
    }
    Ok(())
}

#[test]
fn rfc9113_10_5_a_window_update_flood_ends_the_connection() {
    // 10,000 one-byte increments of the connection window, with nothing waiting for it.
    let mut client = Client::new(CONFIG);
    let frame = raw_frame(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1]);
    let result = flood(&mut client, &frame, 10_000);
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);

    // The same on a stream that has closed.
    let mut client = Client::new(CONFIG);
    client.headers(1, &get_fields("/"), true);
    client.request();
    client.connection.respond(1, 200, &[], b"x");
    client.take();
    let frame = raw_frame(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]);
    let result = flood(&mut client, &frame, 10_000);
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

#[test]
fn rfc9113_10_5_a_settings_ack_flood_ends_the_connection() {
    let mut client = Client::new(CONFIG);
    let frame = raw_frame(kind::SETTINGS, flag::ACK, 0, &[]);
    let result = flood(&mut client, &frame, 5_000);
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

#[test]
fn rfc9113_10_5_resets_of_closed_streams_and_goaways_are_bounded() {
    for frame in [
        raw_frame(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8]),
        raw_frame(kind::GOAWAY, 0, 0, &[0; 8]),
    ] {
        let mut client = Client::new(CONFIG);
        client.headers(1, &get_fields("/"), true);
        client.request();
        client.connection.respond(1, 200, &[], b"x");
        client.take();
        let result = flood(&mut client, &frame, 10_000);
        assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
    }
}

#[test]
fn rfc9113_6_9_window_updates_that_free_a_waiting_response_are_not_counted() {
    // A client with a one-byte stream window pulls each byte of its answers with a
    // WINDOW_UPDATE: more updates than the idle allowance, none of them idle.
    let config = Config {
        max_streams: 100,
        ..CONFIG
    };
    let mut client = Client::with_settings(config, &[(setting::INITIAL_WINDOW_SIZE, 1)]);
    let body = vec![7u8; 64];
    let mut updates = 0;
    for n in 0..20u32 {
        let stream = 2 * n + 1;
        client.headers(stream, &get_fields("/"), true);
        client.request();
        client.connection.respond(stream, 200, &[], &body);
        client.take();
        for _ in 1..body.len() {
            client
                .send(&raw_frame(kind::WINDOW_UPDATE, 0, stream, &[0, 0, 0, 1]))
                .expect("a window update that frees a byte is no flood");
            updates += 1;
        }
        client.take();
    }
    assert!(updates > IDLE_FRAME_ALLOWANCE, "{updates}");
}

#[test]
fn rfc9113_10_5_stream_errors_are_bounded() {
    let config = Config {
        max_streams: 10_000,
        ..CONFIG
    };
    let mut client = Client::new(config);
    let mut result = Ok(());
    for n in 0..=MAX_LOCAL_RESETS {
        let bytes = raw_frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            2 * n + 1,
            &block(&[(":method", "GET")]),
        );
        result = client.send(&bytes);
        if result.is_err() {
            break;
        }
    }
    assert_goaway(result, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

#[test]
fn a_garbage_stream_never_panics() {
    // xorshift: frames with random types, flags, streams and payloads after a valid start.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..300 {
        let mut client = Client::new(CONFIG);
        for _ in 0..50 {
            let kind = (next() % 11) as u8;
            let flags = next() as u8;
            let stream = (next() % 8) as u32;
            let len = (next() % 40) as usize;
            let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = client.connection.receive(
                &raw_frame(kind, flags, stream, &payload),
                client.now,
                &mut client.requests,
            );
            for request in client.requests.drain(..) {
                client.connection.respond(request.stream, 200, &[], b"x");
            }
            let out = client.connection.output().len();
            client.connection.sent(out);
        }
    }
}
