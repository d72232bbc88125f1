//! What the suite needs from a driver, and the test kinds, clock and directories it uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use kudurru_storage::{
    Actor, AuditLog, BodyCache, FieldError, KindRegistry, KindSchema, MemoryStore, Object,
    RedbStore, Store, StoreOptions, Timestamp,
};
use serde_json::{Value, json};

/// A driver under test.
pub(crate) trait Harness: Sized {
    /// The driver's store.
    type Store: Store + AuditLog + BodyCache + 'static;
    /// A fresh, empty store.
    fn open(options: StoreOptions) -> Self;
    /// The store.
    fn store(&self) -> &Self::Store;
}

/// The memory driver.
pub(crate) struct Memory(MemoryStore);

impl Harness for Memory {
    type Store = MemoryStore;
    fn open(options: StoreOptions) -> Self {
        Self(MemoryStore::new(options))
    }
    fn store(&self) -> &MemoryStore {
        &self.0
    }
}

/// The redb driver, in a directory of its own.
pub(crate) struct Redb {
    pub(crate) store: Option<RedbStore>,
    pub(crate) options: StoreOptions,
    pub(crate) dir: TempDir,
}

impl Redb {
    /// Closes the database and opens it again, as a restart does.
    pub(crate) fn restart(&mut self) {
        drop(self.store.take());
        self.store = Some(RedbStore::open(self.dir.path(), self.options.clone()).unwrap());
    }
}

impl Harness for Redb {
    type Store = RedbStore;
    fn open(options: StoreOptions) -> Self {
        let dir = TempDir::new();
        let store = RedbStore::open(dir.path(), options.clone()).unwrap();
        Self {
            store: Some(store),
            options,
            dir,
        }
    }
    fn store(&self) -> &RedbStore {
        self.store
            .as_ref()
            .expect("the store is open between restarts")
    }
}

/// A directory removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "kudurru-storage-{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        ));
        Self(path)
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A clock the test moves.
#[derive(Clone, Default)]
pub(crate) struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub(crate) fn set(&self, millis: i64) {
        self.0.store(millis, Ordering::SeqCst);
    }
    pub(crate) fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.0.load(Ordering::SeqCst))
    }
}

/// The test kinds: `Widget` (spec.size 1..=100 required, spec.color a string) and `Gadget`
/// (any object spec).
pub(crate) fn registry() -> KindRegistry {
    let mut registry = KindRegistry::new();
    registry
        .register(KindSchema {
            kind: "Widget",
            validate_spec: validate_widget,
        })
        .unwrap()
        .register(KindSchema {
            kind: "Gadget",
            validate_spec: |_| Ok(()),
        })
        .unwrap();
    registry
}

fn validate_widget(spec: &Value) -> Result<(), FieldError> {
    match spec.get("size") {
        None => return Err(FieldError::new("spec.size", "required")),
        Some(size) => match size.as_u64() {
            Some(1..=100) => {}
            _ => {
                return Err(FieldError::new(
                    "spec.size",
                    "must be an integer from 1 to 100",
                ));
            }
        },
    }
    if spec.get("color").is_some_and(|color| !color.is_string()) {
        return Err(FieldError::new("spec.color", "must be a string"));
    }
    Ok(())
}

/// Options with `clock`, the test kinds, a history of 64 changes and a buffer of 16 events.
pub(crate) fn options(clock: &ManualClock) -> StoreOptions {
    let mut options = StoreOptions::new(registry().into_shared());
    let clock = clock.clone();
    options.clock = Arc::new(move || clock.now());
    options.watch_history = 64;
    options.watch_buffer = 16;
    options
}

/// A fresh store of `H` with a manual clock at 1,000,000 ms.
pub(crate) fn setup<H: Harness>() -> (H, ManualClock) {
    let clock = ManualClock::default();
    clock.set(1_000_000);
    (H::open(options(&clock)), clock)
}

pub(crate) fn widget(name: &str, size: u64) -> Object {
    Object::new("Widget", name, json!({ "size": size }))
}

pub(crate) fn labeled(mut object: Object, labels: &[(&str, &str)]) -> Object {
    for (key, value) in labels {
        object
            .metadata
            .labels
            .insert((*key).to_owned(), (*value).to_owned());
    }
    object
}

pub(crate) fn alice() -> Actor {
    Actor::principal("alice").unwrap()
}

pub(crate) fn controller() -> Actor {
    Actor::system("controller")
}
