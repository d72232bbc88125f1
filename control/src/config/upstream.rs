//! `upstreams` and `upstream.*`: the resolvers queries are forwarded to and how long to wait.

use std::sync::Arc;

use kudurru_core::UpstreamTls;
use serde::{Deserialize, Serialize};

use super::ConfigError;

use super::key::{
    KeyInfo, key, parse_bool, parse_string, parse_strings, show_bool, show_list, show_string,
};

/// Default upstreams: well-known public resolvers (Cloudflare, Quad9), over UDP.
pub const DEFAULT_UPSTREAMS: &[&str] = &["udp://1.1.1.1:53", "udp://9.9.9.9:53"];
/// Default wait for one attempt at one upstream.
pub const DEFAULT_UPSTREAM_TIMEOUT: &str = "1500ms";
/// Default bound on all attempts for one query.
pub const DEFAULT_RESOLVE_TIMEOUT: &str = "4s";

/// Default bootstrap resolvers: the default upstreams' addresses.
pub(super) const DEFAULT_BOOTSTRAP: &[&str] = &["1.1.1.1:53", "9.9.9.9:53"];
/// Default idle time before a connection to an upstream is closed.
pub(super) const DEFAULT_UPSTREAM_IDLE_TIMEOUT: &str = "30s";
/// Default interval between probes of an upstream taken out of rotation.
pub(super) const DEFAULT_HEALTH_CHECK_INTERVAL: &str = "5s";
/// Default wait before a stale answer is sent (RFC 8767 §5's suggestion).
pub(super) const DEFAULT_STALE_ANSWER_TIMEOUT: &str = "1800ms";

/// `upstream.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpstreamSection {
    /// One attempt's timeout.
    pub timeout: String,
    /// The whole resolution's bound.
    pub resolve_timeout: String,
    /// `fastest`, `ordered`, `random` or `parallel`.
    pub strategy: String,
    /// Plain-DNS resolvers (IP or IP:PORT) that resolve host names in upstream URLs.
    pub bootstrap: Vec<String>,
    /// Idle time before an upstream connection is closed.
    pub idle_timeout: String,
    /// Interval between probes of an upstream out of rotation.
    pub health_check_interval: String,
    /// Wait for upstreams before a stale answer is sent.
    pub stale_answer_timeout: String,
    /// EDNS padding on encrypted upstream queries.
    pub padding: bool,
    /// Forwarding-loop probes of plain upstreams (`upstream.loopProbe`).
    pub loop_probe: bool,
    /// `upstream.tls.*`.
    pub tls: UpstreamTlsSection,
}

impl Default for UpstreamSection {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_UPSTREAM_TIMEOUT.into(),
            resolve_timeout: DEFAULT_RESOLVE_TIMEOUT.into(),
            strategy: "fastest".into(),
            bootstrap: DEFAULT_BOOTSTRAP.iter().map(|s| (*s).to_owned()).collect(),
            idle_timeout: DEFAULT_UPSTREAM_IDLE_TIMEOUT.into(),
            health_check_interval: DEFAULT_HEALTH_CHECK_INTERVAL.into(),
            stale_answer_timeout: DEFAULT_STALE_ANSWER_TIMEOUT.into(),
            padding: true,
            loop_probe: true,
            tls: UpstreamTlsSection::default(),
        }
    }
}

/// `upstream.tls.*`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpstreamTlsSection {
    /// PEM file of the certificates to trust for encrypted upstreams; empty: the system roots.
    pub ca_file: String,
    /// `NAME=sha256/BASE64` SPKI pins.
    pub pins: Vec<String>,
}

/// The `upstreams` key and the `upstream.*` keys, in documentation order.
pub(super) const KEYS: &[KeyInfo] = &[
    key! {
        key: "upstreams",
        kind: "list of URLs",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstreams,
        parse: parse_strings,
        show: show_list,
        description: "upstream resolvers: udp://H:P (TCP on truncation), tcp://H:P, tls://H:P#name (DoT), https://H:P/path (DoH), quic://H:P#name (DoQ), h3://H:P/path (DoH3); H is an IP address or a name resolved through upstream.bootstrap",
    },
    key! {
        key: "upstream.timeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.upstream.timeout,
        parse: parse_string,
        show: show_string,
        description: "the longest wait for one attempt before the next is sent (3x the upstream's smoothed RTT, at least 200 ms, at most this); earlier attempts stay open until upstream.resolveTimeout",
    },
    key! {
        key: "upstream.resolveTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: true,
        field: |c| c.upstream.resolve_timeout,
        parse: parse_string,
        show: show_string,
        description: "bound on all attempts for one query; then SERVFAIL (cached for cache.servfailTTL)",
    },
    key! {
        key: "upstream.strategy",
        kind: "string",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.strategy,
        parse: parse_string,
        show: show_string,
        description: "how the upstream to ask is chosen: fastest (lowest smoothed RTT, others probed now and then), ordered (in the configured order, the next on failure), random, parallel (the two best at once, the first good reply wins)",
    },
    key! {
        key: "upstream.bootstrap",
        kind: "list of addresses",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.bootstrap,
        parse: parse_strings,
        show: show_list,
        description: "plain-DNS resolvers (IP or IP:PORT) that resolve host names in upstream URLs (never kudurru itself); names are re-resolved when their TTL runs out",
    },
    key! {
        key: "upstream.idleTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.idle_timeout,
        parse: parse_string,
        show: show_string,
        description: "a connection to a tcp://, tls://, https://, quic:// or h3:// upstream with no query for this long is closed",
    },
    key! {
        key: "upstream.healthCheckInterval",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.health_check_interval,
        parse: parse_string,
        show: show_string,
        description: "how often an upstream taken out of rotation after consecutive failures is probed; it is back in on its first good answer",
    },
    key! {
        key: "upstream.loopProbe",
        kind: "boolean",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.loop_probe,
        parse: parse_bool,
        show: show_bool,
        description: "send a forwarding-loop probe to each udp:// and tcp:// upstream at start, on a change and every 5 min; a looping upstream is taken out of rotation (docs/operations.md Forwarding loops)",
    },
    key! {
        key: "upstream.staleAnswerTimeout",
        kind: "duration",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.stale_answer_timeout,
        parse: parse_string,
        show: show_string,
        description: "with cache.serveStale, how long a miss that has an expired answer at hand waits for the upstreams before that answer is sent (RFC 8767)",
    },
    key! {
        key: "upstream.padding",
        kind: "boolean",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.padding,
        parse: parse_bool,
        show: show_bool,
        description: "pad queries to encrypted upstreams to a multiple of 128 octets (EDNS padding, RFC 8467)",
    },
    key! {
        key: "upstream.tls.caFile",
        kind: "path",
        scope: Cluster,
        host_only: true,
        restart_required: false,
        field: |c| c.upstream.tls.ca_file,
        parse: parse_string,
        show: show_string,
        description: "PEM certificates trusted for encrypted upstreams instead of the system roots; empty: the system roots",
    },
    key! {
        key: "upstream.tls.pins",
        kind: "list of NAME=sha256/BASE64",
        scope: Cluster,
        host_only: false,
        restart_required: false,
        field: |c| c.upstream.tls.pins,
        parse: parse_strings,
        show: show_list,
        description: "SPKI pins: an upstream whose TLS name is NAME must present a key whose SubjectPublicKeyInfo SHA-256 (base64) is one of its pins, on top of certificate verification (RFC 7858 section 4.2)",
    },
];

/// `upstream.tls.*` and `upstream.padding` as the data plane takes them: the CA file read
/// (its certificates are parsed when the transports build their TLS configurations; here it
/// must exist and hold at least one PEM certificate), the pins decoded.
pub(super) fn upstream_tls(section: &UpstreamSection) -> Result<UpstreamTls, ConfigError> {
    let ca_pem = if section.tls.ca_file.is_empty() {
        None
    } else {
        let path = &section.tls.ca_file;
        let pem = std::fs::read(path).map_err(|e| {
            ConfigError::value("upstream.tls.caFile", path, format!("cannot read it: {e}"))
        })?;
        if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
            return Err(ConfigError::value(
                "upstream.tls.caFile",
                path,
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            ));
        }
        Some(Arc::from(pem))
    };
    let mut pins = Vec::with_capacity(section.tls.pins.len());
    for text in &section.tls.pins {
        pins.push(parse_pin(text).map_err(|e| ConfigError::value("upstream.tls.pins", text, e))?);
    }
    Ok(UpstreamTls {
        ca_pem,
        pins,
        padding: section.padding,
    })
}

/// `NAME=sha256/BASE64` (standard base64 of a SHA-256 digest of the SubjectPublicKeyInfo, as
/// `openssl x509 -pubkey | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary |
/// base64` prints it).
fn parse_pin(text: &str) -> Result<(Arc<str>, [u8; 32]), String> {
    use base64::Engine;
    let (name, pin) = text.split_once('=').ok_or("expected NAME=sha256/BASE64")?;
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() {
        return Err("the name before = is empty".into());
    }
    let digest = pin
        .trim()
        .strip_prefix("sha256/")
        .ok_or("the pin must start with sha256/ (the only digest RFC 7858 pins use)")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(digest)
        .map_err(|e| format!("the pin is not base64: {e}"))?;
    let digest: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("a SHA-256 digest is 32 octets, this is {}", b.len()))?;
    Ok((Arc::from(name), digest))
}
