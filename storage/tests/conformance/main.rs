//! The conformance suite: every driver keeps every rule in `suite.rs`; `redb.rs` adds what
//! only a file can show (restart, modes, old files, corruption).

mod harness;
#[macro_use]
mod suite;
mod redb;

conformance!(memory, crate::harness::Memory);
conformance!(redb_driver, crate::harness::Redb);
