//! `kudurru-control`'s modules in floors: each uses only modules on floors below its own, so
//! no import points up and the crate has no import cycle. A new module (block lists, zones,
//! the query log, the cluster) gets a floor here.

#[path = "../../core/tests/support/layers.rs"]
mod layers;

/// Bottom first. A folder (`config`, `http`) is one unit: its files may use each other.
const FLOORS: &[&[&str]] = &[
    // Pieces that use no other module: atomic files and hashes, the configuration document
    // and its keys, the HTTP layer, the API client of the command line, the log's limit on
    // peer-triggered library warnings; block-list fetching (its own HTTP client and files).
    &["files", "config", "http", "client", "noise", "blocking"],
    // The command line (its defaults come from config); tokens and the file watcher (on files).
    &["cli", "tokens", "watch"],
    // The layers (defaults → files → env → flags, from the command line); certificates (loaded
    // and watched); the lameduck client; the object kinds, their store and routes (on tokens'
    // permissions and the HTTP layer's errors).
    &["layers", "certs", "lameduck", "objects"],
    // The dashboard's embedded assets, sessions, CSRF and security headers (on tokens and the
    // HTTP layer); the API serves them.
    &["dashboard"],
    // The effective configuration and its subscribers; `config check` over the layers.
    &["reload", "check"],
    // Host names in upstream URLs, resolved through the bootstrap resolvers (on the effective
    // configuration; it hands their addresses to the publisher above it). Forwarding-loop
    // probes of the published upstreams (on the cores' counters alone).
    &["bootstrap", "loop_probe"],
    // The fleet on etcd: membership, leader election and fencing, cluster settings (on the
    // effective configuration); the list manager, the API and ops read its handle.
    &["cluster"],
    // Block lists, client groups and policies: the list manager, the publisher of the
    // settings snapshot, status, readiness, metrics and the check explanation.
    &["blocking"],
    // Zones: the Zone and RecordSet manager (on the blocking publisher and status helpers),
    // zone files, the stored transfers, the handle transfers and updates reach it by.
    &["zones"],
    // The query log: the writer (the cores' batches, summaries, client groups and privacy, the
    // sinks: redb, dnstap, JSON lines), retention, search and stats for the API.
    &["querylog"],
    // The ops listener; the API on top of it (counters, readiness); the OpenAPI document of
    // the API's routes.
    &["ops"],
    // Upstream health over the ops counters, and its watcher.
    &["health"],
    &["api"],
    &["openapi"],
    // The control thread, then the binary.
    &["serve"],
    &["main"],
];

#[test]
fn modules_use_only_lower_floors() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = layers::check(&src, FLOORS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
