//! Configuration: built-in defaults, the TOML node file, `KUDURRU_…` environment variables and
//! command-line flags, lowest first. Every key is listed once in [`KEYS`] with its scope and
//! whether a change needs a restart; docs/configuration.md is rendered from that table.
//!
//! Parse, don't validate: [`Config`] is the raw layered document; [`Config::validate`] turns it
//! into the typed values the data plane runs on, or an error naming the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kudurru_core::upstream::parse_host_port;
use kudurru_core::{LocalNames, Prefix, RateLimit, ServerIdentity, TtlPolicy, UpstreamSpec};
use kudurru_transports::{ListenerSpec, Settings};
use serde::{Deserialize, Serialize};

mod error;
mod key;
mod listener;

pub use error::ConfigError;
pub use key::{KeyInfo, Scope};
pub use listener::{DEFAULT_DOH_PATH, parse_listener};

use key::{
    key, parse_cpus, parse_num, parse_string, parse_strings, show_list, show_num, show_string,
};

/// Default client listeners: DNS over UDP and TCP on port 5353 of both loopbacks.
pub const DEFAULT_LISTEN: &[&str] = &["127.0.0.1:5353", "[::1]:5353"];
/// Default upstreams: well-known public resolvers (Cloudflare, Quad9), over UDP.
pub const DEFAULT_UPSTREAMS: &[&str] = &["udp://1.1.1.1:53", "udp://9.9.9.9:53"];
/// Default ops listener (health, metrics); no authentication, so loopback only.
pub const DEFAULT_OPS_ADDRESS: &str = "127.0.0.1:8081";
/// Default HTTP API listener; token-authenticated, loopback by default.
pub const DEFAULT_API_ADDRESS: &str = "127.0.0.1:8080";
/// Default data directory (tokens; later the query log and list cache).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/kudurru";
/// Default total cache size in answers.
pub const DEFAULT_CACHE_MAX_ENTRIES: usize = 1_000_000;
/// Default token buckets per core (32 bytes each: 2 MiB).
pub const DEFAULT_RATELIMIT_TABLE_SIZE: usize = 65_536;
/// Most allowlist entries (each is compiled into the kernel steering program).
pub const MAX_ALLOWLIST: usize = kudurru_transports::steering::MAX_EXEMPT;

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
    /// `tls.*`: certificate for DNS-over-TLS listeners.
    pub tls: TlsSection,
    /// `ratelimit.*`.
    pub ratelimit: RateLimitSection,
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
    /// `log.*`.
    pub log: LogSection,
}

/// `server.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerSection {
    /// Listener URLs.
    pub listen: Vec<String>,
    /// Number of cores; 0 means every available CPU.
    pub cores: usize,
    /// CPUs to pin to (overrides `cores` when non-empty).
    pub cpus: Vec<usize>,
    /// `id.server` answer; empty refuses it.
    pub identity: String,
    /// `version.server` answer; empty refuses it.
    pub version: String,
    /// How long shutdown waits for in-flight queries.
    pub shutdown_grace: String,
}

/// `upstream.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpstreamSection {
    /// One attempt's timeout.
    pub timeout: String,
    /// The whole resolution's bound.
    pub resolve_timeout: String,
}

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

/// `edns.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdnsSection {
    /// Advertised and maximum UDP payload.
    pub udp_payload: u16,
}

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
}

/// `tls.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSection {
    /// PEM certificate chain, leaf first.
    pub cert_file: String,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
    /// Handshake deadline.
    pub handshake_timeout: String,
}

impl Default for TlsSection {
    fn default() -> Self {
        Self {
            cert_file: String::new(),
            key_file: String::new(),
            handshake_timeout: "5s".into(),
        }
    }
}

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

/// `shutdown.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ShutdownSection {
    /// Lameduck time on SIGTERM before the listeners close.
    pub drain_delay: String,
}

impl Default for ShutdownSection {
    fn default() -> Self {
        Self {
            drain_delay: "0s".into(),
        }
    }
}

/// `ops.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OpsSection {
    /// Ops listener address.
    pub address: String,
}

/// `api.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiSection {
    /// HTTP API listener; empty = no API.
    pub address: String,
    /// PEM certificate chain for HTTPS on the API listener; empty = plain HTTP.
    pub tls_cert: String,
    /// PEM private key for `tlsCert`.
    pub tls_key: String,
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            address: DEFAULT_API_ADDRESS.into(),
            tls_cert: String::new(),
            tls_key: String::new(),
        }
    }
}

/// `storage.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct StorageSection {
    /// Where tokens (and later databases) live.
    pub data_dir: String,
}

impl Default for StorageSection {
    fn default() -> Self {
        Self {
            data_dir: DEFAULT_DATA_DIR.into(),
        }
    }
}

/// `auth.*`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthSection {
    /// `auth.tokens.*`.
    pub tokens: TokensSection,
}

/// `auth.tokens.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TokensSection {
    /// The longest a token may live.
    pub max_lifetime: String,
}

impl Default for TokensSection {
    fn default() -> Self {
        Self {
            max_lifetime: "90d".into(),
        }
    }
}

/// `log.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LogSection {
    /// Level filter: `LEVEL` or `TARGET=LEVEL` directives, comma-separated (see `check_log_filter`).
    pub level: String,
    /// `text` or `json`.
    pub format: String,
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
            tls: TlsSection::default(),
            ratelimit: RateLimitSection::default(),
            shutdown: ShutdownSection::default(),
            ops: OpsSection::default(),
            api: ApiSection::default(),
            storage: StorageSection::default(),
            auth: AuthSection::default(),
            log: LogSection::default(),
        }
    }
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.iter().map(|s| (*s).to_owned()).collect(),
            cores: 0,
            cpus: Vec::new(),
            identity: String::new(),
            version: format!("kudurru {}", env!("CARGO_PKG_VERSION")),
            shutdown_grace: "5s".into(),
        }
    }
}

impl Default for UpstreamSection {
    fn default() -> Self {
        Self {
            timeout: "1500ms".into(),
            resolve_timeout: "4s".into(),
        }
    }
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

impl Default for EdnsSection {
    fn default() -> Self {
        Self {
            udp_payload: kudurru_core::wire::DEFAULT_EDNS_PAYLOAD,
        }
    }
}

impl Default for TcpSection {
    fn default() -> Self {
        Self {
            idle_timeout: "10s".into(),
            max_connections_per_core: 1024,
            max_pipelined: 64,
        }
    }
}

impl Default for OpsSection {
    fn default() -> Self {
        Self {
            address: DEFAULT_OPS_ADDRESS.into(),
        }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: "text".into(),
        }
    }
}

/// Every configuration key, in documentation order.
pub static KEYS: &[KeyInfo] = &[
    key! {
        key: "settingsFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.settings_file,
        parse: parse_string,
        show: show_string,
        description: "settings file of cluster-scope keys, watched and reloaded; empty = none; KUDURRU_SETTINGS_FILE overrides",
    },
    key! {
        key: "server.listen",
        kind: "list of URLs",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.server.listen,
        parse: parse_strings,
        show: show_list,
        description: "client listeners: udp://H:P, tcp://H:P, H:P for both, tls://H:P for DNS over TLS (port 853), https://H:P/path for DNS over HTTPS (port 443, path /dns-query), quic://H:P for DNS over QUIC (UDP port 853), h3://H:P/path for DNS over HTTP/3 (UDP port 443, path /dns-query); IPv4 or [IPv6]",
    },
    key! {
        key: "server.cores",
        kind: "integer",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.server.cores,
        parse: parse_num,
        show: show_num,
        description: "executors to run, one pinned per CPU; 0 = every CPU this process may use",
    },
    key! {
        key: "server.cpus",
        kind: "list of integers",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.server.cpus,
        parse: parse_cpus,
        show: show_list,
        description: "CPUs to pin the executors to (overrides server.cores when set)",
    },
    key! {
        key: "server.identity",
        kind: "string",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.server.identity,
        parse: parse_string,
        show: show_string,
        description: "TXT answer to CH id.server and hostname.bind (RFC 4892); empty = REFUSED",
    },
    key! {
        key: "server.version",
        kind: "string",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.server.version,
        parse: parse_string,
        show: show_string,
        description: "TXT answer to CH version.server and version.bind; empty = REFUSED",
    },
    key! {
        key: "server.shutdownGrace",
        kind: "duration",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.server.shutdown_grace,
        parse: parse_string,
        show: show_string,
        description: "how long SIGTERM/SIGINT waits for in-flight queries before exiting",
    },
    key! {
        key: "shutdown.drainDelay",
        kind: "duration",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.shutdown.drain_delay,
        parse: parse_string,
        show: show_string,
        description: "on SIGTERM, time in lameduck (health name SERVFAIL, readiness 503) before listeners close; 0s = none",
    },
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
        description: "one attempt at one upstream; then the next upstream is tried",
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
        key: "edns.udpPayload",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.edns.udp_payload,
        parse: parse_num,
        show: show_num,
        description: "EDNS UDP payload advertised and the largest UDP answer sent (512-4096)",
    },
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
        description: "client TCP, DoT, DoH, DoQ and DoH3 connections each core accepts (together); more are closed at once (QUIC: CONNECTION_REFUSED)",
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
    key! {
        key: "tls.certFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.tls.cert_file,
        parse: parse_string,
        show: show_string,
        description: "PEM certificate chain (leaf first) for tls://, https://, quic:// and h3:// listeners; the file is re-read when it changes",
    },
    key! {
        key: "tls.keyFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.tls.key_file,
        parse: parse_string,
        show: show_string,
        description: "PEM private key for tls.certFile; re-read when it changes (a bad pair keeps the old one)",
    },
    key! {
        key: "tls.handshakeTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.tls.handshake_timeout,
        parse: parse_string,
        show: show_string,
        description: "a DoT, DoH, DoQ or DoH3 client that has not finished its TLS (or QUIC) handshake after this long is closed",
    },
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
    key! {
        key: "ops.address",
        kind: "address",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.ops.address,
        parse: parse_string,
        show: show_string,
        description: "ops listener (/healthz/live, /healthz/ready, /metrics); unauthenticated, keep it on loopback",
    },
    key! {
        key: "api.address",
        kind: "address",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.api.address,
        parse: parse_string,
        show: show_string,
        description: "HTTP API listener (/api/v1, bearer tokens); empty = no API",
    },
    key! {
        key: "api.tlsCert",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.api.tls_cert,
        parse: parse_string,
        show: show_string,
        description: "PEM certificate chain (leaf first) to serve the API over HTTPS; set with api.tlsKey; empty = plain HTTP; the file is re-read when it changes",
    },
    key! {
        key: "api.tlsKey",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.api.tls_key,
        parse: parse_string,
        show: show_string,
        description: "PEM private key for api.tlsCert",
    },
    key! {
        key: "storage.dataDir",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.storage.data_dir,
        parse: parse_string,
        show: show_string,
        description: "data directory: tokens.json (0600) now, databases later; created 0700",
    },
    key! {
        key: "auth.tokens.maxLifetime",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.auth.tokens.max_lifetime,
        parse: parse_string,
        show: show_string,
        description: "the longest an API token lives, whatever --ttl it was created with",
    },
    key! {
        key: "log.level",
        kind: "string",
        scope: Node,
        host_only: false,
        restart_required: false,
        field: |c| c.log.level,
        parse: parse_string,
        show: show_string,
        description: "a level (off, error, warn, info, debug, trace) or LEVEL/TARGET=LEVEL directives, comma-separated; no span or field filters",
    },
    key! {
        key: "log.format",
        kind: "string",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.log.format,
        parse: parse_string,
        show: show_string,
        description: "text or json",
    },
];

/// Looks a key up by its dotted path (case-insensitive).
pub fn find_key(key: &str) -> Option<&'static KeyInfo> {
    KEYS.iter().find(|k| k.key.eq_ignore_ascii_case(key))
}

/// Longest `log.level` accepted; real filters are a few directives.
const LOG_FILTER_MAX_LEN: usize = 1024;

/// Accepts `LEVEL` or `TARGET=LEVEL` directives, comma-separated. `tracing`'s span and field
/// filters (`target[span{field=/regex/}]`) are refused: each field value is compiled into a DFA
/// whose construction is exponential in the worst case, so a 64-byte value found by the `config`
/// fuzz target kept the control thread busy for seconds, and `log.level` is writable over the API.
fn check_log_filter(filter: &str) -> Result<(), String> {
    if filter.len() > LOG_FILTER_MAX_LEN {
        return Err(format!("longer than {LOG_FILTER_MAX_LEN} bytes"));
    }
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let is_level = |word: &str| LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word));
    let is_target = |word: &str| {
        !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'.'))
    };
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let ok = match directive.split_once('=') {
            Some((target, level)) => is_target(target.trim()) && is_level(level.trim()),
            None => is_level(directive) || is_target(directive),
        };
        if !ok {
            return Err(format!(
                "directive {directive:?} is not LEVEL or TARGET=LEVEL (levels: {}); span and field \
                 filters are not supported",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Variables with the `KUDURRU_` prefix that are not configuration keys.
const RESERVED_ENV: &[&str] = &["KUDURRU_SETTINGS_FILE", "KUDURRU_BIN"];

impl Config {
    /// Reads the TOML node file at `path` over the defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses TOML text over the defaults; the error names line, column and key.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())
    }

    /// Applies `KUDURRU_<SECTION>__<KEY>` variables from `vars` (case-insensitive keys);
    /// returns the keys they set.
    pub fn apply_env(
        &mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Vec<&'static str>, ConfigError> {
        let mut set = Vec::new();
        for (var, value) in vars {
            let Some(path) = var.strip_prefix("KUDURRU_") else {
                continue;
            };
            if RESERVED_ENV.contains(&var.as_str()) {
                continue;
            }
            let key = path.replace("__", ".");
            let info = find_key(&key).ok_or_else(|| ConfigError::UnknownEnv {
                var: var.clone(),
                key: key.clone(),
            })?;
            info.set(self, &value).map_err(|e| ConfigError::Env {
                var: var.clone(),
                source: Box::new(e),
            })?;
            set.push(info.key);
        }
        Ok(set)
    }

    /// Checks every value and builds what the data plane runs on.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        let listeners = self
            .server
            .listen
            .iter()
            .map(|url| {
                parse_listener(url).ok_or_else(|| {
                    ConfigError::value(
                        "server.listen",
                        url,
                        "expected udp://H:P, tcp://H:P, tls://H:P, https://H:P/path, quic://H:P, h3://H:P/path or H:P with an IP address",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if listeners.is_empty() {
            return Err(ConfigError::value(
                "server.listen",
                "",
                "at least one listener is needed",
            ));
        }
        let upstreams = self
            .upstreams
            .iter()
            .map(|url| {
                url.parse::<UpstreamSpec>()
                    .map_err(|e| ConfigError::value("upstreams", url, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if upstreams.is_empty() {
            return Err(ConfigError::value(
                "upstreams",
                "",
                "at least one upstream is needed",
            ));
        }
        let available = kudurru_transports::sys::available_cpus();
        let cpus = if !self.server.cpus.is_empty() {
            if let Some(bad) = self.server.cpus.iter().find(|c| !available.contains(c)) {
                return Err(ConfigError::value(
                    "server.cpus",
                    bad,
                    format!("not among the CPUs this process may use: {available:?}"),
                ));
            }
            self.server.cpus.clone()
        } else if self.server.cores == 0 {
            available.clone()
        } else if self.server.cores > available.len() {
            return Err(ConfigError::value(
                "server.cores",
                self.server.cores,
                format!(
                    "only {} CPUs are available to this process",
                    available.len()
                ),
            ));
        } else {
            available[..self.server.cores].to_vec()
        };
        let duration = |key: &'static str, text: &str| -> Result<Duration, ConfigError> {
            let d =
                humantime::parse_duration(text).map_err(|e| ConfigError::value(key, text, e))?;
            if d.is_zero() {
                return Err(ConfigError::value(key, text, "must be more than zero"));
            }
            Ok(d)
        };
        let upstream_timeout = duration("upstream.timeout", &self.upstream.timeout)?;
        let resolve_timeout = duration("upstream.resolveTimeout", &self.upstream.resolve_timeout)?;
        let tcp_idle_timeout = duration("tcp.idleTimeout", &self.tcp.idle_timeout)?;
        let tls_handshake_timeout = duration("tls.handshakeTimeout", &self.tls.handshake_timeout)?;
        if listeners.iter().any(ListenerSpec::needs_certificate) {
            for (key, path) in [
                ("tls.certFile", &self.tls.cert_file),
                ("tls.keyFile", &self.tls.key_file),
            ] {
                if path.is_empty() {
                    return Err(ConfigError::value(
                        key,
                        "",
                        "a tls://, https://, quic:// or h3:// listener needs a certificate: set tls.certFile and tls.keyFile (kudurru cert generate writes a self-signed pair)",
                    ));
                }
            }
        }
        let shutdown_grace = duration("server.shutdownGrace", &self.server.shutdown_grace)?;
        let drain_delay = humantime::parse_duration(&self.shutdown.drain_delay).map_err(|e| {
            ConfigError::value("shutdown.drainDelay", &self.shutdown.drain_delay, e)
        })?;
        let ratelimit = self.ratelimit.validate()?;
        let token_max_lifetime =
            duration("auth.tokens.maxLifetime", &self.auth.tokens.max_lifetime)?;
        let api_address = if self.api.address.is_empty() {
            None
        } else {
            Some(parse_host_port(&self.api.address, 8080).ok_or_else(|| {
                ConfigError::value(
                    "api.address",
                    &self.api.address,
                    "expected IP:PORT or empty",
                )
            })?)
        };
        let api_tls = match (self.api.tls_cert.as_str(), self.api.tls_key.as_str()) {
            ("", "") => None,
            ("", _) => {
                return Err(ConfigError::value(
                    "api.tlsCert",
                    "",
                    "api.tlsKey is set: set api.tlsCert too, or neither",
                ));
            }
            (_, "") => {
                return Err(ConfigError::value(
                    "api.tlsKey",
                    "",
                    "api.tlsCert is set: set api.tlsKey too, or neither",
                ));
            }
            (cert, key) => Some((PathBuf::from(cert), PathBuf::from(key))),
        };
        let c = &self.cache;
        if c.max_entries == 0 {
            return Err(ConfigError::value(
                "cache.maxEntries",
                0,
                "must be at least 1",
            ));
        }
        if c.min_ttl > c.max_ttl {
            return Err(ConfigError::value(
                "cache.minTTL",
                c.min_ttl,
                format!("larger than cache.maxTTL ({})", c.max_ttl),
            ));
        }
        if !(1..=300).contains(&c.servfail_ttl) {
            return Err(ConfigError::value(
                "cache.servfailTTL",
                c.servfail_ttl,
                "RFC 9520 asks for 1 to 300 seconds",
            ));
        }
        if !(512..=4096).contains(&self.edns.udp_payload) {
            return Err(ConfigError::value(
                "edns.udpPayload",
                self.edns.udp_payload,
                "must be 512 to 4096",
            ));
        }
        for (key, value) in [
            (
                "tcp.maxConnectionsPerCore",
                self.tcp.max_connections_per_core,
            ),
            ("tcp.maxPipelined", self.tcp.max_pipelined),
        ] {
            if value == 0 {
                return Err(ConfigError::value(key, value, "must be at least 1"));
            }
        }
        let ops_address = parse_host_port(&self.ops.address, 8081).ok_or_else(|| {
            ConfigError::value("ops.address", &self.ops.address, "expected IP:PORT")
        })?;
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(ConfigError::value(
                "log.format",
                &self.log.format,
                "expected text or json",
            ));
        }
        check_log_filter(&self.log.level)
            .map_err(|reason| ConfigError::value("log.level", &self.log.level, reason))?;
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| ConfigError::value("log.level", &self.log.level, e))?;
        let identity = if self.server.identity.is_empty() {
            hostname()
        } else {
            self.server.identity.clone()
        };
        let settings = Settings {
            upstreams,
            ttl: TtlPolicy {
                min_ttl: c.min_ttl,
                max_ttl: c.max_ttl,
                negative_max_ttl: c.negative_max_ttl,
                servfail_ttl: c.servfail_ttl,
            },
            cache_max_entries: c.max_entries,
            local: LocalNames::new(ServerIdentity {
                identity,
                version: self.server.version.clone(),
            }),
            edns_payload: self.edns.udp_payload,
            upstream_timeout,
            resolve_timeout,
            tcp_idle_timeout,
            tcp_max_connections: self.tcp.max_connections_per_core,
            tcp_max_pipelined: self.tcp.max_pipelined,
            tls_handshake_timeout,
            shutdown_grace,
            ratelimit,
            ratelimit_table_size: self.ratelimit.table_size,
        };
        Ok(Validated {
            settings,
            listeners,
            cpus,
            ops_address,
            drain_delay,
            api_address,
            api_tls,
            data_dir: PathBuf::from(&self.storage.data_dir),
            token_max_lifetime,
        })
    }
}

/// A configuration that passed validation.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The data plane's settings snapshot.
    pub settings: Settings,
    /// Client listeners.
    pub listeners: Vec<ListenerSpec>,
    /// CPUs to pin executors to.
    pub cpus: Vec<usize>,
    /// Ops listener address.
    pub ops_address: SocketAddr,
    /// Lameduck time on SIGTERM (`shutdown.drainDelay`).
    pub drain_delay: Duration,
    /// HTTP API listener (`api.address`); `None` = no API.
    pub api_address: Option<SocketAddr>,
    /// HTTPS on the API: certificate and key files (`api.tlsCert`, `api.tlsKey`).
    pub api_tls: Option<(PathBuf, PathBuf)>,
    /// `storage.dataDir`.
    pub data_dir: PathBuf,
    /// `auth.tokens.maxLifetime`.
    pub token_max_lifetime: Duration,
}

impl RateLimitSection {
    fn validate(&self) -> Result<RateLimit, ConfigError> {
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

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "kudurru".into())
}

/// Renders the key table as the Markdown of docs/configuration.md's reference section.
pub fn render_key_table() -> String {
    let defaults = Config::default();
    let mut out = String::from(
        "| key | type | default | scope | host only | applies | environment | description |\n|---|---|---|---|---|---|---|---|\n",
    );
    for k in KEYS {
        let default = k.get(&defaults);
        let default = if default.is_empty() {
            "(empty)".to_owned()
        } else {
            format!("`{default}`")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | `{}` | {} |\n",
            k.key,
            k.kind,
            default,
            match k.scope {
                Scope::Node => "node",
                Scope::Cluster => "cluster",
            },
            if k.host_only { "yes" } else { "no" },
            if k.restart_required { "restart" } else { "hot" },
            k.env_var(),
            k.description,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use kudurru_transports::Protocol;

    use super::*;

    #[test]
    fn defaults_validate() {
        let v = Config::default().validate().expect("defaults are valid");
        assert_eq!(v.listeners.len(), 2);
        assert!(v.listeners.iter().all(|l| l.protocol
            == Protocol::Dns {
                udp: true,
                tcp: true
            }
            && l.addr.port() == 5353));
        assert_eq!(v.settings.upstreams.len(), 2);
    }

    #[test]
    fn log_filter_takes_levels_and_targets_but_not_span_or_field_filters() {
        for ok in [
            "info",
            "WARN",
            "kudurru_transports=debug,info",
            "h2::codec=off, trace",
            "",
        ] {
            let mut c = Config::default();
            c.log.level = ok.into();
            c.validate()
                .unwrap_or_else(|e| panic!("{ok:?} rejected: {e}"));
        }
        // The `config` fuzz target's slow unit: a field filter whose regex takes seconds to compile.
        let slow = "[\"999999sto[[{hutet =C................=1.0_5frt =x}1\"]";
        for bad in [
            slow,
            "kudurru[span{id=1}]=debug",
            "info=verbose",
            "a b=info",
        ] {
            let mut c = Config::default();
            c.log.level = bad.into();
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains("log.level") && err.contains("TARGET=LEVEL"),
                "{bad:?}: {err}"
            );
        }
        let mut c = Config::default();
        c.log.level = "info,".repeat(300);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("longer than 1024 bytes"), "{err}");
    }

    #[test]
    fn file_errors_name_line_and_key() {
        let err = Config::from_toml("[cache]\nmaxEntries = 10\nmaxEntrie = 5\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("maxEntrie"), "{err}");
        let err = Config::from_toml("[cache]\nmaxEntries = \"lots\"\n").unwrap_err();
        assert!(
            err.contains("line 2") && err.contains("maxEntries"),
            "{err}"
        );
        let c = Config::from_toml("upstreams = [\"tcp://127.0.0.1:53\"]\n[cache]\nminTTL = 60\n")
            .unwrap();
        assert_eq!(c.cache.min_ttl, 60);
        assert_eq!(c.upstreams, vec!["tcp://127.0.0.1:53"]);
    }

    #[test]
    fn env_overrides_file_and_unknown_env_is_an_error() {
        let mut c = Config::from_toml("[cache]\nmaxEntries = 10\n").unwrap();
        c.apply_env([
            ("KUDURRU_CACHE__MAXENTRIES".into(), "99".into()),
            ("PATH".into(), "/bin".into()),
        ])
        .unwrap();
        assert_eq!(c.cache.max_entries, 99);
        let err = c
            .apply_env([("KUDURRU_CACHE__MAXENTRYS".into(), "1".into())])
            .unwrap_err();
        assert!(
            err.to_string().contains("KUDURRU_CACHE__MAXENTRYS"),
            "{err}"
        );
        let err = c
            .apply_env([("KUDURRU_CACHE__MAXENTRIES".into(), "x".into())])
            .unwrap_err();
        assert!(err.to_string().contains("cache.maxEntries"), "{err}");
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = Config::default();
        c.cache.min_ttl = 10;
        c.cache.max_ttl = 5;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("cache.minTTL")
        );
        let c = Config {
            upstreams: vec!["tls://1.1.1.1".into()],
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("upstreams"));
        let mut c = Config::default();
        c.upstream.timeout = "soon".into();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("upstream.timeout")
        );
    }

    #[test]
    fn every_key_round_trips_through_its_accessors() {
        let defaults = Config::default();
        for k in KEYS {
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

    #[test]
    fn docs_configuration_md_matches_the_key_table() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/configuration.md"
        ))
        .unwrap();
        assert!(
            doc.contains(&render_key_table()),
            "docs/configuration.md is stale: regenerate its table with `kudurru config keys`"
        );
    }
}
