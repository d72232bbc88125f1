//! What an operator asks of the caches (`kudurru cache flush | dump | stats`), sans-IO: which
//! cached answers a flush removes, and how a cached answer reads as one dump entry.
//!
//! ```text
//! "Example.COM" ─▶ NameScope::parse ─▶ lowercased wire name ─┬ exact: qname == name
//!                                                             └ subtree: name is a suffix of
//!                                                               qname at a label boundary
//! ```
//! Cached answers hold their question in canonical (lowercased) wire form, so matching is a
//! byte comparison: a flush is case-insensitive whatever case the clients asked in.

use std::time::Instant;

use domain::base::Rtype;
use domain::base::iana::{Class, Rcode};

use crate::answer::{AnswerKind, CachedAnswer};
use crate::key::{MAX_NAME_LEN, name_to_text};

/// Which cached answers a flush removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameScope {
    /// Every answer.
    All,
    /// Answers whose qname is this name (lowercased wire form), any type and class.
    Name(Vec<u8>),
    /// Answers whose qname is this name or any name below it.
    Subtree(Vec<u8>),
}

/// Why a name given to `cache flush` is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// An empty label (`a..b`) or a leading dot.
    #[error("`{0}` has an empty label")]
    EmptyLabel(String),
    /// A label over 63 bytes (RFC 1035 §2.3.4).
    #[error("`{0}` has a label longer than 63 bytes")]
    LongLabel(String),
    /// A name over 255 bytes in wire form.
    #[error("`{0}` is longer than 255 bytes")]
    LongName(String),
    /// A backslash escape: not accepted here.
    #[error("`{0}` has a backslash; escapes are not supported")]
    Escape(String),
    /// A space, a control character or a character outside ASCII (write IDNs as `xn--`).
    #[error("{0:?} has a character other than printable ASCII (write IDNs in their xn-- form)")]
    Character(String),
}

impl NameScope {
    /// The scope of `name` (presentation form, any case, trailing dot optional; `.` is the
    /// root), the name alone or with its `subtree`.
    pub fn parse(name: &str, subtree: bool) -> Result<Self, NameError> {
        let wire = name_to_wire(name)?;
        Ok(if subtree {
            Self::Subtree(wire)
        } else {
            Self::Name(wire)
        })
    }

    /// Whether the answer to `question` (canonical wire question: qname, qtype, qclass) is in
    /// scope.
    pub fn matches(&self, question: &[u8]) -> bool {
        let qname = &question[..question.len().saturating_sub(4)];
        match self {
            Self::All => true,
            Self::Name(name) => qname == name.as_slice(),
            Self::Subtree(name) => {
                let mut at = 0;
                while at < qname.len() {
                    if &qname[at..] == name.as_slice() {
                        return true;
                    }
                    at += 1 + usize::from(qname[at]);
                }
                false
            }
        }
    }
}

/// `name` in lowercased uncompressed wire form.
fn name_to_wire(name: &str) -> Result<Vec<u8>, NameError> {
    if name.contains('\\') {
        return Err(NameError::Escape(name.into()));
    }
    if name.is_empty() {
        return Err(NameError::EmptyLabel(name.into()));
    }
    if !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(NameError::Character(name.into()));
    }
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    let mut wire = Vec::with_capacity(trimmed.len() + 2);
    if !trimmed.is_empty() {
        for label in trimmed.split('.') {
            if label.is_empty() {
                return Err(NameError::EmptyLabel(name.into()));
            }
            if label.len() > 63 {
                return Err(NameError::LongLabel(name.into()));
            }
            wire.push(label.len() as u8);
            wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
        }
    }
    wire.push(0);
    if wire.len() > MAX_NAME_LEN {
        return Err(NameError::LongName(name.into()));
    }
    Ok(wire)
}

/// One cached answer as `cache dump` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// The owner name, presentation form (`www.example.com.`).
    pub name: String,
    /// The query type mnemonic (`A`, `AAAA`, `TYPE65280`).
    pub rtype: String,
    /// The class mnemonic (`IN`).
    pub class: String,
    /// Seconds of life left.
    pub ttl: u32,
    /// The rcode the client sees (`NOERROR`, `NXDOMAIN`, `SERVFAIL`).
    pub rcode: String,
    /// `positive`, `negative` or `failure`.
    pub kind: &'static str,
}

impl DumpEntry {
    /// The entry for `answer` at `now`.
    pub fn of(answer: &CachedAnswer, now: Instant) -> Self {
        let question = answer.question();
        let split = question.len().saturating_sub(4);
        let (qname, tail) = question.split_at(split);
        let read = |at: usize| {
            tail.get(at..at + 2)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
        };
        Self {
            name: name_to_text(qname),
            rtype: Rtype::from_int(read(0)).to_string(),
            class: Class::from_int(read(2)).to_string(),
            ttl: answer.remaining(now),
            rcode: Rcode::masked_from_int(answer.rcode()).to_string(),
            kind: match answer.kind() {
                AnswerKind::Positive => "positive",
                AnswerKind::Negative => "negative",
                AnswerKind::Failure => "failure",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::answer::TtlPolicy;
    use crate::{Cache, CacheKey};

    fn question(name: &str) -> Vec<u8> {
        let mut q = name_to_wire(name).unwrap();
        q.extend_from_slice(&[0, 1, 0, 1]);
        q
    }

    #[test]
    fn a_name_matches_itself_in_any_case_and_a_subtree_only_at_label_boundaries() {
        let name = NameScope::parse("Example.COM", false).unwrap();
        assert!(name.matches(&question("example.com.")));
        assert!(!name.matches(&question("www.example.com.")));
        let tree = NameScope::parse("example.com.", true).unwrap();
        assert!(tree.matches(&question("example.com.")));
        assert!(tree.matches(&question("a.b.example.com.")));
        assert!(!tree.matches(&question("notexample.com.")));
        assert!(!tree.matches(&question("com.")));
        let root = NameScope::parse(".", true).unwrap();
        assert!(root.matches(&question("anything.test.")));
        assert!(NameScope::All.matches(&question("x.")));
    }

    #[test]
    fn bad_names_are_named() {
        assert!(matches!(
            NameScope::parse("a..b", false),
            Err(NameError::EmptyLabel(_))
        ));
        assert!(matches!(
            NameScope::parse(&"a".repeat(64), false),
            Err(NameError::LongLabel(_))
        ));
        let long = vec!["abcdefgh"; 40].join(".");
        assert!(matches!(
            NameScope::parse(&long, false),
            Err(NameError::LongName(_))
        ));
        assert!(matches!(
            NameScope::parse("a\\.b", false),
            Err(NameError::Escape(_))
        ));
        assert!(matches!(
            NameScope::parse("", true),
            Err(NameError::EmptyLabel(_))
        ));
        for bad in ["a b", "\u{dd}\u{3}l", "caf\u{e9}.example"] {
            assert!(
                matches!(NameScope::parse(bad, false), Err(NameError::Character(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_flush_removes_its_scope_from_a_shard_and_a_dump_reads_the_rest() {
        let now = Instant::now();
        let mut cache = Cache::new(16);
        for name in ["example.com.", "www.example.com.", "example.org."] {
            let wire = name_to_wire(name).unwrap();
            let key = CacheKey::new(&wire, 1, 1, false, false).unwrap();
            let policy = TtlPolicy {
                servfail_ttl: 30,
                ..TtlPolicy::default()
            };
            cache.insert(
                &key,
                Arc::new(CachedAnswer::failure(&key, now, &policy)),
                now,
            );
        }
        let scope = NameScope::parse("EXAMPLE.com", true).unwrap();
        assert_eq!(cache.remove_where(|a| scope.matches(a.question())), 2);
        let left: Vec<DumpEntry> = cache.answers().map(|a| DumpEntry::of(a, now)).collect();
        assert_eq!(
            left,
            [DumpEntry {
                name: "example.org.".into(),
                rtype: "A".into(),
                class: "IN".into(),
                ttl: 30,
                rcode: "SERVFAIL".into(),
                kind: "failure",
            }]
        );
        assert_eq!(cache.remove_where(|_| true), 1);
        assert!(cache.is_empty());
    }
}
