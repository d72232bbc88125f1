//! Listener URLs (`server.listen`): which transport, address and path each one names.

use std::net::SocketAddr;

use kudurru_core::upstream::parse_host_port;
use kudurru_transports::{ListenerSpec, Protocol};

/// Path of a DNS-over-HTTPS listener given without one (RFC 8484 §3 example).
pub const DEFAULT_DOH_PATH: &str = "/dns-query";

/// Parses a listener URL: `udp://H:P`, `tcp://H:P`, `H:P` (both; port 53 by default),
/// `tls://H:P` (853), `https://H:P/path` (443, `/dns-query`), `quic://H:P` (853, UDP) or
/// `h3://H:P/path` (443, UDP, `/dns-query`).
pub fn parse_listener(url: &str) -> Option<ListenerSpec> {
    let listener = |addr, protocol| Some(ListenerSpec { addr, protocol });
    if let Some(rest) = url.strip_prefix("tls://") {
        return listener(parse_host_port(rest, 853)?, Protocol::Tls);
    }
    if let Some(rest) = url.strip_prefix("quic://") {
        return listener(parse_host_port(rest, 853)?, Protocol::Quic);
    }
    if let Some(rest) = url.strip_prefix("https://") {
        let (addr, path) = parse_http_target(rest)?;
        return listener(addr, Protocol::Https { path });
    }
    if let Some(rest) = url.strip_prefix("h3://") {
        let (addr, path) = parse_http_target(rest)?;
        return listener(addr, Protocol::H3 { path });
    }
    let (udp, tcp, rest) = if let Some(rest) = url.strip_prefix("udp://") {
        (true, false, rest)
    } else if let Some(rest) = url.strip_prefix("tcp://") {
        (false, true, rest)
    } else if let Some(rest) = url.strip_prefix("dns://") {
        (true, true, rest)
    } else {
        (true, true, url)
    };
    listener(parse_host_port(rest, 53)?, Protocol::Dns { udp, tcp })
}

/// `H:P/path` of an HTTPS or HTTP/3 listener (port 443, path `/dns-query` by default): the path
/// starts at the first slash (IPv6 hosts are bracketed, no slash) and has no query or fragment.
fn parse_http_target(rest: &str) -> Option<(SocketAddr, String)> {
    let (host, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, DEFAULT_DOH_PATH),
    };
    if !path
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
    {
        return None;
    }
    Some((parse_host_port(host, 443)?, path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ServerSection};

    #[test]
    fn listener_urls_name_their_transports_ports_and_paths() {
        let l = |url: &str| parse_listener(url);
        let path = |p: &str| p.to_owned();
        let plain = l("127.0.0.1:53").unwrap();
        assert_eq!(
            plain.protocol,
            Protocol::Dns {
                udp: true,
                tcp: true
            }
        );
        assert!(!plain.needs_certificate());
        assert_eq!(
            l("udp://127.0.0.1").unwrap().protocol,
            Protocol::Dns {
                udp: true,
                tcp: false
            }
        );
        let dot = l("tls://[::1]").unwrap();
        assert_eq!(
            (dot.addr, dot.protocol),
            ("[::1]:853".parse().unwrap(), Protocol::Tls)
        );
        let doq = l("quic://127.0.0.1").unwrap();
        assert_eq!(
            (doq.addr, doq.protocol),
            ("127.0.0.1:853".parse().unwrap(), Protocol::Quic)
        );
        let doh = l("https://127.0.0.1").unwrap();
        assert_eq!(doh.addr, "127.0.0.1:443".parse().unwrap());
        assert_eq!(
            doh.protocol,
            Protocol::Https {
                path: path(DEFAULT_DOH_PATH)
            }
        );
        assert!(doh.needs_certificate());
        let doh = l("https://[::1]:8443/resolve").unwrap();
        assert_eq!(doh.addr, "[::1]:8443".parse().unwrap());
        assert_eq!(
            doh.protocol,
            Protocol::Https {
                path: path("/resolve")
            }
        );
        assert_eq!(
            l("https://127.0.0.1/").unwrap().protocol,
            Protocol::Https { path: path("/") }
        );
        let h3 = l("h3://127.0.0.1").unwrap();
        assert_eq!(h3.addr, "127.0.0.1:443".parse().unwrap());
        assert_eq!(
            h3.protocol,
            Protocol::H3 {
                path: path(DEFAULT_DOH_PATH)
            }
        );
        assert_eq!(
            l("h3://[::1]:8443/q").unwrap().protocol,
            Protocol::H3 { path: path("/q") }
        );
        for bad in [
            "https://127.0.0.1/a b",
            "https://127.0.0.1/q?x=1",
            "https://example.com/dns-query",
            "https://127.0.0.1:99999",
            "h3://127.0.0.1/q#x",
            "quic://127.0.0.1/path",
        ] {
            assert!(l(bad).is_none(), "{bad}");
        }
        let e = Config {
            server: ServerSection {
                listen: vec!["https://127.0.0.1:8443".into()],
                ..ServerSection::default()
            },
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("needs a certificate"), "{e}");
    }
}
