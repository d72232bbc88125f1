//! A connection that carries one query per request (DoH over HTTP/2 or HTTP/3, DoQ) dressed as
//! a TCP connection carrying length-prefixed DNS messages, so the stream flow (schedule,
//! in-flight table, timeouts, `--streams`, reconnects) drives every such transport unchanged.
//!
//! ```text
//! flow writer ─ frames ─▶ Pipe::poll_write ─▶ one task per frame: the carrier's exchange
//! flow reader ◀─ frames ─ Pipe::poll_read ◀── answer, framed ◀──────────────┘
//! ```
//! An exchange that delivers no answer (an HTTP status other than 200, a reset stream) sends
//! nothing to the reader: that query times out, and the pipe counts it by status (0 for a
//! reset or a connection error) for the report's `http_failures`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures_lite::io::{AsyncRead, AsyncWrite};
use kudurru_core::FrameBuffer;

use crate::{doh, quic};

/// What the pipe's exchange tasks and its reader share.
#[derive(Default)]
pub(crate) struct Inbox {
    /// Framed answers not yet read.
    frames: Vec<u8>,
    reader: Option<Waker>,
    /// The connection ended.
    closed: bool,
}

/// The inbox of one pipe.
pub(crate) type SharedInbox = Rc<RefCell<Inbox>>;

impl Inbox {
    fn wake(&mut self) {
        if let Some(waker) = self.reader.take() {
            waker.wake();
        }
    }

    /// Marks the connection as ended (its driver stopped): the reader sees EOF.
    pub(crate) fn close(inbox: &SharedInbox) {
        let mut inbox = inbox.borrow_mut();
        inbox.closed = true;
        inbox.wake();
    }

    /// Whether the connection ended.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    pub(crate) fn deliver(&mut self, answer: &[u8]) {
        self.frames
            .extend_from_slice(&(answer.len() as u16).to_be_bytes());
        self.frames.extend_from_slice(answer);
        self.wake();
    }
}

/// Exchanges that delivered no answer, by HTTP status (0: stream reset or connection error).
pub(crate) type Failures = Rc<RefCell<BTreeMap<u16, u64>>>;

/// How one query travels.
pub(crate) enum Carrier {
    /// DNS over HTTPS on HTTP/2.
    H2(doh::H2),
    /// DNS over QUIC.
    Doq(quinn::Connection),
    /// DNS over HTTPS on HTTP/3.
    H3(quic::H3),
}

/// A request-per-query connection as a framed DNS stream.
pub(crate) struct Pipe {
    carrier: Carrier,
    outgoing: FrameBuffer,
    inbox: SharedInbox,
    failures: Failures,
}

impl Pipe {
    /// A pipe over `carrier`, whose driver closes `inbox` when the connection ends.
    pub(crate) fn new(carrier: Carrier, inbox: SharedInbox, failures: Failures) -> Self {
        Self {
            carrier,
            outgoing: FrameBuffer::new(),
            inbox,
            failures,
        }
    }

    /// Sends one DNS message; its answer arrives framed through `poll_read`.
    fn dispatch(&self, message: Vec<u8>) {
        match &self.carrier {
            // HTTP/2 requests are written by the connection's own writer task.
            Carrier::H2(h2) => h2.send(message),
            Carrier::Doq(connection) => {
                let connection = connection.clone();
                self.spawn(async move { quic::doq_exchange(&connection, message).await });
            }
            Carrier::H3(h3) => self.spawn(h3.clone().exchange(message)),
        }
    }

    /// Runs one request in a task of its own, delivering its answer or counting its failure.
    fn spawn(&self, exchange: impl Future<Output = Result<Vec<u8>, u16>> + 'static) {
        let (inbox, failures) = (self.inbox.clone(), self.failures.clone());
        glommio::spawn_local(async move {
            match exchange.await {
                Ok(answer) => inbox.borrow_mut().deliver(&answer),
                Err(status) => *failures.borrow_mut().entry(status).or_default() += 1,
            }
        })
        .detach();
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.inbox.borrow().closed {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        let mut written = 0;
        while written < buf.len() {
            let spare = this.outgoing.spare();
            let n = spare.len().min(buf.len() - written);
            spare[..n].copy_from_slice(&buf[written..written + n]);
            this.outgoing.filled(n);
            written += n;
            while let Some(message) = this.outgoing.next_frame() {
                this.dispatch(message);
            }
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Pipe {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut inbox = self.inbox.borrow_mut();
        if !inbox.frames.is_empty() {
            let n = inbox.frames.len().min(buf.len());
            buf[..n].copy_from_slice(&inbox.frames[..n]);
            inbox.frames.drain(..n);
            return Poll::Ready(Ok(n));
        }
        if inbox.closed {
            return Poll::Ready(Ok(0));
        }
        inbox.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}
