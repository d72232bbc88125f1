//! The DNS-over-HTTPS listener of one core (RFC 8484): HTTP/2 and HTTP/1.1 on one TLS port,
//! chosen by ALPN.
//!
//! ```text
//! accept ─▶ TLS handshake (ALPN h2, http/1.1) ─┬ h2 ─▶ connection loop ─ stream ─▶ task ─┐
//!                                              └ http/1.1 ─▶ request after request ──────┤
//!       request ─▶ core::doh::request (status 4xx) ─▶ answer::answer ─▶ 200 | stream abort ◀┘
//! ```
//! Request rules (paths, methods, media type, base64url, sizes) live in `kudurru_core::doh`;
//! this module moves bytes. HTTP/2 takes up to `tcp.maxPipelined` concurrent streams per
//! connection, HTTP/1.1 answers pipelined requests in order. A connection with nothing in
//! flight for `tcp.idleTimeout` is closed (HTTP/2 with GOAWAY). A pipeline drop aborts the
//! request: RST_STREAM(CANCEL) on HTTP/2, the connection closed without a response on HTTP/1.1.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpListener;
use kudurru_core::Client;
use kudurru_core::doh::{self, Request, RequestError};
use kudurru_core::wire::ReplyOptions;
use tokio_util::compat::FuturesAsyncReadCompatExt;

use crate::answer::{answer, spawn_queued};
use crate::metrics::{CoreMetrics, HttpVersion, Transport};
use crate::runtime::TlsConfig;
use crate::tcp;
use crate::upstream::{until, within};
use crate::worker::Worker;

/// Accepts DNS-over-HTTPS connections for `path` until the task is dropped.
pub(crate) async fn serve(
    worker: Rc<Worker>,
    listener: TcpListener,
    tls: TlsConfig,
    path: Arc<str>,
    alt_svc: Option<Arc<str>>,
) {
    let path: Rc<str> = Rc::from(&*path);
    let alt_svc: Option<Rc<str>> = alt_svc.map(|value| Rc::from(&*value));
    tcp::accept_loop(worker, listener, move |worker, stream, peer| {
        let config = tls.load().https.clone();
        let (path, alt_svc) = (path.clone(), alt_svc.clone());
        async move {
            let Some(stream) = tcp::handshake(&worker, stream, config).await else {
                return;
            };
            let endpoint = Endpoint::new(worker, path, peer, alt_svc);
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                CoreMetrics::bump(
                    &endpoint.worker.metrics.doh_connections[HttpVersion::H2 as usize],
                );
                http2(Rc::new(endpoint), stream).await;
            } else {
                CoreMetrics::bump(
                    &endpoint.worker.metrics.doh_connections[HttpVersion::Http1 as usize],
                );
                http1(&endpoint, stream).await;
            }
        }
    })
    .await;
}

/// What every request on one connection shares.
pub(crate) struct Endpoint {
    pub(crate) worker: Rc<Worker>,
    /// The one path served.
    pub(crate) path: Rc<str>,
    pub(crate) client: Client,
    pub(crate) peer: SocketAddr,
    /// The `Alt-Svc` value advertising DNS over HTTP/3 (RFC 7838), when it is served.
    pub(crate) alt_svc: Option<Rc<str>>,
}

/// A response to a request that reached the endpoint.
pub(crate) enum Reply {
    /// 200 with a DNS answer.
    Answer(Vec<u8>),
    /// An error status with its reason.
    Error(Status),
    /// The pipeline dropped the query: abort, send nothing.
    Abort,
}

/// An HTTP error: its status code and the reason sent in the JSON body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    code: u16,
    reason: &'static str,
}

impl From<RequestError> for Status {
    fn from(e: RequestError) -> Self {
        Self {
            code: e.status(),
            reason: e.reason(),
        }
    }
}

pub(crate) const TIMEOUT: Status = Status {
    code: 408,
    reason: "the request body did not arrive in time",
};
const LENGTH_REQUIRED: Status = Status {
    code: 411,
    reason: "a POST needs a Content-Length",
};

impl Endpoint {
    /// The endpoint of one connection from `peer`.
    pub(crate) fn new(
        worker: Rc<Worker>,
        path: Rc<str>,
        peer: SocketAddr,
        alt_svc: Option<Rc<str>>,
    ) -> Self {
        Self {
            worker,
            path,
            client: Client {
                addr: peer.ip(),
                datagram: false,
            },
            peer,
            alt_svc,
        }
    }

    /// Answers one DNS message that a valid request carried.
    pub(crate) async fn resolve(&self, message: &[u8]) -> Reply {
        if let Err(e) = doh::check_message(message) {
            return Reply::Error(e.into());
        }
        let options = {
            let settings = self.worker.settings();
            ReplyOptions {
                payload: settings.edns_payload,
                tcp_keepalive: None,
                padding: true,
            }
        };
        match answer(&self.worker, message, self.client, &options).await {
            Some(out) => Reply::Answer(out),
            None => Reply::Abort,
        }
    }

    /// Counts a rejected request and logs it at debug.
    fn rejected(&self, status: Status) {
        self.worker.metrics.doh_rejected(status.code);
        tracing::debug!(peer = %self.peer, status = status.code, reason = status.reason, "DoH request rejected");
    }

    /// The head and body of the HTTP/2 or HTTP/3 response to `reply`; `None` when the request
    /// is to be aborted. Counts a rejection.
    pub(crate) fn response(&self, reply: Reply) -> Option<(http::Response<()>, Vec<u8>)> {
        let (status, content_type, cache, payload) = match reply {
            Reply::Answer(out) => (200, doh::MEDIA_TYPE, Some(doh::max_age(&out)), out),
            Reply::Error(status) => {
                self.rejected(status);
                (status.code, "application/json", None, error_body(status))
            }
            Reply::Abort => return None,
        };
        let mut response = http::Response::builder()
            .status(status)
            .header(http::header::DATE, &*date())
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::CONTENT_LENGTH, payload.len());
        if let Some(age) = cache {
            response = response.header(http::header::CACHE_CONTROL, format!("max-age={age}"));
        }
        if status == 405 {
            response = response.header(http::header::ALLOW, "GET, POST");
        }
        if let Some(alt_svc) = &self.alt_svc {
            response = response.header(http::header::ALT_SVC, &**alt_svc);
        }
        // Every part is valid by construction.
        response.body(()).ok().map(|response| (response, payload))
    }
}

/// The `Date` of a response (RFC 9110 §6.6.1, required of a server with a clock), formatted
/// once a second per core.
fn date() -> Rc<str> {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, Rc<str>)> = std::cell::RefCell::new((u64::MAX, Rc::from("")));
    }
    let now = std::time::SystemTime::now();
    let second = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            *cached = (second, Rc::from(httpdate::fmt_http_date(now)));
        }
        cached.1.clone()
    })
}

/// The JSON body of an error response.
fn error_body(status: Status) -> Vec<u8> {
    format!(
        "{{\"error\":\"{}\",\"status\":{}}}\n",
        status.reason, status.code
    )
    .into_bytes()
}

// ---- HTTP/2 -------------------------------------------------------------------------------

/// Serves one HTTP/2 connection: this task drives the connection, each stream runs in a task
/// of its own.
async fn http2<S>(endpoint: Rc<Endpoint>, stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let worker = &endpoint.worker;
    let settings = worker.settings();
    let idle = settings.tcp_idle_timeout;
    let streams = settings.tcp_max_pipelined.max(1) as u32;
    drop(settings);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(streams)
        .max_header_list_size(doh::MAX_HEAD as u32)
        // Room for one full-size message per stream without waiting for a window update.
        .initial_window_size(doh::MAX_MESSAGE as u32)
        .initial_connection_window_size(doh::MAX_MESSAGE as u32 * 4)
        .max_send_buffer_size(64 * 1024);
    let handshake = builder.handshake::<_, Bytes>(stream.compat());
    let mut connection = match within(idle, handshake).await {
        Some(Ok(connection)) => connection,
        Some(Err(e)) => {
            tracing::debug!(peer = %endpoint.peer, error = %e, "HTTP/2 handshake failed");
            return;
        }
        None => {
            CoreMetrics::bump(&worker.metrics.tcp_timeouts);
            return;
        }
    };
    let in_flight = Rc::new(Cell::new(0usize));
    loop {
        match within(idle, connection.accept()).await {
            Some(Some(Ok((request, respond)))) => {
                let (endpoint, in_flight) = (endpoint.clone(), in_flight.clone());
                in_flight.set(in_flight.get() + 1);
                // Queued: run at once, each stream would be answered, and h2 would flush,
                // request by request (a `sendto` per 2.7 responses, measured).
                spawn_queued(async move {
                    h2_stream(&endpoint, request, respond).await;
                    in_flight.set(in_flight.get() - 1);
                });
            }
            Some(Some(Err(e))) => {
                tracing::debug!(peer = %endpoint.peer, error = %e, "HTTP/2 connection error");
                break;
            }
            Some(None) => break,
            // Idle only when nothing is in flight; streams in flight finish first.
            None if in_flight.get() > 0 => {}
            None => {
                CoreMetrics::bump(&worker.metrics.tcp_timeouts);
                // GOAWAY, then let the peer see it (bounded: a peer that never reads is cut).
                connection.graceful_shutdown();
                let drain = async { while let Some(Ok(_)) = connection.accept().await {} };
                within(idle, drain).await;
                break;
            }
        }
    }
}

/// Answers one HTTP/2 stream.
async fn h2_stream(
    endpoint: &Endpoint,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (head, mut body) = request.into_parts();
    let target = head
        .uri
        .path_and_query()
        .map_or(head.uri.path(), |p| p.as_str());
    let content_type = head.headers.get(http::header::CONTENT_TYPE);
    endpoint.worker.metrics.query(Transport::Doh);
    let reply = match doh::request(
        head.method.as_str().as_bytes(),
        target.as_bytes(),
        &endpoint.path,
        content_type.map(|v| v.as_bytes()),
    ) {
        Err(e) => Reply::Error(e.into()),
        Ok(Request::Get(message)) => endpoint.resolve(&message).await,
        Ok(Request::Post) => {
            let idle = endpoint.worker.settings().tcp_idle_timeout;
            match within(idle, h2_body(&mut body)).await {
                Some(Ok(message)) => endpoint.resolve(&message).await,
                Some(Err(BodyError::TooLarge)) => Reply::Error(RequestError::TooLarge.into()),
                Some(Err(BodyError::Stream)) => return,
                None => Reply::Error(TIMEOUT),
            }
        }
    };
    if !body.is_end_stream() {
        // An upload still in flight (an error answered before its body): take it to its end,
        // bounded, so the client sees a complete exchange rather than a stream reset.
        let idle = endpoint.worker.settings().tcp_idle_timeout;
        if within(idle, h2_body(&mut body)).await.is_none() {
            respond.send_reset(h2::Reason::CANCEL);
            return;
        }
    }
    let Some((response, payload)) = endpoint.response(reply) else {
        respond.send_reset(h2::Reason::CANCEL);
        return;
    };
    // Errors here mean the client reset the stream or the connection is gone: nothing to do.
    if let Ok(mut send) = respond.send_response(response, false) {
        let _ = send.send_data(Bytes::from(payload), true);
    }
}

enum BodyError {
    TooLarge,
    Stream,
}

/// Reads a request body of at most [`doh::MAX_MESSAGE`] bytes, returning flow-control credit
/// as it goes. A longer body is read to its end and discarded (up to [`LINGER_BYTES`]), so
/// the client gets its 413 after a complete upload instead of a stream error mid-way.
async fn h2_body(body: &mut h2::RecvStream) -> Result<Vec<u8>, BodyError> {
    let mut message = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|_| BodyError::Stream)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        total += chunk.len();
        if doh::check_length(total).is_ok() {
            message.extend_from_slice(&chunk);
        } else if total > LINGER_BYTES {
            break;
        }
        // The usual POST is one DATA frame with END_STREAM: done, without asking h2 again.
        if body.is_end_stream() {
            break;
        }
    }
    doh::check_length(total).map_err(|_| BodyError::TooLarge)?;
    Ok(message)
}

// ---- HTTP/1.1 -----------------------------------------------------------------------------

/// Serves one HTTP/1.1 connection: requests in order, one at a time.
async fn http1<S>(endpoint: &Endpoint, mut stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buffer: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let idle = endpoint.worker.settings().tcp_idle_timeout;
        let deadline = Instant::now() + idle;
        // The head, read within the idle timeout.
        let head = loop {
            match doh::parse_http1_head(&buffer, &endpoint.path) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(e) => {
                    let status = Status::from(e);
                    endpoint.rejected(status);
                    if respond_http1(
                        &mut stream,
                        deadline,
                        error_response(status, false, endpoint.alt_svc.as_deref()),
                    )
                    .await
                    {
                        linger(&mut stream).await;
                    }
                    return;
                }
            }
            if let Err(ended) = read_more(&mut stream, &mut buffer, deadline).await {
                if ended == Ended::TimedOut {
                    CoreMetrics::bump(&endpoint.worker.metrics.tcp_timeouts);
                }
                return;
            }
        };
        endpoint.worker.metrics.query(Transport::Doh);
        // A POST without a length or chunking has a body whose end we cannot know; a chunked
        // body is read (and its end known) only for a POST.
        let post = matches!(head.request, Ok(Request::Post));
        let framed = if post {
            head.content_length.is_some() || head.chunked
        } else {
            !head.chunked
        };
        let mut consumed = head.len;
        let reply = match head.request {
            Err(e) => Reply::Error(Status::from(e)),
            Ok(Request::Get(message)) => endpoint.resolve(&message).await,
            Ok(Request::Post) if head.chunked => {
                let body_deadline = Instant::now() + idle;
                loop {
                    match doh::chunked_body(&buffer[head.len..]) {
                        Ok(Some((message, len))) => {
                            consumed += len;
                            break endpoint.resolve(&message).await;
                        }
                        Ok(None) => {}
                        Err(e) => break Reply::Error(e.into()),
                    }
                    if read_more(&mut stream, &mut buffer, body_deadline)
                        .await
                        .is_err()
                    {
                        break Reply::Error(TIMEOUT);
                    }
                }
            }
            Ok(Request::Post) => match head.content_length {
                None => Reply::Error(LENGTH_REQUIRED),
                Some(len) if doh::check_length(len).is_err() => {
                    Reply::Error(RequestError::TooLarge.into())
                }
                Some(len) => {
                    let body_deadline = Instant::now() + idle;
                    let mut complete = true;
                    while buffer.len() < head.len + len {
                        if read_more(&mut stream, &mut buffer, body_deadline)
                            .await
                            .is_err()
                        {
                            complete = false;
                            break;
                        }
                    }
                    if complete {
                        consumed += len;
                        endpoint.resolve(&buffer[head.len..head.len + len]).await
                    } else {
                        Reply::Error(TIMEOUT)
                    }
                }
            },
        };
        // Another request can follow only once this one's body was read to its end: unread
        // bytes cannot be skipped safely.
        let body_read = if head.chunked {
            consumed > head.len
        } else {
            consumed == head.len + head.content_length.unwrap_or(0)
        };
        let keep_alive = head.keep_alive && framed && body_read;
        let response = match reply {
            Reply::Answer(out) => answer_response(&out, keep_alive, endpoint.alt_svc.as_deref()),
            Reply::Error(status) => {
                endpoint.rejected(status);
                error_response(status, keep_alive, endpoint.alt_svc.as_deref())
            }
            // Drop: close without a response.
            Reply::Abort => return,
        };
        if !respond_http1(&mut stream, Instant::now() + idle, response).await {
            return;
        }
        if !keep_alive {
            linger(&mut stream).await;
            return;
        }
        buffer.drain(..consumed.min(buffer.len()));
    }
}

/// Most bytes read and discarded after the last response on a closing connection.
const LINGER_BYTES: usize = 128 * 1024;
/// How long a closing connection keeps reading.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// Closes our side (TLS close_notify), then reads and discards what the client still sends, for
/// a bounded time and amount: closing with unread bytes makes the kernel send a reset, which
/// can destroy the response before the client reads it (a rejected body in flight).
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let deadline = Instant::now() + LINGER_TIME;
    if until(deadline, stream.close()).await.is_none() {
        return;
    }
    let (mut sink, mut discarded) = (Vec::new(), 0);
    while discarded < LINGER_BYTES && read_more(stream, &mut sink, deadline).await.is_ok() {
        discarded += sink.len();
        sink.clear();
    }
}

/// Why a read got no more bytes.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// EOF or an error.
    Closed,
    /// The deadline passed.
    TimedOut,
}

/// Reads more bytes into `buffer` before `deadline`.
async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(), Ended> {
    let mut chunk = [0u8; 4096];
    match until(deadline, stream.read(&mut chunk)).await {
        Some(Ok(0)) | Some(Err(_)) => Err(Ended::Closed),
        None => Err(Ended::TimedOut),
        Some(Ok(n)) => {
            buffer.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The `alt-svc` header line of an HTTP/1.1 response, if any.
fn alt_svc_line(alt_svc: Option<&str>) -> String {
    alt_svc.map_or_else(String::new, |value| format!("alt-svc: {value}\r\n"))
}

fn answer_response(out: &[u8], keep_alive: bool, alt_svc: Option<&str>) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 200 OK\r\ndate: {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: max-age={}\r\n{}{}\r\n",
        date(),
        doh::MEDIA_TYPE,
        out.len(),
        doh::max_age(out),
        alt_svc_line(alt_svc),
        if keep_alive { "" } else { "connection: close\r\n" },
    )
    .into_bytes();
    response.extend_from_slice(out);
    response
}

fn error_response(status: Status, keep_alive: bool, alt_svc: Option<&str>) -> Vec<u8> {
    let body = error_body(status);
    let mut response = format!(
        "HTTP/1.1 {} {}\r\ndate: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}{}{}\r\n",
        status.code,
        reason_phrase(status.code),
        date(),
        body.len(),
        alt_svc_line(alt_svc),
        if status.code == 405 {
            "allow: GET, POST\r\n"
        } else {
            ""
        },
        if keep_alive {
            ""
        } else {
            "connection: close\r\n"
        },
    )
    .into_bytes();
    response.extend_from_slice(&body);
    response
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        _ => "Error",
    }
}

/// Writes and flushes one response before `deadline`; `false` when that failed.
async fn respond_http1<S: AsyncWrite + Unpin>(
    stream: &mut S,
    deadline: Instant,
    response: Vec<u8>,
) -> bool {
    let write = async {
        stream.write_all(&response).await?;
        stream.flush().await
    };
    matches!(until(deadline, write).await, Some(Ok(())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_carry_their_status_and_a_json_body() {
        let response =
            String::from_utf8(error_response(RequestError::Method.into(), true, None)).unwrap();
        assert!(
            response.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{response}"
        );
        assert!(response.contains("allow: GET, POST\r\n"));
        assert!(!response.contains("connection: close"));
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["status"], 405);
        assert_eq!(json["error"], "only GET and POST are allowed");
    }
}
