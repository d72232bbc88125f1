//! The ops listener: `/healthz/live`, `/healthz/ready`, `/metrics` (Prometheus text format) and
//! `/lameduck`. Unauthenticated by design, so it binds to loopback by default and changes state
//! (`POST`/`DELETE /lameduck`) only for loopback peers; it is served by the control thread's HTTP
//! layer ([`crate::http`]) and never touches a core's state except through atomics.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;

use kudurru_transports::metrics::{
    ACL_ACTION_LABELS, AnswerSource, DOH_STATUS_LABELS, FORWARD_ZONES, HttpVersion, LATENCY_BOUNDS,
    MAX_UPSTREAMS, RCODE_LABELS, UpstreamError, answer_latency_bounds,
};
use kudurru_transports::{CoreMetrics, SharedSettings, Transport};

use crate::http::{Handler, Request, respond};
use http::Method;

/// What the ops listener reports on.
pub struct OpsState {
    /// Whether every listener on every core is up.
    pub ready: Box<dyn Fn() -> bool + Send + Sync>,
    /// Per-core counters.
    pub metrics: Vec<Arc<CoreMetrics>>,
    /// The settings snapshot (upstream names for labels).
    pub settings: SharedSettings,
    /// Lameduck, shared with the cores.
    pub lameduck: Arc<AtomicBool>,
    /// Settings reload counters.
    pub reloads: Arc<crate::reload::ReloadStats>,
    /// The control thread's HTTP listeners (`ops`, `api`) and their counters.
    pub http: Vec<(&'static str, Arc<crate::http::ListenerStats>)>,
    /// Block lists: readiness (`blocking.allowDegraded`) and metrics.
    pub blocking: Arc<crate::blocking::Shared>,
    /// Zones: `/internal/zones` and metrics; `None` when no zone manager runs (the route
    /// then answers 404, as on a node without zones).
    pub zones: Option<Arc<crate::zones::Shared>>,
    /// The query log: its counters; `None` in tests.
    pub querylog: Option<crate::querylog::QueryLog>,
    /// Forwarding-loop probes: the last round's verdicts; `None` in tests.
    pub loops: Option<Arc<crate::loop_probe::LoopProbes>>,
    /// The fleet: `kudurru_cluster_connected`, `kudurru_cluster_leader`; `None` in tests.
    pub cluster: Option<crate::cluster::ClusterHandle>,
}

/// Whether a peer may change lameduck: loopback only, since the ops listener has no
/// authentication (IPv4-mapped loopback counts).
pub fn may_change_state(peer: Option<IpAddr>) -> bool {
    match peer {
        Some(IpAddr::V4(v4)) => v4.is_loopback(),
        Some(IpAddr::V6(v6)) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        None => false,
    }
}

/// Answers ops requests: every route is cheap (atomics only), so it runs on the control
/// thread itself; a request body is never read (hyper closes the connection rather than wait
/// for one the route does not need).
pub fn handler(state: Arc<OpsState>) -> Handler {
    Arc::new(move |request: Request, peer: SocketAddr| {
        let (status, content_type, body) = route(
            &state,
            request.method(),
            request.uri().path(),
            Some(peer.ip()),
        );
        Box::pin(std::future::ready(respond(status, content_type, body)))
    })
}

fn route(
    state: &OpsState,
    method: &Method,
    path: &str,
    peer: Option<IpAddr>,
) -> (u16, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    const JSON: &str = "application/json";
    let read = *method == Method::GET || *method == Method::HEAD;
    if path == "/lameduck" {
        let lameduck =
            |state: &OpsState| format!("{{\"lameduck\":{}}}\n", state.lameduck.load(Relaxed));
        let change = *method == Method::POST || *method == Method::DELETE;
        return match () {
            () if read => (200, JSON, lameduck(state)),
            () if change && !may_change_state(peer) => (
                403,
                JSON,
                "{\"code\":\"forbidden\",\"message\":\"lameduck changes only from loopback peers\"}\n".into(),
            ),
            () if change => {
                let on = *method == Method::POST;
                if state.lameduck.swap(on, Relaxed) != on {
                    tracing::warn!(lameduck = on, ?peer, "lameduck changed over the ops listener");
                }
                (200, JSON, lameduck(state))
            }
            () => (405, TEXT, "method not allowed\n".into()),
        };
    }
    if !read {
        return (405, TEXT, "method not allowed\n".into());
    }
    match path {
        "/healthz/live" => (200, TEXT, "ok\n".into()),
        "/healthz/ready" if state.lameduck.load(Relaxed) => {
            (503, TEXT, "not ready: lameduck (draining)\n".into())
        }
        "/healthz/ready" if !(state.ready)() => (
            503,
            TEXT,
            "not ready: listeners are still starting\n".into(),
        ),
        "/healthz/ready" => match state.blocking.unready() {
            None => (200, TEXT, "ready\n".into()),
            Some(why) => (503, TEXT, format!("not ready: {why}\n")),
        },
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            render_metrics(state),
        ),
        "/internal/zones" if read => match &state.zones {
            Some(zones) => (200, JSON, format!("{}\n", zones.internal_json())),
            None => (404, TEXT, "not found\n".into()),
        },
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

/// A counter family with one label: HELP, TYPE, then `name{label="value"} count` per row.
fn labelled<V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    rows: impl IntoIterator<Item = (V, u64)>,
) {
    head(out, name, "counter", help);
    for (value, count) in rows {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {count}");
    }
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
    labelled(
        &mut out,
        "kudurru_dns_responses_total",
        "DNS responses by rcode; rcode=\"none\" counts drops (nothing sent).",
        "rcode",
        RCODE_LABELS
            .iter()
            .enumerate()
            .map(|(i, label)| (label, sum(m, |c| c.responses[i].load(Relaxed)))),
    );
    labelled(
        &mut out,
        "kudurru_acl_refused_total",
        "Queries from clients outside server.allow/server.deny, by what they got (server.aclAction).",
        "action",
        ACL_ACTION_LABELS
            .iter()
            .enumerate()
            .map(|(i, label)| (label, sum(m, |c| c.acl_refused[i].load(Relaxed)))),
    );
    let cache: [(&str, &str, &str, Counter); 7] = [
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
        (
            "kudurru_client_connections",
            "gauge",
            "Client connections (TCP, DoT, DoH, DoQ, DoH3) open on the core, sampled once a second.",
            |c| c.client_connections.load(Relaxed),
        ),
    ];
    let ratelimit: [(&str, &str, &str, Counter); 5] = [
        (
            "kudurru_ratelimit_dropped_total",
            "counter",
            "Queries over their client's rate that were dropped (nothing sent).",
            |c| c.ratelimit.dropped.load(Relaxed),
        ),
        (
            "kudurru_ratelimit_slipped_total",
            "counter",
            "Queries over their client's rate answered with an empty TC=1 (slip).",
            |c| c.ratelimit.slipped.load(Relaxed),
        ),
        (
            "kudurru_ratelimit_evictions_total",
            "counter",
            "Token buckets displaced before they were idle (table pressure).",
            |c| c.ratelimit.evictions.load(Relaxed),
        ),
        (
            "kudurru_ratelimit_buckets",
            "gauge",
            "Token buckets in use.",
            |c| c.ratelimit.buckets.load(Relaxed),
        ),
        (
            "kudurru_ratelimit_buckets_capacity",
            "gauge",
            "Token buckets the core's table holds (fixed memory).",
            |c| c.ratelimit.capacity.load(Relaxed),
        ),
    ];
    for (name, kind, help, get) in cache.into_iter().chain(ratelimit) {
        head(&mut out, name, kind, help);
        for (core, cm) in m.iter().enumerate() {
            let _ = writeln!(out, "{name}{{core=\"{core}\"}} {}", get(cm));
        }
    }
    let plain: [(&str, &str, Counter); 17] = [
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
            "kudurru_stale_answers_total",
            "Expired answers served stale (TTL 30, EDE 3) because every upstream failed or upstream.staleAnswerTimeout passed (RFC 8767).",
            |c| c.stale_answers.load(Relaxed),
        ),
        (
            "kudurru_prefetch_total",
            "Background refreshes started by a hit in the last tenth of an answer's TTL (cache.prefetch).",
            |c| c.prefetches.load(Relaxed),
        ),
        (
            "kudurru_refresh_failures_total",
            "Background refreshes (prefetches, stale answers' refreshes) whose upstreams all failed; the cached answer was kept.",
            |c| c.refresh_failures.load(Relaxed),
        ),
        (
            "kudurru_tcp_refused_total",
            "Client connections (TCP, DoT, DoH, DoQ, DoH3) refused at once: per-core limit reached and none could be closed for them.",
            |c| c.tcp_refused.load(Relaxed),
        ),
        (
            "kudurru_tcp_refused_per_client_total",
            "Client connections refused at once: their client prefix held tcp.maxConnectionsPerClient (TCP, DoT, DoH) or quic.maxConnectionsPerClient (DoQ, DoH3) on the core.",
            |c| c.tcp_refused_per_client.load(Relaxed),
        ),
        (
            "kudurru_tcp_evicted_total",
            "Client connections closed to admit a new one on a full core: the one longest without a query.",
            |c| c.tcp_evicted.load(Relaxed),
        ),
        (
            "kudurru_tcp_timeouts_total",
            "Client connections closed for idleness or slowness (and DoQ/DoH3 streams whose query did not arrive in time).",
            |c| c.tcp_timeouts.load(Relaxed),
        ),
        (
            "kudurru_zone_transfers_served_total",
            "Zone transfers (AXFR, IXFR) served whole to secondaries over TCP or DoT.",
            |c| c.transfers_served.load(Relaxed),
        ),
        (
            "kudurru_zone_transfers_refused_total",
            "Zone transfer requests refused: address not in allowTransfer, TSIG missing or wrong, malformed.",
            |c| c.transfers_refused.load(Relaxed),
        ),
        (
            "kudurru_tls_handshakes_total",
            "TLS handshakes completed on encrypted listeners (DoT, DoH, and QUIC's for DoQ and DoH3).",
            |c| c.tls_handshakes.load(Relaxed),
        ),
        (
            "kudurru_tls_handshake_failures_total",
            "TLS handshakes that failed or did not finish within tls.handshakeTimeout.",
            |c| c.tls_handshake_failures.load(Relaxed),
        ),
        (
            "kudurru_doq_protocol_errors_total",
            "DNS-over-QUIC connections closed with DOQ_PROTOCOL_ERROR (RFC 9250 §4.3.3).",
            |c| c.doq_protocol_errors.load(Relaxed),
        ),
        (
            "kudurru_shutdown_connections_cut_total",
            "Client connections still open when server.shutdownGrace ran out at shutdown, cut.",
            |c| c.shutdown_connections_cut.load(Relaxed),
        ),
        (
            "kudurru_shutdown_queries_abandoned_total",
            "Client queries still being resolved when server.shutdownGrace ran out at shutdown, abandoned.",
            |c| c.shutdown_queries_abandoned.load(Relaxed),
        ),
    ];
    for (name, help, get) in plain {
        head(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", sum(m, get));
    }
    // The query log's cores' side (issue 36).
    let querylog: [(&str, &str, Counter); 2] = [
        (
            "kudurru_querylog_records_total",
            "Query-log records written by the cores (one per answered or dropped query while the query log is on).",
            |c| c.querylog_records.load(Relaxed),
        ),
        (
            "kudurru_querylog_dropped_total",
            "Query-log records dropped on a core because the channel to the control thread was full (the core never waits).",
            |c| c.querylog_dropped.load(Relaxed),
        ),
    ];
    for (name, help, get) in querylog {
        head(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", sum(m, get));
    }
    labelled(
        &mut out,
        "kudurru_doh_connections_total",
        "DNS-over-HTTPS connections accepted, by HTTP version (ALPN).",
        "version",
        HttpVersion::ALL.map(|v| {
            let count = sum(m, |c| c.doh_connections[v as usize].load(Relaxed));
            (v.label(), count)
        }),
    );
    labelled(
        &mut out,
        "kudurru_doh_rejected_total",
        "DNS-over-HTTPS requests answered with an HTTP error, by status.",
        "status",
        DOH_STATUS_LABELS
            .iter()
            .enumerate()
            .map(|(i, status)| (status, sum(m, |c| c.doh_rejected[i].load(Relaxed)))),
    );

    labelled(
        &mut out,
        "kudurru_settings_reloads_total",
        "Settings-file reloads: applied (something changed) or rejected (invalid; the last good settings stay).",
        "result",
        [
            ("applied", state.reloads.applied.load(Relaxed)),
            ("rejected", state.reloads.rejected.load(Relaxed)),
        ],
    );
    head(
        &mut out,
        "kudurru_http_connections_total",
        "counter",
        "Connections to the control thread's HTTP listeners: accepted, refused (the listener's connection limit) or failed accepts (file descriptors or memory).",
    );
    for (listener, stats) in &state.http {
        for (result, count) in [
            ("accepted", &stats.accepted),
            ("refused", &stats.refused),
            ("accept_error", &stats.accept_errors),
        ] {
            let _ = writeln!(
                out,
                "kudurru_http_connections_total{{listener=\"{listener}\",result=\"{result}\"}} {}",
                count.load(Relaxed)
            );
        }
    }
    let settings = state.settings.load();
    // By counter slot: the global upstreams, then the forward zones' other upstreams together.
    let mut upstreams: Vec<(usize, String)> = settings
        .upstreams
        .iter()
        .take(MAX_UPSTREAMS)
        .map(ToString::to_string)
        .enumerate()
        .collect();
    if !settings.zones.forwards().is_empty() {
        upstreams.push((FORWARD_ZONES, "forward-zones".to_owned()));
    }
    head(
        &mut out,
        "kudurru_upstream_queries_total",
        "counter",
        "Queries sent to each upstream.",
    );
    for &(i, ref name) in &upstreams {
        let _ = writeln!(
            out,
            "kudurru_upstream_queries_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstream(i).queries.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_errors_total",
        "counter",
        "Failed upstream attempts by kind.",
    );
    for &(i, ref name) in &upstreams {
        for kind in UpstreamError::ALL {
            let v = sum(m, |c| c.upstream(i).errors[kind as usize].load(Relaxed));
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
    for &(i, ref name) in &upstreams {
        let _ = writeln!(
            out,
            "kudurru_upstream_mismatched_replies_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstream(i).mismatched.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_tcp_retries_total",
        "counter",
        "Truncated UDP replies retried over TCP.",
    );
    for &(i, ref name) in &upstreams {
        let _ = writeln!(
            out,
            "kudurru_upstream_tcp_retries_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstream(i).tcp_retries.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_tcp_connections_total",
        "counter",
        "TCP connections opened to the upstream (reused for many queries).",
    );
    for &(i, ref name) in &upstreams {
        let _ = writeln!(
            out,
            "kudurru_upstream_tcp_connections_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstream(i).tcp_connections.load(Relaxed))
        );
    }
    // Encrypted upstreams (issue 37, DoT/DoH): one contiguous block.
    for (metric, help, counter) in [
        (
            "kudurru_upstream_tls_handshakes_total",
            "TLS handshakes completed with the upstream (DoT, DoH, DoQ, DoH3): one per connection opened.",
            (|c: &kudurru_transports::metrics::UpstreamCounters| &c.tls_handshakes)
                as fn(
                    &kudurru_transports::metrics::UpstreamCounters,
                ) -> &std::sync::atomic::AtomicU64,
        ),
        (
            "kudurru_upstream_tls_resumed_total",
            "TLS handshakes with the upstream that resumed an earlier session.",
            |c| &c.tls_resumed,
        ),
        (
            "kudurru_upstream_tls_failures_total",
            "TLS handshakes refused: the upstream's certificate failed verification or its key matched no SPKI pin.",
            |c| &c.tls_failures,
        ),
        // DoQ and DoH3 (u-quic): their handshakes and refusals are in the tls_* series.
        (
            "kudurru_upstream_quic_connections_total",
            "QUIC connections opened to the upstream (DoQ, DoH3; reused for many queries).",
            |c| &c.quic_connections,
        ),
    ] {
        head(&mut out, metric, "counter", help);
        for &(i, ref name) in &upstreams {
            let _ = writeln!(
                out,
                "{metric}{{upstream=\"{name}\"}} {}",
                sum(m, |c| counter(c.upstream(i)).load(Relaxed))
            );
        }
    }
    // Forwarding loops (issue 32 item 9): one gauge per probed upstream of the last round.
    if let Some(loops) = &state.loops {
        head(
            &mut out,
            "kudurru_upstream_loop_detected",
            "gauge",
            "1 while the last forwarding-loop probe sent to the upstream came back to kudurru as a client query (a loop through it), else 0; upstreams not probed (encrypted) have no series.",
        );
        for probe in loops.statuses() {
            if !matches!(probe.verdict, crate::loop_probe::Verdict::NotProbed { .. }) {
                let _ = writeln!(
                    out,
                    "kudurru_upstream_loop_detected{{upstream=\"{}\"}} {}",
                    probe.upstream,
                    u8::from(probe.looping())
                );
            }
        }
    }
    head(
        &mut out,
        "kudurru_upstream_latency_seconds",
        "histogram",
        "Latency of answered upstream queries.",
    );
    for &(i, ref name) in &upstreams {
        let mut cumulative = 0;
        for (b, bound) in LATENCY_BOUNDS.iter().enumerate() {
            cumulative += sum(m, |c| c.upstream(i).latency_buckets[b].load(Relaxed));
            let _ = writeln!(
                out,
                "kudurru_upstream_latency_seconds_bucket{{upstream=\"{name}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += sum(m, |c| {
            c.upstream(i).latency_buckets[LATENCY_BOUNDS.len()].load(Relaxed)
        });
        let _ = writeln!(
            out,
            "kudurru_upstream_latency_seconds_bucket{{upstream=\"{name}\",le=\"+Inf\"}} {cumulative}"
        );
        let sum_us = sum(m, |c| c.upstream(i).latency_sum_us.load(Relaxed));
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
    render_answers(m, &mut out);
    // Health (upstream.strategy, issue 37).
    head(
        &mut out,
        "kudurru_upstream_healthy",
        "gauge",
        "1 while the upstream is in rotation on every core, 0 while a core holds it down (probed every upstream.healthCheckInterval).",
    );
    for &(i, ref name) in upstreams.iter().filter(|(i, _)| *i != FORWARD_ZONES) {
        let down = sum(m, |c| c.upstream(i).down.load(Relaxed));
        let _ = writeln!(
            out,
            "kudurru_upstream_healthy{{upstream=\"{name}\"}} {}",
            u8::from(down == 0)
        );
    }
    head(
        &mut out,
        "kudurru_upstream_health_probes_total",
        "counter",
        "Health probes sent to upstreams that were down.",
    );
    for &(i, ref name) in &upstreams {
        let _ = writeln!(
            out,
            "kudurru_upstream_health_probes_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstream(i).probes.load(Relaxed))
        );
    }
    head(
        &mut out,
        "kudurru_upstream_health_probe_failures_total",
        "counter",
        "Health probes that got no good answer (the upstream stays down).",
    );
    for &(i, ref name) in &upstreams {
        let _ = writeln!(
            out,
            "kudurru_upstream_health_probe_failures_total{{upstream=\"{name}\"}} {}",
            sum(m, |c| c.upstream(i).probe_failures.load(Relaxed))
        );
    }
    let index = state.blocking.publisher.index();
    state.blocking.metrics.render(&index, &mut out);
    if let Some(zones) = &state.zones {
        zones.render_metrics(&mut out);
    }
    if let Some(querylog) = &state.querylog {
        querylog.render_metrics(&mut out);
    }
    if let Some(cluster) = &state.cluster {
        render_cluster(cluster, &mut out);
    }
    out
}

/// The fleet's gauges (a single node is connected and leads).
/// Answer latency per core and transport, answers per core and source (issue 39).
fn render_answers(m: &[Arc<CoreMetrics>], out: &mut String) {
    head(
        out,
        "kudurru_answer_latency_seconds",
        "histogram",
        "Time from a query's receipt (for UDP, its receive batch) to its answer's hand-over to the send path, by core and transport.",
    );
    let bounds = answer_latency_bounds();
    for (core, cm) in m.iter().enumerate() {
        for t in Transport::ALL {
            let histogram = &cm.answer_latency[t as usize];
            let labels = format!("core=\"{core}\",transport=\"{}\"", t.label());
            let mut cumulative = 0;
            for (bucket, bound) in histogram.buckets.iter().zip(&bounds) {
                cumulative += bucket.load(Relaxed);
                let _ = writeln!(
                    out,
                    "kudurru_answer_latency_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            cumulative += histogram.buckets[bounds.len()].load(Relaxed);
            let _ = writeln!(
                out,
                "kudurru_answer_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "kudurru_answer_latency_seconds_sum{{{labels}}} {}",
                histogram.sum_ns.load(Relaxed) as f64 / 1e9
            );
            let _ = writeln!(
                out,
                "kudurru_answer_latency_seconds_count{{{labels}}} {cumulative}"
            );
        }
    }
    head(
        out,
        "kudurru_answers_total",
        "counter",
        "Answers sent, by core and source: cache (stale answers included), upstream, local (local zones and built-in names), blocked (policy answers), other (error answers such as FORMERR, NOTIMP, REFUSED, SERVFAIL).",
    );
    for (core, cm) in m.iter().enumerate() {
        for source in AnswerSource::ALL {
            let _ = writeln!(
                out,
                "kudurru_answers_total{{core=\"{core}\",source=\"{}\"}} {}",
                source.label(),
                cm.answers[source as usize].load(Relaxed)
            );
        }
    }
}

fn render_cluster(cluster: &crate::cluster::ClusterHandle, out: &mut String) {
    head(
        out,
        "kudurru_cluster_connected",
        "gauge",
        "1 while this node's etcd lease is kept alive (always 1 with cluster.driver = none).",
    );
    let _ = writeln!(
        out,
        "kudurru_cluster_connected {}",
        u8::from(cluster.connected())
    );
    head(
        out,
        "kudurru_cluster_leader",
        "gauge",
        "1 while this node leads the fleet's periodic work (list fetching, transfers, audit pruning).",
    );
    let _ = writeln!(
        out,
        "kudurru_cluster_leader {}",
        u8::from(cluster.leadership().is_leader())
    );
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
            lameduck: Arc::new(AtomicBool::new(false)),
            reloads: Arc::default(),
            http: vec![("ops", Arc::default())],
            blocking: synced_blocking(),
            zones: None,
            querylog: None,
            loops: None,
            cluster: None,
        }
    }

    /// Blocking state with no lists, read from the store.
    fn synced_blocking() -> Arc<crate::blocking::Shared> {
        let settings = Config::default().validate().unwrap().settings;
        let publisher = Arc::new(crate::blocking::Publisher::new(Arc::new(
            ArcSwap::from_pointee(settings),
        )));
        let shared = crate::blocking::Shared::new(
            publisher,
            Arc::new(crate::blocking::CoreEngine::new()),
            false,
        );
        shared.set_unloaded(Vec::new());
        Arc::new(shared)
    }

    const LOCAL: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[test]
    fn only_loopback_peers_may_change_lameduck() {
        for peer in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(may_change_state(Some(peer.parse().unwrap())), "{peer}");
        }
        for peer in [
            "192.0.2.1",
            "10.0.0.1",
            "2001:db8::1",
            "::ffff:192.0.2.1",
            "::",
        ] {
            assert!(!may_change_state(Some(peer.parse().unwrap())), "{peer}");
        }
        assert!(!may_change_state(None), "unknown peer (unix socket)");
        let s = state(Arc::new(AtomicBool::new(true)));
        let remote = Some("192.0.2.1".parse().unwrap());
        let (delete, get, post) = (Method::DELETE, Method::GET, Method::POST);
        assert_eq!(route(&s, &post, "/lameduck", remote).0, 403);
        assert!(!s.lameduck.load(Relaxed), "a refused POST changes nothing");
        assert_eq!(route(&s, &get, "/lameduck", remote).1, "application/json");
        assert_eq!(
            route(&s, &post, "/lameduck", LOCAL).2,
            "{\"lameduck\":true}\n"
        );
        assert_eq!(route(&s, &get, "/healthz/ready", LOCAL).0, 503);
        assert_eq!(route(&s, &delete, "/lameduck", remote).0, 403);
        assert!(s.lameduck.load(Relaxed));
        assert_eq!(
            route(&s, &delete, "/lameduck", LOCAL).2,
            "{\"lameduck\":false}\n"
        );
        assert_eq!(route(&s, &get, "/healthz/ready", LOCAL).0, 200);
    }

    #[test]
    fn readiness_is_503_until_listeners_are_up() {
        let ready = Arc::new(AtomicBool::new(false));
        let s = state(ready.clone());
        assert_eq!(route(&s, &Method::GET, "/healthz/ready", LOCAL).0, 503);
        assert_eq!(route(&s, &Method::GET, "/healthz/live", LOCAL).0, 200);
        ready.store(true, Relaxed);
        assert_eq!(route(&s, &Method::GET, "/healthz/ready", LOCAL).0, 200);
        assert_eq!(route(&s, &Method::POST, "/healthz/ready", LOCAL).0, 405);
    }

    #[test]
    fn a_list_that_never_loaded_holds_readiness_unless_degraded_is_allowed() {
        let s = state(Arc::new(AtomicBool::new(true)));
        s.blocking.set_unloaded(vec!["ads".into()]);
        let (status, _, body) = route(&s, &Method::GET, "/healthz/ready", LOCAL);
        assert_eq!(status, 503);
        assert!(
            body.contains("ads") && body.contains("blocking.allowDegraded"),
            "{body}"
        );
        s.blocking.set_allow_degraded(true);
        assert_eq!(route(&s, &Method::GET, "/healthz/ready", LOCAL).0, 200);
        s.blocking.set_allow_degraded(false);
        s.blocking.set_unloaded(Vec::new());
        assert_eq!(route(&s, &Method::GET, "/healthz/ready", LOCAL).0, 200);
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
        s.http[0].1.refused.fetch_add(3, Relaxed);
        let text = render_metrics(&s);
        assert!(
            text.contains("kudurru_http_connections_total{listener=\"ops\",result=\"refused\"} 3")
        );
    }
}
