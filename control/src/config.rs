//! Configuration: built-in defaults, the TOML node file, `KUDURRU_…` environment variables and
//! command-line flags, lowest first. Every key is listed once in [`KEYS`] with its scope and
//! whether a change needs a restart; docs/configuration.md is rendered from that table.
//!
//! Parse, don't validate: [`Config`] is the raw layered document; [`Config::validate`] turns it
//! into the typed values the data plane runs on, or an error naming the key.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kudurru_core::upstream::parse_host_port;
use kudurru_core::{LocalNames, Prefix, RateLimit, ServerIdentity, TtlPolicy, UpstreamSpec};
use kudurru_transports::{ListenerSpec, Protocol, Settings};
use serde::{Deserialize, Serialize};

/// Default client listeners: DNS over UDP and TCP on port 5353 of both loopbacks.
pub const DEFAULT_LISTEN: &[&str] = &["127.0.0.1:5353", "[::1]:5353"];
/// Default upstreams: well-known public resolvers (Cloudflare, Quad9), over UDP.
pub const DEFAULT_UPSTREAMS: &[&str] = &["udp://1.1.1.1:53", "udp://9.9.9.9:53"];
/// Path of a DNS-over-HTTPS listener given without one (RFC 8484 §3 example).
pub const DEFAULT_DOH_PATH: &str = "/dns-query";
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

/// Where a key may be set: on one node, or the same for the whole cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Per node (addresses, cores).
    Node,
    /// Shared by every node of a cluster.
    Cluster,
}

/// One configuration key's metadata and accessors.
pub struct KeyInfo {
    /// Dotted camelCase path.
    pub key: &'static str,
    /// Value type, for docs.
    pub kind: &'static str,
    /// Node or cluster.
    pub scope: Scope,
    /// Only meaningful on the host itself (never shared through cluster settings).
    pub host_only: bool,
    /// Takes effect only after a restart.
    pub restart_required: bool,
    /// One line for docs.
    pub description: &'static str,
    set: fn(&mut Config, &str) -> Result<(), String>,
    get: fn(&Config) -> String,
    copy: fn(&mut Config, &Config),
}

impl fmt::Debug for KeyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyInfo")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl KeyInfo {
    /// The key's value in `config`, as text.
    pub fn get(&self, config: &Config) -> String {
        (self.get)(config)
    }

    /// Sets the key from text (environment, flags).
    pub fn set(&self, config: &mut Config, value: &str) -> Result<(), ConfigError> {
        (self.set)(config, value).map_err(|reason| ConfigError::Value {
            key: self.key,
            value: value.to_owned(),
            reason,
        })
    }

    /// Copies this key's value from `from` into `config` (layering).
    pub fn copy(&self, config: &mut Config, from: &Config) {
        (self.copy)(config, from);
    }

    /// The environment variable that sets this key.
    pub fn env_var(&self) -> String {
        format!(
            "KUDURRU_{}",
            self.key.replace('.', "__").to_ascii_uppercase()
        )
    }
}

fn parse_num<T: std::str::FromStr>(value: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    value.trim().parse::<T>().map_err(|e| e.to_string())
}

fn parse_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn join<T: ToString>(values: &[T]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

macro_rules! key {
    ($key:literal, $kind:literal, $scope:ident, $host_only:literal, $restart:literal, $desc:literal,
     |$c:ident| $field:expr, $parse:expr, $show:expr) => {
        KeyInfo {
            key: $key,
            kind: $kind,
            scope: Scope::$scope,
            host_only: $host_only,
            restart_required: $restart,
            description: $desc,
            set: |$c, v| {
                $field = $parse(v)?;
                Ok(())
            },
            get: |$c| $show(&$field),
            copy: |$c, src| {
                let value = {
                    let $c = src;
                    $field.clone()
                };
                $field = value;
            },
        }
    };
}

#[allow(clippy::ptr_arg)] // the key! macro passes `&field`
fn show_string(s: &String) -> String {
    s.to_owned()
}

fn show_num<T: ToString>(v: &T) -> String {
    v.to_string()
}

fn parse_string(v: &str) -> Result<String, String> {
    Ok(v.to_owned())
}

fn parse_strings(v: &str) -> Result<Vec<String>, String> {
    Ok(parse_list(v))
}

fn parse_cpus(v: &str) -> Result<Vec<usize>, String> {
    parse_list(v).iter().map(|s| parse_num(s)).collect()
}

/// Every configuration key, in documentation order.
pub static KEYS: &[KeyInfo] = &[
    key!(
        "settingsFile",
        "path",
        Node,
        true,
        true,
        "settings file of cluster-scope keys, watched and reloaded; empty = none; KUDURRU_SETTINGS_FILE overrides",
        |c| c.settings_file,
        parse_string,
        show_string
    ),
    key!(
        "server.listen",
        "list of URLs",
        Node,
        true,
        true,
        "client listeners: udp://H:P, tcp://H:P, H:P for both, tls://H:P for DNS over TLS (port 853), https://H:P/path for DNS over HTTPS (port 443, path /dns-query), quic://H:P for DNS over QUIC (UDP port 853), h3://H:P/path for DNS over HTTP/3 (UDP port 443, path /dns-query); IPv4 or [IPv6]",
        |c| c.server.listen,
        parse_strings,
        |v: &Vec<String>| join(v)
    ),
    key!(
        "server.cores",
        "integer",
        Node,
        true,
        true,
        "executors to run, one pinned per CPU; 0 = every CPU this process may use",
        |c| c.server.cores,
        parse_num,
        show_num
    ),
    key!(
        "server.cpus",
        "list of integers",
        Node,
        true,
        true,
        "CPUs to pin the executors to (overrides server.cores when set)",
        |c| c.server.cpus,
        parse_cpus,
        |v: &Vec<usize>| join(v)
    ),
    key!(
        "server.identity",
        "string",
        Cluster,
        false,
        true,
        "TXT answer to CH id.server and hostname.bind (RFC 4892); empty = REFUSED",
        |c| c.server.identity,
        parse_string,
        show_string
    ),
    key!(
        "server.version",
        "string",
        Cluster,
        false,
        true,
        "TXT answer to CH version.server and version.bind; empty = REFUSED",
        |c| c.server.version,
        parse_string,
        show_string
    ),
    key!(
        "server.shutdownGrace",
        "duration",
        Node,
        false,
        true,
        "how long SIGTERM/SIGINT waits for in-flight queries before exiting",
        |c| c.server.shutdown_grace,
        parse_string,
        show_string
    ),
    key!(
        "shutdown.drainDelay",
        "duration",
        Node,
        false,
        true,
        "on SIGTERM, time in lameduck (health name SERVFAIL, readiness 503) before listeners close; 0s = none",
        |c| c.shutdown.drain_delay,
        parse_string,
        show_string
    ),
    key!(
        "upstreams",
        "list of URLs",
        Cluster,
        false,
        false,
        "upstream resolvers: udp://IP:P (TCP on truncation) or tcp://IP:P",
        |c| c.upstreams,
        parse_strings,
        |v: &Vec<String>| join(v)
    ),
    key!(
        "upstream.timeout",
        "duration",
        Cluster,
        false,
        true,
        "one attempt at one upstream; then the next upstream is tried",
        |c| c.upstream.timeout,
        parse_string,
        show_string
    ),
    key!(
        "upstream.resolveTimeout",
        "duration",
        Cluster,
        false,
        true,
        "bound on all attempts for one query; then SERVFAIL (cached for cache.servfailTTL)",
        |c| c.upstream.resolve_timeout,
        parse_string,
        show_string
    ),
    key!(
        "cache.maxEntries",
        "integer",
        Cluster,
        false,
        false,
        "answers cached across all cores (each core owns maxEntries/cores; each L1 adds 1/8 of that)",
        |c| c.cache.max_entries,
        parse_num,
        show_num
    ),
    key!(
        "cache.minTTL",
        "seconds",
        Cluster,
        false,
        false,
        "positive TTLs are raised to at least this",
        |c| c.cache.min_ttl,
        parse_num,
        show_num
    ),
    key!(
        "cache.maxTTL",
        "seconds",
        Cluster,
        false,
        false,
        "positive TTLs are capped at this",
        |c| c.cache.max_ttl,
        parse_num,
        show_num
    ),
    key!(
        "cache.negativeMaxTTL",
        "seconds",
        Cluster,
        false,
        false,
        "negative answers (RFC 2308: min of SOA TTL and MINIMUM) are cached at most this long",
        |c| c.cache.negative_max_ttl,
        parse_num,
        show_num
    ),
    key!(
        "cache.servfailTTL",
        "seconds",
        Cluster,
        false,
        false,
        "resolution failures are cached this long (RFC 9520: at least 1, at most 300)",
        |c| c.cache.servfail_ttl,
        parse_num,
        show_num
    ),
    key!(
        "edns.udpPayload",
        "integer",
        Cluster,
        false,
        true,
        "EDNS UDP payload advertised and the largest UDP answer sent (512-4096)",
        |c| c.edns.udp_payload,
        parse_num,
        show_num
    ),
    key!(
        "tcp.idleTimeout",
        "duration",
        Cluster,
        false,
        true,
        "a client TCP, DoT, DoH, DoQ or DoH3 connection idle this long is closed (RFC 7766 §6.2.3; HTTP/2 with GOAWAY, QUIC by its idle timeout)",
        |c| c.tcp.idle_timeout,
        parse_string,
        show_string
    ),
    key!(
        "tcp.maxConnectionsPerCore",
        "integer",
        Node,
        false,
        true,
        "client TCP, DoT, DoH, DoQ and DoH3 connections each core accepts (together); more are closed at once (QUIC: CONNECTION_REFUSED)",
        |c| c.tcp.max_connections_per_core,
        parse_num,
        show_num
    ),
    key!(
        "tcp.maxPipelined",
        "integer",
        Cluster,
        false,
        true,
        "queries in flight on one TCP or DoT connection (past this kudurru stops reading it), and concurrent streams on one DoH (HTTP/2), DoQ or DoH3 connection",
        |c| c.tcp.max_pipelined,
        parse_num,
        show_num
    ),
    key!(
        "tls.certFile",
        "path",
        Node,
        true,
        true,
        "PEM certificate chain (leaf first) for tls://, https://, quic:// and h3:// listeners; the file is re-read when it changes",
        |c| c.tls.cert_file,
        parse_string,
        show_string
    ),
    key!(
        "tls.keyFile",
        "path",
        Node,
        true,
        true,
        "PEM private key for tls.certFile; re-read when it changes (a bad pair keeps the old one)",
        |c| c.tls.key_file,
        parse_string,
        show_string
    ),
    key!(
        "tls.handshakeTimeout",
        "duration",
        Cluster,
        false,
        true,
        "a DoT, DoH, DoQ or DoH3 client that has not finished its TLS (or QUIC) handshake after this long is closed",
        |c| c.tls.handshake_timeout,
        parse_string,
        show_string
    ),
    key!(
        "ratelimit.qps",
        "integer",
        Cluster,
        false,
        false,
        "queries per second each client prefix may send; 0 = limiter off",
        |c| c.ratelimit.qps,
        parse_num,
        show_num
    ),
    key!(
        "ratelimit.burst",
        "integer",
        Cluster,
        false,
        false,
        "token bucket size: queries a quiet client may send at once",
        |c| c.ratelimit.burst,
        parse_num,
        show_num
    ),
    key!(
        "ratelimit.slip",
        "integer",
        Cluster,
        false,
        false,
        "every Nth limited UDP query gets an empty TC=1 answer (retry over TCP); 0 = drop all, 1 = truncate all",
        |c| c.ratelimit.slip,
        parse_num,
        show_num
    ),
    key!(
        "ratelimit.ipv4Prefix",
        "integer",
        Cluster,
        false,
        true,
        "IPv4 addresses sharing this prefix length are one client",
        |c| c.ratelimit.ipv4_prefix,
        parse_num,
        show_num
    ),
    key!(
        "ratelimit.ipv6Prefix",
        "integer",
        Cluster,
        false,
        true,
        "IPv6 addresses sharing this prefix length are one client",
        |c| c.ratelimit.ipv6_prefix,
        parse_num,
        show_num
    ),
    key!(
        "ratelimit.allowlist",
        "list of prefixes",
        Cluster,
        false,
        false,
        "client prefixes never limited (ADDR/LEN or ADDR; at most 256)",
        |c| c.ratelimit.allowlist,
        parse_strings,
        |v: &Vec<String>| join(v)
    ),
    key!(
        "ratelimit.tableSize",
        "integer",
        Node,
        false,
        true,
        "token buckets per core (32 bytes each); a full table displaces its fullest buckets",
        |c| c.ratelimit.table_size,
        parse_num,
        show_num
    ),
    key!(
        "ops.address",
        "address",
        Node,
        true,
        true,
        "ops listener (/healthz/live, /healthz/ready, /metrics); unauthenticated, keep it on loopback",
        |c| c.ops.address,
        parse_string,
        show_string
    ),
    key!(
        "api.address",
        "address",
        Node,
        true,
        true,
        "HTTP API listener (/api/v1, bearer tokens); empty = no API",
        |c| c.api.address,
        parse_string,
        show_string
    ),
    key!(
        "api.tlsCert",
        "path",
        Node,
        true,
        true,
        "PEM certificate chain (leaf first) to serve the API over HTTPS; set with api.tlsKey; empty = plain HTTP; the file is re-read when it changes",
        |c| c.api.tls_cert,
        parse_string,
        show_string
    ),
    key!(
        "api.tlsKey",
        "path",
        Node,
        true,
        true,
        "PEM private key for api.tlsCert",
        |c| c.api.tls_key,
        parse_string,
        show_string
    ),
    key!(
        "storage.dataDir",
        "path",
        Node,
        true,
        true,
        "data directory: tokens.json (0600) now, databases later; created 0700",
        |c| c.storage.data_dir,
        parse_string,
        show_string
    ),
    key!(
        "auth.tokens.maxLifetime",
        "duration",
        Cluster,
        false,
        true,
        "the longest an API token lives, whatever --ttl it was created with",
        |c| c.auth.tokens.max_lifetime,
        parse_string,
        show_string
    ),
    key!(
        "log.level",
        "string",
        Node,
        false,
        false,
        "a level (off, error, warn, info, debug, trace) or LEVEL/TARGET=LEVEL directives, comma-separated; no span or field filters",
        |c| c.log.level,
        parse_string,
        show_string
    ),
    key!(
        "log.format",
        "string",
        Node,
        false,
        true,
        "text or json",
        |c| c.log.format,
        parse_string,
        show_string
    ),
];

/// Looks a key up by its dotted path (case-insensitive).
pub fn find_key(key: &str) -> Option<&'static KeyInfo> {
    KEYS.iter().find(|k| k.key.eq_ignore_ascii_case(key))
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The node file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The node file is not valid TOML or has unknown keys or wrong types (the message carries
    /// the line, column and key).
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message, with line and column.
        message: String,
    },
    /// The settings file sets a key that is node-scope or host-only.
    #[error(
        "settings file {path}: {key} is a node-scope or host-only key; the settings file may hold cluster-scope keys only (see docs/configuration.md)"
    )]
    NotSharable {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
    },
    /// An environment variable names no key.
    #[error("unknown configuration variable {var}: no key {key:?} (see docs/configuration.md)")]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The key it would set.
        key: String,
    },
    /// A value is invalid for its key.
    #[error("invalid value {value:?} for {key}: {reason}")]
    Value {
        /// The key.
        key: &'static str,
        /// The value as given.
        value: String,
        /// Why.
        reason: String,
    },
    /// A value from an environment variable was invalid.
    #[error("environment variable {var}: {source}")]
    Env {
        /// The variable.
        var: String,
        /// The key's error.
        source: Box<Self>,
    },
}

impl ConfigError {
    fn value(key: &'static str, value: impl ToString, reason: impl ToString) -> Self {
        Self::Value {
            key,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
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
            upstreams: upstreams.into(),
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

/// Parses a listener URL: `udp://H:P`, `tcp://H:P`, `H:P` (both; port 53 by default),
/// `tls://H:P` (853), `https://H:P/path` (443, `/dns-query`), `quic://H:P` (853, UDP) or
/// `h3://H:P/path` (443, UDP, `/dns-query`).
pub fn parse_listener(url: &str) -> Option<ListenerSpec> {
    let listener = |addr, protocol| Some(ListenerSpec { addr, protocol });
    if let Some(rest) = url.strip_prefix("tls://") {
        return listener(parse_host_port(rest, 853)?, Protocol::Tls);
    }
    if let Some(rest) = url.strip_prefix("quic://") {
        return listener(parse_host_port(rest, 853)?, Protocol::Quic);
    }
    if let Some(rest) = url.strip_prefix("https://") {
        let (addr, path) = parse_http_target(rest)?;
        return listener(addr, Protocol::Https { path });
    }
    if let Some(rest) = url.strip_prefix("h3://") {
        let (addr, path) = parse_http_target(rest)?;
        return listener(addr, Protocol::H3 { path });
    }
    let (udp, tcp, rest) = if let Some(rest) = url.strip_prefix("udp://") {
        (true, false, rest)
    } else if let Some(rest) = url.strip_prefix("tcp://") {
        (false, true, rest)
    } else if let Some(rest) = url.strip_prefix("dns://") {
        (true, true, rest)
    } else {
        (true, true, url)
    };
    listener(parse_host_port(rest, 53)?, Protocol::Dns { udp, tcp })
}

/// `H:P/path` of an HTTPS or HTTP/3 listener (port 443, path `/dns-query` by default): the path
/// starts at the first slash (IPv6 hosts are bracketed, no slash) and has no query or fragment.
fn parse_http_target(rest: &str) -> Option<(SocketAddr, String)> {
    let (host, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, DEFAULT_DOH_PATH),
    };
    if !path
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
    {
        return None;
    }
    Some((parse_host_port(host, 443)?, path.to_owned()))
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
    fn listener_urls_name_their_transports_ports_and_paths() {
        let l = |url: &str| parse_listener(url);
        let path = |p: &str| p.to_owned();
        let plain = l("127.0.0.1:53").unwrap();
        assert_eq!(
            plain.protocol,
            Protocol::Dns {
                udp: true,
                tcp: true
            }
        );
        assert!(!plain.needs_certificate());
        assert_eq!(
            l("udp://127.0.0.1").unwrap().protocol,
            Protocol::Dns {
                udp: true,
                tcp: false
            }
        );
        let dot = l("tls://[::1]").unwrap();
        assert_eq!(
            (dot.addr, dot.protocol),
            ("[::1]:853".parse().unwrap(), Protocol::Tls)
        );
        let doq = l("quic://127.0.0.1").unwrap();
        assert_eq!(
            (doq.addr, doq.protocol),
            ("127.0.0.1:853".parse().unwrap(), Protocol::Quic)
        );
        let doh = l("https://127.0.0.1").unwrap();
        assert_eq!(doh.addr, "127.0.0.1:443".parse().unwrap());
        assert_eq!(
            doh.protocol,
            Protocol::Https {
                path: path(DEFAULT_DOH_PATH)
            }
        );
        assert!(doh.needs_certificate());
        let doh = l("https://[::1]:8443/resolve").unwrap();
        assert_eq!(doh.addr, "[::1]:8443".parse().unwrap());
        assert_eq!(
            doh.protocol,
            Protocol::Https {
                path: path("/resolve")
            }
        );
        assert_eq!(
            l("https://127.0.0.1/").unwrap().protocol,
            Protocol::Https { path: path("/") }
        );
        let h3 = l("h3://127.0.0.1").unwrap();
        assert_eq!(h3.addr, "127.0.0.1:443".parse().unwrap());
        assert_eq!(
            h3.protocol,
            Protocol::H3 {
                path: path(DEFAULT_DOH_PATH)
            }
        );
        assert_eq!(
            l("h3://[::1]:8443/q").unwrap().protocol,
            Protocol::H3 { path: path("/q") }
        );
        for bad in [
            "https://127.0.0.1/a b",
            "https://127.0.0.1/q?x=1",
            "https://example.com/dns-query",
            "https://127.0.0.1:99999",
            "h3://127.0.0.1/q#x",
            "quic://127.0.0.1/path",
        ] {
            assert!(l(bad).is_none(), "{bad}");
        }
        let e = Config {
            server: ServerSection {
                listen: vec!["https://127.0.0.1:8443".into()],
                ..ServerSection::default()
            },
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("needs a certificate"), "{e}");
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
