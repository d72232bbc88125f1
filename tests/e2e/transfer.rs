//! Zone transfers against Knot DNS from Debian (`/usr/sbin/knotd`, run as the current user on
//! loopback high ports with its own configuration and scratch directory):
//! Knot primary → kudurru secondary (AXFR, then an IXFR after a serial bump announced by
//! Knot's NOTIFY), kudurru primary → Knot secondary (AXFR, then a RecordSet change, kudurru's
//! NOTIFY, Knot pulls and serves it), TSIG (a good key transfers, a wrong one is refused), and
//! expire after the primary dies. NSD 4.6 (Debian's) serves no IXFR, so Knot is the peer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, dig, free_port, try_dig};
use serde_json::{Value, json};

const KNOTD: &str = "/usr/sbin/knotd";
const KNOTC: &str = "/usr/sbin/knotc";
const KEY_SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAxMjM=";
const WRONG_SECRET: &str = "b3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXItMDE=";

/// A Knot DNS server with its own directory; killed when dropped.
pub(crate) struct Knot {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Knot {
    pub(crate) fn start(dir: &Path, config: &str, port: u16) -> Self {
        let conf = dir.join("knot.conf");
        std::fs::write(&conf, config).unwrap();
        let child = Command::new(KNOTD)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("knot.log")).unwrap())
            .spawn()
            .expect("knotd runs");
        let knot = Self {
            child,
            port,
            dir: dir.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "knotd did not start: {}",
                knot.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        knot
    }

    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn knotc(&self, args: &[&str]) {
        let out = Command::new(KNOTC)
            .arg("-s")
            .arg(self.dir.join("knot.sock"))
            .args(args)
            .output()
            .expect("knotc runs");
        assert!(
            out.status.success(),
            "knotc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("knot.log")).unwrap_or_default()
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn knot_config(dir: &Path, port: u16, body: &str) -> String {
    let d = dir.display();
    format!(
        "server:\n    listen: 127.0.0.1@{port}\n    rundir: {d}\n\
         database:\n    storage: {d}\n\
         control:\n    listen: {d}/knot.sock\n\
         log:\n  - target: stderr\n    any: info\n\
         {body}"
    )
}

/// The zone Knot serves; `timers` is "refresh retry expire".
pub(crate) fn zone_file(serial: u32, timers: &str, extra: &str) -> String {
    format!(
        "$ORIGIN corp.example.\n$TTL 300\n\
         @ SOA ns1 hostmaster {serial} {timers} 60\n\
         @ NS ns1\nns1 A 192.0.2.53\nwww A 192.0.2.10\n{extra}"
    )
}

fn call(k: &Kudurru, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
    let text = body.map(Value::to_string);
    crate::objects::call(
        k,
        method,
        path,
        token,
        text.as_deref().map(|t| ("application/json", t)),
    )
}

fn create(k: &Kudurru, token: &str, plural: &str, name: &str, spec: Value) {
    let (status, body) = call(
        k,
        "POST",
        &format!("/api/v1/{plural}"),
        token,
        Some(&json!({"metadata": {"name": name}, "spec": spec})),
    );
    assert_eq!(status, 201, "{plural}/{name}: {body}");
}

/// Waits until `check` holds, at most `limit`.
fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The A records of an authoritative answer (AA set: the test upstream, which answers
/// anything with 192.0.2.1, never counts).
pub(crate) fn a_records(server: std::net::SocketAddr, name: &str) -> Vec<String> {
    try_dig(server, &[name, "A", "+norecurse"])
        .ok()
        .filter(|d| d.flags.iter().any(|f| f == "aa"))
        .map(|d| d.answers.into_iter().map(|a| a.3).collect())
        .unwrap_or_default()
}

fn key_file(dir: &Path, secret: &str) -> PathBuf {
    let path = dir.join("keys.conf");
    std::fs::write(
        &path,
        format!("key \"xfr-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{secret}\";\n}};\n"),
    )
    .unwrap();
    path
}

#[test]
fn knot_primary_to_kudurru_secondary_axfr_then_ixfr_on_notify() {
    let scratch = Scratch::new("xfr-knot-primary");
    let upstream = TestUpstream::start();
    let knot_port = free_port();
    let mut k = Kudurru::builder(&[upstream.udp_url()]).start();
    let knot_dir = scratch.join("knot");
    std::fs::create_dir_all(&knot_dir).unwrap();
    // A refresh of an hour: only Knot's NOTIFY brings the change in time.
    std::fs::write(
        knot_dir.join("corp.example.zone"),
        zone_file(1, "3600 600 86400", ""),
    )
    .unwrap();
    let knot = Knot::start(
        &knot_dir,
        &knot_config(
            &knot_dir,
            knot_port,
            &format!(
                "remote:\n  - id: kudurru\n    address: 127.0.0.1@{}\n\
                 acl:\n  - id: xfr\n    address: 127.0.0.1\n    action: transfer\n\
                 template:\n  - id: default\n    storage: {d}\n    zonefile-load: difference\n    journal-content: changes\n\
                 zone:\n  - domain: corp.example\n    file: corp.example.zone\n    notify: kudurru\n    acl: xfr\n",
                k.addr.port(),
                d = knot_dir.display()
            ),
        ),
        knot_port,
    );
    let token = k.token("admin", None);
    create(
        &k,
        &token,
        "zones",
        "corp-example",
        json!({"zone": "corp.example.", "type": "secondary",
               "primaries": [{"address": knot.addr().to_string()}]}),
    );
    eventually(Duration::from_secs(20), "the AXFR from Knot", || {
        a_records(k.addr, "www.corp.example") == ["192.0.2.10"]
    });
    let answer = dig(k.addr, &["www.corp.example", "A", "+norecurse"]);
    assert!(answer.flags.contains(&"aa".to_owned()), "{}", answer.raw);

    // RFC 1996 §3: NOTIFY is taken from a primary's address only.
    let notify = dig(k.addr, &["+opcode=notify", "corp.example", "SOA"]);
    assert_eq!(notify.status, "NOERROR", "{}", notify.raw);
    assert!(notify.flags.contains(&"aa".to_owned()), "{}", notify.raw);
    let stranger = dig(
        k.addr,
        &["-b", "127.0.0.2", "+opcode=notify", "corp.example", "SOA"],
    );
    assert_eq!(stranger.status, "REFUSED", "{}", stranger.raw);
    let other_zone = dig(k.addr, &["+opcode=notify", "other.example", "SOA"]);
    assert_eq!(other_zone.status, "REFUSED", "{}", other_zone.raw);
    let over_tcp = dig(k.addr, &["+opcode=notify", "+tcp", "other.example", "SOA"]);
    assert_eq!(
        over_tcp.status, "REFUSED",
        "TCP reaches the inbox: {}",
        over_tcp.raw
    );

    // Serial 2 with a new name: Knot computes the difference, journals it and NOTIFYs.
    std::fs::write(
        knot_dir.join("corp.example.zone"),
        zone_file(2, "3600 600 86400", "new A 192.0.2.2\n"),
    )
    .unwrap();
    knot.knotc(&["zone-reload", "corp.example"]);
    eventually(Duration::from_secs(20), "the IXFR after NOTIFY", || {
        a_records(k.addr, "new.corp.example") == ["192.0.2.2"]
    });
    let log = knot.log();
    assert!(log.contains("AXFR, outgoing"), "the first transfer: {log}");
    assert!(
        log.contains("IXFR, outgoing"),
        "Knot served the change as IXFR: {log}"
    );
    assert!(
        k.metric("kudurru_zone_transfers_total{zone=\"corp.example.\",result=\"success\"}")
            .is_some_and(|v| v >= 1.0)
    );
    k.terminate();
}

#[test]
fn kudurru_primary_to_knot_secondary_axfr_then_notify_and_ixfr() {
    let scratch = Scratch::new("xfr-knot-secondary");
    let upstream = TestUpstream::start();
    let knot_port = free_port();
    let mut k = Kudurru::builder(&[upstream.udp_url()]).start();
    let token = k.token("admin", None);
    create(
        &k,
        &token,
        "zones",
        "corp-example",
        json!({"zone": "corp.example.", "type": "primary",
               "soa": {"mname": "ns1.corp.example.", "rname": "hostmaster.corp.example.",
                       "refresh": 60, "retry": 10, "expire": 600, "minimum": 60, "ttl": 300},
               "nameServers": ["ns1.corp.example."],
               "allowTransfer": ["127.0.0.1/32"],
               "notify": [format!("127.0.0.1:{knot_port}")]}),
    );
    create(
        &k,
        &token,
        "recordsets",
        "www",
        json!({"zone": "corp-example", "name": "www", "type": "A", "records": ["192.0.2.10"]}),
    );
    eventually(Duration::from_secs(10), "kudurru serving the zone", || {
        a_records(k.addr, "www.corp.example") == ["192.0.2.10"]
    });
    let knot_dir = scratch.join("knot");
    std::fs::create_dir_all(&knot_dir).unwrap();
    let knot = Knot::start(
        &knot_dir,
        &knot_config(
            &knot_dir,
            knot_port,
            &format!(
                "remote:\n  - id: kudurru\n    address: 127.0.0.1@{}\n\
                 acl:\n  - id: notify\n    address: 127.0.0.1\n    action: notify\n\
                 template:\n  - id: default\n    storage: {d}\n\
                 zone:\n  - domain: corp.example\n    master: kudurru\n    acl: notify\n",
                k.addr.port(),
                d = knot_dir.display()
            ),
        ),
        knot_port,
    );
    eventually(Duration::from_secs(20), "Knot's AXFR from kudurru", || {
        a_records(knot.addr(), "www.corp.example") == ["192.0.2.10"]
    });
    // A change: kudurru bumps the serial and NOTIFYs; Knot asks and pulls it.
    create(
        &k,
        &token,
        "recordsets",
        "new",
        json!({"zone": "corp-example", "name": "new", "type": "A", "records": ["192.0.2.2"]}),
    );
    eventually(Duration::from_secs(20), "Knot serving the change", || {
        a_records(knot.addr(), "new.corp.example") == ["192.0.2.2"]
    });
    let log = knot.log();
    assert!(
        log.contains("notify, incoming"),
        "Knot heard kudurru's NOTIFY: {log}"
    );
    assert!(
        log.contains("IXFR, incoming"),
        "Knot pulled the change as IXFR: {log}"
    );
    assert!(
        k.metric_sum("kudurru_zone_transfers_served_total") >= 2.0,
        "both transfers counted"
    );
    k.terminate();
}

#[test]
fn rfc8945_tsig_good_key_transfers_wrong_key_refused() {
    let scratch = Scratch::new("xfr-tsig");
    let upstream = TestUpstream::start();
    let keys = key_file(&scratch, KEY_SECRET);
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_ZONES__TSIGKEYFILE", keys.to_str().unwrap())
        .start();
    let token = k.token("admin", None);
    create(
        &k,
        &token,
        "zones",
        "corp-example",
        json!({"zone": "corp.example.", "type": "primary",
               "nameServers": ["ns1.corp.example."],
               "allowTransfer": ["127.0.0.1/32"],
               "tsigKey": "xfr-key"}),
    );
    create(
        &k,
        &token,
        "recordsets",
        "www",
        json!({"zone": "corp-example", "name": "www", "type": "A", "records": ["192.0.2.10"]}),
    );
    // Enough records for several messages: each one is signed and dig verifies each.
    let bulk: Vec<String> = (0..1500)
        .map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1))
        .collect();
    create(
        &k,
        &token,
        "recordsets",
        "bulk",
        json!({"zone": "corp-example", "name": "bulk", "type": "A", "records": bulk}),
    );
    eventually(Duration::from_secs(10), "kudurru serving the zone", || {
        a_records(k.addr, "www.corp.example") == ["192.0.2.10"]
            && try_dig(k.addr, &["bulk.corp.example", "A", "+norecurse", "+tcp"])
                .is_ok_and(|d| d.answers.len() == 1500)
    });
    let axfr = |key: Option<&str>| {
        let mut args = vec!["corp.example".to_owned(), "AXFR".to_owned()];
        if let Some(secret) = key {
            args.push("-y".into());
            args.push(format!("hmac-sha256:xfr-key:{secret}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = Command::new("dig")
            .arg(format!("@{}", k.addr.ip()))
            .args(["-p", &k.addr.port().to_string(), "+time=5", "+tries=1"])
            .args(&args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let good = axfr(Some(KEY_SECRET));
    assert!(good.contains("www.corp.example."), "{good}");
    assert_eq!(
        good.matches("\tSOA\t").count(),
        2,
        "SOA first and last: {good}"
    );
    assert!(
        !good.contains("failed") && !good.contains("verify"),
        "the signatures verify: {good}"
    );
    assert!(good.contains("XFR size: 1504 records"), "{good}");
    let messages: usize = good
        .split("messages ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(messages > 1, "several signed messages: {good}");
    let wrong = axfr(Some(WRONG_SECRET));
    assert!(!wrong.contains("www.corp.example."), "{wrong}");
    assert!(
        wrong.contains("NOTAUTH") || wrong.contains("BADSIG") || wrong.contains("failed"),
        "{wrong}"
    );
    let unsigned = axfr(None);
    assert!(!unsigned.contains("www.corp.example."), "{unsigned}");
    assert!(
        k.metric_sum("kudurru_zone_transfers_refused_total") >= 2.0,
        "refusals counted"
    );
    k.terminate();
}

#[test]
fn a_secondary_expires_after_its_primary_dies() {
    let scratch = Scratch::new("xfr-expire");
    let upstream = TestUpstream::start();
    let knot_port = free_port();
    let mut k = Kudurru::builder(&[upstream.udp_url()]).start();
    let knot_dir = scratch.join("knot");
    std::fs::create_dir_all(&knot_dir).unwrap();
    // refresh 2 s, retry 1 s, expire 4 s.
    std::fs::write(
        knot_dir.join("corp.example.zone"),
        zone_file(1, "2 1 4", ""),
    )
    .unwrap();
    let knot = Knot::start(
        &knot_dir,
        &knot_config(
            &knot_dir,
            knot_port,
            &format!(
                "acl:\n  - id: xfr\n    address: 127.0.0.1\n    action: transfer\n\
                 template:\n  - id: default\n    storage: {d}\n\
                 zone:\n  - domain: corp.example\n    file: corp.example.zone\n    acl: xfr\n",
                d = knot_dir.display()
            ),
        ),
        knot_port,
    );
    let token = k.token("admin", None);
    create(
        &k,
        &token,
        "zones",
        "corp-example",
        json!({"zone": "corp.example.", "type": "secondary",
               "primaries": [{"address": knot.addr().to_string()}]}),
    );
    eventually(Duration::from_secs(20), "the AXFR from Knot", || {
        a_records(k.addr, "www.corp.example") == ["192.0.2.10"]
    });
    drop(knot);
    eventually(Duration::from_secs(20), "SERVFAIL after expire", || {
        try_dig(k.addr, &["www.corp.example", "A", "+norecurse"])
            .is_ok_and(|d| d.status == "SERVFAIL")
    });
    assert!(
        k.metric("kudurru_zone_transfers_total{zone=\"corp.example.\",result=\"failure\"}")
            .is_some_and(|v| v >= 1.0)
    );
    k.terminate();
}

#[test]
fn rfc8945_tsig_secondary_transfers_from_knot_with_the_key_only() {
    for (secret, transfers) in [(KEY_SECRET, true), (WRONG_SECRET, false)] {
        let scratch = Scratch::new(if transfers {
            "xfr-tsig-in-good"
        } else {
            "xfr-tsig-in-bad"
        });
        let upstream = TestUpstream::start();
        let keys = key_file(&scratch, secret);
        let knot_port = free_port();
        let mut k = Kudurru::builder(&[upstream.udp_url()])
            .env("KUDURRU_ZONES__TSIGKEYFILE", keys.to_str().unwrap())
            .start();
        let knot_dir = scratch.join("knot");
        std::fs::create_dir_all(&knot_dir).unwrap();
        std::fs::write(
            knot_dir.join("corp.example.zone"),
            zone_file(1, "3600 1 86400", ""),
        )
        .unwrap();
        let knot = Knot::start(
            &knot_dir,
            &knot_config(
                &knot_dir,
                knot_port,
                &format!(
                    "key:\n  - id: xfr-key\n    algorithm: hmac-sha256\n    secret: {KEY_SECRET}\n\
                     acl:\n  - id: xfr\n    address: 127.0.0.1\n    key: xfr-key\n    action: transfer\n\
                     template:\n  - id: default\n    storage: {d}\n\
                     zone:\n  - domain: corp.example\n    file: corp.example.zone\n    acl: xfr\n",
                    d = knot_dir.display()
                ),
            ),
            knot_port,
        );
        let token = k.token("admin", None);
        create(
            &k,
            &token,
            "zones",
            "corp-example",
            json!({"zone": "corp.example.", "type": "secondary",
                   "primaries": [{"address": knot.addr().to_string(), "tsigKey": "xfr-key"}]}),
        );
        if transfers {
            eventually(Duration::from_secs(20), "the signed AXFR from Knot", || {
                a_records(k.addr, "www.corp.example") == ["192.0.2.10"]
            });
        } else {
            eventually(
                Duration::from_secs(20),
                "the refresh failing on the wrong key (no SOA yet: the next try is RFC 1912's 600 s retry away)",
                || {
                    k.metric(
                        "kudurru_zone_transfers_total{zone=\"corp.example.\",result=\"failure\"}",
                    )
                    .is_some_and(|v| v >= 1.0)
                },
            );
            assert_ne!(
                a_records(k.addr, "www.corp.example"),
                ["192.0.2.10"],
                "nothing transferred"
            );
        }
        k.terminate();
    }
}

#[test]
fn rfc8945_knot_secondary_pulls_signed_and_takes_only_signed_notify() {
    let scratch = Scratch::new("xfr-tsig-out");
    let upstream = TestUpstream::start();
    let keys = key_file(&scratch, KEY_SECRET);
    let knot_port = free_port();
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_ZONES__TSIGKEYFILE", keys.to_str().unwrap())
        .start();
    let token = k.token("admin", None);
    create(
        &k,
        &token,
        "zones",
        "corp-example",
        json!({"zone": "corp.example.", "type": "primary",
               "nameServers": ["ns1.corp.example."],
               "allowTransfer": ["127.0.0.1/32"],
               "notify": [format!("127.0.0.1:{knot_port}")],
               "tsigKey": "xfr-key"}),
    );
    create(
        &k,
        &token,
        "recordsets",
        "www",
        json!({"zone": "corp-example", "name": "www", "type": "A", "records": ["192.0.2.10"]}),
    );
    eventually(Duration::from_secs(10), "kudurru serving the zone", || {
        a_records(k.addr, "www.corp.example") == ["192.0.2.10"]
    });
    let knot_dir = scratch.join("knot");
    std::fs::create_dir_all(&knot_dir).unwrap();
    // Knot signs its requests with the key and takes NOTIFY only when signed with it.
    let knot = Knot::start(
        &knot_dir,
        &knot_config(
            &knot_dir,
            knot_port,
            &format!(
                "key:\n  - id: xfr-key\n    algorithm: hmac-sha256\n    secret: {KEY_SECRET}\n\
                 remote:\n  - id: kudurru\n    address: 127.0.0.1@{}\n    key: xfr-key\n\
                 acl:\n  - id: notify\n    address: 127.0.0.1\n    key: xfr-key\n    action: notify\n\
                 template:\n  - id: default\n    storage: {d}\n\
                 zone:\n  - domain: corp.example\n    master: kudurru\n    acl: notify\n",
                k.addr.port(),
                d = knot_dir.display()
            ),
        ),
        knot_port,
    );
    eventually(
        Duration::from_secs(20),
        "Knot's signed AXFR from kudurru",
        || a_records(knot.addr(), "www.corp.example") == ["192.0.2.10"],
    );
    create(
        &k,
        &token,
        "recordsets",
        "new",
        json!({"zone": "corp-example", "name": "new", "type": "A", "records": ["192.0.2.2"]}),
    );
    eventually(Duration::from_secs(20), "Knot serving the change", || {
        a_records(knot.addr(), "new.corp.example") == ["192.0.2.2"]
    });
    let log = knot.log();
    assert!(
        log.contains("notify, incoming"),
        "Knot took kudurru's signed NOTIFY: {log}"
    );
    assert!(!log.contains("denied"), "nothing refused: {log}");
    k.terminate();
}
