//! Rate limiting with slip, drops that send nothing, and lameduck, on the real binary.
//!
//! Every query here asks `localhost.` (answered locally, no upstream involved): the limiter runs
//! before local answers, so what is measured is the limiter alone.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_core::wire::{self, class, rtype};
use kudurru_e2e::{Kudurru, dig, query_bytes};

const HEALTH: &str = "health.kudurru.internal.";

/// A limiter that allows `burst` queries and then 1 per second.
fn limited(burst: u32, slip: u32) -> kudurru_e2e::KudurruBuilder {
    Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .env("KUDURRU_RATELIMIT__QPS", "1")
        .env("KUDURRU_RATELIMIT__BURST", &burst.to_string())
        .env("KUDURRU_RATELIMIT__SLIP", &slip.to_string())
}

#[derive(Debug, Default, PartialEq)]
struct Tally {
    answered: usize,
    truncated: usize,
    silent: usize,
}

/// Sends `count` queries one at a time from `socket`, waiting up to `wait` for each answer.
fn tally(socket: &UdpSocket, server: SocketAddr, count: usize, wait: Duration) -> Tally {
    socket.set_read_timeout(Some(wait)).unwrap();
    let mut t = Tally::default();
    let mut buf = [0u8; 1500];
    for id in 0..count {
        let query = query_bytes(id as u16, "localhost", rtype::A, class::IN, None);
        socket.send_to(&query, server).unwrap();
        // Skip stale answers to earlier queries that arrived after their wait.
        let reply = loop {
            match socket.recv_from(&mut buf) {
                Ok((n, _)) if wire::message_id(&buf[..n]) == Some(id as u16) => break Some(n),
                Ok(_) => continue,
                Err(_) => break None,
            }
        };
        match reply {
            Some(n) if wire::is_truncated(&buf[..n]) => {
                assert_eq!(wire::read_u16(&buf[..n], wire::ANCOUNT_AT), Some(0));
                t.truncated += 1;
            }
            Some(_) => t.answered += 1,
            None => t.silent += 1,
        }
    }
    t
}

#[test]
fn a_client_over_the_limit_is_limited_with_the_configured_slip_ratio() {
    let k = limited(20, 2).start();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    let t = tally(&socket, k.addr, 600, Duration::from_millis(20));
    let elapsed = started.elapsed().as_secs_f64();
    // Allowed: the burst plus what 1 qps refills while the test runs (and one for rounding).
    let most_allowed = 20 + elapsed.ceil() as usize + 1;
    assert!(
        (20..=most_allowed).contains(&t.answered),
        "{t:?} in {elapsed:.1}s"
    );
    // slip = 2 alternates exactly per bucket: half the limited queries are truncated, half get
    // nothing. Refills between them shift the alternation by at most one per refill, and a
    // loopback datagram is almost never lost, so allow the refills plus 1 %.
    let limited = t.truncated + t.silent;
    let skew = t.truncated.abs_diff(limited / 2);
    assert!(
        skew <= elapsed.ceil() as usize + limited / 100,
        "{t:?}: truncated should be half of {limited}"
    );
    assert_eq!(
        settled(&k, "kudurru_ratelimit_slipped_total", t.truncated),
        t.truncated,
        "every slip the client saw is counted"
    );
    let dropped = settled(&k, "kudurru_ratelimit_dropped_total", t.silent);
    assert!(
        dropped >= t.silent.saturating_sub(1) && dropped <= t.silent,
        "{dropped} vs {t:?}"
    );
    assert_eq!(
        k.metric("kudurru_dns_responses_total{rcode=\"none\"}"),
        Some(dropped as f64),
        "drops are counted as rcode none"
    );
    // The bucket belongs to the /24: a neighbour shares it, another /24 has its own.
    let neighbour = UdpSocket::bind("127.0.0.2:0").unwrap();
    let t = tally(&neighbour, k.addr, 5, Duration::from_millis(200));
    assert!(
        t.answered <= 2,
        "127.0.0.2 shares 127.0.0.0/24's bucket: {t:?}"
    );
    let elsewhere = UdpSocket::bind("127.0.1.1:0").unwrap();
    let t = tally(&elsewhere, k.addr, 5, Duration::from_millis(500));
    assert_eq!(t.answered, 5, "127.0.1.0/24 is another client");
}

#[test]
fn many_source_ports_on_two_cores_are_one_client() {
    // Every query from a fresh socket: without client steering the kernel spreads the source
    // ports over both cores and each core's bucket allows its own burst (about 2 x 20 answers).
    let k = limited(20, 0).cores(2).start();
    let started = Instant::now();
    let mut answered = 0;
    for _ in 0..120 {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        answered += tally(&socket, k.addr, 1, Duration::from_millis(30)).answered;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let most_allowed = 20 + elapsed.ceil() as usize + 1;
    assert!(
        (20..=most_allowed).contains(&answered),
        "{answered} answered in {elapsed:.1}s from 120 source ports; one bucket allows at most {most_allowed}"
    );
}

#[test]
fn an_allowlisted_client_is_never_limited() {
    let k = limited(2, 0)
        .env("KUDURRU_RATELIMIT__ALLOWLIST", "127.0.0.0/8")
        .cores(2)
        .start();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let t = tally(&socket, k.addr, 300, Duration::from_millis(500));
    assert_eq!(
        t,
        Tally {
            answered: 300,
            ..Tally::default()
        }
    );
    thread::sleep(Duration::from_millis(1100)); // the cores mirror their counters every second
    assert_eq!(k.metric_sum("kudurru_ratelimit_dropped_total"), 0.0);
    assert!(
        k.metric_sum("kudurru_ratelimit_buckets") == 0.0,
        "allowlisted: no bucket at all"
    );
}

#[test]
fn a_drop_sends_nothing_over_udp_and_closes_the_tcp_connection() {
    let k = limited(1, 0).start();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let t = tally(&udp, k.addr, 3, Duration::from_millis(300));
    assert_eq!(
        t,
        Tally {
            answered: 1,
            truncated: 0,
            silent: 2
        }
    );

    // TCP: the bucket is empty, so the next query on a connection closes it with nothing sent.
    let mut tcp = TcpStream::connect(k.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let query = query_bytes(7, "localhost", rtype::A, class::IN, None);
    let mut frame = (query.len() as u16).to_be_bytes().to_vec();
    frame.extend_from_slice(&query);
    tcp.write_all(&frame).unwrap();
    let mut got = Vec::new();
    let read = tcp.read_to_end(&mut got);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "closed with nothing sent: {read:?} {got:?}"
    );
    assert!(got.is_empty());
    assert_eq!(
        settled(&k, "kudurru_ratelimit_dropped_total", 3),
        3,
        "two UDP drops and one TCP drop"
    );
    assert_eq!(
        k.metric("kudurru_dns_responses_total{rcode=\"none\"}"),
        Some(3.0)
    );
}

fn kudurru_lameduck(k: &Kudurru, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(kudurru_e2e::kudurru_bin())
        .arg("lameduck")
        .args(args)
        .arg("--ops-address")
        .arg(k.ops.to_string())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

fn curl(method: &str, url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-X", method, "-w", "\n%{http_code}", url])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.trim_end().to_owned())
}

/// The limiter counters reach the ops listener once a second: waits (at most 3 s) for
/// `name` to read `expect`, and returns what it read last.
fn settled(k: &Kudurru, name: &str, expect: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let value = k.metric_sum(name) as usize;
        if value == expect || Instant::now() > deadline {
            return value;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn lameduck_flips_the_health_name_and_readiness_and_back() {
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()]).start();
    let health = dig(k.addr, &[HEALTH, "A"]);
    assert_eq!(health.status, "NOERROR");
    assert_eq!(health.answers[0].3, "127.0.0.1");
    let ops = format!("http://{}", k.ops);
    assert_eq!(
        curl("GET", &format!("{ops}/lameduck")),
        (200, "{\"lameduck\":false}".into())
    );

    assert_eq!(
        kudurru_lameduck(&k, &[]),
        (Some(0), "{\"lameduck\":true}".into())
    );
    assert_eq!(dig(k.addr, &[HEALTH, "A"]).status, "SERVFAIL");
    assert_eq!(
        dig(k.addr, &["HEALTH.Kudurru.Internal.", "TXT"]).status,
        "SERVFAIL"
    );
    assert_eq!(
        dig(k.addr, &["localhost", "A"]).answers[0].3,
        "127.0.0.1",
        "every other name keeps resolving"
    );
    assert_eq!(curl("GET", &format!("{ops}/healthz/ready")).0, 503);
    assert_eq!(
        curl("GET", &format!("{ops}/lameduck")).1,
        "{\"lameduck\":true}"
    );

    assert_eq!(curl("DELETE", &format!("{ops}/lameduck")).0, 200);
    assert_eq!(dig(k.addr, &[HEALTH, "A"]).status, "NOERROR");
    assert_eq!(curl("GET", &format!("{ops}/healthz/ready")).0, 200);

    assert_eq!(curl("POST", &format!("{ops}/lameduck")).0, 200);
    assert_eq!(
        kudurru_lameduck(&k, &["--cancel"]),
        (Some(0), "{\"lameduck\":false}".into())
    );
    assert_eq!(dig(k.addr, &[HEALTH, "A"]).status, "NOERROR");
}

#[test]
fn kudurru_lameduck_names_an_unreachable_ops_listener() {
    let port = kudurru_e2e::free_port();
    let out = Command::new(kudurru_e2e::kudurru_bin())
        .args(["lameduck", "--ops-address", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach the ops listener") && stderr.contains(&port.to_string()),
        "{stderr}"
    );
}

#[test]
fn sigterm_enters_lameduck_for_the_drain_delay_and_keeps_answering() {
    let mut k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .env("KUDURRU_SHUTDOWN__DRAINDELAY", "3s")
        .start();
    let addr = k.addr;
    // SIGTERM, then ask while the process is draining (the drain lasts 3 s).
    let asker = thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        (
            dig(addr, &[HEALTH, "A", "+time=1", "+tries=1"]).status,
            dig(addr, &["localhost", "A", "+time=1", "+tries=1"]).status,
        )
    });
    let status = k.terminate();
    let (health, other) = asker.join().unwrap();
    assert_eq!(health, "SERVFAIL", "the health name drains the node");
    assert_eq!(
        other, "NOERROR",
        "other names are answered until the listeners close"
    );
    assert_eq!(status.code(), Some(0));
    // The port is free again once kudurru is gone. Tried for a second: a client's short-lived
    // socket (another test's) may hold the same port for a moment; seen once under full load.
    let freed = (0..20).any(|_| {
        UdpSocket::bind(addr).is_ok() || {
            thread::sleep(Duration::from_millis(50));
            false
        }
    });
    assert!(freed, "the listener is closed after the delay");
}
