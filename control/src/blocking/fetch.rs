//! STUB(issue 34, blocking-control): a stand-in with the signatures of the fetcher another
//! engineer is writing on branch `blocking-fetch`; it is replaced by that file at merge. Bodies
//! here are the least that lets the list manager run and be tested: `file` reads work, URL
//! fetches always fail (retryably), and the backoff is a plain interval with a doubling retry.

use std::path::Path;
use std::time::{Duration, Instant};

/// Limits of one fetch or file read.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    /// Deadline, connect to last byte.
    pub timeout: Duration,
    /// Most bytes of the body.
    pub max_bytes: u64,
}

/// What a conditional GET sends back (`If-None-Match`, `If-Modified-Since`).
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Validators {
    /// The last `ETag`.
    pub etag: Option<String>,
    /// The last `Last-Modified`.
    pub last_modified: Option<String>,
}

/// A fetch's result.
#[derive(Debug)]
pub enum Fetched {
    /// A new body.
    Body {
        /// The body, decompressed.
        body: bytes::Bytes,
        /// Its validators.
        validators: Validators,
    },
    /// 304: the body kept is current.
    NotModified,
}

/// Why a fetch or read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The stub does not fetch URLs.
    #[error("URL fetching is not built yet (stub)")]
    NotBuilt,
    /// The file could not be read.
    #[error("{0}")]
    File(String),
}

impl FetchError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::NotBuilt)
    }
}

/// The HTTP client of list fetches.
#[derive(Debug)]
pub struct Fetcher;

impl Fetcher {
    /// A client sending `user_agent`.
    pub fn new(user_agent: &str) -> Result<Self, FetchError> {
        let _ = user_agent;
        Ok(Self)
    }

    /// A conditional GET of `url`.
    pub async fn fetch_url(
        &self,
        url: &str,
        previous: &Validators,
        limits: &FetchLimits,
    ) -> Result<Fetched, FetchError> {
        let _ = (url, previous, limits);
        Err(FetchError::NotBuilt)
    }
}

/// Reads `path`, which must be inside `allowed_dir` after symlinks are resolved.
pub async fn read_file(
    path: &Path,
    allowed_dir: &Path,
    limits: &FetchLimits,
) -> Result<bytes::Bytes, FetchError> {
    let (path, allowed_dir, max) = (path.to_owned(), allowed_dir.to_owned(), limits.max_bytes);
    tokio::task::spawn_blocking(move || {
        let file = |e: std::io::Error| FetchError::File(format!("{}: {e}", path.display()));
        let real = path.canonicalize().map_err(file)?;
        let dir = allowed_dir
            .canonicalize()
            .map_err(|e| FetchError::File(format!("{}: {e}", allowed_dir.display())))?;
        if !real.starts_with(&dir) {
            return Err(FetchError::File(format!(
                "{} is outside blocking.fileSourceDir ({})",
                path.display(),
                allowed_dir.display()
            )));
        }
        let body = std::fs::read(&real).map_err(file)?;
        if body.len() as u64 > max {
            return Err(FetchError::File(format!(
                "{} is larger than {max} bytes",
                path.display()
            )));
        }
        Ok(bytes::Bytes::from(body))
    })
    .await
    .map_err(|e| FetchError::File(e.to_string()))?
}

/// When a source is fetched next.
#[derive(Debug)]
pub struct Backoff {
    interval: Duration,
    failures: u32,
    retry_at: Option<Instant>,
    forced: bool,
}

impl Backoff {
    /// A schedule of one fetch per `refresh_interval`.
    pub fn new(refresh_interval: Duration) -> Self {
        Self {
            interval: refresh_interval,
            failures: 0,
            retry_at: None,
            forced: false,
        }
    }

    /// A fetch succeeded.
    pub fn on_success(&mut self) {
        self.failures = 0;
        self.retry_at = None;
        self.forced = false;
    }

    /// A fetch failed at `now`; returns when to try again.
    pub fn on_failure(&mut self, retryable: bool, now: Instant) -> Instant {
        self.failures = self.failures.saturating_add(1);
        self.forced = false;
        let wait = if retryable {
            Duration::from_secs(30)
                .saturating_mul(1 << self.failures.min(10))
                .min(self.interval)
        } else {
            self.interval
        };
        let at = now + wait;
        self.retry_at = Some(at);
        at
    }

    /// When the next fetch is due.
    pub fn next_due(&self, last_success: Option<Instant>, now: Instant) -> Instant {
        if self.forced {
            return now;
        }
        if let Some(at) = self.retry_at {
            return at;
        }
        last_success.map_or(now, |at| at + self.interval)
    }

    /// The next fetch is due now, whatever the interval or cooldown.
    pub fn force(&mut self) {
        self.forced = true;
    }
}
