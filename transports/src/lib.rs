//! kudurru-transports: the per-core I/O shell around `kudurru-core`.
//!
//! Every core runs one glommio executor pinned to its CPU. It owns one SO_REUSEPORT socket per
//! listener, its cache shard and L1, its upstream sockets and its counters; it talks to other
//! cores only through glommio's channel mesh (cache misses for keys another core owns) and reads
//! settings only from the `arc-swap` snapshot the control thread publishes. `unsafe` lives in
//! [`sys`] alone.
//!
//! The modules sit on floors, listed here bottom first; each uses only floors below its own
//! (`tests/layers.rs` checks it):
//!
//! ```text
//! 11 runtime                                     start and stop the cores
//! 10 doh                                         DoH: accept, ALPN choice
//!  9 doh::h1, doh::h2, doh::h3                   the HTTP versions
//!  8 udp, tcp, doq, doh::endpoint                listeners; what DoH versions share
//!  7 answer, accept                              what listeners use of the worker
//!  6 worker                                      listeners' handle: context, serve, resolve
//!  5 worker::resolver                            cache, L1, in-flight, mesh (private)
//!  4 upstream                                    the upstream set (Upstreams)
//!  3 upstream::udp, upstream::tcp                upstream clients
//!  2 quic, upstream::waiters                     quinn on glommio; replies by ID
//!  1 sys, outbox, core_context                   syscalls; the stream outbox; what listeners read
//!  0 steering, metrics, settings, deadline, tls  shared pieces; cache_control (operator commands)
//! ```

// Shared pieces.
pub mod cache_control;
mod deadline;
pub mod inbox;
pub mod metrics;
pub mod querylog;
pub mod settings;
pub mod steering;
pub mod tls;
// I/O primitives: the syscalls and the stream outbox, then quinn on glommio (on sys); what
// listeners read of their core besides the resolver.
mod connections;
mod core_context;
mod drain;
mod outbox;
pub mod sys;

pub mod quic;
// The resolver: upstream clients, then the worker (the listeners' handle), whose private
// child `worker::resolver` holds the cache, L1, in-flight table and mesh peers.
mod upstream;
mod worker;
// What listeners use of the worker.
mod accept;
mod answer;
// Listeners; then DoH, whose versions share its endpoint.
mod doq;
mod tcp;
mod udp;

mod doh;
// Starting and stopping the cores.
pub mod runtime;

pub use cache_control::{CacheCommand, CacheControl, CacheReport, CoreCacheStats};
pub use metrics::{CoreMetrics, Transport};
pub use runtime::{ListenerSpec, Protocol, Server, ServerSpec, StartError, start};
pub use settings::{Settings, SharedSettings};
pub use tls::{TlsConfig, TlsServers};
/// TLS client configurations for encrypted upstreams.
pub use upstream::tls as upstream_tls;
