//! The input of a zone compile: records in wire form, from a zone file, RecordSet objects or
//! a transfer, and the errors that refuse them.

/// One resource record, class IN: owner lowercased, rdata uncompressed wire form as given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// Owner name, lowercase wire form.
    pub owner: Box<[u8]>,
    /// Record type.
    pub rtype: u16,
    /// TTL in seconds.
    pub ttl: u32,
    /// Rdata, uncompressed wire form.
    pub rdata: Box<[u8]>,
}

/// A zone's records before compiling, with the line each came from (0 where not from a file).
#[derive(Debug, Clone, Default)]
pub struct ZoneData {
    /// The apex, lowercase wire form.
    pub apex: Box<[u8]>,
    /// The records in source order.
    pub records: Vec<Record>,
    /// Where each record came from (`records[i]` from `origins[i]`), for errors: a file and
    /// line, or an object's name. Empty when unknown.
    pub origins: Vec<String>,
}

/// Why a zone was refused: what, and which record (as [`ZoneData::origins`] names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{kind}", origin.as_deref().map(|o| format!("{o}: ")).unwrap_or_default())]
pub struct ZoneError {
    /// Where: `file:line`, an object name, or none for the zone as a whole.
    pub origin: Option<String>,
    /// What.
    pub kind: ZoneErrorKind,
}

/// The classes of zone errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZoneErrorKind {
    /// The text does not parse (zone file syntax, an rdata that does not parse for its type).
    #[error("syntax: {0}")]
    Syntax(String),
    /// A record whose owner is not at or below the apex.
    #[error("out-of-zone data: {0} is not in the zone")]
    OutOfZone(String),
    /// A CNAME next to other data at the same name (RFC 1034 §3.6.2, RFC 2181 §10.1).
    #[error("CNAME and other data at {0}")]
    CnameAndOtherData(String),
    /// No SOA at the apex, or more than one.
    #[error("the apex must hold exactly one SOA record ({0} found)")]
    Soa(usize),
    /// No NS at the apex.
    #[error("the apex holds no NS record")]
    NoApexNs,
    /// An `$INCLUDE` outside the allowed directory, or a file that cannot be read.
    #[error("$INCLUDE {0}")]
    Include(String),
    /// Larger than the configured limits.
    #[error("too large: {0}")]
    TooLarge(String),
    /// Not a zone this node serves as asked (no such secondary for a transfer, no such
    /// primary for an update), or the zone manager is not running.
    #[error("not served: {0}")]
    NotServed(String),
}
