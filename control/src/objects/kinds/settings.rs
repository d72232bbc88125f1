//! `Settings`: the cluster settings layer as a stored object (name `cluster`), written on every
//! applied `PATCH /api/v1/settings` and rollback so that the audit log holds each version:
//! who, when, the changed keys and the whole settings document after the change. It has no
//! API resource of its own; `/api/v1/settings/history` reads its audit records.

use kudurru_storage::FieldError;
use serde_json::Value;

/// The kind's name.
pub const SETTINGS: &str = "Settings";
/// The one object's name.
pub const SETTINGS_NAME: &str = "cluster";
/// Largest settings document kept.
const MAX_DOCUMENT: usize = 256 * 1024;

/// Checks a `Settings` spec: `{"document": "<TOML>", "changes": [..]}`.
pub(super) fn settings(spec: &Value) -> Result<(), FieldError> {
    let document = spec.get("document").and_then(Value::as_str);
    match document {
        Some(text) if text.len() <= MAX_DOCUMENT => {}
        Some(_) => {
            return Err(FieldError::new(
                "spec.document",
                format!("longer than {MAX_DOCUMENT} bytes"),
            ));
        }
        None => return Err(FieldError::new("spec.document", "required: a string")),
    }
    if !spec.get("changes").is_some_and(Value::is_array) {
        return Err(FieldError::new("spec.changes", "required: an array"));
    }
    Ok(())
}
