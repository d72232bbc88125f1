//! One compiled authoritative zone: every name and RRset in one arena, found by a hash of the
//! lowercase owner, answered from pre-encoded records.
//!
//! ```text
//! names:  "\x03www\x04corp\x07example\x00" "\x04corp\x07example\x00" ...   (one Vec<u8>)
//! nodes:  [Node { name, flags, sets.. }] in canonical order (RFC 4034 §6.1), ENTs included
//! index:  HashTable<u32>: hash(owner) ─▶ node
//! sets:   [RrSet { rtype, covered, ttl, data.. }] each node's RRsets, by type
//! data:   type class ttl rdlength rdata | type class ttl rdlength rdata | ...  (one Vec<u8>)
//! ```
//!
//! A record is stored as it goes on the wire after its owner, so answering copies it and puts
//! a compression pointer (or the owner name once) in front. Names inside rdata are stored and
//! sent uncompressed (always valid, RFC 3597 §4); the names they carry are remembered so that
//! later owners (a CNAME's target, glue) point at them.
//!
//! Lookups: an exact match costs one hash lookup; a name below a zone cut carries a flag, so
//! a referral is found walking up only when the name is occluded; a missing name walks up to
//! its closest encloser (empty non-terminals are nodes, so the first ancestor found is it).

use std::cmp::Ordering;
use std::hash::BuildHasher;
use std::net::IpAddr;

use hashbrown::HashTable;

use crate::wire::{self, MAX_NAME_LEN, Query, ReplyOptions, class, rcode, rtype};
use crate::zone::data::{Record, ZoneData, ZoneError, ZoneErrorKind};

/// Record types the answering logic knows by number.
mod types {
    pub(super) const MX: u16 = 15;
    pub(super) const SRV: u16 = 33;
    pub(super) const DS: u16 = 43;
    pub(super) const RRSIG: u16 = 46;
    pub(super) const NSEC: u16 = 47;
    pub(super) const NSEC3: u16 = 50;
    pub(super) const ANY: u16 = 255;
}
use types::{ANY, DS, MX, NSEC, NSEC3, RRSIG, SRV};

/// Most CNAMEs followed inside the zone for one answer.
const MAX_CNAME_CHAIN: usize = 8;
/// Names remembered per answer for compression (owners, rdata targets).
const MAX_REMEMBERED_NAMES: usize = 16;
/// Bytes of a stored record before its rdata: type, class, TTL, rdlength.
const RECORD_HEADER: usize = 10;
/// The bytes an OPT without options adds to a response.
const OPT_LEN: usize = 11;

/// Where a zone's data comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneKind {
    /// Records from RecordSet objects and/or an imported zone file; kudurru is the primary.
    Primary,
    /// Records transferred from primaries.
    Secondary,
    /// A locally served zone kudurru answers without configuration (RFC 6761, RFC 6303).
    BuiltIn,
}

const FLAG_CUT: u8 = 1;
const FLAG_OCCLUDED: u8 = 2;
const FLAG_DATA: u8 = 4;

/// One owner name (or empty non-terminal).
#[derive(Debug, Clone, Copy)]
struct Node {
    /// Offset of the lowercase wire name in `Zone::names`.
    name_at: u32,
    /// First RRset in `Zone::sets`.
    sets_at: u32,
    /// Number of RRsets.
    set_count: u16,
    /// Name length (at most 255).
    name_len: u8,
    /// `FLAG_*`.
    flags: u8,
}

/// One RRset: its records encoded back to back in `Zone::data`.
#[derive(Debug, Clone, Copy)]
struct RrSet {
    rtype: u16,
    /// For RRSIG: the type the signatures cover (RFC 4034 §3.1.1); RRSIGs are kept in one set
    /// per covered type, next to the RRset they sign. 0 otherwise.
    covered: u16,
    ttl: u32,
    data_at: u32,
    data_len: u32,
    count: u32,
}

/// A place in a zone's record stream ([`Zone::transfer_next`]): a transfer out keeps one and
/// resumes from it for each message, so no more than one message of the zone is ever copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferCursor {
    /// The node.
    node: u32,
    /// The RRset within the node.
    set: u16,
    /// The byte offset of the next record within the RRset's data.
    offset: u32,
}

/// A compiled zone: immutable, shared by every core through the snapshot.
pub struct Zone {
    apex: Box<[u8]>,
    kind: ZoneKind,
    serial: u32,
    records: usize,
    names_count: usize,
    /// Whether the apex holds an NSEC: negative answers carry NSEC proofs for DO=1.
    signed: bool,
    names: Vec<u8>,
    nodes: Vec<Node>,
    index: HashTable<u32>,
    hasher: foldhash::fast::FixedState,
    sets: Vec<RrSet>,
    data: Vec<u8>,
    /// The SOA as one stored record with the negative-caching TTL (RFC 2308 §3: the lower of
    /// the SOA's TTL and its MINIMUM), for authority sections.
    negative_soa: Vec<u8>,
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zone")
            .field("apex", &DisplayName(&self.apex))
            .field("kind", &self.kind)
            .field("serial", &self.serial)
            .field("records", &self.records)
            .field("names", &self.names_count)
            .finish_non_exhaustive()
    }
}

/// A wire name shown in presentation form (for errors and debug output).
pub(crate) struct DisplayName<'a>(pub(crate) &'a [u8]);

impl std::fmt::Display for DisplayName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut at = 0;
        let name = self.0;
        if name.first().is_none_or(|&len| len == 0) {
            return f.write_str(".");
        }
        while let Some(&len) = name.get(at) {
            if len == 0 {
                break;
            }
            let label = name.get(at + 1..at + 1 + usize::from(len)).unwrap_or(&[]);
            for &b in label {
                match b {
                    b'.' | b'\\' => write!(f, "\\{}", b as char)?,
                    0x21..=0x7e => write!(f, "{}", b as char)?,
                    _ => write!(f, "\\{b:03}")?,
                }
            }
            f.write_str(".")?;
            at += 1 + usize::from(len);
        }
        Ok(())
    }
}

impl std::fmt::Debug for DisplayName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Converts `a.b.c` to lowercase wire form.
pub(crate) fn to_wire(dotted: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(dotted.len() + 2);
    for label in dotted.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
    out
}

/// Whether `name` is a well-formed uncompressed wire name of at most 255 bytes.
pub(crate) fn is_valid_name(name: &[u8]) -> bool {
    if name.len() > MAX_NAME_LEN {
        return false;
    }
    let mut at = 0;
    loop {
        let Some(&len) = name.get(at) else {
            return false;
        };
        if len & 0xc0 != 0 {
            return false;
        }
        at += 1 + usize::from(len);
        if len == 0 {
            return at == name.len();
        }
    }
}

/// The offsets at which the labels of a valid wire name start (the root label included last).
pub(crate) fn label_starts(name: &[u8], starts: &mut [u8; 128]) -> usize {
    let mut at = 0usize;
    let mut count = 0;
    while let Some(&len) = name.get(at) {
        if count == starts.len() {
            break;
        }
        starts[count] = at as u8;
        count += 1;
        if len == 0 {
            break;
        }
        at += 1 + usize::from(len);
    }
    count
}

/// Whether `name` is `apex` or below it (both valid lowercase wire names).
pub(crate) fn is_at_or_below(name: &[u8], apex: &[u8]) -> bool {
    if !name.ends_with(apex) {
        return false;
    }
    let boundary = name.len() - apex.len();
    let mut at = 0;
    while at < boundary {
        at += 1 + usize::from(name[at]);
    }
    at == boundary
}

/// The parent of a valid wire name (`None` for the root).
fn parent(name: &[u8]) -> Option<&[u8]> {
    match name.first() {
        Some(&len) if len != 0 => name.get(1 + usize::from(len)..),
        _ => None,
    }
}

/// The length of the valid wire name at the start of `bytes`, if there is one.
fn name_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let len = *bytes.get(at)?;
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + usize::from(len);
        if at > MAX_NAME_LEN {
            return None;
        }
        if len == 0 {
            return (at <= bytes.len()).then_some(at);
        }
    }
}

/// RFC 4034 §6.1 canonical order of two valid lowercase wire names: label by label from the
/// root, each label as an octet string.
pub(crate) fn canonical_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let mut sa = [0u8; 128];
    let mut sb = [0u8; 128];
    let na = label_starts(a, &mut sa);
    let nb = label_starts(b, &mut sb);
    // Skip the root labels; compare from the top-level label down.
    let (mut ia, mut ib) = (na.saturating_sub(1), nb.saturating_sub(1));
    while ia > 0 && ib > 0 {
        ia -= 1;
        ib -= 1;
        let la = label(a, sa[ia]);
        let lb = label(b, sb[ib]);
        match la.cmp(lb) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    ia.cmp(&ib)
}

fn label(name: &[u8], at: u8) -> &[u8] {
    let at = usize::from(at);
    let len = usize::from(name[at]);
    &name[at + 1..at + 1 + len]
}

/// Appends the canonical sort key of a valid lowercase name, leaving out its last `skip`
/// bytes (the apex every name of a zone shares, or just the root label): labels from the top
/// down, each byte escaped so that 0 ends a label (0 → 1 1, 1 → 1 2), so keys compare bytewise
/// in canonical order.
fn push_sort_key(name: &[u8], skip: usize, key: &mut Vec<u8>) {
    let mut starts = [0u8; 128];
    let n = label_starts(name, &mut starts);
    let end = name.len().saturating_sub(skip.max(1));
    for i in (0..n.saturating_sub(1)).rev() {
        if usize::from(starts[i]) >= end {
            continue;
        }
        for &b in label(name, starts[i]) {
            match b {
                0 => key.extend_from_slice(&[1, 1]),
                1 => key.extend_from_slice(&[1, 2]),
                _ => key.push(b),
            }
        }
        key.push(0);
    }
}

/// Where the name a record of `rtype` points at starts in its rdata (NS, CNAME, PTR, MX, SRV).
fn target_offset(rtype: u16) -> Option<usize> {
    match rtype {
        rtype::NS | rtype::CNAME | rtype::PTR => Some(0),
        MX => Some(2),
        SRV => Some(6),
        _ => None,
    }
}

fn add_count(out: &mut [u8], at: usize, n: u16) {
    let value = u16::from_be_bytes([out[at], out[at + 1]]).wrapping_add(n);
    out[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

fn zone_error(data: &ZoneData, record: Option<usize>, kind: ZoneErrorKind) -> ZoneError {
    ZoneError {
        origin: record
            .and_then(|i| data.origins.get(i))
            .filter(|o| !o.is_empty())
            .cloned(),
        kind,
    }
}

/// An owner and its RRsets while compiling.
struct BuildNode {
    key_at: u32,
    key_len: u32,
    /// Index of a record with this owner (`usize::MAX` for an empty non-terminal).
    record: usize,
    ent_name: Option<Box<[u8]>>,
    sets: std::ops::Range<usize>,
}

impl Zone {
    /// Compiles `data`, checking it: exactly one SOA at the apex, NS at the apex (not for
    /// built-in zones), every owner at or below the apex, no CNAME next to other data (RRSIG
    /// and NSEC excepted, RFC 4035 §2.5), at most one CNAME per name. Duplicate records are
    /// collapsed and the TTLs of an RRset unified to the lowest (RFC 2181 §5.2).
    pub fn compile(data: &ZoneData, kind: ZoneKind) -> Result<Self, ZoneError> {
        let apex: Box<[u8]> = data.apex.to_ascii_lowercase().into();
        if !is_valid_name(&apex) {
            return Err(zone_error(
                data,
                None,
                ZoneErrorKind::Syntax(format!("invalid apex name {}", DisplayName(&apex))),
            ));
        }
        if data.records.len() > u32::MAX as usize / 2 {
            return Err(zone_error(
                data,
                None,
                ZoneErrorKind::TooLarge(format!("{} records", data.records.len())),
            ));
        }
        // Check every record and build its owner's sort key.
        let mut keys: Vec<u8> = Vec::with_capacity(data.records.len() * 24);
        // (first 8 key bytes, key offset, key length, record): the prefix decides most
        // comparisons without touching the key arena.
        let mut order: Vec<(u64, u32, u32, u32)> = Vec::with_capacity(data.records.len());
        for (i, record) in data.records.iter().enumerate() {
            let owner = &record.owner;
            if !is_valid_name(owner) {
                return Err(zone_error(
                    data,
                    Some(i),
                    ZoneErrorKind::Syntax(format!("invalid owner name {:?}", DisplayName(owner))),
                ));
            }
            if owner.iter().any(u8::is_ascii_uppercase) {
                return Err(zone_error(
                    data,
                    Some(i),
                    ZoneErrorKind::Syntax(format!("owner {} is not lowercase", DisplayName(owner))),
                ));
            }
            if !is_at_or_below(owner, &apex) {
                return Err(zone_error(
                    data,
                    Some(i),
                    ZoneErrorKind::OutOfZone(DisplayName(owner).to_string()),
                ));
            }
            if record.rdata.len() > usize::from(u16::MAX) {
                return Err(zone_error(
                    data,
                    Some(i),
                    ZoneErrorKind::TooLarge(format!(
                        "{} bytes of rdata at {}",
                        record.rdata.len(),
                        DisplayName(owner)
                    )),
                ));
            }
            if matches!(record.rtype, rtype::OPT | rtype::TSIG | rtype::TKEY | 0)
                || (rtype::IXFR..=ANY).contains(&record.rtype)
                || (record.rtype == RRSIG && record.rdata.len() < 18)
            {
                return Err(zone_error(
                    data,
                    Some(i),
                    ZoneErrorKind::Syntax(format!(
                        "record type {} at {} cannot be served",
                        record.rtype,
                        DisplayName(owner)
                    )),
                ));
            }
            let key_at = keys.len();
            push_sort_key(owner, apex.len(), &mut keys);
            let mut prefix = [0u8; 8];
            let head = &keys[key_at..keys.len().min(key_at + 8)];
            prefix[..head.len()].copy_from_slice(head);
            order.push((
                u64::from_be_bytes(prefix),
                key_at as u32,
                (keys.len() - key_at) as u32,
                i as u32,
            ));
        }
        let key = |&(_, at, len, _): &(u64, u32, u32, u32)| &keys[at as usize..(at + len) as usize];
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                let (ra, rb) = (&data.records[a.3 as usize], &data.records[b.3 as usize]);
                key(a)
                    .cmp(key(b))
                    .then(ra.rtype.cmp(&rb.rtype))
                    .then_with(|| ra.rdata.cmp(&rb.rdata))
            })
        });

        // Group into owners and RRsets; encode the records.
        let mut build: Vec<BuildNode> = Vec::new();
        let mut sets: Vec<RrSet> = Vec::new();
        let mut store: Vec<u8> = Vec::with_capacity(order.len() * 24);
        let mut at = 0;
        while at < order.len() {
            let owner_key = key(&order[at]);
            let mut end = at + 1;
            while end < order.len() && order[end].0 == order[at].0 && key(&order[end]) == owner_key
            {
                end += 1;
            }
            let first_set = sets.len();
            let mut set_start = at;
            while set_start < end {
                let first = &data.records[order[set_start].3 as usize];
                let covered = |r: &Record| {
                    if r.rtype == RRSIG {
                        u16::from_be_bytes([r.rdata[0], r.rdata[1]])
                    } else {
                        0
                    }
                };
                let cover = covered(first);
                let mut set_end = set_start + 1;
                while set_end < end {
                    let r = &data.records[order[set_end].3 as usize];
                    if r.rtype != first.rtype || covered(r) != cover {
                        break;
                    }
                    set_end += 1;
                }
                let members = &order[set_start..set_end];
                let ttl = members
                    .iter()
                    .map(|m| data.records[m.3 as usize].ttl)
                    .min()
                    .unwrap_or(first.ttl);
                let data_at = store.len();
                let mut count = 0u32;
                let mut previous: Option<&[u8]> = None;
                let mut lowered = false;
                for m in members {
                    let r = &data.records[m.3 as usize];
                    // Sorted by rdata: a duplicate follows its twin (its TTL counted above).
                    if previous.replace(&r.rdata) == Some(&r.rdata[..]) {
                        continue;
                    }
                    let record_at = store.len();
                    store.extend_from_slice(&r.rtype.to_be_bytes());
                    store.extend_from_slice(&class::IN.to_be_bytes());
                    store.extend_from_slice(&ttl.to_be_bytes());
                    store.extend_from_slice(&(r.rdata.len() as u16).to_be_bytes());
                    let rdata_at = store.len();
                    store.extend_from_slice(&r.rdata);
                    if let Some(skip) = target_offset(r.rtype) {
                        // Names in these types' rdata are compared and pointed at, and RFC
                        // 4034 §6.2 signs them lowercased: store them so. Length octets are
                        // below 64, so lowercasing the whole name touches only letters.
                        lowered |= store.get_mut(rdata_at + skip..).is_some_and(|name| {
                            let upper = name.iter().any(u8::is_ascii_uppercase);
                            name.make_ascii_lowercase();
                            upper
                        });
                        // Once a name was lowered, records that differed only in its case are
                        // duplicates.
                        let earlier = Records {
                            block: &store[data_at..record_at],
                        };
                        if lowered && { earlier }.any(|(_, rdata)| rdata == &store[rdata_at..]) {
                            store.truncate(record_at);
                            continue;
                        }
                    }
                    count += 1;
                }
                if store.len() > u32::MAX as usize {
                    return Err(zone_error(
                        data,
                        None,
                        ZoneErrorKind::TooLarge(format!("{} bytes of records", store.len())),
                    ));
                }
                sets.push(RrSet {
                    rtype: first.rtype,
                    covered: cover,
                    ttl,
                    data_at: data_at as u32,
                    data_len: (store.len() - data_at) as u32,
                    count,
                });
                set_start = set_end;
            }
            let node_sets = &sets[first_set..];
            let record = order[at].3 as usize;
            if let Some(cname) = node_sets.iter().find(|s| s.rtype == rtype::CNAME) {
                let others = node_sets
                    .iter()
                    .any(|s| !matches!(s.rtype, rtype::CNAME | RRSIG | NSEC));
                if others || cname.count > 1 {
                    return Err(zone_error(
                        data,
                        Some(record),
                        ZoneErrorKind::CnameAndOtherData(
                            DisplayName(&data.records[record].owner).to_string(),
                        ),
                    ));
                }
            }
            build.push(BuildNode {
                key_at: order[at].1,
                key_len: order[at].2,
                record,
                ent_name: None,
                sets: first_set..sets.len(),
            });
            at = end;
        }
        drop(order);

        // The apex: exactly one SOA, and NS unless built in.
        let apex_node = build
            .iter()
            .find(|n| *data.records[n.record].owner == *apex);
        let apex_sets = apex_node.map_or(&[][..], |n| &sets[n.sets.clone()]);
        let soa_count = apex_sets
            .iter()
            .filter(|s| s.rtype == rtype::SOA)
            .map(|s| s.count as usize)
            .sum::<usize>();
        if soa_count != 1 {
            return Err(zone_error(data, None, ZoneErrorKind::Soa(soa_count)));
        }
        if kind != ZoneKind::BuiltIn && !apex_sets.iter().any(|s| s.rtype == rtype::NS) {
            return Err(zone_error(data, None, ZoneErrorKind::NoApexNs));
        }

        // Empty non-terminals: every ancestor of an owner down to the apex is a node.
        let owner_of = |n: &BuildNode| -> Box<[u8]> {
            n.ent_name
                .clone()
                .unwrap_or_else(|| data.records[n.record].owner.clone())
        };
        let hasher = foldhash::fast::FixedState::with_seed(0x6b75_6475_7272_750a);
        // Only names two or more labels below the apex can have a missing ancestor.
        let deep = build
            .iter()
            .any(|n| parent(&data.records[n.record].owner).is_some_and(|up| up.len() > apex.len()));
        if deep {
            let mut known: hashbrown::HashSet<&[u8], foldhash::fast::FixedState> =
                hashbrown::HashSet::with_capacity_and_hasher(build.len(), hasher.clone());
            for n in &build {
                known.insert(&data.records[n.record].owner[..]);
            }
            let mut ents: Vec<Box<[u8]>> = Vec::new();
            for n in &build {
                let mut name: &[u8] = &data.records[n.record].owner;
                while name.len() > apex.len() {
                    let Some(up) = parent(name) else { break };
                    if !known.insert(up) {
                        break;
                    }
                    ents.push(up.into());
                    name = up;
                }
            }
            drop(known);
            if !ents.is_empty() {
                for ent in ents {
                    let key_at = keys.len();
                    push_sort_key(&ent, apex.len(), &mut keys);
                    build.push(BuildNode {
                        key_at: key_at as u32,
                        key_len: (keys.len() - key_at) as u32,
                        record: usize::MAX,
                        ent_name: Some(ent),
                        sets: 0..0,
                    });
                }
                build.sort_unstable_by(|a, b| {
                    keys[a.key_at as usize..(a.key_at + a.key_len) as usize]
                        .cmp(&keys[b.key_at as usize..(b.key_at + b.key_len) as usize])
                });
            }
        }
        drop(keys);

        // Nodes in canonical order; cut and occluded flags in one pass (a cut's descendants
        // follow it in canonical order).
        let mut names: Vec<u8> = Vec::new();
        let mut nodes: Vec<Node> = Vec::with_capacity(build.len());
        let mut final_sets: Vec<RrSet> = Vec::with_capacity(sets.len());
        let mut cut: Option<(usize, usize)> = None;
        let mut records = 0usize;
        let mut owners = 0usize;
        for n in &build {
            let owner = owner_of(n);
            let name_at = names.len();
            names.extend_from_slice(&owner);
            let node_sets = &sets[n.sets.clone()];
            let mut flags = 0;
            if !node_sets.is_empty() {
                flags |= FLAG_DATA;
                owners += 1;
                records += node_sets.iter().map(|s| s.count as usize).sum::<usize>();
            }
            if let Some((at, len)) = cut {
                if is_at_or_below(&owner, &names[at..at + len]) {
                    flags |= FLAG_OCCLUDED;
                } else {
                    cut = None;
                }
            }
            if flags & FLAG_OCCLUDED == 0
                && *owner != *apex
                && node_sets.iter().any(|s| s.rtype == rtype::NS)
            {
                flags |= FLAG_CUT;
                cut = Some((name_at, owner.len()));
            }
            let sets_at = final_sets.len();
            final_sets.extend_from_slice(node_sets);
            if names.len() > u32::MAX as usize || node_sets.len() > usize::from(u16::MAX) {
                return Err(zone_error(
                    data,
                    None,
                    ZoneErrorKind::TooLarge("names or RRsets per name".into()),
                ));
            }
            nodes.push(Node {
                name_at: name_at as u32,
                sets_at: sets_at as u32,
                set_count: node_sets.len() as u16,
                name_len: owner.len() as u8,
                flags,
            });
        }
        drop(build);
        drop(sets);

        let mut zone = Self {
            apex,
            kind,
            serial: 0,
            records,
            names_count: owners,
            signed: false,
            names,
            nodes,
            index: HashTable::with_capacity(0),
            hasher,
            sets: final_sets,
            data: store,
            negative_soa: Vec::new(),
        };
        let mut index = HashTable::with_capacity(zone.nodes.len());
        for i in 0..zone.nodes.len() {
            let hash = zone.hasher.hash_one(zone.node_name(i as u32));
            index.insert_unique(hash, i as u32, |&j| zone.hasher.hash_one(zone.node_name(j)));
        }
        zone.index = index;
        let apex_index = zone.find(&zone.apex.clone()).unwrap_or(0);
        zone.signed = zone.set(apex_index, NSEC).is_some();
        let soa = zone.set(apex_index, rtype::SOA).and_then(|s| {
            zone.set_records(s)
                .next()
                .map(|(_, rdata)| (s.ttl, rdata.to_vec()))
        });
        if let Some((ttl, rdata)) = soa {
            let rdata = &rdata[..];
            let fixed = name_len(rdata)
                .and_then(|m| name_len(&rdata[m..]).map(|r| m + r))
                .filter(|&at| rdata.len() == at + 20);
            let Some(at) = fixed else {
                return Err(zone_error(
                    data,
                    None,
                    ZoneErrorKind::Syntax("malformed SOA rdata".into()),
                ));
            };
            zone.serial =
                u32::from_be_bytes([rdata[at], rdata[at + 1], rdata[at + 2], rdata[at + 3]]);
            let minimum = u32::from_be_bytes([
                rdata[at + 16],
                rdata[at + 17],
                rdata[at + 18],
                rdata[at + 19],
            ]);
            let mut negative = Vec::with_capacity(RECORD_HEADER + rdata.len());
            negative.extend_from_slice(&rtype::SOA.to_be_bytes());
            negative.extend_from_slice(&class::IN.to_be_bytes());
            negative.extend_from_slice(&ttl.min(minimum).to_be_bytes());
            negative.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            negative.extend_from_slice(rdata);
            zone.negative_soa = negative;
        }
        Ok(zone)
    }

    /// The apex, lowercase wire form.
    pub fn apex(&self) -> &[u8] {
        &self.apex
    }

    /// Where the data comes from.
    pub fn kind(&self) -> ZoneKind {
        self.kind
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Resource records served (`kudurru_zone_records{kind="records"}`), after duplicates
    /// were collapsed.
    pub fn record_count(&self) -> usize {
        self.records
    }

    /// Owner names (`kudurru_zone_records{kind="names"}`), empty non-terminals left out.
    pub fn name_count(&self) -> usize {
        self.names_count
    }

    /// Bytes the compiled zone holds on the heap (arenas, nodes, index), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.names.capacity()
            + self.data.capacity()
            + self.nodes.capacity() * size_of::<Node>()
            + self.sets.capacity() * size_of::<RrSet>()
            + self.index.capacity() * (size_of::<u32>() + 1)
    }

    /// The SOA record (with its own TTL, not the negative one).
    pub fn soa(&self) -> Record {
        self.rrset(&self.apex, rtype::SOA)
            .and_then(|mut set| set.next())
            .map(|(ttl, rdata)| Record {
                owner: self.apex.clone(),
                rtype: rtype::SOA,
                ttl,
                rdata: rdata.into(),
            })
            .unwrap_or_else(|| Record {
                // Unreachable: compile refuses a zone without one SOA at the apex.
                owner: self.apex.clone(),
                rtype: rtype::SOA,
                ttl: 0,
                rdata: Box::default(),
            })
    }

    /// The records of `owner`'s (lowercase wire) RRset of type `rtype`, as (TTL, rdata), or
    /// `None` when the name holds no such RRset. For RRSIG, every signature at the name (all
    /// covered types). UPDATE prerequisites (RFC 2136 §2.4) and IXFR diffs read zones with it.
    pub fn rrset<'z>(
        &'z self,
        owner: &[u8],
        rtype: u16,
    ) -> Option<impl Iterator<Item = (u32, &'z [u8])> + use<'z>> {
        let node = self.find(owner)?;
        let sets = self.node_sets(node);
        if !sets.iter().any(|s| s.rtype == rtype) {
            return None;
        }
        Some(
            sets.iter()
                .filter(move |s| s.rtype == rtype)
                .flat_map(|s| self.set_records(s)),
        )
    }

    /// Whether `owner` (lowercase wire) holds any record (RFC 2136 §2.4.4 "name is in use").
    /// Empty non-terminals do not count.
    pub fn name_exists(&self, owner: &[u8]) -> bool {
        self.find(owner)
            .is_some_and(|n| self.nodes[n as usize].flags & FLAG_DATA != 0)
    }

    /// Every record, SOA first, then in canonical order (RFC 4034 §6.1) of owners, by type
    /// within an owner: for the records API and AXFR.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        let soa = std::iter::once(self.soa());
        let rest = (0..self.nodes.len() as u32).flat_map(move |n| {
            let owner: Box<[u8]> = self.node_name(n).into();
            let at_apex = *owner == *self.apex;
            self.node_sets(n)
                .iter()
                .filter(move |s| !(at_apex && s.rtype == rtype::SOA))
                .flat_map(move |s| {
                    let owner = owner.clone();
                    self.set_records(s).map(move |(ttl, rdata)| Record {
                        owner: owner.clone(),
                        rtype: s.rtype,
                        ttl,
                        rdata: rdata.into(),
                    })
                })
        });
        soa.chain(rest)
    }

    /// The record at `cursor` and after it, for transfers out: every record but the apex SOA
    /// (which a transfer sends first and last), in the order of [`Zone::records`], as its
    /// lowercase wire owner and its stored wire form after the owner (type, class, TTL,
    /// rdlength, rdata). Moves the cursor past it; `None` at the end. Nothing is allocated: a
    /// transfer copies these bytes straight into its messages.
    pub fn transfer_next<'z>(
        &'z self,
        cursor: &mut TransferCursor,
    ) -> Option<(&'z [u8], &'z [u8])> {
        loop {
            let node = *self.nodes.get(cursor.node as usize)?;
            let Some(set) = self.node_sets(cursor.node).get(usize::from(cursor.set)) else {
                *cursor = TransferCursor {
                    node: cursor.node + 1,
                    ..TransferCursor::default()
                };
                continue;
            };
            let owner = self.node_name(cursor.node);
            let apex_soa = set.rtype == rtype::SOA
                && usize::from(node.name_len) == self.apex.len()
                && *owner == *self.apex;
            if apex_soa || cursor.offset >= set.data_len {
                cursor.set += 1;
                cursor.offset = 0;
                continue;
            }
            let block = &self.data
                [(set.data_at + cursor.offset) as usize..(set.data_at + set.data_len) as usize];
            let rdlength = block.get(RECORD_HEADER - 2..RECORD_HEADER)?;
            let len = RECORD_HEADER + usize::from(u16::from_be_bytes([rdlength[0], rdlength[1]]));
            let record = block.get(..len)?;
            cursor.offset += len as u32;
            return Some((owner, record));
        }
    }

    /// The zone as data again (SOA first, canonical order, no origins): what an UPDATE or an
    /// IXFR changes and compiles anew.
    pub fn to_data(&self) -> ZoneData {
        ZoneData {
            apex: self.apex.clone(),
            records: self.records().collect(),
            origins: Vec::new(),
        }
    }

    /// The zone's delegations with in-zone glue: each cut (a non-apex name with NS) and the
    /// A/AAAA addresses of its name servers found in this zone. The zone set forwards
    /// recursive queries below a cut to these (as Unbound's stub-zone).
    pub fn delegations(&self) -> impl Iterator<Item = (&[u8], Vec<IpAddr>)> + '_ {
        (0..self.nodes.len() as u32)
            .filter(|&n| self.nodes[n as usize].flags & FLAG_CUT != 0)
            .filter_map(|n| {
                let ns = self.set(n, rtype::NS)?;
                let mut addrs = Vec::new();
                for (_, target) in self.set_records(ns) {
                    let Some(target) = self.find(target) else {
                        continue;
                    };
                    for rt in [rtype::A, rtype::AAAA] {
                        let Some(set) = self.set(target, rt) else {
                            continue;
                        };
                        for (_, rdata) in self.set_records(set) {
                            let addr = match <[u8; 4]>::try_from(rdata) {
                                Ok(v4) => IpAddr::from(v4),
                                Err(_) => match <[u8; 16]>::try_from(rdata) {
                                    Ok(v6) => IpAddr::from(v6),
                                    Err(_) => continue,
                                },
                            };
                            if !addrs.contains(&addr) {
                                addrs.push(addr);
                            }
                        }
                    }
                }
                (!addrs.is_empty()).then(|| (self.node_name(n), addrs))
            })
    }

    fn node_name(&self, node: u32) -> &[u8] {
        let n = &self.nodes[node as usize];
        &self.names[n.name_at as usize..n.name_at as usize + usize::from(n.name_len)]
    }

    fn node_sets(&self, node: u32) -> &[RrSet] {
        let n = &self.nodes[node as usize];
        &self.sets[n.sets_at as usize..n.sets_at as usize + usize::from(n.set_count)]
    }

    fn flags(&self, node: u32) -> u8 {
        self.nodes[node as usize].flags
    }

    /// The node of a lowercase wire name.
    #[inline]
    fn find(&self, name: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(name);
        self.index
            .find(hash, |&n| self.node_name(n) == name)
            .copied()
    }

    fn set(&self, node: u32, rtype: u16) -> Option<&RrSet> {
        self.node_sets(node).iter().find(|s| s.rtype == rtype)
    }

    fn signatures(&self, node: u32, covered: u16) -> Option<&RrSet> {
        self.node_sets(node)
            .iter()
            .find(|s| s.rtype == RRSIG && s.covered == covered)
    }

    /// The records of a set as (TTL, rdata).
    fn set_records(&self, set: &RrSet) -> Records<'_> {
        let block = &self.data[set.data_at as usize..(set.data_at + set.data_len) as usize];
        Records { block }
    }

    /// The deepest existing ancestor-or-self of a node's name that is a cut.
    fn cut_above(&self, name: &[u8]) -> Option<u32> {
        let mut name = name;
        loop {
            if let Some(n) = self.find(name)
                && self.flags(n) & FLAG_CUT != 0
            {
                return Some(n);
            }
            if name.len() <= self.apex.len() {
                return None;
            }
            name = parent(name)?;
        }
    }

    /// The node holding the NSEC that proves `name` absent (or, for an existing node, the one
    /// at it): the closest canonical predecessor with an NSEC.
    fn covering_nsec(&self, name: &[u8]) -> Option<u32> {
        if let Some(n) = self.find(name)
            && self.set(n, NSEC).is_some()
        {
            return Some(n);
        }
        let at = self.nodes.partition_point(|n| {
            let node_name =
                &self.names[n.name_at as usize..n.name_at as usize + usize::from(n.name_len)];
            canonical_cmp(node_name, name) == Ordering::Less
        });
        (0..at as u32).rev().find(|&n| self.set(n, NSEC).is_some())
    }

    /// Writes the authoritative answer to `query`, a name at or below this zone's apex, into
    /// `out`: answer, NXDOMAIN or NODATA with the SOA, wildcard, CNAME chain, referral.
    /// `udp_limit` is the client's payload limit on UDP (`None` on streams): additional
    /// records are dropped first, then the answer is sent empty with TC=1.
    pub fn answer(
        &self,
        query: &Query<'_>,
        udp_limit: Option<usize>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) {
        let qname = query.key().qname();
        let mut w = Writer {
            zone: self,
            qname,
            out,
            dnssec: query.edns().is_some_and(|e| e.dnssec_ok),
            remembered: [(&[][..], 0); MAX_REMEMBERED_NAMES],
            remembered_len: 0,
            additional_at: None,
            proven: [u32::MAX; 2],
        };
        wire::start_response(query, rcode::NOERROR, true, w.out);
        let question_end = w.out.len();
        if is_at_or_below(qname, &self.apex) {
            w.resolve(query.qtype());
        } else {
            // The zone set only asks for names in the zone; answer anything else REFUSED.
            w.out[3] = (w.out[3] & 0xf0) | rcode::REFUSED;
            w.out[2] &= !0x04;
        }
        // On a stream, the message must fit its 16-bit length with the OPT's keepalive option.
        let limit = udp_limit.unwrap_or(usize::from(u16::MAX) - 6);
        let opt = if query.edns().is_some() { OPT_LEN } else { 0 };
        if w.out.len() + opt > limit {
            if let Some(at) = w.additional_at {
                w.out.truncate(at);
                w.out[wire::ARCOUNT_AT..wire::ARCOUNT_AT + 2].fill(0);
            }
            if w.out.len() + opt > limit {
                wire::truncate_to_question(w.out, question_end);
            }
        }
        wire::finish_response(query, out, options);
    }
}

/// The records of one stored RRset.
struct Records<'z> {
    block: &'z [u8],
}

impl<'z> Iterator for Records<'z> {
    type Item = (u32, &'z [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let head = self.block.get(..RECORD_HEADER)?;
        let ttl = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let len = usize::from(u16::from_be_bytes([head[8], head[9]]));
        let rdata = self.block.get(RECORD_HEADER..RECORD_HEADER + len)?;
        self.block = &self.block[RECORD_HEADER + len..];
        Some((ttl, rdata))
    }
}

/// Which section a set goes to.
#[derive(Clone, Copy)]
enum Section {
    Answer,
    Authority,
    Additional,
}

/// One answer under construction.
struct Writer<'z, 'o> {
    zone: &'z Zone,
    /// The lowercase qname; its copy in the message is at offset 12.
    qname: &'z [u8],
    out: &'o mut Vec<u8>,
    dnssec: bool,
    /// Names written into the message and where, for compression pointers.
    remembered: [(&'z [u8], u16); MAX_REMEMBERED_NAMES],
    remembered_len: usize,
    /// Where the additional section starts, once it has records.
    additional_at: Option<usize>,
    /// NSEC nodes already in the authority section.
    proven: [u32; 2],
}

impl<'z> Writer<'z, '_> {
    /// The offset of `name` in the message, if it can be pointed at: a suffix of the qname,
    /// or a name written before.
    fn position(&self, name: &[u8]) -> Option<u16> {
        if is_at_or_below(self.qname, name) {
            return Some((wire::HEADER_LEN + self.qname.len() - name.len()) as u16);
        }
        self.remembered[..self.remembered_len]
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, at)| at)
    }

    fn remember(&mut self, name: &'z [u8], at: usize) {
        if at < 0x4000 && self.remembered_len < MAX_REMEMBERED_NAMES {
            self.remembered[self.remembered_len] = (name, at as u16);
            self.remembered_len += 1;
        }
    }

    /// Appends `set` with owner `owner` to `section`; owners point at the qname or a name
    /// written before, or are written once and pointed at after.
    fn push(&mut self, owner: &'z [u8], set: &RrSet, section: Section) {
        let block = &self.zone.data[set.data_at as usize..(set.data_at + set.data_len) as usize];
        self.push_block(owner, set.rtype, block, set.count, section);
    }

    fn push_block(
        &mut self,
        owner: &'z [u8],
        rtype: u16,
        block: &'z [u8],
        count: u32,
        section: Section,
    ) {
        if let Section::Additional = section {
            self.additional_at.get_or_insert(self.out.len());
        }
        let mut pointer = self.position(owner);
        let mut rest = block;
        let mut written = 0u32;
        while rest.len() >= RECORD_HEADER {
            let len = usize::from(u16::from_be_bytes([rest[8], rest[9]]));
            let Some(record) = rest.get(..RECORD_HEADER + len) else {
                break;
            };
            match pointer {
                Some(at) => self.out.extend_from_slice(&(0xc000 | at).to_be_bytes()),
                None => {
                    let at = self.out.len();
                    self.out.extend_from_slice(owner);
                    if at < 0x4000 {
                        pointer = Some(at as u16);
                        self.remember(owner, at);
                    }
                }
            }
            let rdata_at = self.out.len() + RECORD_HEADER;
            self.out.extend_from_slice(record);
            if let Some(skip) = target_offset(rtype) {
                let rdata = &record[RECORD_HEADER..];
                if let Some(name) = rdata.get(skip..).filter(|n| name_len(n) == Some(n.len())) {
                    self.remember(name, rdata_at + skip);
                }
            }
            rest = &rest[RECORD_HEADER + len..];
            written += 1;
        }
        debug_assert_eq!(written, count);
        let at = match section {
            Section::Answer => wire::ANCOUNT_AT,
            Section::Authority => wire::NSCOUNT_AT,
            Section::Additional => wire::ARCOUNT_AT,
        };
        add_count(self.out, at, written as u16);
    }

    /// `set` and, with DO, the signatures covering it at the same node.
    fn push_signed(&mut self, owner: &'z [u8], node: u32, set: &RrSet, section: Section) {
        self.push(owner, set, section);
        if self.dnssec
            && let Some(sigs) = self.zone.signatures(node, set.rtype)
        {
            self.push(owner, sigs, section);
        }
    }

    fn set_rcode(&mut self, value: u8) {
        self.out[3] = (self.out[3] & 0xf0) | value;
    }

    /// Answers the qname: exact match, wildcard, CNAME chain, referral or negative answer.
    fn resolve(&mut self, qtype: u16) {
        let zone = self.zone;
        let mut name: &'z [u8] = self.qname;
        let mut visited = [u32::MAX; MAX_CNAME_CHAIN + 1];
        for step in 0..=MAX_CNAME_CHAIN {
            if step > 0 && !is_at_or_below(name, &zone.apex) {
                // A chain leaving the zone stops here: the resolver follows it.
                return;
            }
            let (node, wildcard) = match zone.find(name) {
                Some(n) => {
                    let flags = zone.flags(n);
                    if flags & FLAG_OCCLUDED != 0 || (flags & FLAG_CUT != 0 && qtype != DS) {
                        // After a CNAME, the referral goes in authority and the answer
                        // stays authoritative (RFC 1034 §4.3.2 step 3b).
                        self.referral(name, step == 0);
                        return;
                    }
                    (n, false)
                }
                None => {
                    let encloser = self.closest_encloser(name);
                    let flags = zone.flags(encloser);
                    if flags & (FLAG_CUT | FLAG_OCCLUDED) != 0 {
                        // After a CNAME, the referral goes in authority and the answer
                        // stays authoritative (RFC 1034 §4.3.2 step 3b).
                        self.referral(name, step == 0);
                        return;
                    }
                    let mut buf = [0u8; MAX_NAME_LEN + 2];
                    let encloser_name = zone.node_name(encloser);
                    let wild = encloser_name.len() + 2 <= MAX_NAME_LEN && {
                        buf[..2].copy_from_slice(b"\x01*");
                        buf[2..2 + encloser_name.len()].copy_from_slice(encloser_name);
                        true
                    };
                    let found = if wild {
                        zone.find(&buf[..2 + encloser_name.len()])
                    } else {
                        None
                    };
                    match found {
                        Some(w) => (w, true),
                        None => {
                            self.set_rcode(rcode::NXDOMAIN);
                            self.negative(None, name, Some(encloser));
                            return;
                        }
                    }
                }
            };
            if visited.contains(&node) && !wildcard {
                // A CNAME loop: stop with what is written.
                return;
            }
            visited[step] = node;
            let sets = zone.node_sets(node);
            let wanted = if qtype == ANY {
                // RFC 8482 §4.1: one RRset, the name's first by type number (RRSIGs only with
                // the RRset they cover).
                sets.iter().find(|s| s.rtype != RRSIG)
            } else {
                sets.iter().find(|s| s.rtype == qtype)
            };
            if qtype == RRSIG && wanted.is_some() {
                // Every signature at the name, whatever it covers.
                for set in sets.iter().filter(|s| s.rtype == RRSIG) {
                    self.push(name, set, Section::Answer);
                }
                return;
            }
            if let Some(set) = wanted {
                self.push_signed(name, node, set, Section::Answer);
                if wildcard && self.dnssec {
                    // RFC 4035 §3.1.3.3: prove the qname itself does not exist.
                    self.prove_absent(name);
                }
                self.additional_for(name, set);
                return;
            }
            if let Some(cname) = sets.iter().find(|s| s.rtype == rtype::CNAME) {
                self.push_signed(name, node, cname, Section::Answer);
                if wildcard && self.dnssec {
                    self.prove_absent(name);
                }
                let Some((_, target)) = zone.set_records(cname).next() else {
                    return;
                };
                // The target as written: point later owners at it.
                match self.remembered[..self.remembered_len]
                    .iter()
                    .rev()
                    .find(|(n, _)| *n == target)
                {
                    Some(&(n, _)) => name = n,
                    None => name = target,
                }
                continue;
            }
            self.negative(Some(node), name, None);
            if wildcard && self.dnssec {
                self.prove_absent(name);
            }
            return;
        }
    }

    /// The deepest existing ancestor of `name` (at least the apex).
    fn closest_encloser(&self, name: &[u8]) -> u32 {
        let zone = self.zone;
        let mut up = name;
        while let Some(p) = parent(up) {
            if p.len() < zone.apex.len() {
                break;
            }
            if let Some(n) = zone.find(p) {
                return n;
            }
            up = p;
        }
        // The apex always exists; this is not reached for a name in the zone.
        zone.find(&zone.apex).unwrap_or(0)
    }

    /// NXDOMAIN (`node` None) or NODATA: the SOA with the negative TTL in authority, and with
    /// DO and a signed zone, the SOA's signatures and the NSEC proofs.
    fn negative(&mut self, node: Option<u32>, name: &'z [u8], encloser: Option<u32>) {
        let zone = self.zone;
        let apex = &zone.apex[..];
        self.push_block(apex, rtype::SOA, &zone.negative_soa, 1, Section::Authority);
        if !(self.dnssec && zone.signed) {
            return;
        }
        if let Some(apex_node) = zone.find(apex)
            && let Some(sigs) = zone.signatures(apex_node, rtype::SOA)
        {
            self.push(apex, sigs, Section::Authority);
        }
        match node {
            Some(n) => self.prove_nsec(n),
            None => {
                self.prove_absent(name);
                if let Some(encloser) = encloser {
                    // The NSEC that denies the wildcard at the closest encloser.
                    let mut buf = [0u8; MAX_NAME_LEN + 2];
                    let ce = zone.node_name(encloser);
                    if ce.len() + 2 <= MAX_NAME_LEN {
                        buf[..2].copy_from_slice(b"\x01*");
                        buf[2..2 + ce.len()].copy_from_slice(ce);
                        if let Some(n) = zone.covering_nsec(&buf[..2 + ce.len()]) {
                            self.prove_nsec(n);
                        }
                    }
                }
            }
        }
    }

    /// The NSEC covering `name` (absent from the zone) with its signatures.
    fn prove_absent(&mut self, name: &[u8]) {
        if let Some(n) = self.zone.covering_nsec(name) {
            self.prove_nsec(n);
        }
    }

    /// The NSEC at `node` and its signatures, once per answer.
    fn prove_nsec(&mut self, node: u32) {
        if self.proven.contains(&node) {
            return;
        }
        let Some(slot) = self.proven.iter().position(|&p| p == u32::MAX) else {
            return;
        };
        self.proven[slot] = node;
        let zone = self.zone;
        if let Some(nsec) = zone.set(node, NSEC) {
            let owner = zone.node_name(node);
            self.push_signed(owner, node, nsec, Section::Authority);
        } else if let Some(nsec3) = zone.set(node, NSEC3) {
            let owner = zone.node_name(node);
            self.push_signed(owner, node, nsec3, Section::Authority);
        }
    }

    /// A referral from the cut at or above `name`: AA=0 (unless a CNAME led here), the NS
    /// RRset in authority (with DS or
    /// the NSEC denying it for DO), in-zone glue in additional.
    fn referral(&mut self, name: &'z [u8], clear_aa: bool) {
        let zone = self.zone;
        let Some(cut) = zone.cut_above(name) else {
            return;
        };
        if clear_aa {
            self.out[2] &= !0x04;
        }
        let owner = zone.node_name(cut);
        let Some(ns) = zone.set(cut, rtype::NS) else {
            return;
        };
        self.push(owner, ns, Section::Authority);
        if self.dnssec {
            if let Some(ds) = zone.set(cut, DS) {
                self.push_signed(owner, cut, ds, Section::Authority);
            } else if zone.signed {
                self.prove_nsec(cut);
            }
        }
        self.additional_for(owner, ns);
    }

    /// A and AAAA of the in-zone names `set` (NS, MX, SRV) points at, in additional: glue for
    /// a referral, a courtesy for answers.
    fn additional_for(&mut self, _owner: &[u8], set: &RrSet) {
        let skip = match set.rtype {
            rtype::NS | MX | SRV => target_offset(set.rtype).unwrap_or(0),
            _ => return,
        };
        let zone = self.zone;
        for (_, rdata) in zone.set_records(set) {
            let Some(target) = rdata.get(skip..) else {
                continue;
            };
            if !is_at_or_below(target, &zone.apex) {
                continue;
            }
            let Some(node) = zone.find(target) else {
                continue;
            };
            for rt in [rtype::A, rtype::AAAA] {
                if let Some(addrs) = zone.set(node, rt) {
                    self.push(zone.node_name(node), addrs, Section::Additional);
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use domain::base::iana::Rtype;
    use domain::base::rdata::ComposeRecordData;
    use domain::base::{Message, ToName};
    use domain::zonefile::inplace::{Entry, Zonefile};

    use super::*;

    /// Parses a zone in presentation form (with `$ORIGIN`) into zone data, origins `line N`.
    pub(crate) fn parse(apex: &str, text: &str) -> ZoneData {
        let mut file = Zonefile::new();
        file.set_default_class(domain::base::iana::Class::IN);
        file.extend_from_slice(text.as_bytes());
        let mut data = ZoneData {
            apex: to_wire(apex).into(),
            ..ZoneData::default()
        };
        while let Some(entry) = file.next_entry().expect("test zone parses") {
            let Entry::Record(record) = entry else {
                continue;
            };
            let mut owner = Vec::new();
            record.owner().compose(&mut owner).unwrap();
            owner.make_ascii_lowercase();
            let mut rdata = Vec::new();
            record.data().compose_rdata(&mut rdata).unwrap();
            data.origins
                .push(format!("record {}", data.records.len() + 1));
            data.records.push(Record {
                owner: owner.into(),
                rtype: record.rtype().to_int(),
                ttl: record.ttl().as_secs(),
                rdata: rdata.into(),
            });
        }
        data
    }

    pub(crate) fn query(name: &str, qtype: u16, edns: Option<(u16, bool)>, rd: bool) -> Vec<u8> {
        let mut m = vec![0, 7, if rd { 0x01 } else { 0 }, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        // Keep the client's case: the answer must echo it.
        for label in name.split('.').filter(|l| !l.is_empty()) {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&class::IN.to_be_bytes());
        if let Some((payload, dnssec_ok)) = edns {
            m[11] = 1;
            m.extend_from_slice(&[0, 0, 41]);
            m.extend_from_slice(&payload.to_be_bytes());
            m.extend_from_slice(&[0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
        }
        m
    }

    const CORP: &str = r#"$ORIGIN corp.example.
$TTL 300
@ 3600 IN SOA ns1 hostmaster 42 3600 600 604800 60
@ NS ns1
@ NS ns2.other.example.
ns1 A 192.0.2.53
www A 192.0.2.1
www 200 A 192.0.2.2
www A 192.0.2.2
www AAAA 2001:db8::1
mail MX 10 MX1
mx1 A 192.0.2.25
mail2 MX 10 mx2
*.wild TXT "wild"
*.wild A 192.0.2.99
alias CNAME www
chain1 CNAME chain2
chain2 CNAME alias
gone CNAME nothere
out CNAME www.elsewhere.example.
loop1 CNAME loop2
loop2 CNAME loop1
tosub CNAME host.sub
a.b.c A 192.0.2.3
sub NS ns.sub
sub NS ns.other.example.
ns.sub A 192.0.2.54
*.sub A 192.0.2.55
sub NS NS.SUB
"#;

    fn corp() -> Zone {
        let mut text = CORP.to_owned();
        for i in 0..40 {
            text.push_str(&format!("mx2 A 198.51.100.{i}\n"));
            text.push_str(&format!("big TXT \"{i:0>40}\"\n"));
        }
        Zone::compile(&parse("corp.example", &text), ZoneKind::Primary).unwrap()
    }

    /// The answer of `zone` to `name`/`qtype` over UDP with a 1232 EDNS payload (or none).
    pub(crate) fn ask(zone: &Zone, name: &str, qtype: u16, edns: Option<(u16, bool)>) -> Vec<u8> {
        let m = query(name, qtype, edns, true);
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        let limit = q.udp_limit(1232);
        zone.answer(&q, Some(limit), &ReplyOptions::udp(1232), &mut out);
        out
    }

    pub(crate) struct Parsed {
        pub(crate) msg: Message<Vec<u8>>,
    }

    impl Parsed {
        pub(crate) fn new(out: Vec<u8>) -> Self {
            let msg = Message::from_octets(out).expect("the answer parses");
            // Every record parses too.
            for section in [msg.answer(), msg.authority(), msg.additional()] {
                for rr in section.unwrap() {
                    rr.unwrap();
                }
            }
            Self { msg }
        }

        pub(crate) fn rcode(&self) -> u8 {
            self.msg.header().rcode().to_int()
        }

        pub(crate) fn aa(&self) -> bool {
            self.msg.header().aa()
        }

        /// (owner, type, TTL) of each record in a section: 0 answer, 1 authority, 2 additional.
        pub(crate) fn section(&self, which: usize) -> Vec<(String, Rtype, u32)> {
            let section = match which {
                0 => self.msg.answer().unwrap(),
                1 => self.msg.authority().unwrap(),
                _ => self.msg.additional().unwrap(),
            };
            section
                .map(|rr| {
                    let rr = rr.unwrap();
                    (rr.owner().to_string(), rr.rtype(), rr.ttl().as_secs())
                })
                .filter(|(_, t, _)| *t != Rtype::OPT)
                .collect()
        }

        pub(crate) fn types(&self, which: usize) -> Vec<Rtype> {
            self.section(which).into_iter().map(|(_, t, _)| t).collect()
        }
    }

    fn answer(zone: &Zone, name: &str, qtype: u16) -> Parsed {
        Parsed::new(ask(zone, name, qtype, Some((1232, false))))
    }

    #[test]
    fn exact_match_is_authoritative_with_the_qname_case_and_unified_ttls() {
        let zone = corp();
        let p = answer(&zone, "WwW.Corp.Example", rtype::A);
        assert_eq!(p.rcode(), rcode::NOERROR);
        assert!(p.aa());
        assert_eq!(
            p.section(0),
            vec![
                ("WwW.Corp.Example".into(), Rtype::A, 200),
                ("WwW.Corp.Example".into(), Rtype::A, 200),
            ],
            "duplicates collapsed, the RRset's TTL the lowest (RFC 2181 §5.2)"
        );
        assert!(p.section(1).is_empty());
    }

    #[test]
    fn rfc2308_nodata_and_nxdomain_carry_the_soa_with_the_negative_ttl() {
        let zone = corp();
        let p = answer(&zone, "www.corp.example", MX);
        assert_eq!(p.rcode(), rcode::NOERROR);
        assert!(p.section(0).is_empty());
        assert_eq!(
            p.section(1),
            vec![("corp.example".into(), Rtype::SOA, 60)],
            "min(SOA TTL 3600, MINIMUM 60)"
        );
        let p = answer(&zone, "nope.corp.example", rtype::A);
        assert_eq!(p.rcode(), rcode::NXDOMAIN);
        assert!(p.aa());
        assert_eq!(p.types(1), vec![Rtype::SOA]);
        // Empty non-terminals exist: NODATA, not NXDOMAIN.
        for ent in ["b.c.corp.example", "c.corp.example", "wild.corp.example"] {
            let p = answer(&zone, ent, rtype::A);
            assert_eq!(p.rcode(), rcode::NOERROR, "{ent}");
            assert!(p.section(0).is_empty());
            assert_eq!(p.types(1), vec![Rtype::SOA]);
        }
        let soa = answer(&zone, "corp.example", rtype::SOA);
        assert_eq!(
            soa.section(0),
            vec![("corp.example".into(), Rtype::SOA, 3600)]
        );
    }

    #[test]
    fn rfc4592_wildcards_synthesise_at_the_closest_encloser() {
        let zone = corp();
        let p = answer(&zone, "host.wild.corp.example", rtype::TXT);
        assert_eq!(
            p.section(0),
            vec![("host.wild.corp.example".into(), Rtype::TXT, 300)]
        );
        assert!(p.aa());
        let p = answer(&zone, "a.b.wild.corp.example", rtype::A);
        assert_eq!(p.types(0), vec![Rtype::A], "below the closest encloser too");
        let p = answer(&zone, "host.wild.corp.example", MX);
        assert_eq!(p.rcode(), rcode::NOERROR, "wildcard NODATA");
        assert_eq!(p.types(1), vec![Rtype::SOA]);
        let p = answer(&zone, "*.wild.corp.example", rtype::A);
        assert_eq!(
            p.section(0),
            vec![("*.wild.corp.example".into(), Rtype::A, 300)]
        );
        // A name that exists blocks the wildcard (RFC 4592 §2.2.1): c exists as an ENT.
        let p = answer(&zone, "x.corp.example", rtype::A);
        assert_eq!(p.rcode(), rcode::NXDOMAIN);
    }

    #[test]
    fn cname_chains_are_followed_inside_the_zone() {
        let zone = corp();
        let p = answer(&zone, "chain1.corp.example", rtype::A);
        assert_eq!(p.rcode(), rcode::NOERROR);
        assert_eq!(
            p.section(0),
            vec![
                ("chain1.corp.example".into(), Rtype::CNAME, 300),
                ("chain2.corp.example".into(), Rtype::CNAME, 300),
                ("alias.corp.example".into(), Rtype::CNAME, 300),
                ("www.corp.example".into(), Rtype::A, 200),
                ("www.corp.example".into(), Rtype::A, 200),
            ]
        );
        let p = answer(&zone, "alias.corp.example", rtype::CNAME);
        assert_eq!(p.types(0), vec![Rtype::CNAME], "CNAME asked: not followed");
        // RFC 6604: the rcode is the last name's.
        let p = answer(&zone, "gone.corp.example", rtype::A);
        assert_eq!(p.rcode(), rcode::NXDOMAIN);
        assert_eq!(p.types(0), vec![Rtype::CNAME]);
        assert_eq!(p.types(1), vec![Rtype::SOA]);
        // A chain leaving the zone stops at its edge.
        let p = answer(&zone, "out.corp.example", rtype::A);
        assert_eq!(
            (p.rcode(), p.types(0)),
            (rcode::NOERROR, vec![Rtype::CNAME])
        );
        assert!(p.section(1).is_empty());
        // A loop ends.
        let p = answer(&zone, "loop1.corp.example", rtype::A);
        assert_eq!(p.types(0), vec![Rtype::CNAME, Rtype::CNAME]);
        // A chain into a delegation ends with the referral in authority, still AA.
        let p = answer(&zone, "tosub.corp.example", rtype::A);
        assert!(p.aa());
        assert_eq!(p.types(0), vec![Rtype::CNAME]);
        assert_eq!(p.types(1), vec![Rtype::NS, Rtype::NS]);
        assert_eq!(p.types(2), vec![Rtype::A]);
    }

    #[test]
    fn a_name_at_or_below_a_cut_gets_a_referral_with_glue() {
        let zone = corp();
        for name in [
            "host.sub.corp.example",
            "sub.corp.example",
            "ns.sub.corp.example",
        ] {
            let p = answer(&zone, name, rtype::A);
            assert_eq!(p.rcode(), rcode::NOERROR, "{name}");
            assert!(!p.aa(), "a referral is not authoritative");
            assert!(p.section(0).is_empty());
            assert_eq!(
                p.section(1),
                vec![
                    ("sub.corp.example".into(), Rtype::NS, 300),
                    ("sub.corp.example".into(), Rtype::NS, 300),
                ]
            );
            assert_eq!(
                p.section(2),
                vec![("ns.sub.corp.example".into(), Rtype::A, 300)]
            );
        }
        // DS at the cut is the parent's: authoritative NODATA here.
        let p = answer(&zone, "sub.corp.example", DS);
        assert!(p.aa());
        assert_eq!(p.types(1), vec![Rtype::SOA]);
        // No wildcard synthesis below a cut: *.sub is occluded.
        let p = answer(&zone, "other.sub.corp.example", rtype::A);
        assert!(!p.aa());
    }

    #[test]
    fn rfc8482_any_is_answered_with_one_rrset() {
        let zone = corp();
        let p = answer(&zone, "www.corp.example", ANY);
        assert_eq!(p.types(0), vec![Rtype::A, Rtype::A]);
    }

    #[test]
    fn mx_targets_in_the_zone_come_in_additional() {
        let zone = corp();
        let p = answer(&zone, "mail.corp.example", MX);
        assert_eq!(p.types(0), vec![Rtype::MX]);
        assert_eq!(
            p.section(2),
            vec![("mx1.corp.example".into(), Rtype::A, 300)]
        );
    }

    #[test]
    fn udp_limit_drops_additional_first_then_truncates() {
        let zone = corp();
        let p = Parsed::new(ask(&zone, "mail2.corp.example", MX, None));
        assert_eq!(p.types(0), vec![Rtype::MX]);
        assert!(p.section(2).is_empty(), "40 addresses do not fit 512 bytes");
        assert!(!p.msg.header().tc());
        let p = Parsed::new(ask(&zone, "mail2.corp.example", MX, Some((1232, false))));
        assert_eq!(p.section(2).len(), 40);
        let out = ask(&zone, "big.corp.example", rtype::TXT, None);
        let p = Parsed::new(out);
        assert!(p.msg.header().tc());
        assert!(p.section(0).is_empty());
        // Streams have no UDP limit.
        let m = query("big.corp.example", rtype::TXT, None, true);
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        zone.answer(&q, None, &ReplyOptions::udp(1232), &mut out);
        assert_eq!(Parsed::new(out).section(0).len(), 40);
    }

    #[test]
    fn counts_records_and_data_round_trip() {
        let zone = corp();
        assert_eq!(zone.serial(), 42);
        let records: Vec<Record> = zone.records().collect();
        assert_eq!(records[0].rtype, rtype::SOA);
        assert_eq!(records.len(), zone.record_count());
        assert_eq!(records.iter().filter(|r| r.rtype == rtype::SOA).count(), 1);
        // 2 NS, 1 SOA, ns1, 2 www A, www AAAA, mail, mx1, mail2, 2 wild, 7 CNAMEs, a.b.c, 2 sub
        // NS, ns.sub, *.sub, 40 mx2, 40 big.
        assert_eq!(
            zone.record_count(),
            3 + 1 + 3 + 3 + 1 + 2 + 7 + 1 + 2 + 2 + 80
        );
        assert_eq!(zone.name_count(), 19 + 2);
        let again = Zone::compile(&zone.to_data(), ZoneKind::Primary).unwrap();
        assert!(again.records().eq(zone.records()));
        assert!(zone.name_exists(&to_wire("www.corp.example")));
        assert!(
            !zone.name_exists(&to_wire("c.corp.example")),
            "an ENT holds nothing"
        );
        let www: Vec<_> = zone
            .rrset(&to_wire("www.corp.example"), rtype::A)
            .unwrap()
            .collect();
        assert_eq!(
            www,
            vec![(200, &[192, 0, 2, 1][..]), (200, &[192, 0, 2, 2][..])]
        );
        assert!(zone.rrset(&to_wire("www.corp.example"), MX).is_none());
        assert_eq!(zone.soa().ttl, 3600);
        let delegations: Vec<_> = zone.delegations().collect();
        assert_eq!(
            delegations,
            vec![(
                &to_wire("sub.corp.example")[..],
                vec!["192.0.2.54".parse().unwrap()]
            )]
        );
    }

    #[test]
    fn compile_refuses_broken_zones_naming_the_record() {
        let base = "$ORIGIN corp.example.\n@ 300 SOA ns1 h 1 2 3 4 5\n@ 300 NS ns1\n";
        let err = |extra: &str, kind: ZoneKind| {
            Zone::compile(&parse("corp.example", &format!("{base}{extra}")), kind).unwrap_err()
        };
        let e = err("www.other.example. 300 A 192.0.2.1\n", ZoneKind::Primary);
        assert_eq!(
            e.kind,
            ZoneErrorKind::OutOfZone("www.other.example.".into())
        );
        assert_eq!(e.origin.as_deref(), Some("record 3"));
        assert_eq!(
            e.to_string(),
            "record 3: out-of-zone data: www.other.example. is not in the zone"
        );
        let e = err("www 300 CNAME a\nwww 300 A 192.0.2.1\n", ZoneKind::Primary);
        assert_eq!(
            e.kind,
            ZoneErrorKind::CnameAndOtherData("www.corp.example.".into())
        );
        let e = err("www 300 CNAME a\nwww 300 CNAME b\n", ZoneKind::Primary);
        assert!(matches!(e.kind, ZoneErrorKind::CnameAndOtherData(_)));
        let e = err("@ 300 SOA ns1 h 2 2 3 4 5\n", ZoneKind::Primary);
        assert_eq!(e.kind, ZoneErrorKind::Soa(2));
        // CNAME with RRSIG and NSEC beside it is fine.
        Zone::compile(
            &parse(
                "corp.example",
                &format!(
                    "{base}www 300 CNAME a\nwww 300 NSEC x A\nwww 300 RRSIG CNAME 13 3 300 \
                     20300101000000 20200101000000 1 corp.example. AAAA\n"
                ),
            ),
            ZoneKind::Primary,
        )
        .unwrap();
        let no_soa = parse("corp.example", "$ORIGIN corp.example.\n@ 300 NS ns1\n");
        assert_eq!(
            Zone::compile(&no_soa, ZoneKind::Primary).unwrap_err().kind,
            ZoneErrorKind::Soa(0)
        );
        let no_ns = parse(
            "corp.example",
            "$ORIGIN corp.example.\n@ 300 SOA ns1 h 1 2 3 4 5\n",
        );
        assert_eq!(
            Zone::compile(&no_ns, ZoneKind::Primary).unwrap_err().kind,
            ZoneErrorKind::NoApexNs
        );
        Zone::compile(&no_ns, ZoneKind::BuiltIn).expect("built-in zones need no NS");
    }

    const SIGNED: &str = r#"$ORIGIN signed.example.
$TTL 300
@ SOA ns h 7 3600 600 604800 300
@ NS ns
@ NSEC a.signed.example. SOA NS RRSIG NSEC
@ RRSIG SOA 13 2 300 20300101000000 20200101000000 1 signed.example. AAAA
@ RRSIG NS 13 2 300 20300101000000 20200101000000 1 signed.example. AAAA
@ RRSIG NSEC 13 2 300 20300101000000 20200101000000 1 signed.example. AAAA
a A 192.0.2.1
a RRSIG A 13 3 300 20300101000000 20200101000000 1 signed.example. AAAA
a NSEC ns.signed.example. A RRSIG NSEC
a RRSIG NSEC 13 3 300 20300101000000 20200101000000 1 signed.example. AAAA
ns A 192.0.2.53
ns RRSIG A 13 3 300 20300101000000 20200101000000 1 signed.example. AAAA
ns NSEC signed.example. A RRSIG NSEC
ns RRSIG NSEC 13 3 300 20300101000000 20200101000000 1 signed.example. AAAA
"#;

    #[test]
    fn rfc4035_signatures_and_nsec_proofs_come_with_do_only() {
        let zone = Zone::compile(&parse("signed.example", SIGNED), ZoneKind::Secondary).unwrap();
        let plain = Parsed::new(ask(
            &zone,
            "a.signed.example",
            rtype::A,
            Some((1232, false)),
        ));
        assert_eq!(plain.types(0), vec![Rtype::A]);
        let signed = Parsed::new(ask(&zone, "a.signed.example", rtype::A, Some((1232, true))));
        assert_eq!(
            signed.types(0),
            vec![Rtype::A, Rtype::RRSIG],
            "only the RRSIG covering A"
        );
        // NODATA: the SOA and the NSEC at the name, each signed.
        let p = Parsed::new(ask(&zone, "a.signed.example", MX, Some((1232, true))));
        assert_eq!(
            p.section(1),
            vec![
                ("signed.example".into(), Rtype::SOA, 300),
                ("signed.example".into(), Rtype::RRSIG, 300),
                ("a.signed.example".into(), Rtype::NSEC, 300),
                ("a.signed.example".into(), Rtype::RRSIG, 300),
            ]
        );
        // NXDOMAIN: the NSEC covering the name (a → ns covers b) and the one denying the
        // wildcard (apex → a covers *.signed.example).
        let p = Parsed::new(ask(&zone, "b.signed.example", rtype::A, Some((1232, true))));
        assert_eq!(p.rcode(), rcode::NXDOMAIN);
        assert_eq!(
            p.section(1),
            vec![
                ("signed.example".into(), Rtype::SOA, 300),
                ("signed.example".into(), Rtype::RRSIG, 300),
                ("a.signed.example".into(), Rtype::NSEC, 300),
                ("a.signed.example".into(), Rtype::RRSIG, 300),
                ("signed.example".into(), Rtype::NSEC, 300),
                ("signed.example".into(), Rtype::RRSIG, 300),
            ]
        );
        let p = Parsed::new(ask(
            &zone,
            "b.signed.example",
            rtype::A,
            Some((1232, false)),
        ));
        assert_eq!(p.types(1), vec![Rtype::SOA]);
        // RRSIG and NSEC records are asked for like any type; RRSIG gets every signature.
        let p = Parsed::new(ask(&zone, "a.signed.example", NSEC, Some((1232, false))));
        assert_eq!(p.types(0), vec![Rtype::NSEC]);
        let p = Parsed::new(ask(&zone, "a.signed.example", RRSIG, Some((1232, false))));
        assert_eq!(p.types(0), vec![Rtype::RRSIG, Rtype::RRSIG]);
    }

    #[test]
    fn canonical_order_is_rfc4034_6_1() {
        let names = [
            "example",
            "a.example",
            "yljkjljk.a.example",
            "Z.a.example",
            "zABC.a.EXAMPLE",
            "z.example",
            "\\001.z.example",
            "*.z.example",
            "\\200.z.example",
        ];
        let wire: Vec<Vec<u8>> = names
            .iter()
            .map(|n| {
                let name: domain::base::Name<Vec<u8>> = n.parse().unwrap();
                name.as_slice().to_ascii_lowercase()
            })
            .collect();
        for pair in wire.windows(2) {
            assert_eq!(
                canonical_cmp(&pair[0], &pair[1]),
                Ordering::Less,
                "{pair:?}"
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            push_sort_key(&pair[0], 1, &mut a);
            push_sort_key(&pair[1], 1, &mut b);
            assert!(a < b, "{pair:?}");
        }
    }
}

#[cfg(test)]
mod scale {
    use std::time::Instant;

    use super::*;

    /// The bench kit's shape at 1M records: `hostN A`, every tenth name with an AAAA too.
    /// Run with `cargo test -p kudurru-core --release zone::tree::scale -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "a measurement: a million records, in release mode"]
    fn a_million_records_compile_well_under_a_second() {
        let apex = to_wire("bench.example");
        let mut soa = to_wire("ns1.bench.example");
        soa.extend_from_slice(&to_wire("hostmaster.bench.example"));
        for v in [1u32, 3600, 600, 604_800, 300] {
            soa.extend_from_slice(&v.to_be_bytes());
        }
        let mut records = vec![
            Record {
                owner: apex.clone().into(),
                rtype: rtype::SOA,
                ttl: 3600,
                rdata: soa.into(),
            },
            Record {
                owner: apex.clone().into(),
                rtype: rtype::NS,
                ttl: 3600,
                rdata: to_wire("ns1.bench.example").into(),
            },
        ];
        let mut i = 0u32;
        while records.len() < 1_000_000 {
            let owner: Box<[u8]> = to_wire(&format!("host{i}.bench.example")).into();
            records.push(Record {
                owner: owner.clone(),
                rtype: rtype::A,
                ttl: 300,
                rdata: i.to_be_bytes().into(),
            });
            if i.is_multiple_of(10) {
                records.push(Record {
                    owner,
                    rtype: rtype::AAAA,
                    ttl: 300,
                    rdata: [0; 16].into(),
                });
            }
            i += 1;
        }
        let data = ZoneData {
            apex: apex.into(),
            records,
            origins: Vec::new(),
        };
        let started = Instant::now();
        let zone = Zone::compile(&data, ZoneKind::Primary).unwrap();
        let took = started.elapsed();
        println!(
            "{} records, {} names: compiled in {took:?}, {} heap bytes ({} per record)",
            zone.record_count(),
            zone.name_count(),
            zone.heap_bytes(),
            zone.heap_bytes() / zone.record_count()
        );
        // Answer speed, single thread, one name after another.
        let queries: Vec<Vec<u8>> = (0..100_000u32)
            .map(|n| {
                tests::query(
                    &format!("host{}.bench.example", n * 7 % i),
                    rtype::A,
                    None,
                    false,
                )
            })
            .collect();
        let mut out = Vec::with_capacity(512);
        let started = Instant::now();
        for m in &queries {
            let q = Query::parse(m).unwrap();
            zone.answer(&q, Some(512), &ReplyOptions::udp(1232), &mut out);
        }
        println!(
            "parse+answer: {:?} per query",
            started.elapsed() / queries.len() as u32
        );
        assert!(took.as_secs_f64() < 3.0);
    }
}
