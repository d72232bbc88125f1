//! Optional TLS on an HTTP listener (`api.tlsCert`/`api.tlsKey`): the configuration sits
//! behind an atomic pointer so a watched certificate swaps in for the next handshake, as it
//! does for DNS over TLS.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// The current server configuration, swapped by the certificate watcher.
pub type TlsSource = Arc<ArcSwap<rustls::ServerConfig>>;

/// Completes TLS handshakes with whatever configuration is current.
#[derive(Clone)]
pub struct TlsAcceptor {
    source: TlsSource,
}

impl TlsAcceptor {
    /// An acceptor reading `source` at every handshake.
    pub fn new(source: TlsSource) -> Self {
        Self { source }
    }

    /// The TLS stream, or `None` when the handshake failed or took longer than `timeout`
    /// (logged at debug: a port scan is not news).
    pub async fn accept(
        &self,
        stream: TcpStream,
        timeout: Duration,
    ) -> Option<TlsStream<TcpStream>> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.source.load_full());
        match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!("TLS handshake timed out");
                None
            }
        }
    }
}
