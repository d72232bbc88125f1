//! Per-core counters, written by one core with relaxed atomics and read by the control thread.
//!
//! Each core owns one [`CoreMetrics`] (cache-line aligned, so cores never share a line); the ops
//! listener sums them when it renders `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Client-facing transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// DNS over UDP.
    Udp,
    /// DNS over TCP.
    Tcp,
    /// DNS over TLS (RFC 7858).
    Dot,
    /// DNS over HTTPS (RFC 8484), HTTP/2 and HTTP/1.1.
    Doh,
    /// DNS over QUIC (RFC 9250).
    Doq,
    /// DNS over HTTPS on HTTP/3.
    Doh3,
}

impl Transport {
    /// The query log's spelling of the transport.
    pub fn querylog(self) -> kudurru_core::querylog::Transport {
        use kudurru_core::querylog::Transport as Log;
        match self {
            Self::Udp => Log::Udp,
            Self::Tcp => Log::Tcp,
            Self::Dot => Log::Dot,
            Self::Doh => Log::Doh,
            Self::Doq => Log::Doq,
            Self::Doh3 => Log::Doh3,
        }
    }

    /// All transports, in metric order.
    pub const ALL: [Self; 6] = [
        Self::Udp,
        Self::Tcp,
        Self::Dot,
        Self::Doh,
        Self::Doq,
        Self::Doh3,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Dot => "dot",
            Self::Doh => "doh",
            Self::Doq => "doq",
            Self::Doh3 => "doh3",
        }
    }
}

/// HTTP versions of DNS-over-HTTPS connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/2 (ALPN `h2`).
    H2,
    /// HTTP/1.1 (ALPN `http/1.1`, or none).
    Http1,
    /// HTTP/3 (ALPN `h3`, on a QUIC listener of its own).
    H3,
}

impl HttpVersion {
    /// All versions, in metric order.
    pub const ALL: [Self; 3] = [Self::H2, Self::Http1, Self::H3];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::H2 => "h2",
            Self::Http1 => "http/1.1",
            Self::H3 => "h3",
        }
    }
}

/// Every error status DNS over HTTPS answers with, the labels of
/// `kudurru_doh_rejected_total{status=...}`.
pub const DOH_STATUS_LABELS: [u16; 9] = [400, 404, 405, 408, 411, 413, 415, 431, 501];

/// Labels of `kudurru_dns_responses_total{rcode=...}`; `none` counts drops (nothing sent).
pub const RCODE_LABELS: [&str; 8] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other", "none",
];
const RCODE_NONE: usize = 7;
const RCODE_OTHER: usize = 6;

/// Labels of `kudurru_acl_refused_total{action=...}`, in [`kudurru_core::AclAction`] order.
pub const ACL_ACTION_LABELS: [&str; 2] = ["refuse", "drop"];

/// Most upstreams tracked per core; further ones share the last slot.
pub const MAX_UPSTREAMS: usize = 16;

/// The counter slot ([`CoreMetrics::upstream`]) of the forward zones' upstreams that are not
/// also global upstreams: counted together, as `upstream="forward-zones"`.
pub const FORWARD_ZONES: usize = usize::MAX;

/// Upper bounds (seconds) of the upstream latency histogram buckets.
pub const LATENCY_BOUNDS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
];

// Answer latency and answers by source (issue 39): one contiguous block.
/// Upper bounds (nanoseconds) of the answer latency histogram's buckets: fine enough for
/// cache hits (tens of µs), wide enough for misses (seconds); a last bucket is +Inf.
pub const ANSWER_LATENCY_BOUNDS_NS: [u64; 17] = [
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
];

/// [`ANSWER_LATENCY_BOUNDS_NS`] in seconds, as `/metrics` renders them.
pub fn answer_latency_bounds() -> [f64; 17] {
    ANSWER_LATENCY_BOUNDS_NS.map(|ns| ns as f64 / 1e9)
}

/// Where an answer came from, the labels of `kudurru_answers_total{source=...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerSource {
    /// The cache (either tier), stale answers (RFC 8767) included.
    Cache,
    /// An upstream, after a miss.
    Upstream,
    /// Local data: an authoritative or forward-less zone, CHAOS names, the health name, a
    /// zone transfer (NOERROR or NXDOMAIN answered here).
    Local,
    /// A policy's answer: a block answer, a rewrite, CNAME cloaking.
    Blocked,
    /// An error answered here: FORMERR, NOTIMP, REFUSED, SERVFAIL when every upstream failed.
    Other,
}

impl AnswerSource {
    /// All sources, in metric order.
    pub const ALL: [Self; 5] = [
        Self::Cache,
        Self::Upstream,
        Self::Local,
        Self::Blocked,
        Self::Other,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Cache => "cache",
            Self::Upstream => "upstream",
            Self::Local => "local",
            Self::Blocked => "blocked",
            Self::Other => "other",
        }
    }

    /// The source of an answer whose query-log source is `source` and whose rcode is `rcode`:
    /// the query log's `local` splits into local data (NOERROR, NXDOMAIN) and error answers.
    pub fn of(source: kudurru_core::querylog::Source, rcode: u8) -> Self {
        use kudurru_core::querylog::Source as Log;
        match source {
            Log::Cache | Log::Stale => Self::Cache,
            Log::Upstream => Self::Upstream,
            Log::Policy => Self::Blocked,
            Log::Local if rcode == 0 || rcode == 3 => Self::Local,
            Log::Local | Log::Dropped => Self::Other,
        }
    }
}

/// The answer latency histogram of one transport on one core: from the query's receipt to
/// its answer's hand-over to the send path.
#[derive(Debug, Default)]
pub struct AnswerLatency {
    /// Answers per bucket ([`ANSWER_LATENCY_BOUNDS_NS`] plus +Inf), not cumulative.
    pub buckets: [AtomicU64; ANSWER_LATENCY_BOUNDS_NS.len() + 1],
    /// Sum of the answers' latencies, nanoseconds.
    pub sum_ns: AtomicU64,
}

/// Answers counted by one core, by source, kept in a local tally for a batch and added to
/// [`CoreMetrics::answers`] once ([`CoreMetrics::add_answers`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct AnswerTally(pub [u64; AnswerSource::ALL.len()]);

impl AnswerTally {
    /// Counts one answer.
    pub fn count(&mut self, source: AnswerSource) {
        self.0[source as usize] += 1;
    }
}

/// Adds `n` to a counter only its own core writes: a load and a store, no read-modify-write
/// instruction (the control thread only reads it).
fn add_own(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// Why an upstream attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamError {
    /// No reply in time.
    Timeout,
    /// Socket or connection error.
    Network,
    /// A reply that was malformed or carried a failing rcode.
    BadReply,
}

impl UpstreamError {
    /// All kinds, in metric order.
    pub const ALL: [Self; 3] = [Self::Timeout, Self::Network, Self::BadReply];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Network => "network",
            Self::BadReply => "bad_reply",
        }
    }
}

/// Counters for one upstream on one core.
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    /// Queries sent.
    pub queries: AtomicU64,
    /// Failures by [`UpstreamError`].
    pub errors: [AtomicU64; 3],
    /// Replies ignored because their ID, source or question did not match (spoofing resistance).
    pub mismatched: AtomicU64,
    /// Truncated UDP replies retried over TCP.
    pub tcp_retries: AtomicU64,
    /// TCP connections opened to the upstream (each core keeps one and reuses it).
    pub tcp_connections: AtomicU64,
    // Encrypted upstreams (issue 37, DoT/DoH): one contiguous block.
    /// TLS handshakes completed with the upstream (one per connection opened).
    pub tls_handshakes: AtomicU64,
    /// Of those, handshakes that resumed an earlier session (no certificate sent again).
    pub tls_resumed: AtomicU64,
    /// Handshakes refused because the upstream's certificate failed verification or its key
    /// matched none of the name's SPKI pins.
    pub tls_failures: AtomicU64,
    // DoQ and DoH3 upstreams (u-quic; their handshakes and refusals are counted in the
    // tls_* counters above).
    /// QUIC connections opened to the upstream (reused for many queries).
    pub quic_connections: AtomicU64,
    /// Latency histogram of answered queries, cumulative per [`LATENCY_BOUNDS`] plus +Inf.
    pub latency_buckets: [AtomicU64; 13],
    /// Sum of answered latencies, microseconds.
    pub latency_sum_us: AtomicU64,
    // Health (upstream.strategy, issue 37).
    /// 1 while this core has the upstream out of rotation (down), else 0: a gauge.
    pub down: AtomicU64,
    /// Health probes sent to the upstream while it was down.
    pub probes: AtomicU64,
    /// Health probes that got no good answer.
    pub probe_failures: AtomicU64,
}

/// Cache counters mirrored from the core's shard and L1 (the core copies them once a second).
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Answers served from the cache (either tier).
    pub hits: AtomicU64,
    /// Lookups that had to go to the owner core or upstream.
    pub misses: AtomicU64,
    /// Entries held in the core's shard.
    pub entries: AtomicU64,
    /// Entries held in the core's L1 of other cores' answers.
    pub l1_entries: AtomicU64,
    /// Fresh entries evicted for room.
    pub evictions: AtomicU64,
    /// Expired entries reclaimed.
    pub expired: AtomicU64,
}

/// Rate-limiter counters mirrored from the core's limiter (copied once a second).
#[derive(Debug, Default)]
pub struct RateLimitCounters {
    /// Limited queries dropped.
    pub dropped: AtomicU64,
    /// Limited queries answered TC=1.
    pub slipped: AtomicU64,
    /// Buckets displaced before they were idle (table pressure).
    pub evictions: AtomicU64,
    /// Buckets in use.
    pub buckets: AtomicU64,
    /// Buckets the table holds.
    pub capacity: AtomicU64,
}

/// All counters of one core.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CoreMetrics {
    /// Queries received, by [`Transport`].
    pub queries: [AtomicU64; Transport::ALL.len()],
    /// Responses by rcode label ([`RCODE_LABELS`]).
    pub responses: [AtomicU64; 8],
    /// Cache counters.
    pub cache: CacheCounters,
    /// Rate-limiter counters.
    pub ratelimit: RateLimitCounters,
    /// Queries from clients outside `server.allow`/`server.deny`, by what they got
    /// ([`ACL_ACTION_LABELS`]: a REFUSED answer, or nothing).
    pub acl_refused: [AtomicU64; 2],
    /// Misses sent to the owning core.
    pub cross_core_lookups: AtomicU64,
    /// Misses that joined an identical in-flight upstream query.
    pub coalesced: AtomicU64,
    /// Queries answered SERVFAIL because every upstream failed.
    pub upstream_exhausted: AtomicU64,
    /// Expired answers served stale (RFC 8767).
    pub stale_answers: AtomicU64,
    /// Background refreshes started for answers in the last tenth of their lifetime.
    pub prefetches: AtomicU64,
    /// Background refreshes (prefetches, stale answers' refreshes) that failed.
    pub refresh_failures: AtomicU64,
    /// Connections (TCP, DoT, DoH, DoQ, DoH3) refused because the per-core limit was reached
    /// and no connection could be closed for them.
    pub tcp_refused: AtomicU64,
    /// Connections refused because their client prefix held its per-client limit.
    pub tcp_refused_per_client: AtomicU64,
    /// Connections closed because they were the longest idle when the core was full.
    pub tcp_evicted: AtomicU64,
    /// Client connections open on the core (a gauge, sampled once a second).
    pub client_connections: AtomicU64,
    /// TCP connections closed for idleness or slowness.
    pub tcp_timeouts: AtomicU64,
    /// Zone transfers (AXFR, IXFR) served whole over TCP or DoT.
    pub transfers_served: AtomicU64,
    /// Zone transfer requests refused (address, TSIG, malformed).
    pub transfers_refused: AtomicU64,
    /// TLS handshakes completed (DoT, DoH, and QUIC's for DoQ and DoH3).
    pub tls_handshakes: AtomicU64,
    /// TLS handshakes that failed or did not finish within `tls.handshakeTimeout`.
    pub tls_handshake_failures: AtomicU64,
    /// DNS-over-HTTPS connections accepted, by [`HttpVersion`].
    pub doh_connections: [AtomicU64; HttpVersion::ALL.len()],
    /// DNS-over-QUIC connections closed for a protocol error (RFC 9250 §4.3.3).
    pub doq_protocol_errors: AtomicU64,
    /// DNS-over-HTTPS requests answered with an error status, by [`DOH_STATUS_LABELS`].
    pub doh_rejected: [AtomicU64; 9],
    /// Per upstream (by index in the current upstream set).
    pub upstreams: [UpstreamCounters; MAX_UPSTREAMS],
    /// The forward zones' upstreams that are not global upstreams, together.
    pub forward_zone_upstreams: UpstreamCounters,
    /// Client connections still open when `server.shutdownGrace` ran out, cut (crate::drain).
    pub shutdown_connections_cut: AtomicU64,
    /// Client queries still being resolved when `server.shutdownGrace` ran out, abandoned.
    pub shutdown_queries_abandoned: AtomicU64,
    /// Query-log records written by the core, counted as each batch is handed over or dropped
    /// (`kudurru_querylog_records_total`).
    pub querylog_records: AtomicU64,
    /// Query-log records dropped because the channel to the control thread was full
    /// (`kudurru_querylog_dropped_total`).
    pub querylog_dropped: AtomicU64,
    /// The forwarding-loop probe round as this core sees it: the token the control thread set
    /// and the probes that came back in, by upstream (`kudurru_core::loop_probe`).
    pub loop_probe: kudurru_core::loop_probe::LoopProbe,
    // Answer latency and answers by source (issue 39): written by the core only.
    /// Answer latency, by [`Transport`] (`kudurru_answer_latency_seconds`).
    pub answer_latency: [AnswerLatency; Transport::ALL.len()],
    /// Answers sent, by [`AnswerSource`] (`kudurru_answers_total`).
    pub answers: [AtomicU64; AnswerSource::ALL.len()],
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl CoreMetrics {
    /// Counts a received query.
    pub fn query(&self, transport: Transport) {
        bump(&self.queries[transport as usize]);
    }

    /// Counts a response by its header rcode.
    pub fn response(&self, rcode: u8) {
        let slot = if usize::from(rcode) < RCODE_OTHER {
            usize::from(rcode)
        } else {
            RCODE_OTHER
        };
        bump(&self.responses[slot]);
    }

    /// Counts a drop: nothing was sent.
    pub fn dropped(&self) {
        bump(&self.responses[RCODE_NONE]);
    }

    /// Counts a query the access list refused; `answered`: a REFUSED answer goes out (its
    /// rcode is counted with the responses), otherwise nothing does (counted as a drop).
    pub fn acl_refused(&self, answered: bool) {
        bump(&self.acl_refused[usize::from(!answered)]);
        if !answered {
            self.dropped();
        }
    }

    /// Counts a DNS-over-HTTPS request rejected with `status`.
    pub fn doh_rejected(&self, status: u16) {
        let slot = DOH_STATUS_LABELS
            .iter()
            .position(|&s| s == status)
            .unwrap_or(DOH_STATUS_LABELS.len() - 1);
        bump(&self.doh_rejected[slot]);
    }

    /// The counters of upstream `index` (an index in the global set, or [`FORWARD_ZONES`]).
    pub fn upstream(&self, index: usize) -> &UpstreamCounters {
        if index == FORWARD_ZONES {
            return &self.forward_zone_upstreams;
        }
        &self.upstreams[index.min(MAX_UPSTREAMS - 1)]
    }

    /// Increments a counter.
    pub fn bump(counter: &AtomicU64) {
        bump(counter);
    }

    // Answer latency and answers by source (issue 39). The core is the only writer of these
    // counters: loads and stores, no atomic read-modify-write on the hit path.
    /// Records `answers` answers on `transport` that each took `latency` from receipt to the
    /// send path (a UDP batch shares one reading of the clock).
    pub fn answer_latency(&self, transport: Transport, latency: Duration, answers: u64) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let bucket = ANSWER_LATENCY_BOUNDS_NS
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(ANSWER_LATENCY_BOUNDS_NS.len());
        let histogram = &self.answer_latency[transport as usize];
        add_own(&histogram.buckets[bucket], answers);
        add_own(&histogram.sum_ns, ns.saturating_mul(answers));
    }

    /// Counts one answer from `source` on `transport` that took `latency`.
    pub fn answered(&self, transport: Transport, source: AnswerSource, latency: Duration) {
        add_own(&self.answers[source as usize], 1);
        self.answer_latency(transport, latency, 1);
    }

    /// Adds a batch's tally of answers by source.
    pub fn add_answers(&self, tally: &AnswerTally) {
        for (counter, &n) in self.answers.iter().zip(&tally.0) {
            if n > 0 {
                add_own(counter, n);
            }
        }
    }
}

impl UpstreamCounters {
    /// Records an answered query's latency.
    pub fn observe(&self, latency: Duration) {
        let secs = latency.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(LATENCY_BOUNDS.len());
        bump(&self.latency_buckets[bucket]);
        self.latency_sum_us
            .fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
    }

    /// Records a failed attempt.
    pub fn error(&self, kind: UpstreamError) {
        bump(&self.errors[kind as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kudurru_core::querylog::Source;

    /// A batch's answers land in one bucket together, with their summed latency; a latency
    /// past every bound lands in +Inf.
    #[test]
    fn answer_latency_counts_a_batch_in_one_bucket() {
        let m = CoreMetrics::default();
        m.answer_latency(Transport::Udp, Duration::from_micros(30), 8);
        let udp = &m.answer_latency[Transport::Udp as usize];
        assert_eq!(udp.buckets[1].load(Ordering::Relaxed), 8, "25-50 µs");
        assert_eq!(udp.sum_ns.load(Ordering::Relaxed), 8 * 30_000);
        m.answered(
            Transport::Tcp,
            AnswerSource::Upstream,
            Duration::from_secs(9),
        );
        let tcp = &m.answer_latency[Transport::Tcp as usize];
        assert_eq!(
            tcp.buckets[ANSWER_LATENCY_BOUNDS_NS.len()].load(Ordering::Relaxed),
            1
        );
        assert_eq!(
            m.answers[AnswerSource::Upstream as usize].load(Ordering::Relaxed),
            1
        );
        let mut tally = AnswerTally::default();
        tally.count(AnswerSource::Cache);
        tally.count(AnswerSource::Cache);
        m.add_answers(&tally);
        assert_eq!(
            m.answers[AnswerSource::Cache as usize].load(Ordering::Relaxed),
            2
        );
    }

    /// The query log's `local` splits by rcode: local data, or an error answered here.
    #[test]
    fn answer_sources_split_local_data_from_error_answers() {
        assert_eq!(AnswerSource::of(Source::Stale, 0), AnswerSource::Cache);
        assert_eq!(AnswerSource::of(Source::Policy, 3), AnswerSource::Blocked);
        assert_eq!(AnswerSource::of(Source::Local, 3), AnswerSource::Local);
        assert_eq!(AnswerSource::of(Source::Local, 5), AnswerSource::Other);
        assert_eq!(AnswerSource::of(Source::Local, 2), AnswerSource::Other);
        assert_eq!(
            AnswerSource::of(Source::Upstream, 2),
            AnswerSource::Upstream
        );
    }
}
