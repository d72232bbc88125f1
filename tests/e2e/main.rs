//! End-to-end tests: the real `kudurru` binary on loopback, a scripted test upstream, and real
//! clients (dig, raw sockets for what no client sends on purpose). All traffic stays on
//! 127.0.0.1; the default public upstreams are never used.

mod acl;
mod api;
// Recorded bad upstream replies (issue 32).
mod bad_replies;
mod bench;
mod blocking;
mod cache;
mod cluster;
mod control;
mod crash;
mod dashboard_api;
// The dashboard in Chromium (ui-web).
mod dashboard_browser;
mod defaults;
mod doh;
mod dot;
mod drain;
mod fairness;
mod http2;
mod lifecycle;
// Forwarding loops through another resolver (issue 32 item 9); `loop` is a keyword.
mod r#loop;
mod objects;
mod querylog_dnstap;
mod quic;
// The query log's API and CLI (ql-api).
mod querylog_api;
// The query log's privacy, retention, durability and full ring (ql-writer).
mod querylog_privacy;
mod ratelimit;
mod reload;
mod resolve;
mod sharding;
mod stale;
mod tcp;
mod transfer;
mod upstream_quic;
mod upstream_strategy;
mod upstream_tls;
mod wire;
mod zones;
mod zones_forward;
mod zones_update;
