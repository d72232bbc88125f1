//! The redb driver: one file, `<dataDir>/objects.redb`, created 0600 in a 0700 directory.
//! Its tables, key encodings and invariants are in `storage/DESIGN.md`.
//!
//! Writes hold the hub lock from `begin_write` to `publish`, so commits and their watch events
//! leave in the same order; reads use redb's snapshot transactions and take the lock only to
//! pair a snapshot with the watch history (continue tokens, watches from now).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redb::{
    Builder, ConcurrencyMode, Database, Durability, ReadTransaction, ReadableDatabase,
    ReadableTable, TableDefinition,
};

use crate::audit::{self, AuditLog, AuditQuery, AuditRecord, ChainPoint, ChainReport, ChainWalk};
use crate::audit::{Encoded, PruneReport};
use crate::body_cache::{self, BodyCache, BodyMeta};
use crate::engine::{self, Context, Op, Tx};
use crate::error::{Result, StorageError, StoreError};
use crate::files;
use crate::list::{self, Continue};
use crate::memory::record_hash;
use crate::object::Object;
use crate::store::{
    Actor, DeleteOptions, ListOptions, ObjectList, Store, StoreOptions, WatchOptions,
};
use crate::time::Timestamp;
use crate::watch::{Hub, Watch};

/// The database's file name inside the data directory.
pub const FILE_NAME: &str = "objects.redb";
/// The layout version this build writes and reads (`meta["format"]`).
pub const FORMAT_VERSION: u8 = 1;
/// The value format version of an object record (its first byte).
const OBJECT_VERSION: u8 = 1;

const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const OBJECTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("objects");
const AUDIT: TableDefinition<'_, (u64, u64), &[u8]> = TableDefinition::new("audit");
/// The list-body cache; added within format 1 (an older build ignores the table).
const BODIES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("bodies");

/// redb's page cache (its default is 1 GiB): objects are small and list bodies are read once
/// at start, so a small cache keeps a 60 MB list body from staying resident after its write.
const CACHE_BYTES: usize = 16 << 20;

const META_FORMAT: &str = "format";
const META_REVISION: &str = "revision";
const META_AUDIT_HEAD: &str = "audit.head";
const META_AUDIT_ANCHOR: &str = "audit.anchor";

/// An object store in a redb file.
pub struct RedbStore {
    database: Database,
    path: PathBuf,
    options: StoreOptions,
    hub: Mutex<Hub>,
}

impl RedbStore {
    /// Opens `<data_dir>/objects.redb`, creating the directory (0700) and the file (0600) if
    /// they do not exist.
    pub fn open(data_dir: &Path, options: StoreOptions) -> Result<Self> {
        files::create_data_dir(data_dir)?;
        let path = data_dir.join(FILE_NAME);
        let file = files::open_data_file(&path)?;
        let database = Builder::new()
            .set_concurrency_mode(ConcurrencyMode::SingleWriter)
            .set_cache_size(CACHE_BYTES)
            .create_with_backend(redb::backends::FileBackend::new(file))?;
        let revision = initialize(&database)?;
        let hub = Hub::new(revision, options.watch_history, options.watch_buffer);
        Ok(Self {
            database,
            path,
            options,
            hub: Mutex::new(hub),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn hub(&self) -> MutexGuard<'_, Hub> {
        // The hub is updated only after a commit, by infallible pushes; a panic elsewhere while
        // the lock was held leaves it consistent.
        self.hub.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, actor: &Actor, op: Op<'_>) -> Result<Object> {
        let mut hub = self.hub();
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        let outcome = {
            let mut tx = RedbTx {
                meta: transaction.open_table(META)?,
                objects: transaction.open_table(OBJECTS)?,
                audit: transaction.open_table(AUDIT)?,
            };
            let context = Context {
                registry: &self.options.registry,
                clock: &self.options.clock,
                actor,
            };
            engine::execute(&mut tx, &context, op)?
        };
        match outcome.change {
            // Nothing changed: drop the transaction unwritten.
            None => transaction.abort()?,
            Some(change) => {
                transaction.commit()?;
                hub.publish(change);
            }
        }
        Ok(outcome.object)
    }

    fn read(&self) -> Result<ReadTransaction> {
        Ok(self.database.begin_read()?)
    }

    /// Creates every object `objects` yields, each then given the status it carries, in one
    /// write transaction (one commit, one fsync) instead of one or two per object: a bulk load
    /// of a fresh store (the fleet's local snapshot). Each object is checked and recorded as
    /// [`Store::create`] and [`Store::update_status`] would (its resourceVersion must be 0;
    /// the audit log gets both records); the watch events leave after the commit. The first
    /// error, the iterator's or a create's, aborts the load: nothing is written. Returns the
    /// number of objects created.
    pub fn import(
        &self,
        actor: &Actor,
        objects: impl IntoIterator<Item = Result<Object>>,
    ) -> Result<u64> {
        let mut hub = self.hub();
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        let mut changes = Vec::new();
        let mut created = 0;
        {
            let mut tx = RedbTx {
                meta: transaction.open_table(META)?,
                objects: transaction.open_table(OBJECTS)?,
                audit: transaction.open_table(AUDIT)?,
            };
            let context = Context {
                registry: &self.options.registry,
                clock: &self.options.clock,
                actor,
            };
            for object in objects {
                // An error returns here: the transaction is dropped uncommitted (aborted).
                let object = object?;
                let outcome = engine::execute(&mut tx, &context, Op::Create(&object))?;
                changes.extend(outcome.change);
                if object.status != Default::default() {
                    let mut with_status = outcome.object;
                    with_status.status = object.status;
                    let outcome =
                        engine::execute(&mut tx, &context, Op::UpdateStatus(&with_status))?;
                    changes.extend(outcome.change);
                }
                created += 1;
            }
        }
        if changes.is_empty() {
            transaction.abort()?;
            return Ok(created);
        }
        transaction.commit()?;
        for change in changes {
            hub.publish(change);
        }
        Ok(created)
    }
}

/// Checks a new or existing database's format and returns its revision.
fn initialize(database: &Database) -> Result<u64> {
    let mut transaction = database.begin_write()?;
    transaction.set_durability(Durability::Immediate)?;
    let revision = {
        let mut meta = transaction.open_table(META)?;
        transaction.open_table(OBJECTS)?;
        transaction.open_table(AUDIT)?;
        transaction.open_table(BODIES)?;
        let format = meta.get(META_FORMAT)?.map(|v| v.value().to_vec());
        match format.as_deref() {
            None => {
                meta.insert(META_FORMAT, [FORMAT_VERSION].as_slice())?;
                meta.insert(META_REVISION, 0u64.to_be_bytes().as_slice())?;
                0
            }
            Some([FORMAT_VERSION]) => read_revision(&meta)?,
            Some([found]) => {
                return Err(StorageError::UnsupportedFormat {
                    found: *found,
                    supported: FORMAT_VERSION,
                }
                .into());
            }
            Some(other) => return Err(corrupt("meta", META_FORMAT, format!("{other:?}")).into()),
        }
    };
    transaction.commit()?;
    Ok(revision)
}

fn corrupt(table: &'static str, key: &str, reason: String) -> StorageError {
    StorageError::Corrupt {
        table,
        key: key.to_owned(),
        reason,
    }
}

fn read_revision(meta: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<u64> {
    let guard = meta
        .get(META_REVISION)?
        .ok_or_else(|| corrupt("meta", META_REVISION, "missing".into()))?;
    let bytes: [u8; 8] = guard
        .value()
        .try_into()
        .map_err(|_| corrupt("meta", META_REVISION, "not 8 bytes".into()))?;
    Ok(u64::from_be_bytes(bytes))
}

fn read_point(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<ChainPoint> {
    match meta.get(key)? {
        None => Ok(ChainPoint::default()),
        Some(guard) => ChainPoint::decode(guard.value(), key),
    }
}

pub(crate) fn object_key(kind: &str, name: &str) -> String {
    format!("{kind}/{name}")
}

pub(crate) fn encode_object(object: &Object) -> Result<Vec<u8>> {
    let mut value = vec![OBJECT_VERSION];
    serde_json::to_writer(&mut value, object).map_err(|error| {
        StoreError::invalid("object", format!("does not encode as JSON: {error}"))
    })?;
    Ok(value)
}

pub(crate) fn decode_object(key: &str, value: &[u8]) -> Result<Object> {
    let (version, json) = value
        .split_first()
        .ok_or_else(|| corrupt("objects", key, "empty value".into()))?;
    if *version != OBJECT_VERSION {
        return Err(StorageError::UnsupportedFormat {
            found: *version,
            supported: OBJECT_VERSION,
        }
        .into());
    }
    let object: Object =
        serde_json::from_slice(json).map_err(|error| corrupt("objects", key, error.to_string()))?;
    if object_key(&object.kind, &object.metadata.name) != key {
        return Err(corrupt(
            "objects",
            key,
            "key does not match the object's kind and name".into(),
        )
        .into());
    }
    Ok(object)
}

struct RedbTx<'t> {
    meta: redb::Table<'t, &'static str, &'static [u8]>,
    objects: redb::Table<'t, &'static str, &'static [u8]>,
    audit: redb::Table<'t, (u64, u64), &'static [u8]>,
}

impl Tx for RedbTx<'_> {
    fn object(&mut self, kind: &str, name: &str) -> Result<Option<Object>> {
        let key = object_key(kind, name);
        match self.objects.get(key.as_str())? {
            None => Ok(None),
            Some(guard) => decode_object(&key, guard.value()).map(Some),
        }
    }

    fn put_object(&mut self, object: &Object) -> Result<()> {
        let key = object_key(&object.kind, &object.metadata.name);
        self.objects
            .insert(key.as_str(), encode_object(object)?.as_slice())?;
        Ok(())
    }

    fn remove_object(&mut self, kind: &str, name: &str) -> Result<()> {
        self.objects.remove(object_key(kind, name).as_str())?;
        Ok(())
    }

    fn revision(&mut self) -> Result<u64> {
        read_revision(&self.meta)
    }

    fn set_revision(&mut self, revision: u64) -> Result<()> {
        self.meta
            .insert(META_REVISION, revision.to_be_bytes().as_slice())?;
        Ok(())
    }

    fn audit_head(&mut self) -> Result<ChainPoint> {
        read_point(&self.meta, META_AUDIT_HEAD)
    }

    fn append_audit(&mut self, record: &Encoded) -> Result<()> {
        let point = record.point;
        // Times are clamped to 0 or later when encoded.
        let key = (point.time_millis.max(0) as u64, point.seq);
        self.audit.insert(key, record.value.as_slice())?;
        self.meta
            .insert(META_AUDIT_HEAD, point.encode().as_slice())?;
        Ok(())
    }
}

// The key range of `kind`'s objects after `after` ("" for all): `kind/` up to `kind0`, since '0'
// is the byte after '/'.
fn kind_range(kind: &str, after: &str) -> (String, String) {
    (object_key(kind, after), format!("{kind}0"))
}

fn objects_of(
    transaction: &ReadTransaction,
    kind: &str,
    after: &str,
) -> Result<Vec<Result<Object>>> {
    let table = transaction.open_table(OBJECTS)?;
    let (start, end) = kind_range(kind, after);
    let start = if after.is_empty() {
        Bound::Included(start.as_str())
    } else {
        Bound::Excluded(start.as_str())
    };
    let mut objects = Vec::new();
    for entry in table.range((start, Bound::Excluded(end.as_str())))? {
        let (key, value) = entry?;
        objects.push(decode_object(key.value(), value.value()));
    }
    Ok(objects)
}

impl Store for RedbStore {
    fn create(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.write(actor, Op::Create(object))
    }

    fn get(&self, kind: &str, name: &str) -> Result<Object> {
        self.options.registry.schema(kind)?;
        let transaction = self.read()?;
        let table = transaction.open_table(OBJECTS)?;
        let key = object_key(kind, name);
        match table.get(key.as_str())? {
            None => Err(StoreError::not_found(kind, name)),
            Some(guard) => decode_object(&key, guard.value()),
        }
    }

    fn list(&self, kind: &str, options: &ListOptions) -> Result<ObjectList> {
        self.options.registry.schema(kind)?;
        let start = options
            .continue_token
            .as_deref()
            .map(Continue::decode)
            .transpose()?;
        let (transaction, revision, undo) = {
            let hub = self.hub();
            let transaction = self.read()?;
            let revision = read_revision(&transaction.open_table(META)?)?;
            match &start {
                None => (transaction, revision, Default::default()),
                Some(start) => {
                    if start.revision > revision {
                        return Err(StoreError::invalid("continue", "token from the future"));
                    }
                    let undo = hub.undo_since(kind, start.revision, &start.after)?;
                    (transaction, start.revision, undo)
                }
            }
        };
        let after = start.as_ref().map_or("", |start| start.after.as_str());
        let current = objects_of(&transaction, kind, after)?;
        let (items, continue_token) = list::page(
            current.into_iter(),
            undo,
            &options.label_selector,
            options.limit,
            revision,
        )?;
        Ok(ObjectList {
            resource_version: revision,
            items,
            continue_token,
        })
    }

    fn update(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.write(actor, Op::Update(object))
    }

    fn update_status(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.write(actor, Op::UpdateStatus(object))
    }

    fn delete(
        &self,
        actor: &Actor,
        kind: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Object> {
        self.write(
            actor,
            Op::Delete {
                kind,
                name,
                precondition: options.resource_version,
            },
        )
    }

    fn watch(&self, kind: &str, options: &WatchOptions) -> Result<Watch> {
        self.options.registry.schema(kind)?;
        let mut hub = self.hub();
        hub.watch(kind, options, || {
            // Under the hub lock no commit can land, so this snapshot is at the hub's revision.
            let transaction = self.read()?;
            objects_of(&transaction, kind, "")?.into_iter().collect()
        })
    }

    fn revision(&self) -> Result<u64> {
        Ok(self.hub().revision())
    }

    fn compact(&self, revision: u64) -> Result<()> {
        self.hub().compact(revision);
        Ok(())
    }

    fn progress_notify(&self) -> Result<()> {
        self.hub().progress_notify();
        Ok(())
    }
}

impl AuditLog for RedbStore {
    fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        let transaction = self.read()?;
        let table = transaction.open_table(AUDIT)?;
        let (since, until) = query.time_range();
        let mut records = Vec::new();
        for entry in table.range((since.max(0) as u64, 0)..)? {
            let (key, value) = entry?;
            let (time, seq) = key.value();
            if time >= until.max(0) as u64 || (query.limit > 0 && records.len() == query.limit) {
                break;
            }
            let record = audit::decode(value.value(), "audit", &format!("({time}, {seq})"))?;
            if query.matches(&record) {
                records.push(record);
            }
        }
        Ok(records)
    }

    fn audit_prune(&self, before: Timestamp) -> Result<PruneReport> {
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        let report = {
            let mut meta = transaction.open_table(META)?;
            let mut table = transaction.open_table(AUDIT)?;
            let mut anchor = read_point(&meta, META_AUDIT_ANCHOR)?;
            let mut doomed = Vec::new();
            for entry in table.range(..(before.unix_millis().max(0) as u64, 0))? {
                let (key, value) = entry?;
                let (time, seq) = key.value();
                anchor = ChainPoint {
                    seq,
                    hash: record_hash(value.value())?,
                    time_millis: i64::try_from(time).unwrap_or(i64::MAX),
                };
                doomed.push((time, seq));
            }
            for key in &doomed {
                table.remove(key)?;
            }
            meta.insert(META_AUDIT_ANCHOR, anchor.encode().as_slice())?;
            PruneReport {
                removed: doomed.len() as u64,
                anchor_seq: anchor.seq,
            }
        };
        transaction.commit()?;
        Ok(report)
    }

    fn audit_verify(&self) -> Result<ChainReport> {
        verify_transaction(&self.read()?)
    }
}

fn verify_transaction(transaction: &ReadTransaction) -> Result<ChainReport> {
    let meta = transaction.open_table(META)?;
    let mut walk = ChainWalk::new(read_point(&meta, META_AUDIT_ANCHOR)?);
    let head = read_point(&meta, META_AUDIT_HEAD)?;
    let table = transaction.open_table(AUDIT)?;
    for entry in table.range(..)? {
        let (key, value) = entry?;
        let (time, seq) = key.value();
        let time = i64::try_from(time).map_err(|_| {
            corrupt(
                "audit",
                &format!("({time}, {seq})"),
                "time out of range".into(),
            )
        })?;
        walk.step(time, seq, value.value())?;
    }
    walk.finish(head)
}

/// Verifies the audit chain of the database at `path`, opened read-only (a running server may
/// keep it open meanwhile).
pub fn verify_audit_file(path: &Path) -> Result<ChainReport> {
    let database = Builder::new()
        .set_concurrency_mode(ConcurrencyMode::SingleWriter)
        .open_read_only(path)?;
    let transaction = database.begin_read()?;
    let meta = transaction.open_table(META)?;
    let format = meta.get(META_FORMAT)?.map(|v| v.value().to_vec());
    if format.as_deref() != Some(&[FORMAT_VERSION]) {
        return Err(corrupt(
            "meta",
            META_FORMAT,
            format!("{format:?} is not [{FORMAT_VERSION}]"),
        )
        .into());
    }
    drop(meta);
    verify_transaction(&transaction)
}

impl BodyCache for RedbStore {
    fn put_body(&self, key: &str, body: &[u8], meta: &BodyMeta) -> Result<()> {
        body_cache::check_put(key, body, meta)?;
        let header = body_cache::encode_header(meta);
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        {
            let mut table = transaction.open_table(BODIES)?;
            // Written in place: a large body is copied once, into the page, not first into a
            // header-and-body buffer.
            let mut value = table.insert_reserve(key, header.len() + body.len())?;
            let (head, tail) = value.as_mut().split_at_mut(header.len());
            head.copy_from_slice(&header);
            tail.copy_from_slice(body);
        }
        transaction.commit()?;
        Ok(())
    }

    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>> {
        body_cache::check_key(key)?;
        let transaction = self.read()?;
        let table = transaction.open_table(BODIES)?;
        match table.get(key)? {
            None => Ok(None),
            Some(guard) => body_cache::decode("bodies", key, guard.value()).map(Some),
        }
    }

    fn delete_bodies(&self, prefix: &str) -> Result<u64> {
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        let removed = {
            let mut table = transaction.open_table(BODIES)?;
            let mut doomed = Vec::new();
            for entry in table.range(prefix..)? {
                let (key, _) = entry?;
                let key = key.value();
                if !key.starts_with(prefix) {
                    break;
                }
                doomed.push(key.to_owned());
            }
            for key in &doomed {
                table.remove(key.as_str())?;
            }
            doomed.len() as u64
        };
        if removed == 0 {
            transaction.abort()?;
        } else {
            transaction.commit()?;
        }
        Ok(removed)
    }

    fn body_keys(&self) -> Result<Vec<String>> {
        let transaction = self.read()?;
        let table = transaction.open_table(BODIES)?;
        let mut keys = Vec::new();
        for entry in table.iter()? {
            let (key, _) = entry?;
            keys.push(key.value().to_owned());
        }
        Ok(keys)
    }
}
