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

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpListener;
use kudurru_core::Client;
use kudurru_core::doh::{self, Request, RequestError};
use kudurru_core::http2::{self, BodyError, Method};
use kudurru_core::wire::ReplyOptions;

use crate::accept;
use crate::answer::{Now, answer, answer_miss, answer_now, spawn_queued};
use crate::deadline::until;
use crate::metrics::{CoreMetrics, HttpVersion, Transport};
use crate::tls::TlsConfig;
use crate::worker::{Active, Worker};

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
    accept::tcp(worker, listener, move |worker, stream, peer| {
        let config = tls.load().https.clone();
        let (path, alt_svc) = (path.clone(), alt_svc.clone());
        async move {
            let Some(stream) = accept::tls_handshake(&worker, stream, config).await else {
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

    /// How answers to this endpoint's queries are written: padded when asked (RFC 8467).
    pub(crate) fn reply_options(&self) -> ReplyOptions {
        ReplyOptions {
            payload: self.worker.settings().edns_payload,
            tcp_keepalive: None,
            padding: true,
        }
    }

    /// Answers one DNS message that a valid request carried.
    pub(crate) async fn resolve(&self, message: &[u8]) -> Reply {
        if let Err(e) = doh::check_message(message) {
            return Reply::Error(e.into());
        }
        let options = self.reply_options();
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
}

/// The `Date` of a response (RFC 9110 §6.6.1, required of a server with a clock), formatted
/// once a second per core.
fn date() -> Rc<str> {
    thread_local! {
        static DATE: RefCell<(u64, Rc<str>)> = RefCell::new((u64::MAX, Rc::from("")));
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

/// Output waiting to be written past which a connection stops reading requests.
const HTTP2_OUTPUT_LIMIT: usize = 64 * 1024;
/// Bytes read at once; holds at least one whole frame (RFC 9113 §4.2).
const HTTP2_READ_BUFFER: usize = 32 * 1024;

/// What the connection task and the tasks answering its cache misses share.
struct Http2Shared {
    connection: RefCell<http2::Connection>,
    /// Answers being resolved by their own tasks.
    in_flight: Cell<usize>,
    /// The connection task, to wake when an answer is written.
    waker: Cell<Option<Waker>>,
}

impl Http2Shared {
    fn wake(&self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// Serves one HTTP/2 connection with kudurru's sans-IO codec (`kudurru_core::http2`): this
/// task reads frames, answers cache hits at once and writes; a miss runs in a task of its own
/// that writes its response into the connection and wakes this one. Reading stops while
/// `tcp.maxPipelined` answers are in flight or output waits, so a client that floods or does
/// not read holds only its own connection.
async fn http2<S>(endpoint: Rc<Endpoint>, stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let settings = endpoint.worker.settings();
    let idle = settings.tcp_idle_timeout;
    let max_in_flight = settings.tcp_max_pipelined.max(1);
    drop(settings);
    let connection = http2::Connection::new(http2::Config {
        max_streams: max_in_flight as u32,
        max_head: doh::MAX_HEAD,
        max_body: doh::MAX_MESSAGE,
        connection_window: doh::MAX_MESSAGE as u32 * 16,
    });
    let shared = Rc::new(Http2Shared {
        connection: RefCell::new(connection),
        in_flight: Cell::new(0),
        waker: Cell::new(None),
    });
    let now = Instant::now();
    let driver = Http2Driver {
        io: stream,
        endpoint,
        shared,
        input: vec![0; HTTP2_READ_BUFFER],
        filled: 0,
        requests: Vec::new(),
        unflushed: false,
        eof: false,
        idle,
        max_in_flight,
        last_request: now,
        blocked_since: None,
        closing_at: None,
        timer: None,
        timer_at: now,
    };
    driver.await;
}

/// The connection task of [`http2`], written out as a future: reads, writes and the deadline
/// timer are all polled from one place, so none of them is ever dropped half-way.
struct Http2Driver<S> {
    io: S,
    endpoint: Rc<Endpoint>,
    shared: Rc<Http2Shared>,
    input: Vec<u8>,
    filled: usize,
    requests: Vec<http2::Request>,
    /// Bytes written since the last flush (a TLS stream holds records until flushed).
    unflushed: bool,
    /// The client closed its side: no more requests.
    eof: bool,
    idle: Duration,
    max_in_flight: usize,
    /// When the last request arrived (or the connection opened).
    last_request: Instant,
    /// Since when output has been waiting for the client to read.
    blocked_since: Option<Instant>,
    /// GOAWAY was sent for idleness: the connection closes at this instant (or at EOF).
    closing_at: Option<Instant>,
    timer: Option<glommio::timer::Timer>,
    timer_at: Instant,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Future for Http2Driver<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match this.shared.waker.take() {
            Some(waker) if waker.will_wake(cx.waker()) => this.shared.waker.set(Some(waker)),
            _ => this.shared.waker.set(Some(cx.waker().clone())),
        }
        loop {
            match this.write(cx) {
                Poll::Ready(Err(())) => return Poll::Ready(()),
                Poll::Ready(Ok(())) => continue,
                Poll::Pending => {}
            }
            let (failed, waiting) = {
                let connection = this.shared.connection.borrow();
                (connection.failed(), connection.output().len())
            };
            let in_flight = this.shared.in_flight.get();
            // Done when nothing more can come in and every answer owed was written.
            if (this.eof || failed) && in_flight == 0 && waiting == 0 && !this.unflushed {
                return Poll::Ready(());
            }
            if !this.eof
                && !failed
                && in_flight < this.max_in_flight
                && waiting < HTTP2_OUTPUT_LIMIT
            {
                debug_assert!(this.filled < this.input.len(), "a whole frame always fits");
                match Pin::new(&mut this.io).poll_read(cx, &mut this.input[this.filled..]) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        this.eof = true;
                        continue;
                    }
                    Poll::Ready(Ok(n)) => {
                        this.filled += n;
                        this.process();
                        continue;
                    }
                    Poll::Pending => {}
                }
            }
            match this.poll_timer(cx) {
                Deadline::Pending => return Poll::Pending,
                Deadline::Acted => continue,
                Deadline::Close => return Poll::Ready(()),
            }
        }
    }
}

/// What the deadline timer of an HTTP/2 connection did.
enum Deadline {
    /// Armed (or nothing to wait for).
    Pending,
    /// A deadline passed and was handled.
    Acted,
    /// The connection is to be closed now.
    Close,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Http2Driver<S> {
    /// Writes waiting output, then flushes it. `Ready(Ok)`: progress, call again.
    fn write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        let mut connection = self.shared.connection.borrow_mut();
        let output = connection.output();
        let progress = if !output.is_empty() {
            match Pin::new(&mut self.io).poll_write(cx, output) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Ready(Ok(n)) => {
                    connection.sent(n);
                    self.unflushed = true;
                    Poll::Ready(Ok(()))
                }
                Poll::Pending => Poll::Pending,
            }
        } else if self.unflushed {
            match Pin::new(&mut self.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    self.unflushed = false;
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Pending => Poll::Pending,
            }
        } else {
            return Poll::Pending;
        };
        // A client that stops reading is cut after the idle timeout.
        if progress.is_pending() {
            self.blocked_since.get_or_insert_with(Instant::now);
        } else {
            self.blocked_since = None;
        }
        progress
    }

    /// Feeds what was read to the codec and answers the requests it completed.
    fn process(&mut self) {
        let now = Instant::now();
        let used = {
            let mut connection = self.shared.connection.borrow_mut();
            match connection.receive(&self.input[..self.filled], now, &mut self.requests) {
                Ok(used) => used,
                Err(e) => {
                    // GOAWAY is in the output; the connection ends once it is written.
                    tracing::debug!(peer = %self.endpoint.peer, error = %e, "HTTP/2 connection error");
                    self.filled
                }
            }
        };
        self.input.copy_within(used..self.filled, 0);
        self.filled -= used;
        if !self.requests.is_empty() {
            self.last_request = now;
            self.answer_requests();
        }
    }

    /// Answers what can be answered at once; spawns a task for each cache miss.
    fn answer_requests(&mut self) {
        for request in self.requests.drain(..) {
            let stream = request.stream;
            let answer = classify(
                &self.endpoint,
                Transport::Doh,
                request.method,
                &request.target,
                request.content_type.as_deref(),
                request.body,
            );
            match answer {
                Answer::Ready(reply) => {
                    let mut connection = self.shared.connection.borrow_mut();
                    h2_respond(&mut connection, &self.endpoint, stream, reply);
                }
                Answer::Miss(message) => {
                    self.shared.in_flight.set(self.shared.in_flight.get() + 1);
                    let (endpoint, shared) = (self.endpoint.clone(), self.shared.clone());
                    spawn_queued(async move {
                        let _active = Active::enter(&endpoint.worker);
                        let options = endpoint.reply_options();
                        let out = answer_miss(&endpoint.worker, &message, &options).await;
                        let mut connection = shared.connection.borrow_mut();
                        h2_respond(&mut connection, &endpoint, stream, Reply::Answer(out));
                        drop(connection);
                        shared.in_flight.set(shared.in_flight.get() - 1);
                        shared.wake();
                    });
                }
            }
        }
    }

    /// Arms the deadline timer, or acts on the deadline that passed. Deadlines: no request for
    /// `tcp.idleTimeout` with nothing in flight (GOAWAY, then close after a short linger);
    /// a request body not complete in that time (408); output the client does not read for
    /// that long (close).
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Deadline {
        let expiry = self.shared.connection.borrow().next_expiry(self.idle);
        let busy = self.shared.in_flight.get() > 0;
        let idle_at = (!busy && self.closing_at.is_none()).then(|| self.last_request + self.idle);
        let deadline = [
            idle_at,
            expiry,
            self.blocked_since.map(|since| since + self.idle),
            self.closing_at,
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(deadline) = deadline else {
            self.timer = None;
            return Deadline::Pending;
        };
        if self.timer.is_none() || deadline < self.timer_at {
            self.timer = Some(glommio::timer::Timer::new(
                deadline.saturating_duration_since(Instant::now()),
            ));
            self.timer_at = deadline;
        }
        let fired = self
            .timer
            .as_mut()
            .is_some_and(|timer| Pin::new(timer).poll(cx).is_ready());
        if !fired {
            return Deadline::Pending;
        }
        self.timer = None;
        let now = Instant::now();
        if self.closing_at.is_some_and(|at| at <= now)
            || self
                .blocked_since
                .is_some_and(|since| since + self.idle <= now)
        {
            return Deadline::Close;
        }
        if expiry.is_some_and(|at| at <= now) {
            let mut connection = self.shared.connection.borrow_mut();
            connection.expire(now, self.idle, &mut self.requests);
            drop(connection);
            self.answer_requests();
        }
        if idle_at.is_some_and(|at| at <= now) {
            CoreMetrics::bump(&self.endpoint.worker.metrics.tcp_timeouts);
            // GOAWAY (RFC 9113 §6.8), then a short linger so the client reads it before the
            // close (unread bytes at close would make the kernel send a reset).
            self.shared.connection.borrow_mut().shut_down();
            self.closing_at = Some(now + LINGER_TIME);
        }
        Deadline::Acted
    }
}

/// A request answered at once, or a miss to resolve.
pub(crate) enum Answer {
    Ready(Reply),
    Miss(Vec<u8>),
}

/// Classifies one HTTP/2 or HTTP/3 request (counted as a query on `transport`) and answers it
/// if that needs no waiting.
pub(crate) fn classify(
    endpoint: &Endpoint,
    transport: Transport,
    method: Method,
    target: &[u8],
    content_type: Option<&[u8]>,
    body: Result<Vec<u8>, BodyError>,
) -> Answer {
    endpoint.worker.metrics.query(transport);
    let message = match (
        doh::request(method.as_bytes(), target, &endpoint.path, content_type),
        body,
    ) {
        (_, Err(BodyError::HeadTooLarge)) => {
            return Answer::Ready(Reply::Error(RequestError::HeadTooLarge.into()));
        }
        (Err(e), _) => return Answer::Ready(Reply::Error(e.into())),
        (Ok(Request::Get(message)), _) => message,
        (Ok(Request::Post), Ok(body)) => body,
        (Ok(Request::Post), Err(BodyError::TimedOut)) => {
            return Answer::Ready(Reply::Error(TIMEOUT));
        }
        (Ok(Request::Post), Err(_)) => {
            return Answer::Ready(Reply::Error(RequestError::TooLarge.into()));
        }
    };
    if let Err(e) = doh::check_message(&message) {
        return Answer::Ready(Reply::Error(e.into()));
    }
    let options = endpoint.reply_options();
    let mut out = Vec::with_capacity(512);
    match answer_now(
        &endpoint.worker,
        &message,
        endpoint.client,
        &options,
        &mut out,
    ) {
        Now::Answered => Answer::Ready(Reply::Answer(out)),
        Now::Dropped => Answer::Ready(Reply::Abort),
        Now::Miss => Answer::Miss(message),
    }
}

/// A response field: name, value, and whether the value repeats across responses (worth
/// remembering in an HPACK table).
pub(crate) type HeadField<'a> = (&'static [u8], &'a [u8], bool);

/// The head of a DoH response as HTTP/2 and HTTP/3 send it: `:status` and the fields.
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    content_type: &'static str,
    date: Rc<str>,
    length: Decimal,
    max_age: Option<Decimal>,
    alt_svc: Option<Rc<str>>,
}

impl ResponseHead {
    /// The head and body answering `reply`; `None` when the request is to be aborted. Counts
    /// a rejection.
    pub(crate) fn new(endpoint: &Endpoint, reply: Reply) -> Option<(Self, Vec<u8>)> {
        let (status, content_type, payload) = match reply {
            Reply::Answer(out) => (200, doh::MEDIA_TYPE, out),
            Reply::Error(status) => {
                endpoint.rejected(status);
                (status.code, "application/json", error_body(status))
            }
            Reply::Abort => return None,
        };
        let head = Self {
            status,
            content_type,
            date: date(),
            length: Decimal::new("", payload.len() as u64),
            max_age: (status == 200)
                .then(|| Decimal::new("max-age=", u64::from(doh::max_age(&payload)))),
            alt_svc: endpoint.alt_svc.clone(),
        };
        Some((head, payload))
    }

    /// The most fields a response has: [`Self::fields`]'s array is this long.
    pub(crate) const MAX_FIELDS: usize = 6;

    /// Each field as (name, value, whether the value repeats across responses).
    pub(crate) fn fields(&self) -> impl Iterator<Item = HeadField<'_>> {
        let fields: [Option<HeadField<'_>>; Self::MAX_FIELDS] = [
            Some((&b"date"[..], self.date.as_bytes(), true)),
            Some((&b"content-type"[..], self.content_type.as_bytes(), true)),
            Some((&b"content-length"[..], self.length.as_bytes(), false)),
            self.max_age
                .as_ref()
                .map(|age| (&b"cache-control"[..], age.as_bytes(), false)),
            (self.status == 405).then_some((&b"allow"[..], &b"GET, POST"[..], true)),
            self.alt_svc
                .as_ref()
                .map(|alt_svc| (&b"alt-svc"[..], alt_svc.as_bytes(), true)),
        ];
        fields.into_iter().flatten()
    }
}

/// Writes the response to `reply` on `stream` (or aborts it); counts a rejection.
fn h2_respond(connection: &mut http2::Connection, endpoint: &Endpoint, stream: u32, reply: Reply) {
    let Some((head, payload)) = ResponseHead::new(endpoint, reply) else {
        return connection.cancel(stream);
    };
    let mut fields = [http2::Field {
        name: b"",
        value: b"",
        remember: false,
    }; ResponseHead::MAX_FIELDS];
    let mut n = 0;
    for (slot, (name, value, remember)) in fields.iter_mut().zip(head.fields()) {
        *slot = http2::Field {
            name,
            value,
            remember,
        };
        n += 1;
    }
    connection.respond(stream, head.status, &fields[..n], &payload);
}

/// A prefix and a decimal number, formatted without allocating.
struct Decimal {
    bytes: [u8; 32],
    len: usize,
}

impl Decimal {
    /// `prefix` (at most 12 bytes) followed by `n` in decimal.
    fn new(prefix: &str, n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let prefix = &prefix.as_bytes()[..prefix.len().min(12)];
        let len = prefix.len() + digits.len() - at;
        let mut bytes = [0u8; 32];
        bytes[..prefix.len()].copy_from_slice(prefix);
        bytes[prefix.len()..len].copy_from_slice(&digits[at..]);
        Self { bytes, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
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
const LINGER_TIME: Duration = Duration::from_secs(1);

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
