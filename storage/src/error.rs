//! The store's one error type: what went wrong and where, as values a caller can match.

use std::path::PathBuf;

/// Every error an object store, its watch or its audit log returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The object does not exist.
    #[error("{kind} \"{name}\" not found")]
    NotFound {
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// A create named an object that already exists.
    #[error("{kind} \"{name}\" already exists")]
    AlreadyExists {
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// The caller's resourceVersion is not the object's current one: read it again and retry.
    #[error(
        "conflict on {kind} \"{name}\": resourceVersion {expected} is not the current {current}"
    )]
    Conflict {
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The resourceVersion the caller sent.
        expected: u64,
        /// The object's current resourceVersion.
        current: u64,
    },
    /// The resourceVersion is older than the retained history: list again, then watch.
    #[error(
        "resourceVersion {requested} is gone (history starts after {oldest}); list again and watch from its resourceVersion"
    )]
    Gone {
        /// The resourceVersion the caller asked for.
        requested: u64,
        /// The oldest resourceVersion a watch or a continue token may still start from.
        oldest: u64,
    },
    /// A watch fell behind its buffer and was closed; watch again from the last event seen.
    #[error("watch on {kind} fell behind; watch again from resourceVersion {last_seen}")]
    Lagged {
        /// The watched kind.
        kind: String,
        /// The resourceVersion of the last event the watch delivered.
        last_seen: u64,
    },
    /// No kind of that name is registered.
    #[error("unknown kind \"{kind}\"")]
    UnknownKind {
        /// The kind the caller named.
        kind: String,
    },
    /// The input is invalid; `field` is its path (`metadata.name`, `spec.size`).
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The path of the invalid field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The store's backend (etcd) cannot be reached or did not answer in time: nothing was
    /// changed (or, for a write, its outcome is unknown until the backend answers again). The
    /// API answers 503 with the reason.
    #[error("the object store is unavailable: {reason}")]
    Unavailable {
        /// What failed, with the endpoints and the timeout.
        reason: String,
    },
    /// A leader-only write carried the leader's fence and the fence no longer holds: this node
    /// lost its leadership, and the write changed nothing. The API answers 503.
    #[error("fenced: {reason}")]
    Fenced {
        /// Which fence failed.
        reason: String,
    },
    /// The storage engine or its file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl StoreError {
    /// An [`StoreError::Invalid`] for `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn not_found(kind: &str, name: &str) -> Self {
        Self::NotFound {
            kind: kind.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// A failure below the store's semantics: the engine, the file system, or a corrupt record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// redb returned an error.
    #[error("redb: {0}")]
    Engine(#[from] redb::Error),
    /// A file or directory operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A stored record does not decode: the file was damaged or written by something else.
    #[error("corrupt record in table {table} at key {key}: {reason}")]
    Corrupt {
        /// The redb table.
        table: &'static str,
        /// The record's key, rendered.
        key: String,
        /// Why it does not decode.
        reason: String,
    },
    /// A stored body's SHA-256 is not the one recorded with it: the record was damaged.
    #[error(
        "checksum mismatch in table {table} at key {key}: stored sha256 {stored}, computed {computed}"
    )]
    ChecksumMismatch {
        /// The redb table.
        table: &'static str,
        /// The record's key.
        key: String,
        /// The SHA-256 recorded with the body, hex.
        stored: String,
        /// The SHA-256 of the body as read, hex.
        computed: String,
    },
    /// The file's format version is newer than this build reads.
    #[error("unsupported format version {found} (this build reads up to {supported})")]
    UnsupportedFormat {
        /// The version the file records.
        found: u8,
        /// The newest version this build reads.
        supported: u8,
    },
    /// The audit log's hash chain does not verify at record `seq`.
    #[error("audit chain broken at record {seq}: {reason}")]
    ChainBroken {
        /// The record where verification stopped.
        seq: u64,
        /// What did not match.
        reason: String,
    },
    /// etcd refused a request (not a connection failure: a request too large, a quota).
    #[error("etcd: {reason}")]
    Etcd {
        /// etcd's answer.
        reason: String,
    },
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// An argument is out of its range (a query-log stats step of zero, a range of too many
    /// buckets).
    #[error("invalid {argument}: {reason}")]
    InvalidArgument {
        /// The argument's name.
        argument: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

macro_rules! engine_error {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(error: $t) -> Self {
                Self::Engine(error.into())
            }
        }
        impl From<$t> for StoreError {
            fn from(error: $t) -> Self {
                Self::Storage(StorageError::Engine(error.into()))
            }
        }
    )*};
}
engine_error!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

impl From<redb::Error> for StoreError {
    fn from(error: redb::Error) -> Self {
        Self::Storage(StorageError::Engine(error))
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
