//! DNS over QUIC (RFC 9250) and DNS over HTTPS on HTTP/3: one stream per query on one QUIC connection per core per upstream (quinn on the core's executor, [`crate::quic`]).
//!
//! SKELETON: not implemented yet; every attempt fails as a network error.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use kudurru_core::{CacheKey, CachedAnswer, TtlPolicy, UpstreamSpec};

use super::Attempt;
use crate::metrics::{CoreMetrics, UpstreamCounters, UpstreamError};
use crate::settings::SharedSettings;

/// One core's connection to one upstream.
pub(super) struct QuicPool {
    spec: UpstreamSpec,
}

impl QuicPool {
    /// A pool for `spec` with no connection yet, counted in `slot`.
    pub(super) fn new(
        spec: UpstreamSpec,
        _metrics: Arc<CoreMetrics>,
        _settings: SharedSettings,
        _slot: usize,
    ) -> Self {
        Self { spec }
    }

    /// One query for `key`; the connection's serial number goes to `connection`.
    pub(super) async fn ask(
        &self,
        key: &CacheKey,
        _policy: &TtlPolicy,
        _counters: &UpstreamCounters,
        _connection: &Cell<u64>,
    ) -> Result<(CachedAnswer, Instant), Attempt> {
        tracing::debug!(upstream = %self.spec, query = ?key, "not implemented");
        Err(Attempt::Failed(UpstreamError::Network))
    }

    /// Takes connection `serial` out of use for new queries (an attempt on it timed out).
    pub(super) fn retire(&self, _serial: u64) {}
}
