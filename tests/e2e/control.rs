//! The control thread's HTTP listeners (ops and API) against the clients that stalled or broke
//! them when each listener was one thread: a client slow with its head, a body that never
//! comes, an unauthenticated write with a large body, and many idle connections.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use kudurru_e2e::{Kudurru, TestUpstream, http_get};

/// A connection that has sent `bytes` and stays open.
fn hold(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.write_all(bytes).expect("sends");
    stream
}

/// What the server sent on `stream` within 5 s (until it closed or went quiet).
fn read_some(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(Iterator::count)
        .unwrap_or(0)
}

#[test]
fn a_request_body_that_never_comes_stalls_neither_ops_nor_the_api() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    // Fault (a): tiny_http read this body on the ops listener's only thread.
    let mut stuck = hold(
        k.ops,
        b"GET /healthz/live HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nabc",
    );
    assert_eq!(http_get(k.ops, "/healthz/ready").0, 200);
    assert_eq!(http_get(k.ops, "/metrics").0, 200);
    let answer = read_some(&mut stuck);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the route needs no body: {answer}"
    );
    // An unauthenticated PATCH is refused before its body is read.
    let mut patch = hold(
        k.api,
        b"PATCH /api/v1/settings HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n",
    );
    let refused = read_some(&mut patch);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.contains(r#""code":"unauthorized""#), "{refused}");
    let viewer = k.token("viewer", None);
    let (status, _) = authorized_get(k.api, "/api/v1/settings", &viewer);
    assert_eq!(status, 200);
}

/// GET with a bearer token: (status, body).
fn authorized_get(addr: SocketAddr, path: &str, token: &str) -> (u16, String) {
    let mut stream = hold(
        addr,
        format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn a_client_sending_its_head_a_byte_at_a_time_delays_no_other_client() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let viewer = k.token("viewer", None);
    let head = b"GET /api/v1/settings HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut slow_api = hold(k.api, &head[..1]);
    let mut slow_ops = hold(k.ops, &head[..1]);
    for i in 1..4 {
        std::thread::sleep(Duration::from_millis(300));
        slow_api.write_all(&head[i..=i]).unwrap();
        slow_ops.write_all(&head[i..=i]).unwrap();
        // Each round, while both slow heads are unfinished, other clients are answered.
        assert_eq!(http_get(k.ops, "/healthz/ready").0, 200);
        assert_eq!(authorized_get(k.api, "/api/v1/settings", &viewer).0, 200);
    }
}

#[test]
fn idle_connections_take_no_thread_each_and_the_listeners_keep_serving() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let before = threads(k.pid());
    // Fault (b): tiny_http spawned a thread per connection, without a cap; out of threads,
    // the listener panicked and never listened again.
    let idle: Vec<TcpStream> = (0..150)
        .flat_map(|_| [hold(k.ops, b""), hold(k.api, b"")])
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(http_get(k.ops, "/healthz/ready").0, 200);
    let viewer = k.token("viewer", None);
    assert_eq!(authorized_get(k.api, "/api/v1/settings", &viewer).0, 200);
    let after = threads(k.pid());
    // The API's first requests may start blocking-pool threads (at most 4).
    assert!(
        after <= before + 4,
        "{} idle connections grew the process from {before} to {after} threads",
        idle.len()
    );
    let accepted = k
        .metric("kudurru_http_connections_total{listener=\"ops\",result=\"accepted\"}")
        .unwrap();
    assert!(accepted >= 150.0, "{accepted}");
}

/// (status, body) of `GET path` over HTTPS with curl, trusting `ca`; status 0 when the TLS
/// connection failed.
fn curl_https(addr: SocketAddr, path: &str, ca: &std::path::Path, token: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "5", "-w", "\n%{http_code}", "--cacert"])
        .arg(ca)
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("https://{addr}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.parse().unwrap_or(0), body.to_owned())
}

#[test]
fn the_api_serves_https_and_picks_up_a_replaced_certificate() {
    let upstream = TestUpstream::start();
    let dir = kudurru_e2e::Scratch::new("api-tls");
    let (cert, key) = kudurru_e2e::cert_pair(&dir, "a");
    let (next_cert, next_key) = kudurru_e2e::cert_pair(&dir, "b");
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_API__TLSCERT", cert.to_str().unwrap())
        .env("KUDURRU_API__TLSKEY", key.to_str().unwrap())
        .start();
    let viewer = k.token("viewer", None);
    let (status, body) = curl_https(k.api, "/api/v1/settings", &cert, &viewer);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"values\""), "{body}");
    assert_ne!(
        authorized_get(k.api, "/api/v1/settings", &viewer).0,
        200,
        "no plain HTTP on an HTTPS listener"
    );
    std::fs::copy(&next_key, &key).unwrap();
    std::fs::copy(&next_cert, &cert).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while curl_https(k.api, "/api/v1/settings", &next_cert, &viewer).0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate was not picked up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn half_an_api_certificate_pair_is_a_configuration_error() {
    let upstream = TestUpstream::start();
    let builder = Kudurru::builder(&[upstream.udp_url()]).env("KUDURRU_API__TLSCERT", "/x.pem");
    let out = builder
        .command(kudurru_e2e::free_port(), kudurru_e2e::free_port())
        .output()
        .expect("kudurru runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("api.tlsKey"), "{stderr}");
}
