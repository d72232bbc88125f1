//! `ratelimit.*`: the per-client-prefix token buckets, their answer to a limited query and the
//! prefixes they never limit.

use kudurru_core::{Prefix, RateLimit};
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::key::{KeyInfo, key, parse_num, parse_strings, show_list, show_num};

/// Default token buckets per core (32 bytes each: 2 MiB).
pub const DEFAULT_RATELIMIT_TABLE_SIZE: usize = 65_536;
/// Most allowlist entries (each is compiled into the kernel steering program).
pub const MAX_ALLOWLIST: usize = kudurru_transports::steering::MAX_EXEMPT;

/// `ratelimit.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimitSection {
    /// Queries per second per client prefix; 0 = off.
    pub qps: u32,
    /// Bucket size.
    pub burst: u32,
    /// Every Nth limited UDP query answered TC=1.
    pub slip: u32,
    /// IPv4 client prefix length.
    pub ipv4_prefix: u8,
    /// IPv6 client prefix length.
    pub ipv6_prefix: u8,
    /// Prefixes never limited.
    pub allowlist: Vec<String>,
    /// Buckets per core.
    pub table_size: usize,
}

impl Default for RateLimitSection {
    fn default() -> Self {
        let d = RateLimit::default();
        Self {
            qps: d.qps,
            burst: d.burst,
            slip: d.slip,
            ipv4_prefix: d.ipv4_prefix,
            ipv6_prefix: d.ipv6_prefix,
            allowlist: Vec::new(),
            table_size: DEFAULT_RATELIMIT_TABLE_SIZE,
        }
    }
}

/// The `ratelimit.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "ratelimit.qps",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.ratelimit.qps,
        parse: parse_num,
        show: show_num,
        description: "queries per second each client prefix may send; 0 = limiter off",
    },
    key! {
        key: "ratelimit.burst",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.ratelimit.burst,
        parse: parse_num,
        show: show_num,
        description: "token bucket size: queries a quiet client may send at once",
    },
    key! {
        key: "ratelimit.slip",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.ratelimit.slip,
        parse: parse_num,
        show: show_num,
        description: "every Nth limited UDP query gets an empty TC=1 answer (retry over TCP); 0 = drop all, 1 = truncate all",
    },
    key! {
        key: "ratelimit.ipv4Prefix",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.ratelimit.ipv4_prefix,
        parse: parse_num,
        show: show_num,
        description: "IPv4 addresses sharing this prefix length are one client",
    },
    key! {
        key: "ratelimit.ipv6Prefix",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.ratelimit.ipv6_prefix,
        parse: parse_num,
        show: show_num,
        description: "IPv6 addresses sharing this prefix length are one client",
    },
    key! {
        key: "ratelimit.allowlist",
        kind: "list of prefixes",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.ratelimit.allowlist,
        parse: parse_strings,
        show: show_list,
        description: "client prefixes never limited (ADDR/LEN or ADDR; at most 256)",
    },
    key! {
        key: "ratelimit.tableSize",
        kind: "integer",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.ratelimit.table_size,
        parse: parse_num,
        show: show_num,
        description: "token buckets per core (32 bytes each); a full table displaces its fullest buckets",
    },
];

impl RateLimitSection {
    /// Checks the limiter's bounds and parses the allowlist.
    pub(super) fn validate(&self) -> Result<RateLimit, ConfigError> {
        if self.qps > 1_000_000 {
            return Err(ConfigError::value(
                "ratelimit.qps",
                self.qps,
                "must be 0 (off) to 1000000",
            ));
        }
        if !(1..=1_000_000).contains(&self.burst) {
            return Err(ConfigError::value(
                "ratelimit.burst",
                self.burst,
                "must be 1 to 1000000",
            ));
        }
        if self.ipv4_prefix > 32 {
            return Err(ConfigError::value(
                "ratelimit.ipv4Prefix",
                self.ipv4_prefix,
                "must be 0 to 32",
            ));
        }
        if self.ipv6_prefix > 128 {
            return Err(ConfigError::value(
                "ratelimit.ipv6Prefix",
                self.ipv6_prefix,
                "must be 0 to 128",
            ));
        }
        if !(64..=(1 << 24)).contains(&self.table_size) {
            return Err(ConfigError::value(
                "ratelimit.tableSize",
                self.table_size,
                "must be 64 to 16777216",
            ));
        }
        if self.allowlist.len() > MAX_ALLOWLIST {
            return Err(ConfigError::value(
                "ratelimit.allowlist",
                self.allowlist.len(),
                format!("at most {MAX_ALLOWLIST} prefixes"),
            ));
        }
        let allowlist = self
            .allowlist
            .iter()
            .map(|p| {
                p.parse::<Prefix>()
                    .map_err(|e| ConfigError::value("ratelimit.allowlist", p, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RateLimit {
            qps: self.qps,
            burst: self.burst,
            slip: self.slip,
            ipv4_prefix: self.ipv4_prefix,
            ipv6_prefix: self.ipv6_prefix,
            allowlist,
        })
    }
}
