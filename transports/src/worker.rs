//! One core's resolver state and the resolve path: L1, owner shard, coalescing, upstream.
//!
//! ```text
//! query on core A ─▶ A owns key? ─ yes ─▶ shard hit? ─ yes ─▶ answer
//!                        │                    └ no ─▶ in flight? ─ yes ─▶ wait for it
//!                        │                               └ no ─▶ upstream (one query for all)
//!                        └ no ─▶ L1 hit? ─ yes ─▶ answer (no cross-core hop)
//!                                   └ no ─▶ Lookup to owner B over the mesh ─▶ B as above
//!                                              ─▶ Answer back to A ─▶ A stores in L1 ─▶ answer
//! ```
//! All state here is `!Sync` and touched only by the core that owns it.
//!
//! A miss carries the settings snapshot its query was admitted under (`Arc<Settings>`, taken
//! once at ingress) through every await and across the mesh to the owner core: the upstream
//! set, the timeouts and the TTL policy of one resolution all come from that one snapshot.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use glommio::channels::channel_mesh::Senders;
use glommio::channels::local_channel::{self, LocalSender};
use kudurru_core::{Cache, CacheKey, CachedAnswer};

use crate::core_context::CoreContext;
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

/// One core's context, passed explicitly to every task on that core.
pub(crate) struct Worker {
    /// This core's shard index (its id in the channel mesh).
    pub(crate) shard: usize,
    /// What listeners read of the core besides the resolver.
    context: CoreContext,
    ownership: Ownership,
    cache: RefCell<Cache>,
    l1: RefCell<Cache>,
    inflight: RefCell<HashMap<CacheKey, Waiters>>,
    /// The upstream set, its selector and this core's sockets to each upstream.
    upstreams: Upstreams,
    peers: Option<Peers>,
}

impl Worker {
    pub(crate) fn new(
        shard: usize,
        ownership: Ownership,
        settings: SharedSettings,
        metrics: Arc<CoreMetrics>,
        senders: Option<Senders<ShardMessage>>,
        lameduck: Arc<AtomicBool>,
    ) -> Self {
        let snapshot = settings.load();
        let cores = ownership.cores;
        let upstreams = Upstreams::new(settings.clone(), metrics.clone(), &snapshot);
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
            context: CoreContext::new(settings, metrics, lameduck, &snapshot),
        }
    }

    /// What listeners read of this core besides the resolver: settings, counters, limiter.
    pub(crate) fn context(&self) -> &CoreContext {
        &self.context
    }

    /// Cores serving (the mesh size).
    pub(crate) fn cores(&self) -> usize {
        self.ownership.cores
    }

    /// Serves a cache hit on this core without any hop (the shard for owned keys, the L1
    /// otherwise): `serve` runs on the cached answer in place, so a hit touches no reference
    /// count (an answer's `Arc` may be shared with other cores).
    pub(crate) fn serve_local<T>(
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

    /// Resolves a key that missed [`Self::serve_local`] under `settings`, the snapshot its query
    /// was admitted under: asks the owner core (handing it the snapshot), or resolves here.
    pub(crate) async fn resolve(
        self: &Rc<Self>,
        key: &CacheKey,
        settings: &Arc<Settings>,
    ) -> Arc<CachedAnswer> {
        let owner = self.ownership.owner(key);
        match &self.peers {
            Some(peers) if owner != self.shard => {
                CoreMetrics::bump(&self.context.metrics.cross_core_lookups);
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

    /// Handles a message from another core.
    pub(crate) fn on_message(self: &Rc<Self>, message: ShardMessage) {
        match message {
            ShardMessage::Lookup {
                from,
                token,
                key,
                settings,
            } => {
                let worker = self.clone();
                glommio::spawn_local(async move {
                    let answer = worker.resolve_owned(&key, true, &settings).await;
                    if let Some(peers) = &worker.peers {
                        // A closed peer is shutting down; nothing is waiting any more.
                        let _ = peers
                            .senders
                            .send_to(from, ShardMessage::Answer { token, answer })
                            .await;
                    }
                })
                .detach();
            }
            ShardMessage::Answer { token, answer } => {
                if let Some(tx) = self
                    .peers
                    .as_ref()
                    .and_then(|p| p.pending.borrow_mut().remove(&token))
                {
                    let _ = tx.try_send(answer);
                }
            }
        }
    }

    /// Resolves a key this core owns under `settings`: shard, then in-flight coalescing, then
    /// upstream. A query that joins one in flight gets that one's answer, resolved under the
    /// snapshot of the query that started it.
    async fn resolve_owned(
        self: &Rc<Self>,
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
            CoreMetrics::bump(&self.context.metrics.coalesced);
            return rx.recv().await.unwrap_or_else(|| failure(key, settings));
        }
        // If this task is dropped mid-flight the guard releases the waiters (they answer SERVFAIL).
        let mut guard = InflightGuard {
            worker: self,
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

    /// Applies capacity changes and copies cache counters into the metrics; run once a second.
    pub(crate) fn maintain(&self, now: Instant) {
        use std::sync::atomic::Ordering::Relaxed;
        let settings = self.context.settings();
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
        let m = &self.context.metrics.cache;
        // Every miss of the L1 becomes a lookup at the owner; count it once, there.
        m.hits.store(a.hits + b.hits, Relaxed);
        m.misses.store(a.misses, Relaxed);
        m.entries.store(cache.len() as u64, Relaxed);
        m.l1_entries.store(l1.len() as u64, Relaxed);
        m.evictions.store(a.evictions + b.evictions, Relaxed);
        m.expired.store(a.expired + b.expired, Relaxed);
        self.context.maintain();
    }
}

/// A SERVFAIL for `key`, cached as `settings`' TTL policy says (RFC 9520).
fn failure(key: &CacheKey, settings: &Settings) -> Arc<CachedAnswer> {
    Arc::new(CachedAnswer::failure(key, Instant::now(), &settings.ttl))
}

struct InflightGuard<'a> {
    worker: &'a Worker,
    key: &'a CacheKey,
    settings: &'a Settings,
    answer: Option<Arc<CachedAnswer>>,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let waiters = self
            .worker
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{IO_MEMORY_PER_CORE, RING_DEPTH};
    use arc_swap::ArcSwap;
    use glommio::{LocalExecutorBuilder, Placement};
    use kudurru_core::wire::{Query, ReplyOptions};
    use kudurru_core::{AnswerKind, LocalNames, RateLimit, ServerIdentity, TtlPolicy};
    use std::net::{SocketAddr, UdpSocket};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// An upstream on loopback that answers every query with one A record, `address`, TTL
    /// 3600, and counts the queries it got. Its thread ends after a second without one.
    fn upstream(address: [u8; 4]) -> (SocketAddr, Arc<AtomicUsize>) {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .expect("a read timeout");
        let addr = socket.local_addr().expect("a bound address");
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 512];
            while let Ok((n, peer)) = socket.recv_from(&mut buffer) {
                counter.fetch_add(1, Ordering::SeqCst);
                let query = &buffer[..n];
                // Header and question: the name's labels, its root, then type and class.
                let mut at = 12;
                while at < n && query[at] != 0 {
                    at += 1 + usize::from(query[at]);
                }
                let question_end = (at + 5).min(n);
                let mut reply = query[..question_end].to_vec();
                reply[2..12].copy_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4]);
                reply.extend_from_slice(&address);
                let _ = socket.send_to(&reply, peer);
            }
        });
        (addr, asked)
    }

    fn settings(upstream: SocketAddr, max_ttl: u32) -> Settings {
        Settings {
            upstreams: vec![
                format!("udp://{upstream}")
                    .parse()
                    .expect("an upstream URL"),
            ]
            .into(),
            ttl: TtlPolicy {
                max_ttl,
                ..TtlPolicy::default()
            },
            cache_max_entries: 1000,
            local: LocalNames::new(ServerIdentity {
                identity: "test".into(),
                version: "test".into(),
            }),
            edns_payload: 1232,
            upstream_timeout: Duration::from_secs(1),
            resolve_timeout: Duration::from_secs(2),
            tcp_idle_timeout: Duration::from_secs(2),
            tcp_max_connections: 16,
            tcp_max_pipelined: 8,
            tls_handshake_timeout: Duration::from_secs(2),
            shutdown_grace: Duration::from_millis(100),
            ratelimit: RateLimit::default(),
            ratelimit_table_size: 1024,
        }
    }

    /// A recursive `name A` query (labels given without the root).
    fn query(name: &[&str]) -> Vec<u8> {
        let mut message = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name {
            message.push(label.len() as u8);
            message.extend_from_slice(label.as_bytes());
        }
        message.extend_from_slice(&[0, 0, 1, 0, 1]);
        message
    }

    /// The address an answer carries and the TTL it has left.
    fn address_and_ttl(answer: &CachedAnswer, message: &[u8]) -> ([u8; 4], u32) {
        assert_eq!(
            answer.kind(),
            AnswerKind::Positive,
            "an answer, not a failure"
        );
        let query = Query::parse(message).expect("the test's query parses");
        let now = Instant::now();
        let mut out = Vec::new();
        answer.write_response(&query, now, None, &ReplyOptions::udp(1232), &mut out);
        let address = out[out.len() - 4..].try_into().expect("four bytes");
        (address, answer.remaining(now))
    }

    /// A reload that lands between a query's ingress and its upstream exchange does not split
    /// the query between two settings: the miss is resolved with the upstream set and cached
    /// with the TTL policy of the snapshot it was admitted under, here and at an owner core
    /// (a mesh lookup), while a query admitted under the new snapshot gets the new ones. A
    /// second read of the published snapshot anywhere on the miss path (upstream set, attempt
    /// or resolve timeout, TTL policy) would ask the new upstream or clamp to the new TTL.
    #[test]
    fn a_reload_during_a_miss_does_not_split_the_query_between_two_snapshots() {
        const OLD: [u8; 4] = [192, 0, 2, 1];
        const NEW: [u8; 4] = [192, 0, 2, 2];
        let (old_upstream, old_asked) = upstream(OLD);
        let (new_upstream, new_asked) = upstream(NEW);
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(move || async move {
                let admitted = Arc::new(settings(old_upstream, 300));
                let published: SharedSettings = Arc::new(ArcSwap::new(admitted.clone()));
                let worker = Rc::new(Worker::new(
                    0,
                    Ownership::new(1, 1),
                    published.clone(),
                    Arc::new(CoreMetrics::default()),
                    None,
                    Arc::new(AtomicBool::new(false)),
                ));
                // The reload: another upstream set and a shorter `cache.maxTTL`.
                let reloaded = Arc::new(settings(new_upstream, 10));
                published.store(reloaded.clone());

                let message = query(&["a", "example"]);
                let key = *Query::parse(&message).expect("parses").key();
                let answer = worker.resolve(&key, &admitted).await;
                let (address, ttl) = address_and_ttl(&answer, &message);
                assert_eq!(address, OLD, "asked the admitted snapshot's upstream");
                assert!(
                    ttl > 10 && ttl <= 300,
                    "the admitted snapshot's maxTTL: {ttl}"
                );

                // At the owner core: the mesh lookup carries the snapshot.
                let message = query(&["b", "example"]);
                let key = *Query::parse(&message).expect("parses").key();
                worker.on_message(ShardMessage::Lookup {
                    from: 1,
                    token: 0,
                    key: Box::new(key),
                    settings: admitted.clone(),
                });
                let mut cached = None;
                for _ in 0..200 {
                    cached =
                        worker.serve_local(&key, Instant::now(), |a| address_and_ttl(a, &message));
                    if cached.is_some() {
                        break;
                    }
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
                let (address, ttl) = cached.expect("the owner resolved the lookup");
                assert_eq!(
                    address, OLD,
                    "the owner asked the lookup's snapshot's upstream"
                );
                assert!(
                    ttl > 10 && ttl <= 300,
                    "the lookup's snapshot's maxTTL: {ttl}"
                );

                // A query admitted after the reload: the new set and policy, although queries
                // under the old snapshot went before it.
                let message = query(&["c", "example"]);
                let key = *Query::parse(&message).expect("parses").key();
                let answer = worker.resolve(&key, &reloaded).await;
                let (address, ttl) = address_and_ttl(&answer, &message);
                assert_eq!(address, NEW, "asked the new snapshot's upstream");
                assert!(ttl <= 10, "the new snapshot's maxTTL: {ttl}");

                // A query admitted before the reload, resolved after the core's selector moved
                // to the new set: still its own snapshot's set and policy.
                let message = query(&["d", "example"]);
                let key = *Query::parse(&message).expect("parses").key();
                let answer = worker.resolve(&key, &admitted).await;
                let (address, ttl) = address_and_ttl(&answer, &message);
                assert_eq!(address, OLD, "asked the admitted snapshot's upstream");
                assert!(
                    ttl > 10 && ttl <= 300,
                    "the admitted snapshot's maxTTL: {ttl}"
                );
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
        assert_eq!(
            old_asked.load(Ordering::SeqCst),
            3,
            "three queries to the old upstream"
        );
        assert_eq!(
            new_asked.load(Ordering::SeqCst),
            1,
            "one query to the new upstream"
        );
    }
}
