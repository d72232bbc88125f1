//! The dashboard in a real browser: tests/browser/dashboard.py (Playwright on Debian's
//! Chromium, headless, with axe-core) against the real binary with a local upstream, a block
//! list, a settings file and viewer and admin tokens. The script drives every scenario of issue
//! 39 (sign in, live QPS under load, disable a list and dig, query log and "why blocked",
//! settings dry run and rollback, field errors, viewer without write controls and a refused
//! forged write, sign out, axe on every page); this test asserts its exit status and prints
//! its output. `.ci/test-deps` installs Chromium, Playwright and axe-playwright-python.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use kudurru_e2e::{Kudurru, TestUpstream, python, wait_timeout};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser/dashboard.py")
}

#[test]
fn dashboard_in_chromium() {
    let chromium = std::env::var("KUDURRU_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "{chromium} is missing: run .ci/test-deps (apt install chromium)"
    );
    let modules = Command::new(python())
        .args(["-c", "import playwright, axe_playwright_python, dns"])
        .output()
        .expect("the venv's python runs");
    assert!(
        modules.status.success(),
        "{} lacks playwright, axe-playwright-python or dnspython: run .ci/test-deps\n{}",
        python().display(),
        String::from_utf8_lossy(&modules.stderr)
    );
    let upstream = TestUpstream::start();
    let dir = std::env::temp_dir().join(format!("kudurru-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let settings = dir.join("settings.toml");
    std::fs::write(&settings, "[cache]\nmaxTTL = 300\n").unwrap();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_SETTINGS_FILE", settings.to_str().unwrap())
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .start();
    let admin = k.token("admin", None);
    let viewer = k.token("viewer", None);
    // Screenshots go where UPDATE_SCREENSHOTS points (docs/dashboard to refresh the docs').
    let shots = std::env::var("UPDATE_SCREENSHOTS").ok();
    let mut cmd = Command::new(python());
    cmd.arg(script())
        .env("KUDURRU_URL", format!("http://{}/", k.api))
        .env("KUDURRU_DNS", k.addr.to_string())
        .env("KUDURRU_OPS", format!("http://{}/", k.ops))
        .env("KUDURRU_ADMIN", &admin)
        .env("KUDURRU_VIEWER", &viewer)
        .env("KUDURRU_SETTINGS_FILE", &settings)
        .env("KUDURRU_CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(shots) = &shots {
        cmd.env("KUDURRU_SHOTS", shots);
    }
    let mut child = cmd.spawn().expect("the venv's python runs");
    // Read both pipes on threads so a chatty script never blocks on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let status = wait_timeout(&mut child, Duration::from_secs(600));
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    println!("{stdout}");
    eprintln!("{stderr}");
    let status = status.expect("the browser tests finish within 10 minutes");
    assert!(
        status.success(),
        "browser tests failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
