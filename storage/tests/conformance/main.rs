//! The conformance suite: every driver keeps every rule in `suite.rs` (objects, watch, audit)
//! and `bodies.rs` (the list-body cache); `redb.rs` adds what only a file can show (restart,
//! modes, old files, corruption), `etcd.rs` what only a shared etcd shows (two nodes, etcd
//! down, fencing, chunked bodies).

mod harness;
#[macro_use]
mod suite;
#[macro_use]
mod bodies;
mod etcd;
mod redb;

conformance!(memory, crate::harness::Memory);
conformance!(redb_driver, crate::harness::Redb);
conformance!(etcd_driver, crate::harness::Etcd);

body_conformance!(memory_bodies, crate::harness::Memory);
body_conformance!(redb_bodies, crate::harness::Redb);
body_conformance!(etcd_bodies, crate::harness::Etcd);
