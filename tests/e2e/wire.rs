//! Bad input on the wire, EDNS, local names: every bad packet is followed by a normal query that
//! must still work.

use std::time::Duration;

use kudurru_core::wire::{self, rcode, rtype};
use kudurru_e2e::{Kudurru, TestUpstream, dig, query_bytes, udp_exchange, unique_name};

const WAIT: Duration = Duration::from_millis(700);

fn assert_still_serving(k: &Kudurru) {
    let answer = dig(k.addr, &[&unique_name("after"), "A"]);
    assert_eq!(
        answer.status, "NOERROR",
        "server still answers after bad input"
    );
}

#[test]
fn garbage_and_replies_get_no_answer_at_all() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    for garbage in [&b""[..], b"\x00", b"hello", &[0xff; 11]] {
        assert_eq!(udp_exchange(k.addr, garbage, WAIT), None, "{garbage:?}");
    }
    let mut reply = query_bytes(7, "example.com", rtype::A, 1, None);
    reply[2] |= 0x80;
    assert_eq!(
        udp_exchange(k.addr, &reply, WAIT),
        None,
        "QR=1 is never answered"
    );
    assert_still_serving(&k);
    assert!(
        k.metric("kudurru_dns_responses_total{rcode=\"none\"}")
            .unwrap()
            >= 5.0
    );
}

#[test]
fn rfc1035_malformed_queries_get_formerr() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let good = query_bytes(0x4242, "example.com", rtype::A, 1, None);
    let mut two_questions = good.clone();
    two_questions[5] = 2;
    let truncated = good[..good.len() - 2].to_vec();
    let mut bad_label = good.clone();
    bad_label[12] = 0x80;
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"junk");
    for bad in [two_questions, truncated, bad_label, trailing] {
        let reply = udp_exchange(k.addr, &bad, WAIT).expect("FORMERR answer");
        assert_eq!(wire::message_id(&reply), Some(0x4242));
        assert_eq!(wire::header_rcode(&reply), Some(rcode::FORMERR), "{bad:?}");
        assert_ne!(wire::header_flags(&reply).unwrap() & 0x8000, 0, "QR set");
    }
    assert_still_serving(&k);
}

#[test]
fn rfc1035_unknown_opcode_is_notimp() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let mut status = query_bytes(9, "example.com", rtype::A, 1, None);
    status[2] |= 2 << 3; // STATUS
    let reply = udp_exchange(k.addr, &status, WAIT).expect("NOTIMP answer");
    assert_eq!(wire::header_rcode(&reply), Some(rcode::NOTIMP));
    assert_eq!(
        (wire::header_flags(&reply).unwrap() >> 11) & 0xf,
        2,
        "opcode echoed"
    );
    assert_still_serving(&k);
}

#[test]
fn rfc6891_6_1_3_edns_version_1_gets_badvers_and_opt_is_echoed() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let answer = dig(
        k.addr,
        &[&unique_name("edns"), "A", "+edns=1", "+noednsneg"],
    );
    assert_eq!(answer.status, "BADVERS", "{}", answer.raw);
    let answer = dig(k.addr, &[&unique_name("edns"), "A", "+bufsize=1400"]);
    assert!(answer.edns);
    assert!(
        answer.raw.contains("udp: 1232"),
        "kudurru advertises its own payload size:\n{}",
        answer.raw
    );
    let mut two_opts = query_bytes(5, "example.com", rtype::A, 1, Some((1232, 0, false)));
    let opt = two_opts[two_opts.len() - 11..].to_vec();
    two_opts.extend_from_slice(&opt);
    two_opts[11] = 2;
    let reply = udp_exchange(k.addr, &two_opts, WAIT).expect("FORMERR for two OPT records");
    assert_eq!(wire::header_rcode(&reply), Some(rcode::FORMERR));
    assert_still_serving(&k);
}

#[test]
fn non_in_classes_are_refused_except_chaos_identity() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SERVER__IDENTITY", "edge-7")
        .start();
    assert_eq!(
        dig(k.addr, &["example.com", "A", "-c", "HS"]).status,
        "REFUSED"
    );
    let id = dig(k.addr, &["id.server", "TXT", "-c", "CH"]);
    assert_eq!(id.status, "NOERROR");
    assert_eq!(id.answers[0].3, "\"edge-7\"");
    let version = dig(k.addr, &["version.bind", "TXT", "-c", "CH"]);
    assert!(
        version.answers[0].3.starts_with("\"kudurru "),
        "{}",
        version.raw
    );
    assert_eq!(
        dig(k.addr, &["other.server", "TXT", "-c", "CH"]).status,
        "REFUSED"
    );
    assert_eq!(upstream.total("example.com."), 0);
}

#[test]
fn rfc6761_and_rfc6303_local_names_never_reach_the_upstream() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let lh = dig(k.addr, &["localhost", "A"]);
    assert_eq!(lh.answers[0].3, "127.0.0.1");
    assert!(lh.flags.contains(&"aa".to_owned()));
    assert_eq!(dig(k.addr, &["app.localhost", "AAAA"]).answers[0].3, "::1");
    let rev = dig(k.addr, &["-x", "192.168.1.1"]);
    assert_eq!(rev.status, "NXDOMAIN");
    assert_eq!(rev.authority[0].0, "168.192.in-addr.arpa.");
    assert_eq!(dig(k.addr, &["-x", "10.1.2.3"]).status, "NXDOMAIN");
    assert_eq!(dig(k.addr, &["-x", "127.0.0.1"]).answers[0].3, "localhost.");
    assert_eq!(dig(k.addr, &["-x", "fe80::1"]).status, "NXDOMAIN");
    assert_eq!(dig(k.addr, &["thing.invalid", "A"]).status, "NXDOMAIN");
    for name in [
        "localhost.",
        "1.1.168.192.in-addr.arpa.",
        "3.2.1.10.in-addr.arpa.",
        "thing.invalid.",
    ] {
        assert_eq!(upstream.total(name), 0, "{name} leaked upstream");
    }
    // A public reverse name is forwarded.
    dig(k.addr, &["-x", "8.8.4.4"]);
    assert_eq!(upstream.total("4.4.8.8.in-addr.arpa."), 1);
    // TEST-NET-1 is locally served (RFC 6303 §4.2).
    assert_eq!(dig(k.addr, &["-x", "192.0.2.1"]).status, "NXDOMAIN");
    assert_eq!(upstream.total("1.2.0.192.in-addr.arpa."), 0);
}

#[test]
fn rfc6891_udp_answers_respect_the_client_payload_size() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let name = unique_name("big-");
    let no_edns = query_bytes(3, &name, rtype::TXT, 1, None);
    let reply = udp_exchange(k.addr, &no_edns, Duration::from_secs(3)).expect("answer");
    assert!(reply.len() <= 512);
    assert!(wire::is_truncated(&reply));
    let edns = query_bytes(4, &name, rtype::TXT, 1, Some((4096, 0, false)));
    let reply = udp_exchange(k.addr, &edns, Duration::from_secs(3)).expect("answer");
    assert!(!wire::is_truncated(&reply));
    assert!(reply.len() > 512 && reply.len() <= 1232);
}
