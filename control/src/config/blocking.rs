//! `blocking.*`: block-list fetching limits, the block answers' TTL, client IDs on encrypted
//! transports, and whether a list that never loaded holds readiness back.
//!
//! The lists, client groups and policies themselves are objects in the store (`BlockList`,
//! `ClientGroup`, `Policy`); these keys are what every list and policy falls back to.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::key::{
    KeyInfo, key, parse_bool, parse_num, parse_string, parse_strings, show_bool, show_list,
    show_num, show_string,
};

/// Default TTL of block answers and rewrites.
pub const DEFAULT_BLOCK_TTL: &str = "60s";
/// Default interval between fetches of a URL source.
pub const DEFAULT_REFRESH_INTERVAL: &str = "24h";
/// Default largest body of one list source: 64 MiB.
pub const DEFAULT_MAX_LIST_BYTES: u64 = 64 << 20;
/// Default most rules one list keeps.
pub const DEFAULT_MAX_LIST_ENTRIES: u64 = 5_000_000;
/// Default deadline of one fetch (connect to last byte).
pub const DEFAULT_FETCH_TIMEOUT: &str = "60s";
/// Default directory `file` sources must be inside.
pub const DEFAULT_FILE_SOURCE_DIR: &str = "/etc/kudurru/lists";

/// Longest `blocking.blockTTL`: a day (a block lifted by an operator should not linger).
pub const MAX_BLOCK_TTL: Duration = Duration::from_secs(86_400);
/// Shortest `blocking.refreshInterval` (and a list's own `refreshInterval`): list hosts ask
/// for no more than a few fetches a day, and conditional GETs make a minute cheap enough.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// Longest `blocking.fetchTimeout`.
pub const MAX_FETCH_TIMEOUT: Duration = Duration::from_secs(600);
/// Bounds of `blocking.maxListBytes`: 1 KiB to 1 GiB.
pub const LIST_BYTES_RANGE: (u64, u64) = (1 << 10, 1 << 30);
/// Bounds of `blocking.maxListEntries` (the matcher's arrays are indexed by `u32`).
pub const LIST_ENTRIES_RANGE: (u64, u64) = (1, 50_000_000);
/// Most `blocking.clientIdDomains`.
pub const MAX_CLIENT_ID_DOMAINS: usize = 64;

/// `blocking.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BlockingSection {
    /// TTL of block answers and rewrites a policy does not set.
    #[serde(rename = "blockTTL")]
    pub block_ttl: String,
    /// Interval between fetches of a URL source a list does not set.
    pub refresh_interval: String,
    /// Whether an enabled list that never loaded leaves `/healthz/ready` alone.
    pub allow_degraded: bool,
    /// Names under which a TLS SNI's first label is a client ID.
    pub client_id_domains: Vec<String>,
    /// Largest body of one source.
    pub max_list_bytes: u64,
    /// Most rules one list keeps.
    pub max_list_entries: u64,
    /// Deadline of one fetch.
    pub fetch_timeout: String,
    /// Directory `file` sources must be inside.
    pub file_source_dir: String,
}

impl Default for BlockingSection {
    fn default() -> Self {
        Self {
            block_ttl: DEFAULT_BLOCK_TTL.into(),
            refresh_interval: DEFAULT_REFRESH_INTERVAL.into(),
            allow_degraded: false,
            client_id_domains: Vec::new(),
            max_list_bytes: DEFAULT_MAX_LIST_BYTES,
            max_list_entries: DEFAULT_MAX_LIST_ENTRIES,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT.into(),
            file_source_dir: DEFAULT_FILE_SOURCE_DIR.into(),
        }
    }
}

/// The `blocking.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "blocking.blockTTL",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.block_ttl,
        parse: parse_string,
        show: show_string,
        description: "TTL of block answers and rewrites when a Policy sets no blockTTL (1s to 1d); whole seconds",
    },
    key! {
        key: "blocking.refreshInterval",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.refresh_interval,
        parse: parse_string,
        show: show_string,
        description: "how often a BlockList's url sources are fetched again when the list sets no refreshInterval (at least 1m); conditional GETs (ETag, Last-Modified)",
    },
    key! {
        key: "blocking.allowDegraded",
        kind: "boolean",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.allow_degraded,
        parse: parse_bool,
        show: show_bool,
        description: "false: an enabled BlockList that has never loaded keeps /healthz/ready at 503; true: the node is ready without it (a list that loaded once always keeps its last good copy)",
    },
    key! {
        key: "blocking.clientIdDomains",
        kind: "list of names",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.client_id_domains,
        parse: parse_strings,
        show: show_list,
        description: "names under which a TLS SNI's first label is a client ID (kids.dns.example.net with dns.example.net here: client ID kids) on DoT, DoQ, DoH3 and DoH; at most 64",
    },
    key! {
        key: "blocking.maxListBytes",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.max_list_bytes,
        parse: parse_num,
        show: show_num,
        description: "largest body of one BlockList source, bytes (1 KiB to 1 GiB), when the list sets no maxBytes; a larger body fails the fetch and the last good copy stays; applies from the next fetch",
    },
    key! {
        key: "blocking.maxListEntries",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.max_list_entries,
        parse: parse_num,
        show: show_num,
        description: "most rules one BlockList keeps (1 to 50000000) when the list sets no maxEntries; the rest are counted as truncated; lists are compiled again from their kept bodies when it changes",
    },
    key! {
        key: "blocking.fetchTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.blocking.fetch_timeout,
        parse: parse_string,
        show: show_string,
        description: "deadline of one fetch of a url source, connect to last byte (at most 10m); applies from the next fetch",
    },
    key! {
        key: "blocking.fileSourceDir",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.blocking.file_source_dir,
        parse: parse_string,
        show: show_string,
        description: "absolute directory every BlockList file source must be inside (after resolving symlinks), so an API user cannot make the server read other files",
    },
];

/// `blocking.*` checked: what the list manager and the policy index run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockingSettings {
    /// `blocking.blockTTL`.
    pub block_ttl: Duration,
    /// `blocking.refreshInterval`.
    pub refresh_interval: Duration,
    /// `blocking.allowDegraded`.
    pub allow_degraded: bool,
    /// `blocking.clientIdDomains` as lowercase wire names.
    pub client_id_domains: Vec<Box<[u8]>>,
    /// `blocking.maxListBytes`.
    pub max_list_bytes: u64,
    /// `blocking.maxListEntries`.
    pub max_list_entries: u64,
    /// `blocking.fetchTimeout`.
    pub fetch_timeout: Duration,
    /// `blocking.fileSourceDir`.
    pub file_source_dir: PathBuf,
}

impl Default for BlockingSettings {
    fn default() -> Self {
        BlockingSection::default()
            .validate()
            .expect("the blocking defaults are valid")
    }
}

/// A duration from `min` to `max`, or an error naming `key`.
fn bounded(
    key: &'static str,
    text: &str,
    min: Duration,
    max: Option<Duration>,
) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(text).map_err(|e| ConfigError::value(key, text, e))?;
    if d < min {
        return Err(ConfigError::value(
            key,
            text,
            format!("must be at least {}", humantime::format_duration(min)),
        ));
    }
    if let Some(max) = max
        && d > max
    {
        return Err(ConfigError::value(
            key,
            text,
            format!("must be at most {}", humantime::format_duration(max)),
        ));
    }
    Ok(d)
}

impl BlockingSection {
    /// Checks every key of the section; the error names the first key at fault.
    pub(super) fn validate(&self) -> Result<BlockingSettings, ConfigError> {
        let block_ttl = bounded(
            "blocking.blockTTL",
            &self.block_ttl,
            Duration::from_secs(1),
            Some(MAX_BLOCK_TTL),
        )?;
        if block_ttl.subsec_nanos() != 0 {
            return Err(ConfigError::value(
                "blocking.blockTTL",
                &self.block_ttl,
                "a TTL is whole seconds",
            ));
        }
        let refresh_interval = bounded(
            "blocking.refreshInterval",
            &self.refresh_interval,
            MIN_REFRESH_INTERVAL,
            None,
        )?;
        if self.client_id_domains.len() > MAX_CLIENT_ID_DOMAINS {
            return Err(ConfigError::value(
                "blocking.clientIdDomains",
                self.client_id_domains.len(),
                format!("at most {MAX_CLIENT_ID_DOMAINS} names"),
            ));
        }
        let client_id_domains = self
            .client_id_domains
            .iter()
            .map(|name| {
                kudurru_core::policy::name::to_wire(name)
                    .map(Vec::into_boxed_slice)
                    .map_err(|e| ConfigError::value("blocking.clientIdDomains", name, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (low, high) = LIST_BYTES_RANGE;
        if !(low..=high).contains(&self.max_list_bytes) {
            return Err(ConfigError::value(
                "blocking.maxListBytes",
                self.max_list_bytes,
                format!("must be {low} to {high}"),
            ));
        }
        let (low, high) = LIST_ENTRIES_RANGE;
        if !(low..=high).contains(&self.max_list_entries) {
            return Err(ConfigError::value(
                "blocking.maxListEntries",
                self.max_list_entries,
                format!("must be {low} to {high}"),
            ));
        }
        let fetch_timeout = bounded(
            "blocking.fetchTimeout",
            &self.fetch_timeout,
            Duration::from_secs(1),
            Some(MAX_FETCH_TIMEOUT),
        )?;
        let file_source_dir = PathBuf::from(&self.file_source_dir);
        if !file_source_dir.is_absolute() {
            return Err(ConfigError::value(
                "blocking.fileSourceDir",
                &self.file_source_dir,
                "must be an absolute directory",
            ));
        }
        Ok(BlockingSettings {
            block_ttl,
            refresh_interval,
            allow_degraded: self.allow_degraded,
            client_id_domains,
            max_list_bytes: self.max_list_bytes,
            max_list_entries: self.max_list_entries,
            fetch_timeout,
            file_source_dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_to_the_documented_values() {
        let s = BlockingSection::default().validate().unwrap();
        assert_eq!(s.block_ttl, Duration::from_secs(60));
        assert_eq!(s.refresh_interval, Duration::from_secs(86_400));
        assert!(!s.allow_degraded);
        assert_eq!(s.max_list_bytes, 64 << 20);
        assert_eq!(s.max_list_entries, 5_000_000);
        assert_eq!(s.fetch_timeout, Duration::from_secs(60));
        assert_eq!(s.file_source_dir, PathBuf::from("/etc/kudurru/lists"));
    }

    #[test]
    fn each_bad_value_names_its_key() {
        let key = |f: fn(&mut BlockingSection)| {
            let mut s = BlockingSection::default();
            f(&mut s);
            match s.validate().unwrap_err() {
                ConfigError::Value { key, .. } => key,
                other => panic!("{other}"),
            }
        };
        assert_eq!(key(|s| s.block_ttl = "0s".into()), "blocking.blockTTL");
        assert_eq!(key(|s| s.block_ttl = "2d".into()), "blocking.blockTTL");
        assert_eq!(key(|s| s.block_ttl = "1500ms".into()), "blocking.blockTTL");
        assert_eq!(
            key(|s| s.refresh_interval = "10s".into()),
            "blocking.refreshInterval"
        );
        assert_eq!(
            key(|s| s.refresh_interval = "daily".into()),
            "blocking.refreshInterval"
        );
        assert_eq!(key(|s| s.max_list_bytes = 10), "blocking.maxListBytes");
        assert_eq!(key(|s| s.max_list_entries = 0), "blocking.maxListEntries");
        assert_eq!(
            key(|s| s.fetch_timeout = "1h".into()),
            "blocking.fetchTimeout"
        );
        assert_eq!(
            key(|s| s.file_source_dir = "lists".into()),
            "blocking.fileSourceDir"
        );
        assert_eq!(
            key(|s| s.client_id_domains = vec!["x.example".into(); 65]),
            "blocking.clientIdDomains"
        );
    }
}
