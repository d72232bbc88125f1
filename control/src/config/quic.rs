//! `quic.*`: bounds on client QUIC connections (DoQ and DoH3).

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_num, show_num};

/// Default DoQ and DoH3 connections one client prefix may hold open per core.
pub const DEFAULT_QUIC_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

/// `quic.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct QuicSection {
    /// Connections per client prefix per core.
    pub max_connections_per_client: usize,
}

impl Default for QuicSection {
    fn default() -> Self {
        Self {
            max_connections_per_client: DEFAULT_QUIC_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

/// The `quic.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "quic.maxConnectionsPerClient",
    kind: "integer",
    scope: Cluster,
    host_only: false,
    restart_required: true,
    field: |c| c.quic.max_connections_per_client,
    parse: parse_num,
    show: show_num,
    description: "DoQ and DoH3 connections one client prefix (ratelimit.ipv4Prefix / ipv6Prefix) may hold open on one core; more are refused (CONNECTION_REFUSED)",
}];
