//! What ingress answers itself rather than resolving (issue 32 items 5 and 6): each answer
//! carries the client's question and, when the client sent one, an OPT record (RFC 6891 §7).

use std::time::Instant;

use domain::base::Message;
use kudurru_core::wire::{ReplyOptions, rcode, rtype};
use kudurru_core::{Client, Decision, Limiter, LocalNames, RateLimit, ServerIdentity, Stage};

/// A query for `a.example` of `qtype`, with an OPT carrying `options` when given.
fn query(qtype: u16, options: Option<&[u8]>) -> Vec<u8> {
    let mut m = vec![
        0x12,
        0x34,
        0x01,
        0x00,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        u8::from(options.is_some()),
    ];
    m.extend_from_slice(b"\x01a\x07example\x00");
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    if let Some(options) = options {
        m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0]);
        m.extend_from_slice(&(options.len() as u16).to_be_bytes());
        m.extend_from_slice(options);
    }
    m
}

/// Runs ingress on `msg` as a datagram (or not) and returns the response it wrote, if any.
fn answer(msg: &[u8], datagram: bool) -> Option<Vec<u8>> {
    let now = Instant::now();
    let local = LocalNames::new(ServerIdentity {
        identity: "x".into(),
        version: "v".into(),
    });
    let options = ReplyOptions::udp(1232);
    let ratelimit = RateLimit::default();
    // The client below (192.0.2.1) is allowed: these tests are about what follows the ACL.
    let acl = kudurru_core::acl::AccessList::new(
        &["192.0.2.0/24".parse().unwrap()],
        &[],
        kudurru_core::acl::AclAction::Refuse,
    );
    let policy = kudurru_core::policy::PolicyIndex::default();
    let zones = kudurru_core::zone::Zones::builtin();
    let stage = Stage {
        acl: &acl,
        policy: &policy,
        zones: &zones,
        local: &local,
        options: &options,
        ratelimit: &ratelimit,
        lameduck: false,
    };
    let client = Client {
        addr: "192.0.2.1".parse().unwrap(),
        datagram,
        id: None,
        sni: None,
    };
    let mut limiter = Limiter::new(64, 1, now);
    let mut out = Vec::new();
    match kudurru_core::ingress(msg, &stage, client, &mut limiter, now, &mut out) {
        Decision::Respond => Some(out),
        Decision::Drop
        | Decision::Resolve(_)
        | Decision::Refused { .. }
        | Decision::Blocked { .. }
        | Decision::Chase { .. }
        | Decision::Control(_)
        | Decision::Transfer { .. } => None,
    }
}

/// The response's rcode, after checking it echoes the question and the OPT as the query had.
fn checked_rcode(query: &[u8], response: &[u8]) -> u8 {
    let msg = Message::from_slice(response).expect("the answer parses");
    assert!(msg.header().qr());
    assert_eq!(msg.header().id(), 0x1234);
    assert_eq!(msg.header_counts().qdcount(), 1);
    assert_eq!(&response[12..25], &query[12..25], "the question is echoed");
    let sent_opt = query[11] == 1;
    let opt = msg.opt();
    assert_eq!(
        opt.is_some(),
        sent_opt,
        "an OPT exactly when the client sent one"
    );
    if let Some(opt) = opt {
        assert!(opt.dnssec_ok(), "DO is echoed");
    }
    msg.header().rcode().to_int()
}

#[test]
fn rfc6895_3_1_meta_qtypes_are_answered_formerr_locally() {
    let meta = [
        0,
        rtype::OPT,
        128,
        248,
        rtype::TKEY,
        rtype::TSIG,
        rtype::MAILB,
        rtype::MAILA,
    ];
    for qtype in meta {
        for options in [None, Some(&[][..])] {
            for datagram in [true, false] {
                let q = query(qtype, options);
                let out = answer(&q, datagram).expect("answered, not resolved");
                assert_eq!(checked_rcode(&q, &out), rcode::FORMERR, "qtype {qtype}");
            }
        }
    }
}

#[test]
fn rfc5936_4_2_zone_transfers_are_refused_on_every_transport() {
    for qtype in [rtype::AXFR, rtype::IXFR] {
        for datagram in [true, false] {
            let q = query(qtype, Some(&[]));
            let out = answer(&q, datagram).expect("answered, not resolved");
            assert_eq!(checked_rcode(&q, &out), rcode::REFUSED, "qtype {qtype}");
        }
    }
    assert!(
        answer(&query(255, None), true).is_none(),
        "ANY is still resolved"
    );
    assert!(answer(&query(rtype::AAAA, None), true).is_none());
}

#[test]
fn rfc7873_5_2_2_a_malformed_cookie_is_answered_formerr_with_an_opt() {
    // COOKIE (10) of 12 bytes: neither a client cookie alone (8) nor one with a server cookie
    // (16 to 40).
    let q = query(
        rtype::A,
        Some(&[0, 10, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
    );
    for datagram in [true, false] {
        let out = answer(&q, datagram).expect("answered, not resolved");
        assert_eq!(checked_rcode(&q, &out), rcode::FORMERR);
    }
    let good = query(rtype::A, Some(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]));
    assert!(
        answer(&good, true).is_none(),
        "a client cookie alone is resolved"
    );
}

#[test]
fn rfc7871_6_client_subnet_with_source_prefix_200_is_answered_formerr_with_an_opt() {
    // ECS (8): family 1, source prefix 200, scope 0, four address octets.
    let q = query(rtype::A, Some(&[0, 8, 0, 8, 0, 1, 200, 0, 192, 0, 2, 1]));
    let out = answer(&q, true).expect("answered, not resolved");
    assert_eq!(checked_rcode(&q, &out), rcode::FORMERR);
    let good = query(rtype::A, Some(&[0, 8, 0, 7, 0, 1, 24, 0, 192, 0, 2]));
    assert!(answer(&good, true).is_none(), "a /24 is resolved");
}

/// The policy stage sits after the limiter: a name a policy blocks is answered from ingress
/// (never resolved), a name it does not block resolves, and an index with no policy passes
/// everything.
#[test]
fn a_blocked_name_is_answered_by_ingress_and_an_empty_index_passes() {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use kudurru_core::policy::{
        self, BlockResponse, BuildInputs, Format, ListId, ListMode, Matcher, PolicyIndex,
        PolicySource, PolicySpec,
    };

    let parsed = policy::parse(b"||example^\n", Format::Adblock, 100);
    let matcher = Arc::new(Matcher::new(5).with_list(ListId(0), ListMode::Deny, &parsed));
    let lists = HashMap::from([("ads".to_owned(), (ListId(0), Format::Adblock))]);
    let spec = PolicySpec {
        client_groups: vec!["default".into()],
        deny_lists: vec!["ads".into()],
        allow_lists: vec![],
        block_response: BlockResponse::Nxdomain,
        block_ttl: None,
        rewrites: vec![],
        schedule: None,
    };
    let policies = [PolicySource {
        name: "everyone",
        spec: &spec,
    }];
    let (blocking, _) = PolicyIndex::build(BuildInputs {
        matcher: &matcher,
        lists: &lists,
        groups: &[],
        policies: &policies,
        now: "2026-01-01T00:00:00Z".parse().unwrap(),
        block_ttl: Duration::from_secs(60),
        client_id_domains: &[],
        cores: 1,
    });
    let now = Instant::now();
    let local = LocalNames::new(ServerIdentity {
        identity: "x".into(),
        version: "v".into(),
    });
    let options = ReplyOptions::udp(1232);
    let ratelimit = RateLimit::default();
    let acl = kudurru_core::acl::AccessList::new(
        &["192.0.2.0/24".parse().unwrap()],
        &[],
        kudurru_core::acl::AclAction::Refuse,
    );
    let empty = PolicyIndex::default();
    let zones = kudurru_core::zone::Zones::builtin();
    let mut limiter = Limiter::new(64, 1, now);
    let client = Client {
        addr: "192.0.2.1".parse().unwrap(),
        datagram: true,
        id: None,
        sni: None,
    };
    let q = query(rtype::A, Some(&[]));
    for (index, blocks) in [(&blocking, true), (&empty, false)] {
        let stage = Stage {
            acl: &acl,
            policy: index,
            zones: &zones,
            local: &local,
            options: &options,
            ratelimit: &ratelimit,
            lameduck: false,
        };
        let mut out = Vec::new();
        let decision = kudurru_core::ingress(&q, &stage, client, &mut limiter, now, &mut out);
        if blocks {
            let Decision::Blocked { blocked, answered } = decision else {
                panic!("not blocked: {decision:?}");
            };
            assert!(answered);
            assert_eq!(index.policy_name(blocked.policy), Some("everyone"));
            assert_eq!(blocked.list, Some(ListId(0)));
            assert_eq!(checked_rcode(&q, &out), rcode::NXDOMAIN);
        } else {
            assert!(matches!(decision, Decision::Resolve(_)), "{decision:?}");
        }
    }
}
