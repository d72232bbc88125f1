//! `querylog`: the query log's database (`kudurru_storage::querylog::QueryLogDb`) on its own:
//! sustained appends per second in writer-sized batches, bytes per record on disk, RSS, and
//! search latency (p50/p99) for the filters operators use, over a log of `--records` entries.
//!
//! ```sh
//! taskset -c 1 cargo run --release -p kudurru-bench --bin querylog -- --records 10000000
//! ```
//!
//! Entries are generated, not captured: query names drawn from a Zipf distribution (s = 1)
//! over `--names` names under 50k registrable domains, clients from a Zipf (s = 0.8) over
//! `--clients` addresses, 5 % blocked (policy, list, rule), a realistic qtype, rcode and
//! source mix, answers stable per name, times spread evenly over `--span-hours`. Appends go in
//! batches of `--batch` (the writer's transaction size); only the time inside `append` counts.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use kudurru_storage::querylog::{Entry, Filter, QueryLogDb, QueryLogOptions, entry_flags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Query-log database benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// Entries appended.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// Entries per append (one write transaction).
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Distinct query names.
    #[arg(long, default_value_t = 1_000_000)]
    names: usize,
    /// Distinct clients.
    #[arg(long, default_value_t = 10_000)]
    clients: usize,
    /// Hours the entries' times span.
    #[arg(long, default_value_t = 24)]
    span_hours: u64,
    /// Searches timed per filter.
    #[arg(long, default_value_t = 200)]
    searches: usize,
    /// Entries per search page.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Every how many appends a commit is fsynced.
    #[arg(long, default_value_t = 1)]
    sync_every: u32,
    /// redb's page cache, MiB.
    #[arg(long, default_value_t = 64)]
    cache_mib: usize,
    /// Answers in the dictionary instead of inline.
    #[arg(long)]
    answers_in_dictionary: bool,
    /// The database file (removed first); a temporary one when absent.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Keep the file afterwards.
    #[arg(long)]
    keep: bool,
    /// After the searches, purge the facts of the first this many hours (in transactions of
    /// `--batch`) and time it.
    #[arg(long, default_value_t = 0)]
    purge_hours: u64,
    /// Search an existing file instead of appending (with the same generator settings).
    #[arg(long)]
    search_only: bool,
}

const SECOND: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600 * SECOND;
const DOMAINS: usize = 50_000;
const TLDS: [&str; 4] = ["com", "net", "org", "example"];

/// Draws ranks 0..n with probability proportional to 1 / (rank + 1)^s.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (0..n)
            .map(|rank| {
                total += 1.0 / ((rank + 1) as f64).powf(s);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, random: &mut StdRng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let target = random.random::<f64>() * total;
        self.cumulative
            .partition_point(|&sum| sum < target)
            .min(self.cumulative.len() - 1)
    }
}

/// Name `rank`: its registrable domain is `rank % DOMAINS`, so popular names spread over
/// domains and every domain has names of many ranks.
fn name(rank: usize) -> String {
    let domain = rank % DOMAINS;
    let host = rank / DOMAINS;
    let tld = TLDS[domain % TLDS.len()];
    if host == 0 {
        format!("d{domain}.{tld}.")
    } else {
        format!("h{host}.d{domain}.{tld}.")
    }
}

fn client(rank: usize) -> String {
    if rank % 5 == 4 {
        format!("2001:db8:{:x}::{:x}", rank >> 8, rank & 0xff)
    } else {
        format!("10.{}.{}.{}", rank >> 16, (rank >> 8) & 0xff, rank & 0xff)
    }
}

struct Generator {
    random: StdRng,
    names: Zipf,
    clients: Zipf,
    step_ns: u64,
    next: u64,
}

impl Generator {
    fn new(args: &Args) -> Self {
        Self {
            random: StdRng::seed_from_u64(36),
            names: Zipf::new(args.names, 1.0),
            clients: Zipf::new(args.clients, 0.8),
            step_ns: (args.span_hours * 3600 * SECOND / args.records.max(1)).max(1),
            next: 0,
        }
    }

    fn entry(&mut self) -> Entry {
        let random = &mut self.random;
        let rank = self.names.sample(random);
        let qname = name(rank);
        let blocked = random.random_ratio(1, 20);
        let qtype = match random.random_range(0..100) {
            0..60 => 1,
            60..90 => 28,
            90..97 => 65,
            97..98 => 16,
            98..99 => 12,
            _ => 15,
        };
        let rcode = match random.random_range(0..1000) {
            0..10 => None,
            10..20 => Some(2),
            20..120 => Some(3),
            _ => Some(0),
        };
        let source = if blocked {
            4
        } else {
            match random.random_range(0..100) {
                0..70 => 0,
                70..95 => 1,
                95..97 => 2,
                _ => 3,
            }
        };
        let time_ns = T0 + self.next * self.step_ns;
        self.next += 1;
        let answer = match (rcode, blocked) {
            (_, true) => "A 0.0.0.0".to_owned(),
            (Some(0), false) if qtype == 1 => {
                format!("A 198.51.{}.{}", (rank >> 8) & 0xff, rank & 0xff)
            }
            (Some(0), false) if qtype == 28 => format!("AAAA 2001:db8:{rank:x}::1"),
            (Some(0), false) => format!("CNAME cdn{}.example.", rank % 97),
            _ => String::new(),
        };
        Entry {
            time_ns,
            client: client(self.clients.sample(random)),
            client_id: if random.random_ratio(1, 10) {
                format!("device{}", random.random_range(0..200))
            } else {
                String::new()
            },
            group: ["default", "default", "default", "kids", "guests"][random.random_range(0..5)]
                .to_owned(),
            transport: match random.random_range(0..100) {
                0..80 => 0,
                80..88 => 1,
                88..94 => 2,
                94..98 => 3,
                98..99 => 4,
                _ => 5,
            },
            source,
            qname,
            qtype,
            rcode: if blocked { Some(0) } else { rcode },
            flags: entry_flags::RECURSION_DESIRED | if blocked { entry_flags::BLOCKED } else { 0 },
            answer,
            upstream: if source == 1 {
                ["192.0.2.53:53", "198.51.100.53:853"][random.random_range(0..2)].to_owned()
            } else {
                String::new()
            },
            upstream_latency_us: if source == 1 {
                random.random_range(500..80_000)
            } else {
                0
            },
            policy: if blocked { "ads".into() } else { String::new() },
            list: if blocked {
                ["easylist", "oisd"][random.random_range(0..2)].into()
            } else {
                String::new()
            },
            rule: if blocked {
                format!(
                    "||d{}.{}^",
                    rank % DOMAINS,
                    TLDS[rank % DOMAINS % TLDS.len()]
                )
            } else {
                String::new()
            },
            ede: if blocked { Some(15) } else { None },
            omitted: false,
        }
    }
}

/// VmRSS and VmHWM of this process, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let file = args.file.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("kudurru-querylog-bench-{}.db", std::process::id()))
    });
    if !args.search_only {
        let _ = std::fs::remove_file(&file);
    }
    let options = QueryLogOptions {
        sync_every: args.sync_every,
        answers_inline: !args.answers_in_dictionary,
        cache_bytes: args.cache_mib << 20,
    };
    let db = QueryLogDb::open_with(&file, options)?;
    let mut generator = Generator::new(&args);
    println!(
        "query log: {} records, batch {}, {} names (Zipf 1.0), {} clients (Zipf 0.8), span {} h, sync every {}, answers {}, cache {} MiB",
        args.records,
        args.batch,
        args.names,
        args.clients,
        args.span_hours,
        args.sync_every,
        if args.answers_in_dictionary {
            "in the dictionary"
        } else {
            "inline"
        },
        args.cache_mib
    );
    if !args.search_only {
        let mut appending = Duration::ZERO;
        let mut appending_cpu = Duration::ZERO;
        let written_before = disk_writes();
        let mut batches = Histogram::<u64>::new(3)?;
        let mut written = 0u64;
        let mut report = Instant::now();
        let mut batch = Vec::with_capacity(args.batch);
        while written < args.records {
            batch.clear();
            let count = (args.records - written).min(args.batch as u64);
            batch.extend((0..count).map(|_| generator.entry()));
            let started = Instant::now();
            let cpu = thread_cpu();
            db.append(&batch)?;
            appending_cpu += thread_cpu().saturating_sub(cpu);
            let took = started.elapsed();
            appending += took;
            batches.record(took.as_micros() as u64)?;
            written += count;
            if report.elapsed() > Duration::from_secs(30) {
                report = Instant::now();
                println!(
                    "  {written} appended, {:.0}/s so far, file {} MB",
                    written as f64 / appending.as_secs_f64(),
                    db.size_bytes()? >> 20
                );
            }
        }
        let size = db.size_bytes()?;
        let used = db.used_bytes()?;
        println!(
            "append: {written} records in {:.1} s inside append = {:.0} records/s; batch p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            appending.as_secs_f64(),
            written as f64 / appending.as_secs_f64(),
            batches.value_at_quantile(0.5) as f64 / 1000.0,
            batches.value_at_quantile(0.99) as f64 / 1000.0,
            batches.max() as f64 / 1000.0,
        );
        // CPU time, unlike the wall time above, is not moved by other processes or fsync waits.
        println!(
            "append CPU: {:.2} s on this thread = {:.2} µs/record",
            appending_cpu.as_secs_f64(),
            appending_cpu.as_secs_f64() * 1e6 / written as f64,
        );
        if let (Some(before), Some(after)) = (written_before, disk_writes()) {
            let bytes = after.saturating_sub(before);
            println!(
                "written to disk while appending: {} MB = {:.0} bytes/record (/proc/self/io write_bytes)",
                bytes >> 20,
                bytes as f64 / written as f64
            );
        }
        println!(
            "disk: file {} MB = {:.0} bytes/record; used-bytes estimate {} MB ({:.2} of the file)",
            size >> 20,
            size as f64 / written as f64,
            used >> 20,
            used as f64 / size as f64
        );
    }
    let started = Instant::now();
    let (allocated, stored) = db.measure_pages()?;
    println!(
        "pages: {} MB allocated, {} MB of keys and values stored: {:.2} allocated per stored byte (measured in {:.1} s)",
        allocated >> 20,
        stored >> 20,
        allocated as f64 / stored as f64,
        started.elapsed().as_secs_f64()
    );
    let records = db.len()?;
    let (rss, peak) = rss_kib();
    println!(
        "rss after append: {} MB (peak {} MB)",
        rss >> 10,
        peak >> 10
    );

    // Search parameters drawn like an operator's: busy clients and names more often.
    let span = args.span_hours * 3600 * SECOND;
    let mut random = StdRng::seed_from_u64(7);
    let end = T0 + span;
    type MakeFilter = Box<dyn FnMut(&mut StdRng, &mut Generator) -> Filter>;
    let kinds: Vec<(&str, MakeFilter)> = vec![
        (
            "time range (1 h)",
            Box::new(move |random, _| {
                let from = T0 + random.random_range(0..span - 3600 * SECOND);
                Filter {
                    from_ns: Some(from),
                    to_ns: Some(from + 3600 * SECOND),
                    ..Filter::default()
                }
            }),
        ),
        (
            "client",
            Box::new(|random, generator| Filter {
                client: Some(client(generator.clients.sample(random))),
                ..Filter::default()
            }),
        ),
        (
            "client (uniform: rare ones too)",
            Box::new(|random, generator| Filter {
                client: Some(client(
                    random.random_range(0..generator.clients.cumulative.len()),
                )),
                ..Filter::default()
            }),
        ),
        (
            "qname exact",
            Box::new(|random, generator| Filter {
                qname: Some(name(generator.names.sample(random))),
                ..Filter::default()
            }),
        ),
        (
            "qname suffix (a registrable domain)",
            Box::new(|random, generator| {
                let rank = generator.names.sample(random) % DOMAINS;
                Filter {
                    qname_suffix: Some(name(rank)),
                    ..Filter::default()
                }
            }),
        ),
        (
            "qname suffix (a TLD)",
            Box::new(|random, _| Filter {
                qname_suffix: Some(format!("{}.", TLDS[random.random_range(0..TLDS.len())])),
                ..Filter::default()
            }),
        ),
        (
            "blocked=true",
            Box::new(|_, _| Filter {
                blocked: Some(true),
                ..Filter::default()
            }),
        ),
        (
            "combined: client + blocked=true + 6 h",
            Box::new(move |random, generator| {
                let from = T0 + random.random_range(0..span - 6 * 3600 * SECOND);
                Filter {
                    client: Some(client(generator.clients.sample(random))),
                    blocked: Some(true),
                    from_ns: Some(from),
                    to_ns: Some(from + 6 * 3600 * SECOND),
                    ..Filter::default()
                }
            }),
        ),
        (
            "combined: suffix + qtype AAAA",
            Box::new(|random, generator| {
                let rank = generator.names.sample(random) % DOMAINS;
                Filter {
                    qname_suffix: Some(name(rank)),
                    qtype: Some(28),
                    ..Filter::default()
                }
            }),
        ),
        (
            "unindexed: transport DoQ (fact scan)",
            Box::new(|_, _| Filter {
                transport: Some(4),
                ..Filter::default()
            }),
        ),
    ];
    println!(
        "search over {records} records, limit {}, {} searches each (warm page cache):",
        args.limit, args.searches
    );
    println!("| filter | p50 ms | p99 ms | max ms | mean entries |");
    println!("|---|---:|---:|---:|---:|");
    for (label, mut make) in kinds {
        let mut latency = Histogram::<u64>::new(3)?;
        let mut found = 0usize;
        for _ in 0..args.searches {
            let filter = make(&mut random, &mut generator);
            let started = Instant::now();
            let page = db.search(&filter, None, args.limit)?;
            latency.record(started.elapsed().as_micros().max(1) as u64)?;
            found += page.entries.len();
        }
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} | {:.0} |",
            latency.value_at_quantile(0.5) as f64 / 1000.0,
            latency.value_at_quantile(0.99) as f64 / 1000.0,
            latency.max() as f64 / 1000.0,
            found as f64 / args.searches as f64
        );
    }
    let mut paging = Histogram::<u64>::new(3)?;
    let mut cursor = None;
    for _ in 0..args.searches {
        let started = Instant::now();
        let page = db.search(&Filter::default(), cursor, args.limit)?;
        paging.record(started.elapsed().as_micros().max(1) as u64)?;
        cursor = page.next;
    }
    println!(
        "paging newest first (no filter): p50 {:.2} ms, p99 {:.2} ms",
        paging.value_at_quantile(0.5) as f64 / 1000.0,
        paging.value_at_quantile(0.99) as f64 / 1000.0
    );
    for step in [60 * SECOND, 3600 * SECOND] {
        let started = Instant::now();
        let stats = db.stats(T0, end, step, 10)?;
        println!(
            "stats over {} h, step {} s: {} buckets in {:.1} ms",
            args.span_hours,
            step / SECOND,
            stats.series.len(),
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    if args.purge_hours > 0 {
        let started = Instant::now();
        let purged = db.purge(T0 + args.purge_hours * 3600 * SECOND, args.batch)?;
        let took = started.elapsed().as_secs_f64();
        println!(
            "purge of the first {} h: {purged} facts in {took:.1} s = {:.0} facts/s, {:.1} ms per transaction of {}",
            args.purge_hours,
            purged as f64 / took,
            took * 1000.0 / (purged as f64 / args.batch as f64).max(1.0),
            args.batch
        );
    }
    let (rss, peak) = rss_kib();
    println!(
        "rss after searches: {} MB (peak {} MB)",
        rss >> 10,
        peak >> 10
    );
    drop(db);
    if !args.keep && args.file.is_none() {
        let _ = std::fs::remove_file(&file);
    }
    Ok(())
}

/// The CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`, which lives for the call.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now);
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// The bytes this process has caused to be written to storage so far (`write_bytes` of
/// `/proc/self/io`), when the kernel says.
fn disk_writes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes: "))
        .and_then(|n| n.trim().parse().ok())
}
