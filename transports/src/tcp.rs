//! The TCP listener of one core (RFC 7766): pipelined queries answered as they complete.
//!
//! ```text
//! accept ─▶ connection task ─ read frame (idle deadline) ─▶ ingress ─┬ hit / local ─▶ writer
//!                                                                    └ miss ─▶ task ─▶ writer
//! writer task: frames from a bounded channel ─▶ socket (write deadline)
//! ```
//! A connection holds at most `tcp.maxPipelined` queries in flight; past that it stops reading,
//! so a client that does not read its answers stalls only itself. A client silent for
//! `tcp.idleTimeout`, or that takes longer than that to send a frame it started, is closed.
//! A `Drop` decision closes the connection (nothing is sent).
//!
//! DNS over TLS (RFC 7858) is the same connection loop on a rustls stream: the listener
//! accepts, the handshake must finish within `tls.handshakeTimeout` (a client that stalls in
//! it holds only its own task), then queries flow exactly as on TCP, with responses padded
//! for clients that ask (RFC 8467).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use futures_lite::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{Client, Decision, FrameBuffer, Stage, ingress};

use crate::metrics::{CoreMetrics, Transport};
use crate::runtime::TlsConfig;
use crate::upstream::{until, within};
use crate::worker::{Active, Worker};

/// Accepts connections until the task is dropped.
pub(crate) async fn serve(worker: Rc<Worker>, listener: TcpListener) {
    accept_loop(worker, listener, |worker, stream, peer| async move {
        connection(&worker, stream, peer, Transport::Tcp).await;
    })
    .await;
}

/// Accepts DNS-over-TLS connections until the task is dropped.
pub(crate) async fn serve_tls(worker: Rc<Worker>, listener: TcpListener, tls: TlsConfig) {
    accept_loop(worker, listener, move |worker, stream, peer| {
        let config = tls.load().dot.clone();
        async move {
            if let Some(stream) = handshake(&worker, stream, config).await {
                connection(&worker, stream, peer, Transport::Dot).await;
            }
        }
    })
    .await;
}

/// The accept loop of a stream listener (TCP, DoT, DoH): each connection runs `serve` in a task
/// of its own. All count against `tcp.maxConnectionsPerCore`.
pub(crate) async fn accept_loop<F, Fut>(worker: Rc<Worker>, listener: TcpListener, serve: F)
where
    F: Fn(Rc<Worker>, TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(error = %e, "tcp accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if worker.tcp_connections.get() >= worker.settings().tcp_max_connections {
            CoreMetrics::bump(&worker.metrics.tcp_refused);
            continue; // dropping the stream closes it
        }
        let _ = stream.set_nodelay(true);
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        worker.tcp_connections.set(worker.tcp_connections.get() + 1);
        let task = serve(worker.clone(), stream, peer);
        let worker = worker.clone();
        glommio::spawn_local(async move {
            task.await;
            worker.tcp_connections.set(worker.tcp_connections.get() - 1);
        })
        .detach();
    }
}

/// The server side of a TLS handshake, bounded by `tls.handshakeTimeout`; `None` (connection
/// closed) when it fails or takes too long.
pub(crate) async fn handshake(
    worker: &Worker,
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
) -> Option<futures_rustls::server::TlsStream<TcpStream>> {
    let acceptor = futures_rustls::TlsAcceptor::from(config);
    let deadline = Instant::now() + worker.settings().tls_handshake_timeout;
    match until(deadline, acceptor.accept(stream)).await {
        Some(Ok(stream)) => {
            CoreMetrics::bump(&worker.metrics.tls_handshakes);
            Some(stream)
        }
        Some(Err(e)) => {
            CoreMetrics::bump(&worker.metrics.tls_handshake_failures);
            tracing::debug!(error = %e, "tls handshake failed");
            None
        }
        None => {
            CoreMetrics::bump(&worker.metrics.tls_handshake_failures);
            tracing::debug!("tls handshake timed out");
            None
        }
    }
}

async fn connection<S>(worker: &Rc<Worker>, stream: S, peer: SocketAddr, transport: Transport)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let client = Client {
        addr: peer.ip(),
        datagram: false,
    };
    let (mut reader, writer) = futures_lite::io::split(stream);
    let settings = worker.settings();
    let pipelined = settings.tcp_max_pipelined.max(1);
    let (tx, rx) = local_channel::new_bounded::<Vec<u8>>(pipelined);
    let tx = Rc::new(tx);
    let writer_task = glommio::spawn_local(write_frames(writer, rx, worker.clone()));
    let permits = Rc::new(Semaphore::new(pipelined as u64));
    let mut frames = FrameReader::new();
    let mut out = Vec::with_capacity(1024);
    loop {
        let Some(message) = frames.next(worker, &mut reader).await else {
            break;
        };
        worker.metrics.query(transport);
        let Ok(permit) = permits.acquire_static_permit(1).await else {
            break;
        };
        let settings = worker.settings();
        let options = match transport {
            Transport::Dot => {
                ReplyOptions::encrypted(settings.edns_payload, settings.tcp_idle_timeout)
            }
            _ => ReplyOptions::tcp(settings.edns_payload, settings.tcp_idle_timeout),
        };
        let stage = Stage {
            local: &settings.local,
            options: &options,
            ratelimit: &settings.ratelimit,
            lameduck: worker.lameduck(),
        };
        let decision = ingress(
            &message,
            &stage,
            client,
            &mut worker.limiter.borrow_mut(),
            Instant::now(),
            &mut out,
        );
        match decision {
            Decision::Respond => {
                if !send_frame(worker, &tx, &out).await {
                    break;
                }
            }
            Decision::Drop => {
                worker.metrics.dropped();
                break;
            }
            Decision::Resolve(query) => {
                let now = Instant::now();
                let hit = worker.serve_local(query.key(), now, |answer| {
                    answer.write_response(&query, now, None, &options, &mut out)
                });
                if hit.is_some() {
                    if !send_frame(worker, &tx, &out).await {
                        break;
                    }
                    continue;
                }
                let (worker, tx) = (worker.clone(), tx.clone());
                glommio::spawn_local(async move {
                    let _active = Active::enter(&worker);
                    let _permit = permit;
                    let Ok(query) = Query::parse(&message) else {
                        return;
                    };
                    let answer = worker.resolve(query.key()).await;
                    let mut out = Vec::with_capacity(1024);
                    answer.write_response(&query, Instant::now(), None, &options, &mut out);
                    send_frame(&worker, &tx, &out).await;
                })
                .detach();
            }
        }
    }
    drop(tx);
    permits.close();
    // The writer ends when every pending answer was written (all senders dropped) or it failed.
    writer_task.await;
}

/// Most answer bytes gathered into one write.
const WRITE_BATCH: usize = 16 * 1024;

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

    /// The next message; `None` closes the connection (EOF, error, idle or slow client).
    async fn next<R: AsyncRead + Unpin>(
        &mut self,
        worker: &Worker,
        reader: &mut ReadHalf<R>,
    ) -> Option<Vec<u8>> {
        loop {
            if let Some(message) = self.frames.next_frame() {
                return Some(message);
            }
            // A frame is incomplete: wait for more, at most the idle timeout. A client that sent
            // part of a frame and stalls is closed the same way.
            let idle = worker.settings().tcp_idle_timeout;
            match within(idle, reader.read(self.frames.spare())).await {
                Some(Ok(0)) | Some(Err(_)) => return None,
                Some(Ok(n)) => self.frames.filled(n),
                None => {
                    CoreMetrics::bump(&worker.metrics.tcp_timeouts);
                    return None;
                }
            }
        }
    }
}

/// Queues one answer for the writer, prefixed with its length; `false` when the writer is gone.
async fn send_frame(worker: &Worker, tx: &LocalSender<Vec<u8>>, message: &[u8]) -> bool {
    worker
        .metrics
        .response(wire::header_rcode(message).unwrap_or(0));
    let mut frame = Vec::with_capacity(message.len() + 2);
    frame.extend_from_slice(&(message.len() as u16).to_be_bytes());
    frame.extend_from_slice(message);
    tx.send(frame).await.is_ok()
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: WriteHalf<W>,
    rx: local_channel::LocalReceiver<Vec<u8>>,
    worker: Rc<Worker>,
) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while let Some(frame) = rx.recv().await {
        // Gather what is already queued: one write for many pipelined answers, and each answer's
        // length and body in one segment (no Nagle/delayed-ACK stall).
        batch.clear();
        batch.extend_from_slice(&frame);
        while batch.len() < WRITE_BATCH {
            match futures_lite::future::poll_once(rx.recv()).await {
                Some(Some(frame)) => batch.extend_from_slice(&frame),
                _ => break,
            }
        }
        let deadline = Instant::now() + worker.settings().tcp_idle_timeout;
        // Flushed: a TLS stream holds written records until then.
        let write = async {
            writer.write_all(&batch).await?;
            writer.flush().await
        };
        match until(deadline, write).await {
            Some(Ok(())) => {}
            Some(Err(_)) => break,
            None => {
                CoreMetrics::bump(&worker.metrics.tcp_timeouts);
                break;
            }
        }
    }
    let _ = writer.close().await;
}
