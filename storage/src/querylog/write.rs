//! Appending: one write transaction per batch that interns the batch's strings, writes its
//! facts and their index entries, and adds the batch to its minute and hour rollups.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use redb::{Database, Durability, ReadableTable, Table, WriteTransaction};

use super::codec::{Answer, Fact, Rollup, reversed_name};
use super::{
    CACHE_SOURCES, Cursor, DICT, DICT_REV, DICTIONARY_CACHE, Entry, FACTS, FORMAT_VERSION, HOUR_NS,
    HOUR_TOP, HOURS, INDEX, IndexKey, META, MINUTE_NS, MINUTE_TOP, MINUTES, NAMES, QueryLogDb,
    corrupt, cursor_of, dict_kind, entry_flags, index_key, index_kind, rcode_code,
};
use crate::error::StorageError;

const META_FORMAT: &str = "format";
const META_STATE: &str = "state";

/// The bytes of one index entry (its key; the value is empty).
pub(super) const INDEX_ENTRY_BYTES: u64 = 24;
/// The bytes of a fact besides its value: the key.
const FACT_KEY_BYTES: u64 = 16;
/// Used bytes per stored byte: redb's page headers, per-entry offsets, branch pages and the
/// free space of half-split leaves. Measured with `kudurru-bench querylog` (file size over
/// stored bytes after appending 1M records; see docs/benchmarks.md).
const OVERHEAD_PERCENT: u64 = 165;

/// The writer's counters, one `meta` value: the last seq, the next dictionary id, the bytes
/// of keys and values stored, the number of facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct State {
    pub(super) seq: u64,
    pub(super) next_id: u32,
    pub(super) stored_bytes: u64,
    pub(super) facts: u64,
}

impl State {
    const LEN: usize = 28;

    pub(super) fn read(
        meta: &impl ReadableTable<&'static str, &'static [u8]>,
    ) -> Result<Self, StorageError> {
        let Some(value) = meta.get(META_STATE)? else {
            return Ok(Self::EMPTY);
        };
        let bytes = value.value();
        if bytes.len() != Self::LEN {
            return Err(corrupt("meta", META_STATE, "state is not 28 bytes"));
        }
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_be_bytes(word)
        };
        let mut id = [0u8; 4];
        id.copy_from_slice(&bytes[8..12]);
        Ok(Self {
            seq: u64_at(0),
            next_id: u32::from_be_bytes(id),
            stored_bytes: u64_at(12),
            facts: u64_at(20),
        })
    }

    const EMPTY: Self = Self {
        seq: 0,
        next_id: 1,
        stored_bytes: 0,
        facts: 0,
    };

    pub(super) fn write(&self, meta: &mut Table<'_, &str, &[u8]>) -> Result<(), StorageError> {
        let mut bytes = [0u8; Self::LEN];
        bytes[..8].copy_from_slice(&self.seq.to_be_bytes());
        bytes[8..12].copy_from_slice(&self.next_id.to_be_bytes());
        bytes[12..20].copy_from_slice(&self.stored_bytes.to_be_bytes());
        bytes[20..].copy_from_slice(&self.facts.to_be_bytes());
        meta.insert(META_STATE, bytes.as_slice())?;
        Ok(())
    }

    /// The estimate size retention uses.
    pub(super) fn used_bytes(&self) -> u64 {
        self.stored_bytes.saturating_mul(OVERHEAD_PERCENT) / 100
    }
}

/// Creates the tables of a new file and checks the format of an existing one.
pub(super) fn initialize(database: &Database) -> Result<(), StorageError> {
    let mut transaction = database.begin_write()?;
    transaction.set_durability(Durability::Immediate)?;
    {
        let mut meta = transaction.open_table(META)?;
        let format = meta.get(META_FORMAT)?.map(|value| value.value().to_vec());
        match format.as_deref() {
            None => {
                meta.insert(META_FORMAT, [FORMAT_VERSION].as_slice())?;
            }
            Some([version]) if *version <= FORMAT_VERSION => {}
            Some([version]) => {
                return Err(StorageError::UnsupportedFormat {
                    found: *version,
                    supported: FORMAT_VERSION,
                });
            }
            Some(_) => return Err(corrupt("meta", META_FORMAT, "format is not one byte")),
        }
        transaction.open_table(FACTS)?;
        transaction.open_table(INDEX)?;
        transaction.open_table(DICT)?;
        transaction.open_table(DICT_REV)?;
        transaction.open_table(NAMES)?;
        transaction.open_table(MINUTES)?;
        transaction.open_table(HOURS)?;
    }
    transaction.commit()?;
    Ok(())
}

/// The index entries of a fact: (index kind, id). Empty strings (id 0) are not indexed,
/// except the group, so that per-group retention reaches every fact.
pub(super) fn index_entries(fact: &Fact<'_>) -> impl Iterator<Item = (u8, u32)> {
    [
        (index_kind::CLIENT, fact.client),
        (index_kind::CLIENT_ID, fact.client_id),
        (index_kind::QNAME, fact.qname),
        (index_kind::QTYPE, u32::from(fact.qtype)),
        (index_kind::RCODE, rcode_code(fact.rcode)),
        (
            index_kind::BLOCKED,
            u32::from(fact.flags & entry_flags::BLOCKED != 0),
        ),
        (index_kind::POLICY, fact.policy),
        (index_kind::GROUP, fact.group),
    ]
    .into_iter()
    .filter(|&(kind, id)| {
        id != 0
            || matches!(
                kind,
                index_kind::GROUP | index_kind::QTYPE | index_kind::RCODE | index_kind::QNAME
            )
    })
}

/// The tables a write transaction changes, opened once.
pub(super) struct Tables<'t> {
    pub(super) meta: Table<'t, &'static str, &'static [u8]>,
    pub(super) facts: Table<'t, u128, &'static [u8]>,
    pub(super) index: Table<'t, IndexKey, ()>,
    pub(super) state: State,
}

impl<'t> Tables<'t> {
    pub(super) fn open(transaction: &'t WriteTransaction) -> Result<Self, StorageError> {
        let meta = transaction.open_table(META)?;
        let state = State::read(&meta)?;
        Ok(Self {
            meta,
            facts: transaction.open_table(FACTS)?,
            index: transaction.open_table(INDEX)?,
            state,
        })
    }

    /// Deletes the fact at `cursor` (its value already read) and its index entries. A value
    /// that does not decode is deleted alone: its index entries, if any, are left dangling,
    /// and searches skip index entries without a fact.
    pub(super) fn delete_fact(&mut self, cursor: u128, value: &[u8]) -> Result<(), StorageError> {
        let mut freed = FACT_KEY_BYTES + value.len() as u64;
        if let Ok(fact) = Fact::decode(value) {
            for (kind, id) in index_entries(&fact) {
                if self.index.remove(index_key(kind, id, cursor))?.is_some() {
                    freed += INDEX_ENTRY_BYTES;
                }
            }
        }
        self.facts.remove(cursor)?;
        self.state.stored_bytes = self.state.stored_bytes.saturating_sub(freed);
        self.state.facts = self.state.facts.saturating_sub(1);
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<(), StorageError> {
        self.state.write(&mut self.meta)
    }
}

/// The counts of one bucket gathered from a batch before they are merged into the table.
#[derive(Default)]
struct Gathered {
    queries: u64,
    blocked: u64,
    cache_hits: u64,
    by_rcode: BTreeMap<u64, u64>,
    names: HashMap<u32, u64>,
    blocked_names: HashMap<u32, u64>,
    clients: HashMap<u32, u64>,
}

impl Gathered {
    fn count(&mut self, entry: &Entry, qname: u32, client: u32) {
        self.queries += 1;
        let blocked = entry.flags & entry_flags::BLOCKED != 0;
        self.blocked += u64::from(blocked);
        self.cache_hits += u64::from(CACHE_SOURCES.contains(&entry.source));
        *self
            .by_rcode
            .entry(u64::from(rcode_code(entry.rcode)))
            .or_default() += 1;
        *self.names.entry(qname).or_default() += 1;
        if blocked {
            *self.blocked_names.entry(qname).or_default() += 1;
        }
        if client != 0 {
            *self.clients.entry(client).or_default() += 1;
        }
    }

    fn merge_into(self, rollup: &mut Rollup, top: usize) {
        rollup.queries += self.queries;
        rollup.blocked += self.blocked;
        rollup.cache_hits += self.cache_hits;
        for (code, count) in self.by_rcode {
            *rollup.by_rcode.entry(code).or_default() += count;
        }
        merge_top(&mut rollup.names, self.names, top);
        merge_top(&mut rollup.blocked_names, self.blocked_names, top);
        merge_top(&mut rollup.clients, self.clients, top);
    }
}

/// Adds `counts` to the top list `list` and keeps its `top` largest, by count then id.
pub(super) fn merge_top(list: &mut Vec<(u32, u64)>, mut counts: HashMap<u32, u64>, top: usize) {
    for &(id, count) in list.iter() {
        *counts.entry(id).or_default() += count;
    }
    let mut merged: Vec<(u32, u64)> = counts.into_iter().collect();
    let order = |a: &(u32, u64), b: &(u32, u64)| b.1.cmp(&a.1).then(a.0.cmp(&b.0));
    if merged.len() > top {
        merged.select_nth_unstable_by(top, order);
        merged.truncate(top);
    }
    merged.sort_unstable_by(order);
    *list = merged;
}

/// The batch's dictionary: ids of strings committed before (`committed`, the database's
/// cache), ids seen in this transaction, and the tables behind.
struct Interner<'t, 'c> {
    dict: Table<'t, &'static [u8], u32>,
    reverse: Table<'t, u32, &'static [u8]>,
    names: Table<'t, &'static [u8], u32>,
    committed: &'c HashMap<Vec<u8>, u32>,
    seen: HashMap<Vec<u8>, u32>,
    key: Vec<u8>,
}

impl<'t, 'c> Interner<'t, 'c> {
    fn open(
        transaction: &'t WriteTransaction,
        committed: &'c HashMap<Vec<u8>, u32>,
    ) -> Result<Self, StorageError> {
        Ok(Self {
            dict: transaction.open_table(DICT)?,
            reverse: transaction.open_table(DICT_REV)?,
            names: transaction.open_table(NAMES)?,
            committed,
            seen: HashMap::new(),
            key: Vec::new(),
        })
    }

    /// The id of `text` in dictionary `kind`, assigned now if it is new; 0 for "".
    fn intern(&mut self, state: &mut State, kind: u8, text: &str) -> Result<u32, StorageError> {
        if text.is_empty() {
            return Ok(0);
        }
        self.key.clear();
        self.key.push(kind);
        self.key.extend_from_slice(text.as_bytes());
        if let Some(&id) = self.committed.get(&self.key) {
            return Ok(id);
        }
        if let Some(&id) = self.seen.get(&self.key) {
            return Ok(id);
        }
        let existing = self.dict.get(self.key.as_slice())?.map(|id| id.value());
        let id = match existing {
            Some(id) => id,
            None => {
                let id = state.next_id;
                state.next_id = id.checked_add(1).ok_or_else(|| {
                    corrupt("meta", "state", "dictionary ids exhausted (2^32 strings)")
                })?;
                self.dict.insert(self.key.as_slice(), id)?;
                self.reverse.insert(id, self.key.as_slice())?;
                state.stored_bytes += 2 * (self.key.len() as u64 + 4);
                if kind == dict_kind::QNAME {
                    let reversed = reversed_name(text);
                    self.names.insert(reversed.as_slice(), id)?;
                    state.stored_bytes += reversed.len() as u64 + 4;
                }
                id
            }
        };
        self.seen.insert(self.key.clone(), id);
        Ok(id)
    }
}

impl QueryLogDb {
    /// Appends `entries` (time order within a batch not required) and their rollups in one
    /// write transaction; durable when it returns (with the default `sync_every` of 1).
    /// Entries with `omitted` set count in the rollups only: no fact, no index, and their
    /// client stays out of the top clients.
    pub fn append(&self, entries: &[Entry]) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut transaction = self.database.begin_write()?;
        let unsynced = self.unsynced.fetch_add(1, Ordering::Relaxed) + 1;
        let durable = unsynced >= self.options.sync_every;
        transaction.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        // One writer at a time: redb serializes write transactions anyway.
        let mut dictionary = self
            .dictionary
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = self.append_in(&transaction, entries, &dictionary)?;
        transaction.commit()?;
        if durable {
            self.unsynced.store(0, Ordering::Relaxed);
        }
        // Only now are the batch's new ids in the file: a failed commit keeps none of them.
        if dictionary.len() + seen.len() > DICTIONARY_CACHE {
            dictionary.clear();
        }
        dictionary.extend(seen);
        Ok(())
    }

    /// Writes `entries` in `transaction`; the dictionary ids it looked up or assigned.
    fn append_in(
        &self,
        transaction: &WriteTransaction,
        entries: &[Entry],
        committed: &HashMap<Vec<u8>, u32>,
    ) -> Result<HashMap<Vec<u8>, u32>, StorageError> {
        let mut tables = Tables::open(transaction)?;
        let mut interner = Interner::open(transaction, committed)?;
        let mut minutes: BTreeMap<u64, Gathered> = BTreeMap::new();
        let mut hours: BTreeMap<u64, Gathered> = BTreeMap::new();
        let mut value = Vec::with_capacity(128);
        // The batch's index entries, inserted in key order after the facts: consecutive
        // inserts then land in the same leaf, whose path redb has just walked (a batch's
        // entries for one client or name are one run instead of being spread over the batch).
        let mut index_keys: Vec<IndexKey> = Vec::with_capacity(entries.len() * 6);
        for entry in entries {
            let state = &mut tables.state;
            let qname = interner.intern(state, dict_kind::QNAME, &entry.qname)?;
            if entry.omitted {
                for (buckets, width) in [(&mut minutes, MINUTE_NS), (&mut hours, HOUR_NS)] {
                    let start = entry.time_ns - entry.time_ns % width;
                    buckets.entry(start).or_default().count(entry, qname, 0);
                }
                continue;
            }
            let client = interner.intern(state, dict_kind::CLIENT, &entry.client)?;
            for (buckets, width) in [(&mut minutes, MINUTE_NS), (&mut hours, HOUR_NS)] {
                let start = entry.time_ns - entry.time_ns % width;
                buckets
                    .entry(start)
                    .or_default()
                    .count(entry, qname, client);
            }
            let answer = if self.options.answers_inline {
                Answer::Inline(&entry.answer)
            } else {
                Answer::Id(interner.intern(state, dict_kind::ANSWER, &entry.answer)?)
            };
            let fact = Fact {
                flags: entry.flags,
                transport: entry.transport,
                source: entry.source,
                qtype: entry.qtype,
                rcode: entry.rcode,
                ede: entry.ede,
                upstream_latency_us: entry.upstream_latency_us,
                client,
                client_id: interner.intern(state, dict_kind::CLIENT_ID, &entry.client_id)?,
                group: interner.intern(state, dict_kind::GROUP, &entry.group)?,
                qname,
                upstream: interner.intern(state, dict_kind::UPSTREAM, &entry.upstream)?,
                policy: interner.intern(state, dict_kind::POLICY, &entry.policy)?,
                list: interner.intern(state, dict_kind::LIST, &entry.list)?,
                rule: interner.intern(state, dict_kind::RULE, &entry.rule)?,
                answer,
            };
            state.seq += 1;
            let cursor = cursor_of(entry.time_ns, state.seq);
            value.clear();
            fact.encode(&mut value);
            tables.facts.insert(cursor, value.as_slice())?;
            let mut stored = FACT_KEY_BYTES + value.len() as u64;
            for (kind, id) in index_entries(&fact) {
                index_keys.push(index_key(kind, id, cursor));
                stored += INDEX_ENTRY_BYTES;
            }
            let state = &mut tables.state;
            state.stored_bytes += stored;
            state.facts += 1;
        }
        index_keys.sort_unstable();
        for key in index_keys {
            tables.index.insert(key, ())?;
        }
        for (definition, buckets, top) in [(MINUTES, minutes, MINUTE_TOP), (HOURS, hours, HOUR_TOP)]
        {
            let mut table = transaction.open_table(definition)?;
            for (start, gathered) in buckets {
                let old = table.get(start)?.map(|value| value.value().to_vec());
                let mut rollup = match &old {
                    Some(bytes) => Rollup::decode(bytes)
                        .map_err(|reason| corrupt(definition_name(top), start, reason))?,
                    None => Rollup::default(),
                };
                gathered.merge_into(&mut rollup, top);
                let bytes = rollup.encode();
                table.insert(start, bytes.as_slice())?;
                let state = &mut tables.state;
                state.stored_bytes = (state.stored_bytes + bytes.len() as u64 + 8)
                    .saturating_sub(old.map_or(0, |old| old.len() as u64 + 8));
            }
        }
        tables.finish()?;
        Ok(interner.seen)
    }
}

/// The name of the rollup table that keeps `top` entries per list.
pub(super) fn definition_name(top: usize) -> &'static str {
    if top == MINUTE_TOP {
        "minutes"
    } else {
        "hours"
    }
}

/// The first `limit` cursors of `facts` in `range`, oldest first, with their values.
pub(super) fn oldest(
    facts: &Table<'_, u128, &'static [u8]>,
    range: std::ops::Range<u128>,
    limit: usize,
) -> Result<Vec<(u128, Vec<u8>)>, StorageError> {
    let mut found = Vec::with_capacity(limit.min(4096));
    for item in facts.range(range)?.take(limit) {
        let (key, value) = item?;
        found.push((key.value(), value.value().to_vec()));
    }
    Ok(found)
}

/// The cursor a page's entries are keyed by.
impl From<u128> for Cursor {
    fn from(value: u128) -> Self {
        Self(value)
    }
}
