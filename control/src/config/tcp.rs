//! `tcp.*`: bounds on client connections (TCP, and the DoT, DoH, DoQ and DoH3 ones too).

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_num, parse_string, show_num, show_string};

/// Default idle time before a client connection is closed.
pub const DEFAULT_TCP_IDLE_TIMEOUT: &str = "10s";
/// Default client connections per core.
pub const DEFAULT_TCP_MAX_CONNECTIONS_PER_CORE: usize = 1024;
/// Default queries in flight (or streams) per client connection.
pub const DEFAULT_TCP_MAX_PIPELINED: usize = 64;
/// Default TCP, DoT and DoH connections one client prefix may hold open per core.
pub const DEFAULT_TCP_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

/// `tcp.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TcpSection {
    /// Idle timeout.
    pub idle_timeout: String,
    /// Connections per core.
    pub max_connections_per_core: usize,
    /// Queries in flight per connection.
    pub max_pipelined: usize,
    /// Connections per client prefix per core.
    pub max_connections_per_client: usize,
}

impl Default for TcpSection {
    fn default() -> Self {
        Self {
            idle_timeout: DEFAULT_TCP_IDLE_TIMEOUT.into(),
            max_connections_per_core: DEFAULT_TCP_MAX_CONNECTIONS_PER_CORE,
            max_pipelined: DEFAULT_TCP_MAX_PIPELINED,
            max_connections_per_client: DEFAULT_TCP_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

/// The `tcp.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "tcp.idleTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.tcp.idle_timeout,
        parse: parse_string,
        show: show_string,
        description: "a client TCP, DoT, DoH, DoQ or DoH3 connection idle this long is closed (RFC 7766 §6.2.3; HTTP/2 with GOAWAY, QUIC by its idle timeout)",
    },
    key! {
        key: "tcp.maxConnectionsPerCore",
        kind: "integer",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.tcp.max_connections_per_core,
        parse: parse_num,
        show: show_num,
        description: "client TCP, DoT, DoH, DoQ and DoH3 connections each core holds (together); at the limit the connection idle longest (no query for the longest time) is closed to admit a new one",
    },
    key! {
        key: "tcp.maxConnectionsPerClient",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.tcp.max_connections_per_client,
        parse: parse_num,
        show: show_num,
        description: "TCP, DoT and DoH connections one client prefix (ratelimit.ipv4Prefix / ipv6Prefix) may hold open on one core; more are closed at once",
    },
    key! {
        key: "tcp.maxPipelined",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.tcp.max_pipelined,
        parse: parse_num,
        show: show_num,
        description: "queries in flight on one TCP or DoT connection (past this kudurru stops reading it), and concurrent streams on one DoH (HTTP/2), DoQ or DoH3 connection",
    },
];
