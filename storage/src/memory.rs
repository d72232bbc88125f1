//! The memory driver: tests, and `--ephemeral` runs with no data directory. Same rules as
//! redb (the shared [`crate::engine`]), same watch, same audit chain; nothing survives a drop.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::audit::{self, AuditLog, AuditQuery, AuditRecord, ChainPoint, ChainReport, ChainWalk};
use crate::audit::{Encoded, PruneReport};
use crate::body_cache::{self, BodyCache, BodyMeta};
use crate::engine::{self, Context, Op, Tx};
use crate::error::{Result, StoreError};
use crate::list::{self, Continue};
use crate::object::Object;
use crate::store::{
    Actor, DeleteOptions, ListOptions, ObjectList, Store, StoreOptions, WatchOptions,
};
use crate::time::Timestamp;
use crate::watch::{Hub, Watch};

/// An object store in memory.
pub struct MemoryStore {
    options: StoreOptions,
    state: Mutex<State>,
    bodies: Mutex<BTreeMap<String, (Vec<u8>, BodyMeta)>>,
}

struct StoredAudit {
    time_millis: i64,
    seq: u64,
    value: Vec<u8>,
}

struct State {
    objects: BTreeMap<String, BTreeMap<String, Object>>,
    revision: u64,
    audit: VecDeque<StoredAudit>,
    anchor: ChainPoint,
    head: ChainPoint,
    hub: Hub,
}

impl MemoryStore {
    /// An empty store.
    pub fn new(options: StoreOptions) -> Self {
        let hub = Hub::new(0, options.watch_history, options.watch_buffer);
        Self {
            options,
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                revision: 0,
                audit: VecDeque::new(),
                anchor: ChainPoint::default(),
                head: ChainPoint::default(),
                hub,
            }),
            bodies: Mutex::new(BTreeMap::new()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic cannot leave State half-written: the engine makes every fallible check before
        // the first write, and the writes here cannot fail.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, actor: &Actor, op: Op<'_>) -> Result<Object> {
        let mut state = self.state();
        let context = Context {
            registry: &self.options.registry,
            clock: &self.options.clock,
            actor,
        };
        let outcome = engine::execute(&mut MemoryTx(&mut state), &context, op)?;
        if let Some(change) = outcome.change {
            state.hub.publish(change);
        }
        Ok(outcome.object)
    }
}

struct MemoryTx<'a>(&'a mut State);

impl Tx for MemoryTx<'_> {
    fn object(&mut self, kind: &str, name: &str) -> Result<Option<Object>> {
        Ok(self.0.objects.get(kind).and_then(|k| k.get(name)).cloned())
    }

    fn put_object(&mut self, object: &Object) -> Result<()> {
        self.0
            .objects
            .entry(object.kind.clone())
            .or_default()
            .insert(object.metadata.name.clone(), object.clone());
        Ok(())
    }

    fn remove_object(&mut self, kind: &str, name: &str) -> Result<()> {
        if let Some(objects) = self.0.objects.get_mut(kind) {
            objects.remove(name);
        }
        Ok(())
    }

    fn revision(&mut self) -> Result<u64> {
        Ok(self.0.revision)
    }

    fn set_revision(&mut self, revision: u64) -> Result<()> {
        self.0.revision = revision;
        Ok(())
    }

    fn audit_head(&mut self) -> Result<ChainPoint> {
        Ok(self.0.head)
    }

    fn append_audit(&mut self, record: &Encoded) -> Result<()> {
        self.0.audit.push_back(StoredAudit {
            time_millis: record.point.time_millis,
            seq: record.point.seq,
            value: record.value.clone(),
        });
        self.0.head = record.point;
        Ok(())
    }
}

impl Store for MemoryStore {
    fn create(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.write(actor, Op::Create(object))
    }

    fn get(&self, kind: &str, name: &str) -> Result<Object> {
        self.options.registry.schema(kind)?;
        self.state()
            .objects
            .get(kind)
            .and_then(|objects| objects.get(name))
            .cloned()
            .ok_or_else(|| StoreError::not_found(kind, name))
    }

    fn list(&self, kind: &str, options: &ListOptions) -> Result<ObjectList> {
        self.options.registry.schema(kind)?;
        let state = self.state();
        let (revision, after, undo) = match &options.continue_token {
            None => (state.revision, String::new(), BTreeMap::new()),
            Some(token) => {
                let start = Continue::decode(token)?;
                if start.revision > state.revision {
                    return Err(StoreError::invalid("continue", "token from the future"));
                }
                let undo = state.hub.undo_since(kind, start.revision, &start.after)?;
                (start.revision, start.after, undo)
            }
        };
        let empty = BTreeMap::new();
        let objects = state.objects.get(kind).unwrap_or(&empty);
        let current = objects
            .range::<str, _>((
                std::ops::Bound::Excluded(after.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .map(|(_, object)| Ok(object.clone()));
        let (items, continue_token) = list::page(
            current,
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
        let mut state = self.state();
        let State { objects, hub, .. } = &mut *state;
        hub.watch(kind, options, || {
            Ok(objects
                .get(kind)
                .map(|objects| objects.values().cloned().collect())
                .unwrap_or_default())
        })
    }

    fn revision(&self) -> Result<u64> {
        Ok(self.state().revision)
    }

    fn compact(&self, revision: u64) -> Result<()> {
        self.state().hub.compact(revision);
        Ok(())
    }

    fn progress_notify(&self) -> Result<()> {
        self.state().hub.progress_notify();
        Ok(())
    }
}

impl AuditLog for MemoryStore {
    fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        let state = self.state();
        let (since, until) = query.time_range();
        let start = state.audit.partition_point(|r| r.time_millis < since);
        let mut records = Vec::new();
        for stored in state.audit.range(start..) {
            if stored.time_millis >= until || (query.limit > 0 && records.len() == query.limit) {
                break;
            }
            let record = audit::decode(&stored.value, "audit", &stored.seq.to_string())?;
            if query.matches(&record) {
                records.push(record);
            }
        }
        Ok(records)
    }

    fn audit_prune(&self, before: Timestamp) -> Result<PruneReport> {
        let mut state = self.state();
        let mut removed = 0;
        while let Some(oldest) = state.audit.front() {
            if oldest.time_millis >= before.unix_millis() {
                break;
            }
            let anchor = ChainPoint {
                seq: oldest.seq,
                hash: record_hash(&oldest.value)?,
                time_millis: oldest.time_millis,
            };
            state.anchor = anchor;
            state.audit.pop_front();
            removed += 1;
        }
        Ok(PruneReport {
            removed,
            anchor_seq: state.anchor.seq,
        })
    }

    fn audit_verify(&self) -> Result<ChainReport> {
        let state = self.state();
        let mut walk = ChainWalk::new(state.anchor);
        for stored in &state.audit {
            walk.step(stored.time_millis, stored.seq, &stored.value)?;
        }
        walk.finish(state.head)
    }
}

impl MemoryStore {
    fn bodies(&self) -> MutexGuard<'_, BTreeMap<String, (Vec<u8>, BodyMeta)>> {
        // Each body operation is one map call; a panic cannot leave the map half-written.
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BodyCache for MemoryStore {
    fn put_body(&self, key: &str, body: &[u8], meta: &BodyMeta) -> Result<()> {
        body_cache::check_put(key, body, meta)?;
        self.bodies()
            .insert(key.to_owned(), (body.to_vec(), meta.clone()));
        Ok(())
    }

    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>> {
        body_cache::check_key(key)?;
        // Checked on the way in, and memory is not a disk: nothing to verify on the way out.
        Ok(self.bodies().get(key).cloned())
    }

    fn delete_bodies(&self, prefix: &str) -> Result<u64> {
        let mut bodies = self.bodies();
        let before = bodies.len();
        bodies.retain(|key, _| !key.starts_with(prefix));
        Ok((before - bodies.len()) as u64)
    }

    fn body_keys(&self) -> Result<Vec<String>> {
        Ok(self.bodies().keys().cloned().collect())
    }
}

/// The hash a stored audit value carries (bytes 1..33).
pub(crate) fn record_hash(value: &[u8]) -> Result<[u8; 32]> {
    value
        .get(1..33)
        .and_then(|hash| hash.try_into().ok())
        .ok_or_else(|| {
            crate::error::StorageError::Corrupt {
                table: "audit",
                key: String::new(),
                reason: "shorter than its hash".into(),
            }
            .into()
        })
}
