//! `kudurru querylog search | tail | purge` and `kudurru stats`: the query log from the
//! command line, through the API. Search and tail stream: a line is printed as soon as its
//! entry arrives, so a search of everything needs no memory for the whole answer.

use std::io::Write;

use serde_json::Value;

use crate::cli::QuerylogFilters;
use crate::client::{ApiClient, ClientError, percent_encode};

/// Why a query-log command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The API could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The API refused the request.
    #[error("{url} answered {status}: {message}")]
    Refused {
        /// The API's URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The API's message (and the parameter it names).
        message: String,
    },
    /// Standard output closed or failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

fn refused(api: &ApiClient, answer: &crate::client::Answer) -> CommandError {
    let mut message = answer.body["message"].as_str().unwrap_or("").to_owned();
    if let Some(key) = answer.body["key"].as_str() {
        message.push_str(&format!(" (parameter {key})"));
    }
    CommandError::Refused {
        url: api.url().to_owned(),
        status: answer.status,
        message,
    }
}

/// The query string of `filters` (without `?`), each flag under its API name.
pub fn filter_query(filters: &QuerylogFilters) -> String {
    let blocked = filters.blocked.map(|b| b.to_string());
    let pairs = [
        ("from", filters.from.as_ref()),
        ("to", filters.to.as_ref()),
        ("client", filters.client_address.as_ref()),
        ("clientId", filters.client_id.as_ref()),
        ("qname", filters.qname.as_ref()),
        ("suffix", filters.suffix.as_ref()),
        ("qtype", filters.qtype.as_ref()),
        ("rcode", filters.rcode.as_ref()),
        ("blocked", blocked.as_ref()),
        ("policy", filters.policy.as_ref()),
        ("group", filters.group.as_ref()),
        ("transport", filters.transport.as_ref()),
        ("source", filters.source.as_ref()),
    ];
    pairs
        .into_iter()
        .filter_map(|(key, value)| Some(format!("{key}={}", percent_encode(value?))))
        .collect::<Vec<_>>()
        .join("&")
}

fn with(query: &str, extra: &str) -> String {
    match (query.is_empty(), extra.is_empty()) {
        (_, true) => query.to_owned(),
        (true, false) => extra.to_owned(),
        (false, false) => format!("{query}&{extra}"),
    }
}

/// The table's header line.
pub fn table_header() -> String {
    format!(
        "{:<24} {:<18} {:<5} {:<8} {:<6} {:<8} {:<32} {}\n",
        "TIME", "CLIENT", "VIA", "SOURCE", "QTYPE", "RCODE", "QNAME", "DETAIL"
    )
}

/// One entry (the API's JSON) as a table line: time to the millisecond, client, transport,
/// source, type, rcode, name, then what decided (policy/list/rule) or the upstream and its
/// latency, and the answer.
pub fn table_line(entry: &Value) -> String {
    let text = |key: &str| entry[key].as_str().unwrap_or("-").to_owned();
    // `2026-12-07T15:04:05.123456789Z` → `2026-12-07T15:04:05.123Z`.
    let time = entry["time"].as_str().map_or_else(String::new, |t| {
        t.find('.').map_or_else(
            || t.to_owned(),
            |dot| format!("{}Z", &t[..(dot + 4).min(t.len())]),
        )
    });
    let mut detail = Vec::new();
    if entry["flags"]["blocked"] == true {
        detail.push(format!(
            "blocked by {}/{} ({})",
            text("policy"),
            text("list"),
            text("rule")
        ));
    }
    if let Some(upstream) = entry["upstream"].as_str() {
        let ms = entry["upstreamLatencyMs"].as_f64().unwrap_or(0.0);
        detail.push(format!("{upstream} {ms:.1}ms"));
    }
    if let Some(answer) = entry["answer"].as_str().filter(|a| !a.is_empty()) {
        detail.push(answer.to_owned());
    }
    let client = match entry["clientId"].as_str() {
        Some(id) => format!("{} [{id}]", text("client")),
        None => text("client"),
    };
    format!(
        "{time:<24} {client:<18} {:<5} {:<8} {:<6} {:<8} {:<32} {}\n",
        text("transport"),
        text("source"),
        text("qtype"),
        entry["rcode"].as_str().unwrap_or("none"),
        text("qname"),
        detail.join("; ")
    )
}

/// Calls `on_line` with each complete line of a stream, as chunks arrive.
fn lines(mut on_line: impl FnMut(&str) -> bool) -> impl FnMut(&[u8]) -> bool {
    let mut pending: Vec<u8> = Vec::new();
    move |chunk| {
        pending.extend_from_slice(chunk);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end();
            if !line.is_empty() && !on_line(line) {
                return false;
            }
        }
        true
    }
}

/// How `search` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchOutput {
    /// The readable table.
    Table,
    /// NDJSON, one entry per line.
    Json,
    /// CSV with a header row.
    Csv,
}

/// `kudurru querylog search`: the matching entries, newest first, written to `out` as they
/// stream in; `limit` `None` is every entry.
pub fn search(
    api: &ApiClient,
    filters: &QuerylogFilters,
    limit: Option<usize>,
    output: SearchOutput,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let limit = limit.map(|n| format!("limit={n}")).unwrap_or_default();
    let path = format!("/api/v1/querylog?{}", with(&filter_query(filters), &limit));
    let accept = match output {
        SearchOutput::Csv => "text/csv",
        SearchOutput::Table | SearchOutput::Json => "application/x-ndjson",
    };
    let mut failed: Option<std::io::Error> = None;
    let mut keep = |result: std::io::Result<()>| match result {
        Ok(()) => true,
        Err(e) => {
            failed = Some(e);
            false
        }
    };
    let answer = match output {
        SearchOutput::Csv | SearchOutput::Json => {
            api.stream(&path, accept, &mut |chunk| keep(out.write_all(chunk)))?
        }
        SearchOutput::Table => {
            let mut header = Some(table_header());
            let mut on_line = lines(|line| {
                let Ok(entry) = serde_json::from_str::<Value>(line) else {
                    return keep(writeln!(out, "? {line}"));
                };
                if let Some(error) = entry.get("error") {
                    return keep(writeln!(out, "the search stopped: {error}"));
                }
                let head = header.take().unwrap_or_default();
                keep(write!(out, "{head}{}", table_line(&entry)))
            });
            api.stream(&path, accept, &mut on_line)?
        }
    };
    if let Some(e) = failed {
        return Err(e.into());
    }
    match answer {
        Some(answer) => Err(refused(api, &answer)),
        None => Ok(()),
    }
}

/// `kudurru querylog tail`: one line per entry as it is logged, until the server ends the
/// stream; a note on `err` when this tail fell behind and lost entries.
pub fn tail(
    api: &ApiClient,
    filters: &QuerylogFilters,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let path = format!("/api/v1/querylog/tail?{}", filter_query(filters));
    let mut failed: Option<std::io::Error> = None;
    let answer = {
        let mut on_line = lines(|line| {
            let result = match serde_json::from_str::<Value>(line) {
                Ok(notice) if notice.get("lost").is_some() => writeln!(
                    err,
                    "kudurru querylog tail: {} entries lost (this tail fell behind)",
                    notice["lost"]
                ),
                Ok(_) if json => writeln!(out, "{line}"),
                Ok(entry) => write!(out, "{}", table_line(&entry)),
                Err(_) => writeln!(out, "? {line}"),
            };
            // `tail -f | grep` wants each line at once.
            match result.and_then(|()| out.flush()) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        api.stream(&path, "application/x-ndjson", &mut on_line)?
    };
    if let Some(e) = failed {
        return Err(e.into());
    }
    match answer {
        Some(answer) => Err(refused(api, &answer)),
        None => Ok(()),
    }
}

/// `kudurru querylog purge --before`: the number deleted.
pub fn purge(api: &ApiClient, before: &str) -> Result<String, CommandError> {
    let answer = api.call(
        "DELETE",
        &format!("/api/v1/querylog?before={}", percent_encode(before)),
        None,
    )?;
    if answer.status != 200 {
        return Err(refused(api, &answer));
    }
    let mut text = format!(
        "deleted {} entries (the rollups are kept)\n",
        answer.body["deleted"]
    );
    if answer.body["audited"] == false {
        text.push_str(
            "the purge could not be written to the audit log (the server's log says why)\n",
        );
    }
    Ok(text)
}

/// `kudurru stats`: totals, the series and the top lists as text (or the API's JSON).
pub fn stats(
    api: &ApiClient,
    from: Option<&str>,
    to: Option<&str>,
    step: Option<&str>,
    top: Option<usize>,
    json: bool,
) -> Result<String, CommandError> {
    let top = top.map(|n| n.to_string());
    let query: Vec<String> = [
        ("from", from),
        ("to", to),
        ("step", step),
        ("top", top.as_deref()),
    ]
    .iter()
    .filter_map(|(key, value)| Some(format!("{key}={}", percent_encode((*value)?))))
    .collect();
    let answer = api.call("GET", &format!("/api/v1/stats?{}", query.join("&")), None)?;
    if answer.status != 200 {
        return Err(refused(api, &answer));
    }
    let body = &answer.body;
    if json {
        return Ok(format!("{body:#}\n"));
    }
    let int = |v: &Value| v.as_u64().unwrap_or(0);
    let mut out = format!(
        "{} to {}: {} queries, {} blocked, {} from the cache\n\n",
        body["from"].as_str().unwrap_or("?"),
        body["to"].as_str().unwrap_or("?"),
        int(&body["totals"]["queries"]),
        int(&body["totals"]["blocked"]),
        int(&body["totals"]["cacheHits"]),
    );
    out.push_str(&format!(
        "{:<20} {:>10} {:>10} {:>10}  {}\n",
        "START", "QUERIES", "BLOCKED", "CACHED", "RCODES"
    ));
    let series = body["series"].as_array().cloned().unwrap_or_default();
    let empty = series.iter().filter(|b| int(&b["queries"]) == 0).count();
    for bucket in series.iter().filter(|b| int(&b["queries"]) > 0) {
        let rcodes: Vec<String> = bucket["byRcode"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(rcode, n)| format!("{rcode}={n}"))
            .collect();
        let start = bucket["start"].as_str().unwrap_or("?");
        out.push_str(&format!(
            "{:<20} {:>10} {:>10} {:>10}  {}\n",
            start
                .get(..19)
                .map_or(start.to_owned(), |s| format!("{s}Z")),
            int(&bucket["queries"]),
            int(&bucket["blocked"]),
            int(&bucket["cacheHits"]),
            rcodes.join(" ")
        ));
    }
    if empty > 0 {
        out.push_str(&format!("({empty} steps without queries not shown)\n"));
    }
    for (title, key, field) in [
        ("top names", "topNames", "name"),
        ("top blocked", "topBlocked", "name"),
        ("top clients", "topClients", "client"),
    ] {
        out.push_str(&format!("\n{title}:\n"));
        for item in body[key].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "{:>10}  {}\n",
                int(&item["count"]),
                item[field].as_str().unwrap_or("?")
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_become_the_api_parameters_percent_encoded() {
        let filters = QuerylogFilters {
            client_address: Some("192.0.2.0/24".into()),
            suffix: Some("example.com".into()),
            blocked: Some(true),
            rcode: Some("none".into()),
            ..QuerylogFilters::default()
        };
        assert_eq!(
            filter_query(&filters),
            "client=192.0.2.0%2F24&suffix=example.com&rcode=none&blocked=true"
        );
        assert_eq!(filter_query(&QuerylogFilters::default()), "");
        assert_eq!(with("", "limit=5"), "limit=5");
        assert_eq!(with("a=1", "limit=5"), "a=1&limit=5");
    }

    #[test]
    fn lines_are_whole_across_chunks() {
        let mut seen = Vec::new();
        {
            let mut feed = lines(|l| {
                seen.push(l.to_owned());
                true
            });
            assert!(feed(b"{\"a\":1}\n{\"b\""));
            assert!(feed(b":2}\r\n\n"));
        }
        assert_eq!(seen, ["{\"a\":1}", "{\"b\":2}"]);
    }

    #[test]
    fn a_table_line_shows_the_decision_and_the_upstream() {
        let entry = serde_json::json!({
            "time": "2026-12-07T15:04:05.123456789Z", "client": "127.0.0.1", "clientId": null,
            "transport": "udp", "source": "policy", "qtype": "A", "rcode": "NXDOMAIN",
            "qname": "ads.example.", "flags": {"blocked": true}, "policy": "kids",
            "list": "ads", "rule": "ads.example", "upstream": null, "answer": "",
        });
        let line = table_line(&entry);
        assert!(
            line.starts_with("2026-12-07T15:04:05.123Z 127.0.0.1 "),
            "{line}"
        );
        assert!(
            line.contains("NXDOMAIN") && line.contains("blocked by kids/ads (ads.example)"),
            "{line}"
        );
    }
}
