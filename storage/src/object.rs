//! Objects shaped like Kubernetes': `kind`, `metadata`, `spec`, `status`.
//!
//! The store is generic over kinds: `spec` is a JSON value that the kind's validator checks,
//! and a kind's typed view (BlockList, Zone, ...) is built from it by the kind's own module.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::time::Timestamp;

/// One stored object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    /// The kind, registered in the store's [`crate::KindRegistry`] (`BlockList`, `Zone`).
    pub kind: String,
    /// Identity, versions and the user's labels and annotations.
    pub metadata: ObjectMeta,
    /// What the user asks for; checked by the kind's validator.
    #[serde(default = "empty_object")]
    pub spec: Value,
    /// What the controllers observed; written through the status subresource only.
    #[serde(default)]
    pub status: ObjectStatus,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl Object {
    /// A new object of `kind` named `name` with `spec`, ready for [`crate::Store::create`].
    pub fn new(kind: impl Into<String>, name: impl Into<String>, spec: Value) -> Self {
        Self {
            kind: kind.into(),
            metadata: ObjectMeta {
                name: name.into(),
                ..ObjectMeta::default()
            },
            spec,
            status: ObjectStatus::default(),
        }
    }

    /// The object's key: kind and name.
    pub fn key(&self) -> ObjectKey<'_> {
        ObjectKey {
            kind: &self.kind,
            name: &self.metadata.name,
        }
    }
}

/// An object's kind and name, the two parts of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey<'a> {
    /// The kind.
    pub kind: &'a str,
    /// The name.
    pub name: &'a str,
}

/// Kubernetes' `ObjectMeta`, the fields kudurru uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// A DNS label (RFC 1123): 1 to 63 of `a-z`, `0-9`, `-`, starting and ending alphanumeric.
    pub name: String,
    /// Set by the store at create; a re-created object gets a new one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The store revision of the object's last change, rendered as a string; 0 (absent) before
    /// create. An update or a status update must carry the current one.
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        serialize_with = "version_to_string",
        deserialize_with = "version_from_string"
    )]
    pub resource_version: u64,
    /// Starts at 1; bumped by the store when, and only when, `spec` changes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
    /// Set by the store at create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Timestamp>,
    /// Labels, matched by label selectors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations, such as [`crate::ENABLED_ANNOTATION`] and [`crate::COMMENT_ANNOTATION`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn version_to_string<S: Serializer>(version: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(version)
}

fn version_from_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_resource_version(&text).map_err(serde::de::Error::custom)
}

/// Parses a resourceVersion as metadata renders it: decimal, no sign; `""` is 0 (unset).
pub fn parse_resource_version(text: &str) -> Result<u64, String> {
    if text.is_empty() {
        return Ok(0);
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("resourceVersion {text:?} is not a decimal number"));
    }
    text.parse()
        .map_err(|_| format!("resourceVersion {text:?} is out of range"))
}

/// An object's `status`: the conditions every kind carries, plus the kind's own fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: u64,
    /// Conditions, at most one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The kind's own status fields.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// One condition, as Kubernetes' `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type, CamelCase (`Ready`, `Disabled`).
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// A CamelCase reason (`Disabled`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When `status` last changed.
    pub last_transition_time: Timestamp,
}

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}
