//! The watch task: one etcd watch on the store's prefix feeds the hub.
//!
//! ```text
//!  etcd watch ([bodymeta/, objects0), prev_kv, from the last revision applied + 1)
//!     │ events grouped by revision (one group = one transaction)
//!     ├─ meta/head put + objects/… put/delete ─▶ Change at the head's store revision ─▶ Hub
//!     ├─ bodies/<key>\xffm put/delete ─▶ watch_bodies() receivers
//!     └─ stream broken ─▶ backoff (100 ms … 5 s) ─▶ watch again from the last revision + 1
//!  compacted (the history it needs is gone) ─▶ read the head ─▶ Hub::reset (watchers: Lagged,
//!  then Gone; they list again)
//! ```
//!
//! Events are applied once each, in revision order: the task resumes after the last etcd
//! revision it applied, so a reconnect never loses nor repeats one.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, WatchOptions};

use super::Inner;
use super::keys::{Head, KeyClass};
use crate::error::Result;
use crate::object::Object;
use crate::redb_store::decode_object;
use crate::store::EventType;
use crate::watch::Change;

/// How many (store revision, etcd revision) pairs are kept for compaction.
const REVISIONS_KEPT: usize = 100_000;

/// Follows the store's changes, until the runtime stops. A panic inside the follower (the
/// client library unwraps some fields of etcd's answers) restarts it from the last revision
/// applied.
pub(crate) async fn follow(inner: Arc<Inner>) {
    start(&inner).await;
    loop {
        let from = inner.state().etcd_revision;
        if tokio::spawn(follow_from(inner.clone(), from))
            .await
            .is_err()
        {
            inner.set_connected(false);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

async fn follow_from(inner: Arc<Inner>, mut from: i64) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut progressed = false;
        if let Ok(Ended::Compacted) = watch_once(&inner, &mut from, &mut progressed).await {
            // A failed resync leaves `from` where it was: the next watch is compacted again,
            // and the resync retried.
            let _ = resync(&inner, &mut from).await;
        }
        inner.set_connected(false);
        if progressed {
            backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

enum Ended {
    Broken,
    Compacted,
}

async fn watch_once(
    inner: &Inner,
    from: &mut i64,
    progressed: &mut bool,
) -> Result<Ended, etcd_client::Error> {
    let mut client = inner.watch_client.clone();
    let (start, end) = inner.keys.watched();
    let options = WatchOptions::new()
        .with_range(end)
        .with_prev_key()
        .with_progress_notify()
        .with_start_revision(*from + 1);
    let (_watcher, mut stream) = client.watch(start, Some(options)).await?;
    while let Some(response) = stream.message().await? {
        inner.set_connected(true);
        *progressed = true;
        if response.compact_revision() > 0 {
            return Ok(Ended::Compacted);
        }
        if response.canceled() {
            return Ok(Ended::Broken);
        }
        let events = response.events();
        let mut start = 0;
        while start < events.len() {
            let revision = events[start].kv().map_or(0, KeyValue::mod_revision);
            let mut end = start + 1;
            while end < events.len()
                && events[end].kv().map_or(0, KeyValue::mod_revision) == revision
            {
                end += 1;
            }
            // `start..end` is within `events` by construction.
            if let Some(group) = events.get(start..end) {
                apply(inner, revision, group);
            }
            *from = (*from).max(revision);
            start = end;
        }
    }
    Ok(Ended::Broken)
}

/// Applies the events of one etcd revision (one transaction).
fn apply(inner: &Inner, revision: i64, events: &[etcd_client::Event]) {
    let mut head = None;
    let mut changes = Vec::new();
    let mut bodies = Vec::new();
    let mut broken = None;
    for event in events {
        let Some(kv) = event.kv() else { continue };
        // A delete event's kv has version 0 (etcd's tombstone); a put's is 1 or more. (Read
        // this way rather than through `event_type()`, which panics on an unknown type.)
        let deleted = kv.version() == 0;
        match inner.keys.classify(kv.key()) {
            KeyClass::Head if !deleted => match Head::decode(kv.value()) {
                Ok(decoded) => head = Some(decoded),
                Err(error) => broken = Some(error.to_string()),
            },
            KeyClass::Object(key) => {
                let key = String::from_utf8_lossy(key).into_owned();
                match object_event(&key, deleted, kv, event.prev_kv()) {
                    Ok(change) => changes.push(change),
                    Err(error) => broken = Some(error.to_string()),
                }
            }
            KeyClass::BodyMeta(key) => bodies.push(key.to_owned()),
            _ => {}
        }
    }
    {
        let mut state = inner.state();
        match (head, broken) {
            (Some(head), None) => {
                if !changes.is_empty() {
                    for (type_, before, after) in changes {
                        let mut after = after;
                        after.metadata.resource_version = head.revision;
                        state.hub.publish(Change {
                            revision: head.revision,
                            type_,
                            before: before.map(Arc::new),
                            after: Arc::new(after),
                        });
                    }
                    state.revisions.push_back((head.revision, revision));
                    while state.revisions.len() > REVISIONS_KEPT {
                        state.revisions.pop_front();
                    }
                }
            }
            (None, None) if changes.is_empty() => {}
            // An object changed without the head (a foreign writer), or a value does not decode:
            // the history cannot be trusted; watchers start over (and list, which reports a
            // corrupt value as an error).
            (Some(head), _) => state.hub.reset(head.revision),
            (None, _) => {
                let current = state.hub.revision();
                state.hub.reset(current);
            }
        }
        state.etcd_revision = state.etcd_revision.max(revision);
    }
    inner.notify_advanced();
    for key in bodies {
        inner.body_changed(&key);
    }
}

type ObjectEvent = (EventType, Option<Object>, Object);

fn object_event(
    key: &str,
    deleted: bool,
    kv: &KeyValue,
    prev: Option<&KeyValue>,
) -> Result<ObjectEvent> {
    let before = prev
        .map(|prev| decode_object(key, prev.value()))
        .transpose()?;
    if deleted {
        let before = before.ok_or_else(|| crate::error::StorageError::Corrupt {
            table: "etcd",
            key: key.to_owned(),
            reason: "a delete event without the previous value (compacted?)".into(),
        })?;
        return Ok((EventType::Deleted, Some(before.clone()), before));
    }
    let after = decode_object(key, kv.value())?;
    let type_ = if before.is_some() {
        EventType::Modified
    } else {
        EventType::Added
    };
    Ok((type_, before, after))
}

/// Reads the head until etcd answers, then starts the hub at its revision.
async fn start(inner: &Inner) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut from = 0;
        let read = tokio::time::timeout(inner.options.request_timeout, resync(inner, &mut from));
        if let Ok(Ok(())) = read.await {
            inner.set_connected(true);
            return;
        }
        inner.set_connected(false);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// After a compaction took events this node had not applied (or at the start): start over from
/// the head.
async fn resync(inner: &Inner, from: &mut i64) -> Result<(), etcd_client::Error> {
    let mut client = inner.kv.clone();
    let response = client
        .get(inner.keys.head(), Some(GetOptions::new()))
        .await?;
    let revision = response.header().map_or(*from, |h| h.revision());
    let head = response
        .kvs()
        .first()
        .map_or(Ok(Head::default()), |kv| Head::decode(kv.value()));
    let mut state = inner.state();
    let store_revision = match head {
        Ok(head) => head.revision,
        Err(_) => state.hub.revision(),
    };
    state.hub.reset(store_revision);
    state.following = true;
    state.etcd_revision = revision;
    *from = revision;
    drop(state);
    inner.notify_advanced();
    Ok(())
}
