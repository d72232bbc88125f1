//! DoQ (`quic://`) and DoH3 (`h3://`) upstreams, with kudurru itself as the upstream server: a
//! second kudurru on loopback serving DoQ and HTTP/3 with a self-signed certificate and
//! forwarding to the scripted test upstream. Answers over both, many queries on one
//! handshake, the peer's stream limit, a wrong CA and a pin mismatch refused with a clear
//! error, and a reconnect after the upstream restarts on the same port.

use std::path::{Path, PathBuf};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, dig, free_port, unique_name};

/// The server side: kudurru serving DoQ on `quic_port` and DoH3 on `h3_port` with `cert`,
/// forwarding to `upstream`.
fn upstream_server(
    upstream: &TestUpstream,
    (cert, key): (&Path, &Path),
    (quic_port, h3_port): (u16, u16),
    env: &[(&str, &str)],
) -> Kudurru {
    let mut builder = Kudurru::builder(&[upstream.udp_url()])
        .arg("--listen")
        .arg(&format!("quic://127.0.0.1:{quic_port}"))
        .arg("--listen")
        .arg(&format!("https://127.0.0.1:{h3_port}/dns-query"))
        .arg("--listen")
        .arg(&format!("h3://127.0.0.1:{h3_port}/dns-query"))
        .arg("--tls-cert")
        .arg(cert.to_str().unwrap())
        .arg("--tls-key")
        .arg(key.to_str().unwrap());
    for (var, value) in env {
        builder = builder.env(var, value);
    }
    builder.start()
}

/// The client side: kudurru forwarding to `url`, trusting `ca` (and the settings file `file`,
/// when given), logging to `log`.
fn front(url: &str, ca: &Path, file: Option<&Path>, log: &Path) -> Kudurru {
    let mut builder = Kudurru::builder(&[url.to_owned()])
        .env("KUDURRU_UPSTREAM__TLS__CAFILE", ca.to_str().unwrap())
        // Generous: a loaded machine must not turn a slow answer into a retired connection
        // (and so a second handshake).
        .env("KUDURRU_UPSTREAM__TIMEOUT", "3s")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "8s")
        .stderr_to(log);
    if let Some(file) = file {
        builder = builder.env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap());
    }
    builder.start()
}

fn ports() -> (u16, u16) {
    (free_port(), free_port())
}

/// Asks `front` for `name` (A) and checks the test upstream's answer came back.
fn answered(front: &Kudurru, name: &str) {
    let answer = dig(front.addr, &[name, "A"]);
    assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
    assert!(
        answer
            .answers
            .iter()
            .any(|(_, _, _, data)| data == "192.0.2.1"),
        "{}",
        answer.raw
    );
}

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Many queries over DoQ and over DoH3, each on one connection (one handshake), every answer
/// the upstream's; the server counts them on its DoQ and DoH3 transports.
#[test]
fn doq_and_doh3_upstreams_answer_many_queries_over_one_handshake_each() {
    let d = Scratch::new("upstream-quic-basic");
    let (cert, key) = cert_pair(&d, "server");
    let upstream = TestUpstream::start();
    let (quic_port, h3_port) = ports();
    let server = upstream_server(&upstream, (&cert, &key), (quic_port, h3_port), &[]);
    let urls = [
        ("doq", format!("quic://127.0.0.1:{quic_port}")),
        ("doh3", format!("h3://127.0.0.1:{h3_port}/dns-query")),
    ];
    for (transport, url) in &urls {
        let log = d.join(format!("{transport}.log"));
        let client = front(url, &cert, None, &log);
        let names: Vec<String> = (0..20)
            .map(|_| unique_name(&format!("{transport}-")))
            .collect();
        for name in &names {
            answered(&client, name);
        }
        // A burst at once: every query on the same connection, a stream each.
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let client = &client;
                scope.spawn(move || answered(client, &unique_name(&format!("{transport}-burst-"))));
            }
        });
        for name in &names {
            assert_eq!(upstream.total(name), 1, "{name}");
        }
        assert_eq!(
            client.metric_sum("kudurru_upstream_tls_handshakes_total"),
            1.0,
            "{transport}: one handshake for 28 queries; log: {}",
            log_text(&log)
        );
        assert_eq!(
            client.metric_sum("kudurru_upstream_quic_connections_total"),
            1.0,
            "{transport}: log: {}",
            log_text(&log)
        );
        assert_eq!(
            client.metric_sum("kudurru_upstream_tls_failures_total"),
            0.0
        );
        assert_eq!(
            server.metric(&format!(
                "kudurru_dns_queries_total{{transport=\"{transport}\",core=\"0\"}}"
            )),
            Some(28.0),
            "{transport}: every query reached the server over its transport"
        );
    }
}

/// The server allows two streams at once (`tcp.maxPipelined`); a burst of sixteen queries
/// waits for stream credit instead of failing, all on one connection.
#[test]
fn queries_past_the_peers_stream_limit_wait_for_credit() {
    let d = Scratch::new("upstream-quic-streams");
    let (cert, key) = cert_pair(&d, "server");
    let upstream = TestUpstream::start();
    let (quic_port, h3_port) = ports();
    let _server = upstream_server(
        &upstream,
        (&cert, &key),
        (quic_port, h3_port),
        &[("KUDURRU_TCP__MAXPIPELINED", "2")],
    );
    let log = d.join("front.log");
    let client = front(&format!("quic://127.0.0.1:{quic_port}"), &cert, None, &log);
    std::thread::scope(|scope| {
        for _ in 0..16 {
            let client = &client;
            scope.spawn(move || answered(client, &unique_name("streams-")));
        }
    });
    assert_eq!(
        client.metric_sum("kudurru_upstream_tls_handshakes_total"),
        1.0,
        "{}",
        log_text(&log)
    );
    assert_eq!(client.metric_sum("kudurru_upstream_errors_total"), 0.0);
}

/// A certificate from another CA, and a key that does not match the pin, fail the handshake:
/// SERVFAIL for the client, a log line saying why, counted as handshake failures.
#[test]
fn a_wrong_ca_or_a_pin_mismatch_is_refused_with_a_clear_error() {
    let d = Scratch::new("upstream-quic-refused");
    let (cert, key) = cert_pair(&d, "server");
    let (other, _) = cert_pair(&d, "other");
    let upstream = TestUpstream::start();
    let (quic_port, h3_port) = ports();
    let _server = upstream_server(&upstream, (&cert, &key), (quic_port, h3_port), &[]);

    let wrong_ca = d.join("wrong-ca.log");
    let client = front(
        &format!("h3://127.0.0.1:{h3_port}/dns-query"),
        &other,
        None,
        &wrong_ca,
    );
    let name = unique_name("wrong-ca-");
    assert_eq!(dig(client.addr, &[&name, "A"]).status, "SERVFAIL");
    assert_eq!(upstream.total(&name), 0);
    assert!(client.metric_sum("kudurru_upstream_tls_failures_total") >= 1.0);
    assert_eq!(
        client.metric_sum("kudurru_upstream_tls_handshakes_total"),
        0.0
    );
    let text = log_text(&wrong_ca);
    // Both certificates are self-signed with the same subject: webpki takes the trusted one
    // as the issuer and the signature fails (BadSignature), as a foreign CA's would.
    assert!(
        text.contains("QUIC handshake") && text.contains("invalid peer certificate"),
        "{text}"
    );

    // The right CA, but a pin for the name the URL gives that the key does not match.
    let file: PathBuf = d.join("pins.toml");
    std::fs::write(
        &file,
        format!(
            "[upstream.tls]\npins = [\"localhost=sha256/{}\"]\n",
            "A".repeat(43) + "="
        ),
    )
    .unwrap();
    let pinned = d.join("pinned.log");
    let client = front(
        &format!("quic://127.0.0.1:{quic_port}#localhost"),
        &cert,
        Some(&file),
        &pinned,
    );
    let name = unique_name("pinned-");
    assert_eq!(dig(client.addr, &[&name, "A"]).status, "SERVFAIL");
    assert_eq!(upstream.total(&name), 0);
    assert!(client.metric_sum("kudurru_upstream_tls_failures_total") >= 1.0);
    let text = log_text(&pinned);
    assert!(
        text.contains("SPKI pin mismatch") && text.contains("server=localhost"),
        "{text}"
    );
}

/// The upstream is killed (no CONNECTION_CLOSE) and started again on the same port: the next
/// query finds the old connection dead (a stateless reset or a timeout retires it) and
/// reconnects; nothing is left broken.
#[test]
fn doq_and_doh3_upstreams_reconnect_after_the_upstream_restarts() {
    let d = Scratch::new("upstream-quic-restart");
    let (cert, key) = cert_pair(&d, "server");
    let upstream = TestUpstream::start();
    let (quic_port, h3_port) = ports();
    let mut server = upstream_server(&upstream, (&cert, &key), (quic_port, h3_port), &[]);
    let doq_log = d.join("doq.log");
    let doq = front(
        &format!("quic://127.0.0.1:{quic_port}"),
        &cert,
        None,
        &doq_log,
    );
    let h3_log = d.join("h3.log");
    let h3 = front(
        &format!("h3://127.0.0.1:{h3_port}/dns-query"),
        &cert,
        None,
        &h3_log,
    );
    for client in [&doq, &h3] {
        answered(client, &unique_name("before-"));
    }
    server.kill();
    let _server = upstream_server(&upstream, (&cert, &key), (quic_port, h3_port), &[]);
    for (client, log) in [(&doq, &doq_log), (&h3, &h3_log)] {
        answered(client, &unique_name("after-"));
        answered(client, &unique_name("after-"));
        assert_eq!(
            client.metric_sum("kudurru_upstream_tls_handshakes_total"),
            2.0,
            "one handshake before the restart, one after: {}",
            log_text(log)
        );
    }
}
