//! `shutdown.*`: how a node leaves service on SIGTERM.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default lameduck time: none, the listeners close at once.
pub const DEFAULT_DRAIN_DELAY: &str = "0s";

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
            drain_delay: DEFAULT_DRAIN_DELAY.into(),
        }
    }
}

/// The `shutdown.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "shutdown.drainDelay",
    kind: "duration",
    scope: Node,
    host_only: false,
    restart_required: true,
    field: |c| c.shutdown.drain_delay,
    parse: parse_string,
    show: show_string,
    description: "on SIGTERM, time in lameduck (health name SERVFAIL, readiness 503) before listeners close; 0s = none",
}];
