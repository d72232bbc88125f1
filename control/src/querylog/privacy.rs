//! What a query-log entry keeps of its client: the client's groups (and so its privacy mode
//! and retention), and the mode applied to the address, port and client ID.
//!
//! ```text
//! (address, client ID) ─▶ GroupTable::resolve ─▶ group recorded, privacy (strictest of the groups)
//!                        ─▶ Pseudonyms::apply ─▶ ClientView, port, client ID as kept
//! ```
//!
//! Group membership follows the policy index's rule (`kudurru_core::policy::index`): a client ID
//! some group lists decides alone; otherwise every group whose prefixes hold the address;
//! otherwise the built-in `default`, which follows `querylog.privacy` and `querylog.retention`.
//! A group without `spec.queryLog` settings follows them too. A client in several groups gets
//! the strictest privacy of them; the group recorded with the entry is the one with the
//! shortest retention (first by name on a tie), so pruning by the recorded group keeps the
//! client's entries no longer than its shortest retention.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kudurru_core::Prefix;
use kudurru_core::policy::{ClientGroupSpec, DEFAULT_GROUP};
use kudurru_core::querylog::Privacy;
use kudurru_storage::querylog::Retention;
use ring::hmac;

use super::ClientView;

/// IPv4 addresses keep this many bits under `truncate`.
pub const TRUNCATE_V4_BITS: u8 = 24;
/// IPv6 addresses keep this many bits under `truncate`.
pub const TRUNCATE_V6_BITS: u8 = 48;

/// The global settings the groups fall back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// `querylog.privacy`.
    pub privacy: Privacy,
    /// `querylog.retention` (zero: forever).
    pub retention: Duration,
}

/// One enabled group as the query log sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    name: Arc<str>,
    clients: Vec<Prefix>,
    client_ids: Vec<String>,
    privacy: Option<Privacy>,
    retention: Option<Duration>,
}

/// Where a client belongs, for the query log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The group recorded with the entry.
    pub group: Arc<str>,
    /// The privacy applied.
    pub privacy: Privacy,
}

/// The enabled client groups with their query-log settings, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTable {
    defaults: Defaults,
    groups: Vec<Group>,
    default_group: Arc<str>,
}

impl GroupTable {
    /// The table of `groups` (enabled ClientGroups; one named `default` is ignored, as the
    /// policy index ignores it) over `defaults`.
    pub fn new<'a>(
        groups: impl IntoIterator<Item = (&'a str, &'a ClientGroupSpec)>,
        defaults: Defaults,
    ) -> Self {
        let mut groups: Vec<Group> = groups
            .into_iter()
            .filter(|(name, _)| *name != DEFAULT_GROUP)
            .map(|(name, spec)| Group {
                name: name.into(),
                clients: spec.clients.clone(),
                client_ids: spec
                    .client_ids
                    .iter()
                    .map(|id| id.to_ascii_lowercase())
                    .collect(),
                privacy: spec.query_log.privacy,
                retention: spec.query_log.retention,
            })
            .collect();
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        Self {
            defaults,
            groups,
            default_group: DEFAULT_GROUP.into(),
        }
    }

    /// The global settings.
    pub fn defaults(&self) -> Defaults {
        self.defaults
    }

    /// The privacy settings (global and per group): a change of any of them rotates the
    /// pseudonym key.
    pub fn privacy_settings(&self) -> Vec<(&str, Option<Privacy>)> {
        let mut out = vec![("", Some(self.defaults.privacy))];
        out.extend(self.groups.iter().map(|g| (&*g.name, g.privacy)));
        out
    }

    /// The group recorded and the privacy applied for `client` (and its client ID, empty
    /// when none).
    pub fn resolve(&self, client: IpAddr, client_id: &str) -> Resolved {
        let by_id = !client_id.is_empty()
            && self.groups.iter().any(|g| {
                g.client_ids
                    .iter()
                    .any(|id| id.eq_ignore_ascii_case(client_id))
            });
        let member = |g: &&Group| {
            if by_id {
                g.client_ids
                    .iter()
                    .any(|id| id.eq_ignore_ascii_case(client_id))
            } else {
                g.clients.iter().any(|p| p.contains(client))
            }
        };
        let mut privacy: Option<Privacy> = None;
        let mut recorded: Option<(&Group, Duration)> = None;
        for group in self.groups.iter().filter(member) {
            let mode = group.privacy.unwrap_or(self.defaults.privacy);
            privacy = Some(privacy.map_or(mode, |p| p.strictest(mode)));
            let retention = forever_last(group.retention.unwrap_or(self.defaults.retention));
            if recorded.is_none_or(|(_, shortest)| retention < shortest) {
                recorded = Some((group, retention));
            }
        }
        match (recorded, privacy) {
            (Some((group, _)), Some(privacy)) => Resolved {
                group: group.name.clone(),
                privacy,
            },
            _ => Resolved {
                group: self.default_group.clone(),
                privacy: self.defaults.privacy,
            },
        }
    }

    /// What the pruning applies: the global age and size, and each group's own age.
    pub fn retention(&self, max_bytes: u64) -> Retention {
        Retention {
            max_age_ns: nanos(self.defaults.retention),
            group_max_age_ns: self
                .groups
                .iter()
                .filter_map(|g| Some((g.name.to_string(), nanos(g.retention?))))
                .collect(),
            max_bytes,
        }
    }
}

/// Zero (kept forever) sorts after every real age.
fn forever_last(retention: Duration) -> Duration {
    if retention.is_zero() {
        Duration::MAX
    } else {
        retention
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The pseudonym key: random, never stored, replaced every `querylog.pseudonymRotation` and
/// whenever a privacy setting changes (so pseudonyms of two periods cannot be linked).
pub struct Pseudonyms {
    key: hmac::Key,
    /// Bumped at each rotation (caches of rendered clients key on it).
    generation: u64,
}

impl std::fmt::Debug for Pseudonyms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pseudonyms")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// A client as an entry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The address as the mode keeps it.
    pub client: ClientView,
    /// The port (0 unless `full`).
    pub port: u16,
    /// The client ID as the mode keeps it (empty for `none` and `omit`; a pseudonym under
    /// `pseudonymize`).
    pub client_id: String,
}

impl Pseudonyms {
    /// A fresh random key.
    pub fn new() -> Self {
        Self {
            key: random_key(),
            generation: 0,
        }
    }

    /// Replaces the key with a fresh random one.
    pub fn rotate(&mut self) {
        self.key = random_key();
        self.generation += 1;
    }

    /// How many times the key was replaced.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// `p-` and 16 hex digits of HMAC-SHA256(key, domain ‖ bytes).
    fn pseudonym(&self, domain: u8, bytes: &[u8]) -> String {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(&[domain]);
        context.update(bytes);
        let tag = context.sign();
        let mut out = String::with_capacity(18);
        out.push_str("p-");
        for byte in tag.as_ref().iter().take(8) {
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        out
    }

    /// `client` (address and port) and `client_id` under `privacy`.
    pub fn apply(&self, privacy: Privacy, client: IpAddr, port: u16, client_id: &str) -> Kept {
        match privacy {
            Privacy::Full => Kept {
                client: ClientView::Full(client),
                port,
                client_id: client_id.to_owned(),
            },
            Privacy::Truncate => {
                let bits = if is_v4(client) {
                    TRUNCATE_V4_BITS
                } else {
                    TRUNCATE_V6_BITS
                };
                let (network, length) = Prefix::containing(client, bits).parts();
                Kept {
                    client: ClientView::Truncated(network, length),
                    port: 0,
                    client_id: client_id.to_owned(),
                }
            }
            Privacy::Pseudonymize => {
                // The canonical form: an IPv4-mapped IPv6 address is its IPv4 address.
                let octets = match client {
                    IpAddr::V4(v4) => v4.octets().to_vec(),
                    IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                        Some(v4) => v4.octets().to_vec(),
                        None => v6.octets().to_vec(),
                    },
                };
                Kept {
                    client: ClientView::Pseudonym(self.pseudonym(b'a', &octets)),
                    port: 0,
                    client_id: if client_id.is_empty() {
                        String::new()
                    } else {
                        self.pseudonym(b'i', client_id.to_ascii_lowercase().as_bytes())
                    },
                }
            }
            Privacy::None | Privacy::Omit => Kept {
                client: ClientView::Hidden,
                port: 0,
                client_id: String::new(),
            },
        }
    }
}

impl Default for Pseudonyms {
    fn default() -> Self {
        Self::new()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn is_v4(client: IpAddr) -> bool {
    match client {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
    }
}

fn random_key() -> hmac::Key {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    hmac::Key::new(hmac::HMAC_SHA256, &bytes)
}

#[cfg(test)]
mod tests {
    use kudurru_core::policy::GroupQueryLog;

    use super::*;

    fn spec(
        clients: &[&str],
        ids: &[&str],
        privacy: Option<Privacy>,
        days: Option<u64>,
    ) -> ClientGroupSpec {
        ClientGroupSpec {
            clients: clients.iter().map(|c| c.parse().unwrap()).collect(),
            client_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
            query_log: GroupQueryLog {
                privacy,
                retention: days.map(|d| Duration::from_secs(d * 86_400)),
            },
        }
    }

    const DEFAULTS: Defaults = Defaults {
        privacy: Privacy::Full,
        retention: Duration::from_secs(7 * 86_400),
    };

    fn table() -> GroupTable {
        let groups = [
            ("lab", spec(&["127.0.0.0/8"], &[], None, Some(30))),
            (
                "kids",
                spec(
                    &["127.0.0.2"],
                    &["tablet"],
                    Some(Privacy::Pseudonymize),
                    Some(1),
                ),
            ),
            (
                "guests",
                spec(&["127.0.0.3", "::1"], &[], Some(Privacy::Truncate), None),
            ),
            (
                "hidden",
                spec(&["127.0.0.4"], &[], Some(Privacy::Omit), Some(0)),
            ),
            (
                "default",
                spec(&["0.0.0.0/0"], &[], Some(Privacy::Omit), None),
            ),
        ];
        GroupTable::new(groups.iter().map(|(n, s)| (*n, s)), DEFAULTS)
    }

    fn resolve(t: &GroupTable, client: &str, id: &str) -> (String, Privacy) {
        let r = t.resolve(client.parse().unwrap(), id);
        (r.group.to_string(), r.privacy)
    }

    #[test]
    fn several_groups_give_the_strictest_privacy_and_record_the_shortest_retention() {
        let t = table();
        // lab (full, 30d) and kids (pseudonymize, 1d).
        assert_eq!(
            resolve(&t, "127.0.0.2", ""),
            ("kids".into(), Privacy::Pseudonymize)
        );
        // lab (full, 30d) and guests (truncate, the global 7d).
        assert_eq!(
            resolve(&t, "127.0.0.3", ""),
            ("guests".into(), Privacy::Truncate)
        );
        // lab (30d) and hidden (omit, kept forever): the 30 days are shorter.
        assert_eq!(resolve(&t, "127.0.0.4", ""), ("lab".into(), Privacy::Omit));
        assert_eq!(resolve(&t, "127.0.0.9", ""), ("lab".into(), Privacy::Full));
        // No group: the built-in default (a ClientGroup named default is ignored).
        assert_eq!(
            resolve(&t, "192.0.2.1", ""),
            ("default".into(), Privacy::Full)
        );
        // A client ID a group lists decides alone, in any case.
        assert_eq!(
            resolve(&t, "192.0.2.1", "Tablet"),
            ("kids".into(), Privacy::Pseudonymize)
        );
        assert_eq!(
            resolve(&t, "127.0.0.3", "unknown"),
            ("guests".into(), Privacy::Truncate)
        );
        let r = t.retention(1 << 30);
        assert_eq!(r.max_age_ns, 7 * 86_400 * 1_000_000_000);
        assert_eq!(
            r.group_max_age_ns.get("kids"),
            Some(&(86_400 * 1_000_000_000))
        );
        assert_eq!(r.group_max_age_ns.get("hidden"), Some(&0));
        assert_eq!(r.group_max_age_ns.get("guests"), None);
        assert_eq!(r.max_bytes, 1 << 30);
    }

    #[test]
    fn each_mode_keeps_what_it_says() {
        let mut p = Pseudonyms::new();
        let v4: IpAddr = "192.0.2.77".parse().unwrap();
        let v6: IpAddr = "2001:db8:1:2:3::9".parse().unwrap();
        let full = p.apply(Privacy::Full, v4, 5353, "kids");
        assert_eq!(
            (full.client.render(), full.port, full.client_id.as_str()),
            ("192.0.2.77".into(), 5353, "kids")
        );
        let cut = p.apply(Privacy::Truncate, v4, 5353, "kids");
        assert_eq!((cut.client.render(), cut.port), ("192.0.2.0/24".into(), 0));
        let cut = p.apply(Privacy::Truncate, v6, 5353, "");
        assert_eq!(cut.client.render(), "2001:db8:1::/48");
        let mapped: IpAddr = "::ffff:192.0.2.77".parse().unwrap();
        assert_eq!(
            p.apply(Privacy::Truncate, mapped, 1, "").client.render(),
            "192.0.2.0/24"
        );
        let a = p.apply(Privacy::Pseudonymize, v4, 5353, "kids");
        let rendered = a.client.render();
        assert!(
            rendered.starts_with("p-") && rendered.len() == 18,
            "{rendered}"
        );
        assert!(rendered[2..].bytes().all(|b| HEX.contains(&b)));
        assert!(a.client_id.starts_with("p-") && a.client_id != rendered);
        assert_eq!(a.port, 0);
        // Stable within a key, the same for the IPv4-mapped form, different per address.
        assert_eq!(p.apply(Privacy::Pseudonymize, v4, 1, "kids"), a);
        assert_eq!(p.apply(Privacy::Pseudonymize, mapped, 0, "KIDS"), a);
        assert_ne!(p.apply(Privacy::Pseudonymize, v6, 0, "").client, a.client);
        // A new key: no link to the old pseudonyms.
        p.rotate();
        assert_eq!(p.generation(), 1);
        assert_ne!(
            p.apply(Privacy::Pseudonymize, v4, 0, "kids").client,
            a.client
        );
        for mode in [Privacy::None, Privacy::Omit] {
            let k = p.apply(mode, v4, 5353, "kids");
            assert_eq!(
                (k.client, k.port, k.client_id.as_str()),
                (ClientView::Hidden, 0, "")
            );
        }
    }
}
