//! Dynamic updates (RFC 2136): an UPDATE message parsed into a typed [`Update`], its
//! prerequisites checked against a zone (§3.2) and its changes turned into the records to
//! remove and to add (§3.4), sans-IO. The control thread checks who may update, verifies TSIG,
//! and applies the result through the zone manager (control/src/zones/update.rs).
//!
//! ```text
//! message ─▶ Update::parse ─▶ Update ─▶ check(zone)  prerequisites: YXDOMAIN, YXRRSET,
//!   (FORMERR, NOTZONE, NOTAUTH)            │           NXDOMAIN, NXRRSET (§3.2)
//!                                          └─▶ apply(zone) ─▶ Changes { removed, added } (§3.4)
//! ```
//!
//! The message is read with `domain`'s parser (names decompressed, rdata parsed by type and
//! composed back uncompressed). Changes are applied in order on a copy of the names they touch,
//! so a later change sees an earlier one (RFC 2136 §3.4.2), and the result is the difference
//! between that copy and the zone: a change that ends where it started yields nothing.

use std::collections::BTreeMap;

use domain::base::iana::{Class, Opcode, Rtype};
use domain::base::name::{ParsedName, ToName};
use domain::base::rdata::ComposeRecordData;
use domain::base::{Message, ParsedRecord};
use domain::rdata::AllRecordData;

use crate::zone::data::Record;

/// RFC 2136 rcodes (RFC 6895's registry) the update path answers with.
pub mod rcode {
    /// The update was applied (or had nothing to do).
    pub const NOERROR: u8 = 0;
    /// The message is malformed.
    pub const FORMERR: u8 = 1;
    /// The server failed to apply the update.
    pub const SERVFAIL: u8 = 2;
    /// A "name is in use" prerequisite failed.
    pub const NXDOMAIN: u8 = 3;
    /// Not accepted from this client or key.
    pub const REFUSED: u8 = 5;
    /// A "name is not in use" prerequisite failed.
    pub const YXDOMAIN: u8 = 6;
    /// An "RRset does not exist" prerequisite failed.
    pub const YXRRSET: u8 = 7;
    /// An "RRset exists" prerequisite failed.
    pub const NXRRSET: u8 = 8;
    /// The zone is not one this server is primary for.
    pub const NOTAUTH: u8 = 9;
    /// A name in the prerequisite or update section is outside the zone.
    pub const NOTZONE: u8 = 10;
}

/// Why a message is not a well-formed update (FORMERR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// Shorter than a header, or a section does not parse.
    #[error("the message does not parse")]
    Parse,
    /// The opcode is not UPDATE.
    #[error("the opcode is not UPDATE")]
    NotUpdate,
    /// The QR bit is set.
    #[error("the message is a response")]
    Response,
    /// The zone section does not hold exactly one entry (§3.1.1).
    #[error("the zone section must hold exactly one zone")]
    ZoneCount,
    /// The zone section's type is not SOA (§3.1.1).
    #[error("the zone section's type must be SOA")]
    ZoneType,
    /// A prerequisite's TTL is not zero (§3.2.1).
    #[error("a prerequisite's TTL must be zero")]
    PrerequisiteTtl,
    /// A prerequisite of class ANY or NONE carries rdata (§3.2.1).
    #[error("a prerequisite of class ANY or NONE must have no rdata")]
    PrerequisiteRdata,
    /// A prerequisite of a class other than the zone's, ANY or NONE (§3.2).
    #[error("a prerequisite's class must be the zone's, ANY or NONE")]
    PrerequisiteClass,
    /// A prerequisite of a meta type where it is not allowed (§2.4).
    #[error("a prerequisite of the zone's class must not be a meta type")]
    PrerequisiteType,
    /// An update of class ANY with a TTL or rdata (§3.4.1.3).
    #[error("an update of class ANY must have TTL zero and no rdata")]
    DeleteRrset,
    /// An update of class NONE with a TTL (§3.4.1.3).
    #[error("an update of class NONE must have TTL zero")]
    DeleteRecordTtl,
    /// An update of a meta type (AXFR, IXFR, MAILA, MAILB, ANY where not a delete) (§3.4.1.3).
    #[error("an update must not carry a meta type")]
    UpdateType,
    /// An update of a class other than the zone's, ANY or NONE (§3.4.1.3).
    #[error("an update's class must be the zone's, ANY or NONE")]
    UpdateClass,
    /// A record's rdata does not parse for its type.
    #[error("a record's rdata does not parse for its type")]
    Rdata,
    /// A record to add or compare with no rdata.
    #[error("a record to add or compare has no rdata")]
    EmptyRdata,
}

/// Why an update was not applied, with the rcode it answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// FORMERR.
    #[error("malformed update: {0}")]
    Malformed(Malformed),
    /// NOTAUTH: the zone section's class is not IN (the only class served).
    #[error("not authoritative for class {0}")]
    Class(u16),
    /// NOTZONE: a name outside the zone.
    #[error("{0} is not in the zone")]
    NotZone(String),
    /// NXDOMAIN: "name is in use" failed.
    #[error("prerequisite failed: {0} is not in use")]
    NameNotInUse(String),
    /// YXDOMAIN: "name is not in use" failed.
    #[error("prerequisite failed: {0} is in use")]
    NameInUse(String),
    /// NXRRSET: "RRset exists" (either form) failed.
    #[error("prerequisite failed: no such RRset {0}/{1}")]
    RrsetMissing(String, u16),
    /// YXRRSET: "RRset does not exist" failed.
    #[error("prerequisite failed: RRset {0}/{1} exists")]
    RrsetPresent(String, u16),
}

impl UpdateError {
    /// The rcode this error answers (RFC 2136 §2.2).
    pub fn rcode(&self) -> u8 {
        match self {
            Self::Malformed(_) => rcode::FORMERR,
            Self::Class(_) => rcode::NOTAUTH,
            Self::NotZone(_) => rcode::NOTZONE,
            Self::NameNotInUse(_) => rcode::NXDOMAIN,
            Self::NameInUse(_) => rcode::YXDOMAIN,
            Self::RrsetMissing(..) => rcode::NXRRSET,
            Self::RrsetPresent(..) => rcode::YXRRSET,
        }
    }
}

impl From<Malformed> for UpdateError {
    fn from(reason: Malformed) -> Self {
        Self::Malformed(reason)
    }
}

/// A prerequisite (RFC 2136 §2.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prerequisite {
    /// §2.4.1: an RRset of this type exists at the owner (class ANY).
    RrsetExists {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
        /// Type.
        rtype: u16,
    },
    /// §2.4.2: the RRset at the owner holds exactly these rdata (class of the zone; the
    /// records of one owner and type are gathered into one).
    RrsetEquals {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
        /// Type.
        rtype: u16,
        /// The rdata, uncompressed wire form.
        rdata: Vec<Box<[u8]>>,
    },
    /// §2.4.3: no RRset of this type at the owner (class NONE).
    RrsetAbsent {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
        /// Type.
        rtype: u16,
    },
    /// §2.4.4: the owner has at least one record (class ANY, type ANY).
    NameInUse {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
    },
    /// §2.4.5: the owner has no record (class NONE, type ANY).
    NameNotInUse {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
    },
}

/// A change (RFC 2136 §2.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// §2.5.1: add a record to an RRset (class of the zone).
    Add(Record),
    /// §2.5.2: delete the RRset of this type at the owner (class ANY).
    DeleteRrset {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
        /// Type.
        rtype: u16,
    },
    /// §2.5.3: delete every RRset at the owner (class ANY, type ANY).
    DeleteName {
        /// Owner, lowercase wire form.
        owner: Box<[u8]>,
    },
    /// §2.5.4: delete one record (class NONE; the TTL is ignored).
    DeleteRecord(Record),
}

/// A parsed UPDATE message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The message ID.
    pub id: u16,
    /// The zone's apex, lowercase wire form.
    pub apex: Box<[u8]>,
    /// The prerequisites, in message order (value-dependent ones gathered by owner and type).
    pub prerequisites: Vec<Prerequisite>,
    /// The changes, in message order.
    pub changes: Vec<Change>,
}

/// The records an update removes and adds (SOA never among them: the zone manager bumps the
/// serial itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Records the zone held that go.
    pub removed: Vec<Record>,
    /// Records the zone did not hold that come.
    pub added: Vec<Record>,
}

impl Changes {
    /// Whether the update changes nothing (the serial stays).
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
}

/// What prerequisites and changes need of a zone: the records at one owner.
pub trait ZoneView {
    /// Every record at `owner` (lowercase wire form), any type; empty when the name has none.
    fn records_at(&self, owner: &[u8]) -> Vec<Record>;
}

/// A zone's records by owner: the [`ZoneView`] of a zone's data or of a compiled zone's
/// records (built once per update, which is rare next to queries).
#[derive(Debug, Default)]
pub struct RecordIndex {
    by_owner: BTreeMap<Box<[u8]>, Vec<Record>>,
}

impl FromIterator<Record> for RecordIndex {
    fn from_iter<I: IntoIterator<Item = Record>>(records: I) -> Self {
        let mut by_owner: BTreeMap<Box<[u8]>, Vec<Record>> = BTreeMap::new();
        for record in records {
            by_owner
                .entry(record.owner.clone())
                .or_default()
                .push(record);
        }
        Self { by_owner }
    }
}

impl RecordIndex {
    /// The records of `records` whose owner `update` names (in a prerequisite or a change):
    /// all that checking and applying it reads, found in one pass without copying the rest
    /// of the zone.
    pub fn touched_by(update: &Update, records: &[Record]) -> Self {
        let owners: std::collections::BTreeSet<&[u8]> = update
            .prerequisites
            .iter()
            .map(|p| match p {
                Prerequisite::RrsetExists { owner, .. }
                | Prerequisite::RrsetEquals { owner, .. }
                | Prerequisite::RrsetAbsent { owner, .. }
                | Prerequisite::NameInUse { owner }
                | Prerequisite::NameNotInUse { owner } => &**owner,
            })
            .chain(update.changes.iter().map(|c| match c {
                Change::Add(record) | Change::DeleteRecord(record) => &*record.owner,
                Change::DeleteRrset { owner, .. } | Change::DeleteName { owner } => &**owner,
            }))
            .collect();
        records
            .iter()
            .filter(|r| owners.contains(&*r.owner))
            .cloned()
            .collect()
    }
}

impl ZoneView for RecordIndex {
    fn records_at(&self, owner: &[u8]) -> Vec<Record> {
        self.by_owner.get(owner).cloned().unwrap_or_default()
    }
}

const SOA: u16 = 6;
const NS: u16 = 2;
const CNAME: u16 = 5;
const ANY: u16 = 255;

/// Meta types no record of the zone's class may carry (RFC 6895 §3.1: 128-255 are
/// meta-types and QTYPEs; OPT and TSIG/TKEY are meta types too).
fn is_meta(rtype: u16) -> bool {
    matches!(rtype, 41 | 249 | 250) || (128..=255).contains(&rtype)
}

impl Update {
    /// Parses an UPDATE message: header, zone section (exactly one SOA-type entry), the
    /// prerequisite section (§2.4) and the update section (§2.5) (the additional section,
    /// where TSIG travels, is the caller's). Every malformed message gives FORMERR with its
    /// reason; a name outside the zone NOTZONE; a zone class other than IN NOTAUTH.
    pub fn parse(bytes: &[u8]) -> Result<Self, UpdateError> {
        let message = Message::from_octets(bytes).map_err(|_| Malformed::Parse)?;
        let header = message.header();
        if header.opcode() != Opcode::UPDATE {
            return Err(Malformed::NotUpdate.into());
        }
        if header.qr() {
            return Err(Malformed::Response.into());
        }
        let counts = message.header_counts();
        if counts.qdcount() != 1 {
            return Err(Malformed::ZoneCount.into());
        }
        let zone = message
            .zone()
            .next()
            .ok_or(Malformed::ZoneCount)?
            .map_err(|_| Malformed::Parse)?;
        if zone.qtype() != Rtype::SOA {
            return Err(Malformed::ZoneType.into());
        }
        if zone.qclass() != Class::IN {
            return Err(UpdateError::Class(zone.qclass().to_int()));
        }
        let apex = lowercase_wire(zone.qname());
        let prerequisites_section = message.prerequisite().map_err(|_| Malformed::Parse)?;
        let mut prerequisites = Vec::new();
        for record in prerequisites_section {
            let record = record.map_err(|_| Malformed::Parse)?;
            prerequisite(&apex, &record, &mut prerequisites)?;
        }
        let update_section = message.update().map_err(|_| Malformed::Parse)?;
        let mut changes = Vec::new();
        for record in update_section {
            let record = record.map_err(|_| Malformed::Parse)?;
            changes.push(change(&apex, &record)?);
        }
        Ok(Self {
            id: header.id(),
            apex,
            prerequisites,
            changes,
        })
    }

    /// Checks the prerequisites against `zone`, in order (RFC 2136 §3.2.5); the first that
    /// fails gives its rcode.
    pub fn check(&self, zone: &impl ZoneView) -> Result<(), UpdateError> {
        for prerequisite in &self.prerequisites {
            match prerequisite {
                Prerequisite::RrsetExists { owner, rtype } => {
                    if !zone.records_at(owner).iter().any(|r| r.rtype == *rtype) {
                        return Err(UpdateError::RrsetMissing(name_text(owner), *rtype));
                    }
                }
                Prerequisite::RrsetAbsent { owner, rtype } => {
                    if zone.records_at(owner).iter().any(|r| r.rtype == *rtype) {
                        return Err(UpdateError::RrsetPresent(name_text(owner), *rtype));
                    }
                }
                Prerequisite::NameInUse { owner } => {
                    if zone.records_at(owner).is_empty() {
                        return Err(UpdateError::NameNotInUse(name_text(owner)));
                    }
                }
                Prerequisite::NameNotInUse { owner } => {
                    if !zone.records_at(owner).is_empty() {
                        return Err(UpdateError::NameInUse(name_text(owner)));
                    }
                }
                Prerequisite::RrsetEquals {
                    owner,
                    rtype,
                    rdata,
                } => {
                    let mut held: Vec<&[u8]> = Vec::new();
                    let records = zone.records_at(owner);
                    held.extend(
                        records
                            .iter()
                            .filter(|r| r.rtype == *rtype)
                            .map(|r| &*r.rdata),
                    );
                    let mut wanted: Vec<&[u8]> = rdata.iter().map(|r| &**r).collect();
                    held.sort_unstable();
                    held.dedup();
                    wanted.sort_unstable();
                    wanted.dedup();
                    if held != wanted {
                        return Err(UpdateError::RrsetMissing(name_text(owner), *rtype));
                    }
                }
            }
        }
        Ok(())
    }

    /// The records the changes remove from and add to `zone` (RFC 2136 §3.4.2), applied in
    /// order; the prerequisites are [`Self::check`]'s. Changes the RFC says to ignore are:
    /// a CNAME added where other data is, other data added where a CNAME is, any SOA change
    /// (the serial is the zone manager's), deleting the apex's SOA or NS RRset, deleting the
    /// apex's last NS record. An added record joins its RRset with the RRset's TTL set to
    /// its own (RFC 2181 §5.2: one TTL per RRset); an added CNAME replaces the one there.
    pub fn apply(&self, zone: &impl ZoneView) -> Changes {
        // The touched names, as the zone has them and as the changes leave them.
        let mut before: BTreeMap<Box<[u8]>, Vec<Record>> = BTreeMap::new();
        let mut after: BTreeMap<Box<[u8]>, Vec<Record>> = BTreeMap::new();
        for change in &self.changes {
            let owner = match change {
                Change::Add(record) | Change::DeleteRecord(record) => &record.owner,
                Change::DeleteRrset { owner, .. } | Change::DeleteName { owner } => owner,
            };
            let records = after.entry(owner.clone()).or_insert_with(|| {
                let held = zone.records_at(owner);
                before.insert(owner.clone(), held.clone());
                held
            });
            let at_apex = **owner == *self.apex;
            match change {
                Change::Add(record) => add(records, record),
                Change::DeleteRrset { rtype, .. } => {
                    if !(at_apex && matches!(*rtype, SOA | NS)) {
                        records.retain(|r| r.rtype != *rtype);
                    }
                }
                Change::DeleteName { .. } => {
                    records.retain(|r| at_apex && matches!(r.rtype, SOA | NS));
                }
                Change::DeleteRecord(record) => {
                    if record.rtype == SOA {
                        continue;
                    }
                    if at_apex
                        && record.rtype == NS
                        && records.iter().filter(|r| r.rtype == NS).count() <= 1
                    {
                        continue;
                    }
                    records.retain(|r| !(r.rtype == record.rtype && r.rdata == record.rdata));
                }
            }
        }
        let mut changes = Changes::default();
        for (owner, now) in after {
            let was = before.remove(&owner).unwrap_or_default();
            changes
                .removed
                .extend(was.iter().filter(|r| !now.contains(r)).cloned());
            changes
                .added
                .extend(now.iter().filter(|r| !was.contains(r)).cloned());
        }
        changes
    }
}

/// Adds `record` to the records of its owner (§3.4.2.2), unless the RFC says to ignore it.
fn add(records: &mut Vec<Record>, record: &Record) {
    if record.rtype == SOA {
        return;
    }
    let has_cname = records.iter().any(|r| r.rtype == CNAME);
    let has_other = records
        .iter()
        .any(|r| r.rtype != CNAME && !is_dnssec(r.rtype));
    if record.rtype == CNAME && has_other || record.rtype != CNAME && has_cname {
        return;
    }
    if record.rtype == CNAME {
        records.retain(|r| r.rtype != CNAME);
    }
    for held in records.iter_mut().filter(|r| r.rtype == record.rtype) {
        held.ttl = record.ttl;
    }
    if !records
        .iter()
        .any(|r| r.rtype == record.rtype && r.rdata == record.rdata)
    {
        records.push(record.clone());
    }
}

/// Types allowed beside a CNAME (RFC 4035 §2.5: RRSIG and NSEC).
fn is_dnssec(rtype: u16) -> bool {
    matches!(rtype, 46 | 47)
}

/// Reads one prerequisite (§3.2.1..§3.2.3) into `out`.
fn prerequisite(
    apex: &[u8],
    record: &ParsedRecord<'_, &[u8]>,
    out: &mut Vec<Prerequisite>,
) -> Result<(), UpdateError> {
    if record.ttl().as_secs() != 0 {
        return Err(Malformed::PrerequisiteTtl.into());
    }
    let owner = in_zone(apex, record)?;
    let rtype = record.rtype().to_int();
    let class = record.class();
    if class == Class::ANY || class == Class::NONE {
        if record.rdlen() != 0 {
            return Err(Malformed::PrerequisiteRdata.into());
        }
        out.push(match (class == Class::ANY, rtype == ANY) {
            (true, true) => Prerequisite::NameInUse { owner },
            (true, false) => Prerequisite::RrsetExists { owner, rtype },
            (false, true) => Prerequisite::NameNotInUse { owner },
            (false, false) => Prerequisite::RrsetAbsent { owner, rtype },
        });
        return Ok(());
    }
    if class != Class::IN {
        return Err(Malformed::PrerequisiteClass.into());
    }
    if is_meta(rtype) {
        return Err(Malformed::PrerequisiteType.into());
    }
    let data = rdata(record)?;
    // The records of one owner and type are one RRset to compare (§3.2.3).
    for prerequisite in out.iter_mut() {
        if let Prerequisite::RrsetEquals {
            owner: o,
            rtype: t,
            rdata,
        } = prerequisite
            && *o == owner
            && *t == rtype
        {
            rdata.push(data);
            return Ok(());
        }
    }
    out.push(Prerequisite::RrsetEquals {
        owner,
        rtype,
        rdata: vec![data],
    });
    Ok(())
}

/// Reads one change (§3.4.1.3).
fn change(apex: &[u8], record: &ParsedRecord<'_, &[u8]>) -> Result<Change, UpdateError> {
    let owner = in_zone(apex, record)?;
    let rtype = record.rtype().to_int();
    let class = record.class();
    let ttl = record.ttl().as_secs();
    if class == Class::ANY {
        if ttl != 0 || record.rdlen() != 0 {
            return Err(Malformed::DeleteRrset.into());
        }
        if rtype == ANY {
            return Ok(Change::DeleteName { owner });
        }
        if is_meta(rtype) {
            return Err(Malformed::UpdateType.into());
        }
        return Ok(Change::DeleteRrset { owner, rtype });
    }
    if class != Class::IN && class != Class::NONE {
        return Err(Malformed::UpdateClass.into());
    }
    if is_meta(rtype) {
        return Err(Malformed::UpdateType.into());
    }
    if class == Class::NONE && ttl != 0 {
        return Err(Malformed::DeleteRecordTtl.into());
    }
    let record = Record {
        owner,
        rtype,
        ttl,
        rdata: rdata(record)?,
    };
    Ok(if class == Class::NONE {
        Change::DeleteRecord(record)
    } else {
        Change::Add(record)
    })
}

/// The record's owner, lowercase wire form, if it is at or below `apex`; NOTZONE if not.
fn in_zone(apex: &[u8], record: &ParsedRecord<'_, &[u8]>) -> Result<Box<[u8]>, UpdateError> {
    let owner = lowercase_wire(&record.owner());
    if is_at_or_below(&owner, apex) {
        Ok(owner)
    } else {
        Err(UpdateError::NotZone(name_text(&owner)))
    }
}

/// The record's rdata, parsed for its type and composed back uncompressed (names in rdata
/// may be compressed in the message).
fn rdata(record: &ParsedRecord<'_, &[u8]>) -> Result<Box<[u8]>, UpdateError> {
    if record.rdlen() == 0 {
        return Err(Malformed::EmptyRdata.into());
    }
    let parsed = record
        .to_any_record::<AllRecordData<&[u8], ParsedName<&[u8]>>>()
        .map_err(|_| Malformed::Rdata)?;
    let mut out = Vec::with_capacity(usize::from(record.rdlen()));
    parsed
        .data()
        .compose_rdata(&mut out)
        .map_err(|_| Malformed::Rdata)?;
    Ok(out.into_boxed_slice())
}

/// `name` in lowercase, uncompressed wire form.
fn lowercase_wire(name: &impl ToName) -> Box<[u8]> {
    let mut out = Vec::with_capacity(usize::from(name.compose_len()));
    for label in name.iter_labels() {
        let bytes = label.as_slice();
        // A label is at most 63 bytes (the parser checked it).
        out.push(bytes.len() as u8);
        out.extend(bytes.iter().map(u8::to_ascii_lowercase));
    }
    out.into_boxed_slice()
}

/// Whether the wire name `name` is `apex` or below it (both lowercase, uncompressed).
fn is_at_or_below(name: &[u8], apex: &[u8]) -> bool {
    if !name.ends_with(apex) {
        return false;
    }
    // The suffix must start on a label boundary of `name`.
    let start = name.len() - apex.len();
    let mut at = 0;
    while at < start {
        at += 1 + usize::from(name[at]);
    }
    at == start
}

fn name_text(wire: &[u8]) -> String {
    crate::key::name_to_text(wire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::base::rdata::UnknownRecordData;
    use domain::base::{MessageBuilder, Name, Ttl};
    use std::str::FromStr;

    /// One record of a test message: owner, class, TTL, type and rdata (wire).
    struct Rr<'a>(&'a str, Class, u32, u16, &'a [u8]);

    /// An UPDATE for `zone` with these prerequisites and updates.
    fn message(zone: &str, prerequisites: &[Rr<'_>], updates: &[Rr<'_>]) -> Vec<u8> {
        let mut builder = MessageBuilder::new_vec();
        builder.header_mut().set_opcode(Opcode::UPDATE);
        builder.header_mut().set_id(77);
        let mut question = builder.question();
        question
            .push((Name::<Vec<u8>>::from_str(zone).unwrap(), Rtype::SOA))
            .unwrap();
        let mut answer = question.answer();
        for rr in prerequisites {
            answer.push(record(rr)).unwrap();
        }
        let mut authority = answer.authority();
        for rr in updates {
            authority.push(record(rr)).unwrap();
        }
        authority.finish()
    }

    fn record(rr: &Rr<'_>) -> domain::base::Record<Name<Vec<u8>>, UnknownRecordData<Vec<u8>>> {
        domain::base::Record::new(
            Name::from_str(rr.0).unwrap(),
            rr.1,
            Ttl::from_secs(rr.2),
            UnknownRecordData::from_octets(Rtype::from_int(rr.3), rr.4.to_vec()).unwrap(),
        )
    }

    fn wire(name: &str) -> Box<[u8]> {
        let name = Name::<Vec<u8>>::from_str(name).unwrap();
        name.as_slice().to_ascii_lowercase().into_boxed_slice()
    }

    fn rec(owner: &str, rtype: u16, ttl: u32, rdata: &[u8]) -> Record {
        Record {
            owner: wire(owner),
            rtype,
            ttl,
            rdata: rdata.into(),
        }
    }

    /// corp.example: SOA, two NS, www A 192.0.2.1, alias CNAME www.
    fn zone() -> RecordIndex {
        let soa = [
            &wire("ns1.corp.example.")[..],
            &wire("hostmaster.corp.example.")[..],
            &[
                0, 0, 0, 1, 0, 0, 14, 16, 0, 0, 2, 88, 0, 9, 58, 128, 0, 0, 1, 44,
            ][..],
        ]
        .concat();
        [
            rec("corp.example.", SOA, 3600, &soa),
            rec("corp.example.", NS, 3600, &wire("ns1.corp.example.")),
            rec("corp.example.", NS, 3600, &wire("ns2.corp.example.")),
            rec("www.corp.example.", 1, 300, &[192, 0, 2, 1]),
            rec(
                "alias.corp.example.",
                CNAME,
                300,
                &wire("www.corp.example."),
            ),
        ]
        .into_iter()
        .collect()
    }

    const A: u16 = 1;

    #[test]
    fn rfc2136_2_5_parses_the_four_changes_and_decompresses_names() {
        let ns = wire("ns3.corp.example.");
        let bytes = message(
            "Corp.Example.",
            &[],
            &[
                Rr("new.corp.example.", Class::IN, 60, A, &[192, 0, 2, 9]),
                Rr("www.corp.example.", Class::ANY, 0, A, &[]),
                Rr("old.corp.example.", Class::ANY, 0, ANY, &[]),
                Rr("corp.example.", Class::NONE, 0, NS, &ns),
            ],
        );
        let update = Update::parse(&bytes).unwrap();
        assert_eq!(update.id, 77);
        assert_eq!(update.apex, wire("corp.example."));
        assert_eq!(
            update.changes,
            vec![
                Change::Add(rec("new.corp.example.", A, 60, &[192, 0, 2, 9])),
                Change::DeleteRrset {
                    owner: wire("www.corp.example."),
                    rtype: A
                },
                Change::DeleteName {
                    owner: wire("old.corp.example.")
                },
                Change::DeleteRecord(rec("corp.example.", NS, 0, &ns)),
            ]
        );
    }

    #[test]
    fn rfc2136_3_malformed_messages_are_formerr_with_a_reason() {
        let cases: Vec<(Vec<u8>, UpdateError)> = vec![
            (vec![0; 5], Malformed::Parse.into()),
            (
                message(
                    "corp.example.",
                    &[Rr("www.corp.example.", Class::ANY, 5, A, &[])],
                    &[],
                ),
                Malformed::PrerequisiteTtl.into(),
            ),
            (
                message(
                    "corp.example.",
                    &[Rr("www.corp.example.", Class::NONE, 0, A, &[1, 2, 3, 4])],
                    &[],
                ),
                Malformed::PrerequisiteRdata.into(),
            ),
            (
                message(
                    "corp.example.",
                    &[],
                    &[Rr("www.corp.example.", Class::ANY, 10, A, &[])],
                ),
                Malformed::DeleteRrset.into(),
            ),
            (
                message(
                    "corp.example.",
                    &[],
                    &[Rr("www.corp.example.", Class::IN, 10, 252, &[])],
                ),
                Malformed::UpdateType.into(),
            ),
            (
                message(
                    "corp.example.",
                    &[],
                    &[Rr("www.corp.example.", Class::CH, 10, A, &[1, 2, 3, 4])],
                ),
                Malformed::UpdateClass.into(),
            ),
            (
                message(
                    "corp.example.",
                    &[],
                    &[Rr("www.corp.example.", Class::IN, 10, A, &[1, 2, 3])],
                ),
                Malformed::Rdata.into(),
            ),
            (
                message(
                    "corp.example.",
                    &[],
                    &[Rr("www.other.example.", Class::IN, 10, A, &[1, 2, 3, 4])],
                ),
                UpdateError::NotZone("www.other.example.".into()),
            ),
            (
                message(
                    "corp.example.",
                    &[],
                    &[Rr("xcorp.example.", Class::ANY, 0, ANY, &[])],
                ),
                UpdateError::NotZone("xcorp.example.".into()),
            ),
        ];
        for (bytes, error) in cases {
            assert_eq!(Update::parse(&bytes), Err(error));
        }
        // A query, not an update.
        let mut bytes = message("corp.example.", &[], &[]);
        bytes[2] = 0x01;
        assert_eq!(Update::parse(&bytes), Err(Malformed::NotUpdate.into()));
        // Two zones.
        let mut bytes = message("corp.example.", &[], &[]);
        bytes[5] = 2;
        assert_eq!(Update::parse(&bytes), Err(Malformed::ZoneCount.into()));
        assert_eq!(UpdateError::from(Malformed::Parse).rcode(), rcode::FORMERR);
    }

    #[test]
    fn rfc2136_3_2_prerequisites_answer_their_rcodes() {
        let zone = zone();
        let check = |prerequisites: &[Rr<'_>]| {
            Update::parse(&message("corp.example.", prerequisites, &[]))
                .unwrap()
                .check(&zone)
                .map_err(|e| e.rcode())
        };
        let www = "www.corp.example.";
        let none = "none.corp.example.";
        assert_eq!(check(&[Rr(www, Class::ANY, 0, A, &[])]), Ok(()));
        assert_eq!(
            check(&[Rr(www, Class::ANY, 0, 28, &[])]),
            Err(rcode::NXRRSET)
        );
        assert_eq!(check(&[Rr(www, Class::NONE, 0, 28, &[])]), Ok(()));
        assert_eq!(
            check(&[Rr(www, Class::NONE, 0, A, &[])]),
            Err(rcode::YXRRSET)
        );
        assert_eq!(check(&[Rr(www, Class::ANY, 0, ANY, &[])]), Ok(()));
        assert_eq!(
            check(&[Rr(none, Class::ANY, 0, ANY, &[])]),
            Err(rcode::NXDOMAIN)
        );
        assert_eq!(check(&[Rr(none, Class::NONE, 0, ANY, &[])]), Ok(()));
        assert_eq!(
            check(&[Rr(www, Class::NONE, 0, ANY, &[])]),
            Err(rcode::YXDOMAIN)
        );
        // Value-dependent: the whole RRset, TTL ignored.
        assert_eq!(check(&[Rr(www, Class::IN, 0, A, &[192, 0, 2, 1])]), Ok(()));
        assert_eq!(
            check(&[
                Rr(www, Class::IN, 0, A, &[192, 0, 2, 1]),
                Rr(www, Class::IN, 0, A, &[192, 0, 2, 2])
            ]),
            Err(rcode::NXRRSET)
        );
        assert_eq!(
            check(&[Rr(www, Class::IN, 0, A, &[192, 0, 2, 2])]),
            Err(rcode::NXRRSET)
        );
    }

    #[test]
    fn the_index_of_an_update_holds_only_the_names_it_touches() {
        let records: Vec<Record> = zone().by_owner.into_values().flatten().collect();
        let update = Update::parse(&message(
            "corp.example.",
            &[Rr("www.corp.example.", Class::ANY, 0, A, &[])],
            &[Rr("new.corp.example.", Class::IN, 60, A, &[192, 0, 2, 9])],
        ))
        .unwrap();
        let index = RecordIndex::touched_by(&update, &records);
        assert_eq!(index.records_at(&wire("www.corp.example.")).len(), 1);
        assert!(index.records_at(&wire("corp.example.")).is_empty());
        assert!(index.records_at(&wire("alias.corp.example.")).is_empty());
        assert_eq!(update.check(&index), update.check(&zone()));
        assert_eq!(update.apply(&index), update.apply(&zone()));
    }

    #[test]
    fn rfc2136_3_4_2_changes_become_removed_and_added_records() {
        let zone = zone();
        let apply = |updates: &[Rr<'_>]| {
            Update::parse(&message("corp.example.", &[], updates))
                .unwrap()
                .apply(&zone)
        };
        let www = "www.corp.example.";
        // Add, then the same again: one record.
        let changes = apply(&[
            Rr("new.corp.example.", Class::IN, 60, A, &[192, 0, 2, 9]),
            Rr("new.corp.example.", Class::IN, 60, A, &[192, 0, 2, 9]),
        ]);
        assert_eq!(
            changes.added,
            vec![rec("new.corp.example.", A, 60, &[192, 0, 2, 9])]
        );
        assert!(changes.removed.is_empty());
        // A second address joins the RRset with its TTL.
        let changes = apply(&[Rr(www, Class::IN, 60, A, &[192, 0, 2, 2])]);
        assert_eq!(changes.removed, vec![rec(www, A, 300, &[192, 0, 2, 1])]);
        assert_eq!(
            changes.added,
            vec![
                rec(www, A, 60, &[192, 0, 2, 1]),
                rec(www, A, 60, &[192, 0, 2, 2])
            ]
        );
        // Delete one record, the RRset, the name.
        let changes = apply(&[Rr(www, Class::NONE, 0, A, &[192, 0, 2, 1])]);
        assert_eq!(changes.removed, vec![rec(www, A, 300, &[192, 0, 2, 1])]);
        assert!(apply(&[Rr(www, Class::NONE, 0, A, &[192, 0, 2, 7])]).is_empty());
        assert_eq!(apply(&[Rr(www, Class::ANY, 0, A, &[])]).removed.len(), 1);
        assert_eq!(apply(&[Rr(www, Class::ANY, 0, ANY, &[])]).removed.len(), 1);
        // Add then delete in one message: nothing.
        assert!(
            apply(&[
                Rr("new.corp.example.", Class::IN, 60, A, &[192, 0, 2, 9]),
                Rr("new.corp.example.", Class::ANY, 0, ANY, &[]),
            ])
            .is_empty()
        );
        // Ignored: CNAME beside other data, other data beside a CNAME, SOA, the apex's NS
        // RRset and last NS, the apex's SOA and NS on a delete-name.
        let target = wire("other.corp.example.");
        assert!(apply(&[Rr(www, Class::IN, 60, CNAME, &target)]).is_empty());
        assert!(apply(&[Rr("alias.corp.example.", Class::IN, 60, A, &[192, 0, 2, 3])]).is_empty());
        assert!(apply(&[Rr("corp.example.", Class::ANY, 0, SOA, &[])]).is_empty());
        assert!(apply(&[Rr("corp.example.", Class::ANY, 0, NS, &[])]).is_empty());
        let ns1 = wire("ns1.corp.example.");
        let ns2 = wire("ns2.corp.example.");
        let changes = apply(&[
            Rr("corp.example.", Class::NONE, 0, NS, &ns1),
            Rr("corp.example.", Class::NONE, 0, NS, &ns2),
        ]);
        assert_eq!(changes.removed, vec![rec("corp.example.", NS, 3600, &ns1)]);
        assert!(apply(&[Rr("corp.example.", Class::ANY, 0, ANY, &[])]).is_empty());
        // A CNAME replaces the CNAME.
        let changes = apply(&[Rr("alias.corp.example.", Class::IN, 60, CNAME, &target)]);
        assert_eq!(changes.removed.len(), 1);
        assert_eq!(
            changes.added,
            vec![rec("alias.corp.example.", CNAME, 60, &target)]
        );
    }

    /// Not the fuzz campaign (fuzz/fuzz_targets/zone_update.rs), a bounded stand-in in the
    /// unit tests: the committed seeds mutated at random (bytes flipped, cut, repeated) never
    /// panic the parser, the prerequisite check or the changes, and the changes keep their
    /// invariants (removed records were in the zone, added ones were not, no SOA added).
    #[test]
    fn mutated_updates_never_panic_and_keep_the_changes_invariants() {
        let seeds: [&[u8]; 3] = [
            include_bytes!("../../../fuzz/seeds/zone_update/add.bin"),
            include_bytes!("../../../fuzz/seeds/zone_update/delete.bin"),
            include_bytes!("../../../fuzz/seeds/zone_update/cname.bin"),
        ];
        let zone = zone();
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut parsed = 0;
        for seed in seeds {
            assert!(Update::parse(seed).is_ok(), "the seed parses");
            for _ in 0..5000 {
                let mut bytes = seed.to_vec();
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % bytes.len().max(1);
                    match next() % 4 {
                        0 => bytes.truncate(at),
                        1 => bytes.extend_from_within(at..),
                        _ => {
                            if let Some(b) = bytes.get_mut(at) {
                                *b ^= 1 << (next() % 8);
                            }
                        }
                    }
                }
                let Ok(update) = Update::parse(&bytes) else {
                    continue;
                };
                parsed += 1;
                let _ = update.check(&zone);
                let changes = update.apply(&zone);
                for removed in &changes.removed {
                    assert!(zone.records_at(&removed.owner).contains(removed));
                }
                for added in &changes.added {
                    assert_ne!(added.rtype, SOA);
                    assert!(!zone.records_at(&added.owner).contains(added));
                }
            }
        }
        assert!(
            parsed > 100,
            "the mutations reach past the parser: {parsed}"
        );
    }
}
