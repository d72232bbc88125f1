//! The kinds and their spec rules. A spec is checked whole when it is written, and every
//! error names its field (`spec.sources[1].url`). Each kind's module also turns a stored spec
//! into the typed spec `kudurru_core::policy` compiles (the list manager reads them so), with
//! the same function the store's validator runs: what the store accepted always converts.
//!
//! ```text
//! JSON spec ─▶ kinds::{block_list, client_group, policy} ─▶ BlockListSpec | ClientGroupSpec | PolicySpec
//!           ─▶ kinds::{zone, record_set} ─▶ ZoneSpec | RecordSetSpec (the zone manager's)
//!                 └─ the store's validator: the same function, result dropped
//! ```

mod block_list;
mod client_group;
mod policy;
mod query_log;
mod record_set;
mod schedule;
mod settings;
mod token;
mod zone;

use kudurru_storage::{FieldError, KindSchema};
use serde_json::{Map, Value};

pub use block_list::{BLOCK_LIST, block_list};
pub use client_group::{CLIENT_GROUP, RESERVED_GROUP_NAMES, client_group};
pub use policy::{POLICY, policy};
pub use query_log::{MAX_PURGES, QUERY_LOG, QUERY_LOG_LOCAL};
pub use record_set::{RECORD_SET, RecordSetSpec, record_set};
pub use settings::{SETTINGS, SETTINGS_NAME};
pub use token::TOKEN;
pub use zone::{
    PrimaryServer, PrimarySpec, SecondarySpec, SerialPolicy, SoaSpec, TransferSpec, UpdateSpec,
    ZONE, ZoneSpec, ZoneType, zone,
};

/// Most entries in one list of a spec.
const MAX_ENTRIES: usize = 10_000;

/// Every kind's schema.
pub(super) const SCHEMAS: &[KindSchema] = &[
    KindSchema {
        kind: CLIENT_GROUP,
        validate_spec: |spec| client_group(spec).map(drop),
    },
    KindSchema {
        kind: BLOCK_LIST,
        validate_spec: |spec| block_list(spec).map(drop),
    },
    KindSchema {
        kind: POLICY,
        validate_spec: |spec| policy(spec).map(drop),
    },
    KindSchema {
        kind: ZONE,
        validate_spec: |spec| zone(spec).map(drop),
    },
    KindSchema {
        kind: RECORD_SET,
        validate_spec: |spec| record_set(spec).map(drop),
    },
    KindSchema {
        kind: SETTINGS,
        validate_spec: settings::settings,
    },
    KindSchema {
        kind: QUERY_LOG,
        validate_spec: query_log::query_log,
    },
    KindSchema {
        kind: TOKEN,
        validate_spec: token::token,
    },
];

/// `value` as an object with only `allowed` fields; `what` names the thing in the message
/// (`a ClientGroup has clients and clientIds`).
fn object<'a>(
    value: &'a Value,
    path: &str,
    allowed: &[&str],
    what: &str,
) -> Result<&'a Map<String, Value>, FieldError> {
    let Some(map) = value.as_object() else {
        return Err(FieldError::new(path, "must be an object"));
    };
    if let Some(field) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(FieldError::new(
            format!("{path}.{field}"),
            format!("unknown field: {what}"),
        ));
    }
    Ok(map)
}

/// The strings of `map[field]` at `path.field` (absent: none), at most [`MAX_ENTRIES`].
fn strings<'a>(
    map: &'a Map<String, Value>,
    path: &str,
    field: &str,
) -> Result<Vec<&'a str>, FieldError> {
    let Some(value) = map.get(field) else {
        return Ok(Vec::new());
    };
    let Some(items) = value.as_array() else {
        return Err(FieldError::new(
            format!("{path}.{field}"),
            "must be a list of strings",
        ));
    };
    if items.len() > MAX_ENTRIES {
        return Err(FieldError::new(
            format!("{path}.{field}"),
            format!("at most {MAX_ENTRIES} entries"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str()
                .ok_or_else(|| FieldError::new(format!("{path}.{field}[{i}]"), "must be a string"))
        })
        .collect()
}

/// `map[field]` as a string, if present.
fn optional_string<'a>(
    map: &'a Map<String, Value>,
    path: &str,
    field: &str,
) -> Result<Option<&'a str>, FieldError> {
    match map.get(field) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(FieldError::new(
            format!("{path}.{field}"),
            "must be a string",
        )),
    }
}

/// `map[field]` as a whole number in `range`, if present.
fn optional_number(
    map: &Map<String, Value>,
    path: &str,
    field: &str,
    (low, high): (u64, u64),
) -> Result<Option<u64>, FieldError> {
    let Some(value) = map.get(field) else {
        return Ok(None);
    };
    match value.as_u64() {
        Some(n) if (low..=high).contains(&n) => Ok(Some(n)),
        _ => Err(FieldError::new(
            format!("{path}.{field}"),
            format!("must be a whole number from {low} to {high}"),
        )),
    }
}

/// A duration written like `6h` or `90s` (humantime), from `min` to `max`.
fn duration(
    text: &str,
    field: &str,
    min: std::time::Duration,
    max: Option<std::time::Duration>,
) -> Result<std::time::Duration, FieldError> {
    let d = humantime::parse_duration(text).map_err(|e| {
        FieldError::new(
            field,
            format!("{text:?} is not a duration such as 90s, 6h or 1d: {e}"),
        )
    })?;
    if d < min || max.is_some_and(|max| d > max) {
        let bounds = match max {
            Some(max) => format!(
                "from {} to {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
            None => format!("at least {}", humantime::format_duration(min)),
        };
        return Err(FieldError::new(field, format!("must be {bounds}")));
    }
    Ok(d)
}

/// An object name another object refers to (a DNS label, as the store names objects).
fn reference(name: &str, field: String) -> Result<String, FieldError> {
    kudurru_storage::validate_name(name)
        .map(|()| name.to_owned())
        .map_err(|e| FieldError::new(field, format!("{name:?} is not an object name: {e}")))
}

/// A domain name as a lowercase wire name (IDNA to punycode), or an error naming `field`.
fn wire_name(text: &str, field: String) -> Result<Box<[u8]>, FieldError> {
    kudurru_core::policy::name::to_wire(text)
        .map(Vec::into_boxed_slice)
        .map_err(|e| FieldError::new(field, format!("{text:?} is not a domain name: {e}")))
}
