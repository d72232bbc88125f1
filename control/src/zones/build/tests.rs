use kudurru_core::zone::file::{Limits, parse_record_set, parse_zone_file};

use super::*;

fn apex() -> Box<[u8]> {
    kudurru_core::policy::name::to_wire("corp.example.")
        .unwrap()
        .into()
}

fn file(text: &str) -> ZoneData {
    parse_zone_file(
        "corp.example.zone",
        text.as_bytes(),
        &apex(),
        &Limits::default(),
        &mut |_| Err("no includes".into()),
    )
    .unwrap()
}

fn set(name: &str, rtype: &str, records: &[&str]) -> Overlay {
    Overlay {
        origin: format!("RecordSet/{name}-{rtype}"),
        set: parse_record_set(&apex(), name, rtype, 60, records).unwrap(),
    }
}

const FILE: &str = "@ 3600 IN SOA ns1 hostmaster 7 3600 600 604800 300\n@ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.1\nwww IN A 192.0.2.2\nmail IN MX 10 www\n";

#[test]
fn a_record_set_replaces_the_files_rrset_and_an_empty_one_deletes_it() {
    let data = overlay(
        &apex(),
        Some(file(FILE)),
        vec![
            set("www", "A", &["192.0.2.9"]),
            set("mail", "MX", &[]),
            set("new", "TXT", &["hello"]),
        ],
    );
    let www: Vec<_> = data
        .records
        .iter()
        .zip(&data.origins)
        .filter(|(r, _)| r.rtype == 1 && &*r.owner == b"\x03www\x04corp\x07example\x00")
        .map(|(r, o)| (r.rdata.to_vec(), o.as_str()))
        .collect();
    assert_eq!(www, [(vec![192, 0, 2, 9], "RecordSet/www-A")]);
    assert!(!data.records.iter().any(|r| r.rtype == 15), "MX deleted");
    assert!(data.records.iter().any(|r| r.rtype == 16), "TXT added");
    assert_eq!(data.records.len(), data.origins.len());
    assert_eq!(data.origins[0], "corp.example.zone:1");
}

#[test]
fn the_spec_gives_the_soa_and_ns_only_when_nothing_else_does() {
    let spec = PrimarySpec {
        name_servers: vec![
            kudurru_core::policy::name::to_wire("ns1.corp.example.")
                .unwrap()
                .into(),
        ],
        ..PrimarySpec::default()
    };
    let mut data = overlay(&apex(), None, vec![set("www", "A", &["192.0.2.1"])]);
    complete(&mut data, &spec);
    assert_eq!(data.records[0].rtype, SOA);
    assert_eq!(data.origins[0], "spec.soa");
    assert_eq!(soa_serial(&data), Some(0));
    assert_eq!(
        (soa_field(&data, 1), soa_field(&data, 4)),
        (Some(3600), Some(300))
    );
    assert!(
        data.records
            .iter()
            .any(|r| r.rtype == NS && r.owner == apex())
    );
    assert!(set_serial(&mut data, 42));
    assert_eq!(soa_serial(&data), Some(42));

    let mut from_file = file(FILE);
    let before = from_file.records.len();
    complete(&mut from_file, &spec);
    assert_eq!(
        from_file.records.len(),
        before,
        "the file's SOA and NS stay"
    );
    assert_eq!(soa_serial(&from_file), Some(7));
}

#[test]
fn the_content_hash_ignores_the_serial_and_order() {
    let mut a = file(FILE);
    let b = file(FILE);
    set_serial(&mut a, 99);
    assert_eq!(content_hash(&a), content_hash(&b));
    let mut c = b.clone();
    c.records.reverse();
    assert_eq!(content_hash(&c), content_hash(&b));
    let changed = overlay(
        &apex(),
        Some(b.clone()),
        vec![set("www", "A", &["192.0.2.3"])],
    );
    assert_ne!(content_hash(&changed), content_hash(&b));
}

#[test]
fn serials_move_forward_by_policy() {
    use SerialPolicy::{Increment, Unixtime};
    assert_eq!(next_serial(Increment, None, None, 1_700_000_000), 1);
    assert_eq!(next_serial(Increment, None, Some(7), 1_700_000_000), 7);
    assert_eq!(next_serial(Increment, Some(7), None, 0), 8);
    assert_eq!(
        next_serial(Increment, Some(u32::MAX), None, 0),
        0,
        "RFC 1982 wraps"
    );
    assert_eq!(
        next_serial(Increment, Some(7), Some(100), 0),
        100,
        "a later file serial wins"
    );
    assert_eq!(
        next_serial(Increment, Some(7), Some(3), 0),
        8,
        "an earlier one does not"
    );
    assert_eq!(
        next_serial(Unixtime, None, None, 1_700_000_000),
        1_700_000_000
    );
    assert_eq!(
        next_serial(Unixtime, Some(5), None, 1_700_000_000),
        1_700_000_000
    );
    assert_eq!(
        next_serial(Unixtime, Some(1_700_000_000), None, 1_700_000_000),
        1_700_000_001,
        "two changes in one second"
    );
    assert!(serial_after(0, u32::MAX));
    assert!(!serial_after(5, 5));
}

#[test]
fn a_diff_applies_old_to_new_and_the_journal_is_bounded() {
    let mut old = file(FILE);
    let mut new = overlay(
        &apex(),
        Some(old.clone()),
        vec![set("www", "A", &["192.0.2.1", "192.0.2.3"])],
    );
    set_serial(&mut old, 1);
    set_serial(&mut new, 2);
    let d = diff(&old, &new);
    assert_eq!((d.from, d.to), (1, 2));
    assert_eq!(d.removed[0].rtype, SOA, "the old SOA first");
    assert_eq!(d.added[0].rtype, SOA, "the new SOA first");
    // The RecordSet's TTL (60) differs from the file's (3600): both addresses change.
    assert_eq!(d.removed.len(), 3, "SOA, 192.0.2.1 and 192.0.2.2 at 3600");
    assert_eq!(d.added.len(), 3, "SOA, 192.0.2.1 and 192.0.2.3 at 60");
    let applied = apply(&old, &d).unwrap();
    assert_eq!(content_hash(&applied), content_hash(&new));
    assert_eq!(soa_serial(&applied), Some(2));
    assert!(apply(&new, &d).is_err(), "the diff is not for serial 2");

    let mut journal = Journal::default();
    for serial in 0..5 {
        record_change(
            &mut journal,
            Diff {
                from: serial,
                to: serial + 1,
                removed: vec![],
                added: vec![],
            },
            3,
        );
    }
    let serials: Vec<_> = journal.diffs.iter().map(|d| (d.from, d.to)).collect();
    assert_eq!(serials, [(2, 3), (3, 4), (4, 5)]);
    record_change(
        &mut journal,
        Diff {
            from: 9,
            to: 10,
            removed: vec![],
            added: vec![],
        },
        3,
    );
    assert_eq!(journal.diffs.len(), 1, "a gap starts the journal again");
}
