//! `Zone`: a domain the node answers for (primary, secondary) or forwards (forward).
//! ```text
//! spec:
//!   zone: corp.example.              the apex (required)
//!   type: primary | secondary | forward
//!   # primary
//!   file: corp.example.zone          relative to zones.fileDir; $INCLUDE only inside it
//!   serialPolicy: increment | unixtime                 (default increment)
//!   soa: {mname, rname, refresh, retry, expire, minimum, ttl}   when no file gives the SOA
//!   nameServers: [ns1.corp.example.]                   apex NS when no file gives them
//!   allowUpdate: {tsigKey: update-key, clients: ["127.0.0.0/8"]}   RFC 2136
//!   # primary and secondary
//!   allowTransfer: ["127.0.0.1/32", "::1"]             who may AXFR/IXFR (default nobody)
//!   notify: ["127.0.0.1:5300"]                          secondaries told of a change
//!   tsigKey: xfr-key                                    transfers and NOTIFY signed with it
//!   # secondary
//!   primaries: [{address: "127.0.0.1:5300", tsigKey: xfr-key}]
//!   # forward
//!   upstreams: ["udp://127.0.0.1:5301", "tcp://127.0.0.1:5301"]
//! ```
//! `type` decides which fields are allowed: a field of another type is an error naming it.

use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};

use kudurru_core::UpstreamSpec;
use kudurru_storage::FieldError;
use serde_json::{Map, Value};

use super::{object, optional_number, optional_string, strings, wire_name};

/// The `Zone` kind.
pub const ZONE: &str = "Zone";

/// Most primaries, notify targets, transfer prefixes, upstreams or name servers in one list.
const MAX_LIST: usize = 64;
/// Longest file path.
const MAX_PATH: usize = 4096;

/// `Zone.spec` checked and typed.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneSpec {
    /// The apex, lowercase wire form.
    pub apex: Box<[u8]>,
    /// What the zone is, with its type's fields.
    pub kind: ZoneType,
}

/// A zone's type and its fields.
#[derive(Debug, Clone, PartialEq)]
pub enum ZoneType {
    /// kudurru holds the data.
    Primary(PrimarySpec),
    /// Transferred from primaries.
    Secondary(SecondarySpec),
    /// Sent to its own upstreams.
    Forward(Vec<UpstreamSpec>),
}

/// How a primary's SOA serial moves on each change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SerialPolicy {
    /// One more than the last (RFC 1982 arithmetic).
    #[default]
    Increment,
    /// The current Unix time, or one more than the last if that is not later.
    Unixtime,
}

/// The SOA a primary gets when no file gives one (RFC 1035 §3.3.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoaSpec {
    /// The primary name server (`None`: the first of `nameServers`, else `ns1.<apex>`).
    pub mname: Option<Box<[u8]>>,
    /// The mailbox (`None`: `hostmaster.<apex>`).
    pub rname: Option<Box<[u8]>>,
    /// Secondaries' refresh interval, seconds.
    pub refresh: u32,
    /// Secondaries' retry interval, seconds.
    pub retry: u32,
    /// Secondaries' expire, seconds.
    pub expire: u32,
    /// The negative-caching TTL (RFC 2308), seconds; also the default TTL of RecordSets.
    pub minimum: u32,
    /// The SOA's own TTL, seconds.
    pub ttl: u32,
}

impl Default for SoaSpec {
    fn default() -> Self {
        Self {
            mname: None,
            rname: None,
            refresh: 3600,
            retry: 600,
            expire: 604_800,
            minimum: 300,
            ttl: 3600,
        }
    }
}

/// Who may transfer a zone and whom it tells of changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransferSpec {
    /// Addresses and prefixes allowed to AXFR/IXFR; empty: nobody.
    pub allow: Vec<(IpAddr, u8)>,
    /// Secondaries sent NOTIFY on each change.
    pub notify: Vec<SocketAddr>,
    /// The TSIG key name transfers and NOTIFY must be signed with.
    pub tsig_key: Option<String>,
}

/// A primary zone's fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrimarySpec {
    /// The zone file, relative to `zones.fileDir` (normalised, no `..`).
    pub file: Option<PathBuf>,
    /// How the serial moves.
    pub serial_policy: SerialPolicy,
    /// The SOA when no file gives one.
    pub soa: SoaSpec,
    /// Apex NS targets when no file gives them, lowercase wire form.
    pub name_servers: Vec<Box<[u8]>>,
    /// Transfers and NOTIFY.
    pub transfer: TransferSpec,
    /// Dynamic updates (RFC 2136); `None`: refused.
    pub allow_update: Option<UpdateSpec>,
}

/// Who may send dynamic updates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateSpec {
    /// The TSIG key an update must be signed with.
    pub tsig_key: Option<String>,
    /// The addresses and prefixes updates may come from (empty: any, if signed).
    pub clients: Vec<(IpAddr, u8)>,
}

/// A secondary zone's fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecondarySpec {
    /// Where it transfers from, in order.
    pub primaries: Vec<PrimaryServer>,
    /// Its own transfers out and NOTIFY.
    pub transfer: TransferSpec,
}

/// One primary of a secondary zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryServer {
    /// Its address (port 53 when none is given).
    pub address: SocketAddr,
    /// The TSIG key transfers from it are signed with.
    pub tsig_key: Option<String>,
}

const PRIMARY_FIELDS: &[&str] = &[
    "file",
    "serialPolicy",
    "soa",
    "nameServers",
    "allowUpdate",
    "allowTransfer",
    "notify",
    "tsigKey",
];
const SECONDARY_FIELDS: &[&str] = &["primaries", "allowTransfer", "notify", "tsigKey"];
const FORWARD_FIELDS: &[&str] = &["upstreams"];

/// `Zone.spec` checked and typed.
pub fn zone(spec: &Value) -> Result<ZoneSpec, FieldError> {
    let mut all = vec!["zone", "type"];
    all.extend(PRIMARY_FIELDS);
    all.extend(SECONDARY_FIELDS);
    all.extend(FORWARD_FIELDS);
    let map = object(
        spec,
        "spec",
        &all,
        "a Zone has zone, type and the fields of its type (see docs/operations.md)",
    )?;
    let Some(apex) = optional_string(map, "spec", "zone")? else {
        return Err(FieldError::new(
            "spec.zone",
            "a Zone needs its apex, e.g. corp.example.",
        ));
    };
    let apex = zone_name(apex, "spec.zone".into())?;
    let type_ = optional_string(map, "spec", "type")?;
    let (allowed, name): (&[&str], _) = match type_ {
        Some("primary") => (PRIMARY_FIELDS, "primary"),
        Some("secondary") => (SECONDARY_FIELDS, "secondary"),
        Some("forward") => (FORWARD_FIELDS, "forward"),
        Some(other) => {
            return Err(FieldError::new(
                "spec.type",
                format!("{other:?} is not primary, secondary or forward"),
            ));
        }
        None => {
            return Err(FieldError::new(
                "spec.type",
                "a Zone needs a type: primary, secondary or forward",
            ));
        }
    };
    if let Some(field) = map
        .keys()
        .find(|k| !["zone", "type"].contains(&k.as_str()) && !allowed.contains(&k.as_str()))
    {
        return Err(FieldError::new(
            format!("spec.{field}"),
            format!("not a field of a {name} zone"),
        ));
    }
    let kind = match name {
        "primary" => ZoneType::Primary(primary(map)?),
        "secondary" => ZoneType::Secondary(secondary(map)?),
        _ => ZoneType::Forward(upstreams(map)?),
    };
    Ok(ZoneSpec { apex, kind })
}

fn primary(map: &Map<String, Value>) -> Result<PrimarySpec, FieldError> {
    let file = optional_string(map, "spec", "file")?
        .map(|file| zone_file(file, "spec.file"))
        .transpose()?;
    let serial_policy = match optional_string(map, "spec", "serialPolicy")? {
        None | Some("increment") => SerialPolicy::Increment,
        Some("unixtime") => SerialPolicy::Unixtime,
        Some(other) => {
            return Err(FieldError::new(
                "spec.serialPolicy",
                format!("{other:?} is not increment or unixtime"),
            ));
        }
    };
    let soa = match map.get("soa") {
        None => SoaSpec::default(),
        Some(value) => soa(value)?,
    };
    let name_servers = bounded(strings(map, "spec", "nameServers")?, "spec.nameServers")?
        .iter()
        .enumerate()
        .map(|(i, name)| absolute_name(name, format!("spec.nameServers[{i}]")))
        .collect::<Result<_, _>>()?;
    let allow_update = match map.get("allowUpdate") {
        None => None,
        Some(value) => {
            let path = "spec.allowUpdate";
            let update = object(
                value,
                path,
                &["tsigKey", "clients"],
                "allowUpdate has tsigKey and clients",
            )?;
            Some(UpdateSpec {
                tsig_key: key_name(update, path)?,
                clients: prefixes(update, path, "clients")?,
            })
        }
    };
    Ok(PrimarySpec {
        file,
        serial_policy,
        soa,
        name_servers,
        transfer: transfer(map)?,
        allow_update,
    })
}

fn secondary(map: &Map<String, Value>) -> Result<SecondarySpec, FieldError> {
    let Some(list) = map.get("primaries") else {
        return Err(FieldError::new(
            "spec.primaries",
            "a secondary zone needs at least one primary: {address, tsigKey}",
        ));
    };
    let Some(list) = list
        .as_array()
        .filter(|l| !l.is_empty() && l.len() <= MAX_LIST)
    else {
        return Err(FieldError::new(
            "spec.primaries",
            format!("must be a list of 1 to {MAX_LIST} primaries: {{address, tsigKey}}"),
        ));
    };
    let primaries = list
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let path = format!("spec.primaries[{i}]");
            let server = object(
                value,
                &path,
                &["address", "tsigKey"],
                "a primary has address and tsigKey",
            )?;
            let Some(address) = optional_string(server, &path, "address")? else {
                return Err(FieldError::new(
                    format!("{path}.address"),
                    "a primary needs an address (IP or IP:PORT)",
                ));
            };
            Ok(PrimaryServer {
                address: socket_address(address, format!("{path}.address"))?,
                tsig_key: key_name(server, &path)?,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(SecondarySpec {
        primaries,
        transfer: transfer(map)?,
    })
}

fn upstreams(map: &Map<String, Value>) -> Result<Vec<UpstreamSpec>, FieldError> {
    let list = bounded(strings(map, "spec", "upstreams")?, "spec.upstreams")?;
    if list.is_empty() {
        return Err(FieldError::new(
            "spec.upstreams",
            "a forward zone needs at least one upstream (udp://IP:PORT or tcp://IP:PORT)",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, url)| {
            let spec = url
                .parse::<UpstreamSpec>()
                .map_err(|e| FieldError::new(format!("spec.upstreams[{i}]"), e.to_string()))?;
            // Host names are resolved (upstream.bootstrap) for the global upstreams only: an
            // unresolved one holds the unspecified address, which would reach this host.
            if !spec.is_resolved() {
                return Err(FieldError::new(
                    format!("spec.upstreams[{i}]"),
                    "a forward zone's upstream must be an IP address, not a host name",
                ));
            }
            Ok(spec)
        })
        .collect()
}

fn transfer(map: &Map<String, Value>) -> Result<TransferSpec, FieldError> {
    Ok(TransferSpec {
        allow: prefixes(map, "spec", "allowTransfer")?,
        notify: bounded(strings(map, "spec", "notify")?, "spec.notify")?
            .iter()
            .enumerate()
            .map(|(i, text)| socket_address(text, format!("spec.notify[{i}]")))
            .collect::<Result<_, _>>()?,
        tsig_key: key_name(map, "spec")?,
    })
}

fn soa(value: &Value) -> Result<SoaSpec, FieldError> {
    let path = "spec.soa";
    let map = object(
        value,
        path,
        &[
            "mname", "rname", "refresh", "retry", "expire", "minimum", "ttl",
        ],
        "an soa has mname, rname, refresh, retry, expire, minimum and ttl",
    )?;
    let name = |field: &str| {
        optional_string(map, path, field)?
            .map(|text| absolute_name(text, format!("{path}.{field}")))
            .transpose()
    };
    let defaults = SoaSpec::default();
    let seconds = |field: &str, default: u32| -> Result<u32, FieldError> {
        Ok(
            optional_number(map, path, field, (0, u64::from(i32::MAX as u32)))?
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(default),
        )
    };
    Ok(SoaSpec {
        mname: name("mname")?,
        rname: name("rname")?,
        refresh: seconds("refresh", defaults.refresh)?,
        retry: seconds("retry", defaults.retry)?,
        expire: seconds("expire", defaults.expire)?,
        minimum: seconds("minimum", defaults.minimum)?,
        ttl: seconds("ttl", defaults.ttl)?,
    })
}

/// A TSIG key's name (`tsigKey`), if present: a domain name, as BIND's key files name them.
fn key_name(map: &Map<String, Value>, path: &str) -> Result<Option<String>, FieldError> {
    optional_string(map, path, "tsigKey")?
        .map(|name| {
            let field = format!("{path}.tsigKey");
            wire_name(name, field.clone())?;
            if name.len() > 255 {
                return Err(FieldError::new(field, "longer than 255 bytes"));
            }
            Ok(name.trim_end_matches('.').to_ascii_lowercase())
        })
        .transpose()
}

fn prefixes(
    map: &Map<String, Value>,
    path: &str,
    field: &str,
) -> Result<Vec<(IpAddr, u8)>, FieldError> {
    let full = format!("{path}.{field}");
    bounded(strings(map, path, field)?, &full)?
        .iter()
        .enumerate()
        .map(|(i, text)| {
            prefix(text).ok_or_else(|| {
                FieldError::new(
                    format!("{full}[{i}]"),
                    format!(
                        "{text:?} is not an IP address or prefix (127.0.0.1, 192.0.2.0/24, ::1)"
                    ),
                )
            })
        })
        .collect()
}

/// `192.0.2.0/24`, `2001:db8::/32` or a bare address (a /32 or /128).
pub(crate) fn prefix(text: &str) -> Option<(IpAddr, u8)> {
    let (address, length) = match text.split_once('/') {
        Some((address, length)) => (address, Some(length)),
        None => (text, None),
    };
    let address: IpAddr = address.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    let length = match length {
        None => max,
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse::<u8>().ok().filter(|&l| l <= max)?
        }
        Some(_) => return None,
    };
    Some((address, length))
}

fn socket_address(text: &str, field: String) -> Result<SocketAddr, FieldError> {
    kudurru_core::upstream::parse_host_port(text, 53).ok_or_else(|| {
        FieldError::new(
            field,
            format!("{text:?} is not an address: IP, IP:PORT or [IPv6]:PORT"),
        )
    })
}

/// A zone apex: a domain name (the root is not a zone kudurru serves).
fn zone_name(text: &str, field: String) -> Result<Box<[u8]>, FieldError> {
    wire_name(text, field)
}

/// A name in a zone's data (name server, SOA names): a domain name, absolute.
fn absolute_name(text: &str, field: String) -> Result<Box<[u8]>, FieldError> {
    wire_name(text, field)
}

fn bounded<'a>(list: Vec<&'a str>, field: &str) -> Result<Vec<&'a str>, FieldError> {
    if list.len() > MAX_LIST {
        return Err(FieldError::new(
            field,
            format!("at most {MAX_LIST} entries"),
        ));
    }
    Ok(list)
}

/// A relative, normalised path without `..`, inside `zones.fileDir` (the node's own key,
/// checked again with symlinks resolved when the file is read).
fn zone_file(file: &str, field: &str) -> Result<PathBuf, FieldError> {
    if file.is_empty() || file.len() > MAX_PATH || file.contains('\0') {
        return Err(FieldError::new(
            field,
            format!("a path of 1 to {MAX_PATH} bytes without NUL"),
        ));
    }
    let path = Path::new(file);
    if path.is_absolute() {
        return Err(FieldError::new(
            field,
            format!("{file:?} is absolute: name the file relative to zones.fileDir"),
        ));
    }
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(FieldError::new(
            field,
            format!("{file:?} leaves zones.fileDir (`..`)"),
        ));
    }
    Ok(path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn wire(text: &str) -> Box<[u8]> {
        kudurru_core::policy::name::to_wire(text).unwrap().into()
    }

    #[test]
    fn a_full_primary_converts_to_its_typed_spec() {
        let spec = zone(&json!({
            "zone": "Corp.Example.",
            "type": "primary",
            "file": "./corp.example.zone",
            "serialPolicy": "unixtime",
            "soa": {"mname": "ns1.corp.example.", "rname": "hostmaster.corp.example.",
                    "refresh": 7200, "minimum": 60},
            "nameServers": ["ns1.corp.example.", "ns2.corp.example."],
            "allowTransfer": ["127.0.0.1/32", "::1"],
            "notify": ["127.0.0.1:5300", "127.0.0.2"],
            "tsigKey": "xfr-key.",
            "allowUpdate": {"tsigKey": "update-key", "clients": ["127.0.0.0/8"]}
        }))
        .unwrap();
        assert_eq!(spec.apex, wire("corp.example"));
        let ZoneType::Primary(primary) = spec.kind else {
            panic!("a primary")
        };
        assert_eq!(
            primary.file.as_deref(),
            Some(Path::new("corp.example.zone"))
        );
        assert_eq!(primary.serial_policy, SerialPolicy::Unixtime);
        assert_eq!(primary.soa.mname, Some(wire("ns1.corp.example")));
        assert_eq!(
            (primary.soa.refresh, primary.soa.retry, primary.soa.minimum),
            (7200, 600, 60)
        );
        assert_eq!(primary.name_servers.len(), 2);
        assert_eq!(
            primary.transfer.allow,
            [
                ("127.0.0.1".parse().unwrap(), 32),
                ("::1".parse().unwrap(), 128)
            ]
        );
        assert_eq!(
            primary.transfer.notify,
            [
                "127.0.0.1:5300".parse().unwrap(),
                "127.0.0.2:53".parse().unwrap()
            ]
        );
        assert_eq!(primary.transfer.tsig_key.as_deref(), Some("xfr-key"));
        let update = primary.allow_update.unwrap();
        assert_eq!(update.tsig_key.as_deref(), Some("update-key"));
        assert_eq!(update.clients, [("127.0.0.0".parse().unwrap(), 8)]);

        let minimal = zone(&json!({"zone": "corp.example", "type": "primary"})).unwrap();
        assert_eq!(
            minimal.kind,
            ZoneType::Primary(PrimarySpec::default()),
            "defaults: increment, the default SOA, nobody transfers or updates"
        );
    }

    #[test]
    fn secondaries_and_forwards_convert() {
        let spec = zone(&json!({
            "zone": "corp.example.", "type": "secondary",
            "primaries": [{"address": "127.0.0.1:5300", "tsigKey": "xfr-key"}, {"address": "::1"}]
        }))
        .unwrap();
        let ZoneType::Secondary(secondary) = spec.kind else {
            panic!("a secondary")
        };
        assert_eq!(
            secondary.primaries,
            [
                PrimaryServer {
                    address: "127.0.0.1:5300".parse().unwrap(),
                    tsig_key: Some("xfr-key".into())
                },
                PrimaryServer {
                    address: "[::1]:53".parse().unwrap(),
                    tsig_key: None
                }
            ]
        );
        let spec = zone(&json!({
            "zone": "test.", "type": "forward",
            "upstreams": ["udp://127.0.0.1:5301", "tcp://127.0.0.1:5301"]
        }))
        .unwrap();
        assert!(matches!(spec.kind, ZoneType::Forward(ref u) if u.len() == 2));
    }

    #[test]
    fn every_bad_field_is_named() {
        let field = |spec: Value| zone(&spec).unwrap_err().field;
        let p = |extra: Value| {
            let mut spec = json!({"zone": "corp.example.", "type": "primary"});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            spec
        };
        for (spec, expected) in [
            (json!([]), "spec"),
            (json!({"type": "primary"}), "spec.zone"),
            (json!({"zone": "a..b", "type": "primary"}), "spec.zone"),
            (json!({"zone": 7, "type": "primary"}), "spec.zone"),
            (json!({"zone": "corp.example."}), "spec.type"),
            (
                json!({"zone": "corp.example.", "type": "stub"}),
                "spec.type",
            ),
            (p(json!({"extra": 1})), "spec.extra"),
            (p(json!({"primaries": []})), "spec.primaries"),
            (p(json!({"upstreams": []})), "spec.upstreams"),
            (p(json!({"file": "/etc/zones/x"})), "spec.file"),
            (p(json!({"file": "../x.zone"})), "spec.file"),
            (p(json!({"file": "a/../../x.zone"})), "spec.file"),
            (p(json!({"serialPolicy": "date"})), "spec.serialPolicy"),
            (p(json!({"soa": {"mname": "a..b"}})), "spec.soa.mname"),
            (p(json!({"soa": {"refresh": -1}})), "spec.soa.refresh"),
            (p(json!({"soa": {"serial": 1}})), "spec.soa.serial"),
            (
                p(json!({"nameServers": ["ok.example.", "bad name"]})),
                "spec.nameServers[1]",
            ),
            (
                p(json!({"allowTransfer": ["10.0.0.0/33"]})),
                "spec.allowTransfer[0]",
            ),
            (
                p(json!({"allowTransfer": ["any"]})),
                "spec.allowTransfer[0]",
            ),
            (p(json!({"notify": ["127.0.0.1:99999"]})), "spec.notify[0]"),
            (p(json!({"tsigKey": "bad key"})), "spec.tsigKey"),
            (
                p(json!({"allowUpdate": {"clients": ["x"]}})),
                "spec.allowUpdate.clients[0]",
            ),
            (
                p(json!({"allowUpdate": {"key": "x"}})),
                "spec.allowUpdate.key",
            ),
            (
                json!({"zone": "corp.example.", "type": "secondary"}),
                "spec.primaries",
            ),
            (
                json!({"zone": "corp.example.", "type": "secondary", "primaries": [{}]}),
                "spec.primaries[0].address",
            ),
            (
                json!({"zone": "corp.example.", "type": "secondary", "primaries": [{"address": "nope"}]}),
                "spec.primaries[0].address",
            ),
            (
                json!({"zone": "corp.example.", "type": "secondary", "primaries": [{"address": "127.0.0.1"}], "file": "x"}),
                "spec.file",
            ),
            (
                json!({"zone": "test.", "type": "forward"}),
                "spec.upstreams",
            ),
            (
                json!({"zone": "test.", "type": "forward", "upstreams": ["dns://127.0.0.1"]}),
                "spec.upstreams[0]",
            ),
            (
                json!({"zone": "test.", "type": "forward", "upstreams": ["udp://127.0.0.1", "udp://resolver.test.example"]}),
                "spec.upstreams[1]",
            ),
            (
                json!({"zone": "test.", "type": "forward", "upstreams": ["udp://127.0.0.1"], "notify": []}),
                "spec.notify",
            ),
        ] {
            assert_eq!(field(spec.clone()), expected, "{spec}");
        }
    }
}
