//! The accept loops of the connection listeners: TCP for plain DNS, DoT and DoH ([`tcp`]),
//! QUIC for DoQ and DoH3 ([`quic`]). Both admit each connection to the core's table
//! ([`crate::connections`]: per-client limits, the longest-idle connection closed when the core
//! is full), bound the TLS handshake by `tls.handshakeTimeout`, and run each connection in a
//! task of its own, which holds its [`Admission`] and touches it on every query.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use glommio::net::{TcpListener, TcpStream};
use quinn::VarInt;

use crate::connections::{Admission, Family, Limits, Refusal};
use crate::core_context::CoreContext;
use crate::deadline::until;
use crate::metrics::CoreMetrics;
use crate::worker::Worker;

/// The accept loop of a stream listener (TCP, DoT, DoH): each connection runs `serve` in a task
/// of its own. All count against `tcp.maxConnectionsPerCore`.
pub(crate) async fn tcp<F, Fut>(worker: Rc<Worker>, listener: TcpListener, serve: F)
where
    F: Fn(Rc<Worker>, TcpStream, SocketAddr, Rc<Admission>) -> Fut,
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
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        // Dropping the stream on a refusal closes it.
        let Some(admission) = admit(worker.context(), Family::Stream, peer) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let task = serve(worker.clone(), stream, peer, admission.clone());
        admission.set_task(glommio::spawn_local(task).detach());
    }
}

/// Admits a connection from `peer` to the core's table under the current snapshot's limits;
/// `None` (counted, and logged at most every [`REFUSAL_LOG_PERIOD`] per core) when refused.
fn admit(context: &CoreContext, family: Family, peer: SocketAddr) -> Option<Rc<Admission>> {
    let settings = context.settings();
    let limits = Limits {
        per_core: settings.tcp_max_connections,
        per_client: match family {
            Family::Stream => settings.tcp_max_connections_per_client,
            Family::Quic => settings.quic_max_connections_per_client,
        },
    };
    let client = settings.ratelimit.client(peer.ip());
    drop(settings);
    let now = Instant::now();
    match context
        .connections
        .admit(family, client, limits, now, &context.metrics)
    {
        Ok(admission) => Some(Rc::new(admission)),
        Err(refusal) => {
            if context.connections.should_log(now, REFUSAL_LOG_PERIOD) {
                let reason = match refusal {
                    Refusal::ClientLimit => "the client prefix holds its connection limit",
                    Refusal::Full => "the core's connection limit is reached",
                };
                tracing::warn!(%peer, %client, reason, "client connections refused (logged at most every 10 s per core; kudurru_tcp_refused_per_client_total and kudurru_tcp_refused_total count them all)");
            }
            None
        }
    }
}

/// How often a core logs refused connections (a flood of them logs once per period).
const REFUSAL_LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// The TLS server name (SNI) a client sent, kept for the connection: the policy stage finds
/// the client ID in it (`kids.dns.example.net` under `blocking.clientIdDomains`).
pub(crate) fn tls_server_name(
    stream: &futures_rustls::server::TlsStream<TcpStream>,
) -> Option<Rc<str>> {
    stream.get_ref().1.server_name().map(Rc::from)
}

/// The TLS server name (SNI) a QUIC client sent in its handshake, kept for the connection.
pub(crate) fn quic_server_name(connection: &quinn::Connection) -> Option<Rc<str>> {
    connection
        .handshake_data()?
        .downcast::<quinn::crypto::rustls::HandshakeData>()
        .ok()?
        .server_name
        .map(Rc::from)
}

/// The server side of a TLS handshake, bounded by `tls.handshakeTimeout`; `None` (connection
/// closed) when it fails or takes too long.
pub(crate) async fn tls_handshake(
    context: &CoreContext,
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
) -> Option<futures_rustls::server::TlsStream<TcpStream>> {
    let acceptor = futures_rustls::TlsAcceptor::from(config);
    let deadline = Instant::now() + context.settings().tls_handshake_timeout;
    match until(deadline, acceptor.accept(stream)).await {
        Some(Ok(stream)) => {
            CoreMetrics::bump(&context.metrics.tls_handshakes);
            Some(stream)
        }
        Some(Err(e)) => {
            CoreMetrics::bump(&context.metrics.tls_handshake_failures);
            tracing::debug!(error = %e, "tls handshake failed");
            None
        }
        None => {
            CoreMetrics::bump(&context.metrics.tls_handshake_failures);
            tracing::debug!("tls handshake timed out");
            None
        }
    }
}

/// The accept loop of a QUIC listener: each connection that completes its handshake within
/// `tls.handshakeTimeout` runs `serve` in a task of its own. Connections count against
/// `tcp.maxConnectionsPerCore` with the stream transports'; past it, new ones are refused
/// (CONNECTION_REFUSED, stateless). Each connection is accepted with the certificate and the
/// limits current at that moment: `tcp.maxPipelined` bidirectional streams at once, `uni`
/// unidirectional ones (HTTP/3's control and QPACK streams; none for DoQ), `tcp.idleTimeout`.
pub(crate) async fn quic<F, Fut>(
    worker: Rc<Worker>,
    endpoint: quinn::Endpoint,
    config: impl Fn() -> Arc<quinn::ServerConfig>,
    uni: u32,
    serve: F,
) where
    F: Fn(Rc<Worker>, quinn::Connection, Rc<Admission>) -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let serve = Rc::new(serve);
    while let Some(incoming) = endpoint.accept().await {
        let context = worker.context();
        let Some(admission) = admit(context, Family::Quic, incoming.remote_address()) else {
            incoming.refuse();
            continue;
        };
        let settings = context.settings();
        let mut server = (*config()).clone();
        let mut transport = quinn::TransportConfig::default();
        let idle = quinn::IdleTimeout::try_from(settings.tcp_idle_timeout)
            .unwrap_or(quinn::IdleTimeout::from(VarInt::MAX));
        transport
            .max_concurrent_bidi_streams(VarInt::from_u32(
                u32::try_from(settings.tcp_max_pipelined.max(1)).unwrap_or(u32::MAX),
            ))
            .max_concurrent_uni_streams(VarInt::from_u32(uni))
            .max_idle_timeout(Some(idle));
        server.transport_config(Arc::new(transport));
        let deadline = Instant::now() + settings.tls_handshake_timeout;
        drop(settings);
        let connecting = match incoming.accept_with(Arc::new(server)) {
            Ok(connecting) => connecting,
            Err(e) => {
                CoreMetrics::bump(&context.metrics.tls_handshake_failures);
                tracing::debug!(error = %e, "QUIC connection not accepted");
                continue;
            }
        };
        let (worker, serve, held) = (worker.clone(), serve.clone(), admission.clone());
        let task = glommio::spawn_local(async move {
            if let Some(connection) = quic_handshake(worker.context(), connecting, deadline).await {
                serve(worker.clone(), connection, held).await;
            }
        })
        .detach();
        admission.set_task(task);
    }
}

/// The server side of a QUIC handshake, bounded by `deadline`; `None` (connection dropped,
/// which closes it) when it fails or takes too long.
async fn quic_handshake(
    context: &CoreContext,
    connecting: quinn::Connecting,
    deadline: Instant,
) -> Option<quinn::Connection> {
    match until(deadline, connecting).await {
        Some(Ok(connection)) => {
            CoreMetrics::bump(&context.metrics.tls_handshakes);
            Some(connection)
        }
        Some(Err(e)) => {
            CoreMetrics::bump(&context.metrics.tls_handshake_failures);
            tracing::debug!(error = %e, "QUIC handshake failed");
            None
        }
        None => {
            CoreMetrics::bump(&context.metrics.tls_handshake_failures);
            tracing::debug!("QUIC handshake timed out");
            None
        }
    }
}

/// What [`next_stream`] found on a QUIC connection.
pub(crate) enum NextStream {
    /// A client-initiated bidirectional stream.
    Stream(quinn::SendStream, quinn::RecvStream),
    /// No stream for the idle timeout.
    Idle,
    /// The core drains for shutdown and no stream that already arrived is left.
    Drained,
    /// The connection is gone.
    Ended(quinn::ConnectionError),
}

/// The next request stream of a DoQ or DoH3 connection, within `idle`. Once the core drains
/// for shutdown, only streams that have already arrived are taken, then [`NextStream::Drained`].
pub(crate) async fn next_stream(
    connection: &quinn::Connection,
    admission: &Admission,
    idle: std::time::Duration,
) -> NextStream {
    let accepted = if admission.is_draining() {
        match futures_lite::future::poll_once(connection.accept_bi()).await {
            Some(accepted) => accepted,
            None => return NextStream::Drained,
        }
    } else {
        let next = futures_lite::future::or(
            async { Some(crate::deadline::within(idle, connection.accept_bi()).await) },
            async {
                admission.drained().await;
                None
            },
        )
        .await;
        match next {
            Some(Some(accepted)) => accepted,
            Some(None) => return NextStream::Idle,
            // The drain began: take what already arrived.
            None => {
                return match futures_lite::future::poll_once(connection.accept_bi()).await {
                    Some(Ok((send, recv))) => NextStream::Stream(send, recv),
                    Some(Err(e)) => NextStream::Ended(e),
                    None => NextStream::Drained,
                };
            }
        }
    };
    match accepted {
        Ok((send, recv)) => NextStream::Stream(send, recv),
        Err(e) => NextStream::Ended(e),
    }
}
