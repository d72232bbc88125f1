//! Request and unidirectional streams against hand-built frames, named after the RFC 9114 and
//! RFC 9204 sections they check.

use super::*;

const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 65_535;

fn frame(kind: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame(&mut out, kind, payload);
    out
}

/// A field section of literal field lines with literal names (RFC 9204 §4.5.6), no Huffman.
fn section(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = vec![0, 0];
    for (name, value) in fields {
        assert!(name.len() < 7 + 128 && value.len() < 127);
        if name.len() < 7 {
            out.push(0x20 | name.len() as u8);
        } else {
            out.push(0x27);
            out.push((name.len() - 7) as u8);
        }
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    frame(frame_type::HEADERS, &section(fields))
}

fn get(path: &str) -> Vec<u8> {
    headers(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "dns.example"),
        (":path", path),
    ])
}

fn post(length: Option<&str>) -> Vec<u8> {
    let mut fields = vec![
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/dns-query"),
        ("content-type", "application/dns-message"),
    ];
    if let Some(length) = length {
        fields.push(("content-length", length));
    }
    headers(&fields)
}

fn stream() -> RequestStream {
    RequestStream::new(MAX_HEAD, MAX_BODY)
}

#[test]
fn rfc9000_16_varints_round_trip_at_every_length() {
    for value in [
        0,
        63,
        64,
        16_383,
        16_384,
        (1 << 30) - 1,
        1 << 30,
        (1 << 62) - 1,
    ] {
        let mut out = Vec::new();
        write_varint(&mut out, value);
        let mut input = &out[..];
        assert_eq!(read_varint(&mut input), Some(value));
        assert!(input.is_empty());
        assert_eq!(read_varint(&mut &out[..out.len() - 1]), None, "{value}");
    }
    // RFC 9000 Appendix A.1's examples.
    assert_eq!(read_varint(&mut &[0x25][..]), Some(37));
    assert_eq!(read_varint(&mut &[0x7b, 0xbd][..]), Some(15_293));
    assert_eq!(
        read_varint(&mut &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c][..]),
        Some(151_288_809_941_952_652)
    );
}

#[test]
fn rfc9114_4_1_a_get_is_delivered_at_its_headers_whole_with_fin() {
    let mut s = stream();
    let bytes = get("/dns-query?dns=AAAB");
    let request = s.receive(&bytes, true).unwrap().unwrap();
    assert_eq!(request.method, Method::Get);
    assert_eq!(request.target, b"/dns-query?dns=AAAB");
    assert_eq!(request.body, Ok(Vec::new()));
    assert!(request.complete);
    // Without FIN it is answerable at once too, but not read to its end.
    let request = stream().receive(&bytes, false).unwrap().unwrap();
    assert!(!request.complete);
}

#[test]
fn rfc9114_4_1_a_post_is_delivered_at_fin_whatever_the_splits() {
    let mut bytes = post(Some("5"));
    bytes.extend(frame(frame_type::DATA, b"ab"));
    bytes.extend(frame(0x21, b"reserved frame type: skipped")); // 0x1f * 0 + 0x21
    bytes.extend(frame(frame_type::DATA, b"cde"));
    for split in 1..bytes.len() {
        let mut s = stream();
        assert_eq!(s.receive(&bytes[..split], false), Ok(None));
        let request = s.receive(&bytes[split..], false).unwrap();
        assert_eq!(request, None, "split at {split}");
        let request = s.receive(&[], true).unwrap().unwrap();
        assert_eq!(request.body, Ok(b"abcde".to_vec()));
        assert_eq!(
            request.content_type.as_deref(),
            Some(&b"application/dns-message"[..])
        );
        assert!(request.complete);
    }
}

#[test]
fn rfc9114_4_1_trailers_are_checked_and_end_the_body() {
    let mut bytes = post(None);
    bytes.extend(frame(frame_type::DATA, b"q"));
    bytes.extend(headers(&[("x-checksum", "1")]));
    let request = stream().receive(&bytes, true).unwrap().unwrap();
    assert_eq!(request.body, Ok(b"q".to_vec()));
    let mut bad = post(None);
    bad.extend(headers(&[(":path", "/")]));
    let e = stream().receive(&bad, true).unwrap_err();
    assert_eq!((e.scope, e.code), (Scope::Stream, code::H3_MESSAGE_ERROR));
    let mut after = post(None);
    after.extend(headers(&[("x-a", "1")]));
    after.extend(frame(frame_type::DATA, b"late"));
    let e = stream().receive(&after, true).unwrap_err();
    assert_eq!(
        (e.scope, e.code),
        (Scope::Connection, code::H3_FRAME_UNEXPECTED)
    );
}

#[test]
fn rfc9114_4_1_2_malformed_requests_are_stream_errors() {
    let cases = [
        headers(&[(":method", "GET"), (":path", "/")]),
        headers(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("Upper", "x"),
        ]),
        headers(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("connection", "x"),
        ]),
    ];
    for bytes in cases {
        let e = stream().receive(&bytes, true).unwrap_err();
        assert_eq!(
            (e.scope, e.code),
            (Scope::Stream, code::H3_MESSAGE_ERROR),
            "{e}"
        );
    }
    let mut mismatch = post(Some("10"));
    mismatch.extend(frame(frame_type::DATA, b"short"));
    let e = stream().receive(&mismatch, true).unwrap_err();
    assert_eq!((e.scope, e.code), (Scope::Stream, code::H3_MESSAGE_ERROR));
}

#[test]
fn rfc9114_7_frames_out_of_place_and_truncated_are_connection_errors() {
    let cases: [(Vec<u8>, u64); 5] = [
        (frame(frame_type::DATA, b"x"), code::H3_FRAME_UNEXPECTED),
        (frame(frame_type::SETTINGS, b""), code::H3_FRAME_UNEXPECTED),
        (frame(0x6, &[0; 8]), code::H3_FRAME_UNEXPECTED),
        (get("/")[..4].to_vec(), code::H3_FRAME_ERROR),
        (
            frame(frame_type::HEADERS, &[0x80]),
            code::QPACK_DECOMPRESSION_FAILED,
        ),
    ];
    for (bytes, code) in cases {
        let e = stream().receive(&bytes, true).unwrap_err();
        assert_eq!(
            (e.scope, e.code),
            (Scope::Connection, code),
            "{bytes:x?}: {e}"
        );
    }
    let e = stream().receive(&[], true).unwrap_err();
    assert_eq!(
        (e.scope, e.code),
        (Scope::Stream, code::H3_REQUEST_INCOMPLETE)
    );
}

#[test]
fn oversize_heads_and_bodies_are_delivered_without_waiting() {
    // A HEADERS frame over twice the head limit: 431 from its length alone.
    let mut big = Vec::new();
    write_varint(&mut big, frame_type::HEADERS);
    write_varint(&mut big, 40_000);
    let request = stream().receive(&big, false).unwrap().unwrap();
    assert_eq!(request.body, Err(BodyError::HeadTooLarge));
    assert!(!request.complete);
    // content-length over the limit: 413 at once.
    let request = stream()
        .receive(&post(Some("70000")), false)
        .unwrap()
        .unwrap();
    assert_eq!(request.body, Err(BodyError::TooLarge));
    // DATA passing the limit: 413 at the frame that passes it.
    let mut s = stream();
    assert_eq!(s.receive(&post(None), false), Ok(None));
    assert_eq!(
        s.receive(&frame(frame_type::DATA, &[0; 60_000]), false),
        Ok(None)
    );
    let mut header = Vec::new();
    write_varint(&mut header, frame_type::DATA);
    write_varint(&mut header, 6_000);
    let request = s.receive(&header, false).unwrap().unwrap();
    assert_eq!(request.body, Err(BodyError::TooLarge));
    // Afterwards nothing more is taken.
    assert_eq!(s.receive(&[0; 100], true), Ok(None));
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_delivered_for_a_408() {
    let mut s = stream();
    assert_eq!(s.expire(), None, "no head yet: nothing to answer");
    assert_eq!(s.receive(&post(Some("10")), false), Ok(None));
    assert_eq!(
        s.receive(&frame(frame_type::DATA, b"part"), false),
        Ok(None)
    );
    let request = s.expire().unwrap();
    assert_eq!(request.body, Err(BodyError::TimedOut));
    assert!(!request.complete);
}

#[test]
fn unknown_frames_of_any_length_are_skipped_without_buffering() {
    let mut s = stream();
    let mut header = Vec::new();
    write_varint(&mut header, 0x21 + 0x1f * 7);
    write_varint(&mut header, 1 << 40);
    assert_eq!(s.receive(&header, false), Ok(None));
    for _ in 0..10 {
        assert_eq!(s.receive(&[0; 60_000], false), Ok(None));
    }
    assert!(s.buffer.is_empty());
}

#[test]
fn responses_are_headers_then_one_data_frame() {
    let mut out = Vec::new();
    encode_response(
        200,
        &[(b"content-type", b"application/dns-message")],
        b"answer",
        &mut out,
    );
    let mut input = &out[..];
    assert_eq!(read_varint(&mut input), Some(frame_type::HEADERS));
    let len = read_varint(&mut input).unwrap() as usize;
    let mut fields = Vec::new();
    qpack::decode(&input[..len], |n, v| fields.push((n.to_vec(), v.to_vec()))).unwrap();
    assert_eq!(fields[0], (b":status".to_vec(), b"200".to_vec()));
    input = &input[len..];
    assert_eq!(read_varint(&mut input), Some(frame_type::DATA));
    assert_eq!(read_varint(&mut input), Some(6));
    assert_eq!(input, b"answer");
}

fn uni(bytes: &[u8], fin: bool) -> Result<UniStream, Error> {
    let mut s = UniStream::new();
    s.receive(bytes, fin)?;
    Ok(s)
}

#[test]
fn rfc9114_6_2_1_the_control_stream_starts_with_settings_and_stays_open() {
    let mut control = vec![0x00];
    let mut settings = Vec::new();
    write_varint(&mut settings, SETTINGS_MAX_FIELD_SECTION_SIZE);
    write_varint(&mut settings, 8192);
    write_varint(&mut settings, 0x1f * 3 + 0x21); // a reserved setting: ignored
    write_varint(&mut settings, 1);
    control.extend(frame(frame_type::SETTINGS, &settings));
    control.extend(frame(frame_type::MAX_PUSH_ID, &[0]));
    control.extend(frame(0x21, b"grease"));
    control.extend(frame(frame_type::GOAWAY, &[0]));
    // Byte by byte, then the rest at once.
    let mut s = UniStream::new();
    for &b in &control {
        s.receive(&[b], false).unwrap();
    }
    assert_eq!(s.kind(), Some(UniKind::Control));
    let e = s.receive(&[], true).unwrap_err();
    assert_eq!(e.code, code::H3_CLOSED_CRITICAL_STREAM);

    let cases: [(Vec<u8>, u64); 5] = [
        (
            [&[0x00][..], &frame(frame_type::GOAWAY, &[0])].concat(),
            code::H3_MISSING_SETTINGS,
        ),
        (
            [
                &[0x00][..],
                &frame(frame_type::SETTINGS, &[]),
                &frame(frame_type::SETTINGS, &[]),
            ]
            .concat(),
            code::H3_FRAME_UNEXPECTED,
        ),
        (
            [
                &[0x00][..],
                &frame(frame_type::SETTINGS, &[]),
                &frame(frame_type::DATA, b"x"),
            ]
            .concat(),
            code::H3_FRAME_UNEXPECTED,
        ),
        (
            [&[0x00][..], &frame(frame_type::SETTINGS, &[0x02, 0x00])].concat(),
            code::H3_SETTINGS_ERROR,
        ),
        (
            [
                &[0x00][..],
                &frame(frame_type::SETTINGS, &[0x06, 1, 0x06, 2]),
            ]
            .concat(),
            code::H3_SETTINGS_ERROR,
        ),
    ];
    for (bytes, code) in cases {
        let e = uni(&bytes, false).unwrap_err();
        assert_eq!((e.scope, e.code), (Scope::Connection, code), "{bytes:x?}");
    }
}

#[test]
fn rfc9204_4_2_qpack_streams_allow_nothing_a_zero_capacity_table_cannot_hold() {
    // Encoder stream: Set Dynamic Table Capacity 0 is fine, anything more is not.
    assert!(uni(&[0x02, 0x20, 0x20], false).is_ok());
    let e = uni(&[0x02, 0x21], false).unwrap_err();
    assert_eq!(e.code, code::QPACK_ENCODER_STREAM_ERROR);
    let e = uni(&[0x02, 0xc0 | 17, 0x01, b'x'], false).unwrap_err();
    assert_eq!(e.code, code::QPACK_ENCODER_STREAM_ERROR);
    // Decoder stream: Stream Cancellation is fine; acknowledgements are not.
    assert!(uni(&[0x03, 0x40 | 4], false).is_ok());
    let e = uni(&[0x03, 0x80 | 4], false).unwrap_err();
    assert_eq!(e.code, code::QPACK_DECODER_STREAM_ERROR);
    let e = uni(&[0x03, 0x01], false).unwrap_err();
    assert_eq!(e.code, code::QPACK_DECODER_STREAM_ERROR);
    // Closing either is closing a critical stream.
    let e = uni(&[0x02], true).unwrap_err();
    assert_eq!(e.code, code::H3_CLOSED_CRITICAL_STREAM);
}

#[test]
fn rfc9114_6_2_push_streams_and_duplicates_are_refused_unknown_types_ignored() {
    let e = uni(&[0x01], false).unwrap_err();
    assert_eq!(e.code, code::H3_STREAM_CREATION_ERROR);
    let s = uni(&[0x21, 1, 2, 3], true).unwrap();
    assert_eq!(s.kind(), Some(UniKind::Unknown));
    let mut critical = CriticalStreams::default();
    critical.open(UniKind::Control).unwrap();
    critical.open(UniKind::QpackEncoder).unwrap();
    critical.open(UniKind::Unknown).unwrap();
    critical.open(UniKind::Unknown).unwrap();
    let e = critical.open(UniKind::Control).unwrap_err();
    assert_eq!(e.code, code::H3_STREAM_CREATION_ERROR);
}

#[test]
fn the_server_control_stream_is_its_type_and_settings() {
    let bytes = server_control_stream(16_384);
    let mut s = UniStream::new();
    s.receive(&bytes, false).unwrap();
    assert_eq!(s.kind(), Some(UniKind::Control));
    assert!(s.settings_seen);
}

#[test]
fn garbage_streams_never_panic() {
    let mut state = 0x243f_6a88_85a3_08d3u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let len = (next() % 64) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let split = if len == 0 { 0 } else { (next() as usize) % len };
        let fin = next() % 2 == 0;
        let mut s = stream();
        let _ = s
            .receive(&bytes[..split], false)
            .and_then(|_| s.receive(&bytes[split..], fin));
        let mut u = UniStream::new();
        let _ = u
            .receive(&bytes[..split], false)
            .and_then(|()| u.receive(&bytes[split..], fin));
    }
}

#[test]
fn rfc9114_5_2_goaway_names_the_first_request_stream_not_processed() {
    assert_eq!(goaway(0), frame(frame_type::GOAWAY, &[0]));
    assert_eq!(goaway(12), [0x07, 0x01, 0x0c]);
    // A stream id past 63 takes a two-byte varint.
    assert_eq!(goaway(400), [0x07, 0x02, 0x41, 0x90]);
    // The server's own control stream, read back, carries it after SETTINGS.
    let mut control = UniStream::new();
    let mut bytes = server_control_stream(1024);
    bytes.extend(goaway(8));
    assert!(control.receive(&bytes, false).is_ok());
}
