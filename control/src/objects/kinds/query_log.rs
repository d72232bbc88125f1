//! `QueryLog`: the query-log purges as a stored object (one per node: `local` on a single
//! node, the node's name in a fleet), written on every `DELETE /api/v1/querylog` so that the
//! audit log holds each purge: who, when, the `before` bound and how many entries it deleted.
//! It has no API resource of its own; `GET /api/v1/audit?kind=QueryLog` lists the purges.
//!
//! The spec keeps the last [`MAX_PURGES`] purges, newest first, as one array: an audit
//! record's merge patch replaces an array whole, so each purge's record carries that purge
//! complete (its first element), not only the fields that differ from the previous one.

use kudurru_storage::FieldError;
use serde_json::Value;

/// The kind's name.
pub const QUERY_LOG: &str = "QueryLog";
/// The object's name on a node that is not in a fleet.
pub const QUERY_LOG_LOCAL: &str = "local";
/// Purges the object keeps (the audit log keeps them all, until it is pruned).
pub const MAX_PURGES: usize = 10;
/// The fields of one purge.
const PURGE_FIELDS: &[&str] = &["time", "node", "before", "beforeUnixNs", "deleted"];

/// Checks a `QueryLog` spec: `{"purges": [{"time", "node", "before", "beforeUnixNs",
/// "deleted"}, …]}`, at most [`MAX_PURGES`].
pub(super) fn query_log(spec: &Value) -> Result<(), FieldError> {
    let spec = super::object(spec, "spec", &["purges"], "a QueryLog has purges")?;
    let Some(purges) = spec.get("purges").and_then(Value::as_array) else {
        return Err(FieldError::new("spec.purges", "required: an array"));
    };
    if purges.len() > MAX_PURGES {
        return Err(FieldError::new(
            "spec.purges",
            format!("at most {MAX_PURGES} entries"),
        ));
    }
    for (i, purge) in purges.iter().enumerate() {
        let path = format!("spec.purges[{i}]");
        let purge = super::object(
            purge,
            &path,
            PURGE_FIELDS,
            "a purge has time, node, before, beforeUnixNs and deleted",
        )?;
        for field in ["beforeUnixNs", "deleted"] {
            if !purge.get(field).is_some_and(Value::is_u64) {
                return Err(FieldError::new(
                    format!("{path}.{field}"),
                    "required: a whole number",
                ));
            }
        }
        for field in ["time", "node", "before"] {
            if !purge.get(field).is_some_and(Value::is_string) {
                return Err(FieldError::new(
                    format!("{path}.{field}"),
                    "required: a string",
                ));
            }
        }
    }
    Ok(())
}
