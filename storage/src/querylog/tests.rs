//! The query log's database against real redb files in temporary directories: every filter
//! compared with a plain scan of what was appended, paging, rollups, purge, retention,
//! reopening, damage.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redb::ReadableTable;

use super::*;

const SECOND: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z, a multiple of an hour.
const T0: u64 = 1_767_225_600 * SECOND;

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "kudurru-querylog-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir is writable");
        Self(path)
    }

    fn file(&self) -> PathBuf {
        self.0.join(FILE_NAME)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NAMES: [&str; 8] = [
    "example.com.",
    "www.example.com.",
    "a.b.example.com.",
    "badexample.com.",
    "example.net.",
    "ads.tracker.example.",
    "cdn.tracker.example.",
    "localhost.",
];
const CLIENTS: [&str; 4] = ["192.0.2.1", "192.0.2.2", "2001:db8::1", ""];
const GROUPS: [&str; 3] = ["default", "kids", "guests"];

/// Entries with every field varied, times spread over three hours (not in order).
fn generated(count: usize, seed: u64) -> Vec<Entry> {
    let mut random = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let blocked = random.random_ratio(1, 5);
            let rcode = match random.random_range(0..10) {
                0 => None,
                1 | 2 => Some(3),
                _ => Some(0),
            };
            Entry {
                time_ns: T0 + random.random_range(0..3 * 3600) * SECOND + random.random_range(0..3),
                client: CLIENTS[random.random_range(0..CLIENTS.len())].to_owned(),
                client_id: if random.random_ratio(1, 4) {
                    "laptop".to_owned()
                } else {
                    String::new()
                },
                group: GROUPS[random.random_range(0..GROUPS.len())].to_owned(),
                transport: random.random_range(0..6),
                source: random.random_range(0..6),
                qname: NAMES[random.random_range(0..NAMES.len())].to_owned(),
                qtype: [1, 28, 65, 16][random.random_range(0..4)],
                rcode,
                flags: if blocked { entry_flags::BLOCKED } else { 0 }
                    | entry_flags::RECURSION_DESIRED,
                answer: if rcode == Some(0) {
                    format!("A 192.0.2.{}", random.random_range(1..255))
                } else {
                    String::new()
                },
                upstream: if random.random_bool(0.5) {
                    "192.0.2.53:53".to_owned()
                } else {
                    String::new()
                },
                upstream_latency_us: random.random_range(0..50_000),
                policy: if blocked {
                    "ads".to_owned()
                } else {
                    String::new()
                },
                list: if blocked {
                    "easylist".to_owned()
                } else {
                    String::new()
                },
                rule: if blocked {
                    "||tracker.example^".to_owned()
                } else {
                    String::new()
                },
                ede: if blocked { Some(15) } else { None },
                omitted: false,
            }
        })
        .collect()
}

fn matches(filter: &Filter, entry: &Entry) -> bool {
    let below = |suffix: &str| {
        let suffix = suffix.trim_start_matches('.');
        entry.qname == suffix || entry.qname.ends_with(&format!(".{suffix}"))
    };
    !entry.omitted
        && filter.from_ns.is_none_or(|from| entry.time_ns >= from)
        && filter.to_ns.is_none_or(|to| entry.time_ns < to)
        && filter.client.as_ref().is_none_or(|c| *c == entry.client)
        && filter
            .client_id
            .as_ref()
            .is_none_or(|c| *c == entry.client_id)
        && filter.qname.as_ref().is_none_or(|q| *q == entry.qname)
        && filter.qname_suffix.as_deref().is_none_or(below)
        && filter.qtype.is_none_or(|q| q == entry.qtype)
        && filter.rcode.is_none_or(|r| r == entry.rcode)
        && filter
            .blocked
            .is_none_or(|b| b == (entry.flags & entry_flags::BLOCKED != 0))
        && filter.policy.as_ref().is_none_or(|p| *p == entry.policy)
        && filter.group.as_ref().is_none_or(|g| *g == entry.group)
        && filter.transport.is_none_or(|t| t == entry.transport)
        && filter.source.is_none_or(|s| s == entry.source)
}

/// What a search must answer: the matching entries, newest first (ties: last appended first).
fn expected(entries: &[Entry], filter: &Filter) -> Vec<Entry> {
    let mut found: Vec<(u64, usize, &Entry)> = entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| matches(filter, entry))
        .map(|(position, entry)| (entry.time_ns, position, entry))
        .collect();
    found.sort_by_key(|&(time, position, _)| std::cmp::Reverse((time, position)));
    found
        .into_iter()
        .map(|(_, _, entry)| entry.clone())
        .collect()
}

/// Every page of a search, checking that cursors only decrease.
fn all_pages(db: &QueryLogDb, filter: &Filter, limit: usize) -> Vec<Entry> {
    let mut cursor = None;
    let mut found = Vec::new();
    let mut last = None;
    loop {
        let page = db.search(filter, cursor, limit).expect("search succeeds");
        assert!(page.entries.len() <= limit);
        for (position, entry) in &page.entries {
            assert!(last.is_none_or(|last| *position < last), "cursors decrease");
            last = Some(*position);
            found.push(entry.clone());
        }
        match page.next {
            Some(next) => {
                assert_eq!(page.entries.len(), limit, "a page with a next is full");
                cursor = Some(next);
            }
            None => return found,
        }
    }
}

fn appended(dir: &TempDir, entries: &[Entry]) -> QueryLogDb {
    let db = QueryLogDb::open(&dir.file()).expect("open");
    for batch in entries.chunks(250) {
        db.append(batch).expect("append");
    }
    db
}

fn filters() -> Vec<Filter> {
    let at = |hours: u64| Some(T0 + hours * 3600 * SECOND);
    let mut filters = vec![
        Filter::default(),
        Filter {
            from_ns: at(1),
            to_ns: at(2),
            ..Filter::default()
        },
        Filter {
            client: Some("192.0.2.1".into()),
            ..Filter::default()
        },
        Filter {
            client: Some(String::new()),
            ..Filter::default()
        },
        Filter {
            client: Some("198.51.100.9".into()),
            ..Filter::default()
        },
        Filter {
            client_id: Some("laptop".into()),
            ..Filter::default()
        },
        Filter {
            qname: Some("www.example.com.".into()),
            ..Filter::default()
        },
        Filter {
            qtype: Some(65),
            ..Filter::default()
        },
        Filter {
            rcode: Some(Some(3)),
            ..Filter::default()
        },
        Filter {
            rcode: Some(None),
            ..Filter::default()
        },
        Filter {
            blocked: Some(true),
            ..Filter::default()
        },
        Filter {
            blocked: Some(false),
            ..Filter::default()
        },
        Filter {
            policy: Some("ads".into()),
            ..Filter::default()
        },
        Filter {
            group: Some("kids".into()),
            ..Filter::default()
        },
        Filter {
            transport: Some(4),
            ..Filter::default()
        },
        Filter {
            source: Some(2),
            ..Filter::default()
        },
        Filter {
            client: Some("2001:db8::1".into()),
            blocked: Some(true),
            qtype: Some(1),
            from_ns: at(1),
            ..Filter::default()
        },
        Filter {
            group: Some("guests".into()),
            rcode: Some(Some(0)),
            transport: Some(0),
            to_ns: at(2),
            ..Filter::default()
        },
        Filter {
            qname_suffix: Some("example.com.".into()),
            client_id: Some("laptop".into()),
            ..Filter::default()
        },
    ];
    for suffix in [
        "example.com.",
        "com.",
        "tracker.example.",
        ".",
        "nothing.test.",
    ] {
        filters.push(Filter {
            qname_suffix: Some(suffix.into()),
            ..Filter::default()
        });
    }
    filters
}

#[test]
fn every_filter_and_combination_matches_a_plain_scan() {
    let dir = TempDir::new("filters");
    let entries = generated(3000, 1);
    let db = appended(&dir, &entries);
    for filter in filters() {
        let want = expected(&entries, &filter);
        let got = all_pages(&db, &filter, 1000);
        assert_eq!(got.len(), want.len(), "count for {filter:?}");
        assert!(got == want, "entries for {filter:?}");
    }
}

#[test]
fn cursor_paging_is_newest_first_without_duplicates_or_gaps() {
    let dir = TempDir::new("paging");
    let entries = generated(1200, 2);
    let db = appended(&dir, &entries);
    for filter in [
        Filter::default(),
        Filter {
            group: Some("kids".into()),
            ..Filter::default()
        },
        Filter {
            qname_suffix: Some("example.com.".into()),
            blocked: Some(true),
            ..Filter::default()
        },
    ] {
        let want = expected(&entries, &filter);
        for limit in [1, 7, 100] {
            assert!(
                all_pages(&db, &filter, limit) == want,
                "limit {limit}, {filter:?}"
            );
        }
    }
    assert_eq!(
        db.search(&Filter::default(), None, 0).unwrap(),
        Page::default()
    );
    assert_eq!(
        db.search(&Filter::default(), Some(Cursor(0)), 10).unwrap(),
        Page::default()
    );
}

#[test]
fn a_suffix_finds_every_name_below_it_and_only_those() {
    let dir = TempDir::new("suffix");
    let entries = generated(800, 3);
    let db = appended(&dir, &entries);
    let names = |suffix: &str| {
        let filter = Filter {
            qname_suffix: Some(suffix.into()),
            ..Filter::default()
        };
        let mut names: Vec<String> = all_pages(&db, &filter, 500)
            .into_iter()
            .map(|entry| entry.qname)
            .collect();
        names.sort();
        names.dedup();
        names
    };
    assert_eq!(
        names("example.com."),
        ["a.b.example.com.", "example.com.", "www.example.com."]
    );
    assert_eq!(names("b.example.com"), ["a.b.example.com."]);
    assert_eq!(
        names("tracker.example."),
        ["ads.tracker.example.", "cdn.tracker.example."]
    );
    assert_eq!(names("com.").len(), 4);
    assert!(names("ample.com.").is_empty());
}

#[test]
fn a_broad_suffix_is_checked_on_the_facts() {
    let dir = TempDir::new("broad");
    let entries: Vec<Entry> = (0..(search::SUFFIX_STREAM_NAMES as u64 + 50))
        .map(|n| Entry {
            time_ns: T0 + n * SECOND,
            qname: format!("host{n}.zone.example."),
            group: "default".into(),
            client: "192.0.2.7".into(),
            ..Entry::default()
        })
        .collect();
    let db = appended(&dir, &entries);
    for filter in [
        Filter {
            qname_suffix: Some("zone.example.".into()),
            ..Filter::default()
        },
        Filter {
            qname_suffix: Some("zone.example.".into()),
            client: Some("192.0.2.7".into()),
            from_ns: Some(T0 + 100 * SECOND),
            ..Filter::default()
        },
    ] {
        assert!(all_pages(&db, &filter, 64) == expected(&entries, &filter));
    }
}

fn stats_of(db: &QueryLogDb) -> Vec<Stats> {
    let end = T0 + 4 * 3600 * SECOND;
    [MINUTE_NS, 15 * MINUTE_NS, HOUR_NS, 2 * HOUR_NS]
        .into_iter()
        .map(|step| db.stats(T0, end, step, 10).expect("stats"))
        .collect()
}

#[test]
fn rollups_count_per_minute_and_hour() {
    let dir = TempDir::new("rollups");
    let entries = generated(2000, 4);
    let db = appended(&dir, &entries);
    let stats = db.stats(T0, T0 + 3 * HOUR_NS, HOUR_NS, 3).expect("stats");
    assert_eq!(stats.series.len(), 3);
    for (hour, bucket) in stats.series.iter().enumerate() {
        let start = T0 + hour as u64 * HOUR_NS;
        let inside: Vec<&Entry> = entries
            .iter()
            .filter(|e| (start..start + HOUR_NS).contains(&e.time_ns))
            .collect();
        assert_eq!(bucket.start_ns, start);
        assert_eq!(bucket.queries, inside.len() as u64);
        let blocked = inside
            .iter()
            .filter(|e| e.flags & entry_flags::BLOCKED != 0)
            .count();
        assert_eq!(bucket.blocked, blocked as u64);
        let hits = inside
            .iter()
            .filter(|e| e.source == 0 || e.source == 2)
            .count();
        assert_eq!(bucket.cache_hits, hits as u64);
        let dropped = inside.iter().filter(|e| e.rcode.is_none()).count();
        assert_eq!(
            bucket.by_rcode.get(&None).copied().unwrap_or(0),
            dropped as u64
        );
    }
    let mut names: BTreeMap<&str, u64> = BTreeMap::new();
    for entry in &entries {
        *names.entry(&entry.qname).or_default() += 1;
    }
    let (top_name, top_count) = names.iter().max_by_key(|(_, count)| **count).unwrap();
    assert_eq!(stats.top_names.len(), 3);
    assert_eq!(stats.top_names[0], ((*top_name).to_owned(), *top_count));
    let clients: u64 = stats.top_clients.iter().map(|(_, count)| count).sum();
    assert!(
        stats
            .top_clients
            .iter()
            .all(|(client, _)| !client.is_empty())
    );
    assert!(clients > 0);
    // The minute series adds up to the same total, aligned to its step.
    let minutes = db
        .stats(T0 + 30 * SECOND, T0 + 3 * HOUR_NS, 15 * MINUTE_NS, 3)
        .unwrap();
    assert_eq!(minutes.series.len(), 12);
    assert_eq!(minutes.series[0].start_ns, T0);
    let total: u64 = minutes.series.iter().map(|bucket| bucket.queries).sum();
    assert_eq!(total, entries.len() as u64);
    assert!(matches!(
        db.stats(T0, T0 + HOUR_NS, SECOND, 3),
        Err(StorageError::InvalidArgument { .. })
    ));
    assert!(matches!(
        db.stats(0, u64::MAX, MINUTE_NS, 3),
        Err(StorageError::InvalidArgument { .. })
    ));
}

/// Appends look strings up in a cache of committed ids before the `dict` table: a string
/// first written before a reopen (an empty cache) or in an earlier batch keeps its one id, so
/// every index filter still finds exactly what a plain scan does.
#[test]
fn dictionary_ids_agree_across_batches_and_a_reopen() {
    let dir = TempDir::new("dictionary-cache");
    let entries = generated(2000, 9);
    let (first, second) = entries.split_at(1000);
    drop(appended(&dir, first));
    let db = QueryLogDb::open(&dir.file()).expect("reopen");
    for batch in second.chunks(250) {
        db.append(batch).expect("append");
    }
    for filter in filters() {
        let want = expected(&entries, &filter);
        let got = all_pages(&db, &filter, 1000);
        assert!(got == want, "entries for {filter:?}");
    }
}

#[test]
fn purge_keeps_rollups_and_dictionaries() {
    let dir = TempDir::new("purge");
    let entries = generated(1500, 5);
    let db = appended(&dir, &entries);
    let before = stats_of(&db);
    let cut = T0 + 3600 * SECOND;
    let older = entries.iter().filter(|e| e.time_ns < cut).count() as u64;
    assert_eq!(db.purge(cut, 100).unwrap(), older);
    assert_eq!(db.len().unwrap(), entries.len() as u64 - older);
    let rest = all_pages(&db, &Filter::default(), 5000);
    assert!(rest.iter().all(|entry| entry.time_ns >= cut));
    assert_eq!(stats_of(&db), before, "rollups unchanged by a purge");
    // Index entries went with their facts: an index filter finds only what is left.
    let kids = Filter {
        group: Some("kids".into()),
        ..Filter::default()
    };
    assert!(
        all_pages(&db, &kids, 100)
            == expected(
                &entries,
                &Filter {
                    from_ns: Some(cut),
                    ..kids.clone()
                }
            )
    );
    assert_eq!(db.purge(0, 64).unwrap(), entries.len() as u64 - older);
    assert!(db.is_empty().unwrap());
    assert_eq!(stats_of(&db), before, "rollups survive purging everything");
    assert!(all_pages(&db, &kids, 10).is_empty());
    // The dictionaries stay: the top lists still resolve their names.
    assert!(!before[2].top_names.is_empty());
    assert_eq!(db.purge(0, 64).unwrap(), 0);
}

#[test]
fn retention_by_age_applies_each_groups_limit() {
    let dir = TempDir::new("retention");
    let entries = generated(1500, 6);
    let db = appended(&dir, &entries);
    let now = T0 + 3 * 3600 * SECOND;
    let retention = Retention {
        max_age_ns: 2 * 3600 * SECOND,
        group_max_age_ns: BTreeMap::from([
            ("kids".to_owned(), 3600 * SECOND),
            ("guests".to_owned(), 0),
        ]),
        max_bytes: 0,
    };
    let kept = |entry: &Entry| match entry.group.as_str() {
        "kids" => entry.time_ns >= now - 3600 * SECOND,
        "guests" => true,
        _ => entry.time_ns >= now - 2 * 3600 * SECOND,
    };
    let gone = entries.iter().filter(|entry| !kept(entry)).count() as u64;
    assert!(gone > 0);
    assert_eq!(db.prune(&retention, now, 37).unwrap(), gone);
    let mut want: Vec<Entry> = entries
        .iter()
        .filter(|entry| kept(entry))
        .cloned()
        .collect();
    want = expected(&want, &Filter::default());
    assert!(all_pages(&db, &Filter::default(), 1000) == want);
    assert_eq!(db.prune(&retention, now, 37).unwrap(), 0);
}

#[test]
fn retention_by_size_shrinks_used_bytes_oldest_first() {
    let dir = TempDir::new("size");
    let entries = generated(3000, 7);
    let db = appended(&dir, &entries);
    let used = db.used_bytes().unwrap();
    let limit = used / 2;
    let deleted = db
        .prune(
            &Retention {
                max_bytes: limit,
                ..Retention::default()
            },
            T0,
            100,
        )
        .unwrap();
    assert!(deleted > 0);
    let after = db.used_bytes().unwrap();
    assert!(after <= limit, "{after} > {limit}");
    let left = all_pages(&db, &Filter::default(), 5000);
    assert_eq!(left.len() as u64, entries.len() as u64 - deleted);
    let oldest_kept = left.iter().map(|entry| entry.time_ns).min().unwrap();
    let newer_deleted = entries.len() - entries.iter().filter(|e| e.time_ns >= oldest_kept).count();
    assert!(newer_deleted as u64 <= deleted, "only older facts went");
    // The file does not shrink; appends reuse the freed pages.
    let size = db.size_bytes().unwrap();
    db.append(&generated(500, 8)).unwrap();
    assert!(db.size_bytes().unwrap() <= size + size / 10);
}

#[test]
fn omitted_entries_count_in_rollups_but_are_not_searchable() {
    let dir = TempDir::new("omitted");
    let db = QueryLogDb::open(&dir.file()).unwrap();
    let entry = |n: u64, omitted: bool| Entry {
        time_ns: T0 + n * SECOND,
        client: if omitted {
            "192.0.2.99".into()
        } else {
            "192.0.2.1".into()
        },
        group: if omitted {
            "private".into()
        } else {
            "default".into()
        },
        qname: "secret.example.".into(),
        rcode: Some(0),
        omitted,
        ..Entry::default()
    };
    db.append(&[entry(1, true), entry(2, true), entry(3, false)])
        .unwrap();
    let page = db.search(&Filter::default(), None, 10).unwrap();
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.entries[0].1.client, "192.0.2.1");
    for filter in [
        Filter {
            client: Some("192.0.2.99".into()),
            ..Filter::default()
        },
        Filter {
            group: Some("private".into()),
            ..Filter::default()
        },
    ] {
        assert!(db.search(&filter, None, 10).unwrap().entries.is_empty());
    }
    let stats = db.stats(T0, T0 + MINUTE_NS, MINUTE_NS, 10).unwrap();
    assert_eq!(stats.series[0].queries, 3);
    assert_eq!(stats.top_names, [("secret.example.".to_owned(), 3)]);
    assert_eq!(stats.top_clients, [("192.0.2.1".to_owned(), 1)]);
}

#[test]
fn the_file_is_created_0600_and_reopens_with_everything() {
    let dir = TempDir::new("reopen");
    let entries = generated(700, 9);
    let (all, stats) = {
        let db = appended(&dir, &entries);
        (all_pages(&db, &Filter::default(), 1000), stats_of(&db))
    };
    let mode = std::fs::metadata(dir.file()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let db = QueryLogDb::open(&dir.file()).unwrap();
    assert!(all_pages(&db, &Filter::default(), 1000) == all);
    assert_eq!(stats_of(&db), stats);
    // Appending after a reopen continues the sequence: no cursor is reused.
    let more = generated(100, 10);
    db.append(&more).unwrap();
    let mut everything = entries.clone();
    everything.extend(more);
    assert!(all_pages(&db, &Filter::default(), 1000) == expected(&everything, &Filter::default()));
}

#[test]
fn a_damaged_value_is_an_error_not_a_panic() {
    let dir = TempDir::new("damage");
    let entries = generated(50, 11);
    drop(appended(&dir, &entries));
    {
        let database = Database::open(dir.file()).unwrap();
        let transaction = database.begin_write().unwrap();
        {
            let mut facts = transaction.open_table(FACTS).unwrap();
            let newest = facts.last().unwrap().unwrap().0.value();
            facts
                .insert(newest, [FACT_VERSION_FOR_TESTS, 0, 0xff].as_slice())
                .unwrap();
            let mut minutes = transaction.open_table(MINUTES).unwrap();
            let first = minutes.first().unwrap().unwrap().0.value();
            minutes.insert(first, [9u8].as_slice()).unwrap();
        }
        transaction.commit().unwrap();
    }
    let db = QueryLogDb::open(&dir.file()).unwrap();
    assert!(matches!(
        db.search(&Filter::default(), None, 10),
        Err(StorageError::Corrupt { table: "facts", .. })
    ));
    assert!(matches!(
        db.stats(T0, T0 + 4 * HOUR_NS, MINUTE_NS, 5),
        Err(StorageError::Corrupt {
            table: "minutes",
            ..
        })
    ));
    // Purge deletes the damaged fact too.
    assert_eq!(db.purge(0, 10).unwrap(), 50);
}

const FACT_VERSION_FOR_TESTS: u8 = codec::FACT_VERSION;

#[test]
fn searches_read_a_snapshot_while_the_writer_appends() {
    let dir = TempDir::new("concurrent");
    let db = std::sync::Arc::new(appended(&dir, &generated(500, 12)));
    let writer = {
        let db = std::sync::Arc::clone(&db);
        std::thread::spawn(move || {
            for seed in 0..20 {
                db.append(&generated(200, 100 + seed)).unwrap();
            }
        })
    };
    let mut seen = 0;
    while !writer.is_finished() {
        let page = db.search(&Filter::default(), None, 50).unwrap();
        assert_eq!(page.entries.len(), 50);
        seen += 1;
    }
    writer.join().unwrap();
    assert!(seen > 0);
    assert_eq!(db.len().unwrap(), 500 + 20 * 200);
}

#[test]
fn a_newer_format_is_refused() {
    let dir = TempDir::new("format");
    drop(QueryLogDb::open(&dir.file()).unwrap());
    {
        let database = Database::open(dir.file()).unwrap();
        let transaction = database.begin_write().unwrap();
        transaction
            .open_table(META)
            .unwrap()
            .insert("format", [FORMAT_VERSION + 1].as_slice())
            .unwrap();
        transaction.commit().unwrap();
    }
    assert!(matches!(
        QueryLogDb::open(&dir.file()),
        Err(StorageError::UnsupportedFormat { .. })
    ));
}

const CHILD_ENV: &str = "KUDURRU_QUERYLOG_KILL_CHILD";
const KILL_BATCH: usize = 200;

/// Run as a child process by the kill test: appends batches forever, printing each commit.
fn append_until_killed(file: &str) -> ! {
    let db = QueryLogDb::open(Path::new(file)).expect("child opens");
    for round in 0u64.. {
        db.append(&generated(KILL_BATCH, round))
            .expect("child appends");
        println!("committed {}", round + 1);
    }
    unreachable!("the loop only ends when the parent kills the process")
}

#[test]
fn a_kill_during_appends_loses_only_uncommitted_batches() {
    use std::io::BufRead;
    if let Ok(file) = std::env::var(CHILD_ENV) {
        append_until_killed(&file);
    }
    let dir = TempDir::new("kill");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "querylog::tests::a_kill_during_appends_loses_only_uncommitted_batches",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.file())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the test binary runs itself");
    let stdout = child.stdout.take().unwrap();
    let mut committed = 0u64;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("child output is text");
        if let Some(count) = line.strip_prefix("committed ") {
            committed = count.parse().unwrap();
            if committed >= 25 {
                break;
            }
        }
    }
    assert_eq!(committed, 25, "the child stopped before 25 commits");
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let db = QueryLogDb::open(&dir.file()).expect("reopens after kill -9");
    let facts = db.len().unwrap();
    assert!(
        facts >= committed * KILL_BATCH as u64,
        "a committed batch was lost"
    );
    assert_eq!(facts % KILL_BATCH as u64, 0, "a batch is all or nothing");
    assert_eq!(all_pages(&db, &Filter::default(), 2000).len() as u64, facts);
    let queries: u64 = db
        .stats(T0, T0 + 4 * HOUR_NS, HOUR_NS, 1)
        .unwrap()
        .series
        .iter()
        .map(|bucket| bucket.queries)
        .sum();
    assert_eq!(queries, facts, "rollups commit with their facts");
    db.append(&generated(10, 999))
        .expect("appends after the crash");
}

/// The entries of `tests/fixtures/querylog-v1.db`, written by the first version of format 1.
fn fixture_entries() -> Vec<Entry> {
    let entry = |n: u64, qname: &str, client: &str, blocked: bool| Entry {
        time_ns: T0 + n * 61 * SECOND,
        client: client.into(),
        client_id: if n.is_multiple_of(2) {
            "laptop".into()
        } else {
            String::new()
        },
        group: if n.is_multiple_of(3) {
            "kids".into()
        } else {
            "default".into()
        },
        transport: (n % 6) as u8,
        source: if blocked { 4 } else { (n % 3) as u8 },
        qname: qname.into(),
        qtype: if n.is_multiple_of(2) { 1 } else { 28 },
        rcode: if n == 5 { None } else { Some(0) },
        flags: if blocked { entry_flags::BLOCKED } else { 0 },
        answer: if blocked {
            "A 0.0.0.0".into()
        } else {
            format!("A 192.0.2.{n}")
        },
        upstream: if n % 3 == 1 {
            "192.0.2.53:53".into()
        } else {
            String::new()
        },
        upstream_latency_us: (n * 1000) as u32,
        policy: if blocked { "ads".into() } else { String::new() },
        list: if blocked {
            "easylist".into()
        } else {
            String::new()
        },
        rule: if blocked {
            "||tracker.example^".into()
        } else {
            String::new()
        },
        ede: if blocked { Some(15) } else { None },
        omitted: n == 6,
    };
    vec![
        entry(0, "www.example.com.", "192.0.2.1", false),
        entry(1, "ads.tracker.example.", "192.0.2.1", true),
        entry(2, "example.net.", "2001:db8::1", false),
        entry(3, "a.b.example.com.", "192.0.2.2", false),
        entry(4, "cdn.tracker.example.", "", true),
        entry(5, "www.example.com.", "192.0.2.2", false),
        entry(6, "secret.example.", "192.0.2.9", false),
    ]
}

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/querylog-v1.db")
}

#[test]
#[ignore = "rewrites the committed fixture; run once per new format, never for an old one"]
fn write_querylog_v1_fixture() {
    let _ = std::fs::remove_file(fixture_path());
    let db = QueryLogDb::open(&fixture_path()).unwrap();
    db.append(&fixture_entries()).unwrap();
}

#[test]
fn format_v1_fixture_opens_and_reads() {
    let dir = TempDir::new("fixture");
    std::fs::copy(fixture_path(), dir.file()).expect("the fixture is committed");
    let db = QueryLogDb::open(&dir.file()).unwrap();
    let entries = fixture_entries();
    for filter in filters() {
        assert!(
            all_pages(&db, &filter, 3) == expected(&entries, &filter),
            "{filter:?}"
        );
    }
    let stats = db.stats(T0, T0 + HOUR_NS, MINUTE_NS, 2).unwrap();
    assert_eq!(stats.series.iter().map(|b| b.queries).sum::<u64>(), 7);
    assert_eq!(stats.top_names[0], ("www.example.com.".to_owned(), 2));
    db.append(&generated(5, 1)).unwrap();
    assert_eq!(db.len().unwrap(), 6 + 5);
}

#[test]
fn the_database_is_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<QueryLogDb>();
}
