//! `api.*`: the token-authenticated HTTP API listener and its optional HTTPS pair.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default HTTP API listener; token-authenticated, loopback by default.
pub const DEFAULT_API_ADDRESS: &str = "127.0.0.1:8080";

/// Default lifetime of a dashboard session (`api.sessionTTL`).
pub(super) const DEFAULT_SESSION_TTL: &str = "12h";

/// `api.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiSection {
    /// HTTP API listener; empty = no API.
    pub address: String,
    /// PEM certificate chain for HTTPS on the API listener; empty = plain HTTP.
    pub tls_cert: String,
    /// PEM private key for `tlsCert`.
    pub tls_key: String,
    /// How long a dashboard session lives after sign-in.
    #[serde(rename = "sessionTTL")]
    pub session_ttl: String,
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            address: DEFAULT_API_ADDRESS.into(),
            tls_cert: String::new(),
            tls_key: String::new(),
            session_ttl: DEFAULT_SESSION_TTL.into(),
        }
    }
}

/// The `api.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "api.address",
        kind: "address",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.api.address,
        parse: parse_string,
        show: show_string,
        description: "HTTP API listener (/api/v1, bearer tokens); empty = no API",
    },
    key! {
        key: "api.tlsCert",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.api.tls_cert,
        parse: parse_string,
        show: show_string,
        description: "PEM certificate chain (leaf first) to serve the API over HTTPS; set with api.tlsKey; empty = plain HTTP; the file is re-read when it changes",
    },
    key! {
        key: "api.tlsKey",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.api.tls_key,
        parse: parse_string,
        show: show_string,
        description: "PEM private key for api.tlsCert",
    },
    key! {
        key: "api.sessionTTL",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.api.session_ttl,
        parse: parse_string,
        show: show_string,
        description: "how long a dashboard session (the cookie a sign-in with a token sets) lives; never longer than its token; sessions are held in memory, so a restart signs everyone out",
    },
];
