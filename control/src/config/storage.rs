//! `storage.*`: where the node keeps its files.

use std::path::{Path, PathBuf};

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
    description: "data directory: tokens.json (0600) now, databases later; created 0700; a user who cannot write the default gets $XDG_STATE_HOME/kudurru (else ~/.local/state/kudurru), said at start",
}];

/// The data directory to use, and a note when it is not the configured one. The built-in
/// default (`/var/lib/kudurru`) needs root to create; a user who did not configure one gets
/// their state directory (`$XDG_STATE_HOME/kudurru`, else `~/.local/state/kudurru`) instead,
/// so `kudurru token create` and `kudurru serve` meet without a flag. A configured directory
/// is used as given.
pub(super) fn resolve_data_dir(configured: &str) -> (PathBuf, Option<String>) {
    // Probed once per process: every validation (reloads, API checks) asks again.
    static DEFAULT_WRITABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let path = PathBuf::from(configured);
    if configured != DEFAULT_DATA_DIR || *DEFAULT_WRITABLE.get_or_init(|| writable(&path)) {
        return (path, None);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state")));
    match state {
        Some(state) => {
            let fallback = state.join("kudurru");
            let note = format!(
                "{DEFAULT_DATA_DIR} cannot be written by this user; using {} (set storage.dataDir or --data-dir to choose)",
                fallback.display()
            );
            (fallback, Some(note))
        }
        None => (path, None),
    }
}

/// Whether this process can write in `dir`, or create it: a probe file, removed at once.
fn writable(dir: &Path) -> bool {
    let probe_in = if dir.exists() {
        dir
    } else {
        match dir.parent() {
            Some(parent) if parent.exists() => parent,
            _ => return false,
        }
    };
    let probe = probe_in.join(format!(".kudurru-probe-{}", std::process::id()));
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .is_ok();
    if created {
        let _ = std::fs::remove_file(&probe);
    }
    created
}
