//! Forwarding and caching through a real client.

use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, TestUpstream, dig, try_dig, unique_name};

#[test]
fn rfc1035_answer_is_forwarded_then_served_from_cache_with_decremented_ttl() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("www");
    let first = dig(k.addr, &[&name, "A"]);
    assert_eq!(first.status, "NOERROR");
    assert!(
        first.flags.contains(&"ra".to_owned()) && first.flags.contains(&"rd".to_owned()),
        "{:?}",
        first.flags
    );
    assert_eq!(first.answers.len(), 1);
    assert_eq!(first.answers[0].3, "192.0.2.1");
    assert_eq!(first.answers[0].1, 300);
    thread::sleep(Duration::from_millis(1100));
    let second = dig(k.addr, &[&name, "A"]);
    assert_eq!(second.answers[0].3, "192.0.2.1");
    assert!(
        second.answers[0].1 < 300,
        "TTL decremented: {}",
        second.answers[0].1
    );
    assert_eq!(upstream.total(&name), 1, "second query must be a cache hit");
    // Cache counters are copied from the core once a second.
    thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        k.metric_sum("kudurru_cache_hits_total"),
        1.0,
        "the second query counted as a hit"
    );
    assert_eq!(
        k.metric_sum("kudurru_cache_misses_total"),
        1.0,
        "the first query counted as a miss"
    );
}

#[test]
fn dns_0x20_case_of_the_query_is_preserved_on_cache_hits() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("case");
    dig(k.addr, &[&name, "A"]);
    let mixed: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    let hit = dig(k.addr, &[&mixed, "A"]);
    assert!(
        hit.raw.contains(&format!(";{mixed}")),
        "question keeps the client's case:\n{}",
        hit.raw
    );
    assert_eq!(upstream.total(&name), 1);
}

#[test]
fn rfc2308_negative_answers_are_cached_with_the_soa_minimum() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("nx-");
    let first = dig(k.addr, &[&name, "A"]);
    assert_eq!(first.status, "NXDOMAIN");
    assert_eq!(first.authority.len(), 1);
    assert_eq!(first.authority[0].2, "SOA");
    assert_eq!(first.authority[0].1, 60, "SOA TTL = min(3600, MINIMUM 60)");
    let second = dig(k.addr, &[&name, "A"]);
    assert_eq!(second.status, "NXDOMAIN");
    let nodata = unique_name("nodata-");
    assert_eq!(dig(k.addr, &[&nodata, "AAAA"]).status, "NOERROR");
    dig(k.addr, &[&nodata, "AAAA"]);
    assert_eq!(upstream.total(&name), 1);
    assert_eq!(upstream.total(&nodata), 1);
}

#[test]
fn ttl_clamps_apply_from_configuration() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_CACHE__MINTTL", "120")
        .env("KUDURRU_CACHE__MAXTTL", "200")
        .start();
    let low = unique_name("ttl5-");
    assert_eq!(dig(k.addr, &[&low, "A"]).answers[0].1, 120);
    let high = unique_name("ttl9000-");
    assert_eq!(dig(k.addr, &[&high, "A"]).answers[0].1, 200);
}

#[test]
fn rfc1035_4_2_1_truncated_upstream_reply_is_retried_over_tcp_and_client_gets_tc() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("big-");
    // dig without +ignore retries over TCP itself when it sees TC, as a stub should.
    let udp_only = dig(k.addr, &[&name, "TXT", "+bufsize=512", "+ignore"]);
    assert!(
        udp_only.flags.contains(&"tc".to_owned()),
        "{}",
        udp_only.raw
    );
    assert!(udp_only.answers.is_empty());
    assert_eq!(upstream.count(&name, "udp"), 1);
    assert_eq!(
        upstream.count(&name, "tcp"),
        1,
        "kudurru retried over TCP after TC"
    );
    let full = dig(k.addr, &[&name, "TXT", "+tcp"]);
    assert_eq!(full.answers.len(), 9);
    let large_udp = dig(k.addr, &[&name, "TXT", "+bufsize=4096", "+ignore"]);
    assert_eq!(
        large_udp.answers.len(),
        9,
        "fits a 1232-byte payload: {}",
        large_udp.raw
    );
    assert_eq!(
        upstream.total(&name),
        2,
        "all later answers came from the cache"
    );
    assert!(k.metric_sum("kudurru_upstream_tcp_retries_total") >= 1.0);
}

#[test]
fn upstream_servfail_and_unreachable_upstream_answer_servfail() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("servfail-");
    assert_eq!(dig(k.addr, &[&name, "A"]).status, "SERVFAIL");
    // RFC 9520: the failure is cached briefly; the next query does not reach the upstream.
    assert_eq!(dig(k.addr, &[&name, "A"]).status, "SERVFAIL");
    assert_eq!(upstream.total(&name), 1);

    let closed = format!("udp://127.0.0.1:{}", kudurru_e2e::free_port());
    let k = Kudurru::builder(&[closed]).start();
    let started = Instant::now();
    assert_eq!(
        dig(k.addr, &[&unique_name("unreach"), "A"]).status,
        "SERVFAIL"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(k.metric_sum("kudurru_upstream_exhausted_total") >= 1.0);
}

#[test]
fn silent_upstream_times_out_and_the_next_upstream_answers() {
    let silent = TestUpstream::start();
    let good = TestUpstream::start();
    // The first upstream is a bound socket that never answers anything.
    let black_hole = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let hole = format!("udp://{}", black_hole.local_addr().unwrap());
    let k = Kudurru::builder(&[hole, good.udp_url()])
        .env("KUDURRU_UPSTREAM__TIMEOUT", "300ms")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "2s")
        .start();
    for _ in 0..4 {
        let name = unique_name("retry");
        let answer = dig(k.addr, &[&name, "A"]);
        assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
        assert_eq!(good.total(&name), 1);
    }
    // Only a silent upstream: SERVFAIL within upstream.resolveTimeout.
    let k = Kudurru::builder(&[silent.udp_url()])
        .env("KUDURRU_UPSTREAM__TIMEOUT", "300ms")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "1s")
        .start();
    let started = Instant::now();
    let answer =
        try_dig(k.addr, &[&unique_name("silent-"), "A"]).expect("an answer, not a client timeout");
    assert_eq!(answer.status, "SERVFAIL");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "bounded by resolveTimeout: {:?}",
        started.elapsed()
    );
    assert!(k.metric_sum("kudurru_upstream_errors_total") >= 1.0);
}

/// Issue 32 item 2: an upstream that always answers in 2 s, past the default 1.5 s
/// `upstream.timeout`, is answered at its own pace: the first attempt stays open while the
/// second goes, and its reply is the answer (not SERVFAIL after three sends, each reply dropped
/// as belonging to an abandoned attempt).
#[test]
fn a_steadily_slow_upstream_is_answered_by_an_attempt_kept_open() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let mut second_sends = 0;
    for _ in 0..2 {
        let name = unique_name("slow2s-");
        let started = Instant::now();
        let answer = try_dig(k.addr, &[&name, "A", "+tries=1", "+timeout=8"])
            .expect("an answer, not a client timeout");
        assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
        let sends = upstream.total(&name);
        assert!(
            (1..=2).contains(&sends),
            "{sends} upstream sends for one query"
        );
        second_sends += sends - 1;
        assert!(
            started.elapsed() < Duration::from_millis(3500),
            "answered when the first reply came: {:?}",
            started.elapsed()
        );
    }
    // Only replies to attempts given up after the answer came may arrive unclaimed.
    thread::sleep(Duration::from_millis(2200));
    assert!(
        k.metric_sum("kudurru_upstream_mismatched_replies_total") <= second_sends as f64,
        "no reply to an open attempt was dropped as foreign"
    );
}

#[test]
fn spoofed_reply_with_wrong_id_is_ignored_and_the_genuine_one_accepted() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("spoof-");
    let answer = dig(k.addr, &[&name, "A"]);
    assert_eq!(answer.status, "NOERROR");
    assert_eq!(answer.answers[0].3, "192.0.2.1");
    assert_eq!(
        k.metric_sum("kudurru_upstream_mismatched_replies_total"),
        1.0
    );
}

#[test]
fn identical_concurrent_misses_share_one_upstream_query() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("slow-");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (addr, name) = (k.addr, name.clone());
            thread::spawn(move || dig(addr, &[&name, "A"]).status)
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), "NOERROR");
    }
    assert_eq!(upstream.total(&name), 1);
    assert!(k.metric_sum("kudurru_coalesced_queries_total") >= 1.0);
}

#[test]
fn do_bit_is_part_of_the_cache_key_and_non_edns_clients_get_no_opt() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("dnssec");
    dig(k.addr, &[&name, "A", "+dnssec"]);
    dig(k.addr, &[&name, "A"]);
    assert_eq!(
        upstream.total(&name),
        2,
        "DO=1 and DO=0 are different questions"
    );
    let plain = dig(k.addr, &[&name, "A", "+noedns"]);
    assert!(
        !plain.edns,
        "a client that sent no OPT gets none:\n{}",
        plain.raw
    );
    assert_eq!(
        upstream.total(&name),
        2,
        "EDNS presence is not part of the key"
    );
}
