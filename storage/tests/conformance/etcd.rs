//! etcd-only rules: what only a store shared by several nodes shows (two handles on one etcd,
//! races between nodes, etcd stopped and killed, compaction, fencing, chunked bodies).

use std::collections::BTreeSet;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use kudurru_storage::{
    AuditLog, AuditQuery, BODY_CHUNK_BYTES, BodyCache, DeleteOptions, EtcdStore, EventType, Fence,
    ListOptions, Store, StoreError, Timestamp, Watch, WatchEvent, WatchOptions,
};

use crate::bodies::meta;
use crate::harness::*;

/// Generous bound for anything that must happen "soon" on a loaded 2-core machine.
const SOON: Duration = Duration::from_secs(20);

/// The next event of `watch`, polled until `SOON`.
fn next_event(watch: &mut Watch) -> WatchEvent {
    let deadline = Instant::now() + SOON;
    loop {
        if let Some(event) = watch.try_next() {
            return event.unwrap();
        }
        assert!(Instant::now() < deadline, "no watch event within {SOON:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Retries `call` until it succeeds (etcd coming back), for at most `SOON`.
fn eventually<T>(mut call: impl FnMut() -> Result<T, StoreError>) -> T {
    let deadline = Instant::now() + SOON;
    loop {
        match call() {
            Ok(value) => return value,
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "still failing after {SOON:?}: {error}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn two_nodes() -> (Etcd, EtcdStore, ManualClock) {
    let (h, clock) = setup::<Etcd>();
    let second = h.second_node(options(&clock));
    (h, second, clock)
}

#[test]
fn a_write_through_one_node_reaches_the_other_nodes_watch_and_reads() {
    let (h, second, _) = two_nodes();
    let mut watch = second.watch("Widget", &WatchOptions::default()).unwrap();
    let created = h.store().create(&alice(), &widget("a", 1)).unwrap();
    let event = next_event(&mut watch);
    assert_eq!(event.type_, EventType::Added);
    assert_eq!(event.object, created);
    assert_eq!(second.get("Widget", "a").unwrap(), created);
    assert_eq!(
        second.revision().unwrap(),
        created.metadata.resource_version
    );
    let mut changed = created.clone();
    changed.spec = serde_json::json!({ "size": 2 });
    let updated = second.update(&alice(), &changed).unwrap();
    let mut first_watch = h
        .store()
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(created.metadata.resource_version),
                ..WatchOptions::default()
            },
        )
        .unwrap();
    let event = next_event(&mut first_watch);
    assert_eq!(
        (event.type_, event.object),
        (EventType::Modified, updated.clone())
    );
    let deleted = h
        .store()
        .delete(&alice(), "Widget", "a", &DeleteOptions::default())
        .unwrap();
    let event = next_event(&mut watch);
    assert_eq!(
        (event.type_, event.object.metadata.resource_version),
        (EventType::Modified, updated.metadata.resource_version)
    );
    let event = next_event(&mut watch);
    assert_eq!((event.type_, event.object), (EventType::Deleted, deleted));
}

#[test]
fn concurrent_updates_from_two_nodes_exactly_one_wins() {
    let (h, second, _) = two_nodes();
    for round in 0..5 {
        let name = format!("w{round}");
        let created = h.store().create(&alice(), &widget(&name, 1)).unwrap();
        let barrier = Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|scope| {
            let stores: [&EtcdStore; 2] = [h.store(), &second];
            let handles: Vec<_> = stores
                .into_iter()
                .enumerate()
                .map(|(i, store)| {
                    let mut next = created.clone();
                    next.spec = serde_json::json!({ "size": 10 + i });
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        store.update(&alice(), &next)
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
            results.iter().any(|r| matches!(
                r,
                Err(StoreError::Conflict { expected, .. }) if *expected == created.metadata.resource_version
            )),
            "{results:?}"
        );
    }
    h.store().audit_verify().unwrap();
}

#[test]
fn concurrent_writes_of_different_objects_from_two_nodes_all_succeed_and_the_chain_verifies() {
    let (h, second, _) = two_nodes();
    const PER_NODE: usize = 12;
    let versions: Vec<u64> = std::thread::scope(|scope| {
        let stores: [&EtcdStore; 2] = [h.store(), &second];
        let handles: Vec<_> = stores
            .into_iter()
            .enumerate()
            .flat_map(|(node, store)| (0..PER_NODE).map(move |i| (node, i, store)))
            .map(|(node, i, store)| {
                scope.spawn(move || {
                    store
                        .create(&alice(), &widget(&format!("n{node}-{i}"), 1))
                        .unwrap()
                        .metadata
                        .resource_version
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: BTreeSet<u64> = versions.iter().copied().collect();
    let total = (2 * PER_NODE) as u64;
    assert_eq!(
        distinct,
        (1..=total).collect(),
        "dense, one revision per write"
    );
    for store in [h.store(), &second] {
        let report = store.audit_verify().unwrap();
        assert_eq!((report.records, report.last_seq), (total, total));
        assert_eq!(
            store
                .list("Widget", &ListOptions::default())
                .unwrap()
                .items
                .len(),
            2 * PER_NODE
        );
    }
}

#[test]
fn etcd_stopped_or_killed_calls_fail_unavailable_in_time_and_watches_resume_exactly() {
    let mut server = EtcdServer::start();
    let clock = ManualClock::default();
    clock.set(1_000_000);
    let mut etcd_options = server.options(&unique_prefix());
    etcd_options.request_timeout = Duration::from_secs(2);
    let store = EtcdStore::connect(etcd_options.clone(), options(&clock)).unwrap();
    let writer = EtcdStore::connect(etcd_options, options(&clock)).unwrap();
    let mut watch = store.watch("Widget", &WatchOptions::default()).unwrap();
    writer.create(&alice(), &widget("a", 1)).unwrap();
    assert!(store.connected());

    // Stopped: every call answers Unavailable within the request timeout (plus scheduling).
    server.signal("STOP");
    let started = Instant::now();
    let error = store.get("Widget", "a").unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains(&server.url), "{error}");
    let started = Instant::now();
    let error = store.create(&alice(), &widget("b", 1)).unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(!store.connected());
    server.signal("CONT");
    // (The create sent while etcd was stopped may have been applied when it resumed: its
    // outcome was unknown, which is what Unavailable says of a write.)
    eventually(|| writer.create(&alice(), &widget("c", 1)));

    // Killed and restarted on the same data: the watch stream breaks and resumes.
    server.kill();
    assert!(store.get("Widget", "a").is_err());
    server.restart();
    eventually(|| writer.create(&alice(), &widget("d", 1)));
    let mut changed = eventually(|| writer.get("Widget", "a"));
    changed.spec = serde_json::json!({ "size": 5 });
    writer.update(&alice(), &changed).unwrap();

    // The watch saw every change once, in order, with nothing missing.
    let last = writer.revision().unwrap();
    let mut seen = Vec::new();
    while seen.last().is_none_or(|(_, _, rv)| *rv < last) {
        let event = next_event(&mut watch);
        let rv = event.resource_version();
        seen.push((event.type_, event.object.metadata.name, rv));
    }
    let versions: Vec<u64> = seen.iter().map(|(_, _, rv)| *rv).collect();
    assert_eq!(versions, (1..=last).collect::<Vec<_>>(), "{seen:?}");
    let names: Vec<&str> = seen.iter().map(|(_, name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"a"));
    assert_eq!(names.last(), Some(&"a"));
    assert!(names.contains(&"c") && names.contains(&"d"), "{seen:?}");
    assert!(store.connected());
    store.audit_verify().unwrap();
}

#[test]
fn compaction_reaches_etcd_and_older_watches_and_tokens_are_gone() {
    let (h, second, _) = two_nodes();
    for name in ["a", "b", "c", "d", "e"] {
        h.store().create(&alice(), &widget(name, 1)).unwrap();
    }
    let page = h
        .store()
        .list(
            "Widget",
            &ListOptions {
                limit: 2,
                ..ListOptions::default()
            },
        )
        .unwrap();
    h.store().compact(5).unwrap();
    let gone = |result: Result<Watch, StoreError>| matches!(result, Err(StoreError::Gone { .. }));
    assert!(gone(h.store().watch(
        "Widget",
        &WatchOptions {
            resource_version: Some(3),
            ..WatchOptions::default()
        }
    )));
    h.store().create(&alice(), &widget("f", 1)).unwrap();
    h.store().compact(6).unwrap();
    assert!(matches!(
        h.store().list(
            "Widget",
            &ListOptions {
                limit: 2,
                continue_token: page.continue_token.clone(),
                ..ListOptions::default()
            }
        ),
        Err(StoreError::Gone { .. })
    ));
    // etcd itself compacted: a read at a revision before the compaction fails.
    let mut client = h.store().client();
    let error = h
        .store()
        .runtime()
        .block_on(async move {
            client
                .get(
                    "anything",
                    Some(etcd_client::GetOptions::new().with_revision(2)),
                )
                .await
        })
        .unwrap_err();
    assert!(error.to_string().contains("compacted"), "{error}");
    // The other node keeps following: a new write reaches it.
    let mut watch = second
        .watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(second.revision().unwrap()),
                ..WatchOptions::default()
            },
        )
        .unwrap();
    h.store().create(&alice(), &widget("g", 1)).unwrap();
    assert_eq!(next_event(&mut watch).object.metadata.name, "g");
}

#[test]
fn a_stale_fence_refuses_leader_writes_and_changes_nothing() {
    let (h, _second, clock) = two_nodes();
    let store = h.store();
    let election = [store.key_prefix(), b"election/leader".as_slice()].concat();
    let put = |value: &'static str| {
        let mut client = store.client();
        let key = election.clone();
        store
            .runtime()
            .block_on(async move { client.put(key, value, None).await })
            .unwrap()
            .header()
            .unwrap()
            .revision()
    };
    let won = put("node-1");
    store.set_fence(Some(Fence {
        key: election.clone(),
        create_revision: won,
    }));
    // While the fence holds, leader writes go through.
    let object = store.create(&controller(), &widget("a", 1)).unwrap();
    let body = b"0.0.0.0 ads.example\n";
    store
        .put_body("BlockList/ads/0", body, &meta(body, None, 1))
        .unwrap();
    clock.set(2_000_000);

    // Leadership lost: the key is deleted and taken by another node (a new create revision).
    {
        let mut client = store.client();
        let key = election.clone();
        store
            .runtime()
            .block_on(async move { client.delete(key, None).await })
            .unwrap();
    }
    put("node-2");
    let revision = store.revision().unwrap();
    let audit = store.audit_query(&AuditQuery::default()).unwrap().len();
    let fenced = |result: Result<(), StoreError>| match result {
        Err(StoreError::Fenced { reason }) => assert!(reason.contains("leadership"), "{reason}"),
        other => panic!("expected Fenced, got {other:?}"),
    };
    let mut changed = object.clone();
    changed.spec = serde_json::json!({ "size": 9 });
    fenced(store.update(&controller(), &changed).map(drop));
    fenced(store.create(&controller(), &widget("b", 1)).map(drop));
    let other = b"0.0.0.0 other.example\n";
    fenced(store.put_body("BlockList/ads/0", other, &meta(other, None, 2)));
    fenced(store.delete_bodies("").map(drop));
    fenced(
        store
            .audit_prune(Timestamp::from_unix_millis(i64::MAX))
            .map(drop),
    );
    // Nothing changed.
    assert_eq!(store.revision().unwrap(), revision);
    assert_eq!(store.get("Widget", "a").unwrap(), object);
    assert!(store.get("Widget", "b").is_err());
    assert_eq!(
        store.get_body("BlockList/ads/0").unwrap().unwrap().0,
        body.to_vec()
    );
    assert_eq!(
        store.audit_query(&AuditQuery::default()).unwrap().len(),
        audit
    );
    // A principal's write is not leader work: it is not fenced.
    store.update(&alice(), &changed).unwrap();
    // Without the fence (a node that is not leader does no leader work), writes go through.
    store.set_fence(None);
    store.create(&controller(), &widget("b", 1)).unwrap();
    store.audit_verify().unwrap();
}

#[test]
fn a_3_mib_body_round_trips_in_chunks_and_its_replacement_removes_the_old_chunks() {
    let (h, second, _) = two_nodes();
    let store = h.store();
    let mut changed = second.watch_bodies();
    let body: Vec<u8> = (0..3 * BODY_CHUNK_BYTES + 17)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    store
        .put_body("BlockList/big/0", &body, &meta(&body, Some("\"v1\""), 5))
        .unwrap();
    let (read, read_meta) = second.get_body("BlockList/big/0").unwrap().unwrap();
    assert!(read == body, "the body read back differs");
    assert_eq!(read_meta, meta(&body, Some("\"v1\""), 5));
    let chunk_keys = |store: &EtcdStore| {
        let mut client = store.client();
        let prefix = [store.key_prefix(), b"bodies/".as_slice()].concat();
        store
            .runtime()
            .block_on(async move {
                client
                    .get(
                        prefix,
                        Some(
                            etcd_client::GetOptions::new()
                                .with_prefix()
                                .with_keys_only(),
                        ),
                    )
                    .await
            })
            .unwrap()
            .kvs()
            .len()
    };
    assert_eq!(chunk_keys(store), 4, "4 chunks of 1 MiB at most");
    // The follower hears of the new body.
    let deadline = Instant::now() + SOON;
    loop {
        if let Ok(key) = changed.try_recv() {
            assert_eq!(key, "BlockList/big/0");
            break;
        }
        assert!(Instant::now() < deadline, "no body change notice");
        std::thread::sleep(Duration::from_millis(10));
    }
    let small = b"0.0.0.0 small.example\n";
    store
        .put_body("BlockList/big/0", small, &meta(small, None, 6))
        .unwrap();
    assert_eq!(
        second.get_body("BlockList/big/0").unwrap().unwrap().0,
        small
    );
    assert_eq!(chunk_keys(store), 1, "the old version's chunks are gone");
    assert_eq!(store.delete_bodies("BlockList/").unwrap(), 1);
    assert_eq!(chunk_keys(store), 0);
}

#[test]
fn etcd_unreachable_at_connect_is_unavailable_in_time() {
    let mut options = EtcdServer::shared().options(&unique_prefix());
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    options.endpoints = vec![format!("http://127.0.0.1:{port}")];
    options.dial_timeout = Duration::from_secs(1);
    options.request_timeout = Duration::from_secs(1);
    let clock = ManualClock::default();
    let started = Instant::now();
    let error = EtcdStore::connect(options, crate::harness::options(&clock))
        .err()
        .expect("no etcd there");
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_list_longer_than_one_range_page_is_read_whole_at_one_revision() {
    let (h, second, _) = two_nodes();
    const OBJECTS: usize = 600;
    let payload = "x".repeat(2048);
    std::thread::scope(|scope| {
        for part in 0..4 {
            let (store, payload) = (h.store(), &payload);
            scope.spawn(move || {
                for i in (part..OBJECTS).step_by(4) {
                    let object = kudurru_storage::Object::new(
                        "Gadget",
                        format!("g{i:04}"),
                        serde_json::json!({ "payload": payload }),
                    );
                    store.create(&alice(), &object).unwrap();
                }
            });
        }
    });
    let list = second.list("Gadget", &ListOptions::default()).unwrap();
    assert_eq!(list.items.len(), OBJECTS);
    assert_eq!(list.resource_version, OBJECTS as u64);
    let names: Vec<String> = list.items.iter().map(|o| o.metadata.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "in name order");
    assert_eq!(
        second.audit_query(&AuditQuery::default()).unwrap().len(),
        OBJECTS
    );
    assert_eq!(second.audit_verify().unwrap().records, OBJECTS as u64);
}

#[test]
fn a_store_opened_while_etcd_is_down_follows_once_etcd_answers() {
    let mut server = EtcdServer::start();
    let clock = ManualClock::default();
    clock.set(1_000_000);
    let mut etcd_options = server.options(&unique_prefix());
    etcd_options.request_timeout = Duration::from_secs(1);
    etcd_options.dial_timeout = Duration::from_secs(1);
    let writer = EtcdStore::connect(etcd_options.clone(), options(&clock)).unwrap();
    writer.create(&alice(), &widget("a", 1)).unwrap();
    server.kill();
    assert!(matches!(
        EtcdStore::connect(etcd_options.clone(), options(&clock)),
        Err(StoreError::Unavailable { .. })
    ));
    let store = EtcdStore::open(etcd_options, options(&clock)).unwrap();
    assert!(!store.connected());
    assert!(matches!(
        store.get("Widget", "a"),
        Err(StoreError::Unavailable { .. })
    ));
    server.restart();
    let a = eventually(|| store.get("Widget", "a"));
    assert_eq!(a.metadata.resource_version, 1);
    let mut watch = eventually(|| {
        store.watch(
            "Widget",
            &WatchOptions {
                resource_version: Some(1),
                ..WatchOptions::default()
            },
        )
    });
    let b = eventually(|| writer.create(&alice(), &widget("b", 1)));
    let event = next_event(&mut watch);
    assert_eq!((event.type_, event.object), (EventType::Added, b));
    assert!(store.connected());
}

#[test]
fn tls_with_a_client_certificate_works_and_a_wrong_ca_is_refused() {
    let server = EtcdServer::start_tls();
    let clock = ManualClock::default();
    clock.set(1_000_000);
    let etcd_options = server.options(&unique_prefix());
    assert!(etcd_options.endpoints[0].starts_with("https://"));
    let store = EtcdStore::connect(etcd_options.clone(), options(&clock)).unwrap();
    let created = store.create(&alice(), &widget("a", 1)).unwrap();
    assert_eq!(store.get("Widget", "a").unwrap(), created);
    // Without the client certificate etcd refuses the connection.
    let mut anonymous = etcd_options.clone();
    if let Some(tls) = anonymous.tls.as_mut() {
        tls.cert_file = None;
        tls.key_file = None;
    }
    anonymous.dial_timeout = Duration::from_secs(1);
    anonymous.request_timeout = Duration::from_secs(2);
    assert!(EtcdStore::connect(anonymous, options(&clock)).is_err());
    // A CA file that is not there is named in the error.
    let mut missing = etcd_options;
    if let Some(tls) = missing.tls.as_mut() {
        tls.ca_file = "/nonexistent/ca.pem".into();
    }
    let error = EtcdStore::connect(missing, options(&clock))
        .err()
        .expect("no CA file");
    assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
}
