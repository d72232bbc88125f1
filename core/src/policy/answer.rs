//! Block answers and rewrites, written like every other answer (`wire::start_response` …
//! `finish_response`): the query's ID, question and EDNS handling, never from the cache.
//!
//! ```text
//! blockResponse  A / AAAA query                other types
//! nxdomain       NXDOMAIN + SOA                NXDOMAIN + SOA
//! nodata         NOERROR, no records + SOA     NOERROR + SOA
//! null           0.0.0.0 / ::                  NOERROR + SOA
//! addresses      the addresses of that family  NOERROR + SOA
//!                (NOERROR + SOA when none)
//! refused        REFUSED                       REFUSED
//! ```
//!
//! Every block answer carries Extended DNS Error 15 "Blocked" (RFC 8914) for a client that
//! sent EDNS; RPZ local data carries 4 "Forged Answer"; a rewrite carries none (it is the
//! operator's answer, not a block).
//!
//! The SOA of a negative block answer (RFC 2308 §3, so a stub or a downstream cache keeps the
//! answer for the block TTL and no longer) is owned by the query name itself, so it covers
//! exactly that name and is in bailiwick whatever the name; its fields are
//! `block.kudurru.internal. hostmaster.kudurru.internal. 1 3600 600 86400 <TTL>`, the record's
//! TTL the block TTL too, so the negative TTL (the smaller of the two) is the block TTL.

use std::net::IpAddr;
use std::time::Instant;

use crate::answer::{AnswerKind, CachedAnswer};
use crate::wire::{self, HEADER_LEN, Query, ReplyOptions, ede, rcode, rtype};

use super::blocklist::LocalData;
use super::spec::BlockResponse;

/// The SOA MNAME of block answers.
pub const SOA_MNAME: &[u8] = b"\x05block\x07kudurru\x08internal\x00";
/// The SOA RNAME of block answers (`hostmaster@kudurru.internal`).
pub const SOA_RNAME: &[u8] = b"\x0ahostmaster\x07kudurru\x08internal\x00";

/// The ANY query type (RFC 8482): local data answers every record it has.
const ANY: u16 = 255;

/// Writes the answer `response` gives `query` when a policy blocks it, records with `ttl`.
pub fn write_block(
    query: &Query<'_>,
    response: &BlockResponse,
    ttl: u32,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) {
    let blocked = Some(ede::BLOCKED);
    match response {
        BlockResponse::Nxdomain => {
            write_negative(query, rcode::NXDOMAIN, ttl, options, blocked, out)
        }
        BlockResponse::Nodata => write_negative(query, rcode::NOERROR, ttl, options, blocked, out),
        BlockResponse::Refused => {
            wire::start_response(query, rcode::REFUSED, false, out);
            wire::finish_response_with_ede(query, out, options, blocked);
        }
        BlockResponse::Null => {
            let null = [
                IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            ];
            write_addresses_with(query, &null, ttl, options, blocked, out);
        }
        BlockResponse::Addresses(addresses) => {
            write_addresses_with(query, addresses, ttl, options, blocked, out);
        }
    }
}

/// Writes a rewrite to `addresses`: the A or AAAA records of the query's family, NODATA (with
/// the SOA) for other types or when the rewrite has none of that family.
pub fn write_addresses(
    query: &Query<'_>,
    addresses: &[IpAddr],
    ttl: u32,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) {
    write_addresses_with(query, addresses, ttl, options, None, out);
}

fn write_addresses_with(
    query: &Query<'_>,
    addresses: &[IpAddr],
    ttl: u32,
    options: &ReplyOptions,
    ede: Option<u16>,
    out: &mut Vec<u8>,
) {
    let qtype = query.qtype();
    let matching = |a: &&IpAddr| match a {
        IpAddr::V4(_) => qtype == rtype::A,
        IpAddr::V6(_) => qtype == rtype::AAAA,
    };
    if !addresses.iter().any(|a| matching(&a)) {
        return write_negative(query, rcode::NOERROR, ttl, options, ede, out);
    }
    wire::start_response(query, rcode::NOERROR, true, out);
    for address in addresses.iter().filter(matching) {
        match address {
            IpAddr::V4(v4) => wire::push_record(out, HEADER_LEN, rtype::A, ttl, &v4.octets()),
            IpAddr::V6(v6) => wire::push_record(out, HEADER_LEN, rtype::AAAA, ttl, &v6.octets()),
        }
        wire::count_answer(out);
    }
    wire::finish_response_with_ede(query, out, options, ede);
}

/// NXDOMAIN or NODATA with the block SOA in the authority section.
fn write_negative(
    query: &Query<'_>,
    code: u8,
    ttl: u32,
    options: &ReplyOptions,
    ede: Option<u16>,
    out: &mut Vec<u8>,
) {
    wire::start_response(query, code, true, out);
    push_soa(out, ttl);
    wire::count_authority(out);
    wire::finish_response_with_ede(query, out, options, ede);
}

/// The block SOA, owned by the query name (a pointer to the question).
fn push_soa(out: &mut Vec<u8>, ttl: u32) {
    let mut rdata = [0u8; 96];
    let mut len = 0;
    for part in [SOA_MNAME, SOA_RNAME] {
        rdata[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    for value in [1u32, 3600, 600, 86_400, ttl] {
        rdata[len..len + 4].copy_from_slice(&value.to_be_bytes());
        len += 4;
    }
    wire::push_record(out, HEADER_LEN, rtype::SOA, ttl, &rdata[..len]);
}

/// Writes RPZ local data for `query`: the records of the query's type (all of them for ANY;
/// the CNAME alone when there is one), NODATA with the SOA when it has none of that type.
/// Extended DNS Error 4 "Forged Answer".
pub fn write_local_data(
    query: &Query<'_>,
    data: &LocalData,
    ttl: u32,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) {
    let forged = Some(ede::FORGED_ANSWER);
    let qtype = query.qtype();
    let cname = data.records.iter().any(|(t, _)| *t == rtype::CNAME);
    let wanted = |t: u16| {
        if cname {
            t == rtype::CNAME
        } else {
            qtype == ANY || t == qtype
        }
    };
    if !data.records.iter().any(|(t, _)| wanted(*t)) {
        return write_negative(query, rcode::NOERROR, ttl, options, forged, out);
    }
    wire::start_response(query, rcode::NOERROR, true, out);
    for (t, rdata) in data.records.iter().filter(|(t, _)| wanted(*t)) {
        if out.len() + rdata.len() + 12 > usize::from(u16::MAX) - 64 {
            break;
        }
        wire::push_record(out, HEADER_LEN, *t, ttl, rdata);
        wire::count_answer(out);
    }
    wire::finish_response_with_ede(query, out, options, forged);
}

/// Writes a CNAME from the query's name to `target` alone (a CNAME rewrite asked for type
/// CNAME, which is answered without chasing).
pub fn write_cname(
    query: &Query<'_>,
    target: &[u8],
    ttl: u32,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) {
    wire::start_response(query, rcode::NOERROR, true, out);
    wire::push_record(out, HEADER_LEN, rtype::CNAME, ttl, target);
    wire::count_answer(out);
    wire::finish_response(query, out, options);
}

/// The answer to `query` rewritten to a CNAME: the CNAME from the query's name to `target`
/// (lowercase wire) with `ttl`, then `resolved`'s records for the target (its answer section,
/// TTLs as they are at `now`); `resolved`'s rcode (NXDOMAIN for a target that does not exist,
/// SERVFAIL for a failure, with the CNAME still in the answer as RFC 6604 says).
///
/// A negative `resolved` also brings its authority section (the target zone's SOA), so the
/// client may cache the negative answer (RFC 2308 §3).
pub fn write_chased(
    query: &Query<'_>,
    target: &[u8],
    ttl: u32,
    resolved: &CachedAnswer,
    now: Instant,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) {
    let code = match resolved.kind() {
        AnswerKind::Failure => rcode::SERVFAIL,
        _ => resolved.rcode(),
    };
    wire::start_response(query, code, false, out);
    wire::push_record(out, HEADER_LEN, rtype::CNAME, ttl, target);
    let answers = 1 + resolved.append_answer_records(now, out);
    out[wire::ANCOUNT_AT..wire::ANCOUNT_AT + 2].copy_from_slice(&answers.to_be_bytes());
    if resolved.kind() == AnswerKind::Negative {
        let authorities = resolved.append_authority_records(now, out);
        out[wire::NSCOUNT_AT..wire::NSCOUNT_AT + 2].copy_from_slice(&authorities.to_be_bytes());
    }
    wire::finish_response(query, out, options);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use domain::base::opt::ExtendedError;
    use domain::base::{Message, Rtype};
    use domain::rdata::AllRecordData;

    use super::*;
    use crate::answer::TtlPolicy;
    use crate::key::CacheKey;
    use crate::wire::tests::query;

    const UDP: ReplyOptions = ReplyOptions {
        payload: 1232,
        tcp_keepalive: None,
        padding: false,
    };

    fn block(name: &str, qtype: u16, edns: bool, response: &BlockResponse) -> Vec<u8> {
        let m = query(name, qtype, edns.then_some((1232, 0, false)));
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        write_block(&q, response, 120, &UDP, &mut out);
        out
    }

    fn ede_code(msg: &Message<[u8]>) -> Option<u16> {
        let opt = msg.opt()?;
        opt.opt()
            .first::<ExtendedError<_>>()
            .map(|e| e.code().to_int())
    }

    #[test]
    fn nxdomain_and_nodata_carry_the_block_soa_and_ede_15() {
        for (response, code) in [
            (BlockResponse::Nxdomain, rcode::NXDOMAIN),
            (BlockResponse::Nodata, rcode::NOERROR),
        ] {
            let out = block("Ads.Example", rtype::A, true, &response);
            let msg = Message::from_slice(&out).unwrap();
            assert_eq!(msg.header().rcode().to_int(), code);
            assert_eq!(msg.header().id(), 0x1234);
            assert!(msg.header().qr() && msg.header().rd() && msg.header().ra());
            assert_eq!(msg.header_counts().ancount(), 0);
            let soa = msg.authority().unwrap().next().unwrap().unwrap();
            assert_eq!(soa.rtype(), Rtype::SOA);
            assert_eq!(soa.ttl().as_secs(), 120);
            assert_eq!(
                soa.owner().to_string(),
                "Ads.Example",
                "owned by the query name"
            );
            let record = soa.into_record::<AllRecordData<_, _>>().unwrap().unwrap();
            let AllRecordData::Soa(soa) = record.data() else {
                panic!("not an SOA: {record:?}");
            };
            assert_eq!(soa.mname().to_string(), "block.kudurru.internal");
            assert_eq!(soa.minimum().as_secs(), 120, "negative TTL = block TTL");
            assert_eq!(ede_code(msg), Some(15));
        }
    }

    #[test]
    fn a_client_without_edns_gets_no_opt() {
        let out = block("ads.example", rtype::A, false, &BlockResponse::Nxdomain);
        let msg = Message::from_slice(&out).unwrap();
        assert!(msg.opt().is_none());
        assert_eq!(msg.header_counts().arcount(), 0);
    }

    #[test]
    fn null_and_custom_addresses_answer_their_family_and_nodata_otherwise() {
        let answers = |out: &[u8]| -> Vec<(Rtype, u32, String)> {
            let msg = Message::from_slice(out).unwrap();
            msg.answer()
                .unwrap()
                .map(|r| {
                    let r = r
                        .unwrap()
                        .into_record::<AllRecordData<_, _>>()
                        .unwrap()
                        .unwrap();
                    (r.rtype(), r.ttl().as_secs(), r.data().to_string())
                })
                .collect()
        };
        let null = BlockResponse::Null;
        assert_eq!(
            answers(&block("a.example", rtype::A, true, &null)),
            vec![(Rtype::A, 120, "0.0.0.0".into())]
        );
        assert_eq!(
            answers(&block("a.example", rtype::AAAA, true, &null)),
            vec![(Rtype::AAAA, 120, "::".into())]
        );
        let mx = block("a.example", 15, true, &null);
        assert!(answers(&mx).is_empty());
        let msg = Message::from_slice(&mx).unwrap();
        assert_eq!(msg.header().rcode().to_int(), 0);
        assert_eq!(msg.header_counts().nscount(), 1);
        let page = BlockResponse::Addresses(vec![
            "192.0.2.10".parse().unwrap(),
            "2001:db8::10".parse().unwrap(),
            "192.0.2.11".parse().unwrap(),
        ]);
        assert_eq!(
            answers(&block("a.example", rtype::A, true, &page)),
            vec![
                (Rtype::A, 120, "192.0.2.10".into()),
                (Rtype::A, 120, "192.0.2.11".into())
            ]
        );
        let v4_only = BlockResponse::Addresses(vec!["192.0.2.10".parse().unwrap()]);
        let out = block("a.example", rtype::AAAA, true, &v4_only);
        assert!(answers(&out).is_empty());
        assert_eq!(
            Message::from_slice(&out).unwrap().header_counts().nscount(),
            1
        );
        let refused = block("a.example", rtype::A, true, &BlockResponse::Refused);
        let msg = Message::from_slice(&refused).unwrap();
        assert_eq!(msg.header().rcode().to_int(), rcode::REFUSED);
        assert_eq!(ede_code(msg), Some(15));
    }

    #[test]
    fn rfc8467_padding_stays_last_after_the_ede_option() {
        let mut m = query("a.example", rtype::A, Some((1232, 0, false)));
        // Add an empty padding option to the OPT.
        m.extend_from_slice(&[0, 12, 0, 0]);
        let at = m.len() - 6;
        m[at..at + 2].copy_from_slice(&4u16.to_be_bytes());
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        let options = ReplyOptions::encrypted(1232, Duration::from_secs(10));
        write_block(&q, &BlockResponse::Nxdomain, 60, &options, &mut out);
        assert_eq!(out.len() % wire::RESPONSE_PADDING_BLOCK, 0);
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(ede_code(msg), Some(15));
    }

    #[test]
    fn local_data_answers_its_records_of_the_query_type() {
        let data = LocalData {
            records: vec![
                (rtype::A, vec![192, 0, 2, 1].into()),
                (rtype::TXT, b"\x07blocked".to_vec().into()),
            ],
        };
        let m = query("walled.example", rtype::TXT, Some((1232, 0, false)));
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        write_local_data(&q, &data, 30, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.header_counts().ancount(), 1);
        let record = msg.answer().unwrap().next().unwrap().unwrap();
        assert_eq!(record.rtype(), Rtype::TXT);
        assert_eq!(ede_code(msg), Some(4));
        let m = query("walled.example", rtype::AAAA, None);
        let q = Query::parse(&m).unwrap();
        write_local_data(&q, &data, 30, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(
            (msg.header_counts().ancount(), msg.header_counts().nscount()),
            (0, 1)
        );
    }

    /// (owner, TTL, data) of one record of a test reply.
    type UpstreamRecord<'a> = (
        &'a str,
        u32,
        AllRecordData<Vec<u8>, domain::base::Name<Vec<u8>>>,
    );

    /// A reply from upstream for `key` with `records` in the answer (and authority) sections,
    /// composed by `domain` with name compression, as a real resolver's.
    fn upstream(key: &CacheKey, nxdomain: bool, answer: &[UpstreamRecord<'_>]) -> Vec<u8> {
        use domain::base::message_builder::{MessageBuilder, StaticCompressor};
        use domain::base::{Name, iana::Rcode};
        use std::str::FromStr;
        let mut builder = MessageBuilder::from_target(StaticCompressor::new(Vec::new())).unwrap();
        builder.header_mut().set_id(7);
        builder.header_mut().set_qr(true);
        builder.header_mut().set_ra(true);
        if nxdomain {
            builder.header_mut().set_rcode(Rcode::NXDOMAIN);
        }
        let qname = Name::<Vec<u8>>::from_str(&crate::key::name_to_text(key.qname())).unwrap();
        let mut question = builder.question();
        question
            .push((&qname, Rtype::from_int(key.qtype())))
            .unwrap();
        let mut section = question.answer();
        for (owner, ttl, data) in answer
            .iter()
            .filter(|r| !matches!(r.2, AllRecordData::Soa(_)))
        {
            let owner = Name::<Vec<u8>>::from_str(owner).unwrap();
            section.push((owner, *ttl, data.clone())).unwrap();
        }
        let mut authority = section.authority();
        for (owner, ttl, data) in answer
            .iter()
            .filter(|r| matches!(r.2, AllRecordData::Soa(_)))
        {
            let owner = Name::<Vec<u8>>::from_str(owner).unwrap();
            authority.push((owner, *ttl, data.clone())).unwrap();
        }
        authority.finish().into_target()
    }

    #[test]
    fn rfc6604_a_chased_rewrite_answers_the_cname_then_the_targets_records() {
        use domain::base::Name;
        use domain::rdata::{A, Cname};
        use std::str::FromStr;
        let target = b"\x09forcesafe\x07example\x03net\x00";
        let key = CacheKey::new(target, rtype::A, 1, false, false).unwrap();
        let t0 = Instant::now();
        let reply = upstream(
            &key,
            false,
            &[
                (
                    "forcesafe.example.net",
                    300,
                    AllRecordData::Cname(Cname::new(Name::from_str("edge.example.net").unwrap())),
                ),
                (
                    "edge.example.net",
                    60,
                    AllRecordData::A(A::from_octets(192, 0, 2, 80)),
                ),
            ],
        );
        let resolved =
            CachedAnswer::from_reply(&reply, &key, 7, t0, &TtlPolicy::default()).unwrap();
        let m = query("www.Search.example", rtype::A, Some((1232, 0, false)));
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        write_chased(
            &q,
            target,
            3600,
            &resolved,
            t0 + Duration::from_secs(10),
            &UDP,
            &mut out,
        );
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.header().rcode().to_int(), 0);
        let records: Vec<(String, u32, String)> = msg
            .answer()
            .unwrap()
            .map(|r| {
                let r = r
                    .unwrap()
                    .into_record::<AllRecordData<_, _>>()
                    .unwrap()
                    .unwrap();
                (
                    r.owner().to_string(),
                    r.ttl().as_secs(),
                    r.data().to_string(),
                )
            })
            .collect();
        assert_eq!(
            records,
            vec![
                (
                    "www.Search.example".into(),
                    3600,
                    "forcesafe.example.net.".into()
                ),
                (
                    "forcesafe.example.net".into(),
                    290,
                    "edge.example.net.".into()
                ),
                ("edge.example.net".into(), 50, "192.0.2.80".into()),
            ]
        );
        assert!(msg.opt().is_some());
    }

    #[test]
    fn rfc6604_a_chased_target_that_does_not_exist_is_nxdomain_with_the_cname_and_soa() {
        use domain::base::{Name, Serial, Ttl};
        use domain::rdata::Soa;
        use std::str::FromStr;
        let target = b"\x04gone\x07example\x00";
        let key = CacheKey::new(target, rtype::A, 1, false, false).unwrap();
        let t0 = Instant::now();
        let soa = Soa::new(
            Name::from_str("ns.example").unwrap(),
            Name::from_str("h.example").unwrap(),
            Serial(1),
            Ttl::from_secs(1),
            Ttl::from_secs(1),
            Ttl::from_secs(1),
            Ttl::from_secs(300),
        );
        let reply = upstream(&key, true, &[("example", 900, AllRecordData::Soa(soa))]);
        let resolved =
            CachedAnswer::from_reply(&reply, &key, 7, t0, &TtlPolicy::default()).unwrap();
        let m = query("x.example", rtype::A, None);
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        write_chased(&q, target, 60, &resolved, t0, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.header().rcode().to_int(), rcode::NXDOMAIN);
        assert_eq!(msg.header_counts().ancount(), 1);
        assert_eq!(msg.header_counts().nscount(), 1);
        let soa = msg.authority().unwrap().next().unwrap().unwrap();
        assert_eq!(soa.ttl().as_secs(), 300);
        // A failure keeps the CNAME, SERVFAIL.
        let failed = CachedAnswer::failure(&key, t0, &TtlPolicy::default());
        write_chased(&q, target, 60, &failed, t0, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.header().rcode().to_int(), rcode::SERVFAIL);
        assert_eq!(msg.header_counts().ancount(), 1);
    }
}
