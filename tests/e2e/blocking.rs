//! Blocking end to end: block lists served by a local HTTP server (200 with an ETag and 304,
//! 500, slow, oversized, garbage), file and inline sources, every format, client groups by
//! source address (dig `-b 127.0.0.2`) and by client ID (DoH path, DoT SNI), allow over deny,
//! schedules (`check?at=` and a live window around now), rewrites (addresses and a CNAME with
//! the target's records), disabled objects, refresh 202/404/409, a failed refresh that keeps
//! blocking, and a restart without network that keeps blocking.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, cert_pair, dig, unique_name};
use serde_json::{Value, json};

/// A list server on loopback: each path a scripted answer, requests counted per path and
/// status.
pub(crate) struct ListServer {
    addr: SocketAddr,
    /// `/toggle` answers 500 while set.
    pub(crate) failing: Arc<AtomicBool>,
    /// (path, status) → requests.
    hits: Arc<Mutex<HashMap<(String, u16), usize>>>,
    stop: Arc<AtomicBool>,
}

const HOSTS: &str = "# a hosts file\n0.0.0.0 hosts-blocked.example\n127.0.0.1 hosts-two.example ignored-alias.example\n::1 localhost\n";
const DOMAINS: &str = "# domains\ndomains-blocked.example\n";
const ADBLOCK: &str = "[Adblock Plus 2.0]\n! comment\n||adblock-blocked.example^\n@@||allowed.adblock-blocked.example^\n##.cosmetic-rule\n";
const WILDCARD: &str = "*.wildcard-blocked.example\n";
const RPZ: &str = "$TTL 60\n@ SOA localhost. root.localhost. 1 3600 600 86400 60\n@ NS localhost.\nrpz-nx.example CNAME .\nrpz-nodata.example CNAME *.\n*.rpz-below.example CNAME .\n";
const TOGGLE: &str = "toggle-blocked.example\n";

impl ListServer {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let failing = Arc::new(AtomicBool::new(false));
        let hits: Arc<Mutex<HashMap<(String, u16), usize>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, h, s) = (failing.clone(), hits.clone(), stop.clone());
        thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (f, h) = (f.clone(), h.clone());
                        thread::spawn(move || serve_one(stream, &f, &h));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Self {
            addr,
            failing,
            hits,
            stop,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn hits(&self, path: &str, status: u16) -> usize {
        self.hits
            .lock()
            .unwrap()
            .get(&(path.to_owned(), status))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for ListServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve_one(stream: TcpStream, failing: &AtomicBool, hits: &Mutex<HashMap<(String, u16), usize>>) {
    stream.set_nonblocking(false).ok();
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut if_none_match = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("if-none-match")
        {
            if_none_match = Some(value.trim().to_owned());
        }
    }
    let body_of = |text: &str| text.as_bytes().to_vec();
    let (status, etag, body): (u16, Option<&str>, Vec<u8>) = match path.as_str() {
        "/hosts" if if_none_match.as_deref() == Some("\"h1\"") => (304, Some("\"h1\""), Vec::new()),
        "/hosts" => (200, Some("\"h1\""), body_of(HOSTS)),
        "/domains" => (200, None, body_of(DOMAINS)),
        "/adblock" => (200, None, body_of(ADBLOCK)),
        "/wildcard" => (200, None, body_of(WILDCARD)),
        "/rpz" => (200, None, body_of(RPZ)),
        "/toggle" if failing.load(Ordering::Relaxed) => (500, None, body_of("broken\n")),
        "/toggle" => (200, None, body_of(TOGGLE)),
        "/fail" => (500, None, body_of("broken\n")),
        "/slow" => {
            thread::sleep(Duration::from_secs(6));
            (200, None, body_of("slow-blocked.example\n"))
        }
        "/big" => (
            200,
            None,
            "big-blocked.example\n".repeat(10_000).into_bytes(),
        ),
        "/garbage" => (200, None, (0..=255u8).cycle().take(4096).collect()),
        _ => (404, None, body_of("no such list\n")),
    };
    *hits.lock().unwrap().entry((path, status)).or_default() += 1;
    let mut stream = reader.into_inner();
    let reason = match status {
        200 => "OK",
        304 => "Not Modified",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(etag) = etag {
        head.push_str(&format!("ETag: {etag}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

/// (status, JSON body) of one API request through curl (`objects::call` with a JSON body).
pub(crate) fn call(
    k: &Kudurru,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let text = body.map(Value::to_string);
    crate::objects::call(
        k,
        method,
        path,
        token,
        text.as_deref().map(|t| ("application/json", t)),
    )
}

pub(crate) fn create(k: &Kudurru, token: &str, plural: &str, name: &str, spec: Value) {
    let (status, body) = call(
        k,
        "POST",
        &format!("/api/v1/{plural}"),
        token,
        Some(&json!({"metadata": {"name": name}, "spec": spec})),
    );
    assert_eq!(status, 201, "{plural}/{name}: {body}");
}

fn set_enabled(k: &Kudurru, token: &str, plural: &str, name: &str, enabled: bool) {
    // A merge patch: null removes the annotation.
    let value = if enabled { Value::Null } else { "false".into() };
    let patch = json!({"metadata": {"annotations": {"kudurru.io/enabled": value}}});
    let path = format!("/api/v1/{plural}/{name}");
    let output = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-X",
            "PATCH",
            "-w",
            "\n%{http_code}",
        ])
        .arg(format!("http://{}{path}", k.api))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: application/merge-patch+json"])
        .args(["--data-binary", &patch.to_string()])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.ends_with("200"), "PATCH {path}: {text}");
}

/// Waits up to 20 s for `check`; panics with `what` if it never holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The object's status.
pub(crate) fn status(k: &Kudurru, token: &str, plural: &str, name: &str) -> Value {
    call(k, "GET", &format!("/api/v1/{plural}/{name}"), token, None).1["status"].clone()
}

pub(crate) fn condition(status: &Value, type_: &str) -> (String, String) {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .unwrap_or_default()
}

pub(crate) fn loaded(k: &Kudurru, token: &str, list: &str) -> bool {
    condition(&status(k, token, "blocklists", list), "Ready").0 == "True"
}

/// dig from `source`: (rcode, answer rdata).
fn ask(k: &Kudurru, source: &str, name: &str, rtype: &str) -> (String, Vec<(String, String)>) {
    let answer = dig(k.addr, &["-b", source, name, rtype]);
    (
        answer.status,
        answer
            .answers
            .into_iter()
            .map(|(_, _, rtype, rdata)| (rtype, rdata))
            .collect(),
    )
}

pub(crate) fn rcode(k: &Kudurru, source: &str, name: &str) -> String {
    ask(k, source, name, "A").0
}

fn check(k: &Kudurru, token: &str, query: &str) -> Value {
    let (status, body) = call(
        k,
        "GET",
        &format!("/api/v1/blocking/check?{query}"),
        token,
        None,
    );
    assert_eq!(status, 200, "{query}: {body}");
    body
}

#[test]
fn every_format_blocks_for_its_group_and_allow_beats_deny() {
    let lists = ListServer::start();
    let upstream = TestUpstream::start();
    let dir = Scratch::new("blocking-formats");
    std::fs::write(dir.join("local.txt"), "file-blocked.example\n").unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .cores(2)
        .env("KUDURRU_BLOCKING__FILESOURCEDIR", dir.to_str().unwrap())
        .start();
    let admin = k.token("admin", None);
    for (name, path, format) in [
        ("hosts", "/hosts", "hosts"),
        ("domains", "/domains", "domains"),
        ("adblock", "/adblock", "adblock"),
        ("wildcard", "/wildcard", "wildcard"),
        ("rpz", "/rpz", "rpz"),
        ("auto", "/adblock", "auto"),
    ] {
        create(
            &k,
            &admin,
            "blocklists",
            name,
            json!({"sources": [{"url": lists.url(path)}], "format": format}),
        );
    }
    create(
        &k,
        &admin,
        "blocklists",
        "local",
        json!({"sources": [{"file": dir.join("local.txt")}, {"inline": ["inline-blocked.example"]}]}),
    );
    create(
        &k,
        &admin,
        "blocklists",
        "exceptions",
        json!({"sources": [{"inline": ["domains-blocked.example"]}], "mode": "allow"}),
    );
    create(
        &k,
        &admin,
        "clientgroups",
        "kids",
        json!({"clients": ["127.0.0.2/32"]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "kids",
        json!({"clientGroups": ["kids"],
               "denyLists": ["hosts", "domains", "adblock", "wildcard", "rpz", "local"],
               "allowLists": ["exceptions"]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "everyone",
        json!({"clientGroups": ["default"], "denyLists": ["domains"], "blockResponse": "null"}),
    );
    for list in [
        "hosts",
        "domains",
        "adblock",
        "wildcard",
        "rpz",
        "auto",
        "local",
        "exceptions",
    ] {
        eventually(&format!("{list} to load"), || loaded(&k, &admin, list));
    }
    assert_eq!(
        status(&k, &admin, "blocklists", "auto")["format"],
        "adblock"
    );
    assert_eq!(status(&k, &admin, "blocklists", "hosts")["entries"], 3);
    let adblock = status(&k, &admin, "blocklists", "adblock");
    assert_eq!(
        adblock["skippedLines"], 1,
        "the cosmetic rule is skipped: {adblock}"
    );

    let kid = "127.0.0.2";
    for (name, want) in [
        ("hosts-blocked.example", "NXDOMAIN"),
        ("sub.hosts-blocked.example", "NOERROR"), // hosts lines block the name only
        ("ignored-alias.example", "NXDOMAIN"),
        ("adblock-blocked.example", "NXDOMAIN"),
        ("deep.adblock-blocked.example", "NXDOMAIN"), // ||name^ covers the subtree
        ("allowed.adblock-blocked.example", "NOERROR"), // @@ beats ||
        ("x.wildcard-blocked.example", "NXDOMAIN"),
        ("rpz-nx.example", "NXDOMAIN"),
        ("rpz-nodata.example", "NOERROR"),
        ("a.rpz-below.example", "NXDOMAIN"),
        ("rpz-below.example", "NOERROR"), // *.name covers names below only
        ("file-blocked.example", "NXDOMAIN"),
        ("inline-blocked.example", "NXDOMAIN"),
        ("domains-blocked.example", "NOERROR"), // the allow list beats the deny list
        ("fine.example", "NOERROR"),
    ] {
        assert_eq!(rcode(&k, kid, name), want, "{name} from {kid}");
    }
    let (rcode_nodata, answers) = ask(&k, kid, "rpz-nodata.example", "A");
    assert_eq!((rcode_nodata.as_str(), answers.len()), ("NOERROR", 0));
    // 127.0.0.1 is in no group: the default policy answers 0.0.0.0 for its one list.
    assert_eq!(rcode(&k, "127.0.0.1", "hosts-blocked.example"), "NOERROR");
    let (_, answers) = ask(&k, "127.0.0.1", "domains-blocked.example", "A");
    assert_eq!(answers, [("A".to_owned(), "0.0.0.0".to_owned())]);
    let explained = check(
        &k,
        &admin,
        "name=deep.adblock-blocked.example&client=127.0.0.2",
    );
    assert_eq!(explained["verdict"], "blocked");
    assert_eq!(explained["groups"], json!(["kids"]));
    assert_eq!(explained["policy"], "kids");
    assert_eq!(explained["list"], "adblock");
    assert_eq!(explained["rule"], "||adblock-blocked.example^");
    let explained = check(&k, &admin, "name=domains-blocked.example&client=127.0.0.2");
    assert_eq!(
        (explained["verdict"].as_str(), explained["list"].as_str()),
        (Some("allowed"), Some("exceptions"))
    );
    assert!(
        k.metric("kudurru_blocked_total{policy=\"kids\",list=\"hosts\"}")
            .unwrap_or(0.0)
            >= 2.0,
        "blocked queries are counted per policy and list"
    );
    assert_eq!(
        k.metric("kudurru_blocklist_entries{list=\"domains\"}"),
        Some(1.0)
    );
    assert!(
        k.metric("kudurru_blocklist_last_refresh_seconds{list=\"hosts\"}")
            .unwrap()
            > 1.6e9
    );

    // The hosts list's second fetch is conditional: a 304, the list unchanged.
    let (status_code, _) = call(&k, "POST", "/api/v1/blocklists/hosts/refresh", &admin, None);
    assert_eq!(status_code, 202);
    eventually("a 304 for the hosts list", || {
        lists.hits("/hosts", 304) >= 1
    });
    assert_eq!(rcode(&k, kid, "hosts-blocked.example"), "NXDOMAIN");
    let hosts = status(&k, &admin, "blocklists", "hosts");
    assert_eq!(hosts["sources"][0]["etag"], "\"h1\"");
}

#[test]
fn client_ids_from_the_doh_path_and_the_dot_sni_pick_the_group() {
    let d = Scratch::new("blocking-client-ids");
    let (cert, key) = cert_pair(&d, "a");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .env("KUDURRU_BLOCKING__CLIENTIDDOMAINS", "dns.test")
        .start();
    let admin = k.token("admin", None);
    create(
        &k,
        &admin,
        "blocklists",
        "kids",
        json!({"sources": [{"inline": ["cartoons.example"]}]}),
    );
    create(
        &k,
        &admin,
        "clientgroups",
        "kids",
        json!({"clientIds": ["kids"]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "kids",
        json!({"clientGroups": ["kids"], "denyLists": ["kids"]}),
    );
    eventually("the list to load", || loaded(&k, &admin, "kids"));
    let kdig = |addr: SocketAddr, extra: &[&str]| -> String {
        let output = Command::new("kdig")
            .arg(format!("@{}", addr.ip()))
            .arg("-p")
            .arg(addr.port().to_string())
            .args([
                "+time=3",
                "+retry=0",
                &format!("+tls-ca={}", cert.display()),
            ])
            .args(extra)
            .args(["cartoons.example", "A"])
            .output()
            .expect("kdig runs");
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        out.split("; status: ")
            .nth(1)
            .and_then(|s| s.split(';').next())
            .unwrap_or("none")
            .to_owned()
    };
    let https = k.https.unwrap();
    let tls = k.tls.unwrap();
    assert_eq!(
        kdig(
            https,
            &["+https=/dns-query/kids", "+tls-hostname=localhost"]
        ),
        "NXDOMAIN"
    );
    assert_eq!(
        kdig(https, &["+https=/dns-query", "+tls-hostname=localhost"]),
        "NOERROR"
    );
    // SNI kids.dns.test: the certificate is for localhost, so verification is off here.
    let output = Command::new("kdig")
        .arg(format!("@{}", tls.ip()))
        .arg("-p")
        .arg(tls.port().to_string())
        .args([
            "+time=3",
            "+retry=0",
            "+tls",
            "+tls-sni=kids.dns.test",
            "cartoons.example",
            "A",
        ])
        .output()
        .expect("kdig runs");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    assert_eq!(kdig(tls, &["+tls", "+tls-hostname=localhost"]), "NOERROR");
    let explained = check(&k, &admin, "name=cartoons.example&clientId=kids");
    assert_eq!(explained["groups"], json!(["kids"]));
}

#[test]
fn a_failed_refresh_keeps_blocking_and_refresh_answers_202_404_409() {
    let lists = ListServer::start();
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let (admin, viewer) = (k.token("admin", None), k.token("viewer", None));
    create(
        &k,
        &admin,
        "blocklists",
        "toggle",
        json!({"sources": [{"url": lists.url("/toggle")}]}),
    );
    create(
        &k,
        &admin,
        "blocklists",
        "other",
        json!({"sources": [{"inline": ["other-blocked.example"]}]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "all",
        json!({"clientGroups": ["default"], "denyLists": ["toggle", "other"]}),
    );
    eventually("the list to load", || loaded(&k, &admin, "toggle"));
    assert_eq!(rcode(&k, "127.0.0.1", "toggle-blocked.example"), "NXDOMAIN");

    lists.failing.store(true, Ordering::Relaxed);
    let (code, body) = call(
        &k,
        "POST",
        "/api/v1/blocklists/toggle/refresh",
        &admin,
        None,
    );
    assert_eq!(code, 202, "{body}");
    eventually("the 500", || lists.hits("/toggle", 500) >= 1);
    eventually("Degraded=True", || {
        condition(&status(&k, &admin, "blocklists", "toggle"), "Degraded").0 == "True"
    });
    let (_, why) = condition(&status(&k, &admin, "blocklists", "toggle"), "Degraded");
    assert!(why.contains("500"), "{why}");
    assert_eq!(
        rcode(&k, "127.0.0.1", "toggle-blocked.example"),
        "NXDOMAIN",
        "the last good copy stays"
    );
    assert_eq!(
        k.metric("kudurru_blocklist_degraded{list=\"toggle\"}"),
        Some(1.0)
    );
    assert!(
        k.metric("kudurru_blocklist_refresh_errors_total{list=\"toggle\"}")
            .unwrap()
            >= 1.0
    );
    let (_, messages) = call(&k, "GET", "/api/v1/info/messages", &admin, None);
    assert!(
        messages.to_string().contains("blocklist_degraded"),
        "{messages}"
    );
    // A second refresh skips the failure cooldown.
    let before = lists.hits("/toggle", 500);
    assert_eq!(
        call(
            &k,
            "POST",
            "/api/v1/blocklists/toggle/refresh",
            &admin,
            None
        )
        .0,
        202
    );
    eventually("a fetch despite the cooldown", || {
        lists.hits("/toggle", 500) > before
    });

    let (code, body) = call(&k, "POST", "/api/v1/blocklists/nope/refresh", &admin, None);
    assert_eq!((code, body["code"].as_str()), (404, Some("not_found")));
    assert_eq!(
        call(
            &k,
            "POST",
            "/api/v1/blocklists/toggle/refresh",
            &viewer,
            None
        )
        .0,
        403
    );

    // Disabled: unloaded at once, refused with 409, named in the policy's status.
    set_enabled(&k, &admin, "blocklists", "other", false);
    eventually("the disabled list to be unloaded", || {
        rcode(&k, "127.0.0.1", "other-blocked.example") == "NOERROR"
    });
    let (code, body) = call(&k, "POST", "/api/v1/blocklists/other/refresh", &admin, None);
    assert_eq!((code, body["code"].as_str()), (409, Some("disabled")));
    eventually("the policy to name the disabled list", || {
        condition(&status(&k, &admin, "policies", "all"), "Ready")
            .1
            .contains("skips disabled BlockList other")
    });
    let (_, messages) = call(&k, "GET", "/api/v1/info/messages", &admin, None);
    assert!(
        messages.to_string().contains("reference_disabled"),
        "{messages}"
    );
    set_enabled(&k, &admin, "blocklists", "other", true);
    eventually("the enabled list to block again", || {
        rcode(&k, "127.0.0.1", "other-blocked.example") == "NXDOMAIN"
    });
    // A disabled policy blocks nothing.
    set_enabled(&k, &admin, "policies", "all", false);
    eventually("the disabled policy to stop blocking", || {
        rcode(&k, "127.0.0.1", "toggle-blocked.example") == "NOERROR"
    });
}

#[test]
fn slow_oversized_and_garbage_sources_degrade_and_never_harm_the_rest() {
    let lists = ListServer::start();
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_BLOCKING__FETCHTIMEOUT", "2s")
        .env("KUDURRU_BLOCKING__MAXLISTBYTES", "65536")
        .env("KUDURRU_BLOCKING__ALLOWDEGRADED", "true")
        .start();
    let admin = k.token("admin", None);
    for (name, path) in [
        ("slow", "/slow"),
        ("big", "/big"),
        ("garbage", "/garbage"),
        ("broken", "/fail"),
    ] {
        create(
            &k,
            &admin,
            "blocklists",
            name,
            json!({"sources": [{"url": lists.url(path)}, {"inline": [format!("{name}-inline.example")]}]}),
        );
    }
    create(
        &k,
        &admin,
        "policies",
        "all",
        json!({"clientGroups": ["default"], "denyLists": ["slow", "big", "garbage", "broken"]}),
    );
    for name in ["slow", "big", "broken"] {
        eventually(&format!("{name} degraded"), || {
            condition(&status(&k, &admin, "blocklists", name), "Degraded").0 == "True"
        });
        // The inline source still loads: the list is in effect with what it has.
        assert_eq!(
            rcode(&k, "127.0.0.1", &format!("{name}-inline.example")),
            "NXDOMAIN"
        );
    }
    eventually("the garbage list to load", || loaded(&k, &admin, "garbage"));
    let garbage = status(&k, &admin, "blocklists", "garbage");
    assert!(garbage["invalidLines"].as_u64().unwrap() > 0, "{garbage}");
    assert!(
        garbage["samples"].as_array().is_some_and(|s| !s.is_empty()),
        "{garbage}"
    );
    let (_, why) = condition(&status(&k, &admin, "blocklists", "big"), "Degraded");
    assert!(why.contains("65536") || why.contains("large"), "{why}");
    assert_eq!(rcode(&k, "127.0.0.1", "big-blocked.example"), "NOERROR");
    assert_eq!(
        k.ops_get("/healthz/ready").0,
        200,
        "allowDegraded keeps the node ready"
    );
}

/// The UTC wall-clock time `offset_minutes` from now, as a window writes it (HH:MM).
fn utc_clock(offset_minutes: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let at = now + offset_minutes * 60;
    let minutes = at.rem_euclid(86_400) / 60;
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

#[test]
fn schedules_apply_by_check_at_and_by_a_live_window_around_now() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let admin = k.token("admin", None);
    create(
        &k,
        &admin,
        "blocklists",
        "games",
        json!({"sources": [{"inline": ["games.example"]}]}),
    );
    create(
        &k,
        &admin,
        "blocklists",
        "later",
        json!({"sources": [{"inline": ["later.example"]}]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "school-hours",
        json!({"clientGroups": ["default"], "denyLists": ["games"],
               "schedule": {"timeZone": "Europe/Berlin",
                            "windows": [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "08:00", "to": "17:30"}]}}),
    );
    let every_day = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    // Every day, so a window that crosses midnight still holds now.
    let (from, to) = (utc_clock(-60), utc_clock(60));
    let (later_from, later_to) = (utc_clock(180), utc_clock(240));
    create(
        &k,
        &admin,
        "policies",
        "now",
        json!({"clientGroups": ["default"], "denyLists": ["games"],
               "schedule": {"timeZone": "UTC", "windows": [{"days": every_day, "from": from, "to": to}]}}),
    );
    create(
        &k,
        &admin,
        "policies",
        "not-now",
        json!({"clientGroups": ["default"], "denyLists": ["later"],
               "schedule": {"timeZone": "UTC", "windows": [{"days": every_day, "from": later_from, "to": later_to}]}}),
    );
    eventually("the lists to load", || {
        loaded(&k, &admin, "games") && loaded(&k, &admin, "later")
    });
    // Monday 2026-05-04 09:00 in Berlin (07:00Z) is inside; Sunday is not.
    let monday = check(&k, &admin, "name=games.example&at=2026-05-04T07:00:00Z");
    assert!(
        monday["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("school-hours")),
        "{monday}"
    );
    let sunday = check(&k, &admin, "name=games.example&at=2026-05-03T07:00:00Z");
    assert!(
        !sunday["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("school-hours")),
        "{sunday}"
    );
    let (code, body) = call(
        &k,
        "GET",
        "/api/v1/blocking/check?name=games.example&at=monday",
        &admin,
        None,
    );
    assert_eq!((code, body["key"].as_str()), (400, Some("at")));
    // Live: the window around now blocks, the one in three hours does not yet.
    eventually("the live window to block", || {
        rcode(&k, "127.0.0.1", "games.example") == "NXDOMAIN"
    });
    assert_eq!(rcode(&k, "127.0.0.1", "later.example"), "NOERROR");
    let (active, _) = condition(&status(&k, &admin, "policies", "not-now"), "Active");
    assert_eq!(active, "False");
}

#[test]
fn rewrites_answer_addresses_and_a_cname_with_the_targets_records() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let admin = k.token("admin", None);
    let target = unique_name("target-");
    let big = unique_name("big-");
    create(
        &k,
        &admin,
        "policies",
        "safe",
        json!({"clientGroups": ["default"], "blockTTL": "120s", "rewrites": [
            {"name": "printer.home.arpa", "addresses": ["192.0.2.77", "2001:db8::77"]},
            {"name": "search.example", "cname": target},
            {"name": "big.rewrite.example", "cname": big},
        ]}),
    );
    eventually("the rewrite", || {
        ask(&k, "127.0.0.1", "printer.home.arpa", "A").1
            == [("A".to_owned(), "192.0.2.77".to_owned())]
    });
    let (_, aaaa) = ask(&k, "127.0.0.1", "printer.home.arpa", "AAAA");
    assert_eq!(aaaa, [("AAAA".to_owned(), "2001:db8::77".to_owned())]);
    let answer = dig(k.addr, &["search.example", "A"]);
    assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
    assert_eq!(answer.answers[0].2, "CNAME", "{}", answer.raw);
    assert_eq!(answer.answers[0].1, 120);
    assert_eq!(answer.answers[0].3, target);
    assert!(
        answer
            .answers
            .iter()
            .any(|(owner, _, rtype, rdata)| owner == &target
                && rtype == "A"
                && rdata == "192.0.2.1"),
        "the target's records follow the CNAME: {}",
        answer.raw
    );
    assert_eq!(
        upstream.total(&target),
        1,
        "the target is resolved upstream"
    );
    let explained = check(&k, &admin, "name=search.example");
    assert_eq!(explained["verdict"], "rewritten");
    // A chased answer too large for a client without EDNS (512 bytes) is truncated on UDP, so
    // the client asks again over TCP, where it arrives whole.
    let udp = dig(
        k.addr,
        &["big.rewrite.example", "TXT", "+noedns", "+ignore"],
    );
    assert!(udp.raw.contains(" tc"), "{}", udp.raw);
    assert!(udp.answers.is_empty(), "{}", udp.raw);
    let tcp = dig(k.addr, &["big.rewrite.example", "TXT", "+tcp"]);
    assert_eq!(
        tcp.answers.len(),
        10,
        "the CNAME and nine TXT records: {}",
        tcp.raw
    );
}

#[test]
fn a_restart_without_network_keeps_blocking() {
    let data = Scratch::new("blocking-restart");
    let upstream = TestUpstream::start();
    let lists = ListServer::start();
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .data_dir(&data)
        .start();
    let admin = k.token("admin", None);
    create(
        &k,
        &admin,
        "blocklists",
        "hosts",
        json!({"sources": [{"url": lists.url("/hosts")}]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "all",
        json!({"clientGroups": ["default"], "denyLists": ["hosts"]}),
    );
    eventually("the list to load", || loaded(&k, &admin, "hosts"));
    assert_eq!(rcode(&k, "127.0.0.1", "hosts-blocked.example"), "NXDOMAIN");
    drop(lists);
    k.terminate();
    drop(k);

    // Same data directory; the list server is gone. Ready at once (the cached body loaded),
    // blocking, and Degraded says the refresh failed.
    let k = Kudurru::builder(&[upstream.udp_url()])
        .data_dir(&data)
        .start();
    let admin = k.token("admin", None);
    assert_eq!(rcode(&k, "127.0.0.1", "hosts-blocked.example"), "NXDOMAIN");
    eventually("Degraded after the failed refresh", || {
        condition(&status(&k, &admin, "blocklists", "hosts"), "Degraded").0 == "True"
    });
    assert_eq!(status(&k, &admin, "blocklists", "hosts")["entries"], 3);
}

#[test]
fn a_list_that_never_loaded_holds_readiness_back() {
    let upstream = TestUpstream::start();
    let data = Scratch::new("blocking-never-loaded");
    let k = Kudurru::builder(&[upstream.udp_url()])
        .data_dir(&data)
        .start();
    let admin = k.token("admin", None);
    create(
        &k,
        &admin,
        "blocklists",
        "unreachable",
        json!({"sources": [{"url": "http://127.0.0.1:9/list.txt"}]}),
    );
    eventually("readiness to drop", || k.ops_get("/healthz/ready").0 == 503);
    let (_, body) = k.ops_get("/healthz/ready");
    assert!(
        body.contains("unreachable") && body.contains("blocking.allowDegraded"),
        "{body}"
    );
    let (_, messages) = call(&k, "GET", "/api/v1/info/messages", &admin, None);
    assert!(
        messages.to_string().contains("blocklist_not_loaded"),
        "{messages}"
    );
}

/// CNAME cloaking: an answer whose CNAME chain reaches a blocked name is blocked for the
/// clients whose policies block it, from the same cached answer that other clients get whole.
#[test]
fn a_cname_to_a_blocked_tracker_is_blocked_for_the_group_from_the_shared_cache() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let admin = k.token("admin", None);
    create(
        &k,
        &admin,
        "blocklists",
        "trackers",
        json!({"sources": [{"inline": ["tracker.cloak.example"]}], "format": "domains"}),
    );
    create(
        &k,
        &admin,
        "clientgroups",
        "kids",
        json!({"clients": ["127.0.0.2/32"]}),
    );
    create(
        &k,
        &admin,
        "policies",
        "kids",
        json!({"clientGroups": ["kids"], "denyLists": ["trackers"]}),
    );
    eventually("trackers to load", || loaded(&k, &admin, "trackers"));
    eventually("the policy", || {
        rcode(&k, "127.0.0.2", "tracker.cloak.example") == "NXDOMAIN"
    });
    let name = unique_name("cloak-");
    // Another client gets the chain whole; it is cached.
    let (code, records) = ask(&k, "127.0.0.1", &name, "A");
    assert_eq!(code, "NOERROR");
    assert_eq!(
        records,
        [
            ("CNAME".to_owned(), "tracker.cloak.example.".to_owned()),
            ("A".to_owned(), "192.0.2.66".to_owned())
        ]
    );
    // The group's client asks the same name: a cache hit, blocked through its CNAME.
    let (code, records) = ask(&k, "127.0.0.2", &name, "A");
    assert_eq!((code.as_str(), records.len()), ("NXDOMAIN", 0));
    // A fresh name goes upstream for the group's client: blocked on the miss path too.
    let fresh = unique_name("cloak-");
    assert_eq!(rcode(&k, "127.0.0.2", &fresh), "NXDOMAIN");
    assert_eq!(
        upstream.total(&name),
        1,
        "one upstream query served both clients"
    );
    assert_eq!(upstream.total(&fresh), 1);
    assert!(
        k.metric("kudurru_blocked_total{policy=\"kids\",list=\"trackers\"}") >= Some(3.0),
        "the tracker itself and both cloaked answers are counted"
    );
}

/// RPZ local data larger than a client's UDP limit is truncated (TC=1) over UDP and answered
/// whole over TCP, as every other answer.
#[test]
fn rpz_local_data_past_the_udp_limit_is_truncated_and_whole_over_tcp() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let admin = k.token("admin", None);
    let mut lines = vec![
        "$TTL 60".to_owned(),
        "@ SOA localhost. root.localhost. 1 3600 600 86400 60".to_owned(),
        "@ NS localhost.".to_owned(),
    ];
    for i in 0..8 {
        lines.push(format!(
            "big.rpz.example TXT \"{}\"",
            format!("{i}").repeat(100)
        ));
    }
    create(
        &k,
        &admin,
        "blocklists",
        "local-data",
        json!({"sources": [{"inline": lines}], "format": "rpz"}),
    );
    create(
        &k,
        &admin,
        "policies",
        "everyone",
        json!({"clientGroups": ["default"], "denyLists": ["local-data"]}),
    );
    eventually("the local data", || {
        dig(k.addr, &["big.rpz.example", "TXT", "+tcp"])
            .answers
            .len()
            == 8
    });
    let udp = dig(k.addr, &["big.rpz.example", "TXT", "+noedns", "+ignore"]);
    assert!(udp.raw.contains(" tc"), "{}", udp.raw);
    assert!(udp.answers.is_empty(), "{}", udp.raw);
    // With a large enough EDNS buffer it fits in one datagram.
    let edns = dig(k.addr, &["big.rpz.example", "TXT", "+bufsize=1232"]);
    assert_eq!(edns.answers.len(), 8, "{}", edns.raw);
}
