//! `GET /api/v1/stats/live`: the data-plane counters the ops listener's `/metrics` renders,
//! read in-process from the same atomics ([`crate::ops::OpsState`]) and summarised as JSON for
//! the dashboard's overview, which computes rates between two polls. `time` is monotonic
//! (seconds since the control thread first answered this route), so rates survive clock
//! steps. Upstream latency percentiles come from the upstream latency histogram
//! (`kudurru_upstream_latency_seconds`), answer latency percentiles from the answer latency
//! histogram (`kudurru_answer_latency_seconds`, per core and transport), and answers by source
//! from `kudurru_answers_total`.

use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use kudurru_transports::metrics::{
    AnswerSource, LATENCY_BOUNDS, RCODE_LABELS, answer_latency_bounds,
};
use kudurru_transports::{CoreMetrics, Transport};
use serde_json::{Map, Value, json};

use crate::ops::OpsState;

/// Index of `rcode="none"` (drops: nothing sent) in [`RCODE_LABELS`].
const DROPPED: usize = RCODE_LABELS.len() - 1;

/// The instant `time` counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The `q` quantile (0..=1) of a histogram of per-bucket counts (`bounds`, seconds, plus
/// +Inf), in seconds, interpolated linearly inside its bucket as Prometheus'
/// `histogram_quantile` does; a quantile in the +Inf bucket is the last finite bound. `None`
/// for an empty histogram.
pub(super) fn quantile(bounds: &[f64], buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return bounds.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let into = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * into.clamp(0.0, 1.0));
        }
        below += count;
    }
    bounds.last().copied()
}

/// The count and p50/p90/p99 (milliseconds, µs precision) of a histogram over `bounds`.
fn percentiles(bounds: &[f64], buckets: &[u64]) -> Value {
    let ms = |q| quantile(bounds, buckets, q).map(|s| (s * 1e6).round() / 1e3);
    json!({
        "count": buckets.iter().sum::<u64>(),
        "p50Ms": ms(0.5),
        "p90Ms": ms(0.9),
        "p99Ms": ms(0.99),
    })
}

/// Answer latency buckets (not cumulative) of `cores` on the transports `transports`.
fn answer_buckets(cores: &[&CoreMetrics], transports: &[Transport]) -> Vec<u64> {
    let mut buckets = vec![0u64; answer_latency_bounds().len() + 1];
    for core in cores {
        for &t in transports {
            let histogram = &core.answer_latency[t as usize];
            for (into, b) in buckets.iter_mut().zip(&histogram.buckets) {
                *into += b.load(Relaxed);
            }
        }
    }
    buckets
}

/// Answer latency percentiles of `cores`: overall and by transport.
fn answer_latency(cores: &[&CoreMetrics]) -> Value {
    let bounds = answer_latency_bounds();
    let mut overall = percentiles(&bounds, &answer_buckets(cores, &Transport::ALL));
    let mut by_transport = Map::new();
    for t in Transport::ALL {
        by_transport.insert(
            t.label().to_owned(),
            percentiles(&bounds, &answer_buckets(cores, &[t])),
        );
    }
    if let Some(o) = overall.as_object_mut() {
        o.insert("byTransport".into(), Value::Object(by_transport));
    }
    overall
}

/// Answers sent by `cores`, by [`AnswerSource`].
fn answers_by_source(cores: &[&CoreMetrics]) -> Value {
    let mut sources = Map::new();
    for source in AnswerSource::ALL {
        let n: u64 = cores
            .iter()
            .map(|c| c.answers[source as usize].load(Relaxed))
            .sum();
        sources.insert(source.label().to_owned(), json!(n));
    }
    Value::Object(sources)
}

/// One core's (or the node's) counters.
fn counters(cores: &[&CoreMetrics]) -> Value {
    let sum = |f: &dyn Fn(&CoreMetrics) -> u64| -> u64 { cores.iter().map(|c| f(c)).sum() };
    let mut transports = Map::new();
    for t in Transport::ALL {
        transports.insert(
            t.label().to_owned(),
            json!(sum(&|c| c.queries[t as usize].load(Relaxed))),
        );
    }
    let hits = sum(&|c| c.cache.hits.load(Relaxed));
    let misses = sum(&|c| c.cache.misses.load(Relaxed));
    let mut rcodes = Map::new();
    for (i, label) in RCODE_LABELS.iter().enumerate().take(DROPPED) {
        rcodes.insert(
            (*label).to_owned(),
            json!(sum(&|c| c.responses[i].load(Relaxed))),
        );
    }
    json!({
        "queries": transports.values().filter_map(Value::as_u64).sum::<u64>(),
        "queriesByTransport": transports,
        "responsesByRcode": rcodes,
        "dropped": sum(&|c| c.responses[DROPPED].load(Relaxed)),
        "cacheHits": hits,
        "cacheMisses": misses,
        "cacheHitRate": (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
        "upstreamQueries": sum(&|c| c.upstreams.iter().chain([&c.forward_zone_upstreams])
            .map(|u| u.queries.load(Relaxed)).sum()),
        "staleAnswers": sum(&|c| c.stale_answers.load(Relaxed)),
        "rateLimited": sum(&|c| c.ratelimit.dropped.load(Relaxed) + c.ratelimit.slipped.load(Relaxed)),
        "aclRefused": sum(&|c| c.acl_refused.iter().map(|a| a.load(Relaxed)).sum()),
        "answersBySource": answers_by_source(cores),
        "answerLatency": answer_latency(cores),
    })
}

/// The body of `GET /api/v1/stats/live`.
pub(super) fn live(state: &OpsState) -> Value {
    let time = epoch().elapsed().as_secs_f64();
    let cores: Vec<&CoreMetrics> = state.metrics.iter().map(|m| &**m).collect();
    let mut total = counters(&cores);
    // The node's answer latency is top-level (`answerLatency`); each core keeps its own.
    let answer_latency = total
        .as_object_mut()
        .and_then(|t| t.remove("answerLatency"))
        .unwrap_or(Value::Null);
    // The upstream latency histogram, every upstream (forward zones' too) together.
    let mut buckets = [0u64; LATENCY_BOUNDS.len() + 1];
    for core in &cores {
        for upstream in core.upstreams.iter().chain([&core.forward_zone_upstreams]) {
            for (into, b) in buckets.iter_mut().zip(&upstream.latency_buckets) {
                *into += b.load(Relaxed);
            }
        }
    }
    json!({
        "time": time,
        "cores": cores.len(),
        "total": total,
        "perCore": cores.iter().map(|c| counters(&[c])).collect::<Vec<_>>(),
        "upstreamLatency": percentiles(&LATENCY_BOUNDS, &buckets),
        "answerLatency": answer_latency,
        "notes": {
            "upstreamLatency": "from the upstream latency histogram (kudurru_upstream_latency_seconds), interpolated inside its buckets",
            "answerLatency": "from the answer latency histogram (kudurru_answer_latency_seconds): receipt (for UDP, the receive batch) to the answer's hand-over to the send path, interpolated inside its buckets (25 µs to 5 s); overall and byTransport here, per core in perCore[].answerLatency; counts since start, so a poll's percentiles cover the node's life",
            "answersBySource": "from kudurru_answers_total: cache (stale answers included), upstream, local (local zones, built-in names, transfers over UDP), blocked (policy answers: block, rewrite, cloaking), other (error answers: FORMERR, NOTIMP, REFUSED, SERVFAIL); zone transfers over TCP and DoT are not counted; totals in total.answersBySource, per core in perCore[].answersBySource",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let mut b = [0u64; LATENCY_BOUNDS.len() + 1];
        assert_eq!(quantile(&LATENCY_BOUNDS, &b, 0.5), None);
        // 100 answers between 1 ms and 2 ms: p50 is 1.5 ms.
        b[2] = 100;
        let p50 = quantile(&LATENCY_BOUNDS, &b, 0.5).unwrap_or_default();
        assert!((p50 - 0.0015).abs() < 1e-9, "{p50}");
        // One slow answer past every bound: p99 stays in the 1-2 ms bucket, p100 is the last bound.
        b[LATENCY_BOUNDS.len()] = 1;
        assert!(quantile(&LATENCY_BOUNDS, &b, 0.99).unwrap_or_default() <= 0.002);
        assert_eq!(quantile(&LATENCY_BOUNDS, &b, 1.0), Some(2.0));
    }

    /// The answer histogram's own bounds: 90 hits in 25-50 µs and 10 misses in 20-50 ms put
    /// p50 among the hits and p99 among the misses.
    #[test]
    fn answer_latency_quantiles_use_the_answer_bounds() {
        let bounds = answer_latency_bounds();
        let mut b = vec![0u64; bounds.len() + 1];
        b[1] = 90;
        b[10] = 10;
        let p50 = quantile(&bounds, &b, 0.5).unwrap_or_default();
        assert!((0.000025..=0.00005).contains(&p50), "{p50}");
        let p99 = quantile(&bounds, &b, 0.99).unwrap_or_default();
        assert!((0.02..=0.05).contains(&p99), "{p99}");
    }
}
