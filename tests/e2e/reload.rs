//! The settings file on a running server: each way of changing it reloads exactly once, an
//! invalid file keeps the last good settings, and every hot key takes effect, observed through
//! DNS behaviour or metrics.

use std::net::UdpSocket;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_core::wire::{self, class, rtype};
use kudurru_e2e::{Kudurru, TestUpstream, dig, query_bytes, unique_name};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kudurru-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn applied(k: &Kudurru) -> f64 {
    k.metric("kudurru_settings_reloads_total{result=\"applied\"}")
        .unwrap_or(-1.0)
}

fn rejected(k: &Kudurru) -> f64 {
    k.metric("kudurru_settings_reloads_total{result=\"rejected\"}")
        .unwrap_or(-1.0)
}

/// Waits (at most 5 s) for `read` to return `want`, then checks it stays there for another
/// 700 ms (more than the debounce): the change was applied exactly once.
fn exactly(k: &Kudurru, read: fn(&Kudurru) -> f64, want: f64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while read(k) != want {
        assert!(
            Instant::now() < deadline,
            "{what}: reads {} not {want}",
            read(k)
        );
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(700));
    assert_eq!(read(k), want, "{what}: reloaded more than once");
}

/// The TTL kudurru gives a fresh name (the test upstream answers TTL 300).
fn fresh_ttl(k: &Kudurru) -> u32 {
    dig(k.addr, &[&unique_name("t"), "A"]).answers[0].1
}

fn ttl_settings(max_ttl: u32) -> String {
    format!("[cache]\nmaxTTL = {max_ttl}\n")
}

#[test]
fn a_settings_file_rewritten_renamed_or_touched_reloads_once_per_change() {
    let upstream = TestUpstream::start();
    let dir = temp_dir("reload-plain");
    let file = dir.join("settings.toml");
    std::fs::write(&file, ttl_settings(100)).unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .start();
    assert_eq!(fresh_ttl(&k), 100);
    assert_eq!(applied(&k), 0.0);

    std::fs::write(&file, ttl_settings(200)).unwrap();
    exactly(&k, applied, 1.0, "rewritten in place");
    assert_eq!(fresh_ttl(&k), 200);

    let tmp = dir.join(".settings.toml.tmp");
    std::fs::write(&tmp, ttl_settings(250)).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    exactly(&k, applied, 2.0, "renamed into place");
    assert_eq!(fresh_ttl(&k), 250);

    // Same bytes again: the hash is unchanged, nothing is reloaded.
    std::fs::write(&file, ttl_settings(250)).unwrap();
    exactly(&k, applied, 2.0, "rewritten with the same content");

    // Invalid: a node-scope key. Logged, counted, and the last good settings stay.
    std::fs::write(&file, "[cache]\nmaxTTL = 50\n[server]\ncores = 2\n").unwrap();
    exactly(&k, rejected, 1.0, "node-scope key");
    assert_eq!(fresh_ttl(&k), 250, "the last good settings stay");
    std::fs::write(&file, "[cache]\nmaxTTL = \"soon\"\n").unwrap();
    exactly(&k, rejected, 2.0, "wrong type");
    assert_eq!(fresh_ttl(&k), 250);

    // Removed: an empty layer, so the default (86400) applies and the upstream's 300 shows.
    std::fs::remove_file(&file).unwrap();
    exactly(&k, applied, 3.0, "removed");
    assert_eq!(fresh_ttl(&k), 300);
}

#[test]
fn a_configmap_style_symlink_swap_reloads_once() {
    // Kubernetes' layout: settings.toml -> ..data/settings.toml, ..data -> ..<timestamp>/.
    let upstream = TestUpstream::start();
    let dir = temp_dir("reload-configmap");
    let version = |n: u32, max_ttl: u32| -> String {
        let name = format!("..2026_12_02_00_00_0{n}.000000001");
        std::fs::create_dir(dir.join(&name)).unwrap();
        std::fs::write(dir.join(&name).join("settings.toml"), ttl_settings(max_ttl)).unwrap();
        name
    };
    let v1 = version(1, 100);
    symlink(&v1, dir.join("..data")).unwrap();
    symlink("..data/settings.toml", dir.join("settings.toml")).unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env(
            "KUDURRU_SETTINGS_FILE",
            dir.join("settings.toml").to_str().unwrap(),
        )
        .start();
    assert_eq!(fresh_ttl(&k), 100);

    let v2 = version(2, 150);
    symlink(&v2, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join(&v1)).unwrap();
    exactly(&k, applied, 1.0, "..data swapped");
    assert_eq!(fresh_ttl(&k), 150);
}

fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// (answered, truncated) for `count` queries from `source`.
fn from(source: &str, server: std::net::SocketAddr, count: u16) -> (u32, u32) {
    let socket = UdpSocket::bind((source, 0)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 512];
    let (mut answered, mut truncated) = (0, 0);
    for id in 0..count {
        socket
            .send_to(
                &query_bytes(id, "localhost", rtype::A, class::IN, None),
                server,
            )
            .unwrap();
        if let Ok((n, _)) = socket.recv_from(&mut buf) {
            if wire::is_truncated(&buf[..n]) {
                truncated += 1;
            } else {
                answered += 1;
            }
        }
    }
    (answered, truncated)
}

#[test]
fn every_hot_key_takes_effect_on_a_running_server() {
    let (a, b) = (TestUpstream::start(), TestUpstream::start());
    let dir = temp_dir("reload-hot");
    let file = dir.join("settings.toml");
    std::fs::write(&file, format!("upstreams = [\"{}\"]\n", a.udp_url())).unwrap();
    // No --upstream flag: it would lock the key. (log.level is node-scope, so it cannot be in
    // the settings file; it changes live through the node API.)
    let k = Kudurru::builder(&[])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .start();

    // Before: defaults, upstream A, 40 names cached, nobody limited.
    let before = unique_name("before");
    assert_eq!(dig(k.addr, &[&before, "A"]).answers[0].1, 300);
    assert_eq!(a.total(&before), 1);
    for i in 0..40 {
        dig(k.addr, &[&format!("n{i}.{before}"), "A"]);
    }
    assert_eq!(from("127.0.5.1", k.addr, 10), (10, 0));
    thread::sleep(Duration::from_millis(1100));
    assert!(k.metric_sum("kudurru_cache_entries") >= 40.0);

    write(
        &file,
        &format!(
            "upstreams = [\"{}\"]\n[cache]\nmaxEntries = 10\nminTTL = 50\nmaxTTL = 120\nnegativeMaxTTL = 20\nservfailTTL = 1\n[ratelimit]\nqps = 1\nburst = 3\nslip = 1\nallowlist = [\"127.0.0.0/24\"]\n",
            b.udp_url()
        ),
    );
    exactly(&k, applied, 1.0, "all hot keys at once");

    // upstreams: a new name goes to B only.
    let after = unique_name("after");
    let answer = dig(k.addr, &[&after, "A"]);
    assert_eq!((a.total(&after), b.total(&after)), (0, 1), "upstreams");
    // cache.maxTTL: 300 from the upstream is capped to 120.
    assert_eq!(answer.answers[0].1, 120, "cache.maxTTL");
    // cache.minTTL: 10 from the upstream is raised to 50.
    assert_eq!(
        dig(k.addr, &[&unique_name("ttl10-"), "A"]).answers[0].1,
        50,
        "cache.minTTL"
    );
    // cache.negativeMaxTTL: the SOA's 60 (MINIMUM) is capped to 20.
    let nx = dig(k.addr, &[&unique_name("nx-"), "A"]);
    assert_eq!(nx.status, "NXDOMAIN");
    assert_eq!(nx.authority[0].1, 20, "cache.negativeMaxTTL");
    // cache.servfailTTL: a failure is cached 1 s, so a query 1.5 s later asks again.
    // (One resolution may ask B more than once: a SERVFAIL is retried within resolveTimeout.)
    let servfail = unique_name("servfail-");
    dig(k.addr, &[&servfail, "A"]);
    let first = b.total(&servfail);
    thread::sleep(Duration::from_millis(1500));
    dig(k.addr, &[&servfail, "A"]);
    assert!(first >= 1);
    assert_eq!(b.total(&servfail), 2 * first, "cache.servfailTTL");
    // cache.maxEntries: the shard shrinks to 10 within a second.
    thread::sleep(Duration::from_millis(1100));
    assert!(
        k.metric_sum("kudurru_cache_entries") <= 10.0,
        "cache.maxEntries"
    );
    // ratelimit.qps/burst/slip (dig's 127.0.0.0/24 is allowlisted from the start; 127.0.5.1 is
    // not): 3 answered, then every limited query truncated (slip 1).
    let (answered, truncated) = from("127.0.5.1", k.addr, 10);
    assert!(
        answered <= 4 && answered + truncated == 10,
        "ratelimit: {answered} {truncated}"
    );

    // ratelimit.allowlist: the same client is no longer limited.
    write(
        &file,
        &format!(
            "upstreams = [\"{}\"]\n[cache]\nmaxEntries = 10\nminTTL = 50\nmaxTTL = 120\nnegativeMaxTTL = 20\nservfailTTL = 1\n[ratelimit]\nqps = 1\nburst = 3\nslip = 1\nallowlist = [\"127.0.0.0/24\", \"127.0.5.0/24\"]\n",
            b.udp_url()
        ),
    );
    exactly(&k, applied, 2.0, "allowlist");
    assert_eq!(
        from("127.0.5.1", k.addr, 10),
        (10, 0),
        "ratelimit.allowlist"
    );
}

#[test]
fn a_restart_bound_key_in_the_settings_file_waits_for_a_restart() {
    let upstream = TestUpstream::start();
    let dir = temp_dir("reload-restart");
    let file = dir.join("settings.toml");
    std::fs::write(&file, "").unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .start();
    // edns.udpPayload is cluster-scope but restart-bound: accepted, not applied.
    write(&file, "[edns]\nudpPayload = 512\n[cache]\nmaxTTL = 77\n");
    exactly(&k, applied, 1.0, "a hot key beside it applies");
    assert_eq!(fresh_ttl(&k), 77);
    // A ~1.1 KB answer still goes out whole over UDP, with 1232 advertised.
    let big = dig(
        k.addr,
        &[&unique_name("big-"), "TXT", "+bufsize=4096", "+ignore"],
    );
    assert!(!big.flags.contains(&"tc".to_string()), "{}", big.raw);
    assert!(big.raw.contains("udp: 1232"), "{}", big.raw);
}

/// Sends SIGHUP to the server.
pub(crate) fn hangup(k: &Kudurru) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &k.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Waits (at most 5 s) until the log holds `text` `count` times.
pub(crate) fn logged(log: &Path, text: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches(text)
            .count();
        if seen >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{text:?} logged {seen} times, not {count}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_rereads_the_settings_file_and_the_certificates_and_keeps_serving() {
    let upstream = TestUpstream::start();
    let dir = temp_dir("reload-hup");
    let file = dir.join("settings.toml");
    write(&file, &ttl_settings(100));
    let (cert, key) = kudurru_e2e::cert_pair(&dir, "a");
    let log = dir.join("kudurru.log");
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .tls(&cert, &key)
        .log_level(Some("info"))
        .stderr_to(&log)
        .start();
    assert_eq!(fresh_ttl(&k), 100);
    // Nothing changed: SIGHUP still re-reads the certificate (a file watch would not), and
    // the process serves on.
    hangup(&k);
    logged(&log, "SIGHUP: re-reading", 1);
    logged(&log, "TLS certificate reloaded", 1);
    assert_eq!(k.ops_get("/healthz/live").0, 200);
    assert_eq!(fresh_ttl(&k), 100);
    // A changed settings file is applied (by the watcher or the SIGHUP, whichever is first;
    // exactly once either way).
    write(&file, &ttl_settings(40));
    hangup(&k);
    exactly(&k, applied, 1.0, "applied");
    assert_eq!(fresh_ttl(&k), 40);
    logged(&log, "SIGHUP: re-reading", 2);
    logged(&log, "TLS certificate reloaded", 2);
    assert_eq!(k.ops_get("/healthz/ready").0, 200);
}
