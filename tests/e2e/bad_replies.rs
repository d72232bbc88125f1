//! Recorded bad upstream replies replayed by a fault-injecting upstream (issue 32's "recorded
//! bad replies"): a reply with another ID or another question's class is not taken for the
//! answer (the attempt times out: SERVFAIL); TC=1 over UDP and again over TCP ends in
//! SERVFAIL, not a retry loop; an oversized reply and a CNAME pointing at itself are not
//! served as answers. After each, nothing of the bad reply is cached: once the short
//! failure TTL (RFC 9520, `cache.servfailTTL` = 1 s) has passed, the name goes upstream again.

use std::time::{Duration, Instant};

use kudurru_e2e::{FaultyUpstream, Kudurru, dig};

#[test]
fn bad_upstream_replies_get_servfail_and_nothing_of_them_is_cached() {
    let upstream = FaultyUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_UPSTREAM__TIMEOUT", "300ms")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "1s")
        .env("KUDURRU_CACHE__SERVFAILTTL", "1")
        .start();
    // (name, type, the client's rcode, upstream queries the first resolution makes; `None`:
    // as many as the attempts' timeouts allow within the resolve timeout)
    for (name, qtype, rcode, sends) in [
        // Ignored as foreign (possibly spoofed): the attempt and its retries time out.
        ("wrongid-1.bad.example", "A", "SERVFAIL", None),
        ("wrongclass-1.bad.example", "A", "SERVFAIL", None),
        // TC=1 over UDP, asked again over TCP, TC=1 again: a failure, not a loop.
        ("tcloop-1.bad.example", "A", "SERVFAIL", Some(2)),
        // 10 KB over UDP, past any payload size kudurru advertises: unusable, not retried.
        ("oversized-1.bad.example", "TXT", "SERVFAIL", Some(1)),
        // A CNAME to itself is out of any chain the scrubber keeps: no record is served (Unbound
        // answers SERVFAIL here; kudurru a NODATA without SOA, which is never cached).
        ("cnameloop-1.bad.example", "A", "NOERROR", Some(1)),
    ] {
        let fqdn = format!("{name}.");
        let first = dig(k.addr, &["+tries=1", "+time=5", name, qtype]);
        assert_eq!(first.status, rcode, "{name}: {}", first.raw);
        assert!(first.answers.is_empty(), "{name}: {:?}", first.answers);
        let sent = upstream.asked(&fqdn);
        assert!(sent >= 1, "{name} went upstream");
        if let Some(sends) = sends {
            assert_eq!(sent, sends, "{name}");
        }
        // Past the failure TTL the name goes upstream again: nothing of the bad reply stayed.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let again = dig(k.addr, &["+tries=1", "+time=5", name, qtype]);
            assert_eq!(again.status, rcode, "{name}: {}", again.raw);
            assert!(again.answers.is_empty(), "{name}: {:?}", again.answers);
            if upstream.asked(&fqdn) > sent {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} was answered from the cache for 10 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // A good reply from the same upstream is answered and cached (asked once for two queries).
    for _ in 0..2 {
        let good = dig(k.addr, &["good-1.bad.example", "A"]);
        assert_eq!(good.status, "NOERROR");
        assert_eq!(good.answers.len(), 1, "{:?}", good.answers);
    }
    assert_eq!(upstream.asked("good-1.bad.example."), 1);
}
