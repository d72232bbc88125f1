//! The HTTP API through a real client (curl): tokens and roles, every error status, PATCH
//! persisted into the settings file and re-read, node config in memory, upstream counters.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::thread;
use std::time::Duration;

use kudurru_e2e::{Kudurru, TestUpstream, dig, unique_name};

/// (status, body) of one curl request.
pub(crate) fn curl(
    k: &Kudurru,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, &str)>,
) -> (u16, serde_json::Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-X", method, "-w", "\n%{http_code}"])
        .arg(format!("http://{}{path}", k.api));
    if let Some(token) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {token}"));
    }
    if let Some((content_type, data)) = body {
        cmd.arg("-H")
            .arg(format!("Content-Type: {content_type}"))
            .arg("--data-binary")
            .arg(data);
        if data.len() > 64 * 1024 {
            // As curl does by itself past 1 MiB: the server refuses an oversized declared
            // length before reading the body, so the client must not be mid-send when it
            // closes (without this, curl sometimes saw the reset instead of the 413).
            cmd.arg("-H").arg("Expect: 100-continue");
        }
    }
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("status line");
    (
        status.parse().unwrap(),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

fn code(reply: &(u16, serde_json::Value)) -> (u16, &str) {
    (reply.0, reply.1["code"].as_str().unwrap_or(""))
}

const JSON: &str = "application/json";

#[test]
fn the_api_with_tokens_roles_persistence_and_errors() {
    let upstream = TestUpstream::start();
    let dir = std::env::temp_dir().join(format!("kudurru-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("settings.toml");
    std::fs::write(
        &file,
        "# managed by kudurru\n[cache]\nminTTL = 0\nnegativeMaxTTL = 600\n",
    )
    .unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .env("KUDURRU_CACHE__SERVFAILTTL", "3")
        .start();
    let viewer = k.token("viewer", None);
    let operator = k.token("operator", None);
    let admin = k.token("admin", None);
    let short = k.token("viewer", Some("1s"));

    // 401: no token, a wrong one, an expired one.
    assert_eq!(
        code(&curl(&k, "GET", "/api/v1/settings", None, None)),
        (401, "unauthorized")
    );
    assert_eq!(
        code(&curl(
            &k,
            "GET",
            "/api/v1/settings",
            Some("kdr_00000000_00"),
            None
        )),
        (401, "unauthorized")
    );
    thread::sleep(Duration::from_millis(2100));
    let expired = curl(&k, "GET", "/api/v1/settings", Some(&short), None);
    assert_eq!(code(&expired), (401, "unauthorized"));
    assert_eq!(
        expired.1["message"],
        format!(
            "token expired (this server reads tokens from {})",
            k.data_dir.join("tokens.json").display()
        )
    );

    // GET: values, sources, the settings file.
    let (status, settings) = curl(&k, "GET", "/api/v1/settings", Some(&viewer), None);
    assert_eq!(status, 200);
    assert_eq!(settings["values"]["cache"]["negativeMaxTTL"], 600);
    assert_eq!(settings["sources"]["cache.negativeMaxTTL"], "settings-file");
    assert_eq!(settings["sources"]["cache.servfailTTL"], "env");
    assert_eq!(settings["settingsFile"], file.to_str().unwrap());
    assert!(
        settings["values"].get("server").is_none()
            || settings["values"]["server"].get("listen").is_none(),
        "node keys are not settings"
    );

    // 403: a viewer cannot write; an operator cannot change node config.
    let patch = r#"{"cache": {"maxTTL": 90}}"#;
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/settings",
            Some(&viewer),
            Some((JSON, patch))
        )),
        (403, "forbidden")
    );
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/node/config",
            Some(&operator),
            Some((JSON, r#"{"log":{"level":"debug"}}"#))
        )),
        (403, "forbidden")
    );

    // 415, 413, 400 for bad JSON, unknown keys, bad values, node-scope keys; 409 for a locked key.
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/settings",
            Some(&operator),
            Some(("text/plain", patch))
        ))
        .0,
        415
    );
    let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(70_000));
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/settings",
            Some(&operator),
            Some((JSON, &huge))
        ))
        .0,
        413
    );
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/settings",
            Some(&operator),
            Some((JSON, "{nope"))
        )),
        (400, "invalid_json")
    );
    let unknown = curl(
        &k,
        "PATCH",
        "/api/v1/settings",
        Some(&operator),
        Some((JSON, r#"{"cache":{"maxTTTL":5}}"#)),
    );
    assert_eq!(code(&unknown), (400, "unknown_key"));
    assert_eq!(unknown.1["key"], "cache.maxTTTL");
    let bad = curl(
        &k,
        "PATCH",
        "/api/v1/settings",
        Some(&operator),
        Some((JSON, r#"{"cache.servfailTTL": 1000}"#)),
    );
    assert_eq!(
        code(&bad),
        (409, "locked"),
        "the environment holds cache.servfailTTL"
    );
    let bad = curl(
        &k,
        "PATCH",
        "/api/v1/settings",
        Some(&operator),
        Some((JSON, r#"{"cache":{"minTTL": 500, "maxTTL": 100}}"#)),
    );
    assert_eq!(code(&bad), (400, "invalid_value"));
    assert_eq!(bad.1["key"], "cache.minTTL");
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/settings",
            Some(&operator),
            Some((JSON, r#"{"tcp":{"maxConnectionsPerCore": 5}}"#))
        )),
        (400, "node_scope")
    );
    assert_eq!(
        code(&curl(&k, "GET", "/api/v1/nope", Some(&viewer), None)).0,
        404
    );
    assert_eq!(
        code(&curl(&k, "DELETE", "/api/v1/settings", Some(&admin), None)).0,
        405
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# managed by kudurru\n[cache]\nminTTL = 0\nnegativeMaxTTL = 600\n",
        "refused patches change nothing"
    );

    // PATCH persisted: the file keeps the other keys, mode 0640, and the change is live.
    let (status, reply) = curl(
        &k,
        "PATCH",
        "/api/v1/settings",
        Some(&operator),
        Some((JSON, patch)),
    );
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["persisted"], true);
    assert_eq!(reply["changed"], serde_json::json!(["cache.maxTTL"]));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("maxTTL = 90") && text.contains("negativeMaxTTL = 600"),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert_eq!(dig(k.addr, &[&unique_name("api"), "A"]).answers[0].1, 90);
    let (_, settings) = curl(&k, "GET", "/api/v1/settings", Some(&viewer), None);
    assert_eq!(settings["values"]["cache"]["maxTTL"], 90, "re-read");
    // The watcher sees the file it wrote; nothing is applied twice.
    thread::sleep(Duration::from_millis(800));
    assert_eq!(
        k.metric("kudurru_settings_reloads_total{result=\"applied\"}"),
        Some(1.0)
    );

    // Node config: in memory only; host-only keys refused; log.level is live.
    let (status, node) = curl(&k, "GET", "/api/v1/node/config", Some(&viewer), None);
    assert_eq!(status, 200);
    assert_eq!(node["sources"]["log.level"], "flag");
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/node/config",
            Some(&admin),
            Some((JSON, r#"{"log":{"level":"debug"}}"#))
        )),
        (409, "locked"),
        "the test passes --log-level"
    );
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/node/config",
            Some(&admin),
            Some((JSON, r#"{"server":{"listen":["127.0.0.1:1"]}}"#))
        )),
        (400, "host_only")
    );
    assert_eq!(
        code(&curl(
            &k,
            "PATCH",
            "/api/v1/node/config",
            Some(&admin),
            Some((JSON, r#"{"cache":{"maxTTL":5}}"#))
        )),
        (400, "cluster_scope")
    );
    let (status, reply) = curl(
        &k,
        "PATCH",
        "/api/v1/node/config",
        Some(&admin),
        Some((JSON, r#"{"tcp":{"maxConnectionsPerCore":8}}"#)),
    );
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["persisted"], false);
    assert_eq!(
        reply["restartRequired"],
        serde_json::json!(["tcp.maxConnectionsPerCore"])
    );

    // Upstreams: counters per upstream.
    let (status, ups) = curl(&k, "GET", "/api/v1/upstreams", Some(&viewer), None);
    assert_eq!(status, 200);
    assert_eq!(ups["upstreams"][0]["upstream"], upstream.udp_url());
    assert!(ups["upstreams"][0]["queries"].as_u64().unwrap() >= 1);
    assert_eq!(ups["upstreams"][0]["healthy"], true);
}

#[test]
fn log_level_changes_live_through_the_node_api() {
    let dir = std::env::temp_dir().join(format!("kudurru-api-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("kudurru.log");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .log_level(None)
        .stderr_to(&log)
        .start();
    let admin = k.token("admin", None);
    dig(k.addr, &["localhost", "A"]);
    assert!(!std::fs::read_to_string(&log).unwrap().contains("DEBUG"));
    let (status, reply) = curl(
        &k,
        "PATCH",
        "/api/v1/node/config",
        Some(&admin),
        Some((JSON, r#"{"log":{"level":"debug"}}"#)),
    );
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["changed"], serde_json::json!(["log.level"]));
    let (_, node) = curl(&k, "GET", "/api/v1/node/config", Some(&admin), None);
    assert_eq!(node["sources"]["log.level"], "api");
    assert!(
        std::fs::read_to_string(&log).unwrap().contains("DEBUG"),
        "debug lines appear"
    );
}

/// schemathesis: from the environment, PATH, or the venv `.ci/test-deps` creates.
fn schemathesis() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("KUDURRU_SCHEMATHESIS") {
        return path.into();
    }
    let venv = std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/kudurru/venv/bin/st");
    if venv.exists() {
        return venv;
    }
    "st".into()
}

#[test]
fn the_openapi_document_holds_against_the_running_server() {
    // A bounded schemathesis run (30 examples per operation) with an admin token:
    // every response must match the document (status, content type, schema, Allow on 405) and
    // schema-invalid requests must be refused. Not checked: that every schema-valid PATCH is
    // accepted, since cross-key rules (cache.minTTL <= cache.maxTTL) and URL syntax are the
    // validator's, not the schema's.
    let dir = std::env::temp_dir().join(format!("kudurru-api-st-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("settings.toml");
    std::fs::write(&file, "").unwrap();
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .start();
    let admin = k.token("admin", None);
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    // A watch and the query-log tail are streams that end when the client leaves:
    // schemathesis reads a response to its end, so it asks for lists and pages only
    // (tests/e2e/objects.rs reads a watch, tests/e2e/querylog_api.rs the tail).
    let config = dir.join("schemathesis.toml");
    std::fs::write(
        &config,
        "[parameters]\n\"query.watch\" = \"false\"\n\"query.follow\" = \"false\"\n",
    )
    .unwrap();
    let out = Command::new(schemathesis())
        .arg("--config-file")
        .arg(&config)
        .args([
            "run",
            doc,
            "--exclude-path",
            "/api/v1/querylog/tail",
            "--url",
        ])
        .arg(format!("http://{}", k.api))
        .arg("-H")
        .arg(format!("Authorization: Bearer {admin}"))
        .args(["-n", "30", "--seed", "1", "--checks", "all"])
        .args(["--exclude-checks", "positive_data_acceptance"])
        .output()
        .expect("schemathesis runs (.ci/test-deps installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Warnings (operations whose fuzzed inputs mostly 404 or 400) are expected: object names
    // must exist and specs must pass their kind's rules. Failures and errors are not.
    assert!(
        !text.contains("FAILURES") && !text.contains("ERRORS") && text.contains(" passed"),
        "{text}"
    );
    assert_eq!(
        k.metric("kudurru_dns_responses_total{rcode=\"none\"}"),
        Some(0.0),
        "the server kept serving"
    );
    assert_eq!(dig(k.addr, &["localhost", "A"]).status, "NOERROR");
}

#[test]
fn doctor_and_messages_report_what_an_operator_must_fix() {
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()]).start();
    let viewer = k.token("viewer", None);
    let (status, doctor) = curl(&k, "GET", "/api/v1/doctor", Some(&viewer), None);
    assert_eq!(status, 200);
    let check = |doctor: &serde_json::Value, name: &str| -> String {
        doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(check(&doctor, "databases"), "ok");
    assert_eq!(check(&doctor, "tokens"), "ok");
    assert_eq!(check(&doctor, "readiness"), "ok");
    assert_eq!(
        check(&doctor, "settings_file"),
        "warn",
        "no settings file: API changes are not persisted"
    );

    // A world-readable database file in the data directory.
    let db = k.data_dir.join("querylog.redb");
    std::fs::write(&db, b"").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_, doctor) = curl(&k, "GET", "/api/v1/doctor", Some(&viewer), None);
    assert_eq!(check(&doctor, "databases"), "warn");
    assert!(doctor.to_string().contains("querylog.redb"));
    assert!(doctor["counts"]["warn"].as_u64().unwrap() >= 2);

    // Lameduck shows in readiness; messages list diagnoses by severity.
    let (status, _) = (
        Command::new("curl")
            .args(["-sS", "-X", "POST"])
            .arg(format!("http://{}/lameduck", k.ops))
            .status()
            .unwrap(),
        (),
    );
    assert!(status.success());
    let (_, doctor) = curl(&k, "GET", "/api/v1/doctor", Some(&viewer), None);
    assert_eq!(check(&doctor, "readiness"), "warn");
    let (status, messages) = curl(&k, "GET", "/api/v1/info/messages", Some(&viewer), None);
    assert_eq!(status, 200);
    let codes: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"no_settings_file"), "{codes:?}");
}

#[test]
fn a_dead_upstream_is_logged_once_failed_by_doctor_and_shown_by_kudurru_upstreams() {
    let dir = std::env::temp_dir().join(format!("kudurru-dead-up-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("kudurru.log");
    // Nothing listens on port 9 (discard): every attempt fails at once (ICMP unreachable).
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .stderr_to(&log)
        .start();
    for i in 0..8 {
        let _ = kudurru_e2e::try_dig(
            k.addr,
            &[&unique_name(&format!("dead{i}")), "A", "+tries=1"],
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("upstream udp://127.0.0.1:9 is unhealthy") {
            assert!(
                text.contains("queries answered SERVFAIL: every upstream attempt failed"),
                "{text}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no unhealthy line: {text}"
        );
        thread::sleep(Duration::from_millis(200));
    }
    let viewer = k.token("viewer", None);
    let (status, doctor) = curl(&k, "GET", "/api/v1/doctor", Some(&viewer), None);
    assert_eq!(status, 200);
    let upstream_check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "upstream udp://127.0.0.1:9")
        .cloned()
        .unwrap_or_default();
    assert_eq!(upstream_check["status"], "fail", "{doctor}");
    let out = Command::new(kudurru_e2e::kudurru_bin())
        .args([
            "upstreams",
            "--api",
            &format!("http://{}", k.api),
            "--token",
            &viewer,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("udp://127.0.0.1:9"))
        .unwrap_or_default();
    assert!(row.ends_with(" no"), "{table}");
    // Said once: a second look finds no new line about it.
    thread::sleep(Duration::from_secs(6));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("is unhealthy").count(), 1, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn patches_name_the_key_at_fault_keys_are_exact_and_the_scheme_is_any_case() {
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()]).start();
    let admin = k.token("admin", None);
    let lower = format!("bearer {admin}");
    let patch = |body: &str| {
        let out = Command::new("curl")
            .args(["-sS", "-X", "PATCH", "-w", "\n%{http_code}"])
            .arg(format!("http://{}/api/v1/settings", k.api))
            .arg("-H")
            .arg(format!("Authorization: {lower}"))
            .args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                body,
            ])
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').expect("status line");
        (
            status.parse::<u16>().unwrap(),
            serde_json::from_str::<serde_json::Value>(body).unwrap_or_default(),
        )
    };
    // The scheme in lower case is accepted (RFC 9110 §11.1).
    let (status, ok) = patch(r#"{"cache":{"maxTTL":600}}"#);
    assert_eq!(status, 200, "{ok}");
    // A second spelling of a key is not a second key.
    let (status, e) = patch(r#"{"cache.maxTTL":86400,"cache.maxttl":5}"#);
    assert_eq!(
        (status, e["code"].as_str(), e["key"].as_str()),
        (400, Some("unknown_key"), Some("cache.maxttl"))
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("did you mean cache.maxTTL"),
        "{e}"
    );
    // A JSON type error names the key, in an operator's words.
    let (status, e) = patch(r#"{"cache":{"maxTTL":"abc"}}"#);
    assert_eq!(
        (status, e["key"].as_str()),
        (400, Some("cache.maxTTL")),
        "{e}"
    );
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("expected a whole number") && !message.contains("TOML"),
        "{message}"
    );
    // Nothing above changed the value the first patch set.
    let (_, settings) = curl(&k, "GET", "/api/v1/settings", Some(&admin), None);
    assert_eq!(settings["values"]["cache"]["maxTTL"], 600);
}
