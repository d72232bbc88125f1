//! Settings versions: the diff a settings change makes (answered by a dry run and by the real
//! change), each applied change recorded as a version, the history, and rollback.
//!
//! ```text
//! PATCH /settings[?dryRun] ─▶ document ─▶ check ─▶ changes (effective old → new, per key)
//!   dry run: answer the changes ─┘      └─ else persist, apply, store Settings/cluster
//!                                           {document, changes} ─▶ an audit record = a version
//! GET /settings/history ─▶ the Settings/cluster audit records, newest first
//! POST /settings/rollback {version} ─▶ that record's document ─▶ the same path as a PATCH
//! ```
//! A version's number is its audit record's sequence number. Each record carries the merge
//! patch of the change; the spec is written whole each time, so a record holds the document
//! whenever the document changed, and otherwise the last record before it does.

use serde_json::{Value, json};

use super::{Api, Authorized, Reply, error, json_body, ok};
use crate::config::{self, Config, Scope};
use crate::objects::kinds::{SETTINGS, SETTINGS_NAME};
use crate::reload::Running;
use kudurru_storage::{Actor, AuditQuery, Object, StoreError, Timestamp};

/// Versions `GET /api/v1/settings/history` lists unless `limit` says otherwise.
const HISTORY_DEFAULT_LIMIT: usize = 100;
/// The most it lists.
const HISTORY_MAX_LIMIT: usize = 10_000;

/// How often recording a version re-reads the object after a write conflict.
const RECORD_RETRIES: usize = 3;

/// The cluster-scope keys whose effective value differs between `running` and `next`:
/// `{key, old, new, source (the layer of the old value), restartRequired}`, in key order.
pub(super) fn changes(running: &Running, next: &Config) -> Vec<Value> {
    let old = serde_json::to_value(&running.config).unwrap_or(Value::Null);
    let new = serde_json::to_value(next).unwrap_or(Value::Null);
    config::keys()
        .filter(|k| k.scope == Scope::Cluster)
        .filter_map(|k| {
            let before = super::lookup(&old, k.key).cloned().unwrap_or(Value::Null);
            let after = super::lookup(&new, k.key).cloned().unwrap_or(Value::Null);
            (before != after).then(|| {
                json!({
                    "key": k.key,
                    "old": before,
                    "new": after,
                    "source": running.sources.of(k.key).label(),
                    "restartRequired": k.restart_required,
                })
            })
        })
        .collect()
}

/// One version as the history lists it, and its document (as of that version).
struct Version {
    version: u64,
    time: Timestamp,
    actor: String,
    changes: Value,
    document: Option<String>,
}

impl Api {
    /// The versions, oldest first, each with the document and changes in effect at it.
    fn settings_versions(&self) -> Result<Vec<Version>, Reply> {
        let records = self
            .store
            .audit_query(&AuditQuery {
                kind: Some(SETTINGS.into()),
                name: Some(SETTINGS_NAME.into()),
                ..AuditQuery::default()
            })
            .map_err(|e| Reply::from(crate::objects::routes::store_error(e)))?;
        let (mut document, mut changes) = (None::<String>, Value::Array(Vec::new()));
        Ok(records
            .into_iter()
            .map(|record| {
                let spec = &record.patch["spec"];
                if let Some(text) = spec["document"].as_str() {
                    document = Some(text.to_owned());
                }
                if spec["changes"].is_array() {
                    changes = spec["changes"].clone();
                }
                Version {
                    version: record.seq,
                    time: record.time,
                    actor: record.actor,
                    changes: changes.clone(),
                    document: document.clone(),
                }
            })
            .collect())
    }

    /// Stores `document` and `changes` as the `Settings/cluster` object, which writes the
    /// version's audit record; its number, or `null` when it could not be recorded (the change
    /// itself stands: it is applied and persisted; the log says why).
    pub(super) fn record_settings_version(
        &self,
        principal: &str,
        document: &str,
        changes: &[Value],
    ) -> Value {
        let started = Timestamp::from_unix_millis(Timestamp::now().unix_millis() - 1000);
        let spec = json!({ "document": document, "changes": changes });
        let written = Actor::principal(principal).and_then(|actor| {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let result = match self.store.get(SETTINGS, SETTINGS_NAME) {
                    Ok(mut object) => {
                        object.spec = spec.clone();
                        self.store.update(&actor, &object)
                    }
                    Err(StoreError::NotFound { .. }) => self
                        .store
                        .create(&actor, &Object::new(SETTINGS, SETTINGS_NAME, spec.clone())),
                    Err(e) => Err(e),
                };
                match result {
                    Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. })
                        if attempt < RECORD_RETRIES => {}
                    other => return other,
                }
            }
        });
        if let Err(e) = written {
            tracing::error!(error = %e, "the settings change is applied but its version could not be recorded");
            return Value::Null;
        }
        let recent = self.store.audit_query(&AuditQuery {
            since: Some(started),
            kind: Some(SETTINGS.into()),
            name: Some(SETTINGS_NAME.into()),
            ..AuditQuery::default()
        });
        recent
            .ok()
            .and_then(|records| records.last().map(|r| json!(r.seq)))
            .unwrap_or(Value::Null)
    }

    /// `GET /api/v1/settings/history?limit=N`: the newest N recorded versions (default
    /// [`HISTORY_DEFAULT_LIMIT`]), newest first.
    pub(super) fn settings_history(&self, query: &str) -> Reply {
        let query = match crate::objects::routes::Query::parse(query) {
            Ok(query) => query,
            Err(e) => return e.into(),
        };
        let limit = match query.get("limit").map(str::parse::<usize>) {
            None => HISTORY_DEFAULT_LIMIT,
            Some(Ok(limit)) if (1..=HISTORY_MAX_LIMIT).contains(&limit) => limit,
            Some(_) => {
                return error(
                    400,
                    "invalid_value",
                    format!("limit must be 1 to {HISTORY_MAX_LIMIT}"),
                )
                .with_key("limit");
            }
        };
        match self.settings_versions() {
            Ok(versions) => ok(json!({
                "versions": versions.into_iter().rev().take(limit).map(|v| json!({
                    "version": v.version,
                    "time": v.time,
                    "actor": v.actor,
                    "changes": v.changes,
                })).collect::<Vec<_>>()
            })),
            Err(reply) => reply,
        }
    }

    /// `POST /api/v1/settings/rollback[?dryRun=true]` `{"version": n}`: makes version n's
    /// document the cluster settings layer again, through the same checks, persistence and
    /// recording as a PATCH (so a rollback is a version of its own).
    pub(super) fn rollback(&self, request: &super::Request, authorized: &Authorized) -> Reply {
        let dry_run = match super::dry_run(&request.query) {
            Ok(dry_run) => dry_run,
            Err(reply) => return reply,
        };
        let body = match json_body(request) {
            Ok(body) => body,
            Err(reply) => return reply,
        };
        let version = match parse_rollback(&body) {
            Ok(version) => version,
            Err(reply) => return reply,
        };
        let _writing = self
            .writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(reply) = self.managed_by_file() {
            return reply;
        }
        let versions = match self.settings_versions() {
            Ok(versions) => versions,
            Err(reply) => return reply,
        };
        let Some(found) = versions.iter().find(|v| v.version == version) else {
            return error(
                404,
                "not_found",
                format!(
                    "no settings version {version} (GET /api/v1/settings/history lists them; old ones are pruned with the audit log)"
                ),
            );
        };
        let Some(document) = &found.document else {
            return error(
                410,
                "gone",
                format!("the document of settings version {version} was pruned from the audit log"),
            );
        };
        self.apply_settings_text(document, dry_run, &authorized.principal, None)
    }
}

/// The body of a rollback: `{"version": n}` and nothing else.
pub fn parse_rollback(body: &serde_json::Map<String, Value>) -> Result<u64, Reply> {
    if let Some(other) = body.keys().find(|k| *k != "version") {
        return Err(error(
            400,
            "unknown_key",
            format!("no field {other:?}: send {{\"version\": n}}"),
        )
        .with_key(other));
    }
    body.get("version")
        .and_then(Value::as_u64)
        .filter(|&v| v > 0)
        .ok_or_else(|| {
            error(
                400,
                "invalid_value",
                "version must be a positive integer from GET /api/v1/settings/history",
            )
            .with_key("version")
        })
}
