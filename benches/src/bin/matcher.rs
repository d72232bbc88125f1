//! `matcher`: the block-list matcher (`kudurru_core::policy::Matcher`) beside the structures
//! it was chosen over, on the same generated list, in one run.
//!
//! ```sh
//! cargo run --release -p kudurru-bench --bin matcher -- --domains 1000000
//! ```
//!
//! The list is generated like a real tracker list (hagezi, StevenBlack): mostly 2–4 labels, a
//! registrable name of 4–16 characters with digits and hyphens now and then, subdomains from a
//! vocabulary of tracker words or random, and a TLD mix weighted like such lists (.com first,
//! then .net, .org, country codes, new gTLDs). It is written out as a hosts file and parsed,
//! so the build time is parse plus compile, as the control thread pays it.
//!
//! Compared, each asked every suffix of the query name (what a subtree rule needs):
//! - kudurru's matcher: sorted 64-bit keyed hashes, 16-bit payloads, a bucket directory;
//! - `HashSet<Box<[u8]>>` of wire names (what a straightforward implementation keeps);
//! - a sorted `Vec<u64>` of the same hashes, binary-searched (no payload: a lower bound);
//! - an `fst::Set` over reversed names (the issue's suggestion; the smallest on paper).
//!
//! Memory is the resident-set growth while each structure is built and held (so allocator
//! overhead counts), and `heap_bytes()` for kudurru's.

use std::collections::HashSet;
use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Parser;
use kudurru_core::policy::{self, Format, ListId, ListMode, Matcher, Role};

/// Matcher micro-benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// Names in the generated list.
    #[arg(long, default_value_t = 1_000_000)]
    domains: usize,
    /// Lookups timed per structure and kind (allowed, blocked).
    #[arg(long, default_value_t = 2_000_000)]
    lookups: usize,
    /// Seed of the generator.
    #[arg(long, default_value_t = 34)]
    seed: u64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// TLDs weighted roughly as in public tracker lists.
const TLDS: &[(&str, u32)] = &[
    ("com", 46),
    ("net", 10),
    ("org", 4),
    ("io", 3),
    ("ru", 3),
    ("de", 3),
    ("info", 3),
    ("xyz", 3),
    ("top", 3),
    ("co.uk", 2),
    ("fr", 2),
    ("cn", 2),
    ("br", 2),
    ("jp", 2),
    ("online", 2),
    ("site", 2),
    ("com.br", 1),
    ("pl", 1),
    ("in", 1),
    ("it", 1),
    ("nl", 1),
    ("club", 1),
    ("app", 1),
    ("us", 1),
];

const WORDS: &[&str] = &[
    "ads",
    "ad",
    "track",
    "tracking",
    "metrics",
    "stats",
    "analytics",
    "pixel",
    "tag",
    "cdn",
    "static",
    "log",
    "events",
    "collect",
    "beacon",
    "sync",
    "telemetry",
    "api",
    "img",
    "srv",
    "rtb",
    "bid",
    "click",
    "count",
    "www",
    "m",
    "data",
    "t",
    "s",
    "px",
];

fn random_label(rng: &mut Rng, min: u64, max: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz0123456789";
    let len = min + rng.below(max - min + 1);
    let mut label: String = (0..len)
        .map(|_| char::from(ALPHABET[rng.below(ALPHABET.len() as u64) as usize]))
        .collect();
    if len > 6 && rng.below(5) == 0 {
        let at = 2 + rng.below(len - 4) as usize;
        label.replace_range(at..at + 1, "-");
    }
    label
}

fn tld(rng: &mut Rng) -> &'static str {
    let total: u32 = TLDS.iter().map(|t| t.1).sum();
    let mut pick = rng.below(u64::from(total)) as u32;
    for (tld, weight) in TLDS {
        if pick < *weight {
            return tld;
        }
        pick -= weight;
    }
    "com"
}

/// One list entry: 30% a bare registrable name, 45% one subdomain, 20% two, 5% three.
fn list_name(rng: &mut Rng) -> String {
    let mut name = format!("{}.{}", random_label(rng, 4, 16), tld(rng));
    let subdomains = match rng.below(100) {
        0..=29 => 0,
        30..=74 => 1,
        75..=94 => 2,
        _ => 3,
    };
    for _ in 0..subdomains {
        let label = if rng.below(2) == 0 {
            WORDS[rng.below(WORDS.len() as u64) as usize].to_owned()
        } else {
            random_label(rng, 2, 12)
        };
        name = format!("{label}.{name}");
    }
    name
}

fn wire(name: &str) -> Vec<u8> {
    policy::name::to_wire(name).expect("generated names are valid")
}

/// Returns freed memory to the system, so resident-set growth counts what is held.
fn trim() {
    // SAFETY: malloc_trim only releases free heap memory; no pointer is passed.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn rss_bytes() -> usize {
    trim();
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn suffixes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = Some(0usize);
    std::iter::from_fn(move || {
        let here = at?;
        let len = usize::from(*name.get(here)?);
        at = if len == 0 { None } else { Some(here + 1 + len) };
        Some(&name[here..])
    })
}

/// Times `lookup` over `names`, cycling, `count` times: nanoseconds per lookup and hits.
fn time(names: &[Vec<u8>], count: usize, mut lookup: impl FnMut(&[u8]) -> bool) -> (f64, usize) {
    let start = Instant::now();
    let mut hits = 0;
    for i in 0..count {
        if lookup(black_box(&names[i % names.len()])) {
            hits += 1;
        }
    }
    let elapsed = start.elapsed();
    (elapsed.as_nanos() as f64 / count as f64, hits)
}

fn seconds(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn main() {
    let args = Args::parse();
    let mut rng = Rng(args.seed.max(1));
    println!(
        "# matcher benchmark: {} domains, {} lookups per kind",
        args.domains, args.lookups
    );
    let names: Vec<String> = (0..args.domains).map(|_| list_name(&mut rng)).collect();
    let mean_len = names.iter().map(String::len).sum::<usize>() as f64 / names.len().max(1) as f64;
    let mean_labels = names.iter().map(|n| n.split('.').count()).sum::<usize>() as f64
        / names.len().max(1) as f64;
    println!("list: mean {mean_len:.1} characters, {mean_labels:.2} labels");
    let mut body = String::with_capacity(names.len() * 32);
    for name in &names {
        body.push_str("0.0.0.0 ");
        body.push_str(name);
        body.push('\n');
    }
    // Allowed queries: 4-label names that are not in the list (a CDN-like name under a
    // registrable name that is not listed either). Blocked: names from the list, half of
    // them a subdomain of a listed name (the subtree case).
    let allowed: Vec<Vec<u8>> = (0..10_000)
        .map(|i| {
            wire(&format!(
                "www{}.cdn.{}.{}",
                i % 7,
                random_label(&mut rng, 5, 12),
                tld(&mut rng)
            ))
        })
        .collect();
    let blocked: Vec<Vec<u8>> = (0..10_000)
        .map(|i| {
            let name = &names[rng.below(names.len() as u64) as usize];
            if i % 2 == 0 {
                wire(name)
            } else {
                wire(&format!("x.{name}"))
            }
        })
        .collect();

    // kudurru: parse + compile.
    let rss0 = rss_bytes();
    let start = Instant::now();
    let parsed = policy::parse(body.as_bytes(), Format::Hosts, usize::MAX);
    let parse_time = start.elapsed();
    let start = Instant::now();
    let matcher = Matcher::new(0x6b75_6475_7272_7521).with_list(ListId(0), ListMode::Deny, &parsed);
    let compile_time = start.elapsed();
    let rules = parsed.rules.len();
    drop(parsed);
    trim();
    let rss_matcher = rss_bytes().saturating_sub(rss0);
    // Subtree rules, as a wildcard list gives (the lookup cost is the same; the hit rate of
    // the "x.name" half needs them).
    let subtree = {
        let mut parsed = policy::parse(body.as_bytes(), Format::Hosts, usize::MAX);
        for rule in &mut parsed.rules {
            rule.scope = policy::Scope::Subtree;
        }
        Matcher::new(0x6b75_6475_7272_7521).with_list(ListId(0), ListMode::Deny, &parsed)
    };
    let roles = [Role::Deny];
    let (k_allowed, k_allowed_hits) = time(&allowed, args.lookups, |n| {
        matcher.lookup(n, &roles).is_some()
    });
    let (k_blocked, k_blocked_hits) = time(&blocked, args.lookups, |n| {
        subtree.lookup(n, &roles).is_some()
    });
    println!(
        "kudurru matcher: {} rules, {} entries; parse {} + compile {} = {}; heap {} B ({:.2} B/entry), RSS growth {:.1} MiB; lookup allowed {:.0} ns ({} hits), blocked {:.0} ns ({} hits)",
        rules,
        matcher.len(),
        seconds(parse_time),
        seconds(compile_time),
        seconds(parse_time + compile_time),
        matcher.heap_bytes(),
        matcher.heap_bytes() as f64 / matcher.len().max(1) as f64,
        rss_matcher as f64 / (1 << 20) as f64,
        k_allowed,
        k_allowed_hits,
        k_blocked,
        k_blocked_hits
    );
    drop(subtree);
    // The compute floor: the same lookups against a list that stays in the L1/L2 cache.
    let small = {
        let mut parsed = policy::parse(body.as_bytes(), Format::Hosts, 1000);
        parsed.rules.truncate(1000);
        Matcher::new(7).with_list(ListId(0), ListMode::Deny, &parsed)
    };
    let (floor, _) = time(&allowed, args.lookups, |n| {
        small.lookup(n, &roles).is_some()
    });
    println!("kudurru matcher, 1,000 entries (cache-resident): lookup allowed {floor:.0} ns");

    // HashSet<Box<[u8]>> of wire names.
    let rss0 = rss_bytes();
    let start = Instant::now();
    let set: HashSet<Box<[u8]>> = names.iter().map(|n| wire(n).into_boxed_slice()).collect();
    let build = start.elapsed();
    let rss_set = rss_bytes().saturating_sub(rss0);
    let (h_allowed, _) = time(&allowed, args.lookups, |n| {
        suffixes(n).any(|s| set.contains(s))
    });
    let (h_blocked, h_hits) = time(&blocked, args.lookups, |n| {
        suffixes(n).any(|s| set.contains(s))
    });
    println!(
        "HashSet<Box<[u8]>>: build {} (after parsing); RSS growth {:.1} MiB ({:.1} B/entry); lookup allowed {:.0} ns, blocked {:.0} ns ({} hits)",
        seconds(build),
        rss_set as f64 / (1 << 20) as f64,
        rss_set as f64 / set.len().max(1) as f64,
        h_allowed,
        h_blocked,
        h_hits
    );
    drop(set);

    // Sorted Vec<u64> of 64-bit hashes, binary search per suffix.
    use std::hash::BuildHasher;
    let hasher = hash_state();
    let rss0 = rss_bytes();
    let start = Instant::now();
    let mut hashes: Vec<u64> = names.iter().map(|n| hasher.hash_one(wire(n))).collect();
    hashes.sort_unstable();
    hashes.dedup();
    hashes.shrink_to_fit();
    let build = start.elapsed();
    let rss_vec = rss_bytes().saturating_sub(rss0);
    let lookup_vec =
        |n: &[u8]| suffixes(n).any(|s| hashes.binary_search(&hasher.hash_one(s)).is_ok());
    let (v_allowed, _) = time(&allowed, args.lookups, lookup_vec);
    let (v_blocked, v_hits) = time(&blocked, args.lookups, lookup_vec);
    println!(
        "sorted Vec<u64>: build {} (after parsing); {:.1} B/entry; RSS growth {:.1} MiB; lookup allowed {:.0} ns, blocked {:.0} ns ({} hits) (one whole-name hash per suffix, no payload)",
        seconds(build),
        (hashes.len() * 8) as f64 / hashes.len().max(1) as f64,
        rss_vec as f64 / (1 << 20) as f64,
        v_allowed,
        v_blocked,
        v_hits
    );
    drop(hashes);

    // fst::Set over reversed wire names (label order reversed so a suffix is a key prefix).
    let rss0 = rss_bytes();
    let start = Instant::now();
    let mut reversed: Vec<Vec<u8>> = names.iter().map(|n| reverse_labels(n)).collect();
    reversed.sort_unstable();
    reversed.dedup();
    let fst_set = fst::Set::from_iter(reversed.iter()).expect("sorted keys build an fst");
    drop(reversed);
    let build = start.elapsed();
    let rss_fst = rss_bytes().saturating_sub(rss0);
    let mut key = Vec::with_capacity(256);
    let mut lookup_fst = |n: &[u8]| fst_any_suffix(&fst_set, n, &mut key);
    let (f_allowed, _) = time(&allowed, args.lookups, &mut lookup_fst);
    let (f_blocked, f_hits) = time(&blocked, args.lookups, &mut lookup_fst);
    println!(
        "fst::Set (reversed names): build {} (after parsing, sort included); {} B ({:.1} B/entry); RSS growth {:.1} MiB; lookup allowed {:.0} ns, blocked {:.0} ns ({} hits)",
        seconds(build),
        fst_set.as_fst().size(),
        fst_set.as_fst().size() as f64 / fst_set.len().max(1) as f64,
        rss_fst as f64 / (1 << 20) as f64,
        f_allowed,
        f_blocked,
        f_hits
    );
}

fn hash_state() -> std::collections::hash_map::RandomState {
    std::collections::hash_map::RandomState::new()
}

/// Whether a suffix of the wire name `name` is in `set` (keys are names with their labels
/// reversed and dot-joined): the reversed name is built label by label into `key`, asking
/// the set at each label boundary. No allocation once `key` has grown.
fn fst_any_suffix(set: &fst::Set<Vec<u8>>, name: &[u8], key: &mut Vec<u8>) -> bool {
    let mut starts = [0usize; 128];
    let mut count = 0;
    let mut at = 0;
    while let Some(&len) = name.get(at) {
        if len == 0 || count == starts.len() {
            break;
        }
        starts[count] = at;
        count += 1;
        at += 1 + usize::from(len);
    }
    key.clear();
    for &start in starts[..count].iter().rev() {
        if !key.is_empty() {
            key.push(b'.');
        }
        let len = usize::from(name[start]);
        key.extend_from_slice(&name[start + 1..start + 1 + len]);
        if set.contains(&*key) {
            return true;
        }
    }
    false
}

/// `ads.example.com` → `com.example.ads`.
fn reverse_labels(name: &str) -> Vec<u8> {
    let lower = name.to_ascii_lowercase();
    lower.rsplit('.').collect::<Vec<_>>().join(".").into_bytes()
}
