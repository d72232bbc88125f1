//! Cached answers: an upstream reply, validated once, stored pre-encoded and patched per client.
//!
//! ```text
//! upstream reply ──validate, scrub (domain)──▶ canonical bytes: ID 0, lowercased question, no OPT,
//!                                        only the records that answer the question
//!                                        + TTL field offsets, lifetime (clamped, RFC 2308)
//! cache hit ──memcpy──▶ patch ID, RD/CD, the client's qname case, TTLs − age ──▶ add OPT? ──▶ TC?
//! ```

use std::time::{Duration, Instant};

use domain::base::message_builder::{MessageBuilder, PushError, StaticCompressor};
use domain::base::{Message, ParsedName, Rtype};
use domain::rdata::AllRecordData;

use crate::CacheKey;
use crate::scrub::{ReplyRecord, Scrubber, Section};
use crate::wire::{self, HEADER_LEN, rcode, rtype};

/// The TTL a stale answer carries (RFC 8767 §4: 30 s recommended).
pub const STALE_ANSWER_TTL: u32 = 30;

/// TTL policy applied when answers are cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlPolicy {
    /// Positive TTLs are raised to at least this (`cache.minTTL`).
    pub min_ttl: u32,
    /// Positive TTLs are capped at this (`cache.maxTTL`).
    pub max_ttl: u32,
    /// Negative answers are cached at most this long (`cache.negativeMaxTTL`, RFC 2308 §5).
    pub negative_max_ttl: u32,
    /// Resolution failures are cached this long (`cache.servfailTTL`, RFC 9520 §3.2).
    pub servfail_ttl: u32,
}

impl Default for TtlPolicy {
    fn default() -> Self {
        Self {
            min_ttl: 0,
            max_ttl: 86_400,
            negative_max_ttl: 3_600,
            servfail_ttl: 5,
        }
    }
}

/// What kind of answer is cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    /// Records for the question.
    Positive,
    /// NXDOMAIN or NODATA (RFC 2308).
    Negative,
    /// A resolution failure kudurru answers SERVFAIL to (RFC 9520).
    Failure,
}

/// Why an upstream reply cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// Wrong ID or QR=0: not a reply to this query (possibly spoofed); keep waiting.
    #[error("reply does not carry the query's id")]
    NotOurs,
    /// The reply's question is not the one asked (possibly spoofed); keep waiting.
    #[error("reply question does not match the query")]
    QuestionMismatch,
    /// The reply does not parse as DNS.
    #[error("malformed reply: {0}")]
    Malformed(&'static str),
    /// TC=1: ask again over TCP.
    #[error("reply truncated")]
    Truncated,
    /// The upstream answered with an rcode that means "try elsewhere".
    #[error("upstream answered rcode {0}")]
    Rcode(u16),
}

impl ReplyError {
    /// Whether this reply should be ignored while waiting on for the genuine one.
    pub fn is_foreign(self) -> bool {
        matches!(self, Self::NotOurs | Self::QuestionMismatch)
    }
}

/// Bytes per TTL table entry after the message: offset (u16) and TTL (u32), big-endian.
const TTL_ENTRY: usize = 6;

/// A pre-encoded answer in canonical form, ready to be patched for any client asking its key.
#[derive(Debug)]
pub struct CachedAnswer {
    /// The canonical message, then its TTL table ([`TTL_ENTRY`] bytes per record): one
    /// allocation per answer.
    data: Box<[u8]>,
    message_len: u16,
    question_end: u16,
    key_flags: u8,
    kind: AnswerKind,
    /// Whether the answer section holds a CNAME: CNAME cloaking looks only at these.
    has_cname: bool,
    stored: Instant,
    lifetime: u32,
    /// `stored + lifetime`, computed once: the hit path compares, it does not add.
    expires: Instant,
    /// When a hit starts asking for a background refresh (prefetch): nine tenths into the
    /// lifetime; `expires` for failures and stale copies, which are never prefetched.
    refresh_at: Instant,
    /// The Extended DNS Error (RFC 8914) a client with EDNS gets with this answer; 0: none.
    ede: u16,
    /// The upstream that answered, as its index in the query's upstream set plus one (0:
    /// none, or past 254), and how long the exchange took: for the query log.
    upstream: u8,
    upstream_rtt_us: u32,
}

/// The instant nine tenths of `lifetime` seconds after `stored` (Unbound's prefetch point).
fn refresh_point(stored: Instant, lifetime: u32) -> Instant {
    stored + Duration::from_millis(u64::from(lifetime) * 900)
}

impl CachedAnswer {
    /// Validates an upstream `reply` to the query kudurru sent with `id` for `key`.
    pub fn from_reply(
        reply: &[u8],
        key: &CacheKey,
        id: u16,
        now: Instant,
        policy: &TtlPolicy,
    ) -> Result<Self, ReplyError> {
        if !wire::is_reply_to(reply, id) {
            return Err(ReplyError::NotOurs);
        }
        validate(reply, key)?;
        if wire::is_truncated(reply) {
            return Err(ReplyError::Truncated);
        }
        let rcode = extended_rcode(reply);
        let nxdomain = match rcode {
            r if r == u16::from(rcode::NOERROR) => false,
            r if r == u16::from(rcode::NXDOMAIN) => true,
            other => return Err(ReplyError::Rcode(other)),
        };
        let question_end = HEADER_LEN + key.question().len();
        // Room for the TTL table too, so the message is allocated once. The header's counts
        // are the upstream's word: no more records than minimal ones fit are believed.
        let records = [wire::ANCOUNT_AT, wire::NSCOUNT_AT, wire::ARCOUNT_AT]
            .into_iter()
            .map(|at| usize::from(wire::read_u16(reply, at).unwrap_or(0)))
            .sum::<usize>()
            .min(reply.len() / MIN_RECORD_LEN);
        let mut message = rebuild(reply, records * TTL_ENTRY)?;
        message[HEADER_LEN..question_end].copy_from_slice(key.question());
        // Counted after scrubbing: a NOERROR reply none of whose answers answer the question is
        // NODATA, cached only with an SOA like any other (RFC 2308 §5).
        let negative = nxdomain || wire::read_u16(&message, wire::ANCOUNT_AT) == Some(0);
        if message.len() > usize::from(u16::MAX) {
            return Err(ReplyError::Malformed("reply too large to cache"));
        }
        let layout = scan_records(&message, question_end)?;

        let has_cname = layout
            .records
            .iter()
            .any(|r| r.section == Section::Answer && r.rtype == rtype::CNAME);
        let message_len = message.len() as u16;
        message.reserve_exact(layout.records.len() * TTL_ENTRY);
        let mut lifetime = u32::MAX;
        if negative {
            let soa = layout
                .records
                .iter()
                .find(|r| r.section == Section::Authority && r.rtype == rtype::SOA);
            lifetime = match soa.and_then(|r| soa_negative_ttl(&message, r)) {
                Some(ttl) => ttl.min(policy.negative_max_ttl),
                // RFC 2308 §5: without an SOA a negative answer is not cached.
                None => 0,
            };
        }
        for record in &layout.records {
            let original = received_ttl(wire::read_u32(&message, record.ttl_at).unwrap_or(0));
            let ttl = if negative {
                if record.section == Section::Authority && record.rtype == rtype::SOA {
                    lifetime
                } else {
                    original.min(policy.max_ttl)
                }
            } else {
                original.clamp(policy.min_ttl, policy.max_ttl.max(policy.min_ttl))
            };
            if !negative && record.section != Section::Additional {
                lifetime = lifetime.min(ttl);
            }
            // The TTL table follows the message in the same buffer.
            message.extend_from_slice(&(record.ttl_at as u16).to_be_bytes());
            message.extend_from_slice(&ttl.to_be_bytes());
        }
        if lifetime == u32::MAX {
            // NOERROR with answers only in the additional section: nothing to time it by.
            lifetime = 0;
        }
        Ok(Self {
            data: message.into_boxed_slice(),
            message_len,
            question_end: question_end as u16,
            key_flags: key_flags(key),
            kind: if negative {
                AnswerKind::Negative
            } else {
                AnswerKind::Positive
            },
            has_cname,
            stored: now,
            lifetime,
            expires: now + Duration::from_secs(u64::from(lifetime)),
            refresh_at: refresh_point(now, lifetime),
            ede: 0,
            upstream: 0,
            upstream_rtt_us: 0,
        })
    }

    /// A synthesized SERVFAIL for `key`, cached for `policy.servfail_ttl` (RFC 9520): every
    /// upstream failed, so a client with EDNS is told "No Reachable Authority" (RFC 8914 §4.23).
    pub fn failure(key: &CacheKey, now: Instant, policy: &TtlPolicy) -> Self {
        let mut message = Vec::with_capacity(HEADER_LEN + key.question().len());
        message.extend_from_slice(&[0, 0, 0x81, 0x80 | rcode::SERVFAIL, 0, 1, 0, 0, 0, 0, 0, 0]);
        message.extend_from_slice(key.question());
        Self {
            question_end: message.len() as u16,
            message_len: message.len() as u16,
            data: message.into_boxed_slice(),
            key_flags: key_flags(key),
            kind: AnswerKind::Failure,
            has_cname: false,
            stored: now,
            lifetime: policy.servfail_ttl,
            expires: now + Duration::from_secs(u64::from(policy.servfail_ttl)),
            refresh_at: now + Duration::from_secs(u64::from(policy.servfail_ttl)),
            ede: wire::ede::NO_REACHABLE_AUTHORITY,
            upstream: 0,
            upstream_rtt_us: 0,
        }
    }

    /// A REFUSED for `key`, never cached (lifetime 0): the answer to a forwarding-loop probe
    /// that came back in (`crate::loop_probe`), so the upstream that sent it stops at once.
    pub fn loop_refused(key: &CacheKey, now: Instant) -> Self {
        let mut message = Vec::with_capacity(HEADER_LEN + key.question().len());
        message.extend_from_slice(&[0, 0, 0x81, 0x80 | rcode::REFUSED, 0, 1, 0, 0, 0, 0, 0, 0]);
        message.extend_from_slice(key.question());
        Self {
            question_end: message.len() as u16,
            message_len: message.len() as u16,
            data: message.into_boxed_slice(),
            key_flags: key_flags(key),
            kind: AnswerKind::Failure,
            has_cname: false,
            stored: now,
            lifetime: 0,
            expires: now,
            refresh_at: now,
            ede: 0,
            upstream: 0,
            upstream_rtt_us: 0,
        }
    }

    /// This expired answer served stale at `now` (RFC 8767 §4): every TTL set to
    /// [`STALE_ANSWER_TTL`], EDE 3 "Stale Answer" for clients with EDNS (RFC 8914 §4.4). A copy
    /// for one resolution's clients: it is never stored in place of the expired answer.
    pub fn stale_copy(&self, now: Instant) -> Self {
        let mut data = self.data.clone();
        let (_, ttls) = data.split_at_mut(usize::from(self.message_len));
        for entry in ttls.chunks_exact_mut(TTL_ENTRY) {
            entry[2..6].copy_from_slice(&STALE_ANSWER_TTL.to_be_bytes());
        }
        let expires = now + Duration::from_secs(u64::from(STALE_ANSWER_TTL));
        Self {
            data,
            message_len: self.message_len,
            question_end: self.question_end,
            key_flags: self.key_flags,
            kind: self.kind,
            has_cname: self.has_cname,
            stored: now,
            lifetime: STALE_ANSWER_TTL,
            expires,
            refresh_at: expires,
            ede: wire::ede::STALE_ANSWER,
            upstream: 0,
            upstream_rtt_us: 0,
        }
    }

    /// This answer, noted as coming from the upstream at `index` in its query's upstream set
    /// after an exchange of `rtt` (for the query log; an index past 253 is not noted).
    pub fn answered_by(self, index: usize, rtt: Duration) -> Self {
        Self {
            upstream: u8::try_from(index + 1)
                .ok()
                .filter(|&i| i < u8::MAX)
                .unwrap_or(0),
            upstream_rtt_us: u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX),
            ..self
        }
    }

    /// The upstream that answered (its index in the query's upstream set) and the exchange's
    /// time in microseconds, when [`Self::answered_by`] noted them.
    pub fn answered_from(&self) -> Option<(usize, u32)> {
        usize::from(self.upstream)
            .checked_sub(1)
            .map(|index| (index, self.upstream_rtt_us))
    }

    /// Whether this is a stale copy ([`Self::stale_copy`]), which no cache tier keeps.
    pub fn is_stale(&self) -> bool {
        self.ede == wire::ede::STALE_ANSWER
    }

    /// Whether a hit at `now` should refresh this answer in the background (prefetch): it is in
    /// the last tenth of its lifetime.
    pub fn refresh_due(&self, now: Instant) -> bool {
        now >= self.refresh_at
    }

    /// Whether this answer, expired or not, may still be served stale at `now`: it expired
    /// less than `max_age` ago (`cache.staleMaxAge`, RFC 8767 §5).
    pub fn servable_stale(&self, now: Instant, max_age: Duration) -> bool {
        now < self.expires + max_age
    }

    /// The Extended DNS Error code this answer carries to clients with EDNS, if any.
    pub fn ede(&self) -> Option<u16> {
        (self.ede != 0).then_some(self.ede)
    }

    /// Whether this answer is for `key`.
    pub fn matches(&self, key: &CacheKey) -> bool {
        self.key_flags == key_flags(key)
            && &self.data[HEADER_LEN..usize::from(self.question_end)] == key.question()
    }

    /// The question it answers in canonical wire form: lowercased qname, qtype, qclass.
    pub fn question(&self) -> &[u8] {
        &self.data[HEADER_LEN..usize::from(self.question_end)]
    }

    /// Whether this answer may still be served at `now`.
    pub fn is_fresh(&self, now: Instant) -> bool {
        now < self.expires
    }

    /// The instant this answer stops being served fresh.
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// Whole seconds since the answer was stored.
    pub fn age(&self, now: Instant) -> u32 {
        age_secs(self.stored, now)
    }

    /// Seconds of life left at `now` (the smallest remaining TTL).
    pub fn remaining(&self, now: Instant) -> u32 {
        self.lifetime.saturating_sub(age_secs(self.stored, now))
    }

    /// Whether the answer may be cached at all (a zero lifetime is served once, not kept).
    pub fn is_cacheable(&self) -> bool {
        self.lifetime > 0
    }

    /// The kind of answer.
    pub fn kind(&self) -> AnswerKind {
        self.kind
    }

    /// The response code the client will see.
    pub fn rcode(&self) -> u8 {
        self.data[3] & 0x0f
    }

    /// Whether the answer section holds a CNAME record (CNAME cloaking checks only these).
    pub fn has_cname(&self) -> bool {
        self.has_cname
    }

    /// Calls `visit` with the target of each CNAME in the answer section, in order, as an
    /// uncompressed lowercase wire name, until `visit` returns true; whether one did. No
    /// allocation; an answer without a CNAME costs one flag test.
    pub fn any_cname_target(&self, mut visit: impl FnMut(&[u8]) -> bool) -> bool {
        if !self.has_cname {
            return false;
        }
        let message = &self.data[..usize::from(self.message_len)];
        let count = wire::read_u16(message, wire::ANCOUNT_AT).unwrap_or(0);
        let mut name = [0u8; wire::MAX_NAME_LEN];
        let mut pos = usize::from(self.question_end);
        for _ in 0..count {
            let Some(rr) = wire::record_at(message, pos) else {
                return false;
            };
            if rr.rtype == rtype::CNAME
                && let Some((len, _)) = wire::read_name(message, rr.rdata_at, &mut name, true)
                && visit(&name[..len])
            {
                return true;
            }
            pos = rr.end;
        }
        false
    }

    /// Appends the answer section's records to `out` (a message under construction, whose
    /// counts the caller sets) with their TTLs as they are at `now` and every name written out
    /// uncompressed, so they read the same in another message. Returns how many.
    pub fn append_answer_records(&self, now: Instant, out: &mut Vec<u8>) -> u16 {
        self.append_section(0, now, out)
    }

    /// As [`Self::append_answer_records`], for the authority section (a negative answer's SOA).
    pub fn append_authority_records(&self, now: Instant, out: &mut Vec<u8>) -> u16 {
        self.append_section(1, now, out)
    }

    /// Appends the records of section `section` (0 answer, 1 authority).
    fn append_section(&self, section: usize, now: Instant, out: &mut Vec<u8>) -> u16 {
        let (message, ttls) = self.data.split_at(usize::from(self.message_len));
        let counts = [
            wire::read_u16(message, wire::ANCOUNT_AT).unwrap_or(0),
            wire::read_u16(message, wire::NSCOUNT_AT).unwrap_or(0),
        ];
        let age = age_secs(self.stored, now);
        let mut pos = usize::from(self.question_end);
        let mut written = 0;
        let skip = if section == 0 {
            0
        } else {
            usize::from(counts[0])
        };
        let take = usize::from(counts[section.min(1)]);
        for index in 0..skip + take {
            let Some(rr) = wire::record_at(message, pos) else {
                break;
            };
            pos = rr.end;
            if index < skip {
                continue;
            }
            let ttl = ttls
                .chunks_exact(TTL_ENTRY)
                .nth(index)
                .map_or(0, |e| u32::from_be_bytes([e[2], e[3], e[4], e[5]]));
            if append_uncompressed(message, &rr, ttl.saturating_sub(age), out).is_some() {
                written += 1;
            }
        }
        written
    }

    /// Approximate heap bytes this answer holds, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        size_of::<Self>() + self.data.len()
    }

    /// Writes the response for `query` at `now` into `out`.
    ///
    /// `udp_limit` is the client's payload limit for UDP (`None` on streams); an answer that does
    /// not fit is sent as header and question with TC=1 (RFC 1035 §4.2.1, RFC 6891 §7).
    /// Returns whether the answer was truncated.
    pub fn write_response(
        &self,
        query: &wire::Query<'_>,
        now: Instant,
        udp_limit: Option<usize>,
        options: &wire::ReplyOptions,
        out: &mut Vec<u8>,
    ) -> bool {
        out.clear();
        let (message, ttls) = self.data.split_at(usize::from(self.message_len));
        out.extend_from_slice(message);
        wire::patch_header(out, query);
        let name = query.qname_wire();
        out[HEADER_LEN..HEADER_LEN + name.len()].copy_from_slice(name);
        let age = age_secs(self.stored, now);
        for entry in ttls.chunks_exact(TTL_ENTRY) {
            let at = usize::from(u16::from_be_bytes([entry[0], entry[1]]));
            let ttl = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            out[at..at + 4].copy_from_slice(&ttl.saturating_sub(age).to_be_bytes());
        }
        let mut truncated = false;
        if let Some(limit) = udp_limit {
            let opt_len = if query.edns().is_some() { 11 } else { 0 };
            if out.len() + opt_len > limit {
                wire::truncate_to_question(out, usize::from(self.question_end));
                truncated = true;
            }
        }
        if let Some(edns) = query.edns() {
            if self.ede == 0 {
                wire::push_reply_opt(out, edns, options);
            } else {
                truncated |= self.push_opt_with_ede(out, edns, options, udp_limit);
            }
        }
        truncated
    }

    /// The OPT of an answer that carries an EDE (a stale copy, a failure): off the hit path of
    /// every other answer, which pays one comparison for it. An answer the option would push
    /// past the client's UDP limit is truncated first. Returns whether it truncated.
    #[cold]
    fn push_opt_with_ede(
        &self,
        out: &mut Vec<u8>,
        edns: wire::Edns,
        options: &wire::ReplyOptions,
        udp_limit: Option<usize>,
    ) -> bool {
        // OPT (11 bytes) and the EDE option (6).
        let truncate =
            udp_limit.is_some_and(|limit| out.len() + 17 > limit) && !wire::is_truncated(out);
        if truncate {
            wire::truncate_to_question(out, usize::from(self.question_end));
        }
        wire::push_reply_opt_with_ede(out, edns, options, self.ede());
        truncate
    }
}

/// Appends the record `rr` of `msg` to `out` with `ttl`, its owner and the names in its rdata
/// (the RFC 1035 types a compressor may compress, RFC 3597 §4) written out uncompressed.
/// Leaves `out` as it was and returns `None` if the record does not decompress.
fn append_uncompressed(msg: &[u8], rr: &wire::RecordAt, ttl: u32, out: &mut Vec<u8>) -> Option<()> {
    let start = out.len();
    let result = (|| {
        let mut name = [0u8; wire::MAX_NAME_LEN];
        let (len, _) = wire::read_name(msg, rr.start, &mut name, false)?;
        out.extend_from_slice(&name[..len]);
        out.extend_from_slice(msg.get(rr.ttl_at - 4..rr.ttl_at)?);
        out.extend_from_slice(&ttl.to_be_bytes());
        let rdlen_at = out.len();
        out.extend_from_slice(&[0, 0]);
        let mut at = rr.rdata_at;
        // (fixed bytes before the names, names, then the rest copied)
        let (prefix, names) = match rr.rtype {
            // NS, MD, MF, CNAME, MB, MG, MR, PTR
            2..=5 | 7..=9 | 12 => (0, 1),
            // SOA, MINFO: two names (SOA's 20 bytes of numbers follow)
            6 | 14 => (0, 2),
            // MX: a preference, then the exchange
            15 => (2, 1),
            _ => (0, 0),
        };
        out.extend_from_slice(msg.get(at..at + prefix)?);
        at += prefix;
        for _ in 0..names {
            let (len, end) = wire::read_name(msg, at, &mut name, false)?;
            out.extend_from_slice(&name[..len]);
            at = end;
        }
        if at > rr.end {
            return None;
        }
        out.extend_from_slice(msg.get(at..rr.end)?);
        let rdlen = u16::try_from(out.len() - rdlen_at - 2).ok()?;
        out[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        Some(())
    })();
    if result.is_none() {
        out.truncate(start);
    }
    result
}

fn key_flags(key: &CacheKey) -> u8 {
    *key.as_bytes().last().unwrap_or(&0)
}

fn age_secs(stored: Instant, now: Instant) -> u32 {
    u32::try_from(now.saturating_duration_since(stored).as_secs()).unwrap_or(u32::MAX)
}

/// The full response code: the header's four bits and the OPT record's upper eight (RFC 6891).
fn extended_rcode(reply: &[u8]) -> u16 {
    Message::from_slice(reply).map_or(0, |m| m.opt_rcode().to_int())
}

/// The question check: exactly one question, equal (ignoring case) to the one asked.
fn validate(reply: &[u8], key: &CacheKey) -> Result<(), ReplyError> {
    let msg =
        Message::from_slice(reply).map_err(|_| ReplyError::Malformed("shorter than a header"))?;
    let question = msg
        .sole_question()
        .map_err(|_| ReplyError::QuestionMismatch)?;
    if question.qtype() != Rtype::from_int(key.qtype())
        || question.qclass().to_int() != key.qclass()
    {
        return Err(ReplyError::QuestionMismatch);
    }
    // The question name must be uncompressed and, ignoring case, the one asked.
    let name_end =
        wire::skip_name(reply, HEADER_LEN).ok_or(ReplyError::Malformed("bad question name"))?;
    let asked = key.qname();
    if name_end - HEADER_LEN != asked.len()
        || !reply[HEADER_LEN..name_end].eq_ignore_ascii_case(asked)
    {
        return Err(ReplyError::QuestionMismatch);
    }
    Ok(())
}

/// Re-encodes the reply with `domain` into kudurru's canonical form: every record parsed with its
/// rdata (`AllRecordData`), scrubbed ([`crate::scrub`]: only records on the way from the question
/// to its answer are kept) and composed again with fresh name compression; the OPT record and
/// anything after it dropped; ID zero; the upstream's flags kept.
///
/// Re-encoding rather than copying means every compression pointer in a cached answer points at
/// a label `domain` wrote, never into the header, a TTL or the middle of a label, so patching ID,
/// flags, TTLs and the qname's case can never change how a name decodes. (A copied reply whose
/// pointers reached into the header broke that: found by the `reply_path` fuzzer, regression
/// test `opt_is_added_after_kept_additional_records`.)
fn rebuild(reply: &[u8], spare: usize) -> Result<Vec<u8>, ReplyError> {
    const BAD_RECORD: ReplyError = ReplyError::Malformed("bad record");
    const NO_ROOM: ReplyError = ReplyError::Malformed("reply does not re-encode");
    let msg =
        Message::from_slice(reply).map_err(|_| ReplyError::Malformed("shorter than a header"))?;
    let target = StaticCompressor::new(Vec::with_capacity(reply.len() + spare));
    let mut question = MessageBuilder::from_target(target)
        .map_err(|_| NO_ROOM)?
        .question();
    for q in msg.question() {
        let q = q.map_err(|_| ReplyError::Malformed("bad question"))?;
        question.push(q).map_err(|_| NO_ROOM)?;
    }
    let mut scrubber = Scrubber::new(msg).ok_or(BAD_RECORD)?;
    let (_, answers, authorities, additionals) = msg.sections().map_err(|_| BAD_RECORD)?;
    let mut answer = question.answer();
    copy_section(answers, Section::Answer, &mut scrubber, |r| answer.push(r))?;
    let mut authority = answer.authority();
    copy_section(authorities, Section::Authority, &mut scrubber, |r| {
        authority.push(r)
    })?;
    let mut additional = authority.additional();
    copy_section(additionals, Section::Additional, &mut scrubber, |r| {
        additional.push(r)
    })?;
    let mut out = additional.finish().into_target();
    out[..2].fill(0);
    out[2..4].copy_from_slice(&reply[2..4]);
    Ok(out)
}

/// Parses every record of `section` (rdata included) and hands those the scrubber keeps to
/// `push`. An OPT record ends the additional section (it and what follows are not cached) and
/// is an error anywhere else. A record that does not parse makes the reply malformed, kept or
/// not.
fn copy_section<'a>(
    records: domain::base::message::RecordSection<'a, [u8]>,
    section: Section,
    scrubber: &mut Scrubber<'a>,
    mut push: impl FnMut(ReplyRecord<'a>) -> Result<(), PushError>,
) -> Result<(), ReplyError> {
    const BAD_RECORD: ReplyError = ReplyError::Malformed("bad record");
    for record in records {
        let record = record.map_err(|_| BAD_RECORD)?;
        if record.rtype() == Rtype::OPT {
            if section == Section::Additional {
                break;
            }
            return Err(ReplyError::Malformed("opt outside additional section"));
        }
        let record = record
            .into_any_record::<AllRecordData<_, ParsedName<_>>>()
            .map_err(|_| BAD_RECORD)?;
        if scrubber.keep(section, &record) {
            push(record).map_err(|_| ReplyError::Malformed("reply does not re-encode"))?;
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct LocatedRecord {
    section: Section,
    rtype: u16,
    ttl_at: usize,
    rdata_at: usize,
}

/// The shortest resource record: root owner (1), type, class (2 each), TTL (4), RDLENGTH (2).
const MIN_RECORD_LEN: usize = 11;

struct Layout {
    /// Inline up to 8 records: most answers, without an allocation.
    records: smallvec::SmallVec<[LocatedRecord; 8]>,
}

/// Locates every record after the question of a re-encoded message (which holds no OPT).
fn scan_records(msg: &[u8], question_end: usize) -> Result<Layout, ReplyError> {
    let count = |at| wire::read_u16(msg, at).ok_or(ReplyError::Malformed("short header"));
    let sections = [
        (Section::Answer, count(wire::ANCOUNT_AT)?),
        (Section::Authority, count(wire::NSCOUNT_AT)?),
        (Section::Additional, count(wire::ARCOUNT_AT)?),
    ];
    let mut records = smallvec::SmallVec::new();
    let mut pos = question_end;
    for (section, n) in sections {
        for _ in 0..n {
            let rr = wire::record_at(msg, pos).ok_or(ReplyError::Malformed("record past end"))?;
            records.push(LocatedRecord {
                section,
                rtype: rr.rtype,
                ttl_at: rr.ttl_at,
                rdata_at: rr.rdata_at,
            });
            pos = rr.end;
        }
    }
    Ok(Layout { records })
}

/// A TTL as received, read as RFC 2181 §8 says: a value with the most significant bit set is
/// treated as zero (not masked: 0xFFFF_FFFF masked and clamped was cached for `cache.maxTTL`).
fn received_ttl(raw: u32) -> u32 {
    if raw & 0x8000_0000 != 0 { 0 } else { raw }
}

/// RFC 2308 §3: the negative TTL is the smaller of the SOA record's TTL and its MINIMUM field.
fn soa_negative_ttl(msg: &[u8], soa: &LocatedRecord) -> Option<u32> {
    let ttl = received_ttl(wire::read_u32(msg, soa.ttl_at)?);
    let after_mname = wire::skip_name(msg, soa.rdata_at)?;
    let after_rname = wire::skip_name(msg, after_mname)?;
    let minimum = wire::read_u32(msg, after_rname + 16)?;
    Some(ttl.min(minimum))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::Query;

    /// Builds a reply to `query` (as kudurru would send it upstream) with records given as
    /// (section, rtype, ttl, rdata); owners are pointers to the question.
    pub(crate) fn reply(query: &[u8], rcode: u8, records: &[(u8, u16, u32, Vec<u8>)]) -> Vec<u8> {
        let q = Query::parse(query).expect("test query parses");
        let mut out = Vec::new();
        wire::start_response(&q, rcode, false, &mut out);
        let mut counts = [0u16; 3];
        for (section, rt, ttl, rdata) in records {
            wire::push_record(&mut out, HEADER_LEN, *rt, *ttl, rdata);
            counts[usize::from(*section)] += 1;
        }
        out[6..8].copy_from_slice(&counts[0].to_be_bytes());
        out[8..10].copy_from_slice(&counts[1].to_be_bytes());
        out[10..12].copy_from_slice(&(counts[2] + 1).to_be_bytes());
        wire::push_opt(&mut out, 1232, 0, false);
        out
    }

    pub(crate) fn soa_rdata(minimum: u32) -> Vec<u8> {
        let mut r = b"\x02ns\x00\x05admin\x00".to_vec();
        for v in [1u32, 3600, 600, 86400, minimum] {
            r.extend_from_slice(&v.to_be_bytes());
        }
        r
    }

    fn upstream_query(key: &CacheKey, id: u16) -> Vec<u8> {
        let mut out = Vec::new();
        wire::write_upstream_query(key, id, &mut out);
        out
    }

    fn client_query(name: &[u8], with_opt: bool) -> Vec<u8> {
        let mut m = vec![
            0xab,
            0xcd,
            0x01,
            0x00,
            0,
            1,
            0,
            0,
            0,
            0,
            0,
            u8::from(with_opt),
        ];
        m.extend_from_slice(name);
        m.extend_from_slice(&[0, 1, 0, 1]);
        if with_opt {
            m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        }
        m
    }

    const NAME: &[u8] = b"\x03WwW\x07exAMPLE\x00";
    const UDP: wire::ReplyOptions = wire::ReplyOptions {
        payload: 1232,
        tcp_keepalive: None,
        padding: false,
    };

    #[test]
    fn rfc1035_cached_answer_is_patched_for_each_client() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 77);
        let r = reply(
            &up,
            0,
            &[
                (0, 1, 300, vec![192, 0, 2, 1]),
                (0, 1, 60, vec![192, 0, 2, 2]),
            ],
        );
        let answer = CachedAnswer::from_reply(&r, &key, 77, t0, &TtlPolicy::default()).unwrap();
        assert_eq!(answer.kind(), AnswerKind::Positive);
        assert_eq!(answer.remaining(t0), 60);
        assert!(answer.matches(&key));

        let cq = client_query(NAME, false);
        let q = Query::parse(&cq).unwrap();
        let mut out = Vec::new();
        let later = t0 + Duration::from_secs(10);
        assert!(!answer.write_response(&q, later, Some(512), &UDP, &mut out));
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.header().id(), 0xabcd);
        assert!(msg.header().qr() && msg.header().ra() && msg.header().rd());
        assert!(msg.opt().is_none(), "a client without EDNS gets no OPT");
        assert_eq!(&out[12..12 + NAME.len()], NAME, "0x20 case preserved");
        let ttls: Vec<u32> = msg
            .answer()
            .unwrap()
            .map(|r| r.unwrap().ttl().as_secs())
            .collect();
        assert_eq!(ttls, vec![290, 50]);
        assert!(!answer.is_fresh(t0 + Duration::from_secs(60)));

        let cq = client_query(NAME, true);
        let q = Query::parse(&cq).unwrap();
        answer.write_response(&q, later, Some(1232), &UDP, &mut out);
        assert!(Message::from_slice(&out).unwrap().opt().is_some());
    }

    #[test]
    fn rfc2308_3_negative_ttl_is_min_of_soa_ttl_and_minimum() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 1);
        let r = reply(&up, 3, &[(1, 6, 3600, soa_rdata(300))]);
        let answer = CachedAnswer::from_reply(&r, &key, 1, t0, &TtlPolicy::default()).unwrap();
        assert_eq!(answer.kind(), AnswerKind::Negative);
        assert_eq!(answer.remaining(t0), 300);
        assert_eq!(answer.rcode(), rcode::NXDOMAIN);
        let cq = client_query(NAME, false);
        let q = Query::parse(&cq).unwrap();
        let mut out = Vec::new();
        answer.write_response(&q, t0, None, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        let soa_ttl = msg
            .authority()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .ttl()
            .as_secs();
        assert_eq!(soa_ttl, 300);

        let no_soa = reply(&up, 3, &[]);
        let answer = CachedAnswer::from_reply(&no_soa, &key, 1, t0, &TtlPolicy::default()).unwrap();
        assert!(
            !answer.is_cacheable(),
            "RFC 2308 §5: no SOA, no negative caching"
        );
    }

    #[test]
    fn ttl_clamps_apply() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 1);
        let policy = TtlPolicy {
            min_ttl: 30,
            max_ttl: 100,
            ..TtlPolicy::default()
        };
        let low = reply(&up, 0, &[(0, 1, 5, vec![192, 0, 2, 1])]);
        assert_eq!(
            CachedAnswer::from_reply(&low, &key, 1, t0, &policy)
                .unwrap()
                .remaining(t0),
            30
        );
        let high = reply(&up, 0, &[(0, 1, 5000, vec![192, 0, 2, 1])]);
        assert_eq!(
            CachedAnswer::from_reply(&high, &key, 1, t0, &policy)
                .unwrap()
                .remaining(t0),
            100
        );
    }

    #[test]
    fn rfc2181_8_ttl_with_top_bit_is_zero() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 1);
        let p = TtlPolicy::default();
        for raw in [0xffff_ffff, 0x8000_0000, 0x8000_012c] {
            let r = reply(&up, 0, &[(0, 1, raw, vec![192, 0, 2, 1])]);
            let answer = CachedAnswer::from_reply(&r, &key, 1, t0, &p).unwrap();
            assert_eq!(answer.remaining(t0), 0, "{raw:#x}");
            assert!(!answer.is_cacheable(), "{raw:#x} is not cached");
            let cq = client_query(NAME, false);
            let q = Query::parse(&cq).unwrap();
            let mut out = Vec::new();
            answer.write_response(&q, t0, None, &UDP, &mut out);
            let msg = Message::from_slice(&out).unwrap();
            let ttl = msg.answer().unwrap().next().unwrap().unwrap().ttl();
            assert_eq!(ttl.as_secs(), 0, "the client sees zero for {raw:#x}");
        }
        // The largest TTL without the top bit is an ordinary one, capped at cache.maxTTL.
        let r = reply(&up, 0, &[(0, 1, 0x7fff_ffff, vec![192, 0, 2, 1])]);
        let answer = CachedAnswer::from_reply(&r, &key, 1, t0, &p).unwrap();
        assert_eq!(answer.remaining(t0), p.max_ttl);
        // In a negative answer the SOA's TTL is read the same way: zero, so not cached.
        let r = reply(&up, 3, &[(1, 6, 0xffff_ffff, soa_rdata(300))]);
        let answer = CachedAnswer::from_reply(&r, &key, 1, t0, &p).unwrap();
        assert_eq!(answer.kind(), AnswerKind::Negative);
        assert!(!answer.is_cacheable());
    }

    #[test]
    fn foreign_and_bad_replies_are_rejected() {
        let t0 = Instant::now();
        let p = TtlPolicy::default();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 9);
        let r = reply(&up, 0, &[(0, 1, 300, vec![192, 0, 2, 1])]);
        assert_eq!(
            CachedAnswer::from_reply(&r, &key, 10, t0, &p).unwrap_err(),
            ReplyError::NotOurs
        );
        let other = CacheKey::new(b"\x03xyz\x00", 1, 1, false, false).unwrap();
        assert_eq!(
            CachedAnswer::from_reply(&r, &other, 9, t0, &p).unwrap_err(),
            ReplyError::QuestionMismatch
        );
        let bad_rdata = reply(&up, 0, &[(0, 1, 300, vec![192, 0, 2])]);
        assert!(matches!(
            CachedAnswer::from_reply(&bad_rdata, &key, 9, t0, &p),
            Err(ReplyError::Malformed(_))
        ));
        let mut tc = r.clone();
        tc[2] |= 0x02;
        assert_eq!(
            CachedAnswer::from_reply(&tc, &key, 9, t0, &p).unwrap_err(),
            ReplyError::Truncated
        );
        let servfail = reply(&up, 2, &[]);
        assert_eq!(
            CachedAnswer::from_reply(&servfail, &key, 9, t0, &p).unwrap_err(),
            ReplyError::Rcode(2)
        );
    }

    #[test]
    fn every_record_keeps_its_own_ttl_past_the_inline_record_table() {
        // More records than the scan keeps inline (8), in all three sections.
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 5);
        let mut records: Vec<_> = (0..12u8)
            .map(|i| (0u8, 1u16, 100 + u32::from(i), vec![192, 0, 2, i]))
            .collect();
        records.push((1, 2, 500, b"\x02ns\x00".to_vec()));
        records.push((2, 1, 40, vec![198, 51, 100, 1]));
        let r = reply(&up, 0, &records);
        let answer = CachedAnswer::from_reply(&r, &key, 5, t0, &TtlPolicy::default()).unwrap();
        assert_eq!(
            answer.remaining(t0),
            100,
            "the smallest answer or authority TTL"
        );
        let cq = client_query(NAME, true);
        let q = Query::parse(&cq).unwrap();
        let mut out = Vec::new();
        answer.write_response(&q, t0 + Duration::from_secs(10), None, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        let ttls = |section: domain::base::message::RecordSection<'_, [u8]>| {
            section
                .map(|r| r.unwrap().ttl().as_secs())
                .collect::<Vec<u32>>()
        };
        let expected: Vec<u32> = (90..102).collect();
        assert_eq!(ttls(msg.answer().unwrap()), expected);
        assert_eq!(ttls(msg.authority().unwrap()), vec![490]);
        let additional: Vec<u32> = msg
            .additional()
            .unwrap()
            .map(|r| r.unwrap())
            .filter(|r| r.rtype() != Rtype::OPT)
            .map(|r| r.ttl().as_secs())
            .collect();
        assert_eq!(additional, vec![30]);
    }

    #[test]
    fn a_header_that_claims_more_records_than_the_reply_holds_is_malformed() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 5);
        let mut r = reply(&up, 0, &[(0, 1, 300, vec![192, 0, 2, 1])]);
        r[6..8].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(
            CachedAnswer::from_reply(&r, &key, 5, t0, &TtlPolicy::default()),
            Err(ReplyError::Malformed(_))
        ));
    }

    #[test]
    fn udp_limit_truncates_with_tc() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 16, 1, false, false).unwrap();
        let up = upstream_query(&key, 1);
        let records: Vec<_> = (0..10)
            .map(|_| (0u8, 16u16, 300u32, [&[99u8][..], &[b'x'; 99]].concat()))
            .collect();
        let r = reply(&up, 0, &records);
        let answer = CachedAnswer::from_reply(&r, &key, 1, t0, &TtlPolicy::default()).unwrap();
        let mut cq = client_query(NAME, false);
        let at = cq.len() - 3;
        cq[at] = 16;
        let q = Query::parse(&cq).unwrap();
        let mut out = Vec::new();
        assert!(answer.write_response(&q, t0, Some(512), &UDP, &mut out));
        assert!(wire::is_truncated(&out));
        assert_eq!(out.len(), 12 + NAME.len() + 4);
        assert!(!answer.write_response(&q, t0, None, &UDP, &mut out));
        assert!(out.len() > 1000);
    }

    #[test]
    fn rfc8767_a_stale_copy_has_ttl_30_and_ede_3_and_the_original_is_unchanged() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 3);
        let r = reply(
            &up,
            0,
            &[
                (0, 1, 60, vec![192, 0, 2, 1]),
                (1, 2, 3600, b"\x02ns\x00".to_vec()),
            ],
        );
        let answer = CachedAnswer::from_reply(&r, &key, 3, t0, &TtlPolicy::default()).unwrap();
        assert_eq!(answer.ede(), None);
        assert!(answer.refresh_due(t0 + Duration::from_secs(54)));
        assert!(!answer.refresh_due(t0 + Duration::from_secs(53)));
        let later = t0 + Duration::from_secs(100);
        assert!(!answer.is_fresh(later));
        assert!(answer.servable_stale(later, Duration::from_secs(41)));
        assert!(!answer.servable_stale(later, Duration::from_secs(40)));
        let stale = answer.stale_copy(later);
        assert!(stale.is_stale() && !answer.is_stale());
        assert!(stale.is_fresh(later) && !stale.refresh_due(later + Duration::from_secs(29)));
        assert_eq!(stale.remaining(later), STALE_ANSWER_TTL);

        let mut out = Vec::new();
        let with_edns = client_query(NAME, true);
        let q = Query::parse(&with_edns).unwrap();
        stale.write_response(&q, later, Some(1232), &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        let ttls: Vec<u32> = msg
            .answer()
            .unwrap()
            .chain(msg.authority().unwrap())
            .map(|r| r.unwrap().ttl().as_secs())
            .collect();
        assert_eq!(ttls, [30, 30]);
        assert!(msg.opt().is_some(), "an OPT");
        // The OPT's only option, last in the message: EDE 3, no text.
        assert_eq!(&out[out.len() - 6..], &[0, 15, 0, 2, 0, 3]);
        // Without EDNS: no OPT, so no EDE; the original still answers with its own TTLs.
        let plain = client_query(NAME, false);
        let q = Query::parse(&plain).unwrap();
        stale.write_response(&q, later, None, &UDP, &mut out);
        assert!(Message::from_slice(&out).unwrap().opt().is_none());
        answer.write_response(&q, t0 + Duration::from_secs(10), None, &UDP, &mut out);
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(
            msg.answer()
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .ttl()
                .as_secs(),
            50
        );
    }

    #[test]
    fn rfc8914_a_servfail_for_failed_upstreams_carries_ede_22() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let failed = CachedAnswer::failure(&key, t0, &TtlPolicy::default());
        assert_eq!(failed.ede(), Some(wire::ede::NO_REACHABLE_AUTHORITY));
        assert!(
            !failed.refresh_due(t0 + Duration::from_secs(4)),
            "failures are not prefetched"
        );
        let cq = client_query(NAME, true);
        let q = Query::parse(&cq).unwrap();
        let mut out = Vec::new();
        failed.write_response(&q, t0, Some(512), &UDP, &mut out);
        assert_eq!(out[3] & 0x0f, rcode::SERVFAIL);
        assert_eq!(&out[out.len() - 6..], &[0, 15, 0, 2, 0, 22]);
    }

    #[test]
    fn a_stale_answer_that_fits_only_without_its_ede_option_is_truncated() {
        let t0 = Instant::now();
        let key = CacheKey::new(NAME, 1, 1, false, false).unwrap();
        let up = upstream_query(&key, 3);
        let r = reply(&up, 0, &[(0, 1, 60, vec![192, 0, 2, 1])]);
        let answer = CachedAnswer::from_reply(&r, &key, 3, t0, &TtlPolicy::default()).unwrap();
        let stale = answer.stale_copy(t0 + Duration::from_secs(61));
        let cq = client_query(NAME, true);
        let q = Query::parse(&cq).unwrap();
        let mut out = Vec::new();
        assert!(!stale.write_response(&q, t0, None, &UDP, &mut out));
        let whole = out.len();
        // Room for an OPT without the option, not with it.
        assert!(stale.write_response(&q, t0, Some(whole - 1), &UDP, &mut out));
        assert!(wire::is_truncated(&out) && out.len() < whole);
        assert_eq!(
            &out[out.len() - 6..],
            &[0, 15, 0, 2, 0, 3],
            "still says why"
        );
        assert!(!stale.write_response(&q, t0, Some(whole), &UDP, &mut out));
        assert_eq!(out.len(), whole);
    }
}
