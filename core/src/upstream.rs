//! Upstream servers: how they are named, and which one to ask next.
//!
//! The selector prefers the healthy upstream with the lowest smoothed round-trip time, asks a
//! random other one now and then so that a recovered or faster server is noticed, and backs off
//! from a server after consecutive failures (it stays a last resort, never removed).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

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
}

/// One upstream, as given by `--upstream udp://H:P` or `tcp://H:P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpstreamSpec {
    /// Transport.
    pub protocol: UpstreamProtocol,
    /// Address and port (53 when the URL has none).
    pub addr: SocketAddr,
}

/// Why an upstream URL was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamParseError {
    /// The scheme is not one kudurru forwards over (yet).
    #[error("unsupported upstream scheme in {0:?}: expected udp:// or tcp://")]
    Scheme(String),
    /// The address part is not an IP address with an optional port.
    #[error("invalid upstream address in {0:?}: expected IP:PORT or [IPv6]:PORT")]
    Address(String),
}

impl FromStr for UpstreamSpec {
    type Err = UpstreamParseError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let (protocol, rest) = if let Some(rest) = url.strip_prefix("udp://") {
            (UpstreamProtocol::Udp, rest)
        } else if let Some(rest) = url.strip_prefix("tcp://") {
            (UpstreamProtocol::Tcp, rest)
        } else {
            return Err(UpstreamParseError::Scheme(url.to_owned()));
        };
        let addr =
            parse_host_port(rest, 53).ok_or_else(|| UpstreamParseError::Address(url.to_owned()))?;
        Ok(Self { protocol, addr })
    }
}

impl fmt::Display for UpstreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.protocol {
            UpstreamProtocol::Udp => "udp",
            UpstreamProtocol::Tcp => "tcp",
        };
        write!(f, "{scheme}://{}", self.addr)
    }
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

/// After this many consecutive failures an upstream is backed off.
const FAILURES_BEFORE_BACKOFF: u32 = 3;
/// The longest back-off.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// One query in this many goes to a random other healthy upstream.
const PROBE_ONE_IN: u64 = 20;

#[derive(Debug, Clone, Copy, Default)]
struct Health {
    /// Smoothed RTT in microseconds; 0 until measured, so new upstreams are tried early.
    srtt_us: u32,
    consecutive_failures: u32,
    backoff_until: Option<Instant>,
}

/// Per-core upstream choice state.
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

    /// The order in which to try the upstreams for one query at `now`.
    pub fn order(&mut self, now: Instant) -> UpstreamOrder {
        let n = self.health.len();
        let mut order: UpstreamOrder = (0..n).collect();
        let backed_off = |h: &Health| h.backoff_until.is_some_and(|t| now < t);
        order.sort_by_key(|&i| (backed_off(&self.health[i]), self.health[i].srtt_us));
        let healthy = order
            .iter()
            .take_while(|&&i| !backed_off(&self.health[i]))
            .count();
        if healthy > 1 && self.next_random().is_multiple_of(PROBE_ONE_IN) {
            let pick = 1 + (self.next_random() % (healthy as u64 - 1)) as usize;
            order.swap(0, pick);
        }
        order
    }

    /// Records an answer from upstream `index` after `rtt`.
    pub fn on_success(&mut self, index: usize, rtt: Duration) {
        let Some(h) = self.health.get_mut(index) else {
            return;
        };
        let sample = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX).max(1);
        h.srtt_us = if h.srtt_us == 0 {
            sample
        } else {
            ((u64::from(h.srtt_us) * 7 + u64::from(sample)) / 8) as u32
        };
        h.consecutive_failures = 0;
        h.backoff_until = None;
    }

    /// Records a timeout or failure of upstream `index` at `now`.
    pub fn on_failure(&mut self, index: usize, now: Instant, timeout: Duration) {
        let Some(h) = self.health.get_mut(index) else {
            return;
        };
        h.consecutive_failures += 1;
        // Count the failure as a slow answer, so a flapping server sinks in the order.
        let penalty = u32::try_from(timeout.as_micros()).unwrap_or(u32::MAX);
        h.srtt_us = h.srtt_us.max(penalty / 2).saturating_add(penalty / 8);
        if h.consecutive_failures >= FAILURES_BEFORE_BACKOFF {
            let doublings = (h.consecutive_failures - FAILURES_BEFORE_BACKOFF).min(5);
            let backoff = (Duration::from_secs(1) * (1 << doublings)).min(MAX_BACKOFF);
            h.backoff_until = Some(now + backoff);
        }
    }

    /// Whether upstream `index` is currently usable (not backed off).
    pub fn is_healthy(&self, index: usize, now: Instant) -> bool {
        self.health
            .get(index)
            .is_some_and(|h| h.backoff_until.is_none_or(|t| now >= t))
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
            "tls://1.1.1.1".parse::<UpstreamSpec>(),
            Err(UpstreamParseError::Scheme(_))
        ));
        assert!(matches!(
            "udp://dns.example".parse::<UpstreamSpec>(),
            Err(UpstreamParseError::Address(_))
        ));
    }

    #[test]
    fn prefers_fastest_and_still_probes_others() {
        let now = Instant::now();
        let mut s = Selector::new(3, 42);
        s.on_success(0, Duration::from_millis(30));
        s.on_success(1, Duration::from_millis(2));
        s.on_success(2, Duration::from_millis(10));
        let mut first = [0usize; 3];
        for _ in 0..2000 {
            first[s.order(now)[0]] += 1;
        }
        assert!(first[1] > 1800, "fastest chosen most: {first:?}");
        assert!(first[0] > 0 && first[2] > 0, "others probed: {first:?}");
    }

    #[test]
    fn the_order_holds_every_upstream_past_the_inline_capacity() {
        let now = Instant::now();
        let mut s = Selector::new(11, 3);
        for i in 0..11 {
            s.on_success(i, Duration::from_millis(20 - i as u64));
        }
        for _ in 0..100 {
            let mut order = s.order(now);
            assert_eq!(order.len(), 11);
            order.sort_unstable();
            assert_eq!(order.as_slice(), (0..11).collect::<Vec<_>>());
        }
        // Without a probe the fastest (upstream 10) leads, the slowest (0) trails.
        let orders: Vec<_> = (0..100).map(|_| s.order(now)).collect();
        assert!(orders.iter().any(|o| o[0] == 10 && o[10] == 0));
    }

    #[test]
    fn failing_upstream_is_backed_off_then_retried() {
        let now = Instant::now();
        let mut s = Selector::new(2, 7);
        s.on_success(0, Duration::from_millis(1));
        s.on_success(1, Duration::from_millis(5));
        for _ in 0..3 {
            s.on_failure(0, now, Duration::from_millis(500));
        }
        assert!(!s.is_healthy(0, now));
        assert_eq!(
            s.order(now).as_slice(),
            [1, 0],
            "backed-off upstream is last resort"
        );
        assert!(s.is_healthy(0, now + Duration::from_secs(2)));
        s.on_success(0, Duration::from_millis(1));
        assert!(s.is_healthy(0, now));
    }
}
