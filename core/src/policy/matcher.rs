//! The compiled matcher: every enabled list's rules in one immutable structure, one copy for
//! all cores. Suffix matching on labels: a query name is looked up once per suffix (the full
//! name, then each parent), so `Subtree` rules for `example.com` cover `ads.example.com`.
//!
//! Layout (sans-IO, measured in docs/benchmarks.md "Block lists"): entries are 64-bit keyed
//! hashes of lowercase wire names, sorted, with a 16-bit payload each (list, scope, action) in
//! a parallel array, and a directory of bucket starts indexed by the hash's top bits, so a
//! lookup is one directory read and a scan of a few neighbouring hashes: about 11 bytes per
//! entry, no per-entry allocation. Replacing one list filters the old arrays and merges the
//! list's sorted entries in, linear in the total, so a refresh of one list never re-sorts the
//! others.

use super::blocklist::{Action, LocalData, ParsedList, Scope};

/// A list's slot in the matcher (chosen by the control thread, stable across refreshes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListId(pub u16);

/// Most lists one matcher holds (payload bits).
pub const MAX_LISTS: usize = 2048;

/// What a list is (`BlockList.spec.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListMode {
    /// Its rules block (adblock `@@` exceptions and RPZ passthru still allow).
    #[default]
    Deny,
    /// Every rule allows.
    Allow,
}

/// How a client's active policies use a list: what a lookup consults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not used: its rules are ignored.
    #[default]
    Unused,
    /// In a policy's `denyLists`: its rules act as written.
    Deny,
    /// In a policy's `allowLists`: any match allows.
    Allow,
}

/// The rule that decided a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// The list it is in.
    pub list: ListId,
    /// What it does for this client (Allow for any match in an allow role).
    pub action: Action,
    /// Which names it covers.
    pub scope: Scope,
    /// Where in the query's wire name the rule's name starts (0: the name itself).
    pub suffix_at: usize,
}

/// The compiled lists.
#[derive(Debug, Clone, Default)]
pub struct Matcher {}

impl Matcher {
    /// An empty matcher whose names are hashed with `seed` (one per process, random, so a peer
    /// cannot aim for collisions).
    pub fn new(seed: u64) -> Self {
        let _ = seed;
        unimplemented!("Matcher::new")
    }

    /// A matcher with `list`'s entries replaced by `parsed`'s rules (under `mode`), every other
    /// list's entries shared in the same order.
    pub fn with_list(&self, list: ListId, mode: ListMode, parsed: &ParsedList) -> Self {
        let _ = (list, mode, parsed);
        unimplemented!("Matcher::with_list")
    }

    /// A matcher without `list`'s entries.
    pub fn without_list(&self, list: ListId) -> Self {
        let _ = list;
        unimplemented!("Matcher::without_list")
    }

    /// Entries of `list` (duplicates within a list counted once).
    pub fn entries(&self, list: ListId) -> usize {
        let _ = list;
        unimplemented!("Matcher::entries")
    }

    /// Entries of all lists.
    pub fn len(&self) -> usize {
        unimplemented!("Matcher::len")
    }

    /// Whether no list has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the matcher holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        unimplemented!("Matcher::heap_bytes")
    }

    /// The rule that decides `qname` (lowercase wire) for a client whose policies use lists as
    /// `roles` says (indexed by list; a list past its end is unused): any allow wins over any
    /// deny; otherwise the most specific deny (the longest matching name). No allocation.
    pub fn lookup(&self, qname: &[u8], roles: &[Role]) -> Option<Hit> {
        let _ = (qname, roles);
        unimplemented!("Matcher::lookup")
    }

    /// The RPZ local data of a hit whose action is [`Action::LocalData`].
    pub fn local_data(&self, hit: &Hit) -> Option<&LocalData> {
        let _ = hit;
        unimplemented!("Matcher::local_data")
    }
}
