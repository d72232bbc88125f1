//! The handle every listener of a core holds (`Rc<Worker>`): the core's context, and its
//! resolver behind two calls, "serve this hit here" ([`Worker::serve_local`]) and "resolve this
//! miss" ([`Worker::resolve`]).
//!
//! ```text
//! listener ─▶ worker.context()     settings snapshot, counters, limiter, lameduck, counts
//!          ─▶ worker.serve_local   a hit on this core (shard or L1), served in place
//!          ─▶ worker.resolve       a miss: the owner core, in-flight join, upstream
//! runtime  ─▶ worker.on_message    lookups and answers from other cores
//!          ─▶ worker.run_refreshes prefetches and stale answers' refreshes, in the background
//!          ─▶ worker.maintain      capacities and counters, once a second
//!          ─▶ worker.cache_command an operator's flush, stats or dump
//! ```
//! It exists so that a listener needs only "resolve this", not the resolver's insides: the
//! cache shard, L1, in-flight table, upstream set and mesh peers live in [`resolver`], a child
//! module private to this one, so no listener can name them. The worker owns the context and
//! the resolver inline (one allocation, the `Rc` the listeners clone); its calls forward to
//! them directly (no `dyn`, no extra reference count).

mod resolver;

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use glommio::channels::channel_mesh::Senders;
use kudurru_core::{CacheKey, CachedAnswer};

use crate::cache_control::{CacheCommand, CacheReport};
use crate::core_context::CoreContext;
use crate::metrics::CoreMetrics;
use crate::settings::{Settings, SharedSettings};
use resolver::Resolver;
pub(crate) use resolver::{Ownership, ShardMessage};

/// One core's context and resolver, passed explicitly to every task on that core.
pub(crate) struct Worker {
    /// What listeners read of the core besides the resolver.
    context: CoreContext,
    /// The cache shard, L1, in-flight table, upstream set and mesh peers.
    resolver: Resolver,
}

impl Worker {
    /// The worker of shard `shard`, its tables sized by the current snapshot; `senders` is the
    /// mesh when there are other cores.
    pub(crate) fn new(
        shard: usize,
        ownership: Ownership,
        settings: SharedSettings,
        metrics: Arc<CoreMetrics>,
        senders: Option<Senders<ShardMessage>>,
        lameduck: Arc<AtomicBool>,
    ) -> Self {
        let snapshot = settings.load();
        let resolver = Resolver::new(
            shard,
            ownership,
            &settings,
            &snapshot,
            metrics.clone(),
            senders,
        );
        Self {
            resolver,
            context: CoreContext::new(shard, settings, metrics, lameduck, &snapshot),
        }
    }

    /// What listeners read of this core besides the resolver: settings, counters, limiter.
    pub(crate) fn context(&self) -> &CoreContext {
        &self.context
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
        self.resolver.serve_local(key, now, serve)
    }

    /// Resolves a key that missed [`Self::serve_local`] under `settings`, the snapshot its query
    /// was admitted under: asks the owner core (handing it the snapshot), or resolves here.
    /// The resolver's own future, not one wrapped around it.
    pub(crate) fn resolve<'a>(
        &'a self,
        key: &'a CacheKey,
        settings: &'a Arc<Settings>,
    ) -> impl Future<Output = Arc<CachedAnswer>> + 'a {
        self.resolver.resolve(key, settings)
    }

    /// Handles a message from another core: an answer goes to the query waiting for it, a
    /// lookup is resolved in a task of its own.
    pub(crate) fn on_message(self: &Rc<Self>, message: ShardMessage) {
        if let Some(lookup) = self.resolver.receive(message) {
            let worker = self.clone();
            glommio::spawn_local(async move {
                let answer = worker.resolver.resolve_lookup(&lookup).await;
                worker.resolver.send_answer(&lookup, answer).await;
            })
            .detach();
        }
    }

    /// Runs the core's background refreshes (prefetches, the resolutions behind stale
    /// answers), each in a task of its own, until the core stops. Run once per core.
    pub(crate) async fn run_refreshes(self: Rc<Self>) {
        let Some(queue) = self.resolver.take_refresh_queue() else {
            return;
        };
        while let Some(job) = queue.recv().await {
            let worker = self.clone();
            glommio::spawn_local(async move { worker.resolver.refresh(job).await }).detach();
        }
    }

    /// Runs an operator's cache command on this core's shard and L1.
    pub(crate) fn cache_command(&self, command: &CacheCommand, now: Instant) -> CacheReport {
        self.resolver.cache_command(command, now)
    }

    /// Probes the upstreams this core holds down, every `upstream.healthCheckInterval`, until
    /// the task running it is dropped.
    pub(crate) async fn run_health_checks(&self) {
        self.resolver.run_health_checks().await;
    }

    /// Applies capacity changes and copies the cache and limiter counters into the metrics;
    /// run once a second.
    pub(crate) fn maintain(&self, now: Instant) {
        let settings = self.context.settings();
        self.resolver.maintain(&settings, now);
        self.context.maintain();
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
            upstream_strategy: Default::default(),
            upstream_tls: Default::default(),
            upstream_idle_timeout: Duration::from_secs(30),
            upstream_health_interval: Duration::from_secs(5),
            stale: Default::default(),
            prefetch: true,
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
            tcp_max_connections_per_client: 16,
            quic_max_connections_per_client: 16,
            tcp_max_pipelined: 8,
            tls_handshake_timeout: Duration::from_secs(2),
            shutdown_grace: Duration::from_millis(100),
            ratelimit: RateLimit::default(),
            ratelimit_table_size: 1024,
            policy: Default::default(),
            zones: Default::default(),
            acl: Default::default(),
        }
    }

    /// A forward zone at `apex` (presentation form) to `upstreams`.
    fn forward_zone(apex: &str, upstreams: &[SocketAddr]) -> kudurru_core::zone::ForwardZone {
        kudurru_core::zone::ForwardZone {
            apex: kudurru_core::policy::name::to_wire(apex)
                .expect("a test name")
                .into(),
            upstreams: upstreams
                .iter()
                .map(|a| format!("udp://{a}").parse().expect("an upstream URL"))
                .collect::<Vec<_>>()
                .into(),
        }
    }

    /// Misses go where `Zones::route` says: a forward zone's names (a special-use name and an
    /// RFC 6303 reverse zone among them, which replace the built-in zones) to its upstreams,
    /// the rest to the global set; a forward zone whose upstream is dead answers SERVFAIL
    /// without asking the global set; after a publish that adds a zone the forward zones
    /// still route (their selectors rebuilt for the new `Zones`).
    #[test]
    fn misses_route_to_their_forward_zone_and_a_dead_one_never_reaches_the_global_set() {
        const GLOBAL: [u8; 4] = [192, 0, 2, 1];
        const FORWARD: [u8; 4] = [192, 0, 2, 53];
        let (global, global_asked) = upstream(GLOBAL);
        let (forward, forward_asked) = upstream(FORWARD);
        // A port nothing listens on: the connected socket's send or receive is refused.
        let dead = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a loopback port");
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(move || async move {
                let zones = |extra: &[&str]| {
                    let mut forwards = vec![
                        forward_zone("local", &[forward]),
                        forward_zone("10.in-addr.arpa", &[forward]),
                        forward_zone("dead.example", &[dead]),
                    ];
                    forwards.extend(extra.iter().map(|apex| forward_zone(apex, &[forward])));
                    Arc::new(kudurru_core::zone::Zones::new(Vec::new(), forwards))
                };
                let first = Arc::new(Settings {
                    zones: zones(&[]),
                    ..settings(global, 300)
                });
                let published: SharedSettings = Arc::new(ArcSwap::new(first.clone()));
                let worker = Rc::new(Worker::new(
                    0,
                    Ownership::new(1, 1),
                    published.clone(),
                    Arc::new(CoreMetrics::default()),
                    None,
                    Arc::new(AtomicBool::new(false)),
                ));
                let resolve = |name: &'static [&'static str], settings: Arc<Settings>| {
                    let worker = worker.clone();
                    async move {
                        let message = query(name);
                        let key = *Query::parse(&message).expect("parses").key();
                        let answer = worker.resolve(&key, &settings).await;
                        if answer.kind() == AnswerKind::Failure {
                            None
                        } else {
                            Some(address_and_ttl(&answer, &message).0)
                        }
                    }
                };
                assert_eq!(
                    resolve(&["www", "example"], first.clone()).await,
                    Some(GLOBAL)
                );
                assert_eq!(
                    resolve(&["printer", "local"], first.clone()).await,
                    Some(FORWARD)
                );
                assert_eq!(
                    resolve(&["1", "0", "0", "10", "in-addr", "arpa"], first.clone()).await,
                    Some(FORWARD)
                );
                assert_eq!(
                    resolve(&["www", "dead", "example"], first.clone()).await,
                    None
                );
                // A new zone set (another forward zone): the old ones still route.
                let second = Arc::new(Settings {
                    zones: zones(&["lab.example"]),
                    ..settings(global, 300)
                });
                published.store(second.clone());
                assert_eq!(
                    resolve(&["host", "lab", "example"], second.clone()).await,
                    Some(FORWARD)
                );
                assert_eq!(
                    resolve(&["nas", "local"], second.clone()).await,
                    Some(FORWARD)
                );
                assert_eq!(resolve(&["other", "example"], second).await, Some(GLOBAL));
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
        assert_eq!(
            global_asked.load(Ordering::SeqCst),
            2,
            "www and other.example"
        );
        assert_eq!(
            forward_asked.load(Ordering::SeqCst),
            4,
            "the forward zones' names"
        );
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
                    refresh: false,
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

    /// RFC 8767 at the resolver: an expired answer whose upstream has gone away (its socket
    /// closed: the connected send is refused) is served stale (TTL 30, EDE 3, never stored in
    /// place of the expired one), the refresh behind it runs in the background and its failure
    /// is counted; the next miss gets the stale answer at once (failure recheck) and the shard
    /// still holds the original answer.
    #[test]
    fn rfc8767_an_expired_answer_is_served_stale_when_the_upstream_is_gone() {
        let (upstream, asked) = upstream([192, 0, 2, 7]);
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(move || async move {
                let settings = Arc::new(settings(upstream, 1));
                let metrics = Arc::new(CoreMetrics::default());
                let worker = Rc::new(Worker::new(
                    0,
                    Ownership::new(1, 1),
                    Arc::new(ArcSwap::new(settings.clone())),
                    metrics.clone(),
                    None,
                    Arc::new(AtomicBool::new(false)),
                ));
                glommio::spawn_local(worker.clone().run_refreshes()).detach();
                let message = query(&["stale", "example"]);
                let key = *Query::parse(&message).expect("parses").key();
                let first = worker.resolve(&key, &settings).await;
                assert_eq!(address_and_ttl(&first, &message), ([192, 0, 2, 7], 1));
                // The upstream's thread ends a second after its last query; the answer
                // expires after one.
                glommio::timer::sleep(Duration::from_millis(2500)).await;
                assert!(worker.serve_local(&key, Instant::now(), |_| ()).is_none());
                let stale = worker.resolve(&key, &settings).await;
                assert!(stale.is_stale());
                assert_eq!(stale.ede(), Some(kudurru_core::wire::ede::STALE_ANSWER));
                assert_eq!(address_and_ttl(&stale, &message), ([192, 0, 2, 7], 30));
                for _ in 0..200 {
                    if metrics.refresh_failures.load(Ordering::Relaxed) > 0 {
                        break;
                    }
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
                assert_eq!(metrics.refresh_failures.load(Ordering::Relaxed), 1);
                // Quiet now: stale at once, the original answer still in the shard.
                let again = worker.resolve(&key, &settings).await;
                assert!(again.is_stale());
                assert_eq!(metrics.stale_answers.load(Ordering::Relaxed), 2);
                assert!(worker.serve_local(&key, Instant::now(), |_| ()).is_none());
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "the first miss only reached it"
        );
    }

    /// A forwarding-loop probe that comes back in is refused on the miss path: counted for its
    /// upstream when it is this round's, never sent upstream, never cached.
    #[test]
    fn a_returning_loop_probe_is_refused_counted_and_not_forwarded() {
        let (addr, asked) = upstream([192, 0, 2, 1]);
        let metrics = Arc::new(CoreMetrics::default());
        let shared = metrics.clone();
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(move || async move {
                let snapshot = Arc::new(settings(addr, 300));
                let published: SharedSettings = Arc::new(ArcSwap::new(snapshot.clone()));
                let worker = Worker::new(
                    0,
                    Ownership::new(1, 1),
                    published,
                    shared.clone(),
                    None,
                    Arc::new(AtomicBool::new(false)),
                );
                shared.loop_probe.start_round(0xfeed);
                let probe = kudurru_core::loop_probe::probe_query(0xfeed, 2, 9);
                let key = *Query::parse(&probe).expect("parses").key();
                for _ in 0..2 {
                    let answer = worker.resolve(&key, &snapshot).await;
                    assert_eq!(answer.rcode(), kudurru_core::wire::rcode::REFUSED);
                    assert!(
                        worker.serve_local(&key, Instant::now(), |_| ()).is_none(),
                        "not cached"
                    );
                }
                // Another round's name is refused too, but not counted.
                let stale = kudurru_core::loop_probe::probe_query(0xbeef, 2, 9);
                let key = *Query::parse(&stale).expect("parses").key();
                let answer = worker.resolve(&key, &snapshot).await;
                assert_eq!(answer.rcode(), kudurru_core::wire::rcode::REFUSED);
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
        assert_eq!(metrics.loop_probe.arrivals(2), 2);
        assert_eq!(asked.load(Ordering::SeqCst), 0, "nothing went upstream");
    }
}
