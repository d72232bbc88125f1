//! Encrypted upstreams against real servers from Debian on loopback: Unbound as a DNS-over-TLS
//! server (RFC 7858) and dnsdist as a DNS-over-HTTPS server (RFC 8484, HTTP/2), both with a
//! certificate from a test CA made here, serving `upstream.example` (local data). kudurru
//! forwards to them with `upstream.tls.caFile` = the test CA: answers, one handshake for many
//! queries, session resumption, a wrong CA and a wrong SPKI pin refused (SERVFAIL, counted,
//! logged), the right pin accepted, and reconnection after the upstream restarts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use base64::Engine;
use kudurru_e2e::{Kudurru, Scratch, dig, free_port, wait_listening, wait_timeout};
use sha2::{Digest, Sha256};

/// The name the test servers' certificate carries.
const SERVER_NAME: &str = "dot.example";

/// A test CA and a server certificate it signed for [`SERVER_NAME`] and 127.0.0.1.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// `NAME=sha256/BASE64` of the server key, as `upstream.tls.pins` takes it.
    pin: String,
}

fn make_ca() -> (rcgen::Issuer<'static, rcgen::KeyPair>, String) {
    let key = rcgen::KeyPair::generate().expect("a CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kudurru e2e test CA");
    let cert = params.self_signed(&key).expect("a CA certificate");
    (rcgen::Issuer::new(params, key), cert.pem())
}

fn pki(dir: &Path) -> Pki {
    let (issuer, ca_pem) = make_ca();
    let key = rcgen::KeyPair::generate().expect("a server key");
    let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_owned()]).expect("params");
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
    let cert = params
        .signed_by(&key, &issuer)
        .expect("a server certificate");
    let spki = Sha256::digest(rcgen::PublicKeyData::subject_public_key_info(&key));
    let pki = Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
        pin: format!(
            "{SERVER_NAME}=sha256/{}",
            base64::engine::general_purpose::STANDARD.encode(spki)
        ),
    };
    std::fs::write(&pki.ca, ca_pem).unwrap();
    std::fs::write(&pki.cert, cert.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    pki
}

/// Another CA's certificate, which signed nothing the servers present.
fn stranger_ca(dir: &Path) -> PathBuf {
    let path = dir.join("stranger.pem");
    std::fs::write(&path, make_ca().1).unwrap();
    path
}

/// Unbound on loopback: DNS over TLS on `tls`, plain DNS on `plain`, answering
/// `upstream.example` from local data (no recursion leaves the machine: the zone is static).
struct Unbound {
    process: kudurru_e2e::Unbound,
    tls: SocketAddr,
    plain: SocketAddr,
}

impl Unbound {
    fn start(dir: &Path, pki: &Pki) -> Self {
        let (tls, plain) = (free_port(), free_port());
        let server = format!(
            r#"  interface: 127.0.0.1@{tls}
  interface: 127.0.0.1@{plain}
  tls-port: {tls}
  tls-service-key: "{key}"
  tls-service-pem: "{cert}"
  local-zone: "upstream.example." static
  local-data: "a.upstream.example. 300 IN A 192.0.2.1"
  local-data: "b.upstream.example. 300 IN A 192.0.2.2""#,
            key = pki.key.display(),
            cert = pki.cert.display(),
        );
        let tls: SocketAddr = ([127, 0, 0, 1], tls).into();
        Self {
            process: kudurru_e2e::Unbound::start(dir, tls, &server, ""),
            tls,
            plain: ([127, 0, 0, 1], plain).into(),
        }
    }

    /// Stops it and starts it again on the same ports (new TLS session keys).
    fn restart(&mut self) {
        self.process.restart();
    }

    fn url(&self) -> String {
        format!("tls://{}#{SERVER_NAME}", self.tls)
    }
}

/// dnsdist on loopback: DNS over HTTPS (HTTP/2, `/dns-query`) on `doh`, forwarding to
/// Unbound's plain port. No security polling (it would query off the machine).
struct Dnsdist {
    child: Child,
    doh: SocketAddr,
}

impl Dnsdist {
    fn start(dir: &Path, pki: &Pki, backend: SocketAddr) -> Self {
        let (plain, doh) = (free_port(), free_port());
        let conf = dir.join("dnsdist.conf");
        std::fs::write(
            &conf,
            format!(
                r#"setSecurityPollSuffix("")
setLocal("127.0.0.1:{plain}")
addDOHLocal("127.0.0.1:{doh}", "{cert}", "{key}", "/dns-query")
newServer({{address="{backend}"}}):setUp()
"#,
                cert = pki.cert.display(),
                key = pki.key.display(),
            ),
        )
        .unwrap();
        let mut child = Command::new("dnsdist")
            .args(["--supervised", "--disable-syslog", "-C"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsdist runs (apt-get install dnsdist)");
        let doh = ([127, 0, 0, 1], doh).into();
        wait_listening(doh, &mut child, "dnsdist");
        Self { child, doh }
    }

    fn url(&self) -> String {
        format!("https://{}/dns-query", self.doh)
    }
}

impl Drop for Dnsdist {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_timeout(&mut self.child, Duration::from_secs(10));
    }
}

/// kudurru forwarding to `upstream` with `ca` as `upstream.tls.caFile` (and `pins`), its log
/// in `log`.
fn kudurru(upstream: &str, ca: &Path, pins: Option<&str>, log: &Path) -> Kudurru {
    let mut builder = Kudurru::builder(&[upstream.to_owned()])
        .env("KUDURRU_UPSTREAM__TLS__CAFILE", ca.to_str().unwrap())
        .stderr_to(log);
    if let Some(pins) = pins {
        builder = builder.env("KUDURRU_UPSTREAM__TLS__PINS", pins);
    }
    builder.start()
}

/// The upstream counters of `/metrics`, for an assertion's message.
fn upstream_metrics(k: &Kudurru) -> String {
    let (_, body) = k.ops_get("/metrics");
    body.lines()
        .filter(|l| l.starts_with("kudurru_upstream_") && !l.contains("latency"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts one TLS handshake and one connection (many queries on it).
fn assert_one_handshake(k: &Kudurru) {
    let handshakes = k.metric_sum("kudurru_upstream_tls_handshakes_total");
    let connections = k.metric_sum("kudurru_upstream_tcp_connections_total");
    assert!(
        handshakes == 1.0 && connections == 1.0,
        "{}",
        upstream_metrics(k)
    );
}

fn a_record(k: &Kudurru, name: &str) -> (String, Vec<String>) {
    let answer = dig(k.addr, &[name, "A"]);
    let rdata = answer.answers.iter().map(|a| a.3.clone()).collect();
    (answer.status, rdata)
}

/// Many queries, one connection: one TLS handshake (RFC 7858 §3.4, RFC 7766 §6.2.1), the
/// answers Unbound's local data gives.
#[test]
fn rfc7858_dot_upstream_unbound_answers_over_one_handshake() {
    let dir = Scratch::new("upstream-dot");
    let pki = pki(&dir);
    let unbound = Unbound::start(&dir, &pki);
    let k = kudurru(&unbound.url(), &pki.ca, None, &dir.join("kudurru.log"));
    let (status, answers) = a_record(&k, "a.upstream.example");
    assert_eq!(status, "NOERROR");
    assert!(answers.iter().any(|a| a == "192.0.2.1"), "{answers:?}");
    for i in 0..20 {
        let answer = dig(k.addr, &[&format!("n{i}.upstream.example"), "A"]);
        assert_eq!(answer.status, "NXDOMAIN", "n{i}: Unbound's static zone");
    }
    let (status, answers) = a_record(&k, "b.upstream.example");
    assert_eq!(status, "NOERROR");
    assert!(answers.iter().any(|a| a == "192.0.2.2"), "{answers:?}");
    assert_one_handshake(&k);
    assert_eq!(k.metric_sum("kudurru_upstream_tls_failures_total"), 0.0);
}

/// A connection closed for idleness is opened again with a resumed session (TLS 1.3 ticket);
/// after Unbound restarts (the connection ends) the next query reconnects and is answered.
#[test]
fn dot_upstream_resumes_and_reconnects_after_the_upstream_restarts() {
    let dir = Scratch::new("upstream-dot-restart");
    let pki = pki(&dir);
    let mut unbound = Unbound::start(&dir, &pki);
    let k = Kudurru::builder(&[unbound.url()])
        .env("KUDURRU_UPSTREAM__TLS__CAFILE", pki.ca.to_str().unwrap())
        .env("KUDURRU_UPSTREAM__IDLETIMEOUT", "1s")
        .stderr_to(&dir.join("kudurru.log"))
        .start();
    assert_eq!(a_record(&k, "a.upstream.example").0, "NOERROR");
    // Past the idle timeout the connection is closed; the next miss opens another and
    // resumes the session Unbound's ticket gave.
    thread::sleep(Duration::from_millis(2500));
    assert_eq!(a_record(&k, "b.upstream.example").0, "NOERROR");
    assert!(
        k.metric_sum("kudurru_upstream_tls_handshakes_total") >= 2.0
            && k.metric_sum("kudurru_upstream_tls_resumed_total") >= 1.0,
        "a second connection, resumed: {}",
        upstream_metrics(&k)
    );
    unbound.restart();
    let answer = dig(k.addr, &["n1.upstream.example", "A"]);
    assert_eq!(answer.status, "NXDOMAIN", "answered after the restart");
    assert!(k.metric_sum("kudurru_upstream_tls_handshakes_total") >= 3.0);
}

/// A server whose certificate the configured CA did not sign is refused: SERVFAIL, the
/// failure counted and logged naming the upstream.
#[test]
fn dot_upstream_with_a_certificate_of_another_ca_is_refused() {
    let dir = Scratch::new("upstream-dot-wrong-ca");
    let pki = pki(&dir);
    let unbound = Unbound::start(&dir, &pki);
    let log = dir.join("kudurru.log");
    let k = kudurru(&unbound.url(), &stranger_ca(&dir), None, &log);
    assert_eq!(a_record(&k, "a.upstream.example").0, "SERVFAIL");
    assert!(k.metric_sum("kudurru_upstream_tls_failures_total") >= 1.0);
    assert_eq!(k.metric_sum("kudurru_upstream_tls_handshakes_total"), 0.0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("refused its certificate") && text.contains(&unbound.url()),
        "{text}"
    );
}

/// RFC 7858 §4.2: a pinned name must present a key among its pins (after verification); the
/// wrong pin is refused with an error naming the server, the right one works.
#[test]
fn rfc7858_4_2_dot_upstream_spki_pins() {
    let dir = Scratch::new("upstream-dot-pins");
    let pki = pki(&dir);
    let unbound = Unbound::start(&dir, &pki);
    let wrong = format!(
        "{SERVER_NAME}=sha256/{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    );
    let log = dir.join("wrong.log");
    let k = kudurru(&unbound.url(), &pki.ca, Some(&wrong), &log);
    assert_eq!(a_record(&k, "a.upstream.example").0, "SERVFAIL");
    assert!(k.metric_sum("kudurru_upstream_tls_failures_total") >= 1.0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("SPKI pin mismatch for {SERVER_NAME}")),
        "{text}"
    );
    drop(k);
    let k = kudurru(
        &unbound.url(),
        &pki.ca,
        Some(&pki.pin),
        &dir.join("right.log"),
    );
    let (status, answers) = a_record(&k, "a.upstream.example");
    assert_eq!(status, "NOERROR");
    assert!(answers.iter().any(|a| a == "192.0.2.1"), "{answers:?}");
    assert_eq!(k.metric_sum("kudurru_upstream_tls_failures_total"), 0.0);
}

/// RFC 8484 on HTTP/2 against dnsdist: answers come back over one connection (one handshake)
/// with queries on concurrent streams; a certificate of another CA is refused.
#[test]
fn rfc8484_doh_upstream_dnsdist_answers_over_one_connection() {
    let dir = Scratch::new("upstream-doh");
    let pki = pki(&dir);
    let unbound = Unbound::start(&dir, &pki);
    let dnsdist = Dnsdist::start(&dir, &pki, unbound.plain);
    let k = kudurru(&dnsdist.url(), &pki.ca, None, &dir.join("kudurru.log"));
    let (status, answers) = a_record(&k, "a.upstream.example");
    assert_eq!(status, "NOERROR");
    assert!(answers.iter().any(|a| a == "192.0.2.1"), "{answers:?}");
    // Concurrent misses: streams side by side on the one connection.
    let names: Vec<String> = (0..16).map(|i| format!("c{i}.upstream.example")).collect();
    thread::scope(|scope| {
        for name in &names {
            let addr = k.addr;
            scope.spawn(move || {
                assert_eq!(dig(addr, &[name, "A"]).status, "NXDOMAIN", "{name}");
            });
        }
    });
    assert_eq!(a_record(&k, "b.upstream.example").0, "NOERROR");
    assert_one_handshake(&k);
    drop(k);
    let log = dir.join("stranger.log");
    let k = kudurru(&dnsdist.url(), &stranger_ca(&dir), None, &log);
    assert_eq!(a_record(&k, "a.upstream.example").0, "SERVFAIL");
    assert!(k.metric_sum("kudurru_upstream_tls_failures_total") >= 1.0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("refused its certificate"), "{text}");
}

/// A CA file whose certificate does not parse is a configuration error (exit 1, naming the
/// key), not a failure at the first encrypted query.
#[test]
fn an_unparsable_upstream_ca_file_is_a_configuration_error() {
    let dir = Scratch::new("upstream-bad-ca");
    let ca = dir.join("broken.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let out = Kudurru::builder(&[format!("tls://127.0.0.1:{}#{SERVER_NAME}", free_port())])
        .env("KUDURRU_UPSTREAM__TLS__CAFILE", ca.to_str().unwrap())
        .command(free_port(), free_port())
        .output()
        .expect("kudurru runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("upstream.tls.caFile") && stderr.contains("certificate 1"),
        "{stderr}"
    );
}
