//! kudurru-storage: the object store (kinds with Kubernetes-shaped metadata, spec and status;
//! resourceVersion and optimistic concurrency; watch), its audit log, and the list-body cache
//! (the last fetched body of each list source, outside the revision and the audit log).
//!
//! ```text
//!  control thread ──spawn_blocking──▶ Store (create get list update update_status delete)
//!         ▲                                │ engine: validate → precondition → audit → commit
//!         └──── Watch::next().await ◀──── Hub (history, watchers)      │
//!                                          drivers: MemoryStore, RedbStore, EtcdStore
//! ```
//!
//! Contract: every driver passes `tests/conformance`; a write is atomic with its audit record
//! and durable when it returns; bad input is a typed [`StoreError`] naming the field, and
//! changes nothing; data read from disk is decoded, never trusted (a corrupt record is an
//! error, not a panic). The crate depends on no other kudurru crate, and nothing here is
//! `unsafe`.

#![forbid(unsafe_code)]

mod audit;
mod body_cache;
mod enabled;
mod engine;
mod error;
mod etcd;
pub mod files;
mod kind;
mod list;
mod memory;
mod object;
pub mod querylog;
mod redb_store;
mod selector;
mod store;
mod time;
mod watch;

pub use audit::{Actor, AuditLog, AuditQuery, AuditRecord, AuditVerb, ChainReport, PruneReport};
pub use body_cache::{BodyCache, BodyMeta, MAX_BODY_KEY_BYTES};
pub use enabled::{
    COMMENT_ANNOTATION, CONDITION_DISABLED, CONDITION_READY, ENABLED_ANNOTATION, REASON_DISABLED,
    REASON_ENABLED, comment, enabled_status, find_condition, is_enabled, remove_condition,
    set_condition,
};
pub use error::{Result, StorageError, StoreError};
pub use etcd::{BODY_CHUNK_BYTES, EtcdOptions, EtcdStore, EtcdTls, Fence};
pub use kind::{FieldError, KindRegistry, KindSchema, SpecValidator, validate_name};
pub use memory::MemoryStore;
pub use object::{
    Condition, ConditionStatus, Object, ObjectKey, ObjectMeta, ObjectStatus, parse_resource_version,
};
pub use redb_store::{FILE_NAME, FORMAT_VERSION, RedbStore, verify_audit_file};
pub use selector::LabelSelector;
pub use store::{
    DeleteOptions, EventType, ListOptions, ObjectList, Store, StoreOptions, WatchEvent,
    WatchOptions,
};
pub use time::{Clock, Timestamp, system_clock};
pub use watch::{DEFAULT_HISTORY, DEFAULT_WATCH_BUFFER, Watch};
