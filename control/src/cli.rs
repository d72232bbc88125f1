//! Command-line flags (step one of two: raw flags; [`crate::config`] validates).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// kudurru: a thread-per-core caching DNS forwarder.
#[derive(Debug, Parser)]
#[command(
    name = "kudurru",
    version,
    about = "kudurru: an edge DNS server. A caching, forwarding resolver over UDP, TCP, DNS over TLS, HTTPS, HTTP/3 and QUIC, one pinned executor per core.",
    after_help = "Start with `kudurru serve` (loopback port 5300); `kudurru config check` checks a configuration. Documentation: docs/ in the source tree."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Command {
    /// Run the server until SIGINT or SIGTERM.
    Serve(ServeArgs),
    /// Put a running server in lameduck (health name SERVFAIL, readiness 503), then wait.
    Lameduck(LameduckArgs),
    /// Configuration helpers.
    Config {
        /// What to print.
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// The HTTP API's OpenAPI document (JSON), as docs/openapi.json holds it.
    Api {
        /// What to print.
        #[command(subcommand)]
        command: ApiCommand,
    },
    /// API tokens.
    Token {
        /// What to do.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Certificates for DNS-over-TLS listeners.
    Cert {
        /// What to do.
        #[command(subcommand)]
        command: CertCommand,
    },
    /// Upstreams of a running server: queries, errors, latency, health (GET /api/v1/upstreams).
    Upstreams {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
    /// The fleet (cluster.driver = etcd): members, leader, revisions (GET /api/v1/cluster).
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Show objects (client groups, …) of a running server.
    Get {
        /// The kind (ClientGroup) or its plural (clientgroups).
        kind: String,
        /// One object; all of the kind when absent.
        name: Option<String>,
        /// table, json or toml (toml is what `apply` reads).
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
    /// Create or update objects from a TOML or JSON file, or every such file of a directory.
    Apply {
        /// The file or directory.
        #[arg(short = 'f', long = "filename", value_name = "PATH")]
        path: PathBuf,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
    /// Delete an object.
    Delete {
        /// The kind or its plural.
        kind: String,
        /// The object's name.
        name: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
    /// Enable an object (remove its kudurru.io/enabled: "false" annotation).
    Enable {
        /// The kind or its plural.
        kind: String,
        /// The object's name.
        name: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
    /// Disable an object (kudurru.io/enabled: "false"): consumers treat it as absent.
    Disable {
        /// The kind or its plural.
        kind: String,
        /// The object's name.
        name: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
    /// The object store's audit log.
    Audit {
        /// What to do.
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The caches of a running server: flush, dump, stats (through the API, on every core).
    Cache {
        /// What to do.
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Block lists of a running server (through the API).
    Blocklist {
        /// What to do.
        #[command(subcommand)]
        command: BlocklistCommand,
    },
    /// Zones of a running server (through the API).
    Zone {
        /// What to do.
        #[command(subcommand)]
        command: ZoneCommand,
    },
    /// Why a name is or is not blocked (through the API).
    Blocking {
        /// What to do.
        #[command(subcommand)]
        command: BlockingCommand,
    },
    /// The query log of a running server: search, tail, purge (through the API).
    Querylog {
        /// What to do.
        #[command(subcommand)]
        command: QuerylogCommand,
    },
    /// Query-log rollups of a running server: queries, blocked, cache hits and rcodes per
    /// step, top names, top blocked names, top clients (GET /api/v1/stats).
    Stats {
        /// From (RFC 3339 or unix ns; default: an hour before --to).
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
        /// To (RFC 3339 or unix ns; default: now).
        #[arg(long, value_name = "TIME")]
        to: Option<String>,
        /// Bucket width, whole minutes (1m, 5m, 1h; default 1m).
        #[arg(long, value_name = "DURATION")]
        step: Option<String>,
        /// Length of each top list (default 10).
        #[arg(long, value_name = "N")]
        top: Option<usize>,
        /// Print the API's JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Effective settings and where they come from.
    Settings {
        /// What to do.
        #[command(subcommand)]
        command: SettingsCommand,
    },
    /// Print a shell completion script: `kudurru completions bash > /etc/bash_completion.d/kudurru`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Write the man pages, kudurru.1 and one per subcommand (kudurru-serve.1, …), into DIR.
    Man {
        /// Where to write them (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// `kudurru cache …`.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Remove NAME (any case), with --subtree also every name below it, or with no NAME
    /// everything, from every core's shard and L1 (DELETE /api/v1/cache): the next query for
    /// it goes upstream.
    Flush {
        /// The name to flush; everything when omitted.
        name: Option<String>,
        /// Also every name below NAME (Unbound's flush_zone).
        #[arg(long, requires = "name")]
        subtree: bool,
        /// Print the API's JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The cached answers each core owns: name, TTL left, class, type, rcode (GET
    /// /api/v1/cache/dump; needs an operator token, since it shows what clients asked).
    Dump {
        /// Most answers listed per core (1 to 100000).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print the API's JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Entries, capacity, hits and misses per core (GET /api/v1/cache).
    Stats {
        /// Print the API's JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `kudurru querylog …`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum QuerylogCommand {
    /// Logged queries matching the filters, newest first, as a table (GET /api/v1/querylog,
    /// streamed as an export).
    Search {
        /// What to show.
        #[command(flatten)]
        filters: QuerylogFilters,
        /// Most entries shown (default 100).
        #[arg(long, value_name = "N", conflicts_with = "all")]
        limit: Option<usize>,
        /// Every matching entry, however many.
        #[arg(long)]
        all: bool,
        /// One JSON object per entry and line (the API's NDJSON export).
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// CSV with a header row (the API's CSV export).
        #[arg(long)]
        csv: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Queries as they are logged, one line each, until interrupted or the server stops (GET
    /// /api/v1/querylog/tail).
    Tail {
        /// What to show.
        #[command(flatten)]
        filters: QuerylogFilters,
        /// One JSON object per entry and line.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete logged queries older than --before, keeping the rollups (DELETE
    /// /api/v1/querylog; needs an admin token).
    Purge {
        /// RFC 3339 time or unix ns; 0 deletes every entry.
        #[arg(long, value_name = "TIME")]
        before: String,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// The query-log filters: each narrows, and each is the API parameter of the same name.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct QuerylogFilters {
    /// At or after (RFC 3339 or unix ns).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Before (RFC 3339 or unix ns).
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    /// The client as logged (address, prefix or pseudonym, as privacy keeps it).
    #[arg(long = "client", value_name = "CLIENT")]
    pub client_address: Option<String>,
    /// The client ID (DoH path segment or TLS SNI label).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// The query name exactly.
    #[arg(long, value_name = "NAME")]
    pub qname: Option<String>,
    /// The name or any name below it.
    #[arg(long, value_name = "NAME")]
    pub suffix: Option<String>,
    /// The query type (A, AAAA, TYPE65 or a number).
    #[arg(long, value_name = "TYPE")]
    pub qtype: Option<String>,
    /// The response code (NOERROR, NXDOMAIN, …, a number, or none for dropped queries).
    #[arg(long, value_name = "RCODE")]
    pub rcode: Option<String>,
    /// Blocked (or rewritten) by a policy, or not.
    #[arg(long, value_name = "BOOL")]
    pub blocked: Option<bool>,
    /// The deciding policy.
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,
    /// The client group.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// udp, tcp, dot, doh, doq or doh3.
    #[arg(long, value_name = "TRANSPORT")]
    pub transport: Option<String>,
    /// cache, upstream, stale, local, policy or dropped.
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
}

/// `kudurru blocklist …`.
#[derive(Debug, Subcommand)]
pub enum BlocklistCommand {
    /// Fetch NAME's url sources and read its files now, skipping the refresh interval and any
    /// failure cooldown (POST /api/v1/blocklists/NAME/refresh); `kudurru get blocklist NAME`
    /// shows the result in its status.
    Refresh {
        /// The BlockList.
        name: String,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `kudurru zone …`.
#[derive(Debug, Subcommand)]
pub enum ZoneCommand {
    /// The records the Zone NAME (the object's name) serves, as zone-file lines, SOA first
    /// (GET /api/v1/zones/NAME/records, every page).
    Records {
        /// The Zone object.
        name: String,
        /// Print each page's JSON instead of zone-file lines.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `kudurru blocking …`.
#[derive(Debug, Subcommand)]
pub enum BlockingCommand {
    /// Which client groups, policies, list and rule decide NAME for a client (GET
    /// /api/v1/blocking/check).
    Check {
        /// The query name.
        name: String,
        /// The client's address (default: a client no group holds by address).
        #[arg(long = "client", value_name = "ADDR")]
        client_address: Option<String>,
        /// The client ID (DoH path segment or TLS SNI label).
        #[arg(long, value_name = "ID")]
        client_id: Option<String>,
        /// Resolve schedules at this RFC 3339 instant instead of now.
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Print the API's JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `kudurru api …`.
#[derive(Debug, Subcommand)]
pub enum ApiCommand {
    /// Print the OpenAPI 3.0 document.
    Openapi,
}

/// `kudurru cert …`.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Write a self-signed certificate and key (PEM) for local use and tests; clients must be
    /// told to trust it (kdig +tls-ca=FILE, curl --cacert FILE) or not to verify.
    Generate {
        /// Where to write the certificate (tls.certFile).
        #[arg(long)]
        cert: PathBuf,
        /// Where to write the private key (tls.keyFile), mode 0600.
        #[arg(long)]
        key: PathBuf,
        /// Names the certificate is valid for (DNS names or IP addresses; repeatable).
        #[arg(long = "name", default_values = ["localhost", "127.0.0.1", "::1"])]
        names: Vec<String>,
    },
}

/// `kudurru settings …`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum SettingsCommand {
    /// Print effective values with their source layer (default, node-file, settings-file, env,
    /// flag); `R` marks keys that need a restart to change. Layers the same inputs `serve` would.
    Get {
        /// One key (dotted path); all keys when omitted.
        key: Option<String>,
        /// The same flags `serve` takes.
        #[command(flatten)]
        args: ServeArgs,
    },
}

/// Flags of `kudurru lameduck`.
#[derive(Debug, Clone, clap::Args)]
pub struct LameduckArgs {
    /// How long to wait after entering lameduck before returning (e.g. 10s; default 0s), so a
    /// pre-stop hook holds the node in lameduck until load balancers drained it.
    #[arg(value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub duration: std::time::Duration,
    /// Leave lameduck instead.
    #[arg(long)]
    pub cancel: bool,
    /// The server's ops listener.
    #[arg(long, value_name = "ADDR", default_value = crate::config::DEFAULT_OPS_ADDRESS)]
    pub ops_address: String,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e}"))
}

/// `kudurru config …`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum ConfigCommand {
    /// Print the key reference table (Markdown) that docs/configuration.md embeds.
    Keys,
    /// Print the effective configuration (defaults, file, environment, flags) as TOML.
    Show(ServeArgs),
    /// Check the node file, the settings file, the environment and the flags: every problem
    /// at once with its file and line; exit 0 when `serve` would start on them, 1 otherwise.
    Check {
        /// The settings file to check (default: the one the configuration names).
        #[arg(long, value_name = "FILE")]
        settings_file: Option<PathBuf>,
        /// The node file and flags, as `serve` takes them.
        #[command(flatten)]
        args: ServeArgs,
    },
}

/// Flags of `kudurru serve`; each overrides the key named in its help.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML node file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Executors to run, one per CPU (server.cores; default: every available CPU).
    #[arg(long, value_name = "N")]
    pub cores: Option<usize>,
    /// CPUs to pin to, comma-separated (server.cpus).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// Client listener, repeatable (server.listen): H:P (UDP and TCP), udp://H:P, tcp://H:P,
    /// tls://H:P (DoT), https://H:P/path (DoH), h3://H:P/path (DoH3), quic://H:P (DoQ).
    #[arg(long = "listen", value_name = "URL")]
    pub listen: Vec<String>,
    /// Upstream, repeatable: udp://IP:P or tcp://IP:P (upstreams).
    #[arg(long = "upstream", value_name = "URL")]
    pub upstream: Vec<String>,
    /// Ops listener address (ops.address).
    #[arg(long, value_name = "ADDR")]
    pub ops_address: Option<String>,
    /// Log level or filter (log.level).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// HTTP API listener, or "" for none (api.address).
    #[arg(long, value_name = "ADDR")]
    pub api_address: Option<String>,
    /// Data directory (storage.dataDir).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<String>,
    /// PEM certificate chain for tls:// listeners (tls.certFile).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<String>,
    /// PEM private key for tls:// listeners (tls.keyFile).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<String>,
    /// Keep objects (client groups, lists, policies, zones) in memory only, not in
    /// <data dir>/objects.redb: they are gone when the process ends.
    #[arg(long)]
    pub ephemeral: bool,
}

/// How `kudurru get` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Columns for people.
    Table,
    /// The API's JSON.
    Json,
    /// TOML, as `apply` reads it.
    Toml,
}

/// `kudurru audit …`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum AuditCommand {
    /// Check the audit log's hash chain in <data dir>/objects.redb, read-only (works while the
    /// server runs); exit 1 when a record was changed or removed out of order.
    Verify {
        /// Where the configuration comes from (storage.dataDir).
        #[command(flatten)]
        args: ServeArgs,
    },
}

/// How a command reaches a running server's API.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// The API, http://HOST:PORT or https://HOST:PORT (default: from the configuration's
    /// api.address, https when api.tlsCert is set).
    #[arg(long, value_name = "URL")]
    pub api: Option<String>,
    /// API token (default: KUDURRU_TOKEN, else --token-file).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// File whose first line is the API token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) to trust for an HTTPS API (default: the system's roots).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// TOML node file to find the API's address in.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `kudurru token …`: API tokens in the data directory (the server picks changes up at once).
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum TokenCommand {
    /// Create a token and print it (once: only its hash is stored).
    Create {
        /// viewer, operator or admin.
        #[arg(long)]
        role: String,
        /// Lifetime (default and maximum: auth.tokens.maxLifetime).
        #[arg(long, value_parser = parse_duration)]
        ttl: Option<std::time::Duration>,
        /// A name for people (`token list`, the dashboard's Tokens page).
        #[arg(long, default_value = "")]
        name: String,
        /// Where the configuration comes from (storage.dataDir, auth.tokens.maxLifetime).
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Revoke a token by its id (the 8 hex digits after `kdr_`).
    Revoke {
        /// Token id.
        id: String,
        /// Where the configuration comes from.
        #[command(flatten)]
        args: ServeArgs,
    },
    /// List token ids, roles and expiry.
    List {
        /// Where the configuration comes from.
        #[command(flatten)]
        args: ServeArgs,
    },
}

/// `kudurru cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Members, the leader, etcd's revision and each node's snapshot revision.
    Status {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// How to reach the API.
        #[command(flatten)]
        api: ClientArgs,
    },
}
