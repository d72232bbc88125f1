//! One core's resolver: its cache shard, L1, in-flight table, upstream set ([`Upstreams`]) and
//! mesh peers, and the resolve path through them.
//!
//! ```text
//! query on core A ─▶ A owns key? ─ yes ─▶ shard hit? ─ yes ─▶ answer
//!                        │                    └ no ─▶ in flight? ─ yes ─▶ wait for it
//!                        │                               └ no ─▶ upstream (one query for all)
//!                        └ no ─▶ L1 hit? ─ yes ─▶ answer (no cross-core hop)
//!                                   └ no ─▶ Lookup to owner B over the mesh ─▶ B as above
//!                                              ─▶ Answer back to A ─▶ A stores in L1 ─▶ answer
//! ```
//! A child of [`super`] and private to it: the listeners reach the resolver only through the
//! worker's "serve this hit here" and "resolve this miss", never its tables. All state here is
//! `!Sync` and touched only by the core that owns it.
//!
//! A miss carries the settings snapshot its query was admitted under (`Arc<Settings>`, taken
//! once at ingress) through every await and across the mesh to the owner core: the upstream
//! set, the timeouts and the TTL policy of one resolution all come from that one snapshot.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Instant;

use glommio::channels::channel_mesh::Senders;
use glommio::channels::local_channel::{self, LocalSender};
use kudurru_core::{Cache, CacheKey, CachedAnswer};

use crate::cache_control::{CacheCommand, CacheReport, CoreCacheStats};
use crate::deadline;
use crate::metrics::CoreMetrics;
use crate::settings::{Settings, SharedSettings};
use crate::upstream::Upstreams;

/// Extra time a core waits for an owner core beyond `upstream.resolveTimeout`.
const OWNER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Messages between cores.
pub(crate) enum ShardMessage {
    /// "Resolve `key` for me": sent to the owning core.
    Lookup {
        from: usize,
        token: u64,
        key: Box<CacheKey>,
        /// The snapshot the query was admitted under: the owner resolves with it.
        settings: Arc<Settings>,
    },
    /// The owner's answer to a `Lookup`.
    Answer {
        token: u64,
        answer: Arc<CachedAnswer>,
    },
}

/// A `Lookup` from another core that this core, the key's owner, is to resolve
/// ([`Resolver::resolve_lookup`]) and answer ([`Resolver::send_answer`]).
pub(super) struct Lookup {
    from: usize,
    token: u64,
    key: Box<CacheKey>,
    settings: Arc<Settings>,
}

/// Which core owns a key: the same function on every core (a seed shared by the process).
#[derive(Clone)]
pub(crate) struct Ownership {
    hasher: foldhash::fast::FixedState,
    cores: usize,
}

impl Ownership {
    pub(crate) fn new(seed: u64, cores: usize) -> Self {
        Self {
            hasher: foldhash::fast::FixedState::with_seed(seed),
            cores: cores.max(1),
        }
    }

    pub(crate) fn owner(&self, key: &CacheKey) -> usize {
        (self.hasher.hash_one(key) % self.cores as u64) as usize
    }
}

struct Peers {
    senders: Senders<ShardMessage>,
    pending: RefCell<HashMap<u64, LocalSender<Arc<CachedAnswer>>>>,
    next_token: Cell<u64>,
}

type Waiters = Vec<LocalSender<Arc<CachedAnswer>>>;

/// One core's resolver state.
pub(super) struct Resolver {
    /// This core's shard index (its id in the channel mesh).
    shard: usize,
    ownership: Ownership,
    cache: RefCell<Cache>,
    l1: RefCell<Cache>,
    inflight: RefCell<HashMap<CacheKey, Waiters>>,
    /// The upstream set, its selector and this core's sockets to each upstream.
    upstreams: Upstreams,
    peers: Option<Peers>,
    /// This core's counters (the same as its context's).
    metrics: Arc<CoreMetrics>,
}

impl Resolver {
    /// An empty resolver for shard `shard`, sized by `snapshot`; `senders` is the mesh when
    /// there are other cores.
    pub(super) fn new(
        shard: usize,
        ownership: Ownership,
        settings: &SharedSettings,
        snapshot: &Settings,
        metrics: Arc<CoreMetrics>,
        senders: Option<Senders<ShardMessage>>,
    ) -> Self {
        let cores = ownership.cores;
        let upstreams = Upstreams::new(settings.clone(), metrics.clone(), snapshot);
        Self {
            shard,
            ownership,
            cache: RefCell::new(Cache::new(snapshot.shard_capacity(cores))),
            l1: RefCell::new(Cache::new(if cores > 1 {
                snapshot.l1_capacity(cores)
            } else {
                1
            })),
            inflight: RefCell::new(HashMap::new()),
            upstreams,
            peers: senders.map(|senders| Peers {
                senders,
                pending: RefCell::new(HashMap::new()),
                next_token: Cell::new(0),
            }),
            metrics,
        }
    }

    /// See [`super::Worker::serve_local`].
    pub(super) fn serve_local<T>(
        &self,
        key: &CacheKey,
        now: Instant,
        serve: impl FnOnce(&CachedAnswer) -> T,
    ) -> Option<T> {
        let tier = if self.owns(key) {
            &self.cache
        } else {
            &self.l1
        };
        tier.borrow_mut().get(key, now).map(|answer| serve(answer))
    }

    fn owns(&self, key: &CacheKey) -> bool {
        self.peers.is_none() || self.ownership.owner(key) == self.shard
    }

    /// See [`super::Worker::resolve`].
    pub(super) async fn resolve(
        &self,
        key: &CacheKey,
        settings: &Arc<Settings>,
    ) -> Arc<CachedAnswer> {
        let owner = self.ownership.owner(key);
        match &self.peers {
            Some(peers) if owner != self.shard => {
                CoreMetrics::bump(&self.metrics.cross_core_lookups);
                let token = peers.next_token.get();
                peers.next_token.set(token.wrapping_add(1));
                let (tx, rx) = local_channel::new_bounded(1);
                peers.pending.borrow_mut().insert(token, tx);
                let message = ShardMessage::Lookup {
                    from: self.shard,
                    token,
                    key: Box::new(*key),
                    settings: settings.clone(),
                };
                // The owner answers within the resolve timeout; the bound only guards against an
                // owner that went away (shutdown) with this lookup queued.
                let deadline = Instant::now() + settings.resolve_timeout + OWNER_GRACE;
                let answer = if peers.senders.send_to(owner, message).await.is_ok() {
                    deadline::until(deadline, rx.recv()).await.flatten()
                } else {
                    None
                };
                peers.pending.borrow_mut().remove(&token);
                let answer = answer.unwrap_or_else(|| failure(key, settings));
                self.l1
                    .borrow_mut()
                    .insert(key, answer.clone(), Instant::now());
                answer
            }
            // `serve_local` already missed the shard.
            _ => self.resolve_owned(key, false, settings).await,
        }
    }

    /// Takes a message from another core: hands an owner's answer to the query waiting for it,
    /// and returns a lookup for the caller to run in a task of its own.
    pub(super) fn receive(&self, message: ShardMessage) -> Option<Lookup> {
        match message {
            ShardMessage::Lookup {
                from,
                token,
                key,
                settings,
            } => Some(Lookup {
                from,
                token,
                key,
                settings,
            }),
            ShardMessage::Answer { token, answer } => {
                if let Some(tx) = self
                    .peers
                    .as_ref()
                    .and_then(|p| p.pending.borrow_mut().remove(&token))
                {
                    let _ = tx.try_send(answer);
                }
                None
            }
        }
    }

    /// Resolves a lookup from another core as the key's owner, under the snapshot it carries.
    /// Returns `resolve_owned`'s own future, not one wrapped around it, so the lookup's task
    /// stays as small as one that awaits `resolve_owned` itself.
    pub(super) fn resolve_lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
    ) -> impl Future<Output = Arc<CachedAnswer>> + 'a {
        self.resolve_owned(&lookup.key, true, &lookup.settings)
    }

    /// Sends `answer` to the core that sent `lookup`.
    pub(super) async fn send_answer(&self, lookup: &Lookup, answer: Arc<CachedAnswer>) {
        if let Some(peers) = &self.peers {
            let message = ShardMessage::Answer {
                token: lookup.token,
                answer,
            };
            // A closed peer is shutting down; nothing is waiting any more.
            let _ = peers.senders.send_to(lookup.from, message).await;
        }
    }

    /// Resolves a key this core owns under `settings`: shard, then in-flight coalescing, then
    /// upstream. A query that joins one in flight gets that one's answer, resolved under the
    /// snapshot of the query that started it.
    async fn resolve_owned(
        &self,
        key: &CacheKey,
        check_shard: bool,
        settings: &Settings,
    ) -> Arc<CachedAnswer> {
        if check_shard && let Some(hit) = self.cache.borrow_mut().get(key, Instant::now()) {
            return hit.clone();
        }
        let waiting = {
            let mut inflight = self.inflight.borrow_mut();
            match inflight.get_mut(key) {
                Some(waiters) => {
                    let (tx, rx) = local_channel::new_bounded(1);
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    inflight.insert(*key, Vec::new());
                    None
                }
            }
        };
        if let Some(rx) = waiting {
            CoreMetrics::bump(&self.metrics.coalesced);
            return rx.recv().await.unwrap_or_else(|| failure(key, settings));
        }
        // If this task is dropped mid-flight the guard releases the waiters (they answer SERVFAIL).
        let mut guard = InflightGuard {
            resolver: self,
            key,
            settings,
            answer: None,
        };
        // Boxed so the tasks that wait on a miss stay small enough for the allocator's
        // thread cache (under 1 KiB); the upstream exchange allocates on its own.
        let (answer, now) = Box::pin(self.upstreams.forward(key, settings)).await;
        let answer = Arc::new(answer);
        self.cache.borrow_mut().insert(key, answer.clone(), now);
        guard.answer = Some(answer.clone());
        drop(guard);
        answer
    }

    /// Applies `settings`' capacities and copies the cache counters into the metrics; run once
    /// a second.
    /// The upstream health probes of this core ([`Upstreams::run_health_checks`]).
    pub(super) async fn run_health_checks(&self) {
        self.upstreams.run_health_checks().await;
    }

    pub(super) fn maintain(&self, settings: &Settings, now: Instant) {
        use std::sync::atomic::Ordering::Relaxed;
        let cores = self.ownership.cores;
        let mut cache = self.cache.borrow_mut();
        let mut l1 = self.l1.borrow_mut();
        if cache.capacity() != settings.shard_capacity(cores) {
            cache.set_capacity(settings.shard_capacity(cores), now);
        }
        if cores > 1 && l1.capacity() != settings.l1_capacity(cores) {
            l1.set_capacity(settings.l1_capacity(cores), now);
        }
        l1.purge_expired(now, 4096);
        cache.purge_expired(now, 4096);
        let (a, b) = (cache.stats(), l1.stats());
        let m = &self.metrics.cache;
        // Every miss of the L1 becomes a lookup at the owner; count it once, there.
        m.hits.store(a.hits + b.hits, Relaxed);
        m.misses.store(a.misses, Relaxed);
        m.entries.store(cache.len() as u64, Relaxed);
        m.l1_entries.store(l1.len() as u64, Relaxed);
        m.evictions.store(a.evictions + b.evictions, Relaxed);
        m.expired.store(a.expired + b.expired, Relaxed);
    }
}

impl Resolver {
    /// Runs an operator's command on this core's shard and L1 (see [`crate::cache_control`]).
    pub(super) fn cache_command(&self, command: &CacheCommand, now: Instant) -> CacheReport {
        let mut cache = self.cache.borrow_mut();
        let mut l1 = self.l1.borrow_mut();
        match command {
            CacheCommand::Flush(scope) => CacheReport::Flushed {
                shard: cache.remove_where(|a| scope.matches(a.question())),
                l1: l1.remove_where(|a| scope.matches(a.question())),
            },
            CacheCommand::Stats => {
                let (a, b) = (cache.stats(), l1.stats());
                CacheReport::Stats(CoreCacheStats {
                    entries: cache.len(),
                    capacity: cache.capacity(),
                    l1_entries: if self.peers.is_some() { l1.len() } else { 0 },
                    l1_capacity: if self.peers.is_some() {
                        l1.capacity()
                    } else {
                        0
                    },
                    hits: a.hits + b.hits,
                    misses: a.misses,
                })
            }
            CacheCommand::Dump { limit } => CacheReport::Dump {
                entries: cache
                    .answers()
                    .filter(|a| a.is_fresh(now))
                    .take(*limit)
                    .map(|a| kudurru_core::cache_control::DumpEntry::of(a, now))
                    .collect(),
                total: cache.len(),
            },
        }
    }
}

/// A SERVFAIL for `key`, cached as `settings`' TTL policy says (RFC 9520).
fn failure(key: &CacheKey, settings: &Settings) -> Arc<CachedAnswer> {
    Arc::new(CachedAnswer::failure(key, Instant::now(), &settings.ttl))
}

struct InflightGuard<'a> {
    resolver: &'a Resolver,
    key: &'a CacheKey,
    settings: &'a Settings,
    answer: Option<Arc<CachedAnswer>>,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let waiters = self
            .resolver
            .inflight
            .borrow_mut()
            .remove(self.key)
            .unwrap_or_default();
        if waiters.is_empty() {
            return;
        }
        let answer = self
            .answer
            .take()
            .unwrap_or_else(|| failure(self.key, self.settings));
        for tx in waiters {
            let _ = tx.try_send(answer.clone());
        }
    }
}
