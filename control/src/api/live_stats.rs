//! `GET /api/v1/stats/live`: the data-plane counters the ops listener's `/metrics` renders,
//! read in-process from the same atomics ([`crate::ops::OpsState`]) and summarised as JSON for
//! the dashboard's overview, which computes rates between two polls. `time` is monotonic
//! (seconds since the control thread first answered this route), so rates survive clock
//! steps. Upstream latency percentiles come from the upstream latency histogram
//! (`kudurru_upstream_latency_seconds`); the data plane keeps no histogram of answer latency
//! nor counts answers by source beyond cache hits and blocked queries, so those are absent
//! (`null`) rather than guessed.

use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use kudurru_transports::metrics::{LATENCY_BOUNDS, RCODE_LABELS};
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

/// The `q` quantile (0..=1) of a histogram of per-bucket counts ([`LATENCY_BOUNDS`] plus
/// +Inf), in seconds, interpolated linearly inside its bucket as Prometheus'
/// `histogram_quantile` does; a quantile in the +Inf bucket is the last finite bound. `None`
/// for an empty histogram.
pub(super) fn quantile(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = LATENCY_BOUNDS.get(i) else {
                return LATENCY_BOUNDS.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { LATENCY_BOUNDS[i - 1] };
            let into = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * into.clamp(0.0, 1.0));
        }
        below += count;
    }
    LATENCY_BOUNDS.last().copied()
}

fn percentiles(buckets: &[u64]) -> Value {
    let ms = |q| quantile(buckets, q).map(|s| (s * 1e6).round() / 1e3);
    json!({
        "count": buckets.iter().sum::<u64>(),
        "p50Ms": ms(0.5),
        "p90Ms": ms(0.9),
        "p99Ms": ms(0.99),
    })
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
    })
}

/// The body of `GET /api/v1/stats/live`.
pub(super) fn live(state: &OpsState) -> Value {
    let time = epoch().elapsed().as_secs_f64();
    let cores: Vec<&CoreMetrics> = state.metrics.iter().map(|m| &**m).collect();
    let mut total = counters(&cores);
    let index = state.blocking.publisher.index();
    let blocked: u64 = state.blocking.metrics.blocked(&index).values().sum();
    // The upstream latency histogram, every upstream (forward zones' too) together.
    let mut buckets = [0u64; LATENCY_BOUNDS.len() + 1];
    for core in &cores {
        for upstream in core.upstreams.iter().chain([&core.forward_zone_upstreams]) {
            for (into, b) in buckets.iter_mut().zip(&upstream.latency_buckets) {
                *into += b.load(Relaxed);
            }
        }
    }
    if let Some(t) = total.as_object_mut() {
        t.insert(
            "answersBySource".into(),
            json!({
                "cache": t.get("cacheHits").cloned().unwrap_or(Value::Null),
                "blocked": blocked,
                "upstream": null,
                "local": null,
            }),
        );
    }
    json!({
        "time": time,
        "cores": cores.len(),
        "total": total,
        "perCore": cores.iter().map(|c| counters(&[c])).collect::<Vec<_>>(),
        "upstreamLatency": percentiles(&buckets),
        "answerLatency": null,
        "notes": {
            "upstreamLatency": "from the upstream latency histogram (kudurru_upstream_latency_seconds), interpolated inside its buckets",
            "answerLatency": "not kept: the data plane has no histogram of answer latency",
            "answersBySource": "cache is cache hits, blocked is kudurru_blocked_total; answers from upstreams and from local zones are not counted apart",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let mut b = [0u64; LATENCY_BOUNDS.len() + 1];
        assert_eq!(quantile(&b, 0.5), None);
        // 100 answers between 1 ms and 2 ms: p50 is 1.5 ms.
        b[2] = 100;
        let p50 = quantile(&b, 0.5).unwrap_or_default();
        assert!((p50 - 0.0015).abs() < 1e-9, "{p50}");
        // One slow answer past every bound: p99 stays in the 1-2 ms bucket, p100 is the last bound.
        b[LATENCY_BOUNDS.len()] = 1;
        assert!(quantile(&b, 0.99).unwrap_or_default() <= 0.002);
        assert_eq!(quantile(&b, 1.0), Some(2.0));
    }
}
