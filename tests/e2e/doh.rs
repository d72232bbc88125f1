//! DNS over HTTPS (RFC 8484) against the real binary: curl over HTTP/2 and HTTP/1.1 with GET
//! and POST and certificate verification, kdig `+https`, every error status, Cache-Control,
//! padding, concurrent streams on one connection, a drop on each HTTP version, and the idle
//! timeout. Python's `ssl` writes what curl cannot (a POST without Content-Length, a silent
//! client).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, query_bytes, unique_name};

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("doh-{name}"))
}

/// What one curl request came back with.
#[derive(Debug)]
struct Reply {
    status: u16,
    version: String,
    headers: String,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json_error(&self) -> String {
        let json: serde_json::Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"));
        assert_eq!(json["status"], self.status, "{json}");
        json["error"].as_str().unwrap().to_owned()
    }
}

/// A DoH endpoint as curl reaches it: `https://localhost:PORT` resolved to loopback, verified
/// against `ca`.
struct Endpoint {
    addr: SocketAddr,
    ca: PathBuf,
    scratch: PathBuf,
}

impl Endpoint {
    fn new(k: &Kudurru, ca: &Path, scratch: &Path) -> Self {
        std::fs::create_dir_all(scratch).unwrap();
        Self {
            addr: k.https.expect("an https listener"),
            ca: ca.to_owned(),
            scratch: scratch.to_owned(),
        }
    }

    fn url(&self, target: &str) -> String {
        format!("https://localhost:{}{target}", self.addr.port())
    }

    fn curl(&self, version: &str, extra: &[&str]) -> Command {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-S", "--max-time", "10", version])
            .arg("--resolve")
            .arg(format!("localhost:{}:127.0.0.1", self.addr.port()))
            .arg("--cacert")
            .arg(&self.ca)
            .args(extra);
        cmd
    }

    /// One request; `version` is `--http2` or `--http1.1`.
    fn request(&self, version: &str, target: &str, extra: &[&str]) -> Reply {
        let (headers, body) = (self.scratch.join("headers"), self.scratch.join("body"));
        let output = self
            .curl(version, extra)
            .arg("-D")
            .arg(&headers)
            .arg("-o")
            .arg(&body)
            .args(["-w", "%{http_code} %{http_version}"])
            .arg(self.url(target))
            .output()
            .expect("curl runs");
        assert!(
            output.status.success(),
            "curl failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let written = String::from_utf8(output.stdout).unwrap();
        let (status, version) = written.split_once(' ').unwrap();
        Reply {
            status: status.parse().unwrap(),
            version: version.to_owned(),
            headers: std::fs::read_to_string(&headers).unwrap(),
            body: std::fs::read(&body).unwrap(),
        }
    }

    fn get(&self, version: &str, message: &[u8]) -> Reply {
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(message);
        self.request(version, &format!("/dns-query?dns={encoded}"), &[])
    }

    fn post(&self, version: &str, message: &[u8]) -> Reply {
        let file = self.scratch.join("query");
        std::fs::write(&file, message).unwrap();
        let data = format!("@{}", file.display());
        self.request(
            version,
            "/dns-query",
            &[
                "-H",
                "content-type: application/dns-message",
                "--data-binary",
                &data,
            ],
        )
    }
}

/// (ID, rcode, answer count, last four bytes) of a DNS response.
fn summary(message: &[u8]) -> (u16, u8, u16, [u8; 4]) {
    assert!(message.len() >= 16, "too short: {message:?}");
    let tail: [u8; 4] = message[message.len() - 4..].try_into().unwrap();
    (
        u16::from_be_bytes([message[0], message[1]]),
        message[3] & 0x0f,
        u16::from_be_bytes([message[6], message[7]]),
        tail,
    )
}

#[test]
fn rfc8484_curl_get_and_post_over_http2_and_http1_share_the_cache() {
    let d = dir("basic");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let doh = Endpoint::new(&k, &cert, &d.join("curl"));
    let name = unique_name("doh-");
    let mut id = 0u16;
    for (version, wire_version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        for method in ["GET", "POST"] {
            // RFC 8484 §4.1 asks for ID 0; any other ID is echoed all the same.
            let query = query_bytes(id, &name, 1, 1, None);
            let reply = match method {
                "GET" => doh.get(version, &query),
                _ => doh.post(version, &query),
            };
            assert_eq!(reply.status, 200, "{method} {version}: {reply:?}");
            assert_eq!(reply.version, wire_version);
            assert_eq!(
                reply.header("content-type"),
                Some("application/dns-message")
            );
            assert_eq!(
                summary(&reply.body),
                (id, 0, 1, [192, 0, 2, 1]),
                "{method} {version}"
            );
            // RFC 8484 §5.1: freshness no longer than the smallest TTL (300, decrementing).
            let age: u32 = reply
                .header("cache-control")
                .and_then(|v| v.strip_prefix("max-age="))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no max-age: {reply:?}"));
            assert!((290..=300).contains(&age), "max-age={age}");
            // RFC 9110 §6.6.1: an origin server with a clock sends Date, in IMF-fixdate.
            let date = reply
                .header("date")
                .unwrap_or_else(|| panic!("no date: {reply:?}"));
            assert!(
                date.ends_with(" GMT") && date.len() == 29,
                "IMF-fixdate: {date}"
            );
            id += 0x1111;
        }
    }
    assert_eq!(
        upstream.total(&name),
        1,
        "four requests over two HTTP versions, one upstream query"
    );
    assert_eq!(
        k.metric("kudurru_dns_queries_total{transport=\"doh\",core=\"0\"}"),
        Some(4.0)
    );
    assert_eq!(
        k.metric("kudurru_doh_connections_total{version=\"h2\"}"),
        Some(2.0)
    );
    assert_eq!(
        k.metric("kudurru_doh_connections_total{version=\"http/1.1\"}"),
        Some(2.0)
    );
}

#[test]
fn rfc8484_kdig_over_https_verifies_and_gets_padded_answers() {
    let d = dir("kdig");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let addr = k.https.unwrap();
    let kdig = |extra: &[&str]| {
        let output = Command::new("kdig")
            .arg(format!("@{}", addr.ip()))
            .arg("-p")
            .arg(addr.port().to_string())
            .arg(format!("+tls-ca={}", cert.display()))
            .args(["+tls-hostname=localhost", "+time=5", "+retry=0"])
            .args(extra)
            .args(["localhost", "A"])
            .output()
            .expect("kdig runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for method in ["+https", "+https-get"] {
        let out = kdig(&[method, "+padding"]);
        assert!(out.contains("status: NOERROR"), "{method}: {out}");
        assert!(out.contains("127.0.0.1"), "{out}");
        assert!(out.contains("Received 468 B"), "padded (RFC 8467): {out}");
    }
    let out = kdig(&["+https", "+nopadding"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(!out.contains("PADDING"), "no padding unless asked: {out}");
}

#[test]
fn every_bad_request_gets_its_status_and_a_json_reason_and_the_connection_still_serves() {
    let d = dir("errors");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let doh = Endpoint::new(&k, &cert, &d.join("curl"));
    let localhost = query_bytes(7, "localhost.", 1, 1, None);
    let mut response = localhost.clone();
    response[2] |= 0x80;
    let oversize = d.join("oversize");
    std::fs::write(&oversize, vec![0u8; 65_536]).unwrap();
    let oversize = format!("@{}", oversize.display());
    let dns_message = ["-H", "content-type: application/dns-message"];
    let mut expected_400 = 0.0;
    for version in ["--http2", "--http1.1"] {
        let cases: Vec<(Reply, u16, &str)> = vec![
            (doh.request(version, "/dns-query", &[]), 400, "missing"),
            (
                doh.request(version, "/dns-query?dns=%%%", &[]),
                400,
                "not base64url",
            ),
            (doh.get(version, &localhost[..8]), 400, "not a DNS query"),
            (doh.post(version, &response), 400, "not a DNS query"),
            (doh.request(version, "/other?dns=AAAA", &[]), 404, "path"),
            (
                doh.request(version, "/dns-query", &["-X", "PUT"]),
                405,
                "GET and POST",
            ),
            (
                doh.request(
                    version,
                    "/dns-query",
                    &[dns_message[0], dns_message[1], "--data-binary", &oversize],
                ),
                413,
                "65535",
            ),
            (
                doh.request(
                    version,
                    "/dns-query",
                    &["-H", "content-type: text/plain", "--data-binary", "x"],
                ),
                415,
                "application/dns-message",
            ),
        ];
        for (reply, status, reason) in cases {
            assert_eq!(reply.status, status, "{version}: {reply:?}");
            assert_eq!(reply.header("content-type"), Some("application/json"));
            let error = reply.json_error();
            assert!(error.contains(reason), "{version} {status}: {error}");
            if status == 405 {
                assert_eq!(reply.header("allow"), Some("GET, POST"));
            }
            if status == 400 {
                expected_400 += 1.0;
            }
        }
        // The same connection (curl reuses it for the second URL) still answers.
        let output = doh
            .curl(version, &["-w", "%{http_code} %{num_connects}\n"])
            .args(["-o", "/dev/null"])
            .arg(doh.url("/dns-query"))
            .args(["-o", "/dev/null"])
            .arg(doh.url(&format!(
                "/dns-query?dns={}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&localhost)
            )))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            out, "400 1\n200 0\n",
            "{version}: one connection, error then answer"
        );
    }
    assert_eq!(
        k.metric("kudurru_doh_rejected_total{status=\"400\"}"),
        Some(expected_400 + 2.0)
    );
    assert_eq!(
        k.metric("kudurru_doh_rejected_total{status=\"413\"}"),
        Some(2.0)
    );
}

/// An early 413 on HTTP/1.1 (the declared length is refused before the body is read) reaches
/// the client: the server closes its side and reads on for a while (a linger close) instead
/// of closing with the body unread, which would make the kernel reset the connection and could
/// destroy the response in flight. curl sends 10 MB without `Expect: 100-continue`, five times.
#[test]
fn an_early_413_on_http1_reaches_a_client_still_sending_a_large_body() {
    let d = dir("linger");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let doh = Endpoint::new(&k, &cert, &d.join("curl"));
    let body = d.join("large");
    std::fs::write(&body, vec![0u8; 10_000_000]).unwrap();
    let body = format!("@{}", body.display());
    for i in 0..5 {
        let reply = doh.request(
            "--http1.1",
            "/dns-query",
            &[
                "-H",
                "content-type: application/dns-message",
                "-H",
                "Expect:",
                "--data-binary",
                &body,
            ],
        );
        assert_eq!(reply.status, 413, "request {i}: {reply:?}");
        assert!(reply.json_error().contains("65535"), "request {i}");
    }
    // The server is unharmed: a query on a new connection is answered.
    let localhost = query_bytes(7, "localhost.", 1, 1, None);
    assert_eq!(doh.post("--http1.1", &localhost).status, 200);
}

/// Sends raw bytes over TLS with ALPN `alpn` and returns what came back before the server
/// closed or 5 s passed.
fn raw_tls(addr: SocketAddr, ca: &Path, alpn: &str, request: &[u8]) -> (Vec<u8>, bool) {
    const CLIENT: &str = r#"
import socket, ssl, sys
host, port, ca, alpn, data = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], bytes.fromhex(sys.argv[5])
ctx = ssl.create_default_context(cafile=ca)
ctx.set_alpn_protocols([alpn])
t = ctx.wrap_socket(socket.create_connection((host, port), timeout=5), server_hostname="localhost")
t.sendall(data)
t.settimeout(5)
out, closed = b"", False
try:
    while True:
        chunk = t.recv(65535)
        if not chunk:
            closed = True
            break
        out += chunk
except socket.timeout:
    pass
except (ConnectionResetError, ssl.SSLError):
    closed = True
sys.stdout.write(("closed " if closed else "open ") + out.hex())
"#;
    let hex: String = request.iter().map(|b| format!("{b:02x}")).collect();
    let output = Command::new("python3")
        .args([
            "-c",
            CLIENT,
            &addr.ip().to_string(),
            &addr.port().to_string(),
        ])
        .arg(ca)
        .args([alpn, &hex])
        .output()
        .expect("python3 runs");
    let out = String::from_utf8(output.stdout).unwrap();
    let (state, hex) = out
        .split_once(' ')
        .unwrap_or_else(|| panic!("{out} {}", String::from_utf8_lossy(&output.stderr)));
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    (bytes, state == "closed")
}

#[test]
fn http1_requests_curl_cannot_send_get_411_501_chunked_bodies_and_pipelined_ones_answer_in_order() {
    let d = dir("http1");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let addr = k.https.unwrap();
    let (out, closed) = raw_tls(
        addr,
        &cert,
        "http/1.1",
        b"POST /dns-query HTTP/1.1\r\nHost: x\r\ncontent-type: application/dns-message\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 411 "), "{text}");
    assert!(closed, "{text}");
    let (out, closed) = raw_tls(
        addr,
        &cert,
        "http/1.1",
        b"POST /dns-query HTTP/1.1\r\nHost: x\r\ntransfer-encoding: gzip, chunked\r\ncontent-type: application/dns-message\r\n\r\n0\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.1 501 "),
        "a coding other than chunked: {text}"
    );
    assert!(closed);
    // A chunked POST (RFC 9112 §7.1: the query in two chunks, one with an extension, and a
    // trailer), then a GET on the same connection: both answered.
    let q = query_bytes(7, "localhost.", 1, 1, None);
    let mut chunked = b"POST /dns-query HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-type: application/dns-message\r\n\r\n".to_vec();
    chunked.extend_from_slice(format!("{:x};ext=1\r\n", 5).as_bytes());
    chunked.extend_from_slice(&q[..5]);
    chunked.extend_from_slice(format!("\r\n{:x}\r\n", q.len() - 5).as_bytes());
    chunked.extend_from_slice(&q[5..]);
    chunked.extend_from_slice(b"\r\n0\r\nx-trailer: y\r\n\r\n");
    chunked.extend_from_slice(
        format!(
            "GET /dns-query?dns={} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(query_bytes(
                8,
                "localhost.",
                1,
                1,
                None
            ))
        )
        .as_bytes(),
    );
    let (out, closed) = raw_tls(addr, &cert, "http/1.1", &chunked);
    assert!(closed);
    let answers: Vec<(u16, u16)> = split_http1(&out)
        .into_iter()
        .map(|(status, body)| (status, summary(&body).0))
        .collect();
    assert_eq!(answers, [(200, 7), (200, 8)]);
    // Two POSTs and a GET in one write: three answers, in order, then the close asked for.
    let mut pipelined = Vec::new();
    for id in [1u16, 2] {
        let q = query_bytes(id, "localhost.", 1, 1, None);
        pipelined.extend_from_slice(
            format!(
                "POST /dns-query HTTP/1.1\r\nHost: x\r\ncontent-type: application/dns-message\r\ncontent-length: {}\r\n\r\n",
                q.len()
            )
            .as_bytes(),
        );
        pipelined.extend_from_slice(&q);
    }
    let q = query_bytes(3, "localhost.", 1, 1, None);
    pipelined.extend_from_slice(
        format!(
            "GET /dns-query?dns={} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&q)
        )
        .as_bytes(),
    );
    let (out, closed) = raw_tls(addr, &cert, "http/1.1", &pipelined);
    assert!(closed, "Connection: close is honoured");
    let ids: Vec<u16> = split_http1(&out)
        .into_iter()
        .map(|(status, body)| {
            assert_eq!(status, 200);
            summary(&body).0
        })
        .collect();
    assert_eq!(ids, [1, 2, 3]);
}

/// Splits concatenated HTTP/1.1 responses with Content-Length into (status, body).
fn split_http1(mut bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let mut responses = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        let body = bytes[end + 4..end + 4 + length].to_vec();
        responses.push((status, body));
        bytes = &bytes[end + 4 + length..];
    }
    responses
}

#[test]
fn http2_streams_on_one_connection_are_answered_concurrently() {
    let d = dir("streams");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let doh = Endpoint::new(&k, &cert, &d.join("curl"));
    // 20 different `slow-` names: each takes 400 ms upstream. In sequence that is 8 s.
    let mut cmd = doh.curl("--http2", &["--parallel", "--parallel-max", "20"]);
    for i in 0..20 {
        let q = query_bytes(0, &unique_name(&format!("slow-{i}-")), 1, 1, None);
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&q);
        cmd.args(["-o", "/dev/null", "-w", "%{http_code}\n"])
            .arg(doh.url(&format!("/dns-query?dns={encoded}")));
    }
    let started = Instant::now();
    let output = cmd.output().unwrap();
    let elapsed = started.elapsed();
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(out.lines().filter(|l| *l == "200").count(), 20, "{out}");
    assert!(
        elapsed < Duration::from_secs(4),
        "streams waited on each other: {elapsed:?}"
    );
    assert_eq!(
        k.metric("kudurru_doh_connections_total{version=\"h2\"}"),
        Some(1.0),
        "curl multiplexed them over one connection"
    );
}

#[test]
fn a_drop_aborts_the_http2_stream_and_closes_http1_without_a_response() {
    let d = dir("drop");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_RATELIMIT__QPS", "1")
        .env("KUDURRU_RATELIMIT__BURST", "1")
        .start();
    let doh = Endpoint::new(&k, &cert, &d.join("curl"));
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(query_bytes(
        0,
        "localhost.",
        1,
        1,
        None,
    ));
    let url = doh.url(&format!("/dns-query?dns={encoded}"));
    let output = doh
        .curl("--http2", &["-o", "/dev/null", "-w", "%{http_code}\n"])
        .arg(&url)
        .args(["-o", "/dev/null", "-w", "%{http_code}\n"])
        .arg(&url)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        out.starts_with("200\n"),
        "the first is within the limit: {out}"
    );
    assert_eq!(output.status.code(), Some(92), "HTTP/2 stream error: {err}");
    assert!(err.contains("CANCEL"), "RST_STREAM(CANCEL): {err}");
    std::thread::sleep(Duration::from_millis(1100));
    let (out, closed) = raw_tls(
        k.https.unwrap(),
        &cert,
        "http/1.1",
        format!(
            "GET /dns-query?dns={encoded} HTTP/1.1\r\nHost: x\r\n\r\nGET /dns-query?dns={encoded} HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .as_bytes(),
    );
    let responses = split_http1(&out);
    assert_eq!(responses.len(), 1, "one answer, then nothing");
    assert_eq!(responses[0].0, 200);
    assert!(closed, "the dropped request closed the connection");
    assert!(k.metric("kudurru_dns_responses_total{rcode=\"none\"}") >= Some(2.0));
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let d = dir("idle");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_TCP__IDLETIMEOUT", "1s")
        .start();
    let addr = k.https.unwrap();
    let started = Instant::now();
    let (out, closed) = raw_tls(addr, &cert, "http/1.1", b"");
    assert!(out.is_empty() && closed, "HTTP/1.1: closed, nothing sent");
    assert!(started.elapsed() >= Duration::from_millis(900));
    // HTTP/2: the preface and an empty SETTINGS, then silence: the server's SETTINGS, its ACK,
    // then GOAWAY (frame type 7) and the close.
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let (out, closed) = raw_tls(addr, &cert, "h2", &preface);
    let mut types = Vec::new();
    let mut rest = &out[..];
    while rest.len() >= 9 {
        let len = usize::from(rest[1]) << 8 | usize::from(rest[2]);
        types.push(rest[3]);
        rest = &rest[(9 + len).min(rest.len())..];
    }
    assert!(types.contains(&7), "GOAWAY among frame types {types:?}");
    assert!(closed);
    assert!(k.metric("kudurru_tcp_timeouts_total") >= Some(2.0));
}
