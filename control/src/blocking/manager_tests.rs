//! The manager's state machine with a fake engine and a scripted fetcher: no network, no core
//! matching. The test drives the loop by hand (watch events, commands, steps) so every
//! transition is checked at a known point.

use kudurru_storage::{BodyCache, BodyMeta, StoreError};
use std::collections::BTreeMap;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::PoisonError;

use arc_swap::ArcSwap;
use kudurru_storage::{
    Actor, ConditionStatus, ENABLED_ANNOTATION, MemoryStore, Store, StoreOptions, Watch,
    find_condition,
};
use serde_json::{Value, json};

use crate::blocking::status::CONDITION_DEGRADED;

use super::*;
use crate::blocking::engine::FakeEngine;
use crate::blocking::publish::Publisher;
use crate::blocking::source::{BoxFuture, ListFetcher};
use crate::config::Config;

/// Answers each URL from a script (the last answer repeats) and records what was asked.
#[derive(Default)]
struct ScriptedFetcher {
    script: Mutex<HashMap<String, VecDeque<Result<Fetched, SourceError>>>>,
    asked: Mutex<Vec<(String, Validators)>>,
}

fn body(text: &str, etag: Option<&str>) -> Result<Fetched, SourceError> {
    Ok(Fetched::Body {
        body: Bytes::from(text.to_owned()),
        validators: Validators {
            etag: etag.map(str::to_owned),
            last_modified: None,
        },
    })
}

fn failure(message: &str) -> Result<Fetched, SourceError> {
    Err(SourceError {
        message: message.into(),
        retryable: true,
    })
}

fn copy(answer: &Result<Fetched, SourceError>) -> Result<Fetched, SourceError> {
    match answer {
        Ok(Fetched::Body { body, validators }) => Ok(Fetched::Body {
            body: body.clone(),
            validators: validators.clone(),
        }),
        Ok(Fetched::NotModified) => Ok(Fetched::NotModified),
        Err(e) => Err(e.clone()),
    }
}

impl ScriptedFetcher {
    fn then(&self, url: &str, answer: Result<Fetched, SourceError>) {
        self.script
            .lock()
            .unwrap()
            .entry(url.into())
            .or_default()
            .push_back(answer);
    }
}

impl ListFetcher for ScriptedFetcher {
    fn fetch_url<'a>(
        &'a self,
        url: &'a str,
        previous: &'a Validators,
        _: FetchLimits,
    ) -> BoxFuture<'a, Result<Fetched, SourceError>> {
        self.asked
            .lock()
            .unwrap()
            .push((url.to_owned(), previous.clone()));
        let mut script = self.script.lock().unwrap();
        let queue = script.entry(url.to_owned()).or_default();
        let answer = match queue.len() {
            0 => failure("no such host"),
            1 => copy(&queue[0]),
            _ => queue.pop_front().unwrap_or_else(|| failure("empty")),
        };
        Box::pin(std::future::ready(answer))
    }

    fn read_file<'a>(
        &'a self,
        path: &'a Path,
        _: &'a Path,
        _: FetchLimits,
    ) -> BoxFuture<'a, Result<Bytes, SourceError>> {
        let answer = std::fs::read(path)
            .map(Bytes::from)
            .map_err(|e| SourceError {
                message: e.to_string(),
                retryable: false,
            });
        Box::pin(std::future::ready(answer))
    }
}

struct Rig {
    store: Arc<MemoryStore>,
    bodies: Arc<MemoryBodies>,
    engine: Arc<FakeEngine>,
    fetcher: Arc<ScriptedFetcher>,
    manager: Manager,
    watches: Vec<Watch>,
}

fn rig_with(
    store: Arc<MemoryStore>,
    bodies: Arc<MemoryBodies>,
    fetcher: Arc<ScriptedFetcher>,
) -> Rig {
    let engine = Arc::new(FakeEngine::default());
    let settings = Config::default().validate().unwrap().settings;
    let publisher = Arc::new(Publisher::new(Arc::new(ArcSwap::from_pointee(settings))));
    let shared = Arc::new(Shared::new(publisher, engine.clone(), false));
    let manager = Manager::new(ManagerParts {
        store: store.clone(),
        bodies: bodies.clone(),
        engine: engine.clone(),
        fetcher: fetcher.clone(),
        shared,
        settings: BlockingSettings::default(),
        cores: 2,
        follow: None,
        leading: None,
    });
    let watches = KINDS
        .iter()
        .map(|kind| {
            store
                .watch(
                    kind,
                    &WatchOptions {
                        bookmarks: true,
                        ..WatchOptions::default()
                    },
                )
                .unwrap()
        })
        .collect();
    Rig {
        store,
        bodies,
        engine,
        fetcher,
        manager,
        watches,
    }
}

fn rig() -> Rig {
    let store = Arc::new(MemoryStore::new(StoreOptions::new(
        crate::objects::registry(),
    )));
    rig_with(store, Arc::default(), Arc::default())
}

fn admin() -> Actor {
    Actor::principal("token:test").unwrap()
}

impl Rig {
    /// Delivers every pending event and command and steps until nothing moves.
    async fn settle(&mut self) {
        for _ in 0..10 {
            for (which, watch) in self.watches.iter_mut().enumerate() {
                while let Some(Ok(event)) = watch.try_next() {
                    self.manager.apply(which, event).await;
                }
            }
            while let Ok(command) = self.manager.inbox.try_recv() {
                self.manager.on_command(command).await;
            }
            self.manager.step().await;
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        }
    }

    fn create(&self, kind: &str, name: &str, spec: Value) {
        self.store
            .create(&admin(), &Object::new(kind, name, spec))
            .unwrap();
    }

    fn set_enabled(&self, kind: &str, name: &str, enabled: bool) {
        let mut object = self.store.get(kind, name).unwrap();
        if enabled {
            object.metadata.annotations.remove(ENABLED_ANNOTATION);
        } else {
            object
                .metadata
                .annotations
                .insert(ENABLED_ANNOTATION.into(), "false".into());
        }
        self.store.update(&admin(), &object).unwrap();
    }

    fn status(&self, kind: &str, name: &str) -> kudurru_storage::ObjectStatus {
        self.store.get(kind, name).unwrap().status
    }

    fn condition(&self, kind: &str, name: &str, type_: &str) -> Option<(ConditionStatus, String)> {
        let status = self.status(kind, name);
        find_condition(&status, type_).map(|c| (c.status, c.message.clone()))
    }

    fn refresh(&self, list: &str) {
        self.manager
            .commands()
            .send(Command::Refresh(list.into()))
            .unwrap();
    }

    fn gauges(&self, list: &str) -> ListGauges {
        self.manager.shared.metrics.lists()[list].clone()
    }
}

const URL: &str = "https://lists.example/ads.txt";

#[tokio::test]
async fn an_inline_list_compiles_and_its_status_says_so() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "ads",
        json!({"sources": [{"inline": ["ads.example", "track.example", "invalid", "# note"]}]}),
    );
    assert_eq!(
        rig.manager.shared.unready().as_deref(),
        Some("block lists are still being read from the store")
    );
    rig.settle().await;
    let status = rig.status(BLOCK_LIST, "ads");
    assert_eq!(status.fields["entries"], 2);
    assert_eq!(status.fields["invalidLines"], 1);
    assert_eq!(status.fields["format"], "domains");
    assert_eq!(status.fields["samples"][0]["text"], "invalid");
    assert_eq!(
        rig.condition(BLOCK_LIST, "ads", "Ready").unwrap().0,
        ConditionStatus::True
    );
    assert_eq!(
        rig.condition(BLOCK_LIST, "ads", CONDITION_DEGRADED)
            .unwrap()
            .0,
        ConditionStatus::False
    );
    assert_eq!(*rig.engine.last_lists.lock().unwrap(), ["ads"]);
    assert_eq!(rig.manager.shared.unready(), None);
    assert_eq!(rig.gauges("ads").entries, 2);
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_last_good_copy_and_a_304_sends_the_validators() {
    let mut rig = rig();
    rig.fetcher
        .then(URL, body("ads.example\ntrack.example\n", Some("\"v1\"")));
    rig.fetcher
        .then(URL, failure("HTTP 500 Internal Server Error"));
    rig.create(BLOCK_LIST, "ads", json!({"sources": [{"url": URL}]}));
    rig.settle().await;
    assert_eq!(rig.status(BLOCK_LIST, "ads").fields["entries"], 2);
    assert_eq!(
        rig.status(BLOCK_LIST, "ads").fields["sources"][0]["etag"],
        "\"v1\""
    );

    rig.refresh("ads");
    rig.settle().await;
    let status = rig.status(BLOCK_LIST, "ads");
    assert_eq!(status.fields["entries"], 2, "the last good copy stays");
    let (degraded, why) = rig
        .condition(BLOCK_LIST, "ads", CONDITION_DEGRADED)
        .unwrap();
    assert_eq!(degraded, ConditionStatus::True);
    assert!(why.contains("HTTP 500"), "{why}");
    assert_eq!(
        status.fields["sources"][0]["error"],
        "HTTP 500 Internal Server Error"
    );
    assert_eq!(
        rig.condition(BLOCK_LIST, "ads", "Ready").unwrap().0,
        ConditionStatus::True
    );
    assert_eq!(rig.gauges("ads").refresh_errors, 1);
    assert!(rig.gauges("ads").degraded);
    assert_eq!(*rig.engine.last_lists.lock().unwrap(), ["ads"]);

    rig.fetcher.script.lock().unwrap().clear();
    rig.fetcher.then(URL, Ok(Fetched::NotModified));
    rig.refresh("ads");
    rig.settle().await;
    let asked = rig.fetcher.asked.lock().unwrap().clone();
    let (_, validators) = asked.last().unwrap();
    assert_eq!(
        validators.etag.as_deref(),
        Some("\"v1\""),
        "a conditional GET"
    );
    assert_eq!(
        rig.condition(BLOCK_LIST, "ads", CONDITION_DEGRADED)
            .unwrap()
            .0,
        ConditionStatus::False
    );
    assert_eq!(rig.status(BLOCK_LIST, "ads").fields["entries"], 2);
    assert!(rig.gauges("ads").last_refresh.is_some());
}

#[tokio::test]
async fn an_empty_refresh_keeps_the_last_good_copy() {
    let mut rig = rig();
    rig.fetcher.then(URL, body("ads.example\n", None));
    rig.fetcher.then(URL, body("# nothing today\n", None));
    rig.create(BLOCK_LIST, "ads", json!({"sources": [{"url": URL}]}));
    rig.settle().await;
    rig.refresh("ads");
    rig.settle().await;
    assert_eq!(rig.status(BLOCK_LIST, "ads").fields["entries"], 1);
    let (degraded, why) = rig
        .condition(BLOCK_LIST, "ads", CONDITION_DEGRADED)
        .unwrap();
    assert_eq!(degraded, ConditionStatus::True);
    assert!(why.contains("no rules"), "{why}");
}

#[tokio::test]
async fn a_list_that_never_loaded_holds_readiness_until_it_does() {
    let mut rig = rig();
    rig.fetcher.then(URL, failure("connection refused"));
    rig.create(BLOCK_LIST, "ads", json!({"sources": [{"url": URL}]}));
    rig.settle().await;
    let why = rig.manager.shared.unready().unwrap();
    assert!(why.contains("ads"), "{why}");
    let (ready, message) = rig.condition(BLOCK_LIST, "ads", "Ready").unwrap();
    assert_eq!(ready, ConditionStatus::False);
    assert!(message.contains("connection refused"), "{message}");
    assert!(
        rig.manager
            .shared
            .diagnoses()
            .iter()
            .any(|d| d.code == "blocklist_not_loaded")
    );
    rig.manager
        .on_command(Command::Settings(BlockingSettings {
            allow_degraded: true,
            ..BlockingSettings::default()
        }))
        .await;
    assert_eq!(rig.manager.shared.unready(), None);
    rig.manager
        .on_command(Command::Settings(BlockingSettings::default()))
        .await;

    rig.fetcher.script.lock().unwrap().clear();
    rig.fetcher.then(URL, body("ads.example\n", None));
    rig.refresh("ads");
    rig.settle().await;
    assert_eq!(rig.manager.shared.unready(), None);
}

#[tokio::test]
async fn a_disabled_list_is_unloaded_and_not_fetched_and_policies_say_they_skip_it() {
    let mut rig = rig();
    rig.fetcher.then(URL, body("ads.example\n", None));
    rig.create(BLOCK_LIST, "ads", json!({"sources": [{"url": URL}]}));
    rig.create(
        BLOCK_LIST,
        "local",
        json!({"sources": [{"inline": ["x.example"]}]}),
    );
    rig.create(
        POLICY,
        "home",
        json!({"clientGroups": ["default"], "denyLists": ["ads", "local", "nope"]}),
    );
    rig.settle().await;
    assert_eq!(*rig.engine.last_lists.lock().unwrap(), ["ads", "local"]);
    let (ready, message) = rig.condition(POLICY, "home", "Ready").unwrap();
    assert_eq!(ready, ConditionStatus::False);
    assert!(message.contains("missing BlockList nope"), "{message}");

    rig.set_enabled(BLOCK_LIST, "ads", false);
    rig.settle().await;
    assert_eq!(*rig.engine.last_lists.lock().unwrap(), ["local"]);
    assert_eq!(
        crate::blocking::Engine::entries(&*rig.engine, &Matcher::default(), ListId(0)),
        0
    );
    assert!(
        rig.bodies.body_keys().unwrap().is_empty(),
        "bodies collected"
    );
    let (_, message) = rig.condition(POLICY, "home", "Ready").unwrap();
    assert!(
        message.contains("skips disabled BlockList ads"),
        "{message}"
    );
    assert_eq!(
        rig.status(POLICY, "home").fields["disabled"][0]["name"],
        "ads"
    );
    assert_eq!(
        rig.condition(BLOCK_LIST, "ads", "Disabled").unwrap().0,
        ConditionStatus::True
    );
    assert!(
        !rig.status(BLOCK_LIST, "ads").fields.contains_key("entries"),
        "a disabled list shows no entries"
    );
    assert!(
        rig.manager
            .shared
            .diagnoses()
            .iter()
            .any(|d| d.code == "reference_disabled" && d.message.contains("ads"))
    );
    let fetches = rig.fetcher.asked.lock().unwrap().len();
    rig.refresh("ads");
    rig.settle().await;
    assert_eq!(
        rig.fetcher.asked.lock().unwrap().len(),
        fetches,
        "no fetch while disabled"
    );
    assert!(!rig.manager.shared.metrics.lists().contains_key("ads"));

    rig.set_enabled(BLOCK_LIST, "ads", true);
    rig.settle().await;
    assert_eq!(*rig.engine.last_lists.lock().unwrap(), ["ads", "local"]);
    assert!(rig.fetcher.asked.lock().unwrap().len() > fetches);
    let (_, message) = rig.condition(POLICY, "home", "Ready").unwrap();
    assert!(!message.contains("disabled"), "{message}");
}

#[tokio::test]
async fn a_restart_without_network_loads_the_cached_body() {
    let mut first = rig();
    first
        .fetcher
        .then(URL, body("ads.example\nb.example\n", Some("\"v7\"")));
    first.create(BLOCK_LIST, "ads", json!({"sources": [{"url": URL}]}));
    first.settle().await;
    assert_eq!(first.bodies.body_keys().unwrap().len(), 1);

    let offline = Arc::new(ScriptedFetcher::default());
    offline.then(URL, failure("network unreachable"));
    let mut second = rig_with(first.store.clone(), first.bodies.clone(), offline.clone());
    second.settle().await;
    let status = second.status(BLOCK_LIST, "ads");
    assert_eq!(status.fields["entries"], 2, "compiled from the body cache");
    assert_eq!(
        second.condition(BLOCK_LIST, "ads", "Ready").unwrap().0,
        ConditionStatus::True
    );
    assert_eq!(
        second
            .condition(BLOCK_LIST, "ads", CONDITION_DEGRADED)
            .unwrap()
            .0,
        ConditionStatus::True
    );
    assert_eq!(second.manager.shared.unready(), None);
    assert_eq!(
        offline.asked.lock().unwrap()[0].1.etag.as_deref(),
        Some("\"v7\""),
        "the refresh after the cache load is conditional"
    );
}

#[tokio::test]
async fn nothing_changed_writes_no_status() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "ads",
        json!({"sources": [{"inline": ["a.example"]}]}),
    );
    rig.create(CLIENT_GROUP, "kids", json!({"clients": ["192.0.2.0/24"]}));
    rig.create(
        POLICY,
        "home",
        json!({"clientGroups": ["kids"], "denyLists": ["ads"]}),
    );
    rig.settle().await;
    let version = rig.store.revision().unwrap();
    let builds = rig.engine.builds.load(std::sync::atomic::Ordering::Relaxed);
    rig.settle().await;
    assert_eq!(rig.store.revision().unwrap(), version);
    assert_eq!(
        rig.engine.builds.load(std::sync::atomic::Ordering::Relaxed),
        builds,
        "our own status writes rebuild nothing"
    );
    assert!(
        rig.condition(CLIENT_GROUP, "kids", "Ready").is_none(),
        "a healthy group carries no status"
    );
    assert_eq!(
        rig.condition(POLICY, "home", "Active").unwrap().0,
        ConditionStatus::True
    );
}

#[tokio::test]
async fn flipping_a_group_rebuilds_and_the_policy_names_it() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "ads",
        json!({"sources": [{"inline": ["a.example"]}]}),
    );
    rig.create(CLIENT_GROUP, "kids", json!({"clientIds": ["kids"]}));
    rig.create(
        POLICY,
        "school",
        json!({"clientGroups": ["kids"], "denyLists": ["ads"]}),
    );
    rig.settle().await;
    let builds = rig.engine.builds.load(std::sync::atomic::Ordering::Relaxed);
    rig.set_enabled(CLIENT_GROUP, "kids", false);
    rig.settle().await;
    assert!(rig.engine.builds.load(std::sync::atomic::Ordering::Relaxed) > builds);
    let (_, message) = rig.condition(POLICY, "school", "Ready").unwrap();
    assert!(
        message.contains("skips disabled ClientGroup kids"),
        "{message}"
    );
    let inputs = rig.manager.shared.check_inputs().unwrap();
    assert!(inputs.groups.is_empty(), "a disabled group is left out");
}

#[tokio::test]
async fn a_policy_outside_its_schedule_is_reported_inactive() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "ads",
        json!({"sources": [{"inline": ["a.example"]}]}),
    );
    rig.create(
        POLICY,
        "evenings",
        json!({"clientGroups": ["default"], "denyLists": ["ads"],
               "schedule": {"timeZone": "UTC", "windows": [{"days": ["mon"], "from": "18:00", "to": "22:00"}]}}),
    );
    *rig.engine.schedule.lock().unwrap() = (
        vec!["evenings".into()],
        Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600)),
    );
    rig.settle().await;
    let (active, _) = rig.condition(POLICY, "evenings", "Active").unwrap();
    assert_eq!(active, ConditionStatus::False);
    assert_eq!(rig.status(POLICY, "evenings").fields["active"], false);
    assert!(rig.manager.next_wake() <= Duration::from_secs(3601));
}

#[tokio::test]
async fn max_list_entries_recompiles_from_the_kept_bodies() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "ads",
        json!({"sources": [{"inline": ["a.example", "b.example", "c.example"]}]}),
    );
    rig.settle().await;
    rig.manager
        .on_command(Command::Settings(BlockingSettings {
            max_list_entries: 2,
            ..BlockingSettings::default()
        }))
        .await;
    rig.settle().await;
    let status = rig.status(BLOCK_LIST, "ads");
    assert_eq!(status.fields["entries"], 2);
    assert_eq!(status.fields["truncated"], 1);
}

#[tokio::test]
async fn a_deleted_list_leaves_the_matcher_and_its_slot_is_reused() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "a",
        json!({"sources": [{"inline": ["a.example"]}]}),
    );
    rig.settle().await;
    assert_eq!(rig.manager.lists["a"].slot, Some(ListId(0)));
    rig.store
        .delete(&admin(), BLOCK_LIST, "a", &Default::default())
        .unwrap();
    rig.settle().await;
    assert!(rig.engine.last_lists.lock().unwrap().is_empty());
    rig.create(
        BLOCK_LIST,
        "b",
        json!({"sources": [{"inline": ["b.example"]}]}),
    );
    rig.settle().await;
    assert_eq!(rig.manager.lists["b"].slot, Some(ListId(0)));
}

/// The leader's stall in a fleet (docs/benchmarks.md "Cluster"): a status write that races an
/// edit (the edit is in the store, its watch event not yet applied) gets Conflict, is retried on
/// the stored object and returns it, edit included. The manager must not take that object as
/// what it has acted on, or the edit's own event later looks like a status echo and the list
/// keeps its old entries until the next edit.
#[tokio::test]
async fn a_status_write_that_races_an_edit_does_not_swallow_the_edit() {
    let mut rig = rig();
    rig.create(
        BLOCK_LIST,
        "ads",
        json!({"sources": [{"inline": ["a.example"]}]}),
    );
    rig.settle().await;
    assert_eq!(rig.status(BLOCK_LIST, "ads").fields["entries"], 1);
    // The edit lands in the store; its event waits in the watch.
    let mut edited = rig.store.get(BLOCK_LIST, "ads").unwrap();
    edited.spec = json!({"sources": [{"inline": ["a.example", "b.example"]}]});
    rig.store.update(&admin(), &edited).unwrap();
    // Meanwhile the manager has a status to write (here: it forgets the one it wrote), on the
    // object as it knew it: Conflict, retried on the stored (edited) object.
    if let Some(state) = rig.manager.lists.get_mut("ads") {
        state.object.status = Default::default();
    }
    rig.manager.write_statuses().await;
    // Now the edit's event arrives: it must be compiled.
    rig.settle().await;
    assert_eq!(
        rig.status(BLOCK_LIST, "ads").fields["entries"],
        2,
        "the edit was taken for the echo of a status write"
    );
    assert_eq!(rig.gauges("ads").entries, 2);
}

/// Bodies in memory, for the manager's tests.
#[derive(Debug, Default)]
struct MemoryBodies(Mutex<BTreeMap<String, (Vec<u8>, BodyMeta)>>);

impl BodyCache for MemoryBodies {
    fn put_body(&self, key: &str, body: &[u8], meta: &BodyMeta) -> Result<(), StoreError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), (body.to_vec(), meta.clone()));
        Ok(())
    }

    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned())
    }

    fn delete_bodies(&self, prefix: &str) -> Result<u64, StoreError> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let before = map.len();
        map.retain(|key, _| !key.starts_with(prefix));
        Ok((before - map.len()) as u64)
    }

    fn body_keys(&self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect())
    }
}
