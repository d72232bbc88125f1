//! `log.*`: what the node logs and in which format; `log.level` is hot and writable over the
//! API, so its filter syntax is checked here before `tracing` compiles it.

use serde::{Deserialize, Serialize};

use super::key::{KeyInfo, key, parse_string, show_string};

/// Default level filter.
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// Default log format.
pub const DEFAULT_LOG_FORMAT: &str = "text";

/// `log.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LogSection {
    /// Level filter: `LEVEL` or `TARGET=LEVEL` directives, comma-separated (see `check_log_filter`).
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            level: DEFAULT_LOG_LEVEL.into(),
            format: DEFAULT_LOG_FORMAT.into(),
        }
    }
}

/// The `log.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "log.level",
        kind: "string",
        scope: Node,
        host_only: false,
        restart_required: false,
        field: |c| c.log.level,
        parse: parse_string,
        show: show_string,
        description: "a level (off, error, warn, info, debug, trace) or LEVEL/TARGET=LEVEL directives, comma-separated; no span or field filters",
    },
    key! {
        key: "log.format",
        kind: "string",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.log.format,
        parse: parse_string,
        show: show_string,
        description: "text or json",
    },
];

/// Longest `log.level` accepted; real filters are a few directives.
const LOG_FILTER_MAX_LEN: usize = 1024;

/// Accepts `LEVEL` or `TARGET=LEVEL` directives, comma-separated. `tracing`'s span and field
/// filters (`target[span{field=/regex/}]`) are refused: each field value is compiled into a DFA
/// whose construction is exponential in the worst case, so a 64-byte value found by the `config`
/// fuzz target kept the control thread busy for seconds, and `log.level` is writable over the API.
pub(super) fn check_log_filter(filter: &str) -> Result<(), String> {
    if filter.len() > LOG_FILTER_MAX_LEN {
        return Err(format!("longer than {LOG_FILTER_MAX_LEN} bytes"));
    }
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let is_level = |word: &str| LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word));
    let is_target = |word: &str| {
        !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'.'))
    };
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let ok = match directive.split_once('=') {
            Some((target, level)) => is_target(target.trim()) && is_level(level.trim()),
            None => is_level(directive) || is_target(directive),
        };
        if !ok {
            return Err(format!(
                "directive {directive:?} is not LEVEL or TARGET=LEVEL (levels: {}); span and field \
                 filters are not supported",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn log_filter_takes_levels_and_targets_but_not_span_or_field_filters() {
        for ok in [
            "info",
            "WARN",
            "kudurru_transports=debug,info",
            "h2::codec=off, trace",
            "",
        ] {
            let mut c = Config::default();
            c.log.level = ok.into();
            c.validate()
                .unwrap_or_else(|e| panic!("{ok:?} rejected: {e}"));
        }
        // The `config` fuzz target's slow unit: a field filter whose regex takes seconds to compile.
        let slow = "[\"999999sto[[{hutet =C................=1.0_5frt =x}1\"]";
        for bad in [
            slow,
            "kudurru[span{id=1}]=debug",
            "info=verbose",
            "a b=info",
        ] {
            let mut c = Config::default();
            c.log.level = bad.into();
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains("log.level") && err.contains("TARGET=LEVEL"),
                "{bad:?}: {err}"
            );
        }
        let mut c = Config::default();
        c.log.level = "info,".repeat(300);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("longer than 1024 bytes"), "{err}");
    }
}
