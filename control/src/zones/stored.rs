//! A secondary zone's transferred data in the store's body cache, so a restart serves it at
//! once. Key `zone/<apex>` (the apex in text, `zone/corp.example`); the body cache checks its
//! SHA-256 on every read.
//!
//! Layout (big-endian), version 1:
//! ```text
//! "KZD1" | apex length u8 | apex (wire) | record count u32 |
//!   per record: owner length u8 | owner (wire) | type u16 | ttl u32 | rdata length u16 | rdata
//! ```
//! Decoding checks every length against what is left: a damaged body is an error, never a
//! panic, and the zone then waits for its next transfer.

use kudurru_core::zone::{Record, ZoneData};

const MAGIC: &[u8; 4] = b"KZD1";

/// The body cache key of the zone at `apex`.
pub fn key(apex: &[u8]) -> String {
    format!("zone/{}", kudurru_core::policy::name::to_text(apex))
}

/// `data` encoded.
pub fn encode(data: &ZoneData) -> Vec<u8> {
    let size: usize = data
        .records
        .iter()
        .map(|r| 9 + r.owner.len() + r.rdata.len())
        .sum();
    let mut out = Vec::with_capacity(9 + data.apex.len() + size);
    out.extend_from_slice(MAGIC);
    push_name(&mut out, &data.apex);
    out.extend_from_slice(&(data.records.len() as u32).to_be_bytes());
    for record in &data.records {
        push_name(&mut out, &record.owner);
        out.extend_from_slice(&record.rtype.to_be_bytes());
        out.extend_from_slice(&record.ttl.to_be_bytes());
        // Rdata is at most 65535 bytes on the wire it came from.
        out.extend_from_slice(&(record.rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&record.rdata);
    }
    out
}

fn push_name(out: &mut Vec<u8>, name: &[u8]) {
    // A wire name is at most 255 bytes.
    out.push(name.len() as u8);
    out.extend_from_slice(name);
}

/// Decodes what [`encode`] wrote; `None` when it is not that.
pub fn decode(body: &[u8]) -> Option<ZoneData> {
    let mut reader = Reader(body);
    if reader.take(4)? != MAGIC {
        return None;
    }
    let apex = reader.name()?;
    let count = u32::from_be_bytes(reader.take(4)?.try_into().ok()?);
    let mut records = Vec::with_capacity((count as usize).min(body.len() / 9));
    for _ in 0..count {
        let owner = reader.name()?;
        let rtype = u16::from_be_bytes(reader.take(2)?.try_into().ok()?);
        let ttl = u32::from_be_bytes(reader.take(4)?.try_into().ok()?);
        let length = u16::from_be_bytes(reader.take(2)?.try_into().ok()?);
        let rdata = reader.take(usize::from(length))?.into();
        records.push(Record {
            owner,
            rtype,
            ttl,
            rdata,
        });
    }
    reader.0.is_empty().then_some(ZoneData {
        apex,
        records,
        origins: Vec::new(),
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn name(&mut self) -> Option<Box<[u8]>> {
        let length = usize::from(*self.take(1)?.first()?);
        Some(self.take(length)?.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_data_round_trips_and_damage_is_refused() {
        let data = ZoneData {
            apex: b"\x04corp\x07example\x00".as_slice().into(),
            records: vec![
                Record {
                    owner: b"\x03www\x04corp\x07example\x00".as_slice().into(),
                    rtype: 1,
                    ttl: 300,
                    rdata: [192, 0, 2, 1].as_slice().into(),
                },
                Record {
                    owner: b"\x04corp\x07example\x00".as_slice().into(),
                    rtype: 16,
                    ttl: 60,
                    rdata: Box::new([]),
                },
            ],
            origins: Vec::new(),
        };
        let body = encode(&data);
        let back = decode(&body).unwrap();
        assert_eq!(
            (back.apex, back.records),
            (data.apex.clone(), data.records.clone())
        );
        for cut in 0..body.len() {
            assert!(decode(&body[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        assert_eq!(key(&data.apex), "zone/corp.example");
    }
}
