//! `POST /api/v1/zones/{name}/import[?dryRun=true]`: a zone file (`text/dns`, RFC 1035 master
//! format, parsed by the same parser as `Zone.spec.file`: [`parse_zone_file`], fuzzed by
//! `fuzz/fuzz_targets/zone_file.rs`) becomes the primary Zone's RecordSets: one RecordSet per
//! RRset of the file, existing RecordSets of the zone not in the file deleted, those equal to
//! the file's RRset kept. A parse error is 400 naming the line and changes nothing. The SOA is
//! left to the Zone (`spec.soa`, its serial policy): a file's SOA is skipped and said so.
//!
//! The writes are one store call each, under the API's write lock, after the whole file parsed
//! and every RecordSet passed validation: the object store has no multi-object transaction,
//! so a store failure half-way leaves the RecordSets written so far (the answer says which).

use std::collections::BTreeMap;

use kudurru_core::zone::file::{
    Included, Limits, parse_record_set, parse_zone_file, rdata_text, type_text,
};
use kudurru_storage::{Actor, DeleteOptions, ListOptions, Object};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{Reply, error, ok};
use crate::objects::ObjectStore;
use crate::objects::kinds::{RECORD_SET, ZONE, ZoneType, record_set, zone};

/// Most records one import may hold.
pub(super) const MAX_IMPORT_RECORDS: usize = 100_000;
/// The SOA type.
const SOA: u16 = 6;

/// An RRset's owner (lowercase wire form) and type.
type Key = (Box<[u8]>, u16);

/// One RRset: TTL and the records' rdata, presentation format, sorted.
#[derive(Debug, Clone, PartialEq)]
struct Set {
    ttl: Option<u32>,
    records: Vec<String>,
}

/// The RecordSet object name for an RRset of `zone` imported from a file: `<zone>-<hash>`
/// (the Zone's name cut so the whole fits a DNS label).
fn object_name(zone: &str, owner: &[u8], rtype: u16) -> String {
    let mut hash = Sha256::new();
    hash.update(zone.as_bytes());
    hash.update([0]);
    hash.update(owner);
    hash.update(rtype.to_be_bytes());
    let hex: String = hash.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let prefix: String = zone.chars().take(63 - 1 - hex.len()).collect();
    format!("{}-{hex}", prefix.trim_end_matches('-'))
}

/// The owner as a RecordSet writes it: absolute, with the trailing dot.
fn owner_text(owner: &[u8]) -> String {
    let text = kudurru_core::key::name_to_text(owner);
    if text.ends_with('.') {
        text
    } else {
        format!("{text}.")
    }
}

/// Imports `body` into the Zone `name`; `dry_run` lists the changes and writes nothing.
pub(super) fn import(
    store: &dyn ObjectStore,
    actor: &Actor,
    name: &str,
    body: &[u8],
    dry_run: bool,
) -> Reply {
    let zone_object = match store.get(ZONE, name) {
        Ok(object) => object,
        Err(e) => return crate::objects::routes::store_error(e).into(),
    };
    let spec = match zone(&zone_object.spec) {
        Ok(spec) => spec,
        Err(e) => {
            return error(
                409,
                "invalid_zone",
                format!("Zone {name}: {}: {}", e.field, e.message),
            );
        }
    };
    if !matches!(spec.kind, ZoneType::Primary(_)) {
        return error(
            409,
            "not_primary",
            format!(
                "Zone {name} is not a primary zone: only a primary zone's records are RecordSets"
            ),
        );
    }
    let apex = spec.apex;
    let limits = Limits {
        max_bytes: body.len().max(1),
        max_records: MAX_IMPORT_RECORDS,
    };
    let mut no_include = |_: &str| -> Result<Included, String> {
        Err("$INCLUDE is not allowed in an imported zone file".into())
    };
    let data = match parse_zone_file("import", body, &apex, &limits, &mut no_include) {
        Ok(data) => data,
        Err(e) => {
            let at = e.origin.clone().unwrap_or_else(|| "import".into());
            return error(400, "invalid_zone_file", format!("{at}: {}", e.kind));
        }
    };
    // The file's RRsets, SOA aside.
    let mut wanted: BTreeMap<Key, Set> = BTreeMap::new();
    let mut skipped = Vec::new();
    for record in &data.records {
        if record.rtype == SOA {
            skipped.push(format!(
                "{} SOA: the Zone's spec.soa and serial policy give the SOA",
                owner_text(&record.owner)
            ));
            continue;
        }
        let set = wanted
            .entry((record.owner.clone(), record.rtype))
            .or_insert(Set {
                ttl: Some(record.ttl),
                records: Vec::new(),
            });
        set.ttl = set.ttl.map(|t| t.min(record.ttl));
        set.records.push(rdata_text(record.rtype, &record.rdata));
    }
    for set in wanted.values_mut() {
        set.records.sort();
        set.records.dedup();
    }
    // The zone's RecordSets now, by owner and type.
    let existing = match store.list(RECORD_SET, &ListOptions::default()) {
        Ok(list) => list.items,
        Err(e) => return crate::objects::routes::store_error(e).into(),
    };
    let mut have: BTreeMap<Key, (Object, Set)> = BTreeMap::new();
    let mut stray = Vec::new();
    for object in existing {
        let Ok(rs) = record_set(&object.spec) else {
            continue;
        };
        if rs.zone != name {
            continue;
        }
        let records: Vec<&str> = rs.records.iter().map(String::as_str).collect();
        match parse_record_set(&apex, &rs.name, &rs.rtype, rs.ttl.unwrap_or(0), &records) {
            Ok(parsed) => {
                let mut texts: Vec<String> = parsed
                    .records
                    .iter()
                    .map(|r| rdata_text(r.rtype, &r.rdata))
                    .collect();
                texts.sort();
                texts.dedup();
                have.insert(
                    (parsed.owner, parsed.rtype),
                    (
                        object,
                        Set {
                            ttl: rs.ttl,
                            records: texts,
                        },
                    ),
                );
            }
            // Not inside the zone (its status says so): not the file's, so it goes.
            Err(_) => stray.push(object),
        }
    }
    let describe = |key: &Key, set: &Set| json!({ "name": owner_text(&key.0), "type": type_text(key.1), "ttl": set.ttl, "records": set.records });
    let (mut create, mut update, mut delete, mut unchanged) =
        (Vec::new(), Vec::new(), Vec::new(), 0usize);
    for (key, set) in &wanted {
        match have.get(key) {
            Some((_, now)) if now == set => unchanged += 1,
            Some((object, _)) => update.push((object.clone(), key.clone(), set.clone())),
            None => create.push((key.clone(), set.clone())),
        }
    }
    for (key, (object, _)) in &have {
        if !wanted.contains_key(key) {
            delete.push((object.clone(), Some(key.clone())));
        }
    }
    delete.extend(stray.into_iter().map(|o| (o, None)));
    let spec_of = |key: &Key, set: &Set| json!({ "zone": name, "name": owner_text(&key.0), "type": type_text(key.1), "ttl": set.ttl, "records": set.records });
    // Every RecordSet written must pass the kind's validation before anything is written.
    for (key, set) in create
        .iter()
        .map(|(k, s)| (k, s))
        .chain(update.iter().map(|(_, k, s)| (k, s)))
    {
        if let Err(e) = record_set(&spec_of(key, set)) {
            return error(
                400,
                "invalid_zone_file",
                format!(
                    "{} {}: {}: {}",
                    owner_text(&key.0),
                    type_text(key.1),
                    e.field,
                    e.message
                ),
            );
        }
    }
    let summary = |done: bool| {
        json!({
            "zone": name,
            "dryRun": !done,
            "create": create.iter().map(|(k, s)| describe(k, s)).collect::<Vec<_>>(),
            "update": update.iter().map(|(o, k, s)| {
                let mut d = describe(k, s);
                d["recordSet"] = json!(o.metadata.name);
                d
            }).collect::<Vec<_>>(),
            "delete": delete.iter().map(|(o, _)| json!({ "recordSet": o.metadata.name, "name": o.spec["name"], "type": o.spec["type"] })).collect::<Vec<_>>(),
            "unchanged": unchanged,
            "skipped": skipped,
        })
    };
    if dry_run {
        return ok(summary(false));
    }
    let mut written = 0usize;
    let fail = |e, written: usize| {
        let mut reply: Reply = crate::objects::routes::store_error(e).into();
        reply.body["written"] = json!(written);
        reply
    };
    for (key, set) in &create {
        let object = Object::new(
            RECORD_SET,
            object_name(name, &key.0, key.1),
            spec_of(key, set),
        );
        if let Err(e) = store.create(actor, &object) {
            return fail(e, written);
        }
        written += 1;
    }
    for (object, key, set) in &update {
        let mut object = object.clone();
        object.spec = spec_of(key, set);
        if let Err(e) = store.update(actor, &object) {
            return fail(e, written);
        }
        written += 1;
    }
    for (object, _) in &delete {
        let options = DeleteOptions {
            resource_version: Some(object.metadata.resource_version),
        };
        if let Err(e) = store.delete(actor, RECORD_SET, &object.metadata.name, &options) {
            return fail(e, written);
        }
        written += 1;
    }
    ok(summary(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_dns_labels() {
        let long = "z".repeat(63);
        for zone in ["corp-example", long.as_str()] {
            let n = object_name(zone, b"\x03www\x00", 1);
            assert!(n.len() <= 63 && !n.ends_with('-'), "{n}");
            kudurru_storage::validate_name(&n).unwrap();
        }
        assert_ne!(
            object_name("z", b"\x01a\x00", 1),
            object_name("z", b"\x01a\x00", 28)
        );
    }
}
