//! `storage.*`: where the node keeps its files.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default data directory (tokens; later the query log and list cache).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/kudurru";

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

/// The `storage.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "storage.dataDir",
    kind: "path",
    scope: Node,
    host_only: true,
    restart_required: true,
    field: |c| c.storage.data_dir,
    parse: parse_string,
    show: show_string,
    description: "data directory: tokens.json (0600) now, databases later; created 0700",
}];
