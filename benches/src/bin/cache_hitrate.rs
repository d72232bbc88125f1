//! `kudurru-cache-hitrate`: does the cache's eviction policy keep the hot set?
//!
//! Replays a synthetic resolver workload through kudurru's cache shard (CLOCK) and, side by side
//! in the same run, through FIFO and LRU baselines of the same capacity. The workload mixes
//! Zipf-distributed popular names with one-off names (the long tail real resolvers see: every
//! query for a random subdomain, a scan, a typo), which is what flushes a FIFO cache.
//!
//! ```sh
//! cargo run --release -p kudurru-bench --bin kudurru-cache-hitrate
//! ```

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use kudurru_core::{Cache, CacheKey, CachedAnswer, TtlPolicy};

/// Eviction-policy comparison on a Zipf + one-off workload.
#[derive(Debug, Parser)]
struct Args {
    /// Cache capacity in answers.
    #[arg(long, default_value_t = 100_000)]
    capacity: usize,
    /// Popular names (Zipf-distributed).
    #[arg(long, default_value_t = 1_000_000)]
    names: usize,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.9)]
    zipf: f64,
    /// Share of queries for names asked once.
    #[arg(long, default_value_t = 0.3)]
    one_off: f64,
    /// Queries replayed (the first 20% warm the caches and are not counted).
    #[arg(long, default_value_t = 4_000_000)]
    queries: usize,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn key(id: u64) -> CacheKey {
    let label = format!("{id:x}");
    let mut wire = vec![label.len() as u8];
    wire.extend_from_slice(label.as_bytes());
    wire.extend_from_slice(b"\x05bench\x00");
    CacheKey::new(&wire, 1, 1, false, false).expect("valid name")
}

#[derive(Default)]
struct Fifo {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl Fifo {
    fn access(&mut self, id: u64, capacity: usize) -> bool {
        if self.set.contains(&id) {
            return true;
        }
        if self.order.len() == capacity
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.order.push_back(id);
        self.set.insert(id);
        false
    }
}

#[derive(Default)]
struct Lru {
    by_tick: BTreeMap<u64, u64>,
    tick_of: HashMap<u64, u64>,
    tick: u64,
}

impl Lru {
    fn access(&mut self, id: u64, capacity: usize) -> bool {
        self.tick += 1;
        let hit = if let Some(old) = self.tick_of.insert(id, self.tick) {
            self.by_tick.remove(&old);
            true
        } else {
            false
        };
        self.by_tick.insert(self.tick, id);
        if self.tick_of.len() > capacity
            && let Some((_, victim)) = self.by_tick.pop_first()
        {
            self.tick_of.remove(&victim);
        }
        hit
    }
}

fn main() {
    let args = Args::parse();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cdf = Vec::with_capacity(args.names);
    let mut total = 0.0;
    for rank in 1..=args.names {
        total += 1.0 / (rank as f64).powf(args.zipf);
        cdf.push(total);
    }
    let now = Instant::now();
    let policy = TtlPolicy {
        servfail_ttl: 300,
        ..TtlPolicy::default()
    };
    let mut clock = Cache::new(args.capacity);
    let mut fifo = Fifo::default();
    let mut lru = Lru::default();
    let warmup = args.queries / 5;
    let (mut clock_hits, mut fifo_hits, mut lru_hits, mut counted) = (0u64, 0u64, 0u64, 0u64);
    let mut next_one_off = args.names as u64;
    let mut clock_time = std::time::Duration::ZERO;
    for i in 0..args.queries {
        let id = if rng.unit() < args.one_off {
            next_one_off += 1;
            next_one_off
        } else {
            let target = rng.unit() * total;
            cdf.partition_point(|&c| c < target) as u64
        };
        let k = key(id);
        let started = Instant::now();
        let hit = clock.get(&k, now).is_some();
        if !hit {
            clock.insert(&k, Arc::new(CachedAnswer::failure(&k, now, &policy)), now);
        }
        clock_time += started.elapsed();
        let fifo_hit = fifo.access(id, args.capacity);
        let lru_hit = lru.access(id, args.capacity);
        if i >= warmup {
            counted += 1;
            clock_hits += u64::from(hit);
            fifo_hits += u64::from(fifo_hit);
            lru_hits += u64::from(lru_hit);
        }
    }
    let rate = |h: u64| h as f64 / counted as f64;
    println!(
        "capacity {} | {} Zipf({}) names + {:.0}% one-off names | {} queries counted after warm-up",
        args.capacity,
        args.names,
        args.zipf,
        args.one_off * 100.0,
        counted
    );
    println!("| policy | hit rate | vs FIFO |");
    println!("|---|---|---|");
    for (name, hits) in [
        ("kudurru CLOCK", clock_hits),
        ("FIFO", fifo_hits),
        ("LRU", lru_hits),
    ] {
        println!(
            "| {name} | {:.4} | {:.3}x |",
            rate(hits),
            rate(hits) / rate(fifo_hits)
        );
    }
    println!(
        "kudurru cache: {:.0} ns per lookup-or-insert (key building excluded), {} evictions",
        clock_time.as_nanos() as f64 / args.queries as f64,
        clock.stats().evictions
    );
}
