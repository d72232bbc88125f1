//! Client access control (`server.allow`, `server.deny`, `server.aclAction`) against the real
//! binary: one client refused and another served on every transport (UDP, TCP, DoT, DoH over
//! HTTP/2 and HTTP/1.1, DoQ, DoH3), each from its own loopback address, then a hot change of
//! the settings file that swaps them and drops instead of refusing; and doctor's warning for
//! an open resolver.
//!
//! Every client here is on loopback, which the default list serves: the tests narrow
//! `server.allow` to one address and send from 127.0.0.1 or 127.0.0.2 (dig and kdig `-b`,
//! curl `--interface`, dnspython's `source`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use kudurru_core::wire;
use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, query_bytes, unique_name};
use serde_json::{Value, json};

/// The rcode text each transport's client saw for `name` from `source`, in transport order;
/// `none` when nothing came back (a drop).
fn statuses(k: &Kudurru, ca: &Path, source: &str, name: &str) -> Vec<(&'static str, String)> {
    let kdig = |addr: SocketAddr, extra: &[&str]| -> String {
        let output = Command::new("kdig")
            .arg(format!("@{}", addr.ip()))
            .arg("-p")
            .arg(addr.port().to_string())
            .args(["-b", source, "+time=2", "+retry=0"])
            .args(extra)
            .args([name, "A"])
            .output()
            .expect("kdig runs");
        let out = String::from_utf8_lossy(&output.stdout);
        // The DNS header's, not the HTTP status line's.
        out.split("; status: ")
            .nth(1)
            .and_then(|s| s.split(';').next())
            .unwrap_or("none")
            .to_owned()
    };
    let https = k.https.expect("an https listener");
    let tls_ca = format!("+tls-ca={}", ca.display());
    let tls = |how: &'static str| [how, tls_ca.as_str(), "+tls-hostname=localhost"];
    vec![
        ("udp", kdig(k.addr, &["+notcp"])),
        ("tcp", kdig(k.addr, &["+tcp"])),
        ("dot", kdig(k.tls.expect("a tls listener"), &tls("+tls"))),
        ("doh h2", kdig(https, &tls("+https"))),
        ("doh http/1.1", curl_http1(https, ca, source, name)),
        (
            "doq",
            dnspython("dnspython-doq", k.quic.unwrap(), ca, source, name),
        ),
        (
            "doh3",
            dnspython("dnspython-h3", k.h3.unwrap(), ca, source, name),
        ),
    ]
}

/// One DoH GET over HTTP/1.1 from `source`: the answer's rcode, or `none`.
fn curl_http1(addr: SocketAddr, ca: &Path, source: &str, name: &str) -> String {
    let query = query_bytes(0, name, 1, 1, None);
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&query);
    let output = Command::new("curl")
        .args(["-s", "--max-time", "5", "--http1.1", "--interface", source])
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", addr.port()))
        .arg("--cacert")
        .arg(ca)
        .arg(format!(
            "https://localhost:{}/dns-query?dns={encoded}",
            addr.port()
        ))
        .output()
        .expect("curl runs");
    match wire::header_rcode(&output.stdout) {
        Some(0) if output.status.success() => "NOERROR".into(),
        Some(5) if output.status.success() => "REFUSED".into(),
        Some(other) if output.status.success() => format!("rcode {other}"),
        _ => "none".into(),
    }
}

/// One query through dnspython (quic_client.py) from `source`: its rcode, or `none`.
fn dnspython(mode: &str, addr: SocketAddr, ca: &Path, source: &str, name: &str) -> String {
    let spec = json!({ "source": source, "timeout": 2, "requests": [{"name": name}] });
    let report = crate::quic::client(mode, addr, ca, spec);
    report["results"][0]["rcode"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn applied(k: &Kudurru) -> f64 {
    k.metric("kudurru_settings_reloads_total{result=\"applied\"}")
        .unwrap_or(-1.0)
}

fn refused(k: &Kudurru, action: &str) -> f64 {
    k.metric(&format!("kudurru_acl_refused_total{{action=\"{action}\"}}"))
        .unwrap_or(-1.0)
}

fn all(statuses: &[(&'static str, String)], want: &str) -> bool {
    statuses.iter().all(|(_, status)| status == want)
}

#[test]
fn a_client_outside_server_allow_is_refused_on_every_transport_and_a_hot_change_applies() {
    let d = Scratch::new("acl-transports");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let file = d.join("settings.toml");
    std::fs::write(&file, "[server]\nallow = [\"127.0.0.2/32\"]\n").unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .cores(2)
        .tls(&cert, &key)
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .start();
    let name = unique_name("acl-");

    // 127.0.0.1 is outside server.allow: REFUSED everywhere, nothing asked upstream.
    let outside = statuses(&k, &cert, "127.0.0.1", &name);
    assert!(all(&outside, "REFUSED"), "{outside:?}");
    assert_eq!(
        upstream.total(&name),
        0,
        "a refused client never reaches upstream"
    );
    // 127.0.0.2 is inside: served everywhere, one upstream query.
    let inside = statuses(&k, &cert, "127.0.0.2", &name);
    assert!(all(&inside, "NOERROR"), "{inside:?}");
    assert_eq!(upstream.total(&name), 1);
    assert_eq!(refused(&k, "refuse"), outside.len() as f64);
    assert_eq!(refused(&k, "drop"), 0.0);

    // A hot change: the other client allowed, and a refused one gets nothing.
    write(
        &file,
        "[server]\nallow = [\"127.0.0.0/8\"]\ndeny = [\"127.0.0.2/32\"]\naclAction = \"drop\"\n",
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while applied(&k) != 1.0 {
        assert!(
            Instant::now() < deadline,
            "the settings file was not applied"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let inside = statuses(&k, &cert, "127.0.0.1", &name);
    assert!(all(&inside, "NOERROR"), "{inside:?}");
    let outside = statuses(&k, &cert, "127.0.0.2", &name);
    assert!(all(&outside, "none"), "{outside:?}");
    assert_eq!(refused(&k, "drop"), outside.len() as f64);
    assert_eq!(upstream.total(&name), 1, "answered from the cache");
}

#[test]
fn doctor_warns_of_an_open_resolver_on_a_public_listener() {
    let upstream = TestUpstream::start();
    let public = format!("udp://0.0.0.0:{}", kudurru_e2e::free_port());
    let codes = |extra: &[(&str, &str)]| -> Vec<String> {
        let mut builder = Kudurru::builder(&[upstream.udp_url()])
            .arg("--listen")
            .arg(&public);
        for (var, value) in extra {
            builder = builder.env(var, value);
        }
        let k = builder.start();
        let token = k.token("viewer", None);
        let output = Command::new("curl")
            .args(["-sS", "-H"])
            .arg(format!("Authorization: Bearer {token}"))
            .arg(format!("http://{}/api/v1/info/messages", k.api))
            .output()
            .expect("curl runs");
        let messages: Value = serde_json::from_slice(&output.stdout).unwrap();
        messages["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["code"].as_str().unwrap().to_owned())
            .collect()
    };
    let open = [("KUDURRU_SERVER__ALLOW", "0.0.0.0/0,::/0")];
    let codes_open = codes(&open);
    assert!(
        codes_open.iter().any(|c| c == "open_resolver"),
        "{codes_open:?}"
    );
    let limited = codes(&[open[0], ("KUDURRU_RATELIMIT__QPS", "50")]);
    assert!(!limited.iter().any(|c| c == "open_resolver"), "{limited:?}");
    let default = codes(&[]);
    assert!(!default.iter().any(|c| c == "open_resolver"), "{default:?}");
}
