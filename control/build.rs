//! Embeds the dashboard: every file under `ui/` becomes an entry of `$OUT_DIR/ui_assets.rs`,
//! `(path relative to ui/, include_bytes!(absolute path))`, sorted by path. `include_bytes!`
//! makes the compiler track each file, and `rerun-if-changed=ui` makes cargo rescan the folder,
//! so adding, changing or removing a file under `ui/` rebuilds the binary. No crate needed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        // Editor droppings and hidden files are not served.
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect(root, &path, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let relative = relative.to_string_lossy().replace('\\', "/");
            out.push((relative, path.clone()));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.join("ui");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let mut code = String::from("&[\n");
    for (relative, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let _ = writeln!(
            code,
            "    ({relative:?}, include_bytes!({:?}) as &[u8]),",
            path.display().to_string()
        );
    }
    code.push_str("]\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("ui_assets.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
