//! The query log over HTTP: `GET /api/v1/querylog` (a page, or with `Accept:
//! application/x-ndjson` / `text/csv` an export of everything that matches), its live tail
//! (`?follow=true` or `/api/v1/querylog/tail`), `DELETE /api/v1/querylog?before=` and
//! `GET /api/v1/stats`.
//!
//! ```text
//! query string ─▶ parse (400 names the parameter) ─▶ Call
//! Call ─▶ search / stats / purge on the QueryLog (409 not_searchable without a database)
//!      ─▶ export: pages of EXPORT_PAGE, streamed as they come, until the end or the client leaves
//!      ─▶ tail: subscribe(), filtered here, one line per entry; `{"lost": n}` when it fell behind
//! ```
//! Parsing is sync and separate from answering, so the API's dispatcher (which runs on the
//! blocking pool) refuses bad requests itself and only the answer runs on the control thread.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use domain::base::iana::{OptRcode, Rtype};
use kudurru_core::querylog::{Source, Transport};
use kudurru_storage::querylog::entry_flags;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use super::{Cursor, Entry, Filter, Page, QueryLog, QueryLogError, Stats};
use crate::http::{HttpError, Response};
use crate::objects::routes::Query;

/// Entries per page when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// Most entries per page.
pub const MAX_LIMIT: usize = 1000;
/// Entries per page an export reads internally.
const EXPORT_PAGE: usize = 1000;
/// The default stats range (`from` absent): the last hour.
const DEFAULT_STATS_RANGE_NS: u64 = 3600 * NS_PER_SECOND;
/// The default and smallest stats step: the rollups' minute.
const MINUTE_NS: u64 = 60 * NS_PER_SECOND;
/// Most buckets one stats answer holds (a day in minutes is 1440; a year in hours 8784).
const MAX_BUCKETS: u64 = 10_000;
/// The default and the largest length of a stats top list.
const DEFAULT_TOP: usize = 10;
const MAX_TOP: usize = 1000;
/// Chunks a streamed answer buffers for its client before the producer waits (export) or
/// drops (tail).
const STREAM_CHUNKS: usize = 64;
const NS_PER_SECOND: u64 = 1_000_000_000;
/// The largest extended rcode (RFC 6891 §6.1.3: 12 bits).
const MAX_RCODE: u16 = 0x0FFF;

/// The columns of a CSV export, in order (the header row).
pub const CSV_COLUMNS: &[&str] = &[
    "time",
    "timeUnixNs",
    "client",
    "clientId",
    "group",
    "transport",
    "source",
    "qname",
    "qtype",
    "rcode",
    "dnssecOk",
    "truncated",
    "recursionDesired",
    "blocked",
    "cloaked",
    "clipped",
    "answer",
    "upstream",
    "upstreamLatencyMs",
    "policy",
    "list",
    "rule",
    "ede",
];

/// How an export is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line (`application/x-ndjson`).
    Ndjson,
    /// RFC 4180 CSV with a header row (`text/csv`).
    Csv,
}

/// A query-log request, checked and ready to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// One page, newest first.
    Search {
        /// What matches.
        filter: Filter,
        /// After this position.
        cursor: Option<Cursor>,
        /// At most this many.
        limit: usize,
    },
    /// Everything that matches, streamed.
    Export {
        /// What matches.
        filter: Filter,
        /// After this position.
        cursor: Option<Cursor>,
        /// At most this many in all (`None`: everything).
        limit: Option<usize>,
        /// NDJSON or CSV.
        format: Format,
    },
    /// Entries as they are logged, streamed as NDJSON.
    Tail {
        /// What matches.
        filter: Filter,
    },
    /// Delete facts older than `before_ns` (0: all).
    Purge {
        /// The bound, ns since the epoch.
        before_ns: u64,
        /// Who asked, as the API names them (`token:<id>`).
        principal: String,
    },
    /// The rollups.
    Stats {
        /// From, ns since the epoch.
        from_ns: u64,
        /// To, ns since the epoch.
        to_ns: u64,
        /// Bucket width, ns.
        step_ns: u64,
        /// Length of each top list.
        top: usize,
    },
}

/// Whether `path` is one of this module's routes.
pub fn is_route(path: &str) -> bool {
    matches!(
        path,
        "/api/v1/querylog" | "/api/v1/querylog/tail" | "/api/v1/stats"
    )
}

fn invalid(key: &str, message: impl Into<String>) -> HttpError {
    HttpError::new(400, "invalid_value", message).with_key(key)
}

/// Checks a request to one of this module's routes: `accept` is its `Accept` header,
/// `principal` who sent it, `now_ns` the time defaults are taken from.
pub fn parse(
    method: &str,
    path: &str,
    query: &str,
    accept: Option<&str>,
    principal: &str,
    now_ns: u64,
) -> Result<Call, HttpError> {
    let query = Query::parse(query)?;
    match (method, path) {
        ("GET", "/api/v1/stats") => {
            allow_only(&query, &["from", "to", "step", "top"])?;
            parse_stats(&query, now_ns)
        }
        ("DELETE", "/api/v1/querylog") => {
            allow_only(&query, &["before"])?;
            let before = query.get("before").ok_or_else(|| {
                invalid(
                    "before",
                    "before is required: an RFC 3339 time, unix ns, or 0 for everything",
                )
            })?;
            Ok(Call::Purge {
                before_ns: parse_time("before", before)?,
                principal: principal.to_owned(),
            })
        }
        ("GET", "/api/v1/querylog/tail") => {
            allow_only(&query, FILTERS)?;
            Ok(Call::Tail {
                filter: parse_filter(&query)?,
            })
        }
        ("GET", "/api/v1/querylog") => {
            let mut known = FILTERS.to_vec();
            known.extend(["limit", "cursor", "follow"]);
            allow_only(&query, &known)?;
            let filter = parse_filter(&query)?;
            let follow = boolean(&query, "follow")?.unwrap_or(false);
            if follow {
                for key in ["limit", "cursor"] {
                    if query.get(key).is_some() {
                        return Err(invalid(key, format!("{key} does not apply to follow=true")));
                    }
                }
                return Ok(Call::Tail { filter });
            }
            let cursor = query
                .get("cursor")
                .map(|c| {
                    parse_cursor(c).ok_or_else(|| {
                        invalid(
                            "cursor",
                            format!("{c:?} is not a cursor from this API (the `next` of a page)"),
                        )
                    })
                })
                .transpose()?;
            let limit = query
                .get("limit")
                .map(|l| match l.parse::<usize>() {
                    Ok(n) if n >= 1 => Ok(n),
                    _ => Err(invalid(
                        "limit",
                        format!("{l:?}: expected a whole number from 1"),
                    )),
                })
                .transpose()?;
            match export_format(accept) {
                Some(format) => Ok(Call::Export {
                    filter,
                    cursor,
                    limit,
                    format,
                }),
                None => match limit {
                    Some(n) if n > MAX_LIMIT => Err(invalid(
                        "limit",
                        format!(
                            "limit must be 1 to {MAX_LIMIT} (an export with Accept: application/x-ndjson or text/csv has no cap)"
                        ),
                    )),
                    limit => Ok(Call::Search {
                        filter,
                        cursor,
                        limit: limit.unwrap_or(DEFAULT_LIMIT),
                    }),
                },
            }
        }
        _ => Err(HttpError::new(
            404,
            "not_found",
            format!("no route {method} {path}"),
        )),
    }
}

/// The filter parameters every search, export and tail takes.
pub const FILTERS: &[&str] = &[
    "from",
    "to",
    "client",
    "clientId",
    "qname",
    "suffix",
    "qtype",
    "rcode",
    "blocked",
    "policy",
    "group",
    "transport",
    "source",
];

/// Refuses a parameter not in `known`, and one given twice (which value was meant?).
fn allow_only(query: &Query, known: &[&str]) -> Result<(), HttpError> {
    let mut seen = Vec::new();
    for key in query.keys() {
        if !known.contains(&key) {
            return Err(HttpError::new(
                400,
                "unknown_parameter",
                format!("no parameter {key:?}; expected one of {}", known.join(", ")),
            )
            .with_key(key));
        }
        if seen.contains(&key) {
            return Err(invalid(key, format!("{key} is given more than once")));
        }
        seen.push(key);
    }
    Ok(())
}

/// The export format an `Accept` header asks for; `None` for JSON (absent, `*/*`,
/// `application/json`, anything else).
pub fn export_format(accept: Option<&str>) -> Option<Format> {
    accept?
        .split(',')
        .filter_map(|item| item.split(';').next())
        .map(|media| media.trim().to_ascii_lowercase())
        .find_map(|media| match media.as_str() {
            "application/x-ndjson" => Some(Some(Format::Ndjson)),
            "text/csv" => Some(Some(Format::Csv)),
            "application/json" => Some(None),
            _ => None,
        })
        .flatten()
}

/// `text` as a time: RFC 3339 (`2026-12-07T15:04:05.123Z`, any offset), or unix ns (digits;
/// `0` is the epoch).
pub fn parse_time(key: &str, text: &str) -> Result<u64, HttpError> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u64>().map_err(|_| {
            invalid(
                key,
                format!("{text}: unix ns past the year 2554 are not times"),
            )
        });
    }
    let at: jiff::Timestamp = text.parse().map_err(|e| {
        invalid(
            key,
            format!("{text:?}: expected an RFC 3339 time or unix ns ({e})"),
        )
    })?;
    u64::try_from(at.as_nanosecond()).map_err(|_| {
        invalid(
            key,
            format!("{text:?} is before 1970 or past the year 2554"),
        )
    })
}

/// The system clock now, ns since the epoch (0 before it).
pub fn now_ns() -> u64 {
    u64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(0)
}

/// RFC 3339 with nanoseconds, UTC: `2026-12-07T15:04:05.123456789Z`.
pub fn format_time(ns: u64) -> String {
    match jiff::Timestamp::from_nanosecond(i128::from(ns)) {
        Ok(at) => format!("{at:.9}"),
        Err(_) => ns.to_string(),
    }
}

/// A cursor as the API writes it: 32 hex digits.
pub fn format_cursor(cursor: Cursor) -> String {
    format!("{:032x}", cursor.0)
}

/// A cursor the API wrote.
pub fn parse_cursor(text: &str) -> Option<Cursor> {
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if text.is_empty() || text.len() > 32 || !text.bytes().all(lower_hex) {
        return None;
    }
    u128::from_str_radix(text, 16).ok().map(Cursor)
}

/// A query name as stored: lowercase presentation form with the final dot.
fn parse_name(key: &str, text: &str) -> Result<String, HttpError> {
    let mut name = text.trim().to_ascii_lowercase();
    if name.is_empty() {
        return Err(invalid(
            key,
            format!("{key} is empty: expected a domain name"),
        ));
    }
    if !name.ends_with('.') {
        name.push('.');
    }
    // 255 octets on the wire; escapes (`\032`) make presentation form up to four times longer.
    let empty_label = name != "." && name.trim_end_matches('.').split('.').any(str::is_empty);
    if empty_label || name.len() > 1024 || name.chars().any(|c| c.is_control() || c == ' ') {
        return Err(invalid(key, format!("{text:?} is not a domain name")));
    }
    Ok(name)
}

/// A record type: a mnemonic (`AAAA`, any case, `TYPE65`) or a number.
pub fn parse_qtype(text: &str) -> Result<u16, HttpError> {
    if let Ok(number) = text.parse::<u16>() {
        return Ok(number);
    }
    text.to_ascii_uppercase()
        .parse::<Rtype>()
        .map(Rtype::to_int)
        .map_err(|_| {
            invalid(
                "qtype",
                format!("{text:?}: expected a record type (A, AAAA, TYPE65) or a number to 65535"),
            )
        })
}

/// A record type's mnemonic, `TYPE65280` when it has none.
pub fn qtype_text(qtype: u16) -> String {
    Rtype::from_int(qtype).to_string()
}

/// A response code: a mnemonic (`NXDOMAIN`, any case), a number to 4095, or `none` for
/// queries answered with nothing (dropped).
pub fn parse_rcode(text: &str) -> Result<Option<u16>, HttpError> {
    let upper = text.to_ascii_uppercase();
    if upper == "NONE" {
        return Ok(None);
    }
    if let Ok(number) = text.parse::<u16>()
        && number <= MAX_RCODE
    {
        return Ok(Some(number));
    }
    upper.parse::<OptRcode>().map(|r| Some(r.to_int())).map_err(|()| {
        invalid(
            "rcode",
            format!("{text:?}: expected an rcode (NOERROR, NXDOMAIN, SERVFAIL, …), a number to 4095, or none"),
        )
    })
}

/// A response code's mnemonic, its number when it has none.
pub fn rcode_text(rcode: u16) -> String {
    // Not `OptRcode::checked_from_int`: domain 0.12.3 inverts its check.
    if rcode <= MAX_RCODE {
        OptRcode::masked_from_int(rcode).to_string()
    } else {
        rcode.to_string()
    }
}

fn parse_label<T>(
    key: &str,
    text: &str,
    from_label: fn(&str) -> Option<T>,
    all: &[&str],
) -> Result<T, HttpError> {
    from_label(text)
        .ok_or_else(|| invalid(key, format!("{text:?}: expected one of {}", all.join(", "))))
}

fn non_empty(query: &Query, key: &str) -> Result<Option<String>, HttpError> {
    query
        .get(key)
        .map(|v| {
            if v.is_empty() || v.len() > 1024 {
                Err(invalid(key, format!("{key} must be 1 to 1024 characters")))
            } else {
                Ok(v.to_owned())
            }
        })
        .transpose()
}

/// The filter a query string names; each parameter narrows.
fn parse_filter(query: &Query) -> Result<Filter, HttpError> {
    let time = |key| query.get(key).map(|t| parse_time(key, t)).transpose();
    let transports: Vec<&str> = Transport::ALL.iter().map(|t| t.label()).collect();
    let sources: Vec<&str> = Source::ALL.iter().map(|s| s.label()).collect();
    let filter = Filter {
        from_ns: time("from")?,
        to_ns: time("to")?,
        // An address is matched as stored (its canonical text); a prefix or a pseudonym as given.
        client: non_empty(query, "client")?
            .map(|c| c.parse::<IpAddr>().map_or(c, |a| a.to_string())),
        client_id: non_empty(query, "clientId")?,
        qname: query
            .get("qname")
            .map(|n| parse_name("qname", n))
            .transpose()?,
        qname_suffix: query
            .get("suffix")
            .map(|n| parse_name("suffix", n))
            .transpose()?,
        qtype: query.get("qtype").map(parse_qtype).transpose()?,
        rcode: query.get("rcode").map(parse_rcode).transpose()?,
        blocked: boolean(query, "blocked")?,
        policy: non_empty(query, "policy")?,
        group: non_empty(query, "group")?,
        transport: query
            .get("transport")
            .map(|t| {
                parse_label("transport", t, Transport::from_label, &transports).map(|t| t as u8)
            })
            .transpose()?,
        source: query
            .get("source")
            .map(|s| parse_label("source", s, Source::from_label, &sources).map(|s| s as u8))
            .transpose()?,
    };
    if let (Some(from), Some(to)) = (filter.from_ns, filter.to_ns)
        && from > to
    {
        return Err(invalid("from", "from is after to"));
    }
    Ok(filter)
}

/// `key` as `true` or `false` (nothing else: the OpenAPI document says boolean).
fn boolean(query: &Query, key: &str) -> Result<Option<bool>, HttpError> {
    match query.get(key) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(invalid(key, format!("{other:?}: expected true or false"))),
    }
}

/// A step: whole minutes, hours or days (`1m`, `5m`, `1h`, `1d`).
fn parse_step(text: &str) -> Option<u64> {
    let unit = match text.as_bytes().last()? {
        b'm' => MINUTE_NS,
        b'h' => 60 * MINUTE_NS,
        b'd' => 24 * 60 * MINUTE_NS,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

fn parse_stats(query: &Query, now_ns: u64) -> Result<Call, HttpError> {
    let to_ns = query
        .get("to")
        .map(|t| parse_time("to", t))
        .transpose()?
        .unwrap_or(now_ns);
    let from_ns = query
        .get("from")
        .map(|t| parse_time("from", t))
        .transpose()?
        .unwrap_or(to_ns.saturating_sub(DEFAULT_STATS_RANGE_NS));
    if from_ns >= to_ns {
        return Err(invalid("from", "from must be before to"));
    }
    let step_ns = match query.get("step") {
        None => MINUTE_NS,
        Some(text) => parse_step(text).ok_or_else(|| {
            invalid(
                "step",
                format!("{text:?}: expected whole minutes, hours or days (1m, 5m, 1h, 1d)"),
            )
        })?,
    };
    if (to_ns - from_ns).div_ceil(step_ns) > MAX_BUCKETS {
        return Err(invalid(
            "step",
            format!(
                "the range holds more than {MAX_BUCKETS} steps: take a longer step or a shorter range"
            ),
        ));
    }
    let top = match query.get("top") {
        None => DEFAULT_TOP,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n <= MAX_TOP => n,
            _ => return Err(invalid("top", format!("{text:?}: expected 0 to {MAX_TOP}"))),
        },
    };
    Ok(Call::Stats {
        from_ns,
        to_ns,
        step_ns,
        top,
    })
}

/// Whether `entry` passes `filter` (the tail filters server-side as a search does).
pub fn matches(filter: &Filter, entry: &Entry) -> bool {
    let same = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    let below = |suffix: &str| {
        suffix == "."
            || entry.qname == suffix
            || entry
                .qname
                .strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.'))
    };
    !entry.omitted
        && filter.from_ns.is_none_or(|from| entry.time_ns >= from)
        && filter.to_ns.is_none_or(|to| entry.time_ns < to)
        && same(&filter.client, &entry.client)
        && same(&filter.client_id, &entry.client_id)
        && same(&filter.qname, &entry.qname)
        && filter.qname_suffix.as_deref().is_none_or(below)
        && filter.qtype.is_none_or(|t| t == entry.qtype)
        && filter.rcode.is_none_or(|r| r == entry.rcode)
        && filter
            .blocked
            .is_none_or(|b| b == (entry.flags & entry_flags::BLOCKED != 0))
        && same(&filter.policy, &entry.policy)
        && same(&filter.group, &entry.group)
        && filter.transport.is_none_or(|t| t == entry.transport)
        && filter.source.is_none_or(|s| s == entry.source)
}

fn label_of<T: Copy>(all: &[T], code: u8, label: fn(T) -> &'static str) -> Value {
    all.get(usize::from(code))
        .map_or_else(|| Value::from(code), |t| Value::from(label(*t)))
}

fn text_or_null(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        Value::from(text)
    }
}

/// One entry as the API shows it (search pages, exports and the tail alike); `cursor` is its
/// position, absent in the tail.
pub fn entry_json(cursor: Option<Cursor>, entry: &Entry) -> Value {
    let flag = |bit: u16| entry.flags & bit != 0;
    let mut value = json!({
        "time": format_time(entry.time_ns),
        "timeUnixNs": entry.time_ns,
        "client": text_or_null(&entry.client),
        "clientId": text_or_null(&entry.client_id),
        "group": entry.group,
        "transport": label_of(&Transport::ALL, entry.transport, Transport::label),
        "source": label_of(&Source::ALL, entry.source, Source::label),
        "qname": entry.qname,
        "qtype": qtype_text(entry.qtype),
        "rcode": entry.rcode.map(rcode_text),
        "flags": {
            "dnssecOk": flag(entry_flags::DNSSEC_OK),
            "truncated": flag(entry_flags::TRUNCATED),
            "recursionDesired": flag(entry_flags::RECURSION_DESIRED),
            "blocked": flag(entry_flags::BLOCKED),
            "cloaked": flag(entry_flags::CLOAKED),
            "clipped": flag(entry_flags::CLIPPED),
        },
        "answer": entry.answer,
        "upstream": text_or_null(&entry.upstream),
        "upstreamLatencyMs": if entry.upstream.is_empty() {
            Value::Null
        } else {
            json!(f64::from(entry.upstream_latency_us) / 1000.0)
        },
        "policy": text_or_null(&entry.policy),
        "list": text_or_null(&entry.list),
        "rule": text_or_null(&entry.rule),
        "ede": entry.ede,
    });
    if let Some(cursor) = cursor {
        value["cursor"] = format_cursor(cursor).into();
    }
    value
}

/// The characters that make a spreadsheet read a cell as a formula (OWASP "CSV Injection"):
/// `=`, `+`, `-`, `@`, tab and CR.
pub const FORMULA_TRIGGERS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// One CSV field, quoted as RFC 4180 §2 asks when it holds a comma, a quote, CR or LF.
///
/// A text cell that starts with a formula trigger is written as OWASP recommends: a single quote
/// in front and the whole cell quoted, so a spreadsheet shows it as text. A client chooses its
/// qname (and a DoH client its client ID), so without this an exported log could run a formula
/// of the client's choosing in the operator's spreadsheet.
fn csv_field(out: &mut String, text: &str) {
    let formula = text.starts_with(FORMULA_TRIGGERS);
    if formula || text.contains([',', '"', '\r', '\n']) {
        out.push('"');
        if formula {
            out.push('\'');
        }
        out.push_str(&text.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(text);
    }
}

/// The CSV header row (CRLF-terminated, RFC 4180 §2).
pub fn csv_header() -> String {
    let mut line = CSV_COLUMNS.join(",");
    line.push_str("\r\n");
    line
}

/// One entry as a CSV row of [`CSV_COLUMNS`] (CRLF-terminated).
pub fn csv_row(entry: &Entry) -> String {
    let json = entry_json(None, entry);
    let mut line = String::new();
    for (i, column) in CSV_COLUMNS.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        let value = json.get(*column).unwrap_or_else(|| &json["flags"][*column]);
        match value {
            Value::Null => {}
            Value::String(s) => csv_field(&mut line, s),
            other => csv_field(&mut line, &other.to_string()),
        }
    }
    line.push_str("\r\n");
    line
}

/// The stats answer.
pub fn stats_json(from_ns: u64, to_ns: u64, step_ns: u64, stats: &Stats) -> Value {
    let (mut queries, mut blocked, mut cache_hits) = (0u64, 0u64, 0u64);
    let series: Vec<Value> = stats
        .series
        .iter()
        .map(|b| {
            queries += b.queries;
            blocked += b.blocked;
            cache_hits += b.cache_hits;
            let by_rcode: serde_json::Map<String, Value> = b
                .by_rcode
                .iter()
                .map(|(rcode, n)| {
                    (
                        rcode.map_or_else(|| "none".to_owned(), rcode_text),
                        json!(n),
                    )
                })
                .collect();
            json!({
                "start": format_time(b.start_ns),
                "startUnixNs": b.start_ns,
                "queries": b.queries,
                "blocked": b.blocked,
                "cacheHits": b.cache_hits,
                "byRcode": by_rcode,
            })
        })
        .collect();
    let top = |list: &[(String, u64)], key: &str| -> Vec<Value> {
        list.iter()
            .map(|(name, count)| json!({ key: name, "count": count }))
            .collect()
    };
    json!({
        "from": format_time(from_ns),
        "to": format_time(to_ns),
        "stepSeconds": step_ns / NS_PER_SECOND,
        "totals": { "queries": queries, "blocked": blocked, "cacheHits": cache_hits },
        "series": series,
        "topNames": top(&stats.top_names, "name"),
        "topBlocked": top(&stats.top_blocked, "name"),
        "topClients": top(&stats.top_clients, "client"),
    })
}

/// The answer for a query-log error.
pub fn error(e: &QueryLogError) -> HttpError {
    match e {
        QueryLogError::NotSearchable { sink } => HttpError::new(
            409,
            "not_searchable",
            format!(
                "the query log keeps no database here (querylog.sink is {sink}): search, export, stats and purge need querylog.sink = redb"
            ),
        ),
        QueryLogError::Storage(kudurru_storage::StorageError::InvalidArgument {
            argument,
            reason,
        }) => invalid(argument, reason.clone()),
        QueryLogError::Stopped(why) => HttpError::new(
            503,
            "unavailable",
            format!("the query log could not answer (the server is stopping?): {why}"),
        ),
        QueryLogError::Storage(e) => {
            tracing::error!(error = %e, "the query-log database failed");
            HttpError::new(500, "storage_error", e.to_string())
        }
    }
}

fn json_response(status: u16, value: &Value) -> Response {
    crate::http::json(status, value)
}

fn stream_response(content_type: &'static str, chunks: mpsc::Receiver<Bytes>) -> Response {
    let mut response = http::Response::new(crate::http::channel_body(chunks));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

/// Answers `call` from `log`, a purge written to the audit log through `audit` (`None`: not
/// audited, for tests); streams end when the client leaves or `stopping` turns.
pub async fn respond(
    log: &QueryLog,
    call: Call,
    audit: Option<super::audit::PurgeAudit>,
    stopping: watch::Receiver<bool>,
) -> Response {
    match call {
        Call::Search {
            filter,
            cursor,
            limit,
        } => match log.search(filter, cursor, limit).await {
            Ok(page) => json_response(200, &page_json(&page)),
            Err(e) => error(&e).into_response(),
        },
        Call::Stats {
            from_ns,
            to_ns,
            step_ns,
            top,
        } => match log.stats(from_ns, to_ns, step_ns, top).await {
            Ok(stats) => json_response(200, &stats_json(from_ns, to_ns, step_ns, &stats)),
            Err(e) => error(&e).into_response(),
        },
        Call::Purge {
            before_ns,
            principal,
        } => match log.purge(before_ns).await {
            Ok(deleted) => {
                let purge = super::audit::Purge {
                    time: format_time(now_ns()),
                    before: if before_ns == 0 {
                        "everything".to_owned()
                    } else {
                        format_time(before_ns)
                    },
                    before_ns,
                    deleted,
                };
                tracing::info!(principal, before = %purge.before, deleted, "query log purged over the API");
                // The purge stands whether or not it could be audited; the answer says which.
                let audited = match audit {
                    Some(audit) => {
                        let recorded = tokio::task::spawn_blocking(move || {
                            audit.record(&principal, &purge).map_err(|e| e.to_string())
                        })
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|recorded| recorded);
                        if let Err(e) = &recorded {
                            tracing::error!(error = %e, "the query log was purged but the purge could not be written to the audit log");
                        }
                        recorded.is_ok()
                    }
                    None => false,
                };
                json_response(200, &json!({ "deleted": deleted, "audited": audited }))
            }
            Err(e) => error(&e).into_response(),
        },
        Call::Export {
            filter,
            cursor,
            limit,
            format,
        } => {
            // Ask for the first page before answering, so a log without a database is a 409,
            // not an empty 200.
            let first_size = limit.unwrap_or(EXPORT_PAGE).min(EXPORT_PAGE);
            let first = match log.search(filter.clone(), cursor, first_size).await {
                Ok(page) => page,
                Err(e) => return error(&e).into_response(),
            };
            let (tx, rx) = mpsc::channel(STREAM_CHUNKS);
            let log = log.clone();
            tokio::spawn(async move {
                let search = |cursor, size| log.search(filter.clone(), Some(cursor), size);
                export(first, search, limit, format, tx, stopping).await;
            });
            let content_type = match format {
                Format::Ndjson => "application/x-ndjson",
                Format::Csv => "text/csv; charset=utf-8; header=present",
            };
            stream_response(content_type, rx)
        }
        Call::Tail { filter } => {
            if log.sink() == "none" {
                return error(&QueryLogError::NotSearchable { sink: log.sink() }).into_response();
            }
            let (tx, rx) = mpsc::channel(STREAM_CHUNKS);
            let entries = log.subscribe();
            tokio::spawn(tail(entries, filter, tx, stopping));
            stream_response("application/x-ndjson", rx)
        }
    }
}

/// A search page's JSON: `entries`, newest first, and `next` when more follow.
pub fn page_json(page: &Page) -> Value {
    json!({
        "entries": page
            .entries
            .iter()
            .map(|(cursor, entry)| entry_json(Some(*cursor), entry))
            .collect::<Vec<_>>(),
        "next": page.next.map(format_cursor),
    })
}

/// Writes `first` and the pages after it to `tx` until the last page, `limit` entries, the
/// client leaving (the channel closed), `stopping` or an error (which ends the stream with a
/// last NDJSON `{"error": …}` line; a CSV stream just ends).
pub async fn export<S, F>(
    first: Page,
    mut search: S,
    limit: Option<usize>,
    format: Format,
    tx: mpsc::Sender<Bytes>,
    mut stopping: watch::Receiver<bool>,
) where
    S: FnMut(Cursor, usize) -> F,
    F: Future<Output = Result<Page, QueryLogError>>,
{
    if format == Format::Csv && tx.send(csv_header().into()).await.is_err() {
        return;
    }
    let mut left = limit.unwrap_or(usize::MAX);
    let mut page = first;
    loop {
        let mut chunk = String::new();
        for (cursor, entry) in page.entries.iter().take(left) {
            match format {
                Format::Ndjson => {
                    chunk.push_str(&entry_json(Some(*cursor), entry).to_string());
                    chunk.push('\n');
                }
                Format::Csv => chunk.push_str(&csv_row(entry)),
            }
        }
        left = left.saturating_sub(page.entries.len());
        if !chunk.is_empty() && tx.send(chunk.into()).await.is_err() {
            return;
        }
        let Some(next) = page.next.filter(|_| left > 0) else {
            return;
        };
        if *stopping.borrow() {
            return;
        }
        page = tokio::select! {
            result = search(next, left.min(EXPORT_PAGE)) => match result {
                Ok(page) => page,
                Err(e) => {
                    let e = error(&e);
                    if format == Format::Ndjson {
                        let line = json!({ "error": e.body() }).to_string() + "\n";
                        let _ = tx.send(line.into()).await;
                    }
                    return;
                }
            },
            _ = stopping.changed() => return,
            () = tx.closed() => return,
        };
    }
}

/// Streams the entries of `entries` that pass `filter` to `tx`, one NDJSON line each, until the
/// client leaves, the log's sender goes or `stopping` turns. An entry that does not fit the
/// client's buffer is dropped, never waited for: the next line that fits is `{"lost": n}` with
/// what was dropped since (here, or by the broadcast when this tail fell behind it).
pub async fn tail(
    mut entries: broadcast::Receiver<Arc<Entry>>,
    filter: Filter,
    tx: mpsc::Sender<Bytes>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut lost: u64 = 0;
    loop {
        let received = tokio::select! {
            received = entries.recv() => received,
            _ = stopping.changed() => return,
            () = tx.closed() => return,
        };
        let line = match received {
            Ok(entry) if matches(&filter, &entry) => entry_json(None, &entry).to_string() + "\n",
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                lost += n;
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if lost > 0 {
            let notice = json!({ "lost": lost }).to_string() + "\n";
            match tx.try_send(notice.into()) {
                Ok(()) => lost = 0,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    lost += 1;
                    continue;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
        match tx.try_send(line.into()) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => lost += 1,
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_000_000_000_000_000;

    fn call(
        method: &str,
        path: &str,
        query: &str,
        accept: Option<&str>,
    ) -> Result<Call, HttpError> {
        parse(method, path, query, accept, "token:test", NOW)
    }

    fn bad_key(path: &str, query: &str) -> String {
        let e = call("GET", path, query, None).unwrap_err();
        assert_eq!(e.status, 400, "{query}: {e}");
        e.key.unwrap_or_default()
    }

    fn entry(time_ns: u64, qname: &str) -> Entry {
        Entry {
            time_ns,
            client: "127.0.0.1".into(),
            group: "default".into(),
            qname: qname.into(),
            qtype: 1,
            rcode: Some(0),
            flags: entry_flags::RECURSION_DESIRED,
            ..Entry::default()
        }
    }

    #[test]
    fn every_bad_parameter_is_a_400_naming_it() {
        let q = "/api/v1/querylog";
        for (query, key) in [
            ("from=yesterday", "from"),
            ("to=2026-13-01T00:00:00Z", "to"),
            ("from=2026-12-07T00:00:00Z&to=2026-12-06T00:00:00Z", "from"),
            ("client=", "client"),
            ("clientId=", "clientId"),
            ("qname=a..example", "qname"),
            ("suffix=", "suffix"),
            ("qtype=NOPE", "qtype"),
            ("qtype=70000", "qtype"),
            ("rcode=FINE", "rcode"),
            ("rcode=5000", "rcode"),
            ("blocked=maybe", "blocked"),
            ("blocked=1", "blocked"),
            ("policy=", "policy"),
            ("group=", "group"),
            ("transport=carrier-pigeon", "transport"),
            ("source=memory", "source"),
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=ten", "limit"),
            ("cursor=xyz", "cursor"),
            ("cursor=ABC", "cursor"),
            ("follow=1", "follow"),
            ("follow=perhaps", "follow"),
            ("follow=true&limit=5", "limit"),
            ("colour=blue", "colour"),
            ("qtype=A&qtype=AAAA", "qtype"),
        ] {
            assert_eq!(bad_key(q, query), key, "{query}");
        }
        for (query, key) in [
            ("step=30s", "step"),
            ("step=60s", "step"),
            ("step=0m", "step"),
            ("step=1m&from=0&to=1000000000000000", "step"),
            ("top=-1", "top"),
            ("top=1001", "top"),
            ("from=2026-12-07T01:00:00Z&to=2026-12-07T00:00:00Z", "from"),
            ("qname=x", "qname"),
        ] {
            assert_eq!(bad_key("/api/v1/stats", query), key, "{query}");
        }
        let e = call("DELETE", q, "", None).unwrap_err();
        assert_eq!((e.status, e.key.as_deref()), (400, Some("before")));
        let e = call("DELETE", q, "before=soon", None).unwrap_err();
        assert_eq!((e.status, e.key.as_deref()), (400, Some("before")));
    }

    #[test]
    fn filters_take_mnemonics_numbers_and_names_in_any_case() {
        let Call::Search {
            filter,
            limit,
            cursor,
        } = call(
            "GET",
            "/api/v1/querylog",
            "qname=WWW.Example.COM&suffix=example.com.&qtype=aaaa&rcode=nxdomain&blocked=true\
             &transport=doh3&source=cache&client=::0001&from=2026-12-07T00:00:00%2B01:00",
            None,
        )
        .unwrap()
        else {
            panic!("a search")
        };
        assert_eq!((limit, cursor), (DEFAULT_LIMIT, None));
        assert_eq!(filter.qname.as_deref(), Some("www.example.com."));
        assert_eq!(filter.qname_suffix.as_deref(), Some("example.com."));
        assert_eq!(filter.qtype, Some(28));
        assert_eq!(filter.rcode, Some(Some(3)));
        assert_eq!(filter.blocked, Some(true));
        assert_eq!(filter.transport, Some(Transport::Doh3 as u8));
        assert_eq!(filter.source, Some(Source::Cache as u8));
        assert_eq!(filter.client.as_deref(), Some("::1"));
        assert_eq!(filter.from_ns, Some(1796598000000000000));
        assert_eq!(parse_qtype("65").unwrap(), 65);
        assert_eq!(parse_qtype("TYPE65").unwrap(), 65);
        assert_eq!(parse_rcode("none").unwrap(), None);
        assert_eq!(parse_rcode("2").unwrap(), Some(2));
        assert_eq!(parse_rcode("BADVERS").unwrap(), Some(16));
        assert_eq!(rcode_text(3), "NXDOMAIN");
        assert_eq!(qtype_text(65280), "TYPE65280");
    }

    #[test]
    fn accept_picks_the_export_and_follow_the_tail() {
        let q = "/api/v1/querylog";
        for (accept, format) in [
            (Some("application/x-ndjson"), Some(Format::Ndjson)),
            (Some("text/csv; charset=utf-8"), Some(Format::Csv)),
            (Some("application/json, text/csv"), None),
            (Some("*/*"), None),
            (None, None),
        ] {
            assert_eq!(export_format(accept), format, "{accept:?}");
        }
        // An export has no limit cap.
        assert!(matches!(
            call("GET", q, "limit=50000", Some("text/csv")),
            Ok(Call::Export {
                limit: Some(50000),
                format: Format::Csv,
                ..
            })
        ));
        assert!(matches!(
            call("GET", q, "follow=true&qtype=A", None),
            Ok(Call::Tail { filter }) if filter.qtype == Some(1)
        ));
        assert!(matches!(
            call("GET", "/api/v1/querylog/tail", "", None),
            Ok(Call::Tail { .. })
        ));
        assert_eq!(bad_key("/api/v1/querylog/tail", "limit=5"), "limit");
        assert!(matches!(
            call("DELETE", q, "before=0", None),
            Ok(Call::Purge { before_ns: 0, .. })
        ));
        assert!(matches!(
            call("DELETE", q, "before=1970-01-01T00:00:01Z", None),
            Ok(Call::Purge {
                before_ns: 1_000_000_000,
                ..
            })
        ));
    }

    #[test]
    fn stats_default_to_the_last_hour_by_the_minute_top_ten() {
        assert_eq!(
            call("GET", "/api/v1/stats", "", None).unwrap(),
            Call::Stats {
                from_ns: NOW - 3600 * NS_PER_SECOND,
                to_ns: NOW,
                step_ns: MINUTE_NS,
                top: 10
            }
        );
        assert!(matches!(
            call("GET", "/api/v1/stats", "step=1h&top=3", None),
            Ok(Call::Stats { step_ns, top: 3, .. }) if step_ns == 3600 * NS_PER_SECOND
        ));
    }

    #[test]
    fn times_are_rfc3339_with_nanoseconds_and_cursors_round_trip() {
        assert_eq!(
            format_time(1_500_000_000_123_456_789),
            "2017-07-14T02:40:00.123456789Z"
        );
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            parse_time("t", "2017-07-14T02:40:00.123456789Z").unwrap(),
            1_500_000_000_123_456_789
        );
        let cursor = Cursor(0xdead_beef_u128 << 64 | 7);
        assert_eq!(parse_cursor(&format_cursor(cursor)), Some(cursor));
        assert_eq!(parse_cursor(&"f".repeat(33)), None);
        assert_eq!(parse_cursor("+1"), None);
    }

    #[test]
    fn rfc4180_csv_quotes_commas_quotes_and_line_breaks() {
        let mut e = entry(0, "a.example.");
        e.answer = "TXT \"x,y\"\r\nz".into();
        e.rcode = None;
        let row = csv_row(&e);
        assert!(row.ends_with("\r\n"));
        assert!(row.contains(",\"TXT \"\"x,y\"\"\r\nz\","), "{row}");
        assert_eq!(
            csv_header().trim_end().split(',').count(),
            CSV_COLUMNS.len()
        );
        // rcode empty for a dropped query; the flags as true/false.
        assert!(
            row.contains(",a.example.,A,,false,false,true,false,false,false,"),
            "{row}"
        );
    }

    #[test]
    fn csv_cells_a_spreadsheet_would_run_as_formulas_are_quoted_text() {
        // OWASP "CSV Injection": =, +, -, @, tab and CR at the start of any text cell.
        for (hostile, cell) in [
            (
                "=cmd|' /c calc'!a0.example.",
                "\"'=cmd|' /c calc'!a0.example.\"",
            ),
            ("+1+1.example.", "\"'+1+1.example.\""),
            ("-2+3.example.", "\"'-2+3.example.\""),
            ("@sum(1,1).example.", "\"'@sum(1,1).example.\""),
            ("\tx.example.", "\"'\tx.example.\""),
            ("\rx.example.", "\"'\rx.example.\""),
            (
                "=hyperlink(\"http://x\").",
                "\"'=hyperlink(\"\"http://x\"\").\"",
            ),
        ] {
            let mut qname = entry(0, hostile);
            let row = csv_row(&qname);
            assert!(
                row.contains(&format!(",{cell},A,")),
                "qname {hostile:?}: {row}"
            );
            qname.qname = "a.example.".into();
            qname.client_id = hostile.into();
            let row = csv_row(&qname);
            assert!(
                row.contains(&format!(",{cell},default,")),
                "client ID {hostile:?}: {row}"
            );
        }
        // A trigger later in the cell is harmless, and a plain cell stays unquoted.
        let row = csv_row(&entry(0, "a-b=c.example."));
        assert!(row.contains(",a-b=c.example.,A,"), "{row}");
        // Numbers are not text: an ede code or a latency stays a number.
        let mut e = entry(0, "a.example.");
        e.ede = Some(15);
        assert!(csv_row(&e).trim_end().ends_with(",15"));
    }

    #[test]
    fn the_tail_filter_matches_as_the_search_does() {
        let e = entry(10, "www.example.com.");
        let only = |f: Filter| matches(&f, &e);
        assert!(only(Filter::default()));
        assert!(only(Filter {
            qname_suffix: Some("example.com.".into()),
            ..Filter::default()
        }));
        assert!(only(Filter {
            qname_suffix: Some("www.example.com.".into()),
            ..Filter::default()
        }));
        assert!(only(Filter {
            qname_suffix: Some(".".into()),
            ..Filter::default()
        }));
        assert!(!only(Filter {
            qname_suffix: Some("ample.com.".into()),
            ..Filter::default()
        }));
        assert!(!only(Filter {
            from_ns: Some(11),
            ..Filter::default()
        }));
        assert!(!only(Filter {
            to_ns: Some(10),
            ..Filter::default()
        }));
        assert!(!only(Filter {
            blocked: Some(true),
            ..Filter::default()
        }));
        assert!(!only(Filter {
            rcode: Some(None),
            ..Filter::default()
        }));
        assert!(only(Filter {
            rcode: Some(Some(0)),
            qtype: Some(1),
            ..Filter::default()
        }));
        assert!(!only(Filter {
            transport: Some(1),
            ..Filter::default()
        }));
        let mut omitted = e.clone();
        omitted.omitted = true;
        assert!(!matches(&Filter::default(), &omitted));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_tail_gets_a_lost_line_instead_of_blocking() {
        let (log, entries) = broadcast::channel(4);
        let (tx, mut rx) = mpsc::channel(2);
        let (_stop, stopping) = watch::channel(false);
        let filter = Filter {
            qname_suffix: Some("example.".into()),
            ..Filter::default()
        };
        let task = tokio::spawn(tail(entries, filter, tx, stopping));
        // Two fit the client's buffer, the third is dropped, one is filtered out.
        for name in ["a.example.", "b.example.", "c.example.", "other."] {
            log.send(Arc::new(entry(1, name))).unwrap();
            tokio::task::yield_now().await;
        }
        let line = |b: Bytes| serde_json::from_slice::<Value>(&b).unwrap();
        assert_eq!(line(rx.recv().await.unwrap())["qname"], "a.example.");
        assert_eq!(line(rx.recv().await.unwrap())["qname"], "b.example.");
        log.send(Arc::new(entry(2, "d.example."))).unwrap();
        assert_eq!(line(rx.recv().await.unwrap()), json!({"lost": 1}));
        assert_eq!(line(rx.recv().await.unwrap())["qname"], "d.example.");
        // The broadcast overflowing is counted too.
        for i in 0..10 {
            log.send(Arc::new(entry(i, "e.example."))).unwrap();
        }
        tokio::task::yield_now().await;
        let first = line(rx.recv().await.unwrap());
        assert!(first["lost"].as_u64().unwrap() >= 6, "{first}");
        drop(log);
        while rx.recv().await.is_some() {}
        task.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_export_pages_through_everything_and_stops_at_its_limit() {
        // 25 entries, newest first, pages of at most `size` after the cursor.
        let all: Vec<(Cursor, Entry)> = (0..25u64)
            .rev()
            .map(|i| (Cursor(u128::from(i)), entry(i, &format!("n{i}.example."))))
            .collect();
        let page_after = |cursor: Option<Cursor>, size: usize| {
            let start = cursor.map_or(0, |c| all.iter().position(|(p, _)| *p == c).unwrap() + 1);
            let entries: Vec<_> = all.iter().skip(start).take(size.min(10)).cloned().collect();
            let next = (start + entries.len() < all.len()).then(|| entries.last().unwrap().0);
            Page { entries, next }
        };
        for (limit, want) in [(None, 25), (Some(13), 13)] {
            let (tx, mut rx) = mpsc::channel(64);
            let (_stop, stopping) = watch::channel(false);
            let first = page_after(None, 10);
            export(
                first,
                |c, size| std::future::ready(Ok(page_after(Some(c), size))),
                limit,
                Format::Ndjson,
                tx,
                stopping,
            )
            .await;
            let mut names = Vec::new();
            while let Some(chunk) = rx.recv().await {
                for l in std::str::from_utf8(&chunk).unwrap().lines() {
                    names.push(
                        serde_json::from_str::<Value>(l).unwrap()["timeUnixNs"]
                            .as_u64()
                            .unwrap(),
                    );
                }
            }
            let expected: Vec<u64> = (0..25u64).rev().take(want).collect();
            assert_eq!(names, expected, "{limit:?}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_a_database_search_stats_and_purge_are_409_naming_the_sink() {
        let log = QueryLog::disabled();
        let (_stop, stopping) = watch::channel(false);
        for c in [
            call("GET", "/api/v1/querylog", "", None).unwrap(),
            call("GET", "/api/v1/querylog", "", Some("text/csv")).unwrap(),
            call("GET", "/api/v1/stats", "", None).unwrap(),
            call("DELETE", "/api/v1/querylog", "before=0", None).unwrap(),
            call("GET", "/api/v1/querylog/tail", "", None).unwrap(),
        ] {
            let response = respond(&log, c.clone(), None, stopping.clone()).await;
            assert_eq!(response.status(), 409, "{c:?}");
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["code"], "not_searchable");
            assert!(
                body["message"]
                    .as_str()
                    .unwrap()
                    .contains("querylog.sink is none"),
                "{body}"
            );
        }
    }
}
