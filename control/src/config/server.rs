//! `server.*`: the node's listeners, its cores, how it names itself and which clients it
//! serves.

use kudurru_core::{AccessList, AclAction, Prefix};
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::key::{
    KeyInfo, key, parse_cpus, parse_num, parse_string, parse_strings, show_list, show_num,
    show_string,
};

/// Default client listeners: DNS over UDP and TCP on port 5300 of both loopbacks.
pub const DEFAULT_LISTEN: &[&str] = &["127.0.0.1:5300", "[::1]:5300"];
/// Default wait for in-flight queries on SIGTERM or SIGINT.
pub const DEFAULT_SHUTDOWN_GRACE: &str = "5s";

/// Default `server.allow`: loopback, private, shared (CGNAT) and link-local ranges.
const DEFAULT_ALLOW: &[&str] = kudurru_core::acl::DEFAULT_ALLOW;
/// Default `server.aclAction`.
const DEFAULT_ACL_ACTION: &str = "refuse";

/// `server.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerSection {
    /// Listener URLs.
    pub listen: Vec<String>,
    /// Number of cores; 0 means every available CPU.
    pub cores: usize,
    /// CPUs to pin to (overrides `cores` when non-empty).
    pub cpus: Vec<usize>,
    /// `id.server` answer; empty answers the host's name.
    pub identity: String,
    /// `version.server` answer; empty refuses it.
    pub version: String,
    /// How long shutdown drains connections and in-flight queries before cutting the rest.
    pub shutdown_grace: String,
    /// Client prefixes served (the most specific of `allow` and `deny` decides).
    pub allow: Vec<String>,
    /// Client prefixes refused.
    pub deny: Vec<String>,
    /// What a refused client gets: `refuse` or `drop`.
    pub acl_action: String,
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.iter().map(|s| (*s).to_owned()).collect(),
            cores: 0,
            cpus: Vec::new(),
            identity: String::new(),
            version: format!("kudurru {}", env!("CARGO_PKG_VERSION")),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE.into(),
            allow: DEFAULT_ALLOW.iter().map(|s| (*s).to_owned()).collect(),
            deny: Vec::new(),
            acl_action: DEFAULT_ACL_ACTION.into(),
        }
    }
}

/// The `server.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "server.listen",
        kind: "list of URLs",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.server.listen,
        parse: parse_strings,
        show: show_list,
        description: "client listeners: udp://H:P, tcp://H:P, H:P for both, tls://H:P for DNS over TLS (port 853), https://H:P/path for DNS over HTTPS (port 443, path /dns-query), quic://H:P for DNS over QUIC (UDP port 853), h3://H:P/path for DNS over HTTP/3 (UDP port 443, path /dns-query); IPv4 or [IPv6]",
    },
    key! {
        key: "server.cores",
        kind: "integer",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.server.cores,
        parse: parse_num,
        show: show_num,
        description: "executors to run, one pinned per CPU; 0 = every CPU this process may use",
    },
    key! {
        key: "server.cpus",
        kind: "list of integers",
        scope: Node,
        host_only: true,
        restart_required: true,
        field: |c| c.server.cpus,
        parse: parse_cpus,
        show: show_list,
        description: "CPUs to pin the executors to (overrides server.cores when set)",
    },
    key! {
        key: "server.identity",
        kind: "string",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.server.identity,
        parse: parse_string,
        show: show_string,
        description: "TXT answer to CH id.server and hostname.bind (RFC 4892); empty = the host's name",
    },
    key! {
        key: "server.version",
        kind: "string",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.server.version,
        parse: parse_string,
        show: show_string,
        description: "TXT answer to CH version.server and version.bind; empty = REFUSED",
    },
    key! {
        key: "server.shutdownGrace",
        kind: "duration",
        scope: Node,
        host_only: false,
        restart_required: true,
        field: |c| c.server.shutdown_grace,
        parse: parse_string,
        show: show_string,
        description: "how long SIGTERM/SIGINT drains after shutdown.drainDelay: listeners close, every transport finishes the queries it has read (TCP/DoT close, DoH GOAWAY, DoQ/DoH3 CONNECTION_CLOSE/GOAWAY), then what is left is cut, logged and counted",
    },
    key! {
        key: "server.allow",
        kind: "list of prefixes",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.server.allow,
        parse: parse_strings,
        show: show_list,
        description: "client prefixes served (ADDR/LEN or ADDR); the most specific entry of server.allow and server.deny decides, deny on a tie, and a client in neither is refused; 0.0.0.0/0 and ::/0 make an open resolver",
    },
    key! {
        key: "server.deny",
        kind: "list of prefixes",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.server.deny,
        parse: parse_strings,
        show: show_list,
        description: "client prefixes refused, also inside a broader server.allow entry",
    },
    key! {
        key: "server.aclAction",
        kind: "refuse or drop",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.server.acl_action,
        parse: parse_string,
        show: show_string,
        description: "what a client outside server.allow gets: refuse = a REFUSED answer, drop = nothing (UDP no reply, streams closed or reset)",
    },
];

impl ServerSection {
    /// Parses `server.allow`, `server.deny` and `server.aclAction` into the access list the
    /// cores check first.
    pub(super) fn access_list(&self) -> Result<AccessList, ConfigError> {
        let prefixes = |key: &'static str, list: &[String]| {
            list.iter()
                .map(|p| {
                    p.parse::<Prefix>()
                        .map_err(|e| ConfigError::value(key, p, e))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let allow = prefixes("server.allow", &self.allow)?;
        let deny = prefixes("server.deny", &self.deny)?;
        let action = match self.acl_action.as_str() {
            "refuse" => AclAction::Refuse,
            "drop" => AclAction::Drop,
            other => {
                return Err(ConfigError::value(
                    "server.aclAction",
                    other,
                    "expected refuse or drop",
                ));
            }
        };
        Ok(AccessList::new(&allow, &deny, action))
    }
}
