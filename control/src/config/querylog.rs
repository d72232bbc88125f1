//! `querylog.*`: whether queries are logged, where to (`redb`, `dnstap`, `jsonl`, `none`), how
//! much of the client is kept (privacy) and for how long (retention, size).
//!
//! `enabled`, `sink` and the sink's own keys decide which sink exists and are read once, at
//! start (restart-bound); privacy, retention, size and the pseudonym key's rotation apply
//! while running. A `ClientGroup` may set its own privacy and retention
//! (`spec.queryLog`); the built-in group `default` follows these keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kudurru_core::querylog::Privacy;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::key::{
    KeyInfo, key, parse_bool, parse_num, parse_string, show_bool, show_num, show_string,
};

/// Default sink: the redb database `<dataDir>/querylog.db`.
pub const DEFAULT_QUERYLOG_SINK: &str = "redb";
/// Default age past which entries are pruned.
pub const DEFAULT_QUERYLOG_RETENTION: &str = "7d";
/// Default largest query-log database: 1 GiB.
pub const DEFAULT_QUERYLOG_MAX_BYTES: u64 = 1 << 30;
/// Default period of a pseudonym key.
pub const DEFAULT_PSEUDONYM_ROTATION: &str = "24h";
/// Default events the dnstap sink holds while its collector is slow or away.
pub const DEFAULT_DNSTAP_BUFFER_EVENTS: usize = 10_000;
/// The query-log database's file name in the data directory.
pub const QUERYLOG_DB_FILE: &str = "querylog.db";
/// The JSON-lines sink's default file name in the data directory.
pub const QUERYLOG_JSONL_FILE: &str = "querylog.jsonl";
/// Shortest `querylog.pseudonymRotation`: a key per minute already makes pseudonyms useless
/// for following a client; shorter is churn.
pub const MIN_PSEUDONYM_ROTATION: Duration = Duration::from_secs(60);
/// Smallest non-zero `querylog.maxBytes`: 1 MiB (redb's own pages take some).
pub const MIN_QUERYLOG_MAX_BYTES: u64 = 1 << 20;
/// Bounds of `querylog.bufferBatches` (per core).
pub const BUFFER_BATCHES_RANGE: (usize, usize) = (1, 4096);
/// Bounds of `querylog.dnstap.bufferEvents`.
pub const BUFFER_EVENTS_RANGE: (usize, usize) = (16, 10_000_000);

/// `querylog.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct QueryLogSection {
    /// Whether queries are logged at all.
    pub enabled: bool,
    /// `redb`, `dnstap`, `jsonl` or `none`.
    pub sink: String,
    /// The privacy of clients in no group with its own.
    pub privacy: String,
    /// Age past which entries are pruned (`0`: kept by age forever).
    pub retention: String,
    /// Largest database, bytes (`0`: no limit).
    pub max_bytes: u64,
    /// Period of a pseudonym key.
    pub pseudonym_rotation: String,
    /// Batches each core may have waiting for the writer.
    pub buffer_batches: usize,
    /// The JSON-lines file (`jsonl` sink); empty = `<dataDir>/querylog.jsonl`.
    pub file: String,
    /// The dnstap identity; empty = `server.identity`.
    pub identity: String,
    /// `querylog.dnstap.*`.
    pub dnstap: DnstapSection,
}

/// `querylog.dnstap.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DnstapSection {
    /// `unix:/path` or `tcp:IP:PORT`.
    pub address: String,
    /// Events held while the collector is slow or away.
    pub buffer_events: usize,
}

impl Default for QueryLogSection {
    fn default() -> Self {
        Self {
            enabled: false,
            sink: DEFAULT_QUERYLOG_SINK.into(),
            privacy: Privacy::Full.label().into(),
            retention: DEFAULT_QUERYLOG_RETENTION.into(),
            max_bytes: DEFAULT_QUERYLOG_MAX_BYTES,
            pseudonym_rotation: DEFAULT_PSEUDONYM_ROTATION.into(),
            buffer_batches: kudurru_transports::querylog::BATCHES_PER_CORE,
            file: String::new(),
            identity: String::new(),
            dnstap: DnstapSection::default(),
        }
    }
}

impl Default for DnstapSection {
    fn default() -> Self {
        Self {
            address: String::new(),
            buffer_events: DEFAULT_DNSTAP_BUFFER_EVENTS,
        }
    }
}

/// The `querylog.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "querylog.enabled",
        kind: "boolean",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.querylog.enabled,
        parse: parse_bool,
        show: show_bool,
        description: "whether answered and dropped queries are logged (off by default, as in Unbound, Knot and dnsdist: docs/benchmarks.md has its cost); false: the cores write no records and no sink exists",
    },
    key! {
        key: "querylog.sink",
        kind: "redb, dnstap, jsonl or none",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.querylog.sink,
        parse: parse_string,
        show: show_string,
        description: "where entries go: redb (<dataDir>/querylog.db, 0600, searchable through the API), dnstap (Frame Streams to querylog.dnstap.address), jsonl (JSON lines to querylog.file), none (records counted, nothing kept)",
    },
    key! {
        key: "querylog.privacy",
        kind: "full, truncate, pseudonymize, none or omit",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.querylog.privacy,
        parse: parse_string,
        show: show_string,
        description: "how much of the client an entry keeps, for clients whose groups set no spec.queryLog.privacy: full (address), truncate (IPv4 /24, IPv6 /48), pseudonymize (keyed HMAC p-…), none (no client), omit (not logged, counted in rollups); a client in several groups gets the strictest; a change rotates the pseudonym key",
    },
    key! {
        key: "querylog.retention",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.querylog.retention,
        parse: parse_string,
        show: show_string,
        description: "entries older than this are pruned (checked every minute, in batches), for clients whose groups set no spec.queryLog.retention; 0 = kept by age forever; rollups are kept",
    },
    key! {
        key: "querylog.maxBytes",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.querylog.max_bytes,
        parse: parse_num,
        show: show_num,
        description: "when querylog.db grows past this many bytes the oldest entries are pruned (at least 1 MiB; 0 = no limit)",
    },
    key! {
        key: "querylog.pseudonymRotation",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.querylog.pseudonym_rotation,
        parse: parse_string,
        show: show_string,
        description: "how long one random pseudonym key lives (at least 1m); pseudonyms of different keys cannot be linked; the key also rotates at start and on any privacy change",
    },
    key! {
        key: "querylog.bufferBatches",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.querylog.buffer_batches,
        parse: parse_num,
        show: show_num,
        description: "batches of records each core may have waiting for the writer (1 to 4096); past that a core drops records and counts them (kudurru_querylog_dropped_total), it never waits",
    },
    key! {
        key: "querylog.file",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.querylog.file,
        parse: parse_string,
        show: show_string,
        description: "the jsonl sink's file (created 0600, appended to); empty = <dataDir>/querylog.jsonl",
    },
    key! {
        key: "querylog.identity",
        kind: "string",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.querylog.identity,
        parse: parse_string,
        show: show_string,
        description: "the dnstap identity field; empty = server.identity (the host name when that is empty too)",
    },
    key! {
        key: "querylog.dnstap.address",
        kind: "unix:PATH or tcp:IP:PORT",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.querylog.dnstap.address,
        parse: parse_string,
        show: show_string,
        description: "the dnstap collector (fstrm_capture, a dnstap-to-Kafka forwarder): unix:/run/dnstap.sock or tcp:127.0.0.1:6000; required when querylog.sink = dnstap; reconnects when it goes away",
    },
    key! {
        key: "querylog.dnstap.bufferEvents",
        kind: "integer",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.querylog.dnstap.buffer_events,
        parse: parse_num,
        show: show_num,
        description: "events the dnstap sink holds while the collector is slow or away (16 to 10000000); past that they are dropped and counted (kudurru_querylog_sink_dropped_total)",
    },
];

/// Which sink the writer feeds (`querylog.sink`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// The redb database `<dataDir>/querylog.db`.
    Redb,
    /// A dnstap Frame Streams connection.
    Dnstap,
    /// A JSON-lines file.
    Jsonl,
    /// Nothing is kept (records are still drained and counted).
    None,
}

impl SinkKind {
    /// The spelling in `querylog.sink`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Dnstap => "dnstap",
            Self::Jsonl => "jsonl",
            Self::None => "none",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::Redb, Self::Dnstap, Self::Jsonl, Self::None]
            .into_iter()
            .find(|s| s.label() == text)
    }
}

/// Where the dnstap sink connects (`querylog.dnstap.address`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnstapAddress {
    /// A unix stream socket.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl DnstapAddress {
    /// `unix:/path` or `tcp:IP:PORT`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err("a unix socket path must be absolute (unix:/run/dnstap.sock)".into());
            }
            return Ok(Self::Unix(path));
        }
        if let Some(addr) = text.strip_prefix("tcp:") {
            return addr.parse().map(Self::Tcp).map_err(|_| {
                "expected tcp:IP:PORT with an IP address (tcp:127.0.0.1:6000)".into()
            });
        }
        Err("expected unix:/path or tcp:IP:PORT".into())
    }
}

/// `querylog.*` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryLogSettings {
    /// `querylog.enabled`.
    pub enabled: bool,
    /// `querylog.sink`.
    pub sink: SinkKind,
    /// `querylog.privacy`.
    pub privacy: Privacy,
    /// `querylog.retention` (zero: kept by age forever).
    pub retention: Duration,
    /// `querylog.maxBytes` (zero: no limit).
    pub max_bytes: u64,
    /// `querylog.pseudonymRotation`.
    pub pseudonym_rotation: Duration,
    /// `querylog.bufferBatches`.
    pub buffer_batches: usize,
    /// `<dataDir>/querylog.db`.
    pub db_path: PathBuf,
    /// `querylog.file`, resolved.
    pub file: PathBuf,
    /// `querylog.identity`, resolved.
    pub identity: String,
    /// `querylog.dnstap.address` (`None` when empty).
    pub dnstap_address: Option<DnstapAddress>,
    /// `querylog.dnstap.bufferEvents`.
    pub dnstap_buffer_events: usize,
}

impl QueryLogSettings {
    /// The sink that runs: `None` when the log is disabled.
    pub fn effective_sink(&self) -> SinkKind {
        if self.enabled {
            self.sink
        } else {
            SinkKind::None
        }
    }
}

/// A duration that may be zero, or an error naming `key`.
fn duration_or_zero(key: &'static str, text: &str) -> Result<Duration, ConfigError> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|e| ConfigError::value(key, text, e))
}

impl QueryLogSection {
    /// Checks every key of the section (`data_dir` and `server_identity` resolve the
    /// defaults); the error names the first key at fault.
    pub(super) fn validate(
        &self,
        data_dir: &Path,
        server_identity: &str,
    ) -> Result<QueryLogSettings, ConfigError> {
        let sink = SinkKind::parse(&self.sink).ok_or_else(|| {
            ConfigError::value(
                "querylog.sink",
                &self.sink,
                "expected redb, dnstap, jsonl or none",
            )
        })?;
        let privacy = Privacy::from_label(&self.privacy).ok_or_else(|| {
            ConfigError::value(
                "querylog.privacy",
                &self.privacy,
                "expected full, truncate, pseudonymize, none or omit",
            )
        })?;
        let retention = duration_or_zero("querylog.retention", &self.retention)?;
        if self.max_bytes != 0 && self.max_bytes < MIN_QUERYLOG_MAX_BYTES {
            return Err(ConfigError::value(
                "querylog.maxBytes",
                self.max_bytes,
                format!("must be 0 (no limit) or at least {MIN_QUERYLOG_MAX_BYTES} (1 MiB)"),
            ));
        }
        let pseudonym_rotation =
            humantime::parse_duration(&self.pseudonym_rotation).map_err(|e| {
                ConfigError::value("querylog.pseudonymRotation", &self.pseudonym_rotation, e)
            })?;
        if pseudonym_rotation < MIN_PSEUDONYM_ROTATION {
            return Err(ConfigError::value(
                "querylog.pseudonymRotation",
                &self.pseudonym_rotation,
                "must be at least 1m",
            ));
        }
        let (low, high) = BUFFER_BATCHES_RANGE;
        if !(low..=high).contains(&self.buffer_batches) {
            return Err(ConfigError::value(
                "querylog.bufferBatches",
                self.buffer_batches,
                format!("must be {low} to {high}"),
            ));
        }
        let file = if self.file.is_empty() {
            data_dir.join(QUERYLOG_JSONL_FILE)
        } else {
            let file = PathBuf::from(&self.file);
            if !file.is_absolute() {
                return Err(ConfigError::value(
                    "querylog.file",
                    &self.file,
                    "must be an absolute path",
                ));
            }
            file
        };
        let dnstap_address = if self.dnstap.address.is_empty() {
            None
        } else {
            Some(
                DnstapAddress::parse(&self.dnstap.address).map_err(|reason| {
                    ConfigError::value("querylog.dnstap.address", &self.dnstap.address, reason)
                })?,
            )
        };
        if self.enabled && sink == SinkKind::Dnstap && dnstap_address.is_none() {
            return Err(ConfigError::value(
                "querylog.dnstap.address",
                "",
                "querylog.sink = dnstap needs a collector: unix:/path or tcp:IP:PORT",
            ));
        }
        let (low, high) = BUFFER_EVENTS_RANGE;
        if !(low..=high).contains(&self.dnstap.buffer_events) {
            return Err(ConfigError::value(
                "querylog.dnstap.bufferEvents",
                self.dnstap.buffer_events,
                format!("must be {low} to {high}"),
            ));
        }
        let identity = if self.identity.is_empty() {
            server_identity.to_owned()
        } else {
            self.identity.clone()
        };
        Ok(QueryLogSettings {
            enabled: self.enabled,
            sink,
            privacy,
            retention,
            max_bytes: self.max_bytes,
            pseudonym_rotation,
            buffer_batches: self.buffer_batches,
            db_path: data_dir.join(QUERYLOG_DB_FILE),
            file,
            identity,
            dnstap_address,
            dnstap_buffer_events: self.dnstap.buffer_events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(f: fn(&mut QueryLogSection)) -> Result<QueryLogSettings, ConfigError> {
        let mut s = QueryLogSection::default();
        f(&mut s);
        s.validate(Path::new("/var/lib/kudurru"), "edge-1")
    }

    #[test]
    fn defaults_validate_to_the_documented_values() {
        let s = check(|_| {}).unwrap();
        // Off by default; when turned on, the redb sink.
        assert!(!s.enabled);
        assert_eq!(s.effective_sink(), SinkKind::None);
        let s = check(|s| s.enabled = true).unwrap();
        assert_eq!(s.sink, SinkKind::Redb);
        assert_eq!(s.privacy, Privacy::Full);
        assert_eq!(s.retention, Duration::from_secs(7 * 86_400));
        assert_eq!(s.max_bytes, 1 << 30);
        assert_eq!(s.pseudonym_rotation, Duration::from_secs(86_400));
        assert_eq!(s.db_path, PathBuf::from("/var/lib/kudurru/querylog.db"));
        assert_eq!(s.file, PathBuf::from("/var/lib/kudurru/querylog.jsonl"));
        assert_eq!(s.identity, "edge-1");
        assert_eq!(s.dnstap_address, None);
        assert_eq!(s.effective_sink(), SinkKind::Redb);
        let off = check(|s| s.enabled = false).unwrap();
        assert_eq!(off.effective_sink(), SinkKind::None);
    }

    #[test]
    fn zero_retention_and_size_mean_no_limit_and_addresses_parse() {
        let s = check(|s| {
            s.retention = "0".into();
            s.max_bytes = 0;
            s.sink = "dnstap".into();
            s.dnstap.address = "tcp:127.0.0.1:6000".into();
        })
        .unwrap();
        assert_eq!(s.retention, Duration::ZERO);
        assert_eq!(s.max_bytes, 0);
        assert_eq!(
            s.dnstap_address,
            Some(DnstapAddress::Tcp("127.0.0.1:6000".parse().unwrap()))
        );
        assert_eq!(
            DnstapAddress::parse("unix:/run/dnstap.sock"),
            Ok(DnstapAddress::Unix("/run/dnstap.sock".into()))
        );
    }

    #[test]
    fn each_bad_value_names_its_key() {
        let key = |f: fn(&mut QueryLogSection)| match check(f).unwrap_err() {
            ConfigError::Value { key, .. } => key,
            other => panic!("{other}"),
        };
        assert_eq!(key(|s| s.sink = "sqlite".into()), "querylog.sink");
        assert_eq!(key(|s| s.privacy = "hidden".into()), "querylog.privacy");
        assert_eq!(key(|s| s.retention = "a week".into()), "querylog.retention");
        assert_eq!(key(|s| s.max_bytes = 1000), "querylog.maxBytes");
        assert_eq!(
            key(|s| s.pseudonym_rotation = "10s".into()),
            "querylog.pseudonymRotation"
        );
        assert_eq!(key(|s| s.buffer_batches = 0), "querylog.bufferBatches");
        assert_eq!(key(|s| s.file = "log.jsonl".into()), "querylog.file");
        assert_eq!(
            key(|s| {
                s.enabled = true;
                s.sink = "dnstap".into();
            }),
            "querylog.dnstap.address"
        );
        // Off, a dnstap sink without an address is not an error: no sink exists.
        assert!(check(|s| s.sink = "dnstap".into()).is_ok());
        assert_eq!(
            key(|s| s.dnstap.address = "udp:127.0.0.1:6000".into()),
            "querylog.dnstap.address"
        );
        assert_eq!(
            key(|s| s.dnstap.address = "unix:dnstap.sock".into()),
            "querylog.dnstap.address"
        );
        assert_eq!(
            key(|s| s.dnstap.buffer_events = 1),
            "querylog.dnstap.bufferEvents"
        );
    }
}
