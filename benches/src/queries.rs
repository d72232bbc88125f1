//! What the generator asks: questions from a dnsperf-format file or a pool of generated names,
//! mixed with fresh random names (cache misses), written into queries in wire form.
//!
//! A query file has one question per line, `name [type]` (type defaults to `A`), as dnsperf
//! reads it; blank lines and lines starting with `;` or `#` are skipped. A fresh name is a
//! 16-hex-digit random label under the suffix, so a resolver has never seen it.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use domain::base::Name;
use domain::base::iana::Rtype;

/// Bytes of a query header.
pub const HEADER_LEN: usize = 12;
/// Bytes of the random label of a fresh name, in hex digits.
const FRESH_LABEL_LEN: usize = 16;
/// Class IN.
const CLASS_IN: u16 = 1;
/// Type of the OPT pseudo-record (RFC 6891).
const OPT: u16 = 41;

/// A question in wire form: qname, qtype, qclass (IN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question(Box<[u8]>);

impl Question {
    /// `name` (presentation form, absolute with or without the trailing dot) and `qtype`.
    pub fn new(name: &str, qtype: &str) -> Result<Self, QuestionError> {
        let name = Name::<Vec<u8>>::from_str(name)
            .map_err(|e| QuestionError::Name(name.to_owned(), e.to_string()))?;
        let qtype = parse_qtype(qtype)?;
        let mut wire = name.as_octets().clone();
        wire.extend_from_slice(&qtype.to_be_bytes());
        wire.extend_from_slice(&CLASS_IN.to_be_bytes());
        Ok(Self(wire.into_boxed_slice()))
    }

    /// The question section bytes.
    pub fn wire(&self) -> &[u8] {
        &self.0
    }
}

/// A type mnemonic (`AAAA`) or the RFC 3597 form (`TYPE65`), case-insensitive.
fn parse_qtype(text: &str) -> Result<u16, QuestionError> {
    let upper = text.to_ascii_uppercase();
    if let Some(number) = upper.strip_prefix("TYPE") {
        return number
            .parse()
            .map_err(|_| QuestionError::Type(text.to_owned()));
    }
    Rtype::from_str(&upper)
        .map(Rtype::to_int)
        .map_err(|_| QuestionError::Type(text.to_owned()))
}

/// Why a question could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuestionError {
    /// The name is not a valid domain name.
    #[error("invalid name `{0}`: {1}")]
    Name(String, String),
    /// The type is neither a known mnemonic nor `TYPEnnn`.
    #[error("unknown query type `{0}` (a mnemonic such as AAAA, or TYPEnnn)")]
    Type(String),
    /// More than `name type` on a line.
    #[error("unexpected `{0}` after the type (a line is `name [type]`)")]
    ExtraField(String),
}

/// Why a query file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryFileError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not `name [type]`.
    #[error("{}:{line}: {source}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        source: QuestionError,
    },
    /// Nothing but comments and blank lines.
    #[error("{}: no questions in the file", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Parses a dnsperf-format query file.
pub fn read_query_file(path: &Path) -> Result<Vec<Question>, QueryFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| QueryFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_query_file(&text).map_err(|(line, source)| match source {
        None => QueryFileError::Empty {
            path: path.to_owned(),
        },
        Some(source) => QueryFileError::Line {
            path: path.to_owned(),
            line,
            source,
        },
    })
}

/// Parses query file text; the error is the 1-based line and what is wrong (`None`: no
/// questions at all).
pub fn parse_query_file(text: &str) -> Result<Vec<Question>, (usize, Option<QuestionError>)> {
    let mut questions = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let name = fields.next().unwrap_or_default();
        let qtype = fields.next().unwrap_or("A");
        if let Some(extra) = fields.next() {
            return Err((index + 1, Some(QuestionError::ExtraField(extra.to_owned()))));
        }
        questions.push(Question::new(name, qtype).map_err(|e| (index + 1, Some(e)))?);
    }
    if questions.is_empty() {
        return Err((0, None));
    }
    Ok(questions)
}

/// `count` pool names `p0.SUFFIX` … under `suffix`, all of type `qtype`.
pub fn pool(suffix: &str, count: usize, qtype: &str) -> Result<Vec<Question>, QuestionError> {
    let suffix = suffix.trim_end_matches('.');
    (0..count)
        .map(|i| Question::new(&format!("p{i}.{suffix}."), qtype))
        .collect()
}

/// The default `--suffix`: an ordinary name under `example.` (RFC 2606), which resolvers forward
/// like any other (RFC 6761 §6.5 asks them not to treat it as special) and which no public zone
/// delegates, so a target's cache or its upstream answers it (kudurru-echo `--mode answer`
/// does, the e2e tests' upstream does) and nothing points off the machine. A `.test` suffix
/// would be answered by kudurru itself (RFC 6761 §6.2, NXDOMAIN) and never reach the cache.
pub const DEFAULT_SUFFIX: &str = "kudurru-bench.example.";

/// Special-use zones that kudurru (and Unbound, by default) answers itself, never from its
/// cache or an upstream: RFC 6761 §6.2-6.4, RFC 7686.
const ANSWERED_LOCALLY: [&str; 4] = ["test", "localhost", "invalid", "onion"];

/// The special-use zone `name` is under, when resolvers answer names under it themselves.
pub fn answered_locally(name: &str) -> Option<&'static str> {
    let last = name.trim_end_matches('.').rsplit('.').next()?;
    ANSWERED_LOCALLY
        .into_iter()
        .find(|zone| zone.eq_ignore_ascii_case(last))
}

/// Where the fixed questions of a run come from, for [`describe`].
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// `count` generated names `p0.SUFFIX` ….
    Pool {
        /// Names in the pool.
        count: usize,
    },
    /// `count` questions from a query file.
    File {
        /// The file as given.
        path: &'a Path,
        /// Questions in it.
        count: usize,
    },
}

/// What a run asks and so what it measures on a caching target, in one line for the report.
pub fn describe(source: Source<'_>, suffix: &str, qtype: &str, miss_ratio: f64) -> String {
    let suffix = format!("{}.", suffix.trim_end_matches('.'));
    let mut text = match (source, miss_ratio >= 1.0) {
        (_, true) => format!(
            "only fresh random names under {suffix} ({qtype}): every query a cache miss that \
             goes upstream"
        ),
        (Source::Pool { count }, false) => format!(
            "{count} names p0…p{}.{suffix} ({qtype}), each asked over and over: cache hits once \
             the target has asked upstream for each",
            count.saturating_sub(1)
        ),
        (Source::File { path, count }, false) => format!(
            "{count} questions from {}, asked over and over: cache hits once the target has \
             asked upstream for each",
            path.display()
        ),
    };
    if miss_ratio > 0.0 && miss_ratio < 1.0 {
        text.push_str(&format!(
            "; {:.0}% fresh random names under {suffix}: cache misses",
            miss_ratio * 100.0
        ));
    } else if miss_ratio == 0.0 {
        text.push_str(" (--miss-ratio F for misses)");
    }
    let generated = miss_ratio > 0.0 || matches!(source, Source::Pool { .. });
    if let Some(zone) = answered_locally(&suffix).filter(|_| generated) {
        text.push_str(&format!(
            "; but names under .{zone} are special-use (RFC 6761): a resolver such as kudurru \
             answers them itself, never from its cache or an upstream"
        ));
    }
    text
}

/// How queries are flagged: RD always; EDNS(0) optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Add an OPT record with this UDP payload size.
    pub edns_payload: Option<u16>,
    /// Set the DO bit (implies an OPT record).
    pub dnssec_ok: bool,
}

/// Which question a query in flight asked, compact enough to keep one per query ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// Index into the fixed questions.
    Fixed(u32),
    /// A fresh name: the random value its label was made from.
    Fresh(u64),
}

/// Everything the generator asks: fixed questions (file or pool) and, with a share of
/// `miss_ratio`, fresh names under a suffix.
#[derive(Debug, Clone)]
pub struct QueryMix {
    fixed: Vec<Question>,
    fresh_suffix: Vec<u8>,
    fresh_qtype: u16,
    /// Fresh names per 2^32 queries.
    fresh_threshold: u64,
    shape: Shape,
}

impl QueryMix {
    /// A mix of `fixed` questions and fresh names under `suffix` (a share of `miss_ratio`,
    /// 0 to 1) of type `qtype`.
    pub fn new(
        fixed: Vec<Question>,
        suffix: &str,
        qtype: &str,
        miss_ratio: f64,
        shape: Shape,
    ) -> Result<Self, MixError> {
        if !(0.0..=1.0).contains(&miss_ratio) {
            return Err(MixError::Ratio(miss_ratio));
        }
        if fixed.is_empty() && miss_ratio < 1.0 {
            return Err(MixError::NoQuestions);
        }
        // The longest suffix leaves room for the fresh label (1 + 16 bytes) within 255.
        let suffix_name = Name::<Vec<u8>>::from_str(suffix)
            .map_err(|e| MixError::Question(QuestionError::Name(suffix.into(), e.to_string())))?;
        if suffix_name.len() + 1 + FRESH_LABEL_LEN > 255 {
            return Err(MixError::SuffixTooLong(suffix.to_owned()));
        }
        Ok(Self {
            fixed,
            fresh_suffix: suffix_name.as_octets().clone(),
            fresh_qtype: parse_qtype(qtype).map_err(MixError::Question)?,
            fresh_threshold: (miss_ratio * (1u64 << 32) as f64) as u64,
            shape,
        })
    }

    /// Number of fixed questions.
    pub fn fixed_len(&self) -> usize {
        self.fixed.len()
    }

    /// Picks the next question for a flow: a fresh name with the configured probability, else
    /// the fixed question after `cursor` (which advances).
    pub fn pick(&self, rng: &mut Rng, cursor: &mut usize) -> Asked {
        let draw = rng.next_u64();
        if self.fixed.is_empty() || (draw & 0xffff_ffff) < self.fresh_threshold {
            return Asked::Fresh(rng.next_u64());
        }
        let index = *cursor % self.fixed.len();
        *cursor = index + 1;
        Asked::Fixed(index as u32)
    }

    /// Writes the query for `asked` with `id` into `out` (cleared first).
    pub fn write_query(&self, asked: Asked, id: u16, out: &mut Vec<u8>) {
        out.clear();
        let opt = self.shape.edns_payload.is_some() || self.shape.dnssec_ok;
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(opt)]);
        self.write_question(asked, out);
        if opt {
            let payload = self.shape.edns_payload.unwrap_or(1232);
            out.push(0);
            out.extend_from_slice(&OPT.to_be_bytes());
            out.extend_from_slice(&payload.to_be_bytes());
            let flags: u8 = if self.shape.dnssec_ok { 0x80 } else { 0 };
            out.extend_from_slice(&[0, 0, flags, 0, 0, 0]);
        }
    }

    fn write_question(&self, asked: Asked, out: &mut Vec<u8>) {
        match asked {
            Asked::Fixed(index) => out.extend_from_slice(self.fixed[index as usize].wire()),
            Asked::Fresh(value) => {
                out.push(FRESH_LABEL_LEN as u8);
                out.extend_from_slice(&hex_label(value));
                out.extend_from_slice(&self.fresh_suffix);
                out.extend_from_slice(&self.fresh_qtype.to_be_bytes());
                out.extend_from_slice(&CLASS_IN.to_be_bytes());
            }
        }
    }

    /// Whether `reply_question` (the question section of a reply, possibly followed by more
    /// bytes) asks exactly what `asked` asked: name compared ignoring ASCII case (a server may
    /// answer in the case it prefers, RFC 4343), type and class exactly. Returns the length of
    /// the question on a match.
    pub fn matches(&self, asked: Asked, reply_question: &[u8]) -> Option<usize> {
        let mut expected = [0u8; 4 + 255 + 17];
        let len = match asked {
            Asked::Fixed(index) => {
                let wire = self.fixed.get(index as usize)?.wire();
                expected[..wire.len()].copy_from_slice(wire);
                wire.len()
            }
            Asked::Fresh(value) => {
                expected[0] = FRESH_LABEL_LEN as u8;
                expected[1..1 + FRESH_LABEL_LEN].copy_from_slice(&hex_label(value));
                let mut at = 1 + FRESH_LABEL_LEN;
                expected[at..at + self.fresh_suffix.len()].copy_from_slice(&self.fresh_suffix);
                at += self.fresh_suffix.len();
                expected[at..at + 2].copy_from_slice(&self.fresh_qtype.to_be_bytes());
                expected[at + 2..at + 4].copy_from_slice(&CLASS_IN.to_be_bytes());
                at + 4
            }
        };
        let got = reply_question.get(..len)?;
        let (name, fixed) = got.split_at(len - 4);
        (name.eq_ignore_ascii_case(&expected[..len - 4]) && fixed == &expected[len - 4..len])
            .then_some(len)
    }
}

/// Why a query mix could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MixError {
    /// The miss ratio is outside 0..=1.
    #[error("--miss-ratio {0} is outside 0..1")]
    Ratio(f64),
    /// No fixed questions and not every query fresh.
    #[error("no questions to ask: give --queries FILE or a --pool size above 0")]
    NoQuestions,
    /// The suffix or type is invalid.
    #[error("{0}")]
    Question(QuestionError),
    /// No room for the random label under the suffix.
    #[error("suffix `{0}` is too long for a 16-character label in front of it")]
    SuffixTooLong(String),
}

/// 16 lowercase hex digits of `value`.
fn hex_label(value: u64) -> [u8; FRESH_LABEL_LEN] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut label = [0u8; FRESH_LABEL_LEN];
    for (i, byte) in label.iter_mut().enumerate() {
        *byte = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
    }
    label
}

/// A small, fast, seedable generator (splitmix64): query mix and ID order, not security.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Shape = Shape {
        edns_payload: None,
        dnssec_ok: false,
    };

    #[test]
    fn query_file_lines_comments_and_default_type() {
        let qs =
            parse_query_file("; comment\n\nwww.example.com AAAA\n# other\nexample.org\n").unwrap();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0], Question::new("www.example.com.", "aaaa").unwrap());
        let wire = qs[1].wire();
        assert_eq!(&wire[..13], b"\x07example\x03org\x00");
        assert_eq!(&wire[13..], &[0, 1, 0, 1]);
    }

    #[test]
    fn query_file_errors_name_the_line() {
        assert_eq!(
            parse_query_file("a.example A\nb.example BOGUS\n").unwrap_err(),
            (2, Some(QuestionError::Type("BOGUS".into())))
        );
        assert_eq!(
            parse_query_file("a.example A extra\n").unwrap_err(),
            (1, Some(QuestionError::ExtraField("extra".into())))
        );
        let long = format!("{}.example A", "x".repeat(64));
        assert!(matches!(
            parse_query_file(&long).unwrap_err(),
            (1, Some(QuestionError::Name(..)))
        ));
        assert_eq!(parse_query_file("; nothing\n").unwrap_err(), (0, None));
    }

    #[test]
    fn rfc3597_type_numbers() {
        let q = Question::new("a.example", "TYPE65").unwrap();
        assert_eq!(&q.wire()[q.wire().len() - 4..], &[0, 65, 0, 1]);
        assert!(Question::new("a.example", "TYPE70000").is_err());
    }

    #[test]
    fn query_wire_with_and_without_opt() {
        let mix =
            QueryMix::new(pool("s.test", 1, "A").unwrap(), "s.test", "A", 0.0, PLAIN).unwrap();
        let mut out = Vec::new();
        mix.write_query(Asked::Fixed(0), 0xabcd, &mut out);
        assert_eq!(&out[..12], &[0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&out[12..], b"\x02p0\x01s\x04test\x00\x00\x01\x00\x01");
        let mix = QueryMix::new(
            pool("s.test", 1, "A").unwrap(),
            "s.test",
            "A",
            0.0,
            Shape {
                edns_payload: Some(4096),
                dnssec_ok: true,
            },
        )
        .unwrap();
        mix.write_query(Asked::Fixed(0), 1, &mut out);
        assert_eq!(out[11], 1);
        assert_eq!(
            &out[out.len() - 11..],
            &[0, 0, 41, 0x10, 0, 0, 0, 0x80, 0, 0, 0]
        );
    }

    #[test]
    fn reply_question_matching_ignores_case_only_in_the_name() {
        let mix =
            QueryMix::new(pool("s.test", 2, "A").unwrap(), "s.test", "A", 0.5, PLAIN).unwrap();
        let mut out = Vec::new();
        for asked in [Asked::Fixed(1), Asked::Fresh(0x0123_4567_89ab_cdef)] {
            mix.write_query(asked, 7, &mut out);
            let question = &out[HEADER_LEN..];
            assert_eq!(mix.matches(asked, question), Some(question.len()));
            let upper = question.to_ascii_uppercase();
            assert_eq!(mix.matches(asked, &upper), Some(question.len()));
            let mut other_type = question.to_vec();
            let at = other_type.len() - 3;
            other_type[at] = 28;
            assert_eq!(mix.matches(asked, &other_type), None);
            assert_eq!(mix.matches(asked, &question[..question.len() - 1]), None);
        }
        mix.write_query(Asked::Fixed(0), 7, &mut out);
        assert_eq!(mix.matches(Asked::Fixed(1), &out[HEADER_LEN..]), None);
        assert_eq!(mix.matches(Asked::Fresh(1), &out[HEADER_LEN..]), None);
    }

    #[test]
    fn miss_ratio_is_the_share_of_fresh_names() {
        let mix =
            QueryMix::new(pool("s.test", 10, "A").unwrap(), "s.test", "A", 0.25, PLAIN).unwrap();
        let (mut rng, mut cursor) = (Rng::new(1), 0);
        let fresh = (0..100_000)
            .filter(|_| matches!(mix.pick(&mut rng, &mut cursor), Asked::Fresh(_)))
            .count();
        assert!((24_000..26_000).contains(&fresh), "{fresh}");
        let all = QueryMix::new(Vec::new(), "s.test", "A", 1.0, PLAIN).unwrap();
        assert!(matches!(all.pick(&mut rng, &mut cursor), Asked::Fresh(_)));
        assert_eq!(
            QueryMix::new(Vec::new(), "s.test", "A", 0.5, PLAIN).unwrap_err(),
            MixError::NoQuestions
        );
        assert_eq!(
            QueryMix::new(Vec::new(), "s.test", "A", 1.5, PLAIN).unwrap_err(),
            MixError::Ratio(1.5)
        );
    }

    #[test]
    fn default_suffix_reaches_the_cache() {
        assert_eq!(answered_locally(DEFAULT_SUFFIX), None);
        assert_eq!(answered_locally("kudurru-bench.test."), Some("test"));
        assert_eq!(answered_locally("a.LOCALHOST"), Some("localhost"));
        assert_eq!(answered_locally("contest."), None);
        let default = describe(Source::Pool { count: 1000 }, DEFAULT_SUFFIX, "A", 0.0);
        assert!(
            default.starts_with("1000 names p0…p999.kudurru-bench.example. (A)")
                && default.contains("cache hits")
                && !default.contains("special-use"),
            "{default}"
        );
        let local = describe(Source::Pool { count: 10 }, "s.test", "A", 0.0);
        assert!(local.contains("special-use"), "{local}");
        let mixed = describe(Source::Pool { count: 10 }, "s.example", "AAAA", 0.2);
        assert!(
            mixed.contains("20% fresh random names under s.example."),
            "{mixed}"
        );
        let file = Source::File {
            path: Path::new("q.txt"),
            count: 3,
        };
        assert!(!describe(file, "s.test", "A", 0.0).contains("special-use"));
        assert!(describe(file, "s.test", "A", 1.0).starts_with("only fresh"));
    }

    #[test]
    fn fixed_questions_cycle_in_order() {
        let mix =
            QueryMix::new(pool("s.test", 3, "A").unwrap(), "s.test", "A", 0.0, PLAIN).unwrap();
        let (mut rng, mut cursor) = (Rng::new(1), 1);
        let picks: Vec<_> = (0..4).map(|_| mix.pick(&mut rng, &mut cursor)).collect();
        assert_eq!(
            picks,
            [1, 2, 0, 1].map(Asked::Fixed).to_vec(),
            "starts at the cursor and wraps"
        );
    }
}
