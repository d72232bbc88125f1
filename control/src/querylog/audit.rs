//! A purge of the query log, written to the audit log. The query log is its own database, so
//! its purges cannot be audited in their own transaction as object changes are: after a purge
//! succeeds, the node's `QueryLog` object (`objects::kinds::QUERY_LOG`) is updated with it,
//! and that write is the audit record (as `Settings/cluster` is for settings versions).
//!
//! ```text
//! DELETE /api/v1/querylog?before= ─▶ QueryLog::purge ─▶ deleted n
//!                                 ─▶ QueryLog/<node>.spec.purges = [this purge, …] ─▶ audit record
//! ```

use std::sync::Arc;

use serde_json::{Value, json};

use crate::objects::ObjectStore;
use crate::objects::kinds::{MAX_PURGES, QUERY_LOG, QUERY_LOG_LOCAL};
use kudurru_storage::{Actor, Object, StoreError};

/// How often recording a purge re-reads the object after a write conflict (another purge on
/// the same node, or the same object written by a restarted node).
const RECORD_RETRIES: usize = 3;

/// Where purges are audited: the object store and this node's name (`None` on a node that is
/// not in a fleet).
#[derive(Clone)]
pub struct PurgeAudit {
    /// The object store whose audit log records the purges.
    pub store: Arc<dyn ObjectStore>,
    /// The fleet's name for this node, `None` off a fleet.
    pub node: Option<String>,
}

/// One purge, as the audit record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purge {
    /// When it finished, RFC 3339.
    pub time: String,
    /// The bound, RFC 3339, or `everything` for 0.
    pub before: String,
    /// The bound, ns since the epoch (0: everything).
    pub before_ns: u64,
    /// Entries deleted.
    pub deleted: u64,
}

impl PurgeAudit {
    /// The object's name: the node's, or [`QUERY_LOG_LOCAL`].
    fn name(&self) -> &str {
        self.node.as_deref().unwrap_or(QUERY_LOG_LOCAL)
    }

    /// Records `purge` by `principal` (blocking: run it off the control thread's executor).
    pub fn record(&self, principal: &str, purge: &Purge) -> Result<(), StoreError> {
        let actor = Actor::principal(principal)?;
        let name = self.name();
        let this = json!({
            "time": purge.time,
            "node": name,
            "before": purge.before,
            "beforeUnixNs": purge.before_ns,
            "deleted": purge.deleted,
        });
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match self.store.get(QUERY_LOG, name) {
                Ok(mut object) => {
                    object.spec = spec_with(&object.spec, this.clone());
                    self.store.update(&actor, &object)
                }
                Err(StoreError::NotFound { .. }) => self.store.create(
                    &actor,
                    &Object::new(QUERY_LOG, name, spec_with(&Value::Null, this.clone())),
                ),
                Err(e) => Err(e),
            };
            match result {
                Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. })
                    if attempt < RECORD_RETRIES => {}
                other => return other.map(drop),
            }
        }
    }
}

/// `spec` with `purge` first in its purges, keeping at most [`MAX_PURGES`].
fn spec_with(spec: &Value, purge: Value) -> Value {
    let mut purges = vec![purge];
    if let Some(old) = spec.get("purges").and_then(Value::as_array) {
        purges.extend(old.iter().take(MAX_PURGES - 1).cloned());
    }
    json!({ "purges": purges })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kudurru_storage::{AuditQuery, AuditVerb, MemoryStore, StoreOptions};

    fn purge(deleted: u64) -> Purge {
        Purge {
            time: "2026-12-07T22:00:00.000000000Z".into(),
            before: "everything".into(),
            before_ns: 0,
            deleted,
        }
    }

    #[test]
    fn each_purge_is_an_audit_record_with_who_the_bound_and_the_count() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new(StoreOptions::new(
            crate::objects::registry(),
        )));
        let audit = PurgeAudit {
            store: store.clone(),
            node: None,
        };
        // The same purge twice is two records, each carrying the whole purge.
        for _ in 0..2 {
            audit.record("token:admin", &purge(0)).unwrap();
        }
        audit.record("token:other", &purge(7)).unwrap();
        let records = store
            .audit_query(&AuditQuery {
                kind: Some(QUERY_LOG.into()),
                ..AuditQuery::default()
            })
            .unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].verb, AuditVerb::Create);
        assert_eq!(records[1].verb, AuditVerb::Update);
        for (record, (actor, deleted)) in
            records
                .iter()
                .zip([("token:admin", 0), ("token:admin", 0), ("token:other", 7)])
        {
            assert_eq!(record.actor, actor);
            assert_eq!(record.name, QUERY_LOG_LOCAL);
            let this = &record.patch["spec"]["purges"][0];
            assert_eq!(this["deleted"], deleted, "{}", record.patch);
            assert_eq!(this["before"], "everything");
            assert_eq!(this["beforeUnixNs"], 0);
            assert_eq!(this["node"], QUERY_LOG_LOCAL);
        }
    }

    #[test]
    fn the_object_keeps_the_last_purges_only() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new(StoreOptions::new(
            crate::objects::registry(),
        )));
        let audit = PurgeAudit {
            store: store.clone(),
            node: Some("edge-1".into()),
        };
        for deleted in 0..(MAX_PURGES as u64 + 3) {
            audit.record("token:admin", &purge(deleted)).unwrap();
        }
        let object = store.get(QUERY_LOG, "edge-1").unwrap();
        let purges = object.spec["purges"].as_array().unwrap();
        assert_eq!(purges.len(), MAX_PURGES);
        assert_eq!(purges[0]["deleted"], MAX_PURGES as u64 + 2, "newest first");
        assert_eq!(purges[0]["node"], "edge-1");
    }

    #[test]
    fn a_bad_principal_records_nothing() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new(StoreOptions::new(
            crate::objects::registry(),
        )));
        let audit = PurgeAudit { store, node: None };
        assert!(audit.record("system:sneaky", &purge(1)).is_err());
    }
}
