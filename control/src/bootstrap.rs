//! Bootstrap resolution of host names in upstream URLs (`https://doh.example/dns-query`,
//! `udp://resolver.example:53`): the control thread asks the `upstream.bootstrap` resolvers
//! over plain DNS (never kudurru itself) and publishes the upstreams with their addresses;
//! the data plane only ever sees resolved specs.
//!
//! ```text
//! upstreams with a host ─▶ Bootstrap::run ─ A, AAAA ──udp──▶ upstream.bootstrap resolvers
//!                               │ (first A address, else first AAAA; TTL, at least MIN_TTL)
//!                               ▼
//!            the publisher ─▶ Settings.upstreams: named ones resolved_to(addr),
//!                                            names without an address yet left out
//! ```
//!
//! A name is resolved at start, again when its TTL runs out (at least [`MIN_TTL`], at most
//! [`MAX_TTL`]), and at once when `upstreams` or `upstream.bootstrap` change. A failure keeps
//! the last good address (logged, shown by doctor) and is retried after [`RETRY`]. Startup
//! does not wait: until its first answer a named upstream is left out of the published set
//! (with a warning), and the others serve; with no other upstream, queries get SERVFAIL for
//! those first milliseconds.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kudurru_core::bootstrap::{self, BootstrapError};
use kudurru_core::wire::rtype;
use kudurru_core::{Settings, UpstreamSpec};
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use crate::reload::Reloadable;

/// The shortest time an address is used before it is asked again, whatever its TTL.
pub const MIN_TTL: Duration = Duration::from_secs(60);
/// The longest.
pub const MAX_TTL: Duration = Duration::from_secs(86_400);
/// The wait before a failed resolution is tried again.
pub const RETRY: Duration = Duration::from_secs(10);
/// The wait for one bootstrap resolver's reply to one query.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The addresses of the host names in upstream URLs, as published.
pub type Resolved = HashMap<Arc<str>, IpAddr>;

/// What is known of one host name.
#[derive(Debug, Clone, Default)]
pub struct HostStatus {
    /// The address in use, if it was ever resolved.
    pub addr: Option<IpAddr>,
    /// The bootstrap resolver that gave it.
    pub from: Option<SocketAddr>,
    /// Why the last attempt failed, when it did.
    pub error: Option<String>,
    /// When it is asked again.
    next: Option<Instant>,
}

/// The bootstrap resolver's shared state: each host name's status (for doctor) and a wake-up
/// for configuration changes.
#[derive(Debug, Default)]
pub struct Bootstrap {
    hosts: Mutex<HashMap<Arc<str>, HostStatus>>,
    changed: Notify,
}

/// `settings.upstreams` with every named upstream resolved through `resolved`, and those whose
/// name has no address yet left out.
pub fn apply(settings: &mut Settings, resolved: &Resolved) {
    if settings.upstreams.iter().all(UpstreamSpec::is_resolved) {
        return;
    }
    let upstreams: Vec<UpstreamSpec> = settings
        .upstreams
        .iter()
        .filter_map(|spec| match &spec.host {
            _ if spec.is_resolved() => Some(spec.clone()),
            Some(host) => resolved.get(host).map(|&ip| spec.resolved_to(ip)),
            None => None,
        })
        .collect();
    settings.upstreams = upstreams.into();
}

impl Bootstrap {
    /// Each named upstream's host and what is known of it, in name order.
    pub fn statuses(&self) -> Vec<(Arc<str>, HostStatus)> {
        let hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = hosts.iter().map(|(h, s)| (h.clone(), s.clone())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Re-resolves every name now (the upstreams or the bootstrap resolvers changed).
    pub fn config_changed(&self) {
        self.changed.notify_one();
    }

    /// Resolves the host names of the current configuration's upstreams through its bootstrap
    /// resolvers and hands their addresses to `publish` (the settings publisher) when they
    /// change, for as long as the runtime runs.
    pub async fn run(self: Arc<Self>, reloadable: Arc<Reloadable>, publish: impl Fn(Resolved)) {
        loop {
            let running = reloadable.current();
            let servers = running.validated.bootstrap.clone();
            let names: Vec<Arc<str>> = {
                let mut names: Vec<Arc<str>> = running
                    .validated
                    .settings
                    .upstreams
                    .iter()
                    .filter_map(|spec| spec.host.clone())
                    .collect();
                names.sort();
                names.dedup();
                names
            };
            // Forget names no longer configured.
            self.hosts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|host, _| names.contains(host));
            let now = Instant::now();
            let due: Vec<Arc<str>> = {
                let hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
                names
                    .iter()
                    .filter(|name| {
                        hosts
                            .get(*name)
                            .and_then(|s| s.next)
                            .is_none_or(|t| t <= now)
                    })
                    .cloned()
                    .collect()
            };
            let mut changed = false;
            for name in &due {
                let result = resolve(name, &servers).await.and_then(|found| {
                    let loops = running.validated.settings.upstreams.iter().any(|spec| {
                        spec.host.as_ref() == Some(name)
                            && running.validated.listeners.iter().any(|listener| {
                                crate::config::is_own_listener(listener, &spec.resolved_to(found.0))
                            })
                    });
                    if loops {
                        return Err(format!(
                            "resolves to {}, kudurru's own listener: every query would loop",
                            found.0
                        ));
                    }
                    Ok(found)
                });
                let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
                let status = hosts.entry(name.clone()).or_default();
                match result {
                    Ok((addr, ttl, from)) => {
                        if status.addr != Some(addr) {
                            tracing::info!(host = %name, %addr, bootstrap = %from, ttl_s = ttl.as_secs(), "upstream host name resolved");
                            changed = true;
                        }
                        status.addr = Some(addr);
                        status.from = Some(from);
                        status.error = None;
                        status.next = Some(Instant::now() + ttl.clamp(MIN_TTL, MAX_TTL));
                    }
                    Err(error) => {
                        match status.addr {
                            Some(addr) => {
                                tracing::warn!(host = %name, %addr, %error, "upstream host name not re-resolved; keeping its last address");
                            }
                            None => {
                                tracing::warn!(host = %name, %error, "upstream host name not resolved; the upstream is left out until it is");
                            }
                        }
                        status.error = Some(error);
                        status.next = Some(Instant::now() + RETRY);
                    }
                }
            }
            if changed {
                publish(self.resolved());
            }
            let next = {
                let hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
                hosts.values().filter_map(|s| s.next).min()
            };
            let sleep = next.map_or(MAX_TTL, |t| t.saturating_duration_since(Instant::now()));
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.changed.notified() => {
                    // A configuration change: every name is asked again.
                    for status in self.hosts.lock().unwrap_or_else(PoisonError::into_inner).values_mut() {
                        status.next = None;
                    }
                }
            }
        }
    }

    /// The addresses known now.
    pub fn resolved(&self) -> Resolved {
        self.hosts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(|(host, status)| status.addr.map(|addr| (host.clone(), addr)))
            .collect()
    }
}

/// `host`'s address through the first of `servers` that answers: its first A address, else
/// its first AAAA address, with the TTL of that answer.
async fn resolve(
    host: &str,
    servers: &[SocketAddr],
) -> Result<(IpAddr, Duration, SocketAddr), String> {
    if servers.is_empty() {
        return Err("no upstream.bootstrap resolver is configured".into());
    }
    let mut errors = Vec::new();
    for &server in servers {
        for qtype in [rtype::A, rtype::AAAA] {
            match ask(host, qtype, server).await {
                Ok(answer) => {
                    if let Some(&addr) = answer.addrs.first() {
                        let ttl = Duration::from_secs(u64::from(answer.ttl));
                        return Ok((addr, ttl, server));
                    }
                }
                Err(e) => {
                    errors.push(format!("{server}: {e}"));
                    break;
                }
            }
        }
    }
    if errors.is_empty() {
        return Err("no A or AAAA records".into());
    }
    Err(errors.join("; "))
}

/// Why one bootstrap query failed.
#[derive(Debug, thiserror::Error)]
enum AskError {
    #[error("{0}")]
    Reply(#[from] BootstrapError),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("no reply in {}s", QUERY_TIMEOUT.as_secs())]
    Timeout,
}

/// One query of `qtype` for `host` to `server` over UDP: a connected socket on a random port,
/// a random ID; replies to anything else are ignored until the timeout.
async fn ask(host: &str, qtype: u16, server: SocketAddr) -> Result<bootstrap::Addresses, AskError> {
    let id: u16 = rand::random();
    let query = bootstrap::query(host, qtype, id)?;
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(&query).await?;
    let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
    let mut buffer = vec![0u8; 4096];
    loop {
        let received = tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await;
        let n = match received {
            Err(_) => return Err(AskError::Timeout),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(n)) => n,
        };
        let Some(reply) = buffer.get(..n) else {
            continue;
        };
        match bootstrap::parse_reply(reply, host, qtype, id) {
            Err(BootstrapError::Foreign) => continue,
            other => return Ok(other?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn named_upstreams_are_published_resolved_or_left_out() {
        let config = Config {
            upstreams: vec![
                "udp://127.0.0.1:5400".into(),
                "udp://upstream.test.example:5401".into(),
                "tls://other.test.example".into(),
            ],
            ..Config::default()
        };
        let mut settings = config.validate().unwrap().settings;
        let mut resolved = Resolved::new();
        resolved.insert(
            Arc::from("upstream.test.example"),
            "127.0.0.2".parse().unwrap(),
        );
        apply(&mut settings, &resolved);
        let published: Vec<String> = settings
            .upstreams
            .iter()
            .map(|s| format!("{} {}", s, s.addr))
            .collect();
        assert_eq!(
            published,
            [
                "udp://127.0.0.1:5400 127.0.0.1:5400",
                "udp://upstream.test.example:5401 127.0.0.2:5401",
            ]
        );
        assert!(settings.upstreams.iter().all(UpstreamSpec::is_resolved));
    }
}
