//! `cache.*`: how many answers are kept and the TTL bounds they are kept under.

use kudurru_core::TtlPolicy;
use serde::{Deserialize, Serialize};

use super::key::{
    KeyInfo, key, parse_bool, parse_num, parse_string, show_bool, show_num, show_string,
};

/// Default total cache size in answers.
pub const DEFAULT_CACHE_MAX_ENTRIES: usize = 1_000_000;

/// Default age past expiry up to which an answer may be served stale (RFC 8767 §5 suggests
/// 1 to 3 days).
pub(super) const DEFAULT_STALE_MAX_AGE: &str = "1d";

/// `cache.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSection {
    /// Total answers across shards.
    #[serde(rename = "maxEntries")]
    pub max_entries: usize,
    /// Lower TTL clamp.
    #[serde(rename = "minTTL")]
    pub min_ttl: u32,
    /// Upper TTL clamp.
    #[serde(rename = "maxTTL")]
    pub max_ttl: u32,
    /// Upper bound of negative caching.
    #[serde(rename = "negativeMaxTTL")]
    pub negative_max_ttl: u32,
    /// Failure caching.
    #[serde(rename = "servfailTTL")]
    pub servfail_ttl: u32,
    /// Serve expired answers when the upstreams fail (RFC 8767).
    #[serde(rename = "serveStale")]
    pub serve_stale: bool,
    /// How long past expiry an answer may be served.
    #[serde(rename = "staleMaxAge")]
    pub stale_max_age: String,
    /// Refresh answers asked in the last tenth of their TTL.
    pub prefetch: bool,
}

impl Default for CacheSection {
    fn default() -> Self {
        let ttl = TtlPolicy::default();
        Self {
            max_entries: DEFAULT_CACHE_MAX_ENTRIES,
            min_ttl: ttl.min_ttl,
            max_ttl: ttl.max_ttl,
            negative_max_ttl: ttl.negative_max_ttl,
            servfail_ttl: ttl.servfail_ttl,
            serve_stale: true,
            stale_max_age: DEFAULT_STALE_MAX_AGE.into(),
            prefetch: true,
        }
    }
}

/// The `cache.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "cache.maxEntries",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.max_entries,
        parse: parse_num,
        show: show_num,
        description: "answers cached across all cores (each core owns maxEntries/cores; each L1 adds 1/8 of that)",
    },
    key! {
        key: "cache.minTTL",
        kind: "seconds",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.min_ttl,
        parse: parse_num,
        show: show_num,
        description: "positive TTLs are raised to at least this",
    },
    key! {
        key: "cache.maxTTL",
        kind: "seconds",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.max_ttl,
        parse: parse_num,
        show: show_num,
        description: "positive TTLs are capped at this",
    },
    key! {
        key: "cache.negativeMaxTTL",
        kind: "seconds",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.negative_max_ttl,
        parse: parse_num,
        show: show_num,
        description: "negative answers (RFC 2308: min of SOA TTL and MINIMUM) are cached at most this long",
    },
    key! {
        key: "cache.servfailTTL",
        kind: "seconds",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.servfail_ttl,
        parse: parse_num,
        show: show_num,
        description: "resolution failures are cached this long (RFC 9520: at least 1, at most 300)",
    },
    key! {
        key: "cache.serveStale",
        kind: "boolean",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.serve_stale,
        parse: parse_bool,
        show: show_bool,
        description: "when every upstream fails or upstream.staleAnswerTimeout passes, answer from an expired entry (TTL 30, EDE 3 \"Stale Answer\") and refresh it in the background (RFC 8767)",
    },
    key! {
        key: "cache.staleMaxAge",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.stale_max_age,
        parse: parse_string,
        show: show_string,
        description: "how long past its expiry an answer may still be served stale",
    },
    key! {
        key: "cache.prefetch",
        kind: "boolean",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.cache.prefetch,
        parse: parse_bool,
        show: show_bool,
        description: "an answer asked in the last tenth of its TTL is refreshed in the background by its owner core, so names in use do not miss (Unbound's prefetch)",
    },
];
