//! `audit.*`: how long the object store's audit log keeps its records.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default audit retention: 400 days, a year and a month of margin for yearly reviews.
pub const DEFAULT_AUDIT_RETENTION: &str = "400d";

/// `audit.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditSection {
    /// Records older than this are removed.
    pub retention: String,
}

impl Default for AuditSection {
    fn default() -> Self {
        Self {
            retention: DEFAULT_AUDIT_RETENTION.into(),
        }
    }
}

/// The `audit.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "audit.retention",
    kind: "duration",
    scope: Cluster,
    host_only: false,
    restart_required: true,
    field: |c| c.audit.retention,
    parse: parse_string,
    show: show_string,
    description: "audit records older than this are removed at start and daily; the hash chain stays verifiable from the first kept record",
}];
