//! The upstream client of one core ([`Upstreams`]): the upstream set with its selector, one
//! query to one upstream over UDP (retried over TCP when truncated) or TCP (on the core's
//! reused, pipelined connection: [`tcp`]), and the retry loop over the upstream set.
//!
//! ```text
//! Upstreams::forward ─▶ selector order ─▶ ask ─┬ udp: UdpPool (sockets) ─┐
//!                                              └ tcp: TcpPool (connection) ┴▶ waiters (by ID)
//! ```
//!
//! Spoofing resistance: UDP queries go out on connected sockets (the kernel drops datagrams from
//! any other source) with kernel-chosen random source ports that rotate ([`udp`]) and a
//! random ID, and a reply must carry that ID and the exact question. Foreign replies are counted
//! and ignored, never accepted; the attempt keeps waiting for the genuine one until its deadline.

mod tcp;
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
use kudurru_core::{
    CacheKey, CachedAnswer, ReplyError, Selector, TtlPolicy, UpstreamOrder, UpstreamProtocol,
    UpstreamSpec,
};

use crate::deadline::{until, within};
use crate::metrics::{CoreMetrics, UpstreamCounters, UpstreamError};
use crate::settings::{Settings, SharedSettings};
use tcp::TcpPool;
use udp::UdpPool;
use waiters::Registration;

/// One core's upstream client: the upstream set and its selector, rebuilt when the published
/// snapshot's set changes, and this core's sockets and connections to each upstream, opened on
/// first use.
pub(crate) struct Upstreams {
    /// The published snapshot: only to tell whether a query's snapshot is the current one
    /// (the selector follows the current set), and the TCP connections' write timeout.
    settings: SharedSettings,
    metrics: Arc<CoreMetrics>,
    selector: RefCell<(Arc<[UpstreamSpec]>, Selector)>,
    udp: RefCell<HashMap<(usize, SocketAddr), Rc<UdpPool>>>,
    tcp: RefCell<HashMap<(usize, SocketAddr), Rc<TcpPool>>>,
}

impl Upstreams {
    /// The upstream set of `snapshot`, with no socket open yet.
    pub(crate) fn new(
        settings: SharedSettings,
        metrics: Arc<CoreMetrics>,
        snapshot: &Settings,
    ) -> Self {
        let upstreams = snapshot.upstreams.clone();
        let selector = Selector::new(upstreams.len(), rand::random());
        Self {
            settings,
            metrics,
            selector: RefCell::new((upstreams, selector)),
            udp: RefCell::new(HashMap::new()),
            tcp: RefCell::new(HashMap::new()),
        }
    }

    /// Resolves `key` over the upstream set of `settings` (the query's snapshot, which also gives
    /// the timeouts and the TTL policy): fastest healthy first, the next one when an attempt
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
        let order = self.order(settings, start);
        let attempts = order.len() * PASSES;
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
                let Some(&spec) = settings.upstreams.get(index) else {
                    continue;
                };
                CoreMetrics::bump(&self.metrics.upstream(index).queries);
                let connection = Rc::new(Cell::new(0));
                let attempt = ask(
                    self,
                    Target { index, spec },
                    key,
                    now,
                    deadline,
                    &settings.ttl,
                    connection.clone(),
                );
                open.push(Open {
                    index,
                    spec,
                    started: now,
                    timed_out: false,
                    connection,
                    // Boxed: attempts are kept side by side while they overlap.
                    attempt: Box::pin(attempt),
                });
                break;
            }
            if open.is_empty() {
                break;
            }
            // The newest attempt's timeout, when another may follow it; else the deadline.
            let newest = open.len() - 1;
            let wake = if next < attempts && !open[newest].timed_out {
                let timeout = self.attempt_timeout(open[newest].index, settings);
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
                    self.timed_out(late, now, settings);
                }
                continue;
            };
            let done = open.swap_remove(i);
            let (result, ended) = match result {
                Ok((answer, ended)) => (Ok(answer), ended),
                Err(kind) => (Err(kind), Instant::now()),
            };
            now = ended;
            let counters = self.metrics.upstream(done.index);
            let rtt = ended.saturating_duration_since(done.started);
            match result {
                Ok(answer) => {
                    self.with_selector(done.index, done.spec, |selector| {
                        selector.on_success(done.index, rtt);
                    });
                    counters.observe(rtt);
                    return (answer, ended);
                }
                // Already counted when its timeout passed.
                Err(UpstreamError::Timeout) if done.timed_out => {}
                Err(kind) => {
                    self.with_selector(done.index, done.spec, |selector| {
                        selector.on_failure(done.index, ended, settings.upstream_timeout);
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
            self.timed_out(late, now, settings);
        }
        CoreMetrics::bump(&self.metrics.upstream_exhausted);
        (CachedAnswer::failure(key, now, &settings.ttl), now)
    }

    /// How long an attempt at upstream `index` waits before the next attempt is sent (it stays
    /// open after that): three times the upstream's smoothed RTT, at least
    /// [`MIN_ATTEMPT_TIMEOUT`] and at most `upstream.timeout` (the whole of it while the RTT is
    /// unknown), as Unbound derives its timeouts from each server's RTT.
    fn attempt_timeout(&self, index: usize, settings: &Settings) -> Duration {
        let (current, selector) = &*self.selector.borrow();
        let srtt = match settings.upstreams.get(index) {
            Some(spec) if current.get(index) == Some(spec) => selector.srtt(index),
            _ => None,
        };
        srtt.map_or(settings.upstream_timeout, |srtt| {
            (srtt * 3)
                .max(MIN_ATTEMPT_TIMEOUT)
                .min(settings.upstream_timeout)
        })
    }

    /// Counts `late`, an attempt past its timeout at `now`, as a timeout of its upstream, and
    /// retires the TCP connection it waits on from new queries.
    fn timed_out(&self, late: &Open<'_>, now: Instant, settings: &Settings) {
        if late.connection.get() != 0 {
            self.tcp_pool(late.index, late.spec.addr)
                .retire(late.connection.get());
        }
        self.with_selector(late.index, late.spec, |selector| {
            selector.on_failure(late.index, now, settings.upstream_timeout);
        });
        self.metrics
            .upstream(late.index)
            .error(UpstreamError::Timeout);
        tracing::debug!(upstream = %late.spec, error = UpstreamError::Timeout.label(), "upstream attempt timed out; kept open");
    }

    /// Runs `f` on the core's selector when it follows the set `spec` (upstream `index`) is
    /// from: not after a reload changed the set since the query's order was taken.
    fn with_selector(&self, index: usize, spec: UpstreamSpec, f: impl FnOnce(&mut Selector)) {
        let (current, selector) = &mut *self.selector.borrow_mut();
        if current.get(index) == Some(&spec) {
            f(selector);
        }
    }

    /// The order in which to try the upstreams of `settings` at `now`: the core's selector's,
    /// rebuilt for a new set when `settings` is the published snapshot. A query admitted before
    /// a reload that changed the set keeps its own set, in a fresh selector's order, and leaves
    /// the core's selector to the current set (no rebuilding back and forth while such queries
    /// drain).
    fn order(&self, settings: &Settings, now: Instant) -> UpstreamOrder {
        let mut state = self.selector.borrow_mut();
        if !Arc::ptr_eq(&state.0, &settings.upstreams) {
            if *state.0 == *settings.upstreams {
                // The same set from another snapshot: compare by pointer from now on.
                state.0 = settings.upstreams.clone();
            } else if std::ptr::eq(settings, &**self.settings.load()) {
                *state = (
                    settings.upstreams.clone(),
                    Selector::new(settings.upstreams.len(), rand::random()),
                );
            } else {
                return Selector::new(settings.upstreams.len(), rand::random()).order(now);
            }
        }
        state.1.order(now)
    }

    /// The UDP socket pool for upstream `index` at `addr`.
    fn udp_pool(&self, index: usize, addr: SocketAddr) -> Rc<UdpPool> {
        self.udp
            .borrow_mut()
            .entry((index, addr))
            .or_insert_with(|| Rc::new(UdpPool::new(addr, self.metrics.clone(), index)))
            .clone()
    }

    /// The connection to TCP upstream `index` at `addr`.
    fn tcp_pool(&self, index: usize, addr: SocketAddr) -> Rc<TcpPool> {
        self.tcp
            .borrow_mut()
            .entry((index, addr))
            .or_insert_with(|| {
                Rc::new(TcpPool::new(
                    addr,
                    self.metrics.clone(),
                    self.settings.clone(),
                    index,
                ))
            })
            .clone()
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
    index: usize,
    spec: UpstreamSpec,
    started: Instant,
    /// Whether its timeout passed (counted then; it stays open until the resolve deadline).
    timed_out: bool,
    /// The serial number of the TCP connection it was sent on (0: none, or over UDP).
    connection: Rc<Cell<u64>>,
    attempt: Pin<Box<dyn Future<Output = AttemptResult> + 'a>>,
}

/// An attempt's end: the answer and when it came, or why there is none.
type AttemptResult = Result<(CachedAnswer, Instant), UpstreamError>;

/// Which upstream an attempt asks: its index in the set, and its spec.
#[derive(Clone, Copy)]
struct Target {
    index: usize,
    spec: UpstreamSpec,
}

/// One attempt at one upstream, started at `now`, bounded by `deadline`; the answer comes with
/// the time it was taken at. A query sent over TCP writes its connection's serial number to
/// `connection`.
async fn ask(
    upstreams: &Upstreams,
    target: Target,
    key: &CacheKey,
    now: Instant,
    deadline: Instant,
    policy: &TtlPolicy,
    connection: Rc<Cell<u64>>,
) -> AttemptResult {
    let Target { index, spec } = target;
    let counters = upstreams.metrics.upstream(index);
    let outcome = match spec.protocol {
        UpstreamProtocol::Udp => {
            let pool = upstreams.udp_pool(index, spec.addr);
            within(deadline - now, ask_udp(&pool, key, policy, counters)).await
        }
        // TCP futures are boxed: their state would otherwise widen every UDP attempt's future.
        UpstreamProtocol::Tcp => {
            let pool = upstreams.tcp_pool(index, spec.addr);
            let ask = ask_tcp(&pool, key, policy, counters, &connection);
            until(deadline, Box::pin(ask)).await
        }
    };
    match outcome {
        None => Err(UpstreamError::Timeout),
        Some(Err(Attempt::Truncated)) => {
            CoreMetrics::bump(&counters.tcp_retries);
            let pool = upstreams.tcp_pool(index, spec.addr);
            let ask = ask_tcp(&pool, key, policy, counters, &connection);
            match until(deadline, Box::pin(ask)).await {
                None => Err(UpstreamError::Timeout),
                Some(result) => result.map_err(Attempt::into_error),
            }
        }
        Some(result) => result.map_err(Attempt::into_error),
    }
}

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

/// One query on the core's connection to a TCP upstream (see [`tcp`]).
async fn ask_tcp(
    pool: &TcpPool,
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
        let now = Instant::now();
        match CachedAnswer::from_reply(&reply, key, registration.id(), now, policy) {
            Ok(answer) => return Ok((answer, now)),
            Err(e) if e.is_foreign() => {
                CoreMetrics::bump(&counters.mismatched);
                tracing::debug!(query = ?key, error = %e, "ignored foreign reply");
            }
            Err(ReplyError::Truncated) if over_tcp => {
                return Err(Attempt::Failed(UpstreamError::BadReply));
            }
            Err(e) => return Err(classify(e)),
        }
    }
}
