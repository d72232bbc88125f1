//! A TCP or DoT flow (RFC 7766, RFC 7858): one persistent connection at a time, queries
//! pipelined on it up to `--streams` in flight, replies matched in any order. DoT is the same
//! flow on a rustls stream: the handshake (bounded by `--timeout`, failures counted as `tls`)
//! comes before the first query, and each reconnect resumes the TLS session when it can.
//!
//! ```text
//! flow task (writer): schedule ─▶ frames ─▶ socket      reader task: socket ─▶ frames ─▶ check
//!        ▲                                                     │
//!        └──────────── wake (an answer freed room) ────────────┘
//! ```
//! A connection that fails or closes loses the queries in flight on it (counted as `closed`);
//! the flow reconnects and goes on. A write that cannot finish within `--timeout` (a target
//! that stopped reading) ends the connection the same way.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::io::{AsyncRead, AsyncWrite, ReadHalf};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use kudurru_core::FrameBuffer;

use crate::doh;
use crate::inflight::InFlight;
use crate::pipe::{Carrier, Failures, Inbox, Pipe};
use crate::queries::{Asked, QueryMix};
use crate::quic::QuicClient;
use crate::run::{Clock, Flow, Load, Plan, sleep_until};
use crate::tally::{ErrorKind, Progress, Tally};
use crate::target::Protocol;

/// Queries written per write call at most.
const FRAMES_PER_WRITE: usize = 64;
/// Pause before reconnecting after a failed connect.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// Longest sleep, so an interrupt is noticed promptly.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// State the writer and the reader of one flow share (one core, no await while borrowed).
struct Shared {
    inflight: InFlight,
    tally: Tally,
    closed: bool,
    /// Why the first failed TLS handshake failed (logged once at the end).
    tls_failure: Option<String>,
}

/// A connection: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<futures_rustls::client::TlsStream<TcpStream>>),
    /// One request per query: DoH (HTTP/2 or HTTP/3) or DoQ.
    Pipe(Box<Pipe>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
            Self::Pipe(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
            Self::Pipe(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s).poll_flush(cx),
            Self::Pipe(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_close(cx),
            Self::Tls(s) => Pin::new(s).poll_close(cx),
            Self::Pipe(s) => Pin::new(s).poll_close(cx),
        }
    }
}

/// Runs `future` until `deadline`; `None` when the deadline passed first.
async fn until<T>(deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
    let left = deadline.saturating_duration_since(Instant::now());
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(left).await;
        None
    })
    .await
}

/// Why a connection could not be set up.
enum Setup {
    /// TCP connect failed or timed out.
    Connect,
    /// The TLS or QUIC handshake (or the HTTP/2 or HTTP/3 setup after it) failed or timed out.
    Tls(String),
}

/// Opens one connection to the plan's target, bounded by `--timeout`.
async fn connect(
    plan: &Plan,
    quic: Option<&QuicClient>,
    uri: &Rc<str>,
    failures: &Failures,
) -> Result<Stream, Setup> {
    let deadline = Instant::now() + plan.timeout;
    let protocol = plan.target.protocol;
    let inbox = Rc::new(RefCell::new(Inbox::default()));
    let pipe = |carrier| {
        Stream::Pipe(Box::new(Pipe::new(
            carrier,
            inbox.clone(),
            failures.clone(),
        )))
    };
    let timed_out = || Setup::Tls("timed out".to_owned());
    if let Some(quic) = quic {
        let setup = quic.connect(
            plan.target.addr,
            &plan.target.server_name,
            protocol,
            uri.clone(),
            plan.method,
            &inbox,
        );
        return match until(deadline, setup).await {
            Some(Ok(carrier)) => Ok(pipe(carrier)),
            Some(Err(e)) => Err(Setup::Tls(e)),
            None => Err(timed_out()),
        };
    }
    let Some(Ok(stream)) = until(deadline, TcpStream::connect(plan.target.addr)).await else {
        return Err(Setup::Connect);
    };
    let _ = stream.set_nodelay(true);
    let Some(tls) = &plan.tls else {
        return Ok(Stream::Plain(stream));
    };
    let connector = futures_rustls::TlsConnector::from(tls.config.clone());
    let setup = async {
        let stream = connector
            .connect(tls.server_name.clone(), stream)
            .await
            .map_err(|e| e.to_string())?;
        if protocol != Protocol::Https {
            return Ok(Stream::Tls(Box::new(stream)));
        }
        if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err("the server did not negotiate HTTP/2 (ALPN h2)".to_owned());
        }
        let h2 = doh::start(stream, uri, plan.method, &inbox, failures);
        Ok(pipe(Carrier::H2(h2)))
    };
    match until(deadline, setup).await {
        Some(Ok(stream)) => Ok(stream),
        Some(Err(e)) => Err(Setup::Tls(e)),
        None => Err(timed_out()),
    }
}

/// Waits for a wake from the reader, at most until `deadline_ns`.
async fn wait(clock: Clock, wake: &LocalReceiver<()>, deadline_ns: u64) {
    let deadline = clock.instant(deadline_ns).min(Instant::now() + MAX_SLEEP);
    let _ = until(deadline, wake.recv()).await;
}

/// Runs one TCP flow to its end and returns what it counted.
pub(crate) async fn flow(flow: Flow) -> Result<Tally, String> {
    let plan = flow.plan.clone();
    let mut rng = flow.rng();
    let shared = Rc::new(RefCell::new(Shared {
        inflight: InFlight::new(&mut rng),
        tally: Tally::new(),
        closed: false,
        tls_failure: None,
    }));
    let mut cursor = flow.first_question();
    let mut next = 0u64;
    let scheduled = match plan.load {
        Load::Open { rate } => flow.scheduled(rate),
        Load::Closed { .. } => 0,
    };
    let timeout_ns = plan.timeout.as_nanos() as u64;
    let duration_ns = plan.duration.as_nanos() as u64;
    let mut frames = Vec::with_capacity(FRAMES_PER_WRITE * 64);
    let mut query = Vec::with_capacity(512);
    let mut sending = true;
    sleep_until(flow.clock, 0).await;
    // DoH: the request URI, and requests that delivered no answer (reported once at the end).
    let uri: Rc<str> = plan.target.uri().into();
    let failures: Failures = Rc::default();
    // QUIC: one client endpoint (one UDP socket) per flow, for all its connections.
    let quic = match (&plan.tls, plan.target.protocol.is_quic()) {
        (Some(tls), true) => Some(QuicClient::new(plan.target.addr, &tls.config)?),
        _ => None,
    };
    'connections: loop {
        let now = flow.clock.now_ns();
        if sending && !flow.sending(now) {
            sending = false;
            shared.borrow_mut().tally.sending_ns = now.min(duration_ns);
        }
        if !sending {
            break;
        }
        let stream = match connect(&plan, quic.as_ref(), &uri, &failures).await {
            Ok(stream) => stream,
            Err(failure) => {
                let kind = match failure {
                    Setup::Connect => ErrorKind::Connect,
                    Setup::Tls(reason) => {
                        shared.borrow_mut().tls_failure.get_or_insert(reason);
                        ErrorKind::Tls
                    }
                };
                shared.borrow_mut().tally.error(kind, 1);
                Progress::add(&flow.progress.failed, 1);
                let pause = flow
                    .clock
                    .instant(duration_ns)
                    .min(Instant::now() + RECONNECT_PAUSE);
                glommio::timer::sleep(pause.saturating_duration_since(Instant::now())).await;
                continue;
            }
        };
        let (reader, mut writer) = futures_lite::io::split(stream);
        let (wake_tx, wake_rx) = local_channel::new_bounded(1);
        shared.borrow_mut().closed = false;
        let reader = glommio::spawn_local(read_replies(
            reader,
            shared.clone(),
            plan.mix.clone(),
            flow.clock,
            flow.progress.clone(),
            wake_tx,
        ));
        loop {
            let now = flow.clock.now_ns();
            if sending && !flow.sending(now) {
                sending = false;
                shared.borrow_mut().tally.sending_ns = now.min(duration_ns);
            }
            let next_expiry = {
                let mut state = shared.borrow_mut();
                let expired = state.inflight.expire(now, timeout_ns) as u64;
                state.tally.timeouts += expired;
                Progress::add(&flow.progress.failed, expired);
                if state.closed {
                    break;
                }
                if !sending && state.inflight.outstanding() == 0 {
                    break 'connections;
                }
                state.inflight.next_expiry(timeout_ns).unwrap_or(u64::MAX)
            };
            if !sending {
                wait(flow.clock, &wake_rx, next_expiry).await;
                continue;
            }
            // Frame what is due.
            frames.clear();
            let mut written = 0u64;
            let mut fresh = 0u64;
            {
                let mut state = shared.borrow_mut();
                let state = &mut *state;
                while (written as usize) < FRAMES_PER_WRITE {
                    let stamp = match plan.load {
                        Load::Open { rate } => {
                            let due = flow.intended_ns(rate, next);
                            if due > now || next >= scheduled {
                                break;
                            }
                            next += 1;
                            if state.inflight.outstanding() >= plan.streams {
                                state.tally.error(ErrorKind::Backlog, 1);
                                Progress::add(&flow.progress.failed, 1);
                                continue;
                            }
                            due
                        }
                        Load::Closed { concurrency } => {
                            let limit = flow.concurrency(concurrency).min(plan.streams);
                            if state.inflight.outstanding() >= limit {
                                break;
                            }
                            now
                        }
                    };
                    let asked = plan.mix.pick(&mut rng, &mut cursor);
                    let Some(id) = state.inflight.start(asked, stamp, now) else {
                        state.tally.error(ErrorKind::IdsExhausted, 1);
                        break;
                    };
                    plan.mix.write_query(asked, id, &mut query);
                    frames.extend_from_slice(&(query.len() as u16).to_be_bytes());
                    frames.extend_from_slice(&query);
                    written += 1;
                    fresh += u64::from(matches!(asked, Asked::Fresh(_)));
                }
            }
            if written == 0 {
                let mut wake = next_expiry.min(duration_ns);
                if let Load::Open { rate } = plan.load
                    && next < scheduled
                {
                    wake = wake.min(flow.intended_ns(rate, next));
                }
                wait(flow.clock, &wake_rx, wake).await;
                continue;
            }
            let write_deadline = Instant::now() + plan.timeout;
            let ok = matches!(
                until(write_deadline, async {
                    writer.write_all(&frames).await?;
                    writer.flush().await
                })
                .await,
                Some(Ok(()))
            );
            {
                let mut state = shared.borrow_mut();
                // Counted as sent even when the write failed part-way: the queries were offered
                // and are lost with the connection below.
                state.tally.sent += written;
                state.tally.fresh += fresh;
                Progress::add(&flow.progress.sent, written);
                if !ok {
                    state.closed = true;
                }
            }
        }
        drop(reader);
        let mut state = shared.borrow_mut();
        let lost = state.inflight.abandon_all() as u64;
        state.tally.error(ErrorKind::Closed, lost);
        Progress::add(&flow.progress.failed, lost);
    }
    // Open loop: queries due while no connection was up were offered but never sent (after an
    // interrupt the rest of the schedule was never due).
    if matches!(plan.load, Load::Open { .. }) && !flow.stop.load(Ordering::Relaxed) {
        let unsent = scheduled.saturating_sub(next);
        shared.borrow_mut().tally.error(ErrorKind::Backlog, unsent);
    }
    shared.borrow_mut().tally.http_failures = std::mem::take(&mut *failures.borrow_mut());
    // Once per process: every flow meets the same certificate.
    static TLS_FAILURE_SHOWN: AtomicBool = AtomicBool::new(false);
    if let Some(reason) = shared.borrow_mut().tls_failure.take()
        && !TLS_FAILURE_SHOWN.swap(true, Ordering::Relaxed)
    {
        eprintln!(
            "kudurru-bench: TLS handshake with {} failed: {reason}",
            plan.target
        );
    }
    Ok(std::mem::take(&mut shared.borrow_mut().tally))
}

/// Reads replies off one connection until it closes (then wakes the writer one last time).
async fn read_replies(
    mut reader: ReadHalf<Stream>,
    shared: Rc<RefCell<Shared>>,
    mix: Arc<QueryMix>,
    clock: Clock,
    progress: Arc<Progress>,
    wake: LocalSender<()>,
) {
    let mut buffer = FrameBuffer::new();
    loop {
        let n = match reader.read(buffer.spare()).await {
            Ok(0) | Err(_) => {
                shared.borrow_mut().closed = true;
                let _ = wake.try_send(());
                return;
            }
            Ok(n) => n,
        };
        buffer.filled(n);
        let arrived = clock.now_ns();
        let mut state = shared.borrow_mut();
        let state = &mut *state;
        let before = state.tally.answered;
        while let Some(message) = buffer.next_frame() {
            let outcome = state.inflight.finish(&message, &mix);
            state.tally.record(outcome, arrived);
        }
        Progress::add(&progress.answered, state.tally.answered - before);
        let _ = wake.try_send(());
    }
}
