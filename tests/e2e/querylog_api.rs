//! The query log through its API and CLI, on one server: queries over every transport (dig
//! for UDP and TCP, kdig for DoT and DoH over HTTP/2, curl for DoH over HTTP/1.1, dnspython
//! for DoQ and DoH3) appear with their transport, client, client ID, qname, qtype, rcode and
//! source (upstream, named, then cache); a blocked query with its policy, list and rule; every
//! filter narrows; cursor pages have no gaps or repeats; the NDJSON and CSV exports (read by
//! Python's csv module) match the JSON; the tail (curl and `kudurru querylog tail`) sees what
//! is sent after it started; stats count the queries and survive a purge; bad parameters are
//! 400 naming them; an operator cannot purge.

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, dig, kudurru_bin, query_bytes};
use serde_json::{Value, json};

/// Waits up to 20 s for `check`; panics with `what` if it never holds.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// (status, JSON body) of a GET or DELETE.
fn api(k: &Kudurru, method: &str, path: &str, token: &str) -> (u16, Value) {
    crate::objects::call(k, method, path, token, None)
}

/// (status, body text) of a GET with `accept`.
fn get_text(k: &Kudurru, path: &str, token: &str, accept: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg("-H")
        .arg(format!("Accept: {accept}"))
        .arg(format!("http://{}{path}", k.api))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("a status line");
    (status.parse().unwrap(), body.to_owned())
}

/// Every entry a search finds (all pages of the largest size).
fn search(k: &Kudurru, token: &str, query: &str) -> Vec<Value> {
    let (status, body) = api(
        k,
        "GET",
        &format!("/api/v1/querylog?limit=1000&{query}"),
        token,
    );
    assert_eq!(status, 200, "{query}: {body}");
    assert!(body["next"].is_null(), "one page holds them: {body}");
    body["entries"].as_array().unwrap().clone()
}

/// The query names of `entries`, in order.
fn names(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["qname"].as_str().unwrap().to_owned())
        .collect()
}

fn set(names: &[&String]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).clone()).collect()
}

/// A process whose stdout lines arrive on a channel (a tail), killed when dropped.
struct Lines {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Lines {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the tail runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The first line within `wait` that contains `needle`; lines before it are returned too.
    fn until(&self, needle: &str, wait: Duration) -> Option<Vec<String>> {
        let deadline = Instant::now() + wait;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return Some(seen);
                    }
                }
                Err(_) => return None,
            }
        }
        None
    }
}

impl Lines {
    /// Waits up to `limit` for the process to end by itself.
    fn exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        kudurru_e2e::wait_timeout(&mut self.child, limit)
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the test sent, by name.
struct Sent {
    udp: String,
    udp_from_2: String,
    aaaa: String,
    nx: String,
    tcp: String,
    dot: String,
    doh2: String,
    doh1: String,
    doh3: String,
    doq: String,
    blocked: String,
    blocked_rcode: String,
    suffix: String,
    sub: String,
}

fn kdig(addr: SocketAddr, ca: &Path, extra: &[&str], name: &str) -> String {
    let output = Command::new("kdig")
        .arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .args(["+time=3", "+retry=0", "+tls-hostname=localhost"])
        .arg(format!("+tls-ca={}", ca.display()))
        .args(extra)
        .args([name, "A"])
        .output()
        .expect("kdig runs");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        out.contains("status: NOERROR"),
        "kdig {extra:?} {name}: {out}"
    );
    out
}

/// Sends one query per transport (UDP twice: upstream, then cache), and the odd ones.
fn send_everything(k: &Kudurru, cert: &Path) -> Sent {
    let suffix = format!("ql-{}.kudurru-e2e.example.", std::process::id());
    let name = |label: &str| format!("{label}.{suffix}");
    let sent = Sent {
        udp: name("udp.sub"),
        udp_from_2: name("two"),
        aaaa: name("aaaa.sub"),
        nx: name("nx-gone"),
        tcp: name("tcp"),
        dot: name("dot"),
        doh2: name("doh2"),
        doh1: name("doh1"),
        doh3: name("doh3"),
        doq: name("doq"),
        blocked: name("ads"),
        blocked_rcode: String::new(),
        sub: format!("sub.{suffix}"),
        suffix,
    };
    assert_eq!(dig(k.addr, &[&sent.udp, "A"]).status, "NOERROR");
    assert_eq!(dig(k.addr, &[&sent.udp, "A"]).status, "NOERROR");
    assert_eq!(
        dig(k.addr, &["-b", "127.0.0.2", &sent.udp_from_2, "A"]).status,
        "NOERROR"
    );
    assert_eq!(dig(k.addr, &[&sent.aaaa, "AAAA"]).status, "NOERROR");
    assert_eq!(dig(k.addr, &[&sent.nx, "A"]).status, "NXDOMAIN");
    assert_eq!(dig(k.addr, &["+tcp", &sent.tcp, "A"]).status, "NOERROR");
    kdig(k.tls.unwrap(), cert, &["+tls"], &sent.dot);
    kdig(
        k.https.unwrap(),
        cert,
        &["+https=/dns-query/lab"],
        &sent.doh2,
    );
    let https = k.https.unwrap();
    let query = query_bytes(0, &sent.doh1, 1, 1, None);
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&query);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http1.1", "-o", "/dev/null"])
        .args(["-w", "%{http_code} %{http_version}"])
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", https.port()))
        .arg("--cacert")
        .arg(cert)
        .arg(format!(
            "https://localhost:{}/dns-query?dns={encoded}",
            https.port()
        ))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200 1.1");
    for (mode, addr, qname) in [
        ("dnspython-h3", k.h3.unwrap(), &sent.doh3),
        ("dnspython-doq", k.quic.unwrap(), &sent.doq),
    ] {
        let report = crate::quic::client(
            mode,
            addr,
            cert,
            json!({"requests": [{"name": qname.trim_end_matches('.')}]}),
        );
        assert_eq!(report["results"][0]["rcode"], "NOERROR", "{mode}: {report}");
    }
    let blocked = dig(k.addr, &[&sent.blocked, "A"]);
    Sent {
        blocked_rcode: blocked.status,
        ..sent
    }
}

#[test]
fn the_query_log_api_and_cli_end_to_end() {
    let d = Scratch::new("querylog-api");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .tls(&cert, &key)
        .start();
    // Reading the log is an operator's (`querylog.read`); purging an admin's.
    let (admin, reader, viewer) = (
        k.token("admin", None),
        k.token("operator", None),
        k.token("viewer", None),
    );
    let ads = format!("ads.ql-{}.kudurru-e2e.example", std::process::id());
    let probe = format!("probe-ql-{}.kudurru-e2e.example", std::process::id());
    crate::blocking::create(
        &k,
        &admin,
        "blocklists",
        "ads",
        json!({"sources": [{"inline": [ads, probe]}]}),
    );
    crate::blocking::create(
        &k,
        &admin,
        "policies",
        "everyone",
        json!({"clientGroups": ["default"], "denyLists": ["ads"]}),
    );
    eventually("the list to block", || {
        (dig(k.addr, &[&probe, "A"]).status == "NXDOMAIN").then_some(())
    });
    let started = api(&k, "GET", "/api/v1/querylog?limit=1", &reader);
    assert_eq!(started.0, 200, "{}", started.1);
    for path in ["/api/v1/querylog?limit=1", "/api/v1/stats"] {
        let (status, body) = api(&k, "GET", path, &viewer);
        assert_eq!(status, 403, "a viewer read {path}: {body}");
    }

    let sent = send_everything(&k, &cert);
    let mine = format!("suffix={}", sent.suffix);
    // 2 UDP asks + 127.0.0.2 + AAAA + NXDOMAIN + TCP + DoT + DoH h2 + h1 + DoH3 + DoQ + blocked.
    let expected = 12;
    let all = eventually("every query to be logged", || {
        let entries = search(&k, &reader, &mine);
        (entries.len() >= expected).then_some(entries)
    });
    assert_eq!(all.len(), expected, "{all:#?}");
    let by_name =
        |name: &str| -> Vec<&Value> { all.iter().filter(|e| e["qname"] == name).collect() };

    // Newest first, each with its fields.
    let times: Vec<u64> = all
        .iter()
        .map(|e| e["timeUnixNs"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    for (name, transport) in [
        (&sent.udp, "udp"),
        (&sent.tcp, "tcp"),
        (&sent.dot, "dot"),
        (&sent.doh2, "doh"),
        (&sent.doh1, "doh"),
        (&sent.doh3, "doh3"),
        (&sent.doq, "doq"),
    ] {
        let entry = by_name(name)[0];
        assert_eq!(entry["transport"], transport, "{entry}");
        assert_eq!(entry["client"], "127.0.0.1", "{entry}");
        assert_eq!(entry["qtype"], "A", "{entry}");
        assert_eq!(entry["rcode"], "NOERROR", "{entry}");
        assert_eq!(entry["group"], "default", "{entry}");
        let time = entry["time"].as_str().unwrap();
        assert!(
            time.ends_with('Z') && time.len() == 30,
            "RFC 3339 with ns: {time}"
        );
    }
    assert_eq!(by_name(&sent.doh2)[0]["clientId"], "lab");
    // The first UDP ask went upstream (named, with its latency), the second came from the cache.
    let udp = by_name(&sent.udp);
    assert_eq!(udp.len(), 2);
    let (second, first) = (udp[0], udp[1]);
    assert_eq!(first["source"], "upstream", "{first}");
    assert!(
        first["upstream"]
            .as_str()
            .unwrap()
            .contains(&upstream.addr.port().to_string()),
        "{first}"
    );
    assert!(
        first["upstreamLatencyMs"].as_f64().unwrap() >= 0.0,
        "{first}"
    );
    assert_eq!(first["answer"], "A 192.0.2.1", "{first}");
    assert_eq!(second["source"], "cache", "{second}");
    assert!(second["upstream"].is_null(), "{second}");
    assert_eq!(first["flags"]["recursionDesired"], true, "{first}");
    assert_eq!(by_name(&sent.udp_from_2)[0]["client"], "127.0.0.2");
    assert_eq!(by_name(&sent.aaaa)[0]["qtype"], "AAAA");
    assert_eq!(by_name(&sent.nx)[0]["rcode"], "NXDOMAIN");
    let blocked = by_name(&sent.blocked)[0];
    assert_eq!(blocked["flags"]["blocked"], true, "{blocked}");
    assert_eq!(blocked["source"], "policy", "{blocked}");
    assert_eq!(blocked["policy"], "everyone", "{blocked}");
    assert_eq!(blocked["list"], "ads", "{blocked}");
    assert_eq!(blocked["rule"], ads, "{blocked}");
    assert_eq!(blocked["rcode"], sent.blocked_rcode, "{blocked}");
    // dig sends EDNS: the block answer carries Extended DNS Error 15, Blocked (RFC 8914).
    assert_eq!(blocked["ede"], 15, "{blocked}");

    filters_narrow(&k, &reader, &sent, &all);
    pages_have_no_gaps_or_repeats(&k, &reader, &sent, &all);
    exports_match_the_json(&k, &reader, &sent, &all);
    csv_exports_formulas_as_text(&k, &reader);
    bad_parameters_are_named(&k, &reader);
    the_cli_searches(&k, &reader, &sent, &all);
    tails_see_what_comes_after(&k, &reader, &sent);
    stats_survive_a_purge(&k, &admin, &reader, &sent);
}

fn filters_narrow(k: &Kudurru, token: &str, sent: &Sent, all: &[Value]) {
    let mine = format!("suffix={}", sent.suffix);
    let only = |query: &str| -> BTreeSet<String> {
        names(&search(k, token, &format!("{mine}&{query}")))
            .into_iter()
            .collect()
    };
    let everything: BTreeSet<String> = names(all).into_iter().collect();
    let without = |drop: &[&String]| -> BTreeSet<String> {
        everything
            .iter()
            .filter(|n| !drop.contains(n))
            .cloned()
            .collect()
    };
    assert_eq!(
        only(&format!("qname={}", sent.tcp.to_uppercase())),
        set(&[&sent.tcp])
    );
    assert_eq!(
        names(&search(k, token, &format!("suffix={}", sent.sub)))
            .into_iter()
            .collect::<BTreeSet<_>>(),
        set(&[&sent.udp, &sent.aaaa])
    );
    assert_eq!(only("qtype=AAAA"), set(&[&sent.aaaa]));
    assert_eq!(only("qtype=28"), set(&[&sent.aaaa]));
    assert_eq!(only("rcode=NXDOMAIN"), set(&[&sent.nx, &sent.blocked]));
    assert_eq!(only("rcode=3"), set(&[&sent.nx, &sent.blocked]));
    // The block answer is NXDOMAIN (the policy's default blockResponse).
    assert_eq!(only("rcode=none"), BTreeSet::new());
    assert_eq!(only("blocked=true"), set(&[&sent.blocked]));
    assert_eq!(only("blocked=false"), without(&[&sent.blocked]));
    assert_eq!(only("policy=everyone"), set(&[&sent.blocked]));
    assert_eq!(only("group=default"), everything);
    assert_eq!(only("group=nobody"), BTreeSet::new());
    assert_eq!(only("transport=tcp"), set(&[&sent.tcp]));
    assert_eq!(only("transport=dot"), set(&[&sent.dot]));
    assert_eq!(only("transport=doh"), set(&[&sent.doh1, &sent.doh2]));
    assert_eq!(only("transport=doh3"), set(&[&sent.doh3]));
    assert_eq!(only("transport=doq"), set(&[&sent.doq]));
    assert_eq!(only("source=cache"), set(&[&sent.udp]));
    assert_eq!(only("source=policy"), set(&[&sent.blocked]));
    assert_eq!(only("client=127.0.0.2"), set(&[&sent.udp_from_2]));
    assert_eq!(only("clientId=lab"), set(&[&sent.doh2]));
    // `from` is inclusive and `to` exclusive, in either spelling.
    let middle = &all[all.len() / 2];
    let (ns, rfc) = (
        middle["timeUnixNs"].as_u64().unwrap(),
        middle["time"].as_str().unwrap().to_owned(),
    );
    let newer = search(k, token, &format!("{mine}&from={ns}"));
    let older = search(k, token, &format!("{mine}&to={}", rfc.replace('+', "%2B")));
    assert_eq!(newer.len() + older.len(), all.len());
    assert_eq!(newer.last().unwrap()["timeUnixNs"], ns);
    assert_eq!(
        search(k, token, &format!("{mine}&from={rfc}")).len(),
        newer.len()
    );
}

fn pages_have_no_gaps_or_repeats(k: &Kudurru, token: &str, sent: &Sent, all: &[Value]) {
    let mut seen: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/querylog?suffix={}&limit=5", sent.suffix);
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = api(k, "GET", &path, token);
        assert_eq!(status, 200, "{page}");
        let entries = page["entries"].as_array().unwrap();
        assert!(entries.len() <= 5);
        seen.extend(entries.iter().cloned());
        if seen.len() == 5 {
            // A query logged between pages is newer than the first page: no gap, no repeat.
            assert_eq!(
                dig(k.addr, &[&format!("late.{}", sent.suffix), "A"]).status,
                "NOERROR"
            );
        }
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, all, "the pages are the whole list, in order");
    let cursors: BTreeSet<&str> = seen.iter().map(|e| e["cursor"].as_str().unwrap()).collect();
    assert_eq!(cursors.len(), seen.len(), "no repeats");
}

fn exports_match_the_json(k: &Kudurru, token: &str, sent: &Sent, all: &[Value]) {
    // Bound to the entries before the late query of the paging test.
    let to = all[0]["timeUnixNs"].as_u64().unwrap() + 1;
    let path = format!("/api/v1/querylog?suffix={}&to={to}", sent.suffix);
    let (status, text) = get_text(k, &path, token, "application/x-ndjson");
    assert_eq!(status, 200, "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines, all, "the NDJSON export is the JSON search");
    let (status, text) = get_text(k, &path, token, "text/csv");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\r\n"), "RFC 4180 line ends");
    // Python's csv module reads it back: a header row, then one row per entry.
    let rows: Vec<Value> =
        serde_json::from_value(csv_json("list(csv.DictReader(sys.stdin))", &text)).unwrap();
    assert_eq!(rows.len(), all.len());
    for (row, entry) in rows.iter().zip(all) {
        for key in [
            "time",
            "qname",
            "qtype",
            "transport",
            "source",
            "client",
            "group",
        ] {
            assert_eq!(row[key], entry[key], "{key}: {row} vs {entry}");
        }
        assert_eq!(row["timeUnixNs"], entry["timeUnixNs"].to_string());
        assert_eq!(row["rcode"], entry["rcode"].as_str().unwrap_or(""));
        assert_eq!(row["blocked"], entry["flags"]["blocked"].to_string());
        assert_eq!(row["policy"], entry["policy"].as_str().unwrap_or(""));
    }
    // A limit caps an export, past the page cap of a search.
    let (_, text) = get_text(k, &format!("{path}&limit=3"), token, "application/x-ndjson");
    assert_eq!(text.lines().count(), 3);
}

/// `csv` read by Python's csv module: the JSON of `expression` (over `csv` and `sys.stdin`).
fn csv_json(expression: &str, csv: &str) -> Value {
    let script = format!("import csv, json, sys\nprint(json.dumps({expression}))");
    let mut python = Command::new(kudurru_e2e::python())
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    std::io::Write::write_all(&mut python.stdin.take().unwrap(), csv.as_bytes()).unwrap();
    let out = python.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).expect("csv parses")
}

/// A client chooses its qname: names a spreadsheet would run as formulas (`=`, `+`, `-` first)
/// come out of the CSV export as quoted text with a leading `'` (OWASP "CSV Injection").
fn csv_exports_formulas_as_text(k: &Kudurru, token: &str) {
    let suffix = format!("csv-{}.kudurru-e2e.example.", std::process::id());
    let hostile = ["=1+2", "+3-4", "-5+6"].map(|label| format!("{label}.{suffix}"));
    for name in &hostile {
        // `-q`: dig would read a name starting with `+` or `-` as an option.
        assert_eq!(dig(k.addr, &["-q", name, "A"]).status, "NOERROR", "{name}");
    }
    let path = format!("/api/v1/querylog?suffix={suffix}");
    eventually("the hostile names to be logged", || {
        (search(k, token, &format!("suffix={suffix}")).len() == hostile.len()).then_some(())
    });
    let (status, text) = get_text(k, &path, token, "text/csv");
    assert_eq!(status, 200, "{text}");
    for name in &hostile {
        assert!(text.contains(&format!(",\"'{name}\",A,")), "{name}: {text}");
    }
    // A CSV reader sees the quote as part of the text, so the cell is never a formula.
    let names: BTreeSet<String> = serde_json::from_value(csv_json(
        "[r['qname'] for r in csv.DictReader(sys.stdin)]",
        &text,
    ))
    .unwrap();
    let quoted: BTreeSet<String> = hostile.iter().map(|n| format!("'{n}")).collect();
    assert_eq!(names, quoted);
}

fn bad_parameters_are_named(k: &Kudurru, token: &str) {
    for (path, key) in [
        ("/api/v1/querylog?from=yesterday", "from"),
        ("/api/v1/querylog?qtype=BOGUS", "qtype"),
        ("/api/v1/querylog?rcode=FINE", "rcode"),
        ("/api/v1/querylog?transport=pigeon", "transport"),
        ("/api/v1/querylog?limit=1001", "limit"),
        ("/api/v1/querylog?cursor=zz", "cursor"),
        ("/api/v1/querylog?blocked=maybe", "blocked"),
        ("/api/v1/querylog?colour=blue", "colour"),
        (
            "/api/v1/querylog?suffix=a.example&suffix=b.example",
            "suffix",
        ),
        ("/api/v1/stats?step=30s", "step"),
        ("/api/v1/stats?top=5000", "top"),
    ] {
        let (status, body) = api(k, "GET", path, token);
        assert_eq!(
            (status, body["key"].as_str()),
            (400, Some(key)),
            "{path}: {body}"
        );
    }
}

/// `kudurru querylog …` and `kudurru stats` against `k`.
fn cli(k: &Kudurru, token: &str, args: &[&str]) -> Command {
    let mut command = Command::new(kudurru_bin());
    command
        .args(args)
        .arg("--api")
        .arg(format!("http://{}", k.api))
        .arg("--token")
        .arg(token)
        .env_remove("KUDURRU_SETTINGS_FILE");
    command
}

fn run(mut command: Command) -> String {
    let out = command.output().expect("kudurru runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn the_cli_searches(k: &Kudurru, token: &str, sent: &Sent, all: &[Value]) {
    let table = run(cli(
        k,
        token,
        &[
            "querylog",
            "search",
            "--suffix",
            &sent.suffix,
            "--transport",
            "doh",
        ],
    ));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two rows: {table}");
    assert!(lines[0].starts_with("TIME"), "{table}");
    assert!(
        table.contains(&sent.doh1) && table.contains(&sent.doh2),
        "{table}"
    );
    let blocked = run(cli(
        k,
        token,
        &[
            "querylog",
            "search",
            "--suffix",
            &sent.suffix,
            "--blocked",
            "true",
        ],
    ));
    assert!(
        blocked.contains(&format!(
            "blocked by everyone/ads (ads.ql-{}",
            std::process::id()
        )),
        "{blocked}"
    );
    let json = run(cli(
        k,
        token,
        &[
            "querylog",
            "search",
            "--suffix",
            &sent.suffix,
            "--json",
            "--limit",
            "4",
        ],
    ));
    let entries: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 4);
    assert!(all.len() > 4);
    let csv = run(cli(
        k,
        token,
        &[
            "querylog",
            "search",
            "--suffix",
            &sent.suffix,
            "--csv",
            "--all",
        ],
    ));
    assert!(csv.starts_with("time,timeUnixNs,client,"), "{csv}");
    let bad = cli(k, token, &["querylog", "search", "--qtype", "BOGUS"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("400") && err.contains("qtype"), "{err}");
}

fn tails_see_what_comes_after(k: &Kudurru, token: &str, sent: &Sent) {
    // curl on the API, filtered server-side to TCP.
    let mut curl = Command::new("curl");
    curl.args(["-sSN", "--max-time", "30"])
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!(
            "http://{}/api/v1/querylog?follow=true&transport=tcp&suffix={}",
            k.api, sent.suffix
        ));
    let api_tail = Lines::spawn(curl);
    let cli_tail = Lines::spawn(cli(
        k,
        token,
        &["querylog", "tail", "--suffix", &sent.suffix],
    ));
    // The tails subscribe when their requests arrive: ask until a tail shows the name.
    let mut n = 0;
    let udp_lines = eventually("the CLI tail to show a query sent after it started", || {
        n += 1;
        let name = format!("tail-{n}.{}", sent.suffix);
        assert_eq!(dig(k.addr, &[&name, "A"]).status, "NOERROR");
        cli_tail.until(&name, Duration::from_secs(1))
    });
    let line = udp_lines.last().unwrap();
    assert!(line.contains("udp") && line.contains("NOERROR"), "{line}");
    let tcp_name = format!("tail-tcp.{}", sent.suffix);
    let tcp_lines = eventually("the API tail to show a TCP query", || {
        assert_eq!(dig(k.addr, &["+tcp", &tcp_name, "A"]).status, "NOERROR");
        api_tail.until(&tcp_name, Duration::from_secs(1))
    });
    for line in &tcp_lines {
        let entry: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            entry["transport"], "tcp",
            "only TCP passes the filter: {line}"
        );
        assert!(entry.get("cursor").is_none(), "{line}");
    }
}

fn stats_survive_a_purge(k: &Kudurru, admin: &str, reader: &str, sent: &Sent) {
    // From an hour before the test: every query it sent, in a few hour buckets.
    let from = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        - 3_600_000_000_000;
    let stats = |token: &str| {
        let path = format!("/api/v1/stats?from={from}&step=1h&top=100");
        let (status, body) = api(k, "GET", &path, token);
        assert_eq!(status, 200, "{body}");
        body
    };
    let everything = eventually("the tails' queries to be logged", || {
        let (_, page) = api(k, "GET", "/api/v1/querylog?limit=1000", reader);
        let entries = page["entries"].as_array().unwrap().clone();
        let stats = stats(reader);
        (stats["totals"]["queries"].as_u64() == Some(entries.len() as u64))
            .then_some((entries, stats))
    });
    let (entries, before) = everything;
    let count = |f: &dyn Fn(&Value) -> bool| entries.iter().filter(|e| f(e)).count() as u64;
    let cached = count(&|e| e["source"] == "cache");
    let blocked = count(&|e| e["flags"]["blocked"] == true);
    assert!(blocked >= 2, "the probe and the test's blocked query");
    assert_eq!(before["totals"]["blocked"], blocked, "{before}");
    assert_eq!(before["totals"]["cacheHits"], cached, "{before}");
    assert!(
        before["topBlocked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == sent.blocked.as_str()),
        "{before}"
    );
    let series_sum: u64 = before["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["queries"].as_u64().unwrap())
        .sum();
    assert_eq!(series_sum, entries.len() as u64);
    // An operator cannot purge; an admin purges everything and keeps the rollups.
    let (status, body) = api(k, "DELETE", "/api/v1/querylog?before=0", reader);
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let purge = run(cli(k, admin, &["querylog", "purge", "--before", "0"]));
    assert_eq!(
        purge,
        format!("deleted {} entries (the rollups are kept)\n", entries.len())
    );
    purges_are_in_the_audit_log(k, admin, entries.len() as u64);
    let (_, page) = api(k, "GET", "/api/v1/querylog", reader);
    assert_eq!(page["entries"], json!([]), "{page}");
    let after = stats(reader);
    assert_eq!(after["totals"], before["totals"]);
    assert_eq!(after["topNames"], before["topNames"]);
    let text = run(cli(
        k,
        reader,
        &["stats", "--from", &from.to_string(), "--step", "1h"],
    ));
    assert!(
        text.contains(&format!("{} queries, {blocked} blocked", entries.len())),
        "{text}"
    );
}

/// Each purge is an audit record: who, the bound and the count (the CLI's purge of
/// everything, `deleted` entries, then one with a time bound over the API).
fn purges_are_in_the_audit_log(k: &Kudurru, admin: &str, deleted: u64) {
    let (status, body) = api(
        k,
        "DELETE",
        "/api/v1/querylog?before=2026-01-02T03:04:05Z",
        admin,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"deleted": 0, "audited": true}));
    let (status, audit) = api(k, "GET", "/api/v1/audit?kind=QueryLog", admin);
    assert_eq!(status, 200, "{audit}");
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 2, "{audit}");
    // A token's principal is `token:` and its id (the 8 characters after `kdr_`).
    let admin_id = format!("token:{}", &admin[4..12]);
    let purges: Vec<(&Value, &Value)> = records
        .iter()
        .map(|r| (&r["actor"], &r["patch"]["spec"]["purges"][0]))
        .collect();
    for (actor, purge) in &purges {
        assert_eq!(*actor, admin_id.as_str());
        assert_eq!(purge["node"], "local", "{purge}");
    }
    assert_eq!(purges[0].1["before"], "everything");
    assert_eq!(purges[0].1["beforeUnixNs"], 0);
    assert_eq!(purges[0].1["deleted"], deleted);
    assert_eq!(purges[1].1["before"], "2026-01-02T03:04:05.000000000Z");
    assert_eq!(purges[1].1["beforeUnixNs"], 1_767_323_045_000_000_000_u64);
    assert_eq!(purges[1].1["deleted"], 0);
}

#[test]
fn without_a_database_search_stats_and_purge_are_409_naming_the_sink_and_the_tail_follows() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .env("KUDURRU_QUERYLOG__SINK", "jsonl")
        .start();
    let admin = k.token("admin", None);
    for (method, path) in [
        ("GET", "/api/v1/querylog"),
        ("GET", "/api/v1/stats"),
        ("DELETE", "/api/v1/querylog?before=0"),
    ] {
        let (status, body) = api(&k, method, path, &admin);
        assert_eq!(
            (status, body["code"].as_str()),
            (409, Some("not_searchable")),
            "{path}: {body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("querylog.sink is jsonl"),
            "{body}"
        );
    }
    let (status, _) = get_text(&k, "/api/v1/querylog", &admin, "text/csv");
    assert_eq!(status, 409, "an export is refused before it starts");
    let search = cli(&k, &admin, &["querylog", "search"]).output().unwrap();
    let err = String::from_utf8_lossy(&search.stderr);
    assert!(!search.status.success() && err.contains("409"), "{err}");
    // The tail reads the writer's events, whatever the sink.
    let mut tail = Lines::spawn(cli(&k, &admin, &["querylog", "tail", "--json"]));
    let mut n = 0;
    let lines = eventually("the tail to follow a jsonl-sink server", || {
        n += 1;
        let name = format!("tail-{n}.ql-jsonl.kudurru-e2e.example.");
        assert_eq!(dig(k.addr, &[&name, "A"]).status, "NOERROR");
        tail.until(&name, Duration::from_secs(1))
    });
    let entry: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(entry["transport"], "udp", "{entry}");
    // A stopping server ends the stream (it does not wait for the tail), and the CLI exits 0.
    let mut k = k;
    assert!(k.terminate().success());
    let status = tail
        .exit(Duration::from_secs(10))
        .expect("the tail ends with the server");
    assert!(status.success(), "{status}");
}

/// A default build has no benchmark hook: `KUDURRU_BENCH_QUERYLOG` (which a binary built with
/// `--features bench-hooks` reads) is one of the ignored `KUDURRU_` variables, and the cores
/// get no query-log channel from it.
#[test]
fn kudurru_bench_querylog_has_no_effect_without_the_bench_hooks_feature() {
    let d = Scratch::new("bench-hooks");
    let log = d.join("kudurru.log");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_BENCH_QUERYLOG", "discard")
        .log_level(Some("info"))
        .stderr_to(&log)
        .start();
    assert_eq!(
        dig(k.addr, &[&kudurru_e2e::unique_name("bench-hook"), "A"]).status,
        "NOERROR"
    );
    // Both lines would be written before the listeners are up, and start() waited for them.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("ignoring KUDURRU_ variables") && text.contains("KUDURRU_BENCH_QUERYLOG"),
        "{text}"
    );
    assert!(!text.contains("benchmark's receiver"), "{text}");
}
