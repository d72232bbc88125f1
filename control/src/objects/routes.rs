//! The objects API: `/api/v1/{resource}`, `/api/v1/{resource}/{name}`,
//! `/api/v1/{resource}/{name}/status` and `/api/v1/audit`, as Kubernetes' API reads.
//!
//! ```text
//! GET    /{resource}                list (labelSelector, limit, continue) | watch=true: NDJSON stream
//! POST   /{resource}                create                       409 already_exists
//! GET    /{resource}/{name}         get                          404 not_found
//! PUT    /{resource}/{name}         update (metadata.resourceVersion required; 409 conflict)
//! PATCH  /{resource}/{name}         JSON merge patch of labels, annotations, spec (RFC 7386)
//! DELETE /{resource}/{name}         delete (?resourceVersion= precondition)
//! PUT    /{resource}/{name}/status  status (admin; operators don't write status)
//! GET    /audit                     audit records (since, until, actor, kind, name, limit)
//! ```
//! Every call runs on the blocking pool (the store may fsync); a watch is a channel the HTTP
//! layer streams from. Errors carry a stable code and the offending field.

use kudurru_storage::{
    Actor, AuditQuery, DeleteOptions, LabelSelector, ListOptions, Object, StoreError, Timestamp,
    Watch, WatchOptions, parse_resource_version,
};
use serde_json::{Map, Value, json};

use super::{ObjectStore, Resource, resource};
use crate::http::HttpError;
use crate::tokens::Permission;

/// Most audit records one request returns.
pub const MAX_AUDIT_RECORDS: usize = 10_000;
/// Records returned when the request names no limit.
pub const DEFAULT_AUDIT_RECORDS: usize = 1_000;
/// How often a PATCH without a resourceVersion re-reads and retries after a conflict.
const PATCH_RETRIES: usize = 3;

/// What a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/api/v1/{resource}`.
    Collection(&'static Resource),
    /// `/api/v1/{resource}/{name}`.
    Object(&'static Resource, String),
    /// `/api/v1/{resource}/{name}/status`.
    Status(&'static Resource, String),
    /// `/api/v1/audit`.
    Audit,
}

impl Target {
    /// The object route `path` names, if any.
    pub fn parse(path: &str) -> Option<Self> {
        let rest = path.strip_prefix("/api/v1/")?;
        let mut parts = rest.split('/');
        let first = parts.next()?;
        if first == "audit" {
            return parts.next().is_none().then_some(Self::Audit);
        }
        let resource = resource(first)?;
        match (parts.next(), parts.next(), parts.next()) {
            (None, ..) => Some(Self::Collection(resource)),
            (Some(name), None, _) if !name.is_empty() => {
                Some(Self::Object(resource, name.to_owned()))
            }
            (Some(name), Some("status"), None) if !name.is_empty() => {
                Some(Self::Status(resource, name.to_owned()))
            }
            _ => None,
        }
    }

    /// The methods the target answers.
    pub fn methods(&self) -> &'static [&'static str] {
        match self {
            Self::Collection(_) => &["GET", "POST"],
            Self::Object(..) => &["GET", "PUT", "PATCH", "DELETE"],
            Self::Status(..) => &["GET", "PUT"],
            Self::Audit => &["GET"],
        }
    }

    /// What `method` on the target needs; `None` when the target does not answer it.
    pub fn permission(&self, method: &str) -> Option<Permission> {
        if !self.methods().contains(&method) {
            return None;
        }
        Some(match (self, method) {
            (Self::Audit, _) => Permission::AuditRead,
            (_, "GET") => Permission::ObjectsRead,
            (Self::Status(..), _) => Permission::ObjectsAdmin,
            (Self::Collection(r) | Self::Object(r, _), _) => r.write,
        })
    }

    /// Whether the method carries a JSON body.
    pub fn takes_body(method: &str) -> bool {
        matches!(method, "POST" | "PUT" | "PATCH")
    }
}

/// What a request produced.
pub enum Outcome {
    /// A JSON answer.
    Json(u16, Value),
    /// A watch to stream as newline-delimited JSON events.
    Watch(Watch),
}

/// Answers `method` on `target` for `actor`, with the request's `query` and JSON `body`.
pub fn handle(
    store: &dyn ObjectStore,
    actor: &Actor,
    method: &str,
    target: &Target,
    query: &str,
    body: Option<&[u8]>,
) -> Result<Outcome, HttpError> {
    let query = Query::parse(query)?;
    match (method, target) {
        ("GET", Target::Audit) => audit(store, &query),
        ("GET", Target::Collection(r)) if query.flag("watch")? => watch(store, r, &query),
        ("GET", Target::Collection(r)) => list(store, r, &query),
        ("GET", Target::Object(r, name) | Target::Status(r, name)) => {
            let object = store.get(r.kind, name).map_err(store_error)?;
            Ok(Outcome::Json(200, to_json(&object)))
        }
        ("POST", Target::Collection(r)) => {
            let mut object = object_body(r, body, None)?;
            object.metadata.resource_version = 0;
            if r.reserved.contains(&object.metadata.name.as_str()) {
                return Err(HttpError::new(
                    400,
                    "reserved_name",
                    format!(
                        "{} {:?} is built in; choose another name",
                        r.kind, object.metadata.name
                    ),
                )
                .with_key("metadata.name"));
            }
            let created = store.create(actor, &object).map_err(store_error)?;
            Ok(Outcome::Json(201, to_json(&created)))
        }
        ("PUT", Target::Object(r, name)) => {
            let object = object_body(r, body, Some(name))?;
            require_version(&object)?;
            let updated = store.update(actor, &object).map_err(store_error)?;
            Ok(Outcome::Json(200, to_json(&updated)))
        }
        ("PUT", Target::Status(r, name)) => {
            let object = object_body(r, body, Some(name))?;
            require_version(&object)?;
            let updated = store.update_status(actor, &object).map_err(store_error)?;
            Ok(Outcome::Json(200, to_json(&updated)))
        }
        ("PATCH", Target::Object(r, name)) => patch(store, actor, r, name, body),
        ("DELETE", Target::Object(r, name)) => {
            let options = DeleteOptions {
                resource_version: query.version("resourceVersion")?,
            };
            let deleted = store
                .delete(actor, r.kind, name, &options)
                .map_err(store_error)?;
            Ok(Outcome::Json(200, to_json(&deleted)))
        }
        _ => Err(HttpError::new(
            405,
            "method_not_allowed",
            format!("{method} is not allowed here"),
        )),
    }
}

fn list(store: &dyn ObjectStore, r: &Resource, query: &Query) -> Result<Outcome, HttpError> {
    let options = ListOptions {
        label_selector: query.selector()?,
        limit: query.number("limit")?.unwrap_or(0),
        continue_token: query.get("continue").map(str::to_owned),
    };
    let page = store.list(r.kind, &options).map_err(store_error)?;
    let mut metadata = json!({ "resourceVersion": page.resource_version.to_string() });
    if let Some(token) = &page.continue_token {
        metadata["continue"] = token.as_str().into();
    }
    let items: Vec<Value> = page.items.iter().map(to_json).collect();
    Ok(Outcome::Json(
        200,
        json!({ "kind": format!("{}List", r.kind), "metadata": metadata, "items": items }),
    ))
}

fn watch(store: &dyn ObjectStore, r: &Resource, query: &Query) -> Result<Outcome, HttpError> {
    let options = WatchOptions {
        resource_version: query.version("resourceVersion")?,
        label_selector: query.selector()?,
        bookmarks: query.flag("allowWatchBookmarks")?,
    };
    let watch = store.watch(r.kind, &options).map_err(store_error)?;
    Ok(Outcome::Watch(watch))
}

/// One watch event as a line of the stream: `{"type": "ADDED", "object": {…}}`; an error
/// that ends the watch is `{"type": "ERROR", "object": {"code": 410, …}}`, as Kubernetes
/// sends it.
pub fn event_line(event: &Result<kudurru_storage::WatchEvent, StoreError>) -> Vec<u8> {
    let value = match event {
        Ok(event) => {
            let type_ = match event.type_ {
                kudurru_storage::EventType::Added => "ADDED",
                kudurru_storage::EventType::Modified => "MODIFIED",
                kudurru_storage::EventType::Deleted => "DELETED",
                kudurru_storage::EventType::Bookmark => "BOOKMARK",
            };
            json!({ "type": type_, "object": to_json(&event.object) })
        }
        Err(e) => {
            let error = store_error(clone_error(e));
            json!({ "type": "ERROR", "object": { "code": error.status, "reason": error.code, "message": error.message } })
        }
    };
    let mut line = serde_json::to_vec(&value).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The parts of a store error an event line needs (the error itself is not `Clone`).
fn clone_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Gone { requested, oldest } => StoreError::Gone {
            requested: *requested,
            oldest: *oldest,
        },
        StoreError::Lagged { kind, last_seen } => StoreError::Lagged {
            kind: kind.clone(),
            last_seen: *last_seen,
        },
        other => StoreError::invalid("watch", other.to_string()),
    }
}

fn patch(
    store: &dyn ObjectStore,
    actor: &Actor,
    r: &Resource,
    name: &str,
    body: Option<&[u8]>,
) -> Result<Outcome, HttpError> {
    let patch = json_object(body)?;
    check_fields(&patch)?;
    let precondition = match patch.get("metadata").and_then(|m| m.get("resourceVersion")) {
        Some(Value::String(v)) => Some(parse_resource_version(v).map_err(|e| {
            HttpError::new(400, "invalid_value", e).with_key("metadata.resourceVersion")
        })?),
        Some(_) => {
            return Err(HttpError::new(
                400,
                "invalid_value",
                "resourceVersion is a string of digits",
            )
            .with_key("metadata.resourceVersion"));
        }
        None => None,
    };
    if patch.contains_key("status") {
        return Err(HttpError::new(
            400,
            "invalid_value",
            "status is written through /status, not patched",
        )
        .with_key("status"));
    }
    for attempt in 0.. {
        let current = store.get(r.kind, name).map_err(store_error)?;
        let mut merged = to_json(&current);
        merge_patch(&mut merged, &Value::Object(patch.clone()));
        let mut object: Object = serde_json::from_value(merged)
            .map_err(|e| HttpError::new(400, "invalid_value", e.to_string()))?;
        object.kind = r.kind.to_owned();
        object.metadata.name = name.to_owned();
        object.metadata.resource_version =
            precondition.unwrap_or(current.metadata.resource_version);
        match store.update(actor, &object) {
            Ok(updated) => return Ok(Outcome::Json(200, to_json(&updated))),
            // Without a precondition the patch applies to whatever is current: read again.
            Err(StoreError::Conflict { .. })
                if precondition.is_none() && attempt < PATCH_RETRIES => {}
            Err(e) => return Err(store_error(e)),
        }
    }
    unreachable!("the loop returns")
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        unreachable!("made an object just above")
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn audit(store: &dyn ObjectStore, query: &Query) -> Result<Outcome, HttpError> {
    let time = |key: &str| -> Result<Option<Timestamp>, HttpError> {
        query
            .get(key)
            .map(|text| {
                Timestamp::parse_rfc3339(text).ok_or_else(|| {
                    HttpError::new(
                        400,
                        "invalid_value",
                        format!("{text:?} is not an RFC 3339 time (2026-12-06T10:00:00Z)"),
                    )
                    .with_key(key)
                })
            })
            .transpose()
    };
    let limit = query.number("limit")?.unwrap_or(DEFAULT_AUDIT_RECORDS);
    if limit == 0 || limit > MAX_AUDIT_RECORDS {
        return Err(HttpError::new(
            400,
            "invalid_value",
            format!("limit must be 1 to {MAX_AUDIT_RECORDS}"),
        )
        .with_key("limit"));
    }
    let audit_query = AuditQuery {
        since: time("since")?,
        until: time("until")?,
        actor: query.get("actor").map(str::to_owned),
        kind: query.get("kind").map(str::to_owned),
        name: query.get("name").map(str::to_owned),
        limit,
    };
    let records = store.audit_query(&audit_query).map_err(store_error)?;
    Ok(Outcome::Json(200, json!({ "records": records })))
}

/// The object in a request body, for `r`, named `name` when the path names it.
fn object_body(r: &Resource, body: Option<&[u8]>, name: Option<&str>) -> Result<Object, HttpError> {
    let map = json_object(body)?;
    check_fields(&map)?;
    if let Some(kind) = map.get("kind")
        && kind != r.kind
    {
        return Err(HttpError::new(
            400,
            "invalid_value",
            format!("kind {kind} does not match the path's {}", r.kind),
        )
        .with_key("kind"));
    }
    let mut map = map;
    map.insert("kind".into(), r.kind.into());
    map.entry("metadata").or_insert_with(|| json!({}));
    let mut object: Object = serde_json::from_value(Value::Object(map))
        .map_err(|e| HttpError::new(400, "invalid_value", e.to_string()))?;
    if let Some(name) = name {
        if !object.metadata.name.is_empty() && object.metadata.name != name {
            return Err(HttpError::new(
                400,
                "invalid_value",
                format!(
                    "metadata.name {:?} does not match the path's {name:?}",
                    object.metadata.name
                ),
            )
            .with_key("metadata.name"));
        }
        object.metadata.name = name.to_owned();
    }
    Ok(object)
}

fn require_version(object: &Object) -> Result<(), HttpError> {
    if object.metadata.resource_version == 0 {
        return Err(HttpError::new(
            400,
            "invalid_value",
            "an update carries the resourceVersion it was read at (GET the object first), or use PATCH",
        )
        .with_key("metadata.resourceVersion"));
    }
    Ok(())
}

/// The top-level and `metadata` fields an object may have: anything else is a mistake that
/// would otherwise be dropped silently.
fn check_fields(map: &Map<String, Value>) -> Result<(), HttpError> {
    const TOP: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
    const METADATA: &[&str] = &[
        "name",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "labels",
        "annotations",
    ];
    let unknown = |field: String| {
        HttpError::new(
            400,
            "unknown_field",
            format!("no field {field:?} in an object"),
        )
        .with_key(&field)
    };
    if let Some(field) = map.keys().find(|k| !TOP.contains(&k.as_str())) {
        return Err(unknown(field.clone()));
    }
    if let Some(metadata) = map.get("metadata") {
        let Some(metadata) = metadata.as_object() else {
            return Err(
                HttpError::new(400, "invalid_value", "metadata must be an object")
                    .with_key("metadata"),
            );
        };
        if let Some(field) = metadata.keys().find(|k| !METADATA.contains(&k.as_str())) {
            return Err(unknown(format!("metadata.{field}")));
        }
    }
    Ok(())
}

fn json_object(body: Option<&[u8]>) -> Result<Map<String, Value>, HttpError> {
    let body = body.unwrap_or_default();
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(HttpError::new(
            400,
            "invalid_json",
            "the body must be a JSON object",
        )),
        Err(e) => Err(HttpError::new(400, "invalid_json", e.to_string())),
    }
}

fn to_json(object: &Object) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// The HTTP error for a store error: the status Kubernetes would answer.
pub fn store_error(e: StoreError) -> HttpError {
    let message = e.to_string();
    match e {
        StoreError::NotFound { .. } => HttpError::new(404, "not_found", message),
        StoreError::AlreadyExists { .. } => HttpError::new(409, "already_exists", message),
        StoreError::Conflict { current, .. } => HttpError::new(409, "conflict", message)
            .with_key("metadata.resourceVersion")
            .with_current_resource_version(current.to_string()),
        StoreError::Gone { .. } => HttpError::new(410, "gone", message),
        StoreError::Lagged { .. } => HttpError::new(410, "lagged", message),
        StoreError::UnknownKind { .. } => HttpError::new(404, "unknown_kind", message),
        // The etcd driver: etcd unreachable, or this node's leadership lost mid-write.
        StoreError::Unavailable { .. } => HttpError::new(503, "store_unavailable", message),
        StoreError::Fenced { .. } => HttpError::new(503, "fenced", message),
        StoreError::Invalid { field, .. } => {
            HttpError::new(400, "invalid_value", message).with_key(&field)
        }
        other => {
            tracing::error!(error = %other, "the object store failed");
            HttpError::new(500, "storage_error", other.to_string())
        }
    }
}

/// A request's query string, decoded.
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Decodes `text` (`a=1&b=x%20y`).
    pub(crate) fn parse(text: &str) -> Result<Self, HttpError> {
        let mut pairs = Vec::new();
        for part in text.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let decode = |s: &str| {
                percent_decode(s).ok_or_else(|| {
                    HttpError::new(
                        400,
                        "invalid_query",
                        format!("{part:?} is not percent-encoded UTF-8"),
                    )
                    // The parameter as written: its decoded name may be what failed.
                    .with_key(key)
                })
            };
            pairs.push((decode(key)?, decode(value)?));
        }
        Ok(Self(pairs))
    }

    /// The keys, in order, repeats included.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    /// The first value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `key` as a boolean: absent, `false` or `0` are false; `true`, `1` or empty true.
    pub(crate) fn flag(&self, key: &str) -> Result<bool, HttpError> {
        match self.get(key) {
            None | Some("false" | "0") => Ok(false),
            Some("true" | "1" | "") => Ok(true),
            Some(other) => Err(HttpError::new(
                400,
                "invalid_value",
                format!("{other:?}: expected true or false"),
            )
            .with_key(key)),
        }
    }

    fn number(&self, key: &str) -> Result<Option<usize>, HttpError> {
        self.get(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    HttpError::new(
                        400,
                        "invalid_value",
                        format!("{v:?}: expected a whole number"),
                    )
                    .with_key(key)
                })
            })
            .transpose()
    }

    fn version(&self, key: &str) -> Result<Option<u64>, HttpError> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                parse_resource_version(v)
                    .map_err(|e| HttpError::new(400, "invalid_value", e).with_key(key))
            })
            .transpose()
    }

    fn selector(&self) -> Result<LabelSelector, HttpError> {
        match self.get("labelSelector") {
            None => Ok(LabelSelector::default()),
            Some(text) => LabelSelector::parse(text).map_err(store_error),
        }
    }
}

/// `%XX` and `+` decoded; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_to_their_targets_and_nothing_else() {
        let r = resource("clientgroups").unwrap();
        assert_eq!(
            Target::parse("/api/v1/clientgroups"),
            Some(Target::Collection(r))
        );
        assert_eq!(
            Target::parse("/api/v1/clientgroups/kids"),
            Some(Target::Object(r, "kids".into()))
        );
        assert_eq!(
            Target::parse("/api/v1/clientgroups/kids/status"),
            Some(Target::Status(r, "kids".into()))
        );
        assert_eq!(Target::parse("/api/v1/audit"), Some(Target::Audit));
        for none in [
            "/api/v1/nothings",
            "/api/v1/clientgroups/",
            "/api/v1/clientgroups/a/b",
            "/api/v1/audit/x",
            "/api/v2/clientgroups",
        ] {
            assert_eq!(Target::parse(none), None, "{none}");
        }
    }

    #[test]
    fn permissions_follow_the_roles() {
        let r = resource("clientgroups").unwrap();
        let object = Target::Object(r, "a".into());
        assert_eq!(object.permission("GET"), Some(Permission::ObjectsRead));
        assert_eq!(object.permission("PUT"), Some(Permission::ObjectsWrite));
        assert_eq!(object.permission("POST"), None);
        assert_eq!(
            Target::Status(r, "a".into()).permission("PUT"),
            Some(Permission::ObjectsAdmin)
        );
        assert_eq!(Target::Audit.permission("GET"), Some(Permission::AuditRead));
    }

    #[test]
    fn rfc7386_merge_patch() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut target, &json!({"a": "z", "c": {"f": null}, "h": [1]}));
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}, "h": [1]}));
    }

    #[test]
    fn queries_decode_and_refuse_bad_escapes() {
        let q = Query::parse("labelSelector=app%3Dweb%2C%21old&limit=5&watch").unwrap();
        assert_eq!(q.get("labelSelector"), Some("app=web,!old"));
        assert_eq!(q.number("limit").unwrap(), Some(5));
        assert!(q.flag("watch").unwrap());
        assert!(Query::parse("a=%zz").is_err());
        assert_eq!(
            Query::parse("limit=x")
                .unwrap()
                .number("limit")
                .unwrap_err()
                .key
                .as_deref(),
            Some("limit")
        );
    }

    #[test]
    fn a_client_group_named_default_is_refused_as_built_in() {
        let store = kudurru_storage::MemoryStore::new(kudurru_storage::StoreOptions::new(
            super::super::registry(),
        ));
        let actor = Actor::principal("token:test").unwrap();
        let r = resource("clientgroups").unwrap();
        let body = br#"{"metadata": {"name": "default"}, "spec": {"clients": ["192.0.2.0/24"]}}"#;
        let Err(e) = handle(
            &store,
            &actor,
            "POST",
            &Target::Collection(r),
            "",
            Some(body),
        ) else {
            panic!("created a ClientGroup named default");
        };
        assert_eq!((e.status, e.code), (400, "reserved_name"));
        assert_eq!(e.key.as_deref(), Some("metadata.name"));
        let body = br#"{"metadata": {"name": "kids"}, "spec": {"clients": ["192.0.2.0/24"]}}"#;
        assert!(
            handle(
                &store,
                &actor,
                "POST",
                &Target::Collection(r),
                "",
                Some(body)
            )
            .is_ok()
        );
    }
}
