//! The query log's per-core end: each core appends a record per answered or dropped query
//! (`kudurru_core::querylog::RecordRef`) to a batch of its own, and hands full batches (or, on
//! a timer, partial ones) to the control thread over a bounded channel. A core never waits: a
//! full channel drops the batch and counts its records (`kudurru_querylog_dropped_total`).
//!
//! ```text
//! core i: record ─▶ batch (Vec<u8>, this core's) ─ full or 100 ms ─▶ try_send ─┬ queued ─▶ control
//!                                                                            └ full ─▶ dropped += n
//! control: QueryLogReceiver (a Stream of Batch) ─▶ writer (summaries, privacy, sinks)
//! ```
//!
//! Like the inbox, the channel is futures' mpsc, runtime-agnostic: glommio sends, tokio
//! receives.

use std::cell::{Cell, OnceCell, RefCell};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::fmt::Write as _;

use futures_channel::mpsc;
use kudurru_core::Client;
use kudurru_core::policy::{Blocked, PolicyIndex};
use kudurru_core::querylog::{RecordRef, Source, Transport, flags};
use kudurru_core::upstream::UpstreamSpec;

use crate::metrics::CoreMetrics;

/// How many batches may wait for the control thread, per core (futures' channel adds one
/// slot per sender).
pub const BATCHES_PER_CORE: usize = 64;

/// One core's records, encoded back to back (`kudurru_core::querylog::Records` reads them).
#[derive(Debug)]
pub struct Batch {
    /// The core that wrote it.
    pub core: usize,
    /// How many records it holds.
    pub records: u32,
    /// The records.
    pub bytes: Vec<u8>,
}

/// The cores' end (cloned once per core).
#[derive(Debug, Clone)]
pub struct QueryLogSender {
    sender: mpsc::Sender<Batch>,
}

/// The control thread's end: a stream of [`Batch`]es from every core.
pub type QueryLogReceiver = mpsc::Receiver<Batch>;

/// A new query-log channel for `cores` cores.
pub fn channel(cores: usize) -> (QueryLogSender, QueryLogReceiver) {
    channel_with(cores, BATCHES_PER_CORE)
}

/// A new query-log channel for `cores` cores with room for `per_core` batches each
/// (`querylog.bufferBatches`).
pub fn channel_with(cores: usize, per_core: usize) -> (QueryLogSender, QueryLogReceiver) {
    channel_with_room(per_core.max(1).saturating_mul(cores.max(1)))
}

/// A new query-log channel that holds `batches` batches besides one per sender (a test's
/// small channel fills at once).
pub fn channel_with_room(batches: usize) -> (QueryLogSender, QueryLogReceiver) {
    let (sender, receiver) = mpsc::channel(batches);
    (QueryLogSender { sender }, receiver)
}

impl QueryLogSender {
    /// Queues `batch`, or gives it back when the channel is full or closed.
    pub fn try_send(&mut self, batch: Batch) -> Result<(), Batch> {
        self.sender
            .try_send(batch)
            .map_err(mpsc::TrySendError::into_inner)
    }
}

/// A core hands its batch over once it holds this many bytes (a few hundred records).
pub const FLUSH_BYTES: usize = 64 * 1024;

/// How often a core hands over a batch that has records but is not full.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// A fresh batch's capacity: a full batch plus the largest record, so the buffer never grows.
const BATCH_CAPACITY: usize = FLUSH_BYTES + 2 * kudurru_core::querylog::MESSAGE_MAX + 1024;

/// Nanoseconds since the Unix epoch now (a record's time).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How a query ended, as a terminal point of a listener knows it: where the answer came from,
/// the policy that decided, and the upstream exchange of a miss.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome<'a> {
    /// Where the answer came from.
    pub(crate) source: Source,
    /// [`flags`] bits (BLOCKED is set by [`Outcome::blocked`]).
    pub(crate) flags: u8,
    /// The policy (and list) that blocked or rewrote.
    pub(crate) blocked: Option<Blocked>,
    /// The upstream that answered a miss.
    pub(crate) upstream: Option<&'a UpstreamSpec>,
    /// How long the miss waited, in microseconds.
    pub(crate) latency_us: u32,
}

impl Outcome<'static> {
    /// An answer from `source` with no policy and no upstream.
    pub(crate) const fn of(source: Source) -> Self {
        Self {
            source,
            flags: 0,
            blocked: None,
            upstream: None,
            latency_us: 0,
        }
    }

    /// A hit on this core's shard or L1.
    pub(crate) const CACHE: Self = Self::of(Source::Cache);
    /// Answered here without the cache.
    pub(crate) const LOCAL: Self = Self::of(Source::Local);
    /// Nothing sent.
    pub(crate) const DROPPED: Self = Self::of(Source::Dropped);

    /// A policy's answer (block or rewrite), or its drop when `answered` is false.
    pub(crate) fn policy(blocked: Blocked, answered: bool) -> Self {
        let source = if answered {
            Source::Policy
        } else {
            Source::Dropped
        };
        Self::of(source).blocked(blocked)
    }
}

impl<'a> Outcome<'a> {
    /// The same outcome, decided by `blocked`.
    pub(crate) fn blocked(self, blocked: Blocked) -> Self {
        Self {
            flags: self.flags | flags::BLOCKED,
            blocked: Some(blocked),
            ..self
        }
    }

    /// The same outcome, blocked through a CNAME of the answer (CNAME cloaking).
    pub(crate) fn cloaked(self, blocked: Blocked, answered: bool) -> Self {
        let source = if answered {
            Source::Policy
        } else {
            Source::Dropped
        };
        let blocked = self.blocked(blocked);
        Self {
            source,
            flags: blocked.flags | flags::CLOAKED,
            ..blocked
        }
    }

    /// The same outcome, answered by `upstream` after an exchange of `latency_us`.
    pub(crate) fn answered_by<'u>(self, upstream: &'u UpstreamSpec, latency_us: u32) -> Outcome<'u>
    where
        'a: 'u,
    {
        Outcome {
            upstream: Some(upstream),
            latency_us,
            ..self
        }
    }
}

/// One core's end of the query log: its batch, and the channel's sender when the query log is
/// on. Lives in the core's context; touched only by that core.
pub(crate) struct CoreQueryLog {
    core: usize,
    /// Unset: the query log is off, and [`Self::record`] is one branch.
    sender: OnceCell<RefCell<QueryLogSender>>,
    batch: RefCell<Vec<u8>>,
    records: Cell<u32>,
    metrics: Arc<CoreMetrics>,
    /// Where an upstream's URL is written for its record (kept between records).
    url: RefCell<String>,
}

impl CoreQueryLog {
    /// Core `core`'s end, off until [`Self::connect`].
    pub(crate) fn new(core: usize, metrics: Arc<CoreMetrics>) -> Self {
        Self {
            core,
            sender: OnceCell::new(),
            batch: RefCell::new(Vec::new()),
            records: Cell::new(0),
            metrics,
            url: RefCell::new(String::new()),
        }
    }

    /// Turns the query log on: records go to `sender` from now on (once, when the core
    /// starts).
    pub(crate) fn connect(&self, sender: QueryLogSender) {
        if self.sender.set(RefCell::new(sender)).is_ok() {
            self.batch.borrow_mut().reserve(BATCH_CAPACITY);
        }
    }

    /// Whether records are written (a caller with work to do for a record checks first).
    #[inline(always)]
    pub(crate) fn on(&self) -> bool {
        self.sender.get().is_some()
    }

    /// Records a query answered with `response` (empty: nothing sent) at `time_ns`, from
    /// `client` at `peer` over `transport`; policy and list names come from `policy`, the
    /// query's snapshot. Nothing but a branch while the query log is off.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // one call per terminal point; a struct would be built for nothing when off
    pub(crate) fn record(
        &self,
        time_ns: u64,
        transport: crate::metrics::Transport,
        peer: SocketAddr,
        client: &Client<'_>,
        outcome: Outcome<'_>,
        policy: &PolicyIndex,
        query: &[u8],
        response: &[u8],
    ) {
        if self.on() {
            self.write(
                time_ns,
                transport.querylog(),
                peer,
                client,
                outcome,
                policy,
                query,
                response,
            );
        }
    }

    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        time_ns: u64,
        transport: Transport,
        peer: SocketAddr,
        client: &Client<'_>,
        outcome: Outcome<'_>,
        policy: &PolicyIndex,
        query: &[u8],
        response: &[u8],
    ) {
        let mut label = [0u8; 63];
        let client_id = match (client.id, client.sni) {
            (Some(id), _) => id,
            (None, Some(sni)) => policy.client_id_from_sni(sni, &mut label).unwrap_or(""),
            (None, None) => "",
        };
        let (policy_name, list_name) = match outcome.blocked {
            Some(blocked) => (
                policy.policy_name(blocked.policy).unwrap_or(""),
                blocked
                    .list
                    .and_then(|list| policy.list_name(list))
                    .unwrap_or(""),
            ),
            None => ("", ""),
        };
        let mut url = self.url.borrow_mut();
        url.clear();
        if let Some(upstream) = outcome.upstream {
            let _ = write!(url, "{upstream}");
        }
        let record = RecordRef {
            time_ns,
            client: peer,
            transport,
            source: outcome.source,
            flags: outcome.flags,
            client_id,
            policy: policy_name,
            list: list_name,
            upstream: &url,
            upstream_latency_us: outcome.latency_us,
            query,
            response,
        };
        let full = {
            let mut batch = self.batch.borrow_mut();
            record.encode(&mut batch);
            batch.len() >= FLUSH_BYTES
        };
        drop(url);
        self.records.set(self.records.get() + 1);
        if full {
            self.flush();
        }
    }

    /// Hands the batch to the control thread if it holds records; a full or closed channel
    /// drops it (counted), and its buffer is kept for the next batch.
    pub(crate) fn flush(&self) {
        let Some(sender) = self.sender.get() else {
            return;
        };
        let records = self.records.replace(0);
        if records == 0 {
            return;
        }
        // Counted per batch, not per record: one atomic add per hand-over.
        self.metrics
            .querylog_records
            .fetch_add(u64::from(records), Relaxed);
        let bytes = std::mem::replace(
            &mut *self.batch.borrow_mut(),
            Vec::with_capacity(BATCH_CAPACITY),
        );
        let batch = Batch {
            core: self.core,
            records,
            bytes,
        };
        if let Err(mut batch) = sender.borrow_mut().try_send(batch) {
            self.metrics
                .querylog_dropped
                .fetch_add(u64::from(batch.records), Relaxed);
            batch.bytes.clear();
            *self.batch.borrow_mut() = batch.bytes;
        }
    }

    /// Hands over waiting records every [`FLUSH_INTERVAL`] until the task is dropped; returns
    /// at once when the query log is off.
    pub(crate) async fn run_flushes(&self) {
        if !self.on() {
            return;
        }
        loop {
            glommio::timer::sleep(FLUSH_INTERVAL).await;
            self.flush();
        }
    }
}
