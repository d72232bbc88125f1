//! What to load: a target URL, `udp://HOST[:PORT]`, `tcp://HOST[:PORT]` (port 53 by default)
//! `tls://HOST[:PORT][#NAME]` (DNS over TLS, port 853), `https://HOST[:PORT][/PATH][#NAME]`
//! (DNS over HTTPS over HTTP/2, port 443, path `/dns-query`), `quic://HOST[:PORT][#NAME]`
//! (DNS over QUIC, UDP port 853) or `h3://HOST[:PORT][/PATH][#NAME]` (DNS over HTTPS over
//! HTTP/3, UDP port 443); a certificate is checked for NAME, else for HOST.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;

/// The transport of a target: the same six as an upstream URL's.
pub use kudurru_core::UpstreamProtocol as Protocol;

/// A parsed target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The transport.
    pub protocol: Protocol,
    /// Where to send.
    pub addr: SocketAddr,
    /// The name a TLS certificate must be valid for: `#NAME`, else the host as written.
    pub server_name: String,
    /// The DoH endpoint's path (`https://` and `h3://` only; `/dns-query` when the URL has none).
    pub path: String,
}

impl Target {
    /// The request URI of a DoH target (HTTP/2 or HTTP/3): `https://NAME:PORT/PATH`.
    pub fn uri(&self) -> String {
        let host = if self.server_name.contains(':') {
            format!("[{}]", self.server_name)
        } else {
            self.server_name.clone()
        };
        format!("https://{host}:{}{}", self.addr.port(), self.path)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.protocol.scheme(), self.addr)
    }
}

/// Why a target URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// No `scheme://`.
    #[error(
        "target `{0}` has no scheme (udp://, tcp://, tls://, https://, quic:// or h3://HOST:PORT)"
    )]
    NoScheme(String),
    /// A scheme kudurru-bench does not know.
    #[error("unknown scheme `{0}://` (udp://, tcp://, tls://, https://, quic:// or h3://)")]
    UnknownScheme(String),
    /// A path or query after the address.
    #[error("unexpected `{0}` after the address in a {1}:// target")]
    Trailing(String, &'static str),
    /// The host and port do not resolve to an address.
    #[error("cannot use `{0}` as HOST:PORT: {1}")]
    Address(String, String),
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| TargetError::NoScheme(url.to_owned()))?;
        let protocol = match scheme.to_ascii_lowercase().as_str() {
            "udp" => Protocol::Udp,
            "tcp" => Protocol::Tcp,
            "tls" => Protocol::Tls,
            "https" => Protocol::Https,
            "quic" => Protocol::Quic,
            "h3" => Protocol::H3,
            _ => return Err(TargetError::UnknownScheme(scheme.to_owned())),
        };
        let (rest, name) = match rest.split_once('#') {
            Some((rest, name)) if protocol.is_encrypted() && !name.is_empty() => (rest, Some(name)),
            _ => (rest, None),
        };
        let (rest, path) = match rest.find('/') {
            Some(at) if protocol.is_http() => (&rest[..at], &rest[at..]),
            _ => (rest, "/dns-query"),
        };
        if let Some(at) = rest.find(['/', '?', '#']) {
            return Err(TargetError::Trailing(
                rest[at..].to_owned(),
                protocol.scheme(),
            ));
        }
        let addr = resolve(rest, protocol.default_port())?;
        let server_name = name.map_or_else(|| host_of(rest), str::to_owned);
        Ok(Self {
            protocol,
            addr,
            server_name,
            path: path.to_owned(),
        })
    }
}

/// The host part of `HOST[:PORT]` (brackets of an IPv6 address removed).
fn host_of(authority: &str) -> String {
    if authority.parse::<std::net::IpAddr>().is_ok() {
        return authority.to_owned();
    }
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default().to_owned();
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
        .to_owned()
}

/// `HOST[:PORT]`, `[V6]:PORT` or a bare IPv6 address; `default_port` when absent.
fn resolve(authority: &str, default_port: u16) -> Result<SocketAddr, TargetError> {
    let error = |reason: String| TargetError::Address(authority.to_owned(), reason);
    if let Ok(addr) = authority.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = authority.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    if let Some(v6) = authority
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
    {
        let ip = v6.parse().map_err(|e| error(format!("{e}")))?;
        return Ok(SocketAddr::new(ip, default_port));
    }
    let with_port = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| error(e.to_string()))?
        .next()
        .ok_or_else(|| error("no address".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_default_port() {
        let t: Target = "udp://127.0.0.1:5353".parse().unwrap();
        assert_eq!(
            (t.protocol, t.addr),
            (Protocol::Udp, "127.0.0.1:5353".parse().unwrap())
        );
        let t: Target = "TCP://[::1]:53".parse().unwrap();
        assert_eq!(
            (t.protocol, t.addr.to_string()),
            (Protocol::Tcp, "[::1]:53".into())
        );
        assert_eq!("udp://127.0.0.2".parse::<Target>().unwrap().addr.port(), 53);
        assert_eq!("udp://[::1]".parse::<Target>().unwrap().addr.port(), 53);
        assert_eq!("tcp://::1".parse::<Target>().unwrap().addr.port(), 53);
        assert_eq!(
            "udp://localhost:5300"
                .parse::<Target>()
                .unwrap()
                .addr
                .port(),
            5300
        );
        assert_eq!(t.to_string(), "tcp://[::1]:53");
    }

    #[test]
    fn tls_targets_default_to_853_and_name_the_certificate() {
        let t: Target = "tls://127.0.0.1".parse().unwrap();
        assert_eq!(t.protocol, Protocol::Tls);
        assert_eq!(t.addr, "127.0.0.1:853".parse().unwrap());
        assert_eq!(t.server_name, "127.0.0.1");
        let t: Target = "tls://[::1]:8853#dns.example".parse().unwrap();
        assert_eq!(t.addr, "[::1]:8853".parse().unwrap());
        assert_eq!(t.server_name, "dns.example");
        let t: Target = "tls://localhost:8853".parse().unwrap();
        assert_eq!((t.addr.port(), t.server_name.as_str()), (8853, "localhost"));
        assert_eq!("tls://[::1]".parse::<Target>().unwrap().server_name, "::1");
        let t: Target = "https://127.0.0.1".parse().unwrap();
        assert_eq!((t.protocol, t.addr.port()), (Protocol::Https, 443));
        assert_eq!(t.uri(), "https://127.0.0.1:443/dns-query");
        let t: Target = "https://[::1]:8443/resolve#dns.example".parse().unwrap();
        assert_eq!(t.path, "/resolve");
        assert_eq!(t.uri(), "https://dns.example:8443/resolve");
        let t: Target = "https://[::1]:8443".parse().unwrap();
        assert_eq!(t.uri(), "https://[::1]:8443/dns-query");
        let t: Target = "quic://127.0.0.1".parse().unwrap();
        assert_eq!((t.protocol, t.addr.port()), (Protocol::Quic, 853));
        assert!(t.protocol.is_quic() && !t.protocol.is_http());
        let t: Target = "h3://[::1]:8443/q#dns.example".parse().unwrap();
        assert_eq!((t.protocol, t.addr.port()), (Protocol::H3, 8443));
        assert_eq!(t.uri(), "https://dns.example:8443/q");
        assert_eq!("h3://127.0.0.1".parse::<Target>().unwrap().addr.port(), 443);
        assert_eq!(
            "udp://127.0.0.1#x".parse::<Target>(),
            Err(TargetError::Trailing("#x".into(), "udp")),
            "only tls:// takes a name"
        );
    }

    #[test]
    fn refusals_are_specific() {
        assert_eq!(
            "127.0.0.1:53".parse::<Target>(),
            Err(TargetError::NoScheme("127.0.0.1:53".into()))
        );
        assert_eq!(
            "dns://127.0.0.1".parse::<Target>(),
            Err(TargetError::UnknownScheme("dns".into()))
        );
        assert_eq!(
            "quic://127.0.0.1/x".parse::<Target>(),
            Err(TargetError::Trailing("/x".into(), "quic")),
            "DoQ has no path"
        );
        assert_eq!(
            "udp://127.0.0.1/x".parse::<Target>(),
            Err(TargetError::Trailing("/x".into(), "udp"))
        );
        assert!(matches!(
            "udp://127.0.0.1:99999".parse::<Target>(),
            Err(TargetError::Address(..))
        ));
    }
}
