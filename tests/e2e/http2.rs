//! DNS over HTTPS on kudurru's own HTTP/2 (RFC 9113) against the real binary, with clients
//! other than curl: raw frames over TLS for protocol errors (tests/support/h2_client.py), the
//! Python `h2` library for flow control and stream limits, and dnspython's DoH client (httpx2).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use kudurru_core::http2::frame::{self, ErrorCode, flag, kind};
use kudurru_e2e::{
    Kudurru, Scratch, TestUpstream, cert_pair, hex, python, query_bytes, unhex, unique_name,
};
use serde_json::{Value, json};

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("h2-{name}"))
}

/// Runs one client session (see h2_client.py) against `addr`, verifying against `ca`.
fn client(mode: &str, addr: SocketAddr, ca: &Path, mut spec: Value) -> Value {
    spec["mode"] = json!(mode);
    spec["host"] = json!(addr.ip().to_string());
    spec["port"] = json!(addr.port());
    spec["ca"] = json!(ca.display().to_string());
    let output = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("support/h2_client.py"))
        .arg(spec.to_string())
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let at = frame::start(&mut out);
    out.extend_from_slice(payload);
    frame::finish(&mut out, at, kind, flags, stream);
    out
}

/// A field block of literals without indexing, literal names (RFC 7541 §6.2.2); every name
/// and value under 127 bytes.
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        assert!(name.len() < 127 && value.len() < 127);
        out.push(0);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

fn get_block(path: &str) -> Vec<u8> {
    block(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", path),
    ])
}

fn dns_path(message: &[u8]) -> String {
    use base64::Engine;
    format!(
        "/dns-query?dns={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(message)
    )
}

/// The frames of a `frames` session as (type, flags, stream, payload).
fn frames(report: &Value) -> Vec<(u8, u8, u32, Vec<u8>)> {
    report["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .map(|f| {
            (
                f["type"].as_u64().unwrap() as u8,
                f["flags"].as_u64().unwrap() as u8,
                f["stream"].as_u64().unwrap() as u32,
                unhex(f["payload"].as_str().unwrap()),
            )
        })
        .collect()
}

fn code(payload: &[u8], at: usize) -> ErrorCode {
    ErrorCode(u32::from_be_bytes(payload[at..at + 4].try_into().unwrap()))
}

#[test]
fn rfc9113_5_4_1_protocol_errors_end_only_their_connection_with_goaway_and_the_reason() {
    let d = dir("errors");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let addr = k.https.unwrap();
    let localhost = query_bytes(0, "localhost.", 1, 1, None);
    let cases: Vec<(&str, Vec<u8>, ErrorCode, &str)> = vec![
        (
            "DATA on stream 0",
            raw_frame(kind::DATA, 0, 0, b"x"),
            ErrorCode::PROTOCOL_ERROR,
            "DATA on stream 0",
        ),
        (
            "a frame over 16384 bytes",
            raw_frame(kind::DATA, 0, 1, &[0; 16_385]),
            ErrorCode::FRAME_SIZE_ERROR,
            "SETTINGS_MAX_FRAME_SIZE",
        ),
        (
            "PUSH_PROMISE",
            raw_frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
            ErrorCode::PROTOCOL_ERROR,
            "PUSH_PROMISE",
        ),
        (
            "HEADERS on an even stream",
            raw_frame(kind::HEADERS, flag::END_HEADERS, 2, &get_block("/")),
            ErrorCode::PROTOCOL_ERROR,
            "even",
        ),
        (
            "CONTINUATION without HEADERS",
            raw_frame(kind::CONTINUATION, flag::END_HEADERS, 1, &get_block("/")),
            ErrorCode::PROTOCOL_ERROR,
            "CONTINUATION",
        ),
        (
            "HPACK index 0",
            raw_frame(kind::HEADERS, flag::END_HEADERS, 1, &[0x80]),
            ErrorCode::COMPRESSION_ERROR,
            "HPACK",
        ),
        (
            "connection window over 2^31-1",
            raw_frame(kind::WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            ErrorCode::FLOW_CONTROL_ERROR,
            "2^31-1",
        ),
    ];
    for (what, bytes, expected, reason) in cases {
        let report = client("frames", addr, &cert, json!({"send": hex(&bytes)}));
        let frames = frames(&report);
        let goaway = frames
            .iter()
            .find(|f| f.0 == kind::GOAWAY)
            .unwrap_or_else(|| panic!("{what}: no GOAWAY in {frames:?}"));
        assert_eq!(code(&goaway.3, 4), expected, "{what}");
        let debug = String::from_utf8_lossy(&goaway.3[8..]);
        assert!(debug.contains(reason), "{what}: {debug}");
        assert_eq!(report["closed"], true, "{what}: the connection closed");
    }
    // The listener still answers, over a new connection.
    let report = client(
        "requests",
        addr,
        &cert,
        json!({"requests": [{"method": "GET", "path": dns_path(&localhost)}]}),
    );
    assert_eq!(report["results"][0]["status"], 200, "{report}");
}

#[test]
fn rfc9113_5_4_2_a_malformed_request_resets_its_stream_and_the_next_one_is_answered() {
    let d = dir("stream-error");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let localhost = query_bytes(0x4242, "localhost.", 1, 1, None);
    let mut send = raw_frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        // No :scheme (RFC 9113 §8.3.1).
        &block(&[(":method", "GET"), (":path", &dns_path(&localhost))]),
    );
    send.extend(raw_frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        3,
        &get_block(&dns_path(&localhost)),
    ));
    let report = client(
        "frames",
        k.https.unwrap(),
        &cert,
        json!({"send": hex(&send), "timeout": 2}),
    );
    let frames = frames(&report);
    assert!(
        frames.iter().any(|f| f.0 == kind::RST_STREAM
            && f.2 == 1
            && code(&f.3, 0) == ErrorCode::PROTOCOL_ERROR),
        "{frames:?}"
    );
    let data: Vec<_> = frames
        .iter()
        .filter(|f| f.0 == kind::DATA && f.2 == 3)
        .collect();
    assert_eq!(data.len(), 1, "{frames:?}");
    assert!(data[0].1 & flag::END_STREAM != 0);
    assert_eq!(
        &data[0].3[..2],
        &[0x42, 0x42],
        "the answer carries the query's ID"
    );
    assert!(!frames.iter().any(|f| f.0 == kind::GOAWAY), "{frames:?}");
}

#[test]
fn rfc9113_6_9_a_client_window_of_16_bytes_still_gets_every_answer_whole() {
    let d = dir("window");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    // EDNS with the padding option: the answer is padded to 468 bytes (RFC 8467).
    let padded = |id: u16, name: &str| {
        let mut q = query_bytes(id, name, 1, 1, Some((1232, 0, false)));
        let len = q.len();
        q[len - 2..].copy_from_slice(&4u16.to_be_bytes());
        q.extend_from_slice(&[0, 12, 0, 0]);
        q
    };
    let names: Vec<String> = (0..3).map(|i| unique_name(&format!("w{i}-"))).collect();
    let requests: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"method": "GET", "path": dns_path(&padded(100 + i as u16, name))}))
        .collect();
    let report = client(
        "requests",
        k.https.unwrap(),
        &cert,
        json!({"settings": {"INITIAL_WINDOW_SIZE": 16}, "requests": requests}),
    );
    for (i, result) in report["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(result["status"], 200, "{report}");
        let body = unhex(result["body"].as_str().unwrap());
        assert_eq!(body.len(), 468, "{report}");
        assert_eq!(u16::from_be_bytes([body[0], body[1]]), 100 + i as u16);
        assert_eq!(
            result["headers"]["content-length"].as_str(),
            Some("468"),
            "{report}"
        );
    }
    let data_frames = report["data_frames"].as_u64().unwrap();
    assert!(
        data_frames >= 3 * 468 / 16,
        "each answer came in 16-byte DATA frames: {data_frames}"
    );
}

#[test]
fn rfc9113_5_1_2_streams_over_the_limit_are_refused_and_the_rest_answered() {
    let d = dir("refused");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .env("KUDURRU_TCP__MAXPIPELINED", "4")
        .start();
    // Ten slow names opened before the server's SETTINGS can be seen: some over the limit.
    let requests: Vec<Value> = (0..10)
        .map(|i| {
            let q = query_bytes(i, &unique_name(&format!("slow-{i}-")), 1, 1, None);
            json!({"method": "GET", "path": dns_path(&q)})
        })
        .collect();
    let report = client(
        "requests",
        k.https.unwrap(),
        &cert,
        json!({"requests": requests, "timeout": 10}),
    );
    let results = report["results"].as_array().unwrap();
    let answered = results.iter().filter(|r| r["status"] == 200).count();
    let refused = results
        .iter()
        .filter(|r| r["reset"] == ErrorCode::REFUSED_STREAM.0)
        .count();
    assert_eq!(answered + refused, 10, "{report}");
    assert!(answered >= 4 && refused >= 1, "{report}");
}

#[test]
fn dnspython_doh_over_http2_get_and_post_share_the_cache() {
    let d = dir("dnspython");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let name = unique_name("dnspython-");
    for post in [true, false, true] {
        let report = client(
            "dnspython",
            k.https.unwrap(),
            &cert,
            json!({"name": name, "type": "A", "post": post}),
        );
        assert_eq!(report["id_matches"], true, "{report}");
        assert_eq!(report["rcode"], 0, "{report}");
        assert!(
            report["answer"][0].as_str().unwrap().contains(" IN A "),
            "{report}"
        );
    }
    assert_eq!(
        upstream.count(&name, "udp"),
        1,
        "one upstream query for three clients"
    );
    assert_eq!(
        k.metric("kudurru_doh_connections_total{version=\"h2\"}"),
        Some(3.0)
    );
}
