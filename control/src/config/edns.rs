//! `edns.*`: the EDNS(0) UDP payload size (RFC 6891) advertised and answered within.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_num, show_num};

/// `edns.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EdnsSection {
    /// Advertised and maximum UDP payload.
    pub udp_payload: u16,
}

impl Default for EdnsSection {
    fn default() -> Self {
        Self {
            udp_payload: kudurru_core::wire::DEFAULT_EDNS_PAYLOAD,
        }
    }
}

/// The `edns.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "edns.udpPayload",
    kind: "integer",
    scope: Cluster,
    host_only: false,
    restart_required: true,
    field: |c| c.edns.udp_payload,
    parse: parse_num,
    show: show_num,
    description: "EDNS UDP payload advertised and the largest UDP answer sent (512-4096)",
}];
