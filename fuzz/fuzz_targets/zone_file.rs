//! Arbitrary bytes as a zone file for `corp.example.` (and the first line as a RecordSet's
//! rdata): parsing never panics; every record it returns is inside the zone, has an origin
//! naming a file and line, and its rdata prints back to the same wire form.
#![no_main]

use kudurru_core::zone::file::{
    Included, Limits, in_zone, parse_record_set, parse_zone_file, rdata_text, type_text,
};
use libfuzzer_sys::fuzz_target;

const APEX: &[u8] = b"\x04corp\x07example\x00";

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bytes: 1 << 16,
        max_records: 1000,
    };
    // An include reads the same text again (bounded by the depth and the byte limit).
    let mut include = |_: &str| {
        Ok(Included {
            name: "included.zone".into(),
            text: data.to_vec(),
        })
    };
    if let Ok(zone) = parse_zone_file("fuzz.zone", data, APEX, &limits, &mut include) {
        assert_eq!(zone.records.len(), zone.origins.len());
        assert!(zone.records.len() <= limits.max_records);
        for (record, origin) in zone.records.iter().zip(&zone.origins) {
            assert!(in_zone(&record.owner, APEX));
            assert!(origin.rsplit_once(':').is_some_and(|(_, line)| line.parse::<usize>().is_ok()));
            let text = rdata_text(record.rtype, &record.rdata);
            let again = parse_record_set(APEX, "@", &type_text(record.rtype), 0, &[&text]);
            if let Ok(again) = again {
                assert_eq!(again.records[0].rdata, record.rdata, "{text}");
            }
        }
    }
    if let Ok(line) = std::str::from_utf8(data) {
        let line = line.lines().next().unwrap_or_default();
        let _ = parse_record_set(APEX, "www", "TXT", 60, &[line]);
        let _ = parse_record_set(APEX, line, "A", 60, &["192.0.2.1"]);
    }
});
