//! The objects API through curl: create, read, list, replace, merge-patch, delete and watch
//! client groups; every bad input refused with its code and field and nothing changed; the
//! roles; the audit log naming the token that wrote.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use kudurru_e2e::{Kudurru, TestUpstream};
use serde_json::{Value, json};

/// (status, body) of one request; `body` is (content type, text).
pub(crate) fn call(
    k: &Kudurru,
    method: &str,
    path: &str,
    token: &str,
    body: Option<(&str, &str)>,
) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ])
    .arg(format!("http://{}{path}", k.api))
    .arg("-H")
    .arg(format!("Authorization: Bearer {token}"));
    if let Some((content_type, _)) = body {
        cmd.arg("-H")
            .arg(format!("Content-Type: {content_type}"))
            .arg("--data-binary")
            .arg("@-");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl runs");
    let mut stdin = child.stdin.take().expect("piped");
    if let Some((_, data)) = body {
        std::io::Write::write_all(&mut stdin, data.as_bytes()).expect("curl reads its body");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("curl ends");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("status line");
    (
        status.parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

const JSON: &str = "application/json";

/// A refused request: method, content type, body, status, code, the field it names.
type BadInput = (
    &'static str,
    &'static str,
    &'static str,
    u16,
    &'static str,
    Option<&'static str>,
);

fn group(name: &str, clients: &[&str]) -> String {
    json!({ "metadata": { "name": name, "labels": { "site": "lab" } }, "spec": { "clients": clients } })
        .to_string()
}

fn version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn client_groups_through_the_objects_api_with_roles_errors_watch_and_audit() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let (viewer, operator, admin) = (
        k.token("viewer", None),
        k.token("operator", None),
        k.token("admin", None),
    );
    let base = "/api/v1/clientgroups";
    // Create, read, list.
    let (status, created) = call(
        &k,
        "POST",
        base,
        &operator,
        Some((JSON, &group("lab", &["192.0.2.0/24"]))),
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["kind"], "ClientGroup");
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    let rv1 = version(&created);
    let (status, again) = call(
        &k,
        "POST",
        base,
        &operator,
        Some((JSON, &group("lab", &["192.0.2.0/24"]))),
    );
    assert_eq!(
        (status, again["code"].as_str()),
        (409, Some("already_exists"))
    );
    let (status, read) = call(&k, "GET", &format!("{base}/lab"), &viewer, None);
    assert_eq!(status, 200, "{read}");
    // The list manager may have written the group's status meanwhile (its resourceVersion
    // then moved on); the object itself is the one created.
    assert_eq!(
        (
            &read["metadata"]["uid"],
            &read["metadata"]["generation"],
            &read["spec"]
        ),
        (
            &created["metadata"]["uid"],
            &created["metadata"]["generation"],
            &created["spec"]
        )
    );
    let (status, list) = call(
        &k,
        "GET",
        &format!("{base}?labelSelector=site%3Dlab"),
        &viewer,
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, empty) = call(
        &k,
        "GET",
        &format!("{base}?labelSelector=site%3Doffice"),
        &viewer,
        None,
    );
    assert_eq!(empty["items"], json!([]));

    // Roles: a viewer reads but does not write; an operator does not write status.
    let (status, refused) = call(
        &k,
        "POST",
        base,
        &viewer,
        Some((JSON, &group("x", &["192.0.2.1"]))),
    );
    assert_eq!((status, refused["code"].as_str()), (403, Some("forbidden")));
    let status_body = json!({ "metadata": { "name": "lab", "resourceVersion": rv1 }, "status": { "observedGeneration": 1 } }).to_string();
    let path_status = format!("{base}/lab/status");
    assert_eq!(
        call(
            &k,
            "PUT",
            &path_status,
            &operator,
            Some((JSON, &status_body))
        )
        .0,
        403
    );
    let (status, with_status) = call(&k, "PUT", &path_status, &admin, Some((JSON, &status_body)));
    assert_eq!(status, 200, "{with_status}");
    assert_eq!(with_status["status"]["observedGeneration"], 1);
    let rv2 = version(&with_status);

    // Watch from here: every later change arrives as a line, in order.
    let mut watch = Command::new("curl")
        .args(["-sSN", "--max-time", "20", "-H"])
        .arg(format!("Authorization: Bearer {viewer}"))
        .arg(format!(
            "http://{}{base}?watch=true&resourceVersion={rv2}",
            k.api
        ))
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl runs");
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();

    // Bad input, each refused with its code and field, and nothing changed.
    let item = format!("{base}/lab");
    let bad: &[BadInput] = &[
        ("PUT", JSON, "{not json", 400, "invalid_json", None),
        (
            "PUT",
            JSON,
            r#"{"metadata":{"name":"lab","resourceVersion":"1"},"spek":{}}"#,
            400,
            "unknown_field",
            Some("spek"),
        ),
        (
            "PUT",
            JSON,
            r#"{"kind":"Policy","metadata":{"name":"lab","resourceVersion":"1"},"spec":{}}"#,
            400,
            "invalid_value",
            Some("kind"),
        ),
        (
            "PUT",
            JSON,
            r#"{"metadata":{"name":"lab"},"spec":{"clients":["192.0.2.9"]}}"#,
            400,
            "invalid_value",
            Some("metadata.resourceVersion"),
        ),
        (
            "PUT",
            JSON,
            r#"{"metadata":{"name":"lab","resourceVersion":"1"},"spec":{"clients":["192.0.2.9"]}}"#,
            409,
            "conflict",
            Some("metadata.resourceVersion"),
        ),
        (
            "PATCH",
            JSON,
            r#"{"spec":{"clients":["192.0.2.0/99"]}}"#,
            400,
            "invalid_value",
            Some("spec.clients[0]"),
        ),
        (
            "PATCH",
            "text/plain",
            r#"{"spec":{}}"#,
            415,
            "unsupported_media_type",
            None,
        ),
    ];
    for (method, content_type, body, want, code, key) in bad {
        let (status, error) = call(&k, method, &item, &operator, Some((content_type, body)));
        assert_eq!(
            (status, error["code"].as_str()),
            (*want, Some(*code)),
            "{body}: {error}"
        );
        assert_eq!(error["key"].as_str(), *key, "{body}: {error}");
        if *want == 409 {
            assert_eq!(error["currentResourceVersion"], rv2.as_str(), "{error}");
        }
    }
    let (status, error) = call(
        &k,
        "POST",
        base,
        &operator,
        Some((JSON, &group("Not_A_Label", &["192.0.2.1"]))),
    );
    assert_eq!(
        (status, error["key"].as_str()),
        (400, Some("metadata.name")),
        "{error}"
    );
    let huge = group("huge", &vec!["192.0.2.1"; 120_000]);
    assert_eq!(
        call(&k, "POST", base, &operator, Some((JSON, &huge))).1["code"],
        "too_large"
    );
    let (_, unchanged) = call(&k, "GET", &item, &viewer, None);
    assert_eq!(
        version(&unchanged),
        rv2,
        "no refused request changed the object"
    );
    assert_eq!(
        call(&k, "GET", &format!("{base}/huge"), &viewer, None).0,
        404
    );

    // A label-only patch keeps the generation; a spec change bumps it.
    let (status, labelled) = call(
        &k,
        "PATCH",
        &item,
        &operator,
        Some((
            "application/merge-patch+json",
            r#"{"metadata":{"labels":{"tier":"a"}}}"#,
        )),
    );
    assert_eq!(status, 200, "{labelled}");
    assert_eq!(labelled["metadata"]["generation"], 1);
    assert_eq!(
        labelled["metadata"]["labels"],
        json!({"site": "lab", "tier": "a"})
    );
    let mut replaced = labelled.clone();
    replaced["spec"] = json!({ "clients": ["198.51.100.0/24"], "clientIds": ["lab"] });
    let (status, updated) = call(
        &k,
        "PUT",
        &item,
        &operator,
        Some((JSON, &replaced.to_string())),
    );
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["metadata"]["generation"], 2);

    // Delete: a stale precondition conflicts, then it goes.
    let stale = format!("{item}?resourceVersion={rv1}");
    assert_eq!(
        call(&k, "DELETE", &stale, &operator, None).1["code"],
        "conflict"
    );
    let (status, deleted) = call(&k, "DELETE", &item, &operator, None);
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(call(&k, "GET", &item, &viewer, None).1["code"], "not_found");

    // The watch saw the patch, the update and the delete, in that order.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let line = lines.next().expect("a watch event").expect("readable");
        let event: Value = serde_json::from_str(&line).expect("one JSON object per line");
        seen.push((
            event["type"].as_str().unwrap().to_owned(),
            event["object"]["metadata"]["generation"]
                .as_u64()
                .unwrap_or(0),
        ));
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(
        seen,
        [
            ("MODIFIED".into(), 1),
            ("MODIFIED".into(), 2),
            ("DELETED".into(), 2)
        ]
    );

    // The audit log names the tokens that wrote; a viewer may not read it.
    assert_eq!(call(&k, "GET", "/api/v1/audit", &viewer, None).0, 403);
    let (status, audit) = call(
        &k,
        "GET",
        "/api/v1/audit?kind=ClientGroup&name=lab",
        &operator,
        None,
    );
    assert_eq!(status, 200, "{audit}");
    let verbs: Vec<(&str, &str)> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["verb"].as_str().unwrap(), r["actor"].as_str().unwrap()))
        .collect();
    let op_id = format!("token:{}", &operator[4..12]);
    let admin_id = format!("token:{}", &admin[4..12]);
    assert_eq!(
        verbs,
        [
            ("create", op_id.as_str()),
            ("updateStatus", admin_id.as_str()),
            ("update", op_id.as_str()),
            ("update", op_id.as_str()),
            ("delete", op_id.as_str()),
        ]
    );
    let (status, error) = call(&k, "GET", "/api/v1/audit?since=yesterday", &operator, None);
    assert_eq!((status, error["key"].as_str()), (400, Some("since")));
    std::thread::sleep(Duration::from_millis(10));
}

/// `kudurru ARGS` against `k`'s API with `token`: (exit code, stdout, stderr).
fn kudurru(k: &Kudurru, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(kudurru_e2e::kudurru_bin())
        .args(args)
        .args(["--api", &format!("http://{}", k.api), "--token", token])
        .output()
        .expect("kudurru runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn apply_get_disable_delete_from_the_command_line_and_the_audit_chain_verifies() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let operator = k.token("operator", None);
    let dir = k.data_dir.join("objects-in");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("groups.toml");
    let write = |b_clients: &str| {
        std::fs::write(
            &file,
            format!(
                "[[object]]\nkind = \"ClientGroup\"\nmetadata = {{ name = \"a\", labels = {{ site = \"x\" }} }}\nspec = {{ clients = [\"192.0.2.0/24\"] }}\n\n[[object]]\nkind = \"ClientGroup\"\n[object.metadata]\nname = \"b\"\n[object.spec]\nclients = [{b_clients}]\n"
            ),
        )
        .unwrap();
    };
    write("\"198.51.100.1\"");
    let dir_arg = dir.to_str().unwrap();
    let apply = |k: &Kudurru| kudurru(k, &operator, &["apply", "-f", dir_arg]);
    assert_eq!(
        apply(&k).1,
        "clientgroup/a created\nclientgroup/b created\n"
    );
    assert_eq!(
        apply(&k).1,
        "clientgroup/a unchanged\nclientgroup/b unchanged\n"
    );
    write("\"198.51.100.1\", \"198.51.100.2\"");
    assert_eq!(
        apply(&k).1,
        "clientgroup/a unchanged\nclientgroup/b configured\n"
    );

    let (code, table, _) = kudurru(&k, &operator, &["get", "clientgroups"]);
    assert_eq!(code, 0);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert_eq!(
        (rows[0][0], rows[0][3], rows[0][4]),
        ("a", "yes", "site=x"),
        "{table}"
    );
    assert_eq!(
        (rows[1][0], rows[1][1]),
        ("b", "2"),
        "generation 2 after the change: {table}"
    );
    // What `get -o toml` prints, `apply` reads back as unchanged.
    let (_, toml_out, _) = kudurru(&k, &operator, &["get", "clientgroup", "a", "-o", "toml"]);
    std::fs::write(dir.join("groups.toml"), toml_out).unwrap();
    assert_eq!(apply(&k).1, "clientgroup/a unchanged\n");

    assert_eq!(
        kudurru(&k, &operator, &["disable", "clientgroup", "a"]).1,
        "clientgroup/a disabled\n"
    );
    // The list manager marks it (a status write of its own, audited too).
    let shows = |k: &Kudurru, text: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (_, toml_out, _) =
                kudurru(k, &operator, &["get", "clientgroup", "a", "-o", "json"]);
            if toml_out.contains(text) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never showed {text}: {toml_out}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    shows(&k, "\"reason\": \"Disabled\"");
    let (_, table, _) = kudurru(&k, &operator, &["get", "clientgroups", "a"]);
    assert!(
        table.lines().nth(1).unwrap().split_whitespace().nth(3) == Some("no"),
        "{table}"
    );
    assert_eq!(
        kudurru(&k, &operator, &["enable", "clientgroup", "a"]).1,
        "clientgroup/a enabled\n"
    );
    shows(&k, "\"reason\": \"Compiled\"");
    assert_eq!(
        kudurru(&k, &operator, &["delete", "clientgroups", "b"]).1,
        "clientgroup/b deleted\n"
    );
    let (code, _, err) = kudurru(&k, &operator, &["delete", "clientgroups", "b"]);
    assert_eq!(code, 1);
    assert!(err.contains("404 not_found"), "{err}");
    let (code, _, err) = kudurru(&k, &operator, &["get", "pods"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown kind \"pods\""), "{err}");
    let viewer = k.token("viewer", None);
    let (code, _, err) = kudurru(&k, &viewer, &["delete", "clientgroups", "a"]);
    assert_eq!(code, 1);
    assert!(err.contains("403 forbidden"), "{err}");

    // The audit chain of the running server's store verifies, read-only.
    let out = Command::new(kudurru_e2e::kudurru_bin())
        .args(["audit", "verify", "--data-dir"])
        .arg(&k.data_dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Six writes of the test's, and the list manager's status writes on the group it
    // disabled and enabled again (Disabled, then Ready).
    assert!(
        text.contains("the audit chain is intact: 8 records, 1 to 8"),
        "{text}"
    );
}
