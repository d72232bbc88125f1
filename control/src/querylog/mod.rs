//! The query log on the control thread: the writer drains the cores' batches, summarizes and
//! applies privacy, and feeds the sink (`querylog.sink`: redb, dnstap, jsonl, none); the API
//! searches it through [`QueryLog`].
//!
//! (Skeleton: the handle's contract with the API; the writer, sinks and bodies are to come.)

pub mod dnstap;
pub mod event;
pub mod jsonl;

use std::sync::Arc;

pub use event::{ClientView, Event};
pub use kudurru_storage::querylog::{Cursor, Entry, Filter, Page, Stats};

/// Where the writer's events go: the redb database, a dnstap stream, a JSON-lines file. The
/// writer offers every batch of events without waiting; a sink that cannot keep up drops what
/// does not fit its bounded buffer and counts it (it never blocks the writer, which never
/// blocks the cores).
pub trait EventSink: Send + Sync {
    /// The sink's name (`redb`, `dnstap`, `jsonl`).
    fn name(&self) -> &'static str;
    /// Takes `events` (in time order per core). Events whose privacy is `omit` are offered
    /// too, for the rollups: a sink that keeps no rollups skips them.
    fn offer(&self, events: &[Arc<Event>]);
    /// Events dropped so far because the sink was behind or its peer was away.
    fn dropped(&self) -> u64;
}

/// Why a query-log request could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryLogError {
    /// The sink in use keeps no database to search (`dnstap`, `jsonl`, `none`, or the query
    /// log is disabled): the API answers 409 naming it.
    #[error("the query log is not searchable here: querylog.sink is {sink}")]
    NotSearchable {
        /// The sink in use (`none` when disabled).
        sink: &'static str,
    },
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] kudurru_storage::StorageError),
}

/// What the API and the CLI reach the query log through (cheap to clone).
#[derive(Clone)]
pub struct QueryLog {
    shared: Arc<Shared>,
}

struct Shared {
    sink: &'static str,
    tail: tokio::sync::broadcast::Sender<Arc<Entry>>,
}

impl QueryLog {
    /// A query log that records nothing (`querylog.enabled = false`, and tests).
    pub fn disabled() -> Self {
        let (tail, _) = tokio::sync::broadcast::channel(1);
        Self {
            shared: Arc::new(Shared { sink: "none", tail }),
        }
    }

    /// The sink in use (`redb`, `dnstap`, `jsonl`, `none`).
    pub fn sink(&self) -> &'static str {
        self.shared.sink
    }

    /// A page of entries matching `filter`, newest first, after `cursor` (on the blocking
    /// pool).
    pub async fn search(
        &self,
        _filter: Filter,
        _cursor: Option<Cursor>,
        _limit: usize,
    ) -> Result<Page, QueryLogError> {
        Err(QueryLogError::NotSearchable { sink: self.sink() })
    }

    /// The rollups from `from_ns` to `to_ns` in steps of `step_ns`, top lists of `top`.
    pub async fn stats(
        &self,
        _from_ns: u64,
        _to_ns: u64,
        _step_ns: u64,
        _top: usize,
    ) -> Result<Stats, QueryLogError> {
        Err(QueryLogError::NotSearchable { sink: self.sink() })
    }

    /// Deletes facts older than `before_ns` (0: all), keeping rollups and dictionaries; the
    /// number deleted.
    pub async fn purge(&self, _before_ns: u64) -> Result<u64, QueryLogError> {
        Err(QueryLogError::NotSearchable { sink: self.sink() })
    }

    /// Every entry logged from now on (privacy applied; omitted ones not sent), for live
    /// tails. A subscriber that falls behind loses the oldest and is told how many.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<Entry>> {
        self.shared.tail.subscribe()
    }
}
