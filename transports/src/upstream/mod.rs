//! The upstream client of one core ([`Upstreams`]): the upstream sets with their selectors,
//! one query to one upstream over UDP (retried over TCP when truncated) or TCP (on the core's
//! reused, pipelined connection: [`tcp`]), and the retry loop over an upstream set.
//!
//! ```text
//! Upstreams::forward ─▶ Zones::route ─┬ Global: `upstreams` ──────────┐
//!                                     └ Forward(i): zone i's upstreams ┴▶ its selector's order
//!   ─▶ ask ─┬ udp: UdpPool (sockets) ─┐
//!           └ tcp: TcpPool (connection) ┴▶ waiters (by ID)
//! ```
//!
//! A forward zone's upstreams are asked exactly as the global ones are (the same attempts,
//! timeouts and passes), with a selector of their own per zone; when all of them fail the
//! answer is SERVFAIL, never the global upstreams' (a forward zone is often a name the
//! public DNS must not see). Sockets and connections are per address: a forward zone's
//! upstream that is also a global upstream shares its sockets and its counters; the others
//! share one counter slot ([`FORWARD_ZONES`]).
//!
//! Spoofing resistance: UDP queries go out on connected sockets (the kernel drops datagrams from
//! any other source) with kernel-chosen random source ports that rotate ([`udp`]) and a
//! random ID, and a reply must carry that ID and the exact question. Foreign replies are counted
//! and ignored, never accepted; the attempt keeps waiting for the genuine one until its deadline.

mod dot;
mod health;
mod https;
mod quic;
mod tcp;
pub mod tls;
mod udp;
mod waiters;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use kudurru_core::wire::write_upstream_query;
use kudurru_core::zone::{Route, Zones};
use kudurru_core::{
    CacheKey, CachedAnswer, ReplyError, Selector, TtlPolicy, UpstreamOrder, UpstreamProtocol,
    UpstreamSpec, UpstreamStrategy,
};
use std::sync::atomic::Ordering::Relaxed;

use crate::deadline::{until, within};
use crate::metrics::{CoreMetrics, FORWARD_ZONES, UpstreamCounters, UpstreamError};
use crate::settings::{Settings, SharedSettings};
use dot::DotPool;
use https::HttpsPool;
use quic::QuicPool;
use tcp::{Dial, PlainTcp, StreamPool, TcpPool};
use udp::UdpPool;
use waiters::Registration;

/// One core's upstream client: the global upstream set and its selector, rebuilt when the
/// published snapshot's set changes, one selector per forward zone, following the published
/// zones, and this core's sockets and connections to each upstream, opened on first use.
pub(crate) struct Upstreams {
    /// The published snapshot: only to tell whether a query's snapshot is the current one
    /// (the selectors follow the current sets), and the TCP connections' write timeout.
    settings: SharedSettings,
    metrics: Arc<CoreMetrics>,
    selector: RefCell<(Arc<[UpstreamSpec]>, Selector)>,
    forwards: RefCell<ForwardSelectors>,
    /// By counter slot (an index in the global set, or [`FORWARD_ZONES`]) and address.
    udp: RefCell<HashMap<(usize, SocketAddr), Rc<UdpPool>>>,
    tcp: RefCell<HashMap<(usize, SocketAddr), Rc<TcpPool>>>,
    /// Encrypted upstreams, by counter slot and the whole spec (the TLS name and path are
    /// part of what a connection is).
    dot: PoolMap<DotPool>,
    https: PoolMap<HttpsPool>,
    quic: PoolMap<QuicPool>,
}

type PoolMap<P> = RefCell<HashMap<(usize, UpstreamSpec), Rc<P>>>;

/// The pool for `spec` in `map`, made by `make` on first use.
fn pool<P>(map: &PoolMap<P>, slot: usize, spec: &UpstreamSpec, make: impl FnOnce() -> P) -> Rc<P> {
    let mut map = map.borrow_mut();
    if let Some(pool) = map.get(&(slot, spec.clone())) {
        return pool.clone();
    }
    let pool = Rc::new(make());
    map.insert((slot, spec.clone()), pool.clone());
    pool
}

/// The selectors of the forward zones of one `Zones` (the published one's, once a query under
/// it came): `sets[i]` is `zones.forwards()[i]`'s upstreams and their selector.
struct ForwardSelectors {
    zones: Arc<Zones>,
    sets: Vec<(Arc<[UpstreamSpec]>, Selector)>,
}

impl ForwardSelectors {
    /// The selectors of `zones`' forward zones, each taken over from `old` when a set there
    /// has the same upstreams (a zone change publishes new `Zones`; the health of upstreams
    /// that stayed must not be forgotten each time), else fresh. Linear in the number of
    /// forward zones (delegations with glue are forward zones too, and a zone may hold many):
    /// run once per published zone set, on the first miss routed to a forward zone.
    fn follow(zones: Arc<Zones>, old: Vec<(Arc<[UpstreamSpec]>, Selector)>) -> Self {
        let mut kept: HashMap<Arc<[UpstreamSpec]>, Vec<Selector>> = HashMap::new();
        for (set, selector) in old {
            kept.entry(set).or_default().push(selector);
        }
        let sets = zones
            .forwards()
            .iter()
            .map(|forward| {
                let selector = kept
                    .get_mut(&forward.upstreams)
                    .and_then(Vec::pop)
                    .unwrap_or_else(|| Selector::new(forward.upstreams.len(), rand::random()));
                (forward.upstreams.clone(), selector)
            })
            .collect();
        Self { zones, sets }
    }
}

/// The upstream set one miss is resolved over: where [`Zones::route`] sent it, and its
/// upstreams (from the query's snapshot).
#[derive(Clone, Copy)]
struct UpstreamSet<'s> {
    route: Route,
    upstreams: &'s Arc<[UpstreamSpec]>,
}

impl<'s> UpstreamSet<'s> {
    /// Where a miss for `key` goes under `settings`. A forward index the zones do not hold
    /// (they are the same `Zones` the route came from, so never) gives an empty set: SERVFAIL.
    fn of(key: &CacheKey, settings: &'s Settings) -> Self {
        let route = settings.zones.route(key.qname());
        let upstreams = match route {
            Route::Global => &settings.upstreams,
            Route::Forward(i) => settings
                .zones
                .forward(i)
                .map_or(&*NO_UPSTREAMS, |forward| &forward.upstreams),
        };
        Self { route, upstreams }
    }
}

/// The upstream at `index` in the set a miss for `key` goes to under `settings` (what
/// `CachedAnswer::answered_from` names), for the query log.
pub(crate) fn upstream_at<'s>(
    key: &CacheKey,
    settings: &'s Settings,
    index: usize,
) -> Option<&'s UpstreamSpec> {
    UpstreamSet::of(key, settings).upstreams.get(index)
}

static NO_UPSTREAMS: std::sync::LazyLock<Arc<[UpstreamSpec]>> =
    std::sync::LazyLock::new(|| Arc::from(Vec::new()));

impl Upstreams {
    /// The upstream set of `snapshot`, with no socket open yet.
    pub(crate) fn new(
        settings: SharedSettings,
        metrics: Arc<CoreMetrics>,
        snapshot: &Settings,
    ) -> Self {
        let upstreams = snapshot.upstreams.clone();
        let selector = Selector::new(upstreams.len(), rand::random());
        let forwards = ForwardSelectors::follow(snapshot.zones.clone(), Vec::new());
        Self {
            settings,
            metrics,
            selector: RefCell::new((upstreams, selector)),
            forwards: RefCell::new(forwards),
            udp: RefCell::new(HashMap::new()),
            tcp: RefCell::new(HashMap::new()),
            dot: RefCell::new(HashMap::new()),
            https: RefCell::new(HashMap::new()),
            quic: RefCell::new(HashMap::new()),
        }
    }

    /// Resolves `key` over the upstream set of `settings` (the query's snapshot, which also gives
    /// the timeouts and the TTL policy) that [`Zones::route`] names: the global upstreams or
    /// a forward zone's. In the order of `upstream.strategy` among the healthy upstreams (the
    /// first two at once under `parallel`), the next one when an attempt
    /// fails or outlasts its upstream's attempt timeout ([`attempt_timeout`]), around again up
    /// to [`PASSES`] times; SERVFAIL (cached briefly, RFC 9520) when every attempt failed or
    /// `upstream.resolveTimeout` passed.
    ///
    /// Attempts overlap: one that outlasts its timeout stays open until the resolve deadline
    /// while the next is sent, and the first good reply to any of them is the answer (as
    /// Unbound keeps its earlier queries open). A steadily slow upstream is therefore answered
    /// at its own pace instead of being asked again and again and dropped as "late".
    pub(crate) async fn forward(
        &self,
        key: &CacheKey,
        settings: &Settings,
    ) -> (CachedAnswer, Instant) {
        let start = Instant::now();
        let deadline = start + settings.resolve_timeout;
        let set = UpstreamSet::of(key, settings);
        let order = self.order(set, settings);
        let attempts = order.len() * PASSES;
        // `parallel` sends the first two attempts at once; the others one at a time.
        let first_wave = match settings.upstream_strategy {
            UpstreamStrategy::Parallel if order.len() > 1 => 2,
            _ => 1,
        };
        // An upstream that answered with a failure is not asked again for this query; one that
        // timed out may have lost a datagram and is.
        // A list rather than a flag per upstream: empty (no allocation) on nearly every miss; a
        // zeroed `Vec<bool>` was a `calloc`, which glibc serves without its per-thread cache.
        let mut refused: Vec<usize> = Vec::new();
        let mut open: Vec<Open<'_>> = Vec::new();
        let mut next = 0;
        // The clock is read once per attempt and once when one ends or its timeout passes;
        // every other time on this path is one of those.
        let mut now = start;
        loop {
            if now >= deadline {
                break;
            }
            // Send the next attempt, unless every one is sent.
            while next < attempts {
                let index = order[next % order.len()];
                next += 1;
                if refused.contains(&index) {
                    continue;
                }
                // The order indexes this snapshot's upstream set.
                let Some(spec) = set.upstreams.get(index) else {
                    continue;
                };
                let slot = counter_slot(set.route, index, spec, settings);
                CoreMetrics::bump(&self.metrics.upstream(slot).queries);
                let connection = Rc::new(Cell::new(0));
                let attempt = ask(
                    self,
                    Target { slot, spec },
                    key,
                    now,
                    deadline,
                    &settings.ttl,
                    connection.clone(),
                );
                open.push(Open {
                    index,
                    slot,
                    spec,
                    started: now,
                    timed_out: false,
                    connection,
                    // Boxed: attempts are kept side by side while they overlap.
                    attempt: Box::pin(attempt),
                });
                if open.len() >= first_wave || next >= first_wave {
                    break;
                }
            }
            if open.is_empty() {
                break;
            }
            // The newest attempt's timeout, when another may follow it; else the deadline.
            let newest = open.len() - 1;
            let wake = if next < attempts && !open[newest].timed_out {
                let timeout = self.attempt_timeout(set, open[newest].index, settings);
                deadline.min(open[newest].started + timeout)
            } else {
                deadline
            };
            let ended = until(
                wake,
                std::future::poll_fn(|cx| {
                    for (i, open) in open.iter_mut().enumerate() {
                        if let Poll::Ready(result) = open.attempt.as_mut().poll(cx) {
                            return Poll::Ready((i, result));
                        }
                    }
                    Poll::Pending
                }),
            )
            .await;
            let Some((i, result)) = ended else {
                // The newest attempt outlasted its timeout: it stays open, the next one goes.
                now = Instant::now();
                let late = &mut open[newest];
                if !late.timed_out && now < deadline {
                    late.timed_out = true;
                    self.timed_out(set, late, settings);
                }
                continue;
            };
            let done = open.swap_remove(i);
            let (result, ended) = match result {
                Ok((answer, ended)) => (Ok(answer), ended),
                Err(kind) => (Err(kind), Instant::now()),
            };
            now = ended;
            let counters = self.metrics.upstream(done.slot);
            let rtt = ended.saturating_duration_since(done.started);
            match result {
                Ok(answer) => {
                    self.with_selector(set, done.index, done.spec, |selector| {
                        selector.on_success(done.index, rtt);
                    });
                    counters.observe(rtt);
                    return (answer.answered_by(done.index, rtt), ended);
                }
                // Already counted when its timeout passed.
                Err(UpstreamError::Timeout) if done.timed_out => {}
                Err(kind) => {
                    self.with_selector(set, done.index, done.spec, |selector| {
                        selector.on_failure(done.index, settings.upstream_timeout);
                    });
                    counters.error(kind);
                    if kind == UpstreamError::BadReply {
                        refused.push(done.index);
                    }
                    tracing::debug!(upstream = %done.spec, query = ?key, error = kind.label(), "upstream attempt failed");
                }
            }
        }
        // Attempts still open at the deadline time out now (those past their own timeout were
        // counted then).
        let now = Instant::now();
        for late in open.iter().filter(|open| !open.timed_out) {
            self.timed_out(set, late, settings);
        }
        CoreMetrics::bump(&self.metrics.upstream_exhausted);
        (CachedAnswer::failure(key, now, &settings.ttl), now)
    }

    /// How long an attempt at upstream `index` waits before the next attempt is sent (it stays
    /// open after that): three times the upstream's smoothed RTT, at least
    /// [`MIN_ATTEMPT_TIMEOUT`] and at most `upstream.timeout` (the whole of it while the RTT is
    /// unknown), as Unbound derives its timeouts from each server's RTT.
    fn attempt_timeout(&self, set: UpstreamSet<'_>, index: usize, settings: &Settings) -> Duration {
        let mut srtt = None;
        if let Some(spec) = set.upstreams.get(index) {
            self.with_selector(set, index, spec, |selector| srtt = selector.srtt(index));
        }
        srtt.map_or(settings.upstream_timeout, |srtt| {
            (srtt * 3)
                .max(MIN_ATTEMPT_TIMEOUT)
                .min(settings.upstream_timeout)
        })
    }

    /// Counts `late`, an attempt past its timeout, as a timeout of its upstream, and
    /// retires the TCP connection it waits on from new queries.
    fn timed_out(&self, set: UpstreamSet<'_>, late: &Open<'_>, settings: &Settings) {
        if late.connection.get() != 0 {
            self.retire(late.slot, late.spec, late.connection.get());
        }
        self.with_selector(set, late.index, late.spec, |selector| {
            selector.on_failure(late.index, settings.upstream_timeout);
        });
        self.metrics
            .upstream(late.slot)
            .error(UpstreamError::Timeout);
        tracing::debug!(upstream = %late.spec, error = UpstreamError::Timeout.label(), "upstream attempt timed out; kept open");
    }

    /// Runs `f` on the core's selector of `set` when it follows the set `spec` (upstream
    /// `index`) is from: not after a reload changed the set since the query's order was taken.
    fn with_selector(
        &self,
        set: UpstreamSet<'_>,
        index: usize,
        spec: &UpstreamSpec,
        f: impl FnOnce(&mut Selector),
    ) {
        match set.route {
            Route::Global => {
                let (current, selector) = &mut *self.selector.borrow_mut();
                if current.get(index) == Some(spec) {
                    let was_healthy = selector.is_healthy(index);
                    f(selector);
                    let healthy = selector.is_healthy(index);
                    self.metrics
                        .upstream(index)
                        .down
                        .store(u64::from(!healthy), Relaxed);
                    if was_healthy && !healthy {
                        tracing::warn!(upstream = %spec, "upstream out of rotation after consecutive failures; probed every upstream.healthCheckInterval");
                    }
                }
            }
            Route::Forward(zone) => {
                let mut forwards = self.forwards.borrow_mut();
                if let Some((current, selector)) = forwards.sets.get_mut(zone)
                    && Arc::ptr_eq(current, set.upstreams)
                {
                    f(selector);
                }
            }
        }
    }

    /// The order in which to try the upstreams of `settings` at `now`: the core's selector's,
    /// rebuilt for a new set when `settings` is the published snapshot. A query admitted before
    /// a reload that changed the set keeps its own set, in a fresh selector's order, and leaves
    /// the core's selector to the current set (no rebuilding back and forth while such queries
    /// drain).
    ///
    /// A forward zone's selector follows the published zones the same way: the selectors are
    /// matched to the forward zones of a newly published `Zones` when the first query under it
    /// comes, keeping the state of every set that did not change.
    fn order(&self, set: UpstreamSet<'_>, settings: &Settings) -> UpstreamOrder {
        let strategy = settings.upstream_strategy;
        if let Route::Forward(zone) = set.route {
            let mut forwards = self.forwards.borrow_mut();
            if !Arc::ptr_eq(&forwards.zones, &settings.zones) {
                if std::ptr::eq(settings, &**self.settings.load()) {
                    let old = std::mem::take(&mut forwards.sets);
                    *forwards = ForwardSelectors::follow(settings.zones.clone(), old);
                } else {
                    return Selector::new(set.upstreams.len(), rand::random()).order(strategy);
                }
            }
            return match forwards.sets.get_mut(zone) {
                Some((_, selector)) => selector.order(strategy),
                None => UpstreamOrder::new(),
            };
        }
        let mut state = self.selector.borrow_mut();
        if !Arc::ptr_eq(&state.0, &settings.upstreams) {
            if *state.0 == *settings.upstreams || std::ptr::eq(settings, &**self.settings.load()) {
                self.follow_global(&mut state, &settings.upstreams);
            } else {
                return Selector::new(settings.upstreams.len(), rand::random()).order(strategy);
            }
        }
        state.1.order(strategy)
    }

    /// Points the core's global selector at `upstreams`: the same set from another snapshot
    /// keeps its state (compared by pointer from now on); another set (the published one)
    /// starts a fresh selector.
    fn follow_global(
        &self,
        state: &mut (Arc<[UpstreamSpec]>, Selector),
        upstreams: &Arc<[UpstreamSpec]>,
    ) {
        if *state.0 == **upstreams {
            state.0 = upstreams.clone();
            return;
        }
        *state = (
            upstreams.clone(),
            Selector::new(upstreams.len(), rand::random()),
        );
        for index in 0..upstreams.len() {
            self.metrics.upstream(index).down.store(0, Relaxed);
        }
    }

    /// Retires connection `serial` to `spec` (counted in `slot`) from new queries: an
    /// attempt on it outlasted its timeout.
    fn retire(&self, slot: usize, spec: &UpstreamSpec, serial: u64) {
        match spec.protocol {
            UpstreamProtocol::Udp | UpstreamProtocol::Tcp => {
                self.tcp_pool(slot, spec.addr).retire(serial);
            }
            UpstreamProtocol::Tls => self.dot_pool(slot, spec).retire(serial),
            UpstreamProtocol::Https => self.https_pool(slot, spec).retire(serial),
            UpstreamProtocol::Quic | UpstreamProtocol::H3 => {
                self.quic_pool(slot, spec).retire(serial);
            }
        }
    }

    /// The core's connection to the DoT upstream `spec`, counted in `slot`.
    fn dot_pool(&self, slot: usize, spec: &UpstreamSpec) -> Rc<DotPool> {
        pool(&self.dot, slot, spec, || {
            DotPool::new(
                spec.clone(),
                self.metrics.clone(),
                self.settings.clone(),
                slot,
            )
        })
    }

    /// The core's connection to the DoH (HTTP/2) upstream `spec`, counted in `slot`.
    fn https_pool(&self, slot: usize, spec: &UpstreamSpec) -> Rc<HttpsPool> {
        pool(&self.https, slot, spec, || {
            HttpsPool::new(
                spec.clone(),
                self.metrics.clone(),
                self.settings.clone(),
                slot,
            )
        })
    }

    /// The core's connection to the DoQ or DoH3 upstream `spec`, counted in `slot`.
    fn quic_pool(&self, slot: usize, spec: &UpstreamSpec) -> Rc<QuicPool> {
        pool(&self.quic, slot, spec, || {
            QuicPool::new(
                spec.clone(),
                self.metrics.clone(),
                self.settings.clone(),
                slot,
            )
        })
    }

    /// The UDP socket pool for the upstream at `addr`, counted in `slot`.
    fn udp_pool(&self, slot: usize, addr: SocketAddr) -> Rc<UdpPool> {
        self.udp
            .borrow_mut()
            .entry((slot, addr))
            .or_insert_with(|| Rc::new(UdpPool::new(addr, self.metrics.clone(), slot)))
            .clone()
    }

    /// The connection to the TCP upstream at `addr`, counted in `slot`.
    fn tcp_pool(&self, slot: usize, addr: SocketAddr) -> Rc<TcpPool> {
        self.tcp
            .borrow_mut()
            .entry((slot, addr))
            .or_insert_with(|| {
                Rc::new(TcpPool::new(
                    PlainTcp(addr),
                    self.metrics.clone(),
                    self.settings.clone(),
                    slot,
                ))
            })
            .clone()
    }
}

/// Where upstream `index` of `route`'s set is counted (and which sockets it uses): its index
/// in the global set; for a forward zone's upstream, the index of the same upstream in the
/// global set when it is there (the same server, the same counters and sockets), else
/// [`FORWARD_ZONES`].
fn counter_slot(route: Route, index: usize, spec: &UpstreamSpec, settings: &Settings) -> usize {
    match route {
        Route::Global => index,
        Route::Forward(_) => settings
            .upstreams
            .iter()
            .position(|global| global == spec)
            .unwrap_or(FORWARD_ZONES),
    }
}

/// Passes over the upstream set before giving up (a lost datagram is retried, as stubs and
/// Unbound do), always bounded by `upstream.resolveTimeout`.
const PASSES: usize = 3;

/// The shortest wait before a second attempt is sent, however fast the upstream usually is: a
/// brief stall of a fast upstream does not double the queries sent to the set.
const MIN_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(200);

/// An attempt in flight, with what its end is counted against.
struct Open<'a> {
    /// Its upstream's index in the set.
    index: usize,
    /// Its upstream's counter slot ([`counter_slot`]).
    slot: usize,
    spec: &'a UpstreamSpec,
    started: Instant,
    /// Whether its timeout passed (counted then; it stays open until the resolve deadline).
    timed_out: bool,
    /// The serial number of the TCP connection it was sent on (0: none, or over UDP).
    connection: Rc<Cell<u64>>,
    attempt: Pin<Box<dyn Future<Output = AttemptResult> + 'a>>,
}

/// An attempt's end: the answer and when it came, or why there is none.
type AttemptResult = Result<(CachedAnswer, Instant), UpstreamError>;

/// Which upstream an attempt asks: its counter slot ([`counter_slot`]), and its spec.
#[derive(Clone, Copy)]
struct Target<'a> {
    slot: usize,
    spec: &'a UpstreamSpec,
}

/// One attempt at one upstream, started at `now`, bounded by `deadline`; the answer comes with
/// the time it was taken at. A query sent over TCP writes its connection's serial number to
/// `connection`.
async fn ask(
    upstreams: &Upstreams,
    target: Target<'_>,
    key: &CacheKey,
    now: Instant,
    deadline: Instant,
    policy: &TtlPolicy,
    connection: Rc<Cell<u64>>,
) -> AttemptResult {
    let Target { slot, spec } = target;
    let counters = upstreams.metrics.upstream(slot);
    let outcome = match spec.protocol {
        UpstreamProtocol::Udp => {
            let pool = upstreams.udp_pool(slot, spec.addr);
            within(deadline - now, ask_udp(&pool, key, policy, counters)).await
        }
        // TCP futures are boxed: their state would otherwise widen every UDP attempt's future.
        UpstreamProtocol::Tcp => {
            let pool = upstreams.tcp_pool(slot, spec.addr);
            let ask = ask_tcp(&pool, key, policy, counters, &connection);
            until(deadline, Box::pin(ask)).await
        }
        UpstreamProtocol::Tls => {
            let pool = upstreams.dot_pool(slot, spec);
            let ask = pool.ask(key, policy, counters, &connection);
            until(deadline, Box::pin(ask)).await
        }
        UpstreamProtocol::Https => {
            let pool = upstreams.https_pool(slot, spec);
            let ask = pool.ask(key, policy, counters, &connection);
            until(deadline, Box::pin(ask)).await
        }
        UpstreamProtocol::Quic | UpstreamProtocol::H3 => {
            let pool = upstreams.quic_pool(slot, spec);
            let ask = pool.ask(key, policy, counters, &connection);
            until(deadline, Box::pin(ask)).await
        }
    };
    match outcome {
        None => Err(UpstreamError::Timeout),
        Some(Err(Attempt::Truncated)) => {
            CoreMetrics::bump(&counters.tcp_retries);
            let pool = upstreams.tcp_pool(slot, spec.addr);
            let ask = ask_tcp(&pool, key, policy, counters, &connection);
            match until(deadline, Box::pin(ask)).await {
                None => Err(UpstreamError::Timeout),
                Some(result) => result.map_err(Attempt::into_error),
            }
        }
        Some(result) => result.map_err(Attempt::into_error),
    }
}

/// Why an attempt ended without an answer, before it is counted.
enum Attempt {
    Truncated,
    Failed(UpstreamError),
}

impl Attempt {
    fn into_error(self) -> UpstreamError {
        match self {
            Self::Truncated => UpstreamError::BadReply,
            Self::Failed(e) => e,
        }
    }
}

fn classify(error: ReplyError) -> Attempt {
    match error {
        ReplyError::Truncated => Attempt::Truncated,
        _ => Attempt::Failed(UpstreamError::BadReply),
    }
}

fn network<E>(_: E) -> Attempt {
    Attempt::Failed(UpstreamError::Network)
}

async fn ask_udp(
    pool: &UdpPool,
    key: &CacheKey,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
) -> Result<(CachedAnswer, Instant), Attempt> {
    let exchange = pool.exchange().await.map_err(network)?;
    let mut query = Vec::with_capacity(key.question().len() + 24);
    write_upstream_query(key, exchange.id(), &mut query);
    exchange.send(&query).await.map_err(network)?;
    answer_from(exchange.registration(), key, policy, counters, false).await
}

/// One query on the core's connection to a TCP or DoT upstream (see [`tcp`]).
async fn ask_tcp<D: Dial>(
    pool: &StreamPool<D>,
    key: &CacheKey,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
    connection: &Cell<u64>,
) -> Result<(CachedAnswer, Instant), Attempt> {
    let exchange = pool.send(key).await.map_err(network)?;
    connection.set(exchange.connection_serial());
    let answer = answer_from(exchange.registration(), key, policy, counters, true).await;
    // Not reached when the attempt times out: the exchange is dropped waiting.
    exchange.replied();
    answer
}

/// Waits for the reply to `key` among those carrying the registration's ID: a reply to another
/// question (a spoof that guessed the ID, or a confused upstream) is counted and ignored, and the
/// wait goes on until the attempt's deadline; an empty reply means the socket or connection
/// failed. Over TCP a truncated reply is a bad one (nothing is cut for want of room there).
async fn answer_from(
    registration: &Registration,
    key: &CacheKey,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
    over_tcp: bool,
) -> Result<(CachedAnswer, Instant), Attempt> {
    loop {
        let reply = registration.reply().await;
        if reply.is_empty() {
            return Err(Attempt::Failed(UpstreamError::Network));
        }
        if let Some(judged) = judge(&reply, registration.id(), key, policy, counters, over_tcp) {
            return judged;
        }
    }
}

/// What `reply` to the query for `key` sent with `id` makes of the attempt; `None`: it is a
/// foreign reply (counted and ignored; the wait goes on).
fn judge(
    reply: &[u8],
    id: u16,
    key: &CacheKey,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
    over_stream: bool,
) -> Option<Result<(CachedAnswer, Instant), Attempt>> {
    let now = Instant::now();
    match CachedAnswer::from_reply(reply, key, id, now, policy) {
        Ok(answer) => Some(Ok((answer, now))),
        Err(e) if e.is_foreign() => {
            CoreMetrics::bump(&counters.mismatched);
            tracing::debug!(query = ?key, error = %e, "ignored foreign reply");
            None
        }
        Err(ReplyError::Truncated) if over_stream => {
            Some(Err(Attempt::Failed(UpstreamError::BadReply)))
        }
        Err(e) => Some(Err(classify(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kudurru_core::zone::ForwardZone;

    fn forward(apex: &str, upstream: &str) -> ForwardZone {
        ForwardZone {
            apex: kudurru_core::policy::name::to_wire(apex)
                .expect("a test name")
                .into(),
            upstreams: vec![upstream.parse().expect("an upstream URL")].into(),
        }
    }

    /// A new zone set (any zone change publishes one) keeps each forward zone's health and
    /// RTT where its upstreams did not change, wherever the zone now sits in the list; a
    /// new or retargeted zone starts fresh.
    #[test]
    fn forward_selectors_keep_the_state_of_sets_that_did_not_change() {
        let first = Arc::new(Zones::new(
            Vec::new(),
            vec![
                forward("a.example", "udp://127.0.0.1:5301"),
                forward("b.example", "udp://127.0.0.1:5302"),
                forward("c.example", "udp://127.0.0.1:5303"),
            ],
        ));
        let mut selectors = ForwardSelectors::follow(first.clone(), Vec::new());
        assert_eq!(selectors.sets.len(), first.forwards().len());
        for (set, selector) in &mut selectors.sets {
            let port = set[0].addr.port();
            selector.on_success(0, Duration::from_millis(u64::from(port - 5300)));
        }
        let second = Arc::new(Zones::new(
            Vec::new(),
            vec![
                forward("new.example", "udp://127.0.0.1:5304"),
                forward("c.example", "udp://127.0.0.1:5309"),
                forward("b.example", "udp://127.0.0.1:5302"),
                forward("a.example", "udp://127.0.0.1:5301"),
            ],
        ));
        let selectors = ForwardSelectors::follow(second.clone(), selectors.sets);
        assert!(Arc::ptr_eq(&selectors.zones, &second));
        for (zone, (set, selector)) in second.forwards().iter().zip(&selectors.sets) {
            assert!(Arc::ptr_eq(set, &zone.upstreams));
            let kept = match set[0].addr.port() {
                5301 => Some(Duration::from_millis(1)),
                5302 => Some(Duration::from_millis(2)),
                _ => None,
            };
            assert_eq!(selector.srtt(0), kept, "{}", set[0]);
        }
    }
}
