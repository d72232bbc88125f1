//! `BlockList`: where a list's body comes from, its syntax and whether it blocks or allows.
//! ```text
//! spec:
//!   sources:                      concatenated in order
//!     - url: https://example.net/hosts.txt        fetched every refreshInterval (conditional GET)
//!     - file: /etc/kudurru/lists/local.txt        inside blocking.fileSourceDir; watched
//!     - inline: ["ads.example", "||tracker.example^"]
//!   format: auto | hosts | domains | adblock | wildcard | rpz     (default auto)
//!   mode: deny | allow                                            (default deny)
//!   refreshInterval: 6h          default blocking.refreshInterval; at least 1m
//!   maxBytes: 10485760           per source; default blocking.maxListBytes
//!   maxEntries: 1000000          default blocking.maxListEntries
//! ```

use std::path::{Component, PathBuf};

use kudurru_core::policy::{BlockListSpec, Format, ListMode, ListSource};
use kudurru_storage::FieldError;
use serde_json::Value;

use super::{duration, object, optional_number, optional_string};
use crate::config::{LIST_BYTES_RANGE, LIST_ENTRIES_RANGE, MIN_REFRESH_INTERVAL};

/// The `BlockList` kind.
pub const BLOCK_LIST: &str = "BlockList";

/// Most sources one list has.
const MAX_SOURCES: usize = 64;
/// Longest URL or path.
const MAX_LOCATION: usize = 4096;
/// Most inline lines (the object's 1 MiB body bounds them too).
const MAX_INLINE_LINES: usize = 100_000;

/// `BlockList.spec` checked and typed.
pub fn block_list(spec: &Value) -> Result<BlockListSpec, FieldError> {
    let map = object(
        spec,
        "spec",
        &[
            "sources",
            "format",
            "mode",
            "refreshInterval",
            "maxBytes",
            "maxEntries",
        ],
        "a BlockList has sources, format, mode, refreshInterval, maxBytes and maxEntries",
    )?;
    let Some(sources) = map.get("sources") else {
        return Err(FieldError::new(
            "spec.sources",
            "a BlockList needs at least one source: {url}, {file} or {inline}",
        ));
    };
    let Some(sources) = sources.as_array() else {
        return Err(FieldError::new(
            "spec.sources",
            "must be a list of sources: {url}, {file} or {inline}",
        ));
    };
    if sources.is_empty() || sources.len() > MAX_SOURCES {
        return Err(FieldError::new(
            "spec.sources",
            format!("a BlockList has 1 to {MAX_SOURCES} sources"),
        ));
    }
    let sources = sources
        .iter()
        .enumerate()
        .map(|(i, source)| list_source(source, &format!("spec.sources[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let format = match optional_string(map, "spec", "format")? {
        None => Format::Auto,
        Some(label) => Format::from_label(label).ok_or_else(|| {
            FieldError::new(
                "spec.format",
                format!("{label:?} is not one of auto, hosts, domains, adblock, wildcard, rpz"),
            )
        })?,
    };
    let mode = match optional_string(map, "spec", "mode")? {
        None | Some("deny") => ListMode::Deny,
        Some("allow") => ListMode::Allow,
        Some(other) => {
            return Err(FieldError::new(
                "spec.mode",
                format!("{other:?} is not deny or allow"),
            ));
        }
    };
    let refresh_interval = optional_string(map, "spec", "refreshInterval")?
        .map(|text| duration(text, "spec.refreshInterval", MIN_REFRESH_INTERVAL, None))
        .transpose()?;
    Ok(BlockListSpec {
        sources,
        format,
        mode,
        refresh_interval,
        max_bytes: optional_number(map, "spec", "maxBytes", LIST_BYTES_RANGE)?,
        max_entries: optional_number(map, "spec", "maxEntries", LIST_ENTRIES_RANGE)?,
    })
}

/// One of `spec.sources`: exactly one of `url`, `file` and `inline`.
fn list_source(value: &Value, path: &str) -> Result<ListSource, FieldError> {
    let map = object(
        value,
        path,
        &["url", "file", "inline"],
        "a source is {url}, {file} or {inline}",
    )?;
    if map.len() != 1 {
        return Err(FieldError::new(
            path,
            "a source has exactly one of url, file and inline",
        ));
    }
    if let Some(url) = optional_string(map, path, "url")? {
        return source_url(url, &format!("{path}.url")).map(ListSource::Url);
    }
    if let Some(file) = optional_string(map, path, "file")? {
        return source_file(file, &format!("{path}.file")).map(ListSource::File);
    }
    let field = format!("{path}.inline");
    let Some(lines) = map.get("inline").and_then(Value::as_array) else {
        return Err(FieldError::new(field, "must be a list of lines (strings)"));
    };
    if lines.len() > MAX_INLINE_LINES {
        return Err(FieldError::new(
            field,
            format!("at most {MAX_INLINE_LINES} lines"),
        ));
    }
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| match line.as_str() {
            Some(text) if !text.contains(['\n', '\r', '\0']) => Ok(text.to_owned()),
            Some(_) => Err(FieldError::new(
                format!("{field}[{i}]"),
                "one line each: no line breaks or NUL",
            )),
            None => Err(FieldError::new(format!("{field}[{i}]"), "must be a string")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ListSource::Inline)
}

/// An `http://` or `https://` URL with a host, without spaces or control characters.
fn source_url(url: &str, field: &str) -> Result<String, FieldError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Err(FieldError::new(
            field,
            format!("{url:?} is not an http:// or https:// URL"),
        ));
    };
    if url.len() > MAX_LOCATION {
        return Err(FieldError::new(
            field,
            format!("longer than {MAX_LOCATION} bytes"),
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(FieldError::new(
            field,
            "a URL holds no spaces or control characters (percent-encode them)",
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(FieldError::new(field, format!("{url:?} names no host")));
    }
    if authority.contains('@') {
        return Err(FieldError::new(
            field,
            "credentials in a URL would be stored and shown in status; serve the list without them",
        ));
    }
    Ok(url.to_owned())
}

/// An absolute, normalised path (no `..`): where the node reads it is checked against
/// `blocking.fileSourceDir` when it is read, since that key is the node's own.
fn source_file(file: &str, field: &str) -> Result<PathBuf, FieldError> {
    if file.len() > MAX_LOCATION || file.contains('\0') {
        return Err(FieldError::new(
            field,
            format!("a path of at most {MAX_LOCATION} bytes without NUL"),
        ));
    }
    let path = PathBuf::from(file);
    if !path.is_absolute() {
        return Err(FieldError::new(
            field,
            format!("{file:?} is not an absolute path (inside blocking.fileSourceDir)"),
        ));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(FieldError::new(field, format!("{file:?} contains `..`")));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[test]
    fn a_full_block_list_converts_to_its_typed_spec() {
        let spec = block_list(&json!({
            "sources": [
                {"url": "https://lists.example/hosts.txt"},
                {"file": "/etc/kudurru/lists/local.txt"},
                {"inline": ["ads.example", "||tracker.example^"]}
            ],
            "format": "adblock",
            "mode": "allow",
            "refreshInterval": "6h",
            "maxBytes": 2048,
            "maxEntries": 10
        }))
        .unwrap();
        assert_eq!(
            spec.sources,
            [
                ListSource::Url("https://lists.example/hosts.txt".into()),
                ListSource::File("/etc/kudurru/lists/local.txt".into()),
                ListSource::Inline(vec!["ads.example".into(), "||tracker.example^".into()]),
            ]
        );
        assert_eq!(spec.format, Format::Adblock);
        assert_eq!(spec.mode, ListMode::Allow);
        assert_eq!(spec.refresh_interval, Some(Duration::from_secs(6 * 3600)));
        assert_eq!((spec.max_bytes, spec.max_entries), (Some(2048), Some(10)));
        let minimal = block_list(&json!({"sources": [{"inline": []}]})).unwrap();
        assert_eq!(
            (minimal.format, minimal.mode, minimal.refresh_interval),
            (Format::Auto, ListMode::Deny, None)
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let field = |spec: Value| block_list(&spec).unwrap_err().field;
        let inline = json!({"inline": ["a.example"]});
        for (spec, expected) in [
            (json!([]), "spec"),
            (json!({}), "spec.sources"),
            (json!({"sources": {}}), "spec.sources"),
            (json!({"sources": []}), "spec.sources"),
            (json!({"sources": [inline], "extra": 1}), "spec.extra"),
            (json!({"sources": [inline, 7]}), "spec.sources[1]"),
            (json!({"sources": [inline, {}]}), "spec.sources[1]"),
            (
                json!({"sources": [{"url": "https://a.example/x", "file": "/x"}]}),
                "spec.sources[0]",
            ),
            (json!({"sources": [{"uri": "x"}]}), "spec.sources[0].uri"),
            (
                json!({"sources": [inline, {"url": "ftp://a.example/x"}]}),
                "spec.sources[1].url",
            ),
            (
                json!({"sources": [{"url": "https:///x"}]}),
                "spec.sources[0].url",
            ),
            (
                json!({"sources": [{"url": "https://a.example/a b"}]}),
                "spec.sources[0].url",
            ),
            (
                json!({"sources": [{"url": "https://user:pw@a.example/x"}]}),
                "spec.sources[0].url",
            ),
            (json!({"sources": [{"url": 7}]}), "spec.sources[0].url"),
            (
                json!({"sources": [{"file": "lists/x"}]}),
                "spec.sources[0].file",
            ),
            (
                json!({"sources": [{"file": "/etc/kudurru/lists/../../shadow"}]}),
                "spec.sources[0].file",
            ),
            (
                json!({"sources": [{"inline": "a"}]}),
                "spec.sources[0].inline",
            ),
            (
                json!({"sources": [{"inline": ["a", 7]}]}),
                "spec.sources[0].inline[1]",
            ),
            (
                json!({"sources": [{"inline": ["a\nb"]}]}),
                "spec.sources[0].inline[0]",
            ),
            (json!({"sources": [inline], "format": "csv"}), "spec.format"),
            (json!({"sources": [inline], "format": 1}), "spec.format"),
            (json!({"sources": [inline], "mode": "block"}), "spec.mode"),
            (
                json!({"sources": [inline], "refreshInterval": "10s"}),
                "spec.refreshInterval",
            ),
            (
                json!({"sources": [inline], "refreshInterval": "often"}),
                "spec.refreshInterval",
            ),
            (json!({"sources": [inline], "maxBytes": 5}), "spec.maxBytes"),
            (
                json!({"sources": [inline], "maxBytes": "1M"}),
                "spec.maxBytes",
            ),
            (
                json!({"sources": [inline], "maxEntries": 0}),
                "spec.maxEntries",
            ),
            (
                json!({"sources": [inline], "maxEntries": -1}),
                "spec.maxEntries",
            ),
        ] {
            assert_eq!(field(spec.clone()), expected, "{spec}");
        }
    }
}
