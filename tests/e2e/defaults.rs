//! What an operator gets without choosing anything: the sample configuration the package
//! installs, the man pages and shell completions, and kudurru-bench's default query pool.

use std::path::PathBuf;
use std::process::Command;

use kudurru_e2e::{Scratch, kudurru_bin};

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
