//! Per-core connections to TCP upstreams: one connection per upstream per core, opened on first
//! use, with queries pipelined on it and replies matched by message ID (RFC 7766 §6.2.1.1), as
//! Unbound and dnsdist reuse theirs. A connection that ends (the upstream closed it, a read or
//! write failed) fails its waiting queries over at once and the next query opens a new one; one
//! with nothing asked for [`IDLE_CLOSE`] is closed from this side, and one on which a query
//! timed out gets no new queries ([`TcpPool::retire`], [`TcpExchange`]).
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
use futures_lite::io::ReadHalf;
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use glommio::task::JoinHandle;
use kudurru_core::CacheKey;
use kudurru_core::framing::FrameBuffer;
use kudurru_core::wire::write_upstream_query;

use super::waiters::{Registration, Waiters};
use crate::deadline::within;
use crate::metrics::CoreMetrics;
use crate::outbox::Outbox;
use crate::settings::SharedSettings;

/// A connection nothing was asked on for this long is closed (upstreams close idle ones too:
/// Unbound after 30 s by default); the next query opens a new one.
const IDLE_CLOSE: Duration = Duration::from_secs(10);

/// One core's connection to one TCP upstream.
pub(crate) struct TcpPool {
    addr: SocketAddr,
    connection: Slot,
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
type Slot = Rc<RefCell<Option<Rc<Connection>>>>;

struct Connection {
    /// Which connection of the pool this is (from 1), so a timed-out attempt can name it.
    serial: u64,
    outbox: Rc<Outbox<TcpStream>>,
    waiters: Waiters,
    ended: Rc<Cell<bool>>,
    reader: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.cancel();
    }
}

impl Connection {
    fn usable(&self) -> bool {
        !self.ended.get() && !self.outbox.has_failed()
    }
}

/// A query sent on a pooled connection; dropping it unregisters. Dropped before its reply came
/// (its attempt timed out), it takes the connection out of the pool: the connection may be dead
/// without having been closed (a peer that vanished, a middlebox that forgot it), and nothing else
/// would tell. New queries get a new connection; those already waiting on this one keep it until
/// their own deadlines.
pub(crate) struct TcpExchange {
    // Keeps the connection (and its reader) alive while the query waits.
    connection: Rc<Connection>,
    slot: Slot,
    registration: Registration,
    replied: Cell<bool>,
}

impl Drop for TcpExchange {
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

impl TcpExchange {
    /// Marks the exchange as ended by a reply (or the connection's end), not given up on.
    pub(crate) fn replied(&self) {
        self.replied.set(true);
    }

    /// Where its replies arrive (an empty one: the connection ended).
    pub(crate) fn registration(&self) -> &Registration {
        &self.registration
    }

    /// The serial number of the connection it was sent on (see [`TcpPool::retire`]).
    pub(crate) fn connection_serial(&self) -> u64 {
        self.connection.serial
    }
}

impl TcpPool {
    /// No connection yet; it opens on first use.
    pub(crate) fn new(
        addr: SocketAddr,
        metrics: Arc<CoreMetrics>,
        settings: SharedSettings,
        index: usize,
    ) -> Self {
        Self {
            addr,
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
    pub(crate) async fn send(&self, key: &CacheKey) -> io::Result<TcpExchange> {
        let connection = match self.current() {
            Some(connection) => connection,
            // Boxed: opening is rare and its state would widen every query's future.
            None => Box::pin(self.open()).await?,
        };
        let registration = connection.waiters.register();
        let mut query = Vec::with_capacity(key.question().len() + 24);
        write_upstream_query(key, registration.id(), &mut query);
        connection.outbox.push_frame(&query);
        Outbox::flush(&connection.outbox, &self.metrics, &self.settings);
        Ok(TcpExchange {
            connection,
            slot: self.connection.clone(),
            registration,
            replied: Cell::new(false),
        })
    }

    fn current(&self) -> Option<Rc<Connection>> {
        self.connection
            .borrow()
            .as_ref()
            .filter(|c| c.usable())
            .cloned()
    }

    /// Opens a connection, or waits for the one another query is opening.
    async fn open(&self) -> io::Result<Rc<Connection>> {
        let _opening = self
            .opening
            .acquire_permit(1)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        if let Some(connection) = self.current() {
            return Ok(connection);
        }
        let stream = TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        let (reader, writer) = futures_lite::io::split(stream);
        let waiters = Waiters::default();
        let ended = Rc::new(Cell::new(false));
        let reader = glommio::spawn_local(read_replies(
            reader,
            waiters.clone(),
            ended.clone(),
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
/// ends, fails, or sits idle with nothing asked for [`IDLE_CLOSE`]; then every waiting query
/// fails over.
async fn read_replies(
    mut reader: ReadHalf<TcpStream>,
    waiters: Waiters,
    ended: Rc<Cell<bool>>,
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
        match within(IDLE_CLOSE, reader.read(frames.spare())).await {
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
