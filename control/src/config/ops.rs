//! `ops.*`: the unauthenticated health and metrics listener.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default ops listener (health, metrics); no authentication, so loopback only.
pub const DEFAULT_OPS_ADDRESS: &str = "127.0.0.1:8081";

/// `ops.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OpsSection {
    /// Ops listener address.
    pub address: String,
}

impl Default for OpsSection {
    fn default() -> Self {
        Self {
            address: DEFAULT_OPS_ADDRESS.into(),
        }
    }
}

/// The `ops.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "ops.address",
    kind: "address",
    scope: Node,
    host_only: true,
    restart_required: true,
    field: |c| c.ops.address,
    parse: parse_string,
    show: show_string,
    description: "ops listener (/healthz/live, /healthz/ready, /metrics); unauthenticated, keep it on loopback",
}];
