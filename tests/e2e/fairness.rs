//! Fair client connections (issue 32 item 1): one client prefix cannot hold a core's
//! connections, and PINGs or trickled bytes do not keep a connection that asks nothing.
//! Source addresses 127.0.0.2 and 127.0.0.3 are different clients with
//! `ratelimit.ipv4Prefix = 32`.

use std::io::{BufRead, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kudurru_core::wire::rtype;
use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, dig, python, query_bytes};
use serde_json::{Value, json};

/// A TCP connection to `to` from the loopback address `source`.
fn tcp_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("a TCP socket");
    let source: IpAddr = source.parse().expect("a test address");
    socket
        .bind(&SocketAddr::new(source, 0).into())
        .expect("bind a loopback source");
    socket.connect(&to.into()).expect("connect");
    socket.into()
}

/// Whether the server closed `stream` (a read returns end of stream within `wait`).
fn closed_by_server(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 64];
    matches!(stream.read(&mut buf), Ok(0)) || matches!(stream.read(&mut buf), Ok(0))
}

#[test]
fn tcp_connections_of_one_client_prefix_are_capped_and_other_clients_are_served() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .cores(1)
        .env("KUDURRU_RATELIMIT__IPV4PREFIX", "32")
        .env("KUDURRU_TCP__MAXCONNECTIONSPERCLIENT", "4")
        .start();
    // A slowloris from one address: every connection starts a frame it never finishes.
    let mut held: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut s = tcp_from("127.0.0.2", k.addr);
            let _ = s.write_all(&[0, 40, 1]);
            s
        })
        .collect();
    let closed = held
        .iter_mut()
        .filter_map(|s| closed_by_server(s, Duration::from_millis(300)).then_some(()))
        .count();
    assert_eq!(closed, 36, "all but the client's four were closed at once");
    assert_eq!(k.metric_sum("kudurru_tcp_refused_per_client_total"), 36.0);
    // Another client is served over TCP while the four are held.
    let answer = dig(k.addr, &["-b", "127.0.0.3", "localhost", "A", "+tcp"]);
    assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
    // And a fresh connection of the capped client is refused, not queued.
    let mut more = tcp_from("127.0.0.2", k.addr);
    let _ = more.write_all(&frame(&query_bytes(7, "localhost", rtype::A, 1, None)));
    assert!(closed_by_server(&mut more, Duration::from_secs(2)));
}

fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = (message.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(message);
    out
}

#[test]
fn a_quic_ping_hold_from_one_client_is_capped_and_closed_when_it_asks_nothing() {
    let d = Scratch::new("fairness-quic");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .cores(1)
        .tls(&cert, &key)
        .env("KUDURRU_RATELIMIT__IPV4PREFIX", "32")
        .env("KUDURRU_QUIC__MAXCONNECTIONSPERCLIENT", "3")
        .env("KUDURRU_TCP__IDLETIMEOUT", "2s")
        .start();
    let quic = k.quic.unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("support/quic_client.py");
    let spec = json!({"mode": "hold", "host": "127.0.0.1", "port": quic.port(),
                      "ca": cert.display().to_string(), "source": "127.0.0.2",
                      "connections": 8, "hold": 5, "ping": 0.3, "timeout": 2});
    let mut hold = Command::new(python())
        .arg(&script)
        .arg(spec.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut out = std::io::BufReader::new(hold.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    let started = Instant::now();
    let ready: Value = serde_json::from_str(&ready).expect("a ready line");
    assert_eq!(ready["ready"], 3, "the client's three connections, no more");
    // Another client is served while the three are held.
    let report = crate::quic::client(
        "dnspython-doq",
        quic,
        &cert,
        json!({"source": "127.0.0.3", "requests": [{"name": "localhost", "type": "A"}]}),
    );
    assert_eq!(report["results"][0]["rcode"], "NOERROR", "{report}");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let _ = hold.wait();
    let report: Value = serde_json::from_str(rest.trim()).expect("a hold report");
    assert_eq!(report["refused"], 5, "{report}");
    // PINGs every 0.3 s did not keep them: each was closed after 2 s without a query.
    let closed = report["closed"].as_array().expect("a list");
    assert_eq!(closed.len(), 3, "{report}");
    assert!(closed.iter().all(|reason| reason == "idle"), "{report}");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(k.metric_sum("kudurru_tcp_refused_per_client_total") >= 5.0);
}
