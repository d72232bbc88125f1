//! Reply scrubbing (issue 32 item 4): bad upstream replies as they arrive on the wire, and what
//! a client is served from the cache afterwards. Each reply is written out record by record, as
//! an upstream that confused questions, or one that tried to slip extra names into the cache,
//! sent it.

use std::time::Instant;

use domain::base::Message;
use kudurru_core::wire::{self, Query, ReplyOptions, rtype};
use kudurru_core::{AnswerKind, CacheKey, CachedAnswer, TtlPolicy};

const DNAME: u16 = 39;
const RRSIG: u16 = 46;
const MX: u16 = 15;

/// `name` (dotted) in uncompressed wire form.
fn name(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in text.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

/// One record: owner (dotted), type, TTL, rdata.
struct Rr(&'static str, u16, u32, Vec<u8>);

fn soa(zone: &'static str) -> Rr {
    let mut rdata = name(&format!("ns.{zone}"));
    rdata.extend(name(&format!("admin.{zone}")));
    for v in [1u32, 3600, 600, 86400, 300] {
        rdata.extend_from_slice(&v.to_be_bytes());
    }
    Rr(zone, rtype::SOA, 3600, rdata)
}

/// A reply (ID 0x4242, QR RD RA, `rcode`) to `qname`/`qtype` with the three sections.
fn reply(qname: &str, qtype: u16, rcode: u8, sections: [&[Rr]; 3]) -> Vec<u8> {
    let mut out = vec![0x42, 0x42, 0x81, 0x80 | rcode, 0, 1];
    for section in sections {
        out.extend_from_slice(&(section.len() as u16).to_be_bytes());
    }
    out.extend(name(qname));
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    for Rr(owner, rt, ttl, rdata) in sections.into_iter().flatten() {
        out.extend(name(owner));
        out.extend_from_slice(&rt.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(rdata);
    }
    out
}

/// Caches `reply` as the answer to the question it carries, then serves it to a client.
fn cache_and_serve(reply: &[u8]) -> (CachedAnswer, Vec<u8>) {
    let end = wire::skip_name(reply, 12).unwrap();
    let qtype = wire::read_u16(reply, end).unwrap();
    let key = CacheKey::new(&reply[12..end], qtype, 1, false, false).unwrap();
    let now = Instant::now();
    let answer = CachedAnswer::from_reply(reply, &key, 0x4242, now, &TtlPolicy::default())
        .expect("the reply is well-formed");
    let mut query = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    query.extend_from_slice(key.question());
    let q = Query::parse(&query).unwrap();
    let mut out = Vec::new();
    answer.write_response(&q, now, None, &ReplyOptions::udp(1232), &mut out);
    (answer, out)
}

/// What a served message holds, section by section: (owner, type) per record.
fn sections(served: &[u8]) -> [Vec<(String, u16)>; 3] {
    let msg = Message::from_slice(served).unwrap();
    let list = |section: domain::base::message::RecordSection<'_, [u8]>| {
        section
            .map(|r| {
                let r = r.unwrap();
                (r.owner().to_string().to_lowercase(), r.rtype().to_int())
            })
            .collect::<Vec<_>>()
    };
    [
        list(msg.answer().unwrap()),
        list(msg.authority().unwrap()),
        list(msg.additional().unwrap()),
    ]
}

fn owned(records: &[(&str, u16)]) -> Vec<(String, u16)> {
    records.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect()
}

fn cname(target: &str) -> Vec<u8> {
    name(target)
}

fn rrsig(covered: u16, signer: &str) -> Vec<u8> {
    let mut rdata = covered.to_be_bytes().to_vec();
    rdata.extend_from_slice(&[13, 2]);
    rdata.extend_from_slice(&300u32.to_be_bytes());
    rdata.extend_from_slice(&2_000_000_000u32.to_be_bytes());
    rdata.extend_from_slice(&1_000_000_000u32.to_be_bytes());
    rdata.extend_from_slice(&1234u16.to_be_bytes());
    rdata.extend(name(signer));
    rdata.extend_from_slice(&[0xaa; 64]);
    rdata
}

/// An A record for an AAAA question (an upstream that answered the wrong question): served as
/// NODATA, never cached without an SOA (RFC 2308 §5), with the SOA as a negative answer.
#[test]
fn rfc2181_5_4_1_records_of_another_type_than_the_question_are_dropped() {
    let bad = reply(
        "www.example.com",
        rtype::AAAA,
        0,
        [
            &[Rr("www.example.com", rtype::A, 300, vec![192, 0, 2, 1])],
            &[],
            &[],
        ],
    );
    let (answer, served) = cache_and_serve(&bad);
    assert_eq!(sections(&served), [vec![], vec![], vec![]]);
    assert_eq!(wire::header_rcode(&served), Some(0));
    assert_eq!(answer.kind(), AnswerKind::Negative);
    assert!(
        !answer.is_cacheable(),
        "NODATA without an SOA is not cached"
    );

    let with_soa = reply(
        "www.example.com",
        rtype::AAAA,
        0,
        [
            &[Rr("www.example.com", rtype::A, 300, vec![192, 0, 2, 1])],
            &[soa("example.com")],
            &[],
        ],
    );
    let (answer, served) = cache_and_serve(&with_soa);
    assert_eq!(
        sections(&served),
        [vec![], owned(&[("example.com", rtype::SOA)]), vec![]]
    );
    assert_eq!(answer.kind(), AnswerKind::Negative);
    assert_eq!(
        answer.remaining(Instant::now()),
        300,
        "RFC 2308 §3 negative TTL"
    );
}

/// The CNAME chain from the qname is kept, in whatever order it arrives; an address for a name
/// off the chain (a poisoning attempt riding along) is dropped.
#[test]
fn rfc1034_3_6_2_the_cname_chain_is_kept_and_records_off_it_dropped() {
    let bad = reply(
        "www.example.com",
        rtype::A,
        0,
        [
            &[
                Rr(
                    "cdn.example.net",
                    rtype::CNAME,
                    300,
                    cname("edge.example.org"),
                ),
                Rr(
                    "www.example.com",
                    rtype::CNAME,
                    300,
                    cname("CDN.example.net"),
                ),
                Rr("edge.example.org", rtype::A, 60, vec![192, 0, 2, 7]),
                Rr("bank.example", rtype::A, 86400, vec![198, 51, 100, 6]),
                Rr("www.example.com", rtype::A, 300, vec![203, 0, 113, 1]),
                Rr(
                    "www.example.com",
                    rtype::CNAME,
                    300,
                    cname("elsewhere.example"),
                ),
                Rr("edge.example.org", rtype::AAAA, 60, vec![0x20; 16]),
            ],
            &[],
            &[],
        ],
    );
    let (answer, served) = cache_and_serve(&bad);
    assert_eq!(
        sections(&served)[0],
        owned(&[
            ("cdn.example.net", rtype::CNAME),
            ("www.example.com", rtype::CNAME),
            ("edge.example.org", rtype::A),
        ])
    );
    assert_eq!(answer.kind(), AnswerKind::Positive);
    assert_eq!(answer.remaining(Instant::now()), 60);
}

/// A CNAME loop ends the chain; a chain longer than the bound keeps only the links followed.
#[test]
fn rfc1034_3_6_2_a_cname_loop_or_an_overlong_chain_ends_where_followed() {
    let looped = reply(
        "a.example",
        rtype::A,
        0,
        [
            &[
                Rr("a.example", rtype::CNAME, 300, cname("b.example")),
                Rr("b.example", rtype::CNAME, 300, cname("a.example")),
            ],
            &[],
            &[],
        ],
    );
    let (_, served) = cache_and_serve(&looped);
    assert_eq!(
        sections(&served)[0],
        owned(&[("a.example", rtype::CNAME)]),
        "the link back to the qname is not followed"
    );

    let names: Vec<&'static str> = (0..=20)
        .map(|i| &*Box::leak(format!("n{i}.example").into_boxed_str()))
        .collect();
    let mut records: Vec<Rr> = names
        .windows(2)
        .map(|w| Rr(w[0], rtype::CNAME, 300, cname(w[1])))
        .collect();
    records.push(Rr(names[20], rtype::A, 300, vec![192, 0, 2, 1]));
    let long = reply(names[0], rtype::A, 0, [&records, &[], &[]]);
    let (_, served) = cache_and_serve(&long);
    let kept = &sections(&served)[0];
    assert_eq!(kept.len(), kudurru_core::scrub::MAX_CHAIN_LINKS);
    assert!(kept.iter().all(|(_, t)| *t == rtype::CNAME));
}

/// A DNAME at an ancestor of the qname and the CNAME synthesized from it are kept with the
/// records at the target (RFC 6672 §3.4); a DNAME elsewhere is not.
#[test]
fn rfc6672_3_4_dname_and_its_synthesized_cname_are_kept() {
    let reply = reply(
        "www.old.example",
        rtype::A,
        0,
        [
            &[
                Rr("old.example", DNAME, 300, name("new.example")),
                Rr("other.example", DNAME, 300, name("evil.example")),
                Rr(
                    "www.old.example",
                    rtype::CNAME,
                    300,
                    cname("www.new.example"),
                ),
                Rr("www.new.example", rtype::A, 300, vec![192, 0, 2, 4]),
            ],
            &[],
            &[],
        ],
    );
    let (_, served) = cache_and_serve(&reply);
    assert_eq!(
        sections(&served)[0],
        owned(&[
            ("old.example", DNAME),
            ("www.old.example", rtype::CNAME),
            ("www.new.example", rtype::A),
        ])
    );
}

/// Authority keeps the zone's SOA and NS (and DNSSEC denial records in it); additional keeps
/// addresses of names the kept records name. An SOA, NS or address for another zone is dropped.
#[test]
fn rfc2181_5_4_1_authority_and_additional_keep_only_the_zone_and_its_addresses() {
    let reply = reply(
        "example.com",
        MX,
        0,
        [
            &[
                Rr(
                    "example.com",
                    MX,
                    300,
                    [&[0, 10][..], &name("mail.example.com")].concat(),
                ),
                Rr("example.com", RRSIG, 300, rrsig(MX, "example.com")),
                Rr("example.com", RRSIG, 300, rrsig(rtype::A, "example.com")),
            ],
            &[
                Rr("example.com", rtype::NS, 300, name("ns1.example.com")),
                Rr(
                    "victim.example",
                    rtype::NS,
                    300,
                    name("ns.attacker.example"),
                ),
                soa("victim.example"),
                Rr("mail.example.com", rtype::A, 300, vec![192, 0, 2, 25]),
            ],
            &[
                Rr("mail.example.com", rtype::A, 300, vec![192, 0, 2, 25]),
                Rr("ns1.example.com", rtype::AAAA, 300, vec![0x20; 16]),
                Rr("ns.attacker.example", rtype::A, 300, vec![198, 51, 100, 66]),
                Rr("victim.example", rtype::A, 300, vec![198, 51, 100, 66]),
                Rr("mail.example.com", rtype::TXT, 300, b"\x03abc".to_vec()),
            ],
        ],
    );
    let (_, served) = cache_and_serve(&reply);
    assert_eq!(
        sections(&served),
        [
            owned(&[("example.com", MX), ("example.com", RRSIG)]),
            owned(&[("example.com", rtype::NS)]),
            owned(&[
                ("mail.example.com", rtype::A),
                ("ns1.example.com", rtype::AAAA),
            ]),
        ]
    );
}

/// An NXDOMAIN with its proof: the SOA and the NSEC records of the zone (signed) stay, an SOA
/// for another zone goes.
#[test]
fn rfc2308_3_negative_answer_keeps_its_soa_and_denial_records() {
    let reply = reply(
        "nope.example.com",
        rtype::A,
        3,
        [
            &[Rr("nope.example.com", rtype::TXT, 300, b"\x01x".to_vec())],
            &[
                soa("example.com"),
                Rr("example.com", RRSIG, 300, rrsig(rtype::SOA, "example.com")),
                Rr(
                    "mail.example.com",
                    47,
                    300,
                    [&name("www.example.com")[..], &[0, 1, 0x40]].concat(),
                ),
                Rr("mail.example.com", RRSIG, 300, rrsig(47, "example.com")),
                soa("other.example"),
            ],
            &[],
        ],
    );
    let (answer, served) = cache_and_serve(&reply);
    assert_eq!(
        sections(&served),
        [
            vec![],
            owned(&[
                ("example.com", rtype::SOA),
                ("example.com", RRSIG),
                ("mail.example.com", 47),
                ("mail.example.com", RRSIG),
            ]),
            vec![],
        ]
    );
    assert_eq!(answer.kind(), AnswerKind::Negative);
    assert_eq!(wire::header_rcode(&served), Some(3));
}
