//! Arbitrary bytes as a client query through the whole sans-IO pipeline of `core` (ingress,
//! health name, rate limiter, the policy stage with a list and rewrites, the built-in zones,
//! local names, cache,
//! CNAME cloaking), with an arbitrary upstream reply for misses.
//! On every output: the response parses, carries the query's ID and question (as the client
//! wrote it), fits the UDP payload limit or has TC; and the cache never serves an answer for
//! another question.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::base::Message;
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{
    AccessList, AclAction, Cache, CachedAnswer, Client, Decision, Limiter, LocalNames, RateLimit,
    ServerIdentity, Stage, TtlPolicy, ingress,
};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

/// A policy for everyone: `blocked.example` and below blocked (NXDOMAIN), an RPZ list with a
/// drop, local data and a CNAME, and rewrites to an address and to a CNAME (chased).
fn blocking() -> &'static kudurru_core::policy::PolicyIndex {
    use kudurru_core::policy::{
        self, BlockResponse, BuildInputs, Format, ListId, ListMode, Matcher, PolicyIndex,
        PolicySource, PolicySpec, Rewrite, RewriteTarget,
    };
    static INDEX: std::sync::OnceLock<PolicyIndex> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let ads = policy::parse(b"||blocked.example^\n@@||ok.blocked.example^\n", Format::Adblock, 100);
        let rpz = policy::parse(
            b"$ORIGIN rpz.\ndrop.example CNAME rpz-drop.\nsink.example A 192.0.2.1\nsink.example TXT \"x\"\nalias.example CNAME a.example.\n*.nodata.example CNAME *.\n",
            Format::Rpz,
            100,
        );
        let matcher = Arc::new(
            Matcher::new(1)
                .with_list(ListId(0), ListMode::Deny, &ads)
                .with_list(ListId(1), ListMode::Deny, &rpz),
        );
        let lists = std::collections::HashMap::from([
            ("ads".to_owned(), (ListId(0), Format::Adblock)),
            ("rpz".to_owned(), (ListId(1), Format::Rpz)),
        ]);
        let spec = PolicySpec {
            client_groups: vec!["default".into()],
            deny_lists: vec!["ads".into(), "rpz".into()],
            allow_lists: vec![],
            block_response: BlockResponse::Nxdomain,
            block_ttl: None,
            rewrites: vec![
                Rewrite::new("rewrite.example", RewriteTarget::Addresses(vec!["192.0.2.9".parse().unwrap(), "2001:db8::9".parse().unwrap()])).unwrap(),
                Rewrite::new("chase.example", RewriteTarget::cname("a.example").unwrap()).unwrap(),
            ],
            schedule: None,
        };
        let policies = [PolicySource { name: "everyone", spec: &spec }];
        PolicyIndex::build(BuildInputs {
            matcher: &matcher,
            lists: &lists,
            groups: &[],
            policies: &policies,
            now: jiff_now(),
            block_ttl: Duration::from_secs(60),
            client_id_domains: &[],
            cores: 1,
        })
        .0
    })
}

/// A fixed instant: schedules play no part here.
fn jiff_now() -> kudurru_core::policy::Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

#[derive(Debug, Arbitrary)]
struct Input {
    query: Vec<u8>,
    /// The upstream's reply (its ID is set to the upstream query's).
    reply: Vec<u8>,
    /// A second query, asked after the first was cached.
    other: Vec<u8>,
    lameduck: bool,
    datagram: bool,
    limiter: Option<(u8, u8, u8)>,
    payload: u16,
    later_secs: u8,
}

/// Checks a response written for `msg` (a query that scanned).
fn check(msg: &[u8], out: &[u8], limit: Option<usize>) {
    let parsed = Message::from_slice(out).expect("responses parse");
    assert!(parsed.header().qr());
    assert_eq!(wire::message_id(out), wire::message_id(msg));
    if let Ok(q) = Query::parse(msg) {
        let question = q.question_wire();
        if wire::read_u16(out, 4) == Some(1) {
            assert_eq!(
                &out[12..12 + question.len()],
                question,
                "the client's question, as sent"
            );
        }
        if let Some(limit) = limit {
            assert!(out.len() <= limit.max(512), "{} > {limit}", out.len());
        }
    }
}

fuzz_target!(|input: Input| {
    let local = LocalNames::new(ServerIdentity {
        identity: "fuzz".into(),
        version: "fuzz".into(),
    });
    let ratelimit = match input.limiter {
        Some((qps, burst, slip)) => RateLimit {
            qps: u32::from(qps),
            burst: u32::from(burst).max(1),
            slip: u32::from(slip % 4),
            ..RateLimit::default()
        },
        None => RateLimit::default(),
    };
    let payload = input.payload.clamp(512, 4096);
    let options = ReplyOptions::udp(payload);
    // Every client served: the access list is checked before anything fuzzed here.
    let acl = AccessList::new(&["::/0".parse().unwrap()], &[], AclAction::Refuse);
    static ZONES: std::sync::OnceLock<kudurru_core::zone::Zones> = std::sync::OnceLock::new();
    let stage = Stage {
        acl: &acl,
        policy: blocking(),
        zones: ZONES.get_or_init(kudurru_core::zone::Zones::builtin),
        local: &local,
        options: &options,
        ratelimit: &ratelimit,
        lameduck: input.lameduck,
    };
    let client = Client {
        addr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        datagram: input.datagram,
        id: None,
        sni: None,
    };
    let now = Instant::now();
    let later = now + Duration::from_secs(u64::from(input.later_secs));
    let mut limiter = Limiter::new(64, 0, now);
    let mut cache = Cache::new(16);
    let policy = TtlPolicy::default();
    let mut out = Vec::new();

    for (round, msg) in [&input.query, &input.query, &input.other]
        .into_iter()
        .enumerate()
    {
        let at = if round == 0 { now } else { later };
        match ingress(msg, &stage, client, &mut limiter, at, &mut out) {
            Decision::Drop | Decision::Control(_) => {}
            Decision::Refused { .. } => panic!("the access list admits every client"),
            Decision::Respond => check(msg, &out, None),
            Decision::Transfer { .. } => panic!("built-in zones are never transferred"),
            Decision::Blocked { answered, .. } => {
                if answered {
                    check(msg, &out, None);
                }
            }
            Decision::Chase {
                query, target, ttl, ..
            } => {
                // The target as if it had failed upstream: SERVFAIL with the CNAME.
                let failed = CachedAnswer::failure(&target, at, &policy);
                kudurru_core::policy::answer::write_chased(
                    &query,
                    target.qname(),
                    ttl,
                    &failed,
                    at,
                    &options,
                    &mut out,
                );
                check(msg, &out, None);
            }
            Decision::Resolve(query) => {
                let limit = input.datagram.then(|| query.udp_limit(payload));
                let key = *query.key();
                if let Some(answer) = cache.get(&key, at) {
                    assert!(
                        answer.matches(&key),
                        "the cache serves only its own question"
                    );
                    answer.write_response(&query, at, limit, &options, &mut out);
                    check(msg, &out, limit);
                    continue;
                }
                // Miss: the upstream query, then the scripted reply under its ID.
                let mut upstream = Vec::new();
                wire::write_upstream_query(&key, 0x4242, &mut upstream);
                assert!(Query::parse(&upstream).is_ok(), "upstream queries scan");
                let mut reply = input.reply.clone();
                if reply.len() >= 2 {
                    reply[..2].copy_from_slice(&0x4242u16.to_be_bytes());
                }
                let answer = match CachedAnswer::from_reply(&reply, &key, 0x4242, at, &policy) {
                    Ok(answer) => answer,
                    Err(_) => CachedAnswer::failure(&key, at, &policy),
                };
                assert!(answer.matches(&key));
                // Served from the fresh answer, as the worker does (an answer with TTL 0 is
                // answered but not kept).
                let answer = Arc::new(answer);
                cache.insert(&key, answer.clone(), at);
                if let Some(kept) = cache.get(&key, at) {
                    assert!(kept.matches(&key));
                }
                let cloaked =
                    blocking().cloaked(&answer, &query, client.addr, None, &options, &mut out);
                if let kudurru_core::policy::PolicyDecision::Answer(_) = cloaked {
                    check(msg, &out, None);
                    continue;
                }
                answer.write_response(&query, at, limit, &options, &mut out);
                check(msg, &out, limit);
            }
        }
    }
});
