//! Upstream health as the control thread sees it: totals over every core's counters, and a
//! task that logs when an upstream goes bad or comes back and when queries found no upstream.
//!
//! ```text
//! every PERIOD: per upstream, attempts and failures since the last look
//!   ≥ MIN_ATTEMPTS and half or more failed ─▶ unhealthy (warn, once)
//!   back under half ─▶ healthy again (info, once)
//!   queries answered SERVFAIL for want of any upstream ─▶ warn with the count
//! ```
//! One line per change, never one per query: the log cannot be flooded by a dead upstream.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use kudurru_transports::CoreMetrics;
use kudurru_transports::metrics::MAX_UPSTREAMS;

use crate::ops::OpsState;

/// How often the watcher looks.
pub const PERIOD: Duration = Duration::from_secs(5);
/// Attempts in one period below which an upstream's health is not judged.
pub const MIN_ATTEMPTS: u64 = 4;

/// One upstream's counters summed over the cores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamTotals {
    /// Its URL.
    pub upstream: String,
    /// Queries sent.
    pub queries: u64,
    /// Failed attempts.
    pub errors: u64,
    /// Answers received.
    pub answered: u64,
    /// Sum of answered latencies, µs.
    pub latency_us: u64,
    /// Replies ignored for a wrong ID or question.
    pub mismatched: u64,
    /// Truncated replies retried over TCP.
    pub tcp_retries: u64,
    /// TCP connections opened.
    pub tcp_connections: u64,
    /// Cores that hold it down (out of rotation until a health probe succeeds).
    pub down_cores: u64,
}

impl UpstreamTotals {
    /// Mean latency of answered queries, ms.
    pub fn mean_latency_ms(&self) -> f64 {
        if self.answered == 0 {
            0.0
        } else {
            self.latency_us as f64 / self.answered as f64 / 1000.0
        }
    }

    /// Fewer than half of the attempts failed (or none were made).
    pub fn healthy(&self) -> bool {
        self.queries == 0 || self.errors * 2 < self.queries
    }
}

/// Every configured upstream's totals, in configuration order.
pub fn upstream_totals(state: &OpsState) -> Vec<UpstreamTotals> {
    let settings = state.settings.load();
    let sum = |f: &dyn Fn(&CoreMetrics) -> u64| -> u64 { state.metrics.iter().map(|c| f(c)).sum() };
    settings
        .upstreams
        .iter()
        .take(MAX_UPSTREAMS)
        .enumerate()
        .map(|(i, spec)| UpstreamTotals {
            upstream: spec.to_string(),
            queries: sum(&|c| c.upstreams[i].queries.load(Relaxed)),
            errors: sum(&|c| c.upstreams[i].errors.iter().map(|e| e.load(Relaxed)).sum()),
            answered: sum(&|c| {
                c.upstreams[i]
                    .latency_buckets
                    .iter()
                    .map(|b| b.load(Relaxed))
                    .sum()
            }),
            latency_us: sum(&|c| c.upstreams[i].latency_sum_us.load(Relaxed)),
            mismatched: sum(&|c| c.upstreams[i].mismatched.load(Relaxed)),
            tcp_retries: sum(&|c| c.upstreams[i].tcp_retries.load(Relaxed)),
            tcp_connections: sum(&|c| c.upstreams[i].tcp_connections.load(Relaxed)),
            down_cores: sum(&|c| c.upstreams[i].down.load(Relaxed)),
        })
        .collect()
}

/// What the watcher remembers of one upstream.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    queries: u64,
    errors: u64,
    unhealthy: bool,
}

/// The watcher's judgement of one period: the log lines it would write.
#[derive(Debug, Default)]
struct Watch {
    seen: HashMap<String, Seen>,
    exhausted: u64,
}

impl Watch {
    /// Compares `totals` and the SERVFAIL-for-want-of-upstreams count with the last look.
    fn look(&mut self, totals: &[UpstreamTotals], exhausted: u64) -> Vec<(bool, String)> {
        let mut lines = Vec::new();
        for t in totals {
            let before = self.seen.get(&t.upstream).copied().unwrap_or_default();
            let attempts = t.queries.saturating_sub(before.queries);
            let failed = t.errors.saturating_sub(before.errors);
            let mut now = Seen {
                queries: t.queries,
                errors: t.errors,
                unhealthy: before.unhealthy,
            };
            if attempts >= MIN_ATTEMPTS {
                now.unhealthy = failed * 2 >= attempts;
            }
            if now.unhealthy && !before.unhealthy {
                lines.push((
                    true,
                    format!(
                        "upstream {} is unhealthy: {failed} of its last {attempts} attempts failed",
                        t.upstream
                    ),
                ));
            } else if before.unhealthy && !now.unhealthy {
                lines.push((
                    false,
                    format!(
                        "upstream {} is healthy again: {failed} of its last {attempts} attempts failed",
                        t.upstream
                    ),
                ));
            }
            self.seen.insert(t.upstream.clone(), now);
        }
        let new = exhausted.saturating_sub(self.exhausted);
        if new > 0 {
            lines.push((
                true,
                format!("{new} queries answered SERVFAIL: every upstream attempt failed (GET /api/v1/upstreams)"),
            ));
        }
        self.exhausted = exhausted;
        lines
    }
}

/// Logs upstream health changes every [`PERIOD`] until the runtime ends.
pub async fn watch(state: Arc<OpsState>) {
    let mut watch = Watch::default();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let exhausted = state
            .metrics
            .iter()
            .map(|c| c.upstream_exhausted.load(Relaxed))
            .sum();
        for (warn, line) in watch.look(&upstream_totals(&state), exhausted) {
            if warn {
                tracing::warn!("{line}");
            } else {
                tracing::info!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(queries: u64, errors: u64) -> Vec<UpstreamTotals> {
        vec![UpstreamTotals {
            upstream: "udp://192.0.2.1:53".into(),
            queries,
            errors,
            ..UpstreamTotals::default()
        }]
    }

    #[test]
    fn a_change_of_health_is_said_once_each_way_and_few_attempts_are_not_judged() {
        let mut w = Watch::default();
        assert!(w.look(&totals(2, 2), 0).is_empty(), "too few attempts");
        let lines = w.look(&totals(12, 10), 0);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].0 && lines[0].1.contains("is unhealthy: 8 of its last 10"),
            "{lines:?}"
        );
        assert!(
            w.look(&totals(30, 28), 0).is_empty(),
            "still unhealthy: said already"
        );
        assert!(
            w.look(&totals(31, 29), 0).is_empty(),
            "one attempt: not judged"
        );
        let lines = w.look(&totals(51, 29), 0);
        assert_eq!(lines.len(), 1);
        assert!(
            !lines[0].0 && lines[0].1.contains("healthy again"),
            "{lines:?}"
        );
    }

    #[test]
    fn queries_that_found_no_upstream_are_counted_per_period() {
        let mut w = Watch::default();
        let lines = w.look(&[], 3);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].1.starts_with("3 queries answered SERVFAIL"),
            "{lines:?}"
        );
        assert!(w.look(&[], 3).is_empty());
        assert!(w.look(&[], 5)[0].1.starts_with("2 queries"));
    }
}
