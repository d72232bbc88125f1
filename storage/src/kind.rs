//! Kinds: each registers its name and a validator for its `spec`; the store checks names,
//! labels and annotations the same way for every kind.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::object::Object;

/// A `spec` validation failure: the field's path (`spec.size`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The path of the field, from the object's root (`spec.sources[0].url`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// A failure of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<FieldError> for StoreError {
    fn from(error: FieldError) -> Self {
        Self::Invalid {
            field: error.field,
            message: error.message,
        }
    }
}

/// Checks a kind's `spec`; the store has already checked that it is a JSON object.
pub type SpecValidator = fn(&Value) -> Result<(), FieldError>;

/// What a kind registers: its name and its spec validator.
#[derive(Clone, Copy, Debug)]
pub struct KindSchema {
    /// The kind's name, CamelCase ASCII letters and digits (`BlockList`).
    pub kind: &'static str,
    /// Checks `spec`.
    pub validate_spec: SpecValidator,
}

/// The kinds a store accepts; shared by every driver of one process.
#[derive(Clone, Debug, Default)]
pub struct KindRegistry {
    kinds: BTreeMap<&'static str, KindSchema>,
}

impl KindRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `schema`; a kind whose name is not CamelCase ASCII alphanumerics is refused.
    pub fn register(&mut self, schema: KindSchema) -> Result<&mut Self> {
        let valid = schema.kind.len() <= 63
            && schema.kind.starts_with(|c: char| c.is_ascii_uppercase())
            && schema.kind.bytes().all(|b| b.is_ascii_alphanumeric());
        if !valid {
            return Err(StoreError::invalid(
                "kind",
                format!(
                    "kind name {:?} must be CamelCase ASCII letters and digits",
                    schema.kind
                ),
            ));
        }
        self.kinds.insert(schema.kind, schema);
        Ok(self)
    }

    /// The registry, shared.
    pub fn into_shared(self) -> Arc<Self> {
        Arc::new(self)
    }

    /// The schema of `kind`, or [`StoreError::UnknownKind`].
    pub fn schema(&self, kind: &str) -> Result<&KindSchema> {
        self.kinds.get(kind).ok_or_else(|| StoreError::UnknownKind {
            kind: kind.to_owned(),
        })
    }

    /// The registered kind names, sorted.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kinds.keys().copied()
    }

    /// Checks everything the caller controls in `object`: kind, name, labels, annotations, spec.
    pub fn validate(&self, object: &Object) -> Result<()> {
        let schema = self.schema(&object.kind)?;
        validate_name(&object.metadata.name)?;
        validate_labels(&object.metadata.labels)?;
        validate_annotations(&object.metadata.annotations)?;
        if !object.spec.is_object() {
            return Err(StoreError::invalid("spec", "must be a JSON object"));
        }
        (schema.validate_spec)(&object.spec)?;
        Ok(())
    }
}

/// Checks that `name` is a DNS label as RFC 1123 allows it, lowercase: 1 to 63 of `a-z`,
/// `0-9` and `-`, starting and ending alphanumeric.
pub fn validate_name(name: &str) -> Result<()> {
    dns_label(name).map_err(|message| StoreError::invalid("metadata.name", message))
}

fn dns_label(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > 63 {
        return Err(format!("{text:?} is longer than 63 characters"));
    }
    if !text
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "{text:?} may contain only lowercase letters, digits and '-'"
        ));
    }
    if text.starts_with('-') || text.ends_with('-') {
        return Err(format!(
            "{text:?} must start and end with a letter or digit"
        ));
    }
    Ok(())
}

// A qualified name as Kubernetes checks label and annotation keys: an optional DNS-subdomain
// prefix and '/', then 1 to 63 of alphanumerics, '-', '_', '.', alphanumeric at both ends.
fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() || prefix.len() > 253 {
            return Err(format!("prefix of {key:?} must be 1 to 253 characters"));
        }
        for label in prefix.split('.') {
            dns_label(label).map_err(|message| format!("prefix of {key:?}: {message}"))?;
        }
    }
    simple_name(name).map_err(|message| format!("key {key:?}: {message}"))
}

fn simple_name(text: &str) -> Result<(), String> {
    if text.is_empty() || text.len() > 63 {
        return Err("name part must be 1 to 63 characters".into());
    }
    let edge_ok = |c: char| c.is_ascii_alphanumeric();
    if !text.starts_with(edge_ok) || !text.ends_with(edge_ok) {
        return Err("name part must start and end with a letter or digit".into());
    }
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("name part may contain only letters, digits, '-', '_' and '.'".into());
    }
    Ok(())
}

fn validate_labels(labels: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in labels {
        let field = || format!("metadata.labels[{key:?}]");
        qualified_name(key).map_err(|message| StoreError::invalid(field(), message))?;
        if !value.is_empty() {
            simple_name(value)
                .map_err(|message| StoreError::invalid(field(), format!("value: {message}")))?;
        }
    }
    Ok(())
}

/// The total size Kubernetes allows for one object's annotations.
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

fn validate_annotations(annotations: &BTreeMap<String, String>) -> Result<()> {
    let mut total = 0;
    for (key, value) in annotations {
        qualified_name(key).map_err(|message| {
            StoreError::invalid(format!("metadata.annotations[{key:?}]"), message)
        })?;
        total += key.len() + value.len();
    }
    if total > ANNOTATIONS_MAX_BYTES {
        return Err(StoreError::invalid(
            "metadata.annotations",
            format!("{total} bytes is more than {ANNOTATIONS_MAX_BYTES}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_dns_labels() {
        for good in ["a", "home-lan", "0x1", &"a".repeat(63)] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", "ä", &"a".repeat(64)] {
            let Err(StoreError::Invalid { field, .. }) = validate_name(bad) else {
                panic!("{bad:?} accepted");
            };
            assert_eq!(field, "metadata.name");
        }
    }

    #[test]
    fn label_keys_take_an_optional_subdomain_prefix() {
        assert!(qualified_name("kudurru.io/enabled").is_ok());
        assert!(qualified_name("tier").is_ok());
        assert!(qualified_name("Tier_1.x").is_ok());
        for bad in ["", "/x", "a/", "-x", "UP.per/x", "a/b/c", "x y"] {
            assert!(qualified_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
