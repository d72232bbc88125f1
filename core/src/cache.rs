//! One core's cache shard: a hash index over a slot vector, evicted by CLOCK.
//!
//! CLOCK keeps the hot set: a hit sets the slot's reference bit; when the shard is full the hand
//! sweeps the slots, clears set bits and evicts the first slot that is unreferenced or expired.
//! One scan of cold names therefore cannot flush names that are being asked for (measured in
//! `benches/`: see docs/benchmarks.md). A shard is owned by one core and never locked.
//!
//! Serve-stale (RFC 8767) and prefetch live here as slot state, not as a second table:
//!
//! ```text
//!  stored ────────── refresh_at (9/10) ──── expires ─────────── expires + staleMaxAge
//!  │ hit              │ hit: asks for one refresh │ miss; the resolver    │ purged
//!  │                  │ (prefetch), once          │ may serve it stale   │
//! ```
//! Expired entries stay in their slots until purged or evicted, so the shard's capacity still
//! bounds them; the CLOCK hand reuses an expired slot before any fresh one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashTable;

use crate::{CacheKey, CachedAnswer};

/// Counters one shard keeps; the shell exports them as metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the shard.
    pub hits: u64,
    /// Lookups that found nothing fresh.
    pub misses: u64,
    /// Answers stored.
    pub inserts: u64,
    /// Fresh entries evicted to make room.
    pub evictions: u64,
    /// Expired entries dropped.
    pub expired: u64,
}

struct Slot {
    answer: Arc<CachedAnswer>,
    hash: u64,
    referenced: bool,
    /// A refresh of this answer was asked for (prefetch): not again for this answer.
    refreshing: bool,
    /// After a failed refresh of this expired answer: seconds after the answer was stored
    /// until which clients get it stale at once, without waiting for another try (RFC 8767
    /// §5's failure recheck timer); 0: none.
    quiet_until: u32,
}

/// A fresh hit ([`Cache::lookup`]).
pub struct Hit<'a> {
    /// The answer to serve.
    pub answer: &'a Arc<CachedAnswer>,
    /// The answer is in the last tenth of its lifetime and no refresh was asked for yet: the
    /// caller refreshes it in the background (prefetch). True at most once per stored answer.
    pub prefetch: bool,
}

/// An expired answer still within `cache.staleMaxAge` ([`Cache::stale`]).
pub struct Stale<'a> {
    /// The expired answer.
    pub answer: &'a Arc<CachedAnswer>,
    /// A refresh of it failed lately: serve it stale at once rather than wait for upstreams.
    pub quiet: bool,
}

/// A bounded map from [`CacheKey`] to shared [`CachedAnswer`]s.
pub struct Cache {
    index: HashTable<u32>,
    slots: Vec<Slot>,
    hand: usize,
    capacity: usize,
    hasher: foldhash::fast::RandomState,
    stats: CacheStats,
    /// Whether hits in the last tenth of a lifetime ask for a refresh (`cache.prefetch`).
    prefetch: bool,
    /// How long expired answers are kept for serving stale (0 with `cache.serveStale` off).
    stale_max_age: Duration,
}

impl Cache {
    /// An empty shard holding at most `capacity` answers (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            hand: 0,
            capacity: capacity.max(1),
            hasher: foldhash::fast::RandomState::default(),
            stats: CacheStats::default(),
            prefetch: false,
            stale_max_age: Duration::ZERO,
        }
    }

    /// Sets whether hits ask for prefetches and how long expired answers are kept (zero: they
    /// are reclaimed as soon as they expire).
    pub fn set_refresh_policy(&mut self, prefetch: bool, stale_max_age: Duration) {
        self.prefetch = prefetch;
        self.stale_max_age = stale_max_age;
    }

    #[inline]
    fn find(&self, key: &CacheKey) -> Option<usize> {
        let hash = key.hash_with(&self.hasher);
        let slots = &self.slots;
        self.index
            .find(hash, |&i| slots[i as usize].answer.matches(key))
            .map(|&i| i as usize)
    }

    /// The fresh answer for `key` at `now`, marking it recently used.
    pub fn get(&mut self, key: &CacheKey, now: Instant) -> Option<&Arc<CachedAnswer>> {
        self.lookup(key, now, false).map(|hit| hit.answer)
    }

    /// The fresh answer for `key` at `now`, marking it recently used, and whether the caller
    /// is to refresh it in the background (prefetch enabled, `prefetch` or the answer in the
    /// last tenth of its lifetime, no refresh asked for yet; the request is remembered).
    /// `prefetch` false asks only for the answer, as [`Self::get`].
    #[inline]
    pub fn lookup(&mut self, key: &CacheKey, now: Instant, prefetch: bool) -> Option<Hit<'_>> {
        let Some(i) = self.find(key) else {
            self.stats.misses += 1;
            return None;
        };
        let slot = &mut self.slots[i];
        if !slot.answer.is_fresh(now) {
            self.stats.misses += 1;
            return None;
        }
        slot.referenced = true;
        self.stats.hits += 1;
        let refresh = prefetch && self.prefetch && !slot.refreshing && slot.answer.refresh_due(now);
        slot.refreshing |= refresh;
        Some(Hit {
            answer: &slot.answer,
            prefetch: refresh,
        })
    }

    /// The expired answer for `key` if it expired less than `max_age` before `now` (RFC 8767),
    /// for a miss to fall back on. Not counted as a hit or miss (the lookup before it was).
    pub fn stale(&mut self, key: &CacheKey, now: Instant, max_age: Duration) -> Option<Stale<'_>> {
        let i = self.find(key)?;
        let slot = &self.slots[i];
        if slot.answer.is_fresh(now) || !slot.answer.servable_stale(now, max_age) {
            return None;
        }
        let quiet = slot.quiet_until != 0 && slot.answer.age(now) < slot.quiet_until;
        Some(Stale {
            answer: &slot.answer,
            quiet,
        })
    }

    /// Records that refreshing `key`'s answer failed at `now`: for `quiet`, clients get the
    /// expired answer stale at once ([`Stale::quiet`]) instead of waiting for upstreams.
    pub fn refresh_failed(&mut self, key: &CacheKey, now: Instant, quiet: Duration) {
        if let Some(i) = self.find(key) {
            let slot = &mut self.slots[i];
            let until = u64::from(slot.answer.age(now)) + quiet.as_secs();
            slot.quiet_until = u32::try_from(until.max(1)).unwrap_or(u32::MAX);
        }
    }

    /// Whether the shard holds an answer for `key`, fresh or still servable stale at `now`.
    pub fn holds(&self, key: &CacheKey, now: Instant) -> bool {
        self.find(key).is_some_and(|i| {
            let answer = &self.slots[i].answer;
            answer.is_fresh(now) || answer.servable_stale(now, self.stale_max_age)
        })
    }

    /// Stores `answer` under `key`, replacing an older answer for it and evicting if full.
    /// Answers with a zero lifetime are not stored.
    pub fn insert(&mut self, key: &CacheKey, answer: Arc<CachedAnswer>, now: Instant) {
        if !answer.is_cacheable() {
            return;
        }
        debug_assert!(answer.matches(key), "answer stored under another question");
        self.stats.inserts += 1;
        let hash = key.hash_with(&self.hasher);
        let slots = &self.slots;
        if let Some(&i) = self
            .index
            .find(hash, |&i| slots[i as usize].answer.matches(key))
        {
            let slot = &mut self.slots[i as usize];
            slot.answer = answer;
            slot.referenced = false;
            slot.refreshing = false;
            slot.quiet_until = 0;
            return;
        }
        let slot = Slot {
            answer,
            hash,
            referenced: false,
            refreshing: false,
            quiet_until: 0,
        };
        if self.slots.len() < self.capacity {
            let i = self.slots.len() as u32;
            self.slots.push(slot);
            let slots = &self.slots;
            self.index
                .insert_unique(hash, i, |&j| slots[j as usize].hash);
            return;
        }
        let victim = self.sweep(now);
        self.unindex(victim);
        self.slots[victim] = slot;
        let slots = &self.slots;
        self.index
            .insert_unique(hash, victim as u32, |&j| slots[j as usize].hash);
        self.hand = (victim + 1) % self.slots.len();
    }

    /// Advances the CLOCK hand to a slot to reuse, counting why it was freed.
    fn sweep(&mut self, now: Instant) -> usize {
        // Two turns at most: the first clears every reference bit.
        loop {
            let i = self.hand;
            let slot = &mut self.slots[i];
            if !slot.answer.is_fresh(now) {
                self.stats.expired += 1;
                return i;
            }
            if !slot.referenced {
                self.stats.evictions += 1;
                return i;
            }
            slot.referenced = false;
            self.hand = (i + 1) % self.slots.len();
        }
    }

    fn unindex(&mut self, i: usize) {
        let hash = self.slots[i].hash;
        if let Ok(entry) = self.index.find_entry(hash, |&j| j as usize == i) {
            entry.remove();
        }
    }

    /// Removes slot `i`, moving the last slot into its place.
    fn remove_slot(&mut self, i: usize) {
        self.unindex(i);
        let last = self.slots.len() - 1;
        if i != last {
            let moved_hash = self.slots[last].hash;
            if let Ok(entry) = self.index.find_entry(moved_hash, |&j| j as usize == last) {
                *entry.into_mut() = i as u32;
            }
        }
        self.slots.swap_remove(i);
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
    }

    /// Changes the capacity; shrinking drops expired, then unreferenced answers first.
    pub fn set_capacity(&mut self, capacity: usize, now: Instant) {
        self.capacity = capacity.max(1);
        while self.slots.len() > self.capacity {
            let victim = self.sweep(now);
            self.remove_slot(victim);
        }
    }

    /// Drops the expired answers among the first `budget` slots that are past the stale
    /// window too; returns how many were dropped. Lets the shell reclaim memory between
    /// queries in bounded steps.
    pub fn purge_expired(&mut self, now: Instant, budget: usize) -> usize {
        let mut dropped = 0;
        let mut i = 0;
        while i < self.slots.len() && i < budget {
            if !self.slots[i].answer.servable_stale(now, self.stale_max_age) {
                self.remove_slot(i);
                self.stats.expired += 1;
                dropped += 1;
            } else {
                i += 1;
            }
        }
        dropped
    }

    /// Removes every answer `remove` picks; returns how many were removed. Walks the whole
    /// shard: for operator commands (`kudurru cache flush`), not the query path.
    pub fn remove_where(&mut self, mut remove: impl FnMut(&CachedAnswer) -> bool) -> usize {
        let mut removed = 0;
        let mut i = 0;
        while i < self.slots.len() {
            if remove(&self.slots[i].answer) {
                // The last slot moves into `i`: look at `i` again.
                self.remove_slot(i);
                removed += 1;
            } else {
                i += 1;
            }
        }
        removed
    }

    /// The answers held, fresh or not yet reclaimed, in slot order.
    pub fn answers(&self) -> impl Iterator<Item = &Arc<CachedAnswer>> {
        self.slots.iter().map(|s| &s.answer)
    }

    /// Number of answers held (fresh or not yet reclaimed).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the shard holds nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The configured capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counters since creation.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Heap bytes held by the answers (not counting the index).
    pub fn heap_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.answer.heap_bytes())
            .sum::<usize>()
            + self.slots.capacity() * size_of::<Slot>()
            + self.index.capacity() * (size_of::<u32>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::TtlPolicy;

    fn key(n: u32) -> CacheKey {
        let label = format!("n{n}");
        let mut wire = vec![label.len() as u8];
        wire.extend_from_slice(label.as_bytes());
        wire.push(0);
        CacheKey::new(&wire, 1, 1, false, false).unwrap()
    }

    fn answer(key: &CacheKey, now: Instant, ttl: u32) -> Arc<CachedAnswer> {
        let policy = TtlPolicy {
            servfail_ttl: ttl,
            ..TtlPolicy::default()
        };
        Arc::new(CachedAnswer::failure(key, now, &policy))
    }

    #[test]
    fn stores_and_expires() {
        let t0 = Instant::now();
        let mut cache = Cache::new(10);
        let k = key(1);
        assert!(cache.get(&k, t0).is_none());
        cache.insert(&k, answer(&k, t0, 5), t0);
        assert!(cache.get(&k, t0 + Duration::from_secs(4)).is_some());
        assert!(cache.get(&k, t0 + Duration::from_secs(5)).is_none());
        assert_eq!(cache.stats().hits, 1);
        assert_eq!(cache.stats().misses, 2);
        assert!(cache.get(&key(2), t0).is_none());
    }

    #[test]
    fn clock_keeps_referenced_entries_through_a_scan() {
        let t0 = Instant::now();
        let mut cache = Cache::new(100);
        for n in 0..100 {
            let k = key(n);
            cache.insert(&k, answer(&k, t0, 300), t0);
        }
        // The hot set: 10 names asked for again.
        for n in 0..10 {
            assert!(cache.get(&key(n), t0).is_some());
        }
        // A scan of 90 cold names, each asked once.
        for n in 1000..1090 {
            let k = key(n);
            cache.insert(&k, answer(&k, t0, 300), t0);
        }
        assert_eq!(cache.len(), 100);
        for n in 0..10 {
            assert!(cache.get(&key(n), t0).is_some(), "hot name {n} evicted");
        }
        assert_eq!(cache.stats().evictions, 90);
    }

    #[test]
    fn expired_entries_are_reused_first_and_shrinking_works() {
        let t0 = Instant::now();
        let mut cache = Cache::new(4);
        for n in 0..4 {
            let k = key(n);
            cache.insert(&k, answer(&k, t0, if n == 2 { 1 } else { 300 }), t0);
            cache.get(&k, t0);
        }
        let later = t0 + Duration::from_secs(2);
        let k = key(9);
        cache.insert(&k, answer(&k, later, 300), later);
        assert_eq!(cache.stats().expired, 1);
        for n in [0, 1, 3, 9] {
            assert!(cache.get(&key(n), later).is_some());
        }
        cache.set_capacity(2, later);
        assert_eq!(cache.len(), 2);
        let alive = [0, 1, 3, 9]
            .iter()
            .filter(|&&n| cache.get(&key(n), later).is_some())
            .count();
        assert_eq!(alive, 2);
    }

    #[test]
    fn purge_drops_only_expired() {
        let t0 = Instant::now();
        let mut cache = Cache::new(10);
        for n in 0..6 {
            let k = key(n);
            cache.insert(&k, answer(&k, t0, if n % 2 == 0 { 1 } else { 300 }), t0);
        }
        assert_eq!(cache.purge_expired(t0 + Duration::from_secs(2), 100), 3);
        assert_eq!(cache.len(), 3);
        for n in [1, 3, 5] {
            assert!(cache.get(&key(n), t0).is_some());
        }
    }

    #[test]
    fn rfc8767_expired_answers_are_kept_for_the_stale_window_only() {
        let t0 = Instant::now();
        let mut cache = Cache::new(10);
        cache.set_refresh_policy(false, Duration::from_secs(10));
        let k = key(1);
        cache.insert(&k, answer(&k, t0, 5), t0);
        let max_age = Duration::from_secs(10);
        assert!(cache.stale(&k, t0, max_age).is_none(), "fresh is not stale");
        let expired = t0 + Duration::from_secs(6);
        assert!(
            cache.get(&k, expired).is_none(),
            "an expired answer is a miss"
        );
        let stale = cache
            .stale(&k, expired, max_age)
            .expect("within the window");
        assert!(!stale.quiet);
        assert!(
            cache
                .stale(&k, expired, Duration::from_millis(500))
                .is_none(),
            "the caller's window applies"
        );
        // The purge keeps it within the window and drops it after.
        assert_eq!(cache.purge_expired(expired, 100), 0);
        assert!(cache.holds(&k, expired));
        let gone = t0 + Duration::from_secs(15);
        assert!(cache.stale(&k, gone, max_age).is_none());
        assert_eq!(cache.purge_expired(gone, 100), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn serve_stale_off_reclaims_at_expiry_and_stale_entries_count_against_capacity() {
        let t0 = Instant::now();
        let mut cache = Cache::new(2);
        let (a, b, c) = (key(1), key(2), key(3));
        cache.insert(&a, answer(&a, t0, 1), t0);
        assert_eq!(cache.purge_expired(t0 + Duration::from_secs(2), 100), 1);

        cache.set_refresh_policy(false, Duration::from_secs(3600));
        cache.insert(&a, answer(&a, t0, 1), t0);
        cache.insert(&b, answer(&b, t0, 300), t0);
        cache.get(&b, t0);
        let later = t0 + Duration::from_secs(2);
        // Full: the stale answer's slot goes before the fresh, referenced one.
        cache.insert(&c, answer(&c, later, 300), later);
        assert_eq!(cache.len(), 2);
        assert!(cache.stale(&a, later, Duration::from_secs(3600)).is_none());
        assert!(cache.get(&b, later).is_some() && cache.get(&c, later).is_some());
        assert_eq!(cache.stats().expired, 2);
    }

    #[test]
    fn a_failed_refresh_makes_the_stale_answer_quiet_for_a_while() {
        let t0 = Instant::now();
        let mut cache = Cache::new(10);
        let k = key(1);
        cache.insert(&k, answer(&k, t0, 5), t0);
        let max_age = Duration::from_secs(3600);
        let failed_at = t0 + Duration::from_secs(6);
        cache.refresh_failed(&k, failed_at, Duration::from_secs(30));
        let quiet = |cache: &mut Cache, at| cache.stale(&k, at, max_age).map(|s| s.quiet);
        assert_eq!(quiet(&mut cache, failed_at), Some(true));
        assert_eq!(
            quiet(&mut cache, failed_at + Duration::from_secs(29)),
            Some(true)
        );
        assert_eq!(
            quiet(&mut cache, failed_at + Duration::from_secs(31)),
            Some(false)
        );
        // A new answer clears it.
        cache.insert(&k, answer(&k, failed_at, 5), failed_at);
        cache.insert(&k, answer(&k, t0, 5), t0);
        assert_eq!(quiet(&mut cache, failed_at), Some(false));
    }

    /// A positive answer (one A record, TTL `ttl`): failures are never prefetched.
    fn positive(key: &CacheKey, now: Instant, ttl: u32) -> Arc<CachedAnswer> {
        let mut query = Vec::new();
        crate::wire::write_upstream_query(key, 1, &mut query);
        let reply = crate::answer::tests::reply(&query, 0, &[(0, 1, ttl, vec![192, 0, 2, 1])]);
        Arc::new(CachedAnswer::from_reply(&reply, key, 1, now, &TtlPolicy::default()).unwrap())
    }

    #[test]
    fn prefetch_is_asked_once_in_the_last_tenth_and_again_after_a_new_answer() {
        let t0 = Instant::now();
        let mut cache = Cache::new(10);
        let k = key(1);
        cache.insert(&k, positive(&k, t0, 10), t0);
        let prefetch =
            |cache: &mut Cache, at, asking| cache.lookup(&k, at, asking).map(|h| h.prefetch);
        let late = t0 + Duration::from_millis(9100);
        assert_eq!(
            prefetch(&mut cache, late, true),
            Some(false),
            "prefetch off"
        );
        cache.set_refresh_policy(true, Duration::ZERO);
        assert_eq!(
            prefetch(&mut cache, t0 + Duration::from_secs(8), true),
            Some(false),
            "too early"
        );
        assert_eq!(
            prefetch(&mut cache, late, false),
            Some(false),
            "not asked for"
        );
        assert_eq!(
            prefetch(&mut cache, late, true),
            Some(true),
            "the last tenth"
        );
        assert_eq!(prefetch(&mut cache, late, true), Some(false), "once");
        assert_eq!(
            prefetch(&mut cache, t0 + Duration::from_secs(10), true),
            None,
            "expired"
        );
        let refreshed = t0 + Duration::from_millis(9200);
        cache.insert(&k, positive(&k, refreshed, 10), refreshed);
        assert_eq!(
            prefetch(&mut cache, t0 + Duration::from_secs(10), true),
            Some(false)
        );
        assert_eq!(
            prefetch(&mut cache, refreshed + Duration::from_millis(9000), true),
            Some(true)
        );
        assert_eq!(cache.stats().misses, 1);
    }
}
