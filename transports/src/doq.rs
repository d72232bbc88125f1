//! The DNS-over-QUIC listener of one core (RFC 9250).
//!
//! ```text
//! quic::accept_loop ─▶ connection task ─ accept_bi ─▶ stream: read to FIN (idle deadline)
//!   ─▶ core::doq::query ─┬ Ok ─▶ answer::answer ─┬ Some ─▶ length ‖ answer, FIN
//!                        │                       └ None (drop) ─▶ RESET_STREAM(DOQ_REQUEST_CANCELLED)
//!                        └ Err ─▶ CONNECTION_CLOSE(DOQ_PROTOCOL_ERROR)
//! ```
//! A stream whose query has arrived whole and is a cache hit is answered inside the connection
//! task; one that must wait (more bytes, a miss) goes on in a task of its own.
//! One query per client-initiated bidirectional stream, up to `tcp.maxPipelined` at once per
//! connection; clients may open no unidirectional stream. No 0-RTT (the TLS configuration
//! offers no early data), so no query is ever replayable (§4.5). A stream whose query does not
//! arrive within `tcp.idleTimeout` is cancelled; a connection idle that long is closed by QUIC's
//! idle timeout. When the core drains for shutdown, the connection accepts no new stream,
//! answers the ones it has, and closes with DOQ_NO_ERROR.

use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use kudurru_core::Client;
use kudurru_core::doq::{self, ErrorCode};
use quinn::VarInt;

use crate::accept::{self, NextStream};
use crate::answer::{Origin, answer, inline_or_queued};
use crate::connections::Admission;
use crate::core_context::CoreContext;
use crate::deadline::within;
use crate::drain::Requests;
use crate::metrics::{CoreMetrics, Transport};
use crate::tls::TlsConfig;
use crate::worker::Worker;

/// Accepts DNS-over-QUIC connections on `endpoint` until the task is dropped.
pub(crate) async fn serve(worker: Rc<Worker>, endpoint: quinn::Endpoint, tls: TlsConfig) {
    // Clients open no unidirectional streams (RFC 9250 §4.3.3).
    accept::quic(
        worker,
        endpoint,
        move || tls.load().doq.clone(),
        0,
        connection,
    )
    .await;
}

fn code(code: ErrorCode) -> VarInt {
    VarInt::from_u32(code.code())
}

/// Serves one connection: each stream is answered here, or in a task of its own when it has to
/// wait. A connection that opens no stream for `tcp.idleTimeout` is closed (DOQ_NO_ERROR),
/// whatever else it sends: PINGs keep QUIC's own idle timer alive, not this one.
async fn connection(worker: Rc<Worker>, connection: quinn::Connection, admission: Rc<Admission>) {
    let addr = connection.remote_address().ip();
    let sni = accept::quic_server_name(&connection);
    let requests = Rc::new(Requests::default());
    loop {
        let idle = worker.context().settings().tcp_idle_timeout;
        let (send, recv) = match accept::next_stream(&connection, &admission, idle).await {
            NextStream::Stream(send, recv) => (send, recv),
            NextStream::Drained => break,
            NextStream::Idle => {
                CoreMetrics::bump(&worker.context().metrics.tcp_timeouts);
                connection.close(code(ErrorCode::NoError), b"idle");
                return;
            }
            NextStream::Ended(e) => {
                tracing::debug!(peer = %connection.remote_address(), error = %e, "DoQ connection ended");
                return;
            }
        };
        // The stream's receipt (its first data): the answer's latency counts from it.
        let received = Instant::now();
        admission.touch(received);
        let (worker, connection, sni) = (worker.clone(), connection.clone(), sni.clone());
        let request = requests.enter();
        inline_or_queued(async move {
            let _request = request;
            let client = Client {
                addr,
                datagram: false,
                id: None,
                sni: sni.as_deref(),
            };
            stream(&worker, &connection, client, send, recv, received).await;
        });
    }
    // Draining: every stream accepted is answered, then CONNECTION_CLOSE with DOQ_NO_ERROR
    // (RFC 9250 §4.3), which the client takes as "no more on this connection".
    requests.done().await;
    connection.close(code(ErrorCode::NoError), b"shutting down");
    // The close goes out with the endpoint's next transmit; the connection handle may go now.
}

/// Answers the one query of a stream accepted at `received`.
async fn stream(
    worker: &Rc<Worker>,
    connection: &quinn::Connection,
    client: Client<'_>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    received: Instant,
) {
    let idle = worker.context().settings().tcp_idle_timeout;
    let read = within(idle, read_to_fin(&mut recv, doq::MAX_STREAM)).await;
    let bytes = match read {
        Some(Ok(bytes)) => bytes,
        Some(Err(quinn::ReadToEndError::TooLong)) => {
            return protocol_error(worker.context(), connection, doq::ProtocolError::TooLong);
        }
        // Reset by the client, or the connection is gone: nothing to answer.
        Some(Err(quinn::ReadToEndError::Read(_))) => return,
        None => {
            CoreMetrics::bump(&worker.context().metrics.tcp_timeouts);
            let _ = recv.stop(code(ErrorCode::RequestCancelled));
            let _ = send.reset(code(ErrorCode::RequestCancelled));
            return;
        }
    };
    let message = match doq::query(&bytes) {
        Ok(message) => message,
        Err(e) => return protocol_error(worker.context(), connection, e),
    };
    worker.context().metrics.query(Transport::Doq);
    let origin = Origin {
        transport: Transport::Doq,
        peer: connection.remote_address(),
    };
    match answer(worker, origin, message, client, received).await {
        Some(out) => {
            // Handed to quinn as it is (`write_all` would copy it into a buffer of its own).
            // Errors mean the client reset the stream or the connection is gone.
            match within(idle, send.write_chunk(Bytes::from(doq::framed(out)))).await {
                Some(Ok(())) => {
                    let _ = send.finish();
                    // Draining: the connection closes once this returns, and a close discards stream
                    // data not yet delivered; wait for the client's acknowledgement.
                    if worker.context().connections.draining() {
                        let _ = within(idle, send.stopped()).await;
                    }
                }
                Some(Err(_)) => {}
                None => {
                    let _ = send.reset(code(ErrorCode::RequestCancelled));
                }
            }
        }
        None => {
            let _ = send.reset(code(ErrorCode::RequestCancelled));
        }
    }
}

/// A stream's bytes up to its FIN, at most `limit`: the one chunk a query nearly always arrives
/// in, as quinn holds it; several chunks joined.
async fn read_to_fin(
    recv: &mut quinn::RecvStream,
    limit: usize,
) -> Result<Bytes, quinn::ReadToEndError> {
    let mut first: Option<Bytes> = None;
    let mut joined = Vec::new();
    let mut total = 0;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        total += chunk.bytes.len();
        if total > limit {
            return Err(quinn::ReadToEndError::TooLong);
        }
        match first.take() {
            None if joined.is_empty() => first = Some(chunk.bytes),
            Some(earlier) => {
                joined.extend_from_slice(&earlier);
                joined.extend_from_slice(&chunk.bytes);
            }
            None => joined.extend_from_slice(&chunk.bytes),
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

/// Closes the connection for a protocol error (RFC 9250 §4.3.3), every stream with it.
fn protocol_error(
    context: &CoreContext,
    connection: &quinn::Connection,
    error: doq::ProtocolError,
) {
    CoreMetrics::bump(&context.metrics.doq_protocol_errors);
    tracing::debug!(peer = %connection.remote_address(), error = %error, "DoQ protocol error; closing the connection");
    connection.close(code(error.code()), error.reason().as_bytes());
}
