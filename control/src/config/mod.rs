//! Configuration: built-in defaults, the TOML node file, `KUDURRU_…` environment variables and
//! command-line flags, lowest first. Every key is defined once, next to its section, with its
//! scope and whether a change needs a restart; [`keys`] lists them all in documentation order and
//! docs/configuration.md is rendered from that list.
//!
//! Parse, don't validate: [`Config`] is the raw layered document; [`Config::validate`] turns it
//! into the typed values the data plane runs on, or an error naming the key.
//!
//! ```text
//! defaults … flags ──layers, key by key through KeyInfo──► Config ──validate──► Validated
//! ```
//!
//! A section is one file: its struct, its `Default` and named defaults, and its `KEYS`. A new one
//! (blocking, zones, querylog, cluster) adds that file, a field of [`Config`] and a line of
//! `SECTIONS`.

mod api;
mod audit;
mod auth;
mod blocking;
mod cache;
mod cluster;
mod docs;
mod edns;
mod error;
mod key;
mod listener;
mod log;
mod ops;
mod querylog;
mod quic;
mod ratelimit;
mod server;
mod shutdown;
mod sources;
mod storage;
mod tcp;
mod tls;
mod upstream;
mod validate;
mod zones;

use serde::{Deserialize, Serialize};

pub use api::{ApiSection, DEFAULT_API_ADDRESS};
pub use audit::{AuditSection, DEFAULT_AUDIT_RETENTION};
pub use auth::{AuthSection, DEFAULT_TOKEN_MAX_LIFETIME, TokensSection};
pub use blocking::{
    BlockingSection, BlockingSettings, DEFAULT_BLOCK_TTL, DEFAULT_FETCH_TIMEOUT,
    DEFAULT_FILE_SOURCE_DIR, DEFAULT_MAX_LIST_BYTES, DEFAULT_MAX_LIST_ENTRIES,
    DEFAULT_REFRESH_INTERVAL, LIST_BYTES_RANGE, LIST_ENTRIES_RANGE, MAX_BLOCK_TTL,
    MAX_CLIENT_ID_DOMAINS, MAX_FETCH_TIMEOUT, MIN_REFRESH_INTERVAL,
};
pub use cache::{CacheSection, DEFAULT_CACHE_MAX_ENTRIES};
pub use cluster::{
    ClusterSection, ClusterSettings, DEFAULT_CLUSTER_DRIVER, DEFAULT_CLUSTER_NAME,
    DEFAULT_LEASE_TTL, EtcdCluster, EtcdSection, LEASE_TTL_RANGE,
};
pub use docs::render_key_table;
pub use edns::EdnsSection;
pub use error::ConfigError;
pub use key::{KeyInfo, Scope, plain_reason, show_list};
pub use listener::{DEFAULT_DOH_PATH, parse_listener};
pub use log::{DEFAULT_LOG_FORMAT, DEFAULT_LOG_LEVEL, LogSection};
pub use ops::{DEFAULT_OPS_ADDRESS, OpsSection};
pub use querylog::{
    BUFFER_BATCHES_RANGE, BUFFER_EVENTS_RANGE, DEFAULT_DNSTAP_BUFFER_EVENTS,
    DEFAULT_PSEUDONYM_ROTATION, DEFAULT_QUERYLOG_MAX_BYTES, DEFAULT_QUERYLOG_RETENTION,
    DEFAULT_QUERYLOG_SINK, DnstapAddress, DnstapSection, MIN_PSEUDONYM_ROTATION,
    MIN_QUERYLOG_MAX_BYTES, QUERYLOG_DB_FILE, QUERYLOG_JSONL_FILE, QueryLogSection,
    QueryLogSettings, SinkKind,
};
pub use quic::{DEFAULT_QUIC_MAX_CONNECTIONS_PER_CLIENT, QuicSection};
pub use ratelimit::{DEFAULT_RATELIMIT_TABLE_SIZE, MAX_ALLOWLIST, RateLimitSection};
pub use server::{DEFAULT_LISTEN, DEFAULT_SHUTDOWN_GRACE, ServerSection};
pub use shutdown::{DEFAULT_DRAIN_DELAY, ShutdownSection};
pub use sources::RESERVED_ENV;
pub use storage::{DEFAULT_DATA_DIR, StorageSection};
pub use tcp::{
    DEFAULT_TCP_IDLE_TIMEOUT, DEFAULT_TCP_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_TCP_MAX_CONNECTIONS_PER_CORE, DEFAULT_TCP_MAX_PIPELINED, TcpSection,
};
pub use tls::{DEFAULT_TLS_HANDSHAKE_TIMEOUT, TlsSection};
pub use upstream::{
    DEFAULT_RESOLVE_TIMEOUT, DEFAULT_UPSTREAM_TIMEOUT, DEFAULT_UPSTREAMS, UpstreamSection,
};
pub use validate::Validated;
pub(crate) use validate::is_own_listener;
pub use zones::{
    DEFAULT_JOURNAL_SIZE, DEFAULT_MAX_ZONE_RECORDS, DEFAULT_ZONE_FILE_DIR, JOURNAL_SIZE_RANGE,
    ZONE_RECORDS_RANGE, ZonesSection, ZonesSettings,
};

use key::{key, parse_string, show_string};

/// The layered configuration document (TOML keys are camelCase dotted paths).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// `settingsFile`: the watched settings file (cluster-scope keys); empty = none.
    pub settings_file: String,
    /// `server.*`: listeners, cores, identity.
    pub server: ServerSection,
    /// `upstreams`: upstream URLs.
    pub upstreams: Vec<String>,
    /// `upstream.*`: timeouts.
    pub upstream: UpstreamSection,
    /// `cache.*`.
    pub cache: CacheSection,
    /// `edns.*`.
    pub edns: EdnsSection,
    /// `tcp.*`.
    pub tcp: TcpSection,
    /// `quic.*`.
    pub quic: QuicSection,
    /// `tls.*`: the certificate of the DoT, DoH, DoQ and DoH3 listeners.
    pub tls: TlsSection,
    /// `ratelimit.*`.
    pub ratelimit: RateLimitSection,
    /// `blocking.*`: block lists, client IDs, block answers.
    pub blocking: BlockingSection,
    /// `zones.*`: zone files, journals, limits, TSIG keys.
    pub zones: ZonesSection,
    /// `shutdown.*`.
    pub shutdown: ShutdownSection,
    /// `ops.*`.
    pub ops: OpsSection,
    /// `api.*`.
    pub api: ApiSection,
    /// `storage.*`.
    pub storage: StorageSection,
    /// `auth.*`.
    pub auth: AuthSection,
    /// `audit.*`.
    pub audit: AuditSection,
    /// `querylog.*`.
    pub querylog: QueryLogSection,
    /// `log.*`.
    pub log: LogSection,
    /// `cluster.*`: a fleet on etcd.
    pub cluster: ClusterSection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            settings_file: String::new(),
            server: ServerSection::default(),
            upstreams: DEFAULT_UPSTREAMS.iter().map(|s| (*s).to_owned()).collect(),
            upstream: UpstreamSection::default(),
            cache: CacheSection::default(),
            edns: EdnsSection::default(),
            tcp: TcpSection::default(),
            quic: QuicSection::default(),
            tls: TlsSection::default(),
            ratelimit: RateLimitSection::default(),
            blocking: BlockingSection::default(),
            zones: ZonesSection::default(),
            shutdown: ShutdownSection::default(),
            ops: OpsSection::default(),
            api: ApiSection::default(),
            storage: StorageSection::default(),
            auth: AuthSection::default(),
            audit: AuditSection::default(),
            querylog: QueryLogSection::default(),
            log: LogSection::default(),
            cluster: ClusterSection::default(),
        }
    }
}

/// The keys at the top of the document that belong to no section.
const ROOT_KEYS: &[KeyInfo] = &[key! {
    key: "settingsFile",
    kind: "path",
    scope: Node,
    host_only: true,
    restart_required: true,
    field: |c| c.settings_file,
    parse: parse_string,
    show: show_string,
    description: "settings file of cluster-scope keys, watched and reloaded; empty = none; KUDURRU_SETTINGS_FILE overrides",
}];

/// Every section's keys, in documentation order (docs/configuration.md lists them so).
static SECTIONS: &[&[KeyInfo]] = &[
    ROOT_KEYS,
    server::KEYS,
    shutdown::KEYS,
    upstream::KEYS,
    cache::KEYS,
    edns::KEYS,
    tcp::KEYS,
    quic::KEYS,
    tls::KEYS,
    ratelimit::KEYS,
    blocking::KEYS,
    zones::KEYS,
    ops::KEYS,
    api::KEYS,
    storage::KEYS,
    auth::KEYS,
    audit::KEYS,
    querylog::KEYS,
    log::KEYS,
    cluster::KEYS,
];

/// Every configuration key, in documentation order.
pub fn keys() -> impl Iterator<Item = &'static KeyInfo> + Clone {
    SECTIONS.iter().flat_map(|section| section.iter())
}

/// Looks a key up by its dotted path, case-insensitively (environment variables are upper
/// case; the command line forgives case).
pub fn find_key(key: &str) -> Option<&'static KeyInfo> {
    keys().find(|k| k.key.eq_ignore_ascii_case(key))
}

/// Looks a key up by its dotted path exactly as documented (camelCase): the API's JSON keys,
/// where `cache.maxttl` beside `cache.maxTTL` must not silently win.
pub fn find_key_exact(key: &str) -> Option<&'static KeyInfo> {
    keys().find(|k| k.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips_through_its_accessors() {
        let defaults = Config::default();
        for k in keys() {
            let mut c = Config::default();
            k.set(&mut c, &k.get(&defaults))
                .unwrap_or_else(|e| panic!("{}: {e}", k.key));
            assert_eq!(c, defaults, "{} does not round-trip", k.key);
            // The TOML path exists in the serialized document.
            let doc = toml::Table::try_from(&defaults).unwrap();
            let mut node = toml::Value::Table(doc);
            for part in k.key.split('.') {
                node = node
                    .get(part)
                    .unwrap_or_else(|| panic!("{} not a TOML path", k.key))
                    .clone();
            }
        }
    }
}
