//! `kudurru-transports`' modules in floors: each uses only modules on floors below its own, so
//! no import points up and the crate has no import cycle. A new module gets a floor here; the
//! crate root (`lib.rs`) lists its modules in this order.

#[path = "../../core/tests/support/layers.rs"]
mod layers;

/// Bottom first.
const FLOORS: &[&[&str]] = &[
    // Shared pieces that use no other module: the steering program, counters, the settings
    // snapshot, deadlines, TLS configurations, the mailboxes of operator cache commands.
    &[
        "steering",
        "metrics",
        "settings",
        "deadline",
        "tls",
        "cache_control",
    ],
    // I/O primitives: the unsafe syscalls (on the steering program), the stream outbox. The
    // core context (settings, counters, limiter, lameduck, query and connection counts) sits
    // here, below the resolver, so listeners can read it without reaching the resolver.
    &["sys", "outbox"],
    // The connection table (per-client limits, longest-idle eviction), then the core context
    // that holds it.
    &["connections", "inbox", "querylog"],
    &["core_context"],
    // quinn on glommio; the upstream waiter table; draining on shutdown (over the connection
    // table and the core context's query counts).
    &["quic", "upstream::waiters", "drain"],
    // The upstream clients: UDP sockets, TCP connections.
    &["upstream::udp", "upstream::tcp"],
    // The resolver: the upstream set; the cache shard, L1, in-flight table and mesh peers
    // around it; then the worker, the listeners' handle (the core context, and "serve this
    // hit" / "resolve this miss"), which keeps the resolver a private child.
    &["upstream"],
    &["worker::resolver"],
    &["worker"],
    // What listeners use of the resolver: one query in, one answer out; the accept loops.
    &["answer", "accept"],
    // Listeners, and what the DoH versions share.
    &["udp", "tcp", "doq", "doh::endpoint"],
    &["doh::h1", "doh::h2", "doh::h3"],
    &["doh"],
    // Starting and stopping the cores.
    &["runtime"],
];

#[test]
fn modules_use_only_lower_floors() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = layers::check(&src, FLOORS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
