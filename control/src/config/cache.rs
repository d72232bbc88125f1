//! `cache.*`: how many answers are kept and the TTL bounds they are kept under.

use kudurru_core::TtlPolicy;
use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_num, show_num};

/// Default total cache size in answers.
pub const DEFAULT_CACHE_MAX_ENTRIES: usize = 1_000_000;

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
];
