//! What to load: a target URL, `udp://HOST[:PORT]` or `tcp://HOST[:PORT]` (port 53 by
//! default). The encrypted schemes (`tls://`, `https://`, `h3://`, `quic://`) are recognised
//! and refused with a clear error until kudurru-bench speaks them.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;

/// The transport of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// DNS over UDP, one datagram per query.
    Udp,
    /// DNS over TCP (RFC 7766), pipelined on persistent connections.
    Tcp,
}

impl Protocol {
    /// The URL scheme.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

/// A parsed target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The transport.
    pub protocol: Protocol,
    /// Where to send.
    pub addr: SocketAddr,
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
    #[error("target `{0}` has no scheme (udp://HOST:PORT or tcp://HOST:PORT)")]
    NoScheme(String),
    /// A scheme kudurru-bench does not know.
    #[error("unknown scheme `{0}://` (udp:// or tcp://)")]
    UnknownScheme(String),
    /// An encrypted transport that is not implemented yet.
    #[error(
        "`{0}://` targets are not supported yet (the encrypted transports are not built); use udp:// or tcp://"
    )]
    NotYet(String),
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
            "tls" | "https" | "h3" | "quic" => return Err(TargetError::NotYet(scheme.to_owned())),
            _ => return Err(TargetError::UnknownScheme(scheme.to_owned())),
        };
        if let Some(at) = rest.find(['/', '?', '#']) {
            return Err(TargetError::Trailing(
                rest[at..].to_owned(),
                protocol.scheme(),
            ));
        }
        Ok(Self {
            protocol,
            addr: resolve(rest)?,
        })
    }
}

/// `HOST[:PORT]`, `[V6]:PORT` or a bare IPv6 address; port 53 when absent.
fn resolve(authority: &str) -> Result<SocketAddr, TargetError> {
    let error = |reason: String| TargetError::Address(authority.to_owned(), reason);
    if let Ok(addr) = authority.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = authority.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    if let Some(v6) = authority
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
    {
        let ip = v6.parse().map_err(|e| error(format!("{e}")))?;
        return Ok(SocketAddr::new(ip, 53));
    }
    let with_port = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:53")
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
    fn refusals_are_specific() {
        assert_eq!(
            "127.0.0.1:53".parse::<Target>(),
            Err(TargetError::NoScheme("127.0.0.1:53".into()))
        );
        assert_eq!(
            "dns://127.0.0.1".parse::<Target>(),
            Err(TargetError::UnknownScheme("dns".into()))
        );
        for scheme in ["tls", "https", "h3", "quic"] {
            assert_eq!(
                format!("{scheme}://127.0.0.1").parse::<Target>(),
                Err(TargetError::NotYet(scheme.into()))
            );
        }
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
