//! Arbitrary environment variables: never panics; variables without the KUDURRU_ prefix are
//! ignored, other software's KUDURRU_ variables are set aside, and what layers either validates
//! or names the key (or the variable) at fault.
#![no_main]

use kudurru_control::cli::ServeArgs;
use kudurru_control::layers::Inputs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|vars: Vec<(String, String)>| {
    let vars: Vec<(String, String)> = vars.into_iter().take(16).collect();
    let Ok(inputs) = Inputs::capture(&ServeArgs::default(), vars.clone()) else {
        return;
    };
    for (name, _) in &inputs.env {
        assert!(name.starts_with("KUDURRU_"));
    }
    for name in &inputs.ignored_env {
        // Set aside: the part after the prefix has no `__` (`KUDURRU__X` is `_X`).
        let path = name
            .strip_prefix("KUDURRU_")
            .expect("only KUDURRU_ variables are kept");
        assert!(!path.contains("__"), "{name}");
    }
    if let Ok((config, _)) = inputs.layer(None) {
        let _ = config.validate();
    }
});
