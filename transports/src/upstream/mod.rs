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

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

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
    /// the timeouts and the TTL policy): fastest healthy first, next one on failure, around
    /// again up to [`PASSES`] times, SERVFAIL (cached briefly, RFC 9520) when every attempt failed or
    /// `upstream.resolveTimeout` passed.
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
        // The clock is read once per attempt and once when it ends; every other time on this path
        // (the attempt's deadline, the answer's storage time, the selector's) is one of those.
        let mut now = start;
        for index in (0..attempts).map(|attempt| order[attempt % order.len()]) {
            if now >= deadline {
                break;
            }
            if refused.contains(&index) {
                continue;
            }
            // The order indexes this snapshot's upstream set.
            let Some(&spec) = settings.upstreams.get(index) else {
                continue;
            };
            let attempt_deadline = deadline.min(now + settings.upstream_timeout);
            let counters = self.metrics.upstream(index);
            CoreMetrics::bump(&counters.queries);
            let result = ask(self, index, spec, key, now, attempt_deadline, &settings.ttl).await;
            let (result, ended) = match result {
                Ok((answer, ended)) => (Ok(answer), ended),
                Err(kind) => (Err(kind), Instant::now()),
            };
            let rtt = ended.saturating_duration_since(now);
            now = ended;
            {
                let (current, selector) = &mut *self.selector.borrow_mut();
                // Not when the selector follows another set (a reload since the order was taken).
                if current.get(index) == Some(&spec) {
                    match &result {
                        Ok(_) => selector.on_success(index, rtt),
                        Err(_) => selector.on_failure(index, ended, settings.upstream_timeout),
                    }
                }
            }
            match result {
                Ok(answer) => {
                    counters.observe(rtt);
                    return (answer, ended);
                }
                Err(kind) => {
                    counters.error(kind);
                    if kind == UpstreamError::BadReply {
                        refused.push(index);
                    }
                    tracing::debug!(upstream = %spec, query = ?key, error = kind.label(), "upstream attempt failed");
                }
            }
        }
        CoreMetrics::bump(&self.metrics.upstream_exhausted);
        let now = Instant::now();
        (CachedAnswer::failure(key, now, &settings.ttl), now)
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

/// One attempt at one upstream, started at `now`, bounded by `deadline`; the answer comes with
/// the time it was taken at.
async fn ask(
    upstreams: &Upstreams,
    index: usize,
    spec: UpstreamSpec,
    key: &CacheKey,
    now: Instant,
    deadline: Instant,
    policy: &TtlPolicy,
) -> Result<(CachedAnswer, Instant), UpstreamError> {
    let counters = upstreams.metrics.upstream(index);
    let outcome = match spec.protocol {
        UpstreamProtocol::Udp => {
            let pool = upstreams.udp_pool(index, spec.addr);
            within(deadline - now, ask_udp(&pool, key, policy, counters)).await
        }
        // TCP futures are boxed: their state would otherwise widen every UDP attempt's future.
        UpstreamProtocol::Tcp => {
            let pool = upstreams.tcp_pool(index, spec.addr);
            let ask = ask_tcp(&pool, key, policy, counters);
            until(deadline, Box::pin(ask)).await
        }
    };
    match outcome {
        None => Err(UpstreamError::Timeout),
        Some(Err(Attempt::Truncated)) => {
            CoreMetrics::bump(&counters.tcp_retries);
            let pool = upstreams.tcp_pool(index, spec.addr);
            let ask = ask_tcp(&pool, key, policy, counters);
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
) -> Result<(CachedAnswer, Instant), Attempt> {
    let exchange = pool.send(key).await.map_err(network)?;
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
