//! Forwarding loops through another resolver (issue 32 item 9): kudurru forwards to Unbound,
//! which forwards everything back to kudurru. The control thread's probe comes back in as a
//! client query: doctor fails naming the upstream, `kudurru_upstream_loop_detected` is 1, the
//! log says so, other queries end (SERVFAIL) within a bound instead of bouncing; pointing
//! kudurru at a good upstream (a settings change) clears it. Unbound forwarding to a local
//! responder instead is no loop.

use std::path::Path;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, Unbound, dig, free_port, try_dig};
use serde_json::Value;

use crate::api::curl;

const JSON: &str = "application/json";

/// How long a probe round may take to show under load: the first round runs at start, the
/// next on the settings change; each takes at most a few seconds.
const ROUND_BOUND: Duration = Duration::from_secs(45);

/// Unbound on loopback at a fresh port, forwarding every name to `to` (it must be told that
/// loopback forwarders are allowed).
fn forwarding_unbound(dir: &Path, to: std::net::SocketAddr) -> (Unbound, String) {
    let port = free_port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let unbound = Unbound::start(
        dir,
        addr,
        &format!("  interface: 127.0.0.1@{port}\n  do-not-query-localhost: no"),
        &format!(
            "forward-zone:\n  name: \".\"\n  forward-addr: {}@{}",
            to.ip(),
            to.port()
        ),
    );
    (unbound, format!("udp://{addr}"))
}

/// PATCHes the cluster settings with `patch` (JSON) as `token`; a refusal fails the test.
fn patch_settings(k: &Kudurru, token: &str, patch: &str) {
    let (status, body) = curl(
        k,
        "PATCH",
        "/api/v1/settings",
        Some(token),
        Some((JSON, patch)),
    );
    assert_eq!(status, 200, "{body}");
}

/// The doctor check named `loop UPSTREAM`: (status, message), once one exists.
fn loop_check(k: &Kudurru, token: &str, upstream: &str) -> Option<(String, String)> {
    let (status, doctor) = curl(k, "GET", "/api/v1/doctor", Some(token), None);
    assert_eq!(status, 200, "{doctor}");
    let name = format!("loop {upstream}");
    doctor["checks"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name.as_str())
        .map(|c| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (text(&c["status"]), text(&c["message"]))
        })
}

/// Polls doctor until the loop check of `upstream` has `status`; its message.
fn wait_for_check(k: &Kudurru, token: &str, upstream: &str, status: &str) -> String {
    let deadline = Instant::now() + ROUND_BOUND;
    loop {
        let seen = loop_check(k, token, upstream);
        if let Some((s, message)) = &seen
            && s == status
        {
            return message.clone();
        }
        assert!(
            Instant::now() < deadline,
            "doctor's loop check for {upstream} never became {status}: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_forwarding_loop_through_unbound_is_reported_drained_and_cleared_by_a_settings_change() {
    let scratch = Scratch::new("loop");
    let good = TestUpstream::start();
    let log = scratch.join("kudurru.log");
    // Upstreams from the settings file (a flag would win over the API's PATCH).
    let settings = scratch.join("settings.toml");
    std::fs::write(&settings, format!("upstreams = [\"{}\"]\n", good.udp_url())).unwrap();
    let k = Kudurru::builder(&[])
        .env("KUDURRU_SETTINGS_FILE", settings.to_str().unwrap())
        .log_level(Some("info"))
        .stderr_to(&log)
        .start();
    let operator = k.token("operator", None);
    let (_unbound, looping) = forwarding_unbound(&scratch, k.addr);

    // The loop: kudurru → Unbound → kudurru.
    let patch = format!(r#"{{"upstreams": ["{looping}"]}}"#);
    patch_settings(&k, &operator, &patch);
    let message = wait_for_check(&k, &operator, &looping, "fail");
    assert!(
        message.starts_with(&format!("forwarding loop through {looping}: the probe "))
            && message.contains(".kudurru-loop.alt. came back ")
            && message.ends_with(" times"),
        "{message}"
    );
    assert_eq!(
        k.metric(&format!(
            "kudurru_upstream_loop_detected{{upstream=\"{looping}\"}}"
        )),
        Some(1.0)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("forwarding loop") && l.contains(&looping)),
        "the log names the upstream: {text}"
    );

    // Other queries do not spin: each ends with SERVFAIL within the resolve timeout (dig
    // gives up after 10 s; kudurru answers well before).
    let started = Instant::now();
    let answer = try_dig(k.addr, &["+tries=1", "+time=10", "looped.example", "A"])
        .expect("kudurru answers a looping query");
    assert_eq!(answer.status, "SERVFAIL");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered in {:?}",
        started.elapsed()
    );
    // A name under the probe domain is refused at once, never forwarded.
    assert_eq!(
        dig(k.addr, &["+tries=1", "x.kudurru-loop.alt", "TXT"]).status,
        "REFUSED"
    );

    // upstream.loopProbe is hot: off, the verdict and its series go at once; on again, the
    // loop is found again.
    for (enabled, wanted) in [("false", None), ("true", Some(1.0))] {
        let patch = format!(r#"{{"upstream": {{"loopProbe": {enabled}}}}}"#);
        patch_settings(&k, &operator, &patch);
        if wanted.is_none() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while loop_check(&k, &operator, &looping).is_some() {
                assert!(
                    Instant::now() < deadline,
                    "the loop check outlived loopProbe = false"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            wait_for_check(&k, &operator, &looping, "fail");
        }
        assert_eq!(
            k.metric(&format!(
                "kudurru_upstream_loop_detected{{upstream=\"{looping}\"}}"
            )),
            wanted
        );
    }

    // Fixed by a settings change: the good upstream again; the loop's check and series go.
    let patch = format!(r#"{{"upstreams": ["{}"]}}"#, good.udp_url());
    patch_settings(&k, &operator, &patch);
    let message = wait_for_check(&k, &operator, &good.udp_url(), "ok");
    assert!(message.starts_with("no loop: the probe "), "{message}");
    assert_eq!(loop_check(&k, &operator, &looping), None);
    assert_eq!(
        k.metric(&format!(
            "kudurru_upstream_loop_detected{{upstream=\"{looping}\"}}"
        )),
        None
    );
    assert_eq!(
        k.metric(&format!(
            "kudurru_upstream_loop_detected{{upstream=\"{}\"}}",
            good.udp_url()
        )),
        Some(0.0)
    );
}

#[test]
fn unbound_forwarding_to_a_local_responder_is_no_loop() {
    let scratch = Scratch::new("noloop");
    let responder = TestUpstream::start();
    let (_unbound, upstream) = forwarding_unbound(&scratch, responder.addr);
    let k = Kudurru::builder(std::slice::from_ref(&upstream)).start();
    let viewer = k.token("viewer", None);
    let message = wait_for_check(&k, &viewer, &upstream, "ok");
    assert!(message.starts_with("no loop: the probe "), "{message}");
    assert_eq!(
        k.metric(&format!(
            "kudurru_upstream_loop_detected{{upstream=\"{upstream}\"}}"
        )),
        Some(0.0)
    );
    assert!(
        responder.names_under("kudurru-loop.alt.") >= 1,
        "the probe went through Unbound to the responder"
    );
    // Ordinary queries are answered through the same path.
    assert_eq!(dig(k.addr, &["www.example.com", "A"]).status, "NOERROR");
}

/// The looping upstream is taken out of rotation (docs/operations.md, "Forwarding loops"):
/// with a good upstream beside it, queries stop going to it, and its health probes stop too
/// (they would come back through the loop and succeed on the good upstream's answer).
#[test]
fn a_looping_upstream_is_held_out_of_rotation_while_another_answers() {
    let scratch = Scratch::new("loop-rotation");
    let good = TestUpstream::start();
    let settings = scratch.join("settings.toml");
    std::fs::write(
        &settings,
        format!(
            "upstreams = [\"{}\"]\n[upstream]\nstrategy = \"ordered\"\n",
            good.udp_url()
        ),
    )
    .unwrap();
    let k = Kudurru::builder(&[])
        .env("KUDURRU_SETTINGS_FILE", settings.to_str().unwrap())
        .env("KUDURRU_UPSTREAM__HEALTHCHECKINTERVAL", "300ms")
        .start();
    let operator = k.token("operator", None);
    let (_unbound, looping) = forwarding_unbound(&scratch, k.addr);
    // The looping upstream first: `ordered` would ask it first for every query.
    let patch = format!(r#"{{"upstreams": ["{looping}", "{}"]}}"#, good.udp_url());
    patch_settings(&k, &operator, &patch);
    wait_for_check(&k, &operator, &looping, "fail");
    let healthy = format!("kudurru_upstream_healthy{{upstream=\"{looping}\"}}");
    let deadline = Instant::now() + ROUND_BOUND;
    while k.metric(&healthy) != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "the looping upstream stayed in rotation: {:?}",
            k.metric(&healthy)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = format!("kudurru_upstream_queries_total{{upstream=\"{looping}\"}}");
    let before = k.metric(&sent);
    for i in 0..5 {
        let name = format!("rotation-{i}.example");
        assert_eq!(dig(k.addr, &[&name, "A"]).status, "NOERROR", "{name}");
    }
    // Several health-check intervals pass: it is not probed back in either.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(k.metric(&sent), before, "nothing more went to {looping}");
    assert_eq!(k.metric(&healthy), Some(0.0));
}
