//! What a configuration key is: its metadata as named fields, and the text accessors that the
//! environment, flags, the API and the docs use to read and write it.

use std::fmt;

use super::{Config, ConfigError};

/// Where a key may be set: on one node, or the same for the whole cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Per node (addresses, cores).
    Node,
    /// Shared by every node of a cluster.
    Cluster,
}

/// One configuration key's metadata and accessors.
pub struct KeyInfo {
    /// Dotted camelCase path.
    pub key: &'static str,
    /// Value type, for docs.
    pub kind: &'static str,
    /// Node or cluster.
    pub scope: Scope,
    /// Only meaningful on the host itself (never shared through cluster settings).
    pub host_only: bool,
    /// Takes effect only after a restart.
    pub restart_required: bool,
    /// One line for docs.
    pub description: &'static str,
    pub(super) set: fn(&mut Config, &str) -> Result<(), String>,
    pub(super) get: fn(&Config) -> String,
    pub(super) copy: fn(&mut Config, &Config),
}

impl fmt::Debug for KeyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyInfo")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl KeyInfo {
    /// The key's value in `config`, as text.
    pub fn get(&self, config: &Config) -> String {
        (self.get)(config)
    }

    /// Sets the key from text (environment, flags).
    pub fn set(&self, config: &mut Config, value: &str) -> Result<(), ConfigError> {
        (self.set)(config, value).map_err(|reason| ConfigError::Value {
            key: self.key,
            value: value.to_owned(),
            reason,
        })
    }

    /// Copies this key's value from `from` into `config` (layering).
    pub fn copy(&self, config: &mut Config, from: &Config) {
        (self.copy)(config, from);
    }

    /// The environment variable that sets this key.
    pub fn env_var(&self) -> String {
        format!(
            "KUDURRU_{}",
            self.key.replace('.', "__").to_ascii_uppercase()
        )
    }
}

/// Defines a [`KeyInfo`]. `field` is the key's place in [`Config`]; `parse` turns text into the
/// field's type and `show` turns the field back into text, so `set`, `get` and `copy` all follow
/// from those three.
macro_rules! key {
    {
        key: $key:literal,
        kind: $kind:literal,
        scope: $scope:ident,
        host_only: $host_only:literal,
        restart_required: $restart:literal,
        field: |$c:ident| $field:expr,
        parse: $parse:expr,
        show: $show:expr,
        description: $description:literal $(,)?
    } => {
        $crate::config::KeyInfo {
            key: $key,
            kind: $kind,
            scope: $crate::config::Scope::$scope,
            host_only: $host_only,
            restart_required: $restart,
            description: $description,
            set: |$c, v| {
                $field = $parse(v)?;
                Ok(())
            },
            get: |$c| $show(&$field),
            copy: |$c, src| {
                let value = {
                    let $c = src;
                    $field.clone()
                };
                $field = value;
            },
        }
    };
}
pub(super) use key;

pub(super) fn parse_num<T: std::str::FromStr>(value: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    value
        .trim()
        .parse::<T>()
        .map_err(|_| format!("expected a whole number from 0 to {}", max_of::<T>()))
}

/// The largest value of the integer type `T`, for messages (`u16`: 65535).
fn max_of<T>() -> u64 {
    match size_of::<T>() {
        1 => u8::MAX.into(),
        2 => u16::MAX.into(),
        4 => u32::MAX.into(),
        _ => u64::MAX,
    }
}

/// serde's and toml's reasons in an operator's words: `invalid type: string "x", expected
/// u32` becomes `invalid type: string "x", expected a whole number`.
pub fn plain_reason(reason: &str) -> String {
    let mut out = reason.to_owned();
    for (rust, plain) in [
        ("expected usize", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected u16", "expected a whole number"),
        ("expected u8", "expected a whole number"),
        ("expected a sequence", "expected a list"),
        ("expected a boolean", "expected true or false"),
        ("invalid type: sequence", "invalid type: a list"),
        ("invalid type: map", "invalid type: a table"),
    ] {
        out = out.replace(rust, plain);
    }
    out
}

fn parse_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

pub(super) fn parse_string(v: &str) -> Result<String, String> {
    Ok(v.to_owned())
}

pub(super) fn parse_strings(v: &str) -> Result<Vec<String>, String> {
    Ok(parse_list(v))
}

pub(super) fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

pub(super) fn show_bool(v: &bool) -> String {
    v.to_string()
}

pub(super) fn parse_cpus(v: &str) -> Result<Vec<usize>, String> {
    parse_list(v).iter().map(|s| parse_num(s)).collect()
}

#[allow(clippy::ptr_arg)] // the key! macro passes `&field`
pub(super) fn show_string(s: &String) -> String {
    s.to_owned()
}

pub(super) fn show_num<T: ToString>(v: &T) -> String {
    v.to_string()
}

/// Values joined with commas, as the environment and flags write lists.
pub fn show_list<T: ToString>(values: &[T]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
