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
//! Serve-stale (RFC 8767) and prefetch ride on the same tables. A miss whose key has an
//! expired answer within `cache.staleMaxAge` starts (or joins) the upstream resolution in a
//! task of its own ([`Refresh::Lead`]) and waits at most `upstream.staleAnswerTimeout` for it;
//! then, or at once when every upstream failed, the client gets the expired answer with TTL 30
//! and EDE 3 while the resolution goes on. A hit in the last tenth of an answer's lifetime
//! queues one background refresh ([`Refresh::Prefetch`] on the owner, [`Refresh::Remote`]
//! from an L1, which asks the owner): the hit itself only sets a flag in its slot. A failed
//! refresh never replaces the answer the shard holds.
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
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use kudurru_core::{AnswerKind, Cache, CacheKey, CachedAnswer};

use crate::cache_control::{CacheCommand, CacheReport, CoreCacheStats};
use crate::deadline;
use crate::metrics::CoreMetrics;
use crate::settings::{Settings, SharedSettings};
use crate::upstream::Upstreams;

/// Extra time a core waits for an owner core beyond `upstream.resolveTimeout`.
const OWNER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// After a refresh of an expired answer failed, clients get it stale at once for this long
/// instead of waiting `upstream.staleAnswerTimeout` each (RFC 8767 §5's failure recheck
/// timer; 30 s as the RFC suggests). The refresh is still tried, one at a time, in the
/// background.
const FAILURE_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Work a core queues for itself that no client waits for, run by
/// [`super::Worker::run_refreshes`], each job in a task of its own.
pub(super) enum Refresh {
    /// Refresh a key this core owns: a hit found its answer in its last tenth (prefetch).
    Prefetch(Box<CacheKey>),
    /// Refresh through its owner a key whose L1 copy a hit found in its last tenth.
    Remote(Box<CacheKey>),
    /// Lead the upstream resolution of a key whose in-flight entry a miss with a stale answer
    /// made, under the snapshot that miss was admitted under.
    Lead(Box<CacheKey>, Arc<Settings>),
}

/// Why [`Resolver::resolve_owned`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A miss on this core ([`Resolver::serve_local`] already looked at the shard).
    Local,
    /// A lookup from another core: the shard is looked at first.
    Lookup,
    /// A prefetch: an answer not yet due for refresh is kept; a stale one is not served.
    Refresh,
}

/// Messages between cores.
pub(crate) enum ShardMessage {
    /// "Resolve `key` for me": sent to the owning core.
    Lookup {
        from: usize,
        token: u64,
        key: Box<CacheKey>,
        /// The snapshot the query was admitted under: the owner resolves with it.
        settings: Arc<Settings>,
        /// A prefetch from the sender's L1, not a client's miss.
        refresh: bool,
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
    refresh: bool,
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
    /// The published snapshot, which background refreshes resolve under.
    settings: SharedSettings,
    /// Background refreshes queued by hits and stale answers ([`Refresh`]).
    refreshes: LocalSender<Refresh>,
    /// Their receiving end, until [`super::Worker::run_refreshes`] takes it.
    refresh_queue: RefCell<Option<LocalReceiver<Refresh>>>,
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
        let mut cache = Cache::new(snapshot.shard_capacity(cores));
        let mut l1 = Cache::new(if cores > 1 {
            snapshot.l1_capacity(cores)
        } else {
            1
        });
        cache.set_refresh_policy(snapshot.prefetch, stale_window(snapshot));
        l1.set_refresh_policy(snapshot.prefetch, std::time::Duration::ZERO);
        let (refreshes, refresh_queue) = local_channel::new_unbounded();
        Self {
            shard,
            ownership,
            cache: RefCell::new(cache),
            l1: RefCell::new(l1),
            inflight: RefCell::new(HashMap::new()),
            upstreams,
            peers: senders.map(|senders| Peers {
                senders,
                pending: RefCell::new(HashMap::new()),
                next_token: Cell::new(0),
            }),
            metrics,
            settings: settings.clone(),
            refreshes,
            refresh_queue: RefCell::new(Some(refresh_queue)),
        }
    }

    /// The queue of background refreshes, once (for [`super::Worker::run_refreshes`]).
    pub(super) fn take_refresh_queue(&self) -> Option<LocalReceiver<Refresh>> {
        self.refresh_queue.borrow_mut().take()
    }

    /// Queues `job` for the core's refresh task.
    fn queue(&self, job: Refresh) {
        // Unbounded: each job stands for a slot's one prefetch or one in-flight entry.
        let _ = self.refreshes.try_send(job);
    }

    /// Runs a background refresh to its end.
    pub(super) async fn refresh(&self, job: Refresh) {
        match job {
            Refresh::Prefetch(key) => {
                let settings = self.settings.load_full();
                self.resolve_owned(&key, Mode::Refresh, &settings).await;
            }
            Refresh::Remote(key) => {
                let settings = self.settings.load_full();
                self.ask_owner(&key, &settings, true).await;
            }
            Refresh::Lead(key, settings) => {
                self.lead(&key, &settings, true).await;
            }
        }
    }

    /// See [`super::Worker::serve_local`].
    pub(super) fn serve_local<T>(
        &self,
        key: &CacheKey,
        now: Instant,
        serve: impl FnOnce(&CachedAnswer) -> T,
    ) -> Option<T> {
        let owned = self.owns(key);
        let tier = if owned { &self.cache } else { &self.l1 };
        let (served, prefetch) = {
            let mut tier = tier.borrow_mut();
            let hit = tier.lookup(key, now, true)?;
            (serve(hit.answer), hit.prefetch)
        };
        if prefetch {
            let key = Box::new(*key);
            self.queue(if owned {
                Refresh::Prefetch(key)
            } else {
                Refresh::Remote(key)
            });
        }
        Some(served)
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
        // A forwarding-loop probe that came back in (the control thread sent it to an
        // upstream): counted and refused here, never forwarded or cached, so the loop drains.
        if kudurru_core::loop_probe::is_probe_name(key.qname()) {
            self.metrics.loop_probe.observe(key.qname());
            return Arc::new(CachedAnswer::loop_refused(key, Instant::now()));
        }
        if self.owns(key) {
            // `serve_local` already missed the shard.
            self.resolve_owned(key, Mode::Local, settings).await
        } else {
            self.ask_owner(key, settings, false).await
        }
    }

    /// Asks the key's owner core to resolve it (`refresh`: to prefetch it) and keeps its
    /// answer in the L1; a stale copy is never kept, nor a failed refresh's SERVFAIL.
    async fn ask_owner(
        &self,
        key: &CacheKey,
        settings: &Arc<Settings>,
        refresh: bool,
    ) -> Arc<CachedAnswer> {
        let owner = self.ownership.owner(key);
        match &self.peers {
            Some(peers) => {
                if !refresh {
                    CoreMetrics::bump(&self.metrics.cross_core_lookups);
                }
                let token = peers.next_token.get();
                peers.next_token.set(token.wrapping_add(1));
                let (tx, rx) = local_channel::new_bounded(1);
                peers.pending.borrow_mut().insert(token, tx);
                let message = ShardMessage::Lookup {
                    from: self.shard,
                    token,
                    key: Box::new(*key),
                    settings: settings.clone(),
                    refresh,
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
                let failed_refresh = refresh && answer.kind() == AnswerKind::Failure;
                if !answer.is_stale() && !failed_refresh {
                    self.l1
                        .borrow_mut()
                        .insert(key, answer.clone(), Instant::now());
                }
                answer
            }
            None => self.resolve_owned(key, Mode::Local, settings).await,
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
                refresh,
            } => Some(Lookup {
                from,
                token,
                key,
                settings,
                refresh,
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
        let mode = if lookup.refresh {
            Mode::Refresh
        } else {
            Mode::Lookup
        };
        self.resolve_owned(&lookup.key, mode, &lookup.settings)
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

    /// Resolves a key this core owns under `settings`: shard (unless `mode` is `Local`, whose
    /// caller just looked), an expired answer to serve stale, in-flight coalescing, then
    /// upstream. A query that joins one in flight gets that one's answer, resolved under the
    /// snapshot of the query that started it.
    async fn resolve_owned(
        &self,
        key: &CacheKey,
        mode: Mode,
        settings: &Arc<Settings>,
    ) -> Arc<CachedAnswer> {
        let now = Instant::now();
        if mode != Mode::Local
            && let Some(hit) = self.cache.borrow_mut().lookup(key, now, false)
            // A prefetch finds the answer already refreshed (by another core's request).
            && (mode == Mode::Lookup || !hit.answer.refresh_due(now))
        {
            return hit.answer.clone();
        }
        let stale = if settings.stale.enabled && mode != Mode::Refresh {
            self.cache
                .borrow_mut()
                .stale(key, now, settings.stale.max_age)
                .map(|stale| (stale.answer.clone(), stale.quiet))
        } else {
            None
        };
        if let Some((expired, quiet)) = stale {
            return self.serve_stale(key, settings, &expired, quiet, now).await;
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
        if mode == Mode::Refresh {
            CoreMetrics::bump(&self.metrics.prefetches);
        }
        self.lead(key, settings, mode == Mode::Refresh).await
    }

    /// A miss with `expired` at hand (RFC 8767): makes sure a resolution is in flight (in a
    /// task of its own, so it outlives this query), waits for it at most
    /// `upstream.staleAnswerTimeout` (not at all when `quiet`) and answers with its result,
    /// or with `expired` served stale when it failed or is still going.
    async fn serve_stale(
        &self,
        key: &CacheKey,
        settings: &Arc<Settings>,
        expired: &CachedAnswer,
        quiet: bool,
        now: Instant,
    ) -> Arc<CachedAnswer> {
        let (tx, rx) = local_channel::new_bounded(1);
        let lead = {
            let mut inflight = self.inflight.borrow_mut();
            match inflight.get_mut(key) {
                Some(waiters) => {
                    if !quiet {
                        waiters.push(tx);
                    }
                    false
                }
                None => {
                    inflight.insert(*key, if quiet { Vec::new() } else { vec![tx] });
                    true
                }
            }
        };
        if lead {
            self.queue(Refresh::Lead(Box::new(*key), settings.clone()));
        } else {
            CoreMetrics::bump(&self.metrics.coalesced);
        }
        if !quiet {
            let deadline = now + settings.stale.answer_timeout;
            if let Some(Some(answer)) = deadline::until(deadline, rx.recv()).await
                && answer.kind() != AnswerKind::Failure
            {
                return answer;
            }
        }
        CoreMetrics::bump(&self.metrics.stale_answers);
        Arc::new(expired.stale_copy(Instant::now()))
    }

    /// Resolves `key` upstream as the leader of its in-flight entry (which the caller made),
    /// stores the answer and hands it to the entry's waiters. A SERVFAIL does not replace an
    /// answer the shard still holds (fresh, or expired within `cache.staleMaxAge`): that one
    /// stays to be served stale, quietly for [`FAILURE_RECHECK`]. `background`: no client
    /// leads it (a prefetch or a stale answer's refresh), counted when it fails.
    async fn lead(
        &self,
        key: &CacheKey,
        settings: &Settings,
        background: bool,
    ) -> Arc<CachedAnswer> {
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
        let mut cache = self.cache.borrow_mut();
        if answer.kind() == AnswerKind::Failure && cache.holds(key, now) {
            cache.refresh_failed(key, now, FAILURE_RECHECK);
        } else {
            cache.insert(key, answer.clone(), now);
        }
        drop(cache);
        if background && answer.kind() == AnswerKind::Failure {
            CoreMetrics::bump(&self.metrics.refresh_failures);
        }
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
        cache.set_refresh_policy(settings.prefetch, stale_window(settings));
        l1.set_refresh_policy(settings.prefetch, std::time::Duration::ZERO);
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

/// How long the shard keeps expired answers under `settings`: `cache.staleMaxAge` with
/// `cache.serveStale`, else not at all.
fn stale_window(settings: &Settings) -> std::time::Duration {
    if settings.stale.enabled {
        settings.stale.max_age
    } else {
        std::time::Duration::ZERO
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
