//! The query log's privacy, retention and durability with the real binary: ClientGroups with
//! `spec.queryLog` for clients 127.0.0.2 to .6 (dig -b), read back through
//! `GET /api/v1/querylog` and `GET /api/v1/stats`; a pseudonym changes after a privacy reload;
//! retention by age (global and per group) prunes; querylog.db is 0600; a kill -9 during a
//! flood leaves a database that opens and searches; a one-batch ring drops and counts.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, dig, query_bytes, try_dig};
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

fn call(k: &Kudurru, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
    let text = body.map(Value::to_string);
    crate::objects::call(
        k,
        method,
        path,
        token,
        text.as_deref().map(|t| ("application/json", t)),
    )
}

/// The entries a search for `qname` finds.
fn logged(k: &Kudurru, token: &str, qname: &str) -> Vec<Value> {
    let (status, body) = call(
        k,
        "GET",
        &format!("/api/v1/querylog?limit=1000&qname={qname}"),
        token,
        None,
    );
    assert_eq!(status, 200, "{body}");
    body["entries"].as_array().cloned().unwrap_or_default()
}

/// The one entry of `qname`, once the writer has committed it.
fn entry(k: &Kudurru, token: &str, qname: &str) -> Value {
    eventually(&format!("{qname} in the query log"), || {
        logged(k, token, qname).into_iter().next()
    })
}

/// A name unique to this test run.
fn name(label: &str) -> String {
    format!("{label}.qlp-{}.kudurru-e2e.example.", std::process::id())
}

/// Queries `qname` A from `source`.
fn ask(k: &Kudurru, source: &str, qname: &str) {
    assert_eq!(dig(k.addr, &["-b", source, qname, "A"]).status, "NOERROR");
}

fn patch_settings(k: &Kudurru, token: &str, patch: Value) {
    let (status, body) = call(k, "PATCH", "/api/v1/settings", token, Some(&patch));
    assert_eq!(status, 200, "{patch}: {body}");
}

fn client_group(k: &Kudurru, token: &str, name: &str, client: &str, query_log: Value) {
    crate::blocking::create(
        k,
        token,
        "clientgroups",
        name,
        json!({"clients": [client], "queryLog": query_log}),
    );
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .expect("the file exists")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn querylog_privacy_per_group_and_a_new_pseudonym_after_a_privacy_reload() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .start();
    let admin = k.token("admin", None);
    let groups = [
        ("ql-full", "127.0.0.2", "full"),
        ("ql-cut", "127.0.0.3", "truncate"),
        ("ql-pseudo", "127.0.0.4", "pseudonymize"),
        ("ql-none", "127.0.0.5", "none"),
        ("ql-omit", "127.0.0.6", "omit"),
    ];
    for (group, client, privacy) in groups {
        client_group(&k, &admin, group, client, json!({"privacy": privacy}));
    }
    // The writer takes the groups from the list manager's next build: probe until it has.
    let mut probes = 0;
    eventually("the groups' privacy in effect", || {
        probes += 1;
        let probe = name(&format!("probe{probes}"));
        ask(&k, "127.0.0.3", &probe);
        (entry(&k, &admin, &probe)["client"] == "127.0.0.0/24").then_some(())
    });

    for (group, client, _) in groups {
        ask(&k, client, &name(group));
    }
    let full = entry(&k, &admin, &name("ql-full"));
    assert_eq!(
        (full["client"].as_str(), full["group"].as_str()),
        (Some("127.0.0.2"), Some("ql-full"))
    );
    let cut = entry(&k, &admin, &name("ql-cut"));
    assert_eq!(
        (cut["client"].as_str(), cut["group"].as_str()),
        (Some("127.0.0.0/24"), Some("ql-cut"))
    );
    let pseudo = entry(&k, &admin, &name("ql-pseudo"));
    let pseudonym = pseudo["client"].as_str().unwrap().to_owned();
    assert!(
        pseudonym.starts_with("p-") && pseudonym.len() == 18 && !pseudonym.contains("127."),
        "{pseudo}"
    );
    let hidden = entry(&k, &admin, &name("ql-none"));
    assert!(
        hidden["client"].is_null() || hidden["client"] == "",
        "no client under none: {hidden}"
    );
    assert_eq!(hidden["group"], "ql-none");
    // Omitted: counted in the rollups, never listed. Everything else asked is listed, so the
    // rollups hold exactly one query more than the log.
    // The omitted query may reach the database in a later commit than the listed ones: wait
    // for the rollups to hold it, then compare.
    eventually("the omitted query in the rollups", || {
        (k.metric("kudurru_querylog_omitted_total").unwrap_or(0.0) >= 1.0).then_some(())
    });
    let (listed, stats) = eventually("rollups one query ahead of the log", || {
        let (status, all) = call(&k, "GET", "/api/v1/querylog?limit=1000", &admin, None);
        assert_eq!(status, 200);
        let listed = all["entries"].as_array().unwrap().len() as u64;
        let (status, stats) = call(&k, "GET", "/api/v1/stats", &admin, None);
        assert_eq!(status, 200, "{stats}");
        (stats["totals"]["queries"] == listed + 1).then_some((listed, stats))
    });
    assert!(listed >= 4, "{stats}");
    assert!(logged(&k, &admin, &name("ql-omit")).is_empty());

    // The same client keeps its pseudonym within a key period…
    ask(&k, "127.0.0.4", &name("again"));
    assert_eq!(
        entry(&k, &admin, &name("again"))["client"],
        pseudonym.as_str()
    );
    // …and gets a new one once any privacy setting changes (here the global one, which the
    // group does not even follow).
    let rotations = k
        .metric("kudurru_querylog_pseudonym_rotations_total")
        .unwrap_or(0.0);
    patch_settings(&k, &admin, json!({"querylog": {"privacy": "truncate"}}));
    ask(&k, "127.0.0.4", &name("after"));
    let after = entry(&k, &admin, &name("after"));
    let renamed = after["client"].as_str().unwrap();
    assert!(renamed.starts_with("p-") && renamed != pseudonym, "{after}");
    assert!(
        k.metric("kudurru_querylog_pseudonym_rotations_total")
            .unwrap_or(0.0)
            > rotations
    );
    // The built-in group default follows the global key.
    ask(&k, "127.0.0.9", &name("default"));
    let default = entry(&k, &admin, &name("default"));
    assert_eq!(
        (default["client"].as_str(), default["group"].as_str()),
        (Some("127.0.0.0/24"), Some("default"))
    );

    // The database is private, and the doctor says so.
    assert_eq!(mode(&k.data_dir.join("querylog.db")), 0o600);
    let (status, doctor) = call(&k, "GET", "/api/v1/doctor", &admin, None);
    assert_eq!(status, 200);
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "querylog")
        .cloned()
        .unwrap_or_default();
    assert_eq!(check["status"], "ok", "{doctor}");
}

#[test]
fn querylog_retention_prunes_by_age_per_group_and_globally() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .start();
    let admin = k.token("admin", None);
    client_group(
        &k,
        &admin,
        "ql-short",
        "127.0.0.7",
        json!({"retention": "1s"}),
    );
    let mut probes = 0;
    eventually("the group in effect", || {
        probes += 1;
        let probe = name(&format!("short-probe{probes}"));
        ask(&k, "127.0.0.7", &probe);
        (entry(&k, &admin, &probe)["group"] == "ql-short").then_some(())
    });
    let (short, long) = (name("short"), name("long"));
    ask(&k, "127.0.0.7", &short);
    ask(&k, "127.0.0.8", &long);
    entry(&k, &admin, &short);
    entry(&k, &admin, &long);
    // Older than the group's second; then a hot change runs the retention at once.
    thread::sleep(Duration::from_millis(2500));
    patch_settings(
        &k,
        &admin,
        json!({"querylog": {"maxBytes": 2_000_000_000u64}}),
    );
    eventually("the group's entries pruned", || {
        logged(&k, &admin, &short).is_empty().then_some(())
    });
    assert_eq!(
        logged(&k, &admin, &long).len(),
        1,
        "the default group keeps 7 days"
    );
    // The global retention, made short, prunes the rest; the rollups stay.
    patch_settings(&k, &admin, json!({"querylog": {"retention": "1s"}}));
    eventually("the default group's entries pruned", || {
        logged(&k, &admin, &long).is_empty().then_some(())
    });
    assert!(k.metric("kudurru_querylog_pruned_total").unwrap_or(0.0) >= 2.0);
    let (status, stats) = call(&k, "GET", "/api/v1/stats", &admin, None);
    assert_eq!(status, 200);
    assert!(
        stats["totals"]["queries"].as_u64().unwrap_or(0) >= 2,
        "{stats}"
    );
}

/// Sends `version.bind CH TXT` (answered locally, logged) as fast as one socket can until
/// `stop`.
fn flood(target: SocketAddr, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
        socket.set_nonblocking(true).expect("non-blocking");
        let query = query_bytes(7, "version.bind", 16, 3, None);
        let mut sent = 0u64;
        let mut buffer = [0u8; 512];
        // Bounded in time, and a pause every 256 datagrams: the other tests running beside it
        // on a 2-CPU machine keep some CPU (a spinning flood starved their servers in CI).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            if socket.send_to(&query, target).is_ok() {
                sent += 1;
            }
            while socket.recv(&mut buffer).is_ok() {}
            if sent.is_multiple_of(256) {
                thread::sleep(Duration::from_micros(200));
            }
        }
        sent
    })
}

#[test]
fn querylog_db_opens_and_searches_after_a_kill_9_during_heavy_logging() {
    let d = Scratch::new("querylog-kill");
    let upstream = TestUpstream::start();
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .data_dir(&d)
        .start();
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = flood(k.addr, stop.clone());
    eventually("entries committed under the flood", || {
        (k.metric("kudurru_querylog_committed_total").unwrap_or(0.0) >= 500.0).then_some(())
    });
    let status = k.kill();
    stop.store(true, Ordering::Relaxed);
    assert!(flooding.join().unwrap() > 0);
    assert!(!status.success());
    drop(k);

    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .data_dir(&d)
        .start();
    let admin = k.token("admin", None);
    let (status, page) = call(
        &k,
        "GET",
        "/api/v1/querylog?limit=50&qname=version.bind.",
        &admin,
        None,
    );
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(50), "{page}");
    let (status, stats) = call(&k, "GET", "/api/v1/stats", &admin, None);
    assert_eq!(status, 200);
    assert!(
        stats["totals"]["queries"].as_u64().unwrap_or(0) >= 500,
        "{stats}"
    );
    assert_eq!(mode(&d.join("querylog.db")), 0o600);
    // And it still takes new entries.
    ask(&k, "127.0.0.1", &name("after-kill"));
    entry(&k, &admin, &name("after-kill"));
}

#[test]
fn a_full_query_log_ring_drops_records_and_counts_them() {
    let upstream = TestUpstream::start();
    // One batch of room per core, and pseudonyms to keep the writer busy.
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .env("KUDURRU_QUERYLOG__BUFFERBATCHES", "1")
        .env("KUDURRU_QUERYLOG__PRIVACY", "pseudonymize")
        .start();
    let stop = Arc::new(AtomicBool::new(false));
    let floods: Vec<_> = (0..2).map(|_| flood(k.addr, stop.clone())).collect();
    eventually("records dropped on a full ring", || {
        (k.metric("kudurru_querylog_dropped_total").unwrap_or(0.0) > 0.0).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        f.join().unwrap();
    }
    // The cores never waited: the server still answers, and still logs. The flood came from
    // 127.0.0.1 as the dig does, so the rate limiter may drop the first asks until its bucket
    // refills: ask until answered.
    let after = eventually("an answer after the flood", || {
        try_dig(k.addr, &[&name("after-flood"), "A", "+time=1"]).ok()
    });
    assert_eq!(after.status, "NOERROR");
    assert!(
        k.metric("kudurru_querylog_written_total{sink=\"redb\"}")
            .unwrap_or(0.0)
            > 0.0
    );
}
