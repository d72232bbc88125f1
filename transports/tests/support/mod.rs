//! What the transports crate's integration tests share.

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use kudurru_transports::runtime::{IO_MEMORY_PER_CORE, RING_DEPTH};

/// Starts `future` on a glommio executor of its own (an unpinned thread), with the I/O memory
/// and ring depth kudurru gives each core.
pub(crate) fn executor<F, T>(future: impl FnOnce() -> F + Send + 'static) -> ExecutorJoinHandle<T>
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(IO_MEMORY_PER_CORE)
        .ring_depth(RING_DEPTH)
        .spawn(future)
        .expect("executor starts")
}

/// A server configuration with a fresh self-signed certificate for `localhost` (QUIC transport
/// settings `transport`) and a client configuration that trusts it.
#[allow(dead_code, reason = "only the QUIC tests use it")]
pub(crate) fn quic_configs(
    transport: quinn::TransportConfig,
) -> Result<(quinn::ServerConfig, quinn::ClientConfig), String> {
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .map_err(|e| e.to_string())?;
    let cert = pair.cert.der().clone();
    let key = rustls_pki_types::PrivateKeyDer::try_from(pair.signing_key.serialize_der())
        .map_err(|e| e.to_string())?;
    let mut server = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key)
        .map_err(|e| e.to_string())?;
    server.transport_config(std::sync::Arc::new(transport));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(|e| e.to_string())?;
    let client = quinn::ClientConfig::with_root_certificates(std::sync::Arc::new(roots))
        .map_err(|e| e.to_string())?;
    Ok((server, client))
}

/// A QUIC server endpoint on the current executor, on a loopback port of its own.
#[allow(dead_code, reason = "only the QUIC tests use it")]
pub(crate) fn quic_server(
    config: quinn::ServerConfig,
) -> Result<(quinn::Endpoint, std::net::SocketAddr), String> {
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(config),
        std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?,
        std::sync::Arc::new(kudurru_transports::quic::GlommioRuntime),
    )
    .map_err(|e| e.to_string())?;
    let addr = endpoint.local_addr().map_err(|e| e.to_string())?;
    Ok((endpoint, addr))
}
