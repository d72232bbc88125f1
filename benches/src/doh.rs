//! DNS over HTTPS (RFC 8484, HTTP/2) for the stream flow: a [`DohPipe`] looks like a TCP
//! connection carrying length-prefixed DNS messages, so the TCP flow (schedule, in-flight
//! table, timeouts, `--streams`, reconnects) drives DoH unchanged.
//!
//! ```text
//! flow writer ─ frames ─▶ DohPipe::poll_write ─▶ one task per frame: HTTP/2 request (POST or GET)
//! flow reader ◀─ frames ─ DohPipe::poll_read ◀── 200 + body, framed ◀──────────┘
//! ```
//! A response other than `200 application/dns-message`, or a reset stream, delivers nothing:
//! that query times out, and the pipe counts it by status for the report's stderr line.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use base64::Engine;
use bytes::Bytes;
use futures_lite::io::{AsyncRead, AsyncWrite};
use kudurru_core::FrameBuffer;

/// How queries are carried (`--method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `POST` with an `application/dns-message` body.
    Post,
    /// `GET ?dns=` base64url.
    Get,
}

/// What the pipe's request tasks and its reader share.
#[derive(Default)]
struct Inbox {
    /// Framed answers not yet read.
    frames: Vec<u8>,
    reader: Option<Waker>,
    /// The HTTP/2 connection ended.
    closed: bool,
}

/// Requests that delivered no answer, by HTTP status (0: stream reset or connection error).
pub(crate) type Failures = Rc<RefCell<BTreeMap<u16, u64>>>;

impl Inbox {
    fn wake(&mut self) {
        if let Some(waker) = self.reader.take() {
            waker.wake();
        }
    }
}

/// An HTTP/2 connection dressed as a framed DNS stream.
pub(crate) struct DohPipe {
    requests: h2::client::SendRequest<Bytes>,
    uri: Rc<str>,
    method: Method,
    outgoing: FrameBuffer,
    inbox: Rc<RefCell<Inbox>>,
    failures: Failures,
}

impl DohPipe {
    /// Starts HTTP/2 on `io` (a TLS stream that negotiated `h2`) for `uri`.
    pub(crate) async fn start<T>(
        io: T,
        uri: Rc<str>,
        method: Method,
        failures: Failures,
    ) -> Result<Self, String>
    where
        T: AsyncRead + AsyncWrite + Unpin + 'static,
    {
        use tokio_util::compat::FuturesAsyncReadCompatExt;
        let (requests, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(4 << 20)
            .handshake::<_, Bytes>(io.compat())
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let inbox = Rc::new(RefCell::new(Inbox::default()));
        {
            // Drives the connection until it fails or every handle to it is gone.
            let inbox = inbox.clone();
            glommio::spawn_local(async move {
                let _ = connection.await;
                let mut inbox = inbox.borrow_mut();
                inbox.closed = true;
                inbox.wake();
            })
            .detach();
        }
        Ok(Self {
            requests,
            uri,
            method,
            outgoing: FrameBuffer::new(),
            inbox,
            failures,
        })
    }

    /// Sends one DNS message as a request; its answer arrives framed through `poll_read`.
    fn dispatch(&self, message: Vec<u8>) {
        let (requests, inbox, failures) = (
            self.requests.clone(),
            self.inbox.clone(),
            self.failures.clone(),
        );
        let request = match self.method {
            Method::Post => http::Request::post(&*self.uri)
                .header(http::header::CONTENT_TYPE, "application/dns-message")
                .header(http::header::ACCEPT, "application/dns-message"),
            Method::Get => {
                let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&message);
                http::Request::get(format!("{}?dns={encoded}", self.uri))
                    .header(http::header::ACCEPT, "application/dns-message")
            }
        };
        let method = self.method;
        glommio::spawn_local(async move {
            match exchange(requests, request, method, message).await {
                Ok(answer) => {
                    let mut inbox = inbox.borrow_mut();
                    inbox
                        .frames
                        .extend_from_slice(&(answer.len() as u16).to_be_bytes());
                    inbox.frames.extend_from_slice(&answer);
                    inbox.wake();
                }
                Err(status) => *failures.borrow_mut().entry(status).or_default() += 1,
            }
        })
        .detach();
    }
}

/// Attempts per query when the server refuses the stream before processing it.
const REFUSED_ATTEMPTS: usize = 4;

/// One request and its answer; `Err(status)` (0 for a reset or a connection error) otherwise.
/// A stream refused with `REFUSED_STREAM` was not processed (RFC 9113 §8.7) and is sent again:
/// a new connection's first burst can exceed the server's `SETTINGS_MAX_CONCURRENT_STREAMS`
/// before its SETTINGS frame arrives.
async fn exchange(
    requests: h2::client::SendRequest<Bytes>,
    request: http::request::Builder,
    method: Method,
    message: Vec<u8>,
) -> Result<Vec<u8>, u16> {
    let request = request.body(()).map_err(|_| 0u16)?;
    let message = Bytes::from(message);
    for _ in 0..REFUSED_ATTEMPTS {
        match attempt(requests.clone(), request.clone(), method, message.clone()).await {
            Err(Failure::Refused) => continue,
            Err(Failure::Other(status)) => return Err(status),
            Ok(answer) => return Ok(answer),
        }
    }
    Err(0)
}

enum Failure {
    Refused,
    Other(u16),
}

impl From<h2::Error> for Failure {
    fn from(e: h2::Error) -> Self {
        if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
            Self::Refused
        } else {
            Self::Other(0)
        }
    }
}

async fn attempt(
    requests: h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    method: Method,
    message: Bytes,
) -> Result<Vec<u8>, Failure> {
    let mut requests = requests.ready().await?;
    let post = method == Method::Post;
    let (response, mut body) = requests.send_request(request, !post)?;
    if post {
        body.send_data(message, true)?;
    }
    let response = response.await?;
    let status = response.status().as_u16();
    let mut stream = response.into_body();
    let mut answer = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        answer.extend_from_slice(&chunk);
        if answer.len() > usize::from(u16::MAX) {
            return Err(Failure::Other(status));
        }
    }
    if status != 200 {
        return Err(Failure::Other(status));
    }
    Ok(answer)
}

impl AsyncWrite for DohPipe {
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

impl AsyncRead for DohPipe {
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
