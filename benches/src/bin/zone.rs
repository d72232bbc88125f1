//! `zone`: kudurru's compiled authoritative zone (`kudurru_core::zone::Zone`) on its own, on the
//! zones of `benches/peers/zones.py`: compile time and memory of the 1M-record zone, and the
//! cost of one answer through the zone stage (`Zones::answer`) for the query mix.
//!
//! ```sh
//! cargo run --release -p kudurru-bench --bin zone -- --records 1000000
//! ```
//!
//! The zones are built in memory as `ZoneData` (records in wire form, as the zone-file parser
//! or a transfer hands them over), the same shapes as zones.py writes: `big.example` with A on
//! every name, AAAA on every other, TXT and MX on one in eight; `bench.example` with 100k names
//! (one in 20 a CNAME to the next name, one in three with AAAA, one in ten MX, one in ten TXT).
//! The figures split zones.py's end-to-end rows: what the compile costs against what parsing
//! the file, publishing and the process cost, and what an answer costs against the I/O.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use kudurru_core::wire::{Query, ReplyOptions};
use kudurru_core::zone::{Record, ServedZone, Zone, ZoneAnswer, ZoneData, ZoneKind, Zones};

/// Compiled-zone micro-benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// Records of the big zone (besides SOA, NS and glue).
    #[arg(long, default_value_t = 1_000_000)]
    records: usize,
    /// Owner names of the small zone the answers are timed on.
    #[arg(long, default_value_t = 100_000)]
    names: usize,
    /// Answers timed.
    #[arg(long, default_value_t = 2_000_000)]
    answers: usize,
}

const A: u16 = 1;
const NS: u16 = 2;
const CNAME: u16 = 5;
const SOA: u16 = 6;
const MX: u16 = 15;
const TXT: u16 = 16;
const AAAA: u16 = 28;

/// Wire form of a presentation name (absolute, lowercase ASCII labels).
fn wire(name: &str) -> Box<[u8]> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name.trim_end_matches('.').split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.into()
}

fn ipv4(i: usize) -> [u8; 4] {
    [10, (i >> 16) as u8, (i >> 8) as u8, i as u8]
}

fn ipv6(i: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[12..].copy_from_slice(&(i as u32).to_be_bytes());
    a
}

fn txt(strings: &[&str]) -> Box<[u8]> {
    let mut out = Vec::new();
    for s in strings {
        out.push(s.len() as u8);
        out.extend_from_slice(s.as_bytes());
    }
    out.into()
}

fn mx(pref: u16, target: &str) -> Box<[u8]> {
    let mut out = pref.to_be_bytes().to_vec();
    out.extend_from_slice(&wire(target));
    out.into()
}

struct Builder {
    apex: String,
    data: ZoneData,
}

impl Builder {
    fn new(apex: &str) -> Self {
        let mut b = Self {
            apex: apex.to_owned(),
            data: ZoneData {
                apex: wire(apex),
                records: Vec::new(),
                origins: Vec::new(),
            },
        };
        let mut soa = wire(&format!("ns1.{apex}")).to_vec();
        soa.extend_from_slice(&wire(&format!("hostmaster.{apex}")));
        for v in [2_026_120_701u32, 3600, 600, 604_800, 300] {
            soa.extend_from_slice(&v.to_be_bytes());
        }
        b.push("", SOA, soa.into());
        b.push("", NS, wire(&format!("ns1.{apex}")));
        b.push("ns1", A, Box::new([192, 0, 2, 53]));
        b
    }

    fn push(&mut self, owner: &str, rtype: u16, rdata: Box<[u8]>) {
        let name = if owner.is_empty() {
            self.apex.clone()
        } else {
            format!("{owner}.{}", self.apex)
        };
        self.data.records.push(Record {
            owner: wire(&name),
            rtype,
            ttl: 3600,
            rdata,
        });
    }
}

fn big_zone(records: usize) -> ZoneData {
    let mut b = Builder::new("big.example.");
    let (mut count, mut i) = (0, 0);
    while count < records {
        let owner = format!("n{i}");
        b.push(&owner, A, Box::new(ipv4(i)));
        count += 1;
        if i % 2 == 0 && count < records {
            b.push(&owner, AAAA, Box::new(ipv6(i)));
            count += 1;
        }
        if i % 8 == 1 && count < records {
            b.push(&owner, TXT, txt(&[&format!("record {i} of the big zone")]));
            count += 1;
        }
        if i % 8 == 3 && count < records {
            b.push(&owner, MX, mx(10, &format!("mx{}.big.example.", i % 5)));
            count += 1;
        }
        i += 1;
    }
    b.data
}

fn small_zone(names: usize) -> (ZoneData, Vec<Vec<u8>>) {
    let mut b = Builder::new("bench.example.");
    let mut queries = Vec::new();
    let q = |name: &str, rtype: u16| {
        let mut m = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&wire(&format!("{name}.bench.example.")));
        m.extend_from_slice(&rtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m
    };
    for i in 0..names {
        let owner = format!("h{i}");
        if i % 20 == 7 {
            b.push(&owner, CNAME, wire(&format!("h{}.bench.example.", i + 1)));
            queries.push(q(&owner, A));
            continue;
        }
        b.push(&owner, A, Box::new(ipv4(i)));
        // The mix of zones.py, roughly: A on most names, then AAAA, MX, TXT, misses, NODATA.
        queries.push(q(&owner, A));
        if i % 3 == 0 {
            b.push(&owner, AAAA, Box::new(ipv6(i)));
            queries.push(q(&owner, AAAA));
        } else if i % 3 == 1 && i % 10 < 3 {
            queries.push(q(&owner, AAAA));
        }
        if i % 10 == 1 {
            b.push(&owner, MX, mx(10, &format!("mail{}.bench.example.", i % 7)));
            queries.push(q(&owner, MX));
        }
        if i % 10 == 2 {
            b.push(
                &owner,
                TXT,
                txt(&[
                    &format!("v=spf1 ip4:10.0.0.{} -all", i % 250),
                    &format!("bench {i}"),
                ]),
            );
            queries.push(q(&owner, TXT));
        }
        if i % 12 == 5 {
            queries.push(q(&format!("m{i:x}"), A));
        }
    }
    // Interleave so consecutive queries touch unrelated names, as the shuffled file does.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..queries.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        queries.swap(i, (state % (i as u64 + 1)) as usize);
    }
    (b.data, queries)
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();

    let rss0 = rss_bytes();
    let data = big_zone(args.records);
    let total = data.records.len();
    let rss_data = rss_bytes();
    let t = Instant::now();
    let zone = Zone::compile(&data, ZoneKind::Primary)?;
    let compile = t.elapsed();
    drop(data);
    let rss_zone = rss_bytes();
    println!(
        "big.example: {total} records, {} names; ZoneData {:.0} MiB resident; compile {:.3} s \
         ({:.0} ns/record); compiled heap {:.1} MiB ({:.1} bytes/record); RSS after dropping the \
         input {:.1} MiB above the start",
        zone.name_count(),
        (rss_data - rss0) as f64 / 1048576.0,
        compile.as_secs_f64(),
        compile.as_nanos() as f64 / total as f64,
        zone.heap_bytes() as f64 / 1048576.0,
        zone.heap_bytes() as f64 / total as f64,
        rss_zone.saturating_sub(rss0) as f64 / 1048576.0,
    );
    drop(zone);

    let (data, queries) = small_zone(args.names);
    let t = Instant::now();
    let zone = Zone::compile(&data, ZoneKind::Primary)?;
    let small_compile = t.elapsed();
    let zones = Zones::new(vec![ServedZone::new(Arc::new(zone))], Vec::new());
    let options = ReplyOptions::udp(1232);
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut out = Vec::with_capacity(1500);
    let parsed: Vec<Query<'_>> = queries
        .iter()
        .map(|m| Query::parse(m))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("query: {e:?}"))?;
    let mut rcodes = [0usize; 16];
    for q in &parsed {
        out.clear();
        if let ZoneAnswer::Pass = zones.answer(q, client, false, &options, &mut out) {
            anyhow::bail!("a query of the mix was passed");
        }
        rcodes[usize::from(out[3] & 15)] += 1;
    }
    // Each query is copied into one receive buffer and parsed there, as a core does: the
    // query's bytes are hot, the zone's are whatever the mix makes them.
    let mut buf = [0u8; 512];
    let t = Instant::now();
    let mut bytes = 0usize;
    for i in 0..args.answers {
        let msg = &queries[i % queries.len()];
        buf[..msg.len()].copy_from_slice(msg);
        let q = Query::parse(&buf[..msg.len()]).map_err(|e| anyhow::anyhow!("query: {e:?}"))?;
        out.clear();
        black_box(zones.answer(&q, client, false, &options, &mut out));
        bytes += out.len();
    }
    let answer = t.elapsed();
    println!(
        "bench.example: {} records compiled in {:.3} s; {} distinct queries (NOERROR {}, NXDOMAIN \
         {}); {:.0} ns per answer (Query::parse and Zones::answer), {:.0} bytes on average",
        data.records.len(),
        small_compile.as_secs_f64(),
        parsed.len(),
        rcodes[0],
        rcodes[3],
        answer.as_nanos() as f64 / args.answers as f64,
        bytes as f64 / args.answers as f64,
    );
    Ok(())
}
