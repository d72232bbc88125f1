//! The DNS-over-HTTP/3 listener of one core (DoH3): RFC 8484 over HTTP/3 (RFC 9114), with the same
//! request rules, statuses and bodies as DoH over HTTP/2.
//!
//! ```text
//! quic::accept_loop ─▶ connection task ─┬ control stream out: SETTINGS
//!                                       ├ client uni streams ─▶ core::http3::UniStream (checked)
//!                                       └ accept_bi ─▶ request (inline, or a task if it waits):
//!                                                      core::http3::RequestStream
//!     ─▶ doh::classify ─▶ hit: answer at once | miss: resolve ─▶ HEADERS ‖ DATA, FIN
//!                                                   └ drop ─▶ H3_REQUEST_CANCELLED both ways
//! ```
//! HTTP/3 framing and QPACK are kudurru's own (`kudurru_core::http3`; why in its module doc)
//! on quinn streams, on quinn's glommio runtime ([`crate::quic`]). Up to `tcp.maxPipelined`
//! requests at once per connection (QUIC's stream limit); a request that does not arrive whole
//! within `tcp.idleTimeout` gets 408 (or, without a head, is reset); an idle connection is
//! closed by QUIC's idle timeout. Protocol errors end the stream or the connection with the
//! RFC 9114 code and the reason. When the core drains for shutdown, the connection sends GOAWAY
//! on its control stream, answers the requests it accepted, and closes with H3_NO_ERROR.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use kudurru_core::doh;
use kudurru_core::http3::{self, CriticalStreams, Scope, UniKind, UniStream, code};
use quinn::VarInt;

use super::endpoint::{Answer, Endpoint, Reply, ResponseHead, classify};
use crate::accept::{self, NextStream};
use crate::answer::{answer_miss, inline_or_queued};
use crate::connections::Admission;
use crate::core_context::Active;
use crate::deadline::within;
use crate::drain::Requests;
use crate::metrics::{CoreMetrics, HttpVersion, Transport};
use crate::tls::TlsConfig;
use crate::worker::Worker;

/// Unidirectional streams an HTTP/3 client opens: control, QPACK encoder and decoder (RFC 9114
/// §6.2, RFC 9204 §4.2), and one spare for extensions the server ignores.
const UNI_STREAMS: u32 = 4;

fn varint(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}

/// Accepts DNS-over-HTTP/3 connections for `path` on `endpoint` until the task is dropped.
pub(crate) async fn serve(
    worker: Rc<Worker>,
    endpoint: quinn::Endpoint,
    tls: TlsConfig,
    path: Arc<str>,
) {
    let path: Rc<str> = Rc::from(&*path);
    accept::quic(
        worker,
        endpoint,
        move || tls.load().h3.clone(),
        UNI_STREAMS,
        move |worker, connection, admission| {
            let path = path.clone();
            async move { serve_connection(worker, connection, path, admission).await }
        },
    )
    .await;
}

/// Serves one connection: opens the control stream, checks the client's, and answers each
/// request where it is accepted, or in a task of its own when it has to wait. A connection that
/// opens no request stream for `tcp.idleTimeout` is closed (H3_NO_ERROR), whatever else it
/// sends: PINGs keep QUIC's own idle timer alive, not this one.
async fn serve_connection(
    worker: Rc<Worker>,
    connection: quinn::Connection,
    path: Rc<str>,
    admission: Rc<Admission>,
) {
    CoreMetrics::bump(&worker.context().metrics.doh_connections[HttpVersion::H3 as usize]);
    let peer = connection.remote_address();
    let sni = accept::quic_server_name(&connection);
    let endpoint = Rc::new(Endpoint::new(worker, path, peer, sni, None, admission));
    // Held for the connection's life: closing a control stream is a connection error.
    let Ok(mut control) = connection.open_uni().await else {
        return;
    };
    if control
        .write_all(&http3::server_control_stream(doh::MAX_HEAD as u64))
        .await
        .is_err()
    {
        return;
    }
    glommio::spawn_local(uni_streams(connection.clone())).detach();
    let requests = Rc::new(Requests::default());
    // The first request stream not accepted yet, as GOAWAY names it.
    let mut next_stream = 0u64;
    let admission = endpoint.admission();
    loop {
        let context = endpoint.worker.context();
        let idle = context.settings().tcp_idle_timeout;
        let (send, recv) = match accept::next_stream(&connection, admission, idle).await {
            NextStream::Stream(send, recv) => (send, recv),
            NextStream::Drained => break,
            NextStream::Idle => {
                CoreMetrics::bump(&context.metrics.tcp_timeouts);
                connection.close(varint(code::H3_NO_ERROR), b"idle");
                return;
            }
            NextStream::Ended(e) => {
                tracing::debug!(peer = %peer, error = %e, "HTTP/3 connection ended");
                return;
            }
        };
        next_stream = next_stream.max(u64::from(send.id()) + 4);
        let (endpoint, connection) = (endpoint.clone(), connection.clone());
        let request_open = requests.enter();
        inline_or_queued(async move {
            let _request_open = request_open;
            request(&endpoint, &connection, send, recv).await;
        });
    }
    // Draining: GOAWAY names the first request not processed (RFC 9114 §5.2), the accepted
    // ones are answered, then CONNECTION_CLOSE with H3_NO_ERROR.
    let idle = endpoint.worker.context().settings().tcp_idle_timeout;
    let _ = within(idle, control.write_all(&http3::goaway(next_stream))).await;
    requests.done().await;
    connection.close(varint(code::H3_NO_ERROR), b"shutting down");
    drop(control);
}

/// Ends the connection for an HTTP/3 connection error, with its code and reason.
fn close(connection: &quinn::Connection, error: http3::Error) {
    tracing::debug!(peer = %connection.remote_address(), error = %error, "HTTP/3 protocol error; closing the connection");
    connection.close(varint(error.code), error.reason.as_bytes());
}

/// Accepts and checks the client's unidirectional streams until the connection ends.
async fn uni_streams(connection: quinn::Connection) {
    let critical = Rc::new(RefCell::new(CriticalStreams::default()));
    while let Ok(recv) = connection.accept_uni().await {
        let (connection, critical) = (connection.clone(), critical.clone());
        glommio::spawn_local(async move { uni_stream(&connection, &critical, recv).await })
            .detach();
    }
}

/// Reads one of the client's unidirectional streams: its type, then what it carries, checked
/// by `core::http3`; a stream of a type this side does not know is stopped.
async fn uni_stream(
    connection: &quinn::Connection,
    critical: &RefCell<CriticalStreams>,
    mut recv: quinn::RecvStream,
) {
    let mut stream = UniStream::new();
    let mut opened = false;
    loop {
        let (bytes, fin) = match recv.read_chunk(4096, true).await {
            Ok(Some(chunk)) => (chunk.bytes, false),
            Ok(None) => (Default::default(), true),
            Err(quinn::ReadError::Reset(_)) if opened => {
                return close(
                    connection,
                    http3::Error {
                        scope: Scope::Connection,
                        code: code::H3_CLOSED_CRITICAL_STREAM,
                        reason: "a critical stream was reset",
                    },
                );
            }
            // The connection is gone (or a stream without a type was reset).
            Err(_) => return,
        };
        if let Err(e) = stream.receive(&bytes, fin) {
            return close(connection, e);
        }
        if !opened && let Some(kind) = stream.kind() {
            if let Err(e) = critical.borrow_mut().open(kind) {
                return close(connection, e);
            }
            if kind == UniKind::Unknown {
                let _ = recv.stop(varint(code::H3_STREAM_CREATION_ERROR));
                return;
            }
            opened = true;
        }
        if fin {
            return;
        }
    }
}

/// The HTTP/3 response (HEADERS and DATA frames) for `reply`; `None` for a drop. Its own
/// function, so that none of the head's parts lives in the request's future.
fn encode(endpoint: &Endpoint, reply: Reply) -> Option<Vec<u8>> {
    let (head, mut payload) = ResponseHead::new(endpoint, reply)?;
    let mut fields: [(&[u8], &[u8]); ResponseHead::MAX_FIELDS] = Default::default();
    let mut n = 0;
    for (slot, (name, value, _)) in fields.iter_mut().zip(head.fields()) {
        *slot = (name, value);
        n += 1;
    }
    // The frames before the body go in the body's own buffer (an answer has room to spare),
    // then in front of it: no second buffer and no copy of the body.
    let body_len = payload.len();
    http3::encode_response_head(head.status, &fields[..n], body_len, &mut payload);
    let head_len = payload.len() - body_len;
    payload.rotate_right(head_len);
    Some(payload)
}

/// Answers the one request of a bidirectional stream.
async fn request(
    endpoint: &Rc<Endpoint>,
    connection: &quinn::Connection,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let _active = Active::enter(endpoint.worker.context());
    let idle = endpoint.worker.context().settings().tcp_idle_timeout;
    let mut parser = http3::RequestStream::new(doh::MAX_HEAD, doh::MAX_MESSAGE);
    // The whole request within the idle timeout (the clock is read only if it must wait).
    let read = async {
        loop {
            let parsed = match recv.read_chunk(usize::MAX, true).await {
                Ok(Some(chunk)) => parser.receive(&chunk.bytes, false),
                Ok(None) => parser.receive(&[], true),
                // Reset by the client, or the connection is gone: nothing to answer.
                Err(_) => return None,
            };
            match parsed {
                Ok(None) => {}
                result => return Some(result),
            }
        }
    };
    let parsed = match within(idle, read).await {
        Some(Some(parsed)) => parsed,
        Some(None) => return,
        None => {
            CoreMetrics::bump(&endpoint.worker.context().metrics.tcp_timeouts);
            match parser.expire() {
                Some(request) => Ok(Some(request)),
                None => {
                    let _ = recv.stop(varint(code::H3_REQUEST_INCOMPLETE));
                    let _ = send.reset(varint(code::H3_REQUEST_INCOMPLETE));
                    return;
                }
            }
        }
    };
    let request = match parsed {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(e) if e.scope == Scope::Stream => {
            tracing::debug!(peer = %endpoint.peer, error = %e, "HTTP/3 request reset");
            let _ = recv.stop(varint(e.code));
            let _ = send.reset(varint(e.code));
            return;
        }
        Err(e) => return close(connection, e),
    };
    let complete = request.complete;
    let answer = classify(
        endpoint,
        Transport::Doh3,
        request.method,
        &request.target,
        request.content_type.as_deref(),
        request.body,
    );
    let reply = match answer {
        Answer::Ready(reply) => reply,
        Answer::Miss(message, settings, lookup, path_id, received) => {
            let client = endpoint.client(path_id.as_ref());
            // Boxed, as in `answer::answer`: a miss's state would widen every request's future.
            Box::pin(answer_miss(
                &endpoint.worker,
                &settings,
                endpoint.origin(Transport::Doh3),
                &message,
                lookup,
                client,
                received,
            ))
            .await
            .map_or(Reply::Abort, Reply::Answer)
        }
    };
    let Some(out) = encode(endpoint, reply) else {
        // A drop: nothing is sent, nothing more read.
        let _ = send.reset(varint(code::H3_REQUEST_CANCELLED));
        let _ = recv.stop(varint(code::H3_REQUEST_CANCELLED));
        return;
    };
    // Handed to quinn as it is (`write_all` would copy it into a buffer of its own). Errors
    // mean the client cancelled the request or the connection is gone.
    match within(idle, send.write_chunk(Bytes::from(out))).await {
        Some(Ok(())) => {
            let _ = send.finish();
            // Draining: the connection closes once this returns, and a close discards stream
            // data not yet delivered; wait for the client's acknowledgement.
            if endpoint.worker.context().connections.draining() {
                let _ = within(idle, send.stopped()).await;
            }
        }
        Some(Err(_)) => return,
        None => {
            let _ = send.reset(varint(code::H3_REQUEST_CANCELLED));
            return;
        }
    }
    if !complete {
        // Answered before the upload ended: the rest is not wanted (RFC 9114 §4.1.2).
        let _ = recv.stop(varint(code::H3_NO_ERROR));
    }
}
