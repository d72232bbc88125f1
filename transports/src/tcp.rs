//! The TCP listener of one core (RFC 7766): pipelined queries answered as they complete.
//!
//! ```text
//! accept ─▶ connection task ─ read frames (idle deadline) ─▶ ingress ─┬ hit / local ─▶ outbox
//!                                                                     └ miss ─▶ task ─▶ outbox
//! outbox: a read's answers (or a miss's) ─▶ one send now; if the socket is full, a writer task
//!         finishes (write deadline) while the reader waits
//! ```
//! A connection holds at most `tcp.maxPipelined` queries in flight and stops reading while a
//! write waits on a full socket, so a client that does not read its answers stalls only itself. A client silent for
//! `tcp.idleTimeout`, or that takes longer than that to send a frame it started, is closed.
//! A `Drop` decision closes the connection (nothing is sent).
//!
//! DNS over TLS (RFC 7858) is the same connection loop on a rustls stream: the listener
//! accepts, the handshake must finish within `tls.handshakeTimeout` (a client that stalls in
//! it holds only its own task), then queries flow exactly as on TCP, with responses padded
//! for clients that ask (RFC 8467).

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures_lite::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{Client, Decision, FrameBuffer, Stage, ingress};

use crate::deadline::{until, within};
use crate::metrics::{CoreMetrics, Transport};
use crate::tls::TlsConfig;
use crate::worker::{Active, Worker};

/// Accepts connections until the task is dropped.
pub(crate) async fn serve(worker: Rc<Worker>, listener: TcpListener) {
    accept_loop(worker, listener, |worker, stream, peer| async move {
        connection(&worker, stream, peer, Transport::Tcp).await;
    })
    .await;
}

/// Accepts DNS-over-TLS connections until the task is dropped.
pub(crate) async fn serve_tls(worker: Rc<Worker>, listener: TcpListener, tls: TlsConfig) {
    accept_loop(worker, listener, move |worker, stream, peer| {
        let config = tls.load().dot.clone();
        async move {
            if let Some(stream) = handshake(&worker, stream, config).await {
                connection(&worker, stream, peer, Transport::Dot).await;
            }
        }
    })
    .await;
}

/// The accept loop of a stream listener (TCP, DoT, DoH): each connection runs `serve` in a task
/// of its own. All count against `tcp.maxConnectionsPerCore`.
pub(crate) async fn accept_loop<F, Fut>(worker: Rc<Worker>, listener: TcpListener, serve: F)
where
    F: Fn(Rc<Worker>, TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(error = %e, "tcp accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if worker.tcp_connections.get() >= worker.settings().tcp_max_connections {
            CoreMetrics::bump(&worker.metrics.tcp_refused);
            continue; // dropping the stream closes it
        }
        let _ = stream.set_nodelay(true);
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        worker.tcp_connections.set(worker.tcp_connections.get() + 1);
        let task = serve(worker.clone(), stream, peer);
        let worker = worker.clone();
        glommio::spawn_local(async move {
            task.await;
            worker.tcp_connections.set(worker.tcp_connections.get() - 1);
        })
        .detach();
    }
}

/// The server side of a TLS handshake, bounded by `tls.handshakeTimeout`; `None` (connection
/// closed) when it fails or takes too long.
pub(crate) async fn handshake(
    worker: &Worker,
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
) -> Option<futures_rustls::server::TlsStream<TcpStream>> {
    let acceptor = futures_rustls::TlsAcceptor::from(config);
    let deadline = Instant::now() + worker.settings().tls_handshake_timeout;
    match until(deadline, acceptor.accept(stream)).await {
        Some(Ok(stream)) => {
            CoreMetrics::bump(&worker.metrics.tls_handshakes);
            Some(stream)
        }
        Some(Err(e)) => {
            CoreMetrics::bump(&worker.metrics.tls_handshake_failures);
            tracing::debug!(error = %e, "tls handshake failed");
            None
        }
        None => {
            CoreMetrics::bump(&worker.metrics.tls_handshake_failures);
            tracing::debug!("tls handshake timed out");
            None
        }
    }
}

async fn connection<S>(worker: &Rc<Worker>, stream: S, peer: SocketAddr, transport: Transport)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let client = Client {
        addr: peer.ip(),
        datagram: false,
    };
    let (mut reader, writer) = futures_lite::io::split(stream);
    let settings = worker.settings();
    let pipelined = settings.tcp_max_pipelined.max(1) as u64;
    let outbox = Rc::new(Outbox::new(writer));
    let permits = Rc::new(Semaphore::new(pipelined));
    let mut frames = FrameReader::new();
    let mut out = Vec::with_capacity(1024);
    loop {
        let message = match frames.buffered() {
            Some(message) => message,
            None => {
                // Every whole frame of the last read is answered or on its way: the answers
                // so far go out in one write before waiting for more.
                Outbox::flush(&outbox, worker);
                if !outbox.room().await {
                    break; // the client does not read, or a write failed
                }
                let Some(message) = frames.next(worker, &mut reader).await else {
                    break;
                };
                message
            }
        };
        worker.metrics.query(transport);
        let Ok(permit) = permits.acquire_static_permit(1).await else {
            break;
        };
        let settings = worker.settings();
        let options = match transport {
            Transport::Dot => {
                ReplyOptions::encrypted(settings.edns_payload, settings.tcp_idle_timeout)
            }
            _ => ReplyOptions::tcp(settings.edns_payload, settings.tcp_idle_timeout),
        };
        let stage = Stage {
            local: &settings.local,
            options: &options,
            ratelimit: &settings.ratelimit,
            lameduck: worker.lameduck(),
        };
        let decision = ingress(
            &message,
            &stage,
            client,
            &mut worker.limiter.borrow_mut(),
            Instant::now(),
            &mut out,
        );
        match decision {
            Decision::Respond => outbox.push(worker, &out),
            Decision::Drop => {
                worker.metrics.dropped();
                break;
            }
            Decision::Resolve(query) => {
                let now = Instant::now();
                let hit = worker.serve_local(query.key(), now, |answer| {
                    answer.write_response(&query, now, None, &options, &mut out)
                });
                if hit.is_some() {
                    outbox.push(worker, &out);
                    continue;
                }
                let (worker, outbox) = (worker.clone(), outbox.clone());
                glommio::spawn_local(async move {
                    let _active = Active::enter(&worker);
                    let _permit = permit;
                    let Ok(query) = Query::parse(&message) else {
                        return;
                    };
                    let answer = worker.resolve(query.key()).await;
                    let mut out = Vec::with_capacity(1024);
                    answer.write_response(&query, Instant::now(), None, &options, &mut out);
                    outbox.push(&worker, &out);
                    Outbox::flush(&outbox, &worker);
                })
                .detach();
            }
        }
    }
    // Answers still owed: the queries being resolved (each holds a permit until its answer is
    // queued), then everything queued, each write bounded as always; then the write side
    // closes.
    let _all = permits.acquire(pipelined).await;
    Outbox::flush(&outbox, worker);
    outbox.close().await;
}

/// Answer bytes a connection queues behind a write that waits on a full socket; past that it
/// stops reading queries until the client reads.
const QUEUED_MAX: usize = 16 * 1024;

/// Splits a TCP byte stream into DNS messages (RFC 1035 §4.2.2 two-byte length prefix),
/// whatever the segment boundaries: bytes are read in large chunks into the core's
/// [`FrameBuffer`] and frames cut from them.
struct FrameReader {
    frames: FrameBuffer,
}

impl FrameReader {
    fn new() -> Self {
        Self {
            frames: FrameBuffer::new(),
        }
    }

    /// A whole message already read, if there is one.
    fn buffered(&mut self) -> Option<Vec<u8>> {
        self.frames.next_frame()
    }

    /// The next message; `None` closes the connection (EOF, error, idle or slow client).
    async fn next<R: AsyncRead + Unpin>(
        &mut self,
        worker: &Worker,
        reader: &mut ReadHalf<R>,
    ) -> Option<Vec<u8>> {
        loop {
            if let Some(message) = self.frames.next_frame() {
                return Some(message);
            }
            // A frame is incomplete: wait for more, at most the idle timeout. A client that sent
            // part of a frame and stalls is closed the same way.
            let idle = worker.settings().tcp_idle_timeout;
            match within(idle, reader.read(self.frames.spare())).await {
                Some(Ok(0)) | Some(Err(_)) => return None,
                Some(Ok(n)) => self.frames.filled(n),
                None => {
                    CoreMetrics::bump(&worker.metrics.tcp_timeouts);
                    return None;
                }
            }
        }
    }
}

/// The answers of one connection on their way to the socket.
///
/// Answers are appended, each with its length, to one buffer. Whoever appends the last answer
/// of a batch (the reader when it has answered a read's frames, a resolving task when its
/// answer is ready) hands the buffer to the socket at once if no write is under way: one
/// `send` for all of them, without a task switch. Only when the socket cannot take it all now
/// (a client that does not read) does a writer task take the write half and finish, each
/// write bounded by `tcp.idleTimeout`; the reader stops reading while more than
/// [`QUEUED_MAX`] bytes wait (a client that does not read stalls only itself).
pub(crate) struct Outbox<W> {
    state: RefCell<OutboxState<W>>,
    /// A client's connection: a stuck write counts in `kudurru_tcp_timeouts_total` (an
    /// upstream connection's does not; its queries time out and count there).
    client: bool,
}

struct OutboxState<W> {
    /// Length-prefixed answers not yet written.
    pending: Vec<u8>,
    /// The write half, while no writer task holds it.
    writer: Option<WriteHalf<W>>,
    /// A write failed or timed out: the connection is done.
    failed: bool,
    /// Woken when a writer task finishes: the reader waiting for room, or the close.
    waiting: Option<Waker>,
}

impl<W: AsyncWrite + Unpin + 'static> Outbox<W> {
    /// The outbox of a client's connection.
    pub(crate) fn new(writer: WriteHalf<W>) -> Self {
        Self::with(writer, true)
    }

    /// The outbox of a connection to an upstream.
    pub(crate) fn upstream(writer: WriteHalf<W>) -> Self {
        Self::with(writer, false)
    }

    fn with(writer: WriteHalf<W>, client: bool) -> Self {
        Self {
            state: RefCell::new(OutboxState {
                pending: Vec::with_capacity(1024),
                writer: Some(writer),
                failed: false,
                waiting: None,
            }),
            client,
        }
    }

    /// Queues one answer, prefixed with its length, and counts it.
    fn push(&self, worker: &Worker, message: &[u8]) {
        worker
            .metrics
            .response(wire::header_rcode(message).unwrap_or(0));
        self.push_frame(message);
    }

    /// Queues one message, prefixed with its length.
    pub(crate) fn push_frame(&self, message: &[u8]) {
        let mut state = self.state.borrow_mut();
        if !state.failed {
            state
                .pending
                .extend_from_slice(&(message.len() as u16).to_be_bytes());
            state.pending.extend_from_slice(message);
        }
    }

    /// Whether a write failed or timed out: nothing queued will be written.
    pub(crate) fn has_failed(&self) -> bool {
        self.state.borrow().failed
    }

    /// Writes what is queued now if the socket takes it, else leaves it to a writer task; does
    /// nothing while a writer task runs (it takes what is queued when it is done).
    pub(crate) fn flush(this: &Rc<Self>, worker: &Rc<Worker>) {
        let mut state = this.state.borrow_mut();
        if state.pending.is_empty() || state.failed {
            return;
        }
        let Some(mut writer) = state.writer.take() else {
            return;
        };
        let mut batch = std::mem::take(&mut state.pending);
        drop(state);
        match write_now(&mut writer, &mut batch) {
            Ok(true) => {
                // All written: the emptied buffer (and its capacity) queues the next answers.
                let mut state = this.state.borrow_mut();
                state.writer = Some(writer);
                state.pending = batch;
            }
            Ok(false) => {
                glommio::spawn_local(Self::write_rest(
                    this.clone(),
                    writer,
                    batch,
                    worker.clone(),
                ))
                .detach();
            }
            Err(_) => this.fail(),
        }
    }

    /// The writer task: finishes `batch`, then whatever was queued meanwhile, then gives the
    /// write half back.
    async fn write_rest(
        this: Rc<Self>,
        mut writer: WriteHalf<W>,
        mut batch: Vec<u8>,
        worker: Rc<Worker>,
    ) {
        loop {
            let write = async {
                writer.write_all(&batch).await?;
                // A TLS stream holds written records until flushed.
                writer.flush().await
            };
            match within(worker.settings().tcp_idle_timeout, write).await {
                Some(Ok(())) => {}
                Some(Err(_)) => return this.fail(),
                None => {
                    if this.client {
                        CoreMetrics::bump(&worker.metrics.tcp_timeouts);
                    }
                    return this.fail();
                }
            }
            batch.clear();
            let mut state = this.state.borrow_mut();
            if state.pending.is_empty() {
                state.pending = batch;
                state.writer = Some(writer);
                if let Some(waker) = state.waiting.take() {
                    waker.wake();
                }
                return;
            }
            std::mem::swap(&mut batch, &mut state.pending);
        }
    }

    fn fail(&self) {
        let mut state = self.state.borrow_mut();
        state.failed = true;
        state.pending = Vec::new();
        if let Some(waker) = state.waiting.take() {
            waker.wake();
        }
    }

    /// Whether the reader may read more: waits while a writer task is stuck with more than
    /// [`QUEUED_MAX`] bytes queued; `false` once a write failed.
    async fn room(&self) -> bool {
        std::future::poll_fn(|cx| {
            let mut state = self.state.borrow_mut();
            if state.failed {
                return Poll::Ready(false);
            }
            if state.writer.is_some() || state.pending.len() <= QUEUED_MAX {
                return Poll::Ready(true);
            }
            state.waiting = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Waits for a running writer task to finish, then closes the write side (a TLS
    /// `close_notify`, a TCP FIN).
    async fn close(&self) {
        let writer = std::future::poll_fn(|cx| {
            let mut state = self.state.borrow_mut();
            if state.failed {
                return Poll::Ready(None);
            }
            match state.writer.take() {
                Some(writer) => Poll::Ready(Some(writer)),
                None => {
                    state.waiting = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        if let Some(mut writer) = writer {
            let _ = writer.close().await;
        }
    }
}

/// Writes `batch` as far as the socket takes it without waiting; `Ok(true)` when all of it went
/// out (and was flushed), `Ok(false)` with the rest left in `batch` when the socket is full.
fn write_now<W: AsyncWrite + Unpin>(writer: &mut W, batch: &mut Vec<u8>) -> io::Result<bool> {
    // Polled once with a waker that does nothing: a stream that has to wait registers it and
    // the writer task's next poll replaces it with its own.
    let mut cx = Context::from_waker(Waker::noop());
    let mut written = 0;
    while written < batch.len() {
        match Pin::new(&mut *writer).poll_write(&mut cx, &batch[written..]) {
            Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(n)) => written += n,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => break,
        }
    }
    batch.drain(..written);
    if !batch.is_empty() {
        return Ok(false);
    }
    match Pin::new(writer).poll_flush(&mut cx) {
        Poll::Ready(Ok(())) => Ok(true),
        Poll::Ready(Err(e)) => Err(e),
        Poll::Pending => Ok(false),
    }
}
