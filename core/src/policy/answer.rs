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
