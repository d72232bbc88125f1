//! The zone manager: one task on the control thread that follows the Zone and RecordSet
//! objects and the zone files, and keeps the published zones in step with them.
//!
//! ```text
//! loop:  wait for a watch event, a command (transfer, expire, update, settings) or the file
//!        poll (every FILE_POLL)
//!   ─▶ mark the zones it touches dirty
//!   ─▶ rebuild each dirty zone: file (blocking pool) + RecordSets ─▶ ZoneData ─▶ content hash
//!        same hash: nothing changes;  new: next serial ─▶ Zone::compile (blocking pool)
//!          ok: served, journal += diff old→new        refused: last good zone stays,
//!                                                              Ready=False with file:line
//!   ─▶ publish Zones (served + forward) if anything served changed; announce ZoneChanged
//!   ─▶ write the statuses that changed (serial and content hash persisted there)
//! ```
//! A primary's serial never goes backwards across restarts: its status keeps the serial and
//! the content hash it was built from; a restart that finds the same content serves the same
//! serial, other content the next one. A secondary's last transfer is in the body cache
//! ([`super::stored`]) and served at start before any transfer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kudurru_core::zone::file::{Limits, parse_record_set, rdata_text, type_text};
use kudurru_core::zone::set::ServedZone;
use kudurru_core::zone::xfr::{Journal, TransferPolicy};
use kudurru_core::zone::{
    ForwardZone, Record, Zone, ZoneData, ZoneError, ZoneErrorKind, ZoneKind, Zones,
};
use kudurru_storage::{
    Actor, BodyMeta, EventType, Object, StoreError, Timestamp, WatchEvent, WatchOptions, is_enabled,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::build::{self, Overlay};
use super::files::{self, Fingerprint};
use super::{SecondaryZone, ServedView, Shared, SoaTimers, ZoneChanged, stored, zone_text};
use crate::blocking::Diagnosis;
use crate::blocking::status::{Draft, condition, keep_written, write_as};
use crate::config::ZonesSettings;
use crate::objects::ObjectStore;
use crate::objects::kinds::{
    self, PrimarySpec, RECORD_SET, RecordSetSpec, ZONE, ZoneSpec, ZoneType,
};

/// How often zone files are checked for changes (modification time and length).
pub const FILE_POLL: Duration = Duration::from_secs(1);
/// How long a watch that failed waits before it is opened again.
const REWATCH: Duration = Duration::from_secs(1);
/// Most bytes of zone text one zone reads (the file and its includes).
const MAX_ZONE_TEXT: usize = 1 << 30;
/// The two kinds, in the order of `Manager::synced`.
const KINDS: [&str; 2] = [ZONE, RECORD_SET];

/// What the manager is told besides watch events.
#[derive(Debug)]
pub enum Command {
    /// A secondary's transfer ([`super::ZoneHandle::transferred`]).
    Transferred {
        /// The zone's apex.
        apex: Box<[u8]>,
        /// What came.
        data: super::Transferred,
        /// The outcome.
        reply: oneshot::Sender<Result<(), ZoneError>>,
    },
    /// A secondary expired or recovered ([`super::ZoneHandle::set_expired`]).
    SetExpired {
        /// The zone's apex.
        apex: Box<[u8]>,
        /// Expired now.
        expired: bool,
        /// Done.
        reply: oneshot::Sender<()>,
    },
    /// A dynamic update ([`super::ZoneHandle::update`]).
    Update {
        /// The zone's apex.
        apex: Box<[u8]>,
        /// Records removed (matched by owner, type and rdata).
        removed: Vec<Record>,
        /// Records added.
        added: Vec<Record>,
        /// The new serial.
        reply: oneshot::Sender<Result<u32, ZoneError>>,
    },
    /// What the UPDATE handler needs of a zone ([`super::ZoneHandle::update_target`]).
    UpdateTarget {
        /// The zone's apex.
        apex: Box<[u8]>,
        /// The primary's `allowUpdate` and records, or that it is not one.
        reply: oneshot::Sender<super::update::UpdateTarget>,
    },
    /// `zones.*` changed.
    Settings(ZonesSettings),
    /// In a fleet, another node (the leader) stored a secondary's transfer under this body
    /// key: a follower serves it (it does not transfer itself).
    StoredChanged(String),
}

/// What the manager is built from.
pub struct ManagerParts {
    /// The object store (and its body cache, for secondaries' data).
    pub store: Arc<dyn ObjectStore>,
    /// Shared with the API, ops and the transfer code.
    pub shared: Arc<Shared>,
    /// `zones.*` at start.
    pub settings: ZonesSettings,
}

/// A zone as served: its compiled form (the one copy of its records the control thread
/// keeps: the records API, UPDATE and the journal's diffs read it) and its recent changes.
#[derive(Clone)]
struct Served {
    zone: Arc<Zone>,
    /// Owner names.
    names: usize,
    hash: String,
    serial: u32,
    journal: Arc<Journal>,
}

/// The last read of a primary's file: its fingerprints (to notice a change) and its error, if
/// it did not parse. Its records are not kept: the compiled zone holds what is served, and a
/// rebuild (a RecordSet change) reads the file again.
struct FileState {
    path: std::path::PathBuf,
    error: Option<ZoneError>,
    files: Vec<(std::path::PathBuf, Fingerprint)>,
}

/// One Zone object.
struct ZoneState {
    object: Object,
    spec: Result<ZoneSpec, String>,
    file: Option<FileState>,
    served: Option<Served>,
    /// Why the last build was refused (the last good zone, if any, stays).
    refused: Option<String>,
    /// A secondary past its expire.
    expired: bool,
    /// The serial and content hash the status held at start (a restart's floor).
    persisted: Option<(u32, String)>,
    /// A secondary's stored data was looked for.
    loaded: bool,
    /// Another Zone object (first by name) serves the same apex: this one serves nothing.
    shadowed: bool,
    dirty: bool,
}

impl ZoneState {
    fn enabled(&self) -> bool {
        is_enabled(&self.object)
    }

    fn apex(&self) -> Option<&[u8]> {
        self.spec.as_ref().ok().map(|s| &*s.apex)
    }
}

/// One RecordSet object.
struct SetState {
    object: Object,
    spec: Result<RecordSetSpec, String>,
    /// Why it is not in its zone (a parse error against the apex, a duplicate).
    problem: Option<String>,
    /// The zone serial it was last served in.
    served_in: Option<u32>,
}

/// The manager's state and its task.
pub struct Manager {
    store: Arc<dyn ObjectStore>,
    shared: Arc<Shared>,
    settings: ZonesSettings,
    commands: mpsc::UnboundedSender<Command>,
    inbox: mpsc::UnboundedReceiver<Command>,
    zones: BTreeMap<String, ZoneState>,
    sets: BTreeMap<String, SetState>,
    /// Something the published zones read changed.
    publish: bool,
    /// Zones whose data changed since the last publish (for ZoneChanged).
    changed: BTreeSet<String>,
    synced: [bool; 2],
}

impl Manager {
    /// A manager over `parts`; its mailbox sender is [`Manager::commands`].
    pub fn new(parts: ManagerParts) -> Self {
        let (commands, inbox) = mpsc::unbounded_channel();
        Self {
            store: parts.store,
            shared: parts.shared,
            settings: parts.settings,
            commands,
            inbox,
            zones: BTreeMap::new(),
            sets: BTreeMap::new(),
            publish: true,
            changed: BTreeSet::new(),
            synced: [false; 2],
        }
    }

    /// The mailbox: transfers, expiry, updates and settings.
    pub fn commands(&self) -> mpsc::UnboundedSender<Command> {
        self.commands.clone()
    }

    /// Runs until the runtime ends.
    pub async fn run(mut self) {
        let mut zones = self.open_watch(KINDS[0]).await;
        let mut sets = self.open_watch(KINDS[1]).await;
        let mut poll = tokio::time::interval(FILE_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let (which, event) = tokio::select! {
                event = next(&mut zones) => (0, event),
                event = next(&mut sets) => (1, event),
                command = self.inbox.recv() => match command {
                    Some(command) => {
                        self.on_command(command).await;
                        (2, None)
                    }
                    None => return,
                },
                _ = poll.tick() => {
                    self.poll_files().await;
                    (2, None)
                }
            };
            match (which, event) {
                (2, _) => {}
                (which, Some(Ok(event))) => self.apply(which, event),
                (which, failed) => {
                    if let Some(Err(e)) = failed {
                        tracing::warn!(kind = KINDS[which], error = %e, "the watch ended; watching again");
                    }
                    tokio::time::sleep(REWATCH).await;
                    let watch = self.open_watch(KINDS[which]).await;
                    if which == 0 {
                        zones = watch;
                    } else {
                        sets = watch;
                    }
                }
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
    pub(crate) fn apply(&mut self, which: usize, event: WatchEvent) {
        if event.type_ == EventType::Bookmark {
            self.synced[which] = true;
            return;
        }
        let name = event.object.metadata.name.clone();
        let deleted = event.type_ == EventType::Deleted;
        if which == 0 {
            self.apply_zone(name, event.object, deleted);
        } else {
            self.apply_set(name, event.object, deleted);
        }
    }

    fn apply_zone(&mut self, name: String, object: Object, deleted: bool) {
        if deleted {
            if let Some(old) = self.zones.remove(&name) {
                if let Ok(ZoneSpec {
                    apex,
                    kind: ZoneType::Secondary(_),
                }) = &old.spec
                {
                    self.forget_stored(apex.clone());
                }
                self.mark_apex_dirty(old.apex());
            }
            self.publish = true;
            return;
        }
        if let Some(state) = self.zones.get_mut(&name)
            && !changed(&state.object, &object)
        {
            // Our own status write, or a label: nothing to rebuild.
            state.object = object;
            return;
        }
        let spec = kinds::zone(&object.spec).map_err(field_message);
        let persisted = persisted(&object);
        let previous = self.zones.remove(&name);
        let old_apex = previous.as_ref().and_then(|p| p.apex().map(<[u8]>::to_vec));
        let same_apex_and_type = previous.as_ref().is_some_and(|p| match (&p.spec, &spec) {
            (Ok(a), Ok(b)) => {
                a.apex == b.apex
                    && std::mem::discriminant(&a.kind) == std::mem::discriminant(&b.kind)
            }
            _ => false,
        });
        let (served, expired, loaded, persisted) = match previous {
            Some(p) if same_apex_and_type => (p.served, p.expired, p.loaded, p.persisted),
            _ => (None, false, false, persisted),
        };
        self.zones.insert(
            name,
            ZoneState {
                object,
                spec,
                file: None,
                served,
                refused: None,
                expired,
                persisted,
                loaded,
                shadowed: false,
                dirty: true,
            },
        );
        // A zone that moved off an apex may uncover another Zone object at it.
        self.mark_apex_dirty(old_apex.as_deref());
        self.publish = true;
    }

    fn apply_set(&mut self, name: String, object: Object, deleted: bool) {
        let old_zone = self
            .sets
            .get(&name)
            .and_then(|s| s.spec.as_ref().ok().map(|s| s.zone.clone()));
        if deleted {
            self.sets.remove(&name);
        } else {
            if let Some(state) = self.sets.get_mut(&name)
                && !changed(&state.object, &object)
            {
                state.object = object;
                return;
            }
            let spec = kinds::record_set(&object.spec).map_err(field_message);
            let new_zone = spec.as_ref().ok().map(|s| s.zone.clone());
            self.sets.insert(
                name,
                SetState {
                    object,
                    spec,
                    problem: None,
                    served_in: None,
                },
            );
            if let Some(zone) = new_zone.and_then(|z| self.zones.get_mut(&z)) {
                zone.dirty = true;
            }
        }
        if let Some(zone) = old_zone.and_then(|z| self.zones.get_mut(&z)) {
            zone.dirty = true;
        }
    }

    fn mark_apex_dirty(&mut self, apex: Option<&[u8]>) {
        let Some(apex) = apex else { return };
        for zone in self.zones.values_mut() {
            if zone.apex() == Some(apex) {
                zone.dirty = true;
            }
        }
    }

    fn forget_stored(&self, apex: Box<[u8]>) {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.delete_bodies(&stored::key(&apex)) {
                tracing::warn!(zone = %zone_text(&apex), error = %e, "the stored zone could not be removed");
            }
        });
    }

    /// Marks zones whose files changed since they were read.
    pub(crate) async fn poll_files(&mut self) {
        let followed: Vec<(String, Vec<(std::path::PathBuf, Fingerprint)>)> = self
            .zones
            .iter()
            .filter_map(|(name, z)| Some((name.clone(), z.file.as_ref()?.files.clone())))
            .collect();
        if followed.is_empty() {
            return;
        }
        let stale = tokio::task::spawn_blocking(move || {
            followed
                .into_iter()
                .filter(|(_, files)| files::changed(files))
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for name in stale {
            if let Some(zone) = self.zones.get_mut(&name) {
                tracing::info!(zone = %name, "the zone file changed; importing it again");
                zone.file = None;
                zone.dirty = true;
            }
        }
        self.step().await;
    }

    /// Handles one command.
    pub(crate) async fn on_command(&mut self, command: Command) {
        match command {
            Command::Transferred { apex, data, reply } => {
                let result = self.transferred(&apex, data).await;
                self.step().await;
                let _ = reply.send(result);
            }
            Command::SetExpired {
                apex,
                expired,
                reply,
            } => {
                if let Some(zone) = self.secondary_mut(&apex)
                    && zone.expired != expired
                {
                    zone.expired = expired;
                    self.publish = true;
                }
                self.step().await;
                let _ = reply.send(());
            }
            Command::Update {
                apex,
                removed,
                added,
                reply,
            } => {
                let result = self.update(&apex, removed, added).await;
                let _ = reply.send(result);
            }
            Command::UpdateTarget { apex, reply } => {
                let _ = reply.send(self.update_target(&apex));
            }
            Command::Settings(settings) => self.settings = settings,
            Command::StoredChanged(key) => {
                let secondaries: Vec<(String, Vec<u8>)> = self
                    .zones
                    .iter()
                    .filter_map(|(name, zone)| {
                        let spec = zone.spec.as_ref().ok()?;
                        (matches!(spec.kind, ZoneType::Secondary(_))
                            && stored::key(&spec.apex) == key)
                            .then(|| (name.clone(), spec.apex.to_vec()))
                    })
                    .collect();
                for (name, apex) in secondaries {
                    if let Some(zone) = self.zones.get_mut(&name) {
                        zone.loaded = false;
                    }
                    self.load_secondary(&name, &apex).await;
                    self.changed.insert(name);
                }
            }
        }
    }

    fn secondary_mut(&mut self, apex: &[u8]) -> Option<&mut ZoneState> {
        self.zones.values_mut().find(|z| {
            z.enabled()
                && matches!(&z.spec, Ok(ZoneSpec { apex: a, kind: ZoneType::Secondary(_) }) if **a == *apex)
        })
    }

    /// Rebuilds what is dirty, publishes, writes statuses.
    pub(crate) async fn step(&mut self) {
        if !self.synced.iter().all(|s| *s) {
            return;
        }
        let dirty: Vec<String> = self
            .zones
            .iter()
            .filter(|(_, z)| z.dirty)
            .map(|(n, _)| n.clone())
            .collect();
        for name in dirty {
            self.rebuild(&name).await;
        }
        if self.publish {
            self.publish();
        }
        self.write_statuses().await;
    }

    /// The Zone object that serves `apex`: the first enabled one by name.
    fn owner_of(&self, apex: &[u8]) -> Option<&str> {
        self.zones
            .iter()
            .find(|(_, z)| z.enabled() && z.apex() == Some(apex))
            .map(|(n, _)| n.as_str())
    }

    async fn rebuild(&mut self, name: &str) {
        let Some(zone) = self.zones.get_mut(name) else {
            return;
        };
        zone.dirty = false;
        let spec = match (&zone.spec, zone.enabled()) {
            (Ok(spec), true) => spec.clone(),
            _ => {
                // Re-enabled later, a secondary reads its stored transfer again.
                zone.loaded = false;
                if zone.served.take().is_some() {
                    self.publish = true;
                }
                return;
            }
        };
        if let Some(owner) = self.owner_of(&spec.apex)
            && owner != name
        {
            let owner = owner.to_owned();
            let zone = self.zones.get_mut(name).expect("looked up above");
            zone.refused = Some(format!(
                "{} is already served by Zone {owner}",
                zone_text(&spec.apex)
            ));
            zone.shadowed = true;
            zone.loaded = false;
            zone.served = None;
            self.publish = true;
            return;
        }
        let zone = self.zones.get_mut(name).expect("looked up above");
        if zone.shadowed {
            zone.shadowed = false;
            zone.refused = None;
            self.publish = true;
        }
        match &spec.kind {
            ZoneType::Forward(_) => {}
            ZoneType::Secondary(_) => self.load_secondary(name, &spec.apex).await,
            ZoneType::Primary(primary) => self.build_primary(name, &spec.apex, primary).await,
        }
    }

    /// A secondary's last transfer from the body cache, once.
    async fn load_secondary(&mut self, name: &str, apex: &[u8]) {
        let zone = self.zones.get_mut(name).expect("a known zone");
        if zone.loaded {
            return;
        }
        zone.loaded = true;
        let store = self.store.clone();
        let key = stored::key(apex);
        let body = tokio::task::spawn_blocking(move || store.get_body(&key)).await;
        let data = match body {
            Ok(Ok(Some((body, _)))) => match stored::decode(&body) {
                Some(data) if *data.apex == *apex => data,
                _ => {
                    tracing::warn!(zone = %zone_text(apex), "the stored zone is damaged; waiting for a transfer");
                    return;
                }
            },
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(zone = %zone_text(apex), error = %e, "the stored zone could not be read; waiting for a transfer");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "the stored zone read did not run");
                return;
            }
        };
        match compile(data, ZoneKind::Secondary, None).await {
            Ok((zone_compiled, names, hash)) => {
                let serial = zone_compiled.serial();
                tracing::info!(zone = %zone_text(apex), serial, records = zone_compiled.record_count(), "serving the stored transfer");
                let zone = self.zones.get_mut(name).expect("a known zone");
                zone.served = Some(Served {
                    zone: Arc::new(zone_compiled),
                    hash,
                    names,
                    serial,
                    journal: Arc::new(Journal::default()),
                });
                self.publish = true;
            }
            Err(e) => {
                tracing::warn!(zone = %zone_text(apex), error = %e, "the stored zone does not compile; waiting for a transfer");
            }
        }
    }

    async fn build_primary(&mut self, name: &str, apex: &[u8], spec: &PrimarySpec) {
        let limits = Limits {
            max_bytes: MAX_ZONE_TEXT,
            max_records: self.settings.max_records,
        };
        // The file: a parse error is kept until the file (or the spec's path) changes; else the
        // file is read for each build, as its records are not kept between builds.
        let file_data = match &spec.file {
            None => None,
            Some(path) => {
                let zone = self.zones.get(name).expect("a known zone");
                if let Some(error) = zone
                    .file
                    .as_ref()
                    .filter(|f| f.path == *path)
                    .and_then(|f| f.error.as_ref())
                {
                    let message = error.to_string();
                    self.refuse(name, apex, message);
                    return;
                }
                let (dir, file, owned_apex) =
                    (self.settings.file_dir.clone(), path.clone(), apex.to_vec());
                let loaded = tokio::task::spawn_blocking(move || {
                    files::load(&dir, &file, &owned_apex, &limits)
                })
                .await;
                let (result, files) = match loaded {
                    Ok(loaded) => loaded,
                    Err(e) => (
                        Err(ZoneError {
                            origin: Some(path.display().to_string()),
                            kind: ZoneErrorKind::Syntax(format!("the read did not run: {e}")),
                        }),
                        Vec::new(),
                    ),
                };
                let zone = self.zones.get_mut(name).expect("a known zone");
                zone.file = Some(FileState {
                    path: path.clone(),
                    error: result.as_ref().err().cloned(),
                    files,
                });
                match result {
                    Ok(data) => Some(data),
                    Err(e) => {
                        let message = e.to_string();
                        self.refuse(name, apex, message);
                        return;
                    }
                }
            }
        };
        let file_serial = file_data.as_ref().and_then(build::soa_serial);
        let overlays = self.overlays(name, apex, spec);
        // Overlay, completion and content hash on the blocking pool: a large zone takes a while.
        let (owned_apex, owned_spec, max_records) =
            (apex.to_vec(), spec.clone(), self.settings.max_records);
        let built = tokio::task::spawn_blocking(move || {
            let mut data = build::overlay(&owned_apex, file_data, overlays);
            build::complete(&mut data, &owned_spec);
            let hash = (data.records.len() <= max_records).then(|| build::content_hash(&data));
            (data, hash)
        })
        .await;
        let (mut data, hash) = match built {
            Ok((data, Some(hash))) => (data, hash),
            Ok((data, None)) => {
                let message = format!(
                    "too large: {} records, more than zones.maxRecords ({})",
                    data.records.len(),
                    self.settings.max_records
                );
                self.refuse(name, apex, message);
                return;
            }
            Err(e) => {
                self.refuse(name, apex, format!("the build did not finish: {e}"));
                return;
            }
        };
        let zone = self.zones.get(name).expect("a known zone");
        if zone.served.as_ref().is_some_and(|s| s.hash == hash) {
            let zone = self.zones.get_mut(name).expect("a known zone");
            zone.refused = None;
            return;
        }
        let serial = match (&zone.served, &zone.persisted) {
            (None, Some((serial, persisted_hash))) if *persisted_hash == hash => *serial,
            (served, persisted) => build::next_serial(
                spec.serial_policy,
                served
                    .as_ref()
                    .map(|s| s.serial)
                    .or(persisted.as_ref().map(|p| p.0)),
                file_serial,
                unix_now(),
            ),
        };
        build::set_serial(&mut data, serial);
        match compile(data, ZoneKind::Primary, Some(hash)).await {
            Ok((compiled, names, hash)) => {
                let zone = self.zones.get_mut(name).expect("a known zone");
                let old = zone
                    .served
                    .as_ref()
                    .map(|s| (s.zone.clone(), s.journal.clone()));
                let journal = journal_after(old, &compiled, self.settings.journal_size).await;
                tracing::info!(zone = %zone_text(apex), serial, records = compiled.record_count(), "zone built");
                let zone = self.zones.get_mut(name).expect("a known zone");
                zone.served = Some(Served {
                    zone: Arc::new(compiled),
                    names,
                    hash,
                    serial,
                    journal: Arc::new(journal),
                });
                zone.refused = None;
                self.publish = true;
                self.changed.insert(name.to_owned());
            }
            Err(e) => self.refuse(name, apex, e),
        }
    }

    /// The RecordSets of zone `name` parsed against `apex`; each one that does not parse, or
    /// repeats another's owner and type, gets its problem and is left out.
    fn overlays(&mut self, name: &str, apex: &[u8], spec: &PrimarySpec) -> Vec<Overlay> {
        let mut overlays: Vec<Overlay> = Vec::new();
        let mut seen: BTreeMap<(Box<[u8]>, u16), String> = BTreeMap::new();
        for (set_name, set) in &mut self.sets {
            let Ok(set_spec) = &set.spec else { continue };
            if set_spec.zone != name || !is_enabled(&set.object) {
                continue;
            }
            let records: Vec<&str> = set_spec.records.iter().map(String::as_str).collect();
            let ttl = set_spec.ttl.unwrap_or(spec.soa.minimum);
            match parse_record_set(apex, &set_spec.name, &set_spec.rtype, ttl, &records) {
                Ok(parsed) => {
                    let key = (parsed.owner.clone(), parsed.rtype);
                    if let Some(first) = seen.get(&key) {
                        set.problem = Some(format!(
                            "RecordSet {first} already holds {} {}; this one is left out",
                            set_spec.name, set_spec.rtype
                        ));
                        continue;
                    }
                    seen.insert(key, set_name.clone());
                    set.problem = None;
                    overlays.push(Overlay {
                        origin: format!("RecordSet {set_name}"),
                        set: parsed,
                    });
                }
                Err((at, message)) => {
                    set.problem = Some(match at {
                        Some(i) => format!("spec.records[{i}]: {message}"),
                        None => message,
                    });
                }
            }
        }
        overlays
    }

    fn refuse(&mut self, name: &str, apex: &[u8], message: String) {
        let zone = self.zones.get_mut(name).expect("a known zone");
        tracing::warn!(zone = %zone_text(apex), error = %message, kept = ?zone.served.as_ref().map(|s| s.serial), "zone refused; the last good zone stays");
        if zone.refused.as_deref() != Some(message.as_str()) {
            self.shared.count_failure(apex);
        }
        zone.refused = Some(message);
    }

    /// Publishes the zones served and the forward zones; announces changed serials.
    fn publish(&mut self) {
        self.publish = false;
        let mut served = Vec::new();
        let mut forwards = Vec::new();
        let mut view = Vec::new();
        let mut secondaries = Vec::new();
        for (name, zone) in &mut self.zones {
            let Ok(spec) = &zone.spec else { continue };
            if !zone.enabled() || zone.shadowed {
                continue;
            }
            let transfer = match &spec.kind {
                ZoneType::Primary(p) => &p.transfer,
                ZoneType::Secondary(s) => &s.transfer,
                ZoneType::Forward(upstreams) => {
                    forwards.push(ForwardZone {
                        apex: spec.apex.clone(),
                        upstreams: upstreams.clone().into(),
                    });
                    continue;
                }
            };
            if let ZoneType::Secondary(secondary) = &spec.kind {
                secondaries.push(SecondaryZone {
                    name: name.clone(),
                    apex: spec.apex.clone(),
                    spec: secondary.clone(),
                    serial: zone.served.as_ref().map(|s| s.serial),
                    timers: zone.served.as_ref().and_then(|s| {
                        Some(SoaTimers {
                            refresh: build::soa_field(&soa_only(&s.zone), 1)?,
                            retry: build::soa_field(&soa_only(&s.zone), 2)?,
                            expire: build::soa_field(&soa_only(&s.zone), 3)?,
                        })
                    }),
                });
            }
            let Some(current) = &zone.served else {
                continue;
            };
            served.push(ServedZone {
                zone: current.zone.clone(),
                expired: zone.expired,
                transfer: Arc::new(transfer_policy(&self.shared, name, transfer)),
                journal: current.journal.clone(),
            });
            view.push(ServedView {
                name: name.clone(),
                apex: spec.apex.clone(),
                kind: current.zone.kind(),
                serial: current.serial,
                names: current.names,
                expired: zone.expired,
                zone: current.zone.clone(),
            });
            if self.changed.remove(name) {
                self.shared.announce(ZoneChanged {
                    name: name.clone(),
                    apex: spec.apex.clone(),
                    serial: current.serial,
                    notify: transfer.notify.clone(),
                    tsig_key: transfer.tsig_key.clone(),
                });
            }
        }
        self.changed.clear();
        self.shared
            .publisher
            .zones_changed(Arc::new(Zones::new(served, forwards)));
        self.shared.set_view(view);
        self.shared.set_secondaries(secondaries);
        // A build's transient copies (the file's records, their origins, the overlay) are
        // freed by now, but glibc keeps their pages resident in the blocking threads' arenas
        // (about 100 bytes per record of a large zone): give them back.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn_blocking(kudurru_transports::sys::release_free_memory));
        }
    }

    async fn transferred(
        &mut self,
        apex: &[u8],
        data: super::Transferred,
    ) -> Result<(), ZoneError> {
        let not_served = || ZoneError {
            origin: None,
            kind: ZoneErrorKind::NotServed(format!(
                "{} is not an enabled secondary zone",
                zone_text(apex)
            )),
        };
        let name = self
            .zones
            .iter()
            .find(|(_, z)| {
                z.enabled()
                    && matches!(&z.spec, Ok(ZoneSpec { apex: a, kind: ZoneType::Secondary(_) }) if **a == *apex)
            })
            .map(|(n, _)| n.clone())
            .ok_or_else(not_served)?;
        let old = self.zones[&name].served.clone();
        let (new, diffs) = match data {
            super::Transferred::Full(mut data) => {
                data.apex = apex.into();
                data.origins.clear();
                (data, None)
            }
            super::Transferred::Diffs(diffs) => {
                let Some(old) = &old else {
                    return Err(ZoneError {
                        origin: None,
                        kind: ZoneErrorKind::NotServed(
                            "an incremental transfer needs a zone to apply to".into(),
                        ),
                    });
                };
                let mut data = old.zone.to_data();
                for diff in &diffs {
                    data = build::apply(&data, diff)?;
                }
                (data, Some(diffs))
            }
        };
        if new.records.len() > self.settings.max_records {
            let error = ZoneError {
                origin: None,
                kind: ZoneErrorKind::TooLarge(format!(
                    "{} records, more than zones.maxRecords ({})",
                    new.records.len(),
                    self.settings.max_records
                )),
            };
            self.refuse(&name, apex, error.to_string());
            return Err(error);
        }
        // Encoded before the compile takes the data: what is stored once it compiles.
        let body = stored::encode(&new);
        let (compiled, names, hash) = match compile(new, ZoneKind::Secondary, None).await {
            Ok(done) => done,
            Err(message) => {
                self.refuse(&name, apex, message.clone());
                return Err(ZoneError {
                    origin: None,
                    kind: ZoneErrorKind::Syntax(message),
                });
            }
        };
        // Kept before it is served: a restart serves what was last served.
        let store = self.store.clone();
        let key = stored::key(apex);
        let kept = tokio::task::spawn_blocking(move || {
            let meta = BodyMeta::for_body(&body, None, None, Timestamp::now());
            store.put_body(&key, &body, &meta)
        })
        .await;
        match kept {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(zone = %zone_text(apex), error = %e, "the transferred zone is served but could not be stored")
            }
            Err(e) => tracing::warn!(error = %e, "the zone store write did not run"),
        }
        let serial = compiled.serial();
        let journal = match diffs {
            Some(diffs) => {
                let mut journal = old
                    .as_ref()
                    .map(|o| (*o.journal).clone())
                    .unwrap_or_default();
                for diff in diffs {
                    build::record_change(&mut journal, diff, self.settings.journal_size);
                }
                journal
            }
            None => {
                let old = old.as_ref().map(|o| (o.zone.clone(), o.journal.clone()));
                journal_after(old, &compiled, self.settings.journal_size).await
            }
        };
        let zone = self.zones.get_mut(&name).expect("found above");
        zone.served = Some(Served {
            zone: Arc::new(compiled),
            hash,
            names,
            serial,
            journal: Arc::new(journal),
        });
        zone.refused = None;
        zone.expired = false;
        zone.loaded = true;
        self.publish = true;
        self.changed.insert(name);
        Ok(())
    }

    /// The enabled, loaded primary at `apex` as the UPDATE handler sees it.
    fn update_target(&self, apex: &[u8]) -> super::update::UpdateTarget {
        let found = self.zones.values().find_map(|z| match &z.spec {
            Ok(ZoneSpec {
                apex: a,
                kind: ZoneType::Primary(primary),
            }) if z.enabled() && **a == *apex => Some((primary, z.served.as_ref()?)),
            _ => None,
        });
        let Some((primary, served)) = found else {
            return super::update::UpdateTarget::NotPrimary;
        };
        super::update::UpdateTarget::Primary {
            allow: primary
                .allow_update
                .as_ref()
                .map(|allow| super::update::AllowUpdate {
                    tsig_key: allow.tsig_key.clone(),
                    clients: allow
                        .clients
                        .iter()
                        .map(|&(address, length)| kudurru_core::Prefix::containing(address, length))
                        .collect(),
                }),
            // Built on demand: the compiled zone is the only copy kept.
            records: Arc::new(served.zone.to_data()),
        }
    }

    /// RFC 2136: the changed RRsets written as RecordSet objects (the audit log names them),
    /// then the zone rebuilt at once; the watch events that follow change nothing.
    async fn update(
        &mut self,
        apex: &[u8],
        removed: Vec<Record>,
        added: Vec<Record>,
    ) -> Result<u32, ZoneError> {
        let found = self.zones.iter().find(|(_, z)| {
            z.enabled()
                && matches!(&z.spec, Ok(ZoneSpec { apex: a, kind: ZoneType::Primary(_) }) if **a == *apex)
        });
        let Some((name, zone)) = found else {
            return Err(ZoneError {
                origin: None,
                kind: ZoneErrorKind::NotServed(format!(
                    "{} is not an enabled primary zone",
                    zone_text(apex)
                )),
            });
        };
        let Some(served) = &zone.served else {
            return Err(ZoneError {
                origin: None,
                kind: ZoneErrorKind::NotServed(format!("{} has not loaded yet", zone_text(apex))),
            });
        };
        let name = name.clone();
        let served_zone = served.zone.clone();
        // Every RRset the update touches, as it will be.
        let mut touched: BTreeMap<(Box<[u8]>, u16), Vec<Record>> = BTreeMap::new();
        for record in removed.iter().chain(&added) {
            if record.rtype == build::SOA || !kudurru_core::zone::file::in_zone(&record.owner, apex)
            {
                return Err(ZoneError {
                    origin: None,
                    kind: ZoneErrorKind::OutOfZone(kudurru_core::policy::name::to_text(
                        &record.owner,
                    )),
                });
            }
            touched
                .entry((record.owner.clone(), record.rtype))
                .or_insert_with(|| {
                    served_zone
                        .rrset(&record.owner, record.rtype)
                        .into_iter()
                        .flatten()
                        .map(|(ttl, rdata)| Record {
                            owner: record.owner.clone(),
                            rtype: record.rtype,
                            ttl,
                            rdata: rdata.into(),
                        })
                        .collect()
                });
        }
        for record in &removed {
            if let Some(set) = touched.get_mut(&(record.owner.clone(), record.rtype)) {
                set.retain(|r| r.rdata != record.rdata);
            }
        }
        for record in &added {
            if let Some(set) = touched.get_mut(&(record.owner.clone(), record.rtype)) {
                // RFC 2136 §3.4.2.2: a duplicate rdata replaces the old record (its TTL).
                set.retain(|r| r.rdata != record.rdata);
                set.push(record.clone());
            }
        }
        let mut writes = Vec::new();
        for ((owner, rtype), records) in touched {
            let owner_text = zone_text(&owner);
            let type_name = type_text(rtype);
            let existing = self.sets.iter().find(|(_, s)| {
                s.spec.as_ref().is_ok_and(|spec| {
                    spec.zone == name
                        && parse_record_set(apex, &spec.name, &spec.rtype, 0, &[])
                            .is_ok_and(|p| p.owner == owner && p.rtype == rtype)
                })
            });
            let spec = json!({
                "zone": name,
                "name": owner_text,
                "type": type_name,
                "ttl": records.iter().map(|r| r.ttl).min().unwrap_or(0),
                "records": records.iter().map(|r| rdata_text(r.rtype, &r.rdata)).collect::<Vec<_>>(),
            });
            let object = match existing {
                Some((_, set)) => {
                    let mut object = set.object.clone();
                    object.spec = spec;
                    object
                }
                None => Object::new(RECORD_SET, update_set_name(&name, &owner, rtype), spec),
            };
            writes.push((existing.is_some(), object));
        }
        let store = self.store.clone();
        let written = tokio::task::spawn_blocking(move || {
            let actor = Actor::system("dns-update");
            writes
                .into_iter()
                .map(|(exists, object)| {
                    if exists {
                        store.update(&actor, &object)
                    } else {
                        match store.create(&actor, &object) {
                            Err(StoreError::AlreadyExists { .. }) => {
                                let mut current = store.get(&object.kind, &object.metadata.name)?;
                                current.spec = object.spec.clone();
                                store.update(&actor, &current)
                            }
                            other => other,
                        }
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await;
        let written = match written {
            Ok(Ok(written)) => written,
            Ok(Err(e)) => {
                return Err(ZoneError {
                    origin: None,
                    kind: ZoneErrorKind::Syntax(format!("the update was not stored: {e}")),
                });
            }
            Err(e) => {
                return Err(ZoneError {
                    origin: None,
                    kind: ZoneErrorKind::Syntax(format!("the update write did not run: {e}")),
                });
            }
        };
        for object in written {
            self.apply_set(object.metadata.name.clone(), object, false);
        }
        self.step().await;
        let zone = &self.zones[&name];
        match (&zone.refused, &zone.served) {
            (Some(why), _) => Err(ZoneError {
                origin: None,
                kind: ZoneErrorKind::Syntax(why.clone()),
            }),
            (None, Some(served)) => Ok(served.serial),
            (None, None) => Err(ZoneError {
                origin: None,
                kind: ZoneErrorKind::NotServed("the zone is not served".into()),
            }),
        }
    }

    /// Writes the statuses that changed; shares the diagnoses.
    async fn write_statuses(&mut self) {
        let now = Timestamp::now();
        let mut diagnoses = Vec::new();
        let mut writes = Vec::new();
        for (name, zone) in &self.zones {
            let mut draft = Draft::new(&zone.object, now);
            if zone.enabled() {
                let (ready, reason, message) = zone_condition(zone);
                if !ready {
                    diagnoses.push(Diagnosis {
                        severity: if zone.served.is_some() {
                            "warning"
                        } else {
                            "error"
                        },
                        code: "zone_refused",
                        message: format!("Zone {name}: {message}"),
                    });
                }
                draft.condition(condition(
                    kudurru_storage::CONDITION_READY,
                    ready,
                    reason,
                    message,
                    now,
                ));
                if let Some(served) = &zone.served {
                    draft.field("serial", json!(served.serial));
                    draft.field("contentHash", json!(served.hash));
                    draft.field("records", json!(served.zone.record_count()));
                    draft.field("names", json!(served.names));
                }
                draft.field("expired", json!(zone.expired));
            }
            if let Some(status) = draft.finish(&zone.object) {
                writes.push((name.clone(), ZONE, zone.object.clone(), status));
            }
        }
        for (name, set) in &mut self.sets {
            let zone = set.spec.as_ref().ok().and_then(|s| self.zones.get(&s.zone));
            let mut draft = Draft::new(&set.object, now);
            if is_enabled(&set.object) {
                let (ready, reason, message) = match (&set.spec, &set.problem, zone) {
                    (Err(e), _, _) => (false, "Invalid", e.clone()),
                    (_, Some(problem), _) => (false, "Invalid", problem.clone()),
                    (Ok(spec), None, None) => (
                        false,
                        "ZoneNotFound",
                        format!("no Zone {} (it is applied once the Zone exists)", spec.zone),
                    ),
                    (Ok(_), None, Some(zone)) => match (&zone.spec, &zone.served) {
                        (
                            Ok(ZoneSpec {
                                kind: ZoneType::Primary(_),
                                ..
                            }),
                            Some(served),
                        ) if zone.refused.is_none() => {
                            set.served_in = Some(served.serial);
                            (
                                true,
                                "Served",
                                format!("served at serial {}", served.serial),
                            )
                        }
                        (
                            Ok(ZoneSpec {
                                kind: ZoneType::Primary(_),
                                ..
                            }),
                            _,
                        ) => (
                            false,
                            "ZoneRefused",
                            "the zone is refused; see its status".into(),
                        ),
                        _ => (
                            false,
                            "NotPrimary",
                            "RecordSets apply to primary zones only".into(),
                        ),
                    },
                };
                draft.condition(condition(
                    kudurru_storage::CONDITION_READY,
                    ready,
                    reason,
                    message,
                    now,
                ));
            }
            if let Some(status) = draft.finish(&set.object) {
                writes.push((name.clone(), RECORD_SET, set.object.clone(), status));
            }
        }
        self.shared.set_diagnoses(diagnoses);
        for (name, kind, object, status) in writes {
            match write_as(self.store.clone(), &object, status, Actor::system("zones")).await {
                Ok(written) => {
                    if kind == ZONE {
                        if let Some(zone) = self.zones.get_mut(&name) {
                            keep_written(&mut zone.object, written);
                        }
                    } else if let Some(set) = self.sets.get_mut(&name) {
                        keep_written(&mut set.object, written);
                    }
                }
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(kind, name, error = %e, "the status could not be written")
                }
            }
        }
    }
}

/// The Ready condition of an enabled zone: (ready, reason, message).
fn zone_condition(zone: &ZoneState) -> (bool, &'static str, String) {
    let serving = |served: &Option<Served>| match served {
        Some(s) => format!("serving serial {} (the last good zone)", s.serial),
        None => "nothing served".to_owned(),
    };
    match (&zone.spec, &zone.refused, &zone.served) {
        (Err(e), _, _) => (
            false,
            "Invalid",
            format!("the stored spec is not valid: {e}"),
        ),
        (_, Some(why), served) => (
            false,
            "Refused",
            format!("refused: {why}; {}", serving(served)),
        ),
        (
            Ok(ZoneSpec {
                kind: ZoneType::Forward(u),
                ..
            }),
            None,
            _,
        ) => (
            true,
            "Forwarding",
            format!("forwarded to {} upstream(s)", u.len()),
        ),
        (
            Ok(ZoneSpec {
                kind: ZoneType::Secondary(_),
                ..
            }),
            None,
            None,
        ) => (
            false,
            "NotTransferred",
            "waiting for the first transfer".into(),
        ),
        (Ok(_), None, None) => (false, "NotLoaded", "not loaded yet".into()),
        (Ok(_), None, Some(served)) if zone.expired => (
            false,
            "Expired",
            format!(
                "serial {} expired (SOA expire passed): answered SERVFAIL",
                served.serial
            ),
        ),
        (Ok(_), None, Some(served)) => (
            true,
            "Served",
            format!(
                "serving serial {} ({} records)",
                served.serial,
                served.zone.record_count()
            ),
        ),
    }
}

/// A compiled zone, its owner names and content hash.
type Compiled = (Zone, usize, String);

/// Counts `data`'s owner names, hashes it (unless the caller did) and compiles it, all on the
/// blocking pool (a large zone takes a while); a panic is an error. The data is dropped
/// after: the compiled zone is the one copy kept, its origins only read by a compile error.
async fn compile(data: ZoneData, kind: ZoneKind, hash: Option<String>) -> Result<Compiled, String> {
    let compiled = tokio::task::spawn_blocking(move || {
        let names = build::name_count(&data);
        let hash = hash.unwrap_or_else(|| build::content_hash(&data));
        Zone::compile(&data, kind).map(|zone| (zone, names, hash))
    })
    .await;
    match compiled {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the compile did not finish: {e}")),
    }
}

/// The journal after `new` replaced `old` (its zone and journal): the diff between the two
/// compiled zones appended, computed on the blocking pool from their records.
async fn journal_after(old: Option<(Arc<Zone>, Arc<Journal>)>, new: &Zone, max: usize) -> Journal {
    let Some((old, journal)) = old else {
        return Journal::default();
    };
    let mut journal = (*journal).clone();
    if max == 0 {
        journal.diffs.clear();
        return journal;
    }
    let new_data = new.to_data();
    let diff = tokio::task::spawn_blocking(move || build::diff(&old.to_data(), &new_data)).await;
    match diff {
        Ok(diff) => build::record_change(&mut journal, diff, max),
        // No diff: the journal starts again (IXFR falls back to AXFR).
        Err(_) => journal.diffs.clear(),
    }
    journal
}

/// A zone data holding only `zone`'s SOA, for [`build::soa_field`].
fn soa_only(zone: &Zone) -> ZoneData {
    ZoneData {
        apex: zone.apex().into(),
        records: vec![zone.soa()],
        origins: Vec::new(),
    }
}

/// The name of the RecordSet an update creates: the zone's name and a hash of owner and type.
fn update_set_name(zone: &str, owner: &[u8], rtype: u16) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(owner);
    hash.update(rtype.to_be_bytes());
    let digest = hash.finalize();
    let suffix: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    let prefix: String = zone.chars().take(63 - 1 - suffix.len()).collect();
    format!("{}-{suffix}", prefix.trim_end_matches('-'))
}

/// The serial and content hash a zone's status holds.
fn persisted(object: &Object) -> Option<(u32, String)> {
    let fields = &object.status.fields;
    let serial = u32::try_from(fields.get("serial")?.as_u64()?).ok()?;
    let hash = fields.get("contentHash")?.as_str()?.to_owned();
    Some((serial, hash))
}

fn unix_now() -> u32 {
    let seconds = jiff::Timestamp::now().as_second();
    // Serials are 32-bit (RFC 1982); the Unix time wraps there in 2106.
    seconds as u32
}

/// The next event of a watch; a watch that could not be opened (etcd down in a fleet) answers
/// `None` after [`REWATCH`], so the loop opens it again instead of waiting forever.
async fn next(
    watch: &mut Option<kudurru_storage::Watch>,
) -> Option<Result<WatchEvent, StoreError>> {
    match watch {
        Some(watch) => watch.next().await,
        None => {
            tokio::time::sleep(REWATCH).await;
            None
        }
    }
}

/// Whether `new` changes what the manager acts on: the spec or the enabled switch.
fn changed(old: &Object, new: &Object) -> bool {
    old.spec != new.spec || is_enabled(old) != is_enabled(new)
}

fn field_message(e: kudurru_storage::FieldError) -> String {
    format!("{}: {}", e.field, e.message)
}

/// Who may transfer a zone, its `tsigKey` resolved from the key file: a key name the file
/// does not hold lets nobody transfer (never unsigned in its place).
fn transfer_policy(shared: &Shared, name: &str, transfer: &kinds::TransferSpec) -> TransferPolicy {
    match &transfer.tsig_key {
        None => TransferPolicy {
            allow: transfer.allow.clone(),
            key: None,
        },
        Some(key_name) => match shared.keys().get(key_name) {
            Some(key) => TransferPolicy {
                allow: transfer.allow.clone(),
                key: Some(key),
            },
            None => {
                tracing::warn!(
                    zone = name,
                    key = key_name,
                    "tsigKey names no key in zones.tsigKeyFile: transfers refused"
                );
                TransferPolicy::default()
            }
        },
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
