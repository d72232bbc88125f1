//! `Token`: an API token's public facts as a stored object, written when a token is created or
//! revoked over the API (`POST` and `DELETE /api/v1/tokens`), so that the audit log says who
//! created or revoked which token, with which role and lifetime
//! (`GET /api/v1/audit?kind=Token`). Never the secret or its hash: those stay in `tokens.json`.
//! Named by the token's id; it has no API resource of its own.
//!
//! ```text
//! POST /api/v1/tokens      ─▶ tokens.json gains the token ─▶ Token/<id> created  (audit: Create)
//! DELETE /api/v1/tokens/id ─▶ tokens.json loses it       ─▶ Token/<id>.spec.revoked (audit: Update)
//! ```

use kudurru_storage::FieldError;
use serde_json::Value;

/// The kind's name.
pub const TOKEN: &str = "Token";
/// The fields of a spec.
const FIELDS: &[&str] = &["name", "role", "created", "expiresAt", "node", "revoked"];

/// Checks a `Token` spec: `{"name", "role", "created", "expiresAt"[, "node"][, "revoked"]}`,
/// every field a string, the role one of `viewer`, `operator`, `admin`.
pub(super) fn token(spec: &Value) -> Result<(), FieldError> {
    let spec = super::object(
        spec,
        "spec",
        FIELDS,
        "a Token has name, role, created, expiresAt, node and revoked",
    )?;
    for field in ["name", "role", "created", "expiresAt"] {
        if !spec.get(field).is_some_and(Value::is_string) {
            return Err(FieldError::new(
                format!("spec.{field}"),
                "required: a string",
            ));
        }
    }
    for field in ["node", "revoked"] {
        if spec.get(field).is_some_and(|v| !v.is_string()) {
            return Err(FieldError::new(format!("spec.{field}"), "must be a string"));
        }
    }
    let role = spec.get("role").and_then(Value::as_str).unwrap_or_default();
    if crate::tokens::Role::parse(role).is_err() {
        return Err(FieldError::new(
            "spec.role",
            format!("{role:?} is not a role: viewer, operator or admin"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_spec_needs_its_facts_and_a_known_role() {
        let good = json!({"name": "ci", "role": "operator", "created": "t", "expiresAt": "u"});
        assert!(token(&good).is_ok());
        let mut revoked = good.clone();
        revoked["revoked"] = json!("v");
        revoked["node"] = json!("edge-1");
        assert!(token(&revoked).is_ok());
        for (bad, field) in [
            (
                json!({"name": "ci", "role": "operator", "created": "t"}),
                "spec.expiresAt",
            ),
            (
                json!({"name": "ci", "role": "root", "created": "t", "expiresAt": "u"}),
                "spec.role",
            ),
            (
                json!({"name": "ci", "role": "admin", "created": "t", "expiresAt": "u", "revoked": 1}),
                "spec.revoked",
            ),
            (
                json!({"name": "ci", "role": "admin", "created": "t", "expiresAt": "u", "sha256": "ab"}),
                "spec.sha256",
            ),
        ] {
            let error = token(&bad).expect_err("refused");
            assert_eq!(error.field, field, "{bad}");
        }
    }
}
