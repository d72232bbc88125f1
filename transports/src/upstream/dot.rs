//! DNS over TLS (RFC 7858): one pipelined TLS connection per core per upstream (RFC 7766 §6.2.1.1), as [`super::tcp`] is for plain TCP.
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
pub(super) struct DotPool {
    spec: UpstreamSpec,
}

impl DotPool {
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
