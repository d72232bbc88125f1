//! Arbitrary bytes through kudurru's query scanner and the ingress stage: never panics; what
//! scans agrees with `domain` on the question and re-encodes to a query that scans to the same
//! key; every response written parses and answers the query's ID.
#![no_main]

use domain::base::Message;
use kudurru_core::wire::{self, Query};
use std::time::Instant;

use kudurru_core::{
    AccessList, AclAction, Client, Decision, Limiter, LocalNames, RateLimit, ServerIdentity, Stage,
    ingress,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(query) = Query::parse(data) {
        // Differential check: domain must see the same question.
        let msg = Message::from_slice(data).expect("a scanned query is a message");
        let question = msg
            .sole_question()
            .expect("a scanned query has one question");
        assert_eq!(question.qtype().to_int(), query.qtype());
        assert_eq!(question.qclass().to_int(), query.qclass());
        // Re-encoded (as kudurru sends it upstream) it scans back to the same key.
        let mut again = Vec::new();
        wire::write_upstream_query(query.key(), query.id(), &mut again);
        let reparsed = Query::parse(&again).expect("a re-encoded query scans");
        assert_eq!(reparsed.key(), query.key());
        assert_eq!(reparsed.id(), query.id());
    }
    let local = LocalNames::new(ServerIdentity {
        identity: "fuzz".into(),
        version: "fuzz".into(),
    });
    let mut out = Vec::new();
    // The limiter on and tight, so slips (TC=1 answers) are fuzzed too.
    let ratelimit = RateLimit {
        qps: 1,
        burst: 1,
        slip: 1,
        ..RateLimit::default()
    };
    let now = Instant::now();
    let mut limiter = Limiter::new(64, 0, now);
    // Every client served: the access list is checked before anything fuzzed here.
    let acl = AccessList::new(&["::/0".parse().unwrap()], &[], AclAction::Refuse);
    let policy = kudurru_core::policy::PolicyIndex::default();
    // The built-in zones, as the default settings serve them (localhost, the RFC 6303 reverses).
    static ZONES: std::sync::OnceLock<kudurru_core::zone::Zones> = std::sync::OnceLock::new();
    let zones = ZONES.get_or_init(kudurru_core::zone::Zones::builtin);
    let stage = Stage {
        acl: &acl,
        policy: &policy,
        zones,
        local: &local,
        options: &wire::ReplyOptions::udp(1232),
        ratelimit: &ratelimit,
        lameduck: data.first().is_some_and(|b| b & 1 == 1),
    };
    let client = Client {
        addr: std::net::Ipv4Addr::LOCALHOST.into(),
        datagram: true,
        id: None,
        sni: None,
    };
    // Twice: the second pass is over the limit and slips.
    for _ in 0..2 {
        if let Decision::Respond = ingress(data, &stage, client, &mut limiter, now, &mut out) {
            let reply = Message::from_slice(&out).expect("responses parse");
            assert!(reply.header().qr());
            assert_eq!(wire::message_id(&out), wire::message_id(data));
        }
    }
});
