//! The status the manager writes on BlockLists, ClientGroups and Policies: built from the
//! object's current status (so a condition that did not change keeps its transition time),
//! written only when it differs, retried on a resourceVersion conflict.

use std::sync::Arc;

use kudurru_core::policy::{ClientGroupSpec, DEFAULT_GROUP, PolicySpec};
use kudurru_storage::{
    Actor, CONDITION_DISABLED, CONDITION_READY, Condition, ConditionStatus, Object, ObjectStatus,
    StoreError, Timestamp, enabled_status, is_enabled, set_condition,
};
use serde_json::{Value, json};

use super::manager::{Item, ListState};
use super::source::describe;

use crate::objects::ObjectStore;

/// The condition a list carries while a refresh failed or came back empty.
pub const CONDITION_DEGRADED: &str = "Degraded";
/// The condition a policy carries: whether its schedule has it in effect now.
pub const CONDITION_ACTIVE: &str = "Active";

/// Who the audit log names for status writes.
pub fn actor() -> Actor {
    Actor::system("blocking")
}

/// A condition at `now`.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: reason.to_owned(),
        message: message.into(),
        last_transition_time: now,
    }
}

/// What a status is built from: the object's, with the fields set and the conditions merged.
pub struct Draft {
    status: ObjectStatus,
}

impl Draft {
    /// A draft from `object`'s status, for its generation. A disabled object gets only the
    /// Disabled conditions (and its kind's fields are dropped).
    pub fn new(object: &Object, now: Timestamp) -> Self {
        let mut status = enabled_status(object, now).unwrap_or_else(|| object.status.clone());
        status.observed_generation = object.metadata.generation;
        if !is_enabled(object) {
            status.fields.clear();
            status
                .conditions
                .retain(|c| c.type_ == CONDITION_READY || c.type_ == CONDITION_DISABLED);
        }
        Self { status }
    }

    /// Sets a kind's field.
    pub fn field(&mut self, name: &str, value: Value) {
        self.status.fields.insert(name.to_owned(), value);
    }

    /// Sets `condition` (the transition time moves only when its status does).
    pub fn condition(&mut self, condition: Condition) {
        set_condition(&mut self.status, condition);
    }

    /// Removes the condition `type_`.
    pub fn remove(&mut self, type_: &str) {
        kudurru_storage::remove_condition(&mut self.status, type_);
    }

    /// The status to write, or `None` when `object` already carries it.
    pub fn finish(self, object: &Object) -> Option<ObjectStatus> {
        (self.status != object.status).then_some(self.status)
    }
}

/// Writes `status` on `object`, re-reading it after a conflict (a user's change in between
/// wins for the spec; the status is the manager's to say). Runs on the blocking pool.
pub async fn write(
    store: Arc<dyn ObjectStore>,
    object: &Object,
    status: ObjectStatus,
) -> Result<Object, StoreError> {
    write_as(store, object, status, actor()).await
}

/// [`write`] audited as `actor` (another controller: `system:zones`).
pub async fn write_as(
    store: Arc<dyn ObjectStore>,
    object: &Object,
    status: ObjectStatus,
    actor: Actor,
) -> Result<Object, StoreError> {
    let mut target = object.clone();
    target.status = status;
    tokio::task::spawn_blocking(move || {
        let mut tries = 0;
        loop {
            match store.update_status(&actor, &target) {
                Err(StoreError::Conflict { .. }) if tries < 3 => {
                    tries += 1;
                    let latest = store.get(&target.kind, &target.metadata.name)?;
                    target.metadata = latest.metadata;
                }
                result => return result,
            }
        }
    })
    .await
    .map_err(|e| StoreError::invalid("status", format!("the status write did not run: {e}")))?
}

/// Takes the object a status write returned as the one a controller knows, unless it carries
/// a change the controller has not acted on: a write that raced an edit (Conflict) is retried
/// on the stored object, edit included, while the edit's watch event is still on its way.
/// Taking that object would make the edit's event look like the echo of a status write (same
/// spec, same enabled switch) and the edit would not be applied until the next one (the fleet
/// leader's stall, docs/benchmarks.md "Cluster"). Then only the status is taken; the edit's
/// event brings the rest.
pub fn keep_written(known: &mut Object, written: Object) {
    if known.spec != written.spec || is_enabled(known) != is_enabled(&written) {
        known.status = written.status;
    } else {
        *known = written;
    }
}

/// A policy's references that are not in effect.
#[derive(Debug, Default)]
pub(super) struct References {
    pub(super) missing: Vec<(&'static str, String)>,
    pub(super) disabled: Vec<(&'static str, String)>,
    pub(super) pending: Vec<(&'static str, String)>,
}

fn join(references: &[(&str, String)]) -> String {
    references
        .iter()
        .map(|(kind, name)| format!("{kind} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A BlockList's status, or `None` when it already carries it.
pub(super) fn list_status(state: &ListState, now: Timestamp) -> Option<ObjectStatus> {
    let mut draft = Draft::new(&state.object, now);
    if !state.enabled {
        draft.remove(CONDITION_DEGRADED);
        return draft.finish(&state.object);
    }
    let degraded = state.degraded();
    if let Some(compiled) = &state.compiled {
        let s = &compiled.stats;
        draft.field("entries", compiled.entries.into());
        draft.field("format", compiled.format.label().into());
        draft.field("invalidLines", s.invalid.into());
        draft.field("skippedLines", s.skipped.into());
        draft.field("truncated", s.truncated.into());
        draft.field(
            "samples",
            s.samples
                .iter()
                .map(|sample| json!({"line": sample.line, "text": sample.text, "reason": sample.reason}))
                .collect::<Vec<_>>()
                .into(),
        );
    }
    draft.field(
        "sources",
        state
            .sources
            .iter()
            .map(|s| {
                json!({
                    "source": describe(&s.source),
                    "lastAttempt": s.last_attempt.map(|t| t.to_string()),
                    "lastSuccess": s.last_success.map(|t| t.to_string()),
                    "etag": s.validators.etag,
                    "lastModified": s.validators.last_modified,
                    "bytes": s.bytes,
                    "error": s.error.as_ref().map(|e| e.message.clone()),
                })
            })
            .collect::<Vec<Value>>()
            .into(),
    );
    match &state.compiled {
        Some(compiled) => draft.condition(condition(
            CONDITION_READY,
            true,
            "Loaded",
            format!(
                "{} entries from {} sources",
                compiled.entries,
                state.sources.len()
            ),
            now,
        )),
        None => draft.condition(condition(
            CONDITION_READY,
            false,
            if degraded.is_some() {
                "LoadFailed"
            } else {
                "Loading"
            },
            degraded
                .clone()
                .unwrap_or_else(|| "fetching its sources".into()),
            now,
        )),
    }
    match degraded {
        Some(why) => draft.condition(condition(
            CONDITION_DEGRADED,
            true,
            "RefreshFailed",
            why,
            now,
        )),
        None => draft.condition(condition(
            CONDITION_DEGRADED,
            false,
            "Refreshed",
            "every source refreshed",
            now,
        )),
    }
    draft.finish(&state.object)
}

/// A ClientGroup's status. A healthy group that never had a problem gets none written: no
/// status write, audit record or resourceVersion move for its writers to race after each of
/// their changes (as an enabled object carries no Disabled condition in the Go seed); a
/// disabled, reserved or invalid one says so, and one that recovers says Ready.
pub(super) fn group_status(group: &Item<ClientGroupSpec>, now: Timestamp) -> Option<ObjectStatus> {
    let healthy =
        group.enabled() && group.spec.is_ok() && group.object.metadata.name != DEFAULT_GROUP;
    if healthy && group.object.status.conditions.is_empty() {
        return None;
    }
    let mut draft = Draft::new(&group.object, now);
    if group.enabled() {
        let (ready, reason, message) = match (&group.spec, group.object.metadata.name.as_str()) {
            (_, DEFAULT_GROUP) => (
                false,
                "ReservedName",
                "default is the built-in group of clients no other group holds; this object is ignored".to_owned(),
            ),
            (Ok(spec), _) => (
                true,
                "Compiled",
                format!(
                    "{} addresses or prefixes, {} client IDs",
                    spec.clients.len(),
                    spec.client_ids.len()
                ),
            ),
            (Err(e), _) => (false, "InvalidSpec", e.clone()),
        };
        draft.condition(condition(CONDITION_READY, ready, reason, message, now));
    }
    draft.finish(&group.object)
}

/// A Policy's status: Ready names what it skips; Active says whether its schedule has it in
/// effect now.
pub(super) fn policy_status(
    policy: &Item<PolicySpec>,
    references: &References,
    active: bool,
    now: Timestamp,
) -> Option<ObjectStatus> {
    let mut draft = Draft::new(&policy.object, now);
    if !policy.enabled() {
        draft.remove(CONDITION_ACTIVE);
        return draft.finish(&policy.object);
    }
    let list = |refs: &[(&str, String)]| {
        refs.iter()
            .map(|(kind, name)| json!({"kind": kind, "name": name}))
            .collect::<Vec<_>>()
    };
    draft.field("missing", list(&references.missing).into());
    draft.field("disabled", list(&references.disabled).into());
    draft.field("notLoaded", list(&references.pending).into());
    draft.field("active", active.into());
    let mut notes = Vec::new();
    if !references.disabled.is_empty() {
        notes.push(format!("skips disabled {}", join(&references.disabled)));
    }
    if !references.pending.is_empty() {
        notes.push(format!("waiting for {} to load", join(&references.pending)));
    }
    let (ready, reason, message) = match &policy.spec {
        Err(e) => (false, "InvalidSpec", e.clone()),
        Ok(_) if !references.missing.is_empty() => {
            notes.insert(0, format!("missing {}", join(&references.missing)));
            (false, "MissingReference", notes.join("; "))
        }
        Ok(_) if notes.is_empty() => (true, "Compiled", "in the policy index".to_owned()),
        Ok(_) => (
            true,
            "Compiled",
            format!("in the policy index; {}", notes.join("; ")),
        ),
    };
    draft.condition(condition(CONDITION_READY, ready, reason, message, now));
    draft.condition(condition(
        CONDITION_ACTIVE,
        active,
        if active {
            "InSchedule"
        } else {
            "OutsideSchedule"
        },
        if active {
            "in effect now"
        } else {
            "outside its schedule windows now"
        },
        now,
    ));
    draft.finish(&policy.object)
}
