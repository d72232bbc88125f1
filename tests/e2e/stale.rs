//! Serve-stale (RFC 8767), prefetch and Extended DNS Errors (RFC 8914) against the real
//! binary: an upstream that goes silent gets its names answered stale (TTL 30, EDE 3) and
//! fresh again once it answers; `cache.serveStale` off or `cache.staleMaxAge` passed gives
//! SERVFAIL with EDE 22; prefetch keeps a name hot through its TTL with no miss; a blocked
//! name carries EDE 15.

use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{DigAnswer, Kudurru, TestUpstream, dig, unique_name};
use serde_json::json;

/// The Extended DNS Error code dig printed, if any (`; EDE: 3 (Stale Answer)`).
fn ede(answer: &DigAnswer) -> Option<u16> {
    answer
        .raw
        .split("; EDE: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|code| code.trim_end_matches(':').parse().ok())
}

/// The name's A answer's TTL (`None`: no answer records).
fn ttl(answer: &DigAnswer) -> Option<u32> {
    answer.answers.first().map(|a| a.1)
}

/// Asks `name` A until `done` holds for the answer (at most 10 s, every 100 ms), checking
/// each earlier answer with `meanwhile`; returns the answer that held.
fn until(
    k: &Kudurru,
    name: &str,
    mut done: impl FnMut(&DigAnswer) -> bool,
    mut meanwhile: impl FnMut(&DigAnswer),
) -> DigAnswer {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = dig(k.addr, &[name, "A"]);
        if done(&answer) {
            return answer;
        }
        assert!(Instant::now() < give_up, "never came: {}", answer.raw);
        meanwhile(&answer);
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rfc8767_an_upstream_gone_away_gets_stale_answers_with_ede_3_then_fresh_ones() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .cores(2)
        // Prefetch would refresh the name before it expires; here it must expire.
        .env("KUDURRU_CACHE__PREFETCH", "false")
        .start();
    let name = unique_name("ttl1-stale-");
    let first = dig(k.addr, &[&name, "A"]);
    assert_eq!((first.status.as_str(), ede(&first)), ("NOERROR", None));
    assert!(ttl(&first).is_some_and(|t| t <= 1), "{}", first.raw);

    upstream.set_silent(true);
    thread::sleep(Duration::from_millis(1200));
    // Expired, upstream silent: after upstream.staleAnswerTimeout (or the upstream's
    // failure), the expired answer with TTL 30 and EDE 3, from both cores.
    for source in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        let stale = dig(k.addr, &["-b", source, &name, "A"]);
        assert_eq!(stale.status, "NOERROR", "{}", stale.raw);
        assert_eq!(stale.answers.len(), 1, "{}", stale.raw);
        assert_eq!(stale.answers[0].3, "192.0.2.1");
        assert_eq!(ttl(&stale), Some(30), "{}", stale.raw);
        assert_eq!(ede(&stale), Some(3), "{}", stale.raw);
    }
    // Without EDNS: the same stale answer, no OPT.
    let plain = dig(k.addr, &["+noedns", &name, "A"]);
    assert_eq!(
        (ttl(&plain), plain.edns),
        (Some(30), false),
        "{}",
        plain.raw
    );
    assert!(k.metric_sum("kudurru_stale_answers_total") >= 4.0);

    // Back: a refresh in the background (the next one after a failed refresh gets the stale
    // answer at once) and then a fresh answer, without EDE.
    upstream.set_silent(false);
    let fresh = until(
        &k,
        &name,
        |a| ede(a).is_none(),
        |a| {
            assert_eq!((ttl(a), ede(a)), (Some(30), Some(3)), "{}", a.raw);
        },
    );
    assert_eq!(fresh.status, "NOERROR");
    assert!(ttl(&fresh).is_some_and(|t| t <= 1), "{}", fresh.raw);
}

#[test]
fn serve_stale_off_answers_servfail_with_ede_22() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_CACHE__SERVESTALE", "false")
        .env("KUDURRU_CACHE__PREFETCH", "false")
        .start();
    let name = unique_name("ttl1-nostale-");
    assert_eq!(dig(k.addr, &[&name, "A"]).status, "NOERROR");
    upstream.set_silent(true);
    thread::sleep(Duration::from_millis(1200));
    let failed = dig(k.addr, &[&name, "A"]);
    assert_eq!(failed.status, "SERVFAIL", "{}", failed.raw);
    assert_eq!(ede(&failed), Some(22), "{}", failed.raw);
    // A client without EDNS gets no OPT, so no EDE.
    let plain = dig(k.addr, &["+noedns", &name, "A"]);
    assert_eq!((plain.status.as_str(), plain.edns), ("SERVFAIL", false));
    assert_eq!(k.metric_sum("kudurru_stale_answers_total"), 0.0);
}

#[test]
fn stale_max_age_bounds_how_long_an_expired_answer_is_served() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_CACHE__STALEMAXAGE", "2s")
        .env("KUDURRU_CACHE__PREFETCH", "false")
        .env("KUDURRU_UPSTREAM__STALEANSWERTIMEOUT", "300ms")
        .start();
    let name = unique_name("ttl1-maxage-");
    assert_eq!(dig(k.addr, &[&name, "A"]).status, "NOERROR");
    upstream.set_silent(true);
    thread::sleep(Duration::from_millis(1100));
    let stale = dig(k.addr, &[&name, "A"]);
    assert_eq!(
        (ttl(&stale), ede(&stale)),
        (Some(30), Some(3)),
        "{}",
        stale.raw
    );
    // Past expiry + staleMaxAge (1 s + 2 s): no stale answer any more.
    thread::sleep(Duration::from_millis(2100));
    let failed = dig(k.addr, &[&name, "A"]);
    assert_eq!(failed.status, "SERVFAIL", "{}", failed.raw);
    assert_eq!(ede(&failed), Some(22), "{}", failed.raw);
}

#[test]
fn prefetch_keeps_a_hot_name_cached_across_its_ttl() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).cores(2).start();
    let name = unique_name("ttl3-hot-");
    let first = dig(k.addr, &[&name, "A"]);
    assert_eq!(first.status, "NOERROR");
    // Asked every 100 ms from both cores over three lifetimes: each lifetime's last tenth
    // (0.3 s) sees a hit that refreshes it in the background before it expires.
    let end = Instant::now() + Duration::from_millis(8000);
    let mut asked = 1;
    while Instant::now() < end {
        let source = format!("127.0.0.{}", 1 + asked % 4);
        let answer = dig(k.addr, &["-b", &source, &name, "A"]);
        assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
        assert_eq!(ede(&answer), None, "never stale: {}", answer.raw);
        asked += 1;
        thread::sleep(Duration::from_millis(100));
    }
    // The counters reach the metrics once a second.
    thread::sleep(Duration::from_millis(1100));
    let prefetched = k.metric_sum("kudurru_prefetch_total");
    assert!(prefetched >= 2.0, "a refresh per lifetime: {prefetched}");
    assert_eq!(
        upstream.total(&name) as f64,
        1.0 + prefetched,
        "the first miss and the prefetches, nothing else"
    );
    assert_eq!(
        k.metric_sum("kudurru_cache_misses_total"),
        1.0,
        "only the first query missed ({asked} asked)"
    );
    assert_eq!(k.metric_sum("kudurru_refresh_failures_total"), 0.0);
}

#[test]
fn rfc8914_a_blocked_answer_carries_ede_15() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let admin = k.token("admin", None);
    for (plural, name, spec) in [
        (
            "blocklists",
            "inline",
            json!({"sources": [{"inline": ["ede-blocked.example"]}]}),
        ),
        (
            "policies",
            "all",
            json!({"clientGroups": ["default"], "denyLists": ["inline"]}),
        ),
    ] {
        let body = json!({"metadata": {"name": name}, "spec": spec}).to_string();
        let (status, reply) = crate::objects::call(
            &k,
            "POST",
            &format!("/api/v1/{plural}"),
            &admin,
            Some(("application/json", &body)),
        );
        assert_eq!(status, 201, "{plural}/{name}: {reply}");
    }
    let blocked = until(
        &k,
        "ede-blocked.example",
        |a| a.status == "NXDOMAIN",
        |_| {},
    );
    assert_eq!(ede(&blocked), Some(15), "{}", blocked.raw);
}
