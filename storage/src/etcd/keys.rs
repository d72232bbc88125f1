//! The etcd driver's keys and its two small records (the head and the anchor).
//!
//! ```text
//!  /kudurru/<prefix>/meta/head              [1][store revision u64 BE][chain head: 48 bytes]
//!  /kudurru/<prefix>/meta/anchor            [chain anchor: 48 bytes] (the last pruned record)
//!  /kudurru/<prefix>/objects/<kind>/<name>  [1][object JSON] (the redb driver's value)
//!  /kudurru/<prefix>/audit/<seq, 20 digits> [1][hash][body JSON] (the redb driver's value)
//!  /kudurru/<prefix>/bodymeta/<key>         body metadata (the redb driver's header, no body)
//!  /kudurru/<prefix>/bodies/<key>\xff<sha256 hex>/<n, 6 digits>   body chunk n (1 MiB)
//! ```
//!
//! A body key is UTF-8, so the byte 0xff never occurs in it: the chunks of one key are exactly
//! the keys under `bodies/<key>\xff`, and `bodies/<prefix>` covers exactly the chunks of the
//! bodies whose key starts with `<prefix>`. The driver's watch covers `bodymeta/` to
//! `objects/` (body metadata, the head, objects), never the audit records nor the chunks.

use crate::audit::ChainPoint;
use crate::error::{Result, StorageError};

/// The value format version of the head record.
const HEAD_VERSION: u8 = 1;

/// The keys of one store (one `cluster.name`).
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    root: Vec<u8>,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            root: format!("/kudurru/{prefix}/").into_bytes(),
        }
    }

    /// Every key of the store.
    pub(crate) fn root(&self) -> &[u8] {
        &self.root
    }

    fn join(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut key = self.root.clone();
        for part in parts {
            key.extend_from_slice(part);
        }
        key
    }

    pub(crate) fn head(&self) -> Vec<u8> {
        self.join(&[b"meta/head"])
    }

    pub(crate) fn anchor(&self) -> Vec<u8> {
        self.join(&[b"meta/anchor"])
    }

    pub(crate) fn objects(&self) -> Vec<u8> {
        self.join(&[b"objects/"])
    }

    pub(crate) fn kind(&self, kind: &str) -> Vec<u8> {
        self.join(&[b"objects/", kind.as_bytes(), b"/"])
    }

    pub(crate) fn object(&self, kind: &str, name: &str) -> Vec<u8> {
        self.join(&[b"objects/", kind.as_bytes(), b"/", name.as_bytes()])
    }

    pub(crate) fn audit_prefix(&self) -> Vec<u8> {
        self.join(&[b"audit/"])
    }

    pub(crate) fn audit(&self, seq: u64) -> Vec<u8> {
        self.join(&[b"audit/", format!("{seq:020}").as_bytes()])
    }

    /// The chunks of every body whose key starts with `prefix`.
    pub(crate) fn bodies(&self, prefix: &str) -> Vec<u8> {
        self.join(&[b"bodies/", prefix.as_bytes()])
    }

    /// The metadata of every body whose key starts with `prefix`.
    pub(crate) fn body_metas(&self, prefix: &str) -> Vec<u8> {
        self.join(&[b"bodymeta/", prefix.as_bytes()])
    }

    pub(crate) fn body_meta(&self, key: &str) -> Vec<u8> {
        self.body_metas(key)
    }

    /// The prefix of every chunk of `key`, of any version.
    pub(crate) fn body_chunks(&self, key: &str) -> Vec<u8> {
        self.join(&[b"bodies/", key.as_bytes(), b"\xff"])
    }

    /// The prefix of the chunks of `key`'s version with SHA-256 `sha_hex`.
    pub(crate) fn body_version(&self, key: &str, sha_hex: &str) -> Vec<u8> {
        self.join(&[
            b"bodies/",
            key.as_bytes(),
            b"\xff",
            sha_hex.as_bytes(),
            b"/",
        ])
    }

    pub(crate) fn body_chunk(&self, key: &str, sha_hex: &str, n: u64) -> Vec<u8> {
        let mut chunk = self.body_version(key, sha_hex);
        chunk.extend_from_slice(format!("{n:06}").as_bytes());
        chunk
    }

    /// The range the driver watches: `[bodymeta/, objects0)`.
    pub(crate) fn watched(&self) -> (Vec<u8>, Vec<u8>) {
        (self.join(&[b"bodymeta/"]), prefix_end(&self.objects()))
    }

    /// What `key` (a full etcd key) is, if it is one of this store's.
    pub(crate) fn classify<'k>(&self, key: &'k [u8]) -> KeyClass<'k> {
        let Some(rest) = key.strip_prefix(self.root.as_slice()) else {
            return KeyClass::Other;
        };
        if rest == b"meta/head" {
            return KeyClass::Head;
        }
        if let Some(object) = rest.strip_prefix(b"objects/") {
            return KeyClass::Object(object);
        }
        if let Some(key) = rest.strip_prefix(b"bodymeta/")
            && let Ok(key) = std::str::from_utf8(key)
        {
            return KeyClass::BodyMeta(key);
        }
        KeyClass::Other
    }

    /// The body key of a metadata key under [`Keys::bodies`], if it is one.
    pub(crate) fn body_key_of<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        match self.classify(key) {
            KeyClass::BodyMeta(key) => Some(key),
            _ => None,
        }
    }

    /// The object key (`kind/name`) of a full key under [`Keys::objects`], for error messages.
    pub(crate) fn object_name(key: &[u8]) -> String {
        String::from_utf8_lossy(key).into_owned()
    }
}

/// What a key of the store holds.
pub(crate) enum KeyClass<'k> {
    Head,
    /// `kind/name`, as stored (not yet checked).
    Object(&'k [u8]),
    BodyMeta(&'k str),
    Other,
}

/// The end of the range of every key that starts with `prefix` (etcd's `range_end`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (never for the store's keys, which start with '/'): to the end of the keyspace.
    vec![0]
}

/// The store's revision and the audit chain's last record, kept in one key so that every write
/// compares one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) revision: u64,
    pub(crate) point: ChainPoint,
}

impl Head {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(57);
        value.push(HEAD_VERSION);
        value.extend_from_slice(&self.revision.to_be_bytes());
        value.extend_from_slice(&self.point.encode());
        value
    }

    /// Decodes a head value read from etcd (peer input: checked, never trusted).
    pub(crate) fn decode(value: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| StorageError::Corrupt {
            table: "etcd",
            key: "meta/head".into(),
            reason,
        };
        let (version, rest) = value
            .split_first()
            .ok_or_else(|| corrupt("empty value".into()))?;
        if *version != HEAD_VERSION {
            return Err(StorageError::UnsupportedFormat {
                found: *version,
                supported: HEAD_VERSION,
            }
            .into());
        }
        let (revision, point) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt(format!("{} bytes, expected 57", value.len())))?;
        Ok(Self {
            revision: u64::from_be_bytes(*revision),
            point: ChainPoint::decode(point, "meta/head")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip_and_damaged_heads_are_errors() {
        let head = Head {
            revision: 42,
            point: ChainPoint {
                seq: 7,
                hash: [9; 32],
                time_millis: 1_700_000_000_000,
            },
        };
        assert_eq!(Head::decode(&head.encode()).unwrap(), head);
        let value = head.encode();
        for cut in 0..value.len() {
            assert!(Head::decode(&value[..cut]).is_err(), "{cut}");
        }
        let mut newer = value;
        newer[0] = 2;
        assert!(Head::decode(&newer).is_err());
    }

    #[test]
    fn keys_classify_back() {
        let keys = Keys::new("edge");
        assert!(matches!(keys.classify(&keys.head()), KeyClass::Head));
        assert!(matches!(
            keys.classify(&keys.object("Widget", "a")),
            KeyClass::Object(b"Widget/a")
        ));
        assert_eq!(
            keys.body_key_of(&keys.body_meta("BlockList/a/0")),
            Some("BlockList/a/0")
        );
        assert_eq!(
            keys.body_key_of(&keys.body_chunk("BlockList/a/0", "ab", 1)),
            None
        );
        assert!(matches!(
            keys.classify(b"/kudurru/other/meta/head"),
            KeyClass::Other
        ));
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
    }
}
