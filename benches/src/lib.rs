//! kudurru-bench: kudurru's bench suite.
//!
//! - `kudurru-bench` (this library and `src/bin/bench.rs`): a thread-per-core DNS load
//!   generator. Targets by URL (`udp://`, `tcp://`), questions from a dnsperf-format file or a
//!   generated pool mixed with fresh names, open loop (`--rate`, latency from the intended send
//!   time) or closed loop (`--concurrency`), every reply checked against its query (ID and
//!   question), latency in an HDR histogram, a JSON report and a side-by-side comparison.
//! - `kudurru-echo`: the batched ceiling responder and benchmark upstream.
//! - `kudurru-cache-hitrate`: the cache's eviction policy against FIFO and LRU.
//! - `benches/peers/*.py`: comparisons with dnsperf, Unbound and dnsdist in one run.
//!
//! The library is the generator's engine: [`run::run`] takes a [`run::Plan`] and returns the
//! merged counts, [`report::Report`] turns them into the report.

pub mod doh;
pub mod inflight;
pub mod queries;
pub mod report;
pub mod run;
pub mod tally;
pub mod target;
pub mod tls;

mod pipe;
mod quic;
mod tcp;
mod udp;
