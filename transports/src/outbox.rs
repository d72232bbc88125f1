//! The outbox of a DNS-over-TCP connection, client's or upstream's: length-prefixed messages
//! queued, and written at once when the socket takes them, by a writer task when it does not.
//!
//! ```text
//! push ─▶ pending ─▶ flush ─▶ write_now ─┬ all out ─▶ buffer kept for the next batch
//!                                        └ socket full ─▶ writer task (tcp.idleTimeout per write)
//! ```

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_lite::AsyncWriteExt;
use futures_lite::io::{AsyncWrite, WriteHalf};
use kudurru_core::wire;

use crate::deadline::within;
use crate::metrics::CoreMetrics;
use crate::settings::SharedSettings;

/// Answer bytes a connection queues behind a write that waits on a full socket; past that it
/// stops reading queries until the client reads.
const QUEUED_MAX: usize = 16 * 1024;

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
    pub(crate) fn push(&self, metrics: &CoreMetrics, message: &[u8]) {
        metrics.response(wire::header_rcode(message).unwrap_or(0));
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
    /// nothing while a writer task runs (it takes what is queued when it is done). A writer
    /// task counts a stuck write in `metrics` and reads `tcp.idleTimeout` from `settings` when
    /// it has to wait, as the core's own writes do.
    pub(crate) fn flush(this: &Rc<Self>, metrics: &Arc<CoreMetrics>, settings: &SharedSettings) {
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
                    metrics.clone(),
                    settings.clone(),
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
        metrics: Arc<CoreMetrics>,
        settings: SharedSettings,
    ) {
        loop {
            let write = async {
                writer.write_all(&batch).await?;
                // A TLS stream holds written records until flushed.
                writer.flush().await
            };
            match within(settings.load().tcp_idle_timeout, write).await {
                Some(Ok(())) => {}
                Some(Err(_)) => return this.fail(),
                None => {
                    if this.client {
                        CoreMetrics::bump(&metrics.tcp_timeouts);
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
    pub(crate) async fn room(&self) -> bool {
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
    pub(crate) async fn close(&self) {
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
