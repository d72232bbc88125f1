//! The query log's database (`<dataDir>/querylog.db`, mode 0600): facts in time order,
//! dictionary-encoded names and clients, indexes for the filters operators use, rollups per
//! minute and per hour, retention by age and size, purge. Layout and invariants:
//! `storage/DESIGN.md`, section "Query log".
//!
//! ```text
//!  writer ── append(batch) ──▶ one write txn: dictionaries ▸ facts ▸ indexes ▸ rollups
//!  API ──── search(filter) ──▶ read snapshot: leapfrog over the filters' indexes, newest first
//!  API ──── stats(range) ────▶ read snapshot: minute or hour rollups, top lists merged
//!  retention ─ prune/purge ──▶ write txns of at most `batch` facts (rollups, dictionaries kept)
//! ```
//!
//! redb has one writer and MVCC readers: a search reads a snapshot while the writer appends,
//! and a purge or prune takes the writer's place for one bounded transaction at a time.

mod codec;
mod retention;
mod search;
mod stats;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{Builder, ConcurrencyMode, Database, ReadableDatabase, TableDefinition};

use crate::error::StorageError;
use crate::files;

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

/// The database's file name inside the data directory.
pub const FILE_NAME: &str = "querylog.db";
/// The layout version this build writes and reads (`meta["format"]`).
pub const FORMAT_VERSION: u8 = 1;
/// Entries of each top list kept per minute bucket.
pub const MINUTE_TOP: usize = 100;
/// Entries of each top list kept per hour bucket.
pub const HOUR_TOP: usize = 1000;
/// A minute in nanoseconds.
pub const MINUTE_NS: u64 = 60_000_000_000;
/// An hour in nanoseconds.
pub const HOUR_NS: u64 = 60 * MINUTE_NS;

/// `meta`: `format` (one byte) and `state` ([`write::State`]).
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
/// `facts`: [`Cursor`] (time ns << 64 | seq) → a [`codec::Fact`].
const FACTS: TableDefinition<'_, u128, &[u8]> = TableDefinition::new("facts");
/// `index`: (index kind << 32 | dictionary id or code, cursor) → nothing.
const INDEX: TableDefinition<'_, IndexKey, ()> = TableDefinition::new("index");
/// `dict`: dictionary kind byte + the string → its id.
const DICT: TableDefinition<'_, &[u8], u32> = TableDefinition::new("dict");
/// `dict_rev`: id → dictionary kind byte + the string.
const DICT_REV: TableDefinition<'_, u32, &[u8]> = TableDefinition::new("dict_rev");
/// `names`: a query name's labels reversed ([`codec::reversed_name`]) → its id.
const NAMES: TableDefinition<'_, &[u8], u32> = TableDefinition::new("names");
/// `minutes` and `hours`: bucket start (ns) → a [`codec::Rollup`].
const MINUTES: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("minutes");
const HOURS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("hours");

/// (index kind << 32 | id or code, cursor): two integers compare faster than a byte array.
type IndexKey = (u64, u128);

/// The dictionaries: one id space, each string keyed under its kind.
mod dict_kind {
    pub(super) const QNAME: u8 = 1;
    pub(super) const CLIENT: u8 = 2;
    pub(super) const CLIENT_ID: u8 = 3;
    pub(super) const GROUP: u8 = 4;
    pub(super) const POLICY: u8 = 5;
    pub(super) const LIST: u8 = 6;
    pub(super) const RULE: u8 = 7;
    pub(super) const UPSTREAM: u8 = 8;
    pub(super) const ANSWER: u8 = 9;
}

/// The indexes in the `index` table, by their first key byte.
mod index_kind {
    pub(super) const CLIENT: u8 = 1;
    pub(super) const CLIENT_ID: u8 = 2;
    pub(super) const QNAME: u8 = 3;
    pub(super) const QTYPE: u8 = 4;
    pub(super) const RCODE: u8 = 5;
    pub(super) const BLOCKED: u8 = 6;
    pub(super) const POLICY: u8 = 7;
    pub(super) const GROUP: u8 = 8;
}

/// `kudurru_core::querylog::Source` codes the rollups count as cache hits (cache, stale).
const CACHE_SOURCES: [u8; 2] = [0, 2];

fn index_key(kind: u8, id: u32, cursor: u128) -> IndexKey {
    ((u64::from(kind) << 32) | u64::from(id), cursor)
}

fn index_cursor(key: &IndexKey) -> u128 {
    key.1
}

/// The rcode as an index id and rollup code: 0 for none, `rcode + 1` otherwise.
fn rcode_code(rcode: Option<u16>) -> u32 {
    rcode.map_or(0, |rcode| u32::from(rcode) + 1)
}

fn cursor_of(time_ns: u64, seq: u64) -> u128 {
    (u128::from(time_ns) << 64) | u128::from(seq)
}

/// The time part of a cursor.
fn cursor_time(cursor: u128) -> u64 {
    (cursor >> 64) as u64
}

/// The string of dictionary id `id` (without its kind byte).
fn dictionary_string(
    reverse: &impl redb::ReadableTable<u32, &'static [u8]>,
    id: u32,
) -> Result<String, StorageError> {
    let value = reverse
        .get(id)?
        .ok_or_else(|| corrupt("dict_rev", id, "dictionary id not found"))?;
    value
        .value()
        .get(1..)
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .map(str::to_owned)
        .ok_or_else(|| corrupt("dict_rev", id, "not a kind byte and UTF-8"))
}

fn corrupt(table: &'static str, key: impl std::fmt::Display, reason: &str) -> StorageError {
    StorageError::Corrupt {
        table,
        key: key.to_string(),
        reason: reason.to_owned(),
    }
}

/// How the database commits and caches; [`QueryLogOptions::default`] is what the server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLogOptions {
    /// Every how many appends a commit is fsynced (`Durability::Immediate`); the ones between
    /// are committed without fsync and become durable with the next fsynced one. 1: every
    /// append is durable when it returns.
    pub sync_every: u32,
    /// redb's page cache in bytes.
    pub cache_bytes: usize,
    /// Store answers inline in the fact instead of in the dictionary.
    pub answers_inline: bool,
}

impl Default for QueryLogOptions {
    fn default() -> Self {
        Self {
            sync_every: 1,
            cache_bytes: 64 << 20,
            answers_inline: true,
        }
    }
}

/// The query-log database.
///
/// `Send + Sync`: the control thread shares it between the writer and API handlers on
/// tokio's blocking pool; redb serializes write transactions and gives each search a snapshot.
pub struct QueryLogDb {
    database: Database,
    path: PathBuf,
    options: QueryLogOptions,
    /// Appends since the last fsynced commit.
    unsynced: std::sync::atomic::AtomicU32,
    /// Dictionary ids of committed strings (kind byte + text), so that an append looks a
    /// frequent string up here rather than in the `dict` table. Valid forever once committed:
    /// ids never change and dictionaries only grow (a purge keeps them). Emptied when it
    /// reaches [`DICTIONARY_CACHE`] entries.
    dictionary: std::sync::Mutex<std::collections::HashMap<Vec<u8>, u32>>,
}

/// Most strings the append's dictionary cache keeps before it starts over.
const DICTIONARY_CACHE: usize = 65_536;

impl std::fmt::Debug for QueryLogDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryLogDb")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl QueryLogDb {
    /// Opens (or creates, mode 0600) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        Self::open_with(path, QueryLogOptions::default())
    }

    /// Opens (or creates, mode 0600) the database at `path` with `options`.
    pub fn open_with(path: &Path, options: QueryLogOptions) -> Result<Self, StorageError> {
        let file = files::open_data_file(path)?;
        let database = Builder::new()
            // Exclusive: no other process opens the query log (the CLI goes through the API),
            // and only an exclusive writer may commit without fsync (`sync_every` > 1).
            .set_concurrency_mode(ConcurrencyMode::ExclusiveWriter)
            .set_cache_size(options.cache_bytes)
            .create_with_backend(redb::backends::FileBackend::new(file))?;
        write::initialize(&database)?;
        Ok(Self {
            database,
            path: path.to_owned(),
            options: QueryLogOptions {
                sync_every: options.sync_every.max(1),
                ..options
            },
            unsynced: std::sync::atomic::AtomicU32::new(0),
            dictionary: std::sync::Mutex::default(),
        })
    }

    /// The database file's size in bytes (redb reuses freed pages but never shrinks the file).
    pub fn size_bytes(&self) -> Result<u64, StorageError> {
        std::fs::metadata(&self.path)
            .map(|metadata| metadata.len())
            .map_err(|source| StorageError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// The bytes the stored data takes, estimated from the keys and values written and
    /// deleted (see `storage/DESIGN.md`): what size retention compares with `max_bytes`.
    pub fn used_bytes(&self) -> Result<u64, StorageError> {
        let transaction = self.database.begin_read()?;
        let meta = transaction.open_table(META)?;
        Ok(write::State::read(&meta)?.used_bytes())
    }

    /// redb's exact page accounting: (bytes in allocated pages, bytes of the stored keys and
    /// values as this database counts them). Walks every page of every table while holding
    /// the writer's place, so it is for benchmarks and maintenance, not for retention.
    pub fn measure_pages(&self) -> Result<(u64, u64), StorageError> {
        let transaction = self.database.begin_write()?;
        let stats = transaction.stats()?;
        let stored = {
            let meta = transaction.open_table(META)?;
            write::State::read(&meta)?.stored_bytes
        };
        transaction.abort()?;
        Ok((stats.allocated_pages() * stats.page_size() as u64, stored))
    }

    /// The number of facts stored.
    pub fn len(&self) -> Result<u64, StorageError> {
        let transaction = self.database.begin_read()?;
        let meta = transaction.open_table(META)?;
        Ok(write::State::read(&meta)?.facts)
    }

    /// Whether no fact is stored.
    pub fn is_empty(&self) -> Result<bool, StorageError> {
        Ok(self.len()? == 0)
    }
}

#[cfg(test)]
mod tests;
