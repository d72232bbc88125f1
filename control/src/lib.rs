//! kudurru-control: the control thread and the `kudurru` binary.
//!
//! The control thread is one tokio current-thread runtime ([`serve`]): it layers the
//! configuration, publishes the settings snapshot the cores read (`arc-swap`), starts and
//! supervises the per-core executors, serves the ops listener and the API on one HTTP layer
//! ([`http`]), follows watched files ([`watch`]) and handles signals; blocking work goes to a
//! bounded pool. No `unsafe`: sockets, io_uring and BPF belong to `kudurru-transports`.
//! `main.rs` stays thin; everything testable lives here.

#![forbid(unsafe_code)]

pub mod api;
pub mod blocking;
pub mod bootstrap;
pub mod certs;
pub mod check;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod dashboard;
pub mod files;
pub mod health;
pub mod http;
pub mod lameduck;
pub mod layers;
pub mod loop_probe;
pub mod noise;
pub mod objects;
pub mod openapi;
pub mod ops;
pub mod querylog;
pub mod reload;
pub mod serve;
pub mod tokens;
pub mod watch;
pub mod zones;
