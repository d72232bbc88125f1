//! DNS over HTTPS (RFC 8484) on HTTP/2 for the stream flow, as a [`Carrier`] of a
//! [`crate::pipe::Pipe`]: one request (POST or GET, `--method`) per query, written by the
//! sans-IO client kudurru's DoH upstreams use too ([`kudurru_core::http2::client`]); this
//! module is its socket shell. A response other than `200`, or a reset stream, delivers
//! nothing (the pipe counts it by status).
//!
//! ```text
//! flow ─ query ─▶ Client::send: HEADERS (+ DATA) into the output ─ wake ─▶ writer task ─▶ TLS
//! inbox ◀─ answer ─ Client::receive: frames ◀─ reader task ◀─ TLS
//! ```
//! A query costs an encoded head and a copy, no task and no future of its own: the generator
//! must stay far below its core's capacity at the rates it offers, or it queues queries and
//! packs them into fewer, larger writes than a client that keeps up would (which a server
//! answers more cheaply per query). Queries due together leave in one write, as on DoT.
//!
//! The client keeps to the server's limits (stream limit, flow control, refused streams).

use std::cell::RefCell;
use std::rc::Rc;
use std::task::{Poll, Waker};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kudurru_core::http2::client::{Client, Outcome};
pub use kudurru_core::http2::client::{Method, split_uri};
use kudurru_core::http2::frame;

use crate::pipe::{Failures, Inbox, SharedInbox};

/// What the flow, the reader task and the writer task of one connection share. The
/// connection has ended once its inbox is closed.
struct Shared {
    client: Client<()>,
    /// The writer task waits for output here.
    writer: Option<Waker>,
}

impl Shared {
    fn close(&mut self, inbox: &SharedInbox) {
        Inbox::close(inbox);
        if let Some(writer) = self.writer.take() {
            writer.wake();
        }
    }
}

/// An HTTP/2 connection's request side, for [`crate::pipe::Carrier::H2`]. Dropping it cancels
/// its tasks, which closes the connection.
pub(crate) struct H2 {
    shared: Rc<RefCell<Shared>>,
    inbox: SharedInbox,
    _tasks: [glommio::Task<()>; 2],
}

impl H2 {
    /// Sends one query; its answer reaches the inbox, or its failure the pipe's failures.
    pub(crate) fn send(&self, message: Vec<u8>) {
        if self.inbox.borrow().closed() {
            return;
        }
        let mut shared = self.shared.borrow_mut();
        if shared.client.send(message, ()).is_err() {
            shared.close(&self.inbox);
            return;
        }
        if let Some(writer) = shared.writer.take() {
            writer.wake();
        }
    }
}

/// Starts HTTP/2 on `io` (a TLS stream that negotiated `h2`) for `uri`: answers go to `inbox`,
/// failed requests to `failures`, and the inbox is closed when the connection ends.
pub(crate) fn start<T>(
    io: T,
    uri: &str,
    method: Method,
    inbox: &SharedInbox,
    failures: &Failures,
) -> H2
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (mut reader, mut writer) = futures_lite::io::split(io);
    let shared = Rc::new(RefCell::new(Shared {
        client: Client::new(uri, method),
        writer: None,
    }));
    let (state, answers, failed) = (shared.clone(), inbox.clone(), failures.clone());
    let read = glommio::spawn_local(async move {
        let mut buffer =
            vec![0u8; 4 * (frame::HEADER_LEN + frame::DEFAULT_MAX_FRAME_SIZE as usize)];
        let mut filled = 0;
        loop {
            let n = match reader.read(&mut buffer[filled..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            filled += n;
            let mut state = state.borrow_mut();
            let used = state
                .client
                .receive(&buffer[..filled], &mut |outcome| match outcome {
                    Outcome::Answer((), answer) => answers.borrow_mut().deliver(&answer),
                    Outcome::Failed((), status) => {
                        *failed.borrow_mut().entry(status).or_default() += 1;
                    }
                });
            let Ok(used) = used else { break };
            buffer.copy_within(used..filled, 0);
            filled -= used;
            if !state.client.output().is_empty()
                && let Some(writer) = state.writer.take()
            {
                writer.wake();
            }
        }
        state.borrow_mut().close(&answers);
    });
    let (state, answers) = (shared.clone(), inbox.clone());
    let write = glommio::spawn_local(async move {
        let mut chunk = Vec::new();
        loop {
            let open = std::future::poll_fn(|cx| {
                if answers.borrow().closed() {
                    return Poll::Ready(false);
                }
                let mut state = state.borrow_mut();
                if state.client.output().is_empty() {
                    state.writer = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                state.client.take_output(&mut chunk);
                Poll::Ready(true)
            })
            .await;
            if !open || writer.write_all(&chunk).await.is_err() || writer.flush().await.is_err() {
                break;
            }
        }
        state.borrow_mut().close(&answers);
    });
    H2 {
        shared,
        inbox: inbox.clone(),
        _tasks: [read, write],
    }
}
