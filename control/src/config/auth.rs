//! `auth.*`: limits on the API's bearer tokens.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default longest lifetime of an API token.
pub const DEFAULT_TOKEN_MAX_LIFETIME: &str = "90d";

/// `auth.*`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthSection {
    /// `auth.tokens.*`.
    pub tokens: TokensSection,
}

/// `auth.tokens.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TokensSection {
    /// The longest a token may live.
    pub max_lifetime: String,
}

impl Default for TokensSection {
    fn default() -> Self {
        Self {
            max_lifetime: DEFAULT_TOKEN_MAX_LIFETIME.into(),
        }
    }
}

/// The `auth.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[key! {
    key: "auth.tokens.maxLifetime",
    kind: "duration",
    scope: Cluster,
    host_only: false,
    restart_required: true,
    field: |c| c.auth.tokens.max_lifetime,
    parse: parse_string,
    show: show_string,
    description: "the longest an API token lives, whatever --ttl it was created with",
}];
