//! The query log on the control thread: the writer drains the cores' batches, summarizes and
//! applies privacy, and feeds the sink (`querylog.sink`: redb, dnstap, jsonl, none); the API
//! searches it through [`QueryLog`].
//!
//! ```text
//! cores ─▶ QueryLogReceiver ─▶ writer (writer.rs; privacy.rs) ─▶ EventSink: redb (redb.rs),
//!                                      │                         dnstap, jsonl, or none
//!                                      └▶ live tails (QueryLog::subscribe)
//! API ─▶ QueryLog::search / stats / purge ─▶ blocking pool ─▶ QueryLogDb
//! ```

pub mod dnstap;
pub mod event;
pub mod jsonl;
pub mod privacy;
pub mod redb;
pub mod writer;
// The API's routes and the command line (ql-api).
pub mod api;
pub mod audit;
pub mod cli;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use kudurru_core::querylog::{Privacy, flags};
use kudurru_storage::querylog::{QueryLogDb, entry_flags};

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
    /// Events that reached the sink's peer so far (dnstap: written to the collector; jsonl:
    /// lines written), for sinks that hand events on asynchronously.
    fn delivered(&self) -> Option<u64> {
        None
    }
    /// Whether the sink's peer is connected now (dnstap's collector), for sinks with one.
    fn connected(&self) -> Option<bool> {
        None
    }
    /// Ends the sink at shutdown, after the writer offered its last events: dnstap writes
    /// what is queued, STOP, and waits (bounded) for FINISH. Nothing to do by default.
    fn close(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

/// Why the query log could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// `querylog.db` could not be opened or created.
    #[error("cannot open the query log {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: kudurru_storage::StorageError,
    },
    /// A thread or task could not be started.
    #[error("cannot start the query log's writer: {0}")]
    Thread(String),
    /// `querylog.file` (the `jsonl` sink) could not be opened or created.
    #[error("cannot open the query log file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The query log as `serve` starts it: the cores' end of the channel, the handle, and what the
/// writer runs on once the client groups are there ([`Setup::spawn`]).
pub struct Setup {
    /// What the cores write into (`None`: `querylog.enabled = false`).
    pub sender: Option<kudurru_transports::querylog::QueryLogSender>,
    /// The handle for the API and the ops listener.
    pub log: QueryLog,
    receiver: Option<kudurru_transports::querylog::QueryLogReceiver>,
    settings: tokio::sync::watch::Sender<writer::LiveSettings>,
    /// What SIGHUP runs for the sink: the JSON-lines file is reopened (logrotate).
    pub on_hangup: Option<crate::certs::Reload>,
}

impl Setup {
    /// Opens the sink `settings` choose and the channel of `cores` cores (the database on
    /// the blocking pool). `ephemeral` (`serve --ephemeral`, which keeps nothing on disk)
    /// opens no database: records still reach the live tails.
    pub async fn open(
        settings: &crate::config::QueryLogSettings,
        cores: usize,
        ephemeral: bool,
    ) -> Result<Self, StartError> {
        use crate::config::SinkKind;
        let (live, _) = tokio::sync::watch::channel(writer::LiveSettings::of(settings));
        let metrics = Arc::new(QueryLogMetrics::default());
        let mut kind = settings.effective_sink();
        if ephemeral && kind == SinkKind::Redb {
            tracing::warn!(
                "--ephemeral: the query log keeps no database (querylog.db is not opened); live tails still see every entry"
            );
            kind = SinkKind::None;
        }
        let mut hangup: Option<crate::certs::Reload> = None;
        let (events, db): (Option<Arc<dyn EventSink>>, _) = match kind {
            SinkKind::Redb => {
                let path = settings.db_path.clone();
                let opening = path.clone();
                let db = tokio::task::spawn_blocking(move || QueryLogDb::open(&opening))
                    .await
                    .map_err(|e| StartError::Thread(e.to_string()))?
                    .map_err(|source| StartError::Open {
                        path: path.clone(),
                        source,
                    })?;
                let db = Arc::new(db);
                let sink = redb::RedbSink::start(db.clone(), metrics.clone())
                    .map_err(|e| StartError::Thread(e.to_string()))?;
                (Some(Arc::new(sink)), Some((db, path)))
            }
            SinkKind::Dnstap => {
                // Validation requires the address with this sink; without one nothing is kept.
                let sink = settings.dnstap_address.clone().map(|address| {
                    let mut options = dnstap::Options::new(address);
                    options.buffer_events = settings.dnstap_buffer_events;
                    options.identity = settings.identity.clone();
                    Arc::new(dnstap::DnstapSink::start(options)) as Arc<dyn EventSink>
                });
                (sink, None)
            }
            SinkKind::Jsonl => {
                let sink = jsonl::JsonlSink::open(&settings.file, jsonl::DEFAULT_BUFFER_EVENTS)
                    .map_err(|source| StartError::File {
                        path: settings.file.clone(),
                        source,
                    })?;
                let sink = Arc::new(sink);
                let reopen = Arc::clone(&sink);
                hangup = Some(Arc::new(move || reopen.reopen()));
                (Some(sink as Arc<dyn EventSink>), None)
            }
            SinkKind::None => (None, None),
        };
        let (sender, receiver) = if settings.enabled {
            let (s, r) = kudurru_transports::querylog::channel_with_room(
                settings.buffer_batches.saturating_mul(cores.max(1)),
            );
            (Some(s), Some(r))
        } else {
            (None, None)
        };
        let log = QueryLog::new(QueryLogParts {
            sink: kind.label(),
            events: events.clone(),
            db,
            metrics,
        });
        Ok(Self {
            sender,
            log,
            receiver,
            settings: live,
            on_hangup: hangup,
        })
    }

    /// Starts the writer (and, with a database, the retention loop) on this runtime, with the
    /// client groups of `groups`; returns what a reload sends new live settings to.
    pub fn spawn(
        self,
        groups: writer::GroupSource,
    ) -> tokio::sync::watch::Sender<writer::LiveSettings> {
        if let Some(receiver) = self.receiver {
            let writer = tokio::spawn(writer::run(writer::WriterParts {
                receiver,
                sink: self.log.shared.events.clone(),
                groups: groups.clone(),
                settings: self.settings.subscribe(),
                log: self.log.clone(),
            }));
            if let Ok(mut slot) = self.log.shared.writer.lock() {
                *slot = Some(writer);
            }
        }
        if let Some((db, _)) = &self.log.shared.db {
            tokio::spawn(redb::prune_loop(
                db.clone(),
                groups,
                self.settings.subscribe(),
                self.log.metrics(),
            ));
        }
        self.settings
    }
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
    /// The blocking pool dropped the request (the server is stopping).
    #[error("the query log request did not finish: {0}")]
    Stopped(String),
}

/// What the API and the CLI reach the query log through (cheap to clone).
#[derive(Clone)]
pub struct QueryLog {
    shared: Arc<Shared>,
}

struct Shared {
    sink: &'static str,
    tail: tokio::sync::broadcast::Sender<Arc<Entry>>,
    /// The database (`redb` sink) and its file.
    db: Option<(Arc<QueryLogDb>, PathBuf)>,
    /// The sink the writer feeds.
    events: Option<Arc<dyn EventSink>>,
    metrics: Arc<QueryLogMetrics>,
    /// The writer task, for shutdown to wait on ([`QueryLog::close`]).
    writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Entries a live tail may fall behind by before it loses the oldest.
pub const TAIL_CAPACITY: usize = 4096;

/// What a [`QueryLog`] is made of.
pub struct QueryLogParts {
    /// The sink's name (`redb`, `dnstap`, `jsonl`, `none`).
    pub sink: &'static str,
    /// The sink (`None` for `none`).
    pub events: Option<Arc<dyn EventSink>>,
    /// The database and its file (the `redb` sink).
    pub db: Option<(Arc<QueryLogDb>, PathBuf)>,
    /// The counters the writer and the sink share.
    pub metrics: Arc<QueryLogMetrics>,
}

impl QueryLog {
    /// A query log that records nothing (`querylog.enabled = false`, and tests).
    pub fn disabled() -> Self {
        Self::new(QueryLogParts {
            sink: "none",
            events: None,
            db: None,
            metrics: Arc::default(),
        })
    }

    /// A query log over `parts`.
    pub fn new(parts: QueryLogParts) -> Self {
        let (tail, _) = tokio::sync::broadcast::channel(TAIL_CAPACITY);
        Self {
            shared: Arc::new(Shared {
                sink: parts.sink,
                tail,
                db: parts.db,
                events: parts.events,
                metrics: parts.metrics,
                writer: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Ends the query log at shutdown, once the cores were asked to stop: waits up to `wait`
    /// for the writer to take the cores' last records (it ends when every core has exited and
    /// the cores' channel closed) and offer them, then closes the sink ([`EventSink::close`]:
    /// dnstap's STOP and FINISH). Without this, the last events of a clean shutdown were
    /// lost with the runtime.
    pub async fn close(&self, wait: std::time::Duration) {
        let writer = self.shared.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(writer) = writer
            && tokio::time::timeout(wait, writer).await.is_err()
        {
            tracing::warn!(
                ?wait,
                "query log: the cores' last records were not written in time; closing the sink without them"
            );
        }
        if let Some(sink) = &self.shared.events {
            sink.close().await;
        }
    }

    /// The sink in use (`redb`, `dnstap`, `jsonl`, `none`).
    pub fn sink(&self) -> &'static str {
        self.shared.sink
    }

    /// The counters.
    pub fn metrics(&self) -> Arc<QueryLogMetrics> {
        self.shared.metrics.clone()
    }

    /// The database, or why there is none.
    fn db(&self) -> Result<Arc<QueryLogDb>, QueryLogError> {
        self.shared
            .db
            .as_ref()
            .map(|(db, _)| db.clone())
            .ok_or(QueryLogError::NotSearchable { sink: self.sink() })
    }

    /// Runs `f` over the database on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&QueryLogDb) -> Result<T, kudurru_storage::StorageError> + Send + 'static,
    ) -> Result<T, QueryLogError> {
        let db = self.db()?;
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| QueryLogError::Stopped(e.to_string()))?
            .map_err(QueryLogError::Storage)
    }

    /// A page of entries matching `filter`, newest first, after `cursor` (on the blocking
    /// pool).
    pub async fn search(
        &self,
        filter: Filter,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, QueryLogError> {
        self.blocking(move |db| db.search(&filter, cursor, limit))
            .await
    }

    /// The rollups from `from_ns` to `to_ns` in steps of `step_ns`, top lists of `top`.
    pub async fn stats(
        &self,
        from_ns: u64,
        to_ns: u64,
        step_ns: u64,
        top: usize,
    ) -> Result<Stats, QueryLogError> {
        self.blocking(move |db| db.stats(from_ns, to_ns, step_ns, top))
            .await
    }

    /// Deletes facts older than `before_ns` (0: all), keeping rollups and dictionaries; the
    /// number deleted.
    pub async fn purge(&self, before_ns: u64) -> Result<u64, QueryLogError> {
        self.blocking(move |db| db.purge(before_ns, redb::PRUNE_BATCH))
            .await
    }

    /// Every entry logged from now on (privacy applied; omitted ones not sent), for live
    /// tails. A subscriber that falls behind loses the oldest and is told how many.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<Entry>> {
        self.shared.tail.subscribe()
    }

    /// Sends `events` (omitted ones left out) to the live tails, if any listen.
    pub(crate) fn publish_tail(&self, events: &[Arc<Event>]) {
        if self.shared.tail.receiver_count() == 0 {
            return;
        }
        for event in events.iter().filter(|e| e.privacy != Privacy::Omit) {
            let _ = self.shared.tail.send(Arc::new(Entry::from(&**event)));
        }
    }

    /// The doctor's check: `(status, message)`; the database file must be private (0600)
    /// and appends must be succeeding.
    pub fn health(&self) -> (&'static str, String) {
        use std::os::unix::fs::PermissionsExt as _;
        let failing = self.shared.metrics.sink_failing.load(Relaxed) != 0;
        let Some((_, path)) = &self.shared.db else {
            return match self.sink() {
                "none" => (
                    "ok",
                    "disabled (querylog.enabled = false or querylog.sink = none)".into(),
                ),
                sink => ("ok", format!("writing to the {sink} sink")),
            };
        };
        match std::fs::metadata(path) {
            Err(e) => ("fail", format!("{}: {e}", path.display())),
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => (
                "warn",
                format!(
                    "{} is mode {:o}: others than the owner can read the query log (chmod 600)",
                    path.display(),
                    meta.permissions().mode() & 0o777
                ),
            ),
            Ok(meta) if meta.permissions().mode() & 0o200 == 0 => {
                ("fail", format!("{} is not writable", path.display()))
            }
            Ok(_) if failing => (
                "fail",
                format!("{}: appends are failing (see the log)", path.display()),
            ),
            Ok(meta) => (
                "ok",
                format!(
                    "{} (0600, {} bytes), appends succeeding",
                    path.display(),
                    meta.len()
                ),
            ),
        }
    }

    /// The query log's counters in Prometheus text.
    pub fn render_metrics(&self, out: &mut String) {
        let m = &self.shared.metrics;
        let sink = self.sink();
        let dropped = self.shared.events.as_ref().map_or(0, |s| s.dropped());
        let db_bytes = self
            .shared
            .db
            .as_ref()
            .and_then(|(_, path)| std::fs::metadata(path).ok())
            .map_or(0, |meta| meta.len());
        let lag = m.lag_ms.load(Relaxed) as f64 / 1000.0;
        let families: [(&str, &str, &str, String); 8] = [
            (
                "kudurru_querylog_written_total",
                "counter",
                "Query-log events the writer handed to the sink (omitted ones included).",
                m.written.load(Relaxed).to_string(),
            ),
            (
                "kudurru_querylog_sink_dropped_total",
                "counter",
                "Query-log events the sink dropped: its buffer was full, its peer away, or a write failed.",
                dropped.to_string(),
            ),
            (
                "kudurru_querylog_committed_total",
                "counter",
                "Query-log entries committed to querylog.db.",
                m.committed.load(Relaxed).to_string(),
            ),
            (
                "kudurru_querylog_omitted_total",
                "counter",
                "Queries of clients whose privacy is omit (counted in the rollups, not logged).",
                m.omitted.load(Relaxed).to_string(),
            ),
            (
                "kudurru_querylog_pruned_total",
                "counter",
                "Query-log entries deleted by retention (querylog.retention, a group's retention, querylog.maxBytes).",
                m.pruned.load(Relaxed).to_string(),
            ),
            (
                "kudurru_querylog_pseudonym_rotations_total",
                "counter",
                "Times the pseudonym key was replaced (querylog.pseudonymRotation, privacy changes).",
                m.rotations.load(Relaxed).to_string(),
            ),
            (
                "kudurru_querylog_writer_lag_seconds",
                "gauge",
                "Age of the newest record of the writer's last round when it was processed.",
                format!("{lag:.3}"),
            ),
            (
                "kudurru_querylog_db_bytes",
                "gauge",
                "Size of querylog.db (0 without the redb sink).",
                db_bytes.to_string(),
            ),
        ];
        for (name, kind, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            if name == "kudurru_querylog_sink_dropped_total"
                || name == "kudurru_querylog_written_total"
            {
                let _ = writeln!(out, "{name}{{sink=\"{sink}\"}} {value}");
            } else {
                let _ = writeln!(out, "{name} {value}");
            }
        }
        // The sinks that hand events on (dnstap, jsonl): delivered, and the collector's state.
        if let Some(events) = &self.shared.events {
            let delivered = events.delivered().map(|n| {
                (
                    "kudurru_querylog_sink_delivered_total",
                    "counter",
                    "Query-log events the sink handed on: written to the dnstap collector or to querylog.file.",
                    format!("{{sink=\"{sink}\"}} {n}"),
                )
            });
            let connected = events.connected().map(|up| {
                (
                    "kudurru_querylog_dnstap_connected",
                    "gauge",
                    "1 while the dnstap collector is connected (handshake done), else 0.",
                    format!(" {}", u8::from(up)),
                )
            });
            for (name, kind, help, series) in delivered.into_iter().chain(connected) {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{series}"
                );
            }
        }
        let undecodable = m.undecodable.load(Relaxed);
        if undecodable > 0 {
            tracing::debug!(undecodable, "query-log records that did not decode");
        }
    }
}

/// The writer's and the sinks' counters.
#[derive(Debug, Default)]
pub struct QueryLogMetrics {
    /// Events handed to the sink.
    pub written: AtomicU64,
    /// Entries committed to the database.
    pub committed: AtomicU64,
    /// Omitted events.
    pub omitted: AtomicU64,
    /// Records that did not decode.
    pub undecodable: AtomicU64,
    /// Entries pruned by retention.
    pub pruned: AtomicU64,
    /// Pseudonym key rotations.
    pub rotations: AtomicU64,
    /// The last round's lag, milliseconds.
    pub lag_ms: AtomicU64,
    /// 1 while the sink's writes fail.
    pub sink_failing: AtomicU64,
}

impl From<&Event> for Entry {
    fn from(event: &Event) -> Self {
        let s = &event.summary;
        let mut flag_bits = 0;
        for (record, entry) in [
            (flags::BLOCKED, entry_flags::BLOCKED),
            (flags::CLOAKED, entry_flags::CLOAKED),
            (flags::CLIPPED, entry_flags::CLIPPED),
        ] {
            if event.record_flags & record != 0 {
                flag_bits |= entry;
            }
        }
        for (set, entry) in [
            (s.dnssec_ok, entry_flags::DNSSEC_OK),
            (s.truncated, entry_flags::TRUNCATED),
            (s.recursion_desired, entry_flags::RECURSION_DESIRED),
        ] {
            if set {
                flag_bits |= entry;
            }
        }
        Self {
            time_ns: event.time_ns,
            client: event.client.render(),
            client_id: event.client_id.clone(),
            group: event.group.clone(),
            transport: event.transport as u8,
            source: event.source as u8,
            qname: s.qname.clone(),
            qtype: s.qtype,
            rcode: s.rcode,
            flags: flag_bits,
            answer: if s.more_answers > 0 {
                format!("{}, +{} more", s.answers.join(", "), s.more_answers)
            } else {
                s.answers.join(", ")
            },
            upstream: event.upstream.clone(),
            upstream_latency_us: event.upstream_latency_us,
            policy: event.policy.clone(),
            list: event.list.clone(),
            rule: event.rule.clone(),
            ede: s.ede,
            omitted: event.privacy == Privacy::Omit,
        }
    }
}
