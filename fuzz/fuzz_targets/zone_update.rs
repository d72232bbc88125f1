//! Arbitrary bytes as an RFC 2136 UPDATE message: parsing never panics; a parsed update's
//! names are all at or below its zone; checking its prerequisites and applying its changes to
//! a small zone never panics, and what it removes was in the zone while what it adds was not
//! and is never an SOA.
#![no_main]

use kudurru_core::zone::Record;
use kudurru_core::zone::update::{Change, RecordIndex, Update, ZoneView};
use libfuzzer_sys::fuzz_target;

/// `corp.example.` in wire form.
const APEX: &[u8] = b"\x04corp\x07example\x00";

fn zone(apex: &[u8]) -> RecordIndex {
    let name = |label: &[u8]| -> Box<[u8]> {
        let mut wire = vec![label.len() as u8];
        wire.extend_from_slice(label);
        wire.extend_from_slice(apex);
        wire.into_boxed_slice()
    };
    [
        Record {
            owner: apex.into(),
            rtype: 6,
            ttl: 3600,
            rdata: [APEX, APEX, &[0; 20]].concat().into(),
        },
        Record {
            owner: apex.into(),
            rtype: 2,
            ttl: 3600,
            rdata: name(b"ns1"),
        },
        Record {
            owner: name(b"www"),
            rtype: 1,
            ttl: 300,
            rdata: vec![192, 0, 2, 1].into(),
        },
        Record {
            owner: name(b"alias"),
            rtype: 5,
            ttl: 300,
            rdata: name(b"www"),
        },
    ]
    .into_iter()
    .collect()
}

fuzz_target!(|bytes: &[u8]| {
    let Ok(update) = Update::parse(bytes) else {
        return;
    };
    for change in &update.changes {
        let owner = match change {
            Change::Add(r) | Change::DeleteRecord(r) => &r.owner,
            Change::DeleteRrset { owner, .. } | Change::DeleteName { owner } => owner,
        };
        assert!(
            owner.ends_with(&update.apex),
            "{owner:?} outside {:?}",
            update.apex
        );
    }
    let zone = zone(&update.apex);
    let _ = update.check(&zone);
    let changes = update.apply(&zone);
    for removed in &changes.removed {
        assert!(zone.records_at(&removed.owner).contains(removed));
    }
    for added in &changes.added {
        assert_ne!(added.rtype, 6, "an SOA added");
        assert!(!zone.records_at(&added.owner).contains(added));
    }
});
