//! Upstream servers: how they are named, and which one to ask next.
//!
//! The selector orders the upstreams of one set by `upstream.strategy` (fastest, ordered, random,
//! parallel) among the healthy ones; an upstream that fails three times in a row is down, out of
//! the order until a success (a health probe) brings it back.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

/// The order in which to try the upstreams for one query: inline for up to eight upstreams, so
/// a cache miss allocates nothing for it.
pub type UpstreamOrder = SmallVec<[usize; 8]>;

/// The transport used to reach an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamProtocol {
    /// DNS over UDP, retried over TCP when truncated.
    Udp,
    /// DNS over TCP (RFC 7766).
    Tcp,
    /// DNS over TLS (RFC 7858), `tls://`.
    Tls,
    /// DNS over HTTPS on HTTP/2 (RFC 8484), `https://`.
    Https,
    /// DNS over QUIC (RFC 9250), `quic://`.
    Quic,
    /// DNS over HTTPS on HTTP/3 (RFC 8484, RFC 9114), `h3://`.
    H3,
}

impl UpstreamProtocol {
    /// The URL scheme, without `://`.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
            Self::Https => "https",
            Self::Quic => "quic",
            Self::H3 => "h3",
        }
    }

    /// The port a URL without one means: 53, 853 (DoT, DoQ) or 443 (DoH, DoH3).
    pub fn default_port(self) -> u16 {
        match self {
            Self::Udp | Self::Tcp => 53,
            Self::Tls | Self::Quic => 853,
            Self::Https | Self::H3 => 443,
        }
    }

    /// Whether queries travel encrypted (TLS or QUIC): these carry EDNS padding and are
    /// verified against `upstream.tls.*`.
    pub fn is_encrypted(self) -> bool {
        !matches!(self, Self::Udp | Self::Tcp)
    }

    /// Whether the URL carries an HTTP path (DoH, DoH3).
    pub fn is_http(self) -> bool {
        matches!(self, Self::Https | Self::H3)
    }

    /// Whether the transport runs over QUIC (DoQ, DoH3).
    pub fn is_quic(self) -> bool {
        matches!(self, Self::Quic | Self::H3)
    }

    /// Whether queries travel over a stream connection (everything but UDP).
    pub fn is_stream(self) -> bool {
        self != Self::Udp
    }
}

/// One upstream, as given by an URL in `upstreams` or a forward zone: `udp://H:P`, `tcp://H:P`,
/// `tls://H:P#name`, `https://H:P/path`, `quic://H:P#name` or `h3://H:P/path`.
///
/// `H` is an IP address or a host name. A name is resolved by the control thread through
/// `upstream.bootstrap` (never through kudurru itself) before the data plane uses the spec:
/// until then `addr` holds the unspecified address with the port, and `host` the name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamSpec {
    /// Transport.
    pub protocol: UpstreamProtocol,
    /// Address and port ([`UpstreamProtocol::default_port`] when the URL has none).
    pub addr: SocketAddr,
    /// The host name the URL names, when it names one instead of an address (lower case,
    /// no trailing dot).
    pub host: Option<Arc<str>>,
    /// The name the server's certificate must carry (encrypted transports): the URL's `#name`,
    /// else its host name; `None` verifies the certificate against the IP address.
    pub tls_name: Option<Arc<str>>,
    /// The DoH and DoH3 request path (`/dns-query` when the URL has none); `None` otherwise.
    pub path: Option<Arc<str>>,
}

impl UpstreamSpec {
    /// A plain-DNS upstream at `addr` (no name, no path).
    pub fn plain(protocol: UpstreamProtocol, addr: SocketAddr) -> Self {
        Self {
            protocol,
            addr,
            host: None,
            tls_name: None,
            path: None,
        }
    }

    /// Whether the data plane can use it: its address is known (the control thread resolved
    /// its host name, or it had none).
    pub fn is_resolved(&self) -> bool {
        !self.addr.ip().is_unspecified()
    }

    /// The same upstream at `ip` (its host name resolved), keeping the port, name and path.
    pub fn resolved_to(&self, ip: std::net::IpAddr) -> Self {
        Self {
            addr: SocketAddr::new(ip, self.addr.port()),
            ..self.clone()
        }
    }
}

/// Why an upstream URL was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamParseError {
    /// The scheme is not one kudurru forwards over.
    #[error(
        "unsupported upstream scheme in {0:?}: expected udp://, tcp://, tls://, https://, quic:// or h3://"
    )]
    Scheme(String),
    /// The address part is not an IP address or host name with an optional port.
    #[error("invalid upstream address in {0:?}: expected IP:PORT, [IPv6]:PORT or NAME:PORT")]
    Address(String),
    /// A `#name` or a path where the scheme takes none, or an invalid one.
    #[error("invalid upstream URL {0:?}: {1}")]
    Part(String, &'static str),
}

impl FromStr for UpstreamSpec {
    type Err = UpstreamParseError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| UpstreamParseError::Scheme(url.to_owned()))?;
        let protocol = match scheme.to_ascii_lowercase().as_str() {
            "udp" => UpstreamProtocol::Udp,
            "tcp" => UpstreamProtocol::Tcp,
            "tls" => UpstreamProtocol::Tls,
            "https" => UpstreamProtocol::Https,
            "quic" => UpstreamProtocol::Quic,
            "h3" => UpstreamProtocol::H3,
            _ => return Err(UpstreamParseError::Scheme(url.to_owned())),
        };
        let part = |reason| UpstreamParseError::Part(url.to_owned(), reason);
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, name)) => (rest, Some(name)),
            None => (rest, None),
        };
        let (authority, path) = if protocol.is_http() {
            match rest.find('/') {
                Some(i) => (&rest[..i], Some(&rest[i..])),
                None => (rest, None),
            }
        } else {
            // A trailing slash is tolerated on the others, as it always was.
            (rest.trim_end_matches('/'), None)
        };
        let tls_name = match fragment {
            Some(_) if !protocol.is_encrypted() => {
                return Err(part(
                    "a #name is only meaningful on tls://, https://, quic:// and h3://",
                ));
            }
            Some(name) => {
                Some(host_name(name).ok_or_else(|| part("the #name is not a valid host name"))?)
            }
            None => None,
        };
        let path = match path {
            Some(path) if path.len() > 1 => {
                if !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains('#') {
                    return Err(part("the path must be printable ASCII"));
                }
                Some(Arc::from(path))
            }
            _ if protocol.is_http() => Some(Arc::from(DEFAULT_DOH_PATH)),
            _ => None,
        };
        let address = || UpstreamParseError::Address(url.to_owned());
        let port = protocol.default_port();
        if let Some(addr) = parse_host_port(authority, port) {
            if addr.ip().is_unspecified() {
                return Err(address());
            }
            return Ok(Self {
                protocol,
                addr,
                host: None,
                tls_name,
                path,
            });
        }
        let (name, port) = match authority.rsplit_once(':') {
            Some((name, port)) => (name, port.parse::<u16>().map_err(|_| address())?),
            None => (authority, port),
        };
        let host = host_name(name).ok_or_else(address)?;
        let unspecified = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        Ok(Self {
            protocol,
            addr: SocketAddr::new(unspecified, port),
            tls_name: tls_name.or_else(|| protocol.is_encrypted().then(|| host.clone())),
            host: Some(host),
            path,
        })
    }
}

/// The path a DoH or DoH3 URL without one asks (RFC 8484's example, what every server serves).
pub const DEFAULT_DOH_PATH: &str = "/dns-query";

/// `text` as a host name (LDH labels of 1-63 octets, at most 253 octets, not all digits),
/// lower-cased and without a trailing dot.
fn host_name(text: &str) -> Option<Arc<str>> {
    let name = text.strip_suffix('.').unwrap_or(text);
    let labels_ok = name.split('.').all(|label| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    let numeric = name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    (!name.is_empty() && name.len() <= 253 && labels_ok && !numeric)
        .then(|| Arc::from(name.to_ascii_lowercase()))
}

impl fmt::Display for UpstreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.protocol.scheme())?;
        match &self.host {
            Some(host) => write!(f, "{host}:{}", self.addr.port())?,
            None => write!(f, "{}", self.addr)?,
        }
        if let Some(path) = &self.path {
            f.write_str(path)?;
        }
        if let Some(name) = &self.tls_name
            && self.host.as_ref() != Some(name)
        {
            write!(f, "#{name}")?;
        }
        Ok(())
    }
}

/// How the next upstream is chosen (`upstream.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UpstreamStrategy {
    /// The healthy upstream with the lowest smoothed RTT, a random other now and then.
    #[default]
    Fastest,
    /// In the configured order: the first healthy one, the next on failure.
    Ordered,
    /// A random healthy one.
    Random,
    /// The two best healthy upstreams at once; the first good reply is the answer (Blocky's
    /// `parallel_best`).
    Parallel,
}

impl UpstreamStrategy {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fastest => "fastest",
            Self::Ordered => "ordered",
            Self::Random => "random",
            Self::Parallel => "parallel",
        }
    }
}

impl FromStr for UpstreamStrategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Fastest, Self::Ordered, Self::Random, Self::Parallel]
            .into_iter()
            .find(|s| s.name() == text)
            .ok_or_else(|| "expected fastest, ordered, random or parallel".to_owned())
    }
}

/// How encrypted upstreams are verified (`upstream.tls.*`): data only; the transports build
/// their TLS client configurations from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpstreamTls {
    /// PEM certificates to trust instead of the system roots (`upstream.tls.caFile`, read by
    /// the control thread); `None`: the system's roots.
    pub ca_pem: Option<Arc<[u8]>>,
    /// SPKI pins (`upstream.tls.pins`): a server whose name has pins must present a
    /// certificate whose SubjectPublicKeyInfo's SHA-256 is one of them (RFC 7858 §4.2), on
    /// top of the usual verification.
    pub pins: Vec<(Arc<str>, [u8; 32])>,
    /// Whether encrypted queries carry EDNS padding (RFC 8467's block length 128;
    /// `upstream.padding`).
    pub padding: bool,
}

/// Parses `IP:PORT`, `[IPv6]:PORT`, or a bare IP with `default_port`.
pub fn parse_host_port(text: &str, default_port: u16) -> Option<SocketAddr> {
    let text = text.trim_end_matches('/');
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr);
    }
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, default_port))
}

/// After this many consecutive failures an upstream is down: out of the client order until a
/// health probe (or a last-resort query, when every upstream is down) succeeds.
pub const FAILURES_BEFORE_DOWN: u32 = 3;
/// One query in this many goes to a random other healthy upstream (`fastest`, `parallel`).
const PROBE_ONE_IN: u64 = 20;

#[derive(Debug, Clone, Copy, Default)]
struct Health {
    /// Smoothed RTT in microseconds; 0 until measured, so new upstreams are tried early.
    srtt_us: u32,
    consecutive_failures: u32,
    /// Taken out after [`FAILURES_BEFORE_DOWN`] consecutive failures; only a success brings
    /// it back (the health probes send one every `upstream.healthCheckInterval`).
    down: bool,
}

/// Per-core upstream choice state: RTT and health of each upstream of one set, and the order
/// each [`UpstreamStrategy`] asks them in.
///
/// ```text
/// on_success ─┐                 ┌─ fastest / parallel: healthy by smoothed RTT (1 in 20 swapped)
/// on_failure ─┴▶ Health[i] ─▶ order ─ ordered: healthy in configured order
///   (3 in a row: down)          └─ random: healthy shuffled
///                               down ones only when every upstream is down (last resort)
/// ```
#[derive(Debug, Clone)]
pub struct Selector {
    health: Vec<Health>,
    rng: u64,
}

impl Selector {
    /// A selector for `count` upstreams, seeded by the caller (sans-IO: no hidden randomness).
    pub fn new(count: usize, seed: u64) -> Self {
        Self {
            health: vec![Health::default(); count],
            rng: seed | 1,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: fast, and this choice needs no cryptographic strength.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The order in which to try the upstreams for one query under `strategy`: the healthy
    /// ones only, or every one (in the same strategy's order) when all are down, so a query
    /// still has a last resort. [`UpstreamStrategy::Parallel`] asks the first two at once.
    pub fn order(&mut self, strategy: UpstreamStrategy) -> UpstreamOrder {
        let n = self.health.len();
        let mut order: UpstreamOrder = (0..n).filter(|&i| !self.health[i].down).collect();
        if order.is_empty() {
            order.extend(0..n);
        }
        match strategy {
            UpstreamStrategy::Fastest | UpstreamStrategy::Parallel => {
                order.sort_by_key(|&i| self.health[i].srtt_us);
                let healthy = order.len();
                if healthy > 1 && self.next_random().is_multiple_of(PROBE_ONE_IN) {
                    let pick = 1 + (self.next_random() % (healthy as u64 - 1)) as usize;
                    order.swap(0, pick);
                }
            }
            UpstreamStrategy::Ordered => {}
            UpstreamStrategy::Random => {
                // Fisher-Yates.
                for i in (1..order.len()).rev() {
                    let j = (self.next_random() % (i as u64 + 1)) as usize;
                    order.swap(i, j);
                }
            }
        }
        order
    }

    /// Records an answer from upstream `index` after `rtt`; a down upstream is back.
    pub fn on_success(&mut self, index: usize, rtt: Duration) {
        let Some(h) = self.health.get_mut(index) else {
            return;
        };
        let sample = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX).max(1);
        h.srtt_us = if h.srtt_us == 0 || h.down {
            sample
        } else {
            ((u64::from(h.srtt_us) * 7 + u64::from(sample)) / 8) as u32
        };
        h.consecutive_failures = 0;
        h.down = false;
    }

    /// Records a timeout or failure of upstream `index` (an attempt that waited `timeout`);
    /// the [`FAILURES_BEFORE_DOWN`]th in a row takes it out.
    pub fn on_failure(&mut self, index: usize, timeout: Duration) {
        let Some(h) = self.health.get_mut(index) else {
            return;
        };
        h.consecutive_failures = h.consecutive_failures.saturating_add(1);
        // Count the failure as a slow answer, so a flapping server sinks in the order.
        let penalty = u32::try_from(timeout.as_micros()).unwrap_or(u32::MAX);
        h.srtt_us = h.srtt_us.max(penalty / 2).saturating_add(penalty / 8);
        if h.consecutive_failures >= FAILURES_BEFORE_DOWN {
            h.down = true;
        }
    }

    /// Takes upstream `index` out of rotation as if it had failed [`FAILURES_BEFORE_DOWN`]
    /// times in a row (a forwarding loop runs through it); a success brings it back.
    pub fn take_down(&mut self, index: usize) {
        if let Some(h) = self.health.get_mut(index) {
            h.consecutive_failures = h.consecutive_failures.max(FAILURES_BEFORE_DOWN);
            h.down = true;
        }
    }

    /// Whether upstream `index` is in rotation (not down).
    pub fn is_healthy(&self, index: usize) -> bool {
        self.health.get(index).is_some_and(|h| !h.down)
    }

    /// The upstreams that are down, for the health probes.
    pub fn down(&self) -> impl Iterator<Item = usize> + '_ {
        self.health
            .iter()
            .enumerate()
            .filter(|(_, h)| h.down)
            .map(|(i, _)| i)
    }

    /// The smoothed RTT of upstream `index`, if measured.
    pub fn srtt(&self, index: usize) -> Option<Duration> {
        self.health
            .get(index)
            .filter(|h| h.srtt_us > 0)
            .map(|h| Duration::from_micros(u64::from(h.srtt_us)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_urls() {
        let u: UpstreamSpec = "udp://127.0.0.1:5300".parse().unwrap();
        assert_eq!(u.protocol, UpstreamProtocol::Udp);
        assert_eq!(u.addr.port(), 5300);
        let u: UpstreamSpec = "tcp://[::1]".parse().unwrap();
        assert_eq!(u.addr, "[::1]:53".parse().unwrap());
        assert_eq!(u.to_string(), "tcp://[::1]:53");
        assert!(matches!(
            "dns://1.1.1.1".parse::<UpstreamSpec>(),
            Err(UpstreamParseError::Scheme(_))
        ));
        assert!(matches!(
            "udp://1.1.1.1:99999".parse::<UpstreamSpec>(),
            Err(UpstreamParseError::Address(_))
        ));
        assert!(matches!(
            "udp://0.0.0.0".parse::<UpstreamSpec>(),
            Err(UpstreamParseError::Address(_))
        ));
        assert!(matches!(
            "udp://127.0.0.1#name.example".parse::<UpstreamSpec>(),
            Err(UpstreamParseError::Part(..))
        ));
    }

    #[test]
    fn parses_encrypted_upstream_urls_with_names_and_paths() {
        let u: UpstreamSpec = "tls://127.0.0.1#dot.test.example".parse().unwrap();
        assert_eq!(u.protocol, UpstreamProtocol::Tls);
        assert_eq!(u.addr, "127.0.0.1:853".parse().unwrap());
        assert_eq!(u.tls_name.as_deref(), Some("dot.test.example"));
        assert!(u.host.is_none() && u.path.is_none() && u.is_resolved());
        assert_eq!(u.to_string(), "tls://127.0.0.1:853#dot.test.example");

        let u: UpstreamSpec = "https://DoH.Test.Example/q".parse().unwrap();
        assert_eq!(u.addr.port(), 443);
        assert!(!u.is_resolved());
        assert_eq!(u.host.as_deref(), Some("doh.test.example"));
        assert_eq!(u.tls_name.as_deref(), Some("doh.test.example"));
        assert_eq!(u.path.as_deref(), Some("/q"));
        assert_eq!(u.to_string(), "https://doh.test.example:443/q");
        let resolved = u.resolved_to("127.0.0.2".parse().unwrap());
        assert_eq!(resolved.addr, "127.0.0.2:443".parse().unwrap());
        assert_eq!(resolved.to_string(), u.to_string());

        let u: UpstreamSpec = "h3://[::1]:8443".parse().unwrap();
        assert_eq!(u.path.as_deref(), Some(DEFAULT_DOH_PATH));
        assert!(u.tls_name.is_none());
        let u: UpstreamSpec = "quic://127.0.0.1".parse().unwrap();
        assert_eq!(u.addr.port(), 853);
        let u: UpstreamSpec = "udp://resolver.test.example:5353".parse().unwrap();
        assert_eq!(u.host.as_deref(), Some("resolver.test.example"));
        assert!(u.tls_name.is_none());
        for bad in [
            "tls://127.0.0.1#bad name",
            "https://bad_host!:443/",
            "tls://-a.example",
        ] {
            assert!(bad.parse::<UpstreamSpec>().is_err(), "{bad}");
        }
        // Every accepted URL prints as one that parses back to the same upstream.
        for url in [
            "tls://127.0.0.1:853#a.example",
            "https://a.example:8443/dns",
            "quic://[::1]:853",
        ] {
            let u: UpstreamSpec = url.parse().unwrap();
            assert_eq!(u.to_string().parse::<UpstreamSpec>().unwrap(), u);
        }
    }

    #[test]
    fn prefers_fastest_and_still_probes_others() {
        let mut s = Selector::new(3, 42);
        s.on_success(0, Duration::from_millis(30));
        s.on_success(1, Duration::from_millis(2));
        s.on_success(2, Duration::from_millis(10));
        let mut first = [0usize; 3];
        for _ in 0..2000 {
            first[s.order(UpstreamStrategy::Fastest)[0]] += 1;
        }
        assert!(first[1] > 1800, "fastest chosen most: {first:?}");
        assert!(first[0] > 0 && first[2] > 0, "others probed: {first:?}");
    }

    #[test]
    fn the_order_holds_every_upstream_past_the_inline_capacity() {
        let mut s = Selector::new(11, 3);
        for i in 0..11 {
            s.on_success(i, Duration::from_millis(20 - i as u64));
        }
        for strategy in [
            UpstreamStrategy::Fastest,
            UpstreamStrategy::Ordered,
            UpstreamStrategy::Random,
            UpstreamStrategy::Parallel,
        ] {
            for _ in 0..100 {
                let mut order = s.order(strategy);
                assert_eq!(order.len(), 11);
                order.sort_unstable();
                assert_eq!(order.as_slice(), (0..11).collect::<Vec<_>>());
            }
        }
        // Without a probe the fastest (upstream 10) leads, the slowest (0) trails.
        let orders: Vec<_> = (0..100)
            .map(|_| s.order(UpstreamStrategy::Fastest))
            .collect();
        assert!(orders.iter().any(|o| o[0] == 10 && o[10] == 0));
    }

    #[test]
    fn ordered_keeps_the_configured_order_and_skips_down_upstreams() {
        let mut s = Selector::new(3, 9);
        s.on_success(2, Duration::from_millis(1));
        s.on_success(0, Duration::from_millis(50));
        for _ in 0..100 {
            assert_eq!(s.order(UpstreamStrategy::Ordered).as_slice(), [0, 1, 2]);
        }
        for _ in 0..FAILURES_BEFORE_DOWN {
            s.on_failure(0, Duration::from_millis(500));
        }
        assert_eq!(s.order(UpstreamStrategy::Ordered).as_slice(), [1, 2]);
        s.on_success(0, Duration::from_millis(5));
        assert_eq!(s.order(UpstreamStrategy::Ordered).as_slice(), [0, 1, 2]);
    }

    #[test]
    fn random_spreads_the_first_choice_over_every_healthy_upstream() {
        let mut s = Selector::new(4, 5);
        for _ in 0..FAILURES_BEFORE_DOWN {
            s.on_failure(3, Duration::from_millis(500));
        }
        let mut first = [0usize; 4];
        for _ in 0..3000 {
            let order = s.order(UpstreamStrategy::Random);
            assert_eq!(order.len(), 3);
            first[order[0]] += 1;
        }
        assert_eq!(first[3], 0, "a down upstream is not asked: {first:?}");
        assert!(first[..3].iter().all(|&n| n > 800), "{first:?}");
    }

    #[test]
    fn failing_upstream_is_down_until_a_success_and_a_last_resort_when_all_are() {
        let mut s = Selector::new(2, 7);
        s.on_success(0, Duration::from_millis(1));
        s.on_success(1, Duration::from_millis(5));
        for _ in 0..FAILURES_BEFORE_DOWN - 1 {
            s.on_failure(0, Duration::from_millis(500));
        }
        assert!(s.is_healthy(0), "two failures are not enough");
        s.on_failure(0, Duration::from_millis(500));
        assert!(!s.is_healthy(0));
        assert_eq!(s.down().collect::<Vec<_>>(), [0]);
        assert_eq!(s.order(UpstreamStrategy::Fastest).as_slice(), [1]);
        for _ in 0..FAILURES_BEFORE_DOWN {
            s.on_failure(1, Duration::from_millis(500));
        }
        assert_eq!(
            s.order(UpstreamStrategy::Ordered).as_slice(),
            [0, 1],
            "every upstream down: all of them, as a last resort"
        );
        s.on_success(0, Duration::from_millis(1));
        assert!(s.is_healthy(0));
        assert_eq!(
            s.srtt(0),
            Some(Duration::from_millis(1)),
            "fresh RTT after coming back"
        );
        assert_eq!(s.order(UpstreamStrategy::Ordered).as_slice(), [0]);
    }
}
