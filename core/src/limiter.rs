//! The per-client rate limiter: one token bucket per client prefix, in a fixed-size table.
//!
//! ```text
//! client address ─▶ allowlisted? ─ yes ─▶ Allow
//!        │ no
//!        ▼
//! prefix key (/24, /56) ─▶ set = hash(key) ─▶ 8 ways: found? refill, else take the way
//!                                             with the most tokens (idle buckets first)
//!        ▼
//! token left? ─ yes ─▶ Allow
//!        └ no ─▶ every `slip`-th limited query ─▶ Slip (TC=1 over UDP), else Drop
//! ```
//!
//! Memory is fixed at construction (`ratelimit.tableSize` buckets of 32 bytes per core), so a
//! flood from random sources cannot grow it. A new client displaces the bucket in its set that
//! holds the most tokens: an idle bucket (refilled to `burst`, the same as a fresh one) goes
//! first, a client being limited (near zero tokens) last, so a random-source flood evicts other
//! flood entries rather than the clients it is meant to hide behind. Each core owns its own
//! limiter; the shell steers every client prefix to one core (SO_ATTACH_REUSEPORT_CBPF), which
//! makes the per-core buckets exact.

use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Instant;

/// An IP prefix such as `192.0.2.0/24` or `2001:db8::/32`. IPv4 is held as IPv4-mapped IPv6,
/// so one comparison serves both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    bits: u128,
    /// Length in IPv6 terms (an IPv4 /24 is 120).
    len: u8,
}

/// Why a prefix did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not an IP address before the `/`.
    #[error("`{0}` is not an IP address")]
    Address(String),
    /// The length is not a number or too long for the family.
    #[error("prefix length `{0}` is not 0..=32 (IPv4) or 0..=128 (IPv6)")]
    Length(String),
    /// Bits set after the prefix length (`192.0.2.1/24`): almost always a typo.
    #[error("`{0}` has host bits set; write the network address")]
    HostBits(String),
}

const V4_MAPPED: u128 = 0xffff << 32;

/// The 128-bit form of `addr`: IPv4 and IPv4-mapped IPv6 as `::ffff:a.b.c.d`.
pub fn address_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => V4_MAPPED | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => V4_MAPPED | u128::from(u32::from(v4)),
            None => u128::from(v6),
        },
    }
}

/// The mask of a prefix `len` bits long, in the 128-bit form.
pub(crate) fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        len => u128::MAX << (128 - u32::from(len.min(128))),
    }
}

/// Whether `addr` is IPv4 (or IPv4-mapped).
fn is_v4(bits: u128) -> bool {
    bits >> 32 == 0xffff
}

impl Prefix {
    /// The prefix of length `len` (in the address's own family) that contains `addr`.
    pub fn containing(addr: IpAddr, len: u8) -> Self {
        let bits = address_bits(addr);
        let len = if is_v4(bits) {
            96 + len.min(32)
        } else {
            len.min(128)
        };
        Self {
            bits: bits & mask(len),
            len,
        }
    }

    /// Whether `addr` lies inside this prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        address_bits(addr) & mask(self.len) == self.bits
    }

    /// The network in the 128-bit form of [`address_bits`].
    pub(crate) fn network_bits(&self) -> u128 {
        self.bits
    }

    /// The length in the 128-bit form (an IPv4 /24 is 120).
    pub(crate) fn length(&self) -> u8 {
        self.len
    }

    /// The network address and length in the prefix's own family.
    pub fn parts(&self) -> (IpAddr, u8) {
        if self.len >= 96 && is_v4(self.bits) {
            (IpAddr::V4(Ipv4Addr::from(self.bits as u32)), self.len - 96)
        } else {
            (IpAddr::V6(Ipv6Addr::from(self.bits)), self.len)
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// `ADDR/LEN`, or a bare address for a single host.
    fn from_str(text: &str) -> Result<Self, PrefixError> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| PrefixError::Address(addr.into()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(len) => len
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| PrefixError::Length(len.into()))?,
        };
        let prefix = Self::containing(addr, len);
        if address_bits(addr) != prefix.bits {
            return Err(PrefixError::HostBits(text.into()));
        }
        Ok(prefix)
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (addr, len) = self.parts();
        write!(f, "{addr}/{len}")
    }
}

/// The limiter's settings, part of the published settings snapshot (`ratelimit.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// Queries per second each client prefix may send; 0 turns the limiter off.
    pub qps: u32,
    /// Bucket size: queries a quiet client may send at once.
    pub burst: u32,
    /// Every `slip`-th limited UDP query is answered TC=1 and empty; 0 drops all, 1 slips all.
    pub slip: u32,
    /// IPv4 client prefix length (`ratelimit.ipv4Prefix`).
    pub ipv4_prefix: u8,
    /// IPv6 client prefix length (`ratelimit.ipv6Prefix`).
    pub ipv6_prefix: u8,
    /// Prefixes never limited.
    pub allowlist: Vec<Prefix>,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            qps: 0,
            burst: 200,
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            allowlist: Vec::new(),
        }
    }
}

impl RateLimit {
    /// Whether the limiter runs at all.
    pub fn enabled(&self) -> bool {
        self.qps > 0
    }

    /// Whether `addr` is never limited.
    pub fn allows(&self, addr: IpAddr) -> bool {
        self.allowlist.iter().any(|p| p.contains(addr))
    }

    /// The bucket key of `addr`: its client prefix.
    pub fn client(&self, addr: IpAddr) -> Prefix {
        let len =
            if addr.is_ipv4() || matches!(addr, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some()) {
                self.ipv4_prefix
            } else {
                self.ipv6_prefix
            };
        Prefix::containing(addr, len)
    }
}

/// The limiter's verdict on one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit (or not limited at all).
    Allow,
    /// Over the limit, and this one is answered TC=1 (UDP) so a real client retries over TCP.
    Slip,
    /// Over the limit: send nothing.
    Drop,
}

/// Counters, read by the shell for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimiterStats {
    /// Queries over the limit that were dropped.
    pub dropped: u64,
    /// Queries over the limit answered TC=1.
    pub slipped: u64,
    /// Buckets displaced while they still differed from a fresh one (table pressure).
    pub evictions: u64,
    /// Buckets in use.
    pub buckets: usize,
}

/// Ways per set: a new client competes with at most this many buckets.
const WAYS: usize = 8;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    key: u128,
    /// Nanoseconds since the limiter's epoch at the last refill.
    last: u64,
    tokens: f32,
    /// Limited queries so far (for slip).
    limited: u16,
    used: bool,
}

const EMPTY: Bucket = Bucket {
    key: 0,
    last: 0,
    tokens: 0.0,
    limited: 0,
    used: false,
};

/// One core's limiter state.
pub struct Limiter {
    buckets: Box<[Bucket]>,
    set_mask: usize,
    hasher: foldhash::fast::FixedState,
    epoch: Instant,
    stats: LimiterStats,
}

impl Limiter {
    /// A limiter holding about `table_size` buckets (rounded up to a power of two, at least one
    /// set); `seed` keys the set hash so a client cannot aim at another client's set.
    pub fn new(table_size: usize, seed: u64, epoch: Instant) -> Self {
        let sets = table_size.div_ceil(WAYS).max(1).next_power_of_two();
        Self {
            buckets: vec![EMPTY; sets * WAYS].into_boxed_slice(),
            set_mask: sets - 1,
            hasher: foldhash::fast::FixedState::with_seed(seed),
            epoch,
            stats: LimiterStats::default(),
        }
    }

    /// Buckets the table holds.
    pub fn capacity(&self) -> usize {
        self.buckets.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> LimiterStats {
        self.stats
    }

    /// Charges one query from `addr` at `now`.
    pub fn check(&mut self, config: &RateLimit, addr: IpAddr, now: Instant) -> Verdict {
        if !config.enabled() || config.allows(addr) {
            return Verdict::Allow;
        }
        let key = config.client(addr).bits;
        let now = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let burst = config.burst.max(1) as f32;
        let rate = config.qps as f64 / 1e9;
        let refill = |b: &Bucket| -> f32 {
            let gained = (now.saturating_sub(b.last) as f64 * rate).min(f64::from(burst));
            (b.tokens + gained as f32).min(burst)
        };
        let set = (self.hasher.hash_one(key) as usize & self.set_mask) * WAYS;
        let ways = &mut self.buckets[set..set + WAYS];
        let index = match ways.iter().position(|b| b.used && b.key == key) {
            Some(found) => {
                ways[found].tokens = refill(&ways[found]);
                found
            }
            None => {
                // An empty way, else the fullest bucket (ties: the first).
                let victim = match ways.iter().position(|b| !b.used) {
                    Some(empty) => {
                        self.stats.buckets += 1;
                        empty
                    }
                    None => {
                        let mut best = 0;
                        let mut best_tokens = f32::MIN;
                        for (i, b) in ways.iter().enumerate() {
                            let tokens = refill(b);
                            if tokens > best_tokens {
                                best = i;
                                best_tokens = tokens;
                            }
                        }
                        if best_tokens < burst {
                            self.stats.evictions += 1;
                        }
                        best
                    }
                };
                ways[victim] = Bucket {
                    key,
                    last: now,
                    tokens: burst,
                    limited: 0,
                    used: true,
                };
                victim
            }
        };
        let bucket = &mut ways[index];
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Verdict::Allow;
        }
        bucket.limited = bucket.limited.wrapping_add(1);
        if config.slip > 0 && u32::from(bucket.limited) % config.slip == 0 {
            self.stats.slipped += 1;
            Verdict::Slip
        } else {
            self.stats.dropped += 1;
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(qps: u32, burst: u32, slip: u32) -> RateLimit {
        RateLimit {
            qps,
            burst,
            slip,
            ..RateLimit::default()
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn prefixes_parse_contain_and_reject_typos() {
        let p: Prefix = "192.0.2.0/24".parse().unwrap();
        assert!(p.contains(ip("192.0.2.77")));
        assert!(p.contains(ip("::ffff:192.0.2.77")), "IPv4-mapped matches");
        assert!(!p.contains(ip("192.0.3.1")));
        assert_eq!(p.to_string(), "192.0.2.0/24");
        let v6: Prefix = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("192.0.2.1")));
        let host: Prefix = "::1".parse().unwrap();
        assert_eq!(host.to_string(), "::1/128");
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("2001:db8::1")));
        assert_eq!(
            "192.0.2.1/24".parse::<Prefix>(),
            Err(PrefixError::HostBits("192.0.2.1/24".into()))
        );
        assert!(matches!(
            "10.0.0.0/33".parse::<Prefix>(),
            Err(PrefixError::Length(_))
        ));
        assert!(matches!(
            "example.com/8".parse::<Prefix>(),
            Err(PrefixError::Address(_))
        ));
    }

    #[test]
    fn burst_then_the_rate_with_slip() {
        let t0 = Instant::now();
        let mut limiter = Limiter::new(1024, 1, t0);
        let cfg = config(10, 5, 2);
        let client = ip("198.51.100.7");
        let verdicts: Vec<Verdict> = (0..9).map(|_| limiter.check(&cfg, client, t0)).collect();
        assert!(verdicts[..5].iter().all(|v| *v == Verdict::Allow));
        assert_eq!(
            &verdicts[5..],
            &[Verdict::Drop, Verdict::Slip, Verdict::Drop, Verdict::Slip]
        );
        // 10 qps: 100 ms buys exactly one more query.
        let later = t0 + Duration::from_millis(100);
        assert_eq!(limiter.check(&cfg, client, later), Verdict::Allow);
        assert_ne!(limiter.check(&cfg, client, later), Verdict::Allow);
        let stats = limiter.stats();
        assert_eq!((stats.dropped, stats.slipped, stats.buckets), (3, 2, 1));
    }

    #[test]
    fn slip_zero_drops_all_and_slip_one_truncates_all() {
        let t0 = Instant::now();
        for (slip, expect) in [(0, Verdict::Drop), (1, Verdict::Slip)] {
            let mut limiter = Limiter::new(64, 1, t0);
            let cfg = config(1, 1, slip);
            assert_eq!(limiter.check(&cfg, ip("192.0.2.1"), t0), Verdict::Allow);
            for _ in 0..10 {
                assert_eq!(limiter.check(&cfg, ip("192.0.2.1"), t0), expect);
            }
        }
    }

    #[test]
    fn one_prefix_is_one_client_and_the_allowlist_is_never_limited() {
        let t0 = Instant::now();
        let mut limiter = Limiter::new(1024, 1, t0);
        let mut cfg = config(1, 2, 0);
        assert_eq!(limiter.check(&cfg, ip("192.0.2.1"), t0), Verdict::Allow);
        assert_eq!(limiter.check(&cfg, ip("192.0.2.200"), t0), Verdict::Allow);
        assert_eq!(
            limiter.check(&cfg, ip("::ffff:192.0.2.9"), t0),
            Verdict::Drop,
            "same /24, also when IPv4-mapped"
        );
        assert_eq!(limiter.check(&cfg, ip("192.0.3.1"), t0), Verdict::Allow);
        assert_eq!(
            limiter.check(&cfg, ip("2001:db8:0:ff::1"), t0),
            Verdict::Allow
        );
        assert_eq!(
            limiter.check(&cfg, ip("2001:db8:0:ff::2"), t0),
            Verdict::Allow
        );
        assert_eq!(
            limiter.check(&cfg, ip("2001:db8:0:1::3"), t0),
            Verdict::Drop,
            "same /56"
        );
        assert_eq!(
            limiter.check(&cfg, ip("2001:db8:0:100::1"), t0),
            Verdict::Allow
        );
        cfg.allowlist = vec!["192.0.2.0/25".parse().unwrap()];
        for _ in 0..100 {
            assert_eq!(limiter.check(&cfg, ip("192.0.2.1"), t0), Verdict::Allow);
        }
        assert_eq!(limiter.check(&cfg, ip("192.0.2.200"), t0), Verdict::Drop);
        cfg.qps = 0;
        assert_eq!(limiter.check(&cfg, ip("192.0.2.200"), t0), Verdict::Allow);
    }

    #[test]
    fn a_random_source_flood_keeps_memory_fixed_and_the_limited_client_limited() {
        let t0 = Instant::now();
        let mut limiter = Limiter::new(4096, 7, t0);
        let capacity = limiter.capacity();
        let cfg = config(5, 5, 0);
        let abuser = ip("203.0.113.1");
        for _ in 0..5 {
            assert_eq!(limiter.check(&cfg, abuser, t0), Verdict::Allow);
        }
        let mut state = 0x1234_5678u32;
        for i in 0..200_000u32 {
            // A flood of distinct /24s (xorshift), one query each.
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let source = IpAddr::V4(Ipv4Addr::from(state | 1));
            let now = t0 + Duration::from_micros(u64::from(i));
            limiter.check(&cfg, source, now);
            if i % 1000 == 0 {
                assert_ne!(
                    limiter.check(&cfg, abuser, now),
                    Verdict::Allow,
                    "the abuser stays limited through the flood (query {i})"
                );
            }
        }
        assert_eq!(limiter.capacity(), capacity, "no growth");
        assert!(limiter.stats().buckets <= capacity);
        assert!(limiter.stats().evictions > 0);
    }

    #[test]
    fn burst_and_qps_changes_apply_to_existing_buckets() {
        let t0 = Instant::now();
        let mut limiter = Limiter::new(64, 1, t0);
        let client = ip("192.0.2.1");
        let tight = config(1, 1, 0);
        assert_eq!(limiter.check(&tight, client, t0), Verdict::Allow);
        assert_eq!(limiter.check(&tight, client, t0), Verdict::Drop);
        let loose = config(1000, 100, 0);
        let soon = t0 + Duration::from_millis(50);
        let allowed = (0..60)
            .filter(|_| limiter.check(&loose, client, soon) == Verdict::Allow)
            .count();
        assert_eq!(allowed, 50, "50 ms at 1000 qps refills 50 tokens");
    }
}
