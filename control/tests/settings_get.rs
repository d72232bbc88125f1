//! `kudurru settings get` against a golden file: every key, its effective value, the layer it
//! came from and the restart marker, for a node file, a settings file, an environment variable
//! and a flag at once. Regenerate with `UPDATE_GOLDEN=1 cargo test -p kudurru-control --test
//! settings_get` after a deliberate change, and review the diff.

use std::path::PathBuf;
use std::process::Command;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

#[test]
fn settings_get_prints_values_sources_and_restart_markers() {
    let dir = std::env::temp_dir().join(format!("kudurru-settings-get-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let settings = dir.join("settings.toml");
    std::fs::write(
        &settings,
        "upstreams = [\"udp://192.0.2.53:53\"]\n[cache]\nmaxEntries = 5000\nminTTL = 20\n[ratelimit]\nqps = 50\n",
    )
    .unwrap();
    let node = dir.join("node.toml");
    std::fs::write(
        &node,
        format!(
            "settingsFile = \"{}\"\n[server]\nlisten = [\"127.0.0.1:5300\"]\nidentity = \"edge-1\"\n[cache]\nmaxEntries = 10\nmaxTTL = 600\n",
            settings.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kudurru"))
            .args(["settings", "get"])
            .args(args)
            .args(["--config", node.to_str().unwrap(), "--log-level", "debug"])
            .env_remove("KUDURRU_SETTINGS_FILE")
            .env("KUDURRU_CACHE__MINTTL", "30")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .replace(&settings.display().to_string(), "SETTINGS_FILE")
    };
    let all = run(&[]);
    let path = golden("settings_get.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &all).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap();
    assert_eq!(all, expected, "golden file differs");
    assert_eq!(
        run(&["cache.minttl"]),
        "  cache.minTTL                 env            30\n"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kudurru"))
        .args(["settings", "get", "cache.nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no key \"cache.nope\""));
}
