//! kudurru-control: the control plane and the `kudurru` binary.
//!
//! The control thread parses and layers configuration, publishes the settings snapshot the cores
//! read (`arc-swap`), starts and supervises the per-core executors, and serves the ops listener.
//! `main.rs` stays thin; everything testable lives here.

pub mod api;
pub mod certs;
pub mod cli;
pub mod config;
pub mod files;
pub mod http;
pub mod lameduck;
pub mod layers;
pub mod openapi;
pub mod ops;
pub mod reload;
pub mod serve;
pub mod tokens;
pub mod watch;
