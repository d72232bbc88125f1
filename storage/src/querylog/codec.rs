//! The byte layouts of the query log's values: a fact (one logged query, its strings as
//! dictionary ids) and a rollup bucket (counters and top lists). Every decoder reads data
//! from disk, so it checks every length and answers a reason instead of panicking.

use std::collections::BTreeMap;

/// The first byte of a fact value.
pub(super) const FACT_VERSION: u8 = 1;
/// The first byte of a rollup value.
pub(super) const ROLLUP_VERSION: u8 = 1;
/// Fact header bit: the answer is stored inline (length and bytes), not as a dictionary id.
const ANSWER_INLINE: u8 = 1;

/// Appends `value` as an unsigned LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A cursor over a value being decoded.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub(super) fn byte(&mut self) -> Result<u8, &'static str> {
        let (&first, rest) = self.bytes.split_first().ok_or("truncated")?;
        self.bytes = rest;
        Ok(first)
    }

    pub(super) fn varint(&mut self) -> Result<u64, &'static str> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err("varint overflows 64 bits");
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes")
    }

    fn varint_u32(&mut self) -> Result<u32, &'static str> {
        u32::try_from(self.varint()?).map_err(|_| "value exceeds 32 bits")
    }

    fn varint_u16(&mut self) -> Result<u16, &'static str> {
        u16::try_from(self.varint()?).map_err(|_| "value exceeds 16 bits")
    }

    fn varint_u8(&mut self) -> Result<u8, &'static str> {
        u8::try_from(self.varint()?).map_err(|_| "value exceeds 8 bits")
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], &'static str> {
        if self.bytes.len() < len {
            return Err("truncated");
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    pub(super) fn finish(&self) -> Result<(), &'static str> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes")
        }
    }
}

/// An optional small code stored as 0 for none and `code + 1` otherwise.
fn put_optional(out: &mut Vec<u8>, code: Option<u16>) {
    put_varint(out, code.map_or(0, |code| u64::from(code) + 1));
}

fn read_optional(reader: &mut Reader<'_>) -> Result<Option<u16>, &'static str> {
    match reader.varint()? {
        0 => Ok(None),
        code => u16::try_from(code - 1)
            .map(Some)
            .map_err(|_| "code exceeds 16 bits"),
    }
}

/// The answer of a fact: a dictionary id or the text itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer<'a> {
    Id(u32),
    Inline(&'a str),
}

/// A fact as stored: the entry's numbers and its strings' dictionary ids (0: empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fact<'a> {
    pub(super) flags: u16,
    pub(super) transport: u8,
    pub(super) source: u8,
    pub(super) qtype: u16,
    pub(super) rcode: Option<u16>,
    pub(super) ede: Option<u16>,
    pub(super) upstream_latency_us: u32,
    pub(super) client: u32,
    pub(super) client_id: u32,
    pub(super) group: u32,
    pub(super) qname: u32,
    pub(super) upstream: u32,
    pub(super) policy: u32,
    pub(super) list: u32,
    pub(super) rule: u32,
    pub(super) answer: Answer<'a>,
}

impl<'a> Fact<'a> {
    /// Appends the value's bytes to `out`.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.push(FACT_VERSION);
        out.push(match self.answer {
            Answer::Id(_) => 0,
            Answer::Inline(_) => ANSWER_INLINE,
        });
        put_varint(out, u64::from(self.flags));
        put_varint(out, u64::from(self.transport));
        put_varint(out, u64::from(self.source));
        put_varint(out, u64::from(self.qtype));
        put_optional(out, self.rcode);
        put_optional(out, self.ede);
        put_varint(out, u64::from(self.upstream_latency_us));
        for id in [
            self.client,
            self.client_id,
            self.group,
            self.qname,
            self.upstream,
            self.policy,
            self.list,
            self.rule,
        ] {
            put_varint(out, u64::from(id));
        }
        match self.answer {
            Answer::Id(id) => put_varint(out, u64::from(id)),
            Answer::Inline(text) => {
                put_varint(out, text.len() as u64);
                out.extend_from_slice(text.as_bytes());
            }
        }
    }

    /// Decodes a stored value.
    pub(super) fn decode(bytes: &'a [u8]) -> Result<Self, &'static str> {
        let mut reader = Reader::new(bytes);
        if reader.byte()? != FACT_VERSION {
            return Err("unknown fact version");
        }
        let header = reader.byte()?;
        if header & !ANSWER_INLINE != 0 {
            return Err("unknown fact header bits");
        }
        let flags = reader.varint_u16()?;
        let transport = reader.varint_u8()?;
        let source = reader.varint_u8()?;
        let qtype = reader.varint_u16()?;
        let rcode = read_optional(&mut reader)?;
        let ede = read_optional(&mut reader)?;
        let upstream_latency_us = reader.varint_u32()?;
        let mut ids = [0u32; 8];
        for id in &mut ids {
            *id = reader.varint_u32()?;
        }
        let [
            client,
            client_id,
            group,
            qname,
            upstream,
            policy,
            list,
            rule,
        ] = ids;
        let answer = if header & ANSWER_INLINE != 0 {
            let len = usize::try_from(reader.varint()?).map_err(|_| "answer too long")?;
            let text = std::str::from_utf8(reader.bytes(len)?).map_err(|_| "answer not UTF-8")?;
            Answer::Inline(text)
        } else {
            Answer::Id(reader.varint_u32()?)
        };
        reader.finish()?;
        Ok(Self {
            flags,
            transport,
            source,
            qtype,
            rcode,
            ede,
            upstream_latency_us,
            client,
            client_id,
            group,
            qname,
            upstream,
            policy,
            list,
            rule,
            answer,
        })
    }
}

/// One rollup bucket as stored: counters, and top lists of dictionary ids with counts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Rollup {
    pub(super) queries: u64,
    pub(super) blocked: u64,
    pub(super) cache_hits: u64,
    /// By rcode code: 0 for none (dropped), `rcode + 1` otherwise.
    pub(super) by_rcode: BTreeMap<u64, u64>,
    pub(super) names: Vec<(u32, u64)>,
    pub(super) blocked_names: Vec<(u32, u64)>,
    pub(super) clients: Vec<(u32, u64)>,
}

impl Rollup {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            16 + 8 * (self.names.len() + self.blocked_names.len() + self.clients.len()),
        );
        out.push(ROLLUP_VERSION);
        put_varint(&mut out, self.queries);
        put_varint(&mut out, self.blocked);
        put_varint(&mut out, self.cache_hits);
        put_varint(&mut out, self.by_rcode.len() as u64);
        for (&code, &count) in &self.by_rcode {
            put_varint(&mut out, code);
            put_varint(&mut out, count);
        }
        for list in [&self.names, &self.blocked_names, &self.clients] {
            put_varint(&mut out, list.len() as u64);
            for &(id, count) in list {
                put_varint(&mut out, u64::from(id));
                put_varint(&mut out, count);
            }
        }
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, &'static str> {
        let mut reader = Reader::new(bytes);
        if reader.byte()? != ROLLUP_VERSION {
            return Err("unknown rollup version");
        }
        let queries = reader.varint()?;
        let blocked = reader.varint()?;
        let cache_hits = reader.varint()?;
        let mut by_rcode = BTreeMap::new();
        for _ in 0..reader.varint()? {
            let code = reader.varint()?;
            if code > u64::from(u16::MAX) + 1 {
                return Err("rcode exceeds 16 bits");
            }
            by_rcode.insert(code, reader.varint()?);
        }
        let mut lists: [Vec<(u32, u64)>; 3] = Default::default();
        for list in &mut lists {
            let len = reader.varint()?;
            // Each pair takes at least two bytes: a length the value cannot hold is damage.
            if len > bytes.len() as u64 {
                return Err("top list longer than the value");
            }
            for _ in 0..len {
                list.push((reader.varint_u32()?, reader.varint()?));
            }
        }
        reader.finish()?;
        let [names, blocked_names, clients] = lists;
        Ok(Self {
            queries,
            blocked,
            cache_hits,
            by_rcode,
            names,
            blocked_names,
            clients,
        })
    }
}

/// The key of a name in the reversed-name table: its labels last to first, each followed by
/// a zero byte, so every name at or below `example.com.` sorts in the range starting with
/// `com\0example\0`. Presentation form escapes a dot inside a label (`\.`), which stays in
/// its label; the root is the empty key.
pub(super) fn reversed_name(name: &str) -> Vec<u8> {
    let bytes = name.as_bytes();
    let mut labels: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (position, &byte) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if byte == b'\\' {
            escaped = true;
        } else if byte == b'.' {
            labels.push(&bytes[start..position]);
            start = position + 1;
        }
    }
    if start < bytes.len() {
        labels.push(&bytes[start..]);
    }
    let mut key = Vec::with_capacity(bytes.len() + 1);
    for label in labels.iter().rev().filter(|label| !label.is_empty()) {
        key.extend_from_slice(label);
        key.push(0);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(answer: Answer<'_>) -> Fact<'_> {
        Fact {
            flags: 5,
            transport: 3,
            source: 1,
            qtype: 65,
            rcode: Some(3),
            ede: None,
            upstream_latency_us: 1234,
            client: 7,
            client_id: 0,
            group: 2,
            qname: 300,
            upstream: 9,
            policy: 0,
            list: 0,
            rule: 0,
            answer,
        }
    }

    #[test]
    fn fact_round_trips_with_either_answer() {
        for answer in [Answer::Id(70_000), Answer::Inline("A 192.0.2.1")] {
            let fact = fact(answer);
            let mut bytes = Vec::new();
            fact.encode(&mut bytes);
            assert_eq!(Fact::decode(&bytes), Ok(fact));
        }
    }

    #[test]
    fn every_truncation_of_a_fact_is_an_error() {
        let mut bytes = Vec::new();
        fact(Answer::Inline("A 192.0.2.1")).encode(&mut bytes);
        for len in 0..bytes.len() {
            assert!(
                Fact::decode(&bytes[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
        bytes.push(0);
        assert_eq!(Fact::decode(&bytes), Err("trailing bytes"));
    }

    #[test]
    fn rollup_round_trips_and_rejects_damage() {
        let rollup = Rollup {
            queries: 10,
            blocked: 2,
            cache_hits: 4,
            by_rcode: BTreeMap::from([(0, 1), (1, 7), (4, 2)]),
            names: vec![(5, 6), (9, 4)],
            blocked_names: vec![(9, 2)],
            clients: vec![(11, 10)],
        };
        let bytes = rollup.encode();
        assert_eq!(Rollup::decode(&bytes), Ok(rollup));
        for len in 0..bytes.len() {
            assert!(Rollup::decode(&bytes[..len]).is_err());
        }
        assert!(Rollup::decode(&[ROLLUP_VERSION, 0, 0, 0, 0, 0xff, 0xff, 0x7f]).is_err());
    }

    #[test]
    fn varint_rejects_overflow() {
        let mut reader = Reader::new(&[0xff; 11]);
        assert!(reader.varint().is_err());
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX);
        assert_eq!(Reader::new(&out).varint(), Ok(u64::MAX));
    }

    #[test]
    fn reversed_names_keep_label_boundaries() {
        assert_eq!(reversed_name("a.example.com."), b"com\0example\0a\0");
        assert_eq!(reversed_name("example.com"), b"com\0example\0");
        assert_eq!(reversed_name("."), b"");
        assert_eq!(reversed_name(r"a\.b.com."), b"com\0a\\.b\0");
        let below = reversed_name("x.example.com.");
        assert!(below.starts_with(&reversed_name("example.com.")));
        assert!(!reversed_name("badexample.com.").starts_with(&reversed_name("example.com.")));
    }
}
