//! The rules every driver keeps. Each is a generic fn over [`Harness`]; `conformance!` runs
//! them all for one driver. Names say the rule.

use std::sync::Barrier;

use kudurru_storage::{AuditLog, Condition};
use kudurru_storage::{
    AuditQuery, AuditVerb, CONDITION_DISABLED, CONDITION_READY, ConditionStatus, DeleteOptions,
    ENABLED_ANNOTATION, EventType, LabelSelector, ListOptions, Object, Store, StoreError,
    Timestamp, WatchEvent, WatchOptions, enabled_status, find_condition,
};
use serde_json::json;

use crate::harness::*;

/// Instantiates every rule for `$harness` in a module `$driver`.
#[macro_export]
macro_rules! conformance {
    ($driver:ident, $harness:ty) => {
        mod $driver {
            $crate::conformance!(@tests $harness;
                create_sets_uid_version_generation_and_time,
                create_of_existing_name_is_already_exists,
                create_with_resource_version_is_invalid,
                create_ignores_status,
                objects_round_trip_exactly_to_the_millisecond,
                get_of_missing_object_is_not_found,
                names_that_are_not_dns_labels_are_invalid_and_change_nothing,
                unknown_kind_is_refused_and_changes_nothing,
                spec_failing_validator_names_the_field_and_changes_nothing,
                invalid_labels_and_annotations_name_the_field,
                update_with_stale_resource_version_conflicts,
                update_without_resource_version_is_invalid,
                update_of_missing_object_is_not_found,
                generation_bumps_only_when_spec_changes,
                update_that_changes_nothing_writes_nothing,
                update_leaves_status_and_update_status_leaves_spec,
                update_status_with_stale_resource_version_conflicts,
                update_status_without_resource_version_is_invalid,
                update_status_checks_conditions,
                delete_returns_last_state_at_the_deletion_version,
                delete_with_stale_precondition_conflicts,
                delete_of_missing_object_is_not_found,
                recreated_object_gets_a_new_uid,
                revision_is_store_wide_and_monotonic,
                concurrent_updates_on_one_version_exactly_one_wins,
                concurrent_status_updates_on_one_version_exactly_one_wins,
                concurrent_creates_of_one_name_exactly_one_wins,
                list_is_at_one_resource_version_in_name_order,
                list_label_selector_equality_and_existence,
                list_pages_read_at_the_first_pages_version,
                list_continue_token_after_compaction_is_gone,
                list_bad_continue_token_is_invalid,
                watch_from_version_replays_changes_in_order,
                watch_resumes_from_last_seen_without_gaps_or_repeats,
                watch_without_version_starts_with_current_objects,
                watch_older_than_history_after_compaction_is_gone,
                watch_history_is_bounded,
                watch_bookmarks_on_catch_up_and_progress_notify,
                watch_selector_turns_label_changes_into_added_and_deleted,
                watch_sees_only_its_kind,
                slow_watcher_is_closed_as_lagged,
                watch_is_awaited_on_a_current_thread_runtime,
                audit_records_every_change_with_versions_and_actor,
                audit_records_nothing_for_refused_or_unchanged_writes,
                audit_patch_is_a_merge_patch_of_the_change,
                audit_query_by_time_actor_kind_and_name,
                audit_prune_keeps_the_chain_verifiable_from_the_first_kept_record,
                audit_prune_of_everything_then_writes_still_verify,
                audit_time_never_goes_backwards,
                disabled_annotation_conditions_round_trip_through_status,
            );
        }
    };
    (@tests $harness:ty; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                $crate::suite::$rule::<$harness>();
            }
        )*
    };
}

fn create<H: Harness>(h: &H, object: &Object) -> Object {
    h.store().create(&alice(), object).unwrap()
}

fn audit_count<H: Harness>(h: &H) -> usize {
    h.store().audit_query(&AuditQuery::default()).unwrap().len()
}

fn drain(watch: &mut kudurru_storage::Watch) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    while let Some(event) = watch.try_next() {
        events.push(event.unwrap());
    }
    events
}

fn summary(events: &[WatchEvent]) -> Vec<(EventType, String, u64)> {
    events
        .iter()
        .map(|e| {
            (
                e.type_,
                e.object.metadata.name.clone(),
                e.resource_version(),
            )
        })
        .collect()
}

// --- create, get --------------------------------------------------------------------------

pub(crate) fn create_sets_uid_version_generation_and_time<H: Harness>() {
    let (h, clock) = setup::<H>();
    let created = create(&h, &widget("a", 1));
    assert_eq!(created.metadata.resource_version, 1);
    assert_eq!(created.metadata.generation, 1);
    assert_eq!(created.metadata.uid.len(), 36);
    assert_eq!(created.metadata.creation_timestamp, Some(clock.now()));
    assert_eq!(h.store().get("Widget", "a").unwrap(), created);
    assert_eq!(h.store().revision().unwrap(), 1);
}

pub(crate) fn create_of_existing_name_is_already_exists<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let error = h.store().create(&alice(), &widget("a", 2)).unwrap_err();
    assert!(
        matches!(error, StoreError::AlreadyExists { ref kind, ref name } if kind == "Widget" && name == "a"),
        "{error}"
    );
    assert_eq!(h.store().get("Widget", "a").unwrap(), first);
    assert_eq!(h.store().revision().unwrap(), 1);
}

pub(crate) fn create_with_resource_version_is_invalid<H: Harness>() {
    let (h, _) = setup::<H>();
    let mut object = widget("a", 1);
    object.metadata.resource_version = 7;
    let error = h.store().create(&alice(), &object).unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field == "metadata.resourceVersion"),
        "{error}"
    );
}

pub(crate) fn create_ignores_status<H: Harness>() {
    let (h, _) = setup::<H>();
    let mut object = widget("a", 1);
    object.status.observed_generation = 9;
    let created = create(&h, &object);
    assert_eq!(created.status, Default::default());
}

pub(crate) fn objects_round_trip_exactly_to_the_millisecond<H: Harness>() {
    let (h, clock) = setup::<H>();
    clock.set(1_700_000_000_123);
    let created = create(&h, &widget("a", 1));
    assert_eq!(h.store().get("Widget", "a").unwrap(), created);
    let mut status = created.clone();
    status.status.conditions.push(Condition {
        type_: "Ready".into(),
        status: ConditionStatus::True,
        reason: String::new(),
        message: String::new(),
        last_transition_time: Timestamp::from_unix_millis(1_700_000_000_999),
    });
    let written = h.store().update_status(&controller(), &status).unwrap();
    assert_eq!(h.store().get("Widget", "a").unwrap(), written);
    assert_eq!(
        h.store().update_status(&controller(), &written).unwrap(),
        written
    );
    assert_eq!(
        h.store().revision().unwrap(),
        2,
        "a no-op after a round trip writes nothing"
    );
}

pub(crate) fn get_of_missing_object_is_not_found<H: Harness>() {
    let (h, _) = setup::<H>();
    let error = h.store().get("Widget", "nope").unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error}");
    assert_eq!(error.to_string(), "Widget \"nope\" not found");
}

// --- bad input ----------------------------------------------------------------------------

pub(crate) fn names_that_are_not_dns_labels_are_invalid_and_change_nothing<H: Harness>() {
    let (h, _) = setup::<H>();
    for name in [
        "",
        "Upper",
        "-dash",
        "dash-",
        "under_score",
        "dot.ted",
        &"x".repeat(64),
    ] {
        let error = h.store().create(&alice(), &widget(name, 1)).unwrap_err();
        assert!(
            matches!(error, StoreError::Invalid { ref field, .. } if field == "metadata.name"),
            "{name:?}: {error}"
        );
    }
    let error = h
        .store()
        .delete(&alice(), "Widget", "Bad", &DeleteOptions::default())
        .unwrap_err();
    assert!(matches!(error, StoreError::Invalid { ref field, .. } if field == "metadata.name"));
    assert_eq!(h.store().revision().unwrap(), 0);
    assert_eq!(audit_count(&h), 0);
}

pub(crate) fn unknown_kind_is_refused_and_changes_nothing<H: Harness>() {
    let (h, _) = setup::<H>();
    let object = Object::new("Sprocket", "a", json!({}));
    let unknown = |result: Result<_, StoreError>| {
        let error = result.expect_err("an unknown kind is refused");
        assert!(
            matches!(error, StoreError::UnknownKind { ref kind } if kind == "Sprocket"),
            "{error}"
        );
    };
    unknown(h.store().create(&alice(), &object).map(drop));
    unknown(h.store().get("Sprocket", "a").map(drop));
    unknown(
        h.store()
            .list("Sprocket", &ListOptions::default())
            .map(drop),
    );
    unknown(
        h.store()
            .watch("Sprocket", &WatchOptions::default())
            .map(drop),
    );
    let mut versioned = object.clone();
    versioned.metadata.resource_version = 1;
    unknown(h.store().update(&alice(), &versioned).map(drop));
    unknown(h.store().update_status(&alice(), &versioned).map(drop));
    unknown(
        h.store()
            .delete(&alice(), "Sprocket", "a", &DeleteOptions::default())
            .map(drop),
    );
    assert_eq!(h.store().revision().unwrap(), 0);
    assert_eq!(audit_count(&h), 0);
}

pub(crate) fn spec_failing_validator_names_the_field_and_changes_nothing<H: Harness>() {
    let (h, _) = setup::<H>();
    let field_of = |error: StoreError| match error {
        StoreError::Invalid { field, .. } => field,
        other => panic!("expected Invalid, got {other}"),
    };
    let missing = Object::new("Widget", "a", json!({}));
    assert_eq!(
        field_of(h.store().create(&alice(), &missing).unwrap_err()),
        "spec.size"
    );
    let not_object = Object::new("Widget", "a", json!([1]));
    assert_eq!(
        field_of(h.store().create(&alice(), &not_object).unwrap_err()),
        "spec"
    );
    let created = create(&h, &widget("a", 1));
    let mut bad = created.clone();
    bad.spec = json!({ "size": 1, "color": 3 });
    let error = h.store().update(&alice(), &bad).unwrap_err();
    assert_eq!(error.to_string(), "invalid spec.color: must be a string");
    assert_eq!(h.store().get("Widget", "a").unwrap(), created);
    assert_eq!(h.store().revision().unwrap(), 1);
    assert_eq!(audit_count(&h), 1);
}

pub(crate) fn invalid_labels_and_annotations_name_the_field<H: Harness>() {
    let (h, _) = setup::<H>();
    let bad_label = labeled(widget("a", 1), &[("tier", "not ok")]);
    let error = h.store().create(&alice(), &bad_label).unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field == "metadata.labels[\"tier\"]"),
        "{error}"
    );
    let mut bad_annotation = widget("a", 1);
    bad_annotation
        .metadata
        .annotations
        .insert("Not/Valid/key".into(), "x".into());
    let error = h.store().create(&alice(), &bad_annotation).unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field.starts_with("metadata.annotations[")),
        "{error}"
    );
    assert_eq!(h.store().revision().unwrap(), 0);
}

// --- update -------------------------------------------------------------------------------

pub(crate) fn update_with_stale_resource_version_conflicts<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let mut change = first.clone();
    change.spec = json!({ "size": 2 });
    let second = h.store().update(&alice(), &change).unwrap();
    change.spec = json!({ "size": 3 });
    let error = h.store().update(&alice(), &change).unwrap_err();
    match error {
        StoreError::Conflict {
            expected, current, ..
        } => assert_eq!((expected, current), (1, second.metadata.resource_version)),
        other => panic!("expected Conflict, got {other}"),
    }
    assert_eq!(h.store().get("Widget", "a").unwrap(), second);
}

pub(crate) fn update_without_resource_version_is_invalid<H: Harness>() {
    let (h, _) = setup::<H>();
    create(&h, &widget("a", 1));
    let error = h.store().update(&alice(), &widget("a", 2)).unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field == "metadata.resourceVersion"),
        "{error}"
    );
}

pub(crate) fn update_of_missing_object_is_not_found<H: Harness>() {
    let (h, _) = setup::<H>();
    let mut object = widget("a", 1);
    object.metadata.resource_version = 1;
    assert!(matches!(
        h.store().update(&alice(), &object),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        h.store().update_status(&alice(), &object),
        Err(StoreError::NotFound { .. })
    ));
}

pub(crate) fn generation_bumps_only_when_spec_changes<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let relabeled = h
        .store()
        .update(&alice(), &labeled(first.clone(), &[("tier", "edge")]))
        .unwrap();
    assert_eq!(relabeled.metadata.generation, 1);
    assert!(relabeled.metadata.resource_version > first.metadata.resource_version);
    let mut respec = relabeled.clone();
    respec.spec = json!({ "size": 5 });
    let respecced = h.store().update(&alice(), &respec).unwrap();
    assert_eq!(respecced.metadata.generation, 2);
    let mut status = respecced.clone();
    status.status.observed_generation = 2;
    let with_status = h.store().update_status(&controller(), &status).unwrap();
    assert_eq!(with_status.metadata.generation, 2);
    assert_eq!(with_status.metadata.uid, first.metadata.uid);
    assert_eq!(
        with_status.metadata.creation_timestamp,
        first.metadata.creation_timestamp
    );
}

pub(crate) fn update_that_changes_nothing_writes_nothing<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let mut watch = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(h.store().update(&alice(), &first).unwrap(), first);
    assert_eq!(h.store().update_status(&alice(), &first).unwrap(), first);
    assert_eq!(h.store().revision().unwrap(), 1);
    assert_eq!(audit_count(&h), 1);
    assert!(drain(&mut watch).is_empty());
}

pub(crate) fn update_leaves_status_and_update_status_leaves_spec<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let mut status_change = first.clone();
    status_change.status.observed_generation = 1;
    status_change.spec = json!({ "size": 99 });
    let after_status = h
        .store()
        .update_status(&controller(), &status_change)
        .unwrap();
    assert_eq!(after_status.spec, json!({ "size": 1 }));
    assert_eq!(after_status.status.observed_generation, 1);
    let mut spec_change = after_status.clone();
    spec_change.spec = json!({ "size": 2 });
    spec_change.status = Default::default();
    let after_spec = h.store().update(&alice(), &spec_change).unwrap();
    assert_eq!(after_spec.status.observed_generation, 1);
    assert_eq!(after_spec.spec, json!({ "size": 2 }));
}

/// The regression the Go seed's memory driver had: its UpdateStatus ignored the caller's
/// resourceVersion.
pub(crate) fn update_status_with_stale_resource_version_conflicts<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let mut a = first.clone();
    a.status.observed_generation = 1;
    let written = h.store().update_status(&controller(), &a).unwrap();
    let mut b = first.clone();
    b.status.fields.insert("entries".into(), json!(10));
    let error = h.store().update_status(&controller(), &b).unwrap_err();
    assert!(
        matches!(error, StoreError::Conflict { expected: 1, current, .. } if current == written.metadata.resource_version),
        "{error}"
    );
    assert_eq!(h.store().get("Widget", "a").unwrap(), written);
    let mut spec_moved = written.clone();
    spec_moved.spec = json!({ "size": 3 });
    h.store().update(&alice(), &spec_moved).unwrap();
    let mut stale = written;
    stale.status.observed_generation = 2;
    assert!(matches!(
        h.store().update_status(&controller(), &stale),
        Err(StoreError::Conflict { .. })
    ));
}

pub(crate) fn update_status_without_resource_version_is_invalid<H: Harness>() {
    let (h, _) = setup::<H>();
    create(&h, &widget("a", 1));
    let mut object = widget("a", 1);
    object.status.observed_generation = 1;
    let error = h.store().update_status(&controller(), &object).unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field == "metadata.resourceVersion"),
        "{error}"
    );
}

pub(crate) fn update_status_checks_conditions<H: Harness>() {
    let (h, clock) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let condition = |type_: &str| Condition {
        type_: type_.into(),
        status: ConditionStatus::True,
        reason: "Compiled".into(),
        message: String::new(),
        last_transition_time: clock.now(),
    };
    let mut twice = first.clone();
    twice.status.conditions = vec![condition("Ready"), condition("Ready")];
    let error = h.store().update_status(&controller(), &twice).unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field == "status.conditions[1].type"),
        "{error}"
    );
    let mut shadowing = first.clone();
    shadowing
        .status
        .fields
        .insert("conditions".into(), json!([]));
    let error = h
        .store()
        .update_status(&controller(), &shadowing)
        .unwrap_err();
    assert!(
        matches!(error, StoreError::Invalid { ref field, .. } if field == "status.conditions"),
        "{error}"
    );
    let mut spaced = first.clone();
    spaced.status.conditions = vec![condition("not ready")];
    assert!(matches!(
        h.store().update_status(&controller(), &spaced),
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(h.store().get("Widget", "a").unwrap(), first);
}

// --- delete -------------------------------------------------------------------------------

pub(crate) fn delete_returns_last_state_at_the_deletion_version<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let deleted = h
        .store()
        .delete(
            &alice(),
            "Widget",
            "a",
            &DeleteOptions {
                resource_version: Some(1),
            },
        )
        .unwrap();
    assert_eq!(deleted.metadata.resource_version, 2);
    assert_eq!(deleted.spec, first.spec);
    assert_eq!(deleted.metadata.uid, first.metadata.uid);
    assert!(matches!(
        h.store().get("Widget", "a"),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(h.store().revision().unwrap(), 2);
}

pub(crate) fn delete_with_stale_precondition_conflicts<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let mut change = first.clone();
    change.spec = json!({ "size": 2 });
    h.store().update(&alice(), &change).unwrap();
    let error = h
        .store()
        .delete(
            &alice(),
            "Widget",
            "a",
            &DeleteOptions {
                resource_version: Some(1),
            },
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Conflict {
                expected: 1,
                current: 2,
                ..
            }
        ),
        "{error}"
    );
    assert!(h.store().get("Widget", "a").is_ok());
    h.store()
        .delete(&alice(), "Widget", "a", &DeleteOptions::default())
        .unwrap();
}

pub(crate) fn delete_of_missing_object_is_not_found<H: Harness>() {
    let (h, _) = setup::<H>();
    let error = h
        .store()
        .delete(&alice(), "Widget", "a", &DeleteOptions::default())
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error}");
    assert_eq!(h.store().revision().unwrap(), 0);
}

pub(crate) fn recreated_object_gets_a_new_uid<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    h.store()
        .delete(&alice(), "Widget", "a", &DeleteOptions::default())
        .unwrap();
    let again = create(&h, &widget("a", 1));
    assert_ne!(again.metadata.uid, first.metadata.uid);
    assert_eq!(again.metadata.generation, 1);
    assert_eq!(again.metadata.resource_version, 3);
    let mut stale = first;
    stale.spec = json!({ "size": 4 });
    assert!(matches!(
        h.store().update(&alice(), &stale),
        Err(StoreError::Conflict { .. })
    ));
}

pub(crate) fn revision_is_store_wide_and_monotonic<H: Harness>() {
    let (h, _) = setup::<H>();
    let a = create(&h, &widget("a", 1));
    let g = create(&h, &Object::new("Gadget", "a", json!({})));
    let b = create(&h, &widget("b", 1));
    assert_eq!([a, g, b].map(|o| o.metadata.resource_version), [1, 2, 3]);
    let list = h.store().list("Gadget", &ListOptions::default()).unwrap();
    assert_eq!(list.resource_version, 3);
}

// --- concurrency --------------------------------------------------------------------------

const RACERS: usize = 8;

pub(crate) fn concurrent_updates_on_one_version_exactly_one_wins<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let barrier = Barrier::new(RACERS);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, barrier, mut change) = (h.store(), &barrier, first.clone());
                change.spec = json!({ "size": 10 + i });
                scope.spawn(move || {
                    barrier.wait();
                    store.update(&alice(), &change)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, StoreError::Conflict { expected: 1, .. }))
    );
    assert_eq!(h.store().get("Widget", "a").unwrap(), *winners[0]);
    assert_eq!(h.store().revision().unwrap(), 2);
    assert_eq!(audit_count(&h), 2);
}

pub(crate) fn concurrent_status_updates_on_one_version_exactly_one_wins<H: Harness>() {
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let barrier = Barrier::new(RACERS);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, barrier, mut change) = (h.store(), &barrier, first.clone());
                change.status.fields.insert("writer".into(), json!(i));
                scope.spawn(move || {
                    barrier.wait();
                    store.update_status(&controller(), &change)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, StoreError::Conflict { .. }))
    );
    assert_eq!(h.store().revision().unwrap(), 2);
}

pub(crate) fn concurrent_creates_of_one_name_exactly_one_wins<H: Harness>() {
    let (h, _) = setup::<H>();
    let barrier = Barrier::new(RACERS);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, barrier) = (h.store(), &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    store.create(&alice(), &widget("a", 1 + i as u64))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, StoreError::AlreadyExists { .. }))
    );
    assert_eq!(h.store().revision().unwrap(), 1);
}

// --- list ---------------------------------------------------------------------------------

pub(crate) fn list_is_at_one_resource_version_in_name_order<H: Harness>() {
    let (h, _) = setup::<H>();
    for name in ["c", "a", "b"] {
        create(&h, &widget(name, 1));
    }
    create(&h, &Object::new("Gadget", "z", json!({})));
    let list = h.store().list("Widget", &ListOptions::default()).unwrap();
    assert_eq!(list.resource_version, 4);
    let names: Vec<_> = list
        .items
        .iter()
        .map(|o| o.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(list.continue_token, None);
}

pub(crate) fn list_label_selector_equality_and_existence<H: Harness>() {
    let (h, _) = setup::<H>();
    create(
        &h,
        &labeled(widget("a", 1), &[("tier", "edge"), ("managed", "")]),
    );
    create(&h, &labeled(widget("b", 1), &[("tier", "core")]));
    create(
        &h,
        &labeled(widget("c", 1), &[("tier", "edge"), ("legacy", "yes")]),
    );
    create(&h, &widget("d", 1));
    let names = |selector: &str| -> Vec<String> {
        let options = ListOptions {
            label_selector: LabelSelector::parse(selector).unwrap(),
            ..Default::default()
        };
        let list = h.store().list("Widget", &options).unwrap();
        list.items.into_iter().map(|o| o.metadata.name).collect()
    };
    assert_eq!(names("tier=edge"), ["a", "c"]);
    assert_eq!(names("tier!=edge"), ["b", "d"]);
    assert_eq!(names("tier"), ["a", "b", "c"]);
    assert_eq!(names("!tier"), ["d"]);
    assert_eq!(names("tier=edge,!legacy"), ["a"]);
    assert_eq!(names("tier==edge,managed"), ["a"]);
    assert_eq!(names(""), ["a", "b", "c", "d"]);
}

pub(crate) fn list_pages_read_at_the_first_pages_version<H: Harness>() {
    let (h, _) = setup::<H>();
    for name in ["a", "b", "c", "d", "e", "f"] {
        create(&h, &labeled(widget(name, 1), &[("tier", "edge")]));
    }
    let options = |token: Option<String>| ListOptions {
        label_selector: LabelSelector::parse("tier=edge").unwrap(),
        limit: 2,
        continue_token: token,
    };
    let first = h.store().list("Widget", &options(None)).unwrap();
    assert_eq!(first.resource_version, 6);
    assert_eq!(first.items.len(), 2);
    // Between pages: delete d, add cc, change e, relabel f out of the selector.
    h.store()
        .delete(&alice(), "Widget", "d", &DeleteOptions::default())
        .unwrap();
    create(&h, &labeled(widget("cc", 1), &[("tier", "edge")]));
    let mut e = h.store().get("Widget", "e").unwrap();
    e.spec = json!({ "size": 50 });
    h.store().update(&alice(), &e).unwrap();
    let mut f = h.store().get("Widget", "f").unwrap();
    f.metadata.labels.clear();
    h.store().update(&alice(), &f).unwrap();

    let mut items = first.items.clone();
    let mut token = first.continue_token.clone();
    while let Some(next) = token {
        let page = h.store().list("Widget", &options(Some(next))).unwrap();
        assert_eq!(
            page.resource_version, 6,
            "every page is read at the first page's version"
        );
        items.extend(page.items);
        token = page.continue_token;
    }
    let seen: Vec<_> = items
        .iter()
        .map(|o| {
            (
                o.metadata.name.as_str(),
                o.spec["size"].as_u64().unwrap(),
                o.metadata.resource_version,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("a", 1, 1),
            ("b", 1, 2),
            ("c", 1, 3),
            ("d", 1, 4),
            ("e", 1, 5),
            ("f", 1, 6)
        ]
    );
    let fresh = h.store().list("Widget", &options(None)).unwrap();
    assert_eq!(fresh.resource_version, 10);
}

pub(crate) fn list_continue_token_after_compaction_is_gone<H: Harness>() {
    let (h, _) = setup::<H>();
    for name in ["a", "b", "c"] {
        create(&h, &widget(name, 1));
    }
    let options = ListOptions {
        limit: 1,
        ..Default::default()
    };
    let first = h.store().list("Widget", &options).unwrap();
    create(&h, &widget("d", 1));
    h.store().compact(4).unwrap();
    let error = h
        .store()
        .list(
            "Widget",
            &ListOptions {
                continue_token: first.continue_token,
                ..options
            },
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Gone {
                requested: 3,
                oldest: 4
            }
        ),
        "{error}"
    );
}

pub(crate) fn list_bad_continue_token_is_invalid<H: Harness>() {
    let (h, _) = setup::<H>();
    create(&h, &widget("a", 1));
    for token in ["", "x", "1.", "1.Bad", "99.a"] {
        let options = ListOptions {
            continue_token: Some(token.into()),
            ..Default::default()
        };
        let error = h.store().list("Widget", &options).unwrap_err();
        assert!(
            matches!(error, StoreError::Invalid { ref field, .. } if field == "continue"),
            "{token:?}: {error}"
        );
    }
}

// --- watch --------------------------------------------------------------------------------

pub(crate) fn watch_from_version_replays_changes_in_order<H: Harness>() {
    let (h, _) = setup::<H>();
    let a = create(&h, &widget("a", 1));
    let from = WatchOptions {
        resource_version: Some(1),
        ..Default::default()
    };
    let mut early = h.store().watch("Widget", &from).unwrap();
    let mut change = a.clone();
    change.spec = json!({ "size": 2 });
    h.store().update(&alice(), &change).unwrap();
    create(&h, &widget("b", 1));
    h.store()
        .delete(&alice(), "Widget", "a", &DeleteOptions::default())
        .unwrap();
    let expected = vec![
        (EventType::Modified, "a".to_owned(), 2),
        (EventType::Added, "b".to_owned(), 3),
        (EventType::Deleted, "a".to_owned(), 4),
    ];
    assert_eq!(summary(&drain(&mut early)), expected);
    let mut late = h.store().watch("Widget", &from).unwrap();
    assert_eq!(
        summary(&drain(&mut late)),
        expected,
        "a later watch replays the same history"
    );
    let mut from_zero = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        summary(&drain(&mut from_zero))[0],
        (EventType::Added, "a".to_owned(), 1)
    );
}

pub(crate) fn watch_resumes_from_last_seen_without_gaps_or_repeats<H: Harness>() {
    let (h, _) = setup::<H>();
    let mut watch = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    for i in 0..5 {
        create(&h, &widget(&format!("w{i}"), 1));
    }
    let mut seen: Vec<u64> = Vec::new();
    for _ in 0..2 {
        seen.push(watch.try_next().unwrap().unwrap().resource_version());
    }
    let resume_from = watch.last_seen();
    drop(watch);
    for i in 5..8 {
        create(&h, &widget(&format!("w{i}"), 1));
    }
    let mut resumed = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(resume_from),
                ..Default::default()
            },
        )
        .unwrap();
    seen.extend(drain(&mut resumed).iter().map(WatchEvent::resource_version));
    assert_eq!(seen, (1..=8).collect::<Vec<_>>());
}

pub(crate) fn watch_without_version_starts_with_current_objects<H: Harness>() {
    let (h, _) = setup::<H>();
    create(&h, &widget("b", 1));
    create(&h, &labeled(widget("a", 1), &[("tier", "edge")]));
    let mut watch = h.store().watch("Widget", &WatchOptions::default()).unwrap();
    assert_eq!(
        summary(&drain(&mut watch)),
        [
            (EventType::Added, "a".to_owned(), 2),
            (EventType::Added, "b".to_owned(), 1)
        ]
    );
    create(&h, &widget("c", 1));
    assert_eq!(
        summary(&drain(&mut watch)),
        [(EventType::Added, "c".to_owned(), 3)]
    );
    let mut selected = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                label_selector: LabelSelector::parse("tier").unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        summary(&drain(&mut selected)),
        [(EventType::Added, "a".to_owned(), 2)]
    );
}

pub(crate) fn watch_older_than_history_after_compaction_is_gone<H: Harness>() {
    let (h, _) = setup::<H>();
    for i in 0..5 {
        create(&h, &widget(&format!("w{i}"), 1));
    }
    h.store().compact(3).unwrap();
    let error = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(2),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Gone {
                requested: 2,
                oldest: 3
            }
        ),
        "{error}"
    );
    let mut watch = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        drain(&mut watch)
            .iter()
            .map(WatchEvent::resource_version)
            .collect::<Vec<_>>(),
        [4, 5]
    );
}

pub(crate) fn watch_history_is_bounded<H: Harness>() {
    // The harness keeps 64 changes.
    let (h, _) = setup::<H>();
    let first = create(&h, &widget("a", 1));
    let mut current = first;
    for size in 2..=70 {
        current.spec = json!({ "size": size });
        current = h.store().update(&alice(), &current).unwrap();
    }
    assert!(matches!(
        h.store().watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(1),
                ..Default::default()
            }
        ),
        Err(StoreError::Gone { requested: 1, .. })
    ));
    let revision = h.store().revision().unwrap();
    let mut recent = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(revision - 64),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(drain(&mut recent).len(), 64);
}

pub(crate) fn watch_bookmarks_on_catch_up_and_progress_notify<H: Harness>() {
    let (h, _) = setup::<H>();
    create(&h, &widget("a", 1));
    create(&h, &labeled(widget("b", 1), &[("tier", "edge")]));
    let options = WatchOptions {
        resource_version: Some(0),
        label_selector: LabelSelector::parse("tier=edge").unwrap(),
        bookmarks: true,
    };
    let mut watch = h.store().watch("Widget", &options).unwrap();
    assert_eq!(
        summary(&drain(&mut watch)),
        [
            (EventType::Added, "b".to_owned(), 2),
            (EventType::Bookmark, String::new(), 2)
        ]
    );
    create(&h, &widget("c", 1));
    assert!(
        drain(&mut watch).is_empty(),
        "c does not match the selector"
    );
    h.store().progress_notify().unwrap();
    let events = drain(&mut watch);
    assert_eq!(summary(&events), [(EventType::Bookmark, String::new(), 3)]);
    assert_eq!(events[0].object.kind, "Widget");
    assert_eq!(watch.last_seen(), 3);
    let mut plain = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    h.store().progress_notify().unwrap();
    assert!(
        drain(&mut plain).is_empty(),
        "no bookmarks unless asked for"
    );
}

pub(crate) fn watch_selector_turns_label_changes_into_added_and_deleted<H: Harness>() {
    let (h, _) = setup::<H>();
    let a = create(&h, &widget("a", 1));
    let options = WatchOptions {
        resource_version: Some(1),
        label_selector: LabelSelector::parse("tier=edge").unwrap(),
        ..Default::default()
    };
    let mut watch = h.store().watch("Widget", &options).unwrap();
    let into = h
        .store()
        .update(&alice(), &labeled(a, &[("tier", "edge")]))
        .unwrap();
    let mut within = into.clone();
    within.spec = json!({ "size": 2 });
    let within = h.store().update(&alice(), &within).unwrap();
    let mut out = within.clone();
    out.metadata.labels.clear();
    h.store().update(&alice(), &out).unwrap();
    let events = drain(&mut watch);
    assert_eq!(
        summary(&events),
        [
            (EventType::Added, "a".to_owned(), 2),
            (EventType::Modified, "a".to_owned(), 3),
            (EventType::Deleted, "a".to_owned(), 4),
        ]
    );
}

pub(crate) fn watch_sees_only_its_kind<H: Harness>() {
    let (h, _) = setup::<H>();
    let mut watch = h
        .store()
        .watch(
            "Gadget",
            &WatchOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    create(&h, &widget("a", 1));
    create(&h, &Object::new("Gadget", "a", json!({})));
    assert_eq!(
        summary(&drain(&mut watch)),
        [(EventType::Added, "a".to_owned(), 2)]
    );
}

pub(crate) fn slow_watcher_is_closed_as_lagged<H: Harness>() {
    // The harness buffers 16 events per watcher.
    let (h, _) = setup::<H>();
    let mut slow = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    for i in 0..40 {
        create(&h, &widget(&format!("w{i}"), 1));
    }
    let mut delivered = 0;
    let error = loop {
        match slow.try_next() {
            Some(Ok(_)) => delivered += 1,
            Some(Err(error)) => break error,
            None => panic!("a lagging watch ends with Lagged"),
        }
    };
    assert!((16..40).contains(&delivered), "{delivered}");
    assert!(
        matches!(error, StoreError::Lagged { last_seen, .. } if last_seen == delivered),
        "{error}"
    );
    assert!(slow.try_next().is_none());
    let mut resumed = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(delivered),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(drain(&mut resumed).len() as u64, 40 - delivered);
}

pub(crate) fn watch_is_awaited_on_a_current_thread_runtime<H: Harness>() {
    let (h, _) = setup::<H>();
    let mut watch = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    std::thread::scope(|scope| {
        let store = h.store();
        scope.spawn(move || {
            for i in 0..3 {
                std::thread::sleep(std::time::Duration::from_millis(5));
                store
                    .create(&alice(), &widget(&format!("w{i}"), 1))
                    .unwrap();
            }
        });
        let versions = runtime.block_on(async {
            let mut versions = Vec::new();
            while versions.len() < 3 {
                versions.push(watch.next().await.unwrap().unwrap().resource_version());
            }
            versions
        });
        assert_eq!(versions, [1, 2, 3]);
    });
}

// --- audit --------------------------------------------------------------------------------

pub(crate) fn audit_records_every_change_with_versions_and_actor<H: Harness>() {
    let (h, clock) = setup::<H>();
    let a = create(&h, &widget("a", 1));
    clock.set(2_000_000);
    let mut change = a.clone();
    change.spec = json!({ "size": 2 });
    let a = h.store().update(&alice(), &change).unwrap();
    let mut status = a.clone();
    status.status.observed_generation = 2;
    h.store().update_status(&controller(), &status).unwrap();
    h.store()
        .delete(&alice(), "Widget", "a", &DeleteOptions::default())
        .unwrap();
    let records = h.store().audit_query(&AuditQuery::default()).unwrap();
    let rows: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.seq,
                r.actor.as_str(),
                r.verb,
                r.resource_version_before,
                r.resource_version_after,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, "alice", AuditVerb::Create, 0, 1),
            (2, "alice", AuditVerb::Update, 1, 2),
            (3, "system:controller", AuditVerb::UpdateStatus, 2, 3),
            (4, "alice", AuditVerb::Delete, 3, 4),
        ]
    );
    assert_eq!(records[0].time, Timestamp::from_unix_millis(1_000_000));
    assert_eq!(records[1].time, Timestamp::from_unix_millis(2_000_000));
    assert!(
        records
            .iter()
            .all(|r| r.kind == "Widget" && r.name == "a" && r.hash.len() == 64)
    );
    let report = h.store().audit_verify().unwrap();
    assert_eq!(
        (report.first_seq, report.last_seq, report.records),
        (Some(1), 4, 4)
    );
}

pub(crate) fn audit_records_nothing_for_refused_or_unchanged_writes<H: Harness>() {
    let (h, _) = setup::<H>();
    let a = create(&h, &widget("a", 1));
    let _ = h.store().create(&alice(), &widget("a", 1));
    let _ = h.store().create(&alice(), &widget("Bad", 1));
    let _ = h.store().update(&alice(), &a);
    let mut stale = a.clone();
    stale.metadata.resource_version = 99;
    let _ = h.store().update_status(&alice(), &stale);
    assert_eq!(audit_count(&h), 1);
    assert_eq!(h.store().audit_verify().unwrap().records, 1);
}

pub(crate) fn audit_patch_is_a_merge_patch_of_the_change<H: Harness>() {
    let (h, _) = setup::<H>();
    let a = create(
        &h,
        &Object::new("Gadget", "a", json!({ "x": 1, "y": { "z": 2 } })),
    );
    let mut change = a.clone();
    change.spec = json!({ "x": 1, "y": { "w": 3 } });
    change.metadata.labels.insert("tier".into(), "edge".into());
    h.store().update(&alice(), &change).unwrap();
    let records = h.store().audit_query(&AuditQuery::default()).unwrap();
    assert_eq!(records[0].patch["spec"], json!({ "x": 1, "y": { "z": 2 } }));
    assert_eq!(
        records[1].patch,
        json!({ "metadata": { "labels": { "tier": "edge" } }, "spec": { "y": { "z": null, "w": 3 } } })
    );
}

pub(crate) fn audit_query_by_time_actor_kind_and_name<H: Harness>() {
    let (h, clock) = setup::<H>();
    clock.set(10_000);
    create(&h, &widget("a", 1));
    clock.set(20_000);
    h.store().create(&controller(), &widget("b", 1)).unwrap();
    clock.set(30_000);
    create(&h, &Object::new("Gadget", "a", json!({})));
    let names = |query: AuditQuery| -> Vec<(String, String)> {
        h.store()
            .audit_query(&query)
            .unwrap()
            .into_iter()
            .map(|r| (r.kind, r.name))
            .collect()
    };
    let pair = |kind: &str, name: &str| (kind.to_owned(), name.to_owned());
    let at = Timestamp::from_unix_millis;
    assert_eq!(
        names(AuditQuery {
            since: Some(at(20_000)),
            until: Some(at(30_000)),
            ..Default::default()
        }),
        [pair("Widget", "b")]
    );
    assert_eq!(
        names(AuditQuery {
            actor: Some("alice".into()),
            ..Default::default()
        }),
        [pair("Widget", "a"), pair("Gadget", "a")]
    );
    assert_eq!(
        names(AuditQuery {
            kind: Some("Widget".into()),
            ..Default::default()
        }),
        [pair("Widget", "a"), pair("Widget", "b")]
    );
    assert_eq!(
        names(AuditQuery {
            name: Some("a".into()),
            kind: Some("Gadget".into()),
            ..Default::default()
        }),
        [pair("Gadget", "a")]
    );
    assert_eq!(
        names(AuditQuery {
            limit: 2,
            ..Default::default()
        })
        .len(),
        2
    );
}

pub(crate) fn audit_prune_keeps_the_chain_verifiable_from_the_first_kept_record<H: Harness>() {
    let (h, clock) = setup::<H>();
    for (i, time) in [10_000, 20_000, 30_000, 40_000].into_iter().enumerate() {
        clock.set(time);
        create(&h, &widget(&format!("w{i}"), 1));
    }
    let report = h
        .store()
        .audit_prune(Timestamp::from_unix_millis(30_000))
        .unwrap();
    assert_eq!((report.removed, report.anchor_seq), (2, 2));
    let verified = h.store().audit_verify().unwrap();
    assert_eq!(
        (verified.first_seq, verified.last_seq, verified.records),
        (Some(3), 4, 2)
    );
    clock.set(50_000);
    create(&h, &widget("w4", 1));
    assert_eq!(h.store().audit_verify().unwrap().records, 3);
    let again = h
        .store()
        .audit_prune(Timestamp::from_unix_millis(30_000))
        .unwrap();
    assert_eq!((again.removed, again.anchor_seq), (0, 2));
    let seqs: Vec<_> = h
        .store()
        .audit_query(&AuditQuery::default())
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, [3, 4, 5]);
}

pub(crate) fn audit_prune_of_everything_then_writes_still_verify<H: Harness>() {
    let (h, clock) = setup::<H>();
    create(&h, &widget("a", 1));
    create(&h, &widget("b", 1));
    let report = h
        .store()
        .audit_prune(Timestamp::from_unix_millis(i64::MAX))
        .unwrap();
    assert_eq!((report.removed, report.anchor_seq), (2, 2));
    let empty = h.store().audit_verify().unwrap();
    assert_eq!(
        (empty.first_seq, empty.last_seq, empty.records),
        (None, 2, 0)
    );
    clock.set(2_000_000);
    create(&h, &widget("c", 1));
    let verified = h.store().audit_verify().unwrap();
    assert_eq!((verified.first_seq, verified.last_seq), (Some(3), 3));
}

pub(crate) fn audit_time_never_goes_backwards<H: Harness>() {
    let (h, clock) = setup::<H>();
    clock.set(50_000);
    create(&h, &widget("a", 1));
    clock.set(40_000);
    create(&h, &widget("b", 1));
    let times: Vec<_> = h
        .store()
        .audit_query(&AuditQuery::default())
        .unwrap()
        .iter()
        .map(|r| r.time.unix_millis())
        .collect();
    assert_eq!(times, [50_000, 50_000]);
    h.store().audit_verify().unwrap();
}

// --- kudurru.io/enabled -------------------------------------------------------------------

pub(crate) fn disabled_annotation_conditions_round_trip_through_status<H: Harness>() {
    let (h, clock) = setup::<H>();
    let plain = create(&h, &widget("plain", 1));
    assert_eq!(
        enabled_status(&plain, clock.now()),
        None,
        "enabled objects need no status write"
    );
    let mut object = widget("a", 1);
    object
        .metadata
        .annotations
        .insert(ENABLED_ANNOTATION.into(), " False ".into());
    let created = create(&h, &object);
    let mut disabled = created.clone();
    disabled.status = enabled_status(&created, clock.now()).unwrap();
    let disabled = h.store().update_status(&controller(), &disabled).unwrap();
    let ready = find_condition(&disabled.status, CONDITION_READY).unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, "Disabled")
    );
    assert_eq!(
        find_condition(&disabled.status, CONDITION_DISABLED).map(|c| c.status),
        Some(ConditionStatus::True)
    );
    assert_eq!(enabled_status(&disabled, clock.now()), None);

    let mut enable = disabled.clone();
    enable.metadata.annotations.remove(ENABLED_ANNOTATION);
    let enabled = h.store().update(&alice(), &enable).unwrap();
    assert_eq!(enabled.metadata.generation, 1, "annotations are not spec");
    let mut status = enabled.clone();
    status.status = enabled_status(&enabled, clock.now()).unwrap();
    let enabled = h.store().update_status(&controller(), &status).unwrap();
    assert!(find_condition(&enabled.status, CONDITION_DISABLED).is_none());
}
