//! Forwarding-loop probes: the names the control thread asks each upstream, and the one check a
//! miss makes to recognise such a name coming back in as a client query (kudurru → upstream →
//! … → kudurru: a loop).
//!
//! ```text
//! control: token = random, LoopProbe::start_round(token) on every core
//!          TXT <token><index>.kudurru-loop.alt ──▶ upstream `index`
//! core, miss path: is_probe_name(qname)?  no ─▶ resolve as usual (the common case: one
//!                                              18-byte comparison at the end of the name)
//!                                         yes ─▶ LoopProbe::observe (counts it for `index` when
//!                                              the token is this round's) ─▶ REFUSED, never
//!                                              forwarded, never cached: the loop drains
//! control: arrivals(index) ≥ 1 after the round ─▶ a loop through upstream `index`
//! ```
//!
//! Why `.alt` (RFC 9476): it is reserved never to be delegated in the root, so no one owns a
//! name under it and a resolver that does recurse learns "NXDOMAIN" from the root (usually from
//! its aggressive NSEC cache, RFC 8198) without any third party seeing the query. It is not one
//! of the names resolvers answer by themselves (`.invalid`, `.test`, `localhost` and the other
//! RFC 6761 names are Unbound's default local zones): a forwarder forwards it, so a loop shows.
//! The first label carries a random 64-bit token per round (so a late or forged arrival is not
//! counted) and the upstream's index (so the loop is attributed to the upstream it went
//! through, as dnsmasq's per-server probes are).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::key::CacheKey;
use crate::wire;

/// The domain every probe name sits in (wire form, lower case): `kudurru-loop.alt.`.
pub const PROBE_SUFFIX: &[u8] = b"\x0ckudurru-loop\x03alt\x00";

/// The domain as text.
pub const PROBE_DOMAIN: &str = "kudurru-loop.alt";

/// Upstreams probed per round: the first this many of the set (as many as the per-upstream
/// counters the data plane keeps).
pub const PROBED_UPSTREAMS: usize = 16;

/// Hex digits of the token in a probe's first label.
const TOKEN_DIGITS: usize = 16;
/// Hex digits of the upstream index after it.
const INDEX_DIGITS: usize = 2;
/// The first label's length.
const LABEL_LEN: usize = TOKEN_DIGITS + INDEX_DIGITS;

/// Whether `qname` (lowercased wire form, as a [`CacheKey`] holds it) is under
/// [`PROBE_DOMAIN`]: the one comparison a miss makes. Such a name is never a real question
/// (`.alt` does not resolve), so every one is refused, whatever its token.
#[inline]
pub fn is_probe_name(qname: &[u8]) -> bool {
    qname.ends_with(PROBE_SUFFIX)
}

/// The probe name of round `token` for upstream `index`, as text (for logs and doctor).
pub fn probe_name(token: u64, index: usize) -> String {
    format!(
        "{token:016x}{:02x}.{PROBE_DOMAIN}.",
        index % PROBED_UPSTREAMS
    )
}

/// The probe query (TXT IN, RD set, with EDNS) for round `token` and upstream `index`, with
/// message `id`.
pub fn probe_query(token: u64, index: usize, id: u16) -> Vec<u8> {
    let label = format!("{token:016x}{:02x}", index % PROBED_UPSTREAMS);
    let mut qname = Vec::with_capacity(1 + LABEL_LEN + PROBE_SUFFIX.len());
    qname.push(LABEL_LEN as u8);
    qname.extend_from_slice(label.as_bytes());
    qname.extend_from_slice(PROBE_SUFFIX);
    let mut out = Vec::with_capacity(qname.len() + 32);
    // The name is built right here: always a valid wire name.
    if let Some(key) = CacheKey::new(&qname, wire::rtype::TXT, wire::class::IN, false, false) {
        wire::write_upstream_query(&key, id, &mut out);
    }
    out
}

/// The round token and upstream index a probe name carries: `None` unless `qname` is
/// exactly one label of [`LABEL_LEN`] lower-case hex digits under [`PROBE_DOMAIN`].
pub fn parse_probe_name(qname: &[u8]) -> Option<(u64, usize)> {
    if qname.len() != 1 + LABEL_LEN + PROBE_SUFFIX.len() || !is_probe_name(qname) {
        return None;
    }
    if usize::from(*qname.first()?) != LABEL_LEN {
        return None;
    }
    let label = std::str::from_utf8(qname.get(1..1 + LABEL_LEN)?).ok()?;
    if !label
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let token = u64::from_str_radix(label.get(..TOKEN_DIGITS)?, 16).ok()?;
    let index = usize::from_str_radix(label.get(TOKEN_DIGITS..)?, 16).ok()?;
    (index < PROBED_UPSTREAMS).then_some((token, index))
}

/// One core's view of the current probe round: the token the control thread set, and how
/// often each upstream's probe came back in as a client query. Relaxed atomics: the control
/// thread writes the token before it sends a probe and reads the counts after the round.
#[derive(Debug, Default)]
pub struct LoopProbe {
    /// This round's token; 0: no round yet (no name is counted).
    token: AtomicU64,
    /// Arrivals of this round's probe, by upstream index.
    arrivals: [AtomicU32; PROBED_UPSTREAMS],
    /// The upstreams a loop runs through, a bit per index of the set `looping_set` names.
    looping: AtomicU32,
    /// Which upstream set `looping` is about (an identity the control thread chose: the
    /// address of the published set it keeps alive); 0: none.
    looping_set: AtomicUsize,
}

impl LoopProbe {
    /// Starts round `token` (not 0): the counts go back to zero, then the token is set, so no
    /// arrival of the last round is counted in this one.
    pub fn start_round(&self, token: u64) {
        self.token.store(0, Ordering::Relaxed);
        for count in &self.arrivals {
            count.store(0, Ordering::Relaxed);
        }
        self.token.store(token, Ordering::Release);
    }

    /// Counts `qname` when it is this round's probe for some upstream (call it when
    /// [`is_probe_name`] said yes); returns whether it was counted.
    pub fn observe(&self, qname: &[u8]) -> bool {
        let Some((token, index)) = parse_probe_name(qname) else {
            return false;
        };
        let current = self.token.load(Ordering::Acquire);
        if current == 0 || token != current {
            return false;
        }
        match self.arrivals.get(index) {
            Some(count) => {
                count.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Marks the upstreams of set `set` (not 0) that a loop runs through, a bit per index,
    /// for the cores to hold out of rotation.
    pub fn set_looping(&self, set: usize, mask: u32) {
        self.looping_set.store(0, Ordering::Release);
        self.looping.store(mask, Ordering::Release);
        self.looping_set.store(set, Ordering::Release);
    }

    /// The upstreams of set `set` a loop runs through (a bit per index); 0 when the marks are
    /// about another set.
    pub fn looping_in(&self, set: usize) -> u32 {
        if set == 0 || self.looping_set.load(Ordering::Acquire) != set {
            return 0;
        }
        let mask = self.looping.load(Ordering::Acquire);
        if self.looping_set.load(Ordering::Acquire) == set {
            mask
        } else {
            0
        }
    }

    /// How often upstream `index`'s probe came back in this round.
    pub fn arrivals(&self, index: usize) -> u32 {
        self.arrivals
            .get(index)
            .map_or(0, |count| count.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qname_of(query: &[u8]) -> &[u8] {
        let end = wire::HEADER_LEN
            + query[wire::HEADER_LEN..]
                .iter()
                .position(|&b| b == 0)
                .unwrap()
            + 1;
        &query[wire::HEADER_LEN..end]
    }

    #[test]
    fn a_probe_query_carries_its_token_and_upstream() {
        let query = probe_query(0x0123_4567_89ab_cdef, 3, 7);
        assert_eq!(wire::message_id(&query), Some(7));
        let qname = qname_of(&query);
        assert!(is_probe_name(qname));
        assert_eq!(parse_probe_name(qname), Some((0x0123_4567_89ab_cdef, 3)));
        assert_eq!(
            probe_name(0x0123_4567_89ab_cdef, 3),
            "0123456789abcdef03.kudurru-loop.alt."
        );
    }

    #[test]
    fn only_names_under_the_probe_domain_match() {
        let wire_of = |text: &str| crate::policy::name::to_wire(text).unwrap();
        assert!(is_probe_name(&wire_of(
            "0123456789abcdef03.kudurru-loop.alt"
        )));
        assert!(is_probe_name(&wire_of("anything.kudurru-loop.alt")));
        assert!(is_probe_name(&wire_of("kudurru-loop.alt")));
        for other in [
            "example.com",
            "kudurru-loop.alt.example",
            "xkudurru-loop.alt",
            "alt",
            "kudurru-loop.invalid",
        ] {
            assert!(!is_probe_name(&wire_of(other)), "{other}");
        }
        assert!(!is_probe_name(b"\x00"));
        assert!(!is_probe_name(b""));
    }

    #[test]
    fn a_malformed_probe_label_is_no_probe_of_any_upstream() {
        let wire_of = |text: &str| crate::policy::name::to_wire(text).unwrap();
        for bad in [
            "anything.kudurru-loop.alt",
            // 17 and 19 digits, a non-hex digit, an index past the probed upstreams, two labels.
            "0123456789abcdef0.kudurru-loop.alt",
            "0123456789abcdef030.kudurru-loop.alt",
            "0123456789abcdeg03.kudurru-loop.alt",
            "0123456789abcdef10.kudurru-loop.alt",
            "a.0123456789abcdef03.kudurru-loop.alt",
        ] {
            assert_eq!(parse_probe_name(&wire_of(bad)), None, "{bad}");
        }
        assert_eq!(parse_probe_name(b""), None);
        assert_eq!(parse_probe_name(PROBE_SUFFIX), None);
    }

    #[test]
    fn only_this_rounds_probe_is_counted() {
        let probe = LoopProbe::default();
        let query = probe_query(42, 1, 1);
        let qname = qname_of(&query).to_vec();
        assert!(!probe.observe(&qname), "no round started: nothing counts");
        probe.start_round(42);
        assert!(probe.observe(&qname));
        assert!(probe.observe(&qname));
        assert_eq!(probe.arrivals(1), 2);
        assert_eq!(probe.arrivals(0), 0);
        assert_eq!(probe.arrivals(99), 0);
        probe.start_round(43);
        assert_eq!(probe.arrivals(1), 0, "a new round starts from zero");
        assert!(
            !probe.observe(&qname),
            "the last round's name is not counted"
        );
        assert_eq!(probe.arrivals(1), 0);
    }

    #[test]
    fn looping_marks_apply_to_their_own_set_only() {
        let probe = LoopProbe::default();
        assert_eq!(probe.looping_in(7), 0);
        probe.set_looping(7, 0b101);
        assert_eq!(probe.looping_in(7), 0b101);
        assert_eq!(probe.looping_in(8), 0, "another set: no marks");
        assert_eq!(probe.looping_in(0), 0);
        probe.set_looping(8, 0);
        assert_eq!(probe.looping_in(7), 0);
    }
}
