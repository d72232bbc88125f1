//! The query log's database (`<dataDir>/querylog.db`, mode 0600): facts in time order,
//! dictionary-encoded names and clients, indexes for the filters operators use, rollups per
//! minute and per hour, retention by age and size, purge.
//!
//! (Skeleton: the types are the contract with `kudurru-control`'s writer and API; the bodies
//! are to come.)

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::StorageError;

/// One logged query as the writer hands it over, privacy already applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    /// When it was answered, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// The client as the privacy mode keeps it: an address, a prefix (`192.0.2.0/24`), a
    /// pseudonym (`p-…`), or empty for none.
    pub client: String,
    /// The client ID (DoH path or SNI label), empty when none.
    pub client_id: String,
    /// The client group whose privacy applied (`default` for clients in no group).
    pub group: String,
    /// `kudurru_core::querylog::Transport` as `u8`.
    pub transport: u8,
    /// `kudurru_core::querylog::Source` as `u8`.
    pub source: u8,
    /// The query name, lowercase presentation form with the final dot.
    pub qname: String,
    /// The query type.
    pub qtype: u16,
    /// The response code, `None` when nothing was sent.
    pub rcode: Option<u16>,
    /// [`entry_flags`] bits.
    pub flags: u16,
    /// The answer section in brief (`A 192.0.2.1, CNAME x.example.`), empty when none.
    pub answer: String,
    /// The upstream that answered a miss, empty when none.
    pub upstream: String,
    /// Its latency in microseconds (0 when none).
    pub upstream_latency_us: u32,
    /// The policy that blocked or rewrote, empty when none.
    pub policy: String,
    /// The list whose rule decided, empty when none.
    pub list: String,
    /// The rule as its list writes it, empty when none.
    pub rule: String,
    /// Extended DNS Error code of the response.
    pub ede: Option<u16>,
    /// Counted in the rollups, not stored as a fact (privacy `omit`).
    pub omitted: bool,
}

/// The bits of [`Entry::flags`].
pub mod entry_flags {
    /// A policy blocked or rewrote the query.
    pub const BLOCKED: u16 = 1;
    /// Blocked through a CNAME of the answer (CNAME cloaking).
    pub const CLOAKED: u16 = 2;
    /// The query had the EDNS DO bit.
    pub const DNSSEC_OK: u16 = 4;
    /// The response had TC=1.
    pub const TRUNCATED: u16 = 8;
    /// The query had RD=1.
    pub const RECURSION_DESIRED: u16 = 16;
    /// A message was longer than the record keeps.
    pub const CLIPPED: u16 = 32;
}

/// Where a search page starts: the position of the last entry of the previous page, opaque to
/// clients (rendered as a string in the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor(pub u128);

/// Which entries a search returns, newest first. Every field narrows; `None`/empty is "any".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filter {
    /// At or after, ns since the epoch.
    pub from_ns: Option<u64>,
    /// Before, ns since the epoch.
    pub to_ns: Option<u64>,
    /// The client exactly as stored.
    pub client: Option<String>,
    /// The client ID.
    pub client_id: Option<String>,
    /// The query name exactly (lowercase, final dot).
    pub qname: Option<String>,
    /// The query name or any name below it (`example.com.` matches `a.example.com.`).
    pub qname_suffix: Option<String>,
    /// The query type.
    pub qtype: Option<u16>,
    /// The response code (`Some(None)`: dropped, nothing sent).
    pub rcode: Option<Option<u16>>,
    /// Blocked (or rewritten) or not.
    pub blocked: Option<bool>,
    /// The deciding policy.
    pub policy: Option<String>,
    /// The client group.
    pub group: Option<String>,
    /// The transport code.
    pub transport: Option<u8>,
    /// The source code.
    pub source: Option<u8>,
}

/// One page of a search.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    /// The entries, newest first, each with its position.
    pub entries: Vec<(Cursor, Entry)>,
    /// Where the next page starts, `None` when this is the last.
    pub next: Option<Cursor>,
}

/// One bucket of a time series.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bucket {
    /// Its start, ns since the epoch.
    pub start_ns: u64,
    /// Queries (omitted ones included).
    pub queries: u64,
    /// Blocked or rewritten.
    pub blocked: u64,
    /// Answered from the cache (stale included).
    pub cache_hits: u64,
    /// Queries by rcode (`None`: dropped).
    pub by_rcode: BTreeMap<Option<u16>, u64>,
}

/// What `GET /api/v1/stats` draws: a series and the top lists over the range.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    /// Buckets of `step`, oldest first.
    pub series: Vec<Bucket>,
    /// Most asked names with their counts.
    pub top_names: Vec<(String, u64)>,
    /// Most blocked names.
    pub top_blocked: Vec<(String, u64)>,
    /// Most active clients (as stored).
    pub top_clients: Vec<(String, u64)>,
}

/// What retention keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Retention {
    /// Facts older than this many ns are pruned (0: kept by age forever).
    pub max_age_ns: u64,
    /// Per client group, overriding `max_age_ns`.
    pub group_max_age_ns: BTreeMap<String, u64>,
    /// When the file grows past this many bytes, the oldest facts go (0: no limit).
    pub max_bytes: u64,
}

/// The query-log database.
pub struct QueryLogDb {
    _private: (),
}

impl QueryLogDb {
    /// Opens (or creates, mode 0600) the database at `path`.
    pub fn open(_path: &Path) -> Result<Self, StorageError> {
        todo!("skeleton")
    }

    /// Appends `entries` (time order within a batch not required) and their rollups in one
    /// write transaction; durable when it returns.
    pub fn append(&self, _entries: &[Entry]) -> Result<(), StorageError> {
        todo!("skeleton")
    }

    /// A page of at most `limit` entries matching `filter`, newest first, after `cursor`.
    pub fn search(
        &self,
        _filter: &Filter,
        _cursor: Option<Cursor>,
        _limit: usize,
    ) -> Result<Page, StorageError> {
        todo!("skeleton")
    }

    /// The rollups from `from_ns` to `to_ns` in buckets of `step_ns` (a minute or more; hour
    /// rollups serve steps of an hour or more), with top lists of at most `top` entries.
    pub fn stats(
        &self,
        _from_ns: u64,
        _to_ns: u64,
        _step_ns: u64,
        _top: usize,
    ) -> Result<Stats, StorageError> {
        todo!("skeleton")
    }

    /// Deletes facts older than `before_ns` (0: all) in transactions of at most `batch`,
    /// keeping rollups and dictionaries; the number deleted.
    pub fn purge(&self, _before_ns: u64, _batch: usize) -> Result<u64, StorageError> {
        todo!("skeleton")
    }

    /// Applies `retention` at `now_ns`: at most `batch` facts per transaction; the number
    /// deleted.
    pub fn prune(
        &self,
        _retention: &Retention,
        _now_ns: u64,
        _batch: usize,
    ) -> Result<u64, StorageError> {
        todo!("skeleton")
    }

    /// The database file's size in bytes.
    pub fn size_bytes(&self) -> Result<u64, StorageError> {
        todo!("skeleton")
    }
}
