//! The upstream client: one query to one upstream over UDP (retried over TCP when truncated) or
//! TCP, and the retry loop over the upstream set.
//!
//! Spoofing resistance: every UDP attempt uses a fresh connected socket (a kernel-chosen random
//! source port; the kernel drops datagrams from any other source) and a random ID, and a reply
//! must carry that ID and the exact question. Foreign replies are counted and ignored, never
//! accepted; the attempt keeps waiting for the genuine one until its deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpStream, UdpSocket};
use kudurru_core::wire::write_upstream_query;
use kudurru_core::{CacheKey, CachedAnswer, ReplyError, TtlPolicy, UpstreamProtocol, UpstreamSpec};

use crate::metrics::{CoreMetrics, UpstreamCounters, UpstreamError};
use crate::worker::Worker;

/// Largest UDP reply read from an upstream (kudurru advertises 1232; some servers send more).
const UPSTREAM_UDP_BUFFER: usize = 4096;

/// Runs `future` until `deadline`; `None` when the deadline passed first.
pub(crate) async fn until<T>(deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
    let left = deadline.saturating_duration_since(Instant::now());
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(left).await;
        None
    })
    .await
}

/// Resolves `key` over the upstream set: fastest healthy first, next one on failure, SERVFAIL
/// (cached briefly, RFC 9520) when every attempt failed or `upstream.resolveTimeout` passed.
pub(crate) async fn forward(worker: &Rc<Worker>, key: &CacheKey) -> CachedAnswer {
    let settings = worker.settings();
    let start = Instant::now();
    let deadline = start + settings.resolve_timeout;
    let (order, upstreams) =
        worker.with_selector(|upstreams, selector| (selector.order(start), upstreams.to_vec()));
    for index in order {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let spec = upstreams[index];
        let attempt_deadline = deadline.min(now + settings.upstream_timeout);
        let counters = worker.metrics.upstream(index);
        CoreMetrics::bump(&counters.queries);
        let result = ask(spec, key, attempt_deadline, &settings.ttl, counters).await;
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
                tracing::debug!(upstream = %spec, query = ?key, error = kind.label(), "upstream attempt failed");
            }
        }
    }
    CoreMetrics::bump(&worker.metrics.upstream_exhausted);
    CachedAnswer::failure(key, Instant::now(), &settings.ttl)
}

/// One attempt at one upstream, bounded by `deadline`.
async fn ask(
    spec: UpstreamSpec,
    key: &CacheKey,
    deadline: Instant,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
) -> Result<CachedAnswer, UpstreamError> {
    let id: u16 = rand::random();
    let mut query = Vec::with_capacity(key.question().len() + 24);
    write_upstream_query(key, id, &mut query);
    let outcome = match spec.protocol {
        UpstreamProtocol::Udp => {
            until(
                deadline,
                ask_udp(spec.addr, &query, key, id, policy, counters),
            )
            .await
        }
        UpstreamProtocol::Tcp => until(deadline, ask_tcp(spec.addr, &query, key, id, policy)).await,
    };
    match outcome {
        None => Err(UpstreamError::Timeout),
        Some(Err(Attempt::Truncated)) => {
            CoreMetrics::bump(&counters.tcp_retries);
            match until(deadline, ask_tcp(spec.addr, &query, key, id, policy)).await {
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
    addr: SocketAddr,
    query: &[u8],
    key: &CacheKey,
    id: u16,
    policy: &TtlPolicy,
    counters: &UpstreamCounters,
) -> Result<CachedAnswer, Attempt> {
    let local: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).map_err(network)?;
    socket.connect(addr).await.map_err(network)?;
    socket.send(query).await.map_err(network)?;
    let mut buf = vec![0u8; UPSTREAM_UDP_BUFFER];
    loop {
        let n = socket.recv(&mut buf).await.map_err(network)?;
        match CachedAnswer::from_reply(&buf[..n], key, id, Instant::now(), policy) {
            Ok(answer) => return Ok(answer),
            Err(e) if e.is_foreign() => {
                CoreMetrics::bump(&counters.mismatched);
                tracing::debug!(upstream = %addr, error = %e, "ignored foreign reply");
            }
            Err(e) => return Err(classify(e)),
        }
    }
}

async fn ask_tcp(
    addr: SocketAddr,
    query: &[u8],
    key: &CacheKey,
    id: u16,
    policy: &TtlPolicy,
) -> Result<CachedAnswer, Attempt> {
    let mut stream = TcpStream::connect(addr).await.map_err(network)?;
    stream.set_nodelay(true).map_err(network)?;
    let mut frame = Vec::with_capacity(query.len() + 2);
    frame.extend_from_slice(&(query.len() as u16).to_be_bytes());
    frame.extend_from_slice(query);
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
