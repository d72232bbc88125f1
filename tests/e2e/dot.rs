//! DNS over TLS (RFC 7858) against the real binary: kdig `+tls` with certificate verification,
//! Python's `ssl` for what a test must see on the wire (ALPN, TLS version, the certificate
//! served, padding, pipelining, the connection closing), certificate reload, a stalled
//! handshake and a drop.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, free_port, kudurru_bin, query_bytes};
use serde_json::Value;

/// Connects with Python's ssl module (ALPN `dot`), sends every query in one write (pipelined),
/// reads answers until the server closes or 3 s pass, and reports what it saw.
const CLIENT: &str = r#"
import hashlib, json, socket, ssl, struct, sys
host, port, ca, verify = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "verify"
ctx = ssl.create_default_context(cafile=ca) if verify else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
if not verify:
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
ctx.set_alpn_protocols(["dot"])
t = ctx.wrap_socket(socket.create_connection((host, port), timeout=5), server_hostname="localhost")
out = {"alpn": t.selected_alpn_protocol(), "version": t.version(),
       "cert": hashlib.sha256(t.getpeercert(True)).hexdigest(), "answers": [], "closed": False}
t.sendall(b"".join(struct.pack(">H", len(q)) + q for q in map(bytes.fromhex, sys.argv[5:])))
t.settimeout(3)
buf = b""
try:
    while True:
        chunk = t.recv(65535)
        if not chunk:
            out["closed"] = True
            break
        buf += chunk
        while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
            n = struct.unpack(">H", buf[:2])[0]
            msg, buf = buf[2:2 + n], buf[2 + n:]
            out["answers"].append({"id": struct.unpack(">H", msg[:2])[0], "len": n, "rcode": msg[3] & 15})
except socket.timeout:
    pass
except (ConnectionResetError, ssl.SSLError):
    out["closed"] = True
print(json.dumps(out))
"#;

fn tls_client(addr: SocketAddr, ca: &Path, verify: bool, queries: &[Vec<u8>]) -> Value {
    let hex: Vec<String> = queries
        .iter()
        .map(|q| q.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    let output = Command::new("python3")
        .arg("-c")
        .arg(CLIENT)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(ca)
        .arg(if verify { "verify" } else { "noverify" })
        .args(&hex)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "tls client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// SHA-256 of a PEM certificate's DER, as the client reports it.
fn fingerprint(cert: &Path) -> String {
    let output = Command::new("python3")
        .args([
            "-c",
            "import hashlib, ssl, sys; print(hashlib.sha256(ssl.PEM_cert_to_DER_cert(open(sys.argv[1]).read())).hexdigest())",
        ])
        .arg(cert)
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn kdig_tls(addr: SocketAddr, ca: &Path, extra: &[&str]) -> String {
    let output = Command::new("kdig")
        .arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .arg(format!("+tls-ca={}", ca.display()))
        .arg("+tls-hostname=localhost")
        .args(["+time=5", "+retry=0"])
        .args(extra)
        .output()
        .expect("kdig runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("dot-{name}"))
}

/// `localhost. A` with the EDNS padding option (RFC 7830) when `padding`.
fn localhost_query(id: u16, padding: bool) -> Vec<u8> {
    let mut q = query_bytes(id, "localhost.", 1, 1, Some((1232, 0, false)));
    if padding {
        q.extend_from_slice(&[0, 12, 0, 0]);
        let rdlen_at = q.len() - 6;
        q[rdlen_at..rdlen_at + 2].copy_from_slice(&4u16.to_be_bytes());
    }
    q
}

#[test]
fn rfc7858_kdig_over_tls_verifies_the_generated_certificate() {
    let d = dir("kdig");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    let tls = k.tls.unwrap();
    let out = kdig_tls(tls, &cert, &["localhost", "A"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(out.contains("TLS1.3"), "{out}");
    assert!(out.contains("127.0.0.1"), "{out}");
    // Forwarded names resolve over DoT as over UDP.
    let name = kudurru_e2e::unique_name("dot-");
    let out = kdig_tls(tls, &cert, &[&name, "A"]);
    assert!(out.contains("192.0.2.1"), "{out}");
    let seen = tls_client(tls, &cert, true, &[localhost_query(7, false)]);
    assert_eq!(seen["alpn"], "dot", "ALPN dot (RFC 7858 §3.2)");
    assert_eq!(seen["cert"], fingerprint(&cert));
    assert_eq!(seen["answers"][0]["id"], 7);
    assert_eq!(
        k.metric("kudurru_dns_queries_total{transport=\"dot\",core=\"0\"}"),
        Some(3.0)
    );
    assert_eq!(
        k.metric("kudurru_dns_queries_total{transport=\"tcp\",core=\"0\"}"),
        Some(0.0)
    );
    assert!(k.metric("kudurru_tls_handshakes_total") >= Some(3.0));
}

#[test]
fn rfc8467_dot_responses_are_padded_to_468_bytes_when_asked() {
    let d = dir("padding");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let seen = tls_client(
        k.tls.unwrap(),
        &cert,
        true,
        &[localhost_query(1, true), localhost_query(2, false)],
    );
    let answers = seen["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 2, "{seen}");
    let len = |id: u64| {
        answers.iter().find(|a| a["id"] == id).unwrap()["len"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(len(1), 468, "padded to one 468-byte block");
    assert!(len(2) < 100, "no padding unasked: {}", len(2));
    // Plain TCP never pads, even when asked.
    let mut tcp = TcpStream::connect(k.addr).unwrap();
    let q = localhost_query(3, true);
    let mut frame = (q.len() as u16).to_be_bytes().to_vec();
    frame.extend_from_slice(&q);
    std::io::Write::write_all(&mut tcp, &frame).unwrap();
    let mut head = [0u8; 2];
    tcp.read_exact(&mut head).unwrap();
    assert!(u16::from_be_bytes(head) < 100);
}

#[test]
fn rfc7766_pipelined_queries_over_dot_are_all_answered() {
    let d = dir("pipeline");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let queries: Vec<Vec<u8>> = (10..20).map(|id| localhost_query(id, false)).collect();
    let seen = tls_client(k.tls.unwrap(), &cert, true, &queries);
    let mut ids: Vec<u64> = seen["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (10..20).collect::<Vec<u64>>(), "{seen}");
    assert_eq!(seen["closed"], false, "the connection stays open");
}

/// Sends 200,000 `localhost` queries on one DoT connection from a thread while reading
/// nothing, waits for kudurru's query count (from `/metrics`) to stand still, then reads every
/// answer; reports the count it stood at and whether the answers came whole and in order.
const STALLED_CLIENT: &str = r#"
import json, socket, ssl, struct, sys, threading, time, urllib.request
host, port, metrics, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], 200000
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
ctx.set_alpn_protocols(["dot"])
t = ctx.wrap_socket(socket.create_connection((host, port), timeout=30), server_hostname="localhost")
name = b"\x09localhost\x00"
def query(i):
    m = struct.pack(">HHHHHH", i & 0xFFFF, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
    return struct.pack(">H", len(m)) + m
sender = threading.Thread(target=t.sendall, args=(b"".join(query(i) for i in range(n)),))
sender.start()
def count():
    body = urllib.request.urlopen(metrics, timeout=5).read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
               if l.startswith("kudurru_dns_queries_total{"))
settled, last = None, count()
for _ in range(66):
    time.sleep(0.3)
    now = count()
    if now == last:
        settled = now
        break
    last = now
got, buf, in_order = 0, b"", True
while got < n:
    chunk = t.recv(65536)
    if not chunk:
        break
    buf += chunk
    while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
        size = struct.unpack(">H", buf[:2])[0]
        msg, buf = buf[2:2 + size], buf[2 + size:]
        in_order &= struct.unpack(">H", msg[:2])[0] == got & 0xFFFF and msg[3] & 15 == 0
        got += 1
sender.join()
print(json.dumps({"settled": settled, "answers": got, "in_order": in_order}))
"#;

#[test]
fn rfc7766_a_dot_client_that_does_not_read_stalls_only_itself() {
    let d = dir("stall");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_TCP__IDLETIMEOUT", "30s")
        .start();
    let tls = k.tls.unwrap();
    let metrics = format!("http://{}/metrics", k.ops);
    let client = std::thread::spawn(move || {
        Command::new("python3")
            .arg("-c")
            .arg(STALLED_CLIENT)
            .arg(tls.ip().to_string())
            .arg(tls.port().to_string())
            .arg(metrics)
            .output()
            .expect("python3 runs")
    });
    // While that client reads nothing, another one on the same core is answered.
    std::thread::sleep(Duration::from_millis(1500));
    let queries = vec![localhost_query(7, false)];
    let seen = tls_client(tls, &cert, false, &queries);
    assert_eq!(seen["answers"][0]["id"], 7, "{seen}");
    let output = client.join().unwrap();
    assert!(
        output.status.success(),
        "stalled client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let settled = report["settled"].as_f64().expect("the query count settled");
    // kudurru stopped reading while its answers waited on the full socket.
    assert!(settled < 200_000.0, "{report}");
    assert_eq!(report["answers"], 200_000, "{report}");
    assert_eq!(report["in_order"], true, "{report}");
}

#[test]
fn dot_certificate_reloads_and_a_bad_file_keeps_the_old_one() {
    let d = dir("reload");
    let (cert, key) = cert_pair(&d, "a");
    let (next_cert, next_key) = cert_pair(&d, "b");
    let log = d.join("kudurru.log");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .stderr_to(&log)
        .start();
    let tls = k.tls.unwrap();
    let served = || {
        tls_client(tls, &cert, false, &[])["cert"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(served(), fingerprint(&cert));
    let wanted = fingerprint(&next_cert);
    // Replace the pair in place, key first (between the two writes the pair does not match
    // and is refused; the second write completes it).
    std::fs::copy(&next_key, &key).unwrap();
    std::fs::copy(&next_cert, &cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while served() != wanted {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not picked up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A broken certificate file: logged, and the pair in use stays.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("TLS certificate not reloaded")
    {
        assert!(Instant::now() < deadline, "the bad file was not reported");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(served(), wanted, "the last good certificate keeps serving");
    let out = kdig_tls(tls, &next_cert, &["localhost", "A"]);
    assert!(out.contains("status: NOERROR"), "{out}");
}

#[test]
fn a_client_stalled_in_the_tls_handshake_does_not_hold_up_others() {
    let d = dir("stall");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_TLS__HANDSHAKETIMEOUT", "1s")
        .start();
    let tls = k.tls.unwrap();
    // Connects, sends half a ClientHello record header, then nothing.
    let mut stalled = TcpStream::connect(tls).unwrap();
    std::io::Write::write_all(&mut stalled, &[0x16, 0x03]).unwrap();
    let started = Instant::now();
    let out = kdig_tls(tls, &cert, &["localhost", "A"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered while the other stalls"
    );
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    let n = stalled.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed after tls.handshakeTimeout");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(k.metric("kudurru_tls_handshake_failures_total") >= Some(1.0));
}

#[test]
fn a_drop_on_dot_closes_the_connection_and_sends_nothing() {
    let d = dir("drop");
    let (cert, key) = cert_pair(&d, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_RATELIMIT__QPS", "1")
        .env("KUDURRU_RATELIMIT__BURST", "1")
        .start();
    let queries: Vec<Vec<u8>> = (1..=3).map(|id| localhost_query(id, false)).collect();
    let seen = tls_client(k.tls.unwrap(), &cert, true, &queries);
    assert_eq!(seen["answers"].as_array().unwrap().len(), 1, "{seen}");
    assert_eq!(seen["closed"], true, "{seen}");
    assert!(k.metric("kudurru_dns_responses_total{rcode=\"none\"}") >= Some(1.0));
}

#[test]
fn tls_listener_errors_are_specific() {
    let d = dir("errors");
    std::fs::create_dir_all(&d).unwrap();
    let serve = |extra: &[&str]| {
        let output = Command::new(kudurru_bin())
            .args(["serve", "--cores", "1", "--api-address", ""])
            .arg("--ops-address")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--listen")
            .arg(format!("tls://127.0.0.1:{}", free_port()))
            .args(extra)
            .env_remove("KUDURRU_SETTINGS_FILE")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, err) = serve(&[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("tls.certFile") && err.contains("kudurru cert generate"),
        "{err}"
    );
    let bad = d.join("bad.crt");
    std::fs::write(&bad, "nothing here\n").unwrap();
    let (_, key) = cert_pair(&d, "a");
    let (code, err) = serve(&[
        "--tls-cert",
        bad.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("bad.crt: no CERTIFICATE block"), "{err}");
}

#[test]
fn a_flood_of_tls_openings_that_make_rustls_warn_logs_at_most_a_burst() {
    // Each connection opens with a ChangeCipherSpec record: rustls logs a warning for every
    // one. 300 of them must not make 300 log lines (issue: per-peer warnings flood the log).
    let d = dir("ccs-flood");
    let (cert, key) = cert_pair(&d, "a");
    let log = d.join("kudurru.log");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .stderr_to(&log)
        .start();
    let tls = k.tls.unwrap();
    for _ in 0..300 {
        let mut s = TcpStream::connect(tls).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = std::io::Write::write_all(&mut s, &[0x14, 0x03, 0x03, 0x00, 0x01, 0x01]);
        let _ = Read::read(&mut s, &mut [0u8; 64]);
    }
    let out = kdig_tls(tls, &cert, &["localhost", "A"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text.matches("Received a ChangeCipherSpec").count();
    assert!(
        (1..=kudurru_control::noise::BURST as usize).contains(&lines),
        "{lines} rustls warnings for 300 connections"
    );
}
