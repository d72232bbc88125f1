//! `kudurru-core`'s modules in floors: each uses only modules on floors below its own, so no
//! import points up and the crate has no import cycle. A new module gets a floor here.

#[path = "support/layers.rs"]
mod layers;

/// Bottom first.
const FLOORS: &[&[&str]] = &[
    // Leaves: no other module of the crate.
    &[
        "key",
        "framing",
        "limiter",
        "upstream",
        "http",
        "policy::name",
        "policy::schedule",
        "zone::data",
    ],
    // The wire format (on the cache key), both HTTP versions (on `http`), the client access
    // list (on the limiter's prefixes), and reply scrubbing (on `domain` alone: which records
    // of a reply answer its question).
    &[
        "wire",
        "http2",
        "http3",
        "acl",
        "scrub",
        "policy::blocklist",
    ],
    // What the wire format serves: answers, local names, DoH and DoQ rules; the compiled
    // block lists; the bootstrap resolver's queries and replies (control resolves upstream
    // host names with them).
    &[
        "answer",
        "local",
        "doh",
        "doq",
        "policy::matcher",
        "bootstrap",
        // Forwarding-loop probes: their names and queries (over the wire format).
        "loop_probe",
        // The query log's record and the summary of its messages.
        "querylog",
    ],
    // Zones, bottom up: the compiled zone and the zone-file parser (over the wire format and
    // zone data), transfers (streamed from the compiled zone), the set of zones (over them and
    // the upstreams), the module's face.
    &["zone::tree", "zone::file"],
    &["zone::xfr"],
    &["zone::set"],
    &["zone"],
    // Blocking, bottom up: the typed specs, block answers and rewrites, the policy index, the
    // module's face.
    &["policy::spec"],
    &["policy::answer"],
    &["policy::index"],
    &["policy"],
    // The cache (of answers), and the settings snapshot (over answers' TTL policy, local names,
    // the access list, the limiter's and the upstreams' settings).
    &["cache", "settings"],
    // The query pipeline: its stage is built from the settings snapshot; and what an operator
    // asks of the caches (flush scopes, dump entries).
    &["pipeline", "cache_control"],
];

#[test]
fn modules_use_only_lower_floors() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = layers::check(&src, FLOORS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The scanner sees grouped, nested and `super` paths, leaves inline modules first, and skips
/// comments and literals: a scanner that saw nothing would pass every table.
#[test]
fn the_scanner_resolves_crate_and_super_paths() {
    let text = r#"
        //! Docs naming crate::ignored.
        use crate::{a, b::{c, d as e}};
        use super::sibling::Item;
        const S: &str = "crate::not_a_path";
        const C: char = '"';
        fn f<'a>(x: &'a crate::f::G) { let _ = super::super::top::T; }
        #[cfg(test)]
        mod tests {
            use super::*;
            use crate::g;
        }
    "#;
    assert_eq!(
        layers::references_in("x::y", text),
        [
            "a",
            "b::c",
            "b::d",
            "x::sibling::Item",
            "f::G",
            "top::T",
            "x::y",
            "g"
        ]
    );
}
