//! The conformance suite: every driver keeps every rule in `suite.rs` (objects, watch, audit)
//! and `bodies.rs` (the list-body cache); `redb.rs` adds what only a file can show (restart,
//! modes, old files, corruption).

mod harness;
#[macro_use]
mod suite;
#[macro_use]
mod bodies;
mod redb;

conformance!(memory, crate::harness::Memory);
conformance!(redb_driver, crate::harness::Redb);

body_conformance!(memory_bodies, crate::harness::Memory);
body_conformance!(redb_bodies, crate::harness::Redb);
