//! One compiled authoritative zone: every name and RRset in one arena, found by a hash of the
//! lowercase owner, answered from pre-encoded rdata.

use crate::wire::{Query, ReplyOptions};
use crate::zone::data::{Record, ZoneData, ZoneError};

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

/// A compiled zone: immutable, shared by every core through the snapshot.
#[derive(Debug)]
pub struct Zone {
    apex: Box<[u8]>,
    kind: ZoneKind,
    serial: u32,
    records: usize,
    names: usize,
}

impl Zone {
    /// Compiles `data`, checking it: exactly one SOA at the apex, NS at the apex (not for
    /// built-in zones), every owner at or below the apex, no CNAME next to other data.
    pub fn compile(data: &ZoneData, kind: ZoneKind) -> Result<Self, ZoneError> {
        let _ = (data, kind);
        unimplemented!("zone compile")
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

    /// Resource records served (`kudurru_zone_records{kind="records"}`).
    pub fn record_count(&self) -> usize {
        self.records
    }

    /// Owner names (`kudurru_zone_records{kind="names"}`), empty non-terminals left out.
    pub fn name_count(&self) -> usize {
        self.names
    }

    /// Every record, SOA first, then in canonical order (RFC 4034 §6.1): for the records API
    /// and AXFR.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        std::iter::empty()
    }

    /// Writes the authoritative answer to `query`, a name at or below this zone's apex, into
    /// `out`: answer, NXDOMAIN or NODATA with the SOA, wildcard, CNAME chain, referral.
    pub fn answer(&self, query: &Query<'_>, options: &ReplyOptions, out: &mut Vec<u8>) {
        let _ = (query, options, out);
        unimplemented!("zone answer")
    }
}
