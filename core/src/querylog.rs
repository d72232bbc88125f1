//! The query log's record: what a core writes per answered or dropped query, and what the
//! control thread's writer reads back.
//!
//! ```text
//! core: RecordRef::encode ─▶ its batch (Vec<u8>) ─▶ bounded channel ─▶ control: Records (decode)
//!                                                                      ─▶ summarize, privacy, sinks
//! ```
//!
//! The core copies what only it knows (time, client, transport, client ID, where the answer
//! came from, the upstream and its latency, the policy and list that blocked) and the two
//! messages as they went over the wire; everything derived from the messages (name, type,
//! rcode, flags, the answer's records) is worked out on the control thread, off the query
//! path ([`Summary`]).
//!
//! One record, little-endian, after a `u32` length of the rest:
//!
//! ```text
//! version u8 (1) · transport u8 · source u8 · flags u8 · time_ns u64 · address [u8; 16]
//! (IPv4 mapped) · port u16 · upstream latency µs u32 · client ID, policy, list, upstream
//! (u8 length + UTF-8 each) · query, response (u16 length + bytes each)
//! ```
//!
//! The decoder is total: a short or inconsistent record is an error, never a panic (the bytes
//! come from this process, but a decoder that trusts its input is one bug away from a crash).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The format version this build writes and reads.
pub const VERSION: u8 = 1;

/// Most bytes of a message kept in a record; longer messages keep their first `MESSAGE_MAX`
/// bytes and set [`flags::CLIPPED`] (a 64 KiB AXFR answer does not belong in a query log).
pub const MESSAGE_MAX: usize = 4096;

/// The fixed part of a record after its length: version … latency.
const FIXED: usize = 1 + 1 + 1 + 1 + 8 + 16 + 2 + 4;

/// How the query arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Transport {
    /// DNS over UDP.
    Udp = 0,
    /// DNS over TCP.
    Tcp = 1,
    /// DNS over TLS (RFC 7858).
    Dot = 2,
    /// DNS over HTTPS on HTTP/2 or HTTP/1.1 (RFC 8484).
    Doh = 3,
    /// DNS over QUIC (RFC 9250).
    Doq = 4,
    /// DNS over HTTPS on HTTP/3.
    Doh3 = 5,
}

impl Transport {
    /// Every transport, in code order.
    pub const ALL: [Self; 6] = [
        Self::Udp,
        Self::Tcp,
        Self::Dot,
        Self::Doh,
        Self::Doq,
        Self::Doh3,
    ];

    /// The name in the API, the CLI and metrics (`udp`, `tcp`, `dot`, `doh`, `doq`, `doh3`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Dot => "dot",
            Self::Doh => "doh",
            Self::Doq => "doq",
            Self::Doh3 => "doh3",
        }
    }

    /// The transport spelled `label`.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.label() == label)
    }

    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

/// Where the answer came from (or why there was none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Source {
    /// The cache: this core's shard or its L1.
    Cache = 0,
    /// An upstream, after a miss ([`RecordRef::upstream`] names it).
    Upstream = 1,
    /// An expired cache entry served stale (RFC 8767), after the upstream failed or was slow.
    Stale = 2,
    /// Answered here without the cache: an authoritative or built-in zone, CHAOS names, the
    /// health name, an error answer (FORMERR, NOTIMP, SERVFAIL from the resolver), a refusal.
    Local = 3,
    /// A policy answered: a block answer or an address rewrite ([`RecordRef::policy`]).
    Policy = 4,
    /// Nothing was sent: a drop by the rate limiter, the access list, an RPZ drop rule, or a
    /// message not worth an answer.
    Dropped = 5,
}

impl Source {
    /// Every source, in code order.
    pub const ALL: [Self; 6] = [
        Self::Cache,
        Self::Upstream,
        Self::Stale,
        Self::Local,
        Self::Policy,
        Self::Dropped,
    ];

    /// The name in the API and the CLI.
    pub fn label(self) -> &'static str {
        match self {
            Self::Cache => "cache",
            Self::Upstream => "upstream",
            Self::Stale => "stale",
            Self::Local => "local",
            Self::Policy => "policy",
            Self::Dropped => "dropped",
        }
    }

    /// The source spelled `label`.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.label() == label)
    }

    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

/// How much of the client a log entry keeps (`querylog.privacy`, globally and per client
/// group). Ordered from most to least revealing: a client in several groups gets the strictest
/// of their settings ([`Privacy::strictest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Privacy {
    /// The address as it came.
    #[default]
    Full,
    /// The address's network only: IPv4 /24, IPv6 /48 (still says where the client is).
    Truncate,
    /// A keyed HMAC pseudonym of the address: says nothing of where the client is, but links
    /// one client's queries within a key period; the key rotates on a schedule and whenever
    /// the privacy settings change, so pseudonyms of different periods cannot be linked.
    Pseudonymize,
    /// No client at all.
    None,
    /// The query is not logged, only counted in the rollups.
    Omit,
}

impl Privacy {
    /// Every mode, least strict first.
    pub const ALL: [Self; 5] = [
        Self::Full,
        Self::Truncate,
        Self::Pseudonymize,
        Self::None,
        Self::Omit,
    ];

    /// The spelling in settings and specs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Pseudonymize => "pseudonymize",
            Self::Truncate => "truncate",
            Self::None => "none",
            Self::Omit => "omit",
        }
    }

    /// The mode spelled `label`.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.label() == label)
    }

    /// The stricter of the two.
    pub fn strictest(self, other: Self) -> Self {
        self.max(other)
    }
}

/// The bits of a record's `flags` byte.
pub mod flags {
    /// A policy blocked or rewrote the query (the policy and, for a list rule, the list are
    /// named); also set when the answer was resolved for a CNAME rewrite's target.
    pub const BLOCKED: u8 = 1;
    /// The query or the response was longer than [`super::MESSAGE_MAX`] and was cut.
    pub const CLIPPED: u8 = 2;
    /// Blocked through a CNAME of the answer (CNAME cloaking), not the query name itself.
    pub const CLOAKED: u8 = 4;
}

/// One record as the core writes it, or as the writer reads it back (borrowing the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// When the answer was sent (or the query dropped), nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// The client's address and port.
    pub client: SocketAddr,
    /// How the query arrived.
    pub transport: Transport,
    /// Where the answer came from.
    pub source: Source,
    /// [`flags`] bits.
    pub flags: u8,
    /// The client ID (DoH path or TLS SNI label), empty when none.
    pub client_id: &'a str,
    /// The policy that blocked or rewrote, empty when none.
    pub policy: &'a str,
    /// The list whose rule decided, empty for a rewrite or when not blocked.
    pub list: &'a str,
    /// The upstream that answered a miss (its URL), empty when none.
    pub upstream: &'a str,
    /// How long the upstream took, in microseconds (0 when no upstream was asked).
    pub upstream_latency_us: u32,
    /// The query as received (up to [`MESSAGE_MAX`] bytes).
    pub query: &'a [u8],
    /// The response as sent (up to [`MESSAGE_MAX`] bytes), empty when nothing was sent.
    pub response: &'a [u8],
}

/// Why a record does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than the length or the fields say.
    Short,
    /// Another format version.
    Version(u8),
    /// An unknown transport or source code.
    Code,
    /// A string field that is not UTF-8.
    Utf8,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Short => f.write_str("query-log record cut short"),
            Self::Version(v) => write!(f, "query-log record version {v}, this build reads 1"),
            Self::Code => f.write_str("query-log record with an unknown transport or source"),
            Self::Utf8 => f.write_str("query-log record with a string that is not UTF-8"),
        }
    }
}

impl std::error::Error for RecordError {}

impl<'a> RecordRef<'a> {
    /// Appends the record, length first, to `out`. Strings longer than 255 bytes and messages
    /// longer than [`MESSAGE_MAX`] are cut (a cut message sets [`flags::CLIPPED`]); nothing
    /// else allocates but `out`'s growth.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        let query = clip(self.query);
        let response = clip(self.response);
        let clipped = query.len() < self.query.len() || response.len() < self.response.len();
        let flags = self.flags | if clipped { flags::CLIPPED } else { 0 };
        out.extend_from_slice(&[VERSION, self.transport as u8, self.source as u8, flags]);
        out.extend_from_slice(&self.time_ns.to_le_bytes());
        let address = match self.client.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        out.extend_from_slice(&address.octets());
        out.extend_from_slice(&self.client.port().to_le_bytes());
        out.extend_from_slice(&self.upstream_latency_us.to_le_bytes());
        for text in [self.client_id, self.policy, self.list, self.upstream] {
            let text = clip_str(text);
            out.push(text.len() as u8);
            out.extend_from_slice(text.as_bytes());
        }
        for message in [query, response] {
            out.extend_from_slice(&(message.len() as u16).to_le_bytes());
            out.extend_from_slice(message);
        }
        let length = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&length.to_le_bytes());
    }

    /// The record at the start of `bytes` and how many bytes it took (its length included).
    pub fn decode(bytes: &'a [u8]) -> Result<(Self, usize), RecordError> {
        let length = bytes.get(..4).ok_or(RecordError::Short)?;
        let length = u32::from_le_bytes([length[0], length[1], length[2], length[3]]) as usize;
        let body = bytes
            .get(4..4usize.saturating_add(length))
            .ok_or(RecordError::Short)?;
        let mut r = Reader { bytes: body };
        let fixed = r.take(FIXED)?;
        if fixed[0] != VERSION {
            return Err(RecordError::Version(fixed[0]));
        }
        let transport = Transport::from_code(fixed[1]).ok_or(RecordError::Code)?;
        let source = Source::from_code(fixed[2]).ok_or(RecordError::Code)?;
        let flags = fixed[3];
        let time_ns = u64::from_le_bytes(array(&fixed[4..12]));
        let address = Ipv6Addr::from(array::<16>(&fixed[12..28]));
        let address = match address.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(address),
        };
        let port = u16::from_le_bytes(array(&fixed[28..30]));
        let upstream_latency_us = u32::from_le_bytes(array(&fixed[30..34]));
        let client_id = r.text()?;
        let policy = r.text()?;
        let list = r.text()?;
        let upstream = r.text()?;
        let query = r.message()?;
        let response = r.message()?;
        Ok((
            Self {
                time_ns,
                client: SocketAddr::new(address, port),
                transport,
                source,
                flags,
                client_id,
                policy,
                list,
                upstream,
                upstream_latency_us,
                query,
                response,
            },
            4 + length,
        ))
    }
}

/// The records of a batch, in the order they were written; stops at the first that does not
/// decode (yielding its error once).
#[derive(Debug, Clone)]
pub struct Records<'a> {
    bytes: &'a [u8],
}

impl<'a> Records<'a> {
    /// The records in `batch`.
    pub fn new(batch: &'a [u8]) -> Self {
        Self { bytes: batch }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordRef<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.is_empty() {
            return None;
        }
        match RecordRef::decode(self.bytes) {
            Ok((record, used)) => {
                self.bytes = self.bytes.get(used..).unwrap_or_default();
                Some(Ok(record))
            }
            Err(e) => {
                self.bytes = &[];
                Some(Err(e))
            }
        }
    }
}

/// What the writer works out from a record's two messages ([`summarize`], on the control
/// thread): the question, the outcome, the answer in brief.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// The query name in presentation form, lowercase, with the final dot (`www.example.com.`;
    /// the root is `.`), bytes outside printable ASCII as `\DDD` and `. ; \ ( ) " @ $` behind
    /// a backslash, as dig writes them; empty when the query has no question.
    pub qname: String,
    /// The query type.
    pub qtype: u16,
    /// The query class.
    pub qclass: u16,
    /// The response's rcode (extended rcode included), `None` when nothing was sent.
    pub rcode: Option<u16>,
    /// The query asked for DNSSEC records (EDNS DO bit).
    pub dnssec_ok: bool,
    /// The response was truncated (TC=1).
    pub truncated: bool,
    /// The query had recursion desired.
    pub recursion_desired: bool,
    /// The answer section in brief, one entry per record up to [`ANSWERS_MAX`]
    /// (`A 192.0.2.1`, `CNAME cdn.example.net.`, `MX 10 mail.example.`), in order.
    pub answers: Vec<String>,
    /// Answer records beyond the first [`ANSWERS_MAX`] (counted, not summarized).
    pub more_answers: u16,
    /// The Extended DNS Error code of the response, if any (RFC 8914): the first one.
    pub ede: Option<u16>,
}

/// Most answer records a [`Summary`] spells out.
pub const ANSWERS_MAX: usize = 8;

/// Most characters of one answer's record data in a [`Summary`] (longer ones end in `…`).
pub const ANSWER_TEXT_MAX: usize = 80;

/// The question, outcome and answer of a record's two messages. Total: a message that does not
/// parse leaves the fields it would have filled at their defaults, and a record of the answer
/// that does not parse ends the answer summary there (counted in `more_answers`).
pub fn summarize(query: &[u8], response: &[u8]) -> Summary {
    use domain::base::Message;
    let mut summary = Summary::default();
    if let Ok(message) = Message::from_slice(query) {
        summary.recursion_desired = message.header().rd();
        if let Ok(question) = message.sole_question() {
            summary.qname = presentation(question.qname().iter());
            summary.qtype = question.qtype().to_int();
            summary.qclass = question.qclass().to_int();
        }
        summary.dnssec_ok = message.opt().is_some_and(|opt| opt.dnssec_ok());
    }
    if let Ok(message) = Message::from_slice(response) {
        let header = message.header();
        summary.truncated = header.tc();
        let opt = message.opt();
        summary.rcode = Some(match &opt {
            Some(opt) => opt.rcode(header).to_int(),
            None => header.rcode().to_int().into(),
        });
        summary.ede = opt.as_ref().and_then(|opt| {
            opt.opt()
                .iter::<domain::base::opt::ExtendedError<_>>()
                .flatten()
                .next()
                .map(|ede| ede.code().to_int())
        });
        summarize_answers(message, &mut summary);
    }
    summary
}

/// Fills `answers` and `more_answers` from the response's answer section.
fn summarize_answers(message: &domain::base::Message<[u8]>, summary: &mut Summary) {
    use domain::rdata::AllRecordData;
    let total = message.header_counts().ancount();
    let Ok(section) = message.answer() else {
        summary.more_answers = total;
        return;
    };
    for record in section.take(ANSWERS_MAX) {
        let Ok(record) = record else { break };
        let Ok(record) = record.to_any_record::<AllRecordData<_, _>>() else {
            break;
        };
        summary.answers.push(answer_text(record.data()));
    }
    summary.more_answers = total.saturating_sub(summary.answers.len() as u16);
}

/// One answer record in brief: its type and its data, names with their final dot.
fn answer_text<N>(data: &domain::rdata::AllRecordData<&[u8], N>) -> String
where
    N: domain::base::ToName + std::fmt::Display,
{
    use domain::rdata::AllRecordData as D;
    match data {
        D::A(a) => format!("A {}", a.addr()),
        D::Aaaa(aaaa) => format!("AAAA {}", aaaa.addr()),
        D::Cname(cname) => format!("CNAME {}", presentation(cname.cname().iter_labels())),
        D::Ns(ns) => format!("NS {}", presentation(ns.nsdname().iter_labels())),
        D::Ptr(ptr) => format!("PTR {}", presentation(ptr.ptrdname().iter_labels())),
        D::Dname(dname) => format!("DNAME {}", presentation(dname.dname().iter_labels())),
        D::Mx(mx) => format!(
            "MX {} {}",
            mx.preference(),
            presentation(mx.exchange().iter_labels())
        ),
        other => {
            use domain::base::rdata::RecordData;
            let mut text = format!("{} {other}", other.rtype());
            if let Some((cut, _)) = text.char_indices().nth(ANSWER_TEXT_MAX) {
                text.truncate(cut);
                text.push('…');
            }
            text
        }
    }
}

/// A name's labels as dig presents them, lowercase, with the final dot.
fn presentation<'l>(labels: impl Iterator<Item = &'l domain::base::name::Label>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for label in labels {
        if label.is_root() {
            break;
        }
        for byte in label.iter() {
            let byte = byte.to_ascii_lowercase();
            match byte {
                b'.' | b';' | b'\\' | b'(' | b')' | b'"' | b'@' | b'$' => {
                    out.push('\\');
                    out.push(char::from(byte));
                }
                0x21..=0x7e => out.push(char::from(byte)),
                _ => {
                    let _ = write!(out, "\\{byte:03}");
                }
            }
        }
        out.push('.');
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.bytes.len() < n {
            return Err(RecordError::Short);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn text(&mut self) -> Result<&'a str, RecordError> {
        let n = usize::from(self.take(1)?[0]);
        std::str::from_utf8(self.take(n)?).map_err(|_| RecordError::Utf8)
    }

    fn message(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.take(2)?;
        let n = usize::from(u16::from_le_bytes([n[0], n[1]]));
        self.take(n)
    }
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

fn clip(message: &[u8]) -> &[u8] {
    &message[..message.len().min(MESSAGE_MAX)]
}

/// `text` cut to 255 bytes at a character boundary.
fn clip_str(text: &str) -> &str {
    if text.len() <= 255 {
        return text;
    }
    let mut end = 255;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(query: &'a [u8], response: &'a [u8]) -> RecordRef<'a> {
        RecordRef {
            time_ns: 1_765_000_000_123_456_789,
            client: "192.0.2.7:53000".parse().expect("address"),
            transport: Transport::Doh,
            source: Source::Policy,
            flags: flags::BLOCKED,
            client_id: "kids",
            policy: "family",
            list: "ads",
            upstream: "",
            upstream_latency_us: 0,
            query,
            response,
        }
    }

    #[test]
    fn records_round_trip_in_a_batch_with_ipv4_and_ipv6_clients() {
        let mut batch = Vec::new();
        let first = sample(b"query-bytes", b"response-bytes");
        first.encode(&mut batch);
        let second = RecordRef {
            client: "[2001:db8::1]:443".parse().expect("address"),
            transport: Transport::Udp,
            source: Source::Upstream,
            flags: 0,
            client_id: "",
            policy: "",
            list: "",
            upstream: "tls://127.0.0.1:853",
            upstream_latency_us: 12_345,
            ..sample(b"q2", b"")
        };
        second.encode(&mut batch);
        let decoded: Vec<_> = Records::new(&batch)
            .collect::<Result<_, _>>()
            .expect("both decode");
        assert_eq!(decoded, vec![first, second]);
    }

    #[test]
    fn long_messages_and_strings_are_cut_and_flagged() {
        let long = vec![7u8; MESSAGE_MAX + 10];
        let name = "é".repeat(200); // 400 bytes: cut at a character boundary
        let record = RecordRef {
            client_id: &name,
            ..sample(&long, b"r")
        };
        let mut batch = Vec::new();
        record.encode(&mut batch);
        let (back, used) = RecordRef::decode(&batch).expect("decodes");
        assert_eq!(used, batch.len());
        assert_eq!(back.query.len(), MESSAGE_MAX);
        assert_eq!(back.flags, flags::BLOCKED | flags::CLIPPED);
        assert_eq!(back.client_id.len(), 254);
        assert!(name.starts_with(back.client_id));
    }

    #[test]
    fn every_cut_short_or_corrupted_record_is_an_error_not_a_panic() {
        let mut batch = Vec::new();
        sample(b"query", b"response").encode(&mut batch);
        for end in 0..batch.len() {
            assert!(
                RecordRef::decode(&batch[..end]).is_err(),
                "{end} bytes decoded"
            );
        }
        let mut version = batch.clone();
        version[4] = 9;
        assert_eq!(
            RecordRef::decode(&version).map(|_| ()),
            Err(RecordError::Version(9))
        );
        let mut transport = batch.clone();
        transport[5] = 6;
        assert_eq!(
            RecordRef::decode(&transport).map(|_| ()),
            Err(RecordError::Code)
        );
        // A length that promises more than the batch holds.
        let mut length = batch.clone();
        length[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            RecordRef::decode(&length).map(|_| ()),
            Err(RecordError::Short)
        );
        // The iterator yields the error once, then stops.
        let mut records = Records::new(&length);
        assert!(matches!(records.next(), Some(Err(RecordError::Short))));
        assert!(records.next().is_none());
    }

    use domain::base::iana::{ExtendedErrorCode, OptRcode, Rcode, Rtype};
    use domain::base::message_builder::MessageBuilder;
    use domain::base::opt::ExtendedError;
    use domain::base::{Name, Record, Ttl};
    use domain::rdata::{A, Aaaa, Cname, Mx, Txt};

    fn name(text: &str) -> Name<Vec<u8>> {
        text.parse().expect("test name")
    }

    /// A query for `qname`/`qtype` with RD, and with an OPT record (DO as given) when `edns`.
    fn query(qname: &Name<Vec<u8>>, qtype: Rtype, edns: Option<bool>) -> Vec<u8> {
        let mut builder = MessageBuilder::new_vec();
        builder.header_mut().set_rd(true);
        let mut question = builder.question();
        question.push((qname, qtype)).expect("question");
        let mut additional = question.additional();
        if let Some(dnssec_ok) = edns {
            additional
                .opt(|opt| {
                    opt.set_dnssec_ok(dnssec_ok);
                    Ok(())
                })
                .expect("opt");
        }
        additional.into_message().into_octets()
    }

    #[test]
    fn summarize_reads_the_question_flags_and_a_cname_chain_answer() {
        let qname = name("WWW.Example.COM");
        let q = query(&qname, Rtype::A, Some(true));
        let mut builder = MessageBuilder::new_vec()
            .start_answer(
                &domain::base::Message::from_octets(q.clone()).expect("query"),
                Rcode::NOERROR,
            )
            .expect("answer");
        builder.header_mut().set_tc(true);
        let target = name("cdn.example.net");
        builder
            .push(Record::new(
                &qname,
                domain::base::iana::Class::IN,
                Ttl::from_secs(60),
                Cname::new(target.clone()),
            ))
            .expect("cname");
        builder
            .push((&target, 60, A::from_octets(192, 0, 2, 1)))
            .expect("a");
        builder
            .push((&target, 60, Aaaa::new("2001:db8::1".parse().expect("v6"))))
            .expect("aaaa");
        let response = builder.into_message().into_octets();
        let summary = summarize(&q, &response);
        assert_eq!(summary.qname, "www.example.com.");
        assert_eq!(summary.qtype, 1);
        assert_eq!(summary.qclass, 1);
        assert_eq!(summary.rcode, Some(0));
        assert!(summary.dnssec_ok);
        assert!(summary.truncated);
        assert!(summary.recursion_desired);
        assert_eq!(
            summary.answers,
            vec![
                "CNAME cdn.example.net.".to_string(),
                "A 192.0.2.1".to_string(),
                "AAAA 2001:db8::1".to_string(),
            ]
        );
        assert_eq!(summary.more_answers, 0);
        assert_eq!(summary.ede, None);
    }

    #[test]
    fn summarize_keeps_eight_answers_and_counts_the_rest() {
        let qname = name("many.example");
        let q = query(&qname, Rtype::TXT, None);
        let mut builder = MessageBuilder::new_vec()
            .start_answer(
                &domain::base::Message::from_octets(q.clone()).expect("query"),
                Rcode::NOERROR,
            )
            .expect("answer");
        for i in 0..11u8 {
            builder
                .push((
                    &qname,
                    60,
                    Txt::<Vec<u8>>::build_from_slice(&[b'x'; 200][..usize::from(i) + 1])
                        .expect("txt"),
                ))
                .expect("txt");
        }
        builder
            .push((&qname, 60, Mx::new(10, name("Mail.Example"))))
            .expect("mx");
        let response = builder.into_message().into_octets();
        let summary = summarize(&q, &response);
        assert!(!summary.dnssec_ok);
        assert_eq!(summary.answers.len(), ANSWERS_MAX);
        assert_eq!(summary.more_answers, 4);
        assert_eq!(summary.answers[0], "TXT \"x\"");
        // Long record data is cut with an ellipsis.
        let long = Txt::<Vec<u8>>::build_from_slice(&[b'y'; 200]).expect("txt");
        let mut builder = MessageBuilder::new_vec()
            .start_answer(
                &domain::base::Message::from_octets(q.clone()).expect("query"),
                Rcode::NOERROR,
            )
            .expect("answer");
        builder.push((&qname, 60, long)).expect("txt");
        builder
            .push((&qname, 60, Mx::new(10, name("Mail.Example"))))
            .expect("mx");
        let summary = summarize(&q, &builder.into_message().into_octets());
        assert_eq!(summary.answers[0].chars().count(), ANSWER_TEXT_MAX + 1);
        assert!(summary.answers[0].ends_with('…'));
        assert_eq!(summary.answers[1], "MX 10 mail.example.");
    }

    #[test]
    fn summarize_reads_the_extended_rcode_and_the_rfc8914_ede_from_the_response_opt() {
        let qname = name("blocked.example");
        let q = query(&qname, Rtype::AAAA, Some(false));
        let builder = MessageBuilder::new_vec()
            .start_answer(
                &domain::base::Message::from_octets(q.clone()).expect("query"),
                Rcode::NXDOMAIN,
            )
            .expect("answer");
        let mut additional = builder.additional();
        additional
            .opt(|opt| {
                opt.push(
                    &ExtendedError::<Vec<u8>>::new(ExtendedErrorCode::BLOCKED, None).expect("ede"),
                )?;
                opt.push(
                    &ExtendedError::<Vec<u8>>::new(ExtendedErrorCode::PROHIBITED, None)
                        .expect("ede"),
                )
            })
            .expect("opt");
        let summary = summarize(&q, &additional.into_message().into_octets());
        assert_eq!(summary.rcode, Some(3));
        assert_eq!(summary.ede, Some(15));
        assert!(summary.answers.is_empty());

        let builder = MessageBuilder::new_vec()
            .start_answer(
                &domain::base::Message::from_octets(q.clone()).expect("query"),
                Rcode::NOERROR,
            )
            .expect("answer");
        let mut additional = builder.additional();
        additional
            .opt(|opt| {
                opt.set_rcode(OptRcode::BADVERS);
                Ok(())
            })
            .expect("opt");
        let summary = summarize(&q, &additional.into_message().into_octets());
        assert_eq!(summary.rcode, Some(16));
    }

    #[test]
    fn summarize_escapes_names_as_dig_does_and_the_root_is_a_dot() {
        let odd = Name::from_octets(b"\x05A.b\x20\xff\x07example\x00".to_vec()).expect("wire name");
        let summary = summarize(&query(&odd, Rtype::A, None), &[]);
        assert_eq!(summary.qname, "a\\.b\\032\\255.example.");
        assert_eq!(summary.rcode, None);
        let summary = summarize(&query(&Name::root_vec(), Rtype::NS, None), &[]);
        assert_eq!(summary.qname, ".");
        assert_eq!(summary.qtype, 2);
    }

    #[test]
    fn summarize_is_total_on_garbage_and_cut_messages() {
        let qname = name("www.example.com");
        let q = query(&qname, Rtype::A, Some(true));
        let mut builder = MessageBuilder::new_vec()
            .start_answer(
                &domain::base::Message::from_octets(q.clone()).expect("query"),
                Rcode::NOERROR,
            )
            .expect("answer");
        builder
            .push((&qname, 60, A::from_octets(192, 0, 2, 1)))
            .expect("a");
        let response = builder.into_message().into_octets();
        for end in 0..response.len() {
            let summary = summarize(&q[..end.min(q.len())], &response[..end]);
            assert!(summary.answers.len() <= 1);
        }
        assert_eq!(summarize(b"", b""), Summary::default());
        assert_eq!(summarize(&[0xff; 40], &[0xff; 40]).qname, "");
    }

    #[test]
    fn labels_round_trip() {
        for t in Transport::ALL {
            assert_eq!(Transport::from_label(t.label()), Some(t));
        }
        for s in Source::ALL {
            assert_eq!(Source::from_label(s.label()), Some(s));
        }
        assert_eq!(Transport::from_label("http"), None);
    }
}
