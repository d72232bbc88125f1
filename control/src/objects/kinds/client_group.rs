//! `ClientGroup`: who a policy applies to.
//! ```text
//! spec:
//!   clients:   ["192.0.2.0/24", "2001:db8::/48", "198.51.100.7"]   addresses and prefixes
//!   clientIds: ["kids", "office"]   DoH path segment (/dns-query/{id}) or TLS SNI's first label
//! ```
//! The group `default` is built in (clients no other group holds): a ClientGroup of that name
//! is refused.

use kudurru_core::Prefix;
use kudurru_core::policy::ClientGroupSpec;
use kudurru_storage::FieldError;
use serde_json::Value;

use super::{object, strings};

/// The `ClientGroup` kind.
pub const CLIENT_GROUP: &str = "ClientGroup";

/// Names a ClientGroup may not take: `default` is the built-in group of every client no
/// other group holds.
pub const RESERVED_GROUP_NAMES: &[&str] = &[kudurru_core::policy::DEFAULT_GROUP];

/// `ClientGroup.spec`: `clients` (addresses or prefixes) and `clientIds` (DNS labels); at
/// least one entry; nothing else.
pub fn client_group(spec: &Value) -> Result<ClientGroupSpec, FieldError> {
    let map = object(
        spec,
        "spec",
        &["clients", "clientIds"],
        "a ClientGroup has clients and clientIds",
    )?;
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
    })
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
}
