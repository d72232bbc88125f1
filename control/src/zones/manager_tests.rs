//! The zone manager's state machine over the memory store: the test drives the loop by hand
//! (watch events, commands, steps), so each transition is checked at a known point.

use std::path::PathBuf;

use arc_swap::ArcSwap;
use kudurru_storage::{
    Actor, ConditionStatus, MemoryStore, Store, StoreOptions, Watch, find_condition,
};
use serde_json::{Value, json};

use super::*;
use crate::blocking::Publisher;
use crate::config::Config;
use crate::zones::Transferred;

struct Rig {
    store: Arc<MemoryStore>,
    manager: Manager,
    watches: Vec<Watch>,
}

fn settings(file_dir: Option<PathBuf>) -> ZonesSettings {
    let mut settings = ZonesSettings::default();
    if let Some(dir) = file_dir {
        settings.file_dir = dir;
    }
    settings.journal_size = 3;
    settings
}

fn rig_over(store: Arc<MemoryStore>, settings: ZonesSettings) -> Rig {
    let snapshot = Config::default().validate().unwrap().settings;
    let publisher = Arc::new(Publisher::new(Arc::new(ArcSwap::from_pointee(snapshot))));
    let shared = Arc::new(Shared::new(publisher));
    let manager = Manager::new(ManagerParts {
        store: store.clone(),
        shared,
        settings,
    });
    let watches = KINDS
        .iter()
        .map(|kind| {
            store
                .watch(
                    kind,
                    &WatchOptions {
                        bookmarks: true,
                        ..WatchOptions::default()
                    },
                )
                .unwrap()
        })
        .collect();
    Rig {
        store,
        manager,
        watches,
    }
}

fn rig() -> Rig {
    rig_over(memory_store(), settings(None))
}

fn memory_store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(StoreOptions::new(
        crate::objects::registry(),
    )))
}

fn admin() -> Actor {
    Actor::principal("token:test").unwrap()
}

const APEX: &[u8] = b"\x04corp\x07example\x00";

impl Rig {
    /// Delivers every pending event and command and steps until nothing moves.
    async fn settle(&mut self) {
        for _ in 0..6 {
            for (which, watch) in self.watches.iter_mut().enumerate() {
                while let Some(Ok(event)) = watch.try_next() {
                    self.manager.apply(which, event);
                }
            }
            while let Ok(command) = self.manager.inbox.try_recv() {
                self.manager.on_command(command).await;
            }
            self.manager.step().await;
        }
    }

    fn create(&self, kind: &str, name: &str, spec: Value) {
        self.store
            .create(&admin(), &Object::new(kind, name, spec))
            .unwrap();
    }

    fn replace(&self, kind: &str, name: &str, spec: Value) {
        let mut object = self.store.get(kind, name).unwrap();
        object.spec = spec;
        self.store.update(&admin(), &object).unwrap();
    }

    fn ready(&self, kind: &str, name: &str) -> (ConditionStatus, String) {
        let status = self.store.get(kind, name).unwrap().status;
        let c = find_condition(&status, "Ready").expect("a Ready condition");
        (c.status, c.message.clone())
    }

    fn serial(&self) -> Option<u32> {
        let view = self.manager.shared.served()?;
        view.iter().find(|z| *z.apex == *APEX).map(|z| z.serial)
    }

    /// The records the cores would answer for `corp.example.`, from the published zones.
    fn published(&self) -> Vec<Record> {
        let zones = self.manager.shared.publisher.zones();
        zones
            .served()
            .iter()
            .find(|s| s.zone.apex() == APEX)
            .map(|s| s.zone.records().collect())
            .unwrap_or_default()
    }

    fn journal(&self) -> Vec<(u32, u32)> {
        let zones = self.manager.shared.publisher.zones();
        zones
            .served()
            .iter()
            .find(|s| s.zone.apex() == APEX)
            .map(|s| s.journal.diffs.iter().map(|d| (d.from, d.to)).collect())
            .unwrap_or_default()
    }
}

fn primary(extra: Value) -> Value {
    let mut spec = json!({
        "zone": "corp.example.",
        "type": "primary",
        "nameServers": ["ns1.corp.example."]
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

fn has(records: &[Record], owner: &[u8], rtype: u16, rdata: &[u8]) -> bool {
    records
        .iter()
        .any(|r| &*r.owner == owner && r.rtype == rtype && &*r.rdata == rdata)
}

const WWW: &[u8] = b"\x03www\x04corp\x07example\x00";

#[tokio::test]
async fn a_primary_from_record_sets_gets_an_soa_ns_and_serial_one() {
    let mut rig = rig();
    assert!(rig.manager.shared.served().is_none(), "empty until built");
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(1));
    let (ready, message) = rig.ready(ZONE, "corp");
    assert_eq!(ready, ConditionStatus::True, "{message}");
    assert_eq!(rig.ready(RECORD_SET, "www").0, ConditionStatus::True);
    let records = rig.published();
    assert!(has(&records, WWW, 1, &[192, 0, 2, 1]));
    assert!(records.iter().any(|r| r.rtype == 6), "an SOA from the spec");
    assert!(records.iter().any(|r| r.rtype == 2), "NS from nameServers");
    let status = rig.store.get(ZONE, "corp").unwrap().status;
    assert_eq!(status.fields["serial"], 1);
    assert_eq!(status.fields["records"], 3);
    // The default TTL of a RecordSet is the SOA minimum (300).
    assert!(records.iter().any(|r| &*r.owner == WWW && r.ttl == 300));
    assert_eq!(
        rig.manager.shared.internal_json()["zones"][0]["serial"],
        1,
        "/internal/zones"
    );
}

#[tokio::test]
async fn a_change_bumps_the_serial_once_and_the_journal_holds_the_diff() {
    let mut rig = rig();
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(1));
    rig.replace(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "ttl": 60, "records": ["192.0.2.2"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(2));
    assert!(has(&rig.published(), WWW, 1, &[192, 0, 2, 2]));
    assert!(!has(&rig.published(), WWW, 1, &[192, 0, 2, 1]));
    assert_eq!(rig.journal(), [(1, 2)]);
    let zones = rig.manager.shared.publisher.zones();
    let diff = &zones
        .served()
        .iter()
        .find(|s| s.zone.apex() == APEX)
        .unwrap()
        .journal
        .diffs[0];
    assert!(has(&diff.removed, WWW, 1, &[192, 0, 2, 1]));
    assert!(has(&diff.added, WWW, 1, &[192, 0, 2, 2]));
    // Settling again (our own status writes come back as events) changes nothing.
    rig.settle().await;
    assert_eq!(rig.serial(), Some(2));
    // The journal is bounded by zones.journalSize (3 here).
    for i in 3..=6 {
        rig.replace(
            RECORD_SET,
            "www",
            json!({"zone": "corp", "name": "www", "type": "A", "records": [format!("192.0.2.{i}")]}),
        );
        rig.settle().await;
    }
    assert_eq!(rig.serial(), Some(6));
    assert_eq!(rig.journal(), [(3, 4), (4, 5), (5, 6)]);
}

/// The fleet leader's stall (docs/benchmarks.md "Cluster") in the zones manager: a status write
/// that races an edit (in the store, its event not yet applied) is retried on the stored object
/// after Conflict; the edit's own event must still be applied.
#[tokio::test]
async fn a_status_write_that_races_an_edit_does_not_swallow_the_edit() {
    let mut rig = rig();
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    rig.replace(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.2"]}),
    );
    if let Some(set) = rig.manager.sets.get_mut("www") {
        set.object.status = Default::default();
    }
    rig.manager.write_statuses().await;
    rig.settle().await;
    assert!(
        has(&rig.published(), WWW, 1, &[192, 0, 2, 2]),
        "the edit was taken for the echo of a status write"
    );
    assert_eq!(rig.serial(), Some(2));
}

#[tokio::test]
async fn unixtime_serials_follow_the_clock() {
    let mut rig = rig();
    rig.create(ZONE, "corp", primary(json!({"serialPolicy": "unixtime"})));
    rig.settle().await;
    let first = rig.serial().unwrap();
    let now = u32::try_from(jiff::Timestamp::now().as_second()).unwrap();
    assert!(first.abs_diff(now) < 60, "{first} vs {now}");
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    let second = rig.serial().unwrap();
    assert!(build::serial_after(second, first), "{second} after {first}");
}

#[tokio::test]
async fn a_refused_change_keeps_the_last_good_zone_and_says_why() {
    let mut rig = rig();
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(1));
    rig.create(
        RECORD_SET,
        "www-alias",
        json!({"zone": "corp", "name": "www", "type": "CNAME", "records": ["elsewhere.example."]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(1), "the last good zone stays");
    assert!(has(&rig.published(), WWW, 1, &[192, 0, 2, 1]));
    let (ready, message) = rig.ready(ZONE, "corp");
    assert_eq!(ready, ConditionStatus::False);
    assert!(
        message.contains("CNAME") && message.contains("RecordSet") && message.contains("serial 1"),
        "{message}"
    );
    let mut metrics = String::new();
    rig.manager.shared.render_metrics(&mut metrics);
    assert!(
        metrics.contains("kudurru_zone_load_failures_total{zone=\"corp.example.\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("kudurru_zone_serial{zone=\"corp.example.\"} 1"));
    // Fixing it serves the next serial.
    rig.store
        .delete(&admin(), RECORD_SET, "www-alias", &Default::default())
        .unwrap();
    rig.settle().await;
    assert_eq!(rig.ready(ZONE, "corp").0, ConditionStatus::True);
    assert_eq!(
        rig.serial(),
        Some(1),
        "back to the same content: no new serial"
    );
}

#[tokio::test]
async fn a_record_set_outside_the_zone_is_left_out_with_its_reason() {
    let mut rig = rig();
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "stray",
        json!({"zone": "corp", "name": "www.other.example.", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.create(
        RECORD_SET,
        "orphan",
        json!({"zone": "nosuch", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    assert_eq!(rig.ready(ZONE, "corp").0, ConditionStatus::True);
    let (ready, message) = rig.ready(RECORD_SET, "stray");
    assert_eq!(ready, ConditionStatus::False);
    assert!(message.contains("not in the zone"), "{message}");
    assert!(rig.ready(RECORD_SET, "orphan").1.contains("no Zone nosuch"));
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kudurru-zones-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const FILE: &str = "$ORIGIN corp.example.\n$TTL 300\n@ IN SOA ns1 hostmaster 2024010100 3600 600 604800 60\n  IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.1\nmail IN MX 10 www\n";

#[tokio::test]
async fn a_file_overlaid_by_record_sets_is_reimported_and_a_bad_file_keeps_the_old_zone() {
    let dir = scratch("file");
    std::fs::write(dir.join("corp.zone"), FILE).unwrap();
    let mut rig = rig_over(memory_store(), settings(Some(dir.clone())));
    rig.create(ZONE, "corp", primary(json!({"file": "corp.zone"})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.9"]}),
    );
    rig.create(
        RECORD_SET,
        "no-mail",
        json!({"zone": "corp", "name": "mail", "type": "MX", "records": []}),
    );
    rig.settle().await;
    assert_eq!(
        rig.serial(),
        Some(2_024_010_100),
        "the file's serial to start"
    );
    let records = rig.published();
    assert!(has(&records, WWW, 1, &[192, 0, 2, 9]), "the RecordSet wins");
    assert!(!has(&records, WWW, 1, &[192, 0, 2, 1]));
    assert!(
        !records.iter().any(|r| r.rtype == 15),
        "an empty RecordSet deletes"
    );
    assert_eq!(
        records.iter().filter(|r| r.rtype == 2).count(),
        1,
        "the file's NS, not nameServers as well"
    );

    // A broken file: refused with file and line, the old zone stays.
    std::fs::write(
        dir.join("corp.zone"),
        format!("{FILE}bad IN A 192.0.2.300\n"),
    )
    .unwrap();
    rig.manager.poll_files().await;
    rig.settle().await;
    let (ready, message) = rig.ready(ZONE, "corp");
    assert_eq!(ready, ConditionStatus::False);
    assert!(message.contains("corp.zone:8"), "{message}");
    assert_eq!(rig.serial(), Some(2_024_010_100));

    // Fixed, with a new record: imported, and the serial moves on.
    std::fs::write(dir.join("corp.zone"), format!("{FILE}new IN A 192.0.2.7\n")).unwrap();
    rig.manager.poll_files().await;
    rig.settle().await;
    assert_eq!(rig.ready(ZONE, "corp").0, ConditionStatus::True);
    assert_eq!(rig.serial(), Some(2_024_010_101));

    // A RecordSet change over the unchanged file: the file's records are not kept, so the
    // rebuild reads it again; the file's other records stay and the journal holds the diff.
    rig.replace(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.10"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(2_024_010_102));
    let records = rig.published();
    assert!(has(&records, WWW, 1, &[192, 0, 2, 10]));
    assert!(!has(&records, WWW, 1, &[192, 0, 2, 9]));
    assert!(
        records
            .iter()
            .any(|r| r.rtype == 1 && r.rdata[..] == [192, 0, 2, 7]),
        "the file's records stay: {records:?}"
    );
    assert!(rig.journal().contains(&(2_024_010_101, 2_024_010_102)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn serials_never_go_backwards_across_restarts() {
    let store = memory_store();
    let mut rig = rig_over(store.clone(), settings(None));
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    rig.replace(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.2"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(2));
    drop(rig);

    let mut restarted = rig_over(store.clone(), settings(None));
    restarted.settle().await;
    assert_eq!(restarted.serial(), Some(2), "same content: same serial");
    drop(restarted);

    let mut changed = rig_over(store.clone(), settings(None));
    changed.replace(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.3"]}),
    );
    changed.settle().await;
    assert_eq!(
        changed.serial(),
        Some(3),
        "changed while down: the next serial"
    );
}

fn secondary_data(serial: u32, address: u8) -> ZoneData {
    let mut data = ZoneData {
        apex: APEX.into(),
        ..ZoneData::default()
    };
    let mut soa = b"\x03ns1\x04corp\x07example\x00\x0ahostmaster\x04corp\x07example\x00".to_vec();
    for value in [serial, 3600, 600, 604_800, 60] {
        soa.extend_from_slice(&value.to_be_bytes());
    }
    for (owner, rtype, rdata) in [
        (APEX, 6u16, soa),
        (APEX, 2, b"\x03ns1\x04corp\x07example\x00".to_vec()),
        (WWW, 1, vec![192, 0, 2, address]),
    ] {
        data.records.push(Record {
            owner: owner.into(),
            rtype,
            ttl: 300,
            rdata: rdata.into(),
        });
    }
    data
}

#[tokio::test]
async fn a_transfer_is_served_kept_and_served_again_after_a_restart() {
    let store = memory_store();
    let mut rig = rig_over(store.clone(), settings(None));
    rig.create(
        ZONE,
        "corp",
        json!({"zone": "corp.example.", "type": "secondary", "primaries": [{"address": "127.0.0.1:5300"}]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), None);
    assert_eq!(rig.ready(ZONE, "corp").0, ConditionStatus::False);
    let secondaries = rig.manager.shared.secondaries();
    assert_eq!(secondaries.borrow().len(), 1);
    assert_eq!(secondaries.borrow()[0].serial, None);
    let mut changes = rig.manager.shared.changes();

    rig.manager
        .transferred(APEX, Transferred::Full(secondary_data(7, 1)))
        .await
        .unwrap();
    rig.settle().await;
    assert_eq!(rig.serial(), Some(7));
    assert_eq!(changes.try_recv().unwrap().serial, 7);
    assert_eq!(rig.manager.shared.secondaries().borrow()[0].serial, Some(7));
    assert_eq!(
        rig.manager.shared.secondaries().borrow()[0].timers,
        Some(SoaTimers {
            refresh: 3600,
            retry: 600,
            expire: 604_800
        })
    );
    let diff = build::diff(&secondary_data(7, 1), &secondary_data(8, 2));
    rig.manager
        .transferred(APEX, Transferred::Diffs(vec![diff]))
        .await
        .unwrap();
    rig.settle().await;
    assert_eq!(rig.serial(), Some(8));
    assert!(has(&rig.published(), WWW, 1, &[192, 0, 2, 2]));
    assert_eq!(rig.journal(), [(7, 8)]);
    let stale = build::diff(&secondary_data(7, 1), &secondary_data(8, 2));
    assert!(
        rig.manager
            .transferred(APEX, Transferred::Diffs(vec![stale]))
            .await
            .is_err(),
        "a diff for another serial is refused"
    );
    assert!(
        rig.manager
            .transferred(
                b"\x05other\x07example\x00",
                Transferred::Full(secondary_data(1, 1))
            )
            .await
            .is_err()
    );
    rig.manager
        .on_command(Command::SetExpired {
            apex: APEX.into(),
            expired: true,
            reply: oneshot::channel().0,
        })
        .await;
    let zones = rig.manager.shared.publisher.zones();
    assert!(
        zones
            .served()
            .iter()
            .any(|s| s.zone.apex() == APEX && s.expired)
    );
    drop(rig);

    let mut restarted = rig_over(store, settings(None));
    restarted.settle().await;
    assert_eq!(restarted.serial(), Some(8), "served from storage at once");
    assert!(has(&restarted.published(), WWW, 1, &[192, 0, 2, 2]));
}

#[tokio::test]
async fn an_update_is_written_as_record_sets_and_bumps_the_serial() {
    let mut rig = rig();
    rig.create(ZONE, "corp", primary(json!({})));
    rig.create(
        RECORD_SET,
        "www",
        json!({"zone": "corp", "name": "www", "type": "A", "records": ["192.0.2.1"]}),
    );
    rig.settle().await;
    let acme = b"\x0f_acme-challenge\x04corp\x07example\x00";
    let serial = rig
        .manager
        .update(
            APEX,
            vec![Record {
                owner: WWW.into(),
                rtype: 1,
                ttl: 0,
                rdata: [192, 0, 2, 1].as_slice().into(),
            }],
            vec![
                Record {
                    owner: WWW.into(),
                    rtype: 1,
                    ttl: 60,
                    rdata: [192, 0, 2, 5].as_slice().into(),
                },
                Record {
                    owner: acme.as_slice().into(),
                    rtype: 16,
                    ttl: 60,
                    rdata: b"\x05token".as_slice().into(),
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!(serial, 2);
    rig.settle().await;
    assert_eq!(
        rig.serial(),
        Some(2),
        "the watch events that follow change nothing"
    );
    let records = rig.published();
    assert!(has(&records, WWW, 1, &[192, 0, 2, 5]));
    assert!(!has(&records, WWW, 1, &[192, 0, 2, 1]));
    assert!(has(&records, acme, 16, b"\x05token"));
    // The user's RecordSet was updated in place; the new RRset got its own object.
    assert_eq!(
        rig.store.get(RECORD_SET, "www").unwrap().spec["records"],
        json!(["192.0.2.5"])
    );
    let sets = rig
        .store
        .list(RECORD_SET, &Default::default())
        .unwrap()
        .items;
    assert_eq!(sets.len(), 2);
    assert!(
        sets.iter()
            .any(|s| s.spec["type"] == "TXT" && s.spec["records"] == json!(["\"token\""]))
    );
    assert!(
        rig.manager
            .update(b"\x05other\x07example\x00", vec![], vec![])
            .await
            .is_err()
    );
}

#[tokio::test]
async fn two_zones_at_one_apex_serve_the_first_by_name_until_it_goes() {
    let mut rig = rig();
    rig.create(ZONE, "a-corp", primary(json!({})));
    rig.create(ZONE, "b-corp", primary(json!({"serialPolicy": "unixtime"})));
    rig.create(
        ZONE,
        "fwd",
        json!({"zone": "test.", "type": "forward", "upstreams": ["udp://127.0.0.1:5301"]}),
    );
    rig.settle().await;
    assert_eq!(rig.serial(), Some(1), "a-corp serves");
    let (ready, message) = rig.ready(ZONE, "b-corp");
    assert_eq!(ready, ConditionStatus::False);
    assert!(
        message.contains("already served by Zone a-corp"),
        "{message}"
    );
    assert_eq!(rig.ready(ZONE, "fwd").0, ConditionStatus::True);
    assert_eq!(rig.manager.shared.publisher.zones().forwards().len(), 1);
    assert_eq!(
        rig.manager.shared.internal_json()["zones"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "forward zones are left out of /internal/zones"
    );
    rig.store
        .delete(&admin(), ZONE, "a-corp", &Default::default())
        .unwrap();
    rig.settle().await;
    assert_eq!(rig.ready(ZONE, "b-corp").0, ConditionStatus::True);
    assert!(
        rig.serial().unwrap() > 1_000_000_000,
        "b-corp (unixtime) serves now"
    );
}

#[test]
fn the_compiled_zone_lists_soa_first_then_in_canonical_order() {
    // The records API pages through `Zone::records()`: no sorted copy is kept.
    let name = |labels: &[&[u8]]| -> Box<[u8]> {
        let mut wire = Vec::new();
        for label in labels {
            wire.push(label.len() as u8);
            wire.extend_from_slice(label);
        }
        wire.extend_from_slice(APEX);
        wire.into()
    };
    let record = |owner: Box<[u8]>, rtype: u16, rdata: &[u8]| Record {
        owner,
        rtype,
        ttl: 60,
        rdata: rdata.into(),
    };
    let mut soa = vec![0u8, 0];
    soa.extend_from_slice(&[0; 20]);
    let a = [192, 0, 2, 1];
    let data = ZoneData {
        apex: APEX.into(),
        records: vec![
            record(name(&[b"z"]), 1, &a),
            record(name(&[b"*", b"z"]), 1, &a),
            record(name(&[b"a"]), 1, &a),
            record(name(&[b"\x01", b"z"]), 1, &a),
            record(name(&[]), 2, &name(&[b"a"])),
            record(name(&[b"\x80", b"z"]), 1, &a),
            record(name(&[]), 6, &soa),
        ],
        origins: Vec::new(),
    };
    let zone = Zone::compile(&data, ZoneKind::Primary).expect("compiles");
    let owners: Vec<(Box<[u8]>, u16)> = zone.records().map(|r| (r.owner, r.rtype)).collect();
    assert_eq!(
        owners,
        [
            (name(&[]), 6),
            (name(&[]), 2),
            (name(&[b"a"]), 1),
            (name(&[b"z"]), 1),
            (name(&[b"\x01", b"z"]), 1),
            (name(&[b"*", b"z"]), 1),
            (name(&[b"\x80", b"z"]), 1),
        ],
        "RFC 4034 §6.1's order"
    );
    assert_eq!(zone.record_count(), owners.len());
}
