//! Watch history and delivery, shared by the in-process drivers.
//!
//! ```text
//!  write ──commit──▶ Hub::publish ──▶ history (last N events, revision order)
//!                                 └─▶ each watcher's bounded channel (filtered by kind, labels)
//!  watch(rv) ──▶ replay history after rv ──▶ register ──▶ live events
//! ```
//!
//! Drivers call `publish` while holding the lock that orders their commits, so events leave in
//! revision order and a new watcher's replay and registration see no gap. A watcher whose
//! channel is full is dropped (writers never wait for a reader) and its [`Watch`] reports
//! [`StoreError::Lagged`] after the events it already holds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use crate::error::{Result, StoreError};
use crate::object::{Object, ObjectMeta};
use crate::selector::LabelSelector;
use crate::store::{EventType, WatchEvent, WatchOptions};

/// Watch history kept per store unless the driver is told otherwise.
pub const DEFAULT_HISTORY: usize = 10_000;
/// Events a watcher may have undelivered before it is dropped as lagging.
pub const DEFAULT_WATCH_BUFFER: usize = 1024;

/// A change as history keeps it: the object before and after.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) revision: u64,
    pub(crate) type_: EventType,
    /// The state before; `None` for ADDED.
    pub(crate) before: Option<Arc<Object>>,
    /// The state after; for DELETED the last state with the deletion's resourceVersion.
    pub(crate) after: Arc<Object>,
}

struct Watcher {
    kind: String,
    selector: LabelSelector,
    bookmarks: bool,
    sender: mpsc::Sender<WatchEvent>,
    lagged: Arc<AtomicBool>,
}

/// The history and the watchers of one store.
pub(crate) struct Hub {
    history: VecDeque<Change>,
    capacity: usize,
    /// Every change after this revision is in `history`.
    oldest: u64,
    revision: u64,
    buffer: usize,
    watchers: Vec<Watcher>,
}

impl Hub {
    /// A hub for a store at `revision`, with no history before it.
    pub(crate) fn new(revision: u64, capacity: usize, buffer: usize) -> Self {
        Self {
            history: VecDeque::new(),
            capacity: capacity.max(1),
            oldest: revision,
            revision,
            buffer: buffer.max(1),
            watchers: Vec::new(),
        }
    }

    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }

    /// Records `change` and sends it to every watcher it concerns.
    pub(crate) fn publish(&mut self, change: Change) {
        self.revision = change.revision;
        self.watchers.retain(
            |watcher| match filter(&change, &watcher.kind, &watcher.selector) {
                Some(event) => deliver(watcher, event),
                None => !watcher.sender.is_closed(),
            },
        );
        self.history.push_back(change);
        while self.history.len() > self.capacity {
            if let Some(dropped) = self.history.pop_front() {
                self.oldest = dropped.revision;
            }
        }
    }

    /// Forgets history up to `revision` (at most the current one).
    pub(crate) fn compact(&mut self, revision: u64) {
        let revision = revision.min(self.revision);
        while self
            .history
            .front()
            .is_some_and(|change| change.revision <= revision)
        {
            self.history.pop_front();
        }
        self.oldest = self.oldest.max(revision);
    }

    /// Sends a BOOKMARK at the current revision to every watcher that asked for bookmarks.
    pub(crate) fn progress_notify(&mut self) {
        let revision = self.revision;
        self.watchers.retain(|watcher| {
            if watcher.bookmarks {
                deliver(watcher, bookmark(&watcher.kind, revision))
            } else {
                !watcher.sender.is_closed()
            }
        });
    }

    /// Checks that a watch or list may start at `revision`.
    pub(crate) fn check_retained(&self, revision: u64) -> Result<()> {
        if revision < self.oldest {
            return Err(StoreError::Gone {
                requested: revision,
                oldest: self.oldest,
            });
        }
        Ok(())
    }

    /// Starts a watch of `kind`. With no resourceVersion in `options`, `current` yields the
    /// objects of `kind` at the hub's revision, sent as ADDED.
    pub(crate) fn watch(
        &mut self,
        kind: &str,
        options: &WatchOptions,
        current: impl FnOnce() -> Result<Vec<Object>>,
    ) -> Result<Watch> {
        let initial: Vec<WatchEvent> = match options.resource_version {
            Some(from) => {
                self.check_retained(from)?;
                self.history
                    .iter()
                    .filter(|change| change.revision > from)
                    .filter_map(|change| filter(change, kind, &options.label_selector))
                    .collect()
            }
            None => added(current()?, &options.label_selector).collect(),
        };
        Ok(self.register(kind, options, initial))
    }

    /// Starts a watch of `kind` without a resourceVersion from `objects`, the objects of `kind`
    /// at revision `at` (read outside the hub's lock, as the etcd driver does): they are sent as
    /// ADDED, then the history after `at`. `at` must be retained and not after the hub.
    pub(crate) fn watch_snapshot(
        &mut self,
        kind: &str,
        options: &WatchOptions,
        objects: Vec<Object>,
        at: u64,
    ) -> Result<Watch> {
        self.check_retained(at)?;
        let mut initial: Vec<WatchEvent> = added(objects, &options.label_selector).collect();
        initial.extend(
            self.history
                .iter()
                .filter(|change| change.revision > at)
                .filter_map(|change| filter(change, kind, &options.label_selector)),
        );
        let mut options = options.clone();
        options.resource_version = None;
        Ok(self.register(kind, &options, initial))
    }

    /// Forgets all history and closes every watcher as lagging: the driver lost events (its
    /// source compacted them). Watchers that watch again from their last event get Gone, list
    /// again, and continue from the store at `revision`.
    pub(crate) fn reset(&mut self, revision: u64) {
        for watcher in self.watchers.drain(..) {
            watcher.lagged.store(true, Ordering::Release);
        }
        self.history.clear();
        self.revision = self.revision.max(revision);
        self.oldest = self.revision;
    }

    fn register(&mut self, kind: &str, options: &WatchOptions, initial: Vec<WatchEvent>) -> Watch {
        let (sender, receiver) = mpsc::channel(self.buffer + initial.len() + 1);
        for event in initial {
            // Cannot fail: the channel was sized for the initial events, and we hold the receiver.
            let _ = sender.try_send(event);
        }
        if options.bookmarks {
            let _ = sender.try_send(bookmark(kind, self.revision));
        }
        let lagged = Arc::new(AtomicBool::new(false));
        self.watchers.push(Watcher {
            kind: kind.to_owned(),
            selector: options.label_selector.clone(),
            bookmarks: options.bookmarks,
            sender,
            lagged: lagged.clone(),
        });
        Watch {
            kind: kind.to_owned(),
            receiver,
            lagged,
            last_seen: options.resource_version.unwrap_or(self.revision),
            done: false,
        }
    }

    /// The state at `revision` of the objects of `kind` named after `after` that changed since:
    /// name → the object then (`None`: it did not exist). Overlaid on the current objects, it
    /// gives a list page as it was at `revision`.
    pub(crate) fn undo_since(
        &self,
        kind: &str,
        revision: u64,
        after: &str,
    ) -> Result<BTreeMap<String, Option<Arc<Object>>>> {
        self.undo_between(kind, revision, u64::MAX, after)
    }

    /// [`Hub::undo_since`] for the changes after `revision` up to `until` only: the current
    /// objects were read at `until`, which the hub may have passed since.
    pub(crate) fn undo_between(
        &self,
        kind: &str,
        revision: u64,
        until: u64,
        after: &str,
    ) -> Result<BTreeMap<String, Option<Arc<Object>>>> {
        self.check_retained(revision)?;
        let mut undo = BTreeMap::new();
        for change in self
            .history
            .iter()
            .filter(|c| c.revision > revision && c.revision <= until)
        {
            let name = &change.after.metadata.name;
            if change.after.kind == kind && name.as_str() > after {
                // The first change after `revision` holds the state at `revision` as `before`.
                undo.entry(name.clone())
                    .or_insert_with(|| change.before.clone());
            }
        }
        Ok(undo)
    }
}

fn added(objects: Vec<Object>, selector: &LabelSelector) -> impl Iterator<Item = WatchEvent> {
    objects
        .into_iter()
        .filter(|object| selector.matches(&object.metadata.labels))
        .map(|object| WatchEvent {
            type_: EventType::Added,
            object,
        })
}

fn deliver(watcher: &Watcher, event: WatchEvent) -> bool {
    match watcher.sender.try_send(event) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            watcher.lagged.store(true, Ordering::Release);
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

fn bookmark(kind: &str, revision: u64) -> WatchEvent {
    WatchEvent {
        type_: EventType::Bookmark,
        object: Object {
            kind: kind.to_owned(),
            metadata: ObjectMeta {
                resource_version: revision,
                ..ObjectMeta::default()
            },
            ..Object::default()
        },
    }
}

// The event a watcher of `kind` with `selector` sees for `change`, if any.
fn filter(change: &Change, kind: &str, selector: &LabelSelector) -> Option<WatchEvent> {
    if change.after.kind != kind {
        return None;
    }
    let after_matches = selector.matches(&change.after.metadata.labels);
    let before_matches = change
        .before
        .as_ref()
        .is_some_and(|before| selector.matches(&before.metadata.labels));
    let type_ = match change.type_ {
        EventType::Modified => match (before_matches, after_matches) {
            (true, true) => EventType::Modified,
            (false, true) => EventType::Added,
            (true, false) => EventType::Deleted,
            (false, false) => return None,
        },
        other if after_matches => other,
        _ => return None,
    };
    Some(WatchEvent {
        type_,
        object: (*change.after).clone(),
    })
}

/// A running watch: events in revision order, awaited by a task or read by a thread.
///
/// It ends (`None`) when the store closes; after a [`StoreError::Lagged`] or
/// [`StoreError::Gone`] the caller watches again (or lists again).
#[derive(Debug)]
pub struct Watch {
    kind: String,
    receiver: mpsc::Receiver<WatchEvent>,
    lagged: Arc<AtomicBool>,
    last_seen: u64,
    done: bool,
}

impl Watch {
    /// The next event, awaited; for tasks on the control thread.
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        if self.done {
            return None;
        }
        let received = self.receiver.recv().await;
        self.received(received)
    }

    /// The next event, blocking the thread; for threads outside any async runtime (it panics
    /// inside one, as tokio's `blocking_recv` does).
    pub fn next_blocking(&mut self) -> Option<Result<WatchEvent>> {
        if self.done {
            return None;
        }
        let received = self.receiver.blocking_recv();
        self.received(received)
    }

    /// The next event if one is ready; `None` if none is (yet).
    pub fn try_next(&mut self) -> Option<Result<WatchEvent>> {
        if self.done {
            return None;
        }
        match self.receiver.try_recv() {
            Ok(event) => self.received(Some(event)),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => self.received(None),
        }
    }

    /// The resourceVersion of the last event delivered (or where the watch started).
    pub fn last_seen(&self) -> u64 {
        self.last_seen
    }

    fn received(&mut self, received: Option<WatchEvent>) -> Option<Result<WatchEvent>> {
        match received {
            Some(event) => {
                self.last_seen = self.last_seen.max(event.resource_version());
                Some(Ok(event))
            }
            None => {
                self.done = true;
                self.lagged.load(Ordering::Acquire).then(|| {
                    Err(StoreError::Lagged {
                        kind: self.kind.clone(),
                        last_seen: self.last_seen,
                    })
                })
            }
        }
    }
}
