//! DNS over TLS (RFC 7858): one pipelined TLS connection per core per upstream (RFC 7766
//! §6.2.1.1). The pool is [`super::tcp`]'s, dialled with a TLS handshake ([`TlsDial`]): the
//! same reuse, ID matching, idle close (`upstream.idleTimeout`), reconnect and retirement.
//!
//! ```text
//! ask ─▶ StreamPool<TlsDial>::send ─▶ (no connection: TCP connect ─▶ TLS handshake, ALPN dot,
//!        verified against upstream.tls, resumed when a session is stored) ─▶ padded query
//! ```

use std::cell::Cell;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use futures_rustls::TlsConnector;
use futures_rustls::client::TlsStream;
use glommio::net::TcpStream;
use kudurru_core::{CacheKey, CachedAnswer, TtlPolicy, UpstreamSpec};

use super::tcp::{Dial, StreamPool};
use super::tls::{self, Alpn};
use super::{Attempt, ask_tcp};
use crate::metrics::{CoreMetrics, UpstreamCounters};
use crate::settings::SharedSettings;

/// One core's connection to one upstream.
pub(super) struct DotPool {
    pool: StreamPool<TlsDial>,
}

impl DotPool {
    /// A pool for `spec` with no connection yet, counted in `slot`.
    pub(super) fn new(
        spec: UpstreamSpec,
        metrics: Arc<CoreMetrics>,
        settings: SharedSettings,
        slot: usize,
    ) -> Self {
        let dialer = TlsDial {
            spec,
            alpn: Alpn::Dot,
            metrics: metrics.clone(),
            settings: settings.clone(),
            slot,
        };
        Self {
            pool: StreamPool::new(dialer, metrics, settings, slot),
        }
    }

    /// One query for `key`; the connection's serial number goes to `connection`.
    pub(super) async fn ask(
        &self,
        key: &CacheKey,
        policy: &TtlPolicy,
        counters: &UpstreamCounters,
        connection: &Cell<u64>,
    ) -> Result<(CachedAnswer, Instant), Attempt> {
        ask_tcp(&self.pool, key, policy, counters, connection).await
    }

    /// Takes connection `serial` out of use for new queries (an attempt on it timed out).
    pub(super) fn retire(&self, serial: u64) {
        self.pool.retire(serial);
    }
}

/// Opens TLS connections to one upstream: TCP, then a handshake verified against
/// `upstream.tls` (the published snapshot's, when the connection opens), counted in the
/// upstream's slot.
pub(super) struct TlsDial {
    pub(super) spec: UpstreamSpec,
    pub(super) alpn: Alpn,
    pub(super) metrics: Arc<CoreMetrics>,
    pub(super) settings: SharedSettings,
    pub(super) slot: usize,
}

impl TlsDial {
    /// A TLS connection to the upstream, handshake done; counted (handshakes, resumptions,
    /// certificate failures) and, when it fails, logged with the upstream's name.
    pub(super) async fn connect(&self) -> io::Result<TlsStream<TcpStream>> {
        let tls = self.settings.load().upstream_tls.clone();
        let prepared = tls::client_config(&tls, self.alpn)
            .and_then(|config| Ok((config, tls::server_name(&self.spec)?)));
        let (config, name) = prepared.map_err(|error| {
            // No system roots (and no caFile), or a name that is no server name.
            tracing::warn!(upstream = %self.spec, %error, "cannot connect to the encrypted upstream");
            io::Error::other(error)
        })?;
        let tcp = TcpStream::connect(self.spec.addr).await?;
        tcp.set_nodelay(true)?;
        let counters = self.metrics.upstream(self.slot);
        match TlsConnector::from(config).connect(name, tcp).await {
            Ok(stream) => {
                CoreMetrics::bump(&counters.tls_handshakes);
                if stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    CoreMetrics::bump(&counters.tls_resumed);
                }
                Ok(stream)
            }
            Err(e) => {
                if tls::is_certificate_error(&e) {
                    CoreMetrics::bump(&counters.tls_failures);
                    tracing::warn!(upstream = %self.spec, error = %tls::describe(&e), "TLS handshake with the upstream refused its certificate");
                } else {
                    tracing::debug!(upstream = %self.spec, error = %tls::describe(&e), "TLS handshake with the upstream failed");
                }
                Err(e)
            }
        }
    }
}

impl Dial for TlsDial {
    type Stream = TlsStream<TcpStream>;

    async fn dial(&self) -> io::Result<Self::Stream> {
        self.connect().await
    }

    fn padded(&self) -> bool {
        self.settings.load().upstream_tls.padding
    }
}
