//! kudurru-core: the sans-IO heart of kudurru.
//!
//! Bytes, `now` and settings go in; decisions and bytes come out. Nothing in this crate opens a
//! socket, reads a clock, spawns a thread or keeps a global: the per-core shell in
//! `kudurru-transports` owns all of that and calls in here. Every function that sees peer input
//! is total: malformed input yields an error value, never a panic.
//!
//! ```text
//! wire::Query::parse ─▶ pipeline::ingress ─▶ Decision::{Respond, Drop, Resolve, Transfer}
//!                        (zone::Zones answers authoritative and built-in names: Respond)
//!                                                              │
//!             Cache::get ◀──────── CacheKey ◀──────────────────┘
//!                 │ miss: wire::write_upstream_query ─▶ (shell) ─▶ CachedAnswer::from_reply
//!                 └ hit:  CachedAnswer::write_response (ID, case, TTLs patched in place)
//! ```
#![forbid(unsafe_code)]

pub mod acl;
pub mod answer;
pub mod bootstrap;
pub mod cache;
pub mod cache_control;
pub mod doh;
pub mod doq;
pub mod framing;
pub mod http;
pub mod http2;
pub mod http3;
pub mod key;
pub mod limiter;
pub mod local;
pub mod loop_probe;
pub mod pipeline;
pub mod policy;
pub mod querylog;
pub mod scrub;
pub mod settings;
pub mod upstream;
pub mod wire;
pub mod zone;

pub use acl::{AccessList, AclAction};
pub use answer::{AnswerKind, CachedAnswer, ReplyError, TtlPolicy};
pub use cache::{Cache, CacheStats};
pub use framing::FrameBuffer;
pub use key::CacheKey;
pub use limiter::{Limiter, LimiterStats, Prefix, RateLimit, Verdict};
pub use local::{LocalNames, ServerIdentity};
pub use pipeline::{Client, Decision, HEALTH_NAME, Stage, cloaked, ingress};
pub use settings::{STALE_ANSWER_TTL, Settings, StalePolicy};
pub use upstream::{
    FAILURES_BEFORE_DOWN, Selector, UpstreamOrder, UpstreamProtocol, UpstreamSpec,
    UpstreamStrategy, UpstreamTls,
};
