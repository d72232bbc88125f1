//! Arbitrary text as a node file and as a settings file for `kudurru config check`: never
//! panics; every problem names the file; a line it names exists in the text; a file without
//! problems is one `serve` accepts (it parses as a layer, and as a settings file it holds
//! cluster-scope keys only).
#![no_main]

use std::path::Path;

use kudurru_control::check::{file_problems, line_of};
use kudurru_control::config::Scope;
use kudurru_control::layers::FileLayer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let lines = text.lines().count();
    for settings_file in [false, true] {
        let problems = file_problems(Path::new("f.toml"), text, settings_file);
        for problem in &problems {
            assert!(problem.place.starts_with("f.toml"), "{problem}");
            if let Some(line) = problem.place.strip_prefix("f.toml:") {
                let line: usize = line.parse().expect("a line number");
                assert!(
                    line >= 1 && line <= lines.max(1),
                    "{problem} of {lines} lines"
                );
            }
        }
        if problems.is_empty() {
            let layer = FileLayer::parse(Path::new("f.toml"), text)
                .unwrap_or_else(|e| panic!("config check passed a file serve refuses: {e}"));
            if settings_file {
                assert!(
                    layer
                        .keys
                        .iter()
                        .all(|k| k.scope == Scope::Cluster && !k.host_only)
                );
            }
        }
    }
    if let Some(line) = line_of(text, "cache.maxTTL") {
        assert!(line >= 1 && line <= lines);
    }
});
