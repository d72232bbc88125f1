//! Zone transfers served from the snapshot: AXFR (RFC 5936) and IXFR (RFC 1995) as a sequence
//! of messages, who may ask (addresses, TSIG, RFC 8945), and the journal IXFR answers from.

use crate::zone::data::Record;

/// Who may transfer a zone.
#[derive(Debug, Clone, Default)]
pub struct TransferPolicy {
    /// Addresses and prefixes allowed (`allowTransfer`); empty: nobody.
    pub allow: Vec<(std::net::IpAddr, u8)>,
    /// The TSIG key name a request must be signed with, if any.
    pub key: Option<String>,
}

/// One change of a zone: the records removed and added between two serials (RFC 1995 §4).
#[derive(Debug, Clone)]
pub struct Diff {
    /// Serial before.
    pub from: u32,
    /// Serial after.
    pub to: u32,
    /// Records removed (the old SOA included).
    pub removed: Vec<Record>,
    /// Records added (the new SOA included).
    pub added: Vec<Record>,
}

/// A zone's recent changes, oldest first, bounded.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// The diffs, each `to` the next one's `from`.
    pub diffs: Vec<Diff>,
}
