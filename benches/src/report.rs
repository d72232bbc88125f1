//! The report of a run: a JSON document (`--json`), a human summary with the percentile table,
//! and the side-by-side comparison of two reports (`--compare A.json B.json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use hdrhistogram::Histogram;

use crate::run::{Load, Outcome, Plan};
use crate::tally::ErrorKind;

/// Version of the JSON layout; bumped when a field changes meaning.
pub const FORMAT: u32 = 1;
/// Rows of the percentile table per halving of the remaining tail.
const TICKS_PER_HALF: u32 = 2;

/// RCODE mnemonics (RFC 6895), by value.
const RCODES: [&str; 16] = [
    "NOERROR",
    "FORMERR",
    "SERVFAIL",
    "NXDOMAIN",
    "NOTIMP",
    "REFUSED",
    "YXDOMAIN",
    "YXRRSET",
    "NXRRSET",
    "NOTAUTH",
    "NOTZONE",
    "DSOTYPENI",
    "RCODE12",
    "RCODE13",
    "RCODE14",
    "RCODE15",
];

/// Everything a run measured, and how it was run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`FORMAT`].
    pub format: u32,
    /// The target URL.
    pub target: String,
    /// What the run asked and so what it measured on a caching target (empty in reports
    /// written before it existed).
    #[serde(default)]
    pub questions: String,
    /// `open` (fixed rate) or `closed` (fixed concurrency).
    pub model: String,
    /// Offered rate of an open loop, queries per second.
    pub rate: Option<f64>,
    /// Outstanding queries of a closed loop.
    pub concurrency: Option<usize>,
    /// Generator cores.
    pub cores: usize,
    /// Sockets or connections per core.
    pub connections: usize,
    /// Queries in flight per connection at most (stream transports).
    pub streams: Option<usize>,
    /// Seconds queries were sent.
    pub duration_s: f64,
    /// Per-query timeout in milliseconds.
    pub timeout_ms: u64,
    /// Queries sent.
    pub sent: u64,
    /// Of those, fresh (cache-miss) names.
    pub fresh: u64,
    /// Answers matched to their query.
    pub answered: u64,
    /// Answers per second of sending.
    pub qps: f64,
    /// Queries given up after the timeout.
    pub timeouts: u64,
    /// Answers with TC set.
    pub truncated: u64,
    /// Answers by RCODE (only those seen).
    pub rcodes: BTreeMap<String, u64>,
    /// Queries lost other than by timeout, by kind (every kind listed).
    pub errors: BTreeMap<String, u64>,
    /// Replies that matched no query.
    pub mismatches: Mismatches,
    /// DoH requests answered without a DNS message, by HTTP status ("reset" for a reset
    /// stream); each also counts as a timeout. Empty for other transports.
    #[serde(default)]
    pub http_failures: BTreeMap<String, u64>,
    /// Latency of answers from when their query was due (the intended send time in an open
    /// loop: stalls of the target or the generator show here).
    pub latency: Latency,
    /// Latency of answers from when their query was actually sent (what dnsperf reports).
    pub service_latency: Latency,
}

/// Replies that matched no query in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatches {
    /// No query in flight with that ID (late or stray).
    pub unknown_id: u64,
    /// The ID was in flight, the question was not what it asked.
    pub question: u64,
    /// Not a DNS response.
    pub malformed: u64,
}

impl Mismatches {
    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.unknown_id + self.question + self.malformed
    }
}

/// Latency summary and percentile table, in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Fastest answer.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Standard deviation.
    pub stddev_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p99_9_us: f64,
    /// Slowest answer.
    pub max_us: f64,
    /// The full distribution: at `percentile`, latency up to `latency_us`, `count` answers
    /// at or below it.
    pub percentiles: Vec<Percentile>,
}

/// One row of the percentile table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentile {
    /// 0 to 100.
    pub percentile: f64,
    /// Latency at that percentile, in microseconds.
    pub latency_us: f64,
    /// Answers at or below it.
    pub count: u64,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

impl Report {
    /// The report of `outcome`, run under `plan`.
    pub fn new(plan: &Plan, outcome: &Outcome) -> Self {
        let tally = &outcome.tally;
        let seconds = outcome.elapsed.as_secs_f64();
        let (model, rate, concurrency) = match plan.load {
            Load::Open { rate } => ("open", Some(rate), None),
            Load::Closed { concurrency } => ("closed", None, Some(concurrency)),
        };
        let stream = plan.target.protocol.is_stream();
        Self {
            format: FORMAT,
            target: plan.target.to_string(),
            questions: plan.questions.clone(),
            model: model.into(),
            rate,
            concurrency,
            cores: plan.cores,
            connections: plan.connections,
            streams: stream.then_some(plan.streams),
            duration_s: seconds,
            timeout_ms: plan.timeout.as_millis() as u64,
            sent: tally.sent,
            fresh: tally.fresh,
            answered: tally.answered,
            qps: if seconds > 0.0 {
                tally.answered as f64 / seconds
            } else {
                0.0
            },
            timeouts: tally.timeouts,
            truncated: tally.truncated,
            rcodes: tally
                .rcodes
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(code, n)| (RCODES[code].to_owned(), *n))
                .collect(),
            errors: ErrorKind::ALL
                .iter()
                .map(|kind| (kind.label().to_owned(), tally.errors[*kind as usize]))
                .collect(),
            mismatches: Mismatches {
                unknown_id: tally.unknown_id,
                question: tally.question_mismatch,
                malformed: tally.malformed,
            },
            http_failures: tally
                .http_failures
                .iter()
                .map(|(status, n)| match status {
                    0 => ("reset".to_owned(), *n),
                    _ => (status.to_string(), *n),
                })
                .collect(),
            latency: latency(&tally.latency),
            service_latency: latency(&tally.service),
        }
    }

    /// Errors of every kind.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The human summary and the percentile table.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let load = match (self.rate, self.concurrency) {
            (Some(rate), _) => format!("open loop at {rate} queries/s"),
            (_, Some(c)) => format!("closed loop, {c} outstanding"),
            _ => self.model.clone(),
        };
        let streams = self
            .streams
            .map(|s| format!(", {s} streams each"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "kudurru-bench {}: {load}; {} core(s) × {} connection(s){streams}; {:.2} s, timeout {} ms",
            self.target, self.cores, self.connections, self.duration_s, self.timeout_ms
        );
        if !self.questions.is_empty() {
            let _ = writeln!(s, "  asks        {}", self.questions);
        }
        let _ = writeln!(
            s,
            "  sent        {:>12}   (fresh names {})",
            self.sent, self.fresh
        );
        let _ = writeln!(
            s,
            "  answered    {:>12}   {:.1} per second",
            self.answered, self.qps
        );
        let _ = writeln!(s, "  timeouts    {:>12}", self.timeouts);
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "  errors      {:>12}   ({})",
            self.error_total(),
            errors.join(", ")
        );
        let m = &self.mismatches;
        let _ = writeln!(
            s,
            "  mismatches  {:>12}   (unknown id {}, question {}, malformed {})",
            m.total(),
            m.unknown_id,
            m.question,
            m.malformed
        );
        if !self.http_failures.is_empty() {
            let failures: Vec<String> = self
                .http_failures
                .iter()
                .map(|(status, n)| format!("{status} {n}"))
                .collect();
            let _ = writeln!(
                s,
                "  http        {:>12}   (no answer, counted as timeouts: {})",
                self.http_failures.values().sum::<u64>(),
                failures.join(", ")
            );
        }
        let _ = writeln!(s, "  truncated   {:>12}", self.truncated);
        let rcodes: Vec<String> = self
            .rcodes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "  rcodes      {}", rcodes.join(", "));
        for (name, l) in [
            ("latency µs", &self.latency),
            ("service µs", &self.service_latency),
        ] {
            let _ = writeln!(
                s,
                "  {name}  min {:.1}  mean {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  stddev {:.1}",
                l.min_us,
                l.mean_us,
                l.p50_us,
                l.p90_us,
                l.p99_us,
                l.p99_9_us,
                l.max_us,
                l.stddev_us
            );
        }
        let l = &self.latency;
        if !l.percentiles.is_empty() {
            let _ = writeln!(
                s,
                "\n  {:>12}  {:>14}  {:>12}",
                "percentile", "latency µs", "count"
            );
            for row in &l.percentiles {
                let _ = writeln!(
                    s,
                    "  {:>12.4}  {:>14.1}  {:>12}",
                    row.percentile, row.latency_us, row.count
                );
            }
        }
        s
    }
}

fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency {
            min_us: 0.0,
            mean_us: 0.0,
            stddev_us: 0.0,
            p50_us: 0.0,
            p90_us: 0.0,
            p99_us: 0.0,
            p99_9_us: 0.0,
            max_us: 0.0,
            percentiles: Vec::new(),
        };
    }
    let at = |q: f64| us(h.value_at_quantile(q));
    let mut percentiles: Vec<Percentile> = h
        .iter_quantiles(TICKS_PER_HALF)
        .map(|v| Percentile {
            percentile: v.quantile_iterated_to() * 100.0,
            latency_us: us(v.value_iterated_to()),
            count: 0,
        })
        .collect();
    // Counts at or below each row's latency, from the histogram itself (cumulative).
    for row in &mut percentiles {
        row.count = h.count_between(0, (row.latency_us * 1_000.0) as u64);
    }
    Latency {
        min_us: us(h.min()),
        mean_us: h.mean() / 1_000.0,
        stddev_us: h.stdev() / 1_000.0,
        p50_us: at(0.5),
        p90_us: at(0.9),
        p99_us: at(0.99),
        p99_9_us: at(0.999),
        max_us: us(h.max()),
        percentiles,
    }
}

/// Two reports side by side, with the ratio B/A for every figure.
pub fn compare(a: &Report, b: &Report, a_name: &str, b_name: &str) -> String {
    let rows: [(&str, f64, f64); 13] = [
        ("answered/s", a.qps, b.qps),
        ("sent", a.sent as f64, b.sent as f64),
        ("answered", a.answered as f64, b.answered as f64),
        ("timeouts", a.timeouts as f64, b.timeouts as f64),
        ("errors", a.error_total() as f64, b.error_total() as f64),
        (
            "mismatches",
            a.mismatches.total() as f64,
            b.mismatches.total() as f64,
        ),
        ("latency mean µs", a.latency.mean_us, b.latency.mean_us),
        ("latency p50 µs", a.latency.p50_us, b.latency.p50_us),
        ("latency p90 µs", a.latency.p90_us, b.latency.p90_us),
        ("latency p99 µs", a.latency.p99_us, b.latency.p99_us),
        ("latency p99.9 µs", a.latency.p99_9_us, b.latency.p99_9_us),
        ("latency max µs", a.latency.max_us, b.latency.max_us),
        ("duration s", a.duration_s, b.duration_s),
    ];
    let mut s = String::new();
    let _ = writeln!(s, "A: {a_name}  ({}, {})", a.target, describe(a));
    let _ = writeln!(s, "B: {b_name}  ({}, {})", b.target, describe(b));
    let _ = writeln!(s, "\n  {:<18} {:>14} {:>14} {:>9}", "", "A", "B", "B/A");
    for (name, x, y) in rows {
        let ratio = if x == 0.0 {
            if y == 0.0 { "=".into() } else { "-".into() }
        } else {
            format!("{:.3}", y / x)
        };
        let _ = writeln!(s, "  {name:<18} {x:>14.1} {y:>14.1} {ratio:>9}");
    }
    s
}

fn describe(r: &Report) -> String {
    match (r.rate, r.concurrency) {
        (Some(rate), _) => format!("open {rate}/s"),
        (_, Some(c)) => format!("closed {c}"),
        _ => r.model.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inflight::Outcome as Reply;
    use crate::queries::{Asked, QueryMix, Shape, pool};
    use crate::run::Outcome;
    use crate::tally::Tally;
    use std::sync::Arc;
    use std::time::Duration;

    fn plan() -> Plan {
        let shape = Shape {
            edns_payload: None,
            dnssec_ok: false,
        };
        Plan {
            target: "tcp://127.0.0.1:53".parse().unwrap(),
            mix: Arc::new(
                QueryMix::new(pool("s.test", 1, "A").unwrap(), "s.test", "A", 0.0, shape).unwrap(),
            ),
            questions: String::new(),
            load: Load::Closed { concurrency: 10 },
            duration: Duration::from_secs(2),
            timeout: Duration::from_millis(500),
            cores: 1,
            connections: 2,
            streams: 5,
            seed: 1,
            tls: None,
            method: crate::doh::Method::Post,
        }
    }

    /// An answer to a query sent at 0 (so it arrives after its latency).
    fn answered(rcode: u8) -> Reply {
        Reply::Answered {
            rcode,
            truncated: false,
            due_ns: 0,
            sent_ns: 0,
            asked: Asked::Fixed(0),
        }
    }

    fn outcome() -> Outcome {
        let mut tally = Tally::new();
        tally.sent = 1003;
        tally.timeouts = 2;
        for i in 1..=1000u64 {
            tally.record(answered(if i == 1000 { 3 } else { 0 }), i * 1_000);
        }
        tally.record(Reply::UnknownId, 0);
        tally.error(ErrorKind::Closed, 1);
        Outcome {
            tally,
            elapsed: Duration::from_secs(2),
        }
    }

    #[test]
    fn report_figures_come_from_the_tally() {
        let report = Report::new(&plan(), &outcome());
        assert_eq!(
            (report.sent, report.answered, report.timeouts),
            (1003, 1000, 2)
        );
        assert_eq!(report.qps, 500.0);
        assert_eq!(report.rcodes.get("NOERROR"), Some(&999));
        assert_eq!(report.rcodes.get("NXDOMAIN"), Some(&1));
        assert_eq!(report.rcodes.len(), 2);
        assert_eq!(report.errors.len(), ErrorKind::ALL.len());
        assert_eq!(report.errors["closed"], 1);
        assert_eq!(report.mismatches.unknown_id, 1);
        assert_eq!(report.streams, Some(5));
        // Latencies 1..=1000 µs: the median is 500 µs, p99 990 µs (within 0.1%).
        let l = &report.latency;
        assert!((l.p50_us - 500.0).abs() <= 0.5, "{}", l.p50_us);
        assert!((l.p99_us - 990.0).abs() <= 1.0, "{}", l.p99_us);
        assert!((l.min_us - 1.0).abs() < 0.01 && (l.max_us - 1000.0).abs() <= 1.0);
        let last = l.percentiles.last().unwrap();
        assert_eq!((last.percentile, last.count), (100.0, 1000));
        assert!(l.percentiles.windows(2).all(|w| w[0].count <= w[1].count));
        let back: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
        let human = report.human();
        assert!(human.contains("NOERROR 999, NXDOMAIN 1"), "{human}");
        assert!(human.contains("closed loop, 10 outstanding"), "{human}");
    }

    #[test]
    fn compare_prints_ratios() {
        let a = Report::new(&plan(), &outcome());
        let mut b = a.clone();
        b.qps = 750.0;
        b.timeouts = 0;
        let text = compare(&a, &b, "a.json", "b.json");
        let row = |name: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap()
                .split_whitespace()
                .last()
                .unwrap()
                .to_owned()
        };
        assert_eq!(row("answered/s"), "1.500");
        assert_eq!(row("timeouts"), "0.000");
        assert_eq!(row("mismatches"), "1.000");
        assert_eq!(row("errors"), "1.000");
    }
}
