//! Fetching list bodies on the control thread: a conditional GET over http or https, a file
//! read on the blocking pool, and the retry and cooldown schedule of a failing source.
//!
//! ```text
//!  list manager ──fetch_url(url, validators, limits)──▶ reqwest (system proxy, rustls+ring,
//!       │                                                 redirects ≤ 5, Content-Encoding gzip)
//!       │                                                    │ chunks
//!       │                                             BodySink: .gz magic → gunzip, ≤ max_bytes
//!       ├──read_file(path, allowed_dir, limits)──▶ spawn_blocking: canonicalise, open, BodySink
//!       └──Backoff: on_success / on_failure(retryable, now) / next_due / force
//! ```
//!
//! Nothing here parses a list: a body of garbage is a body, and parsing is the compiler's job.
//! What this module promises is that a source can cost at most `max_bytes` of memory (counted
//! after decompression, while streaming) and `timeout` of time, and that every failure is a
//! specific [`FetchError`] saying whether trying again soon may help.

use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url, redirect};

/// Redirects followed before a fetch fails with [`FetchError::TooManyRedirects`].
pub const MAX_REDIRECTS: usize = 5;

/// How long and how large a fetch may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchLimits {
    /// The whole fetch: connecting, redirects, the TLS handshakes and the body.
    pub timeout: Duration,
    /// The largest body, in bytes after decompression (and also on the wire).
    pub max_bytes: u64,
}

/// The validators of a fetched body, sent back on the next fetch to make it conditional.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Validators {
    /// The `ETag` response header, sent back as `If-None-Match`.
    pub etag: Option<String>,
    /// The `Last-Modified` response header, sent back as `If-Modified-Since`.
    pub last_modified: Option<String>,
}

impl Validators {
    /// True when there is nothing to make a request conditional with.
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.last_modified.is_none()
    }
}

/// The outcome of a successful fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// A new body (decompressed), with the validators for the next fetch.
    Body {
        /// The body, at most `max_bytes` long and never empty.
        body: Bytes,
        /// The response's `ETag` and `Last-Modified`.
        validators: Validators,
    },
    /// 304: the body the caller already has is current.
    NotModified,
}

/// Why a fetch or a file read failed. `location` is the URL or the path.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum FetchError {
    /// The URL does not parse.
    #[error("{url:?} is not a URL: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The URL's scheme is not `http` or `https`.
    #[error("{url}: scheme {scheme:?} is not supported (use http or https)")]
    UnsupportedScheme {
        /// The URL.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// The fetch did not finish within `limits.timeout`.
    #[error("{location}: no complete answer within {timeout:?}")]
    Timeout {
        /// The URL or path.
        location: String,
        /// The limit.
        timeout: Duration,
    },
    /// The server answered with a status other than 2xx (or a 304 to a request that was not
    /// conditional).
    #[error("{url}: HTTP status {code}")]
    Status {
        /// The URL (after redirects).
        url: String,
        /// The status code.
        code: u16,
    },
    /// The body is larger than `limits.max_bytes` (after decompression, or on the wire).
    #[error("{location}: the body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The URL or path.
        location: String,
        /// The limit.
        limit: u64,
    },
    /// The server could not be reached (name resolution, refused, unreachable, proxy).
    #[error("{url}: cannot connect: {message}")]
    Connect {
        /// The URL.
        url: String,
        /// The underlying error.
        message: String,
    },
    /// The TLS handshake failed (certificate, protocol, or not TLS at all).
    #[error("{url}: TLS handshake failed: {message}")]
    Tls {
        /// The URL.
        url: String,
        /// rustls' error.
        message: String,
    },
    /// The exchange broke after connecting: a malformed response, or the connection closed
    /// before the body was complete.
    #[error("{url}: the response broke off: {message}")]
    Transfer {
        /// The URL.
        url: String,
        /// The underlying error.
        message: String,
    },
    /// The body claims gzip (`Content-Encoding: gzip` or the gzip magic bytes) and does not
    /// decompress.
    #[error("{location}: bad gzip data: {message}")]
    BadGzip {
        /// The URL or path.
        location: String,
        /// The decompressor's error.
        message: String,
    },
    /// A redirect led back to a URL already visited.
    #[error("{url}: redirect loop back to {target}")]
    RedirectLoop {
        /// The URL first requested.
        url: String,
        /// The URL visited twice.
        target: String,
    },
    /// More than [`MAX_REDIRECTS`] redirects.
    #[error("{url}: more than {limit} redirects")]
    TooManyRedirects {
        /// The URL first requested.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// A redirect from https to http (or to a scheme other than http and https).
    #[error("{url}: refused redirect from {from} to {to}")]
    RedirectRefused {
        /// The URL first requested.
        url: String,
        /// The URL that redirected.
        from: String,
        /// Where it redirected to.
        to: String,
    },
    /// The file does not exist.
    #[error("{}: no such file", path.display())]
    FileNotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// The file exists but cannot be read (permissions, a directory, a device or a FIFO).
    #[error("{}: cannot read: {message}", path.display())]
    FileUnreadable {
        /// The path as given.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The file is outside the directory list files may be read from (after resolving
    /// symbolic links and `..`).
    #[error("{}: outside {} (list files must be inside it)", path.display(), allowed_dir.display())]
    OutsideAllowedDirectory {
        /// The path as given.
        path: PathBuf,
        /// The directory files must be in.
        allowed_dir: PathBuf,
    },
    /// The body (after decompression) is empty: a refresh that would empty a list is refused.
    #[error("{location}: the body is empty")]
    EmptyBody {
        /// The URL or path.
        location: String,
    },
    /// The HTTP client could not be built (its TLS configuration).
    #[error("cannot build the HTTP client: {message}")]
    Client {
        /// The underlying error.
        message: String,
    },
}

impl FetchError {
    /// Whether trying again in a few seconds may succeed: timeouts, connection failures, a
    /// response that broke off, 5xx and 429. Everything else needs a change somewhere first.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Timeout { .. } | Self::Connect { .. } | Self::Transfer { .. } => true,
            Self::Status { code, .. } => *code == 429 || (500..600).contains(code),
            _ => false,
        }
    }
}

/// The HTTP client list sources are fetched with: one per control thread, connections pooled.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
}

impl Fetcher {
    /// A client sending `user_agent`, trusting the system's root certificates, and using the
    /// proxy the environment names (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`).
    pub fn new(user_agent: &str) -> Result<Self, FetchError> {
        Self::build(user_agent, true, roots_of_the_system())
    }

    fn build(
        user_agent: &str,
        system_proxy: bool,
        roots: rustls::RootCertStore,
    ) -> Result<Self, FetchError> {
        let client_error = |message: String| FetchError::Client { message };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| client_error(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut builder = reqwest::Client::builder()
            .user_agent(user_agent)
            .tls_backend_preconfigured(tls)
            .redirect(redirect::Policy::custom(|attempt| {
                match redirect_verdict(attempt.url(), attempt.previous()) {
                    Ok(()) => attempt.follow(),
                    Err(refusal) => attempt.error(refusal),
                }
            }))
            .gzip(true)
            .http1_only();
        if !system_proxy {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| client_error(chain(&e)))?;
        Ok(Self { client })
    }

    /// Conditional GET: sends If-None-Match / If-Modified-Since from `previous`; follows at
    /// most [`MAX_REDIRECTS`] redirects (https→http downgrade refused); accepts gzip
    /// (Content-Encoding) and also a body that is itself a .gz file (magic bytes); enforces
    /// `limits.max_bytes` on the decompressed size while streaming (never buffers more than
    /// the limit); a total timeout.
    pub async fn fetch_url(
        &self,
        url: &str,
        previous: &Validators,
        limits: &FetchLimits,
    ) -> Result<Fetched, FetchError> {
        let parsed = Url::parse(url).map_err(|e| FetchError::InvalidUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(FetchError::UnsupportedScheme {
                url: url.to_owned(),
                scheme: parsed.scheme().to_owned(),
            });
        }
        match tokio::time::timeout(limits.timeout, self.fetch(parsed, previous, limits)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(FetchError::Timeout {
                location: url.to_owned(),
                timeout: limits.timeout,
            }),
        }
    }

    async fn fetch(
        &self,
        url: Url,
        previous: &Validators,
        limits: &FetchLimits,
    ) -> Result<Fetched, FetchError> {
        let mut request = self.client.get(url.clone());
        // A validator that is not a valid header value (it came from the cache, not from a
        // server) is left out: the request is then unconditional, never refused.
        if let Some(etag) = previous.etag.as_deref().and_then(header_value) {
            request = request.header(header::IF_NONE_MATCH, etag);
        }
        if let Some(date) = previous.last_modified.as_deref().and_then(header_value) {
            request = request.header(header::IF_MODIFIED_SINCE, date);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| classify(url.as_str(), &e))?;
        let status = response.status();
        let final_url = response.url().to_string();
        if status == StatusCode::NOT_MODIFIED && !previous.is_empty() {
            return Ok(Fetched::NotModified);
        }
        if !status.is_success() {
            return Err(FetchError::Status {
                url: final_url,
                code: status.as_u16(),
            });
        }
        let validators = validators_of(response.headers());
        // Known only when the body is not Content-Encoded (reqwest decodes and drops it then).
        if response
            .content_length()
            .is_some_and(|length| length > limits.max_bytes)
        {
            return Err(FetchError::TooLarge {
                location: final_url,
                limit: limits.max_bytes,
            });
        }
        let mut sink = BodySink::new(final_url.clone(), limits.max_bytes);
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| classify(&final_url, &e))?
        {
            sink.push(&chunk)?;
        }
        Ok(Fetched::Body {
            body: sink.finish()?,
            validators,
        })
    }
}

fn roots_of_the_system() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    // A certificate the system store holds but webpki cannot use is skipped, as the API
    // client does: one odd root must not disable https list sources.
    for certificate in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(certificate);
    }
    roots
}

fn header_value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

fn validators_of(headers: &HeaderMap) -> Validators {
    // Kept only when printable ASCII, so it can be sent back unchanged.
    let text = |name| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    Validators {
        etag: text(header::ETAG),
        last_modified: text(header::LAST_MODIFIED),
    }
}

/// Why a redirect is refused; carried through reqwest's error as its source.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
enum Refusal {
    #[error("redirect loop back to {0}")]
    Loop(String),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
    #[error("redirect from {from} to {to}")]
    Downgrade { from: String, to: String },
}

/// Whether to follow a redirect to `next`, given the URLs visited so far (the first
/// requested first).
fn redirect_verdict(next: &Url, previous: &[Url]) -> Result<(), Refusal> {
    if previous.iter().any(|visited| visited == next) {
        return Err(Refusal::Loop(next.to_string()));
    }
    // `previous` holds the first request too: its length is the redirects followed plus one.
    if previous.len() > MAX_REDIRECTS {
        return Err(Refusal::TooMany);
    }
    let from = previous.last().map(Url::scheme).unwrap_or("https");
    let allowed = match next.scheme() {
        "https" => true,
        "http" => from == "http",
        _ => false,
    };
    if !allowed {
        return Err(Refusal::Downgrade {
            from: previous.last().map(Url::to_string).unwrap_or_default(),
            to: next.to_string(),
        });
    }
    Ok(())
}

/// Turns reqwest's error into a specific one by walking its sources.
fn classify(url: &str, error: &reqwest::Error) -> FetchError {
    let url = url.to_owned();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(refusal) = current.downcast_ref::<Refusal>() {
            return match refusal.clone() {
                Refusal::Loop(target) => FetchError::RedirectLoop { url, target },
                Refusal::TooMany => FetchError::TooManyRedirects {
                    url,
                    limit: MAX_REDIRECTS,
                },
                Refusal::Downgrade { from, to } => FetchError::RedirectRefused { url, from, to },
            };
        }
        if let Some(tls) = tls_error(current) {
            return FetchError::Tls {
                url,
                message: tls.to_string(),
            };
        }
        source = current.source();
    }
    let message = chain(error);
    if error.is_decode() {
        FetchError::BadGzip {
            location: url,
            message,
        }
    } else if error.is_connect() {
        FetchError::Connect { url, message }
    } else {
        FetchError::Transfer { url, message }
    }
}

// rustls' error, directly or inside io::Errors (whose `source` skips the error they wrap, and
// which reqwest's connector nests two deep).
fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = error;
    loop {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        current = current.downcast_ref::<io::Error>()?.get_ref()?;
    }
}

/// An error and its sources, `: `-separated, without repeats.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(current) = source {
        let next = current.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = current.source();
    }
    text
}

/// The two bytes every gzip member starts with (RFC 1952, 2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Collects a body chunk by chunk, gunzipping it when it starts with the gzip magic, and
/// refusing it as soon as it (or its compressed form) passes the limit.
struct BodySink {
    location: String,
    limit: u64,
    received: u64,
    state: Sink,
}

enum Sink {
    /// Fewer than two bytes so far: not yet known whether this is gzip.
    Undecided(Vec<u8>),
    Plain(Vec<u8>),
    Gzip(Box<flate2::write::MultiGzDecoder<Limited>>),
}

/// A buffer that refuses to grow past `limit`, remembering that it did.
struct Limited {
    buffer: Vec<u8>,
    limit: u64,
    exceeded: bool,
}

impl io::Write for Limited {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buffer.len() as u64 + bytes.len() as u64 > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("over the size limit"));
        }
        append_capped(&mut self.buffer, bytes, self.limit);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Appends `bytes` to `buffer`, growing it geometrically but never to a capacity above
/// `limit` (the caller has checked that the bytes fit), so a body near the limit does not
/// allocate twice the limit.
fn append_capped(buffer: &mut Vec<u8>, bytes: &[u8], limit: u64) {
    let needed = buffer.len() + bytes.len();
    if needed > buffer.capacity() {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let target = (buffer.capacity() * 2)
            .max(needed)
            .max(8 << 10)
            .min(limit.max(needed));
        buffer.reserve_exact(target - buffer.len());
    }
    buffer.extend_from_slice(bytes);
}

impl BodySink {
    fn new(location: String, limit: u64) -> Self {
        Self {
            location,
            limit,
            received: 0,
            state: Sink::Undecided(Vec::new()),
        }
    }

    fn too_large(&self) -> FetchError {
        FetchError::TooLarge {
            location: self.location.clone(),
            limit: self.limit,
        }
    }

    fn bad_gzip(&self, error: &io::Error) -> FetchError {
        FetchError::BadGzip {
            location: self.location.clone(),
            message: error.to_string(),
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Result<(), FetchError> {
        self.received += chunk.len() as u64;
        if self.received > self.limit {
            return Err(self.too_large());
        }
        match &mut self.state {
            Sink::Plain(buffer) => append_capped(buffer, chunk, self.limit),
            Sink::Gzip(decoder) => {
                if let Err(error) = decoder.write_all(chunk) {
                    return Err(self.decoder_error(&error));
                }
            }
            Sink::Undecided(start) => {
                start.extend_from_slice(chunk);
                if start.len() >= GZIP_MAGIC.len() {
                    let start = std::mem::take(start);
                    self.decide(start)?;
                }
            }
        }
        Ok(())
    }

    fn decide(&mut self, start: Vec<u8>) -> Result<(), FetchError> {
        if start.starts_with(&GZIP_MAGIC) {
            let mut decoder = Box::new(flate2::write::MultiGzDecoder::new(Limited {
                buffer: Vec::new(),
                limit: self.limit,
                exceeded: false,
            }));
            let written = decoder.write_all(&start);
            self.state = Sink::Gzip(decoder);
            if let Err(error) = written {
                return Err(self.decoder_error(&error));
            }
        } else {
            self.state = Sink::Plain(start);
        }
        Ok(())
    }

    fn decoder_error(&self, error: &io::Error) -> FetchError {
        match &self.state {
            Sink::Gzip(decoder) if decoder.get_ref().exceeded => self.too_large(),
            _ => self.bad_gzip(error),
        }
    }

    fn finish(mut self) -> Result<Bytes, FetchError> {
        if let Sink::Undecided(start) = &mut self.state {
            let start = std::mem::take(start);
            self.decide(start)?;
        }
        let body = match std::mem::replace(&mut self.state, Sink::Plain(Vec::new())) {
            Sink::Plain(buffer) | Sink::Undecided(buffer) => buffer,
            Sink::Gzip(mut decoder) => match decoder.try_finish() {
                Ok(()) => match decoder.finish() {
                    Ok(limited) => limited.buffer,
                    Err(error) => return Err(self.bad_gzip(&error)),
                },
                Err(_) if decoder.get_ref().exceeded => return Err(self.too_large()),
                Err(error) => return Err(self.bad_gzip(&error)),
            },
        };
        if body.is_empty() {
            return Err(FetchError::EmptyBody {
                location: self.location,
            });
        }
        Ok(Bytes::from(body))
    }
}

/// Reads a `file` source on the blocking pool (tokio::task::spawn_blocking): the path must be
/// inside `allowed_dir` after canonicalisation (no symlink or `..` escape), size-limited,
/// gzip handled as [`Fetcher::fetch_url`] does. A relative `path` is taken inside
/// `allowed_dir`. Files are opened without following a final symbolic link and without
/// blocking on a FIFO; `allowed_dir` itself must not be writable by anyone untrusted.
pub async fn read_file(
    path: &Path,
    allowed_dir: &Path,
    limits: &FetchLimits,
) -> Result<Bytes, FetchError> {
    let (owned_path, owned_dir, max_bytes) =
        (path.to_owned(), allowed_dir.to_owned(), limits.max_bytes);
    let task =
        tokio::task::spawn_blocking(move || read_file_now(&owned_path, &owned_dir, max_bytes));
    match tokio::time::timeout(limits.timeout, task).await {
        Ok(Ok(result)) => result,
        // The task panicked or the runtime is shutting down.
        Ok(Err(join)) => Err(FetchError::FileUnreadable {
            path: path.to_owned(),
            message: join.to_string(),
        }),
        Err(_elapsed) => Err(FetchError::Timeout {
            location: path.display().to_string(),
            timeout: limits.timeout,
        }),
    }
}

fn read_file_now(path: &Path, allowed_dir: &Path, max_bytes: u64) -> Result<Bytes, FetchError> {
    use std::os::unix::fs::OpenOptionsExt as _;

    let unreadable = |error: io::Error| FetchError::FileUnreadable {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let dir = allowed_dir
        .canonicalize()
        .map_err(|error| FetchError::FileUnreadable {
            path: path.to_owned(),
            message: format!(
                "the allowed directory {} cannot be resolved: {error}",
                allowed_dir.display()
            ),
        })?;
    let canonical = dir.join(path).canonicalize().map_err(|error| {
        if error.kind() == io::ErrorKind::NotFound {
            FetchError::FileNotFound {
                path: path.to_owned(),
            }
        } else {
            unreadable(error)
        }
    })?;
    if !canonical.starts_with(&dir) {
        return Err(FetchError::OutsideAllowedDirectory {
            path: path.to_owned(),
            allowed_dir: allowed_dir.to_owned(),
        });
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&canonical)
        .map_err(unreadable)?;
    let metadata = file.metadata().map_err(unreadable)?;
    if !metadata.is_file() {
        return Err(unreadable(io::Error::other("not a regular file")));
    }
    if metadata.len() > max_bytes {
        return Err(FetchError::TooLarge {
            location: path.display().to_string(),
            limit: max_bytes,
        });
    }
    let mut sink = BodySink::new(path.display().to_string(), max_bytes);
    let mut chunk = vec![0; 64 << 10];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => sink.push(&chunk[..n])?,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(unreadable(error)),
        }
    }
    sink.finish()
}

/// The first retry's delay after a retryable failure.
pub const RETRY_DELAY: Duration = Duration::from_secs(2);
/// Each retry waits this many times longer than the one before (2 s, 8 s, …).
pub const RETRY_FACTOR: u32 = 4;
/// Attempts per refresh, the first included, before the source rests in a cooldown.
pub const ATTEMPTS: u32 = 3;
/// The first cooldown after a failed refresh; it doubles with each consecutive failure.
pub const COOLDOWN: Duration = Duration::from_secs(5 * 60);
/// The longest cooldown (shorter when the refresh interval is shorter).
pub const MAX_COOLDOWN: Duration = Duration::from_secs(3600);
/// Jitter: each delay is moved by up to this fraction either way, so many lists failing at
/// once do not retry in step.
const JITTER: f64 = 0.2;

/// When a source is next fetched: its refresh interval, retries with exponential backoff and
/// jitter for retryable errors, then a cooldown that grows with consecutive failed refreshes.
/// Pure: the caller passes `now` and sleeps.
///
/// ```text
///  success ──▶ due at last_success + interval
///  failure (retryable, attempt < 3) ──▶ retry in 2 s, 8 s (±20 %)
///  failure (otherwise) ──▶ cooldown 5 min, 10, 20, … ≤ min(interval, 1 h) (±20 %)
///  force() ──▶ due now, skipping interval and cooldown
/// ```
#[derive(Clone, Debug)]
pub struct Backoff {
    refresh_interval: Duration,
    /// Failed attempts of the current refresh.
    attempts: u32,
    /// Refreshes in a row that failed (each after its retries).
    failures: u32,
    /// A retry or the end of a cooldown, while the source is failing.
    retry_at: Option<Instant>,
    forced: bool,
}

impl Backoff {
    /// A source refreshed every `refresh_interval` while it succeeds.
    pub fn new(refresh_interval: Duration) -> Self {
        Self {
            refresh_interval,
            attempts: 0,
            failures: 0,
            retry_at: None,
            forced: false,
        }
    }

    /// A fetch succeeded (a body or 304): back to the refresh interval.
    pub fn on_success(&mut self) {
        self.attempts = 0;
        self.failures = 0;
        self.retry_at = None;
        self.forced = false;
    }

    /// A fetch failed at `now`; returns when to try next.
    pub fn on_failure(&mut self, retryable: bool, now: Instant) -> Instant {
        self.forced = false;
        self.attempts += 1;
        let delay = if retryable && self.attempts < ATTEMPTS {
            RETRY_DELAY.saturating_mul(RETRY_FACTOR.saturating_pow(self.attempts - 1))
        } else {
            self.attempts = 0;
            self.failures = self.failures.saturating_add(1);
            self.cooldown()
        };
        let next = now + jitter(delay, rand::random::<f64>());
        self.retry_at = Some(next);
        next
    }

    /// The cooldown after the current run of failed refreshes, before jitter.
    fn cooldown(&self) -> Duration {
        let ceiling = self.refresh_interval.min(MAX_COOLDOWN);
        let doublings = self.failures.saturating_sub(1).min(16);
        COOLDOWN.saturating_mul(1 << doublings).min(ceiling)
    }

    /// Consecutive failed refreshes (each after its retries); 0 after a success.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// When the source is next due: now if forced or never loaded, the pending retry or
    /// cooldown while failing, else `last_success` plus the refresh interval.
    pub fn next_due(&self, last_success: Option<Instant>, now: Instant) -> Instant {
        if self.forced {
            return now;
        }
        match (self.retry_at, last_success) {
            (Some(retry), _) => retry,
            (None, Some(success)) => success + self.refresh_interval,
            (None, None) => now,
        }
    }

    /// RefreshNow: the next `next_due` is now, skipping the interval and any cooldown.
    pub fn force(&mut self) {
        self.forced = true;
        self.attempts = 0;
    }
}

/// `delay` moved by `(unit − ½)·2·JITTER` of itself; `unit` is uniform in [0, 1).
fn jitter(delay: Duration, unit: f64) -> Duration {
    delay.mul_f64(1.0 + (unit - 0.5) * 2.0 * JITTER)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::{Mutex, OnceLock};

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    const LIST: &[u8] = b"# a list\n0.0.0.0 ads.example\n0.0.0.0 tracker.example\n";
    const ETAG: &str = "\"v1\"";
    const LAST_MODIFIED: &str = "Tue, 14 Nov 2023 22:13:20 GMT";
    /// The limit most tests fetch with; the large bodies are 2 MiB, the bomb 8 MiB inflated.
    const LIMIT: u64 = 1 << 20;

    fn limits() -> FetchLimits {
        FetchLimits {
            timeout: Duration::from_secs(10),
            max_bytes: LIMIT,
        }
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    /// 8 MiB of zeros, gzipped: about 8 KiB on the wire.
    fn bomb() -> &'static [u8] {
        static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
        BOMB.get_or_init(|| gzip(&vec![0; 8 << 20]))
    }

    /// A request as the server saw it: the path, and the headers with names lowercased.
    #[derive(Clone, Debug, Default)]
    struct Seen {
        path: String,
        headers: Vec<(String, String)>,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    /// What the server answers: status line and headers, the body, and whether to stall
    /// after half of it.
    struct Reply {
        head: String,
        body: Vec<u8>,
        stall: bool,
    }

    fn reply(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let mut head = format!("HTTP/1.1 {status}\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        Reply {
            head,
            body: body.to_vec(),
            stall: false,
        }
    }

    fn sized(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let length = body.len().to_string();
        let mut all = headers.to_vec();
        all.push(("Content-Length", &length));
        reply(status, &all, body)
    }

    fn redirect_to(location: &str) -> Reply {
        sized("302 Found", &[("Location", location)], b"")
    }

    fn route(seen: &Seen) -> Reply {
        let path = seen.path.as_str();
        if let Some(n) = path.strip_prefix("/chain/") {
            return match n.parse::<u32>() {
                Ok(0) | Err(_) => sized("200 OK", &[], LIST),
                Ok(n) => redirect_to(&format!("/chain/{}", n - 1)),
            };
        }
        match path {
            "/list" if seen.header("if-none-match") == Some(ETAG) => {
                reply("304 Not Modified", &[("ETag", ETAG)], b"")
            }
            "/list" => sized(
                "200 OK",
                &[("ETag", ETAG), ("Last-Modified", LAST_MODIFIED)],
                LIST,
            ),
            "/500" => sized("500 Internal Server Error", &[], b"oops"),
            "/429" => sized("429 Too Many Requests", &[("Retry-After", "60")], b""),
            "/slow" => Reply {
                stall: true,
                ..sized("200 OK", &[], &[b'x'; 1000])
            },
            "/big" => sized("200 OK", &[], &vec![b'a'; 2 << 20]),
            // No Content-Length: the body ends when the connection closes.
            "/big-unsized" => reply("200 OK", &[], &vec![b'a'; 2 << 20]),
            "/bomb" => reply("200 OK", &[("Content-Encoding", "gzip")], bomb()),
            "/bomb.gz" => reply("200 OK", &[], bomb()),
            "/garbage" => sized("200 OK", &[], &[0xff, 0x00, 0xfe, 0x1f, 0x8b, 0x80, b'\n']),
            "/gzip" => reply("200 OK", &[("Content-Encoding", "gzip")], &gzip(LIST)),
            "/list.gz" => sized(
                "200 OK",
                &[("Content-Type", "application/gzip")],
                &gzip(LIST),
            ),
            "/bad-gzip" => reply("200 OK", &[("Content-Encoding", "gzip")], b"not gzip"),
            "/bad.gz" => sized("200 OK", &[], &[0x1f, 0x8b, 0xff, 0xff, 0xff, 0xff, 0, 0]),
            "/truncated.gz" => {
                let whole = gzip(LIST);
                sized("200 OK", &[], &whole[..whole.len() - 4])
            }
            "/empty" => sized("200 OK", &[], b""),
            "/empty.gz" => sized("200 OK", &[], &gzip(b"")),
            "/redirect" => redirect_to("/list"),
            "/loop-a" => redirect_to("/loop-b"),
            "/loop-b" => redirect_to("/loop-a"),
            "/to-ftp" => redirect_to("ftp://127.0.0.1/list"),
            _ => sized("404 Not Found", &[], b"no such list"),
        }
    }

    /// A local HTTP/1.1 server answering one request per connection from [`route`], and
    /// recording what it was asked.
    struct Server {
        address: SocketAddr,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl Server {
        async fn start() -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let log = seen.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(answer(stream, log.clone()));
                }
            });
            Self { address, seen }
        }

        fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.address)
        }

        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }
    }

    async fn answer(mut stream: TcpStream, log: Arc<Mutex<Vec<Seen>>>) {
        let mut request = Vec::new();
        let mut buffer = [0; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buffer[..n]),
            }
            // Not HTTP (a TLS ClientHello): answer at once, as a plain HTTP server would.
            if !request[0].is_ascii_uppercase() || request.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&request);
        let mut lines = text.split("\r\n");
        let path = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .unwrap_or_default()
            .to_owned();
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let seen = Seen { path, headers };
        log.lock().unwrap().push(seen.clone());
        let reply = if request[0].is_ascii_uppercase() {
            route(&seen)
        } else {
            sized("400 Bad Request", &[], b"")
        };
        let mut head = reply.head.into_bytes();
        head.extend_from_slice(b"Connection: close\r\n\r\n");
        let _ = stream.write_all(&head).await;
        if reply.stall {
            let _ = stream.write_all(&reply.body[..reply.body.len() / 2]).await;
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        let _ = stream.write_all(&reply.body).await;
        let _ = stream.shutdown().await;
    }

    fn fetcher() -> Fetcher {
        // No proxy: the tests talk to 127.0.0.1 whatever the environment says.
        Fetcher::build("kudurru-test/1", false, rustls::RootCertStore::empty()).unwrap()
    }

    async fn fetch(server: &Server, path: &str) -> Result<Fetched, FetchError> {
        fetcher()
            .fetch_url(&server.url(path), &Validators::default(), &limits())
            .await
    }

    fn body_of(fetched: Fetched) -> Bytes {
        match fetched {
            Fetched::Body { body, .. } => body,
            Fetched::NotModified => panic!("expected a body, got 304"),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ok_returns_the_body_and_its_validators() {
        let server = Server::start().await;
        let fetched = fetch(&server, "/list").await.unwrap();
        assert_eq!(
            fetched,
            Fetched::Body {
                body: Bytes::from_static(LIST),
                validators: Validators {
                    etag: Some(ETAG.into()),
                    last_modified: Some(LAST_MODIFIED.into()),
                },
            }
        );
        let seen = server.seen();
        assert_eq!(seen[0].header("user-agent"), Some("kudurru-test/1"));
        assert_eq!(seen[0].header("if-none-match"), None);
        assert!(seen[0].header("accept-encoding").unwrap().contains("gzip"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn conditional_get_sends_validators_and_takes_304() {
        let server = Server::start().await;
        let previous = Validators {
            etag: Some(ETAG.into()),
            last_modified: Some(LAST_MODIFIED.into()),
        };
        let fetched = fetcher()
            .fetch_url(&server.url("/list"), &previous, &limits())
            .await
            .unwrap();
        assert_eq!(fetched, Fetched::NotModified);
        let seen = server.seen();
        assert_eq!(seen[0].header("if-none-match"), Some(ETAG));
        assert_eq!(seen[0].header("if-modified-since"), Some(LAST_MODIFIED));
        // A stale ETag gets the new body.
        let stale = Validators {
            etag: Some("\"v0\"".into()),
            last_modified: None,
        };
        let fetched = fetcher()
            .fetch_url(&server.url("/list"), &stale, &limits())
            .await
            .unwrap();
        assert_eq!(body_of(fetched), LIST);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn status_5xx_and_429_are_retryable_404_is_not() {
        let server = Server::start().await;
        for (path, code, retryable) in [
            ("/500", 500, true),
            ("/429", 429, true),
            ("/404", 404, false),
        ] {
            let error = fetch(&server, path).await.unwrap_err();
            assert!(
                matches!(error, FetchError::Status { code: c, .. } if c == code),
                "{path}: {error}"
            );
            assert_eq!(error.is_retryable(), retryable, "{path}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn slow_body_times_out() {
        let server = Server::start().await;
        let limits = FetchLimits {
            timeout: Duration::from_millis(300),
            ..limits()
        };
        let start = Instant::now();
        let error = fetcher()
            .fetch_url(&server.url("/slow"), &Validators::default(), &limits)
            .await
            .unwrap_err();
        assert!(matches!(error, FetchError::Timeout { .. }), "{error}");
        assert!(error.is_retryable());
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn oversized_bodies_stop_at_the_limit() {
        let server = Server::start().await;
        for path in ["/big", "/big-unsized", "/bomb", "/bomb.gz"] {
            let error = fetch(&server, path).await.unwrap_err();
            assert!(
                matches!(error, FetchError::TooLarge { limit: LIMIT, .. }),
                "{path}: {error}"
            );
            assert!(!error.is_retryable());
        }
        // Under a larger limit the bomb is just a body of zeros.
        let roomy = FetchLimits {
            max_bytes: 16 << 20,
            ..limits()
        };
        let fetched = fetcher()
            .fetch_url(&server.url("/bomb.gz"), &Validators::default(), &roomy)
            .await
            .unwrap();
        assert_eq!(body_of(fetched).len(), 8 << 20);
    }

    #[test]
    fn the_sink_never_holds_more_than_the_limit() {
        let mut sink = BodySink::new("test".into(), 100_000);
        let bomb = bomb();
        let mut refused = None;
        for chunk in bomb.chunks(1024) {
            if let Err(error) = sink.push(chunk) {
                refused = Some(error);
                break;
            }
            if let Sink::Gzip(decoder) = &sink.state {
                assert!(decoder.get_ref().buffer.len() <= 100_000);
            }
        }
        assert!(matches!(refused, Some(FetchError::TooLarge { .. })));
    }

    #[test]
    fn buffers_grow_to_the_limit_not_past_it() {
        let mut buffer = Vec::new();
        for _ in 0..100 {
            append_capped(&mut buffer, &[7; 1000], 100_000);
        }
        assert_eq!(buffer.len(), 100_000);
        assert!(buffer.capacity() <= 100_000, "{}", buffer.capacity());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn garbage_is_a_body_parsing_is_not_our_job() {
        let server = Server::start().await;
        let body = body_of(fetch(&server, "/garbage").await.unwrap());
        assert_eq!(&body[..], &[0xff, 0x00, 0xfe, 0x1f, 0x8b, 0x80, b'\n']);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn gzip_content_encoding_and_gz_files_are_decompressed() {
        let server = Server::start().await;
        for path in ["/gzip", "/list.gz"] {
            assert_eq!(body_of(fetch(&server, path).await.unwrap()), LIST, "{path}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn bad_gzip_is_specific() {
        let server = Server::start().await;
        for path in ["/bad-gzip", "/bad.gz", "/truncated.gz"] {
            let error = fetch(&server, path).await.unwrap_err();
            assert!(
                matches!(error, FetchError::BadGzip { .. }),
                "{path}: {error}"
            );
            assert!(!error.is_retryable());
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn empty_bodies_are_refused() {
        let server = Server::start().await;
        for path in ["/empty", "/empty.gz"] {
            let error = fetch(&server, path).await.unwrap_err();
            assert!(
                matches!(error, FetchError::EmptyBody { .. }),
                "{path}: {error}"
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn redirects_are_followed_up_to_five() {
        let server = Server::start().await;
        assert_eq!(body_of(fetch(&server, "/redirect").await.unwrap()), LIST);
        assert_eq!(body_of(fetch(&server, "/chain/5").await.unwrap()), LIST);
        let error = fetch(&server, "/chain/6").await.unwrap_err();
        assert!(
            matches!(error, FetchError::TooManyRedirects { limit: 5, .. }),
            "{error}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn redirect_loops_and_other_schemes_are_refused() {
        let server = Server::start().await;
        let error = fetch(&server, "/loop-a").await.unwrap_err();
        assert!(
            matches!(&error, FetchError::RedirectLoop { target, .. } if target.ends_with("/loop-a")),
            "{error}"
        );
        assert_eq!(
            server.seen().len(),
            2,
            "the loop is seen before it is walked twice"
        );
        let error = fetch(&server, "/to-ftp").await.unwrap_err();
        assert!(
            matches!(&error, FetchError::RedirectRefused { to, .. } if to.starts_with("ftp:")),
            "{error}"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn redirect_from_https_to_http_is_refused() {
        let url = |text: &str| Url::parse(text).unwrap();
        let from_https = [url("https://lists.example/a")];
        assert!(matches!(
            redirect_verdict(&url("http://lists.example/a"), &from_https),
            Err(Refusal::Downgrade { .. })
        ));
        assert_eq!(
            redirect_verdict(&url("https://mirror.example/a"), &from_https),
            Ok(())
        );
        let from_http = [url("http://lists.example/a")];
        assert_eq!(
            redirect_verdict(&url("https://lists.example/a"), &from_http),
            Ok(())
        );
        assert_eq!(
            redirect_verdict(&url("http://mirror.example/a"), &from_http),
            Ok(())
        );
        // Once on https, a later hop may not go back to http.
        let upgraded = [
            url("http://lists.example/a"),
            url("https://lists.example/a"),
        ];
        assert!(redirect_verdict(&url("http://lists.example/b"), &upgraded).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn https_to_a_plain_http_port_is_a_tls_error() {
        let server = Server::start().await;
        let url = format!("https://{}/list", server.address);
        let error = fetcher()
            .fetch_url(&url, &Validators::default(), &limits())
            .await
            .unwrap_err();
        assert!(matches!(error, FetchError::Tls { .. }), "{error}");
        assert!(!error.is_retryable());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn refused_connection_is_a_retryable_connect_error() {
        let address = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let error = fetcher()
            .fetch_url(
                &format!("http://{address}/list"),
                &Validators::default(),
                &limits(),
            )
            .await
            .unwrap_err();
        assert!(matches!(error, FetchError::Connect { .. }), "{error}");
        assert!(error.is_retryable());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn urls_other_than_http_and_https_are_refused_before_any_request() {
        let fetcher = fetcher();
        let (none, limits) = (Validators::default(), limits());
        let fetch = |url: &'static str| fetcher.fetch_url(url, &none, &limits);
        assert!(matches!(
            fetch("ftp://lists.example/a").await,
            Err(FetchError::UnsupportedScheme { scheme, .. }) if scheme == "ftp"
        ));
        assert!(matches!(
            fetch("file:///etc/hosts").await,
            Err(FetchError::UnsupportedScheme { .. })
        ));
        assert!(matches!(
            fetch("not a url").await,
            Err(FetchError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn new_builds_with_the_system_roots_and_proxy() {
        Fetcher::new("kudurru/0.1").unwrap();
    }

    /// A directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let path = std::env::temp_dir().join(format!(
                "kudurru-fetch-{}-{}",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `lists/` (the allowed directory) with a list, a .gz list, an empty file, a large file,
    /// a subdirectory, and symlinks in and out; `secret` beside it.
    fn file_tree() -> (TempDir, PathBuf) {
        let root = TempDir::new();
        let lists = root.0.join("lists");
        std::fs::create_dir_all(lists.join("sub")).unwrap();
        std::fs::write(lists.join("ads.txt"), LIST).unwrap();
        std::fs::write(lists.join("sub/more.txt"), LIST).unwrap();
        std::fs::write(lists.join("ads.txt.gz"), gzip(LIST)).unwrap();
        std::fs::write(lists.join("empty.txt"), b"").unwrap();
        std::fs::write(lists.join("big.txt"), vec![b'a'; 2 << 20]).unwrap();
        std::fs::write(lists.join("bomb.gz"), bomb()).unwrap();
        std::fs::write(root.0.join("secret"), b"0.0.0.0 secret.example\n").unwrap();
        std::os::unix::fs::symlink(root.0.join("secret"), lists.join("escape.txt")).unwrap();
        std::os::unix::fs::symlink(lists.join("ads.txt"), lists.join("alias.txt")).unwrap();
        (root, lists)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn read_file_inside_the_allowed_directory() {
        let (_root, lists) = file_tree();
        for path in [
            lists.join("ads.txt"),
            PathBuf::from("ads.txt"),
            PathBuf::from("sub/more.txt"),
            lists.join("sub/../ads.txt"),
            lists.join("ads.txt.gz"),
            lists.join("alias.txt"),
        ] {
            let body = read_file(&path, &lists, &limits()).await;
            assert_eq!(body.unwrap(), LIST, "{}", path.display());
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn read_file_refuses_escapes_from_the_allowed_directory() {
        let (root, lists) = file_tree();
        for path in [
            lists.join("escape.txt"),
            lists.join("../secret"),
            PathBuf::from("../secret"),
            root.0.join("secret"),
        ] {
            let error = read_file(&path, &lists, &limits()).await.unwrap_err();
            assert!(
                matches!(error, FetchError::OutsideAllowedDirectory { .. }),
                "{}: {error}",
                path.display()
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn read_file_errors_are_specific() {
        let (_root, lists) = file_tree();
        let read = |name: &str| {
            let path = lists.join(name);
            let lists = lists.clone();
            async move { read_file(&path, &lists, &limits()).await.unwrap_err() }
        };
        assert!(matches!(
            read("missing.txt").await,
            FetchError::FileNotFound { .. }
        ));
        assert!(matches!(
            read("sub").await,
            FetchError::FileUnreadable { .. }
        ));
        assert!(matches!(
            read("empty.txt").await,
            FetchError::EmptyBody { .. }
        ));
        for name in ["big.txt", "bomb.gz"] {
            let error = read(name).await;
            assert!(
                matches!(error, FetchError::TooLarge { limit: LIMIT, .. }),
                "{name}: {error}"
            );
        }
    }

    // --- Backoff ---------------------------------------------------------------------------

    const HOUR: Duration = Duration::from_secs(3600);

    fn within(actual: Duration, expected: Duration) -> bool {
        let low = expected.mul_f64(1.0 - JITTER);
        let high = expected.mul_f64(1.0 + JITTER);
        actual >= low && actual <= high
    }

    #[test]
    fn jitter_stays_within_a_fifth_either_way() {
        let delay = Duration::from_secs(100);
        assert_eq!(jitter(delay, 0.0), Duration::from_secs(80));
        assert_eq!(jitter(delay, 0.5), delay);
        assert!(jitter(delay, 0.999_999) <= Duration::from_secs(120));
    }

    #[test]
    fn a_new_source_is_due_now_then_every_interval() {
        let now = Instant::now();
        let mut backoff = Backoff::new(HOUR);
        assert_eq!(backoff.next_due(None, now), now);
        backoff.on_success();
        assert_eq!(backoff.next_due(Some(now), now), now + HOUR);
    }

    #[test]
    fn retryable_failures_retry_at_2_then_8_seconds_then_cool_down() {
        let now = Instant::now();
        let mut backoff = Backoff::new(24 * HOUR);
        let first = backoff.on_failure(true, now);
        assert!(
            within(first - now, Duration::from_secs(2)),
            "{:?}",
            first - now
        );
        assert_eq!(backoff.next_due(Some(now), now), first);
        let second = backoff.on_failure(true, first);
        assert!(within(second - first, Duration::from_secs(8)));
        assert_eq!(backoff.consecutive_failures(), 0, "still retrying");
        let third = backoff.on_failure(true, second);
        assert!(within(third - second, COOLDOWN), "{:?}", third - second);
        assert_eq!(backoff.consecutive_failures(), 1);
        // After the cooldown the next refresh gets its retries again.
        let retry = backoff.on_failure(true, third);
        assert!(within(retry - third, Duration::from_secs(2)));
    }

    #[test]
    fn a_permanent_failure_skips_the_retries() {
        let now = Instant::now();
        let mut backoff = Backoff::new(24 * HOUR);
        let next = backoff.on_failure(false, now);
        assert!(within(next - now, COOLDOWN));
        assert_eq!(backoff.consecutive_failures(), 1);
    }

    #[test]
    fn cooldown_doubles_up_to_an_hour_or_the_interval() {
        let mut now = Instant::now();
        let mut backoff = Backoff::new(24 * HOUR);
        let mut cooldowns = Vec::new();
        for _ in 0..7 {
            let next = backoff.on_failure(false, now);
            cooldowns.push(next - now);
            now = next;
        }
        let minutes = [5, 10, 20, 40, 60, 60, 60];
        for (cooldown, minutes) in cooldowns.iter().zip(minutes) {
            assert!(
                within(*cooldown, Duration::from_secs(minutes * 60)),
                "{cooldown:?} vs {minutes} min"
            );
        }
        let mut short = Backoff::new(Duration::from_secs(15 * 60));
        let mut now = Instant::now();
        for minutes in [5, 10, 15, 15] {
            let next = short.on_failure(false, now);
            assert!(within(next - now, Duration::from_secs(minutes * 60)));
            now = next;
        }
        // A refresh interval shorter than the first cooldown caps it too.
        let mut tiny = Backoff::new(Duration::from_secs(60));
        let now = Instant::now();
        assert!(within(
            tiny.on_failure(false, now) - now,
            Duration::from_secs(60)
        ));
    }

    #[test]
    fn success_resets_the_failures() {
        let now = Instant::now();
        let mut backoff = Backoff::new(24 * HOUR);
        for _ in 0..4 {
            backoff.on_failure(false, now);
        }
        backoff.on_success();
        assert_eq!(backoff.consecutive_failures(), 0);
        assert_eq!(backoff.next_due(Some(now), now), now + 24 * HOUR);
        let next = backoff.on_failure(false, now);
        assert!(within(next - now, COOLDOWN));
    }

    #[test]
    fn force_skips_interval_and_cooldown_once() {
        let now = Instant::now();
        let mut backoff = Backoff::new(24 * HOUR);
        backoff.on_success();
        backoff.force();
        assert_eq!(backoff.next_due(Some(now), now), now);
        for _ in 0..3 {
            backoff.on_failure(false, now);
        }
        backoff.force();
        assert_eq!(backoff.next_due(Some(now), now), now, "skips the cooldown");
        // The forced attempt fails retryably: it retries like any other refresh.
        let retry = backoff.on_failure(true, now);
        assert!(within(retry - now, Duration::from_secs(2)));
        assert_eq!(backoff.next_due(Some(now), now), retry);
    }
}
