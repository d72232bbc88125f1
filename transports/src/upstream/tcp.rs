//! Per-core connections to TCP upstreams: one connection per upstream per core, opened on first
//! use, with queries pipelined on it and replies matched by message ID (RFC 7766 §6.2.1.1), as
//! Unbound and dnsdist reuse theirs. A connection that ends (the upstream closed it, a read or
//! write failed) fails its waiting queries over at once and the next query opens a new one; one
//! with nothing asked for [`IDLE_CLOSE`] is closed from this side, and one on which a query
//! timed out gets no new queries ([`StreamPool::retire`], [`TcpExchange`]).
//!
//! The pool is the same for DNS over TLS ([`super::dot`]): only how a connection is dialled
//! differs ([`Dial`]: a TCP connect, or a TCP connect and a TLS handshake), and whether
//! queries carry EDNS padding.
//!
//! ```text
//! ask ─▶ connection (reuse, or open one: one opening at a time) ─▶ random free ID
//!   ─▶ register waiter ─▶ queue the framed query on the connection's outbox, write it now
//! reader task: frames ─▶ waiter for that ID? ─ yes ─▶ hand bytes over (the waiter validates)
//!                                      └ no ──▶ count as mismatched, drop
//!   end of stream, error, idle ─▶ every waiter gets an empty reply (fails over), connection done
//! ```

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::AsyncReadExt;
use futures_lite::io::{AsyncRead, AsyncWrite, ReadHalf};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use glommio::task::JoinHandle;
use kudurru_core::CacheKey;
use kudurru_core::framing::FrameBuffer;
use kudurru_core::wire::{write_padded_upstream_query, write_upstream_query};

use super::waiters::{Registration, Waiters};
use crate::deadline::within;
use crate::metrics::CoreMetrics;
use crate::outbox::Outbox;
use crate::settings::SharedSettings;

/// A connection nothing was asked on for `upstream.idleTimeout` is closed (upstreams close idle
/// ones too: Unbound after 30 s by default); the next query opens a new one. A zero timeout
/// means this.
const IDLE_CLOSE: Duration = Duration::from_secs(10);

/// How a pool's connections are opened.
pub(crate) trait Dial {
    /// The connection: a TCP stream, or a TLS stream on one.
    type Stream: AsyncRead + AsyncWrite + Unpin + 'static;

    /// Opens a connection, ready for DNS messages.
    fn dial(&self) -> impl Future<Output = io::Result<Self::Stream>>;

    /// Whether queries carry EDNS padding (RFC 8467; encrypted connections with
    /// `upstream.padding` on).
    fn padded(&self) -> bool;
}

/// Plain TCP (`tcp://`, and UDP upstreams' truncated replies).
pub(crate) struct PlainTcp(pub(crate) SocketAddr);

impl Dial for PlainTcp {
    type Stream = TcpStream;

    async fn dial(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(self.0).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    fn padded(&self) -> bool {
        false
    }
}

/// One core's connection to one plain TCP upstream.
pub(crate) type TcpPool = StreamPool<PlainTcp>;

/// One core's connection to one stream upstream (TCP or TLS).
pub(crate) struct StreamPool<D: Dial> {
    dialer: D,
    connection: Slot<D>,
    /// Held while a connection is being opened: queries that find none wait for that one
    /// instead of opening their own (a burst of misses would open one each).
    opening: Semaphore,
    metrics: Arc<CoreMetrics>,
    /// Read only when a write has to wait (`tcp.idleTimeout`, see [`Outbox::flush`]).
    settings: SharedSettings,
    index: usize,
    /// The serial number of the next connection opened.
    serials: Cell<u64>,
}

/// The connection new queries go to; shared with the exchanges, which take it out when they are
/// given up on (see [`TcpExchange`]'s drop).
type Slot<D> = Rc<RefCell<Option<Rc<Connection<D>>>>>;

struct Connection<D: Dial> {
    /// Which connection of the pool this is (from 1), so a timed-out attempt can name it.
    serial: u64,
    outbox: Rc<Outbox<D::Stream>>,
    waiters: Waiters,
    ended: Rc<Cell<bool>>,
    reader: JoinHandle<()>,
}

impl<D: Dial> Drop for Connection<D> {
    fn drop(&mut self) {
        self.reader.cancel();
    }
}

impl<D: Dial> Connection<D> {
    fn usable(&self) -> bool {
        !self.ended.get() && !self.outbox.has_failed()
    }
}

/// A query sent on a pooled connection; dropping it unregisters. Dropped before its reply came
/// (its attempt timed out), it takes the connection out of the pool: the connection may be dead
/// without having been closed (a peer that vanished, a middlebox that forgot it), and nothing else
/// would tell. New queries get a new connection; those already waiting on this one keep it until
/// their own deadlines.
pub(crate) struct TcpExchange<D: Dial> {
    // Keeps the connection (and its reader) alive while the query waits.
    connection: Rc<Connection<D>>,
    slot: Slot<D>,
    registration: Registration,
    replied: Cell<bool>,
}

impl<D: Dial> Drop for TcpExchange<D> {
    fn drop(&mut self) {
        if self.replied.get() {
            return;
        }
        let mut slot = self.slot.borrow_mut();
        if slot
            .as_ref()
            .is_some_and(|c| Rc::ptr_eq(c, &self.connection))
        {
            *slot = None;
        }
    }
}

impl<D: Dial> TcpExchange<D> {
    /// Marks the exchange as ended by a reply (or the connection's end), not given up on.
    pub(crate) fn replied(&self) {
        self.replied.set(true);
    }

    /// Where its replies arrive (an empty one: the connection ended).
    pub(crate) fn registration(&self) -> &Registration {
        &self.registration
    }

    /// The serial number of the connection it was sent on (see [`StreamPool::retire`]).
    pub(crate) fn connection_serial(&self) -> u64 {
        self.connection.serial
    }
}

impl<D: Dial> StreamPool<D> {
    /// No connection yet; it opens on first use, through `dialer`.
    pub(crate) fn new(
        dialer: D,
        metrics: Arc<CoreMetrics>,
        settings: SharedSettings,
        index: usize,
    ) -> Self {
        Self {
            dialer,
            connection: Slot::default(),
            opening: Semaphore::new(1),
            metrics,
            settings,
            index,
            serials: Cell::new(1),
        }
    }

    /// Takes connection `serial` out of the pool, if it is still the one new queries go to: a
    /// query on it outlasted its attempt timeout, so it may be dead without having been closed
    /// (a peer that vanished, a middlebox that forgot it), and nothing else would tell. New
    /// queries get a new connection; those already waiting on it keep it until their deadlines.
    pub(crate) fn retire(&self, serial: u64) {
        let mut slot = self.connection.borrow_mut();
        if slot.as_ref().is_some_and(|c| c.serial == serial) {
            *slot = None;
        }
    }

    /// Sends a query for `key` on the upstream's connection (opened first if there is none).
    pub(crate) async fn send(&self, key: &CacheKey) -> io::Result<TcpExchange<D>> {
        let connection = match self.current() {
            Some(connection) => connection,
            // Boxed: opening is rare and its state would widen every query's future.
            None => Box::pin(self.open()).await?,
        };
        let registration = connection.waiters.register();
        let mut query = Vec::with_capacity(key.question().len() + 24);
        if self.dialer.padded() {
            write_padded_upstream_query(key, registration.id(), &mut query);
        } else {
            write_upstream_query(key, registration.id(), &mut query);
        }
        connection.outbox.push_frame(&query);
        Outbox::flush(&connection.outbox, &self.metrics, &self.settings);
        Ok(TcpExchange {
            connection,
            slot: self.connection.clone(),
            registration,
            replied: Cell::new(false),
        })
    }

    fn current(&self) -> Option<Rc<Connection<D>>> {
        self.connection
            .borrow()
            .as_ref()
            .filter(|c| c.usable())
            .cloned()
    }

    /// Opens a connection, or waits for the one another query is opening.
    async fn open(&self) -> io::Result<Rc<Connection<D>>> {
        let _opening = self
            .opening
            .acquire_permit(1)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        if let Some(connection) = self.current() {
            return Ok(connection);
        }
        let stream = self.dialer.dial().await?;
        let (reader, writer) = futures_lite::io::split(stream);
        let idle = match self.settings.load().upstream_idle_timeout {
            Duration::ZERO => IDLE_CLOSE,
            idle => idle,
        };
        let waiters = Waiters::default();
        let ended = Rc::new(Cell::new(false));
        let reader = glommio::spawn_local(read_replies(
            reader,
            waiters.clone(),
            ended.clone(),
            idle,
            self.metrics.clone(),
            self.index,
        ))
        .detach();
        let serial = self.serials.get();
        self.serials.set(serial + 1);
        let connection = Rc::new(Connection {
            serial,
            outbox: Rc::new(Outbox::upstream(writer)),
            waiters,
            ended,
            reader,
        });
        CoreMetrics::bump(&self.metrics.upstream(self.index).tcp_connections);
        *self.connection.borrow_mut() = Some(connection.clone());
        Ok(connection)
    }
}

/// The connection's reader: hands each reply to the query waiting for its ID until the stream
/// ends, fails, or sits idle with nothing asked for `idle`; then every waiting query fails
/// over.
async fn read_replies<S: AsyncRead + Unpin>(
    mut reader: ReadHalf<S>,
    waiters: Waiters,
    ended: Rc<Cell<bool>>,
    idle: Duration,
    metrics: Arc<CoreMetrics>,
    index: usize,
) {
    let mut frames = FrameBuffer::new();
    loop {
        while let Some(reply) = frames.next_frame() {
            if !waiters.deliver(&reply) {
                CoreMetrics::bump(&metrics.upstream(index).mismatched);
            }
        }
        match within(idle, reader.read(frames.spare())).await {
            Some(Ok(0)) | Some(Err(_)) => break,
            Some(Ok(n)) => frames.filled(n),
            // Idle: closed unless a query is waiting (its own deadline bounds it).
            None if waiters.is_empty() => break,
            None => {}
        }
    }
    ended.set(true);
    waiters.fail_all();
}
