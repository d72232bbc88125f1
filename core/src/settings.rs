//! The settings snapshot: what the data plane reads of the effective configuration. The control
//! thread builds one, the shell publishes it to every core (`kudurru-transports`' `settings`
//! module), and nothing mutates it in place: a reload builds a new one.
//!
//! A query reads one snapshot from ingress to its answer, so a reload never splits a query
//! between two settings.
//!
//! Parts that are large or compiled are `Arc`s of their own (today the upstream set), so
//! cloning a snapshot to change one part shares the others instead of copying them. The
//! compiled policy index is one (`policy`), the zones another (`zones`).

use std::sync::Arc;
use std::time::Duration;

use crate::acl::AccessList;
use crate::answer::TtlPolicy;
use crate::limiter::RateLimit;
use crate::local::LocalNames;
use crate::policy::PolicyIndex;
use crate::upstream::{UpstreamSpec, UpstreamStrategy, UpstreamTls};
use crate::zone::Zones;

/// What the data plane needs from the effective configuration: one immutable snapshot, read
/// once per query.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Upstreams to forward to (`upstreams`), in the configured order (a selector's indexes
    /// point into it). Shared: a clone of the snapshot does not copy the list.
    pub upstreams: Arc<[UpstreamSpec]>,
    /// How the next upstream is chosen (`upstream.strategy`).
    pub upstream_strategy: UpstreamStrategy,
    /// How encrypted upstreams are verified and padded (`upstream.tls.*`,
    /// `upstream.padding`). Shared: the transports build their TLS client configurations
    /// once per value.
    pub upstream_tls: Arc<UpstreamTls>,
    /// Idle time after which a connection to a TCP or encrypted upstream is closed
    /// (`upstream.idleTimeout`).
    pub upstream_idle_timeout: Duration,
    /// How often an upstream taken out of rotation after failures is probed
    /// (`upstream.healthCheckInterval`).
    pub upstream_health_interval: Duration,
    /// TTL clamps and negative/failure caching (`cache.*TTL`).
    pub ttl: TtlPolicy,
    /// Serving expired answers when upstreams fail (RFC 8767; `cache.serveStale`,
    /// `cache.staleMaxAge`, `upstream.staleAnswerTimeout`).
    pub stale: StalePolicy,
    /// Whether a cached answer asked in the last tenth of its TTL is refreshed in the
    /// background (`cache.prefetch`).
    pub prefetch: bool,
    /// Total cached answers across all cores (`cache.maxEntries`).
    pub cache_max_entries: usize,
    /// Locally answered names and CHAOS identity.
    pub local: LocalNames,
    /// The EDNS UDP payload size kudurru advertises and the most it sends (`edns.udpPayload`).
    pub edns_payload: u16,
    /// How long one upstream attempt may take (`upstream.timeout`).
    pub upstream_timeout: Duration,
    /// How long resolving one query may take over all attempts before SERVFAIL
    /// (`upstream.resolveTimeout`).
    pub resolve_timeout: Duration,
    /// Idle time after which a client TCP connection is closed (`tcp.idleTimeout`, RFC 7766 §6.2.3).
    pub tcp_idle_timeout: Duration,
    /// Most client connections per core, all connection transports together
    /// (`tcp.maxConnectionsPerCore`); at the limit the longest-idle one is closed.
    pub tcp_max_connections: usize,
    /// Most TCP, DoT and DoH connections one client prefix holds per core
    /// (`tcp.maxConnectionsPerClient`).
    pub tcp_max_connections_per_client: usize,
    /// Most DoQ and DoH3 connections one client prefix holds per core
    /// (`quic.maxConnectionsPerClient`).
    pub quic_max_connections_per_client: usize,
    /// Most queries in flight on one TCP connection (`tcp.maxPipelined`).
    pub tcp_max_pipelined: usize,
    /// How long a DNS-over-TLS client may take to finish its handshake (`tls.handshakeTimeout`).
    pub tls_handshake_timeout: Duration,
    /// How long shutdown waits for in-flight queries (`server.shutdownGrace`).
    pub shutdown_grace: Duration,
    /// Which clients are served and what the others get (`server.allow`, `server.deny`,
    /// `server.aclAction`), compiled once. Shared: a clone does not copy the table.
    pub acl: Arc<AccessList>,
    /// The per-client rate limiter (`ratelimit.*`).
    pub ratelimit: RateLimit,
    /// Token buckets per core (`ratelimit.tableSize`; restart-bound).
    pub ratelimit_table_size: usize,
    /// Client groups, policies and compiled block lists (the objects, not the settings file):
    /// built by the control thread's list manager. Shared: a settings reload keeps it, a list
    /// refresh replaces only it.
    pub policy: Arc<PolicyIndex>,
    /// Authoritative, built-in and forward zones (the Zone and RecordSet objects, transfers):
    /// built by the control thread's zone manager. Shared like `policy`: a settings reload
    /// keeps it, a zone change replaces only it.
    pub zones: Arc<Zones>,
}

/// Serve-stale (RFC 8767).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StalePolicy {
    /// Whether expired answers are served at all (`cache.serveStale`).
    pub enabled: bool,
    /// How long past its expiry an answer may still be served (`cache.staleMaxAge`).
    pub max_age: Duration,
    /// How long a miss with a stale answer at hand waits for the upstreams before the stale
    /// answer is sent (`upstream.staleAnswerTimeout`; RFC 8767 suggests 1.8 s).
    pub answer_timeout: Duration,
}

pub use crate::answer::STALE_ANSWER_TTL;

impl Default for StalePolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            max_age: Duration::from_secs(86_400),
            answer_timeout: Duration::from_millis(1800),
        }
    }
}

impl Settings {
    /// Capacity of one core's shard.
    pub fn shard_capacity(&self, cores: usize) -> usize {
        (self.cache_max_entries / cores.max(1)).max(1)
    }

    /// Capacity of one core's L1 of answers owned by other cores: an eighth of a shard.
    pub fn l1_capacity(&self, cores: usize) -> usize {
        (self.shard_capacity(cores) / 8).max(64)
    }
}
