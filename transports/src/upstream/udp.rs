//! Per-core pools of connected UDP sockets to each upstream.
//!
//! Opening, binding, connecting and closing a socket per upstream query cost a quarter of the
//! cache-miss path (measured with perf, docs/benchmarks.md). Each core instead keeps
//! [`SOCKETS_PER_UPSTREAM`] connected sockets per upstream, each with its own kernel-chosen
//! random source port and a reader task that hands replies to the waiting query by message ID
//! (it sleeps on the socket's multishot poll and reads with non-blocking `recvmmsg`).
//! A socket is replaced by a fresh one (new random port) after [`ROTATE_AFTER`] queries; the old
//! one keeps reading until its pending exchanges end, so an off-path attacker faces a moving port as well as a random ID
//! and the question check; see docs/operations.md for the trade-off against a port per query.
//!
//! ```text
//! ask ─▶ pick socket (round robin) ─▶ random free ID ─▶ register waiter ─▶ send
//! reader task: recvmmsg ─▶ waiter for that ID? ─ yes ─▶ hand bytes over (the waiter validates)
//!                                          └ no ──▶ count as mismatched, drop
//! ```

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::net::UdpSocket;
use glommio::task::JoinHandle;

use super::waiters::{Registration, Waiters};
use crate::metrics::CoreMetrics;
use crate::sys;

/// Connected sockets kept per upstream per core.
pub(crate) const SOCKETS_PER_UPSTREAM: usize = 8;
/// Queries after which a socket is replaced by one with a new source port.
pub(crate) const ROTATE_AFTER: u32 = 4096;
/// Room for one reply; a longer one arrives cut short.
const REPLY_BUFFER: usize = 4096;
/// Replies one non-blocking `recvmmsg` takes at most; fewer means the socket is empty.
const REPLIES_PER_RECEIVE: usize = sys::RECV_SOME_MAX;

struct PooledSocket {
    socket: Rc<UdpSocket>,
    waiters: Waiters,
    sent: Cell<u32>,
    reader: JoinHandle<()>,
}

impl Drop for PooledSocket {
    fn drop(&mut self) {
        self.reader.cancel();
    }
}

impl PooledSocket {
    async fn open(addr: SocketAddr, metrics: Arc<CoreMetrics>, index: usize) -> io::Result<Self> {
        let local: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = Rc::new(UdpSocket::bind(local)?);
        socket.connect(addr).await?;
        let waiters = Waiters::default();
        let reader = {
            let (socket, waiters) = (socket.clone(), waiters.clone());
            glommio::spawn_local(async move {
                let fd = socket.as_raw_fd();
                // Armed once for the socket's life: waiting for the next reply submits nothing
                // and arms nothing in the kernel (a receive through the ring did both on every
                // cache miss). The poll posts a completion per reply; this socket gets one reply
                // per query, so none is wasted on a busy socket.
                let readiness = socket.readiness();
                let mut buf = vec![0u8; REPLIES_PER_RECEIVE * REPLY_BUFFER];
                let mut lens = [0usize; REPLIES_PER_RECEIVE];
                loop {
                    let Ok(n) = sys::try_recv_some(fd, &mut buf, &mut lens) else {
                        waiters.fail_all();
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                        continue;
                    };
                    for (reply, len) in buf.chunks_exact(REPLY_BUFFER).zip(&lens[..n]) {
                        if !waiters.deliver(&reply[..*len]) {
                            CoreMetrics::bump(&metrics.upstream(index).mismatched);
                        }
                    }
                    // A short batch emptied the socket: sleep until the next reply arrives.
                    if n < REPLIES_PER_RECEIVE && readiness.wait().await.is_err() {
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                    }
                }
            })
            .detach()
        };
        Ok(Self {
            socket,
            waiters,
            sent: Cell::new(0),
            reader,
        })
    }
}

/// One core's sockets to one upstream.
pub(crate) struct UdpPool {
    addr: SocketAddr,
    sockets: RefCell<Vec<Option<Rc<PooledSocket>>>>,
    next: Cell<usize>,
    metrics: Arc<CoreMetrics>,
    index: usize,
}

/// A query registered on one pooled socket; dropping it unregisters.
pub(crate) struct Exchange {
    socket: Rc<PooledSocket>,
    registration: Registration,
}

impl Exchange {
    /// The ID the query must carry.
    pub(crate) fn id(&self) -> u16 {
        self.registration.id()
    }

    /// Sends the query.
    pub(crate) async fn send(&self, query: &[u8]) -> io::Result<()> {
        let socket = &self.socket.socket;
        if sys::try_send(socket.as_raw_fd(), query, None)?.is_some() {
            return Ok(());
        }
        // Socket buffer full: wait for room (boxed: rare, and its future is large).
        Box::pin(socket.send(query))
            .await
            .map(|_| ())
            .map_err(io::Error::from)
    }

    /// Where its replies arrive.
    pub(crate) fn registration(&self) -> &Registration {
        &self.registration
    }
}

impl UdpPool {
    /// An empty pool; sockets open on first use.
    pub(crate) fn new(addr: SocketAddr, metrics: Arc<CoreMetrics>, index: usize) -> Self {
        Self {
            addr,
            sockets: RefCell::new(vec![None; SOCKETS_PER_UPSTREAM]),
            next: Cell::new(0),
            metrics,
            index,
        }
    }

    /// Registers a query under a random free ID on the next socket.
    pub(crate) async fn exchange(&self) -> io::Result<Exchange> {
        let slot = self.next.get() % SOCKETS_PER_UPSTREAM;
        self.next.set(slot + 1);
        let current = self.sockets.borrow()[slot].clone();
        let socket = match current {
            // A rotated-out socket lives on (and keeps reading) until its last exchange ends.
            Some(s) if s.sent.get() < ROTATE_AFTER => s,
            _ => {
                // Boxed: opening is rare (once per ROTATE_AFTER queries) and its state would
                // otherwise widen every query's future.
                let open = PooledSocket::open(self.addr, self.metrics.clone(), self.index);
                let fresh = Rc::new(Box::pin(open).await?);
                self.sockets.borrow_mut()[slot] = Some(fresh.clone());
                fresh
            }
        };
        socket.sent.set(socket.sent.get() + 1);
        let registration = socket.waiters.register();
        Ok(Exchange {
            socket,
            registration,
        })
    }
}
