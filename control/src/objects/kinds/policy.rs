//! `Policy`: which client groups get which lists, how a blocked name is answered, rewrites and
//! an optional schedule.
//! ```text
//! spec:
//!   clientGroups: [kids, default]     ClientGroup names; default = clients in no group
//!   denyLists: [ads, malware]         BlockList names whose rules act as written
//!   allowLists: [school]              BlockList names any of whose rules allow (beats deny)
//!   blockResponse: nxdomain | nodata | refused | null | {addresses: [192.0.2.1, 2001:db8::1]}
//!   blockTTL: 60s                     default blocking.blockTTL
//!   rewrites:                         answered before any list
//!     - {name: www.google.com, cname: forcesafesearch.google.com}
//!     - {name: printer.home.arpa, addresses: [192.168.1.20]}
//!   schedule: {timeZone: Europe/Berlin, windows: [{days: [mon], from: "08:00", to: "17:30"}]}
//! ```
//! References are names, checked when the policy index is built (a missing or disabled one is
//! a diagnosis in the Policy's status, not a write error: objects may arrive in any order).

use std::net::IpAddr;
use std::time::Duration;

use kudurru_core::policy::{BlockResponse, PolicySpec, Rewrite, RewriteTarget};
use kudurru_storage::FieldError;
use serde_json::{Map, Value};

use super::{duration, object, optional_string, reference, strings, wire_name};
use crate::config::MAX_BLOCK_TTL;

/// The `Policy` kind.
pub const POLICY: &str = "Policy";

/// Most addresses in a block response or a rewrite.
const MAX_ADDRESSES: usize = 16;

/// `Policy.spec` checked and typed.
pub fn policy(spec: &Value) -> Result<PolicySpec, FieldError> {
    let map = object(
        spec,
        "spec",
        &[
            "clientGroups",
            "denyLists",
            "allowLists",
            "blockResponse",
            "blockTTL",
            "rewrites",
            "schedule",
        ],
        "a Policy has clientGroups, denyLists, allowLists, blockResponse, blockTTL, rewrites and schedule",
    )?;
    let names = |field: &str| -> Result<Vec<String>, FieldError> {
        strings(map, "spec", field)?
            .iter()
            .enumerate()
            .map(|(i, name)| reference(name, format!("spec.{field}[{i}]")))
            .collect()
    };
    let client_groups = names("clientGroups")?;
    if client_groups.is_empty() {
        return Err(FieldError::new(
            "spec.clientGroups",
            "a Policy applies to at least one ClientGroup (default: clients in no group)",
        ));
    }
    let deny_lists = names("denyLists")?;
    let allow_lists = names("allowLists")?;
    let block_response = match map.get("blockResponse") {
        None => BlockResponse::default(),
        Some(value) => block_response(value)?,
    };
    let block_ttl = optional_string(map, "spec", "blockTTL")?
        .map(|text| {
            let ttl = duration(
                text,
                "spec.blockTTL",
                Duration::from_secs(1),
                Some(MAX_BLOCK_TTL),
            )?;
            if ttl.subsec_nanos() != 0 {
                return Err(FieldError::new("spec.blockTTL", "a TTL is whole seconds"));
            }
            Ok(ttl)
        })
        .transpose()?;
    let rewrites = match map.get("rewrites") {
        None => Vec::new(),
        Some(value) => rewrites(value)?,
    };
    if deny_lists.is_empty() && allow_lists.is_empty() && rewrites.is_empty() {
        return Err(FieldError::new(
            "spec",
            "a Policy needs denyLists, allowLists or rewrites",
        ));
    }
    let schedule = map
        .get("schedule")
        .map(super::schedule::schedule)
        .transpose()?;
    Ok(PolicySpec {
        client_groups,
        deny_lists,
        allow_lists,
        block_response,
        block_ttl,
        rewrites,
        schedule,
    })
}

/// `spec.blockResponse`: a keyword or `{addresses: [...]}`.
fn block_response(value: &Value) -> Result<BlockResponse, FieldError> {
    const FIELD: &str = "spec.blockResponse";
    match value {
        Value::String(keyword) => match keyword.as_str() {
            "nxdomain" => Ok(BlockResponse::Nxdomain),
            "nodata" => Ok(BlockResponse::Nodata),
            "refused" => Ok(BlockResponse::Refused),
            "null" => Ok(BlockResponse::Null),
            other => Err(FieldError::new(
                FIELD,
                format!("{other:?} is not nxdomain, nodata, refused, null or {{addresses: [...]}}"),
            )),
        },
        Value::Object(_) => {
            let map = object(
                value,
                FIELD,
                &["addresses"],
                "a custom block response is {addresses: [...]}",
            )?;
            addresses(map, FIELD).map(BlockResponse::Addresses)
        }
        _ => Err(FieldError::new(
            FIELD,
            "must be nxdomain, nodata, refused, null or {addresses: [...]}",
        )),
    }
}

/// `path.addresses`: 1 to [`MAX_ADDRESSES`] IPv4 or IPv6 addresses.
fn addresses(map: &Map<String, Value>, path: &str) -> Result<Vec<IpAddr>, FieldError> {
    let texts = strings(map, path, "addresses")?;
    if texts.is_empty() || texts.len() > MAX_ADDRESSES {
        return Err(FieldError::new(
            format!("{path}.addresses"),
            format!("1 to {MAX_ADDRESSES} IPv4 or IPv6 addresses"),
        ));
    }
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse::<IpAddr>().map_err(|_| {
                FieldError::new(
                    format!("{path}.addresses[{i}]"),
                    format!("{text:?} is not an IPv4 or IPv6 address"),
                )
            })
        })
        .collect()
}

/// `spec.rewrites`: each `{name, addresses}` or `{name, cname}`.
fn rewrites(value: &Value) -> Result<Vec<Rewrite>, FieldError> {
    let Some(items) = value.as_array() else {
        return Err(FieldError::new(
            "spec.rewrites",
            "must be a list of {name, addresses} or {name, cname}",
        ));
    };
    if items.len() > super::MAX_ENTRIES {
        return Err(FieldError::new(
            "spec.rewrites",
            format!("at most {} rewrites", super::MAX_ENTRIES),
        ));
    }
    let mut out: Vec<Rewrite> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("spec.rewrites[{i}]");
        let map = object(
            item,
            &path,
            &["name", "addresses", "cname"],
            "a rewrite is {name, addresses} or {name, cname}",
        )?;
        let Some(name) = optional_string(map, &path, "name")? else {
            return Err(FieldError::new(
                format!("{path}.name"),
                "a rewrite needs the name it answers",
            ));
        };
        let name = wire_name(name, format!("{path}.name"))?;
        if out.iter().any(|r| r.name == name) {
            return Err(FieldError::new(
                format!("{path}.name"),
                "another rewrite already answers this name",
            ));
        }
        let target = match (map.get("addresses"), optional_string(map, &path, "cname")?) {
            (Some(_), None) => RewriteTarget::Addresses(addresses(map, &path)?),
            (None, Some(cname)) => {
                let target = wire_name(cname, format!("{path}.cname"))?;
                if target == name {
                    return Err(FieldError::new(
                        format!("{path}.cname"),
                        "a CNAME to the name itself would loop",
                    ));
                }
                RewriteTarget::Cname(target)
            }
            _ => {
                return Err(FieldError::new(
                    path,
                    "a rewrite has exactly one of addresses and cname",
                ));
            }
        };
        out.push(Rewrite { name, target });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_policy_of_lists_and_a_response_converts() {
        let spec = policy(&json!({
            "clientGroups": ["kids", "default"],
            "denyLists": ["ads"],
            "allowLists": ["school"],
            "blockResponse": {"addresses": ["192.0.2.1", "2001:db8::1"]},
            "blockTTL": "5m",
        }))
        .unwrap();
        assert_eq!(spec.client_groups, ["kids", "default"]);
        assert_eq!(spec.deny_lists, ["ads"]);
        assert_eq!(spec.allow_lists, ["school"]);
        assert_eq!(
            spec.block_response,
            BlockResponse::Addresses(vec![
                "192.0.2.1".parse().unwrap(),
                "2001:db8::1".parse().unwrap()
            ])
        );
        assert_eq!(spec.block_ttl, Some(Duration::from_secs(300)));
        assert!(spec.rewrites.is_empty() && spec.schedule.is_none());
        for (keyword, response) in [
            ("nxdomain", BlockResponse::Nxdomain),
            ("nodata", BlockResponse::Nodata),
            ("refused", BlockResponse::Refused),
            ("null", BlockResponse::Null),
        ] {
            let spec = policy(
                &json!({"clientGroups": ["default"], "denyLists": ["a"], "blockResponse": keyword}),
            )
            .unwrap();
            assert_eq!(spec.block_response, response);
        }
    }

    /// Fields checked without a domain name (the rewrites' names go through the core's IDNA
    /// conversion, tested below once it is merged).
    #[test]
    fn every_bad_field_is_named() {
        let field = |spec: Value| policy(&spec).unwrap_err().field;
        let ok = |extra: Value| {
            let mut spec = json!({"clientGroups": ["default"], "denyLists": ["ads"]});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            spec
        };
        for (spec, expected) in [
            (json!("x"), "spec"),
            (json!({"denyLists": ["ads"]}), "spec.clientGroups"),
            (
                json!({"clientGroups": "kids", "denyLists": ["ads"]}),
                "spec.clientGroups",
            ),
            (
                json!({"clientGroups": ["Kids"], "denyLists": ["ads"]}),
                "spec.clientGroups[0]",
            ),
            (json!({"clientGroups": ["kids"]}), "spec"),
            (
                ok(json!({"denyLists": ["ads", "no_such"]})),
                "spec.denyLists[1]",
            ),
            (ok(json!({"allowLists": [1]})), "spec.allowLists[0]"),
            (ok(json!({"blockResponse": "drop"})), "spec.blockResponse"),
            (ok(json!({"blockResponse": 3})), "spec.blockResponse"),
            (
                ok(json!({"blockResponse": {"address": ["192.0.2.1"]}})),
                "spec.blockResponse.address",
            ),
            (
                ok(json!({"blockResponse": {"addresses": []}})),
                "spec.blockResponse.addresses",
            ),
            (
                ok(json!({"blockResponse": {"addresses": ["192.0.2.1", "x"]}})),
                "spec.blockResponse.addresses[1]",
            ),
            (ok(json!({"blockTTL": "0s"})), "spec.blockTTL"),
            (ok(json!({"blockTTL": "2d"})), "spec.blockTTL"),
            (ok(json!({"blockTTL": 60})), "spec.blockTTL"),
            (ok(json!({"rewrites": {}})), "spec.rewrites"),
            (ok(json!({"rewrites": [7]})), "spec.rewrites[0]"),
            (
                ok(json!({"rewrites": [{"addresses": ["192.0.2.1"]}]})),
                "spec.rewrites[0].name",
            ),
            (
                ok(json!({"rewrites": [{"name": 1}]})),
                "spec.rewrites[0].name",
            ),
            (ok(json!({"schedule": {}})), "spec.schedule.timeZone"),
            (ok(json!({"other": 1})), "spec.other"),
        ] {
            assert_eq!(field(spec.clone()), expected, "{spec}");
        }
    }

    #[test]
    fn rewrites_name_their_bad_field() {
        let field = |rewrites: Value| {
            policy(&json!({"clientGroups": ["default"], "rewrites": rewrites}))
                .unwrap_err()
                .field
        };
        let spec = policy(&json!({"clientGroups": ["default"], "rewrites": [
            {"name": "WWW.Google.com.", "cname": "forcesafesearch.google.com"},
            {"name": "printer.home.arpa", "addresses": ["192.168.1.20"]},
        ]}))
        .unwrap();
        assert_eq!(&*spec.rewrites[0].name, b"\x03www\x06google\x03com\x00");
        assert_eq!(
            spec.rewrites[1].target,
            RewriteTarget::Addresses(vec!["192.168.1.20".parse().unwrap()])
        );
        for (rewrites, expected) in [
            (
                json!([{"name": "a..b", "cname": "c.example"}]),
                "spec.rewrites[0].name",
            ),
            (
                json!([{"name": "a.example", "cname": "bad..name"}]),
                "spec.rewrites[0].cname",
            ),
            (
                json!([{"name": "a.example", "cname": "A.example."}]),
                "spec.rewrites[0].cname",
            ),
            (json!([{"name": "a.example"}]), "spec.rewrites[0]"),
            (
                json!([{"name": "a.example", "cname": "b.example", "addresses": ["192.0.2.1"]}]),
                "spec.rewrites[0]",
            ),
            (
                json!([{"name": "a.example", "addresses": ["x"]}]),
                "spec.rewrites[0].addresses[0]",
            ),
            (
                json!([{"name": "a.example", "cname": "b.example"}, {"name": "A.example", "cname": "c.example"}]),
                "spec.rewrites[1].name",
            ),
        ] {
            assert_eq!(field(rewrites.clone()), expected, "{rewrites}");
        }
    }
}
