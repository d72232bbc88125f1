//! The accept loops of the connection listeners: TCP for plain DNS, DoT and DoH ([`tcp`]),
//! QUIC for DoQ and DoH3 ([`quic`]). Both count connections against
//! `tcp.maxConnectionsPerCore`, bound the TLS handshake by `tls.handshakeTimeout`, and run each
//! connection in a task of its own.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use glommio::net::{TcpListener, TcpStream};
use quinn::VarInt;

use crate::core_context::CoreContext;
use crate::deadline::until;
use crate::metrics::CoreMetrics;
use crate::worker::Worker;

/// The accept loop of a stream listener (TCP, DoT, DoH): each connection runs `serve` in a task
/// of its own. All count against `tcp.maxConnectionsPerCore`.
pub(crate) async fn tcp<F, Fut>(worker: Rc<Worker>, listener: TcpListener, serve: F)
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
        let context = worker.context();
        if context.tcp_connections.get() >= context.settings().tcp_max_connections {
            CoreMetrics::bump(&context.metrics.tcp_refused);
            continue; // dropping the stream closes it
        }
        let _ = stream.set_nodelay(true);
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        context
            .tcp_connections
            .set(context.tcp_connections.get() + 1);
        let task = serve(worker.clone(), stream, peer);
        let worker = worker.clone();
        glommio::spawn_local(async move {
            task.await;
            let connections = &worker.context().tcp_connections;
            connections.set(connections.get() - 1);
        })
        .detach();
    }
}

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
    F: Fn(Rc<Worker>, quinn::Connection) -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let serve = Rc::new(serve);
    while let Some(incoming) = endpoint.accept().await {
        let context = worker.context();
        let settings = context.settings();
        if context.tcp_connections.get() >= settings.tcp_max_connections {
            CoreMetrics::bump(&context.metrics.tcp_refused);
            incoming.refuse();
            continue;
        }
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
        context
            .tcp_connections
            .set(context.tcp_connections.get() + 1);
        let (worker, serve) = (worker.clone(), serve.clone());
        glommio::spawn_local(async move {
            if let Some(connection) = quic_handshake(worker.context(), connecting, deadline).await {
                serve(worker.clone(), connection).await;
            }
            let connections = &worker.context().tcp_connections;
            connections.set(connections.get() - 1);
        })
        .detach();
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
