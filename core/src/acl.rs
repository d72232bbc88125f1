//! Client access control (`server.allow`, `server.deny`): which client addresses kudurru
//! answers at all, checked first at ingress on every transport.
//!
//! ```text
//! client address ─▶ 128-bit form (IPv4 and IPv4-mapped IPv6 as ::ffff:a.b.c.d)
//!        ▼
//! for each prefix length in the lists, longest first:
//!     mask the address ─▶ binary search that length's sorted networks
//!        found ─▶ Allow or Deny, as that entry says (deny wins a tie)
//!        ▼ none matched
//! Deny (an address in neither list is refused)
//! ```
//!
//! The rule is the most specific match, as Unbound's `access-control`: the longest prefix
//! that contains the address decides, so `allow 10.0.0.0/8` with `deny 10.1.0.0/16` refuses
//! 10.1.2.3 and serves 10.2.3.4, and `deny 10.0.0.0/8` with `allow 10.1.0.0/16` serves
//! 10.1.2.3. The same prefix in both lists is denied. An address no entry contains is
//! refused: kudurru is not an open resolver unless `server.allow` says `0.0.0.0/0` and `::/0`.
//!
//! Cost per query, by construction: one table lookup per distinct prefix length present
//! (the default list has 7), each a mask and a binary search over the networks of that
//! length: no allocation, no lock, no hashing. The table is compiled once, when the settings
//! snapshot is built.

use std::net::IpAddr;

use crate::limiter::{Prefix, address_bits, mask};

/// The default `server.allow`: loopback, the private and shared (CGNAT) ranges and
/// link-local, as Unbound and dnsdist allow by default.
pub const DEFAULT_ALLOW: &[&str] = &[
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];

/// What a refused client gets (`server.aclAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AclAction {
    /// A REFUSED answer (Unbound's `refuse`).
    #[default]
    Refuse,
    /// Nothing: UDP sends no reply, streams are closed or reset (Unbound's `deny`).
    Drop,
}

impl AclAction {
    /// The configuration and metric spelling.
    pub fn label(self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::Drop => "drop",
        }
    }
}

/// One compiled entry: a network and whether it admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    bits: u128,
    allow: bool,
}

/// The networks of one prefix length, a range of [`AccessList::entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Length {
    mask: u128,
    start: u32,
    end: u32,
}

/// The compiled allow and deny lists: immutable, shared by every core in the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessList {
    /// Every network, grouped by prefix length (longest first), sorted within a group.
    entries: Box<[Entry]>,
    /// The groups, longest prefix first.
    lengths: Box<[Length]>,
    /// What a refused client gets.
    action: AclAction,
    /// Whether `server.allow` holds `0.0.0.0/0` or `::/0` (an open resolver).
    open: bool,
}

impl Default for AccessList {
    /// [`DEFAULT_ALLOW`], nothing denied, refused clients answered REFUSED.
    fn default() -> Self {
        let allow: Vec<Prefix> = DEFAULT_ALLOW
            .iter()
            .map(|p| p.parse().expect("the default allow list parses"))
            .collect();
        Self::new(&allow, &[], AclAction::Refuse)
    }
}

impl AccessList {
    /// Compiles `allow` and `deny` (a prefix in both is denied).
    pub fn new(allow: &[Prefix], deny: &[Prefix], action: AclAction) -> Self {
        // (length, bits, allow), sorted so that a length's networks are together, longest
        // first, and a deny sorts before an allow of the same network.
        let mut all: Vec<(u8, u128, bool)> = allow
            .iter()
            .map(|p| (p.length(), p.network_bits(), true))
            .chain(deny.iter().map(|p| (p.length(), p.network_bits(), false)))
            .collect();
        all.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        all.dedup_by(|later, first| later.0 == first.0 && later.1 == first.1);
        let mut lengths: Vec<Length> = Vec::new();
        for (i, &(len, _, _)) in all.iter().enumerate() {
            let i = i as u32;
            match lengths.last_mut() {
                Some(last) if last.mask == mask(len) => last.end = i + 1,
                _ => lengths.push(Length {
                    mask: mask(len),
                    start: i,
                    end: i + 1,
                }),
            }
        }
        let open = allow
            .iter()
            .any(|p| p.length() == 0 || (p.length() == 96 && p.network_bits() == V4_ANY));
        Self {
            entries: all
                .into_iter()
                .map(|(_, bits, allow)| Entry { bits, allow })
                .collect(),
            lengths: lengths.into(),
            action,
            open,
        }
    }

    /// Whether `addr` may be served: the longest prefix containing it is an allow entry.
    #[inline]
    pub fn allows(&self, addr: IpAddr) -> bool {
        let bits = address_bits(addr);
        for group in self.lengths.iter() {
            let networks = &self.entries[group.start as usize..group.end as usize];
            let network = bits & group.mask;
            if let Ok(i) = networks.binary_search_by(|e| e.bits.cmp(&network)) {
                return networks[i].allow;
            }
        }
        false
    }

    /// What a refused client gets.
    pub fn action(&self) -> AclAction {
        self.action
    }

    /// Whether `server.allow` admits every IPv4 (`0.0.0.0/0`) or every address (`::/0`).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Distinct prefix lengths: the lookups one [`Self::allows`] may make.
    pub fn lengths(&self) -> usize {
        self.lengths.len()
    }
}

/// `0.0.0.0/0` in the 128-bit form.
const V4_ANY: u128 = 0xffff << 32;

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &[&str], deny: &[&str]) -> AccessList {
        let parse = |l: &[&str]| -> Vec<Prefix> { l.iter().map(|p| p.parse().unwrap()).collect() };
        AccessList::new(&parse(allow), &parse(deny), AclAction::Refuse)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_allows_loopback_private_and_link_local_only() {
        let acl = AccessList::default();
        for served in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.254",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
        ] {
            assert!(acl.allows(ip(served)), "{served}");
        }
        for refused in [
            "8.8.8.8",
            "172.32.0.1",
            "192.169.0.1",
            "100.128.0.1",
            "1.1.1.1",
            "2001:db8::1",
            "::2",
            "::ffff:8.8.8.8",
            "0.0.0.0",
        ] {
            assert!(!acl.allows(ip(refused)), "{refused}");
        }
        assert!(!acl.is_open());
        assert_eq!(acl.action(), AclAction::Refuse);
        assert_eq!(acl.lengths(), 7, "the lookups a query costs");
    }

    #[test]
    fn the_most_specific_prefix_decides() {
        let acl = list(&["10.0.0.0/8", "10.1.2.0/24"], &["10.1.0.0/16"]);
        assert!(acl.allows(ip("10.2.3.4")));
        assert!(!acl.allows(ip("10.1.3.4")), "deny /16 inside allow /8");
        assert!(acl.allows(ip("10.1.2.9")), "allow /24 inside deny /16");
        let acl = list(&["10.1.0.0/16"], &["10.0.0.0/8"]);
        assert!(acl.allows(ip("10.1.0.1")));
        assert!(!acl.allows(ip("10.2.0.1")));
    }

    #[test]
    fn deny_wins_a_tie_and_an_address_in_no_list_is_refused() {
        let acl = list(&["192.0.2.0/24", "2001:db8::/32"], &["192.0.2.0/24"]);
        assert!(!acl.allows(ip("192.0.2.1")));
        assert!(acl.allows(ip("2001:db8::5")));
        assert!(!acl.allows(ip("2001:db9::5")));
        assert!(!list(&[], &[]).allows(ip("127.0.0.1")));
    }

    #[test]
    fn ipv4_mapped_addresses_match_as_ipv4_and_open_lists_are_recognised() {
        let acl = list(&["127.0.0.1/32"], &[]);
        assert!(acl.allows(ip("::ffff:127.0.0.1")));
        assert!(!acl.allows(ip("127.0.0.2")));
        let v4 = list(&["0.0.0.0/0"], &[]);
        assert!(v4.is_open());
        assert!(v4.allows(ip("203.0.113.9")));
        assert!(!v4.allows(ip("2001:db8::1")), "0.0.0.0/0 is IPv4 only");
        let all = list(&["::/0"], &["203.0.113.0/24"]);
        assert!(all.is_open());
        assert!(all.allows(ip("2001:db8::1")) && all.allows(ip("198.51.100.1")));
        assert!(!all.allows(ip("203.0.113.9")));
    }

    #[test]
    fn one_lookup_per_distinct_length() {
        let acl = list(
            &["10.0.0.0/8", "11.0.0.0/8", "12.0.0.0/8"],
            &["10.1.0.0/16"],
        );
        assert_eq!(acl.lengths(), 2);
        assert!(acl.allows(ip("12.9.9.9")) && acl.allows(ip("11.0.0.1")));
        assert!(!acl.allows(ip("13.0.0.1")));
    }
}
