//! `ClientGroup`: who a policy applies to.
//! ```text
//! spec:
//!   clients:   ["192.0.2.0/24", "2001:db8::/48", "198.51.100.7"]   addresses and prefixes
//!   clientIds: ["kids", "office"]   DoH path segment (/dns-query/{id}) or TLS SNI's first label
//!   queryLog:                          optional: overrides querylog.privacy / querylog.retention
//!     privacy:   truncate              full | truncate | pseudonymize | none | omit
//!     retention: 1d                    a duration; 0 = kept by age forever
//! ```
//! The group `default` is built in (clients no other group holds): a ClientGroup of that name
//! is refused.

use kudurru_core::Prefix;
use kudurru_core::policy::{ClientGroupSpec, GroupQueryLog};
use kudurru_core::querylog::Privacy;
use kudurru_storage::FieldError;
use serde_json::Value;

use super::{duration, object, optional_string, strings};

/// The `ClientGroup` kind.
pub const CLIENT_GROUP: &str = "ClientGroup";

/// Names a ClientGroup may not take: `default` is the built-in group of every client no
/// other group holds.
pub const RESERVED_GROUP_NAMES: &[&str] = &[kudurru_core::policy::DEFAULT_GROUP];

/// `ClientGroup.spec`: `clients` (addresses or prefixes) and `clientIds` (DNS labels), at
/// least one entry; and optionally `queryLog` (`privacy`, `retention`); nothing else.
pub fn client_group(spec: &Value) -> Result<ClientGroupSpec, FieldError> {
    let map = object(
        spec,
        "spec",
        &["clients", "clientIds", "queryLog"],
        "a ClientGroup has clients, clientIds and queryLog",
    )?;
    let query_log = match map.get("queryLog") {
        None => GroupQueryLog::default(),
        Some(value) => query_log(value)?,
    };
    let clients = strings(map, "spec", "clients")?
        .iter()
        .enumerate()
        .map(|(i, client)| {
            client.parse::<Prefix>().map_err(|e| {
                FieldError::new(
                    format!("spec.clients[{i}]"),
                    format!(
                        "{client:?} is not an IPv4 or IPv6 address or prefix (192.0.2.0/24, 2001:db8::/48): {e}"
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ids = strings(map, "spec", "clientIds")?;
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
    Ok(ClientGroupSpec {
        clients,
        client_ids: ids.into_iter().map(str::to_owned).collect(),
        query_log,
    })
}

/// `spec.queryLog`: `privacy` (a mode) and `retention` (a duration, `0` for no limit).
fn query_log(value: &Value) -> Result<GroupQueryLog, FieldError> {
    let path = "spec.queryLog";
    let map = object(
        value,
        path,
        &["privacy", "retention"],
        "queryLog has privacy and retention",
    )?;
    let privacy = optional_string(map, path, "privacy")?
        .map(|text| {
            Privacy::from_label(text).ok_or_else(|| {
                FieldError::new(
                    "spec.queryLog.privacy",
                    format!("{text:?} is not full, truncate, pseudonymize, none or omit"),
                )
            })
        })
        .transpose()?;
    let retention = optional_string(map, path, "retention")?
        .map(|text| {
            if text.trim() == "0" {
                Ok(std::time::Duration::ZERO)
            } else {
                duration(
                    text,
                    "spec.queryLog.retention",
                    std::time::Duration::from_secs(1),
                    None,
                )
            }
        })
        .transpose()?;
    Ok(GroupQueryLog { privacy, retention })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn client_groups_take_addresses_prefixes_and_labels_and_name_the_bad_entry() {
        let ok = json!({"clients": ["192.0.2.0/24", "2001:db8::/48", "198.51.100.7", "::1"], "clientIds": ["kids"]});
        let spec = client_group(&ok).unwrap();
        assert_eq!(spec.clients.len(), 4);
        assert_eq!(spec.client_ids, ["kids"]);
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

    #[test]
    fn query_log_settings_convert_and_name_their_bad_field() {
        let spec = client_group(&json!({
            "clients": ["127.0.0.2"],
            "queryLog": {"privacy": "pseudonymize", "retention": "1d"}
        }))
        .unwrap();
        assert_eq!(spec.query_log.privacy, Some(Privacy::Pseudonymize));
        assert_eq!(
            spec.query_log.retention,
            Some(std::time::Duration::from_secs(86_400))
        );
        let forever = client_group(&json!({"clients": ["::1"], "queryLog": {"retention": "0"}}))
            .unwrap()
            .query_log;
        assert_eq!(forever.privacy, None);
        assert_eq!(forever.retention, Some(std::time::Duration::ZERO));
        let plain = client_group(&json!({"clients": ["::1"]})).unwrap();
        assert_eq!(plain.query_log, GroupQueryLog::default());
        let field = |log: Value| {
            client_group(&json!({"clients": ["::1"], "queryLog": log}))
                .unwrap_err()
                .field
        };
        assert_eq!(field(json!({"privacy": "secret"})), "spec.queryLog.privacy");
        assert_eq!(field(json!({"privacy": 1})), "spec.queryLog.privacy");
        assert_eq!(
            field(json!({"retention": "a while"})),
            "spec.queryLog.retention"
        );
        assert_eq!(field(json!({"retain": "1d"})), "spec.queryLog.retain");
        assert_eq!(field(json!("full")), "spec.queryLog");
    }
}
