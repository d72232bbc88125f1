//! `cluster.*`: whether this node is one of a fleet sharing objects, settings and leadership
//! through etcd, and how it reaches etcd. Every key is per node and read once at start: the
//! store driver, the etcd connection and the node's identity in the fleet are built from them
//! before anything else runs, so a change takes effect after a restart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::key::{KeyInfo, key, parse_string, parse_strings, show_list, show_string};

/// Default driver: a single node, no fleet.
pub const DEFAULT_CLUSTER_DRIVER: &str = "none";
/// Default fleet name: the etcd key prefix is `/kudurru/<name>/`.
pub const DEFAULT_CLUSTER_NAME: &str = "default";
/// Default lease TTL: a dead node's membership and leadership end this long after its last
/// keep-alive.
pub const DEFAULT_LEASE_TTL: &str = "10s";
/// The lease TTL's bounds: below 2 s a busy node misses keep-alives; above 60 s a dead leader
/// holds the fleet's periodic work for too long.
pub const LEASE_TTL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(2)..=Duration::from_secs(60);

/// `cluster.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSection {
    /// `none` or `etcd`.
    pub driver: String,
    /// `cluster.etcd.*`.
    pub etcd: EtcdSection,
    /// The fleet's name (the key prefix).
    pub name: String,
    /// This node's name in the fleet; empty = the host name.
    pub node_name: String,
    /// This node's API address as the other nodes reach it; empty = the API listener's.
    pub advertise_address: String,
    /// The lease TTL.
    #[serde(rename = "leaseTTL")]
    pub lease_ttl: String,
}

/// `cluster.etcd.*`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdSection {
    /// `http://H:P` or `https://H:P` endpoints.
    pub endpoints: Vec<String>,
    /// PEM CA bundle that signs the etcd servers' certificates.
    pub ca_file: String,
    /// PEM client certificate (mutual TLS).
    pub cert_file: String,
    /// PEM private key of `certFile`.
    pub key_file: String,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            driver: DEFAULT_CLUSTER_DRIVER.into(),
            etcd: EtcdSection::default(),
            name: DEFAULT_CLUSTER_NAME.into(),
            node_name: String::new(),
            advertise_address: String::new(),
            lease_ttl: DEFAULT_LEASE_TTL.into(),
        }
    }
}

/// The `cluster.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "cluster.driver",
        kind: "enum",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.driver,
        parse: parse_string,
        show: show_string,
        description: "none (one node, objects in redb) or etcd (a fleet: objects, cluster settings, membership and the leader in etcd)",
    },
    key! {
        key: "cluster.etcd.endpoints",
        kind: "list of URLs",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.etcd.endpoints,
        parse: parse_strings,
        show: show_list,
        description: "etcd client URLs, http://H:P or https://H:P; needed with cluster.driver = etcd",
    },
    key! {
        key: "cluster.etcd.caFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.etcd.ca_file,
        parse: parse_string,
        show: show_string,
        description: "PEM CA bundle of the etcd servers' certificates; needed with https:// endpoints",
    },
    key! {
        key: "cluster.etcd.certFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.etcd.cert_file,
        parse: parse_string,
        show: show_string,
        description: "PEM client certificate for etcd (mutual TLS); set with cluster.etcd.keyFile",
    },
    key! {
        key: "cluster.etcd.keyFile",
        kind: "path",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.etcd.key_file,
        parse: parse_string,
        show: show_string,
        description: "PEM private key of cluster.etcd.certFile",
    },
    key! {
        key: "cluster.name",
        kind: "string",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.name,
        parse: parse_string,
        show: show_string,
        description: "the fleet's name: every etcd key lives under /kudurru/<name>/, so several fleets share one etcd",
    },
    key! {
        key: "cluster.nodeName",
        kind: "string",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.node_name,
        parse: parse_string,
        show: show_string,
        description: "this node's name in the fleet (its member key); empty = the host name",
    },
    key! {
        key: "cluster.advertiseAddress",
        kind: "URL",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.advertise_address,
        parse: parse_string,
        show: show_string,
        description: "this node's API as the other nodes and clients reach it (named in 409 not_leader answers); empty = http(s)://<api.address>",
    },
    key! {
        key: "cluster.leaseTTL",
        kind: "duration",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.cluster.lease_ttl,
        parse: parse_string,
        show: show_string,
        description: "TTL of the node's etcd lease (membership, leadership): 2s to 60s; a leader without a keep-alive for half of it stops leader work",
    },
];

/// `cluster.*`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterSettings {
    /// One node: the redb store, this node is the leader.
    None,
    /// A fleet on etcd.
    Etcd(EtcdCluster),
}

/// A fleet on etcd, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdCluster {
    /// Client URLs.
    pub endpoints: Vec<String>,
    /// TLS files: CA, and the client pair.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (both or neither).
    pub client_pair: Option<(PathBuf, PathBuf)>,
    /// The fleet's name.
    pub name: String,
    /// This node's name.
    pub node_name: String,
    /// This node's API address for others.
    pub advertise_address: String,
    /// The lease TTL.
    pub lease_ttl: Duration,
}

impl ClusterSection {
    /// Checks the section. `api` is the API listener and whether it speaks HTTPS (the default
    /// advertised address); `host` is the host name (the default node name).
    pub(super) fn validate(
        &self,
        api: Option<(SocketAddr, bool)>,
        host: &str,
    ) -> Result<ClusterSettings, ConfigError> {
        match self.driver.as_str() {
            "none" => return Ok(ClusterSettings::None),
            "etcd" => {}
            other => {
                return Err(ConfigError::value(
                    "cluster.driver",
                    other,
                    "expected none or etcd",
                ));
            }
        }
        if self.etcd.endpoints.is_empty() {
            return Err(ConfigError::value(
                "cluster.etcd.endpoints",
                "",
                "cluster.driver = etcd needs at least one endpoint (http://H:P or https://H:P)",
            ));
        }
        for endpoint in &self.etcd.endpoints {
            check_endpoint(endpoint)
                .map_err(|why| ConfigError::value("cluster.etcd.endpoints", endpoint, why))?;
        }
        let tls = self
            .etcd
            .endpoints
            .iter()
            .any(|e| e.starts_with("https://"));
        if tls && self.etcd.endpoints.iter().any(|e| e.starts_with("http://")) {
            return Err(ConfigError::value(
                "cluster.etcd.endpoints",
                show_list(&self.etcd.endpoints),
                "mixes http:// and https:// endpoints; use one scheme",
            ));
        }
        let client_pair = match (self.etcd.cert_file.as_str(), self.etcd.key_file.as_str()) {
            ("", "") => None,
            ("", _) => {
                return Err(ConfigError::value(
                    "cluster.etcd.certFile",
                    "",
                    "cluster.etcd.keyFile is set: set cluster.etcd.certFile too, or neither",
                ));
            }
            (_, "") => {
                return Err(ConfigError::value(
                    "cluster.etcd.keyFile",
                    "",
                    "cluster.etcd.certFile is set: set cluster.etcd.keyFile too, or neither",
                ));
            }
            (cert, key) => Some((PathBuf::from(cert), PathBuf::from(key))),
        };
        let ca_file = (!self.etcd.ca_file.is_empty()).then(|| PathBuf::from(&self.etcd.ca_file));
        if tls && ca_file.is_none() {
            return Err(ConfigError::value(
                "cluster.etcd.caFile",
                "",
                "https:// endpoints need the CA that signed the etcd servers' certificates",
            ));
        }
        if !tls && (ca_file.is_some() || client_pair.is_some()) {
            return Err(ConfigError::value(
                "cluster.etcd.caFile",
                &self.etcd.ca_file,
                "TLS files are set but the endpoints are http://; use https:// endpoints",
            ));
        }
        check_name(&self.name)
            .map_err(|why| ConfigError::value("cluster.name", &self.name, why))?;
        let node_name = if self.node_name.is_empty() {
            host.to_owned()
        } else {
            self.node_name.clone()
        };
        check_name(&node_name)
            .map_err(|why| ConfigError::value("cluster.nodeName", &node_name, why))?;
        let advertise_address = if self.advertise_address.is_empty() {
            match api {
                Some((addr, https)) => {
                    format!("{}://{addr}", if https { "https" } else { "http" })
                }
                None => {
                    return Err(ConfigError::value(
                        "cluster.advertiseAddress",
                        "",
                        "the API is off (api.address is empty): set the address other nodes reach this one by",
                    ));
                }
            }
        } else {
            check_endpoint(&self.advertise_address).map_err(|why| {
                ConfigError::value("cluster.advertiseAddress", &self.advertise_address, why)
            })?;
            self.advertise_address.clone()
        };
        let lease_ttl = humantime::parse_duration(&self.lease_ttl)
            .map_err(|e| ConfigError::value("cluster.leaseTTL", &self.lease_ttl, e))?;
        if !LEASE_TTL_RANGE.contains(&lease_ttl) {
            return Err(ConfigError::value(
                "cluster.leaseTTL",
                &self.lease_ttl,
                "must be 2s to 60s",
            ));
        }
        Ok(ClusterSettings::Etcd(EtcdCluster {
            endpoints: self.etcd.endpoints.clone(),
            ca_file,
            client_pair,
            name: self.name.clone(),
            node_name,
            advertise_address,
            lease_ttl,
        }))
    }
}

/// `http://H:P` or `https://H:P` with a port and nothing after it.
fn check_endpoint(url: &str) -> Result<(), &'static str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("expected http://H:P or https://H:P")?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or("expected http://H:P or https://H:P (the port is needed)")?;
    if host.is_empty() || host.contains('/') || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err("expected http://H:P or https://H:P with a port from 1 to 65535");
    }
    Ok(())
}

/// A name that is one etcd key segment: letters, digits, `-`, `_`, `.`; 1 to 63 characters.
fn check_name(name: &str) -> Result<(), &'static str> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name != "."
        && name != "..";
    if valid {
        Ok(())
    } else {
        Err("expected 1 to 63 letters, digits, '-', '_' or '.' (it is a segment of etcd keys)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(endpoints: &[&str]) -> ClusterSection {
        ClusterSection {
            driver: "etcd".into(),
            etcd: EtcdSection {
                endpoints: endpoints.iter().map(|s| (*s).to_owned()).collect(),
                ..EtcdSection::default()
            },
            ..ClusterSection::default()
        }
    }

    fn api() -> Option<(SocketAddr, bool)> {
        Some(("127.0.0.1:8080".parse().unwrap(), false))
    }

    fn key_of(e: ConfigError) -> &'static str {
        match e {
            ConfigError::Value { key, .. } => key,
            other => panic!("not a value error: {other}"),
        }
    }

    #[test]
    fn none_is_the_default_and_etcd_takes_the_defaults_it_can() {
        assert!(matches!(
            ClusterSection::default().validate(api(), "h1"),
            Ok(ClusterSettings::None)
        ));
        let ClusterSettings::Etcd(c) = etcd(&["http://127.0.0.1:2379"])
            .validate(api(), "h1")
            .unwrap()
        else {
            panic!("etcd expected");
        };
        assert_eq!(c.node_name, "h1");
        assert_eq!(c.name, "default");
        assert_eq!(c.advertise_address, "http://127.0.0.1:8080");
        assert_eq!(c.lease_ttl, Duration::from_secs(10));
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = etcd(&[]);
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.etcd.endpoints"
        );
        c = etcd(&["127.0.0.1:2379"]);
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.etcd.endpoints"
        );
        c = etcd(&["http://a:1", "https://b:2"]);
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.etcd.endpoints"
        );
        c = etcd(&["http://a:1"]);
        c.driver = "consul".into();
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.driver"
        );
        c = etcd(&["http://a:1"]);
        c.lease_ttl = "1s".into();
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.leaseTTL"
        );
        c.lease_ttl = "soon".into();
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.leaseTTL"
        );
        c = etcd(&["http://a:1"]);
        c.name = "a/b".into();
        assert_eq!(key_of(c.validate(api(), "h").unwrap_err()), "cluster.name");
        c = etcd(&["http://a:1"]);
        c.etcd.cert_file = "c.pem".into();
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.etcd.keyFile"
        );
        c = etcd(&["http://a:1"]);
        c.etcd.ca_file = "ca.pem".into();
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.etcd.caFile"
        );
        c = etcd(&["http://a:1"]);
        assert_eq!(
            key_of(c.validate(None, "h").unwrap_err()),
            "cluster.advertiseAddress"
        );
        c.advertise_address = "10.0.0.1".into();
        assert_eq!(
            key_of(c.validate(api(), "h").unwrap_err()),
            "cluster.advertiseAddress"
        );
    }
}
