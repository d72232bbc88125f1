//! The list-body cache: the last fetched body of each list source, so a restart without
//! network still compiles the lists it had (protection never switches off).
//!
//! ```text
//!  fetch (control thread) ──put_body──▶ BodyCache ──get_body──▶ compile after a restart
//!                                        key "BlockList/ads/0"   (kind/name/source index)
//! ```
//!
//! A body is not an object: it has no revision, no watch event and no audit record, and a
//! `put_body` replaces the previous body whole. The metadata carries the body's SHA-256, which
//! the store checks when the body is written and again when it is read, so a damaged record is
//! a typed error instead of a silently different block list.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::{Result, StorageError, StoreError};
use crate::time::Timestamp;

/// The longest body key, in bytes.
pub const MAX_BODY_KEY_BYTES: usize = 512;

/// The value format version of a stored body (its first byte).
const BODY_VERSION: u8 = 1;

/// What is known about a stored body: the validators for the next conditional GET, when it was
/// fetched, and its checksum and length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyMeta {
    /// The `ETag` the server sent with the body.
    pub etag: Option<String>,
    /// The `Last-Modified` the server sent with the body.
    pub last_modified: Option<String>,
    /// When the body was fetched.
    pub fetched: Timestamp,
    /// SHA-256 of the body.
    pub sha256: [u8; 32],
    /// The body's length in bytes.
    pub bytes: u64,
}

impl BodyMeta {
    /// The metadata of `body` (its checksum and length) with the given validators and time.
    pub fn for_body(
        body: &[u8],
        etag: Option<String>,
        last_modified: Option<String>,
        fetched: Timestamp,
    ) -> Self {
        Self {
            etag,
            last_modified,
            fetched,
            sha256: Sha256::digest(body).into(),
            bytes: body.len() as u64,
        }
    }
}

/// The last fetched body of each list source, by key (`"{kind}/{name}/{source index}"`).
///
/// Calls are synchronous and may block on the disk: the control thread runs them on its
/// blocking pool. A write is durable when it returns.
pub trait BodyCache: Send + Sync {
    /// Stores `body` under `key`, replacing what was there. `meta.sha256` and `meta.bytes` must
    /// be `body`'s ([`BodyMeta::for_body`]), and `key` 1 to [`MAX_BODY_KEY_BYTES`] bytes; else
    /// [`StoreError::Invalid`] and nothing changes.
    fn put_body(&self, key: &str, body: &[u8], meta: &BodyMeta) -> Result<()>;

    /// The body under `key` and its metadata, checked against the stored SHA-256
    /// ([`StorageError::ChecksumMismatch`] if it differs).
    fn get_body(&self, key: &str) -> Result<Option<(Vec<u8>, BodyMeta)>>;

    /// Removes every body whose key starts with `prefix` (`"BlockList/ads/"` for all sources
    /// of a deleted list; `""` for all) and returns how many were removed.
    fn delete_bodies(&self, prefix: &str) -> Result<u64>;

    /// Every stored key, in byte order.
    fn body_keys(&self) -> Result<Vec<String>>;
}

/// Refuses an empty key or one longer than [`MAX_BODY_KEY_BYTES`].
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(StoreError::invalid("key", "must not be empty"));
    }
    if key.len() > MAX_BODY_KEY_BYTES {
        return Err(StoreError::invalid(
            "key",
            format!(
                "is {} bytes; at most {MAX_BODY_KEY_BYTES} are allowed",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses metadata that does not describe `body`.
pub(crate) fn check_put(key: &str, body: &[u8], meta: &BodyMeta) -> Result<()> {
    check_key(key)?;
    if meta.bytes != body.len() as u64 {
        return Err(StoreError::invalid(
            "meta.bytes",
            format!("is {} but the body has {} bytes", meta.bytes, body.len()),
        ));
    }
    if <[u8; 32]>::from(Sha256::digest(body)) != meta.sha256 {
        return Err(StoreError::invalid(
            "meta.sha256",
            "is not the SHA-256 of the body",
        ));
    }
    Ok(())
}

/// The metadata as stored: JSON between the version byte and the body.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_modified: Option<String>,
    fetched: Timestamp,
    sha256: String,
    bytes: u64,
}

/// A stored body's header: the version byte, the metadata's length (u32 big-endian) and the
/// metadata as JSON. The body follows it.
pub(crate) fn encode_header(meta: &BodyMeta) -> Vec<u8> {
    let stored = StoredMeta {
        etag: meta.etag.clone(),
        last_modified: meta.last_modified.clone(),
        fetched: meta.fetched,
        sha256: hex(&meta.sha256),
        bytes: meta.bytes,
    };
    // A struct of strings and integers always serializes.
    let json = serde_json::to_vec(&stored).expect("body metadata serializes as JSON");
    let length = u32::try_from(json.len()).expect("body metadata is far below 4 GiB");
    let mut header = Vec::with_capacity(5 + json.len());
    header.push(BODY_VERSION);
    header.extend_from_slice(&length.to_be_bytes());
    header.extend_from_slice(&json);
    header
}

/// Decodes a stored body value and checks its length and checksum.
pub(crate) fn decode(table: &'static str, key: &str, value: &[u8]) -> Result<(Vec<u8>, BodyMeta)> {
    let (meta, body) = decode_header(table, key, value)?;
    check_body(table, key, &meta, body)?;
    Ok((body.to_vec(), meta))
}

/// Checks `body` against the length and checksum in `meta`.
pub(crate) fn check_body(
    table: &'static str,
    key: &str,
    meta: &BodyMeta,
    body: &[u8],
) -> Result<()> {
    if meta.bytes != body.len() as u64 {
        return Err(StorageError::Corrupt {
            table,
            key: key.to_owned(),
            reason: format!(
                "metadata says {} bytes but the body has {}",
                meta.bytes,
                body.len()
            ),
        }
        .into());
    }
    let computed: [u8; 32] = Sha256::digest(body).into();
    if computed != meta.sha256 {
        return Err(StorageError::ChecksumMismatch {
            table,
            key: key.to_owned(),
            stored: hex(&meta.sha256),
            computed: hex(&computed),
        }
        .into());
    }
    Ok(())
}

/// Decodes a stored header: the metadata, and the bytes after the header (the body, unchecked).
pub(crate) fn decode_header<'v>(
    table: &'static str,
    key: &str,
    value: &'v [u8],
) -> Result<(BodyMeta, &'v [u8])> {
    let corrupt = |reason: String| -> StoreError {
        StorageError::Corrupt {
            table,
            key: key.to_owned(),
            reason,
        }
        .into()
    };
    let (version, rest) = value
        .split_first()
        .ok_or_else(|| corrupt("empty value".into()))?;
    if *version != BODY_VERSION {
        return Err(StorageError::UnsupportedFormat {
            found: *version,
            supported: BODY_VERSION,
        }
        .into());
    }
    let (length, rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("shorter than its header".into()))?;
    let length = u32::from_be_bytes(*length) as usize;
    if rest.len() < length {
        return Err(corrupt(format!(
            "metadata length {length} exceeds the value's {} remaining bytes",
            rest.len()
        )));
    }
    let (json, body) = rest.split_at(length);
    let stored: StoredMeta = serde_json::from_slice(json)
        .map_err(|error| corrupt(format!("metadata does not decode: {error}")))?;
    let sha256 =
        unhex(&stored.sha256).ok_or_else(|| corrupt("sha256 is not 64 hex digits".into()))?;
    let meta = BodyMeta {
        etag: stored.etag,
        last_modified: stored.last_modified,
        fetched: stored.fetched,
        sha256,
        bytes: stored.bytes,
    };
    Ok((meta, body))
}

/// The SHA-256 as 64 lowercase hex digits.
pub(crate) fn sha256_hex(sha256: &[u8; 32]) -> String {
    hex(sha256)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        // ASCII checked above, so each pair is a str.
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &[u8]) -> Vec<u8> {
        let meta = BodyMeta::for_body(
            body,
            Some("\"v1\"".into()),
            None,
            Timestamp::from_unix_millis(1_700_000_000_250),
        );
        let mut value = encode_header(&meta);
        value.extend_from_slice(body);
        value
    }

    #[test]
    fn a_stored_body_decodes_to_itself() {
        let value = stored(b"0.0.0.0 ads.example\n");
        let (body, meta) = decode("bodies", "BlockList/a/0", &value).unwrap();
        assert_eq!(body, b"0.0.0.0 ads.example\n");
        assert_eq!(meta.etag.as_deref(), Some("\"v1\""));
        assert_eq!(meta.fetched.unix_millis(), 1_700_000_000_250);
        assert_eq!(meta.bytes, 20);
    }

    #[test]
    fn damaged_values_are_typed_errors_not_panics() {
        let value = stored(b"0.0.0.0 ads.example\n");
        let mut flipped = value.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            decode("bodies", "k", &flipped),
            Err(StoreError::Storage(StorageError::ChecksumMismatch { .. }))
        ));
        for cut in 0..value.len() - 1 {
            let error = decode("bodies", "k", &value[..cut]).unwrap_err();
            assert!(matches!(error, StoreError::Storage(_)), "{cut}: {error}");
        }
        let mut huge_length = value.clone();
        huge_length[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode("bodies", "k", &huge_length).is_err());
        let mut newer = value;
        newer[0] = 2;
        assert!(matches!(
            decode("bodies", "k", &newer),
            Err(StoreError::Storage(StorageError::UnsupportedFormat {
                found: 2,
                ..
            }))
        ));
    }

    #[test]
    fn hex_round_trips() {
        let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(unhex(&hex(&bytes)), Some(bytes));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(&"é".repeat(32)), None);
    }
}
