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
use std::collections::HashMap;
use std::io;
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use std::future::poll_fn;
use std::task::{Poll, Waker};

use glommio::net::UdpSocket;
use glommio::task::JoinHandle;
use smallvec::SmallVec;

use crate::metrics::CoreMetrics;
use crate::sys;

/// Connected sockets kept per upstream per core.
pub(crate) const SOCKETS_PER_UPSTREAM: usize = 8;
/// Queries after which a socket is replaced by one with a new source port.
pub(crate) const ROTATE_AFTER: u32 = 4096;
/// Replies buffered per waiting query (a spoofed reply with a guessed ID must not crowd out the
/// genuine one).
const REPLIES_PER_QUERY: usize = 4;
/// Room for one reply; a longer one arrives cut short.
const REPLY_BUFFER: usize = 4096;
/// Replies one non-blocking `recvmmsg` takes at most; fewer means the socket is empty.
const REPLIES_PER_RECEIVE: usize = sys::RECV_SOME_MAX;

/// A registered query's mailbox, kept in its socket's table under the query's ID: a slot in
/// the table rather than a channel per query (two allocations per cache miss).
#[derive(Default)]
struct Waiting {
    replies: SmallVec<[Vec<u8>; REPLIES_PER_QUERY]>,
    waker: Option<Waker>,
}

impl Waiting {
    /// Queues a reply unless [`REPLIES_PER_QUERY`] already wait, and wakes the query.
    fn deliver(&mut self, reply: Vec<u8>) {
        if self.replies.len() < REPLIES_PER_QUERY {
            self.replies.push(reply);
        }
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The queries waiting on one socket or connection, by the message ID each was sent with.
/// Keyed by IDs kudurru chose at random: a fast hash is enough (a reply's ID is only looked up).
#[derive(Clone, Default)]
pub(crate) struct Waiters(Rc<RefCell<HashMap<u16, Waiting, foldhash::fast::RandomState>>>);

impl Waiters {
    /// Registers a query under a random ID no other waiting query has.
    pub(crate) fn register(&self) -> Registration {
        let mut waiters = self.0.borrow_mut();
        let mut id: u16 = rand::random();
        while waiters.contains_key(&id) {
            id = rand::random();
        }
        waiters.insert(id, Waiting::default());
        Registration {
            waiters: self.clone(),
            id,
        }
    }

    /// Hands `reply` to the query waiting for its ID; `false` when none does (a mismatched
    /// reply).
    pub(crate) fn deliver(&self, reply: &[u8]) -> bool {
        kudurru_core::wire::message_id(reply).is_some_and(|id| {
            self.0
                .borrow_mut()
                .get_mut(&id)
                .map(|waiting| waiting.deliver(reply.to_vec()))
                .is_some()
        })
    }

    /// Every waiting query gets an empty reply: the upstream is unreachable (an ICMP error on a
    /// connected socket concerns it as a whole) or the connection ended, so they fail over now,
    /// not at their timeouts.
    pub(crate) fn fail_all(&self) {
        for waiting in self.0.borrow_mut().values_mut() {
            waiting.deliver(Vec::new());
        }
    }

    /// Whether no query waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }
}

/// A query registered in a [`Waiters`] table; dropping it unregisters.
pub(crate) struct Registration {
    waiters: Waiters,
    id: u16,
}

impl Registration {
    /// The ID the query must carry.
    pub(crate) fn id(&self) -> u16 {
        self.id
    }

    /// The next reply carrying this ID (the caller validates it); an empty reply means the
    /// upstream is unreachable or the connection ended.
    pub(crate) async fn reply(&self) -> Vec<u8> {
        poll_fn(|cx| {
            let mut waiters = self.waiters.0.borrow_mut();
            // The slot lives as long as the registration: only its drop removes it.
            let waiting = waiters.entry(self.id).or_default();
            if waiting.replies.is_empty() {
                waiting.waker = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(waiting.replies.remove(0))
            }
        })
        .await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters.0.borrow_mut().remove(&self.id);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    fn reply_with_id(id: u16, tag: u8) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, tag]);
        m
    }

    #[test]
    fn replies_reach_the_query_with_their_id_and_no_other() {
        let waiters = Waiters::default();
        let a = waiters.register();
        let b = waiters.register();
        assert_ne!(a.id(), b.id());
        assert!(waiters.deliver(&reply_with_id(b.id(), 1)));
        assert!(waiters.deliver(&reply_with_id(a.id(), 2)));
        assert_eq!(block_on(a.reply()), reply_with_id(a.id(), 2));
        assert_eq!(block_on(b.reply()), reply_with_id(b.id(), 1));
        // An ID nobody waits for, and a datagram too short to carry one.
        let unused = (0..=u16::MAX)
            .find(|id| *id != a.id() && *id != b.id())
            .unwrap();
        assert!(!waiters.deliver(&reply_with_id(unused, 3)));
        assert!(!waiters.deliver(&[0x12]));
    }

    #[test]
    fn a_query_keeps_at_most_four_replies_and_fails_over_on_fail_all() {
        let waiters = Waiters::default();
        let a = waiters.register();
        for tag in 0..6 {
            waiters.deliver(&reply_with_id(a.id(), tag));
        }
        for tag in 0..REPLIES_PER_QUERY as u8 {
            assert_eq!(block_on(a.reply()), reply_with_id(a.id(), tag));
        }
        waiters.fail_all();
        assert!(
            block_on(a.reply()).is_empty(),
            "an empty reply: failed over"
        );
    }

    #[test]
    fn dropping_a_registration_unregisters_its_id() {
        let waiters = Waiters::default();
        let a = waiters.register();
        let id = a.id();
        assert!(!waiters.is_empty());
        drop(a);
        assert!(waiters.is_empty());
        assert!(!waiters.deliver(&reply_with_id(id, 0)));
    }
}
