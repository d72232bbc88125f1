//! The cache key: what makes two queries the same question for the cache.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

/// Longest domain name in wire form (RFC 1035 §2.3.4). Defined with the key, which holds one
/// inline; [`crate::wire`] re-exports it.
pub const MAX_NAME_LEN: usize = 255;

const KEY_CAPACITY: usize = MAX_NAME_LEN + 5;
const KEY_DO: u8 = 0x01;
const KEY_CD: u8 = 0x02;

/// Lowercased wire qname, qtype, qclass and a flags byte (DO, CD), inline and `Copy`.
///
/// EDNS presence is not part of the key: cached answers hold no OPT record, and one is added
/// when serving a client that sent one.
#[derive(Clone, Copy)]
pub struct CacheKey {
    bytes: [u8; KEY_CAPACITY],
    len: u16,
}

impl CacheKey {
    pub(crate) fn empty() -> Self {
        Self {
            bytes: [0; KEY_CAPACITY],
            len: 0,
        }
    }

    /// Builds a key from a wire qname (any case), qtype, qclass and the DO and CD bits.
    ///
    /// Returns `None` when `qname` is not a valid uncompressed wire name.
    pub fn new(qname: &[u8], qtype: u16, qclass: u16, dnssec_ok: bool, cd: bool) -> Option<Self> {
        let mut key = Self::empty();
        let mut pos = 0;
        loop {
            let len = usize::from(*qname.get(pos)?);
            if len & 0xc0 != 0 || pos + 1 + len > MAX_NAME_LEN {
                return None;
            }
            key.push_lowercase(qname.get(pos..pos + 1 + len)?);
            pos += 1 + len;
            if len == 0 {
                break;
            }
        }
        if pos != qname.len() {
            return None;
        }
        key.finish(qtype, qclass, dnssec_ok, cd);
        Some(key)
    }

    /// Appends a label (length byte included), lowercasing ASCII letters.
    pub(crate) fn push_lowercase(&mut self, label: &[u8]) {
        let at = usize::from(self.len);
        let dst = &mut self.bytes[at..at + label.len()];
        for (d, s) in dst.iter_mut().zip(label) {
            *d = s.to_ascii_lowercase();
        }
        self.len += label.len() as u16;
    }

    pub(crate) fn finish(&mut self, qtype: u16, qclass: u16, dnssec_ok: bool, cd: bool) {
        let at = usize::from(self.len);
        self.bytes[at..at + 2].copy_from_slice(&qtype.to_be_bytes());
        self.bytes[at + 2..at + 4].copy_from_slice(&qclass.to_be_bytes());
        let mut flags = 0;
        if dnssec_ok {
            flags |= KEY_DO;
        }
        if cd {
            flags |= KEY_CD;
        }
        self.bytes[at + 4] = flags;
        self.len += 5;
    }

    /// All key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The question section in wire form: lowercased qname, qtype, qclass.
    pub fn question(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len) - 1]
    }

    /// The lowercased qname in wire form.
    pub fn qname(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len) - 5]
    }

    /// The query type.
    pub fn qtype(&self) -> u16 {
        let at = usize::from(self.len) - 5;
        u16::from_be_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    /// The query class.
    pub fn qclass(&self) -> u16 {
        let at = usize::from(self.len) - 3;
        u16::from_be_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    /// Whether the DO bit is part of this question.
    pub fn dnssec_ok(&self) -> bool {
        self.bytes[usize::from(self.len) - 1] & KEY_DO != 0
    }

    /// Whether the CD bit is part of this question.
    pub fn checking_disabled(&self) -> bool {
        self.bytes[usize::from(self.len) - 1] & KEY_CD != 0
    }

    /// A hash of the key under `hasher`.
    pub fn hash_with(&self, hasher: &impl BuildHasher) -> u64 {
        hasher.hash_one(self)
    }

    /// The qname as presentation text (`www.example.com.`), for logs and errors.
    pub fn qname_text(&self) -> String {
        name_to_text(self.qname())
    }
}

/// Renders an uncompressed wire name as presentation text, escaping unusual bytes.
pub fn name_to_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 || len & 0xc0 != 0 {
            break;
        }
        let Some(label) = wire.get(pos + 1..pos + 1 + usize::from(len)) else {
            break;
        };
        for &b in label {
            match b {
                b'.' | b'\\' => {
                    out.push('\\');
                    out.push(char::from(b));
                }
                0x21..=0x7e => out.push(char::from(b)),
                _ => out.push_str(&format!("\\{b:03}")),
            }
        }
        out.push('.');
        pos += 1 + usize::from(len);
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CacheKey {}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} type {} class {}{}{}",
            self.qname_text(),
            self.qtype(),
            self.qclass(),
            if self.dnssec_ok() { " +do" } else { "" },
            if self.checking_disabled() { " +cd" } else { "" },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_case_but_not_flags() {
        let a = CacheKey::new(b"\x03WWW\x07example\x00", 1, 1, false, false).unwrap();
        let b = CacheKey::new(b"\x03www\x07EXAMPLE\x00", 1, 1, false, false).unwrap();
        let c = CacheKey::new(b"\x03www\x07example\x00", 1, 1, true, false).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.qtype(), 1);
        assert!(c.dnssec_ok() && !c.checking_disabled());
        assert_eq!(a.qname_text(), "www.example.");
        assert!(CacheKey::new(b"\x03www", 1, 1, false, false).is_none());
    }
}
