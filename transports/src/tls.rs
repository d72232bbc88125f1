//! The TLS side of the encrypted listeners: one server configuration per ALPN set, swapped
//! whole when the certificate changes, and the `Alt-Svc` offer a DoH listener makes for HTTP/3.

use std::net::SocketAddr;
use std::sync::Arc;

/// ALPN protocol of DNS over TLS (RFC 7858 §3.2, IANA).
pub const ALPN_DOT: &[u8] = b"dot";
/// ALPN protocols of DNS over HTTPS, preferred first: HTTP/2 (RFC 9113), then HTTP/1.1.
pub const ALPN_HTTPS: [&[u8]; 2] = [b"h2", b"http/1.1"];
/// ALPN protocol of HTTP/3 (RFC 9114 §3.1).
pub const ALPN_H3: &[u8] = b"h3";

/// The server configurations of the encrypted listeners, one per ALPN set, all from one
/// certificate pair.
#[derive(Debug)]
pub struct TlsServers {
    /// DNS over TLS: ALPN `dot`.
    pub dot: Arc<rustls::ServerConfig>,
    /// DNS over HTTPS: ALPN `h2` and `http/1.1`.
    pub https: Arc<rustls::ServerConfig>,
    /// DNS over QUIC: ALPN `doq`.
    pub doq: Arc<quinn::ServerConfig>,
    /// DNS over HTTP/3: ALPN `h3`.
    pub h3: Arc<quinn::ServerConfig>,
}

impl TlsServers {
    /// Every transport's configuration from `base` (a certificate pair, TLS 1.3 among its
    /// versions; its ALPN list is replaced per transport). The QUIC ones accept no 0-RTT data
    /// (no query is replayable, RFC 9250 §4.5), do not migrate (another core would receive a
    /// migrated path, see [`crate::quic`]) and share one address-validation key across cores.
    pub fn new(base: &rustls::ServerConfig) -> Result<Self, rustls::Error> {
        let with_alpn = |alpn: &[&[u8]]| {
            let mut config = base.clone();
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            config
        };
        let quic = |alpn: &[u8]| -> Result<Arc<quinn::ServerConfig>, rustls::Error> {
            let mut tls = with_alpn(&[alpn]);
            tls.max_early_data_size = 0;
            let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
                .map_err(|e| rustls::Error::General(format!("not usable for QUIC: {e}")))?;
            let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
            server.migration(false);
            Ok(Arc::new(server))
        };
        Ok(Self {
            dot: Arc::new(with_alpn(&[ALPN_DOT])),
            https: Arc::new(with_alpn(&ALPN_HTTPS)),
            doq: quic(kudurru_core::doq::ALPN)?,
            h3: quic(ALPN_H3)?,
        })
    }
}

/// The TLS configurations encrypted listeners use, swapped whole when the certificate files
/// change (each handshake takes the current one).
pub type TlsConfig = Arc<arc_swap::ArcSwap<TlsServers>>;

/// The `Alt-Svc` value (RFC 7838) a DoH listener at `addr` serving `path` sends: every HTTP/3
/// listener for the same path on the same address (or where either is a wildcard).
pub(crate) fn alt_svc(addr: SocketAddr, path: &str, h3: &[(SocketAddr, &str)]) -> Option<Arc<str>> {
    let same_host = |other: SocketAddr| {
        other.ip() == addr.ip() || other.ip().is_unspecified() || addr.ip().is_unspecified()
    };
    let offers: Vec<String> = h3
        .iter()
        .filter(|(at, served)| *served == path && same_host(*at))
        .map(|(at, _)| format!("h3=\":{}\"; ma={ALT_SVC_MAX_AGE}", at.port()))
        .collect();
    (!offers.is_empty()).then(|| Arc::from(offers.join(", ")))
}

/// How long (seconds) a client may remember an `Alt-Svc` offer: a day, as is common.
const ALT_SVC_MAX_AGE: u32 = 86_400;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alt_svc_offers_http3_listeners_for_the_same_path_and_host() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let h3 = [
            (at("127.0.0.1:8443"), "/dns-query"),
            (at("0.0.0.0:9443"), "/dns-query"),
            (at("127.0.0.2:443"), "/dns-query"),
            (at("127.0.0.1:7443"), "/other"),
        ];
        assert_eq!(
            alt_svc(at("127.0.0.1:8443"), "/dns-query", &h3).as_deref(),
            Some("h3=\":8443\"; ma=86400, h3=\":9443\"; ma=86400")
        );
        assert_eq!(
            alt_svc(at("127.0.0.1:8443"), "/other", &h3).as_deref(),
            Some("h3=\":7443\"; ma=86400")
        );
        assert_eq!(alt_svc(at("127.0.0.3:443"), "/q", &h3), None);
        assert_eq!(alt_svc(at("127.0.0.1:443"), "/dns-query", &[]), None);
    }
}
