//! The upstream client: one query to one upstream over UDP (retried over TCP when truncated) or
//! TCP, and the retry loop over the upstream set.
//!
//! Spoofing resistance: UDP queries go out on connected sockets (the kernel drops datagrams from
//! any other source) with kernel-chosen random source ports that rotate ([`crate::pool`]) and a
//! random ID, and a reply must carry that ID and the exact question. Foreign replies are counted
//! and ignored, never accepted; the attempt keeps waiting for the genuine one until its deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kudurru_core::wire::write_upstream_query;
use kudurru_core::{CacheKey, CachedAnswer, ReplyError, TtlPolicy, UpstreamProtocol, UpstreamSpec};

use crate::metrics::{CoreMetrics, UpstreamCounters, UpstreamError};
use crate::pool::UdpPool;
use crate::worker::Worker;

/// Runs `future` until `deadline`; `None` when the deadline passed first. A future that is
/// ready at once arms no timer: on the hot paths (the next request already read, a body
/// already buffered) that is most of them.
pub(crate) async fn until<T>(deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
    bounded(future, || {
        deadline.saturating_duration_since(Instant::now())
    })
    .await
}

/// Runs `future` for at most `timeout`; `None` when it ran out first. Like [`until`], but the
/// clock is read only when the future has to wait: for the per-request deadlines of the
/// stream transports, which are mostly met at the first poll.
pub(crate) async fn within<T>(timeout: Duration, future: impl Future<Output = T>) -> Option<T> {
    bounded(future, || timeout).await
}

/// Polls `future` once; only if it must wait, races it against a timer of `left()`.
async fn bounded<T>(future: impl Future<Output = T>, left: impl FnOnce() -> Duration) -> Option<T> {
    let mut future = std::pin::pin!(future);
    if let Some(done) = futures_lite::future::poll_once(future.as_mut()).await {
        return Some(done);
    }
    let left = left();
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(left).await;
        None
    })
    .await
}

/// Passes over the upstream set before giving up (a lost datagram is retried, as stubs and
/// Unbound do), always bounded by `upstream.resolveTimeout`.
const PASSES: usize = 3;

/// Resolves `key` over the upstream set: fastest healthy first, next one on failure, around
/// again up to [`PASSES`] times, SERVFAIL (cached briefly, RFC 9520) when every attempt failed or
/// `upstream.resolveTimeout` passed.
pub(crate) async fn forward(worker: &Rc<Worker>, key: &CacheKey) -> CachedAnswer {
    let settings = worker.settings();
    let start = Instant::now();
    let deadline = start + settings.resolve_timeout;
    let (order, upstreams) =
        worker.with_selector(|upstreams, selector| (selector.order(start), upstreams.to_vec()));
    let attempts = order.len() * PASSES;
    // An upstream that answered with a failure is not asked again for this query; one that
    // timed out may have lost a datagram and is.
    let mut refused = vec![false; upstreams.len()];
    for index in order.into_iter().cycle().take(attempts) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if refused[index] {
            continue;
        }
        let spec = upstreams[index];
        let attempt_deadline = deadline.min(now + settings.upstream_timeout);
        let counters = worker.metrics.upstream(index);
        CoreMetrics::bump(&counters.queries);
        let result = ask(
            worker,
            index,
            spec,
            key,
            attempt_deadline,
            &settings.ttl,
            counters,
        )
        .await;
        let rtt = now.elapsed();
        worker.with_selector(|current, selector| {
            if current.get(index) != Some(&spec) {
                return; // the upstream set was replaced meanwhile
            }
            match &result {
                Ok(_) => selector.on_success(index, rtt),
                Err(_) => selector.on_failure(index, Instant::now(), settings.upstream_timeout),
            }
        });
        match result {
            Ok(answer) => {
                counters.observe(rtt);
                return answer;
            }
            Err(kind) => {
                counters.error(kind);
                refused[index] = kind == UpstreamError::BadReply;
                tracing::debug!(upstream = %spec, query = ?key, error = kind.label(), "upstream attempt failed");
            }
        }
    }
    CoreMetrics::bump(&worker.metrics.upstream_exhausted);
    CachedAnswer::failure(key, Instant::now(), &settings.ttl)
}

/// One attempt at one upstream, bounded by `deadline`.
async fn ask(
    worker: &Worker,
    index: usize,
    spec: UpstreamSpec,
    key: &CacheKey,
    deadline: Instant,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
) -> Result<CachedAnswer, UpstreamError> {
    let outcome = match spec.protocol {
        UpstreamProtocol::Udp => {
            let pool = worker.udp_pool(index, spec.addr);
            until(deadline, ask_udp(&pool, key, policy, counters)).await
        }
        UpstreamProtocol::Tcp => until(deadline, ask_tcp(spec.addr, key, policy)).await,
    };
    match outcome {
        None => Err(UpstreamError::Timeout),
        Some(Err(Attempt::Truncated)) => {
            CoreMetrics::bump(&counters.tcp_retries);
            match until(deadline, ask_tcp(spec.addr, key, policy)).await {
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
) -> Result<CachedAnswer, Attempt> {
    let exchange = pool.exchange().await.map_err(network)?;
    let mut query = Vec::with_capacity(key.question().len() + 24);
    write_upstream_query(key, exchange.id(), &mut query);
    exchange.send(&query).await.map_err(network)?;
    loop {
        let reply = exchange
            .reply()
            .await
            .ok_or(Attempt::Failed(UpstreamError::Network))?;
        if reply.is_empty() {
            return Err(Attempt::Failed(UpstreamError::Network));
        }
        match CachedAnswer::from_reply(&reply, key, exchange.id(), Instant::now(), policy) {
            Ok(answer) => return Ok(answer),
            Err(e) if e.is_foreign() => {
                CoreMetrics::bump(&counters.mismatched);
                tracing::debug!(upstream = %pool.addr(), error = %e, "ignored foreign reply");
            }
            Err(e) => return Err(classify(e)),
        }
    }
}

async fn ask_tcp(
    addr: SocketAddr,
    key: &CacheKey,
    policy: &TtlPolicy,
) -> Result<CachedAnswer, Attempt> {
    let id: u16 = rand::random();
    let mut query = Vec::with_capacity(key.question().len() + 24);
    write_upstream_query(key, id, &mut query);
    let mut stream = TcpStream::connect(addr).await.map_err(network)?;
    stream.set_nodelay(true).map_err(network)?;
    let mut frame = Vec::with_capacity(query.len() + 2);
    frame.extend_from_slice(&(query.len() as u16).to_be_bytes());
    frame.extend_from_slice(&query);
    stream.write_all(&frame).await.map_err(network)?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.map_err(network)?;
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).await.map_err(network)?;
    // Over our own TCP connection a foreign reply is simply a bad upstream.
    CachedAnswer::from_reply(&reply, key, id, Instant::now(), policy).map_err(|e| match e {
        ReplyError::Truncated => Attempt::Failed(UpstreamError::BadReply),
        other => classify(other),
    })
}
