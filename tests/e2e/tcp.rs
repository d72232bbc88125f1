//! DNS over TCP (RFC 7766): pipelining, framing, limits.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use kudurru_core::wire::{self, rtype};
use kudurru_e2e::{Kudurru, TestUpstream, dig, query_bytes, try_dig, unique_name};

fn frame(message: &[u8]) -> Vec<u8> {
    let mut f = (message.len() as u16).to_be_bytes().to_vec();
    f.extend_from_slice(message);
    f
}

fn read_reply(stream: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).expect("length");
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).expect("message");
    reply
}

#[test]
fn rfc7766_6_2_1_pipelined_queries_are_answered_as_they_complete() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let mut stream = TcpStream::connect(k.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let slow = query_bytes(1, &unique_name("slow-"), rtype::A, 1, None);
    let mut batch = frame(&slow);
    for id in 2..=10u16 {
        batch.extend(frame(&query_bytes(
            id,
            &unique_name("pipe"),
            rtype::A,
            1,
            None,
        )));
    }
    stream.write_all(&batch).unwrap();
    let mut order = Vec::new();
    for _ in 0..10 {
        let reply = read_reply(&mut stream);
        assert_eq!(wire::header_rcode(&reply), Some(0));
        order.push(wire::message_id(&reply).unwrap());
    }
    assert_eq!(
        order.iter().copied().collect::<HashSet<_>>(),
        (1..=10).collect::<HashSet<_>>()
    );
    assert_ne!(
        order[0], 1,
        "the slow query did not hold up the others: {order:?}"
    );
}

#[test]
fn rfc7766_8_framing_survives_any_split_of_length_and_body() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let mut stream = TcpStream::connect(k.addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let message = frame(&query_bytes(77, "localhost", rtype::A, 1, None));
    for byte in &message {
        stream.write_all(&[*byte]).unwrap();
        thread::sleep(Duration::from_millis(5));
    }
    let reply = read_reply(&mut stream);
    assert_eq!(wire::message_id(&reply), Some(77));
    // Two messages in one segment, and one split across two segments.
    let a = frame(&query_bytes(78, "localhost", rtype::A, 1, None));
    let b = frame(&query_bytes(79, "localhost", rtype::AAAA, 1, None));
    let mut joined = a.clone();
    joined.extend_from_slice(&b[..3]);
    stream.write_all(&joined).unwrap();
    thread::sleep(Duration::from_millis(20));
    stream.write_all(&b[3..]).unwrap();
    let ids: HashSet<u16> = (0..2)
        .map(|_| wire::message_id(&read_reply(&mut stream)).unwrap())
        .collect();
    assert_eq!(ids, HashSet::from([78, 79]));
}

/// `count` queries for `localhost` (answered locally, no upstream), the `i`th with ID `i` (mod
/// 2^16).
fn localhost_frames(count: u32) -> Vec<u8> {
    let mut batch = Vec::new();
    for i in 0..count {
        batch.extend(frame(&query_bytes(
            i as u16,
            "localhost",
            rtype::A,
            1,
            None,
        )));
    }
    batch
}

/// Polls `k`'s query count until two samples 300 ms apart agree; `None` if it never settles
/// within 20 s.
fn settled_query_count(k: &Kudurru) -> Option<f64> {
    let mut last = k.metric_sum("kudurru_dns_queries_total");
    for _ in 0..66 {
        thread::sleep(Duration::from_millis(300));
        let now = k.metric_sum("kudurru_dns_queries_total");
        if now == last {
            return Some(now);
        }
        last = now;
    }
    None
}

#[test]
fn rfc7766_a_client_that_does_not_read_stalls_only_itself_and_is_closed_after_the_idle_timeout() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_TCP__IDLETIMEOUT", "30s")
        .start();
    // Far more answers than the sockets' buffers hold (~45 bytes each, 9 MB in all; a TCP send
    // buffer grows to 4 MB here): kudurru's writes wait on a full socket and it stops reading.
    // Its query count then stands still below the number sent (the kernel may hold the rest of
    // the queries, 6 MB, in the two sockets' buffers, so the client's writes need not block).
    const QUERIES: u32 = 200_000;
    let stalled = TcpStream::connect(k.addr).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stalled.try_clone().unwrap();
    let sender = thread::spawn(move || writer.write_all(&localhost_frames(QUERIES)).is_ok());
    let taken = settled_query_count(&k).expect("kudurru's query count settles");
    assert!(
        taken < f64::from(QUERIES),
        "kudurru took in all {taken} queries while the client read no answer"
    );
    // Meanwhile another client on the same core is answered.
    let started = Instant::now();
    assert_eq!(dig(k.addr, &["localhost", "A", "+tcp"]).status, "NOERROR");
    assert!(started.elapsed() < Duration::from_secs(1));
    // The stalled client reads now: every answer, in order (all are answered at once, so they
    // are written in the order asked).
    let mut stalled = std::io::BufReader::new(stalled);
    for i in 0..QUERIES {
        let mut len = [0u8; 2];
        stalled.read_exact(&mut len).expect("length");
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stalled.read_exact(&mut reply).expect("message");
        assert_eq!(wire::message_id(&reply), Some(i as u16));
        assert_eq!(wire::header_rcode(&reply), Some(0));
    }
    assert!(sender.join().unwrap(), "all queries were taken");

    // One that never reads: closed once a write has waited tcp.idleTimeout.
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_TCP__IDLETIMEOUT", "1s")
        .start();
    let silent = TcpStream::connect(k.addr).unwrap();
    let mut writer = silent.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let _ = writer.write_all(&localhost_frames(QUERIES));
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while k.metric_sum("kudurru_tcp_timeouts_total") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the non-reading client was never closed"
        );
        thread::sleep(Duration::from_millis(100));
    }
    drop(silent);
    let _ = sender.join();
    assert_eq!(dig(k.addr, &["localhost", "A", "+tcp"]).status, "NOERROR");
}

#[test]
fn rfc7766_6_2_3_idle_and_half_open_connections_are_closed() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_TCP__IDLETIMEOUT", "500ms")
        .start();
    let mut idle = TcpStream::connect(k.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut half = TcpStream::connect(k.addr).unwrap();
    half.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    half.write_all(&[0, 40, 1, 2, 3]).unwrap(); // a frame that never completes
    let started = Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(
        idle.read(&mut buf).unwrap_or(0),
        0,
        "idle connection closed"
    );
    assert_eq!(
        half.read(&mut buf).unwrap_or(0),
        0,
        "half-sent frame closed"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(k.metric_sum("kudurru_tcp_timeouts_total") >= 2.0);
    assert_eq!(dig(k.addr, &["localhost", "A", "+tcp"]).status, "NOERROR");
}

/// Issue 32 item 1: at `tcp.maxConnectionsPerCore` a new connection is admitted by closing the
/// one that went longest without a query, instead of being refused while idle connections hold
/// the core (as Unbound's adaptive TCP timeouts do).
#[test]
fn a_full_core_closes_its_longest_idle_connection_for_a_new_one() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .cores(1)
        .env("KUDURRU_TCP__MAXCONNECTIONSPERCORE", "2")
        .start();
    let mut oldest = TcpStream::connect(k.addr).unwrap();
    thread::sleep(Duration::from_millis(100));
    let mut busy = TcpStream::connect(k.addr).unwrap();
    for s in [&oldest, &busy] {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    }
    // The second carries a query: the first is the longest idle.
    let ask = |stream: &mut TcpStream, id: u16| {
        stream
            .write_all(&frame(&query_bytes(id, "localhost", rtype::A, 1, None)))
            .unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len)?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut answer).map(|_| answer)
    };
    assert!(ask(&mut busy, 1).is_ok());
    let mut newcomer = TcpStream::connect(k.addr).unwrap();
    newcomer
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    assert!(ask(&mut newcomer, 2).is_ok(), "the newcomer is served");
    let mut buf = [0u8; 4];
    assert_eq!(
        oldest.read(&mut buf).unwrap_or(0),
        0,
        "the longest-idle connection was closed for it"
    );
    assert!(ask(&mut busy, 3).is_ok(), "the busy connection is kept");
    assert_eq!(k.metric_sum("kudurru_tcp_evicted_total"), 1.0);
    assert_eq!(k.metric_sum("kudurru_tcp_refused_total"), 0.0);
}

#[test]
fn tcp_garbage_closes_only_that_connection() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let mut bad = TcpStream::connect(k.addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    bad.write_all(&frame(b"xx")).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(
        bad.read(&mut buf).unwrap_or(0),
        0,
        "a drop closes the connection"
    );
    assert_eq!(
        dig(k.addr, &[&unique_name("ok"), "A", "+tcp"]).status,
        "NOERROR"
    );
}

#[test]
fn rfc7828_tcp_keepalive_announces_the_idle_timeout() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_TCP__IDLETIMEOUT", "7s")
        .start();
    let tcp = dig(k.addr, &["localhost", "A", "+tcp", "+keepalive"]);
    assert!(tcp.raw.contains("KEEPALIVE: 7.0 secs"), "{}", tcp.raw);
    let udp = dig(k.addr, &["localhost", "A", "+keepalive"]);
    assert!(
        !udp.raw.contains("KEEPALIVE"),
        "never over UDP:\n{}",
        udp.raw
    );
    let cached = unique_name("keep");
    dig(k.addr, &[&cached, "A", "+tcp"]);
    let hit = dig(k.addr, &[&cached, "A", "+tcp", "+keepalive"]);
    assert!(
        hit.raw.contains("KEEPALIVE: 7.0 secs"),
        "cache hits carry it too:\n{}",
        hit.raw
    );
}

#[test]
fn tcp_upstream_is_used_for_tcp_urls() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[format!("tcp://{}", upstream.addr)]).start();
    let name = unique_name("viatcp");
    assert_eq!(dig(k.addr, &[&name, "A"]).answers[0].3, "192.0.2.1");
    assert_eq!(upstream.count(&name, "tcp"), 1);
    assert_eq!(upstream.count(&name, "udp"), 0);
}

#[test]
fn a_tcp_upstream_connection_whose_query_timed_out_is_not_given_new_queries() {
    // The test upstream reads `silent-` queries over TCP and never answers them, but keeps the
    // connection: from kudurru's side, a connection that may be dead.
    let upstream = TestUpstream::start();
    // The connection counts below are kudurru's resolution traffic alone: no loop probe
    // (it opens a connection of its own to a tcp:// upstream at start).
    let k = Kudurru::builder(&[format!("tcp://{}", upstream.addr)])
        .cores(1)
        .env("KUDURRU_UPSTREAM__LOOPPROBE", "false")
        .env("KUDURRU_UPSTREAM__TIMEOUT", "300ms")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "2s")
        .start();
    let warm = unique_name("warm");
    assert_eq!(dig(k.addr, &[&warm, "A"]).answers[0].3, "192.0.2.1");
    assert_eq!(upstream.tcp_connections(), 1);
    let silent = unique_name("silent-");
    let answer = try_dig(k.addr, &[&silent, "A"]).expect("an answer, not a client timeout");
    assert_eq!(answer.status, "SERVFAIL");
    // Each timed-out attempt (three passes over the one upstream) left its connection behind:
    // the first went on the warm connection, the second and third each on a new one.
    assert_eq!(upstream.count(&silent, "tcp"), 3);
    assert_eq!(upstream.tcp_connections(), 3);
    let after = unique_name("after");
    assert_eq!(dig(k.addr, &[&after, "A"]).answers[0].3, "192.0.2.1");
    assert_eq!(upstream.tcp_connections(), 4);
}

#[test]
fn rfc7766_6_2_1_a_tcp_upstream_connection_is_reused_and_reopened_after_the_upstream_closes_it() {
    let upstream = TestUpstream::start();
    // One connection for every miss: no loop probe beside them (upstream.loopProbe).
    let k = Kudurru::builder(&[format!("tcp://{}", upstream.addr)])
        .cores(1)
        .env("KUDURRU_UPSTREAM__LOOPPROBE", "false")
        .start();
    let names: Vec<String> = (0..20).map(|i| unique_name(&format!("reuse{i}"))).collect();
    for name in &names {
        assert_eq!(dig(k.addr, &[name, "A"]).answers[0].3, "192.0.2.1");
    }
    // Concurrent misses share the connection too (pipelined, matched by ID).
    let burst: Vec<String> = (0..30).map(|i| unique_name(&format!("burst{i}"))).collect();
    let threads: Vec<_> = burst
        .iter()
        .cloned()
        .map(|name| {
            let addr = k.addr;
            thread::spawn(move || dig(addr, &[&name, "A"]).answers[0].3.clone())
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), "192.0.2.1");
    }
    for name in names.iter().chain(&burst) {
        assert_eq!(upstream.count(name, "tcp"), 1, "{name} asked once");
    }
    assert_eq!(
        upstream.tcp_connections(),
        1,
        "50 misses over one connection"
    );
    let (_, metrics) = k.ops_get("/metrics");
    let opened = format!(
        "kudurru_upstream_tcp_connections_total{{upstream=\"tcp://{}\"}} 1\n",
        upstream.addr
    );
    assert!(metrics.contains(&opened), "{metrics}");

    // The test upstream closes a connection after 5 s without a query: the next miss is
    // answered over a new one.
    thread::sleep(Duration::from_millis(5600));
    let later = unique_name("reopened");
    assert_eq!(dig(k.addr, &[&later, "A"]).answers[0].3, "192.0.2.1");
    assert_eq!(upstream.count(&later, "tcp"), 1);
    assert_eq!(upstream.tcp_connections(), 2);
}
