//! Why a configuration was rejected: one error type for reading, layering and validating, each
//! variant naming the file, variable or key at fault.

use std::path::PathBuf;

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The node file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The node file is not valid TOML or has unknown keys or wrong types (the message carries
    /// the line, column and key).
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message, with line and column.
        message: String,
    },
    /// The settings file sets a key that is node-scope or host-only.
    #[error(
        "settings file {path}: {key} is a node-scope or host-only key; the settings file may hold cluster-scope keys only (see docs/configuration.md)"
    )]
    NotSharable {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
    },
    /// An environment variable names no key.
    #[error("unknown configuration variable {var}: no key {key:?} (see docs/configuration.md)")]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The key it would set.
        key: String,
    },
    /// A value is invalid for its key.
    #[error("invalid value {value:?} for {key}: {reason}")]
    Value {
        /// The key.
        key: &'static str,
        /// The value as given.
        value: String,
        /// Why.
        reason: String,
    },
    /// A value from an environment variable was invalid.
    #[error("environment variable {var}: {source}")]
    Env {
        /// The variable.
        var: String,
        /// The key's error.
        source: Box<Self>,
    },
    /// A key asked for by name (`kudurru settings get KEY`) does not exist.
    #[error("no key {key:?} (see `kudurru config keys`)")]
    UnknownKey {
        /// The name as given.
        key: String,
    },
}

impl ConfigError {
    /// A [`Self::Value`] error: `value` is invalid for `key` because of `reason`.
    pub(super) fn value(key: &'static str, value: impl ToString, reason: impl ToString) -> Self {
        Self::Value {
            key,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}
