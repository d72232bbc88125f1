//! The store's interface, the same for every driver (memory, redb, and later etcd).
//!
//! Calls are synchronous and may block on the disk or the network: the control thread runs
//! them on its blocking pool (`spawn_blocking`). A [`Watch`] is the exception: it is a channel
//! receiver a task awaits (`Watch::next`) without holding a blocking thread, so a watch per
//! kind costs the pool nothing.

use crate::error::Result;
use crate::object::Object;
use crate::selector::LabelSelector;
use crate::watch::Watch;

pub(crate) use crate::audit::Actor;

/// An object store: client-go's verbs, optimistic concurrency on resourceVersion, and watch.
///
/// Every write is atomic with its audit record and durable when it returns.
pub trait Store: Send + Sync {
    /// Creates `object`; [`crate::StoreError::AlreadyExists`] if its name is taken. The store
    /// sets uid, resourceVersion, generation 1 and creationTimestamp, and ignores `status`.
    fn create(&self, actor: &Actor, object: &Object) -> Result<Object>;

    /// The object `kind`/`name`.
    fn get(&self, kind: &str, name: &str) -> Result<Object>;

    /// The objects of `kind` that match `options`, all at one resourceVersion.
    fn list(&self, kind: &str, options: &ListOptions) -> Result<ObjectList>;

    /// Replaces spec, labels and annotations if `object.metadata.resourceVersion` is current,
    /// else [`crate::StoreError::Conflict`]. `generation` bumps only when `spec` changes; an
    /// update that changes nothing writes nothing and returns the object as it is.
    fn update(&self, actor: &Actor, object: &Object) -> Result<Object>;

    /// Replaces status, with the same resourceVersion precondition as [`Store::update`].
    fn update_status(&self, actor: &Actor, object: &Object) -> Result<Object>;

    /// Deletes `kind`/`name`, if `options.resource_version` (when set) is current; returns the
    /// object's last state with the deletion's resourceVersion.
    fn delete(
        &self,
        actor: &Actor,
        kind: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Object>;

    /// Watches `kind` from `options.resource_version`; [`crate::StoreError::Gone`] if that is
    /// older than the retained history.
    fn watch(&self, kind: &str, options: &WatchOptions) -> Result<Watch>;

    /// The store's current revision (the resourceVersion of its last change).
    fn revision(&self) -> Result<u64>;

    /// Forgets watch history up to `revision`: a watch or continue token from before it
    /// answers [`crate::StoreError::Gone`].
    fn compact(&self, revision: u64) -> Result<()>;

    /// Sends a BOOKMARK at the current revision to every watch that asked for bookmarks; the
    /// control thread calls it on a timer so idle filtered watches keep a fresh resourceVersion.
    fn progress_notify(&self) -> Result<()>;
}

/// How to list.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Only objects whose labels match.
    pub label_selector: LabelSelector,
    /// At most this many objects per page; 0 means all.
    pub limit: usize,
    /// The previous page's [`ObjectList::continue_token`].
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectList {
    /// The revision every item (and every later page of this list) is read at.
    pub resource_version: u64,
    /// The objects, ordered by name.
    pub items: Vec<Object>,
    /// Present when more objects may follow: pass it back in [`ListOptions::continue_token`].
    pub continue_token: Option<String>,
}

/// How to delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Delete only if the object's resourceVersion is this one.
    pub resource_version: Option<u64>,
}

/// How to watch.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// Events after this revision (typically a list's `resource_version`). `None` starts with
    /// an ADDED event for each current object, then follows changes.
    pub resource_version: Option<u64>,
    /// Only objects whose labels match; an object whose labels stop (start) matching is sent
    /// as DELETED (ADDED).
    pub label_selector: LabelSelector,
    /// Also send BOOKMARK events: one when the watch has caught up, and one per
    /// [`Store::progress_notify`].
    pub bookmarks: bool,
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Created (or started matching the watch's selector).
    Added,
    /// Changed.
    Modified,
    /// Deleted (or stopped matching the watch's selector); the object's last state.
    Deleted,
    /// No change: the store has reached the object's resourceVersion.
    Bookmark,
}

/// One watch event.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    /// What happened.
    pub type_: EventType,
    /// The object after the change; for BOOKMARK only `kind` and the resourceVersion are set.
    pub object: Object,
}

impl WatchEvent {
    /// The revision this event brings a watcher to.
    pub fn resource_version(&self) -> u64 {
        self.object.metadata.resource_version
    }
}

/// What every in-process driver is built with.
#[derive(Clone)]
pub struct StoreOptions {
    /// The kinds the store accepts.
    pub registry: std::sync::Arc<crate::kind::KindRegistry>,
    /// Where creation and audit times come from.
    pub clock: crate::time::Clock,
    /// Changes kept for watches and continue tokens; older ones answer Gone.
    pub watch_history: usize,
    /// Events a watcher may leave undelivered before it is closed as lagging.
    pub watch_buffer: usize,
}

impl StoreOptions {
    /// Options with the system clock and the default history and buffer.
    pub fn new(registry: std::sync::Arc<crate::kind::KindRegistry>) -> Self {
        Self {
            registry,
            clock: crate::time::system_clock(),
            watch_history: crate::watch::DEFAULT_HISTORY,
            watch_buffer: crate::watch::DEFAULT_WATCH_BUFFER,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("registry", &self.registry)
            .field("watch_history", &self.watch_history)
            .field("watch_buffer", &self.watch_buffer)
            .finish_non_exhaustive()
    }
}
