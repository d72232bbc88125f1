//! Arbitrary query-log requests (method, route, query string, `Accept` header) through the
//! API's parser, and arbitrary entries through its JSON and CSV writers: never panics; a
//! refusal is a 400 naming a parameter (or a 404 for a wrong method); a page's limit is 1 to
//! 1000; every CSV row reads back (RFC 4180) as one field per column with the entry's name and
//! answer unchanged (one a spreadsheet would run as a formula with the export's leading `'`),
//! and its JSON carries the same name.
#![no_main]

use kudurru_control::querylog::Entry;
use kudurru_control::querylog::api::{
    CSV_COLUMNS, Call, FORMULA_TRIGGERS, csv_row, entry_json, parse,
};
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 3] = ["GET", "DELETE", "POST"];
const ROUTES: [&str; 3] = ["/api/v1/querylog", "/api/v1/querylog/tail", "/api/v1/stats"];

/// The fields of one CSV row (RFC 4180: quoted fields may hold commas, quotes and line
/// breaks; quotes doubled), or `None` when it does not read as one row ending in CRLF.
fn read_row(row: &str) -> Option<Vec<String>> {
    let body = row.strip_suffix("\r\n")?;
    let mut fields = vec![String::new()];
    let mut chars = body.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        let field = fields.last_mut()?;
        match (quoted, c) {
            (false, '"') if at_start => quoted = true,
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (false, ',') => {
                fields.push(String::new());
                at_start = true;
                continue;
            }
            (false, '\r' | '\n' | '"') => return None,
            (_, c) => field.push(c),
        }
        at_start = false;
    }
    (!quoted).then_some(fields)
}

fuzz_target!(|data: &[u8]| {
    // Fields separated by 0x01, so seeds are readable text: method, route, query string,
    // Accept, qname, answer, then numbers (time, qtype, rcode or -, flags, transport, source).
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\u{1}');
    let mut next = || parts.next().unwrap_or("");
    let (method, route, query, accept) = (next(), next(), next(), next());
    let (qname, answer, numbers) = (next(), next(), next());
    let method = METHODS[method.len() % METHODS.len()];
    let path = ROUTES[route.len() % ROUTES.len()];
    let mut numbers = numbers.split(' ');
    let mut number = || numbers.next().and_then(|n| n.parse::<u64>().ok());
    let time_ns = number().unwrap_or(0);
    let qtype = number().unwrap_or(1) as u16;
    let rcode = number().map(|r| r as u16);
    let flags = number().unwrap_or(0) as u16;
    let transport = number().unwrap_or(0) as u8;
    let source = number().unwrap_or(0) as u8;
    match parse(
        method,
        path,
        query,
        Some(accept),
        "token:fuzz",
        1_796_000_000_000_000_000,
    ) {
        Ok(Call::Search { limit, .. }) => assert!((1..=1000).contains(&limit), "{limit}"),
        Ok(Call::Stats {
            from_ns,
            to_ns,
            step_ns,
            top,
        }) => {
            assert!(from_ns < to_ns && step_ns >= 60_000_000_000 && top <= 1000);
            assert!((to_ns - from_ns).div_ceil(step_ns) <= 10_000);
        }
        Ok(_) => {}
        Err(e) if e.status == 400 => assert!(e.key.is_some(), "{e}"),
        // The API's router answers 405 for these before the parser sees them.
        Err(e) => assert!(
            e.status == 404
                && !matches!((method, path), ("GET", _) | ("DELETE", "/api/v1/querylog")),
            "{e}"
        ),
    }
    let entry = Entry {
        time_ns,
        client: query.to_owned(),
        qname: qname.to_owned(),
        qtype,
        rcode,
        flags,
        answer: answer.to_owned(),
        transport,
        source,
        ..Entry::default()
    };
    let json = entry_json(None, &entry);
    assert_eq!(json["qname"].as_str(), Some(qname));
    let row = csv_row(&entry);
    let fields = read_row(&row).unwrap_or_else(|| panic!("not one RFC 4180 row: {row:?}"));
    assert_eq!(fields.len(), CSV_COLUMNS.len(), "{row:?}");
    let column = |name: &str| {
        CSV_COLUMNS
            .iter()
            .position(|c| *c == name)
            .expect("a column")
    };
    // A text cell a spreadsheet would run as a formula reads back with the guard's `'` first.
    let exported = |text: &str| {
        if text.starts_with(FORMULA_TRIGGERS) {
            format!("'{text}")
        } else {
            text.to_owned()
        }
    };
    assert_eq!(fields[column("qname")], exported(qname));
    assert_eq!(fields[column("answer")], exported(answer));
});
