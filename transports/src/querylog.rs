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

use futures_channel::mpsc;

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
    let (sender, receiver) = mpsc::channel(per_core.max(1).saturating_mul(cores.max(1)));
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
