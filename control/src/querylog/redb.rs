//! The redb sink: events become [`Entry`]s and are appended to `<dataDir>/querylog.db` by a
//! thread of their own, many per transaction; and the retention loop that prunes the file by
//! age (global and per group) and by size.
//!
//! ```text
//! writer ─offer─▶ bounded queue (QUEUE_BATCHES rounds; full: dropped, counted) ─▶ appender thread:
//!                 every round waiting, up to COMMIT_ENTRIES, as Entries ─▶ QueryLogDb::append (one commit)
//! every minute, or when retention / maxBytes / the groups change ─▶ blocking pool: prune
//! ```
//! A commit is durable when `append` returns; a kill loses at most the rounds queued and the
//! one being written, never the file (redb's commits are atomic).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use kudurru_storage::querylog::{Entry, QueryLogDb};
use tokio::sync::watch;

use super::writer::{GroupSource, LiveSettings, group_table};
use super::{Event, EventSink, QueryLogMetrics};

/// Rounds of events the appender may have waiting.
pub const QUEUE_BATCHES: usize = 64;
/// Most entries one commit takes.
pub const COMMIT_ENTRIES: usize = 50_000;
/// How often retention runs when nothing changes.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Most facts one prune transaction deletes (the appender waits on it no longer than that).
pub const PRUNE_BATCH: usize = 10_000;

/// The redb sink.
pub struct RedbSink {
    queue: SyncSender<Vec<Arc<Event>>>,
    dropped: Arc<AtomicU64>,
}

impl RedbSink {
    /// Starts the appender thread over `db`; it ends when the sink is dropped.
    pub fn start(db: Arc<QueryLogDb>, metrics: Arc<QueryLogMetrics>) -> std::io::Result<Self> {
        let (queue, rounds) = std::sync::mpsc::sync_channel(QUEUE_BATCHES);
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = dropped.clone();
        std::thread::Builder::new()
            .name("kudurru-querylog".into())
            .spawn(move || append_loop(&db, &rounds, &metrics, &lost))?;
        Ok(Self { queue, dropped })
    }
}

impl EventSink for RedbSink {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn offer(&self, events: &[Arc<Event>]) {
        if events.is_empty() {
            return;
        }
        // Converted to entries on the appender's thread, not the control thread.
        let n = events.len() as u64;
        match self.queue.try_send(events.to_vec()) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(n, Relaxed);
            }
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

fn append_loop(
    db: &QueryLogDb,
    rounds: &Receiver<Vec<Arc<Event>>>,
    metrics: &QueryLogMetrics,
    dropped: &AtomicU64,
) {
    let mut failing = false;
    let mut entries: Vec<Entry> = Vec::new();
    while let Ok(round) = rounds.recv() {
        entries.clear();
        entries.extend(round.iter().map(|e| Entry::from(&**e)));
        while entries.len() < COMMIT_ENTRIES {
            match rounds.try_recv() {
                Ok(more) => entries.extend(more.iter().map(|e| Entry::from(&**e))),
                Err(_) => break,
            }
        }
        match db.append(&entries) {
            Ok(()) => {
                metrics.committed.fetch_add(entries.len() as u64, Relaxed);
                if failing {
                    tracing::info!("query log: appends succeed again");
                }
                metrics.sink_failing.store(0, Relaxed);
                failing = false;
            }
            Err(e) => {
                dropped.fetch_add(entries.len() as u64, Relaxed);
                metrics.sink_failing.store(1, Relaxed);
                if !failing {
                    tracing::error!(error = %e, "query log: an append failed; its entries are lost (said once until one succeeds)");
                }
                failing = true;
            }
        }
    }
}

/// Prunes `db` every [`PRUNE_INTERVAL`] and when the live settings change; runs until the
/// settings' sender goes away.
pub async fn prune_loop(
    db: Arc<QueryLogDb>,
    groups: GroupSource,
    mut settings: watch::Receiver<LiveSettings>,
    metrics: Arc<QueryLogMetrics>,
) {
    loop {
        let live = *settings.borrow_and_update();
        let retention = group_table(&groups, &live).retention(live.max_bytes);
        let now_ns = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let pruning = db.clone();
        match tokio::task::spawn_blocking(move || pruning.prune(&retention, now_ns, PRUNE_BATCH))
            .await
        {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                metrics.pruned.fetch_add(n, Relaxed);
                tracing::debug!(deleted = n, "query log: pruned");
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "query log: pruning failed; retried in a minute")
            }
            Err(e) => tracing::warn!(error = %e, "query log: pruning failed; retried in a minute"),
        }
        tokio::select! {
            () = tokio::time::sleep(PRUNE_INTERVAL) => {}
            changed = settings.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}
