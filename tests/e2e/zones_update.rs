//! Dynamic updates (RFC 2136) end to end with Debian's `nsupdate` and a key file in
//! `tsig-keygen`'s format (the one `zones.tsigKeyFile` reads): an add seen by dig under a new
//! serial, a delete over TCP, a failed prerequisite (NXRRSET) that changes nothing, an unsigned update
//! to a TSIG zone and one from a client outside `allowUpdate.clients` both REFUSED.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, dig};
use serde_json::json;

use crate::zones::{apply, eventually, rdata, ready, serial};

const KEY_FILE: &str = "key \"update-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"dXBkYXRlLXVwZGF0ZS11cGRhdGUtdXBkYXRlLTAxMjM=\";\n};\n";

/// Runs `nsupdate` (signed with `key` when given) on `commands` sent to `k` over UDP; its
/// exit status and what it printed.
fn nsupdate(k: &Kudurru, key: Option<&Path>, commands: &str) -> (bool, String) {
    nsupdate_with(k, key, commands, &[])
}

/// [`nsupdate`] with extra flags (`-v`: over TCP).
fn nsupdate_with(
    k: &Kudurru,
    key: Option<&Path>,
    commands: &str,
    flags: &[&str],
) -> (bool, String) {
    let mut command = Command::new("nsupdate");
    command.args(flags);
    if let Some(key) = key {
        command.arg("-k").arg(key);
    }
    let mut child = command
        .args(["-t", "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nsupdate is installed (bind9-dnsutils)");
    let script = format!(
        "server {} {}\n{commands}\nsend\n",
        k.addr.ip(),
        k.addr.port()
    );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("nsupdate reads its commands");
    let output = child.wait_with_output().expect("nsupdate ends");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn a_records(k: &Kudurru, name: &str) -> Vec<String> {
    rdata(&dig(k.addr, &[name, "A"]), "A")
}

#[test]
fn rfc2136_nsupdate_with_tsig_adds_deletes_and_is_refused_where_it_must_be() {
    let scratch = Scratch::new("zones-update");
    let keys = scratch.join("update.key");
    std::fs::write(&keys, KEY_FILE).expect("the key file is written");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env(
            "KUDURRU_ZONES__TSIGKEYFILE",
            keys.to_str().expect("a UTF-8 path"),
        )
        .start();
    let token = k.token("admin", None);
    apply(
        &k,
        &token,
        "zones",
        "corp",
        json!({"zone": "corp.example.", "type": "primary", "nameServers": ["ns1.corp.example."],
               "allowUpdate": {"tsigKey": "update-key", "clients": ["127.0.0.0/8"]}}),
    );
    apply(
        &k,
        &token,
        "zones",
        "far",
        json!({"zone": "far.example.", "type": "primary", "nameServers": ["ns1.far.example."],
               "allowUpdate": {"clients": ["10.0.0.0/8"]}}),
    );
    eventually("both zones served", || {
        ready(&k, &token, "corp").0 == "True"
            && ready(&k, &token, "far").0 == "True"
            && serial(&k, "corp.example.").is_some()
            && serial(&k, "far.example.").is_some()
    });
    let first = serial(&k, "corp.example.").expect("a serial");

    // Add: answered at once under a new serial.
    let (ok, out) = nsupdate(
        &k,
        Some(&keys),
        "zone corp.example.\nupdate add new.corp.example. 300 A 192.0.2.77",
    );
    assert!(ok, "nsupdate add: {out}");
    eventually("the added record answered", || {
        a_records(&k, "new.corp.example.") == ["192.0.2.77"]
    });
    let added = serial(&k, "corp.example.").expect("a serial");
    assert!(added > first, "serial {first} -> {added}");

    // A failed prerequisite (NXRRSET): nothing changes, the serial stays.
    let (ok, out) = nsupdate(
        &k,
        Some(&keys),
        "zone corp.example.\nprereq yxrrset new.corp.example. AAAA\nupdate add other.corp.example. 300 A 192.0.2.78",
    );
    assert!(!ok && out.contains("NXRRSET"), "nsupdate prereq: {out}");
    assert_eq!(
        dig(k.addr, &["other.corp.example.", "A"]).status,
        "NXDOMAIN"
    );
    assert_eq!(serial(&k, "corp.example."), Some(added));

    // Unsigned, to a zone that requires the key: REFUSED, nothing changes.
    let (ok, out) = nsupdate(
        &k,
        None,
        "zone corp.example.\nupdate add unsigned.corp.example. 300 A 192.0.2.79",
    );
    assert!(!ok && out.contains("REFUSED"), "unsigned nsupdate: {out}");
    assert_eq!(
        dig(k.addr, &["unsigned.corp.example.", "A"]).status,
        "NXDOMAIN"
    );

    // From a client outside allowUpdate.clients: REFUSED.
    let far = serial(&k, "far.example.");
    let (ok, out) = nsupdate(
        &k,
        None,
        "zone far.example.\nupdate add www.far.example. 300 A 192.0.2.80",
    );
    assert!(!ok && out.contains("REFUSED"), "outside nsupdate: {out}");
    assert_eq!(dig(k.addr, &["www.far.example.", "A"]).status, "NXDOMAIN");
    assert_eq!(serial(&k, "far.example."), far);

    // Delete, over TCP: gone under a newer serial.
    let (ok, out) = nsupdate_with(
        &k,
        Some(&keys),
        "zone corp.example.\nupdate delete new.corp.example. A",
        &["-v"],
    );
    assert!(ok, "nsupdate delete: {out}");
    eventually("the deleted record gone", || {
        dig(k.addr, &["new.corp.example.", "A"]).status == "NXDOMAIN"
    });
    let deleted = serial(&k, "corp.example.").expect("a serial");
    assert!(deleted > added, "serial {added} -> {deleted}");
}
