//! Local zones: authoritative (primary and secondary) zones compiled into one immutable
//! structure the cores answer from, and forward zones that route a domain to its own upstreams.
//!
//! ```text
//! zone file (file) ─┐
//! RecordSets ───────┼─▶ ZoneData ─▶ Zone::compile ─▶ Arc<Zone> ─┐
//! transfer (xfr) ───┘     (checked: SOA, out-of-zone,            ├─▶ Zones (one Arc in the
//!                          CNAME and other data)                 │   settings snapshot)
//! forward zones (upstream URLs) ─▶ ForwardZone ─────────────────┘
//!
//! query ─▶ Zones::answer ─┬─ Answered: authoritative answer, referral or error in `out`
//!                         ├─ Transfer: AXFR/IXFR over a stream (xfr::Transfer)
//!                         └─ Pass: not ours (or a forward zone: Zones::route on the miss)
//! ```
//!
//! The serving structure is kudurru's own, not `domain::zonetree`: that tree sits behind
//! locks and async traits made for a server that mutates it, while the cores read one
//! immutable snapshot shared by all of them, and an authoritative answer must cost no more CPU
//! than NSD's (docs/ARCHITECTURE.md, docs/benchmarks.md). The protocol work around it (the
//! zone-file parser, TSIG) is `domain`'s.

pub mod data;
pub mod file;
pub mod set;
pub mod tree;
pub mod update;
pub mod xfr;

pub use data::{Record, ZoneData, ZoneError, ZoneErrorKind};
pub use set::{ForwardZone, Route, ServedZone, ZoneAnswer, Zones};
pub use tree::{TransferCursor, Zone, ZoneKind};
