//! The dashboard's server side through curl against the real binary: embedded assets (types,
//! ETag/304, gzip), the security headers, sign-in for a session cookie (flags, `Secure` on
//! HTTPS), CSRF and Origin checks, sign-out and revocation, the sign-in rate limit, settings
//! dry-run, history and rollback, and the tokens API.

use std::net::SocketAddr;
use std::process::Command;

use kudurru_e2e::{Kudurru, Scratch, TestUpstream};
use serde_json::{Value, json};

/// One curl exchange: status, headers (names lowercased), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A request with curl: `base` is `http://addr` or `https://addr`; `ca` trusts a certificate.
fn exchange(
    base: &str,
    ca: Option<&std::path::Path>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-i", "--max-time", "10", "-X", method]);
    if let Some(ca) = ca {
        cmd.arg("--cacert").arg(ca);
    }
    for (name, value) in headers {
        cmd.arg("-H").arg(format!("{name}: {value}"));
    }
    if let Some(body) = body {
        cmd.args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ]);
    }
    let out = cmd
        .arg(format!("{base}{path}"))
        .output()
        .expect("curl runs");
    let raw = out.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header block: {}", String::from_utf8_lossy(&out.stderr)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

/// A client of one server over plain HTTP.
struct Client {
    base: String,
    host: String,
}

impl Client {
    fn new(api: SocketAddr) -> Self {
        Self {
            base: format!("http://{api}"),
            host: api.to_string(),
        }
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Answer {
        exchange(&self.base, None, method, path, headers, body)
    }

    fn bearer(&self, token: &str, method: &str, path: &str, body: Option<&str>) -> Answer {
        let auth = format!("Bearer {token}");
        self.send(method, path, &[("Authorization", &auth)], body)
    }

    fn sign_in(&self, token: &str) -> Answer {
        self.send(
            "POST",
            "/api/v1/session",
            &[],
            Some(&json!({ "token": token }).to_string()),
        )
    }
}

/// The session cookie's `name=value` from a sign-in's `Set-Cookie`.
fn cookie_of(answer: &Answer) -> String {
    let set = answer.header("set-cookie").expect("Set-Cookie");
    set.split(';').next().unwrap().trim().to_owned()
}

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn assert_security_headers(answer: &Answer, what: &str) {
    assert_eq!(
        answer.header("content-security-policy"),
        Some(CSP),
        "{what}"
    );
    assert_eq!(
        answer.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(
        answer.header("referrer-policy"),
        Some("no-referrer"),
        "{what}"
    );
    assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{what}");
}

#[test]
fn dashboard_assets_are_served_with_types_etags_gzip_and_security_headers() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let c = Client::new(k.api);
    let index = c.send("GET", "/", &[], None);
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(index.header("cache-control"), Some("no-cache"));
    assert!(index.text().contains("<html"), "{}", index.text());
    assert_security_headers(&index, "GET /");
    let etag = index.header("etag").expect("an ETag").to_owned();
    let again = c.send("GET", "/", &[("If-None-Match", &etag)], None);
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    let same = c.send("GET", "/ui/index.html", &[], None);
    assert_eq!((same.status, same.body.clone()), (200, index.body.clone()));
    assert_eq!(same.header("cache-control"), Some("no-cache"));
    // Every file the page links under /ui/: its type by extension, cached five minutes.
    let page = index.text();
    for link in page.split(['"', '\'']).filter(|s| s.starts_with("/ui/")) {
        let asset = c.send("GET", link, &[], None);
        assert_eq!(asset.status, 200, "{link}");
        let expected = match link.rsplit('.').next() {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            Some("png") => "image/png",
            Some("ico") => "image/x-icon",
            Some("json") => "application/json",
            Some("woff2") => "font/woff2",
            _ => continue,
        };
        assert_eq!(asset.header("content-type"), Some(expected), "{link}");
        assert_eq!(asset.header("cache-control"), Some("max-age=300"), "{link}");
        assert_security_headers(&asset, link);
    }
    let zipped = c.send("GET", "/", &[("Accept-Encoding", "gzip")], None);
    if index.body.len() > 200 {
        assert_eq!(zipped.header("content-encoding"), Some("gzip"));
        assert_ne!(zipped.header("etag"), Some(etag.as_str()));
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2_free_gunzip(&zipped.body), &mut plain).unwrap();
        assert_eq!(plain, index.body, "the gzipped page is the page");
    }
    let missing = c.send("GET", "/ui/nope.js", &[], None);
    assert_eq!(
        (missing.status, missing.json()["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_security_headers(&missing, "a 404");
    assert_eq!(c.send("GET", "/etc/passwd", &[], None).status, 404);
    assert_eq!(c.send("GET", "/ui/../Cargo.toml", &[], None).status, 404);
    let post = c.send("POST", "/", &[], Some("{}"));
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );
    // The API's answers carry the same headers, refusals included.
    let viewer = k.token("viewer", None);
    let settings = c.bearer(&viewer, "GET", "/api/v1/settings", None);
    assert_eq!(settings.status, 200);
    assert_security_headers(&settings, "GET /api/v1/settings");
    assert_security_headers(&c.send("GET", "/api/v1/settings", &[], None), "a 401");

    // The Tools page's lookup goes through the node's own UDP listener.
    let lookup = c.bearer(&viewer, "GET", "/api/v1/lookup?name=localhost&type=A", None);
    assert_eq!(lookup.status, 200, "{}", lookup.text());
    let body = lookup.json();
    assert_eq!(
        (&body["rcode"], &body["server"]),
        (&json!("NOERROR"), &json!(k.addr.to_string()))
    );
    assert_eq!(body["answers"][0]["type"], "A");
    assert_eq!(body["answers"][0]["data"], "127.0.0.1");
    assert!(body["flags"].as_array().unwrap().contains(&json!("qr")));
    let bad = c.bearer(
        &viewer,
        "GET",
        "/api/v1/lookup?name=localhost&type=NOPE",
        None,
    );
    assert_eq!((bad.status, &bad.json()["key"]), (400, &json!("type")));
    assert_eq!(
        c.send("GET", "/api/v1/lookup?name=localhost", &[], None)
            .status,
        401
    );
}

/// gzip decoding with `gzip -dc` (a real peer; the e2e crate has no inflate crate).
fn flate2_free_gunzip(bytes: &[u8]) -> std::io::Cursor<Vec<u8>> {
    use std::io::Write as _;
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "gzip -dc failed");
    std::io::Cursor::new(out.stdout)
}

#[test]
fn dashboard_sessions_csrf_settings_versions_and_tokens() {
    let upstream = TestUpstream::start();
    let dir = Scratch::new("dashboard-api");
    let file = dir.join("settings.toml");
    std::fs::write(&file, "[cache]\nmaxTTL = 3600\n").unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SETTINGS_FILE", file.to_str().unwrap())
        .start();
    let c = Client::new(k.api);
    let admin = k.token("admin", None);
    let operator = k.token("operator", None);
    let viewer = k.token("viewer", None);

    // Sign-in: the cookie's flags, the session's JSON; no Secure on plain HTTP.
    let signed = c.sign_in(&operator);
    assert_eq!(signed.status, 200, "{}", signed.text());
    let set = signed.header("set-cookie").unwrap().to_owned();
    for flag in ["Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=43200"] {
        assert!(set.split("; ").any(|f| f == flag), "{flag} in {set}");
    }
    assert!(!set.contains("Secure"), "{set}");
    let session = signed.json();
    assert_eq!(session["role"], "operator");
    assert_eq!(session["tokenId"].as_str(), operator.split('_').nth(1));
    assert!(
        session["expiresAt"].as_str().unwrap().ends_with('Z'),
        "{session}"
    );
    let csrf = session["csrfToken"].as_str().unwrap().to_owned();
    assert_eq!(csrf.len(), 64);
    let cookie = cookie_of(&signed);
    let read = c.send("GET", "/api/v1/session", &[("Cookie", &cookie)], None);
    assert_eq!(
        (read.status, &read.json()["csrfToken"]),
        (200, &json!(csrf))
    );
    let by_bearer = c.bearer(&viewer, "GET", "/api/v1/session", None).json();
    assert_eq!(
        (&by_bearer["role"], &by_bearer["via"]),
        (&json!("viewer"), &json!("bearer"))
    );
    assert!(by_bearer.get("csrfToken").is_none());
    let granted = |v: &Value, p: &str| v["permissions"].as_array().unwrap().contains(&json!(p));
    assert!(granted(&by_bearer, "settings.read") && !granted(&by_bearer, "settings.write"));
    assert!(granted(&session, "settings.write") && !granted(&session, "tokens.admin"));
    // A sign-in from another origin (login CSRF): 403; from the own origin: fine.
    let body = json!({ "token": operator }).to_string();
    let foreign = c.send(
        "POST",
        "/api/v1/session",
        &[("Origin", "http://evil.example")],
        Some(&body),
    );
    assert_eq!((foreign.status, foreign.header("set-cookie")), (403, None));
    let own = format!("http://{}", c.host);
    assert_eq!(
        c.send(
            "POST",
            "/api/v1/session",
            &[("Origin", own.as_str())],
            Some(&body)
        )
        .status,
        200
    );
    // A bad token: 401, no cookie.
    let bad = c.sign_in("kdr_00000000_nope");
    assert_eq!(bad.status, 401);
    assert!(bad.header("set-cookie").is_none());
    assert_eq!(c.send("GET", "/api/v1/session", &[], None).status, 401);

    // Cookie writes: the CSRF header and the own Origin are needed.
    let patch = r#"{"cache":{"maxTTL":1800}}"#;
    let own_origin = format!("http://{}", c.host);
    let with = |extra: &[(&str, &str)]| {
        let mut headers = vec![("Cookie", cookie.as_str())];
        headers.extend_from_slice(extra);
        c.send("PATCH", "/api/v1/settings", &headers, Some(patch))
    };
    let refused = with(&[]);
    assert_eq!(
        (refused.status, &refused.json()["error"]),
        (403, &json!("csrf"))
    );
    assert_eq!(with(&[("X-CSRF-Token", &"0".repeat(64))]).status, 403);
    let foreign = with(&[("X-CSRF-Token", &csrf), ("Origin", "http://evil.example")]);
    assert_eq!(
        (foreign.status, &foreign.json()["code"]),
        (403, &json!("csrf"))
    );
    let accepted = with(&[("X-CSRF-Token", &csrf), ("Origin", &own_origin)]);
    assert_eq!(accepted.status, 200, "{}", accepted.text());
    assert_eq!(
        accepted.json()["changes"],
        json!([{"key": "cache.maxTTL", "old": 3600, "new": 1800, "source": "settings-file", "restartRequired": false}])
    );
    let first_version = accepted.json()["version"]
        .as_u64()
        .expect("a version number");
    // A viewer's session may read but not write.
    let viewer_signed = c.sign_in(&viewer);
    let viewer_cookie = cookie_of(&viewer_signed);
    let viewer_csrf = viewer_signed.json()["csrfToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let viewer_headers = [
        ("Cookie", viewer_cookie.as_str()),
        ("X-CSRF-Token", viewer_csrf.as_str()),
    ];
    assert_eq!(
        c.send("GET", "/api/v1/settings", &viewer_headers, None)
            .status,
        200
    );
    let forbidden = c.send("PATCH", "/api/v1/settings", &viewer_headers, Some(patch));
    assert_eq!(
        (forbidden.status, &forbidden.json()["code"]),
        (403, &json!("forbidden"))
    );

    // Dry run: the diff with restart marks; nothing applied, nothing written.
    let file_before = std::fs::read(&file).unwrap();
    let values_before = c.bearer(&viewer, "GET", "/api/v1/settings", None).json()["values"].clone();
    let dry = c.bearer(
        &operator,
        "PATCH",
        "/api/v1/settings?dryRun=true",
        Some(r#"{"cache.maxTTL": 900, "ratelimit": {"ipv4Prefix": 20}, "cache.minTTL": 0}"#),
    );
    assert_eq!(dry.status, 200, "{}", dry.text());
    assert_eq!(
        dry.json(),
        json!({"dryRun": true, "restartRequired": true, "changes": [
            {"key": "cache.maxTTL", "old": 1800, "new": 900, "source": "settings-file", "restartRequired": false},
            {"key": "ratelimit.ipv4Prefix", "old": 24, "new": 20, "source": "default", "restartRequired": true},
        ]})
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        file_before,
        "the file is unchanged"
    );
    assert_eq!(
        c.bearer(&viewer, "GET", "/api/v1/settings", None).json()["values"],
        values_before
    );
    let invalid = c.bearer(
        &operator,
        "PATCH",
        "/api/v1/settings?dryRun=true",
        Some(r#"{"cache.maxTTL": "x"}"#),
    );
    let invalid_real = c.bearer(
        &operator,
        "PATCH",
        "/api/v1/settings",
        Some(r#"{"cache.maxTTL": "x"}"#),
    );
    assert_eq!(
        (invalid.status, invalid.json()),
        (invalid_real.status, invalid_real.json())
    );
    assert_eq!(invalid.status, 400);

    // History and rollback.
    let second = c.bearer(
        &admin,
        "PATCH",
        "/api/v1/settings",
        Some(r#"{"cache.maxTTL": 600}"#),
    );
    assert_eq!(second.status, 200, "{}", second.text());
    let history = c
        .bearer(&viewer, "GET", "/api/v1/settings/history", None)
        .json();
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{history}");
    assert_eq!(
        versions[0]["actor"],
        format!("token:{}", admin.split('_').nth(1).unwrap())
    );
    assert_eq!(versions[0]["changes"][0]["new"], 600);
    assert_eq!(versions[1]["version"], first_version);
    assert_eq!(
        versions[1]["actor"],
        format!("token:{}", operator.split('_').nth(1).unwrap())
    );
    let body = json!({ "version": first_version }).to_string();
    let dry_rollback = c.bearer(
        &operator,
        "POST",
        "/api/v1/settings/rollback?dryRun=true",
        Some(&body),
    );
    assert_eq!(
        dry_rollback.json()["changes"][0]["new"],
        1800,
        "{}",
        dry_rollback.text()
    );
    assert_eq!(
        c.bearer(&viewer, "GET", "/api/v1/settings", None).json()["values"]["cache"]["maxTTL"],
        600
    );
    assert_eq!(
        c.bearer(&viewer, "POST", "/api/v1/settings/rollback", Some(&body))
            .status,
        403
    );
    let rolled = c.bearer(&operator, "POST", "/api/v1/settings/rollback", Some(&body));
    assert_eq!(rolled.status, 200, "{}", rolled.text());
    assert_eq!(
        c.bearer(&viewer, "GET", "/api/v1/settings", None).json()["values"]["cache"]["maxTTL"],
        1800
    );
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("maxTTL = 1800")
    );
    let history = c
        .bearer(&viewer, "GET", "/api/v1/settings/history", None)
        .json();
    assert_eq!(
        history["versions"].as_array().unwrap().len(),
        3,
        "the rollback is a version"
    );
    assert_eq!(history["versions"][0]["changes"][0]["old"], 600);
    // The versions are audit records of Settings/cluster, and the hash chain holds.
    let audit = c
        .bearer(
            &operator,
            "GET",
            "/api/v1/audit?kind=Settings&name=cluster",
            None,
        )
        .json();
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 3, "{audit}");
    assert_eq!(records[0]["seq"], first_version);
    let verify = Command::new(kudurru_e2e::kudurru_bin())
        .args(["audit", "verify", "--data-dir"])
        .arg(&k.data_dir)
        .env_remove("KUDURRU_SETTINGS_FILE")
        .output()
        .unwrap();
    let verified = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success() && verified.contains("the audit chain is intact"),
        "{verified}"
    );
    let newest = c
        .bearer(&viewer, "GET", "/api/v1/settings/history?limit=1", None)
        .json();
    assert_eq!(newest["versions"].as_array().unwrap().len(), 1);
    assert_eq!(newest["versions"][0], history["versions"][0]);
    let out_of_range = c.bearer(&viewer, "GET", "/api/v1/settings/history?limit=0", None);
    assert_eq!(
        (out_of_range.status, &out_of_range.json()["key"]),
        (400, &json!("limit"))
    );
    let missing = c.bearer(
        &operator,
        "POST",
        "/api/v1/settings/rollback",
        Some(r#"{"version": 999999}"#),
    );
    assert_eq!(missing.status, 404);
    let malformed = c.bearer(
        &operator,
        "POST",
        "/api/v1/settings/rollback",
        Some(r#"{"version": "one"}"#),
    );
    assert_eq!(
        (malformed.status, &malformed.json()["key"]),
        (400, &json!("version"))
    );

    // Tokens: admin only; the secret shown once; revocation ends the token and its sessions.
    assert_eq!(
        c.bearer(&operator, "GET", "/api/v1/tokens", None).status,
        403
    );
    assert_eq!(
        c.bearer(
            &operator,
            "POST",
            "/api/v1/tokens",
            Some(r#"{"name":"x","role":"viewer"}"#)
        )
        .status,
        403
    );
    let created = c.bearer(
        &admin,
        "POST",
        "/api/v1/tokens",
        Some(r#"{"name":"ci","role":"viewer"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let new_token = created.json()["token"].as_str().unwrap().to_owned();
    let new_id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        c.bearer(&new_token, "GET", "/api/v1/settings", None).status,
        200
    );
    // The command line names its tokens too, in the same file.
    let named = Command::new(kudurru_e2e::kudurru_bin())
        .args([
            "token",
            "create",
            "--role",
            "viewer",
            "--name",
            "from cli",
            "--data-dir",
        ])
        .arg(&k.data_dir)
        .env_remove("KUDURRU_SETTINGS_FILE")
        .output()
        .unwrap();
    assert!(named.status.success());
    let list = c.bearer(&admin, "GET", "/api/v1/tokens", None);
    let listed = list.json()["tokens"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 5);
    assert!(listed.iter().any(|t| t["name"] == "from cli"));
    assert!(
        listed
            .iter()
            .any(|t| t["id"] == new_id.as_str() && t["name"] == "ci" && t["role"] == "viewer")
    );
    assert!(
        !list.text().contains("sha256")
            && !list.text().contains(new_token.rsplit('_').next().unwrap())
    );
    let bad_role = c.bearer(
        &admin,
        "POST",
        "/api/v1/tokens",
        Some(r#"{"name":"x","role":"root"}"#),
    );
    assert_eq!(
        (bad_role.status, &bad_role.json()["key"]),
        (400, &json!("role"))
    );
    let new_session = cookie_of(&c.sign_in(&new_token));
    assert_eq!(
        c.send("GET", "/api/v1/session", &[("Cookie", &new_session)], None)
            .status,
        200
    );
    let revoked = c.bearer(&admin, "DELETE", &format!("/api/v1/tokens/{new_id}"), None);
    assert_eq!(revoked.status, 204);
    assert!(revoked.body.is_empty());
    assert_eq!(
        c.bearer(&new_token, "GET", "/api/v1/settings", None).status,
        401
    );
    assert_eq!(
        c.send("GET", "/api/v1/session", &[("Cookie", &new_session)], None)
            .status,
        401,
        "the revoked token's session ended"
    );
    assert_eq!(
        c.bearer(&admin, "DELETE", &format!("/api/v1/tokens/{new_id}"), None)
            .status,
        404
    );
    // Both are in the audit log: who created the token, its role and lifetime, who revoked
    // it; never its secret. The command line's token wrote nothing there.
    let audit = c.bearer(&admin, "GET", "/api/v1/audit?kind=Token", None);
    assert_eq!(audit.status, 200, "{}", audit.text());
    let admin_principal = format!("token:{}", &admin[4..12]);
    let records = audit.json()["records"].as_array().unwrap().clone();
    let of_new: Vec<(&str, &str, &Value)> = records
        .iter()
        .filter(|r| r["name"] == new_id.as_str())
        .map(|r| {
            (
                r["verb"].as_str().unwrap(),
                r["actor"].as_str().unwrap(),
                &r["patch"]["spec"],
            )
        })
        .collect();
    assert_eq!(of_new.len(), 2, "{}", audit.text());
    assert_eq!(
        (of_new[0].0, of_new[0].1),
        ("create", admin_principal.as_str())
    );
    assert_eq!(of_new[0].2["name"], "ci");
    assert_eq!(of_new[0].2["role"], "viewer");
    assert!(
        of_new[0].2["expiresAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(
        (of_new[1].0, of_new[1].1),
        ("update", admin_principal.as_str())
    );
    assert!(
        of_new[1].2["revoked"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(
        !records
            .iter()
            .any(|r| r["patch"]["spec"]["name"] == "from cli")
    );
    assert!(!audit.text().contains(new_token.rsplit('_').next().unwrap()));
    // Revoked with the command line too.
    let revoke = Command::new(kudurru_e2e::kudurru_bin())
        .args([
            "token",
            "revoke",
            viewer.split('_').nth(1).unwrap(),
            "--data-dir",
        ])
        .arg(&k.data_dir)
        .env_remove("KUDURRU_SETTINGS_FILE")
        .output()
        .unwrap();
    assert!(revoke.status.success());
    assert_eq!(
        c.send(
            "GET",
            "/api/v1/session",
            &[("Cookie", &viewer_cookie)],
            None
        )
        .status,
        401
    );

    // api.sessionTTL is hot: the next sign-in gets the new lifetime.
    let ttl = c.bearer(
        &admin,
        "PATCH",
        "/api/v1/settings",
        Some(r#"{"api.sessionTTL": "2h"}"#),
    );
    assert_eq!(ttl.status, 200, "{}", ttl.text());
    let longer = c.sign_in(&admin);
    let set = longer.header("set-cookie").unwrap();
    assert!(set.split("; ").any(|f| f == "Max-Age=7200"), "{set}");

    // Sign-out: 204, the cookie cleared, the session gone server-side.
    let no_csrf = c.send("DELETE", "/api/v1/session", &[("Cookie", &cookie)], None);
    assert_eq!(no_csrf.status, 403);
    let out = c.send(
        "DELETE",
        "/api/v1/session",
        &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)],
        None,
    );
    assert_eq!(out.status, 204);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(
        c.send("GET", "/api/v1/session", &[("Cookie", &cookie)], None)
            .status,
        401
    );
    assert_eq!(with(&[("X-CSRF-Token", &csrf)]).status, 401);

    // Failed sign-ins from one address: 10 a minute, then 429 even for a good token.
    let mut limited = None;
    for attempt in 0..12 {
        let answer = c.sign_in("kdr_00000000_wrong");
        if answer.status == 429 {
            limited = Some((attempt, answer));
            break;
        }
        assert_eq!(answer.status, 401);
    }
    // One failure above (the bad token) counts in the same window.
    let (attempt, answer) = limited.expect("the sign-ins were limited");
    assert!(attempt >= 8, "limited after {attempt}");
    assert!(answer.header("retry-after").is_some());
    assert_eq!(c.sign_in(&admin).status, 429);
    assert_eq!(
        c.bearer(&admin, "GET", "/api/v1/settings", None).status,
        200,
        "bearer requests are not limited"
    );
    live_stats_and_lameduck(&k, &c);
}

/// Answer latency and answers by source (issue 39) after `live_stats_and_lameduck`'s queries:
/// on UDP two misses, a hit, a local name and a refusal; on TCP one miss. They move for the
/// right transport and source in `GET /api/v1/stats/live`, add up per core, and `/metrics`
/// renders the same counts.
fn answer_latency_and_sources(k: &Kudurru, before: &Value, after: &Value) {
    let source = |v: &Value, s: &str| v["total"]["answersBySource"][s].as_u64().unwrap();
    for (s, least) in [("upstream", 3), ("cache", 1), ("local", 1), ("other", 1)] {
        assert!(
            source(after, s) >= source(before, s) + least,
            "{s} answers: {before} {after}"
        );
    }
    let count = |v: &Value, t: Option<&str>| {
        let latency = &v["answerLatency"];
        let p = t.map_or(latency, |t| &latency["byTransport"][t]);
        p["count"].as_u64().unwrap()
    };
    assert!(count(after, None) >= count(before, None) + 6, "{after}");
    assert!(count(after, Some("udp")) >= count(before, Some("udp")) + 5);
    assert!(count(after, Some("tcp")) > count(before, Some("tcp")));
    assert_eq!(count(after, Some("doq")), count(before, Some("doq")));
    for t in [None, Some("udp"), Some("tcp")] {
        let latency = &after["answerLatency"];
        let p = t.map_or(latency, |t| &latency["byTransport"][t]);
        let (p50, p90, p99) = (
            p["p50Ms"].as_f64().unwrap(),
            p["p90Ms"].as_f64().unwrap(),
            p["p99Ms"].as_f64().unwrap(),
        );
        assert!(
            p50 > 0.0 && p50 <= p90 && p90 <= p99 && p99 <= 5000.0,
            "{t:?}: {p}"
        );
    }
    // Every answer is counted once by source and once in the histogram, and cores add up.
    let answers: u64 = ["cache", "upstream", "local", "blocked", "other"]
        .iter()
        .map(|s| source(after, s))
        .sum();
    assert_eq!(answers, count(after, None), "{after}");
    let per_core: u64 = after["perCore"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["answerLatency"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(per_core, answers, "{after}");
    // /metrics: the same counts, by core and transport / source.
    let metrics = exchange(
        &format!("http://{}", k.ops),
        None,
        "GET",
        "/metrics",
        &[],
        None,
    )
    .text();
    let sum_of = |prefix: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let rendered = sum_of("kudurru_answers_total{");
    assert!(rendered >= answers, "{rendered} < {answers}");
    assert!(sum_of("kudurru_answer_latency_seconds_count{") >= answers);
    assert!(
        metrics.contains(
            "kudurru_answer_latency_seconds_bucket{core=\"0\",transport=\"udp\",le=\"0.000025\"}"
        ),
        "the 25 µs bucket"
    );
    assert!(metrics.contains("# TYPE kudurru_answer_latency_seconds histogram"));
}

/// `GET /api/v1/stats/live` (the data plane's counters: they move after queries, `time` grows)
/// and `GET /api/v1/lameduck` (the ops listener's state, changed there from loopback).
fn live_stats_and_lameduck(k: &Kudurru, c: &Client) {
    // A fresh viewer: the test above revoked its tokens.
    let viewer = &k.token("viewer", None);
    let live = || {
        let answer = c.bearer(viewer, "GET", "/api/v1/stats/live", None);
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.json()
    };
    let before = live();
    let cores = before["cores"].as_u64().unwrap();
    assert!(cores >= 1, "{before}");
    assert_eq!(before["perCore"].as_array().unwrap().len() as u64, cores);
    for name in [
        "live1.example.com",
        "live2.example.com",
        "live1.example.com",
    ] {
        kudurru_e2e::dig(k.addr, &[name, "A"]);
    }
    kudurru_e2e::dig(k.addr, &["+tcp", "live3.example.com", "A"]);
    // Answered here: a built-in zone's name (local) and a refused CHAOS name (an error answer).
    assert_eq!(
        kudurru_e2e::dig(k.addr, &["localhost", "A"]).status,
        "NOERROR"
    );
    assert_eq!(
        kudurru_e2e::dig(k.addr, &["other.server", "TXT", "-c", "CH"]).status,
        "REFUSED"
    );
    let total = |v: &Value, key: &str| v["total"][key].as_u64().unwrap_or(0);
    let by = |v: &Value, t: &str| v["total"]["queriesByTransport"][t].as_u64().unwrap_or(0);
    let after = live();
    assert!(
        after["time"].as_f64().unwrap() > before["time"].as_f64().unwrap(),
        "{before} {after}"
    );
    assert!(by(&after, "udp") >= by(&before, "udp") + 3, "{after}");
    assert!(by(&after, "tcp") > by(&before, "tcp"), "{after}");
    assert!(
        total(&after, "queries") >= total(&before, "queries") + 4,
        "{after}"
    );
    let per_core: u64 = after["perCore"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["queries"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(per_core, total(&after, "queries"), "cores add up: {after}");
    // The cache's counters are sampled by each core (about once a second).
    crate::zones::eventually("the repeated name counted as a cache hit", || {
        let now = live();
        total(&now, "cacheHits") > total(&before, "cacheHits")
            && now["total"]["cacheHitRate"].as_f64().is_some()
    });
    assert!(
        total(&after, "upstreamQueries") >= total(&before, "upstreamQueries") + 2,
        "{after}"
    );
    let latency = &after["upstreamLatency"];
    assert!(latency["count"].as_u64().unwrap() >= 2, "{after}");
    let (p50, p99) = (
        latency["p50Ms"].as_f64().unwrap(),
        latency["p99Ms"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= 2000.0, "{latency}");
    answer_latency_and_sources(k, &before, &after);

    // Lameduck: read on the API, changed only on the ops listener.
    let lameduck = || {
        let answer = c.bearer(viewer, "GET", "/api/v1/lameduck", None);
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.json()["lameduck"].as_bool().unwrap()
    };
    assert!(!lameduck());
    let ops = format!("http://{}", k.ops);
    assert_eq!(
        exchange(&ops, None, "POST", "/lameduck", &[], None).status,
        200
    );
    assert!(lameduck());
    assert_eq!(
        c.bearer(viewer, "POST", "/api/v1/lameduck", None).status,
        405,
        "no change through the API"
    );
    assert_eq!(
        exchange(&ops, None, "DELETE", "/lameduck", &[], None).status,
        200
    );
    assert!(!lameduck());
}

#[test]
fn dashboard_session_cookie_is_secure_on_https() {
    let upstream = TestUpstream::start();
    let dir = Scratch::new("dashboard-tls");
    let (cert, key) = kudurru_e2e::cert_pair(&dir, "api");
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_API__TLSCERT", cert.to_str().unwrap())
        .env("KUDURRU_API__TLSKEY", key.to_str().unwrap())
        .env("KUDURRU_API__SESSIONTTL", "1h")
        .start();
    let base = format!("https://{}", k.api);
    let operator = k.token("operator", None);
    let body = json!({ "token": operator }).to_string();
    let signed = exchange(
        &base,
        Some(&cert),
        "POST",
        "/api/v1/session",
        &[],
        Some(&body),
    );
    assert_eq!(signed.status, 200, "{}", signed.text());
    let set = signed.header("set-cookie").unwrap();
    assert!(set.split("; ").any(|f| f == "Secure"), "{set}");
    assert!(
        set.split("; ").any(|f| f == "Max-Age=3600"),
        "api.sessionTTL: {set}"
    );
    assert_security_headers(&signed, "HTTPS sign-in");
    let cookie = cookie_of(&signed);
    let csrf = signed.json()["csrfToken"].as_str().unwrap().to_owned();
    let index = exchange(&base, Some(&cert), "GET", "/", &[], None);
    assert_eq!(index.status, 200);
    let origin = format!("https://{}", k.api);
    let patch = exchange(
        &base,
        Some(&cert),
        "PATCH",
        "/api/v1/settings",
        &[
            ("Cookie", &cookie),
            ("X-CSRF-Token", &csrf),
            ("Origin", &origin),
        ],
        Some(r#"{"cache.maxTTL": 120}"#),
    );
    assert_eq!(patch.status, 200, "{}", patch.text());
    let plain_origin = format!("http://{}", k.api);
    let refused = exchange(
        &base,
        Some(&cert),
        "PATCH",
        "/api/v1/settings",
        &[
            ("Cookie", &cookie),
            ("X-CSRF-Token", &csrf),
            ("Origin", &plain_origin),
        ],
        Some(r#"{"cache.maxTTL": 60}"#),
    );
    assert_eq!(
        refused.status, 403,
        "http:// is another origin than https://"
    );
}

/// `POST /api/v1/zones/{name}/import`: a zone file replaces a primary Zone's RecordSets (a dry
/// run lists the changes and writes nothing; a bad line is 400 naming it and changes nothing),
/// and dig sees the imported records.
#[test]
fn zone_file_import_replaces_record_sets() {
    use crate::zones::{apply, eventually};
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let admin = k.token("admin", None);
    let viewer = k.token("viewer", None);
    apply(
        &k,
        &admin,
        "zones",
        "imp",
        json!({"zone": "imp.example.", "type": "primary", "nameServers": ["ns1.imp.example."]}),
    );
    apply(
        &k,
        &admin,
        "recordsets",
        "imp-old",
        json!({"zone": "imp", "name": "old", "type": "A", "records": ["192.0.2.9"]}),
    );
    apply(
        &k,
        &admin,
        "recordsets",
        "imp-www",
        json!({"zone": "imp", "name": "www", "type": "A", "ttl": 300, "records": ["192.0.2.1"]}),
    );
    let import = |token: &str, query: &str, ctype: &str, body: &str| {
        crate::objects::call(
            &k,
            "POST",
            &format!("/api/v1/zones/imp/import{query}"),
            token,
            Some((ctype, body)),
        )
    };
    let names = |k: &Kudurru| -> Vec<String> {
        let (_, list) = crate::zones::call(k, "GET", "/api/v1/recordsets", &admin, None);
        let mut names: Vec<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let before = names(&k);
    assert_eq!(before, ["imp-old", "imp-www"]);

    // A bad line: 400 naming it; nothing changes.
    let (status, body) = import(
        &admin,
        "",
        "text/dns",
        "$ORIGIN imp.example.\nwww 300 IN A 192.0.2.1\nbad 300 IN A not-an-address\n",
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_zone_file");
    assert!(body["message"].as_str().unwrap().contains(":3"), "{body}");
    assert_eq!(names(&k), before);
    // Not a zone file's type, a viewer, an unknown zone.
    assert_eq!(import(&admin, "", "application/json", "{}").0, 415);
    assert_eq!(import(&viewer, "", "text/dns", "").0, 403);
    let (status, _) = crate::objects::call(
        &k,
        "POST",
        "/api/v1/zones/nope/import",
        &admin,
        Some(("text/dns", "")),
    );
    assert_eq!(status, 404);
    assert_eq!(import(&admin, "?dryRun=maybe", "text/dns", "").0, 400);

    let file = "$ORIGIN imp.example.\n$TTL 300\n\
        @ IN SOA ns1 hostmaster 1 3600 600 86400 300\n\
        www IN A 192.0.2.1\n\
        mail IN A 192.0.2.2\n\
        @ IN MX 10 mail\n";
    let (status, dry) = import(&admin, "?dryRun=true", "text/dns", file);
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["create"].as_array().unwrap().len(), 2, "{dry}");
    assert_eq!(dry["unchanged"], 1, "{dry}");
    assert_eq!(dry["delete"][0]["recordSet"], "imp-old", "{dry}");
    assert_eq!(
        dry["skipped"].as_array().unwrap().len(),
        1,
        "the SOA: {dry}"
    );
    assert_eq!(names(&k), before, "a dry run writes nothing");

    let (status, done) = import(&admin, "", "text/dns", file);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["dryRun"], false);
    let after = names(&k);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after.contains(&"imp-www".to_owned()) && !after.contains(&"imp-old".to_owned()));
    // The same file again: nothing to do.
    let (_, again) = import(&admin, "?dryRun=true", "text/dns", file);
    assert_eq!(
        (
            again["create"].as_array().unwrap().len(),
            again["unchanged"].as_u64()
        ),
        (0, Some(3)),
        "{again}"
    );
    eventually("the imported records answered", || {
        let mail = kudurru_e2e::dig(k.addr, &["mail.imp.example", "A"]);
        let old = kudurru_e2e::dig(k.addr, &["old.imp.example", "A"]);
        mail.answers.iter().any(|a| a.3 == "192.0.2.2") && old.status == "NXDOMAIN"
    });
    let mx = kudurru_e2e::dig(k.addr, &["imp.example", "MX"]);
    assert!(
        mx.answers.iter().any(|a| a.3 == "10 mail.imp.example."),
        "{}",
        mx.raw
    );
}
