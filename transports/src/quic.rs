//! QUIC on a core's own executor: quinn driven by glommio, for DNS over QUIC and DNS over
//! HTTP/3.
//!
//! ```text
//! SO_REUSEPORT UDP socket of this core ─▶ quinn::Endpoint (GlommioRuntime: timers, tasks and
//!   the socket all on this core) ─▶ crate::accept::quic: limit, current certificate,
//!   handshake deadline ─▶ connection task (doq::connection or doh::h3::serve_connection)
//! ```
//! quinn's runtime traits ask for `Send + Sync`, which glommio's timers and sockets are not.
//! Every quinn object an endpoint makes lives and dies on the core that made it (tasks are
//! spawned with `spawn_local`), so the glommio parts sit in `SendWrapper`s: a use from another
//! thread would panic instead of racing, and none happens. Datagrams move with quinn-udp's
//! `recvmsg`/`sendmsg` (GRO/GSO, ECN, pktinfo) on the non-blocking socket; when it runs dry,
//! the core sleeps on an io_uring poll for readability of the same socket (glommio's
//! `readable`, kudurru's patch), the way the UDP listener does. glommio has no writable
//! readiness for UDP, so a send that finds the buffer full backs off [`SEND_BACKOFF`].
//!
//! Each core keeps its own endpoint (its own connection IDs and stateless-reset key) on the
//! shared port. A client whose address changes may land on another core, which does not know
//! its connection: migration is off, and the steering program (when the limiter is on) keeps a
//! client prefix on one core. Address-validation tokens come from the one `quinn::ServerConfig`
//! all cores share per certificate.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, UdpPoller};
use send_wrapper::SendWrapper;

use crate::sys;

/// How long a send that found the socket buffer full waits before trying again.
pub(crate) const SEND_BACKOFF: Duration = Duration::from_micros(100);

/// quinn's runtime on the current glommio executor: every endpoint made with it must be made,
/// used and dropped on that executor's thread.
#[derive(Debug)]
pub struct GlommioRuntime;

impl Runtime for GlommioRuntime {
    fn new_timer(&self, at: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(Timer {
            at,
            armed: SendWrapper::new(None),
        })
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        glommio::spawn_local(future).detach();
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        Ok(Arc::new(Socket::new(socket)?))
    }
}

/// quinn's timer on a glommio timer, armed lazily.
///
/// quinn moves a connection's deadline with nearly every packet (the idle and loss timers),
/// mostly later. A later deadline is only recorded: the glommio timer already armed fires
/// early and is armed again for the rest. Only an earlier deadline touches glommio's timer
/// (a clock read and a re-insertion in its timer tree), which before was paid per packet.
struct Timer {
    /// quinn's deadline.
    at: Instant,
    /// The glommio timer and when it fires (at or before `at`); none until polled.
    armed: SendWrapper<Option<(Instant, glommio::timer::Timer)>>,
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer").field("at", &self.at).finish()
    }
}

impl AsyncTimer for Timer {
    fn reset(self: Pin<&mut Self>, at: Instant) {
        let this = self.get_mut();
        this.at = at;
        if let Some((fires, timer)) = this.armed.as_mut()
            && at < *fires
        {
            timer.reset(at.saturating_duration_since(Instant::now()));
            *fires = at;
        }
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            let (fires, timer) = match this.armed.as_mut() {
                Some(armed) => armed,
                None => {
                    let now = Instant::now();
                    if now >= this.at {
                        return Poll::Ready(());
                    }
                    let timer = glommio::timer::Timer::new(this.at - now);
                    this.armed.insert((this.at, timer))
                }
            };
            if Pin::new(timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
            // Fired: done, unless the deadline moved later meanwhile (then armed for the rest).
            let early = *fires < this.at;
            *this.armed = None;
            if !early {
                return Poll::Ready(());
            }
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()>>>;

/// One core's QUIC socket.
struct Socket {
    io: std::net::UdpSocket,
    state: UdpSocketState,
    /// glommio's handle on the same socket (a duplicate descriptor), for read readiness.
    glommio: SendWrapper<Rc<glommio::net::UdpSocket>>,
    /// The pending readiness wait, while the socket is dry.
    readable: SendWrapper<RefCell<Option<Wait>>>,
    /// The last receive took fewer datagrams than it had room for: the socket was empty, and
    /// the next receive waits for readiness first instead of asking the kernel again.
    dry: AtomicBool,
    /// Set when a send found the buffer full; senders back off until it clears.
    blocked: AtomicBool,
}

impl fmt::Debug for Socket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Socket").field("io", &self.io).finish()
    }
}

impl Socket {
    fn new(io: std::net::UdpSocket) -> io::Result<Self> {
        io.set_nonblocking(true)?;
        let state = UdpSocketState::new((&io).into())?;
        let glommio = sys::glommio_udp(OwnedFd::from(io.try_clone()?));
        Ok(Self {
            io,
            state,
            glommio: SendWrapper::new(Rc::new(glommio)),
            readable: SendWrapper::new(RefCell::new(None)),
            dry: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
        })
    }
}

impl AsyncUdpSocket for Socket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Poller {
            socket: self,
            backoff: SendWrapper::new(None),
        })
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let sent = self.state.send((&self.io).into(), transmit);
        if matches!(&sent, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.blocked.store(true, Ordering::Relaxed);
        }
        sent
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            // quinn receives until the socket reports it is empty; a batch with room left
            // already said so (a datagram that came since makes the wait ready at once).
            if !self.dry.swap(false, Ordering::Relaxed) {
                match self.state.recv((&self.io).into(), bufs, meta) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Ok(n) => {
                        let room = bufs.len().min(meta.len()).min(quinn::udp::BATCH_SIZE);
                        self.dry.store(n < room, Ordering::Relaxed);
                        return Poll::Ready(Ok(n));
                    }
                    error => return Poll::Ready(error),
                }
            }
            let mut readable = self.readable.borrow_mut();
            let wait = readable.get_or_insert_with(|| {
                let socket = self.glommio.clone();
                // The socket was just found empty: wait through the ring.
                Box::pin(async move {
                    let _ = socket.readable().await;
                })
            });
            match wait.as_mut().poll(cx) {
                Poll::Pending => {
                    // Still empty until the wait says otherwise.
                    self.dry.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                // Readable, or an error the next `recv` reports (or clears: ICMP errors).
                Poll::Ready(_) => *readable = None,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }
}

/// Write readiness for one connection: ready unless the last send found the buffer full.
struct Poller {
    socket: Arc<Socket>,
    backoff: SendWrapper<Option<glommio::timer::Timer>>,
}

impl fmt::Debug for Poller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Poller")
    }
}

impl UdpPoller for Poller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.socket.blocked.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        let timer = this
            .backoff
            .get_or_insert_with(|| glommio::timer::Timer::new(SEND_BACKOFF));
        match Pin::new(timer).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => {
                *this.backoff = None;
                this.socket.blocked.store(false, Ordering::Relaxed);
                Poll::Ready(Ok(()))
            }
        }
    }
}

/// A server endpoint on this core's socket `fd` (call on the core's executor). `server` makes
/// it accept connections at all; each is then accepted with the configuration current at the
/// time (see [`crate::accept::quic`]).
pub(crate) fn endpoint(fd: OwnedFd, server: &quinn::ServerConfig) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server.clone()),
        std::net::UdpSocket::from(fd),
        Arc::new(GlommioRuntime),
    )
}

/// A client endpoint on a UDP socket bound to `bind` (port 0 for any), for the current glommio
/// executor (kudurru-bench's QUIC flows).
pub fn client_endpoint(bind: SocketAddr) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        std::net::UdpSocket::bind(bind)?,
        Arc::new(GlommioRuntime),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{IO_MEMORY_PER_CORE, RING_DEPTH};
    use glommio::{LocalExecutorBuilder, Placement};

    /// Polls `timer` to completion.
    async fn fired(timer: &mut Pin<Box<dyn AsyncTimer>>) {
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
    }

    /// Polls `timer` once: it must not have fired.
    async fn arm(timer: &mut Pin<Box<dyn AsyncTimer>>) {
        std::future::poll_fn(|cx| {
            assert!(timer.as_mut().poll(cx).is_pending(), "fired too early");
            Poll::Ready(())
        })
        .await;
    }

    /// The lazy timer keeps quinn's contract: it fires at the last deadline it was given,
    /// whether that moved later (the armed timer fires early and is armed again) or earlier.
    #[test]
    fn the_timer_fires_at_its_last_deadline_moved_later_or_earlier() {
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(|| async {
                let start = Instant::now();
                let mut later = GlommioRuntime.new_timer(start + Duration::from_millis(20));
                arm(&mut later).await;
                later.as_mut().reset(start + Duration::from_millis(120));
                fired(&mut later).await;
                let elapsed = start.elapsed();
                assert!(
                    elapsed >= Duration::from_millis(120),
                    "fired at the first deadline: {elapsed:?}"
                );

                let start = Instant::now();
                let mut earlier = GlommioRuntime.new_timer(start + Duration::from_secs(30));
                arm(&mut earlier).await;
                earlier.as_mut().reset(start + Duration::from_millis(20));
                fired(&mut earlier).await;
                let elapsed = start.elapsed();
                assert!(elapsed >= Duration::from_millis(20), "{elapsed:?}");
                assert!(elapsed < Duration::from_secs(10), "kept the 30 s deadline");

                // A deadline already past fires at the first poll.
                let start = Instant::now();
                let mut past = GlommioRuntime.new_timer(start);
                fired(&mut past).await;
                assert!(start.elapsed() < Duration::from_secs(10));
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
    }
}
