//! STUB(issue 34, blocking-control): the body cache's interface as `kudurru-storage` will
//! export it (`BodyCache`, `BodyMeta`; the store implements it, `ObjectStore` requires it) from
//! branch `blocking-fetch`. Until that merges, the list manager keeps bodies in memory
//! ([`MemoryBodies`]), so a restart does not keep them yet. At merge: this file becomes
//! `pub use kudurru_storage::{BodyCache, BodyMeta};` plus `MemoryBodies` for the tests, and
//! `serve` passes the store itself.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use kudurru_storage::{StoreError, Timestamp};

/// What is kept beside a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyMeta {
    /// Its `ETag`.
    pub etag: Option<String>,
    /// Its `Last-Modified`.
    pub last_modified: Option<String>,
    /// When it was fetched.
    pub fetched: Timestamp,
    /// Its SHA-256.
    pub sha256: [u8; 32],
    /// Its length.
    pub bytes: u64,
}

/// The last fetched body of each list source, by key.
pub trait BodyCache: Send + Sync {
    /// Keeps `body` under `key`, replacing what was there.
    fn put_body(&self, key: &str, body: &[u8], meta: &BodyMeta) -> Result<(), StoreError>;
    /// The body under `key`.
    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>, StoreError>;
    /// Removes every body whose key starts with `prefix`; returns how many.
    fn delete_bodies(&self, prefix: &str) -> Result<u64, StoreError>;
    /// Every key.
    fn body_keys(&self) -> Result<Vec<String>, StoreError>;
}

/// Bodies in memory: tests, and `serve` until the store keeps them.
#[derive(Debug, Default)]
pub struct MemoryBodies(Mutex<BTreeMap<String, (Vec<u8>, BodyMeta)>>);

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
