//! `zones.*`: where zone files are read from, how many changes a zone keeps for IXFR, how
//! large a zone may be, and where the TSIG keys are.
//!
//! The zones themselves are objects in the store (`Zone`, `RecordSet`); these keys bound them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::key::{KeyInfo, key, parse_num, parse_string, show_num, show_string};

/// Default directory zone files (and their `$INCLUDE`s) must be inside.
pub const DEFAULT_ZONE_FILE_DIR: &str = "/etc/kudurru/zones";
/// Default most changes (diffs) one zone keeps for IXFR (RFC 1995).
pub const DEFAULT_JOURNAL_SIZE: u64 = 100;
/// Default most records one zone holds.
pub const DEFAULT_MAX_ZONE_RECORDS: u64 = 5_000_000;
/// Bounds of `zones.journalSize` (0: IXFR always answered with the whole zone).
pub const JOURNAL_SIZE_RANGE: (u64, u64) = (0, 10_000);
/// Bounds of `zones.maxRecords`.
pub const ZONE_RECORDS_RANGE: (u64, u64) = (1, 50_000_000);

/// `zones.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ZonesSection {
    /// Directory zone files must be inside.
    pub file_dir: String,
    /// Most diffs one zone keeps.
    pub journal_size: u64,
    /// Most records one zone holds.
    pub max_records: u64,
    /// The TSIG key file (BIND's `tsig-keygen` format); empty: none.
    pub tsig_key_file: String,
}

impl Default for ZonesSection {
    fn default() -> Self {
        Self {
            file_dir: DEFAULT_ZONE_FILE_DIR.into(),
            journal_size: DEFAULT_JOURNAL_SIZE,
            max_records: DEFAULT_MAX_ZONE_RECORDS,
            tsig_key_file: String::new(),
        }
    }
}

/// The `zones.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "zones.fileDir",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.zones.file_dir,
        parse: parse_string,
        show: show_string,
        description: "absolute directory a primary Zone's file and every $INCLUDE must be inside (after resolving symlinks); files are re-imported when they change",
    },
    key! {
        key: "zones.journalSize",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.zones.journal_size,
        parse: parse_num,
        show: show_num,
        description: "most changes (serial to serial diffs) each zone keeps for IXFR, RFC 1995 (0 to 10000; 0: IXFR answered with the whole zone); applies from the next change",
    },
    key! {
        key: "zones.maxRecords",
        kind: "integer",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.zones.max_records,
        parse: parse_num,
        show: show_num,
        description: "most records one zone holds (1 to 50000000): a larger zone file, RecordSet overlay or transfer is refused and the last good zone stays; applies from the next load",
    },
    key! {
        key: "zones.tsigKeyFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.zones.tsig_key_file,
        parse: parse_string,
        show: show_string,
        description: "TSIG keys (RFC 8945) for transfers, NOTIFY and UPDATE, in the format BIND's tsig-keygen writes (key \"name\" { algorithm hmac-sha256; secret \"…\"; };), so the same file serves nsupdate -k; empty = none",
    },
];

/// `zones.*` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonesSettings {
    /// `zones.fileDir`.
    pub file_dir: PathBuf,
    /// `zones.journalSize`.
    pub journal_size: usize,
    /// `zones.maxRecords`.
    pub max_records: usize,
    /// `zones.tsigKeyFile`; `None` when empty.
    pub tsig_key_file: Option<PathBuf>,
}

impl Default for ZonesSettings {
    fn default() -> Self {
        ZonesSection::default()
            .validate()
            .expect("the zones defaults are valid")
    }
}

impl ZonesSection {
    /// Checks every key of the section; the error names the first key at fault.
    pub(super) fn validate(&self) -> Result<ZonesSettings, ConfigError> {
        let file_dir = PathBuf::from(&self.file_dir);
        if !file_dir.is_absolute() {
            return Err(ConfigError::value(
                "zones.fileDir",
                &self.file_dir,
                "must be an absolute directory",
            ));
        }
        let (low, high) = JOURNAL_SIZE_RANGE;
        if !(low..=high).contains(&self.journal_size) {
            return Err(ConfigError::value(
                "zones.journalSize",
                self.journal_size,
                format!("must be {low} to {high}"),
            ));
        }
        let (low, high) = ZONE_RECORDS_RANGE;
        if !(low..=high).contains(&self.max_records) {
            return Err(ConfigError::value(
                "zones.maxRecords",
                self.max_records,
                format!("must be {low} to {high}"),
            ));
        }
        let tsig_key_file = match self.tsig_key_file.as_str() {
            "" => None,
            path if PathBuf::from(path).is_absolute() => Some(PathBuf::from(path)),
            path => {
                return Err(ConfigError::value(
                    "zones.tsigKeyFile",
                    path,
                    "must be an absolute path or empty",
                ));
            }
        };
        Ok(ZonesSettings {
            file_dir,
            // Both bounded above by ranges far below usize::MAX.
            journal_size: usize::try_from(self.journal_size).unwrap_or(usize::MAX),
            max_records: usize::try_from(self.max_records).unwrap_or(usize::MAX),
            tsig_key_file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_to_the_documented_values() {
        let s = ZonesSection::default().validate().unwrap();
        assert_eq!(s.file_dir, PathBuf::from("/etc/kudurru/zones"));
        assert_eq!((s.journal_size, s.max_records), (100, 5_000_000));
        assert_eq!(s.tsig_key_file, None);
    }

    #[test]
    fn each_bad_value_names_its_key() {
        let key = |f: fn(&mut ZonesSection)| {
            let mut section = ZonesSection::default();
            f(&mut section);
            section.validate().unwrap_err().to_string()
        };
        assert!(key(|s| s.file_dir = "zones".into()).contains("zones.fileDir"));
        assert!(key(|s| s.journal_size = 10_001).contains("zones.journalSize"));
        assert!(key(|s| s.max_records = 0).contains("zones.maxRecords"));
        assert!(key(|s| s.tsig_key_file = "keys.conf".into()).contains("zones.tsigKeyFile"));
    }
}
