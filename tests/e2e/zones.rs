//! Local zones end to end: a primary from a zone file in a scratch `zones.fileDir` (with an
//! `$INCLUDE`) and one from RecordSets, answered by dig (AA, NXDOMAIN vs NODATA, wildcard,
//! CNAME, referral, ANY) and by kdig over DoT and DoH; a RecordSet change answered without a
//! restart under a new serial; every class of bad zone file refused with its file and line
//! while the old answers stay; the zone metrics, `/internal/zones` and the records API.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{DigAnswer, Kudurru, Scratch, TestUpstream, cert_pair, dig};
use serde_json::{Value, json};

const ZONE_FILE: &str = "\
$ORIGIN corp.example.
$TTL 300
@       IN SOA ns1 hostmaster 2024010100 3600 600 604800 60
        IN NS  ns1
ns1     IN A   192.0.2.53
www     IN A   192.0.2.1
alias   IN CNAME www
*.wild  IN TXT \"wildcard\"
sub     IN NS  ns.sub
ns.sub  IN A   192.0.2.54
$INCLUDE hosts.inc
";

const INCLUDED: &str = "host1 IN A 192.0.2.11\n";

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

fn apply(k: &Kudurru, token: &str, plural: &str, name: &str, spec: Value) {
    let (status, body) = call(k, "GET", &format!("/api/v1/{plural}/{name}"), token, None);
    let (status, body) = if status == 404 {
        call(
            k,
            "POST",
            &format!("/api/v1/{plural}"),
            token,
            Some(&json!({"metadata": {"name": name}, "spec": spec})),
        )
    } else {
        let mut object = body;
        object["spec"] = spec;
        call(
            k,
            "PUT",
            &format!("/api/v1/{plural}/{name}"),
            token,
            Some(&object),
        )
    };
    assert!(
        status == 200 || status == 201,
        "{plural}/{name}: {status} {body}"
    );
}

/// Waits up to 20 s for `check`; panics with `what` if it never holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The Zone's Ready condition: (status, message).
fn ready(k: &Kudurru, token: &str, name: &str) -> (String, String) {
    let (_, object) = call(k, "GET", &format!("/api/v1/zones/{name}"), token, None);
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .unwrap_or_default()
}

fn rdata(answer: &DigAnswer, rtype: &str) -> Vec<String> {
    answer
        .answers
        .iter()
        .filter(|a| a.2 == rtype)
        .map(|a| a.3.clone())
        .collect()
}

fn serial(k: &Kudurru, zone: &str) -> Option<u32> {
    let answer = dig(k.addr, &[zone, "SOA"]);
    rdata(&answer, "SOA")
        .first()
        .and_then(|soa| soa.split_whitespace().nth(2)?.parse().ok())
}

fn kdig(addr: std::net::SocketAddr, ca: &Path, extra: &[&str]) -> String {
    let output = Command::new("kdig")
        .arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .arg(format!("+tls-ca={}", ca.display()))
        .args(["+tls-hostname=localhost", "+time=5", "+retry=0"])
        .args(extra)
        .output()
        .expect("kdig runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

struct Rig {
    _scratch: Scratch,
    dir: std::path::PathBuf,
    cert: std::path::PathBuf,
    k: Kudurru,
    token: String,
    _upstream: TestUpstream,
}

/// kudurru with `zones.fileDir` in a scratch directory holding the zone file, a TLS pair for
/// DoT and DoH, the Zone `corp` (from the file) and `rs` (from RecordSets) applied and served.
fn start(name: &str) -> Rig {
    let scratch = Scratch::new(&format!("zones-{name}"));
    let dir = scratch.join("zones");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("corp.zone"), ZONE_FILE).unwrap();
    std::fs::write(dir.join("hosts.inc"), INCLUDED).unwrap();
    std::fs::write(scratch.join("outside.zone"), "leak IN A 192.0.2.66\n").unwrap();
    let (cert, key) = cert_pair(&scratch, "zones");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_ZONES__FILEDIR", dir.to_str().unwrap())
        .tls(&cert, &key)
        .start();
    let token = k.token("admin", None);
    apply(
        &k,
        &token,
        "zones",
        "corp",
        json!({"zone": "corp.example.", "type": "primary", "file": "corp.zone"}),
    );
    apply(
        &k,
        &token,
        "zones",
        "rs",
        json!({"zone": "rs.example.", "type": "primary", "nameServers": ["ns1.rs.example."],
               "soa": {"minimum": 30}}),
    );
    apply(
        &k,
        &token,
        "recordsets",
        "rs-www",
        json!({"zone": "rs", "name": "www", "type": "A", "ttl": 120, "records": ["192.0.2.101", "192.0.2.102"]}),
    );
    eventually("both zones served", || {
        ready(&k, &token, "corp").0 == "True"
            && ready(&k, &token, "rs").0 == "True"
            && serial(&k, "rs.example.").is_some()
    });
    Rig {
        dir,
        cert,
        k,
        token,
        _upstream: upstream,
        _scratch: scratch,
    }
}

#[test]
fn primaries_answer_every_shape_over_udp_dot_and_doh() {
    let rig = start("shapes");
    let k = &rig.k;

    let www = dig(k.addr, &["www.corp.example.", "A"]);
    assert_eq!(www.status, "NOERROR");
    assert!(www.flags.contains(&"aa".to_owned()), "AA: {}", www.raw);
    assert_eq!(rdata(&www, "A"), ["192.0.2.1"]);
    let included = dig(k.addr, &["host1.corp.example.", "A"]);
    assert_eq!(rdata(&included, "A"), ["192.0.2.11"], "from the $INCLUDE");

    let missing = dig(k.addr, &["nope.corp.example.", "A"]);
    assert_eq!(missing.status, "NXDOMAIN");
    assert!(missing.flags.contains(&"aa".to_owned()));
    assert_eq!(missing.authority[0].2, "SOA", "{}", missing.raw);
    let nodata = dig(k.addr, &["www.corp.example.", "TXT"]);
    assert_eq!(nodata.status, "NOERROR");
    assert!(nodata.answers.is_empty(), "{}", nodata.raw);
    assert_eq!(nodata.authority[0].2, "SOA", "NODATA carries the SOA");

    let wild = dig(k.addr, &["anything.wild.corp.example.", "TXT"]);
    assert_eq!(rdata(&wild, "TXT"), ["\"wildcard\""], "{}", wild.raw);
    assert_eq!(wild.answers[0].0, "anything.wild.corp.example.");

    let alias = dig(k.addr, &["alias.corp.example.", "A"]);
    assert_eq!(rdata(&alias, "CNAME"), ["www.corp.example."]);
    assert_eq!(
        rdata(&alias, "A"),
        ["192.0.2.1"],
        "the chain inside the zone"
    );

    let referral = dig(k.addr, &["+norec", "host.sub.corp.example.", "A"]);
    assert_eq!(referral.status, "NOERROR", "{}", referral.raw);
    assert!(
        !referral.flags.contains(&"aa".to_owned()),
        "a referral is not AA"
    );
    assert!(referral.answers.is_empty());
    assert!(
        referral
            .authority
            .iter()
            .any(|a| a.2 == "NS" && a.3 == "ns.sub.corp.example."),
        "{}",
        referral.raw
    );
    assert!(
        referral.raw.contains("192.0.2.54"),
        "glue: {}",
        referral.raw
    );

    let any = dig(k.addr, &["corp.example.", "ANY"]);
    assert_eq!(any.status, "NOERROR");
    let types: std::collections::BTreeSet<&str> =
        any.answers.iter().map(|a| a.2.as_str()).collect();
    assert_eq!(types.len(), 1, "ANY minimised (RFC 8482): {}", any.raw);

    let rs = dig(k.addr, &["www.rs.example.", "A"]);
    let mut addresses = rdata(&rs, "A");
    addresses.sort();
    assert_eq!(addresses, ["192.0.2.101", "192.0.2.102"]);
    assert_eq!(rs.answers[0].1, 120);

    let dot = kdig(
        k.tls.unwrap(),
        &rig.cert,
        &["+tls", "www.corp.example.", "A"],
    );
    assert!(
        dot.contains("status: NOERROR") && dot.contains("192.0.2.1"),
        "{dot}"
    );
    assert!(dot.contains(" aa"), "AA over DoT: {dot}");
    let doh = kdig(
        k.https.unwrap(),
        &rig.cert,
        &["+https", "www.rs.example.", "A"],
    );
    assert!(
        doh.contains("status: NOERROR") && doh.contains("192.0.2.101"),
        "{doh}"
    );
}

#[test]
fn a_record_set_change_is_answered_without_restart_under_a_new_serial_and_the_views_follow() {
    let rig = start("change");
    let (k, token) = (&rig.k, rig.token.as_str());
    let before = serial(k, "rs.example.").unwrap();
    apply(
        k,
        token,
        "recordsets",
        "rs-www",
        json!({"zone": "rs", "name": "www", "type": "A", "records": ["192.0.2.103"]}),
    );
    eventually("the new answer", || {
        rdata(&dig(k.addr, &["www.rs.example.", "A"]), "A") == ["192.0.2.103"]
    });
    let after = serial(k, "rs.example.").unwrap();
    assert_eq!(after, before + 1, "increment");
    let www = dig(k.addr, &["www.rs.example.", "A"]);
    assert_eq!(
        www.answers[0].1, 30,
        "the default TTL is the zone's soa.minimum"
    );

    // Metrics, /internal/zones and the records API.
    assert_eq!(
        k.metric("kudurru_zone_serial{zone=\"rs.example.\"}"),
        Some(f64::from(after))
    );
    assert_eq!(
        k.metric("kudurru_zone_serial{zone=\"corp.example.\"}"),
        Some(2_024_010_100.0)
    );
    assert_eq!(
        k.metric("kudurru_zone_records{zone=\"corp.example.\",kind=\"records\"}"),
        Some(9.0)
    );
    assert_eq!(
        k.metric("kudurru_zone_records{zone=\"rs.example.\",kind=\"names\"}"),
        Some(2.0)
    );
    let (status, body) = k.ops_get("/internal/zones");
    assert_eq!(status, 200);
    let internal: Value = serde_json::from_str(&body).unwrap();
    let zones = internal["zones"].as_array().unwrap();
    let rs = zones.iter().find(|z| z["zone"] == "rs.example.").unwrap();
    assert_eq!(rs["serial"], after);
    assert_eq!(rs["type"], "primary");
    assert!(
        !zones.iter().any(|z| z["type"] == "builtin"),
        "configured zones only: {body}"
    );

    let (status, page) = call(k, "GET", "/api/v1/zones/corp/records?limit=4", token, None);
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 9);
    assert_eq!(page["records"][0]["type"], "SOA", "SOA first");
    assert_eq!(page["records"].as_array().unwrap().len(), 4);
    let token_next = page["continue"].as_str().unwrap().to_owned();
    let mut seen = 4;
    let mut next = Some(token_next);
    while let Some(cont) = next {
        let (status, page) = call(
            k,
            "GET",
            &format!("/api/v1/zones/corp/records?limit=4&continue={cont}"),
            token,
            None,
        );
        assert_eq!(status, 200, "{page}");
        seen += page["records"].as_array().unwrap().len();
        next = page["continue"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, 9);
    let (status, _) = call(k, "GET", "/api/v1/zones/nosuch/records", token, None);
    assert_eq!(status, 404);
    let (status, _) = call(
        k,
        "GET",
        "/api/v1/zones/corp/records?continue=1:4",
        token,
        None,
    );
    assert_eq!(status, 410, "a token from another serial");
    let (status, _) = call(k, "GET", "/api/v1/zones/corp/records?limit=0", token, None);
    assert_eq!(status, 400);
}

#[test]
fn every_bad_zone_file_is_refused_with_file_and_line_and_the_old_answers_stay() {
    let rig = start("refused");
    let (k, token) = (&rig.k, rig.token.as_str());
    let good_serial = serial(k, "corp.example.").unwrap();
    for (bad, expected) in [
        ("bad IN A 192.0.2.300\n", "corp.zone:12"),
        (
            "www.other.example. IN A 192.0.2.1\n",
            "corp.zone:12: out-of-zone",
        ),
        ("alias IN TXT \"beside a CNAME\"\n", "CNAME"),
        ("$INCLUDE ../outside.zone\n", "corp.zone:12: $INCLUDE"),
    ] {
        std::fs::write(rig.dir.join("corp.zone"), format!("{ZONE_FILE}{bad}")).unwrap();
        eventually(&format!("{bad:?} refused"), || {
            let (status, message) = ready(k, token, "corp");
            status == "False" && message.contains(expected)
        });
        let (_, message) = ready(k, token, "corp");
        assert!(message.contains("corp.zone:"), "file and line: {message}");
        assert!(message.contains("the last good zone"), "{message}");
        assert_eq!(
            rdata(&dig(k.addr, &["www.corp.example.", "A"]), "A"),
            ["192.0.2.1"]
        );
        assert_eq!(
            serial(k, "corp.example."),
            Some(good_serial),
            "nothing changed"
        );
        assert!(
            dig(k.addr, &["leak.corp.example.", "A"]).answers.is_empty(),
            "nothing from outside zones.fileDir"
        );
    }
    assert!(
        k.metric("kudurru_zone_load_failures_total{zone=\"corp.example.\"}")
            .unwrap_or(0.0)
            >= 4.0
    );
    // Fixed with a new record: imported, the serial moves on past the file's.
    std::fs::write(
        rig.dir.join("corp.zone"),
        format!("{ZONE_FILE}new IN A 192.0.2.7\n"),
    )
    .unwrap();
    eventually("the fixed file imported", || {
        rdata(&dig(k.addr, &["new.corp.example.", "A"]), "A") == ["192.0.2.7"]
    });
    assert_eq!(ready(k, token, "corp").0, "True");
    assert_eq!(serial(k, "corp.example."), Some(good_serial + 1));
}
