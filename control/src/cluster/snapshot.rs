//! The node's last good copy of the fleet's data, for a start while etcd cannot be reached.
//!
//! ```text
//! connected:  every 15 s, when the store's revision, a body or the settings changed:
//!             objects (every kind, with status) + list bodies ─▶ <dataDir>/cluster-snapshot.tmp/
//!             objects.redb (0600), settings.toml (0600) ─▶ fsync ─▶ rename to cluster-snapshot/
//! start, etcd down: cluster-snapshot/ opened read-only: the managers compile from it, the
//!             API reads it, every write answers 503 (StoreError::Unavailable); the node probes
//!             etcd and, once it answers, starts itself again (exec) to rejoin the fleet.
//! ```
//!
//! The copy is whole each time (objects are re-created in a fresh redb file): simple and
//! always consistent with one store revision; its cost grows with the fleet's data (see
//! docs/operations.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kudurru_storage::{
    Actor, AuditLog, AuditQuery, AuditRecord, BodyCache, BodyMeta, ChainReport, DeleteOptions,
    ListOptions, Object, ObjectList, PruneReport, RedbStore, Store, StoreError, StoreOptions,
    Timestamp, Watch, WatchOptions,
};

use crate::objects::ObjectStore;

/// The snapshot's directory under the data directory.
pub const SNAPSHOT_DIR: &str = "cluster-snapshot";
/// The fleet settings document kept beside the objects.
pub const SETTINGS_FILE: &str = "settings.toml";
/// How often the snapshot is brought up to date (when something changed): each one rewrites
/// every object (in one redb transaction), so not more often than this.
pub const SNAPSHOT_PERIOD: Duration = Duration::from_secs(15);

/// Where the snapshot lives.
pub fn directory(data_dir: &Path) -> PathBuf {
    data_dir.join(SNAPSHOT_DIR)
}

/// Writes a fresh snapshot of `store` (objects of every kind with their status, every list
/// body) and `settings` (the fleet's settings document) into `data_dir`, replacing the last
/// one only once the new one is complete. Blocking.
pub fn write(store: &dyn ObjectStore, settings: &str, data_dir: &Path) -> Result<u64, StoreError> {
    let revision = store.revision()?;
    let fresh = data_dir.join(format!("{SNAPSHOT_DIR}.tmp"));
    let _ = std::fs::remove_dir_all(&fresh);
    create_private_dir(&fresh)?;
    {
        let registry = crate::objects::registry();
        let copy = RedbStore::open(&fresh, StoreOptions::new(registry.clone()))?;
        let actor = Actor::system("cluster-snapshot");
        // Every object in one redb transaction (one fsync), read from the store a page at a
        // time while it is written, so memory holds one page, not the fleet.
        let kinds: Vec<&'static str> = registry.kinds().collect();
        copy.import(&actor, Pages::new(store, kinds))?;
        for key in store.body_keys()? {
            if let Some((body, meta)) = store.get_body(&key)? {
                copy.put_body(&key, &body, &meta)?;
            }
        }
    }
    write_private(&fresh.join(SETTINGS_FILE), settings.as_bytes())?;
    let target = directory(data_dir);
    let old = data_dir.join(format!("{SNAPSHOT_DIR}.old"));
    let _ = std::fs::remove_dir_all(&old);
    if target.exists() {
        std::fs::rename(&target, &old).map_err(|e| io(&target, e))?;
    }
    std::fs::rename(&fresh, &target).map_err(|e| io(&fresh, e))?;
    if let Ok(dir) = std::fs::File::open(data_dir) {
        let _ = dir.sync_all();
    }
    let _ = std::fs::remove_dir_all(&old);
    Ok(revision)
}

/// Every object of a store, kind by kind, listed [`PAGE`] at a time as the iteration reaches
/// them, each with resourceVersion 0 (ready to be created in the copy).
struct Pages<'s> {
    store: &'s dyn ObjectStore,
    kinds: std::vec::IntoIter<&'static str>,
    /// The next page to list: its kind and continue token; `None` once every kind is done.
    next_page: Option<(&'static str, Option<String>)>,
    page: std::vec::IntoIter<Object>,
}

/// Objects listed per page while a snapshot is written.
const PAGE: usize = 500;

impl<'s> Pages<'s> {
    fn new(store: &'s dyn ObjectStore, kinds: Vec<&'static str>) -> Self {
        let mut kinds = kinds.into_iter();
        Self {
            store,
            next_page: kinds.next().map(|kind| (kind, None)),
            kinds,
            page: Vec::new().into_iter(),
        }
    }
}

impl Iterator for Pages<'_> {
    type Item = Result<Object, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(mut object) = self.page.next() {
                object.metadata.resource_version = 0;
                return Some(Ok(object));
            }
            let (kind, continue_token) = self.next_page.take()?;
            let options = ListOptions {
                limit: PAGE,
                continue_token,
                ..ListOptions::default()
            };
            // On an error `next_page` stays `None`: the iteration ends after it.
            let page = match self.store.list(kind, &options) {
                Ok(page) => page,
                Err(e) => return Some(Err(e)),
            };
            self.page = page.items.into_iter();
            self.next_page = match page.continue_token {
                Some(token) => Some((kind, Some(token))),
                None => self.kinds.next().map(|kind| (kind, None)),
            };
        }
    }
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Storage(kudurru_storage::StorageError::Io {
        path: path.to_owned(),
        source: e,
    })
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io(dir, e))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io(path, e))?;
    file.write_all(bytes).map_err(|e| io(path, e))?;
    file.sync_all().map_err(|e| io(path, e))
}

/// The last snapshot, opened for a start without etcd: (the store, read-only, and the settings
/// document); `None` when this node never wrote one.
pub fn open(data_dir: &Path) -> Result<Option<(Arc<ReadOnly>, String)>, StoreError> {
    let dir = directory(data_dir);
    if !dir.join(kudurru_storage::FILE_NAME).exists() {
        return Ok(None);
    }
    let store = RedbStore::open(&dir, StoreOptions::new(crate::objects::registry()))?;
    let settings = std::fs::read_to_string(dir.join(SETTINGS_FILE)).unwrap_or_default();
    let taken = std::fs::metadata(dir.join(kudurru_storage::FILE_NAME))
        .and_then(|m| m.modified())
        .ok()
        .map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_else(|| "an unknown time".into());
    Ok(Some((Arc::new(ReadOnly { store, taken }), settings)))
}

/// The snapshot served while etcd cannot be reached: reads and watches as the redb store
/// answers them; every write answers [`StoreError::Unavailable`] (the API's 503).
pub struct ReadOnly {
    store: RedbStore,
    taken: String,
}

impl ReadOnly {
    fn refuse<T>(&self) -> Result<T, StoreError> {
        Err(StoreError::Unavailable {
            reason: format!(
                "etcd cannot be reached; this node serves its last snapshot of the fleet (taken {}) and takes no writes",
                self.taken
            ),
        })
    }
}

impl Store for ReadOnly {
    fn create(&self, _: &Actor, _: &Object) -> Result<Object, StoreError> {
        self.refuse()
    }
    fn get(&self, kind: &str, name: &str) -> Result<Object, StoreError> {
        self.store.get(kind, name)
    }
    fn list(&self, kind: &str, options: &ListOptions) -> Result<ObjectList, StoreError> {
        self.store.list(kind, options)
    }
    fn update(&self, _: &Actor, _: &Object) -> Result<Object, StoreError> {
        self.refuse()
    }
    fn update_status(&self, _: &Actor, _: &Object) -> Result<Object, StoreError> {
        self.refuse()
    }
    fn delete(&self, _: &Actor, _: &str, _: &str, _: &DeleteOptions) -> Result<Object, StoreError> {
        self.refuse()
    }
    fn watch(&self, kind: &str, options: &WatchOptions) -> Result<Watch, StoreError> {
        self.store.watch(kind, options)
    }
    fn revision(&self) -> Result<u64, StoreError> {
        self.store.revision()
    }
    fn compact(&self, _: u64) -> Result<(), StoreError> {
        Ok(())
    }
    fn progress_notify(&self) -> Result<(), StoreError> {
        self.store.progress_notify()
    }
}

impl AuditLog for ReadOnly {
    fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        self.store.audit_query(query)
    }
    fn audit_prune(&self, _: Timestamp) -> Result<PruneReport, StoreError> {
        self.refuse()
    }
    fn audit_verify(&self) -> Result<ChainReport, StoreError> {
        self.store.audit_verify()
    }
}

impl BodyCache for ReadOnly {
    fn put_body(&self, _: &str, _: &[u8], _: &BodyMeta) -> Result<(), StoreError> {
        self.refuse()
    }
    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>, StoreError> {
        self.store.get_body(key)
    }
    fn delete_bodies(&self, _: &str) -> Result<u64, StoreError> {
        self.refuse()
    }
    fn body_keys(&self) -> Result<Vec<String>, StoreError> {
        self.store.body_keys()
    }
}

/// Keeps the snapshot current while the node is connected: every [`SNAPSHOT_PERIOD`], when
/// the store's revision, a body or the settings document changed since the last one.
pub async fn keep(
    store: Arc<dyn ObjectStore>,
    mut bodies: tokio::sync::mpsc::UnboundedReceiver<String>,
    cluster: super::ClusterHandle,
    data_dir: PathBuf,
) {
    let mut tick = tokio::time::interval(SNAPSHOT_PERIOD);
    let mut written: Option<(u64, String)> = None;
    let mut bodies_changed = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = bodies.recv() => {
                if changed.is_some() {
                    bodies_changed = true;
                }
                continue;
            }
        }
        let settings = cluster.fleet_settings();
        let (store, dir, text) = (store.clone(), data_dir.clone(), settings.clone());
        let revision = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || store.revision()).await
        };
        let Ok(Ok(revision)) = revision else {
            continue;
        };
        if !bodies_changed
            && written
                .as_ref()
                .is_some_and(|(r, s)| *r == revision && *s == settings)
        {
            continue;
        }
        match tokio::task::spawn_blocking(move || write(store.as_ref(), &text, &dir)).await {
            Ok(Ok(revision)) => {
                tracing::debug!(revision, "fleet snapshot written");
                written = Some((revision, settings));
                bodies_changed = false;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the fleet snapshot could not be written; the last one stays")
            }
            Err(e) => tracing::warn!(error = %e, "the fleet snapshot task failed"),
        }
    }
}

/// How often a node serving its snapshot asks etcd again.
pub const REJOIN_PROBE: Duration = Duration::from_secs(2);

/// While the node serves its snapshot: probes etcd and, once the store opens, starts this
/// process again with the same arguments and environment (exec: same pid, listeners closed
/// and bound again, a moment without answers) so it rejoins the fleet with a fresh list.
pub async fn rejoin(settings: crate::config::EtcdCluster) {
    loop {
        tokio::time::sleep(REJOIN_PROBE).await;
        let probe = settings.clone();
        let opened =
            tokio::task::spawn_blocking(move || crate::objects::open_etcd_store(&probe)).await;
        if let Ok(Ok(store)) = opened {
            drop(store);
            tracing::warn!("etcd answers again: starting again to rejoin the fleet");
            let error = restart_self();
            tracing::error!(error = %error, "could not start again; still serving the snapshot");
        }
    }
}

/// Replaces this process with a fresh start of the same binary and arguments; returns only
/// on failure.
fn restart_self() -> std::io::Error {
    use std::os::unix::process::CommandExt as _;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .exec()
}

#[cfg(test)]
mod tests {
    use kudurru_storage::MemoryStore;
    use serde_json::json;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kudurru-snapshot-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_snapshot_of_several_pages_and_kinds_keeps_every_object() {
        let store = MemoryStore::new(StoreOptions::new(crate::objects::registry()));
        let actor = Actor::system("test");
        let count = 2 * PAGE + 1;
        for i in 0..count {
            let group = Object::new(
                "ClientGroup",
                format!("group-{i}"),
                json!({"clients": ["192.0.2.0/24"]}),
            );
            store.create(&actor, &group).unwrap();
        }
        let list = Object::new(
            "BlockList",
            "ads",
            json!({"sources": [{"inline": ["ads.example"]}]}),
        );
        store.create(&actor, &list).unwrap();
        let dir = scratch("pages");
        write(&store, "", &dir).unwrap();
        let (read_only, _) = open(&dir).unwrap().expect("a snapshot");
        let all = ListOptions::default();
        assert_eq!(
            read_only.list("ClientGroup", &all).unwrap().items.len(),
            count
        );
        assert_eq!(read_only.list("BlockList", &all).unwrap().items.len(), 1);
        // One creation per object, in one transaction.
        assert_eq!(read_only.revision().unwrap(), count as u64 + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The time to write a snapshot of `SNAPSHOT_OBJECTS` objects (10,000 by default), each
    /// with a status: docs/benchmarks.md "Cluster", the snapshot's row.
    #[test]
    #[ignore = "a measurement, not a check: run with --ignored --nocapture"]
    fn snapshot_write_time() {
        let count: usize = std::env::var("SNAPSHOT_OBJECTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000);
        let store = MemoryStore::new(StoreOptions::new(crate::objects::registry()));
        let actor = Actor::system("test");
        for i in 0..count {
            let group = Object::new(
                "ClientGroup",
                format!("group-{i}"),
                json!({"clients": [format!("192.0.2.{}/32", i % 256)]}),
            );
            let mut created = store.create(&actor, &group).unwrap();
            created.status.observed_generation = 1;
            store.update_status(&actor, &created).unwrap();
        }
        let dir = scratch("timing");
        let started = std::time::Instant::now();
        write(&store, "", &dir).unwrap();
        let elapsed = started.elapsed();
        let size = std::fs::metadata(directory(&dir).join(kudurru_storage::FILE_NAME))
            .unwrap()
            .len();
        let (read_only, _) = open(&dir).unwrap().unwrap();
        let listed = read_only
            .list(
                "ClientGroup",
                &ListOptions {
                    limit: 0,
                    ..ListOptions::default()
                },
            )
            .unwrap();
        assert_eq!(listed.items.len(), count);
        eprintln!(
            "snapshot of {count} objects (each with a status): {elapsed:?}, {:.1} MiB",
            size as f64 / (1 << 20) as f64
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_snapshot_keeps_objects_status_bodies_and_settings_and_refuses_writes() {
        let store = MemoryStore::new(StoreOptions::new(crate::objects::registry()));
        let actor = Actor::system("test");
        let group = Object::new("ClientGroup", "lab", json!({"clients": ["192.0.2.0/24"]}));
        let created = store.create(&actor, &group).unwrap();
        let mut with_status = created.clone();
        with_status.status.observed_generation = 1;
        store.update_status(&actor, &with_status).unwrap();
        let body = b"blocked.example\n";
        let meta = BodyMeta::for_body(body, Some("\"e1\"".into()), None, Timestamp::now());
        store.put_body("blocklist/ads/0011", body, &meta).unwrap();
        let dir = scratch("roundtrip");
        write(&store, "[cache]\nmaxEntries = 5000\n", &dir).unwrap();
        // A second snapshot replaces the first whole.
        write(&store, "[cache]\nmaxEntries = 6000\n", &dir).unwrap();
        let mode = |p: &Path| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777
        };
        let snapshot = directory(&dir);
        assert_eq!(mode(&snapshot.join(SETTINGS_FILE)), 0o600);
        assert_eq!(mode(&snapshot.join(kudurru_storage::FILE_NAME)), 0o600);
        assert!(!dir.join(format!("{SNAPSHOT_DIR}.tmp")).exists());

        let (read_only, settings) = open(&dir).unwrap().expect("a snapshot");
        assert_eq!(settings, "[cache]\nmaxEntries = 6000\n");
        let kept = read_only.get("ClientGroup", "lab").unwrap();
        assert_eq!(kept.spec, group.spec);
        assert_eq!(kept.status.observed_generation, 1);
        let (kept_body, kept_meta) = read_only.get_body("blocklist/ads/0011").unwrap().unwrap();
        assert_eq!(kept_body, body);
        assert_eq!(kept_meta.etag.as_deref(), Some("\"e1\""));
        let refused = read_only.create(&actor, &Object::new("ClientGroup", "new", json!({})));
        assert!(
            matches!(refused, Err(StoreError::Unavailable { .. })),
            "{refused:?}"
        );
        assert!(matches!(
            read_only.put_body("blocklist/x/1", body, &meta),
            Err(StoreError::Unavailable { .. })
        ));
        assert!(open(&scratch("none")).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
