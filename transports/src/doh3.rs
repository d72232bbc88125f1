//! The DNS-over-HTTP/3 listener of one core: RFC 8484 over HTTP/3 (RFC 9114), with the same
//! request rules, statuses and bodies as DoH over HTTP/2.
//!
//! ```text
//! quic::accept_loop ─▶ connection task: h3 connection (control + QPACK streams) ─ accept
//!   ─▶ request task: head ─▶ core::doh::request ─▶ body (POST) ─▶ answer ─▶ 200 | 4xx
//!                                                                  └ drop ─▶ H3_REQUEST_CANCELLED
//! ```
//! h3 and h3-quinn run unchanged on quinn's glommio runtime ([`crate::quic`]). Up to
//! `tcp.maxPipelined` requests at once per connection; an idle connection is closed by QUIC's
//! idle timeout (`tcp.idleTimeout`). A drop aborts the request: the response stream is reset
//! and the request stream stopped, both with H3_REQUEST_CANCELLED; the connection goes on.

use std::rc::Rc;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use glommio::sync::Gate;
use h3::error::Code;
use h3::server::{RequestResolver, RequestStream};
use kudurru_core::doh::{self, Request, RequestError};

use crate::answer::spawn_queued;
use crate::doh::{Endpoint, Reply, TIMEOUT};
use crate::metrics::{CoreMetrics, HttpVersion, Transport};
use crate::quic;
use crate::runtime::TlsConfig;
use crate::upstream::within;
use crate::worker::Worker;

/// Unidirectional streams an HTTP/3 client opens: control, QPACK encoder and decoder (RFC 9114
/// §6.2, RFC 9204 §4.2), and one spare for extensions the server ignores.
const UNI_STREAMS: u32 = 4;

type Stream = RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Accepts DNS-over-HTTP/3 connections for `path` on `endpoint` until the task is dropped.
pub(crate) async fn serve(
    worker: Rc<Worker>,
    endpoint: quinn::Endpoint,
    tls: TlsConfig,
    path: Arc<str>,
) {
    let path: Rc<str> = Rc::from(&*path);
    quic::accept_loop(
        worker,
        endpoint,
        move || tls.load().h3.clone(),
        UNI_STREAMS,
        move |worker, connection| {
            let path = path.clone();
            async move { serve_connection(worker, connection, path).await }
        },
    )
    .await;
}

/// Serves one connection: each request runs in a task of its own.
async fn serve_connection(worker: Rc<Worker>, connection: quinn::Connection, path: Rc<str>) {
    CoreMetrics::bump(&worker.metrics.doh_connections[HttpVersion::H3 as usize]);
    let peer = connection.remote_address();
    let endpoint = Rc::new(Endpoint::new(worker, path, peer, None));
    let built = h3::server::builder()
        .max_field_section_size(doh::MAX_HEAD as u64)
        .build::<_, Bytes>(h3_quinn::Connection::new(connection))
        .await;
    let mut h3 = match built {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!(peer = %peer, error = %e, "HTTP/3 connection setup failed");
            return;
        }
    };
    // Requests in flight: dropping the h3 connection closes it, so it waits for them.
    let in_flight = Gate::new();
    loop {
        match h3.accept().await {
            Ok(Some(resolver)) => {
                let Ok(pass) = in_flight.enter() else { break };
                let endpoint = endpoint.clone();
                spawn_queued(async move {
                    request(&endpoint, resolver).await;
                    drop(pass);
                });
            }
            // The client sent GOAWAY (or closed): answer what it already asked.
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(peer = %peer, error = %e, "HTTP/3 connection ended");
                break;
            }
        }
    }
    let idle = endpoint.worker.settings().tcp_idle_timeout;
    let _ = within(idle, in_flight.close()).await;
}

/// Answers one request.
async fn request(endpoint: &Endpoint, resolver: RequestResolver<h3_quinn::Connection, Bytes>) {
    let idle = endpoint.worker.settings().tcp_idle_timeout;
    let (head, mut stream) = match within(idle, resolver.resolve_request()).await {
        Some(Ok(request)) => request,
        Some(Err(e)) => {
            tracing::debug!(peer = %endpoint.peer, error = %e, "HTTP/3 request head unreadable");
            return;
        }
        None => {
            CoreMetrics::bump(&endpoint.worker.metrics.tcp_timeouts);
            return;
        }
    };
    let (head, ()) = head.into_parts();
    let target = head
        .uri
        .path_and_query()
        .map_or(head.uri.path(), |p| p.as_str());
    let content_type = head.headers.get(http::header::CONTENT_TYPE);
    endpoint.worker.metrics.query(Transport::Doh3);
    let mut body_read = true;
    let reply = match doh::request(
        head.method.as_str().as_bytes(),
        target.as_bytes(),
        &endpoint.path,
        content_type.map(|v| v.as_bytes()),
    ) {
        Err(e) => {
            body_read = false;
            Reply::Error(e.into())
        }
        Ok(Request::Get(message)) => endpoint.resolve(&message).await,
        Ok(Request::Post) => match within(idle, body(&mut stream)).await {
            Some(Ok(message)) => endpoint.resolve(&message).await,
            Some(Err(BodyError::TooLarge)) => {
                body_read = false;
                Reply::Error(RequestError::TooLarge.into())
            }
            Some(Err(BodyError::Stream)) => return,
            None => {
                body_read = false;
                Reply::Error(TIMEOUT)
            }
        },
    };
    let Some((response, payload)) = endpoint.response(reply) else {
        cancel(&mut stream);
        return;
    };
    // Errors mean the client cancelled the request or the connection is gone.
    let sent = async {
        stream.send_response(response).await?;
        stream.send_data(Bytes::from(payload)).await?;
        stream.finish().await
    };
    if within(idle, sent).await.is_none() {
        cancel(&mut stream);
        return;
    }
    if !body_read {
        // Answered before the upload ended: the rest is not wanted (RFC 9114 §4.1.2).
        stream.stop_sending(Code::H3_NO_ERROR);
    }
}

/// Aborts a request: nothing (more) is sent and nothing more read.
fn cancel(stream: &mut Stream) {
    stream.stop_stream(Code::H3_REQUEST_CANCELLED);
    stream.stop_sending(Code::H3_REQUEST_CANCELLED);
}

enum BodyError {
    TooLarge,
    Stream,
}

/// Reads a request body of at most [`doh::MAX_MESSAGE`] bytes; stops at the first byte past it.
async fn body(stream: &mut Stream) -> Result<Vec<u8>, BodyError> {
    let mut message = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.map_err(|_| BodyError::Stream)? {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            if doh::check_length(message.len() + part.len()).is_err() {
                return Err(BodyError::TooLarge);
            }
            message.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(message)
}
