//! Parse, don't validate: [`Config::check`] checks every value of the raw document and builds
//! the typed [`Validated`] values the data plane runs on, or lists every key at fault;
//! [`Config::validate`] reports the first. The checks run in a fixed order, so a document with
//! several faults always reports the same first one.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kudurru_core::upstream::parse_host_port;
use kudurru_core::{
    LocalNames, ServerIdentity, StalePolicy, TtlPolicy, UpstreamSpec, UpstreamStrategy,
};
use kudurru_transports::{ListenerSpec, Settings};

use super::log::check_log_filter;
use super::{Config, ConfigError, parse_listener};

/// The problems found so far; each check adds its own and the rest still run.
#[derive(Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    /// The value, or `None` with its error kept.
    fn take<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|e| self.0.push(e)).ok()
    }

    fn push(&mut self, key: &'static str, value: impl ToString, reason: impl ToString) {
        self.0.push(ConfigError::value(key, value, reason));
    }
}

/// A positive duration, or an error naming `key`.
fn duration(key: &'static str, text: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(text).map_err(|e| ConfigError::value(key, text, e))?;
    if d.is_zero() {
        return Err(ConfigError::value(key, text, "must be more than zero"));
    }
    Ok(d)
}

impl Config {
    /// Checks every value and builds what the data plane runs on; the error is the first
    /// problem [`Config::check`] finds.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        self.check().map_err(|problems| {
            problems
                .into_iter()
                .next()
                .expect("check fails only with a problem recorded")
        })
    }

    /// Checks every value, each key on its own and the keys that must agree with each other,
    /// and reports every problem at once (`kudurru config check`), in a fixed order.
    pub fn check(&self) -> Result<Validated, Vec<ConfigError>> {
        let mut problems = Problems::default();
        let listeners: Vec<ListenerSpec> = self
            .server
            .listen
            .iter()
            .filter_map(|url| {
                problems.take(parse_listener(url).ok_or_else(|| {
                    ConfigError::value(
                        "server.listen",
                        url,
                        "expected udp://H:P, tcp://H:P, tls://H:P, https://H:P/path, quic://H:P, h3://H:P/path or H:P with an IP address",
                    )
                }))
            })
            .collect();
        if self.server.listen.is_empty() {
            problems.push("server.listen", "", "at least one listener is needed");
        }
        let upstreams: Vec<UpstreamSpec> = self
            .upstreams
            .iter()
            .filter_map(|url| {
                problems.take(
                    url.parse::<UpstreamSpec>()
                        .map_err(|e| ConfigError::value("upstreams", url, e)),
                )
            })
            .collect();
        if self.upstreams.is_empty() {
            problems.push("upstreams", "", "at least one upstream is needed");
        }
        for upstream in &upstreams {
            if let Some(listener) = listeners.iter().find(|l| is_own_listener(l, upstream)) {
                problems.push(
                    "upstreams",
                    upstream,
                    format!(
                        "is kudurru's own listener {} (server.listen): every query would loop until it times out",
                        listener.addr
                    ),
                );
            }
        }
        let available = kudurru_transports::sys::available_cpus();
        let cpus = if !self.server.cpus.is_empty() {
            if let Some(bad) = self.server.cpus.iter().find(|c| !available.contains(c)) {
                problems.push(
                    "server.cpus",
                    bad,
                    format!("not among the CPUs this process may use: {available:?}"),
                );
            }
            self.server.cpus.clone()
        } else if self.server.cores == 0 {
            available.clone()
        } else if self.server.cores > available.len() {
            problems.push(
                "server.cores",
                self.server.cores,
                format!(
                    "only {} CPUs are available to this process",
                    available.len()
                ),
            );
            available.clone()
        } else {
            available[..self.server.cores].to_vec()
        };
        let upstream_strategy = problems
            .take(
                self.upstream
                    .strategy
                    .parse::<UpstreamStrategy>()
                    .map_err(|e| {
                        ConfigError::value("upstream.strategy", &self.upstream.strategy, e)
                    }),
            )
            .unwrap_or_default();
        let bootstrap: Vec<SocketAddr> = self
            .upstream
            .bootstrap
            .iter()
            .filter_map(|text| {
                problems.take(parse_host_port(text, 53).ok_or_else(|| {
                    ConfigError::value(
                        "upstream.bootstrap",
                        text,
                        "expected IP or IP:PORT (a bootstrap resolver cannot itself be a name)",
                    )
                }))
            })
            .collect();
        if bootstrap.is_empty()
            && let Some(named) = upstreams.iter().find(|u| u.host.is_some())
        {
            problems.push(
                "upstream.bootstrap",
                "",
                format!(
                    "{named} names a host, and no bootstrap resolver is configured to resolve it"
                ),
            );
        }
        let upstream_idle_timeout = problems
            .take(duration(
                "upstream.idleTimeout",
                &self.upstream.idle_timeout,
            ))
            .unwrap_or_default();
        let upstream_health_interval = problems
            .take(duration(
                "upstream.healthCheckInterval",
                &self.upstream.health_check_interval,
            ))
            .unwrap_or_default();
        let stale = StalePolicy {
            enabled: self.cache.serve_stale,
            max_age: problems
                .take(duration("cache.staleMaxAge", &self.cache.stale_max_age))
                .unwrap_or_default(),
            answer_timeout: problems
                .take(duration(
                    "upstream.staleAnswerTimeout",
                    &self.upstream.stale_answer_timeout,
                ))
                .unwrap_or_default(),
        };
        let upstream_tls = problems
            .take(
                super::upstream::upstream_tls(&self.upstream).and_then(|tls| {
                    kudurru_transports::upstream_tls::check(&tls)
                        .map(|()| tls)
                        .map_err(|e| {
                            ConfigError::value("upstream.tls.caFile", &self.upstream.tls.ca_file, e)
                        })
                }),
            )
            .unwrap_or_default();
        let upstream_timeout = problems.take(duration("upstream.timeout", &self.upstream.timeout));
        let resolve_timeout = problems.take(duration(
            "upstream.resolveTimeout",
            &self.upstream.resolve_timeout,
        ));
        if let (Some(attempt), Some(resolve)) = (upstream_timeout, resolve_timeout)
            && attempt > resolve
        {
            problems.push(
                "upstream.timeout",
                &self.upstream.timeout,
                format!(
                    "longer than upstream.resolveTimeout ({}): no attempt could run its course",
                    self.upstream.resolve_timeout
                ),
            );
        }
        let tcp_idle_timeout = problems.take(duration("tcp.idleTimeout", &self.tcp.idle_timeout));
        let tls_handshake_timeout = problems.take(duration(
            "tls.handshakeTimeout",
            &self.tls.handshake_timeout,
        ));
        if listeners.iter().any(ListenerSpec::needs_certificate) {
            for (key, path) in [
                ("tls.certFile", &self.tls.cert_file),
                ("tls.keyFile", &self.tls.key_file),
            ] {
                if path.is_empty() {
                    problems.push(
                        key,
                        "",
                        "a tls://, https://, quic:// or h3:// listener needs a certificate: set tls.certFile and tls.keyFile (kudurru cert generate writes a self-signed pair)",
                    );
                }
            }
        }
        let shutdown_grace = problems.take(duration(
            "server.shutdownGrace",
            &self.server.shutdown_grace,
        ));
        let drain_delay = problems.take(
            humantime::parse_duration(&self.shutdown.drain_delay).map_err(|e| {
                ConfigError::value("shutdown.drainDelay", &self.shutdown.drain_delay, e)
            }),
        );
        let ratelimit = problems.take(self.ratelimit.validate());
        let blocking = problems.take(self.blocking.validate());
        let zones = problems.take(self.zones.validate());
        let acl = problems.take(self.server.access_list());
        let token_max_lifetime = problems.take(duration(
            "auth.tokens.maxLifetime",
            &self.auth.tokens.max_lifetime,
        ));
        let audit_retention = problems.take(duration("audit.retention", &self.audit.retention));
        let session_ttl = problems.take(duration("api.sessionTTL", &self.api.session_ttl));
        let api_address = if self.api.address.is_empty() {
            Some(None)
        } else {
            problems.take(
                parse_host_port(&self.api.address, 8080)
                    .map(Some)
                    .ok_or_else(|| {
                        ConfigError::value(
                            "api.address",
                            &self.api.address,
                            "expected IP:PORT or empty",
                        )
                    }),
            )
        };
        let api_tls = match (self.api.tls_cert.as_str(), self.api.tls_key.as_str()) {
            ("", "") => None,
            ("", _) => {
                problems.push(
                    "api.tlsCert",
                    "",
                    "api.tlsKey is set: set api.tlsCert too, or neither",
                );
                None
            }
            (_, "") => {
                problems.push(
                    "api.tlsKey",
                    "",
                    "api.tlsCert is set: set api.tlsKey too, or neither",
                );
                None
            }
            (cert, key) => Some((PathBuf::from(cert), PathBuf::from(key))),
        };
        let c = &self.cache;
        if c.max_entries == 0 {
            problems.push("cache.maxEntries", 0, "must be at least 1");
        }
        if c.min_ttl > c.max_ttl {
            problems.push(
                "cache.minTTL",
                c.min_ttl,
                format!("larger than cache.maxTTL ({})", c.max_ttl),
            );
        }
        if !(1..=300).contains(&c.servfail_ttl) {
            problems.push(
                "cache.servfailTTL",
                c.servfail_ttl,
                "RFC 9520 asks for 1 to 300 seconds",
            );
        }
        if !(512..=4096).contains(&self.edns.udp_payload) {
            problems.push(
                "edns.udpPayload",
                self.edns.udp_payload,
                "must be 512 to 4096",
            );
        }
        for (key, value) in [
            (
                "tcp.maxConnectionsPerCore",
                self.tcp.max_connections_per_core,
            ),
            ("tcp.maxPipelined", self.tcp.max_pipelined),
            (
                "tcp.maxConnectionsPerClient",
                self.tcp.max_connections_per_client,
            ),
            (
                "quic.maxConnectionsPerClient",
                self.quic.max_connections_per_client,
            ),
        ] {
            if value == 0 {
                problems.push(key, value, "must be at least 1");
            }
        }
        let ops_address =
            problems.take(parse_host_port(&self.ops.address, 8081).ok_or_else(|| {
                ConfigError::value("ops.address", &self.ops.address, "expected IP:PORT")
            }));
        if !matches!(self.log.format.as_str(), "text" | "json") {
            problems.push("log.format", &self.log.format, "expected text or json");
        }
        match check_log_filter(&self.log.level) {
            Err(reason) => problems.push("log.level", &self.log.level, reason),
            Ok(()) => {
                if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
                    problems.push("log.level", &self.log.level, e);
                }
            }
        }
        let (data_dir, data_dir_note) = super::storage::resolve_data_dir(&self.storage.data_dir);
        let identity = if self.server.identity.is_empty() {
            hostname()
        } else {
            self.server.identity.clone()
        };
        let querylog = problems.take(self.querylog.validate(&data_dir, &identity));
        let cluster = problems.take(self.cluster.validate(
            api_address.flatten().map(|addr| (addr, api_tls.is_some())),
            &hostname(),
        ));
        let (
            Some(upstream_timeout),
            Some(resolve_timeout),
            Some(tcp_idle_timeout),
            Some(tls_handshake_timeout),
            Some(shutdown_grace),
            Some(drain_delay),
            Some(ratelimit),
            Some(blocking),
            Some(zones),
            Some(acl),
            Some(token_max_lifetime),
            Some(audit_retention),
            Some(api_address),
            Some(ops_address),
            Some(querylog),
            Some(cluster),
        ) = (
            upstream_timeout,
            resolve_timeout,
            tcp_idle_timeout,
            tls_handshake_timeout,
            shutdown_grace,
            drain_delay,
            ratelimit,
            blocking,
            zones,
            acl,
            token_max_lifetime,
            audit_retention,
            api_address,
            ops_address,
            querylog,
            cluster,
        )
        else {
            return Err(problems.0);
        };
        if !problems.0.is_empty() {
            return Err(problems.0);
        }
        let Some(session_ttl) = session_ttl else {
            return Err(problems.0);
        };
        let settings = Settings {
            upstreams: upstreams.into(),
            upstream_strategy,
            upstream_tls: upstream_tls.into(),
            upstream_idle_timeout,
            upstream_health_interval,
            stale,
            prefetch: self.cache.prefetch,
            ttl: TtlPolicy {
                min_ttl: c.min_ttl,
                max_ttl: c.max_ttl,
                negative_max_ttl: c.negative_max_ttl,
                servfail_ttl: c.servfail_ttl,
            },
            cache_max_entries: c.max_entries,
            local: LocalNames::new(ServerIdentity {
                identity,
                version: self.server.version.clone(),
            }),
            edns_payload: self.edns.udp_payload,
            upstream_timeout,
            resolve_timeout,
            tcp_idle_timeout,
            tcp_max_connections: self.tcp.max_connections_per_core,
            tcp_max_connections_per_client: self.tcp.max_connections_per_client,
            quic_max_connections_per_client: self.quic.max_connections_per_client,
            tcp_max_pipelined: self.tcp.max_pipelined,
            tls_handshake_timeout,
            shutdown_grace,
            acl: acl.into(),
            ratelimit,
            ratelimit_table_size: self.ratelimit.table_size,
            policy: Default::default(),
            zones: std::sync::Arc::new(kudurru_core::zone::Zones::builtin()),
        };
        Ok(Validated {
            settings,
            listeners,
            cpus,
            ops_address,
            drain_delay,
            api_address,
            api_tls,
            data_dir,
            data_dir_note,
            token_max_lifetime,
            audit_retention,
            session_ttl,
            blocking,
            zones,
            bootstrap,
            querylog,
            cluster,
        })
    }
}

/// A configuration that passed validation.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The data plane's settings snapshot.
    pub settings: Settings,
    /// Client listeners.
    pub listeners: Vec<ListenerSpec>,
    /// CPUs to pin executors to.
    pub cpus: Vec<usize>,
    /// Ops listener address.
    pub ops_address: SocketAddr,
    /// Lameduck time on SIGTERM (`shutdown.drainDelay`).
    pub drain_delay: Duration,
    /// HTTP API listener (`api.address`); `None` = no API.
    pub api_address: Option<SocketAddr>,
    /// HTTPS on the API: certificate and key files (`api.tlsCert`, `api.tlsKey`).
    pub api_tls: Option<(PathBuf, PathBuf)>,
    /// `storage.dataDir`, or the user's state directory when the default cannot be written.
    pub data_dir: PathBuf,
    /// Why `data_dir` is not the configured directory, for the log.
    pub data_dir_note: Option<String>,
    /// `auth.tokens.maxLifetime`.
    pub token_max_lifetime: Duration,
    /// `audit.retention`.
    pub audit_retention: Duration,
    /// `api.sessionTTL`.
    pub session_ttl: Duration,
    /// `blocking.*`.
    pub blocking: super::BlockingSettings,
    /// `zones.*`.
    pub zones: super::ZonesSettings,
    /// `upstream.bootstrap`: the resolvers of host names in upstream URLs.
    pub bootstrap: Vec<SocketAddr>,
    /// `querylog.*`.
    pub querylog: super::QueryLogSettings,
    /// `cluster.*`.
    pub cluster: super::ClusterSettings,
}

/// Whether `upstream` reaches one of kudurru's own listeners: the same port on the listener's
/// address, or on any loopback address when the listener is a wildcard (0.0.0.0, ::). A loop
/// through another resolver is not visible here, nor one through a host name before the
/// bootstrap resolver gave its address (it checks that address then).
pub(crate) fn is_own_listener(listener: &ListenerSpec, upstream: &UpstreamSpec) -> bool {
    let (l, u) = (listener.addr, upstream.addr);
    if l.port() != u.port() || !upstream.is_resolved() {
        return false;
    }
    let speaks = match (&listener.protocol, upstream.protocol) {
        (kudurru_transports::Protocol::Dns { udp, .. }, kudurru_core::UpstreamProtocol::Udp) => {
            *udp
        }
        (kudurru_transports::Protocol::Dns { tcp, .. }, kudurru_core::UpstreamProtocol::Tcp) => {
            *tcp
        }
        _ => false,
    };
    let same_ip = l.ip() == u.ip() || (l.ip().is_unspecified() && u.ip().is_loopback());
    speaks && same_ip
}

/// The host's name, the `server.identity` answer when none is set.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "kudurru".into())
}

#[cfg(test)]
mod tests {
    use kudurru_transports::Protocol;

    use super::*;

    #[test]
    fn defaults_validate() {
        let v = Config::default().validate().expect("defaults are valid");
        assert_eq!(v.listeners.len(), 2);
        assert!(v.listeners.iter().all(|l| l.protocol
            == Protocol::Dns {
                udp: true,
                tcp: true
            }
            && l.addr.port() == 5300));
        assert_eq!(v.settings.upstreams.len(), 2);
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = Config::default();
        c.cache.min_ttl = 10;
        c.cache.max_ttl = 5;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("cache.minTTL")
        );
        let c = Config {
            upstreams: vec!["dns://1.1.1.1".into()],
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("upstreams"));
        let mut c = Config::default();
        c.upstream.timeout = "10s".into();
        c.upstream.resolve_timeout = "1s".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("upstream.timeout") && e.contains("upstream.resolveTimeout (1s)"),
            "{e}"
        );
        let mut c = Config::default();
        c.upstream.timeout = "soon".into();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("upstream.timeout")
        );
    }

    #[test]
    fn an_upstream_that_is_one_of_the_listeners_is_a_forwarding_loop() {
        let looped = |listen: &str, upstream: &str| {
            let c = Config {
                upstreams: vec![upstream.into()],
                server: super::super::ServerSection {
                    listen: vec![listen.into()],
                    ..Default::default()
                },
                ..Config::default()
            };
            c.validate()
                .err()
                .is_some_and(|e| e.to_string().contains("own listener"))
        };
        assert!(looped("127.0.0.1:5300", "udp://127.0.0.1:5300"));
        assert!(looped("0.0.0.0:53", "udp://127.0.0.1:53"));
        assert!(looped("tcp://[::1]:53", "tcp://[::1]:53"));
        assert!(
            !looped("tcp://127.0.0.1:53", "udp://127.0.0.1:53"),
            "TCP only listener"
        );
        assert!(!looped("127.0.0.1:5300", "udp://127.0.0.1:53"));
        assert!(!looped("127.0.0.1:53", "udp://127.0.0.2:53"));
        // A host name is checked once the bootstrap resolver gives its address, not as the
        // unspecified address it holds until then (which matched every wildcard listener).
        assert!(!looped("0.0.0.0:53", "udp://resolver.test.example:53"));
    }

    #[test]
    fn check_reports_every_problem_in_order() {
        let mut c = Config {
            upstreams: vec!["ftp://x".into()],
            ..Config::default()
        };
        c.upstream.timeout = "soon".into();
        c.cache.min_ttl = 100_000;
        c.cache.max_ttl = 60;
        c.edns.udp_payload = 100;
        c.log.format = "xml".into();
        let keys: Vec<String> = c
            .check()
            .unwrap_err()
            .iter()
            .map(|e| match e {
                ConfigError::Value { key, .. } => (*key).to_owned(),
                other => other.to_string(),
            })
            .collect();
        assert_eq!(
            keys,
            [
                "upstreams",
                "upstream.timeout",
                "cache.minTTL",
                "edns.udpPayload",
                "log.format"
            ]
        );
        assert!(c.validate().unwrap_err().to_string().contains("upstreams"));
    }
}
