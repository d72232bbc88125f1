//! Bootstrap resolution: the addresses of a host name in an upstream URL, asked of the
//! `upstream.bootstrap` resolvers over plain DNS (never of kudurru itself). Sans-IO: the
//! control thread sends [`query`]'s bytes and hands each reply to [`parse_reply`].
//!
//! ```text
//! host name ─▶ query(A | AAAA, id) ──udp──▶ bootstrap resolver ──▶ parse_reply ─▶ Addresses
//! ```
//!
//! A reply is peer input: it must carry the query's ID and exactly its question; the addresses
//! are the answer section's records of the type asked (a CNAME chain before them is followed
//! by the resolver, whose answer section holds the chain and its final addresses; the owner
//! names are not checked further, as a stub resolver does not). The TTL is the smallest of the
//! answer section's records.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::CacheKey;
use crate::wire::{self, class, rcode, read_u16, read_u32, record_at, rtype};

/// The addresses of a name of one type, and how long they may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    /// The addresses, in the order of the answer section (may be empty: no records of the type).
    pub addrs: Vec<IpAddr>,
    /// The smallest TTL of the answer section's records (seconds); 0 when it is empty.
    pub ttl: u32,
}

/// Why a bootstrap query or reply was not usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// The host name does not make a DNS question.
    #[error("the host name is not a valid DNS name")]
    Name,
    /// The qtype is not A or AAAA.
    #[error("bootstrap resolution asks only A and AAAA")]
    Type,
    /// Not a reply to this query (ID, QR, or question differs): ignored, the wait goes on.
    #[error("reply to another query")]
    Foreign,
    /// The reply does not parse.
    #[error("malformed reply: {0}")]
    Malformed(&'static str),
    /// TC=1 (an address reply that does not fit 1232 octets is not one worth following).
    #[error("reply truncated")]
    Truncated,
    /// The name does not exist (NXDOMAIN).
    #[error("the name does not exist (NXDOMAIN)")]
    NoSuchName,
    /// Another failure rcode (SERVFAIL, REFUSED, ...).
    #[error("the bootstrap resolver answered rcode {0}")]
    Rcode(u8),
}

/// The cache key of the question `host`/`qtype` IN.
fn question(host: &str, qtype: u16) -> Result<CacheKey, BootstrapError> {
    if qtype != rtype::A && qtype != rtype::AAAA {
        return Err(BootstrapError::Type);
    }
    let name = crate::policy::name::to_wire(host).map_err(|_| BootstrapError::Name)?;
    CacheKey::new(&name, qtype, class::IN, false, false).ok_or(BootstrapError::Name)
}

/// The query for `host`'s `qtype` (A or AAAA) records with `id`, RD set, with EDNS.
pub fn query(host: &str, qtype: u16, id: u16) -> Result<Vec<u8>, BootstrapError> {
    let key = question(host, qtype)?;
    let mut out = Vec::with_capacity(key.question().len() + 24);
    wire::write_upstream_query(&key, id, &mut out);
    Ok(out)
}

/// The addresses in `reply` to the query [`query`] made for `host`, `qtype` and `id`.
pub fn parse_reply(
    reply: &[u8],
    host: &str,
    qtype: u16,
    id: u16,
) -> Result<Addresses, BootstrapError> {
    let key = question(host, qtype)?;
    let malformed = BootstrapError::Malformed;
    if wire::message_id(reply) != Some(id) {
        return Err(BootstrapError::Foreign);
    }
    let flags = wire::header_flags(reply).ok_or(malformed("short header"))?;
    if flags & 0x8000 == 0 {
        return Err(BootstrapError::Foreign);
    }
    let qdcount = read_u16(reply, 4).ok_or(malformed("short header"))?;
    let ancount = read_u16(reply, 6).ok_or(malformed("short header"))?;
    if qdcount != 1 {
        return Err(BootstrapError::Foreign);
    }
    let asked = key.question();
    let got = reply
        .get(wire::HEADER_LEN..wire::HEADER_LEN + asked.len())
        .ok_or(BootstrapError::Foreign)?;
    if !got.eq_ignore_ascii_case(asked) {
        return Err(BootstrapError::Foreign);
    }
    if wire::is_truncated(reply) {
        return Err(BootstrapError::Truncated);
    }
    match (flags & 0x000f) as u8 {
        rcode::NOERROR => {}
        rcode::NXDOMAIN => return Err(BootstrapError::NoSuchName),
        other => return Err(BootstrapError::Rcode(other)),
    }
    let mut pos = wire::HEADER_LEN + asked.len();
    let mut addrs = Vec::new();
    let mut ttl = u32::MAX;
    for _ in 0..ancount {
        let rr = record_at(reply, pos).ok_or(malformed("answer record"))?;
        pos = rr.end;
        let rr_class = read_u16(reply, rr.ttl_at - 2).ok_or(malformed("answer record"))?;
        let rr_ttl = read_u32(reply, rr.ttl_at).ok_or(malformed("answer record"))?;
        // RFC 2181 §8: a TTL with the top bit set is zero.
        let rr_ttl = if rr_ttl > i32::MAX as u32 { 0 } else { rr_ttl };
        if rr_class != class::IN || (rr.rtype != qtype && rr.rtype != rtype::CNAME) {
            continue;
        }
        ttl = ttl.min(rr_ttl);
        if rr.rtype != qtype {
            continue;
        }
        let rdata = reply
            .get(rr.rdata_at..rr.end)
            .ok_or(malformed("answer record"))?;
        let addr = match (qtype, rdata.len()) {
            (rtype::A, 4) => IpAddr::V4(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3])),
            (rtype::AAAA, 16) => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(rdata);
                IpAddr::V6(Ipv6Addr::from(octets))
            }
            _ => return Err(malformed("address of the wrong length")),
        };
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    Ok(Addresses {
        ttl: if addrs.is_empty() { 0 } else { ttl },
        addrs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_to(query: &[u8], rcode: u8, answers: &[(u16, u32, &[u8])]) -> Vec<u8> {
        let q = wire::Query::parse(query).expect("our query parses");
        let mut out = Vec::new();
        wire::start_response(&q, rcode, false, &mut out);
        for &(rtype, ttl, rdata) in answers {
            wire::push_record(&mut out, wire::HEADER_LEN, rtype, ttl, rdata);
            wire::count_answer(&mut out);
        }
        out
    }

    #[test]
    fn addresses_and_the_smallest_ttl_come_from_the_answer_section() {
        let q = query("Upstream.Test.Example.", rtype::A, 0x1234).unwrap();
        let r = reply_to(
            &q,
            rcode::NOERROR,
            &[
                (rtype::CNAME, 30, b"\x02ns\x04test\x00"),
                (rtype::A, 300, &[127, 0, 0, 2]),
                (rtype::A, 60, &[127, 0, 0, 3]),
                (rtype::AAAA, 1, &[0; 16]),
            ],
        );
        let got = parse_reply(&r, "upstream.test.example", rtype::A, 0x1234).unwrap();
        assert_eq!(
            got.addrs,
            [
                "127.0.0.2".parse::<IpAddr>().unwrap(),
                "127.0.0.3".parse().unwrap()
            ]
        );
        assert_eq!(got.ttl, 30);
        let q6 = query("upstream.test.example", rtype::AAAA, 7).unwrap();
        let r6 = reply_to(
            &q6,
            rcode::NOERROR,
            &[(
                rtype::AAAA,
                90,
                &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            )],
        );
        let got = parse_reply(&r6, "upstream.test.example", rtype::AAAA, 7).unwrap();
        assert_eq!(got.addrs, [IpAddr::V6(Ipv6Addr::LOCALHOST)]);
        assert_eq!(got.ttl, 90);
        let empty = reply_to(&q6, rcode::NOERROR, &[]);
        let got = parse_reply(&empty, "upstream.test.example", rtype::AAAA, 7).unwrap();
        assert!(got.addrs.is_empty() && got.ttl == 0);
    }

    #[test]
    fn foreign_failed_and_malformed_replies_are_refused() {
        let host = "upstream.test.example";
        let q = query(host, rtype::A, 99).unwrap();
        let ok = reply_to(&q, rcode::NOERROR, &[(rtype::A, 60, &[127, 0, 0, 1])]);
        assert_eq!(
            parse_reply(&ok, host, rtype::A, 98),
            Err(BootstrapError::Foreign)
        );
        assert_eq!(
            parse_reply(&ok, "other.test.example", rtype::A, 99),
            Err(BootstrapError::Foreign)
        );
        assert_eq!(
            parse_reply(&ok, host, rtype::AAAA, 99),
            Err(BootstrapError::Foreign)
        );
        assert_eq!(
            parse_reply(&q, host, rtype::A, 99),
            Err(BootstrapError::Foreign),
            "QR=0"
        );
        let nx = reply_to(&q, rcode::NXDOMAIN, &[]);
        assert_eq!(
            parse_reply(&nx, host, rtype::A, 99),
            Err(BootstrapError::NoSuchName)
        );
        let servfail = reply_to(&q, rcode::SERVFAIL, &[]);
        assert_eq!(
            parse_reply(&servfail, host, rtype::A, 99),
            Err(BootstrapError::Rcode(2))
        );
        let short = reply_to(&q, rcode::NOERROR, &[(rtype::A, 60, &[127, 0, 1])]);
        assert!(matches!(
            parse_reply(&short, host, rtype::A, 99),
            Err(BootstrapError::Malformed(_))
        ));
        for cut in 0..ok.len() {
            assert!(
                parse_reply(&ok[..cut], host, rtype::A, 99).is_err(),
                "cut at {cut}"
            );
        }
        assert_eq!(query(host, 15, 1), Err(BootstrapError::Type));
        assert_eq!(query("bad name!", rtype::A, 1), Err(BootstrapError::Name));
    }
}
