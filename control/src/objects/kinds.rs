//! The kinds and their spec rules. A spec is checked whole when it is written, and every
//! error names its field (`spec.clients[2]`).
//!
//! `ClientGroup`: who a policy applies to.
//! ```text
//! spec:
//!   clients:   ["192.0.2.0/24", "2001:db8::/48", "198.51.100.7"]   addresses and prefixes
//!   clientIds: ["kids", "office"]   DoH path segment (/dns-query/{id}) or TLS SNI's first label
//! ```

use kudurru_core::Prefix;
use kudurru_storage::{FieldError, KindSchema};
use serde_json::Value;

/// The `ClientGroup` kind.
pub(super) const CLIENT_GROUP: &str = "ClientGroup";

/// Most entries in one list of a spec.
const MAX_ENTRIES: usize = 10_000;

/// Every kind's schema.
pub(super) const SCHEMAS: &[KindSchema] = &[KindSchema {
    kind: CLIENT_GROUP,
    validate_spec: client_group,
}];

/// `ClientGroup.spec`: `clients` (addresses or prefixes) and `clientIds` (DNS labels); at
/// least one entry; nothing else.
fn client_group(spec: &Value) -> Result<(), FieldError> {
    let Some(map) = spec.as_object() else {
        return Err(FieldError::new("spec", "must be an object"));
    };
    if let Some(field) = map.keys().find(|k| *k != "clients" && *k != "clientIds") {
        return Err(FieldError::new(
            format!("spec.{field}"),
            "unknown field: a ClientGroup has clients and clientIds",
        ));
    }
    let clients = strings(spec, "clients")?;
    for (i, client) in clients.iter().enumerate() {
        if client.parse::<Prefix>().is_err() {
            return Err(FieldError::new(
                format!("spec.clients[{i}]"),
                format!(
                    "{client:?} is not an IPv4 or IPv6 address or prefix (192.0.2.0/24, 2001:db8::/48)"
                ),
            ));
        }
    }
    let ids = strings(spec, "clientIds")?;
    for (i, id) in ids.iter().enumerate() {
        let label = !id.is_empty()
            && id.len() <= 63
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !id.starts_with('-')
            && !id.ends_with('-');
        if !label {
            return Err(FieldError::new(
                format!("spec.clientIds[{i}]"),
                format!("{id:?} is not a lowercase DNS label (a-z, 0-9, -, at most 63)"),
            ));
        }
    }
    if clients.is_empty() && ids.is_empty() {
        return Err(FieldError::new(
            "spec",
            "a ClientGroup needs at least one entry in clients or clientIds",
        ));
    }
    Ok(())
}

/// The strings of `spec.field` (absent: none).
fn strings<'a>(spec: &'a Value, field: &str) -> Result<Vec<&'a str>, FieldError> {
    let Some(value) = spec.get(field) else {
        return Ok(Vec::new());
    };
    let Some(items) = value.as_array() else {
        return Err(FieldError::new(
            format!("spec.{field}"),
            "must be a list of strings",
        ));
    };
    if items.len() > MAX_ENTRIES {
        return Err(FieldError::new(
            format!("spec.{field}"),
            format!("at most {MAX_ENTRIES} entries"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str()
                .ok_or_else(|| FieldError::new(format!("spec.{field}[{i}]"), "must be a string"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn client_groups_take_addresses_prefixes_and_labels_and_name_the_bad_entry() {
        let ok = json!({"clients": ["192.0.2.0/24", "2001:db8::/48", "198.51.100.7", "::1"], "clientIds": ["kids"]});
        assert!(client_group(&ok).is_ok());
        let field = |spec: Value| client_group(&spec).unwrap_err().field;
        assert_eq!(
            field(json!({"clients": ["192.0.2.0/24", "nope"]})),
            "spec.clients[1]"
        );
        assert_eq!(
            field(json!({"clients": ["192.0.2.0/33"]})),
            "spec.clients[0]"
        );
        assert_eq!(field(json!({"clientIds": ["Kids"]})), "spec.clientIds[0]");
        assert_eq!(field(json!({"clients": "192.0.2.1"})), "spec.clients");
        assert_eq!(field(json!({"clients": [7]})), "spec.clients[0]");
        assert_eq!(field(json!({"client": []})), "spec.client");
        assert_eq!(field(json!({})), "spec");
        assert_eq!(field(json!([])), "spec");
    }
}
