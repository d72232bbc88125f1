//! The list manager: one task on the control thread that follows the BlockList, ClientGroup
//! and Policy objects and keeps the compiled matcher and policy index in step with them.
//!
//! ```text
//! loop:  wait for a watch event, a command (refresh, file changed, settings, a fetch's
//!        result) or the next due time (a URL source's refresh or backoff, a schedule change)
//!   ─▶ apply it to the state (lists, groups, policies)
//!   ─▶ start due fetches (spawned; their results come back as commands)
//!   ─▶ compile lists whose bodies changed (parse + with_list on the blocking pool, one at a
//!      time: each starts from the matcher the previous one left)
//!   ─▶ build and publish the index if anything it reads changed
//!   ─▶ write the statuses that changed; share readiness, metrics, diagnoses
//! ```
//! A list keeps its last good compiled copy until a refresh brings a body with rules: a failed
//! fetch or an empty body only sets `Degraded`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kudurru_core::policy::matcher::MAX_LISTS;
use kudurru_core::policy::{
    BlockListSpec, ClientGroupSpec, DEFAULT_GROUP, Format, ListId, ListSource, Matcher, ParseStats,
    PolicySpec,
};
use kudurru_storage::{EventType, Object, Timestamp, WatchEvent, WatchOptions, is_enabled};

use tokio::sync::mpsc;

use super::check::CheckInputs;
use super::engine::SharedEngine;
use super::fetch::{FetchLimits, Fetched, Validators};
use super::metrics::ListGauges;
use super::source::{SharedFetcher, SourceError, SourceState, body_prefix, describe};
use super::status::{self, References, group_status, keep_written, list_status, policy_status};
use super::{Diagnosis, Shared};
use crate::config::BlockingSettings;
use crate::objects::ObjectStore;
use crate::objects::kinds::{self, BLOCK_LIST, CLIENT_GROUP, POLICY};
use kudurru_storage::{BodyCache, BodyMeta};

/// The longest the manager sleeps without looking at the clock again.
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// How long a watch that failed waits before it is opened again.
const REWATCH: Duration = Duration::from_secs(1);
/// How long after a new index is published the old one's counts are folded (and it is freed).
const RETIRE_DELAY: Duration = Duration::from_secs(1);

/// What the manager is told besides watch events.
#[derive(Debug)]
pub enum Command {
    /// Fetch and read `list`'s sources now, skipping the interval and any cooldown.
    Refresh(String),
    /// A followed file changed.
    FileChanged(PathBuf),
    /// `blocking.*` changed.
    Settings(BlockingSettings),
    /// A stored body changed (in a fleet, another node stored it): a follower reads the
    /// list's bodies again.
    BodyChanged(String),
    /// A fetch or read finished.
    Fetched {
        /// The list.
        list: String,
        /// The source's body key.
        key: String,
        /// What came back.
        outcome: Outcome,
    },
}

/// A fetch's or read's result.
#[derive(Debug)]
pub enum Outcome {
    /// A URL source.
    Url(Result<Fetched, SourceError>),
    /// A file source.
    File(Result<Bytes, SourceError>),
}

/// Follows a file for the manager: called once per distinct path, with the hash of the body
/// just read; the watcher sends [`Command::FileChanged`] when it changes.
pub type Follow = Box<dyn FnMut(&Path, Option<[u8; 32]>) + Send>;

/// What the manager is built from.
pub struct ManagerParts {
    /// The object store.
    pub store: Arc<dyn ObjectStore>,
    /// The body cache.
    pub bodies: Arc<dyn BodyCache>,
    /// The core seam.
    pub engine: SharedEngine,
    /// URL fetches and file reads.
    pub fetcher: SharedFetcher,
    /// Shared with the API and ops.
    pub shared: Arc<Shared>,
    /// `blocking.*` at start.
    pub settings: BlockingSettings,
    /// Cores counting blocks.
    pub cores: usize,
    /// The file watcher's hook (`None`: files are read when the list changes or on refresh).
    pub follow: Option<Follow>,
    /// In a fleet: true while this node leads. Only the leader fetches and reads sources,
    /// stores their bodies and writes statuses; the others compile the bodies the leader
    /// stored, read again when the store says one changed (`Command::BodyChanged`). `None`: a
    /// single node, always leading.
    pub leading: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The last good compile of a list.
#[derive(Debug, Clone)]
pub(super) struct Compiled {
    pub(super) stats: ParseStats,
    pub(super) entries: usize,
    pub(super) format: Format,
}

/// One BlockList.
pub(super) struct ListState {
    pub(super) object: Object,
    pub(super) enabled: bool,
    /// The typed spec (`Err`: a stored spec the kind no longer accepts).
    pub(super) spec: Result<BlockListSpec, String>,
    pub(super) sources: Vec<SourceState>,
    pub(super) slot: Option<ListId>,
    pub(super) compiled: Option<Compiled>,
    /// A body changed since the last compile.
    pub(super) needs_compile: bool,
    /// Why the last compile kept the previous copy (an empty body), or could not run.
    pub(super) compile_problem: Option<String>,
    pub(super) refresh_errors: u64,
    pub(super) last_refresh: Option<Timestamp>,
}

impl ListState {
    fn limits(&self, settings: &BlockingSettings) -> FetchLimits {
        FetchLimits {
            timeout: settings.fetch_timeout,
            max_bytes: self
                .spec
                .as_ref()
                .ok()
                .and_then(|s| s.max_bytes)
                .unwrap_or(settings.max_list_bytes),
        }
    }

    /// Every source has a body, or has been tried and is not being tried again.
    fn settled(&self) -> bool {
        self.sources
            .iter()
            .all(|s| s.has_body() || (s.tried && !s.in_flight))
    }

    /// Why the list is degraded, if it is.
    pub(super) fn degraded(&self) -> Option<String> {
        let mut reasons: Vec<String> = self
            .sources
            .iter()
            .filter_map(|s| {
                let error = s.error.as_ref()?;
                Some(match &s.last_success {
                    Some(at) if s.has_body() => format!(
                        "{}: {} (keeping the body of {at})",
                        describe(&s.source),
                        error.message
                    ),
                    _ => format!("{}: {}", describe(&s.source), error.message),
                })
            })
            .collect();
        if let Some(problem) = &self.compile_problem {
            reasons.push(problem.clone());
        }
        if let Err(e) = &self.spec {
            reasons.push(format!("the stored spec is not valid: {e}"));
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }
}

/// One ClientGroup or Policy.
pub(super) struct Item<S> {
    pub(super) object: Object,
    pub(super) spec: Result<S, String>,
}

impl<S> Item<S> {
    pub(super) fn enabled(&self) -> bool {
        is_enabled(&self.object)
    }
}

/// The manager's state and its task.
pub struct Manager {
    store: Arc<dyn ObjectStore>,
    bodies: Arc<dyn BodyCache>,
    engine: SharedEngine,
    fetcher: SharedFetcher,
    shared: Arc<Shared>,
    settings: BlockingSettings,
    cores: usize,
    follow: Option<std::sync::Mutex<Follow>>,
    followed: std::collections::HashSet<PathBuf>,
    commands: mpsc::UnboundedSender<Command>,
    inbox: mpsc::UnboundedReceiver<Command>,
    lists: BTreeMap<String, ListState>,
    groups: BTreeMap<String, Item<ClientGroupSpec>>,
    policies: BTreeMap<String, Item<PolicySpec>>,
    matcher: Arc<Matcher>,
    /// Something the index reads changed.
    index_dirty: bool,
    /// Policies outside their schedule now, and when that next changes.
    inactive: Vec<String>,
    next_schedule_change: Option<jiff::Timestamp>,
    /// Each kind's watch has delivered the objects that existed when it started.
    synced: [bool; 3],
    /// See [`ManagerParts::leading`].
    leading: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The three kinds, in the order of `Manager::synced`.
const KINDS: [&str; 3] = [BLOCK_LIST, CLIENT_GROUP, POLICY];

impl Manager {
    /// A manager over `parts`; its mailbox sender is [`Manager::commands`].
    pub fn new(parts: ManagerParts) -> Self {
        let (commands, inbox) = mpsc::unbounded_channel();
        let matcher = Arc::new(parts.engine.empty());
        Self {
            store: parts.store,
            bodies: parts.bodies,
            engine: parts.engine,
            fetcher: parts.fetcher,
            shared: parts.shared,
            settings: parts.settings,
            cores: parts.cores,
            follow: parts.follow.map(std::sync::Mutex::new),
            followed: std::collections::HashSet::new(),
            commands,
            inbox,
            lists: BTreeMap::new(),
            groups: BTreeMap::new(),
            policies: BTreeMap::new(),
            matcher,
            index_dirty: true,
            inactive: Vec::new(),
            next_schedule_change: None,
            synced: [false; 3],
            leading: parts.leading,
        }
    }

    /// Whether this node does the fleet's list work now (always, on a single node).
    fn leads(&self) -> bool {
        self.leading
            .as_ref()
            .is_none_or(|leading| *leading.borrow())
    }

    /// Sets the file watcher's hook (it needs [`Manager::commands`], so it comes after `new`).
    pub fn set_follow(&mut self, follow: Follow) {
        self.follow = Some(std::sync::Mutex::new(follow));
    }

    /// The mailbox: refreshes, file changes and settings.
    pub fn commands(&self) -> mpsc::UnboundedSender<Command> {
        self.commands.clone()
    }

    /// Runs until the runtime ends: watches the three kinds and acts on what arrives.
    pub async fn run(mut self) {
        let mut lists = self.open_watch(KINDS[0]).await;
        let mut groups = self.open_watch(KINDS[1]).await;
        let mut policies = self.open_watch(KINDS[2]).await;
        loop {
            let sleep = tokio::time::sleep(self.next_wake());
            let (which, event) = tokio::select! {
                event = next(&mut lists) => (0, event),
                event = next(&mut groups) => (1, event),
                event = next(&mut policies) => (2, event),
                command = self.inbox.recv() => match command {
                    Some(command) => {
                        self.on_command(command).await;
                        (3, None)
                    }
                    None => return,
                },
                () = sleep => (3, None),
                () = leadership_changed(&mut self.leading) => {
                    if self.leads() {
                        tracing::info!("leading the fleet: list fetching starts here");
                    } else {
                        tracing::info!("not leading the fleet: lists come from the stored bodies");
                    }
                    (3, None)
                }
            };
            match (which, event) {
                (3, _) => {}
                (which, Some(Ok(event))) => self.apply(which, event).await,
                (which, failed) => {
                    // Lagged, gone or closed: watch again from a fresh list (ADDED for every
                    // object; unchanged objects cost nothing).
                    if let Some(Err(e)) = failed {
                        tracing::warn!(kind = KINDS[which], error = %e, "the watch ended; watching again");
                    }
                    tokio::time::sleep(REWATCH).await;
                    let watch = self.open_watch(KINDS[which]).await;
                    match which {
                        0 => lists = watch,
                        1 => groups = watch,
                        _ => policies = watch,
                    }
                }
            }
            // Take whatever else is already waiting before the slow steps.
            while let Ok(command) = self.inbox.try_recv() {
                self.on_command(command).await;
            }
            self.step().await;
        }
    }

    async fn open_watch(&self, kind: &'static str) -> Option<kudurru_storage::Watch> {
        let store = self.store.clone();
        let opened = tokio::task::spawn_blocking(move || {
            store.watch(
                kind,
                &WatchOptions {
                    bookmarks: true,
                    ..WatchOptions::default()
                },
            )
        })
        .await;
        match opened {
            Ok(Ok(watch)) => Some(watch),
            Ok(Err(e)) => {
                tracing::error!(kind, error = %e, "cannot watch the objects; retrying");
                None
            }
            Err(e) => {
                tracing::error!(kind, error = %e, "the watch could not be opened; retrying");
                None
            }
        }
    }

    /// Applies one watch event of kind `KINDS[which]`.
    pub(crate) async fn apply(&mut self, which: usize, event: WatchEvent) {
        if event.type_ == EventType::Bookmark {
            self.synced[which] = true;
            return;
        }
        let name = event.object.metadata.name.clone();
        let deleted = event.type_ == EventType::Deleted;
        match KINDS[which] {
            BLOCK_LIST if deleted => self.remove_list(&name).await,
            BLOCK_LIST => self.upsert_list(event.object).await,
            CLIENT_GROUP => {
                if deleted {
                    self.groups.remove(&name);
                } else {
                    let acted_on = self
                        .groups
                        .get(&name)
                        .is_none_or(|old| changed(&old.object, &event.object));
                    let spec = kinds::client_group(&event.object.spec).map_err(field_message);
                    let object = event.object;
                    self.groups.insert(name, Item { object, spec });
                    if !acted_on {
                        return;
                    }
                }
                self.index_dirty = true;
            }
            _ => {
                if deleted {
                    self.policies.remove(&name);
                } else {
                    let acted_on = self
                        .policies
                        .get(&name)
                        .is_none_or(|old| changed(&old.object, &event.object));
                    let spec = kinds::policy(&event.object.spec).map_err(field_message);
                    let object = event.object;
                    self.policies.insert(name, Item { object, spec });
                    if !acted_on {
                        return;
                    }
                }
                self.index_dirty = true;
            }
        }
    }

    async fn upsert_list(&mut self, object: Object) {
        let name = object.metadata.name.clone();
        if let Some(state) = self.lists.get_mut(&name)
            && !changed(&state.object, &object)
        {
            // A status write (ours, or in a fleet the leader's) or a label change: nothing to
            // fetch or compile. A follower hears of new bodies from the store
            // (`Command::BodyChanged`), not from statuses.
            state.object = object;
            return;
        }
        let enabled = is_enabled(&object);
        if !enabled {
            self.unload(&name).await;
            let state = self.lists.entry(name).or_insert_with(|| ListState {
                object: object.clone(),
                enabled: false,
                spec: Err(String::new()),
                sources: Vec::new(),
                slot: None,
                compiled: None,
                needs_compile: false,
                compile_problem: None,
                refresh_errors: 0,
                last_refresh: None,
            });
            state.object = object;
            state.enabled = false;
            state.spec = Err("disabled".into());
            return;
        }
        let spec = kinds::block_list(&object.spec).map_err(field_message);
        let interval = spec
            .as_ref()
            .ok()
            .and_then(|s| s.refresh_interval)
            .unwrap_or(self.settings.refresh_interval);
        let mut previous = self
            .lists
            .remove(&name)
            .map(|state| {
                (
                    state.sources,
                    state.slot,
                    state.compiled,
                    state.refresh_errors,
                    state.last_refresh,
                    state.enabled,
                )
            })
            .unwrap_or_default();
        let was_enabled = previous.5;
        let mut sources = Vec::new();
        for source in spec.as_ref().map(|s| s.sources.clone()).unwrap_or_default() {
            let kept = previous
                .0
                .iter()
                .position(|s| s.source == source)
                .map(|at| previous.0.swap_remove(at));
            let mut state = match kept {
                Some(mut kept) => {
                    kept.backoff = super::fetch::Backoff::new(interval);
                    kept
                }
                None => {
                    let mut fresh = SourceState::new(&name, source, interval);
                    self.load_cached(&mut fresh).await;
                    fresh
                }
            };
            if !was_enabled && state.file().is_some() {
                state.tried = false;
            }
            sources.push(state);
        }
        for gone in previous.0 {
            let bodies = self.bodies.clone();
            let key = gone.key.clone();
            let _ = tokio::task::spawn_blocking(move || bodies.delete_bodies(&key)).await;
        }
        let slot = previous.1.or_else(|| self.allocate_slot());
        let compile_problem = slot
            .is_none()
            .then(|| format!("more than {MAX_LISTS} enabled lists; this one is not loaded"));
        self.lists.insert(
            name,
            ListState {
                object,
                enabled: true,
                spec,
                sources,
                slot,
                compiled: previous.2,
                needs_compile: true,
                compile_problem,
                refresh_errors: previous.3,
                last_refresh: previous.4,
            },
        );
        self.index_dirty = true;
    }

    /// A follower's sources from the bodies the leader stored: each body that differs from
    /// the one held is taken (and the list compiled again); every source counts as tried, so
    /// a list whose leader has not fetched one source yet compiles from the others.
    pub(crate) async fn reload_stored(&mut self, name: &str) {
        let fleet = self.leading.is_some();
        let Some(state) = self.lists.get_mut(name).filter(|s| s.enabled) else {
            return;
        };
        for source in &mut state.sources {
            if matches!(source.source, ListSource::Inline(_)) {
                continue;
            }
            source.tried = true;
            let bodies = self.bodies.clone();
            let key = source.key.clone();
            match tokio::task::spawn_blocking(move || bodies.get_body(&key)).await {
                Ok(Ok(Some((body, meta)))) if source.sha256 != Some(meta.sha256) => {
                    source.set_body(Bytes::from(body));
                    source.stored = true;
                    take_meta(source, meta, fleet);
                    state.needs_compile = true;
                }
                Ok(Ok(Some((_, meta)))) => take_meta(source, meta, fleet),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(key = %source.key, error = %e, "a stored list body could not be read");
                }
                Err(e) => tracing::warn!(error = %e, "the body cache read did not run"),
            }
        }
    }

    /// Fills a new URL or file source from the body cache (a restart without network keeps
    /// its lists).
    async fn load_cached(&self, source: &mut SourceState) {
        if matches!(source.source, ListSource::Inline(_)) {
            return;
        }
        let bodies = self.bodies.clone();
        let key = source.key.clone();
        match tokio::task::spawn_blocking(move || bodies.get_body(&key)).await {
            Ok(Ok(Some((body, meta)))) => {
                source.set_body(Bytes::from(body));
                source.stored = true;
                take_meta(source, meta, self.leading.is_some());
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                tracing::warn!(key = %source.key, error = %e, "a cached list body could not be read; fetching it");
            }
            Err(e) => tracing::warn!(error = %e, "the body cache read did not run"),
        }
    }

    fn allocate_slot(&self) -> Option<ListId> {
        let used: std::collections::HashSet<ListId> =
            self.lists.values().filter_map(|l| l.slot).collect();
        (0..MAX_LISTS)
            .filter_map(|i| u16::try_from(i).ok())
            .map(ListId)
            .find(|id| !used.contains(id))
    }

    /// Takes `name` out of the matcher and forgets its bodies (disabled or deleted).
    async fn unload(&mut self, name: &str) {
        let Some(state) = self.lists.get_mut(name) else {
            return;
        };
        let slot = state.slot.take();
        state.compiled = None;
        state.sources.clear();
        state.needs_compile = false;
        state.compile_problem = None;
        if let Some(slot) = slot {
            let (engine, matcher) = (self.engine.clone(), self.matcher.clone());
            match tokio::task::spawn_blocking(move || engine.without_list(&matcher, slot)).await {
                Ok(matcher) => self.matcher = Arc::new(matcher),
                Err(e) => {
                    tracing::error!(list = name, error = %e, "the list could not be unloaded")
                }
            }
        }
        let bodies = self.bodies.clone();
        let prefix = body_prefix(name);
        let _ = tokio::task::spawn_blocking(move || bodies.delete_bodies(&prefix)).await;
        self.index_dirty = true;
    }

    async fn remove_list(&mut self, name: &str) {
        self.unload(name).await;
        self.lists.remove(name);
    }

    /// Handles one command.
    pub(crate) async fn on_command(&mut self, command: Command) {
        match command {
            Command::Refresh(name) => {
                if !self.leads() {
                    tracing::info!(list = %name, "refresh ignored: another node leads the fleet");
                    return;
                }
                let Some(state) = self.lists.get_mut(&name).filter(|s| s.enabled) else {
                    return;
                };
                tracing::info!(list = %name, "refresh requested");
                for source in &mut state.sources {
                    source.backoff.force();
                    if source.file().is_some() {
                        source.tried = false;
                    }
                }
            }
            Command::FileChanged(path) => {
                for state in self.lists.values_mut().filter(|s| s.enabled) {
                    for source in &mut state.sources {
                        if source.file() == Some(&path) {
                            source.tried = false;
                        }
                    }
                }
            }
            Command::Settings(settings) => {
                if settings.max_list_entries != self.settings.max_list_entries {
                    for state in self.lists.values_mut() {
                        state.needs_compile = state.enabled;
                    }
                }
                if settings.refresh_interval != self.settings.refresh_interval {
                    for state in self.lists.values_mut() {
                        let interval = state
                            .spec
                            .as_ref()
                            .ok()
                            .and_then(|s| s.refresh_interval)
                            .unwrap_or(settings.refresh_interval);
                        for source in &mut state.sources {
                            source.backoff = super::fetch::Backoff::new(interval);
                        }
                    }
                }
                if settings.block_ttl != self.settings.block_ttl
                    || settings.client_id_domains != self.settings.client_id_domains
                {
                    self.index_dirty = true;
                }
                self.shared.set_allow_degraded(settings.allow_degraded);
                self.settings = settings;
            }
            Command::Fetched { list, key, outcome } => self.on_fetched(&list, &key, outcome).await,
            Command::BodyChanged(key) => {
                if self.leads() {
                    return;
                }
                let list = key
                    .strip_prefix("blocklist/")
                    .and_then(|rest| rest.split_once('/'))
                    .map(|(list, _)| list.to_owned());
                if let Some(list) = list {
                    self.reload_stored(&list).await;
                }
            }
        }
    }

    async fn on_fetched(&mut self, list: &str, key: &str, outcome: Outcome) {
        let leads = self.leads();
        let Some(state) = self.lists.get_mut(list).filter(|s| s.enabled) else {
            return;
        };
        let Some(source) = state.sources.iter_mut().find(|s| s.key == key) else {
            return;
        };
        let now = Timestamp::now();
        source.in_flight = false;
        source.tried = true;
        source.last_attempt = Some(now);
        // Followed from its first read, found or not: creating the file later is seen too.
        if let Some(path) = source.file().cloned()
            && self.followed.insert(path.clone())
            && let Some(follow) = &self.follow
        {
            let mut follow = follow
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (*follow)(&path, source.sha256);
        }
        let body = match outcome {
            Outcome::Url(Ok(Fetched::Body { body, validators })) => {
                source.validators = validators;
                Some(body)
            }
            Outcome::Url(Ok(Fetched::NotModified)) => None,
            Outcome::File(Ok(body)) => Some(body),
            Outcome::Url(Err(error)) | Outcome::File(Err(error)) => {
                tracing::warn!(list, source = %describe(&source.source), error = %error.message, "list source not refreshed; the last good copy stays");
                let retry = source.backoff.on_failure(error.retryable, Instant::now());
                tracing::debug!(list, retry_in = ?retry.saturating_duration_since(Instant::now()), "next attempt");
                source.error = Some(error);
                state.refresh_errors += 1;
                return;
            }
        };
        source.error = None;
        source.backoff.on_success();
        source.last_success = Some(now);
        source.last_success_at = Some(Instant::now());
        state.last_refresh = Some(now);
        let Some(body) = body else {
            return;
        };
        if !leads {
            // Leadership ended during the fetch: the new leader stores its own; this body is
            // not written (the store's fence would refuse it anyway).
            return;
        }
        if !source.set_body(body.clone()) {
            return;
        }
        state.needs_compile = true;
        let meta = BodyMeta {
            etag: source.validators.etag.clone(),
            last_modified: source.validators.last_modified.clone(),
            fetched: now,
            sha256: source.sha256.unwrap_or_default(),
            bytes: body.len() as u64,
        };
        let (bodies, key) = (self.bodies.clone(), key.to_owned());
        let put = move || {
            let put = bodies.put_body(&key, &body, &meta);
            // The write's copies of a large body would otherwise stay resident in this arena.
            drop(body);
            kudurru_transports::sys::release_free_memory();
            put
        };
        match tokio::task::spawn_blocking(put).await {
            Ok(Ok(())) => source.stored = true,
            Ok(Err(e)) => {
                tracing::warn!(list, error = %e, "the list body could not be kept for restarts");
            }
            Err(e) => tracing::warn!(list, error = %e, "the body cache write did not run"),
        }
    }

    /// When the loop must look again: the next due URL fetch or schedule change.
    fn next_wake(&self) -> Duration {
        let now = Instant::now();
        let mut wake = now + MAX_SLEEP;
        for state in self.lists.values().filter(|s| s.enabled) {
            for source in &state.sources {
                if let Some(due) = source.due(now) {
                    wake = wake.min(due);
                }
            }
        }
        let mut sleep = wake.saturating_duration_since(now);
        if let Some(change) = self.next_schedule_change {
            let until = change.duration_since(jiff::Timestamp::now());
            let until = Duration::try_from(until).unwrap_or(Duration::ZERO);
            sleep = sleep.min(until + Duration::from_millis(10));
        }
        sleep
    }

    /// Starts due fetches, compiles, builds, publishes and shares.
    pub(crate) async fn step(&mut self) {
        self.start_fetches();
        let names: Vec<String> = self
            .lists
            .iter()
            .filter(|(_, s)| s.enabled && s.needs_compile && s.settled())
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            self.compile(&name).await;
        }
        if self
            .next_schedule_change
            .is_some_and(|at| at <= jiff::Timestamp::now())
        {
            self.index_dirty = true;
        }
        if self.index_dirty {
            self.build().await;
        }
        self.write_statuses().await;
        self.share();
    }

    fn start_fetches(&mut self) {
        if !self.leads() {
            return;
        }
        let now = Instant::now();
        let settings = &self.settings;
        for (name, state) in self.lists.iter_mut().filter(|(_, s)| s.enabled) {
            let limits = state.limits(settings);
            for source in &mut state.sources {
                let job = match &source.source {
                    ListSource::Url(url) if source.due(now).is_some_and(|due| due <= now) => {
                        let previous = if source.has_body() {
                            source.validators.clone()
                        } else {
                            Validators::default()
                        };
                        Some(Job::Url(url.clone(), previous))
                    }
                    ListSource::File(path) if !source.tried && !source.in_flight => {
                        Some(Job::File(path.clone(), settings.file_source_dir.clone()))
                    }
                    _ => None,
                };
                let Some(job) = job else { continue };
                source.in_flight = true;
                let (fetcher, commands) = (self.fetcher.clone(), self.commands.clone());
                let (list, key) = (name.clone(), source.key.clone());
                tokio::spawn(async move {
                    let outcome = match &job {
                        Job::Url(url, previous) => {
                            Outcome::Url(fetcher.fetch_url(url, previous, limits).await)
                        }
                        Job::File(path, dir) => {
                            Outcome::File(fetcher.read_file(path, dir, limits).await)
                        }
                    };
                    let _ = commands.send(Command::Fetched { list, key, outcome });
                });
            }
        }
    }

    /// Parses `name`'s bodies and replaces its entries, unless the new body has no rules and
    /// an earlier one had: then the last good copy stays and the list is degraded.
    async fn compile(&mut self, name: &str) {
        let Some(state) = self.lists.get_mut(name) else {
            return;
        };
        state.needs_compile = false;
        let (Ok(spec), Some(slot)) = (&state.spec, state.slot) else {
            return;
        };
        if state.sources.iter().all(|s| !s.has_body()) {
            return;
        }
        // In memory, or read back from the body cache on the blocking pool.
        let parts: Vec<Result<Bytes, String>> = state
            .sources
            .iter()
            .filter(|s| s.has_body())
            .map(|s| s.body.clone().ok_or_else(|| s.key.clone()))
            .collect();
        let bodies = self.bodies.clone();
        let max_rules = usize::try_from(spec.max_entries.unwrap_or(self.settings.max_list_entries))
            .unwrap_or(usize::MAX);
        let (format, mode) = (spec.format, spec.mode);
        let had_rules = state.compiled.as_ref().is_some_and(|c| c.entries > 0);
        let (engine, matcher) = (self.engine.clone(), self.matcher.clone());
        let compiled = tokio::task::spawn_blocking(move || {
            let mut body = Vec::new();
            for part in parts {
                let part = match part {
                    Ok(part) => part,
                    Err(key) => match bodies.get_body(&key) {
                        Ok(Some((stored, _))) => Bytes::from(stored),
                        Ok(None) => return Err(format!("the kept body {key} is gone")),
                        Err(e) => return Err(format!("the kept body {key} cannot be read: {e}")),
                    },
                };
                body.extend_from_slice(&part);
                if !part.ends_with(b"\n") {
                    body.push(b'\n');
                }
            }
            let parsed = engine.parse(&body, format, max_rules);
            drop(body);
            if parsed.rules.is_empty() && had_rules {
                return Ok((parsed.stats, None));
            }
            let matcher = engine.with_list(&matcher, slot, mode, &parsed);
            let entries = engine.entries(&matcher, slot);
            let stats = parsed.stats.clone();
            drop(parsed);
            // A million freed rules would otherwise stay resident in this thread's arena.
            kudurru_transports::sys::release_free_memory();
            Ok((stats, Some((matcher, entries))))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|result| result);
        let Some(state) = self.lists.get_mut(name) else {
            return;
        };
        match compiled {
            Ok((stats, Some((matcher, entries)))) => {
                self.matcher = Arc::new(matcher);
                for source in &mut state.sources {
                    source.release_body();
                }
                state.compile_problem = (entries == 0).then(|| "the list has no rules".to_owned());
                let format = stats.format.unwrap_or(format);
                tracing::info!(
                    list = name,
                    entries,
                    format = format.label(),
                    invalid = stats.invalid,
                    skipped = stats.skipped,
                    truncated = stats.truncated,
                    "block list compiled"
                );
                state.compiled = Some(Compiled {
                    stats,
                    entries,
                    format,
                });
                self.index_dirty = true;
            }
            Ok((stats, None)) => {
                tracing::warn!(
                    list = name,
                    lines = stats.lines,
                    "the refreshed list has no rules; the last good copy stays"
                );
                state.compile_problem = Some(format!(
                    "the new body has no rules ({} lines, {} invalid); keeping the last good copy",
                    stats.lines, stats.invalid
                ));
            }
            Err(e) => {
                tracing::error!(list = name, error = %e, "the list compile failed; the last good copy stays");
                state.compile_problem = Some(format!("the compile failed: {e}"));
            }
        }
    }

    /// The inputs of the index: loaded enabled lists, enabled groups and policies.
    fn check_inputs(&self) -> CheckInputs {
        let lists = self
            .lists
            .iter()
            .filter(|(_, s)| s.enabled)
            .filter_map(|(name, s)| Some((name.clone(), (s.slot?, s.compiled.as_ref()?.format))))
            .collect::<HashMap<_, _>>();
        let groups = self
            .groups
            .iter()
            .filter(|(name, g)| g.enabled() && name.as_str() != DEFAULT_GROUP)
            .filter_map(|(name, g)| Some((name.clone(), g.spec.as_ref().ok()?.clone())))
            .collect();
        let policies = self
            .policies
            .iter()
            .filter(|(_, p)| p.enabled())
            .filter_map(|(name, p)| Some((name.clone(), p.spec.as_ref().ok()?.clone())))
            .collect();
        CheckInputs {
            matcher: self.matcher.clone(),
            lists,
            groups,
            policies,
            block_ttl: self.settings.block_ttl,
            client_id_domains: self.settings.client_id_domains.clone(),
            cores: self.cores,
        }
    }

    async fn build(&mut self) {
        self.index_dirty = false;
        let inputs = Arc::new(self.check_inputs());
        let (engine, built) = (self.engine.clone(), inputs.clone());
        let result = tokio::task::spawn_blocking(move || {
            built.with_build_inputs(jiff::Timestamp::now(), |inputs| engine.build(inputs))
        })
        .await;
        let (index, report) = match result {
            Ok(built) => built,
            Err(e) => {
                tracing::error!(error = %e, "the policy index could not be built; the last one stays");
                return;
            }
        };
        self.inactive = report.inactive;
        self.next_schedule_change = report.next_change;
        let old = self.shared.publisher.index();
        self.shared.publisher.index_changed(Arc::new(index));
        self.shared.metrics.retire(old);
        // The cores let go of the old index within microseconds; folding its counts a moment
        // later frees it, and with it the old matcher (megabytes), instead of at the next
        // refresh or scrape.
        let shared = self.shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETIRE_DELAY).await;
            shared.metrics.fold();
        });
        self.shared.set_check_inputs(inputs);
        tracing::debug!(
            lists = self.lists.len(),
            groups = self.groups.len(),
            policies = self.policies.len(),
            "policy index published"
        );
    }

    /// Writes every status that differs from what the object carries (the leader only: in a
    /// fleet the statuses are the leader's to say).
    async fn write_statuses(&mut self) {
        if !self.leads() {
            return;
        }
        let now = Timestamp::now();
        let mut writes: Vec<(usize, String, kudurru_storage::ObjectStatus)> = Vec::new();
        for (name, state) in &self.lists {
            if let Some(status) = list_status(state, now) {
                writes.push((0, name.clone(), status));
            }
        }
        for (name, group) in &self.groups {
            if let Some(status) = group_status(group, now) {
                writes.push((1, name.clone(), status));
            }
        }
        for (name, policy) in &self.policies {
            let references = self.references(policy);
            let active = !self.inactive.contains(name);
            if let Some(status) = policy_status(policy, &references, active, now) {
                writes.push((2, name.clone(), status));
            }
        }
        for (which, name, status) in writes {
            let object = match which {
                0 => self.lists.get(&name).map(|s| &s.object),
                1 => self.groups.get(&name).map(|g| &g.object),
                _ => self.policies.get(&name).map(|p| &p.object),
            };
            let Some(object) = object.cloned() else {
                continue;
            };
            match status::write(self.store.clone(), &object, status).await {
                Ok(written) => match which {
                    0 => {
                        if let Some(s) = self.lists.get_mut(&name) {
                            keep_written(&mut s.object, written);
                        }
                    }
                    1 => {
                        if let Some(g) = self.groups.get_mut(&name) {
                            keep_written(&mut g.object, written);
                        }
                    }
                    _ => {
                        if let Some(p) = self.policies.get_mut(&name) {
                            keep_written(&mut p.object, written);
                        }
                    }
                },
                Err(kudurru_storage::StoreError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(kind = KINDS[which], object = %name, error = %e, "status not written")
                }
            }
        }
    }

    /// A policy's references, sorted into missing, disabled and not yet loaded.
    fn references(&self, policy: &Item<PolicySpec>) -> References {
        let mut out = References::default();
        let Ok(spec) = &policy.spec else {
            return out;
        };
        for group in &spec.client_groups {
            if group == DEFAULT_GROUP {
                continue;
            }
            match self.groups.get(group) {
                None => out.missing.push((CLIENT_GROUP, group.clone())),
                Some(g) if !g.enabled() => out.disabled.push((CLIENT_GROUP, group.clone())),
                Some(_) => {}
            }
        }
        for list in spec.deny_lists.iter().chain(&spec.allow_lists) {
            match self.lists.get(list) {
                None => out.missing.push((BLOCK_LIST, list.clone())),
                Some(l) if !l.enabled => out.disabled.push((BLOCK_LIST, list.clone())),
                Some(l) if l.compiled.is_none() => out.pending.push((BLOCK_LIST, list.clone())),
                Some(_) => {}
            }
        }
        out
    }

    /// Readiness, gauges and diagnoses for the API and ops.
    fn share(&self) {
        if self.synced[0] {
            self.shared.set_unloaded(
                self.lists
                    .iter()
                    .filter(|(_, s)| s.enabled && s.compiled.is_none())
                    .map(|(name, _)| name.clone())
                    .collect(),
            );
        }
        self.shared.metrics.set_lists(
            self.lists
                .iter()
                .filter(|(_, s)| s.enabled)
                .map(|(name, s)| {
                    (
                        name.clone(),
                        ListGauges {
                            entries: s.compiled.as_ref().map_or(0, |c| c.entries as u64),
                            last_refresh: s.last_refresh.map(|t| t.unix_millis() / 1000),
                            refresh_errors: s.refresh_errors,
                            degraded: s.degraded().is_some(),
                        },
                    )
                })
                .collect(),
        );
        let mut diagnoses = Vec::new();
        for (name, state) in self.lists.iter().filter(|(_, s)| s.enabled) {
            match (&state.compiled, state.degraded()) {
                (None, Some(why)) => diagnoses.push(Diagnosis {
                    severity: "error",
                    code: "blocklist_not_loaded",
                    message: format!("BlockList {name} has never loaded: {why}"),
                }),
                (Some(_), Some(why)) => diagnoses.push(Diagnosis {
                    severity: "warning",
                    code: "blocklist_degraded",
                    message: format!(
                        "BlockList {name} is degraded, its last good copy stays in effect: {why}"
                    ),
                }),
                _ => {}
            }
        }
        for (name, policy) in &self.policies {
            if !policy.enabled() {
                continue;
            }
            let references = self.references(policy);
            for (kind, target) in &references.missing {
                diagnoses.push(Diagnosis {
                    severity: "warning",
                    code: "reference_missing",
                    message: format!(
                        "Policy {name} refers to {kind} {target}, which does not exist"
                    ),
                });
            }
            for (kind, target) in &references.disabled {
                diagnoses.push(Diagnosis {
                    severity: "info",
                    code: "reference_disabled",
                    message: format!("Policy {name} skips {kind} {target}: it is disabled"),
                });
            }
        }
        if let Some(group) = self.groups.get(DEFAULT_GROUP) {
            diagnoses.push(Diagnosis {
                severity: "warning",
                code: "reserved_name",
                message: format!(
                    "ClientGroup {} is ignored: default is the built-in group of clients no other group holds",
                    group.object.metadata.name
                ),
            });
        }
        self.shared.set_diagnoses(diagnoses);
    }
}

/// What a spawned fetch does.
enum Job {
    Url(String, Validators),
    File(PathBuf, PathBuf),
}

/// The next event of a watch. A watch that could not be opened (the store unavailable: etcd
/// down in a fleet) answers `None` after [`REWATCH`], so the loop opens it again instead of
/// waiting forever.
async fn next(
    watch: &mut Option<kudurru_storage::Watch>,
) -> Option<Result<WatchEvent, kudurru_storage::StoreError>> {
    match watch {
        Some(watch) => watch.next().await,
        None => {
            tokio::time::sleep(REWATCH).await;
            None
        }
    }
}

/// Waits for the next change of leadership; pending forever on a single node.
async fn leadership_changed(leading: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match leading {
        Some(leading) => {
            if leading.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Takes a stored body's validators and fetch time. In a fleet the schedule continues from
/// the fleet's last fetch (a node that becomes leader does not fetch again at once).
fn take_meta(source: &mut SourceState, meta: BodyMeta, fleet: bool) {
    source.validators = Validators {
        etag: meta.etag,
        last_modified: meta.last_modified,
    };
    source.last_success = Some(meta.fetched);
    if fleet {
        let ago = Timestamp::now()
            .unix_millis()
            .saturating_sub(meta.fetched.unix_millis());
        let ago = Duration::from_millis(u64::try_from(ago).unwrap_or(0));
        source.last_success_at = Instant::now().checked_sub(ago).or(Some(Instant::now()));
    }
}

/// Whether `new` changes what the manager acts on: the spec or the enabled switch.
fn changed(old: &Object, new: &Object) -> bool {
    old.spec != new.spec || is_enabled(old) != is_enabled(new)
}

fn field_message(e: kudurru_storage::FieldError) -> String {
    format!("{}: {}", e.field, e.message)
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
