//! The TCP listener of one core (RFC 7766): pipelined queries answered as they complete.
//!
//! ```text
//! accept ─▶ connection task ─ read frames (idle deadline) ─▶ ingress ─┬ hit / local ─▶ outbox
//!                                                                     └ miss ─▶ task ─▶ outbox
//! outbox (crate::outbox): a read's answers (or a miss's) ─▶ one send now; if the socket is
//!         full, a writer task finishes (write deadline) while the reader waits
//! ```
//! A connection holds at most `tcp.maxPipelined` queries in flight and stops reading while a
//! write waits on a full socket, so a client that does not read its answers stalls only itself. A client silent for
//! `tcp.idleTimeout`, or that takes longer than that to send a frame it started, is closed.
//! A `Drop` decision closes the connection (nothing is sent). When the core drains for
//! shutdown (crate::drain), the connection reads no more, answers what it read, and closes.
//!
//! DNS over TLS (RFC 7858) is the same connection loop on a rustls stream: the listener
//! accepts, the handshake must finish within `tls.handshakeTimeout` (a client that stalls in
//! it holds only its own task), then queries flow exactly as on TCP, with responses padded
//! for clients that ask (RFC 8467).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures_lite::AsyncReadExt;
use futures_lite::io::{AsyncRead, AsyncWrite, ReadHalf};
use glommio::net::TcpListener;
use glommio::sync::Semaphore;
use kudurru_core::wire::{Query, ReplyOptions};
use kudurru_core::zone::set::ServedZone;
use kudurru_core::{Client, Decision, FrameBuffer, Stage, ingress};

use crate::accept;
use crate::answer::{Answering, Lookup, Origin};
use crate::connections::Admission;
use crate::core_context::{Active, CoreContext};
use crate::deadline::within;
use crate::inbox::InboxTransport;
use crate::metrics::{AnswerSource, CoreMetrics, Transport};
use crate::outbox::Outbox;
use crate::querylog::Outcome;
use crate::tls::TlsConfig;
use crate::worker::Worker;

/// Accepts connections until the task is dropped.
pub(crate) async fn serve(worker: Rc<Worker>, listener: TcpListener) {
    accept::tcp(
        worker,
        listener,
        |worker, stream, peer, admission| async move {
            connection(&worker, stream, peer, None, &admission, Transport::Tcp).await;
        },
    )
    .await;
}

/// Accepts DNS-over-TLS connections until the task is dropped.
pub(crate) async fn serve_tls(worker: Rc<Worker>, listener: TcpListener, tls: TlsConfig) {
    accept::tcp(worker, listener, move |worker, stream, peer, admission| {
        let config = tls.load().dot.clone();
        async move {
            if let Some(stream) = accept::tls_handshake(worker.context(), stream, config).await {
                let sni = accept::tls_server_name(&stream);
                connection(&worker, stream, peer, sni, &admission, Transport::Dot).await;
            }
        }
    })
    .await;
}

/// Serves one connection from `peer`; `sni` is the TLS server name it sent.
async fn connection<S>(
    worker: &Rc<Worker>,
    stream: S,
    peer: SocketAddr,
    sni: Option<Rc<str>>,
    admission: &Admission,
    transport: Transport,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let client = Client {
        addr: peer.ip(),
        datagram: false,
        id: None,
        sni: sni.as_deref(),
    };
    let (mut reader, writer) = futures_lite::io::split(stream);
    // A connection-level value, read once per connection (the idle timeout, once per read);
    // each query reads the snapshot for itself below.
    let pipelined = worker.context().settings().tcp_max_pipelined.max(1) as u64;
    let outbox = Rc::new(Outbox::new(writer));
    let permits = Rc::new(Semaphore::new(pipelined));
    let mut frames = FrameReader::new();
    let mut out = Vec::with_capacity(1024);
    let origin = Origin { transport, peer };
    loop {
        let message = match frames.buffered() {
            Some(message) => message,
            None => {
                // Every whole frame of the last read is answered or on its way: the answers
                // so far go out in one write before waiting for more.
                Outbox::flush(
                    &outbox,
                    &worker.context().metrics,
                    &worker.context().settings,
                );
                if !outbox.room().await {
                    break; // the client does not read, or a write failed
                }
                // A drain for shutdown ends the reading: what was read is answered below.
                let next = futures_lite::future::or(
                    async { Some(frames.next(worker.context(), &mut reader).await) },
                    async {
                        admission.drained().await;
                        None
                    },
                )
                .await;
                let Some(Some(message)) = next else {
                    break;
                };
                message
            }
        };
        worker.context().metrics.query(transport);
        // The query's receipt: the pipeline's `now` too, and its answer's latency counts from it.
        let received = Instant::now();
        admission.touch(received);
        let Ok(permit) = permits.acquire_static_permit(1).await else {
            break;
        };
        // The query's snapshot, read once: a miss takes it on as an `Arc`.
        let context = worker.context();
        let settings = context.settings();
        let options = match transport {
            Transport::Dot => {
                ReplyOptions::encrypted(settings.edns_payload, settings.tcp_idle_timeout)
            }
            _ => ReplyOptions::tcp(settings.edns_payload, settings.tcp_idle_timeout),
        };
        let stage = Stage::new(&settings, &options, context.lameduck());
        let decision = ingress(
            &message,
            &stage,
            client,
            &mut context.limiter.borrow_mut(),
            received,
            &mut out,
        );
        let log = |outcome: Outcome<'_>, response: &[u8]| {
            origin.record(worker, &settings, &client, outcome, &message, response);
        };
        // Queues an answer written here, without waiting: counts and logs it.
        let reply = |outcome: Outcome<'_>, response: &[u8]| {
            outbox.push(&context.metrics, response);
            let rcode = kudurru_core::wire::header_rcode(response).unwrap_or(0);
            context.metrics.answered(
                transport,
                AnswerSource::of(outcome.source, rcode),
                received.elapsed(),
            );
            log(outcome, response);
        };
        match decision {
            Decision::Respond => reply(Outcome::LOCAL, &out),
            // Zone transfers are not served yet: REFUSED, as before the zones.
            Decision::Transfer { zone, .. } => {
                let Some(served) = settings.zones.served().get(zone).cloned() else {
                    log(Outcome::DROPPED, &[]);
                    break;
                };
                let (worker, outbox) = (worker.clone(), outbox.clone());
                glommio::spawn_local(async move {
                    let _active = Active::enter(worker.context());
                    let _permit = permit;
                    serve_transfer(&worker, &outbox, &served, &message, origin).await;
                })
                .detach();
            }
            Decision::Drop => {
                context.metrics.dropped();
                log(Outcome::DROPPED, &[]);
                break;
            }
            Decision::Refused { answered: true } => {
                context.metrics.acl_refused(true);
                reply(Outcome::LOCAL, &out);
            }
            Decision::Refused { answered: false } => {
                context.metrics.acl_refused(false);
                log(Outcome::DROPPED, &[]);
                break;
            }
            Decision::Blocked { blocked, answered } => {
                settings.policy.count(context.shard(), blocked);
                if !answered {
                    context.metrics.dropped();
                    log(Outcome::policy(blocked, false), &[]);
                    break;
                }
                reply(Outcome::policy(blocked, true), &out);
            }
            Decision::Control(_) if transport != Transport::Tcp => {
                // Over DoT these opcodes are not served (crate::inbox).
                if !kudurru_core::wire::write_header_error(
                    &message,
                    kudurru_core::wire::rcode::NOTIMP,
                    &mut out,
                ) {
                    log(Outcome::DROPPED, &[]);
                    break;
                }
                reply(Outcome::LOCAL, &out);
            }
            Decision::Control(_) => {
                let (worker, outbox) = (worker.clone(), outbox.clone());
                glommio::spawn_local(async move {
                    let _active = Active::enter(worker.context());
                    let _permit = permit;
                    let context = worker.context();
                    let answer = context.inbox.ask(&message, peer, InboxTransport::Tcp).await;
                    let settings = context.settings();
                    let client = Client {
                        addr: peer.ip(),
                        datagram: false,
                        id: None,
                        sni: None,
                    };
                    let Some(out) = answer else {
                        context.metrics.dropped();
                        origin.record(&worker, &settings, &client, Outcome::DROPPED, &message, &[]);
                        return;
                    };
                    outbox.push(&context.metrics, &out);
                    let rcode = kudurru_core::wire::header_rcode(&out).unwrap_or(0);
                    context.metrics.answered(
                        transport,
                        AnswerSource::of(Outcome::LOCAL.source, rcode),
                        received.elapsed(),
                    );
                    origin.record(&worker, &settings, &client, Outcome::LOCAL, &message, &out);
                    Outbox::flush(&outbox, &context.metrics, &context.settings);
                })
                .detach();
            }
            Decision::Resolve(_) | Decision::Chase { .. } => {
                let (query, lookup) = match decision {
                    Decision::Chase {
                        query,
                        blocked,
                        target,
                        ttl,
                    } => {
                        settings.policy.count(context.shard(), blocked);
                        let target = Box::new(target);
                        (
                            query,
                            Lookup::Chase {
                                target,
                                ttl,
                                blocked,
                            },
                        )
                    }
                    Decision::Resolve(query) => (query, Lookup::Own),
                    _ => unreachable!("matched above"),
                };
                let now = received;
                let to = Answering {
                    settings: &settings,
                    shard: context.shard(),
                    client,
                    options: &options,
                    limit: None,
                };
                match worker.serve_local(lookup.key(&query), now, |answer| {
                    lookup.write(&to, &query, answer, now, &mut out)
                }) {
                    Some(written) if written.sent() => {
                        reply(written.outcome(lookup.hit()), &out);
                        continue;
                    }
                    Some(written) => {
                        context.metrics.dropped();
                        log(written.outcome(lookup.hit()), &[]);
                        break;
                    }
                    None => {}
                }
                let (worker, outbox, sni) = (worker.clone(), outbox.clone(), sni.clone());
                let settings = Arc::clone(&settings);
                glommio::spawn_local(async move {
                    let _active = Active::enter(worker.context());
                    let _permit = permit;
                    let Ok(query) = Query::parse(&message) else {
                        return;
                    };
                    let started = Instant::now();
                    let answer = worker.resolve(lookup.key(&query), &settings).await;
                    let now = Instant::now();
                    let mut out = Vec::with_capacity(1024);
                    let context = worker.context();
                    let to = Answering {
                        settings: &settings,
                        shard: context.shard(),
                        client: Client {
                            addr: peer.ip(),
                            datagram: false,
                            id: None,
                            sni: sni.as_deref(),
                        },
                        options: &options,
                        limit: None,
                    };
                    // A cloaked RPZ drop sends nothing for this query; the connection goes on.
                    let written = lookup.write(&to, &query, &answer, now, &mut out);
                    let outcome =
                        written.outcome(lookup.missed(&query, &answer, &settings, started, now));
                    if !written.sent() {
                        context.metrics.dropped();
                        origin.record(&worker, &settings, &to.client, outcome, &message, &[]);
                        return;
                    }
                    outbox.push(&context.metrics, &out);
                    let rcode = kudurru_core::wire::header_rcode(&out).unwrap_or(0);
                    context.metrics.answered(
                        transport,
                        AnswerSource::of(outcome.source, rcode),
                        now.saturating_duration_since(received),
                    );
                    origin.record(&worker, &settings, &to.client, outcome, &message, &out);
                    Outbox::flush(&outbox, &context.metrics, &context.settings);
                })
                .detach();
            }
        }
    }
    // Answers still owed: the queries being resolved (each holds a permit until its answer is
    // queued), then everything queued, each write bounded as always; then the write side
    // closes.
    let _all = permits.acquire(pipelined).await;
    Outbox::flush(
        &outbox,
        &worker.context().metrics,
        &worker.context().settings,
    );
    outbox.close().await;
}

/// Serves an AXFR or IXFR (kudurru_core::zone::xfr) from `zone` to `peer`: each message
/// queued as it is built, waiting while the client has not read what is queued, yielding
/// between messages so other connections on the core go on.
async fn serve_transfer<W: AsyncWrite + Unpin + 'static>(
    worker: &Rc<Worker>,
    outbox: &Rc<Outbox<W>>,
    zone: &ServedZone,
    request: &[u8],
    origin: Origin,
) {
    let peer = origin.peer;
    let context = worker.context();
    // One query-log record per transfer: the request and its first message (or refusal).
    let log = |response: &[u8]| {
        let client = Client {
            addr: peer.ip(),
            datagram: false,
            id: None,
            sni: None,
        };
        let settings = context.settings();
        origin.record(
            worker,
            &settings,
            &client,
            Outcome::LOCAL,
            request,
            response,
        );
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut transfer = match zone.transfer(request, peer.ip(), now) {
        Ok(transfer) => transfer,
        Err(answer) => {
            CoreMetrics::bump(&context.metrics.transfers_refused);
            outbox.push(&context.metrics, &answer);
            log(&answer);
            Outbox::flush(outbox, &context.metrics, &context.settings);
            return;
        }
    };
    let mut first = true;
    while let Some(message) = transfer.next_message() {
        outbox.push_frame(&message);
        if std::mem::take(&mut first) {
            log(&message);
        }
        Outbox::flush(outbox, &context.metrics, &context.settings);
        if !outbox.room().await {
            return; // the client stopped reading, or a write failed
        }
        glommio::yield_if_needed().await;
    }
    context.metrics.response(0);
    CoreMetrics::bump(&context.metrics.transfers_served);
}

/// Splits a TCP byte stream into DNS messages (RFC 1035 §4.2.2 two-byte length prefix),
/// whatever the segment boundaries: bytes are read in large chunks into the core's
/// [`FrameBuffer`] and frames cut from them.
struct FrameReader {
    frames: FrameBuffer,
}

impl FrameReader {
    fn new() -> Self {
        Self {
            frames: FrameBuffer::new(),
        }
    }

    /// A whole message already read, if there is one.
    fn buffered(&mut self) -> Option<Vec<u8>> {
        self.frames.next_frame()
    }

    /// The next message; `None` closes the connection (EOF, error, idle or slow client).
    async fn next<R: AsyncRead + Unpin>(
        &mut self,
        context: &CoreContext,
        reader: &mut ReadHalf<R>,
    ) -> Option<Vec<u8>> {
        loop {
            if let Some(message) = self.frames.next_frame() {
                return Some(message);
            }
            // A frame is incomplete: wait for more, at most the idle timeout. A client that sent
            // part of a frame and stalls is closed the same way.
            let idle = context.settings().tcp_idle_timeout;
            match within(idle, reader.read(self.frames.spare())).await {
                Some(Ok(0)) | Some(Err(_)) => return None,
                Some(Ok(n)) => self.frames.filled(n),
                None => {
                    CoreMetrics::bump(&context.metrics.tcp_timeouts);
                    return None;
                }
            }
        }
    }
}
