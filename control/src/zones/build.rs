//! What a primary zone is built from, without I/O: the file's records overlaid by RecordSets,
//! the SOA and apex NS the spec gives when nothing else does, the serial, and the diff
//! between two versions for IXFR.
//!
//! ```text
//! file ZoneData ─┐
//! RecordSets ────┴─▶ overlay ─▶ complete (SOA, NS) ─▶ content hash ─┬─ same: keep serial
//!                                                                  └─ new: next_serial
//! ```

use std::collections::{BTreeMap, BTreeSet};

use kudurru_core::zone::file::ParsedRecordSet;
use kudurru_core::zone::xfr::{Diff, Journal};
use kudurru_core::zone::{Record, ZoneData, ZoneError, ZoneErrorKind};
use sha2::{Digest, Sha256};

use crate::objects::kinds::{PrimarySpec, SerialPolicy};

/// The SOA type.
pub const SOA: u16 = 6;
/// The NS type.
pub const NS: u16 = 2;

/// A RecordSet as the overlay takes it: the object's name (for origins) and its records.
#[derive(Debug, Clone)]
pub struct Overlay {
    /// `RecordSet/<name>`.
    pub origin: String,
    /// Owner, type and records; no records: the file's RRset is deleted.
    pub set: ParsedRecordSet,
}

/// The file's records (if any) with each RecordSet replacing the RRset of its owner and type.
/// The file's data is moved, not copied: with no RecordSets it is the result as it is.
pub fn overlay(apex: &[u8], file: Option<ZoneData>, sets: Vec<Overlay>) -> ZoneData {
    let mut data = file.unwrap_or_default();
    data.apex = apex.into();
    if !sets.is_empty() {
        let replaced: BTreeSet<(&[u8], u16)> =
            sets.iter().map(|o| (&*o.set.owner, o.set.rtype)).collect();
        let keep: Vec<bool> = data
            .records
            .iter()
            .map(|r| !replaced.contains(&(&*r.owner, r.rtype)))
            .collect();
        if data.origins.len() == data.records.len() {
            let mut kept = keep.iter();
            data.origins.retain(|_| *kept.next().unwrap_or(&true));
        } else {
            data.origins.clear();
        }
        let mut kept = keep.iter();
        data.records.retain(|_| *kept.next().unwrap_or(&true));
    }
    let has_origins = data.origins.len() == data.records.len();
    for overlay in sets {
        for record in overlay.set.records {
            data.records.push(record);
            if has_origins {
                data.origins.push(overlay.origin.clone());
            }
        }
    }
    if !has_origins {
        data.origins.clear();
    }
    data
}

/// Adds the spec's SOA (serial 0 until [`set_serial`]) when no SOA is at the apex, and its
/// `nameServers` as the apex NS when none is there.
pub fn complete(data: &mut ZoneData, spec: &PrimarySpec) {
    let apex = data.apex.clone();
    let at_apex = |data: &ZoneData, rtype| {
        data.records
            .iter()
            .any(|r| r.rtype == rtype && r.owner == apex)
    };
    if !at_apex(data, SOA) {
        let soa = &spec.soa;
        let mname = soa
            .mname
            .clone()
            .or_else(|| spec.name_servers.first().cloned())
            .unwrap_or_else(|| prefixed(b"ns1", &apex));
        let rname = soa
            .rname
            .clone()
            .unwrap_or_else(|| prefixed(b"hostmaster", &apex));
        let mut rdata = Vec::with_capacity(mname.len() + rname.len() + 20);
        rdata.extend_from_slice(&mname);
        rdata.extend_from_slice(&rname);
        for value in [0, soa.refresh, soa.retry, soa.expire, soa.minimum] {
            rdata.extend_from_slice(&value.to_be_bytes());
        }
        data.records.insert(
            0,
            Record {
                owner: apex.clone(),
                rtype: SOA,
                ttl: soa.ttl,
                rdata: rdata.into(),
            },
        );
        data.origins.insert(0, "spec.soa".into());
    }
    if !at_apex(data, NS) {
        for name in &spec.name_servers {
            data.records.push(Record {
                owner: apex.clone(),
                rtype: NS,
                ttl: spec.soa.ttl,
                rdata: name.clone(),
            });
            data.origins.push("spec.nameServers".into());
        }
    }
}

/// `label.apex` in wire form.
fn prefixed(label: &[u8], apex: &[u8]) -> Box<[u8]> {
    let mut name = Vec::with_capacity(1 + label.len() + apex.len());
    name.push(label.len() as u8);
    name.extend_from_slice(label);
    name.extend_from_slice(apex);
    name.into()
}

/// Where the serial sits in an SOA's uncompressed rdata (after MNAME and RNAME).
fn serial_offset(rdata: &[u8]) -> Option<usize> {
    let mut at = 0;
    for _ in 0..2 {
        loop {
            let length = usize::from(*rdata.get(at)?);
            at += 1 + length;
            if length == 0 {
                break;
            }
        }
    }
    (rdata.len() >= at + 20).then_some(at)
}

/// The apex SOA's index in `data`.
fn soa_index(data: &ZoneData) -> Option<usize> {
    data.records
        .iter()
        .position(|r| r.rtype == SOA && r.owner == data.apex)
}

/// The apex SOA's serial.
pub fn soa_serial(data: &ZoneData) -> Option<u32> {
    soa_field(data, 0)
}

/// The apex SOA's `index`th number: 0 serial, 1 refresh, 2 retry, 3 expire, 4 minimum.
pub fn soa_field(data: &ZoneData, index: usize) -> Option<u32> {
    let rdata = &data.records[soa_index(data)?].rdata;
    let at = serial_offset(rdata)? + 4 * index;
    Some(u32::from_be_bytes(rdata.get(at..at + 4)?.try_into().ok()?))
}

/// Sets the apex SOA's serial; false when there is no (well-formed) SOA.
pub fn set_serial(data: &mut ZoneData, serial: u32) -> bool {
    let Some(index) = soa_index(data) else {
        return false;
    };
    let record = &mut data.records[index];
    let Some(at) = serial_offset(&record.rdata) else {
        return false;
    };
    let mut rdata = record.rdata.to_vec();
    rdata[at..at + 4].copy_from_slice(&serial.to_be_bytes());
    record.rdata = rdata.into();
    true
}

/// A hash of the content: the records in order, the SOA's serial left out, so a rebuild that
/// changes nothing keeps the serial (and a restart finds it in the status).
pub fn content_hash(data: &ZoneData) -> String {
    let mut records: Vec<&Record> = data.records.iter().collect();
    records.sort();
    records.dedup();
    let mut hash = Sha256::new();
    for record in records {
        hash.update([record.owner.len() as u8]);
        hash.update(&record.owner);
        hash.update(record.rtype.to_be_bytes());
        hash.update(record.ttl.to_be_bytes());
        hash.update((record.rdata.len() as u32).to_be_bytes());
        match serial_offset(&record.rdata) {
            Some(at) if record.rtype == SOA && record.owner == data.apex => {
                hash.update(&record.rdata[..at]);
                hash.update([0; 4]);
                hash.update(&record.rdata[at + 4..]);
            }
            _ => hash.update(&record.rdata),
        }
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `a` is after `b` in serial number arithmetic (RFC 1982 §3.2).
pub fn serial_after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

/// The serial of a new version: past `last` by the zone's policy, or the file's own serial
/// when that is later still (an operator who bumps the file keeps control). With no `last`
/// (a new zone), the file's serial, else 1 (increment) or the Unix time.
pub fn next_serial(policy: SerialPolicy, last: Option<u32>, file: Option<u32>, now: u32) -> u32 {
    let proposed = match (policy, last) {
        (SerialPolicy::Increment, Some(last)) => last.wrapping_add(1),
        (SerialPolicy::Unixtime, Some(last)) if serial_after(now, last) => now,
        (SerialPolicy::Unixtime, Some(last)) => last.wrapping_add(1),
        (_, None) => {
            return file.unwrap_or(match policy {
                SerialPolicy::Increment => 1,
                SerialPolicy::Unixtime => now,
            });
        }
    };
    match file {
        Some(file) if serial_after(file, proposed) => file,
        _ => proposed,
    }
}

/// The records removed and added from `old` to `new` (RFC 1995 §4: the old SOA among the
/// removed, the new among the added).
pub fn diff(old: &ZoneData, new: &ZoneData) -> Diff {
    let before: BTreeSet<&Record> = old.records.iter().collect();
    let after: BTreeSet<&Record> = new.records.iter().collect();
    let soa_first = |mut records: Vec<Record>| {
        records.sort_by_key(|r| r.rtype != SOA);
        records
    };
    Diff {
        from: soa_serial(old).unwrap_or(0),
        to: soa_serial(new).unwrap_or(0),
        removed: soa_first(before.difference(&after).map(|r| (*r).clone()).collect()),
        added: soa_first(after.difference(&before).map(|r| (*r).clone()).collect()),
    }
}

/// `data` with `diff` applied: every removed record must be there (else the diff is not for
/// this version), then the added ones go in.
pub fn apply(data: &ZoneData, diff: &Diff) -> Result<ZoneData, ZoneError> {
    let mut records: BTreeMap<&Record, usize> = BTreeMap::new();
    for (i, record) in data.records.iter().enumerate() {
        records.entry(record).or_insert(i);
    }
    for record in &diff.removed {
        if records.remove(record).is_none() {
            return Err(ZoneError {
                origin: None,
                kind: ZoneErrorKind::Syntax(format!(
                    "the diff from serial {} removes a record the zone does not hold ({} type {})",
                    diff.from,
                    kudurru_core::policy::name::to_text(&record.owner),
                    record.rtype
                )),
            });
        }
    }
    let mut kept: Vec<usize> = records.into_values().collect();
    kept.sort_unstable();
    let mut out = ZoneData {
        apex: data.apex.clone(),
        ..ZoneData::default()
    };
    for i in kept {
        out.records.push(data.records[i].clone());
        out.origins
            .push(data.origins.get(i).cloned().unwrap_or_default());
    }
    for record in &diff.added {
        if !out.records.contains(record) {
            out.records.push(record.clone());
            out.origins.push(format!("transfer (serial {})", diff.to));
        }
    }
    Ok(out)
}

/// Appends `diff` to `journal`, keeping at most `max` diffs (the oldest go first).
pub fn record_change(journal: &mut Journal, diff: Diff, max: usize) {
    if max == 0 {
        journal.diffs.clear();
        return;
    }
    // A diff that does not continue the journal (a reload after a gap) starts it again.
    if journal
        .diffs
        .last()
        .is_some_and(|last| last.to != diff.from)
    {
        journal.diffs.clear();
    }
    journal.diffs.push(diff);
    if journal.diffs.len() > max {
        let excess = journal.diffs.len() - max;
        journal.diffs.drain(..excess);
    }
}

/// Owner names in `data`, as `kudurru_zone_records{kind="names"}` counts them.
pub fn name_count(data: &ZoneData) -> usize {
    data.records
        .iter()
        .map(|r| &r.owner)
        .collect::<BTreeSet<_>>()
        .len()
}

#[cfg(test)]
mod tests;
