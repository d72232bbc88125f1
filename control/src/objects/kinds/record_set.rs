//! `RecordSet`: one RRset of a primary zone, overlaid on the zone's file.
//! ```text
//! spec:
//!   zone: corp-example       the Zone object's metadata.name
//!   name: www                relative to the apex, "@" for the apex, or absolute (trailing dot)
//!   type: A                  any type `domain` knows, or TYPEnnn
//!   ttl: 300                 default: the zone's soa.minimum (300 unless set)
//!   records: ["192.0.2.1"]   presentation format; [] deletes the file's RRset of name and type
//! ```
//! The rdata is scanned when the object is written (relative names against a placeholder
//! origin), so a typo is refused at once naming `spec.records[i]`; the zone manager parses it
//! again against the real apex, and a name outside the zone shows in the status.

use kudurru_core::zone::file::parse_record_set;
use kudurru_storage::FieldError;
use serde_json::Value;

use super::{object, optional_number, optional_string, reference, strings};

/// The `RecordSet` kind.
pub const RECORD_SET: &str = "RecordSet";

/// Most records in one set.
const MAX_RECORDS: usize = 10_000;

/// `RecordSet.spec` checked and typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSetSpec {
    /// The Zone object's name.
    pub zone: String,
    /// The owner as written (relative, `@` or absolute).
    pub name: String,
    /// The type as written (`AAAA`, `TYPE65280`).
    pub rtype: String,
    /// The TTL; `None`: the zone's `soa.minimum`.
    pub ttl: Option<u32>,
    /// The rdata of each record, presentation format; empty: the RRset is deleted.
    pub records: Vec<String>,
}

/// `RecordSet.spec` checked and typed.
pub fn record_set(spec: &Value) -> Result<RecordSetSpec, FieldError> {
    let map = object(
        spec,
        "spec",
        &["zone", "name", "type", "ttl", "records"],
        "a RecordSet has zone, name, type, ttl and records",
    )?;
    let required = |field: &str, what: &str| {
        optional_string(map, "spec", field)?
            .ok_or_else(|| FieldError::new(format!("spec.{field}"), what.to_owned()))
    };
    let zone = required("zone", "the Zone object's name, e.g. corp-example")?;
    let zone = reference(zone, "spec.zone".into())?;
    let name = required("name", "the owner: www, @ or www.corp.example.")?;
    let rtype = required("type", "a record type such as A, AAAA, MX or TXT")?;
    let ttl = optional_number(map, "spec", "ttl", (0, u64::from(i32::MAX as u32)))?
        .and_then(|n| u32::try_from(n).ok());
    if !map.contains_key("records") {
        return Err(FieldError::new(
            "spec.records",
            "the records' rdata, e.g. [\"192.0.2.1\"]; [] deletes the RRset",
        ));
    }
    let records = strings(map, "spec", "records")?;
    if records.len() > MAX_RECORDS {
        return Err(FieldError::new(
            "spec.records",
            format!("at most {MAX_RECORDS} records"),
        ));
    }
    // The root as a placeholder apex: the syntax is checked, the zone is not known here.
    if let Err((at, message)) = parse_record_set(&[0], name, rtype, ttl.unwrap_or(0), &records) {
        let field = match at {
            Some(i) => format!("spec.records[{i}]"),
            None if rtype.parse::<domain::base::iana::Rtype>().is_err()
                || rtype.contains(char::is_whitespace) =>
            {
                "spec.type".into()
            }
            None => "spec.name".into(),
        };
        return Err(FieldError::new(field, message));
    }
    Ok(RecordSetSpec {
        zone,
        name: name.to_owned(),
        rtype: rtype.to_ascii_uppercase(),
        ttl,
        records: records.into_iter().map(str::to_owned).collect(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_set_converts_to_its_typed_spec() {
        let spec = record_set(&json!({
            "zone": "corp-example", "name": "www", "type": "aaaa", "ttl": 60,
            "records": ["2001:db8::1"]
        }))
        .unwrap();
        assert_eq!(
            spec,
            RecordSetSpec {
                zone: "corp-example".into(),
                name: "www".into(),
                rtype: "AAAA".into(),
                ttl: Some(60),
                records: vec!["2001:db8::1".into()],
            }
        );
        let deletion =
            record_set(&json!({"zone": "z", "name": "@", "type": "MX", "records": []})).unwrap();
        assert_eq!((deletion.ttl, deletion.records.len()), (None, 0));
    }

    #[test]
    fn every_bad_field_is_named() {
        let field = |spec: Value| record_set(&spec).unwrap_err().field;
        let base = |k: &str, v: Value| {
            let mut spec =
                json!({"zone": "z", "name": "www", "type": "A", "records": ["192.0.2.1"]});
            if v.is_null() {
                spec.as_object_mut().unwrap().remove(k);
            } else {
                spec[k] = v;
            }
            spec
        };
        for (spec, expected) in [
            (json!("x"), "spec"),
            (base("extra", json!(1)), "spec.extra"),
            (base("zone", Value::Null), "spec.zone"),
            (base("zone", json!("Not_A_Name")), "spec.zone"),
            (base("name", Value::Null), "spec.name"),
            (base("name", json!("two words")), "spec.name"),
            (base("name", json!("$INCLUDE")), "spec.name"),
            (base("type", Value::Null), "spec.type"),
            (base("type", json!("BOGUS")), "spec.type"),
            (base("ttl", json!(-1)), "spec.ttl"),
            (base("ttl", json!("1h")), "spec.ttl"),
            (base("records", Value::Null), "spec.records"),
            (base("records", json!("192.0.2.1")), "spec.records"),
            (base("records", json!(["192.0.2.1", 7])), "spec.records[1]"),
            (
                base("records", json!(["192.0.2.1", "192.0.2.300"])),
                "spec.records[1]",
            ),
            (
                base("records", json!(["192.0.2.1\nx 60 IN A 192.0.2.2"])),
                "spec.records[0]",
            ),
        ] {
            assert_eq!(field(spec.clone()), expected, "{spec}");
        }
    }
}
