//! kudurru-transports: the per-core I/O shell around `kudurru-core`.
//!
//! Every core runs one glommio executor pinned to its CPU. It owns one SO_REUSEPORT socket per
//! listener, its cache shard and L1, its upstream sockets and its counters; it talks to other
//! cores only through glommio's channel mesh (cache misses for keys another core owns) and reads
//! settings only from the `arc-swap` snapshot the control thread publishes. `unsafe` lives in
//! [`sys`] alone.

pub mod metrics;
pub mod quic;
pub mod runtime;
pub mod settings;
pub mod steering;
pub mod sys;
pub mod tls;

mod accept;
mod answer;
mod deadline;
mod doh;
mod doq;
mod outbox;
mod tcp;
mod udp;
mod upstream;
mod worker;

pub use metrics::{CoreMetrics, Transport};
pub use runtime::{ListenerSpec, Protocol, Server, ServerSpec, StartError, start};
pub use settings::{Settings, SharedSettings};
pub use tls::{TlsConfig, TlsServers};
