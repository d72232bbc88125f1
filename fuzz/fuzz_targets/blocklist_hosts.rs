//! Arbitrary bytes as a block list in the `hosts` format: see `blocklist_common.rs` for what is
//! checked.
#![no_main]

use kudurru_core::policy::Format;
use libfuzzer_sys::fuzz_target;

#[path = "blocklist_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| common::check(data, Format::Hosts));
