//! The ops listener: `/healthz/live`, `/healthz/ready` and `/metrics` (Prometheus text format).
//! Unauthenticated by design, so it binds to loopback by default; it runs on its own thread of
//! the control plane and never touches a core's state except through relaxed counters.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use kudurru_transports::metrics::{LATENCY_BOUNDS, MAX_UPSTREAMS, RCODE_LABELS, UpstreamError};
use kudurru_transports::{CoreMetrics, SharedSettings, Transport};

/// What the ops listener reports on.
pub struct OpsState {
    /// Whether every listener on every core is up.
    pub ready: Box<dyn Fn() -> bool + Send + Sync>,
    /// Per-core counters.
    pub metrics: Vec<Arc<CoreMetrics>>,
    /// The settings snapshot (upstream names for labels).
    pub settings: SharedSettings,
}

/// Binds the ops listener; the error names the address.
pub fn bind(addr: SocketAddr) -> Result<tiny_http::Server, String> {
    tiny_http::Server::http(addr).map_err(|e| format!("cannot bind ops listener {addr}: {e}"))
}

/// Serves requests until the server is unblocked.
pub fn serve(server: Arc<tiny_http::Server>, state: Arc<OpsState>) {
    for request in server.incoming_requests() {
        let (status, content_type, body) = route(&state, request.method(), request.url());
        let header = tiny_http::Header::from_bytes("Content-Type", content_type)
            .expect("static header is valid");
        let response = tiny_http::Response::from_string(body)
            .with_status_code(status)
            .with_header(header);
        let _ = request.respond(response);
    }
}

fn route(state: &OpsState, method: &tiny_http::Method, url: &str) -> (u16, &'static str, String) {
    use tiny_http::Method::{Get, Head};
    let path = url.split('?').next().unwrap_or("");
    const TEXT: &str = "text/plain; charset=utf-8";
    if !matches!(method, Get | Head) {
        return (405, TEXT, "method not allowed\n".into());
    }
    match path {
        "/healthz/live" => (200, TEXT, "ok\n".into()),
        "/healthz/ready" if (state.ready)() => (200, TEXT, "ready\n".into()),
        "/healthz/ready" => (
            503,
            TEXT,
            "not ready: listeners are still starting\n".into(),
        ),
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            render_metrics(state),
        ),
        _ => (404, TEXT, "not found\n".into()),
    }
}

fn sum(metrics: &[Arc<CoreMetrics>], f: impl Fn(&CoreMetrics) -> u64) -> u64 {
    metrics.iter().map(|m| f(m)).sum()
}

/// Reads one counter of a core.
type Counter = fn(&CoreMetrics) -> u64;

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Renders every counter in Prometheus text exposition format.
pub fn render_metrics(state: &OpsState) -> String {
    let m = &state.metrics;
    let mut out = String::with_capacity(8192);
    head(
        &mut out,
        "kudurru_dns_queries_total",
        "counter",
        "DNS queries received, by transport and core.",
    );
    for (core, cm) in m.iter().enumerate() {
        for t in Transport::ALL {
            let _ = writeln!(
                out,
                "kudurru_dns_queries_total{{transport=\"{}\",core=\"{core}\"}} {}",
                t.label(),
                cm.queries[t as usize].load(Relaxed)
            );
        }
    }
    head(
        &mut out,
        "kudurru_dns_responses_total",
        "counter",
        "DNS responses by rcode; rcode=\"none\" counts drops (nothing sent).",
    );
    for (i, label) in RCODE_LABELS.iter().enumerate() {
        let _ = writeln!(
            out,
            "kudurru_dns_responses_total{{rcode=\"{label}\"}} {}",
            sum(m, |c| c.responses[i].load(Relaxed))
        );
    }
    let cache: [(&str, &str, &str, Counter); 6] = [
        (
            "kudurru_cache_hits_total",
            "counter",
            "Answers served from the cache.",
            |c| c.cache.hits.load(Relaxed),
        ),
        (
            "kudurru_cache_misses_total",
            "counter",
            "Lookups that missed the owning core's shard.",
            |c| c.cache.misses.load(Relaxed),
        ),
        (
            "kudurru_cache_evictions_total",
            "counter",
            "Fresh answers evicted for room (CLOCK).",
            |c| c.cache.evictions.load(Relaxed),
        ),
        (
            "kudurru_cache_expired_total",
            "counter",
            "Expired answers reclaimed.",
            |c| c.cache.expired.load(Relaxed),
        ),
        (
            "kudurru_cache_entries",
            "gauge",
            "Answers held in the core's shard.",
            |c| c.cache.entries.load(Relaxed),
        ),
        (
            "kudurru_cache_l1_entries",
            "gauge",
            "Copies of other cores' answers held in the core's L1.",
            |c| c.cache.l1_entries.load(Relaxed),
        ),
    ];
    for (name, kind, help, get) in cache {
        head(&mut out, name, kind, help);
        for (core, cm) in m.iter().enumerate() {
            let _ = writeln!(out, "{name}{{core=\"{core}\"}} {}", get(cm));
        }
    }
    let plain: [(&str, &str, Counter); 5] = [
        (
            "kudurru_cross_core_lookups_total",
            "Cache misses sent to the owning core.",
            |c| c.cross_core_lookups.load(Relaxed),
        ),
        (
            "kudurru_coalesced_queries_total",
            "Misses that joined an identical in-flight upstream query.",
            |c| c.coalesced.load(Relaxed),
        ),
        (
            "kudurru_upstream_exhausted_total",
            "Queries answered SERVFAIL because every upstream attempt failed.",
            |c| c.upstream_exhausted.load(Relaxed),
        ),
        (
            "kudurru_tcp_refused_total",
            "Client TCP connections closed at once: per-core limit reached.",
            |c| c.tcp_refused.load(Relaxed),
        ),
        (
            "kudurru_tcp_timeouts_total",
            "Client TCP connections closed for idleness or slowness.",
            |c| c.tcp_timeouts.load(Relaxed),
        ),
    ];
    for (name, help, get) in plain {
        head(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", sum(m, get));
    }

    let settings = state.settings.load();
    let upstreams: Vec<String> = settings
        .upstreams
        .iter()
        .take(MAX_UPSTREAMS)
        .map(ToString::to_string)
        .collect();
    head(
        &mut out,
        "kudurru_upstream_queries_total",
        "counter",
        "Queries sent to each upstream.",
    );
    for (i, name) in upstreams.iter().enumerate() {
        let _ = writeln!(
            out,
            "kudurru_upstream_queries_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstreams[i].queries.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_errors_total",
        "counter",
        "Failed upstream attempts by kind.",
    );
    for (i, name) in upstreams.iter().enumerate() {
        for kind in UpstreamError::ALL {
            let v = sum(m, |c| c.upstreams[i].errors[kind as usize].load(Relaxed));
            let _ = writeln!(
                out,
                "kudurru_upstream_errors_total{{upstream=\"{name}\",kind=\"{}\"}} {v}",
                kind.label()
            );
        }
    }
    head(
        &mut out,
        "kudurru_upstream_mismatched_replies_total",
        "counter",
        "Replies ignored: wrong ID or question (spoofing resistance).",
    );
    for (i, name) in upstreams.iter().enumerate() {
        let _ = writeln!(
            out,
            "kudurru_upstream_mismatched_replies_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstreams[i].mismatched.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_tcp_retries_total",
        "counter",
        "Truncated UDP replies retried over TCP.",
    );
    for (i, name) in upstreams.iter().enumerate() {
        let _ = writeln!(
            out,
            "kudurru_upstream_tcp_retries_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstreams[i].tcp_retries.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_latency_seconds",
        "histogram",
        "Latency of answered upstream queries.",
    );
    for (i, name) in upstreams.iter().enumerate() {
        let mut cumulative = 0;
        for (b, bound) in LATENCY_BOUNDS.iter().enumerate() {
            cumulative += sum(m, |c| c.upstreams[i].latency_buckets[b].load(Relaxed));
            let _ = writeln!(
                out,
                "kudurru_upstream_latency_seconds_bucket{{upstream=\"{name}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += sum(m, |c| {
            c.upstreams[i].latency_buckets[LATENCY_BOUNDS.len()].load(Relaxed)
        });
        let _ = writeln!(
            out,
            "kudurru_upstream_latency_seconds_bucket{{upstream=\"{name}\",le=\"+Inf\"}} {cumulative}"
        );
        let sum_us = sum(m, |c| c.upstreams[i].latency_sum_us.load(Relaxed));
        let _ = writeln!(
            out,
            "kudurru_upstream_latency_seconds_sum{{upstream=\"{name}\"}} {}",
            sum_us as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "kudurru_upstream_latency_seconds_count{{upstream=\"{name}\"}} {cumulative}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use arc_swap::ArcSwap;

    use super::*;
    use crate::config::Config;

    fn state(ready: Arc<AtomicBool>) -> OpsState {
        let settings = Config::default()
            .validate()
            .expect("defaults validate")
            .settings;
        OpsState {
            ready: Box::new(move || ready.load(Relaxed)),
            metrics: vec![
                Arc::new(CoreMetrics::default()),
                Arc::new(CoreMetrics::default()),
            ],
            settings: Arc::new(ArcSwap::from_pointee(settings)),
        }
    }

    #[test]
    fn readiness_is_503_until_listeners_are_up() {
        let ready = Arc::new(AtomicBool::new(false));
        let s = state(ready.clone());
        assert_eq!(route(&s, &tiny_http::Method::Get, "/healthz/ready").0, 503);
        assert_eq!(route(&s, &tiny_http::Method::Get, "/healthz/live").0, 200);
        ready.store(true, Relaxed);
        assert_eq!(route(&s, &tiny_http::Method::Get, "/healthz/ready").0, 200);
        assert_eq!(route(&s, &tiny_http::Method::Post, "/healthz/ready").0, 405);
    }

    #[test]
    fn metrics_sum_cores_and_keep_per_core_series() {
        let s = state(Arc::new(AtomicBool::new(true)));
        s.metrics[0].query(Transport::Udp);
        s.metrics[1].query(Transport::Udp);
        s.metrics[1].response(2);
        s.metrics[1].dropped();
        let text = render_metrics(&s);
        assert!(text.contains("kudurru_dns_queries_total{transport=\"udp\",core=\"0\"} 1"));
        assert!(text.contains("kudurru_dns_queries_total{transport=\"udp\",core=\"1\"} 1"));
        assert!(text.contains("kudurru_dns_responses_total{rcode=\"SERVFAIL\"} 1"));
        assert!(text.contains("kudurru_dns_responses_total{rcode=\"none\"} 1"));
        assert!(text.contains("kudurru_upstream_queries_total{upstream=\"udp://1.1.1.1:53\"} 0"));
    }
}
