//! The one HTTP layer of the control thread: the API, the ops listener and, later, the
//! dashboard are each a [`Handler`] served by [`serve`] on hyper (HTTP/1.1, optional TLS).
//!
//! ```text
//! accept ─▶ slot free? (no: close at once, counted) ─▶ [TLS handshake ≤ header timeout]
//!        ─▶ task per connection: hyper reads a head within the header timeout (also while
//!           idle between requests) ─▶ Handler ─▶ response (JSON, text or a stream)
//! shutdown ─▶ stop accepting ─▶ idle connections close, in-flight requests finish (bounded)
//! ```
//! No thread per connection: every connection is a task on the control thread's runtime, so a
//! slow or idle client holds one slot and a few kilobytes, never the listener. Accept errors
//! (out of file descriptors, say) are logged and retried; the listener never stops on its own.
//! Bodies are read only when a handler asks ([`read_body`]): bounded in size and time, and
//! after the handler has authorised the request.

#[cfg(test)]
mod tests;

mod error;
mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

pub use error::HttpError;
pub use tls::{TlsAcceptor, TlsSource};

/// The bounds every listener enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Header and idle timeout: a connection must deliver a whole request head within this,
    /// both when it opens and while it idles between requests (hyper's header read timeout);
    /// also the TLS handshake's bound.
    pub header_timeout: Duration,
    /// How long a request body may take to arrive once its head is in.
    pub body_timeout: Duration,
    /// Connections open at once on one listener; a client past this is closed at once.
    pub max_connections: usize,
    /// How long shutdown waits for in-flight requests before closing what is left.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    /// 10 s for a head or a body, 1024 connections, 5 s of shutdown grace: a slow client is
    /// gone within seconds, and a burst of honest ones (a scrape, a dashboard) fits.
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}
/// Pause after a failed `accept` (out of file descriptors or memory) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A response body: a whole buffer or a stream (the query-log export streams).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;
/// A request as hyper hands it over.
pub type Request = http::Request<Incoming>;
/// A response of any handler.
pub type Response = http::Response<Body>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// A body streamed from a channel, chunk by chunk as they are sent; it ends when the sender
/// is dropped. Dropping the body (the client went away) closes the channel, which tells the
/// sender to stop.
pub fn channel_body(chunks: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    ChannelBody(chunks).boxed_unsync()
}

struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(hyper::body::Frame::data(bytes))))
    }
}

/// A response with `status`, `content_type` and a whole body.
pub fn respond(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response {
    let mut response = http::Response::new(full(body));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

/// A JSON response: `value` and a newline.
pub fn json(status: u16, value: &serde_json::Value) -> Response {
    let mut text = serde_json::to_vec(value).unwrap_or_default();
    text.push(b'\n');
    respond(status, "application/json", text)
}

/// A JSON response with an `Allow` header when `allow` is set (a 405, RFC 9110 §15.5.6).
pub fn json_allowing(status: u16, value: &serde_json::Value, allow: Option<&str>) -> Response {
    let mut response = json(status, value);
    if let Some(allow) = allow
        && let Ok(value) = http::HeaderValue::from_str(allow)
    {
        response.headers_mut().insert(http::header::ALLOW, value);
    }
    response
}

/// Reads a request body of at most `max` bytes within `timeout`: 413 past `max` (a declared
/// `Content-Length` over it is refused before a byte is read), 408 when it does not arrive in
/// time, 400 when the connection breaks.
pub async fn read_body(
    request: Request,
    max: usize,
    timeout: Duration,
) -> Result<Bytes, HttpError> {
    let too_large = || {
        HttpError::new(
            413,
            "too_large",
            format!("bodies are limited to {max} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let body = Limited::new(request.into_body(), max);
    match tokio::time::timeout(timeout, body.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(HttpError::new(
            400,
            "bad_body",
            format!("the request body could not be read: {e}"),
        )),
        Err(_) => Err(HttpError::new(
            408,
            "body_timeout",
            format!(
                "the request body did not arrive within {}",
                humantime::format_duration(timeout)
            ),
        )),
    }
}

/// What a listener answers requests with; the peer address comes along for loopback checks.
pub type Handler = Arc<
    dyn Fn(Request, SocketAddr) -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync,
>;

/// Counters of one listener, for `/metrics`.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections closed at once because [`Limits::max_connections`] were open.
    pub refused: AtomicU64,
    /// Failed `accept` calls (file descriptors or memory exhausted).
    pub accept_errors: AtomicU64,
}

/// A bound listener, ready to [`serve`].
pub struct Listener {
    /// `api` or `ops`, for logs and metrics.
    pub name: &'static str,
    socket: TcpListener,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    /// Its counters.
    pub stats: Arc<ListenerStats>,
}

/// Why a listener could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// The address could not be bound.
    #[error("cannot bind the {name} listener on {address}: {source}")]
    Bind {
        /// `api` or `ops`.
        name: &'static str,
        /// The address.
        address: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Listener {
    /// Binds `address` (must run inside the control thread's runtime).
    pub fn bind(
        name: &'static str,
        address: SocketAddr,
        tls: Option<TlsAcceptor>,
        limits: Limits,
    ) -> Result<Self, ListenError> {
        let bind = || -> std::io::Result<TcpListener> {
            let std = std::net::TcpListener::bind(address)?;
            std.set_nonblocking(true)?;
            TcpListener::from_std(std)
        };
        let socket = bind().map_err(|source| ListenError::Bind {
            name,
            address,
            source,
        })?;
        Ok(Self {
            name,
            socket,
            tls,
            limits,
            stats: Arc::default(),
        })
    }

    /// The bound address (the port, when 0 was asked for).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.socket.local_addr().ok()
    }
}

/// Serves `listener` with `handler` until `shutdown` changes, then lets in-flight requests
/// finish for at most [`Limits::shutdown_grace`].
pub async fn serve(listener: Listener, handler: Handler, mut shutdown: watch::Receiver<bool>) {
    let Listener {
        name,
        socket,
        tls,
        limits,
        stats,
    } = listener;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            // A change, or the sender gone: either way, stop.
            _ = shutdown.changed() => break,
            accepted = socket.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(listener = name, error = %e, "accept failed; retrying");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if stats.refused.fetch_add(1, Ordering::Relaxed) % 1024 == 0 {
                tracing::warn!(listener = name, %peer, limit = limits.max_connections, "connection refused: the listener's connection limit is reached");
            }
            continue;
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = hyper::service::service_fn(move |request: Request| {
            let response = handler(request, peer);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let result = match tls {
                None => {
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
                Some(tls) => {
                    let Some(stream) = tls.accept(stream, limits.header_timeout).await else {
                        return;
                    };
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(socket);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(listener = name, "requests still in flight after the shutdown grace; closing them");
        }
    }
}
