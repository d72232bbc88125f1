//! DNS wire format on raw bytes: the hot-path query scanner, error and local answers, the upstream
//! query, and the record walker the cache uses to find TTLs.
//!
//! Everything here is bounds-checked on every step and never panics on peer input. The query
//! scanner parses only what a decision needs (RFC 1035 §4.1 header and question, RFC 6891 OPT);
//! full validation of upstream replies goes through `domain` in [`crate::answer`].

use crate::CacheKey;

/// Longest domain name in wire form (RFC 1035 §2.3.4); the cache key holds one inline.
pub use crate::key::MAX_NAME_LEN;

/// Length of the fixed DNS header (RFC 1035 §4.1.1).
pub const HEADER_LEN: usize = 12;
/// The classic UDP payload limit without EDNS (RFC 1035 §4.2.1).
pub const CLASSIC_UDP_PAYLOAD: u16 = 512;
/// The EDNS UDP payload size kudurru advertises and uses by default (DNS Flag Day 2020).
pub const DEFAULT_EDNS_PAYLOAD: u16 = 1232;

/// Response codes (RFC 1035 §4.1.1, RFC 6891 §9).
pub mod rcode {
    /// No error.
    pub const NOERROR: u8 = 0;
    /// Format error: the server could not interpret the query.
    pub const FORMERR: u8 = 1;
    /// Server failure.
    pub const SERVFAIL: u8 = 2;
    /// The name does not exist.
    pub const NXDOMAIN: u8 = 3;
    /// Not implemented.
    pub const NOTIMP: u8 = 4;
    /// Refused by policy.
    pub const REFUSED: u8 = 5;
    /// Bad EDNS version (extended rcode 16, RFC 6891 §6.1.3).
    pub const BADVERS: u16 = 16;
}

/// Record types kudurru looks at (IANA DNS parameters).
pub mod rtype {
    /// IPv4 address.
    pub const A: u16 = 1;
    /// Authoritative name server.
    pub const NS: u16 = 2;
    /// Canonical name.
    pub const CNAME: u16 = 5;
    /// Start of authority.
    pub const SOA: u16 = 6;
    /// Domain name pointer.
    pub const PTR: u16 = 12;
    /// Text strings.
    pub const TXT: u16 = 16;
    /// IPv6 address.
    pub const AAAA: u16 = 28;
    /// EDNS pseudo-record (RFC 6891).
    pub const OPT: u16 = 41;
    /// Transaction key (RFC 2930), a meta type.
    pub const TKEY: u16 = 249;
    /// Transaction signature (RFC 8945), a meta type.
    pub const TSIG: u16 = 250;
    /// Incremental zone transfer.
    pub const IXFR: u16 = 251;
    /// Full zone transfer.
    pub const AXFR: u16 = 252;
    /// Mailbox-related records (RFC 1035, obsolete), a query type.
    pub const MAILB: u16 = 253;
    /// Mail agent records (RFC 1035, obsolete), a query type.
    pub const MAILA: u16 = 254;
}

/// Classes kudurru looks at.
pub mod class {
    /// Internet.
    pub const IN: u16 = 1;
    /// Chaos, used for server identification (RFC 4892).
    pub const CH: u16 = 3;
}

/// The EDNS option code for edns-client-subnet (RFC 7871).
pub const OPTION_CLIENT_SUBNET: u16 = 8;
/// The EDNS option code for COOKIE (RFC 7873).
pub const OPTION_COOKIE: u16 = 10;
/// The EDNS option code for padding (RFC 7830).
pub const OPTION_PADDING: u16 = 12;
/// The EDNS option code for edns-tcp-keepalive (RFC 7828).
pub const OPTION_TCP_KEEPALIVE: u16 = 11;
/// The EDNS option code for Extended DNS Errors (RFC 8914).
pub const OPTION_EDE: u16 = 15;

/// Extended DNS Error info codes kudurru sends (RFC 8914 §4).
pub mod ede {
    /// 4, Forged Answer: the answer was made up by policy (RPZ local data).
    pub const FORGED_ANSWER: u16 = 4;
    /// 15, Blocked: the name is blocked by the operator's policy.
    pub const BLOCKED: u16 = 15;
}

/// Responses on encrypted transports are padded to a multiple of this many bytes when the
/// client sent the padding option (RFC 8467 §4.1, the recommended Block-Length Padding).
pub const RESPONSE_PADDING_BLOCK: usize = 468;

/// How responses to one transport carry EDNS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyOptions {
    /// The UDP payload size kudurru advertises (`edns.udpPayload`).
    pub payload: u16,
    /// The idle timeout to announce, in units of 100 ms, to clients that sent
    /// edns-tcp-keepalive (RFC 7828 §3.3.2). Only on stream transports; `None` on UDP, where the
    /// option must not be sent.
    pub tcp_keepalive: Option<u16>,
    /// Pad responses to [`RESPONSE_PADDING_BLOCK`] for clients that sent the padding option
    /// (RFC 7830, RFC 8467): only on encrypted transports, where it hides the answer's size.
    pub padding: bool,
}

impl ReplyOptions {
    /// Options for UDP responses.
    pub fn udp(payload: u16) -> Self {
        Self {
            payload,
            tcp_keepalive: None,
            padding: false,
        }
    }

    /// Options for TCP responses announcing an idle timeout.
    pub fn tcp(payload: u16, idle_timeout: std::time::Duration) -> Self {
        let units = (idle_timeout.as_millis() / 100).min(u128::from(u16::MAX)) as u16;
        Self {
            payload,
            tcp_keepalive: Some(units),
            padding: false,
        }
    }

    /// Options for responses on an encrypted stream (DNS over TLS): as TCP, plus padding.
    pub fn encrypted(payload: u16, idle_timeout: std::time::Duration) -> Self {
        Self {
            padding: true,
            ..Self::tcp(payload, idle_timeout)
        }
    }
}

const FLAG_QR: u16 = 0x8000;
const FLAG_AA: u16 = 0x0400;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;
const FLAG_RA: u16 = 0x0080;
const FLAG_AD: u16 = 0x0020;
const FLAG_CD: u16 = 0x0010;
const OPCODE_MASK: u16 = 0x7800;
const OPT_DO: u32 = 0x8000;

/// Reads a big-endian u16 at `at`, or `None` past the end.
#[inline]
pub fn read_u16(buf: &[u8], at: usize) -> Option<u16> {
    let bytes = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([bytes[0], bytes[1]]))
}

/// Reads a big-endian u32 at `at`, or `None` past the end.
#[inline]
pub fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Writes a big-endian u16 at `at`; the caller guarantees `at + 2 <= buf.len()`.
#[inline]
fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// The message ID of `buf`, if it has a header.
pub fn message_id(buf: &[u8]) -> Option<u16> {
    read_u16(buf, 0)
}

/// The header flags word of `buf`, if it has a header.
pub fn header_flags(buf: &[u8]) -> Option<u16> {
    read_u16(buf, 2)
}

/// The 4-bit header rcode of a message.
pub fn header_rcode(buf: &[u8]) -> Option<u8> {
    header_flags(buf).map(|f| (f & 0x000f) as u8)
}

/// Whether the TC bit is set.
pub fn is_truncated(buf: &[u8]) -> bool {
    header_flags(buf).is_some_and(|f| f & FLAG_TC != 0)
}

/// What the client said in its OPT record (RFC 6891 §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// The requestor's UDP payload size, raised to 512 when smaller (RFC 6891 §6.2.3).
    pub udp_payload: u16,
    /// EDNS version; only 0 is defined.
    pub version: u8,
    /// The DNSSEC OK bit (RFC 3225).
    pub dnssec_ok: bool,
    /// Whether the client sent the padding option (RFC 7830).
    pub padding: bool,
    /// Whether the client sent edns-tcp-keepalive (RFC 7828).
    pub tcp_keepalive: bool,
}

/// Why kudurru answers a query that scanned with an error of its own, before any stage, rather
/// than resolve it (the rules are Unbound's `worker_handle_request`; docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A qtype that is not a question about data: 0 (reserved, RFC 6895 §3.1), OPT (a
    /// pseudo-record, RFC 6891 §6.1.1), TKEY and TSIG (transaction meta types), MAILB and MAILA
    /// (obsolete), and the unassigned rest of the meta range 128–248. FORMERR.
    MetaType,
    /// An EDNS option kudurru reads is malformed: a COOKIE of a length RFC 7873 §4 does not
    /// allow (§5.2.2), an edns-client-subnet option whose family, prefix lengths or address
    /// RFC 7871 §6 does not allow, or an edns-tcp-keepalive with a timeout (a client sends it
    /// empty, RFC 7828 §3.2.1). FORMERR, with an OPT (RFC 6891 §7).
    MalformedOption,
}

impl Refusal {
    /// The rcode the answer carries.
    pub fn rcode(self) -> u8 {
        match self {
            Self::MetaType | Self::MalformedOption => rcode::FORMERR,
        }
    }
}

/// The opcodes kudurru hands to the control thread instead of answering on the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlOpcode {
    /// NOTIFY (opcode 4, RFC 1996): a primary says a zone changed.
    Notify,
    /// UPDATE (opcode 5, RFC 2136): a dynamic update to a primary zone.
    Update,
}

impl ControlOpcode {
    /// The opcode of a request (QR=0) the control thread answers, if `msg` is one.
    pub fn of(msg: &[u8]) -> Option<Self> {
        let flags = header_flags(msg)?;
        if msg.len() < HEADER_LEN || flags & FLAG_QR != 0 {
            return None;
        }
        match (flags & OPCODE_MASK) >> 11 {
            4 => Some(Self::Notify),
            5 => Some(Self::Update),
            _ => None,
        }
    }

    /// The opcode's number.
    pub fn code(self) -> u8 {
        match self {
            Self::Notify => 4,
            Self::Update => 5,
        }
    }
}

/// Why a query cannot be answered normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryError {
    /// Not a DNS query at all (shorter than a header, or QR=1): send nothing.
    Ignore,
    /// A parseable header but a malformed message (RFC 1035 FORMERR).
    FormErr,
    /// An opcode other than QUERY (RFC 1035 NOTIMP).
    NotImp,
    /// An EDNS version kudurru does not speak (RFC 6891 BADVERS).
    BadVers,
}

/// A query scanned on the hot path: borrowed from the receive buffer, no allocation.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    msg: &'a [u8],
    question_end: usize,
    qtype: u16,
    qclass: u16,
    edns: Option<Edns>,
    malformed_option: bool,
    key: CacheKey,
}

impl<'a> Query<'a> {
    /// Scans `msg` as a query: header, exactly one question, and the additional section for OPT.
    ///
    /// Rules (as Unbound's request checks): QR=1 or less than a header is ignored; an opcode other
    /// than QUERY is NOTIMP; QDCOUNT must be 1 and ANCOUNT and NSCOUNT 0; the qname must be
    /// uncompressed, at most 255 bytes, with ordinary labels; at most one OPT, owned by the root;
    /// records must fit the message exactly.
    pub fn parse(msg: &'a [u8]) -> Result<Self, QueryError> {
        let flags = header_flags(msg).ok_or(QueryError::Ignore)?;
        if msg.len() < HEADER_LEN || flags & FLAG_QR != 0 {
            return Err(QueryError::Ignore);
        }
        if flags & OPCODE_MASK != 0 {
            return Err(QueryError::NotImp);
        }
        let counts = [
            read_u16(msg, 4).ok_or(QueryError::Ignore)?,
            read_u16(msg, 6).ok_or(QueryError::Ignore)?,
            read_u16(msg, 8).ok_or(QueryError::Ignore)?,
            read_u16(msg, 10).ok_or(QueryError::Ignore)?,
        ];
        if counts[0] != 1 || counts[1] != 0 || counts[2] != 0 {
            return Err(QueryError::FormErr);
        }
        let mut key = CacheKey::empty();
        let name_end = scan_question_name(msg, &mut key).ok_or(QueryError::FormErr)?;
        let qtype = read_u16(msg, name_end).ok_or(QueryError::FormErr)?;
        let qclass = read_u16(msg, name_end + 2).ok_or(QueryError::FormErr)?;
        let question_end = name_end + 4;
        let (edns, malformed_option) = scan_additional(msg, question_end, counts[3])?;
        if edns.is_some_and(|e| e.version > 0) {
            return Err(QueryError::BadVers);
        }
        let cd = flags & FLAG_CD != 0;
        let dnssec_ok = edns.is_some_and(|e| e.dnssec_ok);
        key.finish(qtype, qclass, dnssec_ok, cd);
        Ok(Self {
            msg,
            question_end,
            qtype,
            qclass,
            edns,
            malformed_option,
            key,
        })
    }

    /// Whether kudurru answers this query with an error itself ([`write_error`] with the
    /// refusal's rcode, question and OPT echoed) instead of resolving it: one range match on the
    /// qtype already scanned, and a flag the option walk set.
    pub fn refusal(&self) -> Option<Refusal> {
        match self.qtype {
            0 | rtype::OPT | 128..=rtype::TSIG | rtype::MAILB | rtype::MAILA => {
                Some(Refusal::MetaType)
            }
            _ if self.malformed_option => Some(Refusal::MalformedOption),
            _ => None,
        }
    }

    /// The raw query.
    pub fn message(&self) -> &'a [u8] {
        self.msg
    }

    /// The message ID.
    pub fn id(&self) -> u16 {
        u16::from_be_bytes([self.msg[0], self.msg[1]])
    }

    /// Whether recursion was desired (RD).
    pub fn recursion_desired(&self) -> bool {
        self.flags() & FLAG_RD != 0
    }

    /// Whether checking is disabled (CD, RFC 4035 §3.2.2).
    pub fn checking_disabled(&self) -> bool {
        self.flags() & FLAG_CD != 0
    }

    fn flags(&self) -> u16 {
        u16::from_be_bytes([self.msg[2], self.msg[3]])
    }

    /// The query type.
    pub fn qtype(&self) -> u16 {
        self.qtype
    }

    /// The query class.
    pub fn qclass(&self) -> u16 {
        self.qclass
    }

    /// The qname in wire form, with the client's letter case.
    pub fn qname_wire(&self) -> &'a [u8] {
        &self.msg[HEADER_LEN..self.question_end - 4]
    }

    /// The whole question section as the client sent it.
    pub fn question_wire(&self) -> &'a [u8] {
        &self.msg[HEADER_LEN..self.question_end]
    }

    /// The client's EDNS, if it sent an OPT record.
    pub fn edns(&self) -> Option<Edns> {
        self.edns
    }

    /// The cache key: lowercased qname, qtype, qclass, DO and CD.
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// The largest UDP response this client accepts (RFC 6891 §6.2.5), capped at `our_max`.
    pub fn udp_limit(&self, our_max: u16) -> usize {
        match self.edns {
            None => usize::from(CLASSIC_UDP_PAYLOAD),
            Some(e) => usize::from(e.udp_payload.min(our_max).max(CLASSIC_UDP_PAYLOAD)),
        }
    }
}

/// Scans the uncompressed question name at offset 12 into `key` (lowercased), returning the
/// offset just past it.
fn scan_question_name(msg: &[u8], key: &mut CacheKey) -> Option<usize> {
    let mut pos = HEADER_LEN;
    loop {
        let len = usize::from(*msg.get(pos)?);
        if len & 0xc0 != 0 {
            // Compression pointers or extended label types have no place in a query's qname.
            return None;
        }
        let label = msg.get(pos..pos + 1 + len)?;
        if pos + 1 + len - HEADER_LEN > MAX_NAME_LEN {
            return None;
        }
        key.push_lowercase(label);
        pos += 1 + len;
        if len == 0 {
            return Some(pos);
        }
    }
}

/// Skips a possibly compressed name starting at `pos`, returning the offset after it.
///
/// Only the bytes at `pos` are walked: a pointer ends the name, so no loop is possible here. The
/// pointer's target is checked to lie before `pos` (RFC 1035 §4.1.4 prior occurrence).
pub fn skip_name(msg: &[u8], mut pos: usize) -> Option<usize> {
    let start = pos;
    let mut walked = 0usize;
    loop {
        let len = *msg.get(pos)?;
        match len & 0xc0 {
            0x00 => {
                let len = usize::from(len);
                walked += len + 1;
                if walked > MAX_NAME_LEN {
                    return None;
                }
                msg.get(pos..pos + 1 + len)?;
                pos += 1 + len;
                if len == 0 {
                    return Some(pos);
                }
            }
            0xc0 => {
                let target = usize::from(read_u16(msg, pos)? & 0x3fff);
                if target >= start {
                    return None;
                }
                return Some(pos + 2);
            }
            _ => return None,
        }
    }
}

/// One resource record located in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAt {
    /// Offset of the owner name.
    pub start: usize,
    /// Offset of the TTL field.
    pub ttl_at: usize,
    /// The record type.
    pub rtype: u16,
    /// Offset of the rdata.
    pub rdata_at: usize,
    /// Offset just past the record.
    pub end: usize,
}

/// Locates the record starting at `pos`.
pub fn record_at(msg: &[u8], pos: usize) -> Option<RecordAt> {
    let name_end = skip_name(msg, pos)?;
    let rtype = read_u16(msg, name_end)?;
    let rdlen = usize::from(read_u16(msg, name_end + 8)?);
    let rdata_at = name_end + 10;
    let end = rdata_at + rdlen;
    if end > msg.len() {
        return None;
    }
    Some(RecordAt {
        start: pos,
        ttl_at: name_end + 4,
        rtype,
        rdata_at,
        end,
    })
}

/// Scans the additional section of a query for its OPT record; the flag says whether an option
/// kudurru reads was malformed.
fn scan_additional(
    msg: &[u8],
    mut pos: usize,
    count: u16,
) -> Result<(Option<Edns>, bool), QueryError> {
    let mut edns = None;
    let mut malformed = false;
    for _ in 0..count {
        let rr = record_at(msg, pos).ok_or(QueryError::FormErr)?;
        if rr.rtype == rtype::OPT {
            // RFC 6891 §6.1.1: one OPT, owned by the root.
            if edns.is_some() || rr.start + 1 != rr.ttl_at - 4 || msg[rr.start] != 0 {
                return Err(QueryError::FormErr);
            }
            let payload = read_u16(msg, rr.ttl_at - 2).ok_or(QueryError::FormErr)?;
            let ttl = read_u32(msg, rr.ttl_at).ok_or(QueryError::FormErr)?;
            let options = scan_options(&msg[rr.rdata_at..rr.end]).ok_or(QueryError::FormErr)?;
            malformed = options.malformed;
            edns = Some(Edns {
                udp_payload: payload.max(CLASSIC_UDP_PAYLOAD),
                version: (ttl >> 16) as u8,
                dnssec_ok: ttl & OPT_DO != 0,
                padding: options.padding,
                tcp_keepalive: options.tcp_keepalive,
            });
        }
        pos = rr.end;
    }
    if pos != msg.len() {
        return Err(QueryError::FormErr);
    }
    Ok((edns, malformed))
}

/// What the option walk found in a client's OPT.
#[derive(Debug, Default)]
struct Options {
    padding: bool,
    tcp_keepalive: bool,
    /// A keepalive, COOKIE or edns-client-subnet option that its RFC does not allow.
    malformed: bool,
}

/// Walks EDNS options, checking their lengths (a length past the OPT's rdata is an error, a
/// header-only FORMERR). A keepalive option from a client must be empty (RFC 7828 §3.2.1);
/// it, COOKIE and edns-client-subnet are checked as their RFCs say (a flag, answered FORMERR
/// with an OPT); others are skipped.
fn scan_options(mut rdata: &[u8]) -> Option<Options> {
    let mut options = Options::default();
    while !rdata.is_empty() {
        let code = read_u16(rdata, 0)?;
        let len = usize::from(read_u16(rdata, 2)?);
        let data = rdata.get(4..4 + len)?;
        rdata = &rdata[4 + len..];
        match code {
            OPTION_PADDING => options.padding = true,
            // A client must send it empty (RFC 7828 §3.2.1): one with a timeout is answered
            // FORMERR with an OPT, as the other malformed options are.
            OPTION_TCP_KEEPALIVE if len != 0 => options.malformed = true,
            OPTION_TCP_KEEPALIVE => options.tcp_keepalive = true,
            OPTION_COOKIE => options.malformed |= !is_valid_cookie(len),
            OPTION_CLIENT_SUBNET => options.malformed |= !is_valid_client_subnet(data),
            _ => {}
        }
    }
    Some(options)
}

/// RFC 7873 §4: an 8-byte client cookie, optionally followed by a server cookie of 8 to 32 bytes.
fn is_valid_cookie(len: usize) -> bool {
    len == 8 || (16..=40).contains(&len)
}

/// RFC 7871 §6: FAMILY 1 (IPv4, prefixes up to 32) or 2 (IPv6, up to 128); SCOPE PREFIX-LENGTH 0
/// in queries; exactly as many ADDRESS octets as SOURCE PREFIX-LENGTH needs, with no bit set past
/// it. FAMILY 0 with both prefixes 0 and no address is accepted too: `dig +subnet=0` sends it to
/// opt out, and BIND accepts it.
fn is_valid_client_subnet(data: &[u8]) -> bool {
    let (Some(family), Some(&source), Some(&scope)) = (read_u16(data, 0), data.get(2), data.get(3))
    else {
        return false;
    };
    let address = &data[4..];
    let longest = match family {
        0 => return source == 0 && scope == 0 && address.is_empty(),
        1 => 32,
        2 => 128,
        _ => return false,
    };
    let octets = usize::from(source).div_ceil(8);
    let spare_bits = octets * 8 - usize::from(source);
    source <= longest
        && scope == 0
        && address.len() == octets
        && address
            .last()
            .is_none_or(|&last| last & ((1u8 << spare_bits) - 1) == 0)
}

/// Response header bits that kudurru sets from a query.
fn response_flags(query_flags: u16, rcode: u8, authoritative: bool) -> u16 {
    let mut flags = FLAG_QR | FLAG_RA | (query_flags & (OPCODE_MASK | FLAG_RD | FLAG_CD));
    if authoritative {
        flags |= FLAG_AA;
    }
    flags | u16::from(rcode & 0x0f)
}

/// Appends an OPT record (RFC 6891 §6.1.2) advertising `payload`, with an extended rcode.
pub fn push_opt(out: &mut Vec<u8>, payload: u16, extended_rcode: u16, dnssec_ok: bool) {
    let ttl = (u32::from(extended_rcode >> 4) << 24) | if dnssec_ok { OPT_DO } else { 0 };
    out.push(0);
    out.extend_from_slice(&rtype::OPT.to_be_bytes());
    out.extend_from_slice(&payload.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
}

/// Increments the 16-bit count at `at` (one of the header section counts).
fn bump_count(out: &mut [u8], at: usize) {
    let value = u16::from_be_bytes([out[at], out[at + 1]]).wrapping_add(1);
    put_u16(out, at, value);
}

/// Offset of ARCOUNT in the header.
pub const ARCOUNT_AT: usize = 10;
/// Offset of ANCOUNT in the header.
pub const ANCOUNT_AT: usize = 6;
/// Offset of NSCOUNT in the header.
pub const NSCOUNT_AT: usize = 8;

/// Writes an error response for a query that did not scan: header only, unless `question` is
/// known. Used for FORMERR and NOTIMP where the question may be unusable.
pub fn write_header_error(msg: &[u8], rcode: u8, out: &mut Vec<u8>) -> bool {
    let (Some(id), Some(flags)) = (message_id(msg), header_flags(msg)) else {
        return false;
    };
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&response_flags(flags, rcode, false).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    true
}

/// Writes the start of a response to `query`: header (counts zero but QDCOUNT 1) and question
/// as the client sent it.
pub fn start_response(query: &Query<'_>, rcode: u8, authoritative: bool, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&query.id().to_be_bytes());
    out.extend_from_slice(&response_flags(query.flags(), rcode, authoritative).to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(query.question_wire());
}

/// Appends the response OPT for a client that sent `edns`: our payload, DO echoed, and
/// edns-tcp-keepalive when the client asked for it on a stream transport.
pub fn push_reply_opt(out: &mut Vec<u8>, edns: Edns, options: &ReplyOptions) {
    push_reply_opt_with_ede(out, edns, options, None);
}

/// [`push_reply_opt`] with an Extended DNS Error option (RFC 8914 §2: INFO-CODE, no text)
/// before keepalive and padding (padding stays last, RFC 7830 §3).
pub fn push_reply_opt_with_ede(
    out: &mut Vec<u8>,
    edns: Edns,
    options: &ReplyOptions,
    ede: Option<u16>,
) {
    push_opt(out, options.payload, 0, edns.dnssec_ok);
    let rdlen_at = out.len() - 2;
    if let Some(code) = ede {
        out.extend_from_slice(&OPTION_EDE.to_be_bytes());
        out.extend_from_slice(&2u16.to_be_bytes());
        out.extend_from_slice(&code.to_be_bytes());
    }
    if let (true, Some(timeout)) = (edns.tcp_keepalive, options.tcp_keepalive) {
        out.extend_from_slice(&OPTION_TCP_KEEPALIVE.to_be_bytes());
        out.extend_from_slice(&2u16.to_be_bytes());
        out.extend_from_slice(&timeout.to_be_bytes());
    }
    let unpadded = out.len() + 4;
    let pad = (RESPONSE_PADDING_BLOCK - unpadded % RESPONSE_PADDING_BLOCK) % RESPONSE_PADDING_BLOCK;
    if edns.padding && options.padding && unpadded + pad <= usize::from(u16::MAX) {
        // The padding option comes last, so the whole message, its own 4-byte header
        // included, ends on a block boundary (RFC 7830 §3: zero-filled).
        out.extend_from_slice(&OPTION_PADDING.to_be_bytes());
        out.extend_from_slice(&(pad as u16).to_be_bytes());
        out.resize(out.len() + pad, 0);
    }
    let rdlen = out.len() - rdlen_at - 2;
    put_u16(out, rdlen_at, rdlen as u16);
    bump_count(out, ARCOUNT_AT);
}

/// Ends a response built with [`start_response`]: adds an OPT when the client sent one.
pub fn finish_response(query: &Query<'_>, out: &mut Vec<u8>, options: &ReplyOptions) {
    if let Some(edns) = query.edns() {
        push_reply_opt(out, edns, options);
    }
}

/// [`finish_response`] with an Extended DNS Error (RFC 8914) for a client that sent EDNS;
/// a client without EDNS gets no OPT, as before.
pub fn finish_response_with_ede(
    query: &Query<'_>,
    out: &mut Vec<u8>,
    options: &ReplyOptions,
    ede: Option<u16>,
) {
    if let Some(edns) = query.edns() {
        push_reply_opt_with_ede(out, edns, options, ede);
    }
}

/// Reads the possibly compressed name at `pos` of `msg` into `into` in uncompressed wire form
/// (lowercased when `lowercase`), following pointers only backwards (RFC 1035 §4.1.4) and
/// never past 255 bytes. Returns the name's length in `into` and the offset just past the
/// name where it started (after its first pointer, if any).
pub fn read_name(
    msg: &[u8],
    pos: usize,
    into: &mut [u8; MAX_NAME_LEN],
    lowercase: bool,
) -> Option<(usize, usize)> {
    let mut at = pos;
    let mut len = 0usize;
    let mut end = None;
    // Every pointer goes strictly backwards, so the walk ends; this bounds it anyway.
    let mut limit = pos;
    loop {
        let first = *msg.get(at)?;
        match first & 0xc0 {
            0x00 => {
                let label_len = usize::from(first);
                let label = msg.get(at..at + 1 + label_len)?;
                if len + label.len() > MAX_NAME_LEN {
                    return None;
                }
                into[len..len + label.len()].copy_from_slice(label);
                if lowercase {
                    into[len + 1..len + label.len()].make_ascii_lowercase();
                }
                len += label.len();
                at += label.len();
                if label_len == 0 {
                    return Some((len, end.unwrap_or(at)));
                }
            }
            0xc0 => {
                let target = usize::from(read_u16(msg, at)? & 0x3fff);
                if target >= limit {
                    return None;
                }
                end.get_or_insert(at + 2);
                limit = target;
                at = target;
            }
            _ => return None,
        }
    }
}

/// Writes a complete error response (header, question, OPT if the client sent one).
pub fn write_error(query: &Query<'_>, rcode: u8, options: &ReplyOptions, out: &mut Vec<u8>) {
    start_response(query, rcode, false, out);
    finish_response(query, out, options);
}

/// Writes an empty TC=1 answer (header, question, OPT if the client sent one): the rate
/// limiter's "slip", which tells a real client to retry over TCP without amplifying anything.
pub fn write_truncated(query: &Query<'_>, options: &ReplyOptions, out: &mut Vec<u8>) {
    start_response(query, rcode::NOERROR, false, out);
    out[2] |= (FLAG_TC >> 8) as u8;
    finish_response(query, out, options);
}

/// Writes the BADVERS answer (RFC 6891 §6.1.3): header, question, OPT version 0 with the
/// extended rcode. `msg` scanned far enough to know it carried an OPT.
pub fn write_badvers(msg: &[u8], payload: u16, out: &mut Vec<u8>) -> bool {
    let mut key = CacheKey::empty();
    let Some(name_end) = scan_question_name(msg, &mut key) else {
        return false;
    };
    let (Some(id), Some(flags)) = (message_id(msg), header_flags(msg)) else {
        return false;
    };
    let Some(question) = msg.get(HEADER_LEN..name_end + 4) else {
        return false;
    };
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    let badvers_low = (rcode::BADVERS & 0x0f) as u8;
    out.extend_from_slice(&response_flags(flags, badvers_low, false).to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]);
    out.extend_from_slice(question);
    push_opt(out, payload, rcode::BADVERS, false);
    true
}

/// Appends a resource record whose owner is a compression pointer to `owner_at`.
pub fn push_record(out: &mut Vec<u8>, owner_at: usize, rtype: u16, ttl: u32, rdata: &[u8]) {
    out.extend_from_slice(&(0xc000 | owner_at as u16).to_be_bytes());
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&class::IN.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
}

/// Adds one to the answer count of a response under construction.
pub fn count_answer(out: &mut [u8]) {
    bump_count(out, ANCOUNT_AT);
}

/// Adds one to the authority count of a response under construction.
pub fn count_authority(out: &mut [u8]) {
    bump_count(out, NSCOUNT_AT);
}

/// Writes the query kudurru sends upstream for `key`: RD=1, CD as the key says, the lowercased
/// qname, and an OPT advertising [`DEFAULT_EDNS_PAYLOAD`] with DO as the key says.
pub fn write_upstream_query(key: &CacheKey, id: u16, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    let flags = FLAG_RD | if key.checking_disabled() { FLAG_CD } else { 0 };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]);
    out.extend_from_slice(key.question());
    push_opt(out, DEFAULT_EDNS_PAYLOAD, 0, key.dnssec_ok());
}

/// Queries on encrypted upstream connections are padded to a multiple of this many bytes
/// (RFC 8467 §4.1: the recommended Block-Length Padding for queries).
pub const QUERY_PADDING_BLOCK: usize = 128;

/// [`write_upstream_query`] for an encrypted upstream with `upstream.padding` on: the OPT
/// carries a padding option (RFC 7830, zero-filled, last) that makes the whole message a
/// multiple of [`QUERY_PADDING_BLOCK`] bytes, so its length says little about the name.
pub fn write_padded_upstream_query(key: &CacheKey, id: u16, out: &mut Vec<u8>) {
    write_upstream_query(key, id, out);
    let rdlen_at = out.len() - 2;
    // The option's own 4 bytes count towards the block.
    let unpadded = out.len() + 4;
    let pad = (QUERY_PADDING_BLOCK - unpadded % QUERY_PADDING_BLOCK) % QUERY_PADDING_BLOCK;
    out.extend_from_slice(&OPTION_PADDING.to_be_bytes());
    out.extend_from_slice(&(pad as u16).to_be_bytes());
    out.resize(out.len() + pad, 0);
    let rdlen = out.len() - rdlen_at - 2;
    put_u16(out, rdlen_at, rdlen as u16);
}

/// Sets TC and keeps only header, question and OPT (if `keep_opt`): the answer did not fit.
pub fn truncate_to_question(out: &mut Vec<u8>, question_end: usize) {
    out.truncate(question_end);
    out[2] |= (FLAG_TC >> 8) as u8;
    out[6..12].fill(0);
}

/// Sets the response flags of a cached message for this query: ID, RD and CD from the query, QR
/// and RA set, AA, AD and the rcode kept from the cached answer.
pub fn patch_header(out: &mut [u8], query: &Query<'_>) {
    put_u16(out, 0, query.id());
    let cached = u16::from_be_bytes([out[2], out[3]]);
    let keep = cached & (FLAG_AA | FLAG_AD | 0x000f);
    let flags = FLAG_QR | FLAG_RA | keep | (query.flags() & (FLAG_RD | FLAG_CD));
    put_u16(out, 2, flags);
}

/// Whether a reply's header flags say QR=1 and the reply carries `id`.
pub fn is_reply_to(reply: &[u8], id: u16) -> bool {
    message_id(reply) == Some(id) && header_flags(reply).is_some_and(|f| f & FLAG_QR != 0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A query for `name` (dotted, no trailing dot) with optional OPT.
    pub(crate) fn query(name: &str, qtype: u16, opt: Option<(u16, u8, bool)>) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.').filter(|l| !l.is_empty()) {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&class::IN.to_be_bytes());
        if let Some((payload, version, dnssec_ok)) = opt {
            m[11] = 1;
            m.push(0);
            m.extend_from_slice(&rtype::OPT.to_be_bytes());
            m.extend_from_slice(&payload.to_be_bytes());
            m.extend_from_slice(&[0, version, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
        }
        m
    }

    #[test]
    fn scans_query_with_lowercased_key() {
        let m = query("WwW.Example.COM", rtype::A, Some((4096, 0, true)));
        let q = Query::parse(&m).expect("valid query");
        assert_eq!(q.id(), 0x1234);
        assert!(q.recursion_desired());
        assert_eq!(q.qtype(), rtype::A);
        assert_eq!(
            q.edns().map(|e| (e.udp_payload, e.dnssec_ok)),
            Some((4096, true))
        );
        assert_eq!(&q.key().question()[..4], b"\x03www");
        assert_eq!(&q.qname_wire()[..4], b"\x03WwW");
        assert!(q.key().dnssec_ok());
        assert_eq!(q.udp_limit(1232), 1232);
    }

    #[test]
    fn rfc8467_4_1_upstream_queries_pad_to_128_byte_blocks() {
        for name in ["a.example", "a-much-longer-name.below.some.example.com"] {
            let m = query(name, rtype::AAAA, Some((1232, 0, true)));
            let key = *Query::parse(&m).expect("valid query").key();
            let mut plain = Vec::new();
            write_upstream_query(&key, 7, &mut plain);
            let mut padded = Vec::new();
            write_padded_upstream_query(&key, 7, &mut padded);
            assert_eq!(padded.len() % QUERY_PADDING_BLOCK, 0, "{name}");
            // The same query, one padding option (last, zero-filled) in the OPT.
            let q = Query::parse(&padded).expect("a padded query parses");
            assert!(q.edns().is_some_and(|e| e.padding && e.dnssec_ok));
            assert_eq!(q.key().question(), key.question());
            assert_eq!(padded[..plain.len() - 2], plain[..plain.len() - 2]);
            let option = &padded[plain.len()..plain.len() + 4];
            let pad = usize::from(u16::from_be_bytes([option[2], option[3]]));
            assert_eq!(option[..2], OPTION_PADDING.to_be_bytes());
            assert_eq!(padded.len(), plain.len() + 4 + pad);
            assert!(padded[plain.len() + 4..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn rfc1035_garbage_and_replies_are_ignored() {
        assert_eq!(Query::parse(&[1, 2, 3]).unwrap_err(), QueryError::Ignore);
        let mut reply = query("a.test", rtype::A, None);
        reply[2] |= 0x80;
        assert_eq!(Query::parse(&reply).unwrap_err(), QueryError::Ignore);
    }

    #[test]
    fn rfc1035_malformed_queries_are_formerr() {
        let good = query("a.test", rtype::A, None);
        let mut two_questions = good.clone();
        two_questions[5] = 2;
        let mut with_answer = good.clone();
        with_answer[7] = 1;
        let truncated = good[..good.len() - 1].to_vec();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut pointer = good.clone();
        pointer[12] = 0xc0;
        let mut long = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for _ in 0..5 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.extend_from_slice(&[0, 0, 1, 0, 1]);
        for bad in [
            two_questions,
            with_answer,
            truncated,
            trailing,
            pointer,
            long,
        ] {
            assert_eq!(
                Query::parse(&bad).unwrap_err(),
                QueryError::FormErr,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rfc6891_two_opts_are_formerr_and_version_1_is_badvers() {
        let mut two = query("a.test", rtype::A, Some((1232, 0, false)));
        let opt = two[two.len() - 11..].to_vec();
        two.extend_from_slice(&opt);
        two[11] = 2;
        assert_eq!(Query::parse(&two).unwrap_err(), QueryError::FormErr);
        let v1 = query("a.test", rtype::A, Some((1232, 1, false)));
        assert_eq!(Query::parse(&v1).unwrap_err(), QueryError::BadVers);
        let mut out = Vec::new();
        assert!(write_badvers(&v1, 1232, &mut out));
        assert_eq!(out.len(), v1.len());
        assert_eq!(read_u32(&out, out.len() - 6), Some(1 << 24));
    }

    #[test]
    fn rfc6891_small_payload_is_raised_to_512() {
        let m = query("a.test", rtype::A, Some((100, 0, false)));
        assert_eq!(Query::parse(&m).unwrap().udp_limit(1232), 512);
    }

    #[test]
    fn opcode_other_than_query_is_notimp() {
        let mut m = query("a.test", rtype::A, None);
        m[2] |= 5 << 3;
        assert_eq!(Query::parse(&m).unwrap_err(), QueryError::NotImp);
    }

    #[test]
    fn notify_and_update_go_to_the_control_thread_other_opcodes_do_not() {
        let base = query("corp.example", rtype::SOA, None);
        for (opcode, expected) in [
            (0u8, None),
            (2, None),
            (4, Some(ControlOpcode::Notify)),
            (5, Some(ControlOpcode::Update)),
        ] {
            let mut m = base.clone();
            m[2] = (m[2] & 0x87) | (opcode << 3);
            assert_eq!(ControlOpcode::of(&m), expected, "opcode {opcode}");
            m[2] |= 0x80; // a response is never handed on
            assert_eq!(ControlOpcode::of(&m), None);
        }
        assert_eq!(ControlOpcode::of(&[0x20; 5]), None);
    }

    #[test]
    fn error_response_echoes_question_and_opt() {
        let m = query("A.test", rtype::A, Some((1232, 0, true)));
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        write_error(&q, rcode::SERVFAIL, &ReplyOptions::udp(1232), &mut out);
        assert_eq!(header_rcode(&out), Some(rcode::SERVFAIL));
        assert_eq!(&out[12..12 + q.question_wire().len()], q.question_wire());
        assert_eq!(out.len(), m.len());
        let flags = header_flags(&out).unwrap();
        assert_ne!(flags & FLAG_RA, 0);
        assert_ne!(flags & FLAG_RD, 0);
    }

    #[test]
    fn rfc7828_keepalive_is_announced_on_tcp_only_when_asked() {
        let mut m = query("a.test", rtype::A, Some((1232, 0, false)));
        // Append an empty edns-tcp-keepalive option to the OPT record.
        m.extend_from_slice(&[0, 11, 0, 0]);
        let rdlen_at = m.len() - 6;
        m[rdlen_at..rdlen_at + 2].copy_from_slice(&4u16.to_be_bytes());
        let q = Query::parse(&m).unwrap();
        assert!(q.edns().unwrap().tcp_keepalive);
        let mut out = Vec::new();
        let tcp = ReplyOptions::tcp(1232, std::time::Duration::from_secs(10));
        write_error(&q, rcode::SERVFAIL, &tcp, &mut out);
        assert!(out.ends_with(&[0, 6, 0, 11, 0, 2, 0, 100]), "{out:?}");
        write_error(&q, rcode::SERVFAIL, &ReplyOptions::udp(1232), &mut out);
        assert!(out.ends_with(&[0, 0]), "no keepalive over UDP");
        // A client must send the option empty (RFC 7828 §3.2.1).
        let mut bad = m.clone();
        bad.extend_from_slice(&[0, 1]);
        bad[rdlen_at..rdlen_at + 2].copy_from_slice(&6u16.to_be_bytes());
        let len_at = bad.len() - 4;
        bad[len_at..len_at + 2].copy_from_slice(&2u16.to_be_bytes());
        let bad = Query::parse(&bad).expect("a malformed option still scans");
        assert_eq!(bad.refusal(), Some(Refusal::MalformedOption));
        let mut out = Vec::new();
        write_error(&bad, Refusal::MalformedOption.rcode(), &tcp, &mut out);
        assert_eq!(header_flags(&out).unwrap() & 0xf, u16::from(rcode::FORMERR));
        assert_eq!(&out[10..12], &[0, 1], "the FORMERR carries an OPT");
    }

    #[test]
    fn rfc8467_responses_on_encrypted_transports_are_padded_to_468_when_asked() {
        let mut m = query("a.test", rtype::A, Some((1232, 0, false)));
        // Append a padding option (any length) to the OPT record.
        m.extend_from_slice(&[0, 12, 0, 3, 0, 0, 0]);
        let rdlen_at = m.len() - 9;
        m[rdlen_at..rdlen_at + 2].copy_from_slice(&7u16.to_be_bytes());
        let q = Query::parse(&m).unwrap();
        assert!(q.edns().unwrap().padding);
        let idle = std::time::Duration::from_secs(10);
        let mut out = Vec::new();
        write_error(
            &q,
            rcode::SERVFAIL,
            &ReplyOptions::encrypted(1232, idle),
            &mut out,
        );
        assert_eq!(out.len(), RESPONSE_PADDING_BLOCK);
        // The OPT is last: its RDATA is one padding option of zeros filling the block.
        let opt_rdata_at = out.len() - (RESPONSE_PADDING_BLOCK - m.len() + 7);
        let rdlen = u16::from_be_bytes([out[opt_rdata_at - 2], out[opt_rdata_at - 1]]);
        assert_eq!(usize::from(rdlen), out.len() - opt_rdata_at);
        assert_eq!(&out[opt_rdata_at..opt_rdata_at + 2], &[0, 12]);
        assert!(out[opt_rdata_at + 4..].iter().all(|&b| b == 0));
        let parsed = domain::base::Message::from_octets(out.clone()).unwrap();
        assert_eq!(parsed.header_counts().arcount(), 1);
        // Not over plain TCP, and not when the client did not ask.
        write_error(
            &q,
            rcode::SERVFAIL,
            &ReplyOptions::tcp(1232, idle),
            &mut out,
        );
        assert!(out.ends_with(&[0, 0]), "no padding over TCP");
        let plain = query("a.test", rtype::A, Some((1232, 0, false)));
        let q = Query::parse(&plain).unwrap();
        write_error(
            &q,
            rcode::SERVFAIL,
            &ReplyOptions::encrypted(1232, idle),
            &mut out,
        );
        assert_eq!(out.len(), plain.len());
    }

    #[test]
    fn rfc6895_3_1_meta_qtypes_are_refused_with_formerr_and_transfers_left_to_the_zones() {
        for qtype in [0, rtype::OPT, 128, 200, 248, rtype::TKEY, rtype::TSIG] {
            let m = query("a.test", qtype, Some((1232, 0, false)));
            let q = Query::parse(&m).expect("a meta qtype scans");
            assert_eq!(q.refusal(), Some(Refusal::MetaType), "qtype {qtype}");
        }
        for qtype in [rtype::MAILB, rtype::MAILA] {
            let q = query("a.test", qtype, None);
            assert_eq!(Query::parse(&q).unwrap().refusal(), Some(Refusal::MetaType));
        }
        // The zone stage serves or refuses transfers (zone::Zones::answer).
        for qtype in [rtype::AXFR, rtype::IXFR] {
            let q = query("a.test", qtype, None);
            assert_eq!(Query::parse(&q).unwrap().refusal(), None);
        }
        // Data types, ANY (255) and types past the meta range are asked upstream.
        for qtype in [rtype::A, rtype::AAAA, 46, 127, 255, 256, 32769, 65535] {
            let q = query("a.test", qtype, None);
            assert_eq!(Query::parse(&q).unwrap().refusal(), None, "qtype {qtype}");
        }
        assert_eq!(Refusal::MetaType.rcode(), rcode::FORMERR);
    }

    /// `query` with `(code, data)` appended to its OPT record (the query must have one, last).
    fn with_option(mut m: Vec<u8>, code: u16, data: &[u8]) -> Vec<u8> {
        let rdlen_at = m.len() - 2;
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(&(data.len() as u16).to_be_bytes());
        m.extend_from_slice(data);
        let rdlen = (m.len() - rdlen_at - 2) as u16;
        m[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        m
    }

    fn option_refusal(code: u16, data: &[u8]) -> Option<Refusal> {
        let m = with_option(
            query("a.test", rtype::A, Some((1232, 0, false))),
            code,
            data,
        );
        Query::parse(&m)
            .expect("a malformed option still scans")
            .refusal()
    }

    #[test]
    fn rfc7873_5_2_2_malformed_cookie_is_formerr() {
        for len in [0, 1, 7, 9, 15, 41, 64] {
            assert_eq!(
                option_refusal(OPTION_COOKIE, &vec![0xab; len]),
                Some(Refusal::MalformedOption),
                "cookie of {len} bytes"
            );
        }
        for len in [8, 16, 24, 40] {
            assert_eq!(
                option_refusal(OPTION_COOKIE, &vec![0xab; len]),
                None,
                "{len}"
            );
        }
        assert_eq!(Refusal::MalformedOption.rcode(), rcode::FORMERR);
    }

    #[test]
    fn rfc7871_6_malformed_client_subnet_is_formerr() {
        let ecs = |family: u16, source: u8, scope: u8, address: &[u8]| {
            let mut data = family.to_be_bytes().to_vec();
            data.extend_from_slice(&[source, scope]);
            data.extend_from_slice(address);
            option_refusal(OPTION_CLIENT_SUBNET, &data)
        };
        let bad = Some(Refusal::MalformedOption);
        assert_eq!(
            ecs(1, 200, 0, &[192, 0, 2, 0]),
            bad,
            "source prefix 200 for IPv4"
        );
        assert_eq!(ecs(1, 33, 0, &[192, 0, 2, 0, 0]), bad);
        assert_eq!(ecs(2, 129, 0, &[0x20; 17]), bad);
        assert_eq!(ecs(3, 8, 0, &[1]), bad, "unknown family");
        assert_eq!(
            ecs(1, 24, 0, &[192, 0, 2, 0]),
            bad,
            "too many address octets"
        );
        assert_eq!(ecs(1, 24, 0, &[192, 0]), bad, "too few address octets");
        assert_eq!(ecs(1, 20, 0, &[192, 0, 0x2f]), bad, "bits past the prefix");
        assert_eq!(ecs(1, 24, 8, &[192, 0, 2]), bad, "a scope in a query");
        assert_eq!(ecs(0, 8, 0, &[1]), bad, "family 0 with a prefix");
        assert_eq!(
            option_refusal(OPTION_CLIENT_SUBNET, &[0, 1, 24]),
            bad,
            "short"
        );
        assert_eq!(ecs(1, 24, 0, &[192, 0, 2]), None);
        assert_eq!(ecs(1, 20, 0, &[192, 0, 0x20]), None);
        assert_eq!(ecs(1, 0, 0, &[]), None, "opting out");
        assert_eq!(ecs(0, 0, 0, &[]), None, "opting out as dig +subnet=0 does");
        assert_eq!(ecs(2, 56, 0, &[0x20, 1, 0xd, 0xb8, 0, 0, 0]), None);
        assert_eq!(ecs(2, 128, 0, &[0x20; 16]), None);
        // Options kudurru does not read are not judged.
        assert_eq!(option_refusal(65001, &[1, 2, 3]), None);
    }

    #[test]
    fn skip_name_rejects_forward_pointers() {
        let msg = [0u8, 0, 0xc0, 2];
        assert_eq!(skip_name(&msg, 2), None);
        let msg = [0u8, 0, 0xc0, 0];
        assert_eq!(skip_name(&msg, 2), Some(4));
    }
}
