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
///
/// Entry layout (parallel arrays, sorted by `(hash, payload)`):
///
/// ```text
/// hashes:    u64   keyed hash of the rule's lowercase wire name (suffix chain, see below)
/// payloads:  u16   bits 0..11 list slot (MAX_LISTS = 2048), bits 11..13 scope
///                  (0 Exact, 1 Subtree, 2 Below), bits 13..16 action (0 Deny, 1 Allow,
///                  2 Nxdomain, 3 Nodata, 4 Drop, 5 LocalData)
/// directory: u32   per bucket of the hash's top `bits` bits, the index of its first entry
///                  (2^bits + 1 of them, about one bucket per 4 entries: ~1 byte per entry)
/// ```
///
/// The hash of a name is built from the root label leftwards: `h(root) = H(seed)`,
/// `h(label.parent) = H(h(parent), label)` (folded 64×64-bit multiplies with seed-derived
/// multipliers, as foldhash and wyhash mix), so hashing a query name once yields every
/// suffix's hash. Collisions: two different names share a 64-bit hash with odds 2^-64 per
/// pair; a lookup tests at most ~5 suffixes against N entries, so with a 1M-entry list a
/// wrong match needs about 2^64 / (5 × 10^6) ≈ 3.7 × 10^12 queries (a century at 1000 qps).
/// The seed is random per process, so a peer cannot search for colliding names offline.
#[derive(Clone, Default)]
pub struct Matcher {
    seed: u64,
    hashes: Box<[u64]>,
    payloads: Box<[u16]>,
    directory: Box<[u32]>,
    /// How many top hash bits index the directory (0: one bucket).
    bits: u32,
    /// Unique entries per list slot (indexed by slot; shorter when high slots are unused).
    counts: Box<[u32]>,
    /// RPZ local data: `(list, hash, scope bits, index into that list's local data)`, sorted;
    /// rare, so kept apart from the payloads.
    local_index: Box<[(u16, u64, u8, u32)]>,
    /// Each list's local-data sets, by slot.
    local_data: Box<[(u16, std::sync::Arc<[LocalData]>)]>,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("entries", &self.hashes.len())
            .field("bits", &self.bits)
            .field("local_data", &self.local_index.len())
            .finish_non_exhaustive()
    }
}

const LIST_BITS: u16 = 0x07ff;
const SCOPE_SHIFT: u16 = 11;
const ACTION_SHIFT: u16 = 13;

fn scope_bits(scope: Scope) -> u16 {
    match scope {
        Scope::Exact => 0,
        Scope::Subtree => 1,
        Scope::Below => 2,
    }
}

fn scope_of(payload: u16) -> Scope {
    match (payload >> SCOPE_SHIFT) & 0x3 {
        0 => Scope::Exact,
        1 => Scope::Subtree,
        _ => Scope::Below,
    }
}

fn action_bits(action: Action) -> u16 {
    match action {
        Action::Deny => 0,
        Action::Allow => 1,
        Action::Nxdomain => 2,
        Action::Nodata => 3,
        Action::Drop => 4,
        Action::LocalData(_) => 5,
    }
}

/// The action of a payload (a local-data index is filled in from the side table).
fn action_of(payload: u16) -> Action {
    match payload >> ACTION_SHIFT {
        0 => Action::Deny,
        1 => Action::Allow,
        2 => Action::Nxdomain,
        3 => Action::Nodata,
        4 => Action::Drop,
        _ => Action::LocalData(u32::MAX),
    }
}

fn payload(list: ListId, scope: Scope, action: Action) -> u16 {
    (list.0 & LIST_BITS)
        | (scope_bits(scope) << SCOPE_SHIFT)
        | (action_bits(action) << ACTION_SHIFT)
}

/// Suffixes looked up together (a name with more labels takes several batches).
const BATCH: usize = 16;

/// Suffix hashes waiting for their lookup, root first; on the stack.
#[derive(Default)]
struct Batch {
    hashes: [u64; BATCH],
    /// Where each suffix starts in the query name (at most 254).
    ats: [u8; BATCH],
    len: usize,
}

/// The best allow and deny found so far.
#[derive(Default)]
struct Verdict {
    allow: Option<Hit>,
    deny: Option<Hit>,
}

/// Most labels a wire name has (255 bytes of one-byte labels).
const MAX_LABELS: usize = 128;

/// Odd constants (the fractional parts of π, e and √2), spread into the seed.
const K: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0xb7e1_5162_8aed_2a6b,
    0x6a09_e667_f3bc_c909,
    0x1319_8a2e_0370_7344,
];

/// The high and low halves of a full 64×64 product folded together (foldhash's and wyhash's
/// mixing step).
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The per-matcher keys derived from its seed: never zero, so no multiply degenerates.
#[inline(always)]
fn keys(seed: u64) -> [u64; 3] {
    [
        fold(seed ^ K[0], K[1]) | 1,
        fold(seed ^ K[2], K[3]) | 1,
        fold(seed ^ K[3], K[0]) | 1,
    ]
}

/// The hash of the root name.
#[inline(always)]
fn root_hash(keys: &[u64; 3]) -> u64 {
    fold(keys[0], keys[1])
}

/// The hash of `label.parent` from the parent's hash: the label in 8-byte words (the last
/// zero-padded) and its length, each folded in with a seed-derived multiplier.
#[inline(always)]
fn label_hash(keys: &[u64; 3], parent: u64, label: &[u8]) -> u64 {
    let mut hash = fold(parent ^ label.len() as u64, keys[0]);
    let mut words = label.chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        hash = fold(hash ^ u64::from_le_bytes(bytes), keys[1]);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut bytes = [0u8; 8];
        bytes[..rest.len()].copy_from_slice(rest);
        hash = fold(hash ^ u64::from_le_bytes(bytes), keys[1]);
    }
    fold(hash, keys[2])
}

/// Calls `visit(suffix_at, hash)` for every suffix of the wire name `name`, from the root to
/// the whole name; stops early when `visit` returns false. A malformed name visits nothing.
#[inline]
fn for_each_suffix(seed: u64, name: &[u8], mut visit: impl FnMut(usize, u64) -> bool) {
    let mut starts = [0u8; MAX_LABELS];
    let mut labels = 0;
    let mut pos = 0usize;
    loop {
        let Some(&len) = name.get(pos) else {
            return;
        };
        if len == 0 {
            break;
        }
        if len > 63 || labels == MAX_LABELS || pos > 255 {
            return;
        }
        starts[labels] = pos as u8;
        labels += 1;
        pos += 1 + usize::from(len);
    }
    if pos + 1 != name.len() {
        return;
    }
    let keys = keys(seed);
    let mut hash = root_hash(&keys);
    if !visit(pos, hash) {
        return;
    }
    for &start in starts[..labels].iter().rev() {
        let start = usize::from(start);
        let len = usize::from(name[start]);
        hash = label_hash(&keys, hash, &name[start + 1..start + 1 + len]);
        if !visit(start, hash) {
            return;
        }
    }
}

/// The hash of a whole wire name (`None` when malformed).
fn name_hash(seed: u64, name: &[u8]) -> Option<u64> {
    let mut whole = None;
    for_each_suffix(seed, name, |at, hash| {
        if at == 0 {
            whole = Some(hash);
        }
        true
    });
    whole
}

impl Matcher {
    /// An empty matcher whose names are hashed with `seed` (one per process, random, so a peer
    /// cannot aim for collisions).
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }

    /// A matcher with `list`'s entries replaced by `parsed`'s rules (under `mode`), every other
    /// list's entries shared in the same order.
    ///
    /// A slot at or past [`MAX_LISTS`] cannot be encoded: the result is the matcher without
    /// that list (its [`Self::entries`] stay 0).
    pub fn with_list(&self, list: ListId, mode: ListMode, parsed: &ParsedList) -> Self {
        if usize::from(list.0) >= MAX_LISTS {
            return self.without_list(list);
        }
        let mut fresh: Vec<(u64, u16)> = Vec::with_capacity(parsed.rules.len());
        let mut local: Vec<(u16, u64, u8, u32)> = Vec::new();
        for rule in parsed.rules.iter() {
            let Some(hash) = name_hash(self.seed, &rule.name) else {
                continue;
            };
            let action = match mode {
                ListMode::Allow => Action::Allow,
                ListMode::Deny => rule.action,
            };
            if let Action::LocalData(index) = action {
                local.push((list.0, hash, scope_bits(rule.scope) as u8, index));
            }
            fresh.push((hash, payload(list, rule.scope, action)));
        }
        fresh.sort_unstable();
        fresh.dedup();
        local.sort_unstable();
        local.dedup_by(|b, a| (a.0, a.1, a.2) == (b.0, b.1, b.2));

        let mut merged = self.merge_without(list, &fresh);
        merged.counts = counts_with(&self.counts, list, fresh.len());
        let mut local_index: Vec<_> = self
            .local_index
            .iter()
            .filter(|e| e.0 != list.0)
            .copied()
            .collect();
        let mut local_data: Vec<_> = self
            .local_data
            .iter()
            .filter(|e| e.0 != list.0)
            .cloned()
            .collect();
        if mode == ListMode::Deny && !local.is_empty() {
            local_index.extend(local);
            local_index.sort_unstable();
            local_data.push((list.0, parsed.local_data.clone().into()));
            local_data.sort_unstable_by_key(|e| e.0);
        }
        merged.local_index = local_index.into();
        merged.local_data = local_data.into();
        merged
    }

    /// A matcher without `list`'s entries.
    pub fn without_list(&self, list: ListId) -> Self {
        let mut merged = self.merge_without(list, &[]);
        merged.counts = counts_with(&self.counts, list, 0);
        merged.local_index = self
            .local_index
            .iter()
            .filter(|e| e.0 != list.0)
            .copied()
            .collect();
        merged.local_data = self
            .local_data
            .iter()
            .filter(|e| e.0 != list.0)
            .cloned()
            .collect();
        merged
    }

    /// The entries of every list but `list`, merged with `fresh` (sorted): one linear pass.
    fn merge_without(&self, list: ListId, fresh: &[(u64, u16)]) -> Self {
        let kept = self.hashes.len() - self.entries(list).min(self.hashes.len());
        let total = kept + fresh.len();
        let mut hashes = Vec::with_capacity(total);
        let mut payloads = Vec::with_capacity(total);
        let mut old = self
            .hashes
            .iter()
            .zip(self.payloads.iter())
            .filter(|(_, p)| **p & LIST_BITS != list.0)
            .map(|(h, p)| (*h, *p))
            .peekable();
        let mut new = fresh.iter().copied().peekable();
        loop {
            let next = match (old.peek(), new.peek()) {
                (Some(a), Some(b)) => {
                    if a <= b {
                        old.next()
                    } else {
                        new.next()
                    }
                }
                (Some(_), None) => old.next(),
                (None, Some(_)) => new.next(),
                (None, None) => break,
            };
            if let Some((h, p)) = next {
                hashes.push(h);
                payloads.push(p);
            }
        }
        let (bits, directory) = directory(&hashes);
        Self {
            seed: self.seed,
            hashes: hashes.into(),
            payloads: payloads.into(),
            directory,
            bits,
            counts: Box::default(),
            local_index: Box::default(),
            local_data: Box::default(),
        }
    }

    /// Entries of `list` (duplicates within a list counted once).
    pub fn entries(&self, list: ListId) -> usize {
        self.counts
            .get(usize::from(list.0))
            .map_or(0, |&c| c as usize)
    }

    /// Entries of all lists.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether no list has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the matcher holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        let local: usize = self
            .local_data
            .iter()
            .flat_map(|(_, sets)| sets.iter())
            .map(|set| {
                size_of::<LocalData>()
                    + set
                        .records
                        .iter()
                        .map(|(_, r)| size_of::<(u16, Box<[u8]>)>() + r.len())
                        .sum::<usize>()
            })
            .sum();
        self.hashes.len() * size_of::<u64>()
            + self.payloads.len() * size_of::<u16>()
            + self.directory.len() * size_of::<u32>()
            + self.counts.len() * size_of::<u32>()
            + self.local_index.len() * size_of::<(u16, u64, u8, u32)>()
            + self.local_data.len() * size_of::<(u16, std::sync::Arc<[LocalData]>)>()
            + local
    }

    /// The rule that decides `qname` (lowercase wire) for a client whose policies use lists as
    /// `roles` says (indexed by list; a list past its end is unused): any allow wins over any
    /// deny; otherwise the most specific deny (the longest matching name). No allocation.
    ///
    /// Between rules of the same name, the lowest list slot decides, and within a list the
    /// lowest action code (Deny, Allow, Nxdomain, Nodata, Drop, LocalData).
    ///
    /// The suffixes' hashes are computed first, then their directory entries read, then their
    /// buckets scanned, each step for all suffixes at once: the reads of different suffixes do
    /// not wait on each other, so the cache misses of a 5-label name overlap instead of adding
    /// up.
    pub fn lookup(&self, qname: &[u8], roles: &[Role]) -> Option<Hit> {
        if self.hashes.is_empty() {
            return None;
        }
        let mut batch = Batch::default();
        let mut verdict = Verdict::default();
        for_each_suffix(self.seed, qname, |at, hash| {
            batch.ats[batch.len] = at as u8;
            batch.hashes[batch.len] = hash;
            batch.len += 1;
            if batch.len == BATCH {
                self.scan(&batch, roles, &mut verdict);
                batch.len = 0;
            }
            true
        });
        self.scan(&batch, roles, &mut verdict);
        let hit = verdict.allow.or(verdict.deny)?;
        Some(match hit.action {
            Action::LocalData(_) => Hit {
                action: self.local_index(hit.list, qname, hit.suffix_at, hit.scope),
                ..hit
            },
            _ => hit,
        })
    }

    /// Looks up a batch of suffixes (root first) into `verdict`.
    #[inline]
    fn scan(&self, batch: &Batch, roles: &[Role], verdict: &mut Verdict) {
        let mut ranges = [(0u32, 0u32); BATCH];
        for (range, &hash) in ranges.iter_mut().zip(&batch.hashes[..batch.len]) {
            let bucket = bucket_of(hash, self.bits);
            *range = match (self.directory.get(bucket), self.directory.get(bucket + 1)) {
                (Some(&start), Some(&end)) => (start, end),
                _ => (0, 0),
            };
        }
        let suffixes = batch.hashes.iter().zip(&batch.ats).zip(&ranges);
        for ((&hash, &at), &(start, end)) in suffixes.take(batch.len) {
            let (at, start, end) = (usize::from(at), start as usize, end as usize);
            let Some(bucket) = self.hashes.get(start..end) else {
                continue;
            };
            for (offset, _) in bucket.iter().enumerate().filter(|(_, h)| **h == hash) {
                let p = self.payloads[start + offset];
                let list = ListId(p & LIST_BITS);
                let role = roles.get(usize::from(list.0)).copied().unwrap_or_default();
                let scope = scope_of(p);
                let applies = match scope {
                    Scope::Exact => at == 0,
                    Scope::Subtree => true,
                    Scope::Below => at > 0,
                };
                if role == Role::Unused || !applies {
                    continue;
                }
                let action = if role == Role::Allow {
                    Action::Allow
                } else {
                    action_of(p)
                };
                let hit = Hit {
                    list,
                    action,
                    scope,
                    suffix_at: at,
                };
                if action == Action::Allow {
                    // Suffixes come root first: a later allow is more specific; keep the
                    // most specific for the explanation, and any allow wins.
                    verdict.allow = Some(hit);
                    break;
                }
                // A later (longer) name is more specific; within one name the first wins.
                if verdict.deny.is_none_or(|d| d.suffix_at != at) {
                    verdict.deny = Some(hit);
                }
            }
        }
    }

    /// The local-data action of a hit, with its index (Nxdomain if the side table lacks it,
    /// which a matcher built by [`Self::with_list`] never does).
    fn local_index(&self, list: ListId, qname: &[u8], at: usize, scope: Scope) -> Action {
        let Some(hash) = qname.get(at..).and_then(|n| name_hash(self.seed, n)) else {
            return Action::Nxdomain;
        };
        let key = (list.0, hash, scope_bits(scope) as u8);
        match self
            .local_index
            .binary_search_by(|e| (e.0, e.1, e.2).cmp(&key))
        {
            Ok(i) => Action::LocalData(self.local_index[i].3),
            Err(_) => Action::Nxdomain,
        }
    }

    /// The RPZ local data of a hit whose action is [`Action::LocalData`].
    pub fn local_data(&self, hit: &Hit) -> Option<&LocalData> {
        let Action::LocalData(index) = hit.action else {
            return None;
        };
        let at = self
            .local_data
            .binary_search_by_key(&hit.list.0, |e| e.0)
            .ok()?;
        self.local_data[at].1.get(index as usize)
    }
}

/// The per-slot counts with `list`'s set to `count`.
fn counts_with(counts: &[u32], list: ListId, count: usize) -> Box<[u32]> {
    let slot = usize::from(list.0);
    let mut out = counts.to_vec();
    if slot < MAX_LISTS {
        if out.len() <= slot {
            out.resize(slot + 1, 0);
        }
        out[slot] = u32::try_from(count).unwrap_or(u32::MAX);
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out.into()
}

/// The bucket directory of sorted `hashes`: about four entries per bucket.
fn directory(hashes: &[u64]) -> (u32, Box<[u32]>) {
    if hashes.is_empty() {
        return (0, Box::default());
    }
    let target = hashes.len().div_ceil(4).max(1);
    let bits = usize::BITS - (target - 1).leading_zeros();
    let bits = bits.min(32);
    let buckets = 1usize << bits;
    let mut directory = Vec::with_capacity(buckets + 1);
    let mut at = 0usize;
    for bucket in 0..buckets {
        while at < hashes.len() && bucket_of(hashes[at], bits) < bucket {
            at += 1;
        }
        directory.push(at as u32);
    }
    directory.push(hashes.len() as u32);
    (bits, directory.into())
}

fn bucket_of(hash: u64, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        (hash >> (64 - bits)) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::blocklist::{LocalData, ParsedList, Rule};

    fn w(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for label in text.split('.').filter(|l| !l.is_empty()) {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
        out
    }

    fn list(rules: &[(&str, Scope, Action)]) -> ParsedList {
        ParsedList {
            rules: rules
                .iter()
                .map(|&(name, scope, action)| Rule {
                    name: w(name).into(),
                    scope,
                    action,
                })
                .collect(),
            ..ParsedList::default()
        }
    }

    const DENY: [Role; 4] = [Role::Deny; 4];

    fn verdict(m: &Matcher, name: &str, roles: &[Role]) -> Option<(u16, Action, usize)> {
        m.lookup(&w(name), roles)
            .map(|h| (h.list.0, h.action, h.suffix_at))
    }

    #[test]
    fn subtree_exact_and_below_rules_cover_what_they_say() {
        let m = Matcher::new(7).with_list(
            ListId(0),
            ListMode::Deny,
            &list(&[
                ("sub.example", Scope::Subtree, Action::Deny),
                ("exact.example", Scope::Exact, Action::Deny),
                ("below.example", Scope::Below, Action::Nxdomain),
            ]),
        );
        assert_eq!(
            verdict(&m, "sub.example", &DENY),
            Some((0, Action::Deny, 0))
        );
        assert_eq!(
            verdict(&m, "a.b.sub.example", &DENY),
            Some((0, Action::Deny, 4))
        );
        assert_eq!(
            verdict(&m, "exact.example", &DENY),
            Some((0, Action::Deny, 0))
        );
        assert_eq!(verdict(&m, "a.exact.example", &DENY), None);
        assert_eq!(verdict(&m, "below.example", &DENY), None);
        assert_eq!(
            verdict(&m, "a.below.example", &DENY),
            Some((0, Action::Nxdomain, 2))
        );
        assert_eq!(verdict(&m, "example", &DENY), None);
        assert_eq!(verdict(&m, "notsub.example", &DENY), None);
        // Malformed names match nothing, and never panic.
        for bad in [&b""[..], b"\x03ab", b"\x01a\x00\x00", b"\xc0\x0c", b"\x40"] {
            assert_eq!(m.lookup(bad, &DENY), None);
        }
    }

    #[test]
    fn an_allow_anywhere_beats_any_deny_and_otherwise_the_most_specific_deny_decides() {
        let m = Matcher::new(1)
            .with_list(
                ListId(0),
                ListMode::Deny,
                &list(&[
                    ("example", Scope::Subtree, Action::Deny),
                    ("ok.example", Scope::Subtree, Action::Allow),
                ]),
            )
            .with_list(
                ListId(2),
                ListMode::Deny,
                &list(&[
                    ("deep.ok.example", Scope::Exact, Action::Nodata),
                    ("x.example", Scope::Exact, Action::Drop),
                ]),
            );
        // The allow for ok.example covers deep.ok.example, whose deny is more specific.
        assert_eq!(
            verdict(&m, "deep.ok.example", &DENY),
            Some((0, Action::Allow, 5))
        );
        assert_eq!(verdict(&m, "x.example", &DENY), Some((2, Action::Drop, 0)));
        assert_eq!(verdict(&m, "y.example", &DENY), Some((0, Action::Deny, 2)));
    }

    #[test]
    fn roles_decide_which_lists_count_and_an_allow_role_allows() {
        let deny = list(&[("ads.example", Scope::Subtree, Action::Deny)]);
        let m = Matcher::new(3)
            .with_list(ListId(0), ListMode::Deny, &deny)
            .with_list(
                ListId(1),
                ListMode::Deny,
                &list(&[("a.ads.example", Scope::Exact, Action::Deny)]),
            );
        assert_eq!(
            verdict(&m, "a.ads.example", &[Role::Unused, Role::Unused]),
            None
        );
        assert_eq!(
            verdict(&m, "a.ads.example", &[]),
            None,
            "a short roles slice means unused"
        );
        assert_eq!(
            verdict(&m, "a.ads.example", &[Role::Deny, Role::Allow]),
            Some((1, Action::Allow, 0))
        );
        assert_eq!(
            verdict(&m, "b.ads.example", &[Role::Deny, Role::Allow]),
            Some((0, Action::Deny, 2))
        );
        // An allow-mode list's rules allow whatever they say.
        let m = m.with_list(
            ListId(1),
            ListMode::Allow,
            &list(&[("ads.example", Scope::Exact, Action::Deny)]),
        );
        assert_eq!(
            verdict(&m, "ads.example", &DENY),
            Some((1, Action::Allow, 0))
        );
    }

    #[test]
    fn replacing_or_removing_a_list_leaves_the_others_and_duplicates_count_once() {
        let a = list(&[
            ("one.example", Scope::Exact, Action::Deny),
            ("one.example", Scope::Exact, Action::Deny),
            ("two.example", Scope::Exact, Action::Deny),
        ]);
        let b = list(&[
            ("two.example", Scope::Exact, Action::Deny),
            ("three.example", Scope::Exact, Action::Deny),
        ]);
        let m = Matcher::new(9)
            .with_list(ListId(0), ListMode::Deny, &a)
            .with_list(ListId(5), ListMode::Deny, &b);
        assert_eq!(m.entries(ListId(0)), 2);
        assert_eq!(m.entries(ListId(5)), 2);
        assert_eq!(m.len(), 4);
        let roles = [Role::Deny; 6];
        assert_eq!(
            verdict(&m, "two.example", &roles),
            Some((0, Action::Deny, 0))
        );
        let m = m.with_list(
            ListId(0),
            ListMode::Deny,
            &list(&[("four.example", Scope::Exact, Action::Deny)]),
        );
        assert_eq!(m.entries(ListId(0)), 1);
        assert_eq!(verdict(&m, "one.example", &roles), None);
        assert_eq!(
            verdict(&m, "two.example", &roles),
            Some((5, Action::Deny, 0))
        );
        assert_eq!(
            verdict(&m, "four.example", &roles),
            Some((0, Action::Deny, 0))
        );
        let m = m.without_list(ListId(5));
        assert_eq!((m.len(), m.entries(ListId(5))), (1, 0));
        assert_eq!(verdict(&m, "three.example", &roles), None);
        let m = m.without_list(ListId(0));
        assert!(m.is_empty());
        assert_eq!(verdict(&m, "four.example", &roles), None);
        // A slot past MAX_LISTS cannot be held.
        let m = m.with_list(ListId(MAX_LISTS as u16), ListMode::Deny, &a);
        assert!(m.is_empty());
    }

    #[test]
    fn rpz_local_data_is_found_through_the_side_table() {
        let mut parsed = list(&[
            ("walled.example", Scope::Exact, Action::LocalData(0)),
            ("walled.example", Scope::Below, Action::LocalData(1)),
        ]);
        parsed.local_data = vec![
            LocalData {
                records: vec![(1, vec![192, 0, 2, 1].into())],
            },
            LocalData {
                records: vec![(1, vec![192, 0, 2, 2].into())],
            },
        ];
        let m = Matcher::new(4).with_list(ListId(3), ListMode::Deny, &parsed);
        let hit = m.lookup(&w("walled.example"), &DENY).unwrap();
        assert_eq!(hit.action, Action::LocalData(0));
        assert_eq!(
            m.local_data(&hit).unwrap().records[0].1.as_ref(),
            &[192, 0, 2, 1]
        );
        let hit = m.lookup(&w("a.walled.example"), &DENY).unwrap();
        assert_eq!(hit.action, Action::LocalData(1));
        assert_eq!(
            m.local_data(&hit).unwrap().records[0].1.as_ref(),
            &[192, 0, 2, 2]
        );
        let m = m.without_list(ListId(3));
        assert!(m.local_data(&hit).is_none());
    }

    #[test]
    fn a_large_list_stays_within_twelve_bytes_an_entry_and_finds_every_name() {
        let names: Vec<String> = (0..100_000)
            .map(|i| format!("host{i}.tracker{}.example", i % 997))
            .collect();
        let parsed = ParsedList {
            rules: names
                .iter()
                .map(|n| Rule {
                    name: w(n).into(),
                    scope: Scope::Exact,
                    action: Action::Deny,
                })
                .collect(),
            ..ParsedList::default()
        };
        let m = Matcher::new(0x5eed).with_list(ListId(1), ListMode::Deny, &parsed);
        assert_eq!(m.entries(ListId(1)), names.len());
        let per_entry = m.heap_bytes() as f64 / names.len() as f64;
        assert!(per_entry <= 12.0, "{per_entry} bytes an entry");
        for name in names.iter().step_by(97) {
            assert!(m.lookup(&w(name), &DENY).is_some(), "{name}");
        }
        assert!(m.lookup(&w("host1.tracker2.example"), &DENY).is_none());
        // Another seed hashes differently but finds the same.
        let other = Matcher::new(1).with_list(ListId(1), ListMode::Deny, &parsed);
        assert_ne!(other.hashes, m.hashes);
        assert!(other.lookup(&w(&names[5]), &DENY).is_some());
    }
}
