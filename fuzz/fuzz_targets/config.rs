//! Arbitrary text as a TOML node file and as a settings file: never panics; whatever parses
//! either validates or names a key, and a settings file never carries a node-scope key.
#![no_main]

use std::path::Path;

use kudurru_control::cli::ServeArgs;
use kudurru_control::config::{ConfigError, Scope};
use kudurru_control::layers::{FileLayer, Inputs};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(file) = FileLayer::parse(Path::new("fuzz.toml"), text) else {
        return;
    };
    let _ = file.config.validate();
    // As a settings file: layered over the defaults, with the same rules as a reload.
    let sharable = file
        .keys
        .iter()
        .all(|k| k.scope == Scope::Cluster && !k.host_only);
    let inputs = Inputs {
        node: None,
        env: Vec::new(),
        ignored_env: Vec::new(),
        flags: ServeArgs::default(),
    };
    if sharable {
        if let Ok((config, _)) = inputs.layer(Some(&file)) {
            match config.validate() {
                Ok(_) | Err(ConfigError::Value { .. }) => {}
                Err(other) => panic!("unexpected error kind: {other}"),
            }
        }
    }
});
