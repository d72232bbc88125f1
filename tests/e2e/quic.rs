//! DNS over QUIC (RFC 9250) and DNS over HTTP/3 against the real binary: dnspython (with
//! aioquic) as the real client, and aioquic driven by hand (tests/support/quic_client.py) for
//! what no client sends on purpose: non-zero IDs, two messages on a stream, keepalive, a
//! stalled handshake. Also: the shared cache across transports, padding, drops (stream
//! resets), every DoH error status over HTTP/3, Alt-Svc on DoH, the connection limit, two
//! cores, certificate reload and shutdown.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use kudurru_e2e::{
    Kudurru, Scratch, TestUpstream, cert_pair, hex, python, query_bytes, unhex, unique_name,
};
use serde_json::{Value, json};

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("quic-{name}"))
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("support/quic_client.py")
}

/// Runs one client session (see quic_client.py) against `addr`, verifying against `ca`.
pub(crate) fn client(mode: &str, addr: SocketAddr, ca: &Path, mut spec: Value) -> Value {
    spec["mode"] = json!(mode);
    spec["host"] = json!(addr.ip().to_string());
    spec["port"] = json!(addr.port());
    spec["ca"] = json!(ca.display().to_string());
    let mut child = Command::new(python())
        .arg(script())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    // The spec goes in on stdin: large bodies do not fit in an argument.
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, spec.to_string().as_bytes()).unwrap();
    drop(stdin);
    let output = child.wait_with_output().expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// One length-prefixed DoQ stream carrying `message`, as hex.
fn doq_stream(message: &[u8]) -> String {
    let mut out = (message.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(message);
    hex(&out)
}

/// The DNS message of a DoQ result: the stream's bytes without the length prefix (checked).
fn doq_answer(result: &Value) -> Vec<u8> {
    let data = unhex(
        result["data"]
            .as_str()
            .unwrap_or_else(|| panic!("no answer: {result}")),
    );
    let len = u16::from_be_bytes([data[0], data[1]]) as usize;
    assert_eq!(len, data.len() - 2, "one length-prefixed message: {result}");
    data[2..].to_vec()
}

/// (ID, rcode, answer count) of a DNS message.
fn summary(message: &[u8]) -> (u16, u8, u16) {
    (
        u16::from_be_bytes([message[0], message[1]]),
        message[3] & 0x0f,
        u16::from_be_bytes([message[6], message[7]]),
    )
}

fn localhost() -> Vec<u8> {
    query_bytes(0, "localhost", 1, 1, None)
}

#[test]
fn rfc9250_dnspython_over_doq_and_doh3_share_the_cache_with_id_zero() {
    let d = dir("basic");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let name = unique_name("quic-");
    let request = json!({"requests": [{"name": name}, {"name": name}]});
    let doq = client("dnspython-doq", k.quic.unwrap(), &cert, request.clone());
    let h3 = client("dnspython-h3", k.h3.unwrap(), &cert, request);
    for result in doq["results"]
        .as_array()
        .unwrap()
        .iter()
        .chain(h3["results"].as_array().unwrap())
    {
        assert_eq!(result["id"], 0, "{result}");
        assert_eq!(result["rcode"], "NOERROR", "{result}");
        let answer = result["answer"][0].as_str().unwrap();
        assert!(answer.ends_with("IN A 192.0.2.1"), "{answer}");
    }
    assert_eq!(
        upstream.total(&name),
        1,
        "four queries over DoQ and DoH3, one upstream query"
    );
    assert_eq!(
        k.metric("kudurru_dns_queries_total{transport=\"doq\",core=\"0\"}"),
        Some(2.0)
    );
    assert_eq!(
        k.metric("kudurru_dns_queries_total{transport=\"doh3\",core=\"0\"}"),
        Some(2.0)
    );
    assert_eq!(
        k.metric("kudurru_doh_connections_total{version=\"h3\"}"),
        Some(2.0)
    );
    assert!(k.metric("kudurru_tls_handshakes_total") >= Some(4.0));
}

#[test]
fn rfc9250_one_connection_many_streams_padding_and_a_garbage_stream_reset() {
    let d = dir("streams");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    // 16 slow names at once on one connection: all answered, each on its own stream.
    let names: Vec<String> = (0..16).map(|_| unique_name("slow-quic-")).collect();
    let mut requests: Vec<Value> = names
        .iter()
        .map(|n| json!({"data": doq_stream(&query_bytes(0, n, 1, 1, None))}))
        .collect();
    // RFC 8467 padding when asked (EDNS padding option in the query).
    let mut padded = query_bytes(0, "localhost", 1, 1, Some((1232, 0, false)));
    padded[11] = 1;
    let rdlen_at = padded.len() - 2;
    padded[rdlen_at..].copy_from_slice(&4u16.to_be_bytes());
    padded.extend_from_slice(&[0, 12, 0, 0]);
    requests.push(json!({"data": doq_stream(&padded)}));
    // Unparseable bytes: the pipeline drops them, the stream is reset with
    // DOQ_REQUEST_CANCELLED, and the connection goes on.
    requests.push(json!({"data": doq_stream(&[0, 0, 0xff])}));
    let report = client(
        "doq",
        k.quic.unwrap(),
        &cert,
        json!({"requests": requests, "concurrent": true, "timeout": 10}),
    );
    let results = report["results"].as_array().unwrap();
    for (name, result) in names.iter().zip(results) {
        assert_eq!(summary(&doq_answer(result)), (0, 0, 1), "{name}: {result}");
    }
    assert_eq!(doq_answer(&results[16]).len(), 468, "padded to 468");
    assert_eq!(results[17]["reset"], 3, "{}", results[17]);
    assert!(report["terminated"].is_null(), "{report}");
    assert_eq!(
        k.metric("kudurru_dns_responses_total{rcode=\"none\"}"),
        Some(1.0)
    );
}

/// A query whose stream arrives in several packets (the length apart from the message, the
/// message cut in two, the FIN alone) is joined and answered like one that arrives whole: a
/// locally answered name and a cache miss, on one connection with a whole query between them.
#[test]
fn rfc9250_a_query_split_across_packets_is_answered_whole() {
    let d = dir("split");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let miss = unique_name("split-quic-");
    let local = localhost();
    let miss_query = query_bytes(0, &miss, 1, 1, None);
    let requests = json!([
        {"data": doq_stream(&local), "split": [1, 2, 2 + local.len() / 2]},
        {"data": doq_stream(&local)},
        {"data": doq_stream(&miss_query), "split": [2, 2 + miss_query.len()]},
    ]);
    let report = client(
        "doq",
        k.quic.unwrap(),
        &cert,
        json!({"requests": requests, "timeout": 10}),
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(summary(&doq_answer(&results[0])), (0, 0, 1), "{report}");
    assert_eq!(summary(&doq_answer(&results[1])), (0, 0, 1), "{report}");
    assert_eq!(
        summary(&doq_answer(&results[2])),
        (0, 0, 1),
        "{miss}: {report}"
    );
    assert!(report["terminated"].is_null(), "{report}");
    assert_eq!(
        upstream.count(&miss, "udp"),
        1,
        "the miss went upstream once"
    );
}

#[test]
fn rfc9250_protocol_errors_close_the_connection_with_doq_protocol_error() {
    let d = dir("errors");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let good = doq_stream(&localhost());
    let mut keepalive = query_bytes(0, "localhost", 1, 1, Some((1232, 0, false)));
    let rdlen_at = keepalive.len() - 2;
    keepalive[rdlen_at..].copy_from_slice(&4u16.to_be_bytes());
    keepalive.extend_from_slice(&[0, 11, 0, 0]);
    let cases = [
        (
            doq_stream(&query_bytes(0x1234, "localhost", 1, 1, None)),
            "message ID must be 0",
        ),
        (format!("{good}{good}"), "more than one message on a stream"),
        (good[..good.len() - 2].to_owned(), "truncated message"),
        ("00".to_owned(), "truncated message"),
        (doq_stream(&keepalive), "edns-tcp-keepalive not allowed"),
    ];
    for (stream, reason) in &cases {
        let report = client(
            "doq",
            k.quic.unwrap(),
            &cert,
            json!({"requests": [{"data": good}, {"data": stream}], "wait_close": 2}),
        );
        let results = report["results"].as_array().unwrap();
        assert_eq!(summary(&doq_answer(&results[0])), (0, 0, 1), "{report}");
        assert_eq!(results[1]["closed"], 2, "{reason}: {report}");
        assert_eq!(
            report["terminated"]["code"], 2,
            "DOQ_PROTOCOL_ERROR: {report}"
        );
        assert_eq!(report["terminated"]["reason"], *reason, "{report}");
    }
    assert_eq!(
        k.metric("kudurru_doq_protocol_errors_total"),
        Some(cases.len() as f64)
    );
    // The server goes on: a new connection is answered.
    let report = client(
        "doq",
        k.quic.unwrap(),
        &cert,
        json!({"requests": [{"data": good}]}),
    );
    assert_eq!(summary(&doq_answer(&report["results"][0])), (0, 0, 1));
}

#[test]
fn a_drop_on_doq_and_doh3_resets_only_that_stream() {
    let d = dir("drop");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_RATELIMIT__QPS", "1")
        .env("KUDURRU_RATELIMIT__BURST", "1")
        .start();
    let good = doq_stream(&localhost());
    let report = client(
        "doq",
        k.quic.unwrap(),
        &cert,
        json!({"requests": [{"data": good}, {"data": good}]}),
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(summary(&doq_answer(&results[0])), (0, 0, 1), "{report}");
    assert_eq!(results[1]["reset"], 3, "DOQ_REQUEST_CANCELLED: {report}");
    assert!(report["terminated"].is_null(), "{report}");
    let get = format!(
        "/dns-query?dns={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(localhost())
    );
    let report = client(
        "h3",
        k.h3.unwrap(),
        &cert,
        json!({"requests": [{"path": get}, {"path": "/elsewhere"}]}),
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[0]["reset"], 0x10c, "H3_REQUEST_CANCELLED: {report}");
    assert_eq!(
        results[1]["status"], 404,
        "the connection goes on: {report}"
    );
    assert!(k.metric("kudurru_dns_responses_total{rcode=\"none\"}") >= Some(2.0));
}

#[test]
fn doh3_answers_get_and_post_and_every_error_status_with_its_json_reason() {
    let d = dir("h3");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let name = unique_name("h3-");
    let query = query_bytes(0, &name, 1, 1, None);
    let get = format!(
        "/dns-query?dns={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&query)
    );
    let dns_message = [["content-type", "application/dns-message"]];
    let requests = json!([
        {"path": get},
        {"method": "POST", "path": "/dns-query", "headers": dns_message, "body": hex(&query)},
        {"path": "/dns-query?dns=!!"},
        {"path": "/dns-query"},
        {"path": "/other?dns=AAAA"},
        {"method": "PUT", "path": "/dns-query"},
        {"method": "POST", "path": "/dns-query", "headers": [["content-type", "text/plain"]], "body": hex(&query)},
        {"method": "POST", "path": "/dns-query", "headers": dns_message, "body": hex(&vec![0u8; 70_000])},
        {"method": "POST", "path": "/dns-query", "headers": dns_message, "body": "8180"},
        {"path": get},
    ]);
    let report = client(
        "h3",
        k.h3.unwrap(),
        &cert,
        json!({"requests": requests, "timeout": 10}),
    );
    let results = report["results"].as_array().unwrap();
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap_or_else(|| panic!("{r}")))
        .collect();
    assert_eq!(statuses, [200, 200, 400, 400, 404, 405, 415, 413, 400, 200]);
    for answered in [&results[0], &results[1], &results[9]] {
        assert_eq!(
            answered["headers"]["content-type"],
            "application/dns-message"
        );
        let body = unhex(answered["body"].as_str().unwrap());
        assert_eq!(summary(&body), (0, 0, 1), "{answered}");
        let age: u32 = answered["headers"]["cache-control"]
            .as_str()
            .and_then(|v| v.strip_prefix("max-age="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no max-age: {answered}"));
        assert!((290..=300).contains(&age), "max-age={age}");
    }
    for rejected in &results[2..9] {
        assert_eq!(rejected["headers"]["content-type"], "application/json");
        let json: Value =
            serde_json::from_slice(&unhex(rejected["body"].as_str().unwrap())).unwrap();
        assert_eq!(json["status"], rejected["status"], "{json}");
        assert!(!json["error"].as_str().unwrap().is_empty());
    }
    assert_eq!(results[5]["headers"]["allow"], "GET, POST");
    assert_eq!(upstream.total(&name), 1);
    assert_eq!(
        k.metric("kudurru_doh_rejected_total{status=\"413\"}"),
        Some(1.0)
    );
}

#[test]
fn doh_over_tcp_advertises_http3_with_alt_svc() {
    let d = dir("altsvc");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let port = k.https.unwrap().port();
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(localhost());
    for version in ["--http2", "--http1.1"] {
        let output = Command::new("curl")
            .args([
                "-s",
                "-S",
                "--max-time",
                "10",
                version,
                "-o",
                "/dev/null",
                "-D",
                "-",
            ])
            .arg("--resolve")
            .arg(format!("localhost:{port}:127.0.0.1"))
            .arg("--cacert")
            .arg(&cert)
            .arg(format!("https://localhost:{port}/dns-query?dns={encoded}"))
            .output()
            .expect("curl runs");
        let headers = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
        let wanted = format!("alt-svc: h3=\":{port}\"; ma=86400");
        assert!(headers.contains(&wanted), "{version}: {headers}");
    }
}

/// A stalled handshake holds a connection slot until `tls.handshakeTimeout`, and only its own;
/// on a full core (issue 32 item 1) a newcomer is admitted by closing it, the connection
/// longest without a query, instead of being refused while the stalled one holds the core.
#[test]
fn quic_connections_count_against_the_per_core_limit_and_stalled_handshakes_time_out() {
    let d = dir("limits");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .cores(1)
        .tls(&cert, &key)
        .env("KUDURRU_TCP__MAXCONNECTIONSPERCORE", "1")
        .env("KUDURRU_TLS__HANDSHAKETIMEOUT", "1s")
        .start();
    let quic = k.quic.unwrap();
    let stall = || {
        let spec = json!({"mode": "stall", "host": "127.0.0.1", "port": quic.port(),
                          "ca": cert.display().to_string(), "timeout": 4});
        let mut stalled = Command::new(python())
            .arg(script())
            .arg(spec.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python runs");
        let mut line = String::new();
        std::io::BufReader::new(stalled.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"sent\""), "{line}");
        stalled
    };
    // Alone, a stalled handshake is closed at the handshake deadline.
    let mut stalled = stall();
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.metric("kudurru_tls_handshake_failures_total") < Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "the stalled handshake never timed out"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = stalled.kill();
    let _ = stalled.wait();
    // Holding the core's one slot, it is closed for a newcomer, which is served at once.
    let mut stalled = stall();
    let good = doq_stream(&localhost());
    let report = client(
        "doq",
        quic,
        &cert,
        json!({"requests": [{"data": good}], "timeout": 2}),
    );
    assert_eq!(
        summary(&doq_answer(&report["results"][0])),
        (0, 0, 1),
        "{report}"
    );
    assert!(k.metric("kudurru_tcp_evicted_total") >= Some(1.0));
    assert_eq!(k.metric("kudurru_tcp_refused_total"), Some(0.0));
    let _ = stalled.kill();
    let _ = stalled.wait();
}

#[test]
fn doq_and_doh3_are_served_by_every_core() {
    let d = dir("cores");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .cores(2)
        .tls(&cert, &key)
        .start();
    let good = doq_stream(&localhost());
    let get = format!(
        "/dns-query?dns={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(localhost())
    );
    // Each session is a connection from a new source port; the kernel spreads them.
    for _ in 0..16 {
        let doq = client(
            "doq",
            k.quic.unwrap(),
            &cert,
            json!({"requests": [{"data": good}]}),
        );
        assert_eq!(summary(&doq_answer(&doq["results"][0])), (0, 0, 1));
        let h3 = client(
            "h3",
            k.h3.unwrap(),
            &cert,
            json!({"requests": [{"path": get}]}),
        );
        assert_eq!(h3["results"][0]["status"], 200, "{h3}");
    }
    for transport in ["doq", "doh3"] {
        for core in 0..2 {
            let series =
                format!("kudurru_dns_queries_total{{transport=\"{transport}\",core=\"{core}\"}}");
            assert!(k.metric(&series) >= Some(1.0), "{series}");
        }
    }
}

#[test]
fn quic_listeners_pick_up_a_reloaded_certificate() {
    let d = dir("reload");
    let (cert, key) = cert_pair(&d, "a");
    let (next_cert, next_key) = cert_pair(&d, "b");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let good = doq_stream(&localhost());
    let answered = |ca: &Path| {
        let report = client(
            "doq",
            k.quic.unwrap(),
            ca,
            json!({"requests": [{"data": good}], "timeout": 2}),
        );
        report["results"][0]["data"].is_string()
    };
    let (old_ca, new_ca) = (d.join("old-ca.crt"), d.join("new-ca.crt"));
    std::fs::copy(&cert, &old_ca).unwrap();
    std::fs::copy(&next_cert, &new_ca).unwrap();
    assert!(answered(&old_ca));
    assert!(
        !answered(&new_ca),
        "the client checks which certificate it gets"
    );
    std::fs::copy(&next_key, &key).unwrap();
    std::fs::copy(&next_cert, &cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !answered(&new_ca) {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not picked up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn shutdown_closes_open_quic_connections_with_no_error() {
    let d = dir("shutdown");
    let (cert, key) = cert_pair(&d, "a");
    let mut k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let spec = json!({"mode": "doq", "host": "127.0.0.1", "port": k.quic.unwrap().port(),
                      "ca": cert.display().to_string(),
                      "requests": [{"data": doq_stream(&localhost())}], "wait_close": 20});
    let held = Command::new(python())
        .arg(script())
        .arg(spec.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    // The client is connected once the server has answered its query.
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.metric("kudurru_dns_queries_total{transport=\"doq\",core=\"0\"}") != Some(1.0) {
        assert!(Instant::now() < deadline, "the DoQ query never arrived");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(k.terminate().success());
    let output = held.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary(&doq_answer(&report["results"][0])), (0, 0, 1));
    assert_eq!(
        report["terminated"],
        json!({"code": 0, "reason": "shutting down"}),
        "CONNECTION_CLOSE with DOQ_NO_ERROR: {report}"
    );
}

#[test]
fn an_idle_quic_connection_ends_after_tcp_idle_timeout() {
    let d = dir("idle");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_TCP__IDLETIMEOUT", "1s")
        .start();
    // The client would wait 30 s; QUIC's idle timeout is the smaller of both sides'.
    let started = Instant::now();
    let report = client(
        "doq",
        k.quic.unwrap(),
        &cert,
        json!({"requests": [{"data": doq_stream(&localhost())}], "wait_close": 10}),
    );
    assert_eq!(summary(&doq_answer(&report["results"][0])), (0, 0, 1));
    assert!(report["terminated"].is_object(), "{report}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "closed by kudurru's 1 s idle timeout, not the client's 30 s"
    );
}
