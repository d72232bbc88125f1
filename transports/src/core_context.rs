//! What a listener reads of its core, apart from the resolver: the settings snapshot, the
//! counters, the rate limiter, lameduck, and the counts of queries in flight and of open
//! connections.
//!
//! It exists so that listeners depend on these and on "resolve this" ([`crate::worker`]), not
//! on the resolver's cache, L1, in-flight table, upstreams and mesh peers: the context sits on
//! a floor below the resolver and knows nothing of it. Like the rest of a core's state it is
//! `!Sync`, touched only by the core that owns it, and passed explicitly (no thread-local).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use kudurru_core::Limiter;

use crate::connections::Connections;
use crate::metrics::CoreMetrics;
use crate::settings::{Settings, SharedSettings};

/// One core's listener-facing state.
pub(crate) struct CoreContext {
    /// The published settings snapshot (read through [`Self::settings`]; the stream outbox
    /// takes the handle itself).
    pub(crate) settings: SharedSettings,
    /// This core's counters.
    pub(crate) metrics: Arc<CoreMetrics>,
    /// This core's token buckets (clients are steered so each prefix has one core).
    pub(crate) limiter: RefCell<Limiter>,
    /// Open client connections (TCP, DoT, DoH, DoQ, DoH3): who holds them, and since when
    /// idle (`tcp.maxConnectionsPerCore`, `tcp.maxConnectionsPerClient`,
    /// `quic.maxConnectionsPerClient`).
    pub(crate) connections: Rc<Connections>,
    lameduck: Arc<AtomicBool>,
    /// This core's shard number (its slot in per-core counters such as the policy index's).
    shard: usize,
    /// Client queries being resolved right now (shutdown waits for these).
    active: Cell<usize>,
    /// NOTIFY and UPDATE to the control thread.
    pub(crate) inbox: crate::inbox::CoreInbox,
    /// This core's query-log batch (off unless the server has a query log).
    pub(crate) querylog: crate::querylog::CoreQueryLog,
}

impl CoreContext {
    /// The context of a core that has served nothing yet; its limiter is sized by `snapshot`.
    pub(crate) fn new(
        shard: usize,
        settings: SharedSettings,
        metrics: Arc<CoreMetrics>,
        lameduck: Arc<AtomicBool>,
        snapshot: &Settings,
    ) -> Self {
        let limiter = Limiter::new(
            snapshot.ratelimit_table_size,
            rand::random(),
            Instant::now(),
        );
        Self {
            querylog: crate::querylog::CoreQueryLog::new(shard, metrics.clone()),
            settings,
            metrics,
            limiter: RefCell::new(limiter),
            connections: Rc::default(),
            lameduck,
            shard,
            active: Cell::new(0),
            inbox: crate::inbox::CoreInbox::default(),
        }
    }

    /// The current settings snapshot. A query loads it once, at ingress, and hands it down (a
    /// miss as an `Arc`); connection-level values (idle timeout, pipelining, handshake timeout)
    /// are read per connection or per read.
    pub(crate) fn settings(&self) -> arc_swap::Guard<Arc<Settings>> {
        self.settings.load()
    }

    /// This core's shard number.
    pub(crate) fn shard(&self) -> usize {
        self.shard
    }

    /// Whether the node is in lameduck (the health name answers SERVFAIL).
    pub(crate) fn lameduck(&self) -> bool {
        self.lameduck.load(Ordering::Relaxed)
    }

    /// Client queries being resolved right now ([`Active`] counts them).
    pub(crate) fn active(&self) -> usize {
        self.active.get()
    }

    /// Copies the limiter's counters into the metrics; run once a second.
    pub(crate) fn maintain(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let limiter = self.limiter.borrow();
        let (l, r) = (limiter.stats(), &self.metrics.ratelimit);
        r.dropped.store(l.dropped, Relaxed);
        r.slipped.store(l.slipped, Relaxed);
        r.evictions.store(l.evictions, Relaxed);
        r.buckets.store(l.buckets as u64, Relaxed);
        r.capacity.store(limiter.capacity() as u64, Relaxed);
        self.metrics
            .client_connections
            .store(self.connections.open() as u64, Relaxed);
    }
}

/// Counts a client query as in flight while it lives; shutdown drains these.
pub(crate) struct Active<'a>(&'a CoreContext);

impl<'a> Active<'a> {
    pub(crate) fn enter(context: &'a CoreContext) -> Self {
        context.active.set(context.active.get() + 1);
        Self(context)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get() - 1);
    }
}
