//! DNS over HTTPS on HTTP/2 (RFC 8484, RFC 9113): the connection driver around kudurru's sans-IO
//! codec (`kudurru_core::http2`). Up to `tcp.maxPipelined` concurrent streams per connection;
//! a connection with nothing in flight for `tcp.idleTimeout` gets GOAWAY and is closed; a
//! pipeline drop resets the stream (RST_STREAM(CANCEL)). When the core drains for shutdown, the
//! connection sends GOAWAY with the last stream id it processed, answers those streams, and
//! closes after a short linger (or when the client closes).

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncRead, AsyncWrite};
use kudurru_core::doh;
use kudurru_core::http2;

use super::endpoint::{Answer, Endpoint, LINGER_TIME, Reply, ResponseHead, classify};
use crate::answer::{answer_miss, spawn_queued};
use crate::core_context::Active;
use crate::metrics::{CoreMetrics, Transport};

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
pub(super) async fn serve<S>(endpoint: Rc<Endpoint>, stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let settings = endpoint.worker.context().settings();
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
        draining: false,
        timer: None,
        timer_at: now,
    };
    driver.await;
}

/// The connection task of [`serve`], written out as a future: reads, writes and the deadline
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
    /// The core drains for shutdown: GOAWAY was sent, the streams below it are answered.
    draining: bool,
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
            if !this.draining && this.endpoint.admission().poll_drain(cx).is_ready() {
                // GOAWAY with the last stream processed (RFC 9113 §6.8): the client sends no
                // new request here, the codec ignores any above it, those below it are answered.
                this.draining = true;
                this.shared.connection.borrow_mut().shut_down();
                continue;
            }
            if this.draining
                && this.closing_at.is_none()
                && in_flight == 0
                && waiting == 0
                && !this.unflushed
            {
                // Every answer owed is out: a short linger lets the client read them and close.
                this.closing_at = Some(Instant::now() + LINGER_TIME);
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
                Answer::Miss(message, settings, lookup, path_id, received) => {
                    self.shared.in_flight.set(self.shared.in_flight.get() + 1);
                    let (endpoint, shared) = (self.endpoint.clone(), self.shared.clone());
                    spawn_queued(async move {
                        let _active = Active::enter(endpoint.worker.context());
                        let client = endpoint.client(path_id.as_ref());
                        let reply = answer_miss(
                            &endpoint.worker,
                            &settings,
                            endpoint.origin(Transport::Doh),
                            &message,
                            lookup,
                            client,
                            received,
                        )
                        .await
                        .map_or(Reply::Abort, Reply::Answer);
                        let mut connection = shared.connection.borrow_mut();
                        h2_respond(&mut connection, &endpoint, stream, reply);
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
            CoreMetrics::bump(&self.endpoint.worker.context().metrics.tcp_timeouts);
            // GOAWAY (RFC 9113 §6.8), then a short linger so the client reads it before the
            // close (unread bytes at close would make the kernel send a reset).
            self.shared.connection.borrow_mut().shut_down();
            self.closing_at = Some(now + LINGER_TIME);
        }
        Deadline::Acted
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
