//! What an operator gets without choosing anything: the sample configuration the package
//! installs, the man pages and shell completions, and kudurru-bench's default query pool.

use std::path::PathBuf;
use std::process::Command;

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, bench_bin, kudurru_bin};
use serde_json::Value;

/// kudurru-bench's default `--suffix`.
const DEFAULT_SUFFIX: &str = "kudurru-bench.example.";

fn kudurru(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(kudurru_bin())
        .args(args)
        .output()
        .expect("kudurru runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_packaged_sample_config_passes_config_check() {
    let sample = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/kudurru.toml");
    let (ok, stdout, stderr) = kudurru(&["config", "check", "--config", sample.to_str().unwrap()]);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout, "ok\n");
    // It listens on loopback only until the operator says otherwise.
    let (ok, shown, stderr) = kudurru(&["config", "show", "--config", sample.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let listen: Vec<&str> = shown
        .lines()
        .skip_while(|line| *line != "listen = [")
        .skip(1)
        .take_while(|line| *line != "]")
        .map(str::trim)
        .collect();
    assert_eq!(
        listen,
        [r#""127.0.0.1:5300","#, r#""[::1]:5300","#],
        "{shown}"
    );
}

#[test]
fn completions_for_every_shell_and_a_man_page_per_subcommand() {
    for (shell, marker) in [
        ("bash", "complete -F _kudurru"),
        ("zsh", "#compdef kudurru"),
        ("fish", "complete -c kudurru"),
    ] {
        let (ok, script, stderr) = kudurru(&["completions", shell]);
        assert!(ok, "{shell}: {stderr}");
        assert!(script.contains(marker), "{shell}: no `{marker}`");
        assert!(script.contains("serve"), "{shell}: no subcommands");
    }
    let (ok, _, stderr) = kudurru(&["completions", "tcsh"]);
    assert!(!ok && stderr.contains("invalid value"), "{stderr}");

    let dir = Scratch::new("man-pages");
    let pages = dir.join("man1");
    let (ok, _, stderr) = kudurru(&["man", pages.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    for page in [
        "kudurru.1",
        "kudurru-serve.1",
        "kudurru-config-check.1",
        "kudurru-token-create.1",
        "kudurru-completions.1",
    ] {
        let text =
            std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH "), "{page} is not a man page");
    }
    let serve = std::fs::read_to_string(pages.join("kudurru-serve.1")).unwrap();
    assert!(serve.contains("\\-\\-config"), "{serve}");
}

/// Regression: the default pool was under `kudurru-bench.test.`, which kudurru answers itself
/// (RFC 6761, NXDOMAIN), so a default run measured local NXDOMAIN answers and never the cache.
#[test]
fn bench_default_pool_is_answered_by_the_cache_and_the_upstream() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let target = format!("udp://{}", k.addr);
    let output = Command::new(bench_bin("kudurru-bench"))
        .args([&target, "--duration", "2s", "--concurrency", "50"])
        .args(["--json", "-"])
        .output()
        .expect("kudurru-bench runs");
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kudurru-bench failed: {summary}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    let sent = report["sent"].as_u64().unwrap();
    assert!(
        sent > 2000,
        "every pool name asked more than once: {report}"
    );
    assert_eq!(report["answered"].as_u64(), Some(sent), "{report}");
    assert_eq!(
        report["rcodes"]["NOERROR"].as_u64(),
        Some(sent),
        "every answer NOERROR, none NXDOMAIN: {report}"
    );
    // The output says what the default measures.
    let asks = report["questions"].as_str().unwrap();
    assert!(
        asks.starts_with("1000 names p0…p999.kudurru-bench.example. (A)")
            && asks.contains("cache hits"),
        "{asks}"
    );
    assert!(
        summary.contains(&format!("asks        {asks}")),
        "{summary}"
    );
    // Each pool name went upstream once, and the rest came from the cache.
    assert_eq!(upstream.names_under(DEFAULT_SUFFIX), 1000);
    for i in [0, 500, 999] {
        assert_eq!(upstream.total(&format!("p{i}.{DEFAULT_SUFFIX}")), 1);
    }
    // Counters are copied from the cores once a second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while k.metric_sum("kudurru_cache_hits_total") == 0.0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(k.metric_sum("kudurru_cache_hits_total") > 0.0);
}
