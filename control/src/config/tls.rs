//! `tls.*`: the certificate of the tls://, https://, quic:// and h3:// listeners.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default deadline for a client's TLS (or QUIC) handshake.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: &str = "5s";

/// `tls.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSection {
    /// PEM certificate chain, leaf first.
    pub cert_file: String,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
    /// Handshake deadline.
    pub handshake_timeout: String,
}

impl Default for TlsSection {
    fn default() -> Self {
        Self {
            cert_file: String::new(),
            key_file: String::new(),
            handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT.into(),
        }
    }
}

/// The `tls.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "tls.certFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.tls.cert_file,
        parse: parse_string,
        show: show_string,
        description: "PEM certificate chain (leaf first) for tls://, https://, quic:// and h3:// listeners; the file is re-read when it changes",
    },
    key! {
        key: "tls.keyFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.tls.key_file,
        parse: parse_string,
        show: show_string,
        description: "PEM private key for tls.certFile; re-read when it changes (a bad pair keeps the old one)",
    },
    key! {
        key: "tls.handshakeTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.tls.handshake_timeout,
        parse: parse_string,
        show: show_string,
        description: "a DoT, DoH, DoQ or DoH3 client that has not finished its TLS (or QUIC) handshake after this long is closed",
    },
];
