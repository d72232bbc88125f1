//! The list-body cache in etcd: a body in 1 MiB chunks (etcd refuses requests over 1.5 MiB by
//! default), its metadata in one key that names the version.
//!
//! ```text
//!  put_body: chunks of version <sha256> (one Txn each, fenced) ─▶ meta (fenced) ─▶ delete the
//!            other versions' chunks, only if the meta is still ours
//!  get_body: meta at revision R ─▶ each chunk at R ─▶ length and SHA-256 checked
//! ```
//!
//! A reader reads every chunk at the revision it read the metadata at, so a body replaced
//! meanwhile is read whole, old or new, never mixed. A writer that dies between its chunks and
//! its metadata leaves unreferenced chunks, removed by the key's next put.

use std::collections::BTreeSet;

use etcd_client::{Compare, CompareOp, GetOptions, TxnOp};

use super::EtcdStore;
use crate::body_cache::{self, BodyCache, BodyMeta};
use crate::error::{Result, StorageError, StoreError};

/// The largest chunk: with its key and the request's framing it stays under etcd's default
/// `--max-request-bytes` (1.5 MiB).
pub const BODY_CHUNK_BYTES: usize = 1 << 20;

impl BodyCache for EtcdStore {
    fn put_body(&self, key: &str, body: &[u8], meta: &BodyMeta) -> Result<()> {
        body_cache::check_put(key, body, meta)?;
        let inner = &self.inner;
        let sha = body_cache::sha256_hex(&meta.sha256);
        for (n, chunk) in body.chunks(BODY_CHUNK_BYTES).enumerate() {
            let put = TxnOp::put(inner.keys.body_chunk(key, &sha, n as u64), chunk, None);
            inner.fenced_txn(Vec::new(), vec![put])?;
        }
        let meta_key = inner.keys.body_meta(key);
        let written = inner.fenced_txn(
            Vec::new(),
            vec![TxnOp::put(
                meta_key.clone(),
                body_cache::encode_header(meta),
                None,
            )],
        )?;
        if !written.succeeded {
            return Err(StoreError::Unavailable {
                reason: format!("the body {key:?} was not written; retry"),
            });
        }
        // The other versions' chunks: removed if the metadata is still the one just written
        // (a later put by another node cleans up after itself instead).
        let (chunks, _) = inner.get(
            inner.keys.body_chunks(key),
            GetOptions::new().with_prefix().with_keys_only(),
        )?;
        let ours = inner.keys.body_version(key, &sha);
        let stale: BTreeSet<Vec<u8>> = chunks
            .iter()
            .filter(|kv| !kv.key().starts_with(&ours))
            .filter_map(|kv| {
                let cut = kv.key().iter().rposition(|b| *b == b'/')?;
                kv.key().get(..=cut).map(<[u8]>::to_vec)
            })
            .collect();
        if !stale.is_empty() {
            let deletes = stale
                .into_iter()
                .take(100)
                .map(|version| {
                    TxnOp::delete(
                        version,
                        Some(etcd_client::DeleteOptions::new().with_prefix()),
                    )
                })
                .collect::<Vec<_>>();
            inner.txn(
                etcd_client::Txn::new()
                    .when(vec![Compare::mod_revision(
                        meta_key,
                        CompareOp::Equal,
                        written.revision,
                    )])
                    .and_then(deletes),
            )?;
        }
        Ok(())
    }

    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>> {
        body_cache::check_key(key)?;
        // A compaction (etcd-wide: another fleet's, or this one's) between reading the metadata
        // and a chunk makes the chunk's revision unreadable: read again, from the metadata.
        let mut attempts = 0;
        loop {
            match self.read_body(key) {
                Err(StoreError::Gone { .. }) if attempts < 3 => attempts += 1,
                other => return other,
            }
        }
    }

    fn delete_bodies(&self, prefix: &str) -> Result<u64> {
        let inner = &self.inner;
        let metas = inner.keys.body_metas(prefix);
        let result = inner.fenced_txn(
            Vec::new(),
            vec![
                TxnOp::get(
                    metas.clone(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
                TxnOp::delete(metas, Some(etcd_client::DeleteOptions::new().with_prefix())),
                TxnOp::delete(
                    inner.keys.bodies(prefix),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                ),
            ],
        )?;
        let removed = result.ranges.first().map_or(0, |kvs| {
            kvs.iter()
                .filter(|kv| inner.keys.body_key_of(kv.key()).is_some())
                .count()
        });
        Ok(removed as u64)
    }

    fn body_keys(&self) -> Result<Vec<String>> {
        let inner = &self.inner;
        let (kvs, _) = inner.get(
            inner.keys.body_metas(""),
            GetOptions::new().with_prefix().with_keys_only(),
        )?;
        let mut keys: Vec<String> = kvs
            .iter()
            .filter_map(|kv| inner.keys.body_key_of(kv.key()).map(str::to_owned))
            .collect();
        keys.sort();
        Ok(keys)
    }
}

impl EtcdStore {
    fn read_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>> {
        let inner = &self.inner;
        let (kvs, revision) = inner.get(inner.keys.body_meta(key), GetOptions::new())?;
        let Some(kv) = kvs.first() else {
            return Ok(None);
        };
        let corrupt = |reason: String| -> StoreError {
            StorageError::Corrupt {
                table: "bodies",
                key: key.to_owned(),
                reason,
            }
            .into()
        };
        let (meta, rest) = body_cache::decode_header("bodies", key, kv.value())?;
        if !rest.is_empty() {
            return Err(corrupt("the metadata record carries body bytes".into()));
        }
        let sha = body_cache::sha256_hex(&meta.sha256);
        let chunks = meta.bytes.div_ceil(BODY_CHUNK_BYTES as u64);
        let mut body = Vec::new();
        for n in 0..chunks {
            let (kvs, _) = inner.get(
                inner.keys.body_chunk(key, &sha, n),
                GetOptions::new().with_revision(revision),
            )?;
            let chunk = kvs
                .first()
                .ok_or_else(|| corrupt(format!("chunk {n} of {chunks} is missing")))?;
            if chunk.value().len() > BODY_CHUNK_BYTES {
                return Err(corrupt(format!("chunk {n} is larger than a chunk")));
            }
            body.extend_from_slice(chunk.value());
        }
        body_cache::check_body("bodies", key, &meta, &body)?;
        Ok(Some((body, meta)))
    }
}
