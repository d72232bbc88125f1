//! DNS over HTTPS (RFC 8484) on HTTP/2 for the stream flow, as a [`Carrier`] of a
//! [`crate::pipe::Pipe`]: one request (POST or GET, `--method`) per query. A response other
//! than `200`, or a reset stream, delivers nothing (the pipe counts it by status).

use std::rc::Rc;

use base64::Engine;
use bytes::Bytes;
use futures_lite::io::{AsyncRead, AsyncWrite};

use crate::pipe::{Carrier, Inbox, SharedInbox};

/// How queries are carried (`--method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `POST` with an `application/dns-message` body.
    Post,
    /// `GET ?dns=` base64url.
    Get,
}

/// An HTTP/2 connection's request side, for [`Carrier::H2`].
#[derive(Clone)]
pub(crate) struct H2 {
    requests: h2::client::SendRequest<Bytes>,
    uri: Rc<str>,
    method: Method,
}

/// Starts HTTP/2 on `io` (a TLS stream that negotiated `h2`) for `uri`; the connection's
/// driver closes `inbox` when it ends.
pub(crate) async fn start<T>(
    io: T,
    uri: Rc<str>,
    method: Method,
    inbox: &SharedInbox,
) -> Result<Carrier, String>
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
    let inbox = inbox.clone();
    // Drives the connection until it fails or every handle to it is gone.
    glommio::spawn_local(async move {
        let _ = connection.await;
        Inbox::close(&inbox);
    })
    .detach();
    Ok(Carrier::H2(H2 {
        requests,
        uri,
        method,
    }))
}

/// The request for `message` at `uri`: a POST with it as the body, or a GET with it in `?dns=`.
pub(crate) fn request(uri: &str, method: Method, message: &[u8]) -> http::request::Builder {
    match method {
        Method::Post => http::Request::post(uri)
            .header(http::header::CONTENT_TYPE, "application/dns-message")
            .header(http::header::ACCEPT, "application/dns-message"),
        Method::Get => {
            let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(message);
            http::Request::get(format!("{uri}?dns={encoded}"))
                .header(http::header::ACCEPT, "application/dns-message")
        }
    }
}

impl H2 {
    /// One query as one request: its answer, or `Err(status)` (0 for a reset or a connection
    /// error).
    pub(crate) async fn exchange(self, message: Vec<u8>) -> Result<Vec<u8>, u16> {
        let request = request(&self.uri, self.method, &message);
        exchange(self.requests, request, self.method, message).await
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
