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
/// How long the writer waits for the list manager's first build (the client groups) before
/// it writes anything.
const GROUPS_WAIT: Duration = Duration::from_secs(10);
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
    // No entry is written before the client groups are known: a group that omits or hides its
    // clients must not be logged under the global mode in the first moments after a start.
    // Records wait in the channel meanwhile (the cores drop and count what does not fit).
    if let Some(source) = &groups {
        let deadline = Instant::now() + GROUPS_WAIT;
        while source.check_inputs().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if source.check_inputs().is_none() {
            tracing::warn!(
                "query log: the client groups are still not read; logging with the global privacy until they are"
            );
        }
    }
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use kudurru_core::policy::{ClientGroupSpec, GroupQueryLog};
    use kudurru_core::querylog::{Source, Transport};

    use super::*;
    use crate::querylog::{ClientView, Entry};

    /// A query for `name` A and a NOERROR answer with one address.
    fn messages(name: &str) -> (Vec<u8>, Vec<u8>) {
        use domain::base::{MessageBuilder, Name, Rtype};
        use domain::rdata::A;
        let qname: Name<Vec<u8>> = name.parse().unwrap();
        let mut query = MessageBuilder::new_vec().question();
        query.header_mut().set_id(7);
        query.header_mut().set_rd(true);
        query.push((&qname, Rtype::A)).unwrap();
        let query = query.into_message();
        let mut answer = MessageBuilder::new_vec()
            .start_answer(&query, domain::base::iana::Rcode::NOERROR)
            .unwrap();
        answer
            .push((&qname, 300, A::new([192, 0, 2, 1].into())))
            .unwrap();
        (query.into_octets(), answer.into_message().into_octets())
    }

    fn batch(clients: &[(&str, &str)], name: &str) -> Batch {
        let (query, response) = messages(name);
        let mut bytes = Vec::new();
        for (i, (client, id)) in clients.iter().enumerate() {
            let client: SocketAddr = client.parse().unwrap();
            RecordRef {
                time_ns: 1_765_000_000_000_000_000 + i as u64,
                client,
                transport: Transport::Udp,
                source: Source::Cache,
                flags: 0,
                client_id: id,
                policy: "",
                list: "",
                upstream: "",
                upstream_latency_us: 0,
                query: &query,
                response: &response,
            }
            .encode(&mut bytes);
        }
        Batch {
            core: 0,
            records: clients.len() as u32,
            bytes,
        }
    }

    fn group(client: &str, privacy: Option<Privacy>) -> ClientGroupSpec {
        ClientGroupSpec {
            clients: vec![client.parse().unwrap()],
            client_ids: vec![],
            query_log: GroupQueryLog {
                privacy,
                retention: None,
            },
        }
    }

    fn table(global: Privacy, groups: &[(&str, ClientGroupSpec)]) -> GroupTable {
        GroupTable::new(
            groups.iter().map(|(n, s)| (*n, s)),
            Defaults {
                privacy: global,
                retention: Duration::from_secs(86_400),
            },
        )
    }

    fn groups() -> Vec<(&'static str, ClientGroupSpec)> {
        vec![
            ("full", group("127.0.0.2", Some(Privacy::Full))),
            ("cut", group("127.0.0.3", Some(Privacy::Truncate))),
            ("pseudo", group("127.0.0.4", Some(Privacy::Pseudonymize))),
            ("anon", group("127.0.0.5", Some(Privacy::None))),
            ("quiet", group("127.0.0.6", Some(Privacy::Omit))),
        ]
    }

    #[test]
    fn every_record_becomes_an_event_with_its_groups_privacy() {
        let mut p = Processor::new(table(Privacy::Full, &groups()), Arc::default());
        let round = p.process(&[batch(
            &[
                ("127.0.0.2:5000", ""),
                ("127.0.0.3:5000", ""),
                ("127.0.0.4:5000", "kids"),
                ("127.0.0.5:5000", "kids"),
                ("127.0.0.6:5000", ""),
                ("127.0.0.9:5000", ""),
            ],
            "www.example.com",
        )]);
        assert_eq!(round.undecodable, 0);
        assert_eq!(round.omitted, 1);
        let seen: Vec<(String, String, u16, String, Privacy)> = round
            .events
            .iter()
            .map(|e| {
                (
                    e.group.clone(),
                    e.client.render(),
                    e.port,
                    e.client_id.clone(),
                    e.privacy,
                )
            })
            .collect();
        assert_eq!(
            seen[0],
            (
                "full".into(),
                "127.0.0.2".into(),
                5000,
                String::new(),
                Privacy::Full
            )
        );
        assert_eq!(
            seen[1],
            (
                "cut".into(),
                "127.0.0.0/24".into(),
                0,
                String::new(),
                Privacy::Truncate
            )
        );
        assert_eq!(seen[2].0, "pseudo");
        assert!(seen[2].1.starts_with("p-") && seen[2].3.starts_with("p-"));
        assert_eq!(
            seen[3],
            (
                "anon".into(),
                String::new(),
                0,
                String::new(),
                Privacy::None
            )
        );
        assert_eq!(
            seen[4],
            (
                "quiet".into(),
                String::new(),
                0,
                String::new(),
                Privacy::Omit
            )
        );
        assert_eq!(
            seen[5],
            (
                "default".into(),
                "127.0.0.9".into(),
                5000,
                String::new(),
                Privacy::Full
            )
        );
        let entry = Entry::from(&*round.events[0]);
        assert_eq!(entry.qname, "www.example.com.");
        assert_eq!(entry.qtype, 1);
        assert_eq!(entry.rcode, Some(0));
        assert!(!entry.omitted);
        assert!(Entry::from(&*round.events[4]).omitted);
    }

    #[test]
    fn a_privacy_change_rotates_the_key_and_other_changes_do_not() {
        let mut p = Processor::new(table(Privacy::Pseudonymize, &groups()), Arc::default());
        let one = batch(&[("192.0.2.7:1", "")], "a.example");
        let before = p.process(std::slice::from_ref(&one)).events[0]
            .client
            .clone();
        assert!(matches!(before, ClientView::Pseudonym(_)));
        assert_eq!(
            p.process(std::slice::from_ref(&one)).events[0].client,
            before
        );
        // A retention change is no privacy change: same key.
        let mut longer = groups();
        longer[0].1.query_log.retention = Some(Duration::from_secs(60));
        assert!(!p.set_table(table(Privacy::Pseudonymize, &longer)));
        assert_eq!(
            p.process(std::slice::from_ref(&one)).events[0].client,
            before
        );
        // A group's privacy changed: a new key, the same client gets another pseudonym.
        let mut stricter = longer.clone();
        stricter[0].1.query_log.privacy = Some(Privacy::Truncate);
        assert!(p.set_table(table(Privacy::Pseudonymize, &stricter)));
        let after = p.process(std::slice::from_ref(&one)).events[0]
            .client
            .clone();
        assert!(matches!(after, ClientView::Pseudonym(_)));
        assert_ne!(after, before);
        // The schedule's rotation too.
        p.rotate();
        assert_ne!(
            p.process(std::slice::from_ref(&one)).events[0].client,
            after
        );
    }

    #[test]
    fn a_cut_batch_counts_what_did_not_decode_and_keeps_what_came_before() {
        let mut p = Processor::new(table(Privacy::Full, &[]), Arc::default());
        let mut b = batch(&[("192.0.2.7:1", ""), ("192.0.2.8:1", "")], "a.example");
        let cut = b.bytes.len() - 3;
        b.bytes.truncate(cut);
        let round = p.process(&[b]);
        assert_eq!((round.events.len(), round.undecodable), (1, 1));
    }

    /// A sink that keeps what it is offered.
    #[derive(Default)]
    struct Kept(Mutex<Vec<Arc<Event>>>);

    impl EventSink for Kept {
        fn name(&self) -> &'static str {
            "memory"
        }
        fn offer(&self, events: &[Arc<Event>]) {
            self.0.lock().unwrap().extend_from_slice(events);
        }
        fn dropped(&self) -> u64 {
            0
        }
    }

    #[tokio::test]
    async fn the_writer_feeds_the_sink_and_the_tail_and_follows_a_privacy_reload() {
        let sink = Arc::new(Kept::default());
        let log = QueryLog::new(crate::querylog::QueryLogParts {
            sink: "memory",
            events: Some(sink.clone()),
            db: None,
            metrics: Arc::default(),
        });
        let mut tail = log.subscribe();
        let live = LiveSettings {
            defaults: Defaults {
                privacy: Privacy::Full,
                retention: Duration::ZERO,
            },
            max_bytes: 0,
            pseudonym_rotation: Duration::from_secs(3600),
        };
        let (settings, receiver_settings) = watch::channel(live);
        let (mut sender, receiver) = kudurru_transports::querylog::channel(1);
        let writer = tokio::spawn(run(WriterParts {
            receiver,
            sink: Some(sink.clone()),
            groups: None,
            settings: receiver_settings,
            log: log.clone(),
        }));
        sender
            .try_send(batch(&[("192.0.2.7:53000", "")], "a.example"))
            .unwrap();
        let first = tail.recv().await.unwrap();
        assert_eq!(first.client, "192.0.2.7");
        assert_eq!(first.group, "default");
        settings.send_replace(LiveSettings {
            defaults: Defaults {
                privacy: Privacy::Omit,
                ..live.defaults
            },
            ..live
        });
        sender
            .try_send(batch(&[("192.0.2.7:53000", "")], "b.example"))
            .unwrap();
        // The writer reads the settings once a round: let it take the omitted one first.
        while sink.0.lock().unwrap().len() < 2 {
            tokio::task::yield_now().await;
        }
        settings.send_replace(LiveSettings {
            defaults: Defaults {
                privacy: Privacy::Truncate,
                ..live.defaults
            },
            ..live
        });
        sender
            .try_send(batch(&[("192.0.2.7:53000", "")], "c.example"))
            .unwrap();
        // The omitted entry never reaches the tail.
        let next = tail.recv().await.unwrap();
        assert_eq!(next.qname, "c.example.");
        assert_eq!(next.client, "192.0.2.0/24");
        drop(sender);
        writer.await.unwrap();
        let events = sink.0.lock().unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[1].privacy, Privacy::Omit);
        let m = log.metrics();
        assert_eq!(m.written.load(Relaxed), 3);
        assert_eq!(m.omitted.load(Relaxed), 1);
        assert!(m.rotations.load(Relaxed) >= 1);
    }

    /// How many records a second one core summarizes and applies privacy to (the writer's
    /// work per record before the sink).
    #[test]
    #[ignore = "a measurement, not a check: cargo test --release -p kudurru-control --lib writer_throughput -- --ignored --nocapture"]
    fn writer_throughput() {
        let clients: Vec<String> = (0..256)
            .map(|i| format!("10.0.{}.{}:5353", i / 16, i % 256))
            .collect();
        let pairs: Vec<(&str, &str)> = clients.iter().map(|c| (c.as_str(), "")).collect();
        let batches: Vec<Batch> = (0..64).map(|_| batch(&pairs, "www.example.com")).collect();
        let records: usize = batches.iter().map(|b| b.records as usize).sum();
        for privacy in [
            Privacy::Full,
            Privacy::Truncate,
            Privacy::Pseudonymize,
            Privacy::Omit,
        ] {
            let mut p = Processor::new(table(privacy, &[]), Arc::default());
            let start = Instant::now();
            let mut rounds = 0;
            while start.elapsed() < Duration::from_secs(2) {
                let round = p.process(&batches);
                assert_eq!(round.events.len(), records);
                rounds += 1;
            }
            let per_second = (rounds * records) as f64 / start.elapsed().as_secs_f64();
            let entries = Instant::now();
            let round = p.process(&batches);
            let converted: Vec<Entry> = round.events.iter().map(|e| Entry::from(&**e)).collect();
            let with_entries = records as f64 / entries.elapsed().as_secs_f64();
            println!(
                "{:>12}: {per_second:>10.0} records/s (events); {with_entries:>10.0} records/s with Entry conversion ({} entries)",
                privacy.label(),
                converted.len()
            );
        }
    }
}
