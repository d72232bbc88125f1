//! `upstreams` and `upstream.*`: the resolvers queries are forwarded to and how long to wait.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, parse_strings, show_list, show_string};

/// Default upstreams: well-known public resolvers (Cloudflare, Quad9), over UDP.
pub const DEFAULT_UPSTREAMS: &[&str] = &["udp://1.1.1.1:53", "udp://9.9.9.9:53"];
/// Default wait for one attempt at one upstream.
pub const DEFAULT_UPSTREAM_TIMEOUT: &str = "1500ms";
/// Default bound on all attempts for one query.
pub const DEFAULT_RESOLVE_TIMEOUT: &str = "4s";

/// `upstream.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpstreamSection {
    /// One attempt's timeout.
    pub timeout: String,
    /// The whole resolution's bound.
    pub resolve_timeout: String,
}

impl Default for UpstreamSection {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_UPSTREAM_TIMEOUT.into(),
            resolve_timeout: DEFAULT_RESOLVE_TIMEOUT.into(),
        }
    }
}

/// The `upstreams` key and the `upstream.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "upstreams",
        kind: "list of URLs",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstreams,
        parse: parse_strings,
        show: show_list,
        description: "upstream resolvers: udp://IP:P (TCP on truncation) or tcp://IP:P",
    },
    key! {
        key: "upstream.timeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.upstream.timeout,
        parse: parse_string,
        show: show_string,
        description: "the longest wait for one attempt before the next is sent (3x the upstream's smoothed RTT, at least 200 ms, at most this); earlier attempts stay open until upstream.resolveTimeout",
    },
    key! {
        key: "upstream.resolveTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.upstream.resolve_timeout,
        parse: parse_string,
        show: show_string,
        description: "bound on all attempts for one query; then SERVFAIL (cached for cache.servfailTTL)",
    },
];
