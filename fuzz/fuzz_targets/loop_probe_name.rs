//! Arbitrary bytes as the qname of a client query on the miss path, where a forwarding-loop
//! probe coming back in is recognised: `core::loop_probe::{is_probe_name, parse_probe_name}` and
//! `LoopProbe::observe` never panic; a parsed name is under the probe domain, is rebuilt
//! byte for byte by `probe_query` from its token and index, and is counted only for this
//! round's token.
#![no_main]

use kudurru_core::loop_probe::{
    LoopProbe, PROBE_SUFFIX, is_probe_name, parse_probe_name, probe_query,
};
use kudurru_core::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let matched = is_probe_name(data);
    assert_eq!(matched, data.ends_with(PROBE_SUFFIX));
    let probe = LoopProbe::default();
    assert!(!probe.observe(data), "no round: nothing is counted");
    let Some((token, index)) = parse_probe_name(data) else {
        return;
    };
    assert!(matched);
    let query = probe_query(token, index, 0);
    assert_eq!(
        query.get(wire::HEADER_LEN..wire::HEADER_LEN + data.len()),
        Some(data)
    );
    let other = if token == 1 { 2 } else { 1 };
    probe.start_round(other);
    assert!(!probe.observe(data), "another round's name is not counted");
    if token != 0 {
        probe.start_round(token);
        assert!(probe.observe(data));
        assert_eq!(probe.arrivals(index), 1);
    }
});
