//! The query log on the control thread: the writer drains the cores' batches, summarizes and
//! applies privacy, and feeds the sink (`querylog.sink`: redb, dnstap, jsonl, none); the API
//! searches it.
//!
//! (Skeleton: modules to come.)

pub mod event;

pub use event::{ClientView, Event};
