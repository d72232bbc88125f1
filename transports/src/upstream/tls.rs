//! TLS client configurations for encrypted upstreams (`upstream.tls.*`): the system roots or
//! the configured CA, SPKI pins, session resumption, one configuration per ALPN, built once
//! per [`UpstreamTls`] value and shared by every core.
//!
//! SKELETON: roots only; CA file, pins, resumption and the shared cache come next.

use std::sync::Arc;

use kudurru_core::UpstreamTls;

/// Which protocol a connection negotiates (its ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alpn {
    /// DNS over TLS: `dot` (RFC 7858 registers it).
    Dot,
    /// DNS over HTTPS on HTTP/2: `h2`.
    H2,
    /// DNS over QUIC: `doq` (RFC 9250 §4.1.1).
    Doq,
    /// DNS over HTTPS on HTTP/3: `h3`.
    H3,
}

/// The client configuration for `alpn` under `tls`.
pub fn client_config(
    tls: &Arc<UpstreamTls>,
    alpn: Alpn,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let _ = (tls, alpn);
    Err("encrypted upstreams are not implemented yet".into())
}

/// Checks that `tls` gives usable client configurations (the CA file's certificates parse):
/// the control thread calls it before publishing, so a bad file is a configuration error.
pub fn check(tls: &UpstreamTls) -> Result<(), String> {
    let _ = tls;
    Ok(())
}
