//! The writer: one task on the control thread drains the cores' batches, and hands each round
//! of them to the blocking pool, where every record is decoded, summarized, placed in its
//! client's group and stripped to what its privacy mode keeps; the events go to the sink, the
//! entries to live tails.
//!
//! ```text
//! QueryLogReceiver ─▶ round (every batch waiting, up to ROUND_RECORDS) ─▶ blocking pool:
//!     decode ─▶ summarize ─▶ GroupTable::resolve (cached per client) ─▶ Pseudonyms::apply
//!     ─▶ Event ─▶ sink.offer (never waits)            ─▶ Entry ─▶ tail (when someone listens)
//! ```
//! The writer never blocks the cores: while it works on a round the channel fills, and a core
//! whose slots are full drops its batch and counts it (`kudurru_querylog_dropped_total`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant, SystemTime};

use futures_lite::StreamExt as _;
use kudurru_core::policy::PolicyIndex;
use kudurru_core::querylog::{Privacy, RecordRef, Records, flags, summarize};
use kudurru_transports::querylog::{Batch, QueryLogReceiver};
use tokio::sync::watch;

use super::privacy::{Defaults, GroupTable, Kept, Pseudonyms};
use super::{Event, EventSink, QueryLog};

/// Most records one round takes before it is processed (the rest wait for the next).
pub const ROUND_RECORDS: usize = 16_384;
/// Most clients whose group and rendered address are remembered between key rotations.
const CACHE_CLIENTS: usize = 65_536;

/// The query-log settings that apply while running (`querylog.privacy`, `.retention`,
/// `.maxBytes`, `.pseudonymRotation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveSettings {
    /// The global privacy and retention.
    pub defaults: Defaults,
    /// `querylog.maxBytes` (0: no limit).
    pub max_bytes: u64,
    /// `querylog.pseudonymRotation`.
    pub pseudonym_rotation: Duration,
}

impl LiveSettings {
    /// The live part of validated `querylog.*` settings.
    pub fn of(settings: &crate::config::QueryLogSettings) -> Self {
        Self {
            defaults: Defaults {
                privacy: settings.privacy,
                retention: settings.retention,
            },
            max_bytes: settings.max_bytes,
            pseudonym_rotation: settings.pseudonym_rotation,
        }
    }
}

/// Where the writer finds the client groups and the policy index: the list manager's shared
/// state (`None` in tests without one: every client is in `default`).
pub type GroupSource = Option<Arc<crate::blocking::Shared>>;

/// The group table of `groups` (the list manager's last build) over `live`.
pub fn group_table(groups: &GroupSource, live: &LiveSettings) -> GroupTable {
    let inputs = groups.as_ref().and_then(|g| g.check_inputs());
    match &inputs {
        Some(inputs) => GroupTable::new(
            inputs
                .groups
                .iter()
                .map(|(name, spec)| (name.as_str(), spec)),
            live.defaults,
        ),
        None => GroupTable::new(std::iter::empty(), live.defaults),
    }
}

/// What the writer runs on.
pub struct WriterParts {
    /// The cores' batches.
    pub receiver: QueryLogReceiver,
    /// Where events go (`None`: `querylog.sink = none`, records are only counted).
    pub sink: Option<Arc<dyn EventSink>>,
    /// Client groups and the policy index.
    pub groups: GroupSource,
    /// The live settings (a reload sends new ones).
    pub settings: watch::Receiver<LiveSettings>,
    /// The handle: its tail and counters.
    pub log: QueryLog,
}

/// The state a round works with, moved to the blocking pool and back.
pub struct Processor {
    table: Arc<GroupTable>,
    pseudonyms: Pseudonyms,
    /// Per client: the group, the mode, and the client as kept (the port is added per record).
    cache: HashMap<(IpAddr, Box<str>), Cached>,
    index: Arc<PolicyIndex>,
}

#[derive(Debug, Clone)]
struct Cached {
    group: Arc<str>,
    privacy: Privacy,
    kept: Kept,
}

/// What a round produced.
#[derive(Debug, Default)]
pub struct Round {
    /// The events, in batch order.
    pub events: Vec<Arc<Event>>,
    /// Records that did not decode (the rest of their batch is lost).
    pub undecodable: u64,
    /// Events whose privacy is `omit`.
    pub omitted: u64,
    /// The newest record's time.
    pub newest_ns: u64,
}

impl Processor {
    /// A processor over `table` with a fresh pseudonym key.
    pub fn new(table: GroupTable, index: Arc<PolicyIndex>) -> Self {
        Self {
            table: Arc::new(table),
            pseudonyms: Pseudonyms::new(),
            cache: HashMap::new(),
            index,
        }
    }

    /// New groups or global settings; the key rotates when any privacy setting changed.
    /// True when it rotated.
    pub fn set_table(&mut self, table: GroupTable) -> bool {
        if *self.table == table {
            return false;
        }
        let rotate = self.table.privacy_settings() != table.privacy_settings();
        self.table = Arc::new(table);
        self.cache.clear();
        if rotate {
            self.pseudonyms.rotate();
        }
        rotate
    }

    /// A new pseudonym key (the rotation period passed).
    pub fn rotate(&mut self) {
        self.pseudonyms.rotate();
        self.cache.clear();
    }

    /// The policy index the deciding rules are looked up in.
    pub fn set_index(&mut self, index: Arc<PolicyIndex>) {
        self.index = index;
    }

    /// The group table in use.
    pub fn table(&self) -> &GroupTable {
        &self.table
    }

    /// Processes `batches` into events.
    pub fn process(&mut self, batches: &[Batch]) -> Round {
        let mut round = Round {
            events: Vec::with_capacity(batches.iter().map(|b| b.records as usize).sum()),
            ..Round::default()
        };
        for batch in batches {
            for record in Records::new(&batch.bytes) {
                match record {
                    Ok(record) => {
                        let event = self.event(&record);
                        round.newest_ns = round.newest_ns.max(event.time_ns);
                        if event.privacy == Privacy::Omit {
                            round.omitted += 1;
                        }
                        round.events.push(Arc::new(event));
                    }
                    Err(_) => round.undecodable += 1,
                }
            }
        }
        round
    }

    /// One record as an event.
    pub fn event(&mut self, record: &RecordRef<'_>) -> Event {
        let summary = summarize(record.query, record.response);
        let rule = if record.flags & flags::BLOCKED != 0 && !record.policy.is_empty() {
            self.rule(&summary.qname, record)
        } else {
            String::new()
        };
        let client = record.client.ip();
        let cached = self.client(client, record.client_id);
        let port = if cached.privacy == Privacy::Full {
            record.client.port()
        } else {
            0
        };
        Event {
            time_ns: record.time_ns,
            transport: record.transport,
            source: record.source,
            record_flags: record.flags,
            client: cached.kept.client.clone(),
            port,
            client_id: cached.kept.client_id.clone(),
            group: cached.group.to_string(),
            privacy: cached.privacy,
            policy: record.policy.to_owned(),
            list: record.list.to_owned(),
            rule,
            upstream: record.upstream.to_owned(),
            upstream_latency_us: record.upstream_latency_us,
            query: record.query.to_vec(),
            response: record.response.to_vec(),
            summary,
        }
    }

    fn client(&mut self, client: IpAddr, client_id: &str) -> &Cached {
        if self.cache.len() >= CACHE_CLIENTS {
            self.cache.clear();
        }
        let (table, pseudonyms) = (&self.table, &self.pseudonyms);
        self.cache
            .entry((client, client_id.into()))
            .or_insert_with(|| {
                let resolved = table.resolve(client, client_id);
                Cached {
                    kept: pseudonyms.apply(resolved.privacy, client, 0, client_id),
                    group: resolved.group,
                    privacy: resolved.privacy,
                }
            })
    }

    /// The rule that blocked `record`, as the deciding list writes it; empty when the index in
    /// use now decides otherwise (it changed since, or the block came through a CNAME).
    fn rule(&self, qname: &str, record: &RecordRef<'_>) -> String {
        let Ok(wire) = kudurru_core::policy::name::to_wire(qname) else {
            return String::new();
        };
        let client_id = Some(record.client_id).filter(|id| !id.is_empty());
        let explanation = self.index.explain(&wire, record.client.ip(), client_id);
        let same = explanation.policy.as_deref() == Some(record.policy)
            && explanation.list.as_deref().unwrap_or("") == record.list;
        match explanation.rule {
            Some(rule) if same => rule,
            _ => String::new(),
        }
    }
}

/// Runs the writer until the cores' channel closes.
pub async fn run(parts: WriterParts) {
    let WriterParts {
        mut receiver,
        sink,
        groups,
        mut settings,
        log,
    } = parts;
    let metrics = log.metrics();
    let mut live = *settings.borrow_and_update();
    let index = |groups: &GroupSource| {
        groups
            .as_ref()
            .map(|g| g.publisher.index())
            .unwrap_or_default()
    };
    let mut processor = Some(Processor::new(group_table(&groups, &live), index(&groups)));
    let mut seen_inputs = groups.as_ref().and_then(|g| g.check_inputs());
    let mut rotated_at = Instant::now();
    while let Some(first) = receiver.next().await {
        let mut batches = vec![first];
        let mut records = batches[0].records as usize;
        while records < ROUND_RECORDS {
            match receiver.try_recv() {
                Ok(batch) => {
                    records += batch.records as usize;
                    batches.push(batch);
                }
                _ => break,
            }
        }
        let Some(mut p) = processor.take() else {
            break;
        };
        // Settings and groups, checked once a round.
        let inputs = groups.as_ref().and_then(|g| g.check_inputs());
        let groups_changed = match (&inputs, &seen_inputs) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            (None, None) => false,
            _ => true,
        };
        let settings_changed = settings.has_changed().unwrap_or(false);
        if settings_changed || groups_changed {
            let old = live;
            live = *settings.borrow_and_update();
            seen_inputs = inputs;
            let rotated = p.set_table(group_table(&groups, &live));
            p.set_index(index(&groups));
            if rotated || old.pseudonym_rotation != live.pseudonym_rotation {
                if !rotated {
                    p.rotate();
                }
                rotated_at = Instant::now();
                metrics.rotations.fetch_add(1, Relaxed);
                tracing::info!("query log: the privacy settings changed; new pseudonym key");
            }
        }
        if rotated_at.elapsed() >= live.pseudonym_rotation {
            p.rotate();
            rotated_at = Instant::now();
            metrics.rotations.fetch_add(1, Relaxed);
        }
        let done = tokio::task::spawn_blocking(move || {
            let round = p.process(&batches);
            (p, round)
        })
        .await;
        let (p, round) = match done {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "query log: a round failed; the writer stops");
                break;
            }
        };
        processor = Some(p);
        metrics.undecodable.fetch_add(round.undecodable, Relaxed);
        metrics.omitted.fetch_add(round.omitted, Relaxed);
        metrics
            .written
            .fetch_add(round.events.len() as u64, Relaxed);
        if round.newest_ns > 0 {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            metrics
                .lag_ms
                .store(now.saturating_sub(round.newest_ns) / 1_000_000, Relaxed);
        }
        if let Some(sink) = &sink {
            sink.offer(&round.events);
        }
        log.publish_tail(&round.events);
    }
    tracing::info!("query log: the cores' channel closed; the writer stops");
}
