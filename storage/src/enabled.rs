//! `kudurru.io/enabled: "false"` disables any object, and `kudurru.io/comment` says why; the
//! conditions a disabled object carries, and the helpers that keep them.
//!
//! A disabled object has `Ready=False` (reason `Disabled`) and `Disabled=True`. An enabled one
//! carries no `Disabled` condition at all, so the switch's existence writes no status on
//! objects that never used it.

use crate::object::{Condition, ConditionStatus, Object, ObjectStatus};
use crate::time::Timestamp;

/// The annotation that disables an object when it is `"false"` (trimmed, any case).
pub const ENABLED_ANNOTATION: &str = "kudurru.io/enabled";
/// A free-text annotation: why the object is as it is (shown beside the Disabled condition).
pub const COMMENT_ANNOTATION: &str = "kudurru.io/comment";
/// The condition every kind's controller keeps.
pub const CONDITION_READY: &str = "Ready";
/// The condition a disabled object carries, `True`.
pub const CONDITION_DISABLED: &str = "Disabled";
/// The reason of both conditions on a disabled object.
pub const REASON_DISABLED: &str = "Disabled";
/// The reason `Ready` gets when an object is enabled again, until its controller decides.
pub const REASON_ENABLED: &str = "Enabled";

/// Whether `object` is enabled: anything but `"false"` (trimmed, case-insensitive) in
/// [`ENABLED_ANNOTATION`], or no annotation, is enabled.
pub fn is_enabled(object: &Object) -> bool {
    object
        .metadata
        .annotations
        .get(ENABLED_ANNOTATION)
        .is_none_or(|value| !value.trim().eq_ignore_ascii_case("false"))
}

/// The object's [`COMMENT_ANNOTATION`], if set and not blank.
pub fn comment(object: &Object) -> Option<&str> {
    object
        .metadata
        .annotations
        .get(COMMENT_ANNOTATION)
        .map(|comment| comment.trim())
        .filter(|comment| !comment.is_empty())
}

/// The condition of `type_`, if present.
pub fn find_condition<'a>(status: &'a ObjectStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Sets `condition` as Kubernetes' `meta.SetStatusCondition` does: `lastTransitionTime` moves
/// only when the status changes. Returns whether anything changed.
pub fn set_condition(status: &mut ObjectStatus, mut condition: Condition) -> bool {
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == condition.type_)
    {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time;
            }
            let changed = *existing != condition;
            *existing = condition;
            changed
        }
        None => {
            status.conditions.push(condition);
            true
        }
    }
}

/// Removes the condition of `type_`; returns whether there was one.
pub fn remove_condition(status: &mut ObjectStatus, type_: &str) -> bool {
    let before = status.conditions.len();
    status.conditions.retain(|c| c.type_ != type_);
    status.conditions.len() != before
}

/// Brings `object`'s conditions in line with its enabled annotation, at `now`; returns the
/// status to write, or `None` when it already is (no write needed).
///
/// Disabled: `Ready=False` and `Disabled=True`, reason `Disabled`, the comment as message.
/// Enabled: no `Disabled` condition; a `Ready` still saying `Disabled` becomes `Unknown`
/// (reason `Enabled`) until the kind's controller sets it.
pub fn enabled_status(object: &Object, now: Timestamp) -> Option<ObjectStatus> {
    let mut status = object.status.clone();
    let changed = if is_enabled(object) {
        let removed = remove_condition(&mut status, CONDITION_DISABLED);
        let ready_disabled = find_condition(&status, CONDITION_READY)
            .is_some_and(|ready| ready.reason == REASON_DISABLED);
        let reset = ready_disabled
            && set_condition(
                &mut status,
                condition(
                    CONDITION_READY,
                    ConditionStatus::Unknown,
                    REASON_ENABLED,
                    "enabled again",
                    now,
                ),
            );
        removed || reset
    } else {
        let message = comment(object).map_or_else(
            || format!("{ENABLED_ANNOTATION} is \"false\""),
            |comment| format!("{ENABLED_ANNOTATION} is \"false\": {comment}"),
        );
        let ready = set_condition(
            &mut status,
            condition(
                CONDITION_READY,
                ConditionStatus::False,
                REASON_DISABLED,
                &message,
                now,
            ),
        );
        let disabled = set_condition(
            &mut status,
            condition(
                CONDITION_DISABLED,
                ConditionStatus::True,
                REASON_DISABLED,
                &message,
                now,
            ),
        );
        ready || disabled
    };
    changed.then_some(status)
}

fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(annotations: &[(&str, &str)]) -> Object {
        let mut object = Object::new("Widget", "w", json!({}));
        for (key, value) in annotations {
            object
                .metadata
                .annotations
                .insert((*key).to_owned(), (*value).to_owned());
        }
        object
    }

    #[test]
    fn only_false_trimmed_any_case_disables() {
        for value in ["false", " FALSE ", "False\n"] {
            assert!(
                !is_enabled(&object(&[(ENABLED_ANNOTATION, value)])),
                "{value:?}"
            );
        }
        for value in ["true", "", "no", "0", "falsey"] {
            assert!(
                is_enabled(&object(&[(ENABLED_ANNOTATION, value)])),
                "{value:?}"
            );
        }
        assert!(is_enabled(&object(&[])));
    }

    #[test]
    fn disabled_object_gets_ready_false_and_disabled_true() {
        let now = Timestamp::from_unix_millis(1_000);
        let mut disabled = object(&[(ENABLED_ANNOTATION, "false"), (COMMENT_ANNOTATION, "noisy")]);
        let status = enabled_status(&disabled, now).unwrap();
        let ready = find_condition(&status, CONDITION_READY).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, "Disabled")
        );
        assert!(ready.message.ends_with("noisy"));
        let flag = find_condition(&status, CONDITION_DISABLED).unwrap();
        assert_eq!(
            (flag.status, flag.reason.as_str()),
            (ConditionStatus::True, "Disabled")
        );
        disabled.status = status;
        assert_eq!(
            enabled_status(&disabled, Timestamp::from_unix_millis(9_000)),
            None
        );

        disabled.metadata.annotations.remove(ENABLED_ANNOTATION);
        let status = enabled_status(&disabled, now).unwrap();
        assert!(find_condition(&status, CONDITION_DISABLED).is_none());
        assert_eq!(
            find_condition(&status, CONDITION_READY).map(|c| c.status),
            Some(ConditionStatus::Unknown)
        );
    }

    #[test]
    fn enabled_object_without_conditions_needs_no_status_write() {
        assert_eq!(enabled_status(&object(&[]), Timestamp::default()), None);
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut status = ObjectStatus::default();
        let at = |millis| Timestamp::from_unix_millis(millis);
        let ready = |s, t| condition(CONDITION_READY, s, "Compiled", "ok", at(t));
        assert!(set_condition(&mut status, ready(ConditionStatus::True, 1)));
        assert!(!set_condition(&mut status, ready(ConditionStatus::True, 2)));
        assert_eq!(status.conditions[0].last_transition_time, at(1));
        assert!(set_condition(&mut status, ready(ConditionStatus::False, 3)));
        assert_eq!(status.conditions[0].last_transition_time, at(3));
    }
}
