//! Draining on SIGTERM: queries in flight on every transport (UDP, TCP, DoT, DoH over HTTP/2
//! and HTTP/1.1, DoQ, DoH3) are answered, then each connection is closed the way its protocol
//! says (EOF; GOAWAY with the last stream id; `Connection: close`; CONNECTION_CLOSE with
//! DOQ_NO_ERROR / H3_NO_ERROR after an HTTP/3 GOAWAY); and what is still in flight when
//! `server.shutdownGrace` runs out is cut, counted and logged. The upstream is the scripted test
//! upstream's `slow2s-` / `slow5s-` names, so the queries are still being resolved when the
//! signal arrives. The clients are tests/support/drain_client.py (h2, aioquic) and raw sockets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kudurru_e2e::{
    Kudurru, Scratch, TestUpstream, cert_pair, hex, python, query_bytes, unhex, unique_name,
};
use serde_json::{Value, json};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("support/drain_client.py")
}

/// (ID, rcode, answer count) of a DNS message given as hex.
fn summary(answer: &Value) -> (u16, u8, u16) {
    let message = unhex(
        answer
            .as_str()
            .unwrap_or_else(|| panic!("not hex: {answer}")),
    );
    assert!(message.len() >= 12, "a DNS message: {answer}");
    (
        u16::from_be_bytes([message[0], message[1]]),
        message[3] & 0x0f,
        u16::from_be_bytes([message[6], message[7]]),
    )
}

/// `count` queries for fresh `slow2s-` names (answered by the test upstream after 2 s), with
/// IDs from `first_id` (DoQ and DoH want 0).
fn slow_queries(label: &str, count: u16, first_id: Option<u16>) -> Vec<String> {
    (0..count)
        .map(|i| {
            let id = first_id.map_or(0, |first| first + i);
            hex(&query_bytes(
                id,
                &unique_name(&format!("slow2s-{label}-")),
                1,
                1,
                None,
            ))
        })
        .collect()
}

#[test]
fn every_transport_answers_its_queries_in_flight_at_sigterm_then_closes() {
    let upstream = TestUpstream::start();
    let d = Scratch::new("drain-all");
    let (cert, key) = cert_pair(&d, "a");
    let log = d.join("kudurru.log");
    // Two cores: connections land on either, misses go to the owner core, and a core that
    // drained first keeps answering its peer's lookups.
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .cores(2)
        .tls(&cert, &key)
        .stderr_to(&log)
        .env("KUDURRU_UPSTREAM__TIMEOUT", "5s")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "10s")
        .env("KUDURRU_SERVER__SHUTDOWNGRACE", "15s")
        .env("KUDURRU_SHUTDOWN__DRAINDELAY", "200ms")
        .start();
    let spec = json!({
        "host": "127.0.0.1",
        "ca": cert.display().to_string(),
        "timeout": 15,
        "ports": {
            "udp": k.addr.port(), "tcp": k.addr.port(), "dot": k.tls.unwrap().port(),
            "doh": k.https.unwrap().port(), "doq": k.quic.unwrap().port(),
            "h3": k.h3.unwrap().port(),
        },
        "queries": {
            "udp": slow_queries("udp", 3, Some(100)),
            "tcp": slow_queries("tcp", 3, Some(200)),
            "dot": slow_queries("dot", 3, Some(300)),
            "h2": slow_queries("h2", 3, None),
            "http1": slow_queries("h1", 1, None),
            "doq": slow_queries("doq", 3, None),
            "h3": slow_queries("h3", 3, None),
        },
    });
    let mut client = Command::new(python())
        .arg(script())
        .arg(spec.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let sent: Value = serde_json::from_str(&lines.next().expect("a first line").unwrap()).unwrap();
    assert_eq!(sent["ready"], 12, "every client connected and sent: {sent}");
    // Every query is with the upstream (2 s) when the signal arrives.
    let status = k.terminate();
    assert!(status.success(), "{status}");
    let report: Value =
        serde_json::from_str(&lines.next().expect("a report").unwrap()).expect("a JSON report");
    assert!(client.wait().unwrap().success());

    let answered = |transport: &str, count: usize| {
        let answers = report[transport]["answers"]
            .as_array()
            .unwrap_or_else(|| panic!("{transport}: {}", report[transport]));
        assert_eq!(
            answers.len(),
            count,
            "{transport}: every answer: {}",
            report[transport]
        );
        for answer in answers {
            let (_, rcode, ancount) = summary(answer);
            assert_eq!(
                (rcode, ancount),
                (0, 1),
                "{transport}: NOERROR with the A record"
            );
        }
    };
    for transport in ["udp", "tcp", "dot", "h2", "doq", "h3"] {
        answered(transport, 3);
    }
    answered("http1", 1);
    // TCP and DoT: every answer, then the server closes.
    for transport in ["tcp", "dot"] {
        assert_eq!(
            report[transport]["eof"], true,
            "{transport}: {}",
            report[transport]
        );
    }
    // HTTP/2: GOAWAY (NO_ERROR) naming the last stream the server processed, then the close.
    let h2 = &report["h2"];
    let last = h2["streams"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        h2["goaway"],
        json!({"last_stream": last, "code": 0}),
        "{h2}"
    );
    assert_eq!(h2["eof"], true, "{h2}");
    // HTTP/1.1: the last response says so.
    assert_eq!(
        report["http1"]["connection"], "close",
        "{}",
        report["http1"]
    );
    assert_eq!(report["http1"]["eof"], true);
    // DoQ: CONNECTION_CLOSE with DOQ_NO_ERROR once every stream is answered.
    assert_eq!(
        report["doq"]["terminated"],
        json!({"code": 0, "reason": "shutting down"}),
        "{}",
        report["doq"]
    );
    // DoH3: GOAWAY naming the first request stream not processed (three requests: 0, 4, 8),
    // then CONNECTION_CLOSE with H3_NO_ERROR (0x100).
    assert_eq!(report["h3"]["goaway"], 12, "{}", report["h3"]);
    assert_eq!(
        report["h3"]["terminated"]["code"], 0x100,
        "{}",
        report["h3"]
    );
}

#[test]
fn what_is_in_flight_when_the_grace_runs_out_is_cut_and_logged() {
    let upstream = TestUpstream::start();
    let d = Scratch::new("drain-grace");
    let log = d.join("kudurru.log");
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_UPSTREAM__TIMEOUT", "10s")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "20s")
        .env("KUDURRU_SERVER__SHUTDOWNGRACE", "1s")
        .stderr_to(&log)
        .start();
    // A query the upstream answers after 5 s, far past the 1 s grace.
    let mut tcp = TcpStream::connect(k.addr).unwrap();
    let query = query_bytes(7, &unique_name("slow5s-grace-"), 1, 1, None);
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&query);
    tcp.write_all(&framed).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.metric_sum("kudurru_dns_queries_total") < 1.0 {
        assert!(Instant::now() < deadline, "the query never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    let signalled = Instant::now();
    assert!(k.terminate().success());
    let took = signalled.elapsed();
    // The grace (1 s), then the cut; the upstream's answer (5 s) was not waited for.
    assert!(
        took < Duration::from_secs(4),
        "exited {took:?} after SIGTERM, not within the grace"
    );
    // The connection was cut: closed without an answer.
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no answer after the cut: {rest:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("connections cut at grace"))
        .unwrap_or_else(|| panic!("no cut logged: {text}"));
    assert!(line.contains("connections_cut=1"), "{line}");
    assert!(line.contains("queries_abandoned=1"), "{line}");
}
