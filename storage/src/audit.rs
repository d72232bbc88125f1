//! The audit log: one record per object change, written in the change's own transaction, with
//! a SHA-256 hash chain over the records.
//!
//! ```text
//!  anchor hash ──▶ record n ──▶ record n+1 ──▶ … ──▶ head
//!  (last pruned)   hash(n) = SHA-256(hash(n-1) ‖ body(n))
//! ```
//!
//! A record's stored value is `[version 1][hash: 32 bytes][body: JSON]`; the hash covers the
//! body's exact bytes, so verifying never re-serializes. Record times never go backwards (a
//! clock step back records the previous time), so time order is chain order and a time range is
//! a key range. Pruning removes the oldest records and keeps the last removed hash as the
//! anchor, so the chain stays verifiable from the first kept record.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Result, StorageError, StoreError};
use crate::object::Object;
use crate::time::Timestamp;

/// The value format version of an audit record.
pub(crate) const RECORD_VERSION: u8 = 1;

/// Who made a change: a principal from the API, or `system:<component>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Actor(String);

impl Actor {
    /// A principal, as the API's authentication names it (`alice`, `token:ci`).
    pub fn principal(name: &str) -> Result<Self> {
        let valid = !name.is_empty()
            && name.len() <= 256
            && !name.starts_with("system:")
            && !name.chars().any(char::is_control);
        if !valid {
            return Err(StoreError::invalid(
                "actor",
                format!("{name:?} must be 1 to 256 characters, no control characters, not system:"),
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// A kudurru component (`system:controller`, `system:listfetcher`).
    pub fn system(component: &str) -> Self {
        let component: String = component
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        Self(format!("system:{component}"))
    }

    /// The actor as recorded.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AuditVerb {
    /// An object was created.
    Create,
    /// An object's spec, labels or annotations changed.
    Update,
    /// An object's status changed.
    UpdateStatus,
    /// An object was deleted.
    Delete,
}

/// One audit record, as [`AuditLog::audit_query`] returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// The record's place in the chain, from 1, without gaps.
    pub seq: u64,
    /// When the change was committed (never earlier than the previous record's time).
    pub time: Timestamp,
    /// Who made it.
    pub actor: String,
    /// What it did.
    pub verb: AuditVerb,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's resourceVersion before the change; 0 for a create.
    pub resource_version_before: u64,
    /// The store revision of the change (for a delete, the deletion's revision).
    pub resource_version_after: u64,
    /// An RFC 7386 merge patch from the object's labels, annotations, spec and status before to
    /// after (`null` for a delete, the whole content for a create).
    pub patch: Value,
    /// SHA-256 over the previous record's hash and this record's body, hex.
    pub hash: String,
}

// The body, as stored and hashed: the record without its hash.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    seq: u64,
    time_unix_millis: i64,
    actor: String,
    verb: AuditVerb,
    kind: String,
    name: String,
    resource_version_before: u64,
    resource_version_after: u64,
    patch: Value,
}

/// The chain's end: the last record's sequence number, hash and time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChainPoint {
    pub(crate) seq: u64,
    pub(crate) hash: [u8; 32],
    pub(crate) time_millis: i64,
}

impl ChainPoint {
    pub(crate) fn encode(&self) -> [u8; 48] {
        let mut bytes = [0; 48];
        bytes[..8].copy_from_slice(&self.seq.to_be_bytes());
        bytes[8..40].copy_from_slice(&self.hash);
        bytes[40..].copy_from_slice(&self.time_millis.to_be_bytes());
        bytes
    }

    pub(crate) fn decode(bytes: &[u8], key: &str) -> Result<Self> {
        let corrupt = || StorageError::Corrupt {
            table: "meta",
            key: key.to_owned(),
            reason: format!("{} bytes, expected 48", bytes.len()),
        };
        let bytes: &[u8; 48] = bytes.try_into().map_err(|_| corrupt())?;
        let mut seq = [0; 8];
        let mut hash = [0; 32];
        let mut time = [0; 8];
        seq.copy_from_slice(&bytes[..8]);
        hash.copy_from_slice(&bytes[8..40]);
        time.copy_from_slice(&bytes[40..]);
        Ok(Self {
            seq: u64::from_be_bytes(seq),
            hash,
            time_millis: i64::from_be_bytes(time),
        })
    }
}

/// A change to record, before it has a place in the chain.
pub(crate) struct Change<'a> {
    pub(crate) actor: &'a Actor,
    pub(crate) verb: AuditVerb,
    pub(crate) kind: &'a str,
    pub(crate) name: &'a str,
    pub(crate) before: Option<&'a Object>,
    pub(crate) after: Option<&'a Object>,
    pub(crate) revision: u64,
}

/// A record ready to store: its key parts and its value bytes.
pub(crate) struct Encoded {
    pub(crate) point: ChainPoint,
    pub(crate) value: Vec<u8>,
}

/// Encodes `change` as the record after `head`, at `now` (or the head's time if that is later).
pub(crate) fn encode(head: ChainPoint, change: &Change<'_>, now: Timestamp) -> Result<Encoded> {
    let time_millis = now.unix_millis().max(head.time_millis).max(0);
    // The head is stored data (for the etcd driver, peer input): a last sequence number at the
    // end of its range is a damaged head, not an overflow.
    let seq = head
        .seq
        .checked_add(1)
        .ok_or_else(|| StorageError::Corrupt {
            table: "meta",
            key: "audit.head".into(),
            reason: "the last audit sequence number is at its maximum".into(),
        })?;
    let body = Body {
        seq,
        time_unix_millis: time_millis,
        actor: change.actor.as_str().to_owned(),
        verb: change.verb,
        kind: change.kind.to_owned(),
        name: change.name.to_owned(),
        resource_version_before: change.before.map_or(0, |o| o.metadata.resource_version),
        resource_version_after: change.revision,
        patch: match change.after {
            None => Value::Null,
            Some(after) => {
                merge_patch(&change.before.map_or(Value::Null, content), &content(after))
            }
        },
    };
    let body = serde_json::to_vec(&body).map_err(|error| {
        StoreError::invalid("object", format!("does not encode as JSON: {error}"))
    })?;
    let hash = chain_hash(&head.hash, &body);
    let mut value = Vec::with_capacity(33 + body.len());
    value.push(RECORD_VERSION);
    value.extend_from_slice(&hash);
    value.extend_from_slice(&body);
    Ok(Encoded {
        point: ChainPoint {
            seq,
            hash,
            time_millis,
        },
        value,
    })
}

fn chain_hash(previous: &[u8; 32], body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(previous);
    hasher.update(body);
    hasher.finalize().into()
}

// What a change may touch: labels, annotations, spec and status.
fn content(object: &Object) -> Value {
    let mut metadata = Map::new();
    metadata.insert("labels".into(), serde_json::json!(object.metadata.labels));
    metadata.insert(
        "annotations".into(),
        serde_json::json!(object.metadata.annotations),
    );
    serde_json::json!({
        "metadata": metadata,
        "spec": object.spec,
        "status": serde_json::to_value(&object.status).unwrap_or(Value::Null),
    })
}

/// The RFC 7386 merge patch that turns `before` into `after`.
pub(crate) fn merge_patch(before: &Value, after: &Value) -> Value {
    match (before, after) {
        (Value::Object(before), Value::Object(after)) => {
            let mut patch = Map::new();
            for key in before.keys() {
                if !after.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            for (key, value) in after {
                match before.get(key) {
                    Some(old) if old == value => {}
                    Some(old) => {
                        patch.insert(key.clone(), merge_patch(old, value));
                    }
                    None => {
                        patch.insert(key.clone(), merge_patch(&Value::Null, value));
                    }
                }
            }
            Value::Object(patch)
        }
        (_, after) => after.clone(),
    }
}

/// Decodes a stored record; `key` names it in errors.
pub(crate) fn decode(value: &[u8], table: &'static str, key: &str) -> Result<AuditRecord> {
    let corrupt = |reason: String| StorageError::Corrupt {
        table,
        key: key.to_owned(),
        reason,
    };
    let (version, rest) = value
        .split_first()
        .ok_or_else(|| corrupt("empty value".into()))?;
    if *version != RECORD_VERSION {
        return Err(StorageError::UnsupportedFormat {
            found: *version,
            supported: RECORD_VERSION,
        }
        .into());
    }
    if rest.len() < 32 {
        return Err(corrupt("shorter than its hash".into()).into());
    }
    let (hash, body) = rest.split_at(32);
    let body: Body =
        serde_json::from_slice(body).map_err(|error| corrupt(format!("body: {error}")))?;
    Ok(AuditRecord {
        seq: body.seq,
        time: Timestamp::from_unix_millis(body.time_unix_millis),
        actor: body.actor,
        verb: body.verb,
        kind: body.kind,
        name: body.name,
        resource_version_before: body.resource_version_before,
        resource_version_after: body.resource_version_after,
        patch: body.patch,
        hash: hex(hash),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Walks a chain: feed it the stored records in key order, then [`ChainWalk::finish`].
pub(crate) struct ChainWalk {
    previous: ChainPoint,
    first: Option<u64>,
    records: u64,
}

impl ChainWalk {
    /// A walk that starts after `anchor` (the last pruned record; zero if none was pruned).
    pub(crate) fn new(anchor: ChainPoint) -> Self {
        Self {
            previous: anchor,
            first: None,
            records: 0,
        }
    }

    /// Checks the record stored under (`time_millis`, `seq`) with `value`.
    pub(crate) fn step(&mut self, time_millis: i64, seq: u64, value: &[u8]) -> Result<()> {
        let broken = |reason: String| StorageError::ChainBroken { seq, reason };
        let record = decode(value, "audit", &format!("({time_millis}, {seq})"))?;
        let expected = self.previous.seq.wrapping_add(1);
        if seq != expected {
            return Err(broken(format!("expected record {expected}")).into());
        }
        if record.seq != seq || record.time.unix_millis() != time_millis {
            return Err(broken("key does not match the record's body".into()).into());
        }
        if time_millis < self.previous.time_millis {
            return Err(broken("time goes backwards".into()).into());
        }
        let body = &value[33..];
        let hash = chain_hash(&self.previous.hash, body);
        if hash[..] != value[1..33] {
            return Err(broken("hash does not match the previous hash and the body".into()).into());
        }
        self.first.get_or_insert(seq);
        self.records += 1;
        self.previous = ChainPoint {
            seq,
            hash,
            time_millis,
        };
        Ok(())
    }

    /// Checks that the walk ended at `head`, the chain end the store recorded.
    pub(crate) fn finish(self, head: ChainPoint) -> Result<ChainReport> {
        if self.previous.seq != head.seq || self.previous.hash != head.hash {
            return Err(StorageError::ChainBroken {
                seq: self.previous.seq,
                reason: format!(
                    "the chain ends at record {} but the store recorded {} as its last",
                    self.previous.seq, head.seq
                ),
            }
            .into());
        }
        Ok(ChainReport {
            first_seq: self.first,
            last_seq: head.seq,
            records: self.records,
        })
    }
}

/// What a verification found: the kept records all chain from the anchor to the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainReport {
    /// The first kept record; `None` when no record is kept.
    pub first_seq: Option<u64>,
    /// The last record ever written; 0 if none.
    pub last_seq: u64,
    /// How many records were checked.
    pub records: u64,
}

/// What a prune removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PruneReport {
    /// Records removed.
    pub removed: u64,
    /// The sequence number the chain is now anchored after (the last removed record ever).
    pub anchor_seq: u64,
}

/// Which records [`AuditLog::audit_query`] returns; every field set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// At or after this time.
    pub since: Option<Timestamp>,
    /// Before this time.
    pub until: Option<Timestamp>,
    /// This actor.
    pub actor: Option<String>,
    /// This kind.
    pub kind: Option<String>,
    /// This name.
    pub name: Option<String>,
    /// At most this many records, oldest first; 0 means no limit.
    pub limit: usize,
}

impl AuditQuery {
    pub(crate) fn time_range(&self) -> (i64, i64) {
        (
            self.since.map_or(i64::MIN, Timestamp::unix_millis).max(0),
            self.until.map_or(i64::MAX, Timestamp::unix_millis),
        )
    }

    pub(crate) fn matches(&self, record: &AuditRecord) -> bool {
        let (since, until) = self.time_range();
        let time = record.time.unix_millis();
        time >= since
            && time < until
            && self.actor.as_ref().is_none_or(|a| *a == record.actor)
            && self.kind.as_ref().is_none_or(|k| *k == record.kind)
            && self.name.as_ref().is_none_or(|n| *n == record.name)
    }
}

/// The audit log of a store: query, prune, verify.
pub trait AuditLog: Send + Sync {
    /// Records matching `query`, oldest first.
    fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>>;
    /// Removes the records older than `before`, keeping the chain verifiable from the first kept
    /// record.
    fn audit_prune(&self, before: Timestamp) -> Result<PruneReport>;
    /// Checks the hash chain from the anchor to the last record.
    fn audit_verify(&self) -> Result<ChainReport>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let before = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let after = json!({"a": 1, "b": {"c": 4}, "e": [2], "f": null});
        assert_eq!(
            merge_patch(&before, &after),
            json!({"b": {"c": 4, "d": null}, "e": [2], "f": null})
        );
    }

    #[test]
    fn actors_are_principals_or_system_components() {
        assert_eq!(Actor::system("controller").as_str(), "system:controller");
        assert!(Actor::principal("alice").is_ok());
        assert!(Actor::principal("system:root").is_err());
        assert!(Actor::principal("").is_err());
        assert!(Actor::principal("a\nb").is_err());
    }
}
