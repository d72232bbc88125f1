//! The write rules, once for every in-process driver: a driver supplies a transaction ([`Tx`])
//! and gets the same checks, versions, audit record and watch event as every other.
//!
//! ```text
//!  Op ──▶ validate ──▶ read current ──▶ precondition (resourceVersion) ──▶ next object
//!     ──▶ audit record (chained) ──▶ writes into the Tx ──▶ driver commits ──▶ publish Change
//! ```
//!
//! Every fallible step that is not a write comes before the first write, so a refused change
//! leaves even a non-transactional `Tx` untouched.

use std::sync::Arc;

use crate::audit::{self, Actor, AuditVerb, ChainPoint};
use crate::error::{Result, StoreError};
use crate::kind::{KindRegistry, validate_name};
use crate::object::{Object, ObjectMeta, ObjectStatus};
use crate::store::EventType;
use crate::time::Clock;
use crate::watch::Change;

/// One write transaction of a driver.
pub(crate) trait Tx {
    /// The object `kind`/`name`, if it exists.
    fn object(&mut self, kind: &str, name: &str) -> Result<Option<Object>>;
    /// Stores `object` under its kind and name.
    fn put_object(&mut self, object: &Object) -> Result<()>;
    /// Removes `kind`/`name`.
    fn remove_object(&mut self, kind: &str, name: &str) -> Result<()>;
    /// The store's revision.
    fn revision(&mut self) -> Result<u64>;
    /// Sets the store's revision.
    fn set_revision(&mut self, revision: u64) -> Result<()>;
    /// The audit chain's last record.
    fn audit_head(&mut self) -> Result<ChainPoint>;
    /// Appends `record` and makes it the chain's head.
    fn append_audit(&mut self, record: &audit::Encoded) -> Result<()>;
}

/// A write.
pub(crate) enum Op<'a> {
    Create(&'a Object),
    Update(&'a Object),
    UpdateStatus(&'a Object),
    Delete {
        kind: &'a str,
        name: &'a str,
        precondition: Option<u64>,
    },
}

/// Who writes, with what rules and clock.
pub(crate) struct Context<'a> {
    pub(crate) registry: &'a KindRegistry,
    pub(crate) clock: &'a Clock,
    pub(crate) actor: &'a Actor,
}

/// What a write did: the object to return, and the change to publish once committed (`None`
/// when nothing changed and nothing was written).
pub(crate) struct Outcome {
    pub(crate) object: Object,
    pub(crate) change: Option<Change>,
}

/// Applies `op` in `tx`.
pub(crate) fn execute(tx: &mut impl Tx, context: &Context<'_>, op: Op<'_>) -> Result<Outcome> {
    match op {
        Op::Create(object) => create(tx, context, object),
        Op::Update(object) => update(tx, context, object),
        Op::UpdateStatus(object) => update_status(tx, context, object),
        Op::Delete {
            kind,
            name,
            precondition,
        } => delete(tx, context, kind, name, precondition),
    }
}

fn create(tx: &mut impl Tx, context: &Context<'_>, object: &Object) -> Result<Outcome> {
    context.registry.validate(object)?;
    if object.metadata.resource_version != 0 {
        return Err(StoreError::invalid(
            "metadata.resourceVersion",
            "must not be set on create",
        ));
    }
    let (kind, name) = (&object.kind, &object.metadata.name);
    if tx.object(kind, name)?.is_some() {
        return Err(StoreError::AlreadyExists {
            kind: kind.clone(),
            name: name.clone(),
        });
    }
    let revision = next_revision(tx)?;
    let created = Object {
        kind: kind.clone(),
        metadata: ObjectMeta {
            name: name.clone(),
            uid: new_uid(),
            resource_version: revision,
            generation: 1,
            creation_timestamp: Some((context.clock)()),
            labels: object.metadata.labels.clone(),
            annotations: object.metadata.annotations.clone(),
        },
        spec: object.spec.clone(),
        status: ObjectStatus::default(),
    };
    commit(tx, context, AuditVerb::Create, None, created, revision)
}

fn update(tx: &mut impl Tx, context: &Context<'_>, object: &Object) -> Result<Outcome> {
    context.registry.validate(object)?;
    let current = current_for_write(tx, object)?;
    let mut next = current.clone();
    next.metadata.labels.clone_from(&object.metadata.labels);
    next.metadata
        .annotations
        .clone_from(&object.metadata.annotations);
    if next.spec != object.spec {
        next.spec = object.spec.clone();
        next.metadata.generation += 1;
    }
    if next == current {
        return Ok(unchanged(current));
    }
    let revision = next_revision(tx)?;
    next.metadata.resource_version = revision;
    commit(
        tx,
        context,
        AuditVerb::Update,
        Some(current),
        next,
        revision,
    )
}

fn update_status(tx: &mut impl Tx, context: &Context<'_>, object: &Object) -> Result<Outcome> {
    context.registry.schema(&object.kind)?;
    validate_name(&object.metadata.name)?;
    validate_status(&object.status)?;
    let current = current_for_write(tx, object)?;
    let mut next = current.clone();
    next.status = object.status.clone();
    if next == current {
        return Ok(unchanged(current));
    }
    let revision = next_revision(tx)?;
    next.metadata.resource_version = revision;
    commit(
        tx,
        context,
        AuditVerb::UpdateStatus,
        Some(current),
        next,
        revision,
    )
}

fn delete(
    tx: &mut impl Tx,
    context: &Context<'_>,
    kind: &str,
    name: &str,
    precondition: Option<u64>,
) -> Result<Outcome> {
    context.registry.schema(kind)?;
    validate_name(name)?;
    let current = tx
        .object(kind, name)?
        .ok_or_else(|| StoreError::not_found(kind, name))?;
    if let Some(expected) = precondition {
        check_version(&current, expected)?;
    }
    let revision = next_revision(tx)?;
    let mut last = current.clone();
    last.metadata.resource_version = revision;
    let record = audit::encode(
        tx.audit_head()?,
        &audit::Change {
            actor: context.actor,
            verb: AuditVerb::Delete,
            kind,
            name,
            before: Some(&current),
            after: None,
            revision,
        },
        (context.clock)(),
    )?;
    tx.remove_object(kind, name)?;
    tx.set_revision(revision)?;
    tx.append_audit(&record)?;
    Ok(Outcome {
        object: last.clone(),
        change: Some(Change {
            revision,
            type_: EventType::Deleted,
            before: Some(Arc::new(current)),
            after: Arc::new(last),
        }),
    })
}

// The current object for an update of `object`, whose resourceVersion must be current.
fn current_for_write(tx: &mut impl Tx, object: &Object) -> Result<Object> {
    if object.metadata.resource_version == 0 {
        return Err(StoreError::invalid(
            "metadata.resourceVersion",
            "required: send the resourceVersion the change was made from",
        ));
    }
    let current = tx
        .object(&object.kind, &object.metadata.name)?
        .ok_or_else(|| StoreError::not_found(&object.kind, &object.metadata.name))?;
    check_version(&current, object.metadata.resource_version)?;
    Ok(current)
}

/// The optimistic-concurrency rule: `expected` must be `current`'s resourceVersion.
pub(crate) fn check_version(current: &Object, expected: u64) -> Result<()> {
    if current.metadata.resource_version != expected {
        return Err(StoreError::Conflict {
            kind: current.kind.clone(),
            name: current.metadata.name.clone(),
            expected,
            current: current.metadata.resource_version,
        });
    }
    Ok(())
}

fn next_revision(tx: &mut impl Tx) -> Result<u64> {
    let revision = tx.revision()?;
    revision.checked_add(1).ok_or_else(|| {
        StoreError::invalid(
            "metadata.resourceVersion",
            "the store revision is exhausted",
        )
    })
}

fn unchanged(current: Object) -> Outcome {
    Outcome {
        object: current,
        change: None,
    }
}

// Records `next` (created or changed from `before`) with its audit record.
fn commit(
    tx: &mut impl Tx,
    context: &Context<'_>,
    verb: AuditVerb,
    before: Option<Object>,
    next: Object,
    revision: u64,
) -> Result<Outcome> {
    let record = audit::encode(
        tx.audit_head()?,
        &audit::Change {
            actor: context.actor,
            verb,
            kind: &next.kind,
            name: &next.metadata.name,
            before: before.as_ref(),
            after: Some(&next),
            revision,
        },
        (context.clock)(),
    )?;
    tx.put_object(&next)?;
    tx.set_revision(revision)?;
    tx.append_audit(&record)?;
    let type_ = if before.is_some() {
        EventType::Modified
    } else {
        EventType::Added
    };
    Ok(Outcome {
        object: next.clone(),
        change: Some(Change {
            revision,
            type_,
            before: before.map(Arc::new),
            after: Arc::new(next),
        }),
    })
}

fn validate_status(status: &ObjectStatus) -> Result<()> {
    for reserved in ["observedGeneration", "conditions"] {
        if status.fields.contains_key(reserved) {
            return Err(StoreError::invalid(
                format!("status.{reserved}"),
                "set the typed field, not a kind field of the same name",
            ));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (index, condition) in status.conditions.iter().enumerate() {
        let field = |part: &str| format!("status.conditions[{index}].{part}");
        let camel = |text: &str| {
            text.starts_with(|c: char| c.is_ascii_alphabetic())
                && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && text.len() <= 316
        };
        if !camel(&condition.type_) {
            return Err(StoreError::invalid(
                field("type"),
                format!("{:?} must be CamelCase letters and digits", condition.type_),
            ));
        }
        if !seen.insert(condition.type_.as_str()) {
            return Err(StoreError::invalid(
                field("type"),
                format!("{:?} appears twice", condition.type_),
            ));
        }
        if !condition.reason.is_empty() && !camel(&condition.reason) {
            return Err(StoreError::invalid(
                field("reason"),
                format!(
                    "{:?} must be CamelCase letters and digits",
                    condition.reason
                ),
            ));
        }
    }
    Ok(())
}

/// A random RFC 4122 version 4 UUID.
fn new_uid() -> String {
    let bits: u128 = rand::random();
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uids_are_version_4() {
        let uid = super::new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert!(matches!(&uid[19..20], "8" | "9" | "a" | "b"), "{uid}");
    }
}
