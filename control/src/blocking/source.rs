//! One list source as the manager follows it: its last good body and validators, when it was
//! last tried and fetched, and why it last failed; and the fetcher seam (the HTTP client and
//! file reads of [`super::fetch`], a fake in tests).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kudurru_core::policy::ListSource;
use kudurru_storage::Timestamp;
use sha2::{Digest as _, Sha256};

use super::fetch::{Backoff, FetchError, FetchLimits, Fetched, Fetcher, Validators};

/// A boxed future the manager can spawn.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A failed fetch or read, as the manager keeps it: the fetcher's message and whether trying
/// again may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// What went wrong (the fetcher's `Display`).
    pub message: String,
    /// Whether a retry may succeed (backoff) or only a change will (the interval).
    pub retryable: bool,
}

impl From<FetchError> for SourceError {
    fn from(e: FetchError) -> Self {
        Self {
            retryable: e.is_retryable(),
            message: e.to_string(),
        }
    }
}

/// Where bodies come from.
pub trait ListFetcher: Send + Sync + 'static {
    /// A conditional GET of `url`.
    fn fetch_url<'a>(
        &'a self,
        url: &'a str,
        previous: &'a Validators,
        limits: FetchLimits,
    ) -> BoxFuture<'a, Result<Fetched, SourceError>>;
    /// Reads `path` inside `allowed_dir`.
    fn read_file<'a>(
        &'a self,
        path: &'a Path,
        allowed_dir: &'a Path,
        limits: FetchLimits,
    ) -> BoxFuture<'a, Result<Bytes, SourceError>>;
}

/// The real fetcher.
pub struct HttpFetcher(pub Fetcher);

impl ListFetcher for HttpFetcher {
    fn fetch_url<'a>(
        &'a self,
        url: &'a str,
        previous: &'a Validators,
        limits: FetchLimits,
    ) -> BoxFuture<'a, Result<Fetched, SourceError>> {
        Box::pin(async move {
            self.0
                .fetch_url(url, previous, &limits)
                .await
                .map_err(SourceError::from)
        })
    }

    fn read_file<'a>(
        &'a self,
        path: &'a Path,
        allowed_dir: &'a Path,
        limits: FetchLimits,
    ) -> BoxFuture<'a, Result<Bytes, SourceError>> {
        Box::pin(async move {
            super::fetch::read_file(path, allowed_dir, &limits)
                .await
                .map_err(SourceError::from)
        })
    }
}

/// Shared so fetch tasks can hold it.
pub type SharedFetcher = Arc<dyn ListFetcher>;

/// The body cache key of `list`'s `source`: `blocklist/{list}/{hash of the source}`, so a
/// source keeps its body when the list's other sources move around it.
pub fn body_key(list: &str, source: &ListSource) -> String {
    let mut hash = Sha256::new();
    match source {
        ListSource::Url(url) => hash.update(format!("url\0{url}")),
        ListSource::File(path) => hash.update(format!("file\0{}", path.display())),
        ListSource::Inline(_) => hash.update("inline"),
    }
    let digest = hash.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}{hex}", body_prefix(list))
}

/// The prefix of every body key of `list`.
pub fn body_prefix(list: &str) -> String {
    format!("blocklist/{list}/")
}

/// How a source is shown in status (`url`, `file` or `inline`).
pub fn describe(source: &ListSource) -> String {
    match source {
        ListSource::Url(url) => url.clone(),
        ListSource::File(path) => format!("file:{}", path.display()),
        ListSource::Inline(lines) => format!("inline ({} lines)", lines.len()),
    }
}

/// What the manager knows of one source.
#[derive(Debug)]
pub struct SourceState {
    /// The source.
    pub source: ListSource,
    /// Its body cache key.
    pub key: String,
    /// The last good body while it is needed in memory: until it is compiled and kept in the
    /// body cache (then [`Self::stored`] says where it is). Inline sources keep theirs.
    pub body: Option<Bytes>,
    /// The last good body is in the body cache under [`Self::key`].
    pub stored: bool,
    /// Bytes of the last good body.
    pub bytes: Option<u64>,
    /// Validators of `body` (URL sources).
    pub validators: Validators,
    /// SHA-256 of `body`.
    pub sha256: Option<[u8; 32]>,
    /// When it was last tried.
    pub last_attempt: Option<Timestamp>,
    /// When it last brought a body or a 304.
    pub last_success: Option<Timestamp>,
    /// The same on the monotonic clock, for the schedule.
    pub last_success_at: Option<Instant>,
    /// Why the last try failed (`None` after a success).
    pub error: Option<SourceError>,
    /// When the next fetch is due.
    pub backoff: Backoff,
    /// A fetch or read is running.
    pub in_flight: bool,
    /// Tried at least once since the list (or this source) appeared.
    pub tried: bool,
}

impl SourceState {
    /// A source not fetched yet; inline sources hold their body at once.
    pub fn new(list: &str, source: ListSource, interval: Duration) -> Self {
        let key = body_key(list, &source);
        let mut state = Self {
            body: None,
            stored: false,
            bytes: None,
            validators: Validators::default(),
            sha256: None,
            last_attempt: None,
            last_success: None,
            last_success_at: None,
            error: None,
            backoff: Backoff::new(interval),
            in_flight: false,
            tried: false,
            source,
            key,
        };
        if let ListSource::Inline(lines) = &state.source {
            let mut body = lines.join("\n");
            body.push('\n');
            state.set_body(Bytes::from(body));
            state.tried = true;
        }
        state
    }

    /// Keeps `body` as the last good one; returns whether it differs from the one kept before
    /// (an unchanged body is not kept in memory again when the cache has it).
    pub fn set_body(&mut self, body: Bytes) -> bool {
        let sha256: [u8; 32] = Sha256::digest(&body).into();
        let changed = self.sha256 != Some(sha256);
        if !changed && self.stored {
            return false;
        }
        self.sha256 = Some(sha256);
        self.bytes = Some(body.len() as u64);
        self.body = Some(body);
        if changed {
            self.stored = false;
        }
        changed
    }

    /// Whether a last good body exists, in memory or in the body cache.
    pub fn has_body(&self) -> bool {
        self.body.is_some() || self.stored
    }

    /// Drops the in-memory copy of a body the cache keeps (after its compile): a list's bodies
    /// do not stay resident beside its compiled entries.
    pub fn release_body(&mut self) {
        if self.stored {
            self.body = None;
        }
    }

    /// A URL source's next due fetch; `None` for other sources or while one runs.
    pub fn due(&self, now: Instant) -> Option<Instant> {
        match self.source {
            ListSource::Url(_) if !self.in_flight => {
                Some(self.backoff.next_due(self.last_success_at, now))
            }
            _ => None,
        }
    }

    /// A file source's path.
    pub fn file(&self) -> Option<&PathBuf> {
        match &self.source {
            ListSource::File(path) => Some(path),
            _ => None,
        }
    }
}
