//! Forward zones end to end: a forward zone for `test.` (RFC 6761's special-use name, answered
//! NXDOMAIN by the built-in zone until then) sends its names to its own upstream, and nothing
//! else; a forward zone whose upstream is dead answers SERVFAIL without asking the global
//! upstream; a forward zone removed at runtime gives its names back to the built-in zone.

use kudurru_e2e::{Kudurru, TestUpstream, dig, free_port};
use serde_json::json;

use crate::zones::{apply, call, eventually, ready};

#[test]
fn a_forward_zone_for_test_routes_its_names_to_its_own_upstreams_and_only_those() {
    let global = TestUpstream::start();
    let forward = TestUpstream::start();
    let k = Kudurru::builder(&[global.udp_url()]).start();
    let token = k.token("admin", None);

    // Without a forward zone, `test.` is the built-in zone's (RFC 6761 §6.2).
    assert_eq!(dig(k.addr, &["before.test.", "A"]).status, "NXDOMAIN");
    assert_eq!(global.names_under("test."), 0);

    apply(
        &k,
        &token,
        "zones",
        "fwd-test",
        json!({"zone": "test.", "type": "forward", "upstreams": [forward.udp_url()]}),
    );
    eventually("the forward zone is ready", || {
        ready(&k, &token, "fwd-test").0 == "True"
    });
    eventually("test. names are forwarded", || {
        dig(k.addr, &["www.test.", "A"]).status == "NOERROR"
    });
    let answer = dig(k.addr, &["host.sub.test.", "A"]);
    assert_eq!(answer.status, "NOERROR");
    assert_eq!(answer.answers[0].3, "192.0.2.1");
    assert!(
        !answer.flags.contains(&"aa".to_owned()),
        "{:?}",
        answer.flags
    );
    assert_eq!(forward.total("host.sub.test."), 1);
    // Cached like any answer: asked once.
    dig(k.addr, &["host.sub.test.", "A"]);
    assert_eq!(forward.total("host.sub.test."), 1);
    // A name outside goes to the global upstream, and only there.
    assert_eq!(
        dig(k.addr, &["www.outside.example.", "A"]).status,
        "NOERROR"
    );
    assert_eq!(global.total("www.outside.example."), 1);
    assert_eq!(forward.total("www.outside.example."), 0);
    assert_eq!(
        global.names_under("test."),
        0,
        "a test. name reached the global upstream"
    );
    assert!(
        k.metric("kudurru_upstream_queries_total{upstream=\"forward-zones\"}")
            .unwrap_or(0.0)
            >= 2.0
    );

    // A forward zone whose only upstream is dead: SERVFAIL, the global upstream never asked.
    let dead = format!("udp://127.0.0.1:{}", free_port());
    apply(
        &k,
        &token,
        "zones",
        "fwd-dead",
        json!({"zone": "dead.example.", "type": "forward", "upstreams": [dead]}),
    );
    eventually("the dead forward zone is ready", || {
        ready(&k, &token, "fwd-dead").0 == "True"
    });
    eventually("a dead forward zone answers SERVFAIL", || {
        dig(k.addr, &["www.dead.example.", "A"]).status == "SERVFAIL"
    });
    assert_eq!(global.names_under("dead.example."), 0);

    // Removed at runtime: `test.` is the built-in zone's again, without a restart.
    let (status, body) = call(&k, "DELETE", "/api/v1/zones/fwd-test", &token, None);
    assert!(status == 200 || status == 204, "{status} {body}");
    eventually("test. is built-in again", || {
        dig(k.addr, &["after.test.", "A"]).status == "NXDOMAIN"
    });
    assert_eq!(forward.total("after.test."), 0);
    assert_eq!(global.names_under("test."), 0);
}
