//! Reads a crate's `src/` and checks its modules against a table of floors: a module may use
//! only modules on lower floors, so no import points up and none can close a cycle.
//!
//! A string scan, not a parser: comments and literals are blanked, then every `crate::` and
//! `super::` path (grouped `{a, b::c}` imports included) is resolved to the module it names.
//! Names the crate root re-exports (`pub use module::Name`) count as their module. Shared by
//! `core/tests/layers.rs` and `transports/tests/layers.rs`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// Checks every `.rs` file under `src` against `floors` (bottom first; each entry a module
/// path such as `upstream` or `doh::h2`, a file belonging to the longest entry that prefixes
/// its own path). Returns one line per problem: an upward or sideways import, a file no entry
/// covers, a path that names no module.
pub(crate) fn check(src: &Path, floors: &[&[&str]]) -> Vec<String> {
    let floor_of: HashMap<Vec<String>, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(floor, units)| units.iter().map(move |unit| (segments(unit), floor)))
        .collect();
    let mut files = Vec::new();
    collect(src, src, &mut files);
    let root = fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let aliases = root_reexports(&tokens(&blank(&root)));
    let mut problems = Vec::new();
    for (module, text) in &files {
        if module.is_empty() {
            continue; // lib.rs: the root declares and re-exports, it sits above every floor
        }
        let Some(from) = unit_of(module, &floor_of) else {
            problems.push(format!("{}: in no floor of the table", module.join("::")));
            continue;
        };
        for path in references(module, &tokens(&blank(text))) {
            let target = match unit_of(&path, &floor_of) {
                Some(unit) => unit,
                None => match path.first().and_then(|name| aliases.get(name)) {
                    Some(module) => unit_of(module, &floor_of).unwrap_or_default(),
                    None => {
                        problems.push(format!(
                            "{}: `{}` names no module in the table",
                            module.join("::"),
                            path.join("::")
                        ));
                        continue;
                    }
                },
            };
            if target == from || target.is_empty() {
                continue;
            }
            let (a, b) = (floor_of[&from], floor_of[&target]);
            if b >= a {
                problems.push(format!(
                    "{} (floor {a}) uses {} (floor {b}) through `{}`: a module may use only lower floors",
                    from.join("::"),
                    target.join("::"),
                    path.join("::")
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

/// The module paths the file of `module` (`a::b`) names, as `a::b::c` strings: for the
/// scanner's own test.
#[allow(dead_code)]
pub(crate) fn references_in(module: &str, text: &str) -> Vec<String> {
    let module = if module.is_empty() {
        Vec::new()
    } else {
        segments(module)
    };
    references(&module, &tokens(&blank(text)))
        .into_iter()
        .map(|path| path.join("::"))
        .collect()
}

fn segments(path: &str) -> Vec<String> {
    path.split("::").map(str::to_owned).collect()
}

/// The longest table entry that prefixes `path`.
fn unit_of(path: &[String], floor_of: &HashMap<Vec<String>, usize>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| floor_of.contains_key(prefix))
}

/// Every `.rs` file under `dir` with its module path (`lib.rs` is the empty path).
fn collect(src: &Path, dir: &Path, files: &mut Vec<(Vec<String>, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("a source directory")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(src, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src).expect("under src");
            let mut module: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text = fs::read_to_string(&path).expect("a readable source file");
            files.push((module, text));
        }
    }
}

/// `text` with comments, string and character literals blanked (lifetimes kept as they are).
fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{..}'); a lifetime has no closing quote.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Identifiers, `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_owned());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// The names the crate root re-exports, each with the module it comes from
/// (`pub use cache::{Cache, CacheStats};`).
fn root_reexports(tokens: &[String]) -> HashMap<String, Vec<String>> {
    let mut aliases = HashMap::new();
    let mut i = 0;
    while i + 2 < tokens.len() {
        if tokens[i] == "pub" && tokens[i + 1] == "use" {
            let module = tokens[i + 2].clone();
            let mut j = i + 3;
            while j < tokens.len() && tokens[j] != ";" {
                let name = &tokens[j];
                if name.chars().all(|c| c.is_alphanumeric() || c == '_') && name != "self" {
                    aliases.insert(name.clone(), vec![module.clone()]);
                }
                j += 1;
            }
            i = j;
        }
        i += 1;
    }
    aliases
}

/// Every module path the file of `module` names through `crate::` or `super::`, made absolute.
/// `super` inside an inline module (`mod tests { use super::*; }`) first leaves that module.
fn references(module: &[String], tokens: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut inline: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        match token {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => inline.push(depth),
            "crate" | "super" if tokens.get(i + 1).is_some_and(|t| t == "::") => {
                if i > 0 && tokens[i - 1] == "::" {
                    i += 1;
                    continue; // the tail of a longer path (`super::super`), already taken
                }
                let mut base: Vec<String> = if token == "crate" {
                    Vec::new()
                } else {
                    module.to_vec()
                };
                let mut j = i;
                let mut ups: usize = 0;
                while tokens.get(j).is_some_and(|t| t == "super")
                    && tokens.get(j + 1).is_some_and(|t| t == "::")
                {
                    ups += 1;
                    j += 2;
                }
                if token == "crate" {
                    j = i + 2;
                } else {
                    let leave = ups.saturating_sub(inline.len());
                    base.truncate(base.len().saturating_sub(leave));
                    if ups <= inline.len() {
                        base = module.to_vec(); // still inside this file's module
                    }
                }
                let (paths, _) = tree(tokens, j);
                for path in paths {
                    let mut full = base.clone();
                    full.extend(path);
                    if !full.is_empty() {
                        found.push(full);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The paths of one use-tree starting at `at`: `a::b`, `{a, b::{c, d}}`, `*`. Returns them
/// relative to the tree's start, and where the tree ends.
fn tree(tokens: &[String], mut at: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        match tokens.get(at).map(String::as_str) {
            Some("{") => {
                let mut paths = Vec::new();
                at += 1;
                loop {
                    match tokens.get(at).map(String::as_str) {
                        None => return (paths, at),
                        Some("}") => return (paths, at + 1),
                        Some(",") => at += 1,
                        _ => {
                            let (inner, end) = tree(tokens, at);
                            paths.extend(inner.into_iter().map(|p| {
                                let mut full = prefix.clone();
                                full.extend(p);
                                full
                            }));
                            // Skip what follows a path inside braces (`as name`) up to `,`/`}`.
                            at = end;
                            while tokens.get(at).is_some_and(|t| t != "," && t != "}") {
                                at += 1;
                            }
                        }
                    }
                }
            }
            Some(name) if name.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                if name != "self" {
                    prefix.push(name.to_owned());
                }
                at += 1;
                if tokens.get(at).is_some_and(|t| t == "::") {
                    at += 1;
                } else {
                    return (vec![prefix], at);
                }
            }
            _ => return (vec![prefix], at),
        }
    }
}
