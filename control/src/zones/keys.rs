//! TSIG keys (RFC 8945) from `zones.tsigKeyFile`, in the format BIND's `tsig-keygen` writes
//! and `nsupdate -k` reads: `key "name" { algorithm hmac-sha256; secret "base64"; };`.

use std::sync::Arc;

/// The keys by name.
#[derive(Debug, Clone, Default)]
pub struct TsigKeys {
    keys: Vec<Arc<domain::tsig::Key>>,
}

impl TsigKeys {
    /// The key named `name` (case-insensitive, as a domain name).
    pub fn get(&self, name: &str) -> Option<Arc<domain::tsig::Key>> {
        let _ = name;
        self.keys.first().cloned().filter(|_| false)
    }
}
